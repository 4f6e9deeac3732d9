"""A fixed number of training steps of a recipe, timed: step time, target tokens/s and the
share of the device's bf16 peak the matmuls reached; then the model saved for export.

    KERAS_BACKEND=jax python -m bench.gpu_train --config train/configs/demo.yaml \
        --steps 200 --out runs/gpu_demo [--precision mixed_bfloat16] [--require-gpu]

The run is the training CLI's up to model.fit (the task's data, tokenizer, model, optimizer and
loss; training.steps_per_epoch = --steps, one epoch, no dev scoring), on whichever Keras
backend runs; bench/gpu_train.sh runs the demo and the summarization recipe under JAX on a GPU
machine. The first --warmup steps (compiles of each new batch shape) are left out of the step
time. FLOPs are the analytic matmul count of bench.flops for each batch's shape; the peak is
--peak-tflops, else the bf16 dense peak of a known GPU by its name, else none (on a CPU).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from pathlib import Path

from keras_transformer.command_line import (
    CommandError,
    add_debug_flag,
    check_keras_backend,
    entry_point,
    int_in,
)

# bf16 dense tensor-core peaks (TFLOP/s) of the GPUs this was written for, by device name.
GPU_BF16_PEAK_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}


def device_description() -> tuple[str, bool]:
    """(what the backend computes on, whether it is a GPU)."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return f"{device.platform}: {getattr(device, 'device_kind', device)}", \
            device.platform == "gpu"
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return f"gpu: {torch.cuda.get_device_name(0)}", True
        return "cpu", False
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    return (f"gpu: {gpus[0].name}", True) if gpus else ("cpu", False)


def known_peak(device: str) -> float | None:
    for name, peak in GPU_BF16_PEAK_TFLOPS.items():
        if name in device:
            return peak
    return None


class StepClock:
    """Per-batch wall times (from on_train_batch_begin to the end of the step, the result
    fetched) and each batch's shape and target tokens, through the dataset's map."""

    def __init__(self):
        self.shapes: list[tuple[int, int, int]] = []
        self.tokens: list[int] = []

    def __call__(self, inputs, labels):
        import numpy as np

        self.shapes.append((labels.shape[0], inputs[0].shape[1], labels.shape[1]))
        self.tokens.append(int(np.count_nonzero(labels)))
        return inputs, labels


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="a training config (YAML)")
    parser.add_argument("--out", required=True, help="run directory for spm.model, "
                        "model.keras and gpu_train.json")
    parser.add_argument("--steps", type=int_in(2), default=200, help="training steps")
    parser.add_argument("--warmup", type=int_in(0), default=10,
                        help="first steps left out of the step time (compiles)")
    parser.add_argument("--precision", default=None,
                        help="training.precision (default: mixed_bfloat16 on a GPU, the "
                             "config's otherwise)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's peak, for the share reached")
    parser.add_argument("--require-gpu", action="store_true",
                        help="refuse to run without a GPU")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="another config override")
    parser.add_argument("--overwrite", action="store_true")
    add_debug_flag(parser)
    return parser.parse_args(argv)


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    backend = check_keras_backend()
    if backend == "tensorflow":
        raise CommandError("bench.gpu_train times the NumPy input path, which JAX and PyTorch "
                           "read: set KERAS_BACKEND=jax (or torch)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    if args.warmup >= args.steps:
        raise CommandError(f"--warmup {args.warmup} leaves no timed step of --steps "
                           f"{args.steps}")
    import keras

    from bench.common import cpu_model
    from bench.flops import train_step_flops
    from train.config import load_config
    from train.engine import compile_model, save_model, setup
    from train.tasks import task_class

    device, on_gpu = device_description()
    if args.require_gpu and not on_gpu:
        raise CommandError(f"--require-gpu: KERAS_BACKEND={backend} sees no GPU ({device}); "
                           f"check the driver and that the backend's GPU build is installed")
    precision = args.precision or ("mixed_bfloat16" if on_gpu else None)
    overrides = [f"training.steps_per_epoch={args.steps}", "training.epochs=1",
                 "eval.dev_score_sentences=0", *args.set]
    if precision:
        overrides.append(f"training.precision={precision}")
    config = load_config(args.config, overrides)
    task_class(config.task).check_config(config)  # the task's name, backend and rules
    out = Path(args.out)
    strategy, _, out, jit = setup(config, out, overwrite=args.overwrite)
    task = task_class(config.task)(config)
    model_config = task.prepare(out)
    make_train, _ = task.datasets()
    with strategy.scope():
        model = task.build_model(model_config)
        loss, metrics = task.loss_and_metrics(model, strategy.num_replicas_in_sync)
        compile_model(model, config, loss, metrics, jit)
    clock = StepClock()
    times: list[float] = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            float(logs["loss"])  # the step's result on the host: the step is done
            times.append(time.perf_counter() - self.start)

    data = make_train().map(clock)
    model.fit(data, epochs=1, steps_per_epoch=args.steps, callbacks=[Timer()], verbose=0,
              shuffle=False)
    save_model(model, out / "model.keras")
    # The batches the steps trained on: the PyDataset reads exactly steps batches, in order.
    shapes, tokens = clock.shapes[: len(times)], clock.tokens[: len(times)]
    timed = slice(args.warmup, len(times))
    seconds = sum(times[timed])
    flops = sum(train_step_flops(model_config, b, s, t) for b, s, t in shapes[timed])
    peak = args.peak_tflops or known_peak(device)
    result = {
        "config": args.config, "backend": backend, "device": device, "cpu": cpu_model(),
        "precision": config.training.precision, "jit_compile": jit,
        "parameters": int(model.count_params()), "steps": len(times),
        "timed_steps": len(times) - args.warmup,
        "median_step_ms": round(1000 * statistics.median(times[timed]), 2),
        "mean_step_ms": round(1000 * seconds / (len(times) - args.warmup), 2),
        "target_tokens_per_second": round(sum(tokens[timed]) / seconds, 1),
        "matmul_tflops_per_second": round(flops / seconds / 1e12, 4),
        "peak_tflops": peak,
        "share_of_peak": round(flops / seconds / 1e12 / peak, 4) if peak else None,
        "first_steps_seconds": round(sum(times[: args.warmup]), 1),
    }
    (out / "gpu_train.json").write_text(json.dumps(result, indent=2) + "\n")
    for key, value in result.items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
