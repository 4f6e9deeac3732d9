"""`search`: greedy or beam search, as `SearchSettings` picks it."""

from __future__ import annotations

from .beam import beam_search
from .greedy import greedy_search
from .settings import SearchSettings
from .stepper import SearchResult, Stepper


def search(stepper: Stepper, batch_size: int, settings: SearchSettings, *, bos_id: int,
           eos_id: int, pad_id: int = 0) -> SearchResult:
    """:func:`greedy_search` when ``settings.beam_size`` is 1, else :func:`beam_search` (the
    stepper then holds ``batch_size * beam_size`` rows), for at most ``settings.max_length``
    tokens, which must be set (keras_transformer.generation.search_ids sets it from the
    sources)."""
    if not isinstance(settings, SearchSettings):
        raise TypeError(f"settings must be a SearchSettings, got {type(settings).__name__}")
    if settings.max_length is None:
        raise ValueError("settings.max_length is None; set it to the most tokens to generate")
    common = dict(bos_id=bos_id, eos_id=eos_id, max_length=settings.max_length, pad_id=pad_id,
                  **settings.constraints)
    if settings.beam_size == 1:
        return greedy_search(stepper.step, batch_size, **common)
    return beam_search(stepper.step, stepper.reorder, batch_size, beam_size=settings.beam_size,
                       alpha=settings.alpha, **common)
