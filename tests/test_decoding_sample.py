"""Tests for keras_transformer.decoding.sample: sample_search continues prompts by sampling."""
from __future__ import annotations

import numpy as np

from keras_transformer.decoding import (
    SearchSettings,
    sample_logits,
    sample_search,
)
from tests.decoding_toys import BOS, ToyStepper, random_model, run_greedy


def test_sample_search_at_temperature_zero_equals_greedy_search():
    eos = 1
    model = random_model(seed=12, vocab=11, eos_id=eos, eos_bias=1.5)
    sources = [0, 1, 2, 3, 4]
    greedy, _ = run_greedy(model, sources, 8, eos_id=eos)
    sampled = sample_search(ToyStepper(model, sources, 1, 8).step, [[BOS]] * len(sources), 8,
                            eos_id=eos, temperature=0.0)
    want = [ids + [eos] if eos in row else ids
            for ids, row in zip(greedy.to_lists(eos), greedy.tokens.tolist(), strict=True)]
    assert any(eos in row for row in sampled) and sampled == want


class RecordingStepper:
    """Logits from a fixed (index, vocab) table, the same for every row; records what it is fed."""

    def __init__(self, table):
        self.table = np.asarray(table, np.float32)
        self.fed = []

    def step(self, tokens, index):
        self.fed.append(tokens.copy())
        return np.repeat(self.table[index][None], len(tokens), axis=0)


def test_sample_search_forces_prompt_tokens_and_stops_at_eos():
    eos, vocab = 1, 6
    table = np.zeros((8, vocab))
    table[:, 4] = 5.0  # greedy picks 4 at every position ...
    table[5, eos] = 9.0  # ... and EOS at position 6
    stepper = RecordingStepper(table)
    prompts = [[0, 2, 3, 2], [0], [0, 5]]
    got = sample_search(stepper.step, prompts, 4, eos_id=eos, temperature=0.0, pad_id=0)
    # Row 0 generates from position 4: 4, 4, EOS (at 6). Rows 1 and 2 return their first 4
    # new tokens (positions 1-4 and 2-5) and go on to EOS at position 6 too.
    assert got == [[4, 4, eos], [4, 4, 4, 4], [4, 4, 4, 4]]
    fed = np.stack(stepper.fed, axis=1)  # (rows, steps)
    assert fed.shape == (3, 6)  # positions 0..5: every row has produced EOS at step 5
    assert fed[0].tolist() == [0, 2, 3, 2, 4, 4]
    assert fed[1].tolist() == [0, 4, 4, 4, 4, 4]
    assert fed[2].tolist() == [0, 5, 4, 4, 4, 4]


def test_sample_search_is_reproducible_by_seed_and_samples_like_sample_logits():
    rng = np.random.default_rng(13)
    table = rng.normal(size=(6, 9)) * 2
    prompts = [[0], [0, 3]]
    kwargs = dict(eos_id=-1, temperature=0.8, top_k=5, top_p=0.9)
    first = sample_search(RecordingStepper(table).step, prompts, 5, seed=21, **kwargs)
    again = sample_search(RecordingStepper(table).step, prompts, 5, seed=21, **kwargs)
    other = sample_search(RecordingStepper(table).step, prompts, 5, seed=22, **kwargs)
    assert first == again and first != other
    # Reference: one sample_logits call per position with the same generator, in order.
    reference = np.random.default_rng(21)
    samples = [sample_logits(np.repeat(table[i][None], 2, axis=0), reference, temperature=0.8,
                             top_k=5, top_p=0.9) for i in range(6)]
    assert first[0] == [int(samples[i][0]) for i in range(5)]  # positions 1-5
    assert first[1] == [int(samples[i][1]) for i in range(1, 6)]  # positions 2-6


def test_sample_search_frequencies_pass_a_chi_square_test_against_the_filtered_softmax():
    """20,000 prompts sample one token each from fixed logits at temperature 1.5 with top-k 4
    and top-p 0.85. softmax(logits / 1.5) = [.237 .121 .087 .062 .032 .461]; the top 4
    (ids 5, 0, 1, 2) renormalised hold [.509 .261 .134 .096], cumulative .509, .770, .904:
    the nucleus of 0.85 is ids {5, 0, 1}, the others are never drawn. The counts of the three
    must pass Pearson's chi-square test against softmax(logits / 1.5) renormalised over them
    at the 0.1% level (2 degrees of freedom: statistic < 13.816); the seed makes it
    deterministic."""
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, 3.0])
    draws, temperature = 20_000, 1.5
    got = sample_search(RecordingStepper(logits[None]).step, [[0]] * draws, 1, eos_id=-1,
                        temperature=temperature, top_k=4, top_p=0.85, seed=2024)
    counts = np.bincount([row[0] for row in got], minlength=6)
    kept = [5, 0, 1]
    assert counts.sum() == counts[kept].sum() == draws
    probs = np.exp(logits[kept] / temperature)
    expected = draws * probs / probs.sum()
    chi_square = float((((counts[kept] - expected) ** 2) / expected).sum())
    assert chi_square < 13.816, (counts, expected)


def test_sample_search_takes_the_settings_sampling_options():
    """SearchSettings.sampling is what sample_search takes: the same tokens as its keywords."""
    model = random_model(seed=5, vocab=11, eos_id=1, eos_bias=-1.0)
    prompts = [[BOS], [BOS, 4, 5]]
    settings = SearchSettings(temperature=0.7, top_k=5, top_p=0.9, seed=3,
                              no_repeat_ngram_size=2, min_length=2)
    got = sample_search(ToyStepper(model, [0, 1], 1, 12).step, prompts, 8, eos_id=1,
                        **settings.sampling)
    want = sample_search(ToyStepper(model, [0, 1], 1, 12).step, prompts, 8, eos_id=1,
                         temperature=0.7, top_k=5, top_p=0.9, seed=3, no_repeat_ngram_size=2,
                         min_length=2)
    assert got == want
