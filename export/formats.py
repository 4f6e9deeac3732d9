"""The export formats, one entry each (a registry in the shape of OpenNMT-tf's exporters): its
weight variants, whether its model is a directory, and its writer: a tf.Module's signatures ->
its files in an export directory and its entry of the manifest's "formats".

What differs between the kinds of export (which signatures, which ONNX graphs, what else the
SavedModel holds) is given by the kind (export/kinds/), not decided here. Importing this module
imports no TensorFlow (the writers do, when they run), so the manifest's readers use its table.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .onnx_nodes import ONNX_OPSET

log = logging.getLogger("export")

QUANTIZE = ("none", "fp16", "int8", "all")
# The run's own Keras model: a runtime of every export (with the run directory), and the
# reference export.parity holds each format's runtime to.
KERAS = "keras"

_VERSIONED = ("tensorflow", "tensorflow-text", "keras", "tf2onnx", "onnx", "onnxruntime",
              "ai-edge-litert", "sentencepiece", "keras-transformer")


def versions() -> dict[str, str]:
    """The installed versions of the packages an export is made with (manifest "versions")."""
    out = {}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def concrete_signatures(module, names) -> dict:
    """{name: concrete function} of the tf.functions `names` of `module`."""
    return {name: getattr(module, name).get_concrete_function() for name in names}


@dataclass(frozen=True)
class Job:
    """What a format's writer is given: the tf.Module, its signatures `names`, the staged
    export directory `out` and what `python -m export` was asked for. `onnx_variants(out, int8,
    lean)` writes the kind's ONNX graphs and returns their variants; `savedmodel_signatures`,
    given the concrete signatures, adds the SavedModel's own (a translator's strings-to-strings
    `translate`)."""

    out: Path
    module: object
    names: tuple[str, ...]
    quantize: str
    onnx_optimize: bool
    onnx_variants: Callable[[Path, bool, bool], dict]
    savedmodel_signatures: Callable[[dict], dict] | None = None


class Format:
    """One export format; `name` is its key in the manifest's "formats" and its runtime's
    name, `variants` the weights it can hold (float32 first)."""

    name: str = ""
    variants: tuple[str, ...] = ("float32",)
    # Its model is a directory, whose files the manifest lists one by one.
    directory: bool = False

    def made(self, quantize: str) -> tuple[str, ...]:
        """The variants `--quantize quantize` makes of this format."""
        return tuple(v for v in self.variants if v == "float32" or v in quantized(quantize))

    def write(self, job: Job) -> dict:
        """This format's files into job.out; its entry of the manifest's "formats"."""
        raise NotImplementedError


class SavedModelFormat(Format):
    name = "savedmodel"
    directory = True

    def write(self, job):
        import tensorflow as tf

        log.info("exporting SavedModel")
        signatures = concrete_signatures(job.module, job.names)
        if job.savedmodel_signatures is not None:
            signatures = job.savedmodel_signatures(signatures)
        tf.saved_model.save(job.module, str(job.out / "savedmodel"), signatures=signatures)
        return {"signatures": sorted(signatures), "variants": {"float32": {"model": "savedmodel"}}}


class OnnxFormat(Format):
    # Quantized dynamically, weight MatMuls to int8 (export.onnx_optimize).
    name = "onnx"
    variants = ("float32", "int8")

    def write(self, job):
        log.info("exporting ONNX (opset %d)", ONNX_OPSET)
        return {"opset": ONNX_OPSET, "optimized": job.onnx_optimize,
                "variants": job.onnx_variants(job.out, "int8" in self.made(job.quantize),
                                              job.onnx_optimize)}


class TFLiteFormat(Format):
    name = "tflite"
    variants = ("float32", "fp16", "int8")

    def write(self, job):
        """One .tflite per variant holding every signature, builtin ops only."""
        import tensorflow as tf

        log.info("exporting TFLite")
        variants = {}
        with tempfile.TemporaryDirectory(prefix=".tflite-savedmodel.", dir=job.out) as tmp:
            tf.saved_model.save(job.module, tmp,
                                signatures=concrete_signatures(job.module, job.names))
            for variant in self.made(job.quantize):
                converter = tf.lite.TFLiteConverter.from_saved_model(
                    tmp, signature_keys=sorted(job.names))
                converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
                if variant in ("fp16", "int8"):
                    converter.optimizations = [tf.lite.Optimize.DEFAULT]
                if variant == "fp16":
                    converter.target_spec.supported_types = [tf.float16]
                name = "model.tflite" if variant == "float32" else f"model.{variant}.tflite"
                (job.out / name).write_bytes(converter.convert())
                variants[variant] = {"model": name}
        return {"signatures": sorted(job.names), "variants": variants}


# The formats, in the order an export writes them and export.parity checks them.
FORMATS: dict[str, Format] = {fmt.name: fmt for fmt in (
    SavedModelFormat(), OnnxFormat(), TFLiteFormat())}
# Every runtime of an export: Keras, the reference, then each format's.
RUNTIMES = (KERAS, *FORMATS)


def quantized(quantize: str) -> tuple[str, ...]:
    """The variants besides float32 that `--quantize quantize` asks for."""
    if quantize == "all":
        return tuple(dict.fromkeys(v for fmt in FORMATS.values() for v in fmt.variants
                                   if v != "float32"))
    return () if quantize == "none" else (quantize,)


def variants_of(name: str) -> tuple[str, ...]:
    """The variants a format can hold (float32 alone for a format this code does not know)."""
    return FORMATS[name].variants if name in FORMATS else ("float32",)


def export_formats(out: Path, module, names, formats, quantize: str, onnx_optimize: bool,
                   onnx_variants: Callable[[Path, bool, bool], dict],
                   savedmodel_signatures: Callable[[dict], dict] | None = None) -> dict:
    """The manifest's "formats": the signatures `names` of `module` written into `out` in
    every format of `formats` (see Job)."""
    job = Job(out, module, tuple(names), quantize, onnx_optimize, onnx_variants,
              savedmodel_signatures)
    return {name: fmt.write(job) for name, fmt in FORMATS.items() if name in formats}
