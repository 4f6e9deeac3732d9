"""The extractive summarizer kind: a TransformerExtractor's export, `extract` (an article's
sentence grid -> sentence probabilities) in every format, with the run's K, word joints and
the selection it chose on dev in the manifest; Summarizer runs it."""

from __future__ import annotations

from ...common import ExportError, _check
from ..encoder_only import EncoderOnlyKind, check_word_joints
from . import parity
from .engine import ExtractorEngine
from .explorer import ExtractorExplorer
from .runtime import Summarizer

INTERFACE = ("ids int32 (B,K,S): an article's first K sentences (K at most "
             "max_sentences), each its pieces + EOS right-padded with PAD to S (at "
             "most max_source_length), missing sentences all PAD -> probabilities "
             "float32 (B,K) (sigmoid: that the summary takes the sentence), logits "
             "float32 (B,K); a padding sentence's values mean nothing")


class ExtractorKind(EncoderOnlyKind):
    name = "extractor"
    title = "extractive summarizer"
    default_task = "extractive_summarization"
    tool = "export.summarize"
    signatures = ("extract",)
    role = "extractor"  # extractor.onnx
    task = "extractive summarization"
    runner_class = Summarizer
    explorer_class = ExtractorExplorer
    engine_class = ExtractorEngine
    parity = parity
    model_class = "keras_transformer.models.extractor:TransformerExtractor"
    ids_rank = 3  # (B,K,S): an article's sentences

    def validate_section(self, data):
        from keras_transformer.text.extractive import Selection

        super().validate_section(data)
        sentences = _check(data, "max_sentences", int, "", minimum=1)
        check_word_joints(data)
        try:
            Selection.from_dict(_check(data, "selection", dict, "")).check(sentences)
        except ValueError as err:
            raise ExportError(f"key 'selection': {err}") from None

    def section(self, run_dir, trained, model):
        from keras_transformer.text.extractive import read_selection

        from ..encoder_only.run import run_lowercase, run_word_joints

        c = model.config
        return {"task": "extractive_summarization",
                "max_sentences": model.max_sentences,
                "word_joints": run_word_joints(run_dir),
                "lowercase": run_lowercase(run_dir),
                "selection": read_selection(run_dir, trained.max_sentences).to_dict(),
                "model": {"num_encoder_layers": c.num_encoder_layers,
                          "sentence_layers": model.sentence_layers, "d_model": c.d_model,
                          "num_heads": c.num_heads, "parameters": int(model.count_params())},
                "interface": {self.signatures[0]: INTERFACE}}

    def model_differences(self, manifest, run_dir, trained) -> list[str]:
        return (["max_sentences"] if trained.max_sentences != manifest["max_sentences"]
                else [])

    @staticmethod
    def activation(logits):
        import tensorflow as tf

        return tf.sigmoid(logits)
