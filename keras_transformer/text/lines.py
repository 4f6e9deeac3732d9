"""Text files as lines, with one rule set for every reader in the project (standard library only).

- A leading UTF-8 byte-order mark is dropped.
- Only "\\n" and "\\r\\n" end a line; a lone "\\r" (or U+2028 and the like) stays inside its
  line, so line i of a file is line i for every reader.
- A final line without a newline counts; the empty string after a final newline does not.
- Invalid UTF-8 or a NUL byte is a ValueError naming the source and the line number; with
  ``errors="replace"`` the bad bytes become U+FFFD instead, with a warning naming both.
"""

from __future__ import annotations

import logging
from pathlib import Path

from keras_transformer.file_safety import check_input_file

logger = logging.getLogger(__name__)

BOM = b"\xef\xbb\xbf"
ERRORS = ("strict", "replace")


def decode_lines(raw: bytes, source: str = "input", *, errors: str = "strict") -> list[str]:
    """UTF-8 bytes -> lines, by the rules above; ``source`` names the input in messages."""
    if errors not in ERRORS:
        raise ValueError(f"errors must be one of {ERRORS}, got {errors!r}")
    if raw.startswith(BOM):
        raw = raw[len(BOM):]
    chunks = raw.split(b"\n")
    last = chunks.pop()  # after the final "\n" (empty), or a last line without one
    chunks = [c[:-1] if c.endswith(b"\r") else c for c in chunks]
    if last:
        chunks.append(last)
    lines = []
    for number, chunk in enumerate(chunks, start=1):
        try:
            line = chunk.decode("utf-8")
            problem = "holds a NUL byte" if "\x00" in line else None
        except UnicodeDecodeError as err:
            problem = f"is not valid UTF-8 ({err.reason} at byte {err.start + 1})"
        if problem is not None:
            if errors == "strict":
                raise ValueError(f"{source} line {number} {problem}")
            logger.warning("%s line %d %s; replaced by U+FFFD", source, number, problem)
            line = chunk.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
        lines.append(line)
    return lines


def read_lines(path: str | Path, *, errors: str = "strict", what: str = "file") -> list[str]:
    """The lines of a UTF-8 text file (or a pipe: file_safety.check_input_file), by the rules
    above; FileNotFoundError naming it (as `what`, e.g. "--src") if absent."""
    path = check_input_file(path, what)
    return decode_lines(path.read_bytes(), str(path), errors=errors)
