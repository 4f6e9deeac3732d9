"""tf.distribute strategy, XLA and precision choices for a run."""

from __future__ import annotations

import json
import logging
import os

import tensorflow as tf

log = logging.getLogger("train")

STRATEGIES = ("auto", "default", "mirrored", "multiworker")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def make_strategy(name: str) -> tf.distribute.Strategy:
    """auto: Mirrored over the GPUs when more than one is visible, else the default strategy."""
    if name not in STRATEGIES:
        raise ValueError(f"training.strategy must be one of {STRATEGIES}, got {name!r}")
    if name == "auto":
        name = "mirrored" if len(tf.config.list_logical_devices("GPU")) > 1 else "default"
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        # Without GPUs, MirroredStrategy picks one CPU; name every logical CPU so that a
        # machine configured with several (as the tests do) gets one replica per device.
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
        return tf.distribute.MirroredStrategy(devices)
    if "TF_CONFIG" not in os.environ:
        raise ValueError("training.strategy=multiworker needs the TF_CONFIG environment "
                         "variable (cluster addresses and this worker's task)")
    return tf.distribute.MultiWorkerMirroredStrategy()


def worker_task() -> tuple[str, int]:
    """(task type, index) of this process in TF_CONFIG; ("chief", 0) when there is none."""
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    return task.get("type", "chief"), int(task.get("index", 0))


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """The one process that writes the run directory: the chief, or worker 0 without one."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    kind, index = worker_task()
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    if "chief" in cluster:
        return kind == "chief"
    return kind == "worker" and index == 0


def shard_for(strategy: tf.distribute.Strategy, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Split each global batch between the workers instead of giving each its own batches.

    Every worker builds the same seeded dataset. Batches vary in size (a token budget per
    bucket), so tf.data cannot rebatch by a fixed count: it splits every global batch into
    one piece per replica, and DATA sharding then hands piece i to replica i. The model sees
    the same global batches, in the same order, on one device or many, which is what makes
    a distributed run comparable with a single-device one. FILE sharding (AUTO's first
    choice) would not apply to in-memory sentences and would fall back to this anyway.
    """
    if strategy.num_replicas_in_sync == 1:
        return dataset
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def resolve_jit(value: bool | str) -> bool:
    """auto: XLA on GPU/TPU; off on CPU, where bench/train_step.py measured it slower."""
    if value == "auto":
        accelerated = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU")
        return bool(accelerated)
    if isinstance(value, bool):
        return value
    raise ValueError(f"training.jit_compile must be true, false or auto, got {value!r}")


def check_precision(name: str) -> str:
    if name not in PRECISIONS:
        raise ValueError(f"training.precision must be one of {PRECISIONS}, got {name!r}")
    return name
