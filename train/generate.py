"""python -m train.generate: continue a prompt with a trained language model run
(`task: language_model`), greedily or by sampling (temperature, top-k, top-p).

Greedy unless --temperature, --top-k or --top-p is given; then each sample is drawn from the
model's distribution at that temperature, cut to its top k tokens and its nucleus of
probability p. One generator seeded by --seed draws every sample, so a seed reproduces the
text. Each text (the prompt and its continuation) goes to stdout on its own line; nothing is
written to disk.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from keras_transformer.command_line import (
    CommandError,
    add_debug_flag,
    command,
    entry_point,
    float_in,
    int_in,
    search_bounds,
)
from keras_transformer.decoding import SearchSettings

MAX_NEW_TOKENS, MAX_SAMPLES = 4096, 100
SAMPLING_FLAGS = ("temperature", "top_k", "top_p")


def parse_args(argv):
    import argparse

    parser = argparse.ArgumentParser(
        prog=command("train.generate"),
        description="Continue a prompt with a trained language model run; greedy unless a "
                    "sampling flag (--temperature, --top-k, --top-p) is given. Exit codes: 0 "
                    "done, 2 bad usage or input, 1 a failure while working, 130 interrupted.")
    parser.add_argument("--run", required=True, help="run directory of task language_model, "
                                                     "e.g. runs/vi_news_lm")
    parser.add_argument("--prompt", required=True, help="the text to continue")
    parser.add_argument("--model", default="model.keras",
                        help="model file in the run directory (e.g. best.keras)")
    parser.add_argument("--max-new-tokens", type=int_in(1, MAX_NEW_TOKENS), default=60,
                        help=f"new tokens at most, 1 to {MAX_NEW_TOKENS} (default 60; fewer "
                             f"when the prompt leaves the model less room)")
    parser.add_argument("--temperature", type=float_in(*search_bounds("temperature"), low_open=True),
                        help=f"sampling temperature, in (0, {search_bounds('temperature')[1]:g}] (default 1 "
                             f"when sampling)")
    parser.add_argument("--top-k", type=int_in(1),
                        help="sample among the k most probable tokens only (default: all)")
    parser.add_argument("--top-p", type=float_in(0, 1, low_open=True),
                        help="sample within the smallest set of tokens holding probability p, "
                             "in (0, 1] (default 1: all)")
    parser.add_argument("--seed", type=int_in(0, 2**32 - 1),
                        help="seed of the sampling; the same seed gives the same text "
                             "(default: a fresh one, printed on stderr)")
    parser.add_argument("--num-samples", type=int_in(1, MAX_SAMPLES), default=1,
                        help=f"texts to sample, 1 to {MAX_SAMPLES} (default 1; more needs a "
                             f"sampling flag)")
    add_debug_flag(parser)
    return parser.parse_args(argv)


def load_language_model_run(run: Path, model_name: str):
    """(model, tokenizer) of a language_model run directory; errors name what is missing."""
    from .config import load_config
    from .run_model import load_run_model
    from .tokenizers import load_run_tokenizers

    if not run.is_dir():
        raise FileNotFoundError(f"run directory not found: {run}")
    if Path(model_name).name != model_name:
        raise CommandError(f"--model {model_name!r} must be a file name in the run directory")
    if not (run / "config.yaml").is_file():
        raise FileNotFoundError(f"{run} holds no config.yaml; is it a run directory?")
    task = load_config(run / "config.yaml").task
    if task != "language_model":
        raise CommandError(f"{run} is a {task} run; train.generate needs a run of task "
                           f"language_model")
    model = load_run_model(run / model_name)
    return model, load_run_tokenizers(run)[1]


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not args.prompt.strip():
        raise CommandError("--prompt is empty; give some text to continue")
    sampling = any(getattr(args, flag) is not None for flag in SAMPLING_FLAGS)
    if args.num_samples > 1 and not sampling:
        raise CommandError(f"--num-samples {args.num_samples} needs sampling: greedy search "
                           f"gives one text; add --temperature, --top-k or --top-p")
    seed = args.seed
    if sampling and seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
        print(f"seed {seed} (--seed {seed} gives this text again)", file=sys.stderr)

    from .tasks.language_model import encode_prompt, generate_texts

    model, tokenizer = load_language_model_run(Path(args.run), args.model)
    limit = model.config.max_target_length
    room = limit - len(encode_prompt(tokenizer, args.prompt, limit))
    if args.max_new_tokens > room:
        print(f"note: at most {room} new tokens fit after this prompt in the model's "
              f"{limit} positions", file=sys.stderr)
    settings = SearchSettings(temperature=(args.temperature or 1.0) if sampling else 0.0,
                              top_k=args.top_k or 0, top_p=args.top_p or 1.0, seed=seed,
                              num_samples=args.num_samples)
    texts = generate_texts(model, tokenizer, args.prompt, max_new_tokens=args.max_new_tokens,
                           settings=settings)
    for text in texts:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
