"""A streamed run (data.stream) killed with SIGKILL mid-run and rerun resumes mid-stream: the
seeded stream is replayed and the batches already trained on are skipped, so it ends with the
losses, dev loss and translations of an uninterrupted run. Under TensorFlow (tf.data) and
under JAX (the NumPy `StreamBatches`)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from keras_transformer.text.demo_corpus import demo_splits
from tests.cli_probe import ROOT
from tests.test_stream import write_shards

pytestmark = pytest.mark.slow

PYTHONS = {"tensorflow": Path(sys.executable), "jax": ROOT / ".venv-jax" / "bin" / "python"}


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    """spa_eng_stream.yaml over three small shards (a shuffle buffer smaller than a shard),
    12 steps with a backup every 2."""
    folder = tmp_path_factory.mktemp("stream_resume")
    splits = demo_splits(300, 20, 10, 11)
    write_shards(folder / "data", splits["train"])
    for name in ("dev", "test"):
        (folder / "data" / f"{name}.tsv").write_text(
            "".join(f"{s}\t{t}\n" for s, t in splits[name]))
    config = yaml.safe_load((ROOT / "train" / "configs" / "spa_eng_stream.yaml").read_text())
    config["data"].update(data_dir=str(folder / "data"), train_source="train-*",
                          dev_source="dev.tsv", test_source="test.tsv", max_source_length=24,
                          max_target_length=24, tokens_per_batch=240, shuffle_buffer=50)
    config["tokenizer"].update(vocab_size=150, sample_sentences=200)
    config["model"] = {"preset": "tiny", "overrides": {"d_model": 16, "d_ff": 32,
                                                       "num_heads": 2, "dropout": 0.0}}
    config["training"].update(max_minutes=0, epochs=3, steps_per_epoch=4, save_every_steps=2,
                              verbose=0, tensorboard=False, average_last=0,
                              early_stopping_patience=0)
    config["eval"].update(dev_score_sentences=0, beam_size=1, max_sentences=5, samples=0)
    path = folder / "stream.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def command(backend: str, config: Path, out: Path) -> tuple[list[str], dict]:
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT),
           "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
    return [str(PYTHONS[backend]), "-m", "train", "--config", str(config), "--out",
            str(out)], env


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
