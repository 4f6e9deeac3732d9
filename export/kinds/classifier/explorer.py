"""The explorer of a classifier's export (export.serve: /classify): the class of one sentence
and its encoder self-attention weights, over the onnx runtime and attention.onnx."""

from __future__ import annotations

import numpy as np

from ...common import Manifest
from ...inputs import InputError, check_text
from ..encoder_only.explorer import EncoderOnlyExplorer
from .runtime import attention_runtime


class ClassifierExplorer(EncoderOnlyExplorer):
    """Classify one sentence as `python -m export.classify` does (the same Classifier over
    the onnx runtime's float32 classifier.onnx, the sentence in a batch of its own, truncated
    to max_source_length as the tool truncates by default) and add its encoder
    self-attention weights from attention.onnx.

    Thread-safe: both onnxruntime sessions are made once, before serving; onnxruntime's
    `run` and sentencepiece's encode may be called from several threads."""

    kind = "classifier"
    route = "/classify"
    title = "the classifier explorer"

    def __init__(self, manifest: Manifest, classifier):
        super().__init__(manifest)
        self.attention = attention_runtime(self.manifest)  # names --with-attention if absent
        self.classifier = classifier

    def info(self) -> dict:
        return {**super().info(), "labels": self.classifier.labels}

    def explain(self, text: str) -> dict:
        """text -> {"label", "probability", "probabilities": {label: probability, in class
        order}, "tokens", "truncated", "attention": {"encoder_self": nested lists
        [layer][head][row][column]}}.

        `label` and `probability` are what export.classify prints for that line (it prints
        the probability with 4 decimals); `tokens` are the pieces and `</s>` the model read
        (rows and columns of the weights)."""
        text = check_text(text)
        classifier = self.classifier
        try:
            (ids,) = classifier.encode([text], truncate=True)
        except ValueError as err:  # pieces of nothing, e.g. only characters the model drops
            raise InputError(f'"text" gives no tokens for this model ({err})') from None
        truncated = len(classifier.sp.encode(text)) + 1 > len(ids)
        # Classifier.probabilities on this one sentence: a batch of its own, no padding.
        batch = classifier.batch_ids([ids])
        probabilities = np.asarray(classifier.runtime(batch), np.float32)
        [(label, probability)] = classifier.top_k(probabilities, 1)[0]
        weights = self.attention(batch)["encoder_self"][0]
        return {
            "label": label,
            "probability": probability,
            "probabilities": dict(zip(classifier.labels, map(float, probabilities[0]),
                                      strict=True)),
            "tokens": [classifier.sp.id_to_piece(int(i)) for i in ids],
            "truncated": bool(truncated),
            "attention": {"encoder_self": weights.tolist()},
        }
