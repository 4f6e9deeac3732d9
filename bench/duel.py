"""Our search graph against CTranslate2, call by call, so that the host's drift cancels.

    python -m bench.duel [--configs small base] [--pairs float32:float32 int8:int8]
        [--rounds 8] [--rest 0.3]

bench.precision times each variant in a process of its own, one after another, a few
minutes each; on a shared host whose speed drifts by a fifth within minutes, a ratio of two
such runs says as much about when each ran as about the runtimes. Here both run side by
side: ours (`onnx-search:<precision>`, the export's search.onnx through bench.decode's Cell,
in this process) and CTranslate2 (bench/precision_ct2.py --serve in the peers' torch venv,
a worker that times the calls it is asked for). Each round times a few calls of every cell
on one side, then on the other, the order swapped every round, with a rest before each
(both runtimes keep their threads spinning for a while after a call). The workload is
bench.decode's and the peers': random-weight `small` and `base`, 32 source ids, exactly 32
new tokens per row (min = max length), batch 1 and 16, greedy and beam 4.

A pair ours:ct2 names our precision and CTranslate2's compute type. CTranslate2 runs with
CT2_USE_MKL=0 and 1 (its default on this CPU may be the slower): a calibration round times
both, and each cell's duel uses the faster (both times are recorded). Per cell: both
medians over every timed call, `ratio` = CTranslate2's median / ours (> 1: ours is
faster), and the median of the per-round ratios, with the rounds ours won. Writes
bench/results/duel.json (rows merged by config, cell and pair).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.common import (  # noqa: E402
    NEW_TOKENS,
    PEER_TORCH_PYTHON,
    add_results_option,
    cache_directory,
    median,
    payload,
    print_table,
    quartiles,
    results_dir,
    write_json,
)
from bench.export_models import CACHE_DIR, CACHE_HELP  # noqa: E402
from bench.precision import CT2_MKL_SETTINGS, ct2_command, stepper_factory  # noqa: E402
from keras_transformer.command_line import (  # noqa: E402
    add_debug_flag,
    entry_point,
    float_in,
    int_in,
)

MERGE_KEYS = ("config", "batch", "beam", "ours", "ct2")


class Worker:
    """A process that answers "batch beam calls" lines with a JSON list of the calls'
    seconds (bench/precision_ct2.py --serve); callable as (batch, beam, calls)."""

    def __init__(self, command: list[str], env: dict | None = None, cwd=None):
        self.command = command
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)

    def __call__(self, batch: int, beam: int, calls: int) -> list[float]:
        self.proc.stdin.write(f"{batch} {beam} {calls}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.command[1]} stopped: {self.proc.stderr.read()[-1500:]}")
        answer = json.loads(line)
        if isinstance(answer, dict):
            raise RuntimeError(answer["error"])
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def duel(ours, theirs, cells, rounds: int, calls, rest: float) -> dict:
    """Alternate ours(cell, n) and theirs(cell, n) (each -> n calls' seconds) over `rounds`
    rounds of every cell, ours first in even rounds; `calls(cell)` -> n. -> {cell: {"ours":
    [round's seconds, ...], "theirs": [...]}}, one list per round."""
    samples = {cell: {"ours": [], "theirs": []} for cell in cells}
    for r in range(rounds):
        for cell in cells:
            sides = [("ours", ours), ("theirs", theirs)]
            for side, fn in (sides if r % 2 == 0 else sides[::-1]):
                time.sleep(rest)
                samples[cell][side].append(list(fn(cell, calls(cell))))
    return samples


def summary(ours_rounds: list[list[float]], theirs_rounds: list[list[float]]) -> dict:
    """Medians over every call, `ratio` = theirs / ours, and the per-round view: each
    round's ratio of medians, their median, and the rounds ours was faster."""
    def ms(rounds):
        flat = [s for r in rounds for s in r]
        p25, p75 = quartiles(flat)
        return {"median": median(flat) * 1e3, "p25": p25 * 1e3, "p75": p75 * 1e3,
                "calls": len(flat)}

    per_round = [median(t) / median(o) for o, t in zip(ours_rounds, theirs_rounds, strict=True)]
    ours, theirs = ms(ours_rounds), ms(theirs_rounds)
    return {"ours_ms": ours, "ct2_ms": theirs, "ratio": theirs["median"] / ours["median"],
            "round_ratios": per_round, "ratio_round_median": median(per_round),
            "rounds_won": sum(r > 1 for r in per_round), "rounds": len(per_round)}


def table_of(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the duel's table, for the terminal and for bench.report."""
    return (["config", "batch", "beam", "ours", "ct2", "ours ms", "ct2 ms (MKL)", "ct2/ours",
             "round median", "rounds won"],
            [[r["config"], r["batch"], r["beam"], r["ours"], r["ct2"],
              f"{r['ours_ms']['median']:.1f}", f"{r['ct2_ms']['median']:.1f} ({r['ct2_use_mkl']})",
              f"{r['ratio']:.2f}", f"{r['ratio_round_median']:.2f}",
              f"{r['rounds_won']}/{r['rounds']}"] for r in rows])


def ct2_worker(args, compute_type: str, config: str, mkl: str) -> Worker:
    cmd, env = ct2_command(args, compute_type, mkl, "--configs", config,
                           "--batches", *map(str, args.batches), "--serve")
    return Worker(cmd, env=env, cwd=args.cache_dir)


def one_pair(args, config: str, ours_precision: str, compute_type: str) -> list[dict]:
    """Every cell of one config for one pair: calibrate CTranslate2's two backends, then
    the duel against the faster."""
    from bench.decode import Cell

    factory = stepper_factory(f"onnx-search:{ours_precision}", config, args.cache_dir)
    cells = [(b, k) for b in args.batches for k in args.beams]
    ours_cells = {c: Cell(factory, config, "onnx-search", *c, NEW_TOKENS, True) for c in cells}

    def ours(cell, n):
        seconds = []
        for _ in range(n):
            start = time.perf_counter()
            ours_cells[cell]()
            seconds.append(time.perf_counter() - start)
        if ours_cells[cell].error:
            raise RuntimeError(ours_cells[cell].error)
        return seconds

    workers = {mkl: ct2_worker(args, compute_type, config, mkl) for mkl in CT2_MKL_SETTINGS}
    try:
        calibration = {}
        for cell in cells:  # one warm-up call each, then two timed
            ours(cell, 1)
            for mkl, worker in workers.items():
                worker(*cell, 1)
                calibration[cell, mkl] = median(worker(*cell, 2))
        chosen = {c: min(CT2_MKL_SETTINGS, key=lambda m, c=c: calibration[c, m]) for c in cells}
        for mkl in CT2_MKL_SETTINGS:
            if mkl not in chosen.values():
                workers.pop(mkl).close()
        samples = duel(ours, lambda cell, n: workers[chosen[cell]](*cell, n), cells,
                       args.rounds, lambda cell: args.calls if cell[0] == 1 else
                       max(1, args.calls // 3), args.rest)
    finally:
        for worker in workers.values():
            worker.close()
    rows = []
    for cell in cells:
        row = {"config": config, "batch": cell[0], "beam": cell[1],
               "ours": f"onnx-search:{ours_precision}", "ct2": compute_type,
               "new_tokens": NEW_TOKENS, "ct2_use_mkl": chosen[cell],
               "ct2_calibration_ms": {m: calibration[cell, m] * 1e3 for m in CT2_MKL_SETTINGS},
               **summary(samples[cell]["ours"], samples[cell]["theirs"])}
        rows.append(row)
        print(f"{config} b={cell[0]} beam={cell[1]} {row['ours']} vs ct2 {compute_type}: "
              f"{row['ours_ms']['median']:.1f} against {row['ct2_ms']['median']:.1f} ms, "
              f"{row['ratio']:.2f}x, won {row['rounds_won']}/{row['rounds']}", flush=True)
    return rows


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["small", "base"],
                        choices=["small", "base"])
    parser.add_argument("--pairs", nargs="+", default=["float32:float32", "int8:int8"],
                        help="ours:ct2 precisions (ours: float32 or int8; ct2: a compute type)")
    parser.add_argument("--batches", type=int_in(1), nargs="+", default=[1, 16])
    parser.add_argument("--beams", type=int_in(1), nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int_in(1), default=8)
    parser.add_argument("--calls", type=int_in(1), default=6,
                        help="timed calls per side, round and batch-1 cell (a third at batch 16)")
    parser.add_argument("--rest", type=float_in(0, 60), default=0.3,
                        help="seconds of rest before each side's calls")
    parser.add_argument("--ct2-python", type=Path, default=PEER_TORCH_PYTHON)
    parser.add_argument("--cache-dir", type=cache_directory, default=CACHE_DIR,
                        help=CACHE_HELP)
    add_results_option(parser)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    pairs = []
    for pair in args.pairs:
        ours, sep, theirs = pair.partition(":")
        if not sep or ours not in ("float32", "int8") or not theirs:
            parser.error(f"--pairs {pair!r}: write ours:ct2, e.g. float32:float32 or int8:int8")
        pairs.append((ours, theirs))
    if not args.ct2_python.exists():
        parser.error(f"{args.ct2_python} not found: bash ../shared/peers/setup_venvs.sh, "
                     f"or --ct2-python")
    meta = payload("duel", rounds=args.rounds, calls=args.calls, rest_s=args.rest,
                   cache_dir=str(args.cache_dir))
    rows = []
    for config in args.configs:
        for ours, theirs in pairs:
            try:
                rows += one_pair(args, config, ours, theirs)
            except Exception as err:  # a failed pair is a row, and the others still run
                print(f"{config} {ours}:{theirs}: {err}", file=sys.stderr)
                rows.append({"config": config, "ours": f"onnx-search:{ours}", "ct2": theirs,
                             "error": str(err)[:2000]})
    print(f"\nCPU: {meta['machine'].get('cpu_model')}")
    print_table(*table_of([r for r in rows if "error" not in r]))
    path = write_json(results_dir(args) / "duel.json", {**meta, "results": rows}, MERGE_KEYS)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
