"""Streamed training records of every task but translation (`data.stream: true`; translation
streams its `source<TAB>target` pairs through tf.data, train.shards): the files that
data.train_source (or, for the pre-training tasks, data.texts) names, each a file or a glob,
gzip or not, read record by record as training consumes them.

A record is what one line of a shard holds for the task: a labelled sentence (`text<TAB>label`),
an article with its summary (a TSV file whose header names `article` and `summary`, VNDS's), or
the documents of a line of pre-training text (`text_documents`). A task turns a chunk of
records into its training rows with the same code that turns its in-memory splits into rows
(`convert`), so a streamed run and one in memory make the same rows from the same text (but
for one order: in a stream a VNDS summary follows its own article, in memory all summaries
follow all articles, which packs a denoising run's rows otherwise; and a chunk's last
language-model window is padded where in memory it runs on); the rows are then shuffled in a buffer of data.shuffle_buffer rows and batched by the task's own
tf.data batching. Memory: the buffer and one chunk, never the corpus.

Before training, one pass (`scan_records`) reads the records: a broken shard (unreadable, a
corrupt gzip, invalid UTF-8, a line the task cannot read) is refused in one line naming the file
and line, the records are counted, and the tokenizer's sample (tokenizer.sample_sentences
records) is drawn uniformly in the same pass (a seeded reservoir). Worker i of n
(`MultiWorkerMirroredStrategy`) reads only its part (`keras_transformer.text.shards.worker_part`:
whole shards, or every n-th record), counts it, and takes as the sample the first records of
every shard in turn, the same on each worker so that all train the same tokenizer.

The stream repeats, the shard order shuffled anew each pass and the buffer seeded: a resumed
run replays it and skips the batches already trained on (train.batches.replayable), exactly as
the in-memory stream does.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.lazy_import import LazyModule
from keras_transformer.text.sentences import split_sentences
from keras_transformer.text.shards import (
    ColumnCountError,
    interleaved_pairs,
    shard_records,
)

from .data import is_header_label, parse_label, word_joints

tf = LazyModule("tensorflow")

# Records converted to rows at a time: SentencePiece encodes a list faster than one text at a
# time, and a chunk of articles gives the language model's windows their context.
RECORD_CHUNK = 256

Reader = Callable[[Path], Iterator[Any]]
# What a reader gives for a shard's header line: neither a record nor a dropped line.
HEADER = object()


def records_of(items: Iterator[Any]) -> Iterator[Any]:
    """A reader's records alone: its dropped lines (None) and headers left out."""
    return (item for item in items if item is not None and item is not HEADER)


# -- records of one line ----------------------------------------------------------------


def _text(raw: bytes) -> str:
    return raw.decode("utf-8").rstrip("\r\n").removeprefix("\ufeff")


def labeled_reader(names: Sequence[str], classes: int) -> Reader:
    """`text<TAB>label` shards (GLUE style, as train.data.load_labeled_tsv reads one file): a
    record is (text, class id), the label read by parse_label and refused at `classes` or
    more; a first line whose label is not one is a header and skipped; a blank line or an
    empty text is dropped (None)."""
    names = list(names)

    def read(path: Path) -> Iterator[tuple[str, int] | None]:
        first = True

        def parse(raw: bytes):
            nonlocal first
            line, header = _text(raw), first
            first = False
            if not line.strip():
                return None
            text, sep, label = line.rpartition("\t")
            if not sep:
                raise ColumnCountError(1)
            if header and is_header_label(label, names):
                return HEADER
            label_id = parse_label(label, names, "the label")
            if label_id >= classes:
                raise ValueError(f"the label {label_id} is not a class of the model (0 to "
                                 f"{classes - 1})")
            return (text.strip(), label_id) if text.strip() else None

        return shard_records(path, parse, "text<TAB>label")

    return read


def header_rows(path: Path, header_problem: Callable[[list[str]], str | None],
                record: Callable[[dict[str, str]], Any]) -> Iterator[Any]:
    """The records of a TSV shard whose first line names its columns: the header checked by
    `header_problem` (a message, or None when the columns will do), then `record` of each
    other line's stripped fields by column name; a blank line is dropped (None), a line of
    another column count refused."""
    columns: list[str] = []

    def parse(raw: bytes):
        line = _text(raw)
        if not columns:
            columns.extend(line.split("\t"))
            problem = header_problem(columns)
            if problem:
                raise ValueError(f"the header {line[:80]!r} {problem}")
            return HEADER
        if not line.strip():
            return None
        fields = line.split("\t")
        if len(fields) != len(columns):
            raise ColumnCountError(len(fields))
        return record({name: field.strip() for name, field in zip(columns, fields,
                                                                   strict=True)})

    return shard_records(path, parse, "a row of the header's columns")


def summary_reader(joints: str) -> Reader:
    """VNDS-style TSV shards, each with its header naming `article` and `summary` among its
    columns (train.data.load_summaries reads one file): a record is (article, summary), VNDS's
    word joints kept or split by `joints`; a blank line, or a row whose article or summary is
    empty, is dropped (None)."""

    def problem(columns):
        if "article" not in columns or "summary" not in columns:
            return "must name the columns article and summary (tab-separated)"
        return None

    def record(row):
        if not row["article"] or not row["summary"]:
            return None
        return word_joints(row["article"], joints), word_joints(row["summary"], joints)

    return lambda path: header_rows(path, problem, record)


def text_documents(joints: str, lowercase: bool) -> Reader:
    """Pre-training text (train.tasks.masked_lm.read_documents reads one file in memory): a
    record is the documents of one line, each a list of texts. A TSV shard whose header names
    `article` (VNDS): the article's sentences, then its summary, two documents; one whose
    header names `sentence` (SST-2): that column, one document; any other file: the line's
    first tab-separated field, one document (in a stream a line is a document: a blank line
    is dropped, not a document break). Word joints and case as `joints` and `lowercase` say."""

    def clean(texts):
        texts = [word_joints(t, joints) for t in texts if t]
        return [t.lower() for t in texts] if lowercase else texts

    def problem(columns):
        if "article" not in columns and "sentence" not in columns:
            return "names neither an article column (VNDS) nor a sentence column (SST-2)"
        return None

    def record(row):
        if "article" in row:
            documents = [clean(split_sentences(row["article"])),
                         clean([row.get("summary", "")])]
        else:
            documents = [clean([row["sentence"]])]
        return [d for d in documents if d] or None

    def plain(raw: bytes):
        text = _text(raw).split("\t")[0].strip()
        return [clean([text])] if text else None

    def read(shard: Path) -> Iterator[list[list[str]] | None]:
        if shard.name.endswith((".tsv", ".tsv.gz")):
            return header_rows(shard, problem, record)
        return shard_records(shard, plain, "one text")

    return read


# -- the pass before training, and the stream -------------------------------------------


@dataclass
class RecordScan:
    """What the pass before training found: the shards, the records of this worker's part,
    the lines dropped (blank, or an empty field), and the tokenizer's sample of records."""

    files: list[Path]
    reader: Reader
    records: int = 0
    dropped: int = 0
    sample: list = field(default_factory=list)

    def check(self) -> None:
        """A ValueError when the shards (all workers' parts, counted together) hold no
        record."""
        if not self.records:
            raise ValueError(f"the training shards ({len(self.files)} files, first "
                             f"{self.files[0]}) hold no record to train on")

    def metrics(self) -> dict:
        return {"streamed_train_records": self.records, "stream_shards": len(self.files),
                "empty_dropped": self.dropped}


def scan_records(files: list[Path], reader: Reader, sample: int, seed: int,
                 part: tuple[int, int] = (1, 0), cycle_length: int = 4) -> RecordScan:
    """One pass over this worker's part of the shards (every shard for one process): records
    checked and counted, and `sample` of them drawn. One process draws them uniformly (a
    reservoir seeded by `seed`, kept in reading order); worker i of n takes the first
    ceil(sample / shards) records of each shard, the same on every worker."""
    scan = RecordScan(list(files), reader)
    workers, index = part
    rng = random.Random(seed)
    reservoir: list[tuple[int, Any]] = []
    for record in interleaved_pairs(files, shuffle=False, seed=seed, repeat=False,
                                    cycle_length=cycle_length, workers=workers, index=index,
                                    reader=reader):
        if record is None or record is HEADER:
            scan.dropped += record is None
            continue
        if workers == 1 and sample:
            if len(reservoir) < sample:
                reservoir.append((scan.records, record))
            else:
                pick = rng.randrange(scan.records + 1)
                if pick < sample:
                    reservoir[pick] = (scan.records, record)
        scan.records += 1
    if workers == 1:
        scan.sample = [record for _, record in sorted(reservoir, key=lambda r: r[0])]
    elif sample:
        each = math.ceil(sample / len(files))
        scan.sample = [record for path in files for record in itertools.islice(
            records_of(reader(path)), each)][:sample]
    if workers == 1:
        scan.check()
    return scan


def record_rows(scan: RecordScan, convert: Callable[[list], Sequence], *, shuffle_buffer: int,
                seed: int, part: tuple[int, int] = (1, 0), cycle_length: int = 4,
                chunk: int = RECORD_CHUNK, repeat: bool = True) -> Iterator:
    """The training rows of this worker's part, endless (one pass, the buffer drained at its
    end, without `repeat`): records in tf.data's interleave order (the shard order shuffled
    anew each pass, seeded), `chunk` at a time turned into rows by `convert`, the rows
    shuffled in a buffer of `shuffle_buffer` (seeded)."""
    from keras_transformer.text.numpy_pipeline import buffer_shuffled  # imports Keras

    workers, index = part
    records = records_of(interleaved_pairs(
        scan.files, shuffle=True, seed=seed, repeat=repeat, cycle_length=cycle_length,
        workers=workers, index=index, reader=scan.reader))

    def rows():
        while True:
            batch = list(itertools.islice(records, chunk))
            if not batch:
                return
            yield from convert(batch)

    return buffer_shuffled(rows(), shuffle_buffer, np.random.default_rng([seed, 2]))


def rows_dataset(make_rows: Callable[[], Iterator], signature) -> tf.data.Dataset:
    """A tf.data stream of the rows `make_rows()` yields (a new generator each iterator, so
    that every pass replays from the start), each of `signature` (a tf.TensorSpec, or a
    tuple of them)."""
    return tf.data.Dataset.from_generator(make_rows, output_signature=signature)
