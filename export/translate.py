"""Translate text with an export directory, one sentence per line.

    python -m export.translate --export exports/demo --runtime onnx [--beam 1] [FILE] [-o OUT]

Reads FILE (or stdin) and writes one translation per line. Blank lines give blank lines;
over-long sentences are truncated to the model's max_source_length with a warning
(--no-truncate makes them an error); invalid UTF-8 bytes become U+FFFD with a warning.
The onnx runtime needs only onnxruntime, numpy, sentencepiece and tqdm.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from export.common import ExportError
from keras_transformer.text.lines import decode_lines, read_lines

RUNTIMES = ("onnx", "tflite", "savedmodel", "keras")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m export.translate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("input", nargs="?", default="-", help="text file (default: stdin)")
    parser.add_argument("--export", required=True, help="export directory")
    parser.add_argument("--runtime", default="onnx", choices=RUNTIMES)
    parser.add_argument("--variant", default="float32", choices=("float32", "fp16", "int8"),
                        help="quantized variant (tflite: fp16/int8, onnx: int8)")
    parser.add_argument("--beam", type=int, default=4, help="beam size (1: greedy)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty exponent")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--run", default=None, help="training run (keras runtime only)")
    parser.add_argument("--no-truncate", action="store_true",
                        help="fail on sentences longer than the model accepts")
    parser.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    if args.beam < 1 or args.batch_size < 1:
        print("error: --beam and --batch-size must be at least 1", file=sys.stderr)
        return 2
    from export.runtime import load_translator

    try:
        translator = load_translator(args.export, args.runtime, args.variant, args.run)
        if args.input == "-":
            lines = decode_lines(sys.stdin.buffer.read(), "stdin", errors="replace")
        else:
            lines = read_lines(args.input, errors="replace")
        progress = None
        if args.input != "-":
            from tqdm import tqdm

            progress = tqdm(total=len(lines), unit="sent", file=sys.stderr, leave=False)
        try:
            outputs = translator.translate(lines, beam_size=args.beam, alpha=args.alpha,
                                           batch_size=args.batch_size,
                                           truncate=not args.no_truncate, progress=progress)
        finally:
            if progress is not None:
                progress.close()
    except (ExportError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    text = "".join(line + "\n" for line in outputs)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
