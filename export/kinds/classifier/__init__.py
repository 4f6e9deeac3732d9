"""The classifier kind: a TransformerClassifier's export, `classify` (ids -> class
probabilities) in every format, the class names in the manifest, and attention.onnx with
--with-attention; Classifier runs it."""

from __future__ import annotations

import logging

from ...common import CLASSIFIER_ATTENTION_INTERFACE, ExportError, _check
from ..encoder_only import EncoderOnlyKind
from . import parity
from .engine import ClassifierEngine
from .explorer import ClassifierExplorer
from .runtime import Classifier

log = logging.getLogger("export")

INTERFACE = ("ids int32 (B,S): pieces + EOS, right-padded with PAD, S at most "
             "max_source_length -> probabilities float32 (B,C) (softmax), logits "
             "float32 (B,C); class c is labels[c]")


class ClassifierKind(EncoderOnlyKind):
    name = "classifier"
    title = "classifier"
    default_task = "classification"
    tool = "export.classify"
    signatures = ("classify",)
    role = "classifier"  # classifier.onnx
    task = "classification"
    runner_class = Classifier
    explorer_class = ClassifierExplorer
    engine_class = ClassifierEngine
    parity = parity
    model_class = "keras_transformer.models.classifier:TransformerClassifier"
    attention_weights = True

    def validate_section(self, data):
        super().validate_section(data)
        labels = _check(data, "labels", list, "")
        if len(labels) < 2 or not all(isinstance(v, str) and v for v in labels):
            raise ExportError("key 'labels' must list at least two class names (strings)")
        model = _check(data, "model", dict, "")
        if _check(model, "num_classes", int, "model", minimum=2) != len(labels):
            raise ExportError(f"key 'model.num_classes' is {model['num_classes']} but 'labels' "
                              f"names {len(labels)} classes")

    def section(self, run_dir, trained, model):
        from ..encoder_only.run import run_lowercase
        from .module import run_labels

        c = model.config
        return {"labels": run_labels(run_dir, model.num_classes),
                "lowercase": run_lowercase(run_dir),
                "model": {"num_encoder_layers": c.num_encoder_layers, "d_model": c.d_model,
                          "num_heads": c.num_heads, "num_classes": model.num_classes,
                          "pooling": model.pooling, "parameters": int(model.count_params())},
                "interface": {self.signatures[0]: INTERFACE}}

    def attention(self, model, out, options):
        if not options.with_attention:
            return None
        from ...onnx_convert import export_attention
        from .module import attention_function

        log.info("exporting the attention weights (ONNX)")
        return export_attention(attention_function(model), out,
                                CLASSIFIER_ATTENTION_INTERFACE, options.onnx_optimize)

    def model_differences(self, manifest, run_dir, trained) -> list[str]:
        return ["num_classes"] if trained.num_classes != manifest.model["num_classes"] else []

    @staticmethod
    def activation(logits):
        import tensorflow as tf

        return tf.nn.softmax(logits, axis=-1)
