"""The encoder-only trunk the classifier, the extractive summarizer and the masked language
model share: the positional embedding and the encoder stack over one sequence of ids.

It is a mixin of those `keras.Model`s rather than a sub-model (keras-hub's `Backbone`): as
attributes of the model, its layers keep the names `embedding` and `encoder` at the top of
every weight path, so the `.keras` files of earlier runs still load, and a pre-trained masked
language model's trunk loads into a fine-tuned classifier or extractor by name
(`training.init_from`).
"""

from __future__ import annotations

from keras_transformer.config import TransformerConfig
from keras_transformer.layers.embedding import PositionalEmbedding
from keras_transformer.layers.encoder import Encoder
from keras_transformer.layers.masks import padding_mask
from keras_transformer.models.transformer import as_config, check_ids, stack_options


class EncoderBackbone:
    """`embedding` and `encoder` layers of a model with a `config` (its source vocabulary,
    encoder sizes and padding id), their build, and `encode`."""

    # The constructor's arguments beside `config`, saved by get_config as the attributes of
    # the same names.
    head_arguments: tuple[str, ...] = ()

    def make_backbone(self, config) -> TransformerConfig:
        """`self.config` from `config` (a TransformerConfig, its `to_dict()`, or None) and the
        trunk's layers from it in the model's dtype policy (call in `__init__`); returns the
        config."""
        self.config = c = as_config(config)
        policy = self.dtype_policy
        self.embedding = PositionalEmbedding(c.source_vocab_size, c.d_model, c.max_source_length,
                                             c.positional, c.dropout, dtype=policy,
                                             name="embedding")
        self.encoder = Encoder(c.num_encoder_layers, name="encoder", **stack_options(c, policy))
        return c

    def build_backbone(self) -> None:
        """Build the trunk's weights (call in `build`)."""
        self.embedding.build((None, None))
        self.encoder.build((None, None, self.config.d_model))

    def encode(self, ids, training=None, return_attention_scores=False):
        """ids (B,S) -> encoder states (B,S,d_model) and their padding mask (B,S) bool; with
        return_attention_scores also every layer's self-attention weights, a list of
        `num_encoder_layers` (B,H,S,S) (what the attention explorer shows)."""
        check_ids(ids, "ids")
        mask = padding_mask(ids, self.config.pad_id)
        out = self.encoder(self.embedding(ids, training=training), mask, training=training,
                           return_attention_scores=return_attention_scores)
        if return_attention_scores:
            states, weights = out
            return states, mask, weights
        return out, mask

    def get_config(self):
        config = super().get_config()
        config.update(config=self.config.to_dict(),
                      **{name: getattr(self, name) for name in self.head_arguments})
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def at_least(name: str, value: int, minimum: int) -> int:
    """`value` of the constructor argument `name`, or ValueError when it is below `minimum`."""
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value
