"""A model's inference function (encode, one decoding step) compiled the way the current Keras
backend compiles: a traced tf.function under TensorFlow, `jax.jit` under JAX, a no-grad call
under PyTorch.

Each backend's framework is imported here only when that backend is the one running, so the
library imports without TensorFlow under JAX and PyTorch.
"""

from __future__ import annotations

import keras

BACKENDS = ("tensorflow", "jax", "torch")


def current_backend() -> str:
    """keras.backend.backend(), refused with what to do when it is not one of BACKENDS."""
    name = keras.backend.backend()
    if name not in BACKENDS:
        raise ValueError(f"KERAS_BACKEND={name} is not supported; set KERAS_BACKEND to one of "
                         f"{', '.join(BACKENDS)}")
    return name


def inference_function(model, function, *, jit_compile: bool = False):
    """`function(*tensors)`, which calls `model`'s layers in inference mode, as a compiled
    callable of the same arguments and results (tensors, or lists and tuples of them).

    - TensorFlow: a tf.function (XLA with jit_compile), traced again only for new shapes;
    - JAX: `jax.jit` of a pure function of the model's variables: they are passed in at every
      call (a StatelessScope maps each variable to its value), so the weights are arguments of
      the compiled program, never constants folded into it, and new weights need no new trace;
    - PyTorch: the eager call under `torch.no_grad()`, which records no autograd graph.
    """
    name = current_backend()
    if name == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=jit_compile, reduce_retracing=True)
    if name == "jax":
        import jax

        variables = list(model.variables)

        def pure(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
                return function(*args)

        jitted = jax.jit(pure)

        def call(*args):
            return jitted([v.value for v in variables], *args)

        return call
    import torch

    def call_no_grad(*args):
        with torch.no_grad():
            return function(*args)

    return call_no_grad
