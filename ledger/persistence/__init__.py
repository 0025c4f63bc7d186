"""Backends: a ledger URL becomes an eventsourcing environment and a recorder.

- :mod:`ledger.persistence.urls` — parsing a ledger URL into a :class:`Backend`;
- :mod:`ledger.persistence.sqlite` — the SQLite backend (a file or ``memory:``);
- :mod:`ledger.persistence.memory` — how reads and writes of ``memory:`` take
  turns (shared-cache tables are locked, not versioned);
- :mod:`ledger.persistence.postgres` — the PostgreSQL backend;
- :mod:`ledger.persistence.base` — what both share (the tables beside the events,
  the work done in the transaction that appends events);
- :mod:`ledger.persistence.faults` — a failure of the disk, the connection or a lock
  as the typed ``LedgerError`` the engine raises;
- :mod:`ledger.persistence.copying` and :mod:`ledger.persistence.copy_target` — a
  ledger copied into another database, of either backend.

Each backend module owns its recorder *and* its read and write transactions; the
rest of the ledger names no backend, but for :mod:`ledger.damage`, which looks at a
database ``verify`` could not open with a read-only connection of its own.
"""

from __future__ import annotations

import random
import sqlite3
import time
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import OperationalError, Transcoder

from ledger.persistence.base import Guard, LedgerRecorderMixin
from ledger.persistence.sqlite import LedgerSQLiteRecorder
from ledger.persistence.sqlite_files import (
    check_writable,
    foreign_file,
    holds_ledger,
    read_only_uri,
    unwritable,
)
from ledger.persistence.urls import DEFAULT_PATH, Backend, resolve_url
from ledger.serialization import MsgpackTranscoder

if TYPE_CHECKING:
    # psycopg loads only when a PostgreSQL ledger is opened (the postgres extra).
    from ledger.persistence.postgres import LedgerPostgresRecorder

    LedgerRecorder = LedgerSQLiteRecorder | LedgerPostgresRecorder


def __getattr__(name: str) -> Any:
    if name in ("LedgerPostgresRecorder", "LedgerRecorder"):
        from ledger.persistence.postgres import LedgerPostgresRecorder

        if name == "LedgerRecorder":
            return LedgerSQLiteRecorder | LedgerPostgresRecorder
        return LedgerPostgresRecorder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class LedgerApplication(Application[UUID]):
    """The eventsourcing application behind a :class:`ledger.Ledger`."""

    name = "provledger"

    def construct_transcoder(self) -> Transcoder:
        """Every stored event is msgpack (see :mod:`ledger.serialization`)."""
        return MsgpackTranscoder()

    @property
    def ledger_recorder(self) -> LedgerRecorder:
        """The recorder, typed."""
        assert isinstance(self.recorder, LedgerRecorderMixin)
        recorder: Any = self.recorder
        return recorder  # type: ignore[no-any-return]


__all__ = [
    "DEFAULT_PATH",
    "Backend",
    "Guard",
    "LedgerApplication",
    "LedgerPostgresRecorder",
    "LedgerRecorder",
    "LedgerSQLiteRecorder",
    "check_writable",
    "construct_application",
    "foreign_file",
    "holds_ledger",
    "read_only_uri",
    "resolve_url",
    "unwritable",
]


def construct_application(env: dict[str, str]) -> LedgerApplication:
    """The application of a ledger's environment, waited for while another process
    creating the same SQLite file holds it locked."""
    # Several processes creating a fresh SQLite file at once can find it locked
    # while another sets WAL mode or creates the tables; that is worth waiting for.
    for attempt_number in range(60):
        try:
            return LedgerApplication(env=env)
        except (OperationalError, sqlite3.OperationalError) as exc:
            if "locked" not in str(exc) or attempt_number == 59:
                raise
            time.sleep(0.05 + 0.05 * random.random())
    raise AssertionError("unreachable")  # pragma: no cover
