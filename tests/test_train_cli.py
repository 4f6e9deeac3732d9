"""`python -m train` end to end on a few hundred demo pairs, and its config errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from train.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "train" / "configs" / "demo.yaml"


def run_cli(*args, cwd=ROOT):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_small_demo_run_writes_the_run_directory(tmp_path):
    out = tmp_path / "run"
    result = run_cli("--config", str(DEMO), "--out", str(out),
                     "--set", "data.train_size=300", "--set", "data.dev_size=20",
                     "--set", "data.test_size=20", "--set", "training.epochs=1",
                     "--set", "eval.beam_size=2", "--set", "training.verbose=0")
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("model.keras", "spm.model", "config.yaml", "metrics.json", "test.hyp"):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("bleu", "chrf", "sacrebleu_signature", "train_seconds", "dev_bleu"):
        assert key in metrics
    assert metrics["sacrebleu_signature"].startswith("nrefs:1|")
    assert 0.0 <= metrics["bleu"] <= 100.0 and metrics["scored_split"] == "test"
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["data"]["train_size"] == 300
    assert resolved["training"]["epochs"] == 1
    assert "test: BLEU" in result.stdout
    assert len((out / "test.hyp").read_text(encoding="utf-8").splitlines()) == 20


def test_unknown_key_and_wrong_type_are_reported(tmp_path):
    result = run_cli("--config", str(DEMO), "--out", str(tmp_path), "--set", "training.epoch=3")
    assert result.returncode == 2
    assert "unknown key(s) ['epoch'] in training" in result.stderr
    result = run_cli("--config", str(DEMO), "--out", str(tmp_path), "--set",
                     "training.epochs=many")
    assert result.returncode == 2
    assert "training.epochs must be an integer" in result.stderr


def test_old_dev_score_keys_still_load_with_one_note(tmp_path, capsys, monkeypatch):
    """An older run's config names the dev score's keys eval.dev_bleu_*: they are read as
    eval.dev_score_*, with a one-line note printed once; both names at once is an error. The
    search options of eval are read as one SearchSettings."""
    import train.config
    from keras_transformer.decoding import SearchSettings

    monkeypatch.setattr(train.config, "_renames_noted", set())
    old = yaml.safe_load(DEMO.read_text())
    old.setdefault("eval", {}).update(dev_bleu_sentences=7, dev_bleu_beam=3, beam_size=2,
                                      min_length=4)
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(old))
    for _ in range(2):
        config = load_config(path)
        assert (config.eval.dev_score_sentences, config.eval.dev_score_beam) == (7, 3)
    notes = capsys.readouterr().err.splitlines()
    assert notes == [
        "note: eval.dev_bleu_sentences is now named eval.dev_score_sentences (it governs every "
        "task's dev score); the old name is still read",
        "note: eval.dev_bleu_beam is now named eval.dev_score_beam (it governs every task's dev "
        "score); the old name is still read"]
    assert SearchSettings.from_config(config.eval) == SearchSettings(beam_size=2, min_length=4)
    assert load_config(path, ["eval.dev_bleu_beam=5"]).eval.dev_score_beam == 5
    with pytest.raises(ConfigError, match="^eval.dev_bleu_beam is the old name of "
                                          "eval.dev_score_beam; keep only eval.dev_score_beam$"):
        load_config(path, ["eval.dev_score_beam=2"])
    with pytest.raises(ConfigError, match="eval.dev_score_beam must be >= 1 and <= 64, got 65"):
        load_config(path, ["eval.dev_bleu_beam=65"])


def test_missing_data_file_names_the_path(tmp_path):
    result = run_cli("--config", str(DEMO), "--out", str(tmp_path / "run"),
                     "--set", "data.corpus=parallel", "--set", f"data.data_dir={tmp_path}",
                     "--set", "data.train_source=train.en", "--set", "data.train_target=train.vi")
    assert result.returncode == 2  # bad input (it was 1 before the shared exit codes)
    assert f"data file not found: {tmp_path / 'train.en'}" in result.stderr


def test_load_config_overrides_and_errors(tmp_path):
    config = load_config(DEMO, ["model.overrides.d_model=64", "eval.alpha=1"])
    assert config.model.overrides["d_model"] == 64
    assert config.eval.alpha == 1.0
    with pytest.raises(ConfigError, match="must be true or false"):
        load_config(DEMO, ["training.jit_compile=maybe"])
    with pytest.raises(FileNotFoundError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="key=value"):
        load_config(DEMO, ["training.epochs"])


def test_a_number_written_with_an_exponent_and_no_dot_is_a_number_not_a_string():
    # YAML 1.1 (PyYAML) reads 3e-4 as the string "3e-4"; every float key takes it as 0.0003.
    config = load_config(DEMO, ["training.lr_scale=3e-4", "eval.alpha=1E0",
                                "training.epsilon=1e-9"])
    assert config.training.lr_scale == 3e-4 and config.eval.alpha == 1.0
    assert config.training.epsilon == 1e-9
    with pytest.raises(ConfigError, match="training.lr_scale must be a number, got 'e-4'"):
        load_config(DEMO, ["training.lr_scale=e-4"])


@pytest.mark.parametrize("assignment, message", [
    ("eval.batch_size=0", "eval.batch_size must be >= 1 and <= 4096, got 0"),
    ("eval.beam_size=0", "eval.beam_size must be >= 1 and <= 64, got 0"),
    ("eval.dev_score_beam=-1", "eval.dev_score_beam must be >= 1 and <= 64, got -1"),
    ("data.num_buckets=0", "data.num_buckets must be >= 1, got 0"),
    ("training.warmup_steps=0", "training.warmup_steps must be >= 1, got 0"),
    ("training.lr_scale=0", "training.lr_scale must be > 0, got 0.0"),
    ("training.label_smoothing=1", "training.label_smoothing must be >= 0 and < 1, got 1.0"),
    ("training.beta_2=1.5", "training.beta_2 must be >= 0 and < 1, got 1.5"),
    ("training.epsilon=.nan", "training.epsilon must be > 0, got nan"),
])
def test_out_of_range_values_fail_when_the_config_is_loaded(assignment, message):
    with pytest.raises(ConfigError) as err:
        load_config(DEMO, [assignment])
    assert str(err.value) == message


def test_out_of_range_value_is_reported_by_the_cli_before_any_work(tmp_path):
    result = run_cli("--config", str(DEMO), "--out", str(tmp_path / "run"), "--set",
                     "eval.batch_size=0")
    assert result.returncode == 2
    assert "eval.batch_size must be >= 1 and <= 4096, got 0" in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_every_pair_too_long_is_an_error_not_an_endless_wait(tmp_path):
    result = run_cli("--config", str(DEMO), "--out", str(tmp_path / "run"),
                     "--set", "data.train_size=300", "--set", "data.dev_size=20",
                     "--set", "data.test_size=10", "--set", "tokenizer.vocab_size=200",
                     "--set", "data.max_source_length=2", "--set", "data.max_target_length=2",
                     "--set", "training.steps_per_epoch=2")
    assert result.returncode == 2  # a config that cannot train: bad input
    assert ("error: all 20 dev pairs are longer than data.max_source_length=2 / "
            "data.max_target_length=2 tokens (EOS included); raise them") in result.stderr
