"""BART's noising of a text for denoising pre-training (Lewis et al. 2020), as a tf.data step:
the corrupted copy an encoder-decoder reads; the target is the original text.

A row of a batch is a text's pieces, then EOS, then padding. Of its n pieces, m = round(n *
rate) are hidden (BART: 30%) by text infilling: span lengths are drawn from Poisson(lambda)
(BART: 3) until they cover m pieces, the last one cut to fit, and each span becomes a single
[MASK] in the input, so the model must also tell how many pieces are missing. A span of length
0 inserts a [MASK] that hides nothing. Spans never touch: each one sits in its own gap between
the pieces left, the gaps drawn uniformly without replacement, so one [MASK] always stands for
one span and the pieces left keep their order. Where a short row has fewer gaps than spans, or
zero-length spans would make the input longer than the row's width, the last spans drawn are
dropped (fewer pieces hidden).

With sentence permutation (BART's other noise that helped summarization), a row's sentences
(`sentence_ids`: a sentence index per piece) are put in a random order first, then infilled.

Draws are stateless, keyed by (seed, batch index), as masking.py's: a batch is corrupted the
same way however often its dataset is iterated, so a resumed run sees the batches it skipped.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.text.masking import batch_keys


def check_noise_rate(rate: float) -> float:
    """The share of pieces hidden, which must leave something to restore and something to read."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"the noise rate must be above 0 and below 1, got {rate}")
    return float(rate)


def check_noise(rate: float, span_lambda: float) -> tuple[float, float]:
    """The noise rate (check_noise_rate) and a positive mean span length."""
    rate = check_noise_rate(rate)
    if not 0.0 < span_lambda <= 64.0:
        raise ValueError(f"the span length mean (Poisson lambda) must be above 0 and at most "
                         f"64, got {span_lambda}")
    return rate, float(span_lambda)


def noise_draws(shape, batch_index, *, seed: int, span_lambda: float):
    """The random numbers that corrupt a (B,S) batch, from (seed, batch index): span lengths
    (B,S) int32 from Poisson(span_lambda), in the order they are used; keys of the gaps (B,S)
    float32 (the spans take the gaps with the smallest keys); keys of the sentences (B,S)
    float32 (sentence i of a row goes to the place its key ranks)."""
    keys = batch_keys(seed, batch_index, 3)
    lengths = tf.random.stateless_poisson(shape, keys[0], span_lambda, dtype=tf.int32)
    gaps = tf.random.stateless_uniform(shape, keys[1])
    sentences = tf.random.stateless_uniform(shape, keys[2])
    return lengths, gaps, sentences


def permute_sentences(ids, sentence_ids, sentence_keys, *, pad_id: int, eos_id: int):
    """ids (B,S) with each row's sentences reordered by their keys (a sentence's pieces keep
    their order); EOS and padding stay at the end. sentence_ids (B,S) int: each piece's
    sentence index in its row (0 <= index < S); sentence_keys (B,S) float in [0, 1)."""
    ids = tf.cast(ids, tf.int32)
    content = tf.logical_and(tf.not_equal(ids, pad_id), tf.not_equal(ids, eos_id))
    index = tf.clip_by_value(tf.cast(sentence_ids, tf.int32), 0, tf.shape(ids)[1] - 1)
    key = tf.gather(sentence_keys, index, batch_dims=1)
    # A stable sort keeps a sentence's pieces in order, and EOS and padding (keyed above every
    # sentence) where they were.
    order = tf.argsort(tf.where(content, key, 2.0), axis=1, stable=True)
    return tf.gather(ids, order, batch_dims=1)


def infill(ids, span_lengths, gap_keys, *, rate: float, mask_id: int, pad_id: int,
           eos_id: int):
    """ids (B,S) -> the text-infilled input (B,S) int32 by the module's rule, with the given
    draws: span_lengths (B,K) int (K spans at most), gap_keys (B,S) float."""
    rate = check_noise_rate(rate)
    ids = tf.cast(ids, tf.int32)
    width = tf.shape(ids)[1]
    content = tf.logical_and(tf.not_equal(ids, pad_id), tf.not_equal(ids, eos_id))
    n = tf.reduce_sum(tf.cast(content, tf.int32), axis=1, keepdims=True)  # (B,1)
    budget = tf.cast(tf.floor(tf.cast(n, tf.float32) * rate + 0.5), tf.int32)
    lengths = tf.cast(span_lengths, tf.int32)
    before = tf.cumsum(lengths, axis=1, exclusive=True)
    # The spans drawn before the budget is spent, the last one cut to what is left.
    lengths = tf.where(before < budget, tf.minimum(lengths, budget - before), 0)
    drawn = tf.reduce_sum(tf.cast(before < budget, tf.int32), axis=1, keepdims=True)
    # Keep the first j spans for the largest j that fits: j gaps among the n - hidden pieces
    # left (n - hidden + 1 gaps), and an input of n - hidden + j pieces + EOS within the width.
    hidden = tf.pad(tf.cumsum(lengths, axis=1), [[0, 0], [1, 0]])  # (B,K+1): first j spans
    j = tf.range(tf.shape(hidden)[1])[None, :]
    fits = ((j <= drawn) & (j + hidden <= n + 1) & (j - hidden <= width - 1 - n))
    spans = tf.reduce_max(tf.where(fits, j, 0), axis=1, keepdims=True)  # (B,1)
    lengths = tf.where(j[:, 1:] <= spans, lengths, 0)
    left = n - tf.reduce_sum(lengths, axis=1, keepdims=True)  # pieces left, in order
    # The spans take the `spans` gaps of smallest key among gaps 0..left (gap g: before the
    # g-th piece left; gap `left`: after the last), in order: span k in the k-th chosen gap.
    g = tf.range(width)[None, :]
    keyed = tf.where(g <= left, tf.cast(gap_keys, tf.float32), 2.0)
    rank = tf.argsort(tf.argsort(keyed, axis=1, stable=True), axis=1, stable=True)
    chosen = rank < spans
    opened = tf.cumsum(tf.cast(chosen, tf.int32), axis=1)  # spans at gaps <= g
    span_of_gap = tf.maximum(opened - 1, 0)
    length_at = tf.where(chosen, tf.gather(lengths, span_of_gap, batch_dims=1), 0)
    skipped = tf.cumsum(length_at, axis=1)  # hidden pieces before the g-th piece left
    # The g-th piece left is at g + skipped in the text, at g + opened in the input; gap g's
    # [MASK] just before it.
    rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(ids))
    piece = g < left
    taken = tf.gather(ids, tf.minimum(g + skipped, width - 1), batch_dims=1)
    at = tf.concat([tf.boolean_mask(tf.stack([rows, g + opened], -1), piece),
                    tf.boolean_mask(tf.stack([rows, g + opened - 1], -1), chosen),
                    tf.concat([rows[:, :1], left + spans], axis=1)], axis=0)
    values = tf.concat([tf.boolean_mask(taken, piece),
                        tf.fill([tf.reduce_sum(tf.cast(chosen, tf.int32))], mask_id),
                        tf.fill([tf.shape(ids)[0]], eos_id)], axis=0)
    return tf.tensor_scatter_nd_update(tf.fill(tf.shape(ids), pad_id), at, values)


def noise_batch(ids, batch_index, *, rate: float, span_lambda: float, mask_id: int,
                pad_id: int, eos_id: int, seed: int, sentence_ids=None):
    """ids (B,S) int32 -> the corrupted input (B,S) int32: sentences permuted when
    `sentence_ids` (B,S) is given, then text infilling (module doc)."""
    rate, span_lambda = check_noise(rate, span_lambda)
    ids = tf.cast(ids, tf.int32)
    lengths, gaps, sentences = noise_draws(tf.shape(ids), batch_index, seed=seed,
                                           span_lambda=span_lambda)
    if sentence_ids is not None:
        ids = permute_sentences(ids, sentence_ids, sentences, pad_id=pad_id, eos_id=eos_id)
    return infill(ids, lengths, gaps, rate=rate, mask_id=mask_id, pad_id=pad_id,
                  eos_id=eos_id)
