"""The SavedModel signatures and the Keras model itself, behind the same Backend interface.

TensorFlow is imported by this module only, so choosing ONNX or TFLite never loads it.
"""

from __future__ import annotations

from pathlib import Path

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


def keras_backend(manifest: Manifest, run_dir: str | Path | None = None) -> KerasBackend:
    """The library's KerasBackend over the float32 rebuild of the run's model.keras.

    The run is the directory given, else the export directory's parent when the export sits
    inside its run (`runs/demo/export`). The run path the manifest records is never followed:
    a path read from a file the program wrote stays inside that file's directory."""
    import json

    from ..module import load_float32_model

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
    return KerasBackend(load_float32_model(run_dir))
