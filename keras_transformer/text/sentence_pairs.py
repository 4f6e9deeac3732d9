"""BERT's next-sentence prediction pairs: rows of two segments, A [SEP] B EOS, where B is the
sentence that follows A in its document half of the time (label 1) and a sentence drawn from
another document otherwise (label 0).

A document is a list of sentences in their order (a news article's sentences; a text file's
lines up to a blank line, as BERT's pre-training text is written). Every sentence that has a
next one in its document opens one pair; a document of one sentence opens none, but its
sentence may be drawn as another pair's B. When A and B together pass the row's length, the
longer of the two loses its last piece until they fit (BERT's `truncate_seq_pair`), so each
keeps its opening. Plain Python and NumPy, seeded: the same documents and seed give the same
rows in every run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SEP_PIECE = "[SEP]"
IS_NEXT, NOT_NEXT = 1, 0


def truncate_pair(a: list[int], b: list[int], room: int) -> tuple[list[int], list[int]]:
    """a and b cut from the end of the longer (a on a tie) until len(a) + len(b) <= room."""
    a, b = list(a), list(b)
    while len(a) + len(b) > room:
        (a if len(a) >= len(b) else b).pop()
    return a, b


def sentence_pairs(documents: Sequence[Sequence[Sequence[int]]], *, max_length: int,
                   sep_id: int, eos_id: int, seed: int) -> tuple[list[list[int]], list[int]]:
    """(rows, labels): for each sentence with a next one in its document, the row
    A + [SEP] + B + [EOS] of at most `max_length` ids and 1 when B is A's next sentence, 0
    when B is a random sentence of another document (each with probability 1/2).

    `documents`: each a list of its sentences' ids (without EOS); empty sentences are
    dropped first. A corpus with no sentence that has a next one, or whose sentences all
    sit in one document (no other document to draw from), is refused with a ValueError."""
    if max_length < 4:
        raise ValueError(f"a sentence pair needs a row of at least 4 ids (a piece of each "
                         f"sentence, [SEP] and EOS), got max_length={max_length}")
    docs = [[list(s) for s in doc if len(s)] for doc in documents]
    docs = [doc for doc in docs if doc]
    owners = np.array([d for d, doc in enumerate(docs) for _ in doc], np.int64)
    flat = [s for doc in docs for s in doc]
    if not any(len(doc) > 1 for doc in docs):
        raise ValueError("next-sentence pairs need documents of at least two sentences (a "
                         "news article's sentences; a text file's lines up to a blank line)")
    if len(docs) < 2:
        raise ValueError("next-sentence pairs need at least two documents: a random second "
                         "sentence is drawn from another document (separate a text file's "
                         "documents by blank lines)")
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for d, doc in enumerate(docs):
        for i in range(len(doc) - 1):
            if rng.random() < 0.5:
                b, label = doc[i + 1], IS_NEXT
            else:
                # A sentence of another document: draw until the owner differs (the other
                # documents hold at least one sentence, so this ends).
                while True:
                    j = int(rng.integers(len(flat)))
                    if owners[j] != d:
                        break
                b, label = flat[j], NOT_NEXT
            a, b = truncate_pair(doc[i], b, max_length - 2)
            rows.append(a + [sep_id] + b + [eos_id])
            labels.append(label)
    return rows, labels
