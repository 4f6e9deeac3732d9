"""export.parity's checks of a classifier export (kind "classifier"): class probabilities and
their argmax against the Keras model, and, in an export made with --with-attention, the
encoder self-attention weights of attention.onnx. Each check is a function
(ParityRun, out) -> CheckResult that prints its lines with `out`."""

from __future__ import annotations

import numpy as np

from ...common import Manifest
from ...parity_check import CheckResult, ParityRun
from ..encoder_only.parity import (
    QUANTIZED_AGREEMENT,
    QUANTIZED_MAX_DELTA,
    TOLERANCE,
    against_keras,
    compare,
    quantized_against_float32,
)
from ..encoder_only.parity import prepare as prepare  # a classifier's checks need no more
from .runtime import attention_runtime


def probabilities(runtime, inputs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(runtime(ids), np.float32) for ids in inputs])


def check_probabilities(run: ParityRun, out) -> CheckResult:
    """Check 1: every float32 runtime's class probabilities and argmax against keras."""
    inputs = run.state["inputs"]
    rows = sum(len(b) for b in inputs)
    out(f"1. class probabilities against keras on {rows} random id sequences "
        f"(float32: max|Δ| <= {TOLERANCE:g} and every argmax identical)")
    run.state["probabilities"], ok = against_keras(
        run, out, lambda name: probabilities(run.load(name), inputs), compare,
        "argmax identical")
    return CheckResult("probabilities", ok)


def check_quantized(run: ParityRun, out) -> CheckResult:
    """Check 2: each quantized variant's probabilities against its format's float32."""
    if run.state["quantized"]:
        out(f"\n2. quantized variants against their format's float32 (max|Δ| <= "
            f"{QUANTIZED_MAX_DELTA:g}, argmax agreement >= {QUANTIZED_AGREEMENT:.0%})")
    ok = quantized_against_float32(
        run, out, run.state["probabilities"],
        lambda fmt, variant: probabilities(run.load(fmt, variant), run.state["inputs"]),
        compare, "argmax agreement")
    return CheckResult("quantized", ok)


def check_attention(run: ParityRun, out) -> CheckResult:
    """The last check, of an export made with --with-attention: attention.onnx against the
    Keras model's own weights."""
    ok, inputs = True, run.state["inputs"]
    if "attention" in run.manifest.data:
        out(f"\n{3 if run.state['quantized'] else 2}. attention.onnx against keras on the "
            f"{sum(map(len, inputs[:2]))} id sequences of the two small batches, padded "
            f"(max|Δ| <= {TOLERANCE:g})")
        for output, delta in attention_parity(run.manifest, inputs[:2], run.load).items():
            passed = delta <= TOLERANCE
            ok &= passed
            out(f"   {output:<24} max|Δ| {delta:.2e}  {'ok' if passed else 'FAIL'}")
    return CheckResult("attention", ok)


CHECKS = (check_probabilities, check_quantized, check_attention)


def attention_parity(manifest: Manifest, inputs: list[np.ndarray], load) -> dict[str, float]:
    """{"attention.<output>": max|Δ|} of attention.onnx's probabilities and encoder_self
    against the Keras model's own (module.attention_function, the function it was
    converted from), over the batches `inputs`; `load` loads a runtime (the keras one's model
    gives the reference)."""
    from .module import attention_function

    function = attention_function(load("keras").model)
    onnx = attention_runtime(manifest)
    worst: dict[str, float] = {}
    for ids in inputs:
        reference = {name: t.numpy() for name, t in function(ids).items()}
        got = onnx(ids)
        for name, value in got.items():
            ref = reference[name]
            delta = (float("inf") if value.shape != ref.shape else
                     float(np.max(np.abs(value.astype(np.float64) - ref))))
            key = f"attention.{name}"
            worst[key] = max(worst.get(key, 0.0), delta)
    return worst
