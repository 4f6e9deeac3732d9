"""Copy attention (the pointer-generator of See et al. 2017) for an encoder-decoder with one
vocabulary: the output distribution mixes the vocabulary softmax with the decoder's attention
over the source, put on the source's own token ids,

    p(w) = (1 - g) * softmax(logits)(w) + g * sum_{i: source_i = w} a_i,

with the gate g = sigmoid(W [decoder state; context; input embedding] + b) per position.
"""

import keras
from keras import ops


def copy_distribution(attention, source_ids, vocab_size: int):
    """attention (..., S) over source_ids (B, S) int, leading dims (B,) or (B, T) -> the
    attention mass of each vocabulary id (..., vocab_size) float32.

    A scatter that *adds* duplicates: a source id found twice gets both positions' weights.
    Every Keras backend's `ops.scatter` adds them (TensorFlow's scatter_nd, JAX's .at[].add,
    torch's accumulating index_put); the ONNX export gives its ScatterND `reduction="add"`
    (export.onnx_optimize), since a ScatterND without a reduction leaves duplicates undefined.
    """
    attention = ops.cast(attention, "float32")
    source_ids = ops.cast(source_ids, "int32")
    length = ops.shape(source_ids)[-1]
    if len(attention.shape) == 3:  # (B, T, S): every target position reads the same source
        source_ids = ops.broadcast_to(source_ids[:, None, :], ops.shape(attention))
    rows = ops.reshape(source_ids, (-1, length))
    weights = ops.reshape(attention, (-1, length))
    count = ops.shape(rows)[0]
    row_index = ops.broadcast_to(ops.arange(count, dtype="int32")[:, None], ops.shape(rows))
    indices = ops.stack([row_index, rows], axis=-1)
    mass = ops.scatter(indices, weights, (count, vocab_size))
    return ops.reshape(mass, (*ops.shape(attention)[:-1], vocab_size))


def copy_mixture_log_probs(logits, gate_logit, attention, source_ids):
    """logits (..., V), gate_logit (..., 1), attention (..., S), source_ids (B, S) -> float32
    log p(w) (..., V) of the mixture (1 - g) softmax(logits) + g copy(w), g = sigmoid(gate).

    Computed as logaddexp(log(1 - g) + log_softmax(logits), log g + log copy(w)), where a
    word absent from the source has log copy = -inf: exact for words the vocabulary softmax
    gives a tiny probability, and no NaN in the gradient where the copy mass is zero.
    """
    logits = ops.cast(logits, "float32")
    gate_logit = ops.cast(gate_logit, "float32")
    generate = ops.log_sigmoid(-gate_logit) + ops.log_softmax(logits, axis=-1)
    copy = copy_distribution(attention, source_ids, logits.shape[-1])
    present = ops.greater(copy, 0.0)
    log_copy = ops.where(present, ops.log(ops.where(present, copy, 1.0)), float("-inf"))
    copied = ops.log_sigmoid(gate_logit) + log_copy
    top = ops.maximum(generate, copied)
    return top + ops.log(ops.exp(generate - top) + ops.exp(copied - top))


def coverage_loss(attention, target_mask):
    """See et al.'s coverage loss of copy distributions attention (B,T,S) over the target
    positions where target_mask (B,T) is true: the mean over them of sum_i min(a_t,i, c_t,i),
    with c_t = sum_{t' < t} a_t' the attention the summary has already paid to each source
    position."""
    attention = ops.cast(attention, "float32")
    coverage = ops.cumsum(attention, axis=1) - attention
    per_position = ops.sum(ops.minimum(attention, coverage), axis=-1)
    mask = ops.cast(target_mask, "float32")
    return ops.sum(per_position * mask) / ops.maximum(ops.sum(mask), 1.0)


def copy_attention_weights(cross_weights, head: int):
    """The last decoder layer's cross-attention (B, H, T, S) -> the copy distribution
    (B, T, S): one head's, or the heads' mean when head is -1."""
    if head < 0:
        return ops.mean(ops.cast(cross_weights, "float32"), axis=1)
    return ops.cast(cross_weights[:, head], "float32")


@keras.saving.register_keras_serializable(package="keras_transformer")
class CopyGate(keras.layers.Layer):
    """(decoder state, context, input embedding), each (..., d_model) -> the gate's logit
    (..., 1) float32: W [state; context; embedding] + b, whose sigmoid is the copy share g.

    Args:
        d_model: int. Width of each of the three inputs.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).
    """

    def __init__(self, d_model: int, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.dense = keras.layers.Dense(1, dtype=self.dtype_policy, name="gate")

    def build(self, input_shape=None):
        self.dense.build((None, None, 3 * self.d_model))
        self.built = True

    def call(self, state, context, embedding):
        joined = ops.concatenate([state, ops.cast(context, state.dtype),
                                  ops.cast(embedding, state.dtype)], axis=-1)
        return ops.cast(self.dense(joined), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model)
        return config
