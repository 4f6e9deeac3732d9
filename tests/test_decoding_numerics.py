"""Tests for keras_transformer.decoding.numerics: length penalty, log-softmax, top-n selection."""
from __future__ import annotations

import numpy as np
import pytest

from keras_transformer.decoding import (
    length_penalty,
    log_softmax,
)


def test_length_penalty_matches_gnmt_formula():
    for length in (1, 2, 5, 10, 37):
        for alpha in (0.0, 0.6, 1.0):
            assert length_penalty(length, alpha) == pytest.approx(((5 + length) / 6) ** alpha)
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 1.0) == pytest.approx(2.0)
    arr = length_penalty(np.array([1, 4, 13]), 0.5)
    np.testing.assert_allclose(arr, [1.0, np.sqrt(1.5), np.sqrt(3.0)])


def test_log_softmax_is_stable_and_normalised():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -np.inf]])
    out = log_softmax(x)
    assert np.isfinite(out[0]).all()
    np.testing.assert_allclose(np.exp(out).sum(axis=-1), [1.0, 1.0])
    np.testing.assert_allclose(
        out[0], np.log(np.exp([-2.0, -1.0, 0.0]) / np.exp([-2.0, -1.0, 0.0]).sum())
    )
    assert out[1, 2] == -np.inf
    assert log_softmax(np.zeros((2, 4), np.float32)).dtype == np.float32


def test_top_per_row_matches_a_stable_sort_with_ties_and_infinities():
    """The threshold selection against np.argsort: many exact ties, -inf entries, rows that are
    -inf but for a few ids, and vocabularies that the chunks do not divide."""
    from keras_transformer.decoding import numerics

    rng = np.random.default_rng(3)
    for vocab, n in ((8000, 8), (1001, 2), (97, 5), (130, 1)):
        x = np.round(rng.normal(size=(12, vocab)) * 2).astype(np.float32)  # heavy ties
        x[0, :] = -np.inf
        x[0, [5, 17, vocab - 1]] = [1.0, 1.0, 3.0]
        x[1, rng.integers(0, vocab, vocab // 2)] = -np.inf
        x[2, :] = 7.0  # every entry tied
        want = np.argsort(-x, axis=1, kind="stable")[:, :n]
        np.testing.assert_array_equal(numerics._top_per_row(x, n), want)
