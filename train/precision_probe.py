"""training.precision: auto where only a measurement can tell (train.distribute
.choose_precision): a few training steps of the run's own model on one of its batches in each
candidate setting, interleaved so that the host's drift falls on every candidate alike."""

from __future__ import annotations

import logging
import statistics
import time

import keras

log = logging.getLogger("train")

WARMUP_STEPS = 2  # the first compiles (XLA) or traces; the second settles the allocator
TIMED_ROUNDS = 3


def fastest_setting(build_and_compile, candidates, batch,
                    rounds: int = TIMED_ROUNDS) -> tuple[str, bool]:
    """The (precision, jit_compile) of `candidates` whose train step on `batch` (inputs,
    labels) is fastest (median of `rounds` interleaved steps); each timing is logged.
    `build_and_compile(jit)` gives a compiled model under the global dtype policy. The models
    are thrown away: the run builds its own after the choice."""
    inputs, labels = batch
    models = []
    for precision, jit in candidates:
        keras.mixed_precision.set_global_policy(precision)
        model = build_and_compile(jit)
        start = time.perf_counter()
        for _ in range(WARMUP_STEPS):
            model.train_on_batch(inputs, labels)
        log.info("precision probe: %s, jit_compile %s: first steps %.1f s", precision, jit,
                 time.perf_counter() - start)
        models.append(model)
    seconds = [[] for _ in candidates]
    for _ in range(rounds):
        for model, times in zip(models, seconds, strict=True):
            start = time.perf_counter()
            model.train_on_batch(inputs, labels)
            times.append(time.perf_counter() - start)
    medians = [statistics.median(times) for times in seconds]
    for (precision, jit), median in zip(candidates, medians, strict=True):
        log.info("precision probe: %s, jit_compile %s: %.3f s a step (median of %d, batch %s)",
                 precision, jit, median, rounds,
                 "x".join(map(str, keras.tree.flatten(labels)[0].shape)))
    # Not keras.backend.clear_session(): it would also drop the in-graph tokenizer's resources
    # that the run's datasets hold.
    del models
    return candidates[min(range(len(candidates)), key=medians.__getitem__)]
