"""What the API server (export.api) runs for each kind of export: an engine checks a request's
inputs and options (`prepare`, in the request's task, so that a bad input fails its own
request only) and runs a batch of prepared inputs (`run`, in a worker of export.batching).

Each engine wraps the runner the line tools use (Translator, Generator, Classifier,
Summarizer), so an answer is what export.translate, export.generate, export.classify or
export.summarize print for that input alone. A batch key holds everything that changes an
input's answer besides the input: inputs are batched only with inputs of the same key.

NumPy, sentencepiece and the runtime's package only (no web packages).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from keras_transformer.decoding import SearchSettings, sample_search, search
from keras_transformer.decoding.settings import SEQ2SEQ_KEYS
from keras_transformer.generation import BackendStepper
from keras_transformer.text.sources import default_max_length, pad_batch

from .common import ExportError, Manifest
from .explorer import InputError
from .kinds import kind_of, open_manifest, open_runner
from .runtime.base import LMStepper

# Request options each kind takes, with what they mean (the OpenAPI description shows them).
SEQ2SEQ_OPTIONS = {
    "beam_size": ("integer", "beam size; 1 is greedy (default: the run's)"),
    "alpha": ("number", "length penalty exponent (default: the run's)"),
    "no_repeat_ngram_size": ("integer", "ban repeated n-grams of this size; 0 is off"),
    "min_length": ("integer", "generate at least this many tokens before EOS"),
    "max_length": ("integer", "most tokens to generate, EOS included (default: 1.5 x the "
                              "source + 10, capped by the model)"),
}
LM_OPTIONS = {
    "max_new_tokens": ("integer", "tokens to generate, 1 to 4096 (default 60; fewer when the "
                                  "prompt leaves less room)"),
    "temperature": ("number", "sampling temperature (default: greedy, or 1 with top_k/top_p)"),
    "top_k": ("integer", "sample among the k most likely tokens (0: all)"),
    "top_p": ("number", "sample among the most likely tokens holding this probability"),
    "seed": ("integer", "seed of the samples (default 0)"),
}
_SENTENCE = re.compile(r"\bsentence (\d+)")


def _input_error(err: ValueError) -> InputError:
    """A runner's message about 'sentence N' (1-based) as one about inputs[N-1]."""
    return InputError(_SENTENCE.sub(lambda m: f"inputs[{int(m.group(1)) - 1}]", str(err)))


def _check_options(options: dict, known: dict) -> None:
    unknown = sorted(set(options) - set(known))
    if unknown:
        names = ", ".join(sorted(known)) or "none"
        raise InputError(f"unknown option {unknown[0]!r} for this model; its options are "
                         f"{names}")


class TranslatorEngine:
    """A translator's export (translation, or summarization by generation): inputs are
    sentences (articles), outputs their translations (summaries), searched as
    export.translate searches them, with the run's settings unless the request gives others.

    Batch key: the settings with max_length set from the input's length for a beam search
    (its hypotheses depend on the limit); a greedy row's tokens do not depend on the other
    rows or on a longer limit, so greedy inputs of any length share a batch, which runs to the
    longest limit, and each row is cut to its own."""

    kind = "translator"
    options = SEQ2SEQ_OPTIONS
    streams = True

    def __init__(self, manifest: Manifest, runtime: str = "onnx", variant: str = "float32",
                 run_dir=None):
        self.translator = open_runner(manifest, runtime, variant, run_dir)
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
        _check_options(options, self.options)
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
            raise _input_error(err) from None
        rows = []
        for ids in encoded:
            limit = settings.max_length or default_max_length(len(ids or ()), limit_cap)
            key = settings.replace(max_length=limit) if settings.beam_size > 1 else settings
            rows.append((key, (ids, limit), len(ids or ())))
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
                found = translator.search_ids(ids, settings).to_lists(translator.eos_id)
            for j, limit, tokens in zip(live, limits, found, strict=True):
                rows[j] = tokens[:limit]
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
        watcher = _TokenWatcher(stepper, [0] * len(ids), limits, translator.eos_id,
                                translator.target_sp, emit)
        result = search(watcher, len(ids), settings, bos_id=translator.bos_id,
                        eos_id=translator.eos_id, pad_id=translator.pad_id)
        found = result.to_lists(translator.eos_id)
        watcher.flush(found)
        return found


class _TokenWatcher:
    """A stepper that passes every step on and reports each row's tokens as the search
    feeds them back (the token fed at step i was decided at step i - 1): emit(row,
    {"token", "text"}), up to the row's EOS or its limit; `flush` reports the last ones,
    which no step reads."""

    def __init__(self, stepper, starts, limits, eos_id, sp, emit):
        self.stepper, self.starts, self.limits = stepper, starts, limits
        self.eos_id, self.sp, self.emit = eos_id, sp, emit
        self.seen = [[] for _ in starts]
        self.done = [False] * len(starts)

    def step(self, tokens, index):
        for row, token in enumerate(np.asarray(tokens).tolist()):
            if index > self.starts[row]:
                self._add(row, token)
        return self.stepper.step(tokens, index)

    def reorder(self, indices):
        self.stepper.reorder(indices)

    def _add(self, row: int, token: int) -> None:
        if self.done[row] or len(self.seen[row]) >= self.limits[row]:
            return
        if token == self.eos_id:
            self.done[row] = True
            return
        self.seen[row].append(int(token))
        self.emit(row, {"token": self.sp.id_to_piece(int(token)),
                        "text": self.sp.decode(self.seen[row])})

    def flush(self, found) -> None:
        for row, tokens in enumerate(found):
            for token in tokens[len(self.seen[row]):]:
                self._add(row, token)


class GeneratorEngine:
    """A language model's export: inputs are prompts, outputs the prompt and its
    continuation, as export.generate prints them (greedy unless a sampling option is given;
    max_new_tokens lowered to what fits after the prompt).

    Batch key: the settings and max_new_tokens; a sampled input runs alone (its samples
    would depend on the rows beside it), so a seed gives what export.generate gives."""

    kind = "lm"
    options = LM_OPTIONS
    streams = True
    route = "/v1/generate"
    _alone = itertools.count()

    def __init__(self, manifest: Manifest, runtime: str = "onnx", variant: str = "float32",
                 run_dir=None):
        self.generator = open_runner(manifest, runtime, variant, run_dir)
        self.task = manifest.task

    def info(self) -> dict:
        return {"max_length": self.generator.max_length}

    def settings(self, options: dict) -> tuple[SearchSettings, int]:
        from .generate import search_settings

        _check_options(options, self.options)
        max_new = options.get("max_new_tokens", 60)
        if isinstance(max_new, bool) or not isinstance(max_new, int) or \
                not 1 <= max_new <= 4096:
            raise InputError(f"max_new_tokens must be an integer in [1, 4096], got {max_new!r}")
        given = {name: options.get(name) for name in ("temperature", "top_k", "top_p")}
        try:  # export.generate's reading of the sampling options
            settings = search_settings(SimpleNamespace(**given, seed=options.get("seed", 0),
                                                       num_samples=1))
        except (ValueError, TypeError) as err:
            raise InputError(str(err)) from None
        return settings, max_new

    def prepare(self, inputs: list[str], options: dict, stream: bool = False) -> list[tuple]:
        settings, max_new = self.settings(options)
        rows = []
        for i, prompt in enumerate(inputs):
            try:
                ids = self.generator.encode(prompt)
            except ValueError as err:
                raise InputError(f"inputs[{i}]: {err}") from None
            new = min(max_new, self.generator.max_length - len(ids))
            alone = None if settings.temperature == 0 else next(self._alone)
            rows.append(((settings, new, alone), ids, len(ids)))
        return rows

    def run(self, key, items, emit=None) -> list[str]:
        settings, max_new, _ = key
        generator = self.generator
        if emit is None:
            new = generator.generate_ids(items, max_new, settings)
        else:
            stepper = LMStepper(generator.backend, len(items),
                                max(map(len, items)) + max_new)
            watcher = _TokenWatcher(stepper, [len(p) - 1 for p in items],
                                    [max_new] * len(items), generator.eos_id, generator.sp,
                                    emit)
            new = sample_search(watcher.step, items, max_new, eos_id=generator.eos_id,
                                pad_id=generator.pad_id, **settings.sampling)
            watcher.flush([[t for t in row if t != generator.eos_id] for row in new])
        return [generator.decode(list(prompt) + list(tokens))
                for prompt, tokens in zip(items, new, strict=True)]


class ClassifierEngine:
    """A classifier's export: inputs are sentences, outputs {"label", "score", "scores":
    {label: probability}}, as export.classify computes them (over-long sentences truncated).
    One batch key: every input batches with every other."""

    kind = "classifier"
    options: dict = {}
    streams = False
    route = "/v1/classify"
    # What one output is, for the OpenAPI description (the other engines answer strings).
    output_schema = {"type": "object", "properties": {
        "label": {"type": "string"}, "score": {"type": "number"},
        "scores": {"type": "object", "additionalProperties": {"type": "number"}}}}

    def __init__(self, manifest: Manifest, runtime: str = "onnx", variant: str = "float32",
                 run_dir=None):
        self.classifier = open_runner(manifest, runtime, variant, run_dir)
        self.task = manifest.task

    def info(self) -> dict:
        return {"max_source_length": self.classifier.max_source_length,
                "labels": self.classifier.labels}

    def prepare(self, inputs: list[str], options: dict, stream: bool = False) -> list[tuple]:
        _check_options(options, self.options)
        try:
            encoded = self.classifier.encode(inputs, truncate=True)
        except ValueError as err:
            raise InputError(re.sub(r"\bline (\d+)", lambda m: f"inputs[{int(m.group(1)) - 1}]",
                                    str(err))) from None
        return [(None, ids, len(ids)) for ids in encoded]

    def run(self, key, items, emit=None) -> list[dict]:
        classifier = self.classifier
        probabilities = np.asarray(classifier.runtime(classifier.batch_ids(items)), np.float32)
        out = []
        for row, [(label, score)] in zip(probabilities, classifier.top_k(probabilities, 1),
                                         strict=True):
            out.append({"label": label, "score": score,
                        "scores": dict(zip(classifier.labels, map(float, row), strict=True))})
        return out


class ExtractorEngine:
    """An extractive summarizer's export: inputs are articles, outputs their summaries (the
    chosen sentences in article order), as export.summarize writes them with the run's
    selection. One batch key."""

    kind = "extractor"
    options: dict = {}
    streams = False
    route = "/v1/summarize"

    def __init__(self, manifest: Manifest, runtime: str = "onnx", variant: str = "float32",
                 run_dir=None):
        self.summarizer = open_runner(manifest, runtime, variant, run_dir)
        self.task = manifest.task

    def info(self) -> dict:
        return {"max_source_length": self.summarizer.manifest["max_source_length"],
                "max_sentences": self.summarizer.max_sentences,
                "selection": self.summarizer.selection.describe()}

    def prepare(self, inputs: list[str], options: dict, stream: bool = False) -> list[tuple]:
        _check_options(options, self.options)
        for i, article in enumerate(inputs):
            if not article.strip():
                raise InputError(f"inputs[{i}] is empty or only whitespace; give every input "
                                 f"an article")
        return [(None, article, len(article)) for article in inputs]

    def run(self, key, items, emit=None) -> list[str]:
        return [extraction.summary for extraction in self.summarizer.extract(list(items))]


ENGINES = {engine.kind: engine for engine in
           (TranslatorEngine, GeneratorEngine, ClassifierEngine, ExtractorEngine)}


def open_engine(export_dir: str | Path, runtime: str = "onnx", variant: str = "float32",
                run_dir=None):
    """The engine of an export's kind (its manifest's), over one runtime."""
    manifest = open_manifest(export_dir)
    if manifest.kind not in ENGINES:
        from keras_transformer.command_line import command

        kind = kind_of(manifest)
        raise ExportError(f"{export_dir} holds a {kind.title}, which the API server does not "
                          f"serve; use {command(kind.tool)}")
    return ENGINES[manifest.kind](manifest, runtime, variant, run_dir)
