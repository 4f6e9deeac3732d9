import keras
import numpy as np
import pytest

from keras_transformer.losses import ClassWeightedCrossEntropy, MaskedLabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.schedules import TransformerSchedule
from tests.reference import label_smoothed_loss, transformer_lr

pytestmark = pytest.mark.usefixtures("seeded")


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_label_smoothed_loss_matches_reference(epsilon):
    rng = np.random.default_rng(0)
    labels = rng.integers(1, 11, size=(3, 5))
    labels[0, 3:] = 0
    labels[2, 1:] = 0
    logits = rng.normal(size=(3, 5, 11)).astype("float32") * 3
    loss = MaskedLabelSmoothedCrossEntropy(epsilon)(labels, logits)
    assert float(loss) == pytest.approx(label_smoothed_loss(labels, logits, epsilon), rel=1e-5)


def test_zero_smoothing_is_sparse_cross_entropy_on_real_tokens():
    rng = np.random.default_rng(1)
    labels = np.array([[3, 4, 0, 0]])
    logits = rng.normal(size=(1, 4, 6)).astype("float32")
    expected = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
        labels[:, :2], logits[:, :2])
    actual = MaskedLabelSmoothedCrossEntropy(0.0)(labels, logits)
    assert float(actual) == pytest.approx(float(expected), rel=1e-5)


def test_padding_does_not_change_the_loss():
    rng = np.random.default_rng(2)
    labels = rng.integers(1, 8, size=(2, 4))
    logits = rng.normal(size=(2, 4, 8)).astype("float32")
    loss_fn = MaskedLabelSmoothedCrossEntropy(0.1)
    padded_labels = np.pad(labels, ((0, 0), (0, 3)))
    padded_logits = np.concatenate([logits, rng.normal(size=(2, 3, 8)).astype("float32")], 1)
    assert float(loss_fn(padded_labels, padded_logits)) == pytest.approx(
        float(loss_fn(labels, logits)), rel=1e-6)


def test_masked_accuracy():
    labels = np.array([[1, 2, 3, 0], [2, 2, 0, 0]])
    predicted = np.array([[1, 0, 3, 3], [2, 1, 1, 1]])
    logits = np.eye(4, dtype="float32")[predicted]
    metric = MaskedAccuracy()
    metric.update_state(labels, logits)
    assert float(metric.result()) == pytest.approx(3 / 5)
    metric.reset_state()
    assert float(metric.result()) == 0.0


@pytest.mark.parametrize("d_model,warmup", [(512, 4000), (128, 100)])
def test_schedule_matches_formula(d_model, warmup):
    schedule = TransformerSchedule(d_model, warmup)
    for step in (1, 10, warmup // 2, warmup - 1, warmup, 2 * warmup, 10 * warmup):
        # The optimizer's iteration counter starts at 0 for the paper's step_num 1.
        assert float(schedule(step - 1)) == pytest.approx(transformer_lr(step, d_model, warmup),
                                                          rel=1e-5)


def test_schedule_peaks_at_warmup_and_serializes():
    schedule = TransformerSchedule(512, 4000, scale=2.0)
    values = [float(schedule(s)) for s in range(0, 8000, 50)]
    assert int(np.argmax(values)) * 50 == pytest.approx(4000, abs=50)
    clone = TransformerSchedule.from_config(schedule.get_config())
    assert float(clone(123)) == float(schedule(123))
    optimizer = keras.optimizers.Adam(schedule)
    restored = keras.optimizers.Adam.from_config(optimizer.get_config())
    assert float(restored.learning_rate) == pytest.approx(float(schedule(0)))


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
