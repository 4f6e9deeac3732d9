"""The registry of export kinds (export/kinds/): every kind a manifest may name has one, each
library model class is exported as its kind, and no module of export/ outside the registry
decides by a kind's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from export.common import ExportError, validate
from export.kinds import KINDS as REGISTRY
from export.kinds import kind_of_model

ROOT = Path(__file__).resolve().parent.parent


def test_every_manifest_kind_is_registered_under_its_name():
    for name, kind in REGISTRY.items():
        assert kind.name == name
        assert kind.title and kind.default_task and kind.tool and kind.signatures, name


def test_the_manifest_reader_knows_the_registered_kinds_in_order():
    with pytest.raises(ExportError) as err:
        validate({"files": {}, "formats": {}, "kind": "other"})
    assert str(err.value) == ("key 'kind' is 'other', not one of translator, classifier, lm, "
                              "extractor, masked_lm")
    assert list(REGISTRY) == ["translator", "classifier", "lm", "extractor", "masked_lm"]


@pytest.mark.parametrize("module, cls, expected", [
    ("keras_transformer.models.transformer", "Transformer", "translator"),
    ("keras_transformer.models.language_model", "TransformerLM", "lm"),
    ("keras_transformer.models.classifier", "TransformerClassifier", "classifier"),
    ("keras_transformer.models.extractor", "TransformerExtractor", "extractor"),
    ("keras_transformer.models.masked_lm", "TransformerMaskedLM", "masked_lm"),
])
def test_each_model_class_is_exported_as_its_kind(module, cls, expected):
    import importlib

    model_class = getattr(importlib.import_module(module), cls)
    # An uninitialised instance: the choice is by class, not by weights.
    model = model_class.__new__(model_class)
    assert kind_of_model(model, "runs/x").name == expected
    assert [k.name for k in REGISTRY.values() if k.accepts(model)] == [expected]


def test_with_attention_is_refused_in_one_line_by_the_kinds_that_have_no_weights_to_show():
    from export.kinds.base import ExportOptions

    showing = [name for name, kind in REGISTRY.items() if kind.attention_weights]
    assert showing == ["translator", "classifier"]
    for name, kind in REGISTRY.items():
        kind.check_options(ExportOptions(formats=("onnx",)))
        if name in showing:
            kind.check_options(ExportOptions(formats=("onnx",), with_attention=True))
            continue
        with pytest.raises(ValueError) as err:
            kind.check_options(ExportOptions(formats=("onnx",), with_attention=True))
        assert "\n" not in str(err.value)
        assert str(err.value).endswith(f"{kind.title}'s export has none: export it without "
                                       "--with-attention")
    with pytest.raises(ValueError, match="; an extractive summarizer's export has none"):
        REGISTRY["extractor"].check_options(ExportOptions(formats=("onnx",), with_attention=True))


def test_a_model_no_kind_exports_is_named():
    with pytest.raises(ValueError, match="holds a dict; an export takes"):
        kind_of_model({}, "runs/x")


def _kind_literal_comparisons(path: Path) -> list[str]:
    """`<...>kind == "..."` (or !=, in, not in a literal) in one module, as file:line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = [s.id if isinstance(s, ast.Name) else s.attr if isinstance(s, ast.Attribute)
                 else "" for s in sides]
        literal = any(isinstance(c, ast.Constant) and isinstance(c.value, str)
                      for s in sides for c in ast.walk(s))
        if literal and any(n == "kind" or n.endswith("_kind") for n in names):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_module_outside_the_registry_branches_on_a_kind():
    modules = [p for p in (ROOT / "export").rglob("*.py") if "kinds" not in p.parts]
    assert len(modules) > 20
    found = [hit for path in modules for hit in _kind_literal_comparisons(path)]
    assert found == []


def test_the_branch_finder_finds_a_branch(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text('def f(manifest, kind):\n    if kind != "lm":\n        return 1\n'
                    '    return manifest.kind in ("classifier", "extractor")\n')
    assert _kind_literal_comparisons(path) == ["probe.py:2", "probe.py:4"]
