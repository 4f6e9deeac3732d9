"""BERT's masking of pieces for a masked language model, as a tf.data step: which pieces a
batch hides and what it asks the model to predict.

Of the pieces that are not special (padding, BOS, EOS, UNK, [MASK]), each is chosen with
probability `rate` (BERT: 15%); a chosen piece becomes [MASK] 80% of the time, a random
ordinary piece 10%, and stays itself 10% (so the model cannot learn that an unmasked piece
is always right). The target is the original piece at a chosen position and PAD elsewhere, so
a loss that masks PAD targets reads the chosen positions only. With whole words, the choice is
made per word (a piece that starts with SentencePiece's "▁" opens a word, and the pieces after
it up to the next one belong to it), and every piece of a chosen word is hidden.

Draws are stateless, keyed by (seed, batch index): a batch is masked the same way however
often its dataset is iterated, which keeps a resumed run's batches the ones it skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

MASK_PIECE = "[MASK]"
# BERT's split of the chosen pieces: [MASK], a random piece, unchanged.
MASK_SPLIT = (0.8, 0.1, 0.1)


def check_rate(rate: float) -> float:
    """The masking rate, which must leave something to predict and something to read."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"the mask rate must be above 0 and below 1, got {rate}")
    return float(rate)


def mask_batch(ids, batch_index, *, rate: float, mask_id: int, pad_id: int, vocab_size: int,
               special_ids: Sequence[int], seed: int, word_starts=None):
    """ids (B,S) int32 -> (inputs (B,S), targets (B,S)) int32 by BERT's rule (module doc).

    `word_starts` (B,S) bool marks the first piece of each word for whole-word masking; None
    chooses pieces one by one."""
    rate = check_rate(rate)
    ids = tf.cast(ids, tf.int32)
    special = tf.constant(sorted(set(special_ids) | {mask_id, pad_id}), tf.int32)
    ordinary = tf.reduce_all(tf.not_equal(ids[..., None], special), axis=-1)
    key = tf.stack([tf.cast(seed, tf.int64), tf.cast(batch_index, tf.int64)])
    keys = tf.random.experimental.stateless_split(key, 4)
    draw = tf.random.stateless_uniform(tf.shape(ids), keys[0])
    if word_starts is None:
        chosen = tf.logical_and(draw < rate, ordinary)
    else:
        # Each word takes the draw of its first piece: the running count of word starts
        # numbers the words of a row, and a piece reads its word's draw.
        starts = tf.logical_and(tf.cast(word_starts, tf.bool), ordinary)
        word = tf.maximum(tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, 0)
        word_draw = tf.gather(draw, word, batch_dims=1)
        opened = tf.cumsum(tf.cast(starts, tf.int32), axis=1) > 0
        chosen = tf.logical_and(tf.logical_and(word_draw < rate, ordinary), opened)
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


def word_start_table(pieces: Sequence[str]) -> np.ndarray:
    """(V,) bool: whether each piece opens a word (SentencePiece's "▁" prefix)."""
    return np.array([p.startswith("\u2581") for p in pieces], bool)
