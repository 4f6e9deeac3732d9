"""The attention explorer over a classifier's export: `python -m export --with-attention` on a
classification run, its attention.onnx against the Keras model's weights, export.parity's
attention section, `python -m export.serve`'s POST /classify against `python -m
export.classify` under bad and concurrent requests, and the page in headless Chromium.

The classification run is the one tests/test_export_classifier.py trains (its fixtures), and
the server helpers are tests/test_explorer.py's, the browser tests/browser.py's.
"""

from __future__ import annotations

import html
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from tests import classifier_run
from tests.browser import chrome, hover_last_row_first_column, needs_chromium
from tests.classifier_run import NAMES, sentences
from tests.cli_probe import assert_clean_failure, run_cli
from tests.serving import BAD_REQUESTS, post, serving

pytestmark = pytest.mark.slow  # trains and exports a classifier

# The module-scoped fixtures of the trained run, shared with the other classifier tests.
data_dir, run_dir = classifier_run.data_dir, classifier_run.run_dir

MAX_LENGTH = 24  # the run's data.max_source_length
LONG_TEXT = " ".join(["thầy giảng bài tốt ."] * 8)  # over MAX_LENGTH pieces: truncated


@pytest.fixture(scope="module")
def export(run_dir):  # noqa: F811
    """The run's ONNX export with attention.onnx, inside the run (so parity finds the run)."""
    out = run_dir / "export"
    done = run_cli("export", "--run", run_dir, "--format", "onnx", "--with-attention",
                   "--out", out)
    assert done.code == 0, done.stderr[-3000:]
    assert "attention.onnx" in done.stdout
    return out


@pytest.fixture(scope="module")
def explorer(export):
    from export.explorer import open_explorer

    return open_explorer(export)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Sentences of the run's kind (not its training data), one over-long."""
    return sentences(12, seed=7)[0] + [LONG_TEXT]


def _classify_cli(export: Path, lines: list[str], tmp: Path) -> list[list[str]]:
    """What `python -m export.classify --top-k <all>` prints for each line, each in a batch of
    its own (--batch-size 1: no padding, as the explorer runs one sentence)."""
    source = tmp / "lines.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    done = run_cli("export.classify", "--export", export, source, "--top-k", len(NAMES),
                   "--batch-size", "1")
    assert done.code == 0, done.stderr[-3000:]
    return [line.split("\t") for line in done.stdout.splitlines()]


def test_manifest_records_the_classifiers_attention_graph(export):
    from export.common import CLASSIFIER_ATTENTION_INTERFACE, Manifest

    manifest = Manifest(export)
    manifest.verify()
    assert manifest.kind == "classifier" and manifest.task == "classification"
    assert manifest["attention"] == {"file": "attention.onnx", "opset": 17,
                                     "interface": CLASSIFIER_ATTENTION_INTERFACE}
    assert "attention.onnx" in manifest["files"]
    assert set(manifest["formats"]) == {"onnx"}  # the classify graphs stay as they were
    assert manifest.format_files("onnx") == {"classifier": "classifier.onnx"}


def test_attention_onnx_equals_the_keras_models_weights(export):
    """Padded batches: every row sums to 1, the columns of PAD keys are exactly 0, and the
    weights and probabilities are the Keras model's."""
    from export.common import Manifest
    from export.kinds.classifier.runtime import attention_runtime
    from export.kinds.encoder_only.module import load_float32
    from export.kinds.encoder_only.parity import random_batch
    from export.module import load_trained

    manifest = Manifest(export)
    run = export.parent
    model = load_float32(run, load_trained(run))
    attention = attention_runtime(manifest)
    layers, heads = manifest.model["num_encoder_layers"], manifest.model["num_heads"]
    for batch, length, seed in ((1, 6, 0), (5, 19, 1), (8, MAX_LENGTH, 2)):
        ids = random_batch(manifest, batch, length, seed)
        got = attention(ids)
        weights = got["encoder_self"]
        assert weights.shape == (batch, layers, heads, length, length)
        states, mask, reference = model.encode(ids, return_attention_scores=True)
        expected = np.stack([np.asarray(w) for w in reference], axis=1)
        np.testing.assert_allclose(weights, expected, atol=1e-5)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        pad = np.broadcast_to((ids == manifest.special_ids["pad"])[:, None, None, None, :],
                              weights.shape)
        if batch > 1:
            assert pad.any()  # random lengths: some rows are padded
        assert np.all(weights[pad] == 0.0)
        logits = np.asarray(model.classify(states, mask))
        exp = np.exp(logits - logits.max(-1, keepdims=True))
        np.testing.assert_allclose(got["probabilities"], exp / exp.sum(-1, keepdims=True),
                                   atol=1e-5)


def test_parity_checks_the_attention_weights(export, monkeypatch):
    from export import parity
    from export.kinds.classifier import parity as classifier_parity

    lines = []
    assert parity.run(export, sentences=8, out=lines.append)  # the run: export's parent
    report = "\n".join(lines)
    assert "2. attention.onnx against keras" in report
    assert "attention.encoder_self" in report and "attention.probabilities" in report
    monkeypatch.setattr(classifier_parity, "TOLERANCE", -1.0)
    lines.clear()
    assert not parity.run(export, sentences=1, out=lines.append)
    assert any("attention.encoder_self" in line and line.endswith("FAIL") for line in lines)


def test_explain_gives_export_classifys_label_and_probabilities(export, explorer, texts,
                                                                 tmp_path):
    printed = _classify_cli(export, texts, tmp_path)
    layers, heads = explorer.num_layers, explorer.num_heads
    shown = set()
    for text, row in zip(texts, printed, strict=True):
        result = explorer.explain(text)
        assert [result["label"], f"{result['probability']:.4f}"] == row[:2], text
        assert result["probability"] == result["probabilities"][result["label"]]
        assert list(result["probabilities"]) == NAMES
        for label, value in zip(row[0::2], row[1::2], strict=True):
            assert f"{result['probabilities'][label]:.4f}" == value
        assert sum(result["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        tokens = result["tokens"]
        assert tokens[-1] == "</s>"
        pieces = explorer.classifier.sp.encode(text, out_type=str)
        cut = len(pieces) + 1 > MAX_LENGTH
        assert result["truncated"] == cut
        assert tokens[:-1] == pieces[:MAX_LENGTH - 1 if cut else len(pieces)]
        shown.add(cut)
        weights = np.array(result["attention"]["encoder_self"])
        assert list(result["attention"]) == ["encoder_self"]
        assert weights.shape == (layers, heads, len(tokens), len(tokens))
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert shown == {True, False}  # whole sentences and truncated ones


def test_each_explorer_refuses_the_other_kind_and_serve_names_the_fix(export, tmp_path):
    from export.common import ExportError, Manifest
    from export.explorer import Explorer, open_explorer

    with pytest.raises(ExportError, match="export.classify"):
        Explorer(Manifest(export), None)
    with pytest.raises(ValueError, match="--beam and --alpha"):
        open_explorer(export, beam_size=2)

    def serve(*args):
        return run_cli("export.serve", *args, timeout=120)

    assert_clean_failure(serve("--export", export, "--port", "0", "--alpha", "1"), 2,
                         "holds a classifier", "--alpha")
    without = tmp_path / "without"
    shutil.copytree(export, without)
    data = json.loads((without / "manifest.json").read_text())
    (without / "attention.onnx").unlink()
    del data["attention"], data["files"]["attention.onnx"]
    (without / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ExportError, match="--with-attention"):
        open_explorer(without)
    assert_clean_failure(serve("--export", without, "--port", "0"), 2, "--with-attention")


# --- the server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(export):
    with serving(export, export.parent / "serve.log") as url:
        yield url


# The translator's bad requests, but for length: a classifier truncates as export.classify.
CLASSIFIER_BAD_REQUESTS = [r for r in BAD_REQUESTS if "max_source_length" not in r[2]]


def test_bad_requests_get_a_clear_answer_and_the_server_keeps_serving(server, explorer):
    import httpx

    assert len(CLASSIFIER_BAD_REQUESTS) == len(BAD_REQUESTS) - 1
    for body, status, words in CLASSIFIER_BAD_REQUESTS:
        answer = post(server, body, route="/classify")
        assert answer.status_code == status, (body[:60], answer.text)
        assert words in answer.json()["error"], (body[:60], answer.json())
    other = post(server, json.dumps({"text": "thầy tốt ."}).encode(), route="/translate")
    assert other.status_code == 404 and "/classify" in other.json()["error"]
    assert httpx.get(f"{server}/classify").status_code == 405
    health = httpx.get(f"{server}/health").json()
    assert health == {"status": "ok", **explorer.info()}
    assert health["kind"] == "classifier" and health["labels"] == NAMES
    long = post(server, json.dumps({"text": LONG_TEXT}).encode(), route="/classify")
    assert long.status_code == 200 and long.json()["truncated"]
    assert long.json()["label"] == explorer.explain(LONG_TEXT)["label"]


def test_thirty_concurrent_requests_each_get_their_own_answer(server, explorer):
    texts = sentences(24, seed=11)[0] + ["", "   ", "một\nhai", LONG_TEXT, 7, "thầy tệ ."]
    expected = {}
    for text in texts:
        try:
            expected[json.dumps(text)] = explorer.explain(text)
        except ValueError:
            expected[json.dumps(text)] = None
    barrier = threading.Barrier(len(texts))
    answers: list = [None] * len(texts)

    def ask(i: int) -> None:
        barrier.wait()
        answers[i] = post(server, json.dumps({"text": texts[i]}).encode(), route="/classify")

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    for text, answer in zip(texts, answers, strict=True):
        want = expected[json.dumps(text)]
        if want is None:
            assert answer.status_code == 422, (text, answer.text)
            continue
        assert answer.status_code == 200, (text, answer.text)
        got = answer.json()
        for key in ("label", "probability", "probabilities", "tokens", "truncated"):
            assert got[key] == want[key], (text, key)
        np.testing.assert_allclose(got["attention"]["encoder_self"], want["attention"]["encoder_self"],
                                   atol=1e-6)


# --- the page in a real browser -------------------------------------------------------------


@needs_chromium
def test_page_in_headless_chromium_shows_the_label_probabilities_and_the_apis_weights(
        export, server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    sentence = "giảng viên nhiệt tình tốt ."
    (printed,) = _classify_cli(export, [sentence], tmp_path)
    api = post(server, json.dumps({"text": sentence}).encode(), route="/classify").json()

    driver = chrome()
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(server + "/")
        status = driver.find_element(By.ID, "status")
        wait.until(lambda d: status.get_attribute("data-state") == "ready")
        assert driver.find_element(By.ID, "go").text == "Classify"
        kinds = [o.get_attribute("value") for o in
                 Select(driver.find_element(By.ID, "kind")).options]
        assert kinds == ["encoder_self"]  # a classifier has its encoder's self-attention only
        assert not driver.find_element(By.ID, "output-tokens-row").is_displayed()
        driver.find_element(By.ID, "text").send_keys(sentence)
        driver.find_element(By.ID, "go").click()
        wait.until(lambda d: status.get_attribute("data-state") in ("done", "error"))
        assert driver.find_element(By.ID, "error").text == ""
        assert driver.find_element(By.ID, "output").text == printed[0] == api["label"]
        # Every class with its probability, best first, as export.classify --top-k prints.
        rows = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
                for row in driver.find_elements(By.CSS_SELECTOR, "#probabilities tr")]
        assert [[label, value] for label, _, value in rows] == [
            printed[i:i + 2] for i in range(0, len(printed), 2)]
        assert driver.find_element(By.ID, "source-tokens").text == " ".join(api["tokens"])

        weights = api["attention"]["encoder_self"]
        layers, heads = len(weights), len(weights[0])
        tokens = [html.escape(t, quote=False) for t in api["tokens"]]
        for layer, head in ((layers - 1, heads - 1), (0, 0)):
            Select(driver.find_element(By.ID, "layer")).select_by_value(str(layer))
            Select(driver.find_element(By.ID, "head")).select_by_value(str(head))
            trace = driver.execute_script(
                "const t = document.getElementById('heatmap').data[0];"
                "return {z: t.z, customdata: t.customdata};")
            assert trace["z"] == weights[layer][head]
            assert trace["customdata"][-1][0] == [tokens[-1], tokens[0]]

        # Hover the cell (last token, first token) of the last layer's first head.
        Select(driver.find_element(By.ID, "layer")).select_by_value(str(layers - 1))
        hover = hover_last_row_first_column(driver, wait)
        assert hover.startswith(f"{api['tokens'][-1]} → {api['tokens'][0]}"), hover
        assert f"weight {weights[layers - 1][0][-1][0]:.4f}" in hover, hover
    finally:
        driver.quit()


def test_the_api_batches_sentences_and_answers_each_as_export_classify_alone(export, texts):
    """export.api's engine for a classifier: sentences of several lengths (one truncated)
    from concurrent requests, batched and padded together, each answered with the label and
    probabilities the Classifier gives it alone; a blank one is refused naming it."""
    from export.engines import open_engine
    from export.explorer import InputError
    from export.kinds import open_export
    from tests.serving import batched

    engine = open_engine(export)
    requests = [texts[i:i + 4] for i in range(0, len(texts), 4)]
    outputs, _, sizes = batched(engine, requests)
    classifier = open_export(export)
    for inputs, answer in zip(requests, outputs, strict=True):
        for text, got in zip(inputs, answer, strict=True):
            [alone] = classifier.probabilities([text])
            assert got["label"] == classifier.labels[int(np.argmax(alone))]
            np.testing.assert_allclose(list(got["scores"].values()), alone, atol=1e-5)
            assert got["score"] == max(got["scores"].values())
    assert sizes == [len(texts)]
    with pytest.raises(InputError, match=r"inputs\[1\] is empty"):
        engine.prepare(["good", "  "], {})
