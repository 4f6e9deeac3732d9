"""Text in, text out: the Keras model as a Backend, driven by keras_transformer.generation.

The Backend is the running Keras backend's: keras_transformer.tf_backend under TensorFlow,
keras_transformer.ops_backend under JAX and PyTorch (each imported only when it is the one)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from keras_transformer import generation
from keras_transformer.compiled import current_backend
from keras_transformer.decoding import SearchResult
from keras_transformer.text.sources import encode_sources


def model_backend(model, jit_compile: bool = False) -> generation.Backend:
    """The generation Backend of a Transformer under the running Keras backend."""
    if current_backend() == "tensorflow":
        from keras_transformer.tf_backend import KerasBackend

        return KerasBackend(model, jit_compile)
    from keras_transformer.ops_backend import KerasOpsBackend

    return KerasOpsBackend(model, jit_compile)


def search_ids(model, source_ids: np.ndarray, *, beam_size: int = 4, alpha: float = 0.6,
               max_length: int | None = None, jit_compile: bool = False,
               no_repeat_ngram_size: int = 0, min_length: int = 0) -> SearchResult:
    """source_ids (B,S) padded ids ending in EOS -> SearchResult of generated ids (greedy if
    beam 1); the options are those of keras_transformer.generation.search_ids."""
    return generation.search_ids(model_backend(model, jit_compile), source_ids, model.config,
                                 beam_size=beam_size, alpha=alpha, max_length=max_length,
                                 no_repeat_ngram_size=no_repeat_ngram_size,
                                 min_length=min_length)


def translate(model, source_tokenizer, target_tokenizer, sentences: Sequence[str], *,
              beam_size: int = 4, alpha: float = 0.6, batch_size: int = 64,
              max_length: int | None = None, jit_compile: bool = False,
              progress=None, no_repeat_ngram_size: int = 0,
              min_length: int = 0, truncate: bool = False) -> list[str]:
    """Translate sentences (batched by length, returned in input order).

    max_length (generated tokens, EOS included) defaults to `default_max_length` of the
    longest source in each batch; no_repeat_ngram_size and min_length are those of
    keras_transformer.decoding (0: off). A source longer than the model's
    max_source_length is an error, or with truncate keeps its first pieces (with a warning;
    text.sources.encode_sources).
    """
    c = model.config
    encoded = encode_sources(sentences, source_tokenizer.encode, c.max_source_length, c.eos_id,
                             truncate=truncate)
    backend = model_backend(model, jit_compile)

    def search_batch(source_ids):
        return generation.search_ids(backend, source_ids, c, beam_size=beam_size, alpha=alpha,
                                     max_length=max_length,
                                     no_repeat_ngram_size=no_repeat_ngram_size,
                                     min_length=min_length)

    ids = generation.search_batches(encoded, search_batch, c, batch_size=batch_size,
                                    progress=progress)
    return target_tokenizer.decode(ids) if ids else []
