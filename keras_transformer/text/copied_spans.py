"""The content selector's labels (Gehrmann, Deng and Rush 2018, "Bottom-Up Abstractive
Summarization"): which words of an article a reference summary copies, as the longest spans
of the article that also appear in the reference. Plain Python and NumPy.

Words are VNDS's whitespace tokens with the "_" word joints split (`words`), so a selector and a
copy model that read the article with or without its joints meet on the same units. Words are
compared case-insensitively after NFC normalization (ROUGE's tokenizer does the same), so that
a summary's capitalized first word still matches the article's.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np


def words(text: str) -> list[str]:
    """VNDS text -> its words: the whitespace tokens once every "_" word joint is a space
    (punctuation tokens are words too)."""
    return text.replace("_", " ").split()


def word_counts(tokens: Sequence[str]) -> list[int]:
    """The words (`words`) of each whitespace token: 1 for a syllable, 2 for "lái_xe", 0 for
    a token made of "_" only."""
    return [len(words(token)) for token in tokens]


def token_maxima(values: Sequence[float], counts: Sequence[int]) -> np.ndarray:
    """Values of words -> values of the tokens holding them (`counts`: each token's words, in
    order, as word_counts gives them): each token's largest, 0 for a token of no word or
    whose words lie past the end of `values` (words not read)."""
    values = np.asarray(values, np.float64).reshape(-1)
    ends = np.cumsum(np.asarray(counts, np.int64))
    out = np.zeros(len(ends), np.float64)
    for token, (end, count) in enumerate(zip(ends, counts, strict=True)):
        start = end - count
        if count and start < len(values):
            out[token] = values[start:end].max()
    return out


def _key(word: str) -> str:
    return unicodedata.normalize("NFC", word).lower()


def _substring_automaton(sequence: Sequence[str]) -> list[dict[str, int]]:
    """The transitions of the suffix automaton of `sequence`: every path from state 0 spells a
    contiguous run of `sequence` and every run is such a path. O(len) states, built in
    amortized O(len) (Blumer et al. 1985)."""
    edges: list[dict[str, int]] = [{}]
    link, length, last = [-1], [0], 0
    for word in sequence:
        current = len(edges)
        edges.append({})
        length.append(length[last] + 1)
        link.append(0)
        state = last
        while state != -1 and word not in edges[state]:
            edges[state][word] = current
            state = link[state]
        if state != -1:
            target = edges[state][word]
            if length[state] + 1 == length[target]:
                link[current] = target
            else:
                clone = len(edges)
                edges.append(dict(edges[target]))
                length.append(length[state] + 1)
                link.append(link[target])
                while state != -1 and edges[state].get(word) == target:
                    edges[state][word] = clone
                    state = link[state]
                link[target] = link[current] = clone
        last = current
    return edges


def content_labels(article: str, summary: str, max_words: int | None = None) -> np.ndarray:
    """(len(words(article)),) int8, or the first `max_words` of them (those a selector
    reads): 1 where the summary copies the article's word as part of a longest copied span,
    else 0.

    The rule, as Gehrmann et al.'s released preprocessing makes it operational: the article is
    cut left to right into maximal spans, each the longest run of words from its start that
    also appears, contiguously, in the summary (a word the summary lacks is a span of its own,
    labelled 0); a span's words are 1 at the first place the article has that span and 0 where
    it repeats, so that a word copied once ("the", a comma) is not selected all over the
    article. Unlike their script, a span may end at the article's last word.

    The labels of the first `max_words` words are those of the whole article: the spans
    that start before them are found whole, and no later span can change them.

    An empty article gives an empty array; a summary that copies no word, all zeros.
    Cost: O(len(article) + len(summary)) dictionary steps: a suffix automaton of the summary,
    then one walk over the article in which each word is read once, plus once per span for
    the step that ends it."""
    target = [_key(w) for w in words(summary)]
    source = words(article)
    if max_words is not None:
        # A span that starts before max_words is at most as long as the summary.
        source = source[: max_words + len(target)]
    source = [_key(w) for w in source]
    edges = _substring_automaton(target)
    stop = len(source) if max_words is None else min(max_words, len(source))
    labels = np.zeros(len(source), np.int8)
    seen: set[tuple[str, ...]] = set()
    start = 0
    while start < stop:
        state, end = 0, start
        while end < len(source) and source[end] in edges[state]:
            state = edges[state][source[end]]
            end += 1
        if end == start:  # not in the summary
            start += 1
            continue
        span = tuple(source[start:end])
        if span not in seen:
            seen.add(span)
            labels[start:end] = 1
        start = end
    return labels[:stop]
