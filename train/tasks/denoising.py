"""Denoising pre-training: unlabelled text from training splits, corrupted by BART's text
infilling (and optionally sentence permutation) or T5's span corruption
(keras_transformer.text.noising), and the encoder-decoder `Transformer` trained to write the
original back (T5: the hidden spans); the dev perplexity of the targets picks best. Its run is
what a summarizer or a translator of the same sizes fine-tunes from (`training.init_from`:
every weight, and the tokenizer with [MASK] and the sentinels)."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from keras_transformer.text.buckets import encode_in_chunks
from keras_transformer.text.masking import MASK_PIECE
from keras_transformer.text.noising import NOISES, SENTINEL_PIECES, check_noise
from keras_transformer.text.pipeline import make_denoising_dataset
from keras_transformer.translator import translate

from ..batches import replayable
from ..config import ConfigError
from ..record_stream import rows_dataset
from ..tasks.base import DevScore, part_share, transformer_config
from ..tasks.seq2seq import Seq2SeqTask
from ..tokenizers import train_tokenizer
from .language_model import summed_nll
from .masked_lm import (
    read_document_splits,
    read_text_splits,
    record_texts,
    split_texts,
    streamed_text,
)

log = logging.getLogger("train")

# The dev batches are corrupted once, the same way at every epoch, by this seed.
DEV_NOISE_SEED = 12345


def pack_sentences(sentences: list[list[int]], limit: int) -> tuple[list[list[int]],
                                                                     list[list[int]]]:
    """Consecutive sentences' ids packed into rows of at most `limit` ids (a sentence longer
    than that alone in its row, cut), with each id's sentence index in its row; sentences
    with no piece left out. (rows, sentence indices)."""
    rows, indices, row, index = [], [], [], []
    for ids in sentences:
        if not ids:
            continue
        ids = ids[:limit]
        if row and len(row) + len(ids) > limit:
            rows.append(row)
            indices.append(index)
            row, index = [], []
        index += [index[-1] + 1 if index else 0] * len(ids)
        row += ids
    if row:
        rows.append(row)
        indices.append(index)
    return rows, indices


class DenoisingTask(Seq2SeqTask):
    """data.texts (training text files) and data.dev_texts, read as masked_lm reads them
    (one text per sentence), consecutive sentences packed into rows of at most
    data.max_source_length - 1 pieces + EOS. The source is the row corrupted (data.noise,
    data.noise_rate, data.span_lambda, data.permute_sentences), the target the row (span
    corruption: its hidden spans). Loss: cross-entropy over the target pieces; the dev
    perplexity of the targets picks best.keras."""

    reads_lowercase = True

    evaluate_options = frozenset({"--beam", "--alpha", "--no-repeat-ngram-size",
                                  "--min-length", "--plot-attention", "--hyp", "--overwrite"})

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        d = config.data
        if d.corpus != "text":
            raise ConfigError(f"task denoising reads data.corpus text (files in data.texts and "
                              f"data.dev_texts), got {d.corpus!r}")
        if not d.texts or not d.dev_texts:
            raise ConfigError("task denoising needs data.texts (training text files) and "
                              "data.dev_texts (dev text files)")
        if not config.tokenizer.joint:
            raise ConfigError("task denoising restores its input: one tokenizer for source "
                              "and target (tokenizer.joint: true)")
        if d.noise not in NOISES:
            raise ConfigError(f"data.noise must be one of {', '.join(NOISES)}, got {d.noise!r}")
        if d.noise == "span_corruption" and d.permute_sentences:
            raise ConfigError("data.permute_sentences goes with data.noise: infilling; span "
                              "corruption's target is the hidden spans, not the sentences' order")

    def prepare(self, out: Path):
        config, d = self.config, self.config.data
        check_noise(d.noise_rate, d.span_lambda)
        if d.stream:  # training text read as training consumes it; the sample trains the tokenizer
            texts = split_texts({"train": streamed_text(self),
                                 **read_document_splits(config, "denoising", ("dev",))}, config)
        else:
            texts = read_text_splits(config, "denoising")
        sentinels = SENTINEL_PIECES if d.noise == "span_corruption" else ()
        tok = train_tokenizer(config, texts["train"], out / "spm",
                              symbols=(MASK_PIECE, *sentinels))
        self.source_tok = self.target_tok = self.tok = tok
        self.mask_id = tok.piece_id(MASK_PIECE)
        self.sentinel_ids = [tok.piece_id(piece) for piece in sentinels]
        if self.mask_id is None or None in self.sentinel_ids:
            missing = MASK_PIECE if self.mask_id is None else "T5's sentinel <extra_id_k>"
            raise ConfigError(f"the tokenizer has no {missing} piece; a denoising run trains "
                              f"its own tokenizer, or starts from a run whose tokenizer has it")
        self.rows = {}
        for split, lines in texts.items():
            rows = self.text_rows(lines)
            if not rows[0]:
                raise ValueError(f"the {split} text holds no piece to restore (every line is "
                                 f"empty or special); give text files with sentences")
            if not (split == "train" and d.stream):  # a stream's rows are made as it is read
                self.rows[split] = rows
        limit = d.max_source_length - 1
        self.counts = {"sentences": {k: len(v) for k, v in texts.items()
                                     if k in self.rows},
                       "rows": {k: len(v[0]) for k, v in self.rows.items()},
                       "pieces": {k: int(sum(map(len, v[0]))) for k, v in self.rows.items()}}
        log.info("rows of up to %d pieces: %s", limit,
                 ", ".join(f"{n} {k}" for k, n in self.counts["rows"].items()))
        return transformer_config(config, tok, tok, max_source_length=d.max_source_length,
                                  max_target_length=d.max_source_length)

    def text_rows(self, texts: list[str]) -> tuple[list[list[int]], list[list[int]]]:
        """Consecutive texts packed into rows of at most data.max_source_length - 1 pieces +
        EOS (pack_sentences), and each piece's sentence index in its row."""
        tok = self.tok
        rows, indices = pack_sentences(list(encode_in_chunks(tok, texts)),
                                       self.config.data.max_source_length - 1)
        return ([row + [tok.eos_id] for row in rows],
                [index + [index[-1]] for index in indices])

    def dataset(self, split: str, *, seed: int, shuffle: bool, repeat: bool = False,
                count: int | None = None, part=(1, 0)):
        """Corrupted batches of a split's rows, its first `count` (None: all); a streamed
        run's training rows are input pipeline part[1] of part[0]'s, read from the shards."""
        import tensorflow as tf

        d, tok = self.config.data, self.tok
        if self.stream is not None and split == "train":
            def convert(records):
                return list(zip(*self.text_rows(record_texts(records)), strict=True))

            spec = tf.TensorSpec([None], tf.int32)
            rows, indices = rows_dataset(self.streamed_rows(convert, part), (spec, spec)), None
        else:
            rows, indices = (column[:count] for column in self.rows[split])
        noising = dict(rate=d.noise_rate, span_lambda=d.span_lambda, seed=seed,
                       **({"sentinel_ids": self.sentinel_ids} if d.noise == "span_corruption"
                          else {"mask_id": self.mask_id}))
        return make_denoising_dataset(
            rows, indices, max_length=d.max_source_length,
            tokens_per_batch=part_share(d.tokens_per_batch, part), pad_id=tok.pad_id,
            bos_id=tok.bos_id,
            eos_id=tok.eos_id, noising=noising, permute_sentences=d.permute_sentences,
            noise=d.noise,
            num_buckets=d.num_buckets, shuffle=shuffle, seed=self.config.training.seed,
            repeat=repeat)

    def datasets(self):
        repeat = self.config.training.steps_per_epoch > 0
        seed = self.config.training.seed

        def make_train(part=(1, 0)):  # a streamed run's pipeline reads its part alone
            return replayable(lambda: self.dataset("train", seed=seed, shuffle=True,
                                                   repeat=repeat, part=part), repeat)

        return make_train, lambda: self.dataset("dev", seed=DEV_NOISE_SEED, shuffle=False)

    def describe(self, model) -> str:
        d = self.config.data
        permuted = ", sentences permuted" if d.permute_sentences else ""
        noise = ("span corruption (a sentinel a span, the spans the target)"
                 if d.noise == "span_corruption" else "text infilling")
        return (f", {noise} of {d.noise_rate:.0%} of the pieces in Poisson("
                f"{d.span_lambda:g}) spans{permuted}, rows of up to {d.max_source_length - 1} "
                f"pieces")

    def scores(self, model, count: int | None = None) -> dict:
        """The perplexity of the first `count` dev rows (None: all) given their corrupted
        copies (corrupted by DEV_NOISE_SEED, the same way at every call)."""
        data = self.dataset("dev", seed=DEV_NOISE_SEED, shuffle=False, count=count)
        nll, count = summed_nll(model, data, model.config.pad_id)
        return {"perplexity": math.exp(nll / max(count, 1)), "pieces": count}

    def dev_score(self):
        def score(model):
            perplexity = self.scores(model)["perplexity"]
            return {"neg_perplexity": -perplexity, "perplexity": perplexity}

        return DevScore(score, {"dev_rows": len(self.rows["dev"][0])},
                        name="neg_perplexity", label="-perplexity")

    def data_metrics(self):
        return {**self.counts, **super().data_metrics()}

    def evaluate(self, model, out: Path, strategy, metrics: dict) -> None:
        # The dev rows of the per-epoch score, their first eval.max_sentences when set.
        count = len(self.rows["dev"][0][: self.config.eval.max_sentences or None])
        s = self.scores(model, count)
        metrics.update({"scored_split": "dev", "dev_perplexity": s["perplexity"],
                        "dev_loss": math.log(s["perplexity"]), "dev_target_pieces": s["pieces"],
                        "dev_scored_rows": count})
        print(f"dev: perplexity {s['perplexity']:.2f} of the original text given its corrupted "
              f"copy ({s['pieces']} pieces of {count} rows)")
        self.show_restorations(model)

    def show_restorations(self, model) -> None:
        """The first dev rows as the model reads them (corrupted) and as it restores them."""
        count = self.config.eval.samples
        if not count:
            return
        (sources, _), _ = next(iter(self.dataset("dev", seed=DEV_NOISE_SEED, shuffle=False)))
        corrupted = self.tok.decode(sources.numpy()[:count])
        restored = self.generate(model, corrupted)
        for line, output in zip(corrupted, restored, strict=True):
            print(f"  IN   {line}\n  OUT  {output}")

    def generate(self, model, sources, progress=None):
        """The model's restorations of `sources` (text holding [MASK] pieces), decoded by the
        search settings of config.eval."""
        return translate(model, self.tok, self.tok, sources, self.search_settings(),
                         batch_size=self.config.eval.batch_size, truncate=True,
                         progress=progress)

    def use_tokenizers(self, source_tok, target_tok) -> None:
        super().use_tokenizers(source_tok, target_tok)
        self.tok = source_tok
