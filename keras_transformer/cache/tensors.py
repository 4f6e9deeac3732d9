"""The cache as Keras tensors inside a model's graph: zeros, a step's key/value rows, and the
write of one slot (see `layout` for the layout)."""

from __future__ import annotations

from keras import ops

from keras_transformer.cache.layout import array_shape, num_slots, slot_rows


def init_cache(layers: int, batch, heads: int, length, d_model: int, dtype="float32") -> list:
    """Zeros [keys_0, values_0, keys_1, ...], each (B, H, length, d_model/H)."""
    shape = array_shape(batch, heads, length, d_model)
    return [ops.zeros(shape, dtype) for _ in range(num_slots(layers))]


def stack_step(keys_values) -> object:
    """[(keys, values) of layer 0, ...], each (B, d_model) -> step_key_values (B,L,2,d_model)."""
    return ops.stack([ops.stack(pair, axis=1) for pair in keys_values], axis=1)


def update_cache(cache, index, step_key_values) -> list:
    """The cache with slot `index` of every array replaced by step_key_values (B,L,2,d_model).

    A fixed-size buffer written at `index` (instead of a concatenated, growing tensor) keeps
    every shape static, which XLA needs.
    """
    updated = []
    for i, array in enumerate(cache):
        row = ops.cast(slot_rows(step_key_values, i), array.dtype)
        row = ops.reshape(row, (-1, array.shape[1], 1, array.shape[3]))
        updated.append(ops.slice_update(array, [0, 0, index, 0], row))
    return updated
