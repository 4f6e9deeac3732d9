"""Streamed training text (`data.stream: true`): `source<TAB>target` TSV shards named by a file
or a glob in data.train_source, gzip or not, found and checked here, then read by tf.data as
training consumes them (`keras_transformer.text.pipeline.make_tsv_stream_dataset`).

Before training, one pass in Python reads every shard line by line: it refuses a broken shard
(unreadable, a corrupt gzip, invalid UTF-8, a line without exactly two columns) in one line
naming the file and line, counts the pairs, and draws the tokenizer's sample
(`tokenizer.sample_sentences`), holding only that sample, so the corpus never sits in memory.
"""

from __future__ import annotations

import glob
import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .config import DataConfig, data_dir
from .tokenizer_sources import sample_sentences

GZIP_MAGIC = b"\x1f\x8b"


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
