"""Where one decoding call's time goes, for the runtimes without TensorFlow: the encoder, the
runtime's steps, the cache writes, the beam reorders, and the rest (the NumPy search and
Python), in ms per call.

    python -m bench.breakdown [--runtime onnx tflite] [--configs small base] [--calls 8] [--quick]

Same workload and exports as bench.decode (32 random source ids, exactly --new-tokens new
tokens, cached step). Each piece is timed around the Backend method that does it, in the same
calls, so the pieces add up to the call; the timer itself costs about a microsecond a piece.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bench.common import (  # noqa: E402
    CONFIGS,
    SEED,
    SOURCE_LENGTH,
    add_results_option,
    payload,
    print_table,
    results_dir,
    write_json,
)
from bench.decode import decode_once  # noqa: E402
from bench.export_models import CACHE_DIR, code_fingerprint, ensure_in_child  # noqa: E402
from keras_transformer.command_line import add_debug_flag, entry_point, int_in  # noqa: E402

PIECES = ("encode", "decode_step_normalized", "write", "gather")
LABELS = {"decode_step_normalized": "steps", "write": "cache writes",
          "gather": "beam reorders"}


class TimedBackend:
    """A Backend whose PIECES add their time to a Counter; everything else passes through."""

    def __init__(self, backend, spent: Counter):
        self._backend, self._spent = backend, spent

    def __getattr__(self, name):
        attribute = getattr(self._backend, name)
        if name not in PIECES:
            return attribute

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return attribute(*args, **kwargs)
            finally:
                self._spent[name] += time.perf_counter() - start

        return timed


def measure(runtime: str, name: str, cells, calls: int, new_tokens: int,
            cache_dir: Path) -> list[dict]:
    from export.common import Manifest
    from export.runtime import load_backend
    from keras_transformer.generation import BackendStepper

    spent: Counter = Counter()
    # The stepwise path only: search.onnx is one call, with nothing to split.
    backend = TimedBackend(load_backend(Manifest(ensure_in_child(name, cache_dir)), runtime,
                                        search_graph=False), spent)
    config = CONFIGS[name]

    def factory(source, beam, tokens, cache):
        return BackendStepper(backend, source, beam_size=beam, max_length=tokens)

    rows = []
    for batch, beam in cells:
        source = np.random.default_rng(SEED).integers(
            4, config.source_vocab_size, (batch, SOURCE_LENGTH)).astype("int32")
        decode_once(factory, config, source, beam, new_tokens, True)  # warm-up
        spent.clear()
        start = time.perf_counter()
        for _ in range(calls):
            decode_once(factory, config, source, beam, new_tokens, True)
        total = (time.perf_counter() - start) / calls
        pieces = {LABELS.get(p, p): spent[p] / calls * 1e3 for p in PIECES}
        pieces["search and Python"] = total * 1e3 - sum(pieces.values())
        rows.append({"runtime": runtime, "config": name, "batch": batch, "beam": beam,
                     "new_tokens": new_tokens, "calls": calls, "ms_per_call": total * 1e3,
                     "tokens_per_s": batch * new_tokens / total, "ms": pieces})
    return rows


def table_of(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of a breakdown table, for the terminal and for bench.report."""
    pieces = list(rows[0]["ms"]) if rows else []
    return (["runtime", "config", "batch", "beam", "ms/call", *pieces],
            [[r["runtime"], r["config"], r["batch"], r["beam"], f"{r['ms_per_call']:.1f}",
              *(f"{r['ms'][p]:.1f}" for p in pieces)] for r in rows])


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", nargs="+", default=["onnx", "tflite"],
                        choices=["onnx", "tflite"])
    parser.add_argument("--configs", nargs="+", default=None, choices=CONFIGS,
                        help="default small base (demo with --quick)")
    parser.add_argument("--batches", type=int_in(1), nargs="+", default=[1, 16])
    parser.add_argument("--beams", type=int_in(1), nargs="+", default=[1, 4])
    parser.add_argument("--new-tokens", type=int_in(1), default=None,
                        help="default 32 (4 with --quick)")
    parser.add_argument("--calls", type=int_in(1), default=None,
                        help="timed calls per cell (default 8, 1 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: demo config, 4 new tokens, one timed call")
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR)
    add_results_option(parser)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    configs = args.configs or (["demo"] if args.quick else ["small", "base"])
    new_tokens = args.new_tokens or (4 if args.quick else 32)
    calls = args.calls or (1 if args.quick else 8)
    cells = [(b, k) for b in args.batches for k in args.beams]
    rows = []
    for runtime in args.runtime:
        for name in configs:
            rows += measure(runtime, name, cells, calls, new_tokens, args.cache_dir)
    print_table(*table_of(rows))
    path = write_json(results_dir(args) / "breakdown.json", {
        **payload("breakdown", cache_dir=str(args.cache_dir), code_sha256=code_fingerprint()),
        "results": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
