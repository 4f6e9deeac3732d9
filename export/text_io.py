"""What the line-in, line-out tools of an export (export.translate, export.classify,
export.summarize, export.fill_mask) share: their start, their input, runtime and output
options, the check of their files, the way from input lines to output lines (`rewrite`), and
the run from options to output (`run_tool`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from keras_transformer.command_line import add_debug_flag, command, int_in
from keras_transformer.file_safety import (
    atomic_write_text,
    check_input_file,
    check_output_file,
)
from keras_transformer.text.lines import decode_lines

from .formats import RUNTIMES


def start(args, what: str) -> Path | None:
    """What a tool does before any work: TensorFlow's C++ logging quiet (should a runtime load
    it), warnings as `LEVEL: message` lines, and the command's own files checked: the -o path
    (see check_output), then the input file, missing or a directory (file_safety's
    check_input_file)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    out = check_output(args, what)
    if args.input != "-":
        check_input_file(args.input, "input file")
    return out


def run_tool(args, what: str, kind: str | None, tool: str, work, check=None) -> int:
    """A line tool from its parsed options to its output, in one place: `start` (-o and the
    input file checked), the export's manifest, refused in one line if the export is of
    another kind than `kind` (naming `tool`) or if --run stands beside a runtime that would
    ignore it, then `check(manifest)` (the tool's own refusals, before any runtime is loaded
    or input read), the runner the manifest names (export.kinds.open_runner: the manifest is
    not read again), and the input lines through `work(runner, manifest, lines)` to the
    output (rewrite). Returns the exit code 0."""
    check_run_option(args.run, args.runtime)
    out = start(args, what)
    # Here, not at the top: --help and a bad option need none of the runtimes.
    from .kinds import open_manifest, open_runner

    manifest = open_manifest(args.export, kind, tool)
    if check is not None:
        check(manifest)
    runner = open_runner(manifest, args.runtime, args.variant, args.run)
    rewrite(args, out, lambda lines: work(runner, manifest, lines))
    return 0


def check_run_option(run, runtime: str) -> None:
    """--run names the training run that --runtime keras loads; the other runtimes read the
    export alone, and a --run beside them would be ignored without a word."""
    if run is not None and runtime != "keras":
        raise ValueError(f"--run is read by --runtime keras only, and this command runs "
                         f"{runtime}: drop --run, or add --runtime keras")


def line_tool_parser(tool: str, doc: str, *, export_help: str, verb: str,
                     fastest: bool = False) -> argparse.ArgumentParser:
    """The parser of the line tool `tool` (its usage line, the first paragraph of its `doc`),
    holding the options every line tool takes (add_text_io_arguments); the tool adds its own
    and ends with add_batch_size_and_debug, or with --debug of its own."""
    parser = argparse.ArgumentParser(prog=command(tool), description=doc.split("\n\n")[0])
    add_text_io_arguments(parser, export_help=export_help, verb=verb, fastest=fastest)
    return parser


def add_batch_size_and_debug(parser: argparse.ArgumentParser, unit: str,
                             batch_size: int) -> None:
    """The last options of a line tool: --batch-size (`unit`s per batch, 1 to 4096, default
    `batch_size`) and --debug."""
    parser.add_argument("--batch-size", type=int_in(1, 4096), default=batch_size,
                        help=f"{unit} per batch, 1 to 4096 (default {batch_size})")
    add_debug_flag(parser)


def add_text_io_arguments(parser: argparse.ArgumentParser, *, export_help: str,
                          verb: str, fastest: bool = False) -> None:
    """FILE (or stdin), --export, --runtime, --variant, --run, --no-truncate and -o; with
    `fastest`, --variant fastest too (and --runtime defaults to None: the tool's default, or
    any runtime for --variant fastest)."""
    parser.add_argument("input", nargs="?", default="-", help="text file (default: stdin)")
    parser.add_argument("--export", required=True, help=export_help)
    parser.add_argument("--runtime", default=None if fastest else "onnx", choices=RUNTIMES,
                        help="default onnx; with --variant fastest, the runtime to choose "
                             "within (default: any)" if fastest else None)
    parser.add_argument("--variant", default="float32",
                        choices=("float32", "fp16", "int8", *(("fastest",) if fastest else ())),
                        help="quantized variant (tflite: fp16/int8, onnx: int8)" + (
                            ", or fastest: the fastest runtime and variant whose BLEU the "
                            "export's parity check (parity.json) found within 0.5 of "
                            "float32's" if fastest else ""))
    parser.add_argument("--run", default=None, help="training run (keras runtime only)")
    parser.add_argument("--no-truncate", action="store_true",
                        help="fail on sentences longer than the model accepts")
    parser.add_argument("-o", "--output", default="-",
                        help=f"output file (default: stdout), written whole after {verb}")


def check_output(args, what: str) -> Path | None:
    """The -o path, refused before any work if it cannot or must not be written: a missing
    directory, a directory, the input file itself, or a file inside the export."""
    if args.output == "-":
        return None
    out = check_output_file(args.output, "-o",
                            inputs={"input": None if args.input == "-" else args.input})
    if out.resolve().is_relative_to(Path(args.export).resolve()):
        raise ValueError(f"-o {out} is inside the export directory {args.export}; write the "
                         f"{what} elsewhere")
    return out


def rewrite(args, out: Path | None, work) -> None:
    """The input lines (FILE, checked by `start`, or stdin; invalid UTF-8 becomes U+FFFD with
    a warning) through `work`, whose lines are written one each to stdout or, whole and
    atomically, to `out`."""
    if args.input == "-":
        lines = decode_lines(sys.stdin.buffer.read(), "stdin", errors="replace")
    else:
        path = Path(args.input)
        lines = decode_lines(path.read_bytes(), str(path), errors="replace")
    text = "".join(line + "\n" for line in work(lines))
    if out is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(out, text)
