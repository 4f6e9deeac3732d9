"""The layout of the decoder's key/value arrays, and its NumPy write and beam reorder.

NumPy and the standard library only, so the TensorFlow-free runtimes use it.

A cache is a list of 2L arrays, one per decoder layer and kind, ``[keys_0, values_0, keys_1,
values_1, ...]``, each head-major ``(B, H, T, D/H)``: the layout a step reads without slicing,
transposing or copying. The encoder's cross-attention keys/values ("memory") have the same
layout with the source length S in place of T. One decoding step produces
``step_key_values`` ``(B, L, 2, D)``: the new position's keys (``[:, l, 0]``) and values
(``[:, l, 1]``) of every layer, which are written into slot ``index`` of every array.
"""

from __future__ import annotations

import numpy as np

KINDS = ("keys", "values")


def num_slots(layers: int) -> int:
    """How many arrays a cache of `layers` decoder layers holds."""
    return len(KINDS) * layers


def slot(layer: int, kind: int) -> int:
    """The position in the cache list of `layer`'s keys (kind 0) or values (kind 1)."""
    return len(KINDS) * layer + kind


def layer_kind(i: int) -> tuple[int, int]:
    """Cache position `i` -> (layer, kind): the inverse of `slot`."""
    return divmod(i, len(KINDS))


def slot_rows(step_key_values, i: int):
    """step_key_values (B,L,2,D) -> the (B,D) rows cache array `i` receives (NumPy or
    tensors: only indexing is used)."""
    layer, kind = layer_kind(i)
    return step_key_values[:, layer, kind]


def _names(prefix: str, layers: int) -> list[str]:
    return [f"{prefix}_{KINDS[kind]}_{layer}"
            for layer, kind in map(layer_kind, range(num_slots(layers)))]


# A copy-attention model's memory ends with the source ids (B,S) int32: its step puts the
# attention over the source on these ids (keras_transformer.layers.copy_attention).
COPY_SOURCE = "copy_source_ids"


def memory_names(layers: int, copy_attention: bool = False) -> list[str]:
    """encode's outputs and decode_step's inputs in every exported format: cross_keys_0,
    cross_values_0, cross_keys_1, ..., each (B,H,S,dh); for a copy-attention model then
    COPY_SOURCE, (B,S) int32."""
    return _names("cross", layers) + ([COPY_SOURCE] if copy_attention else [])


def cache_names(layers: int) -> list[str]:
    """The cache inputs of every exported format's decode step: cache_keys_0, cache_values_0,
    cache_keys_1, ..., each (B,H,T,dh)."""
    return _names("cache", layers)


def array_shape(batch, heads: int, length, d_model: int) -> tuple:
    """The shape of one cache array: (B, H, T, d_model/H)."""
    return (batch, heads, length, d_model // heads)


def zeros(layers: int, batch: int, heads: int, length: int, d_model: int,
          dtype=np.float32) -> list[np.ndarray]:
    """An all-zero cache of `length` slots, 2L contiguous NumPy arrays."""
    shape = array_shape(batch, heads, length, d_model)
    return [np.zeros(shape, dtype) for _ in range(num_slots(layers))]


def per_layer_heads(x: np.ndarray, heads: int) -> list[np.ndarray]:
    """(B,L,2,T,D) -> [layer 0 keys, layer 0 values, layer 1 keys, ...], each contiguous
    (B,H,T,D/H)."""
    b, layers, _, t, d = x.shape
    return [np.ascontiguousarray(slot_rows(x, i).reshape(b, t, heads, d // heads)
                                 .transpose(0, 2, 1, 3))
            for i in range(num_slots(layers))]


def write(cache, step_key_values: np.ndarray, index: int):
    """Slot `index` of every array <- step_key_values (B,L,2,D), in place; -> cache."""
    rows = np.asarray(step_key_values)
    for i, array in enumerate(cache):
        array[:, :, index, :] = slot_rows(rows, i).reshape(array.shape[0], array.shape[1], -1)
    return cache


def check_rows(indices: np.ndarray, rows: int) -> None:
    """IndexError unless every index of a beam reorder names one of the cache's `rows`."""
    if len(indices) and not 0 <= indices.min() <= indices.max() < rows:
        raise IndexError(f"cache rows {indices} are outside [0, {rows})")


def reorder(cache, indices: np.ndarray, filled: int | None = None):
    """cache <- its rows `indices` (the beams' parents), in the first `filled` slots (every slot
    when None: later ones are not read before a step writes them); -> the cache.

    In place, and only the rows whose parent is another row move; when the batch changes size,
    a new gathered list is returned instead.
    """
    indices = np.asarray(indices, np.intp)
    rows = len(cache[0]) if len(cache) else 0
    check_rows(indices, rows)
    if len(indices) != rows:
        return [np.take(a, indices, axis=0) for a in cache]
    moved = np.flatnonzero(indices != np.arange(rows))
    if len(moved):
        sources, slots = indices[moved], slice(None, filled)
        for array in cache:
            # The right side is gathered into a temporary first, so a row that is both a
            # source and a destination is read before it is overwritten.
            array[moved, :, slots] = array[sources, :, slots]
    return cache
