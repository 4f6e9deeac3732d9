"""The pass before streamed training: train.shards.scan_shards (shards checked in blocks side by
side, the tokenizer's sample read back by position) against the pass line by line in Python
that it replaced (shard_pairs and sample_sentences), on one generated corpus.

    python -m bench.stream_scan [--pairs 2000000] [--shards 8] [--sample 100000]
        [--rounds 3] [--data runs/stream_scan] [--quick]

The corpus: bench.stream_scale's (demo pairs drawn with repeats, gzip shards), under --data
(default runs/stream_scan/, reused by later runs). Both passes run in the same process, one
after the other in each of --rounds rounds, so that a host's drift falls on both; each must
give the other's counts and sample. Writes bench/results/stream_scan.json (--quick:
bench/results/quick/) and prints the seconds, the CPU seconds per second of each, the ratio
(Python / blocks) and the CPU model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.common import (
    ROOT,
    add_results_option,
    cpu_model,
    payload,
    print_table,
    results_dir,
    time_interleaved,
    write_json,
)
from keras_transformer.command_line import CommandError, add_debug_flag, entry_point, int_in
from keras_transformer.text.shards import shard_pairs


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.stream_scan",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int_in(1000), default=2_000_000)
    parser.add_argument("--shards", type=int_in(1, 10_000), default=8)
    parser.add_argument("--sample", type=int_in(0), default=100_000,
                        help="pairs drawn for the tokenizer (default 100,000)")
    parser.add_argument("--rounds", type=int_in(1), default=3)
    parser.add_argument("--data", default=str(ROOT / "runs" / "stream_scan"),
                        help="folder of the generated corpus (default runs/stream_scan)")
    parser.add_argument("--quick", action="store_true",
                        help="200,000 pairs, 20,000 drawn, one round: a smoke test")
    add_results_option(parser)
    add_debug_flag(parser)
    return parser.parse_args(argv)


def python_pass(files: list[Path], sample: int, seed: int) -> tuple[int, int, list]:
    """(pairs, dropped lines, sample) of the pass line by line in Python."""
    from train.tokenizer_sources import sample_sentences

    counts = {"pairs": 0, "dropped": 0}

    def kept():
        for path in files:
            for pair in shard_pairs(path):
                counts["pairs" if pair else "dropped"] += 1
                if pair:
                    yield pair

    drawn = sample_sentences(kept(), sample, seed)
    return counts["pairs"], counts["dropped"], drawn


def block_pass(files: list[Path], sample: int, seed: int) -> tuple[int, int, list]:
    """python_pass's answer from train.shards.scan_shards."""
    from train.shards import scan_shards

    scan = scan_shards(files, sample, seed)
    return scan.pairs, scan.dropped_empty, list(zip(scan.sample_sources, scan.sample_targets,
                                                    strict=True))


@entry_point
def main(argv) -> int:
    from bench.stream_scale import held_pairs, write_corpus

    args = parse_args(argv)
    if args.quick:
        args.pairs, args.sample, args.rounds = 200_000, 20_000, 1
    folder = Path(args.data) / f"pairs_{args.pairs}_shards_{args.shards}"
    write_corpus(folder, args.pairs, args.shards, *held_pairs(), whole=False)
    files = sorted(folder.glob("train-*.tsv.gz"))
    meta = payload("stream_scan", pairs=args.pairs, shards=args.shards, sample=args.sample,
                   rounds=args.rounds)
    answers = {}

    def timed(name, fn):
        def call():
            answers[name] = fn(files, args.sample, 1234)
        return call

    python, blocks = time_interleaved([timed("python", python_pass), timed("blocks", block_pass)],
                                      warmup=0, repeats=args.rounds, min_seconds=0.0)
    if answers["python"] != answers["blocks"]:
        raise CommandError("the two passes disagree: counts or sample differ")
    ratio = round(python["median_s"] / blocks["median_s"], 2)
    rounds = [round(p / b, 2) for p, b in zip(python["samples_s"], blocks["samples_s"],
                                              strict=True)]
    rows = [["python (line by line)", round(python["median_s"], 2), python["cpu_ratio"]],
            ["blocks (scan_shards)", round(blocks["median_s"], 2), blocks["cpu_ratio"]]]
    print_table(["pass", "median s", "CPU s per s"], rows)
    print(f"CPU: {cpu_model()}; {args.pairs:,} pairs in {args.shards} gzip shards, "
          f"{args.sample:,} drawn; python / blocks = {ratio} (rounds: {rounds})")
    path = write_json(results_dir(args) / "stream_scan.json",
                      {**meta, "python": python, "blocks": blocks, "ratio": ratio,
                       "round_ratios": rounds, "pairs_counted": answers["blocks"][0]})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
