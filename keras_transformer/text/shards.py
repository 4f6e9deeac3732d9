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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


class ColumnCountError(ValueError):
    """A line that is not blank and has other than two tab-separated columns."""

    def __init__(self, columns: int):
        super().__init__(f"{columns} tab-separated columns")
        self.columns = columns


def open_shard(path: Path):
    """`path` opened for reading bytes, through gzip when it is one (compression_of)."""
    return gzip.open(path, "rb") if compression_of(path) == "GZIP" else open(path, "rb")


def line_pair(raw: bytes) -> tuple[str, str] | None:
    """One line of a shard (its bytes, the newline included or not) as its (source, target),
    stripped, or None for a blank line or an empty side; UnicodeDecodeError for invalid UTF-8,
    ColumnCountError for other than two columns."""
    line = raw.decode("utf-8").rstrip("\r\n").removeprefix("\ufeff")
    if not line.strip():
        return None
    columns = line.split("\t")
    if len(columns) != 2:
        raise ColumnCountError(len(columns))
    source, target = columns[0].strip(), columns[1].strip()
    return (source, target) if source and target else None


def shard_pairs(path: Path) -> Iterator[tuple[str, str] | None]:
    """Each line of a shard as its (source, target), stripped, or None for a blank line or
    an empty side (dropped and counted, as the in-memory reader does); ValueError naming
    the file (and line) for anything that makes the shard unreadable."""
    return shard_records(path, line_pair, "source<TAB>target")


def shard_records(path: Path, parse: Callable[[bytes], Any], holds: str) -> Iterator[Any]:
    """`parse(line)` of each line of a shard (its bytes): a record, or None for a line it
    drops. A line `parse` refuses (a ColumnCountError, or a ValueError of another kind), invalid
    UTF-8, a corrupt gzip file or an unreadable one: a ValueError naming the file and line,
    `holds` saying what a line should hold."""
    path = Path(path)
    number = 0
    try:
        with open_shard(path) as file:
            for number, raw in enumerate(file, start=1):  # noqa: B007 (the errors name it)
                yield parse(raw)
    except ColumnCountError as err:
        raise ValueError(f"shard {path} line {number} has {err.columns} tab-separated columns; "
                         f"a shard holds {holds}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"shard {path} line {number} is not "
                         f"UTF-8 (byte {err.start + 1})") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise ValueError(f"shard {path} is a corrupt gzip file after line {number} "
                         f"({' '.join(str(err).split()) or type(err).__name__})") from None
    except OSError as err:
        raise ValueError(f"shard {path} is unreadable ({err.strerror or err})") from None
    except ValueError as err:
        raise ValueError(f"shard {path} line {number}: {err}; a shard holds {holds}") from None


CHUNK_BYTES = 1 << 22  # a shard's bytes read at a time by count_lines and chosen_pairs


@dataclass
class ShardCount:
    """A shard's lines (`lines`) and the numbers, from 0, of those shard_pairs drops (`dropped`,
    ascending); the others are its pairs."""
    lines: int
    dropped: np.ndarray

    @property
    def pairs(self) -> int:
        return self.lines - len(self.dropped)

    def line_numbers(self, pairs: np.ndarray) -> np.ndarray:
        """The line numbers (from 0) of the pairs numbered `pairs` (from 0, ascending)."""
        # Pair k lies on line k + j, j the dropped lines before it: those with fewer than
        # k + 1 pairs before them (dropped line i, the j-th, has i - j pairs before it).
        before = self.dropped - np.arange(len(self.dropped))
        return pairs + np.searchsorted(before, pairs, side="right")


def solid(codes: np.ndarray) -> np.ndarray:
    """Which bytes are printable ASCII but space (0x21 to 0x7E): a side of a line holding one
    cannot strip to empty, whatever else it holds (no whitespace character, nor the byte-order
    mark line_pair removes, has such a byte in UTF-8). A side without one is left to
    line_pair."""
    return codes - np.uint8(0x21) < np.uint8(0x7F - 0x21)


def line_chunks(path: Path, stop: int | None = None) -> Iterator[tuple[bytes, np.ndarray]]:
    """A shard's bytes as runs of whole lines, each ending in a newline (one is added to a last
    line without), with the positions of those newlines; from the first line up to line number
    `stop` (from 0, excluded) or all of them. Raises what reading the file raises."""
    rest, lines = b"", 0
    with open_shard(path) as file:
        while stop is None or lines < stop:
            data = file.read(CHUNK_BYTES)
            if not data:
                if rest:
                    yield rest + b"\n", np.array([len(rest)])
                return
            data = rest + data
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                ends = np.flatnonzero(np.frombuffer(data, np.uint8, cut) == 10)
                lines += len(ends)
                yield data[:cut], ends


def count_lines(path: Path) -> ShardCount | None:
    """The shard's lines and the ones shard_pairs drops, read in blocks of whole lines checked
    together (valid UTF-8, one tab, sides holding a `solid` byte), line_pair deciding the few
    lines those cannot; None when a line or the file is broken, for shard_pairs to report as
    it does."""
    lines, dropped = 0, []
    try:
        for data, ends in line_chunks(path):
            data.decode("utf-8")  # only the check; a block of whole lines splits no character
            codes = np.frombuffer(data, np.uint8)
            starts = np.concatenate(([0], ends[:-1] + 1))
            tabs = np.flatnonzero(codes == 9)
            tab_line = np.searchsorted(ends, tabs)
            one_tab = np.bincount(tab_line, minlength=len(ends)) == 1
            # Each line's sides, split at its tab (a line without exactly one: whole, then its
            # newline alone), each of them holding a solid byte or not; an empty side gives its
            # first byte, a tab or a newline, which is not.
            middles = ends.copy()
            single = one_tab[tab_line]
            middles[tab_line[single]] = tabs[single]
            sides = np.logical_or.reduceat(solid(codes), np.stack([starts, middles], 1).ravel())
            left, right = sides[0::2], sides[1::2]
            if np.any(left & ~one_tab):
                return None  # a line of other than two columns
            for i in np.flatnonzero(~(left & right)):
                if line_pair(data[starts[i]:ends[i]]) is None:
                    dropped.append(lines + i)
            lines += len(ends)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ColumnCountError):
        return None
    return ShardCount(lines, np.array(dropped, dtype=np.int64))


def chosen_pairs(path: Path, numbers: np.ndarray) -> list[tuple[str, str]]:
    """The shard's pairs (line_pair) on the lines `numbers` (from 0, ascending), read up to
    the last of them; the shard has been read whole before (count_lines)."""
    found, first = [], 0
    if not len(numbers):
        return found
    for data, ends in line_chunks(path, stop=int(numbers[-1]) + 1):
        starts = np.concatenate(([0], ends[:-1] + 1))
        here = numbers[(numbers >= first) & (numbers < first + len(ends))] - first
        found += [line_pair(data[starts[i]:ends[i]]) for i in here]
        first += len(ends)
    return found


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
                      cycle_length: int, workers: int = 1, index: int = 0,
                      reader: Callable[[Path], Iterator[Any]] = shard_pairs) -> Iterator[Any]:
    """The lines of worker `index`'s part of `files` (the items of `reader(path)`:
    shard_pairs' by default, None for a dropped line; a task's records for the other streamed
    tasks), `cycle_length` shards open at a time and a line of each in turn, as tf.data's
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
        opened = slots[slot]
        if opened is not None:
            item = next(opened, StopIteration)
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
                slots[slot], open_count = reader(path), open_count + 1
        else:
            slot = (slot + 1) % len(slots)
