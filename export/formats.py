"""Each format's exporter, written once: a tf.Module's signatures -> a SavedModel, ONNX graphs
and TFLite models in an export directory, and the manifest's "formats" and "files".

What differs between the kinds of export (which signatures, which ONNX graphs, what else the
SavedModel holds) is given by the kind (export/kinds/), not decided here.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from .common import DIRECTORY_FORMATS, directory_entries, file_entry
from .onnx_nodes import ONNX_OPSET

log = logging.getLogger("export")

FORMATS = ("savedmodel", "onnx", "tflite")
QUANTIZE = ("none", "fp16", "int8", "all")
# The TFLite variants each --quantize makes (float32 always).
TFLITE_VARIANTS = {"none": ("float32",), "fp16": ("float32", "fp16"),
                   "int8": ("float32", "int8"), "all": ("float32", "fp16", "int8")}

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


def write_savedmodel(module, out: Path, signatures: dict) -> list[str]:
    """out/savedmodel with `signatures` ({name: concrete function}); their names, sorted."""
    import tensorflow as tf

    tf.saved_model.save(module, str(out / "savedmodel"), signatures=signatures)
    return sorted(signatures)


def write_tflite(module, out: Path, names, variants: tuple[str, ...]) -> dict[str, dict]:
    """One .tflite per variant holding the signatures `names` of `module`, builtin ops only:
    the manifest's {variant: {"model": file}}."""
    import tensorflow as tf

    result = {}
    with tempfile.TemporaryDirectory(prefix=".tflite-savedmodel.", dir=out) as tmp:
        tf.saved_model.save(module, tmp, signatures=concrete_signatures(module, names))
        for variant in variants:
            converter = tf.lite.TFLiteConverter.from_saved_model(tmp,
                                                                 signature_keys=sorted(names))
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
            if variant in ("fp16", "int8"):
                converter.optimizations = [tf.lite.Optimize.DEFAULT]
            if variant == "fp16":
                converter.target_spec.supported_types = [tf.float16]
            name = "model.tflite" if variant == "float32" else f"model.{variant}.tflite"
            (out / name).write_bytes(converter.convert())
            result[variant] = {"model": name}
    return result


def export_formats(out: Path, module, names, formats, quantize: str, onnx_optimize: bool,
                   onnx_variants: Callable[[Path, bool, bool], dict],
                   savedmodel_signatures: Callable[[dict], dict] | None = None) -> dict:
    """The manifest's "formats": the signatures `names` of `module` written into `out` in
    every format of `formats`. `onnx_variants(out, int8, lean)` writes the kind's ONNX graphs
    and returns their variants; `savedmodel_signatures`, given the concrete signatures, adds
    the SavedModel's own (a translator's strings-to-strings `translate`)."""
    manifest_formats: dict = {}
    if "savedmodel" in formats:
        log.info("exporting SavedModel")
        signatures = concrete_signatures(module, names)
        if savedmodel_signatures is not None:
            signatures = savedmodel_signatures(signatures)
        manifest_formats["savedmodel"] = {
            "signatures": write_savedmodel(module, out, signatures),
            "variants": {"float32": {"model": "savedmodel"}}}
    if "onnx" in formats:
        log.info("exporting ONNX (opset %d)", ONNX_OPSET)
        manifest_formats["onnx"] = {"opset": ONNX_OPSET, "optimized": onnx_optimize,
                                    "variants": onnx_variants(out, quantize in ("int8", "all"),
                                                              onnx_optimize)}
    if "tflite" in formats:
        log.info("exporting TFLite")
        manifest_formats["tflite"] = {"signatures": sorted(names),
                                      "variants": write_tflite(module, out, names,
                                                               TFLITE_VARIANTS[quantize])}
    return manifest_formats


def listed_files(out: Path, manifest_formats: dict, names=()) -> dict:
    """The manifest's "files": every format's files and the other `names`, with their
    sizes and digests, sorted."""
    files = {name: file_entry(out, out / name) for name in names}
    for fmt_name, fmt in manifest_formats.items():
        for variant in fmt["variants"].values():
            for name in variant.values():
                if fmt_name in DIRECTORY_FORMATS:
                    files.update(directory_entries(out, name))
                else:
                    files[name] = file_entry(out, out / name)
    return dict(sorted(files.items()))
