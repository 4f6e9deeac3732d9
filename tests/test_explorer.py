"""The attention explorer: `python -m export --with-attention`, attention.onnx against the Keras
weights, export.parity's attention section, `python -m export.serve`'s JSON API under bad and
concurrent requests, and the page in headless Chromium.

A tiny untrained model (random weights, so its attention is far from uniform) and its
tokenizer are made in-process once for the module and exported once. KT_EXPLORER_RUN names
another run to serve instead (exported here with --with-attention); KT_SCREENSHOT_DIR makes the
browser test save explorer.png there (docs/explorer.png is made that way, from the
demo run; see docs/export.md).
"""

from __future__ import annotations

import html
import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from keras_transformer.decoding import SearchSettings
from tests.browser import chrome, hover_last_row_first_column, needs_chromium
from tests.cli_probe import assert_clean_failure, run_cli, tool_env
from tests.serving import BAD_REQUESTS, WORDS, post, serving, tiny_run

pytestmark = pytest.mark.slow  # the module's fixture exports a model

SENTENCES = ["one red cat", "I saw two big dogs", "three small blue cats", "a dog"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """{run, export}: a run and its ONNX export with attention.onnx."""
    root = tmp_path_factory.mktemp("explorer")
    run = Path(os.environ["KT_EXPLORER_RUN"]) if os.environ.get("KT_EXPLORER_RUN") else None
    if run is None:
        run = root / "run"
        tiny_run(run)
    export = root / "export"
    done = run_cli("export", "--run", run, "--format", "onnx", "--with-attention",
                   "--out", export)
    assert done.code == 0, done.stderr[-3000:]
    assert "attention.onnx" in done.stdout
    return {"root": root, "run": run, "export": export}


@pytest.fixture(scope="module")
def explorer(world):
    from export.explorer import open_explorer

    return open_explorer(world["export"])


def _translate_cli(export: Path, lines: list[str], tmp: Path, *args) -> list[str]:
    """What `python -m export.translate` prints for each line."""
    source = tmp / "lines.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    done = run_cli("export.translate", "--export", export, source, *args)
    assert done.code == 0, done.stderr[-3000:]
    return done.stdout.split("\n")[:-1]


def test_attention_onnx_equals_the_keras_models_weights(world, explorer):
    from export.module import load_float32_model

    model = load_float32_model(world["run"])
    rng = np.random.default_rng(1)
    manifest = explorer.manifest
    for source_length, target_length in ((5, 9), (16, 20)):
        source = rng.integers(4, manifest["vocab"]["source_size"], (1, source_length))
        source[0, -1] = manifest.special_ids["eos"]
        target = rng.integers(4, manifest["vocab"]["target_size"], (1, target_length))
        target[0, 0] = manifest.special_ids["bos"]
        source, target = source.astype(np.int32), target.astype(np.int32)
        got = explorer.backend.attention(source, target)
        memory, mask, encoder = model.encode(source, return_attention_scores=True)
        _, weights = model.decode(target, memory, mask, return_attention_scores=True)
        reference = {"encoder_self": encoder, "decoder_self": weights["self"],
                     "cross": weights["cross"]}
        for kind, layers in reference.items():
            expected = np.stack([np.asarray(w)[0] for w in layers])
            assert got[kind].shape == expected.shape, kind
            np.testing.assert_allclose(got[kind], expected, atol=1e-5, err_msg=kind)
            np.testing.assert_allclose(got[kind].sum(-1), 1.0, atol=1e-5, err_msg=kind)
        assert np.all(np.triu(got["decoder_self"], 1) == 0.0)  # the causal mask, exactly
        assert got["encoder_self"].std() > 0.05  # random weights: far from uniform


def test_parity_checks_the_attention_weights(world, monkeypatch):
    from export import parity
    from export.kinds.decoding import parity as decoding_parity

    lines = []
    assert parity.run(world["export"], world["run"], sentences=4, beam_sentences=2,
                      bleu_sentences=4, out=lines.append)
    report = "\n".join(lines)
    assert "5. attention weights of attention.onnx against keras" in report
    assert report.count("attention.cross") == len(decoding_parity.SHAPES)
    monkeypatch.setattr(decoding_parity, "TOLERANCE", -1.0)
    lines.clear()
    assert not parity.run(world["export"], world["run"], sentences=1, beam_sentences=1,
                          bleu_sentences=1, out=lines.append)
    assert any(line.strip().startswith("FAIL: worst") for line in lines[-4:])


def test_manifest_version_3_still_loads_and_the_explorer_names_the_fix(world, tmp_path):
    from export.common import ExportError, Manifest
    from export.explorer import open_explorer
    from export.kinds import open_export

    data = json.loads((world["export"] / "manifest.json").read_text())
    assert data["manifest_version"] == 4 and data["task"] == "translation"
    assert data["attention"]["file"] == "attention.onnx" and "attention.onnx" in data["files"]
    old = tmp_path / "old"
    shutil.copytree(world["export"], old)
    (old / "attention.onnx").unlink()
    del data["files"]["attention.onnx"], data["attention"], data["task"]
    data["manifest_version"] = 3
    (old / "manifest.json").write_text(json.dumps(data))
    Manifest(old).verify()
    assert Manifest(old).task == "translation"
    assert (open_export(old).translate(SENTENCES, SearchSettings(beam_size=1))
            == open_export(world["export"]).translate(SENTENCES, SearchSettings(beam_size=1)))
    with pytest.raises(ExportError, match="--with-attention"):
        open_explorer(old)
    data["manifest_version"] = 5
    (old / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ExportError, match="manifest_version 5"):
        Manifest(old)
    refused = run_cli("export", "--run", world["run"], "--format", "tflite", "--with-attention",
                      "--out", tmp_path / "no_onnx")
    assert_clean_failure(refused, 2, "--with-attention needs the onnx format")
    assert not (tmp_path / "no_onnx").exists()
    # --quantize with no format it applies to once made no variant and said nothing.
    for fmt, quantize in (("savedmodel", "int8"), ("savedmodel", "all"), ("onnx", "fp16")):
        refused = run_cli("export", "--run", world["run"], "--format", fmt, "--quantize",
                          quantize, "--out", tmp_path / "no_variant")
        assert_clean_failure(refused, 2, f"--quantize {quantize}", f"--format {fmt}")
        assert not (tmp_path / "no_variant").exists()


def test_explain_gives_export_translates_output_and_matching_shapes(world, explorer, tmp_path):
    # One line per file: in a file of several, a search that reaches its length limit gets
    # the limit of its batch's longest sentence.
    for sentence in SENTENCES:
        (output,) = _translate_cli(world["export"], [sentence], tmp_path)
        result = explorer.explain(sentence)
        assert result["output"] == output
        layers, heads = explorer.num_decoder_layers, explorer.num_heads
        s, t = len(result["source_tokens"]), len(result["output_tokens"])
        assert result["source_tokens"][-1] == "</s>"
        assert result["decoder_input_tokens"][0] == "<s>"
        assert result["decoder_input_tokens"][1:] == result["output_tokens"][:-1]
        attention = {k: np.array(v) for k, v in result["attention"].items()}
        assert attention["encoder_self"].shape == (explorer.num_layers, heads, s, s)
        assert attention["decoder_self"].shape == (layers, heads, t, t)
        assert attention["cross"].shape == (layers, heads, t, s)
        # The weights of the generated tokens, fed again: what the API answered.
        sp = explorer.translator.source_sp
        source = sp.encode(sentence) + [explorer.translator.eos_id]
        target = [explorer.translator.target_sp.piece_to_id(p)
                  for p in result["decoder_input_tokens"]]
        again = explorer.backend.attention([source], [target])
        for kind in attention:
            np.testing.assert_array_equal(attention[kind], again[kind])


def test_summaries_truncate_over_long_text_as_export_translate_does(world, tmp_path):
    from export.explorer import InputError, open_explorer

    long_text = " ".join(["I saw three big dogs"] * 8)
    with pytest.raises(InputError, match="max_source_length=16"):
        open_explorer(world["export"]).explain(long_text)
    summaries = tmp_path / "summaries"
    shutil.copytree(world["export"], summaries)
    data = json.loads((summaries / "manifest.json").read_text())
    data["task"] = "summarization"
    (summaries / "manifest.json").write_text(json.dumps(data))
    result = open_explorer(summaries).explain(long_text)
    assert result["truncated"] and len(result["source_tokens"]) == 16
    assert result["output"] == _translate_cli(summaries, [long_text], tmp_path)[0]
    assert not open_explorer(summaries).explain("one red cat")["truncated"]


# --- the server -----------------------------------------------------------------------------


def test_serve_refuses_what_it_cannot_serve_in_one_line(world, tmp_path):
    import socket

    def serve(*args):
        return run_cli("export.serve", *args, env={"PYTHONPATH": tool_env()["PYTHONPATH"]},
                       timeout=120)

    assert_clean_failure(serve("--export", tmp_path / "missing"), 2,
                         "export directory not found")
    without = tmp_path / "without"
    shutil.copytree(world["export"], without)
    data = json.loads((without / "manifest.json").read_text())
    del data["attention"]
    (without / "manifest.json").write_text(json.dumps(data))
    assert_clean_failure(serve("--export", without, "--port", "0"), 2, "--with-attention")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        port = busy.getsockname()[1]
        assert_clean_failure(serve("--export", world["export"], "--port", port), 2,
                             f"cannot listen on 127.0.0.1:{port}", "--port")
    finally:
        busy.close()
    usage = serve("--export", world["export"], "--port", "70000")
    assert usage.code == 2 and "from 0 to 65535" in usage.stderr



@pytest.fixture(scope="module")
def server(world):
    """The base URL of the explorer of the translator's export, started once."""
    with serving(world["export"], world["root"] / "serve.log") as url:
        yield url


def test_bad_requests_get_a_clear_answer_and_the_server_keeps_serving(server, explorer):
    import httpx

    for body, status, words in BAD_REQUESTS:
        answer = post(server, body)
        assert answer.status_code == status, (body[:60], answer.text)
        assert words in answer.json()["error"], (body[:60], answer.json())
    assert httpx.get(f"{server}/translate").status_code == 405
    other = post(server, b'{"text": "one red cat"}', route="/classify")
    assert other.status_code == 404 and "/translate" in other.json()["error"]
    assert f"translator's export ({explorer.task})" in other.json()["error"]
    health = httpx.get(f"{server}/health").json()
    assert health["status"] == "ok" and health["heads"] == explorer.num_heads
    assert health["kind"] == "translator"
    good = post(server, json.dumps({"text": "one red cat"}).encode())
    assert good.status_code == 200
    assert good.json()["output"] == explorer.explain("one red cat")["output"]


def test_fifty_concurrent_requests_each_get_their_own_answer(server, explorer):
    rng = np.random.default_rng(3)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 9))) for _ in range(45)]
    texts += ["", "   ", "one\ntwo", " ".join(["three big dogs"] * 9), "I saw one cat"]
    expected = {}
    for text in set(texts):
        try:
            expected[text] = explorer.explain(text)
        except ValueError:
            expected[text] = None
    barrier = threading.Barrier(len(texts))
    answers: list = [None] * len(texts)

    def ask(i: int) -> None:
        barrier.wait()
        answers[i] = post(server, json.dumps({"text": texts[i]}).encode())

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    for text, answer in zip(texts, answers, strict=True):
        want = expected[text]
        if want is None:
            assert answer.status_code == 422, (text, answer.text)
            continue
        assert answer.status_code == 200, (text, answer.text)
        got = answer.json()
        for key in ("output", "source_tokens", "output_tokens", "decoder_input_tokens"):
            assert got[key] == want[key], (text, key)
        for kind, weights in want["attention"].items():
            np.testing.assert_allclose(got["attention"][kind], weights, atol=1e-6)


# --- the page in a real browser -------------------------------------------------------------

@needs_chromium
def test_page_in_headless_chromium_shows_the_translation_and_the_apis_weights(
        world, server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    sentence = "I saw two big dogs" if "KT_EXPLORER_RUN" not in os.environ else \
        "she bought three small dogs"
    expected = _translate_cli(world["export"], [sentence], tmp_path)[0]
    api = post(server, json.dumps({"text": sentence}).encode()).json()

    driver = chrome()
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(server + "/")
        status = driver.find_element(By.ID, "status")
        wait.until(lambda d: status.get_attribute("data-state") == "ready")
        assert driver.execute_script("return typeof Plotly") == "object"  # served locally
        driver.find_element(By.ID, "text").send_keys(sentence)
        driver.find_element(By.ID, "go").click()
        wait.until(lambda d: status.get_attribute("data-state") in ("done", "error"))
        assert driver.find_element(By.ID, "error").text == ""
        assert driver.find_element(By.ID, "output").text == expected == api["output"]

        layers = len(api["attention"]["cross"])
        heads = len(api["attention"]["cross"][0])
        for kind, layer, head in (("cross", layers - 1, heads - 1), ("decoder_self", 0, 1),
                                  ("encoder_self", layers - 1, 0)):
            Select(driver.find_element(By.ID, "kind")).select_by_value(kind)
            Select(driver.find_element(By.ID, "layer")).select_by_value(str(layer))
            Select(driver.find_element(By.ID, "head")).select_by_value(str(head))
            trace = driver.execute_script(
                "const t = document.getElementById('heatmap').data[0];"
                "return {z: t.z, customdata: t.customdata};")
            assert trace["z"] == api["attention"][kind][layer][head], kind
            rows = api["source_tokens"] if kind == "encoder_self" else api["output_tokens"]
            columns = {"cross": api["source_tokens"], "encoder_self": api["source_tokens"],
                       "decoder_self": api["decoder_input_tokens"]}[kind]
            # Escaped for Plotly's labels, where "<s>" would be a strike-through tag.
            assert trace["customdata"][-1][0] == [html.escape(rows[-1], quote=False),
                                                  html.escape(columns[0], quote=False)]

        # Hover the cell (last output token, first source token) of the cross-attention.
        Select(driver.find_element(By.ID, "kind")).select_by_value("cross")
        Select(driver.find_element(By.ID, "layer")).select_by_value(str(layers - 1))
        Select(driver.find_element(By.ID, "head")).select_by_value(str(heads - 1))
        hover = hover_last_row_first_column(driver, wait)
        weight = api["attention"]["cross"][layers - 1][heads - 1][-1][0]
        assert hover.startswith(f"{api['output_tokens'][-1]} → {api['source_tokens'][0]}"), hover
        assert f"weight {weight:.4f}" in hover, hover
        if os.environ.get("KT_SCREENSHOT_DIR"):
            driver.save_screenshot(str(Path(os.environ["KT_SCREENSHOT_DIR"]) / "explorer.png"))
    finally:
        driver.quit()
