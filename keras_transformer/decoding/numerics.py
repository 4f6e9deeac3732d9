"""Log-probabilities and the top-candidate selection that the searches share."""

from __future__ import annotations

import numpy as np

# Above this many logits per row, the top-2K selection uses np.argpartition first.
_FULL_SORT_LIMIT = 64


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
