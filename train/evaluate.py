"""python -m train.evaluate: translate a file with a trained run, score it with sacreBLEU
(BLEU and chrF, with signatures), and draw cross-attention heatmaps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf
from tqdm import tqdm

from keras_transformer.text.lines import read_lines
from keras_transformer.translator import translate
from train.scoring import bleu_chrf, fitting_mask
from train.tokenizers import load_run_tokenizers


def cross_attention(model, source_ids: np.ndarray, output_ids: list[int]) -> np.ndarray:
    """Teacher-forced decoder weights for one translation: (layers, heads, T, S) float32.

    Row t is the attention the decoder paid to each source token when it produced output
    token t (output_ids ends with EOS, so the last row is the one that stopped).
    """
    target_in = np.array([[model.config.bos_id, *output_ids[:-1]]], np.int32)
    memory, mask = model.encode(tf.constant(source_ids[None, :], tf.int32), training=False)
    _, weights = model.decode(tf.constant(target_in), memory, mask, training=False,
                              return_attention_scores=True)
    return np.stack([np.asarray(w, np.float32)[0] for w in weights])


def plot_attention(weights: np.ndarray, source_pieces: list[str], target_pieces: list[str],
                   path: Path, title: str) -> None:
    """One heatmap per decoder layer (heads averaged): target tokens down, source across."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    layers = weights.shape[0]
    width = max(4.0, 0.35 * len(source_pieces) + 1.5)
    height = max(3.0, 0.3 * len(target_pieces) + 1.5)
    figure, axes = plt.subplots(1, layers, figsize=(width * layers, height), squeeze=False)
    for layer, axis in enumerate(axes[0]):
        image = axis.imshow(weights[layer].mean(axis=0), cmap="viridis", vmin=0.0, vmax=1.0,
                            aspect="auto")
        axis.set_xticks(range(len(source_pieces)), source_pieces, rotation=90, fontsize=8)
        axis.set_yticks(range(len(target_pieces)), target_pieces, fontsize=8)
        axis.set_xlabel("source")
        axis.set_ylabel("output")
        axis.set_title(f"decoder layer {layer + 1}, mean over heads", fontsize=9)
        figure.colorbar(image, ax=axis, fraction=0.04)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def pieces(tokenizer, ids: list[int]) -> list[str]:
    """Ids -> SentencePiece pieces, for axis labels."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=tokenizer.model_bytes)
    return [processor.id_to_piece(int(i)) for i in ids]


def write_attention_plots(model, source_tok, target_tok, sentences: list[str], out_dir: Path,
                          *, beam_size: int, alpha: float,
                          line_numbers: list[int] | None = None) -> list[Path]:
    """PNG heatmaps of the cross-attention for each sentence's own translation, named
    attention_<line>.png by `line_numbers` (1-based; default 1, 2, ...)."""
    from keras_transformer.text.sources import encode_sources
    from keras_transformer.translator import search_ids

    out_dir.mkdir(parents=True, exist_ok=True)
    c = model.config
    paths = []
    numbers = line_numbers or list(range(1, len(sentences) + 1))
    for number, sentence, ids in zip(numbers, sentences, encode_sources(
            sentences, source_tok.encode, c.max_source_length, c.eos_id), strict=True):
        source = np.array(ids, np.int32)
        result = search_ids(model, source[None, :], beam_size=beam_size, alpha=alpha)
        output = result.to_lists(c.eos_id)[0]
        generated = [*output, c.eos_id]  # the row that produced EOS is shown too
        weights = cross_attention(model, source, generated)
        path = out_dir / f"attention_{number:03d}.png"
        plot_attention(weights, pieces(source_tok, ids), pieces(target_tok, generated),
                       path, f"{sentence}\n→ {target_tok.decode([output])[0]}")
        paths.append(path)
    return paths


def main(argv=None) -> int:
    import argparse
    import json
    import os
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m train.evaluate",
        description="Translate a file with a trained run, score it with sacreBLEU and chrF.")
    parser.add_argument("--run", required=True, help="run directory, e.g. runs/demo")
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--ref", help="reference translations, line-aligned with --src")
    parser.add_argument("--model", default="model.keras",
                        help="model file in the run directory (e.g. best.keras, average.keras)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hyp", help="where to write the translations "
                                      "(default: <run>/<src name>.hyp)")
    parser.add_argument("--plot-attention", type=int, default=0, metavar="K",
                        help="write cross-attention heatmaps of the first K scored sentences, "
                             "named by their --src line")
    args = parser.parse_args(argv)
    for flag, value in (("--beam", args.beam), ("--batch-size", args.batch_size)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    if not args.alpha >= 0:
        parser.error(f"--alpha must be >= 0, got {args.alpha}")
    if args.plot_attention < 0:
        parser.error(f"--plot-attention must be >= 0, got {args.plot_attention}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    import keras
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops a saved model may use)

    import keras_transformer.models.transformer  # noqa: F401  (registers it for load_model)

    run = Path(args.run)
    try:
        sources = read_lines(Path(args.src))
        references = read_lines(Path(args.ref)) if args.ref else None
        if references is not None and len(references) != len(sources):
            raise ValueError(f"{args.src} has {len(sources)} lines but {args.ref} has "
                             f"{len(references)}")
        model_path = run / args.model
        if not model_path.is_file():
            raise FileNotFoundError(f"model not found: {model_path}")
        model = keras.models.load_model(model_path, compile=False)
        source_tok, target_tok = load_run_tokenizers(run)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    lines = sources
    nonempty = [i for i, s in enumerate(lines) if s.strip()]
    fits = fitting_mask([lines[i] for i in nonempty], source_tok, model.config.max_source_length)
    scored = [i for i, keep in zip(nonempty, fits, strict=True) if keep]
    dropped, too_long = len(lines) - len(nonempty), len(nonempty) - len(scored)
    sources = [lines[i] for i in scored]
    if references is not None:
        references = [references[i] for i in scored]
    if dropped or too_long:
        print(f"skipped {dropped} empty and {too_long} over-long source lines (their lines "
              f"in the translations are empty)", file=sys.stderr)
    with tqdm(total=len(sources), desc="translating", unit="sent") as bar:
        hypotheses = translate(model, source_tok, target_tok, sources, beam_size=args.beam,
                               alpha=args.alpha, batch_size=args.batch_size, progress=bar)
    # Line i of the file translates line i of --src, as export.translate writes it.
    aligned = [""] * len(lines)
    for i, hypothesis in zip(scored, hypotheses, strict=True):
        aligned[i] = hypothesis
    hyp_path = Path(args.hyp) if args.hyp else run / (Path(args.src).name + ".hyp")
    hyp_path.write_text("\n".join(aligned) + "\n", encoding="utf-8")
    print(f"translations: {hyp_path}")
    if references is not None:
        scores = bleu_chrf(hypotheses, references)
        print(f"BLEU {scores['bleu']:.2f}  {scores['sacrebleu_signature']}")
        print(f"chrF {scores['chrf']:.2f}  {scores['chrf_signature']}")
        metrics_path = run / "metrics.json"
        metrics = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
        # Per model, then source file: best.keras and average.keras on one dev set both stay.
        evaluations = metrics.setdefault("evaluations", {}).setdefault(args.model, {})
        evaluations[Path(args.src).name] = {
            **scores, "model": args.model, "beam": args.beam, "alpha": args.alpha,
            "sentences": len(sources), "skipped": dropped + too_long,
            "hypotheses": str(hyp_path)}
        metrics_path.write_text(json.dumps(metrics, indent=2, ensure_ascii=False))
    if args.plot_attention:
        paths = write_attention_plots(model, source_tok, target_tok,
                                      sources[: args.plot_attention], run / "attention",
                                      beam_size=args.beam, alpha=args.alpha,
                                      line_numbers=[i + 1 for i in scored[: args.plot_attention]])
        print(f"attention heatmaps: {len(paths)} PNG files in {run / 'attention'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
