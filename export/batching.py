"""Dynamic batching for the API server (export.api): inputs of concurrent requests that arrive
within a short wait and share a batch key are run together, on one of several worker threads,
each with its own model instance; every answer goes back to its own request.

No web packages and no TensorFlow: a `Batcher` takes `Engine`s (export.engines) and callbacks,
so it runs under any server, or none.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger("export.api")


_SERIALS = itertools.count()


class Overloaded(Exception):
    """The queue has no room for a request's inputs (the server answers 503)."""


class Engine(Protocol):
    """What a worker runs: a batch of prepared items sharing one key (the engine's, as
    `submit` was given it) -> one output each, in the items' order. With `emit`, the
    request asked for a stream: emit(j, event) sends an event about item j as soon as it is
    known."""

    def run(self, key: Hashable, items: Sequence[Any],
            emit: Callable[[int, dict], None] | None = None) -> list[Any]: ...


@dataclass
class Ticket:
    """One request's inputs in the batcher: their outputs as they are done, then `on_done`
    (called once, from a worker thread) with the outputs in input order, or with the
    exception that failed them."""

    size: int
    on_done: Callable[[list | BaseException], None]
    on_event: Callable[[int, dict], None] | None = None
    outputs: list = field(default_factory=list)
    serial: int = field(default_factory=lambda: next(_SERIALS))
    remaining: int = 0
    cancelled: bool = False
    finished: bool = False

    def __post_init__(self):
        self.outputs = [None] * self.size
        self.remaining = self.size


@dataclass
class Row:
    """One input of a ticket, waiting for a worker."""

    ticket: Ticket
    index: int
    item: Any
    key: Hashable
    length: int
    arrival: float


class Batcher:
    """A bounded queue of inputs and one worker thread per engine.

    A worker takes the oldest waiting input, waits until `wait_s` after the later of its
    arrival and the worker's own last batch end (or until `max_batch_size` inputs of its
    key are waiting: the clients a worker just answered are likely to send again, and an
    input that waited through the batch would otherwise run alone just before they do;
    another worker's end does not count, or one worker would gather every input while the
    others idle) unless the last batch held a single input (one client at a time gains
    nothing by waiting, and would pay the wait on every answer; a batch of several says
    requests overlap, and the waits start again), then runs up to `max_batch_size` inputs
    of that key, oldest first, sorted by length so that a batch pads little. Inputs of
    other keys (other search settings, a streamed request) wait for their own batch.
    `submit` refuses inputs beyond `max_queue` waiting ones (Overloaded); a cancelled
    ticket's inputs that no worker took yet are dropped.
    """

    def __init__(self, engines: Sequence[Engine], *, max_batch_size: int = 32,
                 wait_s: float = 0.005, max_queue: int = 1024,
                 on_batch: Callable[[int], None] | None = None):
        self.max_batch_size = max_batch_size
        self.wait_s = wait_s
        self.max_queue = max_queue
        self.on_batch = on_batch
        self._rows: deque[Row] = deque()
        self._lock = threading.Condition()
        self._closing = False
        self._busy = 0
        self._last_batch = max_batch_size  # until a batch has run: expect overlapping requests
        self._ends: dict[int, float] = {}  # each worker thread's last batch end
        self._threads = [threading.Thread(target=self._work, args=(engine,), daemon=True,
                                          name=f"batcher-{i}")
                         for i, engine in enumerate(engines)]
        for thread in self._threads:
            thread.start()

    @property
    def queued(self) -> int:
        """Inputs waiting for a worker."""
        return len(self._rows)

    @property
    def busy(self) -> int:
        """Workers running a batch now."""
        return self._busy

    def submit(self, items: Sequence[tuple[Hashable, Any, int]], ticket: Ticket) -> Ticket:
        """Queue a request's inputs, each (key, item, length), under `ticket`; Overloaded
        when they do not fit in the queue (none is queued then). A streamed ticket's inputs
        (one with `on_event`) batch only with each other: its events are its own."""
        stream = ticket.serial if ticket.on_event is not None else None
        now = time.monotonic()
        with self._lock:
            if self._closing:
                raise Overloaded("the server is shutting down; send the request elsewhere")
            if len(self._rows) + len(items) > self.max_queue:
                raise Overloaded(f"the queue is full ({len(self._rows)} inputs waiting, at "
                                 f"most {self.max_queue}); retry later")
            for index, (key, item, length) in enumerate(items):
                self._rows.append(Row(ticket, index, item, (key, stream), length, now))
            self._lock.notify_all()
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """Drop the ticket's waiting inputs; a batch already running still finishes, and its
        outputs for this ticket are dropped."""
        with self._lock:
            ticket.cancelled = True
            self._rows = deque(row for row in self._rows if row.ticket is not ticket)

    def close(self, timeout: float | None = None) -> None:
        """Refuse new inputs, let the workers finish what is queued, and wait for them."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _take(self) -> list[Row] | None:
        """The next batch (under the lock), or None when closing with nothing left."""
        while True:
            while not self._rows and not self._closing:
                self._lock.wait()
            if not self._rows:
                return None
            first = self._rows[0]
            own = self._ends.get(threading.get_ident(), 0.0)
            deadline = max(first.arrival, own) + (self.wait_s if self._last_batch > 1 else 0.0)
            while True:
                same = sum(1 for row in self._rows
                           if row.key == first.key)
                left = deadline - time.monotonic()
                if same >= self.max_batch_size or left <= 0 or self._closing:
                    break
                self._lock.wait(left)
                if not self._rows or self._rows[0] is not first:
                    break  # another worker took it, or it was cancelled: start again
            if not self._rows or self._rows[0] is not first:
                continue
            batch, kept = [], deque()
            for row in self._rows:
                if row.key == first.key and len(batch) < self.max_batch_size:
                    batch.append(row)
                else:
                    kept.append(row)
            self._rows = kept
            self._last_batch = len(batch)
            return batch

    def _work(self, engine: Engine) -> None:
        while True:
            with self._lock:
                batch = self._take()
                if batch is None:
                    return
                self._busy += 1
            try:
                self._run(engine, sorted(batch, key=lambda row: row.length))
            finally:
                with self._lock:
                    self._busy -= 1
                    self._ends[threading.get_ident()] = time.monotonic()

    def _run(self, engine: Engine, batch: list[Row]) -> None:
        streamed = [row for row in batch if row.ticket.on_event is not None]

        def emit(j: int, event: dict) -> None:
            row = batch[j]
            if not row.ticket.cancelled:
                row.ticket.on_event(row.index, event)

        if self.on_batch is not None:
            self.on_batch(len(batch))
        try:
            outputs = engine.run(batch[0].key[0], [row.item for row in batch],
                                 emit if streamed else None)
        except Exception as err:  # noqa: BLE001 - the batch's requests fail, not the worker
            log.error("a batch of %d inputs failed: %s: %s", len(batch), type(err).__name__,
                      err)
            for ticket in {id(row.ticket): row.ticket for row in batch}.values():
                self._finish(ticket, err)
            return
        complete = []
        with self._lock:  # another worker may be running other inputs of the same request
            for row, output in zip(batch, outputs, strict=True):
                ticket = row.ticket
                ticket.outputs[row.index] = output
                ticket.remaining -= 1
                if ticket.remaining == 0:
                    complete.append(ticket)
        for ticket in complete:
            self._finish(ticket, ticket.outputs)

    def _finish(self, ticket: Ticket, result) -> None:
        with self._lock:
            if ticket.finished:
                return
            ticket.finished = True
            if isinstance(result, BaseException):  # its other inputs need not run
                self._rows = deque(row for row in self._rows if row.ticket is not ticket)
        if not ticket.cancelled:
            ticket.on_done(result)
