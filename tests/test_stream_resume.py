"""A streamed run (data.stream) killed with SIGKILL mid-run and rerun resumes mid-stream: the
seeded stream is replayed and the batches already trained on are skipped, so it ends with the
losses, dev scores and outputs of an uninterrupted run. Translation under TensorFlow (tf.data)
and under JAX (the NumPy `StreamBatches`); masked_lm, a record-stream task whose masks come
from the batch index and the seed, under TensorFlow."""

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_probe import ROOT
from tests.stream_runs import PYTHONS, command, masked_lm_stream_config, stream_config

pytestmark = pytest.mark.slow

STEPS, STEPS_PER_EPOCH = 12, 4  # both configs: 3 epochs of 4 steps, a backup every 2


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    return stream_config(tmp_path_factory.mktemp("stream"))


@pytest.fixture(scope="module")
def masked_lm_config(tmp_path_factory):
    return masked_lm_stream_config(tmp_path_factory.mktemp("stream_masked_lm"))


@dataclass
class Runs:
    """An uninterrupted run (`full`) and one killed at a backup and rerun (`killed`)."""
    full: Path
    killed: Path
    backup: dict  # the state.json the killed process left
    first: dict  # metrics.json of the uninterrupted run
    resumed: dict  # of the resumed one
    first_stdout: str
    resumed_stdout: str

    @property
    def done(self) -> int:
        """The epochs the killed process began: the resumed process trained all of the later
        ones, and only the end of the last of these (its loss, a mean over fewer batches,
        differs)."""
        return -(-self.backup["step"] // STEPS_PER_EPOCH)


def killed_and_uninterrupted(backend: str, config: Path, folder: Path) -> Runs:
    """Runs `config` twice at once: once to its end, once killed with SIGKILL as soon as its
    first backup exists, then rerun with the same command; checks the rerun resumed mid-run
    from that backup and both ended at the same step."""
    if not PYTHONS[backend].exists():
        pytest.skip(f"no {PYTHONS[backend].parent.parent.name} (make setup-jax)")
    full, killed = folder / "full", folder / "killed"
    args, env = command(backend, config, full)
    whole = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    args, env = command(backend, config, killed)
    victim = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        state = killed / "backup" / "state.json"
        deadline = time.monotonic() + 600
        while not state.is_file() and victim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert victim.poll() is None, "the run ended before its first backup"
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        backup = json.loads(state.read_text())
        assert 2 <= backup["step"] < STEPS, backup  # mid-stream: a backup every 2 steps
        assert not (killed / "metrics.json").exists()

        resumed_run = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True,
                                     timeout=900)
        assert resumed_run.returncode == 0, resumed_run.stderr[-3000:]
        assert f"at step {backup['step']}" in resumed_run.stdout + resumed_run.stderr
        stdout, stderr = whole.communicate(timeout=900)
        assert whole.returncode == 0, stderr[-3000:]
    finally:
        for process in (whole, victim):
            if process.poll() is None:
                process.kill()
                process.wait()
    runs = Runs(full, killed, backup, json.loads((full / "metrics.json").read_text()),
                json.loads((killed / "metrics.json").read_text()), stdout, resumed_run.stdout)
    assert runs.resumed["resumed_from_step"] == backup["step"] > 0
    assert runs.first["resumed_from_step"] == 0
    assert runs.resumed["steps"] == runs.first["steps"] == STEPS
    return runs


def assert_trained_alike(runs: Runs) -> None:
    """The epochs the resumed process trained saw the uninterrupted run's batches: their
    losses agree, and so do the dev loss and every epoch's dev scores (those of the epochs
    before the kill kept in the backup)."""
    first, resumed = runs.first, runs.resumed
    assert resumed["epoch_losses"][runs.done:] == pytest.approx(
        first["epoch_losses"][runs.done:], rel=1e-4)
    if runs.done < len(first["epoch_losses"]):  # the last epoch trained by the rerun alone
        assert resumed["final_loss"] == pytest.approx(first["final_loss"], rel=1e-4)
    assert resumed["dev_loss"] == pytest.approx(first["dev_loss"], rel=1e-4)
    assert resumed["epoch_steps"] == first["epoch_steps"] == [4, 8, 12]
    assert resumed["epoch_dev"].keys() == first["epoch_dev"].keys()
    for key, values in first["epoch_dev"].items():  # rounded to 4 decimals
        assert resumed["epoch_dev"][key] == pytest.approx(values, rel=1e-4, abs=1e-4), key
    # What the stream read (records: translation counts pairs): the same shards, and rows.
    assert resumed["stream_shards"] == first["stream_shards"] == 3
    for key in ("streamed_train_records", "streamed_train_pairs", "empty_dropped"):
        assert resumed.get(key) == first.get(key), key


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_streamed_run_killed_mid_stream_resumes_to_the_uninterrupted_result(
        backend, config_file, tmp_path):
    runs = killed_and_uninterrupted(backend, config_file, tmp_path)
    assert_trained_alike(runs)
    # The final weights translate alike.
    assert (runs.killed / "test.hyp").read_text() == (runs.full / "test.hyp").read_text()


def fills(stdout: str) -> list[str]:
    """The dev sentences with pieces hidden and the model's fills, as the run prints them."""
    return [line for line in stdout.splitlines() if line.startswith(("  IN ", "  OUT "))]


def test_a_streamed_masked_lm_run_killed_mid_stream_resumes_to_the_uninterrupted_result(
        masked_lm_config, tmp_path):
    # Masks come from the batch's index in the stream and the seed: the skipped batches must
    # keep their places for the rerun's batches to be masked as the uninterrupted run's.
    runs = killed_and_uninterrupted("tensorflow", masked_lm_config, tmp_path)
    assert_trained_alike(runs)
    first, resumed = runs.first, runs.resumed
    assert (first["streamed_train_records"], first["stream_shards"]) == (300, 3)
    assert resumed["dev_masked_perplexity"] == pytest.approx(first["dev_masked_perplexity"],
                                                             rel=1e-4)
    assert resumed["best_dev_neg_masked_perplexity"] == pytest.approx(
        first["best_dev_neg_masked_perplexity"], rel=1e-4)
    for key in ("dev_masked_accuracy", "dev_masked_pieces", "dev_scored_rows", "best_epoch",
                "best_step"):
        assert resumed[key] == first[key], key
    assert first["dev_masked_pieces"] > 0
    # The final weights fill the hidden dev pieces alike.
    assert fills(runs.first_stdout) and fills(runs.resumed_stdout) == fills(runs.first_stdout)
