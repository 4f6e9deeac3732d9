"""The task registry (train.tasks): one check of a task's name, each task's own config rules
(Task.check_config) applied when a run's config loads and before a run, and the training
losses that models saved by earlier versions name."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train.config import ConfigError, load_config
from train.tasks import TASKS, load_run_config, task_class

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "train" / "configs"
DEMO = CONFIGS / "demo.yaml"


def test_an_unknown_task_is_refused_by_name_in_one_place(tmp_path):
    message = ("task 'parsing' is not supported (use translation or classification or "
               "summarization or language_model or extractive_summarization or "
               "content_selection or masked_lm or denoising)")
    with pytest.raises(ConfigError) as err:
        load_run_config(DEMO, ["task=parsing"])
    assert str(err.value) == message
    from train.run import run

    with pytest.raises(ConfigError, match="'parsing' is not supported"):
        run(load_config(DEMO, ["task=parsing"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    # The words of the refusal live in the registry only (cli, run and evaluate ask it).
    holders = [p.relative_to(ROOT).as_posix() for p in (ROOT / "train").rglob("*.py")
               if "is not supported (use" in p.read_text(encoding="utf-8")]
    assert holders == ["train/tasks/__init__.py"]


def test_the_command_line_refuses_an_unknown_task_in_one_line(tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "train", "--config", str(DEMO), "--out",
                             str(tmp_path / "run"), "--set", "task=parsing"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: task 'parsing' is not supported (use translation or classification or "
        "summarization or language_model or extractive_summarization or "
        "content_selection or masked_lm or denoising)")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("config, overrides, message", [
    ("vietnews_extractive", ["eval.summary_sentences=2", "eval.summary_syllables=30"],
     r"^eval.summary_sentences \(2\) and eval.summary_syllables \(30\) both pick the summary"),
    ("vietnews_extractive", ["eval.summary_sentences=17"],
     r"^eval.summary_sentences \(17\) is more than the sentences the model reads"),
    ("demo", ["tokenizer.joint=false"],
     r"^model.overrides.share_embeddings needs one vocabulary for source and target"),
    ("sst2_classifier", ["data.labels=[a, a]"], r"^data.labels must be distinct names"),
])
def test_each_task_checks_its_own_keys(config, overrides, message):
    path = CONFIGS / f"{config}.yaml"
    with pytest.raises(ConfigError, match=message):
        load_run_config(path, overrides)
    # The schema alone does not know the task's rules; the task is asked for them.
    config = load_config(path, overrides)
    with pytest.raises(ConfigError, match=message):
        task_class(config.task).check_config(config)


def test_a_rule_of_one_task_is_not_anothers():
    """The same values, in a task whose keys they are not, load: translation reads no
    summary selection, the language model has no second tokenizer, classification no
    copy attention."""
    translation = load_run_config(DEMO, ["eval.summary_sentences=2",
                                         "eval.summary_syllables=30", "data.labels=[a, a]"])
    assert translation.eval.summary_syllables == 30
    lm = load_run_config(CONFIGS / "vi_news_lm.yaml", ["tokenizer.joint=false",
                                                       "model.overrides.share_embeddings=true"])
    assert lm.tokenizer.joint is False


def test_every_task_in_the_registry_has_a_class_with_its_rules():
    from train.tasks.base import Task

    for name in TASKS:
        cls = task_class(name)
        assert issubclass(cls, Task) and callable(cls.check_config), name


def test_a_saved_replica_loss_still_loads_by_its_registered_name():
    """Models saved by a multi-replica TensorFlow run name the loss as the version that kept
    it in train/engine.py wrote it; the name is what Keras looks up."""
    import keras

    from train.losses import ReplicaTokenMeanLoss

    saved = json.loads('{"module": "train.engine", "class_name": "ReplicaTokenMeanLoss", '
                       '"config": {"name": "label_smoothed_cross_entropy", "reduction": '
                       '"sum_over_batch_size", "label_smoothing": 0.1, "pad_id": 0}, '
                       '"registered_name": "train>ReplicaTokenMeanLoss"}')
    loss = keras.saving.deserialize_keras_object(saved)
    assert type(loss) is ReplicaTokenMeanLoss
    assert (loss.label_smoothing, loss.pad_id) == (0.1, 0)
    assert keras.saving.get_registered_name(ReplicaTokenMeanLoss) == saved["registered_name"]
