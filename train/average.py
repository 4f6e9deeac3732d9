"""python -m train.average --run runs/<name> --last N: average the last N epoch checkpoints.

The paper's base models average the last 5 checkpoints (section 6.1): the mean of weights a
few updates apart lands nearer the middle of the basin than any one of them. Writes
<run>/average.keras (atomically; an existing file is replaced only with --overwrite, and never
the run's own model.keras or best.keras); score it with
`python -m train.evaluate --model average.keras`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from keras_transformer.command_line import (
    CommandError,
    add_debug_flag,
    command,
    entry_point,
    int_in,
)

MAX_LAST = 1000
RUN_MODELS = ("model.keras", "best.keras")  # written by the run itself


@entry_point
def main(argv) -> int:
    parser = argparse.ArgumentParser(
        prog=command("train.average"),
        description=f"{__doc__.splitlines()[0]} Exit codes: 0 done, 2 bad usage or input, "
                    f"1 a failure while working, 130 interrupted.")
    parser.add_argument("--run", required=True, help="run directory, e.g. runs/demo")
    parser.add_argument("--last", type=int_in(1, MAX_LAST), default=5,
                        help=f"how many checkpoints, 1 to {MAX_LAST} (default 5)")
    parser.add_argument("--out", default="average.keras",
                        help="file name (ending .keras) in the run directory")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --out file")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    run = Path(args.run)
    if not run.is_dir():
        raise FileNotFoundError(f"run directory not found: {run}")
    if Path(args.out).name != args.out or not args.out.endswith(".keras") or (
            args.out.startswith(".")):
        raise CommandError(f"--out {args.out!r} must be a file name ending in .keras (it is "
                           f"written in {run})")
    out = run / args.out
    if args.out in RUN_MODELS:
        raise CommandError(f"--out {args.out} is the run's own model; choose another name")
    if out.is_dir():
        raise CommandError(f"--out {out} is a directory")
    checkpoints = sorted((run / "checkpoints").glob("epoch_*.npz"))
    if len(checkpoints) < args.last:
        raise CommandError(
            f"{run / 'checkpoints'} holds {len(checkpoints)} epoch checkpoints, fewer than "
            f"--last {args.last} (training.keep_checkpoints sets how many are kept)", 1)
    from .callbacks import set_average
    from .engine import save_model
    from .run_model import load_run_model

    chosen = checkpoints[-args.last:]
    model = load_run_model(run / "model.keras")
    set_average(model, chosen)
    if out.exists() and not args.overwrite:  # checked after the inputs, so both are named
        raise CommandError(f"{out} already exists; pass --overwrite to replace it")
    save_model(model, out)
    print(f"averaged {', '.join(p.name for p in chosen)} -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
