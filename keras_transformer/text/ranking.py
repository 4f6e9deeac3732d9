"""The order in which a selector's sentences are taken: most probable first, probabilities
that agree to `DECIMALS` places counted equal and taken in article order.

The runtimes (Keras, ONNX, TFLite) compute a probability with float32 sums in their own
orders, so two nearly equal probabilities (a saturated selector gives many that differ in the
seventh digit) could otherwise come out in another order in another runtime, and the
summaries with them. Equal ones go to the earlier sentence, as a news article puts what
matters first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DECIMALS = 4


def by_probability(scores: Sequence[float]) -> np.ndarray:
    """Indices of `scores` (one per sentence) from the most probable to the least, those
    equal to DECIMALS places in ascending index order."""
    rounded = np.round(np.asarray(scores, np.float64).reshape(-1), DECIMALS)
    return np.argsort(-rounded, kind="stable")
