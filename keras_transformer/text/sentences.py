"""Sentences and words of space-tokenized news text (VNDS), in plain Python: the sentence
split every summarization baseline and the extractive summarizer use, and the word tokens
that ROUGE scores. TF-free and free of rouge-score, so the export runtimes use them too."""

from __future__ import annotations

import re
import unicodedata

# A sentence of VNDS ends with a token of sentence-final punctuation, split off by spaces:
# ".", "!", "?" or a run of them ("...", "?!").
_SENTENCE_END = frozenset(".!?")


def split_sentences(text: str) -> list[str]:
    """Space-tokenized text -> its sentences, each ending after a token made only of ".", "!"
    and "?" (a trailing part without one is a sentence too); tokens are re-joined by one
    space."""
    sentences, current = [], []
    for token in text.split():
        current.append(token)
        if set(token) <= _SENTENCE_END:
            sentences.append(" ".join(current))
            current = []
    if current:
        sentences.append(" ".join(current))
    return sentences


def syllables(text: str) -> int:
    """The whitespace-separated tokens of `text` after VNDS's "_" word joints are split (so
    punctuation tokens count too)."""
    return len(text.replace("_", " ").split())


class VietnameseRougeTokenizer:
    """Text -> ROUGE tokens (rouge-score's tokenizer interface): NFC, lower-cased, "_" word
    joints split, every maximal run of Unicode letters and digits one token, punctuation and
    other symbols dropped. rouge-score's default tokenizer keeps only [a-z0-9], so every
    Vietnamese letter with a diacritic would vanish ("Hà_Nội" -> "h", "n", "i")."""

    _token = re.compile(r"[^\W_]+")

    def tokenize(self, text: str) -> list[str]:
        return self._token.findall(unicodedata.normalize("NFC", text).lower())
