"""`SearchSettings`: how a search picks its tokens, as one validated object.

The same object goes from a run's config (`from_config`) or an export's manifest
(`from_mapping`) through the command-line tools to the searches, so every option is checked
once, here, with a one-line error naming it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# (lowest, highest or None) of every option; top_p excludes its lowest. The highest values
# are what the command-line tools accept: they bound the work of one search.
BOUNDS: dict[str, tuple[float, float | None]] = {
    "beam_size": (1, 64), "alpha": (0, 10), "max_length": (1, None),
    "no_repeat_ngram_size": (0, 16), "min_length": (0, 4096),
    "temperature": (0, 100), "top_k": (0, None), "top_p": (0, 1),
    "num_samples": (1, None), "seed": (0, None),
}
# The options a sequence-to-sequence run records (its config's `eval` section, an export's
# manifest `search` block).
SEQ2SEQ_KEYS = ("beam_size", "alpha", "no_repeat_ngram_size", "min_length")
_FLOATS = ("alpha", "temperature", "top_p")
_OPTIONAL = ("max_length", "seed")  # None: max_length from the source, seed from the OS


@dataclass(frozen=True)
class SearchSettings:
    """The options of a search (keras_transformer.decoding).

    Encoder-decoder search (`decoding.search`): ``beam_size`` (1: greedy), ``alpha`` (GNMT
    length penalty exponent), ``max_length`` (generated tokens, EOS included; None: the
    default of text.sources.default_max_length for the source's length).

    Both kinds of search: ``no_repeat_ngram_size`` and ``min_length`` (the package docstring;
    0: off).

    Language models (`decoding.sample_search`): ``temperature`` (0: greedy), ``top_k`` (0:
    off), ``top_p`` (1: off), ``num_samples`` (continuations of one prompt) and ``seed`` (None:
    unseeded).
    """

    beam_size: int = 4
    alpha: float = 0.6
    max_length: int | None = None
    no_repeat_ngram_size: int = 0
    min_length: int = 0
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    num_samples: int = 1
    seed: int | None = 0

    def __post_init__(self):
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, _checked(field.name, getattr(self, field.name)))

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], where: str = "search") -> SearchSettings:
        """Settings from a mapping of option names (a manifest's block, a request); options it
        leaves out keep their defaults. ValueError for an unknown option or a bad value."""
        if not isinstance(mapping, Mapping):
            raise ValueError(f"{where} must be a mapping of search options, got "
                             f"{type(mapping).__name__}")
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(mapping) - names)
        if unknown:
            raise ValueError(f"{where}: unknown search option {unknown[0]!r}; the options are "
                             f"{', '.join(sorted(names))}")
        try:
            return cls(**mapping)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None

    @classmethod
    def from_config(cls, section, **overrides) -> SearchSettings:
        """Settings from a run config's `eval` section (an object or a mapping) holding
        SEQ2SEQ_KEYS; `overrides` (those not None) replace what it holds."""
        get = section.get if isinstance(section, Mapping) else \
            (lambda key, default: getattr(section, key, default))
        values = {key: get(key, None) for key in SEQ2SEQ_KEYS}
        return cls.from_mapping({k: v for k, v in values.items() if v is not None},
                                "eval").given(**overrides)

    @classmethod
    def for_sampling(cls, temperature=None, top_k=None, top_p=None, seed=0,
                     num_samples=1) -> SearchSettings:
        """A language model's search from its sampling options as a user gives them (None:
        not given): greedy (temperature 0) unless one of temperature, top_k and top_p is
        given; then the others default to off and temperature to 1."""
        if temperature is None and top_k is None and top_p is None:
            return cls(temperature=0.0, seed=seed, num_samples=num_samples)
        return cls(temperature=1.0 if temperature is None else temperature,
                   top_k=top_k or 0, top_p=1.0 if top_p is None else top_p, seed=seed,
                   num_samples=num_samples)

    def replace(self, **changes) -> SearchSettings:
        """A copy with `changes` (validated like the constructor's arguments)."""
        return dataclasses.replace(self, **changes)

    def given(self, **options) -> SearchSettings:
        """A copy with the `options` that are not None (a command's options given, over the
        run's settings)."""
        return self.replace(**{k: v for k, v in options.items() if v is not None})

    def to_dict(self, keys=None) -> dict[str, Any]:
        """{option: value} of `keys` (every option when None)."""
        return {key: getattr(self, key)
                for key in (keys or [f.name for f in dataclasses.fields(self)])}

    @property
    def constraints(self) -> dict[str, int]:
        """The keyword arguments of the constraints, as every search takes them."""
        return {"no_repeat_ngram_size": self.no_repeat_ngram_size,
                "min_length": self.min_length}

    @property
    def sampling(self) -> dict[str, Any]:
        """The keyword arguments of `decoding.sample_search` (constraints included)."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "seed": self.seed, **self.constraints}


def _checked(name: str, value):
    if value is None and name in _OPTIONAL:
        return None
    low, high = BOUNDS[name]
    if name in _FLOATS:
        ok = not isinstance(value, bool) and isinstance(value, numbers.Real) \
            and math.isfinite(value) and low <= value and (high is None or value <= high) \
            and (name != "top_p" or value > low)
        if not ok:
            span = "(0, 1]" if name == "top_p" else f"[{low:g}, {high:g}]"
            raise ValueError(f"{name} must be a number in {span}, got {value!r}")
        return float(value)
    ok = not isinstance(value, bool) and (
        isinstance(value, numbers.Integral)
        or (isinstance(value, numbers.Real) and math.isfinite(value) and value == int(value)))
    if not ok or value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"in [{low}, {high}]"
        none = " or None" if name in _OPTIONAL else ""
        raise ValueError(f"{name} must be an integer {span}{none}, got {value!r}")
    return int(value)
