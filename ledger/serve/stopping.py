"""uvicorn's server, stopped by a signal without cutting requests under way short.

uvicorn stops gracefully on SIGINT or SIGTERM: it takes no new connection and
waits for the requests under way to be answered. But it takes a second SIGINT
(Ctrl-C twice) to mean "force quit": it stops waiting, and the end of the event
loop cancels the requests still under way. Their writes, in worker threads
nothing stops, commit all the same, after the client was told 500 (and a client
that sends one again after a 500 writes it twice). Here a second stop signal,
and any after it, only logs that the stop is under way and what it waits for:
the requests under way finish (a write waits for its lock at most the ledger's
lock wait) and are answered. SIGKILL still ends the process at once, and with
it any transaction not yet committed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
from types import FrameType

import uvicorn

_log = logging.getLogger("uvicorn.error")

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


__all__ = ["Server", "stop_wait", "stopping_lines"]
