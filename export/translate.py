"""Translate (or summarize) text with an export directory, one sentence (article) per line.

    python -m export.translate --export exports/demo --runtime onnx [--beam 1] [FILE] [-o OUT]
    python -m export.translate --export exports/demo --variant fastest [FILE]

Reads FILE (or stdin) and writes one output per line. The search settings default to those
of the exported run (its config's `eval:` section, recorded in manifest.json as `decoding`):
for a summarization run, e.g., beam 4, alpha 1.0, no repeated trigram and a minimum length.
Blank lines give blank lines;
over-long sentences are truncated to the model's max_source_length with a warning
(--no-truncate makes them an error); invalid UTF-8 bytes become U+FFFD with a warning.
The onnx runtime needs only onnxruntime, numpy, sentencepiece and tqdm. --variant fastest
runs the fastest runtime and variant whose BLEU (ROUGE-L for summaries) `python -m
export.parity` recorded within 0.5 of float32's (its parity.json; --runtime narrows the
choice to one runtime) and names it on stderr.

Exit codes: 0 translated; 2 bad usage or input (an option out of range, a missing or damaged
export, an -o that cannot be written, a runtime whose package is not installed); 1 a runtime
failed on sound input; 130 interrupted. -o is written only after every line is translated,
under a temporary name renamed into place.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from keras_transformer.command_line import (
    add_debug_flag,
    add_search_constraints,
    entry_point,
    float_in,
    int_in,
    search_bounds,
)
from keras_transformer.decoding import SearchSettings

from .text_io import check_run_option, line_tool_parser, rewrite, start

# One search holds batch x beam rows of decoder cache; past this it is memory, not speed.
MAX_ROWS = 8192


def parse_args(argv=None) -> argparse.Namespace:
    parser = line_tool_parser("export.translate", __doc__, export_help="export directory",
                              verb="translating", fastest=True)
    parser.add_argument("--beam", type=int_in(*search_bounds("beam_size")), default=None,
                        help="beam size, 1 (greedy) to 64 (default: the run's, else 4)")
    parser.add_argument("--alpha", type=float_in(*search_bounds("alpha")), default=None,
                        help="length penalty exponent, in [0, 10] (default: the run's, "
                             "else 0.6)")
    add_search_constraints(parser, "the run's, else 0")
    parser.add_argument("--no-search-graph", action="store_true",
                        help="with --runtime onnx, step the model from the NumPy search even "
                             "when the export has search.onnx (the whole search in one "
                             "onnxruntime call, the default there)")
    parser.add_argument("--batch-size", type=int_in(1, 4096), default=64,
                        help=f"sentences per search, 1 to 4096, with --batch-size x --beam at "
                             f"most {MAX_ROWS} (default 64)")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    if args.beam is not None and args.batch_size * args.beam > MAX_ROWS:
        parser.error(rows_message(args.batch_size, args.beam))
    return args


def rows_message(batch_size: int, beam: int) -> str:
    return (f"--batch-size {batch_size} x --beam {beam} is {batch_size * beam} rows per "
            f"search; keep it at most {MAX_ROWS}")


def search_settings(args, manifest) -> SearchSettings:
    """The search: each option given, else the run's (manifest.search)."""
    settings = manifest.search.given(beam_size=args.beam, alpha=args.alpha,
                                     no_repeat_ngram_size=args.no_repeat_ngram_size,
                                     min_length=args.min_length)
    if args.batch_size * settings.beam_size > MAX_ROWS:
        raise ValueError(rows_message(args.batch_size, settings.beam_size))
    return settings


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    out = start(args, "translations")
    from .kinds import open_manifest, open_runner

    manifest = open_manifest(args.export, "translator", "export.translate")
    settings = search_settings(args, manifest)
    runtime, variant = args.runtime or "onnx", args.variant
    if variant == "fastest":
        from .choice import fastest

        runtime, variant = fastest(args.export, args.runtime)
        print(f"--variant fastest: {runtime} {variant}", file=sys.stderr)
    check_run_option(args.run, runtime)
    translator = open_runner(manifest, runtime, variant, args.run,
                             search_graph=not args.no_search_graph)

    def work(lines):
        from keras_transformer.progress import progress_bar

        bar = (progress_bar(total=len(lines), unit="sent", file=sys.stderr, leave=False)
               if args.input != "-" else contextlib.nullcontext())
        with bar as progress:
            return translator.translate(lines, settings, batch_size=args.batch_size,
                                        truncate=not args.no_truncate, progress=progress)

    rewrite(args, out, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
