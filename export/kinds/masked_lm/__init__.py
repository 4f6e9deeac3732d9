"""The masked language model kind: a TransformerMaskedLM's export, `fill` (ids -> the logits
of the piece at every position) in every format, the [MASK] piece and id and how the run read
its text in the manifest; FillMask runs it."""

from __future__ import annotations

from ...common import ExportError, _check
from ..encoder_only import EncoderOnlyKind, check_word_joints
from . import parity
from .engine import FillMaskEngine
from .runtime import FillMask

INTERFACE = ("ids int32 (B,S): pieces + EOS, right-padded with PAD, S at most "
             "max_source_length, some pieces the mask id -> logits float32 (B,S,V) of the "
             "piece at every position (softmax over V for its probabilities)")


class MaskedLMKind(EncoderOnlyKind):
    name = "masked_lm"
    title = "masked language model"
    default_task = "masked_lm"
    tool = "export.fill_mask"
    signatures = ("fill",)
    role = "masked_lm"  # masked_lm.onnx
    task = "masked_lm"
    output = "logits"
    runner_class = FillMask
    engine_class = FillMaskEngine
    parity = parity
    model_class = "keras_transformer.models.masked_lm:TransformerMaskedLM"

    def validate_section(self, data):
        super().validate_section(data)
        mask = _check(data, "mask", dict, "")
        _check(mask, "piece", str, "mask")
        mask_id = _check(mask, "id", int, "mask", minimum=0)
        vocab = data["vocab"]["source_size"]
        if mask_id >= vocab:
            raise ExportError(f"key 'mask.id' is {mask_id}, not below vocab.source_size {vocab}")
        check_word_joints(data)

    def load_float32(self, run_dir, trained):
        from .module import erf_gelu

        model = super().load_float32(run_dir, trained)
        # The same function as the trained head's "gelu", in a form both converters take.
        model.head_transform.activation = erf_gelu
        return model

    def section(self, run_dir, trained, model):
        from ..encoder_only.run import run_lowercase, run_tokenizer, run_word_joints
        from .module import run_mask

        c = model.config
        return {"task": "masked_lm",
                "mask": run_mask(run_tokenizer(run_dir, self.task), run_dir),
                "lowercase": run_lowercase(run_dir),
                "word_joints": run_word_joints(run_dir),
                "model": {"num_encoder_layers": c.num_encoder_layers, "d_model": c.d_model,
                          "num_heads": c.num_heads, "parameters": int(model.count_params())},
                "interface": {self.signatures[0]: INTERFACE}}

    @staticmethod
    def activation(logits):
        return logits
