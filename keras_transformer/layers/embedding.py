"""Input embedding of section 3.4 plus the positional encoding of section 3.5."""

import math

import keras
import numpy as np
from keras import ops

from keras_transformer.config import POSITIONAL_KINDS
from keras_transformer.layers.dropout import Dropout


def sinusoidal_position_encoding(length: int, d_model: int) -> np.ndarray:
    """-> (length, d_model) float32: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    positions = np.arange(length, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
    angles = positions / np.power(10000.0, two_i / d_model)
    table = np.zeros((length, d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return table.astype(np.float32)


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEmbedding(keras.layers.Layer):
    """(batch, length) int ids -> (batch, length, d_model): token embedding * sqrt(d_model) + positions.

    Args:
        vocab_size: int. Number of token ids, the rows of the embedding matrix.
        d_model: int. Width of the embeddings and of the model.
        max_length: int. Longest sequence the layer accepts (the rows of the position table).
        positional: `"sinusoidal"` (the default; the fixed encoding of section 3.5, not a
            weight) or `"learned"` (a trained `(max_length, d_model)` weight).
        dropout: float. Dropout rate applied to the sum; defaults to `0.0`.
        token_embedding: optional `keras.layers.Embedding` to use instead of a new one, so that
            two layers share one token matrix; defaults to `None`, a new matrix initialised
            from normal(0, d_model^-0.5). It is not part of `get_config`.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        ids: (batch, length) int token ids.
        start_index: int, position of the first id (non-zero for one-token decoding steps).
        training: bool, whether dropout is active.

    Example:

    ```python
    embed = PositionalEmbedding(vocab_size=8000, d_model=512, max_length=256)
    x = embed(np.array([[5, 17, 3]]))  # (1, 3, 512)
    ```
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_length: int,
        positional: str = "sinusoidal",
        dropout: float = 0.0,
        token_embedding: keras.layers.Embedding | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional must be one of {POSITIONAL_KINDS}, got {positional!r}")
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.max_length = max_length
        self.positional = positional
        self.dropout = dropout
        # `token_embedding` lets a model share one token matrix between source and target
        # (section 3.4) while each side keeps its own positions.
        self.token_embedding = token_embedding or keras.layers.Embedding(
            vocab_size,
            d_model,
            # The embedding is also the pre-softmax projection when tied, so it keeps
            # the scale of a Dense kernel rather than Keras' uniform(-0.05, 0.05).
            embeddings_initializer=keras.initializers.RandomNormal(stddev=d_model**-0.5),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.dropout_layer = Dropout(dropout, dtype=self.dtype_policy)
        self.supports_masking = False

    def build(self, input_shape=None):
        self.token_embedding.build((None, None))
        if self.positional == "learned":
            self.position_embedding = self.add_weight(
                name="position_embedding",
                shape=(self.max_length, self.d_model),
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )
        else:
            # A NumPy constant, not a weight: it is a formula, so it stays out of checkpoints,
            # and it becomes a tensor in whichever graph reads it.
            self.position_embedding = sinusoidal_position_encoding(self.max_length, self.d_model)
        self.built = True

    @property
    def embeddings(self):
        """The (vocab_size, d_model) token matrix, shared with the output layer when tied."""
        return self.token_embedding.embeddings

    def check_length(self, length) -> None:
        if isinstance(length, int) and length > self.max_length:
            raise ValueError(
                f"sequence of {length} tokens is longer than this model's maximum of "
                f"{self.max_length} ({self.name}); shorten the input, or build the model "
                f"with a larger max_source_length / max_target_length in its config."
            )

    def positions(self, start, length):
        """-> (length, d_model) position vectors for positions start .. start+length-1."""
        table = ops.cast(ops.convert_to_tensor(self.position_embedding), self.compute_dtype)
        return ops.slice(table, (start, 0), (length, self.d_model))

    def call(self, ids, start_index=0, training=None):
        length = ids.shape[1]
        self.check_length(length)
        if length is None:
            length = ops.shape(ids)[1]
        tokens = self.token_embedding(ids) * ops.cast(math.sqrt(self.d_model), self.compute_dtype)
        x = tokens + self.positions(start_index, length)[None, :, :]
        return self.dropout_layer(x, training=training)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.d_model)

    def get_config(self):
        # `token_embedding` is left out: a config cannot refer to another layer's weights.
        # A model that shares one matrix passes it again when it rebuilds from its own config
        # (TransformerConfig.share_embeddings), so the sharing survives a .keras round trip.
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            max_length=self.max_length,
            positional=self.positional,
            dropout=self.dropout,
        )
        return config
