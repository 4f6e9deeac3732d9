"""Analytic matmul FLOPs of a step, the same count as the peers' (../shared/peers/common.py).

Reimplemented over TransformerConfig rather than imported, because the peers' module reads its
configs by name; tests/test_bench.py checks both give the same numbers for small and base.
Matmul FLOPs only (2 per multiply-add): projections, FFN, attention products, output layer.
"""

from __future__ import annotations

from keras_transformer.config import TransformerConfig


def _layer_macs(c: TransformerConfig, target_attended: int, source_length: int):
    """Multiply-adds per token of one encoder and one decoder layer."""
    d, f = c.d_model, c.d_ff
    encoder = 4 * d * d + 2 * d * f + 2 * source_length * d
    decoder = 6 * d * d + 2 * d * f + 2 * target_attended * d + 2 * source_length * d
    return encoder, decoder


def train_step_flops(c: TransformerConfig, batch: int, source_length: int,
                     target_length: int) -> float:
    """Forward + backward ~= 3x the forward FLOPs (full T x T attention)."""
    d, v = c.d_model, c.target_vocab_size
    encoder, decoder = _layer_macs(c, target_length, source_length)
    macs = batch * (source_length * c.num_encoder_layers * encoder
                    + source_length * c.num_decoder_layers * 2 * d * d  # cross K, V of memory
                    + target_length * (c.num_decoder_layers * decoder + d * v))
    return 3 * 2 * macs


def masked_lm_step_flops(c: TransformerConfig, batch: int, length: int,
                         predictions: int) -> float:
    """A masked language model's train step (forward + backward ~= 3x forward): the encoder
    over every position, BERT's head (a d x d dense layer, then the tied d x V projection)
    at `predictions` positions a row (the row's length when it predicts everywhere)."""
    d, v = c.d_model, c.source_vocab_size
    encoder, _ = _layer_macs(c, 0, length)
    macs = batch * (length * c.num_encoder_layers * encoder + predictions * (d * d + d * v))
    return 3 * 2 * macs


def generate_flops(c: TransformerConfig, batch: int, beams: int, source_length: int,
                   new_tokens: int) -> float:
    """Encoder and cross K/V once, then new_tokens cached decoder steps per hypothesis."""
    d, v = c.d_model, c.target_vocab_size
    encoder, _ = _layer_macs(c, 0, source_length)
    macs = batch * source_length * (c.num_encoder_layers * encoder
                                    + c.num_decoder_layers * 2 * d * d)
    for t in range(1, new_tokens + 1):
        _, decoder = _layer_macs(c, t, source_length)
        macs += batch * beams * (c.num_decoder_layers * decoder + d * v)
    return 2 * macs
