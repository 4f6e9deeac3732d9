"""The API server's engine of an extractive summarizer's export (export.api: /v1/summarize)."""

from __future__ import annotations

from ...common import Manifest
from ...inputs import InputError, check_options


class ExtractorEngine:
    """An extractive summarizer's export: inputs are articles, outputs their summaries (the
    chosen sentences in article order), as export.summarize writes them with the run's
    selection. One batch key."""

    kind = "extractor"
    options: dict = {}
    streams = False
    route = "/v1/summarize"

    def __init__(self, manifest: Manifest, summarizer):
        self.summarizer = summarizer
        self.task = manifest.task

    def info(self) -> dict:
        return {"max_source_length": self.summarizer.manifest["max_source_length"],
                "max_sentences": self.summarizer.max_sentences,
                "selection": self.summarizer.selection.describe()}

    def prepare(self, inputs: list[str], options: dict, stream: bool = False) -> list[tuple]:
        check_options(options, self.options)
        for i, article in enumerate(inputs):
            if not article.strip():
                raise InputError(f"inputs[{i}] is empty or only whitespace; give every input "
                                 f"an article")
        return [(None, article, len(article)) for article in inputs]

    def run(self, key, items, emit=None) -> list[str]:
        return [extraction.summary for extraction in self.summarizer.extract(list(items))]
