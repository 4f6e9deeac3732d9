"""What each process of a JAX multi-process run gives model.fit (train.distribute.ProcessBatches),
checked against the global batch without starting processes: a stand-in strategy gathers the
other process's shapes from a second ProcessBatches over its own data."""

import numpy as np

from train.distribute import ProcessBatches, rows_added

PAD = 0


class Batches:
    def __init__(self, batches):
        self.batches, self.pad_id, self.num_batches = batches, PAD, len(batches)

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[index]

    def on_epoch_end(self):
        pass


class TwoProcesses:
    """Process `process` of two, one device each; `gather` stacks both processes' values, the
    other's from `peer` (what process_allgather returns)."""

    processes, num_replicas_in_sync, local_replicas = 2, 2, 1

    def __init__(self, process, peer=None):
        self.process, self.peer = process, peer

    def gather(self, values):
        own = np.asarray(values, np.int32)
        other = np.asarray(self.peer(), np.int32)
        return np.stack([own, other] if self.process == 0 else [other, own])


def batch(rows, source, target, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, 50, (rows, source)).astype(np.int32)
    dec = rng.integers(3, 50, (rows, target)).astype(np.int32)
    labels = rng.integers(3, 50, (rows, target)).astype(np.int32)
    labels[:, -1] = PAD
    return (ids, dec), labels


def test_the_processes_rows_of_a_global_batch_are_that_batch_padded():
    global_batch = batch(5, 7, 6, seed=1)
    data = Batches([global_batch])
    parts = [ProcessBatches(data, TwoProcesses(i), whole=True)[0] for i in range(2)]
    (ids, dec), labels = rows_added(global_batch, 1, PAD)  # 5 rows -> 6, a multiple of 2
    assert [p[1].shape[0] for p in parts] == [3, 3]
    np.testing.assert_array_equal(np.concatenate([p[0][0] for p in parts]), ids)
    np.testing.assert_array_equal(np.concatenate([p[0][1] for p in parts]), dec)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), labels)
    # The added row repeats the first inputs and has only padding labels: no loss.
    np.testing.assert_array_equal(labels[5], np.zeros(6, np.int32))
    np.testing.assert_array_equal(ids[5], global_batch[0][0][0])


def test_each_process_own_batches_are_made_alike_in_shape():
    mine, theirs = batch(3, 5, 9, seed=2), batch(4, 8, 6, seed=3)

    def shapes(b):
        return [d for x in (*b[0], b[1]) for d in x.shape]

    (ids, dec), labels = ProcessBatches(
        Batches([mine]), TwoProcesses(0, lambda: shapes(theirs)), whole=False)[0]
    # Every array to the largest of both processes: 4 rows, source 8, target 9.
    assert (ids.shape, dec.shape, labels.shape) == ((4, 8), (4, 9), (4, 9))
    np.testing.assert_array_equal(ids[:3, :5], mine[0][0])
    np.testing.assert_array_equal(ids[:3, 5:], PAD)
    np.testing.assert_array_equal(labels[:3, :9], mine[1])
    np.testing.assert_array_equal(ids[3], ids[0])  # an added row repeats the first inputs
    np.testing.assert_array_equal(labels[3], PAD)  # with no label to learn
    # The token loss sees the same labels: nothing but padding was added.
    assert np.count_nonzero(labels) == np.count_nonzero(mine[1])
