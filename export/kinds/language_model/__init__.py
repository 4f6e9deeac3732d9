"""The language model kind: a decoder-only TransformerLM's export, `decode_step` alone (the
translator's step without the encoder's inputs, with its cache names and layout); Generator
runs it."""

from __future__ import annotations

from ..decoding import DecodingKind
from ..decoding import parity as decoding_parity

# The interface of a language model's export, in words (manifest.json "interface").
LM_INTERFACE = {
    "decode_step": "tokens int32 (B,), index int32 (), and per layer l cache_keys_l, "
                   "cache_values_l float32 (B,H,T,D/H) -> logits float32 (B,V) of the next "
                   "token, step_key_values float32 (B,L,2,D); the caller writes "
                   "step_key_values[:, l, 0] split into heads into cache_keys_l[:, :, index], "
                   "and [:, l, 1] into cache_values_l. A prompt is fed one token per step, "
                   "from BOS at index 0",
    "onnx_decoder_step": "as decode_step, plus a log_normalizer float32 (B,) output "
                         "(logsumexp of each row of logits)",
}


class LanguageModelKind(DecodingKind):
    """A decoder alone: `decode_step`, with the translator's cache names and layout."""

    name = "lm"
    title = "language model"
    default_task = "translation"
    tool = "export.generate"
    signatures = ("decode_step",)
    interface = LM_INTERFACE
    model_class = "keras_transformer.models.language_model:TransformerLM"
    attention_weights = False

    def keras_backend(self, manifest, model):
        from ...runtime.tf import KerasLMBackend

        return KerasLMBackend(manifest, model)

    def runner(self, manifest, backend):
        from ...runtime.base import Generator

        return Generator(manifest, backend)

    def engine(self):
        from .engine import GeneratorEngine

        return GeneratorEngine

    def parity_prepare(self, run, out):
        decoding_parity.prepare(run, out)

    def parity_checks(self, run):
        return [decoding_parity.check_tensors(encoder=False), decoding_parity.check_lm_tokens]
