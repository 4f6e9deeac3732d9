"""One training run: tokenizer, datasets, model.fit under a strategy, evaluation, run directory."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from pathlib import Path

import keras
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy, label_smoothed_nll
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models.classifier import TransformerClassifier
from keras_transformer.models.transformer import Transformer
from keras_transformer.schedules import TransformerSchedule
from keras_transformer.text.pipeline import (
    bucket_boundaries_for,
    count_too_long,
    make_classification_dataset,
    make_translation_dataset,
)
from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece
from keras_transformer.translator import translate
from train.callbacks import (
    DevBleu,
    EpochCheckpoints,
    NaNGuard,
    ResumableBackup,
    TimeBudget,
    load_weights_npz,
)
from train.config import RunConfig, save_config
from train.data import Corpus, load_classification, load_corpus
from train.distribute import (
    check_jit_devices,
    check_precision,
    distribute,
    is_chief,
    make_strategy,
    resolve_jit,
    strategy_name,
    worker_task,
)
from train.evaluate import bleu_chrf, score_translations

log = logging.getLogger("train")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; TerminateOnNaN stopped the run."""


def build_tokenizers(config: RunConfig, corpus: Corpus, out: Path):
    """Train SentencePiece on the training side only; joint -> one model for both languages."""
    tok = config.tokenizer
    if tok.joint:
        path = train_sentencepiece(corpus.train.sources + corpus.train.targets, out / "spm",
                                   tok.vocab_size, model_type=tok.model_type)
        shared = SentencePieceTokenizer(path)
        return shared, shared
    source = SentencePieceTokenizer(train_sentencepiece(
        corpus.train.sources, out / "spm_source", tok.vocab_size, model_type=tok.model_type))
    target = SentencePieceTokenizer(train_sentencepiece(
        corpus.train.targets, out / "spm_target", tok.vocab_size, model_type=tok.model_type))
    return source, target


def load_run_tokenizers(run: Path):
    """The tokenizers a run directory holds: spm.model, or spm_source/spm_target.model."""
    if (run / "spm.model").is_file():
        shared = SentencePieceTokenizer(run / "spm.model")
        return shared, shared
    return (SentencePieceTokenizer(run / "spm_source.model"),
            SentencePieceTokenizer(run / "spm_target.model"))


def model_config(config: RunConfig, source_tok, target_tok) -> TransformerConfig:
    # Batches pad source and target to one bucket length, so both tables cover the longer one.
    longest = max(config.data.max_source_length, config.data.max_target_length)
    return TransformerConfig.preset(
        config.model.preset,
        **{
            "source_vocab_size": source_tok.vocab_size,
            "target_vocab_size": target_tok.vocab_size,
            "max_source_length": longest,
            "max_target_length": longest,
            **config.model.overrides,
        },
    )


def replayable(build, repeat: bool) -> tf.data.Dataset:
    """A repeated stream that every new iterator replays from its first batch.

    A seeded shuffle with reshuffle_each_iteration continues its sequence of orders on each
    new iterator of one dataset object, and Keras makes more than one on a single device
    (not on several), so the batches would depend on the strategy and on how often the
    dataset was iterated before. Built inside flat_map, each iterator starts afresh. A
    one-pass-per-epoch dataset is left alone: there, a new iterator is a new epoch and
    should get a new order.
    """
    if not repeat:
        return build()
    return tf.data.Dataset.range(1).flat_map(lambda _: build())


def translation_datasets(config: RunConfig, corpus: Corpus, source_tok, target_tok):
    """(make_train, make_dev) dataset factories.

    With steps_per_epoch the training stream repeats, so that a resumed run can skip exactly
    the batches already trained on; otherwise one pass is one epoch. Factories, because each
    input pipeline of a distributed run must build its own copy (see train.distribute).
    """
    d = config.data
    longest = max(d.max_source_length, d.max_target_length)
    common = dict(max_source_length=d.max_source_length, max_target_length=d.max_target_length,
                  tokens_per_batch=d.tokens_per_batch,
                  bucket_boundaries=bucket_boundaries_for(longest, d.num_buckets))

    def make_train():
        repeat = config.training.steps_per_epoch > 0
        return replayable(lambda: make_translation_dataset(
            corpus.train.sources, corpus.train.targets, source_tok, target_tok, shuffle=True,
            seed=config.training.seed, repeat=repeat, **common), repeat)

    def make_dev():
        return make_translation_dataset(corpus.dev.sources, corpus.dev.targets, source_tok,
                                        target_tok, shuffle=False, **common)

    return make_train, make_dev


@keras.saving.register_keras_serializable(package="train")
class ReplicaTokenMeanLoss(MaskedLabelSmoothedCrossEntropy):
    """The label-smoothed loss of each replica's tokens divided by the tokens of the global batch.

    Keras sums the replicas' gradients, and divides a loss by the replica count only when it
    reduces a per-example loss itself; this loss is already a scalar. Summing sum_r / tokens
    over replicas gives exactly the single-device mean over the global batch, however the
    tokens fall between the replicas.
    """

    def call(self, y_true, y_pred):
        loss, mask = label_smoothed_nll(y_true, y_pred, self.label_smoothing, self.pad_id)
        tokens = tf.reduce_sum(mask)
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            tokens = context.all_reduce(tf.distribute.ReduceOp.SUM, tokens)
        return tf.reduce_sum(loss) / tf.maximum(tokens, 1.0)


def make_optimizer(config: RunConfig, d_model: int):
    t = config.training
    schedule = TransformerSchedule(d_model, t.warmup_steps, t.lr_scale)
    optimizer = keras.optimizers.Adam(schedule, beta_1=t.beta_1, beta_2=t.beta_2,
                                      epsilon=t.epsilon)
    if t.precision == "mixed_float16":
        # float16 gradients underflow without it; bfloat16 has float32's range and needs none.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def compile_model(model, config: RunConfig, jit_compile: bool | None = None) -> None:
    """Call inside the strategy scope: the optimizer's variables must be mirrored too."""
    t = config.training
    jit = resolve_jit(t.jit_compile) if jit_compile is None else jit_compile
    if isinstance(model, TransformerClassifier):
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    else:
        # The plain loss on one device keeps saved models free of a train/ class.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        kind = ReplicaTokenMeanLoss if replicas > 1 else MaskedLabelSmoothedCrossEntropy
        loss = kind(t.label_smoothing, model.config.pad_id)
        metrics = [MaskedAccuracy(model.config.pad_id)]
    model.compile(optimizer=make_optimizer(config, model.config.d_model), loss=loss,
                  metrics=metrics, jit_compile=jit)


def fingerprint(config: RunConfig) -> str:
    """What a backup must agree on to be resumed: data, tokenizer, model and step plan."""
    d = config.to_dict()
    keyed = {k: d[k] for k in ("task", "data", "tokenizer", "model")}
    keyed["steps_per_epoch"] = d["training"]["steps_per_epoch"]
    keyed["seed"] = d["training"]["seed"]
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]


class BatchTap:
    """Records the distinct (batch, length) shapes the train step gets (one XLA compile each)
    and counts the target tokens it trains on, for tokens/second."""

    def __init__(self):
        self.shapes: set[tuple[int, ...]] = set()
        self.target_tokens = 0

    def _add(self, shape, tokens):
        self.shapes.add(tuple(int(v) for v in shape.numpy()))
        self.target_tokens += int(tokens.numpy())
        return 0

    def __call__(self, inputs, labels):
        tokens = tf.math.count_nonzero(labels, dtype=tf.int64)
        done = tf.py_function(self._add, [tf.shape(labels), tokens], tf.int32)
        with tf.control_dependencies([done]):
            labels = tf.identity(labels)
        return inputs, labels


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
    plan = []
    if batch and epoch < epochs:
        skip = epoch * steps_per_epoch + batch if spe else batch
        plan.append((epoch, epoch + 1, (spe - batch) if spe else None, skip, batch))
        epoch += 1
    if epoch < epochs:
        plan.append((epoch, epochs, spe, epoch * steps_per_epoch if spe else 0, 0))
    return plan


def fit(model, strategy, config: RunConfig, out: Path, make_train, make_dev, *, dev_bleu=None,
        chief: bool = True) -> dict:
    """model.fit with backups, resume, TensorBoard and NaN guard; returns what metrics need."""
    t = config.training
    budget = TimeBudget(t.max_minutes)
    backup = ResumableBackup(
        out / "backup", t.save_every_steps, fingerprint(config),
        extra_state=lambda: {**budget.state(), **(dev_bleu.state() if dev_bleu else {})})
    with strategy.scope():
        # Under a strategy, Keras builds the compiled loss and metrics from a batch it pulls
        # and averages across replicas: the ids become float32, and replicas holding different
        # row counts (odd batches) cannot be averaged across workers at all. Build from one
        # plain batch here, and turn that step off.
        model._symbolic_build(data_batch=next(iter(make_dev())))
        model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
        state = backup.restore(model)
    resumed = int(state["step"]) if state else 0
    if state:
        log.info("resumed from %s at step %d", backup.directory / state["weights"], resumed)
        if dev_bleu:
            dev_bleu.load_state(state)
        budget.load_state(state)
        if state.get("finished"):
            # Killed after training, while saving or scoring: only that part is redone.
            log.info("training had finished at step %d; saving and scoring again", resumed)
            return {**state["finished"], "resumed_from_step": resumed}
    nan_guard = NaNGuard()
    callbacks = [nan_guard, budget]
    if dev_bleu:
        callbacks.append(dev_bleu)  # before TensorBoard, so that val_bleu is logged
    if chief:
        callbacks.append(EpochCheckpoints(out / "checkpoints", t.keep_checkpoints))
        if t.tensorboard:
            callbacks.append(keras.callbacks.TensorBoard(str(out / "logs"), write_graph=False))
    callbacks.append(backup)

    tap = BatchTap() if strategy.num_replicas_in_sync == 1 else None
    history: dict[str, list] = {}
    epochs_done = int(state["epoch"]) if state else 0
    start = time.perf_counter()
    for initial, epochs, steps, skip, offset in segments(state, t.epochs, t.steps_per_epoch):
        def make_segment(skip=skip):
            data = make_train()
            data = data.skip(skip) if skip else data
            return data.map(tap) if tap is not None else data

        backup.batch_offset = offset
        result = model.fit(distribute(strategy, make_segment),
                           validation_data=distribute(strategy, make_dev),
                           initial_epoch=initial, epochs=epochs, steps_per_epoch=steps,
                           callbacks=callbacks, verbose=t.verbose,
                           shuffle=False)  # the dataset shuffles itself, before bucketing
        for key, values in result.history.items():
            history.setdefault(key, []).extend(values)
        epochs_done = initial + len(result.history.get("loss", []))
        if nan_guard.fired or model.stop_training or budget.fired:
            break
    seconds = time.perf_counter() - start
    step = int(model.optimizer.iterations.numpy())
    if nan_guard.fired:
        raise TrainingDiverged(
            f"the training loss became NaN or infinite near step {step}; lower "
            f"training.lr_scale or raise training.warmup_steps (the last backup is kept in "
            f"{backup.directory})")
    if tap is not None:
        log.info("train steps saw %d distinct batch shapes (%s); with jit_compile each is "
                 "one XLA compilation", len(tap.shapes), sorted(tap.shapes))
    result = {"history": {k: [float(v) for v in values] for k, values in history.items()},
              "steps": step, "epochs": epochs_done, "train_seconds": seconds,
              "stopped_by_time_budget": budget.fired,
              "target_tokens": tap.target_tokens if tap else None,
              "distinct_batch_shapes": len(tap.shapes) if tap else None}
    # The backup outlives training until the run's files are written (`finish`): a kill
    # while saving or scoring resumes here instead of training again from step 0.
    backup.save_finished(epochs_done, result)
    return {**result, "resumed_from_step": resumed}


def finish(out: Path) -> None:
    """The run's files are written: its backup is no longer needed."""
    shutil.rmtree(out / "backup", ignore_errors=True)


def _setup(config: RunConfig, out: Path):
    """Strategy first (MultiWorkerMirroredStrategy must exist before other TF ops), then seeds
    and policy; the seed comes before any tokenizer is used, as the seed frees TF-Text state."""
    t = config.training
    check_precision(t.precision)
    strategy = make_strategy(t.strategy)
    jit = resolve_jit(t.jit_compile)
    check_jit_devices(strategy, jit)
    chief = is_chief(strategy)
    if not chief:
        # Every worker runs the same command; only the chief writes the run directory.
        out = out / f".worker{worker_task()[1]}"
    out.mkdir(parents=True, exist_ok=True)
    save_config(config, out / "config.yaml")
    keras.utils.set_random_seed(t.seed)
    keras.mixed_precision.set_global_policy(t.precision)
    log.info("strategy %s with %d replica(s); jit_compile %s; precision %s",
             strategy_name(strategy), strategy.num_replicas_in_sync, jit, t.precision)
    return strategy, chief, out, jit


def _base_metrics(config: RunConfig, strategy, jit: bool, result: dict, model) -> dict:
    history = result["history"]
    metrics = {
        "train_seconds": round(result["train_seconds"], 1),
        "epochs": result["epochs"],
        "steps": result["steps"],
        "resumed_from_step": result["resumed_from_step"],
        "parameters": int(model.count_params()),
        "strategy": strategy_name(strategy),
        "replicas": strategy.num_replicas_in_sync,
        "jit_compile": jit,
        "precision": config.training.precision,
        "epoch_losses": [float(v) for v in history.get("loss", [])],
    }
    if history.get("loss"):
        metrics["final_loss"] = float(history["loss"][-1])
    if history.get("val_loss"):
        metrics["dev_loss"] = float(history["val_loss"][-1])
    if result["distinct_batch_shapes"] is not None:
        metrics["distinct_batch_shapes"] = result["distinct_batch_shapes"]
    if result["target_tokens"]:
        # Wall clock of model.fit, so per-epoch validation and dev BLEU are included.
        metrics["train_target_tokens"] = result["target_tokens"]
        metrics["target_tokens_per_second"] = round(
            result["target_tokens"] / max(result["train_seconds"], 1e-9), 1)
    if config.training.max_minutes:
        metrics["max_minutes"] = config.training.max_minutes
        metrics["stopped_by_time_budget"] = result["stopped_by_time_budget"]
    return metrics


def run_translation(config: RunConfig, out: Path) -> dict:
    strategy, chief, out, jit = _setup(config, out)
    corpus = load_corpus(config.data)
    log.info("corpus: %d train, %d dev, %s test pairs (%d empty lines dropped)",
             len(corpus.train), len(corpus.dev), len(corpus.test) if corpus.test else 0,
             corpus.dropped_empty)
    source_tok, target_tok = build_tokenizers(config, corpus, out)
    d = config.data
    too_long = count_too_long(corpus.train.sources, corpus.train.targets, source_tok, target_tok,
                              max_source_length=d.max_source_length,
                              max_target_length=d.max_target_length)
    log.info("%d of %d training pairs are longer than max_source_length=%d / "
             "max_target_length=%d tokens and are left out", too_long, len(corpus.train),
             d.max_source_length, d.max_target_length)
    dev_too_long = count_too_long(corpus.dev.sources, corpus.dev.targets, source_tok,
                                  target_tok, max_source_length=d.max_source_length,
                                  max_target_length=d.max_target_length)
    for split, count, total in (("training", too_long, len(corpus.train)),
                                ("dev", dev_too_long, len(corpus.dev))):
        if count == total:  # an empty stream: training would wait forever for a batch
            raise ValueError(
                f"all {total} {split} pairs are longer than data.max_source_length="
                f"{d.max_source_length} / data.max_target_length={d.max_target_length} "
                f"tokens (EOS included); raise them")
    model_cfg = model_config(config, source_tok, target_tok)
    (out / "model_config.json").write_text(json.dumps(model_cfg.to_dict(), indent=2))
    make_train, make_dev = translation_datasets(config, corpus, source_tok, target_tok)

    with strategy.scope():
        model = Transformer(model_cfg)
        model.build()
        compile_model(model, config, jit)
    log.info("model: %s parameters", f"{model.count_params():,}")

    e = config.eval
    dev_bleu = None
    if e.dev_bleu_sentences:
        sources, references, _ = fitting_pairs(corpus.dev.sources[: e.dev_bleu_sentences],
                                               corpus.dev.targets[: e.dev_bleu_sentences],
                                               source_tok, model_cfg.max_source_length)

        def score(m):
            hypotheses = translate(m, source_tok, target_tok, sources, beam_size=e.dev_bleu_beam,
                                   alpha=e.alpha, batch_size=e.batch_size)
            return bleu_chrf(hypotheses, references)["bleu"]

        dev_bleu = DevBleu(score, out / "best.npz" if chief else None,
                           config.training.early_stopping_patience)

    result = fit(model, strategy, config, out, make_train, make_dev, dev_bleu=dev_bleu,
                 chief=chief)
    metrics = _base_metrics(config, strategy, jit, result, model)
    metrics["too_long_dropped"] = too_long
    metrics["empty_dropped"] = corpus.dropped_empty
    if not chief:
        finish(out)
        return metrics
    model.save(out / "model.keras")
    if dev_bleu is not None and (out / "best.npz").is_file():
        metrics.update(best_dev_bleu=dev_bleu.best, best_epoch=dev_bleu.best_epoch,
                       dev_bleu_sentences=min(e.dev_bleu_sentences, len(corpus.dev)))
        last = model.get_weights()
        model.set_weights(load_weights_npz(out / "best.npz"))
        model.save(out / "best.keras")
        model.set_weights(last)

    for name, split in (("dev", corpus.dev), ("test", corpus.test)):
        if split is None:
            continue
        sources, references = split.sources, split.targets
        if e.max_sentences:
            sources, references = sources[: e.max_sentences], references[: e.max_sentences]
        sources, references, skipped = fitting_pairs(sources, references, source_tok,
                                                     model_cfg.max_source_length)
        if skipped:
            log.info("%s: %d sentences longer than max_source_length=%d tokens are not scored",
                     name, skipped, model_cfg.max_source_length)
            metrics[f"{name}_skipped_too_long"] = skipped
        # The scored sentences, so that `train.evaluate` can score other weights on them
        # (e.g. averaged checkpoints) after the run.
        for suffix, lines in (("src", sources), ("ref", references)):
            (out / f"{name}.{suffix}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        scores = score_translations(model, source_tok, target_tok, sources, references,
                                    beam_size=e.beam_size, alpha=e.alpha,
                                    batch_size=e.batch_size,
                                    hypotheses_path=out / f"{name}.hyp")
        prefix = "" if name == "test" or corpus.test is None else f"{name}_"
        metrics.update({f"{prefix}{k}": v for k, v in scores.items()})
        print(f"{name}: BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  "
              f"({len(sources)} sentences, beam {e.beam_size})")
        print(f"  {scores['sacrebleu_signature']}")
        if name == "test" or corpus.test is None:
            hypotheses = (out / f"{name}.hyp").read_text(encoding="utf-8").splitlines()
            for src, hyp, ref in list(zip(sources, hypotheses, references, strict=True))[
                    : e.samples]:
                print(f"  EN  {src}\n  OUT {hyp}\n  REF {ref}")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, ensure_ascii=False))
    finish(out)
    return metrics


def fitting_mask(sources, source_tok, max_source_length: int) -> list[bool]:
    """Whether each source, with its EOS, fits the model."""
    return [len(ids) + 1 <= max_source_length for ids in source_tok.encode(list(sources))]


def fitting_pairs(sources, references, source_tok, max_source_length: int):
    """The pairs whose source (with EOS) fits the model, and how many do not."""
    keep = fitting_mask(sources, source_tok, max_source_length)
    return ([s for s, k in zip(sources, keep, strict=True) if k],
            [r for r, k in zip(references, keep, strict=True) if k], keep.count(False))


def run_classification(config: RunConfig, out: Path) -> dict:
    """Encoder-only classifier (e.g. SST-2): SentencePiece on the training texts, accuracy."""
    strategy, chief, out, jit = _setup(config, out)
    d, t = config.data, config.training
    train, dev = load_classification(d)
    log.info("classification: %d train, %d dev sentences", len(train), len(dev))
    tok = SentencePieceTokenizer(train_sentencepiece(
        train.texts, out / "spm", config.tokenizer.vocab_size,
        model_type=config.tokenizer.model_type))
    num_classes = config.model.num_classes or max(train.labels) + 1
    model_cfg = TransformerConfig.preset(config.model.preset, **{
        "source_vocab_size": tok.vocab_size, "target_vocab_size": tok.vocab_size,
        "max_source_length": d.max_source_length, "max_target_length": d.max_source_length,
        **config.model.overrides})
    (out / "model_config.json").write_text(json.dumps(model_cfg.to_dict(), indent=2))
    batch_size = max(1, d.tokens_per_batch // d.max_source_length)

    def make_train():
        def build():
            data = make_classification_dataset(train.texts, train.labels, tok,
                                               max_length=d.max_source_length,
                                               batch_size=batch_size, seed=t.seed)
            return data.repeat() if t.steps_per_epoch else data

        return replayable(build, t.steps_per_epoch > 0)

    def make_dev():
        return make_classification_dataset(dev.texts, dev.labels, tok,
                                           max_length=d.max_source_length,
                                           batch_size=batch_size, shuffle=False)

    with strategy.scope():
        model = TransformerClassifier(model_cfg, num_classes=num_classes,
                                      pooling=config.model.pooling)
        model.build()
        compile_model(model, config, jit)
    log.info("model: %s parameters, %d classes, batch %d", f"{model.count_params():,}",
             num_classes, batch_size)
    result = fit(model, strategy, config, out, make_train, make_dev, chief=chief)
    metrics = _base_metrics(config, strategy, jit, result, model)
    if not chief:
        finish(out)
        return metrics
    model.save(out / "model.keras")
    scores = model.evaluate(distribute(strategy, make_dev), verbose=0, return_dict=True)
    metrics["dev_accuracy"] = round(float(scores["accuracy"]) * 100, 2)
    metrics["dev_sentences"] = len(dev)
    print(f"dev: accuracy {metrics['dev_accuracy']:.2f}% ({len(dev)} sentences)")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, ensure_ascii=False))
    finish(out)
    return metrics

