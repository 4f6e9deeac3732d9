"""What a run's SentencePiece model is made from, when not from all of its training text: a
model the user brings (`tokenizer.model`), checked against the config and copied into the run,
or a seeded sample of the training sentences (`tokenizer.sample_sentences`)."""

from __future__ import annotations

import functools
import random
import shutil
from collections.abc import Iterable
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


def sample_sentences(texts: Iterable[str], count: int, seed: int) -> list[str]:
    """`count` of `texts` drawn uniformly, seeded, in their order (all of them when there are
    no more); one pass and `count` texts held, so `texts` may be a stream."""
    # Reservoir sampling (Algorithm R) over (position, text): uniform without knowing the
    # length, and the positions put the sample back in the corpus's order.
    rng = random.Random(seed)
    reservoir: list[tuple[int, str]] = []
    for position, text in enumerate(texts):
        if position < count:
            reservoir.append((position, text))
            continue
        slot = rng.randrange(position + 1)
        if slot < count:
            reservoir[slot] = (position, text)
    return [text for _, text in sorted(reservoir)]


# Positions from which reservoir_positions draws with NumPy; random.Random draws the ones
# before, too few to pay, and a block of NumPy's draws needs many positions (see _numpy_slots).
NUMPY_FROM = 1 << 12


def reservoir_positions(total: int, count: int, seed: int) -> np.ndarray:
    """The positions, ascending, of the texts sample_sentences(texts, count, seed) keeps out
    of `total` texts; they depend on `total` alone, so a corpus counted once is sampled
    without a pass in Python over its texts."""
    kept = np.arange(min(total, count))
    if total <= count or not count:
        return kept
    rng = random.Random(seed)
    # From 2**32 texts on randrange takes two words a draw, which _numpy_slots does not follow.
    numpy_from = max(count, NUMPY_FROM) if _numpy_draws_agree() and total < 1 << 32 else total
    for position in range(count, min(total, numpy_from)):
        slot = rng.randrange(position + 1)
        if slot < count:
            kept[slot] = position
    if numpy_from < total:
        for first, slots in _numpy_slots(rng, numpy_from, total):
            chosen = np.flatnonzero(slots < count)
            # The last position drawn into a slot is the one the reservoir keeps there.
            last = chosen[::-1][np.unique(slots[chosen][::-1], return_index=True)[1]]
            kept[slots[last]] = first + last
    return np.sort(kept)


def _numpy_slots(rng: random.Random, position: int, total: int):
    """(first position, the slots rng.randrange(p + 1) gives positions p from it on) block by
    block up to `total`, drawn by NumPy from rng's state, which rng keeps."""
    # randrange(n) takes 32-bit words of the Mersenne Twister (NumPy's MT19937, from the same
    # state) and keeps the top n.bit_length() bits of the first below n, so which word is
    # kept for which n depends on every earlier rejection. In a block of words, word j meets
    # n plus the words accepted before it (at least 0, at most j): below n it is accepted
    # whatever came before, from n + j on never; the few in between are settled by counting
    # the accepted before them until the counts stop changing (their one fixed point, as
    # each round settles at least one more word), which with blocks short against n takes a
    # few rounds.
    state = rng.getstate()[1]
    generator = np.random.MT19937()
    generator.state = {"bit_generator": "MT19937",
                       "state": {"key": np.array(state[:-1], dtype=np.uint32), "pos": state[-1]}}
    words = np.empty(0, np.uint64)
    while position < total:
        n = position + 1
        bits = n.bit_length()
        take = min(total, (1 << bits) - 1) - position  # positions whose n has these bits
        take = min(take, max(1, n // 8), 1 << 18)
        wanted = int(take * (1 << bits) / n * 1.05) + 64  # enough words, mostly
        if len(words) < wanted:
            words = np.concatenate((words, generator.random_raw(wanted - len(words))))
        tops = (words >> np.uint64(32 - bits)).astype(np.int64)
        sure = tops < n
        maybe = np.flatnonzero(~sure & (tops < n + np.arange(len(tops))))
        # A word in between is accepted when more of the others in between were accepted
        # before it than `short`: its top over n and the sure words before it.
        short = tops[maybe] - n - np.cumsum(sure)[maybe]
        before = np.zeros(len(maybe), np.int64)
        while True:
            accepted = short < before
            counted = np.cumsum(accepted) - accepted
            if np.array_equal(counted, before):
                break
            before = counted
        sure[maybe[accepted]] = True
        used = np.flatnonzero(sure)[:take]
        if not len(used):  # every word rejected (as good as never): all spent on position
            words = words[:0]
            continue
        yield position, tops[used]
        words = words[used[-1] + 1:]
        position += len(used)


@functools.cache
def _numpy_draws_agree() -> bool:
    """Whether _numpy_slots gives random.Random's own draws (its randrange as it is in the
    Pythons this runs on); reservoir_positions draws with random.Random alone otherwise."""
    first = NUMPY_FROM
    rng = random.Random(1)
    expected = [rng.randrange(p + 1) for p in range(first, first + 64)]
    _, slots = next(_numpy_slots(random.Random(1), first, first + 64))
    return slots.tolist() == expected
