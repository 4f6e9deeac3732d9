"""Backends whose tensors stay in TensorFlow: the Keras model itself (`KerasBackend`), and the
cache handling it shares with a SavedModel's signatures (`TFBackend`)."""

from __future__ import annotations

import weakref

import numpy as np
import tensorflow as tf

from keras_transformer.cache.variables import VariableCache, concrete, step_specs
from keras_transformer.generation import Backend, BackendStepper


class TFBackend(Backend):
    """The encoder outputs stay TF tensors (read at every step, never changed); the cache is a
    VariableCache, which the step reads in place and whose slot is written in place."""

    jit_compile = False  # whether the cache's writes are compiled by XLA

    def __init__(self, **geometry):
        super().__init__(**geometry)
        self.tf = tf

    def repeat(self, x, times):
        if isinstance(x, list):
            return [tf.repeat(t, times, axis=0) for t in x]
        return tf.repeat(x, times, axis=0)

    def restrict(self, memory_mask, selection):
        kept = tf.logical_and(tf.cast(memory_mask, tf.bool), tf.constant(selection, tf.bool))
        return tf.cast(kept, memory_mask.dtype)

    def init_cache(self, batch, length):
        return VariableCache(super().init_cache(batch, length), jit_compile=self.jit_compile)

    def cache_from(self, cache):
        return VariableCache(super().cache_from(cache), jit_compile=self.jit_compile)

    def write(self, cache, step_key_values, index):
        cache.write(step_key_values, index)
        return cache

    def gather(self, cache, indices, filled=None):
        cache.reorder(indices)  # every slot: a TF gather of a prefix would copy as much
        return cache

    def to_numpy(self, x):
        return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


class KerasBackend(TFBackend):
    """A Transformer's `encode_for_decoding` and `decode_step_key_values` as traced
    tf.functions (compiled by XLA with jit_compile), plus logsumexp(logits) in the same
    graph."""

    name = "keras"
    _compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self, model, jit_compile: bool = False):
        c = model.config
        super().__init__(num_layers=c.num_decoder_layers, num_heads=c.num_heads,
                         d_model=c.d_model, copy_attention=c.copy_attention)
        self.model = model
        self.jit_compile = bool(jit_compile)
        self._encode, self._step_function = self.compiled(model, self.jit_compile)
        self._step = None  # the step's trace, made at the first step

    @classmethod
    def compiled(cls, model, jit_compile: bool):
        """One pair of tf.functions per (model, XLA) so repeated batches reuse the traces."""
        per_model = cls._compiled.setdefault(model, {})
        if jit_compile not in per_model:
            # The functions reach the model through a weak reference: a strong one in a value
            # would keep its own key, and so every model ever decoded, alive.
            model_ref = weakref.ref(model)

            def encode(source_ids):
                return model_ref().encode_for_decoding(source_ids)

            def step(tokens, cross_kv, mask, cache, index):
                logits, step_key_values = model_ref().decode_step_key_values(
                    tokens, cross_kv, mask, cache, index)
                # The search's log-probabilities need logsumexp over the vocabulary: TF
                # computes it here, on every core.
                return logits, tf.reduce_logsumexp(logits, axis=-1), step_key_values

            per_model[jit_compile] = (
                tf.function(encode, jit_compile=jit_compile, reduce_retracing=True),
                tf.function(step, jit_compile=jit_compile, reduce_retracing=True),
            )
        return per_model[jit_compile]

    def encode(self, source_ids):
        return self._encode(tf.constant(source_ids, tf.int32))

    def init_cache(self, batch, length):
        """Zeros in the model's compute dtype (Transformer.init_cache checks the length)."""
        return VariableCache(self.model.init_cache(batch, length), jit_compile=self.jit_compile)

    def decode_step_normalized(self, tokens, memory, memory_mask, cache, index):
        if self._step is None:
            self._step = concrete(self._step_function, *step_specs(memory, cache))
        logits, normalizer, step_key_values = self._step(
            tf.constant(tokens, tf.int32), memory, memory_mask, cache.variables,
            tf.constant(index, tf.int32))
        return logits, step_key_values, normalizer

    def decode_step(self, tokens, memory, memory_mask, cache, index):
        logits, step_key_values, _ = self.decode_step_normalized(tokens, memory, memory_mask,
                                                                 cache, index)
        return logits, step_key_values


def keras_stepper(model, source_ids: np.ndarray, *, beam_size: int = 1, max_length: int,
                  jit_compile: bool = False) -> BackendStepper:
    """The step/reorder of the searches over a Transformer, for one batch of sources."""
    return BackendStepper(KerasBackend(model, jit_compile), source_ids, beam_size=beam_size,
                          max_length=max_length)
