"""The wall-clock budget of a run: stops after the budget, counting the time before a resume;
the batch tap: the shapes the train step gets and the target tokens it trains on; when the
backup reads the model."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from train import callbacks
from train.callbacks import TimeBudget


def _model():
    return SimpleNamespace(stop_training=False,
                           optimizer=SimpleNamespace(iterations=np.int64(7)))


def test_time_budget_counts_time_spent_before_a_resume(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: clock[0])
    budget = TimeBudget(minutes=1.0)
    budget.load_state({"elapsed_seconds": 45.0})  # as a backup written before a kill holds it
    budget.set_model(_model())
    clock[0] += 14.0
    budget.on_train_batch_end(0)
    assert not budget.model.stop_training and budget.state() == {"elapsed_seconds": 59.0}
    clock[0] += 1.0
    budget.on_train_batch_end(1)
    assert budget.model.stop_training and budget.fired


def test_zero_minutes_means_no_budget(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: clock[0])
    budget = TimeBudget(minutes=0.0)
    budget.set_model(_model())
    clock[0] += 1e6
    budget.on_train_batch_end(0)
    assert not budget.model.stop_training and not budget.fired


@pytest.mark.tf_only
def test_batch_tap_records_every_tensors_shape_and_counts_only_token_labels():
    import tensorflow as tf

    from train.batches import BatchTap

    source = np.array([[5, 6, 0], [7, 0, 0]], np.int32)
    target_in, target_out = np.array([[1, 4], [1, 0]], np.int32), np.array([[4, 2], [2, 0]],
                                                                         np.int32)
    translator = BatchTap()
    list(tf.data.Dataset.from_tensors(((source, target_in), target_out)).map(translator))
    assert translator.shapes == {((2, 3), (2, 2), (2, 2))}
    assert translator.target_tokens == 3  # the non-padding next tokens
    numpy_batches = BatchTap()
    numpy_batches((source, target_in), target_out)
    assert (numpy_batches.shapes, numpy_batches.target_tokens) == (translator.shapes, 3)
    # The py_function's arguments as plain Python or NumPy values count the same.
    plain = BatchTap()
    plain._add((2, 3, 2, 2, 2, 2), (3,), [2, 2, 2])
    assert (plain.shapes, plain.target_tokens) == (translator.shapes, 3)
    # A classifier's labels are classes, not tokens: its ids' length is in the shape.
    classifier = BatchTap()
    list(tf.data.Dataset.from_tensors((source, np.array([0, 1], np.int32))).map(classifier))
    assert classifier.shapes == {((2, 3), (2,))}
    assert classifier.target_tokens is None


def test_backup_reads_the_model_only_when_training_starts_and_when_it_saves(tmp_path):
    # Under JAX each read of Callback.model copies the training state back into the
    # variables: a read per step would cost a GPU run that copy and a device wait each step.
    import keras

    from train.callbacks import ResumableBackup

    class Watched(ResumableBackup):
        reads = 0

        @property
        def model(self):
            self.reads += 1
            return self._model

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    model.optimizer.iterations.assign(7)
    backup = Watched(tmp_path / "backup", 5, "fp")
    backup.set_model(model)
    backup.on_train_begin()
    backup.on_epoch_begin(0)
    read_at = {}
    for batch in range(8):
        model.optimizer.iterations.assign_add(1)  # what the train step does
        before = backup.reads
        backup.on_train_batch_end(batch, {"loss": 1.0})
        read_at[8 + batch] = backup.reads > before
    assert [step for step, read in read_at.items() if read] == [10, 15]
    state = json.loads(backup.state_path.read_text())
    assert (state["step"], state["batch"]) == (15, 8)  # 8 batches of the epoch trained
    assert (backup.directory / "step_15.weights.h5").is_file()
