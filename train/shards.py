"""Streamed training text (`data.stream: true`): `source<TAB>target` TSV shards named by a file
or a glob in data.train_source, gzip or not, found and checked here, then read by tf.data as
training consumes them (`keras_transformer.text.pipeline.make_tsv_stream_dataset`, or
`numpy_pipeline.StreamBatches` under JAX and PyTorch; a shard is read by
`keras_transformer.text.shards`).

Before training, one pass reads the shards: it refuses a broken shard (unreadable, a corrupt
gzip, invalid UTF-8, a line without exactly two columns) in one line naming the file and line,
counts the pairs, and draws the tokenizer's sample (`tokenizer.sample_sentences`), holding only
that sample, so the corpus never sits in memory. The shards are read side by side in blocks of
lines checked together by NumPy (`keras_transformer.text.shards.count_lines`); a shard those
checks cannot vouch for is read line by line (`shard_pairs`), which gives the error. One
process reads every shard and draws its sample from all of them: positions drawn from the
count alone (`sample_positions`, as sample_sentences draws from texts in memory), read back
from their shards. A worker of several
(`MultiWorkerMirroredStrategy`) reads only its part (`keras_transformer.text.shards.
worker_part`: its whole shards, or every n-th line), which the others check and count; the
workers' counts are summed (train.distribute.sum_over_workers), and the sample, which must
give every worker the same tokenizer, is the first pairs of every shard in turn, the same on
each.
"""

from __future__ import annotations

import itertools
import math
import operator
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from keras_transformer.text.shards import (
    ShardCount,
    chosen_pairs,
    compression_of,
    count_lines,
    interleaved_pairs,
    shard_pairs,
    worker_part,
)

from .config import DataConfig
from .data import matching_files
from .tokenizer_sources import sample_positions


def shard_files(config: DataConfig) -> list[Path]:
    """The shards data.train_source names (a file, or a glob), relative to the data folder,
    sorted; a glob that matches nothing, or a missing file, is an error naming it."""
    return matching_files(config.train_source, config, "data.train_source")


@dataclass
class ShardScan:
    files: list[Path]
    compressions: list[str]
    pairs: int = 0
    dropped_empty: int = 0
    sample_sources: list[str] = field(default_factory=list)
    sample_targets: list[str] = field(default_factory=list)


def scan_shards(files: list[Path], sample: int, seed: int, part: tuple[int, int] = (1, 0),
                cycle_length: int = 4) -> ShardScan:
    """The shards checked and counted in one pass and `sample` pairs drawn for the tokenizer.
    One process (`part` (1, 0)): every shard, the sample drawn across all of them (seeded,
    by position: sample_positions). Worker i of n (`part`
    (n, i)): only what its input pipeline reads in a pass (its whole shards, or
    interleaved_pairs over its part, `cycle_length` as the pipeline's, when it keeps every
    n-th line), and as the sample the first ceil(sample / shards) pairs of each shard, the
    same on every worker; `pairs` and `dropped_empty` then count its part alone."""
    scan = ShardScan(files, [compression_of(path) for path in files])
    workers, index = part
    chosen, by_line = worker_part(len(files), workers, index)
    if workers == 1:
        counts = shard_counts(files, fallback=True)
    else:  # a broken shard is reported as the pipeline would meet it: interleaved_pairs
        counts = None if by_line else shard_counts([files[i] for i in chosen], fallback=False)
    if counts is None:
        for pair in interleaved_pairs(files, shuffle=False, seed=seed, repeat=False,
                                      cycle_length=cycle_length, workers=workers, index=index):
            scan.pairs += pair is not None
            scan.dropped_empty += pair is None
    else:
        scan.pairs = sum(count.pairs for count in counts)
        scan.dropped_empty = sum(len(count.dropped) for count in counts)
    if workers == 1:
        drawn = drawn_pairs(files, counts, sample_positions(scan.pairs, sample, seed))
    else:
        each = math.ceil(sample / len(files))
        drawn = [pair for path in files for pair in itertools.islice(
            (p for p in shard_pairs(path) if p is not None), each)][:sample]
    scan.sample_sources = [s for s, _ in drawn]
    scan.sample_targets = [t for _, t in drawn]
    if workers == 1:
        check_pairs(scan)
    return scan


def shard_counts(files: list[Path], fallback: bool) -> list[ShardCount] | None:
    """Each shard's ShardCount (count_lines), shards read side by side. A shard count_lines
    cannot vouch for is read by shard_pairs, in the order of `files`, which raises the error
    a pass in Python would (with `fallback`); without, the answer is then None."""
    with ThreadPoolExecutor(min(len(files), os.cpu_count() or 1)) as pool:
        counts = list(pool.map(count_lines, files))
    if not fallback and None in counts:
        return None
    for i, count in enumerate(counts):
        if count is None:
            pairs = list(map(operator.not_, shard_pairs(files[i])))  # True: dropped
            counts[i] = ShardCount(len(pairs), np.flatnonzero(pairs))
    return counts


def drawn_pairs(files: list[Path], counts: list[ShardCount], positions) -> list[tuple[str, str]]:
    """The pairs at `positions` (ascending, from 0) of the shards' pairs one shard after
    another, each shard read up to its last one drawn."""
    ends = np.cumsum([count.pairs for count in counts])
    shard_of = np.searchsorted(ends, positions, side="right")
    jobs = []
    for i, (path, count) in enumerate(zip(files, counts, strict=True)):
        mine = positions[shard_of == i] - (ends[i] - count.pairs)
        jobs.append((path, count.line_numbers(mine)))
    with ThreadPoolExecutor(min(len(files), os.cpu_count() or 1)) as pool:
        return [pair for found in pool.map(lambda job: chosen_pairs(*job), jobs)
                for pair in found]


def check_pairs(scan: ShardScan) -> None:
    """A ValueError when the shards (all workers' parts, counted together) hold no pair."""
    if not scan.pairs:
        raise ValueError(f"the shards of data.train_source ({len(scan.files)} files, first "
                         f"{scan.files[0]}) hold no sentence pairs")
