"""The operations under way on a ledger, and closing it without cutting them off.

Every read and write of :class:`ledger.engine.Engine` enters here first
(:meth:`InFlight.enter`) and leaves when it is done (:meth:`InFlight.leave`).
``close()`` marks the ledger closed (what enters after that is refused with
``ClosedLedgerError``: it registers first and looks second, and ``close`` marks
first and looks second, so one of the two always sees the other), waits a while
for other threads' operations to finish, and closes the connections
(:meth:`InFlight.close`) once none is under way: at once, or when the last one
leaves. A connection is never closed under a statement still running (SQLite
answers that with a crash of the process, not an error): an iterator another
thread is still reading from runs to its end, and one left unfinished keeps the
connections open until it is finished or collected.

Each operation is one entry of a set (adding and discarding one are single
steps of the interpreter, so no lock is taken on a read's path), named by its
thread and a serial number.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

__all__ = ["CLOSE_WAIT", "Entered", "InFlight", "Token"]

#: How long ``close()`` waits for other threads' operations under way (seconds)
#: before it returns, leaving the connections to close when the last one ends.
CLOSE_WAIT = 5.0

#: One operation under way: the thread that started it, and a serial number.
Token = tuple[int, int]


class InFlight:
    """The operations under way on one ledger, and its connections' closing.

    ``check_open`` raises once the ledger is closed; ``close_connections``
    closes them (called once, by :meth:`close` or by the last :meth:`leave`).
    """

    def __init__(
        self, check_open: Callable[[], None], close_connections: Callable[[], None]
    ) -> None:
        self._check_open = check_open
        self._close_connections = close_connections
        self._serial = itertools.count()
        self._under_way: set[Token] = set()
        self._closing = False  # close() was called: the last to leave closes
        self._lock = threading.Lock()  # the connections are closed once
        self._closed = False

    def enter(self) -> Token:
        """Register an operation of this thread, then check the ledger is open (the
        operation is left again if it is not); pass the token to :meth:`leave`.

        Raises:
            ClosedLedgerError: the ledger is closed (or was opened by the process
                this one was forked from).
        """
        token = (threading.get_ident(), next(self._serial))
        self._under_way.add(token)
        try:
            self._check_open()
        except BaseException:
            self.leave(token)
            raise
        return token

    def entered(self) -> Entered:
        """:meth:`enter`, as a context manager whose exit leaves."""
        return Entered(self, self.enter())

    def leave(self, token: Token) -> None:
        """The operation of ``token`` is done (from whichever thread finishes it);
        the last one to leave a ledger being closed closes its connections."""
        self._under_way.discard(token)
        if self._closing and not self._under_way:
            self._close_once()

    def close(self, timeout: float | None = None) -> bool:
        """Close the connections once no operation is under way: wait for other
        threads' operations (at most ``timeout`` seconds, :data:`CLOSE_WAIT` if
        None), and leave the closing to the last of those still under way then.
        With an operation of this thread under way (the command whose acceptance
        check closes the ledger), return at once: that one cannot end while this
        waits, and others may be waiting for it. True if the connections are
        closed on return."""
        me = threading.get_ident()
        deadline = time.monotonic() + (CLOSE_WAIT if timeout is None else timeout)
        self._closing = True  # first: a wait cut short (Ctrl-C) leaves it to the last
        if any(thread == me for thread, _ in list(self._under_way)):
            return False  # this thread's own cannot end first: waiting gains nothing
        while self._under_way:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.002)
        if not self._under_way:
            self._close_once()
        return self._closed

    @property
    def connections_closed(self) -> bool:
        """Whether the connections are closed (no operation was under way then)."""
        return self._closed

    def _close_once(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close_connections()


class Entered:
    """An operation under way (:meth:`InFlight.entered`): exiting it leaves."""

    __slots__ = ("_flight", "_token")

    def __init__(self, flight: InFlight, token: Token) -> None:
        self._flight = flight
        self._token = token

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self._flight.leave(self._token)
