"""export/onnx_search.py: search.onnx against the NumPy search driving decoder_step.onnx.

The reference is keras_transformer.decoding's greedy and beam search stepping the export's
own decoder_step.onnx (as the onnx runtime does without search.onnx), on random-weight models
of several shapes (post-LN, pre-LN, learned positions, untied output projection): tokens must
be identical and scores within float32 rounding, greedy and beam, with and without
no_repeat_ngram_size and min_length, over random batches with padding.
"""

from __future__ import annotations

import numpy as np
import pytest

from keras_transformer import decoding
from keras_transformer.cache import layout
from keras_transformer.generation import trimmed
from tests.decoding_toys import random_transformer

ort = pytest.importorskip("onnxruntime")

VOCAB = 40


def _model(seed: int, **options):
    return random_transformer(seed, VOCAB, **options)


class _Graphs:
    """search.onnx (through the export's offline pass, as exported) and the stepwise
    reference of one model; with `int8_dir`, the export's int8 variant of both, written there
    (search.int8.onnx against the NumPy search over encoder.int8.onnx and
    decoder_step.int8.onnx)."""

    def __init__(self, model, int8_dir=None):
        import onnx

        from export.module import decoding_module
        from export.onnx_convert import convert_function
        from export.onnx_graph import build_decoder_step
        from export.onnx_optimize import ort_extended, rewrite, write_int8
        from export.onnx_search import build_search

        self.config = model.config
        encoder = rewrite(convert_function(decoding_module(model).encode))[0]
        self.search_proto = build_search(model, encoder)
        if int8_dir is None:
            self.search = self._session(ort_extended(self.search_proto))
            self.encoder = self._session(encoder)
            self.step_session = self._session(build_decoder_step(model))
            return
        graphs = {"search": self.search_proto, "encoder": encoder,
                  "decoder_step": rewrite(build_decoder_step(model))[0]}
        self.int8 = {}
        for role, graph in graphs.items():
            write_int8(graph, int8_dir / f"{role}.int8.onnx")
            self.int8[role] = onnx.load(str(int8_dir / f"{role}.int8.onnx"))
        self.search = self._session(self.int8["search"])
        self.encoder = self._session(self.int8["encoder"])
        self.step_session = self._session(self.int8["decoder_step"])

    @staticmethod
    def _session(proto):
        return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])

    def in_graph(self, source, beam, max_length, alpha=0.6, ngram=0, min_length=0,
                 row_limits=None):
        tokens, scores = self.search.run(None, {
            "source_ids": source, "max_length": np.asarray(max_length, np.int32),
            "row_max_length": np.asarray(np.full(len(source), max_length) if row_limits is None
                                         else row_limits, np.int32),
            "beam_size": np.asarray(beam, np.int32), "alpha": np.asarray(alpha, np.float64),
            "no_repeat_ngram_size": np.asarray(ngram, np.int32),
            "min_length": np.asarray(min_length, np.int32)})
        return trimmed(tokens, scores, self.config.eos_id, row_limits, self.config.pad_id)

    def stepwise(self, source, beam, max_length, alpha=0.6, ngram=0, min_length=0,
                 row_limits=None):
        c, layers = self.config, self.config.num_decoder_layers
        outputs = dict(zip([o.name for o in self.encoder.get_outputs()],
                           self.encoder.run(None, {"source_ids": source}), strict=True))
        memory = [np.repeat(outputs[n], beam, 0) for n in layout.memory_names(layers)]
        mask = np.repeat(outputs["memory_mask"], beam, 0)
        cache = layout.zeros(layers, len(source) * beam, c.num_heads, max_length, c.d_model)

        def step(tokens, index):
            feeds = {"tokens": tokens.astype(np.int32), "index": np.asarray(index, np.int32),
                     "memory_mask": mask, **dict(zip(layout.memory_names(layers), memory, strict=True)),
                     **dict(zip(layout.cache_names(layers), cache, strict=True))}
            logits, step_key_values, lse = self.step_session.run(
                ["logits", "step_key_values", "log_normalizer"], feeds)
            layout.write(cache, step_key_values, index)
            return logits, lse

        stepper = type("Stepper", (), {})()
        stepper.step = step
        stepper.reorder = lambda indices: layout.reorder(cache, indices, None)
        settings = decoding.SearchSettings(beam_size=beam, max_length=max_length, alpha=alpha,
                                           no_repeat_ngram_size=ngram, min_length=min_length)
        return decoding.search(stepper, len(source), settings, bos_id=c.bos_id,
                               eos_id=c.eos_id, pad_id=c.pad_id, row_limits=row_limits)


@pytest.fixture(scope="module", params=[
    dict(), dict(pre_norm=True), dict(positional="learned", share_embeddings=False,
                                      tie_output=False)],
    ids=["post_ln", "pre_ln_tied", "learned_untied"])
def graphs(request):
    return _Graphs(_model(3, **request.param))


def _sources(rng, eos_id: int, pad_id: int):
    batch, length = int(rng.integers(1, 5)), int(rng.integers(2, 10))
    source = rng.integers(4, VOCAB, (batch, length)).astype(np.int32)
    source[:, -1] = eos_id
    if batch > 1:  # a shorter, padded row
        source[0, length - 2:] = [eos_id, pad_id]
    return source


def _assert_matches_numpy(graphs, source, beam, max_length, **settings):
    """search.onnx's tokens identical to the NumPy search's and its scores within float32
    rounding; -> search.onnx's result."""
    expected = graphs.stepwise(source, beam, max_length, **settings)
    got = graphs.in_graph(source, beam, max_length, **settings)
    assert got.tokens.tolist() == expected.tokens.tolist(), (beam, settings)
    np.testing.assert_allclose(got.scores, expected.scores, rtol=1e-5, atol=1e-5)
    return got


@pytest.mark.parametrize("beam", [1, 2, 4])
@pytest.mark.parametrize("ngram,min_length", [(0, 0), (2, 0), (0, 6), (3, 4), (1, 0)])
def test_search_graph_matches_the_numpy_search(graphs, beam, ngram, min_length):
    c = graphs.config
    rng = np.random.default_rng(beam * 100 + ngram * 10 + min_length)
    for _ in range(3):
        source = _sources(rng, c.eos_id, c.pad_id)
        max_length = int(rng.integers(3, 20))
        settings = dict(alpha=float(rng.choice([0.0, 0.6, 1.0])), ngram=ngram,
                        min_length=min_length)
        _assert_matches_numpy(graphs, source, beam, max_length, **settings)


@pytest.mark.parametrize("beam", [1, 2, 4])
@pytest.mark.parametrize("ngram,min_length", [(0, 0), (2, 0), (0, 6)])
def test_own_limits_in_the_graph_match_the_numpy_search(graphs, beam, ngram, min_length):
    """row_max_length: each source ends at its own limit in the graph as in the NumPy search
    (which gives each source its search alone, tests/test_decoding_beam.py)."""
    c = graphs.config
    rng = np.random.default_rng(7 + beam * 10 + ngram + min_length)
    cut = 0
    for _ in range(4):
        source = _sources(rng, c.eos_id, c.pad_id)
        limits = rng.integers(1, 12, len(source))
        settings = dict(alpha=0.6, ngram=ngram, min_length=min_length, row_limits=limits)
        expected = graphs.stepwise(source, beam, int(limits.max()), **settings)
        got = graphs.in_graph(source, beam, int(limits.max()), **settings)
        assert got.to_lists(c.eos_id) == expected.to_lists(c.eos_id), (beam, limits)
        assert got.tokens.tolist() == expected.tokens.tolist(), (beam, limits)
        np.testing.assert_allclose(got.scores, expected.scores, rtol=1e-5, atol=1e-5)
        cut += sum(len(row) == limit for row, limit in
                   zip(expected.to_lists(c.eos_id), limits.tolist(), strict=True))
    assert cut >= 2  # some rows ended at their own limit


@pytest.mark.parametrize("beam", [19, 20, 23])
@pytest.mark.parametrize("ngram,min_length", [(0, 6), (2, 4)])
def test_beams_as_wide_as_the_vocabulary(graphs, beam, ngram, min_length):
    """A row's 2K candidates are the whole vocabulary (K >= 20 for V = 40) or all of it but
    two (K = 19). The graph bans EOS among a row's candidates, setting it to -inf where it
    stands; the NumPy search bans it in the logits before its top 2K. The tokens must agree
    either way."""
    c = graphs.config
    rng = np.random.default_rng(beam + 7 * min_length)
    source = _sources(rng, c.eos_id, c.pad_id)
    _assert_matches_numpy(graphs, source, beam, 12, ngram=ngram, min_length=min_length)


@pytest.fixture(scope="module")
def eos_first_graphs():
    """A model whose output bias puts EOS first at most steps, so min_length has to move
    greedy and beam search off it."""
    model = _model(3, positional="learned", share_embeddings=False, tie_output=False)
    bias = model.output_projection.bias
    bias.assign(bias.numpy() + 4.0 * (np.arange(VOCAB) == model.config.eos_id))
    return _Graphs(model)


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("ngram", [0, 2])
def test_min_length_where_eos_comes_first(eos_first_graphs, beam, ngram):
    c = eos_first_graphs.config
    rng = np.random.default_rng(11 * beam + ngram)
    source = _sources(rng, c.eos_id, c.pad_id)
    free = eos_first_graphs.in_graph(source, beam, 10, ngram=ngram)
    assert (free.tokens[:, 0] == c.eos_id).all()  # without min_length every row stops at once
    got = _assert_matches_numpy(eos_first_graphs, source, beam, 10, ngram=ngram, min_length=4)
    assert (got.tokens[:, :4] != c.eos_id).all()


@pytest.fixture(scope="module")
def eos_sometimes_graphs():
    """A model whose output bias makes EOS likely but not first: in a batch, rows end at
    different steps, some run to their limit."""
    model = _model(7, positional="learned", share_embeddings=False, tie_output=False)
    bias = model.output_projection.bias
    bias.assign(bias.numpy() + 1.5 * (np.arange(VOCAB) == model.config.eos_id))
    return _Graphs(model)


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("ngram,min_length", [(0, 0), (2, 3)])
def test_rows_that_end_early_leave_the_others_unchanged(eos_sometimes_graphs, beam, ngram,
                                                        min_length):
    """A step computes only the rows still running: a batch whose rows end at different
    steps (by EOS and by their own limits) gives the NumPy search's tokens, and each row is
    what it is searched alone."""
    c = eos_sometimes_graphs.config
    rng = np.random.default_rng(5)
    source = rng.integers(4, VOCAB, (8, 7)).astype(np.int32)
    source[:, -1] = c.eos_id
    source[2, 4:] = [c.eos_id, c.pad_id, c.pad_id]
    limits = np.array([16, 16, 12, 16, 9, 16, 16, 14])
    settings = dict(ngram=ngram, min_length=min_length, row_limits=limits)
    got = _assert_matches_numpy(eos_sometimes_graphs, source, beam, 16, **settings)
    ends = [int(np.argmax(row == c.eos_id)) + 1 if (row == c.eos_id).any() else None
            for row in np.asarray(got.tokens)]
    assert len({e for e in ends if e is not None}) >= 2 and None in ends, ends
    for i in range(len(source)):
        alone = eos_sometimes_graphs.in_graph(source[i:i + 1, :], beam, 16, ngram=ngram,
                                              min_length=min_length, row_limits=limits[i:i + 1])
        row = np.asarray(got.tokens)[i]
        assert row[:alone.tokens.shape[1]].tolist() == np.asarray(alone.tokens)[0].tolist()
        np.testing.assert_allclose(got.scores[i], alone.scores[0], rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def int8_graphs(tmp_path_factory):
    return _Graphs(_model(5, pre_norm=True), tmp_path_factory.mktemp("int8"))


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("ngram,min_length", [(0, 0), (2, 3)])
def test_int8_search_graph_matches_the_int8_numpy_search(int8_graphs, beam, ngram, min_length):
    """search.int8.onnx against the NumPy search stepping decoder_step.int8.onnx: the same
    weights quantized the same way. Identical tokens on these seeded inputs; in general
    dynamic int8 can move a token where two candidates nearly tie (export.parity's
    search_graph_parity says why), which these random models' margins don't."""
    c = int8_graphs.config
    rng = np.random.default_rng(beam * 10 + ngram)
    for _ in range(3):
        source = _sources(rng, c.eos_id, c.pad_id)
        max_length = int(rng.integers(3, 20))
        settings = dict(ngram=ngram, min_length=min_length)
        _assert_matches_numpy(int8_graphs, source, beam, max_length, **settings)


def test_int8_search_graph_quantizes_the_loop_bodies(int8_graphs):
    """Every weight MatMul of the step is int8 inside both loop bodies (not only the inlined
    encoder of the main graph), and each body keeps its own copy of the weights."""
    bodies = list(_loops(int8_graphs.int8["search"].graph))
    assert len(bodies) == 2
    for body in bodies:
        weights = {i.name: i for i in body.initializer}
        float_matmuls = [n for n in body.node if n.op_type in ("MatMul", "Gemm", "FusedGemm")
                         and n.input[1] in weights]
        assert float_matmuls == []
        int8_weights = [w for w in weights.values() if w.data_type == w.INT8 and len(w.dims) == 2]
        # per layer: qkv, self out, cross q, cross out, ffn inner and outer; and the output
        assert len(int8_weights) == 6 * int8_graphs.config.num_decoder_layers + 1


def test_constraints_hold_in_the_graph(graphs):
    """What the constraints promise, checked on the graph's own output: no n-gram twice in a
    row's tokens, and no EOS before min_length."""
    c = graphs.config
    rng = np.random.default_rng(7)
    source = rng.integers(4, VOCAB, (4, 8)).astype(np.int32)
    source[:, -1] = c.eos_id
    for beam in (1, 3):
        result = graphs.in_graph(source, beam, 20, ngram=2, min_length=5)
        for row in result.to_lists(c.eos_id):
            pairs = list(zip(row, row[1:], strict=False))
            assert len(pairs) == len(set(pairs)), row
        for row in result.tokens.tolist():
            assert c.eos_id not in row[:5], row


@pytest.mark.parametrize("beam", [1, 3])
def test_a_limit_past_the_models_positions_is_capped_there(graphs, beam):
    """Called directly with max_length above max_target_length, the graph searches to
    max_target_length, as every tool caps it, instead of failing on the positions' Gather."""
    c = graphs.config
    source = _sources(np.random.default_rng(11), c.eos_id, c.pad_id)
    capped = _assert_matches_numpy(graphs, source, beam, c.max_target_length)
    got = graphs.in_graph(source, beam, c.max_target_length + 9,
                          row_limits=np.full(len(source), c.max_target_length + 9))
    assert got.tokens.tolist() == capped.tokens.tolist()
    np.testing.assert_array_equal(got.scores, capped.scores)


def test_greedy_stops_when_every_row_ended(graphs):
    """The loop runs until every row produced EOS, not to max_length: the output is as wide
    as the longest row, as the NumPy search's."""
    c = graphs.config
    rng = np.random.default_rng(11)
    source = rng.integers(4, VOCAB, (3, 6)).astype(np.int32)
    source[:, -1] = c.eos_id
    long_run = graphs.in_graph(source, 1, 23)
    expected = graphs.stepwise(source, 1, 23)
    assert long_run.tokens.shape == expected.tokens.shape


def _loops(graph):
    """The bodies of the Loop nodes in `graph` and in its subgraphs that run the decoding
    steps (each search's inner loop; its outer loop only keeps the rows still running)."""
    from onnx import AttributeProto

    for node in graph.node:
        for attribute in node.attribute:
            subgraphs = ([attribute.g] if attribute.type == AttributeProto.GRAPH
                         else list(attribute.graphs))
            for sub in subgraphs:
                if node.op_type == "Loop" and sub.name.endswith("_step"):
                    yield sub
                yield from _loops(sub)


def test_search_graph_weights_live_in_the_loop_bodies(graphs):
    """onnxruntime prepacks a MatMul's weights only when they are initializers of the node's
    own graph: the loop bodies carry their step's weights, the main graph the encoder's."""
    bodies = list(_loops(graphs.search_proto.graph))
    assert len(bodies) == 2  # greedy and beam
    for body in bodies:
        weights = {i.name for i in body.initializer}
        matmuls = [n for n in body.node if n.op_type == "MatMul" and n.input[1] in weights]
        # per layer: qkv, self out, cross q, cross out, ffn inner and outer; and the output
        assert len(matmuls) == 6 * graphs.config.num_decoder_layers + 1
