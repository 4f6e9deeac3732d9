"""What ROUGE does not say about summaries: how much of them is new to the article
(novelty), whether they repeat themselves, unknown pieces, and length. TF-free, in the tokens
ROUGE counts (keras_transformer.text.rouge.VietnameseRougeTokenizer)."""

from __future__ import annotations

from keras_transformer.text.rouge import VietnameseRougeTokenizer

# What SentencePiece writes for a piece outside its vocabulary (its default unk surface).
UNK_SURFACE = "\u2047"


def _ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def summary_statistics(summaries, articles) -> dict:
    """Per collection of summaries, each beside its article:
    - novel_bigrams, novel_trigrams: % of the summaries' n-grams (all summaries pooled) not
      found anywhere in their own article;
    - repeated_trigram_summaries: % of summaries in which some trigram occurs twice;
    - unk_summaries: % of summaries holding an unknown piece (SentencePiece's "\u2047");
    - mean_tokens: the mean length in ROUGE tokens (syllables)."""
    summaries, articles = list(summaries), list(articles)
    if len(summaries) != len(articles):
        raise ValueError(f"{len(summaries)} summaries for {len(articles)} articles")
    if not summaries:
        raise ValueError("no summaries to describe")
    tokenizer = VietnameseRougeTokenizer()
    novel = {2: [0, 0], 3: [0, 0]}  # n -> [novel, total]
    repeated = unknown = length = 0
    for summary, article in zip(summaries, articles, strict=True):
        tokens, source = tokenizer.tokenize(summary), tokenizer.tokenize(article)
        length += len(tokens)
        for n, counts in novel.items():
            grams, seen = _ngrams(tokens, n), set(_ngrams(source, n))
            counts[0] += sum(g not in seen for g in grams)
            counts[1] += len(grams)
        trigrams = _ngrams(tokens, 3)
        repeated += len(trigrams) != len(set(trigrams))
        unknown += UNK_SURFACE in summary
    count = len(summaries)

    def share(part, whole):
        return round(100.0 * part / whole, 2) if whole else 0.0

    return {"novel_bigrams": share(*novel[2]), "novel_trigrams": share(*novel[3]),
            "repeated_trigram_summaries": share(repeated, count),
            "unk_summaries": share(unknown, count),
            "mean_tokens": round(length / count, 2)}


def format_statistics(stats: dict) -> str:
    return (f"novel bigrams {stats['novel_bigrams']:.2f}%  trigrams "
            f"{stats['novel_trigrams']:.2f}%  repeated-trigram summaries "
            f"{stats['repeated_trigram_summaries']:.2f}%  <unk> summaries "
            f"{stats['unk_summaries']:.2f}%  mean length {stats['mean_tokens']:.1f} tokens")
