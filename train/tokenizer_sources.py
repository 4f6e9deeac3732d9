"""What a run's SentencePiece model is made from, when not from all of its training text: a
model the user brings (`tokenizer.model`), checked against the config and copied into the run,
or a seeded sample of the training sentences (`tokenizer.sample_sentences`)."""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, SentencePieceTokenizer

from .config import RunConfig


def expected_special_ids(config: RunConfig) -> dict[str, int]:
    """The special ids a run's tokenizer must hold: model.overrides' where set, else the ones
    train_sentencepiece gives."""
    defaults = {"pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID}
    return {k: config.model.overrides.get(k, v) for k, v in defaults.items()}


def given_model(config: RunConfig) -> SentencePieceTokenizer | None:
    """The model tokenizer.model names, loaded and checked; None when it names none. A missing
    or unreadable file, or one whose special ids or size are not the config's, is a one-line
    ValueError naming the file, raised before any work."""
    name = config.tokenizer.model
    if not name:
        return None
    path = Path(name)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer.model: {path} not found (a SentencePiece .model "
                                f"file; a relative path is read from the working directory)")
    try:
        tokenizer = SentencePieceTokenizer(path)
    except (OSError, ValueError) as err:
        message = " ".join(str(err).split())
        raise ValueError(f"tokenizer.model: {path} is not a readable SentencePiece model "
                         f"with pad, unk, bos and eos pieces ({message})") from None
    wanted = expected_special_ids(config)
    if tokenizer.special_ids != wanted:
        raise ValueError(f"tokenizer.model: {path} has special ids {tokenizer.special_ids}, the "
                         f"config {wanted} (model.overrides pad_id, bos_id, eos_id); set them "
                         f"to the model's")
    if tokenizer.vocab_size != config.tokenizer.vocab_size:
        raise ValueError(f"tokenizer.model: {path} has {tokenizer.vocab_size} pieces, "
                         f"tokenizer.vocab_size is {config.tokenizer.vocab_size}; set it to "
                         f"the model's size")
    return tokenizer


def copy_given_model(config: RunConfig, prefix: Path) -> SentencePieceTokenizer:
    """tokenizer.model copied to <prefix>.model (and its .vocab, if beside it), so that the
    run directory holds the tokenizer its model was trained with, as a trained one would."""
    source = Path(config.tokenizer.model)
    given_model(config)
    target = prefix.with_name(prefix.name + ".model")
    shutil.copyfile(source, target)
    vocab = source.with_suffix(".vocab")
    if vocab.is_file():
        shutil.copyfile(vocab, prefix.with_name(prefix.name + ".vocab"))
    return SentencePieceTokenizer(target)


def sample_positions(total: int, count: int, seed: int) -> np.ndarray:
    """The positions, ascending, of `count` of `total` texts drawn uniformly without
    replacement, seeded (all of them when there are no more): a corpus is sampled by its
    count alone, so a streamed one (train.shards) draws what the same texts in memory would."""
    if total <= count:
        return np.arange(total)
    return np.sort(np.random.default_rng(seed).choice(total, size=count, replace=False))


def sample_sentences(texts: Iterable[str], count: int, seed: int) -> list[str]:
    """`count` of `texts` drawn uniformly, seeded, in their order (sample_positions)."""
    texts = texts if isinstance(texts, Sequence) else list(texts)
    return [texts[i] for i in sample_positions(len(texts), count, seed)]
