"""Tests for keras_transformer.decoding.constraints: no_repeat_ngram_size and min_length in every
search."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from keras_transformer.decoding import (
    SearchSettings,
    beam_search,
    greedy_search,
    length_penalty,
    log_softmax,
    sample_search,
    search,
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
