"""Encoder-only extractive summarizer: every sentence of an article encoded alone, its pieces'
mean, a sentence-position embedding, inter-sentence encoder layers, a score per sentence."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.encoder import Encoder
from keras_transformer.layers.masks import masked_mean
from keras_transformer.models.backbone import EncoderBackbone, at_least
from keras_transformer.models.presets import FromPreset
from keras_transformer.models.transformer import check_ids


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerExtractor(EncoderBackbone, FromPreset, keras.Model):
    """ids (B,K,S) int -> sentence logits (B,K) float32 (uses the source-side config).

    Row k of an article is its k-th sentence's pieces + EOS, right-padded with PAD to S; an
    article with fewer than K sentences is padded with rows of PAD only. Each sentence is
    encoded by itself by the token encoder (`num_encoder_layers`), pooled to the mean of its
    pieces' states, given a learned embedding of its position in the article, and read in
    context by `sentence_layers` encoder layers over the article's sentences (padding rows
    masked). The logit of a padding row is of no meaning.

    Args:
        config: `TransformerConfig`, or its `to_dict()`; the source vocabulary, the encoder
            sizes, `max_source_length` (pieces of one sentence, with EOS) and the padding id
            are read from it. Defaults to `None`, `TransformerConfig()`.
        max_sentences: int >= 1. The most sentences of an article (K); defaults to `32`.
        sentence_layers: int >= 1. Inter-sentence encoder layers; defaults to `2`.
        **kwargs: other `keras.Model` arguments (`name`, `dtype` for a mixed-precision policy).

    Example:

    ```python
    config = TransformerConfig.preset("tiny", source_vocab_size=8000, max_source_length=48)
    model = TransformerExtractor(config, max_sentences=16)
    logits = model(ids)  # ids (B, 16, 48) -> (B, 16)
    ```
    """

    def __init__(self, config: TransformerConfig | dict | None = None, max_sentences: int = 32,
                 sentence_layers: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.max_sentences = at_least("max_sentences", max_sentences, 1)
        self.sentence_layers = at_least("sentence_layers", sentence_layers, 1)
        c = self.make_backbone(config)
        policy = self.dtype_policy
        # Learned: news puts its gist first, and how much a place counts is for the data to say.
        self.sentence_position = keras.layers.Embedding(max_sentences, c.d_model, dtype=policy,
                                                        name="sentence_position")
        self.sentence_dropout = Dropout(c.dropout, dtype=policy)
        self.sentence_encoder = Encoder(sentence_layers, c.d_model, c.num_heads, c.d_ff,
                                        c.dropout, c.attention_dropout, c.pre_norm,
                                        c.layer_norm_epsilon, dtype=policy,
                                        name="sentence_encoder")
        self.head = keras.layers.Dense(1, dtype=policy, name="scorer")

    head_arguments = ("max_sentences", "sentence_layers")

    def build(self, input_shape=None):
        d = self.config.d_model
        self.build_backbone()
        self.sentence_position.build((None,))
        self.sentence_encoder.build((None, None, d))
        self.head.build((None, None, d))
        self.built = True

    def sentence_vectors(self, ids, training=None):
        """ids (B,K,S) -> (B,K,d_model) sentence vectors (the mean of each sentence's encoded
        pieces) and the sentence mask (B,K) bool, True at rows holding a piece."""
        check_ids(ids, "ids", ("batch", "sentences", "length"))
        shape = ops.shape(ids)
        batch, sentences, length = shape[0], shape[1], shape[2]
        flat = ops.reshape(ids, (batch * sentences, length))
        states, mask = self.encode(flat, training=training)
        vectors = ops.reshape(masked_mean(states, mask), (batch, sentences, self.config.d_model))
        sentence_mask = ops.reshape(ops.any(mask, axis=-1), (batch, sentences))
        return vectors, sentence_mask

    def call(self, ids, training=None):
        vectors, sentence_mask = self.sentence_vectors(ids, training=training)
        positions = self.sentence_position(ops.arange(ops.shape(ids)[1]))
        x = self.sentence_dropout(vectors + ops.expand_dims(positions, 0), training=training)
        x = self.sentence_encoder(x, sentence_mask, training=training)
        return ops.cast(ops.squeeze(self.head(x), -1), "float32")
