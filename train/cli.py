"""Command line of `python -m train`."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from keras_transformer.command_line import CommandError, add_debug_flag, command, entry_point


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=command("train"),
        description="Train a Transformer from a YAML config, then decode and score it. "
                    "Exit codes: 0 done, 2 bad usage or input, 1 a failure while training, "
                    "130 interrupted.")
    parser.add_argument("--config", required=True, help="YAML file, e.g. train/configs/demo.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set training.epochs=2")
    parser.add_argument("--out", required=True,
                        help="run directory, e.g. runs/demo; an interrupted run of the same "
                             "config there resumes, anything else there is refused")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a finished run or a run of another config in --out "
                             "(deletes what a run wrote there; other files stay)")
    add_debug_flag(parser)
    return parser.parse_args(argv)


def check_inputs_outside(out: Path, inputs: list[Path]) -> None:
    """Refuse an --out that holds one of the run's inputs (its config, a data file): a run
    resumes over, and --overwrite deletes, the files a run writes there (config.yaml among
    them), and neither may touch what the run reads."""
    target = out.resolve()
    for path in inputs:
        if path.resolve().is_relative_to(target):
            raise CommandError(f"--out {out} holds {path}, an input of this run; keep the "
                               f"config and data outside the run directory, or choose another "
                               f"--out")


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from keras_transformer.command_line import check_keras_backend

    check_keras_backend()  # before Keras is imported: it would fail with a traceback
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    from .data import data_files
    from .tasks import load_run_config

    # The task's name, backend and own rules are checked here, before any file is touched.
    config = load_run_config(args.config, args.set)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CommandError(f"--out {out} is a file, not a run directory")
    inputs = data_files(config.data)  # every input before the run directory is touched
    if config.tokenizer.model:
        inputs.append(Path(config.tokenizer.model))
    check_inputs_outside(out, [Path(args.config), *inputs])
    from .run import run

    run(config, out, overwrite=args.overwrite)
    from .distribute import leave_after_cluster_run

    leave_after_cluster_run(0)  # a multi-worker run: before TensorFlow's slow teardown
    return 0
