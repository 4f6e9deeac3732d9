"""Tests for keras_transformer.decoding.dispatch: search picks greedy or beam search by its
settings."""
from __future__ import annotations

import numpy as np
import pytest

from keras_transformer.decoding import (
    SearchSettings,
    search,
)
from tests.decoding_toys import BOS, ToyStepper, random_model, run_beam, run_greedy


@pytest.mark.parametrize("beam_size", [1, 3])
def test_search_dispatches_by_beam_size(beam_size):
    model = random_model(seed=11, vocab=9, eos_id=1, eos_bias=1.0)
    sources = [0, 1, 2]
    got = search(ToyStepper(model, sources, beam_size, 6), len(sources),
                 SearchSettings(beam_size=beam_size, max_length=6, alpha=0.6), bos_id=BOS,
                 eos_id=1)
    if beam_size == 1:
        want, _ = run_greedy(model, sources, 6, eos_id=1)
    else:
        want, _ = run_beam(model, sources, beam_size, 6, eos_id=1, alpha=0.6)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_array_equal(got.scores, want.scores)


def test_search_needs_settings_with_a_max_length():
    model = random_model(seed=1, vocab=7, eos_id=1)
    stepper = ToyStepper(model, [0], 1, 4)
    with pytest.raises(ValueError, match="settings.max_length is None"):
        search(stepper, 1, SearchSettings(beam_size=1), bos_id=BOS, eos_id=1)
    with pytest.raises(TypeError, match="must be a SearchSettings"):
        search(stepper, 1, {"beam_size": 1, "max_length": 4}, bos_id=BOS, eos_id=1)
