"""Streamed training at scale: peak memory, seconds to the first step and target tokens per
second of `python -m train` on a generated corpus of 10 million pairs against one of 100,000,
and the stream against the in-memory path on the smaller one.

    python -m bench.stream_scale [--pairs 10000000] [--baseline-pairs 100000] [--shards 40]
        [--steps 100] [--repeats 1] [--data runs/stream_scale] [--quick]

The corpora: the demo corpus's distinct training pairs (keras_transformer.text.demo_corpus)
as a pool, drawn with repeats by a seeded NumPy generator, written as gzip TSV shards (pair
i to shard i mod N) with the pool's dev and test pairs beside them, under --data (default
runs/stream_scale/, kept for later runs: a corpus already there with the same size is
reused, one being written is never read). The smaller corpus is also written whole as one
TSV for the in-memory path.

Runs of train/configs/spa_eng_stream.yaml (the `small` model, XLA), each its own process, one
after another: the smaller corpus in memory (data.stream false) and streamed, alternated
--repeats times (a machine whose load drifts then moves both alike), and the larger streamed; --steps steps, a tokenizer sample of 100,000 pairs, one dev sentence
decoded. Measured: the process's peak resident memory (its rusage), the seconds from its
start until Keras reports its first step, and its target tokens per second (metrics.json).
Writes bench/results/stream_scale.json (--quick: bench/results/quick/) and prints the table
with the CPU model and the ratios of the issue's goals: peak memory of the large stream at
most 1.3x the small one's, the first step within 60 s, tokens per second of the stream
within 5% of the in-memory path's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, add_results_option, payload, print_table, results_dir, write_json
from keras_transformer.command_line import CommandError, add_debug_flag, entry_point, int_in
from keras_transformer.file_safety import atomic_write_bytes, atomic_write_text

CONFIG = ROOT / "train" / "configs" / "spa_eng_stream.yaml"
POOL = 200_000  # distinct training pairs drawn from
HELD = 300  # dev and test pairs each
SEED = 1234
CORPUS_FILE = "corpus.json"  # what a corpus folder holds, written last
FIRST_STEP = re.compile(r"\b1/\d+\b")  # Keras' progress line after the first step


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.stream_scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int_in(1000), default=10_000_000,
                        help="training pairs of the large corpus (default 10,000,000)")
    parser.add_argument("--baseline-pairs", type=int_in(1000), default=100_000,
                        help="training pairs of the small corpus (default 100,000)")
    parser.add_argument("--shards", type=int_in(1, 10_000), default=40)
    parser.add_argument("--steps", type=int_in(2), default=100, help="training steps a run")
    parser.add_argument("--data", default=str(ROOT / "runs" / "stream_scale"),
                        help="folder of the generated corpora (default runs/stream_scale)")
    parser.add_argument("--repeats", type=int_in(1, 50), default=1,
                        help="runs of the smaller corpus in memory and streamed, alternated; "
                             "the tokens/s ratio is their medians' (default 1)")
    parser.add_argument("--quick", action="store_true",
                        help="200,000 and 20,000 pairs in 8 shards, 10 steps: a smoke test")
    add_results_option(parser)
    add_debug_flag(parser)
    return parser.parse_args(argv)


def held_pairs():
    """(pool of distinct training pairs, dev pairs, test pairs)."""
    from keras_transformer.text.demo_corpus import demo_splits

    splits = demo_splits(POOL, HELD, HELD, SEED)
    return splits["train"], splits["dev"], splits["test"]


def tsv(pairs) -> bytes:
    return "".join(f"{s}\t{t}\n" for s, t in pairs).encode()


def write_corpus(folder: Path, pairs: int, shards: int, pool, dev, test, whole: bool) -> None:
    """`pairs` drawn from `pool` into `shards` gzip shards (and all.tsv, every pair with dev
    and test, with `whole`) under `folder`; reused when corpus.json says it holds them."""
    import numpy as np

    facts = {"pairs": pairs, "shards": shards, "pool": len(pool), "seed": SEED, "whole": whole}
    marker = folder / CORPUS_FILE
    if marker.is_file() and json.loads(marker.read_text()) == facts:
        print(f"corpus: {folder} (reused)", flush=True)
        return
    if folder.exists() and any(p.name != CORPUS_FILE for p in folder.iterdir()) and \
            not marker.is_file():
        raise CommandError(f"{folder} holds files this benchmark did not write; give another "
                           f"--data")
    folder.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)  # a corpus half rewritten is never taken for whole
    started = time.monotonic()
    lines = [f"{s}\t{t}\n" for s, t in pool]
    draws = np.random.default_rng(SEED).integers(0, len(pool), pairs)
    for shard in range(shards):
        text = "".join(lines[i] for i in draws[shard::shards])
        atomic_write_bytes(folder / f"train-{shard:05d}.tsv.gz",
                           gzip.compress(text.encode(), compresslevel=1))
    atomic_write_bytes(folder / "dev.tsv", tsv(dev))
    atomic_write_bytes(folder / "test.tsv", tsv(test))
    if whole:  # the in-memory path's one file: training pairs, then dev and test
        atomic_write_bytes(folder / "all.tsv", b"".join(
            [("".join(lines[i] for i in draws)).encode(), tsv(dev), tsv(test)]))
    atomic_write_text(marker, json.dumps(facts) + "\n")
    print(f"corpus: {folder}: {pairs:,} pairs in {shards} shards written in "
          f"{time.monotonic() - started:.0f} s", flush=True)


def overrides(folder: Path, steps: int, stream: bool) -> list[str]:
    common = [f"data.data_dir={folder}", "training.epochs=1", f"training.steps_per_epoch={steps}",
              f"training.save_every_steps={steps}", "training.average_last=0",
              "training.early_stopping_patience=0", "training.max_minutes=0",
              "training.tensorboard=false", "training.verbose=1", "eval.dev_score_sentences=0",
              "eval.max_sentences=1", "eval.samples=0", "eval.beam_size=1"]
    if stream:
        return common + ["data.train_source=train-*.tsv.gz"]
    return common + ["data.stream=false", "data.tsv=all.tsv", f"data.dev_size={HELD}",
                     f"data.test_size={HELD}"]


def run(name: str, folder: Path, steps: int, stream: bool, out: Path) -> dict:
    """One `python -m train` process: its peak RSS, seconds to the first step, tokens/s."""
    command = [sys.executable, "-m", "train", "--config", str(CONFIG), "--out", str(out)]
    for item in overrides(folder, steps, stream):
        command += ["--set", item]
    log = out.parent / f"{out.name}.log"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    first_step = None
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink,
                                   stderr=subprocess.STDOUT)
        while True:  # reaped here, not by Popen, to keep the process's resource usage
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if first_step is None and FIRST_STEP.search(log.read_text(errors="replace")):
                first_step = time.monotonic() - started
            time.sleep(0.2)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        tail = log.read_text(errors="replace")[-1500:]
        raise CommandError(f"{name}: python -m train exited {process.returncode}: {tail}")
    metrics = json.loads((out / "metrics.json").read_text())
    return {"run": name, "stream": stream, "first_step_s": round(first_step or 0.0, 1),
            "seconds": round(time.monotonic() - started, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "target_tokens_per_s": metrics.get("target_tokens_per_second"),
            "train_pairs": metrics.get("streamed_train_pairs"), "steps": metrics["steps"]}


def goals_of(results: list[dict], repeats: int) -> dict:
    """The issue's ratios from the runs in their order: `repeats` pairs of (in memory,
    streamed) on the smaller corpus, then the larger streamed. Ratios of medians."""
    memory, streamed, large_row = results[0:-1:2], results[1:-1:2], results[-1]

    def median(rows, key):
        return float(statistics.median(r[key] for r in rows))

    goals = {
        "peak_rss_large_over_small": round(
            large_row["peak_rss_mb"] / median(streamed, "peak_rss_mb"), 3),
        "first_step_s_large": large_row["first_step_s"],
        "tokens_per_s_stream_over_memory": round(
            median(streamed, "target_tokens_per_s") / median(memory, "target_tokens_per_s"), 3),
        "repeats": repeats,
    }
    if repeats > 1:
        # How far one run of each moves: the resolution of the ratio above.
        goals["tokens_per_s_spread"] = {
            label: round(max(r["target_tokens_per_s"] for r in rows)
                         / min(r["target_tokens_per_s"] for r in rows), 3)
            for label, rows in (("in_memory", memory), ("streamed", streamed))}
    return goals


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    if args.quick:
        args.pairs, args.baseline_pairs, args.shards, args.steps = 200_000, 20_000, 8, 10
    data = Path(args.data)
    meta = payload("stream_scale", pairs=args.pairs, baseline_pairs=args.baseline_pairs,
                   shards=args.shards, steps=args.steps, config=str(CONFIG.relative_to(ROOT)))
    pool, dev, test = held_pairs()
    small, large = data / f"pairs_{args.baseline_pairs}", data / f"pairs_{args.pairs}"
    write_corpus(small, args.baseline_pairs, args.shards, pool, dev, test, whole=True)
    write_corpus(large, args.pairs, args.shards, pool, dev, test, whole=False)
    runs_dir = data / "runs"
    runs_dir.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = []
    plan = [(f"{args.baseline_pairs:,} in memory", small, False),
            (f"{args.baseline_pairs:,} streamed", small, True)] * args.repeats
    for name, folder, stream in [*plan, (f"{args.pairs:,} streamed", large, True)]:
        out = runs_dir / f"{stamp}-{len(results)}"
        results.append(run(name, folder, args.steps, stream, out))
        row = results[-1]
        print(f"{name}: first step {row['first_step_s']} s, peak {row['peak_rss_mb']} MiB, "
              f"{row['target_tokens_per_s']} target tokens/s", flush=True)
    goals = goals_of(results, args.repeats)
    print_table(["run", "first step s", "peak MiB", "target tokens/s", "whole run s"],
                [[r["run"], r["first_step_s"], r["peak_rss_mb"], r["target_tokens_per_s"],
                  r["seconds"]] for r in results])
    print(f"CPU: {meta['machine']['cpu_model']}; goals: peak memory {args.pairs:,} / "
          f"{args.baseline_pairs:,} = {goals['peak_rss_large_over_small']} (at most 1.3), first "
          f"step {goals['first_step_s_large']} s (at most 60), tokens/s stream / in memory = "
          f"{goals['tokens_per_s_stream_over_memory']} (at least 0.95)")
    if args.repeats > 1:
        spread = goals["tokens_per_s_spread"]
        print(f"tokens/s: medians of {args.repeats} runs each; one run's max / min: in memory "
              f"{spread['in_memory']}, streamed {spread['streamed']}")
    path = write_json(results_dir(args) / "stream_scale.json",
                      {**meta, "results": results, "goals": goals})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
