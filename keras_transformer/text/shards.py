"""TSV shards of `source<TAB>target` lines, gzip or not, read without TensorFlow: a shard's
compression by its first bytes, its pairs line by line, which part of them a worker reads, and
the stream of lines of several shards in tf.data's interleave order (the NumPy input path's
reader, `numpy_pipeline.StreamBatches`).

A worker's part (`worker_part`): with at least as many shards as workers, whole shards (worker
i of n reads shards i, i + n, ...: no shard is opened twice); with fewer, every worker reads
every shard and keeps every n-th line of the interleaved stream, from its i-th on (tf.data's
`shard`). Either way the parts are disjoint and together hold each line once.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

GZIP_MAGIC = b"\x1f\x8b"


def compression_of(path: Path) -> str:
    """tf.data's compression_type for `path`: "GZIP" when it starts with gzip's magic bytes
    (whatever its name), else ""; an unreadable file is an error naming it."""
    try:
        with open(path, "rb") as file:
            return "GZIP" if file.read(2) == GZIP_MAGIC else ""
    except OSError as err:
        raise ValueError(f"shard {path} is unreadable ({err.strerror or err})") from None


def shard_pairs(path: Path) -> Iterator[tuple[str, str] | None]:
    """Each line of a shard as its (source, target), stripped, or None for a blank line or
    an empty side (dropped and counted, as the in-memory reader does); ValueError naming
    the file (and line) for anything that makes the shard unreadable."""
    path = Path(path)
    opener = gzip.open if compression_of(path) == "GZIP" else open
    number = 0
    try:
        with opener(path, "rb") as file:
            for number, raw in enumerate(file, start=1):
                line = raw.decode("utf-8").rstrip("\r\n").removeprefix("\ufeff")
                if not line.strip():
                    yield None
                    continue
                columns = line.split("\t")
                if len(columns) != 2:
                    raise ValueError(f"shard {path} line {number} has {len(columns)} "
                                     f"tab-separated columns; a shard holds source<TAB>target")
                source, target = columns[0].strip(), columns[1].strip()
                yield (source, target) if source and target else None
    except UnicodeDecodeError as err:
        raise ValueError(f"shard {path} line {number + 1} is not UTF-8 (byte "
                         f"{err.start + 1})") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise ValueError(f"shard {path} is a corrupt gzip file after line {number} "
                         f"({' '.join(str(err).split()) or type(err).__name__})") from None
    except OSError as err:
        raise ValueError(f"shard {path} is unreadable ({err.strerror or err})") from None


def worker_part(num_files: int, workers: int, index: int) -> tuple[list[int], bool]:
    """(the shards worker `index` of `workers` opens, by position, whether it keeps only every
    `workers`-th line of them): whole shards when there are at least as many as workers,
    else all of them, shared line by line."""
    if workers < 1 or not 0 <= index < workers:
        raise ValueError(f"worker {index} of {workers}: need 0 <= index < workers")
    if num_files >= workers:
        return list(range(index, num_files, workers)), False
    return list(range(num_files)), workers > 1


def shard_order(num_files: int, shuffle: bool, seed: int, pass_index: int) -> np.ndarray:
    """The order a pass opens its shards in: seeded and new each pass when shuffling."""
    if not shuffle:
        return np.arange(num_files)
    return np.random.default_rng([seed, pass_index]).permutation(num_files)


def interleaved_pairs(files: Sequence[Path], *, shuffle: bool, seed: int, repeat: bool,
                      cycle_length: int, workers: int = 1, index: int = 0
                      ) -> Iterator[tuple[str, str] | None]:
    """The lines of worker `index`'s part of `files` (shard_pairs' items, None for a dropped
    line), `cycle_length` shards open at a time and a line of each in turn, as tf.data's
    `interleave(cycle_length, block_length=1)` reads: a shard that ends frees its place, which
    the next shard takes when the turn comes back to it. With `repeat` the next pass's shards
    (in a new order when shuffling) follow the last of this pass's without a break."""
    chosen, by_line = worker_part(len(files), workers, index)
    files = [files[i] for i in chosen]

    def shards():
        pass_index = 0
        while True:
            for i in shard_order(len(files), shuffle, seed, pass_index):
                yield files[int(i)]
            if not repeat:
                return
            pass_index += 1

    pending = shards()
    slots: list[Iterator | None] = [None] * max(1, min(cycle_length, len(files)))
    open_count, exhausted, slot, line = 0, False, 0, 0
    while not exhausted or open_count:
        reader = slots[slot]
        if reader is not None:
            item = next(reader, StopIteration)
            if item is not StopIteration:
                if not by_line or line % workers == index:
                    yield item
                line += 1
                slot = (slot + 1) % len(slots)
                continue
            slots[slot], open_count = None, open_count - 1
            slot = (slot + 1) % len(slots)
        elif not exhausted:
            path = next(pending, None)
            if path is None:
                exhausted = True
            else:
                slots[slot], open_count = shard_pairs(path), open_count + 1
        else:
            slot = (slot + 1) % len(slots)
