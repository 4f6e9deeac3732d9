"""A streamed run (data.stream) killed with SIGKILL mid-run and rerun resumes mid-stream: the
seeded stream is replayed and the batches already trained on are skipped, so it ends with the
losses, dev loss and translations of an uninterrupted run. Under TensorFlow (tf.data) and
under JAX (the NumPy `StreamBatches`)."""

import json
import os
import signal
import subprocess
import time

import pytest

from tests.cli_probe import ROOT
from tests.stream_runs import PYTHONS, command, stream_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    return stream_config(tmp_path_factory.mktemp("stream"))


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_streamed_run_killed_mid_stream_resumes_to_the_uninterrupted_result(
        backend, config_file, tmp_path):
    if not PYTHONS[backend].exists():
        pytest.skip(f"no {PYTHONS[backend].parent.parent.name} (make setup-jax)")
    full, killed = tmp_path / "full", tmp_path / "killed"
    args, env = command(backend, config_file, full)
    whole = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    args, env = command(backend, config_file, killed)
    victim = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    state = killed / "backup" / "state.json"
    deadline = time.monotonic() + 600
    while not state.is_file() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert victim.poll() is None, "the run ended before its first backup"
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    backup = json.loads(state.read_text())
    assert 2 <= backup["step"] < 12, backup  # mid-stream: a backup every 2 steps
    assert not (killed / "metrics.json").exists()

    resumed_run = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=900)
    assert resumed_run.returncode == 0, resumed_run.stderr[-3000:]
    assert f"at step {backup['step']}" in resumed_run.stdout + resumed_run.stderr
    _, stderr = whole.communicate(timeout=900)
    assert whole.returncode == 0, stderr[-3000:]
    first = json.loads((full / "metrics.json").read_text())
    resumed = json.loads((killed / "metrics.json").read_text())
    assert resumed["resumed_from_step"] == backup["step"]
    assert resumed["steps"] == first["steps"] == 12
    # The epochs the resumed process trained saw the uninterrupted run's batches: their
    # losses, the dev loss and the final weights' translations agree.
    done = -(-backup["step"] // 4)  # the epochs the killed process began
    assert resumed["epoch_losses"][done:] == pytest.approx(first["epoch_losses"][done:],
                                                           rel=1e-4)
    assert resumed["dev_loss"] == pytest.approx(first["dev_loss"], rel=1e-4)
    assert (killed / "test.hyp").read_text() == (full / "test.hyp").read_text()
