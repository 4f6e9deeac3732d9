"""Shared by the benchmark scripts: configs, timing and statistics, machine facts, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

from keras_transformer.config import TransformerConfig
from keras_transformer.cpu import MATRIX_FLAGS, cpu_flags, cpu_model  # noqa: F401 (bench's API)
from keras_transformer.file_safety import atomic_write_text

RESULTS = Path("bench/results")
# --quick runs are smoke tests: they must never overwrite real results.
QUICK_RESULTS = RESULTS / "quick"
PEER_RESULTS = RESULTS / "peers"
ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = ROOT.parent / "shared" / "peers"
# The peers' virtual environments (../shared/peers/setup_venvs.sh makes them there): tf holds
# keras-hub, torch holds CTranslate2 and Hugging Face.
PEER_VENVS = Path(os.environ.get("PEER_VENVS", "/tmp/peers"))
PEER_TF_PYTHON = PEER_VENVS / "tf" / "bin" / "python"
PEER_TORCH_PYTHON = PEER_VENVS / "torch" / "bin" / "python"

# The peers' workloads (../shared/peers/common.py): source length, new tokens, train batch.
SOURCE_LENGTH = 32
NEW_TOKENS = 32
TRAIN_BATCH = 32
TRAIN_LENGTH = 32
SEED = 1234

# small and base are the peers' two configs: vocab 8000 shared by source and target and tied to
# the output layer, post-LN, ReLU FFN, sinusoidal positions, dropout 0.1. max_target_length
# only sizes the position table; 256 leaves room for 128 new tokens.
_PEER_SHAPE = dict(source_vocab_size=8000, target_vocab_size=8000, dropout=0.1,
                   share_embeddings=True, tie_output=True, max_source_length=256,
                   max_target_length=256)
CONFIGS = {
    # The model of train/configs/demo.yaml with its own vocabulary size; used by --quick.
    "demo": TransformerConfig.preset("tiny", d_model=128, num_heads=4, d_ff=512,
                                     source_vocab_size=1000, target_vocab_size=1000,
                                     share_embeddings=True, max_target_length=256),
    "small": TransformerConfig.preset("small", **_PEER_SHAPE),
    "base": TransformerConfig.preset("base", **_PEER_SHAPE),
}

VERSIONED = ("tensorflow", "keras", "numpy", "tensorflow-text", "onnxruntime", "onnx",
             "tf2onnx", "ai-edge-litert", "sentencepiece")


def _directory(value: str, flag: str) -> str:
    """A directory, made when missing: a path that is, or lies under, an existing file is
    refused before anything runs (the run would end, minutes later, in mkdir's error with
    nothing written)."""
    path = Path(value)
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                raise argparse.ArgumentTypeError(
                    f"{part} is a file: {flag} names a directory (new or existing)")
            break
    return value


def results_directory(value: str) -> str:
    """argparse type of --results (see _directory)."""
    return _directory(value, "--results")


def cache_directory(value: str) -> Path:
    """argparse type of --cache-dir, the exported models' directory (see _directory)."""
    return Path(_directory(value, "--cache-dir"))


def add_results_option(parser, help: str = "results directory") -> None:
    parser.add_argument("--results", default=None, type=results_directory, help=help)


def results_dir(args) -> Path:
    """--results if given, else bench/results (bench/results/quick for --quick)."""
    if getattr(args, "results", None):
        return Path(args.results)
    return QUICK_RESULTS if getattr(args, "quick", False) else RESULTS


def build_model(config: TransformerConfig, seed: int = SEED):
    """A seeded random-weight float32 Transformer, built by one call so it saves and reloads."""
    import keras
    import numpy as np

    from keras_transformer.models.transformer import Transformer

    keras.utils.set_random_seed(seed)
    model = Transformer(config, dtype="float32")
    ids = np.full((1, 4), 4, "int32")
    model((ids, ids), training=False)
    return model


# -- statistics and timing -----------------------------------------------------------------


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def quartiles(samples: list[float]) -> tuple[float, float]:
    """(p25, p75), inclusive method; a single sample is its own spread."""
    if len(samples) < 2:
        return samples[0], samples[0]
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return q[0], q[2]


def stats(samples: list[float]) -> dict:
    """Seconds -> median_s, p25_s, p75_s, runs, min_s, max_s and the samples themselves."""
    p25, p75 = quartiles(samples)
    return {"median_s": median(samples), "p25_s": p25, "p75_s": p75, "runs": len(samples),
            "min_s": min(samples), "max_s": max(samples), "samples_s": list(samples)}


def time_calls(fn, *, warmup: int = 2, repeats: int = 5, min_seconds: float = 2.0) -> dict:
    """fn() warmup times (timed apart), then at least `repeats` timed calls and `min_seconds`."""
    return time_interleaved([fn], warmup=warmup, repeats=repeats, min_seconds=min_seconds)[0]


def time_interleaved(fns, *, warmup: int = 1, repeats: int = 3,
                     min_seconds: float = 1.5) -> list[dict]:
    """time_calls for several functions at once, in `repeats` rounds: each round times every
    function for at least min_seconds / repeats (one call at least). Their samples then come
    from the same stretches of time, so ratios between them (the cost per token at 32 and at
    128 new tokens) do not take the host's drift between one cell and the next."""
    warm = [[] for _ in fns]
    for i, fn in enumerate(fns):
        for _ in range(warmup):
            t0 = time.perf_counter()
            fn()
            warm[i].append(time.perf_counter() - t0)
    samples: list[list[float]] = [[] for _ in fns]
    cpu = [0.0 for _ in fns]
    load_before = loadavg()
    share = min_seconds / max(repeats, 1)
    for _ in range(max(repeats, 1)):
        for i, fn in enumerate(fns):
            start, cpu0 = time.perf_counter(), time.process_time()
            while True:
                t0 = time.perf_counter()
                fn()
                samples[i].append(time.perf_counter() - t0)
                if time.perf_counter() - start >= share:
                    break
            cpu[i] += time.process_time() - cpu0
    load_after = loadavg()
    # CPU seconds per timed second: ~cores when the process had the machine to itself.
    return [{**stats(s), "warmup_s": w, "cpu_ratio": round(c / max(sum(s), 1e-9), 3),
             "loadavg_before": load_before, "loadavg_after": load_after}
            for s, w, c in zip(samples, warm, cpu, strict=True)]


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- machine and software ------------------------------------------------------------------


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict:
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu_model": cpu_model(), "cpu_flags": cpu_flags(), "cores": os.cpu_count(),
            "usable_cores": affinity,
            "mem_total_gib": mem, "python": platform.python_version(),
            "machine": platform.machine(), "kernel": platform.release()}


def versions() -> dict:
    out = {}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


# The environment that changes a measurement: TensorFlow's and XLA's settings, the thread
# knobs of OpenMP, OpenBLAS and oneDNN, Keras' backend, CTranslate2's. TF_CLI_* is
# Terraform's, not TensorFlow's.
ENV_PREFIXES = ("TF_", "XLA_", "OMP_", "KMP_", "OPENBLAS", "ONEDNN_", "KERAS", "CT2_")


def recorded_env(environ=None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items())
            if k.startswith(ENV_PREFIXES) and not k.startswith("TF_CLI_")}


def command_line(argv=None) -> list[str]:
    """The command as a reader would type it in the project's root: `python -m bench.X ...`,
    paths inside the project relative to it (where the project lives says nothing)."""
    argv = list(sys.argv if argv is None else argv)
    words = ["python"]
    script = Path(argv[0]).resolve() if argv else None
    if script is not None and script.suffix == ".py" and script.is_relative_to(ROOT):
        module = ".".join(script.relative_to(ROOT).with_suffix("").parts)
        words += ["-m", module.removesuffix(".__main__")]
        argv = argv[1:]
    for word in argv:
        path = Path(word)
        inside = path.is_absolute() and path.resolve().is_relative_to(ROOT)
        words.append(str(path.resolve().relative_to(ROOT)) if inside else word)
    return words


def payload(kind: str, **extra) -> dict:
    """The metadata every JSON starts with; write_json adds the end time and load."""
    return {"kind": kind, "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": command_line(), "machine": machine(),
            "loadavg_start": loadavg(), "versions": versions(), "env": recorded_env(),
            **extra}


def row_key(row: dict, keys: tuple[str, ...]) -> tuple:
    return tuple(row.get(k) for k in keys)


def write_json(path: str | Path, data: dict, merge_keys: tuple[str, ...] | None = None) -> Path:
    """Write data; with merge_keys, keep the old file's rows that this run did not measure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**data, "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_end": loadavg()}
    if merge_keys and path.exists():
        old = json.loads(path.read_text())
        new = {row_key(r, merge_keys) for r in data.get("results", [])}
        kept = [r for r in old.get("results", []) if row_key(r, merge_keys) not in new]
        data["results"] = kept + data.get("results", [])
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")
    return path


def read_json(path: str | Path) -> dict | None:
    """The parsed file, or None when it is missing or unreadable (reports show n/a)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def roofline_peak(results: Path) -> float | None:
    """Best sustained matmul GFLOP/s in results/roofline.json, if it was measured."""
    data = read_json(Path(results) / "roofline.json") or {}
    rates = [r["gflops"] for r in data.get("results", []) if r.get("gflops")]
    return max(rates) if rates else None


# -- printing ------------------------------------------------------------------------------


def print_table(headers: list[str], rows: list[list]) -> None:
    widths = [max([len(str(h))] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]
    print("  ".join(str(h).rjust(w) for h, w in zip(headers, widths, strict=True)))
    for row in rows:
        print("  ".join(str(c).rjust(w) for c, w in zip(row, widths, strict=True)))
