"""The cache layout, its NumPy write and reorder, and VariableCache against NumPy: slot
writes, beam reorders, and reuse of the traces."""

import numpy as np
import pytest

from keras_transformer.cache import layout
from keras_transformer.cache.variables import VariableCache


def _write_reference(cache, rows, index):
    heads = cache[0].shape[1]
    for i, array in enumerate(cache):
        array[:, :, index] = rows[:, i // 2, i % 2].reshape(len(array), heads, -1)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_writes_and_reorders_like_numpy(jit_compile):
    rng = np.random.default_rng(0)
    # 2 layers x keys/values, each (B=3, H=2, T=5, head_dim=4): rows (B, L=2, 2, D=8).
    reference = [rng.normal(size=(3, 2, 5, 4)).astype(np.float32) for _ in range(4)]
    cache = VariableCache([a.copy() for a in reference], jit_compile=jit_compile)
    for index, parents in ((0, [2, 2, 0]), (3, [1, 0, 1]), (4, None)):
        rows = rng.normal(size=(3, 2, 2, 8)).astype(np.float32)
        cache.write(rows, index)
        _write_reference(reference, rows, index)
        if parents is not None:
            cache.reorder(np.array(parents))
            reference = [a[parents] for a in reference]
        for got, want in zip(cache.numpy(), reference, strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_other_shapes_reuse_the_functions_correctly(jit_compile):
    """A second cache of another batch and length goes through the same tf.functions: its
    own shape must be used, not the first one's."""
    rng = np.random.default_rng(1)
    # Models differ in heads and head size too: (batch, heads, length, head_dim).
    for batch, heads, length, head_dim in ((2, 2, 4, 3), (5, 2, 9, 3), (2, 1, 3, 2),
                                           (4, 2, 38, 16), (3, 4, 7, 8)):
        reference = [np.zeros((batch, heads, length, head_dim), np.float32) for _ in range(2)]
        cache = VariableCache([a.copy() for a in reference], jit_compile=jit_compile)
        rows = rng.normal(size=(batch, 1, 2, heads * head_dim)).astype(np.float32)
        cache.write(rows, length - 1)
        _write_reference(reference, rows, length - 1)
        for got, want in zip(cache.numpy(), reference, strict=True):
            np.testing.assert_array_equal(got, want)


def test_reorder_outside_the_rows_is_refused():
    cache = VariableCache([np.zeros((2, 1, 3, 2), np.float32)] * 2)
    with pytest.raises(IndexError, match=r"outside \[0, 2\)"):
        cache.reorder(np.array([0, 2]))


def test_numpy_conversion_splits_heads_as_the_model_does():
    """The (B,L,2,T,D) -> per-layer (B,H,T,D/H) conversion (used for parity
    inputs) against MultiHeadAttention.split_heads."""
    from keras_transformer.layers.attention import MultiHeadAttention

    x = np.random.default_rng(2).normal(size=(3, 2, 2, 5, 8)).astype(np.float32)
    split = MultiHeadAttention(num_heads=4, d_model=8).split_heads
    got = layout.per_layer_heads(x, heads=4)
    assert len(got) == 4 and all(a.flags["C_CONTIGUOUS"] for a in got)
    for i, array in enumerate(got):
        np.testing.assert_array_equal(array, np.asarray(split(x[:, i // 2, i % 2])))


def _numpy_backend(layers, heads, d_model):
    from export.runtime.base import Backend

    class _Manifest:
        model = {"num_decoder_layers": layers, "num_heads": heads, "d_model": d_model}

    return Backend(_Manifest())


def test_numpy_runtimes_cache_writes_and_reorders_like_numpy():
    """The ONNX/TFLite cache (one NumPy array per layer and kind, written and reordered in
    place, only the rows that change parent and only the slots written so far) against a
    full gather of every row and slot."""
    rng = np.random.default_rng(3)
    backend = _numpy_backend(layers=2, heads=2, d_model=8)
    cache = backend.init_cache(batch=4, length=6)
    assert len(cache) == 4
    assert all(a.shape == (4, 2, 6, 4) and a.flags["C_CONTIGUOUS"] for a in cache)
    reference = [np.zeros((4, 2, 6, 4), np.float32) for _ in range(4)]
    arrays = list(cache)
    # Parents with cycles (0<->1), a row copied twice (3 -> 2, 3), and rows kept.
    for index, parents in ((0, [1, 0, 3, 3]), (1, [0, 1, 2, 3]), (2, [2, 2, 0, 1]),
                           (4, [3, 1, 1, 0]), (5, None)):
        rows = rng.normal(size=(4, 2, 2, 8)).astype(np.float32)
        cache = backend.write(cache, rows, index)
        _write_reference(reference, rows, index)
        if parents is not None:
            cache = backend.gather(cache, np.array(parents), filled=index + 1)
            reference = [a[parents] for a in reference]
        for got, want in zip(cache, reference, strict=True):
            # Slots after `index` are not read before they are written: only the rest counts.
            np.testing.assert_array_equal(got[:, :, :index + 1], want[:, :, :index + 1])
    assert all(a is b for a, b in zip(cache, arrays, strict=True))  # in place
    before = [a.copy() for a in cache]
    swapped = backend.gather(cache, np.array([1, 0, 2, 3]))  # filled=None: every slot
    for got, old in zip(swapped, before, strict=True):
        np.testing.assert_array_equal(got, old[[1, 0, 2, 3]])
    with pytest.raises(IndexError, match=r"outside \[0, 4\)"):
        backend.gather(cache, np.array([0, 4, 1, 2]))


def test_numpy_runtimes_cache_from_the_model_layout():
    x = np.random.default_rng(4).normal(size=(2, 3, 2, 4, 6)).astype(np.float32)
    backend = _numpy_backend(layers=3, heads=3, d_model=6)
    cache = backend.cache_from(x)
    for got, want in zip(cache, layout.per_layer_heads(x, 3), strict=True):
        np.testing.assert_array_equal(got, want)
    assert [a.shape for a in cache] == [(2, 3, 4, 2)] * 6


def test_layout_names_and_slots():
    assert layout.cache_names(2) == ["cache_keys_0", "cache_values_0", "cache_keys_1",
                                     "cache_values_1"]
    assert layout.memory_names(1) == ["cross_keys_0", "cross_values_0"]
    assert [layout.layer_kind(i) for i in range(layout.num_slots(3))] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert all(layout.slot(*layout.layer_kind(i)) == i for i in range(6))


def test_layout_write_matches_a_reshape_of_the_step_rows():
    """layout.write puts step_key_values[:, l, k] (B,D), split into heads, in slot `index` of
    array 2l+k; checked against a transpose of the (B,L,2,D) rows into (2L,B,H,D/H)."""
    rng = np.random.default_rng(5)
    batch, layers, heads, length, d_model = 3, 2, 2, 5, 8
    cache = layout.zeros(layers, batch, heads, length, d_model)
    assert [a.shape for a in cache] == [(batch, heads, length, d_model // heads)] * 4
    rows = rng.normal(size=(batch, layers, 2, d_model)).astype(np.float32)
    assert layout.write(cache, rows, 3) is cache
    want = rows.reshape(batch, layers * 2, heads, d_model // heads).transpose(1, 0, 2, 3)
    for i, array in enumerate(cache):
        np.testing.assert_array_equal(array[:, :, 3], want[i])
        assert not array[:, :, [0, 1, 2, 4]].any()


@pytest.mark.parametrize("parents", [[1, 0, 3, 3], [0, 1, 2, 3], [2, 2, 0, 1], [3, 0]])
def test_layout_reorder_equals_np_take(parents):
    rng = np.random.default_rng(6)
    cache = [rng.normal(size=(4, 2, 5, 3)).astype(np.float32) for _ in range(4)]
    before = [a.copy() for a in cache]
    got = layout.reorder(cache, np.array(parents))
    for array, old in zip(got, before, strict=True):
        np.testing.assert_array_equal(array, np.take(old, parents, axis=0))
    if len(parents) == 4:  # same batch: in place
        assert all(a is b for a, b in zip(got, cache, strict=True))
    filled = [a.copy() for a in before]
    got = layout.reorder(filled, np.array(parents), filled=2)
    for array, old in zip(got, before, strict=True):
        np.testing.assert_array_equal(array[:, :, :2], old[parents][:, :, :2])


def test_layout_reorder_outside_the_rows_is_refused():
    with pytest.raises(IndexError, match=r"outside \[0, 2\)"):
        layout.reorder(layout.zeros(1, 2, 1, 3, 2), np.array([0, 2]))
