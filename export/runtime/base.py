"""What every runtime of an export directory shares: a Backend sized by its manifest, and
sentences in, sentences out over keras_transformer.generation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import sentencepiece as spm

from keras_transformer import generation
from keras_transformer.decoding import SearchResult
from keras_transformer.text.sources import encode_sources

from ..common import ExportError, Manifest


class Backend(generation.Backend):
    """generation.Backend with the decoder's geometry read from an export's manifest (first in
    the bases of a runtime that also derives from another Backend)."""

    def __init__(self, manifest: Manifest):
        model = manifest.model
        super().__init__(num_layers=model["num_decoder_layers"], num_heads=model["num_heads"],
                         d_model=model["d_model"])
        self.manifest = manifest


def _load_sentencepiece(path) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as err:
        raise ExportError(f"{path} is not a valid SentencePiece model: {err}") from err


class Translator:
    """Sentences in, sentences out, over any Backend; greedy (beam_size=1) or beam search."""

    def __init__(self, manifest: Manifest, backend: generation.Backend):
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
                   max_length: int | None = None, no_repeat_ngram_size: int = 0,
                   min_length: int = 0) -> SearchResult:
        """source_ids (B,S) padded ids ending in EOS -> SearchResult (greedy if beam 1); the
        options are those of keras_transformer.generation.search_ids."""
        return generation.search_ids(self.backend, source_ids, self, beam_size=beam_size,
                                     alpha=alpha, max_length=max_length,
                                     no_repeat_ngram_size=no_repeat_ngram_size,
                                     min_length=min_length)

    def encode(self, sentences: Sequence[str], truncate: bool = True) -> list[list[int] | None]:
        """Sentences -> id lists ending in EOS (None for blank ones); see text.sources."""
        return encode_sources(sentences, lambda texts: self.source_sp.encode(texts, out_type=int),
                              self.max_source_length, self.eos_id, truncate=truncate,
                              allow_empty=True)

    def translate_ids(self, sentences: Sequence[str], *, beam_size: int = 4,
                      alpha: float = 0.6, batch_size: int = 64, truncate: bool = True,
                      progress=None, no_repeat_ngram_size: int = 0,
                      min_length: int = 0) -> list[list[int]]:
        """Sentences -> generated ids up to EOS (empty for blank sentences), in input order;
        no_repeat_ngram_size and min_length are those of keras_transformer.decoding (0: off)."""
        if isinstance(sentences, str):
            raise TypeError("translate expects a list of sentences, not a single str")

        def search_batch(source_ids):
            return self.search_ids(source_ids, beam_size=beam_size, alpha=alpha,
                                   no_repeat_ngram_size=no_repeat_ngram_size,
                                   min_length=min_length)

        return generation.search_batches(self.encode(sentences, truncate), search_batch, self,
                                         batch_size=batch_size, progress=progress)

    def translate(self, sentences: Sequence[str], **kwargs) -> list[str]:
        """Sentences -> translations in input order; blank sentences give "". The keyword
        arguments are those of `translate_ids`."""
        return self.decode_ids(self.translate_ids(sentences, **kwargs))

    def decode_ids(self, rows: Sequence[Sequence[int]]) -> list[str]:
        """Generated ids (as `translate_ids` gives them) -> text, PAD and BOS dropped."""
        special = {self.pad_id, self.bos_id}
        return [self.target_sp.decode([t for t in row if t not in special]) for row in rows]
