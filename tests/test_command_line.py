"""keras_transformer.command_line: one-line errors, exit codes, bounded options."""

from __future__ import annotations

import argparse
import logging

import pytest

from keras_transformer.command_line import (
    SCRIPTS,
    CommandError,
    EachMessageOnce,
    add_debug_flag,
    command,
    each_message_once,
    entry_point,
    first_few,
    float_in,
    int_in,
)


def make_main(error):
    @entry_point
    def main(argv):
        parser = argparse.ArgumentParser()
        add_debug_flag(parser)
        parser.parse_args(argv)
        raise error

    return main


@pytest.mark.parametrize("error, code", [
    (ValueError("bad\n  value"), 2), (FileNotFoundError("no file"), 2),
    (CommandError("says so", 2), 2), (CommandError("failed", 1), 1), (RuntimeError("boom"), 1),
    (KeyboardInterrupt(), 130)])
def test_errors_become_one_line_with_their_exit_code(capsys, error, code):
    assert make_main(error)([]) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_an_argument_that_is_not_utf8_is_refused_before_main_runs(capsys):
    """Bytes that are not UTF-8 reach Python as lone surrogates (os.fsdecode); the tools'
    text libraries refuse them with messages that name neither argument nor cause."""
    import os

    ran = []

    @entry_point
    def main(argv):
        ran.append(argv)
        return 0

    assert main(["--text", os.fsdecode(b"one \xff cat")]) == 2
    err = capsys.readouterr().err
    assert err == "error: argument 2 (one \\xff cat) is not UTF-8 text; give the command UTF-8\n"
    assert ran == []
    assert main(["--text", "cô ấy"]) == 0 and ran == [["--text", "cô ấy"]]


def test_debug_prints_the_traceback(capsys, monkeypatch):
    assert make_main(RuntimeError("boom"))(["--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err
    monkeypatch.setenv("KT_DEBUG", "1")
    assert make_main(RuntimeError("boom"))([]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_bounded_options_name_the_range():
    parser = argparse.ArgumentParser()
    parser.add_argument("--beam", type=int_in(1, 64))
    parser.add_argument("--top-p", type=float_in(0, 1, low_open=True))
    assert parser.parse_args(["--beam", "64", "--top-p", "1"]).beam == 64
    for bad in (["--beam", "0"], ["--beam", "65"], ["--beam", "x"], ["--top-p", "0"],
                ["--top-p", "nan"], ["--top-p", "1.5"]):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(bad)
        assert exit_info.value.code == 2
    assert int_in(1)("1000000") == 1000000
    with pytest.raises(argparse.ArgumentTypeError, match=r"in \(0, 1\]"):
        float_in(0, 1, low_open=True)("0")


def test_usage_names_the_tool_as_it_was_started(monkeypatch):
    """A console script names itself (and the other tools by their scripts); a clone's
    `python -m` names the clone's modules."""
    import sys

    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/kt-translate", "--help"])
    assert command("export.translate") == "kt-translate"
    assert command("export.classify") == "kt-classify"
    assert command("train") == "kt-train"
    # A tool without a script, in an installed copy: its module there.
    assert command("train.generate") == "python -m keras_transformer.train.generate"
    monkeypatch.setattr(sys, "argv", ["/repo/export/translate.py", "--help"])
    assert command("export.translate") == "python -m export.translate"
    assert command("train") == "python -m train"


def test_scripts_are_the_ones_pyproject_installs():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    installed = {script: target.split(":")[0].removeprefix("keras_transformer.")
                 for script, target in pyproject["project"]["scripts"].items()}
    # kt-train runs train.cli, which `python -m train` runs.
    assert {module.removesuffix(".cli"): script for script, module in installed.items()} \
        == SCRIPTS


def test_an_integer_too_long_to_convert_is_out_of_range_not_a_non_integer():
    parse = int_in(1, 64)
    with pytest.raises(argparse.ArgumentTypeError, match=r"out of range: give an integer from 1 "
                                                         r"to 64"):
        parse("9" * 5000)
    with pytest.raises(argparse.ArgumentTypeError, match="'²' is not an integer"):
        parse("²")


def test_each_message_once_passes_a_repeated_truncation_warning_once_and_a_new_one_again():
    from keras_transformer.text.sources import encode_sources

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Keep(level=logging.WARNING)
    handler.addFilter(EachMessageOnce())
    logger = logging.getLogger("keras_transformer.text.sources")
    logger.addHandler(handler)
    encode = lambda texts: [[5] * len(text.split()) for text in texts]  # noqa: E731
    try:
        for _ in range(3):  # as parity runs the same articles through each runtime
            encode_sources(["a b c d", "a"], encode, 3, 2, truncate=True)
        encode_sources(["a b c d", "a b c"], encode, 3, 2, truncate=True)
    finally:
        logger.removeHandler(handler)
    assert len(records) == 2
    assert records[0].startswith("1 of 2 inputs") and records[1].startswith("2 of 2 ")


def test_each_message_once_is_taken_off_the_handlers_it_did_not_own():
    """export.parity's filter holds for its own run only: a test runner's handlers, which
    outlive it, pass the same message again after it (a filter left on them had dropped a
    later test's expected warning)."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    root, handler, other = logging.getLogger(), Keep(level=logging.WARNING), Keep()
    root.addHandler(handler)
    root.addHandler(other)  # each handler is passed each message once
    logger = logging.getLogger("keras_transformer.text.sources")
    try:
        with each_message_once():
            for _ in range(3):
                logger.warning("the same")
        logger.warning("the same")
    finally:
        root.removeHandler(handler)
        root.removeHandler(other)
    assert records == ["the same"] * 4
    assert not handler.filters and not other.filters


def test_first_few_names_the_first_ones_and_counts_the_rest():
    assert first_few(["a", "b"]) == "a, b"
    assert first_few(list("abcdefgh")) == "a, b, c, d, e and 3 more"
    assert first_few([1, 2, 3, 4], 3) == "1, 2, 3 and 1 more"
    assert first_few([]) == ""
