"""Bottom-up summarization on the dev split: the copy-attention model (a summarization run)
reading only the sentences a selector keeps (keras_transformer.text.bottom_up), for each
epsilon (or each k of --top-k: the selector's k best sentences), beside the copy model alone
and the Lead baselines: the choice of the pipeline's epsilon. With --source extract the copy
model reads the kept sentences alone, in article order (extract then abstract), instead of the
article with the other sentences masked.

The selector is an extractive_summarization run's sentence probabilities (--extractive), a
content_selection run's word probabilities (--tagger: the token-level selector, which masks
the article by epsilon only), or the greedy oracle's sentences (--oracle: probability 1 for
the sentences the oracle picks against the reference, 0 for the others), the most that
selecting sentences can give this copy model. Epsilon 0 keeps every piece: the copy model
alone.

    python -m bench.bottom_up --copy runs/vietnews --extractive runs/vietnews_ext \\
        --articles 300 --epsilon 0 0.1 0.2 0.3 0.5
    python -m bench.bottom_up --copy runs/vietnews --tagger runs/vietnews_sel \\
        --articles 300 --epsilon 0.1 0.2 0.3 0.4 0.5
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS, payload, write_json
from keras_transformer.command_line import (
    CommandError,
    add_debug_flag,
    add_search_constraints,
    entry_point,
    float_in,
    int_in,
    search_bounds,
)
from keras_transformer.decoding.settings import SEQ2SEQ_KEYS
from keras_transformer.text.bottom_up import SOURCES, BottomUpSummarizer, check_epsilon
from keras_transformer.text.rouge import ROUGE_TYPES, rouge
from keras_transformer.text.summary_stats import summary_statistics
from train.scoring import lead_baselines, oracle

OUT = RESULTS / "vietnews" / "bottom_up_dev.json"
MERGE_KEYS = ("copy_run", "copy_model", "selector", "level", "epsilon", "top_k", "source",
              "articles", *SEQ2SEQ_KEYS)


def load_task(run: Path, task_name: str, model: str = "model.keras"):
    """(the run's task with its tokenizers, its `model`) for a finished run of
    `task_name`."""
    from train.tasks import load_run

    try:
        return load_run(run, task_name, model)
    except ValueError as err:
        raise CommandError(str(err)) from None


def epsilon_value(text: str) -> float:
    try:
        return check_epsilon(float(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


@entry_point
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copy", required=True, type=Path,
                        help="a summarization run with copy attention")
    parser.add_argument("--copy-model", default="model.keras",
                        help="the copy run's model file (default model.keras; e.g. best.keras)")
    selector = parser.add_mutually_exclusive_group(required=True)
    selector.add_argument("--extractive", type=Path, help="an extractive_summarization run")
    selector.add_argument("--tagger", type=Path,
                          help="a content_selection run (word probabilities; mask by epsilon)")
    selector.add_argument("--oracle", action="store_true",
                          help="the greedy oracle's sentences (needs the references)")
    parser.add_argument("--epsilon", type=epsilon_value, nargs="+", default=[0.0, 0.2, 0.5])
    parser.add_argument("--top-k", type=int_in(1, 64), nargs="+", default=[],
                        help="also keep the selector's K best sentences, for each K")
    parser.add_argument("--source", choices=SOURCES, default="mask",
                        help="mask: the article, other sentences masked (default); extract: "
                             "the kept sentences alone")
    parser.add_argument("--articles", type=int_in(1), default=300,
                        help="the dev split's first N articles")
    parser.add_argument("--beam", type=int_in(*search_bounds("beam_size")), default=None,
                        help="beam size (default: the copy run's eval.beam_size)")
    parser.add_argument("--alpha", type=float_in(*search_bounds("alpha")), default=None,
                        help="length penalty (default: the copy run's eval.alpha)")
    add_search_constraints(parser, "the copy run's")
    parser.add_argument("--out", type=Path, default=OUT)
    add_debug_flag(parser)
    args = parser.parse_args(argv)

    from keras_transformer.translator import keras_translator
    from train.data import load_summarization, split_sentences

    level = "word" if args.tagger else "sentence"
    if args.tagger and (args.top_k or args.source != "mask"):
        raise CommandError("--tagger selects words by --epsilon, with --source mask; --top-k "
                           "and --source extract take a sentence selector")
    copy_task, copy_model = load_task(args.copy, "summarization", args.copy_model)
    if not copy_model.config.copy_attention:
        raise CommandError(f"{args.copy} has no copy attention; bottom-up selection masks "
                           f"a copy model's attention")
    dev = load_summarization(copy_task.config.data)["dev"]
    articles, references = dev.articles[: args.articles], dev.summaries[: args.articles]
    if args.oracle:
        reference_of = dict(zip(articles, references, strict=True))

        def score(texts):
            out = []
            for text in texts:
                sentences = split_sentences(text)
                chosen = set(oracle(sentences, reference_of[text]))
                out.append((sentences, np.array([float(i in chosen)
                                                 for i in range(len(sentences))])))
            return out

        selector_name = "oracle"
    else:
        selector_run = args.tagger or args.extractive
        task, selector_model = load_task(selector_run, "content_selection" if args.tagger
                                         else "extractive_summarization")
        scorer = task.make_scorer(selector_model)
        # The selector reads articles as its own run's data did (its word joints), as the
        # summarization task's pipeline does; each article is read once, whatever the rule.
        prepare = task.prepare_sources
        cache: dict[str, tuple] = {}

        def score(texts):
            missing = [t for t in texts if t not in cache]
            if missing:
                cache.update(zip(missing, scorer.score(prepare(missing)), strict=True))
            return [cache[t] for t in texts]

        selector_name = str(selector_run)
    given = {"beam_size": args.beam, "alpha": args.alpha, "min_length": args.min_length,
             "no_repeat_ngram_size": args.no_repeat_ngram_size}
    settings = copy_task.search_settings(**{k: v for k, v in given.items() if v is not None})
    translator = keras_translator(copy_model, copy_task.source_tok, copy_task.target_tok)
    rows = []
    result = payload("bottom_up_dev", copy_run=str(args.copy), copy_model=args.copy_model,
                     selector=selector_name,
                     dev_articles=len(articles),
                     leads=lead_baselines(articles, references), results=rows)
    rules = [(epsilon, 0) for epsilon in args.epsilon] + [(0.0, k) for k in args.top_k]
    for epsilon, top_k in rules:
        summarizer = BottomUpSummarizer(score, translator, epsilon, top_k=top_k,
                                        source=args.source, level=level)
        start = time.perf_counter()
        summaries = summarizer.summarize(articles, settings,
                                         batch_size=copy_task.config.eval.batch_size)
        seconds = time.perf_counter() - start
        scores = {k: v for k, v in rouge(summaries, references).items() if k in ROUGE_TYPES}
        row = {"copy_run": str(args.copy), "copy_model": args.copy_model,
               "selector": selector_name, "level": level, "epsilon": epsilon, "top_k": top_k,
               "source": args.source, "articles": len(articles),
               **settings.to_dict(SEQ2SEQ_KEYS), **scores, **summarizer.stats.to_dict(),
               "summary_stats": summary_statistics(summaries, articles),
               "seconds": round(seconds, 1)}
        rows.append(row)
        rule = f"top {top_k}" if top_k else f"epsilon {epsilon:.2f}"
        print(f"{args.source} {rule}: " + " / ".join(f"{scores[k]:.2f}" for k in ROUGE_TYPES)
              + f"  kept {row['kept_share']:.0%} of pieces, {row['unselected_articles']} "
              f"articles unselected, {seconds:.0f} s", flush=True)
    for name, scores in result["leads"].items():
        print(f"{name:6s} " + " / ".join(f"{scores[k]:.2f}" for k in ROUGE_TYPES))
    # Rows of other copy models, selectors, rules and searches from earlier runs stay.
    write_json(args.out, result, merge_keys=MERGE_KEYS)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
