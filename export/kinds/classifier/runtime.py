"""Sentences in, class probabilities out, over a classifier export (manifest kind
"classifier") in any runtime: `Classifier`, over a callable `ids (B,S) int32 ->
probabilities (B,C) float32` (export.runtime.load_backend gives one per runtime).
`attention_runtime` runs the attention.onnx of an export made with --with-attention (the
attention explorer's weights). NumPy, sentencepiece and onnxruntime only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from keras_transformer.text.sources import batches_by_length

from ...common import ExportError, Manifest
from ...runtime.base import PieceRows
from ...runtime.onnx import inference_session, session_options

ATTENTION_OUTPUTS = ("probabilities", "encoder_self")


def attention_runtime(manifest: Manifest, threads: int = 0
                      ) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """attention.onnx of a classifier export made with --with-attention (ExportError naming
    the flag otherwise): ids (B,S) int32 as classify takes them -> {"probabilities" (B,C),
    "encoder_self" (B,L,H,S,S)} float32, every encoder layer's self-attention weights."""
    manifest.require_kind("classifier", "the classifier's attention runtime")
    session = inference_session(manifest.attention_file(), session_options(threads))
    outputs = {o.name for o in session.get_outputs()}
    if not outputs.issuperset(ATTENTION_OUTPUTS):
        raise ExportError(f"{manifest.attention_file()} has the outputs {sorted(outputs)}, not "
                          f"{', '.join(ATTENTION_OUTPUTS)}; export it again with "
                          f"--with-attention")

    def run(ids):
        got = session.run(list(ATTENTION_OUTPUTS), {"ids": np.asarray(ids, np.int32)})
        return dict(zip(ATTENTION_OUTPUTS, got, strict=True))

    return run


class Classifier(PieceRows):
    """Sentences -> class probabilities over one runtime of a classifier export. Sentences
    are encoded as in training (pieces + EOS; over-long ones truncated to max_source_length
    with EOS kept, or refused), and run in batches padded to their longest sentence."""

    purpose = "text to classify"

    def __init__(self, manifest: Manifest, runtime: Callable[[np.ndarray], np.ndarray]):
        manifest.require_kind("classifier", "a Classifier")
        super().__init__(manifest)
        self.runtime = runtime
        self.labels = list(manifest["labels"])
        self.lowercase = manifest.data.get("lowercase", False)

    def encode(self, sentences: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """Sentences -> id lists ending in EOS, lower-cased first when the run read its text
        so (data.lowercase: a fine-tune of a lower-cased masked LM)."""
        if self.lowercase:
            sentences = [s.lower() for s in sentences]
        return super().encode(sentences, truncate)

    def probabilities(self, sentences: Sequence[str], batch_size: int = 64,
                      truncate: bool = True) -> np.ndarray:
        """Sentences -> (N, C) float32 class probabilities, in input order."""
        encoded = self.encode(sentences, truncate)
        out = np.zeros((len(encoded), len(self.labels)), np.float32)
        for rows in batches_by_length(encoded, batch_size):
            out[rows] = np.asarray(self.runtime(self.batch_ids([encoded[i] for i in rows])))
        return out

    def top_k(self, probabilities: np.ndarray, k: int = 1) -> list[list[tuple[str, float]]]:
        """(N, C) probabilities -> per row the k most probable (label, probability), best
        first (ties: the lower class id first)."""
        best = np.argsort(-probabilities, axis=-1, kind="stable")[:, :k]
        return [[(self.labels[c], float(row[c])) for c in cols]
                for row, cols in zip(probabilities, best, strict=True)]
