"""The training stream's batches: a repeated stream that replays from its first batch on
every new iterator (`replayable`, for the tasks' datasets), and the tap that records the batch
shapes and target tokens the train step gets (`BatchTap`, for the engine)."""

from __future__ import annotations

import keras
import numpy as np

from keras_transformer.lazy_import import LazyModule

tf = LazyModule("tensorflow")  # tf.data: imported by the tf.data paths only


def replayable(build, repeat: bool) -> tf.data.Dataset:
    """A repeated stream that every new iterator replays from its first batch.

    A seeded shuffle with reshuffle_each_iteration continues its sequence of orders on each
    new iterator of one dataset object, and Keras makes more than one on a single device
    (not on several), so the batches would depend on the strategy and on how often the
    dataset was iterated before. Built inside flat_map, each iterator starts afresh. A
    one-pass-per-epoch dataset is left alone: there, a new iterator is a new epoch and
    should get a new order.
    """
    if not repeat:
        return build()
    return tf.data.Dataset.range(1).flat_map(lambda _: build())


class BatchTap:
    """Records the distinct batch shapes the train step gets (those of every input and the
    labels: one XLA compile each) and counts the target tokens it trains on, for
    tokens/second. Labels are target tokens where they have an input's rank (a translator's
    or language model's next tokens); a classifier's or extractor's are not, and leave
    `target_tokens` None."""

    def __init__(self):
        self.shapes: set[tuple[int, ...]] = set()
        self.target_tokens = None

    def _add(self, shape, tokens, ranks):
        # np.asarray, not .numpy(): once, under load, the py_function's argument arrived as a
        # tuple (AutoGraph had converted the lambda), which has no .numpy().
        dims, shapes = [int(v) for v in np.asarray(shape).reshape(-1)], []
        for rank in ranks:
            shapes.append(tuple(dims[:rank]))
            dims = dims[rank:]
        self.shapes.add(tuple(shapes))
        if tokens is not None:
            self.target_tokens = (self.target_tokens or 0) + int(np.asarray(tokens).sum())
        return 0

    @staticmethod
    def _token_labels(inputs, labels) -> bool:
        return any(len(x.shape) == len(labels.shape) for x in keras.tree.flatten(inputs))

    def __call__(self, inputs, labels):
        # Several outputs' labels (a masked LM with next-sentence prediction): the first
        # output's are the ones that may be tokens.
        label_list = keras.tree.flatten(labels)
        tokens_like = label_list[0]
        tensors = [*keras.tree.flatten(inputs), *label_list]  # the shapes: inputs', labels'
        counted = self._token_labels(inputs, tokens_like)
        if isinstance(tokens_like, np.ndarray):  # a NumPy batch (text.numpy_pipeline)
            self.shapes.add(tuple(tuple(x.shape) for x in tensors))
            if counted:
                self.target_tokens = ((self.target_tokens or 0)
                                      + int(np.count_nonzero(tokens_like)))
            return inputs, labels
        ranks = [len(x.shape) for x in tensors]
        shape = tf.concat([tf.shape(x) for x in tensors], 0)
        if counted:
            tokens = tf.math.count_nonzero(tokens_like, dtype=tf.int64)
            func, args = (lambda shape, tokens: self._add(shape, tokens, ranks)), [shape, tokens]
        else:
            func, args = (lambda shape: self._add(shape, None, ranks)), [shape]
        # Plain Python, never converted by the AutoGraph of the dataset's map.
        done = tf.py_function(tf.autograph.experimental.do_not_convert(func), args, tf.int32)
        with tf.control_dependencies([done]):
            labels = tf.nest.map_structure(tf.identity, labels)
        return inputs, labels
