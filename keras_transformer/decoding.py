"""Search algorithms for autoregressive decoding, in NumPy only.

This module imports nothing but NumPy and the standard library, so the same code runs in the
training package and in a deployment runtime without TensorFlow or Keras.

The searches never see the model. They drive a *stepper* through two callables:

``step(tokens, index) -> logits``
    ``tokens`` is an ``int32`` array of shape ``(n,)`` holding the previous token of every row,
    ``index`` is its decoder position (index 0 is the BOS token). Returns the logits for the
    next token, a float array of shape ``(n, vocab)``. The stepper keeps its own key/value cache.
    It may instead return ``(logits, log_normalizer)``, the second being ``logsumexp(logits)``
    per row ``(n,)`` computed by the runtime; the search then skips its own.

``reorder(indices) -> None``
    Beam search only. After choosing which beams survive it passes the ``int32`` parent row of
    every new row; the stepper must gather its cache rows (``cache = cache[indices]``). Rows are
    laid out ``b * beam_size + k`` (source ``b``, beam ``k``), so the stepper must have been
    tiled to ``batch_size * beam_size`` rows before the search starts.

:class:`Stepper` names the pair as one object. :func:`search` picks greedy or beam search by
the beam size; :func:`sample_search` continues prompts by sampling (or greedily).

Every search takes two constraints on what it generates, both off by default (0), and then
costs nothing:

``no_repeat_ngram_size=n``
    No n-gram occurs twice among a row's generated tokens (BOS and prompts are not part of
    them). At each step the tokens that would complete an n-gram already generated in that
    row are banned; in beam search the row is a beam, with its own history.
``min_length=m``
    EOS is banned while fewer than ``m`` tokens have been generated, so every output has at
    least ``m`` tokens before its EOS, with two exceptions: an output cut by ``max_length``
    (``max_length`` tokens, no EOS; fewer than ``m`` if ``max_length < m``) and a row left
    with no allowed token (below).

A banned token's log-probability becomes ``-inf`` *after* the log-softmax: the other tokens
are not renormalised, so scores stay log-probabilities under the model (and a runtime's
log-normalizer stays valid). A row left with no token of nonzero probability (every token
banned, or only tokens the model gives probability zero left) produces EOS, scored with the
model's log-probability of EOS, whatever the constraints.

Beam search follows the "2K candidates" scheme of tensor2tensor / Hugging Face with Hugging
Face's default stopping heuristic; with ``beam_size=1`` it returns exactly the greedy tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = [
    "SearchResult",
    "StepFn",
    "ReorderFn",
    "Stepper",
    "beam_search",
    "filter_top_k",
    "filter_top_p",
    "greedy_search",
    "length_penalty",
    "log_softmax",
    "sample_logits",
    "sample_search",
    "search",
]

StepFn = Callable[[np.ndarray, int], np.ndarray]
ReorderFn = Callable[[np.ndarray], None]


class Stepper(Protocol):
    """A decoder with its own cache, as the searches drive it (see the module docstring)."""

    def step(self, tokens: np.ndarray, index: int): ...

    def reorder(self, indices: np.ndarray) -> None: ...

# Above this many logits per row, the top-2K selection uses np.argpartition first.
_FULL_SORT_LIMIT = 64


@dataclass
class SearchResult:
    """Output of :func:`greedy_search` and :func:`beam_search`.

    Attributes:
        tokens: ``(batch, T)`` ``int32``: the generated ids without the BOS token, EOS included
            when it was produced, ``pad_id`` after it. ``T`` is the longest output. A row without
            EOS always has length ``T`` (it stopped at ``max_length``), so padding only ever
            follows an EOS.
        scores: ``(batch,)`` ``float32``. Greedy: the sum of the log-probabilities of the
            generated tokens (EOS included). Beam: the length-normalised score of the returned
            hypothesis, ``sum_logprob / length_penalty(len, alpha)``.
    """

    tokens: np.ndarray
    scores: np.ndarray

    def to_lists(self, eos_id: int) -> list[list[int]]:
        """The ids of every row up to (not including) the first EOS, as Python lists."""
        out = []
        for row in np.asarray(self.tokens):
            ids = row.tolist()
            if eos_id in ids:
                ids = ids[: ids.index(eos_id)]
            out.append(ids)
        return out


# ---------------------------------------------------------------------------------------------
# Elementary functions
# ---------------------------------------------------------------------------------------------


def length_penalty(length, alpha: float):
    """GNMT length penalty ``((5 + length) / 6) ** alpha`` (Wu et al., 2016).

    Accepts a scalar (returns a Python float) or an array (returns a float64 array).
    """
    if np.ndim(length) == 0:
        return float(((5.0 + float(length)) / 6.0) ** float(alpha))
    return ((5.0 + np.asarray(length, dtype=np.float64)) / 6.0) ** float(alpha)


def log_softmax(logits, axis: int = -1) -> np.ndarray:
    """Numerically stable log-softmax along ``axis``.

    Floating inputs keep their dtype; other inputs are computed in float64. ``-inf`` logits give
    ``-inf``; a slice whose logits are all ``-inf`` gives NaN.
    """
    x = np.asarray(logits)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0).astype(x.dtype)
        shifted = x - m
        lse = np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
        return shifted - lse


def _softmax(x: np.ndarray) -> np.ndarray:
    return np.exp(log_softmax(x))


def filter_top_k(logits, k: int) -> np.ndarray:
    """Keep the ``k`` largest logits of every row (last axis), set the others to ``-inf``.

    Exactly ``k`` entries are kept; on ties the lower id wins (as in ``np.argmax``), so
    ``k=1`` keeps only the argmax. ``k=0`` (or ``k >= vocab``) disables the filter.
    """
    x = np.array(logits, dtype=np.result_type(np.asarray(logits).dtype, np.float32), copy=True)
    k = int(k)
    if k < 0:
        raise ValueError(f"top_k must be >= 0 (0 disables it), got {k}")
    vocab = x.shape[-1]
    if k == 0 or k >= vocab:
        return x
    order = np.argsort(-x, axis=-1, kind="stable")
    drop = order[..., k:]
    np.put_along_axis(x, drop, -np.inf, axis=-1)
    return x


def filter_top_p(logits, p: float) -> np.ndarray:
    """Nucleus filter: keep the smallest set of top tokens whose cumulative probability is
    ``>= p`` (the top token is always kept), set the others to ``-inf``. ``p >= 1`` disables it.
    """
    x = np.array(logits, dtype=np.result_type(np.asarray(logits).dtype, np.float32), copy=True)
    p = float(p)
    if not 0.0 < p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1 disables it), got {p}")
    if p >= 1.0:
        return x
    probs = _softmax(x.astype(np.float64))
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_probs = np.take_along_axis(probs, order, axis=-1)
    mass_before = np.cumsum(sorted_probs, axis=-1) - sorted_probs
    keep_sorted = mass_before < p
    keep_sorted[..., 0] = True
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    x[~keep] = -np.inf
    return x


def sample_logits(
    logits,
    rng: np.random.Generator,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> np.ndarray:
    """Sample one id per row from ``(n, vocab)`` logits; returns ``(n,)`` ``int32``.

    Applied in the order temperature, top-k, top-p (as in Hugging Face). ``temperature=0``
    means argmax; ``top_k=0`` and ``top_p=1.0`` switch the filters off.
    """
    x = np.asarray(logits)
    if x.ndim != 2:
        raise ValueError(f"logits must have shape (n, vocab), got shape {x.shape}")
    temperature = float(temperature)
    if temperature < 0.0 or not np.isfinite(temperature):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if int(top_k) < 0:
        raise ValueError(f"top_k must be >= 0 (0 disables it), got {top_k}")
    if not 0.0 < float(top_p) <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1 disables it), got {top_p}")
    x = x.astype(np.float64)
    if temperature == 0.0:
        return np.argmax(x, axis=-1).astype(np.int32)
    # Scaled from each row's maximum, so that a tiny temperature can only send the others to
    # -inf (probability 0: the argmax limit), never the maximum to +inf.
    top = x.max(axis=-1, keepdims=True)
    with np.errstate(over="ignore"):
        x = (x - np.where(np.isfinite(top), top, 0.0)) / temperature
    x = filter_top_k(x, top_k)
    x = filter_top_p(x, top_p)
    # Gumbel-max trick: argmax(logits + Gumbel noise) is a sample from softmax(logits);
    # -inf (filtered) entries can never win.
    noisy = x + rng.gumbel(size=x.shape)
    return np.argmax(noisy, axis=-1).astype(np.int32)


# ---------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------


def _check_positive(name: str, value) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _call_step(
    step: StepFn,
    tokens: np.ndarray,
    index: int,
    n: int,
    vocab: int | None,
    eos_id: int | None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Call the stepper and validate what it returned; -> float logits (n, vocab) (float32
    and float64 are kept as they are: a float64 copy of every step's logits costs more than
    the search itself) and the stepper's log-normalizer (n,) float64, or None. An eos_id of
    None is not checked against the vocabulary."""
    out = step(tokens, index)
    log_normalizer = None
    if isinstance(out, tuple):
        out, log_normalizer = out
        log_normalizer = np.asarray(log_normalizer, np.float64).reshape(-1)
        if log_normalizer.shape != (n,):
            raise ValueError(f"step(tokens, {index}) returned a log-normalizer of shape "
                             f"{log_normalizer.shape}; expected ({n},)")
    logits = np.asarray(out)
    if logits.ndim != 2 or logits.shape[0] != n or (vocab is not None and logits.shape[1] != vocab):
        expected = f"({n}, {vocab if vocab is not None else 'vocab'})"
        raise ValueError(
            f"step(tokens, {index}) returned logits of shape {logits.shape}; expected {expected}"
        )
    if vocab is None:
        if logits.shape[1] < 2:
            raise ValueError(f"the vocabulary must have at least 2 ids, got {logits.shape[1]}")
        if eos_id is not None and not 0 <= eos_id < logits.shape[1]:
            raise ValueError(f"eos_id={eos_id} is outside the vocabulary [0, {logits.shape[1]})")
    if logits.dtype in (np.float32, np.float64):
        return logits, log_normalizer
    if not (np.issubdtype(logits.dtype, np.floating) or np.issubdtype(logits.dtype, np.integer)):
        raise ValueError(f"step(tokens, {index}) returned logits of dtype {logits.dtype}")
    return logits.astype(np.float64), log_normalizer


def _checked_logsumexp(logits: np.ndarray, row_max: np.ndarray, active_rows: np.ndarray,
                       index: int, log_normalizer: np.ndarray | None = None):
    """-> (logits with the NaN / all -inf rows of inactive rows set to -inf, float64
    log-sum-exp per row, True if such rows were replaced).

    ``row_max`` is each row's maximum (NaN if the row holds one), from a pass the caller
    makes anyway. log_softmax(x)[v] = x[v] - logsumexp(x): the searches rank tokens by the raw
    logits and normalise only the few they keep, so no (rows, vocab) float64 array is made.
    """
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        bad = ~np.isfinite(row_max)
        replaced = bool(bad.any())
        if replaced:
            if (bad & active_rows).any():
                row = int(np.flatnonzero(bad & active_rows)[0])
                raise ValueError(
                    f"step(tokens, {index}) returned logits for row {row} that are NaN or all "
                    f"-inf")
            logits = logits.copy()
            logits[bad] = -np.inf
            row_max = np.where(bad, 0.0, row_max)
        if log_normalizer is not None:
            return logits, np.where(bad, -np.inf, log_normalizer), replaced
        m = row_max.astype(logits.dtype)
        shifted = logits - m[:, None]
        np.exp(shifted, out=shifted)
        total = shifted.sum(axis=1).astype(np.float64)  # pairwise sum: float32 is exact enough
        return logits, m.astype(np.float64) + np.log(total), replaced


def _chunk_maxima(x: np.ndarray, n: int) -> np.ndarray:
    """(rows, m) -> (rows, n): the maxima of n consecutive chunks covering every row (NaN
    propagates). Their maximum is the row's, and their minimum is a lower bound on its n-th
    largest entry (each chunk holds one entry at least that large)."""
    step = x.shape[1] // n
    return np.maximum.reduceat(x, np.arange(0, n * step, step), axis=1)


def _top_per_row(x: np.ndarray, n: int, chunk_maxima: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``n`` largest entries of every row, best first, ties to the lower index.

    Rows must hold no NaN. Only the entries at or above a per-row threshold (the least of the
    row's ``n`` chunk maxima, see `_chunk_maxima`) are sorted: usually a few dozen of
    thousands, found in two vectorised passes instead of a partition of every row.
    """
    rows, m = x.shape
    if n >= m or m <= _FULL_SORT_LIMIT:
        return np.argsort(-x, axis=1, kind="stable")[:, :n]
    if chunk_maxima is None:
        chunk_maxima = _chunk_maxima(x, n)
    threshold = chunk_maxima.min(axis=1)
    flat = np.flatnonzero(x >= threshold[:, None])  # row-major: grouped by row, ids ascending
    row, col = np.divmod(flat, m)
    values = x.reshape(-1)[flat]
    order = np.lexsort((col, -values, row))  # per row: best first, ties to the lower id
    row, col = row[order], col[order]
    starts = np.searchsorted(row, np.arange(rows))
    rank = np.arange(len(row)) - starts[row]
    keep = rank < n
    out = np.empty((rows, n), dtype=np.intp)
    out[row[keep], rank[keep]] = col[keep]
    return out


def _check_constraints(no_repeat_ngram_size, min_length) -> tuple[int, int]:
    values = []
    for name, value in (("no_repeat_ngram_size", no_repeat_ngram_size),
                        ("min_length", min_length)):
        if isinstance(value, bool) or int(value) != value or int(value) < 0:
            raise ValueError(f"{name} must be an integer >= 0 (0 disables it), got {value!r}")
        values.append(int(value))
    return values[0], values[1]


def _ngram_bans(history: np.ndarray, lengths: np.ndarray, n: int):
    """-> (rows, tokens) index arrays: for every row ``r``, the tokens that would complete an
    ``n``-gram already present in ``history[r, :lengths[r]]``; a token may be listed more than
    once."""
    width = history.shape[1]
    if n == 1:
        rows, cols = np.nonzero(np.arange(width) < lengths[:, None])
        return rows, history[rows, cols]
    n_starts = width - n + 1  # n-grams may start at 0 .. width - n
    if n_starts <= 0:
        return np.empty(0, np.intp), np.empty(0, history.dtype)
    # The last n - 1 tokens of every row (rows shorter than n have no n-gram and match none).
    suffix_at = np.maximum(lengths[:, None] - (n - 1) + np.arange(n - 1), 0)
    suffix = np.take_along_axis(history, suffix_at, axis=1)
    windows = np.lib.stride_tricks.sliding_window_view(history[:, : width - 1], n - 1, axis=1)
    match = (windows == suffix[:, None, :]).all(axis=2)
    match &= np.arange(n_starts) <= (lengths - n)[:, None]
    rows, starts = np.nonzero(match)
    return rows, history[rows, starts + n - 1]


def _constrain(logits: np.ndarray, history: np.ndarray, lengths: np.ndarray, *,
               no_repeat_ngram_size: int, min_length: int, eos_id: int):
    """Apply the constraints (module docstring) to one step's logits.

    ``history[r, :lengths[r]]`` are the tokens row ``r`` generated so far. -> ``(logits,
    dead)``: ``logits`` itself and None when nothing is banned; else a copy with the banned
    entries set to ``-inf`` (the caller's log-normalizer, computed before, is kept) and the
    rows left without a finite entry, whose EOS entry is restored and which must produce EOS.
    """
    rows, cols = [], []
    if no_repeat_ngram_size:
        r, c = _ngram_bans(history, lengths, no_repeat_ngram_size)
        rows.append(r)
        cols.append(c)
    if min_length:
        r = np.flatnonzero(lengths < min_length)
        rows.append(r)
        cols.append(np.full(len(r), eos_id))
    if not sum(len(r) for r in rows):
        return logits, None
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    masked = logits.copy()
    masked[rows, cols] = -np.inf
    dead = masked.max(axis=1) == -np.inf
    if dead.any():
        masked[dead, eos_id] = logits[dead, eos_id]
        return masked, dead
    return masked, None


def _pack(seqs: list[list[int]], pad_id: int) -> np.ndarray:
    width = max((len(s) for s in seqs), default=0)
    out = np.full((len(seqs), width), pad_id, dtype=np.int32)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out


# ---------------------------------------------------------------------------------------------
# Greedy search
# ---------------------------------------------------------------------------------------------


def greedy_search(
    step: StepFn,
    batch_size: int,
    *,
    bos_id: int,
    eos_id: int,
    max_length: int,
    pad_id: int = 0,
    no_repeat_ngram_size: int = 0,
    min_length: int = 0,
) -> SearchResult:
    """Greedy decoding of ``batch_size`` rows.

    ``max_length`` is the maximum number of generated tokens, EOS included. A row that produced
    EOS emits ``pad_id`` afterwards (and ``pad_id`` is what is fed back to the stepper for it);
    the search stops as soon as every row has finished. ``step`` is always called with the whole
    batch. Ties go to the lowest id, as in ``np.argmax``. ``no_repeat_ngram_size`` and
    ``min_length`` are described in the module docstring.
    """
    batch_size = _check_positive("batch_size", batch_size)
    max_length = _check_positive("max_length", max_length)
    bos_id, eos_id, pad_id = int(bos_id), int(eos_id), int(pad_id)
    no_repeat_ngram_size, min_length = _check_constraints(no_repeat_ngram_size, min_length)
    constrained = bool(no_repeat_ngram_size or min_length)

    tokens = np.full((batch_size,), bos_id, dtype=np.int32)
    finished = np.zeros((batch_size,), dtype=bool)
    scores = np.zeros((batch_size,), dtype=np.float64)
    out = np.full((batch_size, max_length), pad_id, dtype=np.int32)
    rows = np.arange(batch_size)
    vocab = None
    steps = 0
    for t in range(max_length):
        logits, log_normalizer = _call_step(step, tokens, t, batch_size, vocab, eos_id)
        vocab = logits.shape[1]
        # argmax finds a NaN first, so the row maximum it gives flags NaN rows too.
        best = np.argmax(logits, axis=1)
        logits, lse, replaced = _checked_logsumexp(logits, logits[rows, best], ~finished, t,
                                                   log_normalizer)
        if replaced:
            best = np.argmax(logits, axis=1)
        if constrained:
            masked, dead = _constrain(logits, out[:, :t], np.full(batch_size, t),
                                      no_repeat_ngram_size=no_repeat_ngram_size,
                                      min_length=min_length, eos_id=eos_id)
            if masked is not logits:
                logits = masked
                best = np.argmax(logits, axis=1)
                if dead is not None:
                    best[dead] = eos_id
        new_scores = scores + (logits[rows, best].astype(np.float64) - lse)
        next_tokens = np.where(finished, pad_id, best).astype(np.int32)
        scores = np.where(finished, scores, new_scores)
        out[:, t] = next_tokens
        finished = finished | (next_tokens == eos_id)
        steps = t + 1
        if finished.all():
            break
        tokens = next_tokens
    return SearchResult(tokens=out[:, :steps].copy(), scores=scores.astype(np.float32))


# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------


def beam_search(
    step: StepFn,
    reorder: ReorderFn,
    batch_size: int,
    *,
    beam_size: int,
    bos_id: int,
    eos_id: int,
    max_length: int,
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
    """
    batch_size = _check_positive("batch_size", batch_size)
    k_beams = _check_positive("beam_size", beam_size)
    max_length = _check_positive("max_length", max_length)
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

        if done.all() or t == max_length - 1:
            break
        parents = (row_base + parent_beam).reshape(-1).astype(np.int32)
        reorder(parents)
        tokens = new_tokens.reshape(-1)

    # Sources that ran out of length: their alive beams compete as (EOS-less) hypotheses.
    penalty = length_penalty(gen_len, alpha)
    for b in np.flatnonzero(~done):
        hyps = finished[b]
        for k in range(k_beams):
            if np.isfinite(alive_scores[b, k]):
                hyps.append((float(alive_scores[b, k] / penalty), history[b, k, :gen_len].tolist()))
        hyps.sort(key=lambda h: -h[0])
        del hyps[k_beams:]

    best_seqs = []
    best_scores = np.empty((batch_size,), dtype=np.float64)
    for b in range(batch_size):
        if finished[b]:
            score, seq = finished[b][0]
        else:  # unreachable unless every candidate was -inf; return the first beam as is
            score, seq = -np.inf, history[b, 0, :gen_len].tolist()
        best_seqs.append(seq)
        best_scores[b] = score
    return SearchResult(tokens=_pack(best_seqs, pad_id), scores=best_scores.astype(np.float32))


# ---------------------------------------------------------------------------------------------
# Dispatch by beam size
# ---------------------------------------------------------------------------------------------


def search(
    stepper: Stepper,
    batch_size: int,
    *,
    beam_size: int,
    bos_id: int,
    eos_id: int,
    max_length: int,
    alpha: float = 0.6,
    pad_id: int = 0,
    no_repeat_ngram_size: int = 0,
    min_length: int = 0,
) -> SearchResult:
    """:func:`greedy_search` when ``beam_size`` is 1, else :func:`beam_search` (the stepper then
    holds ``batch_size * beam_size`` rows)."""
    constraints = dict(no_repeat_ngram_size=no_repeat_ngram_size, min_length=min_length)
    if beam_size == 1:
        return greedy_search(stepper.step, batch_size, bos_id=bos_id, eos_id=eos_id,
                             max_length=max_length, pad_id=pad_id, **constraints)
    return beam_search(stepper.step, stepper.reorder, batch_size, beam_size=beam_size,
                       bos_id=bos_id, eos_id=eos_id, max_length=max_length, alpha=alpha,
                       pad_id=pad_id, **constraints)


# ---------------------------------------------------------------------------------------------
# Sampling with prompts
# ---------------------------------------------------------------------------------------------


def sample_search(
    step: StepFn,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    eos_id: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = 0,
    pad_id: int = 0,
    no_repeat_ngram_size: int = 0,
    min_length: int = 0,
) -> list[list[int]]:
    """Continue every prompt by up to ``max_new_tokens`` tokens, sampled by
    :func:`sample_logits` (greedy when ``temperature`` is 0); -> the new tokens of every
    prompt, up to and including its first EOS.

    ``step`` sees every row at every position from 0 on (the stepper needs a cache of
    ``longest prompt + max_new_tokens - 1`` slots): a row still reading its prompt is fed its
    next prompt token, whatever was sampled; a finished row is fed ``pad_id``. The search
    stops once every row has produced EOS. ``seed`` seeds ``np.random.default_rng``, so a seed
    reproduces its samples.

    ``no_repeat_ngram_size`` and ``min_length`` (module docstring) apply to the new tokens of
    every row, which are all its history: the prompt is neither searched for n-grams nor
    counted. The filters of :func:`sample_logits` apply to the constrained logits. With either
    constraint on, ``eos_id`` must be in the vocabulary.
    """
    if not len(prompts) or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (e.g. the BOS id)")
    if isinstance(max_new_tokens, bool) or int(max_new_tokens) != max_new_tokens \
            or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    max_new_tokens = int(max_new_tokens)
    no_repeat_ngram_size, min_length = _check_constraints(no_repeat_ngram_size, min_length)
    constrained = bool(no_repeat_ngram_size or min_length)
    rng = np.random.default_rng(seed)
    batch = len(prompts)
    lengths = np.array([len(p) for p in prompts])
    total = int(lengths.max()) + max_new_tokens
    buffer = np.full((batch, total), pad_id, np.int32)
    for row, prompt in enumerate(prompts):
        buffer[row, : len(prompt)] = prompt
    finished = np.zeros(batch, bool)
    if constrained:
        # Every row's new tokens, left-aligned: the history the constraints look at.
        generated = np.full((batch, total), pad_id, np.int32)
        n_generated = np.zeros(batch, np.int64)
    vocab = None
    for index in range(total - 1):
        logits, _ = _call_step(step, buffer[:, index], index, batch, vocab,
                               eos_id if constrained else None)
        vocab = logits.shape[1]
        dead = None
        if constrained:
            logits, dead = _constrain(logits, generated[:, : n_generated.max()], n_generated,
                                      no_repeat_ngram_size=no_repeat_ngram_size,
                                      min_length=min_length, eos_id=eos_id)
        chosen = sample_logits(logits, rng, temperature=temperature, top_k=top_k, top_p=top_p)
        if dead is not None:
            chosen[dead] = eos_id
        # Rows still reading their prompt are fed the prompt, not the sample.
        generating = (index + 1 >= lengths) & ~finished
        buffer[generating, index + 1] = chosen[generating]
        if constrained:
            generated[generating, n_generated[generating]] = chosen[generating]
            n_generated += generating
        finished |= generating & (chosen == eos_id)
        if finished.all():
            break
    outputs = []
    for row, prompt in enumerate(prompts):
        new = buffer[row, len(prompt): len(prompt) + max_new_tokens].tolist()
        if eos_id in new:
            new = new[: new.index(eos_id) + 1]
        outputs.append(new)
    return outputs
