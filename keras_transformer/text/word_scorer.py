"""The token-level content selector (a TransformerTagger) on articles, in NumPy and plain
Python, for training data and inference alike: an article to the tagger's row of pieces, each
piece owned by the whitespace token it is part of, and the tagger's piece probabilities to a
probability for each word of the article (keras_transformer.text.copied_spans.words), the unit
a copy model of another tokenizer maps its own pieces to (keras_transformer.text.bottom_up).

A word's probability is the largest of its token's pieces' (a token of VNDS's joined words,
"lái_xe" read with its joints kept, gives it to each of its words): a word is kept when any of
its pieces is, since the copy model copies a word only with every piece of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from keras_transformer.text.bottom_up import EOS_SENTENCE, sentence_pieces
from keras_transformer.text.copied_spans import token_maxima, word_counts, words


@dataclass
class TaggerRow:
    """One article as the tagger reads it: `ids`, its first max_length - 1 pieces + EOS;
    `owners`, each piece's whitespace token (EOS_SENTENCE for the EOS); `counts`, the words
    of each token read; `cut`, whether some of the article's words were not read."""

    ids: list[int]
    owners: list[int]
    counts: list[int]
    cut: bool

    @property
    def words(self) -> int:
        """How many of the article's words the row reads."""
        return sum(self.counts)

    def token_values(self, word_values: Sequence[float]) -> np.ndarray:
        """Each token's largest word value (a token's label is 1 when one of its words'
        is)."""
        return token_maxima(word_values, self.counts)

    def piece_values(self, word_values: Sequence[float], eos_value: float = -1.0
                     ) -> np.ndarray:
        """Each piece's value: its token's largest word value; `eos_value` at the EOS (-1:
        left out of the tagger's loss)."""
        tokens = self.token_values(word_values)
        owners = np.asarray(self.owners, np.int64)
        return np.where(owners == EOS_SENTENCE, eos_value, tokens[np.maximum(owners, 0)])

    def word_probabilities(self, piece_probabilities: Sequence[float]) -> np.ndarray:
        """The tagger's probabilities of the row's pieces -> one for each word read: the
        largest over its token's pieces."""
        probabilities = np.asarray(piece_probabilities, np.float64).reshape(-1)
        owners = np.asarray(self.owners, np.int64)
        if len(probabilities) < len(owners):
            raise ValueError(f"{len(probabilities)} piece probabilities for a row of "
                             f"{len(owners)} pieces")
        tokens = np.zeros(len(self.counts), np.float64)
        real = owners != EOS_SENTENCE
        np.maximum.at(tokens, owners[real], probabilities[: len(owners)][real])
        return np.repeat(tokens, self.counts)


class WordScorer:
    """Articles -> each word's probability of being copied, over any runtime of the tagger:
    `run` maps ids (B,S) int32, right-padded with PAD, to probabilities (B,S). An article is
    read as in training: its whitespace tokens, each encoded alone (SentencePiece never
    joins pieces across a space, so this is the article's own encoding), the first
    max_length - 1 pieces + EOS; `lowercase`: the tagger reads lower-cased text.
    `cut_articles` counts, over the calls so far, the articles with words not read."""

    def __init__(self, run: Callable[[np.ndarray], np.ndarray],
                 encode: Callable[[list[str]], list[list[int]]], *, max_length: int,
                 pad_id: int, eos_id: int, lowercase: bool = False):
        self.run = run
        self.encode = (lambda texts: encode([t.lower() for t in texts])) if lowercase else encode
        self.max_length, self.pad_id, self.eos_id = max_length, pad_id, eos_id
        self.cut_articles = 0

    def encode_articles(self, articles: Sequence[str]) -> list[TaggerRow]:
        """Each article's TaggerRow. A blank article is a ValueError naming it (1-based)."""
        rows = []
        for number, article in enumerate(articles, start=1):
            tokens = article.split()
            if not tokens:
                raise ValueError(f"article {number} is empty or only whitespace; give every "
                                 f"article text to select from")
            # A token is at least one piece: the first max_length - 1 tokens fill the row.
            ids, owners = sentence_pieces(tokens[: self.max_length - 1], self.encode,
                                          self.max_length, self.eos_id)
            read = max(owners) + 1
            counts = word_counts(tokens[:read])
            row = TaggerRow(ids, owners, counts, sum(counts) < sum(word_counts(tokens)))
            self.cut_articles += row.cut
            rows.append(row)
        return rows

    def batch_ids(self, rows: Sequence[TaggerRow]) -> np.ndarray:
        """(B, longest row) int32, right-padded with PAD."""
        ids = np.full((len(rows), max(len(r.ids) for r in rows)), self.pad_id, np.int32)
        for i, row in enumerate(rows):
            ids[i, : len(row.ids)] = row.ids
        return ids

    def score_rows(self, rows: Sequence[TaggerRow], batch_size: int = 32) -> list[np.ndarray]:
        """Each row's word probabilities (TaggerRow.word_probabilities), in input order."""
        out: list[np.ndarray] = [np.zeros(0)] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].ids))
        for start in range(0, len(order), batch_size):
            batch = order[start: start + batch_size]
            probabilities = np.asarray(self.run(self.batch_ids([rows[i] for i in batch])))
            for k, i in enumerate(batch):
                out[i] = rows[i].word_probabilities(probabilities[k])
        return out

    def score(self, articles: Sequence[str], batch_size: int = 32
              ) -> list[tuple[list[str], np.ndarray]]:
        """Per article, in input order: (the words read, their probabilities), as
        BottomUpSummarizer's word-level selector gives them."""
        rows = self.encode_articles(articles)
        return [(words(article)[: row.words], p) for article, row, p in
                zip(articles, rows, self.score_rows(rows, batch_size), strict=True)]
