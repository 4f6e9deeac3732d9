"""Attention masks made from token ids (padding) and from positions (causality), and the
mean of states over a padding mask.

Every mask here is boolean with True meaning "may attend", shaped to broadcast against
attention logits of shape (batch, heads, query_len, key_len).
"""

from keras import ops


def padding_mask(ids, pad_id: int = 0):
    """(batch, length) ids -> (batch, length) bool, True at real tokens."""
    return ops.not_equal(ids, pad_id)


def key_padding_mask(ids, pad_id: int = 0):
    """(batch, key_len) ids -> (batch, 1, 1, key_len) bool mask over keys."""
    return expand_key_mask(padding_mask(ids, pad_id))


def causal_mask(query_len, key_len=None):
    """-> (1, 1, query_len, key_len) bool, True where key position <= query position."""
    key_len = query_len if key_len is None else key_len
    # The positions are expanded before the comparison: TFLite has no bool StridedSlice.
    rows = ops.arange(query_len)[None, None, :, None]
    cols = ops.arange(key_len)[None, None, None, :]
    return ops.greater_equal(rows, cols)


def expand_key_mask(mask):
    """(B, S) bool -> (B, 1, 1, S), broadcast over heads and queries; None stays None."""
    # expand_dims, not [:, None, None, :]: TFLite has no bool StridedSlice.
    return None if mask is None else ops.expand_dims(ops.expand_dims(mask, 1), 1)


def masked_mean(states, mask):
    """states (B,S,d), mask (B,S) bool -> (B,d): the mean over the positions where mask is
    True (zeros for a row with none)."""
    # expand_dims, not [:, :, None]: a new-axis StridedSlice is not a builtin TFLite op.
    weights = ops.expand_dims(ops.cast(mask, states.dtype), -1)
    total = ops.sum(states * weights, axis=1)
    return total / ops.maximum(ops.sum(weights, axis=1), ops.cast(1.0, states.dtype))
