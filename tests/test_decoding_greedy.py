"""Tests for keras_transformer.decoding.greedy: greedy search."""
from __future__ import annotations

import math

import numpy as np

from tests.decoding_toys import BOS, random_model, run_greedy, seq_logprob, table_model


def test_greedy_layout_padding_and_early_stop():
    eos, pad = 1, 9
    # source 0 -> [2, EOS]; source 1 -> [3, 3, 3, ...] (never EOS); source 2 -> [EOS]
    tables = {
        0: {(): {2: 0.6, 1: 0.4}, (2,): {1: 0.7, 3: 0.3}},
        1: {(): {3: 0.8, 1: 0.2}},
        2: {(): {1: 0.9, 2: 0.1}},
    }
    defaults = {0: {1: 0.5, 2: 0.5}, 1: {3: 0.9, 1: 0.1}, 2: {1: 1.0}}

    def model(source, prefix):
        return table_model(tables[source], 4, defaults[source])(source, prefix)

    res, st = run_greedy(model, [0, 1, 2], max_length=3, eos_id=eos, pad_id=pad)
    np.testing.assert_array_equal(res.tokens, [[2, 1, pad], [3, 3, 3], [1, pad, pad]])
    assert res.tokens.dtype == np.int32 and res.scores.dtype == np.float32
    np.testing.assert_allclose(
        res.scores,
        [math.log(0.6 * 0.7), math.log(0.8 * 0.9 * 0.9), math.log(0.9)],
        rtol=1e-5,
    )
    assert res.to_lists(eos) == [[2], [3, 3, 3], []]
    assert st.step_calls == 3

    # Without source 1 every row finishes after two steps, long before max_length.
    res, st = run_greedy(model, [0, 2], max_length=10, eos_id=eos, pad_id=pad)
    np.testing.assert_array_equal(res.tokens, [[2, 1], [1, pad]])
    assert st.step_calls == 2


def test_greedy_respects_max_length_and_picks_argmax():
    eos = 3
    for seed in range(4):
        model = random_model(seed, vocab=7, eos_id=eos, eos_bias=-3.0)
        res, st = run_greedy(model, [0, 1, 2, 3], max_length=5, eos_id=eos)
        assert res.tokens.shape[1] <= 5 and st.step_calls <= 5
        for b, seq in enumerate(res.tokens.tolist()):
            prefix = (BOS,)
            for tok in seq:
                assert tok == int(np.argmax(model(b, prefix)))
                if tok == eos:
                    break
                prefix = prefix + (tok,)
            np.testing.assert_allclose(
                res.scores[b],
                seq_logprob(model, b, prefix[1:] + ((eos,) if tok == eos else ())),
                rtol=1e-5,
            )
