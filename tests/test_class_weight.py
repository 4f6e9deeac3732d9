"""training.class_weight: the class-weighted loss against NumPy's formula and against
Keras' own model.fit(class_weight=...), the weights a setting gives, the config's refusals,
and a classifier run that trains with them."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from keras_transformer.losses import ClassWeightedCrossEntropy
from tests.classifier_run import NAMES, data_dir, run_sets  # noqa: F401  (a fixture)
from train.config import ConfigError, load_config
from train.tasks.classification import class_weights

pytestmark = pytest.mark.usefixtures("seeded")


def numpy_loss(labels, logits, weights):
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    nll = -log_probs[np.arange(len(labels)), labels]
    return float(np.mean(np.asarray(weights)[labels] * nll))


def test_loss_is_the_weighted_mean_and_keras_sample_weights():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, size=7)
    logits = rng.normal(size=(7, 3)).astype("float32") * 3
    weights = [0.5, 4.0, 1.5]
    loss = float(ClassWeightedCrossEntropy(weights)(labels, logits))
    assert loss == pytest.approx(numpy_loss(labels, logits, weights), rel=1e-5)
    keras_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
        labels, logits, sample_weight=np.asarray(weights)[labels])
    assert loss == pytest.approx(float(keras_loss), rel=1e-5)
    # Equal weights of 1: plain cross-entropy.
    plain = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits)
    assert float(ClassWeightedCrossEntropy([1.0] * 3)(labels, logits)) == pytest.approx(
        float(plain), rel=1e-5)


def test_a_fit_step_equals_keras_class_weight():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 5)).astype("float32")
    y = rng.integers(0, 3, size=16)
    weights = [0.7, 3.0, 1.2]

    def trained(loss, **fit):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
        model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False, **fit)
        return model.get_weights()

    ours = trained(ClassWeightedCrossEntropy(weights))
    theirs = trained(keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     class_weight=dict(enumerate(weights)))
    unweighted = trained(keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(ours[0], unweighted[0], atol=1e-4)


def test_loss_round_trips_and_refuses_bad_weights():
    loss = ClassWeightedCrossEntropy([1, 2.5])
    again = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(again, ClassWeightedCrossEntropy)
    assert again.class_weights == [1.0, 2.5]
    with pytest.raises(ValueError, match="positive"):
        ClassWeightedCrossEntropy([1.0, 0.0])


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
