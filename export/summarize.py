"""Summarize articles with an extractive summarizer's export, or a bottom-up summarizer's,
one article per line.

    python -m export.summarize --export exports/vietnews_ext --runtime onnx [FILE] [-o OUT]
    python -m export.summarize --export runs/vietnews_summarizer/export [FILE] [-o OUT]

Reads FILE (or stdin), one article a line as the VNDS TSV's article column holds it
(space-tokenized, sentences ending in a ".", "!" or "?" token), and writes one summary a line:
the sentences the model picks, in article order. By default it picks as the run chose on dev
(the manifest's selection); --sentences K takes the K best, --syllables N the best until N
syllables, --trigram-blocking / --no-trigram-blocking turn blocking on or off. --scores adds a
tab and every sentence's probability (in article order) to each line. An article with more
sentences than the model reads is summarized from its first max_sentences, a sentence longer
than max_source_length pieces by its first ones, with a warning (--no-truncate makes either
an error naming the line); text without sentence-ending punctuation is one sentence. An empty
or whitespace-only line is an error naming it. Invalid UTF-8 bytes become U+FFFD with a
warning. The onnx and tflite runtimes need no TensorFlow.

A bottom-up summarizer's export (docs/summarization.md: a copy model with its selector)
writes the copy model's summary of the sentences the selector keeps, by the run's search;
--epsilon replaces the export's epsilon (0 keeps every sentence). The extractive options
(--sentences, --syllables, --trigram-blocking, --scores) are for an extractive export.

Exit codes: 0 summarized; 2 bad usage or input (an option out of range, a blank line, a
missing or damaged export, an export of another kind, an -o that cannot be written, a runtime
whose package is not installed); 1 a runtime failed on sound input; 130 interrupted. Nothing
is written until every line is summarized; -o is written under a temporary name renamed into
place.
"""

from __future__ import annotations

import argparse
import sys

from keras_transformer.command_line import (
    command,
    entry_point,
    float_in,
    int_in,
)

from .text_io import add_batch_size_and_debug, line_tool_parser, run_tool

PRECISION = 4  # decimals of the printed probabilities


def parse_args(argv=None) -> argparse.Namespace:
    parser = line_tool_parser("export.summarize", __doc__,
                              export_help="export directory of an extractive summarizer",
                              verb="summarizing")
    picks = parser.add_mutually_exclusive_group()
    picks.add_argument("--sentences", type=int_in(1, 4096), default=None, metavar="K",
                       help="take the K best sentences, 1 to the model's max_sentences "
                            "(default: the selection the run chose on dev)")
    picks.add_argument("--syllables", type=int_in(1, 1 << 20), default=None, metavar="N",
                       help="take the best sentences until they hold N syllables, at least 1")
    parser.add_argument("--trigram-blocking", action=argparse.BooleanOptionalAction,
                        default=None, help="skip a sentence that repeats a word trigram of one "
                                           "already chosen (default: as the run chose)")
    parser.add_argument("--scores", action="store_true",
                        help="add a tab and every sentence's probability to each line")
    parser.add_argument("--epsilon", type=float_in(0.0, 1.0), default=None,
                        help="a bottom-up summarizer's epsilon, from 0 to 1 (default: the "
                             "export's)")
    add_batch_size_and_debug(parser, "articles", 32)
    return parser.parse_args(argv)


EXTRACTIVE_OPTIONS = {"--sentences": "sentences", "--syllables": "syllables",
                      "--trigram-blocking": "trigram_blocking", "--scores": "scores"}


def selection_of(args, default):
    """The selection the options ask for, the run's `default` where they say nothing."""
    from keras_transformer.text.extractive import Selection

    blocking = default.trigram_blocking if args.trigram_blocking is None else args.trigram_blocking
    if args.sentences is None and args.syllables is None:
        return Selection(default.sentences, default.syllables, blocking)
    return Selection(args.sentences or 0, args.syllables or 0, blocking)


def check_lengths(summarizer, lines: list[str]) -> None:
    """With --no-truncate: a ValueError naming the first line with more sentences, or a
    longer sentence, than the model reads."""
    from keras_transformer.text.sentences import split_sentences

    k, length = summarizer.max_sentences, summarizer.manifest["max_source_length"]
    for number, article in enumerate(summarizer.prepare(lines), start=1):
        sentences = split_sentences(article)
        if len(sentences) > k:
            raise ValueError(f"line {number} has {len(sentences)} sentences but the model "
                             f"reads {k}; drop --no-truncate to summarize from its first {k}")
        pieces = [len(ids) + 1 for ids in summarizer.scorer.encode(sentences)]
        if pieces and max(pieces) > length:
            raise ValueError(f"line {number} has a sentence of {max(pieces)} pieces (with "
                             f"EOS) but the model reads {length}; drop --no-truncate to cut it")


def extract(args, summarizer, lines: list[str]) -> list[str]:
    """An extractive summarizer's output lines: each article's summary, with --scores its
    sentences' probabilities; a warning on stderr counts the articles and sentences cut."""
    selection = selection_of(args, summarizer.selection).check(summarizer.max_sentences)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise ValueError(f"line {number} is empty or only whitespace; give every line an "
                             f"article to summarize")
    if args.no_truncate:
        check_lengths(summarizer, lines)
    extractions = summarizer.extract(lines, selection, args.batch_size)
    scorer = summarizer.scorer
    if scorer.cut_articles or scorer.cut_sentences:
        print(f"warning: {scorer.cut_articles} articles have more than "
              f"{summarizer.max_sentences} sentences (summarized from their first "
              f"{summarizer.max_sentences}), {scorer.cut_sentences} sentences are cut to "
              f"{summarizer.manifest['max_source_length'] - 1} pieces", file=sys.stderr)
    return [e.summary + ("\t" + " ".join(f"{p:.{PRECISION}f}" for p in e.scores)
                         if args.scores else "") for e in extractions]


@entry_point
def main(argv) -> int:
    args = parse_args(argv)

    def check(manifest):
        """The options refused by the export's kind, in one line: a bottom-up summarizer's
        export (a copy model with its selector, a translator's export) takes no extractive
        option, an extractive summarizer's no --epsilon; any other kind names its tool."""
        if "selector" in manifest.data:
            given = [flag for flag, name in EXTRACTIVE_OPTIONS.items()
                     if getattr(args, name) not in (None, False)]
            if given:
                raise ValueError(f"{given[0]} is for an extractive summarizer's export; "
                                 f"{args.export} holds a bottom-up summarizer (a copy model "
                                 f"and its selector)")
            return
        manifest.require_kind("extractor", command("export.summarize"))
        if args.epsilon is not None:
            raise ValueError(f"--epsilon is for a bottom-up summarizer's export; {args.export} "
                             f"holds an extractive summarizer")

    def work(summarizer, manifest, lines):
        """A bottom-up summarizer's summaries by the run's search settings, or an extractive
        summarizer's (extract)."""
        if "selector" in manifest.data:
            return summarizer.translate(lines, manifest.search, batch_size=args.batch_size,
                                        truncate=not args.no_truncate, allow_empty=False,
                                        epsilon=args.epsilon)
        return extract(args, summarizer, lines)

    return run_tool(args, "summaries", None, "export.summarize", work, check)

if __name__ == "__main__":
    sys.exit(main())
