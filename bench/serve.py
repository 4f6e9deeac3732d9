"""The API server under load: sentences per second and latency at 1, 8, 32 and 128 concurrent
clients, with dynamic batching on and off (--max-batch-size 1), and the server's peak memory.

    python -m bench.serve --export runs/demo/export --sentences runs/demo/test.src
        [--clients 1 8 32 128] [--seconds 10] [--max-batch-size 32] [--batch-wait-ms 5]

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
import time
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
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="timed seconds per cell, after a warm-up (default 10)")
    parser.add_argument("--max-batch-size", type=int_in(2, 256), default=32,
                        help="the batching mode's --max-batch-size (default 32)")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true",
                        help="2 s per cell, 1 and 8 clients: a smoke test")
    add_results_option(parser)
    add_debug_flag(parser)
    return parser.parse_args(argv)


def start(export: str, *options) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "export.api", "--export", export, "--port", "0",
         "--max-queue", "8192", *map(str, options)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = process.stdout.readline()
    url = next((w.rstrip("/") for w in line.split() if w.startswith("http://")), None)
    if url is None:
        process.kill()
        raise CommandError(f"export.api did not start: {line}{process.stdout.read()[-2000:]}",
                           1)
    return process, url


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident memory (VmHWM), in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def load(url: str, sentences: list[str], clients: int, seconds: float) -> dict:
    """`clients` loops of request-then-answer for `seconds` (after 1 s of warm-up) ->
    sentences/s, latency percentiles and the answers that failed."""
    import httpx

    latencies: list[float] = []
    failed = 0
    warm_until = time.monotonic() + 1.0
    stop_at = warm_until + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        async def client(n: int) -> None:
            nonlocal failed
            i = n
            while time.monotonic() < stop_at:
                text = sentences[i % len(sentences)]
                i += clients
                sent = time.monotonic()
                answer = await http.post(f"{url}/v1/translate", json={"inputs": [text]})
                if answer.status_code != 200:
                    failed += 1
                elif sent >= warm_until:
                    latencies.append(time.monotonic() - sent)

        await asyncio.gather(*(client(n) for n in range(clients)))
    latencies.sort()
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 \
        else latencies * 99
    return {"clients": clients, "sentences": len(latencies),
            "sentences_per_s": round(len(latencies) / seconds, 2),
            "p50_ms": round(q[49] * 1000, 1), "p99_ms": round(q[98] * 1000, 1),
            "failed": failed}


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
    from bench.common import machine

    cpu = machine()["cpu_model"]
    results = []
    for mode, options in modes.items():
        process, url = start(args.export, *options)
        try:
            for count in clients:
                cell = asyncio.run(load(url, sentences, count, seconds))
                cell.update(mode=mode, peak_rss_mb=round(peak_rss_mb(process.pid) or 0, 1))
                results.append(cell)
                print(f"{mode:12} {count:4d} clients  {cell['sentences_per_s']:8.1f} "
                      f"sentences/s  p50 {cell['p50_ms']:7.1f} ms  p99 {cell['p99_ms']:7.1f} ms"
                      f"  peak {cell['peak_rss_mb']:.0f} MiB", flush=True)
        finally:
            process.terminate()
            process.wait(timeout=60)
    print(f"CPU: {cpu}; export {args.export}, {len(sentences)} sentences, "
          f"{seconds:g} s per cell")
    out = write_json(results_dir(args) / "serve.json", payload(
        "serve", export=args.export, sentences_file=args.sentences, seconds=seconds,
        max_batch_size=args.max_batch_size, batch_wait_ms=args.batch_wait_ms,
        results=results))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
