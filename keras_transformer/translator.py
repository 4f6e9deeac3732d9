"""Text in, text out with a Keras model: its generation.Backend and a generation.Translator
over it.

The Backend is the running Keras backend's: keras_transformer.tf_backend under TensorFlow,
keras_transformer.ops_backend under JAX and PyTorch (each imported only when it is the one)."""

from __future__ import annotations

from collections.abc import Sequence

from keras_transformer import generation
from keras_transformer.compiled import current_backend
from keras_transformer.decoding import SearchSettings


def model_backend(model, jit_compile: bool = False) -> generation.Backend:
    """The generation Backend of a Transformer under the running Keras backend."""
    if current_backend() == "tensorflow":
        from keras_transformer.tf_backend import KerasBackend

        return KerasBackend(model, jit_compile)
    from keras_transformer.ops_backend import KerasOpsBackend

    return KerasOpsBackend(model, jit_compile)


def keras_translator(model, source_tokenizer=None, target_tokenizer=None,
                     jit_compile: bool = False) -> generation.Translator:
    """The generation.Translator of a Transformer and its tokenizers (a
    text.tokenizer.SentencePieceTokenizer each; without them it searches ids only)."""
    return generation.Translator(
        model_backend(model, jit_compile), model.config,
        source_tokenizer.encode if source_tokenizer is not None else None,
        target_tokenizer.decode if target_tokenizer is not None else None)


def translate(model, source_tokenizer, target_tokenizer, sentences: Sequence[str],
              settings: SearchSettings = SearchSettings(), *, batch_size: int = 64,
              jit_compile: bool = False, progress=None, truncate: bool = False) -> list[str]:
    """Translate sentences (batched by length, returned in input order) by the search of
    `settings`. A blank sentence is an error, and so is a source longer than the model's
    max_source_length, or with truncate it keeps its first pieces (with a warning;
    text.sources.encode_sources)."""
    translator = keras_translator(model, source_tokenizer, target_tokenizer, jit_compile)
    return translator.translate(sentences, settings, batch_size=batch_size, truncate=truncate,
                                allow_empty=False, progress=progress)
