"""The API server under load: sentences per second and latency at 1, 8, 32 and 128 concurrent
clients, with dynamic batching on and off (--max-batch-size 1), for a beam search (the demo
run's, beam 4) and greedy search, and the server's peak memory.

    python -m bench.serve --export runs/demo/export --sentences runs/demo/test.src
        [--clients 1 8 32 128] [--beams 4 1] [--seconds 10] [--max-batch-size 32]
        [--batch-wait-ms 5] [--workers 1] [--timeout 30] [--variant float32]
        [--ceiling | --no-ceiling] [--plain-stack]

A summarizer's export is loaded the same way on /v1/summarize, with the articles of a TSV
file whose header names an article column as the inputs (`--sentences
../shared/data/vietnews/test.tsv.gz`); a copy-attention model has no ceiling (CTranslate2 does
not run copy attention).

Each mode starts `python -m export.api` in its own process (onnx runtime, one worker); each
client (an asyncio task over one keep-alive connection, a few lines of HTTP/1.1 rather than a
client package, whose milliseconds a request would be taken from the server) sends one
sentence per request, the sentences in turn, and waits for its answer before the next, for
--seconds after a warm-up. The clients share this process; their CPU is part of what the
machine spends, and each cell records the CPU milliseconds an input cost the server and the
clients. Writes
bench/results/serve.json (bench/results/quick/ with --quick) and prints the table with the
CPU model.

The ceiling (--ceiling, on when the peers' torch venv is there): CTranslate2's
translate_batch on the same sentences in one process, before the server's cells, in
batches of --max-batch-size (bench/precision_ct2.py --ceiling in the peers' venv), at the
compute type of the server's --variant (float32, or int8 against the export's int8 variant).
It is the best CTranslate2 does on this CPU, whichever layout: it is measured with
CT2_USE_MKL 0 and 1, each with one replica of all the usable cores and with one replica a
core (inter_threads, as the server's --workers runs one model a worker; also --workers
replicas when that lies between), and per beam the fastest setting is kept, every
setting's sentences/s recorded (`sentences_per_s_by_setting`). Its model is a random
Marian model of the export's shape (layers, d_model, heads, FFN, vocabulary), and each
sentence gets as many new tokens as the server gives it (the export's length rule; a
random-weight model's outputs run to it), so both decode the same work. Each batching cell
records its sentences/s as a fraction of the ceiling at its beam (`of_ceiling`); the goal
is read at 32 clients. The ceiling's own `batching_gain` is the kept setting's
sentences/s over one sentence a call with the same CT2_USE_MKL and one replica.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.common import (
    PEER_TORCH_PYTHON,
    add_results_option,
    payload,
    results_dir,
    write_json,
)
from bench.export_models import CACHE_DIR
from keras_transformer.command_line import (
    CommandError,
    add_debug_flag,
    entry_point,
    float_in,
    int_in,
)

CLIENTS = (1, 8, 32, 128)
# Where the goal is read: at this many clients, batching should reach 0.8x the ceiling.
GOAL_CLIENTS = 32


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.serve",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", default="runs/demo/export",
                        help="a translator's or an abstractive summarizer's export")
    parser.add_argument("--sentences", default="runs/demo/test.src",
                        help="one input a line (default: the demo's test sentences), or a "
                             "TSV file with an article column (VNDS, for a summarizer)")
    parser.add_argument("--clients", type=int_in(1, 1024), nargs="+", default=list(CLIENTS))
    parser.add_argument("--beams", type=int_in(1, 64), nargs="+", default=[4, 1],
                        help="beam sizes the requests ask for (default 4, the demo run's, "
                             "and 1)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="timed seconds per cell, after a warm-up (default 10)")
    parser.add_argument("--max-batch-size", type=int_in(2, 256), default=32,
                        help="the batching mode's --max-batch-size (default 32)")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0)
    parser.add_argument("--workers", type=int_in(1, 64), default=1,
                        help="the server's --workers in every mode (default 1)")
    parser.add_argument("--timeout", type=float_in(0.1, 3600), default=30.0,
                        help="the server's --timeout in every mode, seconds (default 30): "
                             "unbatched cells of long inputs at many clients need more")
    parser.add_argument("--variant", default="float32", choices=("float32", "int8"),
                        help="the export's variant the server runs (export.api --variant); "
                             "the ceiling runs CTranslate2 at the same compute type")
    parser.add_argument("--plain-stack", action="store_true",
                        help="also the batching mode on uvicorn's plain event loop and HTTP "
                             "parser (asyncio, h11), against its default (uvloop, httptools "
                             "where installed)")
    parser.add_argument("--quick", action="store_true",
                        help="2 s per cell, 1 and 8 clients: a smoke test")
    parser.add_argument("--ceiling", action=argparse.BooleanOptionalAction, default=None,
                        help="measure CTranslate2's in-process ceiling (default: when "
                             "--ct2-python exists)")
    parser.add_argument("--ct2-python", type=Path, default=PEER_TORCH_PYTHON,
                        help="the peers' torch venv's python, which has CTranslate2")
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR,
                        help="where the ceiling's converted model is kept")
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


def server_health(url: str) -> dict:
    """The server's GET /health (its settings: the event loop and HTTP parser it runs)."""
    import httpx

    return httpx.get(f"{url}/health").json()


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident memory (VmHWM), in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads the answer by its
    Content-Length (every non-streamed answer of export.api has one). A few lines of asyncio
    streams instead of an HTTP client package: the clients share the server's CPU, and a
    client that spends milliseconds a request starves the server it measures."""

    def __init__(self, url: str):
        host, _, port = url.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port or 80)
        self.reader = self.writer = None

    async def post(self, path: str, body: bytes) -> int:
        """-> the answer's status; ConnectionError (the connection is closed then) when the
        server hung up or sent what this client does not read."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json"
                          b"\r\nContent-Length: %d\r\n\r\n%s"
                          % (path.encode(), self.host.encode(), len(body), body))
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            status = int(lines[0].split(b" ", 2)[1])
            fields = {name.strip().lower(): value.strip() for name, _, value in
                      (line.partition(b":") for line in lines[1:] if line)}
            if b"content-length" not in fields:
                raise ConnectionError(f"an answer without Content-Length (status {status})")
            await self.reader.readexactly(int(fields[b"content-length"]))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                IndexError) as err:
            self.close()
            raise ConnectionError(f"a broken answer: {type(err).__name__}") from None
        except ConnectionError:
            self.close()
            raise
        if fields.get(b"connection", b"").lower() == b"close":
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def cpu_seconds(pid: int) -> float:
    """The user + system CPU seconds a process has spent so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """The user + system CPU seconds this process (the clients) has spent so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def load(url: str, sentences: list[str], clients: int, seconds: float,
               beam: int, route: str = "/v1/translate") -> dict:
    """`clients` loops of request-then-answer, each over its own keep-alive connection, for
    `seconds` (after 1 s of warm-up) -> sentences/s (answers that arrived within those
    seconds), the latency percentiles of the requests sent within them, and the answers that
    failed."""
    latencies: list[float] = []
    answered = 0
    errors: Counter = Counter()
    failed = 0
    warm_until = time.monotonic() + 1.0
    stop_at = warm_until + seconds
    bodies = [json.dumps({"inputs": [text], "beam_size": beam}).encode() for text in sentences]

    async def client(n: int) -> None:
        nonlocal failed, answered
        connection = Connection(url)
        i = n
        try:
            while time.monotonic() < stop_at:
                body = bodies[i % len(bodies)]
                i += clients
                sent = time.monotonic()
                try:
                    status = await connection.post(route, body)
                except OSError as err:  # counted, as a status other than 200 is
                    errors[type(err).__name__] += 1
                    failed += 1
                    continue
                now = time.monotonic()
                if status != 200:
                    errors[str(status)] += 1
                    failed += 1
                    continue
                answered += warm_until <= now <= stop_at
                if sent >= warm_until:
                    latencies.append(now - sent)
        finally:
            connection.close()

    await asyncio.gather(*(client(n) for n in range(clients)))
    latencies.sort()
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 \
        else latencies * 99
    return {"clients": clients, "beam_size": beam, "sentences": answered,
            "sentences_per_s": round(answered / seconds, 2),
            "p50_ms": round(q[49] * 1000, 1), "p99_ms": round(q[98] * 1000, 1),
            "failed": failed, "errors": dict(errors)}


def ceiling_work(export: str, sentences: list[str], beams, max_batch_size: int,
                 seconds: float) -> dict:
    """What the server decodes for `sentences`, for bench/precision_ct2.py --ceiling: each
    one's source ids and length limit as the server's engine prepares a request of it (its
    encoder, its length rule), the export's model shape in the peers' terms, and the name of
    that shape's converted model."""
    import hashlib

    from export.common import Manifest
    from export.kinds.seq2seq.engine import TranslatorEngine
    from export.runtime.base import Translator

    manifest = Manifest(export)
    # Preparing a request reads the tokenizer and the limits only: no runtime is loaded. The
    # limits do not depend on the beam (a request sets no max_length here).
    engine = TranslatorEngine(manifest, Translator(manifest, backend=None))
    prepared = [item for _, item, _ in engine.prepare(sentences, {"beam_size": beams[0]})]
    shape = export_shape(manifest)
    name = "serve-" + hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:12]
    return {"name": name, "shape": shape, "sources": [ids for ids, _ in prepared],
            "limits": [limit for _, limit in prepared], "beams": list(beams),
            "max_batch_size": max_batch_size, "seconds": seconds}


def export_shape(manifest) -> dict:
    """The export's model shape as the peers' configs give one (vocab, d_model, heads, ffn,
    enc_layers, dec_layers, dropout). The manifest lacks the FFN width: it is read from the
    run's model_config.json (the manifest names the run), checked against what the manifest
    does give."""
    model = manifest.model
    path = Path(manifest["run"]) / "model_config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CommandError(f"the ceiling needs the FFN width, which {manifest.root}'s "
                           f"manifest does not give: {path} is unreadable ({err}); pass "
                           f"--no-ceiling", 2) from None
    keys = ("d_model", "num_heads", "num_encoder_layers", "num_decoder_layers")
    if any(config[k] != model.get(k, config[k]) for k in keys) or (
            config["target_vocab_size"] != manifest["vocab"]["target_size"]):
        raise CommandError(f"{path} is not the shape of {manifest.root}'s model (re-exported "
                           f"since?); pass --no-ceiling", 2)
    # The output layer is the target vocabulary's (the exports here share one vocabulary).
    return {"vocab": config["target_vocab_size"], "d_model": config["d_model"],
            "heads": config["num_heads"], "ffn": config["d_ff"],
            "enc_layers": config["num_encoder_layers"],
            "dec_layers": config["num_decoder_layers"], "dropout": config["dropout"]}


def ceiling_replicas(cores: int, workers: int = 1) -> list[int]:
    """The replica counts the ceiling is measured with: 1, the server's --workers (when
    within the cores) and one a core."""
    return sorted({1, cores, *([workers] if workers <= cores else [])})


def setting_name(mkl: str, replicas: int) -> str:
    return f"mkl={mkl},replicas={replicas}"


def measure_ceiling(args, work: dict) -> list[dict]:
    """CTranslate2's sentences/s on `work`, per beam, in the peers' venv, once per CT2_USE_MKL
    setting (its default on a CPU may be the slower) and replica count (ceiling_replicas):
    the fastest setting per beam, every one kept."""
    from bench.precision import CT2_MKL_SETTINGS, ct2_command
    from export.runtime import usable_cores

    runs = {}
    with tempfile.TemporaryDirectory(prefix="bench-serve-ct2-") as tmp:
        work_path, out = Path(tmp) / "work.json", Path(tmp) / "ceiling.json"
        work_path.write_text(json.dumps(work))
        for mkl in CT2_MKL_SETTINGS:
            for replicas in ceiling_replicas(usable_cores(), args.workers):
                cmd, env = ct2_command(args, args.variant, mkl, "--ceiling", str(work_path),
                                       "--replicas", str(replicas), "--out", str(out))
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
                if proc.returncode != 0 or not out.exists():
                    raise RuntimeError(f"CT2_USE_MKL={mkl}, --replicas {replicas}: "
                                       f"{proc.stderr[-1500:]}")
                runs[mkl, replicas] = json.loads(out.read_text())
                out.unlink()
    return best_ceiling(runs, work)


def best_ceiling(runs: dict, work: dict) -> list[dict]:
    """{(CT2_USE_MKL, replicas): precision_ct2 --ceiling's output} -> one row per beam, the
    setting with the most sentences/s, each setting's figure kept (sentences_per_s_by_setting,
    keyed setting_name). Its batching_gain is against the one-sentence calls of the same
    CT2_USE_MKL setting with one replica (the runs of more replicas time none)."""
    rows = []
    for beam in work["beams"]:
        def cell(run, batch, beam=beam):
            return next((r for r in run["results"] if r["beam_size"] == beam
                         and r.get("max_batch_size", work["max_batch_size"]) == batch), None)

        by_setting = {key: cell(run, work["max_batch_size"]) for key, run in runs.items()}
        by_setting = {key: c for key, c in by_setting.items() if c is not None}
        best = max(by_setting, key=lambda k: by_setting[k]["sentences_per_s"])
        mkl, replicas = best
        row, run = dict(by_setting[best]), runs[best]
        one = runs.get((mkl, 1))
        single = cell(one, 1) if one is not None else None
        if single is not None:  # the same MKL setting's one-sentence calls, one replica
            row.update(unbatched_sentences_per_s=single["sentences_per_s"],
                       batching_gain=round(row["sentences_per_s"]
                                           / max(single["sentences_per_s"], 1e-9), 2))
        rows.append({**row, "ct2_use_mkl": mkl, "replicas": replicas,
                     "intra_threads": run.get("intra_threads",
                                              max(1, run["threads"] // replicas)),
                     "sentences_per_s_by_setting": {setting_name(*key): c["sentences_per_s"]
                                                    for key, c in by_setting.items()},
                     "runtime": "ctranslate2", "compute_type": run["compute_type_used"],
                     "ct2_version": run["versions"]["ctranslate2"],
                     "threads": run["threads"], "max_batch_size": work["max_batch_size"],
                     "shape": work["shape"], "sentences_per_pass": len(work["sources"])})
    return rows


def against_ceiling(results: list[dict], ceiling: list[dict]) -> list[dict]:
    """Each batching cell's sentences/s as a fraction of the ceiling at its beam, set on the
    cell as `of_ceiling`; -> per beam, the ceiling and the cell at GOAL_CLIENTS clients (or
    the most clients measured, when that count was not)."""
    by_beam = {c["beam_size"]: c["sentences_per_s"] for c in ceiling}
    summary = []
    for beam, top in by_beam.items():
        cells = {r["clients"]: r for r in results
                 if r["mode"] == "batching" and r["beam_size"] == beam}
        for cell in cells.values():
            cell["of_ceiling"] = round(cell["sentences_per_s"] / top, 3) if top else None
        clients = GOAL_CLIENTS if GOAL_CLIENTS in cells else max(cells, default=None)
        cell = cells.get(clients, {})
        summary.append({"beam_size": beam, "ceiling_sentences_per_s": top, "clients": clients,
                        "batching_sentences_per_s": cell.get("sentences_per_s"),
                        "of_ceiling": cell.get("of_ceiling")})
    return summary


def read_inputs(path: Path) -> list[str]:
    """The inputs the clients send: a text file's non-empty lines, or the articles of a TSV
    file whose header names an article column (`.tsv`, `.tsv.gz`: VNDS, for a
    summarizer)."""
    if not path.is_file():
        raise CommandError(f"{path} is missing: train the demo (make demo) or pass "
                           f"--sentences")
    if path.name.endswith((".tsv", ".tsv.gz")):
        from train.data import load_summaries

        try:
            return load_summaries(path).articles
        except ValueError as err:
            raise CommandError(str(err), 2) from None
    try:
        return [s for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]
    except UnicodeDecodeError:
        raise CommandError(f"{path} is not UTF-8 text: give one input per line", 2) from None


def export_route(export: str) -> tuple[str, bool]:
    """(route, copy attention) of a translator's or summarizer's export, the kinds
    whose route searches (beam_size); a one-line CommandError for another."""
    from export.common import ExportError, Manifest

    try:
        manifest = Manifest(export)
    except ExportError as err:
        raise CommandError(str(err), 2) from None
    if manifest.kind != "translator":
        raise CommandError(f"{export} holds a {manifest.kind}'s export; bench.serve loads "
                           f"a translator's or an abstractive summarizer's (a search)", 2)
    route = "/v1/summarize" if manifest.task == "summarization" else "/v1/translate"
    return route, bool(manifest.model.get("copy_attention"))


def ceiling_wanted(args) -> bool:
    """--ceiling/--no-ceiling, else whether the peers' venv is there (a line says how to make
    it when not)."""
    if args.ceiling is None and not args.ct2_python.exists():
        print(f"no CTranslate2 ceiling: {args.ct2_python} is missing (make it with "
              f"`bash ../shared/peers/setup_venvs.sh`, or pass --ct2-python)", flush=True)
        return False
    if args.ceiling and not args.ct2_python.exists():
        raise CommandError(f"--ceiling: {args.ct2_python} is missing: make it with `bash "
                           f"../shared/peers/setup_venvs.sh`, or pass --ct2-python", 2)
    return args.ceiling is not False


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    sentences = read_inputs(Path(args.sentences))
    route, copy = export_route(args.export)
    clients = [1, 8] if args.quick else args.clients
    seconds = 2.0 if args.quick else args.seconds
    modes = {"batching": ["--max-batch-size", args.max_batch_size, "--batch-wait-ms",
                          args.batch_wait_ms, "--workers", args.workers,
                          "--variant", args.variant, "--timeout", args.timeout],
             "no batching": ["--max-batch-size", 1, "--workers", args.workers,
                             "--variant", args.variant, "--timeout", args.timeout]}
    if args.plain_stack:
        modes["batching, plain"] = [*modes["batching"], "--loop", "asyncio", "--http", "h11"]
    # Before the first cell: its machine facts and load average are those the cells ran under.
    meta = payload("serve", export=args.export, note=args.note, sentences_file=args.sentences,
                   seconds=seconds, max_batch_size=args.max_batch_size,
                   batch_wait_ms=args.batch_wait_ms, workers=args.workers,
                   variant=args.variant, timeout_s=args.timeout)
    cpu = meta["machine"]["cpu_model"]
    ceiling, ceiling_error = [], None
    if copy and args.ceiling is None:
        print("no CTranslate2 ceiling: the export's model has copy attention, which "
              "CTranslate2 does not run", flush=True)
    elif copy and args.ceiling:
        raise CommandError("--ceiling: the export's model has copy attention, which "
                           "CTranslate2 does not run; pass --no-ceiling", 2)
    elif ceiling_wanted(args):
        try:
            work = ceiling_work(args.export, sentences, args.beams, args.max_batch_size,
                                seconds)
            meta.update(ceiling_shape=work["shape"])
            ceiling = measure_ceiling(args, work)
        except (CommandError, RuntimeError, OSError, ValueError) as err:
            # The server's cells are still measured; an asked-for ceiling fails the run after.
            ceiling_error = str(err)
            print(f"the CTranslate2 ceiling failed: {ceiling_error}", flush=True)
        for row in ceiling:
            print(f"{'CT2 ceiling':12} beam {row['beam_size']}  batch {row['max_batch_size']:3d}"
                  f"       {row['sentences_per_s']:8.1f} sentences/s  (translate_batch, "
                  f"{row['compute_type']}, CT2_USE_MKL={row['ct2_use_mkl']}, "
                  f"{row['replicas']} replica(s) x {row['intra_threads']} thread(s); "
                  + ", ".join(f"{m}: {v:.1f}" for m, v in
                              row["sentences_per_s_by_setting"].items())
                  + (f"; one sentence a call {row['unbatched_sentences_per_s']:.1f}, "
                     f"mkl={row['ct2_use_mkl']},replicas=1, batching gain "
                     f"{row['batching_gain']:.2f}x" if "unbatched_sentences_per_s" in row
                     else "") + ")", flush=True)
            per_call = row["sentences"] / max(row["calls"], 1)
            if per_call < args.max_batch_size / 2:
                # Its calls group sentences of one length limit: few sentences, small calls.
                print(f"note: the ceiling's calls held {per_call:.1f} sentences on average "
                      f"({len(sentences)} sentences in {args.sentences}), under half of "
                      f"--max-batch-size {args.max_batch_size}: give more sentences for a "
                      f"batched ceiling", flush=True)
    results = []
    for mode, options in modes.items():
        log = Path(tempfile.mkdtemp(prefix="bench-serve-")) / "api.log"
        process, url = start(args.export, log, *options)
        try:
            health = server_health(url)
            stack = f"{health['loop']}+{health['http']}"
            for beam, count in ((b, c) for b in args.beams for c in clients):
                inputs, batches = batch_counts(url)
                server_cpu, client_cpu = cpu_seconds(process.pid), own_cpu_seconds()
                cell = asyncio.run(load(url, sentences, count, seconds, beam, route))
                inputs, batches = (a - b for a, b in zip(batch_counts(url), (inputs, batches),
                                                         strict=True))
                per_input = 1000 / max(inputs, 1)
                cell.update(mode=mode, stack=stack,
                            peak_rss_mb=round(peak_rss_mb(process.pid) or 0, 1),
                            mean_batch=round(inputs / max(batches, 1), 1),
                            server_cpu_ms=round(
                                (cpu_seconds(process.pid) - server_cpu) * per_input, 2),
                            client_cpu_ms=round((own_cpu_seconds() - client_cpu) * per_input,
                                                2))
                results.append(cell)
                print(f"{mode:15} {stack:17} beam {beam}  {count:4d} clients  "
                      f"{cell['sentences_per_s']:8.1f} "
                      f"sentences/s  p50 {cell['p50_ms']:7.1f} ms  p99 {cell['p99_ms']:7.1f} ms"
                      f"  batch {cell['mean_batch']:5.1f}  CPU ms an input: server "
                      f"{cell['server_cpu_ms']:.2f}, clients {cell['client_cpu_ms']:.2f}  "
                      f"peak {cell['peak_rss_mb']:.0f} MiB",
                      flush=True)
        finally:
            process.terminate()
            process.wait(timeout=120)
            said = log.read_text(errors="replace").splitlines()[1:]
            if said:  # what the server logged beyond its address line
                print(f"{mode}: the server said: " + " | ".join(said[-5:]), flush=True)
    summary = against_ceiling(results, ceiling)
    for row in summary:
        if row["of_ceiling"] is not None:
            print(f"beam {row['beam_size']}: batching at {row['clients']} clients "
                  f"{row['batching_sentences_per_s']:.1f} sentences/s = "
                  f"{row['of_ceiling']:.2f}x the CTranslate2 ceiling "
                  f"({row['ceiling_sentences_per_s']:.1f})")
    print(f"CPU: {cpu}; export {args.export} ({args.variant}), {len(sentences)} sentences, "
          f"{seconds:g} s per cell")
    extra = {"ceiling": ceiling, "against_ceiling": summary} if ceiling else {}
    if ceiling_error:
        extra["ceiling_error"] = ceiling_error[:2000]
    out = write_json(results_dir(args) / "serve.json", {**meta, **extra, "results": results})
    print(f"wrote {out}")
    return 1 if ceiling_error and args.ceiling else 0


if __name__ == "__main__":
    sys.exit(main())
