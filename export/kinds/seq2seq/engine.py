"""The API server's engine of a translator's export (export.api: /v1/translate, or
/v1/summarize for a summarization run)."""

from __future__ import annotations

import numpy as np

from keras_transformer.decoding import SearchSettings, search
from keras_transformer.decoding.settings import SEQ2SEQ_KEYS
from keras_transformer.generation import BackendStepper
from keras_transformer.text.sources import default_max_length, pad_batch

from ...common import Manifest
from ...inputs import InputError, check_options, input_error
from ..decoding.engine import TokenWatcher

# Request options, with what they mean (the OpenAPI description shows them).
SEQ2SEQ_OPTIONS = {
    "beam_size": ("integer", "beam size; 1 is greedy (default: the run's)"),
    "alpha": ("number", "length penalty exponent (default: the run's)"),
    "no_repeat_ngram_size": ("integer", "ban repeated n-grams of this size; 0 is off"),
    "min_length": ("integer", "generate at least this many tokens before EOS"),
    "max_length": ("integer", "most tokens to generate, EOS included (default: 1.5 x the "
                              "source + 10, capped by the model)"),
}


class TranslatorEngine:
    """A translator's export (translation, or summarization by generation): inputs are
    sentences (articles), outputs their translations (summaries), searched as
    export.translate searches them, with the run's settings unless the request gives others.

    Batch key: the request's settings. Each input's length limit (the request's max_length,
    else the one its length gives) goes with it, and the batch's search ends each row at its
    own (`search_ids`' row_limits), as it would end alone: inputs of any length share a
    batch."""

    kind = "translator"
    options = SEQ2SEQ_OPTIONS
    streams = True

    def __init__(self, manifest: Manifest, translator):
        self.translator = translator
        self.task = manifest.task
        self.route = "/v1/summarize" if self.task == "summarization" else "/v1/translate"
        # As export.translate: an over-long article keeps its start; a translation of part of
        # a sentence would be wrong, so the input is refused instead.
        self.truncate = self.task == "summarization"
        self.default = manifest.search

    def info(self) -> dict:
        return {"max_source_length": self.translator.max_source_length,
                "max_target_length": self.translator.max_target_length,
                **self.default.to_dict(SEQ2SEQ_KEYS)}

    def settings(self, options: dict) -> SearchSettings:
        check_options(options, self.options)
        try:
            return self.default.replace(**options)
        except (ValueError, TypeError) as err:
            raise InputError(str(err)) from None

    def prepare(self, inputs: list[str], options: dict, stream: bool = False) -> list[tuple]:
        """-> (key, (ids or None for a blank input, limit), length) per input."""
        settings = self.settings(options)
        limit_cap = self.translator.max_target_length
        if settings.max_length is not None and settings.max_length > limit_cap:
            raise InputError(f"max_length={settings.max_length} is more than this model's "
                             f"max_target_length={limit_cap}")
        try:
            encoded = self.translator.encode(inputs, truncate=self.truncate)
        except ValueError as err:
            raise input_error(err) from None
        rows = []
        for ids in encoded:
            limit = settings.max_length or default_max_length(len(ids or ()), limit_cap)
            rows.append((settings, (ids, limit), len(ids or ())))
        return rows

    def run(self, key: SearchSettings, items, emit=None) -> list[str]:
        translator = self.translator
        live = [j for j, (ids, _) in enumerate(items) if ids is not None]
        rows: list[list[int]] = [[] for _ in items]
        if live:
            limits = [items[j][1] for j in live]
            settings = key.replace(max_length=max(limits))
            ids = pad_batch([items[j][0] for j in live], translator.pad_id)
            if emit is not None and settings.beam_size == 1:
                found = self._stream(ids, settings, limits,
                                     lambda r, event: emit(live[r], event))
            else:
                found = translator.search_ids(ids, settings, row_limits=limits).to_lists(
                    translator.eos_id)
            for j, tokens in zip(live, found, strict=True):
                rows[j] = tokens
        texts = translator.decode_ids([rows[j] for j in live]) if live else []
        out = [""] * len(items)
        for j, text in zip(live, texts, strict=True):
            out[j] = text
        return out

    def _stream(self, ids: np.ndarray, settings: SearchSettings, limits, emit):
        """Greedy search stepped in NumPy (the steps the export's search graph would run in
        one call), each row's tokens emitted as they are decided."""
        translator = self.translator
        stepper = BackendStepper(translator.backend, ids, beam_size=1,
                                 max_length=settings.max_length)
        watcher = TokenWatcher(stepper, [0] * len(ids), limits, translator.eos_id,
                                translator.target_sp, emit)
        result = search(watcher, len(ids), settings, bos_id=translator.bos_id,
                        eos_id=translator.eos_id, pad_id=translator.pad_id, row_limits=limits)
        found = result.to_lists(translator.eos_id)
        watcher.flush(found)
        return found
