"""Add & Norm (section 3.1): the residual connection around every sub-layer, with LayerNorm.

post-LN (the paper): LayerNorm(x + Dropout(Sublayer(x)))
pre-LN (an option that trains deep stacks without warm-up): x + Dropout(Sublayer(LayerNorm(x)))
"""

import keras

from keras_transformer.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_transformer")
class AddNorm(keras.layers.Layer):
    """Residual + LayerNorm around one sub-layer; `normalize_input` then `call(x, sublayer_out)`.

    Args:
        d_model: int. Width of the residual stream.
        dropout: float. Dropout rate on the sub-layer's output; defaults to `0.0`.
        pre_norm: bool. `False` (the default) for post-LN, `True` for pre-LN.
        epsilon: float. LayerNorm epsilon; defaults to `1e-6`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Example:

    ```python
    add_norm, ffn = AddNorm(d_model=512), FeedForward(d_model=512, d_ff=2048)
    y = add_norm(x, ffn(add_norm.normalize_input(x)))
    ```
    """

    def __init__(self, d_model: int, dropout: float = 0.0, pre_norm: bool = False,
                 epsilon: float = 1e-6, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.dropout = dropout
        self.pre_norm = pre_norm
        self.epsilon = epsilon
        self.norm = keras.layers.LayerNormalization(epsilon=epsilon, dtype=self.dtype_policy,
                                                    name="norm")
        self.dropout_layer = Dropout(dropout, dtype=self.dtype_policy)

    def build(self, x_shape=None, sublayer_output_shape=None):
        self.norm.build((None, None, self.d_model))
        self.built = True

    def normalize_input(self, x):
        """What the sub-layer reads: LayerNorm(x) for pre-LN, x itself for post-LN."""
        return self.norm(x) if self.pre_norm else x

    def call(self, x, sublayer_output, training=None):
        y = x + self.dropout_layer(sublayer_output, training=training)
        return y if self.pre_norm else self.norm(y)

    def compute_output_shape(self, x_shape, sublayer_output_shape=None):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, dropout=self.dropout, pre_norm=self.pre_norm,
                      epsilon=self.epsilon)
        return config
