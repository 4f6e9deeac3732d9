"""search.onnx: the encoder, every decoding step and greedy or beam search in one onnxruntime
call, for a translator's (or summarizer's) export.

The stepwise runtime (export/runtime/onnx.py) calls onnxruntime once per token and runs the
search in NumPy; at batch 1 with a small model, Python, the calls and the cache writes cost
as much as a third of the decode. This graph runs the whole search in onnxruntime: the
encoder's nodes (the export's encoder graph, inlined), then an ONNX `Loop` whose body is one
decoding step followed by the search's choice of the next tokens. It computes exactly what
`keras_transformer.decoding` computes (greedy search; beam search with the "2K candidates"
scheme, the GNMT length penalty and Hugging Face's stopping rule; `no_repeat_ngram_size` and
`min_length`), so its tokens are the NumPy search's; export.parity and the tests hold the two
to each other. The NumPy search stays the reference.

Inputs: source_ids int32 (B,S) (EOS-terminated, PAD-padded), max_length int32 () (generated
tokens, EOS included; above the model's max_target_length it is capped there, as is
row_max_length), row_max_length int32 (B,) (each source's own limit, at most
max_length: a beam search ends a source there as its search alone would), beam_size int32 ()
(1: greedy), alpha float64 (), no_repeat_ngram_size int32 () and min_length int32 () (0:
off). Greedy and beam search alike end each source at its own limit. Outputs: tokens
int32 (B,T) (T = steps taken; PAD after EOS) and scores float32 (B,), as
`decoding.SearchResult` holds them.

How it is laid out:

- The encoder's weights and the lookup tables are initializers of the main graph. Each of
  the two loop bodies (greedy and beam, picked by an `If` on beam_size) holds its own copy of
  the decoder's matrices: onnxruntime prepacks a MatMul's weights only when they are
  initializers of the node's own graph. The export's int8 copy (search.int8.onnx) quantizes
  those in the bodies too (export.onnx_optimize.write_int8).
- Inside the loop the self-attention cache grows by one position per step (`Concat` of the
  loop-carried keys/values and the new ones): a step attends to exactly the positions before
  it, with no mask. Beam search gathers the cache rows of the surviving beams (`Gather`).
- A step computes only the rows still running: in a batch, a source that ended (EOS, its
  stopping rule or its own limit) costs no decoder work while the others run on. Each
  search is two loops: the inner one steps over a fixed set of live rows, reading their
  cross-attention memory in place, until a row ends; the outer one then keeps the caches
  and memory of the rows still running and starts the next inner loop. The search's own
  state stays (batch, ...) wide; the step's results reach it through each row's place
  among the live rows.
- Scores are float64, as in NumPy. Ties are broken as NumPy breaks them: ONNX's `TopK` and
  `ArgMax` return the lower index first, which is NumPy's order of (beam, rank in the beam,
  token) for candidates and of (earlier, later) for finished hypotheses.
- min_length bans EOS among each row's top candidates (`constrained_top`), not in the
  logits; one `If` per step picks that or n-gram blocking, and hands on only the top-k
  tensors (in a loop body, an If that hands on the (rows, V) logits, or one nested in
  another, cost more than the nodes it skipped).
- no_repeat_ngram_size n: every row carries the n-grams it generated, each stored as a marker
  column 0 and its n tokens, plus its last n tokens; at each step the n-grams whose first n-1
  tokens equal the row's last n-1 ban their last token (a `ScatterElements` add into a
  (rows, V) count). Before a row has n tokens its "last n" hold a sentinel (-2), which no
  stored n-gram prefix can equal; the list starts with one entry whose marker is -1, so it is
  never empty and never matches.
"""

from __future__ import annotations

import math
import re

import numpy as np

from keras_transformer.cache.layout import COPY_SOURCE, memory_names
from keras_transformer.layers.attention import MASKED_LOGIT
from keras_transformer.models.transformer import Transformer

from .onnx_graph import (
    Shapes,
    attention_logits,
    copy_mixture,
    decoder_layers,
    embed_tokens,
    fused_qkv,
    log_normalizer,
    output_logits,
)
from .onnx_nodes import ONNX_OPSET, GraphBuilder

SEARCH_FILE = "search.onnx"
OUTPUTS = ("tokens", "scores")
_BIG = np.iinfo(np.int64).max
_SENTINEL = -2  # what a row's "last n tokens" hold before it generated n


def _info(name, elem_type, shape=None):
    from onnx import helper

    return helper.make_tensor_value_info(name, elem_type, shape)


class _Builder:
    """The search graph of one model; `g` holds the main graph's nodes and every weight."""

    def __init__(self, model: Transformer):
        from onnx import TensorProto

        self.T = TensorProto
        self.model = model
        c = model.config
        self.layers, self.vocab = c.num_decoder_layers, c.target_vocab_size
        self.heads, self.head_dim = c.num_heads, c.d_model // c.num_heads
        self.pad, self.bos, self.eos = c.pad_id, c.bos_id, c.eos_id
        self.g = GraphBuilder(share_constants=True)
        self.cache_shape = ["live", self.heads, "t", self.head_dim]

    # -- small helpers over a (sub)graph -------------------------------------------------------

    def c64(self, value, hint="i64"):
        """An int64 constant, one per value and hint."""
        label = re.sub(r"[^0-9a-z]+", "_", f"{value}".replace("-", "m")).strip("_")
        return self.g.const(np.asarray(value, np.int64), f"{hint}_{label}")

    def slice(self, b, x, start, end, axis, hint="slice"):
        """x[start:end] along `axis`; start/end are ints or (1,) int64 names."""
        def as_name(v, what):
            return self.c64([v], what) if isinstance(v, int) else v
        return b.op("Slice", [x, as_name(start, "start"), as_name(end, "end"),
                              self.c64([axis], "axis")], hint)

    def unsqueeze(self, b, x, axes, hint="unsqueeze"):
        return b.op("Unsqueeze", [x, self.c64(list(axes), "axes")], hint)

    def squeeze(self, b, x, axes, hint="squeeze"):
        return b.op("Squeeze", [x, self.c64(list(axes), "axes")], hint)

    def to(self, b, x, elem_type, hint="cast"):
        return b.op("Cast", [x], hint, to=elem_type)

    def gather_rows(self, b, x, rows, hint="gather_rows"):
        return b.op("Gather", [x, rows], hint, axis=0)

    # -- one decoding step with a growing cache ------------------------------------------------

    def step(self, b, tokens, index, pasts, cross_keys, cross_values, copy_source, cross_bias):
        """tokens (n,) int32 at position `index` (int64 ()), pasts [keys_0, values_0, ...]
        (n,H,t,dh), the source ids of each row (n,S) for a copy-attention model (else None)
        -> (logits (n,V), log-normalizer (n,), presents (n,H,t+1,dh))."""
        model = self.model
        s = Shapes(b, self.heads, self.head_dim, model.config.d_model)
        scale = 1.0 / math.sqrt(self.head_dim)
        # The lookup tables once, in the main graph (a Gather needs no prepacking).
        x, table = embed_tokens(b, model, tokens, index, tables=self.g)
        presents = []

        def self_attention(i, layer, h):
            p = f"layer{i}"
            q, kv = fused_qkv(b, h, layer.self_attention, scale, p)
            k_new, v_new = b.op("Split", [kv], p + "_k_v", outputs=2, axis=1)
            keys = b.op("Concat", [pasts[2 * i], b.op("Reshape", [k_new, s.heads_row])],
                        p + "_present_keys", axis=2)
            values = b.op("Concat", [pasts[2 * i + 1], b.op("Reshape", [v_new, s.heads_row])],
                          p + "_present_values", axis=2)
            presents.extend([keys, values])
            q_column = b.op("Reshape", [q, s.query_column], p + "_q_column")
            weights = b.op("Softmax", [attention_logits(b, s, q_column, keys, p + "_self")],
                           p + "_self_weights", axis=-1)
            return b.op("Reshape", [b.op("MatMul", [weights, values]), s.rows],
                        p + "_self_merged")

        embedded = x
        taps = {} if copy_source is not None else None
        x = decoder_layers(b, s, model, x, self_attention,
                            lambda i: (cross_keys[i], cross_values[i], cross_bias), taps)
        logits, lse = b.name("logits"), b.name("log_normalizer")
        if copy_source is None:
            output_logits(b, model, x, table, logits)
        else:
            vocab_logits = b.name("vocab_logits")
            output_logits(b, model, x, table, vocab_logits)
            copy_mixture(b, model, x, embedded, taps, copy_source, vocab_logits, logits)
        log_normalizer(b, logits, lse)
        return logits, lse, presents

    # -- the constraints -------------------------------------------------------------------------

    def constrain(self, b, logits, index, min_length, grams, recent):
        """logits (n,V) -> the logits with every banned token at -inf (decoding._constrain):
        EOS while index < min_length and each token that would repeat an n-gram of the
        state; a row with nothing left keeps its EOS logit (only n-grams can ban every
        token)."""
        T = self.T
        eos_row = self.g.const(np.arange(self.vocab)[None, :] == self.eos, "eos_row")
        early = b.op("Less", [index, min_length], "before_min_length")
        minus_inf = self.g.const(np.float32(-np.inf), "minus_inf_f")
        ban = b.op("And", [eos_row, early], "ban_eos")
        marker = b.op("ConstantOfShape", [b.op("Shape", [recent], end=1)], "marker",
                      value=_scalar_tensor(np.int32(0)))
        marker = self.unsqueeze(b, marker, [1])
        suffix = b.op("Concat", [marker, self.slice(b, recent, 1, _BIG, 1)], "suffix", axis=1)
        prefixes = self.slice(b, grams, 0, -1, 2, "prefixes")
        equal = b.op("Equal", [prefixes, self.unsqueeze(b, suffix, [1])])
        match = b.op("ReduceMin", [self.to(b, equal, T.FLOAT)], "ngram_match", axes=[2],
                     keepdims=0)
        banned = self.to(b, self.squeeze(b, self.slice(b, grams, -1, _BIG, 2), [2]), T.INT64)
        zeros = b.op("ConstantOfShape", [b.op("Shape", [logits])], "ban_counts_zero",
                     value=_scalar_tensor(np.float32(0)))
        counts = b.op("ScatterElements", [zeros, banned, match], "ban_counts", axis=1,
                      reduction="add")
        ban = b.op("Or", [b.op("Greater", [counts, self.g.const(np.float32(0), "zero_f")]),
                          ban], "ban")
        masked = b.op("Where", [ban, minus_inf, logits], "masked_logits")
        dead = b.op("Equal", [b.op("ReduceMax", [masked], axes=[1], keepdims=1), minus_inf],
                    "dead_rows")
        return b.op("Where", [b.op("And", [dead, eos_row]), logits, masked], "constrained")

    def remember(self, b, grams, recent, chosen):
        """The n-gram state after each row generated `chosen` (n,) int32."""
        recent = b.op("Concat", [self.slice(b, recent, 1, _BIG, 1),
                                 self.unsqueeze(b, chosen, [1])], "recent", axis=1)
        marker = b.op("ConstantOfShape", [b.op("Shape", [recent], end=1)], "marker",
                      value=_scalar_tensor(np.int32(0)))
        gram = b.op("Concat", [self.unsqueeze(b, marker, [1]), recent], "gram", axis=1)
        grams = b.op("Concat", [grams, self.unsqueeze(b, gram, [1])], "grams", axis=1)
        return grams, recent

    def initial_ngram_state(self, b, rows, ngram):
        """-> (grams (rows,1,n+1) holding the never-matching entry, recent (rows,n) of
        sentinels), n = max(no_repeat_ngram_size, 1)."""
        width_1d = self.unsqueeze(b, b.op("Max", [ngram, self.c64(1, "one")]), [0])
        recent = b.op("Expand", [self.g.const(np.int32(_SENTINEL), "sentinel"),
                                 b.op("Concat", [rows, width_1d], axis=0)], "recent0")
        head = b.op("Expand", [self.g.const(np.int32(-1), "minus_one_i32"),
                               b.op("Concat", [rows, self.c64([1, 1], "ones2")], axis=0)])
        tail = b.op("ConstantOfShape", [b.op("Concat", [rows, self.c64([1], "one1"), width_1d],
                                              axis=0)], value=_scalar_tensor(np.int32(0)))
        return b.op("Concat", [head, tail], "grams0", axis=2), recent

    # -- greedy search ---------------------------------------------------------------------------

    def greedy(self, memory, cross_bias, rows):
        """-> a GraphProto (an If branch): the greedy loop over `rows` (1,) int64 sources."""
        T, g = self.T, self.g
        b = g.subgraph()
        n_pasts = 2 * self.layers
        empty = self.empty_cache(b, rows)
        tokens0 = b.op("Expand", [g.const(np.int32(self.bos), "bos"), rows], "tokens0")
        finished0 = b.op("Expand", [g.const(False, "false"), rows], "finished0")
        scores0 = b.op("Expand", [g.const(np.float64(0), "zero_d"), rows], "scores0")
        carried0 = [tokens0, finished0, scores0] + [empty] * n_pasts
        carried0 += list(self.initial_ngram_state(b, rows, self.ngram_size))
        rt = b.op("Concat", [rows, self.unsqueeze(b, self.max_length, [0])], "rt", axis=0)
        history0 = b.op("Expand", [g.const(np.int32(self.pad), "pad"), rt], "history0")
        carried0 += [history0, self.c64(0, "zero")]
        live0, row_tensors0, row_types, row_shapes = self.live_state(b, rows, memory,
                                                                     cross_bias)
        positions = b.op("Range", [self.c64(0, "zero"), self.max_length, self.c64(1, "one")],
                         "positions")

        body = self.new_body()
        index, cond_in = b.name("index"), b.name("cond")
        names = [b.name(n) for n in ("tokens", "finished", "scores")]
        tokens, finished, scores = names
        pasts = [b.name("past") for _ in range(n_pasts)]
        grams, recent = b.name("grams"), b.name("recent")
        history = b.name("history")
        live, row_map = b.name("live"), b.name("row_map")
        row_tensors = [b.name("row_memory") for _ in row_tensors0]
        step_tokens = self.gather_rows(body, tokens, live, "live_tokens")
        logits, lse, presents = self.step(body, step_tokens, index, pasts,
                                          *self.row_memory(row_tensors))
        # The best two, since min_length may ban one (EOS), then the best of those. TopK
        # rather than ArgMax: the same token (ties to the lower id, and the two are in id
        # order where they tie) and its logit, and faster in onnxruntime (52 against 86 us
        # on 16 x 8000 logits).
        two_logits, two = self.constrained_top(body, logits, index, grams, recent,
                                               self.c64([min(2, self.vocab)], "two1"), live)
        best_logit, position = body.op("TopK", [two_logits, self.c64([1], "one1")], "best",
                                       outputs=2, axis=1)
        best = body.op("GatherElements", [two, position], "best_id", axis=1)
        gain = body.op("Sub", [self.to(body, self.squeeze(body, best_logit, [1]), T.DOUBLE),
                               self.to(body, lse, T.DOUBLE)], "gain")
        best, gain = (self.gather_rows(body, x, row_map, "all_rows") for x in (best, gain))
        new_scores = body.op("Where", [finished, scores, body.op("Add", [scores, gain])],
                             "scores_out")
        chosen = body.op("Where", [finished, g.const(np.int32(self.pad), "pad"),
                                   self.to(body, self.squeeze(body, best, [1]), T.INT32)],
                         "chosen")
        done = body.op("Or", [finished, body.op("Equal", [chosen, g.const(np.int32(self.eos),
                                                                           "eos")])], "done")
        # A row at its own limit ends as its search alone would: its score stops there, and a
        # batch whose rows all end stops stepping.
        at_limit = body.op("Equal", [self.row_max_length,
                                     body.op("Add", [index, self.c64(1, "one")])], "at_limit")
        done = body.op("Or", [done, at_limit], "done_or_limit")
        at_index = body.op("Equal", [positions, index], "at_index")  # (Tmax,)
        history_out = body.op("Where", [at_index, self.unsqueeze(body, chosen, [1]), history],
                              "history_out")
        gen_len = body.op("Add", [index, self.c64(1, "one")], "gen_len_out")
        carried = [chosen, done, new_scores] + presents
        carried += list(self.remembered(body, grams, recent, chosen))
        carried += [history_out, gen_len]
        types = [T.INT32, T.BOOL, T.DOUBLE] + [T.FLOAT] * n_pasts + [T.INT32, T.INT32]
        types += [T.INT32, T.INT64]
        shapes = [["rows"]] * 3 + [self.cache_shape] * n_pasts + [None, None]
        shapes += [["rows", "max_length"], []]
        out = self.segments(b, "greedy", body, index, cond_in,
                            names + pasts + [grams, recent, history, b.name("gen_len")],
                            types, shapes, carried, carried0, done, lambda x, done: done,
                            live, row_map, row_tensors, live0, row_tensors0, row_types,
                            row_shapes, 3, len(carried) - 1, 1)
        history, gen_len = out[len(carried) - 2:len(carried)]
        tokens_out = self.slice(b, history, 0, self.unsqueeze(b, gen_len, [0]), 1, "tokens_bt")
        scores_out = self.to(b, out[2], T.FLOAT, "scores_f")
        return _branch(b, "greedy", [(tokens_out, T.INT32), (scores_out, T.FLOAT)])

    # -- beam search -----------------------------------------------------------------------------

    def beam(self, memory, cross_bias, batch):
        """-> a GraphProto (an If branch): the beam loop over `batch` (1,) int64 sources."""
        T, g = self.T, self.g
        b = g.subgraph()
        n_pasts = 2 * self.layers
        k = b.op("Cast", [self.beam_size], "k", to=T.INT64)
        k_1d = self.unsqueeze(b, k, [0])
        two_k = b.op("Mul", [k, self.c64(2, "two")], "two_k")
        m = b.op("Min", [two_k, self.c64(self.vocab, "vocab")], "m")
        rows = b.op("Mul", [batch, k_1d], "rows")
        # Every source's memory repeated once per beam: rows b * K + k.
        row_source = b.op("Div", [b.op("Range", [self.c64(0, "zero"),
                                                 self.squeeze(b, rows, [0]),
                                                 self.c64(1, "one")]), k], "row_source")
        memory = [[self.gather_rows(b, x, row_source) for x in part] for part in memory[:2]] + [
            None if memory[2] is None else self.gather_rows(b, memory[2], row_source)]
        cross_bias = self.gather_rows(b, cross_bias, row_source)
        live0, row_tensors0, row_types, row_shapes = self.live_state(b, rows, memory,
                                                                     cross_bias)
        empty = self.empty_cache(b, rows)
        tokens0 = b.op("Expand", [g.const(np.int32(self.bos), "bos"), rows], "tokens0")
        bk = b.op("Concat", [batch, k_1d], "bk", axis=0)
        first = b.op("Equal", [b.op("Range", [self.c64(0, "zero"), k, self.c64(1, "one")]),
                               self.c64(0, "zero")])
        alive0 = b.op("Expand", [b.op("Where", [first, g.const(np.float64(0), "zero_d"),
                                                g.const(np.float64(-np.inf), "minus_inf_d")]),
                                 bk], "alive0")
        bkt = b.op("Concat", [bk, self.unsqueeze(b, self.max_length, [0])], "bkt", axis=0)
        history0 = b.op("Expand", [g.const(np.int32(self.pad), "pad"), bkt], "history0")
        fin_scores0 = b.op("Expand", [g.const(np.float64(-np.inf), "minus_inf_d"), bk])
        done0 = b.op("Expand", [g.const(False, "false"), batch], "done0")
        gen_len0 = self.c64(0, "zero")
        carried0 = [tokens0, alive0, history0, fin_scores0, history0, done0, gen_len0]
        carried0 += [empty] * n_pasts
        carried0 += list(self.initial_ngram_state(b, rows, self.ngram_size))
        # What the body needs that no step changes, computed once here: each node in the
        # body costs a few microseconds per step, and most of a step's nodes are small.
        m_1d = self.unsqueeze(b, m, [0])
        two_k_1d = self.unsqueeze(b, two_k, [0])
        b_km = b.op("Concat", [batch, b.op("Mul", [k_1d, m_1d], "km")], "b_km", axis=0)
        b_k_m = b.op("Concat", [batch, k_1d, m_1d], "b_k_m", axis=0)
        positions = b.op("Range", [self.c64(0, "zero"), self.max_length, self.c64(1, "one")],
                         "positions")
        source_base = self.unsqueeze(b, b.op("Mul", [
            b.op("Range", [self.c64(0, "zero"), self.squeeze(b, batch, [0]),
                           self.c64(1, "one")]), k]), [1], "source_base")
        # The length penalty of every length the loop can reach (1..max_length): the body
        # looks its step's up (one Gather) instead of computing it (four nodes).
        penalties = self.penalty(b, b.op("Range", [
            self.c64(1, "one"), b.op("Add", [self.max_length, self.c64(1, "one")]),
            self.c64(1, "one")]))

        body = self.new_body()
        index, cond_in = b.name("index"), b.name("cond")
        names = [b.name(n) for n in ("tokens", "alive", "history", "fin_scores", "fin_seqs",
                                     "done", "gen_len")]
        tokens, alive, history, fin_scores, fin_seqs, done, _ = names
        pasts = [b.name("past") for _ in range(n_pasts)]
        grams, recent = b.name("grams"), b.name("recent")
        live, row_map = b.name("live"), b.name("row_map")
        row_tensors = [b.name("row_memory") for _ in row_tensors0]
        step_tokens = self.gather_rows(body, tokens, live, "live_tokens")
        logits, lse, presents = self.step(body, step_tokens, index, pasts,
                                          *self.row_memory(row_tensors))
        top_logits, top_ids = self.constrained_top(body, logits, index, grams, recent, m_1d,
                                                   live)
        gains = body.op("Sub", [self.to(body, top_logits, T.DOUBLE),
                                self.unsqueeze(body, self.to(body, lse, T.DOUBLE), [1])])
        gains, top_ids = (self.gather_rows(body, x, row_map, "all_rows") for x in (gains, top_ids))
        cand = body.op("Add", [self.unsqueeze(body, alive, [2]),
                               body.op("Reshape", [gains, b_k_m])], "cand")
        cand = body.op("Reshape", [cand, b_km], "cand_flat")
        top_scores, order = body.op("TopK", [cand, two_k_1d], "top_cand", outputs=2, axis=1)
        top_beam = body.op("Div", [order, m], "top_beam")
        top_token = body.op("GatherElements", [body.op("Reshape", [top_ids, b_km]), order],
                            "top_token", axis=1)
        is_eos = body.op("Equal", [top_token, self.c64(self.eos, "eos64")], "is_eos")

        gen_len = body.op("Add", [index, self.c64(1, "one")], "gen_len_out")
        penalty = body.op("Gather", [penalties, index], "penalty")  # penalty(gen_len)

        # Finished hypotheses: EOS candidates ranked below K, for sources still running.
        first_k = [self.slice(body, x, 0, k_1d, 1) for x in (top_scores, top_beam, is_eos)]
        k_scores, k_beam, k_eos = first_k
        new_eos = body.op("And", [body.op("And", [k_eos, _finite(body, k_scores)]),
                                  self.unsqueeze(body, body.op("Not", [done]), [1])], "new_eos")
        minus_inf = g.const(np.float64(-np.inf), "minus_inf_d")
        hyp_scores = body.op("Where", [new_eos, body.op("Div", [k_scores, penalty]),
                                       minus_inf], "hyp_scores")
        at_index = body.op("Equal", [positions, index], "at_index")  # (Tmax,)
        hyp_seqs = body.op("Where", [at_index, g.const(np.int32(self.eos), "eos"),
                                     self.gather_beams(body, history, k_beam, bkt)],
                            "hyp_seqs")
        merged = body.op("Concat", [fin_scores, hyp_scores], axis=1)
        fin_scores_out, kept = body.op("TopK", [merged, k_1d], "finished", outputs=2, axis=1)
        fin_seqs_out = self.gather_beams(
            body, body.op("Concat", [fin_seqs, hyp_seqs], axis=1), kept, bkt, "fin_seqs_out")
        n_finished = body.op("ReduceSum", [self.to(body, _finite(body, fin_scores_out),
                                                   T.INT64), self.c64([1], "axis")],
                             keepdims=0)
        worst = self.squeeze(body, self.slice(body, fin_scores_out, -1, _BIG, 1), [1], "worst")

        # New alive beams: the first K non-EOS candidates.
        not_eos = self.to(body, body.op("Not", [is_eos]), T.FLOAT)
        _, pick = body.op("TopK", [not_eos, k_1d], "pick", outputs=2, axis=1)
        parent_beam = body.op("GatherElements", [top_beam, pick], "parent_beam", axis=1)
        new_tokens = self.to(body, body.op("GatherElements", [top_token, pick], axis=1),
                             T.INT32, "new_tokens")
        alive_out = body.op("GatherElements", [top_scores, pick], "alive_out", axis=1)
        history_out = body.op("Where", [at_index, self.unsqueeze(body, new_tokens, [2]),
                                        self.gather_beams(body, history, parent_beam, bkt)],
                              "history_out")

        # Hugging Face's stopping rule, against the best alive beam at the current length.
        full = body.op("And", [body.op("Not", [done]),
                               body.op("GreaterOrEqual", [n_finished, k])], "full")
        best_alive = body.op("Div", [body.op("ReduceMax", [alive_out], axes=[1], keepdims=0),
                                     penalty])
        done_out = body.op("Or", [done, body.op("And", [
            full, body.op("GreaterOrEqual", [worst, best_alive])])], "done_out")
        fin_scores_out, fin_seqs_out, done_out = self.end_at_limits(
            body, gen_len, penalty, alive_out, history_out, fin_scores_out, fin_seqs_out,
            done_out, k_1d, bkt)
        parents = body.op("Reshape", [body.op("Add", [source_base, parent_beam]),
                                      self.c64([-1], "flat")], "parents")
        def done_rows(b, done):  # (batch,) -> (rows,)
            return b.op("Reshape", [b.op("Expand", [self.unsqueeze(b, done, [1]), bk]),
                                    self.c64([-1], "flat")], "done_rows")

        # Each next row's cache is its parent's, at the parent's place among the live rows.
        cache_rows = self.gather_rows(body, row_map, self.gather_rows(body, parents, live),
                                      "cache_rows")
        carried = [body.op("Reshape", [new_tokens, self.c64([-1], "flat")], "tokens_out"),
                   alive_out, history_out, fin_scores_out, fin_seqs_out, done_out, gen_len]
        carried += [self.gather_rows(body, x, cache_rows) for x in presents]
        carried += list(self.remembered(body, grams, recent, carried[0], parents))
        types = [T.INT32, T.DOUBLE, T.INT32, T.DOUBLE, T.INT32, T.BOOL, T.INT64]
        types += [T.FLOAT] * n_pasts + [T.INT32, T.INT32]
        shapes = [["rows"], ["batch", "k"], ["batch", "k", "max_length"], ["batch", "k"],
                  ["batch", "k", "max_length"], ["batch"], []] + [self.cache_shape] * n_pasts
        shapes += [None, None]
        in_names = names + pasts + [grams, recent]
        out = self.segments(b, "beam", body, index, cond_in, in_names, types, shapes, carried,
                            carried0, done_rows(body, done_out), done_rows, live, row_map,
                            row_tensors, live0, row_tensors0, row_types, row_shapes, 7, 6, 5)
        _, alive, history, fin_scores, fin_seqs, done, gen_len = out[:7]

        # Sources that ran out of length: their alive beams compete as (EOS-less) hypotheses.
        penalty = self.penalty(b, gen_len)
        still = b.op("And", [_finite(b, alive), self.unsqueeze(b, b.op("Not", [done]), [1])])
        alive_hyps = b.op("Where", [still, b.op("Div", [alive, penalty]),
                                    g.const(np.float64(-np.inf), "minus_inf_d")])
        scores = b.op("Concat", [fin_scores, alive_hyps], "all_scores", axis=1)
        best = b.op("ArgMax", [scores], "best", axis=1, keepdims=1)
        best_score = b.op("GatherElements", [scores, best], "best_score", axis=1)
        seqs = b.op("Concat", [fin_seqs, history], "all_seqs", axis=1)
        best_seq = self.squeeze(b, self.gather_beams(b, seqs, best), [1])
        # Unreachable unless every candidate was -inf: the first beam as it is.
        first_beam = self.squeeze(b, self.slice(b, history, 0, 1, 1), [1])
        seq = b.op("Where", [_finite(b, best_score), best_seq, first_beam], "best_tokens")
        tokens_out = self.slice(b, seq, 0, self.unsqueeze(b, gen_len, [0]), 1, "tokens_bt")
        scores_out = self.to(b, self.squeeze(b, best_score, [1]), T.FLOAT, "scores_f")
        return _branch(b, "beam", [(tokens_out, T.INT32), (scores_out, T.FLOAT)])

    def end_at_limits(self, body, gen_len, penalty, alive, history, fin_scores, fin_seqs,
                      done, k_1d, bkt):
        """Sources still running whose own limit (row_max_length) is this step's length end
        here, as the loop's end ends the others: their alive beams (EOS-less) join their
        finished hypotheses, which keep the best K (ties to the finished ones, then the
        lower beam), and they are done. -> (fin_scores, fin_seqs, done). In an If, so that
        a step where no source ends runs three Identity nodes."""
        T, g = self.T, self.g
        ending = body.op("And", [body.op("Not", [done]),
                                 body.op("Equal", [self.row_max_length, gen_len])], "ending")
        any_ending = self.to(body, body.op("ReduceMax", [self.to(body, ending, T.INT32)],
                                           keepdims=0), T.BOOL, "any_ending")
        then = body.subgraph()
        joins = then.op("And", [self.unsqueeze(then, ending, [1]), _finite(then, alive)])
        hyps = then.op("Where", [joins, then.op("Div", [alive, penalty]),
                                 g.const(np.float64(-np.inf), "minus_inf_d")], "limit_hyps")
        scores, kept = then.op("TopK", [then.op("Concat", [fin_scores, hyps], axis=1), k_1d],
                               "limit_finished", outputs=2, axis=1)
        seqs = self.gather_beams(then, then.op("Concat", [fin_seqs, history], axis=1), kept,
                                 bkt, "limit_seqs")
        then_graph = _branch(then, "end_at_limit", [
            (scores, T.DOUBLE), (seqs, T.INT32), (then.op("Or", [done, ending]), T.BOOL)])
        other = body.subgraph()
        other_graph = _branch(other, "no_limit_reached",
                              [(fin_scores, T.DOUBLE), (fin_seqs, T.INT32), (done, T.BOOL)])
        return body.op("If", [any_ending], "limits_reached", outputs=3,
                       then_branch=then_graph, else_branch=other_graph)

    def gather_beams(self, b, x, beams, shape=None, hint="gather_beams"):
        """x (B,K',T) and beams (B,K) int64 -> x[b, beams[b, k], :] (B,K,T); `shape` is
        (B,K,T) when the caller has it."""
        if shape is None:
            shape = b.op("Concat", [b.op("Shape", [beams]), b.op("Shape", [x], start=2)],
                         axis=0)
        index = b.op("Expand", [self.unsqueeze(b, beams, [2]), shape])
        return b.op("GatherElements", [x, index], hint, axis=1)

    def penalty(self, b, length):
        """GNMT length penalty ((5 + length) / 6) ** alpha, float64 (decoding.length_penalty)."""
        base = b.op("Div", [b.op("Add", [self.g.const(np.float64(5), "five_d"),
                                         self.to(b, length, self.T.DOUBLE)]),
                            self.g.const(np.float64(6), "six_d")])
        return b.op("Pow", [base, "alpha"], "penalty")

    # -- the rows a step computes ----------------------------------------------------------------

    def live_state(self, b, rows, memory, cross_bias):
        """The loop state of the rows that still run, before the first step (all `rows` (1,)
        of them): -> ([live, row_map], the step's per-row inputs [cross keys..., cross
        values..., cross_bias, copy_source if any], their types and shapes). `live` (n,)
        int64 lists the rows a step computes, in order; `row_map` (rows,) int64 is each
        row's place among them (0 for a row that ended, whose values the search ignores)."""
        T = self.T
        every = b.op("Range", [self.c64(0, "zero"), self.squeeze(b, rows, [0]),
                               self.c64(1, "one")], "all_rows")
        keys, values, copy_source = memory
        tensors = [*keys, *values, cross_bias]
        memory_shape = ["live", self.heads, "source_length", self.head_dim]
        shapes = [memory_shape] * (2 * self.layers) + [["live", 1, 1, "source_length"]]
        types = [T.FLOAT] * len(tensors)
        if copy_source is not None:
            tensors.append(copy_source)
            types.append(T.INT32)
            shapes.append(["live", "source_length"])
        return [every, every], tensors, types, shapes

    def row_memory(self, tensors):
        """The step's per-row inputs (`live_state`'s order) -> step()'s (cross_keys,
        cross_values, copy_source, cross_bias)."""
        n = self.layers
        copy_source = tensors[2 * n + 1] if len(tensors) > 2 * n + 1 else None
        return tensors[:n], tensors[n:2 * n], copy_source, tensors[2 * n]

    def segments(self, b, name, body, index, cond_in, state, types, shapes, state_out,
                 state0, done_rows, rows_done, live, row_map, row_tensors, live0, row_tensors0,
                 row_types, row_shapes, first_past, gen_len_at, done_at):
        """The search's loop as loops of steps over a fixed set of live rows: -> the final
        values of `state`.

        A step computes only the rows still running (`live`, with `row_map` and the per-row
        `row_tensors`, which the step's nodes in `body` read from the enclosing loop), so a
        source that ended stops costing decoder work while the others run on. The inner loop
        runs steps until a row ends this step (`done_rows` (rows,) in `body`, true for every
        row that ended): it reads the live rows' memory in place. The outer loop then keeps
        the rows still running (the caches from `first_past` on, and the memory) and runs the
        next inner loop, until every row ended. The step index is the outer loop's count of
        steps run (`state`'s `gen_len_at`) plus the inner iteration; `rows_done(b,
        state[done_at])` gives the (rows,) ended flags in the outer body."""
        from onnx import helper

        T, g = self.T, self.g
        n_pasts = 2 * self.layers
        start, iteration, n_live = b.name("start"), b.name("iteration"), b.name("n_live")
        body.nodes.insert(0, helper.make_node("Add", [iteration, start], [index], name=index))
        count = body.op("ReduceSum", [self.to(body, body.op("Not", [done_rows]), T.INT64)],
                        "live_count", keepdims=0)
        cond_out = body.op("Not", [body.op("Less", [count, n_live])], "none_ended")
        inner = _body_graph(body, name + "_step", iteration, cond_in, state, types, shapes,
                            cond_out, state_out, [])

        outer = b.subgraph()
        outer_cond = b.name("cond")
        outer_state = [b.name("state") for _ in state]
        outer.output("Squeeze", [outer.op("Shape", [live]), self.c64([0], "axes_0")], n_live)
        outer.output("Identity", [outer_state[gen_len_at]], start)
        trips = outer.op("Sub", [self.max_length, start], "steps_left")
        final = outer.op("Loop", [trips, g.const(True, "true"), *outer_state], name + "_steps",
                         outputs=len(state), body=inner)
        still = outer.op("Not", [rows_done(outer, final[done_at])], "still_running")
        live_out = outer.op("Reshape", [outer.op("NonZero", [still]), self.c64([-1], "flat")],
                            "live_out")
        places = self.gather_rows(outer, row_map, live_out, "live_places")
        remaining = outer.op("ReduceSum", [self.to(outer, still, T.INT64)], keepdims=0)
        order = outer.op("Range", [self.c64(0, "zero"), remaining, self.c64(1, "one")])
        zeros = outer.op("ConstantOfShape", [outer.op("Shape", [row_map])],
                         value=_scalar_tensor(np.int64(0)))
        row_map_out = outer.op("ScatterElements", [zeros, live_out, order], "row_map_out",
                               axis=0)
        kept = list(final)
        for i in range(first_past, first_past + n_pasts):
            kept[i] = self.gather_rows(outer, final[i], places, "kept_rows")
        kept += [live_out, row_map_out]
        kept += [self.gather_rows(outer, x, places, "kept_rows") for x in row_tensors]
        outer_cond_out = outer.op("Greater", [remaining, self.c64(0, "zero")], "any_running")
        outer_graph = _body_graph(outer, name + "_segment", b.name("segment"), outer_cond,
                                  outer_state + [live, row_map] + row_tensors,
                                  types + [T.INT64, T.INT64] + row_types,
                                  shapes + [["live"], ["rows"]] + row_shapes, outer_cond_out,
                                  kept, [], own_weights=False)
        carried0 = list(state0) + live0 + row_tensors0
        return b.op("Loop", [self.max_length, g.const(True, "true"), *carried0],
                    name + "_loop", outputs=len(carried0), body=outer_graph)

    # -- the main graph --------------------------------------------------------------------------

    def empty_cache(self, b, rows):
        """(rows, H, 0, dh) float32: the cache before the first step."""
        shape = b.op("Concat", [rows, self.c64([self.heads, 0, self.head_dim], "empty_shape")],
                     axis=0)
        return b.op("ConstantOfShape", [shape], "empty_cache",
                    value=_scalar_tensor(np.float32(0)))

    def new_body(self) -> GraphBuilder:
        """A loop body's graph: its own weights (onnxruntime prepacks the weights of a
        MatMul or Gemm only when they are initializers of the node's own graph: read from the
        outer scope, the step measured 1.6x slower), the main graph's name counter."""
        body = GraphBuilder(share_constants=True)
        body._count = self.g._count
        return body

    def constrained_top(self, body, logits, index, grams, recent, k, live):
        """The k best tokens of each row of the step's logits (the rows `live` names) under
        the constraints:
        (values (n,k), ids (n,k) int64), in TopK's order (best first, ties to the lower id)
        except that a banned EOS may keep its place at -inf. The search only ranks these
        further (greedy takes the best of two, beam search ranks every beam's candidates
        together, ties to the lower position), and k covers what it needs with EOS banned,
        so where EOS sits at -inf changes nothing.

        One If on the input picks how. With n-gram blocking, TopK(k) over `constrain`'s
        logits. Without it, min_length bans EOS alone: TopK(k) over the logits as they are,
        then EOS set to -inf while index < min_length, which is (n,k) work where banning EOS
        in the logits copies all (n,V) of them. Either branch hands on only the small top-k
        tensors: in a loop body an If whose output is the (n,V) logits, or one nested in
        another, cost more than the nodes it skipped."""
        T = self.T
        ngram = body.subgraph()
        grams, recent = (self.gather_rows(ngram, x, live, "live_ngrams") for x in (grams, recent))
        ngram_top = ngram.op("TopK", [
            self.constrain(ngram, logits, index, self.min_length, grams, recent), k],
            "ngram_top", outputs=2, axis=1)
        ngram_graph = _branch(ngram, "ngram_constraint",
                              list(zip(ngram_top, (T.FLOAT, T.INT64), strict=True)))
        plain = body.subgraph()
        values, ids = plain.op("TopK", [logits, k], "row_top", outputs=2, axis=1)
        early = plain.op("Less", [index, self.min_length], "before_min_length")
        banned = plain.op("And", [plain.op("Equal", [ids, self.c64(self.eos, "eos64")]), early],
                          "eos_banned")
        values = plain.op("Where", [banned, self.g.const(np.float32(-np.inf), "minus_inf_f"),
                                    values], "eos_at_minus_inf")
        min_length_graph = _branch(plain, "min_length_constraint",
                                   [(values, T.FLOAT), (ids, T.INT64)])
        return body.op("If", [self.has_ngram], "constrained_top", outputs=2,
                       then_branch=ngram_graph, else_branch=min_length_graph)

    def remembered(self, body, grams, recent, chosen, parents=None):
        """`remember` when n-gram blocking is on (each row's state first taken from the row
        `parents` names, where given: beam search), else the state as it is (without
        n-grams every row's state is the same, so no row needs its parent's)."""
        T = self.T
        then = body.subgraph()
        state = (grams, recent)
        if parents is not None:
            state = [self.gather_rows(then, x, parents) for x in state]
        then_graph = _branch(then, "remember", [
            (x, T.INT32) for x in self.remember(then, *state, chosen)])
        other = body.subgraph()
        other_graph = _branch(other, "keep", [(grams, T.INT32), (recent, T.INT32)])
        return body.op("If", [self.has_ngram], "ngram_state", outputs=2,
                       then_branch=then_graph, else_branch=other_graph)

    def build(self, encoder):
        from onnx import helper

        T, g = self.T, self.g
        memory_outputs = _inline_encoder(g, encoder)
        keys = [memory_outputs[n] for n in memory_names(self.layers)[0::2]]
        values = [memory_outputs[n] for n in memory_names(self.layers)[1::2]]
        zero, masked = g.const(np.float32(0.0), "zero_f"), g.const(np.float32(MASKED_LOGIT),
                                                                   "masked")
        cross_bias = self.unsqueeze(g, g.op("Where", [memory_outputs["memory_mask"], zero,
                                                      masked]), [1, 2], "cross_bias")
        batch = g.op("Shape", ["source_ids"], "batch", end=1)
        # A limit past the model's positions is capped there, as every tool caps it: without
        # the cap a direct call would fail inside onnxruntime on the positions' Gather.
        cap = self.c64(self.model.config.max_target_length, "max_target_length")
        self.max_length = g.op("Min", [self.to(g, "max_length", T.INT64, "max_length64"), cap],
                               "max_length_capped")
        self.row_max_length = g.op("Min", [self.to(g, "row_max_length", T.INT64,
                                                   "row_max_length64"), cap],
                                   "row_max_length_capped")
        self.beam_size = "beam_size"
        self.ngram_size = self.to(g, "no_repeat_ngram_size", T.INT64, "ngram_size")
        self.min_length = self.to(g, "min_length", T.INT64, "min_length64")
        zero = self.c64(0, "zero")
        self.has_ngram = g.op("Greater", [self.ngram_size, zero], "has_ngram")
        copy_source = (memory_outputs[COPY_SOURCE] if self.model.config.copy_attention
                       else None)
        beam = self.beam((keys, values, copy_source), cross_bias, batch)
        greedy = self.greedy((keys, values, copy_source), cross_bias, batch)
        is_beam = g.op("Greater", ["beam_size", g.const(np.int32(1), "one_i32")], "is_beam")
        g.nodes.append(helper.make_node("If", [is_beam], list(OUTPUTS), name="search",
                                   then_branch=beam, else_branch=greedy))
        inputs = [_info("source_ids", T.INT32, ["batch", "source_length"]),
                  _info("max_length", T.INT32, []),
                  _info("row_max_length", T.INT32, ["batch"]), _info("beam_size", T.INT32, []),
                  _info("alpha", T.DOUBLE, []), _info("no_repeat_ngram_size", T.INT32, []),
                  _info("min_length", T.INT32, [])]
        outputs = [_info("tokens", T.INT32, ["batch", "steps"]),
                   _info("scores", T.FLOAT, ["batch"])]
        graph = helper.make_graph(g.nodes, "search", inputs, outputs, g.initializers)
        opsets = {o.domain: o.version for o in encoder.opset_import}
        opsets[""] = max(opsets.get("", ONNX_OPSET), ONNX_OPSET)
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                        for d, v in sorted(opsets.items())],
                                  producer_name="keras-transformer")
        proto.ir_version = 8
        return proto


def _scalar_tensor(value: np.ndarray):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(value).reshape(1))


def _finite(b, x):
    """Not IsInf (the scores hold no NaN)."""
    return b.op("Not", [b.op("IsInf", [x])], "finite")


def _body_graph(body, name, index, cond_in, in_names, types, shapes, cond_out, carried,
                scans, own_weights=True):
    """A Loop body: (iteration, condition, carried...) -> (condition, carried..., scans...).
    The carried values' shapes (symbolic dimensions where they vary) let onnxruntime's
    fusions (MatMul + Add into Gemm, among others) match inside the body as they do in a
    flat graph: they need the rank of their inputs."""
    from onnx import TensorProto, helper

    def out_shape(shape):  # the cache grows by one position per step, the live rows shrink
        renamed = {"t": "t_next", "live": "live_next"}
        return None if shape is None else [renamed.get(d, d) for d in shape]

    inputs = [_info(index, TensorProto.INT64, []), _info(cond_in, TensorProto.BOOL, [])]
    inputs += [_info(n, t, shape) for n, t, shape in zip(in_names, types, shapes, strict=True)]
    outputs = [_info(cond_out, TensorProto.BOOL, [])]
    outputs += [_info(n, t, out_shape(shape))
                for n, t, shape in zip(carried, types, shapes, strict=True)]
    outputs += [_info(n, t, shape) for n, t, shape in scans]
    return helper.make_graph(body.nodes, name, inputs, outputs,
                             body.initializers if own_weights else [])


def _branch(b, name, outputs):
    """An If branch of `b`'s nodes whose outputs are [(value, elem type)]."""
    from onnx import helper

    infos = []
    for value, elem_type in outputs:
        out = b.name(name + "_out")
        b.output("Identity", [value], out)
        infos.append(_info(out, elem_type))
    return helper.make_graph(b.nodes, name, [], infos)


def _inline_encoder(g: GraphBuilder, encoder) -> dict[str, str]:
    """The encoder graph's nodes and weights into `g`, every name prefixed except its input
    source_ids; -> {encoder output name: its name in g}."""
    from onnx import helper

    graph = encoder.graph
    if any(a.type in (a.GRAPH, a.GRAPHS) for n in graph.node for a in n.attribute):
        raise ValueError("the encoder graph holds a subgraph; search.onnx inlines flat graphs")

    def rename(name):
        return name if name in ("", "source_ids") else "encoder/" + name

    for init in graph.initializer:
        copy = type(init)()
        copy.CopyFrom(init)
        copy.name = rename(init.name)
        g.initializers.append(copy)
    for node in graph.node:
        copy = helper.make_node(node.op_type, [rename(n) for n in node.input],
                                [rename(n) for n in node.output], name=rename(node.name),
                                domain=node.domain)
        copy.attribute.extend(node.attribute)
        g.nodes.append(copy)
    return {o.name: rename(o.name) for o in graph.output}


def build_search(model: Transformer, encoder):
    """A checked onnx.ModelProto of search.onnx (module docstring) from a seq2seq `model` and
    its encoder graph (an onnx.ModelProto with standard operators: the export's encoder
    before onnxruntime's fusions)."""
    import onnx

    proto = _Builder(model).build(encoder)
    onnx.checker.check_model(proto)
    return proto
