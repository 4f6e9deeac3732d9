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


@pytest.mark.slow
def test_a_warm_start_can_continue_the_schedule_at_the_step_its_weights_were_saved(source_run,
                                                                                  tmp_path):
    out = tmp_path / "continued"
    result = run_cli("train", *train_args(out, *ONE_EPOCH, f"training.init_from={source_run}",
                                          "training.initial_step=continue",
                                          "training.warmup_fraction=0"))
    assert result.code == 0, result.stderr[-3000:]
    source_steps = json.loads((source_run / "metrics.json").read_text())["steps"]
    assert f"at step {source_steps}" in result.stderr
    assert json.loads((out / "metrics.json").read_text())["steps"] == 2 * source_steps


def fake_run(folder, metrics=None):
    folder.mkdir()
    (folder / "spm.model").write_bytes(b"tokenizer")
    if metrics is not None:
        (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder


def test_continue_reads_the_step_of_each_kind_of_weights_file(tmp_path):
    from train.warm_start import initial_step

    run = fake_run(tmp_path / "run", {"steps": 2119, "best_step": 1650,
                                      "epoch_steps": [150, 300, 450]})
    assert initial_step(7, run / "model.keras") == 7
    assert initial_step("continue", run / "model.keras") == 2119
    assert initial_step("continue", run / "average.keras") == 2119
    assert initial_step("continue", run / "best.keras") == 1650
    assert initial_step("continue", run / "checkpoints" / "epoch_0002.npz") == 300
    with pytest.raises(ValueError, match="no step for epoch_0009.npz"):
        initial_step("continue", run / "checkpoints" / "epoch_0009.npz")
    unfinished = fake_run(tmp_path / "unfinished")
    with pytest.raises(ValueError, match="missing or unreadable .* give the step as a number"):
        initial_step("continue", unfinished / "model.keras")
    not_a_mapping = fake_run(tmp_path / "list", [2119])
    with pytest.raises(ValueError, match="missing or unreadable .* give the step as a number"):
        initial_step("continue", not_a_mapping / "model.keras")
    with pytest.raises(ValueError, match="set training.init_from"):
        initial_step("continue", None)


def test_continue_from_a_run_that_never_finished_is_refused_before_work(tmp_path):
    source = fake_run(tmp_path / "source")
    (source / "model.keras").write_bytes(b"weights")
    out = tmp_path / "run"
    result = run_cli("train", *train_args(out, f"training.init_from={source}",
                                          "training.initial_step=continue",
                                          "training.warmup_fraction=0"))
    assert_clean_failure(result, 2, "training.initial_step: continue", "metrics.json")
    assert not out.exists()
    result = run_cli("train", *train_args(out, "training.initial_step=continue",
                                          "training.warmup_fraction=0"))
    assert_clean_failure(result, 2, "training.initial_step: continue", "set training.init_from")
    assert not out.exists()


def test_initial_step_takes_a_number_or_continue():
    from tests.tiny_runs import DEMO
    from train.config import ConfigError, load_config

    assert load_config(DEMO, ["training.initial_step=continue", "training.warmup_fraction=0"]
                       ).training.initial_step == "continue"
    with pytest.raises(ConfigError, match="an integer or continue"):
        load_config(DEMO, ["training.initial_step=resume", "training.warmup_fraction=0"])
    with pytest.raises(ConfigError, match="initial_step must be >= 0"):
        load_config(DEMO, ["training.initial_step=-1", "training.warmup_fraction=0"])


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
