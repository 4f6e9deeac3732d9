"""The encoder of section 3.1: N identical layers of self-attention and feed-forward."""

import keras

from keras_transformer.layers.add_norm import AddNorm
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.masks import expand_key_mask
from keras_transformer.layers.stack import LayerStack


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(keras.layers.Layer):
    """x (B,S,d_model), padding_mask (B,S) bool -> (B,S,d_model): self-attention, then FFN.

    Args:
        d_model: int. Width of the input and output.
        num_heads: int. Attention heads; must divide `d_model`.
        d_ff: int. Inner width of the feed-forward network.
        dropout: float. Residual dropout rate, on each sub-layer's output; defaults to `0.1`.
        attention_dropout: float. Dropout rate on the attention weights; defaults to `0.0`.
        pre_norm: bool. `False` (the default) for the paper's post-LN residuals, `True` for
            pre-LN (see `AddNorm`).
        epsilon: float. LayerNorm epsilon; defaults to `1e-6`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        x: (B, S, d_model) float.
        padding_mask: optional (B, S) bool, True at real tokens.
        training: bool, whether dropout is active.
        return_attention_scores: bool; when True the call returns (output, weights
            (B, H, S, S)).

    Example:

    ```python
    layer = EncoderLayer(d_model=512, num_heads=8, d_ff=2048)
    y = layer(keras.ops.ones((2, 10, 512)), padding_mask=keras.ops.ones((2, 10), "bool"))
    ```
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, pre_norm: bool = False, epsilon: float = 1e-6,
                 **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.pre_norm = pre_norm
        self.epsilon = epsilon
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(num_heads, d_model, attention_dropout,
                                                 dtype=policy, name="self_attention")
        self.attention_norm = AddNorm(d_model, dropout, pre_norm, epsilon, dtype=policy,
                                      name="self_attention_add_norm")
        self.feed_forward = FeedForward(d_model, d_ff, dropout, dtype=policy, name="feed_forward")
        self.feed_forward_norm = AddNorm(d_model, dropout, pre_norm, epsilon, dtype=policy,
                                         name="feed_forward_add_norm")

    def build(self, x_shape=None):
        for layer in (self.self_attention, self.attention_norm, self.feed_forward,
                      self.feed_forward_norm):
            layer.build((None, None, self.d_model))
        self.built = True

    def call(self, x, padding_mask=None, training=None, return_attention_scores=False):
        h = self.attention_norm.normalize_input(x)
        attended, weights = self.self_attention(h, h, expand_key_mask(padding_mask), training=training,
                                                return_attention_scores=True)
        x = self.attention_norm(x, attended, training=training)
        h = self.feed_forward_norm.normalize_input(x)
        x = self.feed_forward_norm(x, self.feed_forward(h, training=training), training=training)
        return (x, weights) if return_attention_scores else x

    def compute_output_shape(self, x_shape):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, num_heads=self.num_heads, d_ff=self.d_ff,
                      dropout=self.dropout, attention_dropout=self.attention_dropout,
                      pre_norm=self.pre_norm, epsilon=self.epsilon)
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(LayerStack):
    """Embedded source (B,S,d_model), padding_mask (B,S) bool -> memory (B,S,d_model).

    A stack of `num_layers` `EncoderLayer`s; with `pre_norm` a final LayerNorm follows it.

    Args:
        num_layers: int. Number of `EncoderLayer`s (the paper's N).
        d_model: int. Width of the input and output.
        num_heads: int. Attention heads; must divide `d_model`.
        d_ff: int. Inner width of the feed-forward networks.
        dropout: float. Residual dropout rate; defaults to `0.1`.
        attention_dropout: float. Dropout rate on the attention weights; defaults to `0.0`.
        pre_norm: bool. `False` (the default) for post-LN, `True` for pre-LN.
        epsilon: float. LayerNorm epsilon; defaults to `1e-6`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        x: (B, S, d_model) float, the embedded source.
        padding_mask: optional (B, S) bool, True at real tokens.
        training: bool, whether dropout is active.
        return_attention_scores: bool; when True the call returns (memory, a list of
            `num_layers` weights (B, H, S, S)).

    Example:

    ```python
    encoder = Encoder(num_layers=6, d_model=512, num_heads=8, d_ff=2048)
    memory = encoder(keras.ops.ones((2, 10, 512)))  # (2, 10, 512)
    ```
    """

    layer_class = EncoderLayer
    layers_attribute = "encoder_layers"

    def call(self, x, padding_mask=None, training=None, return_attention_scores=False):
        all_weights = []
        for layer in self.encoder_layers:
            x, weights = layer(x, padding_mask, training=training, return_attention_scores=True)
            all_weights.append(weights)
        x = self._close(x)
        return (x, all_weights) if return_attention_scores else x
