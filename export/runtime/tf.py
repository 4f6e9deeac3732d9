"""The SavedModel signatures and the Keras model itself, behind the same Backend interface.

TensorFlow is imported by this module only, so choosing ONNX or TFLite never loads it.
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.cache.variables import concrete
from keras_transformer.tf_backend import KerasBackend, TFBackend

from ..common import ExportError, Manifest
from ..runtime.base import Backend


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


def keras_backend(manifest: Manifest, run_dir: str | Path | None = None
                  ) -> KerasBackend | KerasLMBackend:
    """The library's KerasBackend (a KerasLMBackend for a language model's export) over the
    float32 rebuild of the run's model.keras.

    The run is the directory given, else the export directory's parent when the export sits
    inside its run (`runs/demo/export`). The run path the manifest records is never followed:
    a path read from a file the program wrote stays inside that file's directory."""
    import json

    from ..module import load_float32_model, model_kind

    if run_dir is None:
        run_dir = manifest.root.resolve().parent
        if not (run_dir / "model.keras").is_file():
            raise ExportError(
                f"the keras runtime needs the training run: {manifest.root} is not inside a run "
                f"directory; pass it with --run")
    run_dir = Path(run_dir)
    if not (run_dir / "model.keras").is_file():
        raise ExportError(f"the keras runtime needs the training run; {run_dir / 'model.keras'} "
                          f"is missing (pass the run directory with --run)")
    try:
        config = json.loads((run_dir / "model_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ExportError(f"{run_dir / 'model_config.json'} could not be read: {err}") from err
    differ = sorted(key for key, value in manifest.model.items()
                    if key in config and config[key] != value)
    if differ:
        raise ExportError(f"{run_dir} does not hold the model of {manifest.root} ({', '.join(differ)} "
                          f"differ); pass the run it was exported from with --run")
    model = load_float32_model(run_dir)
    if model_kind(model) != manifest.kind:
        raise ExportError(f"{run_dir} holds a {type(model).__name__}, not the {manifest.kind} "
                          f"model of {manifest.root}; pass the run it was exported from with --run")
    if manifest.kind == "lm":
        return KerasLMBackend(manifest, model)
    return KerasBackend(model)
