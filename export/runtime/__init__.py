"""The runtimes of an export directory, each asked of the export's kind (export/kinds/): a
Backend (keras_transformer.generation.Backend) driven by the NumPy search of
keras_transformer.decoding for a translator's or a language model's export, a callable
ids -> probabilities for a classifier's or an extractive summarizer's (-> logits for a masked
language model's); and what a user runs over one (Translator, Generator, Classifier,
Summarizer, FillMask).

`onnx` and `tflite` need only NumPy, sentencepiece and their own runtime package;
`savedmodel` and `keras` import TensorFlow when chosen.
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.command_line import command

from ..common import KIND_TOOLS, ExportError, Manifest
from ..formats import RUNTIMES
from ..runtime.base import Backend, Generator, Translator

TENSORFLOW = "tensorflow==2.21.0 tensorflow-text==2.21.1"  # as requirements.txt pins them

__all__ = ["Backend", "Generator", "Translator", "load_backend", "load_classifier",
           "load_fill_mask", "load_generator", "load_summarizer", "load_translator"]


def load_backend(manifest: Manifest, runtime: str, variant: str = "float32",
                 run_dir: str | Path | None = None, search_graph: bool = True):
    """One runtime over an export directory, as its kind runs it: for a translator the
    encode/decode_step pair (decode_step alone for a language model), for a classifier or an
    extractor a callable ids -> probabilities. The onnx runtime of a translator also runs the
    whole search in one call when the export has search.onnx, unless `search_graph` is
    False."""
    # Here, not at the top: the kinds import this package's modules (its runners), which
    # Python runs this file for first.
    from ..kinds import kind_of
    from ..kinds.base import check_variant

    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {RUNTIMES}")
    check_variant(runtime, variant)
    kind = kind_of(manifest)
    if runtime in ("onnx", "tflite"):  # their ImportErrors name their package themselves
        return kind.backend(manifest, runtime, variant, run_dir, search_graph)
    try:
        return kind.backend(manifest, runtime, variant, run_dir, search_graph)
    except ImportError as err:
        missing = getattr(err, "name", None) or "TensorFlow"
        raise ExportError(f"the {runtime} runtime needs TensorFlow, and {missing} cannot "
                          f"be imported: pip install {TENSORFLOW} (or use --runtime onnx "
                          f"or tflite)") from err


def load_runner(export_dir: str | Path, kind: str, runtime: str = "onnx",
                variant: str = "float32", run_dir: str | Path | None = None, **options):
    """What a user runs over an export of `kind` (its kind's runner over `runtime`); an
    export of another kind is refused, naming the tool for it."""
    from ..kinds import kind_of

    manifest = Manifest(export_dir)
    # Before loading a runtime, which would look for another kind's files.
    manifest.require_kind(kind, command(KIND_TOOLS[kind]))
    return kind_of(manifest).runner(manifest, load_backend(manifest, runtime, variant, run_dir,
                                                           **options))


def load_translator(export_dir: str | Path, runtime: str = "onnx", variant: str = "float32",
                    run_dir: str | Path | None = None,
                    search_graph: bool = True) -> Translator:
    """Text-to-text translator over an export directory (see `Translator.translate`)."""
    return load_runner(export_dir, "translator", runtime, variant, run_dir,
                       search_graph=search_graph)


def load_generator(export_dir: str | Path, runtime: str = "onnx", variant: str = "float32",
                   run_dir: str | Path | None = None) -> Generator:
    """Prompt-to-text generator over a language model's export (see `Generator.generate`)."""
    return load_runner(export_dir, "lm", runtime, variant, run_dir)


def load_classifier(export_dir: str | Path, runtime: str = "onnx", variant: str = "float32",
                    run_dir: str | Path | None = None):
    """Text-to-labels classifier over an export directory (see runtime.classifier's
    `Classifier`)."""
    return load_runner(export_dir, "classifier", runtime, variant, run_dir)


def load_summarizer(export_dir: str | Path, runtime: str = "onnx", variant: str = "float32",
                    run_dir: str | Path | None = None):
    """Article-to-summary summarizer over an export directory (see runtime.extractor's
    `Summarizer`)."""
    return load_runner(export_dir, "extractor", runtime, variant, run_dir)


def load_fill_mask(export_dir: str | Path, runtime: str = "onnx", variant: str = "float32",
                   run_dir: str | Path | None = None):
    """Lines with [MASK] to the top pieces of each [MASK] over a masked language model's
    export (see runtime.masked_lm's `FillMask`)."""
    return load_runner(export_dir, "masked_lm", runtime, variant, run_dir)
