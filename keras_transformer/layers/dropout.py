"""Dropout (section 5.4, "residual dropout"): a Keras Dropout whose random mask is an integer
hash of (seed, position).

`keras.layers.Dropout` draws its mask with the backend's stateless RNG, which XLA on CPU runs
as a loop of its own rather than fusing it (docs/design.md, Decisions). The hash is
a handful of element-wise integer ops that XLA fuses into the multiply that applies the mask.
Any counter-based generator serves dropout: it needs a keep rate of 1 - rate, masks that do
not repeat between calls, and independent positions (tests/test_dropout.py).
"""

import keras
import numpy as np
from keras import ops

_GOLDEN = 0x9E3779B9
_LOW32 = 0xFFFFFFFF


def _word_dtype() -> str:
    """The dtype the hash computes in: uint32, whose arithmetic wraps at 2^32, where the
    backend has it; PyTorch has no uint32 (Keras maps it to int64), so there the hash runs in
    int64 and keeps the low 32 bits after every operation that can carry past them."""
    return "int64" if keras.backend.backend() == "torch" else "uint32"


def _low32(h):
    """h mod 2^32: nothing to do in uint32; the low 32 bits of an int64 (PyTorch's int64
    products wrap at 2^64, so their low 32 bits are still the uint32 product's)."""
    return ops.bitwise_and(h, _LOW32) if _word_dtype() == "int64" else h


def _constant(value: int):
    return ops.cast(value, _word_dtype())


def _mix(h):
    """An avalanche of uint32 values (the "lowbias32" finaliser): every input bit flips about
    half of the output bits."""
    h = ops.bitwise_xor(h, ops.right_shift(h, 16))
    h = _low32(ops.multiply(h, _constant(0x7FEB352D)))
    h = ops.bitwise_xor(h, ops.right_shift(h, 15))
    h = _low32(ops.multiply(h, _constant(0x846CA68B)))
    return ops.bitwise_xor(h, ops.right_shift(h, 16))


def seed_words(seed):
    """seed (2,) integers of any dtype (a NumPy array, or a SeedGenerator's state: uint32 under
    JAX, int64 under TensorFlow, int32 under PyTorch) -> its two values mod 2^32 in the hash's
    dtype: the same bits, whatever the backend's seed dtype."""
    if isinstance(seed, (list, tuple, np.ndarray)):
        return ops.cast(np.asarray(seed, np.int64) % (1 << 32), _word_dtype())
    dtype = keras.backend.standardize_dtype(seed.dtype)
    if _word_dtype() == "int64":
        return ops.bitwise_and(ops.cast(seed, "int64"), _LOW32)
    if dtype in ("uint32", "int32"):
        return ops.cast(seed, "uint32")  # a 32-bit cast keeps the bits
    # int64 under TensorFlow (JAX without x64 has no int64 tensors).
    return ops.cast(ops.cast(seed, "int64") % (1 << 32), "uint32")


def random_bits(seed, shape):
    """seed (2,) integers, shape -> a tensor of `shape` holding uint32 values (dtype uint32;
    int64 under PyTorch): hash of (seed, flat position).

    Two rounds with the key added between them, so that seeds differing in any bit give
    unrelated masks (one round of `position + key` would only shift the sequence)."""
    seed = seed_words(seed)
    key = _mix(_low32(ops.add(_mix(seed[0]), _low32(ops.multiply(seed[1],
                                                                 _constant(_GOLDEN))))))
    size = 1
    for dim in shape:
        size *= dim
    positions = ops.cast(ops.arange(size, dtype="int32"), _word_dtype())
    bits = _mix(_low32(ops.add(_mix(ops.bitwise_xor(positions, key)), key)))
    return ops.reshape(bits, shape)


def keep_threshold(rate: float) -> int:
    """The uint32 value below which a position is dropped: round(rate * 2^32), at most
    2^32 - 1."""
    return min(round(rate * 2**32), 2**32 - 1)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """x (any shape) -> x * keep / (1 - rate) in training, x otherwise; keep ~ Bernoulli(1 - rate)
    per element from `random_bits` (a new seed per call, from the layer's SeedGenerator).

    With `noise_shape` set, or `rate` >= 1, it falls back to `keras.layers.Dropout`.

    Args:
        rate: float in [0, 1]. The fraction of elements dropped in training.
        noise_shape: optional tuple. The shape of the binary mask, to share it across axes
            (as in `keras.layers.Dropout`); defaults to `None`, one draw per element.
        seed: optional int. Seed of the layer's `keras.random.SeedGenerator`; defaults to
            `None`, a random seed.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Example:

    ```python
    layer = Dropout(0.1, seed=0)
    y = layer(keras.ops.ones((2, 8, 16)), training=True)  # about 10% zeros, the rest 1/0.9
    ```
    """

    def call(self, inputs, training=False):
        if not training or self.rate <= 0:
            return inputs
        if self.noise_shape is not None or self.rate >= 1:
            return super().call(inputs, training=training)
        seed = self.seed_generator.next()
        shape = tuple(ops.shape(inputs))
        keep = ops.greater_equal(random_bits(seed, shape), _constant(keep_threshold(self.rate)))
        scaled = ops.divide(inputs, ops.cast(1.0 - self.rate, inputs.dtype))
        return ops.where(keep, scaled, ops.zeros_like(inputs))
