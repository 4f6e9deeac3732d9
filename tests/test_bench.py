"""The benchmark suite's logic (no timings are asserted): configs and FLOPs against the peers',
statistics, JSON merging, cell selection, the no-cache stepper and the report on partial data."""

from __future__ import annotations

import importlib.util
import json
import sys
import time

import numpy as np
import pytest

from bench import common, report
from bench.__main__ import commands
from bench.decode import cells, decode_once
from bench.flops import generate_flops, train_step_flops
from bench.nocache import NoCacheStepper

PEERS_COMMON = common.PEERS_DIR / "common.py"


@pytest.fixture(scope="module")
def peers():
    if not PEERS_COMMON.is_file():
        pytest.skip(f"{PEERS_COMMON} is not here")
    spec = importlib.util.spec_from_file_location("peers_common", PEERS_COMMON)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["small", "base"])
def test_configs_match_the_peers(peers, name):
    c, p = common.CONFIGS[name], peers.CONFIGS[name]
    assert (c.source_vocab_size, c.target_vocab_size, c.d_model, c.num_heads, c.d_ff,
            c.num_encoder_layers, c.num_decoder_layers, c.dropout) == (
        p["vocab"], p["vocab"], p["d_model"], p["heads"], p["ffn"], p["enc_layers"],
        p["dec_layers"], p["dropout"])
    assert c.share_embeddings and c.tie_output and not c.pre_norm
    assert c.max_target_length >= 160


@pytest.mark.parametrize("name", ["small", "base"])
def test_flop_counts_equal_the_peers(peers, name):
    c = common.CONFIGS[name]
    assert train_step_flops(c, 32, 32, 32) == peers.train_step_flops(name)
    for batch, beams in [(1, 1), (16, 4)]:
        assert generate_flops(c, batch, beams, 32, 32) == peers.generate_flops(name, batch, beams)


def test_stats_median_and_quartiles():
    s = common.stats([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s["median_s"], s["p25_s"], s["p75_s"], s["runs"]) == (3.0, 2.0, 4.0, 5)
    one = common.stats([0.5])
    assert one["median_s"] == one["p25_s"] == one["p75_s"] == 0.5


def test_interleaved_timing_spreads_every_cell_over_every_round():
    """Each round calls every function (a slow one once, a fast one until its share of the
    time is used), in order; every function ends with at least `repeats` samples."""
    calls = []
    fns = [lambda: calls.append("a"), lambda: (calls.append("b"), time.sleep(0.02))]
    timings = common.time_interleaved(fns, warmup=1, repeats=3, min_seconds=0.03)
    assert calls[:2] == ["a", "b"]  # warm-up
    rounds = "".join(calls[2:]).split("b")[:-1]  # each round: some a's, then one b
    assert len(rounds) == 3 and all(r and set(r) == {"a"} for r in rounds)
    assert [t["runs"] for t in timings] == [len("".join(rounds)), 3]
    assert all(len(t["warmup_s"]) == 1 and t["samples_s"] for t in timings)


def test_write_json_merge_keeps_unmeasured_rows(tmp_path):
    path = tmp_path / "x.json"
    common.write_json(path, {"results": [{"config": "a", "v": 1}, {"config": "b", "v": 1}]})
    common.write_json(path, {"results": [{"config": "b", "v": 2}]}, merge_keys=("config",))
    rows = json.loads(path.read_text())["results"]
    assert sorted((r["config"], r["v"]) for r in rows) == [("a", 1), ("b", 2)]


@pytest.mark.parametrize("script", ["bench.decode", "bench.duel", "bench.report",
                                    "bench.__main__", "bench.train_step"])
def test_results_naming_a_file_is_refused_in_one_line(tmp_path, script):
    """--results that is, or lies under, a file: argparse's one-line error before anything
    runs, from every bench script; a new or existing directory is accepted."""
    import subprocess
    import sys

    a_file = tmp_path / "a_file"
    a_file.write_text("kept\n")
    for value in (a_file, a_file / "below"):
        proc = subprocess.run([sys.executable, "-m", script, "--results", str(value)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines()[-1].endswith(
            f"{a_file} is a file: --results names a directory (new or existing)")
        assert "Traceback" not in proc.stderr
    assert a_file.read_text() == "kept\n"
    for value in (tmp_path, tmp_path / "new" / "dir"):
        assert common.results_directory(str(value)) == str(value)


@pytest.mark.parametrize("script, argv, message", [
    ("bench.decode", ["--new-tokens", "0"],
     "argument --new-tokens: 0 is out of range: give an integer at least 1"),
    ("bench.precision", ["--repeats", "0"],
     "argument --repeats: 0 is out of range: give an integer at least 1"),
    ("bench.precision", ["--min-seconds", "nan"],
     "argument --min-seconds: nan is out of range: give a number in [0, 3600]"),
    ("bench.train_step", ["--batch", "abc"], "argument --batch: 'abc' is not an integer"),
    ("bench.train_step", ["--token-budget", "-5"],
     "argument --token-budget: -5 is out of range: give an integer at least 0"),
    ("bench.train_real", ["--steps", "0"],
     "argument --steps: 0 is out of range: give an integer at least 1"),
    ("bench.train_real", ["--budget-minutes", "0"],
     "argument --budget-minutes: 0 is out of range: give a number in (0, 10000]"),
    ("bench.roofline", ["--n", "0"], "argument --n: 0 is out of range: give an integer at least 1"),
    ("bench.report", ["--short", "0"],
     "argument --short: 0 is out of range: give an integer at least 1"),
    ("bench.extractive_reach", ["--run", "runs/x", "--k", "0"],
     "argument --k: 0 is out of range: give an integer at least 1"),
    ("bench.extractive_reach", ["--run", "no/such/run"],
     "--run no/such/run: not a run directory (no config.yaml)"),
])
def test_bench_options_are_checked_before_anything_runs(script, argv, message, capsys):
    """A count of 0, a negative or NaN number of seconds, a word for a number, a results
    directory that is not there: argparse's one-line error and exit 2, before any timing
    (until these had types, --seconds -1 timed nothing and wrote its rows all the same)."""
    import importlib

    module = importlib.import_module(script)
    with pytest.raises(SystemExit) as stop:
        module.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith(message)
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--quick"], [], ["--repeats", "2", "--min-seconds", "0"]])
def test_precision_child_takes_the_command_its_parent_writes(argv, tmp_path):
    """bench.precision times each variant in a child process of itself; the child's options
    are bounded like the parent's, so each timing the parent can pass (--quick's
    min_seconds 0 included) must parse there, and mean the same."""
    from bench import precision

    args, timing = precision.parse(argv)
    command = precision.child_command("onnx:int8", args, timing, tmp_path / "rows.json")
    assert command[1:4] == ["-m", "bench.precision", "--child"]
    child, child_timing = precision.parse(command[3:])
    assert child.child == "onnx:int8" and child.child_out == tmp_path / "rows.json"
    assert (child.configs, child.batches, child.beams) == (args.configs, args.batches,
                                                          args.beams)
    assert child_timing["repeats"] == timing["repeats"]
    assert child_timing["min_seconds"] == timing["min_seconds"]


def test_bench_input_errors_found_later_are_one_line(tmp_path, capsys):
    """What argparse cannot see (a config file, its keys, an export directory and its
    parity.json) ends in `error: <one line>`, exit 2, before any timing or training."""
    from bench import precision, train_real

    assert train_real.main(["--config", str(tmp_path / "none.yaml"), "--no-peer"]) == 2
    assert capsys.readouterr().err.strip() == f"error: config file not found: {tmp_path / 'none.yaml'}"
    assert train_real.main(["--no-peer", "--quick", "--set", "training.nope=1"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown key(s) ['nope'] in training")
    assert precision.main(["--quality", str(tmp_path / "none"), "--no-train"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: export directory not found: {tmp_path / 'none'}"
    assert list(tmp_path.iterdir()) == []


def test_payload_records_machine_load_and_versions():
    p = common.payload("x")
    assert p["machine"]["cores"] >= 1 and p["machine"]["cpu_model"]
    assert "tensorflow" in p["versions"] and "loadavg_start" in p


def test_cells_cached_greedy_at_every_length_beam_at_the_shortest():
    got = cells([32, 128], [1, 16], [1, 4], no_cache=True)
    assert sorted(c for c in got if c[3]) == [
        (1, 1, 32, True), (1, 1, 128, True), (1, 4, 32, True), (16, 1, 32, True),
        (16, 1, 128, True), (16, 4, 32, True)]
    assert sorted(c for c in got if not c[3]) == [
        (1, 1, 32, False), (1, 1, 128, False), (1, 4, 32, False), (16, 1, 32, False),
        (16, 4, 32, False)]
    assert all(c[3] for c in cells([32, 128], [1, 16], [1, 4], no_cache=False))


@pytest.fixture(scope="module")
def nocache_exports(tmp_path_factory):
    """(model, no-cache export directory) of a tiny random model (conftest's tiny_config)."""
    from bench.nocache import export_nocache
    from keras_transformer.config import TransformerConfig

    config = TransformerConfig.preset(
        "tiny", source_vocab_size=40, target_vocab_size=40, d_model=32, num_heads=4, d_ff=64,
        max_source_length=24, max_target_length=24, dropout=0.0)
    model = common.build_model(config, seed=0)
    out = tmp_path_factory.mktemp("nocache")
    export_nocache(model, out)
    return model, out


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["keras", "savedmodel", "onnx", "tflite"])
@pytest.mark.parametrize("beam", [1, 2])
def test_no_cache_stepper_decodes_like_the_cached_one(tiny_config, nocache_exports, runtime,
                                                      beam):
    from bench.nocache import load_runtime, open_export
    from keras_transformer.tf_backend import keras_stepper

    model, root = nocache_exports
    uncached_runtime = (load_runtime(runtime, "tiny", model=model) if runtime == "keras"
                        else open_export(runtime, root))
    source = np.random.default_rng(0).integers(4, 40, (2, 6)).astype("int32")

    def factory(src, beam_size, new_tokens, cache):
        if cache:
            return keras_stepper(model, src, beam_size=beam_size, max_length=new_tokens)
        return NoCacheStepper(uncached_runtime, src, beam_size=beam_size)

    cached = decode_once(factory, tiny_config, source, beam, 5, cache=True)
    uncached = decode_once(factory, tiny_config, source, beam, 5, cache=False)
    assert cached.shape == (2, 5) and not (cached == tiny_config.eos_id).any()
    np.testing.assert_array_equal(cached, uncached)


def test_report_on_missing_files_says_na(tmp_path):
    text = report.build(tmp_path / "none", tmp_path / "no_peers")
    assert "n/a" in text and "## Decoding" in text and "## Training" in text


def _decode_row(runtime, batch, beam, n, cache, tok_s):
    return {"runtime": runtime, "config": "small", "batch": batch, "beam": beam,
            "new_tokens": n, "cache": cache, "tokens_per_s": tok_s,
            "per_token_ms": batch * 1e3 / tok_s, "process_peak_rss_mb": 900.0,
            "ms_per_batch": {"median": batch * n * 1e3 / tok_s}}


def test_report_compares_with_the_best_peer(tmp_path):
    ours, peers = tmp_path / "ours", tmp_path / "peers"
    common.write_json(ours / "decode_onnx.json", {"results": [
        _decode_row("onnx", 1, 1, 32, True, 200.0), _decode_row("onnx", 1, 1, 128, True, 100.0)]})
    common.write_json(ours / "decode_keras.json", {"results": [
        _decode_row("keras", 1, 1, 32, True, 100.0), _decode_row("keras", 1, 1, 32, False, 50.0),
        {"config": "small", "error": "boom"}]})
    common.write_json(ours / "train_step.json", {"results": [
        {"config": "small", "jit_compile": False, "precision": "float32", "batch": 32,
         "length": 32, "target_tokens_per_s": 2048.0, "median_s": 0.5, "peak_rss_mb": 1000}]})
    common.write_json(ours / "roofline.json", {"results": [{"op": "np.matmul", "gflops": 100.0}]})
    peer_row = {"config": "small", "batch": 1, "beam": 1, "tokens_per_s": {"best": 400.0}}
    common.write_json(peers / "ctranslate2_infer.json", {"peer": "ctranslate2", "kind": "inference",
                      "results": [{**peer_row, "compute_type": "float32"}]})
    common.write_json(peers / "keras_hub_train.json", {"peer": "keras-hub", "kind": "training",
                      "results": [{"config": "small", "jit_compile": False,
                                   "target_tokens_per_s": {"best": 1024.0}}]})
    text = report.build(ours, peers)
    decoding = next(line for line in text.splitlines() if line.startswith("| small | 1 | 1 |"))
    assert "onnx 200" in decoding and "ctranslate2 float32 400" in decoding
    assert "0.50x" in decoding
    assert "| onnx | small | 1 | 1 | 5.00 | 10.00 | 2.00x |" in text  # per-token 128 vs 32
    assert "| keras | small | 1 | 1 | 32 | 320 | 640 | 2.00x |" in text  # no-cache vs cache
    assert "2.00x" in next(line for line in text.splitlines() if "ours XLA off float32" in line)


def test_main_runs_decode_per_config_with_merge():
    class Args:
        quick, results, configs = True, None, None

    (first,) = commands("decode-keras", Args)
    assert "--no-cache" in first and "--quick" in first and "--merge" not in first
    Args.configs = ["small", "base"]
    first, second = commands("decode-onnx", Args)
    assert "--merge" in second and "--no-cache" in second
    (xla,) = commands("decode-keras-xla", Args)[:1]
    assert "--no-cache" not in xla


def test_machine_names_the_matrix_unit_flags_lscpu_lists():
    import subprocess

    listed = set()
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Flags:"):
            listed = set(line.split(":", 1)[1].split())
    if not listed:
        pytest.skip("lscpu lists no flags here")
    flags = common.machine()["cpu_flags"]
    assert set(flags) == set(common.MATRIX_FLAGS)
    assert flags == {name: name in listed for name in common.MATRIX_FLAGS}


def test_the_recorded_command_and_environment_say_nothing_of_where_the_project_lives():
    argv = [str(common.ROOT / "bench" / "decode.py"), "--results",
            str(common.ROOT / "bench" / "results" / "x"), "--cache-dir", "/elsewhere/cache"]
    assert common.command_line(argv) == ["python", "-m", "bench.decode", "--results",
                                         "bench/results/x", "--cache-dir", "/elsewhere/cache"]
    assert common.command_line([str(common.ROOT / "bench" / "__main__.py"), "--quick"]) == [
        "python", "-m", "bench", "--quick"]
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_CLI_CONFIG_FILE": "/home/u/.terraformrc",
           "XLA_FLAGS": "--x", "CT2_USE_MKL": "0", "HOME": "/home/u", "OMP_NUM_THREADS": "2"}
    assert common.recorded_env(env) == {"CT2_USE_MKL": "0", "OMP_NUM_THREADS": "2",
                                        "TF_CPP_MIN_LOG_LEVEL": "2", "XLA_FLAGS": "--x"}


def test_cpu_model_names_family_and_model_of_the_first_processor(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\n"
                    "model\t\t: 2\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\n"
                    "cpu family\t: 25\nmodel\t\t: 17\nmodel name\t: other\n")
    assert common.cpu_model(str(info)) == "AMD EPYC (family 26, model 2)"
    (tmp_path / "bare").write_text("model name\t: Some CPU\n")
    assert common.cpu_model(str(tmp_path / "bare")) == "Some CPU"


def test_precision_speedups_compare_like_with_like():
    from bench.precision import add_speedups

    def row(runtime, precision, median, **extra):
        return {"runtime": runtime, "precision": precision, "config": "small", "batch": 1,
                "beam": 1, "median_s": median, **extra}

    rows = [row("onnx", "float32", 0.4), row("onnx", "int8", 0.2),
            row("ctranslate2", "float32", 0.3, ct2_use_mkl="0"),
            row("ctranslate2", "float32", 0.9, ct2_use_mkl="1"),
            row("ctranslate2", "int8", 0.6, ct2_use_mkl="1"),
            row("ctranslate2", "bfloat16", None, ct2_use_mkl="0", error="unsupported"),
            row("keras-train", "float32", 1.0, jit_compile=True),
            row("keras-train", "mixed_bfloat16", 1.25, jit_compile=True),
            row("keras-train", "mixed_bfloat16", 2.0, jit_compile=False)]  # no float32 XLA-off
    add_speedups(rows)
    assert [r.get("speedup_vs_float32") for r in rows] == [1.0, 2.0, 1.0, 1.0, 1.5, None, 1.0,
                                                           0.8, None]


def test_precision_table_shows_a_variant_that_failed_before_timing_as_a_failed_row():
    from bench.precision import table

    rows = [{"runtime": "ctranslate2", "precision": "int8",
             "error": "peers/python not found (--ct2-python)"},
            {"error": "bench.train_step wrote nothing"},
            {"runtime": "onnx", "precision": "float32", "config": "small", "batch": 1,
             "beam": 1, "ms_per_batch": {"median": 12.3}, "tokens_per_s": 1234.5,
             "speedup_vs_float32": 1.0}]
    assert table(rows) == [
        ["ctranslate2", "int8", "", "", "", "FAILED", "", "",
         "peers/python not found (--ct2-python)"],
        ["", "", "", "", "", "FAILED", "", "", "bench.train_step wrote nothing"],
        ["onnx", "float32", "small", 1, 1, "12", "1,234", "1.00", ""]]


def test_quantized_bench_exports_live_apart_and_leave_the_plain_meta_as_it_was(tmp_path):
    from bench import export_models as em

    assert em.export_dir(tmp_path, "small") == tmp_path / "small" / "export"
    assert em.export_dir(tmp_path, "small", "all") == tmp_path / "small" / "export-all"
    plain, quantized = em._meta("small", 1), em._meta("small", 1, "all")
    assert "quantize" not in plain and plain["formats"] == list(em.FORMATS)
    assert quantized == {**plain, "formats": ["onnx", "tflite"], "quantize": "all"}
    assert not em.is_current(tmp_path, "small", 1, "all")


def test_extractive_reach_is_the_oracle_among_the_first_k_sentences():
    """Hand-made: the reference is the second sentence, so an oracle over the first sentence
    finds nothing (ROUGE 0, none of the whole oracle's one sentence inside) and over the first
    two copies it (ROUGE 100, all of it inside)."""
    from bench.extractive_reach import reach, whole_oracles

    articles = ["Mưa lớn ở Huế . Cầu Trường Tiền đóng cửa . Trường học nghỉ ."]
    references = ["Cầu Trường Tiền đóng cửa"]
    whole = whole_oracles(articles, references)
    assert whole == [[1]]
    assert reach(articles, references, whole, 1) == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0,
                                              "oracle_sentences_inside_pct": 0.0}
    assert reach(articles, references, whole, 2) == {"rouge1": 100.0, "rouge2": 100.0,
                                              "rougeL": 100.0,
                                              "oracle_sentences_inside_pct": 100.0}


def test_a_step_killed_by_a_signal_is_reported_with_the_signal(monkeypatch, capsys):
    import bench.__main__ as bench_main

    suicide = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    exits = [sys.executable, "-c", "raise SystemExit(3)"]
    monkeypatch.setattr(bench_main, "commands",
                        lambda step, args: [suicide] if step == "roofline" else [exits])
    with pytest.raises(SystemExit) as raised:
        bench_main.main(["--only", "roofline", "report", "--no-peers"])
    out = capsys.readouterr().out
    assert raised.value.code == 1
    assert "!!! roofline failed (killed by SIGKILL)" in out
    assert "!!! report failed (exit status 3)" in out
    assert "FAILED steps: roofline report" in out


def test_learning_curves_draw_the_committed_metrics(tmp_path):
    from bench import learning_curves

    pre = learning_curves.pretraining_curves()
    first = json.loads((learning_curves.SOURCE / "vi_masked_lm_metrics.json").read_text())
    more = json.loads((learning_curves.SOURCE / "vi_masked_lm_more_metrics.json").read_text())
    assert pre[0][2] == first["epoch_dev"]["masked_perplexity"]
    # The continued run's minutes follow the first run's last.
    assert pre[1][1][0] == pytest.approx(first["epoch_minutes"][-1]
                                         + more["epoch_minutes"][0])
    # A run of its own starts at 0.
    recipe = json.loads((learning_curves.SOURCE / "vi_masked_lm_recipe_metrics.json").read_text())
    assert pre[2][1] == recipe["epoch_minutes"]
    tunes = dict((label, f1) for label, _, f1 in learning_curves.fine_tune_curves())
    random = json.loads((learning_curves.SOURCE / "uit_random_metrics.json").read_text())
    assert tunes["random weights"] == random["epoch_dev"]["macro_f1"]
    assert learning_curves.main(["--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "masked_lm_dev_perplexity.png", "uit_vsfc_dev_macro_f1.png"]


class _Parsed(SystemExit):
    """Raised with the namespace once a bench script's parser has accepted its command line
    (a SystemExit: entry_point lets it through as it lets argparse's own through)."""

    def __init__(self, namespace):
        super().__init__(0)
        self.namespace = namespace


def _parsed_by(module_name: str, argv: list[str], monkeypatch):
    """The namespace `python -m module_name *argv` parses to; nothing runs past the parser."""
    import argparse
    import importlib

    parse_args = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, *a, **k):
        raise _Parsed(parse_args(self, *a, **k))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_and_stop)
    with pytest.raises(_Parsed) as parsed:
        importlib.import_module(module_name).main(argv)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    return parsed.value.namespace


def test_python_m_bench_hands_its_cache_dir_to_every_step_that_keeps_models(tmp_path,
                                                                            monkeypatch):
    """`python -m bench --cache-dir DIR`: each step's own parser gets DIR (absolute: the
    steps run in the project's root), every step that has a --cache-dir gets it, and each
    step's environment names it for anything that reads the default."""
    import bench.__main__ as bench_main
    from bench.export_models import CACHE_ENV

    monkeypatch.chdir(tmp_path)
    for quick in ([], ["--quick"]):
        args = bench_main.build_parser().parse_args(["--cache-dir", "models", *quick])
        keeping = set()
        for step in bench_main.STEPS:
            if step == "peers":  # bash ../shared/peers/run_all.sh: the peers' own models
                continue
            for cmd in commands(step, args):
                assert cmd[1] == "-m"
                namespace = _parsed_by(cmd[2], cmd[3:], monkeypatch)
                if hasattr(namespace, "cache_dir"):
                    assert namespace.cache_dir == tmp_path / "models", (step, cmd)
                    keeping.add(step)
        assert keeping == {"export_models", *bench_main.DECODE_STEPS, "duel"}
        assert bench_main.step_env(args)[CACHE_ENV] == str(tmp_path / "models")


def test_every_cache_dir_defaults_to_kt_bench_cache(tmp_path):
    """KT_BENCH_CACHE is the --cache-dir default of every bench script that keeps models,
    python -m bench's own included; unset or empty, /tmp/kt-bench."""
    import os
    import subprocess

    modules = ["bench.__main__", "bench.export_models", "bench.decode", "bench.precision",
               "bench.duel", "bench.serve", "bench.nocache"]
    code = ("import argparse, importlib, json, sys\n"
            "parse_args = argparse.ArgumentParser.parse_args\n"
            "class Parsed(SystemExit):\n"
            "    pass\n"
            "def stop(self, *a, **k):\n"
            "    raise Parsed(str(parse_args(self, *a, **k).cache_dir))\n"
            "argparse.ArgumentParser.parse_args = stop\n"
            "found = {}\n"
            "for name in sys.argv[1:]:\n"
            "    try:\n"
            "        importlib.import_module(name).main([])\n"
            "    except Parsed as parsed:\n"
            "        found[name] = parsed.code\n"
            "print(json.dumps(found))\n")
    for value, expected in ((str(tmp_path / "models"), str(tmp_path / "models")),
                            ("", "/tmp/kt-bench")):
        env = {**os.environ, "KT_BENCH_CACHE": value, "TF_CPP_MIN_LOG_LEVEL": "3"}
        done = subprocess.run([sys.executable, "-c", code, *modules], env=env, cwd=common.ROOT,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == dict.fromkeys(modules,
                                                                                 expected)
    assert not (tmp_path / "models").exists()


def test_a_cache_dir_that_is_a_file_is_refused_in_one_line(tmp_path, capsys):
    import bench.__main__ as bench_main

    a_file = tmp_path / "a_file"
    a_file.write_text("kept\n")
    with pytest.raises(SystemExit) as stop:
        bench_main.main(["--cache-dir", str(a_file / "below"), "--only", "report"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith(
        f"{a_file} is a file: --cache-dir names a directory (new or existing)")
    assert "Traceback" not in err and a_file.read_text() == "kept\n"


def test_precision_prepare_without_ctranslate2_says_so_before_any_export(tmp_path, monkeypatch,
                                                                        capsys):
    from bench import precision

    def no_export(*args, **kwargs):
        raise AssertionError("exported before the CTranslate2 Python was checked")

    monkeypatch.setattr(precision, "ensure_in_child", no_export)
    missing = tmp_path / "peers" / "torch" / "bin" / "python"
    assert precision.main(["--prepare", "--configs", "demo", "small", "--ct2-python",
                           str(missing), "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"error: {missing} not found: bash ../shared/peers/setup_venvs.sh, "
                           f"--ct2-python PATH, or --variants without ct2:*")
    assert not (tmp_path / "cache").exists()


def test_precision_prepare_says_what_it_made_or_found(tmp_path, monkeypatch, capfd):
    """--prepare: one line per export found (an export it makes is said by its child) and one
    per CTranslate2 model, in the cache's ct2-models; a failed conversion is one line."""
    from bench import precision

    made = []

    def fake_ensure(name, cache_dir, quantize):
        made.append((name, cache_dir, quantize))
        return cache_dir / name / "export-all"

    monkeypatch.setattr(precision, "ensure_in_child", fake_ensure)
    monkeypatch.setattr(precision, "is_current",
                        lambda cache_dir, name, quantize: name == "small")
    peers = tmp_path / "peers"
    peers.mkdir()
    (peers / "bench_ct2.py").write_text(
        "import os\nfrom pathlib import Path\n"
        "def ensure_prepared(cfg):\n"
        "    if cfg == 'broken':\n"
        "        raise SystemExit(3)\n"
        "    return Path(os.environ['PEER_BENCH_MODELS']) / f'ct2_{cfg}'\n")
    monkeypatch.setattr(precision, "PEERS_DIR", peers)
    cache = tmp_path / "cache"
    argv = ["--prepare", "--ct2-python", sys.executable, "--cache-dir", str(cache)]
    assert precision.main([*argv, "--configs", "small", "base"]) in (0, None)
    out = capfd.readouterr().out.strip().splitlines()
    assert out == [f"small: found the exports in {cache / 'small' / 'export-all'}",
                   f"small: CTranslate2 model in {cache / 'ct2-models' / 'ct2_small'}",
                   f"base: CTranslate2 model in {cache / 'ct2-models' / 'ct2_base'}"]
    assert made == [("small", cache, "all"), ("base", cache, "all")]

    # Without ct2:* variants, no CTranslate2 Python is needed.
    assert precision.main(["--prepare", "--ct2-python", str(tmp_path / "none"),
                           "--cache-dir", str(cache), "--configs", "small",
                           "--variants", "onnx:int8"]) in (0, None)
    assert capfd.readouterr().out.strip().splitlines() == [
        f"small: found the exports in {cache / 'small' / 'export-all'}"]

    monkeypatch.setitem(precision.CONFIGS, "broken", precision.CONFIGS["small"])
    assert precision.main([*argv, "--configs", "broken"]) == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert err[-1] == ("error: CTranslate2's conversion of broken failed (exit status 3; "
                       "its output is above)")


def test_backends_quick_is_one_short_round_written_apart(tmp_path, monkeypatch, capsys):
    """bench.backends writes bench/results/backends.json, the committed file, only when asked
    for the full run; --quick (one round, each bucket shape once) goes to the git-ignored
    bench/results/quick, --results elsewhere."""
    from bench import backends

    full, quick = backends.parse_args([]), backends.parse_args(["--quick"])
    assert (full.rounds, full.steps, full.quick) == (2, 30, False)
    assert (quick.rounds, quick.steps, quick.quick) == (1, len(backends.LENGTHS), True)
    assert backends.parse_args(["--quick", "--steps", "7"]).steps == 7
    calls = []

    def fake_child(python, backend, config, steps):
        calls.append((backend, steps))
        return {"backend": backend, "jit_compile": backend == "jax",
                "median_step_ms": 100.0 * len(calls), "target_tokens_per_second": 1.0}

    monkeypatch.setattr(backends, "run_child", fake_child)
    monkeypatch.chdir(tmp_path)
    pythons = [f"--python={backend}={sys.executable}" for backend in backends.DEFAULT_PYTHONS]
    assert backends.main(["--quick", *pythons]) == 0
    assert calls == [(backend, len(backends.LENGTHS)) for backend in backends.DEFAULT_PYTHONS]
    data = json.loads((tmp_path / common.QUICK_RESULTS / "backends.json").read_text())
    assert data["quick"] is True and data["steps"] == len(backends.LENGTHS)
    assert [len(rounds) for rounds in data["rounds"].values()] == [1, 1, 1]
    assert not (tmp_path / common.RESULTS / "backends.json").exists()

    assert backends.main(["--rounds", "1", "--results", str(tmp_path / "x"), *pythons]) == 0
    assert json.loads((tmp_path / "x" / "backends.json").read_text())["steps"] == 30
    assert backends.main(["--rounds", "1", "--steps", "2", *pythons]) == 0
    assert json.loads((tmp_path / common.RESULTS / "backends.json").read_text())["quick"] is False
    assert "wrote bench/results/backends.json" in capsys.readouterr().out
