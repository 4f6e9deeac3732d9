"""The self-attention key/value cache of incremental decoding, kept in TF variables.

A step reads the cache where it lies (a variable read is not a copy) and the new position is
written into slot `index` in place, so a step costs the same at the 128th token as at the
32nd. Passing the cache as tensors instead, from NumPy or returned by the step, copies all of
it at every token.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


@tf.function(reduce_retracing=True)
def _write(variables, step_key_values, index):
    """step_key_values (B,L,2,D) -> slot `index` of every (B,H,T,D/H) variable, in place."""
    batch = tf.shape(step_key_values)[0]
    for i, variable in enumerate(variables):
        heads = variable.shape[1]
        row = tf.reshape(tf.cast(step_key_values[:, i // 2, i % 2], variable.dtype),
                         (batch, heads, -1))
        b, h = tf.meshgrid(tf.range(batch), tf.range(heads), indexing="ij")
        slots = tf.stack([b, h, tf.fill(tf.shape(b), index)], axis=-1)
        variable.scatter_nd_update(slots, row)
    return index


@tf.function(reduce_retracing=True)
def _reorder(variables, indices):
    for variable in variables:
        variable.assign(tf.gather(variable, indices))
    return indices


class VariableCache:
    """[keys_0, values_0, keys_1, ...], each (B,H,T,D/H), as non-trainable tf.Variables."""

    def __init__(self, arrays):
        # Batch and length left open: tf.function traces a variable argument by its declared
        # shape, and a trace made for one length must not be reused with another's static
        # shape baked in.
        self.variables = [
            tf.Variable(a, trainable=False, shape=tf.TensorShape([None, a.shape[1], None,
                                                                  a.shape[3]]))
            for a in arrays]
        self.rows = int(arrays[0].shape[0])

    def write(self, step_key_values, index: int) -> None:
        """Slot `index` of every layer's keys and values <- step_key_values (B,L,2,D)."""
        _write(self.variables, step_key_values, tf.constant(index, tf.int32))

    def reorder(self, indices) -> None:
        """Keep rows `indices` (the beams' parents), in this order."""
        indices = np.asarray(indices, np.int32)
        if len(indices) and not 0 <= indices.min() <= indices.max() < self.rows:
            raise IndexError(f"cache rows {indices} are outside [0, {self.rows})")
        _reorder(self.variables, tf.constant(indices))
        self.rows = len(indices)

    def numpy(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.variables]
