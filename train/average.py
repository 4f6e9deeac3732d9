"""python -m train.average --run runs/<name> --last N: average the last N epoch checkpoints.

The paper's base models average the last 5 checkpoints (section 6.1): the mean of weights a
few updates apart lands nearer the middle of the basin than any one of them. Writes
<run>/average.keras; score it with `python -m train.evaluate --model average.keras`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def average_weights(paths: list[Path]) -> list:
    import numpy as np

    from train.callbacks import load_weights_npz

    total = None
    for path in paths:
        weights = load_weights_npz(path)
        if total is None:
            total = [w.astype(np.float64) for w in weights]
            continue
        if [w.shape for w in weights] != [t.shape for t in total]:
            raise ValueError(f"{path} holds weights of another model than {paths[0]}")
        total = [t + w for t, w in zip(total, weights, strict=True)]
    return [t / len(paths) for t in total]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.average",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="run directory, e.g. runs/demo")
    parser.add_argument("--last", type=int, default=5, help="how many checkpoints (default 5)")
    parser.add_argument("--out", default="average.keras", help="file name in the run directory")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    run = Path(args.run)
    checkpoints = sorted((run / "checkpoints").glob("epoch_*.npz"))
    if args.last < 1:
        print("error: --last must be at least 1", file=sys.stderr)
        return 2
    if len(checkpoints) < args.last:
        print(f"error: {run / 'checkpoints'} holds {len(checkpoints)} epoch checkpoints, "
              f"fewer than --last {args.last} (training.keep_checkpoints sets how many are "
              f"kept)", file=sys.stderr)
        return 1
    model_path = run / "model.keras"
    if not model_path.is_file():
        print(f"error: model not found: {model_path}", file=sys.stderr)
        return 1
    import keras
    import numpy as np

    import train.run  # noqa: F401  (registers the model classes for load_model)
    from train.callbacks import CheckpointError

    chosen = checkpoints[-args.last:]
    try:
        averaged = average_weights(chosen)
        model = keras.models.load_model(model_path, compile=False)
        if [a.shape for a in averaged] != [w.shape for w in model.get_weights()]:
            raise ValueError(f"{chosen[0]} holds weights of another model than {model_path}")
    except (ValueError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    model.set_weights([np.asarray(a, w.dtype) for a, w in
                       zip(averaged, model.get_weights(), strict=True)])
    model.save(run / args.out)
    print(f"averaged {', '.join(p.name for p in chosen)} -> {run / args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
