"""Streamed training text (`data.stream: true`): `source<TAB>target` TSV shards named by a file
or a glob in data.train_source, gzip or not, found and checked here, then read by tf.data as
training consumes them (`keras_transformer.text.pipeline.make_tsv_stream_dataset`, or
`numpy_pipeline.StreamBatches` under JAX and PyTorch; a shard is read by
`keras_transformer.text.shards`).

Before training, one pass in Python reads every shard line by line: it refuses a broken shard
(unreadable, a corrupt gzip, invalid UTF-8, a line without exactly two columns) in one line
naming the file and line, counts the pairs, and draws the tokenizer's sample
(`tokenizer.sample_sentences`), holding only that sample, so the corpus never sits in memory.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path

from keras_transformer.text.shards import compression_of, shard_pairs

from .config import DataConfig, data_dir
from .tokenizer_sources import sample_sentences


def shard_files(config: DataConfig) -> list[Path]:
    """The shards data.train_source names (a file, or a glob), relative to the data folder,
    sorted; a glob that matches nothing, or a missing file, is an error naming it."""
    pattern = Path(config.train_source)
    if not pattern.is_absolute():
        pattern = data_dir(config) / pattern
    if glob.has_magic(str(pattern)):
        files = sorted(Path(p) for p in glob.glob(str(pattern)) if Path(p).is_file())
        if not files:
            raise FileNotFoundError(f"data.train_source: no file matches {pattern} (set "
                                    f"data.data_dir or KT_DATA_DIR to the folder of the shards)")
        return files
    if not pattern.is_file():
        raise FileNotFoundError(f"data.train_source: shard not found: {pattern}")
    return [pattern]


@dataclass
class ShardScan:
    files: list[Path]
    compressions: list[str]
    pairs: int = 0
    dropped_empty: int = 0
    sample_sources: list[str] = field(default_factory=list)
    sample_targets: list[str] = field(default_factory=list)


def scan_shards(files: list[Path], sample: int, seed: int) -> ShardScan:
    """Every shard checked and counted in one pass; `sample` pairs drawn across all of them
    (seeded, sample_sentences' reservoir) for the tokenizer."""
    scan = ShardScan(files, [compression_of(path) for path in files])

    def pairs():
        for path in files:
            for pair in shard_pairs(path):
                if pair is None:
                    scan.dropped_empty += 1
                    continue
                scan.pairs += 1
                yield pair

    drawn = sample_sentences(pairs(), sample, seed)
    scan.sample_sources = [s for s, _ in drawn]
    scan.sample_targets = [t for _, t in drawn]
    if not scan.pairs:
        raise ValueError(f"the shards of data.train_source ({len(files)} files, first "
                         f"{files[0]}) hold no sentence pairs")
    return scan
