"""Encoder-only Transformer: the encoder stack, pooled, then a softmax over classes."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.masks import masked_mean
from keras_transformer.models.backbone import EncoderBackbone
from keras_transformer.models.presets import FromPreset
from keras_transformer.models.transformer import as_config

POOLINGS = ("mean", "first")


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerClassifier(EncoderBackbone, FromPreset, keras.Model):
    """ids (B,S) int -> class logits (B,num_classes) float32 (uses the source-side config).

    Args:
        config: `TransformerConfig`, or its `to_dict()`; the source vocabulary, the encoder
            sizes and the padding id are read from it. Defaults to `None`,
            `TransformerConfig()`.
        num_classes: int >= 2. Number of classes; defaults to `2`.
        pooling: `"mean"` (the default; the mean of the encoder states over real tokens) or
            `"first"` (the state at position 0).
        **kwargs: other `keras.Model` arguments (`name`, `dtype` for a mixed-precision policy).

    Example:

    ```python
    config = TransformerConfig.preset("tiny", source_vocab_size=8000)
    model = TransformerClassifier(config, num_classes=2)
    logits = model(ids)  # (B, 2)
    ```
    """

    def __init__(self, config: TransformerConfig | dict | None = None, num_classes: int = 2,
                 pooling: str = "mean", **kwargs):
        super().__init__(**kwargs)
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if num_classes < 2:
            raise ValueError(f"num_classes must be at least 2, got {num_classes}")
        self.config = as_config(config)
        self.num_classes = num_classes
        self.pooling = pooling
        c = self.config
        policy = self.dtype_policy
        self.make_backbone()
        self.head_dropout = Dropout(c.dropout, dtype=policy)
        self.head = keras.layers.Dense(num_classes, dtype=policy, name="classifier")

    def build(self, input_shape=None):
        self.build_backbone()
        self.head.build((None, self.config.d_model))
        self.built = True

    def pool(self, states, mask):
        """states (B,S,d_model), mask (B,S) -> (B,d_model): mean over real tokens, or position 0."""
        if self.pooling == "first":
            return states[:, 0, :]
        return masked_mean(states, mask)

    def classify(self, states, mask, training=None):
        """Encoder states (B,S,d_model) and their mask (B,S) -> class logits (B,num_classes)
        float32: pooled, then the classification head."""
        pooled = self.head_dropout(self.pool(states, mask), training=training)
        return ops.cast(self.head(pooled), "float32")

    def call(self, ids, training=None):
        states, mask = self.encode(ids, training=training)
        return self.classify(states, mask, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(config=self.config.to_dict(), num_classes=self.num_classes,
                      pooling=self.pooling)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
