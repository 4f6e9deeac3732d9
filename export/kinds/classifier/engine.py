"""The API server's engine of a classifier's export (export.api: /v1/classify)."""

from __future__ import annotations

import numpy as np

from ...common import Manifest
from ...inputs import check_options, input_error


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

    def __init__(self, manifest: Manifest, classifier):
        self.classifier = classifier
        self.task = manifest.task

    def info(self) -> dict:
        return {"max_source_length": self.classifier.max_source_length,
                "labels": self.classifier.labels}

    def prepare(self, inputs: list[str], options: dict, stream: bool = False) -> list[tuple]:
        check_options(options, self.options)
        try:
            encoded = self.classifier.encode(inputs, truncate=True)
        except ValueError as err:
            raise input_error(err) from None
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
