"""Text in, text out: the Keras model driven by the NumPy search of `decoding.py`."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.cache import VariableCache, concrete, step_specs
from keras_transformer.decoding import SearchResult, beam_search, greedy_search
from keras_transformer.text.sources import (
    batches_by_length,
    default_max_length,
    encode_sources,
    pad_batch,
)


class KerasStepper:
    """Step/reorder callables over `Transformer.decode_step_key_values`; the cache stays in TF.

    The cache lives in variables (keras_transformer.cache) that each step reads in place and
    writes one slot of, so nothing is copied to NumPy and back, and a step does not copy the
    whole cache.
    """

    _compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self, model, source_ids: np.ndarray, *, beam_size: int = 1, max_length: int,
                 jit_compile: bool = False):
        self.model = model
        encode, step = self.compiled(model, jit_compile)
        cross_kv, mask = encode(tf.constant(source_ids, tf.int32))
        if beam_size > 1:
            cross_kv = [tf.repeat(t, beam_size, axis=0) for t in cross_kv]
            mask = tf.repeat(mask, beam_size, axis=0)
        self.cross_kv, self.mask = cross_kv, mask
        self.cache = VariableCache(model.init_cache(source_ids.shape[0] * beam_size, max_length),
                                   jit_compile=jit_compile)
        self._step = concrete(step, *step_specs(cross_kv, self.cache))

    @classmethod
    def compiled(cls, model, jit_compile: bool):
        """One pair of tf.functions per (model, XLA) so repeated batches reuse the traces."""
        per_model = cls._compiled.setdefault(model, {})
        if bool(jit_compile) not in per_model:
            # The functions reach the model through a weak reference: a strong one in a value
            # would keep its own key, and so every model ever decoded, alive.
            model_ref = weakref.ref(model)

            def encode(source_ids):
                return model_ref().encode_for_decoding(source_ids)

            def step(tokens, cross_kv, mask, cache, index):
                logits, step_key_values = model_ref().decode_step_key_values(
                    tokens, cross_kv, mask, cache, index)
                # The search's log-probabilities need logsumexp over the vocabulary: TF does
                # it on every core, several times faster than NumPy would.
                return logits, tf.reduce_logsumexp(logits, axis=-1), step_key_values

            per_model[bool(jit_compile)] = (
                tf.function(encode, jit_compile=jit_compile, reduce_retracing=True),
                tf.function(step, jit_compile=jit_compile, reduce_retracing=True),
            )
        return per_model[bool(jit_compile)]

    def step(self, tokens: np.ndarray, index: int) -> tuple[np.ndarray, np.ndarray]:
        """-> logits (B,V) and their logsumexp per row (B,), both NumPy."""
        logits, normalizer, step_key_values = self._step(
            tf.constant(tokens, tf.int32), self.cross_kv, self.mask, self.cache.variables,
            tf.constant(index, tf.int32))
        self.cache.write(step_key_values, index)
        return logits.numpy(), normalizer.numpy()

    def reorder(self, indices: np.ndarray) -> None:
        self.cache.reorder(indices)


def search_ids(model, source_ids: np.ndarray, *, beam_size: int = 4, alpha: float = 0.6,
               max_length: int | None = None, jit_compile: bool = False) -> SearchResult:
    """source_ids (B,S) padded ids ending in EOS -> SearchResult of generated ids (greedy if beam 1)."""
    c = model.config
    source_ids = np.asarray(source_ids)
    if source_ids.ndim != 2 or not np.issubdtype(source_ids.dtype, np.integer):
        raise ValueError(f"source_ids must be integer ids of shape (batch, length), got "
                         f"{source_ids.dtype} of shape {source_ids.shape}")
    if source_ids.shape[1] > c.max_source_length:
        raise ValueError(f"source_ids hold {source_ids.shape[1]} tokens per row, more than "
                         f"this model's max_source_length={c.max_source_length}; shorten them")
    max_length = max_length or default_max_length(source_ids.shape[1], c.max_target_length)
    if max_length > c.max_target_length:
        raise ValueError(f"max_length={max_length} is more than this model's "
                         f"max_target_length={c.max_target_length}")
    stepper = KerasStepper(model, source_ids, beam_size=beam_size, max_length=max_length,
                           jit_compile=jit_compile)
    batch = source_ids.shape[0]
    if beam_size == 1:
        return greedy_search(stepper.step, batch, bos_id=c.bos_id, eos_id=c.eos_id,
                             max_length=max_length, pad_id=c.pad_id)
    return beam_search(stepper.step, stepper.reorder, batch, beam_size=beam_size,
                       bos_id=c.bos_id, eos_id=c.eos_id, max_length=max_length, alpha=alpha,
                       pad_id=c.pad_id)


def translate(model, source_tokenizer, target_tokenizer, sentences: Sequence[str], *,
              beam_size: int = 4, alpha: float = 0.6, batch_size: int = 64,
              max_length: int | None = None, jit_compile: bool = False,
              progress=None) -> list[str]:
    """Translate sentences (batched by length, returned in input order).

    max_length (generated tokens, EOS included) defaults to `default_max_length` of the
    longest source in each batch.
    """
    c = model.config
    encoded = encode_sources(sentences, source_tokenizer.encode, c.max_source_length, c.eos_id)
    outputs: list[str] = [""] * len(encoded)
    for chunk in batches_by_length(encoded, batch_size):
        result = search_ids(model, pad_batch([encoded[i] for i in chunk], c.pad_id),
                            beam_size=beam_size, alpha=alpha, max_length=max_length,
                            jit_compile=jit_compile)
        for i, text in zip(chunk, target_tokenizer.decode(result.to_lists(c.eos_id)),
                           strict=True):
            outputs[i] = text
        if progress is not None:
            progress.update(len(chunk))
    return outputs
