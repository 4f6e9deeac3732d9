"""The `encode` and `decode_step` signatures of a .tflite model in the ai_edge_litert interpreter."""

from __future__ import annotations

import os

import numpy as np

from export.common import ExportError, Manifest
from export.runtime.base import Backend


class TFLiteBackend(Backend):
    name = "tflite"

    def __init__(self, manifest: Manifest, variant: str = "float32", threads: int | None = None):
        super().__init__(manifest)
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError as err:
            raise ExportError("the tflite runtime needs LiteRT: pip install ai-edge-litert==2.3.0"
                              ) from err

        path = manifest.file(manifest.format_files("tflite", variant)["model"])
        try:
            # LiteRT picks its own default (often one thread); use every core, as onnxruntime
            # and TF do, unless told otherwise.
            self.interpreter = Interpreter(model_path=str(path),
                                           num_threads=threads or os.cpu_count())
            self.encode_runner = self.interpreter.get_signature_runner("encode")
            self.step_runner = self.interpreter.get_signature_runner("decode_step")
        except (ValueError, RuntimeError) as err:
            raise ExportError(f"{path} could not be loaded as a TFLite model: {err}") from err

    def encode(self, source_ids):
        out = self.encode_runner(source_ids=source_ids)
        return [out[name] for name in self._memory_names], out["memory_mask"]

    def decode_step(self, tokens, memory, memory_mask, cache, index):
        # The runner copies every input into the interpreter: one copy of the cache per step.
        out = self.step_runner(tokens=tokens, memory_mask=memory_mask,
                               index=np.asarray(index, np.int32),
                               **dict(zip(self._memory_names, memory, strict=True)),
                               **dict(zip(self._cache_names, cache, strict=True)))
        return out["logits"], out["step_key_values"]
