"""An HTTP API over any export, for traffic: dynamic batching, streamed tokens, metrics.

    python -m export.api --export runs/demo/export [--port 8000] [--host 127.0.0.1]
        [--max-batch-size 32] [--batch-wait-ms 5] [--workers 1] [--threads N] [--max-queue 1024]
        [--timeout 30] [--max-inputs 256] [--runtime onnx] [--variant float32]
        [--loop auto] [--http auto]

POST /v1/translate (a translation run's export), /v1/summarize (a summarization run's, or an
extractive summarizer's), /v1/classify (a classifier's), /v1/generate (a language model's)
or /v1/fill_mask (a masked language model's) takes {"inputs": ["...", ...]} and optional
settings ("beam_size", "alpha", ... within the bounds export.translate and export.generate
take; "top_k" for fill_mask) and answers {"outputs": [...]} in input order: each what the
line tool prints for that input alone (a classifier's: {"label", "score", "scores"}; a
masked LM's: per [MASK] its top_k {"piece", "id", "score"}). "stream": true on translate, summarize and generate answers
Server-Sent Events instead: each token as it is decided (greedy search; a beam's tokens come
with its final hypothesis), then each input's output. GET /health, GET /metrics (Prometheus'
text format) and GET /openapi.json describe the server.

Requests that arrive within --batch-wait-ms of each other and share their settings are run as
one batch of at most --max-batch-size inputs (1: no batching; after a batch of one input the
next does not wait), on --workers threads, each with its own model on --threads runtime threads
(default: the cores shared among the workers); beyond --max-queue waiting inputs a request is
answered 503, and one not answered within --timeout seconds 504. The body and connection limits
of export.serve hold (a larger body: --max-inputs inputs). Bad requests get a 4xx answer
{"error": "<what to fix>"} on one line. SIGTERM or Ctrl-C stops accepting connections, answers
what was accepted and exits 0.

Exit codes: 0 stopped; 2 bad usage (a missing or damaged export, a port that cannot be bound,
a web package not installed, an option out of range); 1 a failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
import threading
import time
from collections import Counter

from keras_transformer.command_line import (
    CommandError,
    add_debug_flag,
    command,
    entry_point,
    float_in,
    int_in,
)

from .batching import Batcher, Overloaded, Ticket
from .formats import RUNTIMES
from .inputs import InputError
from .runtime import Threads, usable_cores
from .serve import (
    CLOSE,
    MAX_CONCURRENCY,
    RequestError,
    bind,
    capped_body,
    check_encodable,
    decode_json,
    server_class,
)

WEB_PACKAGES = "starlette==1.10.0 uvicorn==0.54.0"  # as requirements.txt pins them
EXAMPLE = '{"inputs": ["..."]}'
ROUTES = ("/v1/translate", "/v1/summarize", "/v1/classify", "/v1/generate", "/v1/fill_mask")
# Upper bounds of the histograms' buckets: inputs per batch, seconds per request.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

log = logging.getLogger("export.api")


class Histogram:
    """A Prometheus histogram: counts per bucket upper bound, their sum and count."""

    def __init__(self, bounds):
        self.bounds = tuple(bounds)
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out, total = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            total += count
            out.append(f'{name}_bucket{{le="{bound:g}"}} {total}')
        out += [f'{name}_bucket{{le="+Inf"}} {self.count}', f"{name}_sum {self.sum:.6f}",
                f"{name}_count {self.count}"]
        return out


class Metrics:
    """What /metrics reports, updated from the event loop and the workers (under a lock)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: Counter = Counter()  # (route, status) -> requests answered
        self.inputs = 0
        self.in_flight = 0
        self.batches = Histogram(BATCH_BUCKETS)
        self.latency = Histogram(LATENCY_BUCKETS)

    def batch(self, size: int) -> None:
        with self._lock:
            self.batches.observe(size)

    def answered(self, route: str, status: int, seconds: float, inputs: int = 0) -> None:
        with self._lock:
            self.requests[(route, status)] += 1
            self.inputs += inputs
            if status < 400:
                self.latency.observe(seconds)

    def text(self, batcher: Batcher) -> str:
        with self._lock:
            lines = ["# HELP kt_requests_total Requests answered, by route and HTTP status.",
                     "# TYPE kt_requests_total counter"]
            lines += [f'kt_requests_total{{route="{route}",status="{status}"}} {n}'
                      for (route, status), n in sorted(self.requests.items())]
            errors = Counter()
            for (route, status), n in self.requests.items():
                if status >= 400:
                    errors[route] += n
            lines += ["# HELP kt_errors_total Requests answered with a 4xx or 5xx status.",
                      "# TYPE kt_errors_total counter"]
            lines += [f'kt_errors_total{{route="{route}"}} {n}'
                      for route, n in sorted(errors.items())]
            lines += ["# HELP kt_inputs_total Inputs answered.", "# TYPE kt_inputs_total counter",
                      f"kt_inputs_total {self.inputs}",
                      "# HELP kt_queue_length Inputs waiting for a worker.",
                      "# TYPE kt_queue_length gauge", f"kt_queue_length {batcher.queued}",
                      "# HELP kt_busy_workers Workers running a batch.",
                      "# TYPE kt_busy_workers gauge", f"kt_busy_workers {batcher.busy}",
                      "# HELP kt_requests_in_flight Requests accepted and not yet answered.",
                      "# TYPE kt_requests_in_flight gauge",
                      f"kt_requests_in_flight {self.in_flight}",
                      "# HELP kt_batch_size Inputs per batch run.",
                      "# TYPE kt_batch_size histogram", *self.batches.lines("kt_batch_size"),
                      "# HELP kt_request_seconds Seconds from a request's arrival to its "
                      "answer (successful requests).",
                      "# TYPE kt_request_seconds histogram",
                      *self.latency.lines("kt_request_seconds")]
        return "\n".join(lines) + "\n"


def parse_request(body: bytes, engine, limit: int, max_inputs: int):
    """(inputs, options, stream) of a request body, or RequestError / InputError naming
    what to fix."""
    data = decode_json(body, EXAMPLE, limit, f"{max_inputs} inputs")
    if not isinstance(data, dict) or "inputs" not in data:
        raise RequestError(400, f'the JSON has no "inputs" key; send {EXAMPLE}')
    inputs = data.pop("inputs")
    stream = data.pop("stream", False)
    if not isinstance(inputs, list):
        raise InputError(f'"inputs" must be a list of strings, not {type(inputs).__name__}')
    if not inputs:
        raise InputError('"inputs" is empty; send at least one string')
    if len(inputs) > max_inputs:
        raise RequestError(413, f'"inputs" holds {len(inputs)} strings, more than this '
                                f'server takes in one request ({max_inputs}); split it')
    for i, text in enumerate(inputs):
        if not isinstance(text, str):
            raise InputError(f"inputs[{i}] must be a string, not {type(text).__name__}")
        check_encodable(text, f"inputs[{i}]")
    if not isinstance(stream, bool):
        raise InputError(f'"stream" must be true or false, not {stream!r}')
    if stream and not engine.streams:
        raise InputError(f"a {engine.kind}'s answers are not streamed; drop \"stream\"")
    return inputs, data, stream


def error(status: int, message: str, headers=None):
    from starlette.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status, headers=headers)


def openapi(engine, max_inputs: int) -> dict:
    """The OpenAPI 3.1 description of this server's routes."""
    options = {name: {"type": kind, "description": text}
               for name, (kind, text) in engine.options.items()}
    output = getattr(engine, "output_schema", {"type": "string"})
    request = {"type": "object", "required": ["inputs"], "properties": {
        "inputs": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                   "maxItems": max_inputs},
        **options,
        **({"stream": {"type": "boolean", "description": "answer Server-Sent Events: "
                       "{index, token, text} per token, then {index, output} per input"}}
           if engine.streams else {})}, "additionalProperties": False}
    failure = {"description": "refused: {\"error\": \"...\"}", "content": {
        "application/json": {"schema": {"type": "object",
                                        "properties": {"error": {"type": "string"}}}}}}
    answer = {"200": {"description": "the outputs, in input order", "content": {
        "application/json": {"schema": {"type": "object", "properties": {
            "outputs": {"type": "array", "items": output}}}},
        **({"text/event-stream": {}} if engine.streams else {})}},
        **{str(code): failure for code in (400, 404, 408, 413, 422, 500, 503, 504)}}
    return {
        "openapi": "3.1.0",
        "info": {"title": f"keras-transformer {engine.kind} ({engine.task})",
                 "version": "1"},
        "paths": {
            engine.route: {"post": {"summary": f"{engine.route.rsplit('/', 1)[1]} inputs",
                                    "requestBody": {"required": True, "content": {
                                        "application/json": {"schema": request}}},
                                    "responses": answer}},
            "/health": {"get": {"summary": "the model and the server's settings",
                                "responses": {"200": {"description": "ok"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics",
                                 "responses": {"200": {"description": "text format 0.0.4"}}}},
        },
    }


async def _disconnected(request) -> None:
    """Returns once the client has hung up (the body is read by then)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def create_app(engine, batcher: Batcher, *, timeout: float = 30.0, max_inputs: int = 256,
               max_body: int = 1 << 20, settings: dict | None = None, metrics=None):
    """The Starlette application over one engine (export.engines) and its Batcher."""
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.routing import Route

    metrics = metrics or Metrics()
    description = openapi(engine, max_inputs)

    async def health(request: Request):
        return JSONResponse({"status": "ok", "kind": engine.kind, "task": engine.task,
                             "route": engine.route, **(settings or {}), **engine.info()})

    async def metrics_text(request: Request):
        return PlainTextResponse(metrics.text(batcher),
                                 media_type="text/plain; version=0.0.4")

    async def schema(request: Request):
        return JSONResponse(description)

    async def serve(request: Request):
        started = time.monotonic()
        route = request.url.path
        if route != engine.route:
            metrics.answered(route, 404, 0)
            return error(404, f"this server runs a {engine.kind}'s export ({engine.task}): "
                              f"POST {EXAMPLE} to {engine.route}")
        try:
            body = await capped_body(request, max_body, f"{max_inputs} inputs")
            inputs, options, stream = parse_request(body, engine, max_body, max_inputs)
            rows = engine.prepare(inputs, options, stream)
        except ClientDisconnect:  # the client hung up mid-body: there is no one to answer
            return Response(status_code=400)
        except RequestError as err:
            metrics.answered(route, err.status, 0)
            # A refusal before the body was read whole ends the connection.
            return error(err.status, str(err), CLOSE if err.status in (408, 413) else None)
        except InputError as err:
            metrics.answered(route, 422, 0)
            return error(422, str(err))
        loop = asyncio.get_running_loop()
        if stream:
            return StreamingResponse(_stream(loop, rows, len(inputs), started, route),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        future = loop.create_future()
        ticket = Ticket(len(rows), lambda result: loop.call_soon_threadsafe(
            _settle, future, result))
        try:
            batcher.submit(rows, ticket)
        except Overloaded as err:
            metrics.answered(route, 503, 0)
            return error(503, str(err), {"Retry-After": "1"})
        metrics.in_flight += 1
        try:
            hung_up = asyncio.ensure_future(_disconnected(request))
            done, _ = await asyncio.wait({future, hung_up}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            hung_up.cancel()
        finally:
            metrics.in_flight -= 1
        if future not in done:
            batcher.cancel(ticket)
            if hung_up in done:  # nobody to answer; the batch ran for the others
                metrics.answered(route, 499, time.monotonic() - started)
                return Response(status_code=400)
            metrics.answered(route, 504, time.monotonic() - started)
            return error(504, f"not answered within {timeout:g} seconds; the server is busy, "
                              f"retry later or send fewer inputs")
        result = future.result()
        if isinstance(result, BaseException):
            metrics.answered(route, 500, time.monotonic() - started)
            return error(500, f"the model failed on this batch: {type(result).__name__}: "
                              f"{result}")
        metrics.answered(route, 200, time.monotonic() - started, len(result))
        return JSONResponse({"outputs": result})

    async def _stream(loop, rows, count, started, route):
        """Server-Sent Events of one request: {"index", "token", "text"} per token, then
        {"index", "output"} per input, then an "end" event (or an "error" one)."""
        events: asyncio.Queue = asyncio.Queue()
        ticket = Ticket(count, lambda result: loop.call_soon_threadsafe(
            events.put_nowait, ("done", result)),
            on_event=lambda index, event: loop.call_soon_threadsafe(
                events.put_nowait, ("event", {"index": index, **event})))
        status = 200
        try:
            batcher.submit(rows, ticket)
        except Overloaded as err:
            metrics.answered(route, 503, 0)
            yield _event({"error": str(err)}, "error")
            return
        metrics.in_flight += 1
        try:
            deadline = started + timeout
            while True:
                try:
                    what, value = await asyncio.wait_for(events.get(),
                                                         deadline - time.monotonic())
                except asyncio.TimeoutError:
                    status = 504
                    yield _event({"error": f"not answered within {timeout:g} seconds"},
                                 "error")
                    return
                if what == "event":
                    yield _event(value)
                    continue
                if isinstance(value, BaseException):
                    status = 500
                    yield _event({"error": f"the model failed on this batch: "
                                           f"{type(value).__name__}: {value}"}, "error")
                    return
                for index, output in enumerate(value):
                    yield _event({"index": index, "output": output})
                yield _event({}, "end")
                return
        finally:
            # Also when the client hung up (the response task is cancelled): its inputs
            # that no worker took are dropped.
            metrics.in_flight -= 1
            if not ticket.finished:
                batcher.cancel(ticket)
                status = 499 if status == 200 else status
            metrics.answered(route, status, time.monotonic() - started,
                             count if status == 200 else 0)

    return Starlette(routes=[
        Route("/health", health),
        Route("/metrics", metrics_text),
        Route("/openapi.json", schema),
        *(Route(route, serve, methods=["POST"]) for route in ROUTES),
    ])


def _settle(future: asyncio.Future, result) -> None:
    if not future.done():
        future.set_result(result)


def _event(data: dict, name: str | None = None) -> str:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=command("export.api"),
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True, help="export directory of any kind")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int_in(0, 65535), default=8000,
                        help="port, 0 to 65535; 0 picks a free one (default 8000)")
    parser.add_argument("--max-batch-size", type=int_in(1, 256), default=32,
                        help="most inputs run together, 1 to 256; 1 turns batching off "
                             "(default 32)")
    parser.add_argument("--batch-wait-ms", type=float_in(0, 1000), default=5.0,
                        help="how long the oldest waiting input (or a worker after its "
                             "batch) waits for others to batch with, in milliseconds; not "
                             "after a batch of one input (default 5)")
    parser.add_argument("--workers", type=int_in(1, 64), default=1,
                        help="worker threads, each with its own model (default 1)")
    parser.add_argument("--threads", type=int_in(1, 256), default=None,
                        help="the runtime's threads for each worker's model (onnx, tflite; "
                             "default: the usable cores shared among the workers)")
    parser.add_argument("--max-queue", type=int_in(1, 1 << 20), default=1024,
                        help="most inputs waiting; a request beyond is answered 503 "
                             "(default 1024)")
    parser.add_argument("--timeout", type=float_in(0.1, 3600), default=30.0,
                        help="seconds a request may wait for its answer before a 504 "
                             "(default 30)")
    parser.add_argument("--max-inputs", type=int_in(1, 4096), default=256,
                        help="most inputs in one request (default 256)")
    parser.add_argument("--runtime", default="onnx", choices=RUNTIMES)
    parser.add_argument("--variant", default="float32", choices=("float32", "fp16", "int8"),
                        help="quantized variant (tflite: fp16/int8, onnx: int8)")
    parser.add_argument("--run", default=None, help="training run (keras runtime only)")
    # uvicorn's own options, by its names: auto takes uvloop and httptools where installed
    # (requirements.txt pins both), whose request path costs less than asyncio's and h11's.
    parser.add_argument("--loop", default="auto", choices=("auto", "asyncio", "uvloop"),
                        help="event loop (default auto: uvloop where installed)")
    parser.add_argument("--http", default="auto", choices=("auto", "h11", "httptools"),
                        help="HTTP parser (default auto: httptools where installed)")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    if args.max_inputs > args.max_queue:
        parser.error(f"--max-inputs {args.max_inputs} is more than --max-queue "
                     f"{args.max_queue}: such a request could never be queued")
    return args


# uvicorn's faster event loop and HTTP parser, as requirements.txt pins them, and what each
# replaces.
FAST_STACK = {"loop": ("uvloop", "0.23.0", "asyncio"), "http": ("httptools", "0.9.0", "h11")}


def server_stack(loop: str, http: str) -> dict[str, str]:
    """uvicorn's `loop` and `http` for --loop and --http: auto takes the fast one where it
    is installed, else the plain one; a fast one asked for by name and not installed is
    refused in one line (CommandError)."""
    import importlib.util

    chosen = {}
    for option, value in (("loop", loop), ("http", http)):
        fast, version, plain = FAST_STACK[option]
        installed = importlib.util.find_spec(fast) is not None
        if value == fast and not installed:
            raise CommandError(f"--{option} {fast} needs {fast}: pip install {fast}=={version}, "
                               f"or use --{option} auto")
        chosen[option] = (fast if installed else plain) if value == "auto" else value
    return chosen


# A body holds at most --max-inputs inputs of about this many bytes each (an article).
BYTES_PER_INPUT = 16 * 1024


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as err:
        raise CommandError(f"the API server needs {err.name}: pip install "
                           f"{WEB_PACKAGES}") from None
    from .engines import open_engine
    from .text_io import check_run_option

    check_run_option(args.run, args.runtime)
    stack = server_stack(args.loop, args.http)
    # Idle runtime threads sleep rather than spin: between batches the cores belong to the
    # event loop that gathers the next one, and to the other workers.
    threads = Threads(args.threads or max(1, usable_cores() // args.workers), spinning=False)
    engines = [open_engine(args.export, args.runtime, args.variant, args.run, threads)
               for _ in range(args.workers)]
    engine = engines[0]
    metrics = Metrics()
    batcher = Batcher(engines, max_batch_size=args.max_batch_size,
                      wait_s=args.batch_wait_ms / 1000, max_queue=args.max_queue,
                      on_batch=metrics.batch)
    settings = {"max_batch_size": args.max_batch_size, "batch_wait_ms": args.batch_wait_ms,
                "workers": args.workers, "threads": threads.count,
                "max_queue": args.max_queue,
                "timeout": args.timeout, "max_inputs": args.max_inputs,
                "runtime": args.runtime, "variant": args.variant, **stack}
    app = create_app(engine, batcher, timeout=args.timeout, max_inputs=args.max_inputs,
                     max_body=max(64 * 1024, args.max_inputs * BYTES_PER_INPUT),
                     settings=settings, metrics=metrics)
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"API of {args.export} ({engine.kind}, {engine.task}): POST {engine.route} on "
          f"http://{shown}:{port}/ (SIGTERM or Ctrl-C stops it)", flush=True)
    # On shutdown the requests in flight get their timeout to finish, then their
    # connections close.
    server = server_class(grace=args.timeout + 1)(uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off",
        limit_concurrency=MAX_CONCURRENCY, **stack))
    # uvicorn raises the signal it stopped on again once it has stopped; SIGTERM's default
    # action would then kill the process (exit -15) before the batcher is closed.
    signal.signal(signal.SIGTERM, lambda *_: None)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])
    batcher.close(timeout=args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
