"""What every command-line tool shares: one-line errors with documented exit codes, bounded
numeric options, and `--debug`.

Standard library only, so the TensorFlow-free tools (export.translate over ONNX or TFLite) use
it too. Exit codes: 0 success, 1 a runtime failure (the input was fine but the work failed),
2 bad usage or bad input (the message says what to fix), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

DEBUG_ENV = "KT_DEBUG"
USAGE, RUNTIME, INTERRUPTED = 2, 1, 130

# Errors that mean "the input or the command line is wrong": exit 2. An exception class may
# also say what it means with an `exit_code` attribute (e.g. export.common.ExportError).
INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError,
    PermissionError)


# The console script of each tool in an installed copy (pyproject.toml's [project.scripts]),
# by the module a clone runs with `python -m`.
SCRIPTS = {
    "train": "kt-train", "train.evaluate": "kt-evaluate", "train.average": "kt-average",
    "train.visualize": "kt-visualize", "export": "kt-export", "export.parity": "kt-parity",
    "export.translate": "kt-translate", "export.classify": "kt-classify",
    "export.summarize": "kt-summarize", "export.generate": "kt-generate",
    "export.fill_mask": "kt-fill-mask",
    "export.serve": "kt-serve", "export.api": "kt-api",
}


def command(module: str) -> str:
    """How a user starts the tool `module` ("train.evaluate") the way this process was
    started, for usage lines and messages that name a tool: its console script when this
    process is one (`kt-evaluate`), `python -m keras_transformer.<module>` in an installed
    copy (which has no top-level `train` or `export`), `python -m <module>` in a clone."""
    started_as = Path(sys.argv[0] if sys.argv else "").name.removesuffix(".exe")
    installed = started_as in SCRIPTS.values()
    if installed and module in SCRIPTS:
        return SCRIPTS[module]
    if installed or any(name.startswith(("keras_transformer.train",
                                         "keras_transformer.export")) for name in sys.modules):
        return f"python -m keras_transformer.{module}"
    return f"python -m {module}"


class CommandError(Exception):
    """A failure the command explains itself, in one line, with its exit code."""

    def __init__(self, message: str, exit_code: int = USAGE):
        super().__init__(message)
        self.exit_code = exit_code


def one_line(err: BaseException) -> str:
    """The exception's message on one line (whitespace folded), or its type if it has none."""
    text = " ".join(str(err).split())
    return text or type(err).__name__


def exit_code_of(err: BaseException) -> int:
    code = getattr(err, "exit_code", None)
    if isinstance(code, int):
        return code
    return USAGE if isinstance(err, INPUT_ERRORS) else RUNTIME


# The Keras backends this project runs on, and the module each needs.
KERAS_BACKENDS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


def check_keras_backend() -> str:
    """The backend KERAS_BACKEND names (tensorflow when unset), before Keras is imported: a
    CommandError naming it when this project does not run on it or it is not installed."""
    import importlib.util

    name = os.environ.get("KERAS_BACKEND", "tensorflow")
    if name not in KERAS_BACKENDS:
        raise CommandError(f"KERAS_BACKEND={name} is not a backend this project runs on; set "
                           f"it to {', '.join(KERAS_BACKENDS)}")
    if importlib.util.find_spec(KERAS_BACKENDS[name]) is None:
        raise CommandError(f"KERAS_BACKEND={name} but {KERAS_BACKENDS[name]} is not installed "
                           f"in this Python; install it (requirements-jax.txt, "
                           f"requirements-torch.txt) or choose another KERAS_BACKEND")
    return name


def debug_requested(argv) -> bool:
    return "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def entry_point(main: Callable[[list[str]], int]) -> Callable[..., int]:
    """Wrap `main(argv) -> exit code` so that no exception reaches the user as a traceback:
    it becomes `error: <one line>` on stderr and the exit code above. The traceback is still
    printed with `--debug` or KT_DEBUG=1."""

    @functools.wraps(main)
    def wrapped(argv=None) -> int:
        argv = list(sys.argv[1:] if argv is None else argv)
        for position, arg in enumerate(argv, 1):
            # Python hands bytes that are not UTF-8 on as lone surrogates, which every text
            # library downstream refuses with an error that names neither the argument nor
            # the cause.
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                shown = repr(os.fsencode(arg))[2:-1]  # the bytes as given: one \xff cat
                print(f"error: argument {position} ({shown[:60]}) is not UTF-8 text; give "
                      f"the command UTF-8", file=sys.stderr)
                return USAGE
        try:
            return main(argv)
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return INTERRUPTED
        except SystemExit:
            raise
        except BaseException as err:  # noqa: BLE001 - the point is that nothing escapes
            if debug_requested(argv):
                traceback.print_exc()
            code = exit_code_of(err)
            message = one_line(err)
            if code == RUNTIME and not isinstance(err, CommandError):
                message = (f"{message} ({type(err).__name__}; rerun with --debug for the "
                           f"traceback)")
            print(f"error: {message}", file=sys.stderr)
            return code

    return wrapped


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true",
                        help=f"print the traceback of an error (or set {DEBUG_ENV}=1)")


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high] (no upper bound when high is None)."""

    bound = f"from {low} to {high}" if high is not None else f"at least {low}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            if text.strip().lstrip("+-").isdecimal():  # more digits than int() converts
                raise argparse.ArgumentTypeError(f"{text.strip()[:12]}... is out of range: "
                                                 f"give an integer {bound}") from None
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is out of range: give an integer {bound}")
        return value

    parse.__name__ = "integer"
    return parse


def float_in(low: float, high: float, *, low_open: bool = False,
             high_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in the interval [low, high], either end open."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        inside = ((value > low if low_open else value >= low)
                  and (value < high if high_open else value <= high))
        if not inside:  # NaN fails both comparisons
            raise argparse.ArgumentTypeError(f"{text} is out of range: give a number in "
                                             f"{interval}")
        return value

    parse.__name__ = "number"
    return parse


def search_bounds(name: str) -> tuple:
    """(low, high) of a search option: `SearchSettings.BOUNDS`, which validates the settings
    themselves, so that a command line refuses what the search would."""
    from keras_transformer.decoding.settings import BOUNDS

    return BOUNDS[name]


def add_search_constraints(parser, default: str = "the run's") -> None:
    """--no-repeat-ngram-size and --min-length (keras_transformer.decoding's constraints),
    bounded, defaulting to None: the caller fills in `default` (e.g. the run's settings)."""
    ngram, length = search_bounds("no_repeat_ngram_size"), search_bounds("min_length")
    parser.add_argument("--no-repeat-ngram-size", type=int_in(*ngram), default=None,
                        metavar="N", help=f"never generate an n-gram of N tokens twice, 0 (off) "
                                          f"to {ngram[1]} (default: {default})")
    parser.add_argument("--min-length", type=int_in(*length), default=None, metavar="N",
                        help=f"generated tokens before EOS may end an output, 0 to {length[1]} "
                             f"(default: {default})")


def first_few(items, shown: int = 5) -> str:
    """`items` joined by commas for a one-line message, the first `shown` of them and then
    how many more: "a, b, c, d, e and 3 more"."""
    items = [str(item) for item in items]
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


@contextlib.contextmanager
def each_message_once():
    """EachMessageOnce on the root logger's handlers for the block, taken off after it: the
    handlers are not the command's own (a test runner's, in a test), and a filter left on
    them would drop a later identical message of someone else's."""
    # One filter a handler: a shared one would pass a message to the first handler only.
    added = [(handler, EachMessageOnce()) for handler in logging.getLogger().handlers]
    for handler, once in added:
        handler.addFilter(once)
    try:
        yield
    finally:
        for handler, once in added:
            handler.removeFilter(once)


class EachMessageOnce(logging.Filter):
    """A logging filter that passes each distinct message once: a command that runs the same
    input through several runtimes (export.parity) would otherwise repeat the same warning,
    e.g. the truncation of over-long articles, for every runtime and check."""

    def __init__(self):
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self._seen:
            return False
        self._seen.add(message)
        return True
