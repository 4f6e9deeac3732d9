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
from ..runtime import Threads


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
    title: str = ""  # in messages: "holds a <title>"
    default_task: str = ""  # the task of a manifest without "task"
    tool: str = ""  # the module whose command line runs it, e.g. export.translate
    # The tf.functions of its exported module: the SavedModel's and TFLite's signatures.
    signatures: tuple[str, ...] = ()
    # "module:Class" of the library's model this kind exports, imported only when asked (the
    # runtimes run without Keras).
    model_class: str = ""
    # Whether --with-attention adds the weights the attention explorer shows (attention.onnx).
    attention_weights: bool = False

    def accepts(self, model) -> bool:
        """Whether a trained model (any class of the library) is exported as this kind."""
        import importlib

        module, name = self.model_class.split(":")
        return isinstance(model, getattr(importlib.import_module(module), name))

    def validate_section(self, data: dict) -> None:
        """ExportError (common._check's) naming the first of this kind's manifest keys, the
        ones its runtimes read, that is missing or wrong."""
        raise NotImplementedError

    # --- export (TensorFlow) ---

    def check_options(self, options: ExportOptions) -> None:
        """ValueError naming the option to drop when this kind cannot honour one."""
        if options.with_attention and not self.attention_weights:
            article = "an" if self.title[0] in "aeiou" else "a"
            raise ValueError("--with-attention exports the weights the attention explorer "
                             "shows, for a translation, summarization or classification run; "
                             f"{article} {self.title}'s export has none: export it without "
                             "--with-attention")

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
                run_dir: str | Path | None, search_graph: bool, threads: Threads):
        """The model of one runtime over the export: a keras_transformer.generation.Backend
        for a kind that decodes, a callable ids -> probabilities for an encoder-only one;
        `threads` for the runtimes that take them (onnx, tflite)."""
        raise NotImplementedError

    def runner(self, manifest: Manifest, backend):
        """What a user runs (Translator, Generator, Classifier, Summarizer) over a backend."""
        raise NotImplementedError

    def with_sub_exports(self, manifest: Manifest, runner, runtime: str, variant: str,
                         run_dir: str | Path | None, open_runner):
        """The runner of an export that holds other exports run with it (a bottom-up
        summarizer's selector): `runner` joined with theirs, each opened by `open_runner`
        (export.kinds') in the same runtime and variant; `runner` itself for an export that
        holds none."""
        return runner

    # --- serving: export.serve's explorer, export.api's engine ---

    def explorer(self):
        """The class of this kind's explorer (export.serve), built from the manifest and its
        onnx runner; None: the explorer refuses the export, naming `tool`."""
        return None

    def engine(self):
        """The class of this kind's engine (export.api), built from the manifest and a runner;
        None: the API server refuses the export, naming `tool`."""
        return None

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
