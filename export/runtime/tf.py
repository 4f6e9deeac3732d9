"""The SavedModel signatures and the Keras model itself, behind the same Backend interface.

TensorFlow is imported by these classes only, so choosing ONNX or TFLite never loads it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from export.common import ExportError, Manifest
from export.runtime.base import Backend


class _TFBackend(Backend):
    """The encoder outputs stay TF tensors (read at every step, never changed); the cache is a
    keras_transformer.cache.VariableCache, which the step reads in place and whose slot is
    written in place (a NumPy cache would be copied into TF at every step)."""

    def __init__(self, manifest: Manifest):
        super().__init__(manifest)
        import tensorflow as tf

        from keras_transformer.cache import VariableCache

        self.tf = tf
        self._variable_cache = VariableCache

    def repeat(self, x, times):
        if isinstance(x, list):
            return [self.tf.repeat(t, times, axis=0) for t in x]
        return self.tf.repeat(x, times, axis=0)

    def init_cache(self, batch, length):
        return self._variable_cache(super().init_cache(batch, length))

    def cache_from(self, cache):
        return self._variable_cache(super().cache_from(cache))

    def write(self, cache, step_key_values, index):
        cache.write(step_key_values, index)
        return cache

    def gather(self, cache, indices, filled=None):
        cache.reorder(indices)  # every slot: a TF gather of a prefix would copy as much
        return cache

    def to_numpy(self, x):
        return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


class SavedModelBackend(_TFBackend):
    name = "savedmodel"

    def __init__(self, manifest: Manifest):
        super().__init__(manifest)
        import tensorflow_text  # noqa: F401  (registers the ops of the `translate` signature)

        path = manifest.file(manifest.format_files("savedmodel")["model"])
        try:
            self.loaded = self.tf.saved_model.load(str(path))
        except Exception as err:  # TF raises many types for a damaged SavedModel
            raise ExportError(f"{path} could not be loaded as a SavedModel: {err}") from err
        self._encode = self.loaded.signatures["encode"]
        self._step = self.loaded.signatures["decode_step"]

    def encode(self, source_ids):
        out = self._encode(source_ids=self.tf.constant(source_ids, self.tf.int32))
        return [out[name] for name in self._memory_names], out["memory_mask"]

    def decode_step(self, tokens, memory, memory_mask, cache, index):
        tf = self.tf
        out = self._step(tokens=tf.constant(tokens, tf.int32), memory_mask=memory_mask,
                         index=tf.constant(index, tf.int32),
                         **dict(zip(self._memory_names, memory, strict=True)),
                         **dict(zip(self._cache_names, cache.variables, strict=True)))
        return out["logits"], out["step_key_values"]


class KerasBackend(_TFBackend):
    """The float32 rebuild of the run's model.keras, called through traced tf.functions."""

    name = "keras"

    def __init__(self, manifest: Manifest, run_dir: str | Path | None = None):
        super().__init__(manifest)
        from export.module import load_float32_model

        run_dir = Path(run_dir if run_dir is not None else manifest["run"])
        if not (run_dir / "model.keras").is_file():
            raise ExportError(
                f"the keras runtime needs the training run; {run_dir / 'model.keras'} is "
                f"missing (pass the run directory explicitly)")
        self.model = load_float32_model(run_dir)
        tf = self.tf
        self._encode = tf.function(self.model.encode_for_decoding, reduce_retracing=True)
        self._step_function = tf.function(self.model.decode_step_key_values,
                                          reduce_retracing=True)
        self._step = None

    def encode(self, source_ids):
        return self._encode(self.tf.constant(source_ids, self.tf.int32))

    def decode_step(self, tokens, memory, memory_mask, cache, index):
        tf = self.tf
        if self._step is None:
            from keras_transformer.cache import concrete, step_specs

            self._step = concrete(self._step_function, *step_specs(memory, cache))
        return self._step(tf.constant(tokens, tf.int32), memory, memory_mask,
                          cache.variables, tf.constant(np.int32(index)))
