"""Converting a tf.function to ONNX with tf2onnx: what the conversion needs around it, and the
conversion, check and save that every tf2onnx graph of an export goes through."""

from __future__ import annotations

import contextlib
from pathlib import Path


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


def convert_function(function):
    """tf2onnx's conversion of a tf.function with an input signature (opset ONNX_OPSET, the
    Reshape merge guarded), checked in full: an onnx ModelProto."""
    import onnx
    import tf2onnx

    from .onnx_nodes import ONNX_OPSET

    with safe_reshape_merging():
        graph, _ = tf2onnx.convert.from_function(
            function, input_signature=function.input_signature, opset=ONNX_OPSET)
    onnx.checker.check_model(graph, full_check=True)
    return graph


def export_attention(function, out, interface: str, lean: bool = True) -> dict:
    """attention.onnx in `out`: the conversion of `function`, a model's attention weights
    (export.module.attention_function for a translator, export.kinds.classifier.module's for a
    classifier), through export.onnx_optimize's pass when `lean`, and its manifest entry
    {"file", "opset", "interface"}. Float32 only: it is read by a person, once per
    sentence."""
    import onnx

    from .common import ATTENTION_FILE
    from .onnx_nodes import ONNX_OPSET

    graph = convert_function(function)
    if lean:
        from .onnx_optimize import optimize

        graph = optimize(graph)[0]
    onnx.save(graph, str(Path(out) / ATTENTION_FILE))
    return {"file": ATTENTION_FILE, "opset": ONNX_OPSET, "interface": interface}
