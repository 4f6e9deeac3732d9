"""The Keras model as a generation Backend under JAX and PyTorch: encode and the decoding step
compiled by keras_transformer.compiled (`jax.jit` of pure functions of the weights under JAX,
no-grad calls under PyTorch), the cache kept as the backend's own tensors.

TensorFlow has its own (keras_transformer.tf_backend), whose cache is written in place in
tf.Variables; here the write and the beam reorder are compiled functions that return the new
cache, which XLA turns into an in-place update of the buffer under JAX.
"""

from __future__ import annotations

import weakref

import numpy as np
from keras import ops

from keras_transformer.cache.tensors import update_cache
from keras_transformer.compiled import inference_function
from keras_transformer.generation import Backend


class KerasOpsBackend(Backend):
    """A Transformer's `encode_for_decoding` and `decode_step_key_values` (plus
    logsumexp(logits), computed in the same compiled step) for the searches of
    keras_transformer.decoding, with every tensor on the backend's device."""

    name = "keras"
    _compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self, model, jit_compile: bool = False):
        c = model.config
        super().__init__(num_layers=c.num_decoder_layers, num_heads=c.num_heads,
                         d_model=c.d_model)
        self.model = model
        # JAX always compiles (its eager mode runs op by op); jit_compile is TensorFlow's XLA
        # switch and changes nothing here.
        self._encode, self._step, self._write, self._gather = self.compiled(model)

    @classmethod
    def compiled(cls, model):
        """One set of compiled functions per model, so repeated batches reuse the traces."""
        if model not in cls._compiled:
            # A weak reference, as in tf_backend: a strong one would keep its own key alive.
            model_ref = weakref.ref(model)

            def encode(source_ids):
                return model_ref().encode_for_decoding(source_ids)

            def step(tokens, cross_kv, mask, cache, index):
                logits, step_key_values = model_ref().decode_step_key_values(
                    tokens, cross_kv, mask, cache, index)
                return logits, ops.logsumexp(logits, axis=-1), step_key_values

            def gather(cache, indices):
                return [ops.take(array, indices, axis=0) for array in cache]

            cls._compiled[model] = tuple(inference_function(model, f)
                                         for f in (encode, step, update_cache, gather))
        return cls._compiled[model]

    def encode(self, source_ids):
        return self._encode(ops.convert_to_tensor(np.asarray(source_ids, np.int32)))

    def repeat(self, x, times):
        if isinstance(x, list):
            return [ops.repeat(t, times, axis=0) for t in x]
        return ops.repeat(x, times, axis=0)

    def restrict(self, memory_mask, selection):
        kept = ops.logical_and(ops.cast(memory_mask, "bool"),
                               ops.convert_to_tensor(np.asarray(selection, bool)))
        return ops.cast(kept, memory_mask.dtype)

    def init_cache(self, batch, length):
        """Zeros in the model's compute dtype (Transformer.init_cache checks the length)."""
        return self.model.init_cache(batch, length)

    def cache_from(self, cache):
        return [ops.cast(ops.convert_to_tensor(a), self.model.compute_dtype)
                for a in super().cache_from(cache)]

    def decode_step_normalized(self, tokens, memory, memory_mask, cache, index):
        logits, normalizer, step_key_values = self._step(
            ops.convert_to_tensor(np.asarray(tokens, np.int32)), memory, memory_mask, cache,
            ops.convert_to_tensor(np.int32(index)))
        return logits, step_key_values, normalizer

    def decode_step(self, tokens, memory, memory_mask, cache, index):
        logits, step_key_values, _ = self.decode_step_normalized(tokens, memory, memory_mask,
                                                                 cache, index)
        return logits, step_key_values

    def write(self, cache, step_key_values, index):
        return self._write(cache, ops.convert_to_tensor(np.int32(index)), step_key_values)

    def gather(self, cache, indices, filled=None):
        # Every slot: a compiled gather of a prefix would need one trace per prefix length.
        return self._gather(cache, ops.convert_to_tensor(np.asarray(indices, np.int32)))

    def to_numpy(self, x):
        return ops.convert_to_numpy(x)
