"""Inference over any runtime: a Backend's encode and decode_step, one Stepper over it, the
searches of `decoding` (`search_ids`), and `Translator`, which turns sentences into batches and
back.

NumPy and the standard library only, so the TensorFlow-free runtimes (export/runtime) use it;
the Keras model is one more Backend (keras_transformer.tf_backend).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from keras_transformer.cache import layout
from keras_transformer.decoding import SearchResult, SearchSettings, search
from keras_transformer.text.sources import (
    batches_by_length,
    default_max_length,
    encode_sources,
    pad_batch,
)


class Limits(Protocol):
    """The special ids and length limits of a model: a TransformerConfig, or an exported
    model's Translator."""

    pad_id: int
    bos_id: int
    eos_id: int
    max_source_length: int
    max_target_length: int


class Backend:
    """encode/decode_step of one runtime; the defaults keep every tensor a NumPy array.

    The encoder's keys/values ("memory") and the cache are laid out as keras_transformer.cache
    .layout describes. Every method keeps the batch rows of whatever it is given.
    """

    name = "numpy"

    def __init__(self, *, num_layers: int, num_heads: int, d_model: int,
                 copy_attention: bool = False):
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.d_model = d_model
        self.copy_attention = copy_attention
        # The names of the arrays in every format's encode outputs and step inputs.
        self._memory_names = layout.memory_names(num_layers, copy_attention)
        self._cache_names = layout.cache_names(num_layers)

    def encode(self, source_ids: np.ndarray):
        """source_ids (B,S) int32 -> memory [cross_keys_0, cross_values_0, ...], each
        (B,H,S,dh), then for a copy-attention model the source ids (B,S) int32
        (layout.memory_names), and memory_mask (B,S) bool."""
        raise NotImplementedError

    def decode_step(self, tokens, memory, memory_mask, cache, index: int):
        """tokens (B,) int32, memory and memory_mask (from `encode`), cache (from `init_cache`
        or `cache_from`), index -> logits (B,V), step_key_values (B,L,2,D); the cache is only
        read."""
        raise NotImplementedError

    def decode_step_normalized(self, tokens, memory, memory_mask, cache, index: int):
        """decode_step plus logsumexp(logits) per row (B,) when the runtime computes it in its
        graph, else None (the search then computes it)."""
        logits, step_key_values = self.decode_step(tokens, memory, memory_mask, cache, index)
        return logits, step_key_values, None

    def cache_from(self, cache: np.ndarray):
        """A (B,L,2,T,D) NumPy cache -> this runtime's cache, [keys_0, values_0, ...]."""
        return layout.per_layer_heads(np.asarray(cache, np.float32), self.num_heads)

    def init_cache(self, batch: int, length: int):
        """-> an all-zero cache of `length` slots, 2L arrays (B, H, length, dh) float32."""
        return layout.zeros(self.num_layers, batch, self.num_heads, length, self.d_model)

    def repeat(self, x, times: int):
        """(B, ...) -> (B * times, ...), each row repeated `times` times in place (each array
        of a list)."""
        if isinstance(x, list):
            return [np.repeat(a, times, axis=0) for a in x]
        return np.repeat(x, times, axis=0)

    def gather(self, cache, indices: np.ndarray, filled: int | None = None):
        """cache <- its rows `indices` (a beam reorder) in the first `filled` slots (every
        slot when None); see layout.reorder."""
        return layout.reorder(cache, indices, filled)

    def write(self, cache, step_key_values, index: int):
        """Slot `index` of the cache <- step_key_values (B,L,2,D), in place."""
        return layout.write(cache, self.to_numpy(step_key_values), index)

    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x)

    def restrict(self, memory_mask, selection: np.ndarray):
        """memory_mask (B,S) from `encode`, selection (B,S) bool -> the mask of the source
        positions both keep, in memory_mask's type: what every decoder layer's
        cross-attention (and a copy model's copy distribution) is renormalized over."""
        mask = self.to_numpy(memory_mask)
        return np.logical_and(mask.astype(bool), selection).astype(mask.dtype)

    def search_in_runtime(self, source_ids: np.ndarray, settings: SearchSettings,
                          row_limits: np.ndarray | None = None) -> SearchResult | None:
        """The whole search of `decoding.search` for source_ids (B,S) inside the runtime, in
        one call, where this runtime can (the ONNX export's search.onnx); None when it
        cannot, and the NumPy search then drives `decode_step`. settings.max_length is set;
        row_limits, when given, are each source's own (`decoding.search`). Its tokens must be
        the NumPy search's."""
        return None


def trimmed(tokens: np.ndarray, scores: np.ndarray, eos_id: int,
            row_limits: np.ndarray | None = None, pad_id: int = 0) -> SearchResult:
    """A runtime's (B,T) search output as `decoding.SearchResult` holds it: T cut to the
    longest output (a row ends at its first EOS, else runs to T, or to its own limit when
    `row_limits` gives one, after which it holds pad_id)."""
    tokens = np.asarray(tokens, np.int32)
    is_eos = tokens == eos_id
    lengths = np.where(is_eos.any(axis=1), is_eos.argmax(axis=1) + 1, tokens.shape[1])
    if row_limits is not None:
        row_limits = np.asarray(row_limits, np.int64)
        lengths = np.minimum(lengths, row_limits)
        tokens = np.where(np.arange(tokens.shape[1]) < row_limits[:, None], tokens, pad_id)
    width = int(lengths.max()) if len(lengths) else 0
    return SearchResult(tokens=tokens[:, :width].astype(np.int32),
                        scores=np.asarray(scores, np.float32), row_limits=row_limits)


class BackendStepper:
    """The `step(tokens, index)` and `reorder(indices)` of keras_transformer.decoding over a
    Backend, for one batch of sources (repeated per beam)."""

    def __init__(self, backend: Backend, source_ids: np.ndarray, *, beam_size: int,
                 max_length: int, selection: np.ndarray | None = None):
        self.backend = backend
        memory, memory_mask = backend.encode(np.asarray(source_ids, np.int32))
        if selection is not None:
            memory_mask = backend.restrict(memory_mask, selection)
        if beam_size > 1:
            memory = backend.repeat(memory, beam_size)
            memory_mask = backend.repeat(memory_mask, beam_size)
        self.memory, self.memory_mask = memory, memory_mask
        self.cache = backend.init_cache(source_ids.shape[0] * beam_size, max_length)
        self._filled = 0  # cache slots written so far

    def step(self, tokens: np.ndarray, index: int):
        """-> logits (B,V), or (logits, logsumexp per row) where the runtime gives it."""
        logits, step_key_values, log_normalizer = self.backend.decode_step_normalized(
            np.asarray(tokens, np.int32), self.memory, self.memory_mask, self.cache,
            index)
        self.cache = self.backend.write(self.cache, step_key_values, index)
        self._filled = max(self._filled, index + 1)
        logits = self.backend.to_numpy(logits)
        if log_normalizer is None:
            return logits
        return logits, self.backend.to_numpy(log_normalizer)

    def reorder(self, indices: np.ndarray) -> None:
        self.cache = self.backend.gather(self.cache, np.asarray(indices, np.intp), self._filled)


def search_ids(backend: Backend, source_ids: np.ndarray, limits: Limits,
               settings: SearchSettings = SearchSettings(),
               selection: np.ndarray | None = None,
               row_limits: Sequence[int] | None = None) -> SearchResult:
    """source_ids (B,S) padded ids ending in EOS -> SearchResult of generated ids, by the
    search `settings` describe (greedy if beam 1). settings.max_length (generated tokens, EOS
    included) defaults to `default_max_length` of the sources' length.

    selection (B,S) bool, when given, restricts the decoder's attention over each source to
    the positions it keeps (`Backend.restrict`; text.bottom_up); every row must keep one.

    row_limits (B,), when given, are each source's own most tokens (settings.max_length then
    defaults to their largest): each row's result is the one it gets searched alone with its
    limit, so that sources of different limits share a batch (export.api)."""
    source_ids = np.asarray(source_ids)
    if source_ids.ndim != 2 or not np.issubdtype(source_ids.dtype, np.integer):
        raise ValueError(f"source_ids must be integer ids of shape (batch, length), got "
                         f"{source_ids.dtype} of shape {source_ids.shape}")
    if selection is not None:
        selection = np.asarray(selection)
        if selection.shape != source_ids.shape or selection.dtype != bool:
            raise ValueError(f"selection must be bool of the sources' shape {source_ids.shape},"
                             f" got {selection.dtype} of shape {selection.shape}")
        if not selection.any(axis=1).all():
            raise ValueError("every row of selection must keep at least one source position")
    if source_ids.shape[1] > limits.max_source_length:
        raise ValueError(f"source_ids hold {source_ids.shape[1]} tokens per row, more than "
                         f"this model's max_source_length={limits.max_source_length}; "
                         f"shorten them")
    if row_limits is not None:
        row_limits = np.asarray(row_limits, np.int64)
        if row_limits.shape != source_ids.shape[:1]:
            raise ValueError(f"row_limits must hold one limit per source ({source_ids.shape[0]}),"
                             f" got shape {row_limits.shape}")
        if settings.max_length is None:
            settings = settings.replace(max_length=int(row_limits.max()))
    max_length = settings.max_length or default_max_length(source_ids.shape[1],
                                                           limits.max_target_length)
    if max_length > limits.max_target_length:
        raise ValueError(f"max_length={max_length} is more than this model's "
                         f"max_target_length={limits.max_target_length}")
    settings = settings.replace(max_length=max_length)
    # A search inside the runtime (search.onnx) has no input for a selection.
    result = (backend.search_in_runtime(source_ids, settings, row_limits)
              if selection is None else None)
    if result is not None:
        return result
    stepper = BackendStepper(backend, source_ids, beam_size=settings.beam_size,
                             max_length=max_length, selection=selection)
    return search(stepper, source_ids.shape[0], settings, bos_id=limits.bos_id,
                  eos_id=limits.eos_id, pad_id=limits.pad_id, row_limits=row_limits)


def search_batches(encoded: Sequence[Sequence[int] | None],
                   search_batch: Callable[..., SearchResult], limits: Limits, *,
                   batch_size: int = 64, progress=None,
                   selections: Sequence[Sequence[bool] | None] | None = None
                   ) -> list[list[int]]:
    """Encoded sources (id lists ending in EOS, None for blank ones; see
    text.sources.encode_sources) -> the generated ids of each up to EOS ([] for blank ones),
    in input order.

    The sources are searched in batches of similar length (`batches_by_length`), each padded
    and passed to `search_batch`; with `selections` (one bool list per source, of its
    length) the batch's padded selection (B,S) is passed too. `progress` (e.g. a tqdm bar),
    when given, is updated by the number of sources done, blank ones first.
    """
    outputs: list[list[int]] = [[] for _ in encoded]
    blank = sum(ids is None for ids in encoded)
    if progress is not None and blank:
        progress.update(blank)
    for chunk in batches_by_length(encoded, batch_size):
        ids = pad_batch([encoded[i] for i in chunk], limits.pad_id)
        if selections is None:
            result = search_batch(ids)
        else:
            selection = np.zeros(ids.shape, bool)
            for row, i in enumerate(chunk):
                selection[row, : len(selections[i])] = selections[i]
            result = search_batch(ids, selection)
        for i, ids in zip(chunk, result.to_lists(limits.eos_id), strict=True):
            outputs[i] = ids
        if progress is not None:
            progress.update(len(chunk))
    return outputs


class Translator:
    """Sentences in, sentences out, over any Backend: the Keras model's
    (keras_transformer.translator.keras_translator) or an export's (export.runtime), by the
    search a `SearchSettings` describes.

    `encode_texts` maps sentences to their pieces' ids (without EOS), `decode_rows` generated
    id rows (as `translate_ids` gives them) to text; without them the Translator searches ids
    only (`search_ids`). `limits` gives the special ids and the
    lengths (pad_id, bos_id, eos_id, max_source_length and max_target_length are copied onto
    the Translator, which is itself a `Limits`).
    """

    def __init__(self, backend: Backend, limits: Limits,
                 encode_texts: Callable[[list[str]], list[list[int]]] | None = None,
                 decode_rows: Callable[[Sequence[Sequence[int]]], list[str]] | None = None):
        self.backend = backend
        self.pad_id, self.bos_id, self.eos_id = limits.pad_id, limits.bos_id, limits.eos_id
        self.max_source_length = limits.max_source_length
        self.max_target_length = limits.max_target_length
        self._encode_texts = encode_texts
        self._decode_rows = decode_rows

    def search_ids(self, source_ids: np.ndarray, settings: SearchSettings = SearchSettings(),
                   selection: np.ndarray | None = None,
                   row_limits: Sequence[int] | None = None) -> SearchResult:
        """source_ids (B,S) padded ids ending in EOS -> SearchResult (`search_ids`)."""
        return search_ids(self.backend, source_ids, self, settings, selection, row_limits)

    def pieces(self, texts: Sequence[str]) -> list[list[int]]:
        """Texts -> their pieces' ids, uncut and without EOS (the source tokenizer's)."""
        if self._encode_texts is None:
            raise TypeError("this Translator has no source tokenizer; give it one to translate "
                            "text")
        return self._encode_texts(list(texts))

    def search_encoded(self, encoded: Sequence[Sequence[int] | None],
                       settings: SearchSettings = SearchSettings(), *,
                       selections: Sequence[Sequence[bool] | None] | None = None,
                       batch_size: int = 64, progress=None) -> list[list[int]]:
        """Id lists ending in EOS (None for blank ones), each with its selection when
        `selections` is given -> generated ids up to EOS, in input order
        (`search_batches`)."""
        return search_batches(encoded, lambda *batch: self.search_ids(batch[0], settings,
                                                                      *batch[1:]),
                              self, batch_size=batch_size, progress=progress,
                              selections=selections)

    def encode(self, sentences: Sequence[str], truncate: bool = True,
               allow_empty: bool = True) -> list[list[int] | None]:
        """Sentences -> id lists ending in EOS (None for blank ones with allow_empty); see
        text.sources.encode_sources."""
        return encode_sources(sentences, self.pieces, self.max_source_length,
                              self.eos_id, truncate=truncate, allow_empty=allow_empty)

    def translate_ids(self, sentences: Sequence[str],
                      settings: SearchSettings = SearchSettings(), *, batch_size: int = 64,
                      truncate: bool = True, allow_empty: bool = True,
                      progress=None) -> list[list[int]]:
        """Sentences -> generated ids up to EOS (empty for blank sentences), in input order,
        searched in batches of similar length (`search_batches`)."""
        if isinstance(sentences, str):
            raise TypeError("translate expects a list of sentences, not a single str")
        return self.search_encoded(self.encode(sentences, truncate, allow_empty), settings,
                                   batch_size=batch_size, progress=progress)

    def translate(self, sentences: Sequence[str], settings: SearchSettings = SearchSettings(),
                  **kwargs) -> list[str]:
        """Sentences -> translations in input order; blank sentences give "". The keyword
        arguments are those of `translate_ids`."""
        rows = self.translate_ids(sentences, settings, **kwargs)
        return self.decode_ids(rows) if rows else []

    def decode_ids(self, rows: Sequence[Sequence[int]]) -> list[str]:
        """Generated id rows -> text."""
        if self._decode_rows is None:
            raise TypeError("this Translator has no target tokenizer; give it one to decode "
                            "ids")
        return self._decode_rows(rows)
