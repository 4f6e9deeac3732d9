"""Training throughput of one `model.fit` step (forward, backward, Adam, label-smoothed loss).

    python -m bench.train_step [--configs demo small] [--jit both|on|off]

Batch: 32 sentences x 32 source x 32 target tokens (the peers' workload); the `demo` config
is the model of train/configs/demo.yaml with its own vocabulary size.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from bench.common import machine, peak_rss_mb, print_table, time_calls, write_json  # noqa: E402
from keras_transformer.config import TransformerConfig  # noqa: E402
from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy  # noqa: E402
from keras_transformer.models.transformer import Transformer  # noqa: E402

CONFIGS = {
    "demo": TransformerConfig.preset("tiny", d_model=128, num_heads=4, d_ff=512,
                                     source_vocab_size=1000, target_vocab_size=1000,
                                     share_embeddings=True),
    "small": TransformerConfig.preset("small", share_embeddings=True),
    "base": TransformerConfig.preset("base", share_embeddings=True),
}


def measure(name: str, jit: bool, batch: int, length: int) -> dict:
    """Median step time after warm-up; the first call (tracing, XLA compile) timed apart."""
    keras.utils.set_random_seed(0)
    config = CONFIGS[name]
    model = Transformer(config)
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=MaskedLabelSmoothedCrossEntropy(0.1), jit_compile=jit)
    rng = np.random.default_rng(0)
    vocab = config.target_vocab_size
    src = rng.integers(4, vocab, (batch, length)).astype("int32")
    tgt_in = rng.integers(4, vocab, (batch, length)).astype("int32")
    tgt_out = rng.integers(4, vocab, (batch, length)).astype("int32")
    start = time.perf_counter()
    model.train_on_batch((src, tgt_in), tgt_out)
    first_call_s = time.perf_counter() - start
    timing = time_calls(lambda: model.train_on_batch((src, tgt_in), tgt_out), warmup=2,
                        repeats=10, min_seconds=3.0)
    return {"config": name, "jit_compile": jit, "batch": batch, "length": length,
            "first_call_s": first_call_s,
            "target_tokens_per_s": batch * length / timing["median_s"], **timing}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["demo", "small"], choices=CONFIGS)
    parser.add_argument("--jit", choices=["both", "on", "off"], default="both")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--token-budget", type=int, default=0,
                        help="instead of --batch/--length: the demo's bucket shapes, "
                             "batch = budget // length for each of --lengths")
    parser.add_argument("--lengths", type=int, nargs="+", default=[12, 24, 36, 48])
    parser.add_argument("--out", default="bench/results/train_step.json")
    args = parser.parse_args(argv)
    jits = {"both": [False, True], "on": [True], "off": [False]}[args.jit]
    shapes = ([(args.token_budget // n, n) for n in args.lengths] if args.token_budget
              else [(args.batch, args.length)])
    results = [measure(c, j, b, n) for c in args.configs for (b, n) in shapes for j in jits]
    rows = [[r["config"], f"{r['batch']}x{r['length']}", "on" if r["jit_compile"] else "off",
             f"{r['first_call_s']:.1f}", f"{r['median_s'] * 1000:.0f}",
             f"{r['p25_s'] * 1000:.0f}-{r['p75_s'] * 1000:.0f}", r["runs"],
             f"{r['target_tokens_per_s']:,.0f}"] for r in results]
    print_table(["config", "batch", "XLA", "first call s", "ms/step", "p25-p75", "runs",
                 "target tok/s"], rows)
    print(f"peak RSS {peak_rss_mb():,.0f} MiB")
    write_json(args.out, {"machine": machine(), "results": results,
                          "peak_rss_mb": peak_rss_mb()})


if __name__ == "__main__":
    main()
