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

from collections.abc import Sequence

import keras
import numpy as np

from keras_transformer.text.buckets import (
    encode_in_chunks,
    pair_buckets,
    special_ids_of,
)


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

    def _pad(self, rows: list[np.ndarray], length: int) -> np.ndarray:
        out = np.full((len(rows), length), self.pad_id, np.int32)
        for r, row in enumerate(rows):
            out[r, : len(row)] = row
        return out

    def batch(self, indices: list[int]):
        """The padded batch of the pairs `indices` (all of one bucket)."""
        length = self.boundaries[int(self.buckets[indices[0]])] - 1
        target_length = self.max_target_length if self.fixed_target_length else length
        pairs = [self.pairs[i] for i in indices]
        inputs = (self._pad([p[0] for p in pairs], length),
                  self._pad([p[1] for p in pairs], target_length))
        labels = self._pad([p[2] for p in pairs], target_length)
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
            # Keras reads an endless PyDataset at indices 0, 1, 2, ... across epochs.
            if self._reader is None or index != self._read:
                self._reader, self._read = self.iterate(), 0
                for _ in range(index):
                    next(self._reader)
                self._read = index
            self._read += 1
            return next(self._reader)
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
