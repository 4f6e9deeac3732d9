"""Bottom-up summarization (Gehrmann, Deng and Rush 2018): a content selector gives each
piece of the article the copy model reads a probability of being worth copying, and at
inference the copy model attends only to the pieces selected (probability >= epsilon).

The selection restricts the memory mask (generation.Backend.restrict), so every decoder
layer's cross-attention, and with it the copy distribution (the last layer's), is
renormalized over the selected pieces; the copy model is trained as usual and every runtime
runs it unchanged. The article's EOS stays selected: every source the model was trained on
ends with it. An article where no piece reaches epsilon is read whole, as without a
selector (counted in `BottomUpStats.unselected`).

The selector is sentence-level or word-level (`level`). Sentence-level, the extractive model:
a piece's probability is its sentence's. Two choices beside epsilon, for dev comparisons: the
selector's k most probable sentences instead of a threshold (`top_k`), and the kept sentences
alone as the source (`source="extract"`: extract then abstract, in article order, so that a
sentence past the copy model's max_source_length pieces can be read) instead of the article
with the others masked. Word-level, the content tagger (text/word_scorer.py): a probability
for each word of the article (text/copied_spans.py: VNDS's "_" joints split), which meet the
copy model's pieces through the words whatever either model's tokenizer: a piece takes the
largest probability of the words of its whitespace token, 0 for words the selector did not
read; the same epsilon mask, and neither top_k nor extract. NumPy and plain Python, so the
export runtimes use it too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from keras_transformer.text.copied_spans import token_maxima, word_counts
from keras_transformer.text.ranking import by_probability
from keras_transformer.text.sentences import split_sentences
from keras_transformer.text.sources import warn_truncated

EOS_SENTENCE = -1  # the sentence index of the source's EOS
SOURCES = ("mask", "extract")  # what the copy model reads: BottomUpSummarizer.source
LEVELS = ("sentence", "word")  # what the selector gives a probability: BottomUpSummarizer.level


def check_epsilon(epsilon) -> float:
    """epsilon as a float, or a ValueError saying what to give: a number from 0 to 1."""
    if isinstance(epsilon, bool):
        epsilon = None
    try:
        value = float(epsilon)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"epsilon must be a number from 0 to 1 (the selector's probability a "
                         f"piece needs to be copied from), got {epsilon!r}")
    return value


def sentence_pieces(sentences: Sequence[str], encode: Callable[[list[str]], list[list[int]]],
                    max_length: int, eos_id: int) -> tuple[list[int], list[int]]:
    """An article's sentences -> (the copy model's source: the pieces of each sentence in
    turn, cut to max_length - 1, + EOS; the index of each piece's sentence, EOS_SENTENCE
    for the EOS).

    SentencePiece never joins pieces across a space, so this is the article's own
    encoding wherever its sentences are separated by spaces, as split_sentences leaves them.
    """
    return source_pieces(sentences, encode, max_length, eos_id)[:2]


def source_pieces(sentences: Sequence[str], encode: Callable[[list[str]], list[list[int]]],
                  max_length: int, eos_id: int) -> tuple[list[int], list[int], bool]:
    """sentence_pieces, and whether the sentences' pieces ran past max_length - 1 (cut)."""
    ids: list[int] = []
    owners: list[int] = []
    cut = False
    for index, pieces in enumerate(encode(list(sentences)) if sentences else []):
        room = max_length - 1 - len(ids)
        if len(pieces) > room:
            cut = True
            if room <= 0:
                break
        ids += list(pieces[:room])
        owners += [index] * min(len(pieces), room)
    return ids + [eos_id], owners + [EOS_SENTENCE], cut


def piece_probabilities(owners: Sequence[int], sentence_probabilities: Sequence[float]
                        ) -> np.ndarray:
    """Each piece's probability: its sentence's (0 for a sentence the selector did not read),
    1 for the EOS."""
    scores = np.asarray(sentence_probabilities, np.float64).reshape(-1)
    owners = np.asarray(owners, np.int64)
    read = (owners >= 0) & (owners < len(scores))
    out = np.zeros(len(owners), np.float64)
    out[read] = scores[owners[read]]
    out[owners == EOS_SENTENCE] = 1.0
    return out


def selection_mask(probabilities: Sequence[float], owners: Sequence[int], epsilon: float
                   ) -> tuple[np.ndarray, bool]:
    """(the pieces kept: probability >= epsilon, and the EOS; whether nothing but the EOS
    reached epsilon, in which case every piece is kept)."""
    kept = np.asarray(probabilities, np.float64) >= epsilon
    eos = np.asarray(owners) == EOS_SENTENCE
    if not kept[~eos].any():
        return np.ones(len(kept), bool), True
    return kept | eos, False


def check_top_k(top_k) -> int:
    """top_k as an int, or a ValueError saying what to give: an integer >= 0."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0 (the selector's k best sentences; "
                         f"0: those at or above epsilon), got {top_k!r}")
    return top_k


def check_source(source) -> str:
    """source, or a ValueError naming the choices."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES} (mask: the article with the other "
                         f"sentences masked; extract: the kept sentences alone), got "
                         f"{source!r}")
    return source


def check_level(level, top_k: int, source: str) -> str:
    """level, or a ValueError saying what a word-level selector takes."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS} (what the selector gives a "
                         f"probability), got {level!r}")
    if level == "word" and (top_k or source != "mask"):
        raise ValueError("a word-level selector masks the article by epsilon: give top_k 0 "
                         "and source mask (the k best and extract are sentence rules)")
    return level


def word_pieces(tokens: Sequence[str], word_probabilities: Sequence[float],
                encode: Callable[[list[str]], list[list[int]]], max_length: int, eos_id: int
                ) -> tuple[list[int], list[int], np.ndarray]:
    """The copy model's whitespace tokens of an article and a word-level selector's
    probabilities of its words (copied_spans.words; those past the end were not read) ->
    (the copy model's source: the tokens' pieces cut to max_length - 1, + EOS; each piece's
    token, EOS_SENTENCE for the EOS; each piece's probability: the largest of its token's
    words', 0 for a token of no word read, 1 for the EOS)."""
    return _word_source(tokens, word_probabilities, encode, max_length, eos_id)[:3]


def _word_source(tokens, word_probabilities, encode, max_length, eos_id):
    """word_pieces, and whether the tokens' pieces ran past max_length - 1 (cut)."""
    kept = list(tokens[: max_length - 1])  # a token is at least one piece
    ids, owners, cut = source_pieces(kept, encode, max_length, eos_id)
    return ids, owners, piece_probabilities(owners, token_maxima(
        word_probabilities, word_counts(kept))), cut or len(kept) < len(tokens)


def chosen_sentences(scores: Sequence[float], epsilon: float, top_k: int = 0) -> np.ndarray:
    """The indices, in article order, of the sentences a selector keeps: its `top_k` most
    probable when top_k > 0 (in the order of text/ranking.py: ties go to the earlier
    sentence), else those of probability >= epsilon."""
    scores = np.asarray(scores, np.float64).reshape(-1)
    if top_k:
        return np.sort(by_probability(scores)[:top_k])
    return np.flatnonzero(scores >= epsilon)


@dataclass
class BottomUpStats:
    """Over the articles summarized so far: how many, how many pieces the copy model read
    and kept, how many articles had nothing selected (read whole), and how many were cut to
    the copy model's max_source_length."""

    articles: int = 0
    pieces: int = 0
    kept: int = 0
    unselected: int = 0
    cut: int = 0

    def to_dict(self) -> dict:
        return {"articles": self.articles, "pieces": self.pieces, "kept": self.kept,
                "kept_share": round(self.kept / self.pieces, 4) if self.pieces else 0.0,
                "unselected_articles": self.unselected, "cut_articles": self.cut}


@dataclass
class BottomUpSummarizer:
    """Articles -> summaries: `score` gives each article's sentence probabilities (the
    extractive model's text.extractive.SentenceScorer.score), or with level "word" its word
    probabilities (text.word_scorer.WordScorer.score); `translator` is the copy model's
    generation.Translator (any runtime), and the copy model reads each article restricted to
    the pieces of the sentences (the words) with probability >= epsilon."""

    score: Callable[[Sequence[str]], list[tuple[list[str], np.ndarray]]]
    translator: object
    epsilon: float
    stats: BottomUpStats = field(default_factory=BottomUpStats)
    top_k: int = 0  # > 0: the k most probable sentences, whatever epsilon
    source: str = "mask"  # or "extract": the kept sentences alone, in article order
    level: str = "sentence"  # or "word": `score` gives word probabilities

    def __post_init__(self):
        self.epsilon = check_epsilon(self.epsilon)
        self.top_k = check_top_k(self.top_k)
        self.source = check_source(self.source)
        self.level = check_level(self.level, self.top_k, self.source)

    def describe(self) -> dict:
        """The selection rule, as configs and manifests write it (the level only when it is
        not the sentence level of every earlier rule)."""
        rule = {"epsilon": self.epsilon, "top_k": self.top_k, "source": self.source}
        return rule if self.level == "sentence" else {**rule, "level": self.level}

    def sources(self, articles: Sequence[str]) -> tuple[list[list[int]], list[np.ndarray],
                                                         list[np.ndarray]]:
        """(each article's source ids, its pieces' probabilities, the pieces kept)."""
        t = self.translator
        encoded, probabilities, masks, cut_lines = [], [], [], []
        for line, (article, (_, scores)) in enumerate(
                zip(articles, self.score(articles), strict=True), 1):
            if self.level == "word":
                ids, owners, scored, cut = _word_source(article.split(), scores, t.pieces,
                                                        t.max_source_length, t.eos_id)
                mask, unselected = selection_mask(scored, owners, self.epsilon)
            else:
                ids, owners, mask, unselected, cut = self._source(split_sentences(article),
                                                                  scores)
                scored = piece_probabilities(owners, scores)
            encoded.append(ids)
            probabilities.append(scored)
            masks.append(mask)
            cut_lines += [line] * cut
            self.stats.articles += 1
            self.stats.pieces += len(ids)
            self.stats.kept += int(mask.sum())
            self.stats.unselected += unselected
        self.stats.cut += len(cut_lines)
        warn_truncated(cut_lines, len(articles), t.max_source_length)
        return encoded, probabilities, masks

    def _source(self, sentences: list[str], scores) -> tuple[list[int], list[int], np.ndarray,
                                                             bool, bool]:
        """One article -> (source ids, each piece's sentence, the pieces kept, whether
        nothing was selected and the article is read whole, whether the source was cut)."""
        t = self.translator
        chosen = chosen_sentences(scores, self.epsilon, self.top_k)
        if self.source == "extract" and len(chosen):
            ids, owners, cut = source_pieces([sentences[i] for i in chosen], t.pieces,
                                             t.max_source_length, t.eos_id)
            owners = [int(chosen[o]) if o != EOS_SENTENCE else o for o in owners]
            return ids, owners, np.ones(len(ids), bool), False, cut
        ids, owners, cut = source_pieces(sentences, t.pieces, t.max_source_length, t.eos_id)
        if self.source == "extract":
            return ids, owners, np.ones(len(ids), bool), True, cut
        if self.top_k:
            keep = np.isin(owners, chosen).astype(np.float64)
            mask, unselected = selection_mask(keep, owners, 1.0)
        else:
            mask, unselected = selection_mask(piece_probabilities(owners, scores), owners,
                                              self.epsilon)
        return ids, owners, mask, unselected, cut

    def summarize_ids(self, articles: Sequence[str], settings, *, batch_size: int = 32,
                      progress=None) -> list[list[int]]:
        """Articles (none blank) -> each summary's ids, in input order."""
        encoded, _, masks = self.sources(articles)
        return self.translator.search_encoded(encoded, settings,
                                              selections=[m.tolist() for m in masks],
                                              batch_size=batch_size, progress=progress)

    def summarize(self, articles: Sequence[str], settings, **kwargs) -> list[str]:
        """Articles (none blank) -> summaries, in input order."""
        rows = self.summarize_ids(articles, settings, **kwargs)
        return self.translator.decode_ids(rows) if rows else []
