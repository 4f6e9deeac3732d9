"""`search`: greedy or beam search, as `SearchSettings` picks it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .beam import beam_search
from .greedy import greedy_search
from .settings import SearchSettings
from .stepper import SearchResult, Stepper


def search(stepper: Stepper, batch_size: int, settings: SearchSettings, *, bos_id: int,
           eos_id: int, pad_id: int = 0,
           row_limits: Sequence[int] | None = None) -> SearchResult:
    """:func:`greedy_search` when ``settings.beam_size`` is 1, else :func:`beam_search` (the
    stepper then holds ``batch_size * beam_size`` rows), for at most ``settings.max_length``
    tokens, which must be set (keras_transformer.generation.search_ids sets it from the
    sources). ``row_limits`` gives each source its own most tokens instead (at most
    ``settings.max_length``): each source's result is then the one it gets searched alone
    with that limit."""
    if not isinstance(settings, SearchSettings):
        raise TypeError(f"settings must be a SearchSettings, got {type(settings).__name__}")
    if settings.max_length is None:
        raise ValueError("settings.max_length is None; set it to the most tokens to generate")
    max_length = settings.max_length
    if row_limits is not None:
        max_length = np.asarray(row_limits)
        if max_length.size and max_length.max() > settings.max_length:
            raise ValueError(f"row_limits go up to {max_length.max()}, more than settings."
                             f"max_length={settings.max_length}")
    common = dict(bos_id=bos_id, eos_id=eos_id, max_length=max_length, pad_id=pad_id,
                  **settings.constraints)
    if settings.beam_size == 1:
        return greedy_search(stepper.step, batch_size, **common)
    return beam_search(stepper.step, stepper.reorder, batch_size, beam_size=settings.beam_size,
                       alpha=settings.alpha, **common)
