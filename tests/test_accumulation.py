"""Gradient accumulation (training.accumulate_steps): k batches update the weights as one batch
of k times the rows would, the learning-rate schedule counts updates, and a run counts steps,
backups and resumes in updates."""

import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
from keras_transformer.models.transformer import Transformer
from keras_transformer.schedules import TransformerSchedule
from tests.cli_probe import ROOT
from tests.conftest import random_ids
from tests.tiny_runs import train_command
from train.accumulation import batches_done, set_updates, updates_done
from train.config import ConfigError, load_config
from train.engine import compile_model, make_optimizer

pytestmark = pytest.mark.usefixtures("seeded")

K = 4
UPDATES = 3


def run_config(accumulate: int, *extra: str):
    # epsilon near the gradients' size: Adam's update then depends on the gradient's scale,
    # not only its sign, so a sum of k gradients instead of their mean would show.
    return load_config(None, [f"training.accumulate_steps={accumulate}", "training.epsilon=1e-3",
                              "training.warmup_steps=2", "training.label_smoothing=0.1",
                              "training.jit_compile=false", *extra])


def micro_batches(rng, count: int, rows: int = 2, length: int = 6):
    """Batches without padding: every one holds rows x length target tokens, so the mean of
    their token means is the token mean of their concatenation (see docs/training.md)."""
    batches = []
    for _ in range(count):
        source = random_ids(rng, rows, length)
        target = random_ids(rng, rows, length + 1)
        batches.append(((source, target[:, :-1]), target[:, 1:]))
    return batches


def concatenated(batches):
    return ((np.concatenate([b[0][0] for b in batches]), np.concatenate([b[0][1] for b in batches])),
            np.concatenate([b[1] for b in batches]))


def trained(tiny_config, initial, accumulate: int, batches):
    model = Transformer(tiny_config)
    model.build()
    model.set_weights(initial)
    compile_model(model, run_config(accumulate), MaskedLabelSmoothedCrossEntropy(0.1),
                  [], jit_compile=False)
    for inputs, labels in batches:
        model.train_on_batch(inputs, labels)
    return model


@pytest.fixture
def shared_config():
    """The tiny model with one embedding for source, target and output (as spa_eng_small
    has): its gradient is dense. A source embedding of its own gets tf.IndexedSlices, and
    Keras' Adam on TensorFlow squares those slices before it sums an id's repeats into the
    second moment, where an accumulated (dense) gradient is summed first: an unaccumulated
    step differs there, by design of neither (docs/design.md, Gradient accumulation)."""
    from keras_transformer.config import TransformerConfig

    return TransformerConfig.preset(
        "tiny", source_vocab_size=40, target_vocab_size=40, d_model=32, num_heads=4, d_ff=64,
        max_source_length=24, max_target_length=24, dropout=0.0, share_embeddings=True)


def max_difference(a, b) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in
               zip(a.get_weights(), b.get_weights(), strict=True))


def test_accumulating_4_batches_gives_the_weights_of_one_4x_batch(shared_config):
    rng = np.random.default_rng(3)
    model = Transformer(shared_config)
    model.build()
    initial = model.get_weights()
    small = micro_batches(rng, K * UPDATES)
    large = [concatenated(small[i: i + K]) for i in range(0, len(small), K)]

    reference = trained(shared_config, initial, 1, large)
    accumulated = trained(shared_config, initial, K, small)
    assert max_difference(accumulated, reference) < 1e-5
    # Both took UPDATES updates, and the schedule counts updates: the same learning rate now.
    assert updates_done(accumulated.optimizer) == updates_done(reference.optimizer) == UPDATES
    assert batches_done(accumulated.optimizer) == K * UPDATES
    assert float(accumulated.optimizer.learning_rate) == pytest.approx(
        float(reference.optimizer.learning_rate), rel=1e-6)

    # The comparison can fail: an update per small batch lands far from the reference.
    unaccumulated = trained(shared_config, initial, 1, small)
    assert max_difference(unaccumulated, reference) > 1e-3


def test_the_schedule_counts_updates_when_the_optimizer_counts_batches():
    plain, divided = TransformerSchedule(64, 10), TransformerSchedule(64, 10, accumulate_steps=K)
    for batches in (0, 3, 4, 7, 8, 41):
        assert float(divided(batches)) == pytest.approx(float(plain(batches // K)))
    clone = TransformerSchedule.from_config(divided.get_config())
    assert float(clone(41)) == pytest.approx(float(divided(41)))
    assert "accumulate_steps" not in plain.get_config()  # older saved configs stay as they were
    with pytest.raises(ValueError, match="accumulate_steps must be >= 1"):
        TransformerSchedule(64, 10, accumulate_steps=0)


def test_mixed_float16_accumulates_inside_the_loss_scale_optimizer():
    optimizer = make_optimizer(run_config(K, "training.precision=mixed_float16"), 32)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert optimizer.inner_optimizer.gradient_accumulation_steps == K
    optimizer.build([keras.Variable(np.zeros(3, "float32"))])
    set_updates(optimizer, 5)  # a warm start's training.initial_step
    assert updates_done(optimizer) == 5 and batches_done(optimizer) == 5 * K


def test_accumulate_steps_below_one_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^training.accumulate_steps must be >= 1, got 0$"):
        load_config(None, ["training.accumulate_steps=0"])


ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT),
       "CUDA_VISIBLE_DEVICES": ""}
ACCUMULATE = "training.accumulate_steps=2"


@pytest.mark.slow
def test_kill_9_mid_run_resumes_in_updates_and_matches_an_uninterrupted_run(tmp_path):
    """The replayable run of tests.tiny_runs (4 steps an epoch, 3 epochs, a backup every 2
    steps) with 2 batches a step: 12 updates of 24 batches, killed and resumed."""
    full_out, out = tmp_path / "full", tmp_path / "killed"
    full = subprocess.Popen(train_command(full_out, ACCUMULATE), cwd=ROOT, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = out / "backup" / "state.json"
    victim = subprocess.Popen(train_command(out, ACCUMULATE), cwd=ROOT, env=ENV,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not state.is_file() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    backup = json.loads(state.read_text())
    # A backup every 2 updates, at the end of an update: its step counts updates, its place
    # in the epoch counts batches, 2 an update.
    assert backup["step"] % 2 == 0 and 0 < backup["step"] < 12
    assert backup["batch"] == 2 * (backup["step"] - 4 * backup["epoch"])

    result = subprocess.run(train_command(out, ACCUMULATE), cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert full.wait(timeout=400) == 0
    resumed = json.loads((out / "metrics.json").read_text())
    uninterrupted = json.loads((full_out / "metrics.json").read_text())
    assert resumed["resumed_from_step"] == backup["step"]
    assert resumed["steps"] == uninterrupted["steps"] == 12
    assert resumed["accumulate_steps"] == 2
    assert resumed["dev_loss"] == pytest.approx(uninterrupted["dev_loss"], rel=1e-4)
    # The epochs after the interrupted one (whose logged mean covers only the resumed
    # process's batches) trained on the same batches from the same state.
    after = backup["epoch"] + 1
    assert resumed["epoch_losses"][after:] == pytest.approx(
        uninterrupted["epoch_losses"][after:], rel=1e-4)


TWO_CPUS = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from train.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.tf_only
def test_accumulation_over_several_tf_replicas_is_refused_before_the_run_directory(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-c", TWO_CPUS, *train_command(out, ACCUMULATE,
                                                               "training.strategy=mirrored")[3:]]
    result = subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "accumulate_steps" in line]
    assert len(lines) == 1 and "not with 2 replicas" in lines[0]
    assert not out.exists()
