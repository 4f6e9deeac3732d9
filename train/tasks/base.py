"""What the training engine asks of a task (translation, classification, ...), and the model
config every task derives from the run config and its tokenizers."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.config import TransformerConfig
from keras_transformer.text.tokenizer import shared_special_ids

from ..config import ConfigError, RunConfig

log = logging.getLogger("train")


@dataclass
class DevScore:
    """A score of the dev set taken after every epoch (higher is better) that picks best.keras,
    and what metrics.json records about it.

    `score(model)` returns the score, or a dict holding it under `name` plus its parts (e.g.
    ROUGE-1/2/L beside their mean), all logged per epoch as `val_<key>`. `name` names it in
    the logs and metrics.json (`best_dev_<name>`); `label` in the log lines."""

    score: Callable[[Any], float | dict]
    metrics: dict = field(default_factory=dict)
    name: str = "bleu"
    label: str = "BLEU"


@dataclass
class FileScores:
    """What a trained run's model made of an input file (`Task.evaluate_file`, for
    train.evaluate).

    `outputs`: one output line per input line (empty for a line not given to the model), or
    None when the task writes no output file; `scores`: what metrics.json records under
    "evaluations" (None without references); `details`: the settings and counts recorded
    beside them; `printed`: the lines that print the scores; `notes`: lines for stderr (what
    was skipped). `sources` and `scored` (their 0-based input lines) are what the model read."""

    outputs: list[str] | None = None
    scores: dict | None = None
    details: dict = field(default_factory=dict)
    printed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    scored: list[int] = field(default_factory=list)


def part_share(per_step: int, part: tuple[int, int]) -> int:
    """Input pipeline part[1] of part[0]'s share of a per-step amount (tokens or rows a
    batch), at least 1: the pipelines' batches together keep the step's amount."""
    return max(1, per_step // part[0])


def final_split(has_test: bool) -> str:
    """The split whose scores metrics.json keeps under the unprefixed keys (`bleu`, `rouge2`,
    ...): test, or dev in a run without a test split; `scored_split` names it."""
    return "test" if has_test else "dev"


def score_prefix(name: str, final: str, metrics: dict) -> str:
    """The key prefix of split `name`'s scores in metrics.json: none for the final split
    (`final_split`; recorded as `scored_split`, so that a run without a test split does not
    pass its dev scores off as test scores), `<split>_` for the other."""
    if name != final:
        return f"{name}_"
    metrics["scored_split"] = name
    return ""


class Task:
    """One kind of training run. `train.engine.train` calls, in this order: prepare,
    datasets, build_model, (compile with) loss_and_metrics, dev_score, then after model.fit
    data_metrics on every worker and, on the chief only, evaluate.

    `python -m train.evaluate` scores a trained run's model on a file with the methods at
    the end (prepare_sources, read_references, use_run, evaluate_file), where `prepare` has
    not run."""

    # The options of train.evaluate, beside --run, --src, --model and --batch-size, that apply
    # to the task's runs; another one given is refused. Without "--hyp" the task writes no
    # output file.
    evaluate_options: frozenset[str] = frozenset()
    # Whether an input file is scored by itself (a language model's text), with no --ref.
    scored_without_references = False
    # Whether the task reads data.lowercase (its model reads lower-cased text); set elsewhere,
    # the key would do nothing, and is refused.
    reads_lowercase = False

    def __init__(self, config: RunConfig):
        self.config = config

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Refuse, with a one-line ConfigError naming the key, what the task cannot run:
        the rules of its own keys, or of keys that mean something else to it. Called when the
        config is loaded (train.tasks.load_run_config) and before a run, ahead of any data.
        A task's own rules come after these, shared by every task."""
        if config.data.lowercase and not cls.reads_lowercase:
            raise ConfigError(f"data.lowercase is for tasks whose model reads lower-cased text "
                              f"(masked_lm, denoising, classification, "
                              f"extractive_summarization, content_selection); task "
                              f"{config.task} reads its text as written: remove the key")

    # Whether make_train (of `datasets`) takes part=(n, i) and reads only input pipeline i's
    # part of n (a streamed corpus: train.distribute.distribute); set by `prepare`.
    reads_part = False
    # (input pipelines, this process's): a worker's share of the input, set by the engine
    # before `prepare` (train.distribute.input_part).
    part = (1, 0)

    def prepare(self, out: Path) -> TransformerConfig:
        """Read the data, train the tokenizers into `out`; return the model's config."""
        raise NotImplementedError

    def combine_parts(self, total) -> None:
        """After `prepare` on a worker that read only its part: make its counts the whole
        input's, `total(values)` giving each of a list of integers summed over the workers."""
        if self.stream is not None:
            self.stream.records, self.stream.dropped = total([self.stream.records,
                                                              self.stream.dropped])
            self.stream.check()
            if self.part[0] > 1:
                log.info("streamed training records of all workers: %d (%d empty lines "
                         "dropped)", self.stream.records, self.stream.dropped)

    # -- a streamed corpus (data.stream: train.record_stream), for every task but translation

    # The training records' scan (train.record_stream.RecordScan) of a streamed run, set by
    # `scan_stream`; None: the training split is read into memory.
    stream = None

    def scan_stream(self, files: list[Path], reader) -> list:
        """Scan the training shards `files` (train.record_stream.scan_records, this worker's
        part), keep the scan as `self.stream`, and return the tokenizer's sample of records."""
        from ..record_stream import scan_records

        config = self.config
        self.stream = scan_records(files, reader, config.tokenizer.sample_sentences,
                                   config.data.seed, self.part)
        self.reads_part = True  # each worker reads its part of the shards
        log.info("streamed training records: %d in %d shards%s (%d empty lines dropped); the "
                 "tokenizer is trained on a sample of %d", self.stream.records, len(files),
                 f", worker {self.part[1]} of {self.part[0]}'s part" if self.part[0] > 1
                 else "", self.stream.dropped, len(self.stream.sample))
        return self.stream.sample

    def summary_splits(self, task: str) -> dict:
        """{"train", "dev"[, "test"]}: train.data.load_summarization's splits (`task` names
        the task in errors); with data.stream the training split is the sample that the scan
        of its shards drew (scan_stream), the rest of it read as training consumes it."""
        from ..data import Summaries, load_summarization
        from ..record_stream import summary_reader
        from ..shards import shard_files

        d = self.config.data
        splits = load_summarization(d, task, train=not d.stream)
        if not d.stream:
            return splits
        sample = self.scan_stream(shard_files(d), summary_reader(d.word_joints))
        return {"train": Summaries([a for a, _ in sample], [s for _, s in sample]), **splits}

    def streamed_rows(self, convert, part: tuple[int, int]):
        """A factory of generators of this worker's training rows (record_stream.record_rows:
        chunks of records turned into rows by `convert`), endless and replayed from the
        start by each generator."""
        from ..record_stream import record_rows

        d, seed = self.config.data, self.config.training.seed
        return lambda: record_rows(self.stream, convert, shuffle_buffer=d.shuffle_buffer,
                                   seed=seed, part=part)

    def datasets(self):
        """(make_train, make_dev): factories of the training stream and the dev set.

        Factories, because each input pipeline of a distributed run must build its own copy
        (see train.distribute). With training.steps_per_epoch the training stream repeats
        (train.batches.replayable), so that a resumed run can skip exactly the batches already
        trained on; otherwise one pass is one epoch.
        """
        raise NotImplementedError

    def build_model(self, model_config: TransformerConfig):
        """The model, built (its variables made); called inside the strategy scope."""
        raise NotImplementedError

    def loss_and_metrics(self, model, replicas: int):
        """(loss, [metrics]) for model.compile under a strategy of `replicas` replicas."""
        raise NotImplementedError

    def describe(self, model) -> str:
        """What the log line after "model: N parameters" adds."""
        return ""

    def dev_score(self) -> DevScore | None:
        """The per-epoch dev score that picks best.keras, or None for none."""
        return None

    def data_metrics(self) -> dict:
        """metrics.json entries about the data (e.g. how many pairs were left out); a
        streamed run's record counts (record_stream.RecordScan.metrics)."""
        return self.stream.metrics() if self.stream is not None else {}

    def finalize(self, model, metrics: dict) -> None:
        """Adjust the final weights before model.keras is saved (a classifier's decision
        bias chosen on dev); what was done goes into `metrics`."""

    def evaluate(self, model, out: Path, strategy, metrics: dict) -> None:
        """Score the trained model, print the results, add them to `metrics`."""
        raise NotImplementedError

    # -- scoring a trained run's model on a file (train.evaluate) -------------------------

    def prepare_sources(self, sources: list[str]) -> list[str]:
        """Input lines as the run's training data read them (e.g. VNDS word joints)."""
        return sources

    def read_references(self, run: Path, sources: list[str], references: list[str],
                        path: str) -> list:
        """The reference lines of the file `path`, line-aligned with `sources`, as the task
        scores them (e.g. class ids); ValueError naming the file and line for a bad one.
        Called before the model is loaded."""
        return references

    def use_run(self, run: Path, model, batch_size: int | None = None) -> None:
        """What the methods here need of the trained run in `run` whose model is `model`
        (its tokenizers, class names); `batch_size` replaces the run's where given."""
        raise NotImplementedError

    def evaluate_file(self, model, lines: list[str], references: list | None,
                      name: str) -> FileScores:
        """The model over the input `lines` (of the file `name`), scored against
        `references` (read_references) when given."""
        raise NotImplementedError


def transformer_config(config: RunConfig, source_tok, target_tok, *, max_source_length: int,
                       max_target_length: int) -> TransformerConfig:
    """The preset with the tokenizers' vocabulary sizes and special ids, the given lengths and
    model.overrides; an override of a special id that the tokenizers do not hold is an error."""
    ids = shared_special_ids(source_tok, target_tok)
    overrides = config.model.overrides
    for name, value in ids.items():
        if name in overrides and overrides[name] != value:
            raise ValueError(
                f"model.overrides.{name}={overrides[name]} but the tokenizer has {name}="
                f"{value}; drop the override or train the tokenizer with {name}="
                f"{overrides[name]}")
    return TransformerConfig.preset(config.model.preset, **{
        "source_vocab_size": source_tok.vocab_size,
        "target_vocab_size": target_tok.vocab_size,
        "max_source_length": max_source_length,
        "max_target_length": max_target_length,
        **overrides,
        **ids,
    })


class ArrayTask(Task):
    """A task whose splits are held as (ids, labels) arrays (`self.arrays[split]`, set by
    `prepare` with `self.batch_size`): batched in order, or shuffled by a seed for training,
    each batch cut to its real size by `trim`, so less padding is encoded."""

    @staticmethod
    def trim(ids, labels, pad_id: int):
        """A batch (ids, labels) cut to what its rows hold."""
        raise NotImplementedError

    def held_splits(self, splits: dict) -> dict:
        """The splits whose arrays `prepare` makes: all but a streamed training split, whose
        arrays are made a chunk at a time as it is read (record_arrays)."""
        return {k: v for k, v in splits.items() if not (k == "train" and self.stream)}

    def record_arrays(self, records) -> tuple[np.ndarray, np.ndarray]:
        """The (ids, labels) arrays of a chunk of a streamed run's training records, as
        `prepare` makes a split's."""
        raise NotImplementedError

    def batches(self, name: str, shuffle: bool = False, seed: int = 0, part=(1, 0)):
        """A split's batches; a streamed run's training rows are input pipeline part[1] of
        part[0]'s, read from the shards (each row padded to its batch's longest, labels
        with -1, which the losses leave out)."""
        import tensorflow as tf

        from ..record_stream import rows_dataset

        pad_id = self.model_config.pad_id
        if name == "train" and self.stream is not None:
            def convert(records):
                return list(zip(*self.record_arrays(records), strict=True))

            ids, labels = self.arrays["dev"]  # the rows' ranks and dtypes
            spec = tuple(tf.TensorSpec([None] * (a.ndim - 1), tf.as_dtype(a.dtype))
                         for a in (ids, labels))
            data = rows_dataset(self.streamed_rows(convert, part), spec).padded_batch(
                part_share(self.batch_size, part), padding_values=(pad_id, -1.0))
        else:
            ids, labels = self.arrays[name]
            data = tf.data.Dataset.from_tensor_slices((ids, labels))
            if shuffle:
                data = data.shuffle(len(ids), seed=seed)
            data = data.batch(self.batch_size)
        return data.map(lambda x, y: self.trim(x, y, pad_id)).prefetch(2)

    def datasets(self):
        from ..batches import replayable

        t = self.config.training

        def make_train(part=(1, 0)):  # a streamed run's pipeline reads its part alone
            def build():
                data = self.batches("train", shuffle=True, seed=t.seed, part=part)
                return data.repeat() if t.steps_per_epoch else data

            return replayable(build, t.steps_per_epoch > 0)

        return make_train, lambda: self.batches("dev")

