"""Search algorithms for autoregressive decoding, in NumPy only.

This package imports nothing but NumPy and the standard library, so the same code runs in the
training package and in a deployment runtime without TensorFlow or Keras.

The searches never see the model. They drive a *stepper* through two callables:

``step(tokens, index) -> logits``
    ``tokens`` is an ``int32`` array of shape ``(n,)`` holding the previous token of every row,
    ``index`` is its decoder position (index 0 is the BOS token). Returns the logits for the
    next token, a float array of shape ``(n, vocab)``. The stepper keeps its own key/value cache.
    It may instead return ``(logits, log_normalizer)``, the second being ``logsumexp(logits)``
    per row ``(n,)`` computed by the runtime; the search then skips its own.

``reorder(indices) -> None``
    Beam search only. After choosing which beams survive it passes the ``int32`` parent row of
    every new row; the stepper must gather its cache rows (``cache = cache[indices]``). Rows are
    laid out ``b * beam_size + k`` (source ``b``, beam ``k``), so the stepper must have been
    tiled to ``batch_size * beam_size`` rows before the search starts.

:class:`Stepper` names the pair as one object. :class:`SearchSettings` holds the options of a
search, validated once; :func:`search` picks greedy or beam search by its beam size;
:func:`sample_search` continues prompts by sampling (or greedily).

Every search takes two constraints on what it generates, both off by default (0), and then
costs nothing:

``no_repeat_ngram_size=n``
    No n-gram occurs twice among a row's generated tokens (BOS and prompts are not part of
    them). At each step the tokens that would complete an n-gram already generated in that
    row are banned; in beam search the row is a beam, with its own history.
``min_length=m``
    EOS is banned while fewer than ``m`` tokens have been generated, so every output has at
    least ``m`` tokens before its EOS, with two exceptions: an output cut by ``max_length``
    (``max_length`` tokens, no EOS; fewer than ``m`` if ``max_length < m``) and a row left
    with no allowed token (below).

A banned token's log-probability becomes ``-inf`` *after* the log-softmax: the other tokens
are not renormalised, so scores stay log-probabilities under the model (and a runtime's
log-normalizer stays valid). A row left with no token of nonzero probability (every token
banned, or only tokens the model gives probability zero left) produces EOS, scored with the
model's log-probability of EOS, whatever the constraints.

Modules: ``settings`` (SearchSettings), ``stepper`` (the stepper, SearchResult), ``numerics``
(log-probabilities, top-candidate selection), ``sampling`` (sample_logits and its filters),
``constraints``, ``greedy``, ``beam``, ``dispatch`` (search) and ``sample`` (sample_search).

Beam search follows the "2K candidates" scheme of tensor2tensor / Hugging Face with Hugging
Face's default stopping heuristic; with ``beam_size=1`` it returns exactly the greedy tokens.
"""

from .beam import beam_search
from .dispatch import search
from .greedy import greedy_search
from .numerics import length_penalty, log_softmax
from .sample import sample_search
from .sampling import filter_top_k, filter_top_p, sample_logits
from .settings import SearchSettings
from .stepper import ReorderFn, SearchResult, StepFn, Stepper

__all__ = [
    "SearchResult",
    "SearchSettings",
    "StepFn",
    "ReorderFn",
    "Stepper",
    "beam_search",
    "filter_top_k",
    "filter_top_p",
    "greedy_search",
    "length_penalty",
    "log_softmax",
    "sample_logits",
    "sample_search",
    "search",
]
