import keras
import numpy as np
import pytest

from keras_transformer.layers.add_norm import AddNorm
from keras_transformer.layers.feed_forward import FeedForward
from tests.reference import dense, layer_norm

pytestmark = pytest.mark.usefixtures("seeded")


def test_feed_forward_is_relu_mlp():
    rng = np.random.default_rng(0)
    ffn = FeedForward(d_model=6, d_ff=12)
    x = rng.normal(size=(2, 3, 6)).astype("float32")
    out = keras.ops.convert_to_numpy(ffn(x))
    expected = dense(ffn.outer, np.maximum(dense(ffn.inner, x), 0.0))
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_post_norm_and_pre_norm():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 6)).astype("float32")
    y = rng.normal(size=(2, 3, 6)).astype("float32")
    post = AddNorm(6, pre_norm=False, epsilon=1e-6)
    out = keras.ops.convert_to_numpy(post(x, y))
    gamma, beta = (keras.ops.convert_to_numpy(w) for w in post.norm.weights)
    np.testing.assert_allclose(out, layer_norm(x + y, gamma, beta, 1e-6), atol=1e-5)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(post.normalize_input(x)), x)

    pre = AddNorm(6, pre_norm=True, epsilon=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(pre(x, y)), x + y, atol=1e-6)
    gamma, beta = (keras.ops.convert_to_numpy(w) for w in pre.norm.weights)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(pre.normalize_input(x)),
                               layer_norm(x, gamma, beta, 1e-6), atol=1e-5)


def test_dropout_only_in_training():
    x = np.ones((1, 4, 6), "float32")
    y = np.ones((1, 4, 6), "float32")
    layer = AddNorm(6, dropout=0.5, pre_norm=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x, y, training=False)), 2.0)
    trained = keras.ops.convert_to_numpy(layer(x, y, training=True))
    assert set(np.round(np.unique(trained), 4)) <= {1.0, 3.0}
    assert (trained == 1.0).any()
