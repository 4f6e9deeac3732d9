"""The kinds of export (the manifest's "kind"), one module each, and their registry: what
export_run, the runtimes and export.parity ask of the export they handle (see base.py). Every
reader opens an export here: the manifest read and validated once, its kind found once, and
the runtime it asks for built by that kind."""

from __future__ import annotations

import functools
from pathlib import Path

from keras_transformer.command_line import command

from ..common import ExportError, Manifest, register_kinds
from ..formats import RUNTIMES
from ..runtime import Threads
from .base import ExportKind, check_variant
from .classifier import ClassifierKind
from .extractor import ExtractorKind
from .language_model import LanguageModelKind
from .masked_lm import MaskedLMKind
from .seq2seq import Seq2SeqKind

# What an export holds (manifest "kind"): an encoder-decoder ("translator": encode and
# decode_step), an encoder-only classifier ("classifier": classify), a decoder-only
# TransformerLM ("lm": decode_step alone), an extractive summarizer ("extractor": extract) or
# a masked language model ("masked_lm": fill). In this order a bad manifest's message lists them.
KINDS: dict[str, ExportKind] = {kind.name: kind for kind in (
    Seq2SeqKind(), ClassifierKind(), LanguageModelKind(), ExtractorKind(),
    MaskedLMKind())}
register_kinds(KINDS)
TENSORFLOW = "tensorflow==2.21.0 tensorflow-text==2.21.1"  # as requirements.txt pins them


def kind_of(manifest: Manifest) -> ExportKind:
    """The kind of an export (its manifest was validated, so the kind is known)."""
    return KINDS[manifest.kind]


def kind_of_model(model, run_dir) -> ExportKind:
    """The kind a trained model is exported as; ValueError for a model no kind exports."""
    for kind in KINDS.values():
        if kind.accepts(model):
            return kind
    raise ValueError(f"{run_dir}/model.keras holds a {type(model).__name__}; an export takes a "
                     f"Transformer (translation, summarization), a TransformerLM (language "
                     f"model), a TransformerClassifier, a TransformerExtractor or a "
                     f"TransformerMaskedLM")


def open_manifest(export_dir: str | Path, kind: str | None = None,
                  tool: str | None = None) -> Manifest:
    """The export's manifest, read and validated; with `kind`, an export of another kind is
    refused (ExportError, exit 2) naming the tool for it, before any runtime looks for files
    that kind does not have. `tool` is the refusing tool's module (default: `kind`'s)."""
    manifest = Manifest(export_dir)
    if kind is not None:
        manifest.require_kind(kind, command(tool or KINDS[kind].tool))
    return manifest


def load_backend(manifest: Manifest, runtime: str, variant: str = "float32",
                 run_dir: str | Path | None = None, search_graph: bool = True,
                 threads: Threads | None = None):
    """One runtime over an export, as its kind runs it: for a translator the encode/decode_step
    pair (decode_step alone for a language model), for an encoder-only kind a callable ids ->
    its function's output. The onnx runtime of a translator also runs the whole search in one
    call when the export has search.onnx, unless `search_graph` is False. `threads`: the
    onnx and tflite runtimes' threads (export.runtime.Threads)."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {RUNTIMES}")
    check_variant(runtime, variant)
    threads = threads or Threads()
    kind = kind_of(manifest)
    if runtime in ("onnx", "tflite"):  # their ImportErrors name their package themselves
        return kind.backend(manifest, runtime, variant, run_dir, search_graph, threads)
    try:
        return kind.backend(manifest, runtime, variant, run_dir, search_graph, threads)
    except ImportError as err:
        missing = getattr(err, "name", None) or "TensorFlow"
        raise ExportError(f"the {runtime} runtime needs TensorFlow, and {missing} cannot "
                          f"be imported: pip install {TENSORFLOW} (or use --runtime onnx "
                          f"or tflite)") from err


def open_runner(manifest: Manifest, runtime: str = "onnx", variant: str = "float32",
                run_dir: str | Path | None = None, **options):
    """What a user runs over an opened export (Translator, Generator, Classifier, Summarizer,
    FillMask: its kind's runner) over one runtime; `options` go to load_backend. The kind
    joins the exports it holds inside it (a bottom-up summarizer's selector), each opened here
    in the same runtime and variant."""
    backend = load_backend(manifest, runtime, variant, run_dir, **options)
    kind = kind_of(manifest)
    runner = kind.runner(manifest, backend)
    return kind.with_sub_exports(manifest, runner, runtime, variant, run_dir,
                                 functools.partial(open_runner, **options))


def open_export(export_dir: str | Path, runtime: str = "onnx", variant: str = "float32",
                run_dir: str | Path | None = None, *, kind: str | None = None,
                tool: str | None = None, **options):
    """What a user runs over an export directory (see open_manifest and open_runner): e.g.
    `open_export("runs/demo/export").translate(lines, settings)`."""
    return open_runner(open_manifest(export_dir, kind, tool), runtime, variant, run_dir,
                       **options)
