"""The batching rules of the input pipelines that need no TensorFlow: length buckets, their
token-budgeted batch sizes, which pairs are too long, the special ids, and language-model rows.
Both the tf.data pipelines (`pipeline`) and the NumPy ones (`numpy_pipeline`) use them, so the
two batch alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from keras_transformer.text.tokenizer import shared_special_ids


def bucket_boundaries_for(max_length: int, num_buckets: int = 4) -> list[int]:
    """Evenly spaced exclusive upper bounds, the last being ``max_length + 1``.

    Bucket ``i`` holds lengths in ``[boundaries[i-1], boundaries[i])`` and is padded
    to ``boundaries[i] - 1``, so the padded lengths are ``max_length * k / num_buckets``
    (rounded up) for ``k = 1..num_buckets``; duplicates for tiny ``max_length`` are merged.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    if num_buckets < 1:
        raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
    lengths = sorted({math.ceil(max_length * k / num_buckets) for k in range(1, num_buckets + 1)})
    return [length + 1 for length in lengths]


def check_boundaries(boundaries: Sequence[int], longest: int) -> list[int]:
    boundaries = [int(b) for b in boundaries]
    if not boundaries:
        raise ValueError("bucket_boundaries must not be empty")
    if boundaries[0] < 2 or any(b <= a for a, b in pairwise(boundaries)):
        raise ValueError(
            f"bucket_boundaries must be strictly increasing and >= 2, got {boundaries}"
        )
    if boundaries[-1] <= longest:
        # With pad_to_bucket_boundary, tf.data fails at iteration time on a
        # sequence that reaches the last boundary; fail here instead.
        raise ValueError(
            f"bucket_boundaries {boundaries} do not cover sequences of length {longest}: "
            f"the last boundary must be > {longest} (boundaries are exclusive upper bounds)"
        )
    return boundaries


def bucket_batch_sizes_for(boundaries: Sequence[int], tokens_per_batch: int) -> list[int]:
    """Per-bucket batch sizes ``max(1, tokens_per_batch // (boundary - 1))``, plus 1 for overflow."""
    sizes = [max(1, tokens_per_batch // (b - 1)) for b in boundaries]
    # tf.data wants one more size for the open-ended last bucket; nothing lands there.
    return sizes + [1]


def check_length_limits(max_source_length: int, max_target_length: int) -> None:
    if max_source_length < 1:
        raise ValueError(f"max_source_length must be >= 1 (room for EOS), got {max_source_length}")
    if max_target_length < 1:
        raise ValueError(
            f"max_target_length must be >= 1 (room for BOS/EOS), got {max_target_length}"
        )


def pair_buckets(sources, targets, *, max_source_length: int, max_target_length: int,
                 tokens_per_batch: int, bucket_boundaries: Sequence[int] | None,
                 fixed_target_length: bool, what: str) -> tuple[list[int], list[int]]:
    """The checked bucket boundaries of a pair batching and its per-bucket batch sizes (with
    the overflow bucket's 1, see bucket_batch_sizes_for), for tf.data and NumPy alike.
    Refuses, naming `what`, unequal sides, no pairs and limits or a budget below 1. Buckets
    go by the longer of source and target, or by the source alone with fixed_target_length;
    the default boundaries are bucket_boundaries_for that longest length."""
    if len(sources) != len(targets):
        raise ValueError(f"sources and targets differ in length: {len(sources)} vs "
                         f"{len(targets)}")
    if len(sources) == 0:
        raise ValueError(f"{what} got no sentence pairs")
    return budget_buckets(max_source_length=max_source_length,
                          max_target_length=max_target_length,
                          tokens_per_batch=tokens_per_batch,
                          bucket_boundaries=bucket_boundaries,
                          fixed_target_length=fixed_target_length)


def budget_buckets(*, max_source_length: int, max_target_length: int, tokens_per_batch: int,
                   bucket_boundaries: Sequence[int] | None, fixed_target_length: bool
                   ) -> tuple[list[int], list[int]]:
    """pair_buckets' boundaries and batch sizes, for pairs not held in memory (a stream)."""
    check_length_limits(max_source_length, max_target_length)
    if tokens_per_batch < 1:
        raise ValueError(f"tokens_per_batch must be >= 1, got {tokens_per_batch}")
    longest = max_source_length if fixed_target_length else max(max_source_length,
                                                                 max_target_length)
    if bucket_boundaries is None:
        bucket_boundaries = bucket_boundaries_for(longest)
    boundaries = check_boundaries(bucket_boundaries, longest)
    return boundaries, bucket_batch_sizes_for(boundaries, tokens_per_batch)


def count_too_long(
    sources: Sequence[str],
    targets: Sequence[str],
    source_tokenizer,
    target_tokenizer,
    *,
    max_source_length: int,
    max_target_length: int,
) -> int:
    """Number of pairs ``make_translation_dataset(drop_long=True)`` drops (per epoch).

    A pair is too long when ``len(source ids) + 1 > max_source_length`` (EOS) or
    ``len(target ids) + 1 > max_target_length`` (BOS for target_in, EOS for target_out).
    """
    check_length_limits(max_source_length, max_target_length)
    src_ids = source_tokenizer.encode(list(sources))
    tgt_ids = target_tokenizer.encode(list(targets))
    return sum(
        1
        for s, t in zip(src_ids, tgt_ids, strict=True)
        if len(s) + 1 > max_source_length or len(t) + 1 > max_target_length
    )


def special_ids_of(tokenizers, pad_id, bos_id, eos_id) -> tuple[int, int, int]:
    """(pad, bos, eos): each given id, else the one the tokenizers share."""
    ids = shared_special_ids(*tokenizers)
    return tuple(int(ids[name] if given is None else given) for name, given in
                 (("pad_id", pad_id), ("bos_id", bos_id), ("eos_id", eos_id)))


# Texts are encoded in chunks: SentencePiece's Python side returns lists of Python ints, which
# take about 36 bytes a token; a chunk at a time keeps only its own as lists.
_ENCODE_CHUNK = 1000


def encode_in_chunks(tokenizer, texts: Sequence[str]):
    """The ids of each of `texts`, in order, encoded a chunk of texts at a time."""
    for start in range(0, len(texts), _ENCODE_CHUNK):
        yield from tokenizer.encode(list(texts[start: start + _ENCODE_CHUNK]))


def language_model_rows(
    texts: Sequence[str],
    tokenizer,
    length: int,
    *,
    pad_id: int | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
) -> np.ndarray:
    """Texts -> (N, length + 1) int32 rows of one token stream, for a decoder-only model.

    Every text becomes BOS + ids + EOS; the texts are concatenated in order into one stream
    and cut into rows of ``length + 1`` tokens that overlap by one (row i is
    ``stream[i * length : i * length + length + 1]``), so that a row's inputs
    (``row[:-1]``) and targets (``row[1:]``) are both ``length`` long and every token after
    the first is a target of exactly one row. The last row is padded with PAD. Texts longer
    than ``length`` run on into the next row, so nothing is cut. PAD, BOS and EOS are the
    given ids, else the tokenizer's own.
    """
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    if len(texts) == 0:
        raise ValueError("language_model_rows got no texts")
    pad_id, bos_id, eos_id = special_ids_of((tokenizer,), pad_id, bos_id, eos_id)
    pieces = []
    for ids in encode_in_chunks(tokenizer, texts):
        pieces.append(np.asarray([bos_id, *ids, eos_id], np.int32))
    stream = np.concatenate(pieces)
    rows = -(-(len(stream) - 1) // length)  # ceil: the stream's first token is no target
    padded = np.full(rows * length + 1, pad_id, np.int32)
    padded[: len(stream)] = stream
    starts = np.arange(rows)[:, None] * length + np.arange(length + 1)[None, :]
    return padded[starts]
