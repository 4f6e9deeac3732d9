"""One sentence in, its translation (or summary) and every attention weight out, over the ONNX
runtime of an export made with --with-attention. What `python -m export.serve` answers.

NumPy, sentencepiece and onnxruntime only (no TensorFlow, no web packages).
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.text.sources import default_max_length

from .common import Manifest
from .runtime import Translator, load_backend

KINDS = ("encoder_self", "decoder_self", "cross")


class InputError(ValueError):
    """The text of a request cannot be translated; the message says what to change."""


class Explorer:
    """Translate one sentence as `python -m export.translate` does (same Translator, beam and
    length penalty, over the onnx runtime) and add the attention weights of that sentence and
    its output, teacher-forced through attention.onnx.

    Thread-safe: the Translator and the OnnxBackend keep no per-call state (each search makes
    its own cache), onnxruntime's `run` and sentencepiece's encode/decode may be called from
    several threads, and the attention session is made once under a lock."""

    def __init__(self, export_dir: str | Path, beam_size: int | None = None,
                 alpha: float | None = None):
        self.manifest = Manifest(export_dir)
        self.manifest.attention_file()  # the export's fault, reported before serving
        self.backend = load_backend(self.manifest, "onnx")
        self.translator = Translator(self.manifest, self.backend)
        # The run's search settings (manifest.decoding), as export.translate defaults to them.
        run = self.manifest.decoding
        self.beam_size = run["beam_size"] if beam_size is None else beam_size
        self.alpha = run["alpha"] if alpha is None else alpha
        self.search = {k: run[k] for k in ("no_repeat_ngram_size", "min_length")}
        self.task = self.manifest.task
        # As export.translate: over-long summaries keep the start of their article; a
        # translation of part of a sentence would be wrong, so the request is refused instead.
        self.truncate = self.task == "summarization"
        model = self.manifest.model
        self.num_layers = model.get("num_encoder_layers", model["num_decoder_layers"])
        self.num_decoder_layers = model["num_decoder_layers"]
        self.num_heads = model["num_heads"]

    def info(self) -> dict:
        return {"task": self.task, "encoder_layers": self.num_layers,
                "decoder_layers": self.num_decoder_layers, "heads": self.num_heads,
                "max_source_length": self.translator.max_source_length,
                "beam_size": self.beam_size, "alpha": self.alpha, **self.search}

    def check_text(self, text) -> str:
        """The text of a request, or InputError naming what is wrong with it."""
        if not isinstance(text, str):
            raise InputError(f'"text" must be a string, not {type(text).__name__}')
        if "\n" in text:
            raise InputError('"text" holds a line break; send one sentence (one line) per '
                             'request')
        if "\x00" in text:
            raise InputError('"text" holds a NUL character; remove it')
        if not text.strip():
            raise InputError('"text" is empty; type a sentence')
        return text

    def explain(self, text: str) -> dict:
        """text -> {"output", "source_tokens", "output_tokens", "decoder_input_tokens",
        "truncated", "attention": {kind: nested lists [layer][head][row][column]}}.

        `output` is what export.translate prints for that line. Rows of decoder_self and
        cross are output_tokens (the step that produced each), their columns
        decoder_input_tokens (BOS, then the output) and source_tokens (EOS included)."""
        text = self.check_text(text)
        translator = self.translator
        try:
            (source_ids,) = translator.encode([text], truncate=self.truncate)
        except ValueError as err:  # over-long, with truncation off
            raise InputError(str(err).replace("sentence 1", "the text", 1)) from None
        if source_ids is None:  # pieces of nothing, e.g. only characters the model drops
            raise InputError('"text" gives no tokens for this model; type a sentence')
        truncated = len(translator.source_sp.encode(text)) + 1 > len(source_ids)
        (ids,) = translator.translate_ids([text], beam_size=self.beam_size, alpha=self.alpha,
                                          truncate=self.truncate, **self.search)
        (output,) = translator.decode_ids([ids])
        # The search stops at EOS or at its length limit; only in the first case did a last
        # step produce EOS, and that step's weights are shown as a row of their own.
        limit = default_max_length(len(source_ids), translator.max_target_length)
        ended = len(ids) < limit
        produced = list(ids) + [translator.eos_id] if ended else list(ids)
        decoder_input = [translator.bos_id] + produced[:-1]
        weights = self.backend.attention([source_ids], [decoder_input])
        pieces = translator.target_sp.id_to_piece
        return {
            "output": output,
            "source_tokens": [translator.source_sp.id_to_piece(int(i)) for i in source_ids],
            "output_tokens": [pieces(int(i)) for i in produced],
            "decoder_input_tokens": [pieces(int(i)) for i in decoder_input],
            "truncated": bool(truncated),
            "attention": {kind: weights[kind].tolist() for kind in KINDS},
        }

