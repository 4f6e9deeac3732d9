"""The exported computation: a tf.Module with `encode`, `decode_step` and `translate`.

Every format is made from this module, so every runtime runs the same two functions.
"""

from __future__ import annotations

import json
from pathlib import Path

import keras
import tensorflow as tf

from export.common import cache_names
from keras_transformer.config import TransformerConfig
from keras_transformer.models.transformer import Transformer


def load_float32_model(run_dir: str | Path) -> Transformer:
    """A float32 rebuild of `run_dir/model.keras`: mixed-precision graphs do not export."""
    run_dir = Path(run_dir)
    path = run_dir / "model.keras"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: is {run_dir} a finished training run?")
    trained = keras.models.load_model(path, compile=False)
    config = trained.config
    config_path = run_dir / "model_config.json"
    if config_path.is_file():
        config = TransformerConfig.from_dict(json.loads(config_path.read_text()))
    model = Transformer(config, dtype="float32")
    model.build()
    model.set_weights(trained.get_weights())
    return model


class DecodingModule(tf.Module):
    """encode: source_ids (B,S) int32 -> cross_key_values (B,L,2,S,D) f32, memory_mask (B,S) bool.

    decode_step: tokens (B,), cross_key_values, memory_mask, index () int32, and per layer l
    cache_keys_l, cache_values_l (B,H,T,D/H) -> logits (B,V) f32, step_key_values (B,L,2,D).
    The cache is only read; the caller writes step_key_values into slot `index` (an in-place
    write of B*L*2*D floats, where a graph that returned the whole updated cache would copy all
    of it at every token). Batch, source length S and cache length T are dynamic; T is chosen
    by the caller (at most max_target_length).
    """

    def __init__(self, model: Transformer, name=None):
        super().__init__(name=name)
        self.model = model
        # Without the variables tracked directly, the TFLite converter writes no weights.
        self.vars = [v.value for v in model.weights]
        c = model.config
        layers, d_model, heads = c.num_decoder_layers, c.d_model, c.num_heads
        self.encode = tf.function(self._encode, input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="source_ids")])
        self.decode_step = tf.function(self._decode_step, input_signature=[
            tf.TensorSpec([None], tf.int32, name="tokens"),
            tf.TensorSpec([None, layers, 2, None, d_model], tf.float32, name="cross_key_values"),
            tf.TensorSpec([None, None], tf.bool, name="memory_mask"),
            tf.TensorSpec([], tf.int32, name="index"),
            *(tf.TensorSpec([None, heads, None, d_model // heads], tf.float32, name=name)
              for name in cache_names(layers)),
        ])

    def _encode(self, source_ids):
        cross_key_values, memory_mask = self.model.encode_for_decoding(source_ids)
        return {"cross_key_values": tf.identity(cross_key_values, name="cross_key_values"),
                "memory_mask": tf.identity(memory_mask, name="memory_mask")}

    def _decode_step(self, tokens, cross_key_values, memory_mask, index, *cache):
        logits, step_key_values = self.model.decode_step_key_values(
            tokens, cross_key_values, memory_mask, list(cache), index)
        return {"logits": tf.identity(logits, name="logits"),
                "step_key_values": tf.identity(step_key_values, name="step_key_values")}
