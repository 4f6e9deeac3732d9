"""What the encoder-only kinds (a classifier, an extractive summarizer, a masked language
model) share: one function of token ids in every format, one tokenizer, the manifest keys of
an encoder, and runtimes that are callables ids -> the function's output. Each kind's package
says what its function is, what its manifest adds and how its runner reads text."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ...common import ExportError, _check
from ..base import ExportKind, ExportOptions, write_manifest


def check_word_joints(data: dict) -> None:
    """The manifest's word_joints, when given: keep or split, as run_word_joints reads it."""
    if data.get("word_joints", "keep") not in ("keep", "split"):
        raise ExportError(f"key 'word_joints' is {data['word_joints']!r}, not keep or split")


class EncoderOnlyKind(ExportKind):
    """A kind whose export is one function of token ids (a classifier's `classify`, an
    extractor's `extract`, a masked language model's `fill`): its runtimes are callables ids
    -> the function's output `output`, over the ONNX file of role `role` or the signature
    `signatures[0]`."""

    role: str = ""
    # The output of the exported function the runtimes return (a masked language model's
    # `fill` has its logits only).
    output: str = "probabilities"
    # What the kind's package runs the export with: its runner (runtime.py), the classes of
    # its explorer and API engine (None: refused, naming `tool`), and its parity module
    # (`prepare`, then `CHECKS` in order).
    runner_class: type
    explorer_class: type | None = None
    engine_class: type | None = None
    parity: ModuleType

    def runner(self, manifest, backend):
        return self.runner_class(manifest, backend)

    def explorer(self):
        return self.explorer_class

    def engine(self):
        return self.engine_class

    def parity_prepare(self, run, out):
        self.parity.prepare(run, out)

    def parity_checks(self, run):
        return list(self.parity.CHECKS)

    def validate_section(self, data):
        """One tokenizer, the source vocabulary, pad/unk/eos, max_source_length and whether the
        runtimes lower-case what the model reads (lowercase, when given: run_lowercase); a
        kind checks what its manifest adds after these."""
        _check(_check(data, "tokenizer", dict, ""), "source", str, "tokenizer")
        vocab = _check(_check(data, "vocab", dict, ""), "source_size", int, "vocab", minimum=1)
        special_ids = _check(data, "special_ids", dict, "")
        for key in ("pad", "unk", "eos"):
            value = _check(special_ids, key, int, "special_ids", minimum=0)
            if value >= vocab:
                raise ExportError(f"key 'special_ids.{key}' is {value}, not below "
                                  f"vocab.source_size {vocab}")
        _check(data, "max_source_length", int, "", minimum=2)
        if not isinstance(data.get("lowercase", False), bool):
            raise ExportError("key 'lowercase' must be true or false")

    def backend(self, manifest, runtime, variant, run_dir, search_graph, threads):
        signature = self.signatures[0]
        if runtime == "onnx":
            from ...runtime.onnx import OnnxFunction

            return OnnxFunction(manifest, variant, self.role, threads.count, self.output,
                                threads.spinning)
        if runtime == "tflite":
            from ...runtime.tflite import TFLiteFunction

            return TFLiteFunction(manifest, variant, signature, self.output,
                                  threads.count or None)
        from ...runtime.tf import KerasFunction, SavedModelFunction, run_model

        if runtime == "savedmodel":
            return SavedModelFunction(manifest, signature, self.output)
        return KerasFunction(run_model(manifest, run_dir, self), self.activation)

    @staticmethod
    def activation(logits):
        """The model's logits -> the exported function's output `output` (TF)."""
        raise NotImplementedError

    # What differs between the encoder-only kinds' exports.
    task: str = ""  # the run's task, for run_tokenizer's messages
    ids_rank: int = 2  # the exported function's ids: (B,S), or an extractor's (B,K,S)

    def load_float32(self, run_dir: Path, trained):
        """A float32 rebuild of the trained model (module.load_float32)."""
        from .module import load_float32

        return load_float32(run_dir, trained)

    def module(self, model):
        """The tf.Module whose `signatures[0]` every format holds: ids -> `output` (the
        model's logits through `activation`) and, when that is not them, the logits."""
        from .module import FunctionModule

        return FunctionModule(model, self.signatures[0], self.ids_rank, self.output,
                              self.activation)

    def section(self, run_dir: Path, trained, model) -> dict:
        """The manifest keys of this kind (model, interface, and what its runner reads)."""
        raise NotImplementedError

    def attention(self, model, out: Path, options: ExportOptions) -> dict | None:
        """attention.onnx's manifest entry, with --with-attention."""
        return None

    def export_into(self, out, run_dir, trained, options, versions):
        import shutil

        from ...formats import export_formats
        from ...onnx_convert import convert_function
        from ...onnx_optimize import write_variants
        from .run import TOKENIZER, run_tokenizer

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
