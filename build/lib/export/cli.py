"""Command line of `python -m export`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m export",
        description="Export a training run to SavedModel, ONNX and/or TFLite, with manifest.json.")
    parser.add_argument("--run", required=True, help="training run directory, e.g. runs/demo")
    parser.add_argument("--format", default="all",
                        choices=("savedmodel", "onnx", "tflite", "all"))
    parser.add_argument("--quantize", default="none", choices=("none", "fp16", "int8", "all"),
                        help="extra variants: fp16 and/or int8 TFLite; int8 also quantizes ONNX")
    parser.add_argument("--out", required=True, help="export directory, e.g. exports/demo")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("tf2onnx", "absl", "tensorflow"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    from export.exporters import FORMATS, export_run

    formats = FORMATS if args.format == "all" else (args.format,)
    try:
        manifest = export_run(Path(args.run), Path(args.out), formats, args.quantize)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"exported {args.run} to {args.out}")
    for name, fmt in manifest["formats"].items():
        for variant, files in fmt["variants"].items():
            size = sum(manifest["files"][f]["bytes"] for f in files.values())
            print(f"  {name:<10} {variant:<8} {size / 1e6:8.2f} MB  {', '.join(files.values())}")
    return 0
