"""Reduced precision on this CPU: decoding speed of every precision each runtime offers, and a
float32 / mixed_bfloat16 training step, in one run.

    python -m bench.precision [--configs small base] [--batches 1 16] [--beams 1 4]
        [--variants keras:float32 ... ct2:int8] [--no-train] [--ct2-python PATH] [--quick]
    python -m bench.precision --prepare      # the exports and CT2 conversions, untimed

Decoding: the workloads of bench.decode (random-weight `small` and `base`, 32 source ids,
exactly 32 new tokens per row, the key/value cache), for each variant:

- keras:float32, keras:mixed_bfloat16: the model under that Keras dtype policy (float32
  weights, bfloat16 compute), same weights, through tf.function (no XLA);
- onnx:float32, onnx:int8: the export's files (int8: dynamic int8 weight MatMuls), stepped
  from the NumPy search; onnx-search:float32, onnx-search:int8: the same variants' search
  graphs (search.onnx, search.int8.onnx: the whole search in one call, as bench.decode's
  onnx-search);
  onnx:fp16: the float32 files converted to float16 by onnxruntime.transformers.float16
  (inputs and outputs kept float32), to see whether onnxruntime's CPU provider gains from it;
- tflite:float32, tflite:fp16, tflite:int8: the export's variants;
- ct2:<compute type>: CTranslate2 on the peers' same-size Marian model
  (bench/precision_ct2.py in the peers' torch venv), with CT2_USE_MKL=0 and 1, both kept.

Each variant runs in its own process (bench.decode's timing: cells interleaved in rounds).
Training: bench.train_step's float32 and mixed_bfloat16 cells of `small`, XLA off and on, in
child processes of the same run. Quality (--quality EXPORT, a trained translation model's
export with its parity.json): greedy BLEU on the demo test split of the variants parity does
not score, Keras mixed_bfloat16 and the float16 ONNX conversion, next to Keras float32 and
the parity record's. Writes bench/results/precision.json; its `machine` names the CPU model
and its matrix-unit flags.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from keras_transformer.decoding import SearchSettings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.common import (  # noqa: E402
    CONFIGS,
    PEER_TORCH_PYTHON,
    PEERS_DIR,
    SEED,
    SOURCE_LENGTH,
    add_results_option,
    cache_directory,
    cpu_flags,
    cpu_model,
    payload,
    peak_rss_mb,
    print_table,
    results_dir,
    write_json,
)
from bench.export_models import CACHE_DIR, CACHE_HELP, ensure_in_child, is_current  # noqa: E402
from keras_transformer.command_line import (  # noqa: E402
    CommandError,
    add_debug_flag,
    entry_point,
    float_in,
    int_in,
)

OURS = ("keras:float32", "keras:mixed_bfloat16", "onnx:float32", "onnx:int8", "onnx:fp16",
        "onnx-search:float32", "onnx-search:int8", "tflite:float32", "tflite:fp16",
        "tflite:int8")
CT2 = ("ct2:float32", "ct2:int8", "ct2:int8_float32", "ct2:bfloat16", "ct2:int8_bfloat16")
VARIANTS = OURS + CT2
NEW_TOKENS = 32


def keras_model(name: str, precision: str):
    """bench.common.build_model's seeded float32 model; for mixed_bfloat16 the same weights
    in a model built under that policy (bfloat16 compute, float32 variables and logits)."""
    from bench.common import build_model

    model = build_model(CONFIGS[name], SEED)
    return model if precision == "float32" else keras_model_like(model, precision)


def onnx_fp16_backend(manifest):
    """An OnnxBackend whose sessions run float16 copies of the float32 graphs (float32 inputs
    and outputs, casts inside), converted by onnxruntime.transformers.float16."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from export.runtime.onnx import OnnxBackend, session_options

    # Stepwise only (its runs step from the NumPy search): no search.onnx to convert.
    backend = OnnxBackend(manifest, "float32", search_graph=False)
    files = manifest.format_files("onnx", "float32")
    # A session holds its graph once made, so the float16 files live only until then.
    with tempfile.TemporaryDirectory(prefix="kt-onnx-fp16-") as tmp:
        for role in list(backend.sessions):
            model = convert_float_to_float16(onnx.load(str(manifest.file(files[role]))),
                                             keep_io_types=True)
            path = Path(tmp) / f"{role}.fp16.onnx"
            onnx.save(model, str(path))
            backend.sessions[role] = backend._session(
                path, session_options(spinning=role != "encoder"))
    return backend


def stepper_factory(variant: str, name: str, cache_dir: Path):
    """(source, beam, new_tokens, cache) -> stepper, as bench.decode's factories."""
    runtime, precision = variant.split(":")
    if runtime == "keras":
        from keras_transformer.tf_backend import keras_stepper

        model = keras_model(name, precision)

        def keras_factory(source, beam, new_tokens, cache):
            return keras_stepper(model, source, beam_size=beam, max_length=new_tokens)

        return keras_factory
    from export.common import Manifest
    from export.kinds import load_backend
    from keras_transformer.generation import BackendStepper

    manifest = Manifest(ensure_in_child(name, cache_dir, quantize="all"))
    if runtime == "onnx-search":
        from bench.decode import whole_search_factory

        return whole_search_factory(manifest, precision)
    backend = (onnx_fp16_backend(manifest) if variant == "onnx:fp16"
               else load_backend(manifest, runtime, precision, search_graph=False))

    def export_factory(source, beam, new_tokens, cache):
        return BackendStepper(backend, source, beam_size=beam, max_length=new_tokens)

    return export_factory


def measure_ours(variant: str, configs, batches, beams, timing, cache_dir) -> list[dict]:
    """Every cell of one of our variants, in this process (bench.decode's Cell and timing)."""
    from bench.common import time_interleaved
    from bench.decode import Cell

    runtime, precision = variant.split(":")
    rows = []
    for name in configs:
        base = {"runtime": runtime, "precision": precision, "config": name,
                "new_tokens": NEW_TOKENS, "source_length": SOURCE_LENGTH}
        try:
            factory = stepper_factory(variant, name, cache_dir)
        except Exception as err:  # e.g. no CPU kernel for a float16 op: every cell fails
            error = f"{type(err).__name__}: {str(err)[:1500]}"
            rows += [{**base, "batch": b, "beam": k, "error": error}
                     for b in batches for k in beams]
            continue
        cells = [Cell(factory, name, runtime, b, k, NEW_TOKENS, True)
                 for b in batches for k in beams]
        for cell, t in zip(cells, time_interleaved(cells, **timing), strict=True):
            row = {**cell.result(t), "precision": precision}
            row.pop("gflops", None)
            rows.append(row)
            print(f"{variant} {name} b={cell.batch} beam={cell.beam}: "
                  + (row["error"][:200] if "error" in row
                     else f"{row['ms_per_batch']['median']:.0f} ms"), flush=True)
    peak = peak_rss_mb()
    for row in rows:
        row["process_peak_rss_mb"] = peak
    return rows


# CTranslate2's default GEMM backend on an x86 CPU is MKL, which can be the slower one there:
# every comparison runs both and keeps the faster.
CT2_MKL_SETTINGS = ("0", "1")


def ct2_command(args, compute_type: str, mkl: str, *extra: str) -> tuple[list[str], dict]:
    """(command, environment) of bench/precision_ct2.py in the peers' venv (args.ct2_python)
    at one compute type and CT2_USE_MKL setting, its models under args.cache_dir."""
    cmd = [str(args.ct2_python), str(Path(__file__).with_name("precision_ct2.py")),
           "--peers-dir", str(PEERS_DIR), "--compute-type", compute_type, *extra]
    env = {**os.environ, "CT2_USE_MKL": mkl,
           "PEER_BENCH_MODELS": str(args.cache_dir / "ct2-models")}
    return cmd, env


def child_command(variant: str, args, timing: dict, out: Path) -> list[str]:
    """The command that times one of our variants in a fresh process (this module, --child)."""
    return [sys.executable, "-m", "bench.precision", "--child", variant, "--child-out",
            str(out), "--cache-dir", str(args.cache_dir), "--repeats", str(timing["repeats"]),
            "--min-seconds", str(timing["min_seconds"]), "--configs", *args.configs,
            "--batches", *map(str, args.batches), "--beams", *map(str, args.beams)]


def run_child(variant: str, args, timing: dict) -> list[dict]:
    """One variant in a fresh process (ours: this module with --child; ct2: precision_ct2.py
    in the peers' venv, once per CT2_USE_MKL)."""
    runtime, precision = variant.split(":")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        common = ["--configs", *args.configs, "--batches", *map(str, args.batches),
                  "--beams", *map(str, args.beams)]
        if runtime != "ct2":
            proc = subprocess.run(child_command(variant, args, timing, out),
                                  stderr=subprocess.PIPE, text=True)
            if proc.returncode == 0 and out.exists():
                return json.loads(out.read_text())
            return [{"runtime": runtime, "precision": precision, "config": c, "batch": b,
                     "beam": k, "error": proc.stderr[-2000:]}
                    for c in args.configs for b in args.batches for k in args.beams]
        rows = []
        for mkl in CT2_MKL_SETTINGS:
            cmd, env = ct2_command(args, precision, mkl, "--repeats", str(timing["repeats"]),
                                   "--min-seconds", str(timing["min_seconds"]),
                                   "--out", str(out), *common)
            proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
            if proc.returncode == 0 and out.exists():
                data = json.loads(out.read_text())
                for row in data["results"]:
                    cfg = data["info"].get(row["config"], {})
                    row.update(ct2_version=data["versions"]["ctranslate2"],
                               supported_compute_types_cpu=data["supported_compute_types_cpu"],
                               compute_type_used=cfg.get("compute_type_used"),
                               backend_info=cfg.get("backend_info"),
                               tokens_equal_to_hf_float32_greedy=cfg.get(
                                   "tokens_equal_to_hf_float32_greedy"))
                rows += data["results"]
            else:
                rows += [{"runtime": "ctranslate2", "precision": precision, "config": c,
                          "batch": b, "beam": k, "ct2_use_mkl": mkl,
                          "error": proc.stderr[-2000:]}
                         for c in args.configs for b in args.batches for k in args.beams]
            out.unlink(missing_ok=True)
        return rows


def quality_export(export_dir: Path, sentences: int):
    """-> (Manifest, parity.json's record) of the --quality export, or the one-line error of
    what is missing (main checks this before its minutes of timing)."""
    from export.choice import read_record
    from export.common import Manifest

    manifest = Manifest(export_dir)
    record = read_record(export_dir)
    if record["sentences"] != sentences:
        raise ValueError(f"{export_dir}/parity.json scored {record['sentences']} sentences, "
                         f"not {sentences}: run export.parity with --bleu-sentences {sentences}")
    return manifest, record


def quality_rows(export_dir: Path, sentences: int) -> list[dict]:
    """Greedy BLEU on `sentences` demo test sentences of Keras float32 and mixed_bfloat16,
    the float16 ONNX conversion and every variant of the export, each one's delta from Keras
    float32, how many of its translations differ from Keras float32's, and the BLEU that
    python -m export.parity recorded for it (parity.json, the same sentences)."""
    from export.kinds import load_backend
    from export.kinds.decoding.parity import bleu, demo_test_split
    from export.runtime.base import Translator
    from keras_transformer.tf_backend import KerasBackend

    manifest, record = quality_export(export_dir, sentences)
    sources, references = demo_test_split(sentences)
    keras32 = load_backend(manifest, "keras").model
    mixed = keras_model_like(keras32, "mixed_bfloat16")
    backends = {("keras", "float32"): KerasBackend(keras32),
                ("keras", "mixed_bfloat16"): KerasBackend(mixed),
                ("onnx", "fp16"): onnx_fp16_backend(manifest)}
    recorded = {(v["runtime"], v["variant"]): v["score"] for v in record["variants"]}
    for key in recorded:
        backends[key] = load_backend(manifest, *key)
    rows, reference = [], None
    for (runtime, precision), backend in backends.items():
        hyps = Translator(manifest, backend).translate(sources, SearchSettings(beam_size=1))
        reference = reference or hyps
        score = bleu(hyps, references)
        rows.append({"runtime": runtime, "precision": precision, "bleu": score,
                     "delta_vs_float32": round(score - rows[0]["bleu"] if rows else 0.0, 2),
                     "sentences_differing_from_float32": sum(
                         a != b for a, b in zip(hyps, reference, strict=True)),
                     "parity_json_bleu": recorded.get((runtime, precision))})
        rows[-1]["within_0.5"] = rows[-1]["delta_vs_float32"] >= -0.5
    return rows


def keras_model_like(model, precision: str):
    """A Transformer of `model`'s config and weights built under the dtype policy `precision`."""
    import numpy as np

    from keras_transformer.models.transformer import Transformer

    other = Transformer(model.config, dtype=precision)
    ids = np.full((1, 4), 4, "int32")
    other((ids, ids), training=False)
    other.set_weights(model.get_weights())
    return other


MATMUL_SHAPES = ((16, 512, 2048), (512, 512, 2048), (2048, 2048, 2048))  # (m, k, n)


def matmul_rows(timing: dict) -> list[dict]:
    """GFLOP/s of one TF (oneDNN) matmul of float32 and of bfloat16 operands at a few (m, k, n):
    a decode step's FFN at batch 16, a training batch's, and the roofline's square one."""
    import tensorflow as tf

    from bench.common import time_calls

    rows = []
    for m, k, n in MATMUL_SHAPES:
        for dtype in ("float32", "bfloat16"):
            a = tf.cast(tf.random.stateless_normal((m, k), (1, 2)), dtype)
            b = tf.cast(tf.random.stateless_normal((k, n), (3, 4)), dtype)
            matmul = tf.function(lambda a=a, b=b: tf.linalg.matmul(a, b))
            t = time_calls(matmul, warmup=2, repeats=max(timing["repeats"], 3),
                           min_seconds=max(timing["min_seconds"] / 3, 0.2))
            rows.append({"runtime": "tf-matmul", "precision": dtype, "m": m, "k": k, "n": n,
                         "gflops": 2 * m * k * n / t["median_s"] / 1e9, **t})
            print(f"tf matmul {dtype} {m}x{k}x{n}: {rows[-1]['gflops']:.0f} GFLOP/s", flush=True)
    return rows


def train_rows(args) -> list[dict]:
    """bench.train_step's float32 and mixed_bfloat16 cells of `small`, XLA off and on."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "train.json"
        cmd = [sys.executable, "-m", "bench.train_step", "--configs", *args.train_configs,
               "--jit", "both", "--precision", "float32", "mixed_bfloat16", "--out", str(out)]
        if args.quick:
            cmd = [*cmd[:-2], "--quick", "--out", str(out)]
        subprocess.run(cmd)
        if not out.exists():
            return [{"error": "bench.train_step wrote nothing"}]
        return json.loads(out.read_text())["results"]


def add_speedups(rows: list[dict]) -> None:
    """speedup_vs_float32: the same runtime's float32 median time / this row's (ct2: the
    float32 row with the same CT2_USE_MKL; training: the same config and XLA setting)."""
    def key(r, precision):
        return (r.get("runtime"), r.get("ct2_use_mkl"), r.get("config"), r.get("batch"),
                r.get("beam"), r.get("jit_compile"), r.get("m"), r.get("n"), precision)

    times = {key(r, r["precision"]): r["median_s"] for r in rows
             if "error" not in r and "median_s" in r}
    for r in rows:
        ref = times.get(key(r, "float32"))
        if "error" not in r and ref and "median_s" in r:
            r["speedup_vs_float32"] = round(ref / r["median_s"], 3)


def table(rows: list[dict]) -> list[list]:
    out = []
    for r in rows:
        if "jit_compile" in r or "gflops" in r and "m" in r:
            continue
        # A variant that failed before it timed anything (CTranslate2 without its Python,
        # bench.train_step writing nothing) names only what it knows.
        name = r.get("runtime", "") + (f" (MKL {r['ct2_use_mkl']})" if r.get("ct2_use_mkl")
                                       else "")
        head = [name, *(r.get(key, "") for key in ("precision", "config", "batch", "beam"))]
        if "error" in r:
            out.append(head + ["FAILED", "", "", r["error"].strip().splitlines()[-1][:60]])
            continue
        out.append(head + [f"{r['ms_per_batch']['median']:.0f}", f"{r['tokens_per_s']:,.0f}",
                           f"{r.get('speedup_vs_float32', float('nan')):.2f}", ""])
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=None, choices=CONFIGS,
                        help="default small base (demo with --quick)")
    parser.add_argument("--batches", type=int_in(1), nargs="+", default=[1, 16])
    parser.add_argument("--beams", type=int_in(1), nargs="+", default=[1, 4])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--repeats", type=int_in(1), default=3, help="timed rounds per cell")
    parser.add_argument("--min-seconds", type=float_in(0, 3600), default=1.5,
                        help="timed seconds per cell, over all rounds")
    parser.add_argument("--no-train", action="store_true", help="skip the training cells")
    parser.add_argument("--train-configs", nargs="+", default=["small"], choices=CONFIGS)
    parser.add_argument("--ct2-python", type=Path, default=PEER_TORCH_PYTHON,
                        help="a Python with ctranslate2 (the peers' torch venv)")
    parser.add_argument("--cache-dir", type=cache_directory, default=CACHE_DIR,
                        help=CACHE_HELP)
    parser.add_argument("--prepare", action="store_true",
                        help="only make the exports and the CT2 conversions (untimed)")
    parser.add_argument("--quality", type=Path, default=None, metavar="EXPORT",
                        help="a trained translation model's export, checked by export.parity "
                             "(its parity.json): BLEU of every variant against float32")
    parser.add_argument("--quality-sentences", type=int_in(1), default=1000,
                        help="demo test sentences scored (export.parity's --bleu-sentences)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: demo config, batch 1 greedy, one timed call")
    add_results_option(parser)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, default=None, help=argparse.SUPPRESS)
    add_debug_flag(parser)
    return parser


def parse(argv) -> tuple[argparse.Namespace, dict]:
    """-> (the arguments with --quick's settings filled in, the timing of each cell)."""
    args = build_parser().parse_args(argv)
    args.configs = args.configs or (["demo"] if args.quick else ["small", "base"])
    if args.quick:
        args.batches, args.beams, args.train_configs = [1], [1], ["demo"]
    timing = ({"warmup": 1, "repeats": 1, "min_seconds": 0.0} if args.quick else
              {"warmup": 1, "repeats": args.repeats, "min_seconds": args.min_seconds})
    return args, timing


def prepare(args, ct2_configs: list[str]) -> None:
    """--prepare: the exports with their variants and, with ct2:* variants, CTranslate2's
    models, one line each. A missing CTranslate2 Python is said before any export."""
    want_ct2 = any(v.startswith("ct2:") for v in args.variants) and ct2_configs
    if want_ct2 and not args.ct2_python.exists():
        raise CommandError(f"{args.ct2_python} not found: bash ../shared/peers/setup_venvs.sh, "
                           f"--ct2-python PATH, or --variants without ct2:*")
    for name in args.configs:
        found = is_current(args.cache_dir, name, quantize="all")
        out = ensure_in_child(name, args.cache_dir, quantize="all")
        if found:  # the child that exports says so itself
            print(f"{name}: found the exports in {out}", flush=True)
    if want_ct2:
        models = args.cache_dir / "ct2-models"
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import bench_ct2; "
                "[print(f'{c}: CTranslate2 model in {bench_ct2.ensure_prepared(c)}', flush=True)"
                " for c in sys.argv[2:]]")
        done = subprocess.run([str(args.ct2_python), "-c", code, str(PEERS_DIR), *ct2_configs],
                              cwd=PEERS_DIR, env={**os.environ, "PEER_BENCH_MODELS": str(models)})
        if done.returncode != 0:
            raise CommandError(f"CTranslate2's conversion of {' '.join(ct2_configs)} failed "
                               f"(exit status {done.returncode}; its output is above)",
                               exit_code=1)


@entry_point
def main(argv=None) -> None:
    args, timing = parse(argv)
    if args.quality:
        quality_export(args.quality, args.quality_sentences)
    if args.child == "matmul":
        args.child_out.write_text(json.dumps(matmul_rows(timing), default=str))
        return
    if args.child:
        rows = measure_ours(args.child, args.configs, args.batches, args.beams, timing,
                            args.cache_dir)
        args.child_out.write_text(json.dumps(rows, default=str))
        return
    ct2_configs = [c for c in args.configs if c != "demo"]  # the peers have small and base
    if args.prepare:
        prepare(args, ct2_configs)
        return
    meta = payload("precision", quick=args.quick, cpu={"model": cpu_model(),
                                                        "flags": cpu_flags()},
                   cache_dir=str(args.cache_dir), timing=timing, new_tokens=NEW_TOKENS,
                   variants=args.variants, ct2_python=str(args.ct2_python))
    rows: list[dict] = []
    for variant in args.variants:
        if variant.startswith("ct2:"):
            if not ct2_configs:
                continue
            if not args.ct2_python.exists():
                rows.append({"runtime": "ctranslate2", "precision": variant[4:],
                             "error": f"{args.ct2_python} not found (--ct2-python)"})
                continue
            saved = args.configs
            args.configs = ct2_configs
            rows += run_child(variant, args, timing)
            args.configs = saved
        else:
            rows += run_child(variant, args, timing)
    with tempfile.TemporaryDirectory() as tmp:  # the matmuls in a fresh process too
        out = Path(tmp) / "matmul.json"
        subprocess.run([sys.executable, "-m", "bench.precision", "--child", "matmul",
                        "--child-out", str(out), *(["--quick"] if args.quick else [])])
        if out.exists():
            rows += json.loads(out.read_text())
    if not args.no_train:
        rows += [{**r, "runtime": "keras-train"} for r in train_rows(args)]
    add_speedups(rows)
    quality = []
    if args.quality:
        quality = quality_rows(args.quality, args.quality_sentences)
        meta["quality_export"] = str(args.quality)
    flags = cpu_flags()
    print(f"\nCPU: {cpu_model()}; "
          + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in flags.items()))
    print_table(["runtime", "precision", "config", "batch", "beam", "ms/batch", "tokens/s",
                 "× fp32", "error"], table(rows))
    train = [r for r in rows if "jit_compile" in r and "error" not in r]
    if train:
        print()
        print_table(["config", "XLA", "precision", "ms/step", "target tok/s", "× fp32"],
                    [[r["config"], "on" if r["jit_compile"] else "off", r["precision"],
                      f"{r['median_s'] * 1e3:.0f}", f"{r['target_tokens_per_s']:,.0f}",
                      f"{r.get('speedup_vs_float32', float('nan')):.2f}"] for r in train])
    if quality:
        print(f"\ngreedy BLEU on {args.quality_sentences} demo test sentences, {args.quality}")
        print_table(["runtime", "precision", "BLEU", "Δ vs Keras float32", "within 0.5",
                     "differing sentences", "parity.json BLEU"],
                    [[q["runtime"], q["precision"], f"{q['bleu']:.2f}",
                      f"{q['delta_vs_float32']:+.2f}", "yes" if q["within_0.5"] else "NO",
                      q["sentences_differing_from_float32"],
                      "" if q["parity_json_bleu"] is None else f"{q['parity_json_bleu']:.2f}"]
                     for q in quality])
    matmuls = [r for r in rows if r.get("runtime") == "tf-matmul"]
    if matmuls:
        print()
        print_table(["TF matmul m x k x n", "precision", "GFLOP/s", "× fp32"],
                    [[f"{r['m']}x{r['k']}x{r['n']}", r["precision"], f"{r['gflops']:.0f}",
                      f"{r.get('speedup_vs_float32', float('nan')):.2f}"] for r in matmuls])
    path = write_json(results_dir(args) / "precision.json", {**meta, "results": rows,
                                                             "quality": quality})
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
