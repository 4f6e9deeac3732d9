"""training.class_weight: the weights a setting gives, the config's refusals, and a
classifier run that trains with them (the loss itself: tests/test_losses_schedules.py)."""

from __future__ import annotations

import json

import keras
import pytest

from keras_transformer.losses import ClassWeightedCrossEntropy
from tests.classifier_run import NAMES, data_dir, run_sets  # noqa: F401  (a fixture)
from tests.cli_probe import ROOT, run_cli
from train.config import ConfigError, load_config
from train.tasks.classification import class_weights

pytestmark = pytest.mark.usefixtures("seeded")


def test_balanced_weights_by_hand():
    # 6 sentences, 3 classes of 3, 2 and 1: n / (3 x count) = 2/3, 1, 2.
    assert class_weights("balanced", NAMES, [0, 0, 0, 1, 1, 2]) == pytest.approx(
        [2 / 3, 1.0, 2.0])
    assert class_weights("", NAMES, [0, 1, 2]) is None
    with pytest.raises(ConfigError, match="neutral has none"):
        class_weights("balanced", NAMES, [0, 0, 2])


def test_mapping_by_name_or_id_others_one():
    assert class_weights({"neutral": 3}, NAMES, [0, 1, 2]) == [1.0, 3.0, 1.0]
    assert class_weights({2: 0.5, "0": 2}, NAMES, [0, 1, 2]) == [2.0, 1.0, 0.5]
    with pytest.raises(ConfigError, match="unknown label 'neutrall'"):
        class_weights({"neutrall": 3}, NAMES, [0, 1, 2])


@pytest.mark.parametrize("sets, words", [
    (["task=translation", "training.class_weight=balanced"], "for task classification"),
    (["task=classification", "training.class_weight=heavy"], "balanced or a mapping"),
    (["task=classification", "training.class_weight={neutral: -1}"], "positive number"),
    (["task=classification", "training.class_weight={neutral: .nan}"], "positive number"),
    (["task=classification", "training.class_weight={neutral: true}"], "positive number"),
    (["task=classification", "training.class_weight=[1, 2]"], "balanced or a mapping"),
])
def test_config_refuses_in_one_line(sets, words):
    with pytest.raises(ConfigError, match=words) as err:
        load_config(None, sets)
    assert "\n" not in str(err.value)


def test_a_run_trains_with_the_weights_and_records_them(data_dir, tmp_path):  # noqa: F811
    from train.run import run

    sets = [*run_sets(data_dir), "training.epochs=1", "training.steps_per_epoch=3",
            "training.class_weight=balanced"]
    out = tmp_path / "run"
    run(load_config(None, sets), out)
    labels = (data_dir / "train" / "sentiments.txt").read_text("utf-8").split()
    counts = [labels.count(name) for name in NAMES]
    expected = {name: len(labels) / (3 * count) for name, count in zip(NAMES, counts, strict=True)}
    recorded = json.loads((out / "metrics.json").read_text("utf-8"))["class_weights"]
    assert recorded == pytest.approx(expected)
    model = keras.saving.load_model(out / "model.keras")
    assert isinstance(model.loss, ClassWeightedCrossEntropy)
    assert model.loss.class_weights == pytest.approx([expected[n] for n in NAMES])


def test_a_run_refused_over_its_data_leaves_no_run_behind(data_dir, tmp_path):  # noqa: F811
    # The label is matched when the data is read, after the run directory was claimed: the
    # corrected command must then start afresh, not meet a "run of another config".
    out = tmp_path / "run"

    def train(weight: str):
        sets = [*run_sets(data_dir), "training.epochs=1", f"training.class_weight={weight}"]
        return run_cli("train", "--config", str(ROOT / "train/configs/uit_vsfc_sentiment.yaml"),
                       "--out", str(out), *[x for s in sets for x in ("--set", s)])

    bad = train("{neutrall: 2}")
    assert bad.code == 2 and "unknown label 'neutrall'" in bad.stderr, bad.stderr[-800:]
    assert not out.exists()
    out.mkdir()  # a folder of the user's, empty: kept, as it was
    assert train("{neutrall: 2}").code == 2 and out.is_dir() and not any(out.iterdir())
    good = train("{neutral: 2}")
    assert good.code == 0, good.stderr[-800:]
    assert json.loads((out / "metrics.json").read_text())["class_weights"] == {
        "negative": 1.0, "neutral": 2.0, "positive": 1.0}
