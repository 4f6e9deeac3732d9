import keras
import numpy as np
import pytest

from keras_transformer.layers.embedding import PositionalEmbedding, sinusoidal_position_encoding
from tests.reference import positional_encoding

pytestmark = pytest.mark.usefixtures("seeded")


@pytest.mark.parametrize("length,d_model", [(50, 16), (7, 6), (128, 64)])
def test_sinusoidal_table_matches_formula(length, d_model):
    np.testing.assert_allclose(sinusoidal_position_encoding(length, d_model),
                               positional_encoding(length, d_model), atol=1e-6)


def test_known_values():
    table = sinusoidal_position_encoding(3, 4)
    # pos 1: sin(1), cos(1), sin(1/100), cos(1/100)
    np.testing.assert_allclose(table[1], [np.sin(1), np.cos(1), np.sin(0.01), np.cos(0.01)],
                               atol=1e-7)
    np.testing.assert_allclose(table[0], [0, 1, 0, 1])


def test_embedding_is_scaled_tokens_plus_positions():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=10)
    ids = np.array([[5, 6, 7], [1, 0, 0]], "int32")
    out = keras.ops.convert_to_numpy(layer(ids))
    matrix = keras.ops.convert_to_numpy(layer.embeddings)
    expected = matrix[ids] * np.sqrt(8) + positional_encoding(3, 8)[None]
    np.testing.assert_allclose(out, expected, atol=1e-5)
    # A step at position 2 sees the same vector as position 2 of the full sequence.
    step = keras.ops.convert_to_numpy(layer(ids[:, 2:3], start_index=2))
    np.testing.assert_allclose(step[:, 0], out[:, 2], atol=1e-6)


def test_learned_positions_are_weights():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=10, positional="learned")
    layer(np.zeros((1, 3), "int32"))
    names = [w.path for w in layer.weights]
    assert any("position_embedding" in n for n in names)
    ids = np.array([[4, 4, 4]], "int32")
    out = keras.ops.convert_to_numpy(layer(ids))
    table = keras.ops.convert_to_numpy(layer.position_embedding)
    np.testing.assert_allclose(out[0] - out[0, 0], table[:3] - table[0], atol=1e-5)


def test_too_long_sequence_is_a_clear_error():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=4)
    with pytest.raises(ValueError, match="longer than this model's maximum of 4"):
        layer(np.zeros((1, 5), "int32"))


def test_unknown_positional_kind():
    with pytest.raises(ValueError, match="positional must be one of"):
        PositionalEmbedding(vocab_size=20, d_model=8, max_length=4, positional="rotary")
