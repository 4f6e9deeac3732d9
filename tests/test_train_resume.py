"""Resumable training: kill -9 mid-run, rerun the same command, and end where an uninterrupted
run ends; unreadable or mismatched backups are clear errors."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_probe import ROOT
from tests.tiny_runs import train_command

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT),
       "CUDA_VISIBLE_DEVICES": ""}


def run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(train_command(out, *extra), cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=400)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    process = subprocess.Popen(train_command(out), cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    yield out, process


@pytest.mark.slow
def test_kill_9_mid_run_then_rerun_resumes_and_matches_an_uninterrupted_run(
        uninterrupted, tmp_path):
    full_out, full_process = uninterrupted
    out = tmp_path / "killed"
    state = out / "backup" / "state.json"
    victim = subprocess.Popen(train_command(out), cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not state.is_file() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    backup = json.loads(state.read_text())
    assert 0 < backup["step"] < 12
    assert not (out / "metrics.json").exists()

    # Copies of the backup for the error cases, before the resumed run consumes it.
    corrupt, mismatched = tmp_path / "corrupt", tmp_path / "mismatched"
    shutil.copytree(out, corrupt)
    shutil.copytree(out, mismatched)

    result = run(out)
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    step = json.loads((out / "metrics.json").read_text())["resumed_from_step"]
    assert step >= backup["step"]
    assert f"resumed from {out / 'backup'}" in log
    # The dev data ends at each validation by design: no Keras warning that it ran out.
    assert "ran out of data" not in log
    assert f"at step {step}" in log
    assert not (out / "backup").exists()  # removed once training finished

    full_process.wait(timeout=400)
    assert full_process.returncode == 0
    full = json.loads((full_out / "metrics.json").read_text())
    resumed = json.loads((out / "metrics.json").read_text())
    assert full["resumed_from_step"] == 0
    assert resumed["steps"] == full["steps"] == 12
    assert resumed["epochs"] == full["epochs"] == 3
    assert resumed["dev_loss"] == pytest.approx(full["dev_loss"], rel=1e-4)
    assert resumed["best_dev_bleu"] == pytest.approx(full["best_dev_bleu"], abs=1e-6)
    # metrics.json holds every epoch, those of the killed process too.
    assert resumed["epoch_dev"]["bleu"] == pytest.approx(full["epoch_dev"]["bleu"], abs=1e-6)
    assert len(resumed["epoch_losses"]) == len(resumed["epoch_minutes"]) == 3
    assert resumed["train_seconds"] > backup["elapsed_seconds"]  # the killed process's too
    assert (out / "test.hyp").read_text() == (full_out / "test.hyp").read_text()

    weights = corrupt / "backup" / backup["weights"]
    weights.write_bytes(b"not an HDF5 file")
    result = run(corrupt)
    assert result.returncode == 1
    assert f"backup checkpoint {weights} is corrupt or does not fit this model" in result.stderr

    # The run directory refuses another config before anything is touched (exit 2).
    before = sorted((p.name, p.stat().st_mtime_ns) for p in mismatched.rglob("*"))
    result = run(mismatched, "model.overrides.d_ff=128")
    assert result.returncode == 2
    assert "was written by a run with a different data, tokenizer or model config" in (
        result.stderr)
    assert "model.overrides.d_ff: 64 -> 128" in result.stderr
    assert sorted((p.name, p.stat().st_mtime_ns) for p in mismatched.rglob("*")) == before


KILL_WHEN_SCORING = """
import os, signal, sys
import train.tasks.translation
from train.cli import main
def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
train.tasks.translation.score_translations = killed
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_kill_9_after_training_reruns_only_the_scoring(uninterrupted, tmp_path):
    full_out, full_process = uninterrupted
    out = tmp_path / "scoring"
    victim = subprocess.run([sys.executable, "-c", KILL_WHEN_SCORING, *train_command(out)[3:]],
                            cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=400)
    assert victim.returncode == -signal.SIGKILL, victim.stderr[-3000:]
    state = json.loads((out / "backup" / "state.json").read_text())
    assert state["step"] == 12 and state["finished"]["steps"] == 12
    assert (out / "model.keras").is_file() and not (out / "metrics.json").exists()

    result = run(out)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "training had finished at step 12; saving and scoring again" in result.stderr
    assert "train steps saw" not in result.stderr  # logged after model.fit: none ran
    assert not (out / "backup").exists()
    full_process.wait(timeout=400)
    full = json.loads((full_out / "metrics.json").read_text())
    resumed = json.loads((out / "metrics.json").read_text())
    assert resumed["resumed_from_step"] == resumed["steps"] == 12
    assert resumed["epoch_losses"] == pytest.approx(full["epoch_losses"], rel=1e-4)
    assert resumed["best_dev_bleu"] == pytest.approx(full["best_dev_bleu"], abs=1e-6)
    assert (out / "test.hyp").read_text() == (full_out / "test.hyp").read_text()


def test_resume_plan_finishes_the_interrupted_epoch_then_runs_whole_epochs():
    from train.engine import segments

    assert segments(None, 3, 0) == [(0, 3, None, 0, 0)]
    # steps_per_epoch mode: skip every batch trained on, shorten the interrupted epoch.
    assert segments({"epoch": 1, "batch": 2, "step": 6}, 3, 4) == [
        (1, 2, 2, 6, 2), (2, 3, 4, 8, 0)]
    assert segments({"epoch": 2, "batch": 0, "step": 8}, 3, 4) == [(2, 3, 4, 8, 0)]
    assert segments({"epoch": 3, "batch": 0, "step": 12}, 3, 4) == []
    # Killed between the save after an epoch's last step and the epoch-end save: never a
    # segment of 0 steps (Keras would read that as "until the data ends", which never comes).
    assert segments({"epoch": 0, "batch": 4, "step": 4}, 3, 4) == [(1, 3, 4, 4, 0)]
    # One pass per epoch: skip the interrupted epoch's first batches, then full passes.
    assert segments({"epoch": 1, "batch": 5, "step": 30}, 3, 0) == [
        (1, 2, None, 5, 5), (2, 3, None, 0, 0)]


def test_nan_guard_stops_training_and_no_backup_is_taken_of_a_nan_loss():
    import keras

    from train.callbacks import NaNGuard, _finite

    guard = NaNGuard()
    model = keras.Sequential([keras.layers.Dense(1)])
    guard.set_model(model)
    guard.on_batch_end(0, {"loss": 1.5})
    assert not guard.fired and not getattr(model, "stop_training", False)
    guard.on_batch_end(1, {"loss": float("nan")})
    assert guard.fired and model.stop_training
    assert _finite({"loss": 2.0}) and not _finite({"loss": float("inf")})
