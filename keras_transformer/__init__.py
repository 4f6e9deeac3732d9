"""keras-transformer: the Transformer of "Attention Is All You Need" as Keras 3 layers.

The public names below load on first access, so ``import keras_transformer`` itself imports
neither TensorFlow nor Keras: the NumPy-only modules (``keras_transformer.decoding``,
``keras_transformer.text.sources``) stay usable where TensorFlow is absent or unwanted.

Saved models still load after ``import keras_transformer``: Keras finds custom classes only in
its registry (``keras.saving.register_keras_serializable``), and it imports the module named in
a saved config only for its own packages. So the modules that register classes are imported as
soon as Keras is: at once when Keras was imported before this package, otherwise right after
Keras itself finishes loading.

Example:

```python
import keras
import keras_transformer

model = keras.models.load_model("runs/demo/model.keras")  # a keras_transformer.Transformer
```
"""

from __future__ import annotations

import importlib
import sys

__version__ = "0.1.0"

# Public name -> the module that defines it.
_PUBLIC = {
    "TransformerConfig": "keras_transformer.config",
    "Transformer": "keras_transformer.models.transformer",
    "TransformerClassifier": "keras_transformer.models.classifier",
    "TransformerLM": "keras_transformer.models.language_model",
    "TransformerExtractor": "keras_transformer.models.extractor",
    "AddNorm": "keras_transformer.layers.add_norm",
    "MultiHeadAttention": "keras_transformer.layers.attention",
    "DecoderLayer": "keras_transformer.layers.decoder",
    "Decoder": "keras_transformer.layers.decoder",
    "CopyGate": "keras_transformer.layers.copy_attention",
    "Dropout": "keras_transformer.layers.dropout",
    "PositionalEmbedding": "keras_transformer.layers.embedding",
    "EncoderLayer": "keras_transformer.layers.encoder",
    "Encoder": "keras_transformer.layers.encoder",
    "FeedForward": "keras_transformer.layers.feed_forward",
    "MaskedLabelSmoothedCrossEntropy": "keras_transformer.losses",
    "MaskedSentenceCrossEntropy": "keras_transformer.losses",
    "MaskedAccuracy": "keras_transformer.metrics",
    "TransformerSchedule": "keras_transformer.schedules",
    "SentencePieceTokenizer": "keras_transformer.text.tokenizer",
    "translate": "keras_transformer.translator",
    "SearchSettings": "keras_transformer.decoding.settings",
}

# Every module that registers a class with keras.saving.register_keras_serializable.
SERIALIZABLE_MODULES = (
    "keras_transformer.layers.dropout",
    "keras_transformer.layers.add_norm",
    "keras_transformer.layers.feed_forward",
    "keras_transformer.layers.attention",
    "keras_transformer.layers.embedding",
    "keras_transformer.layers.encoder",
    "keras_transformer.layers.decoder",
    "keras_transformer.layers.copy_attention",
    "keras_transformer.models.transformer",
    "keras_transformer.models.classifier",
    "keras_transformer.models.language_model",
    "keras_transformer.models.extractor",
    "keras_transformer.losses",
    "keras_transformer.metrics",
    "keras_transformer.schedules",
)

__all__ = ["SERIALIZABLE_MODULES", "__version__", "register_serializables", *_PUBLIC]


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))


def register_serializables() -> None:
    """Import every module in SERIALIZABLE_MODULES, registering its classes with Keras."""
    for module in SERIALIZABLE_MODULES:
        importlib.import_module(module)


def _initializing() -> bool:
    """Whether one of this package's modules is still executing (its names not all defined):
    Keras imported from inside it must not import the modules that import it back."""
    prefix = __name__ + "."
    return any(getattr(getattr(module, "__spec__", None), "_initializing", False)
               for name, module in list(sys.modules.items())
               if name == __name__ or name.startswith(prefix))


class _RegisterAfterKeras:
    """A sys.meta_path finder that wraps the loaders of `keras` and of this package's modules
    (the other finders locate them): once Keras has executed, and no module of this package
    is half-executed (e.g. `from keras_transformer.models.transformer import Transformer` as a
    program's first import runs Keras from inside transformer.py), register_serializables
    runs, and the finder leaves sys.meta_path."""

    def __init__(self):
        self.keras_loaded = False

    def find_spec(self, name, path=None, target=None):
        if name != "keras" and not name.startswith(__name__ + "."):
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader, self)
        return spec

    def loaded(self, name: str) -> None:
        self.keras_loaded |= name == "keras"
        if self.keras_loaded and self in sys.meta_path and not _initializing():
            sys.meta_path.remove(self)
            register_serializables()


class _RegisteringLoader:
    """Delegates to the module's own loader, restores it, then tells the finder."""

    def __init__(self, loader, finder: _RegisterAfterKeras):
        self._loader = loader
        self._finder = finder

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        # Still "initializing" until this returns: the import system clears the flag after.
        module.__spec__._initializing = False
        self._finder.loaded(module.__name__)


if "keras" in sys.modules:
    register_serializables()
else:
    sys.meta_path.insert(0, _RegisterAfterKeras())
