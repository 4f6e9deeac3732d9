"""Summarization: articles and their summaries (VNDS), an encoder-decoder Transformer, ROUGE
beside the Lead-1/2/3 baselines and the greedy oracle."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from keras_transformer.command_line import CommandError
from keras_transformer.decoding import SearchSettings
from keras_transformer.file_safety import atomic_write_text
from keras_transformer.progress import progress_bar
from keras_transformer.text.bottom_up import BottomUpSummarizer, chosen_sentences
from keras_transformer.text.buckets import bucket_boundaries_for
from keras_transformer.text.extractive import summary
from keras_transformer.text.rouge import ROUGE_TYPES, format_rouge, rouge
from keras_transformer.text.summary_stats import format_statistics, summary_statistics
from keras_transformer.translator import keras_translator, translate

from ..config import ConfigError, model_preview
from ..data import split_sentences, word_joints
from ..scoring import lead_baselines
from ..tasks.base import DevScore, final_split, score_prefix, transformer_config
from ..tasks.seq2seq import Seq2SeqTask
from ..tokenizers import build_tokenizers

log = logging.getLogger("train")


# The tasks whose run may be eval.selector, and what each gives a probability
# (BottomUpSummarizer.level).
SELECTOR_TASKS = {"extractive_summarization": "sentence", "content_selection": "word"}


def count_longer(texts, tokenizer, max_length: int) -> int:
    """How many texts have more than max_length - 1 pieces (one place is EOS, or BOS): those
    the training pipeline and the search cut to their first max_length - 1 pieces."""
    return sum(len(ids) + 1 > max_length for ids in tokenizer.encode(list(texts)))


class SummarizationTask(Seq2SeqTask):
    """data.train_source / dev_source [/ test_source]: TSV files with article and summary
    columns (train.data.load_summaries). The source is the article's first
    data.max_source_length - 1 pieces, the target the summary's first
    data.max_target_length - 1; scored with ROUGE (train.scoring.rouge). With eval.selector
    a copy model reads only the sentences the selector keeps (text/bottom_up.py)."""

    selector = None  # (the selector run's task, its model), loaded on first use
    selection_stats: dict | None = None  # the last summarize's, with a selector

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        if config.eval.selector and not getattr(model_preview(config), "copy_attention",
                                                False):
            raise ConfigError("eval.selector restricts a copy model's attention: set "
                              "model.overrides.copy_attention: true (or leave eval.selector "
                              "empty)")
        if config.data.extract_sources and not (config.eval.selector
                                                and config.eval.selector_source == "extract"):
            raise ConfigError("data.extract_sources trains the copy model on the sentences a "
                              "selector extracts: set eval.selector (an extractive run) and "
                              "eval.selector_source: extract, or data.extract_sources: false")

    def load_selector(self) -> None:
        """Load eval.selector's run once; a ConfigError naming it when it is not a finished
        extractive_summarization run (sentence probabilities) or content_selection run (word
        probabilities, which select by epsilon and mask only)."""
        from ..tasks import load_run, load_run_config

        if self.selector is not None:
            return
        e = self.config.eval
        config_file = Path(e.selector) / "config.yaml"
        try:
            # The run's task first: a run of another task is refused before its model loads.
            kind = load_run_config(config_file).task if config_file.is_file() else None
            if kind is not None and kind not in SELECTOR_TASKS:
                raise ValueError(f"{e.selector} is a {kind} run; give a run of task "
                                 f"{' or '.join(SELECTOR_TASKS)}")
            task, model = load_run(e.selector, kind)
        except (ValueError, CommandError) as err:
            raise ConfigError(f"eval.selector: {err}") from None
        if SELECTOR_TASKS[task.config.task] == "word" and (e.selector_top_k
                                                          or e.selector_source != "mask"):
            raise ConfigError(f"eval.selector: {e.selector} is a content_selection run, which "
                              f"selects words by epsilon: set eval.selector_top_k: 0 and "
                              f"eval.selector_source: mask")
        self.selector = task, model

    def use_run(self, run, model, batch_size=None):
        super().use_run(run, model, batch_size)
        if self.config.eval.selector:
            self.load_selector()

    def bottom_up(self, model) -> BottomUpSummarizer:
        """The BottomUpSummarizer of eval.selector over `model`."""
        e = self.config.eval
        self.load_selector()
        task, selector_model = self.selector
        scorer = task.make_scorer(selector_model)
        translator = keras_translator(model, self.source_tok, self.target_tok)
        # The selector reads articles as its own run's data did (its word joints), as the
        # export's pipeline does (export/kinds/seq2seq/pipeline.py).
        return BottomUpSummarizer(
            lambda articles: scorer.score(task.prepare_sources(articles), e.batch_size),
            translator, e.selector_epsilon, top_k=e.selector_top_k, source=e.selector_source,
            level=SELECTOR_TASKS[task.config.task])

    def extracted_sources(self, out: Path) -> dict[str, list[str]]:
        """data.extract_sources: {train, dev: each article's extracted source text}. Training
        reads the greedy oracle's sentences for a share data.oracle_share of its articles
        (drawn once by data.seed) and the selector's picks by eval's rule for the rest; dev
        reads the selector's picks, as the pipeline will. The oracle is the selector run's
        when it holds these articles (else computed into <out>/oracle.json)."""
        from .extractive import oracle_labels

        d, e = self.config.data, self.config.eval
        task, selector_model = self.selector
        scorer = task.make_scorer(selector_model)
        names = ("train", "dev")
        oracles = oracle_labels(out, {n: self.splits[n] for n in names},
                                task.config.data.article_sentences,
                                also=Path(e.selector))
        draw = np.random.default_rng(d.seed).random(len(self.splits["train"])) < d.oracle_share
        sources = {}
        for name in names:
            articles = self.splits[name].articles
            log.info("%s: the selector reads %d articles", name, len(articles))
            scored = scorer.score(task.prepare_sources(articles), e.batch_size)
            texts = []
            for row, (article, (_, scores)) in enumerate(zip(articles, scored, strict=True)):
                sentences = split_sentences(article)
                oracle = oracles[name][row]
                chosen = oracle if name == "train" and draw[row] and oracle else \
                    chosen_sentences(scores, e.selector_epsilon, e.selector_top_k)
                texts.append(summary(sentences, chosen) if len(chosen) else article)
            sources[name] = texts
        log.info("extract then abstract: %d of %d training sources are the oracle's "
                 "sentences, the rest and dev the selector's", int(
                     sum(bool(o) and t for o, t in zip(oracles["train"], draw, strict=True))),
                 len(draw))
        return sources

    def prepare(self, out: Path):
        config, d = self.config, self.config.data
        if config.eval.selector:  # a missing selector fails now, not after training
            self.load_selector()
        self.splits = splits = self.summary_splits("summarization")
        self.sources = {name: split.articles for name, split in splits.items()}
        if d.extract_sources:
            self.sources.update(self.extracted_sources(out))
        train = splits["train"]
        log.info("summarization: %s articles (word joints: %s)",
                 ", ".join(f"{len(v)} {k}" for k, v in splits.items()), d.word_joints)
        # SentencePiece trains on sentences: a whole article is longer than its 4,192-byte
        # sentence limit and would be left out of training.
        sentences = [s for article in train.articles for s in split_sentences(article)]
        self.source_tok, self.target_tok = build_tokenizers(config, sentences, train.summaries,
                                                            out)
        self.counts = {"empty_skipped": {k: v.skipped_empty for k, v in splits.items()},
                       "articles_truncated": {}, "summaries_truncated": {}}
        for name, split in splits.items():
            cut = count_longer(self.sources[name], self.source_tok, d.max_source_length)
            self.counts["articles_truncated"][name] = cut
            message = (f"{name}: {cut} of {len(split)} articles are cut to their first "
                       f"{d.max_source_length - 1} pieces")
            if name != "test":  # test summaries are references only, never cut
                cut = count_longer(split.summaries, self.target_tok, d.max_target_length)
                self.counts["summaries_truncated"][name] = cut
                message += f", {cut} summaries to {d.max_target_length - 1}"
            log.info("%s (data.max_source_length / max_target_length, with EOS)", message)
        self.model_config = transformer_config(config, self.source_tok, self.target_tok,
                                               max_source_length=d.max_source_length,
                                               max_target_length=d.max_target_length)
        return self.model_config

    def datasets(self):
        d, splits = self.config.data, self.splits
        dev = (self.sources["dev"], splits["dev"].summaries)
        pipeline = dict(
            max_source_length=d.max_source_length, max_target_length=d.max_target_length,
            tokens_per_batch=d.tokens_per_batch,
            bucket_boundaries=bucket_boundaries_for(d.max_source_length, d.num_buckets),
            drop_long=False, fixed_target_length=True)
        if self.stream is not None:
            return self.record_pair_datasets(dev, **pipeline)
        return self.pair_datasets((self.sources["train"], splits["train"].summaries), dev,
                                  **pipeline)

    def describe(self, model) -> str:
        c = model.config
        return (f", articles cut to {c.max_source_length - 1} pieces, summaries to "
                f"{c.max_target_length - 1}")

    def summarize(self, model, articles, settings: SearchSettings,
                  progress=None) -> list[str]:
        """The model's summaries of `articles` (each cut to the model's max_source_length),
        decoded by `settings`; with eval.selector, of the sentences it keeps."""
        if not self.config.eval.selector:
            return translate(model, self.source_tok, self.target_tok, articles, settings,
                             batch_size=self.config.eval.batch_size, truncate=True,
                             progress=progress)
        summarizer = self.bottom_up(model)
        summaries = summarizer.summarize(articles, settings,
                                         batch_size=self.config.eval.batch_size,
                                         progress=progress)
        self.selection_stats = {"selector": self.config.eval.selector,
                                **summarizer.describe(), **summarizer.stats.to_dict()}
        return summaries

    def dev_score(self):
        e = self.config.eval
        if not e.dev_score_sentences:
            return None
        dev = self.splits["dev"]
        articles = dev.articles[: e.dev_score_sentences]
        references = dev.summaries[: e.dev_score_sentences]
        settings = self.search_settings(beam_size=e.dev_score_beam)

        def score(model):
            scores = rouge(self.summarize(model, articles, settings), references)
            parts = {k: scores[k] for k in ROUGE_TYPES}
            return {"rouge": float(np.mean(list(parts.values()))), **parts}

        return DevScore(score, {"dev_rouge": "mean of ROUGE-1, ROUGE-2 and ROUGE-L F1",
                                "dev_score_articles": len(articles)},
                        name="rouge", label="ROUGE (mean of 1, 2, L)")

    def data_metrics(self):
        return {**self.counts, **super().data_metrics()}

    def evaluate(self, model, out: Path, strategy, metrics: dict) -> None:
        e, splits = self.config.eval, self.splits
        last = final_split("test" in splits)
        for name in ("dev", "test"):
            if name not in splits:
                continue
            articles, references = splits[name].articles, splits[name].summaries
            if e.max_sentences:
                articles, references = articles[: e.max_sentences], references[: e.max_sentences]
            with progress_bar(total=len(articles), desc="decoding", unit="article",
                              leave=False) as bar:
                hypotheses = self.summarize(model, articles, self.search_settings(),
                                            progress=bar)
            # The articles too, so that train.evaluate and export.parity can take them back.
            for suffix, lines in (("src", articles), ("hyp", hypotheses), ("ref", references)):
                atomic_write_text(out / f"{name}.{suffix}", "".join(f"{x}\n" for x in lines))
            scores, lines = self.score(hypotheses, references, articles)
            prefix = score_prefix(name, last, metrics)
            metrics.update({f"{prefix}{k}": v for k, v in scores.items()})
            metrics[f"{prefix}articles"] = len(articles)
            for line in lines:
                print(f"{name}: {line}")
            if name == last:
                for article, hypothesis, reference in list(zip(
                        articles, hypotheses, references, strict=True))[: e.samples]:
                    shown = article if len(article) <= 300 else article[:300] + " ..."
                    print(f"  ARTICLE {shown}\n  OUT     {hypothesis}\n  REF     {reference}")

    evaluate_options = Seq2SeqTask.evaluate_options | {"--tsv"}

    def prepare_sources(self, sources):
        return [word_joints(text, self.config.data.word_joints) for text in sources]

    def generate(self, model, sources, progress=None):
        return self.summarize(model, sources, self.search_settings(), progress=progress)

    def score(self, hypotheses, references, sources):
        scores = rouge(hypotheses, references)
        leads = lead_baselines(sources, references)
        s = self.search_settings()
        lines = [f"model {format_rouge(scores)}  ({len(hypotheses)} articles, beam "
                 f"{s.beam_size}, alpha {s.alpha}, no_repeat_ngram_size "
                 f"{s.no_repeat_ngram_size}, min_length {s.min_length})"]
        lines += [f"{name:5s} {format_rouge(values)}" for name, values in leads.items()]
        lines.append(scores["rouge_signature"])
        stats = {"summary_stats": summary_statistics(hypotheses, sources),
                 "reference_stats": summary_statistics(references, sources)}
        lines += [f"{who:9s} {format_statistics(stats[key])}"
                  for who, key in (("model", "summary_stats"), ("reference", "reference_stats"))]
        if self.selection_stats is not None:  # the summaries of the last summarize
            stats["selection"] = self.selection_stats
            s = self.selection_stats
            rule = f"the {s['top_k']} best sentences" if s.get("top_k") else \
                f"epsilon {s['epsilon']}"
            lines.insert(1, f"selection: {rule}, {s.get('source', 'mask')}ed: "
                         f"{s['kept_share']:.0%} of the source pieces kept "
                         f"({s['unselected_articles']} of {s['articles']} articles with "
                         f"nothing selected, read whole; {s.get('cut_articles', 0)} cut to "
                         f"the copy model's max_source_length)")
        return {**scores, **leads, **stats}, lines

