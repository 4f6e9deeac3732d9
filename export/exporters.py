"""Run directory -> export directory: SavedModel, ONNX and TFLite files plus manifest.json.

The kind of export (export/kinds/) is chosen by the class of the run's model.keras, whatever
the run's task; it says what each format holds, and the manifest's "kind" records it.
"""

from __future__ import annotations

import json
from pathlib import Path

from keras_transformer.command_line import command, first_few
from keras_transformer.file_safety import staged_directory

from .choice import RECORD
from .common import MANIFEST, Manifest
from .formats import FORMATS, QUANTIZE, quantized, versions
from .kinds import kind_of_model
from .kinds.base import ExportOptions
from .module import load_trained


class OutputExists(FileExistsError):
    """--out holds something that is not an export made by this tool."""


def _foreign_entries(out: Path) -> list[str]:
    """The entries of a directory `out` that no export made: all of them unless it holds a
    manifest.json with its keys; else those besides the manifest, the files (or the top
    directories of the files) it lists and parity.json (export.parity's record in an
    export, export/choice.py)."""
    entries = sorted(entry.name for entry in out.iterdir()) if out.is_dir() else []
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        listed = {name.split("/", 1)[0] for name in data["files"]}
        ours = isinstance(data["manifest_version"], int) and isinstance(data["formats"], dict)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return entries
    if not ours:
        return entries
    return [name for name in entries if name not in (MANIFEST, RECORD, *listed)]


def check_output(run_dir: Path, out: Path, overwrite: bool) -> list[str]:
    """Refuse an --out that is a file, is or contains the run directory, lies inside the run
    and holds anything but an earlier export (the run's checkpoints or logs: not even with
    `overwrite`), or (without `overwrite`) holds anything but an earlier export of this
    tool. -> the entries of `out` that no export made, which the export keeps."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is a file, not a directory")
    run, target = run_dir.resolve(), out.resolve()
    if run == target or run.is_relative_to(target):
        raise ValueError(f"--out {out} {'is' if run == target else 'contains'} the training run "
                         f"{run_dir}; export to another directory (e.g. {run_dir / 'export'})")
    foreign = _foreign_entries(out)
    if foreign and target.is_relative_to(run):
        raise OutputExists(f"--out {out} is a directory of the training run {run_dir} (it "
                           f"holds files an export did not make); --overwrite does not replace "
                           f"a run's own files: export to a new directory such as "
                           f"{run_dir / 'export'}")
    if foreign and not overwrite:
        raise OutputExists(f"--out {out} holds files an export by {command('export')} did "
                           f"not make ({first_few(foreign)}); pass --overwrite to export there anyway "
                           f"(they are kept), or choose another --out")
    return foreign


def export_run(run_dir: str | Path, out_dir: str | Path, formats=tuple(FORMATS),
               quantize: str = "none", translate_signature: bool = True,
               overwrite: bool = False, with_attention: bool = False,
               onnx_optimize: bool = True, search_graph: bool = True) -> dict:
    """Export a training run; returns the manifest that is also written to out/manifest.json.

    The run is checked (model, tokenizers) and --out with it before anything is written; the
    export is built in a hidden sibling of `out_dir` and swapped in whole at the end, so a
    failed or killed export leaves the previous one as it was. `with_attention` adds
    attention.onnx (the weights the attention explorer, export.serve, shows) to a
    translator's or a classifier's export. `onnx_optimize` False writes the ONNX graphs
    without export.onnx_optimize's pass (standard operators only). `search_graph` False leaves
    out a translator's search.onnx (export.onnx_search)."""
    run_dir, out = Path(run_dir), Path(out_dir)
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"unknown formats {unknown}; choose from {tuple(FORMATS)}")
    if quantize not in QUANTIZE:
        raise ValueError(f"quantize must be one of {QUANTIZE}, got {quantize!r}")
    if with_attention and "onnx" not in formats:
        raise ValueError("--with-attention needs the onnx format, whose runtime reads "
                         "attention.onnx: export with --format onnx or --format all")
    # Asked for none of the formats that hold its variants, --quantize would make nothing and
    # say nothing.
    if quantized(quantize) and not any(FORMATS[f].made(quantize)[1:] for f in formats):
        raise ValueError(f"--quantize {quantize} makes no variant with --format "
                         f"{'/'.join(formats)}: fp16 variants are TFLite's, int8 variants "
                         f"TFLite's and ONNX's; add the format (or --format all)")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"training run not found: {run_dir}")
    keep = check_output(run_dir, out, overwrite)
    trained = load_trained(run_dir)
    kind = kind_of_model(trained, run_dir)
    options = ExportOptions(tuple(formats), quantize, translate_signature, with_attention,
                            onnx_optimize, search_graph)
    kind.check_options(options)
    with staged_directory(out, keep) as stage:
        manifest = kind.export_into(stage, run_dir, trained, options, versions())
        Manifest(stage)  # the manifest as a reader will see it, before it replaces anything
    return manifest
