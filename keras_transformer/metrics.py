"""Token accuracy that ignores padding."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.Metric):
    """(labels (B,T) int, logits (B,T,V)) -> fraction of non-pad tokens whose argmax is right.

    Args:
        pad_id: int. Label id left out of the count; defaults to `0`.
        name: str. The metric's name; defaults to `"masked_accuracy"`.
        **kwargs: other `keras.metrics.Metric` arguments (`dtype`).

    Example:

    ```python
    metric = MaskedAccuracy(pad_id=0)
    metric.update_state(np.array([[5, 0]]), np.eye(8)[None, [5, 1]])
    metric.result()  # 1.0: the padded position is not counted
    ```
    """

    def __init__(self, pad_id: int = 0, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.correct = self.add_variable(shape=(), initializer="zeros", name="correct")
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        mask = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        if sample_weight is not None:
            mask = mask * ops.cast(sample_weight, "float32")
        hits = ops.cast(ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), y_true),
                        "float32")
        self.correct.assign_add(ops.sum(hits * mask))
        self.total.assign_add(ops.sum(mask))

    def result(self):
        return self.correct / ops.maximum(self.total, 1.0)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)

    def get_config(self):
        config = super().get_config()
        config["pad_id"] = self.pad_id
        return config
