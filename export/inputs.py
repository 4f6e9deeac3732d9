"""What a request's inputs must be, for the explorer (export.serve) and the API server
(export.api) alike: `InputError` (the server answers 422 with its message) and the checks
both make before a model runs."""

from __future__ import annotations

import re

_NUMBERED = re.compile(r"\b(sentence|line) (\d+)")


class InputError(ValueError):
    """The text of a request cannot be translated or classified; the message says what to
    change."""


def check_text(text) -> str:
    """The text of an explorer's request, or InputError naming what is wrong with it."""
    if not isinstance(text, str):
        raise InputError(f'"text" must be a string, not {type(text).__name__}')
    if "\n" in text:
        raise InputError('"text" holds a line break; send one sentence (one line) per '
                         'request')
    if "\x00" in text:
        raise InputError('"text" holds a NUL character; remove it')
    if not text.strip():
        raise InputError('"text" is empty; type a sentence')
    return text


def input_error(err: ValueError) -> InputError:
    """A runner's message about 'sentence N' or 'line N' (1-based) as one about
    inputs[N-1]."""
    return InputError(_NUMBERED.sub(lambda m: f"inputs[{int(m.group(2)) - 1}]", str(err)))


def check_options(options: dict, known: dict) -> None:
    """InputError naming the first option of a request that its engine does not take."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        names = ", ".join(sorted(known)) or "none"
        raise InputError(f"unknown option {unknown[0]!r} for this model; its options are "
                         f"{names}")
