"""What the explorers of the encoder-only kinds share (export.serve): an export of their kind,
no search options, and the encoder's sizes in `info`."""

from __future__ import annotations

from ...common import Manifest


class EncoderOnlyExplorer:
    """An explorer over an encoder-only kind's export; a kind's explorer adds its runner and
    what `explain` returns."""

    kind = ""
    route = ""
    title = ""  # in the refusal of an export of another kind
    searches = False  # whether it takes --beam and --alpha

    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        self.manifest.require_kind(self.kind, self.title)
        self.task = self.manifest.task
        model = self.manifest.model
        self.num_layers = model.get("num_encoder_layers")
        self.num_heads = model.get("num_heads")

    def info(self) -> dict:
        return {"kind": self.kind, "task": self.task, "encoder_layers": self.num_layers,
                "heads": self.num_heads,
                "max_source_length": self.manifest["max_source_length"]}
