"""Export to SavedModel/ONNX/TFLite, cross-runtime parity, and inference without TensorFlow.

One tiny model is trained and exported (all formats, all variants) once for this module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from export import choice, parity
from export.common import ExportError, Manifest
from export.formats import FORMATS, RUNTIMES
from export.kinds import load_backend
from export.kinds.decoding import parity as decoding_parity
from export.runtime.base import Translator
from keras_transformer.cache.layout import cache_names, memory_names
from keras_transformer.decoding import SearchSettings
from tests.cli_probe import run_cli

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
GREEDY_SENTENCES = 200


def _run(args, **kwargs):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(run dir, export dir) of a tiny demo model exported with every format and variant."""
    root = tmp_path_factory.mktemp("export")
    run_dir, export_dir = root / "run", root / "export"
    overrides = ["data.train_size=1500", "data.dev_size=50", "data.test_size=50",
                 "training.epochs=1", "model.overrides.d_model=32", "model.overrides.d_ff=64",
                 "eval.max_sentences=5", "eval.beam_size=1", "eval.dev_score_sentences=0",
                 "training.verbose=0"]
    train = _run(["-m", "train", "--config", "train/configs/demo.yaml", "--out", str(run_dir),
                  *[arg for o in overrides for arg in ("--set", o)]])
    assert train.returncode == 0, train.stderr[-3000:]
    export = _run(["-m", "export", "--run", str(run_dir), "--format", "all",
                   "--quantize", "all", "--out", str(export_dir)])
    assert export.returncode == 0, export.stderr[-3000:]
    assert "tflite" in export.stdout and "onnx" in export.stdout
    # No advice from onnxruntime's quantizer that the export must not follow.
    assert "pre-processing" not in export.stderr, export.stderr[-2000:]
    return run_dir, export_dir


@pytest.fixture(scope="module")
def manifest(exported):
    return Manifest(exported[1])


@pytest.fixture(scope="module")
def backends(exported, manifest):
    return {name: load_backend(manifest, name, run_dir=exported[0])
            for name in RUNTIMES}


@pytest.fixture(scope="module")
def sources():
    return decoding_parity.demo_test_split(GREEDY_SENTENCES)[0]


def test_manifest_lists_every_format_with_sizes(manifest, exported):
    formats = manifest["formats"]
    assert set(formats) == {"savedmodel", "onnx", "tflite"}
    assert set(formats["tflite"]["variants"]) == {"float32", "fp16", "int8"}
    assert set(formats["onnx"]["variants"]) == {"float32", "int8"}
    assert formats["onnx"]["opset"] == 17
    assert set(formats["savedmodel"]["signatures"]) == {"encode", "decode_step", "translate"}
    assert manifest.special_ids == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    for name, entry in manifest["files"].items():
        assert entry["bytes"] > 0, name
        manifest.file(name)  # checksum verified
    sizes = {v: decoding_parity.file_size(manifest, "tflite", v)
             for v in ("float32", "fp16", "int8")}
    assert sizes["int8"] < sizes["fp16"] < sizes["float32"]


def test_onnx_files_pass_the_checker_with_dynamic_axes(manifest):
    import onnx

    files = manifest.format_files("onnx")
    encoder = onnx.load(str(manifest.file(files["encoder"])))
    step = onnx.load(str(manifest.file(files["decoder_step"])))
    for proto in (encoder, step):
        onnx.checker.check_model(proto, full_check=True)
        assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) == 17
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in step.graph.input}
    layers, heads = manifest.model["num_decoder_layers"], manifest.model["num_heads"]
    head_dim = manifest.model["d_model"] // heads
    assert [i.name for i in step.graph.input] == [
        "tokens", "memory_mask", "index", *memory_names(layers), *cache_names(layers)]
    assert [o.name for o in step.graph.output] == ["logits", "step_key_values", "log_normalizer"]
    batch, *rest = dims["cache_values_0"]
    assert isinstance(batch, str) and rest[0] == heads and rest[2] == head_dim
    assert isinstance(rest[1], str) and dims["cross_keys_0"][2] == dims["memory_mask"][1]
    assert dims["index"] == []


def test_tensor_parity_on_two_shapes(manifest, backends):
    rows = decoding_parity.tensor_parity(manifest, backends)
    assert len({row["shape"] for row in rows}) >= 4
    table = decoding_parity.format_table(rows, list(FORMATS))
    for row in rows:
        for runtime in FORMATS:
            assert row[runtime] <= decoding_parity.TOLERANCE, table


def test_greedy_tokens_identical_across_runtimes(manifest, backends, sources):
    ids = {name: Translator(manifest, b).translate_ids(sources, SearchSettings(beam_size=1),
                                                       batch_size=100)
           for name, b in backends.items()}
    assert len(sources) >= 200
    for name in FORMATS:
        assert decoding_parity.first_difference(ids["keras"], ids[name]) is None, name


def test_beam_tokens_identical_keras_and_onnx(manifest, backends, sources):
    ids = {name: Translator(manifest, backends[name]).translate_ids(
               sources[:40], SearchSettings(beam_size=4))
           for name in ("keras", "onnx")}
    assert decoding_parity.first_difference(ids["keras"], ids["onnx"]) is None


def test_quantized_variants_keep_bleu(manifest, backends):
    sources, references = decoding_parity.demo_test_split(100)
    scores = {}
    for fmt, variant in (("tflite", "float32"), ("tflite", "fp16"), ("tflite", "int8"),
                         ("onnx", "int8")):
        backend = backends[fmt] if variant == "float32" else load_backend(manifest, fmt, variant)
        hyps = Translator(manifest, backend).translate(sources, SearchSettings(beam_size=1))
        scores[(fmt, variant)] = decoding_parity.bleu(hyps, references)
    base = scores[("tflite", "float32")]
    for key, score in scores.items():
        assert abs(score - base) <= 1.0, (key, scores)


def test_savedmodel_translate_signature_matches_the_manifest_search(exported, manifest,
                                                                     backends, sources):
    """The signature runs the manifest's search (this run's eval: greedy), as the Keras
    Translator does under the same settings; blank lines give ""."""
    assert manifest.search.beam_size == 1
    batch = sources[:20] + ["", "   "]
    got = decoding_parity.signature_translations(backends["savedmodel"], batch)
    expected = Translator(manifest, backends["keras"]).translate(batch, manifest.search)
    assert got == expected


BEAM_EVAL = {"beam_size": 4, "alpha": 1.0, "no_repeat_ngram_size": 2, "min_length": 3}


@pytest.mark.parametrize("copy_attention", [False, True], ids=["plain", "copy_attention"])
def test_savedmodel_translate_signature_runs_the_runs_beam_search(tmp_path, copy_attention):
    """A run whose eval asks for beam 4, alpha, no_repeat_ngram_size and min_length: the
    manifest records them, and the signature's translations are the Keras Translator's
    under them (keras_transformer.decoding.beam_search), not its greedy ones."""
    import yaml

    from export.exporters import export_run
    from tests.serving import WORDS, tiny_run

    run, out = tmp_path / "run", tmp_path / "export"
    config = {"task": "translation", "eval": BEAM_EVAL}
    tiny_run(run, yaml.safe_dump(config), share_embeddings=True,
             copy_attention=copy_attention)
    export_run(run, out, formats=("savedmodel",))
    manifest = Manifest(out)
    assert manifest["search"] == BEAM_EVAL
    assert manifest.model["copy_attention"] is copy_attention
    rng = np.random.default_rng(1)
    sentences = [" ".join(rng.choice(WORDS, size=rng.integers(1, 9))) for _ in range(40)]
    sentences[5:5] = ["", "  "]
    keras = Translator(manifest, load_backend(manifest, "keras", run_dir=run))
    expected = keras.translate(sentences, manifest.search)
    got = decoding_parity.signature_translations(load_backend(manifest, "savedmodel"),
                                                 sentences)
    assert got == expected
    assert got[5:7] == ["", ""]
    # The settings matter on these sentences: greedy, or beam 4 without the constraints,
    # translates some of them otherwise.
    for other in (SearchSettings(beam_size=1), manifest.search.replace(
            no_repeat_ngram_size=0, min_length=0)):
        assert keras.translate(sentences, other) != expected, other


def test_parity_report_passes_and_fails(exported, backends, monkeypatch, capsys, tmp_path):
    lines = []
    assert parity.run(exported[1], sentences=10, beam_sentences=4, bleu_sentences=10,
                      out=lines.append, backends=backends)
    report = "\n".join(lines)
    assert "savedmodel" in report and "tflite" in report and report.endswith("PASS")
    signature = report.index("3c. SavedModel translate signature (beam_size 1, ")
    assert report[signature:].split("\n")[1].strip() == "identical"
    monkeypatch.setattr(decoding_parity, "TOLERANCE", -1.0)
    lines.clear()
    assert not parity.run(exported[1], sentences=4, beam_sentences=2, bleu_sentences=4,
                          out=lines.append, backends=backends)
    assert lines[-1].endswith("FAIL")
    assert parity.main(["--export", str(tmp_path / "missing")]) == 2
    assert "export directory not found" in capsys.readouterr().err

    # An export of one format is checked against keras in every section, beam included.
    only_tflite = tmp_path / "only_tflite"
    shutil.copytree(exported[1], only_tflite)
    data = json.loads((only_tflite / "manifest.json").read_text())
    data["formats"] = {"tflite": data["formats"]["tflite"]}
    (only_tflite / "manifest.json").write_text(json.dumps(data))
    lines.clear()
    monkeypatch.setattr(decoding_parity, "TOLERANCE", 1e-4)
    assert parity.run(only_tflite, sentences=4, beam_sentences=2, bleu_sentences=4,
                      out=lines.append, backends=backends)
    report = "\n".join(lines)
    assert lines[0] == "not exported, not checked: savedmodel, onnx\n"
    assert "keras vs tflite" in report and "keras vs onnx" not in report
    assert "beam-4 token ids on 2 sentences, keras vs tflite" in report
    data["formats"] = {}
    (only_tflite / "manifest.json").write_text(json.dumps(data))
    assert parity.main(["--export", str(only_tflite)]) == 2
    assert "holds no exported format to check against keras" in capsys.readouterr().err


@pytest.mark.parametrize("runtime", ["onnx", "tflite"])
def test_translate_without_tensorflow(exported, manifest, backends, sources, runtime, tmp_path):
    source_file = tmp_path / "in.txt"
    source_file.write_text("\n".join(sources[:10]) + "\n", encoding="utf-8")
    result = run_cli("export.translate", "--export", exported[1], "--runtime", runtime,
                     "--beam", "4", source_file, without_tensorflow=True)
    assert result.code == 0, result.stderr[-3000:]
    expected = Translator(manifest, backends["keras"]).translate(sources[:10],
                                                                 SearchSettings(beam_size=4))
    assert result.stdout.splitlines() == expected


def test_search_graph_translates_as_the_numpy_search(exported, manifest, sources, tmp_path):
    """search.onnx and search.int8.onnx (the onnx runtime's default when the export has
    them) against the NumPy search stepping the same variant's decoder_step graph, greedy and
    beam, with and without the constraints; and export.translate --no-search-graph, which
    takes the NumPy search.

    float32: identical ids. int8: dynamic int8 quantizes each activation with one scale over
    the batch, so the two graphs' float32 rounding differences can move tokens, and a moved
    row moves the others (export.parity.search_graph_parity). This barely trained model is
    full of near ties, where that shows most; search.int8.onnx must still differ from the
    NumPy search in fewer sentences than the NumPy search differs from itself at batch 16."""
    assert manifest.format_files("onnx")["search"] == "search.onnx"
    assert manifest.format_files("onnx", "int8")["search"] == "search.int8.onnx"
    for variant in ("float32", "int8"):
        graph = Translator(manifest, load_backend(manifest, "onnx", variant))
        stepwise = Translator(manifest, load_backend(manifest, "onnx", variant,
                                                     search_graph=False))
        assert "search" in graph.backend.sessions and "search" not in stepwise.backend.sessions
        for beam in (1, 4):
            for constraints in ({}, {"no_repeat_ngram_size": 2, "min_length": 4}):
                expected = stepwise.translate_ids(sources, SearchSettings(beam_size=beam,
                                                                      **constraints))
                got = graph.translate_ids(sources, SearchSettings(beam_size=beam, **constraints))
                if variant == "float32":
                    assert got == expected
                    continue
                rebatched = stepwise.translate_ids(
                    sources, SearchSettings(beam_size=beam, **constraints), batch_size=16)
                moved = sum(a != b for a, b in zip(got, expected, strict=True))
                assert moved < sum(a != b for a, b in zip(rebatched, expected, strict=True))
        # A translator with the search graph never steps, so it never made the stepwise
        # sessions (each holds the decoder's matrices again); the stepwise one made both.
        assert graph.backend.sessions.made() == ["search"]
        assert stepwise.backend.sessions.made() == ["decoder_step", "encoder"]
    stepwise = Translator(manifest, load_backend(manifest, "onnx", search_graph=False))
    source_file = tmp_path / "in.txt"
    source_file.write_text("\n".join(sources[:20]) + "\n", encoding="utf-8")
    outputs = [_run(["-m", "export.translate", "--export", str(exported[1]), *flag,
                     str(source_file)]) for flag in ([], ["--no-search-graph"])]
    assert all(r.returncode == 0 for r in outputs), outputs[0].stderr[-2000:]
    assert outputs[0].stdout == outputs[1].stdout
    # The command's search is the run's (the manifest's search settings).
    assert outputs[0].stdout.splitlines() == stepwise.translate(sources[:20],
                                                                manifest.search)


def test_parity_records_variants_and_translate_runs_the_fastest_accurate(
        exported, manifest, backends, tmp_path):
    export_dir = tmp_path / "export"
    shutil.copytree(exported[1], export_dir)
    sources, references = decoding_parity.demo_test_split(20)
    lines = []
    assert parity.run(export_dir, sentences=4, beam_sentences=2, bleu_sentences=20,
                      out=lines.append, backends=backends, record=True)
    record = choice.read_record(export_dir)
    assert record["metric"] == "BLEU" and record["sentences"] == 20
    # Each variant's recorded BLEU is that of its own greedy translations, scored here anew.
    for entry in record["variants"]:
        hyps = Translator(manifest, load_backend(manifest, entry["runtime"], entry["variant"])
                          ).translate(sources, SearchSettings(beam_size=1))
        assert entry["score"] == pytest.approx(decoding_parity.bleu(hyps, references)), entry
        assert entry["seconds"] > 0
    assert {(e["runtime"], e["variant"]) for e in record["variants"]} == {
        ("tflite", "float32"), ("tflite", "fp16"), ("tflite", "int8"), ("onnx", "float32"),
        ("onnx", "int8")}
    chosen = choice.choose_fastest(record)
    assert f"--variant fastest is {chosen['runtime']} {chosen['variant']}" in "\n".join(lines)
    # A re-export over it is still an export of this tool's (no --overwrite needed).
    from export.exporters import _foreign_entries

    assert _foreign_entries(export_dir) == []

    # Hand-made timings: tflite int8 is the fastest but 0.6 below float32, so tflite fp16 runs.
    def variants(int8_score):
        return [{"runtime": "tflite", "variant": "int8", "score": int8_score, "seconds": 1.0},
                {"runtime": "tflite", "variant": "fp16", "score": 50.0, "seconds": 2.0},
                {"runtime": "tflite", "variant": "float32", "score": 50.0, "seconds": 3.0},
                {"runtime": "onnx", "variant": "float32", "score": 50.0, "seconds": 4.0},
                {"runtime": "onnx", "variant": "int8", "score": 49.9, "seconds": 3.5}]

    choice.write_record(export_dir, passed=True, metric="BLEU", sentences=20,
                        variants=variants(49.4))
    source_file = tmp_path / "in.txt"
    source_file.write_text("\n".join(sources[:10]) + "\n", encoding="utf-8")
    for runtime, expected_choice in ((None, ("tflite", "fp16")), ("onnx", ("onnx", "int8"))):
        args = ["--export", str(export_dir), "--variant", "fastest", "--beam", "4",
                str(source_file)] + (["--runtime", runtime] if runtime else [])
        result = run_cli("export.translate", *args, without_tensorflow=True)
        assert result.code == 0, result.stderr[-3000:]
        assert f"--variant fastest: {' '.join(expected_choice)}" in result.stderr
        expected = Translator(manifest, load_backend(manifest, *expected_choice)).translate(
            sources[:10], SearchSettings(beam_size=4))
        assert result.stdout.splitlines() == expected
    choice.write_record(export_dir, passed=True, metric="BLEU", sentences=20,
                        variants=variants(49.5))  # now within 0.5: int8 runs
    assert choice.fastest(export_dir) == ("tflite", "int8")
    (export_dir / "parity.json").unlink()
    missing = _run(["-m", "export.translate", "--export", str(export_dir), "--variant",
                    "fastest"], input="one cat\n")
    assert missing.returncode == 2 and "parity.json is missing" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_translate_cli_handles_bad_input(exported, manifest, tmp_path):
    long_sentence = " ".join(["seven hundred"] * 60)
    raw = ("three red cats\n\n   \n" + long_sentence + "\n").encode() + b"\xff\xfe bad\n"
    source_file = tmp_path / "in.txt"
    source_file.write_bytes(raw)
    result = _run(["-m", "export.translate", "--export", str(exported[1]), str(source_file)])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert len(lines) == 6 and lines[1] == lines[2] == "" and lines[5] == ""
    assert "truncat" in result.stderr or "keeping its first" in result.stderr
    assert "not valid UTF-8" in result.stderr
    # Each warning starts its own line on screen: the progress bar's frame (ended by \r) is
    # cleared before it, not continued by it.
    warned = [line for line in result.stderr.split("\n") if "WARNING" in line]
    assert warned and all(line.split("\r")[-1].startswith("WARNING") for line in warned), warned
    strict = _run(["-m", "export.translate", "--export", str(exported[1]), "--no-truncate",
                   str(source_file)])
    assert strict.returncode == 2 and "max_source_length" in strict.stderr


def test_missing_or_corrupt_export_file_is_named(exported, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(exported[1], broken, ignore=shutil.ignore_patterns("savedmodel"))
    (broken / "decoder_step.onnx").unlink()
    result = _run(["-m", "export.translate", "--export", str(broken)], input="one cat\n")
    assert result.returncode == 2 and "decoder_step.onnx is missing" in result.stderr
    shutil.copyfile(exported[1] / "decoder_step.onnx", broken / "decoder_step.onnx")
    with (broken / "model.tflite").open("r+b") as f:
        f.truncate(1000)
    with pytest.raises(ExportError, match=r"model\.tflite is corrupt"):
        load_backend(Manifest(broken), "tflite")
    (broken / "manifest.json").write_text("{not json")
    with pytest.raises(ExportError, match=r"manifest\.json is corrupt"):
        Manifest(broken)


def test_a_variant_a_format_cannot_have_is_named_as_such(exported, manifest, tmp_path):
    with pytest.raises(ExportError, match=r"has no fp16 variant of onnx \(it has \['float32', "
                                          r"'int8'\]\); onnx has only the variants float32, int8"):
        load_backend(manifest, "onnx", "fp16")
    with pytest.raises(ValueError, match="the savedmodel runtime runs float32 weights only"):
        load_backend(manifest, "savedmodel", "int8")
    # An export without --quantize: the fix for a variant the format can have is to add it.
    plain = tmp_path / "plain"
    shutil.copytree(exported[1], plain)
    data = json.loads((plain / "manifest.json").read_text())
    data["formats"]["tflite"]["variants"] = {"float32": data["formats"]["tflite"]["variants"][
        "float32"]}
    (plain / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ExportError, match="has no int8 variant of tflite .*; export with "
                                          "--quantize int8"):
        load_backend(Manifest(plain), "tflite", "int8")


def test_empty_batch_rows_and_ids_roundtrip(manifest, backends):
    translator = Translator(manifest, backends["onnx"])
    assert translator.translate(["", " \t "], SearchSettings(beam_size=1)) == ["", ""]
    encoded = translator.encode(["five cats"])
    assert encoded[0][-1] == manifest.special_ids["eos"]
    assert json.loads((manifest.root / "manifest.json").read_text())["max_source_length"] > 0
    assert np.asarray(encoded[0]).dtype.kind == "i"


def test_bench_precisions_float16_onnx_backend_encodes_as_float32_does(manifest, backends):
    """bench.precision --quality runs float16 copies of the stepwise ONNX graphs: their
    encoder memory stays within float16's error of the float32 graph's."""
    from bench.precision import onnx_fp16_backend

    fp16, fp32 = onnx_fp16_backend(manifest), backends["onnx"]
    ids = Translator(manifest, fp32).encode(["five cats", "three red dogs"])
    source = np.zeros((2, max(map(len, ids))), np.int32)
    for row, sentence in enumerate(ids):
        source[row, :len(sentence)] = sentence
    (memory16, mask16), (memory32, mask32) = fp16.encode(source), fp32.encode(source)
    np.testing.assert_array_equal(mask16, mask32)
    for half, full in zip(memory16, memory32, strict=True):
        np.testing.assert_allclose(half, full, atol=2e-2 * np.abs(full).max())
    assert sorted(fp16.sessions) == ["decoder_step", "encoder"]


def test_tflite_cache_in_the_interpreter_matches_the_signature_runner(manifest):
    """The TFLite backend keeps the cache (and the encoder's output) in the interpreter's input
    tensors between steps. Two searches interleaved on one backend, one with beam reorders,
    then an encode between two steps, against the signature runner of another interpreter fed
    a NumPy cache kept beside them."""
    from export.runtime.base import Backend
    from keras_transformer.generation import BackendStepper

    backend = load_backend(manifest, "tflite")
    runner = load_backend(manifest, "tflite").interpreter.get_signature_runner("decode_step")
    numpy_cache = Backend(manifest)
    eos = manifest.special_ids["eos"]
    rng = np.random.default_rng(7)
    searches = []
    for batch, source_length, beam in ((2, 6, 2), (3, 9, 1)):
        source = rng.integers(4, 30, (batch, source_length)).astype(np.int32)
        source[:, -1] = eos
        stepper = BackendStepper(backend, source, beam_size=beam, max_length=6)
        reference = numpy_cache.init_cache(batch * beam, 6)
        searches.append((stepper, reference, beam))
    for index in range(5):
        if index == 4:  # the other signature sized for a new batch between two steps
            searches = searches[-1:]
            backend.encode(np.full((4, 11), eos, np.int32))
        for i, (stepper, reference, beam) in enumerate(searches):
            rows = len(stepper.memory_mask)
            tokens = rng.integers(4, 30, rows).astype(np.int32)
            got = stepper.step(tokens, index)
            want = runner(tokens=tokens, memory_mask=stepper.memory_mask,
                          index=np.asarray(index, np.int32),
                          **dict(zip(memory_names(manifest.model["num_decoder_layers"]),
                                     stepper.memory, strict=True)),
                          **dict(zip(cache_names(manifest.model["num_decoder_layers"]),
                                     reference, strict=True)))
            np.testing.assert_allclose(got, want["logits"], atol=1e-5)
            reference = numpy_cache.write(reference, want["step_key_values"], index)
            if beam > 1:
                parents = rng.integers(0, rows, rows).astype(np.int32)
                stepper.reorder(parents)
                reference = numpy_cache.gather(reference, parents)
            searches[i] = (stepper, reference, beam)
            for resident, array in zip(stepper.cache, reference, strict=True):
                np.testing.assert_allclose(resident, array, atol=1e-5)


def test_onnx_step_graph_reads_the_cache_in_place(manifest):
    """The cache is only read, and only by MatMul: no copy, slice, transpose or write of it
    in the graph (the runtime writes one slot per step in NumPy)."""
    import onnx

    step = onnx.load(str(manifest.file(manifest.format_files("onnx")["decoder_step"])))
    names = {i.name for i in step.graph.input if i.name.startswith("cache_")}
    assert names == {f"cache_{k}_{i}" for i in range(manifest.model["num_decoder_layers"])
                     for k in ("keys", "values")}
    consumers = {n.op_type for n in step.graph.node for name in n.input if name in names}
    assert consumers <= {"MatMul", "Shape"}, consumers


def _step_feeds(model, tokens, memory, mask, cache, index):
    """The Keras model's memory and cache lists -> decoder_step.onnx feeds."""
    layers = model.config.num_decoder_layers
    feeds = {"tokens": tokens, "memory_mask": mask, "index": np.asarray(index, np.int32)}
    feeds.update(zip(memory_names(layers), memory, strict=True))
    feeds.update(zip(cache_names(layers), cache, strict=True))
    return feeds


@pytest.mark.parametrize("overrides", [
    {},
    {"pre_norm": True, "positional": "learned"},
    {"tie_output": False, "share_embeddings": True},
], ids=["post-ln-tied", "pre-ln-learned", "untied-shared"])
def test_untrained_model_converts_to_onnx_correctly(tmp_path, overrides):
    """The ONNX files of fresh models (zero biases; each architecture option the step graph
    branches on) against the Keras encode and decode_step, masked padding included. Zero
    biases once made tf2onnx merge the encoder's head-split Reshape wrongly."""
    import onnxruntime as ort

    from export.kinds.decoding import export_onnx
    from keras_transformer.config import TransformerConfig
    from keras_transformer.models.transformer import Transformer

    model = Transformer(TransformerConfig.preset(
        "tiny", d_model=32, num_heads=4, d_ff=64, source_vocab_size=50, target_vocab_size=50,
        max_source_length=16, max_target_length=16, **overrides), dtype="float32")
    model.build()
    rng = np.random.default_rng(0)
    if overrides:  # non-zero biases and norms too, so every weight's place is checked
        model.set_weights([w + rng.normal(scale=0.1, size=w.shape).astype(np.float32)
                           for w in model.get_weights()])
    export_onnx(model, tmp_path, int8=False)
    source = rng.integers(4, 50, (2, 7)).astype(np.int32)
    source[1, 4:] = model.config.pad_id
    expected_memory, expected_mask = model.encode_for_decoding(source)
    expected_memory = [np.asarray(t) for t in expected_memory]
    encoder = ort.InferenceSession(str(tmp_path / "encoder.onnx"))
    *memory, mask = encoder.run([*memory_names(2), "memory_mask"], {"source_ids": source})
    for got, want in zip(memory, expected_memory, strict=True):
        assert got.shape == (2, 4, 7, 8)
        np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_array_equal(mask, np.asarray(expected_mask))
    # 2 layers x keys/values, each (B=2, H=4, T=9, 8).
    cache = [rng.normal(size=(2, 4, 9, 8)).astype(np.float32) for _ in range(4)]
    tokens = np.array([5, 6], np.int32)
    step = ort.InferenceSession(str(tmp_path / "decoder_step.onnx"))
    for index in (0, 3, 8):
        logits, rows, normalizer = step.run(
            ["logits", "step_key_values", "log_normalizer"],
            _step_feeds(model, tokens, memory, mask, cache, index))
        wide = logits.astype(np.float64)
        np.testing.assert_allclose(
            normalizer, np.log(np.exp(wide - wide.max(1, keepdims=True)).sum(1))
            + wide.max(1), atol=1e-5)
        want_logits, want_rows = model.decode_step_key_values(tokens, expected_memory,
                                                              expected_mask, cache, index)
        np.testing.assert_allclose(logits, np.asarray(want_logits), atol=1e-4)
        np.testing.assert_allclose(rows, np.asarray(want_rows), atol=1e-5)


def test_onnx_step_of_an_older_export_asks_to_export_again(exported, tmp_path):
    """A decoder_step.onnx with the earlier single-cache interface (a checksum that matches, so
    not "corrupt") is refused with the fix, not run with wrong inputs: when loaded without the
    search graph, and at the first step with it."""
    import onnx
    from onnx import TensorProto, helper

    from export.common import MANIFEST, file_entry

    old = tmp_path / "old"
    shutil.copytree(exported[1], old, ignore=shutil.ignore_patterns("savedmodel"))
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Identity", ["cache"], ["step_key_values"]),
         helper.make_node("Identity", ["cross_key_values"], ["logits"])], "decoder_step",
        [helper.make_tensor_value_info("cache", f32, None),
         helper.make_tensor_value_info("cross_key_values", f32, None)],
        [helper.make_tensor_value_info("logits", f32, None),
         helper.make_tensor_value_info("step_key_values", f32, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    onnx.save(proto, str(old / "decoder_step.onnx"))
    data = json.loads((old / MANIFEST).read_text())
    data["files"]["decoder_step.onnx"] = file_entry(old, old / "decoder_step.onnx")
    (old / MANIFEST).write_text(json.dumps(data))
    # Without the search graph the step is loaded at once, so loading fails.
    with pytest.raises(ExportError, match="export it again"):
        load_backend(Manifest(old), "onnx", search_graph=False)
    # With it the step is loaded only when something steps (the NumPy search, the explorer):
    # the search graph still runs, and the first step fails with the same fix.
    backend = load_backend(Manifest(old), "onnx")
    assert Translator(Manifest(old), backend).translate_ids(["a b"], SearchSettings(beam_size=1))
    with pytest.raises(ExportError, match="export it again"):
        backend.sessions["decoder_step"]


def test_keras_runtime_never_follows_the_run_path_of_a_manifest(exported, tmp_path):
    run_dir, export_dir = exported
    # Beside its run, the export's manifest records the run's absolute path: not followed.
    assert json.loads((export_dir / "manifest.json").read_text())["run"] == str(run_dir.resolve())
    with pytest.raises(ExportError, match="--run"):
        load_backend(Manifest(export_dir), "keras")
    # Inside its run (runs/<name>/export), the parent is the run.
    inside = tmp_path / "run"
    inside.mkdir()
    for name in ("model.keras", "model_config.json", "spm.model"):
        shutil.copyfile(run_dir / name, inside / name)
    shutil.copytree(export_dir, inside / "export")
    source = np.array([[5, 6, 7, 3]], np.int32)
    expected = Translator(Manifest(export_dir), load_backend(Manifest(export_dir), "keras",
                                                             run_dir=run_dir))
    actual = Translator(Manifest(inside / "export"), load_backend(Manifest(inside / "export"),
                                                                  "keras"))
    np.testing.assert_array_equal(actual.search_ids(source, SearchSettings(beam_size=1)).tokens,
                                  expected.search_ids(source, SearchSettings(beam_size=1)).tokens)
    # A run holding another model is refused, naming what differs.
    config = json.loads((inside / "model_config.json").read_text())
    (inside / "model_config.json").write_text(json.dumps({**config, "d_model": 48}))
    with pytest.raises(ExportError, match="d_model"):
        load_backend(Manifest(inside / "export"), "keras")
