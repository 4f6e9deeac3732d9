"""Tests for keras_transformer.decoding.settings: SearchSettings."""
from __future__ import annotations

import pytest

from keras_transformer.decoding import (
    SearchSettings,
)


@pytest.mark.parametrize("options, words", [
    ({"beam_size": 0}, "beam_size must be an integer in [1, 64], got 0"),
    ({"beam_size": 65}, "beam_size must be an integer in [1, 64], got 65"),
    ({"beam_size": True}, "beam_size must be an integer"),
    ({"beam_size": 2.5}, "beam_size must be an integer"),
    ({"beam_size": "4"}, "beam_size must be an integer"),
    ({"alpha": float("nan")}, "alpha must be a number in [0, 10], got nan"),
    ({"alpha": -0.1}, "alpha must be a number in [0, 10]"),
    ({"max_length": 0}, "max_length must be an integer >= 1 or None, got 0"),
    ({"no_repeat_ngram_size": 17}, "no_repeat_ngram_size must be an integer in [0, 16]"),
    ({"min_length": -1}, "min_length must be an integer in [0, 4096]"),
    ({"temperature": float("inf")}, "temperature must be a number in [0, 100]"),
    ({"top_k": -1}, "top_k must be an integer >= 0"),
    ({"top_p": 0.0}, "top_p must be a number in (0, 1], got 0.0"),
    ({"top_p": 1.5}, "top_p must be a number in (0, 1]"),
    ({"num_samples": 0}, "num_samples must be an integer >= 1"),
    ({"seed": -3}, "seed must be an integer >= 0 or None"),
])
def test_search_settings_refuse_a_bad_option_in_one_line_naming_it(options, words):
    with pytest.raises(ValueError) as err:
        SearchSettings(**options)
    assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"^manifest: " + list(options)[0]):
        SearchSettings.from_mapping(options, "manifest")


def test_search_settings_from_mapping_and_config():
    s = SearchSettings.from_mapping({"beam_size": 2, "alpha": 1, "min_length": 3.0})
    assert (s.beam_size, s.alpha, s.min_length, s.no_repeat_ngram_size) == (2, 1.0, 3, 0)
    assert isinstance(s.alpha, float) and isinstance(s.min_length, int)
    assert s == SearchSettings(beam_size=2, alpha=1.0, min_length=3)
    with pytest.raises(ValueError, match=r"^search: unknown search option 'beam'; the options "
                                         r"are alpha, beam_size"):
        SearchSettings.from_mapping({"beam": 2})
    with pytest.raises(ValueError, match="must be a mapping"):
        SearchSettings.from_mapping([("beam_size", 2)])

    class Eval:  # a run config's eval section: more keys than the search's
        beam_size, alpha, no_repeat_ngram_size, min_length, batch_size = 5, 0.8, 3, 7, 64

    from_config = SearchSettings.from_config(Eval(), beam_size=1, min_length=None)
    assert from_config == SearchSettings(beam_size=1, alpha=0.8, no_repeat_ngram_size=3,
                                         min_length=7)
    assert SearchSettings.from_config({"alpha": 0.2}) == SearchSettings(alpha=0.2)
    with pytest.raises(ValueError, match=r"^eval: beam_size must be"):
        SearchSettings.from_config({"beam_size": 0})
    assert from_config.replace(seed=None).seed is None
    assert from_config.given(beam_size=None, alpha=0.1) == from_config.replace(alpha=0.1)
    with pytest.raises(ValueError, match="alpha must be a number"):
        from_config.given(alpha=11)
    with pytest.raises(ValueError, match="top_k"):
        from_config.replace(top_k=-2)
    with pytest.raises(AttributeError):
        from_config.beam_size = 3  # frozen
    assert from_config.constraints == {"no_repeat_ngram_size": 3, "min_length": 7}
    assert SearchSettings(temperature=0.5, top_k=4, top_p=0.9, seed=2).sampling == {
        "temperature": 0.5, "top_k": 4, "top_p": 0.9, "seed": 2, "no_repeat_ngram_size": 0,
        "min_length": 0}
