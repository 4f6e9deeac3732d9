"""A run's SentencePiece tokenizers: trained on its training text, saved in and loaded from its
run directory, with the special ids the run's config asks for."""

from __future__ import annotations

from pathlib import Path

from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece

from .config import RunConfig
from .tokenizer_sources import copy_given_model, sample_sentences
from .warm_start import copy_tokenizers, weights_file

SPECIAL_IDS = ("pad_id", "bos_id", "eos_id")


def configured_special_ids(config: RunConfig) -> dict[str, int]:
    """The special ids set in model.overrides; the tokenizer is trained with them (the rest
    keep train_sentencepiece's defaults), and the model takes every id from the tokenizer."""
    return {k: config.model.overrides[k] for k in SPECIAL_IDS if k in config.model.overrides}


def train_tokenizer(config: RunConfig, texts, prefix: Path,
                    symbols: tuple[str, ...] = ()) -> SentencePieceTokenizer:
    """SentencePiece on `texts` by config.tokenizer, written to <prefix>.model, with the
    pieces `symbols` of its own: on a sample of them with tokenizer.sample_sentences, or the
    model tokenizer.model names, copied there (train.tokenizer_sources). A run started from
    another's weights (training.init_from: a fine-tune of a pre-trained run) takes that run's
    one tokenizer instead: the weights mean nothing with another vocabulary."""
    weights = weights_file(config)
    if weights is not None:
        if config.tokenizer.model:
            raise ValueError(f"training.init_from and tokenizer.model both give the tokenizer; "
                             f"a run started from {weights} takes that run's (drop "
                             f"tokenizer.model)")
        copy_tokenizers(weights, prefix.parent)
        if not (prefix.parent / "spm.model").is_file():
            raise ValueError(f"training.init_from: the run of {weights} has a source and a "
                             f"target tokenizer; a {config.task} run reads one (spm.model)")
        return load_run_tokenizers(prefix.parent)[0]
    tok = config.tokenizer
    if tok.model:
        return copy_given_model(config, prefix)
    if tok.sample_sentences:
        texts = sample_sentences(texts, tok.sample_sentences, config.data.seed)
    return SentencePieceTokenizer(train_sentencepiece(
        texts, prefix, tok.vocab_size, model_type=tok.model_type,
        user_defined_symbols=symbols, **configured_special_ids(config)))


def build_tokenizers(config: RunConfig, sources, targets, out: Path):
    """(source, target) trained on the training side only: with tokenizer.joint one model,
    spm.model, serves both languages; else spm_source.model and spm_target.model. A run
    started from another's weights (training.init_from) takes that run's tokenizers."""
    weights = weights_file(config)
    if weights is not None:
        copy_tokenizers(weights, out)
        return load_run_tokenizers(out)
    if config.tokenizer.joint:
        shared = train_tokenizer(config, list(sources) + list(targets), out / "spm")
        return shared, shared
    return (train_tokenizer(config, sources, out / "spm_source"),
            train_tokenizer(config, targets, out / "spm_target"))


def load_run_tokenizers(run: Path):
    """The tokenizers a run directory holds: spm.model, or spm_source/spm_target.model."""
    if (run / "spm.model").is_file():
        shared = SentencePieceTokenizer(run / "spm.model")
        return shared, shared
    return (SentencePieceTokenizer(run / "spm_source.model"),
            SentencePieceTokenizer(run / "spm_target.model"))
