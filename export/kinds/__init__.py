"""The kinds of export (the manifest's "kind"), one module each, and their registry: what
export_run, the runtimes and export.parity ask of the export they handle (see base.py)."""

from __future__ import annotations

from ..common import Manifest
from .base import ExportKind
from .classifier import ClassifierKind
from .extractor import ExtractorKind
from .language_model import LanguageModelKind
from .masked_lm import MaskedLMKind
from .seq2seq import Seq2SeqKind

KINDS: dict[str, ExportKind] = {kind.name: kind for kind in (
    Seq2SeqKind(), LanguageModelKind(), ClassifierKind(), ExtractorKind(),
    MaskedLMKind())}


def kind_of(manifest: Manifest) -> ExportKind:
    """The kind of an export (its manifest was validated, so the kind is known)."""
    return KINDS[manifest.kind]


def kind_of_model(model, run_dir) -> ExportKind:
    """The kind a trained model is exported as; ValueError for a model no kind exports."""
    for kind in KINDS.values():
        if kind.accepts(model):
            return kind
    raise ValueError(f"{run_dir}/model.keras holds a {type(model).__name__}; an export takes a "
                     f"Transformer (translation, summarization), a TransformerLM (language "
                     f"model), a TransformerClassifier, a TransformerExtractor or a "
                     f"TransformerMaskedLM")
