"""Cross-runtime parity of a classifier export (`python -m export.parity` on a manifest of
kind "classifier"): class probabilities and their argmax against the Keras model, and, in an
export made with --with-attention, the encoder self-attention weights of attention.onnx."""

from __future__ import annotations

import time

import numpy as np

from .common import Manifest, variant_bytes
from .runtime.classifier import attention_runtime, keras_model, load_runtime

TOLERANCE = 1e-4  # max |Δ| of a float32 runtime's probabilities against keras
# A quantized variant against its format's float32: the probabilities move by the weights'
# rounding, so the test is the label it picks, with a bound on how far a probability moves.
QUANTIZED_MAX_DELTA = 0.1
QUANTIZED_AGREEMENT = 0.98
RUNTIMES = ("keras", "savedmodel", "onnx", "tflite")


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


def run(manifest: Manifest, run_dir=None, sentences: int = 200, out=print) -> bool:
    """All checks, printed; True when every one passes."""
    present = [r for r in RUNTIMES[1:] if r in manifest["formats"]]
    missing = [r for r in RUNTIMES if r not in ("keras", *present)]
    if missing:
        out(f"not exported, not checked: {', '.join(missing)}\n")
    inputs = batches(manifest, sentences)
    rows = sum(len(b) for b in inputs)

    def probabilities(runtime) -> np.ndarray:
        return np.concatenate([np.asarray(runtime(ids), np.float32) for ids in inputs])

    ok = True
    out(f"1. class probabilities against keras on {rows} random id sequences "
        f"(float32: max|Δ| <= {TOLERANCE:g} and every argmax identical)")
    results = {}
    for name in ("keras", *present):
        start = time.perf_counter()
        results[name] = probabilities(load_runtime(manifest, name, run_dir=run_dir))
        seconds = time.perf_counter() - start
        if name == "keras":
            out(f"   {name:<11} {seconds:6.1f} s")
            continue
        delta, agree = compare(results["keras"], results[name])
        passed = delta <= TOLERANCE and agree == 1.0
        ok &= passed
        out(f"   {name:<11} {seconds:6.1f} s  max|Δ| {delta:.2e}  argmax identical "
            f"{agree:7.2%}  {'ok' if passed else 'FAIL'}")

    quantized = [(fmt, v) for fmt in ("tflite", "onnx") if fmt in manifest["formats"]
                 for v in manifest["formats"][fmt]["variants"] if v != "float32"]
    if quantized:
        out(f"\n2. quantized variants against their format's float32 (max|Δ| <= "
            f"{QUANTIZED_MAX_DELTA:g}, argmax agreement >= {QUANTIZED_AGREEMENT:.0%})")
    for fmt, variant in quantized:
        got = probabilities(load_runtime(manifest, fmt, variant))
        delta, agree = compare(results[fmt], got)
        passed = delta <= QUANTIZED_MAX_DELTA and agree >= QUANTIZED_AGREEMENT
        ok &= passed
        size = variant_bytes(manifest.data, manifest.format_files(fmt, variant))
        out(f"   {fmt:<7} {variant:<8} {size / 1e6:7.2f} MB  max|Δ| {delta:.2e}  argmax "
            f"agreement {agree:7.2%}  {'ok' if passed else 'FAIL'}")
    if "attention" in manifest.data:
        out(f"\n{3 if quantized else 2}. attention.onnx against keras on the "
            f"{sum(map(len, inputs[:2]))} id sequences of the two small batches, padded "
            f"(max|Δ| <= {TOLERANCE:g})")
        for output, delta in attention_parity(manifest, inputs[:2], run_dir).items():
            passed = delta <= TOLERANCE
            ok &= passed
            out(f"   {output:<24} max|Δ| {delta:.2e}  {'ok' if passed else 'FAIL'}")
    out(f"\n{'PASS' if ok else 'FAIL'}")
    return ok


def attention_parity(manifest: Manifest, inputs: list[np.ndarray], run_dir=None
                     ) -> dict[str, float]:
    """{"attention.<output>": max|Δ|} of attention.onnx's probabilities and encoder_self
    against the Keras model's own (export.classifier.attention_function, the function it was
    converted from), over the batches `inputs`."""
    from .classifier import attention_function

    function = attention_function(keras_model(manifest, run_dir))
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
