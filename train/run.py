"""One training run: tokenizer, datasets, model.fit, evaluation, and the run directory."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import keras

from keras_transformer.config import TransformerConfig
from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models.transformer import Transformer
from keras_transformer.schedules import TransformerSchedule
from keras_transformer.text.pipeline import bucket_boundaries_for, make_translation_dataset
from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece
from train.config import RunConfig, save_config
from train.data import Corpus, load_corpus
from train.evaluate import score_translations

log = logging.getLogger("train")


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


def datasets(config: RunConfig, corpus: Corpus, source_tok, target_tok):
    d = config.data
    longest = max(d.max_source_length, d.max_target_length)
    common = dict(max_source_length=d.max_source_length, max_target_length=d.max_target_length,
                  tokens_per_batch=d.tokens_per_batch,
                  bucket_boundaries=bucket_boundaries_for(longest, d.num_buckets))
    train = make_translation_dataset(corpus.train.sources, corpus.train.targets, source_tok,
                                     target_tok, shuffle=True, seed=config.training.seed,
                                     **common)
    dev = make_translation_dataset(corpus.dev.sources, corpus.dev.targets, source_tok,
                                   target_tok, shuffle=False, **common)
    return train, dev


def compile_model(model: Transformer, config: RunConfig) -> None:
    t = config.training
    schedule = TransformerSchedule(model.config.d_model, t.warmup_steps, t.lr_scale)
    optimizer = keras.optimizers.Adam(schedule, beta_1=t.beta_1, beta_2=t.beta_2,
                                      epsilon=t.epsilon)
    model.compile(
        optimizer=optimizer,
        loss=MaskedLabelSmoothedCrossEntropy(t.label_smoothing, model.config.pad_id),
        metrics=[MaskedAccuracy(model.config.pad_id)],
        jit_compile=t.jit_compile,
    )


def run_translation(config: RunConfig, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    save_config(config, out / "config.yaml")
    keras.utils.set_random_seed(config.training.seed)
    keras.mixed_precision.set_global_policy(config.training.precision)

    corpus = load_corpus(config.data)
    log.info("corpus: %d train, %d dev, %s test pairs (%d empty lines dropped)",
             len(corpus.train), len(corpus.dev), len(corpus.test) if corpus.test else 0,
             corpus.dropped_empty)
    source_tok, target_tok = build_tokenizers(config, corpus, out)
    model_cfg = model_config(config, source_tok, target_tok)
    (out / "model_config.json").write_text(json.dumps(model_cfg.to_dict(), indent=2))
    train_ds, dev_ds = datasets(config, corpus, source_tok, target_tok)

    model = Transformer(model_cfg)
    model.build()
    compile_model(model, config)
    log.info("model: %s parameters", f"{model.count_params():,}")

    start = time.perf_counter()
    history = model.fit(
        train_ds,
        validation_data=dev_ds,
        epochs=config.training.epochs,
        steps_per_epoch=config.training.steps_per_epoch or None,
        callbacks=[keras.callbacks.BackupAndRestore(str(out / "backup"))],
        verbose=config.training.verbose,
        shuffle=False,  # the dataset shuffles itself, before bucketing
    )
    train_seconds = time.perf_counter() - start
    model.save(out / "model.keras")

    metrics: dict = {
        "train_seconds": round(train_seconds, 1),
        "epochs": len(history.history.get("loss", [])),
        "final_loss": float(history.history["loss"][-1]),
        "dev_loss": float(history.history["val_loss"][-1]),
        "parameters": int(model.count_params()),
    }
    e = config.eval
    for name, split in (("dev", corpus.dev), ("test", corpus.test)):
        if split is None:
            continue
        sources, references = split.sources, split.targets
        if e.max_sentences:
            sources, references = sources[: e.max_sentences], references[: e.max_sentences]
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
    return metrics
