"""Cross-runtime parity of an export: tensors, greedy/beam tokens, search.onnx against the
NumPy search, the SavedModel's `translate` signature against keras under the manifest's
search, BLEU of the variants, and the attention weights of attention.onnx when the
export holds it; for a classifier export,
class probabilities and their argmax (export/kinds/classifier/parity.py); for an extractive
summarizer's, sentence probabilities and the sentences chosen (export/kinds/extractor/parity.py);
for a language model's export, tensors and greedy and sampled tokens of random prompts.

    python -m export.parity --export exports/demo [--run runs/demo] [--src FILE --ref FILE]

Checks keras against every format the export holds, on the demo corpus' test sentences or
the lines of --src (a summarization export needs --src: articles, one per line), with the
run's search constraints (the manifest's `search`); quality is BLEU for translation and
ROUGE-L for summaries. Exit codes: 0 every check passes; 1 a
check fails (or a runtime fails on a sound export); 2 bad usage, or an export directory that
is missing, corrupt, holds no format, or whose manifest names a path outside it; 130
interrupted. A translation or summarization export's check writes one file, parity.json in
the export directory (each variant's score and the seconds of its greedy pass: what
`export.translate --variant fastest` chooses from, export/choice.py); --no-record writes
nothing.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from keras_transformer.command_line import (
    add_debug_flag,
    command,
    each_message_once,
    entry_point,
    int_in,
)
from keras_transformer.text.lines import read_lines

from .kinds import kind_of, load_backend, open_manifest, open_runner
from .parity_check import ParityRun


def run(export_dir: str | Path, run_dir: str | Path | None = None, sentences: int = 200,
        beam_sentences: int = 50, bleu_sentences: int = 1000, out=print,
        backends: dict | None = None, sources: list[str] | None = None,
        references: list[str] | None = None, record: bool = False) -> bool:
    """The export's kind's checks (export/kinds/), each printed as it runs, then PASS or
    FAIL; True when every one passes. `backends` reuses loaded runtimes; `sources` (and
    `references`, line-aligned) replace the demo corpus' test split. With `record`, a
    translator's check that scored its variants writes parity.json (export/choice.py) into
    the export directory."""
    manifest = open_manifest(export_dir)
    manifest.verify()
    kind = kind_of(manifest)

    def load(runtime: str, variant: str = "float32", search_graph: bool = True):
        return load_backend(manifest, runtime, variant, run_dir, search_graph)

    checked = ParityRun(manifest, run_dir, sentences, beam_sentences, bleu_sentences,
                        sources, references, record, backends, load=load, open=open_runner)
    kind.parity_prepare(checked, out)
    for check in kind.parity_checks(checked):
        checked.results.append(check(checked, out))
    out(f"\n{'PASS' if checked.ok else 'FAIL'}")
    return checked.ok


@entry_point
def main(argv) -> int:
    parser = argparse.ArgumentParser(prog=command("export.parity"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export", required=True, help="export directory")
    parser.add_argument("--run", default=None,
                        help="training run for the keras runtime (default: the manifest's)")
    parser.add_argument("--src", default=None,
                        help="inputs, one per line (default: the demo corpus' test split; "
                             "needed for a summarization export)")
    parser.add_argument("--ref", default=None, help="references, line-aligned with --src")
    parser.add_argument("--sentences", type=int_in(1, 5000), default=200,
                        help="greedy sentences compared token by token (a classifier: random id "
                             "sequences classified), 1 to 5000 (default 200)")
    parser.add_argument("--beam-sentences", type=int_in(1, 1000), default=50,
                        help="beam-4 sentences compared, 1 to 1000 (default 50)")
    parser.add_argument("--bleu-sentences", type=int_in(1, 10000), default=1000,
                        help="sentences scored with BLEU per variant, 1 to 10000 (default 1000)")
    parser.add_argument("--no-record", action="store_true",
                        help="write nothing (default: parity.json in the export directory, "
                             "what export.translate --variant fastest reads)")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.basicConfig(level=logging.WARNING)
    with each_message_once():
        return _checked(args)


def _checked(args) -> int:
    sources = references = None
    if args.ref and not args.src:
        raise ValueError("--ref needs --src")
    if args.src:
        sources = [line for line in read_lines(args.src, what="--src") if line.strip()]
        if not sources:
            raise ValueError(f"{args.src} holds no non-empty line")
    if args.ref:
        lines, ref_lines = read_lines(args.src, what="--src"), read_lines(args.ref, what="--ref")
        if len(lines) != len(ref_lines):
            raise ValueError(f"{args.src} has {len(lines)} lines but {args.ref} has "
                             f"{len(ref_lines)}")
        references = [r for line, r in zip(lines, ref_lines, strict=True) if line.strip()]
    ok = run(args.export, args.run, args.sentences, args.beam_sentences, args.bleu_sentences,
             sources=sources, references=references, record=not args.no_record)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
