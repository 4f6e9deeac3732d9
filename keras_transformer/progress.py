"""A progress bar that log lines do not break.

A warning logged while a tqdm bar is drawn (an input truncated, a line that is not UTF-8)
would otherwise be printed after the bar's last frame, on the bar's own line. Inside
`progress_bar` the root logger's console handlers write through `tqdm.write`, which clears
the bar, prints the line and draws the bar again below it. tqdm only: usable where
TensorFlow is absent (export's runtimes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


@contextlib.contextmanager
def progress_bar(**options) -> Iterator[tqdm]:
    """`tqdm(**options)` as a context, log lines printed above it while it is open."""
    with logging_redirect_tqdm(), tqdm(**options) as bar:
        yield bar
