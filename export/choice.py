"""The fastest accurate runtime and variant of an export, from what its parity check recorded.

`python -m export.parity` writes `parity.json` into the export directory: for each variant
(TFLite float32/fp16/int8, ONNX float32/int8) its greedy quality score (BLEU; ROUGE-L for
summaries) on the check's sentences and the seconds that greedy pass took on the machine
that ran the check. `python -m export.translate --variant fastest` reads it and takes the
fastest variant whose score is within TOLERANCE of the best float32 score. No TensorFlow.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from keras_transformer.command_line import command
from keras_transformer.file_safety import atomic_write_text

RECORD = "parity.json"
RECORD_VERSION = 1
TOLERANCE = 0.5  # score points (BLEU) below float32 that a reduced-precision variant may lose


def manifest_sha256(export_dir: str | Path) -> str:
    """The record belongs to the export whose manifest.json has this digest."""
    return hashlib.sha256((Path(export_dir) / "manifest.json").read_bytes()).hexdigest()


def write_record(export_dir: str | Path, *, passed: bool, metric: str, sentences: int,
                 variants: list[dict]) -> Path:
    """<export>/parity.json, written whole (atomically). `variants`: one dict per variant with
    runtime, variant, score and seconds (its greedy pass over `sentences` sentences)."""
    path = Path(export_dir) / RECORD
    record = {"version": RECORD_VERSION, "manifest_sha256": manifest_sha256(export_dir),
              "passed": bool(passed), "metric": metric, "sentences": int(sentences),
              "variants": variants}
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    return path


def _number(value) -> bool:
    """A finite int or float (not a bool): what a recorded score or time must be."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def read_record(export_dir: str | Path) -> dict:
    """The export's parity record; ValueError with the fix when it is missing, unreadable,
    made for another export or records a failed check."""
    export_dir = Path(export_dir)
    path = export_dir / RECORD
    again = f"run {command('export.parity')} --export {export_dir}"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path} is missing: --variant fastest chooses from what the parity "
                         f"check records; {again} first") from None
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} cannot be read ({err}); {again}") from None
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION or not all(
            isinstance(v, dict) and {"runtime", "variant", "score", "seconds"} <= set(v)
            and _number(v["score"]) and _number(v["seconds"]) and v["seconds"] >= 0
            for v in record.get("variants") or [None]):
        raise ValueError(f"{path} is not a parity record of this version; {again}")
    if record.get("manifest_sha256") != manifest_sha256(export_dir):
        raise ValueError(f"{path} was written for another export (manifest.json changed since); "
                         f"{again}")
    if not record.get("passed"):
        raise ValueError(f"{path} records a failed parity check: the runtimes disagree, so none "
                         f"is chosen; {again} and see what fails")
    return record


def choose_fastest(record: dict, tolerance: float = TOLERANCE,
                   runtime: str | None = None) -> dict:
    """The entry of `record['variants']` with the fewest seconds among those whose score is at
    least the best float32 score minus `tolerance` (of `runtime` alone when given)."""
    variants = record["variants"]
    references = [v["score"] for v in variants if v["variant"] == "float32"]
    if not references:
        raise ValueError("the parity record holds no float32 variant to compare against")
    floor = max(references) - tolerance
    candidates = [v for v in variants if v["score"] >= floor
                  and (runtime is None or v["runtime"] == runtime)]
    if not candidates:
        where = f" of the {runtime} runtime" if runtime else ""
        raise ValueError(f"no variant{where} in the parity record scores within {tolerance} of "
                         f"float32's {max(references):.2f}")
    return min(candidates, key=lambda v: v["seconds"])


def fastest(export_dir: str | Path, runtime: str | None = None) -> tuple[str, str]:
    """(runtime, variant) that --variant fastest runs for this export."""
    chosen = choose_fastest(read_record(export_dir), runtime=runtime)
    return chosen["runtime"], chosen["variant"]
