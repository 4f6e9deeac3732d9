"""Models from a trained run's directory, in the style of keras-hub's `from_preset`: the run's
model config, and its weights loaded by name, so that a pre-trained masked language model's
trunk goes into a classifier or an extractor whose head is new.

Weights match by their path without the model's own name (`local_name`): the same layer has
the same name in every model that holds it (`embedding/token_embedding/embeddings`,
`encoder/layer_0/...`).
"""

from __future__ import annotations

import json
from pathlib import Path


def local_name(variable) -> str:
    """A weight's path without its model's name."""
    return variable.path.split("/", 1)[-1]


def load_by_name(model, source, where: str = "the pre-trained model") -> dict[str, list[str]]:
    """Copy every weight of `source` whose local name `model` has too into `model`.

    Returns {"loaded", "new", "left"}: the names copied, those of `model` that `source` lacks
    (a task's new head), those of `source` that `model` lacks (a pre-training head). A
    ValueError, naming `where`, when they share no weight or a shared one differs in shape
    (another size or vocabulary); nothing is copied then."""
    given = {local_name(v): v for v in source.weights}
    have = {local_name(v): v for v in model.weights}
    loaded = [name for name in have if name in given]
    if not loaded:
        raise ValueError(f"{where} ({type(source).__name__}) shares no weight with a "
                         f"{type(model).__name__}; start from a model with the same trunk (a "
                         f"masked language model for an encoder-only model)")
    for name in loaded:
        want, got = tuple(have[name].shape), tuple(given[name].shape)
        if want != got:
            raise ValueError(f"{where} holds {name} of shape {got}, this model {want}; build "
                             f"the pre-trained sizes (its preset, overrides and vocabulary)")
    for name in loaded:
        have[name].assign(given[name].numpy())
    return {"loaded": loaded, "new": [n for n in have if n not in given],
            "left": [n for n in given if n not in have]}


class FromPreset:
    """`Model.from_preset(run_dir, **kwargs)` for a model class whose constructor takes a
    `TransformerConfig` first."""

    @classmethod
    def from_preset(cls, preset: str | Path, model_file: str = "model.keras", **kwargs):
        """This model, of the sizes of the run in the directory `preset` (its
        model_config.json), with the weights of its `model_file` that match by name (all of
        them from a run of this class; the trunk from another, the new head initialized).
        `kwargs` go to the constructor (`num_classes=3`, ...). The run's tokenizer is its
        spm.model (`keras_transformer.text.tokenizer.SentencePieceTokenizer`)."""
        import keras

        from keras_transformer.config import TransformerConfig

        run = Path(preset)
        config_file, weights = run / "model_config.json", run / model_file
        for path in (config_file, weights):
            if not path.is_file():
                raise FileNotFoundError(f"{path} not found: from_preset reads a trained run's "
                                        f"directory (model_config.json and {model_file})")
        config = TransformerConfig.from_dict(json.loads(config_file.read_text()))
        model = cls(config, **kwargs)
        model.build()
        source = keras.saving.load_model(weights, compile=False)
        load_by_name(model, source, str(weights))
        return model
