"""The SavedModel's `translate` signature: strings in, strings out, everything in the graph.

Tokenization and detokenization use tensorflow-text. The search is the one the manifest's
`search` block records (the run's `eval` settings: beam_size, alpha, no_repeat_ngram_size,
min_length), baked in at export: `add_translate` takes them as a SearchSettings, and the
export passes the same settings it writes to the manifest, so TensorFlow Serving serves what
`export.translate` and the other runtimes compute. The search is a tf.while_loop over a
fixed-size cache (keras_transformer.cache.tensors, written by Transformer.decode_step) that
computes exactly what keras_transformer.decoding computes: `greedy_search` for beam_size 1,
else `beam_search` ("2K candidates", the GNMT length penalty, Hugging Face's stopping rule),
both with the constraints of decoding.constraints; export/onnx_search.py is the same search in
ONNX. The length rule is keras_transformer.text.sources.default_max_length of the request's
longest source (settings.max_length where it is set).

Choices made as the NumPy search makes them:

- Log-probabilities are ``logits - logsumexp(logits)``, the logsumexp in float32 as the Keras
  runtime computes it (keras_transformer.tf_backend), the difference and every score in
  float64. A copy-attention model's decode_step returns the mixture's log-probabilities,
  whose logsumexp is zero up to rounding: the same expression serves both models, as in the
  NumPy search.
- Ties: tf.math.top_k returns the lower index first, which is NumPy's order of (beam, rank in
  the beam, token) for the candidates, of (earlier, later) for the finished hypotheses and
  of the first K non-EOS candidates; greedy search takes tf.argmax of the raw logits (the
  lowest id, as np.argmax).
- The length penalties are a constant table computed by decoding.length_penalty at export,
  so a hypothesis' score is the same float64 division as NumPy's.
- Banned tokens are set to -inf after the log-normalizer is taken; a row left without a
  finite logit gets its EOS logit back (greedy search then takes EOS).

A request is searched as one batch (its sentences padded to the longest), as the Translator
searches a batch of up to 64 sentences. Blank sentences (empty or whitespace) give "" and are
done from the start, so they never keep the loop running.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_transformer.cache.tensors import init_cache
from keras_transformer.decoding import SearchSettings, length_penalty
from keras_transformer.text.sources import default_max_length


def _constrain(logits, history, t, settings: SearchSettings, eos_id: int):
    """decoding.constraints._constrain in the graph: logits (n,V) float32, history (n,L) the
    tokens each row generated (the first `t` count) -> (logits with the banned entries at
    -inf, the rows left without a finite entry, whose EOS logit is restored), or (logits,
    None) when no constraint is on."""
    n_gram, min_length = settings.no_repeat_ngram_size, settings.min_length
    if not (n_gram or min_length):
        return logits, None
    vocab = tf.shape(logits)[1]
    eos_column = tf.equal(tf.range(vocab), eos_id)[None, :]
    ban = tf.zeros_like(logits, tf.bool)
    if min_length:
        ban = tf.logical_and(eos_column, t < min_length)
        ban = tf.broadcast_to(ban, tf.shape(logits))
    if n_gram:
        ban = tf.logical_or(ban, _ngram_bans(history, t, n_gram, tf.shape(logits)))
    masked = tf.where(ban, tf.constant(-np.inf, logits.dtype), logits)
    dead = tf.equal(tf.reduce_max(masked, axis=1), -np.inf)
    return tf.where(tf.logical_and(dead[:, None], eos_column), logits, masked), dead


def _ngram_bans(history, t, n: int, shape):
    """(n,V) bool: the tokens that would complete an n-gram already in history[r, :t]
    (decoding.constraints._ngram_bans). An n-gram may start at s <= t - n; it matches when
    its first n - 1 tokens equal the row's last n - 1."""
    length = tf.shape(history)[1]
    padded = tf.pad(history, [[0, 0], [0, n]])  # so that every start has n tokens to read
    starts = tf.range(length)
    match = tf.broadcast_to(starts[None, :] <= t - n, tf.shape(history))
    for j in range(n - 1):
        suffix = tf.gather(history, tf.maximum(t - n + 1 + j, 0), axis=1)  # (rows,)
        match = tf.logical_and(match, tf.equal(padded[:, j: j + length], suffix[:, None]))
    banned = padded[:, n - 1: n - 1 + length]  # the token that would complete each n-gram
    rows = tf.broadcast_to(tf.range(tf.shape(history)[0])[:, None], tf.shape(history))
    counts = tf.scatter_nd(tf.stack([tf.reshape(rows, [-1]), tf.reshape(banned, [-1])], 1),
                           tf.reshape(tf.cast(match, tf.int32), [-1]), shape)
    return counts > 0


def _greedy(model, settings, memory, memory_mask, blank, max_length):
    """decoding.greedy_search -> (B, max_length) int32, PAD after EOS."""
    c = model.config
    batch = tf.shape(blank)[0]
    cache = init_cache(c.num_decoder_layers, batch, c.num_heads, max_length, c.d_model)
    positions = tf.range(max_length)

    def body(t, tokens, finished, out, cache):
        logits, cache = model.decode_step(tokens, memory, memory_mask, cache, t)
        logits, dead = _constrain(logits, out, t, settings, c.eos_id)
        best = tf.argmax(logits, axis=1, output_type=tf.int32)
        if dead is not None:
            best = tf.where(dead, c.eos_id, best)
        next_tokens = tf.where(finished, c.pad_id, best)
        out = tf.where(tf.equal(positions, t)[None, :], next_tokens[:, None], out)
        finished = tf.logical_or(finished, tf.equal(next_tokens, c.eos_id))
        return t + 1, next_tokens, finished, out, cache

    def running(t, tokens, finished, out, cache):
        return tf.logical_and(t < max_length, tf.logical_not(tf.reduce_all(finished)))

    state = (tf.constant(0), tf.fill([batch], c.bos_id), blank,
             tf.fill([batch, max_length], c.pad_id), cache)
    return tf.while_loop(running, body, state)[3]


def _beam(model, settings, memory, memory_mask, blank, max_length):
    """decoding.beam_search -> (B, max_length) int32: each source's best hypothesis, PAD
    after it. Rows are laid out b * K + k (source b, beam k)."""
    c = model.config
    k, vocab = settings.beam_size, c.target_vocab_size
    m = min(2 * k, vocab)  # a beam's candidates among its source's best 2K
    batch = tf.shape(blank)[0]
    memory = [tf.repeat(x, k, axis=0) for x in memory]
    memory_mask = tf.repeat(memory_mask, k, axis=0)
    cache = init_cache(c.num_decoder_layers, batch * k, c.num_heads, max_length, c.d_model)
    positions = tf.range(max_length)
    penalties = tf.constant(length_penalty(np.arange(c.max_target_length + 1),
                                           settings.alpha), tf.float64)
    minus_inf = tf.constant(-np.inf, tf.float64)
    source_base = tf.range(batch)[:, None] * k

    def body(t, tokens, alive, history, fin_scores, fin_seqs, done, cache):
        logits, cache = model.decode_step(tokens, memory, memory_mask, cache, t)
        lse = tf.cast(tf.reduce_logsumexp(logits, axis=-1), tf.float64)
        logits, _ = _constrain(logits, tf.reshape(history, [batch * k, max_length]), t,
                               settings, c.eos_id)
        row_logits, row_top = tf.math.top_k(logits, m)
        gains = tf.cast(row_logits, tf.float64) - lse[:, None]
        cand = tf.reshape(alive[:, :, None] + tf.reshape(gains, [batch, k, m]),
                          [batch, k * m])
        top_scores, order = tf.math.top_k(cand, 2 * k)
        top_beam = order // m
        top_token = tf.gather(tf.reshape(row_top, [batch, k * m]), order, batch_dims=1)
        is_eos = tf.equal(top_token, c.eos_id)
        penalty = penalties[t + 1]

        # Finished hypotheses: EOS candidates ranked below K, for sources still running.
        new_eos = is_eos[:, :k] & tf.math.is_finite(top_scores[:, :k]) & ~done[:, None]
        hyp_scores = tf.where(new_eos, top_scores[:, :k] / penalty, minus_inf)
        at_t = tf.equal(positions, t)[None, None, :]
        hyp_seqs = tf.where(at_t, c.eos_id, tf.gather(history, top_beam[:, :k], batch_dims=1))
        fin_scores, kept = tf.math.top_k(tf.concat([fin_scores, hyp_scores], 1), k)
        fin_seqs = tf.gather(tf.concat([fin_seqs, hyp_seqs], 1), kept, batch_dims=1)
        n_finished = tf.reduce_sum(tf.cast(tf.math.is_finite(fin_scores), tf.int32), 1)

        # New alive beams: the first K non-EOS candidates.
        _, pick = tf.math.top_k(tf.cast(~is_eos, tf.int32), k)
        parent_beam = tf.gather(top_beam, pick, batch_dims=1)
        new_tokens = tf.gather(top_token, pick, batch_dims=1)
        alive = tf.gather(top_scores, pick, batch_dims=1)
        history = tf.where(at_t, new_tokens[:, :, None],
                           tf.gather(history, parent_beam, batch_dims=1))

        # Hugging Face's stopping rule, against the best alive beam at the current length.
        full = ~done & (n_finished >= k)
        done = done | (full & (fin_scores[:, -1] >= tf.reduce_max(alive, 1) / penalty))
        parents = tf.reshape(source_base + parent_beam, [-1])
        cache = [tf.gather(x, parents) for x in cache]
        return (t + 1, tf.reshape(new_tokens, [-1]), alive, history, fin_scores, fin_seqs,
                done, cache)

    def running(t, tokens, alive, history, fin_scores, fin_seqs, done, cache):
        return tf.logical_and(t < max_length, tf.logical_not(tf.reduce_all(done)))

    first = tf.constant([0.0] + [-np.inf] * (k - 1), tf.float64)
    history = tf.fill([batch, k, max_length], c.pad_id)
    state = (tf.constant(0), tf.fill([batch * k], c.bos_id), tf.tile(first[None], [batch, 1]),
             history, tf.fill([batch, k], minus_inf), history, blank, cache)
    steps, _, alive, history, fin_scores, fin_seqs, done, _ = tf.while_loop(
        running, body, state)

    # Sources that ran out of length: their alive beams compete as (EOS-less) hypotheses,
    # after the finished ones.
    still = tf.math.is_finite(alive) & ~done[:, None]
    alive_hyps = tf.where(still, alive / penalties[steps], minus_inf)
    best_score, best = tf.math.top_k(tf.concat([fin_scores, alive_hyps], 1), 1)
    seqs = tf.gather(tf.concat([fin_seqs, history], 1), best[:, 0], batch_dims=1)
    # Unreachable unless every candidate was -inf: the first beam as it is.
    return tf.where(tf.math.is_finite(best_score), seqs, history[:, 0])


def search_tokens(model, settings: SearchSettings, source_ids, blank):
    """The search of `settings` over source_ids (B,S) (EOS-terminated, PAD-padded); rows
    where `blank` (B,) is true are done from the start and generate nothing -> (B, T) int32
    generated ids, PAD after a row's end (EOS included where it was produced)."""
    c = model.config
    memory, memory_mask = model.encode_for_decoding(source_ids)
    if settings.max_length is None:
        max_length = default_max_length(tf.shape(source_ids)[1], c.max_target_length,
                                        tf.minimum)
    else:
        max_length = tf.constant(settings.max_length)
    search = _greedy if settings.beam_size == 1 else _beam
    out = search(model, settings, memory, memory_mask, blank, max_length)
    return tf.where(blank[:, None], c.pad_id, out)


def add_translate(module: tf.Module, source_tokenizer_path: Path, target_tokenizer_path: Path,
                  settings: SearchSettings):
    """Attach tokenizers to `module`; -> concrete `translate`: sentences (B,) -> translations
    (B,), by the search `settings` describe (the manifest's `search` block)."""
    import tensorflow_text as tf_text

    model = module.model
    c = model.config
    if settings.max_length is not None and settings.max_length > c.max_target_length:
        raise ValueError(f"max_length={settings.max_length} is more than this model's "
                         f"max_target_length={c.max_target_length}")
    module.source_tokenizer = tf_text.SentencepieceTokenizer(
        model=Path(source_tokenizer_path).read_bytes(), out_type=tf.int32)
    module.target_tokenizer = (
        module.source_tokenizer if Path(target_tokenizer_path) == Path(source_tokenizer_path)
        else tf_text.SentencepieceTokenizer(model=Path(target_tokenizer_path).read_bytes(),
                                            out_type=tf.int32))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def translate(sentences):
        pieces = module.source_tokenizer.tokenize(sentences)[:, : c.max_source_length - 1]
        blank = tf.logical_or(tf.equal(tf.strings.strip(sentences), ""),
                              tf.equal(pieces.row_lengths(), 0))
        batch = tf.shape(sentences)[0]
        eos = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], c.eos_id))
        source_ids = tf.concat([pieces, eos], axis=1).to_tensor(default_value=c.pad_id)
        out = search_tokens(model, settings, source_ids, blank)
        # The Translator's decode: up to the first EOS, PAD and BOS left out.
        before_eos = tf.equal(tf.cumsum(tf.cast(tf.equal(out, c.eos_id), tf.int32), axis=1), 0)
        keep = before_eos & tf.not_equal(out, c.pad_id) & tf.not_equal(out, c.bos_id)
        text = module.target_tokenizer.detokenize(tf.ragged.boolean_mask(out, keep))
        return {"translations": tf.where(blank, tf.constant(""), text)}

    module.translate = translate
    return translate.get_concrete_function()
