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

    # -- scoring a trained run's outputs (train.evaluate) ---------------------------------

    def use_tokenizers(self, source_tok, target_tok) -> None:
        """The tokenizers of a trained run (train.tokenizers.load_run_tokenizers), for the
        methods below when `prepare` did not run."""
        self.source_tok, self.target_tok = source_tok, target_tok

    def prepare_sources(self, sources: list[str]) -> list[str]:
        """Input lines as the run's training data read them (e.g. VNDS word joints)."""
        return sources

    def scorable(self, sources: list[str], max_source_length: int) -> list[bool]:
        """Which non-empty sources the model is given and scored on."""
        return [True] * len(sources)

    def generate(self, model, sources: list[str], progress=None) -> list[str]:
        """The model's outputs by the search settings of config.eval."""
        raise NotImplementedError

    def score(self, hypotheses: list[str], references: list[str],
              sources: list[str]) -> tuple[dict, list[str]]:
        """(scores for metrics.json, the lines that print them with their settings)."""
        raise NotImplementedError

