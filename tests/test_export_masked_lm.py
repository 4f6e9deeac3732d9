"""A masked language model's export: every format and variant, each runtime's logits and
top-k pieces against the Keras model, export.parity, and `export.fill_mask` (without
TensorFlow for ONNX and TFLite) against a NumPy top-k of the Keras model's logits, with its
refusals of bad input.

One tiny masked_lm run is trained on generated lower-cased Vietnamese (as in
test_masked_lm.py) and exported with every format and variant, once for this module.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli_probe import assert_clean_failure, call_main, run_cli, tree_digest
from tests.test_masked_lm import args, write_text

pytestmark = pytest.mark.slow

LINES = ["giảng viên [MASK] tình", "Thầy [MASK] rất [MASK] hiểu", "phòng_học [MASK] quá"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm_export")
    write_text(root / "corpus", np.random.default_rng(4))
    out = root / "run"
    from train.cli import main

    # In this process: a second TensorFlow start on a loaded CPU costs minutes.
    result = call_main(main, *args("vi_masked_lm.yaml", out, root / "corpus",
                                   "data.texts=[train/sents.txt]",
                                   "data.dev_texts=[dev/sents.txt]"))
    assert result.code == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def export_dir(run_dir):
    from export.exporters import export_run

    out = run_dir / "export"
    export_run(run_dir, out, quantize="all")
    return out


@pytest.fixture(scope="module")
def manifest(export_dir):
    from export.common import Manifest

    return Manifest(export_dir)


@pytest.fixture(scope="module")
def keras_model(run_dir):
    import keras

    import keras_transformer  # noqa: F401

    return keras.models.load_model(run_dir / "model.keras", compile=False)


def softmax(logits):
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


def test_manifest_records_the_masked_lm_and_its_mask(manifest, run_dir):
    from keras_transformer.text.tokenizer import SentencePieceTokenizer

    tokenizer = SentencePieceTokenizer(run_dir / "spm.model")
    assert manifest.kind == "masked_lm" and manifest.task == "masked_lm"
    assert manifest["mask"] == {"piece": "[MASK]", "id": tokenizer.piece_id("[MASK]")}
    # The config lower-cases its text and splits VNDS word joints; the runtimes do the same.
    assert manifest["lowercase"] is True and manifest["word_joints"] == "split"
    formats = manifest["formats"]
    assert set(formats["tflite"]["variants"]) == {"float32", "fp16", "int8"}
    assert set(formats["onnx"]["variants"]) == {"float32", "int8"}
    assert "savedmodel" in formats
    manifest.verify()
    assert manifest["vocab"]["source_size"] == tokenizer.vocab_size


def masked_ids(manifest, seed=0):
    """Random rows as fill-mask makes them: pieces + EOS, right-padded, some the mask id."""
    from export.kinds.encoder_only.parity import random_batch
    from export.kinds.masked_lm.parity import with_masks

    ids = random_batch(manifest, 6, manifest["max_source_length"], seed)
    special = manifest.special_ids
    return with_masks(ids, manifest["mask"]["id"], special["pad"], special["eos"], seed)


@pytest.mark.parametrize("runtime", ["savedmodel", "onnx", "tflite"])
def test_every_runtime_gives_the_keras_logits_and_top_k(manifest, run_dir, keras_model,
                                                         runtime):
    from export.kinds import load_backend

    ids = masked_ids(manifest)
    reference = np.asarray(keras_model(ids, training=False))
    got = np.asarray(load_backend(manifest, runtime, run_dir=run_dir)(ids))
    assert got.shape == reference.shape == (*ids.shape, manifest["vocab"]["source_size"])
    real = ids != manifest.special_ids["pad"]  # padding positions' logits mean nothing
    np.testing.assert_allclose(got[real], reference[real], atol=1e-4)
    at = ids == manifest["mask"]["id"]
    np.testing.assert_array_equal(np.argsort(-got[at], -1, kind="stable")[:, :5],
                                  np.argsort(-reference[at], -1, kind="stable")[:, :5])


def test_parity_checks_every_runtime_and_variant(export_dir, run_dir):
    """Every float32 runtime passes. The quantized variants are checked and reported; the
    tiny model's predictions at a [MASK] are nearly uniform (its dev perplexity is close to
    its vocabulary), so whether int8 keeps the best piece is not asserted, only that the
    verdict follows the lines."""
    from export import parity

    lines = []
    ok = parity.run(export_dir, run_dir, sentences=50, out=lines.append)
    report = "\n".join(lines)
    float32 = [line for line in lines if "top-5 identical" in line]
    assert [line.split()[0] for line in float32] == ["savedmodel", "onnx", "tflite"], report
    assert all(line.endswith("ok") for line in float32), report
    quantized = [line for line in lines if "best-piece agreement" in line and "MB" in line]
    assert [" ".join(line.split()[:2]) for line in quantized] == [
        "tflite fp16", "tflite int8", "onnx int8"], report
    assert ok == all(line.endswith("ok") for line in quantized), report
    assert report.rstrip().endswith("PASS" if ok else "FAIL")


def expected_fills(keras_model, run_dir, line: str, k: int) -> list[list[tuple[str, float]]]:
    """NumPy top-k of the Keras model's logits at the [MASK]s of `line`, read as the run
    reads text (lower-cased, word joints split)."""
    from keras_transformer.text.tokenizer import SentencePieceTokenizer

    tokenizer = SentencePieceTokenizer(run_dir / "spm.model")
    mask_id = tokenizer.piece_id("[MASK]")
    text = "[MASK]".join(part.replace("_", " ").lower() for part in line.split("[MASK]"))
    ids = np.array([tokenizer.encode([text])[0] + [tokenizer.eos_id]], np.int32)
    probabilities = softmax(np.asarray(keras_model(ids, training=False), np.float64))[0]
    out = []
    for row in probabilities[ids[0] == mask_id]:
        best = np.argsort(-row, kind="stable")[:k]
        out.append([(tokenizer.pieces[int(i)], float(row[i])) for i in best])
    return out


@pytest.mark.parametrize("runtime", ["onnx", "tflite"])
def test_fill_mask_without_tensorflow_gives_the_keras_top_k(export_dir, run_dir, keras_model,
                                                           runtime):
    done = run_cli("export.fill_mask", "--export", export_dir, "--runtime", runtime,
                   "--top-k", "3", stdin=("\n".join(LINES) + "\n").encode(),
                   without_tensorflow=True)
    assert done.code == 0, done.stderr[-3000:]
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    expected = [(n, m, fills) for n, line in enumerate(LINES, start=1)
                for m, fills in enumerate(expected_fills(keras_model, run_dir, line, 3),
                                          start=1)]
    assert len(rows) == len(expected) == 4  # one row per [MASK]
    for row, (number, mask, fills) in zip(rows, expected, strict=True):
        assert row[:2] == [str(number), str(mask)]
        assert row[2::2] == [piece for piece, _ in fills]
        for got, (_, probability) in zip(row[3::2], fills, strict=True):
            assert float(got) == pytest.approx(probability, abs=1e-4)


@pytest.mark.parametrize("stdin, words", [
    ("giảng viên [MASK] tình\nphòng học nóng quá\n", ["line 2", "no [MASK]"]),
    ("giảng viên [MASK] tình\n   \n", ["line 2", "empty"]),
])
def test_fill_mask_refuses_a_line_without_mask_and_writes_nothing(export_dir, tmp_path,
                                                                   stdin, words):
    out = tmp_path / "fills.txt"
    before = tree_digest(tmp_path)
    result = run_cli("export.fill_mask", "--export", export_dir, "-o", out,
                     stdin=stdin.encode(), without_tensorflow=True)
    assert_clean_failure(result, 2, *words)
    assert result.stdout == "" and tree_digest(tmp_path) == before


def test_fill_mask_refuses_other_exports_and_bad_options(export_dir, manifest, tmp_path):
    from export.fill_mask import main

    missing = call_main(main, "--export", tmp_path / "nowhere")
    assert_clean_failure(missing, 2, "nowhere")
    # A classifier's manifest: refused before any of its files is read.
    other = tmp_path / "classifier"
    other.mkdir()
    data = {**manifest.data, "kind": "classifier", "labels": ["a", "b"],
            "model": {**manifest.model, "num_classes": 2}}
    (other / "manifest.json").write_text(json.dumps(data))
    assert_clean_failure(call_main(main, "--export", other), 2, "holds a classifier",
                         "export.classify")
    classify = run_cli("export.classify", "--export", export_dir, stdin=b"a\n")
    assert_clean_failure(classify, 2, "holds a masked language model", "export.fill_mask")
    vocab = manifest["vocab"]["source_size"]
    assert_clean_failure(call_main(main, "--export", export_dir, "--top-k", vocab + 1), 2,
                         "--top-k", "vocabulary")


def test_fill_mask_in_python_matches_the_command(export_dir, run_dir, keras_model):
    from export.kinds import open_export

    filled = open_export(export_dir).fill(LINES[1:2], k=2)
    expected = expected_fills(keras_model, run_dir, LINES[1], 2)
    assert [[f.piece for f in fills] for fills in filled[0]] == [
        [piece for piece, _ in fills] for fills in expected]
    assert Path(export_dir, "masked_lm.onnx").is_file()


def test_the_api_batches_texts_and_answers_each_with_the_keras_top_k(export_dir, run_dir,
                                                                      keras_model):
    """export.api's engine for a masked LM: texts of several lengths from concurrent
    requests, batched and padded together, each [MASK] answered with the Keras model's top-k
    of that text alone; bad top_k and a text without [MASK] refused naming them."""
    from export.engines import open_engine
    from export.inputs import InputError
    from tests.serving import batched

    engine = open_engine(export_dir)
    assert engine.route == "/v1/fill_mask"
    requests = [LINES[:2], LINES[2:], [LINES[1]]]
    outputs, _, sizes = batched(engine, requests, {"top_k": 3})
    assert sizes == [4]
    for inputs, answer in zip(requests, outputs, strict=True):
        for line, masks in zip(inputs, answer, strict=True):
            want = expected_fills(keras_model, run_dir, line, 3)
            assert [[fill["piece"] for fill in fills] for fills in masks] == \
                [[piece for piece, _ in fills] for fills in want]
            for fills, expected in zip(masks, want, strict=True):
                assert [f["score"] for f in fills] == pytest.approx(
                    [p for _, p in expected], abs=1e-5)
    vocab = engine.vocab
    for options, message in (({"top_k": 0}, r"top_k must be an integer in \[1, "),
                             ({"top_k": vocab + 1}, f"holds {vocab} pieces"),
                             ({"top_k": True}, "top_k must be"),
                             ({"beam_size": 2}, "beam_size")):
        with pytest.raises(InputError, match=message):
            engine.prepare(LINES[:1], options)
    with pytest.raises(InputError, match=r"inputs\[1\] has no \[MASK\]"):
        engine.prepare([LINES[0], "phòng học nóng quá"], {})


def test_the_api_server_fills_masks_over_http_without_tensorflow(export_dir, run_dir,
                                                                 keras_model, tmp_path):
    from tests.serving import post, serving

    with serving(export_dir, tmp_path / "api.log", module="export.api") as url:
        answer = post(url, json.dumps({"inputs": LINES[:1], "top_k": 2}).encode(),
                      route="/v1/fill_mask")
        assert answer.status_code == 200, answer.text
        [[fills]] = answer.json()["outputs"]
        [want] = expected_fills(keras_model, run_dir, LINES[0], 2)
        assert [f["piece"] for f in fills] == [piece for piece, _ in want]
        refused = post(url, b'{"inputs": ["no mask here"]}', route="/v1/fill_mask")
        assert refused.status_code == 422 and "inputs[0] has no [MASK]" in refused.text
        elsewhere = post(url, b'{"inputs": ["a"]}', route="/v1/translate")
        assert elsewhere.status_code == 404 and "/v1/fill_mask" in elsewhere.text
