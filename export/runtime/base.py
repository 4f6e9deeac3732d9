"""The runtime-independent part of inference: batching, search and sentence handling."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import sentencepiece as spm

from export.common import ExportError, Manifest, cache_names, memory_names
from keras_transformer.decoding import SearchResult, beam_search, greedy_search
from keras_transformer.text.sources import (
    batches_by_length,
    default_max_length,
    encode_sources,
    pad_batch,
)


class Backend:
    """encode/decode_step of one runtime; the defaults keep every tensor a NumPy array."""

    name = "numpy"

    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        model = manifest.model
        self.num_layers = model["num_decoder_layers"]
        self.num_heads = model["num_heads"]
        self.d_model = model["d_model"]
        # The names of the per-layer arrays in every format's encode outputs and step inputs.
        self._memory_names = memory_names(self.num_layers)
        self._cache_names = cache_names(self.num_layers)

    def encode(self, source_ids: np.ndarray):
        """source_ids (B,S) int32 -> memory [cross_keys_0, cross_values_0, ...], each
        (B,H,S,dh), and memory_mask (B,S) bool."""
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

    # The encoder's keys/values and the cache are, in every runtime, one (B,H,S or T,dh)
    # array per layer and kind, [keys_0, values_0, keys_1, ...]: the layout a step reads
    # without slicing, transposing or copying. Every method keeps the batch rows of whatever
    # it is given.

    def cache_from(self, cache: np.ndarray):
        """A (B,L,2,T,D) NumPy cache -> this runtime's cache, [keys_0, values_0, ...]."""
        return per_layer_heads(np.asarray(cache, np.float32), self.num_heads)

    def init_cache(self, batch: int, length: int):
        """-> an all-zero cache of `length` slots, 2L arrays (B, H, length, dh) float32."""
        shape = (batch, self.num_heads, length, self.d_model // self.num_heads)
        return [np.zeros(shape, np.float32) for _ in range(2 * self.num_layers)]

    def repeat(self, x, times: int):
        """(B, ...) -> (B * times, ...), each row repeated `times` times in place (each array
        of a list)."""
        if isinstance(x, list):
            return [np.repeat(a, times, axis=0) for a in x]
        return np.repeat(x, times, axis=0)

    def gather(self, cache, indices: np.ndarray, filled: int | None = None):
        """cache <- its rows `indices` (a beam reorder), in place, in the first `filled` slots
        (every slot when None): the later ones are not read before a step writes them.

        Only the rows whose parent is another row move. A fresh gathered copy of every row
        and slot (np.take) took 2-3x as long (bench.breakdown, "beam reorders")."""
        rows = len(cache[0]) if len(cache) else 0
        if len(indices) and not 0 <= indices.min() <= indices.max() < rows:
            raise IndexError(f"cache rows {indices} are outside [0, {rows})")
        if len(indices) != rows:  # the batch changes size: a plain gather
            return [np.take(a, indices, axis=0) for a in cache]
        moved = np.flatnonzero(indices != np.arange(rows))
        if len(moved):
            sources, slots = indices[moved], slice(None, filled)
            for array in cache:
                # The right side is gathered into a temporary first, so a row that is both a
                # source and a destination is read before it is overwritten.
                array[moved, :, slots] = array[sources, :, slots]
        return cache

    def write(self, cache, step_key_values, index: int):
        """Slot `index` of the cache <- step_key_values (B,L,2,D), in place."""
        rows = self.to_numpy(step_key_values)
        batch = rows.shape[0]
        for i, array in enumerate(cache):
            array[:, :, index, :] = rows[:, i // 2, i % 2].reshape(batch, self.num_heads, -1)
        return cache

    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x)


def per_layer_heads(x: np.ndarray, heads: int) -> list[np.ndarray]:
    """(B,L,2,T,D) -> [layer 0 keys, layer 0 values, layer 1 keys, ...], each contiguous
    (B,H,T,D/H)."""
    b, layers, _, t, d = x.shape
    return [np.ascontiguousarray(x[:, i, kind].reshape(b, t, heads, d // heads)
                                 .transpose(0, 2, 1, 3))
            for i in range(layers) for kind in (0, 1)]


class Stepper:
    """`step(tokens, index)` and `reorder(indices)` of keras_transformer.decoding over a Backend."""

    def __init__(self, backend: Backend, source_ids: np.ndarray, *, beam_size: int,
                 max_length: int):
        self.backend = backend
        memory, memory_mask = backend.encode(np.asarray(source_ids, np.int32))
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
        return logits if log_normalizer is None else (logits, log_normalizer)

    def reorder(self, indices: np.ndarray) -> None:
        self.cache = self.backend.gather(self.cache, np.asarray(indices, np.intp), self._filled)


def _load_sentencepiece(path) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as err:
        raise ExportError(f"{path} is not a valid SentencePiece model: {err}") from err


class Translator:
    """Sentences in, sentences out, over any Backend; greedy (beam_size=1) or beam search."""

    def __init__(self, manifest: Manifest, backend: Backend):
        self.manifest = manifest
        self.backend = backend
        source, target = manifest.tokenizer_files()
        self.source_sp = _load_sentencepiece(source)
        self.target_sp = self.source_sp if target == source else _load_sentencepiece(target)
        ids = manifest.special_ids
        self.pad_id, self.bos_id, self.eos_id = ids["pad"], ids["bos"], ids["eos"]
        self.max_source_length = manifest["max_source_length"]
        self.max_target_length = manifest["max_target_length"]

    def search_ids(self, source_ids: np.ndarray, *, beam_size: int = 4, alpha: float = 0.6,
                   max_length: int | None = None) -> SearchResult:
        """source_ids (B,S) padded ids ending in EOS -> SearchResult (greedy if beam 1)."""
        max_length = max_length or default_max_length(source_ids.shape[1],
                                                      self.max_target_length)
        stepper = Stepper(self.backend, source_ids, beam_size=beam_size, max_length=max_length)
        batch = source_ids.shape[0]
        if beam_size == 1:
            return greedy_search(stepper.step, batch, bos_id=self.bos_id, eos_id=self.eos_id,
                                 max_length=max_length, pad_id=self.pad_id)
        return beam_search(stepper.step, stepper.reorder, batch, beam_size=beam_size,
                           bos_id=self.bos_id, eos_id=self.eos_id, max_length=max_length,
                           alpha=alpha, pad_id=self.pad_id)

    def encode(self, sentences: Sequence[str], truncate: bool = True) -> list[list[int] | None]:
        """Sentences -> id lists ending in EOS (None for blank ones); see text.sources."""
        return encode_sources(sentences, lambda texts: self.source_sp.encode(texts, out_type=int),
                              self.max_source_length, self.eos_id, truncate=truncate,
                              allow_empty=True)

    def translate_ids(self, sentences: Sequence[str], *, beam_size: int = 4,
                      alpha: float = 0.6, batch_size: int = 64, truncate: bool = True,
                      progress=None) -> list[list[int]]:
        """Sentences -> generated ids up to EOS (empty for blank sentences), in input order."""
        if isinstance(sentences, str):
            raise TypeError("translate expects a list of sentences, not a single str")
        encoded = self.encode(sentences, truncate)
        outputs: list[list[int]] = [[] for _ in encoded]
        blank = sum(ids is None for ids in encoded)
        if progress is not None and blank:
            progress.update(blank)
        for chunk in batches_by_length(encoded, batch_size):
            result = self.search_ids(pad_batch([encoded[i] for i in chunk], self.pad_id),
                                     beam_size=beam_size, alpha=alpha)
            for i, ids in zip(chunk, result.to_lists(self.eos_id), strict=True):
                outputs[i] = ids
            if progress is not None:
                progress.update(len(chunk))
        return outputs

    def translate(self, sentences: Sequence[str], **kwargs) -> list[str]:
        """Sentences -> translations in input order; blank sentences give ""."""
        ids = self.translate_ids(sentences, **kwargs)
        special = {self.pad_id, self.bos_id}
        return [self.target_sp.decode([t for t in row if t not in special]) for row in ids]
