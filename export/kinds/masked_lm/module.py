"""What a masked language model run's export is made of (export/kinds/masked_lm.py writes
it): the float32 rebuild of its TransformerMaskedLM, `fill` (token ids to the logits of the
piece at every position) as a tf.Module, and how the run read its text ([MASK] piece, case,
word joints).

The graph takes the ids the training pipeline made (pieces + EOS, right-padded with PAD, some
of them the [MASK] piece) and returns the logits alone: a softmax over the whole (B,S,V)
would be computed for every position while fill-mask reads a few, so the runtimes take it
in NumPy at the [MASK] positions (export/runtime/masked_lm.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import tensorflow as tf

from keras_transformer.models.masked_lm import TransformerMaskedLM
from keras_transformer.text.masking import MASK_PIECE

from ...module import run_model_config


def erf_gelu(x):
    """GELU, 0.5·x·(1 + erf(x/√2)): the head's exact GELU written with erf. TensorFlow's
    own writes it with erfc, which tf2onnx cannot convert; this form converts to ONNX's Erf
    and TFLite fuses it into its GELU op."""
    return 0.5 * x * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0))))


def load_float32_masked_lm(run_dir: Path, trained) -> TransformerMaskedLM:
    """A float32 rebuild of a trained TransformerMaskedLM, its head's GELU as erf_gelu (the
    same function; the trained model's saved config keeps "gelu")."""
    model = TransformerMaskedLM(run_model_config(run_dir, trained), dtype="float32")
    model.build()
    model.set_weights(trained.get_weights())
    model.head_transform.activation = erf_gelu
    return model


def run_mask(tokenizer, run_dir: Path) -> dict:
    """{"piece", "id"} of the run's [MASK]; ValueError when its tokenizer has none (a
    tokenizer made by a masked_lm run always has one)."""
    mask_id = tokenizer.piece_id(MASK_PIECE)
    if mask_id is None:
        raise ValueError(f"{run_dir}/spm.model has no {MASK_PIECE} piece: is {run_dir} a "
                         f"finished masked_lm run?")
    return {"piece": MASK_PIECE, "id": int(mask_id)}


class MaskedLMModule(tf.Module):
    """fill: ids (B,S) int32 -> logits (B,S,V) float32. Batch and length are dynamic (length
    at most max_source_length)."""

    def __init__(self, model: TransformerMaskedLM, name=None):
        super().__init__(name=name)
        self.model = model
        # Without the variables tracked directly, the TFLite converter writes no weights.
        self.vars = [v.value for v in model.weights]
        self.fill = tf.function(self._fill, input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="ids")])

    def _fill(self, ids):
        return {"logits": tf.identity(self.model(ids, training=False), name="logits")}
