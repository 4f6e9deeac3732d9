"""Classification: labeled sentences (e.g. SST-2), an encoder-only classifier, accuracy."""

from __future__ import annotations

import logging
from pathlib import Path

import keras

from keras_transformer.models.classifier import TransformerClassifier
from keras_transformer.text.pipeline import make_classification_dataset

from ..data import load_classification
from ..distribute import distribute
from ..engine import replayable
from ..tasks.base import Task, transformer_config
from ..tokenizers import train_tokenizer

log = logging.getLogger("train")


class ClassificationTask(Task):
    """`text<TAB>label` files in data.train_source / data.dev_source; dev accuracy."""

    def prepare(self, out: Path):
        config, d = self.config, self.config.data
        self.train, self.dev = load_classification(d)
        log.info("classification: %d train, %d dev sentences", len(self.train), len(self.dev))
        self.tok = train_tokenizer(config, self.train.texts, out / "spm")
        self.num_classes = config.model.num_classes or max(self.train.labels) + 1
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
            return make_classification_dataset(dev.texts, dev.labels, tok,
                                               max_length=d.max_source_length,
                                               batch_size=batch_size, shuffle=False)

        self.make_dev = make_dev
        return make_train, make_dev

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

    def evaluate(self, model, out: Path, strategy, metrics: dict) -> None:
        scores = model.evaluate(distribute(strategy, self.make_dev), verbose=0,
                                return_dict=True)
        metrics["dev_accuracy"] = round(float(scores["accuracy"]) * 100, 2)
        metrics["dev_sentences"] = len(self.dev)
        print(f"dev: accuracy {metrics['dev_accuracy']:.2f}% ({len(self.dev)} sentences)")
