"""Greedy search."""

from __future__ import annotations

import numpy as np

from .constraints import _check_constraints, _constrain
from .numerics import _checked_logsumexp
from .stepper import SearchResult, StepFn, _call_step, _check_limits, _check_positive


def greedy_search(
    step: StepFn,
    batch_size: int,
    *,
    bos_id: int,
    eos_id: int,
    max_length: int | np.ndarray,
    pad_id: int = 0,
    no_repeat_ngram_size: int = 0,
    min_length: int = 0,
) -> SearchResult:
    """Greedy decoding of ``batch_size`` rows.

    ``max_length`` is the maximum number of generated tokens, EOS included. A row that produced
    EOS emits ``pad_id`` afterwards (and ``pad_id`` is what is fed back to the stepper for it);
    the search stops as soon as every row has finished. ``step`` is always called with the whole
    batch. Ties go to the lowest id, as in ``np.argmax``. ``no_repeat_ngram_size`` and
    ``min_length`` are described in the module docstring. ``max_length`` may give each row
    its own limit (``batch_size`` ints), where the row ends.
    """
    batch_size = _check_positive("batch_size", batch_size)
    limits = _check_limits(max_length, batch_size)
    max_length = int(max_length if limits is None else limits.max())
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
        if limits is not None:
            finished |= limits == steps
        if finished.all():
            break
        tokens = next_tokens
    return SearchResult(tokens=out[:, :steps].copy(), scores=scores.astype(np.float32),
                        row_limits=limits)
