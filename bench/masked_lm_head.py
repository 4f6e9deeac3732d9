"""A masked language model's train step with BERT's head at every position against the head at
the masked positions only (`TransformerMaskedLM` called with the positions).

    python -m bench.masked_lm_head [--configs small] [--batch 64] [--length 64]
                                   [--rounds 15] [--round-steps 10] [--jit off|on] [--quick]

The batch has vi_masked_lm's shape (4,096 tokens: 64 rows of 64 pieces, random ordinary
pieces then EOS) and is masked once at 15% by keras_transformer.text.masking with the task's
default cap on masked pieces a row; both heads train on it, one in the gathered form
(masked_positions) and one at every position. The two models start from the same weights and
are compiled as the masked_lm task compiles them (Adam, the token loss without smoothing, the
masked accuracy); their steps alternate in rounds of --round-steps (common.time_interleaved),
so that a load that changes during the run falls on both alike. Prints the CPU, each head's
steps and masked target tokens per second, their ratio and the analytic FLOPs of each step;
writes masked_lm_head.json in the results directory.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.common import (  # noqa: E402
    CONFIGS,
    SEED,
    add_results_option,
    payload,
    peak_rss_mb,
    print_table,
    results_dir,
    time_interleaved,
    write_json,
)
from bench.flops import masked_lm_step_flops  # noqa: E402
from keras_transformer.command_line import add_debug_flag, entry_point, int_in  # noqa: E402

MASK_RATE = 0.15
# The ids the batch reserves: padding, unknown, BOS, EOS and [MASK] (vi_masked_lm's order).
PAD, UNK, BOS, EOS, MASK = 0, 1, 2, 3, 4


def masked_batch(vocab: int, batch: int, length: int):
    """(inputs, targets) at every position and (inputs, positions, labels) gathered, of one
    batch masked by the task's rule and cap."""
    import numpy as np

    from keras_transformer.text.masking import (
        default_max_predictions,
        mask_batch,
        masked_positions,
    )

    rng = np.random.default_rng(SEED)
    ids = rng.integers(MASK + 1, vocab, size=(batch, length)).astype("int32")
    ids[:, -1] = EOS
    cap = default_max_predictions(MASK_RATE, length)
    inputs, targets = mask_batch(ids, 0, rate=MASK_RATE, mask_id=MASK, pad_id=PAD,
                                 vocab_size=vocab, special_ids=(PAD, UNK, BOS, EOS), seed=SEED,
                                 max_predictions=cap)
    positions, labels = masked_positions(targets, PAD, cap)
    return (inputs.numpy(), targets.numpy()), (inputs.numpy(), positions.numpy(),
                                               labels.numpy())


def compiled_pair(config, jit: bool):
    """Two masked LMs with the same weights, compiled as the masked_lm task compiles them."""
    import keras

    from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
    from keras_transformer.metrics import MaskedAccuracy
    from keras_transformer.models.masked_lm import TransformerMaskedLM

    keras.utils.set_random_seed(SEED)
    models = []
    for _ in range(2):
        model = TransformerMaskedLM(config)
        model.build()
        if models:
            model.set_weights(models[0].get_weights())
        model.compile(optimizer=keras.optimizers.Adam(1e-4),
                      loss=MaskedLabelSmoothedCrossEntropy(0.0, PAD),
                      metrics=[MaskedAccuracy(PAD, name="masked_accuracy")], jit_compile=jit)
        models.append(model)
    return models


def measure(name: str, batch: int, length: int, jit: bool, rounds: int,
            round_steps: int, warmup: int) -> dict:
    config = CONFIGS[name]
    (inputs, targets), (_, positions, labels) = masked_batch(config.source_vocab_size, batch,
                                                             length)
    every, gathered = compiled_pair(config, jit)
    feeds = {"all positions": (every, inputs, targets),
             "masked positions": (gathered, (inputs, positions), labels)}
    first = {}
    for head, (model, x, y) in feeds.items():
        start = time.perf_counter()
        model.train_on_batch(x, y)
        first[head] = {"first_call_s": time.perf_counter() - start}

    def steps(model, x, y):
        return lambda: [model.train_on_batch(x, y) for _ in range(round_steps)]

    timings = time_interleaved([steps(*feed) for feed in feeds.values()], warmup=warmup,
                               repeats=rounds, min_seconds=0.0)
    masked = int((targets != PAD).sum())
    rows = []
    for (head, _), t in zip(feeds.items(), timings, strict=True):
        per_step = t["median_s"] / round_steps
        predictions = length if head == "all positions" else positions.shape[1]
        flops = masked_lm_step_flops(config, batch, length, predictions)
        rows.append({"config": name, "head": head, "batch": batch, "length": length,
                     "predictions_per_row": predictions, "jit_compile": jit,
                     "steps": t["runs"] * round_steps, "round_steps": round_steps,
                     "steps_per_s": 1 / per_step, "masked_tokens_per_batch": masked,
                     "target_tokens_per_s": masked / per_step,
                     "model_flops_per_step": flops, **first[head], **t})
    return {"rows": rows, "ratio": rows[1]["steps_per_s"] / rows[0]["steps_per_s"],
            "flops_ratio": rows[0]["model_flops_per_step"] / rows[1]["model_flops_per_step"]}


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=None, choices=CONFIGS,
                        help="default small (demo with --quick)")
    parser.add_argument("--batch", type=int_in(1), default=None, help="64 (8 with --quick)")
    parser.add_argument("--length", type=int_in(2), default=None, help="64 (16 with --quick)")
    parser.add_argument("--rounds", type=int_in(1), default=None,
                        help="timed rounds, each head's --round-steps steps in each (15; 2 "
                             "with --quick)")
    parser.add_argument("--round-steps", type=int_in(1), default=None,
                        help="steps of one head in a round (10; 2 with --quick)")
    parser.add_argument("--jit", choices=["off", "on"], default="off",
                        help="XLA (off: what precision auto chose for vi_masked_lm on a CPU "
                             "without bfloat16 dot products)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: demo config, a small batch, few steps")
    add_results_option(parser)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    quick = args.quick
    configs = args.configs or (["demo"] if quick else ["small"])
    batch = args.batch or (8 if quick else 64)
    length = args.length or (16 if quick else 64)
    rounds = args.rounds or (2 if quick else 15)
    round_steps = args.round_steps or (2 if quick else 10)
    meta = payload("masked_lm_head", quick=quick, mask_rate=MASK_RATE)
    # The model name lscpu prints, with the family and model numbers that tell generations
    # apart (keras_transformer.cpu.cpu_model).
    print(f"CPU: {meta['machine']['cpu_model']}, {meta['machine']['usable_cores']} usable cores")
    results, ratios = [], {}
    for name in configs:
        measured = measure(name, batch, length, args.jit == "on", rounds, round_steps,
                           warmup=0 if quick else 1)
        for row in measured["rows"]:
            row["peak_rss_mb"] = peak_rss_mb()
        results += measured["rows"]
        ratios[name] = {"steps_per_s_ratio": measured["ratio"],
                        "flops_ratio": measured["flops_ratio"]}
    print_table(["config", "head", "batch", "predictions", "XLA", "steps", "ms/step",
                 "steps/s", "masked tok/s", "GFLOP/step", "first call s"],
                [[r["config"], r["head"], f"{r['batch']}x{r['length']}",
                  r["predictions_per_row"], "on" if r["jit_compile"] else "off", r["steps"],
                  f"{1000 / r['steps_per_s']:.0f}", f"{r['steps_per_s']:.2f}",
                  f"{r['target_tokens_per_s']:,.0f}", f"{r['model_flops_per_step'] / 1e9:.1f}",
                  f"{r['first_call_s']:.1f}"] for r in results])
    for name, r in ratios.items():
        print(f"{name}: masked-positions head / all-positions head: "
              f"{r['steps_per_s_ratio']:.2f}x steps per second (analytic FLOPs "
              f"{r['flops_ratio']:.2f}x fewer)")
    path = write_json(results_dir(args) / "masked_lm_head.json",
                      {**meta, "results": results, "ratios": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
