"""export.parity's checks of an extractive summarizer's export (kind "extractor"): sentence probabilities against the Keras model (max|Δ| over
real sentences) and the sentences each runtime's selection picks, on random sentence grids
and, given --src, on real articles (with --ref, each runtime's ROUGE too). Each check is a
function (ParityRun, out) -> CheckResult that prints its lines with `out`."""

from __future__ import annotations

import numpy as np

from keras_transformer.text.extractive import Selection, select

from ...common import Manifest, variant_bytes
from ...formats import KERAS
from ...parity_check import CheckResult, ParityRun
from ..encoder_only.parity import QUANTIZED_AGREEMENT, TOLERANCE, against_keras, check_formats
from .runtime import Summarizer


def random_grids(manifest: Manifest, articles: int, seed: int = 0) -> list[np.ndarray]:
    """Batches of (B, K, S) int32 sentence grids as `extract` takes them: random pieces + EOS,
    right-padded with PAD, random sentence counts and lengths (the first article of a batch
    fills K and S)."""
    rng = np.random.default_rng(seed)
    ids = manifest.special_ids
    k, s = manifest["max_sentences"], manifest["max_source_length"]
    shapes = [(1, 1, 5), (3, min(k, 4), min(s, 9))]
    shapes += [(min(16, articles - start), k, s) for start in range(0, articles, 16)]
    out = []
    for batch, sentences, length in shapes:
        grid = np.full((batch, sentences, length), ids["pad"], np.int32)
        for b in range(batch):
            count = sentences if b == 0 else int(rng.integers(1, sentences + 1))
            for row in range(count):
                n = length if b == 0 and row == 0 else int(rng.integers(1, length + 1))
                grid[b, row, : n - 1] = rng.integers(4, manifest["vocab"]["source_size"], n - 1)
                grid[b, row, n - 1] = ids["eos"]
        out.append(grid)
    return out


def real_rows(grids: list[np.ndarray], pad_id: int) -> list[np.ndarray]:
    """The (B, K) mask of the sentences that hold a piece, per grid."""
    return [np.any(g != pad_id, axis=-1) for g in grids]


def prepare(run: ParityRun, out) -> None:
    """The formats to check, the random grids, and the keras runtime every check compares
    with."""
    manifest = run.manifest
    check_formats(run, out)
    grids = random_grids(manifest, run.sentences)
    run.state.update(grids=grids,
                     masks=real_rows(grids, manifest.special_ids["pad"]),
                     selection=Selection.from_dict(manifest["selection"]),
                     loaded={KERAS: run.load(KERAS)})


def check_grids(run: ParityRun, out) -> CheckResult:
    """Check 1: every float32 runtime's probabilities of real sentences, and the sentences
    its selection chooses, against keras on random grids."""
    manifest, grids, masks = run.manifest, run.state["grids"], run.state["masks"]
    selection, loaded = run.state["selection"], run.state["loaded"]
    # Stand-in sentences for the selection: distinct words, as many syllables as pieces.
    words = [[f"s{row}w{j}" for j in range(manifest["max_source_length"])]
             for row in range(manifest["max_sentences"])]

    def picks(probabilities: list[np.ndarray]) -> list[list[int]]:
        chosen = []
        for p, grid, mask in zip(probabilities, grids, masks, strict=True):
            lengths = np.sum(grid != manifest.special_ids["pad"], axis=-1)
            for b in range(len(grid)):
                count = int(mask[b].sum())
                texts = [" ".join(words[r][: lengths[b, r]]) for r in range(count)]
                chosen.append(select(p[b, :count], texts, selection))
        return chosen

    out(f"1. sentence probabilities against keras on {sum(len(g) for g in grids)} random "
        f"articles (float32: max|Δ| <= {TOLERANCE:g} over real sentences, and the same "
        f"sentences chosen by {selection.describe()})")

    def outputs(name: str) -> list[np.ndarray]:
        if name not in loaded:
            loaded[name] = run.load(name)
        return [np.asarray(loaded[name](g), np.float32) for g in grids]

    def compare(reference, got) -> tuple[float, float]:
        delta = max(float(np.max(np.abs(a - b)[mask])) for a, b, mask in
                    zip(got, reference, masks, strict=True))
        same = np.mean([a == b for a, b in zip(picks(got), picks(reference), strict=True)])
        return delta, float(same)

    _, ok = against_keras(run, out, outputs, compare, "same sentences")
    return CheckResult("grids", ok)


def check_articles(run: ParityRun, out) -> CheckResult:
    """Check 2, given --src: every runtime's and variant's probabilities and choices on real
    articles against keras; with --ref, check 3, each one's ROUGE (for information)."""
    manifest, sources, loaded = run.manifest, run.sources, run.state["loaded"]
    quantized = run.state["quantized"]
    variants = [(name, "float32") for name in ("keras", *run.state["present"])] + quantized
    ok = True
    if sources:
        out(f"\n2. {len(sources)} articles of --src: each runtime's sentence probabilities "
            f"and chosen sentences against keras (float32: max|Δ| <= {TOLERANCE:g} and every "
            f"choice the same; quantized: the same choice in >= {QUANTIZED_AGREEMENT:.0%})")
        extracted = {}
        for fmt, variant in variants:
            summarizer = Summarizer(manifest, loaded[fmt] if variant == "float32" else
                                    run.load(fmt, variant))
            extracted[fmt, variant] = summarizer.extract(sources)
            if fmt == "keras":
                continue
            reference = extracted["keras", "float32"]
            got = extracted[fmt, variant]
            delta = max(float(np.max(np.abs(a.scores - b.scores))) for a, b in
                        zip(got, reference, strict=True))
            same = float(np.mean([a.chosen == b.chosen for a, b in
                                  zip(got, reference, strict=True)]))
            passed = (delta <= TOLERANCE and same == 1.0 if variant == "float32" else
                      same >= QUANTIZED_AGREEMENT)
            ok &= passed
            size = variant_bytes(manifest.data, manifest.format_files(fmt, variant))
            out(f"   {fmt:<11} {variant:<8} {size / 1e6:7.2f} MB  max|Δ| {delta:.2e}  same "
                f"sentences {same:7.2%}  {'ok' if passed else 'FAIL'}")
        if run.references:
            from keras_transformer.text.rouge import format_rouge, rouge

            out(f"\n3. ROUGE against --ref ({run.state['selection'].describe()})")
            for (fmt, variant), extractions in extracted.items():
                out(f"   {fmt:<11} {variant:<8} "
                    f"{format_rouge(rouge([e.summary for e in extractions], run.references))}")
    elif quantized:
        out("\nquantized variants are checked on real articles: give --src (e.g. the run's "
            "test.src)")
    return CheckResult("articles", ok)


CHECKS = (check_grids, check_articles)
