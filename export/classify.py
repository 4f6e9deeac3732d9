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
import sys

from keras_transformer.command_line import entry_point, int_in

from .text_io import add_batch_size_and_debug, line_tool_parser, run_tool

PRECISION = 4  # decimals of the printed probabilities


def parse_args(argv=None) -> argparse.Namespace:
    parser = line_tool_parser("export.classify", __doc__,
                              export_help="export directory of a classifier",
                              verb="classifying")
    parser.add_argument("--top-k", type=int_in(1, 1000), default=1,
                        help="labels per line, best first, 1 to the number of classes "
                             "(default 1)")
    add_batch_size_and_debug(parser, "sentences", 64)
    return parser.parse_args(argv)


def format_line(best: list[tuple[str, float]]) -> str:
    return "\t".join(f"{label}\t{probability:.{PRECISION}f}" for label, probability in best)


@entry_point
def main(argv) -> int:
    args = parse_args(argv)

    def check(manifest):
        labels = manifest["labels"]
        if args.top_k > len(labels):
            raise ValueError(f"--top-k {args.top_k} is more than the {len(labels)} classes of "
                             f"{args.export} ({', '.join(labels)})")

    def work(classifier, manifest, lines):
        probabilities = classifier.probabilities(lines, batch_size=args.batch_size,
                                                 truncate=not args.no_truncate)
        return [format_line(best) for best in classifier.top_k(probabilities, args.top_k)]

    return run_tool(args, "labels", "classifier", "export.classify", work, check)

if __name__ == "__main__":
    sys.exit(main())
