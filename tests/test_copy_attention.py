import json

import keras
import numpy as np
import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.decoding import SearchSettings
from keras_transformer.layers.copy_attention import (
    CopyGate,
    copy_distribution,
    copy_mixture_log_probs,
)
from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
from keras_transformer.models.transformer import Transformer
from tests.conftest import random_ids
from tests.reference import copy_mixture, label_smoothed_loss, softmax

pytestmark = pytest.mark.usefixtures("seeded")


def _inputs(rng, rows=4, source=7, vocab=12):
    logits = rng.normal(size=(rows, vocab)).astype("float32") * 3
    gate = rng.normal(size=(rows, 1)).astype("float32")
    attention = softmax(rng.normal(size=(rows, source))).astype("float32")
    # Repeated ids in every row: 5 twice, 9 three times.
    source_ids = rng.integers(4, vocab, size=(rows, source)).astype("int32")
    source_ids[:, :2] = 5
    source_ids[:, 2:5] = 9
    return logits, gate, attention, source_ids


def test_mixture_matches_the_numpy_reference_with_repeated_source_ids():
    logits, gate, attention, source_ids = _inputs(np.random.default_rng(0))
    got = np.exp(np.asarray(copy_mixture_log_probs(logits, gate, attention, source_ids)))
    want = copy_mixture(logits, gate[:, 0], attention, source_ids)
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)


def test_gate_at_one_gives_the_attention_mass_per_source_id():
    attention = np.array([[0.1, 0.2, 0.3, 0.4]], "float32")
    source_ids = np.array([[7, 5, 7, 7]], "int32")
    logits = np.zeros((1, 10), "float32")
    got = np.exp(np.asarray(copy_mixture_log_probs(logits, np.array([[60.0]], "float32"),
                                                   attention, source_ids)))
    want = np.zeros(10)
    want[7], want[5] = 0.1 + 0.3 + 0.4, 0.2
    np.testing.assert_allclose(got[0], want, atol=1e-6)
    np.testing.assert_allclose(np.asarray(copy_distribution(attention, source_ids, 10))[0],
                               want, atol=1e-7)


def test_gate_at_zero_gives_the_vocabulary_softmax():
    logits, _, attention, source_ids = _inputs(np.random.default_rng(1))
    gate = np.full((logits.shape[0], 1), -60.0, "float32")
    got = np.exp(np.asarray(copy_mixture_log_probs(logits, gate, attention, source_ids)))
    np.testing.assert_allclose(got, softmax(logits.astype(np.float64)), atol=1e-6)


def test_copy_distribution_of_every_target_position_reads_its_own_attention():
    rng = np.random.default_rng(2)
    attention = softmax(rng.normal(size=(2, 3, 5))).astype("float32")  # (B, T, S)
    source_ids = rng.integers(0, 6, size=(2, 5)).astype("int32")
    got = np.asarray(copy_distribution(attention, source_ids, 6))
    for b in range(2):
        for t in range(3):
            want = np.zeros(6)
            np.add.at(want, source_ids[b], attention[b, t])
            np.testing.assert_allclose(got[b, t], want, atol=1e-7)


def test_gradient_is_finite_where_the_copy_mass_is_zero():
    import tensorflow as tf

    logits, gate, attention, source_ids = (tf.constant(x) for x in
                                           _inputs(np.random.default_rng(3)))
    with tf.GradientTape() as tape:
        tape.watch([logits, gate, attention])
        loss = tf.reduce_sum(copy_mixture_log_probs(logits, gate, attention, source_ids))
    for grad in tape.gradient(loss, [logits, gate, attention]):
        assert np.all(np.isfinite(grad.numpy()))


def _copy_model(tiny_config, **changes):
    model = Transformer(tiny_config.replace(share_embeddings=True, copy_attention=True,
                                            **changes))
    model.build()
    return model


def test_model_output_is_the_mixture_of_its_own_logits_gate_and_attention(tiny_config):
    rng = np.random.default_rng(4)
    model = _copy_model(tiny_config)
    src, tgt = random_ids(rng, 2, 7), random_ids(rng, 2, 5)
    src[:, 1] = src[:, 4]  # a repeated source id
    src[1, 5:] = 0
    log_probs, scores = model.decode(tgt, *model.encode(src), source_ids=src,
                                     return_attention_scores=True)
    memory, mask = model.encode(src)
    x = model.target_embedding(tgt)
    hidden = model.decoder(x, memory, mask)
    logits = np.asarray(model.logits(hidden)).reshape(-1, 40)
    gate = np.asarray(scores["copy_gate"]).reshape(-1)
    attention = np.asarray(scores["cross"][-1]).mean(axis=1)  # the heads' mean, (B, T, S)
    np.testing.assert_allclose(np.asarray(scores["copy"]), attention, atol=1e-6)
    want = copy_mixture(logits, np.log(gate / (1 - gate)), attention.reshape(-1, 7),
                        np.repeat(src, 5, axis=0))
    np.testing.assert_allclose(np.exp(np.asarray(log_probs)).reshape(-1, 40), want, atol=1e-5)
    assert np.all(np.asarray(scores["copy"])[1, :, 5:] == 0.0)  # padding is never copied


def test_loss_on_the_mixture_equals_the_reference(tiny_config):
    rng = np.random.default_rng(5)
    model = _copy_model(tiny_config)
    src, tgt = random_ids(rng, 2, 6), random_ids(rng, 2, 5)
    labels = random_ids(rng, 2, 5)
    labels[:, :2] = src[:, :2]  # targets that are in the source
    labels[1, 3:] = 0
    log_probs = np.asarray(model((src, tgt)))
    got = float(MaskedLabelSmoothedCrossEntropy(0.1)(labels, log_probs))
    # The reference's own softmax of log-probabilities is the mixture again.
    assert got == pytest.approx(label_smoothed_loss(labels, log_probs, 0.1), rel=1e-5)


def test_copy_attention_needs_one_shared_vocabulary():
    with pytest.raises(ValueError, match="share_embeddings=True"):
        TransformerConfig.preset("tiny", copy_attention=True)
    with pytest.raises(ValueError, match="copy_head"):
        TransformerConfig.preset("tiny", share_embeddings=True, copy_attention=True,
                                 copy_head=8)


def test_decode_without_source_ids_is_refused(tiny_config):
    model = _copy_model(tiny_config)
    src = random_ids(np.random.default_rng(6), 1, 4)
    with pytest.raises(ValueError, match="needs source_ids"):
        model.decode(src, *model.encode(src))


def test_copy_gate_round_trips_its_config():
    gate = CopyGate(8, name="g")
    clone = CopyGate.from_config(gate.get_config())
    assert clone.d_model == 8
    assert isinstance(keras.layers.deserialize(keras.layers.serialize(gate)), CopyGate)


def _export_copy_model(tmp_path, **changes):
    from export.kinds.decoding import export_onnx

    model = Transformer(TransformerConfig.preset(
        "tiny", d_model=32, num_heads=4, d_ff=64, source_vocab_size=50, target_vocab_size=50,
        max_source_length=16, max_target_length=16, share_embeddings=True,
        copy_attention=True, **changes), dtype="float32")
    model.build()
    rng = np.random.default_rng(0)
    # Non-zero biases and a gate that copies about half the mass: every weight matters.
    model.set_weights([w + rng.normal(scale=0.3, size=w.shape).astype(np.float32)
                       for w in model.get_weights()])
    export_onnx(model, tmp_path, int8=False)
    return model, rng


@pytest.mark.parametrize("changes", [{}, {"copy_head": 2, "pre_norm": True}],
                         ids=["heads-mean", "head-2-pre-ln"])
def test_onnx_step_gives_the_keras_mixture_with_repeated_source_ids(tmp_path, changes):
    import onnxruntime as ort

    from keras_transformer.cache.layout import cache_names, memory_names

    model, rng = _export_copy_model(tmp_path, **changes)
    source = rng.integers(4, 50, (3, 9)).astype(np.int32)
    source[:, 1:4] = source[:, :1]  # one id four times in every row
    source[2, 6:] = model.config.pad_id
    memory, mask = model.encode_for_decoding(source)
    memory = [np.asarray(t) for t in memory]
    names = memory_names(2, copy_attention=True)
    encoder = ort.InferenceSession(str(tmp_path / "encoder.onnx"))
    *got_memory, got_mask = encoder.run([*names, "memory_mask"], {"source_ids": source})
    for got, want in zip(got_memory, memory, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_array_equal(got_memory[-1], source)
    cache = [rng.normal(size=(3, 4, 6, 8)).astype(np.float32) for _ in range(4)]
    tokens = source[:, 0].copy()
    step = ort.InferenceSession(str(tmp_path / "decoder_step.onnx"))
    for index in (0, 5):
        feeds = {"tokens": tokens, "memory_mask": got_mask, "index": np.asarray(index, np.int32)}
        feeds.update(zip(names, got_memory, strict=True))
        feeds.update(zip(cache_names(2), cache, strict=True))
        log_probs, rows = step.run(["logits", "step_key_values"], feeds)
        want, want_rows = model.decode_step_key_values(tokens, memory, mask, cache, index)
        np.testing.assert_allclose(log_probs, np.asarray(want), atol=1e-4)
        np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(rows, np.asarray(want_rows), atol=1e-5)


def test_search_graph_of_a_copy_model_gives_the_numpy_search_tokens(tmp_path):
    import onnxruntime as ort

    from keras_transformer.translator import keras_translator

    model, rng = _export_copy_model(tmp_path)
    source = rng.integers(4, 50, (4, 10)).astype(np.int32)
    source[:, 2:5] = source[:, :1]
    source[:, -1] = model.config.eos_id
    search = ort.InferenceSession(str(tmp_path / "search.onnx"))
    for beam in (1, 3):
        tokens, _ = search.run(["tokens", "scores"], {
            "source_ids": source, "max_length": np.asarray(12, np.int32),
            "row_max_length": np.full(len(source), 12, np.int32),
            "beam_size": np.asarray(beam, np.int32), "alpha": np.asarray(0.6, np.float64),
            "no_repeat_ngram_size": np.asarray(0, np.int32),
            "min_length": np.asarray(2, np.int32)})
        settings = SearchSettings(beam_size=beam, alpha=0.6, max_length=12, min_length=2)
        want = keras_translator(model).search_ids(source, settings).to_lists(
            model.config.eos_id)
        got = [list(row[: list(row).index(3) + 1] if 3 in row else row) for row in tokens]
        assert got == [list(w) for w in want], beam


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """(data directory, run directory) of a tiny summarizer with copy attention."""
    import random
    import subprocess
    import sys

    import yaml

    from tests.cli_probe import ROOT, tool_env
    from tests.news_data import make_article, tiny_run_config, write_tsv

    data = tmp_path_factory.mktemp("copy_run")
    rng = random.Random(3)
    for name, count in (("train.tsv.gz", 600), ("dev.tsv.gz", 30), ("test.tsv", 30)):
        write_tsv(data / name, ["\t".join([*make_article(rng), "tiêu đề"])
                                for _ in range(count)])
    config = tiny_run_config(data)
    config["model"]["overrides"]["copy_attention"] = True
    config["tokenizer"]["joint"] = True
    (data / "copy.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    out = data / "run"
    result = subprocess.run([sys.executable, "-m", "train", "--config", str(data / "copy.yaml"),
                             "--out", str(out)], cwd=ROOT, env=tool_env(), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return data, out


@pytest.mark.slow
def test_copy_summarizer_exports_to_every_format_with_parity(copy_run, tmp_path):
    """A trained copy-attention summarizer: SavedModel, ONNX (step and search.onnx) and TFLite
    give Keras's tensors and tokens (export.parity: greedy and beam, every runtime)."""
    from export import parity
    from export.exporters import export_run

    _, run = copy_run
    out = tmp_path / "export"
    export_run(run, out, formats=("savedmodel", "onnx", "tflite"), with_attention=True)
    printed = []
    sources = (run / "test.src").read_text(encoding="utf-8").splitlines()[:8]
    references = (run / "test.ref").read_text(encoding="utf-8").splitlines()[:8]
    assert parity.run(out, run, sentences=8, beam_sentences=4, bleu_sentences=8,
                      out=printed.append, sources=sources, references=references), \
        "\n".join(printed)
    assert any("copy_source_ids" in line for line in printed), "\n".join(printed)
    _explorer_shows_the_keras_copy_distribution(out, run, sources[0])
    _page_draws_the_copy_map_and_gates(out, sources[0], tmp_path)


def _explorer_shows_the_keras_copy_distribution(export_dir, run, article):
    """The explorer's copy map and gates (attention.onnx) are the Keras model's own."""
    import keras

    from export.explorer import open_explorer

    explorer = open_explorer(export_dir)
    assert explorer.info()["copy_attention"] is True
    answer = explorer.explain(article)
    sp = explorer.translator.source_sp
    source = np.array([[sp.piece_to_id(p) for p in answer["source_tokens"]]], np.int32)
    produced = [sp.piece_to_id(p) for p in answer["output_tokens"]]
    target_in = np.array([[explorer.translator.bos_id, *produced[:-1]]], np.int32)
    model = keras.models.load_model(run / "model.keras")
    _, weights = model.decode(target_in, *model.encode(source), source_ids=source,
                              return_attention_scores=True)
    copy = np.asarray(answer["attention"]["copy"])
    assert copy.shape == (1, 1, len(produced), source.shape[1])
    np.testing.assert_allclose(copy[0, 0], np.asarray(weights["copy"])[0], atol=1e-4)
    np.testing.assert_allclose(answer["copy_gate"], np.asarray(weights["copy_gate"])[0],
                               atol=1e-4)


def _page_draws_the_copy_map_and_gates(export_dir, article, tmp_path):
    """In headless Chromium, the page's kind "copy" draws the server's copy map, its rows
    labelled with each output token's gate, and shades the output tokens by their gates."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from tests.browser import CHROMEDRIVER, CHROMIUM, chrome
    from tests.serving import post, serving

    if CHROMIUM is None or CHROMEDRIVER is None:
        return  # the API's copy map is checked above; .ci/run installs the browser
    with serving(export_dir, tmp_path / "serve.log") as url:
        api = post(url, json.dumps({"text": article}).encode(), route="/translate").json()
        driver = chrome()
        try:
            wait = WebDriverWait(driver, 120)
            driver.get(url + "/")
            status = driver.find_element(By.ID, "status")
            wait.until(lambda d: status.get_attribute("data-state") == "ready")
            driver.find_element(By.ID, "text").send_keys(article)
            driver.find_element(By.ID, "go").click()
            wait.until(lambda d: status.get_attribute("data-state") in ("done", "error"))
            assert driver.find_element(By.ID, "error").text == ""
            Select(driver.find_element(By.ID, "kind")).select_by_value("copy")
            trace = driver.execute_script(
                "const t = document.getElementById('heatmap').data[0];"
                "return {z: t.z, rows: t.customdata.map(row => row[0][0])};")
            shades = driver.execute_script(
                "return [...document.querySelectorAll('#output-tokens span')]"
                ".map(s => s.title);")
        finally:
            driver.quit()
    assert trace["z"] == api["attention"]["copy"][0][0]
    gates = api["copy_gate"]
    assert [label.rsplit(" (g ", 1)[1] for label in trace["rows"]] == \
        [f"{g:.2f})" for g in gates]
    assert shades == [f"copy gate g = {g:.3f}" for g in gates]


def test_attention_maps_give_the_copy_distribution_and_gates_and_draw_them(tiny_config,
                                                                           tmp_path):
    from train.attention import attention_maps
    from train.visualize import draw, positional_arrays

    rng = np.random.default_rng(7)
    model = _copy_model(tiny_config)
    src, tgt = random_ids(rng, 1, 6), random_ids(rng, 1, 4)
    maps = attention_maps(model, src, tgt)
    np.testing.assert_allclose(maps["copy"], maps["cross"][-1].mean(axis=1), atol=1e-6)
    assert maps["copy"].shape == (1, 4, 6) and maps["copy_gate"].shape == (1, 4)
    assert np.all((maps["copy_gate"] > 0) & (maps["copy_gate"] < 1))
    arrays = {**positional_arrays(8, 8), "copy": maps["copy"][0],
              "copy_gate": maps["copy_gate"][0]}
    labels = {"source": [f"s{i}" for i in range(6)], "output": [f"o{i}" for i in range(4)]}
    names = draw(arrays, labels, tmp_path, "caption")
    assert {"copy.png", "copy_gate.png"} <= set(names)
    assert (tmp_path / "copy.png").stat().st_size > 0


@pytest.mark.parametrize("overrides, message", [
    (["tokenizer.joint=false"], "copy_attention needs one vocabulary"),
    (["model.overrides.share_embeddings=false"], "set share_embeddings=True"),
    (["model.overrides.copy_attention=false", "tokenizer.joint=false"],
     "share_embeddings needs one vocabulary"),
])
def test_a_copy_config_with_two_vocabularies_is_refused_before_any_data(overrides, message):
    from pathlib import Path

    from train.config import ConfigError
    from train.tasks import load_run_config

    recipe = Path(__file__).resolve().parents[1] / "train/configs/vietnews_summarization.yaml"
    with pytest.raises(ConfigError, match=message):
        load_run_config(recipe, overrides)


def test_coverage_loss_matches_the_reference_and_joins_the_training_loss(tiny_config):
    from keras_transformer.layers.copy_attention import coverage_loss
    from tests.reference import coverage_loss as reference_coverage

    rng = np.random.default_rng(8)
    attention = softmax(rng.normal(size=(2, 5, 6))).astype("float32")
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], bool)
    assert float(coverage_loss(attention, mask)) == pytest.approx(
        reference_coverage(attention, mask), rel=1e-5)
    # Attending twice to one position costs its weight; a new position costs nothing.
    twice = np.array([[[1.0, 0.0], [1.0, 0.0]]], "float32")
    moved = np.array([[[1.0, 0.0], [0.0, 1.0]]], "float32")
    assert float(coverage_loss(twice, np.ones((1, 2), bool))) == pytest.approx(0.5)
    assert float(coverage_loss(moved, np.ones((1, 2), bool))) == 0.0

    model = _copy_model(tiny_config, coverage_loss_weight=2.0)
    src, tgt = random_ids(rng, 2, 6), random_ids(rng, 2, 5)
    tgt[1, 3:] = 0
    model((src, tgt), training=True)
    (added,) = model.losses
    _, scores = model.decode(tgt, *model.encode(src), source_ids=src,
                             return_attention_scores=True)
    want = 2.0 * reference_coverage(np.asarray(scores["copy"]), tgt != 0)
    assert float(added) == pytest.approx(want, rel=1e-4)
    model((src, tgt), training=False)
    assert not model.losses  # inference adds nothing
    with pytest.raises(ValueError, match="coverage_loss_weight covers the copy"):
        TransformerConfig.preset("tiny", coverage_loss_weight=1.0)
