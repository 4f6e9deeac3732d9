"""The training losses a task compiles with: the label-smoothed token loss, and under several
tf.distribute replicas its form that divides by the global batch's count (`replica_mean`,
which the extractive task's sentence loss shares).

`ReplicaTokenMeanLoss` is registered with Keras as "train>ReplicaTokenMeanLoss": models saved
by a multi-replica run name it so, and load only while that name stays.
"""

from __future__ import annotations

import keras

from keras_transformer.lazy_import import LazyModule
from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy, label_smoothed_nll

tf = LazyModule("tensorflow")  # tf.distribute: the replicated loss is TensorFlow's only


@keras.saving.register_keras_serializable(package="train")
class ReplicaTokenMeanLoss(MaskedLabelSmoothedCrossEntropy):
    """The label-smoothed loss of each replica's tokens divided by the tokens of the global batch.

    Keras sums the replicas' gradients, and divides a loss by the replica count only when it
    reduces a per-example loss itself; this loss is already a scalar. Summing sum_r / tokens
    over replicas gives exactly the single-device mean over the global batch, however the
    tokens fall between the replicas.
    """

    def call(self, y_true, y_pred):
        loss, mask = label_smoothed_nll(y_true, y_pred, self.label_smoothing, self.pad_id)
        return replica_mean(tf.reduce_sum(loss), tf.reduce_sum(mask))


def replica_mean(total, count):
    """A replica's summed loss over the count (tokens, sentences) of the global batch: the
    replicas' sum of these is the single-device mean."""
    import tensorflow as tf  # tf.distribute's replicas: TensorFlow only

    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
    return total / tf.maximum(count, 1.0)


def token_loss(label_smoothing: float, pad_id: int, replicas: int):
    """The label-smoothed token loss, padding masked, for a strategy of `replicas` replicas.
    The plain loss on one device keeps saved models free of a train/ class. Under JAX the
    replicas run one program over the global batch (`distribute.JaxDataParallel`), whose
    plain mean is already the global one."""
    replicated = replicas > 1 and keras.backend.backend() == "tensorflow"
    kind = ReplicaTokenMeanLoss if replicated else MaskedLabelSmoothedCrossEntropy
    return kind(label_smoothing, pad_id)
