"""Classification: labeled sentences (SST-2, UIT-VSFC), an encoder-only classifier, accuracy
and per-class / macro F1."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import keras
import numpy as np

from keras_transformer.file_safety import atomic_write_text
from keras_transformer.losses import ClassWeightedCrossEntropy
from keras_transformer.models.classifier import TransformerClassifier
from keras_transformer.text.pipeline import make_classification_dataset

from .. import class_bias
from ..batches import replayable
from ..config import ConfigError
from ..data import LabeledSplit, load_classification, parse_label
from ..record_stream import labeled_reader, rows_dataset
from ..scoring import classification_scores
from ..shards import shard_files
from ..tasks.base import DevScore, FileScores, Task, part_share, transformer_config
from ..tokenizers import load_run_tokenizers, train_tokenizer

log = logging.getLogger("train")

# The class names of a run, in id order, beside its model (read by `python -m export`).
LABELS_FILE = "labels.json"


def class_names(labels: list[str], num_classes: int, splits: dict) -> list[str]:
    """The names of the classes (data.labels, else the ids' digits), checked against
    model.num_classes and against the labels every split holds."""
    if labels and num_classes and len(labels) != num_classes:
        raise ConfigError(f"data.labels names {len(labels)} classes but model.num_classes is "
                          f"{num_classes}; drop one or make them agree")
    count = len(labels) or num_classes or max(splits["train"].labels) + 1
    for split, data in splits.items():
        if max(data.labels) >= count:
            raise ValueError(f"the {split} split holds the label {max(data.labels)}, but the "
                             f"model has {count} classes (0 to {count - 1}); set "
                             f"model.num_classes or data.labels")
    return labels or [str(i) for i in range(count)]


def class_weights(setting, names: list[str], labels) -> list[float] | None:
    """training.class_weight as one weight per class id: None for "", scikit-learn's
    "balanced" (n / (classes x count), so the weights' mean over the training sentences is 1
    and the loss keeps its scale) from the training labels, or a mapping's weights by label
    name or id (others 1)."""
    if not setting:
        return None
    if setting == "balanced":
        counts = np.bincount(np.asarray(labels), minlength=len(names))
        empty = [name for name, count in zip(names, counts, strict=True) if not count]
        if empty:
            raise ConfigError(f"training.class_weight: balanced weighs classes by their "
                              f"training sentences, and {', '.join(empty)} has none; give "
                              f"a mapping {{label: weight}} instead")
        return [float(len(labels) / (len(names) * count)) for count in counts]
    weights = [1.0] * len(names)
    for label, value in setting.items():
        try:
            weights[parse_label(str(label), names, "training.class_weight")] = float(value)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    return weights


class ClassificationTask(Task):
    """Labeled sentences (train.data.load_classification); dev and test accuracy, per-class
    F1 and macro-F1. After every epoch the dev macro-F1 (eval.dev_score_sentences 0 turns it
    off) picks best.keras."""

    reads_lowercase = True

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        labels = config.data.labels
        if len(set(labels)) != len(labels) or any(v != v.strip() or "\t" in v for v in labels):
            raise ConfigError(f"data.labels must be distinct names without tabs or surrounding "
                              f"spaces, got {labels!r}")

    def prepare(self, out: Path):
        config, d = self.config, self.config.data
        self.splits = load_classification(d, train=not d.stream)
        if d.stream:  # the sample of the training shards names the classes and weighs them
            classes = len(d.labels) or config.model.num_classes
            sample = self.scan_stream(shard_files(d), labeled_reader(d.labels, classes))
            self.splits = {"train": self.labeled(sample), **self.splits}
        self.train, self.dev = self.splits["train"], self.splits["dev"]
        log.info("classification: %s sentences", ", ".join(
            f"{len(data)} {split}" for split, data in self.splits.items()))
        self.names = class_names(d.labels, config.model.num_classes, self.splits)
        self.num_classes = len(self.names)
        self.class_weights = class_weights(config.training.class_weight, self.names,
                                           self.train.labels)
        if self.class_weights:
            log.info("classification: class weights %s", ", ".join(
                f"{name} {w:.3g}" for name, w in zip(self.names, self.class_weights, strict=True)))
        atomic_write_text(out / LABELS_FILE, json.dumps(self.names, ensure_ascii=False) + "\n")
        self.tok = train_tokenizer(config, self.train.texts, out / "spm")
        self.batch_size = max(1, d.tokens_per_batch // d.max_source_length)
        return transformer_config(config, self.tok, self.tok,
                                  max_source_length=d.max_source_length,
                                  max_target_length=d.max_source_length)

    def labeled(self, records) -> LabeledSplit:
        """(text, label) records as a split, lower-cased with data.lowercase."""
        lower = self.config.data.lowercase
        return LabeledSplit([text.lower() if lower else text for text, _ in records],
                            [label for _, label in records])

    def datasets(self):
        import tensorflow as tf

        d, t = self.config.data, self.config.training
        train, dev, tok, batch_size = self.train, self.dev, self.tok, self.batch_size

        def make_train(part=(1, 0)):  # a streamed run's pipeline reads its part alone
            def build():
                if self.stream is not None:  # read from the shards, endless
                    def convert(records):
                        split = self.labeled(records)
                        return list(zip(split.texts, split.labels, strict=True))

                    rows = rows_dataset(self.streamed_rows(convert, part),
                                        (tf.TensorSpec([], tf.string),
                                         tf.TensorSpec([], tf.int32)))
                    return make_classification_dataset(
                        rows, None, tok, max_length=d.max_source_length,
                        batch_size=part_share(batch_size, part))
                data = make_classification_dataset(train.texts, train.labels, tok,
                                                   max_length=d.max_source_length,
                                                   batch_size=batch_size, seed=t.seed)
                return data.repeat() if t.steps_per_epoch else data

            return replayable(build, t.steps_per_epoch > 0)

        def make_dev():
            return self.labeled_batches(dev)

        return make_train, make_dev

    def labeled_batches(self, split):
        """(ids, labels) batches of a split, in its order."""
        return make_classification_dataset(split.texts, split.labels, self.tok,
                                           max_length=self.config.data.max_source_length,
                                           batch_size=self.batch_size, shuffle=False)

    def build_model(self, model_config):
        model = TransformerClassifier(model_config, num_classes=self.num_classes,
                                      pooling=self.config.model.pooling)
        model.build()
        return model

    def loss_and_metrics(self, model, replicas: int):
        loss = (ClassWeightedCrossEntropy(self.class_weights) if self.class_weights else
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return loss, [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def describe(self, model) -> str:
        return f", {self.num_classes} classes, batch {self.batch_size}"

    def logits(self, model, split: LabeledSplit) -> tuple[np.ndarray, np.ndarray]:
        """(gold class ids (N,), logits (N,K)) of a split's sentences, in its order: the one
        prediction loop of the per-epoch dev score, the final scores and train.evaluate."""
        gold, logits = [], []
        for ids, labels in self.labeled_batches(split):
            gold.append(labels.numpy())
            logits.append(np.asarray(model(ids, training=False)))
        return np.concatenate(gold), np.concatenate(logits)

    def predict(self, model, split: LabeledSplit) -> tuple[np.ndarray, np.ndarray]:
        """(gold, predicted) class ids of a split's sentences, in its order."""
        gold, logits = self.logits(model, split)
        return gold, np.argmax(logits, axis=-1)

    def scores(self, model, split: LabeledSplit) -> dict:
        """train.scoring.classification_scores of the model's predictions on a split."""
        return classification_scores(*self.predict(model, split), self.names)

    def dev_score(self):
        if not self.config.eval.dev_score_sentences:
            return None
        dev = self.dev

        def score(model):
            s = self.scores(model, dev)
            # Not "accuracy": val_accuracy is Keras' own (a fraction), logged beside it.
            return {"macro_f1": s["macro_f1"], "accuracy_percent": s["accuracy"]}

        return DevScore(score, {"dev_score_sentences": len(dev)}, name="macro_f1",
                        label="macro-F1")

    def finalize(self, model, metrics: dict) -> None:
        """eval.tune_class_bias: the head's bias moved by the offsets train.class_bias
        chooses on the dev split (when they also help on dev sentences they were not chosen
        on), the choice in metrics["class_bias"]."""
        if not self.config.eval.tune_class_bias:
            return
        gold, logits = self.logits(model, self.dev)
        result = class_bias.tune(logits, gold)
        if result["kept"]:
            bias = model.head.bias
            bias.assign(bias + np.asarray(result["offsets"], dtype=bias.dtype))
        metrics["class_bias"] = {"classes": self.names, **result}
        log.info("class bias: %s (dev macro-F1 %.2f -> %.2f; on held-out dev halves %.2f -> "
                 "%.2f)", "offsets " + ", ".join(
                     f"{name} {v:+.1f}" for name, v in zip(self.names, result["chosen_offsets"],
                                                          strict=True))
                 + ("" if result["kept"] else ", not kept"),
                 result["dev_macro_f1_untuned"], result["dev_macro_f1_tuned"],
                 result["held_out_untuned"], result["held_out_tuned"])

    def evaluate(self, model, out: Path, strategy, metrics: dict) -> None:
        if self.class_weights:
            metrics["class_weights"] = dict(zip(self.names, self.class_weights, strict=True))
        offsets = np.asarray(metrics.get("class_bias", {}).get("offsets", [0.0]))
        count = self.config.eval.max_sentences or None
        for split in ("dev", "test"):
            if split not in self.splits:
                continue
            # The first eval.max_sentences sentences when set, else the whole split.
            read = LabeledSplit(self.splits[split].texts[:count],
                                self.splits[split].labels[:count])
            gold, logits = self.logits(model, read)
            scores = classification_scores(gold, np.argmax(logits, axis=-1), self.names)
            metrics[f"{split}_accuracy"] = scores["accuracy"]
            metrics[f"{split}_macro_f1"] = scores["macro_f1"]
            metrics[f"{split}_f1"] = scores["f1"]
            metrics[f"{split}_sentences"] = len(read)
            print(f"{split}: {format_scores(scores)} ({len(read)} sentences)")
            if offsets.any():  # what the model scored before its bias was moved
                before = classification_scores(gold, np.argmax(logits - offsets, axis=-1),
                                               self.names)
                metrics[f"{split}_before_class_bias"] = {
                    k: before[k] for k in ("accuracy", "macro_f1", "f1")}

    # -- train.evaluate: a label file scored like the run's dev and test splits ----------

    evaluate_options = frozenset({"--ref", "--hyp", "--overwrite"})

    def read_references(self, run, sources, references, path):
        """Class ids of the labels beside the non-empty sentences (ids or names of the run's
        labels.json, as train.data.parse_label reads a split's labels); None beside a blank
        sentence."""
        names = run_class_names(run)
        labels = []
        for lineno, (text, label) in enumerate(zip(sources, references, strict=True), start=1):
            if not text.strip():
                labels.append(None)
            elif not label.strip():
                raise ValueError(f"{path}:{lineno}: empty label for the sentence on line "
                                 f"{lineno}")
            else:
                labels.append(parse_label(label, names, f"{path}:{lineno}"))
        return labels

    def use_run(self, run, model, batch_size=None):
        self.tok = load_run_tokenizers(run)[0]
        self.names = run_class_names(run)
        if len(self.names) != model.num_classes:
            raise ValueError(f"{run / LABELS_FILE} names {len(self.names)} classes but the "
                             f"model has {model.num_classes}")
        d = self.config.data
        self.batch_size = batch_size or max(1, d.tokens_per_batch // d.max_source_length)

    def evaluate_file(self, model, lines, references, name):
        """The predicted class name of every non-empty line (sentences cut to
        data.max_source_length pieces, as in training); accuracy, macro-F1 and per-class F1
        against the labels."""
        scored = [i for i, text in enumerate(lines) if text.strip()]
        result = FileScores(sources=[lines[i].strip() for i in scored], scored=scored)
        if len(scored) < len(lines):
            result.notes.append(f"skipped {len(lines) - len(scored)} empty lines (their lines "
                                f"in the output are empty)")
        gold = [references[i] for i in scored] if references is not None else [0] * len(scored)
        result.outputs = [""] * len(lines)
        if not scored:
            return result
        read = ([t.lower() for t in result.sources] if self.config.data.lowercase
                else result.sources)
        gold, predicted = self.predict(model, LabeledSplit(read, gold))
        for i, label in zip(scored, predicted, strict=True):
            result.outputs[i] = self.names[label]
        if references is not None:
            result.scores = classification_scores(gold, predicted, self.names)
            result.printed = [f"{format_scores(result.scores)} ({len(scored)} sentences)"]
            result.details = {"sentences": len(scored), "skipped": len(lines) - len(scored)}
        return result


def run_class_names(run: Path) -> list[str]:
    """The class names a classification run wrote to labels.json, in id order."""
    path = run / LABELS_FILE
    try:
        names = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found: the run's class names are missing") from None
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} is unreadable ({err})") from err
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{path} must hold a JSON list of class names")
    return names


def format_scores(scores: dict) -> str:
    """Accuracy, macro-F1 and the per-class F1 of classification_scores, on one line."""
    per_class = ", ".join(f"{name} {'-' if f1 is None else f'{f1:.2f}'}"
                          for name, f1 in scores["f1"].items())
    return (f"accuracy {scores['accuracy']:.2f}%, macro-F1 {scores['macro_f1']:.2f} "
            f"(F1 {per_class})")
