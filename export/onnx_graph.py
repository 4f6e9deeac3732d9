"""decoder_step.onnx written node by node from the model's weights, for onnxruntime speed.

A step processes one token per row, so its cost is the number of nodes and copies more than
its FLOPs. tf2onnx's conversion of the TF step had 485 nodes for the small model
(dynamic-shape Reshape chains, float32->float32 Casts, LayerNorm as a dozen element-wise
ops, a copy and a transpose of every layer's cache). This graph has 151: one fused QKV
projection, MatMul + Add pairs that onnxruntime fuses into Gemm, ONNX LayerNormalization,
constant reshape shapes, the 1/sqrt(d_k) scale folded into the query weights, the masks
built once per step, and a cache read in place as one head-major input per layer and kind.
The math is that of `Transformer.decode_step_key_values`; export.parity and the tests hold
the two to each other. The encoder stays a tf2onnx conversion: it runs once per batch on
whole sentences, where a graph written the same way measured no faster.
"""

from __future__ import annotations

import math

import numpy as np

from keras_transformer.cache.layout import COPY_SOURCE, cache_names, memory_names
from keras_transformer.layers.attention import MASKED_LOGIT
from keras_transformer.models.language_model import TransformerLM
from keras_transformer.models.transformer import Transformer

from .onnx_nodes import GraphBuilder, model_proto


def _weights(layer, *attrs) -> list[np.ndarray]:
    return [np.asarray(getattr(layer, a).numpy(), np.float32) for a in attrs]


def _matmul_add(g: GraphBuilder, x: str, kernel: np.ndarray, bias: np.ndarray, hint: str) -> str:
    """(B, in) -> (B, out). MatMul + Add rather than Gemm: onnxruntime fuses the pair into one
    Gemm when it loads the graph, and its dynamic int8 quantizer only quantizes MatMul."""
    product = g.op("MatMul", [x, g.const(kernel, hint + "_kernel")], hint + "_matmul")
    return g.op("Add", [product, g.const(bias, hint + "_bias")], hint)


def _dense(g: GraphBuilder, x: str, layer, hint: str, scale: float = 1.0) -> str:
    kernel, bias = _weights(layer, "kernel", "bias")
    return _matmul_add(g, x, kernel * scale, bias * scale, hint)


def _layer_norm(g: GraphBuilder, x: str, norm, hint: str) -> str:
    gamma, beta = _weights(norm, "gamma", "beta")
    return g.op("LayerNormalization", [x, g.const(gamma, hint + "_gamma"),
                                       g.const(beta, hint + "_beta")], hint,
                axis=-1, epsilon=float(norm.epsilon))


def _add_norm(g: GraphBuilder, x: str, sublayer_out: str, add_norm, hint: str) -> str:
    """Residual, then LayerNorm for post-LN (pre-LN normalised the sub-layer's input)."""
    y = g.op("Add", [x, sublayer_out], hint + "_residual")
    return y if add_norm.pre_norm else _layer_norm(g, y, add_norm.norm, hint + "_norm")


def _sublayer_input(g: GraphBuilder, x: str, add_norm, hint: str) -> str:
    return _layer_norm(g, x, add_norm.norm, hint + "_prenorm") if add_norm.pre_norm else x


class Shapes:
    """Constant shape tensors shared by every layer."""

    def __init__(self, g: GraphBuilder, heads: int, head_dim: int, d_model: int):
        self.head_dim = head_dim
        self.query_column = g.const([-1, heads, head_dim, 1], "shape_query_column", np.int64)
        self.heads_row = g.const([-1, heads, 1, head_dim], "shape_heads_row", np.int64)
        self.logits_row = g.const([0, 0, 1, -1], "shape_logits_row", np.int64)
        self.rows = g.const([-1, d_model], "shape_rows", np.int64)
        self.key_value_row = g.const([-1, 1, 2, d_model], "shape_key_value_row", np.int64)


def attention_logits(g: GraphBuilder, s: Shapes, query_column: str, keys: str, hint: str) -> str:
    """q (B,H,dh,1), keys (B,H,T,dh) -> (B,H,1,T): keys @ q, so the cache is never transposed."""
    return g.op("Reshape", [g.op("MatMul", [keys, query_column]), s.logits_row], hint)


def embed_tokens(g: GraphBuilder, model, tokens: str, index: str,
           tables: GraphBuilder | None = None) -> tuple[str, np.ndarray]:
    """Embedding (3.4) and position (3.5) of one token per row: -> (x (B,D), the token table,
    which a tied output projection reads). The tables are constants of `tables` (default: g),
    so that several loop bodies can share one copy of them."""
    c = model.config
    tables = tables or g
    embedding = model.target_embedding if model.decoder.cross_attention else model.embedding
    table = np.asarray(embedding.embeddings.numpy(), np.float32)
    table_name = tables.const(table, "token_embedding")
    x = g.op("Gather", [table_name, tokens], "embed", axis=0)
    x = g.op("Mul", [x, g.const(np.float32(math.sqrt(c.d_model)), "embed_scale")],
             "embed_scaled")
    positions = np.asarray(embedding.position_embedding if c.positional == "sinusoidal"
                           else embedding.position_embedding.numpy(), np.float32)
    position = g.op("Gather", [tables.const(positions, "positions"), index], "position", axis=0)
    return g.op("Add", [x, position], "embedded"), table


def fused_qkv(g: GraphBuilder, h: str, attention, scale: float, hint: str) -> tuple[str, str]:
    """One fused projection of a self-attention's query, key and value: -> (q (B,D) scaled by
    1/sqrt(d_k), kv (B,2D))."""
    d_model = attention.query_dense.kernel.shape[0]
    wq, bq = _weights(attention.query_dense, "kernel", "bias")
    wk, bk = _weights(attention.key_dense, "kernel", "bias")
    wv, bv = _weights(attention.value_dense, "kernel", "bias")
    qkv = _matmul_add(g, h, np.concatenate([wq * scale, wk, wv], axis=1),
                      np.concatenate([bq * scale, bk, bv]), hint + "fused_qkv")
    q, kv = g.op("Split", [qkv, g.const([d_model, 2 * d_model], "split_q_kv", np.int64)],
                 hint + "_q_kv", outputs=2, axis=1)
    return q, kv


def decoder_layers(g: GraphBuilder, s: Shapes, model, x: str, self_attention, cross,
                    taps: dict | None = None) -> str:
    """x (B,D) through every decoder layer (3.1). `self_attention(i, layer, h)` -> the heads
    of layer i's masked self-attention merged to (B,D) before its output projection (the
    cache is the caller's); `cross(i)` -> (cross_keys, cross_values, bias (B,1,1,S)) of layer
    i, or None for a model without cross-attention. `taps`, when given, receives the last
    layer's cross-attention "weights" (B,H,1,S) and "context" (B,D), which copy attention
    reads."""
    for i, layer in enumerate(model.decoder.decoder_layers):
        p = f"layer{i}"
        h = _sublayer_input(g, x, layer.self_attention_norm, p + "_self")
        attended = _dense(g, self_attention(i, layer, h), layer.self_attention.output_dense,
                          p + "_self_out")
        x = _add_norm(g, x, attended, layer.self_attention_norm, p + "_self")

        # Cross-attention over the encoder's precomputed keys/values (none in an LM).
        if cross is not None:
            keys, values, bias = cross(i)
            attention = layer.cross_attention_layer
            h = _sublayer_input(g, x, layer.cross_attention_norm, p + "_cross")
            scale = 1.0 / math.sqrt(s.head_dim)
            q = g.op("Reshape", [_dense(g, h, attention.query_dense, p + "_cross_q", scale),
                                 s.query_column], p + "_cross_q_column")
            logits = g.op("Add", [attention_logits(g, s, q, keys, p + "_cross"), bias],
                          p + "_cross_logits")
            weights = g.op("Softmax", [logits], p + "_cross_weights", axis=-1)
            attended = g.op("Reshape", [g.op("MatMul", [weights, values]), s.rows],
                            p + "_cross_merged")
            attended = _dense(g, attended, attention.output_dense, p + "_cross_out")
            if taps is not None:
                taps.update(weights=weights, context=attended)
            x = _add_norm(g, x, attended, layer.cross_attention_norm, p + "_cross")

        # Position-wise feed-forward.
        h = _sublayer_input(g, x, layer.feed_forward_norm, p + "_ffn")
        inner = g.op("Relu", [_dense(g, h, layer.feed_forward.inner, p + "_ffn_inner")])
        x = _add_norm(g, x, _dense(g, inner, layer.feed_forward.outer, p + "_ffn_outer"),
                      layer.feed_forward_norm, p + "_ffn")
    if model.decoder.final_norm is not None:
        x = _layer_norm(g, x, model.decoder.final_norm, "final_norm")
    return x


def output_logits(g: GraphBuilder, model, x: str, table: np.ndarray, name: str) -> None:
    """The pre-softmax projection into the graph value `name` (B,V)."""
    if model.output_projection is None:
        # Tied output (3.4): logits = x E^T. E^T is stored as its own constant (a Gemm with
        # transB=1 could read E, but int8 quantization only handles MatMul).
        g.output("MatMul", [x, g.const(np.ascontiguousarray(table.T), "output_kernel")], name)
    else:
        kernel, bias = _weights(model.output_projection, "kernel", "bias")
        product = g.op("MatMul", [x, g.const(kernel, "output_kernel")], "output_matmul")
        g.output("Add", [product, g.const(bias, "output_bias")], name)


def copy_mixture(g: GraphBuilder, model, hidden: str, embedded: str, taps: dict, source_ids: str,
                  logits: str, name: str) -> None:
    """Copy attention (keras_transformer.layers.copy_attention) into the graph value `name`
    (B,V): log((1 - g) softmax(logits) + g copy), g = sigmoid(W [hidden; context; embedded]
    + b), copy = the last layer's cross-attention (one head, or the heads' mean) added up per
    source id (B,S) int64. ScatterElements with reduction "add" (opset 16): without a
    reduction, a source id found twice would leave the result undefined."""
    from onnx import TensorProto

    c = model.config
    weights = taps["weights"]  # (B,H,1,S)
    if c.copy_head < 0:
        attention = g.op("ReduceMean", [weights], "copy_attention", axes=[1, 2], keepdims=0)
    else:
        attention = g.op("Squeeze", [
            g.op("Gather", [weights, g.const(np.int64(c.copy_head), "copy_head")], axis=1),
            g.const([1], "copy_axis", np.int64)], "copy_attention")
    joined = g.op("Concat", [hidden, taps["context"], embedded], "copy_gate_input", axis=1)
    gate = _dense(g, joined, model.copy_gate.dense, "copy_gate")  # (B,1) logit
    # log(1 - sigmoid(z)) = -softplus(z), log sigmoid(z) = -softplus(-z)
    log_keep = g.op("Neg", [g.op("Softplus", [gate])], "copy_log_keep")
    log_gate = g.op("Neg", [g.op("Softplus", [g.op("Neg", [gate])])], "copy_log_gate")
    generate = g.op("Add", [g.op("LogSoftmax", [logits], axis=1), log_keep], "copy_generate")
    zeros = g.op("ConstantOfShape", [g.op("Shape", [logits])], "copy_zeros",
                 value=_float_tensor(0.0))
    mass = g.op("ScatterElements", [zeros, g.op("Cast", [source_ids], to=TensorProto.INT64),
                                    attention], "copy_mass", axis=1, reduction="add")
    copied = g.op("Add", [g.op("Log", [mass]), log_gate], "copy_copied")  # log 0 = -inf
    top = g.op("Max", [generate, copied], "copy_top")
    total = g.op("Add", [g.op("Exp", [g.op("Sub", [generate, top])]),
                         g.op("Exp", [g.op("Sub", [copied, top])])], "copy_total")
    g.output("Add", [top, g.op("Log", [total])], name)


def _float_tensor(value: float):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray([value], np.float32))


def log_normalizer(g: GraphBuilder, logits: str, name: str) -> None:
    """logsumexp of each row of logits (B,V) into `name` (B,), for the search's
    log-probabilities: onnxruntime's vectorised Exp and reductions do it several times faster
    than NumPy."""
    row_max = g.op("ReduceMax", [logits], "logits_max", axes=[1], keepdims=1)
    shifted = g.op("Exp", [g.op("Sub", [logits, row_max], "logits_shifted")], "logits_exp")
    total = g.op("ReduceSum", [shifted, g.const([1], "axis1", np.int64)], "logits_sum",
                 keepdims=0)
    g.output("Add", [g.op("Squeeze", [row_max, g.const([1], "squeeze_axis", np.int64)],
                          "logits_max_rows"), g.op("Log", [total], "logits_log_sum")], name)


def build_decoder_step(model: Transformer | TransformerLM):
    """A checked onnx.ModelProto of one decoding step of `model` (float32, opset 17).

    tokens (B,) int32, memory_mask (B,S) bool, index () int32, cross_keys_l/cross_values_l
    (B,H,S,dh) and cache_keys_l/cache_values_l (B,H,T,dh) per layer l -> logits (B,V),
    step_key_values (B,L,2,D), log_normalizer (B,) = logsumexp of each row of logits.
    Head-major, one input per layer and kind: the runtime passes contiguous NumPy arrays that
    onnxruntime reads in place, with no split or transpose of the cache inside the graph. The
    cache is only read; slot `index` is written by the caller. A TransformerLM's step (no
    cross-attention) has neither memory_mask nor the cross_keys_l/cross_values_l inputs.
    """
    from onnx import TensorProto, helper

    c = model.config
    layers, d_model, heads = c.num_decoder_layers, c.d_model, c.num_heads
    head_dim = d_model // heads
    scale = 1.0 / math.sqrt(head_dim)
    g = GraphBuilder()
    s = Shapes(g, heads, head_dim, d_model)
    cross = model.decoder.cross_attention
    x, table = embed_tokens(g, model, "tokens", "index")

    # Masks, once per step. Self-attention: cache slots < index; cross: the source's padding.
    zero, masked = g.const(np.float32(0.0), "zero"), g.const(np.float32(MASKED_LOGIT), "masked")
    cache_length = g.op("Shape", ["cache_keys_0"], "cache_length", start=2, end=3)
    slots = g.op("Range", [g.const(np.int64(0), "start"),
                           g.op("Squeeze", [cache_length], "cache_length_scalar"),
                           g.const(np.int64(1), "delta")], "cache_slots")
    earlier = g.op("Less", [slots, g.op("Cast", ["index"], "index_64", to=TensorProto.INT64)])
    self_bias = g.op("Where", [earlier, zero, masked], "self_bias")
    split_sizes = g.op("Concat", [cache_length, g.const([1], "one", np.int64)], "split_sizes",
                       axis=0)
    cross_inputs = None
    if cross:
        cross_bias = g.op("Where", ["memory_mask", zero, masked], "cross_bias")
        cross_bias = g.op("Unsqueeze", [cross_bias, g.const([1, 2], "axes12", np.int64)],
                          "cross_bias_heads")

        def cross_inputs(i):
            return f"cross_keys_{i}", f"cross_values_{i}", cross_bias

    step_rows = []

    def self_attention(i, layer, h):
        """Over the cache plus this position's own key/value, which is not in it yet."""
        p = f"layer{i}"
        q, kv = fused_qkv(g, h, layer.self_attention, scale, p)
        step_rows.append(g.op("Reshape", [kv, s.key_value_row], p + "_step_kv"))
        k_new, v_new = g.op("Split", [kv], p + "_k_v", outputs=2, axis=1)
        q_column = g.op("Reshape", [q, s.query_column], p + "_q_column")
        cached = g.op("Add", [attention_logits(g, s, q_column, f"cache_keys_{i}", p + "_cached"),
                              self_bias], p + "_cached_logits")
        own = g.op("MatMul", [g.op("Reshape", [k_new, s.heads_row], p + "_k_row"), q_column],
                   p + "_own_logit")  # (B,H,1,1)
        weights = g.op("Softmax", [g.op("Concat", [cached, own], axis=-1)], p + "_self_weights",
                       axis=-1)
        w_cached, w_own = g.op("Split", [weights, split_sizes], p + "_self_split", outputs=2,
                               axis=-1)
        attended = g.op("Add", [
            g.op("MatMul", [w_cached, f"cache_values_{i}"]),
            g.op("Mul", [w_own, g.op("Reshape", [v_new, s.heads_row], p + "_v_row")])],
            p + "_self_heads")
        return g.op("Reshape", [attended, s.rows], p + "_self_merged")

    embedded = x
    copying = cross and model.config.copy_attention
    taps = {} if copying else None
    x = decoder_layers(g, s, model, x, self_attention, cross_inputs, taps)
    if copying:
        output_logits(g, model, x, table, "vocab_logits")
        copy_mixture(g, model, x, embedded, taps, COPY_SOURCE, "vocab_logits", "logits")
    else:
        output_logits(g, model, x, table, "logits")
    g.output("Concat", step_rows, "step_key_values", axis=1)
    log_normalizer(g, "logits", "log_normalizer")

    float_, batch = TensorProto.FLOAT, "batch"
    inputs = [helper.make_tensor_value_info("tokens", TensorProto.INT32, [batch])]
    if cross:
        inputs.append(helper.make_tensor_value_info("memory_mask", TensorProto.BOOL,
                                                    [batch, "source_length"]))
    inputs.append(helper.make_tensor_value_info("index", TensorProto.INT32, []))
    if cross:
        inputs += [helper.make_tensor_value_info(name, float_, [batch, heads, "source_length",
                                                                head_dim])
                   for name in memory_names(layers)]
        if copying:
            inputs.append(helper.make_tensor_value_info(COPY_SOURCE, TensorProto.INT32,
                                                        [batch, "source_length"]))
    inputs += [helper.make_tensor_value_info(name, float_, [batch, heads, "cache_length",
                                                            head_dim])
               for name in cache_names(layers)]
    outputs = [
        helper.make_tensor_value_info("logits", float_, [batch, c.target_vocab_size]),
        helper.make_tensor_value_info("step_key_values", float_, [batch, layers, 2, d_model]),
        helper.make_tensor_value_info("log_normalizer", float_, [batch]),
    ]
    return model_proto(g, "decoder_step", inputs, outputs)
