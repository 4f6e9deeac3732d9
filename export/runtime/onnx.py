"""encoder.onnx and decoder_step.onnx in onnxruntime; the cache is a NumPy array, written in place."""

from __future__ import annotations

import numpy as np

from export.common import ExportError, Manifest
from export.runtime.base import Backend


class OnnxBackend(Backend):
    name = "onnx"

    def __init__(self, manifest: Manifest, variant: str = "float32", threads: int = 0):
        super().__init__(manifest)
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise ExportError("the onnx runtime needs onnxruntime: pip install onnxruntime==1.31.1"
                              ) from err

        files = manifest.format_files("onnx", variant)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        self.sessions = {}
        for role in ("encoder", "decoder_step"):
            path = manifest.file(files[role])
            try:
                self.sessions[role] = ort.InferenceSession(
                    str(path), options, providers=["CPUExecutionProvider"])
            except Exception as err:  # onnxruntime raises its own Fail/InvalidProtobuf types
                raise ExportError(f"{path} could not be loaded by onnxruntime: {err}") from err

    def encode(self, source_ids):
        cross_key_values, memory_mask = self.sessions["encoder"].run(
            ["cross_key_values", "memory_mask"], {"source_ids": source_ids})
        return cross_key_values, memory_mask

    def decode_step(self, tokens, cross_key_values, memory_mask, cache, index):
        return self.sessions["decoder_step"].run(["logits", "step_key_values"], {
            "tokens": tokens, "cross_key_values": cross_key_values,
            "memory_mask": memory_mask, "cache": cache, "index": np.asarray(index, np.int32)})
