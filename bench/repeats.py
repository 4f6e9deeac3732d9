"""Decoding ratios over repeated runs: ours / each peer within every run, then their median
and range across runs.

    python -m bench.repeats RUN_DIR [RUN_DIR ...] [--runtime onnx|tflite|...|best] [--out FILE.md]

A RUN_DIR holds our decode_<runtime>.json and, in RUN_DIR/peers, the peers' JSONs: what
`python -m bench.decode --results RUN_DIR` and `PEER_BENCH_RESULTS=RUN_DIR/peers bash
../shared/peers/run_all.sh ct2` write (bench/results itself is such a directory). The ratio is
taken inside each run, where ours and the peer ran minutes apart; the host's speed drifts more
between runs than within one, so the spread of the ratio is the figure that says how far a
single run can be trusted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench.common import CONFIGS
from bench.report import NEW_TOKENS, load, ours_decode, peer_decode, table
from keras_transformer.command_line import add_debug_flag, entry_point


def run_ratios(run_dir: Path, runtime: str) -> dict:
    """(config, batch, beam) -> {"ours": tok/s, peer name: ours/peer} for one run; runtime
    "best" takes, per cell, the fastest of our runtimes in that run."""
    data = load(run_dir, run_dir / "peers")
    best: dict = {}
    for (rt, config, batch, beam, n, cache), row in ours_decode(data).items():
        if (runtime not in ("best", rt)) or n != NEW_TOKENS or not cache:
            continue
        key = (config, batch, beam)
        best[key] = max(best.get(key, 0.0), row["tokens_per_s"])
    out: dict = {}
    for key, rate in best.items():
        cell = out[key] = {"ours": rate}
        for name, peer_rate, _ in peer_decode(data).get(key, []):
            cell[name] = rate / peer_rate
    return out


def spread(values: list[float], fmt: str) -> str:
    """'median [min-max]' over runs (just the value for one run)."""
    if len(values) == 1:
        return fmt.format(values[0])
    low, high = min(values), max(values)
    return f"{fmt.format(statistics.median(values))} [{fmt.format(low)}-{fmt.format(high)}]"


def build(run_dirs: list[Path], runtime: str = "onnx") -> str:
    runs = [run_ratios(Path(d), runtime) for d in run_dirs]
    cells = sorted({k for r in runs for k in r},
                   key=lambda k: (list(CONFIGS).index(k[0]) if k[0] in CONFIGS else 99, *k[1:]))
    peers = sorted({name for r in runs for cell in r.values() for name in cell} - {"ours"})
    rows = []
    for cell in cells:
        got = [r[cell] for r in runs if cell in r]
        row = [*cell, len(got), spread([g["ours"] for g in got], "{:,.0f}")]
        for name in peers:
            ratios = [g[name] for g in got if name in g]
            row.append(spread(ratios, "{:.2f}x") if ratios else "n/a")
        rows.append(row)
    return "\n".join([
        f"# Decoding over {len(runs)} runs: {runtime} against the peers", "",
        f"tokens/s at {NEW_TOKENS} new tokens, and ours/peer computed within each run; "
        "median [min-max] over the runs that have the cell.", "",
        *table(["config", "batch", "beam", "runs", f"{runtime} tok/s",
                *(f"{runtime}/{name}" for name in peers)], rows), ""])


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="result directories, one per run")
    parser.add_argument("--runtime", default="onnx",
                        help="one of our runtimes, or best: the fastest per cell in each run")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    missing = [str(d) for d in args.runs if not d.is_dir()]
    if missing:
        parser.error(f"no such results directory: {', '.join(missing)} (each run is a "
                     f"directory that a bench script wrote with --results)")
    text = build(args.runs, args.runtime)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
