"""export.parity's checks of a masked language model's export (kind "masked_lm"): the logits
at [MASK] positions and their top-k pieces against the Keras model, and each quantized
variant's probabilities and best piece against its format's float32. The inputs are the
classifier's random id sequences (export/classifier_parity.py) with some pieces replaced by
the mask id, as fill-mask's lines hold them."""

from __future__ import annotations

import time

import numpy as np

from . import classifier_parity
from .classifier_parity import QUANTIZED_AGREEMENT, QUANTIZED_MAX_DELTA, TOLERANCE
from .common import variant_bytes
from .parity_check import CheckResult, ParityRun
from .runtime.masked_lm import top_k

TOP_K = 5  # the pieces compared per [MASK] (fill-mask's default --top-k)
MASK_RATE = 0.15  # share of each row's pieces replaced by the mask id (at least one)


def with_masks(ids: np.ndarray, mask_id: int, pad_id: int, eos_id: int,
               seed: int) -> np.ndarray:
    """`ids` with MASK_RATE of each row's pieces (never PAD or EOS), and at least one, replaced
    by the mask id."""
    rng = np.random.default_rng(seed)
    out = ids.copy()
    for row in out:
        pieces = np.flatnonzero((row != pad_id) & (row != eos_id))
        if len(pieces):
            count = max(1, int(round(MASK_RATE * len(pieces))))
            row[rng.choice(pieces, size=count, replace=False)] = mask_id
    return out


def prepare(run: ParityRun, out) -> None:
    """The classifier's formats, variants and random batches, masked."""
    classifier_parity.prepare(run, out)
    manifest = run.manifest
    ids = manifest.special_ids
    run.state["inputs"] = [with_masks(batch, manifest["mask"]["id"], ids["pad"], ids["eos"],
                                      seed=100 + n)
                           for n, batch in enumerate(run.state["inputs"])]


def mask_logits(runtime, inputs: list[np.ndarray], mask_id: int) -> np.ndarray:
    """(N, V) float32 logits of every [MASK] position of the batches, in order."""
    return np.concatenate([np.asarray(runtime(ids), np.float32)[ids == mask_id]
                           for ids in inputs])


def same_top_k(reference: np.ndarray, got: np.ndarray, k: int, tolerance: float) -> float:
    """Share of rows whose top-k pieces by `got` are the reference's, in order: the
    reference's logits of got's k best equal its own k best within `tolerance` (so two pieces
    that tie within it may swap)."""
    best = top_k(reference, k)[0]
    chosen = top_k(got, k)[0]
    ranked = np.take_along_axis(reference, best, -1)
    theirs = np.take_along_axis(reference, chosen, -1)
    return float(np.mean(np.all(np.abs(ranked - theirs) <= tolerance, axis=-1)))


def softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits.astype(np.float64) - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


def check_logits(run: ParityRun, out) -> CheckResult:
    """Check 1: every float32 runtime's logits at the [MASK]s, and their top-k, against
    keras."""
    inputs, mask_id = run.state["inputs"], run.manifest["mask"]["id"]
    masks = sum(int(np.sum(ids == mask_id)) for ids in inputs)
    ok = True
    out(f"1. logits at {masks} [MASK] positions of {sum(map(len, inputs))} random id "
        f"sequences against keras (float32: max|Δ| <= {TOLERANCE:g} and the same top-{TOP_K} "
        f"pieces)")
    results = run.state["logits"] = {}
    for name in ("keras", *run.state["present"]):
        start = time.perf_counter()
        results[name] = mask_logits(run.load(name), inputs, mask_id)
        seconds = time.perf_counter() - start
        if name == "keras":
            out(f"   {name:<11} {seconds:6.1f} s")
            continue
        reference, got = results["keras"], results[name]
        if got.shape != reference.shape:
            delta, agree = float("inf"), 0.0
        else:
            delta = float(np.max(np.abs(got.astype(np.float64) - reference)))
            agree = same_top_k(reference, got, TOP_K, TOLERANCE)
        passed = delta <= TOLERANCE and agree == 1.0
        ok &= passed
        out(f"   {name:<11} {seconds:6.1f} s  max|Δ| {delta:.2e}  top-{TOP_K} identical "
            f"{agree:7.2%}  {'ok' if passed else 'FAIL'}")
    return CheckResult("logits", ok)


def check_quantized(run: ParityRun, out) -> CheckResult:
    """Check 2: each quantized variant's probabilities at the [MASK]s against its format's
    float32 (the classifier's bounds: max|Δ| and agreement on the best piece)."""
    manifest, quantized, ok = run.manifest, run.state["quantized"], True
    if quantized:
        out(f"\n2. quantized variants against their format's float32 at the [MASK]s (max|Δ| of "
            f"the probabilities <= {QUANTIZED_MAX_DELTA:g}, best-piece agreement >= "
            f"{QUANTIZED_AGREEMENT:.0%})")
    for fmt, variant in quantized:
        got = mask_logits(run.load(fmt, variant), run.state["inputs"], manifest["mask"]["id"])
        delta, agree = classifier_parity.compare(softmax(run.state["logits"][fmt]),
                                                 softmax(got))
        passed = delta <= QUANTIZED_MAX_DELTA and agree >= QUANTIZED_AGREEMENT
        ok &= passed
        size = variant_bytes(manifest.data, manifest.format_files(fmt, variant))
        out(f"   {fmt:<7} {variant:<8} {size / 1e6:7.2f} MB  max|Δ| {delta:.2e}  best-piece "
            f"agreement {agree:7.2%}  {'ok' if passed else 'FAIL'}")
    return CheckResult("quantized", ok)


CHECKS = (check_logits, check_quantized)
