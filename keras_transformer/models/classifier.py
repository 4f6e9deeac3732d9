"""Encoder-only Transformer: the encoder stack, pooled, then a softmax over classes."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.masks import masked_mean
from keras_transformer.models.backbone import EncoderBackbone, at_least
from keras_transformer.models.presets import FromPreset

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
        self.num_classes = at_least("num_classes", num_classes, 2)
        self.pooling = pooling
        c = self.make_backbone(config)
        policy = self.dtype_policy
        self.head_dropout = Dropout(c.dropout, dtype=policy)
        self.head = keras.layers.Dense(num_classes, dtype=policy, name="classifier")

    head_arguments = ("num_classes", "pooling")

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
