"""Noising a text for denoising pre-training, as a tf.data step: BART's text infilling (Lewis
et al. 2020), whose target is the original text, and T5's span corruption (Raffel et al. 2020),
whose target is the hidden spans alone.

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

Span corruption places its spans by the same rule, with every span at least one piece long
(T5 hides none of length 0), and writes span k as sentinel k (`<extra_id_k>`) in the input;
the target is each sentinel followed by its span's pieces, then the next sentinel and EOS.
T5's own draw of span lengths (a random split of the budget, mean 3) is replaced by this
module's Poisson draw, so that the two noises differ only in what they ask the model to write.

Draws are stateless, keyed by (seed, batch index), as masking.py's: a batch is corrupted the
same way however often its dataset is iterated, so a resumed run sees the batches it skipped.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.text.masking import batch_keys

# T5's sentinels, the pieces span corruption writes for its spans: a row holds at most 99 spans.
SENTINEL_PIECES = tuple(f"<extra_id_{k}>" for k in range(100))

# The noises of task denoising: BART's text infilling and T5's span corruption.
NOISES = ("infilling", "span_corruption")


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


class _Spans(NamedTuple):
    """Where the spans of a batch go, by the module's rule: gap g (0 <= g <= left) lies before
    the g-th of the `left` pieces left; `chosen` (B,S) the gaps that hold a span, `opened`
    (B,S) the spans at gaps <= g, `skipped` (B,S) the pieces hidden before the g-th piece
    left, which sits at text position g + skipped."""

    g: tf.Tensor
    left: tf.Tensor
    spans: tf.Tensor
    chosen: tf.Tensor
    opened: tf.Tensor
    skipped: tf.Tensor


def _place_spans(ids, span_lengths, gap_keys, *, rate: float, pad_id: int, eos_id: int,
                 max_spans=None, target_width=None) -> _Spans:
    """The spans of ids (B,S) int32 from the draws (module doc); with `max_spans`, at most that
    many less one (span corruption's closing sentinel), and with `target_width`, only as many
    as leave the hidden pieces, a sentinel for each span, the closing one and EOS within it."""
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
    if max_spans is not None:
        fits &= j < max_spans
    if target_width is not None:
        fits &= j + hidden + 2 <= target_width
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
    return _Spans(g, left, spans, chosen, opened, skipped)


def _scatter_rows(shape, fill: int, places, values):
    """A (B,W) int32 tensor of `fill` with values[i] at row places[i][0], column places[i][1]."""
    return tf.tensor_scatter_nd_update(tf.fill(shape, fill), places, values)


def infill(ids, span_lengths, gap_keys, *, rate: float, mask_id: int, pad_id: int,
           eos_id: int):
    """ids (B,S) -> the text-infilled input (B,S) int32 by the module's rule, with the given
    draws: span_lengths (B,K) int (K spans at most), gap_keys (B,S) float."""
    rate = check_noise_rate(rate)
    ids = tf.cast(ids, tf.int32)
    width = tf.shape(ids)[1]
    s = _place_spans(ids, span_lengths, gap_keys, rate=rate, pad_id=pad_id, eos_id=eos_id)
    # The g-th piece left is at g + skipped in the text, at g + opened in the input; gap g's
    # [MASK] just before it.
    rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(ids))
    piece = s.g < s.left
    taken = tf.gather(ids, tf.minimum(s.g + s.skipped, width - 1), batch_dims=1)
    at = tf.concat([tf.boolean_mask(tf.stack([rows, s.g + s.opened], -1), piece),
                    tf.boolean_mask(tf.stack([rows, s.g + s.opened - 1], -1), s.chosen),
                    tf.concat([rows[:, :1], s.left + s.spans], axis=1)], axis=0)
    values = tf.concat([tf.boolean_mask(taken, piece),
                        tf.fill([tf.reduce_sum(tf.cast(s.chosen, tf.int32))], mask_id),
                        tf.fill([tf.shape(ids)[0]], eos_id)], axis=0)
    return _scatter_rows(tf.shape(ids), pad_id, at, values)


def span_target_width(width, rate: float):
    """The width of span corruption's targets for inputs of `width` (EOS included): room for
    the most pieces a row of width - 1 pieces hides, a sentinel before each span, the closing
    sentinel and EOS, and never more than the input's width. Fixed by the input's width, so
    that batches of one width keep one shape."""
    budget = tf.cast(tf.floor(tf.cast(width - 1, tf.float32) * rate + 0.5), tf.int32)
    return tf.minimum(width, 2 * budget + 2)


def corrupt_spans(ids, span_lengths, gap_keys, *, rate: float, sentinel_ids, pad_id: int,
                  eos_id: int):
    """T5's span corruption of ids (B,S) with the given draws -> (input (B,S), target (B,T))
    int32, T = span_target_width. The spans are placed by the module's rule with every length
    at least 1, at most len(sentinel_ids) - 1 of them; span k becomes sentinel k in the input,
    and the target is sentinel 0, span 0's pieces, sentinel 1, ..., then the next sentinel
    and EOS."""
    rate = check_noise_rate(rate)
    ids = tf.cast(ids, tf.int32)
    sentinels = tf.constant(sentinel_ids, tf.int32)
    shape = tf.shape(ids)
    target_width = span_target_width(shape[1], rate)
    s = _place_spans(ids, tf.maximum(tf.cast(span_lengths, tf.int32), 1), gap_keys, rate=rate,
                     pad_id=pad_id, eos_id=eos_id, max_spans=len(sentinel_ids),
                     target_width=target_width)
    rows = tf.broadcast_to(tf.range(shape[0])[:, None], shape)
    content = tf.logical_and(tf.not_equal(ids, pad_id), tf.not_equal(ids, eos_id))
    # The pieces left, at text positions g + skipped; every other piece of the text is hidden.
    kept = _scatter_rows(shape, 0, tf.boolean_mask(tf.stack([rows, s.g + s.skipped], -1),
                                                   s.g < s.left),
                         tf.ones([tf.reduce_sum(s.left)], tf.int32)) > 0
    hidden = content & ~kept
    # Spans never touch (each has its own gap between pieces left), so a run of hidden
    # pieces is one span.
    starts = hidden & ~tf.pad(hidden[:, :-1], [[0, 0], [1, 0]])
    opened = tf.cumsum(tf.cast(starts, tf.int32), axis=1)  # spans begun at or before p
    sentinel = tf.gather(sentinels, tf.clip_by_value(opened - 1, 0, len(sentinel_ids) - 1))
    kept_before = tf.cumsum(tf.cast(kept, tf.int32), axis=1, exclusive=True)
    hidden_before = tf.cumsum(tf.cast(hidden, tf.int32), axis=1, exclusive=True)
    ends = tf.reduce_sum(tf.cast(kept, tf.int32), axis=1, keepdims=True)
    source = _scatter_rows(shape, pad_id, tf.concat([
        tf.boolean_mask(tf.stack([rows, kept_before + opened], -1), kept),
        tf.boolean_mask(tf.stack([rows, kept_before + opened - 1], -1), starts),
        tf.concat([rows[:, :1], ends + s.spans], axis=1)], axis=0), tf.concat([
            tf.boolean_mask(ids, kept), tf.boolean_mask(sentinel, starts),
            tf.fill([shape[0]], eos_id)], axis=0))
    total = tf.reduce_sum(tf.cast(hidden, tf.int32), axis=1, keepdims=True) + s.spans
    target = _scatter_rows([shape[0], target_width], pad_id, tf.concat([
        tf.boolean_mask(tf.stack([rows, hidden_before + opened], -1), hidden),
        tf.boolean_mask(tf.stack([rows, hidden_before + opened - 1], -1), starts),
        tf.concat([rows[:, :1], total], axis=1),
        tf.concat([rows[:, :1], total + 1], axis=1)], axis=0), tf.concat([
            tf.boolean_mask(ids, hidden), tf.boolean_mask(sentinel, starts),
            tf.gather(sentinels, s.spans[:, 0]), tf.fill([shape[0]], eos_id)], axis=0))
    return source, target


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


def span_corruption_batch(ids, batch_index, *, rate: float, span_lambda: float, sentinel_ids,
                          pad_id: int, eos_id: int, seed: int):
    """ids (B,S) int32 -> (input (B,S), target (B,T)) int32 by T5's span corruption
    (corrupt_spans), with noise_draws' draws from (seed, batch index)."""
    rate, span_lambda = check_noise(rate, span_lambda)
    lengths, gaps, _ = noise_draws(tf.shape(ids), batch_index, seed=seed,
                                   span_lambda=span_lambda)
    return corrupt_spans(ids, lengths, gaps, rate=rate, sentinel_ids=sentinel_ids,
                         pad_id=pad_id, eos_id=eos_id)
