"""The explorer of an extractive summarizer's export (export.serve: /summarize): each
sentence of one article with its probability, the chosen ones marked."""

from __future__ import annotations

from ...common import Manifest
from ...inputs import InputError, check_text
from ..encoder_only.explorer import EncoderOnlyExplorer


class ExtractorExplorer(EncoderOnlyExplorer):
    """Summarize one article as `python -m export.summarize` does (the same Summarizer over
    the onnx runtime's float32 extractor.onnx and the run's selection) and return every
    sentence it read with its probability, the chosen ones marked. An extractor has no
    attention export; the page shows the sentences shaded by their probability instead.

    Thread-safe: the onnxruntime session is made once, before serving; the Summarizer's
    counts of cut articles are the only state a call changes, and none is read from it."""

    kind = "extractor"
    route = "/summarize"
    title = "the extractive summarizer's explorer"

    def __init__(self, manifest: Manifest, summarizer):
        super().__init__(manifest)
        self.summarizer = summarizer
        self.sentence_layers = self.manifest.model.get("sentence_layers")

    def info(self) -> dict:
        return {**super().info(), "sentence_layers": self.sentence_layers,
                "max_sentences": self.summarizer.max_sentences,
                "selection": self.summarizer.selection.describe()}

    def explain(self, text: str) -> dict:
        """article -> {"summary", "sentences", "scores", "chosen", "truncated",
        "sentences_not_read"}: the sentences the model read (its first max_sentences), the
        probability of each that the summary takes it, the chosen ones (0-based, in article
        order), whether a sentence was cut to max_source_length pieces, and how many
        sentences past max_sentences were not read."""
        from keras_transformer.text.sentences import split_sentences

        text = check_text(text)
        summarizer = self.summarizer
        [article] = summarizer.prepare([text])
        sentences = split_sentences(article)
        encoded = summarizer.scorer.encode(sentences[: summarizer.max_sentences])
        if not any(encoded):
            raise InputError('"text" gives no tokens for this model; type an article')
        [extraction] = summarizer.extract([text])
        length = self.manifest["max_source_length"]
        return {
            "summary": extraction.summary,
            "sentences": extraction.sentences,
            "scores": [float(p) for p in extraction.scores],
            "chosen": extraction.chosen,
            "truncated": any(len(ids) + 1 > length for ids in encoded),
            "sentences_not_read": max(0, len(sentences) - summarizer.max_sentences),
        }
