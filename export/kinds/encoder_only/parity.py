"""What export.parity's checks of the encoder-only kinds share: random id sequences as the
training pipeline makes them, the bounds, and the report of each runtime against keras and of
each quantized variant against its format's float32."""

from __future__ import annotations

import time

import numpy as np

from ...common import Manifest, variant_bytes
from ...formats import KERAS
from ...parity_check import ParityRun, exported_formats

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


def check_formats(run: ParityRun, out) -> None:
    """The formats to check (`present`) and their quantized variants (`quantized`); the
    others named as not checked."""
    present, missing = exported_formats(run.manifest)
    if missing:
        out(f"not exported, not checked: {', '.join(missing)}\n")
    run.state.update(present=present, quantized=quantized_variants(run.manifest))


def prepare(run: ParityRun, out) -> None:
    """check_formats, and the random id batches every check reads (`inputs`)."""
    check_formats(run, out)
    run.state["inputs"] = batches(run.manifest, run.sentences)


def quantized_variants(manifest: Manifest) -> list[tuple[str, str]]:
    """(format, variant) of every variant besides float32 the export holds."""
    return [(fmt, v) for fmt in ("tflite", "onnx") if fmt in manifest["formats"]
            for v in manifest["formats"][fmt]["variants"] if v != "float32"]


def against_keras(run: ParityRun, out, outputs, compare, agreement: str) -> tuple[dict, bool]:
    """Each float32 runtime's outputs against keras's, a line each, timed: `outputs(name)`
    computes a runtime's, `compare(reference, got)` gives (max|Δ|, the share that agrees,
    named `agreement`); a runtime passes at max|Δ| <= TOLERANCE with everything agreeing.
    -> ({runtime: outputs}, whether every one passed)."""
    results, ok = {}, True
    for name in (KERAS, *run.state["present"]):
        start = time.perf_counter()
        results[name] = outputs(name)
        seconds = time.perf_counter() - start
        if name == KERAS:
            out(f"   {name:<11} {seconds:6.1f} s")
            continue
        delta, agree = compare(results[KERAS], results[name])
        passed = delta <= TOLERANCE and agree == 1.0
        ok &= passed
        out(f"   {name:<11} {seconds:6.1f} s  max|Δ| {delta:.2e}  {agreement} "
            f"{agree:7.2%}  {'ok' if passed else 'FAIL'}")
    return results, ok


def quantized_against_float32(run: ParityRun, out, float32: dict, outputs, compare,
                              agreement: str) -> bool:
    """Each quantized variant's outputs against its format's float32 ones (`float32`, by
    format), a line each with its size: `outputs(fmt, variant)` computes them, `compare` as
    in against_keras; a variant passes within QUANTIZED_MAX_DELTA and QUANTIZED_AGREEMENT."""
    manifest, ok = run.manifest, True
    for fmt, variant in run.state["quantized"]:
        delta, agree = compare(float32[fmt], outputs(fmt, variant))
        passed = delta <= QUANTIZED_MAX_DELTA and agree >= QUANTIZED_AGREEMENT
        ok &= passed
        size = variant_bytes(manifest.data, manifest.format_files(fmt, variant))
        out(f"   {fmt:<7} {variant:<8} {size / 1e6:7.2f} MB  max|Δ| {delta:.2e}  {agreement} "
            f"{agree:7.2%}  {'ok' if passed else 'FAIL'}")
    return ok
