"""What an extractive summarizer can reach on the dev split for each article length K (its first
K sentences) and each sentence budget S (a sentence's first S - 1 pieces + EOS): the choice of
data.article_sentences and data.max_source_length in train/configs/vietnews_extractive.yaml.

For K: the greedy oracle (train.scoring.oracle) over the first K sentences, scored by ROUGE
against the references, and the share of the whole article's oracle sentences that lie among
the first K. No model can pick better than that oracle, and a step's cost grows with K x S.
For S: the share of those sentences, and of their pieces, that a budget of S keeps (the scorer
reads a sentence's first S - 1 pieces), with the tokenizer of an extractive run (--run).

    python -m bench.extractive_reach --run runs/vietnews_ext
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bench.common import RESULTS, cpu_model, write_json
from keras_transformer.command_line import add_debug_flag, entry_point, int_in
from keras_transformer.text.rouge import ROUGE_TYPES, rouge
from train.config import load_config
from train.data import load_summarization, split_sentences
from train.scoring import oracle
from train.tokenizers import load_run_tokenizers

ARTICLE_SENTENCES = (2, 4, 6, 8, 12, 16, 24, 32)
SENTENCE_PIECES = (24, 32, 48, 64, 96)


def whole_oracles(articles, references) -> list[list[int]]:
    """The greedy oracle's sentences of each whole article (the same for every K)."""
    return [oracle(split_sentences(a), r) for a, r in zip(articles, references, strict=True)]


def reach(articles, references, whole, k: int) -> dict:
    """The oracle over each article's first k sentences: its ROUGE F1s (percent) and the share
    of the whole article's oracle sentences (`whole`, from whole_oracles) among those k."""
    summaries = []
    for article, reference in zip(articles, references, strict=True):
        sentences = split_sentences(article)
        summaries.append(" ".join(sentences[i] for i in oracle(sentences[:k], reference)))
    inside = sum(i < k for chosen in whole for i in chosen)
    total = sum(len(chosen) for chosen in whole)
    scores = {t: round(v, 2) for t, v in rouge(summaries, references).items() if t in ROUGE_TYPES}
    return {**scores, "oracle_sentences_inside_pct": round(100 * inside / max(total, 1), 1)}


def budget(articles, tokenizer, k: int) -> dict:
    """{S: (share of the first k sentences wholly kept, share of their pieces kept)}."""
    sentences = [s for a in articles for s in split_sentences(a)[:k]]
    lengths = np.array([len(ids) + 1 for ids in tokenizer.encode(sentences)])
    return {str(s): {"sentences_whole_pct": round(100 * float(np.mean(lengths <= s)), 1),
                     "pieces_kept_pct": round(100 * float(np.minimum(lengths, s).sum()
                                                          / lengths.sum()), 1)}
            for s in SENTENCE_PIECES}


@entry_point
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, type=Path,
                        help="an extractive_summarization run (its config and tokenizer)")
    parser.add_argument("--articles", type=int_in(0), default=0,
                        help="the dev split's first N articles (default: all)")
    parser.add_argument("--k", type=int_in(1), default=16, help="K for the sentence budgets")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    if not (args.run / "config.yaml").is_file():
        parser.error(f"--run {args.run}: not a run directory (no config.yaml)")
    config = load_config(args.run / "config.yaml")
    dev = load_summarization(config.data)["dev"]
    articles, references = dev.articles, dev.summaries
    if args.articles:
        articles, references = articles[:args.articles], references[:args.articles]
    tokenizer, _ = load_run_tokenizers(args.run)
    result = {"what": "the dev oracle's reach by article sentences K, and sentence budgets S",
              "cpu": cpu_model(), "run": str(args.run), "dev_articles": len(articles),
              "article_sentences": {}, "sentence_pieces": {}}
    whole = whole_oracles(articles, references)
    for k in ARTICLE_SENTENCES:
        result["article_sentences"][str(k)] = reach(articles, references, whole, k)
        print(f"K={k:2d}", result["article_sentences"][str(k)], flush=True)
    result["sentence_pieces"] = budget(articles, tokenizer, args.k)
    for s, kept in result["sentence_pieces"].items():
        print(f"S={s:>2s} (K={args.k})", kept)
    write_json(RESULTS / "vietnews" / "extractive_reach.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
