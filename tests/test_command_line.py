"""keras_transformer.command_line: one-line errors, exit codes, bounded options."""

from __future__ import annotations

import argparse

import pytest

from keras_transformer.command_line import (
    CommandError,
    add_debug_flag,
    entry_point,
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
