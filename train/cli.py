"""Command line of `python -m train`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m train",
        description="Train a Transformer from a YAML config, then decode and score it.")
    parser.add_argument("--config", required=True, help="YAML file, e.g. train/configs/demo.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set training.epochs=2")
    parser.add_argument("--out", required=True, help="run directory, e.g. runs/demo")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    from train.config import ConfigError, load_config

    try:
        config = load_config(args.config, args.set)
    except (ConfigError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from train.callbacks import CheckpointError
    from train.engine import TrainingDiverged
    from train.run import TASKS, run

    if config.task not in TASKS:
        print(f"error: task {config.task!r} is not supported (use {' or '.join(TASKS)})",
              file=sys.stderr)
        return 2
    try:
        run(config, Path(args.out))
    except (FileNotFoundError, ValueError, CheckpointError, TrainingDiverged) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0
