"""The exported computation: a tf.Module with `encode`, `decode_step` and `translate` for a
seq2seq Transformer (`DecodingModule`), or with `decode_step` alone for a decoder-only
TransformerLM (`LMDecodingModule`).

Every format is made from these modules, so every runtime runs the same functions.
"""

from __future__ import annotations

import json
from pathlib import Path

import keras
import tensorflow as tf
import yaml

from keras_transformer.cache.layout import COPY_SOURCE, cache_names, memory_names
from keras_transformer.command_line import one_line
from keras_transformer.config import TransformerConfig
from keras_transformer.models.language_model import TransformerLM
from keras_transformer.models.transformer import Transformer

# The decoding model classes this module exports (export/kinds/seq2seq/ and language_model/;
# each encoder-only kind's package has its own module).
DECODING_MODELS = (Transformer, TransformerLM)


def load_float32_model(run_dir: str | Path) -> Transformer | TransformerLM:
    """A float32 rebuild of `run_dir/model.keras`: mixed-precision graphs do not export."""
    return float32_transformer(Path(run_dir), load_trained(run_dir))


def load_trained(run_dir: str | Path) -> keras.Model:
    """The model of `run_dir/model.keras` as trained (any model class of the library)."""
    run_dir = Path(run_dir)
    path = run_dir / "model.keras"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: is {run_dir} a finished training run?")
    try:
        trained = keras.models.load_model(path, compile=False)
    except Exception as err:  # Keras raises many types for a damaged archive
        raise ValueError(f"{path} could not be loaded (truncated, or not a .keras model "
                         f"file?): {' '.join(str(err).split())[:300]}") from err
    return trained


def float32_transformer(run_dir: Path, trained: keras.Model) -> Transformer | TransformerLM:
    """A float32 rebuild of a trained Transformer or TransformerLM, whatever the run's task
    (its config from model_config.json when the run has one)."""
    if not isinstance(trained, DECODING_MODELS):
        raise ValueError(f"{run_dir / 'model.keras'} holds a {type(trained).__name__}; this "
                         f"rebuild takes a Transformer (translation, summarization) or a "
                         f"TransformerLM (language model); a classification run exports "
                         f"through export/kinds/classifier")
    model = type(trained)(run_model_config(run_dir, trained), dtype="float32")
    model.build()
    model.set_weights(trained.get_weights())
    return model


def run_model_config(run_dir: Path, trained: keras.Model) -> TransformerConfig:
    """The run's model_config.json when it has one, else the trained model's config."""
    config_path = run_dir / "model_config.json"
    if not config_path.is_file():
        return trained.config
    try:
        return TransformerConfig.from_dict(json.loads(config_path.read_text()))
    except (ValueError, TypeError, KeyError, AttributeError) as err:  # JSON errors: ValueError
        raise ValueError(f"{config_path} is not a valid model config: {err}") from err


def run_config(run_dir: Path) -> dict:
    """The run's config.yaml as a mapping ({} when the run has none); ValueError when it is
    unreadable."""
    path = run_dir / "config.yaml"
    if not path.exists():
        return {}
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        # Exported with the defaults instead, it would run unlike the run, silently.
        raise ValueError(f"{path} is unreadable ({one_line(err)[:200]}); it "
                         f"holds the run's task and settings") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a YAML mapping (the run's config)")
    return config


class DecodingModule(tf.Module):
    """encode: source_ids (B,S) int32 -> per decoder layer l cross_keys_l, cross_values_l
    (B,H,S,D/H) f32, and memory_mask (B,S) bool.

    decode_step: tokens (B,), memory_mask, index () int32, cross_keys_l/cross_values_l, and per
    layer l cache_keys_l, cache_values_l (B,H,T,D/H) -> logits (B,V) f32, step_key_values
    (B,L,2,D). A copy-attention model's encode also returns, and its step also takes, the
    source ids (B,S) int32 as copy_source_ids (keras_transformer.cache.layout.COPY_SOURCE),
    and its logits are the copy mixture's log-probabilities. The cache is only read; the caller writes step_key_values into slot `index` (an
    in-place write of B*L*2*D floats, where a graph that returned the whole updated cache would
    copy all of it at every token). Batch, source length S and cache length T are dynamic; T is
    chosen by the caller (at most max_target_length).
    """

    def __init__(self, model: Transformer, name=None):
        super().__init__(name=name)
        self.model = model
        # Without the variables tracked directly, the TFLite converter writes no weights.
        self.vars = [v.value for v in model.weights]
        c = model.config
        self.layers, heads = c.num_decoder_layers, c.num_heads
        self.memory_names = memory_names(self.layers, c.copy_attention)
        head_dim = c.d_model // heads

        def spec(name):
            if name == COPY_SOURCE:
                return tf.TensorSpec([None, None], tf.int32, name=name)
            return tf.TensorSpec([None, heads, None, head_dim], tf.float32, name=name)

        self.encode = tf.function(self._encode, input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="source_ids")])
        self.decode_step = tf.function(self._decode_step, input_signature=[
            tf.TensorSpec([None], tf.int32, name="tokens"),
            tf.TensorSpec([None, None], tf.bool, name="memory_mask"),
            tf.TensorSpec([], tf.int32, name="index"),
            *map(spec, self.memory_names + cache_names(self.layers)),
        ])

    def _encode(self, source_ids):
        memory, memory_mask = self.model.encode_for_decoding(source_ids)
        outputs = {name: tf.identity(t, name=name)
                   for name, t in zip(self.memory_names, memory, strict=True)}
        outputs["memory_mask"] = tf.identity(memory_mask, name="memory_mask")
        return outputs

    def _decode_step(self, tokens, memory_mask, index, *arrays):
        count = len(self.memory_names)
        logits, step_key_values = self.model.decode_step_key_values(
            tokens, list(arrays[:count]), memory_mask, list(arrays[count:]), index)
        return {"logits": tf.identity(logits, name="logits"),
                "step_key_values": tf.identity(step_key_values, name="step_key_values")}


def attention_function(model: Transformer) -> tf.function:
    """The attention weights of one sentence pair, teacher-forced: source_ids (1,S) and
    target_ids (1,T) int32 (BOS and the generated tokens), and memory_mask (1,S) bool, the
    source positions the decoder may attend to (a bottom-up selection; all of them
    otherwise) -> encoder_self (L,H,S,S), decoder_self (L,H,T,T) and cross (L,H,T,S)
    float32, every layer's weights stacked; a copy-attention model adds copy (T,S), its copy
    distribution, and copy_gate (T,).

    A function of its own, not a method of DecodingModule: the SavedModel and TFLite files
    are saved from that module and stay as they are. The batch is fixed to one sentence,
    which is what a person looks at; its rows then hold no padding."""

    def attention(source_ids, target_ids, memory_mask):
        memory, mask, encoder_self = model.encode(source_ids, training=False,
                                                  return_attention_scores=True)
        mask = tf.logical_and(mask, memory_mask)
        _, weights = model.decode(target_ids, memory, mask, training=False,
                                  return_attention_scores=True, source_ids=source_ids)
        stacked = {"encoder_self": encoder_self, "decoder_self": weights["self"],
                   "cross": weights["cross"]}
        outputs = {name: tf.identity(tf.cast(tf.stack(layers)[:, 0], tf.float32), name=name)
                   for name, layers in stacked.items()}
        if "copy" in weights:  # copy attention: copy (T,S) and copy_gate (T,)
            outputs.update({name: tf.identity(tf.cast(weights[name][0], tf.float32), name=name)
                            for name in ("copy", "copy_gate")})
        return outputs

    return tf.function(attention, input_signature=[
        tf.TensorSpec([1, None], tf.int32, name="source_ids"),
        tf.TensorSpec([1, None], tf.int32, name="target_ids"),
        tf.TensorSpec([1, None], tf.bool, name="memory_mask")])


def lm_step_key_values(model: TransformerLM, tokens, cache, index):
    """tokens (B,) at position `index`, cache read only -> logits (B,V) float32 and the
    position's keys/values (B,L,2,D): TransformerLM.decode_step without its cache update, as
    `Transformer.decode_step_key_values` is for the seq2seq model."""
    x = model.embedding(tokens[:, None], start_index=index, training=False)
    hidden, step_key_values = model.decoder.step_key_values(x, cache, index)
    return model.logits(hidden[:, 0, :]), step_key_values


class LMDecodingModule(tf.Module):
    """decode_step: tokens (B,), index () int32, and per layer l cache_keys_l, cache_values_l
    (B,H,T,D/H) -> logits (B,V) f32, step_key_values (B,L,2,D), for a TransformerLM.

    The translator's step without the encoder's inputs: the same cache layout and names, only
    read; the caller writes step_key_values into slot `index`. Batch and cache length T are
    dynamic (T at most max_target_length). A prompt is fed through it one token per step.
    """

    def __init__(self, model: TransformerLM, name=None):
        super().__init__(name=name)
        self.model = model
        # Without the variables tracked directly, the TFLite converter writes no weights.
        self.vars = [v.value for v in model.weights]
        c = model.config
        self.layers, heads = c.num_decoder_layers, c.num_heads
        head_dim = c.d_model // heads
        self.decode_step = tf.function(self._decode_step, input_signature=[
            tf.TensorSpec([None], tf.int32, name="tokens"),
            tf.TensorSpec([], tf.int32, name="index"),
            *(tf.TensorSpec([None, heads, None, head_dim], tf.float32, name=name)
              for name in cache_names(self.layers)),
        ])

    def _decode_step(self, tokens, index, *cache):
        logits, step_key_values = lm_step_key_values(self.model, tokens, list(cache), index)
        return {"logits": tf.identity(logits, name="logits"),
                "step_key_values": tf.identity(step_key_values, name="step_key_values")}


def decoding_module(model) -> DecodingModule | LMDecodingModule:
    """The exported module of a Transformer or a TransformerLM."""
    return LMDecodingModule(model) if isinstance(model, TransformerLM) else DecodingModule(model)
