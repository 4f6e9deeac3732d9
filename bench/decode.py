"""Decoding speed of the Keras runtime: tokens/s and latency per batch, XLA on and off.

    python -m bench.decode [--configs demo small] [--new-tokens 32]

Source length 32, exactly --new-tokens generated per sentence (EOS is masked out so that no
row stops early), batch 1 and 16, greedy and beam 4, random weights.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bench.common import machine, peak_rss_mb, print_table, time_calls, write_json  # noqa: E402
from bench.train_step import CONFIGS  # noqa: E402
from keras_transformer.decoding import beam_search, greedy_search  # noqa: E402
from keras_transformer.models.transformer import Transformer  # noqa: E402
from keras_transformer.translator import KerasStepper  # noqa: E402


def decode_once(model, source, beam, new_tokens, jit):
    c = model.config
    stepper = KerasStepper(model, source, beam_size=beam, max_length=new_tokens,
                           jit_compile=jit)

    def step(tokens, index):
        logits = stepper.step(tokens, index)
        logits[:, c.eos_id] = -np.inf  # exactly new_tokens per row, as the peers measure
        return logits

    if beam == 1:
        result = greedy_search(step, len(source), bos_id=c.bos_id, eos_id=c.eos_id,
                               max_length=new_tokens)
    else:
        result = beam_search(step, stepper.reorder, len(source), beam_size=beam,
                             bos_id=c.bos_id, eos_id=c.eos_id, max_length=new_tokens)
    assert result.tokens.shape == (len(source), new_tokens), result.tokens.shape


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["demo", "small"], choices=CONFIGS)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--out", default="bench/results/decode.json")
    args = parser.parse_args(argv)
    results = []
    for name in args.configs:
        config = CONFIGS[name].replace(max_target_length=max(256, args.new_tokens))
        model = Transformer(config)
        model.build()
        rng = np.random.default_rng(0)
        for jit in (False, True):
            for batch in (1, 16):
                source = rng.integers(4, config.source_vocab_size,
                                      (batch, args.source_length)).astype("int32")
                for beam in (1, 4):
                    timing = time_calls(
                        lambda: decode_once(model, source, beam, args.new_tokens, jit),  # noqa: B023
                        warmup=2, repeats=5, min_seconds=2.0)
                    results.append({"config": name, "jit_compile": jit, "batch": batch,
                                    "beam": beam, "new_tokens": args.new_tokens,
                                    "tokens_per_s": batch * args.new_tokens / timing["median_s"],
                                    **timing})
    rows = [[r["config"], "on" if r["jit_compile"] else "off", r["batch"], r["beam"],
             f"{r['median_s'] * 1000:.0f}", f"{r['tokens_per_s']:,.0f}"] for r in results]
    print_table(["config", "XLA", "batch", "beam", "ms/batch", "tokens/s"], rows)
    print(f"peak RSS {peak_rss_mb():,.0f} MiB")
    write_json(args.out, {"machine": machine(), "results": results,
                          "peak_rss_mb": peak_rss_mb()})


if __name__ == "__main__":
    main()
