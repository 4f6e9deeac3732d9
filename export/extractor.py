"""An extractive summarization run -> an export directory: `extract` (an article's sentence
grid to sentence probabilities) as a SavedModel, one ONNX graph and TFLite models, with
manifest.json (kind "extractor") holding the selection the run chose on dev.

The graph takes the ids the training pipeline made (an article's first K sentences, each its
pieces + EOS, right-padded with PAD; padding sentences all PAD) and returns the sigmoid of the
model's sentence logits beside the logits; splitting, tokenizing and choosing the sentences
run outside it (keras_transformer.text.extractive), in NumPy and sentencepiece.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import keras
import tensorflow as tf

from keras_transformer.file_safety import atomic_write_text
from keras_transformer.models.extractor import TransformerExtractor
from keras_transformer.text.extractive import read_selection

from .classifier import TOKENIZER, export_formats, listed_files, run_tokenizer
from .common import MANIFEST, MANIFEST_VERSION
from .module import run_config, run_model_config

SIGNATURE = "extract"
ROLE = "extractor"  # the ONNX file's role (extractor.onnx)


def load_float32_extractor(run_dir: Path, trained) -> TransformerExtractor:
    """A float32 rebuild of a trained TransformerExtractor."""
    model = TransformerExtractor(run_model_config(run_dir, trained),
                                 max_sentences=trained.max_sentences,
                                 sentence_layers=trained.sentence_layers, dtype="float32")
    model.build()
    model.set_weights(trained.get_weights())
    return model


def run_word_joints(run_dir: Path) -> str:
    """The run's data.word_joints (keep or split): how the runtimes read an article."""
    data = run_config(run_dir).get("data")
    mode = data.get("word_joints", "keep") if isinstance(data, dict) else "keep"
    if mode not in ("keep", "split"):
        raise ValueError(f"{run_dir / 'config.yaml'}: data.word_joints is {mode!r}, not keep "
                         f"or split")
    return mode


class ExtractorModule(tf.Module):
    """extract: ids (B,K,S) int32 -> probabilities (B,K) float32 (sigmoid), logits (B,K)
    float32. Batch, sentences and length are dynamic (K at most max_sentences, S at most
    max_source_length)."""

    def __init__(self, model: TransformerExtractor, name=None):
        super().__init__(name=name)
        self.model = model
        # Without the variables tracked directly, the TFLite converter writes no weights.
        self.vars = [v.value for v in model.weights]
        self.extract = tf.function(self._extract, input_signature=[
            tf.TensorSpec([None, None, None], tf.int32, name="ids")])

    def _extract(self, ids):
        logits = self.model(ids, training=False)
        return {"probabilities": tf.identity(tf.sigmoid(logits), name="probabilities"),
                "logits": tf.identity(logits, name="logits")}


def export_extractor_into(out: Path, run_dir: Path, trained: keras.Model, formats,
                          quantize: str, versions: dict, onnx_optimize: bool = True) -> dict:
    """Every format of `formats` and the manifest into `out` (the staged export directory)."""
    tokenizer = run_tokenizer(run_dir, "extractive summarization")
    selection = read_selection(run_dir, trained.max_sentences)
    model = load_float32_extractor(run_dir, trained)
    c = model.config
    shutil.copyfile(run_dir / TOKENIZER, out / TOKENIZER)
    manifest_formats = export_formats(out, ExtractorModule(model), formats, quantize,
                                      onnx_optimize, signature=SIGNATURE, role=ROLE)
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "kind": "extractor",
        "task": "extractive_summarization",
        "run": str(run_dir.resolve()),
        "formats": manifest_formats,
        "files": listed_files(out, manifest_formats, [TOKENIZER]),
        "tokenizer": {"source": TOKENIZER},
        "vocab": {"source_size": c.source_vocab_size},
        "special_ids": {"pad": c.pad_id, "unk": tokenizer.unk_id, "eos": c.eos_id},
        "max_source_length": c.max_source_length,
        "max_sentences": model.max_sentences,
        "word_joints": run_word_joints(run_dir),
        "selection": selection.to_dict(),
        "model": {"num_encoder_layers": c.num_encoder_layers,
                  "sentence_layers": model.sentence_layers, "d_model": c.d_model,
                  "num_heads": c.num_heads, "parameters": int(model.count_params())},
        "interface": {
            SIGNATURE: "ids int32 (B,K,S): an article's first K sentences (K at most "
                       "max_sentences), each its pieces + EOS right-padded with PAD to S (at "
                       "most max_source_length), missing sentences all PAD -> probabilities "
                       "float32 (B,K) (sigmoid: that the summary takes the sentence), logits "
                       "float32 (B,K); a padding sentence's values mean nothing",
        },
        "versions": versions,
    }
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest
