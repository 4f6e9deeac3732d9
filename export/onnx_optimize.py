"""An offline pass over the float32 ONNX graphs at export time: fewer nodes per session.run.

onnxruntime fuses some patterns when it loads a graph (MatMul + Add into Gemm, Gemm + Relu
into FusedGemm), but not the ones tf2onnx writes most of the encoder's nodes with:

- a LayerNorm as 13 element-wise nodes (two GlobalAveragePools, Neg, Sub, Sqrt, Reciprocal,
  Muls and Adds), a form onnxruntime's own LayerNorm fusion does not match: one
  `LayerNormalization`;
- a Dense on a (B,S,D) tensor as Reshape to (B*S,D), MatMul, and a Reshape back to a shape
  computed at run time (Shape, Cast, Gather, Concat, Cast): MatMul broadcasts over the
  leading dimensions, so the MatMul alone;
- Casts to the type their input already has, and nodes nothing reads: removed.

Then onnxruntime's own ORT_ENABLE_EXTENDED optimizations run once and their result is saved
(`SessionOptions.optimized_model_filepath`), so the file holds what a session would otherwise
do at each load. That result may hold onnxruntime's contrib operators (FusedGemm), so it loads
in onnxruntime and not necessarily in other ONNX runtimes; `python -m export
--no-onnx-optimize` writes the plain graphs. Extended, not ALL: level ALL adds layout
transforms specific to the CPU that ran them.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import logging
import os
import tempfile

import numpy as np

from .onnx_nodes import GraphIndex

# onnxruntime fuses a residual Add and a LayerNormalization on (B,S,D) tensors into its
# SkipLayerNormalization, whose CPU kernel measured 2-6x slower than the pair (onnxruntime
# 1.31.1: 745 against 125 us on a (16, 32, 256) tensor, 29 against 15 us on (16, 256)). The
# encoder only has that pair once tf2onnx's LayerNorms are fused, so the pass and the
# runtimes' sessions (export.runtime) turn that fusion off.
DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]  # export.runtime.onnx says the same


def _ranks(model) -> dict[str, int]:
    """Rank of every tensor whose rank shape inference knows."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    ranks = {}
    for info in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        tensor = info.type.tensor_type
        if tensor.HasField("shape"):
            ranks[info.name] = len(tensor.shape.dim)
    return ranks


def _types(model) -> dict[str, int]:
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    types = {i.name: i.data_type for i in inferred.graph.initializer}
    for info in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        if info.type.tensor_type.elem_type:
            types[info.name] = info.type.tensor_type.elem_type
    return types


def _replace(graph, removed: list, added: list) -> None:
    """Drop `removed` nodes, put `added` where the first removed one was (topological order
    holds: every input of `added` was produced before the first removed node's output is read,
    because they are the pattern's own inputs)."""
    ids = {id(n) for n in removed}
    kept, placed = [], False
    for node in graph.node:
        if id(node) in ids:
            if not placed:
                kept.extend(added)
                placed = True
            continue
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)


def _add_initializer(graph, array: np.ndarray, name: str) -> str:
    from onnx import numpy_helper

    graph.initializer.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
    return name


def fuse_tf2onnx_layer_norms(model) -> int:
    """tf2onnx's 13-node LayerNorm over the last axis of a rank-3 tensor -> LayerNormalization.
    Returns the number fused."""
    from onnx import helper

    ranks = _ranks(model)
    fused = 0
    while True:
        g = GraphIndex(model.graph)
        match = None
        for mean_node in g.graph.node:
            if mean_node.op_type != "GlobalAveragePool" or ranks.get(mean_node.input[0],
                                                                      3) != 3:
                continue
            match = _match_layer_norm(g, mean_node)
            if match:
                break
        if not match:
            return fused
        x, gamma, beta, eps, out, nodes = match
        fused += 1
        d = gamma.size
        name = f"fused_layer_norm_{fused}_{out.replace(':', '_')}"
        gamma_name = _add_initializer(model.graph, gamma.reshape(d), name + "_gamma")
        beta_name = _add_initializer(model.graph, beta.reshape(d), name + "_beta")
        # axis 2: GlobalAveragePool's mean is over every axis from the third on.
        node = helper.make_node("LayerNormalization", [x, gamma_name, beta_name], [out],
                                name=name, axis=2, epsilon=float(eps))
        _replace(model.graph, nodes, [node])


def _match_layer_norm(g: GraphIndex, mean_node):
    """x -> mean = GAP(x); d = x - mean; var = GAP(d*d); inv = 1/sqrt(var + eps);
    scale = inv * gamma; out = x*scale + (beta + -mean*scale) (any operand order)."""
    x, mean = mean_node.input[0], mean_node.output[0]
    users = g.consumers.get(mean, [])
    sub = next((n for n in users if n.op_type == "Sub" and list(n.input) == [x, mean]), None)
    neg = next((n for n in users if n.op_type == "Neg"), None)
    if sub is None or neg is None or len(users) != 2:
        return None
    square = g.only_consumer(sub.output[0], "Mul")
    if square is None or list(square.input) != [sub.output[0]] * 2:
        return None
    var_node = g.only_consumer(square.output[0], "GlobalAveragePool")
    add_eps = var_node and g.only_consumer(var_node.output[0], "Add")
    eps = add_eps and g.const(g.other_input(add_eps, var_node.output[0]))
    if eps is None or np.size(eps) != 1:
        return None
    sqrt = g.only_consumer(add_eps.output[0], "Sqrt")
    recip = sqrt and g.only_consumer(sqrt.output[0], "Reciprocal")
    scale_node = recip and g.only_consumer(recip.output[0], "Mul")
    gamma = scale_node and g.const(g.other_input(scale_node, recip.output[0]))
    if gamma is None:
        return None
    scale = scale_node.output[0]
    scale_users = g.consumers.get(scale, [])
    if len(scale_users) != 2 or any(n.op_type != "Mul" for n in scale_users):
        return None
    x_scaled = next((n for n in scale_users if x in n.input), None)
    mean_scaled = next((n for n in scale_users if neg.output[0] in n.input), None)
    if x_scaled is None or mean_scaled is None or x_scaled is mean_scaled:
        return None
    shift = g.only_consumer(mean_scaled.output[0], "Add")
    beta = shift and g.const(g.other_input(shift, mean_scaled.output[0]))
    if beta is None:
        return None
    final = g.only_consumer(x_scaled.output[0], "Add")
    if final is None or g.other_input(final, x_scaled.output[0]) != shift.output[0]:
        return None
    d = gamma.size
    if beta.size != d or gamma.shape[-1] != d or beta.shape[-1] != d:
        return None
    nodes = [mean_node, sub, neg, square, var_node, add_eps, sqrt, recip, scale_node,
             x_scaled, mean_scaled, shift, final]
    if any(n.output[0] in g.outputs for n in nodes[:-1]):
        return None
    return x, gamma, beta, float(np.asarray(eps).reshape(())), final.output[0], nodes


def collapse_dense_reshapes(model) -> int:
    """Reshape(x, [-1, D]) -> MatMul(., W) -> Reshape(., x's leading dims + [N]) on a rank-3 x,
    with the second shape computed from Shape(x): MatMul(x, W). Returns the number collapsed."""
    ranks = _ranks(model)
    g = GraphIndex(model.graph)
    done = 0
    for flat in list(g.graph.node):
        if flat.op_type != "Reshape":
            continue
        x = flat.input[0]
        shape = g.const(flat.input[1])
        if ranks.get(x) != 3 or shape is None or list(shape)[:1] != [-1] or len(shape) != 2:
            continue
        pairs = []
        for matmul in g.consumers.get(flat.output[0], []):
            weight = g.const(matmul.input[1]) if matmul.op_type == "MatMul" else None
            back = g.only_consumer(matmul.output[0], "Reshape")
            if (weight is None or weight.ndim != 2 or weight.shape[0] != shape[1]
                    or matmul.input[0] != flat.output[0]
                    or back is None
                    or not _is_leading_dims_of(g, back.input[1], x, weight.shape[1])):
                pairs = []
                break
            pairs.append((matmul, back))
        if not pairs or flat.output[0] in g.outputs:
            continue
        for matmul, back in pairs:
            matmul.input[0] = x
            back.op_type, back.input[1:] = "Identity", []
            del back.attribute[:]
        flat.op_type, flat.input[1:] = "Identity", []
        del flat.attribute[:]
        done += 1
    if done:
        remove_identities(model)
    return done


def _is_leading_dims_of(g: GraphIndex, shape_name: str, x: str, last: int) -> bool:
    """Whether shape_name is [Shape(x)[0], Shape(x)[1], last] as tf2onnx builds it: optional
    Casts around Concat(Gather(Shape(x), [0, 1]), [last])."""
    node = g.producer.get(shape_name)
    while node is not None and node.op_type == "Cast":
        node = g.producer.get(node.input[0])
    if node is None or node.op_type != "Concat" or len(node.input) != 2:
        return False
    tail = g.const(node.input[1])
    if tail is None or list(np.ravel(tail)) != [last]:
        return False
    gather = g.producer.get(node.input[0])
    if gather is None or gather.op_type != "Gather":
        return False
    indices = g.const(gather.input[1])
    if indices is None or list(np.ravel(indices)) != [0, 1]:
        return False
    source = g.producer.get(gather.input[0])
    while source is not None and source.op_type == "Cast":
        source = g.producer.get(source.input[0])
    return (source is not None and source.op_type == "Shape" and source.input[0] == x
            and not source.attribute)


def remove_identities(model) -> int:
    """Identity nodes and Casts to their input's own type: readers read the input instead.
    One that writes a graph output hands its name to the node that made its input, when
    nothing else reads that."""
    types = _types(model)
    graph = model.graph
    outputs = {o.name for o in graph.output}
    readers = collections.Counter(name for node in graph.node for name in set(node.input))
    producer = {name: node for node in graph.node for name in node.output}

    def identity(node):
        return node.op_type == "Identity" or (
            node.op_type == "Cast" and node.input[0] in types
            and types[node.input[0]] == next(a.i for a in node.attribute if a.name == "to"))

    rename, removed = {}, 0
    for node in graph.node:
        source = node.input[0] if node.input else None
        if (identity(node) and node.output[0] in outputs and source in producer
                and readers[source] == 1 and source not in outputs):
            made = producer[source]
            made.output[list(made.output).index(source)] = node.output[0]
            node.op_type = "Dropped"
    kept = []
    for node in graph.node:
        node.input[:] = [rename.get(i, i) for i in node.input]
        if node.op_type == "Dropped":
            removed += 1
            continue
        if identity(node) and node.output[0] not in outputs:
            rename[node.output[0]] = node.input[0]
            removed += 1
            continue
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    return removed


def remove_dead_nodes(model) -> int:
    """Nodes whose outputs nothing reads, and initializers no node reads."""
    graph = model.graph
    needed = {o.name for o in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(node.input)
    removed = len(graph.node) - len(kept)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    initializers = [i for i in graph.initializer if i.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    return removed


def ort_extended(model):
    """onnxruntime's ORT_ENABLE_EXTENDED optimizations of `model`, as a ModelProto."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="kt-onnx-opt.") as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        options.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), options,
                             providers=["CPUExecutionProvider"],
                             disabled_optimizers=DISABLED_OPTIMIZERS)
        optimized = onnx.load(options.optimized_model_filepath)
    # onnxruntime lists every domain it knows; keep those the graph uses.
    used = {n.domain for n in optimized.graph.node} | {""}
    kept = [o for o in optimized.opset_import if o.domain in used or o.domain == "ai.onnx"]
    del optimized.opset_import[:]
    optimized.opset_import.extend(kept)
    return optimized


def rewrite(model):
    """The pass's own rewrites on a copy of `model` (an onnx.ModelProto), standard ONNX
    operators only, before any quantization. Returns (model, counts)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    counts = {"layer_norms": fuse_tf2onnx_layer_norms(out),
              "dense_reshapes": collapse_dense_reshapes(out),
              "identities": remove_identities(out)}
    counts["dead_nodes"] = remove_dead_nodes(out)
    onnx.checker.check_model(out)
    return out, counts


def optimize(model):
    """rewrite, then onnxruntime's extended optimizations: (model, counts)."""
    out, counts = rewrite(model)
    before = len(out.graph.node)
    out = ort_extended(out)
    counts["onnxruntime_fused"] = before - len(out.graph.node)
    return out, counts


def op_counts(model) -> dict[str, int]:
    """{op type: nodes} of a ModelProto's main graph, most frequent first."""
    counts = collections.Counter(n.op_type for n in model.graph.node)
    return dict(counts.most_common())


def _subgraphs(node):
    for attribute in node.attribute:
        if attribute.type == attribute.GRAPH:
            yield attribute.g
        elif attribute.type == attribute.GRAPHS:
            yield from attribute.graphs


def _reads(node) -> set[str]:
    """The names `node` reads, those its subgraphs read from outer scopes included."""
    names = set(node.input)
    for graph in _subgraphs(node):
        for inner in graph.node:
            names |= _reads(inner)
    return names


def sort_nodes(graph) -> None:
    """Order the nodes of `graph` (and of its subgraphs) so that each follows the nodes whose
    outputs it or its subgraphs read, as onnx.checker demands; otherwise keep their order.
    onnxruntime's quantizer, entering If and Loop bodies, can leave a main-graph node after
    the If that reads it (onnxruntime sorts on loading; the checker does not)."""
    for node in graph.node:
        for sub in _subgraphs(node):
            sort_nodes(sub)
    producer = {name: i for i, node in enumerate(graph.node) for name in node.output if name}
    needs = [{producer[n] for n in _reads(node) if n in producer and producer[n] != i}
             for i, node in enumerate(graph.node)]
    users = [[] for _ in needs]
    for i, deps in enumerate(needs):
        for d in deps:
            users[d].append(i)
    waiting = [len(deps) for deps in needs]
    ready = [i for i, count in enumerate(waiting) if count == 0]  # a heap: earliest first
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for user in users[i]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) < len(needs):
        raise ValueError(f"graph {graph.name!r} has a cycle; it cannot be ordered")
    nodes = [graph.node[i] for i in order]
    del graph.node[:]
    graph.node.extend(nodes)


def int8_file(name: str) -> str:
    """The file name of a graph's dynamic-int8 copy: encoder.onnx -> encoder.int8.onnx."""
    return name.replace(".onnx", ".int8.onnx")


class _PreprocessingHint(logging.Filter):
    """onnxruntime's quantizer warns on the root logger, once per graph, that the model
    should go through its pre-processing first, with a link. That pre-processing runs
    onnxruntime's optimizer, whose fusions `write_int8` keeps until after quantizing on
    purpose, so the line is advice a user of `python -m export` should not follow."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


@contextlib.contextmanager
def _without_preprocessing_hint():
    hint = _PreprocessingHint()
    logging.getLogger().addFilter(hint)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(hint)


def write_int8(graph, path, lean: bool = True) -> None:
    """The dynamic-int8 copy of `graph` (a ModelProto after `rewrite`, before onnxruntime's
    fusions) at `path`, through those fusions when `lean`, checked.

    The quantizer handles MatMul, not the Gemm and FusedGemm the fusions make, hence the
    order. Weight MatMuls only: a quantized Gather of the embedding or position table comes
    out mis-shaped, and the lookups cost nothing in float32. Those inside Loop and If bodies
    too (its EnableSubgraph option): search.onnx's decoding steps live in loop bodies."""
    from pathlib import Path

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = Path(path)
    with tempfile.TemporaryDirectory(prefix=".onnx-int8.", dir=path.parent) as tmp:
        source = Path(tmp) / path.name
        onnx.save(graph, str(source))
        with _without_preprocessing_hint():
            quantize_dynamic(str(source), str(path), weight_type=QuantType.QInt8,
                             op_types_to_quantize=["MatMul"],
                             extra_options={"EnableSubgraph": True})
    quantized = onnx.load(str(path))
    sort_nodes(quantized.graph)
    onnx.save(ort_extended(quantized) if lean else quantized, str(path))
    onnx.checker.check_model(onnx.load(str(path)))


def write_variants(graphs: dict, out, int8: bool, lean: bool = True,
                   rewritten: dict | None = None) -> dict:
    """Write the float32 ONNX graphs {role: (file name, ModelProto)} into directory `out`,
    optimized when `lean`, plus their dynamic-int8 copies (`write_int8`) when `int8`; returns
    the manifest's variants {"float32": {role: file}, "int8": {role: file}}. `rewritten`, a
    dict, receives each role's graph after `rewrite` (as given when not `lean`), before
    onnxruntime's fusions, for a caller that builds on it (search.onnx inlines the
    encoder's)."""
    from pathlib import Path

    import onnx

    out = Path(out)
    files = {role: name for role, (name, _) in graphs.items()}
    variants = {"float32": files}
    if int8:
        variants["int8"] = {role: int8_file(name) for role, name in files.items()}
    for role, (name, graph) in graphs.items():
        plain = rewrite(graph)[0] if lean else graph
        if rewritten is not None:
            rewritten[role] = plain
        onnx.save(ort_extended(plain) if lean else plain, str(out / name))
        if int8:
            write_int8(plain, out / variants["int8"][role], lean)
    return variants
