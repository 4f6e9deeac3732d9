"""Callbacks of a run: resumable backups, per-epoch checkpoints and their mean, the task's dev
score with early stopping."""

from __future__ import annotations

import json
import logging
import math
import re
import time
import zipfile
from pathlib import Path

import keras
import numpy as np

from keras_transformer.file_safety import (
    UnsafePath,
    atomic_write_text,
    resolve_inside,
    written_in_place_of,
)

from .accumulation import batches_done, updates_done

log = logging.getLogger("train")


class CheckpointError(RuntimeError):
    """A backup that cannot be restored; the message names the file and the fix."""


# The weights files a backup writes; only a file of this name inside the backup directory is
# ever deleted as "the previous backup".
BACKUP_WEIGHTS = re.compile(r"step_[0-9]+\.weights\.h5")


def _finite(logs) -> bool:
    loss = (logs or {}).get("loss")
    return loss is None or bool(np.isfinite(loss))


class ResumableBackup(keras.callbacks.Callback):
    """Weights and optimizer state every `save_every` steps and at each epoch end.

    Keras' BackupAndRestore restarts an interrupted epoch from its first batch, so a resumed
    run takes more optimizer steps than an uninterrupted one. This one records the global
    step and the position in the epoch, and the run skips the batches already trained on.
    Each backup is a weights file written under a temporary name and renamed into place, made
    current by an atomic rename of `state.json` only once written, so a kill during a save
    leaves the previous backup usable. The last
    one is marked finished and lasts until the run's files are written (`train.engine.finish`).
    """

    def __init__(self, directory: Path, save_every: int, fingerprint: str,
                 extra_state=None, batches_per_step: int = 1):
        super().__init__()
        self.directory = Path(directory)
        self.save_every = save_every
        self.fingerprint = fingerprint
        self.extra_state = extra_state or (lambda: {})
        self.epoch = 0
        self.batch_offset = 0  # batches of the current epoch trained before a resume
        self.batches_in_epoch = 0
        # Steps are optimizer updates, each `batches_per_step` batches (gradient
        # accumulation): a save comes at the end of an update, never inside its window.
        self.batches_per_step = batches_per_step
        self.batches = 0  # the optimizer's, counted from its value at the start of training

    @property
    def state_path(self) -> Path:
        return self.directory / "state.json"

    def restore(self, model) -> dict | None:
        """Load the latest backup into `model` (inside the strategy scope); None if there is none."""
        if not self.state_path.is_file():
            return None
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
            for key in ("step", "epoch", "batch"):
                if isinstance(state[key], bool) or not isinstance(state[key], int) or (
                        state[key] < 0):
                    raise ValueError(f"{key} must be a whole number, got {state[key]!r}")
            # The file names its weights: they must be a file inside the backup directory.
            weights = resolve_inside(self.directory, state["weights"],
                                     source=str(self.state_path))
        except (OSError, ValueError, KeyError, TypeError) as err:
            kind = "unsafe" if isinstance(err, UnsafePath) else "unreadable"
            raise CheckpointError(
                f"backup {self.state_path} is {kind} ({err}); delete {self.directory} to "
                f"train from scratch") from err
        if state.get("fingerprint") != self.fingerprint:
            raise CheckpointError(
                f"backup in {self.directory} was written by a run with a different data, "
                f"tokenizer or model config; rerun with the original config, or delete "
                f"{self.directory} to train from scratch")
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        try:
            model.load_weights(weights)
        except Exception as err:  # h5py and Keras raise many types for a bad file
            raise CheckpointError(
                f"backup checkpoint {weights} is corrupt or does not fit this model "
                f"({type(err).__name__}: {err}); delete {self.directory} to train from "
                f"scratch") from err
        return state

    def on_train_begin(self, logs=None):
        self.batches = batches_done(self.model.optimizer)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.batches_in_epoch = self.batch_offset

    def on_train_batch_end(self, batch, logs=None):
        # The step is counted here, not read from the model: under JAX every read of
        # `self.model` copies the whole training state back into the variables, and reading
        # the step waits for the device, which would stall a GPU once a step.
        self.batches_in_epoch += 1
        self.batches += 1
        every = self.save_every * self.batches_per_step
        if every and self.batches % every == 0 and _finite(logs):
            self.save(self.epoch, self.batches_in_epoch)

    def on_epoch_end(self, epoch, logs=None):
        self.batch_offset = 0
        if _finite(logs):  # a diverged run keeps its last good backup
            self.save(epoch + 1, 0)

    def save_finished(self, epoch: int, result: dict) -> None:
        """A backup of the trained model marked finished, with what fit returned: a resumed
        run then skips training and redoes only what follows it."""
        self.save(epoch, 0, finished=result)

    def save(self, epoch: int, batch: int, **extra) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        step = updates_done(self.model.optimizer)
        name = f"step_{step}.weights.h5"
        previous = self._previous_weights()
        # Under a temporary name, then renamed: the epoch-end save of a step already saved
        # mid-epoch rewrites the file state.json names, and a kill must not leave it half written.
        with written_in_place_of(self.directory / name, ".weights.h5") as tmp:
            self.model.save_weights(tmp, overwrite=True)
        atomic_write_text(self.state_path, json.dumps({
            "step": step, "epoch": epoch, "batch": batch, "weights": name,
            "fingerprint": self.fingerprint, **self.extra_state(), **extra}, indent=2))
        if previous is not None and previous.name != name:
            previous.unlink(missing_ok=True)

    def _previous_weights(self) -> Path | None:
        """The weights file the current state.json names, if it is one a backup writes: a
        plain file named step_<N>.weights.h5 directly in the backup directory."""
        try:
            name = json.loads(self.state_path.read_text(encoding="utf-8")).get("weights")
        except (OSError, ValueError, AttributeError):
            return None
        if not isinstance(name, str) or not BACKUP_WEIGHTS.fullmatch(name):
            return None
        path = self.directory / name
        return path if path.is_file() and not path.is_symlink() else None


class EpochCheckpoints(keras.callbacks.Callback):
    """Model weights (no optimizer state) after each epoch, the last `keep` kept, for averaging."""

    def __init__(self, directory: Path, keep: int):
        super().__init__()
        self.directory = Path(directory)
        self.keep = keep

    def on_epoch_end(self, epoch, logs=None):
        if self.keep <= 0:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        save_weights_npz(self.model, self.directory / f"epoch_{epoch + 1:04d}.npz")
        for old in sorted(self.directory.glob("epoch_*.npz"))[: -self.keep]:
            old.unlink()


def save_weights_npz(model, path: Path) -> None:
    with written_in_place_of(path, ".npz") as tmp:
        np.savez(tmp, *[np.asarray(w) for w in model.get_weights()])


def load_weights_npz(path: Path) -> list[np.ndarray]:
    try:
        with np.load(path) as data:
            return [data[f"arr_{i}"] for i in range(len(data.files))]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"checkpoint {path} is unreadable or corrupt "
                              f"({type(err).__name__}: {err}); delete it") from err


def average_weights(paths: list[Path]) -> list:
    """The element-wise mean, in float64, of the epoch checkpoints in `paths`."""
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


def set_average(model, paths: list[Path]) -> None:
    """Give `model` the mean of the weights in `paths`, in the model's own dtypes."""
    averaged = average_weights(paths)
    current = model.get_weights()
    if [a.shape for a in averaged] != [w.shape for w in current]:
        raise ValueError(f"{paths[0]} holds weights of another model than this run's")
    model.set_weights([np.asarray(a, w.dtype) for a, w in zip(averaged, current, strict=True)])


class DevScoring(keras.callbacks.Callback):
    """After each epoch: the task's dev score (train.tasks.base.DevScore: BLEU, ROUGE, ...) as
    `val_<name>` in the logs (so TensorBoard and the history get it, with its parts), the best
    weights to `best.npz`, and early stopping on no gain."""

    def __init__(self, dev_score, best_path: Path | None, patience: int = 0,
                 scored=None):
        super().__init__()
        self.dev_score = dev_score
        # The model that decodes, from the trained one (distribute.LocalCopy over processes).
        self.scored = scored or (lambda model: model)
        self.best_path = best_path
        self.patience = patience
        self.best = -math.inf  # scores may be negative (minus a perplexity)
        self.best_epoch = 0
        # The optimizer's step and the training minutes (TimeBudget's, in the logs) when the
        # best weights were saved: how far a time-budgeted run had to train for them.
        self.best_step = 0
        self.best_minutes = None
        self.bad_epochs = 0

    def state(self) -> dict:
        return {"best_score": self.best, "best_epoch": self.best_epoch,
                "best_step": self.best_step, "best_minutes": self.best_minutes,
                "bad_epochs": self.bad_epochs}

    def load_state(self, state: dict) -> None:
        # "best_bleu": backups written before the score was named by its task.
        self.best = state.get("best_score", state.get("best_bleu", -math.inf))
        self.best_epoch = state.get("best_epoch", 0)
        self.best_step = state.get("best_step", 0)
        self.best_minutes = state.get("best_minutes")
        self.bad_epochs = state.get("bad_epochs", 0)

    def on_epoch_end(self, epoch, logs=None):
        name, label = self.dev_score.name, f"dev {self.dev_score.label}"
        result = self.dev_score.score(self.scored(self.model))
        values = ({k: float(v) for k, v in result.items()} if isinstance(result, dict)
                  else {name: float(result)})
        score = values[name]
        if logs is not None:
            logs.update({f"val_{k}": v for k, v in values.items()})
        parts = "".join(f", {k} {v:.2f}" for k, v in values.items() if k != name)
        if score > self.best:
            self.best, self.best_epoch, self.bad_epochs = score, epoch + 1, 0
            self.best_step = updates_done(self.model.optimizer)
            self.best_minutes = (logs or {}).get("minutes")
            if self.best_path is not None:
                save_weights_npz(self.model, self.best_path)
            log.info("epoch %d: %s %.2f%s (best so far)", epoch + 1, label, score, parts)
        else:
            self.bad_epochs += 1
            log.info("epoch %d: %s %.2f%s (best %.2f at epoch %d)", epoch + 1, label, score,
                     parts, self.best, self.best_epoch)
            if self.patience and self.bad_epochs >= self.patience:
                log.info("early stopping: no better %s for %d epochs", label, self.bad_epochs)
                self.model.stop_training = True


class EpochHistory(keras.callbacks.Callback):
    """Every epoch's logs (loss, val_*, minutes), kept in the backup's state: a resumed run's
    metrics.json then holds the epochs of every process, not only its own.

    Placed after the callbacks that add to the logs (TimeBudget, DevScoring) and before the
    backup that saves the state."""

    def __init__(self):
        super().__init__()
        self.history: dict[str, list[float]] = {}

    def state(self) -> dict:
        return {"history": self.history}

    def load_state(self, state: dict) -> None:
        self.history = {k: list(v) for k, v in state.get("history", {}).items()}

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(float(value))
        # The step count beside the minutes: the x axis of a score-vs-steps curve. Kept here,
        # not in the logs, so that TensorBoard does not plot it as a metric.
        self.history.setdefault("steps", []).append(
            float(updates_done(self.model.optimizer)))


class TimeBudget(keras.callbacks.Callback):
    """Stops training once `minutes` of wall clock are spent, counting time before a resume.

    The stop comes after the current batch; the epoch then ends as usual (validation, dev score,
    epoch checkpoint), so the budget is a floor plus at most one evaluation.
    """

    def __init__(self, minutes: float, agree=None):
        super().__init__()
        self.budget = minutes * 60.0
        # Several processes: each asks whether process 0's clock says stop (StopTogether).
        self.agree = agree
        self.spent_before = 0.0
        self.start = time.perf_counter()
        self.fired = False

    def elapsed(self) -> float:
        return self.spent_before + time.perf_counter() - self.start

    def state(self) -> dict:
        return {"elapsed_seconds": round(self.elapsed(), 1)}

    def load_state(self, state: dict) -> None:
        self.spent_before = float(state.get("elapsed_seconds", 0.0))

    def on_train_batch_end(self, batch, logs=None):
        if not self.budget or self.fired:
            return
        spent = self.elapsed() >= self.budget
        if self.agree is not None:
            spent = self.agree(spent)
        if spent:
            self.fired = True
            self.model.stop_training = True
            log.info("time budget of %.1f minutes spent: stopping after step %d",
                     self.budget / 60, updates_done(self.model.optimizer))

    def on_epoch_end(self, epoch, logs=None):
        # Wall clock of training at each epoch's end (including earlier epochs' validation,
        # excluding this one's dev score, which runs after): the x axis of score-vs-minutes.
        if logs is not None:
            logs["minutes"] = round(self.elapsed() / 60.0, 2)


class StopTogether(keras.callbacks.Callback):
    """Every process of a multi-process run ends training at the epoch where process 0 does
    (an early stop on the dev score), since a process that went on alone would wait for the
    others' collectives forever. Listed after the callbacks that may stop training."""

    def __init__(self, agree):
        super().__init__()
        self.agree = agree

    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = self.agree(bool(self.model.stop_training))


class NaNGuard(keras.callbacks.TerminateOnNaN):
    """TerminateOnNaN that remembers that it fired, so the run can fail with a message."""

    fired = False

    def on_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(loss):
            self.fired = True
        super().on_batch_end(batch, logs)
