"""keras-transformer: the Transformer of "Attention Is All You Need" as Keras 3 layers.

The public names below load on first access, so ``import keras_transformer`` itself imports
neither TensorFlow nor Keras: the NumPy-only modules (``keras_transformer.decoding``,
``keras_transformer.text.sources``) stay usable where TensorFlow is absent or unwanted.

Saved models still load after ``import keras_transformer``: the last line below registers the
library's Keras classes as soon as Keras is loaded (``keras_transformer.registration`` says how
and why).

Example:

```python
import keras
import keras_transformer

model = keras.models.load_model("runs/demo/model.keras")  # a keras_transformer.Transformer
```
"""

from __future__ import annotations

import importlib

from .registration import SERIALIZABLE_MODULES, register_serializables, register_when_keras_loads

__version__ = "0.1.0"

# Public name -> the module that defines it.
_PUBLIC = {
    "TransformerConfig": "keras_transformer.config",
    "Transformer": "keras_transformer.models.transformer",
    "TransformerClassifier": "keras_transformer.models.classifier",
    "TransformerLM": "keras_transformer.models.language_model",
    "TransformerExtractor": "keras_transformer.models.extractor",
    "TransformerMaskedLM": "keras_transformer.models.masked_lm",
    "TransformerTagger": "keras_transformer.models.tagger",
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
    "ClassWeightedCrossEntropy": "keras_transformer.losses",
    "MaskedAccuracy": "keras_transformer.metrics",
    "TransformerSchedule": "keras_transformer.schedules",
    "SentencePieceTokenizer": "keras_transformer.text.tokenizer",
    "translate": "keras_transformer.translator",
    "SearchSettings": "keras_transformer.decoding.settings",
}

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


register_when_keras_loads()  # saved models load after `import keras_transformer`
