"""What the export, the runtimes and export.parity ask of a kind of export (the manifest's
"kind": a translator, a language model, a classifier, an extractive summarizer).

Each kind is one module of this package; `export.kinds.KINDS` maps the manifest's name to it.
The format writers (export/formats.py) and the runtimes (export/runtime/) are written once
and ask the kind for what differs. A kind's module imports TensorFlow only inside its
methods, so the TensorFlow-free runtimes can import every kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..common import Manifest
from ..parity_check import Check, ParityRun


@dataclass
class ExportOptions:
    """What `python -m export` was asked for, beside the run and --out (see export_run)."""

    formats: tuple[str, ...]
    quantize: str = "none"
    translate_signature: bool = True
    with_attention: bool = False
    onnx_optimize: bool = True
    search_graph: bool = True


class ExportKind:
    """One kind of export; `name` is the manifest's "kind"."""

    name: str = ""
    # The tf.functions of its exported module: the SavedModel's and TFLite's signatures.
    signatures: tuple[str, ...] = ()

    def accepts(self, model) -> bool:
        """Whether a trained model (any class of the library) is exported as this kind."""
        raise NotImplementedError

    # --- export (TensorFlow) ---

    def check_options(self, options: ExportOptions) -> None:
        """ValueError naming the option to drop when this kind cannot honour one."""

    def export_into(self, out: Path, run_dir: Path, trained, options: ExportOptions,
                    versions: dict) -> dict:
        """Every asked format and manifest.json into `out` (the staged export directory);
        returns the manifest."""
        raise NotImplementedError

    # --- runtimes ---

    def load_float32(self, run_dir: Path, trained):
        """The float32 rebuild of a trained model of this kind (what every format holds)."""
        raise NotImplementedError

    def model_differences(self, manifest: Manifest, run_dir: Path, trained) -> list[str]:
        """The names of what the run's model (as trained, before its float32 rebuild) gives
        otherwise than the export's manifest (the keras runtime refuses such a run)."""
        return []

    def backend(self, manifest: Manifest, runtime: str, variant: str,
                run_dir: str | Path | None, search_graph: bool):
        """The model of one runtime over the export: a keras_transformer.generation.Backend
        for a kind that decodes, a callable ids -> probabilities for an encoder-only one."""
        raise NotImplementedError

    def runner(self, manifest: Manifest, backend):
        """What a user runs (Translator, Generator, Classifier, Summarizer) over a backend."""
        raise NotImplementedError

    # --- export.parity ---

    def parity_prepare(self, run: ParityRun, out) -> None:
        """What every check of export.parity needs, before the first (the runtimes, the
        inputs); ExportError when the export cannot be checked as given."""

    def parity_checks(self, run: ParityRun) -> list[Check]:
        """export.parity's checks of this kind, in the order they run and print."""
        raise NotImplementedError


def check_variant(runtime: str, variant: str) -> None:
    """ValueError when a TensorFlow runtime is asked for a quantized variant."""
    if runtime in ("savedmodel", "keras") and variant != "float32":
        raise ValueError(f"the {runtime} runtime runs float32 weights only, not {variant}; "
                         f"the onnx runtime has int8, tflite fp16 and int8")


class DecodingKind(ExportKind):
    """A kind whose export decodes step by step (a translator, a language model): its
    runtimes are keras_transformer.generation Backends over `decode_step` (and `encode`)."""

    def backend(self, manifest, runtime, variant, run_dir, search_graph):
        if runtime == "onnx":
            from ..runtime.onnx import OnnxBackend

            return OnnxBackend(manifest, variant, search_graph=search_graph)
        if runtime == "tflite":
            from ..runtime.tflite import TFLiteBackend

            return TFLiteBackend(manifest, variant)
        import tensorflow_text  # noqa: F401  (the ops of a translator's SavedModel `translate`)

        from ..runtime.tf import SavedModelBackend, run_model

        if runtime == "savedmodel":
            return SavedModelBackend(manifest)
        return self.keras_backend(manifest, run_model(manifest, run_dir, self))

    def keras_backend(self, manifest: Manifest, model):
        """The Backend over the run's float32 Keras model."""
        raise NotImplementedError

    def load_float32(self, run_dir: Path, trained):
        from ..module import float32_transformer

        return float32_transformer(run_dir, trained)


class EncoderOnlyKind(ExportKind):
    """A kind whose export is one function of token ids (a classifier's `classify`, an
    extractor's `extract`, a masked language model's `fill`): its runtimes are callables ids
    -> the function's output `output`, over the ONNX file of role `role` or the signature
    `signatures[0]`."""

    role: str = ""
    # The output of the exported function the runtimes return (a masked language model's
    # `fill` has its logits only).
    output: str = "probabilities"

    def backend(self, manifest, runtime, variant, run_dir, search_graph):
        signature = self.signatures[0]
        if runtime == "onnx":
            from ..runtime.onnx import OnnxFunction

            return OnnxFunction(manifest, variant, self.role, output=self.output)
        if runtime == "tflite":
            from ..runtime.tflite import TFLiteFunction

            return TFLiteFunction(manifest, variant, signature, self.output)
        from ..runtime.tf import KerasFunction, SavedModelFunction, run_model

        if runtime == "savedmodel":
            return SavedModelFunction(manifest, signature, self.output)
        return KerasFunction(run_model(manifest, run_dir, self), self.activation)

    @staticmethod
    def activation(logits):
        """The model's logits -> the exported function's output `output` (TF)."""
        raise NotImplementedError

    # What differs between the encoder-only kinds' exports.
    task: str = ""  # the run's task, for run_tokenizer's messages

    def module(self, model):
        """The tf.Module whose `signatures[0]` every format holds."""
        raise NotImplementedError

    def section(self, run_dir: Path, trained, model) -> dict:
        """The manifest keys of this kind (model, interface, and what its runner reads)."""
        raise NotImplementedError

    def attention(self, model, out: Path, options: ExportOptions) -> dict | None:
        """attention.onnx's manifest entry, with --with-attention."""
        return None

    def export_into(self, out, run_dir, trained, options, versions):
        import shutil

        from ..classifier import TOKENIZER, run_tokenizer
        from ..formats import export_formats
        from ..onnx_convert import convert_function
        from ..onnx_optimize import write_variants

        tokenizer = run_tokenizer(run_dir, self.task)
        model = self.load_float32(run_dir, trained)
        c = model.config
        shutil.copyfile(run_dir / TOKENIZER, out / TOKENIZER)
        module = self.module(model)
        signature = self.signatures[0]

        def onnx_variants(out, int8, lean):
            # export.onnx_optimize's pass; int8 quantizes weight MatMuls only, as for the
            # translator.
            return write_variants({self.role: (f"{self.role}.onnx",
                                               convert_function(getattr(module, signature)))},
                                  out, int8, lean)

        manifest_formats = export_formats(out, module, self.signatures, options.formats,
                                          options.quantize, options.onnx_optimize,
                                          onnx_variants)
        return write_manifest(out, self.name, run_dir, manifest_formats, [TOKENIZER], {
            "tokenizer": {"source": TOKENIZER},
            "vocab": {"source_size": c.source_vocab_size},
            "special_ids": {"pad": c.pad_id, "unk": tokenizer.unk_id, "eos": c.eos_id},
            "max_source_length": c.max_source_length,
            **self.section(run_dir, trained, model),
        }, self.attention(model, out, options), versions)


def write_manifest(out: Path, kind: str, run_dir: Path, formats: dict, tokenizers,
                   body: dict, attention: dict | None, versions: dict) -> dict:
    """manifest.json into the export directory `out`, written atomically, and returned: what
    every kind's manifest holds (its version, kind, run, formats, files, versions and the
    attention.onnx entry) around the kind's own `body`."""
    import json

    from keras_transformer.file_safety import atomic_write_text

    from ..common import MANIFEST, MANIFEST_VERSION, listed_files

    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "kind": kind,
        "run": str(run_dir.resolve()),
        "formats": formats,
        "files": listed_files(out, formats,
                              sorted(tokenizers) + ([attention["file"]] if attention else [])),
        **body,
        "versions": versions,
    }
    if attention is not None:
        manifest["attention"] = attention
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest
