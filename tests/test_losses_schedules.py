import keras
import numpy as np
import pytest

from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
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
