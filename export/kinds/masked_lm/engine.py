"""The API server's engine of a masked language model's export (export.api: /v1/fill_mask)."""

from __future__ import annotations

from ...common import Manifest
from ...inputs import InputError, check_options, input_error

MAX_TOP_K = 1000  # export.fill_mask's --top-k bound

FILL_OPTIONS = {
    "top_k": ("integer", f"pieces per [MASK], best first, 1 to {MAX_TOP_K} and at most the "
                         f"vocabulary (default 5)"),
}


class FillMaskEngine:
    """A masked language model's export: inputs are texts holding [MASK]s, an output is per
    [MASK] (in text order) its top_k pieces, best first, each {"piece", "id", "score"}, as
    export.fill_mask prints them (over-long texts truncated, a [MASK] cut off refused).
    Batch key: top_k."""

    kind = "masked_lm"
    options = FILL_OPTIONS
    streams = False
    route = "/v1/fill_mask"
    output_schema = {"type": "array", "items": {"type": "array", "items": {
        "type": "object", "properties": {"piece": {"type": "string"},
                                         "id": {"type": "integer"},
                                         "score": {"type": "number"}}}}}

    def __init__(self, manifest: Manifest, fill_mask):
        self.fill_mask = fill_mask
        self.task = manifest.task
        self.vocab = manifest["vocab"]["source_size"]

    def info(self) -> dict:
        return {"max_source_length": self.fill_mask.max_source_length,
                "mask": self.fill_mask.mask_piece}

    def top_k(self, options: dict) -> int:
        check_options(options, self.options)
        k = options.get("top_k", 5)
        bound = min(MAX_TOP_K, self.vocab)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= bound:
            raise InputError(f"top_k must be an integer in [1, {bound}] (the vocabulary holds "
                             f"{self.vocab} pieces), got {k!r}")
        return k

    def prepare(self, inputs: list[str], options: dict, stream: bool = False) -> list[tuple]:
        k = self.top_k(options)
        try:
            encoded = self.fill_mask.encode(inputs, truncate=True)
        except ValueError as err:
            raise input_error(err) from None
        return [(k, ids, len(ids)) for ids in encoded]

    def run(self, key, items, emit=None) -> list[list[list[dict]]]:
        return [[[{"piece": fill.piece, "id": fill.id, "score": fill.probability}
                  for fill in fills] for fills in masks]
                for masks in self.fill_mask.fill_batch(list(items), key)]
