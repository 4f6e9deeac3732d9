"""Tests for keras_transformer.decoding.sampling: top-k / top-p filters and sample_logits."""
from __future__ import annotations

import math

import numpy as np
import pytest

from keras_transformer.decoding import (
    filter_top_k,
    filter_top_p,
    sample_logits,
)


def test_top_k_one_and_temperature_zero_are_argmax():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(200, 11)).astype(np.float32)
    expected = np.argmax(logits, axis=-1)
    for temperature in (0.5, 1.0, 3.0):
        got = sample_logits(logits, rng, temperature=temperature, top_k=1)
        assert got.dtype == np.int32 and got.shape == (200,)
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(sample_logits(logits, rng, temperature=0.0), expected)


@pytest.mark.parametrize("temperature", [5e-324, 1e-310, 1e-30])
def test_a_tiny_temperature_is_argmax_without_a_warning(temperature):
    """Logits / 5e-324 overflow; scaled from each row's maximum they go to -inf instead, the
    limit of softmax(x / T) as T -> 0 (the argmax), and NumPy has nothing to warn about."""
    import warnings

    rng = np.random.default_rng(5)
    logits = rng.normal(scale=30, size=(300, 13))
    logits[:5, 3] = -np.inf  # filtered entries stay filtered
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for options in ({}, {"top_k": 4}, {"top_p": 1e-300}, {"top_k": 10**30, "top_p": 0.5}):
            got = sample_logits(logits, rng, temperature=temperature, **options)
            np.testing.assert_array_equal(got, np.argmax(logits, axis=-1))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_frequencies_match_softmax(temperature):
    logits = np.array([1.0, 0.2, -0.5, 2.0, 0.0])
    draws = 20_000
    rng = np.random.default_rng(1234)
    got = sample_logits(np.tile(logits, (draws, 1)), rng, temperature=temperature)
    freq = np.bincount(got, minlength=5) / draws
    probs = np.exp(logits / temperature) / np.exp(logits / temperature).sum()
    np.testing.assert_allclose(freq, probs, atol=0.012)


def test_filtered_tokens_never_sampled():
    logits = np.array([0.5, 2.0, 1.0, -1.0, 1.9, 0.0])
    draws = 5_000
    tiled = np.tile(logits, (draws, 1))
    rng = np.random.default_rng(7)

    got = sample_logits(tiled, rng, top_k=2)
    assert set(np.unique(got).tolist()) == {1, 4}
    # Renormalised over the kept tokens.
    p1 = 1.0 / (1.0 + math.exp(1.9 - 2.0))
    assert abs((got == 1).mean() - p1) < 0.03

    probs = np.exp(logits) / np.exp(logits).sum()  # ~ [.09 .39 .14 .02 .35 .05]
    got = sample_logits(tiled, rng, top_p=0.8)
    nucleus = {1, 4, 2}
    assert probs[[1, 4]].sum() < 0.8 <= probs[[1, 4, 2]].sum()
    assert set(np.unique(got).tolist()) == nucleus

    got = sample_logits(tiled, rng, top_k=3, top_p=0.5)
    assert set(np.unique(got).tolist()) == {1, 4}


def test_filter_top_p_keeps_smallest_nucleus():
    probs = np.array([[0.1, 0.5, 0.15, 0.25]])
    logits = np.log(probs)
    kept = lambda p: np.flatnonzero(np.isfinite(filter_top_p(logits, p)[0])).tolist()  # noqa: E731
    assert kept(0.45) == [1]  # 0.5 >= 0.45
    assert kept(0.05) == [1]  # the top token is always kept
    assert kept(0.7) == [1, 3]  # 0.5 + 0.25 = 0.75 >= 0.7
    assert kept(0.8) == [1, 2, 3]  # 0.75 < 0.8 <= 0.9
    assert kept(0.95) == [0, 1, 2, 3]
    assert kept(1.0) == [0, 1, 2, 3]
    # Exactly on the boundary: 0.25 + 0.25 reaches p = 0.5, the third token is not needed.
    uniform = np.zeros((1, 4))
    assert np.flatnonzero(np.isfinite(filter_top_p(uniform, 0.5)[0])).tolist() == [0, 1]
    out = filter_top_p(logits, 0.7)
    np.testing.assert_allclose(out[0, [1, 3]], logits[0, [1, 3]])
    assert np.isneginf(out[0, [0, 2]]).all()
    with pytest.raises(ValueError):
        filter_top_p(logits, 0.0)


def test_filter_top_k_hand_checked():
    logits = np.array([[3.0, 1.0, 3.0, 2.0, -1.0]])
    out = filter_top_k(logits, 2)
    # Tie between ids 0 and 2: the lower id wins, exactly k entries survive.
    assert np.flatnonzero(np.isfinite(out[0])).tolist() == [0, 2]
    assert np.flatnonzero(np.isfinite(filter_top_k(logits, 1)[0])).tolist() == [0]
    assert np.flatnonzero(np.isfinite(filter_top_k(logits, 3)[0])).tolist() == [0, 2, 3]
    np.testing.assert_array_equal(filter_top_k(logits, 0), logits)
    np.testing.assert_array_equal(filter_top_k(logits, 10), logits)
    # Input is not modified.
    assert np.isfinite(logits).all()


def test_sample_logits_validation():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="temperature"):
        sample_logits(np.zeros((2, 3)), rng, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        sample_logits(np.zeros((2, 3)), rng, top_k=-1)
    with pytest.raises(ValueError, match="top_p"):
        sample_logits(np.zeros((2, 3)), rng, top_p=1.5)
    with pytest.raises(ValueError, match="shape"):
        sample_logits(np.zeros(3), rng)
