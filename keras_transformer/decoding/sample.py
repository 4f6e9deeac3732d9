"""Continuing prompts by sampling (or greedily): the search of language models."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .constraints import _check_constraints, _constrain
from .sampling import sample_logits
from .stepper import StepFn, _call_step


def sample_search(
    step: StepFn,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    eos_id: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = 0,
    pad_id: int = 0,
    no_repeat_ngram_size: int = 0,
    min_length: int = 0,
) -> list[list[int]]:
    """Continue every prompt by up to ``max_new_tokens`` tokens, sampled by
    :func:`sample_logits` (greedy when ``temperature`` is 0); -> the new tokens of every
    prompt, up to and including its first EOS.

    ``step`` sees every row at every position from 0 on (the stepper needs a cache of
    ``longest prompt + max_new_tokens - 1`` slots): a row still reading its prompt is fed its
    next prompt token, whatever was sampled; a finished row is fed ``pad_id``. The search
    stops once every row has produced EOS. ``seed`` seeds ``np.random.default_rng``, so a seed
    reproduces its samples.

    ``no_repeat_ngram_size`` and ``min_length`` (module docstring) apply to the new tokens of
    every row, which are all its history: the prompt is neither searched for n-grams nor
    counted. The filters of :func:`sample_logits` apply to the constrained logits. With either
    constraint on, ``eos_id`` must be in the vocabulary.
    """
    if not len(prompts) or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (e.g. the BOS id)")
    if isinstance(max_new_tokens, bool) or int(max_new_tokens) != max_new_tokens \
            or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    max_new_tokens = int(max_new_tokens)
    no_repeat_ngram_size, min_length = _check_constraints(no_repeat_ngram_size, min_length)
    constrained = bool(no_repeat_ngram_size or min_length)
    rng = np.random.default_rng(seed)
    batch = len(prompts)
    lengths = np.array([len(p) for p in prompts])
    total = int(lengths.max()) + max_new_tokens
    buffer = np.full((batch, total), pad_id, np.int32)
    for row, prompt in enumerate(prompts):
        buffer[row, : len(prompt)] = prompt
    finished = np.zeros(batch, bool)
    if constrained:
        # Every row's new tokens, left-aligned: the history the constraints look at.
        generated = np.full((batch, total), pad_id, np.int32)
        n_generated = np.zeros(batch, np.int64)
    vocab = None
    for index in range(total - 1):
        logits, _ = _call_step(step, buffer[:, index], index, batch, vocab,
                               eos_id if constrained else None)
        vocab = logits.shape[1]
        dead = None
        if constrained:
            logits, dead = _constrain(logits, generated[:, : n_generated.max()], n_generated,
                                      no_repeat_ngram_size=no_repeat_ngram_size,
                                      min_length=min_length, eos_id=eos_id)
        chosen = sample_logits(logits, rng, temperature=temperature, top_k=top_k, top_p=top_p)
        if dead is not None:
            chosen[dead] = eos_id
        # Rows still reading their prompt are fed the prompt, not the sample.
        generating = (index + 1 >= lengths) & ~finished
        buffer[generating, index + 1] = chosen[generating]
        if constrained:
            generated[generating, n_generated[generating]] = chosen[generating]
            n_generated += generating
        finished |= generating & (chosen == eos_id)
        if finished.all():
            break
    outputs = []
    for row, prompt in enumerate(prompts):
        new = buffer[row, len(prompt): len(prompt) + max_new_tokens].tolist()
        if eos_id in new:
            new = new[: new.index(eos_id) + 1]
        outputs.append(new)
    return outputs
