"""The SavedModel's `translate` signature: strings in, strings out, everything in the graph.

Tokenization and detokenization use tensorflow-text; the greedy loop is a tf.while_loop over
a fixed-size cache (keras_transformer.cache.tensors, written by Transformer.decode_step), with
the same choices as keras_transformer.decoding.greedy_search and the length rule of
keras_transformer.text.sources.default_max_length.
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from keras_transformer.cache.tensors import init_cache
from keras_transformer.text.sources import default_max_length


def _log_softmax64(logits):
    """float64 log-softmax written like decoding.log_softmax, so argmax ties break alike."""
    x = tf.cast(logits, tf.float64)
    shifted = x - tf.reduce_max(x, axis=-1, keepdims=True)
    return shifted - tf.math.log(tf.reduce_sum(tf.exp(shifted), axis=-1, keepdims=True))


def add_translate(module: tf.Module, source_tokenizer_path: Path, target_tokenizer_path: Path):
    """Attach tokenizers to `module`; -> concrete `translate`: sentences (B,) -> translations (B,)."""
    import tensorflow_text as tf_text

    model = module.model
    c = model.config
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
        cross_key_values, memory_mask = model.encode_for_decoding(source_ids)
        source_length = tf.shape(source_ids)[1]
        max_length = default_max_length(source_length, c.max_target_length, tf.minimum)
        cache = init_cache(c.num_decoder_layers, batch, c.num_heads, max_length, c.d_model)
        out = tf.fill([batch, max_length], c.pad_id)
        positions = tf.range(max_length)

        def body(t, tokens, finished, scores, out, cache):
            logits, cache = model.decode_step(tokens, cross_key_values, memory_mask, cache, t)
            candidates = scores[:, None] + _log_softmax64(logits)
            best = tf.argmax(candidates, axis=1, output_type=tf.int32)
            new_scores = tf.gather(candidates, best, axis=1, batch_dims=1)
            next_tokens = tf.where(finished, c.pad_id, best)
            scores = tf.where(finished, scores, new_scores)
            out = tf.where(tf.equal(positions, t)[None, :], next_tokens[:, None], out)
            finished = tf.logical_or(finished, tf.equal(next_tokens, c.eos_id))
            return t + 1, next_tokens, finished, scores, out, cache

        def running(t, tokens, finished, scores, out, cache):
            return tf.logical_and(t < max_length, tf.logical_not(tf.reduce_all(finished)))

        state = (tf.constant(0), tf.fill([batch], c.bos_id), tf.zeros([batch], tf.bool),
                 tf.zeros([batch], tf.float64), out, cache)
        _, _, _, _, out, _ = tf.while_loop(running, body, state)
        before_eos = tf.equal(tf.cumsum(tf.cast(tf.equal(out, c.eos_id), tf.int32), axis=1), 0)
        keep = before_eos & tf.not_equal(out, c.pad_id) & tf.not_equal(out, c.bos_id)
        text = module.target_tokenizer.detokenize(tf.ragged.boolean_mask(out, keep))
        return {"translations": tf.where(blank, tf.constant(""), text)}

    module.translate = translate
    return translate.get_concrete_function()
