"""The encoder-decoder Transformer of Figure 1, for sequence-to-sequence tasks."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.cache.tensors import update_cache
from keras_transformer.config import TransformerConfig
from keras_transformer.layers.copy_attention import (
    CopyGate,
    copy_attention_weights,
    copy_mixture_log_probs,
    coverage_loss,
)
from keras_transformer.layers.decoder import Decoder
from keras_transformer.layers.embedding import PositionalEmbedding
from keras_transformer.layers.encoder import Encoder
from keras_transformer.layers.masks import padding_mask
from keras_transformer.models.presets import FromPreset


def as_config(config: TransformerConfig | dict | None) -> TransformerConfig:
    if config is None:
        return TransformerConfig()
    if isinstance(config, TransformerConfig):
        return config
    if isinstance(config, dict):
        return TransformerConfig.from_dict(config)
    raise TypeError(f"config must be a TransformerConfig or a dict, got {type(config).__name__}")


def stack_options(config: TransformerConfig, dtype) -> dict:
    """The keyword arguments an `Encoder` or `Decoder` of `config` takes besides its layer
    count: every model builds its stacks from the same fields."""
    return dict(d_model=config.d_model, num_heads=config.num_heads, d_ff=config.d_ff,
                dropout=config.dropout, attention_dropout=config.attention_dropout,
                pre_norm=config.pre_norm, epsilon=config.layer_norm_epsilon, dtype=dtype)


def check_ids(ids, name: str, axes: tuple[str, ...] = ("batch", "length")):
    """Fail early, with the fix, on ids that are not an integer tensor of the named `axes`."""
    if len(ids.shape) != len(axes):
        raise ValueError(f"{name} must have shape ({', '.join(axes)}), got shape "
                         f"{tuple(ids.shape)}")
    if "int" not in str(ids.dtype):
        raise TypeError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if ids.shape[-1] == 0:
        raise ValueError(f"{name} is empty (length 0); every sequence needs at least EOS")


def vocab_logits(hidden, embedding: PositionalEmbedding, output_projection=None):
    """States (..., d_model) -> float32 logits (..., V): the transposed embedding when tied (3.4)."""
    if output_projection is not None:
        logits = output_projection(hidden)
    else:
        logits = ops.matmul(hidden, ops.transpose(ops.cast(embedding.embeddings, hidden.dtype)))
    return ops.cast(logits, "float32")


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(FromPreset, keras.Model):
    """(source_ids (B,S), target_in_ids (B,T)) int -> logits (B,T,target_vocab) float32.

    With `config.copy_attention` the outputs are the log-probabilities of the copy mixture
    (`keras_transformer.layers.copy_attention`) instead: a softmax of them is the mixture
    itself, so the loss, the metrics and every search read them as they read logits.

    Inference is split into `encode_for_decoding` (once per source) and `decode_step`
    (once per generated token, with a fixed-size key/value cache).

    Args:
        config: `TransformerConfig`, or its `to_dict()`, giving every size; defaults to
            `None`, the `TransformerConfig()` defaults (the paper's base model).
        **kwargs: other `keras.Model` arguments (`name`, `dtype` for a mixed-precision policy).

    Call arguments:
        inputs: `(source_ids, target_in_ids)` or `{"source": ..., "target_in": ...}`, int
            (B, S) and (B, T); `target_in_ids` starts with BOS (teacher forcing).
        training: bool, whether dropout is active.

    Example:

    ```python
    config = TransformerConfig.preset("small", source_vocab_size=8000, target_vocab_size=8000)
    model = Transformer(config)
    logits = model((source_ids, target_in_ids))  # (B, T, 8000)
    ```
    """

    def __init__(self, config: TransformerConfig | dict | None = None, **kwargs):
        super().__init__(**kwargs)
        self.config = as_config(config)
        c = self.config
        policy = self.dtype_policy
        self.source_embedding = PositionalEmbedding(
            c.source_vocab_size, c.d_model, c.max_source_length, c.positional, c.dropout,
            dtype=policy, name="source_embedding")
        self.target_embedding = PositionalEmbedding(
            c.target_vocab_size, c.d_model, c.max_target_length, c.positional, c.dropout,
            token_embedding=(
                self.source_embedding.token_embedding if c.share_embeddings else None),
            dtype=policy, name="target_embedding")
        stack = stack_options(c, policy)
        self.encoder = Encoder(c.num_encoder_layers, name="encoder", **stack)
        self.decoder = Decoder(c.num_decoder_layers, name="decoder", **stack)
        self.output_projection = (
            None if c.tie_output
            else keras.layers.Dense(c.target_vocab_size, dtype=policy, name="output_projection")
        )
        self.copy_gate = (CopyGate(c.d_model, dtype=policy, name="copy_gate")
                          if c.copy_attention else None)

    def build(self, input_shape=None):
        self.source_embedding.build((None, None))
        self.target_embedding.build((None, None))
        self.encoder.build((None, None, self.config.d_model))
        self.decoder.build((None, None, self.config.d_model))
        if self.output_projection is not None:
            self.output_projection.build((None, None, self.config.d_model))
        if self.copy_gate is not None:
            self.copy_gate.build()
        self.built = True

    # -- the pieces of Figure 1 ------------------------------------------------------------

    def encode(self, source_ids, training=None, return_attention_scores=False):
        """source_ids (B,S) -> memory (B,S,d_model) and its padding mask (B,S) bool."""
        check_ids(source_ids, "source_ids")
        mask = padding_mask(source_ids, self.config.pad_id)
        x = self.source_embedding(source_ids, training=training)
        out = self.encoder(x, mask, training=training,
                           return_attention_scores=return_attention_scores)
        if return_attention_scores:
            memory, weights = out
            return memory, mask, weights
        return out, mask

    def logits(self, hidden):
        """Decoder states (..., d_model) -> float32 logits (..., target_vocab)."""
        return vocab_logits(hidden, self.target_embedding, self.output_projection)

    def decode(self, target_in_ids, memory, memory_mask, training=None,
               return_attention_scores=False, source_ids=None):
        """Teacher forcing: target_in (B,T) and memory -> logits (B,T,V); with
        return_attention_scores also {"self": [per layer (B,H,T,T)], "cross": [per layer
        (B,H,T,S)]}, the decoder's masked self-attention and its attention over the source.

        A copy-attention model needs the source_ids (B,S) too and returns the mixture's
        log-probabilities; its attention scores add "copy" (B,T,S), the copy distribution,
        and "copy_gate" (B,T), the share g of copying at each position."""
        check_ids(target_in_ids, "target_in_ids")
        x = self.target_embedding(target_in_ids, training=training)
        copying = self.copy_gate is not None
        if copying and source_ids is None:
            raise ValueError("this Transformer has copy_attention: decode needs source_ids")
        out = self.decoder(x, memory, memory_mask, training=training,
                           return_attention_scores=return_attention_scores or copying)
        if not copying:
            if return_attention_scores:
                hidden, weights = out
                return self.logits(hidden), weights
            return self.logits(out)
        hidden, weights = out
        attention = copy_attention_weights(weights["cross"][-1], self.config.copy_head)
        gate = self.copy_gate(hidden, weights["context"][-1], x)
        log_probs = copy_mixture_log_probs(self.logits(hidden), gate, attention, source_ids)
        if training and self.config.coverage_loss_weight:
            # Added to the compiled loss by model.fit (Keras collects a model's losses).
            self.add_loss(self.config.coverage_loss_weight * coverage_loss(
                attention, ops.not_equal(target_in_ids, self.config.pad_id)))
        if return_attention_scores:
            return log_probs, {**weights, "copy": attention,
                               "copy_gate": ops.sigmoid(gate[..., 0])}
        return log_probs

    def call(self, inputs, training=None):
        if isinstance(inputs, dict):
            source_ids, target_in_ids = inputs["source"], inputs["target_in"]
        else:
            source_ids, target_in_ids = inputs
        check_ids(source_ids, "source_ids")
        check_ids(target_in_ids, "target_in_ids")
        batch = (source_ids.shape[0], target_in_ids.shape[0])
        if None not in batch and batch[0] != batch[1]:
            raise ValueError(f"source_ids and target_in_ids disagree on the batch size: {batch}")
        memory, memory_mask = self.encode(source_ids, training=training)
        return self.decode(target_in_ids, memory, memory_mask, training=training,
                           source_ids=source_ids)

    # -- incremental decoding ---------------------------------------------------------------

    def encode_for_decoding(self, source_ids):
        """source_ids (B,S) -> cross-attention [keys_0, values_0, keys_1, ...], each
        (B,H,S,d_model/H), and the memory mask (B,S). A copy-attention model's list ends
        with the source_ids themselves, int32 (keras_transformer.cache.layout.memory_names)."""
        memory, mask = self.encode(source_ids, training=False)
        cross_key_values = self.decoder.compute_cross_key_values(memory)
        if self.copy_gate is not None:
            cross_key_values.append(ops.cast(source_ids, "int32"))
        return cross_key_values, mask

    def init_cache(self, batch_size, max_length=None):
        """Zeros [keys_0, values_0, keys_1, ...], each (B, H, max_length, d_model/H), for
        decode_step's self-attention."""
        length = max_length or self.config.max_target_length
        if length > self.config.max_target_length:
            raise ValueError(
                f"max_length {length} exceeds max_target_length "
                f"{self.config.max_target_length}; raise max_target_length in the config")
        return self.decoder.init_cache(batch_size, length, self.compute_dtype)

    def decode_step(self, tokens, cross_key_values, memory_mask, cache, index):
        """tokens (B,) at decoder position `index` -> logits (B,V) float32, updated cache."""
        logits, step_key_values = self.decode_step_key_values(tokens, cross_key_values,
                                                              memory_mask, cache, index)
        return logits, update_cache(cache, index, step_key_values)

    def decode_step_key_values(self, tokens, cross_key_values, memory_mask, cache, index):
        """decode_step with the cache read only: -> logits (B,V) float32 and this position's
        self-attention keys/values (B, layers, 2, d_model), which the caller writes into slot
        `index` (what the exported runtimes do, in place, outside the graph)."""
        x = self.target_embedding(tokens[:, None], start_index=index, training=False)
        if self.copy_gate is None:
            hidden, step_key_values = self.decoder.step_key_values(x, cache, index,
                                                                   cross_key_values, memory_mask)
            return self.logits(hidden[:, 0, :]), step_key_values
        hidden, step_key_values, (weights, context) = self.decoder.step_key_values(
            x, cache, index, cross_key_values, memory_mask, return_cross=True)
        attention = copy_attention_weights(weights, self.config.copy_head)[:, 0]
        gate = self.copy_gate(hidden[:, 0], context[:, 0], x[:, 0])
        return copy_mixture_log_probs(self.logits(hidden[:, 0, :]), gate, attention,
                                      cross_key_values[-1]), step_key_values

    def get_config(self):
        config = super().get_config()
        config["config"] = self.config.to_dict()
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
