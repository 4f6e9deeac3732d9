"""One training run: the task the config names, driven by the training engine."""

from __future__ import annotations

from pathlib import Path

from .config import RunConfig
from .engine import train
from .tasks.classification import ClassificationTask
from .tasks.extractive import ExtractiveSummarizationTask
from .tasks.language_model import LanguageModelTask
from .tasks.summarization import SummarizationTask
from .tasks.translation import TranslationTask

TASKS = {"translation": TranslationTask, "classification": ClassificationTask,
         "summarization": SummarizationTask, "language_model": LanguageModelTask,
         "extractive_summarization": ExtractiveSummarizationTask}


def run(config: RunConfig, out: Path, overwrite: bool = False) -> dict:
    """Train config.task into the run directory `out` (train.run_directory says when it may,
    and what `overwrite` replaces); its metrics (also in metrics.json)."""
    if config.task not in TASKS:
        raise ValueError(f"task {config.task!r} is not supported (use "
                         f"{' or '.join(TASKS)})")
    return train(TASKS[config.task](config), config, out, overwrite)
