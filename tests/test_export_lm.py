"""Export of a decoder-only TransformerLM: its decode_step in every format, parity with Keras,
and `python -m export.generate` (greedy text equal to TransformerLM.generate's, seeded samples
equal across runtimes, bad input refused).

One tiny language-model run is trained (model.fit) and exported (every format, int8 variants)
once for this module.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest

from export import generate as generate_cli
from export import parity
from export.common import Manifest
from export.formats import FORMATS, RUNTIMES
from export.kinds import load_backend, open_export
from export.kinds.decoding import parity as decoding_parity
from export.kinds.language_model import LM_INTERFACE
from export.runtime.base import Generator
from keras_transformer.cache.layout import cache_names, per_layer_heads
from keras_transformer.decoding import SearchSettings
from tests.cli_probe import assert_clean_failure, call_main, run_cli, tree_digest

PROMPTS = ("tôi đã mua", "họ sẽ bán hai", "cô ấy")
SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.9}


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> Path:
    """A run directory as `task: language_model` writes it: config.yaml, model_config.json,
    spm.model and model.keras, a tiny TransformerLM fitted for a few steps on Vietnamese demo
    sentences."""
    from keras_transformer.config import TransformerConfig
    from keras_transformer.models.language_model import TransformerLM
    from keras_transformer.text.demo_corpus import demo_splits
    from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece
    from train.config import RunConfig, save_config

    run = tmp_path_factory.mktemp("lm") / "run"
    run.mkdir()
    texts = [pair[1] for pair in demo_splits(train_size=400, dev_size=0, test_size=0)["train"]]
    train_sentencepiece(texts, run / "spm", vocab_size=120)
    (run / "spm.vocab").unlink()
    tokenizer = SentencePieceTokenizer(run / "spm.model")
    config = TransformerConfig.preset(
        "tiny", source_vocab_size=tokenizer.vocab_size, target_vocab_size=tokenizer.vocab_size,
        d_model=32, num_heads=4, d_ff=64, num_decoder_layers=2, max_source_length=64,
        max_target_length=64, dropout=0.0)
    keras.utils.set_random_seed(0)
    rows = [[config.bos_id, *pieces, config.eos_id] for pieces in tokenizer.encode(texts)]
    length = config.max_target_length + 1
    ids = np.full((len(rows), length), config.pad_id, np.int32)
    for i, row in enumerate(rows):
        ids[i, :min(len(row), length)] = row[:length]
    model = TransformerLM(config)
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ids[:, :-1], ids[:, 1:], batch_size=32, epochs=10, verbose=0)
    model.save(run / "model.keras")
    (run / "model_config.json").write_text(json.dumps(config.to_dict(), indent=2))
    save_config(RunConfig(task="language_model"), run / "config.yaml")
    return run


@pytest.fixture(scope="module")
def lm_export(lm_run) -> Path:
    out = lm_run.parent / "export"
    result = run_cli("export", "--run", lm_run, "--format", "all", "--quantize", "int8",
                     "--out", out)
    assert result.code == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def manifest(lm_export) -> Manifest:
    return Manifest(lm_export)


@pytest.fixture(scope="module")
def backends(lm_run, manifest) -> dict:
    return {name: load_backend(manifest, name, run_dir=lm_run) for name in RUNTIMES}


@pytest.fixture(scope="module")
def keras_lm(lm_run):
    """The trained model as Keras loads it, for TransformerLM.generate."""
    return keras.models.load_model(lm_run / "model.keras", compile=False)


@pytest.mark.slow
def test_manifest_records_an_lm_with_decode_step_only(manifest):
    assert manifest.kind == "lm"
    formats = manifest["formats"]
    assert set(formats) == {"savedmodel", "onnx", "tflite"}
    assert formats["savedmodel"]["signatures"] == ["decode_step"]
    assert formats["tflite"]["signatures"] == ["decode_step"]
    assert formats["onnx"]["variants"] == {"float32": {"decoder_step": "decoder_step.onnx"},
                                           "int8": {"decoder_step": "decoder_step.int8.onnx"}}
    assert set(formats["tflite"]["variants"]) == {"float32", "int8"}
    assert manifest["interface"] == LM_INTERFACE
    assert not any("encoder" in name for name in manifest["files"])
    manifest.verify()


@pytest.mark.slow
def test_onnx_step_has_no_encoder_inputs(manifest):
    import onnx

    step = onnx.load(str(manifest.file(manifest.format_files("onnx")["decoder_step"])))
    layers = manifest.model["num_decoder_layers"]
    assert [i.name for i in step.graph.input] == ["tokens", "index", *cache_names(layers)]
    assert [o.name for o in step.graph.output] == ["logits", "step_key_values", "log_normalizer"]


@pytest.mark.slow
def test_keras_step_equals_the_models_own_cached_step(backends, keras_lm):
    """The step every format exports (export.module.lm_step_key_values, the keras runtime)
    against TransformerLM.decode_step, which writes the cache itself."""
    rng = np.random.default_rng(3)
    backend = backends["keras"]
    tokens = rng.integers(4, keras_lm.config.target_vocab_size, 3).astype(np.int32)
    cache = rng.normal(size=(3, 2, 2, 9, 32)).astype(np.float32)
    for index in (0, 4, 8):
        logits, rows = backend.decode_step(tokens, [], None, backend.cache_from(cache), index)
        want_logits, want_cache = keras_lm.decode_step(tokens, per_layer_heads(cache, 4), index)
        np.testing.assert_allclose(np.asarray(logits), np.asarray(want_logits), atol=1e-5)
        for i, array in enumerate(want_cache):
            layer, kind = divmod(i, 2)
            np.testing.assert_allclose(
                np.asarray(array)[:, :, index].reshape(3, -1), np.asarray(rows)[:, layer, kind],
                atol=1e-6)


@pytest.mark.slow
def test_step_tensors_agree_across_runtimes(manifest, backends):
    rows = decoding_parity.tensor_parity(manifest, backends, encoder=False)
    assert {row["output"] for row in rows} == {"decode_step.logits",
                                               "decode_step.step_key_values"}
    table = decoding_parity.format_table(rows, list(FORMATS))
    for row in rows:
        for runtime in FORMATS:
            assert row[runtime] <= decoding_parity.TOLERANCE, table


def _keras_text(model, generator: Generator, prompt: str, new_tokens: int, **sampling):
    ids = generator.encode(prompt)
    outputs = model.generate([ids] * sampling.pop("num_samples", 1), new_tokens, **sampling)
    return [generator.decode(ids + new) for new in outputs]


@pytest.mark.slow
def test_greedy_text_equals_transformer_lm_generate_in_every_runtime(manifest, backends,
                                                                     keras_lm):
    for prompt in PROMPTS:
        generators = {name: Generator(manifest, b) for name, b in backends.items()}
        (want,) = _keras_text(keras_lm, generators["keras"], prompt, 25, temperature=0.0)
        assert len(want) > len(prompt)
        for name, generator in generators.items():
            assert generator.generate(prompt, 25) == [want], name


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnx", "tflite"])
def test_generate_cli_greedy_text_equals_keras_without_tensorflow(lm_export, manifest,
                                                                  keras_lm, runtime):
    generator = Generator(manifest, None)
    (want,) = _keras_text(keras_lm, generator, PROMPTS[1], 30, temperature=0.0)
    result = run_cli("export.generate", "--export", lm_export, "--prompt", PROMPTS[1],
                     "--max-new-tokens", 30, "--runtime", runtime, without_tensorflow=True)
    assert result.code == 0, result.stderr[-3000:]
    assert result.stdout == want + "\n"


@pytest.mark.slow
def test_seeded_samples_repeat_and_agree_across_runtimes(manifest, backends, keras_lm):
    onnx = open_export(manifest.root, "onnx")
    tflite = open_export(manifest.root, "tflite")
    seeded = SearchSettings(num_samples=3, seed=1, **SAMPLING)
    samples = onnx.generate(PROMPTS[0], 20, seeded)
    assert len(samples) == 3 and len(set(samples)) > 1
    assert onnx.generate(PROMPTS[0], 20, seeded) == samples
    assert tflite.generate(PROMPTS[0], 20, seeded) == samples
    assert _keras_text(keras_lm, onnx, PROMPTS[0], 20, num_samples=3, seed=1,
                       **SAMPLING) == samples
    assert onnx.generate(PROMPTS[0], 20, seeded.replace(seed=2)) != samples


@pytest.mark.slow
def test_generate_cli_samples_with_a_seed(lm_export, manifest, keras_lm):
    args = ("--export", lm_export, "--prompt", PROMPTS[2], "--max-new-tokens", 15,
            "--temperature", 0.8, "--top-k", 40, "--top-p", 0.9, "--seed", 1,
            "--num-samples", 3)
    first = call_main(generate_cli.main, *args)
    assert first.code == 0, first.stderr
    assert call_main(generate_cli.main, *args, "--runtime", "tflite").stdout == first.stdout
    want = _keras_text(keras_lm, Generator(manifest, None), PROMPTS[2], 15, num_samples=3,
                       seed=1, **SAMPLING)
    assert first.stdout.splitlines() == want


@pytest.mark.slow
def test_max_new_tokens_is_lowered_to_what_fits(lm_export, manifest, caplog):
    generator = open_export(lm_export, "onnx")
    prompt = " ".join(["một"] * 12)
    room = manifest["max_target_length"] - len(generator.encode(prompt))
    assert room > 0
    with caplog.at_level("WARNING", logger="export"):
        (text,) = generator.generate(prompt, 500, SearchSettings(temperature=0.0))
    assert f"generating {room} new tokens, not 500" in caplog.text
    (exact,) = generator.generate_ids([generator.encode(prompt)], room,
                                      SearchSettings(temperature=0.0))
    assert text == generator.decode(generator.encode(prompt) + exact)


@pytest.mark.slow
def test_parity_report_of_an_lm_export_passes(lm_export, lm_run, backends):
    lines = []
    assert parity.run(lm_export, lm_run, sentences=20, out=lines.append, backends=backends)
    report = "\n".join(lines)
    assert "greedy token ids of 20 random prompts" in report
    assert "sampled (temperature 1.0" in report
    for name in FORMATS:
        assert f"keras vs {name:<11} identical" in report
    assert "onnx    int8" in report and "tflite  int8" in report
    assert report.endswith("PASS")


BAD_OPTIONS = [
    (("--prompt", ""), "--prompt is empty"),
    (("--prompt", "   "), "--prompt is empty"),
    (("--prompt", "một " * 80), "shorten the prompt"),
    (("--prompt", "tôi", "--top-p", "0"), "--top-p"),
    (("--prompt", "tôi", "--top-p", "1.5"), "--top-p"),
    (("--prompt", "tôi", "--top-k", "0"), "--top-k"),
    (("--prompt", "tôi", "--temperature", "0"), "--temperature"),
    (("--prompt", "tôi", "--temperature", "-1"), "--temperature"),
    (("--prompt", "tôi", "--max-new-tokens", "0"), "--max-new-tokens"),
    # Greedy search gives one text: it once printed it twice.
    (("--prompt", "tôi", "--num-samples", "2"), "--num-samples 2 needs sampling"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("args", "named"), BAD_OPTIONS,
                         ids=["empty", "blank", "too-long", "top-p-0", "top-p-1.5", "top-k-0",
                              "temperature-0", "temperature-negative", "no-new-tokens",
                              "samples-without-sampling"])
def test_generate_cli_refuses_bad_input(lm_export, tmp_path, args, named):
    before = tree_digest(lm_export), tree_digest(tmp_path)
    result = run_cli("export.generate", "--export", lm_export, *args, cwd=tmp_path)
    assert result.code == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert named in result.stderr.strip().splitlines()[-1]
    assert (tree_digest(lm_export), tree_digest(tmp_path)) == before


@pytest.mark.slow
def test_an_export_of_the_other_kind_is_refused_by_each_tool(lm_export, tmp_path):
    exports = {}
    for kind in ("translator", "classifier"):
        exports[kind] = tmp_path / kind
        shutil.copytree(lm_export, exports[kind])
        data = json.loads((exports[kind] / "manifest.json").read_text())
        (exports[kind] / "manifest.json").write_text(json.dumps({**data, "kind": kind}))
    before = tree_digest(tmp_path), tree_digest(lm_export)
    result = run_cli("export.generate", "--export", exports["translator"], "--prompt", "tôi",
                     cwd=tmp_path)
    assert_clean_failure(result, 2, "holds a translator (encoder-decoder), not a language "
                         "model", "export.translate")
    result = run_cli("export.translate", "--export", lm_export, cwd=tmp_path,
                     stdin="tôi\n".encode())
    assert_clean_failure(result, 2, "holds a language model, not a translator",
                         "export.generate")
    result = run_cli("export.generate", "--export", exports["classifier"], "--prompt", "tôi",
                     cwd=tmp_path)
    assert_clean_failure(result, 2, "key 'labels' is missing")
    assert (tree_digest(tmp_path), tree_digest(lm_export)) == before


@pytest.mark.slow
def test_the_attention_explorer_refuses_a_language_model(lm_run, lm_export, tmp_path):
    out = tmp_path / "with_attention"
    result = run_cli("export", "--run", lm_run, "--format", "onnx", "--with-attention",
                     "--out", out)
    assert_clean_failure(result, 2, "--with-attention", "language model")
    assert not out.exists()
    result = run_cli("export.serve", "--export", lm_export, "--port", "0", timeout=120)
    assert_clean_failure(result, 2, "holds a language model", "export.generate")


def test_generate_cli_is_greedy_without_sampling_options():
    args = generate_cli.parse_args(["--export", "x", "--prompt", "y"])
    assert generate_cli.search_settings(args) == SearchSettings(temperature=0.0, seed=0)
    args = generate_cli.parse_args(["--export", "x", "--prompt", "y", "--top-k", "5"])
    assert generate_cli.search_settings(args) == SearchSettings(temperature=1.0, top_k=5,
                                                                top_p=1.0, seed=0)


@pytest.mark.parametrize("overrides", [
    {},
    {"pre_norm": True, "positional": "learned", "tie_output": False},
], ids=["post-ln-tied", "pre-ln-learned-untied"])
def test_onnx_step_of_an_lm_equals_its_keras_step(overrides):
    """decoder_step.onnx of fresh TransformerLMs (each option the graph branches on, weights
    perturbed so every one's place is checked) against lm_step_key_values, at three indices."""
    import onnxruntime as ort

    from export.module import lm_step_key_values
    from export.onnx_graph import build_decoder_step
    from keras_transformer.config import TransformerConfig
    from keras_transformer.models.language_model import TransformerLM

    model = TransformerLM(TransformerConfig.preset(
        "tiny", d_model=32, num_heads=4, d_ff=64, target_vocab_size=50, max_target_length=16,
        **overrides), dtype="float32")
    model.build()
    rng = np.random.default_rng(0)
    model.set_weights([w + rng.normal(scale=0.1, size=w.shape).astype(np.float32)
                       for w in model.get_weights()])
    step = ort.InferenceSession(build_decoder_step(model).SerializeToString())
    cache = [rng.normal(size=(2, 4, 9, 8)).astype(np.float32) for _ in range(4)]
    tokens = np.array([5, 6], np.int32)
    for index in (0, 3, 8):
        feeds = {"tokens": tokens, "index": np.asarray(index, np.int32),
                 **dict(zip(cache_names(2), cache, strict=True))}
        logits, rows, normalizer = step.run(None, feeds)
        want_logits, want_rows = lm_step_key_values(model, tokens, cache, index)
        np.testing.assert_allclose(logits, np.asarray(want_logits), atol=1e-4)
        np.testing.assert_allclose(rows, np.asarray(want_rows), atol=1e-5)
        wide = logits.astype(np.float64)
        np.testing.assert_allclose(normalizer, np.log(np.exp(wide).sum(1)), atol=1e-5)


@pytest.mark.slow
def test_the_api_batches_prompts_and_answers_each_as_export_generate_alone(lm_export):
    """export.api's engine for a language model: prompts of several lengths from concurrent
    requests batched greedily, each answer the Generator's text of that prompt alone; a
    seeded sample (run alone) the Generator's sample; a stream's tokens spell its answer."""
    from export.engines import open_engine
    from tests.serving import batched

    generator = open_export(lm_export, "onnx")
    engine = open_engine(lm_export)
    requests = [[PROMPTS[0]], [PROMPTS[1], PROMPTS[2]], [PROMPTS[2] + " " + PROMPTS[0]]]
    outputs, _, sizes = batched(engine, requests, {"max_new_tokens": 12})
    for inputs, answer in zip(requests, outputs, strict=True):
        assert answer == [generator.generate(p, 12, SearchSettings(temperature=0.0))[0]
                          for p in inputs]
    assert sizes == [4]  # one batch for every prompt of the three requests
    sampled = {"max_new_tokens": 12, "temperature": 0.8, "top_k": 40, "seed": 5}
    outputs, _, sizes = batched(engine, [[PROMPTS[0], PROMPTS[1]]], sampled)
    assert outputs[0] == [generator.generate(p, 12, SearchSettings(
        temperature=0.8, top_k=40, seed=5))[0] for p in PROMPTS[:2]]
    assert sizes == [1, 1]
    outputs, events, _ = batched(engine, [[PROMPTS[1]]], {"max_new_tokens": 12}, stream=True)
    tokens = [event["token"] for _, event in events[0]]
    assert tokens and generator.sp.decode_pieces(tokens) == events[0][-1][1]["text"]
    assert outputs[0][0].endswith(events[0][-1][1]["text"])
