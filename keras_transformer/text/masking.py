"""BERT's masking of pieces for a masked language model, as a tf.data step: which pieces a
batch hides and what it asks the model to predict.

Of the pieces that are not special (padding, BOS, EOS, UNK, [MASK]), each is chosen with
probability `rate` (BERT: 15%); a chosen piece becomes [MASK] 80% of the time, a random
ordinary piece 10%, and stays itself 10% (so the model cannot learn that an unmasked piece
is always right). The target is the original piece at a chosen position and PAD elsewhere, so
a loss that masks PAD targets reads the chosen positions only. With whole words, the choice is
made per word (a piece that starts with SentencePiece's "▁" opens a word, and the pieces after
it up to the next one belong to it), and every piece of a chosen word is hidden.

With a cap (`max_predictions`, BERT's `max_predictions_per_seq`) a row never has more chosen
pieces than the cap: of those the draw chose, the ones with the lowest draws stay chosen (a
uniform sample of them; a word's pieces share their word's draw, so a word stays or goes
whole), and the rest are left as they were. `masked_positions` then lists each row's chosen
positions in a fixed number of slots, which is what a head that predicts only there reads.

Draws are stateless, keyed by (seed, batch index): a batch is masked the same way however
often its dataset is iterated, which keeps a resumed run's batches the ones it skipped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

MASK_PIECE = "[MASK]"
# BERT's split of the chosen pieces: [MASK], a random piece, unchanged.
MASK_SPLIT = (0.8, 0.1, 0.1)
# The default cap sits this many standard deviations of the count of chosen pieces above its
# mean: at 15% per piece, a full row of 16 to 256 pieces draws more about once in a thousand
# rows (the binomial tail), so the cap seldom changes what is masked.
CAP_DEVIATIONS = 3


def check_rate(rate: float) -> float:
    """The masking rate, which must leave something to predict and something to read."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"the mask rate must be above 0 and below 1, got {rate}")
    return float(rate)


def default_max_predictions(rate: float, max_length: int) -> int:
    """The cap on chosen pieces a row of `max_length` pieces gets when none is given: the
    mean count, rate * max_length, plus CAP_DEVIATIONS standard deviations of its binomial
    spread, rounded up, and never above max_length."""
    rate = check_rate(rate)
    spread = math.sqrt(max_length * rate * (1 - rate))
    return min(max_length, math.ceil(rate * max_length + CAP_DEVIATIONS * spread))


def check_max_predictions(cap: int, rate: float, max_length: int) -> int:
    """The cap, which must leave room for a full row's share at `rate` and cannot exceed the
    row's length."""
    low = math.ceil(check_rate(rate) * max_length)
    if not low <= cap <= max_length:
        raise ValueError(f"the cap on masked pieces a row must be between {low} (mask rate "
                         f"{rate} of {max_length} pieces) and {max_length}, got {cap}")
    return int(cap)


def batch_keys(seed, batch_index, count: int):
    """`count` stateless random keys (count, 2) of one batch, from (seed, batch index): the
    same batch gets the same draws on every pass."""
    key = tf.stack([tf.cast(seed, tf.int64), tf.cast(batch_index, tf.int64)])
    return tf.random.experimental.stateless_split(key, count)


def mask_batch(ids, batch_index, *, rate: float, mask_id: int, pad_id: int, vocab_size: int,
               special_ids: Sequence[int], seed: int, word_starts=None,
               max_predictions: int | None = None):
    """ids (B,S) int32 -> (inputs (B,S), targets (B,S)) int32 by BERT's rule (module doc).

    `word_starts` (B,S) bool marks the first piece of each word for whole-word masking; None
    chooses pieces one by one. `max_predictions`: at most this many chosen pieces a row (the
    module doc says which stay); None leaves the count to the draw."""
    rate = check_rate(rate)
    ids = tf.cast(ids, tf.int32)
    special = tf.constant(sorted(set(special_ids) | {mask_id, pad_id}), tf.int32)
    ordinary = tf.reduce_all(tf.not_equal(ids[..., None], special), axis=-1)
    keys = batch_keys(seed, batch_index, 4)
    draw = tf.random.stateless_uniform(tf.shape(ids), keys[0])
    if word_starts is None:
        chosen = tf.logical_and(draw < rate, ordinary)
        priority = draw
    else:
        # Each word takes the draw of its first piece: the running count of word starts
        # numbers the words of a row, and a piece reads its word's draw.
        starts = tf.logical_and(tf.cast(word_starts, tf.bool), ordinary)
        word = tf.maximum(tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, 0)
        word_draw = tf.gather(draw, word, batch_dims=1)
        opened = tf.cumsum(tf.cast(starts, tf.int32), axis=1) > 0
        chosen = tf.logical_and(tf.logical_and(word_draw < rate, ordinary), opened)
        priority = word_draw
    if max_predictions is not None:
        chosen = cap_chosen(chosen, priority, max_predictions)
    how = tf.random.stateless_uniform(tf.shape(ids), keys[1])
    random_ids = tf.random.stateless_uniform(tf.shape(ids), keys[2], minval=0,
                                             maxval=vocab_size, dtype=tf.int32)
    # A random replacement is an ordinary piece: a special id would read as structure.
    random_ok = tf.reduce_all(tf.not_equal(random_ids[..., None], special), axis=-1)
    random_ids = tf.where(random_ok, random_ids, ids)
    replaced = tf.where(how < MASK_SPLIT[0], mask_id,
                        tf.where(how < MASK_SPLIT[0] + MASK_SPLIT[1], random_ids, ids))
    inputs = tf.where(chosen, replaced, ids)
    targets = tf.where(chosen, ids, pad_id)
    return inputs, targets


def cap_chosen(chosen, priority, cap: int):
    """chosen (B,S) bool, priority (B,S) float in [0, 1) -> chosen with at most `cap` per row:
    those whose priority is among the row's `cap` lowest. Pieces of equal priority (a word's)
    are kept or dropped together, so a row may keep fewer than `cap`, never more."""
    # Unchosen pieces sort after every chosen one (priorities are below 1); a chosen piece's
    # count is then the number of chosen pieces at or below its priority.
    ranked = tf.sort(tf.where(chosen, priority, 2.0), axis=-1)
    count = tf.searchsorted(ranked, priority, side="right")
    return tf.logical_and(chosen, count <= cap)


def masked_positions(targets, pad_id: int, max_predictions: int):
    """targets (B,S) int32 (PAD where not chosen) -> (positions (B,P), labels (B,P)) int32,
    P = min(max_predictions, S): each row's chosen positions in order and their targets, then
    padding slots at position 0 with label PAD, which the loss and the metrics weigh 0.

    The targets must come from `mask_batch` with the same cap: a row with more chosen
    positions than P would lose the ones after the P-th."""
    targets = tf.convert_to_tensor(targets, tf.int32)
    chosen = tf.not_equal(targets, pad_id)
    slots = tf.minimum(max_predictions, tf.shape(targets)[1])
    # A stable sort of "not chosen" puts a row's chosen positions first, in order.
    order = tf.argsort(tf.cast(tf.logical_not(chosen), tf.int32), axis=-1, stable=True)
    order = tf.cast(order[:, :slots], tf.int32)
    kept = tf.gather(chosen, order, batch_dims=1)
    positions = tf.where(kept, order, 0)
    labels = tf.where(kept, tf.gather(targets, order, batch_dims=1), pad_id)
    return positions, labels


def word_start_table(pieces: Sequence[str]) -> np.ndarray:
    """(V,) bool: whether each piece opens a word (SentencePiece's "▁" prefix)."""
    return np.array([p.startswith("\u2581") for p in pieces], bool)
