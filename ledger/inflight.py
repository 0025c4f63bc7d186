"""The operations under way on a ledger, which closing it waits for.

Every read and write of :class:`ledger.engine.Engine` enters here first
(:meth:`InFlight.enter`) and leaves when it is done (:meth:`InFlight.leave`);
``close()`` marks the ledger closed, then waits (:meth:`InFlight.drain`) until
no other thread has an operation under way before it closes the connections,
so that a connection is never closed under a statement another thread is
running (which SQLite answers with a crash of the process, not an error). An
operation that enters once the ledger is closed is refused with
``ClosedLedgerError``: it registers first and looks second, and ``close`` marks
first and looks second, so one of the two always sees the other.

Each operation is one entry of a set (adding and discarding one are single
steps of the interpreter, so no lock is taken on a read's path), named by its
thread and a serial number: an iterator finished in another thread than the one
that started it leaves its own entry.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

__all__ = ["CLOSE_WAIT", "Entered", "InFlight", "Token"]

#: How long ``close()`` waits for other threads' operations under way (seconds):
#: an iterator another thread holds open past that is cut off (its next step
#: raises ``ClosedLedgerError``).
CLOSE_WAIT = 5.0

#: One operation under way: the thread that started it, and a serial number.
Token = tuple[int, int]


class InFlight:
    """The operations under way on one ledger, by thread."""

    def __init__(self, check_open: Callable[[], None]) -> None:
        self._check_open = check_open
        self._serial = itertools.count()
        self._under_way: set[Token] = set()

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
            self._under_way.discard(token)
            raise
        return token

    def entered(self) -> Entered:
        """:meth:`enter`, as a context manager whose exit leaves."""
        return Entered(self, self.enter())

    def leave(self, token: Token) -> None:
        """The operation of ``token`` is done (from whichever thread finishes it)."""
        self._under_way.discard(token)

    def drain(self, timeout: float = CLOSE_WAIT) -> bool:
        """Wait until no thread but this one has an operation under way (this
        thread's own, such as an iterator it holds open, do not count), at most
        ``timeout`` seconds; False if some still were then."""
        me = threading.get_ident()
        deadline = time.monotonic() + timeout
        while any(thread != me for thread, _ in list(self._under_way)):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        return True


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
