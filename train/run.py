"""One training run: the task the config names, driven by the training engine."""

from __future__ import annotations

from pathlib import Path

from .config import RunConfig
from .engine import train
from .tasks import task_class


def run(config: RunConfig, out: Path, overwrite: bool = False) -> dict:
    """Train config.task into the run directory `out` (train.run_directory says when it may,
    and what `overwrite` replaces); its metrics (also in metrics.json). The task's rules are
    checked here too, for a config loaded without them (train.config.load_config)."""
    task = task_class(config.task)
    task.check_config(config)
    return train(task(config), config, out, overwrite)
