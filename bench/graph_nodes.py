"""Node counts of the ONNX graphs before and after export/onnx_optimize.py, and the per-call
latency of decoder_step.onnx and encoder.onnx both ways.

    python -m bench.graph_nodes [--configs demo small base] [--batches 1 16] [--seconds 6]
                                [--threads 1]

For each config (random weights, bench.common.CONFIGS; `demo` is the `tiny` preset at the
demo's size): the graphs as export wrote them before the pass ("plain"), the plain graphs as
onnxruntime runs them (its load-time fusions, saved with optimized_model_filepath at
ORT_ENABLE_EXTENDED: the kernels a session.run launches), and the optimized files ("lean"),
per op type. Then one session of each file and a second one of the plain file (the control:
identical work), timed interleaved in the same rounds (bench.common.time_interleaved) so
that the ratios do not take the host's drift: decoder_step
with a 32-slot cache at index 16, and encoder on 32 source ids, at each batch. Other processes
may share the CPU; the JSON records the load average and each timing's CPU ratio.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bench.common import (  # noqa: E402
    CONFIGS,
    SEED,
    SOURCE_LENGTH,
    add_results_option,
    build_model,
    cpu_model,
    loadavg,
    payload,
    print_table,
    results_dir,
    time_interleaved,
    write_json,
)
from keras_transformer.command_line import (  # noqa: E402
    add_debug_flag,
    entry_point,
    float_in,
    int_in,
)

CACHE_SLOTS = 32
INDEX = 16


def graphs(name: str) -> dict:
    """{role: plain ModelProto} of config `name`, as export.exporters.export_onnx makes them
    before the pass."""
    import tf2onnx

    from export.module import decoding_module
    from export.onnx_convert import safe_reshape_merging
    from export.onnx_graph import ONNX_OPSET, build_decoder_step

    model = build_model(CONFIGS[name], SEED)
    module = decoding_module(model)
    with safe_reshape_merging():
        encoder, _ = tf2onnx.convert.from_function(
            module.encode, input_signature=module.encode.input_signature, opset=ONNX_OPSET)
    return {"decoder_step": build_decoder_step(model), "encoder": encoder}


def session(proto, role: str, threads: int = 0):
    """A session as export.runtime.onnx makes one."""
    import onnxruntime as ort

    from export.runtime.onnx import DISABLED_OPTIMIZERS

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    if role == "encoder":  # as export.runtime.onnx sets it
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"],
                                disabled_optimizers=DISABLED_OPTIMIZERS)


def feeds(proto, role: str, batch: int, rng) -> dict:
    """Random inputs of the right shapes: 32 source positions, a 32-slot cache at index 16."""
    if role == "encoder":
        return {"source_ids": rng.integers(4, 200, (batch, SOURCE_LENGTH)).astype(np.int32)}
    sizes = {"batch": batch, "source_length": SOURCE_LENGTH, "cache_length": CACHE_SLOTS}
    out = {}
    for tensor in proto.graph.input:
        dims = [d.dim_value or sizes[d.dim_param] for d in tensor.type.tensor_type.shape.dim]
        if tensor.name == "tokens":
            out[tensor.name] = rng.integers(4, 200, dims).astype(np.int32)
        elif tensor.name == "index":
            out[tensor.name] = np.asarray(INDEX, np.int32)
        elif tensor.name == "memory_mask":
            out[tensor.name] = np.ones(dims, bool)
        else:
            out[tensor.name] = rng.normal(size=dims).astype(np.float32)
    return out


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=None, choices=CONFIGS,
                        help="default demo small base (demo with --quick)")
    parser.add_argument("--batches", nargs="+", type=int_in(1), default=[1, 16])
    parser.add_argument("--seconds", type=float_in(0, 3600, low_open=True), default=6.0,
                        help="timed seconds per file and cell, in 12 interleaved rounds")
    parser.add_argument("--threads", type=int_in(0), default=0,
                        help="onnxruntime intra-op threads (0: onnxruntime's default, as the "
                             "runtime; 1 is steadier on a CPU other processes share)")
    parser.add_argument("--quick", action="store_true", help="demo only, 1 s per cell")
    add_results_option(parser)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    from export.onnx_optimize import op_counts, optimize, ort_extended

    names = args.configs or (["demo"] if args.quick else ["demo", "small", "base"])
    seconds = 1.0 if args.quick else args.seconds
    cpu = cpu_model()
    print(f"CPU: {cpu}; load average {loadavg()}; onnxruntime threads {args.threads or 'default'}."
          f" Other processes may share this CPU: compare the ratios, timed interleaved in one "
          f"run, more than the times. decoder_step's lean file holds the kernels onnxruntime "
          f"makes of the plain one at load time, so its ratio shows the timing noise.")
    counts, timings = [], []
    rng = np.random.default_rng(SEED)
    for name in names:
        for role, plain in graphs(name).items():
            forms = {"plain": plain, "onnxruntime": ort_extended(plain),
                     "lean": optimize(plain)[0]}
            row = {"config": name, "role": role, "cpu_model": cpu}
            for form, proto in forms.items():
                row[f"{form}_nodes"] = len(proto.graph.node)
                row[f"{form}_ops"] = op_counts(proto)
            counts.append(row)
            print(f"\n{name} {role}: nodes plain {row['plain_nodes']}, as onnxruntime runs the "
                  f"plain file {row['onnxruntime_nodes']}, lean {row['lean_nodes']} ({cpu})")
            ops = sorted(set(row["plain_ops"]) | set(row["lean_ops"]),
                         key=lambda op: -max(row["plain_ops"].get(op, 0),
                                             row["lean_ops"].get(op, 0)))
            print_table(["op", "plain", "onnxruntime", "lean"],
                        [[op, *(row[f"{f}_ops"].get(op, 0) for f in forms)] for op in ops])
            # "plain_again", a second session of the plain file, is the control: its ratio to
            # "plain" is what noise and the order within a round make of identical work.
            sessions = {form: session(forms[form.removesuffix("_again")], role, args.threads)
                        for form in ("plain", "lean", "plain_again")}
            # Load time: the lean file carries what onnxruntime would otherwise do at load.
            loads = time_interleaved(
                [lambda p=forms[f], r=role: session(p, r, args.threads) for f in ("plain", "lean")],
                warmup=1, repeats=5, min_seconds=seconds / 3)
            row["load_ms"] = {f: round(t["median_s"] * 1e3, 2)
                              for f, t in zip(("plain", "lean"), loads, strict=True)}
            print(f"session load, median: plain {row['load_ms']['plain']} ms, lean "
                  f"{row['load_ms']['lean']} ms ({cpu})")
            for batch in args.batches:
                inputs = feeds(plain, role, batch, rng)
                fns = [lambda s=s, i=inputs: s.run(None, i) for s in sessions.values()]
                plain_t, lean_t, again_t = time_interleaved(fns, warmup=5, repeats=12,
                                                            min_seconds=seconds)
                timings.append({"config": name, "role": role, "batch": batch,
                                "cpu_model": cpu, "plain": plain_t, "lean": lean_t,
                                "plain_again": again_t,
                                "lean_over_plain": lean_t["median_s"] / plain_t["median_s"],
                                "control_ratio": again_t["median_s"] / plain_t["median_s"]})
    print(f"\nPer-call latency, median of interleaved calls ({cpu}; load average {loadavg()}):")
    print_table(["config", "graph", "batch", "plain ms", "lean ms", "lean/plain",
                 "plain again/plain", "calls", "cpu ratio", "CPU"],
                [[t["config"], t["role"], t["batch"], f"{t['plain']['median_s'] * 1e3:.3f}",
                  f"{t['lean']['median_s'] * 1e3:.3f}", f"{t['lean_over_plain']:.3f}",
                  f"{t['control_ratio']:.3f}",
                  f"{t['plain']['runs']}/{t['lean']['runs']}",
                  f"{t['plain']['cpu_ratio']:.2f}/{t['lean']['cpu_ratio']:.2f}", cpu]
                 for t in timings])
    for t in timings:  # the JSON keeps the statistics, not every sample
        for form in ("plain", "lean", "plain_again"):
            t[form].pop("samples_s")
    path = write_json(results_dir(args) / "graph_nodes.json", payload(
        "graph_nodes", threads=args.threads, cache_slots=CACHE_SLOTS, index=INDEX, source_length=SOURCE_LENGTH,
        note="other processes may share the CPU; plain and lean are timed interleaved",
        nodes=counts, results=timings))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
