"""Tests for keras_transformer.decoding.stepper: SearchResult and the step protocol (a stepper's
log-normalizer)."""
from __future__ import annotations

import numpy as np
import pytest

from keras_transformer.decoding import (
    SearchResult,
    beam_search,
    greedy_search,
)
from tests.decoding_toys import BOS, ToyStepper, random_model


def test_search_result_to_lists():
    res = SearchResult(
        tokens=np.array([[5, 3, 1, 0], [4, 4, 4, 4], [1, 0, 0, 0]], np.int32),
        scores=np.zeros(3, np.float32),
    )
    assert res.to_lists(eos_id=1) == [[5, 3], [4, 4, 4, 4], []]


@pytest.mark.parametrize("constraints", [{}, dict(no_repeat_ngram_size=2, min_length=3)])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_stepper_given_log_normalizer_gives_the_same_search(beam_size, constraints):
    """A stepper may return (logits, logsumexp(logits)) computed by its runtime: the tokens and
    scores are those of the search normalising by itself, constrained or not."""
    eos = 1
    model = random_model(11, vocab=300, eos_id=eos, eos_bias=-1.0)
    sources = [0, 1, 2, 3]

    def search(with_normalizer):
        st = ToyStepper(model, sources, beam_size, 9)

        def step(tokens, index):
            logits = st.step(tokens, index)
            if not with_normalizer:
                return logits
            peak = logits.max(axis=1, keepdims=True).astype(np.float64)
            return logits, (peak + np.log(np.exp(logits - peak).sum(1, keepdims=True)))[:, 0]

        kwargs = dict(bos_id=BOS, eos_id=eos, max_length=9, **constraints)
        if beam_size == 1:
            return greedy_search(step, len(sources), **kwargs)
        return beam_search(step, st.reorder, len(sources), beam_size=beam_size, alpha=0.6,
                           **kwargs)

    plain, given = search(False), search(True)
    np.testing.assert_array_equal(given.tokens, plain.tokens)
    np.testing.assert_allclose(given.scores, plain.scores, rtol=1e-5)


def test_log_normalizer_of_the_wrong_shape_is_rejected():
    def step(tokens, index):
        return np.zeros((2, 5), np.float32), np.zeros(3)

    with pytest.raises(ValueError, match=r"log-normalizer of shape \(3,\); expected \(2,\)"):
        greedy_search(step, 2, bos_id=0, eos_id=1, max_length=3)
