"""What every runtime of an export directory shares: a Backend sized by its manifest;
sentences in, sentences out over keras_transformer.generation (`Translator`); and a prompt in,
its continuations out over keras_transformer.decoding.sample_search (`Generator`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import sentencepiece as spm

from keras_transformer import generation
from keras_transformer.decoding import SearchSettings, sample_search
from keras_transformer.text.sources import encode_sources

from ..common import ExportError, Manifest

log = logging.getLogger("export")


class Backend(generation.Backend):
    """generation.Backend with the decoder's geometry read from an export's manifest (first in
    the bases of a runtime that also derives from another Backend)."""

    def __init__(self, manifest: Manifest):
        model = manifest.model
        super().__init__(num_layers=model["num_decoder_layers"], num_heads=model["num_heads"],
                         d_model=model["d_model"],
                         copy_attention=bool(model.get("copy_attention", False)))
        self.manifest = manifest


def training_run(manifest: Manifest, run_dir=None) -> Path:
    """The training run of an export, for the keras runtime: the directory given, else the
    export directory's parent when the export sits inside its run (the run path the manifest
    records is never followed); ExportError when it holds no model.keras."""
    if run_dir is None:
        run_dir = manifest.root.resolve().parent
        if not (run_dir / "model.keras").is_file():
            raise ExportError(
                f"the keras runtime needs the training run: {manifest.root} is not inside a run "
                f"directory; pass it with --run")
    run_dir = Path(run_dir)
    if not (run_dir / "model.keras").is_file():
        raise ExportError(f"the keras runtime needs the training run; {run_dir / 'model.keras'} "
                          f"is missing (pass the run directory with --run)")
    return run_dir


def load_sentencepiece(path) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as err:
        raise ExportError(f"{path} is not a valid SentencePiece model: {err}") from err


class PieceRows:
    """Lines -> the rows an encoder-only export reads (a classifier's, a masked language
    model's): each line's pieces + EOS (over-long ones truncated to max_source_length with EOS
    kept, or refused), batched right-padded with PAD."""

    purpose = "text"  # what every line must hold, for the message of a blank one

    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        self.sp = load_sentencepiece(manifest.file(manifest["tokenizer"]["source"]))
        ids = manifest.special_ids
        self.pad_id, self.eos_id = ids["pad"], ids["eos"]
        self.max_source_length = manifest["max_source_length"]

    def encode(self, sentences: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """Sentences -> id lists ending in EOS. A blank sentence is a ValueError naming its
        line (1-based): nothing would be an answer for it."""
        for number, sentence in enumerate(sentences, start=1):
            if not sentence.strip():
                raise ValueError(f"line {number} is empty or only whitespace; give every line "
                                 f"{self.purpose}")
        return encode_sources(sentences, lambda texts: self.sp.encode(texts, out_type=int),
                              self.max_source_length, self.eos_id, truncate=truncate)

    def batch_ids(self, encoded: Sequence[Sequence[int]]) -> np.ndarray:
        """Id lists -> (B, longest) int32, right-padded with PAD."""
        ids = np.full((len(encoded), max(map(len, encoded))), self.pad_id, np.int32)
        for row, tokens in enumerate(encoded):
            ids[row, :len(tokens)] = tokens
        return ids


class Translator(generation.Translator):
    """generation.Translator over any Backend of a translator's export, with the manifest's
    SentencePiece models and special ids."""

    def __init__(self, manifest: Manifest, backend: generation.Backend):
        manifest.require_kind("translator", "a Translator")
        self.manifest = manifest
        source, target = manifest.tokenizer_files()
        self.source_sp = load_sentencepiece(source)
        self.target_sp = self.source_sp if target == source else load_sentencepiece(target)
        ids = manifest.special_ids
        special = {ids["pad"], ids["bos"]}
        super().__init__(
            backend, _Limits(ids["pad"], ids["bos"], ids["eos"], manifest["max_source_length"],
                             manifest["max_target_length"]),
            lambda texts: self.source_sp.encode(texts, out_type=int),
            lambda rows: [self.target_sp.decode([t for t in row if t not in special])
                          for row in rows])


class _Limits(NamedTuple):
    pad_id: int
    bos_id: int
    eos_id: int
    max_source_length: int
    max_target_length: int


class LMStepper(generation.BackendStepper):
    """The `step(tokens, index)` of keras_transformer.decoding over a language model's Backend:
    a BackendStepper with no encoder, so no memory; `max_length` cache slots for `batch` rows."""

    def __init__(self, backend: generation.Backend, batch: int, max_length: int):
        self.backend = backend
        self.memory, self.memory_mask = [], None  # what a step without cross-attention reads
        self.cache = backend.init_cache(batch, max_length)
        self._filled = 0


class Generator:
    """A prompt in, its continuations out, over any Backend of a language model's export:
    the prompt's pieces after BOS, fed one token per step, then greedy or sampled tokens
    (keras_transformer.decoding.sample_search, as TransformerLM.generate runs it)."""

    def __init__(self, manifest: Manifest, backend: generation.Backend):
        manifest.require_kind("lm", "a Generator")
        self.manifest = manifest
        self.backend = backend
        self.sp = load_sentencepiece(manifest.tokenizer_files()[1])
        ids = manifest.special_ids
        self.pad_id, self.bos_id, self.eos_id = ids["pad"], ids["bos"], ids["eos"]
        self.max_length = manifest["max_target_length"]

    def encode(self, prompt: str) -> list[int]:
        """A prompt -> BOS + its pieces; ValueError for a blank prompt or one that leaves no
        position to generate into."""
        if not prompt.strip():
            raise ValueError("the prompt is empty; give some text to continue")
        ids = [self.bos_id, *self.sp.encode(prompt, out_type=int)]
        if len(ids) >= self.max_length:
            raise ValueError(f"the prompt is {len(ids)} tokens with BOS, and this model reads at "
                             f"most {self.max_length} (prompt and new tokens together); shorten "
                             f"the prompt")
        return ids

    def generate_ids(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                     settings: SearchSettings = SearchSettings()) -> list[list[int]]:
        """Id prompts (each starting with BOS) -> the new tokens of each, up to and including
        EOS, by `settings.sampling` (greedy at temperature 0, else sampled; see
        keras_transformer.decoding.sample_search). The cache holds the longest prompt plus
        max_new_tokens, as TransformerLM.generate's."""
        total = max(len(p) for p in prompts) + max_new_tokens
        if total > self.max_length:
            raise ValueError(f"prompt + max_new_tokens = {total} tokens exceeds this model's "
                             f"maximum of {self.max_length}; generate fewer tokens")
        stepper = LMStepper(self.backend, len(prompts), total)
        return sample_search(stepper.step, prompts, max_new_tokens, eos_id=self.eos_id,
                             pad_id=self.pad_id, **settings.sampling)

    def decode(self, ids: Sequence[int]) -> str:
        """Ids -> text, without the special ids (EOS, PAD, BOS)."""
        special = {self.pad_id, self.bos_id, self.eos_id}
        return self.sp.decode([int(t) for t in ids if t not in special])

    def generate(self, prompt: str, max_new_tokens: int,
                 settings: SearchSettings = SearchSettings()) -> list[str]:
        """A prompt -> `settings.num_samples` texts, each the prompt and its continuation (one
        search of num_samples rows, so a seed gives the same samples in every runtime whose
        logits agree), searched as in `generate_ids`. max_new_tokens is lowered, with a warning,
        to what fits in the model's maximum length after the prompt."""
        ids = self.encode(prompt)
        room = self.max_length - len(ids)
        if max_new_tokens > room:
            log.warning("the prompt is %d tokens with BOS and the model reads at most %d: "
                        "generating %d new tokens, not %d", len(ids), self.max_length, room,
                        max_new_tokens)
            max_new_tokens = room
        outputs = self.generate_ids([ids] * settings.num_samples, max_new_tokens, settings)
        return [self.decode(ids + new) for new in outputs]
