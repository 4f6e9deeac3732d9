"""What the encoder-decoder tasks (translation, summarization) share: the Transformer, its
label-smoothed loss, and the training and dev streams of (source, target) text pairs."""

from __future__ import annotations

from collections.abc import Sequence

from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models.transformer import Transformer
from keras_transformer.text.pipeline import make_translation_dataset

from ..engine import replayable, token_loss
from ..tasks.base import Task


class Seq2SeqTask(Task):
    """A task whose model is a `Transformer` trained with teacher forcing on text pairs; a
    subclass sets `source_tok` and `target_tok` in `prepare`."""

    def pair_datasets(self, train: tuple[Sequence[str], Sequence[str]],
                      dev: tuple[Sequence[str], Sequence[str]], **pipeline):
        """(make_train, make_dev) over (sources, targets) pairs; `pipeline` holds the keyword
        arguments of make_translation_dataset (lengths, batching)."""
        config = self.config

        def make_train():
            repeat = config.training.steps_per_epoch > 0
            return replayable(lambda: make_translation_dataset(
                *train, self.source_tok, self.target_tok, shuffle=True,
                seed=config.training.seed, repeat=repeat, **pipeline), repeat)

        def make_dev():
            return make_translation_dataset(*dev, self.source_tok, self.target_tok,
                                            shuffle=False, **pipeline)

        return make_train, make_dev

    def build_model(self, model_config):
        model = Transformer(model_config)
        model.build()
        return model

    def loss_and_metrics(self, model, replicas: int):
        return (token_loss(self.config.training.label_smoothing, model.config.pad_id,
                           replicas), [MaskedAccuracy(model.config.pad_id)])
