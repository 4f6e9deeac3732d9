"""One sentence in, its translation (or summary, or class) and every attention weight out,
over the ONNX runtime of an export made with --with-attention: what `python -m export.serve`
answers. Each kind of export that has an explorer holds it in its package
(`export/kinds/<kind>/explorer.py`: `Explorer` for a translator's export, `ClassifierExplorer`,
`ExtractorExplorer`, which shows each sentence's probability and no attention);
`open_explorer` picks by the manifest's kind.

NumPy, sentencepiece and onnxruntime only (no TensorFlow, no web packages).
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.command_line import command

from .common import ExportError
from .inputs import InputError, check_text
from .kinds import KINDS, kind_of, open_manifest, open_runner
from .kinds.classifier.explorer import ClassifierExplorer
from .kinds.extractor.explorer import ExtractorExplorer
from .kinds.seq2seq.explorer import Explorer

__all__ = ["ROUTES", "ClassifierExplorer", "Explorer", "ExtractorExplorer", "InputError",
           "check_text", "open_explorer"]

# Every kind's explorer route: a server answers the routes of the other kinds with a 404 that
# names its own.
ROUTES = tuple(dict.fromkeys(explorer.route for explorer in
                             (kind.explorer() for kind in KINDS.values()) if explorer))


def open_explorer(export_dir: str | Path, beam_size: int | None = None,
                  alpha: float | None = None):
    """The explorer of an export's kind, over its onnx runtime; ExportError (exit 2) for a
    kind without one (a language model's), naming the tool for it. The search settings are
    a translator's; given for another kind they are a ValueError."""
    manifest = open_manifest(export_dir)
    kind = kind_of(manifest)
    explorer = kind.explorer()
    if explorer is None:
        raise ExportError(f"{export_dir} holds a {kind.title}, which the explorer does not "
                          f"show; use {command(kind.tool)}")
    settings = {"beam_size": beam_size, "alpha": alpha}
    if not explorer.searches:
        if beam_size is not None or alpha is not None:
            raise ValueError(f"{export_dir} holds a {kind.title}, which has no search: drop "
                             f"--beam and --alpha")
        settings = {}
    return explorer(manifest, open_runner(manifest, "onnx"), **settings)
