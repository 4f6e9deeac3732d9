"""The cache kept in TF variables: a step reads them in place and one slot is written in place.

A step reads the cache as it is laid out (keras_transformer.cache.layout), one (B,H,T,D/H)
variable per layer and kind, and the new position is written into slot `index`, so no step
copies the whole cache.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from keras_transformer.cache.layout import KINDS, check_rows, slot_rows
from keras_transformer.cache.tensors import update_cache


def _scatter(variables, step_key_values, index):
    """step_key_values (B,L,2,D) -> slot `index` of every (B,H,T,D/H) variable, in place."""
    batch, heads = tf.shape(step_key_values)[0], tf.shape(variables[0])[1]
    b, h = tf.meshgrid(tf.range(batch), tf.range(heads), indexing="ij")
    slots = tf.stack([b, h, tf.fill(tf.shape(b), index)], axis=-1)
    for i, variable in enumerate(variables):
        row = tf.cast(slot_rows(step_key_values, i), variable.dtype)
        variable.scatter_nd_update(slots, tf.reshape(row, (batch, heads, -1)))
    return index


def _update_slice(variables, step_key_values, index):
    """_scatter as a dynamic-update-slice of each variable's buffer (compiled by XLA)."""
    updated = update_cache([v.value() for v in variables], index, step_key_values)
    for variable, value in zip(variables, updated, strict=True):
        variable.assign(value)
    return index


def _reorder(variables, indices):
    for variable in variables:
        # Gather from a read, not from the variable: a ResourceGather would put the variable
        # in copy-on-read mode too.
        variable.assign(tf.gather(variable.value(), indices))
    return indices


@functools.cache
def _functions(layers: int, heads: int, head_dim: int, dtype: str, jit_compile: bool):
    """(write, reorder) tf.functions for one cache geometry: TF matches variable arguments
    against a trace by their declared shape, so a trace shared across head counts would split
    the rows wrongly. Batch and length stay open within one geometry."""
    write = (tf.function(_update_slice, jit_compile=True, reduce_retracing=True) if jit_compile
             else tf.function(_scatter, reduce_retracing=True))
    return write, tf.function(_reorder, reduce_retracing=True)


def concrete(function, *specs):
    """The trace of a tf.function for `specs` (TensorSpecs with open dimensions, variables),
    to call directly at every step: a tf.function call first matches its arguments (here two
    dozen tensors and variables) against its traces."""
    return function.get_concrete_function(*specs)


def open_spec(x) -> tf.TensorSpec:
    """A (B,H,T,dh) tensor, or a copy model's (B,S) source ids -> a TensorSpec with batch and
    length left open."""
    if len(x.shape) == 2:
        return tf.TensorSpec([None, None], x.dtype)
    return tf.TensorSpec([None, x.shape[1], None, x.shape[3]], x.dtype)


def step_specs(memory, cache: VariableCache) -> tuple:
    """The arguments of a decode step (tokens, memory, memory_mask, cache, index), batch and
    lengths left open, for `concrete`."""
    return (tf.TensorSpec([None], tf.int32), [open_spec(t) for t in memory],
            tf.TensorSpec([None, None], tf.bool), cache.variables, tf.TensorSpec([], tf.int32))


class VariableCache:
    """[keys_0, values_0, keys_1, ...], each (B,H,T,D/H), as non-trainable tf.Variables.

    Two ways to write a slot in place:
    - TF's scatter (the default) costs the same at any length, but it puts a variable in
      copy-on-read mode: every later read copies the whole cache once.
    - `jit_compile=True` writes with XLA, which leaves reads free, but XLA compiles once per
      cache shape: a cost a jit-compiled decoder pays anyway.
    """

    def __init__(self, arrays, jit_compile: bool = False):
        # Batch and length left open: tf.function traces a variable argument by its declared
        # shape, and a trace made for one length must not be reused with another's static
        # shape baked in.
        self.variables = [
            tf.Variable(a, trainable=False, shape=tf.TensorShape([None, a.shape[1], None,
                                                                  a.shape[3]]))
            for a in arrays]
        self.rows = int(arrays[0].shape[0])
        heads, head_dim = int(arrays[0].shape[1]), int(arrays[0].shape[3])
        layers = len(arrays) // len(KINDS)
        rows = tf.TensorSpec([None, layers, len(KINDS), heads * head_dim],
                             self.variables[0].dtype)
        write, reorder = _functions(layers, heads, head_dim, self.variables[0].dtype.name,
                                    bool(jit_compile))
        self._write = concrete(write, self.variables, rows, tf.TensorSpec([], tf.int32))
        self._reorder = concrete(reorder, self.variables, tf.TensorSpec([None], tf.int32))

    def write(self, step_key_values, index: int) -> None:
        """Slot `index` of every layer's keys and values <- step_key_values (B,L,2,D)."""
        self._write(self.variables, step_key_values, tf.constant(index, tf.int32))

    def reorder(self, indices) -> None:
        """Keep rows `indices` (the beams' parents), in this order, in every slot."""
        indices = np.asarray(indices, np.int32)
        check_rows(indices, self.rows)
        self._reorder(self.variables, tf.constant(indices))
        self.rows = len(indices)

    def numpy(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.variables]
