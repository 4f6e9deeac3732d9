"""A classification run -> an export directory: `classify` (token ids to class probabilities)
as a SavedModel, one ONNX graph and TFLite models, with manifest.json (kind "classifier"), and
with --with-attention attention.onnx (classify plus the encoder's self-attention weights).

The graph takes the ids the training pipeline made (pieces + EOS, right-padded with PAD) and
returns the softmax of the classifier's logits beside the logits; tokenizing, truncating and
choosing the labels run outside it (export/runtime/classifier.py), in NumPy and sentencepiece.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

import keras
import tensorflow as tf

from keras_transformer.file_safety import atomic_write_text
from keras_transformer.models.classifier import TransformerClassifier
from keras_transformer.text.tokenizer import SentencePieceTokenizer

from .common import (
    CLASSIFIER_ATTENTION_INTERFACE,
    MANIFEST,
    MANIFEST_VERSION,
    directory_entries,
    file_entry,
)
from .module import run_model_config
from .onnx_convert import convert_function, export_attention
from .onnx_nodes import ONNX_OPSET

log = logging.getLogger("export")

LABELS_FILE = "labels.json"  # written by the classification task beside model.keras
TOKENIZER = "spm.model"
SIGNATURE = "classify"


def load_float32_classifier(run_dir: Path, trained) -> TransformerClassifier:
    """A float32 rebuild of a trained TransformerClassifier (its config from
    model_config.json when the run has one, as for the translator)."""
    model = TransformerClassifier(run_model_config(run_dir, trained), num_classes=trained.num_classes,
                                  pooling=trained.pooling, dtype="float32")
    model.build()
    model.set_weights(trained.get_weights())
    return model


def run_labels(run_dir: Path, num_classes: int) -> list[str]:
    """The class names of a run (labels.json), else the ids' digits; checked against the
    model's class count."""
    path = run_dir / LABELS_FILE
    if not path.is_file():
        return [str(i) for i in range(num_classes)]
    try:
        labels = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from err
    if (not isinstance(labels, list) or len(labels) != num_classes
            or not all(isinstance(v, str) and v for v in labels)):
        raise ValueError(f"{path} must list the {num_classes} class names of the model "
                         f"(strings), got {str(labels)[:200]}")
    return labels


class ClassifierModule(tf.Module):
    """classify: ids (B,S) int32 -> probabilities (B,C) float32 (softmax), logits (B,C)
    float32. Batch and length are dynamic (length at most max_source_length)."""

    def __init__(self, model: TransformerClassifier, name=None):
        super().__init__(name=name)
        self.model = model
        # Without the variables tracked directly, the TFLite converter writes no weights.
        self.vars = [v.value for v in model.weights]
        self.classify = tf.function(self._classify, input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="ids")])

    def _classify(self, ids):
        logits = self.model(ids, training=False)
        return {"probabilities": tf.identity(tf.nn.softmax(logits, axis=-1),
                                             name="probabilities"),
                "logits": tf.identity(logits, name="logits")}


def attention_function(model: TransformerClassifier) -> tf.function:
    """`classify` with the encoder's self-attention weights as one more output: ids (B,S)
    int32 as classify takes them (pieces + EOS, right-padded with PAD) -> probabilities and
    logits (B,C) float32, and encoder_self (B,L,H,S,S) float32, every layer's weights stacked
    (rows are queries and sum to 1; the columns of PAD keys are 0). The classifier's
    counterpart of export.module.attention_function; its own graph (attention.onnx), so the
    classify graphs of every format stay as they are."""

    def attention(ids):
        states, mask, weights = model.encode(ids, training=False, return_attention_scores=True)
        logits = model.classify(states, mask, training=False)
        return {"probabilities": tf.identity(tf.nn.softmax(logits, axis=-1),
                                             name="probabilities"),
                "logits": tf.identity(logits, name="logits"),
                "encoder_self": tf.identity(tf.cast(tf.stack(weights, axis=1), tf.float32),
                                            name="encoder_self")}

    return tf.function(attention, input_signature=[tf.TensorSpec([None, None], tf.int32,
                                                                 name="ids")])


def _export_savedmodel(module: tf.Module, out: Path, signature: str = SIGNATURE) -> None:
    tf.saved_model.save(module, str(out / "savedmodel"),
                        signatures={signature: getattr(module, signature).get_concrete_function()})


def _export_onnx(module: tf.Module, out: Path, int8: bool, lean: bool = True,
                 signature: str = SIGNATURE, role: str = "classifier") -> dict:
    from .onnx_optimize import write_variants

    # export.onnx_optimize's pass; int8 quantizes weight MatMuls only, as for the translator.
    return write_variants({role: (f"{role}.onnx", convert_function(getattr(module, signature)))},
                          out, int8, lean)


def _export_tflite(module: tf.Module, out: Path, variants: tuple[str, ...],
                   signature: str = SIGNATURE) -> dict:
    result = {}
    with tempfile.TemporaryDirectory(prefix=".tflite-savedmodel.", dir=out) as tmp:
        tf.saved_model.save(module, tmp,
                            signatures={signature: getattr(module, signature)
                                        .get_concrete_function()})
        for variant in variants:
            converter = tf.lite.TFLiteConverter.from_saved_model(tmp,
                                                                 signature_keys=[signature])
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
            if variant in ("fp16", "int8"):
                converter.optimizations = [tf.lite.Optimize.DEFAULT]
            if variant == "fp16":
                converter.target_spec.supported_types = [tf.float16]
            name = "model.tflite" if variant == "float32" else f"model.{variant}.tflite"
            (out / name).write_bytes(converter.convert())
            result[variant] = {"model": name}
    return result


def run_tokenizer(run_dir: Path, what: str) -> SentencePieceTokenizer:
    """The run's spm.model, loaded; FileNotFoundError or ValueError saying what is wrong with
    it (`what` names the run's task in the message)."""
    tokenizer_path = run_dir / TOKENIZER
    if not tokenizer_path.is_file():
        raise FileNotFoundError(f"{tokenizer_path} is missing: is {run_dir} a finished "
                                f"{what} run?")
    try:
        return SentencePieceTokenizer(tokenizer_path)
    except Exception as err:  # sentencepiece raises RuntimeError/OSError on a bad file
        raise ValueError(f"{tokenizer_path} is not a valid SentencePiece model: "
                         f"{' '.join(str(err).split())[:200]}") from err


def export_formats(out: Path, module: tf.Module, formats, quantize: str, onnx_optimize: bool,
                   signature: str = SIGNATURE, role: str = "classifier") -> dict:
    """The manifest's "formats" of an encoder-only model's one function, `signature` of
    `module` (role: its ONNX file's name), written into `out` in every format of `formats`."""
    manifest_formats: dict = {}
    if "savedmodel" in formats:
        log.info("exporting SavedModel")
        _export_savedmodel(module, out, signature)
        manifest_formats["savedmodel"] = {"signatures": [signature],
                                          "variants": {"float32": {"model": "savedmodel"}}}
    if "onnx" in formats:
        log.info("exporting ONNX (opset %d)", ONNX_OPSET)
        manifest_formats["onnx"] = {"opset": ONNX_OPSET, "optimized": onnx_optimize,
                                    "variants": _export_onnx(module, out,
                                                             int8=quantize in ("int8", "all"),
                                                             lean=onnx_optimize,
                                                             signature=signature, role=role)}
    if "tflite" in formats:
        log.info("exporting TFLite")
        variants = {"none": ("float32",), "fp16": ("float32", "fp16"),
                    "int8": ("float32", "int8"), "all": ("float32", "fp16", "int8")}[quantize]
        manifest_formats["tflite"] = {"signatures": [signature],
                                      "variants": _export_tflite(module, out, variants,
                                                                 signature)}
    return manifest_formats


def listed_files(out: Path, manifest_formats: dict, names=()) -> dict:
    """The manifest's "files": every format's files and the other `names`, with their
    sizes and digests, sorted."""
    files = {name: file_entry(out, out / name) for name in names}
    for fmt_name, fmt in manifest_formats.items():
        for variant in fmt["variants"].values():
            for name in variant.values():
                if fmt_name == "savedmodel":
                    files.update(directory_entries(out, name))
                else:
                    files[name] = file_entry(out, out / name)
    return dict(sorted(files.items()))


def export_classifier_into(out: Path, run_dir: Path, trained: keras.Model, formats,
                           quantize: str, versions: dict, with_attention: bool = False,
                           onnx_optimize: bool = True) -> dict:
    """Every format of `formats` and the manifest into `out` (the staged export directory);
    `with_attention` adds attention.onnx (attention_function), which the attention explorer
    (export.serve) reads; `onnx_optimize` False skips export.onnx_optimize's pass."""
    tokenizer = run_tokenizer(run_dir, "classification")
    model = load_float32_classifier(run_dir, trained)
    labels = run_labels(run_dir, model.num_classes)
    c = model.config
    shutil.copyfile(run_dir / TOKENIZER, out / TOKENIZER)
    manifest_formats = export_formats(out, ClassifierModule(model), formats, quantize,
                                      onnx_optimize)
    attention = None
    if with_attention:
        log.info("exporting the attention weights (ONNX)")
        attention = export_attention(attention_function(model), out,
                                     CLASSIFIER_ATTENTION_INTERFACE, onnx_optimize)
    files = listed_files(out, manifest_formats,
                         [TOKENIZER] + ([attention["file"]] if attention else []))
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "kind": "classifier",
        "run": str(run_dir.resolve()),
        "formats": manifest_formats,
        "files": files,
        "tokenizer": {"source": TOKENIZER},
        "vocab": {"source_size": c.source_vocab_size},
        "special_ids": {"pad": c.pad_id, "unk": tokenizer.unk_id, "eos": c.eos_id},
        "max_source_length": c.max_source_length,
        "labels": labels,
        "model": {"num_encoder_layers": c.num_encoder_layers, "d_model": c.d_model,
                  "num_heads": c.num_heads, "num_classes": model.num_classes,
                  "pooling": model.pooling, "parameters": int(model.count_params())},
        "interface": {
            SIGNATURE: "ids int32 (B,S): pieces + EOS, right-padded with PAD, S at most "
                       "max_source_length -> probabilities float32 (B,C) (softmax), logits "
                       "float32 (B,C); class c is labels[c]",
        },
        "versions": versions,
    }
    if attention is not None:
        manifest["attention"] = attention
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest
