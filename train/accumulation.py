"""Gradient accumulation (`training.accumulate_steps`): k batches, one optimizer update.

Keras' optimizer argument `gradient_accumulation_steps` does the work: it adds each batch's
gradients into variables of its own and, on every k-th batch, updates with their mean and
zeroes them. It counts batches in a private variable; its public `iterations` is that count
// k, the updates, which Adam's bias correction reads. Its learning-rate schedule is handed
the batch count (`TransformerSchedule(accumulate_steps=k)` divides it back). Under
`LossScaleOptimizer` the inner optimizer accumulates gradients already unscaled, so the loss
scale may change inside a window; a batch with non-finite gradients is skipped whole (not
counted), so its window takes one more batch.

A run counts in updates: `training.steps_per_epoch`, `save_every_steps`, `warmup_steps`,
`initial_step` and `steps` in metrics.json; model.fit and the resumable backup's position in
an epoch count batches, k per update.
"""

from __future__ import annotations

import keras


def _counting(optimizer):
    """The optimizer that counts batches: the one inside a LossScaleOptimizer."""
    return getattr(optimizer, "inner_optimizer", optimizer)


def batches_per_update(optimizer) -> int:
    return int(_counting(optimizer).gradient_accumulation_steps or 1)


def batches_done(optimizer) -> int:
    """Batches trained on: the private counter, ahead of updates x k inside a window."""
    # The public `iterations` is this count // k under accumulation, so it cannot tell
    # where in a window training stands; the counter itself is private to Keras.
    return int(keras.ops.convert_to_numpy(_counting(optimizer)._iterations))


def updates_done(optimizer) -> int:
    """Optimizer updates so far (a tensor under accumulation, which has no .numpy() on JAX)."""
    return int(keras.ops.convert_to_numpy(optimizer.iterations))


def set_updates(optimizer, updates: int) -> None:
    """Start the optimizer at `updates` updates, at the start of a window."""
    _counting(optimizer)._iterations.assign(updates * batches_per_update(optimizer))
