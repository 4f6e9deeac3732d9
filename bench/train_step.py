"""Training throughput of one `model.fit` step (forward, backward, Adam, label-smoothed loss).

    python -m bench.train_step [--configs small base] [--jit both|on|off]
                               [--precision float32 mixed_bfloat16] [--token-budget 6144]
                               [--keras-hub]

Batch: 32 sentences x 32 source x 32 target tokens (the peers' workload), random ids. Every
(config, XLA, precision) cell runs in its own process (unless --in-process) so that the peak
RSS reported is that cell's alone. With --token-budget the shapes are the demo's buckets
(batch = budget // length for each of --lengths) and the JSON is train_step_budget.json.
With --keras-hub keras-hub's step runs in the same cells, in the peer environment
(bench/train_step_keras_hub.py), each right after ours (interleaved, so that a load that changes
during the run falls on both sides alike), and the table ends with ours / keras-hub, each side's
best cell against the other's for each config.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.common import (  # noqa: E402
    CONFIGS,
    PEER_TF_PYTHON,
    TRAIN_BATCH,
    TRAIN_LENGTH,
    add_results_option,
    payload,
    peak_rss_mb,
    print_table,
    results_dir,
    roofline_peak,
    time_calls,
    write_json,
)
from bench.flops import train_step_flops  # noqa: E402
from keras_transformer.command_line import add_debug_flag, entry_point, int_in  # noqa: E402

PRECISIONS = ("float32", "mixed_bfloat16")
MERGE_KEYS = ("config", "jit_compile", "precision", "batch", "length")


def measure(name: str, jit: bool, precision: str, batch: int, length: int, timing: dict) -> dict:
    """Median step time after warm-up; the first call (tracing, XLA compile) timed apart."""
    import keras
    import numpy as np

    from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
    from keras_transformer.models.transformer import Transformer

    previous = keras.mixed_precision.global_policy().name
    # The policy must be set before the model is built: layers read it at construction.
    keras.mixed_precision.set_global_policy(precision)
    try:
        keras.utils.set_random_seed(0)
        config = CONFIGS[name]
        model = Transformer(config)
        model.compile(optimizer=keras.optimizers.Adam(1e-4),
                      loss=MaskedLabelSmoothedCrossEntropy(0.1), jit_compile=jit)
        rng = np.random.default_rng(0)
        vocab = config.target_vocab_size
        src, tgt_in, tgt_out = (rng.integers(4, vocab, (batch, length)).astype("int32")
                                for _ in range(3))
        start = time.perf_counter()
        model.train_on_batch((src, tgt_in), tgt_out)
        first_call_s = time.perf_counter() - start
        t = time_calls(lambda: model.train_on_batch((src, tgt_in), tgt_out), **timing)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    flops = train_step_flops(config, batch, length, length)
    return {"config": name, "jit_compile": jit, "precision": precision, "batch": batch,
            "length": length, "first_call_s": first_call_s,
            "target_tokens_per_s": batch * length / t["median_s"],
            "model_flops_per_step": flops, "gflops": flops / t["median_s"] / 1e9, **t}


def run_in_child(args, name: str, jit: bool, precision: str, batch: int, length: int) -> dict:
    """One cell in a fresh Python process; its row (with its own peak RSS) or an error row."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cell.json")
        cmd = [sys.executable, "-m", "bench.train_step", "--in-process", "--out", out,
               "--configs", name, "--jit", "on" if jit else "off", "--precision", precision,
               "--batch", str(batch), "--length", str(length)]
        if args.quick:
            cmd.append("--quick")
        proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
        if proc.returncode == 0 and os.path.exists(out):
            with open(out) as f:
                return json.load(f)["results"][0]
    return {"config": name, "jit_compile": jit, "precision": precision, "batch": batch,
            "length": length, "error": proc.stderr[-3000:]}


def keras_hub_rows(peer_python: Path, configs, jits, precisions) -> list[dict]:
    """keras-hub's step in the same cells, in the peer environment."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "keras_hub.json"
        cmd = [str(peer_python), "-m", "bench.train_step_keras_hub", "--out", str(out),
               "--configs", *configs, "--jit", *("on" if j else "off" for j in jits),
               "--precision", *precisions]
        proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1],
                              stderr=subprocess.PIPE, text=True)
        if proc.returncode or not out.is_file():
            raise SystemExit(f"keras-hub's step failed ({proc.returncode}):\n"
                             f"{proc.stderr[-3000:]}")
        return json.loads(out.read_text())["results"]


def best_ratios(ours: list[dict], theirs: list[dict]) -> dict:
    """Per config: our fastest cell's tokens/s over keras-hub's fastest cell's."""
    out = {}
    for config in dict.fromkeys(r["config"] for r in ours if "error" not in r):
        best = [max((r for r in rows if r["config"] == config and "error" not in r),
                    key=lambda r: r["target_tokens_per_s"], default=None)
                for rows in (ours, theirs)]
        if all(best):
            out[config] = {"ratio": best[0]["target_tokens_per_s"]
                           / best[1]["target_tokens_per_s"],
                           "ours": _setting(best[0]), "keras_hub": _setting(best[1])}
    return out


def _setting(row: dict) -> str:
    return f"XLA {'on' if row['jit_compile'] else 'off'}, {row['precision']}"


def fmt_row(r: dict) -> list:
    head = [r["config"], f"{r['batch']}x{r['length']}", "on" if r["jit_compile"] else "off",
            r["precision"]]
    if "error" in r:
        return head + ["FAILED"] + [""] * 7
    pct = f"{r['pct_roofline']:.0f}%" if r.get("pct_roofline") is not None else "n/a"
    return head + [f"{r['first_call_s']:.1f}", f"{r['median_s'] * 1000:.0f}",
                   f"{r['p25_s'] * 1000:.0f}-{r['p75_s'] * 1000:.0f}", r["runs"],
                   f"{r['target_tokens_per_s']:,.0f}", f"{r['gflops']:.1f}", pct,
                   f"{r['peak_rss_mb']:,.0f}"]


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=None, choices=CONFIGS,
                        help="default small base (demo with --quick)")
    parser.add_argument("--jit", choices=["both", "on", "off"], default=None,
                        help="XLA: default both (off with --quick)")
    parser.add_argument("--precision", nargs="+", choices=PRECISIONS, default=None,
                        help="default both (float32 with --quick)")
    parser.add_argument("--batch", type=int_in(1), default=None, help="32 (8 with --quick)")
    parser.add_argument("--length", type=int_in(1), default=None, help="32 (8 with --quick)")
    parser.add_argument("--token-budget", type=int_in(0), default=0,
                        help="instead of --batch/--length: the demo's bucket shapes, "
                             "batch = budget // length for each of --lengths")
    parser.add_argument("--lengths", type=int_in(1), nargs="+", default=[12, 24, 36, 48])
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: demo config, small batch, one timed step")
    parser.add_argument("--in-process", action="store_true",
                        help="measure every cell in this process (peak RSS is then shared)")
    parser.add_argument("--keras-hub", action="store_true",
                        help="also keras-hub's step in the same cells (peer environment)")
    parser.add_argument("--peer-python", type=Path, default=PEER_TF_PYTHON)
    add_results_option(parser)
    parser.add_argument("--out", default=None, help="JSON path (default in the results dir)")
    parser.add_argument("--merge", action="store_true",
                        help="keep rows of the existing JSON that this run does not measure")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    quick = args.quick
    if args.keras_hub and (args.token_budget or quick):
        parser.error("--keras-hub times the peers' 32 x 32 x 32 step of small/base only")
    if args.keras_hub and not args.peer_python.is_file():
        parser.error(f"{args.peer_python} is missing (bash ../shared/peers/setup_venvs.sh "
                     f"makes it)")
    configs = args.configs or (["demo"] if quick else ["small", "base"])
    jits = {"both": [False, True], "on": [True], "off": [False]}[
        args.jit or ("off" if quick else "both")]
    precisions = args.precision or (["float32"] if quick else list(PRECISIONS))
    batch = args.batch or (8 if quick else TRAIN_BATCH)
    length = args.length or (8 if quick else TRAIN_LENGTH)
    shapes = ([(args.token_budget // n, n) for n in args.lengths] if args.token_budget
              else [(batch, length)])
    timing = (dict(warmup=0, repeats=1, min_seconds=0.0) if quick
              else dict(warmup=2, repeats=7, min_seconds=3.0))
    results_root = results_dir(args)
    peak = roofline_peak(results_root)
    meta = payload("train_step", quick=quick, in_process=args.in_process, roofline_gflops=peak)
    cells = [(c, j, p, b, n) for c in configs for (b, n) in shapes for p in precisions
             for j in jits]
    results, theirs = [], []
    for cell in cells:
        if args.in_process:
            row = measure(*cell, timing)
            row["peak_rss_mb"] = peak_rss_mb()
        else:
            row = run_in_child(args, *cell)
        if "error" not in row:
            row["roofline_gflops"] = peak
            row["pct_roofline"] = 100 * row["gflops"] / peak if peak else None
        results.append(row)
        if args.keras_hub:
            theirs.extend(keras_hub_rows(args.peer_python, [cell[0]], [cell[1]], [cell[2]]))
    print_table(["config", "batch", "XLA", "precision", "first call s", "ms/step", "p25-p75",
                 "runs", "target tok/s", "GFLOP/s", "% roofline", "peak RSS MiB"],
                [fmt_row(r) for r in results])
    extra = {}
    if args.keras_hub:
        extra["keras_hub"] = theirs
        extra["ratios"] = best_ratios(results, extra["keras_hub"])
        print("keras-hub:")
        print_table(["config", "XLA", "precision", "ms/step", "target tok/s"],
                    [[r["config"], "on" if r["jit_compile"] else "off", r["precision"],
                      f"{r['median_s'] * 1000:.0f}", f"{r['target_tokens_per_s']:,.0f}"]
                     for r in extra["keras_hub"]])
        for name, r in extra["ratios"].items():
            print(f"{name}: ours / keras-hub, best against best: {r['ratio']:.2f}x "
                  f"(ours {r['ours']}, keras-hub {r['keras_hub']})")
    name = "train_step_budget.json" if args.token_budget else "train_step.json"
    path = write_json(args.out or results_root / name, {
        **meta, "results": results, **extra},
        merge_keys=MERGE_KEYS if args.merge else None)
    print(f"wrote {path}")
    if any("error" in r for r in results):
        for r in results:
            if "error" in r:
                print(f"FAILED {r['config']} jit={r['jit_compile']} {r['precision']}:\n"
                      f"{r['error'][-1500:]}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    sys.exit(main())
