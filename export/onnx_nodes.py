"""ONNX graphs as Python objects, for the graphs the export writes by hand and rewrites.

`GraphBuilder` makes one node by node (export/onnx_graph.py's step, export/onnx_search.py's
search); `GraphIndex` reads one, its producers and consumers (export/onnx_optimize.py's
rewrites). onnx is imported inside the functions, so importing this module costs nothing.
"""

from __future__ import annotations

import collections

import numpy as np

# tf2onnx 1.17 converts opsets 13-18; every ONNX file of an export uses one.
ONNX_OPSET = 17


class GraphBuilder:
    """Nodes, constants and fresh names for onnx.helper.make_graph.

    `subgraph()` gives a graph of its own nodes (a Loop's or an If's body) that shares the
    constants and the name counter, so that its nodes read the weights from the outer graph
    (ONNX lets a subgraph read outer-scope names) and no name is made twice. With
    `share_constants`, a constant asked for again under the same hint is the one made first
    (checked equal): several loop bodies then read one copy of every weight.
    """

    def __init__(self, share_constants: bool = False):
        self.nodes, self.initializers, self._count = [], [], [0]
        self._shared = {} if share_constants else None

    def subgraph(self) -> GraphBuilder:
        child = GraphBuilder.__new__(GraphBuilder)
        child.nodes, child.initializers = [], self.initializers
        child._count, child._shared = self._count, self._shared
        return child

    def name(self, hint: str) -> str:
        self._count[0] += 1
        return f"{hint}_{self._count[0]}"

    def const(self, value, hint: str = "const", dtype=None) -> str:
        from onnx import numpy_helper

        array = np.asarray(value, dtype=dtype)
        if self._shared is not None and hint in self._shared:
            name, known = self._shared[hint]
            if known.dtype != array.dtype or not np.array_equal(known, array):
                raise ValueError(f"two constants named {hint!r} differ")
            return name
        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(array, name))
        if self._shared is not None:
            self._shared[hint] = (name, array)
        return name

    def op(self, op_type: str, inputs, hint: str | None = None, outputs: int = 1,
           **attrs):
        from onnx import helper

        names = [self.name(hint or op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=names[0],
                                           **attrs))
        return names[0] if outputs == 1 else names

    def output(self, op_type: str, inputs, name: str, **attrs) -> None:
        """A node that writes the graph output `name`."""
        from onnx import helper

        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))


def model_proto(g: GraphBuilder, name: str, inputs, outputs):
    import onnx
    from onnx import helper

    graph = helper.make_graph(g.nodes, name, inputs, outputs, g.initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
                              producer_name="keras-transformer")
    proto.ir_version = 8
    onnx.checker.check_model(proto, full_check=True)
    return proto


class GraphIndex:
    """Producer and consumer maps over a GraphProto, rebuilt after each rewrite."""

    def __init__(self, graph):
        from onnx import numpy_helper

        self.graph = graph
        self.consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        self.producer, self.consumers = {}, collections.defaultdict(list)
        for node in graph.node:
            for name in node.output:
                self.producer[name] = node
            for name in dict.fromkeys(node.input):  # Mul(d, d) reads d once
                self.consumers[name].append(node)
        self.outputs = {o.name for o in graph.output}

    def only_consumer(self, name, op_type):
        users = self.consumers.get(name, [])
        if len(users) == 1 and users[0].op_type == op_type and name not in self.outputs:
            return users[0]
        return None

    def other_input(self, node, name):
        if len(node.input) != 2 or name not in node.input:
            return None
        a, b = node.input
        return b if a == name else a

    def const(self, name):
        if name in self.consts:
            return self.consts[name]
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            from onnx import numpy_helper

            return numpy_helper.to_array(node.attribute[0].t)
        return None
