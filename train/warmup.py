"""The warm-up of a short plan (training.warmup_fraction): a run planned for fewer steps than
its warm-up ends while the learning rate still climbs, its final weights taken at the highest
rate it ever trained at, so that its result depends on the draw of one run."""

from __future__ import annotations

import logging
import math

from keras_transformer.schedules import TransformerSchedule

from .config import TrainingConfig

log = logging.getLogger("train")


def planned_steps(training: TrainingConfig, make_train) -> int:
    """The steps the run is planned to take: epochs x steps_per_epoch, or, with one-pass epochs,
    epochs x the batches of one pass (a NumPy stream knows them; a tf.data one is counted by
    reading a pass). A time budget may end the run sooner."""
    if training.steps_per_epoch:
        return training.epochs * training.steps_per_epoch
    data = make_train()
    try:
        per_pass = len(data)
    except TypeError:  # tf.data: bucketing leaves the length unknown until read
        per_pass = int(data.cardinality())
        if per_pass < 0:
            per_pass = int(data.reduce(0, lambda count, *_: count + 1))
    # Updates, not batches: accumulate_steps batches make one (train.accumulation).
    return training.epochs * per_pass // training.accumulate_steps


def schedule_warmup(training: TrainingConfig, planned: int | None) -> tuple[int, float]:
    """(warm-up steps, lr_scale) of the run's schedule. Without training.warmup_fraction, or
    when the warm-up ends inside that fraction of the plan, the config's. Otherwise the
    warm-up ends at that fraction of the plan, and lr_scale changes so that the peak is the
    highest rate the config's schedule reaches within the plan (its peak, or where a plan
    shorter than the warm-up stops climbing): the run then trains at no rate its recipe
    would not have used, and ends at a decayed one instead of its highest."""
    warmup, scale = training.warmup_steps, training.lr_scale
    if not training.warmup_fraction or planned is None:
        return warmup, scale
    short = max(1, math.ceil(training.warmup_fraction * planned))
    if short >= warmup:
        return warmup, scale
    # TransformerSchedule at step_num n: scale * d_model^-0.5 * min(n^-0.5, n * warmup^-1.5);
    # its peak, at n = warmup, is scale * d_model^-0.5 * warmup^-0.5.
    highest = min(planned, warmup) * warmup**-1.5
    return short, scale * highest * math.sqrt(short)


def make_schedule(training: TrainingConfig, d_model: int,
                  planned: int | None = None) -> TransformerSchedule:
    warmup, scale = schedule_warmup(training, planned)
    if warmup != training.warmup_steps:
        log.info("training.warmup_fraction: a plan of %d steps warms up over %d steps (not "
                 "%d), to the highest rate the plan reached before, then decays", planned,
                 warmup, training.warmup_steps)
    return TransformerSchedule(d_model, warmup, scale, accumulate_steps=training.accumulate_steps)
