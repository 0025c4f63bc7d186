"""How long a connection may take to send a request, and how many are held at once.

uvicorn's HTTP/1.1 protocol (h11) waits for a request's headers and body as
long as the client takes, and accepts every connection: a client that connects
and sends nothing, half its headers or half its body holds a file descriptor for
good, and a few hundred of them leave the process none to accept with (``Too
many open files``), the API and ``/healthz`` included. :class:`LimitedH11Protocol`,
uvicorn's h11 protocol with three limits (given to ``uvicorn.Config`` by
:func:`config_options`), closes such connections:

- **a request arrives whole within** ``request_timeout`` seconds
  (:data:`REQUEST_TIMEOUT`, 30 by default) of the connection being made, or of
  its first byte on a kept-alive connection; otherwise the client is answered
  ``408 Request Timeout`` (when no answer to it has begun) and the connection is
  closed. An application reading the body is told the client left. The time the
  application then takes to answer is not limited.
- **a kept-alive connection stays idle** for :data:`KEEP_ALIVE_TIMEOUT` seconds
  after an answer (uvicorn's ``timeout_keep_alive``), then is closed.
- **at most** ``max_connections`` **connections at once**
  (:func:`limits`: what the process's open-file limit leaves once the ledger's
  own files, its worker threads' database connections, Graphviz's pipes and a
  burst of connections being accepted are counted); a connection over it is
  answered ``503`` with ``Retry-After`` and closed at once, before any of its
  request is read.
  uvicorn's own ``limit_concurrency`` is not used: it refuses requests, and
  only once their headers are in, so connections that never send one still
  count against the open-file limit.

Only what both ``provledger serve`` and ``provledger mcp --transport
streamable-http`` need is imported here (uvicorn and h11, both dependencies of
either), so the module can be used by either.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import resource
import signal
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any, ClassVar

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

#: Seconds a client may take to send a whole request (headers and body).
REQUEST_TIMEOUT = 30.0
#: Seconds a kept-alive connection stays open without a new request.
KEEP_ALIVE_TIMEOUT = 5
#: File descriptors kept for the process itself, apart from its worker threads'
#: database connections: the ledger's files, the listening socket, logs,
#: Graphviz's pipes, the Python runtime's own.
RESERVED_FILES = 64
#: The worker threads that may each hold the ledger open (Starlette's and anyio's
#: pool of 40 for reads and pages, and the 8 of :data:`~ledger.serve.threads.WRITE_THREADS`),
#: and the files each may hold (SQLite: the database and its ``-wal``; PostgreSQL:
#: a socket).
WORKER_THREADS = 40 + 8
FILES_PER_THREAD = 2
#: The connection limit whatever the open-file limit (an idle connection costs
#: little, but requests beyond the worker threads only wait).
MOST_CONNECTIONS = 1024
#: The connection limit however low the open-file limit.
FEWEST_CONNECTIONS = 8
#: asyncio accepts up to ``backlog`` connections each turn of its event loop
#: (uvicorn's ``backlog``, also the length of the kernel's queue of connections
#: not yet accepted), and several turns pass before the first of them is counted
#: (and, over the limit, closed): this many batches' worth of files is kept free
#: for them, lest a burst of connections run the process out of files anyway.
ACCEPT_TURNS = 4
#: The batch of connections accepted at once, whatever the open-file limit.
BACKLOG_RANGE = (16, 2048)


@dataclass(frozen=True)
class Limits:
    """How many connections are held at once, and accepted in one batch."""

    max_connections: int
    backlog: int


_log = logging.getLogger("uvicorn.error")


def open_file_limit() -> int:
    """The process's soft limit on open file descriptors (``RLIMIT_NOFILE``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MOST_CONNECTIONS * 16 if soft == resource.RLIM_INFINITY else soft


def limits(files: int | None = None) -> Limits:
    """The connection limits under an open-file limit of ``files`` (None: this
    process's). What is left once :data:`RESERVED_FILES` and the worker threads'
    files are set aside is shared between the connections held (between
    :data:`FEWEST_CONNECTIONS` and :data:`MOST_CONNECTIONS`) and
    :data:`ACCEPT_TURNS` batches of connections being accepted (an eighth of
    what is left each, within :data:`BACKLOG_RANGE`)."""
    files = open_file_limit() if files is None else files
    left = files - RESERVED_FILES - WORKER_THREADS * FILES_PER_THREAD
    low, high = BACKLOG_RANGE
    backlog = max(low, min(high, left // 8))
    held = left - ACCEPT_TURNS * backlog
    return Limits(max(FEWEST_CONNECTIONS, min(MOST_CONNECTIONS, held)), backlog)


def _plain(status: int, reason: str, text: str, extra: bytes = b"") -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written out here: the
    connection's h11 state cannot send one before a request was read. Its body is
    the API's error JSON (``type``: ``reason`` without spaces; ``text`` the message)."""
    error = {"type": reason.replace(" ", ""), "message": text, "field": None}
    body = json.dumps({"error": error}).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\n".encode()
        + b"content-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n".encode()
        + extra
        + b"connection: close\r\n\r\n"
        + body
    )


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol that closes a connection whose request does not
    arrive whole within :attr:`request_timeout` seconds (408), and refuses
    connections beyond :attr:`max_connections` (503). Made with its limits by
    :func:`protocol`."""

    request_timeout: ClassVar[float] = REQUEST_TIMEOUT
    max_connections: ClassVar[int] = MOST_CONNECTIONS
    #: When the limit was last said to be reached (:func:`time.monotonic`): said at
    #: most once a minute, not once per connection refused.
    _said_full: ClassVar[float | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._refused = False
        self._upgraded = False  # a WebSocket now: no HTTP request to wait for
        #: The client's side as last watched: back to IDLE, its request is all in.
        self._theirs: object = None

    # -- the connection limit ---------------------------------------------------

    def connection_made(  # type: ignore[override]  # as uvicorn's
        self, transport: asyncio.Transport
    ) -> None:
        """Count the connection in, or refuse it when :attr:`max_connections` are held."""
        if len(self.connections) >= self.max_connections:
            self._refuse(transport)
            return
        super().connection_made(transport)
        self._watch()

    def _refuse(self, transport: asyncio.Transport) -> None:
        """Answer 503 and close at once, reading nothing: the file is given back
        (a client that sent its request already may be reset before it reads the
        503, and is refused all the same)."""
        now, said = time.monotonic(), type(self)._said_full
        if said is None or now - said >= 60:
            type(self)._said_full = now
            _log.warning(
                "%d connections are open, as many as this server holds: new ones are "
                "answered 503 until some close",
                self.max_connections,
            )
        self.transport = transport
        self._refused = True
        transport.write(
            _plain(
                503,
                "Service Unavailable",
                "too many connections; try again",
                b"retry-after: 1\r\n",
            )
        )
        transport.close()

    def data_received(self, data: bytes) -> None:
        """Read as uvicorn does (a refused connection's data is dropped); then watch
        the request's deadline."""
        if self._refused:
            return
        super().data_received(data)
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the deadline; uvicorn does the rest (not for a refused connection,
        which it never counted)."""
        if self._refused:
            return
        self._stop_deadline()
        super().connection_lost(exc)

    # -- the request's deadline ---------------------------------------------------

    def on_response_complete(self) -> None:
        """After an answer: uvicorn's keep-alive wait, or the next request's deadline."""
        super().on_response_complete()
        self._watch()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        """A WebSocket is no HTTP request: the deadline ends with the handshake."""
        self._upgraded = True
        self._stop_deadline()
        super().handle_websocket_upgrade(event)

    def _watch(self) -> None:
        """Keep the deadline set while a request is on its way: headers awaited on a
        connection not idle between requests (uvicorn's keep-alive wait covers
        that), or a body awaited. Set once per request, not on each byte: a client
        trickling one byte at a time still has to finish in time; the next
        request gets its own (a body that ends after its answer, a 401 sent
        before it, starts the next request's time then)."""
        if self._upgraded:
            return
        theirs = self.conn.their_state
        if theirs is not self._theirs:
            if theirs is h11.IDLE:  # their request is all in: the next has its own time
                self._stop_deadline()
            self._theirs = theirs
        awaited = theirs is h11.SEND_BODY or (
            theirs is h11.IDLE and self.timeout_keep_alive_task is None
        )
        if not awaited or self.transport.is_closing():
            self._stop_deadline()
        elif self._deadline is None:
            self._deadline = self.loop.call_later(self.request_timeout, self._timed_out)

    def _stop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        """The request did not arrive in time: 408 (unless an answer has begun),
        the application told the client left, the connection closed."""
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:
            # The server stopped reading (a body the application has not asked for
            # yet, past uvicorn's high-water mark): the wait is not the client's.
            self._deadline = self.loop.call_later(self.request_timeout, self._timed_out)
            return
        cycle = self.cycle if self.conn.their_state is h11.SEND_BODY else None
        answered = cycle is None or not cycle.response_started
        if answered:
            said = f"the request did not arrive whole within {self.request_timeout:g} s"
            dated = b"".join(k + b": " + v + b"\r\n" for k, v in self.server_state.default_headers)
            self.transport.write(_plain(408, "Request Timeout", said, dated))
        if cycle is not None:  # what the application reads next is the client leaving
            cycle.disconnected = True
            cycle.message_event.set()
        if self.client is not None:
            _log.info(
                "%s:%d - no whole request within %g s: %s",
                *self.client,
                self.request_timeout,
                "answered 408 and closed" if answered else "closed (its answer had begun)",
            )
        self.transport.close()


def protocol(request_timeout: float, max_connections: int) -> type[LimitedH11Protocol]:
    """:class:`LimitedH11Protocol` with these limits (uvicorn makes one protocol
    object per connection from the class it is given)."""
    attrs = {"request_timeout": request_timeout, "max_connections": max_connections}
    return type("LimitedH11Protocol", (LimitedH11Protocol,), attrs)


def config_options(
    request_timeout: float | None = None, max_connections: int | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config``: the limited h11 protocol, the
    keep-alive wait and the accept batch (None: :data:`REQUEST_TIMEOUT`, and
    :func:`limits` for this process's open-file limit)::

        uvicorn.Config(app, ..., **config_options())
    """
    timeout = REQUEST_TIMEOUT if request_timeout is None else request_timeout
    fitting = limits()
    held = fitting.max_connections if max_connections is None else max_connections
    return {
        "http": protocol(timeout, held),
        "timeout_keep_alive": KEEP_ALIVE_TIMEOUT,
        "backlog": fitting.backlog,
    }


# -- the stop ------------------------------------------------------------------------
#
# uvicorn's server, stopped by a signal without cutting requests under way short.
#
# uvicorn stops gracefully on SIGINT or SIGTERM: it takes no new connection and
# waits for the requests under way to be answered. But it takes a second SIGINT
# (Ctrl-C twice) to mean "force quit": it stops waiting, and the end of the event
# loop cancels the requests still under way. Their writes, in worker threads
# nothing stops, commit all the same, after the client was told 500 (and a client
# that sends one again after a 500 writes it twice). Here a second stop signal,
# and any after it, only logs that the stop is under way and what it waits for:
# the requests under way finish (a write waits for its lock at most the ledger's
# lock wait) and are answered. SIGKILL still ends the process at once, and with
# it any transaction not yet committed.


#: What uvicorn says while it waits, of a Ctrl-C that no longer does that.
_FORCE_QUIT = " (CTRL+C to force quit)"


#: How much longer than twice a write's lock wait a stop waits for the requests under way.
STOP_MARGIN = 5
#: The lock wait assumed where the backend states none (a SQLite URL's default).
DEFAULT_LOCK_WAIT = 30.0


def stop_wait(lock_wait: float | None) -> int:
    """How long a stop waits for the requests under way (uvicorn's graceful
    shutdown timeout): twice a write's lock wait (one queued behind this process's
    other writers waits in the process, then up to the whole wait in the database)
    and a margin. A request still under way
    then (a client sending its body slowly, or not at all) is cancelled: work not
    yet begun never runs, and work begun is still answered
    (:func:`ledger.serve.threads.finish_in_thread`), so no client holds a stop open."""
    return 2 * math.ceil(DEFAULT_LOCK_WAIT if lock_wait is None else lock_wait) + STOP_MARGIN


class Server(uvicorn.Server):
    """A uvicorn server whose stop, once begun, is not cut short by another signal,
    and ends within ``config.timeout_graceful_shutdown`` (:func:`stop_wait`)."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """The first stop signal stops the server (gracefully); later ones say so."""
        if not self.should_exit:
            super().handle_exit(sig, frame)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving yet or any more: nothing under way to tell of
            return
        # Logged from the event loop, not this handler: the handler may run while a
        # line is being written, and a write into that one is an error.
        loop.call_soon_threadsafe(self.say_stopping, signal.Signals(sig))

    def say_stopping(self, sig: signal.Signals) -> None:
        """Log that the stop is under way and what it waits for (one line)."""
        count = len(self.server_state.tasks)
        if count == 0:
            _log.info("Already stopping (%s ignored): closing the ledger", sig.name)
            return
        requests = "1 request" if count == 1 else f"{count} requests"
        _log.info(
            "Already stopping (%s ignored): waiting for %s under way to finish "
            "(at most %g s since the stop began), then closing the ledger",
            sig.name,
            requests,
            self.config.timeout_graceful_shutdown,
        )


def stopping_lines(record: logging.LogRecord) -> bool:
    """A log filter for uvicorn's lines while it stops: drops "(CTRL+C to force
    quit)" (here a second Ctrl-C does not force anything), and tells a request
    cancelled at the end of the stop's wait in one line, not as a traceback of an
    error in the application. Keeps every record."""
    if isinstance(record.msg, str) and record.msg.endswith(_FORCE_QUIT):
        record.msg = record.msg.removesuffix(_FORCE_QUIT)
    cancelled = record.exc_info[1] if record.exc_info else None
    if isinstance(cancelled, asyncio.CancelledError):
        record.msg = "A request still under way at the end of the stop's wait was cancelled: %s"
        record.args = (str(cancelled) or "cancelled",)
        record.exc_info = None
        record.exc_text = None
    return True


__all__ = [
    "DEFAULT_LOCK_WAIT",
    "KEEP_ALIVE_TIMEOUT",
    "REQUEST_TIMEOUT",
    "STOP_MARGIN",
    "LimitedH11Protocol",
    "Limits",
    "Server",
    "config_options",
    "limits",
    "open_file_limit",
    "protocol",
    "stop_wait",
    "stopping_lines",
]
