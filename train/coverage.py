"""How much of each summary the encoder can see: the ROUGE-1/ROUGE-2 recall of a split's
summaries by its articles' first N - 1 SentencePiece pieces, for a vocabulary and a
word-joint form (the ceiling of any summary written from them; how the summarization
config's N, vocabulary and word joints were chosen).

    python -m train.coverage --data ../shared/data/vietnews --split dev \\
        --lengths 300 400 500 --vocab-size 16000 --word-joints keep

The vocabulary is trained as a summarization run trains it (train.tokenizers, on the
training articles' sentences and summaries) into a temporary directory; nothing is written.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from keras_transformer.command_line import add_debug_flag, command, entry_point, int_in

from .baselines import split_file


def recall(articles, summaries, tokenizer, length: int) -> tuple[float, float]:
    """Mean ROUGE-1 and ROUGE-2 recall (x100) of `summaries` by the first length - 1 pieces of
    each article (one place is EOS, as in training)."""
    from rouge_score import rouge_scorer

    from keras_transformer.text.rouge import VietnameseRougeTokenizer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=False,
                                      tokenizer=VietnameseRougeTokenizer())
    cut = tokenizer.decode([ids[: length - 1] for ids in tokenizer.encode(articles)])
    scores = [scorer.score(summary, seen) for summary, seen in zip(summaries, cut, strict=True)]
    return (100 * float(np.mean([s["rouge1"].recall for s in scores])),
            100 * float(np.mean([s["rouge2"].recall for s in scores])))


@entry_point
def main(argv) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(prog=command("train.coverage"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="folder of train and <split> TSV files")
    parser.add_argument("--split", default="dev", help="the split scored (default dev)")
    parser.add_argument("--lengths", type=int_in(2, 4096), nargs="+", default=[400],
                        help="values of N (data.max_source_length), 2 to 4096")
    parser.add_argument("--vocab-size", type=int_in(100, 200_000), default=16000)
    parser.add_argument("--word-joints", choices=("keep", "split"), default="keep")
    add_debug_flag(parser)
    args = parser.parse_args(argv)

    from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece

    from .data import load_summaries, split_sentences, word_joints

    def read(split):
        data = load_summaries(split_file(args.data, split))
        return ([word_joints(t, args.word_joints) for t in data.articles],
                [word_joints(t, args.word_joints) for t in data.summaries])

    train_articles, train_summaries = read("train")
    articles, summaries = read(args.split)
    sentences = [s for a in train_articles for s in split_sentences(a)] + train_summaries
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = SentencePieceTokenizer(train_sentencepiece(
            sentences, Path(tmp) / "spm", args.vocab_size))
        pieces = np.median([len(ids) for ids in tokenizer.encode(articles)])
        print(f"{args.split} ({len(articles)} articles), word joints {args.word_joints}, "
              f"vocabulary {args.vocab_size}: median {pieces:.0f} pieces per article")
        for length in args.lengths:
            r1, r2 = recall(articles, summaries, tokenizer, length)
            print(f"  N = {length}: summary recall in the first {length - 1} pieces: "
                  f"ROUGE-1 {r1:.1f}  ROUGE-2 {r2:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
