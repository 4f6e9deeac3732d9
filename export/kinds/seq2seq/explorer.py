"""The explorer of a translator's export (export.serve: /translate): the translation or
summary of one sentence and every attention weight of it, over the onnx runtime and
attention.onnx; a bottom-up summarizer's adds its selector's probabilities."""

from __future__ import annotations

from keras_transformer.decoding.settings import SEQ2SEQ_KEYS
from keras_transformer.text.sources import default_max_length

from ...common import Manifest
from ...inputs import InputError, check_text
from .pipeline import PipelineTranslator

# The attention maps of a translator, as attention.onnx names them.
ATTENTION_KINDS = ("encoder_self", "decoder_self", "cross")


class Explorer:
    """Translate one sentence as `python -m export.translate` does (same Translator, beam and
    length penalty, over the onnx runtime) and add the attention weights of that sentence and
    its output, teacher-forced through attention.onnx.

    Thread-safe: the Translator and the OnnxBackend keep no per-call state (each search makes
    its own cache), onnxruntime's `run` and sentencepiece's encode/decode may be called from
    several threads, and the attention session is made once under a lock."""

    kind = "translator"
    route = "/translate"
    searches = True  # whether it takes --beam and --alpha

    def __init__(self, manifest: Manifest, translator, beam_size: int | None = None,
                 alpha: float | None = None):
        self.manifest = manifest
        self.manifest.require_kind("translator", "the translation explorer")
        self.manifest.attention_file()  # the export's fault, reported before serving
        self.translator = translator
        self.backend = self.translator.backend
        # The run's search (manifest.search), as export.translate defaults to it.
        self.search = self.manifest.search.given(beam_size=beam_size, alpha=alpha)
        self.task = self.manifest.task
        # As export.translate: over-long summaries keep the start of their article; a
        # translation of part of a sentence would be wrong, so the request is refused instead.
        self.truncate = self.task == "summarization"
        model = self.manifest.model
        self.num_layers = model.get("num_encoder_layers", model["num_decoder_layers"])
        self.num_decoder_layers = model["num_decoder_layers"]
        self.num_heads = model["num_heads"]

    def info(self) -> dict:
        return {"kind": self.kind, "task": self.task, "encoder_layers": self.num_layers,
                "decoder_layers": self.num_decoder_layers, "heads": self.num_heads,
                "copy_attention": self.backend.copy_attention,
                "max_source_length": self.translator.max_source_length,
                **self.search.to_dict(SEQ2SEQ_KEYS)}

    def explain(self, text: str) -> dict:
        """text -> {"output", "source_tokens", "output_tokens", "decoder_input_tokens",
        "truncated", "attention": {kind: nested lists [layer][head][row][column]}}; a
        copy-attention model adds the kind "copy" (one layer and head: output tokens x
        source tokens) and "copy_gate", the share copied of each output token; a bottom-up
        summarizer adds "selector": each source token's probability, whether it was kept
        (the decoder attends only to those), and epsilon.

        `output` is what export.translate prints for that line. Rows of decoder_self and
        cross are output_tokens (the step that produced each), their columns
        decoder_input_tokens (BOS, then the output) and source_tokens (EOS included)."""
        text = check_text(text)
        translator = self.translator
        selected = {}
        if isinstance(translator, PipelineTranslator):
            # A bottom-up summarizer: the article as its selector sees it, and the pieces kept.
            (source_ids,), (probabilities,), (kept,) = translator.summarizer().sources([text])
            (ids,) = translator.search_encoded([source_ids], self.search,
                                               selections=[kept.tolist()])
            selected = {"selector": {"probabilities": probabilities.tolist(),
                                     "kept": kept.tolist(),
                                     "epsilon": translator.epsilon, "top_k": translator.top_k,
                                     "source": translator.source}}
        else:
            try:
                (source_ids,) = translator.encode([text], truncate=self.truncate)
            except ValueError as err:  # over-long, with truncation off
                raise InputError(str(err).replace("sentence 1", "the text", 1)) from None
            if source_ids is None:  # pieces of nothing, e.g. only characters the model drops
                raise InputError('"text" gives no tokens for this model; type a sentence')
            (ids,) = translator.translate_ids([text], self.search, truncate=self.truncate)
        truncated = len(translator.source_sp.encode(text)) + 1 > len(source_ids)
        (output,) = translator.decode_ids([ids])
        # The search stops at EOS or at its length limit; only in the first case did a last
        # step produce EOS, and that step's weights are shown as a row of their own.
        limit = default_max_length(len(source_ids), translator.max_target_length)
        ended = len(ids) < limit
        produced = list(ids) + [translator.eos_id] if ended else list(ids)
        decoder_input = [translator.bos_id] + produced[:-1]
        weights = self.backend.attention(
            [source_ids], [decoder_input],
            [selected["selector"]["kept"]] if selected else None)
        pieces = translator.target_sp.id_to_piece
        # Copy attention: one more map, the copy distribution (one layer, one "head"), and
        # the copy gate of each output token.
        copied = {} if "copy" not in weights else {
            "copy_gate": weights["copy_gate"].tolist()}
        if copied:
            weights = {**weights, "copy": weights["copy"][None, None]}
        kinds = ATTENTION_KINDS + (("copy",) if copied else ())
        return {
            "output": output,
            "source_tokens": [translator.source_sp.id_to_piece(int(i)) for i in source_ids],
            "output_tokens": [pieces(int(i)) for i in produced],
            "decoder_input_tokens": [pieces(int(i)) for i in decoder_input],
            "truncated": bool(truncated),
            "attention": {kind: weights[kind].tolist() for kind in kinds},
            **copied,
            **selected,
        }
