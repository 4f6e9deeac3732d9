"""What dropout's random mask costs in a training step's forward and backward pass, with and
without XLA: Keras' mask (TF's stateless RNG), ours (keras_transformer.layers.dropout, an
integer hash) and no dropout at all.

    python -m bench.dropout [--configs small] [--quick]

Batch 32 x 32 x 32 (8 x 8 x 8 with --quick), random ids; the loss is the label-smoothed
cross-entropy; no optimizer update. The six functions are timed in interleaved rounds
(bench.common.time_interleaved), so their ratios share the host's drift.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.common import (  # noqa: E402
    CONFIGS,
    TRAIN_BATCH,
    TRAIN_LENGTH,
    add_results_option,
    build_model,
    payload,
    print_table,
    results_dir,
    time_interleaved,
    write_json,
)
from keras_transformer.command_line import add_debug_flag, entry_point  # noqa: E402

MASKS = ("keras", "hash", "none")


@contextlib.contextmanager
def mask_kind(kind: str):
    """Our Dropout draws its mask the `kind` way while functions are traced inside."""
    import keras

    from keras_transformer.layers.dropout import Dropout

    ours = Dropout.call
    if kind == "keras":
        Dropout.call = keras.layers.Dropout.call
    elif kind == "none":
        Dropout.call = lambda self, inputs, training=False: inputs
    try:
        yield
    finally:
        Dropout.call = ours


def measure(name: str, size: int, length: int, timing: dict) -> list[dict]:
    """One config's six cells (mask x XLA), timed in interleaved rounds."""
    import numpy as np
    import tensorflow as tf

    from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy

    config = CONFIGS[name]
    model = build_model(config)
    loss_fn = MaskedLabelSmoothedCrossEntropy(0.1)
    rng = np.random.default_rng(0)
    src, tgt_in, tgt_out = (tf.constant(rng.integers(4, config.target_vocab_size,
                                                     (size, length)).astype("int32"))
                            for _ in range(3))

    def forward_backward():
        with tf.GradientTape() as tape:
            loss = loss_fn(tgt_out, model((src, tgt_in), training=True))
        return tape.gradient(loss, model.trainable_variables)

    cells, fns = [], []
    for kind in MASKS:
        for jit in (False, True):
            fn = tf.function(forward_backward, jit_compile=jit)
            with mask_kind(kind):
                fn()  # traces (and compiles) with this mask
            cells.append((kind, jit))
            fns.append(lambda fn=fn: fn()[0].numpy())
    return [{"config": name, "mask": kind, "jit_compile": jit, "batch": size,
             "length": length, **t}
            for (kind, jit), t in zip(cells, time_interleaved(fns, **timing), strict=True)]


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=None, choices=CONFIGS,
                        help="default small (demo with --quick)")
    parser.add_argument("--quick", action="store_true", help="demo config, 8 x 8 x 8")
    add_results_option(parser)
    add_debug_flag(parser)
    args = parser.parse_args(argv)

    size = 8 if args.quick else TRAIN_BATCH
    length = 8 if args.quick else TRAIN_LENGTH
    timing = ({"warmup": 1, "repeats": 1, "min_seconds": 0.0} if args.quick
              else {"warmup": 1, "repeats": 5, "min_seconds": 10.0})
    rows = [row for name in args.configs or (["demo"] if args.quick else ["small"])
            for row in measure(name, size, length, timing)]
    print_table(["config", "mask", "XLA", "ms fwd+bwd", "p25-p75", "runs"],
                [[r["config"], r["mask"], "on" if r["jit_compile"] else "off",
                  f"{r['median_s'] * 1000:.0f}",
                  f"{r['p25_s'] * 1000:.0f}-{r['p75_s'] * 1000:.0f}", r["runs"]]
                 for r in rows])
    path = write_json(results_dir(args) / "dropout.json",
                      {**payload("dropout", quick=args.quick), "results": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
