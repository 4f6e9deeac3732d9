"""training.init_from: a run that starts from another run's weights and tokenizer, with the
learning-rate schedule continued from training.initial_step (train.warm_start)."""

import json

import numpy as np
import pytest

from tests.cli_probe import assert_clean_failure, run_cli
from tests.tiny_runs import train_args

ONE_EPOCH = ["training.epochs=1", "training.keep_checkpoints=1", "eval.max_sentences=2"]


@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("warm") / "source"
    result = run_cli("train", *train_args(out, *ONE_EPOCH))
    assert result.code == 0, result.stderr[-3000:]
    return out


@pytest.mark.slow
def test_a_warm_started_run_begins_at_the_source_weights_tokenizer_and_step(source_run,
                                                                             tmp_path):
    out = tmp_path / "fine_tune"
    # A learning rate near zero: after its 3 steps the run still holds the weights it began
    # with, which must be the checkpoint's, not a fresh initialization's.
    result = run_cli("train", *train_args(
        out, *ONE_EPOCH, f"training.init_from={source_run / 'checkpoints' / 'epoch_0001.npz'}",
        "training.initial_step=100", "training.warmup_fraction=0", "training.lr_scale=1e-12"))
    assert result.code == 0, result.stderr[-3000:]
    assert (out / "spm.model").read_bytes() == (source_run / "spm.model").read_bytes()
    assert json.loads((out / "metrics.json").read_text())["steps"] == 103

    import keras

    import keras_transformer  # noqa: F401  (registers the layers model.keras names)
    from train.callbacks import load_weights_npz

    start = load_weights_npz(source_run / "checkpoints" / "epoch_0001.npz")
    after = keras.saving.load_model(out / "model.keras", compile=False).get_weights()
    assert len(after) == len(start)
    for a, b in zip(after, start, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.slow
def test_a_warm_start_from_a_saved_model_of_another_shape_is_refused_in_one_line(source_run,
                                                                                 tmp_path):
    out = tmp_path / "wider"
    result = run_cli("train", *train_args(out, *ONE_EPOCH,
                                          f"training.init_from={source_run}",
                                          "model.overrides.d_model=32"))
    assert_clean_failure(result, 2, "training.init_from", "another model's weights")


def test_a_warm_start_from_a_missing_or_unknown_file_is_refused_before_work(
        tmp_path):
    out = tmp_path / "run"
    result = run_cli("train", *train_args(out, f"training.init_from={tmp_path / 'nothing'}"))
    assert_clean_failure(result, 2, "training.init_from", "not found")
    assert not out.exists()
    (tmp_path / "weights.txt").write_text("x")
    result = run_cli("train", *train_args(out, f"training.init_from={tmp_path / 'weights.txt'}"))
    assert_clean_failure(result, 2, "neither a .keras model nor an epoch checkpoint")


def test_a_warm_start_from_the_run_directory_itself_is_refused_before_it_is_replaced(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "spm.model").write_bytes(b"tokenizer")
    (out / "model.keras").write_bytes(b"weights")
    result = run_cli("train", *train_args(out, f"training.init_from={out}"), "--overwrite")
    assert_clean_failure(result, 2, "training.init_from", "run directory itself")
    assert (out / "model.keras").read_bytes() == b"weights"
    assert (out / "spm.model").read_bytes() == b"tokenizer"
