"""``GET /healthz``: whether the ledger answers, for load balancers and orchestrators.

It needs no token and reads none, and tells an unauthenticated caller nothing of
the ledger but whether it is up: 200 ``{"status": "ok"}`` when one cheap read
(the log position, in a thread of the endpoint's own) answers;
503 ``{"status": "unavailable", "reason": …}`` when it does not, the reason one
fixed phrase per kind of failure. The ledger's own message (it names the ledger's
URL, password left out, and the database server's words) goes to the server's log
instead, once when the ledger stops answering, with a line when it answers again,
so a probe every second adds one access-log line and nothing else.

One read at a time, in one thread of its own: probes that arrive while a read is
under way share its answer, so a database that does not answer (PostgreSQL waits
up to its connect timeout, 30 s by default) holds that thread, not one per
probe, and none of the worker threads the API runs its ledger calls in. A probe
that goes away (its client disconnected, its request cancelled) leaves the read
to finish for the others.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ledger.application import Ledger
from ledger.errors import ClosedLedgerError, ConnectionLostError, LedgerError, StorageError

PATH = "/healthz"

#: The logger of the lines saying the ledger stopped (WARNING) or resumed (INFO)
#: answering.
HEALTH_LOGGER = "provledger.health"
_log = logging.getLogger(HEALTH_LOGGER)

#: The reason a 503 gives, by the error the read raised (the first class that
#: matches): short, and free of the URL, the server's words and any secret.
REASONS: tuple[tuple[type[LedgerError], str], ...] = (
    (ClosedLedgerError, "the ledger is closed"),
    (ConnectionLostError, "the connection to the database was lost"),
    (StorageError, "the database cannot be reached or read"),
)
#: The reason for any other failure of the read.
OTHER_REASON = "the ledger failed a read"

_HEADERS = {"Cache-Control": "no-store"}


def reason_of(exc: BaseException) -> str:
    """The 503's reason for ``exc``, an error the health read raised."""
    return next((text for cls, text in REASONS if isinstance(exc, cls)), OTHER_REASON)


class Health:
    """The health endpoint over one ledger (:meth:`endpoint`)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._lock = threading.Lock()
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="provledger-health")
        #: The read under way (its reason, None when the ledger answered), if any.
        self._pending: Future[str | None] | None = None
        #: The reason of the last failed read, until a read succeeds again.
        self._failing: str | None = None

    async def endpoint(self, request: Request) -> Response:
        """``GET``/``HEAD /healthz``: 200 when the ledger answers a read, else 503."""
        del request  # nothing of it is read: no token, no cookie, no parameter
        reason = await self.check()
        if reason is None:
            return JSONResponse({"status": "ok"}, headers=_HEADERS)
        body = {"status": "unavailable", "reason": reason}
        return JSONResponse(body, status_code=503, headers=_HEADERS)

    async def check(self) -> str | None:
        """None when the ledger answers a read, else why not (:data:`REASONS`);
        joins the read under way, if any, instead of starting another. The read
        is handed to the endpoint's thread before anything is awaited, and a
        probe cancelled while it waits (shielded) cancels nothing of it."""
        with self._lock:
            if self._pending is None:
                self._pending = self._reader.submit(self._read)
            pending = self._pending
        return await asyncio.shield(asyncio.wrap_future(pending))

    def _read(self) -> str | None:
        """Read the log position; the outcome (in the endpoint's thread)."""
        reason: str | None
        try:
            _ = self.ledger.position  # the read is the check; its value is not shown
        except LedgerError as exc:
            reason = reason_of(exc)
            self._note(reason, str(exc))
        except Exception as exc:
            # A probe must hear "unavailable", never a 500: whatever failed the
            # read is the server's to log, with its traceback.
            reason = OTHER_REASON
            self._note(reason, f"{type(exc).__name__}: {exc}", exc_info=exc)
        else:
            reason = None
            self._note(None, "")
        finally:
            with self._lock:
                self._pending = None
        return reason

    def _note(self, reason: str | None, detail: str, exc_info: BaseException | None = None) -> None:
        """Log a change of state (reads are one at a time: no race on it)."""
        if reason is not None and self._failing is None:
            # One line, as every line of the server's log is (psycopg's messages
            # run over several).
            detail = " ".join(detail.split())
            _log.warning("health: %s (%s)", reason, detail, exc_info=exc_info)
        elif reason is None and self._failing is not None:
            _log.info("health: the ledger answers again")
        self._failing = reason


__all__ = ["HEALTH_LOGGER", "OTHER_REASON", "PATH", "REASONS", "Health", "reason_of"]
