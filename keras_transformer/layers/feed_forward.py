"""Position-wise feed-forward network of section 3.3: FFN(x) = max(0, x W1 + b1) W2 + b2."""

import keras

from keras_transformer.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_transformer")
class FeedForward(keras.layers.Layer):
    """(B, T, d_model) -> (B, T, d_model), the same two-layer ReLU network at every position.

    Args:
        d_model: int. Width of the input and output.
        d_ff: int. Width of the inner ReLU layer.
        dropout: float. Dropout rate on the inner activations; defaults to `0.0`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Example:

    ```python
    ffn = FeedForward(d_model=512, d_ff=2048)
    y = ffn(keras.ops.ones((2, 10, 512)))  # (2, 10, 512)
    ```
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.d_ff = d_ff
        self.dropout = dropout
        self.inner = keras.layers.Dense(d_ff, activation="relu", dtype=self.dtype_policy,
                                        name="inner")
        self.dropout_layer = Dropout(dropout, dtype=self.dtype_policy)
        self.outer = keras.layers.Dense(d_model, dtype=self.dtype_policy, name="outer")

    def build(self, input_shape=None):
        self.inner.build((None, None, self.d_model))
        self.outer.build((None, None, self.d_ff))
        self.built = True

    def call(self, x, training=None):
        return self.outer(self.dropout_layer(self.inner(x), training=training))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, d_ff=self.d_ff, dropout=self.dropout)
        return config
