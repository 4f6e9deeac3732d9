"""A classifier's decision bias chosen on dev (eval.tune_class_bias): an offset per class
added to the logits, that is to the classification head's bias, chosen to maximise the dev
macro-F1.

Cross-entropy fits the classes' frequencies; macro-F1 weighs a rare class (UIT-VSFC's
neutral, 4% of its sentences) as much as a common one, so the argmax of a well-fitted model
predicts the rare class too seldom for it. Moving the decision threshold on held-out data
(scikit-learn's TunedThresholdClassifierCV does it for two classes) is the usual remedy.
The offsets are kept only when they also help on dev sentences they were not chosen on: the
dev split is cut in two, offsets chosen on each half are scored on the other, and the tuned
offsets (chosen on the whole split) are applied only when that held-out macro-F1 beats the
untuned one.
"""

from __future__ import annotations

import numpy as np

from .scoring import per_class_f1

# Offsets tried for each class, in logits (class 0 stays at 0: only differences matter).
GRID = np.round(np.arange(-4.0, 4.0001, 0.1), 2)
ROUNDS = 3  # coordinate ascent over the classes, this many passes


def macro_f1(gold: np.ndarray, predicted: np.ndarray, num_classes: int) -> float:
    """Macro-F1 (a fraction) over the classes in the gold labels or the predictions, as
    train.scoring.classification_scores computes it (unrounded)."""
    return float(np.nanmean(per_class_f1(gold, predicted, num_classes)))


def choose_offsets(logits: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """(N,K) logits and (N,) gold class ids -> (K,) offsets maximising the macro-F1 of
    argmax(logits + offsets): coordinate ascent over GRID, a class at a time; a change is
    taken only when it raises the macro-F1, the smallest such offset first, so ties keep
    the offsets near 0."""
    logits, gold = np.asarray(logits, np.float64), np.asarray(gold, np.int64)
    k = logits.shape[1]
    offsets = np.zeros(k)
    best = macro_f1(gold, np.argmax(logits, axis=1), k)
    by_size = GRID[np.argsort(np.abs(GRID), kind="stable")]
    for _ in range(ROUNDS):
        changed = False
        for c in range(1, k):
            trial = offsets.copy()
            for value in by_size:
                trial[c] = value
                score = macro_f1(gold, np.argmax(logits + trial, axis=1), k)
                if score > best + 1e-12:
                    best, offsets[c], changed = score, value, True
        if not changed:
            break
    return offsets


def tune(logits: np.ndarray, gold: np.ndarray) -> dict:
    """The offsets to apply to a classifier with these dev logits and labels, and why:
    {"offsets": (K,) list (zeros when not kept), "kept": bool, "dev_macro_f1_untuned",
    "dev_macro_f1_tuned" (on the whole split, where they were chosen), "held_out_untuned",
    "held_out_tuned" (each half scored with the offsets chosen on the other)}; macro-F1 in
    percent."""
    logits, gold = np.asarray(logits, np.float64), np.asarray(gold, np.int64)
    k = logits.shape[1]
    halves = [np.arange(len(gold)) % 2 == h for h in (0, 1)]
    held_untuned, held_tuned = [], []
    for train_half, test_half in (halves, halves[::-1]):
        offsets = choose_offsets(logits[train_half], gold[train_half])
        g = gold[test_half]
        held_untuned.append(macro_f1(g, np.argmax(logits[test_half], axis=1), k))
        held_tuned.append(macro_f1(g, np.argmax(logits[test_half] + offsets, axis=1), k))
    offsets = choose_offsets(logits, gold)
    kept = float(np.mean(held_tuned)) > float(np.mean(held_untuned))
    applied = offsets if kept else np.zeros(k)
    return {"offsets": [round(float(v), 2) for v in applied], "kept": kept,
            "chosen_offsets": [round(float(v), 2) for v in offsets],
            "dev_macro_f1_untuned": round(100 * macro_f1(gold, np.argmax(logits, axis=1), k), 2),
            "dev_macro_f1_tuned": round(100 * macro_f1(gold, np.argmax(logits + offsets,
                                                                       axis=1), k), 2),
            "held_out_untuned": round(100 * float(np.mean(held_untuned)), 2),
            "held_out_tuned": round(100 * float(np.mean(held_tuned)), 2)}
