"""What a masked language model run's export adds to every encoder-only kind's (`fill`, token
ids to the logits of the piece at every position, is encoder_only/module.py's, the logits
alone: a softmax over the whole (B,S,V) would be computed for every position while fill-mask
reads a few, so the runtimes take it in NumPy at the [MASK] positions): the run's [MASK]
piece and id, and the head's GELU in a form both converters take."""

from __future__ import annotations

import math
from pathlib import Path

import tensorflow as tf

from keras_transformer.text.masking import MASK_PIECE


def erf_gelu(x):
    """GELU, 0.5·x·(1 + erf(x/√2)): the head's exact GELU written with erf. TensorFlow's
    own writes it with erfc, which tf2onnx cannot convert; this form converts to ONNX's Erf
    and TFLite fuses it into its GELU op."""
    return 0.5 * x * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0))))


def run_mask(tokenizer, run_dir: Path) -> dict:
    """{"piece", "id"} of the run's [MASK]; ValueError when its tokenizer has none (a
    tokenizer made by a masked_lm run always has one)."""
    mask_id = tokenizer.piece_id(MASK_PIECE)
    if mask_id is None:
        raise ValueError(f"{run_dir}/spm.model has no {MASK_PIECE} piece: is {run_dir} a "
                         f"finished masked_lm run?")
    return {"piece": MASK_PIECE, "id": int(mask_id)}
