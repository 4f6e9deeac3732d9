"""Articles in, summaries out, over an extractive summarizer's export (manifest kind
"extractor") in any runtime: a callable over its `extract` graph (export.runtime.load_backend
gives one per runtime) scores the sentences, keras_transformer.text.extractive reads the
articles and picks them. `onnx` and `tflite` need only NumPy, sentencepiece and their own runtime
package."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from keras_transformer.text.extractive import Extraction, Selection, SentenceScorer

from ...common import Manifest
from ...runtime.base import load_sentencepiece


class Summarizer:
    """Articles -> extractive summaries over one runtime of an extractor export: the
    export's SentenceScorer (its K, max_source_length and tokenizer), and the selection the
    run chose on dev unless another is given."""

    def __init__(self, manifest: Manifest, runtime: Callable):
        manifest.require_kind("extractor", "a Summarizer")
        self.manifest = manifest
        self.max_sentences = manifest["max_sentences"]
        self.selection = Selection.from_dict(manifest["selection"])
        sp = load_sentencepiece(manifest.file(manifest["tokenizer"]["source"]))
        ids = manifest.special_ids
        self.scorer = SentenceScorer(runtime, lambda texts: sp.encode(texts, out_type=int),
                                     max_sentences=self.max_sentences,
                                     max_length=manifest["max_source_length"],
                                     pad_id=ids["pad"], eos_id=ids["eos"],
                                     lowercase=manifest.data.get("lowercase", False))
        self.word_joints = manifest.data.get("word_joints", "keep")

    def prepare(self, articles: Sequence[str]) -> list[str]:
        """Articles as the run's data read them: VNDS's "_" word joints kept, or split into
        spaces when the run trained on plain syllables (data.word_joints split)."""
        if self.word_joints == "split":
            return [a.replace("_", " ") for a in articles]
        return list(articles)

    def extract(self, articles: Sequence[str], selection: Selection | None = None,
                batch_size: int = 32) -> list[Extraction]:
        """Every article's sentences read, their probabilities and the chosen ones."""
        selection = (selection or self.selection).check(self.max_sentences)
        return self.scorer.extract(self.prepare(articles), selection, batch_size)
