"""Tests for keras_transformer.decoding.beam: beam search against hand-checked tables and
exhaustive search."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from keras_transformer.decoding import (
    beam_search,
    greedy_search,
    length_penalty,
)
from tests.decoding_toys import (
    BOS,
    ToyStepper,
    random_model,
    run_beam,
    run_greedy,
    seq_logprob,
    table_model,
)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("seed", range(6))
def test_beam_one_equals_greedy(seed, alpha):
    eos = 2
    model = random_model(seed, vocab=6, eos_id=eos, eos_bias=1.0 if seed % 2 else -1.0)
    sources = [0, 1, 2, 3, 4]
    g, _ = run_greedy(model, sources, max_length=8, eos_id=eos, pad_id=0)
    b, _ = run_beam(model, sources, 1, max_length=8, eos_id=eos, alpha=alpha, pad_id=0)
    np.testing.assert_array_equal(b.tokens, g.tokens)
    lengths = np.array(
        [
            len(s) + (1 if eos in r else 0)
            for s, r in zip(g.to_lists(eos), g.tokens.tolist(), strict=True)
        ]
    )
    np.testing.assert_allclose(b.scores, g.scores / length_penalty(lengths, alpha), rtol=1e-5)


# greedy takes 2 (p=0.5) then EOS (0.4): 0.20; beam 2 finds 3 (0.4) then EOS (0.9): 0.36.
HAND_TABLE = {
    (): {2: 0.5, 3: 0.4, 1: 0.1},
    (2,): {1: 0.4, 2: 0.3, 3: 0.3},
    (3,): {1: 0.9, 2: 0.05, 3: 0.05},
}


HAND_DEFAULT = {1: 0.9, 2: 0.05, 3: 0.05}


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_two_beats_greedy_hand_checked(alpha):
    model = table_model(HAND_TABLE, 4, HAND_DEFAULT)
    g, _ = run_greedy(model, [0], max_length=3, eos_id=1)
    assert g.to_lists(1) == [[2]]
    np.testing.assert_allclose(g.scores, [math.log(0.5) + math.log(0.4)], rtol=1e-6)

    b, st = run_beam(model, [0], 2, max_length=3, eos_id=1, alpha=alpha)
    np.testing.assert_array_equal(b.tokens, [[3, 1]])
    expected = (math.log(0.4) + math.log(0.9)) / ((5 + 2) / 6) ** alpha
    np.testing.assert_allclose(b.scores, [expected], rtol=1e-6)
    # Two finished hypotheses after step 2 and the best alive one (0.15) is worse: done early.
    assert st.step_calls == 2


# Short [EOS] has p=0.4, long [2, 2, 2, EOS] has p = 0.6 * 0.9 * 0.9 * 0.6 = 0.2916:
# alpha=0: log 0.4 = -0.916 > log 0.2916 = -1.232; alpha=1: -0.916 < -1.232 / 1.5 = -0.821.
ALPHA_TABLE = {
    (): {1: 0.4, 2: 0.6},
    (2,): {2: 0.9, 1: 0.1},
    (2, 2): {2: 0.9, 1: 0.1},
    (2, 2, 2): {1: 0.6, 2: 0.4},
}


def test_alpha_changes_preferred_length():
    model = table_model(ALPHA_TABLE, 3, {1: 0.5, 2: 0.5})
    short, _ = run_beam(model, [0], 2, max_length=4, eos_id=1, alpha=0.0)
    assert short.to_lists(1) == [[]]
    np.testing.assert_allclose(short.scores, [math.log(0.4)], rtol=1e-6)
    long, _ = run_beam(model, [0], 2, max_length=4, eos_id=1, alpha=1.0)
    assert long.to_lists(1) == [[2, 2, 2]]
    np.testing.assert_array_equal(long.tokens, [[2, 2, 2, 1]])
    np.testing.assert_allclose(long.scores, [math.log(0.2916) / 1.5], rtol=1e-6)


# Stopping rule, alpha=1 (penalties 1, 7/6, 4/3): after step 1 the finished hypotheses are
# [EOS] (log .35 = -1.050) and [3, EOS] (log .3168 / (7/6) = -0.985); the best alive beam [2, 2]
# has log .3267 = -1.119 but -1.119 / (7/6) = -0.959 > -1.050, so the search must go on and
# find [2, 2, EOS] (log .32343 / (4/3) = -0.847). Stopping with fewer than K finished (after
# step 0) or without normalising the alive score (after step 1) would miss it.
STOP_TABLE = {
    (): {1: 0.35, 2: 0.33, 3: 0.32},
    (2,): {2: 0.99, 1: 0.01},
    (3,): {1: 0.99, 2: 0.01},
    (2, 2): {1: 0.99, 2: 0.01},
}


def test_stopping_rule_needs_k_finished_and_normalised_alive_score():
    model = table_model(STOP_TABLE, 4, {1: 0.5, 2: 0.5})
    res, st = run_beam(model, [0], 2, max_length=5, eos_id=1, alpha=1.0)
    np.testing.assert_array_equal(res.tokens, [[2, 2, 1]])
    np.testing.assert_allclose(res.scores, [math.log(0.33 * 0.99 * 0.99) / (8 / 6)], rtol=1e-6)
    # After step 2 the kept finished scores (-0.847, -0.985) beat every alive beam: done.
    assert st.step_calls == 3


# Only the K best finished hypotheses count for stopping (alpha=1, K=2). Finished: [EOS]
# (step 0, -1.204), [2, EOS] (step 1, log .18 / (7/6) = -1.470), [2, 2, EOS] (step 2,
# log .07 / (4/3) = -1.994, ranked 1 so kept as a candidate). After step 2 the best alive beam
# [2, 2, 2] scores log .12 / (4/3) = -1.590: the two best finished (-1.204, -1.470) are both
# above it, so the search stops there, while the worst of all three (-1.994) is not.
TRIM_TABLE = {
    (): {2: 0.4, 1: 0.3, 3: 0.29, 0: 0.01},
    (2,): {2: 0.5, 1: 0.45, 3: 0.05},
    (2, 2): {2: 0.6, 1: 0.35, 3: 0.05},
}


def test_stopping_rule_keeps_only_k_best_finished():
    model = table_model(TRIM_TABLE, 4, {2: 0.3, 3: 0.3, 1: 0.4})
    res, st = run_beam(model, [0], 2, max_length=6, eos_id=1, alpha=1.0)
    np.testing.assert_array_equal(res.tokens, [[1]])
    np.testing.assert_allclose(res.scores, [math.log(0.3)], rtol=1e-6)
    assert st.step_calls == 3


def exhaustive_best(model, source, vocab, eos_id, max_length, alpha):
    """Best normalised score over every sequence: ending in EOS within max_length, or of
    length max_length without EOS."""
    best_score, best_seq = -np.inf, None
    non_eos = [v for v in range(vocab) if v != eos_id]
    for length in range(1, max_length + 1):
        for body in itertools.product(non_eos, repeat=length - 1):
            for last in range(vocab):
                if last != eos_id and length < max_length:
                    continue
                seq = list(body) + [last]
                score = seq_logprob(model, source, seq) / length_penalty(length, alpha)
                if score > best_score:
                    best_score, best_seq = score, seq
    return best_seq, best_score


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("seed", range(4))
def test_wide_beam_equals_exhaustive_search(seed, alpha):
    vocab, eos, max_length = 4, 3, 3
    # Wide enough that no prefix is ever pruned: 4 * 3**2 = 36 candidates at the last step.
    beam = 36
    model = random_model(seed, vocab=vocab, eos_id=eos, eos_bias=0.5, scale=1.5)
    sources = [0, 1]
    res, _ = run_beam(model, sources, beam, max_length=max_length, eos_id=eos, alpha=alpha)
    for b in sources:
        seq, score = exhaustive_best(model, b, vocab, eos, max_length, alpha)
        got = res.tokens[b].tolist()[: len(seq)]
        assert got == seq, (b, got, seq)
        assert all(t == 0 for t in res.tokens[b, len(seq) :])
        np.testing.assert_allclose(res.scores[b], score, rtol=1e-5)


def test_broken_reorder_is_detected_by_the_toy_stepper():
    """Sanity check of the test harness: a stepper that ignores reorder gets other results."""
    differs = False
    for seed in range(4):
        model = random_model(seed, vocab=6, eos_id=3, eos_bias=-1.0)
        good, _ = run_beam(model, [0, 1, 2], 3, max_length=6, eos_id=3, alpha=0.6)
        bad, _ = run_beam(
            model, [0, 1, 2], 3, max_length=6, eos_id=3, alpha=0.6, break_reorder=True
        )
        differs |= good.to_lists(3) != bad.to_lists(3)
    assert differs


@pytest.mark.parametrize("beam", [1, 2, 3, 5])
def test_batched_equals_per_source(beam):
    eos = 1
    model = random_model(11, vocab=8, eos_id=eos, eos_bias=-0.5)
    sources = [0, 1, 2]
    batched, _ = run_beam(model, sources, beam, max_length=7, eos_id=eos, alpha=0.6)
    singles = [run_beam(model, [s], beam, max_length=7, eos_id=eos, alpha=0.6)[0] for s in sources]
    assert batched.to_lists(eos) == [r.to_lists(eos)[0] for r in singles]
    np.testing.assert_array_equal(batched.scores, np.concatenate([r.scores for r in singles]))
    width = batched.tokens.shape[1]
    assert width == max(r.tokens.shape[1] for r in singles)
    for i, r in enumerate(singles):
        w = r.tokens.shape[1]
        np.testing.assert_array_equal(batched.tokens[i, :w], r.tokens[0])
        assert (batched.tokens[i, w:] == 0).all()


def test_partitioned_top_candidates_match_full_sort(monkeypatch):
    """Large vocabularies take an np.argpartition path; it must rank exactly like the stable
    full sort, ties included (logits are rounded so that many candidates tie)."""
    from keras_transformer.decoding import numerics

    eos = 2
    base = random_model(5, vocab=9, eos_id=eos)

    def model(source, prefix):
        return np.round(base(source, prefix))  # coarse values: lots of ties

    def run(limit):
        monkeypatch.setattr(numerics, "_FULL_SORT_LIMIT", limit)
        return run_beam(model, [0, 1, 2, 3], 4, max_length=6, eos_id=eos, alpha=0.6)[0]

    full, part = run(10**9), run(0)
    np.testing.assert_array_equal(part.tokens, full.tokens)
    np.testing.assert_array_equal(part.scores, full.scores)
    x = np.round(np.random.default_rng(0).normal(size=(5, 40)))
    monkeypatch.setattr(numerics, "_FULL_SORT_LIMIT", 0)
    got = numerics._top_per_row(x, 7)
    np.testing.assert_array_equal(got, np.argsort(-x, axis=1, kind="stable")[:, :7])


def test_beam_layout_padding_and_max_length():
    eos, pad = 1, 7
    # source 0 ends quickly with EOS; source 1 almost never emits EOS and hits max_length.
    tables = {0: {(): {1: 0.9, 2: 0.05, 3: 0.05}}, 1: {}}
    defaults = {0: {1: 0.95, 2: 0.05}, 1: {2: 0.5, 3: 0.49, 1: 0.01}}

    def model(source, prefix):
        return table_model(tables[source], 4, defaults[source])(source, prefix)

    res, st = run_beam(model, [0, 1], 2, max_length=4, eos_id=eos, alpha=0.6, pad_id=pad)
    assert res.tokens.shape == (2, 4)
    np.testing.assert_array_equal(res.tokens[0], [1, pad, pad, pad])
    np.testing.assert_array_equal(res.tokens[1], [2, 2, 2, 2])
    np.testing.assert_allclose(
        res.scores, [math.log(0.9), 4 * math.log(0.5) / length_penalty(4, 0.6)], rtol=1e-5
    )
    assert st.step_calls == 4 and st.reorder_calls == 3
    assert res.to_lists(eos) == [[], [2, 2, 2, 2]]

    for max_length in (1, 2, 5):
        model2 = random_model(3, vocab=6, eos_id=eos, eos_bias=-4.0)
        res, st = run_beam(model2, [0, 1, 2], 3, max_length=max_length, eos_id=eos, alpha=0.6)
        assert res.tokens.shape[1] <= max_length
        assert st.step_calls <= max_length


def test_beam_argument_validation():
    model = random_model(0, vocab=5, eos_id=1)
    st = ToyStepper(model, [0], 2, 4)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(st.step, st.reorder, 1, beam_size=0, bos_id=0, eos_id=1, max_length=4)
    with pytest.raises(ValueError, match="max_length"):
        beam_search(st.step, st.reorder, 1, beam_size=2, bos_id=0, eos_id=1, max_length=0)
    with pytest.raises(ValueError, match="max_length"):
        greedy_search(st.step, 1, bos_id=0, eos_id=1, max_length=0)
    with pytest.raises(ValueError, match="batch_size"):
        greedy_search(st.step, 0, bos_id=0, eos_id=1, max_length=3)

    def bad_rows(tokens, index):
        return np.zeros((len(tokens) + 1, 5), np.float32)

    with pytest.raises(ValueError, match=r"shape \(5, 5\); expected \(4, vocab\)"):
        beam_search(bad_rows, lambda i: None, 2, beam_size=2, bos_id=0, eos_id=1, max_length=3)

    def vocab_changes(tokens, index):
        return np.zeros((len(tokens), 5 + index), np.float32)

    with pytest.raises(ValueError, match=r"shape \(3, 6\); expected \(3, 5\)"):
        greedy_search(vocab_changes, 3, bos_id=0, eos_id=1, max_length=3)

    with pytest.raises(ValueError, match="eos_id"):
        greedy_search(lambda t, i: np.zeros((len(t), 5)), 2, bos_id=0, eos_id=5, max_length=3)

    def nan_logits(tokens, index):
        return np.full((len(tokens), 5), np.nan, np.float32)

    with pytest.raises(ValueError, match="NaN"):
        beam_search(nan_logits, lambda i: None, 1, beam_size=2, bos_id=0, eos_id=1, max_length=3)


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("constraints", [{}, {"no_repeat_ngram_size": 2}, {"min_length": 3}],
                         ids=["plain", "ngram", "min_length"])
@pytest.mark.parametrize("seed", range(4))
def test_own_limits_give_each_source_its_search_alone(seed, constraints, beam_size):
    """max_length per source: each row's tokens and score are those of the same source
    searched alone with its limit (a server batches requests of different lengths so)."""
    eos, alpha = 2, 0.6
    # EOS unlikely: most hypotheses run into their limits, where the limit decides.
    model = random_model(seed, vocab=7, eos_id=eos, eos_bias=-2.0)
    sources, limits = [0, 1, 2, 3, 4], np.array([1, 3, 6, 4, 9])

    def run(sources, max_length):
        stepper = ToyStepper(model, sources, beam_size, int(np.max(max_length)))
        if beam_size == 1:
            return greedy_search(stepper.step, len(sources), bos_id=BOS, eos_id=eos,
                                 max_length=max_length, pad_id=0, **constraints)
        return beam_search(stepper.step, stepper.reorder, len(sources), beam_size=beam_size,
                           bos_id=BOS, eos_id=eos, max_length=max_length, alpha=alpha,
                           pad_id=0, **constraints)

    batched = run(sources, limits)
    cut = 0
    for row, (source, limit) in enumerate(zip(sources, limits.tolist(), strict=True)):
        alone = run([source], limit)
        tokens = alone.tokens[0].tolist()
        cut += eos not in tokens and limit < limits.max()
        assert batched.tokens[row].tolist() == tokens + [0] * (batched.tokens.shape[1]
                                                               - len(tokens)), (row, limit)
        assert batched.to_lists(eos)[row] == alone.to_lists(eos)[0]
        np.testing.assert_allclose(batched.scores[row], alone.scores[0], rtol=1e-6)
    assert cut >= 2  # the limits decided some rows, not only EOS
    assert batched.row_limits.tolist() == limits.tolist()


def test_own_limits_are_checked():
    model = random_model(0, vocab=5, eos_id=1)
    st = ToyStepper(model, [0, 1], 2, 4)
    for bad in ([3], [3, 0], [2.0, 3.0]):
        with pytest.raises(ValueError, match="one per row"):
            beam_search(st.step, st.reorder, 2, beam_size=2, bos_id=0, eos_id=1,
                        max_length=np.array(bad))
