"""keras_transformer.layers.dropout against a NumPy oracle of its hash, and the statistics a
dropout mask needs: keep rate, no repeats between calls, independent positions and bits; on
the backend KERAS_BACKEND names (the hash's arithmetic differs between backends)."""

import keras
import numpy as np
import pytest

from keras_transformer.layers.dropout import Dropout, keep_threshold, random_bits
from tests.reference import dropout_bits


@pytest.mark.parametrize("seed", [(0, 0), (1234, 7), (2**31 - 1, 2**32 + 5), (-3, 9)])
def test_random_bits_match_the_numpy_hash(seed):
    shape = (3, 5, 7)
    bits = keras.ops.convert_to_numpy(random_bits(np.array(seed, np.int64), shape))
    # PyTorch has no uint32: there the same values come as int64.
    assert bits.dtype == (np.int64 if keras.backend.backend() == "torch" else np.uint32)
    assert bits.shape == shape
    np.testing.assert_array_equal(bits.ravel(), dropout_bits(seed, 105))


def test_bits_are_balanced_and_positions_independent():
    bits = dropout_bits((42, 0), 1 << 20)
    planes = (bits[:, None] >> np.arange(32, dtype=np.uint32)) & 1
    # Each of the 32 bits is set half the time (5 sigma of a fair coin over 2^20 draws).
    np.testing.assert_allclose(planes.mean(axis=0), 0.5, atol=5 * 0.5 / 1024)
    uniform = bits / 2.0**32
    lag1 = np.corrcoef(uniform[:-1], uniform[1:])[0, 1]
    assert abs(lag1) < 5 / 1024


@pytest.mark.parametrize("other", [(42, 1), (43, 0), (42 + 2**20, 0)])
def test_nearby_seeds_give_unrelated_masks(other):
    a = dropout_bits((42, 0), 1 << 16) < keep_threshold(0.5)
    b = dropout_bits(other, 1 << 16) < keep_threshold(0.5)
    assert abs(np.corrcoef(a, b)[0, 1]) < 5 / 256
    # Not a shifted copy either (one round of position + key would be).
    for shift in range(1, 9):
        assert abs(np.corrcoef(a[shift:], b[:-shift])[0, 1]) < 5 / 256


def test_keep_rate_scale_and_fresh_mask_per_call():
    layer = Dropout(0.1, seed=3)
    x = np.ones((64, 128, 128), np.float32)
    first = keras.ops.convert_to_numpy(layer(x, training=True))
    second = keras.ops.convert_to_numpy(layer(x, training=True))
    kept = first != 0
    n = kept.size
    assert abs(kept.mean() - 0.9) < 5 * np.sqrt(0.09 / n)
    np.testing.assert_allclose(first[kept], 1 / 0.9, rtol=1e-6)
    assert abs(np.corrcoef(kept.ravel(), (second != 0).ravel())[0, 1]) < 0.01
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x, training=False)), x)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(Dropout(0.0)(x, training=True)), x)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(Dropout(1.0)(x[:2], training=True)), 0)


def test_mask_is_the_hash_of_the_seed_generators_seed():
    layer = Dropout(0.3, seed=11)
    # The backend's own seed dtype (int64, uint32 or int32 with the bits of a uint32).
    seed = keras.ops.convert_to_numpy(layer.seed_generator.state.value)
    x = np.arange(1, 61, dtype=np.float32).reshape(3, 4, 5)
    out = keras.ops.convert_to_numpy(layer(x, training=True))
    keep = (dropout_bits(seed, 60) >= keep_threshold(0.3)).reshape(x.shape)
    np.testing.assert_allclose(out, np.where(keep, x / 0.7, 0), rtol=1e-6)


@pytest.mark.tf_only
def test_eager_graph_and_xla_draw_the_same_mask():
    import tensorflow as tf

    x = tf.ones((5, 33, 17))
    outs = []
    for wrap in (lambda f: f, tf.function, lambda f: tf.function(f, jit_compile=True)):
        layer = Dropout(0.25, seed=5)
        outs.append(np.asarray(wrap(lambda v, layer=layer: layer(v, training=True))(x)))
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


@pytest.mark.tf_only
def test_dynamic_shapes_in_a_graph():
    import tensorflow as tf

    layer = Dropout(0.5, seed=1)
    f = tf.function(lambda v: layer(v, training=True),
                    input_signature=[tf.TensorSpec([None, None, 8], tf.float32)])
    for shape in ((2, 3, 8), (4, 9, 8)):
        assert f(tf.ones(shape)).shape == shape


@pytest.mark.tf_only
def test_gradient_is_the_mask_over_keep_probability():
    import tensorflow as tf

    layer = Dropout(0.4, seed=2)
    x = tf.Variable(tf.ones((6, 50)))
    with tf.GradientTape() as tape:
        y = layer(x, training=True)
    grad = tape.gradient(y, x).numpy()
    np.testing.assert_allclose(grad, np.where(y.numpy() != 0, 1 / 0.6, 0), rtol=1e-6)


def test_serialization_round_trip():
    layer = Dropout(0.2, seed=9, name="drop")
    again = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(again) is Dropout
    assert (again.rate, again.seed, again.name) == (0.2, 9, "drop")
