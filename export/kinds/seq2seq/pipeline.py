"""A bottom-up summarizer's export (keras_transformer.text.bottom_up): the copy model's export
with its selector, an extractive summarizer's export, in the sub-directory `selector/`, and
the manifest's `selector` block naming it with epsilon. Its runner reads every article
restricted to the sentences the selector keeps, in any runtime of both."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from keras_transformer.decoding import SearchSettings
from keras_transformer.text.bottom_up import (
    BottomUpSummarizer,
    check_epsilon,
    check_source,
    check_top_k,
)

from ...common import MANIFEST, ExportError, Manifest

SELECTOR_DIR = "selector"


def run_selector(run_dir: Path) -> tuple[Path, dict] | None:
    """(the selector run, its rule: the manifest's epsilon, top_k and source) of a
    summarization run's config (eval.selector), or None when it names none."""
    from ...module import run_config

    evaluation = run_config(run_dir).get("eval")
    if not isinstance(evaluation, dict) or not evaluation.get("selector"):
        return None
    return Path(str(evaluation["selector"])), {
        "epsilon": check_epsilon(evaluation.get("selector_epsilon", 0.5)),
        "top_k": check_top_k(evaluation.get("selector_top_k", 0)),
        "source": check_source(evaluation.get("selector_source", "mask"))}


def export_selector(out: Path, run_dir: Path, options, versions: dict
                    ) -> tuple[dict, list[str]]:
    """The run's selector exported into out/selector/ with the same formats and variants:
    (the manifest's `selector` block, the files it holds relative to `out`); nothing when
    the run has no selector."""
    from ...module import load_trained
    from ..extractor import ExtractorKind

    found = run_selector(run_dir)
    if found is None:
        return {}, []
    selector_run, rule = found
    try:
        trained = load_trained(selector_run)
    except FileNotFoundError as err:
        raise ValueError(f"the run's eval.selector: {err}") from None
    kind = ExtractorKind()
    if not kind.accepts(trained):
        raise ValueError(f"the run's eval.selector {selector_run} holds a "
                         f"{type(trained).__name__}; a selector is an extractive "
                         f"summarization run")
    sub = out / SELECTOR_DIR
    sub.mkdir()
    manifest = kind.export_into(sub, selector_run, trained,
                                dataclasses.replace(options, with_attention=False), versions)
    files = [f"{SELECTOR_DIR}/{name}" for name in (MANIFEST, *manifest["files"])]
    return {"selector": {"export": SELECTOR_DIR, **rule}}, files


def selector_rule(manifest: Manifest) -> dict:
    """The manifest's selection rule: epsilon, top_k and source (an export that records only
    epsilon selects by it and masks)."""
    block = manifest["selector"]
    return {"epsilon": block["epsilon"], "top_k": block.get("top_k", 0),
            "source": block.get("source", "mask")}


class PipelineTranslator:
    """The copy model's Translator (export.runtime.base) whose `translate` reads each
    article restricted to the sentences the selector (an extractor export's Summarizer)
    keeps, by the rule of text/bottom_up.py (epsilon, top_k, source); everything else is the
    Translator's."""

    def __init__(self, translator, selector, epsilon: float, top_k: int = 0,
                 source: str = "mask"):
        self.translator, self.selector = translator, selector
        self.epsilon = check_epsilon(epsilon)
        self.top_k, self.source = check_top_k(top_k), check_source(source)

    def __getattr__(self, name):
        return getattr(self.translator, name)

    def summarizer(self, epsilon: float | None = None,
                   batch_size: int = 32) -> BottomUpSummarizer:
        """A BottomUpSummarizer over both runtimes, by the export's rule; a given epsilon
        selects by that threshold instead (top_k 0)."""
        scorer, prepare = self.selector.scorer, self.selector.prepare
        rule = {"epsilon": self.epsilon, "top_k": self.top_k} if epsilon is None else \
            {"epsilon": epsilon, "top_k": 0}
        return BottomUpSummarizer(lambda articles: scorer.score(prepare(articles), batch_size),
                                  self.translator, source=self.source, **rule)

    def translate(self, sentences: Sequence[str], settings: SearchSettings = SearchSettings(),
                  *, batch_size: int = 64, truncate: bool = True, allow_empty: bool = True,
                  progress=None, epsilon: float | None = None) -> list[str]:
        """Articles -> summaries in input order, blank ones "" (or, without allow_empty, a
        ValueError naming the line); without `truncate`, an article longer than the copy
        model reads is a ValueError naming its line."""
        if isinstance(sentences, str):
            raise TypeError("translate expects a list of articles, not a single str")
        t = self.translator
        texts = list(sentences)
        keep = [i for i, text in enumerate(texts) if text.strip()]
        if not allow_empty and len(keep) < len(texts):
            number = next(i for i, text in enumerate(texts, start=1) if not text.strip())
            raise ValueError(f"line {number} is empty or only whitespace; give every line an "
                             f"article to summarize")
        if not truncate:
            for i, ids in zip(keep, t.pieces([texts[i] for i in keep]), strict=True):
                if len(ids) + 1 > t.max_source_length:
                    raise ValueError(f"line {i + 1} has {len(ids) + 1} pieces with EOS but the "
                                     f"model reads {t.max_source_length}; drop --no-truncate "
                                     f"to summarize its first ones")
        if progress is not None and len(keep) < len(texts):
            progress.update(len(texts) - len(keep))
        outputs = [""] * len(texts)
        summaries = self.summarizer(epsilon).summarize(
            [texts[i] for i in keep], settings, batch_size=batch_size, progress=progress)
        for i, summary in zip(keep, summaries, strict=True):
            outputs[i] = summary
        return outputs


def open_pipeline(manifest: Manifest, translator, runtime: str, variant: str, run_dir,
                  open_runner) -> PipelineTranslator:
    """The copy model's `translator` with its selector, whose runner `open_runner`
    (export.kinds') opens in the same runtime and variant, by the manifest's rule."""
    sub, sub_run = selector_of(manifest, runtime, run_dir)
    return PipelineTranslator(translator, open_runner(sub, runtime, variant, sub_run),
                              **selector_rule(manifest))


def selector_of(manifest: Manifest, runtime: str, run_dir) -> tuple[Manifest, Path | None]:
    """The pipeline's selector: its sub-export's manifest and, for the keras runtime, its
    training run (the one the copy run's config names)."""
    from ...runtime.base import training_run

    sub = Manifest(manifest.root / manifest["selector"]["export"])
    if sub.kind != "extractor":
        raise ExportError(f"{sub.root} holds a {sub.kind}, not the extractive summarizer a "
                          f"selector is; re-export the run")
    if runtime != "keras":
        return sub, None
    found = run_selector(training_run(manifest, run_dir))
    if found is None:
        raise ExportError(f"the keras runtime of {manifest.root} needs the run's selector, "
                          f"and the run's config names none (eval.selector)")
    return sub, found[0]


def check_pipeline(run, out):
    """export.parity's check of a pipeline's export: the selector's sentence probabilities
    of every runtime against keras', and every runtime's greedy summaries of both stages
    together identical to keras' (the sentences run.sentences of --src)."""
    import time

    import numpy as np

    from ...parity_check import CheckResult
    from ...runtime.base import Translator

    manifest = run.manifest
    articles = [a for a in run.sources[: run.sentences] if a.strip()]
    settings = run.state["search"].replace(beam_size=1)
    out(f"\n6. the pipeline (selector at epsilon {manifest['selector']['epsilon']}, then the "
        f"copy model): greedy summaries of {len(articles)} articles")
    summaries, scores = {}, {}
    for name, backend in run.backends.items():
        start = time.perf_counter()
        pipeline = open_pipeline(manifest, Translator(manifest, backend), name, "float32",
                                 run.run_dir, run.open)
        scores[name] = [s for _, s in pipeline.selector.scorer.score(
            pipeline.selector.prepare(articles))]
        summaries[name] = pipeline.translate(articles, settings)
        out(f"   {name:<11} {time.perf_counter() - start:6.1f} s")
    ok = True
    for name in [n for n in summaries if n != "keras"]:
        worst = max(float(np.max(np.abs(a - b))) for a, b in zip(scores["keras"], scores[name],
                                                                 strict=True))
        same = summaries[name] == summaries["keras"]
        ok &= same and worst <= 1e-4
        out(f"   keras vs {name:<11} sentence probabilities max|Δ| {worst:.1e}, summaries "
            f"{'identical' if same else 'DIFFER'}")
    return CheckResult("pipeline", ok)
