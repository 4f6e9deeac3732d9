"""export/choice.py: the fastest variant within 0.5 BLEU of float32, from hand-made parity
records, and the one-line refusals of a record that is missing, stale or records a failure."""

from __future__ import annotations

import json

import pytest

from export import choice


def entry(runtime: str, variant: str, score: float, seconds: float) -> dict:
    return {"runtime": runtime, "variant": variant, "score": score, "seconds": seconds}


RECORD = {"variants": [
    entry("tflite", "float32", 30.00, 4.0),
    entry("tflite", "fp16", 30.00, 4.4),
    entry("tflite", "int8", 29.40, 1.0),  # 0.6 below float32: fastest of all, never chosen
    entry("onnx", "float32", 30.00, 3.0),
    entry("onnx", "int8", 29.55, 2.0),  # 0.45 below: the fastest within 0.5
]}


def test_the_fastest_within_half_a_point_is_chosen_not_a_faster_one_below():
    assert choice.choose_fastest(RECORD) == entry("onnx", "int8", 29.55, 2.0)
    # Within one runtime: tflite int8 is 0.6 below, so tflite float32 (4.0 s) beats fp16 (4.4 s).
    assert choice.choose_fastest(RECORD, runtime="tflite") == entry("tflite", "float32", 30.0, 4.0)
    # A wider tolerance lets tflite int8 in; a narrower one leaves only float32-level scores.
    assert choice.choose_fastest(RECORD, tolerance=0.6)["variant"] == "int8"
    assert choice.choose_fastest(RECORD, tolerance=0.4) == entry("onnx", "float32", 30.0, 3.0)


def test_the_reference_is_the_best_float32_score_and_a_better_variant_counts():
    record = {"variants": [entry("onnx", "float32", 20.0, 3.0), entry("tflite", "float32", 20.6, 5.0),
                           entry("onnx", "int8", 20.05, 1.0), entry("tflite", "int8", 21.0, 2.0)]}
    # Floor 20.1 (the best float32, 20.6, minus 0.5): onnx int8 at 20.05 is out.
    assert choice.choose_fastest(record) == entry("tflite", "int8", 21.0, 2.0)
    with pytest.raises(ValueError, match="no variant of the savedmodel runtime"):
        choice.choose_fastest(record, runtime="savedmodel")
    with pytest.raises(ValueError, match="no float32 variant"):
        choice.choose_fastest({"variants": [entry("onnx", "int8", 20.0, 1.0)]})


def write_export(tmp_path, **record):
    (tmp_path / "manifest.json").write_text('{"manifest_version": 4}')
    return choice.write_record(tmp_path, passed=record.get("passed", True), metric="BLEU",
                               sentences=100, variants=record.get("variants", RECORD["variants"]))


def test_record_round_trip_and_refusals(tmp_path):
    with pytest.raises(ValueError, match=r"parity\.json is missing: .* python -m export\.parity"):
        choice.read_record(tmp_path)
    path = write_export(tmp_path)
    assert json.loads(path.read_text())["manifest_sha256"] == choice.manifest_sha256(tmp_path)
    assert choice.fastest(tmp_path) == ("onnx", "int8")
    assert choice.fastest(tmp_path, runtime="tflite") == ("tflite", "float32")
    assert not list(tmp_path.glob("*.tmp*"))  # written whole, no temporary left

    # Another export in the same directory: the record is stale.
    (tmp_path / "manifest.json").write_text('{"manifest_version": 4, "formats": {}}')
    with pytest.raises(ValueError, match="written for another export"):
        choice.read_record(tmp_path)
    write_export(tmp_path, passed=False)
    with pytest.raises(ValueError, match="records a failed parity check"):
        choice.read_record(tmp_path)
    for bad in ("{not json", '{"version": 1, "variants": [{"runtime": "onnx"}]}', "[]"):
        path.write_text(bad)
        with pytest.raises(ValueError, match="parity"):
            choice.read_record(tmp_path)
    # A score or time that is not a finite number (once a TypeError, exit 1, in the choice).
    good = RECORD["variants"][0]
    for field, value in (("score", "99"), ("score", float("nan")), ("seconds", -1.0),
                         ("seconds", True)):
        write_export(tmp_path, variants=[{**good, field: value}, *RECORD["variants"][1:]])
        with pytest.raises(ValueError, match="not a parity record of this version"):
            choice.read_record(tmp_path)
