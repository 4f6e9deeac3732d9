"""The two constraints every search takes (the package docstring): no repeated n-gram and a
minimum length, as bans on one step's logits."""

from __future__ import annotations

import numpy as np


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
