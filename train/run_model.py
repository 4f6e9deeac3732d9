"""A run's saved model read back: the one loader of train.evaluate, train.average,
train.generate, train.visualize and a pipeline's stages (train.tasks.load_run)."""

from __future__ import annotations

from pathlib import Path

from keras_transformer.command_line import CommandError


def load_run_model(path: Path):
    """keras.models.load_model, with a missing or unreadable file named as such."""
    import keras

    import keras_transformer

    keras_transformer.register_serializables()

    if not path.is_file():
        raise FileNotFoundError(f"model not found: {path}")
    try:
        return keras.models.load_model(path, compile=False)
    except Exception as err:  # zipfile, h5py and Keras raise many types for a bad file
        detail = " ".join(str(err).split())[:200]
        if "not found" in detail.lower():  # Keras' words for a file that is not a zip
            detail = "not a readable .keras zip file"
        raise CommandError(f"{path} is corrupt or not a Keras model ({type(err).__name__}: "
                           f"{detail})") from err
