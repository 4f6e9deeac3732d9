"""The self-attention key/value cache of incremental decoding, kept in TF variables.

A step reads the cache as it is laid out, one (B,H,T,D/H) array per layer and kind, and the
new position is written into slot `index` in place. Passed as tensors instead (from NumPy, or
returned updated by the step), the cache was copied several times over at every token, and a
step at the 128th token cost up to 2.3x one at the 32nd.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf
from keras import ops


def _scatter(variables, step_key_values, index):
    """step_key_values (B,L,2,D) -> slot `index` of every (B,H,T,D/H) variable, in place."""
    batch, heads = tf.shape(step_key_values)[0], tf.shape(variables[0])[1]
    b, h = tf.meshgrid(tf.range(batch), tf.range(heads), indexing="ij")
    slots = tf.stack([b, h, tf.fill(tf.shape(b), index)], axis=-1)
    for i, variable in enumerate(variables):
        row = tf.cast(step_key_values[:, i // 2, i % 2], variable.dtype)
        variable.scatter_nd_update(slots, tf.reshape(row, (batch, heads, -1)))
    return index


def _update_slice(variables, step_key_values, index):
    """_scatter as a dynamic-update-slice of each variable's buffer (compiled by XLA)."""
    batch = tf.shape(step_key_values)[0]
    for i, variable in enumerate(variables):
        row = tf.cast(step_key_values[:, i // 2, i % 2], variable.dtype)
        shape = tf.shape(variable)
        row = tf.reshape(row, (batch, shape[1], 1, shape[3]))
        variable.assign(ops.slice_update(variable.value(), [0, 0, index, 0], row))
    return index


def _reorder(variables, indices):
    for variable in variables:
        # Gather from a read, not from the variable: a ResourceGather would put it in
        # copy-on-read mode too (reads were 2x slower after it). Compiled, the gather itself
        # was 3-10x slower.
        variable.assign(tf.gather(variable.value(), indices))
    return indices


@functools.cache
def _functions(layers: int, heads: int, head_dim: int, dtype: str, jit_compile: bool):
    """(write, reorder) tf.functions for one cache geometry. Shared across geometries, a trace
    made for variables of one head count was reused for another's (TF matched the variable
    arguments) and split the rows wrongly; batch and length stay open within one."""
    write = (tf.function(_update_slice, jit_compile=True, reduce_retracing=True) if jit_compile
             else tf.function(_scatter, reduce_retracing=True))
    return write, tf.function(_reorder, reduce_retracing=True)


def concrete(function, *specs):
    """The trace of a tf.function for `specs` (TensorSpecs with open dimensions, variables),
    to call directly at every step: a tf.function call matches its arguments against its
    traces first, which cost 3 ms a step here with two dozen tensor and variable arguments,
    more than a `small` step's attention."""
    return function.get_concrete_function(*specs)


def open_spec(x) -> tf.TensorSpec:
    """A (B,H,T,dh) tensor -> a TensorSpec with batch and length left open."""
    return tf.TensorSpec([None, x.shape[1], None, x.shape[3]], x.dtype)


def step_specs(memory, cache: VariableCache) -> tuple:
    """The arguments of a decode step (tokens, memory, memory_mask, cache, index), batch and
    lengths left open, for `concrete`."""
    return (tf.TensorSpec([None], tf.int32), [open_spec(t) for t in memory],
            tf.TensorSpec([None, None], tf.bool), cache.variables, tf.TensorSpec([], tf.int32))


class VariableCache:
    """[keys_0, values_0, keys_1, ...], each (B,H,T,D/H), as non-trainable tf.Variables.

    Two ways to write a slot in place, both measured on 16 rows x 6 layers of base:
    - TF's scatter (the default) costs the same at any length, but it puts a variable in
      copy-on-read mode: every later read copies the whole cache once (about 5 ms a step at
      128 slots, 50 MB).
    - `jit_compile=True` writes with XLA, which leaves reads free, but XLA compiles once per
      cache shape (0.2-0.5 s): a cost a jit-compiled decoder pays anyway.
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
        rows = tf.TensorSpec([None, len(arrays) // 2, 2, heads * head_dim],
                             self.variables[0].dtype)
        write, reorder = _functions(len(arrays) // 2, heads, head_dim,
                                    self.variables[0].dtype.name, bool(jit_compile))
        self._write = concrete(write, self.variables, rows, tf.TensorSpec([], tf.int32))
        self._reorder = concrete(reorder, self.variables, tf.TensorSpec([None], tf.int32))

    def write(self, step_key_values, index: int) -> None:
        """Slot `index` of every layer's keys and values <- step_key_values (B,L,2,D)."""
        self._write(self.variables, step_key_values, tf.constant(index, tf.int32))

    def reorder(self, indices) -> None:
        """Keep rows `indices` (the beams' parents), in this order."""
        indices = np.asarray(indices, np.int32)
        if len(indices) and not 0 <= indices.min() <= indices.max() < self.rows:
            raise IndexError(f"cache rows {indices} are outside [0, {self.rows})")
        self._reorder(self.variables, tf.constant(indices))
        self.rows = len(indices)

    def numpy(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.variables]
