"""What the encoder and the decoder of section 3.1 share: N identical layers, then, under
pre-LN, one final LayerNorm."""

import keras


class LayerStack(keras.layers.Layer):
    """x (B,L,d_model) -> (B,L,d_model): `num_layers` layers of `layer_class`, all built with
    the stack's arguments (and `layer_options`), then a LayerNorm when `pre_norm` (pre-LN
    leaves the residual stream unnormalised).

    A subclass names `layer_class` and `layers_attribute`, the attribute that holds the list:
    that name is part of every weight's path in a saved `.keras` file, so a stack keeps it.
    The subclass writes `call`; `_close(x)` applies the final LayerNorm.
    """

    layer_class: type
    layers_attribute: str

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.1, attention_dropout: float = 0.0, pre_norm: bool = False,
                 epsilon: float = 1e-6, layer_options: dict | None = None, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.pre_norm = pre_norm
        self.epsilon = epsilon
        setattr(self, self.layers_attribute, [
            self.layer_class(d_model, num_heads, d_ff, dropout, attention_dropout, pre_norm,
                             epsilon, **(layer_options or {}), dtype=self.dtype_policy,
                             name=f"layer_{i}")
            for i in range(num_layers)
        ])
        self.final_norm = (
            keras.layers.LayerNormalization(epsilon=epsilon, dtype=self.dtype_policy,
                                            name="final_norm")
            if pre_norm else None
        )

    def build(self, x_shape=None):
        for layer in getattr(self, self.layers_attribute):
            layer.build((None, None, self.d_model))
        if self.final_norm is not None:
            self.final_norm.build((None, None, self.d_model))
        self.built = True

    def _close(self, x):
        return x if self.final_norm is None else self.final_norm(x)

    def compute_output_shape(self, x_shape):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, d_model=self.d_model, num_heads=self.num_heads,
                      d_ff=self.d_ff, dropout=self.dropout,
                      attention_dropout=self.attention_dropout, pre_norm=self.pre_norm,
                      epsilon=self.epsilon)
        return config
