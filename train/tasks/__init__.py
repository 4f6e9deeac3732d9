"""The tasks a run can name (`config.task`): each one's module and class, imported when a run
asks for it (the tf.data tasks import TensorFlow); the one check of a task's name and Keras
backend; and a run's config loaded with its task's own rules (`Task.check_config`)."""

from __future__ import annotations

import importlib
from pathlib import Path

from ..config import ConfigError, RunConfig, load_config

TASKS = {"translation": ("translation", "TranslationTask"),
         "classification": ("classification", "ClassificationTask"),
         "summarization": ("summarization", "SummarizationTask"),
         "language_model": ("language_model", "LanguageModelTask"),
         "extractive_summarization": ("extractive", "ExtractiveSummarizationTask"),
         "content_selection": ("content_selection", "ContentSelectionTask"),
         "masked_lm": ("masked_lm", "MaskedLMTask"),
         "denoising": ("denoising", "DenoisingTask")}
# The tasks with a NumPy input path, which train under every Keras backend.
ANY_BACKEND_TASKS = ("translation", "summarization")
# The tasks that read VNDS's `_` word joints as data.word_joints says (the others read their
# text as written): a fine-tune from one of them into another must read the joints alike.
WORD_JOINT_TASKS = ("summarization", "language_model", "extractive_summarization",
                    "content_selection", "masked_lm", "denoising")


def check_task(task: str) -> None:
    """Refuse a task name that is not in TASKS, and a task that needs TensorFlow under another
    Keras backend (before its module, which would import TensorFlow, is imported)."""
    if task not in TASKS:
        raise ConfigError(f"task {task!r} is not supported (use {' or '.join(TASKS)})")
    import keras

    backend = keras.backend.backend()
    if backend != "tensorflow" and task not in ANY_BACKEND_TASKS:
        raise ValueError(f"task {task} reads its data with tf.data, which needs "
                         f"KERAS_BACKEND=tensorflow; under KERAS_BACKEND={backend} the tasks "
                         f"{' and '.join(ANY_BACKEND_TASKS)} train")


def task_class(task: str):
    """The Task subclass of `task`, checked by check_task first."""
    check_task(task)
    module, name = TASKS[task]
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


def load_run_config(path: str | Path | None, overrides: list[str] = ()) -> RunConfig:
    """train.config.load_config (the schema and the rules of every run), then the rules of
    the task the config names: a bad value fails in one line before any data is read."""
    config = load_config(path, overrides)
    task_class(config.task).check_config(config)
    return config


def load_run(run: str | Path, task: str | None = None, model: str = "model.keras"):
    """(the task of a finished run with the run's tokenizers and settings (Task.use_run), its
    `model`: model.keras, or another of its files such as best.keras); a ValueError naming
    the run when it is not a finished run of `task`."""
    from ..run_model import load_run_model

    run = Path(run)
    for name in ("config.yaml", model):
        if not (run / name).is_file():
            raise ValueError(f"{run} is not a finished training run (no {name})")
    config = load_run_config(run / "config.yaml")
    if task is not None and config.task != task:
        raise ValueError(f"{run} is a {config.task} run; give a run of task {task}")
    loaded = load_run_model(run / model)
    instance = task_class(config.task)(config)
    instance.use_run(run, loaded)
    return instance, loaded
