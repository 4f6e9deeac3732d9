"""Sustained float32 matmul GFLOP/s of this CPU in TensorFlow and NumPy (the 'peak' of MFU).

    python -m bench.roofline [--n 2048] [--quick]

The same workload as the peers' bench_roofline.py: n x n @ n x n float32, GFLOP/s = 2 n^3 / s,
each library with its default threads. Writes bench/results/roofline.json.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bench.common import (  # noqa: E402
    add_results_option,
    payload,
    print_table,
    results_dir,
    time_calls,
    write_json,
)
from keras_transformer.command_line import add_debug_flag, entry_point, int_in  # noqa: E402


def tf_matmul(n: int):
    import tensorflow as tf

    a = tf.random.stateless_normal((n, n), seed=(0, 1), dtype=tf.float32)
    b = tf.random.stateless_normal((n, n), seed=(0, 2), dtype=tf.float32)
    matmul = tf.function(lambda x, y: tf.linalg.matmul(x, y))

    def run():
        matmul(a, b)[0, 0].numpy()  # reading one element waits for the whole product

    return "tf.linalg.matmul (tf.function)", "tensorflow", run


def numpy_matmul(n: int):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    return "np.matmul", "numpy", lambda: np.matmul(a, b, out=c)


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_in(1), default=None,
                        help="matrix size (2048; 256 if --quick)")
    parser.add_argument("--quick", action="store_true", help="smoke test: small n, one call")
    add_results_option(parser)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    n = args.n or (256 if args.quick else 2048)
    meta = payload("roofline", quick=args.quick)  # now, so loadavg_start is before the work
    timing = (dict(warmup=1, repeats=1, min_seconds=0.0) if args.quick
              else dict(warmup=3, repeats=10, min_seconds=2.0))
    flops = 2.0 * n**3
    results = []
    for make in (tf_matmul, numpy_matmul):
        op, lib, fn = make(n)
        t = time_calls(fn, **timing)
        results.append({"op": op, "lib": lib, "n": n, "dtype": "float32",
                        "gflops": flops / t["median_s"] / 1e9,
                        "gflops_p25": flops / t["p75_s"] / 1e9,
                        "gflops_p75": flops / t["p25_s"] / 1e9, **t})
    print_table(["op", "n", "GFLOP/s", "p25-p75", "runs"],
                [[r["op"], r["n"], f"{r['gflops']:.1f}",
                  f"{r['gflops_p25']:.1f}-{r['gflops_p75']:.1f}", r["runs"]] for r in results])
    path = write_json(results_dir(args) / "roofline.json", {
        **meta, "results": results,
        "peak_gflops": max(r["gflops"] for r in results)})
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
