"""Dropout (section 5.4, "residual dropout"): a Keras Dropout whose random mask is an integer
hash of (seed, position).

`keras.layers.Dropout` draws its mask with the backend's stateless RNG, which XLA on CPU runs
as a loop of its own rather than fusing it (docs/design.md, Decisions). The hash is
a handful of element-wise integer ops that XLA fuses into the multiply that applies the mask.
Any counter-based generator serves dropout: it needs a keep rate of 1 - rate, masks that do
not repeat between calls, and independent positions (tests/test_dropout.py).
"""

import keras
from keras import ops

_GOLDEN = 0x9E3779B9


def _mix(h):
    """An avalanche of uint32 values (the "lowbias32" finaliser): every input bit flips about
    half of the output bits."""
    h = ops.bitwise_xor(h, ops.right_shift(h, 16))
    h = ops.multiply(h, ops.cast(0x7FEB352D, "uint32"))
    h = ops.bitwise_xor(h, ops.right_shift(h, 15))
    h = ops.multiply(h, ops.cast(0x846CA68B, "uint32"))
    return ops.bitwise_xor(h, ops.right_shift(h, 16))


def random_bits(seed, shape):
    """seed (2,) integers, shape -> uint32 tensor of `shape`: hash of (seed, flat position).

    Two rounds with the key added between them, so that seeds differing in any bit give
    unrelated masks (one round of `position + key` would only shift the sequence)."""
    seed = ops.cast(ops.cast(seed, "int64") % (1 << 32), "uint32")
    key = _mix(ops.add(_mix(seed[0]), ops.multiply(seed[1], ops.cast(_GOLDEN, "uint32"))))
    size = 1
    for dim in shape:
        size *= dim
    positions = ops.cast(ops.arange(size, dtype="int32"), "uint32")
    bits = _mix(ops.add(_mix(ops.bitwise_xor(positions, key)), key))
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
        keep = ops.greater_equal(random_bits(seed, shape),
                                 ops.cast(keep_threshold(self.rate), "uint32"))
        scaled = ops.divide(inputs, ops.cast(1.0 - self.rate, inputs.dtype))
        return ops.where(keep, scaled, ops.zeros_like(inputs))
