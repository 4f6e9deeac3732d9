"""Lead-1, Lead-2, Lead-3 and greedy-oracle ROUGE of a summarization split, without training.

    python -m train.baselines --data ../shared/data/vietnews --split dev --split test

reads <data>/<split>.tsv.gz (or <split>.tsv) with train.data.load_summaries and scores the
articles' first 1, 2 and 3 sentences, and the greedy oracle's sentences (train.scoring.oracle),
against the summaries with keras_transformer.text.rouge.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from keras_transformer.command_line import add_debug_flag, command, entry_point


def split_file(data: str | Path, split: str) -> Path:
    """<data>/<split>.tsv.gz, or <data>/<split>.tsv when only that exists."""
    path = Path(data) / f"{split}.tsv.gz"
    if not path.is_file() and (Path(data) / f"{split}.tsv").is_file():
        path = Path(data) / f"{split}.tsv"
    return path


@entry_point
def main(argv) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(prog=command("train.baselines"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="folder of <split>.tsv.gz files")
    parser.add_argument("--split", action="append", required=True,
                        help="a split to score (repeatable), e.g. dev or test")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    from keras_transformer.text.rouge import ROUGE_SIGNATURE, format_rouge

    from .data import load_summaries
    from .scoring import lead_baselines

    for split in args.split:
        data = load_summaries(split_file(args.data, split))
        scores = lead_baselines(data.articles, data.summaries)
        for name, values in scores.items():
            print(f"{split}: {name:5s} {format_rouge(values)}  ({len(data)} articles)")
    print(f"  {ROUGE_SIGNATURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
