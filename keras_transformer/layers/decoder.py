"""The decoder of section 3.1: N layers of masked self-attention, encoder-decoder
(cross) attention and feed-forward; plus the one-position step used at inference.
"""

import keras
from keras import ops

from keras_transformer.cache.layout import slot
from keras_transformer.cache.tensors import init_cache, stack_step, update_cache
from keras_transformer.layers.add_norm import AddNorm
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.masks import causal_mask, expand_key_mask
from keras_transformer.layers.stack import LayerStack


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(keras.layers.Layer):
    """x (B,T,d_model), memory (B,S,d_model), memory_mask (B,S) bool -> (B,T,d_model).

    Masked self-attention (position t sees positions <= t), then cross-attention over the
    encoder's memory (omitted when cross_attention=False, the decoder-only LM), then FFN.

    Args:
        d_model: int. Width of the input and output.
        num_heads: int. Attention heads; must divide `d_model`.
        d_ff: int. Inner width of the feed-forward network.
        dropout: float. Residual dropout rate, on each sub-layer's output; defaults to `0.1`.
        attention_dropout: float. Dropout rate on the attention weights; defaults to `0.0`.
        pre_norm: bool. `False` (the default) for the paper's post-LN residuals, `True` for
            pre-LN (see `AddNorm`).
        epsilon: float. LayerNorm epsilon; defaults to `1e-6`.
        cross_attention: bool. Whether the layer attends over an encoder's memory; defaults
            to `True`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Example:

    ```python
    layer = DecoderLayer(d_model=512, num_heads=8, d_ff=2048)
    y = layer(x, memory, memory_mask)  # x (B, T, 512), memory (B, S, 512), mask (B, S)
    ```
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, pre_norm: bool = False, epsilon: float = 1e-6,
                 cross_attention: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.pre_norm = pre_norm
        self.epsilon = epsilon
        self.cross_attention = cross_attention
        policy = self.dtype_policy

        def add_norm(name):
            return AddNorm(d_model, dropout, pre_norm, epsilon, dtype=policy, name=name)

        self.self_attention = MultiHeadAttention(num_heads, d_model, attention_dropout,
                                                 dtype=policy, name="self_attention")
        self.self_attention_norm = add_norm("self_attention_add_norm")
        if cross_attention:
            self.cross_attention_layer = MultiHeadAttention(
                num_heads, d_model, attention_dropout, dtype=policy, name="cross_attention")
            self.cross_attention_norm = add_norm("cross_attention_add_norm")
        self.feed_forward = FeedForward(d_model, d_ff, dropout, dtype=policy, name="feed_forward")
        self.feed_forward_norm = add_norm("feed_forward_add_norm")

    def _sublayers(self):
        layers = [self.self_attention, self.self_attention_norm, self.feed_forward,
                  self.feed_forward_norm]
        if self.cross_attention:
            layers += [self.cross_attention_layer, self.cross_attention_norm]
        return layers

    def build(self, x_shape=None, memory_shape=None):
        for layer in self._sublayers():
            layer.build((None, None, self.d_model))
        self.built = True

    def _cross_and_feed_forward(self, x, cross_keys, cross_values, memory_mask, training):
        """-> x, the cross-attention weights (B,H,T,S) and its output before the residual
        (B,T,d_model), the context copy attention reads (both None without cross-attention)."""
        weights = attended = None
        if self.cross_attention:
            h = self.cross_attention_norm.normalize_input(x)
            attended, weights = self.cross_attention_layer.attend(
                h, cross_keys, cross_values, expand_key_mask(memory_mask), training=training,
                return_attention_scores=True)
            x = self.cross_attention_norm(x, attended, training=training)
        h = self.feed_forward_norm.normalize_input(x)
        x = self.feed_forward_norm(x, self.feed_forward(h, training=training), training=training)
        return x, weights, attended

    def call(self, x, memory=None, memory_mask=None, training=None,
             return_attention_scores=False):
        length = ops.shape(x)[1]
        h = self.self_attention_norm.normalize_input(x)
        attended, self_weights = self.self_attention(h, h, causal_mask(length),
                                                     training=training,
                                                     return_attention_scores=True)
        x = self.self_attention_norm(x, attended, training=training)
        cross_keys = cross_values = None
        if self.cross_attention:
            if memory is None:
                raise ValueError("this DecoderLayer has cross-attention and needs `memory`")
            cross_keys, cross_values = self.cross_attention_layer.key_value_heads(memory)
        x, weights, context = self._cross_and_feed_forward(x, cross_keys, cross_values,
                                                           memory_mask, training)
        if return_attention_scores:
            return x, {"self": self_weights, "cross": weights, "context": context}
        return x

    def step(self, x, cache_keys, cache_values, index, cross_keys=None, cross_values=None,
             memory_mask=None, return_cross=False):
        """One new position x (B,1,d_model) at `index`, this layer's cache and cross keys/values
        (B,H,T or S,d_model/H) -> (B,1,d_model), and the position's self-attention key and
        value (B,1,d_model); with return_cross also the cross-attention weights (B,H,1,S) and
        context (B,1,d_model)."""
        h = self.self_attention_norm.normalize_input(x)
        attended, key, value = self.self_attention.call_cached(h, cache_keys, cache_values,
                                                               index)
        x = self.self_attention_norm(x, attended)
        x, weights, context = self._cross_and_feed_forward(x, cross_keys, cross_values,
                                                           memory_mask, False)
        if return_cross:
            return x, key, value, (weights, context)
        return x, key, value

    def compute_output_shape(self, x_shape, memory_shape=None):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, num_heads=self.num_heads, d_ff=self.d_ff,
                      dropout=self.dropout, attention_dropout=self.attention_dropout,
                      pre_norm=self.pre_norm, epsilon=self.epsilon,
                      cross_attention=self.cross_attention)
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(LayerStack):
    """Embedded target (B,T,d_model), memory (B,S,d_model), memory_mask (B,S) -> (B,T,d_model).

    A stack of `num_layers` `DecoderLayer`s; with `pre_norm` a final LayerNorm follows it.

    Args:
        num_layers: int. Number of `DecoderLayer`s (the paper's N).
        d_model: int. Width of the input and output.
        num_heads: int. Attention heads; must divide `d_model`.
        d_ff: int. Inner width of the feed-forward networks.
        dropout: float. Residual dropout rate; defaults to `0.1`.
        attention_dropout: float. Dropout rate on the attention weights; defaults to `0.0`.
        pre_norm: bool. `False` (the default) for post-LN, `True` for pre-LN.
        epsilon: float. LayerNorm epsilon; defaults to `1e-6`.
        cross_attention: bool. Whether the layers attend over an encoder's memory; defaults
            to `True` (`False` for a decoder-only language model).
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Example:

    ```python
    decoder = Decoder(num_layers=6, d_model=512, num_heads=8, d_ff=2048)
    hidden = decoder(x, memory, memory_mask)  # (B, T, 512)
    ```
    """

    layer_class = DecoderLayer
    layers_attribute = "decoder_layers"

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.1, attention_dropout: float = 0.0, pre_norm: bool = False,
                 epsilon: float = 1e-6, cross_attention: bool = True, **kwargs):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, attention_dropout,
                         pre_norm, epsilon, layer_options={"cross_attention": cross_attention},
                         **kwargs)
        self.cross_attention = cross_attention

    def call(self, x, memory=None, memory_mask=None, training=None,
             return_attention_scores=False):
        """Teacher forcing: all target positions at once, the causal mask hiding the future.

        With return_attention_scores, also {"self": [per layer (B,H,T,T)], "cross": [per
        layer (B,H,T,S)], "context": [per layer (B,T,d_model)]} ("cross" and "context"
        empty without cross-attention)."""
        weights = {"self": [], "cross": [], "context": []}
        for layer in self.decoder_layers:
            x, layer_weights = layer(x, memory, memory_mask, training=training,
                                     return_attention_scores=True)
            weights["self"].append(layer_weights["self"])
            if layer_weights["cross"] is not None:
                weights["cross"].append(layer_weights["cross"])
                weights["context"].append(layer_weights["context"])
        x = self._close(x)
        return (x, weights) if return_attention_scores else x

    def init_cache(self, batch_size, max_length, dtype="float32"):
        """Self-attention keys and values per layer: zeros [keys_0, values_0, keys_1, ...],
        each (B, H, max_length, d_model/H)."""
        return init_cache(self.num_layers, batch_size, self.num_heads, max_length, self.d_model,
                          dtype)

    def compute_cross_key_values(self, memory):
        """memory (B,S,d_model) -> [keys_0, values_0, keys_1, ...], each (B,H,S,d_model/H),
        computed once per source and read by every step as it lies."""
        return [t for layer in self.decoder_layers
                for t in layer.cross_attention_layer.key_value_heads(memory)]

    def step_key_values(self, x, cache, index, cross_key_values=None, memory_mask=None,
                        return_cross=False):
        """x (B,1,d_model) at position `index`, cache read only -> (B,1,d_model) and the
        position's keys/values (B, layers, 2, d_model), to be written into slot `index`; with
        return_cross also the last layer's cross-attention weights (B,H,1,S) and context
        (B,1,d_model)."""
        rows, cross = [], None
        for i, layer in enumerate(self.decoder_layers):
            keys, values = slot(i, 0), slot(i, 1)
            cross_keys = cross_values = None
            if cross_key_values is not None:
                cross_keys = ops.cast(cross_key_values[keys], self.compute_dtype)
                cross_values = ops.cast(cross_key_values[values], self.compute_dtype)
            x, key, value, cross = layer.step(x, cache[keys], cache[values], index, cross_keys,
                                              cross_values, memory_mask, return_cross=True)
            rows.append((key[:, 0], value[:, 0]))
        if return_cross:
            return self._close(x), stack_step(rows), cross
        return self._close(x), stack_step(rows)

    def step(self, x, cache, index, cross_key_values=None, memory_mask=None):
        """x (B,1,d_model) at position `index` -> (B,1,d_model), cache with slot `index` set."""
        x, step_key_values = self.step_key_values(x, cache, index, cross_key_values, memory_mask)
        return x, update_cache(cache, index, step_key_values)

    def get_config(self):
        return {**super().get_config(), "cross_attention": self.cross_attention}
