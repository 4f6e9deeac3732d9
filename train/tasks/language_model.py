"""Language modelling: monolingual text (VNDS articles), a decoder-only `TransformerLM`
trained on next-token prediction, perplexity per token and per syllable and bits per
character, and text generation from a prompt."""

from __future__ import annotations

import logging
import weakref
from pathlib import Path

import tensorflow as tf

from keras_transformer.decoding import SearchSettings
from keras_transformer.losses import label_smoothed_nll
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models.language_model import TransformerLM
from keras_transformer.text.pipeline import language_model_rows, make_language_model_dataset

from ..batches import replayable
from ..data import split_sentences, word_joints
from ..losses import token_loss
from ..record_stream import rows_dataset
from ..scoring import perplexities, syllables_and_characters
from ..tasks.base import DevScore, FileScores, Task, part_share, transformer_config
from ..tokenizers import load_run_tokenizers, train_tokenizer

log = logging.getLogger("train")


# One traced function per model, padding id and input structure: every dev score and final
# score reuses it.
_NLL_FUNCTIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _batch_nll(model, pad_id: int, inputs_spec):
    # Any batch size and length: one trace serves every bucket.
    spec = tf.nest.map_structure(lambda s: tf.TensorSpec([None] * s.shape.rank, s.dtype),
                                 inputs_spec)
    functions = _NLL_FUNCTIONS.setdefault(model, {})
    key = (pad_id, repr(spec))
    if key not in functions:
        @tf.function(input_signature=[spec, tf.TensorSpec([None, None], tf.int32)])
        def batch_nll(inputs, targets):
            nll, mask = label_smoothed_nll(targets, model(inputs, training=False), 0.0, pad_id)
            return (tf.reduce_sum(tf.cast(nll, tf.float64)),
                    tf.reduce_sum(tf.cast(mask, tf.int64)))

        functions[key] = batch_nll
    return functions[key]


def summed_nll(model, dataset, pad_id: int) -> tuple[float, int]:
    """(the summed negative log-likelihood in nats, the number of tokens it covers) of
    `model` (inputs -> logits (B,T,V): ids (B,T), or an encoder-decoder's (source,
    target_in)) over the (inputs, targets) batches of the tf.data `dataset`, targets equal to
    `pad_id` left out. Summed per batch in float64."""
    batch_nll = _batch_nll(model, pad_id, dataset.element_spec[0])
    total, tokens = 0.0, 0
    for inputs, targets in dataset:
        nll, count = batch_nll(inputs, targets)
        total += float(nll)
        tokens += int(count)
    return total, tokens


def encode_prompt(tokenizer, prompt: str, max_length: int) -> list[int]:
    """BOS + the prompt's pieces; ValueError for a prompt with no piece or one that leaves
    the model (max_length positions) no room for a new token."""
    ids = tokenizer.encode([prompt])[0]
    if not prompt.strip() or not ids:
        raise ValueError("the prompt is empty; give some text to continue")
    if len(ids) + 1 >= max_length:
        raise ValueError(f"the prompt is {len(ids)} pieces; the model reads at most "
                         f"{max_length - 2} (its {max_length} positions hold BOS and at least "
                         f"one new token): shorten the prompt")
    return [tokenizer.bos_id, *ids]


def generate_texts(model, tokenizer, prompt: str, *, max_new_tokens: int,
                   settings: SearchSettings = SearchSettings()) -> list[str]:
    """`settings.num_samples` continuations of `prompt`, each decoded with the prompt before
    it: greedy at temperature 0, else sampled (TransformerLM.generate; one generator seeded by
    settings.seed draws every sample, so a seed reproduces them). New tokens stop at EOS or at
    the model's max_target_length."""
    ids = encode_prompt(tokenizer, prompt, model.config.max_target_length)
    max_new_tokens = min(max_new_tokens, model.config.max_target_length - len(ids))
    new = model.generate([ids] * settings.num_samples, max_new_tokens, settings)
    return tokenizer.decode([ids + row for row in new])


class LanguageModelTask(Task):
    """data.train_source / dev_source [/ test_source]: TSV files with an article column
    (their article column, train.data.load_summarization's). Each split is one stream of BOS + article + EOS cut into
    windows of data.max_target_length tokens (keras_transformer.text.pipeline.
    language_model_rows), the model's context. Loss: next-token cross-entropy, padding masked
    (training.label_smoothing 0 makes it the negative log-likelihood). Scored by
    train.scoring.perplexities."""

    def prepare(self, out: Path):
        config, d = self.config, self.config.data
        self.texts = texts = {name: split.articles for name, split in
                              self.summary_splits("language_model").items()}
        e = config.eval
        if e.dev_score_sentences:
            texts["dev_score"] = texts["dev"][: e.dev_score_sentences]
        for name in ("dev", "test"):
            if e.max_sentences and name in texts:  # the final scores read the first ones only
                texts[name] = texts[name][: e.max_sentences]
        log.info("language model: %s articles (word joints: %s)",
                 ", ".join(f"{len(texts[k])} {k}" for k in ("train", "dev", "test")
                           if k in texts), d.word_joints)
        # SentencePiece trains on sentences: a whole article is longer than its 4,192-byte
        # sentence limit and would be left out of training.
        sentences = [s for article in texts["train"] for s in split_sentences(article)]
        self.tok = train_tokenizer(config, sentences, out / "spm")
        self.model_config = transformer_config(config, self.tok, self.tok,
                                               max_source_length=d.max_target_length,
                                               max_target_length=d.max_target_length)
        self.rows = {name: self.text_rows(split) for name, split in texts.items()
                     if not (name == "train" and d.stream)}
        self.batch_size = max(1, d.tokens_per_batch // d.max_target_length)
        self.counts = {"windows": {k: len(v) for k, v in self.rows.items()}}
        log.info("windows of %d tokens: %s", d.max_target_length,
                 ", ".join(f"{n} {k}" for k, n in self.counts["windows"].items()))
        return self.model_config

    def text_rows(self, texts: list[str]):
        """The windows of data.max_target_length tokens of one stream of the texts."""
        c = self.model_config
        return language_model_rows(texts, self.tok, self.config.data.max_target_length,
                                   pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id)

    def dataset(self, rows, *, shuffle: bool = False, repeat: bool = False,
                batch_size: int | None = None):
        """(inputs, targets) batches of windows (text_rows), `batch_size` of them (None: the
        run's)."""
        c = self.model_config
        return make_language_model_dataset(
            rows, batch_size=batch_size or self.batch_size, pad_id=c.pad_id, bos_id=c.bos_id,
            shuffle=shuffle, seed=self.config.training.seed, repeat=repeat)

    def datasets(self):
        repeat = self.config.training.steps_per_epoch > 0

        def make_train(part=(1, 0)):  # a streamed run's pipeline reads its part alone
            if self.stream is not None:  # windows of each chunk of articles read
                def convert(records):
                    return list(self.text_rows([article for article, _ in records]))

                spec = tf.TensorSpec([self.config.data.max_target_length + 1], tf.int32)
                return replayable(lambda: self.dataset(
                    rows_dataset(self.streamed_rows(convert, part), spec),
                    batch_size=part_share(self.batch_size, part)), True)
            rows = self.rows["train"]
            return replayable(lambda: self.dataset(rows, shuffle=True, repeat=repeat), repeat)

        # The per-epoch dev loss reads the dev score's articles (eval.dev_score_sentences),
        # not the whole dev split, which evaluate() scores once at the end.
        dev = "dev_score" if "dev_score" in self.rows else "dev"
        return make_train, lambda: self.dataset(self.rows[dev])

    def build_model(self, model_config):
        model = TransformerLM(model_config)
        model.build()
        return model

    def loss_and_metrics(self, model, replicas: int):
        return (token_loss(self.config.training.label_smoothing, model.config.pad_id,
                           replicas), [MaskedAccuracy(model.config.pad_id)])

    def describe(self, model) -> str:
        return (f", context {model.config.max_target_length} tokens, batch "
                f"{self.batch_size} windows")

    def scores(self, model, name: str) -> dict:
        """train.scoring.perplexities of the split `name` under `model`."""
        return self.text_scores(model, self.texts[name], self.rows[name])

    def text_scores(self, model, texts: list[str], rows=None) -> dict:
        """train.scoring.perplexities of `texts` (their windows `rows`, else made here) under
        `model`: what the final scores, the dev score and train.evaluate report."""
        rows = self.text_rows(texts) if rows is None else rows
        nll, tokens = summed_nll(model, self.dataset(rows), model.config.pad_id)
        return perplexities(nll, tokens, *syllables_and_characters(texts))

    def dev_score(self):
        if "dev_score" not in self.rows:
            return None

        def score(model):
            s = self.scores(model, "dev_score")
            return {"neg_perplexity": -s["perplexity_token"],
                    "perplexity_token": s["perplexity_token"],
                    "perplexity_syllable": s["perplexity_syllable"],
                    "bits_per_character": s["bits_per_character"]}

        return DevScore(score, {"dev_neg_perplexity": "minus the per-token perplexity of the "
                                                      "first dev_score_articles dev articles",
                                "dev_score_articles": len(self.texts["dev_score"])},
                        name="neg_perplexity", label="-perplexity per token")

    def data_metrics(self):
        return {**self.counts, **super().data_metrics()}

    def evaluate(self, model, out: Path, strategy, metrics: dict) -> None:
        for name in ("dev", "test"):
            if name not in self.texts:
                continue
            s = self.scores(model, name)
            metrics.update({f"{name}_{k}": v for k, v in s.items()})
            metrics[f"{name}_articles"] = len(self.texts[name])
            print(f"{name}: {format_perplexities(s, len(self.texts[name]))}")
        e = self.config.eval
        last = self.texts.get("test", self.texts["dev"])
        length = min(12, model.config.max_target_length // 2)
        for ids in self.tok.encode(last[: e.samples]):
            # A prompt of the article's first pieces, continued greedily.
            prompt = self.tok.decode([ids[:length]])[0]
            text = generate_texts(model, self.tok, prompt, max_new_tokens=40)[0]
            print(f"  PROMPT {prompt}\n  OUT    {text}")

    # -- train.evaluate: the perplexities of a text file ----------------------------------

    scored_without_references = True

    def prepare_sources(self, sources):
        return [word_joints(text, self.config.data.word_joints) for text in sources]

    def use_run(self, run, model, batch_size=None):
        self.tok = load_run_tokenizers(run)[0]
        self.model_config = model.config
        d = self.config.data
        self.batch_size = batch_size or max(1, d.tokens_per_batch // d.max_target_length)

    def evaluate_file(self, model, lines, references, name):
        """The perplexities of the non-empty lines (each an article or a sentence, stripped;
        one stream cut into windows as in training), by `text_scores`. No output file."""
        texts = [line.strip() for line in lines if line.strip()]
        scores = self.text_scores(model, texts)
        skipped = len(lines) - len(texts)
        return FileScores(
            scores=scores, details={"articles": len(texts), "skipped": skipped},
            printed=[format_perplexities(scores, len(texts))],
            notes=[f"skipped {skipped} empty lines"] if skipped else [])


def format_perplexities(s: dict, texts: int) -> str:
    """The scores of train.scoring.perplexities, and what they count, on one line."""
    return (f"perplexity {s['perplexity_token']:.2f} per token, "
            f"{s['perplexity_syllable']:.2f} per syllable; {s['bits_per_character']:.3f} bits "
            f"per character ({texts} articles, {s['tokens']} tokens, {s['syllables']} "
            f"syllables, {s['characters']} characters)")
