"""The training engine: strategy, XLA and precision set-up, the optimizer and compile,
model.fit with backups and resume, and the run directory's model files and metrics.json.

A task (train.tasks) says what to read, which model to build and how to score it;
`train` drives it.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import warnings
from pathlib import Path

import keras

from keras_transformer.file_safety import atomic_write_text, written_in_place_of

from .accumulation import updates_done
from .batches import BatchTap
from .callbacks import (
    DevScoring,
    EpochCheckpoints,
    EpochHistory,
    NaNGuard,
    ResumableBackup,
    StopTogether,
    TimeBudget,
    load_weights_npz,
    set_average,
)
from .config import RunConfig, save_config
from .distribute import (
    JaxMultiProcess,
    LocalCopy,
    check_jit_devices,
    check_precision,
    check_workers_agree,
    distribute,
    end_together,
    input_part,
    is_chief,
    make_strategy,
    resolve_jit,
    resolve_precision,
    strategy_name,
    sum_over_workers,
    worker_task,
)
from .precision_probe import fastest_setting
from .run_directory import abandon_run, fingerprint, prepare_run_directory
from .tasks.base import Task
from .tokenizer_sources import given_model
from .warm_start import initial_step, start_from, weights_file
from .warmup import make_schedule, planned_steps, schedule_warmup

log = logging.getLogger("train")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; TerminateOnNaN stopped the run."""


def make_optimizer(config: RunConfig, d_model: int, planned: int | None = None):
    """`planned`: the run's planned steps, which a short run's warm-up follows (train.warmup)."""
    t = config.training
    k = t.accumulate_steps
    # k batches, one update of their mean gradient (train.accumulation); the schedule counts
    # updates (train.warmup.make_schedule). Keras refuses 1: no accumulation is None.
    schedule = make_schedule(t, d_model, planned)
    optimizer = keras.optimizers.Adam(schedule, beta_1=t.beta_1, beta_2=t.beta_2,
                                      epsilon=t.epsilon,
                                      gradient_accumulation_steps=k if k > 1 else None)
    # precision: auto was resolved into the global policy before the model was built.
    precision = (keras.mixed_precision.global_policy().name if t.precision == "auto"
                 else t.precision)
    if precision == "mixed_float16":
        # float16 gradients underflow without it; bfloat16 has float32's range and needs none.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def compile_model(model, config: RunConfig, loss, metrics, jit_compile: bool | None = None,
                  planned: int | None = None):
    """Call inside the strategy scope: the optimizer's variables must be mirrored too."""
    jit = resolve_jit(config.training.jit_compile) if jit_compile is None else jit_compile
    model.compile(optimizer=make_optimizer(config, model.config.d_model, planned), loss=loss,
                  metrics=metrics, jit_compile=jit)


def segments(state: dict | None, epochs: int, steps_per_epoch: int):
    """[(initial_epoch, epochs, steps_per_epoch or None, batches to skip, offset in epoch)].

    A resumed run first finishes the interrupted epoch, then runs whole epochs. Skipping
    is exact in steps_per_epoch mode (the stream repeats deterministically); in one-pass mode
    it skips the right number of batches of a fresh pass.
    """
    spe = steps_per_epoch or None
    if state is None:
        return [(0, epochs, spe, 0, 0)]
    epoch, batch = int(state["epoch"]), int(state["batch"])
    if spe and batch >= steps_per_epoch:
        # Saved after the last step of an epoch, killed before the epoch-end save: that epoch
        # is done (a segment of 0 steps would mean "until the data ends", i.e. forever).
        epoch, batch = epoch + batch // steps_per_epoch, batch % steps_per_epoch
    plan = []
    if batch and epoch < epochs:
        skip = epoch * steps_per_epoch + batch if spe else batch
        plan.append((epoch, epoch + 1, (spe - batch) if spe else None, skip, batch))
        epoch += 1
    if epoch < epochs:
        plan.append((epoch, epochs, spe, epoch * steps_per_epoch if spe else 0, 0))
    return plan


def fit(model, strategy, config: RunConfig, out: Path, make_train, make_dev, *, dev_scoring=None,
        chief: bool = True, reads_part: bool = False) -> dict:
    """model.fit with backups, resume, TensorBoard and NaN guard; returns what metrics need.
    `reads_part`: make_train(part=(n, i)) reads input pipeline i's part of n (Task.reads_part)."""
    t = config.training
    agree = strategy.agree if isinstance(strategy, JaxMultiProcess) else None
    budget = TimeBudget(t.max_minutes, agree)
    epoch_history = EpochHistory()
    tap = BatchTap() if strategy.num_replicas_in_sync == 1 else None
    # model.fit, the skipped batches of a resume and the backup's place in an epoch count
    # batches; an update is `accumulate_steps` of them (train.accumulation).
    batches_per_epoch = t.steps_per_epoch * t.accumulate_steps
    backup = ResumableBackup(
        out / "backup", t.save_every_steps, fingerprint(config),
        batches_per_step=t.accumulate_steps,
        extra_state=lambda: {**budget.state(), **epoch_history.state(),
                             **(dev_scoring.state() if dev_scoring else {})})
    with strategy.scope():
        # Under a strategy, Keras builds the compiled loss and metrics from a batch it pulls
        # and averages across replicas: the ids become float32, and replicas holding different
        # row counts (odd batches) cannot be averaged across workers at all. Build from one
        # plain batch here, and turn that step off. Keras has no public switch for it: its
        # TensorFlow trainer pulls and averages that batch whenever the model was made under a
        # strategy, before it looks whether anything is left to build, so building everything
        # with public calls first (model, compute_loss, compute_metrics, optimizer.build)
        # still fails on an odd batch.
        model._symbolic_build(data_batch=next(iter(make_dev())))
        model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
        state = backup.restore(model)
        weights = weights_file(config)
        if state is None and weights is not None:
            step = initial_step(t.initial_step, weights)
            report = start_from(model, weights, step, t.init_optimizer)
            log.info("started from the weights of %s at step %d%s", weights, step,
                     ", with its optimizer's state" if t.init_optimizer else "")
            if report is not None:
                log_weight_report(report)
    resumed = int(state["step"]) if state else 0
    if state:
        log.info("resumed from %s at step %d", backup.directory / state["weights"], resumed)
        if dev_scoring:
            dev_scoring.load_state(state)
        budget.load_state(state)
        epoch_history.load_state(state)
        if state.get("finished"):
            # Killed after training, while saving or scoring: only that part is redone.
            log.info("training had finished at step %d; saving and scoring again", resumed)
            return {**state["finished"], "resumed_from_step": resumed}
    nan_guard = NaNGuard()
    callbacks = [nan_guard, budget]
    if dev_scoring:
        callbacks.append(dev_scoring)  # before TensorBoard, so that val_<score> is logged
    if chief:
        callbacks.append(EpochCheckpoints(out / "checkpoints", t.keep_checkpoints))
        if t.tensorboard and keras.backend.backend() != "tensorflow":
            log.info("training.tensorboard: no TensorBoard logs under KERAS_BACKEND=%s "
                     "(Keras writes them with TensorFlow)", keras.backend.backend())
        elif t.tensorboard:
            callbacks.append(keras.callbacks.TensorBoard(str(out / "logs"), write_graph=False))
    if agree is not None:
        callbacks.append(StopTogether(agree))
    callbacks += [epoch_history, backup]

    epochs_done = int(state["epoch"]) if state else 0
    start = time.perf_counter()
    for initial, epochs, steps, skip, offset in segments(state, t.epochs, batches_per_epoch):
        def make_segment(skip=skip, **part):
            # Each worker skips as many of its own batches: its part replays exactly too.
            data = make_train(**part)
            data = data.skip(skip) if skip else data
            return data.map(tap) if tap is not None else data

        backup.batch_offset = offset
        with warnings.catch_warnings():
            # Keras warns "Your input ran out of data" whenever a dataset of unknown length
            # ends: the dev data at every validation, and a one-pass epoch, both by design.
            warnings.filterwarnings("ignore", message="Your input ran out of data")
            result = model.fit(distribute(strategy, make_segment, reads_part),
                               validation_data=distribute(strategy, make_dev),
                               initial_epoch=initial, epochs=epochs, steps_per_epoch=steps,
                               callbacks=callbacks, verbose=t.verbose,
                               shuffle=False)  # the dataset shuffles itself, before bucketing
        epochs_done = initial + len(result.history.get("loss", []))
        if nan_guard.fired or model.stop_training or budget.fired:
            break
    seconds = time.perf_counter() - start
    step = updates_done(model.optimizer)
    if nan_guard.fired:
        raise TrainingDiverged(
            f"the training loss became NaN or infinite near step {step}; lower "
            f"training.lr_scale or raise training.warmup_steps (the last backup is kept in "
            f"{backup.directory})")
    if tap is not None:
        log.info("train steps saw %d distinct batch shapes (%s); with jit_compile each is "
                 "one XLA compilation", len(tap.shapes), sorted(tap.shapes))
    # The epochs and seconds of every process of a resumed run; the target tokens (counted
    # as the input pipeline reads them, prefetching included) of this process only, so
    # tokens per second divides them by this process's seconds.
    result = {"history": epoch_history.history,
              "steps": step, "epochs": epochs_done,
              "train_seconds": budget.spent_before + seconds, "process_seconds": seconds,
              "stopped_by_time_budget": budget.fired,
              "target_tokens": tap.target_tokens if tap else None,
              "distinct_batch_shapes": len(tap.shapes) if tap else None}
    # The backup outlives training until the run's files are written (`finish`): a kill
    # while saving or scoring resumes here instead of training again from step 0.
    backup.save_finished(epochs_done, result)
    return {**result, "resumed_from_step": resumed}


def log_weight_report(report: dict) -> None:
    """What a fine-tune took from a pre-trained model of another class (warm_start.load_by_name),
    as the libraries users know print it: loaded, newly initialized, left unused."""
    log.info("loaded %d pre-trained weights (%s)", len(report["loaded"]),
             summarize_names(report["loaded"]))
    if report["new"]:
        log.warning("%d weights are newly initialized, not pre-trained: %s; train them "
                    "(this fine-tune does)", len(report["new"]), ", ".join(report["new"]))
    if report["left"]:
        log.info("%d pre-trained weights left unused: %s", len(report["left"]),
                 ", ".join(report["left"]))


def summarize_names(names: list[str]) -> str:
    """Weight names grouped by their first part: `embedding: 1, encoder: 32`."""
    groups: dict[str, int] = {}
    for name in names:
        groups[name.split("/")[0]] = groups.get(name.split("/")[0], 0) + 1
    return ", ".join(f"{k}: {n}" for k, n in groups.items())


def finish(out: Path) -> None:
    """The run's files are written: its backup is no longer needed."""
    shutil.rmtree(out / "backup", ignore_errors=True)


def setup(config: RunConfig, out: Path, overwrite: bool = False):
    """Strategy first (MultiWorkerMirroredStrategy must exist before other TF ops), then the
    run directory's check (train.run_directory), seeds and policy; the seed comes before any
    tokenizer is used, as the seed frees TF-Text state."""
    t = config.training
    check_precision(t.precision)
    # A bad training.init_from, or a step it cannot tell, refused before any work.
    initial_step(t.initial_step, weights_file(config, out))
    given_model(config)  # and a bad tokenizer.model
    strategy = make_strategy(t.strategy)
    # Paths may differ between hosts through data.data_dir (or KT_DATA_DIR); nothing else.
    settings = config.to_dict()
    settings["data"].pop("data_dir", None)
    check_workers_agree(strategy, json.dumps(settings, sort_keys=True), "their config")
    if (t.accumulate_steps > 1 and strategy.num_replicas_in_sync > 1
            and keras.backend.backend() == "tensorflow"):
        # Keras 3.15 updates inside a cond whose branches synchronize the replicas, which
        # tf.distribute cannot build (merge_call in a control-flow branch).
        raise ValueError(f"training.accumulate_steps={t.accumulate_steps} works on one device "
                         f"under TensorFlow, not with {strategy.num_replicas_in_sync} replicas "
                         f"(Keras cannot accumulate under tf.distribute); set "
                         f"training.strategy=default or accumulate_steps: 1")
    candidates = resolve_precision(t.precision, resolve_jit(t.jit_compile))
    if strategy.num_replicas_in_sync > 1:
        candidates = candidates[:1]  # the probe times one device's step
    for _, jit in candidates:
        check_jit_devices(strategy, jit)
    chief = is_chief(strategy)
    # A new run: whether its directory was there before, for a failed start to give back as
    # it was; None for a resumed run, or a worker's.
    existed = None
    if chief:
        before = out.exists()
        if prepare_run_directory(out, config, overwrite=overwrite) == "new":
            existed = before
    else:
        # Every worker runs the same command; only the chief writes the run directory.
        index = strategy.process if isinstance(strategy, JaxMultiProcess) else worker_task()[1]
        out = out / f".worker{index}"
        out.mkdir(parents=True, exist_ok=True)
    save_config(config, out / "config.yaml")
    keras.utils.set_random_seed(t.seed)
    log.info("strategy %s with %d replica(s)", strategy_name(strategy),
             strategy.num_replicas_in_sync)
    return strategy, chief, out, candidates, existed


def base_metrics(config: RunConfig, strategy, jit: bool, result: dict, model) -> dict:
    history = result["history"]
    metrics = {
        "train_seconds": round(result["train_seconds"], 1),
        "epochs": result["epochs"],
        "steps": result["steps"],  # optimizer updates, each of accumulate_steps batches
        "resumed_from_step": result["resumed_from_step"],
        "parameters": int(model.count_params()),
        "strategy": strategy_name(strategy),
        "replicas": strategy.num_replicas_in_sync,
        "jit_compile": jit,
        "precision": keras.mixed_precision.global_policy().name,
        "epoch_losses": [float(v) for v in history.get("loss", [])],
    }
    if history.get("loss"):
        metrics["final_loss"] = float(history["loss"][-1])
    if history.get("val_loss"):
        metrics["dev_loss"] = float(history["val_loss"][-1])
    # Per epoch: the dev loss and the task's dev scores (val_*), and the training minutes.
    metrics["epoch_dev"] = {k[4:]: [round(float(v), 4) for v in values]
                            for k, values in history.items() if k.startswith("val_")}
    if history.get("minutes"):
        metrics["epoch_minutes"] = [float(v) for v in history["minutes"]]
    if history.get("steps"):
        metrics["epoch_steps"] = [int(v) for v in history["steps"]]
    if result["distinct_batch_shapes"] is not None:
        metrics["distinct_batch_shapes"] = result["distinct_batch_shapes"]
    if result["target_tokens"]:
        # Wall clock of model.fit, so per-epoch validation and dev scores are included.
        metrics["train_target_tokens"] = result["target_tokens"]
        metrics["target_tokens_per_second"] = round(
            result["target_tokens"] / max(result["process_seconds"], 1e-9), 1)
    if config.training.accumulate_steps > 1:
        metrics["accumulate_steps"] = config.training.accumulate_steps
    if config.training.max_minutes:
        metrics["max_minutes"] = config.training.max_minutes
        metrics["stopped_by_time_budget"] = result["stopped_by_time_budget"]
    return metrics


def save_model(model, path: Path) -> None:
    """model.save through a temporary name beside `path` and a rename (Keras wants the
    .keras suffix on the temporary file too)."""
    with written_in_place_of(path, ".keras") as tmp:
        model.save(tmp)


def average_last(model, directory: Path, last: int) -> list[str]:
    """The final weights as the mean of the last `last` epoch checkpoints (fewer if the run
    made fewer; none below 2): the names averaged. The epoch checkpoint of the last epoch holds
    the weights after the last step, so the newest weights always take part."""
    chosen = sorted(directory.glob("epoch_*.npz"))[-last:] if last > 1 else []
    if len(chosen) < 2:
        return []
    set_average(model, chosen)
    log.info("final model: the mean of %s", ", ".join(p.name for p in chosen))
    return [p.name for p in chosen]


def train(task: Task, config: RunConfig, out: Path, overwrite: bool = False) -> dict:
    """One run of `task`: set up, prepare, build and compile, fit, save, evaluate; the metrics."""
    strategy, chief, out, candidates, existed = setup(config, out, overwrite)
    task.part = input_part(strategy)
    try:
        model_cfg = task.prepare(out)
        task.combine_parts(lambda values: sum_over_workers(strategy, values))
    except BaseException:
        if existed is not None:  # bad data, found before anything trained: no run to keep
            abandon_run(out, remove=not existed)
        raise
    check_workers_agree(strategy, json.dumps(task.data_metrics(), sort_keys=True),
                        "the training data they found (shards, pairs)")
    atomic_write_text(out / "model_config.json", json.dumps(model_cfg.to_dict(), indent=2))
    make_train, make_dev = task.datasets()
    planned = (planned_steps(config.training, make_train) if config.training.warmup_fraction
               else None)
    precision, jit = candidates[0]
    if len(candidates) > 1:
        def build_and_compile(jit):
            model = task.build_model(model_cfg)
            compile_model(model, config, *task.loss_and_metrics(model, 1), jit, planned)
            return model

        # The probe's models draw from the run's seed before the run's own model: still one
        # initialization per seed (both candidates are always built). No reseeding here: the
        # seed frees the in-graph tokenizer's resources, which the datasets now hold.
        precision, jit = fastest_setting(build_and_compile, candidates, next(iter(make_dev())))
    keras.mixed_precision.set_global_policy(precision)
    log.info("jit_compile %s; precision %s", jit, precision)
    with strategy.scope():
        model = task.build_model(model_cfg)
        loss, metrics = task.loss_and_metrics(model, strategy.num_replicas_in_sync)
        compile_model(model, config, loss, metrics, jit, planned)
    log.info("model: %s parameters%s", f"{model.count_params():,}", task.describe(model))

    scored = None  # the model that decodes and is saved, when not the trained one itself
    if isinstance(strategy, JaxMultiProcess):
        def build_local():
            local = task.build_model(model_cfg)
            compile_model(local, config, *task.loss_and_metrics(local, 1), jit, planned)
            return local

        scored = LocalCopy(build_local)
    dev_score = task.dev_score()
    dev_scoring = None
    if dev_score is not None:
        dev_scoring = DevScoring(dev_score, out / "best.npz" if chief else None,
                                 config.training.early_stopping_patience, scored)
    result = fit(model, strategy, config, out, make_train, make_dev, dev_scoring=dev_scoring,
                 chief=chief, reads_part=task.reads_part)
    if isinstance(strategy, JaxMultiProcess):
        if not chief:
            finish(out)
            log.info("process %d: trained; process 0 saves and scores the model",
                     strategy.process)
            return base_metrics(config, strategy, jit, result, model)
        model = scored(model)  # the final weights in a model of process 0 alone
        # What follows is this process's alone: a variable made now (the optimizer's, as
        # model.save builds it) must not span the other processes' devices.
        keras.distribution.set_distribution(None)
    metrics = base_metrics(config, strategy, jit, result, model)
    metrics.update(task.data_metrics())
    metrics["warmup_steps"] = schedule_warmup(config.training, planned)[0]
    if planned is not None:
        metrics["planned_steps"] = planned
    final_model = config.training.final_model
    averaged = []
    if final_model in ("auto", "average"):
        averaged = average_last(model, out / "checkpoints", config.training.average_last)
    if averaged:
        metrics["averaged_checkpoints"] = averaged
    if not chief:
        finish(out)
        log.info("%s %d: trained; waiting for the chief to save and score the model",
                 *worker_task())
        end_together(strategy)
        return metrics
    best = None
    if dev_scoring is not None and (out / "best.npz").is_file():
        metrics.update({f"best_dev_{dev_score.name}": dev_scoring.best,
                        "best_epoch": dev_scoring.best_epoch, "best_step": dev_scoring.best_step,
                        "best_minutes": dev_scoring.best_minutes, **dev_score.metrics})
        best = load_weights_npz(out / "best.npz")
    if final_model == "best" and best is None:
        # Every epoch's dev score was NaN (or none ran): nothing was ever best.
        log.warning("training.final_model: best, but no epoch had a dev score: the final "
                    "model is the last weights")
    if final_model == "best" and best is not None:
        model.set_weights(best)
        log.info("final model: the best by dev (epoch %d, step %d)", dev_scoring.best_epoch,
                 dev_scoring.best_step)
    # Which weights model.keras holds, and so what the scores below are of.
    metrics["final_model"] = ("best" if final_model == "best" and best is not None
                              else "average" if averaged else "last")
    task.finalize(model, metrics)
    final = model.get_weights()
    save_model(model, out / "model.keras")
    if best is not None:
        model.set_weights(best)
        save_model(model, out / "best.keras")
        model.set_weights(final)
    task.evaluate(model, out, strategy, metrics)
    atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=2, ensure_ascii=False))
    finish(out)
    end_together(strategy)  # the other workers wait for this, to exit with the chief
    return metrics
