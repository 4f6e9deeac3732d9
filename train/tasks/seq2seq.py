"""What the encoder-decoder tasks (translation, summarization) share: the Transformer, its
label-smoothed loss, and the training and dev streams of (source, target) text pairs."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

import keras

from keras_transformer.decoding import SearchSettings
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models.transformer import Transformer
from keras_transformer.progress import progress_bar
from keras_transformer.text.shards import worker_part

from ..batches import replayable
from ..config import ConfigError, model_preview
from ..losses import token_loss
from ..tasks.base import FileScores, Task, part_share
from ..tokenizers import load_run_tokenizers

log = logging.getLogger("train")


class Seq2SeqTask(Task):
    """A task whose model is a `Transformer` trained with teacher forcing on text pairs; a
    subclass sets `source_tok` and `target_tok` in `prepare`."""

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        # Two tokenizers number their pieces independently, even at one vocabulary size: a
        # shared embedding, or a copied source id, would mean another piece on the target side.
        model = model_preview(config)
        for name in ("copy_attention", "share_embeddings"):
            if getattr(model, name, False) and not config.tokenizer.joint:
                raise ConfigError(f"model.overrides.{name} needs one vocabulary for source and "
                                  f"target: set tokenizer.joint: true (or {name}: false)")

    def pair_datasets(self, train: tuple[Sequence[str], Sequence[str]],
                      dev: tuple[Sequence[str], Sequence[str]], **pipeline):
        """(make_train, make_dev) over (sources, targets) pairs; `pipeline` holds the keyword
        arguments of make_translation_dataset (lengths, batching). Under TensorFlow they are
        tf.data pipelines (text.pipeline); under JAX and PyTorch the NumPy ones with the same
        buckets and budgets (text.numpy_pipeline.TranslationBatches)."""
        config = self.config
        if keras.backend.backend() != "tensorflow":
            from keras_transformer.text.numpy_pipeline import TranslationBatches

            def make_numpy_train():
                return TranslationBatches(*train, self.source_tok, self.target_tok,
                                          shuffle=True, seed=config.training.seed,
                                          repeat=config.training.steps_per_epoch > 0,
                                          **pipeline)

            return make_numpy_train, self.dev_factory(dev, pipeline)
        from keras_transformer.text.pipeline import make_translation_dataset

        def make_train():
            repeat = config.training.steps_per_epoch > 0
            return replayable(lambda: make_translation_dataset(
                *train, self.source_tok, self.target_tok, shuffle=True,
                seed=config.training.seed, repeat=repeat, **pipeline), repeat)

        return make_train, self.dev_factory(dev, pipeline)

    def dev_factory(self, dev: tuple[Sequence[str], Sequence[str]], pipeline: dict):
        """make_dev: the dev pairs' batches in order, tf.data under TensorFlow, NumPy's
        TranslationBatches under JAX and PyTorch."""
        if keras.backend.backend() != "tensorflow":
            from keras_transformer.text.numpy_pipeline import TranslationBatches

            return lambda: TranslationBatches(*dev, self.source_tok, self.target_tok,
                                              shuffle=False, **pipeline)
        from keras_transformer.text.pipeline import make_translation_dataset

        return lambda: make_translation_dataset(*dev, self.source_tok, self.target_tok,
                                                shuffle=False, **pipeline)

    def stream_datasets(self, shards, dev: tuple[Sequence[str], Sequence[str]], **pipeline):
        """(make_train, make_dev) with the training pairs read from `shards` (a
        train.shards.ShardScan) as they are consumed, an endless stream; dev from memory.
        tf.data under TensorFlow (`make_tsv_stream_dataset`), NumPy under JAX and PyTorch
        (`StreamBatches`), batch for batch alike before shuffling.

        make_train(part=(n, i)) reads input pipeline i's part of n alone
        (`shards.worker_part`), under a token budget of tokens_per_batch / n, so that the n
        pipelines' batches together keep data.tokens_per_batch per step."""
        config = self.config
        files = [str(path) for path in shards.files]
        stream = dict(shuffle_buffer=config.data.shuffle_buffer, seed=config.training.seed,
                      repeat=True)

        def budget(part):
            workers, worker = part
            tokens = part_share(pipeline["tokens_per_batch"], part)
            if workers > 1:
                chosen, by_line = worker_part(len(files), workers, worker)
                log.info("input pipeline %d of %d reads %s, %d tokens a batch", worker,
                         workers, f"one line in {workers} of the {len(files)} shards"
                         if by_line else f"{len(chosen)} of the {len(files)} shards", tokens)
            return dict(pipeline, workers=workers, worker=worker, tokens_per_batch=tokens)

        if keras.backend.backend() != "tensorflow":
            from keras_transformer.text.numpy_pipeline import StreamBatches

            def make_numpy_train(part=(1, 0)):
                return StreamBatches(files, self.source_tok, self.target_tok, **stream,
                                     **budget(part))

            return make_numpy_train, self.dev_factory(dev, pipeline)
        from keras_transformer.text.pipeline import make_tsv_stream_dataset

        def make_train(part=(1, 0)):
            return replayable(lambda: make_tsv_stream_dataset(
                files, shards.compressions, self.source_tok, self.target_tok, **stream,
                **budget(part)), True)

        return make_train, self.dev_factory(dev, pipeline)

    def record_pair_datasets(self, dev: tuple[Sequence[str], Sequence[str]], **pipeline):
        """(make_train, make_dev) with the training pairs of a streamed task's records
        (self.stream, train.record_stream: (source, target) strings, shuffled by their
        reader), an endless stream; dev from memory. tf.data under TensorFlow
        (`make_pair_stream_dataset`), NumPy under JAX and PyTorch (`StreamBatches` over the
        same pairs). make_train(part=(n, i)) reads input pipeline i's part of n alone, under
        a token budget of tokens_per_batch / n."""
        def budget(part):
            return dict(pipeline, tokens_per_batch=part_share(pipeline["tokens_per_batch"], part))

        if keras.backend.backend() != "tensorflow":
            from keras_transformer.text.numpy_pipeline import StreamBatches

            def make_numpy_train(part=(1, 0)):
                return StreamBatches([], self.source_tok, self.target_tok,
                                     shuffle_buffer=self.config.data.shuffle_buffer,
                                     pairs=self.streamed_rows(list, part), **budget(part))

            return make_numpy_train, self.dev_factory(dev, pipeline)
        import tensorflow as tf

        from keras_transformer.text.pipeline import make_pair_stream_dataset

        from ..record_stream import rows_dataset

        def make_train(part=(1, 0)):
            spec = tf.TensorSpec([], tf.string)
            return replayable(lambda: make_pair_stream_dataset(
                rows_dataset(self.streamed_rows(list, part), (spec, spec)),
                self.source_tok, self.target_tok, **budget(part)), True)

        return make_train, self.dev_factory(dev, pipeline)

    def build_model(self, model_config):
        model = Transformer(model_config)
        model.build()
        return model

    def loss_and_metrics(self, model, replicas: int):
        return (token_loss(self.config.training.label_smoothing, model.config.pad_id,
                           replicas), [MaskedAccuracy(model.config.pad_id)])

    # -- scoring a trained run's outputs (train.evaluate) ---------------------------------

    evaluate_options = frozenset({"--ref", "--beam", "--alpha", "--no-repeat-ngram-size",
                                  "--min-length", "--plot-attention", "--hyp", "--overwrite"})

    def use_tokenizers(self, source_tok, target_tok) -> None:
        """The tokenizers of a trained run (train.tokenizers.load_run_tokenizers), for the
        methods below when `prepare` did not run."""
        self.source_tok, self.target_tok = source_tok, target_tok

    def use_run(self, run: Path, model, batch_size: int | None = None) -> None:
        self.use_tokenizers(*load_run_tokenizers(run))
        if batch_size is not None:
            self.config.eval = dataclasses.replace(self.config.eval, batch_size=batch_size)

    def scorable(self, sources: list[str], max_source_length: int) -> list[bool]:
        """Which non-empty sources the model is given and scored on."""
        return [True] * len(sources)

    def search_settings(self, **overrides) -> SearchSettings:
        """The search of config.eval (SearchSettings.from_config), `overrides` replacing its
        options."""
        return SearchSettings.from_config(self.config.eval, **overrides)

    def generate(self, model, sources: list[str], progress=None) -> list[str]:
        """The model's outputs by the search settings of config.eval."""
        raise NotImplementedError

    def score(self, hypotheses: list[str], references: list[str],
              sources: list[str]) -> tuple[dict, list[str]]:
        """(scores for metrics.json, the lines that print them with their settings)."""
        raise NotImplementedError

    def evaluate_file(self, model, lines, references, name):
        """Outputs by the search settings of config.eval (a progress bar on stderr) for the
        non-empty lines the model accepts (`scorable`), scored by `score`."""
        max_source_length = model.config.max_source_length
        nonempty = [i for i, s in enumerate(lines) if s.strip()]
        fits = self.scorable([lines[i] for i in nonempty], max_source_length)
        scored = [i for i, keep in zip(nonempty, fits, strict=True) if keep]
        dropped, too_long = len(lines) - len(nonempty), len(nonempty) - len(scored)
        if references is not None and not scored:
            raise ValueError(f"every non-empty line of {name} is longer than the model's "
                             f"{max_source_length} source tokens; nothing to score")
        result = FileScores(sources=[lines[i] for i in scored], scored=scored)
        if dropped or too_long:
            result.notes.append(f"skipped {dropped} empty and {too_long} over-long source "
                                f"lines (their lines in the output are empty)")
        hypotheses = []
        if result.sources:
            with progress_bar(total=len(result.sources), desc="decoding", unit="line") as bar:
                hypotheses = self.generate(model, result.sources, progress=bar)
        # Line i of the file is the output for input line i, as export.translate writes it.
        result.outputs = [""] * len(lines)
        for i, hypothesis in zip(scored, hypotheses, strict=True):
            result.outputs[i] = hypothesis
        if references is not None:
            result.scores, result.printed = self.score(
                hypotheses, [references[i] for i in scored], result.sources)
            s = self.search_settings()
            result.details = {"beam": s.beam_size, "alpha": s.alpha, **s.constraints,
                              "sentences": len(scored), "skipped": dropped + too_long}
        return result

    def plot_attention(self, model, result: FileScores, count: int, directory: Path):
        """Cross-attention heatmaps of the first `count` scored lines of `result` (by the
        search settings of config.eval), named by their input line; their paths."""
        from ..attention import write_attention_plots

        return write_attention_plots(model, self.source_tok, self.target_tok,
                                     result.sources[:count], directory, self.search_settings(),
                                     line_numbers=[i + 1 for i in result.scored[:count]])
