"""Encoder-only Transformer tagger: the encoder stack, then a logit for every piece (the
content selector of bottom-up summarization: which pieces of an article a summary copies)."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers.dropout import Dropout
from keras_transformer.models.backbone import EncoderBackbone
from keras_transformer.models.presets import FromPreset


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerTagger(EncoderBackbone, FromPreset, keras.Model):
    """ids (B,S) int -> one logit per piece (B,S) float32 (uses the source-side config); the
    logit of a padding position is of no meaning.

    Each piece's encoder state goes through dropout and a Dense(1): a sigmoid of the logit is
    the probability that the piece is selected. The trunk is the masked language model's
    (`embedding/...`, `encoder/...`), so a pre-trained run loads into it by name
    (`from_preset`, `training.init_from`).

    Args:
        config: `TransformerConfig`, or its `to_dict()`; the source vocabulary, the encoder
            sizes, `max_source_length` and the padding id are read from it. Defaults to
            `None`, `TransformerConfig()`.
        **kwargs: other `keras.Model` arguments (`name`, `dtype` for a mixed-precision policy).

    Example:

    ```python
    config = TransformerConfig.preset("tiny", source_vocab_size=8000, max_source_length=400)
    model = TransformerTagger(config)
    logits = model(ids)  # (B, S)
    ```
    """

    def __init__(self, config: TransformerConfig | dict | None = None, **kwargs):
        super().__init__(**kwargs)
        c = self.make_backbone(config)
        policy = self.dtype_policy
        self.head_dropout = Dropout(c.dropout, dtype=policy)
        self.head = keras.layers.Dense(1, dtype=policy, name="tagger")

    def build(self, input_shape=None):
        self.build_backbone()
        self.head.build((None, None, self.config.d_model))
        self.built = True

    def tag(self, states, training=None):
        """Encoder states (B,S,d_model) -> piece logits (B,S) float32."""
        x = self.head_dropout(states, training=training)
        return ops.cast(ops.squeeze(self.head(x), -1), "float32")

    def call(self, ids, training=None):
        states, _ = self.encode(ids, training=training)
        return self.tag(states, training=training)
