"""Source sentences to padded id batches, in NumPy only (shared by every runtime)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

import numpy as np

logger = logging.getLogger(__name__)
TRUNCATED_SHOWN = 5  # line numbers named in the truncation warning


def default_max_length(source_length, limit, minimum=min):
    """How many tokens to allow a translation: 1.5x the source (rounded down) plus 10, capped
    by the model's `limit`. Integer arithmetic only, so `source_length` may be an integer
    tensor too, with `minimum` the framework's element-wise minimum (e.g. tf.minimum)."""
    return minimum(limit, (source_length * 3) // 2 + 10)


def pad_batch(rows: Sequence[Sequence[int]], pad_id: int = 0) -> np.ndarray:
    """Id lists -> (B, longest) int32, right-padded with pad_id."""
    out = np.full((len(rows), max(len(r) for r in rows)), pad_id, np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def encode_sources(sentences: Sequence[str], encode: Callable[[list[str]], list[list[int]]],
                   max_source_length: int, eos_id: int, *, truncate: bool = False,
                   allow_empty: bool = False) -> list[list[int] | None]:
    """Sentences -> id lists ending in EOS.

    Empty or whitespace-only sentences are a ValueError, or None with allow_empty. Over-long
    sentences are a ValueError, or keep their first max_source_length - 1 pieces with
    truncate: one warning per call counts them and names the first lines (a file of news
    articles is cut nearly line by line).
    """
    encoded: list[list[int] | None] = []
    cut: list[int] = []
    for i, (text, ids) in enumerate(zip(sentences, encode(list(sentences)), strict=True)):
        if not text.strip() or not ids:
            if not allow_empty:
                raise ValueError(f"sentence {i + 1} is empty; remove it or give it some text")
            encoded.append(None)
            continue
        if len(ids) + 1 > max_source_length:
            if not truncate:
                raise ValueError(
                    f"sentence {i + 1} has {len(ids) + 1} tokens (with EOS) but the model "
                    f"accepts at most max_source_length={max_source_length}; split the "
                    f"sentence, or train a model with a larger max_source_length")
            cut.append(i + 1)
            ids = ids[: max_source_length - 1]
        encoded.append(list(ids) + [eos_id])
    warn_truncated(cut, len(sentences), max_source_length)
    return encoded


def warn_truncated(cut: Sequence[int], total: int, max_source_length: int) -> None:
    """One warning for the inputs (their line numbers, `cut`) of `total` that were cut to
    max_source_length - 1 pieces; nothing when none was."""
    if not cut:
        return
    shown = ", ".join(map(str, cut[:TRUNCATED_SHOWN])) + (", ..." if len(cut) >
                                                          TRUNCATED_SHOWN else "")
    # "inputs", not "sentences": a summarizer's inputs are articles, most of them cut.
    logger.warning("%d of %d inputs are longer than the model's max_source_length=%d "
                   "tokens (with EOS) and are truncated to their first %d (line %s)",
                   len(cut), total, max_source_length, max_source_length - 1, shown)


def batches_by_length(encoded: Sequence[Sequence[int] | None],
                      batch_size: int) -> Iterator[list[int]]:
    """Indices of the non-None rows in batches of similar length, which keeps padding small."""
    todo = sorted((i for i, ids in enumerate(encoded) if ids is not None),
                  key=lambda i: len(encoded[i]))
    for start in range(0, len(todo), batch_size):
        yield todo[start: start + batch_size]
