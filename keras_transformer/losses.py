"""Label-smoothed cross-entropy over the non-padding target tokens (section 5.4), binary
cross-entropy over an article's real sentences (the extractive summarizer), and a classifier's
cross-entropy weighted by class."""

import keras
from keras import ops


def label_smoothed_nll(labels, logits, epsilon: float, pad_id: int = 0):
    """labels (B,T) int, logits (B,T,V) -> (per-token loss (B,T), token mask (B,T) float).

    The target distribution puts 1 - epsilon on the label and epsilon / V on every class
    (the label included), as Keras' `label_smoothing` does for categorical cross-entropy.
    """
    logits = ops.cast(logits, "float32")
    log_probs = ops.log_softmax(logits, axis=-1)
    labels = ops.cast(labels, "int32")
    nll = -ops.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    uniform = -ops.mean(log_probs, axis=-1)
    loss = (1.0 - epsilon) * nll + epsilon * uniform
    mask = ops.cast(ops.not_equal(labels, pad_id), "float32")
    return loss * mask, mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedLabelSmoothedCrossEntropy(keras.losses.Loss):
    """(labels (B,T) int, logits (B,T,V)) -> scalar: mean smoothed CE over tokens != pad_id.

    Any leading shape works: (B,) labels with (B, C) logits give a classification loss.

    Args:
        label_smoothing: float in [0, 1). The epsilon of section 5.4; defaults to `0.1`.
        pad_id: int. Label id left out of the loss and of the token count; defaults to `0`.
        name: str. The loss's name; defaults to `"label_smoothed_cross_entropy"`.
        **kwargs: other `keras.losses.Loss` arguments.

    Example:

    ```python
    model.compile(optimizer="adam", loss=MaskedLabelSmoothedCrossEntropy(0.1, pad_id=0))
    ```
    """

    def __init__(self, label_smoothing: float = 0.1, pad_id: int = 0,
                 name="label_smoothed_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def call(self, y_true, y_pred):
        loss, mask = label_smoothed_nll(y_true, y_pred, self.label_smoothing, self.pad_id)
        # A scalar per batch: averaging over real tokens, not over (B, T) padded slots.
        return ops.sum(loss) / ops.maximum(ops.sum(mask), 1.0)

    def get_config(self):
        config = super().get_config()
        config.update(label_smoothing=self.label_smoothing, pad_id=self.pad_id)
        return config


def sentence_bce(labels, logits):
    """labels (B,K) float, 1 or 0 at real sentences and -1 at padding rows, logits (B,K) ->
    (per-sentence binary cross-entropy (B,K), sentence mask (B,K) float).

    max(x, 0) - x y + log(1 + exp(-|x|)): -y log sigmoid(x) - (1 - y) log(1 - sigmoid(x)),
    without overflow for a logit of any size."""
    logits = ops.cast(logits, "float32")
    labels = ops.cast(labels, "float32")
    mask = ops.cast(ops.greater_equal(labels, 0.0), "float32")
    targets = labels * mask
    loss = (ops.maximum(logits, 0.0) - logits * targets
            + ops.log1p(ops.exp(-ops.abs(logits))))
    return loss * mask, mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedSentenceCrossEntropy(keras.losses.Loss):
    """(labels (B,K) float, logits (B,K)) -> scalar: the mean binary cross-entropy over the
    real sentences (labels 1 or 0); padding rows (label -1) are left out of loss and count.
    The loss of TransformerExtractor, whose labels say which sentences a summary takes.

    Example:

    ```python
    model.compile(optimizer="adam", loss=MaskedSentenceCrossEntropy())
    ```
    """

    def __init__(self, name="sentence_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        loss, mask = sentence_bce(y_true, y_pred)
        return ops.sum(loss) / ops.maximum(ops.sum(mask), 1.0)


@keras.saving.register_keras_serializable(package="keras_transformer")
class ClassWeightedCrossEntropy(keras.losses.Loss):
    """(labels (B,) int, logits (B,C)) -> per-sentence cross-entropy times its class's weight,
    which the loss's reduction averages over the batch: what `model.fit(class_weight=...)`
    computes, held in the loss so that it works on every input path and strategy.

    Args:
        class_weights: list of C positive floats, the weight of each class id.
        name: str. The loss's name; defaults to `"class_weighted_cross_entropy"`.
        **kwargs: other `keras.losses.Loss` arguments.

    Example:

    ```python
    model.compile(optimizer="adam", loss=ClassWeightedCrossEntropy([0.6, 7.6, 0.6]))
    ```
    """

    def __init__(self, class_weights, name="class_weighted_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.class_weights = [float(w) for w in class_weights]
        if not self.class_weights or min(self.class_weights) <= 0:
            raise ValueError(f"class_weights must be positive numbers, got {class_weights}")

    def call(self, y_true, y_pred):
        labels = ops.cast(ops.reshape(y_true, (-1,)), "int32")
        # No smoothing, and no label is padding (-1 never is one): the plain NLL per sentence.
        nll, _ = label_smoothed_nll(labels, y_pred, 0.0, pad_id=-1)
        return nll * ops.take(ops.convert_to_tensor(self.class_weights), labels)

    def get_config(self):
        config = super().get_config()
        config.update(class_weights=self.class_weights)
        return config
