"""The package's public names, saved models loading after `import keras_transformer`, and the
NumPy-only modules staying free of TensorFlow and Keras."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_transformer
from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models.classifier import TransformerClassifier
from keras_transformer.models.language_model import TransformerLM
from keras_transformer.models.transformer import Transformer
from keras_transformer.schedules import TransformerSchedule
from tests.conftest import random_ids

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "keras_transformer"


def _run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_public_names_are_the_defining_modules_objects():
    import importlib

    for name, module in keras_transformer._PUBLIC.items():
        assert getattr(keras_transformer, name) is getattr(importlib.import_module(module), name)
        assert name in keras_transformer.__all__ and name in dir(keras_transformer)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        keras_transformer.Nope  # noqa: B018


def test_serializable_modules_lists_every_registering_module():
    """Read from the sources: a new module that registers a class must be listed."""
    registering = {_module_name(path) for path in PACKAGE.rglob("*.py")
                   if "register_keras_serializable(" in path.read_text(encoding="utf-8")}
    registering.discard("keras_transformer")
    assert registering == set(keras_transformer.SERIALIZABLE_MODULES)
    registered = {key.split(">", 1)[1]: obj for key, obj in
                  keras.saving.get_custom_objects().items()
                  if key.startswith("keras_transformer>")}
    assert {obj.__module__ for obj in registered.values()} == registering
    for name, obj in registered.items():
        if name in keras_transformer._PUBLIC:
            assert getattr(keras_transformer, name) is obj


def _compiled(model, pad_id: int):
    model.compile(optimizer=keras.optimizers.Adam(TransformerSchedule(model.config.d_model, 10)),
                  loss=MaskedLabelSmoothedCrossEntropy(0.1, pad_id),
                  metrics=[MaskedAccuracy(pad_id)], run_eagerly=True)
    return model


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """(dir, {name: (outputs, evaluate scores, labels)}) of three models trained one step,
    saved to dir/name.keras with their inputs and labels beside them."""
    from keras_transformer.config import TransformerConfig

    keras.utils.set_random_seed(0)
    root = tmp_path_factory.mktemp("saved")
    config = TransformerConfig.preset(
        "tiny", source_vocab_size=40, target_vocab_size=40, d_model=32, num_heads=4, d_ff=64,
        max_source_length=24, max_target_length=24, dropout=0.0)
    rng = np.random.default_rng(0)
    source, target = random_ids(rng, 3, 7), random_ids(rng, 3, 5)
    labels = rng.integers(0, 3, size=(3,)).astype("int32")
    cases = {
        "transformer": (_compiled(Transformer(config), config.pad_id), (source, target), target),
        "classifier": (_compiled(TransformerClassifier(config, num_classes=3), -1), source,
                       labels),
        "lm": (_compiled(TransformerLM(config), config.pad_id), target, target),
    }
    saved = {}
    for name, (model, inputs, y) in cases.items():
        model.train_on_batch(inputs, y)
        path = root / f"{name}.keras"
        model.save(path)
        np.savez(root / f"{name}_inputs.npz", *(inputs if isinstance(inputs, tuple) else [inputs]))
        scores = model.evaluate(inputs, y, verbose=0, return_dict=True)
        scores["learning_rate"] = float(model.optimizer.learning_rate)
        saved[name] = (keras.ops.convert_to_numpy(model(inputs, training=False)), scores, y)
        np.save(root / f"{name}_y.npy", y)
    return root, saved


LOAD = textwrap.dedent("""
    {imports}
    import json, sys
    import numpy as np
    root, names = sys.argv[1], sys.argv[2:]
    report = {{}}
    for name in names:
        model = keras.models.load_model(f"{{root}}/{{name}}.keras")
        inputs = list(np.load(f"{{root}}/{{name}}_inputs.npz").values())
        inputs = tuple(inputs) if len(inputs) > 1 else inputs[0]
        np.save(f"{{root}}/{{name}}_loaded.npy",
                keras.ops.convert_to_numpy(model(inputs, training=False)))
        scores = model.evaluate(inputs, np.load(f"{{root}}/{{name}}_y.npy"), verbose=0,
                                return_dict=True)
        scores["learning_rate"] = float(model.optimizer.learning_rate)
        classes = [type(model).__name__, type(model.loss).__name__,
                   [type(m).__name__ for m in model.metrics[-1].metrics],
                   type(model.optimizer._learning_rate).__name__,
                   int(model.optimizer.iterations)]
        report[name] = dict(classes=classes, scores=scores)
    print(json.dumps(report))
""")

EXPECTED_CLASSES = {
    "transformer": ["Transformer", "MaskedLabelSmoothedCrossEntropy", ["MaskedAccuracy"],
                    "TransformerSchedule", 1],
    "classifier": ["TransformerClassifier", "MaskedLabelSmoothedCrossEntropy",
                   ["MaskedAccuracy"], "TransformerSchedule", 1],
    "lm": ["TransformerLM", "MaskedLabelSmoothedCrossEntropy", ["MaskedAccuracy"],
           "TransformerSchedule", 1],
}


def test_any_registering_module_may_be_a_programs_first_import():
    """`from keras_transformer.models.transformer import Transformer` as a program's first
    line imports Keras from inside transformer.py; the registration waits until no module of
    the package is half-executed, then registers every class (an import error otherwise)."""
    code = """
import importlib, sys
importlib.import_module(sys.argv[1])
import keras
import keras_transformer
names = {k for k in keras.saving.get_custom_objects() if k.startswith("keras_transformer>")}
modules = {keras.saving.get_registered_object(k).__module__ for k in names}
print(sorted(modules) == sorted(keras_transformer.SERIALIZABLE_MODULES), len(names))
"""
    counts = set()
    for module in ("keras_transformer.models.transformer", "keras_transformer.layers.encoder",
                   "keras_transformer.models.classifier", "keras_transformer.metrics"):
        result = _run_python(code, module)
        assert result.returncode == 0, result.stderr[-2000:]
        ok, count = result.stdout.split()
        assert ok == "True", (module, result.stdout)
        counts.add(count)
    assert len(counts) == 1


@pytest.mark.parametrize("imports", [
    "import keras_transformer, keras",
    pytest.param("import keras, keras_transformer", marks=pytest.mark.slow),
    # TensorFlow imports Keras while it loads itself.
    pytest.param("import keras_transformer, tensorflow, keras",
                     marks=[pytest.mark.slow, pytest.mark.tf_only]),
])
def test_saved_models_load_after_importing_the_package(saved_models, imports):
    """The loaded models, loss, metric and schedule give the original's outputs and scores."""
    root, saved = saved_models
    result = _run_python(LOAD.format(imports=imports), str(root), *saved)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert {name: got["classes"] for name, got in report.items()} == EXPECTED_CLASSES
    for name, (outputs, scores, _) in saved.items():
        np.testing.assert_allclose(np.load(root / f"{name}_loaded.npy"), outputs,
                                   rtol=1e-5, atol=1e-6)
        assert report[name]["scores"] == pytest.approx(scores, rel=1e-5), name


def test_saved_model_needs_the_package_import():
    """Without `import keras_transformer` Keras does not find the classes: the reference
    failure the package import removes."""
    result = _run_python(textwrap.dedent("""
        import keras
        from keras.src.saving import object_registration
        assert object_registration.get_registered_object("keras_transformer>Transformer") is None
        import keras_transformer
        got = object_registration.get_registered_object("keras_transformer>Transformer")
        assert got is keras_transformer.Transformer, got
    """))
    assert result.returncode == 0, result.stderr[-3000:]


# Modules that need only NumPy (and sentencepiece, onnxruntime, ai-edge-litert).
TF_FREE_MODULES = (
    "keras_transformer",
    "keras_transformer.registration",
    "keras_transformer.config",
    "keras_transformer.decoding",
    "keras_transformer.generation",
    "keras_transformer.cache",
    "keras_transformer.cache.layout",
    "keras_transformer.text.sources",
    "keras_transformer.text.lines",
    "keras_transformer.text.rouge",
    "keras_transformer.command_line",
    "keras_transformer.file_safety",
    "export.common",
    "export.runtime",
    "export.runtime.base",
    "export.runtime.onnx",
    "export.runtime.tflite",
    "export.explorer",
    "export.inputs",
    "export.engines",
    "export.kinds.seq2seq.engine",
    "export.kinds.seq2seq.explorer",
    "export.kinds.language_model.engine",
    "export.kinds.classifier.engine",
    "export.kinds.classifier.explorer",
    "export.kinds.extractor.engine",
    "export.kinds.extractor.explorer",
    "export.serve",
    "export.translate",
    "export.kinds.classifier.runtime",
    "export.kinds.classifier.parity",
    "export.classify",
    "export.generate",
    "export.kinds",
    "export.parity_check",
    "export.kinds.decoding.parity",
    "export.kinds.extractor.parity",
    "export.kinds.extractor.runtime",
    "export.summarize",
    "export.kinds.masked_lm.runtime",
    "export.kinds.masked_lm.parity",
    "export.fill_mask",
)


def test_numpy_modules_import_neither_tensorflow_nor_keras():
    code = textwrap.dedent(f"""
        import importlib, sys
        for module in {TF_FREE_MODULES!r}:
            importlib.import_module(module)
        import keras_transformer
        keras_transformer.TransformerConfig
        print(sorted(m for m in sys.modules
                     if m.split(".")[0] in ("tensorflow", "keras", "tf_keras")))
    """)
    result = _run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"

