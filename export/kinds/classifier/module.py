"""What a classification run's export adds to every encoder-only kind's (`classify`, token ids
to the softmax of the logits beside them, is encoder_only/module.py's): the attention function
of --with-attention (classify plus the encoder's self-attention weights) and the run's class
names."""

from __future__ import annotations

import json
from pathlib import Path

import tensorflow as tf

from keras_transformer.models.classifier import TransformerClassifier

LABELS_FILE = "labels.json"  # written by the classification task beside model.keras


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
