"""ROUGE-1/2/L F1 of summaries with tokens that keep Vietnamese letters (rouge-score's own
tokenizer keeps only [a-z0-9]). TF-free: train.scoring and export.parity both score with it."""

from __future__ import annotations

from importlib.metadata import version

import numpy as np
from rouge_score import rouge_scorer

from keras_transformer.text.sentences import VietnameseRougeTokenizer

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")

ROUGE_SIGNATURE = (f"rouge-score:{version('rouge-score')}|f1:mean-over-docs|"
                   f"tok:unicode-letters-digits|nfc|lc:yes|underscore:split|punct:dropped|"
                   f"stem:no")


def rouge(hypotheses, references) -> dict:
    """ROUGE-1, ROUGE-2 and ROUGE-L F1 (x100, 2 decimals): the mean over documents of each
    document's F1, by rouge-score with VietnameseRougeTokenizer and no stemming; with the
    settings' signature."""
    f1 = rouge_per_document(hypotheses, references)
    return {**{kind: round(float(np.mean(v)) * 100, 2) for kind, v in f1.items()},
            "rouge_signature": ROUGE_SIGNATURE}


def rouge_per_document(hypotheses, references) -> dict[str, np.ndarray]:
    """Each document's ROUGE-1, ROUGE-2 and ROUGE-L F1 (0 to 1), by rouge()'s settings."""
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} summaries for {len(references)} references")
    if not references:
        raise ValueError("no summaries to score")
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=False,
                                      tokenizer=VietnameseRougeTokenizer())
    f1 = {kind: [] for kind in ROUGE_TYPES}
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        scores = scorer.score(reference, hypothesis)  # (target, prediction)
        for kind in ROUGE_TYPES:
            f1[kind].append(scores[kind].fmeasure)
    return {kind: np.array(v, np.float64) for kind, v in f1.items()}


def format_rouge(scores: dict) -> str:
    """"ROUGE-1 a  ROUGE-2 b  ROUGE-L c" of a dict with rouge1, rouge2 and rougeL."""
    return "  ".join(f"ROUGE-{k[5:]} {scores[k]:.2f}" for k in ROUGE_TYPES)
