"""Scaled dot-product attention (section 3.2.1), multi-head attention (3.2.2) and the
attention of one new position over the key/value cache of incremental decoding.
"""

import math

import keras
from keras import ops

from keras_transformer.layers.dropout import Dropout

# Large enough that exp() underflows to exactly 0 in float32, small enough to stay finite.
MASKED_LOGIT = -1e9


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None, training=None):
    """q (B,H,Tq,dk), k (B,H,Tk,dk), v (B,H,Tk,dv), bool mask ~(B,H,Tq,Tk) -> (B,H,Tq,dv), weights (B,H,Tq,Tk).

    softmax(Q K^T / sqrt(d_k)) V, with masked positions given zero weight.
    """
    query = ops.multiply(query, ops.cast(1.0 / math.sqrt(query.shape[-1]), query.dtype))
    logits = ops.einsum("bhqd,bhkd->bhqk", query, key)
    # Softmax in float32 so that mixed precision does not lose the small weights.
    logits = ops.cast(logits, "float32")
    if mask is not None:
        logits = ops.where(mask, logits, MASKED_LOGIT)
    if logits.shape[-1] == 1:
        # One key (a one-sentence article between sentences): its weight is 1, which
        # ops.softmax would return too, with a warning that it always does.
        weights = ops.ones_like(logits, dtype=value.dtype)
    else:
        weights = ops.cast(ops.softmax(logits, axis=-1), value.dtype)
    if dropout is not None:
        weights = dropout(weights, training=training)
    return ops.einsum("bhqk,bhkd->bhqd", weights, value), weights


def attention_with_new_position(query, cache_keys, cache_values, key, value, index):
    """q (B,H,1,dk), cache k/v (B,H,T,dk), new k/v (B,H,1,dk), index () -> (B,H,1,dk).

    One decoding step: the query attends to cache slots 0..index-1 and to its own new
    key/value, which are not in the cache yet. The cache is only read here, so a runtime can
    keep it outside the graph and write one slot per step (keras_transformer.cache).
    """
    query = ops.multiply(query, ops.cast(1.0 / math.sqrt(query.shape[-1]), query.dtype))
    cached = ops.cast(ops.einsum("bhqd,bhkd->bhqk", query, cache_keys), "float32")
    # reshape, not [None, None, None, :]: TFLite has no bool StridedSlice.
    earlier = ops.reshape(ops.less(ops.arange(ops.shape(cache_keys)[2]), index), (1, 1, 1, -1))
    cached = ops.where(earlier, cached, MASKED_LOGIT)
    own = ops.cast(ops.sum(query * key, axis=-1, keepdims=True), "float32")
    weights = ops.softmax(ops.concatenate([cached, own], axis=-1), axis=-1)
    weights = ops.cast(weights, cache_values.dtype)
    return (ops.einsum("bhqk,bhkd->bhqd", weights[..., :-1], cache_values)
            + weights[..., -1:] * value)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """query (B,Tq,d_model), value (B,Tk,d_model), bool mask ~(B,1,Tq,Tk) -> (B,Tq,d_model).

    MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V);
    the h projections of each kind are one Dense of width d_model, split into heads afterwards.

    Args:
        num_heads: int. Number of heads h; must divide `d_model`.
        d_model: int. Width of the queries, keys, values and output; each head gets
            d_model / num_heads dimensions.
        dropout: float. Dropout rate on the attention weights; defaults to `0.0`.
        use_bias: bool. Whether the four projections have biases; defaults to `True`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: (B, Tq, d_model) float.
        value: optional (B, Tk, d_model) float, the keys' and values' source; defaults to
            `query` (self-attention).
        attention_mask: optional bool, broadcastable to (B, H, Tq, Tk), True where a query may
            attend.
        training: bool, whether dropout is active.
        return_attention_scores: bool; when True the call returns (output, weights
            (B, H, Tq, Tk)).

    Example:

    ```python
    attention = MultiHeadAttention(num_heads=8, d_model=512)
    y = attention(x, memory)  # x (B, Tq, 512) attends over memory (B, Tk, 512)
    ```
    """

    def __init__(self, num_heads: int, d_model: int, dropout: float = 0.0, use_bias: bool = True,
                 **kwargs):
        super().__init__(**kwargs)
        if d_model % num_heads:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by num_heads ({num_heads})"
            )
        self.num_heads = num_heads
        self.d_model = d_model
        self.head_dim = d_model // num_heads
        self.dropout = dropout
        self.use_bias = use_bias

        def dense(name):
            return keras.layers.Dense(d_model, use_bias=use_bias, dtype=self.dtype_policy,
                                      kernel_initializer="glorot_uniform", name=name)

        self.query_dense = dense("query")
        self.key_dense = dense("key")
        self.value_dense = dense("value")
        self.output_dense = dense("output")
        self.dropout_layer = Dropout(dropout, dtype=self.dtype_policy)

    def build(self, query_shape=None, value_shape=None):
        for layer in (self.query_dense, self.key_dense, self.value_dense, self.output_dense):
            layer.build((None, None, self.d_model))
        self.built = True

    def split_heads(self, x):
        """(B, T, d_model) -> (B, H, T, head_dim)."""
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, self.num_heads, self.head_dim))
        return ops.transpose(x, (0, 2, 1, 3))

    def merge_heads(self, x):
        """(B, H, T, head_dim) -> (B, T, d_model)."""
        batch, length = ops.shape(x)[0], ops.shape(x)[2]
        return ops.reshape(ops.transpose(x, (0, 2, 1, 3)), (batch, length, self.d_model))

    def project_key_value(self, value):
        """(B, Tk, d_model) -> keys, values, each (B, Tk, d_model) before the head split."""
        return self.key_dense(value), self.value_dense(value)

    def key_value_heads(self, value):
        """(B, Tk, d_model) -> keys, values, each split into heads (B, H, Tk, head_dim)."""
        keys, values = self.project_key_value(value)
        return self.split_heads(keys), self.split_heads(values)

    def attend(self, query, keys, values, attention_mask=None, training=None,
               return_attention_scores=False):
        """Attention of query (B,Tq,d_model) over projected keys/values split into heads
        (B,H,Tk,head_dim)."""
        q = self.split_heads(self.query_dense(query))
        out, weights = scaled_dot_product_attention(
            q, keys, values, attention_mask,
            dropout=self.dropout_layer if self.dropout else None, training=training,
        )
        out = self.output_dense(self.merge_heads(out))
        if return_attention_scores:
            return out, weights
        return out

    def call(self, query, value=None, attention_mask=None, training=None,
             return_attention_scores=False):
        keys, values = self.key_value_heads(query if value is None else value)
        return self.attend(query, keys, values, attention_mask, training, return_attention_scores)

    def call_cached(self, query, cache_keys, cache_values, index):
        """Self-attention of one new position at `index`: query (B,1,d_model), cached keys and
        values (B,H,T,head_dim) -> output (B,1,d_model), its key and value (B,1,d_model each).

        The query sees cache slots 0..index-1 and itself; the caller writes the returned
        key/value into slot `index`. The cache is kept split into heads so that a step reads
        it where it lies, without a copy.
        """
        key, value = self.project_key_value(query)
        out = attention_with_new_position(
            self.split_heads(self.query_dense(query)),
            ops.cast(cache_keys, self.compute_dtype), ops.cast(cache_values, self.compute_dtype),
            self.split_heads(key), self.split_heads(value), index)
        return self.output_dense(self.merge_heads(out)), key, value

    def compute_output_shape(self, query_shape, value_shape=None):
        return query_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            d_model=self.d_model,
            dropout=self.dropout,
            use_bias=self.use_bias,
        )
        return config
