"""The translation input pipeline without TensorFlow: the batches of
`pipeline.make_translation_dataset` made in NumPy from the Python SentencePiece tokenizer, as a
`keras.utils.PyDataset` that model.fit reads under any Keras backend.

The same rules (`buckets`): pairs too long dropped or cut, source + EOS, BOS + target, target
+ EOS, each pair in the bucket of its length, a bucket's batch emitted as soon as it holds its
token budget's worth of pairs and padded to the bucket's length, the partial batches of a pass
flushed in bucket order at its end. Without shuffling the batches are tf.data's, batch for
batch. The shuffle is a seeded NumPy permutation per pass (tf.data's own shuffle cannot be
reproduced outside TensorFlow): the same seed gives the same batches, every pass holds every
pair once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import keras
import numpy as np

from keras_transformer.text.buckets import (
    budget_buckets,
    encode_in_chunks,
    pair_buckets,
    special_ids_of,
)
from keras_transformer.text.shards import interleaved_pairs

# Pairs tokenized per call in a stream, as the tf.data stream batches them for its tokenizer.
_TOKENIZE_CHUNK = 256


def _read_at(batches, index: int):
    """Batch `index` of an endless stream (`batches.iterate()`), read in order: Keras reads
    an endless PyDataset at indices 0, 1, 2, ... across epochs; any other index starts a new
    reader and reads up to it."""
    if batches._reader is None or index != batches._read:
        batches._reader, batches._read = batches.iterate(), 0
        for _ in range(index):
            next(batches._reader)
        batches._read = index
    batches._read += 1
    try:
        return next(batches._reader)
    except StopIteration:
        batches._reader = None
        raise IndexError(index) from None


def _pad(rows: list[np.ndarray], length: int, pad_id: int) -> np.ndarray:
    out = np.full((len(rows), length), pad_id, np.int32)
    for r, row in enumerate(rows):
        out[r, : len(row)] = row
    return out


class TranslationBatches(keras.utils.PyDataset):
    """Batches ``((source, target_in), target_out)`` of int32 arrays, as
    `pipeline.make_translation_dataset` makes them (same arguments, same meaning).

    One pass over the pairs is `len(self)` batches (a pair's bucket depends on its length
    alone, so every pass has as many); with ``repeat`` the stream runs on across passes, a
    bucket's batch spanning two, and is read by `iterate`. `skip(n)` drops the first ``n``
    batches (a resumed run's), `map(f)` applies ``f(inputs, labels)`` to every batch.
    """

    def __init__(self, sources, targets, source_tokenizer, target_tokenizer, *,
                 max_source_length: int, max_target_length: int, tokens_per_batch: int,
                 bucket_boundaries: Sequence[int] | None = None, shuffle: bool = True,
                 seed: int = 0, repeat: bool = False, drop_long: bool = True,
                 drop_remainder: bool = False, fixed_target_length: bool = False,
                 pad_id: int | None = None, bos_id: int | None = None,
                 eos_id: int | None = None):
        super().__init__()
        self.boundaries, sizes = pair_buckets(
            sources, targets, max_source_length=max_source_length,
            max_target_length=max_target_length, tokens_per_batch=tokens_per_batch,
            bucket_boundaries=bucket_boundaries, fixed_target_length=fixed_target_length,
            what="TranslationBatches")
        self.batch_sizes = sizes[:-1]
        self.pad_id, self.bos_id, self.eos_id = special_ids_of(
            (source_tokenizer, target_tokenizer), pad_id, bos_id, eos_id)
        self.max_target_length = max_target_length
        self.fixed_target_length = fixed_target_length
        self.shuffle, self.seed, self.repeat = shuffle, seed, repeat
        self.drop_remainder = drop_remainder
        self.pairs = []
        for s, t in zip(encode_in_chunks(source_tokenizer, sources),
                        encode_in_chunks(target_tokenizer, targets),
                        strict=True):
            if len(s) + 1 > max_source_length or len(t) + 1 > max_target_length:
                if drop_long:
                    continue
                s, t = s[: max_source_length - 1], t[: max_target_length - 1]
            self.pairs.append((np.asarray([*s, self.eos_id], np.int32),
                               np.asarray([self.bos_id, *t], np.int32),
                               np.asarray([*t, self.eos_id], np.int32)))
        lengths = [len(s) if fixed_target_length else max(len(s), len(out))
                   for s, _, out in self.pairs]
        # Bucket i holds lengths in [boundaries[i-1], boundaries[i]).
        self.buckets = np.searchsorted(self.boundaries, lengths, side="right")
        self._pass = 0
        self._skip = 0
        self._map = None
        self._batches_of_pass = None
        self._reader, self._read = None, 0  # the repeating stream's reader, batches it gave
        self._pass_read = False  # whether the last batch of this pass was read

    # -- the order -------------------------------------------------------------------------

    def order(self, pass_index: int) -> np.ndarray:
        """The pairs of pass `pass_index` in the order they are read."""
        if not self.shuffle:
            return np.arange(len(self.pairs))
        return np.random.default_rng([self.seed, pass_index]).permutation(len(self.pairs))

    def _stream(self):
        """The batches' pair indices, one list per batch, across passes when repeating."""
        pass_index = self._pass
        windows: dict[int, list[int]] = {}
        while True:
            for i in self.order(pass_index):
                bucket = int(self.buckets[i])
                window = windows.setdefault(bucket, [])
                window.append(int(i))
                if len(window) == self.batch_sizes[bucket]:
                    yield windows.pop(bucket)
            if self.repeat:
                pass_index += 1
                continue
            for bucket in sorted(windows):  # tf.data's group_by_window flushes in key order
                if not self.drop_remainder:
                    yield windows[bucket]
            return

    def batch(self, indices: list[int]):
        """The padded batch of the pairs `indices` (all of one bucket)."""
        length = self.boundaries[int(self.buckets[indices[0]])] - 1
        target_length = self.max_target_length if self.fixed_target_length else length
        pairs = [self.pairs[i] for i in indices]
        inputs = (_pad([p[0] for p in pairs], length, self.pad_id),
                  _pad([p[1] for p in pairs], target_length, self.pad_id))
        labels = _pad([p[2] for p in pairs], target_length, self.pad_id)
        return (inputs, labels) if self._map is None else self._map(inputs, labels)

    def iterate(self):
        """Every batch in order, `skip` first dropped (forever when repeating)."""
        for n, indices in enumerate(self._stream()):
            if n >= self._skip:
                yield self.batch(indices)

    def __iter__(self):
        return self.iterate()

    # -- what model.fit reads ---------------------------------------------------------------

    def skip(self, count: int) -> TranslationBatches:
        self._skip += int(count)
        self._reader, self._batches_of_pass = None, None
        return self

    def map(self, function) -> TranslationBatches:
        self._map = function
        return self

    @property
    def num_batches(self):
        """Batches per pass (None when repeating: model.fit's steps_per_epoch counts them)."""
        return None if self.repeat else len(self._one_pass())

    def _one_pass(self) -> list[list[int]]:
        if self._batches_of_pass is None:
            batches = list(self._stream())
            self._batches_of_pass = batches[self._skip:] if self._pass == 0 else batches
        return self._batches_of_pass

    def __len__(self):
        if self.repeat:
            raise TypeError("a repeating stream has no length; read it with iterate()")
        return len(self._one_pass())

    def __getitem__(self, index):
        if self.repeat:
            return _read_at(self, index)
        batches = self._one_pass()
        if index >= len(batches):
            raise IndexError(index)
        self._pass_read = index == len(batches) - 1
        return self.batch(batches[index])

    def on_epoch_end(self):
        """A new pass once this one was read to its end: a new order when shuffling (a skip
        applies to the first pass only).

        Keras also calls this when it starts reading over (every backend's `fit` peeks at a
        batch, then resets its iterator before the first epoch), and, with steps_per_epoch, at
        each epoch's end while it goes on reading the stream at the next index. Neither is a
        new pass: advancing then would drop a resumed run's skip and read another order.
        """
        if self.repeat or not self._pass_read:
            return
        self._pass += 1
        self._skip = 0
        self._batches_of_pass = None
        self._pass_read = False


def buffer_shuffled(items, size: int, rng: np.random.Generator):
    """`items` through a shuffle buffer of `size`, as tf.data's `shuffle` draws: the buffer
    filled first, then each draw a uniform pick whose place the next item takes; the rest
    drawn the same way at the end. Memory: the buffer."""
    buffer = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        pick = int(rng.integers(len(buffer)))
        yield buffer[pick]
        buffer[pick] = item
    while buffer:
        pick = int(rng.integers(len(buffer)))
        buffer[pick], buffer[-1] = buffer[-1], buffer[pick]
        yield buffer.pop()


class StreamBatches(keras.utils.PyDataset):
    """`pipeline.make_tsv_stream_dataset`'s batches without TensorFlow (same arguments, same
    meaning): the shards' lines in tf.data's interleave order (`shards.interleaved_pairs`, a
    worker's part of them with `workers` > 1), pairs shuffled in a buffer of `shuffle_buffer`,
    tokenized a chunk at a time by the Python SentencePiece, then bucketed under the token
    budget as `TranslationBatches` buckets. Memory: the buffer and the open buckets.

    Without shuffling the batches are tf.data's, batch for batch. Shuffled, the shard order is
    a seeded NumPy permutation per pass and the buffer draws from a seeded NumPy generator:
    tf.data's random streams cannot be reproduced outside TensorFlow, so the two paths read
    the same pairs per pass in other orders. With ``repeat`` (training) the stream is endless
    and read by `iterate`; `skip(n)` drops its first ``n`` batches (a resumed run's: the
    seeded stream replays exactly), `map(f)` applies ``f(inputs, labels)`` to every batch.

    ``pairs`` (a factory of (source, target) string iterators, in their order: another
    task's streamed records, train.record_stream, which shuffles them) replaces the shards'
    lines; ``fixed_target_length`` buckets by the source alone, as make_translation_dataset.
    """

    def __init__(self, files, source_tokenizer, target_tokenizer, *, max_source_length: int,
                 max_target_length: int, tokens_per_batch: int, shuffle_buffer: int,
                 bucket_boundaries: Sequence[int] | None = None, shuffle: bool = True,
                 seed: int = 0, repeat: bool = True, cycle_length: int = 4,
                 drop_long: bool = True, drop_remainder: bool = False,
                 pad_id: int | None = None, bos_id: int | None = None,
                 eos_id: int | None = None, workers: int = 1, worker: int = 0,
                 pairs: Callable[[], Iterator[tuple[str, str]]] | None = None,
                 fixed_target_length: bool = False):
        super().__init__()
        if not files and pairs is None:
            raise ValueError("StreamBatches needs at least one shard")
        if shuffle_buffer < 1:
            raise ValueError(f"shuffle_buffer must be >= 1, got {shuffle_buffer}")
        self.boundaries, sizes = budget_buckets(
            max_source_length=max_source_length, max_target_length=max_target_length,
            tokens_per_batch=tokens_per_batch, bucket_boundaries=bucket_boundaries,
            fixed_target_length=fixed_target_length)
        self.batch_sizes = sizes[:-1]
        self.pad_id, self.bos_id, self.eos_id = special_ids_of(
            (source_tokenizer, target_tokenizer), pad_id, bos_id, eos_id)
        self.tokenizers = source_tokenizer, target_tokenizer
        self.pairs, self.fixed_target_length = pairs, fixed_target_length
        self.files, self.shuffle_buffer, self.cycle_length = list(files), shuffle_buffer, \
            cycle_length
        self.max_source_length, self.max_target_length = max_source_length, max_target_length
        self.shuffle, self.seed, self.repeat = shuffle, seed, repeat
        self.drop_long, self.drop_remainder = drop_long, drop_remainder
        self.workers, self.worker = workers, worker
        self._skip, self._map = 0, None
        self._reader, self._read = None, 0

    def _rows(self):
        """(source + EOS, BOS + target, target + EOS) of each pair, in reading order."""
        if self.pairs is not None:  # pairs from a reader of its own, shuffled by it
            pairs = self.pairs()
        else:
            pairs = (p for p in interleaved_pairs(
                self.files, shuffle=self.shuffle, seed=self.seed, repeat=self.repeat,
                cycle_length=self.cycle_length, workers=self.workers, index=self.worker)
                if p is not None)
        if self.shuffle and self.pairs is None:
            pairs = buffer_shuffled(pairs, self.shuffle_buffer,
                                    np.random.default_rng([self.seed, 1]))
        source_tok, target_tok = self.tokenizers
        while True:
            chunk = [pair for _, pair in zip(range(_TOKENIZE_CHUNK), pairs, strict=False)]
            if not chunk:
                return
            for s, t in zip(source_tok.encode([p[0] for p in chunk]),
                            target_tok.encode([p[1] for p in chunk]), strict=True):
                if len(s) + 1 > self.max_source_length or len(t) + 1 > self.max_target_length:
                    if self.drop_long:
                        continue
                    s, t = s[: self.max_source_length - 1], t[: self.max_target_length - 1]
                yield (np.asarray([*s, self.eos_id], np.int32),
                       np.asarray([self.bos_id, *t], np.int32),
                       np.asarray([*t, self.eos_id], np.int32))

    def _batch(self, rows, bucket: int):
        length = self.boundaries[bucket] - 1
        target_length = self.max_target_length if self.fixed_target_length else length
        inputs = (_pad([r[0] for r in rows], length, self.pad_id),
                  _pad([r[1] for r in rows], target_length, self.pad_id))
        labels = _pad([r[2] for r in rows], target_length, self.pad_id)
        return (inputs, labels) if self._map is None else self._map(inputs, labels)

    def iterate(self):
        """Every batch in order, the skipped ones dropped."""
        windows: dict[int, list] = {}
        made = 0
        for row in self._rows():
            # Bucket i holds lengths in [boundaries[i-1], boundaries[i]), as tf.data's.
            length = len(row[0]) if self.fixed_target_length else max(len(row[0]), len(row[2]))
            bucket = int(np.searchsorted(self.boundaries, length, side="right"))
            window = windows.setdefault(bucket, [])
            window.append(row)
            if len(window) == self.batch_sizes[bucket]:
                made += 1
                if made > self._skip:
                    yield self._batch(windows.pop(bucket), bucket)
                else:
                    del windows[bucket]
        if self.drop_remainder:
            return
        for bucket in sorted(windows):  # the end of a one-pass stream: in key order
            made += 1
            if made > self._skip:
                yield self._batch(windows[bucket], bucket)

    def __iter__(self):
        return self.iterate()

    def skip(self, count: int) -> StreamBatches:
        self._skip += int(count)
        self._reader = None
        return self

    def map(self, function) -> StreamBatches:
        self._map = function
        return self

    @property
    def num_batches(self):
        """None: a stream's length is known only once read (model.fit's steps_per_epoch
        counts its batches)."""
        return None

    def __getitem__(self, index):
        return _read_at(self, index)

    def on_epoch_end(self):
        """Nothing: the stream reads on across epochs (Keras calls this at every epoch's end,
        and before the first)."""
