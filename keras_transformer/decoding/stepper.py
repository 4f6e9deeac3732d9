"""What the searches drive and what they return: the stepper (the package docstring gives its
contract), the check of what it returns, and `SearchResult`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

StepFn = Callable[[np.ndarray, int], np.ndarray]
ReorderFn = Callable[[np.ndarray], None]


class Stepper(Protocol):
    """A decoder with its own cache, as the searches drive it (see the module docstring)."""

    def step(self, tokens: np.ndarray, index: int): ...

    def reorder(self, indices: np.ndarray) -> None: ...


@dataclass
class SearchResult:
    """Output of :func:`greedy_search` and :func:`beam_search`.

    Attributes:
        tokens: ``(batch, T)`` ``int32``: the generated ids without the BOS token, EOS included
            when it was produced, ``pad_id`` after it. ``T`` is the longest output. A row without
            EOS stopped at its limit: at ``T`` when one ``max_length`` held for every row, at
            its own limit (``row_limits``) when each row had one.
        scores: ``(batch,)`` ``float32``. Greedy: the sum of the log-probabilities of the
            generated tokens (EOS included). Beam: the length-normalised score of the returned
            hypothesis, ``sum_logprob / length_penalty(len, alpha)``.
        row_limits: ``(batch,)`` each row's ``max_length`` when the rows had their own, else None.
    """

    tokens: np.ndarray
    scores: np.ndarray
    row_limits: np.ndarray | None = None

    def to_lists(self, eos_id: int) -> list[list[int]]:
        """The ids of every row up to (not including) the first EOS, or up to the row's
        limit, as Python lists."""
        out = []
        limits = ([None] * len(self.tokens) if self.row_limits is None
                  else self.row_limits.tolist())
        for row, limit in zip(np.asarray(self.tokens), limits, strict=True):
            ids = row.tolist()[:limit]
            if eos_id in ids:
                ids = ids[: ids.index(eos_id)]
            out.append(ids)
        return out


def _check_limits(max_length, batch_size: int) -> np.ndarray | None:
    """None for one ``max_length`` (a positive int) shared by every row, else the rows' own
    limits, one positive int per row, as (batch_size,) int64."""
    if np.ndim(max_length) == 0:
        _check_positive("max_length", max_length)
        return None
    limits = np.asarray(max_length)
    if (limits.shape != (batch_size,) or not np.issubdtype(limits.dtype, np.integer)
            or (limits < 1).any()):
        raise ValueError(f"max_length must be a positive integer or {batch_size} of them (one "
                         f"per row), got {max_length!r}")
    return limits.astype(np.int64)


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


def _pack(seqs: list[list[int]], pad_id: int) -> np.ndarray:
    width = max((len(s) for s in seqs), default=0)
    out = np.full((len(seqs), width), pad_id, dtype=np.int32)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out
