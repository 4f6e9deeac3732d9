"""Every `python -m ...` command that README.md and the manual pages (docs/*.md) show parses
with the tool's own argument parser: the module exists, every flag and choice is one the tool
takes, and no required option is missing. Commands with placeholders (`<name>`, `[--out FILE]`,
`N`, `...`) are left out, and so are the prose's mentions of a flag; nothing runs past the
parser."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import runpy
import shlex
import sys

import pytest

from bench.common import ROOT

PAGES = [ROOT / "README.md",
         *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "results.md")]
FENCE = re.compile(r"^ *```(\w*)\n(.*?)^ *```", re.M | re.S)
INLINE = re.compile(r"`([^`]*python -m [^`]+)`")
COMMAND = re.compile(r"python -m ((?:train|export|bench)(?:\.\w+)*)(.*)")
PLACEHOLDER = re.compile(r"[<>\[\]$]|\.\.\.|(?:^|\s)[A-Z][A-Z_0-9]*(?=\s|$)")


def doc_commands():
    """(page, module, arguments) of each command without placeholders, redirections cut."""
    commands = set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        # In the prose, a command with a path (`--run runs/demo ...`), not a flag's mention.
        lines = [c for c in INLINE.findall(FENCE.sub("", text)) if "runs/" in c or "configs/" in c]
        for language, block in FENCE.findall(text):
            if language == "bash":
                lines += re.sub(r"\\\n\s*", " ", block).splitlines()
        for line in lines:
            match = COMMAND.search(re.split(r"\s#", line)[0])
            if not match:
                continue
            args = re.split(r"\s[<>|&]", match.group(2) + " ")[0].strip()
            if not PLACEHOLDER.search(args):
                commands.add((page.name, match.group(1), args))
    return sorted(commands)


# The exit code of Parsed: a SystemExit, which the tools' entry_point lets through as it
# lets argparse's own (code 2) through.
PARSED = 97


class Parsed(SystemExit):
    """Raised once the tool's parser has accepted the command line."""

    def __init__(self):
        super().__init__(PARSED)


@pytest.mark.parametrize("page, module, args", doc_commands())
def test_the_docs_commands_parse(page, module, args, monkeypatch):
    parse_args = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, *a, **k):
        parse_args(self, *a, **k)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_and_stop)
    monkeypatch.setattr(sys, "argv", [module, *shlex.split(args)])
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as stopped:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert stopped.value.code == PARSED, (f"{page}: python -m {module} {args}: "
                                          f"{stderr.getvalue()}")


@pytest.mark.parametrize("args, said", [
    ("--config train/configs/demo.yaml", "the following arguments are required: --out"),
    ("--config train/configs/demo.yaml --out runs/x --beam 4", "unrecognized arguments"),
])
def test_a_command_the_parser_refuses_fails_the_check(args, said, monkeypatch):
    with pytest.raises(AssertionError, match=said):
        test_the_docs_commands_parse("a.md", "train", args, monkeypatch)
    test_the_docs_commands_parse("a.md", "train", "--config train/configs/demo.yaml --out runs/x",
                                 monkeypatch)
