"""Command line of `python -m export`.

Exit codes (keras_transformer.command_line): 0 exported; 2 bad input (a run that is missing or
damaged, an --out that is a file, is or contains the run, or holds files this tool did not
make; the message names the fix); 1 the conversion itself failed; 130 interrupted. In every
failure the previous export in --out is left as it was.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from keras_transformer.command_line import add_debug_flag, command, entry_point

from .formats import FORMATS, QUANTIZE


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=command("export"),
        description="Export a training run to SavedModel, ONNX and/or TFLite, with manifest.json.")
    parser.add_argument("--run", required=True, help="training run directory, e.g. runs/demo")
    parser.add_argument("--format", default="all", choices=(*FORMATS, "all"))
    parser.add_argument("--quantize", default="none", choices=QUANTIZE,
                        help="extra variants: fp16 and/or int8 TFLite; int8 also quantizes ONNX")
    parser.add_argument("--out", required=True,
                        help="export directory, e.g. exports/demo: built beside it and swapped "
                             "in whole; an earlier export there is replaced")
    parser.add_argument("--with-attention", action="store_true",
                        help="also export attention.onnx, every layer's attention weights for "
                             "one sentence pair (a classifier: for its sentences), what python "
                             "-m export.serve shows; needs the onnx format")
    parser.add_argument("--no-onnx-optimize", action="store_true",
                        help="write the ONNX graphs without the offline pass "
                             "(export/onnx_optimize.py): standard ONNX operators only, for "
                             "runtimes other than onnxruntime")
    parser.add_argument("--no-search-graph", action="store_true",
                        help="leave out search.onnx, the translator's whole search (encoder, "
                             "every step, greedy or beam search) in one ONNX graph, which "
                             "export.translate uses when it is there")
    parser.add_argument("--overwrite", action="store_true",
                        help="export into an --out that holds files an export did not make "
                             "(they are kept; only the export's own files are replaced)")
    add_debug_flag(parser)
    return parser.parse_args(argv)


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # Warnings from every library, progress from this one: onnxruntime's quantizer logs a
    # line per tensor on the root logger at INFO.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("export").setLevel(logging.INFO)
    for noisy in ("tf2onnx", "absl", "tensorflow"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    from .common import variant_bytes
    from .exporters import export_run

    formats = tuple(FORMATS) if args.format == "all" else (args.format,)
    manifest = export_run(Path(args.run), Path(args.out), formats, args.quantize,
                          overwrite=args.overwrite, with_attention=args.with_attention,
                          onnx_optimize=not args.no_onnx_optimize,
                          search_graph=not args.no_search_graph)
    print(f"exported {args.run} to {args.out}")
    for name, fmt in manifest["formats"].items():
        for variant, files in fmt["variants"].items():
            size = variant_bytes(manifest, files)
            print(f"  {name:<10} {variant:<8} {size / 1e6:8.2f} MB  {', '.join(files.values())}")
    if "attention" in manifest:
        name = manifest["attention"]["file"]
        size = manifest["files"][name]["bytes"]
        print(f"  {'attention':<10} {'float32':<8} {size / 1e6:8.2f} MB  {name}")
    return 0
