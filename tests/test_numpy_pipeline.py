"""The NumPy input path (text.numpy_pipeline) against the tf.data one (text.pipeline): the same
batches, padding and token budgets; its seeded shuffle, repetition and skip."""

import numpy as np
import pytest

from keras_transformer.text.numpy_pipeline import TranslationBatches
from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece

WORDS = ["red", "blue", "cat", "dog", "big", "small", "one", "two", "three", "I", "saw"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(0)
    sources = [" ".join(rng.choice(WORDS, size=rng.integers(1, 12))) for _ in range(300)]
    targets = [" ".join(rng.choice(WORDS, size=rng.integers(1, 12))) for _ in range(300)]
    tok = SentencePieceTokenizer(train_sentencepiece(
        sources + targets, tmp_path_factory.mktemp("spm") / "spm", 40))
    return sources, targets, tok


OPTIONS = [
    dict(max_source_length=16, max_target_length=16, tokens_per_batch=120),
    dict(max_source_length=16, max_target_length=16, tokens_per_batch=64, drop_long=False,
         bucket_boundaries=[5, 9, 17]),
    dict(max_source_length=16, max_target_length=10, tokens_per_batch=100,
         fixed_target_length=True, drop_remainder=True),
]


def _rows(batches):
    """Every batch as a tuple of its three arrays."""
    return [(np.asarray(i[0]), np.asarray(i[1]), np.asarray(o)) for i, o in batches]


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            np.testing.assert_array_equal(u, v)


@pytest.mark.tf_only
@pytest.mark.parametrize("options", OPTIONS)
def test_unshuffled_batches_are_tf_datas(corpus, options):
    from keras_transformer.text.pipeline import make_translation_dataset

    sources, targets, tok = corpus
    expected = _rows(make_translation_dataset(sources, targets, tok, tok, shuffle=False,
                                              **options).as_numpy_iterator())
    got = TranslationBatches(sources, targets, tok, tok, shuffle=False, **options)
    assert len(got) == len(expected) > 5
    _assert_same(_rows(got[i] for i in range(len(got))), expected)


@pytest.mark.tf_only
def test_a_shuffled_pass_holds_tf_datas_pairs_in_the_same_batch_shapes(corpus):
    from keras_transformer.text.pipeline import make_translation_dataset

    sources, targets, tok = corpus
    options = OPTIONS[0]
    expected = _rows(make_translation_dataset(sources, targets, tok, tok, shuffle=True, seed=3,
                                              **options).as_numpy_iterator())
    got = _rows(TranslationBatches(sources, targets, tok, tok, shuffle=True, seed=3,
                                   **options))

    def pairs(rows):
        return sorted(tuple(map(tuple, (s, t))) for b in rows for s, t in zip(b[0], b[2],
                                                                            strict=True))

    assert pairs(got) == pairs(expected)
    assert sorted(b[0].shape for b in got) == sorted(b[0].shape for b in expected)


def test_the_shuffle_is_seeded_and_a_new_order_each_pass(corpus):
    sources, targets, tok = corpus
    options = OPTIONS[0]

    def one_pass(seed, passes=1):
        data = TranslationBatches(sources, targets, tok, tok, seed=seed, **options)
        for _ in range(passes - 1):
            _rows(data[i] for i in range(len(data)))  # a pass read to its end, as Keras does
            data.on_epoch_end()
        return _rows(data[i] for i in range(len(data)))

    _assert_same(one_pass(5), one_pass(5))
    assert not np.array_equal(one_pass(5)[0][0], one_pass(6)[0][0])
    second = one_pass(5, passes=2)
    assert len(second) == len(one_pass(5))  # a pair's bucket depends on its length only
    assert not np.array_equal(second[0][0], one_pass(5)[0][0])
    # Every batch keeps its bucket's token budget and padding.
    for source, target_in, target_out in second:
        assert source.shape == target_in.shape == target_out.shape
        assert source.shape[0] * source.shape[1] <= 120
        # Teacher forcing: target_in is BOS + y, target_out is y + EOS (EOS 3, PAD 0).
        np.testing.assert_array_equal(target_in[:, 1:],
                                      np.where(target_out[:, :-1] == 3, 0, target_out[:, :-1]))


def test_a_repeated_stream_spans_passes_and_skip_resumes_at_its_batch(corpus):
    sources, targets, tok = corpus
    options = OPTIONS[0]
    one = TranslationBatches(sources, targets, tok, tok, seed=1, **options)
    per_pass = len(one)
    stream = TranslationBatches(sources, targets, tok, tok, seed=1, repeat=True, **options)
    assert stream.num_batches is None
    first = _rows(stream[i] for i in range(3 * per_pass))
    # No partial batches: every batch is its bucket's full size.
    sizes = dict(zip(stream.boundaries, stream.batch_sizes, strict=True))
    assert all(b[0].shape[0] == sizes[b[0].shape[1] + 1] for b in first)
    resumed = TranslationBatches(sources, targets, tok, tok, seed=1, repeat=True,
                                 **options).skip(per_pass + 2)
    _assert_same(_rows(resumed[i] for i in range(per_pass)),
                 first[per_pass + 2: 2 * per_pass + 2])
    # A one-pass stream resumed at batch 4 reads the rest of that pass, then a new one.
    part = TranslationBatches(sources, targets, tok, tok, seed=1, **options).skip(4)
    _assert_same(_rows(part[i] for i in range(len(part))),
                 _rows(one[i] for i in range(len(one)))[4:])
    part.on_epoch_end()
    assert len(part) == per_pass


def _fit_reads(data, epochs, steps_per_epoch):
    """The labels of every batch model.fit reads from `data`, in order."""
    import keras

    seen = []

    def record(inputs, labels):
        seen.append(np.array(labels))
        return inputs, labels

    source, target = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    model = keras.Model([source, target], keras.layers.Dense(40)(
        keras.layers.Embedding(40, 4)(target)))
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(data.map(record), epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=0,
              shuffle=False)
    return seen


@pytest.mark.parametrize("repeat", [True, False], ids=["steps_per_epoch", "one_pass"])
def test_model_fit_reads_a_skipped_stream_from_the_skipped_batch_on(corpus, repeat):
    """Every backend's fit peeks at a batch and resets its iterator before the first epoch,
    which calls on_epoch_end: a resumed run must still start at the batch after its backup,
    and read on across epochs."""
    sources, targets, tok = corpus
    # One bucket and whole batches: TensorFlow's PyDataset reader wants one batch shape.
    options = dict(max_source_length=16, max_target_length=10, tokens_per_batch=96,
                   bucket_boundaries=[17], fixed_target_length=True, drop_remainder=True,
                   seed=1, repeat=repeat)
    skip = 5
    reference = TranslationBatches(sources, targets, tok, tok, **options)
    if repeat:
        epochs, steps = 2, 3
        readable = [reference[i][1] for i in range(skip + 30)][skip:]  # prefetch reads on
        expected = readable[:6]
    else:  # the rest of the first pass (train.engine fits a resumed epoch on its own)
        epochs, steps = 1, None
        expected = readable = [reference[i][1] for i in range(len(reference))][skip:]
    trained = len(expected)
    data = TranslationBatches(sources, targets, tok, tok, **options).skip(skip)
    seen = _fit_reads(data, epochs, steps)
    # fit reads the expected batches in order; what it reads besides (its peeks at the first
    # batches, TensorFlow's prefetch) is the same stream's too, never a batch of another order.
    assert all(any(np.array_equal(b, e) for e in readable) for b in seen)
    starts = [o for o in range(len(seen) - trained + 1)
              if all(np.array_equal(seen[o + k], expected[k]) for k in range(trained))]
    assert starts, "fit did not read the skipped stream's batches in order"
