"""The translator kind: a seq2seq Transformer's export (translation and summarization runs,
with or without copy attention), `encode` and `decode_step` in every format, the SavedModel's
strings-to-strings `translate`, the whole search as search.onnx, and attention.onnx with
--with-attention; a bottom-up summarizer's with its selector (pipeline.py)."""

from __future__ import annotations

import logging
from pathlib import Path

from ...common import ATTENTION_INTERFACE
from ..base import ExportOptions
from ..decoding import DecodingKind
from ..decoding import parity as decoding_parity

log = logging.getLogger("export")

# The interface of a translator's export, in words (manifest.json "interface").
INTERFACE = {
    "encode": "source_ids int32 (B,S) -> per decoder layer l cross_keys_l, "
              "cross_values_l float32 (B,H,S,D/H), and memory_mask bool (B,S)",
    "decode_step": "tokens int32 (B,), memory_mask bool (B,S), index int32 (), "
                   "cross_keys_l, cross_values_l as encode gives them, and per layer l "
                   "cache_keys_l, cache_values_l float32 (B,H,T,D/H) -> logits float32 "
                   "(B,V), step_key_values float32 (B,L,2,D); the caller writes "
                   "step_key_values[:, l, 0] split into heads into "
                   "cache_keys_l[:, :, index], and [:, l, 1] into cache_values_l; "
                   "with model.copy_attention, encode also returns and decode_step "
                   "also takes copy_source_ids int32 (B,S), and logits are the copy "
                   "mixture's log-probabilities",
    "onnx_decoder_step": "as decode_step, plus a log_normalizer float32 (B,) output "
                         "(logsumexp of each row of logits)",
    "onnx_search": "source_ids int32 (B,S), max_length int32 (), beam_size int32 () "
                   "(1: greedy), alpha float64 (), no_repeat_ngram_size int32 (), "
                   "min_length int32 () -> tokens int32 (B,T) (PAD after EOS), scores "
                   "float32 (B,): the whole search of keras_transformer.decoding in "
                   "one call",
}


class Seq2SeqKind(DecodingKind):
    name = "translator"
    title = "translator (encoder-decoder)"
    default_task = "translation"
    tool = "export.translate"
    signatures = ("decode_step", "encode")
    interface = INTERFACE
    model_class = "keras_transformer.models.transformer:Transformer"
    attention_weights = True

    # What the encoder brings to the export: the SavedModel's `translate`, search.onnx,
    # attention.onnx.
    def translate_signature(self, options: ExportOptions) -> bool:
        return options.translate_signature

    def search_graph(self, options: ExportOptions) -> bool:
        return options.search_graph

    def attention(self, model, out: Path, options: ExportOptions) -> dict | None:
        """attention.onnx's manifest entry, with --with-attention."""
        if not options.with_attention:
            return None
        from ...module import attention_function
        from ...onnx_convert import export_attention

        log.info("exporting the attention weights (ONNX)")
        return export_attention(attention_function(model), out, ATTENTION_INTERFACE,
                                options.onnx_optimize)

    def export_parts(self, out, run_dir, options, versions):
        """A bottom-up summarizer's selector (the run's eval.selector) in out/selector/."""
        from .pipeline import export_selector

        return export_selector(out, run_dir, options, versions)

    def keras_backend(self, manifest, model):
        from keras_transformer.tf_backend import KerasBackend

        return KerasBackend(model)

    def runner(self, manifest, backend):
        from ...runtime.base import Translator

        return Translator(manifest, backend)

    def with_sub_exports(self, manifest, runner, runtime, variant, run_dir, open_runner):
        """A bottom-up summarizer's export: the translator with its selector (pipeline.py)."""
        if "selector" not in manifest.data:
            return runner
        from .pipeline import open_pipeline

        return open_pipeline(manifest, runner, runtime, variant, run_dir, open_runner)

    def explorer(self):
        from .explorer import Explorer

        return Explorer

    def engine(self):
        from .engine import TranslatorEngine

        return TranslatorEngine

    def parity_prepare(self, run, out):
        decoding_parity.prepare_translator(run, out)

    def parity_checks(self, run):
        from .pipeline import check_pipeline

        checks = [decoding_parity.check_tensors(encoder=True), decoding_parity.check_greedy,
                  decoding_parity.check_beam, decoding_parity.check_search_graphs,
                  decoding_parity.check_translate_signature,
                  decoding_parity.check_variants, decoding_parity.check_attention,
                  decoding_parity.record_choice]
        return checks + ([check_pipeline] if "selector" in run.manifest.data else [])
