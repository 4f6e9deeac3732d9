"""Continue a prompt with a language model's export directory.

    python -m export.generate --export exports/lm --prompt "..." [--max-new-tokens 60]
        [--temperature 0.8 --top-k 40 --top-p 0.9 --seed 1 --num-samples 3] [--runtime onnx]

Greedy when none of --temperature, --top-k, --top-p is given; otherwise sampled in NumPy
(keras_transformer.decoding.sample_search, as TransformerLM.generate samples), at temperature
1 unless one is given. A seed reproduces its samples, in every runtime whose logits agree.
Prints each sample (the prompt and its continuation) on its own line. The onnx and tflite
runtimes need only their runtime package, numpy and sentencepiece.

Exit codes: 0 generated; 2 bad usage or input (an empty prompt, one longer than the model
reads, an option out of range, a missing or damaged export, an export that is not a language
model's, a runtime whose package is not installed); 1 a runtime failed on sound input; 130
interrupted. It writes nothing but its output.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from keras_transformer.command_line import (
    add_debug_flag,
    command,
    entry_point,
    float_in,
    int_in,
    search_bounds,
)
from keras_transformer.decoding import SearchSettings

from .formats import RUNTIMES
from .text_io import check_run_option

SAMPLING = ("temperature", "top_k", "top_p")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=command("export.generate"),
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True, help="export directory of a language model")
    parser.add_argument("--prompt", required=True, help="text to continue")
    parser.add_argument("--max-new-tokens", type=int_in(1, 4096), default=60,
                        help="tokens to generate, 1 to 4096 (default 60; fewer when the prompt "
                             "leaves less room in the model's maximum length)")
    parser.add_argument("--temperature", type=float_in(*search_bounds("temperature"), low_open=True), default=None,
                        help="sampling temperature, in (0, 100] (default: greedy, or 1 with "
                             "--top-k/--top-p)")
    parser.add_argument("--top-k", type=int_in(1), default=None,
                        help="sample among the k most likely tokens, k >= 1 (default: all)")
    parser.add_argument("--top-p", type=float_in(0, 1, low_open=True), default=None,
                        help="sample among the most likely tokens holding this probability, in "
                             "(0, 1] (default 1: all)")
    parser.add_argument("--seed", type=int_in(0, 2**63 - 1), default=0,
                        help="seed of the samples (default 0)")
    parser.add_argument("--num-samples", type=int_in(1, 256), default=1,
                        help="samples of the prompt, 1 to 256 (default 1)")
    parser.add_argument("--runtime", default="onnx", choices=RUNTIMES)
    parser.add_argument("--variant", default="float32", choices=("float32", "fp16", "int8"),
                        help="quantized variant (tflite: fp16/int8, onnx: int8)")
    parser.add_argument("--run", default=None, help="training run (keras runtime only)")
    add_debug_flag(parser)
    return parser.parse_args(argv)


def sampling(args: argparse.Namespace) -> bool:
    """Whether a sampling option is given (else the search is greedy)."""
    return any(getattr(args, name) is not None for name in SAMPLING)


def search_settings(args: argparse.Namespace) -> SearchSettings:
    """The search of Generator.generate: greedy (temperature 0) unless a sampling option is
    given."""
    return SearchSettings.for_sampling(args.temperature, args.top_k, args.top_p, args.seed,
                                       args.num_samples)


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    if not args.prompt.strip():  # before loading anything
        raise ValueError("--prompt is empty; give some text to continue")
    if args.num_samples > 1 and not sampling(args):
        # as train.generate: greedy search would print the same text num_samples times
        raise ValueError(f"--num-samples {args.num_samples} needs sampling: greedy search "
                         f"gives one text; add --temperature, --top-k or --top-p")
    check_run_option(args.run, args.runtime)
    from .kinds import open_export

    generator = open_export(args.export, args.runtime, args.variant, args.run, kind="lm",
                            tool="export.generate")
    texts = generator.generate(args.prompt, args.max_new_tokens, search_settings(args))
    sys.stdout.write("".join(text + "\n" for text in texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
