"""The API server under load: sentences per second and latency at 1, 8, 32 and 128 concurrent
clients, with dynamic batching on and off (--max-batch-size 1), for a beam search (the demo
run's, beam 4) and greedy search, and the server's peak memory.

    python -m bench.serve --export runs/demo/export --sentences runs/demo/test.src
        [--clients 1 8 32 128] [--beams 4 1] [--seconds 10] [--max-batch-size 32]
        [--batch-wait-ms 5]

Each mode starts `python -m export.api` in its own process (onnx runtime, one worker); each
client (an asyncio task over one keep-alive connection) sends one sentence per request, the
sentences in turn, and waits for its answer before the next, for --seconds after a warm-up.
The clients share this process; their CPU is part of what the machine spends. Writes
bench/results/serve.json (bench/results/quick/ with --quick) and prints the table with the
CPU model.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.common import add_results_option, payload, results_dir, write_json
from keras_transformer.command_line import CommandError, add_debug_flag, entry_point, int_in

CLIENTS = (1, 8, 32, 128)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.serve",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", default="runs/demo/export", help="a translator's export")
    parser.add_argument("--sentences", default="runs/demo/test.src",
                        help="one sentence a line (default: the demo's test sentences)")
    parser.add_argument("--clients", type=int_in(1, 1024), nargs="+", default=list(CLIENTS))
    parser.add_argument("--beams", type=int_in(1, 64), nargs="+", default=[4, 1],
                        help="beam sizes the requests ask for (default 4, the demo run's, "
                             "and 1)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="timed seconds per cell, after a warm-up (default 10)")
    parser.add_argument("--max-batch-size", type=int_in(2, 256), default=32,
                        help="the batching mode's --max-batch-size (default 32)")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true",
                        help="2 s per cell, 1 and 8 clients: a smoke test")
    parser.add_argument("--note", default=None,
                        help="what the results page says about the export (e.g. how its "
                             "model was made)")
    add_results_option(parser)
    add_debug_flag(parser)
    return parser.parse_args(argv)


def start(export: str, log: Path, *options) -> tuple[subprocess.Popen, str]:
    """`python -m export.api` on a free port, its output in `log` (a pipe left unread would
    stall it once full): the process and its URL."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "export.api", "--export", export, "--port", "0",
             "--max-queue", "8192", *map(str, options)], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        for word in log.read_text(errors="replace").split():
            if word.startswith("http://"):
                return process, word.rstrip("/")
        time.sleep(0.2)
    process.kill()
    raise CommandError(f"export.api did not start: {log.read_text(errors='replace')[-2000:]}",
                       1)


def batch_counts(url: str) -> tuple[float, float]:
    """(inputs run, batches run) so far, from the server's /metrics."""
    import httpx

    values = dict(line.rsplit(" ", 1) for line in httpx.get(f"{url}/metrics").text.splitlines()
                  if line.startswith("kt_batch_size_"))
    return float(values["kt_batch_size_sum"]), float(values["kt_batch_size_count"])


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident memory (VmHWM), in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def load(url: str, sentences: list[str], clients: int, seconds: float,
               beam: int) -> dict:
    """`clients` loops of request-then-answer for `seconds` (after 1 s of warm-up) ->
    sentences/s (answers that arrived within those seconds), the latency percentiles of the
    requests sent within them, and the answers that failed."""
    import httpx

    latencies: list[float] = []
    answered = 0
    errors: Counter = Counter()
    failed = 0
    warm_until = time.monotonic() + 1.0
    stop_at = warm_until + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        async def client(n: int) -> None:
            nonlocal failed, answered
            i = n
            while time.monotonic() < stop_at:
                text = sentences[i % len(sentences)]
                i += clients
                sent = time.monotonic()
                try:
                    answer = await http.post(f"{url}/v1/translate",
                                             json={"inputs": [text], "beam_size": beam})
                except httpx.TransportError as err:  # counted, as a status other than 200 is
                    errors[type(err).__name__] += 1
                    failed += 1
                    continue
                now = time.monotonic()
                if answer.status_code != 200:
                    errors[str(answer.status_code)] += 1
                    failed += 1
                    continue
                answered += warm_until <= now <= stop_at
                if sent >= warm_until:
                    latencies.append(now - sent)

        await asyncio.gather(*(client(n) for n in range(clients)))
    latencies.sort()
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 \
        else latencies * 99
    return {"clients": clients, "beam_size": beam, "sentences": answered,
            "sentences_per_s": round(answered / seconds, 2),
            "p50_ms": round(q[49] * 1000, 1), "p99_ms": round(q[98] * 1000, 1),
            "failed": failed, "errors": dict(errors)}


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    path = Path(args.sentences)
    if not path.is_file():
        raise CommandError(f"{path} is missing: train the demo (make demo) or pass "
                           f"--sentences")
    sentences = [s for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]
    clients = [1, 8] if args.quick else args.clients
    seconds = 2.0 if args.quick else args.seconds
    modes = {"batching": ["--max-batch-size", args.max_batch_size, "--batch-wait-ms",
                          args.batch_wait_ms],
             "no batching": ["--max-batch-size", 1]}
    # Before the first cell: its machine facts and load average are those the cells ran under.
    meta = payload("serve", export=args.export, note=args.note, sentences_file=args.sentences,
                   seconds=seconds, max_batch_size=args.max_batch_size,
                   batch_wait_ms=args.batch_wait_ms)
    cpu = meta["machine"]["cpu_model"]
    results = []
    for mode, options in modes.items():
        log = Path(tempfile.mkdtemp(prefix="bench-serve-")) / "api.log"
        process, url = start(args.export, log, *options)
        try:
            for beam, count in ((b, c) for b in args.beams for c in clients):
                inputs, batches = batch_counts(url)
                cell = asyncio.run(load(url, sentences, count, seconds, beam))
                inputs, batches = (a - b for a, b in zip(batch_counts(url), (inputs, batches),
                                                         strict=True))
                cell.update(mode=mode, peak_rss_mb=round(peak_rss_mb(process.pid) or 0, 1),
                            mean_batch=round(inputs / max(batches, 1), 1))
                results.append(cell)
                print(f"{mode:12} beam {beam}  {count:4d} clients  "
                      f"{cell['sentences_per_s']:8.1f} "
                      f"sentences/s  p50 {cell['p50_ms']:7.1f} ms  p99 {cell['p99_ms']:7.1f} ms"
                      f"  batch {cell['mean_batch']:5.1f}  peak {cell['peak_rss_mb']:.0f} MiB",
                      flush=True)
        finally:
            process.terminate()
            process.wait(timeout=120)
            said = log.read_text(errors="replace").splitlines()[1:]
            if said:  # what the server logged beyond its address line
                print(f"{mode}: the server said: " + " | ".join(said[-5:]), flush=True)
    print(f"CPU: {cpu}; export {args.export}, {len(sentences)} sentences, "
          f"{seconds:g} s per cell")
    out = write_json(results_dir(args) / "serve.json", {**meta, "results": results})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
