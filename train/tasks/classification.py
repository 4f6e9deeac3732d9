"""Classification: labeled sentences (SST-2, UIT-VSFC), an encoder-only classifier, accuracy
and per-class / macro F1."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import keras
import numpy as np

from keras_transformer.file_safety import atomic_write_text
from keras_transformer.models.classifier import TransformerClassifier
from keras_transformer.text.pipeline import make_classification_dataset

from ..config import ConfigError
from ..data import LabeledSplit, load_classification
from ..engine import replayable
from ..scoring import classification_scores
from ..tasks.base import DevScore, Task, transformer_config
from ..tokenizers import train_tokenizer

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


class ClassificationTask(Task):
    """Labeled sentences (train.data.load_classification); dev and test accuracy, per-class
    F1 and macro-F1. After every epoch the dev macro-F1 (eval.dev_bleu_sentences 0 turns it
    off) picks best.keras."""

    def prepare(self, out: Path):
        config, d = self.config, self.config.data
        self.splits = load_classification(d)
        self.train, self.dev = self.splits["train"], self.splits["dev"]
        log.info("classification: %s sentences", ", ".join(
            f"{len(data)} {split}" for split, data in self.splits.items()))
        self.names = class_names(d.labels, config.model.num_classes, self.splits)
        self.num_classes = len(self.names)
        atomic_write_text(out / LABELS_FILE, json.dumps(self.names, ensure_ascii=False) + "\n")
        self.tok = train_tokenizer(config, self.train.texts, out / "spm")
        self.batch_size = max(1, d.tokens_per_batch // d.max_source_length)
        return transformer_config(config, self.tok, self.tok,
                                  max_source_length=d.max_source_length,
                                  max_target_length=d.max_source_length)

    def datasets(self):
        d, t = self.config.data, self.config.training
        train, dev, tok, batch_size = self.train, self.dev, self.tok, self.batch_size

        def make_train():
            def build():
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
        return (keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                [keras.metrics.SparseCategoricalAccuracy(name="accuracy")])

    def describe(self, model) -> str:
        return f", {self.num_classes} classes, batch {self.batch_size}"

    def predict(self, model, split: LabeledSplit) -> tuple[np.ndarray, np.ndarray]:
        """(gold, predicted) class ids of a split's sentences, in its order: the one
        prediction loop of the per-epoch dev score, the final scores and train.evaluate."""
        gold, predicted = [], []
        for ids, labels in self.labeled_batches(split):
            gold.append(labels.numpy())
            predicted.append(np.argmax(model(ids, training=False), axis=-1))
        return np.concatenate(gold), np.concatenate(predicted)

    def scores(self, model, split: LabeledSplit) -> dict:
        """train.scoring.classification_scores of the model's predictions on a split."""
        return classification_scores(*self.predict(model, split), self.names)

    def dev_score(self):
        if not self.config.eval.dev_bleu_sentences:
            return None
        dev = self.dev

        def score(model):
            s = self.scores(model, dev)
            # Not "accuracy": val_accuracy is Keras' own (a fraction), logged beside it.
            return {"macro_f1": s["macro_f1"], "accuracy_percent": s["accuracy"]}

        return DevScore(score, {"dev_score_sentences": len(dev)}, name="macro_f1",
                        label="macro-F1")

    def evaluate(self, model, out: Path, strategy, metrics: dict) -> None:
        for split in ("dev", "test"):
            if split not in self.splits:
                continue
            scores = self.scores(model, self.splits[split])
            metrics[f"{split}_accuracy"] = scores["accuracy"]
            metrics[f"{split}_macro_f1"] = scores["macro_f1"]
            metrics[f"{split}_f1"] = scores["f1"]
            metrics[f"{split}_sentences"] = len(self.splits[split])
            print(f"{split}: {format_scores(scores)} ({len(self.splits[split])} sentences)")


def format_scores(scores: dict) -> str:
    """Accuracy, macro-F1 and the per-class F1 of classification_scores, on one line."""
    per_class = ", ".join(f"{name} {'-' if f1 is None else f'{f1:.2f}'}"
                          for name, f1 in scores["f1"].items())
    return (f"accuracy {scores['accuracy']:.2f}%, macro-F1 {scores['macro_f1']:.2f} "
            f"(F1 {per_class})")
