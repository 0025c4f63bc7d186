"""Backends: a ledger URL becomes an eventsourcing environment and a recorder.

The recorders are eventsourcing's own, extended in one place: after the events
of a command are inserted, the same transaction runs the command's guard (a
conditional append: re-checks what the command assumed, under the write lock),
applies the events to every view and stores evidence snapshots. Either all of
that commits or none of it does.

The stored events table is append-only: triggers created with the tables make
any UPDATE or DELETE on it fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse
from uuid import UUID

from eventsourcing.application import Application, ProcessingEvent
from eventsourcing.persistence import Notification, Recording, Transcoder
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor, SQLiteDatastore
from eventsourcing.utils import get_topic

from ledger.errors import InvalidURLError
from ledger.serialization import MsgpackTranscoder
from projections.base import SQLITE, Cursor, Dialect
from projections.projector import Projector

DEFAULT_PATH = "provledger.db"

SNAPSHOT_DDL = (
    "CREATE TABLE IF NOT EXISTS {t}pl_snapshots ("
    "ref TEXT PRIMARY KEY, content {blob} NOT NULL, size {bigint} NOT NULL)",
)

#: A guard runs inside the command's transaction, after the views caught up and
#: before the command's own events are applied; it raises to refuse the command.
Guard = Callable[[Cursor], None]


@dataclass(frozen=True)
class Backend:
    """What a ledger URL resolved to."""

    kind: str  # "memory", "sqlite" or "postgresql"
    url: str
    env: dict[str, str]
    path: str | None = None


def resolve_url(url: str | None) -> Backend:
    """Turn a ledger URL into a backend description.

    ``None`` means ``$PROVLEDGER_URL``, else ``sqlite:///./provledger.db``.

    Raises:
        InvalidURLError: the URL names no supported backend.
    """
    if url is None:
        url = os.environ.get("PROVLEDGER_URL") or f"sqlite:///{DEFAULT_PATH}"
    if not isinstance(url, str) or not url.strip():
        raise InvalidURLError(f"ledger URL {url!r} is empty or not a string")
    recorder_topic = get_topic(LedgerSQLiteRecorder)
    if url in ("memory:", "memory://"):
        # An in-process SQLite database shared by the connections of this ledger only.
        name = f"file:provledger-{uuid.uuid4().hex}?mode=memory&cache=shared"
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": name,
            "APPLICATION_RECORDER_TOPIC": recorder_topic,
        }
        return Backend(kind="memory", url=url, env=env)
    if url.startswith("sqlite:"):
        parsed = urlparse(url)
        if not url.startswith("sqlite:///"):
            raise InvalidURLError(
                f"ledger URL {url!r} is not sqlite:///relative/path or sqlite:////absolute/path"
            )
        path = unquote(parsed.path[1:]) if parsed.path.startswith("/") else parsed.path
        if not path or path.endswith("/"):
            raise InvalidURLError(f"ledger URL {url!r} names no database file")
        timeout = parse_qs(parsed.query).get("timeout", ["30"])[0]
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": path,
            "SQLITE_LOCK_TIMEOUT": timeout,
            "APPLICATION_RECORDER_TOPIC": recorder_topic,
        }
        return Backend(kind="sqlite", url=url, env=env, path=path)
    if url.startswith(("postgresql:", "postgres:")):
        raise InvalidURLError(f"ledger URL {url!r}: the PostgreSQL backend is not available yet")
    raise InvalidURLError(
        f"ledger URL {url!r} is not memory:, sqlite:///path or postgresql://user@host/db"
    )


class LedgerRecorderMixin:
    """What every backend's recorder adds after inserting a command's events."""

    projector: Projector
    dialect: Dialect

    def after_insert(self, c: Cursor, ids: Sequence[int], kwargs: dict[str, Any]) -> None:
        """Guard, views and snapshots, in the events' transaction."""
        events = kwargs.get("ledger_events")
        if not ids:
            return
        if self.projector.enabled:
            self.projector.catch_up(c, upto=ids[0] - 1)
        guard: Guard | None = kwargs.get("guard")
        if guard is not None:
            guard(c)
        if events is not None:
            self.projector.apply(c, list(zip(ids, events, strict=True)))
        snapshots: Sequence[tuple[str, bytes]] = kwargs.get("snapshots", ())
        for ref, content in snapshots:
            c.execute(
                self.dialect.q(
                    "INSERT INTO {t}pl_snapshots (ref, content, size) VALUES (?, ?, ?) "
                    "ON CONFLICT (ref) DO NOTHING"
                ),
                (ref, content, len(content)),
            )


class LedgerSQLiteRecorder(LedgerRecorderMixin, SQLiteApplicationRecorder):
    """eventsourcing's SQLite application recorder, with views in the same transaction."""

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str = "stored_events"):
        self.dialect = SQLITE
        self.projector = Projector(dialect=SQLITE, reader=self.read_after)
        super().__init__(datastore, events_table_name)

    def construct_create_table_statements(self) -> list[str]:
        """eventsourcing's table, append-only triggers, the snapshot store and the views."""
        table = self.events_table_name
        statements = super().construct_create_table_statements()
        statements += [
            f"CREATE TRIGGER IF NOT EXISTS {table}_no_update BEFORE UPDATE ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: UPDATE refused'); END",
            f"CREATE TRIGGER IF NOT EXISTS {table}_no_delete BEFORE DELETE ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: DELETE refused'); END",
        ]
        statements += [SQLITE.q(s) for s in SNAPSHOT_DDL]
        return statements

    def _create_table(self, c: SQLiteCursor) -> None:
        super()._create_table(c)
        self.projector.create_tables(c)

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[Any], **kwargs: Any
    ) -> Sequence[int] | None:
        ids = list(super()._insert_events(c, stored_events) or ())
        self.after_insert(c, ids, kwargs)
        return ids

    def read_after(self, c: Cursor, after: int, limit: int) -> list[Notification]:
        """Stored events after ``after``, read inside an open transaction."""
        c.execute(
            f"SELECT rowid, * FROM {self.events_table_name} WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, limit),
        )
        return [
            Notification(
                id=row["rowid"],
                originator_id=UUID(row["originator_id"]),
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=row["state"],
            )
            for row in c.fetchall()
        ]

    def select_record_events(self, c: Cursor, originator_id: UUID) -> list[Notification]:
        """Every stored event of one aggregate with its log position."""
        c.execute(
            f"SELECT rowid, * FROM {self.events_table_name} WHERE originator_id=? "
            "ORDER BY originator_version",
            (originator_id.hex,),
        )
        return [
            Notification(
                id=row["rowid"],
                originator_id=originator_id,
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=row["state"],
            )
            for row in c.fetchall()
        ]


class LedgerApplication(Application[UUID]):
    """The eventsourcing application behind a :class:`ledger.Ledger`."""

    name = "provledger"

    def construct_transcoder(self) -> Transcoder:
        """Every stored event is msgpack (see :mod:`ledger.serialization`)."""
        return MsgpackTranscoder()

    def _record(self, processing_event: ProcessingEvent[UUID]) -> list[Recording[UUID]]:
        # Hand the domain events to the recorder so the views are updated from
        # them in the same transaction, without decoding what was just encoded.
        processing_event.saved_kwargs["ledger_events"] = list(processing_event.events)
        return super()._record(processing_event)

    @property
    def ledger_recorder(self) -> LedgerSQLiteRecorder:
        """The recorder, typed."""
        assert isinstance(self.recorder, LedgerSQLiteRecorder)
        return self.recorder
