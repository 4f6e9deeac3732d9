"""Whether one summarizer beats another on the same articles: each document's ROUGE F1 for
both (keras_transformer.text.rouge, the project's settings), the mean of the per-document
differences and its 95% interval by the paired bootstrap (Koehn 2004; resampling documents
with replacement, seeded), for ROUGE-1, -2 and -L. A dev gain whose interval holds 0 is one
that another sample of articles may not show.

    python -m bench.paired_rouge --ref runs/a/dev.ref --base runs/a/dev.hyp \\
        --hyp runs/b/dev.hyp runs/c/eval/model/dev.tsv.gz.hyp
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from keras_transformer.command_line import CommandError, add_debug_flag, entry_point, int_in
from keras_transformer.text.lines import read_lines
from keras_transformer.text.rouge import ROUGE_TYPES, rouge_per_document

CONFIDENCE = 0.95


def paired_bootstrap(base: np.ndarray, other: np.ndarray, samples: int,
                     seed: int) -> tuple[float, float, float]:
    """(mean of other - base, the interval's low and high ends) over `samples` resamplings
    of the documents, each drawing len(base) of them with replacement."""
    if len(base) != len(other) or not len(base):
        raise ValueError(f"the paired scores must be as many and not none, got {len(base)} "
                         f"and {len(other)}")
    differences = np.asarray(other, np.float64) - np.asarray(base, np.float64)
    picks = np.random.default_rng(seed).integers(0, len(differences),
                                                 size=(samples, len(differences)))
    means = differences[picks].mean(axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(differences.mean()), float(low), float(high)


def read_summaries(path: Path, what: str, count: int | None = None) -> list[str]:
    try:
        lines = read_lines(path, what=what)
    except (FileNotFoundError, ValueError) as err:
        raise CommandError(str(err)) from None
    if count is not None and len(lines) != count:
        raise CommandError(f"{what} {path} has {len(lines)} lines for {count} references; "
                           f"give the summaries of the same articles, one a line")
    return lines


@entry_point
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", required=True, type=Path, help="reference summaries, a line each")
    parser.add_argument("--base", required=True, type=Path,
                        help="the summaries the others are compared with, line-aligned")
    parser.add_argument("--hyp", required=True, type=Path, nargs="+",
                        help="other summaries of the same articles, line-aligned")
    parser.add_argument("--samples", type=int_in(100, 100_000), default=2000,
                        help="bootstrap resamplings (default 2000)")
    parser.add_argument("--seed", type=int_in(0), default=0)
    add_debug_flag(parser)
    args = parser.parse_args(argv)

    references = read_summaries(args.ref, "--ref")
    if not references:
        raise CommandError(f"--ref {args.ref} holds no summary")
    base = rouge_per_document(read_summaries(args.base, "--base", len(references)), references)
    print(f"{args.base}: " + ", ".join(f"{k} {100 * base[k].mean():.2f}" for k in ROUGE_TYPES)
          + f" ({len(references)} documents)")
    for path in args.hyp:
        other = rouge_per_document(read_summaries(path, "--hyp", len(references)), references)
        parts = []
        for kind in ROUGE_TYPES:
            mean, low, high = paired_bootstrap(100 * base[kind], 100 * other[kind],
                                               args.samples, args.seed)
            parts.append(f"{kind} {100 * other[kind].mean():.2f} ({mean:+.2f}, "
                         f"{CONFIDENCE:.0%} [{low:+.2f}, {high:+.2f}])")
        print(f"{path}: " + ", ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
