"""training.init_from: a run that starts from another run's weights and tokenizer, with the
learning-rate schedule continued from training.initial_step (train.warm_start)."""

import functools
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


@pytest.mark.slow
def test_init_optimizer_carries_adams_moments_into_the_continued_run(source_run, tmp_path):
    """At a rate near zero the weights, and so the gradients, are the same with and without
    the old moments; Adam's moments decay by beta per step, so after k steps the continued
    run's exceed the fresh one's by exactly beta^k times the old run's."""
    from train.config import load_config
    from train.warm_start import saved_optimizer_variables

    runs = {}
    for carried in (True, False):
        out = tmp_path / f"carried_{carried}"
        result = run_cli("train", *train_args(
            out, *ONE_EPOCH, f"training.init_from={source_run}", "training.initial_step=continue",
            "training.warmup_fraction=0", "training.lr_scale=1e-12",
            f"training.init_optimizer={str(carried).lower()}"))
        assert result.code == 0, result.stderr[-3000:]
        assert ("with its optimizer's state" in result.stderr) == carried
        runs[carried] = saved_optimizer_variables(out / "model.keras")
    source = saved_optimizer_variables(source_run / "model.keras")
    steps = json.loads((source_run / "metrics.json").read_text())["steps"]
    training = load_config(source_run / "config.yaml").training
    assert runs[True][0] == runs[False][0] == 2 * steps  # the optimizer's step count
    assert len(source) == len(runs[True]) > 3
    for i in range(1, len(source)):  # a momentum, then a velocity, for each weight
        beta = training.beta_1 if i % 2 else training.beta_2
        np.testing.assert_allclose(runs[True][i] - runs[False][i], beta ** steps * source[i],
                                   rtol=1e-3, atol=1e-9)


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


@functools.cache
def _two_dense():
    import keras

    @keras.saving.register_keras_serializable(package="test_warm_start")
    class TwoDense(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.hidden = keras.layers.Dense(3, name="hidden")
            self.out = keras.layers.Dense(1, name="out")

        def build(self, input_shape):
            # Built here, as the project's models are, so that a loaded model names its
            # weights as a new one does.
            self.hidden.build(input_shape)
            self.out.build((None, 3))

        def call(self, x):
            return self.out(self.hidden(x))

    return TwoDense


def _dense_model(seed, optimizer=None):
    import keras

    keras.utils.set_random_seed(seed)
    model = _two_dense()(name="net")
    model.build((None, 4))
    model.compile(optimizer=optimizer or keras.optimizers.Adam(0.05), loss="mse")
    return model


def test_init_optimizer_continues_as_if_the_run_had_never_stopped(tmp_path):
    from train.warm_start import start_from

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 4)).astype("float32"), rng.normal(size=(8, 1)).astype("float32")
    source = _dense_model(0)
    source.fit(x, y, batch_size=8, epochs=5, shuffle=False, verbose=0)
    source.save(tmp_path / "model.keras")
    source.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)  # the uninterrupted run

    def continued(optimizer_state):
        model = _dense_model(1)
        start_from(model, tmp_path / "model.keras", 5, optimizer_state)
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        return model.get_weights()

    for a, b in zip(continued(True), source.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # A fresh Adam's first steps are as large as the rate allows: the weights part from the
    # uninterrupted run's.
    assert max(np.abs(a - b).max()
               for a, b in zip(continued(False), source.get_weights(), strict=True)) > 1e-3


def test_init_optimizer_refuses_files_without_this_models_optimizer_state(tmp_path):
    import keras

    from train.callbacks import save_weights_npz
    from train.warm_start import start_from

    bare = _dense_model(0)
    bare.save(tmp_path / "untrained.keras")  # the optimizer was never built: nothing saved
    with pytest.raises(ValueError, match="holds no optimizer state"):
        start_from(_dense_model(1), tmp_path / "untrained.keras", 5, True)
    save_weights_npz(bare, tmp_path / "epoch_0001.npz")
    with pytest.raises(ValueError, match="epoch checkpoint, which holds no optimizer state"):
        start_from(_dense_model(1), tmp_path / "epoch_0001.npz", 5, True)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 4)).astype("float32"), rng.normal(size=(8, 1)).astype("float32")
    bare.fit(x, y, verbose=0)
    bare.save(tmp_path / "trained.keras")
    accumulating = _dense_model(1, keras.optimizers.Adam(0.05, gradient_accumulation_steps=2))
    with pytest.raises(ValueError, match="has 10 variables, this run's 14"):
        start_from(accumulating, tmp_path / "trained.keras", 5, True)
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, name="out")], name="net")
    other.compile(optimizer="adam", loss="mse")
    with pytest.raises(ValueError, match="continues the same model"):
        start_from(other, tmp_path / "trained.keras", 5, True)


def test_init_optimizer_needs_the_run_it_continues_and_its_step():
    from tests.tiny_runs import DEMO
    from train.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="set training.init_from and training.initial_step"):
        load_config(DEMO, ["training.init_optimizer=true"])
    with pytest.raises(ConfigError, match="training.initial_step: continue"):
        load_config(DEMO, ["training.init_optimizer=true", "training.init_from=runs/x"])
    config = load_config(DEMO, ["training.init_optimizer=true", "training.init_from=runs/x",
                                "training.initial_step=continue", "training.warmup_fraction=0"])
    assert config.training.init_optimizer
