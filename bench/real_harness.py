"""What both sides of `bench.train_real` share: counting a batch's tokens as `model.fit` reads
it, a clock of the training steps, the throughput of a window of steps, and a wall-clock
training budget with dev checkpoints.

Standard library, NumPy, TensorFlow and Keras only: the keras-hub side
(`bench/train_real_keras_hub.py`) imports it in the peer environment, which has no
keras_transformer.
"""

from __future__ import annotations

import statistics
import time

import keras
import numpy as np


def batch_counts(source, target_out, pad_id: int) -> dict:
    """One batch's sizes: rows, non-padding and padded positions of source and target.

    A target token is one of target_out (the labels) that is not `pad_id`; EOS (or keras-hub's
    [END]) counts, padding does not."""
    source, target_out = np.asarray(source), np.asarray(target_out)
    return {"rows": int(target_out.shape[0]),
            "shape": [int(v) for v in target_out.shape],
            "target_tokens": int(np.count_nonzero(target_out != pad_id)),
            "target_positions": int(target_out.size),
            "source_tokens": int(np.count_nonzero(source != pad_id)),
            "source_positions": int(source.size)}


class BatchCounter:
    """A tf.data map function that records `batch_counts` of every batch in the order the
    dataset yields them (map it without parallel calls): entry i is the i-th batch fit reads,
    however far prefetching runs ahead. `source_of(inputs)` picks the source ids."""

    def __init__(self, pad_id: int, source_of=None):
        self.pad_id = pad_id
        self.source_of = source_of or (lambda inputs: inputs[0])
        self.batches: list[dict] = []

    def _record(self, source, target_out):
        self.batches.append(batch_counts(source.numpy(), target_out.numpy(), self.pad_id))
        return 0

    def __call__(self, inputs, target_out):
        import tensorflow as tf

        done = tf.py_function(self._record, [self.source_of(inputs), target_out], tf.int32)
        with tf.control_dependencies([done]):
            target_out = tf.identity(target_out)
        return inputs, target_out


class StepClock(keras.callbacks.Callback):
    """perf_counter at the end of every training step; stops fit once `enough(ends)` says so."""

    def __init__(self, enough=None):
        super().__init__()
        self.ends: list[float] = []
        self.losses: list[float] = []
        self.enough = enough

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None:
            self.losses.append(float(loss))  # a value, so the step has finished
        self.ends.append(time.perf_counter())
        if self.enough is not None and self.enough(len(self.ends)):
            self.model.stop_training = True


def timed_window(batches: list[dict], warmup: int, steps: int) -> tuple[int, int] | None:
    """(first, end) of the `steps` timed steps: after `warmup` steps and after the first step
    of every batch shape seen so far (a new shape is a trace, and with XLA a compile); None
    while fewer steps have run than that needs."""
    seen, first_of_last_shape = set(), -1
    for i, b in enumerate(batches):
        shape = tuple(b["shape"])
        if shape not in seen:
            seen.add(shape)
            first_of_last_shape = i
    first = max(warmup, first_of_last_shape + 1)
    if len(batches) < first + steps:
        return None
    return first, first + steps


def throughput(batches: list[dict], ends: list[float], first: int, end: int,
               windows: int = 5) -> dict:
    """Tokens per second of steps first..end-1 (first >= 1: step i takes ends[i] - ends[i-1]),
    in total and as the median (p25-p75) over `windows` consecutive windows of those steps;
    padding fractions of the same batches."""
    if first < 1 or end > min(len(ends), len(batches)) or end <= first:
        raise ValueError(f"steps {first}..{end} are not all timed ({len(ends)} step ends, "
                         f"{len(batches)} batches)")
    timed = batches[first:end]
    seconds = ends[end - 1] - ends[first - 1]
    total = {k: sum(b[k] for b in timed) for k in
             ("rows", "target_tokens", "target_positions", "source_tokens", "source_positions")}
    step_seconds = [ends[i] - ends[i - 1] for i in range(first, end)]
    bounds = np.linspace(first, end, min(windows, end - first) + 1).round().astype(int)
    rates = [sum(b["target_tokens"] for b in batches[a:z]) / (ends[z - 1] - ends[a - 1])
             for a, z in zip(bounds[:-1], bounds[1:], strict=True)]
    rates.sort()
    quart = (statistics.quantiles(rates, n=4, method="inclusive") if len(rates) > 1
             else [rates[0]] * 3)
    return {"steps": end - first, "first_timed_step": first, "seconds": seconds,
            **total,
            "target_tokens_per_s": total["target_tokens"] / seconds,
            "sentences_per_s": total["rows"] / seconds,
            "target_tokens_per_sentence": total["target_tokens"] / total["rows"],
            "target_padding_fraction": 1 - total["target_tokens"] / total["target_positions"],
            "source_padding_fraction": 1 - total["source_tokens"] / total["source_positions"],
            "median_step_s": statistics.median(step_seconds),
            "window_tokens_per_s": {"median": statistics.median(rates), "p25": quart[0],
                                    "p75": quart[2], "windows": rates},
            "distinct_shapes": len({tuple(b["shape"]) for b in batches[:end]})}


def measured_row(side: str, jit: bool, counter: BatchCounter, clock: StepClock,
                 started: float, warmup: int, steps: int, needs: str) -> dict:
    """The JSON row of one side's throughput run, after its `fit` returned: the timed window
    (RuntimeError, naming `needs`, when the steps run did not cover it), the first steps'
    seconds, the first and last loss, and `throughput` of the window."""
    done = len(clock.ends)
    window = timed_window(counter.batches[:done], warmup, steps)
    if window is None:
        raise RuntimeError(f"{done} steps did not cover {needs} and {steps} timed steps")
    return {"side": side, "jit_compile": jit, "fit_seconds": time.perf_counter() - started,
            "first_steps_s": [round(clock.ends[0] - clock.start, 2)] + [
                round(b - a, 2) for a, b in zip(clock.ends[:window[0] - 1],
                                                clock.ends[1:window[0]], strict=True)],
            "loss_first_last": [clock.losses[0], clock.losses[-1]] if clock.losses else None,
            **throughput(counter.batches, clock.ends, *window)}


class TrainingBudget(keras.callbacks.Callback):
    """Stops fit after `budget_s` seconds of training and calls `evaluate(model)` every
    `every_s` seconds of training and at the end; the time evaluate takes is not training
    time. `checkpoints`: [{"minutes", "steps", **evaluate's dict}]."""

    def __init__(self, budget_s: float, every_s: float, evaluate, log=print):
        super().__init__()
        self.budget_s, self.every_s, self.evaluate, self.log = budget_s, every_s, evaluate, log
        self.checkpoints: list[dict] = []
        self.steps = 0
        self.eval_seconds = 0.0

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()
        self.next_eval = self.every_s

    def trained_seconds(self) -> float:
        return time.perf_counter() - self.start - self.eval_seconds

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if logs and logs.get("loss") is not None:
            self.last_loss = float(logs["loss"])
        trained = self.trained_seconds()
        done = trained >= self.budget_s
        if trained >= self.next_eval or done:
            while self.next_eval <= trained:
                self.next_eval += self.every_s
            t0 = time.perf_counter()
            point = {"minutes": round(trained / 60, 3), "steps": self.steps,
                     "loss": getattr(self, "last_loss", None), **self.evaluate(self.model)}
            took = time.perf_counter() - t0
            self.eval_seconds += took
            point["eval_seconds"] = round(took, 1)
            self.checkpoints.append(point)
            self.log(f"  {point['minutes']:.2f} min, step {self.steps}, loss "
                     f"{point['loss']}, evaluated in {took:.0f} s")
        if done:
            self.model.stop_training = True
