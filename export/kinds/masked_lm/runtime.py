"""Lines with [MASK] in, the most probable pieces for each [MASK] out, over a masked language
model's export (manifest kind "masked_lm") in any runtime: `FillMask`, over a callable
`ids (B,S) int32 -> logits (B,S,V) float32` (export.runtime.load_backend gives one per
runtime). NumPy and sentencepiece only (and the chosen runtime's package)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from keras_transformer.text.sources import batches_by_length

from ...common import Manifest
from ...runtime.base import PieceRows


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(N, V) logits -> the k most probable ids of each row (N, k), best first (ties: the
    lower id first), and their softmax probabilities (N, k) float64."""
    logits = np.asarray(logits, np.float64)
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities = exp / exp.sum(-1, keepdims=True)
    best = np.argsort(-probabilities, axis=-1, kind="stable")[:, :k]
    return best, np.take_along_axis(probabilities, best, axis=-1)


class Fill(NamedTuple):
    """One candidate for one [MASK]: its piece (SentencePiece's, "▁" starting a word), id and
    probability."""

    piece: str
    id: int
    probability: float


class FillMask(PieceRows):
    """Lines -> the top pieces for each of their [MASK]s over one runtime of a masked language
    model's export. A line is read as the run read its text (lower-cased, VNDS word joints
    split, as the manifest says; the [MASK]s kept as written), encoded as in training (pieces
    + EOS) and run in batches padded to their longest line."""

    def __init__(self, manifest: Manifest, runtime: Callable[[np.ndarray], np.ndarray]):
        manifest.require_kind("masked_lm", "a FillMask")
        super().__init__(manifest)
        self.runtime = runtime
        self.mask_piece, self.mask_id = manifest["mask"]["piece"], manifest["mask"]["id"]
        self.purpose = f"text with a {self.mask_piece} to fill"
        self.lowercase = manifest.data.get("lowercase", False)
        self.word_joints = manifest.data.get("word_joints", "keep")

    def prepare(self, line: str) -> str:
        """A line as the run's text was read, its [MASK]s untouched."""
        parts = line.split(self.mask_piece)
        if self.word_joints == "split":
            parts = [p.replace("_", " ") for p in parts]
        if self.lowercase:
            parts = [p.lower() for p in parts]
        return self.mask_piece.join(parts)

    def encode(self, lines: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """Lines -> id lists ending in EOS; ValueError naming the first line that is blank,
        holds no [MASK], or (truncated) would lose one."""
        encoded = super().encode([self.prepare(line) for line in lines], truncate)
        for number, (line, ids) in enumerate(zip(lines, encoded, strict=True), start=1):
            written = line.count(self.mask_piece)
            if not written:
                raise ValueError(f"line {number} has no {self.mask_piece}; write "
                                 f"{self.mask_piece} where a piece is to be filled")
            if ids.count(self.mask_id) < written:
                raise ValueError(f"line {number} has a {self.mask_piece} after the first "
                                 f"{self.max_source_length - 1} pieces the model reads; "
                                 f"shorten the line")
        return encoded

    def row_fills(self, logits: np.ndarray, ids: np.ndarray, k: int) -> list[list[Fill]]:
        """One row's logits (S, V) and ids (S,) -> per [MASK] (in row order) its k most
        probable pieces, best first."""
        best, probabilities = top_k(np.asarray(logits)[np.asarray(ids) == self.mask_id], k)
        return [[Fill(self.sp.id_to_piece(int(i)), int(i), float(p))
                 for i, p in zip(row, probs, strict=True)]
                for row, probs in zip(best, probabilities, strict=True)]

    def fill_batch(self, encoded: Sequence[Sequence[int]], k: int) -> list[list[list[Fill]]]:
        """Encoded lines (`encode`'s), run as one batch padded to the longest -> per line,
        per [MASK], its k most probable pieces."""
        ids = self.batch_ids(encoded)
        logits = np.asarray(self.runtime(ids))
        return [self.row_fills(logits[row], ids[row], k) for row in range(len(encoded))]

    def fill(self, lines: Sequence[str], k: int = 5, batch_size: int = 64,
             truncate: bool = True) -> list[list[list[Fill]]]:
        """Lines -> per line, per [MASK] (in line order) its k most probable pieces, best
        first; run in batches of similar length."""
        encoded = self.encode(lines, truncate)
        filled: list[list[list[Fill]]] = [[] for _ in encoded]
        for rows in batches_by_length(encoded, batch_size):
            for index, fills in zip(rows, self.fill_batch([encoded[i] for i in rows], k),
                                    strict=True):
                filled[index] = fills
        return filled
