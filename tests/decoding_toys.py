"""Toy steppers shared by the tests of keras_transformer.decoding: fake decoders whose logits
depend on (source, whole prefix), and helpers that run greedy and beam search over them."""
from __future__ import annotations

import functools

import numpy as np

from keras_transformer.decoding import (
    beam_search,
    greedy_search,
    log_softmax,
)

BOS = 0


class ToyStepper:
    """A fake decoder: ``model(source, prefix) -> logits``, where ``prefix`` is the tuple of all
    tokens fed so far (BOS first). Its "cache" is an array of prefixes per row that ``reorder``
    gathers, so a search that reorders wrongly gets wrong log-probabilities."""

    def __init__(self, model, sources, beam_size, max_length, break_reorder=False):
        self.model = model
        self.src = np.repeat(np.asarray(sources), beam_size)
        self.n = len(self.src)
        self.cache = np.full((self.n, max_length + 1), -1, dtype=np.int64)
        self.next_index = 0
        self.step_calls = 0
        self.reorder_calls = 0
        self.break_reorder = break_reorder

    def step(self, tokens, index):
        assert isinstance(tokens, np.ndarray) and tokens.dtype == np.int32
        assert tokens.shape == (self.n,)
        assert index == self.next_index, (index, self.next_index)
        self.next_index += 1
        self.step_calls += 1
        self.cache[:, index] = tokens
        return np.stack(
            [
                self.model(int(s), tuple(row[: index + 1].tolist()))
                for s, row in zip(self.src, self.cache, strict=True)
            ]
        ).astype(np.float32)

    def reorder(self, indices):
        assert isinstance(indices, np.ndarray) and indices.dtype == np.int32
        assert indices.shape == (self.n,)
        # Beams never move between sources.
        assert (self.src[indices] == self.src).all()
        self.reorder_calls += 1
        if not self.break_reorder:
            self.cache = self.cache[indices]


def random_model(seed, vocab, eos_id, eos_bias=0.0, scale=2.0):
    """Random logits that depend on (seed, source, whole prefix)."""

    @functools.cache
    def model(source, prefix):
        rng = np.random.default_rng([seed, source, *prefix])
        logits = rng.normal(size=vocab) * scale
        logits[eos_id] += eos_bias
        return logits.astype(np.float32)

    return model


def table_model(table, vocab, default):
    """Probabilities from a table keyed by the generated prefix (without BOS); zero -> -inf."""

    def model(source, prefix):
        probs = np.zeros(vocab)
        for tok, p in table.get(prefix[1:], default).items():
            probs[tok] = p
        with np.errstate(divide="ignore"):
            return np.log(probs).astype(np.float32)

    return model


def run_greedy(model, sources, max_length, eos_id, pad_id=0):
    st = ToyStepper(model, sources, 1, max_length)
    res = greedy_search(
        st.step, len(sources), bos_id=BOS, eos_id=eos_id, max_length=max_length, pad_id=pad_id
    )
    return res, st


def run_beam(model, sources, beam_size, max_length, eos_id, alpha, pad_id=0,
             break_reorder=False, **search_kw):
    st = ToyStepper(model, sources, beam_size, max_length, break_reorder=break_reorder)
    res = beam_search(
        st.step,
        st.reorder,
        len(sources),
        beam_size=beam_size,
        bos_id=BOS,
        eos_id=eos_id,
        max_length=max_length,
        alpha=alpha,
        pad_id=pad_id,
        **search_kw,
    )
    return res, st


def seq_logprob(model, source, seq):
    """Sum of log-probabilities of ``seq`` (without BOS) under ``model``, in float64."""
    total = 0.0
    prefix = (BOS,)
    for tok in seq:
        total += float(log_softmax(model(source, prefix).astype(np.float64))[tok])
        prefix = prefix + (tok,)
    return total


def random_transformer(seed: int, vocab: int = 40, eos_bias: float = 0.0, **overrides):
    """A tiny random-weight Transformer (keras seeded with `seed`; `overrides` change its
    config), built; `eos_bias` is added to EOS's output bias, so that hypotheses end at
    different lengths."""
    import keras

    from keras_transformer.config import TransformerConfig
    from keras_transformer.models.transformer import Transformer

    keras.utils.set_random_seed(seed)
    config = TransformerConfig.preset(
        "tiny", source_vocab_size=vocab, target_vocab_size=vocab, d_model=32, num_heads=4,
        d_ff=64, max_source_length=24, max_target_length=24, dropout=0.0, **overrides)
    model = Transformer(config)
    model((np.ones((1, 3), "int32"), np.ones((1, 2), "int32")))
    if eos_bias:
        bias = model.output_projection.bias
        bias.assign(bias.numpy() + eos_bias * (np.arange(vocab) == config.eos_id))
    return model
