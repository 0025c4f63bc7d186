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
import signal
from types import FrameType

import uvicorn

_log = logging.getLogger("uvicorn.error")

#: What uvicorn says while it waits, of a Ctrl-C that no longer does that.
_FORCE_QUIT = " (CTRL+C to force quit)"


class Server(uvicorn.Server):
    """A uvicorn server whose stop, once begun, is not cut short by another signal.

    Args:
        config: uvicorn's configuration.
        lock_wait: how long a write waits for the ledger's lock (seconds; None:
            as long as the database lets it), told when a stop is asked for again.
    """

    def __init__(self, config: uvicorn.Config, lock_wait: float | None) -> None:
        super().__init__(config)
        self.lock_wait = lock_wait

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
        bound = ""
        if self.lock_wait is not None:
            bound = f" (a write waits at most {self.lock_wait:g} s for its lock)"
        _log.info(
            "Already stopping (%s ignored): waiting for %s under way to finish%s, "
            "then closing the ledger",
            sig.name,
            requests,
            bound,
        )


def no_force_quit(record: logging.LogRecord) -> bool:
    """A log filter that drops uvicorn's "(CTRL+C to force quit)" from its lines
    (here a second Ctrl-C does not force anything). Keeps every record."""
    if isinstance(record.msg, str) and record.msg.endswith(_FORCE_QUIT):
        record.msg = record.msg.removesuffix(_FORCE_QUIT)
    return True


__all__ = ["Server", "no_force_quit"]
