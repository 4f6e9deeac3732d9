"""Tests for the tf.data translation and classification pipelines."""

from __future__ import annotations

import random
from collections import Counter
from itertools import pairwise

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.text.pipeline import (
    bucket_batch_sizes_for,
    bucket_boundaries_for,
    count_too_long,
    make_classification_dataset,
    make_translation_dataset,
)
from keras_transformer.text.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SentencePieceTokenizer,
    train_sentencepiece,
)

# fmt: off
SRC_WORDS = [
    "the", "a", "cat", "dog", "bird", "sat", "ran", "on", "under", "mat", "tree", "house",
    "big", "small", "red", "blue",
]
# fmt: on
# fmt: off
TGT_WORDS = [
    "el", "la", "gato", "perro", "pajaro", "sento", "corrio", "en", "bajo", "alfombra", "arbol",
    "casa", "grande",
]
# fmt: on

MAX_SRC = 14
MAX_TGT = 18


def make_pairs(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    sources, targets = [], []
    for i in range(n):
        src = [rng.choice(SRC_WORDS) for _ in range(rng.randint(1, 14))]
        tgt = [rng.choice(TGT_WORDS) for _ in range(rng.randint(1, 16))]
        # A per-pair tag keeps (source, target) pairs distinct so pairing is checkable.
        sources.append(" ".join(src))
        targets.append(" ".join(tgt) + f" n{i}")
    return sources, targets


@pytest.fixture(scope="module")
def pairs():
    return make_pairs(240)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory, pairs):
    sources, targets = pairs
    root = tmp_path_factory.mktemp("spm")
    src_tok = SentencePieceTokenizer(train_sentencepiece(sources, root / "src", vocab_size=48))
    tgt_tok = SentencePieceTokenizer(train_sentencepiece(targets, root / "tgt", vocab_size=400))
    return src_tok, tgt_tok


def python_too_long(sources, targets, src_tok, tgt_tok, max_src, max_tgt) -> list[bool]:
    """Reference: which pairs exceed the limits (source + EOS, target + BOS)."""
    return [
        len(src_tok.encode([s])[0]) + 1 > max_src or len(tgt_tok.encode([t])[0]) + 1 > max_tgt
        for s, t in zip(sources, targets, strict=True)
    ]


def collect(ds) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return [(s.numpy(), ti.numpy(), to.numpy()) for (s, ti), to in ds]


def build(pairs, tokenizers, **kw):
    sources, targets = pairs
    src_tok, tgt_tok = tokenizers
    args = dict(max_source_length=MAX_SRC, max_target_length=MAX_TGT, tokens_per_batch=64)
    args.update(kw)
    return make_translation_dataset(sources, targets, src_tok, tgt_tok, **args)


@pytest.fixture(scope="module")
def epoch(pairs, tokenizers):
    return collect(build(pairs, tokenizers, seed=7))


# ------------------------------------------------------------------------ boundaries
def test_bucket_boundaries_for():
    assert bucket_boundaries_for(64) == [17, 33, 49, 65]
    assert bucket_boundaries_for(10, 3) == [5, 8, 11]
    assert bucket_boundaries_for(2, 4) == [2, 3]
    for max_len in (1, 7, 50, 128):
        b = bucket_boundaries_for(max_len)
        assert b[-1] == max_len + 1
        assert all(x < y for x, y in pairwise(b))


def test_bucket_batch_sizes():
    assert bucket_batch_sizes_for([17, 33, 65], 100) == [6, 3, 1, 1]
    assert bucket_batch_sizes_for([5, 9], 64) == [16, 8, 1]


def test_boundaries_must_cover_max_length(pairs, tokenizers):
    with pytest.raises(ValueError, match="do not cover"):
        build(pairs, tokenizers, bucket_boundaries=[5, 10, MAX_TGT])
    with pytest.raises(ValueError, match="strictly increasing"):
        build(pairs, tokenizers, bucket_boundaries=[10, 5, 30])


def test_bad_arguments(pairs, tokenizers):
    with pytest.raises(ValueError, match="differ in length"):
        make_translation_dataset(
            pairs[0], pairs[1][:-1], *tokenizers,
            max_source_length=8, max_target_length=8, tokens_per_batch=32,
        )  # fmt: skip
    with pytest.raises(ValueError, match="tokens_per_batch"):
        build(pairs, tokenizers, tokens_per_batch=0)


# ------------------------------------------------------------------------ translation
def test_element_spec(pairs, tokenizers):
    spec = build(pairs, tokenizers).element_spec
    (s, ti), to = spec
    for t in (s, ti, to):
        assert t.dtype == tf.int32 and t.shape.rank == 2


def test_batch_shapes_from_fixed_set(epoch):
    lengths = {b - 1 for b in bucket_boundaries_for(MAX_TGT)}
    batch_sizes = {max(1, 64 // length) for length in lengths}
    seen = set()
    for s, ti, to in epoch:
        assert s.dtype == ti.dtype == to.dtype == np.int32
        assert s.shape == ti.shape == to.shape
        assert s.shape[1] in lengths
        assert s.shape[0] <= max(1, 64 // s.shape[1])
        seen.add(s.shape)
    # Partial batches aside, most batches are full: at most 2 shapes per bucket.
    assert len(seen) <= 2 * len(lengths)
    assert {shape[0] for shape in seen} & batch_sizes


def test_token_budget(pairs, tokenizers):
    for budget in (64, 24, 10):
        for s, _, _ in collect(build(pairs, tokenizers, tokens_per_batch=budget)):
            b, length = s.shape
            assert b * length <= budget or (b == 1 and length > budget)


def test_source_rows_end_with_eos_then_zeros(epoch):
    for s, _, _ in epoch:
        for row in s:
            n = int(np.argmax(row == EOS_ID))
            assert row[n] == EOS_ID
            assert np.all(row[n + 1 :] == PAD_ID)
            assert np.all(row[:n] > EOS_ID)  # no specials among the content
            assert n + 1 <= MAX_SRC


def test_target_in_and_out(epoch):
    for _, ti, to in epoch:
        assert np.all(ti[:, 0] == BOS_ID)
        content = (ti != PAD_ID).sum(axis=1) - 1  # number of real target ids
        expected = np.concatenate([ti[:, 1:], np.zeros_like(ti[:, :1])], axis=1)
        expected[np.arange(len(ti)), content] = EOS_ID
        np.testing.assert_array_equal(to, expected)
        assert np.all(content + 1 <= MAX_TGT)


def test_long_pairs_dropped_and_everything_else_kept(pairs, tokenizers, epoch):
    sources, targets = pairs
    src_tok, tgt_tok = tokenizers
    too_long = python_too_long(sources, targets, src_tok, tgt_tok, MAX_SRC, MAX_TGT)
    n_dropped = sum(too_long)
    assert 0 < n_dropped < len(sources)  # the data must exercise both branches
    assert (
        count_too_long(
            sources, targets, src_tok, tgt_tok, max_source_length=MAX_SRC, max_target_length=MAX_TGT
        )
        == n_dropped
    )
    got = Counter()
    for s, _, to in epoch:
        got.update(zip(src_tok.decode(s), tgt_tok.decode(to), strict=True))
    expected = Counter(
        (s, t) for s, t, bad in zip(sources, targets, too_long, strict=True) if not bad
    )
    assert sum(got.values()) == len(sources) - n_dropped
    assert got == expected


def test_same_seed_same_order(pairs, tokenizers, epoch):
    again = collect(build(pairs, tokenizers, seed=7))
    assert len(again) == len(epoch)
    for a, b in zip(epoch, again, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    other = collect(build(pairs, tokenizers, seed=8))
    first = [row.tobytes() for s, _, _ in epoch for row in s]
    second = [row.tobytes() for s, _, _ in other for row in s]
    assert sorted(first) == sorted(second)
    assert first != second


def test_no_shuffle_keeps_order_within_bucket(pairs, tokenizers):
    sources, targets = pairs
    src_tok, _ = tokenizers
    ds = build(pairs, tokenizers, shuffle=False, tokens_per_batch=10_000)
    # One bucket, one batch per bucket: rows are in input order.
    for s, _, _ in collect(ds):
        decoded = src_tok.decode(s)
        positions = [sources.index(d) for d in decoded]
        assert positions == sorted(positions)


def test_truncate_instead_of_drop(pairs, tokenizers):
    sources, _ = pairs
    src_tok, tgt_tok = tokenizers
    batches = collect(build(pairs, tokenizers, drop_long=False))
    assert sum(len(s) for s, _, _ in batches) == len(sources)
    expected_src = Counter(
        src_tok.decode([ids[: MAX_SRC - 1]])[0] for ids in src_tok.encode(sources)
    )
    got_src = Counter()
    for s, ti, to in batches:
        got_src.update(src_tok.decode(s))
        assert np.all((s != PAD_ID).sum(axis=1) <= MAX_SRC)
        assert np.all((to != PAD_ID).sum(axis=1) <= MAX_TGT)
        # EOS survives truncation.
        assert np.all(s[np.arange(len(s)), (s != PAD_ID).sum(axis=1) - 1] == EOS_ID)
        assert np.all(to[np.arange(len(to)), (to != PAD_ID).sum(axis=1) - 1] == EOS_ID)
        assert np.all(ti[:, 0] == BOS_ID)
    assert got_src == expected_src


def test_repeat_gives_full_batches(pairs, tokenizers):
    ds = build(pairs, tokenizers, repeat=True, tokens_per_batch=40)
    n_kept = 0
    for (s, _), _ in ds.take(150):
        assert s.shape[0] == max(1, 40 // s.shape[1])
        n_kept += s.shape[0]
    assert n_kept > len(pairs[0])  # crossed an epoch boundary


def test_custom_boundaries(pairs, tokenizers):
    batches = collect(build(pairs, tokenizers, bucket_boundaries=[8, MAX_TGT + 1]))
    assert {s.shape[1] for s, _, _ in batches} <= {7, MAX_TGT}


# ------------------------------------------------------------------------ classification
def test_classification_dataset(pairs, tokenizers):
    sources, _ = pairs
    src_tok, _ = tokenizers
    texts = sources[:50]
    labels = [i % 3 for i in range(50)]
    ds = make_classification_dataset(
        texts, labels, src_tok, max_length=8, batch_size=16, shuffle=True, seed=1
    )
    got = Counter()
    sizes = []
    for ids, y in ds:
        ids, y = ids.numpy(), y.numpy()
        assert ids.dtype == np.int32 and y.dtype == np.int32
        assert ids.shape[1] == 8 and y.shape == (ids.shape[0],)
        sizes.append(ids.shape[0])
        n = (ids != PAD_ID).sum(axis=1)
        assert np.all(ids[np.arange(len(ids)), n - 1] == EOS_ID)
        got.update(zip(src_tok.decode(ids), y.tolist(), strict=True))
    assert sizes == [16, 16, 16, 2]
    expected = Counter(
        (src_tok.decode([ids[:7]])[0], label)
        for ids, label in zip(src_tok.encode(texts), labels, strict=True)
    )
    assert got == expected


def test_classification_bad_labels(pairs, tokenizers):
    with pytest.raises(ValueError, match="differ in length"):
        make_classification_dataset(
            pairs[0][:3], [0, 1], tokenizers[0], max_length=8, batch_size=2, shuffle=False, seed=0
        )
    with pytest.raises(ValueError, match="integer"):
        make_classification_dataset(
            pairs[0][:2], [0.5, 1.0], tokenizers[0], max_length=8, batch_size=2, shuffle=False,
            seed=0,
        )  # fmt: skip
