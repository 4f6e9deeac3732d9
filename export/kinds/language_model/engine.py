"""The API server's engine of a language model's export (export.api: /v1/generate)."""

from __future__ import annotations

import itertools

from keras_transformer.decoding import SearchSettings, sample_search

from ...common import Manifest
from ...inputs import InputError, check_options
from ...runtime.base import LMStepper
from ..decoding.engine import TokenWatcher

# Request options, with what they mean (the OpenAPI description shows them).
LM_OPTIONS = {
    "max_new_tokens": ("integer", "tokens to generate, 1 to 4096 (default 60; fewer when the "
                                  "prompt leaves less room)"),
    "temperature": ("number", "sampling temperature (default: greedy, or 1 with top_k/top_p)"),
    "top_k": ("integer", "sample among the k most likely tokens (0: all)"),
    "top_p": ("number", "sample among the most likely tokens holding this probability"),
    "seed": ("integer", "seed of the samples (default 0)"),
}


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

    def __init__(self, manifest: Manifest, generator):
        self.generator = generator
        self.task = manifest.task

    def info(self) -> dict:
        return {"max_length": self.generator.max_length}

    def settings(self, options: dict) -> tuple[SearchSettings, int]:
        check_options(options, self.options)
        max_new = options.get("max_new_tokens", 60)
        if isinstance(max_new, bool) or not isinstance(max_new, int) or \
                not 1 <= max_new <= 4096:
            raise InputError(f"max_new_tokens must be an integer in [1, 4096], got {max_new!r}")
        try:  # export.generate's reading of the sampling options
            settings = SearchSettings.for_sampling(
                **{name: options.get(name) for name in ("temperature", "top_k", "top_p")},
                seed=options.get("seed", 0))
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
            watcher = TokenWatcher(stepper, [len(p) - 1 for p in items],
                                    [max_new] * len(items), generator.eos_id, generator.sp,
                                    emit)
            new = sample_search(watcher.step, items, max_new, eos_id=generator.eos_id,
                                pad_id=generator.pad_id, **settings.sampling)
            watcher.flush([[t for t in row if t != generator.eos_id] for row in new])
        return [generator.decode(list(prompt) + list(tokens))
                for prompt, tokens in zip(items, new, strict=True)]
