"""export.parity's checks of a classifier export (kind "classifier"): class probabilities and
their argmax against the Keras model, and, in an export made with --with-attention, the
encoder self-attention weights of attention.onnx. Each check is a function
(ParityRun, out) -> CheckResult that prints its lines with `out`."""

from __future__ import annotations

import time

import numpy as np

from .common import Manifest, variant_bytes
from .parity_check import CheckResult, ParityRun, exported_formats
from .runtime.classifier import attention_runtime

TOLERANCE = 1e-4  # max |Δ| of a float32 runtime's probabilities against keras
# A quantized variant against its format's float32: the probabilities move by the weights'
# rounding, so the test is the label it picks, with a bound on how far a probability moves.
QUANTIZED_MAX_DELTA = 0.1
QUANTIZED_AGREEMENT = 0.98


def random_batch(manifest: Manifest, batch: int, length: int, seed: int) -> np.ndarray:
    """(batch, length) int32 ids as the classifier takes them: pieces (ids 4 and up) + EOS,
    right-padded with PAD, of random lengths (the first row fills the length)."""
    rng = np.random.default_rng(seed)
    length = min(length, manifest["max_source_length"])
    ids = rng.integers(4, manifest["vocab"]["source_size"], size=(batch, length))
    ids = ids.astype(np.int32)
    lengths = rng.integers(1, length + 1, size=batch)
    lengths[0] = length
    for row, n in enumerate(lengths):
        ids[row, n - 1] = manifest.special_ids["eos"]
        ids[row, n:] = manifest.special_ids["pad"]
    return ids


def batches(manifest: Manifest, sentences: int) -> list[np.ndarray]:
    """Two small shapes, then `sentences` rows of every length up to max_source_length."""
    out = [random_batch(manifest, 1, 7, seed=0), random_batch(manifest, 5, 19, seed=1)]
    for start in range(0, sentences, 64):
        out.append(random_batch(manifest, min(64, sentences - start),
                                manifest["max_source_length"], seed=2 + start))
    return out


def compare(reference: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """(max |Δ| of the probabilities, share of rows with the same argmax)."""
    if got.shape != reference.shape:
        return float("inf"), 0.0
    delta = float(np.max(np.abs(got.astype(np.float64) - reference)))
    agree = float(np.mean(np.argmax(got, -1) == np.argmax(reference, -1)))
    return delta, agree


def prepare(run: ParityRun, out) -> None:
    """The formats to check and the id batches every check reads."""
    manifest = run.manifest
    present, missing = exported_formats(manifest)
    if missing:
        out(f"not exported, not checked: {', '.join(missing)}\n")
    run.state.update(present=present, inputs=batches(manifest, run.sentences),
                     quantized=quantized_variants(manifest))


def quantized_variants(manifest: Manifest) -> list[tuple[str, str]]:
    """(format, variant) of every variant besides float32 the export holds."""
    return [(fmt, v) for fmt in ("tflite", "onnx") if fmt in manifest["formats"]
            for v in manifest["formats"][fmt]["variants"] if v != "float32"]


def probabilities(runtime, inputs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(runtime(ids), np.float32) for ids in inputs])


def check_probabilities(run: ParityRun, out) -> CheckResult:
    """Check 1: every float32 runtime's class probabilities and argmax against keras."""
    inputs = run.state["inputs"]
    rows = sum(len(b) for b in inputs)
    ok = True
    out(f"1. class probabilities against keras on {rows} random id sequences "
        f"(float32: max|Δ| <= {TOLERANCE:g} and every argmax identical)")
    results = run.state["probabilities"] = {}
    for name in ("keras", *run.state["present"]):
        start = time.perf_counter()
        results[name] = probabilities(run.load(name), inputs)
        seconds = time.perf_counter() - start
        if name == "keras":
            out(f"   {name:<11} {seconds:6.1f} s")
            continue
        delta, agree = compare(results["keras"], results[name])
        passed = delta <= TOLERANCE and agree == 1.0
        ok &= passed
        out(f"   {name:<11} {seconds:6.1f} s  max|Δ| {delta:.2e}  argmax identical "
            f"{agree:7.2%}  {'ok' if passed else 'FAIL'}")
    return CheckResult("probabilities", ok)


def check_quantized(run: ParityRun, out) -> CheckResult:
    """Check 2: each quantized variant's probabilities against its format's float32."""
    manifest, quantized, ok = run.manifest, run.state["quantized"], True
    if quantized:
        out(f"\n2. quantized variants against their format's float32 (max|Δ| <= "
            f"{QUANTIZED_MAX_DELTA:g}, argmax agreement >= {QUANTIZED_AGREEMENT:.0%})")
    for fmt, variant in quantized:
        got = probabilities(run.load(fmt, variant), run.state["inputs"])
        delta, agree = compare(run.state["probabilities"][fmt], got)
        passed = delta <= QUANTIZED_MAX_DELTA and agree >= QUANTIZED_AGREEMENT
        ok &= passed
        size = variant_bytes(manifest.data, manifest.format_files(fmt, variant))
        out(f"   {fmt:<7} {variant:<8} {size / 1e6:7.2f} MB  max|Δ| {delta:.2e}  argmax "
            f"agreement {agree:7.2%}  {'ok' if passed else 'FAIL'}")
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
    against the Keras model's own (export.classifier.attention_function, the function it was
    converted from), over the batches `inputs`; `load` loads a runtime (the keras one's model
    gives the reference)."""
    from .classifier import attention_function

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
