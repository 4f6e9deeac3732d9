"""export.parity's checks of a masked language model's export (kind "masked_lm"): the logits
at [MASK] positions and their top-k pieces against the Keras model, and each quantized
variant's probabilities and best piece against its format's float32. The inputs are the
encoder-only kinds' random id sequences (encoder_only/parity.py) with some pieces replaced by
the mask id, as fill-mask's lines hold them."""

from __future__ import annotations

import numpy as np

from ...parity_check import CheckResult, ParityRun
from ..encoder_only import parity as encoder_parity
from ..encoder_only.parity import QUANTIZED_AGREEMENT, QUANTIZED_MAX_DELTA, TOLERANCE
from .runtime import top_k

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
    """The formats, variants and random batches of every encoder-only kind, masked."""
    encoder_parity.prepare(run, out)
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
    out(f"1. logits at {masks} [MASK] positions of {sum(map(len, inputs))} random id "
        f"sequences against keras (float32: max|Δ| <= {TOLERANCE:g} and the same top-{TOP_K} "
        f"pieces)")

    def compare_logits(reference, got) -> tuple[float, float]:
        if got.shape != reference.shape:
            return float("inf"), 0.0
        return (float(np.max(np.abs(got.astype(np.float64) - reference))),
                same_top_k(reference, got, TOP_K, TOLERANCE))

    run.state["logits"], ok = encoder_parity.against_keras(
        run, out, lambda name: mask_logits(run.load(name), inputs, mask_id), compare_logits,
        f"top-{TOP_K} identical")
    return CheckResult("logits", ok)


def check_quantized(run: ParityRun, out) -> CheckResult:
    """Check 2: each quantized variant's probabilities at the [MASK]s against its format's
    float32 (the classifier's bounds: max|Δ| and agreement on the best piece)."""
    manifest = run.manifest
    if run.state["quantized"]:
        out(f"\n2. quantized variants against their format's float32 at the [MASK]s (max|Δ| of "
            f"the probabilities <= {QUANTIZED_MAX_DELTA:g}, best-piece agreement >= "
            f"{QUANTIZED_AGREEMENT:.0%})")
    float32 = {fmt: softmax(run.state["logits"][fmt]) for fmt, _ in run.state["quantized"]}
    ok = encoder_parity.quantized_against_float32(
        run, out, float32,
        lambda fmt, variant: softmax(mask_logits(run.load(fmt, variant), run.state["inputs"],
                                                 manifest["mask"]["id"])),
        encoder_parity.compare, "best-piece agreement")
    return CheckResult("quantized", ok)


CHECKS = (check_logits, check_quantized)
