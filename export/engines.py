"""What the API server (export.api) runs for an export: its kind's engine
(`export/kinds/<kind>/engine.py`), which checks a request's inputs and options (`prepare`, in
the request's task, so that a bad input fails its own request only) and runs a batch of
prepared inputs (`run`, in a worker of export.batching).

Each engine wraps the runner the line tools use (Translator, Generator, Classifier,
Summarizer), so an answer is what export.translate, export.generate, export.classify or
export.summarize print for that input alone. A batch key holds everything that changes an
input's answer besides the input: inputs are batched only with inputs of the same key.

NumPy, sentencepiece and the runtime's package only (no web packages).
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.command_line import command

from .common import ExportError
from .kinds import kind_of, open_manifest, open_runner
from .runtime import Threads


def open_engine(export_dir: str | Path, runtime: str = "onnx", variant: str = "float32",
                run_dir=None, threads: Threads | None = None):
    """The engine of an export's kind (its manifest's), over one runtime on `threads`
    (export.runtime.Threads); ExportError (exit 2) for a kind the API server does not serve,
    naming the tool for it."""
    manifest = open_manifest(export_dir)
    kind = kind_of(manifest)
    engine = kind.engine()
    if engine is None:
        raise ExportError(f"{export_dir} holds a {kind.title}, which the API server does not "
                          f"serve; use {command(kind.tool)}")
    return engine(manifest, open_runner(manifest, runtime, variant, run_dir, threads=threads))
