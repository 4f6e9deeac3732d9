"""Tests for keras_transformer.decoding (NumPy-only search algorithms)."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

from keras_transformer.decoding import (
    SearchResult,
    SearchSettings,
    beam_search,
    filter_top_k,
    filter_top_p,
    greedy_search,
    length_penalty,
    log_softmax,
    sample_logits,
    sample_search,
    search,
)

BOS = 0

# ---------------------------------------------------------------------------------------------
# Toy steppers
# ---------------------------------------------------------------------------------------------


class ToyStepper:
    """A fake decoder: ``model(source, prefix) -> logits``, where ``prefix`` is the tuple of all
    tokens fed so far (BOS first). Its "cache" is an array of prefixes per row that ``reorder``
    gathers, so a search that reorders wrongly gets wrong log-probabilities."""

    def __init__(self, model, sources, beam_size, max_length, break_reorder=False):
        self.model = model
        self.src = np.repeat(np.asarray(sources), beam_size)
        self.n = len(self.src)
        self.cache = np.full((self.n, max_length + 1), -1, dtype=np.int64)
        self.next_index = 0
        self.step_calls = 0
        self.reorder_calls = 0
        self.break_reorder = break_reorder

    def step(self, tokens, index):
        assert isinstance(tokens, np.ndarray) and tokens.dtype == np.int32
        assert tokens.shape == (self.n,)
        assert index == self.next_index, (index, self.next_index)
        self.next_index += 1
        self.step_calls += 1
        self.cache[:, index] = tokens
        return np.stack(
            [
                self.model(int(s), tuple(row[: index + 1].tolist()))
                for s, row in zip(self.src, self.cache, strict=True)
            ]
        ).astype(np.float32)

    def reorder(self, indices):
        assert isinstance(indices, np.ndarray) and indices.dtype == np.int32
        assert indices.shape == (self.n,)
        # Beams never move between sources.
        assert (self.src[indices] == self.src).all()
        self.reorder_calls += 1
        if not self.break_reorder:
            self.cache = self.cache[indices]


def random_model(seed, vocab, eos_id, eos_bias=0.0, scale=2.0):
    """Random logits that depend on (seed, source, whole prefix)."""

    @functools.cache
    def model(source, prefix):
        rng = np.random.default_rng([seed, source, *prefix])
        logits = rng.normal(size=vocab) * scale
        logits[eos_id] += eos_bias
        return logits.astype(np.float32)

    return model


def table_model(table, vocab, default):
    """Probabilities from a table keyed by the generated prefix (without BOS); zero -> -inf."""

    def model(source, prefix):
        probs = np.zeros(vocab)
        for tok, p in table.get(prefix[1:], default).items():
            probs[tok] = p
        with np.errstate(divide="ignore"):
            return np.log(probs).astype(np.float32)

    return model


def run_greedy(model, sources, max_length, eos_id, pad_id=0):
    st = ToyStepper(model, sources, 1, max_length)
    res = greedy_search(
        st.step, len(sources), bos_id=BOS, eos_id=eos_id, max_length=max_length, pad_id=pad_id
    )
    return res, st


def run_beam(model, sources, beam_size, max_length, eos_id, alpha, pad_id=0,
             break_reorder=False, **search_kw):
    st = ToyStepper(model, sources, beam_size, max_length, break_reorder=break_reorder)
    res = beam_search(
        st.step,
        st.reorder,
        len(sources),
        beam_size=beam_size,
        bos_id=BOS,
        eos_id=eos_id,
        max_length=max_length,
        alpha=alpha,
        pad_id=pad_id,
        **search_kw,
    )
    return res, st


def seq_logprob(model, source, seq):
    """Sum of log-probabilities of ``seq`` (without BOS) under ``model``, in float64."""
    total = 0.0
    prefix = (BOS,)
    for tok in seq:
        total += float(log_softmax(model(source, prefix).astype(np.float64))[tok])
        prefix = prefix + (tok,)
    return total


# ---------------------------------------------------------------------------------------------
# Elementary functions
# ---------------------------------------------------------------------------------------------


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


def test_search_result_to_lists():
    res = SearchResult(
        tokens=np.array([[5, 3, 1, 0], [4, 4, 4, 4], [1, 0, 0, 0]], np.int32),
        scores=np.zeros(3, np.float32),
    )
    assert res.to_lists(eos_id=1) == [[5, 3], [4, 4, 4, 4], []]


# ---------------------------------------------------------------------------------------------
# Greedy
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Dispatch and sampling search
# ---------------------------------------------------------------------------------------------


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


def test_sample_search_at_temperature_zero_equals_greedy_search():
    eos = 1
    model = random_model(seed=12, vocab=11, eos_id=eos, eos_bias=1.5)
    sources = [0, 1, 2, 3, 4]
    greedy, _ = run_greedy(model, sources, 8, eos_id=eos)
    sampled = sample_search(ToyStepper(model, sources, 1, 8).step, [[BOS]] * len(sources), 8,
                            eos_id=eos, temperature=0.0)
    want = [ids + [eos] if eos in row else ids
            for ids, row in zip(greedy.to_lists(eos), greedy.tokens.tolist(), strict=True)]
    assert any(eos in row for row in sampled) and sampled == want


class RecordingStepper:
    """Logits from a fixed (index, vocab) table, the same for every row; records what it is fed."""

    def __init__(self, table):
        self.table = np.asarray(table, np.float32)
        self.fed = []

    def step(self, tokens, index):
        self.fed.append(tokens.copy())
        return np.repeat(self.table[index][None], len(tokens), axis=0)


def test_sample_search_forces_prompt_tokens_and_stops_at_eos():
    eos, vocab = 1, 6
    table = np.zeros((8, vocab))
    table[:, 4] = 5.0  # greedy picks 4 at every position ...
    table[5, eos] = 9.0  # ... and EOS at position 6
    stepper = RecordingStepper(table)
    prompts = [[0, 2, 3, 2], [0], [0, 5]]
    got = sample_search(stepper.step, prompts, 4, eos_id=eos, temperature=0.0, pad_id=0)
    # Row 0 generates from position 4: 4, 4, EOS (at 6). Rows 1 and 2 return their first 4
    # new tokens (positions 1-4 and 2-5) and go on to EOS at position 6 too.
    assert got == [[4, 4, eos], [4, 4, 4, 4], [4, 4, 4, 4]]
    fed = np.stack(stepper.fed, axis=1)  # (rows, steps)
    assert fed.shape == (3, 6)  # positions 0..5: every row has produced EOS at step 5
    assert fed[0].tolist() == [0, 2, 3, 2, 4, 4]
    assert fed[1].tolist() == [0, 4, 4, 4, 4, 4]
    assert fed[2].tolist() == [0, 5, 4, 4, 4, 4]


def test_sample_search_is_reproducible_by_seed_and_samples_like_sample_logits():
    rng = np.random.default_rng(13)
    table = rng.normal(size=(6, 9)) * 2
    prompts = [[0], [0, 3]]
    kwargs = dict(eos_id=-1, temperature=0.8, top_k=5, top_p=0.9)
    first = sample_search(RecordingStepper(table).step, prompts, 5, seed=21, **kwargs)
    again = sample_search(RecordingStepper(table).step, prompts, 5, seed=21, **kwargs)
    other = sample_search(RecordingStepper(table).step, prompts, 5, seed=22, **kwargs)
    assert first == again and first != other
    # Reference: one sample_logits call per position with the same generator, in order.
    reference = np.random.default_rng(21)
    samples = [sample_logits(np.repeat(table[i][None], 2, axis=0), reference, temperature=0.8,
                             top_k=5, top_p=0.9) for i in range(6)]
    assert first[0] == [int(samples[i][0]) for i in range(5)]  # positions 1-5
    assert first[1] == [int(samples[i][1]) for i in range(1, 6)]  # positions 2-6


def test_sample_search_frequencies_pass_a_chi_square_test_against_the_filtered_softmax():
    """20,000 prompts sample one token each from fixed logits at temperature 1.5 with top-k 4
    and top-p 0.85. softmax(logits / 1.5) = [.237 .121 .087 .062 .032 .461]; the top 4
    (ids 5, 0, 1, 2) renormalised hold [.509 .261 .134 .096], cumulative .509, .770, .904:
    the nucleus of 0.85 is ids {5, 0, 1}, the others are never drawn. The counts of the three
    must pass Pearson's chi-square test against softmax(logits / 1.5) renormalised over them
    at the 0.1% level (2 degrees of freedom: statistic < 13.816); the seed makes it
    deterministic."""
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, 3.0])
    draws, temperature = 20_000, 1.5
    got = sample_search(RecordingStepper(logits[None]).step, [[0]] * draws, 1, eos_id=-1,
                        temperature=temperature, top_k=4, top_p=0.85, seed=2024)
    counts = np.bincount([row[0] for row in got], minlength=6)
    kept = [5, 0, 1]
    assert counts.sum() == counts[kept].sum() == draws
    probs = np.exp(logits[kept] / temperature)
    expected = draws * probs / probs.sum()
    chi_square = float((((counts[kept] - expected) ** 2) / expected).sum())
    assert chi_square < 13.816, (counts, expected)


# ---------------------------------------------------------------------------------------------
# Constraints: no_repeat_ngram_size and min_length
# ---------------------------------------------------------------------------------------------


def banned_reference(prefix, vocab, eos_id, ngram, min_length):
    """The tokens banned after the generated ``prefix`` (without BOS), from the definitions: a
    token is banned if appending it makes an n-gram that ``prefix`` already holds, and EOS is
    banned while ``prefix`` is shorter than ``min_length``."""
    prefix = tuple(prefix)
    banned = set()
    if ngram:
        seen = {prefix[i:i + ngram] for i in range(len(prefix) - ngram + 1)}
        tail = prefix[len(prefix) - ngram + 1:] if ngram > 1 else ()
        banned |= {v for v in range(vocab) if tail + (v,) in seen}
    if len(prefix) < min_length:
        banned.add(eos_id)
    return banned


def allowed_reference(prefix, vocab, eos_id, ngram, min_length, logprobs=None):
    """The tokens that may follow ``prefix``: the unbanned ones of nonzero probability, or EOS
    alone if there are none."""
    banned = banned_reference(prefix, vocab, eos_id, ngram, min_length)
    allowed = [v for v in range(vocab)
               if v not in banned and (logprobs is None or logprobs[v] > -np.inf)]
    return allowed or [eos_id]


def constrained_exhaustive_best(model, source, vocab, eos_id, max_length, alpha, ngram,
                                min_length):
    """Best normalised score over every sequence that ends in EOS within max_length (or has
    length max_length without EOS) and takes only allowed tokens; the log-probabilities are
    the model's, not renormalised. For models without zero probabilities."""
    best_score, best_seq = -np.inf, None
    for length in range(1, max_length + 1):
        for seq in itertools.product(range(vocab), repeat=length):
            if eos_id in seq[:-1] or (seq[-1] != eos_id and length < max_length):
                continue
            if any(seq[i] not in allowed_reference(seq[:i], vocab, eos_id, ngram, min_length)
                   for i in range(length)):
                continue
            score = seq_logprob(model, source, seq) / length_penalty(length, alpha)
            if score > best_score:
                best_score, best_seq = score, list(seq)
    return best_seq, best_score


def greedy_reference(model, source, vocab, eos_id, max_length, ngram, min_length):
    """Greedy decoding one token at a time: the most probable allowed token (lower id on ties),
    scored by the model's unrenormalised log-probability."""
    seq, score = [], 0.0
    while len(seq) < max_length:
        logprobs = log_softmax(model(source, (BOS, *seq)).astype(np.float64))
        allowed = allowed_reference(seq, vocab, eos_id, ngram, min_length, logprobs)
        tok = max(allowed, key=lambda v: (logprobs[v], -v))
        score += float(logprobs[tok])
        seq.append(tok)
        if tok == eos_id:
            break
    return seq, score


def output_ids(tokens_row, eos_id):
    """A row of SearchResult.tokens up to and including its first EOS."""
    ids = list(tokens_row)
    return ids[: ids.index(eos_id) + 1] if eos_id in ids else ids


def repeats_an_ngram(ids, n):
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return len(grams) != len(set(grams))


def test_ngram_bans_match_the_definition():
    """The vectorised bans against banned_reference, on rows of different lengths."""
    from keras_transformer.decoding import constraints

    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4):
        history = rng.integers(0, 3, size=(40, 12)).astype(np.int32)
        lengths = rng.integers(0, 13, size=40)
        rows, tokens = constraints._ngram_bans(history, lengths, n)
        for r in range(40):
            got = set(tokens[rows == r].tolist())
            assert got == banned_reference(history[r, :lengths[r]], 3, -1, n, 0), (n, r)


CONSTRAINTS = [(1, 0), (2, 0), (3, 0), (0, 3), (2, 2), (1, 4)]


@pytest.mark.parametrize("ngram,min_length", CONSTRAINTS)
@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("seed", range(3))
def test_wide_constrained_beam_equals_exhaustive_search(seed, alpha, ngram, min_length):
    """(1, 4) leaves every row of three distinct tokens with nothing allowed: EOS it is."""
    vocab, eos, max_length = 4, 3, 4
    beam = 3**3 * vocab  # every candidate of the last step: no prefix is ever pruned
    model = random_model(seed, vocab=vocab, eos_id=eos, eos_bias=0.5, scale=1.5)
    sources = [0, 1]
    st = ToyStepper(model, sources, beam, max_length)
    res = beam_search(st.step, st.reorder, len(sources), beam_size=beam, bos_id=BOS, eos_id=eos,
                      max_length=max_length, alpha=alpha, no_repeat_ngram_size=ngram,
                      min_length=min_length)
    for b in sources:
        seq, score = constrained_exhaustive_best(model, b, vocab, eos, max_length, alpha, ngram,
                                                 min_length)
        assert output_ids(res.tokens[b].tolist(), eos) == seq, b
        assert all(t == 0 for t in res.tokens[b, len(seq):])
        np.testing.assert_allclose(res.scores[b], score, rtol=1e-5)


@pytest.mark.parametrize("ngram,min_length", CONSTRAINTS + [(2, 9)])
@pytest.mark.parametrize("seed", range(4))
def test_constrained_greedy_equals_step_by_step_reference(seed, ngram, min_length):
    vocab, eos, max_length = 5, 2, 10
    model = random_model(seed, vocab=vocab, eos_id=eos, eos_bias=-1.0)
    sources = list(range(6))
    res = greedy_search(ToyStepper(model, sources, 1, max_length).step, len(sources),
                        bos_id=BOS, eos_id=eos, max_length=max_length,
                        no_repeat_ngram_size=ngram, min_length=min_length)
    beam_one, _ = run_beam(model, sources, 1, max_length, eos_id=eos, alpha=0.0,
                           no_repeat_ngram_size=ngram, min_length=min_length)
    for b in sources:
        seq, score = greedy_reference(model, b, vocab, eos, max_length, ngram, min_length)
        assert output_ids(res.tokens[b].tolist(), eos) == seq, b
        np.testing.assert_allclose(res.scores[b], score, rtol=1e-5)
    np.testing.assert_array_equal(beam_one.tokens, res.tokens)


@pytest.mark.parametrize("ngram", [1, 2, 3])
def test_no_output_repeats_an_ngram(ngram):
    vocab, eos, max_length = 6, 1, 14
    greedy_repeats = 0
    for seed in range(12):
        # Few tokens, long outputs and coarse logits: unconstrained outputs repeat a lot.
        model = random_model(seed, vocab=vocab, eos_id=eos, eos_bias=-3.0, scale=1.0)
        sources = [0, 1, 2, 3]
        plain, _ = run_greedy(model, sources, max_length, eos_id=eos)
        greedy_repeats += sum(repeats_an_ngram(output_ids(r, eos), ngram)
                              for r in plain.tokens.tolist())
        outputs = []
        g = greedy_search(ToyStepper(model, sources, 1, max_length).step, len(sources),
                          bos_id=BOS, eos_id=eos, max_length=max_length,
                          no_repeat_ngram_size=ngram)
        outputs += [output_ids(r, eos) for r in g.tokens.tolist()]
        b, _ = run_beam(model, sources, 3, max_length, eos_id=eos, alpha=0.6,
                        no_repeat_ngram_size=ngram)
        outputs += [output_ids(r, eos) for r in b.tokens.tolist()]
        # Prompts of different lengths: only the new tokens are constrained.
        prompts = [[BOS], [BOS, 3, 3], [BOS, 4], [BOS, 5, 5, 5]]
        outputs += sample_search(ToyStepper(model, sources, 1, max_length + 3).step, prompts,
                                 max_length, eos_id=eos, seed=seed, no_repeat_ngram_size=ngram)
        for ids in outputs:
            assert not repeats_an_ngram(ids, ngram), (seed, ids)
            assert eos not in ids[:-1] and (ids[-1] == eos or len(ids) == max_length)
    assert greedy_repeats > 10  # the constraint had work to do


@pytest.mark.parametrize("min_length", [1, 3, 6])
def test_min_length_delays_eos(min_length):
    """EOS is by far the most probable token everywhere: greedy and beam emit it as soon as
    it is allowed, after exactly min_length tokens; sampled outputs emit it no earlier. With
    max_length <= min_length no output has EOS."""
    eos, max_length = 2, 8
    model = random_model(4, vocab=7, eos_id=eos, eos_bias=30.0)
    sources = [0, 1, 2]
    kwargs = dict(bos_id=BOS, eos_id=eos, max_length=max_length, min_length=min_length)
    g = greedy_search(ToyStepper(model, sources, 1, max_length).step, 3, **kwargs)
    st = ToyStepper(model, sources, 4, max_length)
    b = beam_search(st.step, st.reorder, 3, beam_size=4, alpha=0.6, **kwargs)
    for res in (g, b):
        for row in res.tokens.tolist():
            assert eos not in row[:min_length] and row[min_length] == eos
    # The scores are the model's log-probabilities, not renormalised over the allowed tokens.
    np.testing.assert_allclose(
        g.scores, [seq_logprob(model, s, output_ids(r, eos))
                   for s, r in zip(sources, g.tokens.tolist(), strict=True)], rtol=1e-5)
    sampled = sample_search(ToyStepper(model, sources, 1, max_length).step, [[BOS]] * 3,
                            max_length, eos_id=eos, seed=1, min_length=min_length)
    assert all(len(ids) > min_length and ids[-1] == eos for ids in sampled)
    short = greedy_search(ToyStepper(model, sources, 1, min_length).step, 3, bos_id=BOS,
                          eos_id=eos, max_length=min_length, min_length=min_length)
    assert short.tokens.shape == (3, min_length) and not (short.tokens == eos).any()


# (): 0 is the best token; (0,): 0 is banned by the 1-gram rule, so 1; (0, 1): 0 and 1 are
# banned and EOS too (min_length 5): every token is banned, EOS it is, with its probability.
# Sampling may take 1 first, then 0 and EOS the same way.
ALL_BANNED_TABLE = {
    (): {0: 0.5, 1: 0.3, 2: 0.2},
    (0,): {0: 0.6, 1: 0.3, 2: 0.1},
    (1,): {0: 0.6, 1: 0.3, 2: 0.1},
    (0, 1): {0: 0.5, 1: 0.4, 2: 0.1},
    (1, 0): {0: 0.5, 1: 0.4, 2: 0.1},
}
# (): 0 is certain; (0,): 0 is banned, 1 has probability zero, EOS is banned by min_length 2.
ZERO_LEFT_TABLE = {(): {0: 1.0}, (0,): {0: 0.9, 2: 0.1}}


@pytest.mark.parametrize("table,min_length,greedy,greedy_prob,beam,beam_prob", [
    # Beam search finds [1, 0, EOS]: 0.3 * 0.6 * 0.1 = 0.018 > 0.015.
    (ALL_BANNED_TABLE, 5, [0, 1, 2], 0.5 * 0.3 * 0.1, [1, 0, 2], 0.3 * 0.6 * 0.1),
    (ZERO_LEFT_TABLE, 2, [0, 2], 1.0 * 0.1, [0, 2], 1.0 * 0.1),
])
def test_a_row_left_without_tokens_produces_eos(table, min_length, greedy, greedy_prob, beam,
                                                beam_prob):
    eos = 2
    model = table_model(table, 3, {2: 1.0})
    kwargs = dict(bos_id=BOS, eos_id=eos, max_length=6, no_repeat_ngram_size=1,
                  min_length=min_length)
    g = greedy_search(ToyStepper(model, [0], 1, 6).step, 1, **kwargs)
    assert g.tokens.tolist() == [greedy]
    np.testing.assert_allclose(g.scores, [math.log(greedy_prob)], rtol=1e-6)
    b, _ = run_beam(model, [0, 0], 3, 6, eos_id=eos, alpha=0.0, no_repeat_ngram_size=1,
                    min_length=min_length)
    assert b.tokens.tolist() == [beam, beam]
    np.testing.assert_allclose(b.scores, [math.log(beam_prob)] * 2, rtol=1e-6)
    for seed in range(5):
        sampled = sample_search(ToyStepper(model, [0], 1, 6).step, [[BOS]], 6, eos_id=eos,
                                seed=seed, no_repeat_ngram_size=1, min_length=min_length)
        assert sampled[0] in (greedy, beam)


def test_constraints_off_change_nothing():
    eos = 1
    model = random_model(7, vocab=9, eos_id=eos, eos_bias=-0.5)
    sources = [0, 1, 2]
    off = dict(no_repeat_ngram_size=0, min_length=0)
    for beam in (1, 3):
        plain = search(ToyStepper(model, sources, beam, 7), 3,
                       SearchSettings(beam_size=beam, max_length=7), bos_id=BOS, eos_id=eos)
        st = ToyStepper(model, sources, beam, 7)
        zero = search(st, 3, SearchSettings(beam_size=beam, max_length=7, **off), bos_id=BOS,
                      eos_id=eos)
        np.testing.assert_array_equal(zero.tokens, plain.tokens)
        np.testing.assert_array_equal(zero.scores, plain.scores)
    prompts = [[BOS], [BOS, 4]]
    assert sample_search(ToyStepper(model, [0, 1], 1, 9).step, prompts, 7, eos_id=eos,
                         **off) == sample_search(ToyStepper(model, [0, 1], 1, 9).step,
                                                 prompts, 7, eos_id=eos)


def test_constrained_partitioned_top_candidates_match_full_sort(monkeypatch):
    from keras_transformer.decoding import numerics

    model = random_model(8, vocab=150, eos_id=2, eos_bias=2.0, scale=0.5)

    def run(limit):
        monkeypatch.setattr(numerics, "_FULL_SORT_LIMIT", limit)
        return run_beam(model, [0, 1, 2], 4, max_length=8, eos_id=2, alpha=0.6,
                        no_repeat_ngram_size=1, min_length=4)[0]

    full, part = run(10**9), run(0)
    np.testing.assert_array_equal(part.tokens, full.tokens)
    np.testing.assert_array_equal(part.scores, full.scores)


def test_search_passes_the_constraints_on():
    model = random_model(3, vocab=5, eos_id=1, eos_bias=-2.0)
    for beam in (1, 3):
        got = search(ToyStepper(model, [0, 1], beam, 8), 2,
                     SearchSettings(beam_size=beam, max_length=8, no_repeat_ngram_size=1,
                                    min_length=2), bos_id=BOS, eos_id=1)
        for row in got.tokens.tolist():
            ids = output_ids(row, 1)
            assert not repeats_an_ngram(ids, 1) and 1 not in ids[:2]


def test_constraint_arguments_are_validated():
    step = ToyStepper(random_model(0, vocab=5, eos_id=1), [0], 1, 4).step
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="no_repeat_ngram_size"):
            greedy_search(step, 1, bos_id=0, eos_id=1, max_length=3, no_repeat_ngram_size=bad)
        with pytest.raises(ValueError, match="min_length"):
            beam_search(step, lambda i: None, 1, beam_size=2, bos_id=0, eos_id=1,
                        max_length=3, min_length=bad)
        with pytest.raises(ValueError, match="min_length"):
            sample_search(step, [[0]], 3, eos_id=1, min_length=bad)
    with pytest.raises(ValueError, match="eos_id=-1 is outside the vocabulary"):
        sample_search(step, [[0]], 3, eos_id=-1, no_repeat_ngram_size=2)


# ---------------------------------------------------------------------------------------------
# SearchSettings
# ---------------------------------------------------------------------------------------------


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


def test_search_needs_settings_with_a_max_length():
    model = random_model(seed=1, vocab=7, eos_id=1)
    stepper = ToyStepper(model, [0], 1, 4)
    with pytest.raises(ValueError, match="settings.max_length is None"):
        search(stepper, 1, SearchSettings(beam_size=1), bos_id=BOS, eos_id=1)
    with pytest.raises(TypeError, match="must be a SearchSettings"):
        search(stepper, 1, {"beam_size": 1, "max_length": 4}, bos_id=BOS, eos_id=1)


def test_sample_search_takes_the_settings_sampling_options():
    """SearchSettings.sampling is what sample_search takes: the same tokens as its keywords."""
    model = random_model(seed=5, vocab=11, eos_id=1, eos_bias=-1.0)
    prompts = [[BOS], [BOS, 4, 5]]
    settings = SearchSettings(temperature=0.7, top_k=5, top_p=0.9, seed=3,
                              no_repeat_ngram_size=2, min_length=2)
    got = sample_search(ToyStepper(model, [0, 1], 1, 12).step, prompts, 8, eos_id=1,
                        **settings.sampling)
    want = sample_search(ToyStepper(model, [0, 1], 1, 12).step, prompts, 8, eos_id=1,
                         temperature=0.7, top_k=5, top_p=0.9, seed=3, no_repeat_ngram_size=2,
                         min_length=2)
    assert got == want
