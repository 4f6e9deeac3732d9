"""Decoding speed of one runtime: tokens/s and latency of one full call (encoder + every step
+ search) per batch, with the key/value cache and (--no-cache) without it.

    python -m bench.decode [--runtime keras|keras-xla|savedmodel|onnx|onnx-search|tflite ...]
        [--configs small base] [--new-tokens 32 128] [--batches 1 16] [--beams 1 4] [--no-cache]

Source = 32 random ids, exactly --new-tokens generated per row (EOS is masked out so no row
stops early), greedy and beam 4 at the shortest --new-tokens, greedy at the longer ones,
random weights (bench.export_models makes the exports). `onnx` steps decoder_step.onnx from
the NumPy search; `onnx-search` runs the export's search.onnx, the whole search in one
onnxruntime call, with min_length = max_length = --new-tokens, as the peers ask CTranslate2
(min_decoding_length = max_decoding_length); it has no no-cache path.
The cells of a config are timed in interleaved rounds (bench.common.time_interleaved), so
the 32- and 128-token cells share the host's drift. One runtime per process, so the peak
RSS in the JSON is that runtime's. No-cache cells (--no-cache) re-run the decoder over the
whole prefix at every step (the export formats through bench.nocache's benchmark-only
prefix decoder, exported in a child process); they are measured
at the smallest --new-tokens for every batch and beam, and batch-1 greedy at the others
(with keras-xla every prefix length is a compile, paid in the warm-up calls).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The no-cache path's first step attends over one key; Keras warns about that softmax.
warnings.filterwarnings("ignore", message="You are using a softmax over axis -1")

import numpy as np  # noqa: E402

from bench.common import (  # noqa: E402
    CONFIGS,
    SEED,
    SOURCE_LENGTH,
    add_results_option,
    build_model,
    cache_directory,
    payload,
    peak_rss_mb,
    print_table,
    results_dir,
    time_interleaved,
    write_json,
)
from bench.export_models import (  # noqa: E402
    CACHE_DIR,
    CACHE_HELP,
    code_fingerprint,
    ensure_in_child,
)
from bench.flops import generate_flops  # noqa: E402
from bench.nocache import NoCacheStepper  # noqa: E402
from bench.nocache import load_runtime as load_nocache_runtime  # noqa: E402
from keras_transformer.command_line import add_debug_flag, entry_point, int_in  # noqa: E402
from keras_transformer.decoding import SearchSettings, search  # noqa: E402

# The timed ways to decode: export.formats.RUNTIMES with Keras under XLA and search.onnx beside.
DECODE_VARIANTS = ("keras", "keras-xla", "savedmodel", "onnx", "onnx-search", "tflite")
NO_CACHE_RUNTIMES = ("keras", "keras-xla", "savedmodel", "onnx", "tflite")
KERAS_RUNTIMES = ("keras", "keras-xla")
MERGE_KEYS = ("config", "batch", "beam", "new_tokens", "cache")
# Peak RSS just before the first no-cache runtime loads: every cached cell has had its warm-up
# call by then (time_interleaved warms up in list order), so it is the cached path's peak.
_RSS_BEFORE_NO_CACHE: list[float] = []


class WholeSearch:
    """One batch's search in the runtime (search.onnx), for decode_once."""

    def __init__(self, backend, source, beam: int, new_tokens: int):
        self.backend, self.source, self.beam, self.new_tokens = backend, source, beam, new_tokens

    def tokens(self) -> np.ndarray:
        result = self.backend.search_in_runtime(self.source, SearchSettings(
            beam_size=self.beam, alpha=0.6, max_length=self.new_tokens,
            min_length=self.new_tokens))
        return result.tokens


def whole_search_factory(manifest, variant: str):
    """(source, beam, new_tokens, cache) -> WholeSearch over the export's search graph of the
    ONNX `variant` (search.onnx, search.int8.onnx)."""
    from export.kinds import load_backend

    backend = load_backend(manifest, "onnx", variant)
    if "search" not in backend.sessions:
        raise ValueError(f"{manifest.root} has no {variant} search graph; export it again")

    def search_factory(source, beam, new_tokens, cache):
        if not cache:
            raise ValueError("onnx-search has no no-cache path")
        return WholeSearch(backend, source, beam, new_tokens)

    return search_factory


def make_stepper_factory(runtime: str, name: str, cache_dir: Path):
    """(source, beam, new_tokens, cache) -> stepper with .step and .reorder (a WholeSearch for
    onnx-search)."""
    nocache = {}  # the runtime's encode/decode_last, loaded at the first no-cache cell

    def uncached(source, beam, model=None):
        if "runtime" not in nocache:
            if not _RSS_BEFORE_NO_CACHE:
                _RSS_BEFORE_NO_CACHE.append(peak_rss_mb())
            nocache["runtime"] = load_nocache_runtime(runtime, name, cache_dir, model)
        return NoCacheStepper(nocache["runtime"], source, beam_size=beam)

    if runtime in KERAS_RUNTIMES:
        from keras_transformer.tf_backend import keras_stepper

        model = build_model(CONFIGS[name], SEED)
        jit = runtime == "keras-xla"

        def keras_factory(source, beam, new_tokens, cache):
            if cache:
                return keras_stepper(model, source, beam_size=beam, max_length=new_tokens,
                                     jit_compile=jit)
            return uncached(source, beam, model)

        return keras_factory
    from export.common import Manifest
    from export.kinds import load_backend
    from keras_transformer.generation import BackendStepper

    manifest = Manifest(ensure_in_child(name, cache_dir))
    if runtime == "onnx-search":
        return whole_search_factory(manifest, "float32")
    backend = load_backend(manifest, runtime, search_graph=False)

    def export_factory(source, beam, new_tokens, cache):
        if cache:
            return BackendStepper(backend, source, beam_size=beam, max_length=new_tokens)
        return uncached(source, beam)

    return export_factory


def decode_once(factory, config, source: np.ndarray, beam: int, new_tokens: int,
                cache: bool) -> np.ndarray:
    """One full call: encode, new_tokens steps, search; returns the (batch, new_tokens) ids."""
    stepper = factory(source, beam, new_tokens, cache)
    if isinstance(stepper, WholeSearch):
        return stepper.tokens()

    def step(tokens, index):
        out = stepper.step(tokens, index)
        logits, normalizer = out if isinstance(out, tuple) else (out, None)
        logits = np.asarray(logits, np.float32)
        if not logits.flags.writeable:  # a TF tensor's buffer; the other runtimes' are ours
            logits = logits.copy()
        logits[:, config.eos_id] = -np.inf  # exactly new_tokens per row, as the peers measure
        # The runtime's normaliser still counts EOS: scores shift, the work does not.
        return logits if normalizer is None else (logits, normalizer)

    result = search(SimpleNamespace(step=step, reorder=stepper.reorder), len(source),
                    SearchSettings(beam_size=beam, max_length=new_tokens),
                    bos_id=config.bos_id, eos_id=config.eos_id)
    return result.tokens


def cells(new_tokens: list[int], batches: list[int], beams: list[int], no_cache: bool):
    """(batch, beam, new_tokens, cache): every batch and beam cached at the shortest length,
    greedy at the longer ones (the per-token cost as the cache grows); no-cache at the shortest
    length for every batch and beam, and batch-1 greedy at the longer ones (it grows
    quadratically)."""
    shortest = min(new_tokens)
    out = [(b, k, shortest, True) for b in batches for k in beams]
    out += [(b, 1, n, True) for n in new_tokens if n != shortest for b in batches]
    if no_cache:
        out += [(b, k, shortest, False) for b in batches for k in beams]
        out += [(1, 1, n, False) for n in new_tokens if n != shortest]
    return out


class Cell:
    """One cell (config, batch, beam, new tokens, cache) as a callable for time_interleaved:
    each call decodes one batch; a failure is recorded and makes later calls no-ops, so the
    other cells go on (as the peers do)."""

    def __init__(self, factory, name: str, runtime: str, batch: int, beam: int,
                 new_tokens: int, cache: bool):
        self.factory, self.config = factory, CONFIGS[name]
        self.batch, self.beam, self.new_tokens, self.cache = batch, beam, new_tokens, cache
        rng = np.random.default_rng(SEED)
        self.source = rng.integers(4, self.config.source_vocab_size,
                                   (batch, SOURCE_LENGTH)).astype("int32")
        self.row = {"runtime": runtime, "config": name, "batch": batch, "beam": beam,
                    "new_tokens": new_tokens, "cache": cache, "source_length": SOURCE_LENGTH}
        self.error: str | None = None
        self.generated = 0

    def __call__(self) -> None:
        if self.error is not None:
            return
        try:
            tokens = decode_once(self.factory, self.config, self.source, self.beam,
                                 self.new_tokens, self.cache)
        except Exception as err:  # record and go on to the next cell, as the peers do
            self.error = f"{type(err).__name__}: {str(err)[:2000]}"
            return
        if tokens.shape != (self.batch, self.new_tokens) or (tokens == self.config.eos_id).any():
            self.error = (f"expected {self.new_tokens} tokens per row without EOS, got shape "
                          f"{tokens.shape}")
        self.generated = int(tokens.shape[1])

    def result(self, t: dict) -> dict:
        """The JSON row from time_interleaved's timing of this cell."""
        if self.error is not None:
            return {**self.row, "error": self.error}
        work = self.batch * self.new_tokens
        flops = (generate_flops(self.config, self.batch, self.beam, SOURCE_LENGTH,
                                self.new_tokens) if self.cache else None)
        return {**self.row, "generated_tokens_per_row": self.generated,
                "tokens_per_s": work / t["median_s"], "tokens_per_s_p25": work / t["p75_s"],
                "tokens_per_s_p75": work / t["p25_s"],
                "ms_per_batch": {"median": t["median_s"] * 1e3, "p25": t["p25_s"] * 1e3,
                                 "p75": t["p75_s"] * 1e3, "runs": t["runs"]},
                "per_token_ms": t["median_s"] * 1e3 / self.new_tokens,
                "gflops": flops / t["median_s"] / 1e9 if flops else None,
                "rss_peak_mb_so_far": peak_rss_mb(), **t}


def fmt_row(r: dict) -> list:
    head = [r["config"], r["batch"], r["beam"], r["new_tokens"], "yes" if r["cache"] else "no"]
    if "error" in r:
        return head + ["FAILED", "", "", ""]
    ms = r["ms_per_batch"]
    return head + [f"{ms['median']:.0f}", f"{ms['p25']:.0f}-{ms['p75']:.0f}",
                   f"{r['per_token_ms']:.2f}", f"{r['tokens_per_s']:,.0f}"]


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", nargs="+", default=["keras"], choices=DECODE_VARIANTS,
                        help="one runtime, or several timed in the same interleaved rounds "
                             "(a fair A/B: the host's drift falls on all of them), each "
                             "written to its own decode_<runtime>.json")
    parser.add_argument("--configs", nargs="+", default=None, choices=CONFIGS,
                        help="default small base (demo with --quick)")
    parser.add_argument("--new-tokens", type=int_in(1), nargs="+", default=None,
                        help="default 32 128 (4 with --quick)")
    parser.add_argument("--batches", type=int_in(1), nargs="+", default=[1, 16])
    parser.add_argument("--beams", type=int_in(1), nargs="+", default=[1, 4])
    parser.add_argument("--no-cache", action="store_true",
                        help="also time decoding without the key/value cache (the export "
                             "formats through bench.nocache's prefix decoder)")
    parser.add_argument("--cache-dir", type=cache_directory, default=CACHE_DIR,
                        help=CACHE_HELP)
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: demo config, 4 new tokens, one timed call")
    add_results_option(parser)
    parser.add_argument("--merge", action="store_true",
                        help="keep rows of the existing JSON that this run does not measure")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    runtimes = list(dict.fromkeys(args.runtime))
    if args.no_cache and not set(runtimes) & set(NO_CACHE_RUNTIMES):
        parser.error(f"--no-cache: {', '.join(runtimes)} has no no-cache path; the runtimes "
                     f"that do: {', '.join(NO_CACHE_RUNTIMES)}")
    configs = args.configs or (["demo"] if args.quick else ["small", "base"])
    new_tokens = args.new_tokens or ([4] if args.quick else [32, 128])
    timing = (dict(warmup=1, repeats=1, min_seconds=0.0) if args.quick
              else dict(warmup=1, repeats=3, min_seconds=1.5))
    results: dict[str, list[dict]] = {runtime: [] for runtime in runtimes}
    metas = {runtime: payload("decode", runtime=runtime, interleaved_with=runtimes,
                              quick=args.quick, cache_dir=str(args.cache_dir),
                              threads="each runtime's default", code_sha256=code_fingerprint())
             for runtime in runtimes}
    for name in configs:
        timed = []
        for runtime in runtimes:
            cell_list = cells(new_tokens, args.batches, args.beams,
                              args.no_cache and runtime in NO_CACHE_RUNTIMES)
            try:
                factory = make_stepper_factory(runtime, name, args.cache_dir)
            except Exception as err:  # e.g. a failed export: every cell of this config fails
                error = f"{type(err).__name__}: {str(err)[:2000]}"
                results[runtime] += [{"runtime": runtime, "config": name, "batch": batch,
                                      "beam": beam, "new_tokens": n, "cache": cache,
                                      "error": error}
                                     for batch, beam, n, cache in cell_list]
                continue
            timed += [Cell(factory, name, runtime, *cell) for cell in cell_list]
        for cell, t in zip(timed, time_interleaved(timed, **timing), strict=True):
            row = cell.result(t)
            print(" ".join(str(c) for c in [row["runtime"], *fmt_row(row)]), flush=True)
            results[row["runtime"]].append(row)
        del timed
    peak = peak_rss_mb()
    cached_peak = _RSS_BEFORE_NO_CACHE[0] if _RSS_BEFORE_NO_CACHE else peak
    failed = False
    for runtime, rows in results.items():
        for r in rows:
            # Of this process, which ran every cell listed: the cached path's, and with the
            # no-cache path's prefix decoder loaded too.
            r["process_peak_rss_mb"] = cached_peak
            r["process_peak_rss_mb_with_no_cache"] = peak
            r["process_configs"] = configs
            r["process_runtimes"] = runtimes
        print(f"\nruntime {runtime}")
        print_table(["config", "batch", "beam", "new tokens", "cache", "ms/batch", "p25-p75",
                     "ms/token", "tokens/s"], [fmt_row(r) for r in rows])
        path = write_json(results_dir(args) / f"decode_{runtime}.json", {
            **metas[runtime], "results": rows}, merge_keys=MERGE_KEYS if args.merge else None)
        print(f"wrote {path}")
        failed |= any("error" in r for r in rows)
    print(f"peak RSS {cached_peak:,.0f} MiB"
          + (f" ({peak:,.0f} MiB with the no-cache path)" if _RSS_BEFORE_NO_CACHE else "")
          + (f" (one process for {', '.join(runtimes)})" if len(runtimes) > 1 else ""))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    sys.exit(main())
