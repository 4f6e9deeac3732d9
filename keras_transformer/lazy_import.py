"""A module imported at its first attribute access, so that code written against `tf.` names
imports TensorFlow only when it runs: the training modules serve every Keras backend, and
only their TensorFlow paths (tf.data, tf.distribute) need it."""

from __future__ import annotations

import importlib


class LazyModule:
    """`LazyModule("tensorflow")` stands for the module: `tf.distribute` imports it then."""

    def __init__(self, name: str):
        self._name = name
        self._module = None

    def __getattr__(self, attribute: str):
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attribute)
