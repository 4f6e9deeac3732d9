"""keras-hub's side of `bench.train_step --keras-hub`, run in the peer environment (tensorflow,
keras, keras-hub; no keras_transformer):

    /tmp/peers/tf/bin/python -m bench.train_step_keras_hub --out FILE [--configs small base]
        [--jit off on] [--precision float32 mixed_bfloat16]

The step of ../shared/peers/train_keras_hub.py (its model, `keras_model.Seq2SeqParts`, the
label-smoothed loss, Adam at 1e-4, `train_on_batch` on 32 x 32 x 32 random ids, its timer)
under each Keras dtype policy: that script measures float32 only, and a side's best setting
may be bfloat16 on a CPU with AVX-512 BF16. The policy is set before the model is built, as
Keras layers read it at construction.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PEERS = Path(__file__).resolve().parents[2] / "shared" / "peers"
sys.path.insert(0, str(PEERS))

import common  # noqa: E402  (the peers' common.py)
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras_model import Seq2SeqParts, label_smoothed_loss  # noqa: E402


def measure(config: str, jit: bool, precision: str, warmup: int, steps: int) -> dict:
    vocab = common.CONFIGS[config]["vocab"]
    rng = random.Random(common.SEED)
    batch, src_len, tgt_len = common.TRAIN_BATCH, common.TRAIN_SRC_LEN, common.TRAIN_TGT_LEN
    src = np.array(common.random_ids(rng, batch, src_len, vocab), dtype=np.int32)
    tgt = np.array(common.random_ids(rng, batch, tgt_len, vocab), dtype=np.int32)
    dec_in = np.concatenate([np.full((batch, 1), common.pad_id(vocab), np.int32), tgt[:, :-1]],
                            axis=1)
    previous = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(precision)
    try:
        model = Seq2SeqParts(config).keras_model()
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=common.LEARNING_RATE),
                      loss=label_smoothed_loss, jit_compile=jit)
        t = common.time_calls(lambda: model.train_on_batch([src, dec_in], tgt), warmup, steps)
    finally:
        keras.mixed_precision.set_global_policy(previous)
        keras.backend.clear_session()
    best, basis = common.best_estimate(t)
    return {"side": "keras-hub", "config": config, "jit_compile": jit, "precision": precision,
            "batch": batch, "length": tgt_len, "median_s": best, "estimate": basis,
            "target_tokens_per_s": batch * tgt_len / best, "timing": t}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--configs", nargs="+", default=["small", "base"])
    parser.add_argument("--jit", nargs="+", choices=["off", "on"], default=["off", "on"])
    parser.add_argument("--precision", nargs="+", default=["float32", "mixed_bfloat16"],
                        choices=["float32", "mixed_bfloat16"])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="minimum timed steps")
    args = parser.parse_args(argv)
    rows = [measure(c, j == "on", p, args.warmup, args.steps)
            for c in args.configs for p in args.precision for j in args.jit]
    args.out.write_text(json.dumps({"results": rows, "versions": {
        "keras": keras.__version__, "keras_hub": __import__("keras_hub").__version__}},
        indent=1, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
