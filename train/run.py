"""One training run: the task the config names, driven by the training engine."""

from __future__ import annotations

import importlib
from pathlib import Path

import keras

from .config import RunConfig
from .engine import train

# Each task's module and class, imported when a run asks for it: the tasks whose input
# pipeline is tf.data import TensorFlow.
TASKS = {"translation": ("translation", "TranslationTask"),
         "classification": ("classification", "ClassificationTask"),
         "summarization": ("summarization", "SummarizationTask"),
         "language_model": ("language_model", "LanguageModelTask"),
         "extractive_summarization": ("extractive", "ExtractiveSummarizationTask"),
         "masked_lm": ("masked_lm", "MaskedLMTask")}
# The tasks with a NumPy input path, which train under every Keras backend.
ANY_BACKEND_TASKS = ("translation", "summarization")


def check_task_backend(task: str) -> None:
    """Refuse a task that needs TensorFlow under another Keras backend."""
    backend = keras.backend.backend()
    if backend != "tensorflow" and task not in ANY_BACKEND_TASKS:
        raise ValueError(f"task {task} reads its data with tf.data, which needs "
                         f"KERAS_BACKEND=tensorflow; under KERAS_BACKEND={backend} the tasks "
                         f"{' and '.join(ANY_BACKEND_TASKS)} train")


def task_class(task: str):
    module, name = TASKS[task]
    return getattr(importlib.import_module(f"{__package__}.tasks.{module}"), name)


def run(config: RunConfig, out: Path, overwrite: bool = False) -> dict:
    """Train config.task into the run directory `out` (train.run_directory says when it may,
    and what `overwrite` replaces); its metrics (also in metrics.json)."""
    if config.task not in TASKS:
        raise ValueError(f"task {config.task!r} is not supported (use "
                         f"{' or '.join(TASKS)})")
    check_task_backend(config.task)
    return train(task_class(config.task)(config), config, out, overwrite)
