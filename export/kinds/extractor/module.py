"""What an extractive summarization run's export is made of (export/kinds/extractor.py writes
it): the float32 rebuild of its TransformerExtractor, `extract` (an article's sentence grid
to sentence probabilities) as a tf.Module, and how the run read its articles.

The graph takes the ids the training pipeline made (an article's first K sentences, each its
pieces + EOS, right-padded with PAD; padding sentences all PAD) and returns the sigmoid of the
model's sentence logits beside the logits; splitting, tokenizing and choosing the sentences
run outside it (keras_transformer.text.extractive), in NumPy and sentencepiece.
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from keras_transformer.models.extractor import TransformerExtractor

from ...module import run_model_config


def load_float32_extractor(run_dir: Path, trained) -> TransformerExtractor:
    """A float32 rebuild of a trained TransformerExtractor."""
    model = TransformerExtractor(run_model_config(run_dir, trained),
                                 max_sentences=trained.max_sentences,
                                 sentence_layers=trained.sentence_layers, dtype="float32")
    model.build()
    model.set_weights(trained.get_weights())
    return model


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
