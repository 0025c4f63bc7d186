"""What the HTTP surfaces (``provledger serve``, and ``provledger mcp`` over
streamable HTTP) share: the listening socket, bound before their server starts,
and the stop signals that end them once the ledger is closed."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ledger.errors import InvalidInputError


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (uvicorn's own failure to bind is log lines
    and an exit status of its own, not an error naming the address).

    Raises:
        InvalidInputError: the port is taken, or ``host`` is no address of this machine.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Named TCP, not left 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) on
    # the connections it accepts only from a socket whose ``proto`` says TCP, and
    # with it on, each answer on a kept-alive connection waited ~40 ms for the
    # client's delayed acknowledgement.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidInputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


class Stopped(BaseException):
    """A stop signal arrived (not an ``Exception``: nothing may take it for a
    failure and carry on); ``signal`` is which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signal = signal.Signals(signum)


#: The signals that stop a server.
STOPS = (signal.SIGINT, signal.SIGTERM)


def _raise_stopped(signum: int, _frame: object) -> None:
    # Once: a second stop signal (Ctrl-C twice, kill repeated) must not cut short
    # the closing of the ledger it starts. SIGKILL still ends a close that hangs.
    for stop in STOPS:
        signal.signal(stop, signal.SIG_IGN)
    raise Stopped(signum)


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Within this block SIGINT and SIGTERM raise :class:`Stopped`, so the
    ``with`` blocks around the server close what they opened.

    uvicorn handles both while it serves (:class:`ledger.connections.Server`
    takes a second one for "already stopping"): it shuts down gracefully, puts back
    the handlers it found (these), and raises the signal again, which reaches
    :func:`_raise_stopped`, not as a ``KeyboardInterrupt`` (a command cut short).
    Without them SIGTERM's default action ended the process there, the ledger
    left open (SQLite's ``-wal`` and ``-shm`` files behind, a PostgreSQL pool
    dropped rather than closed)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; uvicorn sets none either
        return
    before = {stop: signal.signal(stop, _raise_stopped) for stop in STOPS}
    try:
        yield
    finally:
        for stop, handler in before.items():
            signal.signal(stop, handler)
