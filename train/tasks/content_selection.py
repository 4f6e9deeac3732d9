"""Content selection (the token-level selector of bottom-up summarization, Gehrmann et al.
2018): articles and their summaries (VNDS), an encoder-only tagger
(keras_transformer.models.tagger) trained to mark the article's words that the summary
copies (keras_transformer.text.copied_spans), scored on dev by the ranking of its word
probabilities (ROC AUC) beside F1."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_transformer.losses import MaskedSentenceCrossEntropy
from keras_transformer.models.tagger import TransformerTagger
from keras_transformer.text.copied_spans import content_labels, words
from keras_transformer.text.word_scorer import WordScorer

from ..data import split_sentences, word_joints
from ..tasks.base import (
    ArrayTask,
    DevScore,
    FileScores,
    final_split,
    score_prefix,
    transformer_config,
)
from ..tokenizers import load_run_tokenizers, train_tokenizer
from .extractive import ReplicaSentenceMeanLoss

log = logging.getLogger("train")

SELECTION_THRESHOLD = 0.5  # the probability at which `f1`, `precision` and `recall` select


def roc_auc(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """The probability that a selected word scores above one not selected (ties count one
    half): the Mann-Whitney statistic from average ranks. 0.5 when either class is absent,
    which leaves no ranking to judge."""
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if not positives or not negatives:
        return 0.5
    values, inverse, counts = np.unique(probabilities, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inverse]  # 1-based, a tie's mean rank
    return float((ranks[labels].sum() - positives * (positives + 1) / 2.0)
                 / (positives * negatives))


def selection_scores(probabilities, labels) -> dict:
    """Word probabilities and labels (one array of each per article) -> the selection's
    scores over all their words: ROC AUC, precision, recall and F1 at SELECTION_THRESHOLD,
    the best F1 over every threshold and that threshold, how many words. (Keys that
    metrics.json holds for nothing else: its `precision` is the training's.)"""
    p = np.concatenate([np.asarray(x, np.float64) for x in probabilities] or [np.zeros(0)])
    y = np.concatenate([np.asarray(x, bool) for x in labels] or [np.zeros(0, bool)])
    if len(p) != len(y):
        raise ValueError(f"{len(p)} word probabilities for {len(y)} labels")
    chosen = p >= SELECTION_THRESHOLD
    hits = int((chosen & y).sum())
    precision = hits / max(int(chosen.sum()), 1)
    recall = hits / max(int(y.sum()), 1)
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    # Every threshold at once: the words by falling probability, cut after each tie group.
    order = np.argsort(-p, kind="stable")
    true_positives = np.cumsum(y[order])
    cuts = np.flatnonzero(np.r_[p[order][1:] != p[order][:-1], True]) if len(p) else \
        np.zeros(0, np.int64)
    f1s = 2 * true_positives[cuts] / (cuts + 1 + max(int(y.sum()), 1))
    best = int(np.argmax(f1s)) if len(f1s) else 0
    return {"auc": round(roc_auc(p, y), 4), "f1": round(100 * f1, 2),
            "word_precision": round(100 * precision, 2),
            "word_recall": round(100 * recall, 2),
            "best_f1": round(100 * float(f1s[best]), 2) if len(f1s) else 0.0,
            "best_f1_threshold": round(float(p[order][cuts[best]]), 4) if len(f1s) else 0.0,
            "words": len(y)}


class ContentSelectionTask(ArrayTask):
    """data.train_source / dev_source [/ test_source]: TSV files with article and summary
    columns (train.data.load_summaries). An article is its first data.max_source_length - 1
    pieces + EOS (text.word_scorer.WordScorer); a piece's label is its word's by Gehrmann's
    rule (text.copied_spans.content_labels; a token of several words, read with VNDS's
    joints kept, is 1 when one of them is); the EOS and padding are left out of the loss, the
    masked binary cross-entropy of the extractive task's sentences. The dev score that picks
    best.keras is the ROC AUC of the word probabilities (the largest of each word's pieces')
    on eval.dev_score_sentences dev articles: bottom-up summarization cuts them at an epsilon
    chosen later by ROUGE, so the ranking is what the selector must get right, at every
    threshold; F1 at 0.5 and the best F1 are logged beside it."""

    reads_lowercase = True

    def prepare(self, out: Path):
        config, d = self.config, self.config.data
        self.splits = splits = self.summary_splits("content_selection")
        log.info("content selection: %s articles (word joints: %s)",
                 ", ".join(f"{len(v)} {k}" for k, v in splits.items()), d.word_joints)
        sentences = [s for article in splits["train"].articles for s in split_sentences(article)]
        self.tok = train_tokenizer(config, [s.lower() for s in sentences] if d.lowercase
                                   else sentences, out / "spm")
        self.model_config = transformer_config(config, self.tok, self.tok,
                                               max_source_length=d.max_source_length,
                                               max_target_length=d.max_source_length)
        self.scorer = scorer = self.make_scorer(None)
        self.rows, self.labels, self.arrays = {}, {}, {}
        self.counts = {"empty_skipped": {k: v.skipped_empty for k, v in splits.items()},
                       "articles_cut": {}, "no_copied_word": {}, "copied_word_share": {}}
        for name, split in self.held_splits(splits).items():
            scorer.cut_articles = 0
            rows, labels, self.arrays[name] = self.labelled(split.articles, split.summaries)
            self.rows[name], self.labels[name] = rows, labels
            read = np.concatenate(labels)
            self.counts["articles_cut"][name] = scorer.cut_articles
            self.counts["no_copied_word"][name] = sum(not label.any() for label in labels)
            self.counts["copied_word_share"][name] = round(float(read.mean()), 4)
            log.info("%s: %d of %d articles are cut to %d pieces, %.1f%% of the words read are "
                     "copied (label 1), %d articles have no copied word", name,
                     scorer.cut_articles, len(split), d.max_source_length - 1,
                     100 * read.mean(), self.counts["no_copied_word"][name])
        self.batch_size = max(1, d.tokens_per_batch // d.max_source_length)
        return self.model_config

    def labelled(self, articles, summaries):
        """(the articles' TaggerRows, each word's label (content_labels), the arrays (ids
        (B, longest), targets: each piece its word's label, -1 past the row))."""
        rows = self.scorer.encode_articles(articles)
        labels = [content_labels(a, s, row.words) for a, s, row in
                  zip(articles, summaries, rows, strict=True)]
        ids = self.scorer.batch_ids(rows)
        target = np.full(ids.shape, -1.0, np.float32)
        for i, (row, label) in enumerate(zip(rows, labels, strict=True)):
            target[i, : len(row.ids)] = row.piece_values(label)
        return rows, labels, (ids, target)

    def record_arrays(self, records):
        return self.labelled([a for a, _ in records], [s for _, s in records])[2]

    def make_scorer(self, model) -> WordScorer:
        """The WordScorer of `model` (None: for encoding only) by the run's settings."""
        c = self.model_config

        def run(ids):
            return tf.sigmoid(model(tf.constant(ids), training=False)).numpy()

        return WordScorer(run, self.tok.encode, max_length=c.max_source_length,
                          pad_id=c.pad_id, eos_id=c.eos_id, lowercase=self.config.data.lowercase)

    @staticmethod
    def trim(ids, labels, pad_id: int):
        """A batch cut to its longest row: less padding to encode."""
        length = tf.reduce_max(tf.reduce_sum(tf.cast(tf.not_equal(ids, pad_id), tf.int32), -1))
        return ids[:, :length], labels[:, :length]

    def build_model(self, model_config):
        model = TransformerTagger(model_config)
        model.build()
        return model

    def loss_and_metrics(self, model, replicas: int):
        # Labels 1 and 0 at the words' pieces and -1 elsewhere: the extractive sentences' loss.
        return (ReplicaSentenceMeanLoss() if replicas > 1 else MaskedSentenceCrossEntropy()), []

    def describe(self, model) -> str:
        d = self.config.data
        return (f", articles cut to {d.max_source_length - 1} pieces, batch "
                f"{self.batch_size} articles")

    # -- scores ---------------------------------------------------------------------------

    def scores(self, model, name: str, count: int | None = None) -> dict:
        """selection_scores of split `name`'s first `count` articles (None: all)."""
        rows = self.rows[name][:count]
        probabilities = self.make_scorer(model).score_rows(rows, self.config.eval.batch_size)
        return selection_scores(probabilities, self.labels[name][:count])

    def dev_score(self):
        e = self.config.eval
        if not e.dev_score_sentences:
            return None
        count = min(e.dev_score_sentences, len(self.rows["dev"]))
        return DevScore(lambda model: self.scores(model, "dev", count),
                        {"dev_auc": "ROC AUC of the word probabilities against the copied-"
                                    "span labels over the words read",
                         "dev_score_articles": count},
                        name="auc", label="selection AUC")

    def data_metrics(self):
        return {**self.counts, **super().data_metrics()}

    def evaluate(self, model, out: Path, strategy, metrics: dict) -> None:
        last = final_split("test" in self.splits)
        for name in ("dev", "test"):
            if name not in self.splits:
                continue
            # The first eval.max_sentences articles when set, else the whole split.
            count = len(self.rows[name][: self.config.eval.max_sentences or None])
            scores = self.scores(model, name, count)
            prefix = score_prefix(name, last, metrics)
            metrics.update({f"{prefix}{k}": v for k, v in scores.items()})
            metrics[f"{prefix}articles"] = count
            print(f"{name}: {format_scores(scores)} ({count} articles)")
        self.show(model, last)

    def show(self, model, name: str) -> None:
        """A few articles' first words, those the model selects (p >= 0.5) in [brackets],
        beside their summaries."""
        split = self.splits[name]
        count = self.config.eval.samples
        probabilities = self.make_scorer(model).score_rows(self.rows[name][:count])
        for article, summary, p in zip(split.articles, split.summaries, probabilities,
                                       strict=False):
            shown = [f"[{w}]" if q >= SELECTION_THRESHOLD else w
                     for w, q in zip(words(article)[:60], p, strict=False)]
            print(f"  IN   {' '.join(shown)} ...\n  REF  {summary}")

    # -- train.evaluate -------------------------------------------------------------------

    evaluate_options = frozenset({"--ref", "--tsv"})

    def prepare_sources(self, sources):
        return [word_joints(text, self.config.data.word_joints) for text in sources]

    def use_run(self, run, model, batch_size=None):
        self.tok = load_run_tokenizers(run)[0]
        self.model_config = model.config
        if batch_size:
            self.config.eval.batch_size = batch_size

    def evaluate_file(self, model, lines, references, name):
        """The selection scores of every non-empty line's words against the copied-span
        labels of its reference."""
        scored = [i for i, text in enumerate(lines) if text.strip()]
        result = FileScores(sources=[lines[i].strip() for i in scored], scored=scored)
        if len(scored) < len(lines):
            result.notes.append(f"skipped {len(lines) - len(scored)} empty lines")
        if not scored or references is None:
            return result
        scorer = self.make_scorer(model)
        rows = scorer.encode_articles(result.sources)
        labels = [content_labels(a, references[i], row.words)
                  for a, i, row in zip(result.sources, scored, rows, strict=True)]
        scores = selection_scores(scorer.score_rows(rows, self.config.eval.batch_size), labels)
        result.scores = scores
        result.details = {"articles": len(scored), "articles_cut": scorer.cut_articles}
        result.printed = [f"{name}: {format_scores(scores)} ({len(scored)} articles)"]
        return result


def format_scores(scores: dict) -> str:
    return (f"selection AUC {scores['auc']:.4f}, F1 {scores['f1']:.2f} (P "
            f"{scores['word_precision']:.2f}, R {scores['word_recall']:.2f} at "
            f"{SELECTION_THRESHOLD}), best F1 {scores['best_f1']:.2f} at "
            f"{scores['best_f1_threshold']:.3f}, {scores['words']} words")
