"""eval.tune_class_bias (train/class_bias.py): the macro-F1 it maximises against
train.scoring's, the offsets it chooses for an under-predicted class, the held-out check that
keeps or drops them, and a classifier run whose model.keras carries them in its head's bias."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from tests.classifier_run import NAMES, data_dir, run_sets  # noqa: F401  (a fixture)
from train import class_bias
from train.config import ConfigError, load_config
from train.scoring import classification_scores

pytestmark = pytest.mark.usefixtures("seeded")


def rare_class_logits(n=3000, shift=-1.5, seed=0):
    """Three classes, the middle one rare (10%), its logit pushed down by `shift`: a model
    that predicts it too seldom."""
    rng = np.random.default_rng(seed)
    gold = rng.choice(3, size=n, p=[0.45, 0.1, 0.45])
    logits = 2.0 * np.eye(3)[gold] + rng.normal(0, 1.0, size=(n, 3))
    logits[:, 1] += shift
    return logits, gold


def test_macro_f1_is_the_scoring_modules():
    rng = np.random.default_rng(1)
    for _ in range(20):
        gold = rng.integers(0, 4, size=50)
        predicted = rng.integers(0, 3, size=50)  # class 3 never predicted
        expected = classification_scores(gold, predicted, ["a", "b", "c", "d"])["macro_f1"]
        assert round(100 * class_bias.macro_f1(gold, predicted, 4), 2) == expected


def test_an_under_predicted_class_gets_a_positive_offset_at_a_coordinate_optimum():
    logits, gold = rare_class_logits()
    offsets = class_bias.choose_offsets(logits, gold)
    assert offsets[0] == 0 and offsets[1] > 0.5
    before = class_bias.macro_f1(gold, logits.argmax(1), 3)
    after = class_bias.macro_f1(gold, (logits + offsets).argmax(1), 3)
    assert after > before + 0.02
    # No single offset of one class (the others held) does better.
    for c in (1, 2):
        for value in class_bias.GRID:
            trial = offsets.copy()
            trial[c] = value
            assert class_bias.macro_f1(gold, (logits + trial).argmax(1), 3) <= after + 1e-12


def test_offsets_that_help_held_out_halves_are_kept_and_none_are_invented():
    logits, gold = rare_class_logits()
    result = class_bias.tune(logits, gold)
    assert result["kept"] and result["offsets"] == result["chosen_offsets"]
    assert result["held_out_tuned"] > result["held_out_untuned"]
    assert result["dev_macro_f1_tuned"] > result["dev_macro_f1_untuned"]
    # Logits that already separate the classes: nothing to gain, nothing applied.
    gold = np.arange(300) % 3
    result = class_bias.tune(5.0 * np.eye(3)[gold], gold)
    assert not result["kept"] and result["offsets"] == [0.0, 0.0, 0.0]
    assert result["dev_macro_f1_untuned"] == result["dev_macro_f1_tuned"] == 100.0


def test_config_refuses_it_for_another_task_in_one_line():
    with pytest.raises(ConfigError, match="for task classification") as err:
        load_config(None, ["task=translation", "eval.tune_class_bias=true"])
    assert "\n" not in str(err.value)


def test_a_run_saves_the_moved_bias_and_scores_with_it(data_dir, tmp_path):  # noqa: F811
    from train.run import run

    sets = [*run_sets(data_dir), "training.epochs=1", "training.steps_per_epoch=4",
            "training.final_model=best", "eval.tune_class_bias=true"]
    out = tmp_path / "run"
    run(load_config(None, sets), out)
    metrics = json.loads((out / "metrics.json").read_text("utf-8"))
    chosen = metrics["class_bias"]
    assert chosen["classes"] == NAMES
    final = keras.saving.load_model(out / "model.keras")
    best = keras.saving.load_model(out / "best.keras")
    moved = np.asarray(final.head.bias) - np.asarray(best.head.bias)
    np.testing.assert_allclose(moved, chosen["offsets"], atol=1e-6)
    assert np.allclose(final.head.kernel, best.head.kernel)
    if chosen["kept"]:  # the scores before the move are recorded beside those after
        assert set(metrics["test_before_class_bias"]) == {"accuracy", "macro_f1", "f1"}
    else:
        assert "test_before_class_bias" not in metrics
