"""Beam search: the "2K candidates" scheme with Hugging Face's default stopping heuristic."""

from __future__ import annotations

import numpy as np

from .constraints import _check_constraints, _constrain
from .numerics import _checked_logsumexp, _chunk_maxima, _top_per_row, length_penalty
from .stepper import (
    ReorderFn,
    SearchResult,
    StepFn,
    _call_step,
    _check_limits,
    _check_positive,
    _pack,
)


def beam_search(
    step: StepFn,
    reorder: ReorderFn,
    batch_size: int,
    *,
    beam_size: int,
    bos_id: int,
    eos_id: int,
    max_length: int | np.ndarray,
    alpha: float = 0.6,
    pad_id: int = 0,
    no_repeat_ngram_size: int = 0,
    min_length: int = 0,
) -> SearchResult:
    """Batched beam search ("2K candidates", Hugging Face's default stopping heuristic).

    The stepper must already hold ``batch_size * beam_size`` rows, laid out
    ``b * beam_size + k``. Every step ranks, per source, the ``2K`` best of the ``K x vocab``
    candidates by cumulative log-probability (ties: lower ``k * vocab + token`` first). EOS
    candidates ranked below ``K`` become finished hypotheses scored
    ``cum_logprob / length_penalty(generated_len, alpha)`` (EOS counted); the first ``K``
    non-EOS candidates become the new beams (``reorder`` is called with their parent rows, then
    ``step`` with their tokens). A source is done once it has ``K`` finished hypotheses and the
    worst of them is at least the best alive ``cum_logprob / length_penalty(current_len)``; done
    sources are still stepped but their result is frozen. At ``max_length`` the alive beams of
    unfinished sources join the finished ones. The best finished hypothesis per source is
    returned. With ``beam_size=1`` the tokens equal :func:`greedy_search`'s, constraints
    included. ``no_repeat_ngram_size`` and ``min_length`` (module docstring) apply to every
    beam with its own history; a candidate they ban scores ``-inf`` and is never kept.

    ``max_length`` may give each source its own limit (``batch_size`` ints): at its last step
    a source's alive beams join its finished hypotheses and the source is done, so its result
    is the one it gets searched alone at that limit, and sources of different limits share a
    batch (a server's batch of requests).
    """
    batch_size = _check_positive("batch_size", batch_size)
    k_beams = _check_positive("beam_size", beam_size)
    limits = _check_limits(max_length, batch_size)
    max_length = int(max_length if limits is None else limits.max())
    alpha = float(alpha)
    if not np.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha}")
    bos_id, eos_id, pad_id = int(bos_id), int(eos_id), int(pad_id)
    no_repeat_ngram_size, min_length = _check_constraints(no_repeat_ngram_size, min_length)
    constrained = bool(no_repeat_ngram_size or min_length)

    n = batch_size * k_beams
    n_cand = 2 * k_beams
    alive_scores = np.full((batch_size, k_beams), -np.inf, dtype=np.float64)
    alive_scores[:, 0] = 0.0
    history = np.zeros((batch_size, k_beams, max_length), dtype=np.int32)
    # Per source: finished hypotheses as (normalised score, tokens), best first, at most K;
    # their count and worst score as arrays, so the stopping rule is one vectorised test.
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch_size)]
    n_finished = np.zeros((batch_size,), dtype=np.int64)
    worst_finished = np.full((batch_size,), -np.inf, dtype=np.float64)
    done = np.zeros((batch_size,), dtype=bool)
    active_rows = np.ones((n,), dtype=bool)
    sources = np.arange(batch_size)[:, None]  # fancy indexing: cheaper than take_along_axis
    row_base = sources * k_beams
    all_rows = np.arange(n)[:, None]

    tokens = np.full((n,), bos_id, dtype=np.int32)
    vocab = None
    gen_len = 0
    for t in range(max_length):
        logits, log_normalizer = _call_step(step, tokens, t, n, vocab, eos_id)
        vocab = logits.shape[1]
        # Only a beam's 2K best tokens can be among its source's 2K best candidates, and
        # within a beam the order of score + log_prob is the order of the raw logits.
        m = min(n_cand, vocab)
        maxima = _chunk_maxima(logits, m)
        logits, lse, replaced = _checked_logsumexp(logits, maxima.max(axis=1), active_rows, t,
                                                   log_normalizer)
        if constrained:
            masked, _ = _constrain(logits, history.reshape(n, max_length)[:, :t], np.full(n, t),
                                   no_repeat_ngram_size=no_repeat_ngram_size,
                                   min_length=min_length, eos_id=eos_id)
            if masked is not logits:  # the chunk maxima are those of the unmasked logits
                logits, replaced = masked, True
        gen_len = t + 1
        penalty = length_penalty(gen_len, alpha)
        row_top = _top_per_row(logits, m, None if replaced else maxima)  # (n, m) token ids
        row_logits = logits[all_rows, row_top].astype(np.float64)
        cand = (alive_scores[:, :, None]
                + (row_logits - lse[:, None]).reshape(batch_size, k_beams, m))
        flat_key = np.arange(k_beams)[:, None] * vocab + row_top.reshape(batch_size, k_beams, m)
        cand = cand.reshape(batch_size, k_beams * m)
        flat_key = flat_key.reshape(batch_size, k_beams * m)
        # Rank by score, ties to the lower beam; within a beam, where rounding makes scores
        # tie, the higher raw logit (so beam_size=1 picks np.argmax's token), then lower id.
        raw = row_logits.reshape(batch_size, k_beams * m)
        order = np.lexsort((flat_key, -raw, flat_key // vocab, -cand), axis=1)[:, :n_cand]
        top_scores = cand[sources, order]
        top_beam, top_token = np.divmod(flat_key[sources, order], vocab)
        is_eos = top_token == eos_id

        # Finished hypotheses: EOS candidates ranked below K, for sources still running.
        new_eos = is_eos[:, :k_beams] & np.isfinite(top_scores[:, :k_beams])
        new_eos[done] = False
        for b in np.flatnonzero(new_eos.any(axis=1)):
            hyps = finished[b]
            for r in np.flatnonzero(new_eos[b]):
                seq = history[b, top_beam[b, r], :t].tolist() + [eos_id]
                hyps.append((float(top_scores[b, r] / penalty), seq))
            hyps.sort(key=lambda h: -h[0])  # stable: earlier hypotheses win ties
            del hyps[k_beams:]
            n_finished[b], worst_finished[b] = len(hyps), hyps[-1][0]

        # New alive beams: the first K non-EOS candidates (there are always at least K, since
        # each beam contributes exactly one EOS candidate).
        pick = np.argsort(is_eos, axis=1, kind="stable")[:, :k_beams]
        parent_beam = top_beam[sources, pick]
        new_tokens = top_token[sources, pick].astype(np.int32)
        alive_scores = top_scores[sources, pick]
        history = history[sources, parent_beam]
        history[:, :, t] = new_tokens

        # Stopping heuristic (Hugging Face's default): compare against the best alive beam
        # normalised at the current length.
        full = ~done & (n_finished >= k_beams)
        if full.any():
            done |= full & (worst_finished >= alive_scores.max(axis=1) / penalty)
            active_rows = np.repeat(~done, k_beams)

        if limits is not None:  # sources at their own limit end as the last step ends them
            ending = ~done & (limits == gen_len)
            for b in np.flatnonzero(ending):
                _join_alive(finished[b], alive_scores[b], history[b], gen_len, penalty)
            done |= ending
            active_rows = np.repeat(~done, k_beams)

        if done.all() or t == max_length - 1:
            break
        parents = (row_base + parent_beam).reshape(-1).astype(np.int32)
        reorder(parents)
        tokens = new_tokens.reshape(-1)

    # Sources that ran out of length: their alive beams compete as (EOS-less) hypotheses.
    penalty = length_penalty(gen_len, alpha)
    for b in np.flatnonzero(~done):
        _join_alive(finished[b], alive_scores[b], history[b], gen_len, penalty)

    best_seqs = []
    best_scores = np.empty((batch_size,), dtype=np.float64)
    for b in range(batch_size):
        if finished[b]:
            score, seq = finished[b][0]
        else:  # unreachable unless every candidate was -inf; return the first beam as is
            score, seq = -np.inf, history[b, 0, :gen_len].tolist()
        best_seqs.append(seq)
        best_scores[b] = score
    return SearchResult(tokens=_pack(best_seqs, pad_id), scores=best_scores.astype(np.float32),
                        row_limits=limits)


def _join_alive(hyps: list, alive_scores: np.ndarray, history: np.ndarray, gen_len: int,
                penalty: float) -> None:
    """A source that ran out of length: its alive beams (K,) with their histories (K,T)
    join its finished hypotheses as EOS-less ones, which keep the best K (ties: the earlier
    first)."""
    for k in np.flatnonzero(np.isfinite(alive_scores)):
        hyps.append((float(alive_scores[k] / penalty), history[k, :gen_len].tolist()))
    hyps.sort(key=lambda h: -h[0])
    del hyps[len(alive_scores):]
