"""export.batching's Batcher without a model: an engine that records every batch it runs and
answers each item with (key, item), so that the tests see which inputs ran together, in what
order, and that every answer went to its own request."""

from __future__ import annotations

import threading
import time

import pytest

from export.batching import Batcher, Overloaded, Ticket


class Recorder:
    def __init__(self, fail_on=None, pause: float = 0.0):
        self.batches: list[tuple] = []
        self.fail_on = fail_on
        self.pause = pause

    def run(self, key, items, emit=None):
        time.sleep(self.pause)
        self.batches.append((key, list(items)))
        if self.fail_on in items:
            raise RuntimeError(f"cannot run {self.fail_on}")
        if emit is not None:
            for j, item in enumerate(items):
                emit(j, {"seen": item})
        return [(key, item) for item in items]


def request(batcher, key, items, **ticket_options):
    """Submit items (their length: len(item)) -> (ticket, event set when done, result box)."""
    done, box = threading.Event(), []
    ticket = Ticket(len(items), lambda result: (box.append(result), done.set()),
                    **ticket_options)
    batcher.submit([(key, item, len(item)) for item in items], ticket)
    return ticket, done, box


def test_requests_in_one_wait_run_together_by_key_sorted_by_length_capped_in_size():
    engine = Recorder()
    batcher = Batcher([engine], max_batch_size=4, wait_s=0.3, max_queue=100)
    try:
        asked = [("greedy", ["ccc", "a"]), ("beam", ["bb"]), ("greedy", ["dddd", "ee"]),
                 ("greedy", ["f"])]
        pending = [(key, items, *request(batcher, key, items)) for key, items in asked]
        for key, items, _, done, box in pending:
            assert done.wait(10)
            assert box[0] == [(key, item) for item in items]  # its own, in its order
    finally:
        batcher.close(timeout=10)
    # The four oldest greedy inputs, shortest first; then the beam's; then the last greedy.
    assert engine.batches == [("greedy", ["a", "ee", "ccc", "dddd"]), ("beam", ["bb"]),
                              ("greedy", ["f"])]


def test_one_request_at_a_time_is_not_kept_waiting_and_overlap_waits_again():
    engine = Recorder()
    wait = 2.0  # far above any thread's wake-up on a loaded machine
    batcher = Batcher([engine], max_batch_size=8, wait_s=wait, max_queue=100)
    try:
        # The first batch waits (overlap is expected until a batch has run).
        start = time.monotonic()
        _, done, _ = request(batcher, "k", ["a"])
        assert done.wait(10) and time.monotonic() - start >= wait * 0.95
        # One input at a time after a batch of one: answered without the wait.
        for item in ("b", "c"):
            start = time.monotonic()
            _, done, _ = request(batcher, "k", [item])
            assert done.wait(10) and time.monotonic() - start < wait / 2
        # Two at once run without the wait too; the batch after them waits again.
        pending = [request(batcher, "k", ["d", "e"])]
        assert pending[0][1].wait(10)
        start = time.monotonic()
        pending = [request(batcher, "k", ["f"]), request(batcher, "k", ["g"])]
        assert all(done.wait(10) for _, done, _ in pending)
        assert time.monotonic() - start >= wait * 0.95
    finally:
        batcher.close(timeout=10)
    assert engine.batches == [("k", ["a"]), ("k", ["b"]), ("k", ["c"]), ("k", ["d", "e"]),
                              ("k", ["f", "g"])]


def test_a_worker_waits_for_the_clients_of_its_own_last_batch():
    # An input that waited through a running batch is not run alone the moment the batch
    # ends: the worker waits from its own end, and the batch's clients, just answered, send
    # again within the wait and join it.
    engine = Recorder(pause=1.5)
    batcher = Batcher([engine], max_batch_size=8, wait_s=1.0, max_queue=100)
    try:
        _, first_done, _ = request(batcher, "k", ["a", "b"])
        time.sleep(1.1)  # the first batch (after its wait) is running now
        _, straggler_done, _ = request(batcher, "k", ["sss"])
        assert first_done.wait(10)
        _, again_done, _ = request(batcher, "k", ["cc"])  # a client answered, sending again
        assert straggler_done.wait(10) and again_done.wait(10)
    finally:
        batcher.close(timeout=10)
    assert engine.batches == [("k", ["a", "b"]), ("k", ["cc", "sss"])]


def test_a_full_queue_refuses_the_whole_request_and_a_cancelled_one_is_dropped():
    engine = Recorder()
    batcher = Batcher([engine], max_batch_size=8, wait_s=0.5, max_queue=3)
    try:
        first, first_done, first_box = request(batcher, "k", ["a", "b"])
        with pytest.raises(Overloaded, match="queue is full"):
            request(batcher, "k", ["c", "d"])
        assert batcher.queued == 2
        batcher.cancel(first)
        assert batcher.queued == 0
        _, done, box = request(batcher, "k", ["e"])
        assert done.wait(10) and box[0] == [("k", "e")]
        assert not first_done.is_set()
    finally:
        batcher.close(timeout=10)
    assert engine.batches == [("k", ["e"])]


def test_a_failed_batch_fails_its_requests_only_and_a_stream_runs_alone():
    engine = Recorder(fail_on="bad")
    batcher = Batcher([engine], max_batch_size=8, wait_s=0.2, max_queue=100)
    events = []
    try:
        _, bad_done, bad_box = request(batcher, "k", ["bad", "x"])
        _, streamed_done, streamed_box = request(
            batcher, "k", ["s1", "s2"], on_event=lambda i, e: events.append((i, e)))
        assert bad_done.wait(10) and streamed_done.wait(10)
        assert isinstance(bad_box[0], RuntimeError)
        assert streamed_box[0] == [("k", "s1"), ("k", "s2")]
        _, done, box = request(batcher, "k", ["y"])
        assert done.wait(10) and box[0] == [("k", "y")]
    finally:
        batcher.close(timeout=10)
    assert sorted(events) == [(0, {"seen": "s1"}), (1, {"seen": "s2"})]
    assert ("k", ["s1", "s2"]) in engine.batches  # the stream's inputs ran apart


def test_close_finishes_what_is_queued_then_refuses():
    engine = Recorder(pause=0.05)
    batcher = Batcher([engine, Recorder(pause=0.05)], max_batch_size=1, wait_s=0.0,
                      max_queue=100)
    pending = [request(batcher, "k", [f"i{n}"]) for n in range(10)]
    batcher.close(timeout=30)
    assert all(done.is_set() for _, done, _ in pending)
    with pytest.raises(Overloaded, match="shutting down"):
        request(batcher, "k", ["late"])


def test_the_server_stack_takes_the_fast_loop_and_parser_where_installed(monkeypatch):
    import importlib.util

    from export.api import server_stack
    from keras_transformer.command_line import CommandError

    real = importlib.util.find_spec
    installed = {"uvloop", "httptools"}

    def find_spec(name, *args):
        if name in ("uvloop", "httptools"):
            return real("json") if name in installed else None
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert server_stack("auto", "auto") == {"loop": "uvloop", "http": "httptools"}
    assert server_stack("asyncio", "h11") == {"loop": "asyncio", "http": "h11"}
    installed.clear()
    assert server_stack("auto", "auto") == {"loop": "asyncio", "http": "h11"}
    assert server_stack("asyncio", "auto") == {"loop": "asyncio", "http": "h11"}
    with pytest.raises(CommandError) as err:
        server_stack("uvloop", "auto")
    assert str(err.value) == ("--loop uvloop needs uvloop: pip install uvloop==0.23.0, or use "
                              "--loop auto")
    with pytest.raises(CommandError, match="^--http httptools needs httptools: pip install "
                                           "httptools==0.9.0"):
        server_stack("auto", "httptools")


def test_the_fast_stack_versions_are_the_pinned_ones():
    from pathlib import Path

    from export.api import FAST_STACK

    pins = dict(line.split("==") for line in
                (Path(__file__).resolve().parent.parent / "requirements.txt")
                .read_text(encoding="utf-8").splitlines() if "==" in line)
    assert {package: pins[package] for package, _, _ in FAST_STACK.values()} == {
        package: version for package, version, _ in FAST_STACK.values()}
