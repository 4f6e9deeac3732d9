"""The SavedModel signatures and the Keras model itself: behind the Backend interface for a
kind that decodes, as a callable ids -> probabilities for an encoder-only one.

TensorFlow is imported by this module only, so choosing ONNX or TFLite never loads it.
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.cache.variables import concrete
from keras_transformer.tf_backend import TFBackend

from ..common import ExportError, Manifest
from ..runtime.base import Backend, training_run


class SavedModelBackend(Backend, TFBackend):
    """The `encode` and `decode_step` signatures of the exported SavedModel."""

    name = "savedmodel"

    def __init__(self, manifest: Manifest):
        super().__init__(manifest)
        import tensorflow_text  # noqa: F401  (registers the ops of the `translate` signature)

        path = manifest.directory(manifest.format_files("savedmodel")["model"])
        try:
            self.loaded = self.tf.saved_model.load(str(path))
        except Exception as err:  # TF raises many types for a damaged SavedModel
            raise ExportError(f"{path} could not be loaded as a SavedModel: {err}") from err
        self._encode = self.loaded.signatures.get("encode")  # none in a language model's
        self._step = self.loaded.signatures["decode_step"]

    def encode(self, source_ids):
        out = self._encode(source_ids=self.tf.constant(source_ids, self.tf.int32))
        return [out[name] for name in self._memory_names], out["memory_mask"]

    def decode_step(self, tokens, memory, memory_mask, cache, index):
        tf = self.tf
        inputs = dict(zip(self._cache_names, cache.variables, strict=True))
        if memory_mask is not None:  # a language model's step has no encoder inputs
            inputs.update(zip(self._memory_names, memory, strict=True), memory_mask=memory_mask)
        out = self._step(tokens=tf.constant(tokens, tf.int32), index=tf.constant(index, tf.int32),
                         **inputs)
        return out["logits"], out["step_key_values"]


class KerasLMBackend(Backend, TFBackend):
    """A TransformerLM's step (export.module.lm_step_key_values, what every format of its
    export computes) as a traced tf.function over the VariableCache."""

    name = "keras"

    def __init__(self, manifest: Manifest, model):
        super().__init__(manifest)
        from ..module import lm_step_key_values

        self.model = model
        self._function = self.tf.function(
            lambda tokens, cache, index: lm_step_key_values(model, tokens, cache, index),
            reduce_retracing=True)
        self._step = None  # the step's trace, made at the first step

    def decode_step(self, tokens, memory, memory_mask, cache, index):
        tf = self.tf
        if self._step is None:
            self._step = concrete(self._function, tf.TensorSpec([None], tf.int32),
                                  cache.variables, tf.TensorSpec([], tf.int32))
        return self._step(tf.constant(tokens, tf.int32), cache.variables,
                          tf.constant(index, tf.int32))


class SavedModelFunction:
    """The one signature of an encoder-only export's SavedModel (`classify`, `extract`,
    `fill`) as a callable ids -> its output `output`."""

    def __init__(self, manifest: Manifest, signature: str, output: str = "probabilities"):
        import tensorflow as tf

        self.tf, self.output = tf, output
        path = manifest.directory(manifest.format_files("savedmodel")["model"])
        try:
            self._function = tf.saved_model.load(str(path)).signatures[signature]
        except Exception as err:  # TF raises many types for a damaged SavedModel
            raise ExportError(f"{path} could not be loaded as a SavedModel with a {signature} "
                              f"signature: {err}") from err

    def __call__(self, ids):
        return self._function(ids=self.tf.constant(ids, self.tf.int32))[self.output].numpy()


class KerasFunction:
    """The run's float32 Keras model (`model`) with the activation the export adds to its
    logits (a classifier's softmax, an extractor's sigmoid, none for a masked language
    model), as a callable ids -> what the exported function returns."""

    def __init__(self, model, activation):
        import tensorflow as tf

        self.tf, self.model = tf, model
        self._function = tf.function(lambda ids: activation(model(ids, training=False)))

    def __call__(self, ids):
        return self._function(self.tf.constant(ids, self.tf.int32)).numpy()


def run_model(manifest: Manifest, run_dir: str | Path | None, kind):
    """The float32 rebuild of the run's model.keras that `kind` (export.kinds) exports,
    checked to be the model of the export. The run is the directory given, else the export
    directory's parent when the export sits inside its run (`runs/demo/export`); the run
    path the manifest records is never followed: a path read from a file the program wrote
    stays inside that file's directory."""
    from ..module import load_trained

    run_dir = training_run(manifest, run_dir)
    trained = load_trained(run_dir)
    if not kind.accepts(trained):
        raise ExportError(f"{run_dir} holds a {type(trained).__name__}, not the {manifest.kind} "
                          f"model of {manifest.root}; pass the run it was exported from with --run")
    # Before the rebuild: a rebuild from a model_config.json of another model fails on the
    # first weight whose shape differs, naming no option to fix.
    differ = kind.model_differences(manifest, run_dir, trained)
    if differ:
        raise ExportError(f"{run_dir} does not hold the model of {manifest.root} "
                          f"({', '.join(differ)} differ); pass the run it was exported from "
                          f"with --run")
    return kind.load_float32(run_dir, trained)
