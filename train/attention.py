"""The attention weights of a trained model, as NumPy arrays, and the token pieces that label
them, and the cross-attention heatmaps of `train.evaluate --plot-attention`: what it and
`train.visualize` draw.

One teacher-forced forward pass (dropout off) gives every weight at once: the decoder row
that produced output token t is the row that sees BOS and the first t output tokens, which
is the state the search was in when it chose token t.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from keras_transformer.decoding import SearchSettings

from .plots import heatmap_grid

KINDS = ("encoder_self", "decoder_self", "cross")


def _stacked(per_layer) -> np.ndarray:
    """[per layer (B,H,Q,K)] -> (L,B,H,Q,K) float32."""
    return np.stack([np.asarray(w, np.float32) for w in per_layer])


def attention_maps(model, source_ids=None, target_in_ids=None) -> dict[str, np.ndarray]:
    """The attention weights of one forward pass, stacked over layers, float32:
    "encoder_self" (L,B,H,S,S), "decoder_self" (L,B,H,T,T) and "cross" (L,B,H,T,S); for a
    copy-attention model also "copy" (B,T,S), the copy distribution over the source, and
    "copy_gate" (B,T), the share g of copying at each output position.

    A `Transformer` takes source_ids (B,S), and target_in_ids (B,T) (BOS, then the tokens
    fed back) for the decoder's two kinds; a `TransformerClassifier` takes source_ids and
    gives encoder_self; a `TransformerLM` takes target_in_ids and gives decoder_self. Rows
    are queries, columns keys; a padding column gets weight 0 and every row sums to 1.
    """
    import tensorflow as tf

    from keras_transformer.layers.masks import padding_mask
    from keras_transformer.models.classifier import TransformerClassifier
    from keras_transformer.models.language_model import TransformerLM
    from keras_transformer.models.transformer import Transformer

    def ids(array, name):
        if array is None:
            raise ValueError(f"a {type(model).__name__} needs {name}")
        return tf.constant(np.asarray(array, np.int32))

    maps = {}
    if isinstance(model, Transformer):
        source = ids(source_ids, "source_ids")
        memory, mask, weights = model.encode(source, training=False,
                                             return_attention_scores=True)
        maps["encoder_self"] = _stacked(weights)
        if target_in_ids is not None:
            _, weights = model.decode(ids(target_in_ids, "target_in_ids"), memory, mask,
                                      training=False, return_attention_scores=True,
                                      source_ids=source)
            maps["decoder_self"] = _stacked(weights["self"])
            maps["cross"] = _stacked(weights["cross"])
            if "copy" in weights:  # copy attention: what is copied, and how much
                maps["copy"] = np.asarray(weights["copy"], np.float32)
                maps["copy_gate"] = np.asarray(weights["copy_gate"], np.float32)
    elif isinstance(model, TransformerClassifier):
        source = ids(source_ids, "source_ids")
        x = model.embedding(source, training=False)
        _, weights = model.encoder(x, padding_mask(source, model.config.pad_id),
                                   training=False, return_attention_scores=True)
        maps["encoder_self"] = _stacked(weights)
    elif isinstance(model, TransformerLM):
        x = model.embedding(ids(target_in_ids, "target_in_ids"), training=False)
        _, weights = model.decoder(x, training=False, return_attention_scores=True)
        maps["decoder_self"] = _stacked(weights["self"])
    else:
        raise TypeError(f"no attention weights for a {type(model).__name__}; expected a "
                        f"Transformer, TransformerClassifier or TransformerLM")
    return maps


def generated_tokens(result, eos_id: int) -> list[list[int]]:
    """A SearchResult's rows as the decoder produced them: up to and including EOS, or every
    token of a row that stopped at the maximum length without one."""
    rows = []
    for row in np.asarray(result.tokens).tolist():
        rows.append(row[: row.index(eos_id) + 1] if eos_id in row else row)
    return rows


def teacher_forced_input(bos_id: int, generated: list[int]) -> np.ndarray:
    """The decoder input that reproduces `generated` (generated_tokens' row): (1,T), BOS
    then every generated token but the last."""
    return np.array([[bos_id, *generated[:-1]]], np.int32)


def cross_attention(model, source_ids: np.ndarray, output_ids: list[int]) -> np.ndarray:
    """Teacher-forced decoder weights over the source for one translation: (layers, heads,
    T, S) float32. Row t is the attention the decoder paid to each source token when it
    produced output token t (output_ids is generated_tokens' row, so a last row that chose
    EOS is there too)."""
    maps = attention_maps(model, source_ids[None, :],
                          teacher_forced_input(model.config.bos_id, output_ids))
    return maps["cross"][:, 0]


def pieces(tokenizer, ids) -> list[str]:
    """Ids -> SentencePiece pieces, for axis labels."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=tokenizer.model_bytes)
    return [processor.id_to_piece(int(i)) for i in ids]


def plot_attention(weights: np.ndarray, source_pieces: list[str], target_pieces: list[str],
                   path: Path, title: str) -> None:
    """One heatmap per decoder layer (heads averaged): target tokens down, source across."""
    layers = weights.shape[0]
    heatmap_grid(weights.mean(axis=1), path, columns=layers,
                 titles=[f"decoder layer {layer + 1}, mean over heads" for layer in range(layers)],
                 row_labels=target_pieces, col_labels=source_pieces, xlabel="source",
                 ylabel="output", suptitle=title, dpi=110)


def write_attention_plots(model, source_tok, target_tok, sentences: list[str], out_dir: Path,
                          settings: SearchSettings,
                          line_numbers: list[int] | None = None) -> list[Path]:
    """PNG heatmaps of the cross-attention for each sentence's own output (by the search of
    `settings`; an over-long source is cut as the search cuts it), named attention_<line>.png
    by `line_numbers` (1-based; default 1, 2, ...)."""
    from keras_transformer.text.sources import encode_sources
    from keras_transformer.translator import keras_translator

    out_dir.mkdir(parents=True, exist_ok=True)
    c = model.config
    translator = keras_translator(model)
    paths = []
    numbers = line_numbers or list(range(1, len(sentences) + 1))
    for number, sentence, ids in zip(numbers, sentences, encode_sources(
            sentences, source_tok.encode, c.max_source_length, c.eos_id, truncate=True),
            strict=True):
        source = np.array(ids, np.int32)
        result = translator.search_ids(source[None, :], settings)
        output = result.to_lists(c.eos_id)[0]
        generated = generated_tokens(result, c.eos_id)[0]  # the row that chose EOS too
        weights = cross_attention(model, source, generated)
        path = out_dir / f"attention_{number:03d}.png"
        plot_attention(weights, pieces(source_tok, ids), pieces(target_tok, generated),
                       path, f"{sentence}\n→ {target_tok.decode([output])[0]}")
        paths.append(path)
    return paths
