"""Fill the [MASK]s of lines with a masked language model's export.

    python -m export.fill_mask --export runs/vi_masked_lm/export [--top-k 5] [FILE] [-o OUT]

Reads FILE (or stdin), one text a line, each holding one or more [MASK] (the manifest's mask
piece, written as is), and writes one line per [MASK], in input order:
`LINE<TAB>MASK<TAB>piece<TAB>probability...` with LINE the input line's number and MASK the
[MASK]'s number in it (both from 1), then the --top-k most probable pieces (SentencePiece's,
"▁" starting a word) and their probabilities, best first (ties: the lower id first). A line is
read as the run read its text: lower-cased and with VNDS word joints split when the run's
data did so. A line that is blank or holds no [MASK] is an error naming it; an over-long line
is truncated to the model's max_source_length with a warning (--no-truncate makes it an
error), and a [MASK] beyond what the model reads is an error. Invalid UTF-8 bytes become
U+FFFD with a warning. The onnx and tflite runtimes need no TensorFlow.

Exit codes: 0 filled; 2 bad usage or input (an option out of range, a blank line or one
without [MASK], a missing or damaged export, an export of another kind, an -o that cannot be
written, a runtime whose package is not installed); 1 a runtime failed on sound input; 130
interrupted. Nothing is written until every line is filled; -o is written under a temporary
name renamed into place.
"""

from __future__ import annotations

import argparse
import sys

from keras_transformer.command_line import entry_point, int_in

from .text_io import add_batch_size_and_debug, line_tool_parser, run_tool

PRECISION = 4  # decimals of the printed probabilities


def parse_args(argv=None) -> argparse.Namespace:
    parser = line_tool_parser("export.fill_mask", __doc__,
                              export_help="export directory of a masked language model",
                              verb="filling")
    parser.add_argument("--top-k", type=int_in(1, 1000), default=5,
                        help="pieces per [MASK], best first, 1 to 1000 and at most the "
                             "vocabulary (default 5)")
    add_batch_size_and_debug(parser, "lines", 64)
    return parser.parse_args(argv)


def format_lines(number: int, masks) -> list[str]:
    """One output line per [MASK] of input line `number`."""
    return ["\t".join([str(number), str(m), *(f"{fill.piece}\t{fill.probability:.{PRECISION}f}"
                                              for fill in fills)])
            for m, fills in enumerate(masks, start=1)]


@entry_point
def main(argv) -> int:
    args = parse_args(argv)

    def check(manifest):
        vocab = manifest["vocab"]["source_size"]
        if args.top_k > vocab:
            raise ValueError(f"--top-k {args.top_k} is more than the {vocab} pieces of "
                             f"{args.export}'s vocabulary")

    def work(fill_mask, manifest, lines):
        filled = fill_mask.fill(lines, args.top_k, batch_size=args.batch_size,
                                truncate=not args.no_truncate)
        return [line for number, masks in enumerate(filled, start=1)
                for line in format_lines(number, masks)]

    return run_tool(args, "fills", "masked_lm", "export.fill_mask", work, check)

if __name__ == "__main__":
    sys.exit(main())
