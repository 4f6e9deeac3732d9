"""Runtimes behind one interface (keras_transformer.generation.Backend), driven by the NumPy
search of keras_transformer.decoding.

`onnx` and `tflite` need only NumPy, sentencepiece and their own runtime package;
`savedmodel` and `keras` import TensorFlow when chosen.
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.command_line import command

from ..common import ExportError, Manifest
from ..runtime.base import Backend, Generator, Translator

RUNTIMES = ("onnx", "tflite", "savedmodel", "keras")
TENSORFLOW = "tensorflow==2.21.0 tensorflow-text==2.21.1"  # as requirements.txt pins them

__all__ = ["RUNTIMES", "Backend", "Generator", "Translator", "load_backend", "load_generator",
           "load_translator"]


def load_backend(manifest: Manifest, runtime: str, variant: str = "float32",
                 run_dir: str | Path | None = None, search_graph: bool = True) -> Backend:
    """The encode/decode_step pair (decode_step alone for a language model) of one runtime
    over an export directory. The onnx runtime also runs the whole search in one call when
    the export has search.onnx, unless `search_graph` is False."""
    if manifest.kind == "classifier":
        manifest.require_kind("translator", "the decoding runtimes")
    if runtime in ("savedmodel", "keras") and variant != "float32":
        raise ValueError(f"the {runtime} runtime runs float32 weights only, not {variant}; "
                         f"the onnx runtime has int8, tflite fp16 and int8")
    if runtime == "onnx":
        from ..runtime.onnx import OnnxBackend

        return OnnxBackend(manifest, variant, search_graph=search_graph)
    if runtime == "tflite":
        from ..runtime.tflite import TFLiteBackend

        return TFLiteBackend(manifest, variant)
    if runtime in ("savedmodel", "keras"):
        try:
            import tensorflow_text  # noqa: F401  (the ops of the SavedModel's `translate`)

            from ..runtime.tf import SavedModelBackend, keras_backend
        except ImportError as err:
            missing = getattr(err, "name", None) or "TensorFlow"
            raise ExportError(f"the {runtime} runtime needs TensorFlow, and {missing} cannot "
                              f"be imported: pip install {TENSORFLOW} (or use --runtime onnx "
                              f"or tflite)") from err
        if runtime == "savedmodel":
            return SavedModelBackend(manifest)
        return keras_backend(manifest, run_dir)
    raise ValueError(f"unknown runtime {runtime!r}; choose one of {RUNTIMES}")


def load_translator(export_dir: str | Path, runtime: str = "onnx", variant: str = "float32",
                    run_dir: str | Path | None = None,
                    search_graph: bool = True) -> Translator:
    """Text-to-text translator over an export directory (see `Translator.translate`)."""
    manifest = Manifest(export_dir)
    manifest.require_kind("translator", command("export.translate"))
    return Translator(manifest, load_backend(manifest, runtime, variant, run_dir,
                                             search_graph))


def load_generator(export_dir: str | Path, runtime: str = "onnx", variant: str = "float32",
                   run_dir: str | Path | None = None) -> Generator:
    """Prompt-to-text generator over a language model's export (see `Generator.generate`)."""
    manifest = Manifest(export_dir)
    # Before loading a runtime, which would look for the encoder.
    manifest.require_kind("lm", command("export.generate"))
    return Generator(manifest, load_backend(manifest, runtime, variant, run_dir))
