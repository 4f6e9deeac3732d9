"""Sentences in, class probabilities out, over a classifier export (manifest kind
"classifier") in any runtime; the same runtimes serve an extractive summarizer's export
(kind "extractor", export/runtime/extractor.py), whose one graph is `extract`.

A runtime is a callable `ids (B,S) int32 -> probabilities (B,C) float32` over the export's
`classify` graph (an extractor's: ids (B,K,S) -> probabilities (B,K)). `onnx` and `tflite` need only NumPy, sentencepiece and their own runtime
package; `savedmodel` and `keras` import TensorFlow when chosen. `attention_runtime` runs the
attention.onnx of an export made with --with-attention (the attention explorer's weights).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from keras_transformer.command_line import command
from keras_transformer.text.sources import batches_by_length, encode_sources

from ..common import ExportError, Manifest
from ..runtime.base import _load_sentencepiece
from .onnx import DISABLED_OPTIMIZERS

RUNTIMES = ("onnx", "tflite", "savedmodel", "keras")
TENSORFLOW = "tensorflow==2.21.0 tensorflow-text==2.21.1"  # as requirements.txt pins them

Runtime = Callable[[np.ndarray], np.ndarray]
# Per kind of encoder-only export: its graph's signature and its ONNX file's role.
SIGNATURES = {"classifier": "classify", "extractor": "extract"}
ROLES = {"classifier": "classifier", "extractor": "extractor"}


def _onnx_session(path: Path, threads: int = 0):
    try:
        import onnxruntime as ort
    except ImportError as err:
        raise ExportError("the onnx runtime needs onnxruntime: pip install onnxruntime==1.31.1"
                          ) from err
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                                    disabled_optimizers=DISABLED_OPTIMIZERS)
    except Exception as err:  # onnxruntime raises its own Fail/InvalidProtobuf types
        raise ExportError(f"{path} could not be loaded by onnxruntime: {err}") from err


def onnx_runtime(manifest: Manifest, variant: str = "float32", threads: int = 0) -> Runtime:
    session = _onnx_session(
        manifest.file(manifest.format_files("onnx", variant)[ROLES[manifest.kind]]), threads)

    def run(ids):
        return session.run(["probabilities"], {"ids": ids})[0]

    return run


ATTENTION_OUTPUTS = ("probabilities", "encoder_self")


def attention_runtime(manifest: Manifest, threads: int = 0
                      ) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """attention.onnx of a classifier export made with --with-attention (ExportError naming
    the flag otherwise): ids (B,S) int32 as classify takes them -> {"probabilities" (B,C),
    "encoder_self" (B,L,H,S,S)} float32, every encoder layer's self-attention weights."""
    manifest.require_kind("classifier", "the classifier's attention runtime")
    session = _onnx_session(manifest.attention_file(), threads)
    outputs = {o.name for o in session.get_outputs()}
    if not outputs.issuperset(ATTENTION_OUTPUTS):
        raise ExportError(f"{manifest.attention_file()} has the outputs {sorted(outputs)}, not "
                          f"{', '.join(ATTENTION_OUTPUTS)}; export it again with "
                          f"--with-attention")

    def run(ids):
        got = session.run(list(ATTENTION_OUTPUTS), {"ids": np.asarray(ids, np.int32)})
        return dict(zip(ATTENTION_OUTPUTS, got, strict=True))

    return run


def tflite_runtime(manifest: Manifest, variant: str = "float32") -> Runtime:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as err:
        raise ExportError("the tflite runtime needs LiteRT: pip install ai-edge-litert==2.3.0"
                          ) from err
    import os

    path = manifest.file(manifest.format_files("tflite", variant)["model"])
    try:
        interpreter = Interpreter(model_path=str(path), num_threads=os.cpu_count())
        runner = interpreter.get_signature_runner(SIGNATURES[manifest.kind])
    except (ValueError, RuntimeError) as err:
        raise ExportError(f"{path} could not be loaded as a TFLite model: {err}") from err

    def run(ids):
        return runner(ids=ids)["probabilities"]

    return run


def savedmodel_runtime(manifest: Manifest) -> Runtime:
    import tensorflow as tf

    path = manifest.directory(manifest.format_files("savedmodel")["model"])
    signature = SIGNATURES[manifest.kind]
    try:
        classify = tf.saved_model.load(str(path)).signatures[signature]
    except Exception as err:  # TF raises many types for a damaged SavedModel
        raise ExportError(f"{path} could not be loaded as a SavedModel with a {signature} "
                          f"signature: {err}") from err

    def run(ids):
        return classify(ids=tf.constant(ids, tf.int32))["probabilities"].numpy()

    return run


def keras_model(manifest: Manifest, run_dir: str | Path | None = None):
    """The float32 rebuild of the run's model.keras (a TransformerClassifier, or an
    extractor's TransformerExtractor); the run as export_run finds it."""
    from ..module import load_trained

    run_dir = export_run(manifest, run_dir)
    if manifest.kind == "extractor":
        from ..extractor import load_float32_extractor

        model = load_float32_extractor(run_dir, load_trained(run_dir))
        differ = model.max_sentences != manifest["max_sentences"] and "max_sentences"
    else:
        from ..classifier import load_float32_classifier

        model = load_float32_classifier(run_dir, load_trained(run_dir))
        differ = model.num_classes != manifest.model["num_classes"] and "num_classes"
    if differ:
        raise ExportError(f"{run_dir} does not hold the model of {manifest.root} ({differ} "
                          f"differ); pass the run it was exported from with --run")
    return model


def export_run(manifest: Manifest, run_dir: str | Path | None = None) -> Path:
    """The training run of an export, for the keras runtime: the directory given, else the
    export directory's parent when the export sits inside its run (the run path the manifest
    records is never followed); ExportError when it holds no model.keras."""
    if run_dir is None:
        run_dir = manifest.root.resolve().parent
        if not (run_dir / "model.keras").is_file():
            raise ExportError(
                f"the keras runtime needs the training run: {manifest.root} is not inside a run "
                f"directory; pass it with --run")
    run_dir = Path(run_dir)
    if not (run_dir / "model.keras").is_file():
        raise ExportError(f"the keras runtime needs the training run; {run_dir / 'model.keras'} "
                          f"is missing (pass the run directory with --run)")
    return run_dir


def keras_runtime(manifest: Manifest, run_dir: str | Path | None = None) -> Runtime:
    """keras_model's probabilities: the model with the softmax the export adds (an
    extractor's: the sigmoid)."""
    import tensorflow as tf

    model = keras_model(manifest, run_dir)
    if manifest.kind == "extractor":
        classify = tf.function(lambda ids: tf.sigmoid(model(ids, training=False)))
    else:
        classify = tf.function(lambda ids: tf.nn.softmax(model(ids, training=False), axis=-1))

    def run(ids):
        return classify(tf.constant(ids, tf.int32)).numpy()

    return run


def load_runtime(manifest: Manifest, runtime: str, variant: str = "float32",
                 run_dir: str | Path | None = None) -> Runtime:
    """The `classify` callable of one runtime over a classifier export (an extractor's
    `extract`)."""
    if manifest.kind != "extractor":
        manifest.require_kind("classifier", "the classifier runtimes")
    if runtime in ("savedmodel", "keras") and variant != "float32":
        raise ValueError(f"the {runtime} runtime runs float32 weights only, not {variant}; "
                         f"the onnx runtime has int8, tflite fp16 and int8")
    if runtime == "onnx":
        return onnx_runtime(manifest, variant)
    if runtime == "tflite":
        return tflite_runtime(manifest, variant)
    if runtime in ("savedmodel", "keras"):
        try:
            import tensorflow  # noqa: F401
        except ImportError as err:
            raise ExportError(f"the {runtime} runtime needs TensorFlow, which cannot be "
                              f"imported: pip install {TENSORFLOW} (or use --runtime onnx or "
                              f"tflite)") from err
        if runtime == "savedmodel":
            return savedmodel_runtime(manifest)
        return keras_runtime(manifest, run_dir)
    raise ValueError(f"unknown runtime {runtime!r}; choose one of {RUNTIMES}")


class Classifier:
    """Sentences -> class probabilities over one runtime of a classifier export. Sentences
    are encoded as in training (pieces + EOS; over-long ones truncated to max_source_length
    with EOS kept, or refused), and run in batches padded to their longest sentence."""

    def __init__(self, manifest: Manifest, runtime: Runtime):
        manifest.require_kind("classifier", "a Classifier")
        self.manifest = manifest
        self.runtime = runtime
        self.labels = list(manifest["labels"])
        self.sp = _load_sentencepiece(manifest.file(manifest["tokenizer"]["source"]))
        ids = manifest.special_ids
        self.pad_id, self.eos_id = ids["pad"], ids["eos"]
        self.max_source_length = manifest["max_source_length"]

    def encode(self, sentences: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """Sentences -> id lists ending in EOS. A blank sentence is a ValueError naming its
        line (1-based): no label would be an answer for it."""
        for number, sentence in enumerate(sentences, start=1):
            if not sentence.strip():
                raise ValueError(f"line {number} is empty or only whitespace; give every line "
                                 f"text to classify")
        return encode_sources(sentences, lambda texts: self.sp.encode(texts, out_type=int),
                              self.max_source_length, self.eos_id, truncate=truncate)

    def batch_ids(self, encoded: Sequence[Sequence[int]]) -> np.ndarray:
        """Id lists -> (B, longest) int32, right-padded with PAD."""
        ids = np.full((len(encoded), max(map(len, encoded))), self.pad_id, np.int32)
        for row, tokens in enumerate(encoded):
            ids[row, :len(tokens)] = tokens
        return ids

    def probabilities(self, sentences: Sequence[str], batch_size: int = 64,
                      truncate: bool = True) -> np.ndarray:
        """Sentences -> (N, C) float32 class probabilities, in input order."""
        encoded = self.encode(sentences, truncate)
        out = np.zeros((len(encoded), len(self.labels)), np.float32)
        for rows in batches_by_length(encoded, batch_size):
            out[rows] = np.asarray(self.runtime(self.batch_ids([encoded[i] for i in rows])))
        return out

    def top_k(self, probabilities: np.ndarray, k: int = 1) -> list[list[tuple[str, float]]]:
        """(N, C) probabilities -> per row the k most probable (label, probability), best
        first (ties: the lower class id first)."""
        best = np.argsort(-probabilities, axis=-1, kind="stable")[:, :k]
        return [[(self.labels[c], float(row[c])) for c in cols]
                for row, cols in zip(probabilities, best, strict=True)]


def load_classifier(export_dir: str | Path, runtime: str = "onnx", variant: str = "float32",
                    run_dir: str | Path | None = None) -> Classifier:
    """Text-to-labels classifier over an export directory (see `Classifier`)."""
    manifest = Manifest(export_dir)
    manifest.require_kind("classifier", command("export.classify"))
    return Classifier(manifest, load_runtime(manifest, runtime, variant, run_dir))
