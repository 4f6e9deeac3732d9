"""The attention explorer: a web page and a JSON API over an export made with --with-attention.

    python -m export.serve --export runs/demo/export [--port 8000] [--host 127.0.0.1]

GET / is the page: type a sentence, see its translation (or summary, or class and class
probabilities) and the attention heatmaps (pick the kind, layer and head; hover a cell for its
two tokens and weight). Over a translator's export (translation, summarization), POST
/translate takes {"text": "..."} and answers {"output", "source_tokens", "output_tokens",
"decoder_input_tokens", "truncated", "attention"}; over a classifier's, POST /classify takes
the same and answers {"label", "probability", "probabilities", "tokens", "truncated",
"attention": {"encoder_self"}}; over an extractive summarizer's (no attention needed), POST
/summarize takes an article and answers {"summary", "sentences", "scores", "chosen",
"truncated", "sentences_not_read"}, and the page shades each sentence by its probability
and marks the chosen ones (export.explorer). The other routes answer 404 naming the right one.
GET /health answers {"status": "ok", "kind", ...the model's geometry}. A bad request gets an
HTTP 4xx answer {"error": "<what to fix>"}. A request is refused before it is read past its
limits: a body over MAX_BODY bytes (by its Content-Length, else as it arrives: 413), one
nested deeper than MAX_DEPTH (400) or not all sent within BODY_SECONDS (408); after such a
refusal the connection is closed rather than read to its end. A client that hangs up is
dropped without a word in the log, and Ctrl-C stops the server within SHUTDOWN_SECONDS (and
a second) whatever its clients are sending. TensorFlow-free: onnxruntime runs the model;
Starlette and uvicorn serve, and the page draws with the plotly.js that the plotly package
ships, served from here (the page needs no internet).

Exit codes: 0 stopped (Ctrl-C); 2 bad usage (a missing or damaged export, one without the
attention weights, a language model's export, --beam or --alpha for a classifier, a port that
cannot be bound, a web package not installed); 1 a failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import logging
import re
import socket
import sys
from pathlib import Path

from keras_transformer.command_line import (
    CommandError,
    add_debug_flag,
    command,
    entry_point,
    float_in,
    int_in,
    search_bounds,
)

from .explorer import (
    ROUTES,
    ClassifierExplorer,
    Explorer,
    ExtractorExplorer,
    InputError,
    open_explorer,
)

PAGE = Path(__file__).with_name("explorer.html")
# A sentence is a few hundred bytes; this bounds the work a single request can ask for.
MAX_BODY = 64 * 1024
# {"text": "..."} is nested once; JSON nested thousands deep exhausts the parser's recursion.
MAX_DEPTH = 8
# A client that trickles its body holds a connection and a task; it gets this long.
BODY_SECONDS = 10.0
# On Ctrl-C, requests in flight get this long to finish before their connections are closed.
SHUTDOWN_SECONDS = 1.0
# Connections and requests at once; beyond them a client is answered 503 at once.
MAX_CONCURRENCY = 512
WEB_PACKAGES = "starlette==1.10.0 uvicorn==0.54.0 plotly==7.1.0"  # as requirements.txt pins

log = logging.getLogger("export.serve")


def plotly_js() -> Path:
    """plotly.min.js as the plotly package ships it (found without importing plotly)."""
    spec = importlib.util.find_spec("plotly")
    path = Path(spec.origin).parent / "package_data" / "plotly.min.js" if spec else None
    if path is None or not path.is_file():
        raise CommandError(f"the explorer's page draws with plotly.js, from the plotly "
                           f"package: pip install {WEB_PACKAGES}")
    return path


class RequestError(InputError):
    """A request the server refuses, with the HTTP status that says why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def too_large(limit: int = MAX_BODY, what: str = "one sentence") -> RequestError:
    return RequestError(413, f"the request body has more than {limit} bytes; send at most "
                             f"{limit} ({what})")


# JSON's strings (a final unterminated one runs to the end: no backtracking) and brackets.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[{]|[\]}]', re.DOTALL)


def nesting_depth(text: str) -> int:
    """How deep the arrays and objects of JSON `text` nest (brackets inside strings do not
    count), in one linear pass: checked before the parser recurses that deep."""
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        char = match.group()[0]
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def decode_json(body: bytes, example: str, limit: int = MAX_BODY,
                what: str = "one sentence"):
    """The JSON value of a request body, or RequestError (with its HTTP status) saying what
    is wrong and naming `example`, the shape to send: a body over `limit` bytes, not UTF-8,
    nested over MAX_DEPTH, or not JSON."""
    if len(body) > limit:
        raise too_large(limit, what)
    try:
        decoded = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(400, f"the request body is not valid UTF-8 (byte "
                                f"{body[err.start]:#04x} at position {err.start}); send "
                                f"UTF-8 JSON") from None
    if nesting_depth(decoded) > MAX_DEPTH:
        raise RequestError(400, f"the JSON nests arrays or objects more than {MAX_DEPTH} deep; "
                                f"send {example}")
    try:
        return json.loads(decoded)
    except json.JSONDecodeError as err:
        raise RequestError(400, f"the request body is not JSON ({err.msg} at position "
                                f"{err.pos}); send {example}") from None


def check_encodable(text: str, where: str) -> str:
    """`text`, or RequestError 400 when it holds a lone surrogate (JSON's \\ud800 escapes
    decode to them), which is no text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise RequestError(400, f'{where} holds a lone surrogate ({text[err.start]!r} at '
                                f'position {err.start}), which is not text; send UTF-8 '
                                f'text') from None
    return text


def parse_body(body: bytes) -> str:
    """The "text" of a request body, or RequestError (with its HTTP status) saying what to
    send."""
    data = decode_json(body, '{"text": "..."}')
    if not isinstance(data, dict) or "text" not in data:
        raise RequestError(400, 'the JSON has no "text" key; send {"text": "..."}')
    text = data["text"]
    if isinstance(text, str):
        check_encodable(text, '"text"')
    return text


async def capped_body(request, limit: int = MAX_BODY, what: str = "one sentence") -> bytes:
    """The request body, or RequestError: 413 when its Content-Length says it is over
    `limit` (before a byte of it is read) or when it grows past `limit` (a chunked one: no
    more is read), 408 when it has not all arrived within BODY_SECONDS."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit, what)
    body = bytearray()

    async def read() -> None:
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > limit:
                raise too_large(limit, what)

    try:
        await asyncio.wait_for(read(), BODY_SECONDS)
    except asyncio.TimeoutError:
        raise RequestError(408, f"the request body did not arrive within {BODY_SECONDS:g} "
                                f"seconds; send it at once") from None
    return bytes(body)


# A refusal before the body was read whole ends the connection: what the client still sends
# is not read.
CLOSE = {"Connection": "close"}


def create_app(explorer: Explorer | ClassifierExplorer | ExtractorExplorer,
               plotly_path: Path | None = None):
    """The Starlette application: the page, plotly.js, /health, and /translate, /classify or
    /summarize as the export's kind asks (the others answer 404 naming the right route)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    page = PAGE.read_text(encoding="utf-8")
    plotly_path = plotly_path or plotly_js()

    async def index(request: Request):
        return HTMLResponse(page)

    async def plotly(request: Request):
        return FileResponse(plotly_path, media_type="text/javascript")

    async def health(request: Request):
        return JSONResponse({"status": "ok", **explorer.info()})

    async def explain(request: Request):
        route = explorer.route
        if request.url.path != route:
            return JSONResponse({"error": f"this server runs a {explorer.kind}'s export "
                                          f"({explorer.task}): POST "
                                          f'{{"text": "..."}} to {route}'}, status_code=404)
        try:
            body = await capped_body(request)
        except RequestError as err:
            return JSONResponse({"error": str(err)}, status_code=err.status, headers=CLOSE)
        except ClientDisconnect:  # the client hung up mid-body: there is no one to answer
            return Response(status_code=400)
        try:
            text = parse_body(body)
            # The model runs in a worker thread: the server answers other requests meanwhile.
            result = await run_in_threadpool(explorer.explain, text)
        except RequestError as err:
            return JSONResponse({"error": str(err)}, status_code=err.status)
        except InputError as err:
            return JSONResponse({"error": str(err)}, status_code=422)
        except Exception as err:  # noqa: BLE001 - one failed request must not stop the server
            log.exception("explaining a request failed")
            return JSONResponse({"error": f"the model failed on this text: "
                                          f"{type(err).__name__}: {err}"}, status_code=500)
        return JSONResponse(result)

    return Starlette(routes=[
        Route("/", index),
        Route("/plotly.min.js", plotly),
        Route("/health", health),
        *(Route(route, explain, methods=["POST"]) for route in ROUTES),
    ])


def server_class(grace: float = SHUTDOWN_SECONDS):
    """uvicorn.Server, stopping within `grace` seconds of Ctrl-C (or SIGTERM) whatever the
    clients do.

    uvicorn waits on shutdown until every connection is done, and a client holding a
    half-sent request never is; after the grace its connection is closed, so that its
    request ends as a disconnect (answered by nobody, quietly) instead of being cancelled
    (a traceback). A second Ctrl-C closes them at once."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None):
            closer = asyncio.ensure_future(self._close_connections_after(grace))
            try:
                await super().shutdown(sockets)
            finally:
                closer.cancel()
            if self.server_state.tasks:  # a forced exit does not wait: end them quietly too
                self._close_connections()
                await asyncio.wait(list(self.server_state.tasks), timeout=SHUTDOWN_SECONDS)

        async def _close_connections_after(self, seconds: float) -> None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + seconds
            while loop.time() < deadline and not self.force_exit:
                await asyncio.sleep(0.05)
            self._close_connections()

        def _close_connections(self) -> None:
            for connection in list(self.server_state.connections):
                connection.transport.close()

    return Server


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, or CommandError naming the address (port 0: a free port)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise CommandError(f"--host {host!r} is not an address of this machine: {err}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        raise CommandError(f"cannot listen on {host}:{port} ({err.strerror}); choose another "
                           f"--port") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=command("export.serve"),
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True,
                        help="export directory made with --with-attention, e.g. runs/demo/export")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int_in(0, 65535), default=8000,
                        help="port, 0 to 65535; 0 picks a free one (default 8000)")
    parser.add_argument("--beam", type=int_in(*search_bounds("beam_size")), default=None,
                        help="beam size of a translator, 1 (greedy) to 64 (default: the "
                             "run's, as export.translate)")
    parser.add_argument("--alpha", type=float_in(*search_bounds("alpha")), default=None,
                        help="length penalty exponent of a translator, in [0, 10] (default: "
                             "the run's)")
    add_debug_flag(parser)
    return parser.parse_args(argv)


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as err:
        raise CommandError(f"the explorer needs {err.name}: pip install {WEB_PACKAGES}") from None
    explorer = open_explorer(args.export, beam_size=args.beam, alpha=args.alpha)
    app = create_app(explorer)
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"attention explorer of {args.export} ({explorer.task}) on http://{shown}:{port}/ "
          f"(Ctrl-C stops it)", flush=True)
    # lifespan="off": the app has no startup or shutdown of its own, and a forced exit would
    # cancel the lifespan task with a traceback.
    server = server_class()(uvicorn.Config(app, log_level="warning", access_log=False,
                                           lifespan="off",
                                           limit_concurrency=MAX_CONCURRENCY))
    # uvicorn raises the Ctrl-C it stopped on again once it has stopped.
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
