"""Every benchmark in order, each in its own process, then the report.

    python -m bench [--configs small base] [--only STEP ...] [--quick] [--no-peers]
        [--cache-dir DIR]

Steps: roofline, train_step, train_real (the spa_eng_small recipe on real data against
keras-hub's example: throughput and dev BLEU against training minutes; its keras-hub side
follows --no-peers), export_models, decode-<runtime> for each runtime (keras, keras-xla,
savedmodel, onnx, onnx-search, tflite; `decode` selects all six), peers (bash
../shared/peers/run_all.sh, results in bench/results/peers), duel (search.onnx against
CTranslate2 call by call, float32 and int8; skipped with the peers), report. A failed step is reported
and the others still run. --quick is a smoke test (demo config, 4 new tokens, one timed call,
results in bench/results/quick, no peers). --cache-dir (default $KT_BENCH_CACHE, else
/tmp/kt-bench) is where the exported models are kept: every step that keeps models gets it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.common import (
    CONFIGS,
    PEER_RESULTS,
    PEERS_DIR,
    ROOT,
    add_results_option,
    cache_directory,
    results_dir,
)
from bench.decode import DECODE_VARIANTS
from bench.export_models import CACHE_DIR, CACHE_ENV, CACHE_HELP
from keras_transformer.command_line import add_debug_flag, entry_point

DECODE_STEPS = tuple(f"decode-{r}" for r in DECODE_VARIANTS)
STEPS = ("roofline", "train_step", "train_real", "export_models", *DECODE_STEPS, "peers", "duel",
         "report")
PEER_CONFIGS = ("small", "base")


def commands(step: str, args) -> list[list[str]]:
    """The command lines of one step (decode: one process per config, merged into one JSON)."""
    py = [sys.executable, "-m"]
    common = ["--quick"] if args.quick else []
    results = ["--results", args.results] if args.results else []
    configs = ["--configs", *args.configs] if args.configs else []
    # The steps that keep models: export_models, decode-*, duel (they run in ROOT: absolute).
    cache = (["--cache-dir", str(Path(args.cache_dir).resolve())]
             if getattr(args, "cache_dir", None) else [])
    if step == "roofline":
        return [py + ["bench.roofline", *common, *results]]
    if step == "train_step":
        return [py + ["bench.train_step", *common, *results, *configs]]
    if step == "train_real":
        no_peer = ["--no-peer"] if args.quick or getattr(args, "no_peers", False) else []
        return [py + ["bench.train_real", *common, *results, *no_peer]]
    if step == "export_models":
        return [py + ["bench.export_models", *common, *configs, *cache]]
    if step.startswith("decode-"):
        runtime = step.removeprefix("decode-")
        # Not with XLA: there every prefix length of the no-cache path is a compile; and
        # search.onnx has no no-cache path.
        extra = [] if runtime in ("keras-xla", "onnx-search") else ["--no-cache"]
        names = args.configs or (["demo"] if args.quick else ["small", "base"])
        # One process per config so each row's peak RSS is that config's; the first
        # overwrites the JSON, the others merge into it.
        return [py + ["bench.decode", "--runtime", runtime, "--configs", name, *common,
                      *results, *cache, *extra, *(["--merge"] if i else [])]
                for i, name in enumerate(names)]
    if step == "peers":
        return [["bash", str(PEERS_DIR / "run_all.sh")]]
    if step == "duel":
        names = [c for c in (args.configs or PEER_CONFIGS) if c in PEER_CONFIGS]
        return [py + ["bench.duel", "--configs", *names, *results, *cache]]
    if step == "report":
        return [py + ["bench.report", *common, *results]]
    raise ValueError(step)


def step_env(args) -> dict:
    """Every step's environment: the cache named for anything that reads its default."""
    return {**os.environ, CACHE_ENV: str(Path(args.cache_dir).resolve())}


def peer_env(args) -> dict:
    env = {**step_env(args), "PEER_BENCH_RESULTS": str(ROOT / PEER_RESULTS)}
    wanted = [c for c in (args.configs or PEER_CONFIGS) if c in PEER_CONFIGS]
    if args.configs:
        env["PEER_ARGS"] = f"--configs {','.join(wanted)}"  # the peers take comma lists
    return env


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=None, choices=CONFIGS,
                        help="default small base (demo with --quick)")
    parser.add_argument("--only", nargs="+", default=None, metavar="STEP",
                        choices=[*STEPS, "decode"], help=f"a subset of {', '.join(STEPS)}")
    parser.add_argument("--quick", action="store_true", help="smoke test of every step")
    parser.add_argument("--no-peers", action="store_true", help="skip the peer harness")
    parser.add_argument("--cache-dir", type=cache_directory, default=CACHE_DIR,
                        help=CACHE_HELP)
    add_results_option(parser)
    add_debug_flag(parser)
    return parser


@entry_point
def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    only = set(args.only or STEPS)
    if "decode" in only:
        only |= set(DECODE_STEPS)
    # The peers have no quick mode and know only small and base.
    skip_peers = args.no_peers or args.quick or bool(
        args.configs and not set(args.configs) & set(PEER_CONFIGS))
    failed = []
    for step in STEPS:
        if step not in only or (step in ("peers", "duel") and skip_peers):
            continue
        env = peer_env(args) if step == "peers" else step_env(args)
        for cmd in commands(step, args):
            print(f"=== {time.strftime('%H:%M:%S')} {step}: {' '.join(cmd)}", flush=True)
            code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
            if code != 0:
                failed.append(step)
                # A child killed by a signal (the kernel's OOM killer sends SIGKILL) prints
                # nothing itself: say how it ended.
                how = (f"killed by {signal.Signals(-code).name}" if code < 0
                       else f"exit status {code}")
                print(f"!!! {step} failed ({how})", flush=True)
    print(f"results in {results_dir(args)}")
    if failed:
        print(f"FAILED steps: {' '.join(dict.fromkeys(failed))}")
        sys.exit(1)


if __name__ == "__main__":
    sys.exit(main())
