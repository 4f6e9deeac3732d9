"""python -m train.visualize --run runs/demo --text "..." --out pictures/: the pictures of the
paper drawn from a trained run, for one sentence.

Writes into --out (built as a hidden sibling and swapped in, the files of the old --out that
this command did not make carried over; see keras_transformer.file_safety.staged_directory):

- positional_encoding.png, position_similarity.png: the sinusoid of section 3.5 (positions x
  dimensions) and the dot products PE(pos)·PE(pos + k) of its position vectors;
- encoder_self_layer<N>.png: the encoder's self-attention, one panel per head, source pieces
  on both axes;
- decoder_self_layer<N>.png: the decoder's masked self-attention of the run's own output,
  one panel per head (the causal triangle: every weight above the diagonal is 0);
- cross_layer<N>.png, cross_mean.png: the decoder's attention over the source, per head and
  averaged over heads;
- copy.png (a copy-attention model): the copy distribution over the source for each output
  piece, each labelled with its copy gate g, and the gates alone as one shaded row (See et
  al.'s picture: which words were copied, and from where);
- arrays.npz: the arrays behind the figures (named as the figures, see ARRAYS), and
  pictures.json: the sentence, its pieces and ids, the output, and what each file holds.

The run's model decides which pictures there are: a seq2seq `Transformer` (tasks
translation and summarization; a summarization article is cut to the model's
max_source_length) all of them, a `TransformerClassifier` the positional encoding and the
encoder's, a `TransformerLM` the positional encoding and the decoder's self-attention over
BOS and the text. The run is only read. --out is refused when it is the run directory, holds
it, or lies inside one of the run's own entries (an existing one, or one that `python -m
train` and `train.evaluate` write, train.run_directory.RUN_ENTRIES), and, when it already
holds files this command did not make (any besides an earlier pictures.json and the files it
lists), unless --overwrite is given; those files are kept either way.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from keras_transformer.command_line import (
    CommandError,
    add_debug_flag,
    command,
    entry_point,
    first_few,
    int_in,
    search_bounds,
)
from keras_transformer.decoding import SearchSettings

from .run_directory import RUN_ENTRIES

TOOL = "train.visualize"
MANIFEST = "pictures.json"
ARRAYS = "arrays.npz"
MAX_PE_POSITIONS, MAX_PE_DIMS = 1024, 4096
HEAD_COLUMNS = 4  # panels per row in a figure of heads
TITLE_CHARACTERS = 110  # a summarization article is shortened in the figures' titles


def positional_arrays(positions: int, dims: int) -> dict[str, np.ndarray]:
    """"pe" (positions, dims): the library's sinusoid; "pe_similarity" (positions,
    positions): entry [pos, pos + k] is PE(pos)·PE(pos + k), which for the sinusoid is
    sum_i cos(k / 10000^(2i/dims)) (even dims), a function of the offset k alone."""
    from keras_transformer.layers.embedding import sinusoidal_position_encoding

    table = sinusoidal_position_encoding(positions, dims)
    wide = table.astype(np.float64)
    return {"pe": table, "pe_similarity": (wide @ wide.T).astype(np.float32)}


def _made_here(directory: Path) -> bool:
    """Whether `directory` is an output of this command (its pictures.json says so)."""
    return _own_files(directory) is not None


def _own_files(directory: Path) -> set[str] | None:
    """The names of the files this command made in `directory` (pictures.json and what it
    lists), or None when it holds no pictures.json of this command."""
    try:
        record = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        if record["tool"] != TOOL:
            return None
        return {MANIFEST, ARRAYS, *(name for name in record.get("figures", ())
                                   if isinstance(name, str))}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def foreign_files(directory: Path) -> list[str]:
    """The entries of `directory` that this command did not make (none if it is missing)."""
    if not directory.is_dir():
        return []
    own = _own_files(directory) or set()
    return sorted(entry.name for entry in directory.iterdir() if entry.name not in own)


def check_output_directory(out: Path, run: Path, overwrite: bool) -> list[str]:
    """Refuse, before any work, an --out that would replace the run or any of its files, a
    file, and a directory holding files this command did not make (unless overwrite).
    -> those files, which the new --out keeps."""
    resolved, run_resolved = out.resolve(), run.resolve()
    if resolved == run_resolved or run_resolved.is_relative_to(resolved):
        raise CommandError(f"--out {out} would replace the run directory {run}; choose a "
                           f"directory beside it or a new one in it (e.g. {run / 'pictures'})")
    if resolved.is_relative_to(run_resolved):
        top = run_resolved / resolved.relative_to(run_resolved).parts[0]
        if top.name in RUN_ENTRIES or (top.exists() and not (top == resolved
                                                              and _made_here(top))):
            raise CommandError(f"--out {out} is inside {top.name}, one of the run's own "
                               f"entries, which are never replaced; choose a new name (e.g. "
                               f"{run / 'pictures'})")
    if out.exists() and not out.is_dir():
        raise CommandError(f"--out {out} is a file, not a directory")
    foreign = foreign_files(out)
    if foreign and not overwrite:
        raise CommandError(f"--out {out} already holds files this command did not make "
                           f"({first_few(foreign)}); pass --overwrite to write the pictures there anyway "
                           f"(those files are kept), or choose another --out")
    return foreign


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TITLE_CHARACTERS else text[: TITLE_CHARACTERS - 1] + "…"


def draw(arrays: dict[str, np.ndarray], labels: dict[str, list[str]], out: Path,
         caption: str, dpi: int = 80) -> list[str]:
    """Every figure the arrays allow, into `out`; -> the file names."""
    from .plots import heatmap_grid

    names = []

    def save(name, matrices, **options):
        heatmap_grid(matrices, out / name, dpi=dpi, **options)
        names.append(name)

    pe = arrays["pe"]
    positions, dims = pe.shape
    save("positional_encoding.png", pe[None], titles=[f"sinusoidal positional encoding, "
                                                      f"{positions} positions x {dims} dims"],
         xlabel="dimension (even: sin, odd: cos)", ylabel="position", cmap="RdBu_r",
         vmin=-1.0, vmax=1.0)
    save("position_similarity.png", arrays["pe_similarity"][None],
         titles=["PE(pos) · PE(pos + k)"], xlabel="pos + k", ylabel="pos", vmin=None,
         vmax=None, row_labels=[str(p) for p in range(positions)],
         col_labels=[str(p) for p in range(positions)])
    source, target_in, output = (labels.get(k) for k in ("source", "target_in", "output"))

    def heads(kind, rows, cols, xlabel, ylabel, what, **options):
        for layer, weights in enumerate(arrays.get(kind, ())):
            save(f"{kind}_layer{layer + 1}.png", weights,
                 titles=[f"head {h + 1}" for h in range(len(weights))], row_labels=rows,
                 col_labels=cols, xlabel=xlabel, ylabel=ylabel, columns=HEAD_COLUMNS,
                 suptitle=f"{what}, layer {layer + 1}\n{caption}", **options)

    heads("encoder_self", source, source, "key (source)", "query (source)",
          "encoder self-attention")
    heads("decoder_self", output, target_in, "key (decoder input)", "query (output token)",
          "decoder masked self-attention", grey_zeros_above_diagonal=True)
    heads("cross", output, source, "source", "output token", "cross-attention")
    if "word_attention" in arrays:
        layers, word = len(arrays["word_attention"]), labels["word"]
        save("word_attention.png", arrays["word_attention"], columns=layers,
             titles=[f"layer {layer + 1}" for layer in range(layers)],
             row_labels=[f"head {h + 1}" for h in range(arrays["word_attention"].shape[1])],
             col_labels=source, xlabel="key (source)", ylabel="head",
             suptitle=f"encoder self-attention of {word!r} over its sentence\n{caption}")
    if "copy" in arrays:
        gates = arrays["copy_gate"]
        save("copy.png", arrays["copy"][None], titles=["copy distribution (rows: g, piece)"],
             row_labels=[f"{g:.2f} {piece}" for g, piece in zip(gates, output, strict=True)],
             col_labels=source, xlabel="source", ylabel="copy gate g, output piece",
             suptitle=f"copy attention\n{caption}")
        save("copy_gate.png", gates[None, None], titles=["copy gate g per output piece"],
             row_labels=["g"], col_labels=output, xlabel="output piece", ylabel="",
             vmin=0.0, vmax=1.0, suptitle=f"share of each output piece copied\n{caption}")
    if "cross_mean" in arrays:
        layers = len(arrays["cross_mean"])
        save("cross_mean.png", arrays["cross_mean"], columns=layers,
             titles=[f"layer {layer + 1}, mean over heads" for layer in range(layers)],
             row_labels=output, col_labels=source, xlabel="source", ylabel="output token",
             suptitle=f"cross-attention averaged over heads\n{caption}")
    return names


def word_position(word: str, source_pieces: list[str]) -> int:
    """The 0-based position of --word among the source pieces: a 1-based number, or the first
    piece (with text) of the first word whose pieces spell it ("▁" starts a word)."""
    if word.isascii() and word.isdigit():  # str.isdigit is true of "²", which int() refuses
        position = int(word) - 1
        if not 0 <= position < len(source_pieces):
            raise CommandError(f"--word {word} is not a source position; the sentence has "
                               f"{len(source_pieces)} pieces (EOS included)")
        return position
    # Words as lists of (position, text) pieces: "▁" starts one, and EOS or another control
    # piece is one of its own. A word matches when its first pieces spell --word (so "it"
    # matches "▁it" followed by "."), and its first piece with text is the query.
    words: list[list[tuple[int, str]]] = []
    for position, piece in enumerate(source_pieces):
        special = piece.startswith("<") and piece.endswith(">")
        if piece.startswith("▁") or special or not words or words[-1][-1][1].startswith("<"):
            words.append([])
        words[-1].append((position, piece if special else piece.replace("▁", "")))
    for pieces_of_word in words:
        spelled = ""
        for _, text in pieces_of_word:
            spelled += text
            if spelled.casefold() == word.casefold():
                first = next((p for p, t in pieces_of_word if t), None)
                if first is not None:
                    return first
    raise CommandError(f"--word {word!r} is not a word of the sentence; its pieces are "
                       f"{' '.join(source_pieces)} (or give a 1-based position)")


def pictures(model, config, source_tok, target_tok, text: str, *, beam_size: int,
             pe_positions: int, pe_dims: int, word: str | None = None) -> tuple[dict, dict]:
    """The arrays (ARRAYS) and the record (pictures.json, without the file lists) of one
    sentence; with `word`, also that source token's encoder self-attention per layer and
    head (the seeds' "it" -> "animal" picture)."""
    import tensorflow as tf

    from keras_transformer.models.classifier import TransformerClassifier
    from keras_transformer.models.language_model import TransformerLM
    from keras_transformer.models.transformer import Transformer
    from keras_transformer.text.sources import encode_sources
    from keras_transformer.translator import keras_translator

    from .attention import attention_maps, generated_tokens, pieces, teacher_forced_input

    c = model.config
    arrays = positional_arrays(pe_positions, pe_dims or c.d_model)
    record = {"tool": TOOL, "task": config.task, "model_class": type(model).__name__,
              "text": text, "pe": {"positions": pe_positions, "dims": pe_dims or c.d_model}}
    if isinstance(model, TransformerLM):
        if word is not None:
            raise CommandError("--word draws an encoder's self-attention; a language model "
                               "has none (its decoder_self pictures show each token's)")
        ids = target_tok.encode([text])[0][: c.max_target_length - 1]
        target_in = np.array([[c.bos_id, *ids]], np.int32)
        maps = attention_maps(model, target_in_ids=target_in)
        arrays.update(decoder_self=maps["decoder_self"][:, 0], target_in_ids=target_in[0])
        record.update(target_in_ids=target_in[0].tolist(),
                      target_in_pieces=pieces(target_tok, target_in[0]))
        # The LM reads the text itself: row t is the query at input token t.
        record["output_pieces"] = record["target_in_pieces"]
        return arrays, record
    if not isinstance(model, Transformer | TransformerClassifier):
        raise CommandError(f"no pictures for a {type(model).__name__} model; expected a "
                           f"Transformer, TransformerClassifier or TransformerLM")
    # Summaries read the article's first pieces, as the task does; any other over-long
    # sentence is refused with the limit in the message.
    try:
        (ids,) = encode_sources([text], source_tok.encode, c.max_source_length, c.eos_id,
                                truncate=config.task == "summarization")
    except ValueError as err:  # about "sentence 1": here the sentence is --text
        raise CommandError(f"--text {str(err).removeprefix('sentence 1 ')}") from None
    source = np.array([ids], np.int32)
    record.update(source_ids=ids, source_pieces=pieces(source_tok, ids))
    arrays["source_ids"] = source[0]
    query = None if word is None else word_position(word, record["source_pieces"])
    if query is not None:
        record["word"] = {"position": query + 1, "piece": record["source_pieces"][query]}
    if isinstance(model, TransformerClassifier):
        probabilities = tf.nn.softmax(model(tf.constant(source), training=False))[0].numpy()
        record.update(predicted_class=int(np.argmax(probabilities)),
                      probabilities=[round(float(p), 6) for p in probabilities])
        arrays["encoder_self"] = attention_maps(model, source)["encoder_self"][:, 0]
        if query is not None:
            arrays["word_attention"] = arrays["encoder_self"][:, :, query, :]
        return arrays, record
    settings = SearchSettings.from_config(config.eval, beam_size=beam_size)
    result = keras_translator(model).search_ids(source, settings)
    output = result.to_lists(c.eos_id)[0]
    generated = generated_tokens(result, c.eos_id)[0]  # the row that chose EOS too
    target_in = teacher_forced_input(c.bos_id, generated)
    maps = attention_maps(model, source, target_in)
    copied = {kind: maps.pop(kind)[0] for kind in ("copy", "copy_gate") if kind in maps}
    arrays.update({kind: maps[kind][:, 0] for kind in maps}, **copied,
                  target_in_ids=target_in[0], output_ids=np.array(generated, np.int32))
    arrays["cross_mean"] = arrays["cross"].mean(axis=1)
    if query is not None:
        arrays["word_attention"] = arrays["encoder_self"][:, :, query, :]  # (layers, heads, S)
    record.update(output=target_tok.decode([output])[0], beam=beam_size, output_ids=generated,
                  output_pieces=pieces(target_tok, generated),
                  target_in_ids=target_in[0].tolist(),
                  target_in_pieces=pieces(target_tok, target_in[0]))
    return arrays, record


@entry_point
def main(argv) -> int:
    parser = argparse.ArgumentParser(
        prog=command("train.visualize"),
        description="Draw the positional encoding and the attention of a trained run for one "
                    "sentence (PNG files, the arrays behind them in arrays.npz, the tokens in "
                    "pictures.json). Exit codes: 0 done, 2 bad usage or input, 1 a failure "
                    "while working, 130 interrupted.")
    parser.add_argument("--run", required=True, help="run directory, e.g. runs/demo")
    parser.add_argument("--text", required=True,
                        help="the sentence to translate (or article to summarize, sentence to "
                             "classify)")
    parser.add_argument("--out", required=True, help="directory to write the pictures to")
    parser.add_argument("--model", default="model.keras",
                        help="model file in the run directory (e.g. best.keras)")
    parser.add_argument("--beam", type=int_in(*search_bounds("beam_size")), default=None,
                        help=f"beam size of the search, 1 to {search_bounds('beam_size')[1]} (default: the run's "
                             f"eval.beam_size)")
    parser.add_argument("--pe-positions", type=int_in(1, MAX_PE_POSITIONS), default=20,
                        help=f"positions in the positional-encoding pictures, 1 to "
                             f"{MAX_PE_POSITIONS} (default 20)")
    parser.add_argument("--pe-dims", type=int_in(0, MAX_PE_DIMS), default=128,
                        help=f"dimensions in the positional-encoding heatmap, 1 to "
                             f"{MAX_PE_DIMS}, or 0 for the model's d_model (default 128)")
    parser.add_argument("--dpi", type=int_in(30, 300), default=80,
                        help="resolution of the PNG files, 30 to 300 (default 80)")
    parser.add_argument("--word", default=None,
                        help="also draw one source token's self-attention over the sentence, "
                             "per layer and head (the seeds' 'it' -> 'animal' picture): a "
                             "word of --text (its first piece) or a 1-based position among "
                             "the source pieces")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into an --out directory that holds files this command "
                             "did not make (they are kept)")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    run, out = Path(args.run), Path(args.out)
    if not run.is_dir():
        raise FileNotFoundError(f"run directory not found: {run}")
    if not (run / "config.yaml").is_file():
        raise CommandError(f"{run} has no config.yaml; give a run directory written by "
                           f"{command('train')}")
    if Path(args.model).name != args.model:
        raise CommandError(f"--model {args.model!r} must be a file name in the run directory")
    if not args.text.strip():
        raise CommandError("--text is empty; give a sentence")
    if args.word is not None and not args.word.strip():
        raise CommandError("--word is empty; give a word of --text or a 1-based position")
    keep = check_output_directory(out, run, args.overwrite)

    import tensorflow_text  # noqa: F401  (registers the tokenizer ops a saved model may use)

    from keras_transformer.file_safety import atomic_write_text, staged_directory

    from .config import load_config
    from .run_model import load_run_model
    from .tokenizers import load_run_tokenizers

    config = load_config(run / "config.yaml")
    model = load_run_model(run / args.model)
    source_tok, target_tok = load_run_tokenizers(run)
    beam = args.beam or config.eval.beam_size
    arrays, record = pictures(model, config, source_tok, target_tok, args.text,
                              beam_size=beam, pe_positions=args.pe_positions,
                              pe_dims=args.pe_dims, word=args.word)
    caption = _short(args.text) + (f"  →  {_short(record['output'])}" if "output" in record
                                   else "")
    record.update(run=str(run), model=args.model)
    with staged_directory(out, keep) as staging:
        record["figures"] = draw(arrays, {"source": record.get("source_pieces"),
                                          "target_in": record.get("target_in_pieces"),
                                          "output": record.get("output_pieces"),
                                          "word": record.get("word", {}).get("piece")},
                                 staging, caption, args.dpi)
        np.savez(staging / ARRAYS, **arrays)
        record["arrays"] = {name: list(array.shape) for name, array in arrays.items()}
        atomic_write_text(staging / MANIFEST, json.dumps(record, indent=2, ensure_ascii=False))
    if "output" in record:
        print(f"output: {record['output']}")
    if "predicted_class" in record:
        print(f"class: {record['predicted_class']}")
    print(f"pictures: {len(record['figures'])} PNG files, {ARRAYS} and {MANIFEST} in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
