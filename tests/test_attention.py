import keras
import numpy as np
import pytest

from keras_transformer.cache.tensors import update_cache
from keras_transformer.layers.attention import (
    MultiHeadAttention,
    attention_with_new_position,
    scaled_dot_product_attention,
)
from keras_transformer.layers.masks import causal_mask, key_padding_mask
from tests.reference import attention, multi_head_attention

pytestmark = pytest.mark.usefixtures("seeded")


def test_scaled_dot_product_matches_reference_with_mask():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 3, 5, 8)).astype("float32")
    k = rng.normal(size=(2, 3, 6, 8)).astype("float32")
    v = rng.normal(size=(2, 3, 6, 4)).astype("float32")
    mask = rng.random((2, 1, 5, 6)) > 0.3
    mask[..., 0] = True  # every query keeps at least one key
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    ref_out, ref_weights = attention(q, k, v, mask)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weights), ref_weights, atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), ref_out, atol=1e-5)
    assert np.all(keras.ops.convert_to_numpy(weights)[np.broadcast_to(~mask, weights.shape)] == 0.0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weights).sum(-1), 1.0, atol=1e-6)


def test_one_key_gets_weight_one_without_a_softmax_warning(recwarn):
    rng = np.random.default_rng(2)
    q = rng.normal(size=(2, 3, 4, 8)).astype("float32")
    k = rng.normal(size=(2, 3, 1, 8)).astype("float32")
    v = rng.normal(size=(2, 3, 1, 4)).astype("float32")
    out, weights = scaled_dot_product_attention(q, k, v, np.ones((2, 1, 4, 1), bool))
    ref_out, ref_weights = attention(q, k, v)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(weights), ref_weights)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), ref_out, atol=1e-6)
    assert not [w for w in recwarn if "softmax" in str(w.message)]


def test_scale_is_one_over_sqrt_dk():
    # One query, two keys: weights are softmax([q.k1, q.k2] / sqrt(d_k)).
    q = np.array([[[[1.0, 1.0, 1.0, 1.0]]]], "float32")
    k = np.array([[[[1.0, 0, 0, 0], [2.0, 2.0, 2.0, 2.0]]]], "float32")
    v = np.eye(2, dtype="float32")[None, None]
    _, weights = scaled_dot_product_attention(q, k, v)
    logits = np.array([1.0, 8.0]) / 2.0
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weights)[0, 0, 0],
                               np.exp(logits) / np.exp(logits).sum(), atol=1e-6)


def test_multi_head_matches_reference():
    rng = np.random.default_rng(1)
    mha = MultiHeadAttention(num_heads=4, d_model=16)
    query = rng.normal(size=(2, 5, 16)).astype("float32")
    value = rng.normal(size=(2, 7, 16)).astype("float32")
    ids = np.array([[5] * 7, [5] * 4 + [0] * 3])
    mask = keras.ops.convert_to_numpy(key_padding_mask(ids))
    out, weights = mha(query, value, mask, return_attention_scores=True)
    ref_out, ref_weights = multi_head_attention(mha, query, value, mask)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), ref_out, atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weights), ref_weights, atol=1e-6)
    assert np.all(keras.ops.convert_to_numpy(weights)[1, :, :, 4:] == 0.0)


def test_causal_mask_shape_and_values():
    mask = keras.ops.convert_to_numpy(causal_mask(4))
    assert mask.shape == (1, 1, 4, 4)
    np.testing.assert_array_equal(mask[0, 0], np.tril(np.ones((4, 4), bool)))


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        MultiHeadAttention(num_heads=3, d_model=16)


def test_cache_update_writes_only_its_slot():
    rng = np.random.default_rng(1)
    # 3 layers, keys and values each: (B=2, H=2, T=5, head_dim=2).
    cache = [rng.normal(size=(2, 2, 5, 2)).astype("float32") for _ in range(6)]
    rows = rng.normal(size=(2, 3, 2, 4)).astype("float32")
    updated = [keras.ops.convert_to_numpy(a) for a in update_cache(cache, 3, rows)]
    for i, (before, after) in enumerate(zip(cache, updated, strict=True)):
        expected = before.copy()
        # Head h of a row holds features h*head_dim .. (h+1)*head_dim - 1.
        expected[:, :, 3] = rows[:, i // 2, i % 2].reshape(2, 2, 2)
        np.testing.assert_array_equal(after, expected)


@pytest.mark.parametrize("index", [0, 3, 6])
def test_attention_with_new_position_equals_attention_over_the_written_cache(index):
    rng = np.random.default_rng(index)
    q, key, value = (rng.normal(size=(2, 3, 1, 4)).astype("float32") for _ in range(3))
    cache_k, cache_v = (rng.normal(size=(2, 3, 7, 4)).astype("float32") for _ in range(2))
    got = keras.ops.convert_to_numpy(attention_with_new_position(q, cache_k, cache_v, key, value, index))
    # Reference: write the new key/value into slot `index`, attend to slots 0..index.
    k, v = cache_k.copy(), cache_v.copy()
    k[:, :, index], v[:, :, index] = key[:, :, 0], value[:, :, 0]
    visible = (np.arange(7) <= index)[None, None, None, :]
    np.testing.assert_allclose(got, attention(q, k, v, visible)[0], atol=1e-5)


def test_cached_self_attention_equals_causal_full_call():
    rng = np.random.default_rng(2)
    mha = MultiHeadAttention(num_heads=2, d_model=8)
    x = rng.normal(size=(3, 6, 8)).astype("float32")
    full = keras.ops.convert_to_numpy(mha(x, x, causal_mask(6)))
    # Garbage in the slots not written yet: the step must not look at them.
    # The cache is split into heads: (B, H=2, T, 4).
    cache_k, cache_v = (rng.normal(size=(3, 2, 6, 4)).astype("float32") for _ in range(2))
    for t in range(6):
        out, key, value = mha.call_cached(x[:, t:t + 1], cache_k, cache_v, t)
        cache_k[:, :, t] = keras.ops.convert_to_numpy(key)[:, 0].reshape(3, 2, 4)
        cache_v[:, :, t] = keras.ops.convert_to_numpy(value)[:, 0].reshape(3, 2, 4)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(out)[:, 0], full[:, t], atol=1e-5)
