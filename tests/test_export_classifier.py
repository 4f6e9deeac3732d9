"""A classification run: its per-epoch dev macro-F1 and best.keras, `train.evaluate` on a
label file, exporting it (SavedModel, ONNX, TFLite and their fp16/int8 variants), parity of
the class probabilities across runtimes, and `export.classify`.

One tiny classifier is trained on generated three-class data in the UIT-VSFC file format
and exported with every format and variant, once for this module.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import classifier_run
from tests.classifier_run import NAMES
from tests.cli_probe import assert_clean_failure, call_main, run_cli, tree_digest

pytestmark = pytest.mark.slow

# The module-scoped fixtures of the trained run, shared with the other classifier tests.
data_dir, run_dir = classifier_run.data_dir, classifier_run.run_dir

def reference_scores(gold: list[int], predicted: list[int]) -> tuple[float, float]:
    """(accuracy, macro-F1) in percent, from precision and recall by counting: the mean F1 of
    the classes that occur in the gold labels or the predictions."""
    classes = sorted(set(gold) | set(predicted))
    f1s = []
    for c in classes:
        right = sum(g == p == c for g, p in zip(gold, predicted, strict=True))
        precision = right / predicted.count(c) if predicted.count(c) else 0.0
        recall = right / gold.count(c) if gold.count(c) else 0.0
        f1s.append(2 * precision * recall / (precision + recall) if right else 0.0)
    accuracy = sum(g == p for g, p in zip(gold, predicted, strict=True)) / len(gold)
    return 100 * accuracy, 100 * sum(f1s) / len(f1s)


def read_split(data_dir: Path, split: str) -> tuple[list[str], list[int]]:
    texts = (data_dir / split / "sents.txt").read_text("utf-8").splitlines()
    labels = (data_dir / split / "sentiments.txt").read_text("utf-8").splitlines()
    return texts, [NAMES.index(label) for label in labels]


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


def test_classification_run_reports_dev_and_test_f1(run_dir):
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert json.loads((run_dir / "labels.json").read_text()) == NAMES
    for split, count in (("dev", 60), ("test", 90)):
        assert metrics[f"{split}_sentences"] == count
        assert set(metrics[f"{split}_f1"]) == set(NAMES)
        f1 = list(metrics[f"{split}_f1"].values())
        assert metrics[f"{split}_macro_f1"] == pytest.approx(sum(f1) / 3, abs=0.01)
        # The class word decides the class: far above chance (33%) after training.
        assert metrics[f"{split}_accuracy"] >= 60.0, metrics


def test_dev_macro_f1_of_each_epoch_picks_best_keras(run_dir, data_dir):
    """The per-epoch dev score is macro-F1 (accuracy beside it); the best epoch's weights are
    best.keras, and its macro-F1 is that of best.keras's own predictions on dev."""
    import keras

    import keras_transformer
    from keras_transformer.text.pipeline import make_classification_dataset
    from keras_transformer.text.tokenizer import SentencePieceTokenizer

    metrics = json.loads((run_dir / "metrics.json").read_text())
    dev = metrics["epoch_dev"]
    assert len(dev["macro_f1"]) == len(dev["accuracy_percent"]) == metrics["epochs"] == 4
    best = metrics["best_epoch"]
    assert metrics["best_dev_macro_f1"] == max(dev["macro_f1"]) == dev["macro_f1"][best - 1]
    assert metrics["dev_score_sentences"] == 60
    assert (run_dir / "best.npz").is_file()
    # Keras' own dev accuracy (a fraction) is left beside the dev score's (percent).
    assert dev["accuracy"] == pytest.approx([a / 100 for a in dev["accuracy_percent"]],
                                            abs=1e-3)
    keras_transformer.register_serializables()
    model = keras.models.load_model(run_dir / "best.keras", compile=False)
    texts, gold = read_split(data_dir, "dev")
    batches = make_classification_dataset(texts, gold, SentencePieceTokenizer(
        run_dir / "spm.model"), max_length=24, batch_size=7, shuffle=False)
    predicted = [int(p) for ids, _ in batches
                 for p in np.argmax(np.asarray(model(ids, training=False)), axis=-1)]
    accuracy, macro_f1 = reference_scores(gold, predicted)
    assert dev["macro_f1"][best - 1] == pytest.approx(macro_f1, abs=0.006)
    assert dev["accuracy_percent"][best - 1] == pytest.approx(accuracy, abs=0.006)


def evaluate(*args):
    from train.evaluate import main

    return call_main(main, *args)


def test_evaluate_scores_label_files_as_the_run_did(run_dir, data_dir, tmp_path):
    """train.evaluate on a split's sentence and label files gives the run's own accuracy,
    macro-F1 and per-class F1 for it, and writes the predicted class names line-aligned."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for split, count in (("dev", 60), ("test", 90)):
        out = tmp_path / f"{split}.labels"
        result = evaluate("--run", run_dir, "--src", data_dir / split / "sents.txt", "--ref",
                          data_dir / split / "sentiments.txt", "--hyp", out)
        assert result.code == 0, result.stderr[-3000:]
        entry = json.loads((run_dir / "metrics.json").read_text())[
            "evaluations"]["model.keras"]["sents.txt"]
        assert {k: entry[k] for k in ("accuracy", "macro_f1", "f1")} == {
            k: metrics[f"{split}_{k}"] for k in ("accuracy", "macro_f1", "f1")}
        assert (entry["sentences"], entry["skipped"], entry["hypotheses"]) == (count, 0,
                                                                                str(out))
        assert f"accuracy {metrics[f'{split}_accuracy']:.2f}%, macro-F1" in result.stdout
        predicted = [NAMES.index(name) for name in out.read_text("utf-8").splitlines()]
        assert reference_scores(read_split(data_dir, split)[1], predicted)[0] == \
            pytest.approx(metrics[f"{split}_accuracy"], abs=0.006)
    # Class ids instead of names, and a blank line: skipped, its output line empty.
    texts, gold = read_split(data_dir, "test")
    src, ref, out = tmp_path / "blank.txt", tmp_path / "blank.ids", tmp_path / "blank.labels"
    src.write_text("".join(f"{t}\n" for t in [*texts[:5], "  ", *texts[5:]]), "utf-8")
    ref.write_text("".join(f"{g}\n" for g in [*gold[:5], "", *gold[5:]]), "utf-8")
    result = evaluate("--run", run_dir, "--src", src, "--ref", ref, "--hyp", out)
    assert result.code == 0, result.stderr[-3000:]
    assert "skipped 1 empty lines" in result.stderr
    lines = out.read_text("utf-8").split("\n")
    assert len(lines) == 92 and lines[5] == "" and lines[-1] == ""
    entry = json.loads((run_dir / "metrics.json").read_text())[
        "evaluations"]["model.keras"]["blank.txt"]
    assert (entry["accuracy"], entry["macro_f1"], entry["skipped"]) == (
        metrics["test_accuracy"], metrics["test_macro_f1"], 1)
    # Without --ref: the labels only, nothing recorded.
    result = evaluate("--run", run_dir, "--src", src, "--hyp", out, "--overwrite")
    assert result.code == 0 and "macro-F1" not in result.stdout, result.stderr[-3000:]
    assert out.read_text("utf-8").split("\n") == lines


def test_evaluate_refuses_bad_labels_and_options_in_one_line(run_dir, data_dir, tmp_path):
    src, ref = data_dir / "test" / "sents.txt", tmp_path / "labels.txt"
    labels = (data_dir / "test" / "sentiments.txt").read_text("utf-8").splitlines()
    before = tree_digest(run_dir)
    cases = [
        ([*labels[:2], "happy", *labels[3:]], [], [f"{ref}:3", "unknown label 'happy'",
                                                  "negative, neutral, positive"]),
        ([*labels[:2], "3", *labels[3:]], [], [f"{ref}:3", "unknown label '3'"]),
        ([*labels[:2], "", *labels[3:]], [], [f"{ref}:3", "empty label"]),
        (labels[:-1], [], ["has 90 lines", "has 89"]),
        (labels, ["--beam", "2"], ["--beam does not apply to a classification run"]),
        (labels, ["--plot-attention", "1"], ["--plot-attention does not apply"]),
        (labels, ["--min-length", "3"], ["--min-length does not apply"]),
    ]
    for lines, extra, words in cases:
        ref.write_text("".join(f"{x}\n" for x in lines), "utf-8")
        result = evaluate("--run", run_dir, "--src", src, "--ref", ref, *extra)
        assert_clean_failure(result, 2, *words)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    tsv = evaluate("--run", run_dir, "--tsv", tmp_path / "x.tsv")
    assert_clean_failure(tsv, 2, "--tsv does not apply to a classification run")
    assert tree_digest(run_dir) == before


def test_manifest_records_the_classifier(manifest, run_dir):
    assert manifest.kind == "classifier"
    assert manifest["labels"] == NAMES
    assert manifest.model["num_classes"] == 3
    assert manifest["max_source_length"] == 24
    assert manifest["tokenizer"] == {"source": "spm.model"}
    formats = manifest["formats"]
    assert set(formats) == {"savedmodel", "onnx", "tflite"}
    assert set(formats["tflite"]["variants"]) == {"float32", "fp16", "int8"}
    assert set(formats["onnx"]["variants"]) == {"float32", "int8"}
    manifest.verify()  # every file against its checksum
    config = json.loads((run_dir / "model_config.json").read_text())
    assert manifest["vocab"]["source_size"] == config["source_vocab_size"]


def test_every_runtime_gives_the_trained_models_probabilities(manifest, run_dir, data_dir):
    """Text through each runtime (sentencepiece, truncation, batches padded to their longest
    sentence) against the trained model on the training pipeline's ids (padded to
    max_source_length), the softmax computed in NumPy."""
    import keras

    from export.kinds import load_backend
    from export.kinds.classifier.runtime import Classifier
    from keras_transformer.text.pipeline import make_classification_dataset
    from keras_transformer.text.tokenizer import SentencePieceTokenizer

    texts = (data_dir / "test" / "sents.txt").read_text("utf-8").splitlines()
    texts[0] = " ".join([texts[0]] * 6)  # longer than max_source_length: truncated alike
    model = keras.models.load_model(run_dir / "model.keras", compile=False)
    tokenizer = SentencePieceTokenizer(run_dir / "spm.model")
    data = make_classification_dataset(texts, [0] * len(texts), tokenizer, max_length=24,
                                       batch_size=32, shuffle=False)
    logits = np.concatenate([np.asarray(model(ids, training=False)) for ids, _ in data])
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    reference = exp / exp.sum(-1, keepdims=True)
    for runtime in ("keras", "savedmodel", "onnx", "tflite"):
        classifier = Classifier(manifest, load_backend(manifest, runtime, run_dir=run_dir))
        got = classifier.probabilities(texts, batch_size=16)
        np.testing.assert_allclose(got, reference, atol=1e-4, err_msg=runtime)
        np.testing.assert_array_equal(got.argmax(-1), reference.argmax(-1), err_msg=runtime)


def test_parity_passes_and_reports_quantized_agreement(export_dir, run_dir):
    from export import parity

    lines = []
    assert parity.run(export_dir, run_dir, sentences=100, out=lines.append)
    report = "\n".join(lines)
    assert "onnx" in report and "tflite" in report and "savedmodel" in report
    for variant in ("tflite  fp16", "tflite  int8", "onnx    int8"):
        assert variant in report and "argmax agreement" in report
    assert report.rstrip().endswith("PASS")


@pytest.mark.parametrize("runtime", ["onnx", "tflite"])
def test_classify_without_tensorflow(manifest, export_dir, run_dir, data_dir, runtime):
    from export.kinds import load_backend
    from export.kinds.classifier.runtime import Classifier

    texts = (data_dir / "dev" / "sents.txt").read_text("utf-8").splitlines()[:20]
    done = run_cli("export.classify", "--export", export_dir, "--runtime", runtime,
                   "--top-k", "3", stdin=("\n".join(texts) + "\n").encode(),
                   without_tensorflow=True)
    assert done.code == 0, done.stderr[-3000:]
    keras_classifier = Classifier(manifest, load_backend(manifest, "keras", run_dir=run_dir))
    expected = keras_classifier.probabilities(texts)
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert len(rows) == len(texts)
    for row, probabilities in zip(rows, expected, strict=True):
        assert len(row) == 6  # three label<TAB>probability pairs, best first
        labels, values = row[0::2], [float(v) for v in row[1::2]]
        assert sorted(labels) == sorted(NAMES)
        assert values == sorted(values, reverse=True)
        for label, value in zip(labels, values, strict=True):
            assert value == pytest.approx(probabilities[NAMES.index(label)], abs=1e-4)


def test_classify_labels_match_the_runs_test_accuracy(export_dir, run_dir, data_dir):
    texts = (data_dir / "test" / "sents.txt").read_text("utf-8")
    gold = (data_dir / "test" / "sentiments.txt").read_text("utf-8").split()
    result = run_cli("export.classify", "--export", export_dir, stdin=texts.encode())
    assert result.code == 0, result.stderr[-3000:]
    labels = [line.split("\t")[0] for line in result.stdout.splitlines()]
    accuracy = 100 * np.mean([a == b for a, b in zip(labels, gold, strict=True)])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert round(accuracy, 2) == metrics["test_accuracy"]


def test_classify_refuses_a_blank_line_and_writes_nothing(export_dir, tmp_path):
    out = tmp_path / "labels.txt"
    out.write_text("earlier\n")
    before = tree_digest(tmp_path)
    result = run_cli("export.classify", "--export", export_dir, "-o", out,
                     stdin="thầy tốt .\n   \nphòng tệ .\n".encode())
    assert_clean_failure(result, 2, "line 2", "empty or only whitespace")
    assert result.stdout == ""
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize("args, words", [
    (["--top-k", "4"], ["--top-k 4", "3 classes"]),
    (["--top-k", "0"], ["--top-k"]),
    (["--variant", "fp16"], ["no fp16 variant of onnx"]),
    (["--runtime", "savedmodel", "--variant", "int8"], ["float32 weights only"]),
])
def test_classify_bad_options(export_dir, args, words):
    result = run_cli("export.classify", "--export", export_dir, *args, stdin="tốt .\n".encode())
    if "--top-k" in args and "0" in args:  # argparse's own usage error
        assert result.code == 2 and "--top-k" in result.stderr
        assert "Traceback" not in result.stderr
        return
    assert_clean_failure(result, 2, *words)


def test_each_tool_refuses_the_other_kind_of_export(export_dir, tmp_path):
    translate = run_cli("export.translate", "--export", export_dir, stdin=b"hello\n")
    assert_clean_failure(translate, 2, "holds a classifier", "export.classify")
    missing = run_cli("export.classify", "--export", tmp_path / "nowhere", stdin=b"a\n")
    assert_clean_failure(missing, 2, "nowhere")


def test_classify_output_inside_the_export_is_refused(export_dir):
    before = tree_digest(export_dir)
    result = run_cli("export.classify", "--export", export_dir, "-o", export_dir / "x.txt",
                     stdin=b"a .\n")
    assert_clean_failure(result, 2, "inside the export directory")
    assert tree_digest(export_dir) == before
