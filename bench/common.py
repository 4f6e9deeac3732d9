"""Timing helpers shared by the benchmark scripts: warm-up, repeats, medians, peak memory."""

from __future__ import annotations

import json
import platform
import resource
import statistics
import time
from pathlib import Path


def time_calls(fn, *, warmup: int = 2, repeats: int = 5, min_seconds: float = 2.0) -> dict:
    """Run fn() warmup times untimed, then at least `repeats` times and `min_seconds`."""
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < repeats or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    quartiles = statistics.quantiles(samples, n=4) if len(samples) > 1 else samples * 3
    return {"median_s": statistics.median(samples), "p25_s": quartiles[0],
            "p75_s": quartiles[2], "runs": len(samples)}


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def machine() -> dict:
    import os

    return {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count()}


def write_json(path: str | Path, payload: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2))


def print_table(headers: list[str], rows: list[list]) -> None:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(str(h).rjust(w) for h, w in zip(headers, widths, strict=True)))
    for row in rows:
        print("  ".join(str(c).rjust(w) for c, w in zip(row, widths, strict=True)))
