"""Registering the library's Keras classes, so that a saved model loads after `import
keras_transformer` alone.

Keras finds custom classes only in its registry (`keras.saving.register_keras_serializable`): it
imports the module a saved config names only for its own packages (keras, keras_hub, keras_cv,
keras_nlp). So the modules that register classes must be imported once Keras is. They cannot
be imported by the package's `__init__` itself: they import Keras (and, under its TensorFlow
backend, TensorFlow), and `__init__` runs before every submodule, the NumPy-only ones that the
export runtimes use without TensorFlow included. Python has no hook that runs after an import
other than a finder on `sys.meta_path`, so `register_when_keras_loads` registers at once when
Keras is already loaded, and otherwise installs a one-shot finder that registers right after
Keras finishes loading and then removes itself.
"""

from __future__ import annotations

import importlib
import sys

PACKAGE = "keras_transformer"

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
    "keras_transformer.models.masked_lm",
    "keras_transformer.models.tagger",
    "keras_transformer.losses",
    "keras_transformer.metrics",
    "keras_transformer.schedules",
)


def register_serializables() -> None:
    """Import every module in SERIALIZABLE_MODULES, registering its classes with Keras."""
    for module in SERIALIZABLE_MODULES:
        importlib.import_module(module)


def _initializing() -> bool:
    """Whether one of this package's modules is still executing (its names not all defined):
    Keras imported from inside it must not import the modules that import it back."""
    prefix = PACKAGE + "."
    return any(getattr(getattr(module, "__spec__", None), "_initializing", False)
               for name, module in list(sys.modules.items())
               if name == PACKAGE or name.startswith(prefix))


class _RegisterAfterKeras:
    """A sys.meta_path finder that wraps the loaders of `keras` and of this package's modules
    (the other finders locate them): once Keras has executed, and no module of this package
    is half-executed (e.g. `from keras_transformer.models.transformer import Transformer` as a
    program's first import runs Keras from inside transformer.py), register_serializables
    runs, and the finder leaves sys.meta_path."""

    def __init__(self):
        self.keras_loaded = False

    def find_spec(self, name, path=None, target=None):
        if name != "keras" and not name.startswith(PACKAGE + "."):
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


def register_when_keras_loads() -> None:
    """Register now if Keras is loaded, otherwise right after it loads (see the module's
    docstring)."""
    if "keras" in sys.modules:
        register_serializables()
    elif not any(isinstance(finder, _RegisterAfterKeras) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterKeras())
