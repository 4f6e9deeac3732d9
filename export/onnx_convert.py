"""What converting a tf.function to ONNX with tf2onnx needs around it."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def safe_reshape_merging():
    """tf2onnx 1.17 folds Reshape(Reshape(x, s1), s2) into Reshape(x, s2) even when s2 is a
    constant holding 0, which in ONNX means "copy this dimension of the input": the merged node
    then copies the dimensions of x, not of Reshape(x, s1). The head split after a Dense whose
    bias is all zeros (an untrained model) is exactly that pair. Merge only without zeros."""
    from tf2onnx.optimizer import back_to_back_optimizer as b2b

    key = ("Reshape",)
    merge = b2b._func_map[key]

    def guarded(g, node, consumer_nodes):
        if len(consumer_nodes) == 1 and consumer_nodes[0].type == "Reshape":
            shape = consumer_nodes[0].inputs[1]
            if shape.is_const() and 0 in shape.get_tensor_value(as_list=True):
                return []
        return merge(g, node, consumer_nodes)

    b2b._func_map[key] = guarded
    try:
        yield
    finally:
        b2b._func_map[key] = merge
