"""Classify text with a classifier export, one sentence per line.

    python -m export.classify --export exports/uit_vsfc --runtime onnx [--top-k 2] [FILE] [-o OUT]

Reads FILE (or stdin) and writes one line per input line: `label<TAB>probability`, or with
--top-k K the K most probable labels, `label<TAB>probability` pairs joined by tabs, best
first. An empty or whitespace-only line is an error naming it (no label would be an answer
for it; export.translate, whose empty output is a fitting translation of an empty line, keeps
such lines instead). Over-long sentences are truncated to the model's max_source_length with a
warning (--no-truncate makes them an error); invalid UTF-8 bytes become U+FFFD with a
warning. The onnx and tflite runtimes need no TensorFlow.

Exit codes: 0 classified; 2 bad usage or input (an option out of range, a blank line, a
missing or damaged export, an export of another kind, an -o that cannot be written, a runtime
whose package is not installed); 1 a runtime failed on sound input; 130 interrupted. Nothing
is written until every line is classified; -o is written under a temporary name renamed into
place.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from keras_transformer.command_line import add_debug_flag, entry_point, int_in
from keras_transformer.file_safety import atomic_write_text, check_output_file
from keras_transformer.text.lines import decode_lines, read_lines

RUNTIMES = ("onnx", "tflite", "savedmodel", "keras")
PRECISION = 4  # decimals of the printed probabilities


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m export.classify",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("input", nargs="?", default="-", help="text file (default: stdin)")
    parser.add_argument("--export", required=True, help="export directory of a classifier")
    parser.add_argument("--runtime", default="onnx", choices=RUNTIMES)
    parser.add_argument("--variant", default="float32", choices=("float32", "fp16", "int8"),
                        help="quantized variant (tflite: fp16/int8, onnx: int8)")
    parser.add_argument("--top-k", type=int_in(1, 1000), default=1,
                        help="labels per line, best first, 1 to the number of classes "
                             "(default 1)")
    parser.add_argument("--batch-size", type=int_in(1, 4096), default=64,
                        help="sentences per batch, 1 to 4096 (default 64)")
    parser.add_argument("--run", default=None, help="training run (keras runtime only)")
    parser.add_argument("--no-truncate", action="store_true",
                        help="fail on sentences longer than the model accepts")
    parser.add_argument("-o", "--output", default="-",
                        help="output file (default: stdout), written whole after classifying")
    add_debug_flag(parser)
    return parser.parse_args(argv)


def check_output(args) -> Path | None:
    """The -o path, refused before any work if it cannot or must not be written."""
    if args.output == "-":
        return None
    out = check_output_file(args.output, "-o",
                            inputs={"input": None if args.input == "-" else args.input})
    if out.resolve().is_relative_to(Path(args.export).resolve()):
        raise ValueError(f"-o {out} is inside the export directory {args.export}; write the "
                         f"labels elsewhere")
    return out


def format_line(best: list[tuple[str, float]]) -> str:
    return "\t".join(f"{label}\t{probability:.{PRECISION}f}" for label, probability in best)


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    out = check_output(args)
    from .common import Manifest
    from .runtime.classifier import Classifier, load_runtime

    manifest = Manifest(args.export)
    manifest.require_kind("classifier", "python -m export.classify")
    labels = manifest["labels"]
    if args.top_k > len(labels):
        raise ValueError(f"--top-k {args.top_k} is more than the {len(labels)} classes of "
                         f"{args.export} ({', '.join(labels)})")
    if args.input == "-":
        lines = decode_lines(sys.stdin.buffer.read(), "stdin", errors="replace")
    else:
        lines = read_lines(args.input, errors="replace")
    classifier = Classifier(manifest, load_runtime(manifest, args.runtime, args.variant,
                                                   args.run))
    probabilities = classifier.probabilities(lines, batch_size=args.batch_size,
                                             truncate=not args.no_truncate)
    text = "".join(format_line(best) + "\n"
                   for best in classifier.top_k(probabilities, args.top_k))
    if out is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
