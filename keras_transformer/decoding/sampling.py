"""Drawing one token per row from logits: temperature, top-k and top-p (nucleus) filters."""

from __future__ import annotations

import numpy as np

from .numerics import _softmax


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
