"""Training speed of one model.fit step on each Keras backend, same model and batches, in one
run: each backend in its own process (its own Python: TensorFlow's environment and the
TensorFlow-free one), the backends taking turns for --rounds rounds so that the host's drift
falls on all of them; the ratios are of the medians.

    python -m bench.backends [--config demo] [--steps 30] [--rounds 2] [--quick] \
        [--results DIR] [--python tensorflow=.venv/bin/python \
         --python jax=.venv-jax/bin/python --python torch=.venv-jax/bin/python]

Each backend trains as python -m train would on a CPU: TensorFlow and PyTorch without XLA or
torch.compile (training.jit_compile auto), JAX jit-compiled. The batches are the demo's length
buckets under its token budget (6144 tokens: 128 x 48, 192 x 32, 384 x 16 ...), random ids;
the first pass over the shapes (compiles) is left out. Writes bench/results/backends.json;
--quick is a smoke test (1 round of 4 steps, one per shape, written to
bench/results/quick/backends.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from bench.common import add_results_option, results_dir
from keras_transformer.command_line import CommandError, add_debug_flag, entry_point, int_in

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PYTHONS = {"tensorflow": ".venv/bin/python", "jax": ".venv-jax/bin/python",
                   "torch": ".venv-jax/bin/python"}
LENGTHS = (12, 24, 36, 48)  # the demo's four buckets (max length 48)
TOKENS_PER_BATCH = 6144
QUICK_STEPS = len(LENGTHS)  # --quick: each bucket shape timed once


def measure(config_name: str, steps: int) -> dict:
    """In the child: median seconds of a step over `steps` steps cycling the bucket shapes."""
    import keras
    import numpy as np

    from bench.common import CONFIGS, build_model
    from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
    from train.distribute import resolve_jit

    config = CONFIGS[config_name]
    model = build_model(config)
    jit = resolve_jit("auto")
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=MaskedLabelSmoothedCrossEntropy(0.1), jit_compile=jit)
    rng = np.random.default_rng(0)
    batches = []
    for length in LENGTHS:
        batch = TOKENS_PER_BATCH // length
        ids = rng.integers(4, config.source_vocab_size, (3, batch, length)).astype("int32")
        batches.append(((ids[0], ids[1]), ids[2]))
    for inputs, labels in batches:  # compiles
        model.train_on_batch(inputs, labels)
    times, tokens = [], 0
    for step in range(steps):
        inputs, labels = batches[step % len(batches)]
        start = time.perf_counter()
        float(model.train_on_batch(inputs, labels))
        times.append(time.perf_counter() - start)
        tokens += labels.size
    return {"backend": keras.backend.backend(), "jit_compile": jit,
            "median_step_ms": 1000 * statistics.median(times),
            "target_tokens_per_second": tokens / sum(times)}


def run_child(python: str, backend: str, config: str, steps: int) -> dict:
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([python, "-m", "bench.backends", "--child", "--config", config,
                           "--steps", str(steps)], env=env, cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise CommandError(f"the {backend} run failed: {done.stderr.strip().splitlines()[-1]}",
                           exit_code=1)
    return json.loads(done.stdout.strip().splitlines()[-1])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.backends", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="demo", choices=("demo", "small", "base"))
    parser.add_argument("--steps", type=int_in(1), default=None,
                        help=f"timed steps a round (default 30; {QUICK_STEPS} with --quick)")
    parser.add_argument("--rounds", type=int_in(1), default=None,
                        help="rounds of every backend (default 2; 1 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: 1 round of {QUICK_STEPS} steps (one per shape), "
                             f"written under bench/results/quick")
    parser.add_argument("--python", action="append", default=[], metavar="BACKEND=PYTHON",
                        help="the Python of a backend (default: .venv for tensorflow, "
                             ".venv-jax for jax and torch)")
    add_results_option(parser, help="where backends.json (the rounds and medians) is written "
                                    "(default: bench/results, bench/results/quick with --quick)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = QUICK_STEPS if args.quick else 30
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    return args


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.config, args.steps)))
        return 0
    from bench.common import cpu_model, loadavg, write_json

    pythons = dict(DEFAULT_PYTHONS)
    for item in args.python:
        backend, sep, python = item.partition("=")
        if not sep or backend not in DEFAULT_PYTHONS:
            raise CommandError(f"--python {item}: expected BACKEND=PYTHON with BACKEND one of "
                               f"{', '.join(DEFAULT_PYTHONS)}")
        pythons[backend] = python
    missing = [f"{b} ({p})" for b, p in pythons.items() if not (ROOT / p).exists()
               and not Path(p).exists()]
    if missing:
        raise CommandError(f"no Python for {', '.join(missing)}: make setup setup-jax, or "
                           f"name one with --python BACKEND=PYTHON")
    cpu, load = cpu_model(), loadavg()
    print(f"cpu: {cpu}; load average {load}; config {args.config}, "
          f"{args.steps} steps a round")
    rows: dict[str, list[dict]] = {b: [] for b in pythons}
    order = list(pythons)
    for r in range(args.rounds):
        for backend in (order if r % 2 == 0 else order[::-1]):
            row = run_child(pythons[backend], backend, args.config, args.steps)
            rows[backend].append(row)
            print(f"round {r + 1} {backend}: {row['median_step_ms']:.1f} ms a step, "
                  f"{row['target_tokens_per_second']:.0f} target tokens/s "
                  f"(jit_compile {row['jit_compile']})")
    medians = {b: statistics.median(r["median_step_ms"] for r in rs) for b, rs in rows.items()}
    base = medians.get("tensorflow")
    for backend, ms in medians.items():
        ratio = f"; TensorFlow / {backend} step time {base / ms:.2f}x" if base else ""
        print(f"{backend}: median step {ms:.1f} ms{ratio}")
    path = write_json(results_dir(args) / "backends.json", {
        "bench": "backends", "cpu": cpu, "loadavg_start": load, "config": args.config,
        "quick": args.quick, "steps": args.steps, "rounds": rows, "median_step_ms": medians,
        "tensorflow_over": {b: base / ms for b, ms in medians.items()} if base else None})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
