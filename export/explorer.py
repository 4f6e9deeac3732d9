"""One sentence in, its translation (or summary, or class) and every attention weight out,
over the ONNX runtime of an export made with --with-attention. What `python -m export.serve`
answers: `Explorer` for a translator's export (translation, summarization),
`ClassifierExplorer` for a classifier's, `ExtractorExplorer` for an extractive summarizer's
(an article in, each sentence's probability and the chosen ones out, no attention);
`open_explorer` picks by the manifest's kind.

NumPy, sentencepiece and onnxruntime only (no TensorFlow, no web packages).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from keras_transformer.decoding.settings import SEQ2SEQ_KEYS
from keras_transformer.text.sources import default_max_length

from .common import Manifest
from .kinds import kind_of, open_manifest, open_runner
from .kinds.classifier.runtime import attention_runtime
from .kinds.seq2seq.pipeline import PipelineTranslator

KINDS = ("encoder_self", "decoder_self", "cross")
CLASSIFIER_KINDS = ("encoder_self",)


class InputError(ValueError):
    """The text of a request cannot be translated or classified; the message says what to
    change."""


def check_text(text) -> str:
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


def open_explorer(export_dir: str | Path, beam_size: int | None = None,
                  alpha: float | None = None
                  ) -> Explorer | ClassifierExplorer | ExtractorExplorer:
    """The explorer of an export's kind: a ClassifierExplorer for a classifier, an
    ExtractorExplorer for an extractive summarizer, else an Explorer (which refuses a
    language model's export, naming the tool for it). The search settings are a
    translator's; given for another kind they are a ValueError."""
    manifest = open_manifest(export_dir)
    explorer = EXPLORERS.get(manifest.kind, Explorer)
    if explorer is Explorer:
        return Explorer(export_dir, beam_size, alpha, manifest)
    if beam_size is not None or alpha is not None:
        raise ValueError(f"{export_dir} holds a {kind_of(manifest).title}, which has no "
                         f"search: drop --beam and --alpha")
    return explorer(export_dir, manifest)


class Explorer:
    """Translate one sentence as `python -m export.translate` does (same Translator, beam and
    length penalty, over the onnx runtime) and add the attention weights of that sentence and
    its output, teacher-forced through attention.onnx.

    Thread-safe: the Translator and the OnnxBackend keep no per-call state (each search makes
    its own cache), onnxruntime's `run` and sentencepiece's encode/decode may be called from
    several threads, and the attention session is made once under a lock."""

    kind = "translator"

    def __init__(self, export_dir: str | Path, beam_size: int | None = None,
                 alpha: float | None = None, manifest: Manifest | None = None):
        self.manifest = manifest or open_manifest(export_dir)
        self.manifest.require_kind("translator", "the translation explorer")
        self.manifest.attention_file()  # the export's fault, reported before serving
        self.translator = open_runner(self.manifest, "onnx")
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
                                     "epsilon": translator.epsilon}}
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
        kinds = KINDS + (("copy",) if copied else ())
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


class ClassifierExplorer:
    """Classify one sentence as `python -m export.classify` does (the same Classifier over
    the onnx runtime's float32 classifier.onnx, the sentence in a batch of its own, truncated
    to max_source_length as the tool truncates by default) and add its encoder
    self-attention weights from attention.onnx.

    Thread-safe: both onnxruntime sessions are made once, before serving; onnxruntime's
    `run` and sentencepiece's encode may be called from several threads."""

    kind = "classifier"

    def __init__(self, export_dir: str | Path, manifest: Manifest | None = None):
        self.manifest = manifest or open_manifest(export_dir)
        self.manifest.require_kind("classifier", "the classifier explorer")
        self.attention = attention_runtime(self.manifest)  # names --with-attention if absent
        self.classifier = open_runner(self.manifest, "onnx")
        self.task = self.manifest.task
        model = self.manifest.model
        self.num_layers = model.get("num_encoder_layers")
        self.num_heads = model.get("num_heads")

    def info(self) -> dict:
        return {"kind": self.kind, "task": self.task, "encoder_layers": self.num_layers,
                "heads": self.num_heads, "max_source_length": self.classifier.max_source_length,
                "labels": self.classifier.labels}

    def explain(self, text: str) -> dict:
        """text -> {"label", "probability", "probabilities": {label: probability, in class
        order}, "tokens", "truncated", "attention": {"encoder_self": nested lists
        [layer][head][row][column]}}.

        `label` and `probability` are what export.classify prints for that line (it prints
        the probability with 4 decimals); `tokens` are the pieces and `</s>` the model read
        (rows and columns of the weights)."""
        text = check_text(text)
        classifier = self.classifier
        try:
            (ids,) = classifier.encode([text], truncate=True)
        except ValueError as err:  # pieces of nothing, e.g. only characters the model drops
            raise InputError(f'"text" gives no tokens for this model ({err})') from None
        truncated = len(classifier.sp.encode(text)) + 1 > len(ids)
        # Classifier.probabilities on this one sentence: a batch of its own, no padding.
        batch = classifier.batch_ids([ids])
        probabilities = np.asarray(classifier.runtime(batch), np.float32)
        [(label, probability)] = classifier.top_k(probabilities, 1)[0]
        weights = self.attention(batch)["encoder_self"][0]
        return {
            "label": label,
            "probability": probability,
            "probabilities": dict(zip(classifier.labels, map(float, probabilities[0]),
                                      strict=True)),
            "tokens": [classifier.sp.id_to_piece(int(i)) for i in ids],
            "truncated": bool(truncated),
            "attention": {"encoder_self": weights.tolist()},
        }


class ExtractorExplorer:
    """Summarize one article as `python -m export.summarize` does (the same Summarizer over
    the onnx runtime's float32 extractor.onnx and the run's selection) and return every
    sentence it read with its probability, the chosen ones marked. An extractor has no
    attention export; the page shows the sentences shaded by their probability instead.

    Thread-safe: the onnxruntime session is made once, before serving; the Summarizer's
    counts of cut articles are the only state a call changes, and none is read from it."""

    kind = "extractor"

    def __init__(self, export_dir: str | Path, manifest: Manifest | None = None):
        self.manifest = manifest or open_manifest(export_dir)
        self.manifest.require_kind("extractor", "the extractive summarizer's explorer")
        self.summarizer = open_runner(self.manifest, "onnx")
        self.task = self.manifest.task
        model = self.manifest.model
        self.num_layers = model.get("num_encoder_layers")
        self.sentence_layers = model.get("sentence_layers")
        self.num_heads = model.get("num_heads")

    def info(self) -> dict:
        return {"kind": self.kind, "task": self.task, "encoder_layers": self.num_layers,
                "sentence_layers": self.sentence_layers, "heads": self.num_heads,
                "max_source_length": self.manifest["max_source_length"],
                "max_sentences": self.summarizer.max_sentences,
                "selection": self.summarizer.selection.describe()}

    def explain(self, text: str) -> dict:
        """article -> {"summary", "sentences", "scores", "chosen", "truncated",
        "sentences_not_read"}: the sentences the model read (its first max_sentences), the
        probability of each that the summary takes it, the chosen ones (0-based, in article
        order), whether a sentence was cut to max_source_length pieces, and how many
        sentences past max_sentences were not read."""
        from keras_transformer.text.sentences import split_sentences

        text = check_text(text)
        summarizer = self.summarizer
        [article] = summarizer.prepare([text])
        sentences = split_sentences(article)
        encoded = summarizer.scorer.encode(sentences[: summarizer.max_sentences])
        if not any(encoded):
            raise InputError('"text" gives no tokens for this model; type an article')
        [extraction] = summarizer.extract([text])
        length = self.manifest["max_source_length"]
        return {
            "summary": extraction.summary,
            "sentences": extraction.sentences,
            "scores": [float(p) for p in extraction.scores],
            "chosen": extraction.chosen,
            "truncated": any(len(ids) + 1 > length for ids in encoded),
            "sentences_not_read": max(0, len(sentences) - summarizer.max_sentences),
        }


# The explorer of each kind of export that has one (a language model's has none: Explorer
# refuses it, naming the tool for it); Explorer.kind names the kind.
EXPLORERS = {cls.kind: cls for cls in (Explorer, ClassifierExplorer, ExtractorExplorer)}
