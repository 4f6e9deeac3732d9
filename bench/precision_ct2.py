"""CTranslate2 decoding at one compute type, for bench.precision (which runs it in the peers'
torch venv, one process per compute type and CT2_USE_MKL setting).

    /tmp/peers/torch/bin/python bench/precision_ct2.py --peers-dir ../shared/peers \\
        --compute-type int8 --configs small base --out /tmp/ct2_int8.json
    ... --compute-type float32 --configs small --serve   # for bench.duel

With --serve (one config) it times what it is asked: each line "batch beam calls" on stdin is
answered by one line on stdout, the JSON list of those calls' seconds (or {"error": ...}),
so that bench.duel can alternate it call by call with ours.

With --ceiling WORK.json (and --out) it is bench.serve's ceiling: the sentences/s of
translate_batch on the server's own work, which WORK.json gives (written by bench.serve):
each sentence's source ids and length limit, the export's model shape, the beams, the batch
size and the seconds. The model is a random Marian model of that shape (made once, by
../shared/peers/bench_ct2.py's prepare under a name of the shape); every sentence gets
exactly its limit of new tokens, as the server's random-weight outputs run to their limit.
--replicas R (default 1) runs R model replicas, inter_threads=R with intra_threads = the
cores // R (1 at least), as the server's --workers R runs R models of cores/R threads: the
batches (of the server's size, one length limit each) are submitted with asynchronous=True,
2R in flight, so that each replica takes the next batch as soon as it is free, as a server
worker does; the sentences counted are those of the batches finished. Each beam is timed in
batches of the server's size and, with one replica only, again one sentence a call, which
says what batching gains CTranslate2 itself on this CPU (a run with R > 1 has no
one-sentence cells: bench.serve reads the gain against one replica's).

The model is the peers' random Marian model of each config, converted once by
../shared/peers/bench_ct2.py (--prepare, into $PEER_BENCH_MODELS). Source = 32 random ids,
exactly 32 new tokens per row (min = max decoding length), inter_threads 1, intra_threads =
the cores. A compute type this CPU does not support is an error row, not a fallback. Only
the standard library and ctranslate2 are imported (not this project, which the venv lacks).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path


def time_cell(fn, warmup: int, repeats: int, min_seconds: float) -> dict:
    """warmup calls, then `repeats` rounds of at least min_seconds / repeats (one call at
    least), as bench.common.time_interleaved times one cell."""
    for _ in range(warmup):
        fn()
    samples, cpu = [], 0.0
    share = min_seconds / max(repeats, 1)
    for _ in range(max(repeats, 1)):
        start, cpu0 = time.perf_counter(), time.process_time()
        while True:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
            if time.perf_counter() - start >= share:
                break
        cpu += time.process_time() - cpu0
    q = (statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1
         else [samples[0], samples[0], samples[0]])
    return {"median_s": statistics.median(samples), "p25_s": q[0], "p75_s": q[2],
            "runs": len(samples), "samples_s": samples,
            "cpu_ratio": round(cpu / max(sum(samples), 1e-9), 3)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers-dir", type=Path, required=True)
    parser.add_argument("--compute-type", required=True)
    parser.add_argument("--configs", nargs="+", default=["small", "base"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=1.5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve", action="store_true",
                        help="time the cells asked on stdin (one config; see above)")
    parser.add_argument("--ceiling", type=Path, metavar="WORK_JSON",
                        help="bench.serve's ceiling on this work, into --out (see above)")
    parser.add_argument("--replicas", type=int, default=1, metavar="R",
                        help="with --ceiling: R model replicas (inter_threads), each of the "
                             "cores // R intra-op threads (default 1)")
    parser.add_argument("--prepare-shape", type=Path, metavar="WORK_JSON",
                        help="only make the Marian model of this work's shape (a process of "
                             "its own, so that torch is not loaded while timing)")
    args = parser.parse_args(argv)
    if args.prepare_shape is None and (
            args.serve == (args.out is not None) or (args.serve and len(args.configs) != 1)):
        parser.error("give either --out (with --ceiling or not), --serve with one config, or "
                     "--prepare-shape")
    if args.replicas < 1 or (args.replicas != 1 and args.ceiling is None):
        parser.error("--replicas is a positive count, and only --ceiling takes one")
    sys.path.insert(0, str(args.peers_dir.resolve()))
    import common  # the peers' shared helpers (stdlib only)

    if args.prepare_shape is not None:
        import bench_ct2

        work = json.loads(args.prepare_shape.read_text())
        common.CONFIGS[work["name"]] = work["shape"]
        bench_ct2.prepare(work["name"])
        return
    import ctranslate2
    from bench_ct2 import backend_info, ensure_prepared, token_str

    threads = os.cpu_count() or 1
    new_tokens, source_length = common.NEW_TOKENS, common.SRC_LEN
    if args.serve:
        serve(args.configs[0], args.compute_type, threads, args.batches)
        return
    if args.ceiling is not None:
        out = ceiling(args.ceiling, args.peers_dir, args.compute_type, usable_cores(),
                      args.replicas)
        args.out.write_text(json.dumps(out, indent=2))
        return
    rows, info = [], {}
    for cfg in args.configs:
        ct2_dir = ensure_prepared(cfg)
        vocab = common.CONFIGS[cfg]["vocab"]
        base = {"runtime": "ctranslate2", "precision": args.compute_type, "config": cfg,
                "new_tokens": new_tokens, "source_length": source_length,
                "ct2_use_mkl": os.environ.get("CT2_USE_MKL")}
        try:
            translator = ctranslate2.Translator(str(ct2_dir), device="cpu",
                                                compute_type=args.compute_type,
                                                inter_threads=1, intra_threads=threads)
        except (ValueError, RuntimeError) as err:
            rows += [{**base, "batch": b, "beam": k, "error": f"{type(err).__name__}: {err}"}
                     for b in args.batches for k in args.beams]
            continue
        info[cfg] = {"compute_type_used": translator.compute_type,
                     "backend_info": backend_info(
                         ct2_dir, args.compute_type,
                         argparse.Namespace(inter_threads=1, intra_threads=threads))}
        # Greedy tokens of 4 sources against the HF float32 model's (the peers' cross-check):
        # how far the compute type moves a random-weight model's choices.
        ref = json.loads((ct2_dir / "hf_reference.json").read_text())
        out = translator.translate_batch([[token_str(i, vocab) for i in s] for s in ref["src"]],
                                         beam_size=1, min_decoding_length=new_tokens,
                                         max_decoding_length=new_tokens)
        hyp = [[int(t[1:]) if t.startswith("t") else t for t in r.hypotheses[0]] for r in out]
        same = sum(a == b for h, r in zip(hyp, ref["hf_greedy"], strict=True)
                   for a, b in zip(h, r, strict=False))
        info[cfg]["tokens_equal_to_hf_float32_greedy"] = [same, sum(map(len, ref["hf_greedy"]))]
        for batch, source in sources(cfg, args.batches).items():
            for beam in args.beams:
                def run(source=source, beam=beam, translator=translator):
                    run.out = translate(translator, source, beam)

                t = time_cell(run, args.warmup, args.repeats, args.min_seconds)
                row = {**base, "batch": batch, "beam": beam, **t,
                       "tokens_per_s": batch * new_tokens / t["median_s"],
                       "ms_per_batch": {"median": t["median_s"] * 1e3,
                                        "p25": t["p25_s"] * 1e3, "p75": t["p75_s"] * 1e3,
                                        "runs": t["runs"]}}
                error = length_error(run.out)
                if error:
                    row = {**base, "batch": batch, "beam": beam, "error": error}
                rows.append(row)
                print(f"ct2 {args.compute_type} mkl={base['ct2_use_mkl']} {cfg} b={batch} "
                      f"beam={beam}: {t['median_s'] * 1e3:.1f} ms", flush=True)
        translator = None  # freed before the next config loads
    args.out.write_text(json.dumps({"versions": {"ctranslate2": ctranslate2.__version__},
                                    "supported_compute_types_cpu": sorted(
                                        ctranslate2.get_supported_compute_types("cpu")),
                                    "info": info, "results": rows}, indent=2))


def sources(cfg: str, batches) -> dict:
    """{batch: that batch's source sentences as tokens}: common.SRC_LEN random ids per row,
    from one generator seeded with common.SEED and drawn in the order of `batches`."""
    import common
    from bench_ct2 import token_str

    vocab = common.CONFIGS[cfg]["vocab"]
    rng = random.Random(common.SEED)
    return {batch: [[token_str(i, vocab) for i in s]
                    for s in common.random_ids(rng, batch, common.SRC_LEN, vocab)]
            for batch in batches}


def translate(translator, source, beam: int):
    """One timed call: exactly common.NEW_TOKENS new tokens per row (min = max length)."""
    import common

    return translator.translate_batch(source, beam_size=beam, max_batch_size=0,
                                      min_decoding_length=common.NEW_TOKENS,
                                      max_decoding_length=common.NEW_TOKENS)


def length_error(out) -> str | None:
    """What is wrong with a call's output lengths, or None."""
    import common

    lengths = {len(r.hypotheses[0]) for r in out}
    if lengths != {common.NEW_TOKENS}:
        return f"expected {common.NEW_TOKENS} tokens per row, got {lengths}"
    return None


def serve(cfg: str, compute_type: str, threads: int, batches) -> None:
    """Answer "batch beam calls" lines with the calls' seconds (module docstring), over the
    sources main() times for the same --batches."""
    import ctranslate2
    from bench_ct2 import ensure_prepared

    try:
        translator = ctranslate2.Translator(str(ensure_prepared(cfg)), device="cpu",
                                            compute_type=compute_type, inter_threads=1,
                                            intra_threads=threads)
    except (ValueError, RuntimeError) as err:  # e.g. a compute type this CPU lacks
        translator, failure = None, f"{type(err).__name__}: {err}"
    batch_sources = sources(cfg, batches)
    for line in sys.stdin:
        batch, beam, calls = map(int, line.split())
        if translator is None or batch not in batch_sources:
            print(json.dumps({"error": failure if translator is None else
                              f"batch {batch} is not one of --batches {list(batches)}"}),
                  flush=True)
            continue
        seconds = []
        for _ in range(calls):
            start = time.perf_counter()
            out = translate(translator, batch_sources[batch], beam)
            seconds.append(time.perf_counter() - start)
        error = length_error(out)
        print(json.dumps({"error": error} if error else seconds), flush=True)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one), as
    export.runtime.usable_cores counts the server's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def length_batches(limits: list[int], batch: int) -> list[list[int]]:
    """The sentences' indices as translate_batch calls: sentences of one length limit
    together (a call sets one output length for all its rows), at most `batch` a call, the
    limits in increasing order and the sentences in their order within one."""
    by_limit: dict[int, list[int]] = {}
    for i, limit in enumerate(limits):
        by_limit.setdefault(limit, []).append(i)
    return [rows[j:j + batch] for _, rows in sorted(by_limit.items())
            for j in range(0, len(rows), batch)]


def ceiling(work_path: Path, peers_dir: Path, compute_type: str, threads: int,
            replicas: int = 1) -> dict:
    """Sentences per second of translate_batch on bench.serve's work (module docstring), per
    beam, with `replicas` model replicas of max(1, threads // replicas) intra-op threads
    each: one warm-up batch a replica, then batches until work["seconds"] have passed (one
    at least), in an order drawn once with common.SEED and repeated, so that a run shorter
    than a pass over every sentence still meets every length limit in proportion. The
    one-sentence cells are timed with one replica only."""
    import common
    import ctranslate2
    from bench_ct2 import token_str

    work = json.loads(work_path.read_text())
    ct2_dir = common.MODELS_DIR / f"ct2_{work['name']}"
    if not (ct2_dir / "model.bin").exists():
        import subprocess

        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--peers-dir",
                        str(peers_dir), "--compute-type", compute_type, "--prepare-shape",
                        str(work_path)], check=True)
    intra_threads = max(1, threads // replicas)
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type=compute_type,
                                        inter_threads=replicas, intra_threads=intra_threads)
    vocab = work["shape"]["vocab"]
    # The server's rows end in its EOS id; here the model's EOS token ends them, so that the
    # encoder reads as many positions.
    sources = [[token_str(i, vocab) for i in ids[:-1]] + ["</s>"] for ids in work["sources"]]
    limits = work["limits"]

    def submit(rows, beam):
        """One batch, queued for the first free replica (one job: max_batch_size 0)."""
        limit = limits[rows[0]]
        return limit, translator.translate_batch(
            [sources[i] for i in rows], beam_size=beam, max_batch_size=0, asynchronous=True,
            min_decoding_length=limit, max_decoding_length=limit)

    def wait(submitted):
        limit, pending = submitted
        lengths = {len(r.result().hypotheses[0]) for r in pending}
        if lengths != {limit}:
            raise RuntimeError(f"expected {limit} tokens per row, got {lengths}")

    results = []
    # Batches of the server's size, and (one replica) of one sentence: what batching gains
    # CTranslate2 itself on this CPU.
    for batch in dict.fromkeys((work["max_batch_size"], 1) if replicas == 1
                               else (work["max_batch_size"],)):
        calls = length_batches(limits, batch)
        order = random.Random(common.SEED).sample(calls, len(calls))
        for beam in work["beams"]:
            # Warm-up: the longest limit, once on each replica.
            for submitted in [submit(calls[-1], beam) for _ in range(replicas)]:
                wait(submitted)
            done = submitted_count = tokens = sentences = 0
            in_flight: collections.deque = collections.deque()
            start, cpu0 = time.perf_counter(), time.process_time()
            while True:
                # 2R batches queued or decoding: a replica never waits for this loop.
                while len(in_flight) < 2 * replicas:
                    rows = order[submitted_count % len(order)]
                    in_flight.append((rows, submit(rows, beam)))
                    submitted_count += 1
                rows, submitted = in_flight.popleft()
                wait(submitted)
                done, sentences = done + 1, sentences + len(rows)
                tokens += len(rows) * limits[rows[0]]
                if time.perf_counter() - start >= work["seconds"]:
                    break
            while in_flight:  # the batches already queued are finished and counted
                rows, submitted = in_flight.popleft()
                wait(submitted)
                done, sentences = done + 1, sentences + len(rows)
                tokens += len(rows) * limits[rows[0]]
            elapsed = time.perf_counter() - start
            results.append({"beam_size": beam, "max_batch_size": batch, "calls": done,
                            "seconds": round(elapsed, 3), "sentences": sentences,
                            "sentences_per_s": round(sentences / elapsed, 2),
                            "new_tokens": tokens, "passes": round(done / len(order), 2),
                            "cpu_ratio": round((time.process_time() - cpu0) / elapsed, 3)})
            print(f"ct2 {compute_type} mkl={os.environ.get('CT2_USE_MKL')} replicas "
                  f"{replicas}x{intra_threads} beam {beam} batches of {batch}: "
                  f"{results[-1]['sentences_per_s']:.1f} sentences/s", file=sys.stderr,
                  flush=True)
    return {"versions": {"ctranslate2": ctranslate2.__version__},
            "compute_type_used": translator.compute_type, "threads": threads,
            "replicas": replicas, "intra_threads": intra_threads,
            "ct2_use_mkl": os.environ.get("CT2_USE_MKL"), "results": results}


if __name__ == "__main__":
    main()
