"""The operations under way on a ledger, which closing it waits for.

Every read and write of :class:`ledger.engine.Engine` enters here first
(:meth:`InFlight.entered`) and leaves when it is done; ``close()`` marks the
ledger closed, then waits (:meth:`InFlight.drain`) until no other thread has an
operation under way before it closes the connections, so that a connection is
never closed under a statement another thread is running (which SQLite answers
with a crash of the process, not an error). An operation that enters once the
ledger is closed is refused with ``ClosedLedgerError``: it registers first and
looks second, and ``close`` marks first and looks second, so one of the two
always sees the other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["CLOSE_WAIT", "InFlight"]

#: How long ``close()`` waits for other threads' operations under way (seconds):
#: an iterator another thread holds open past that is cut off (its next step
#: raises ``ClosedLedgerError``).
CLOSE_WAIT = 5.0


class InFlight:
    """How many operations each thread has under way on one ledger."""

    def __init__(self, check_open: Callable[[], None]) -> None:
        self._check_open = check_open
        self._lock = threading.Lock()
        self._busy: dict[int, int] = {}

    def entered(self) -> _Entry:
        """Register an operation of this thread, then check the ledger is open (the
        operation is left again if it is not); leave it by exiting the entry.

        Raises:
            ClosedLedgerError: the ledger is closed (or was opened by the process
                this one was forked from).
        """
        me = threading.get_ident()
        with self._lock:
            self._busy[me] = self._busy.get(me, 0) + 1
        entry = _Entry(self, me)
        try:
            self._check_open()
        except BaseException:
            entry.__exit__(None, None, None)
            raise
        return entry

    def _leave(self, thread: int) -> None:
        with self._lock:
            depth = self._busy[thread] - 1
            if depth:
                self._busy[thread] = depth
            else:
                del self._busy[thread]

    def drain(self, timeout: float = CLOSE_WAIT) -> bool:
        """Wait until no thread but this one has an operation under way (this
        thread's own, such as an iterator it holds open, do not count), at most
        ``timeout`` seconds; False if some still were then."""
        me = threading.get_ident()
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                others = any(thread != me for thread in self._busy)
            if not others:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)


class _Entry:
    """One operation under way (a context manager: exiting it leaves)."""

    __slots__ = ("_flight", "_left", "_thread")

    def __init__(self, flight: InFlight, thread: int) -> None:
        self._flight = flight
        self._thread = thread
        self._left = False

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self._left:  # once, from whichever thread finishes it
            self._left = True
            self._flight._leave(self._thread)
