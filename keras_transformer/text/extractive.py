"""Articles to the extractive summarizer's sentence grid, and its scores to a summary, in
NumPy and plain Python (shared by training, train.evaluate and every export runtime).

An article is cut into sentences (`split_sentences`); its first K are the model's input, each
its first S - 1 pieces + EOS (`article_ids`). The model scores them; `select` picks the
summary's sentences by a `Selection`: the k best, or the best until a length budget in
syllables is met, optionally skipping a sentence that repeats a trigram of one already
chosen; the summary is the chosen sentences in article order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from keras_transformer.text.ranking import by_probability
from keras_transformer.text.sentences import VietnameseRougeTokenizer, split_sentences, syllables


@dataclass(frozen=True)
class Selection:
    """How a summary is picked from sentence scores: `sentences` (k, the k best) or
    `syllables` (a length budget: the best sentences until their syllables reach it, so the
    last one may pass it), exactly one of them above 0; `trigram_blocking` skips a sentence
    that shares a word trigram (ROUGE tokens) with a sentence already chosen."""

    sentences: int = 0
    syllables: int = 0
    trigram_blocking: bool = False

    def check(self, max_sentences: int) -> Selection:
        """Itself, or a ValueError saying what to fix: k from 1 to the model's K, or a
        budget of at least 1 syllable, not both."""
        if (self.sentences > 0) == (self.syllables > 0) or min(self.sentences,
                                                               self.syllables) < 0:
            raise ValueError(f"a selection takes k sentences (1 to {max_sentences}) or a budget "
                             f"of syllables (at least 1), exactly one; got k={self.sentences}, "
                             f"syllables={self.syllables}")
        if self.sentences > max_sentences:
            raise ValueError(f"k={self.sentences} sentences is more than the model reads "
                             f"({max_sentences} per article); choose 1 to {max_sentences}")
        return self

    def describe(self) -> str:
        what = (f"the {self.sentences} best sentences" if self.sentences else
                f"the best sentences up to {self.syllables} syllables")
        return what + (", trigram blocking" if self.trigram_blocking else "")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Selection:
        """A selection from `to_dict`'s output; ValueError for anything else."""
        try:
            selection = cls(int(values["sentences"]), int(values["syllables"]),
                            bool(values["trigram_blocking"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a selection (sentences, syllables, trigram_blocking): "
                             f"{str(values)[:200]}") from err
        return selection


SELECTION_FILE = "selection.json"  # an extractive run's selection, chosen on dev


def read_selection(run: str | Path, max_sentences: int) -> Selection:
    """The selection an extractive run chose on dev (<run>/selection.json), checked against
    the model's K; FileNotFoundError or ValueError naming the file."""
    path = Path(run) / SELECTION_FILE
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found: is {run} a finished extractive "
                                f"summarization run?") from None
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} is unreadable ({err})") from err
    try:
        return Selection.from_dict(values).check(max_sentences)
    except (ValueError, AttributeError) as err:
        raise ValueError(f"{path}: {err}") from err


def article_sentences(article: str, max_sentences: int) -> list[str]:
    """The article's first `max_sentences` sentences (split_sentences); a text without
    sentence-ending punctuation is one sentence."""
    return split_sentences(article)[:max_sentences]


def encode_sentences(sentences: Sequence[str], encode: Callable[[list[str]], list[list[int]]],
                     max_length: int, eos_id: int) -> tuple[list[list[int]], int]:
    """Sentences -> (id lists of their first max_length - 1 pieces + EOS, how many were
    cut)."""
    rows, cut = [], 0
    for ids in encode(list(sentences)):
        cut += len(ids) + 1 > max_length
        rows.append(list(ids[: max_length - 1]) + [eos_id])
    return rows, cut


def article_ids(articles: Sequence[Sequence[Sequence[int]]], pad_id: int,
                sentences: int | None = None, length: int | None = None) -> np.ndarray:
    """Articles (each a list of sentence id lists) -> (B, K, S) int32, right-padded with PAD:
    K and S the most sentences and the longest sentence in the batch, or the given sizes."""
    sentences = sentences or max(max(len(a) for a in articles), 1)
    length = length or max((len(s) for a in articles for s in a), default=1)
    ids = np.full((len(articles), sentences, length), pad_id, np.int32)
    for row, article in enumerate(articles):
        for k, tokens in enumerate(article[:sentences]):
            ids[row, k, : len(tokens)] = tokens[:length]
    return ids


def _trigrams(sentence: str) -> set[tuple[str, ...]]:
    words = VietnameseRougeTokenizer().tokenize(sentence)
    return set(zip(words, words[1:], words[2:], strict=False))


def select(scores: Sequence[float], sentences: Sequence[str], selection: Selection) -> list[int]:
    """The indices (ascending, so in article order) of the sentences `selection` picks by
    `scores` (one per sentence, taken in the order of text/ranking.py: ties go to the
    earlier sentence). At least one sentence is chosen from a non-empty article."""
    scores = np.asarray(scores, np.float64)[: len(sentences)]
    chosen, total, seen = [], 0, set()
    for i in by_probability(scores):
        grams = _trigrams(sentences[i]) if selection.trigram_blocking else set()
        if grams & seen:
            continue
        chosen.append(int(i))
        seen |= grams
        total += syllables(sentences[i])
        if len(chosen) == selection.sentences or (selection.syllables
                                                  and total >= selection.syllables):
            break
    return sorted(chosen)


def summary(sentences: Sequence[str], chosen: Sequence[int]) -> str:
    """The chosen sentences joined in article order."""
    return " ".join(sentences[i] for i in sorted(chosen))


# The selections compared on dev when the run fixes none: k of 1 to 4, and length budgets
# around the summaries' own length (VNDS: a median of 36 syllables), each with and without
# trigram blocking.
SELECTION_SENTENCES = (1, 2, 3, 4)
SELECTION_SYLLABLES = (20, 30, 40, 50, 60, 80)


def candidate_selections(max_sentences: int, blocking: Sequence[bool] = (False, True)
                         ) -> list[Selection]:
    """Every selection of the grid above that the model's K allows."""
    return ([Selection(sentences=k, trigram_blocking=b) for k in SELECTION_SENTENCES
             if k <= max_sentences for b in blocking]
            + [Selection(syllables=n, trigram_blocking=b) for n in SELECTION_SYLLABLES
               for b in blocking])


@dataclass
class Extraction:
    """What the summarizer made of one article: the sentences it read (the first K), the
    probability it gives each that the summary takes it, and the chosen ones (ascending)."""

    sentences: list[str]
    scores: np.ndarray
    chosen: list[int]

    @property
    def summary(self) -> str:
        return summary(self.sentences, self.chosen)


class SentenceScorer:
    """Articles -> sentence probabilities over any runtime of the extractive model: `run`
    maps ids (B,K,S) int32 (article_ids) to probabilities (B,K) float32. Articles are read
    as in training (their first `max_sentences` sentences, each its first max_length - 1
    pieces + EOS) and run in batches of similar sentence counts; `lowercase`: the model reads
    each sentence lower-cased (a run fine-tuned from a lower-cased pre-training), while the
    summary keeps the article's own case. `cut_articles` and `cut_sentences` count, over the
    calls so far, the articles with more sentences than it reads and the sentences cut to
    max_length."""

    def __init__(self, run: Callable[[np.ndarray], np.ndarray],
                 encode: Callable[[list[str]], list[list[int]]], *, max_sentences: int,
                 max_length: int, pad_id: int, eos_id: int, lowercase: bool = False):
        self.run = run
        self.encode = (lambda texts: encode([t.lower() for t in texts])) if lowercase else encode
        self.max_sentences, self.max_length = max_sentences, max_length
        self.pad_id, self.eos_id = pad_id, eos_id
        self.cut_articles = self.cut_sentences = 0

    def encode_articles(self, articles: Sequence[str]) -> tuple[list[list[str]],
                                                                  list[list[list[int]]]]:
        """(each article's sentences read, their id lists). A blank article is a ValueError
        naming it (1-based): there is no sentence to choose."""
        sentences = []
        for number, article in enumerate(articles, start=1):
            if not article.strip():
                raise ValueError(f"article {number} is empty or only whitespace; give every "
                                 f"article text to summarize")
            sentences.append(article_sentences(article, self.max_sentences))
            self.cut_articles += len(split_sentences(article)) > self.max_sentences
        flat, cut = encode_sentences([s for a in sentences for s in a], self.encode,
                                     self.max_length, self.eos_id)
        self.cut_sentences += cut
        encoded, start = [], 0
        for article in sentences:
            encoded.append(flat[start: start + len(article)])
            start += len(article)
        return sentences, encoded

    def score(self, articles: Sequence[str], batch_size: int = 32
              ) -> list[tuple[list[str], np.ndarray]]:
        """Per article, in input order: (its sentences read, their probabilities)."""
        sentences, encoded = self.encode_articles(articles)
        scores: list[np.ndarray | None] = [None] * len(encoded)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), batch_size):
            rows = order[start: start + batch_size]
            ids = article_ids([encoded[i] for i in rows], self.pad_id)
            probabilities = np.asarray(self.run(ids), np.float32)
            for row, i in enumerate(rows):
                scores[i] = probabilities[row, : len(encoded[i])]
        return list(zip(sentences, scores, strict=True))

    def extract(self, articles: Sequence[str], selection: Selection,
                batch_size: int = 32) -> list[Extraction]:
        """Every article's sentences, scores and the sentences `selection` picks."""
        return [Extraction(sentences, scores, select(scores, sentences, selection))
                for sentences, scores in self.score(articles, batch_size)]
