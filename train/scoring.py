"""Scoring: which sources fit the model, decoding them, sacreBLEU's BLEU and chrF for
translations, the Lead baselines and the greedy oracle for summaries (ROUGE itself: keras_transformer.text.rouge),
perplexities for language models."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import sacrebleu

from keras_transformer.decoding import SearchSettings
from keras_transformer.file_safety import atomic_write_text
from keras_transformer.progress import progress_bar
from keras_transformer.text.rouge import ROUGE_TYPES, rouge
from keras_transformer.text.sentences import VietnameseRougeTokenizer, syllables
from keras_transformer.translator import translate

from .data import split_sentences


def bleu_chrf(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus BLEU and chrF of detokenized text, with sacreBLEU's reproducibility signatures."""
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "sacrebleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def score_translations(model, source_tok, target_tok, sources, references,
                       settings: SearchSettings, *, batch_size,
                       hypotheses_path: Path | None = None) -> dict:
    """Translate `sources` by the search of `settings`, optionally write the translations one
    per line, score them."""
    with progress_bar(total=len(sources), desc="decoding", unit="sent", leave=False) as bar:
        hypotheses = translate(model, source_tok, target_tok, sources, settings,
                               batch_size=batch_size, progress=bar)
    if hypotheses_path is not None:
        atomic_write_text(hypotheses_path, "".join(f"{h}\n" for h in hypotheses))
    return bleu_chrf(hypotheses, references)


def fitting_mask(sources, source_tok, max_source_length: int) -> list[bool]:
    """Whether each source, with its EOS, fits the model."""
    return [len(ids) + 1 <= max_source_length for ids in source_tok.encode(list(sources))]


def fitting_pairs(sources, references, source_tok, max_source_length: int):
    """The pairs whose source (with EOS) fits the model, and how many do not."""
    keep = fitting_mask(sources, source_tok, max_source_length)
    return ([s for s, k in zip(sources, keep, strict=True) if k],
            [r for r, k in zip(references, keep, strict=True) if k], keep.count(False))


def lead(article: str, sentences: int) -> str:
    """The article's first `sentences` sentences (train.data.split_sentences)."""
    return " ".join(split_sentences(article)[:sentences])


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(zip(*(tokens[i:] for i in range(n)), strict=False))


def _f1(hypothesis: Counter, reference: Counter) -> float:
    """ROUGE-N F1 of two n-gram counts, as rouge-score computes it (0 without overlap)."""
    overlap = sum((hypothesis & reference).values())
    if not overlap:
        return 0.0
    precision, recall = overlap / sum(hypothesis.values()), overlap / sum(reference.values())
    return 2 * precision * recall / (precision + recall)


ORACLE_SENTENCES = 3  # the greedy oracle's most sentences


def oracle(sentences: list[str], reference: str, limit: int = ORACLE_SENTENCES) -> list[int]:
    """The greedy oracle: the indices (ascending) of the sentences whose text, joined in
    article order, scores best against `reference`. From none, it adds the sentence that most
    raises ROUGE-1 F1 + ROUGE-2 F1 (the project's Vietnamese ROUGE tokens), stops when none
    raises it or `limit` are chosen; ties go to the earlier sentence. Empty when no sentence
    shares a word with the reference."""
    tokenize = VietnameseRougeTokenizer().tokenize
    words = [tokenize(s) for s in sentences]
    reference_words = tokenize(reference)
    target = (_ngrams(reference_words, 1), _ngrams(reference_words, 2))
    chosen: list[int] = []
    best = 0.0
    while len(chosen) < limit:
        gains = []
        for i in range(len(sentences)):
            if i in chosen:
                continue
            joined = [w for j in sorted([*chosen, i]) for w in words[j]]
            gains.append((_f1(_ngrams(joined, 1), target[0])
                          + _f1(_ngrams(joined, 2), target[1]), -i))
        if not gains or max(gains)[0] <= best:
            break
        best, i = max(gains)
        chosen.append(-i)
    return sorted(chosen)


LEADS = {"lead1": 1, "lead2": 2, "lead3": 3}


def lead_baselines(articles, references) -> dict:
    """{"lead1": ROUGE F1s, "lead2": ..., "lead3": ..., "oracle": ...}: the articles' first 1,
    2 and 3 sentences, and the greedy oracle's sentences (`oracle`), in article order."""
    summaries = {name: [lead(a, n) for a in articles] for name, n in LEADS.items()}
    summaries["oracle"] = []
    for article, reference in zip(articles, references, strict=True):
        sentences = split_sentences(article)
        summaries["oracle"].append(" ".join(sentences[i] for i in oracle(sentences, reference)))
    return {name: {k: v for k, v in rouge(texts, references).items() if k in ROUGE_TYPES}
            for name, texts in summaries.items()}


def syllables_and_characters(texts) -> tuple[int, int]:
    """(syllables, characters) of `texts`: syllables are the whitespace-separated tokens after
    VNDS's "_" word joints are split (so punctuation tokens count too); characters are
    Unicode code points, spaces included, as the texts are given."""
    return sum(map(syllables, texts)), sum(len(text) for text in texts)


def perplexities(nll: float, tokens: int, syllables: int, characters: int) -> dict:
    """A language model's scores from one summed negative log-likelihood `nll` (nats, over
    `tokens` predicted tokens: every piece and each text's EOS): perplexity per token
    exp(nll / tokens), per syllable exp(nll / syllables), and bits per character
    nll / (characters ln 2)."""
    if min(tokens, syllables, characters) < 1:
        raise ValueError(f"perplexities need tokens, syllables and characters >= 1, got "
                         f"{tokens}, {syllables}, {characters}")
    return {"perplexity_token": math.exp(nll / tokens),
            "perplexity_syllable": math.exp(nll / syllables),
            "bits_per_character": nll / (characters * math.log(2)),
            "nll": nll, "tokens": tokens, "syllables": syllables, "characters": characters}


def per_class_f1(gold: np.ndarray, predicted: np.ndarray, num_classes: int) -> np.ndarray:
    """(num_classes,) F1 of each class id (a fraction) from (N,) int gold and predicted ids:
    2PR / (P + R) over the sentences labeled or predicted c, 0 when no prediction of c is
    right, NaN for a class in neither. Counted with bincount: class_bias calls it for every
    offset it tries."""
    right = np.bincount(gold[gold == predicted], minlength=num_classes)
    labeled = np.bincount(gold, minlength=num_classes)
    chosen = np.bincount(predicted, minlength=num_classes)
    # 2PR/(P+R) with P = right/chosen and R = right/labeled, without dividing by zero.
    total = labeled + chosen
    return np.where(total > 0, 2 * right / np.maximum(total, 1), np.nan)


def classification_scores(gold, predicted, names) -> dict:
    """Accuracy, per-class F1 and macro-F1 (percent, 2 decimals) of class ids.

    F1 of class c is 2PR / (P + R) over the sentences labeled or predicted c (0 when no
    prediction of c is right). The macro-F1 averages it over the classes that occur in the
    gold labels or the predictions, as scikit-learn's f1_score(average="macro") does; `f1`
    gives every class of `names`, those that occur in neither as null."""
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    if gold.shape != predicted.shape or gold.ndim != 1 or not len(gold):
        raise ValueError(f"gold and predicted labels must be two equally long non-empty lists, "
                         f"got shapes {gold.shape} and {predicted.shape}")
    scores = per_class_f1(gold.astype(np.int64), predicted.astype(np.int64), len(names))
    f1 = {name: None if np.isnan(v) else float(v) for name, v in zip(names, scores, strict=True)}
    present = [v for v in f1.values() if v is not None]
    return {"accuracy": round(100 * float(np.mean(gold == predicted)), 2),
            "macro_f1": round(100 * sum(present) / len(present), 2),
            "f1": {name: None if v is None else round(100 * v, 2) for name, v in f1.items()}}
