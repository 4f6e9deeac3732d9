"""Encoder-only masked language model (BERT's pre-training task): the encoder stack reads
ids with some pieces replaced by [MASK], and a head tied to the input embedding predicts the
original piece at every position, or, in training, at the masked positions only.

The trunk's layers carry the names the classifier's and the extractor's do (`embedding`,
`encoder`), so that their weights load into those models by name
(`train.warm_start`): a masked LM is pre-trained once and fine-tuned into either.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers.masks import masked_mean
from keras_transformer.models.backbone import EncoderBackbone
from keras_transformer.models.presets import FromPreset
from keras_transformer.models.transformer import vocab_logits


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerMaskedLM(EncoderBackbone, FromPreset, keras.Model):
    """ids (B,S) int -> logits (B,S,V) float32 of the piece at every position (source side);
    (ids (B,S), positions (B,P)) int -> logits (B,P,V) at those positions only.

    The head is BERT's: a dense layer with GELU and a LayerNorm, then the transposed input
    embedding (tied, section 3.4 of the paper) plus a bias per piece. Padding positions are
    masked out of attention; the loss reads only the masked positions' targets. With
    positions (BERT's `max_predictions_per_seq` slots a row, as
    `keras_transformer.text.masking.masked_positions` lists them) the encoder states are
    gathered there before the head, so the head's cost, at a vocabulary of thousands the
    larger part of the step, follows the masked pieces rather than the row's length; the
    logits at those positions are the ones the call on ids alone gives there.

    With `next_sentence` (BERT's next-sentence prediction) the model also has a two-way head
    over the row's pooled states (the mean over real pieces, then a dense layer with tanh,
    BERT's pooler): the call with positions returns `(logits (B,P,V), next-sentence logits
    (B,2))`, class 1 when the row's second segment follows its first
    (`keras_transformer.text.sentence_pairs`). The call on ids alone stays the fill-mask
    logits, what is exported; `next_sentence_logits(ids)` gives the head's.

    Args:
        config: `TransformerConfig`, or its `to_dict()`; the source vocabulary and length, the
            encoder sizes and the padding id are read from it. Defaults to `None`,
            `TransformerConfig()`.
        next_sentence: add the next-sentence head. Defaults to `False`.
        **kwargs: other `keras.Model` arguments (`name`, `dtype` for a mixed-precision policy).

    Example:

    ```python
    config = TransformerConfig.preset("tiny", source_vocab_size=8000)
    model = TransformerMaskedLM(config)
    logits = model(ids)  # (B, S, 8000)
    logits = model((ids, positions))  # (B, P, 8000): training on masked positions only
    ```
    """

    head_arguments = ("next_sentence",)

    def __init__(self, config: TransformerConfig | dict | None = None,
                 next_sentence: bool = False, **kwargs):
        super().__init__(**kwargs)
        c = self.make_backbone(config)
        self.next_sentence = bool(next_sentence)
        policy = self.dtype_policy
        self.head_transform = keras.layers.Dense(c.d_model, activation="gelu", dtype=policy,
                                                 name="mlm_transform")
        self.head_norm = keras.layers.LayerNormalization(epsilon=c.layer_norm_epsilon,
                                                         dtype=policy, name="mlm_norm")
        if self.next_sentence:
            self.nsp_pooler = keras.layers.Dense(c.d_model, activation="tanh", dtype=policy,
                                                 name="nsp_pooler")
            self.nsp_head = keras.layers.Dense(2, dtype=policy, name="nsp_head")

    def build(self, input_shape=None):
        c = self.config
        self.build_backbone()
        self.head_transform.build((None, None, c.d_model))
        self.head_norm.build((None, None, c.d_model))
        self.head_bias = self.add_weight(name="mlm_bias", shape=(c.source_vocab_size,),
                                         initializer="zeros")
        if self.next_sentence:
            self.nsp_pooler.build((None, c.d_model))
            self.nsp_head.build((None, c.d_model))
        self.built = True

    def _next_sentence(self, states, mask):
        pooled = self.nsp_pooler(masked_mean(states, mask))
        return ops.cast(self.nsp_head(pooled), "float32")

    def next_sentence_logits(self, ids, training=None):
        """ids (B,S) A [SEP] B EOS rows -> (B,2) float32 logits, class 1: B follows A."""
        if not self.next_sentence:
            raise ValueError("this masked language model has no next-sentence head (build "
                             "it with next_sentence=True)")
        states, mask = self.encode(ids, training=training)
        return self._next_sentence(states, mask)

    def call(self, inputs, training=None):
        ids, positions = inputs if isinstance(inputs, (tuple, list)) else (inputs, None)
        states, mask = self.encode(ids, training=training)
        follows = (self._next_sentence(states, mask)
                   if self.next_sentence and positions is not None else None)
        if positions is not None:
            if len(positions.shape) != 2 or "int" not in str(positions.dtype):
                raise ValueError(f"positions must be integer positions of shape (batch, "
                                 f"predictions), got {positions.dtype} {tuple(positions.shape)}")
            states = ops.take_along_axis(states, ops.expand_dims(positions, -1), axis=1)
        hidden = self.head_norm(self.head_transform(states))
        logits = vocab_logits(hidden, self.embedding) + ops.cast(self.head_bias, "float32")
        return logits if follows is None else (logits, follows)
