"""The distribution strategy, XLA and precision choices for a run.

Under TensorFlow the strategies are tf.distribute's; under JAX several devices train as one
`keras.distribution.DataParallel` (`JaxDataParallel`; over several processes,
`JaxMultiProcess`), one device as `OneDevice`; PyTorch
trains on one device (Keras has no distribution for it). TensorFlow is imported only under
TensorFlow."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import sys
import time

import keras
import numpy as np

from keras_transformer.lazy_import import LazyModule

tf = LazyModule("tensorflow")  # imported by the TensorFlow paths only

log = logging.getLogger("train")

STRATEGIES = ("auto", "default", "mirrored", "multiworker")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16", "auto")


class OneDevice:
    """What the engine asks of a strategy, for one device under JAX or PyTorch (whose
    model.fit places the model itself)."""

    num_replicas_in_sync = 1

    def scope(self):
        return contextlib.nullcontext()


class JaxDataParallel:
    """What the engine asks of a strategy, for `keras.distribution.DataParallel` over
    `devices` under JAX: variables replicated on every device, each batch split along its
    rows, one program compiled for the global batch (so the plain token-mean loss is already
    the mean over the global batch). The distribution is set for the whole process: the JAX
    trainer reads it in model.fit, to shard the batches, as well as where variables are
    made."""

    def __init__(self, devices: list[str]):
        self.devices = devices
        self.num_replicas_in_sync = len(devices)
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))

    def scope(self):
        return contextlib.nullcontext()


class JaxMultiProcess(JaxDataParallel):
    """`JaxDataParallel` over the devices of several processes (`jax.distributed`): one
    process per host, or several on one machine. Each process feeds its own rows of every
    global batch (`ProcessBatches`); Keras assembles the global batch, so the step, its loss
    and its gradient are those of one program over all devices. Process 0 writes the run."""

    def __init__(self):
        import jax

        self.processes, self.process = jax.process_count(), jax.process_index()
        self.num_replicas_in_sync = jax.device_count()
        self.local_replicas = jax.local_device_count()
        self.devices = keras.distribution.list_devices()
        # Batches arrive already cut per process: Keras must not shard them again.
        keras.distribution.set_distribution(keras.distribution.DataParallel(
            devices=self.devices, auto_shard_dataset=False))

    def gather(self, values) -> np.ndarray:
        """Every process's `values` (int32), stacked in process order: a collective, so
        every process must call it at the same point."""
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(np.asarray(values, np.int32)))

    def agree(self, flag: bool) -> bool:
        """Process 0's `flag` on every process (a collective): a decision every process must
        take alike, such as stopping on a time budget measured by each clock."""
        return bool(self.gather([int(flag)])[0, 0])


class LocalCopy:
    """A model of this process alone that holds a `JaxMultiProcess` model's weights: its
    variables span every process's devices, so decoding or saving it would need all of them
    at once, while the dev score, the final model's files and its scores are one process's
    work. `build()` makes the copy (once, outside the distribution); each call copies the
    weights in (the replicated weights are read locally, without a collective)."""

    def __init__(self, build):
        self.build, self.copy = build, None

    def __call__(self, model):
        if self.copy is None:
            current = keras.distribution.distribution()
            keras.distribution.set_distribution(None)
            try:
                self.copy = self.build()
            finally:
                keras.distribution.set_distribution(current)
        self.copy.set_weights(model.get_weights())
        return self.copy


# What `training.strategy: multiworker` reads under JAX (jax.distributed's own variable for the
# coordinator, and its two arguments under the same prefix).
JAX_CLUSTER_VARIABLES = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
SHUTDOWN_WAIT_SECONDS = 24 * 3600
# How long the chief of a MultiWorkerMirroredStrategy run waits for the other workers to exit.
EXIT_WAIT_SECONDS = 120
_ended_together = False  # end_together ran: this process leaves with leave_after_cluster_run


def start_jax_processes() -> JaxMultiProcess:
    """jax.distributed.initialize from JAX_COORDINATOR_ADDRESS (host:port of process 0),
    JAX_NUM_PROCESSES and JAX_PROCESS_ID, or, without them, from the cluster JAX detects
    (Slurm, Open MPI, Kubernetes, Cloud TPU). On CPUs the collectives go over gloo."""
    import jax

    given = [name for name in JAX_CLUSTER_VARIABLES if os.environ.get(name)]
    if given and len(given) < len(JAX_CLUSTER_VARIABLES):
        missing = [name for name in JAX_CLUSTER_VARIABLES if name not in given]
        raise ValueError(f"training.strategy=multiworker under JAX: set {', '.join(missing)} "
                         f"too (every process: the same JAX_COORDINATOR_ADDRESS and "
                         f"JAX_NUM_PROCESSES, its own JAX_PROCESS_ID from 0)")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # After training, process 0 alone saves and scores the model (a long decode for a big
    # test split) while the others wait to shut down together: JAX's 5-minute default for
    # that wait would abort every process.
    wait = dict(shutdown_timeout_seconds=SHUTDOWN_WAIT_SECONDS)
    try:
        if given:
            jax.distributed.initialize(
                coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
                num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                process_id=int(os.environ["JAX_PROCESS_ID"]), **wait)
        else:
            jax.distributed.initialize(**wait)
    except (ValueError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"training.strategy=multiworker under JAX could not start the "
                         f"processes ({first}); set {', '.join(JAX_CLUSTER_VARIABLES)} on "
                         f"every process, or run under a cluster JAX detects") from None
    return JaxMultiProcess()


def make_strategy(name: str):
    """auto: Mirrored over the GPUs when more than one is visible, else the default strategy.
    Under JAX, auto and mirrored are `JaxDataParallel` over every device when there are
    several (the accelerators, else the CPU devices XLA was told to make), else `OneDevice`,
    and multiworker is `JaxMultiProcess` (jax.distributed); under PyTorch one device. The
    strategies a backend cannot run are refused."""
    if name not in STRATEGIES:
        raise ValueError(f"training.strategy must be one of {STRATEGIES}, got {name!r}")
    backend = keras.backend.backend()
    if backend == "jax":
        if name == "multiworker":
            return start_jax_processes()
        devices = keras.distribution.list_devices()
        if name in ("auto", "mirrored") and len(devices) > 1:
            return JaxDataParallel(devices)
        return OneDevice()
    if backend != "tensorflow":
        if name in ("mirrored", "multiworker"):
            raise ValueError(f"training.strategy={name} is a tf.distribute strategy, which "
                             f"needs KERAS_BACKEND=tensorflow (mirrored: or jax); Keras has no "
                             f"data parallelism under KERAS_BACKEND={backend}, set "
                             f"training.strategy=auto (one device)")
        return OneDevice()
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
    _patch_multiworker_log_reduction()
    return tf.distribute.MultiWorkerMirroredStrategy()


def _patch_multiworker_log_reduction() -> None:
    """Keras 3.15 averages each step's logs across workers with reduce(MEAN, axis=0), which
    fails on the scalar loss and metrics ("Invalid reduction dimension 0"); average scalars
    with axis=None. Only the multi-worker branch changes; every other case is Keras' own."""
    from keras.src.backend.tensorflow import trainer as keras_tf_trainer
    from keras.src.tree import map_structure

    original = keras_tf_trainer.reduce_per_replica
    if getattr(original, "scalar_safe", False):
        return

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and isinstance(
                strategy, tf.distribute.MultiWorkerMirroredStrategy):
            def mean(value):
                local = strategy.experimental_local_results(value)[0]
                return strategy.reduce("MEAN", value, axis=0 if local.shape.rank else None)

            return map_structure(mean, values)
        return original(values, strategy, reduction)

    reduce_per_replica.scalar_safe = True
    keras_tf_trainer.reduce_per_replica = reduce_per_replica


def strategy_name(strategy: tf.distribute.Strategy) -> str:
    # The public names: tf.distribute.MultiWorkerMirroredStrategy's class is named
    # CollectiveAllReduceStrategy.
    if isinstance(strategy, OneDevice):
        return "default"
    if isinstance(strategy, JaxDataParallel):
        return "DataParallel"
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "MultiWorkerMirroredStrategy"
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return "MirroredStrategy"
    return "default"


def worker_task() -> tuple[str, int]:
    """(task type, index) of this process in TF_CONFIG; ("chief", 0) when there is none."""
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    return task.get("type", "chief"), int(task.get("index", 0))


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """The one process that writes the run directory: the chief, or worker 0 without one."""
    if isinstance(strategy, JaxMultiProcess):
        return strategy.process == 0
    if isinstance(strategy, (OneDevice, JaxDataParallel)):
        return True
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    kind, index = worker_task()
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    if "chief" in cluster:
        return kind == "chief"
    return kind == "worker" and index == 0


def distribute(strategy: tf.distribute.Strategy, make_dataset, reads_part: bool = False):
    """Give replica r of R rows [B*r/R, B*(r+1)/R) of every global batch the dataset makes.

    `make_dataset()` builds the dataset; each input pipeline calls it, so that each gets its
    own copy of the seeded shuffle (a dataset made outside and captured follows another order).
    Every worker builds the same seeded dataset of whole global batches and cuts out its own
    replicas' rows, so the model trains on exactly the global batches of a single-device run,
    in the same order. The alternatives change the batches: tf.data's automatic rebatching
    rewrites every batch op in the pipeline (the tokenizer's chunks and each length bucket's
    batch size), which reorders and regroups sentences, and sharding by DATA or FILE hands
    each worker different batches. Batches vary in size (a token budget per length bucket),
    so a fixed per-replica batch size would not do either.

    `reads_part` (a streamed corpus, too large for every worker to read): input pipeline i of
    n builds `make_dataset(part=(n, i))`, the batches of its own part of the data alone
    (`keras_transformer.text.shards.worker_part`: whole shards, or every n-th line), and cuts
    each among its local replicas. A global batch is then the workers' batches together.

    Under JAX (`JaxDataParallel`) the NumPy input path's global batches go whole to model.fit,
    which splits each across the devices; `RowsPadded` makes their row counts divide. Over
    several processes (`JaxMultiProcess`) each process gives model.fit its rows of each global
    batch, or with `reads_part` its part's batches made alike in shape (`ProcessBatches`).
    """
    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        return make_dataset()
    if isinstance(strategy, JaxMultiProcess):
        data = (make_dataset(part=(strategy.processes, strategy.process)) if reads_part
                else make_dataset())
        return ProcessBatches(data, strategy, whole=not reads_part)
    if isinstance(strategy, JaxDataParallel):
        data = make_dataset()
        return RowsPadded(data, replicas, data.pad_id)

    def per_pipeline(context: tf.distribute.InputContext) -> tf.data.Dataset:
        local = replicas // context.num_input_pipelines
        if reads_part:
            data = make_dataset(part=(context.num_input_pipelines, context.input_pipeline_id))
            first, cut = 0, local  # the pipeline's batch is its replicas' alone
        else:
            data = make_dataset()
            first, cut = context.input_pipeline_id * local, replicas

        def pieces(inputs, labels):
            size = tf.shape(labels)[0]
            out = None
            for replica in range(first, first + local):
                start = size * replica // cut
                end = size * (replica + 1) // cut
                piece = tf.data.Dataset.from_tensors(
                    tf.nest.map_structure(lambda t, a=start, b=end: t[a:b], (inputs, labels)))
                out = piece if out is None else out.concatenate(piece)
            return out

        return data.flat_map(pieces).prefetch(local)

    return strategy.distribute_datasets_from_function(per_pipeline)


def replica_sum(strategy, values: list[float]) -> np.ndarray:
    """`values` (float32) summed over every replica of a MultiWorkerMirroredStrategy, by one
    all-reduce; every worker gets the sums."""
    pieces = tf.constant(values, tf.float32)

    @tf.function
    def total():
        def step():
            return tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, pieces)

        return strategy.experimental_local_results(strategy.run(step))[0]

    return total().numpy()


def check_workers_agree(strategy, text: str, what: str) -> None:
    """Under MultiWorkerMirroredStrategy, a one-line ValueError on every worker unless all of
    them hold the same `text` (`what` says what it is): workers started with different
    configs, or reading different data, would train on without a word otherwise. Each replica
    adds a digest of its text (16-bit pieces, exact in float32) to the others', then whether
    the sum is its own times the replica count; every worker sees the second sum."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    pieces = [float(int(digest[i: i + 4], 16)) for i in range(0, 16, 4)]
    if isinstance(strategy, JaxMultiProcess):
        if len({tuple(row) for row in strategy.gather(pieces).tolist()}) > 1:
            raise ValueError(f"the processes of training.strategy=multiworker differ in {what} "
                             f"(this is process {strategy.process}): start every process with "
                             f"the same config, --set overrides and data")
        return
    if isinstance(strategy, (OneDevice, JaxDataParallel)) or not isinstance(
            strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return  # one process
    replicas = float(strategy.num_replicas_in_sync)
    total = replica_sum(strategy, pieces)
    own = float(np.any(total != np.asarray(pieces, np.float32) * replicas))
    if replica_sum(strategy, [own])[0] > 0:
        kind, index = worker_task()
        raise ValueError(f"the workers of training.strategy=multiworker differ in {what} "
                         f"(this is {kind} {index}): start every worker with the same config, "
                         f"--set overrides and data")


def end_together(strategy) -> None:
    """Under MultiWorkerMirroredStrategy, a last all-reduce that every worker joins when its
    part of the run is done: the chief after saving and scoring the model alone (for as long
    as its decode takes), the others as soon as training ends. A worker that exited while the
    chief scored would stop its heartbeats to TensorFlow's coordination service, which then
    logs it on the chief as crashed ("StartAbort UNAVAILABLE ... The tasks have crashed").
    The all-reduce has no timeout, and a waiting worker's heartbeats go on meanwhile (under
    JAX, jax.distributed's shutdown waits, for up to SHUTDOWN_WAIT_SECONDS). Then the chief,
    which hosts the service, waits for the others to exit (their servers' addresses closed,
    for up to EXIT_WAIT_SECONDS): a worker still exiting after it would log the service lost
    ("Failed to send RPC to coordination service"). A chief that stops before the all-reduce
    ends the wait: a one-line error on the other workers. The command then leaves at once
    (leave_after_cluster_run)."""
    global _ended_together
    if isinstance(strategy, (OneDevice, JaxDataParallel)) or not isinstance(
            strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return  # one process, or JAX
    kind, index = worker_task()
    try:
        replica_sum(strategy, [1.0])
    except tf.errors.OpError as error:
        raise RuntimeError(f"{kind} {index} trained, but the chief stopped before it had saved "
                           f"and scored the model (the last collective: "
                           f"{type(error).__name__}); see the chief's log for its error"
                           ) from None
    if is_chief(strategy):
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
        others = [address for job in ("chief", "worker")
                  for i, address in enumerate(cluster.get(job, [])) if (job, i) != (kind, index)]
        deadline = time.monotonic() + EXIT_WAIT_SECONDS
        while others and time.monotonic() < deadline:
            others = [address for address in others if listening(address)]
            if others:
                time.sleep(0.1)
    _ended_together = True


def leave_after_cluster_run(code: int) -> None:
    """After end_together, end the process now with `code` (its output flushed, os._exit):
    the interpreter's teardown of TensorFlow's cluster context takes seconds, tens of seconds
    on a busy CPU, and while the chief's runs, its coordination service, still up, sees the
    heartbeats of workers that already left stop and logs them as crashed. A no-op in any
    other run."""
    if not _ended_together:
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def listening(address: str) -> bool:
    """Whether a server accepts connections at `address` (host:port)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1):
            return True
    except (OSError, ValueError):
        return False


def input_part(strategy) -> tuple[int, int]:
    """(input pipelines, this process's) under MultiWorkerMirroredStrategy: TF_CONFIG's
    chief first, then its workers, as tf.distribute numbers the pipelines; under
    `JaxMultiProcess` (processes, this process's index); else (1, 0)."""
    if isinstance(strategy, JaxMultiProcess):
        return strategy.processes, strategy.process
    if isinstance(strategy, (OneDevice, JaxDataParallel)) or not isinstance(
            strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1, 0
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    chiefs, workers = len(cluster.get("chief", [])), len(cluster.get("worker", []))
    kind, index = worker_task()
    return chiefs + workers, index if kind == "chief" else chiefs + index


def sum_over_workers(strategy, values: list[int]) -> list[int]:
    """Each of `values` (non-negative integers below 2**32) summed over the workers of a
    MultiWorkerMirroredStrategy (every worker gets the sums); `values` themselves with one
    process. Sent as 16-bit pieces, which float32 adds exactly for up to 256 workers."""
    parts, _ = input_part(strategy)
    if parts == 1:
        return list(values)
    pieces = [p for v in values for p in (v >> 16, v & 0xFFFF)]
    if isinstance(strategy, JaxMultiProcess):  # each process's pieces, summed here
        sums = [int(x) for x in strategy.gather(pieces).astype(np.int64).sum(axis=0)]
    else:
        total = replica_sum(strategy, [float(p) for p in pieces])
        # Every replica of a worker added its worker's values: divide by its replicas.
        per_worker = strategy.num_replicas_in_sync // parts
        sums = [int(round(float(x))) // per_worker for x in total]
    return [(high << 16) + low for high, low in zip(sums[::2], sums[1::2], strict=True)]


def rows_added(batch, extra: int, pad_id: int):
    """(inputs, labels) with `extra` rows added that repeat the first row's inputs (a row of
    padding alone would attend over no key) and hold only `pad_id` labels (so no loss)."""
    inputs, labels = batch
    if not extra:
        return inputs, labels
    inputs = tuple(np.concatenate([x, np.repeat(x[:1], extra, axis=0)]) for x in inputs)
    padding = np.full((extra, *labels.shape[1:]), pad_id, labels.dtype)
    return inputs, np.concatenate([labels, padding])


class BatchesMapped(keras.utils.PyDataset):
    """The batches of a NumPy input path (`data`), each passed through `_fit`."""

    def __init__(self, data):
        super().__init__()
        self.data = data

    def _fit(self, batch):
        raise NotImplementedError

    @property
    def num_batches(self):
        return self.data.num_batches

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self._fit(self.data[index])

    def __iter__(self):
        return (self._fit(batch) for batch in self.data)

    def on_epoch_end(self):
        self.data.on_epoch_end()


class RowsPadded(BatchesMapped):
    """The batches of a NumPy input path (`text.numpy_pipeline`) with rows added to make
    each batch's row count a multiple of `replicas`: JAX splits a batch evenly across the
    devices or not at all, and a bucket's batch size, or its last partial batch, need not
    divide. An added row repeats the batch's first inputs and has only `pad_id` labels, so
    the token-masked loss, its gradient and the metrics are the unpadded batch's."""

    def __init__(self, data, replicas: int, pad_id: int):
        super().__init__(data)
        self.replicas, self.pad_id = replicas, pad_id

    def _fit(self, batch):
        return rows_added(batch, -batch[1].shape[0] % self.replicas, self.pad_id)


class ProcessBatches(BatchesMapped):
    """The batches one process of a `JaxMultiProcess` run gives model.fit, which makes the
    global batch of every process's (jax.make_array_from_process_local_data), so they must
    agree in shape at every step.

    `whole`: `data` yields the run's global batches, the same in every process (the in-memory
    path); each batch is padded to a multiple of the global device count (as `RowsPadded`) and
    process i keeps its rows [B*i/n, B*(i+1)/n). Otherwise `data` yields this process's own
    batches (its part of a stream); the processes exchange their shapes (a collective per
    batch) and each pads its lengths and rows to the largest (`rows_added`). Added positions
    and rows have only `pad_id` labels, so the token loss and its gradient are those of the
    batches as made."""

    def __init__(self, data, strategy: JaxMultiProcess, whole: bool):
        super().__init__(data)
        self.strategy, self.whole = strategy, whole

    def _cut(self, batch):
        replicas = self.strategy.num_replicas_in_sync
        inputs, labels = rows_added(batch, -batch[1].shape[0] % replicas, self.data.pad_id)
        rows, n, i = labels.shape[0], self.strategy.processes, self.strategy.process
        start, end = rows * i // n, rows * (i + 1) // n
        return tuple(x[start:end] for x in inputs), labels[start:end]

    def _match(self, batch):
        inputs, labels = batch
        arrays = [*inputs, labels]
        largest = self.strategy.gather([d for x in arrays for d in x.shape]).max(axis=0)
        padded, at = [], 0
        for x in arrays:  # each array's lengths (every axis but the rows) to the largest
            lengths = [int(d) for d in largest[at + 1: at + x.ndim]]
            at += x.ndim
            padded.append(np.pad(x, [(0, 0), *((0, t - d) for t, d in
                                                zip(lengths, x.shape[1:], strict=True))],
                                 constant_values=self.data.pad_id))
        local = self.strategy.local_replicas
        rows = -(-int(largest[0]) // local) * local
        return rows_added((tuple(padded[:-1]), padded[-1]), rows - labels.shape[0],
                          self.data.pad_id)

    def _fit(self, batch):
        return self._cut(batch) if self.whole else self._match(batch)


def resolve_jit(value: bool | str) -> bool:
    """auto: XLA on GPU/TPU; off on CPU, where every batch shape costs a compile and
    bench/train_step.py measured the demo's shortest bucket slower with it. The switch is
    TensorFlow's and PyTorch's (torch.compile): JAX always compiles the step, since its eager
    mode runs op by op."""
    if value not in ("auto", True, False):
        raise ValueError(f"training.jit_compile must be true, false or auto, got {value!r}")
    backend = keras.backend.backend()
    if backend == "jax":
        return True
    if backend == "torch":
        return value is True
    if value == "auto":
        accelerated = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU")
        return bool(accelerated)
    if isinstance(value, bool):
        return value
    raise ValueError(f"training.jit_compile must be true, false or auto, got {value!r}")


def check_jit_devices(strategy: tf.distribute.Strategy, jit: bool) -> None:
    """Fail early where TensorFlow cannot run an XLA step: several replicas on CPUs.
    MirroredStrategy over logical CPUs: XLA compiles every replica's step for the first CPU,
    which may not read the other replicas' variables ("Trying to access resource ... located
    in device CPU:1 from device CPU:0"). MultiWorkerMirroredStrategy: "Collectives are not yet
    implemented for CPU devices when compiling with XLA". GPUs and TPUs have neither limit."""
    if not jit or strategy.num_replicas_in_sync < 2 or isinstance(strategy, JaxDataParallel):
        return  # JAX compiles collectives on CPUs too
    devices = strategy.extended.worker_devices
    if all(tf.DeviceSpec.from_string(d).device_type == "CPU" for d in devices):
        raise ValueError(
            f"training.jit_compile=true cannot run on {strategy_name(strategy)} with "
            f"{strategy.num_replicas_in_sync} CPU replicas: TensorFlow's XLA has no CPU "
            f"collectives and compiles every local replica's step for the first CPU. Set "
            f"training.jit_compile=false (or auto); XLA with several replicas needs GPUs or "
            f"TPUs.")


# The settings training.precision: auto chooses between, each (precision, jit_compile).
FLOAT32_XLA = ("float32", True)
BFLOAT16_ONEDNN = ("mixed_bfloat16", False)


def choose_precision(flags: dict[str, bool], gpu_compute_capability: tuple | None,
                     jit: bool) -> tuple[list[tuple[str, bool]], str]:
    """training.precision: auto -> (the candidate (precision, jit_compile) settings, why):
    one when the hardware decides, two when only a measured probe can
    (train.precision_probe).
    - a GPU: mixed_bfloat16 from compute capability 8 (Ampere) on, else mixed_float16 (with
      loss scaling); XLA as configured.
    - a CPU with AMX-BF16 tiles: mixed_bfloat16 without XLA. TF's oneDNN matmul runs bfloat16
      on the tiles (several times its float32); XLA's CPU dots do not use them.
    - a CPU with AVX-512 BF16 but no AMX (AMD Zen 4/5, Intel Cooper Lake): float32 with XLA or
      bfloat16 without, measured. Its bfloat16 dot products are worth it only where the
      matrices are large: bench.train_step on Zen 5 found float32 with XLA faster for `small`
      at 32 x 32 tokens and bfloat16 without XLA faster for `base`.
    - any other CPU: float32, XLA as configured; bfloat16 would be converted around every
      dot."""
    if gpu_compute_capability is not None:
        if tuple(gpu_compute_capability) >= (8, 0):
            return [("mixed_bfloat16", jit)], "a GPU with bfloat16 (compute capability >= 8.0)"
        return [("mixed_float16", jit)], "a GPU without bfloat16 (compute capability < 8.0)"
    if flags.get("amx_bf16"):
        return [BFLOAT16_ONEDNN], "a CPU with AMX-BF16"
    if flags.get("avx512_bf16"):
        return [FLOAT32_XLA, BFLOAT16_ONEDNN], "a CPU with AVX-512 BF16 and no AMX (measured)"
    return [("float32", jit)], "a CPU without bfloat16 dot products"


def gpu_compute_capability() -> tuple[int, int] | None:
    """The first GPU's CUDA compute capability as the Keras backend sees it, None without."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            return None
        return tuple(tf.config.experimental.get_device_details(gpus[0]).get(
            "compute_capability", (0, 0)))
    if backend == "jax":
        import jax

        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        if not gpus:
            return None
        major, _, minor = str(getattr(gpus[0], "compute_capability", "0.0")).partition(".")
        return int(major), int(minor or 0)
    if backend == "torch":
        import torch

        return tuple(torch.cuda.get_device_capability(0)) if torch.cuda.is_available() else None
    return None


def resolve_precision(precision: str, jit: bool) -> list[tuple[str, bool]]:
    """training.precision and the resolved jit_compile -> the candidate (precision, jit)
    settings: the configured one, or for auto those choose_precision gives for this machine,
    logged with the CPU's name and flags."""
    check_precision(precision)
    if precision != "auto":
        return [(precision, jit)]
    from keras_transformer.cpu import cpu_flags, cpu_model

    flags = cpu_flags()
    candidates, why = choose_precision(flags, gpu_compute_capability(), jit)
    log.info("precision auto: %s for %s; CPU %s, flags %s",
             " or ".join(f"{p} (jit_compile {j})" for p, j in candidates), why, cpu_model(),
             " ".join(name for name, present in flags.items() if present) or "-")
    return candidates


def check_precision(name: str) -> str:
    if name not in PRECISIONS:
        raise ValueError(f"training.precision must be one of {PRECISIONS}, got {name!r}")
    return name
