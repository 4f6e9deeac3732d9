"""The wall-clock budget of a run: stops after the budget, counting the time before a resume."""

from types import SimpleNamespace

from train import callbacks
from train.callbacks import TimeBudget


def _model():
    return SimpleNamespace(stop_training=False,
                           optimizer=SimpleNamespace(iterations=SimpleNamespace(numpy=lambda: 7)))


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
