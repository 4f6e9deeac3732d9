"""Scoring: which sources fit the model, decoding them, sacreBLEU's BLEU and chrF for
translations, ROUGE and the Lead baselines for summaries."""

from __future__ import annotations

import re
import unicodedata
from importlib.metadata import version
from pathlib import Path

import numpy as np
import sacrebleu
from rouge_score import rouge_scorer
from tqdm import tqdm

from keras_transformer.file_safety import atomic_write_text
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


def score_translations(model, source_tok, target_tok, sources, references, *, beam_size,
                       alpha, batch_size, hypotheses_path: Path | None = None,
                       no_repeat_ngram_size: int = 0, min_length: int = 0) -> dict:
    """Translate `sources`, optionally write the translations one per line, score them."""
    with tqdm(total=len(sources), desc="decoding", unit="sent", leave=False) as bar:
        hypotheses = translate(model, source_tok, target_tok, sources, beam_size=beam_size,
                               alpha=alpha, batch_size=batch_size, progress=bar,
                               no_repeat_ngram_size=no_repeat_ngram_size,
                               min_length=min_length)
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


ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


class VietnameseRougeTokenizer:
    """Text -> ROUGE tokens (rouge-score's tokenizer interface): NFC, lower-cased, "_" word
    joints split, every maximal run of Unicode letters and digits one token, punctuation and
    other symbols dropped. rouge-score's default tokenizer keeps only [a-z0-9], so every
    Vietnamese letter with a diacritic would vanish ("Hà_Nội" -> "h", "n", "i")."""

    _token = re.compile(r"[^\W_]+")

    def tokenize(self, text: str) -> list[str]:
        return self._token.findall(unicodedata.normalize("NFC", text).lower())


ROUGE_SIGNATURE = (f"rouge-score:{version('rouge-score')}|f1:mean-over-docs|"
                   f"tok:unicode-letters-digits|nfc|lc:yes|underscore:split|punct:dropped|"
                   f"stem:no")


def rouge(hypotheses, references) -> dict:
    """ROUGE-1, ROUGE-2 and ROUGE-L F1 (x100, 2 decimals): the mean over documents of each
    document's F1, by rouge-score with VietnameseRougeTokenizer and no stemming; with the
    settings' signature."""
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
    return {**{kind: round(float(np.mean(v)) * 100, 2) for kind, v in f1.items()},
            "rouge_signature": ROUGE_SIGNATURE}


def lead(article: str, sentences: int) -> str:
    """The article's first `sentences` sentences (train.data.split_sentences)."""
    return " ".join(split_sentences(article)[:sentences])


LEADS = {"lead1": 1, "lead3": 3}


def lead_baselines(articles, references) -> dict:
    """{"lead1": ROUGE F1s, "lead3": ...} of the articles' first 1 and 3 sentences."""
    return {name: {k: v for k, v in rouge([lead(a, n) for a in articles], references).items()
                   if k in ROUGE_TYPES}
            for name, n in LEADS.items()}


def format_rouge(scores: dict) -> str:
    """"ROUGE-1 a  ROUGE-2 b  ROUGE-L c" of a dict with rouge1, rouge2 and rougeL."""
    return "  ".join(f"ROUGE-{k[5:]} {scores[k]:.2f}" for k in ROUGE_TYPES)


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
    f1 = {}
    for c, name in enumerate(names):
        right = int(np.sum((gold == c) & (predicted == c)))
        labeled, chosen = int(np.sum(gold == c)), int(np.sum(predicted == c))
        # 2PR/(P+R) with P = right/chosen and R = right/labeled, without dividing by zero.
        f1[name] = None if labeled + chosen == 0 else 2 * right / (labeled + chosen)
    present = [v for v in f1.values() if v is not None]
    return {"accuracy": round(100 * float(np.mean(gold == predicted)), 2),
            "macro_f1": round(100 * sum(present) / len(present), 2),
            "f1": {name: None if v is None else round(100 * v, 2) for name, v in f1.items()}}
