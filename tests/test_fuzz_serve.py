"""Fault and fuzz tests of `python -m export.serve`, the attention explorer's server, under the
requests of a careless or hostile client: bodies far over the limit (with a Content-Length
or chunked), JSON nested thousands deep, bodies that trickle or stop, clients that hang up
mid-body, random bytes as bodies and as whole requests, and Ctrl-C while clients hold
half-sent requests.

Each case asserts what the server promises (docs/safety.md): an HTTP 4xx answer whose JSON
names what to fix (or, for what is not HTTP, a 400 or a closed connection), a connection
closed after a refusal of what was not read, the server still answering a good request
as before, and a log without a traceback; Ctrl-C stops it within two seconds, exit 0. The
server runs as a user starts it, in a fresh process (TensorFlow blocked, as
tests/cli_probe.py runs it), over the ONNX export of a tiny random model.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.cli_probe import ROOT, command, tool_env
from tests.serving import post, serving, tiny_run

pytestmark = pytest.mark.slow  # the module's fixture exports a model

SEED = 20240621
COUNTS: Counter = Counter()
MAX_BODY = 64 * 1024  # export.serve.MAX_BODY
LOG_PROBLEMS = ("Traceback", "Error", "Exception", "CancelledError", "ClientDisconnect")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """{root, export, explorer}: a tiny run's ONNX export with attention."""
    from export.explorer import open_explorer
    from tests.cli_probe import run_cli

    root = tmp_path_factory.mktemp("fuzz_serve")
    tiny_run(root / "run")
    export = root / "export"
    done = run_cli("export", "--run", root / "run", "--format", "onnx", "--with-attention",
                   "--out", export)
    assert done.code == 0, done.stderr[-3000:]
    return {"root": root, "export": export, "explorer": open_explorer(export)}


@pytest.fixture(scope="module")
def server(world):
    """(host, port, url, log) of one server for the request cases."""
    log = world["root"] / "serve.log"
    with serving(world["export"], log) as url:
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port), url, log


def _connect(server) -> socket.socket:
    sock = socket.create_connection(server[:2], timeout=30)
    return sock


def _head(length: int | None = None, chunked: bool = False) -> bytes:
    lines = ["POST /translate HTTP/1.1", "Host: test", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _response(sock: socket.socket) -> tuple[int, dict, bytes]:
    """(status, headers, body) of the server's answer (status 0: none, the connection was
    closed)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else 0
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    while len(rest) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest


def _closed(sock: socket.socket, within: float = 5.0) -> bool:
    """Whether the server closes the connection within `within` seconds (EOF or reset),
    reading and dropping whatever else it sends."""
    sock.settimeout(within)
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def _log_is_clean(log: Path) -> None:
    text = log.read_text(errors="replace")
    for word in LOG_PROBLEMS:
        assert word not in text, text[-3000:]


def _still_serves(server, explorer) -> None:
    good = post(server[2], json.dumps({"text": "one red cat"}).encode())
    assert good.status_code == 200, good.text
    assert good.json()["output"] == explorer.explain("one red cat")["output"]


def _count(name: str, ok: bool = True) -> None:
    COUNTS[f"{name} tried"] += 1
    assert ok
    COUNTS[f"{name} handled"] += 1


def test_a_declared_huge_body_is_refused_unread_and_the_connection_closed(server, world):
    for length in (MAX_BODY + 1, 100 * 1024 * 1024, 10**15):
        with _connect(server) as sock:
            sock.sendall(_head(length) + b'{"text": "' + b"a" * 1000)
            status, headers, rest = _response(sock)
            assert status == 413 and headers.get("connection") == "close", (status, headers)
            assert f"more than {MAX_BODY} bytes" in rest.decode()
            assert _closed(sock)
        _count("serve")
    _still_serves(server, world["explorer"])


def test_a_chunked_body_over_the_limit_is_not_read_to_its_end(server, world):
    """100 MB sent chunked: the answer is 413 after at most a few socket buffers past the
    limit, and the server closes the connection instead of reading the rest."""
    chunk = b"a" * 65536
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    with _connect(server) as sock:
        sock.sendall(_head(chunked=True))
        sent, refused = 0, False
        sock.settimeout(5)
        while sent < 100 * 1024 * 1024:
            try:
                sock.sendall(frame)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                refused = True
                break
            sent += len(chunk)
        assert refused, "the server read all 100 MB"
        assert sent < 20 * 1024 * 1024, sent
        try:
            status, headers, rest = _response(sock)
            assert status in (413, 0), status  # the answer may be lost in the reset
        except (ConnectionResetError, TimeoutError):
            pass
    _count("serve")
    _still_serves(server, world["explorer"])


@pytest.mark.parametrize("depth", [9, 1000, 20000])
def test_json_nested_deep_is_refused_before_parsing(server, world, depth):
    for body in (b'{"text": ' + b"[" * depth + b"]" * depth + b"}",
                 b"{" + b'"a": {' * depth + b"}" * (depth + 1),
                 b'{"text": ' + b"[" * depth):
        answer = post(server[2], body)
        if len(body) > MAX_BODY:
            assert answer.status_code == 413, answer.text
        else:
            assert answer.status_code == 400, answer.text
            assert "more than 8 deep" in answer.json()["error"]
        _count("serve")
    # Brackets inside a string are text.
    answer = post(server[2], json.dumps({"text": "[" * depth + " one cat"}).encode())
    assert answer.status_code in (200, 422), answer.text
    _count("serve")
    _log_is_clean(server[3])


def test_a_body_that_trickles_is_refused_in_time(server, world):
    with _connect(server) as sock:
        sock.sendall(_head(200) + b'{"text": ')
        started = time.monotonic()
        status, headers, rest = _response(sock)
        waited = time.monotonic() - started
        assert status == 408 and "within 10 seconds" in rest.decode(), (status, rest)
        assert 9 < waited < 20, waited
        assert _closed(sock)
    _count("serve")
    _still_serves(server, world["explorer"])


def test_clients_that_hang_up_mid_body_leave_no_trace(server, world):
    for sent in (0, 1, 10, 500):
        for _ in range(5):
            with _connect(server) as sock:
                sock.sendall(_head(1000) + b"x" * sent)
            _count("serve")
    # One that hangs up while its chunked body is over the limit, and one after its headers.
    with _connect(server) as sock:
        sock.sendall(_head(chunked=True) + b"10000\r\n" + b"a" * 30000)
    with _connect(server) as sock:
        sock.sendall(_head(10))
    COUNTS["serve tried"] += 2
    COUNTS["serve handled"] += 2
    time.sleep(1)
    _still_serves(server, world["explorer"])
    _log_is_clean(server[3])


def test_random_bodies_and_random_requests(server, world):
    """Random bytes as a body get a 4xx naming the problem (never a 500); random bytes as a
    whole request get a 400 or a closed connection; the server answers well afterwards."""
    rng = np.random.default_rng(SEED)
    explorer = world["explorer"]
    for _ in range(40):
        body = rng.bytes(int(rng.integers(0, 3000)))
        answer = post(server[2], body)
        assert 400 <= answer.status_code < 500, answer.text
        assert answer.json()["error"], answer.text
        _count("serve")
    for _ in range(20):  # JSON-shaped: random values under "text"
        values = [None, 1.5, True, [], {}, "", "\t", "cat " * int(rng.integers(1, 30)),
                  "\u200b", "\ufeffone cat", "\U0001F600 dog"]
        value = values[int(rng.integers(len(values)))]
        answer = post(server[2], json.dumps({"text": value}).encode())
        try:
            want = explorer.explain(value)["output"]
        except ValueError:
            want = None
        if want is None:
            assert answer.status_code == 422, answer.text
        else:
            assert answer.status_code == 200 and answer.json()["output"] == want, answer.text
        _count("serve")
    for _ in range(15):
        with _connect(server) as sock:
            sock.sendall(rng.bytes(int(rng.integers(1, 2000))) + b"\r\n\r\n")
            status, _, _ = _response(sock)
            assert status in (0, 400), status
        _count("serve")
    _still_serves(server, explorer)
    _log_is_clean(server[3])


def _start(export: Path, log: Path) -> tuple[subprocess.Popen, tuple[str, int]]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            command("export.serve", "--export", export, "--port", 0, without_tensorflow=True),
            cwd=ROOT, env=tool_env(), stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        for word in log.read_text(errors="replace").split():
            if word.startswith("http://"):
                host, port = word.removeprefix("http://").rstrip("/").split(":")
                return process, (host, int(port))
        time.sleep(0.2)
    process.kill()
    raise AssertionError(log.read_text(errors="replace")[-3000:])


@pytest.mark.parametrize("interrupts", [1, 2])
def test_ctrl_c_stops_the_server_whatever_clients_hold(world, tmp_path, interrupts):
    """Clients holding half-sent bodies, one holding only headers, an idle keep-alive one
    and one in the middle of a chunked body: one Ctrl-C (or two in a row) stops the server
    within two seconds, exit 0, without a traceback."""
    log = tmp_path / "serve.log"
    process, address = _start(world["export"], log)
    held = []
    try:
        for head, part in ((_head(1000), b'{"text": "one'), (_head(50), b""),
                           (_head(chunked=True), b"100\r\nabc")):
            sock = socket.create_connection(address, timeout=30)
            sock.sendall(head + part)
            held.append(sock)
        idle = socket.create_connection(address, timeout=30)
        idle.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
        assert _response(idle)[0] == 200
        held.append(idle)
        time.sleep(0.5)
        started = time.monotonic()
        for _ in range(interrupts):
            process.send_signal(signal.SIGINT)
            time.sleep(0.05)
        code = process.wait(timeout=30)
        stopped = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
        for sock in held:
            sock.close()
    assert code == 0, log.read_text(errors="replace")[-3000:]
    assert stopped < 2.5, stopped
    _log_is_clean(log)
    COUNTS["serve tried"] += 1
    COUNTS["serve handled"] += 1


def test_zz_report_counts():
    """Prints the tallies that docs/safety.md reports (run with -s to see them)."""
    print(dict(COUNTS))
    assert COUNTS["serve tried"] == COUNTS["serve handled"]
