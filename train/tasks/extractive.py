"""Extractive summarization: articles and their summaries (VNDS), an encoder-only sentence
scorer (keras_transformer.models.extractor) trained on greedy-oracle labels, the summary
picked from its scores (keras_transformer.text.extractive), ROUGE beside Lead-1/2/3 and the
oracle."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.file_safety import atomic_write_text
from keras_transformer.losses import MaskedSentenceCrossEntropy, sentence_bce
from keras_transformer.models.extractor import TransformerExtractor
from keras_transformer.text.extractive import (
    SELECTION_FILE,
    Selection,
    SentenceScorer,
    article_ids,
    candidate_selections,
    read_selection,
    select,
    summary,
)
from keras_transformer.text.rouge import ROUGE_TYPES, format_rouge, rouge

from ..config import ConfigError
from ..data import split_sentences, word_joints
from ..losses import replica_mean
from ..scoring import lead_baselines, oracle
from ..tasks.base import (
    ArrayTask,
    DevScore,
    FileScores,
    final_split,
    score_prefix,
    transformer_config,
)
from ..tokenizers import load_run_tokenizers, train_tokenizer

log = logging.getLogger("train")

ORACLE_FILE = "oracle.json"  # the greedy-oracle labels of every split, reused on resume


@keras.saving.register_keras_serializable(package="train")
class ReplicaSentenceMeanLoss(MaskedSentenceCrossEntropy):
    """The sentence loss of each replica divided by the real sentences of the global batch
    (see train.losses.ReplicaTokenMeanLoss)."""

    def call(self, y_true, y_pred):
        loss, mask = sentence_bce(y_true, y_pred)
        return replica_mean(tf.reduce_sum(loss), tf.reduce_sum(mask))


def split_digest(articles, summaries) -> str:
    """A digest of a split's text: oracle labels are reused only for the same articles."""
    digest = hashlib.sha256()
    for text in (*articles, *summaries):
        digest.update(text.encode("utf-8") + b"\n")
    return digest.hexdigest()


def oracle_labels(out: Path, splits: dict, max_sentences: int,
                  also: Path | None = None) -> dict[str, list[list[int]]]:
    """{split: the greedy oracle's sentences of each article among its first max_sentences}
    (train.scoring.oracle), read from <out>/oracle.json (or `also`'s, another run's, read
    only) when it holds them for these articles and K, else computed and written to
    <out>/oracle.json."""
    path = out / ORACLE_FILE
    digests = {name: split_digest(s.articles, s.summaries) for name, s in splits.items()}
    for cache in (path, *(() if also is None else (also / ORACLE_FILE,))):
        try:
            cached = json.loads(cache.read_text(encoding="utf-8"))
            labels = cached["labels"]
            if cached["max_sentences"] == max_sentences and all(
                    cached["digests"].get(name) == digest for name, digest in digests.items()):
                log.info("oracle labels: read from %s", cache)
                return {name: labels[name] for name in digests}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
    labels = {name: article_oracles(split.articles, split.summaries, max_sentences)
              for name, split in splits.items()}
    atomic_write_text(path, json.dumps({"max_sentences": max_sentences, "digests": digests,
                                        "labels": labels}) + "\n")
    return labels


def article_oracles(articles, summaries, max_sentences: int) -> list[list[int]]:
    """The greedy oracle's sentences (train.scoring.oracle) of each article among its first
    max_sentences."""
    return [oracle(split_sentences(a)[:max_sentences], s)
            for a, s in zip(articles, summaries, strict=True)]


def trimmed(ids, labels, pad_id: int):
    """A batch cut to its most sentences and its longest sentence (articles are stored at
    K x S): less padding to encode."""
    real = tf.not_equal(ids, pad_id)
    length = tf.reduce_max(tf.reduce_sum(tf.cast(real, tf.int32), -1))
    sentences = tf.reduce_max(tf.reduce_sum(tf.cast(tf.reduce_any(real, -1), tf.int32), -1))
    return ids[:, :sentences, :length], labels[:, :sentences]


def choose_selection(extractions, references, candidates) -> tuple[Selection, list[dict]]:
    """The candidate whose summaries score the best mean ROUGE-1/2/L F1 against `references`
    (the first on a tie), and every candidate's scores."""
    table = []
    for candidate in candidates:
        summaries = [summary(sentences, select(scores, sentences, candidate))
                     for sentences, scores in extractions]
        scores = {k: v for k, v in rouge(summaries, references).items() if k in ROUGE_TYPES}
        table.append({**candidate.to_dict(), **scores,
                      "rouge": round(float(np.mean(list(scores.values()))), 2)})
    best = max(range(len(table)), key=lambda i: (table[i]["rouge"], -i))
    return candidates[best], table


class ExtractiveSummarizationTask(ArrayTask):
    """data.train_source / dev_source [/ test_source]: TSV files with article and summary
    columns (train.data.load_summaries). An article is its first data.article_sentences (K)
    sentences, each its first data.max_source_length - 1 pieces + EOS; its labels are the
    greedy oracle's sentences among them; the model scores every sentence, and the summary is
    the sentences the selection (eval.summary_sentences / summary_syllables /
    trigram_blocking, else chosen on dev) picks, in article order."""

    reads_lowercase = True

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        e = config.eval
        if e.summary_sentences and e.summary_syllables:
            raise ConfigError(f"eval.summary_sentences ({e.summary_sentences}) and "
                              f"eval.summary_syllables ({e.summary_syllables}) both pick the "
                              f"summary; set one (or neither, to choose on dev)")
        if e.summary_sentences > config.data.article_sentences:
            raise ConfigError(f"eval.summary_sentences ({e.summary_sentences}) is more than the "
                              f"sentences the model reads (data.article_sentences "
                              f"{config.data.article_sentences})")

    def prepare(self, out: Path):
        config, d = self.config, self.config.data
        self.splits = splits = self.summary_splits("extractive_summarization")
        log.info("extractive summarization: %s articles (word joints: %s)",
                 ", ".join(f"{len(v)} {k}" for k, v in splits.items()), d.word_joints)
        sentences = [s for article in splits["train"].articles for s in split_sentences(article)]
        self.tok = train_tokenizer(config, sentences, out / "spm")
        self.model_config = transformer_config(config, self.tok, self.tok,
                                               max_source_length=d.max_source_length,
                                               max_target_length=d.max_source_length)
        self.scorer = self.make_scorer(None)
        held = self.held_splits(splits)
        labels = oracle_labels(out, held, d.article_sentences)
        self.arrays = {}
        self.counts = {"empty_skipped": {k: v.skipped_empty for k, v in splits.items()},
                       "articles_cut": {}, "sentences_cut": {}, "no_oracle_sentence": {}}
        for name, split in held.items():
            self.scorer.cut_articles = self.scorer.cut_sentences = 0
            self.arrays[name] = self.labelled_arrays(split.articles, labels[name])
            self.counts["articles_cut"][name] = self.scorer.cut_articles
            self.counts["sentences_cut"][name] = self.scorer.cut_sentences
            self.counts["no_oracle_sentence"][name] = sum(not c for c in labels[name])
            log.info("%s: %d of %d articles have more than %d sentences (the rest are not "
                     "read), %d sentences are cut to %d pieces, %d articles have no oracle "
                     "sentence", name, self.scorer.cut_articles, len(split),
                     d.article_sentences, self.scorer.cut_sentences, d.max_source_length - 1,
                     self.counts["no_oracle_sentence"][name])
        self.batch_size = max(1, d.tokens_per_batch // (d.article_sentences
                                                        * d.max_source_length))
        return self.model_config

    def labelled_arrays(self, articles, labels) -> tuple[np.ndarray, np.ndarray]:
        """(ids (B, K, S), targets (B, K): 1 for an oracle sentence, 0 for another, -1 past
        the article) of articles with their oracle sentences."""
        d = self.config.data
        _, encoded = self.scorer.encode_articles(articles)
        ids = article_ids(encoded, self.model_config.pad_id, d.article_sentences,
                          d.max_source_length)
        target = np.full(ids.shape[:2], -1.0, np.float32)
        for row, (article, chosen) in enumerate(zip(encoded, labels, strict=True)):
            target[row, : len(article)] = 0.0
            target[row, chosen] = 1.0
        return ids, target

    def record_arrays(self, records):
        articles, summaries = [a for a, _ in records], [s for _, s in records]
        return self.labelled_arrays(articles, article_oracles(
            articles, summaries, self.config.data.article_sentences))

    def make_scorer(self, model) -> SentenceScorer:
        """The SentenceScorer of `model` (None: for encoding only) by the run's settings."""
        c = self.model_config

        def run(ids):
            return tf.sigmoid(model(tf.constant(ids), training=False)).numpy()

        return SentenceScorer(run, self.tok.encode, max_sentences=self.config.data.article_sentences,
                              max_length=c.max_source_length, pad_id=c.pad_id, eos_id=c.eos_id,
                              lowercase=self.config.data.lowercase)

    trim = staticmethod(trimmed)

    def build_model(self, model_config):
        model = TransformerExtractor(model_config, max_sentences=self.config.data.article_sentences,
                                     sentence_layers=self.config.model.sentence_layers)
        model.build()
        return model

    def loss_and_metrics(self, model, replicas: int):
        return (ReplicaSentenceMeanLoss() if replicas > 1 else MaskedSentenceCrossEntropy()), []

    def describe(self, model) -> str:
        d = self.config.data
        return (f", {d.article_sentences} sentences of {d.max_source_length - 1} pieces an "
                f"article, {model.sentence_layers} inter-sentence layers, batch "
                f"{self.batch_size}")

    # -- selection and scoring ------------------------------------------------------------

    def candidates(self) -> list[Selection]:
        """The selections the dev set chooses from: the configured one alone, or the grid."""
        e, k = self.config.eval, self.config.data.article_sentences
        blocking = (False, True) if e.trigram_blocking == "auto" else (bool(e.trigram_blocking),)
        if e.summary_sentences or e.summary_syllables:
            return [Selection(e.summary_sentences, e.summary_syllables, b).check(k)
                    for b in blocking]
        return candidate_selections(k, blocking)

    def extract(self, model, articles):
        """[(sentences read, probabilities)] of `articles` by `model`."""
        return self.make_scorer(model).score(articles, self.config.eval.batch_size)

    def dev_score(self):
        e = self.config.eval
        if not e.dev_score_sentences:
            return None
        dev = self.splits["dev"]
        articles = dev.articles[: e.dev_score_sentences]
        references = dev.summaries[: e.dev_score_sentences]

        def score(model):
            selection, table = choose_selection(self.extract(model, articles), references,
                                                self.candidates())
            row = table[self.candidates().index(selection)]
            return {"rouge": row["rouge"], **{k: row[k] for k in ROUGE_TYPES},
                    "selection_sentences": selection.sentences,
                    "selection_syllables": selection.syllables}

        return DevScore(score, {"dev_rouge": "mean of ROUGE-1, ROUGE-2 and ROUGE-L F1 with the "
                                             "selection that scores best on these articles",
                                "dev_score_articles": len(articles)},
                        name="rouge", label="ROUGE (mean of 1, 2, L)")

    def data_metrics(self):
        return {**self.counts, **super().data_metrics()}

    def final_articles(self) -> dict[str, tuple[list[str], list[str]]]:
        """{split: (articles, summaries)} that the final scores read: dev and test, each its
        first eval.max_sentences articles when set."""
        count = self.config.eval.max_sentences or None
        return {name: (self.splits[name].articles[:count], self.splits[name].summaries[:count])
                for name in ("dev", "test") if name in self.splits}

    def evaluate(self, model, out: Path, strategy, metrics: dict) -> None:
        e = self.config.eval
        read = self.final_articles()
        extracted = {name: self.extract(model, articles) for name, (articles, _) in read.items()}
        selection, table = choose_selection(extracted["dev"], read["dev"][1], self.candidates())
        atomic_write_text(out / SELECTION_FILE, json.dumps(selection.to_dict()) + "\n")
        metrics["selection"] = selection.to_dict()
        metrics["selection_dev"] = table
        print(f"selection (best of {len(table)} on {len(read['dev'][0])} dev articles): "
              f"{selection.describe()}")
        last = final_split("test" in read)
        for name, extractions in extracted.items():
            articles, references = read[name]
            chosen = [select(scores, sentences, selection) for sentences, scores in extractions]
            hypotheses = [summary(sentences, c) for (sentences, _), c in
                          zip(extractions, chosen, strict=True)]
            for suffix, lines in (("src", articles), ("hyp", hypotheses), ("ref", references)):
                atomic_write_text(out / f"{name}.{suffix}", "".join(f"{x}\n" for x in lines))
            scores, lines = self.score(hypotheses, references, articles, selection)
            prefix = score_prefix(name, last, metrics)
            metrics.update({f"{prefix}{k}": v for k, v in scores.items()})
            metrics[f"{prefix}articles"] = len(articles)
            metrics[f"{prefix}summary_sentences_mean"] = round(
                float(np.mean([len(c) for c in chosen])), 2)
            for line in lines:
                print(f"{name}: {line}")
            if name == last:
                for (sentences, scores_), c, reference in list(zip(
                        extractions, chosen, references, strict=True))[: e.samples]:
                    print(f"  CHOSEN  {', '.join(str(i + 1) for i in c)} of {len(sentences)} "
                          f"(scores {' '.join(f'{s:.2f}' for s in scores_)})\n"
                          f"  OUT     {summary(sentences, c)}\n  REF     {reference}")

    def score(self, hypotheses, references, sources, selection: Selection):
        """ROUGE of the summaries beside Lead-1/2/3 and the oracle; (scores, printed lines)."""
        scores = rouge(hypotheses, references)
        leads = lead_baselines(sources, references)
        lines = [f"model  {format_rouge(scores)}  ({len(hypotheses)} articles, "
                 f"{selection.describe()})"]
        lines += [f"{name:6s} {format_rouge(values)}" for name, values in leads.items()]
        lines.append(scores["rouge_signature"])
        return {**scores, **leads}, lines

    # -- train.evaluate -------------------------------------------------------------------

    evaluate_options = frozenset({"--ref", "--tsv", "--hyp", "--overwrite"})

    def prepare_sources(self, sources):
        return [word_joints(text, self.config.data.word_joints) for text in sources]

    def use_run(self, run, model, batch_size=None):
        self.tok = load_run_tokenizers(run)[0]
        self.model_config = model.config
        self.selection = read_selection(run, model.max_sentences)
        if batch_size:
            self.config.eval.batch_size = batch_size

    def evaluate_file(self, model, lines, references, name):
        """The summary of every non-empty line (its first K sentences, as in training, by
        the run's selection.json); ROUGE beside Lead-1/2/3 and the oracle against the
        references."""
        scored = [i for i, text in enumerate(lines) if text.strip()]
        result = FileScores(sources=[lines[i].strip() for i in scored], scored=scored)
        if len(scored) < len(lines):
            result.notes.append(f"skipped {len(lines) - len(scored)} empty lines (their lines "
                                f"in the output are empty)")
        result.outputs = [""] * len(lines)
        if not scored:
            return result
        scorer = self.make_scorer(model)
        extractions = scorer.score(result.sources, self.config.eval.batch_size)
        hypotheses = [summary(sentences, select(scores, sentences, self.selection))
                      for sentences, scores in extractions]
        for i, hypothesis in zip(scored, hypotheses, strict=True):
            result.outputs[i] = hypothesis
        if scorer.cut_articles:
            result.notes.append(f"{scorer.cut_articles} articles have more than "
                                f"{scorer.max_sentences} sentences; only their first "
                                f"{scorer.max_sentences} are read")
        if references is not None:
            result.scores, result.printed = self.score(
                hypotheses, [references[i] for i in scored], result.sources, self.selection)
            result.details = {"articles": len(scored), "skipped": len(lines) - len(scored),
                              "selection": self.selection.to_dict(),
                              "articles_cut": scorer.cut_articles,
                              "sentences_cut": scorer.cut_sentences}
        return result

