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
import re
import sqlite3
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import InterfaceError, Notification, Transcoder
from eventsourcing.postgres import (
    PostgresApplicationRecorder,
    PostgresDatastore,
)
from eventsourcing.sqlite import (
    SQLITE3_DEFAULT_LOCK_TIMEOUT,
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteCursor,
    SQLiteDatastore,
    SQLiteFactory,
)
from eventsourcing.utils import get_topic

from ledger.errors import CorruptEventError, InvalidURLError
from ledger.merkle import leaf_data, leaf_hash
from ledger.serialization import MsgpackTranscoder
from projections.base import (
    SQLITE,
    Cursor,
    Dialect,
    insert_rows,
    postgres_dialect,
    rows_in,
)
from projections.projector import Projector

DEFAULT_PATH = "provledger.db"

#: Primary data beside the events (not views: never dropped by a rebuild): the
#: content-addressed evidence snapshots, and the boundaries of transactions that
#: appended more than one event, so an as-of position never lands inside one.
SNAPSHOT_DDL = (
    "CREATE TABLE IF NOT EXISTS {t}pl_snapshots ("
    "ref TEXT PRIMARY KEY, content {blob} NOT NULL, size {bigint} NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {t}pl_commits ("
    "last_pos {bigint} PRIMARY KEY, first_pos {bigint} NOT NULL)",
    "CREATE INDEX IF NOT EXISTS pl_commits_first ON {t}pl_commits (first_pos)",
    "CREATE TABLE IF NOT EXISTS {t}pl_merkle_leaves ("
    "position {bigint} PRIMARY KEY, leaf {blob} NOT NULL)",
)

#: Tables beside the events that must never change once written.
APPEND_ONLY = ("pl_commits", "pl_merkle_leaves")

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
            "PERSISTENCE_MODULE": get_topic(LedgerSQLiteFactory),
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
        if "\x00" in path:
            raise InvalidURLError(f"ledger URL {url!r} has a NUL character in its path")
        timeout = parse_qs(parsed.query).get("timeout", ["30"])[-1]
        if not timeout.isascii() or not timeout.isdigit() or not 0 < int(timeout) <= 86_400:
            raise InvalidURLError(
                f"ledger URL {url!r}: timeout must be whole seconds between 1 and 86400"
            )
        env = {
            "PERSISTENCE_MODULE": get_topic(LedgerSQLiteFactory),
            "SQLITE_DBNAME": path,
            "SQLITE_LOCK_TIMEOUT": timeout,
            "APPLICATION_RECORDER_TOPIC": recorder_topic,
        }
        return Backend(kind="sqlite", url=url, env=env, path=path)
    if url.startswith(("postgresql://", "postgres://")):
        return _postgres_backend(url)
    raise InvalidURLError(
        f"ledger URL {url!r} is not memory:, sqlite:///path or postgresql://user@host/db"
    )


_PG_OPTIONS = {
    "schema": "POSTGRES_SCHEMA",
    "pool_size": "POSTGRES_POOL_SIZE",
    "max_overflow": "POSTGRES_MAX_OVERFLOW",
    "lock_timeout": "POSTGRES_LOCK_TIMEOUT",
    "connect_timeout": "POSTGRES_CONNECT_TIMEOUT",
}
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _postgres_backend(url: str) -> Backend:
    parsed = urlparse(url)
    dbname = unquote(parsed.path.lstrip("/"))
    if not parsed.hostname or not dbname:
        raise InvalidURLError(
            f"ledger URL {url!r} is not postgresql://user:password@host:port/dbname?schema=…"
        )
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    unknown = sorted(set(query) - set(_PG_OPTIONS))
    if unknown:
        raise InvalidURLError(
            f"ledger URL {url!r}: unknown option {unknown[0]!r} "
            f"(known: {', '.join(sorted(_PG_OPTIONS))})"
        )
    schema = query.get("schema", "public")
    if not _SCHEMA.match(schema):
        raise InvalidURLError(
            f"ledger URL {url!r}: schema {schema!r} is not a plain lowercase name"
        )
    for option in ("pool_size", "max_overflow", "lock_timeout", "connect_timeout"):
        if option in query and not query[option].isdigit():
            raise InvalidURLError(f"ledger URL {url!r}: {option} must be a whole number")
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_HOST": parsed.hostname,
        "POSTGRES_PORT": str(parsed.port or 5432),
        "POSTGRES_USER": unquote(parsed.username or os.environ.get("USER", "postgres")),
        "POSTGRES_PASSWORD": unquote(parsed.password or ""),
        "POSTGRES_POOL_SIZE": "2",
        "POSTGRES_MAX_OVERFLOW": "8",
        "POSTGRES_LOCK_TIMEOUT": "30",
        "APPLICATION_RECORDER_TOPIC": get_topic(LedgerPostgresRecorder),
    }
    for option, value in query.items():
        env[_PG_OPTIONS[option]] = value
    return Backend(kind="postgresql", url=url, env=env)


#: Prepared statements each SQLite connection keeps. eventsourcing opens its
#: connections with ``cached_statements=True`` (that is, one), so a transaction
#: of several statements prepared every one of them again on every call.
STATEMENT_CACHE = 256


class LedgerSQLitePool(SQLiteConnectionPool):
    """eventsourcing's SQLite connection pool, with a real prepared-statement cache."""

    def _create_connection(self) -> SQLiteConnection:
        try:
            c = sqlite3.connect(
                database=self.db_name,
                uri=True,
                check_same_thread=False,
                isolation_level=None,  # auto-commit; transactions BEGIN explicitly
                cached_statements=STATEMENT_CACHE,
                timeout=self.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT,
            )
        except (sqlite3.Error, TypeError) as e:
            raise InterfaceError(e) from e
        if not self.is_sqlite_memory_mode and not self.is_journal_mode_wal:
            cursor = c.cursor()
            cursor.execute("PRAGMA journal_mode;")
            if str(cursor.fetchone()[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL;")
                self.journal_mode_was_changed_to_wal = True
            self.is_journal_mode_wal = True
        c.row_factory = sqlite3.Row
        return SQLiteConnection(sqlite_conn=c, max_age=self.max_age)


class LedgerSQLiteFactory(SQLiteFactory):
    """eventsourcing's SQLite persistence, with connections from ``LedgerSQLitePool``."""

    def __init__(self, env: Any):
        super().__init__(env)
        old = self.datastore.pool
        self.datastore.pool = LedgerSQLitePool(
            db_name=old.db_name,
            lock_timeout=old.lock_timeout,
            pool_size=old.pool_size,
            max_overflow=old.max_overflow,
            pool_timeout=old.pool_timeout,
            max_age=old.max_age,
            pre_ping=old.pre_ping,
        )
        old.close()


class LedgerRecorderMixin:
    """What every backend's recorder adds after inserting a command's events."""

    projector: Projector
    dialect: Dialect

    def vouch(self, c: Cursor, notes: Sequence[Notification]) -> None:
        """Raise ``CorruptEventError`` unless each stored event is byte for byte what
        the ledger appended (its Merkle leaf, written in the same transaction)."""
        first, last = notes[0].id, notes[-1].id
        c.execute(
            self.dialect.q(
                "SELECT position, leaf FROM {t}pl_merkle_leaves WHERE position >= ? "
                "AND position <= ?"
            ),
            (first, last),
        )
        leaves = {int(r["position"]): bytes(r["leaf"]) for r in c.fetchall()}
        for n in notes:
            leaf = leaf_hash(
                leaf_data(n.id, n.originator_id, n.originator_version, n.topic, n.state)
            )
            stored = leaves.get(n.id)
            if stored != leaf:
                why = "was not appended by the ledger" if stored is None else "was altered"
                raise CorruptEventError(f"stored event at position {n.id} {why}")

    def lock_for_write(self, c: Cursor) -> None:
        """Take the writers' lock in an open transaction (before reading what to write)."""
        raise NotImplementedError

    def last_versions(self, c: Cursor, originator_ids: Sequence[UUID]) -> dict[UUID, int]:
        """The newest stored version of each aggregate (absent ones left out), read
        inside an open transaction, one query per 500 aggregates."""
        select = (
            "SELECT originator_id AS oid, MAX(originator_version) AS v "
            f"FROM {self.events_table} WHERE originator_id IN ({{marks}}) GROUP BY originator_id"
        )
        keys = (self.originator_key(oid) for oid in originator_ids)
        return {
            row["oid"] if isinstance(row["oid"], UUID) else UUID(row["oid"]): int(row["v"])
            for row in rows_in(c, self.dialect, select, keys)
        }

    def originator_key(self, originator_id: UUID) -> Any:
        """An aggregate id as the events table stores it."""
        return originator_id

    @property
    def events_table(self) -> str:
        """The stored events table, as SQL."""
        raise NotImplementedError

    def max_position(self, c: Cursor) -> int:
        """The newest log position, read inside an open transaction."""
        raise NotImplementedError

    def after_insert(
        self,
        c: Cursor,
        ids: Sequence[int],
        stored_events: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> None:
        """Guard, views, snapshots and Merkle leaves, in the events' transaction."""
        if not ids:
            return
        guard: Guard | None = kwargs.get("guard")
        done = self.projector.tracking_map(c) if self.projector.enabled else None
        if guard is not None:
            # The guard reads the views: they must include every earlier event.
            if done is not None and min(done.values()) < ids[0] - 1:
                self.projector.catch_up(c, upto=ids[0] - 1)
                done = self.projector.tracking_map(c)
            guard(c)
        self._write_after(c, ids, stored_events, kwargs, done)

    def _write_after(
        self,
        c: Cursor,
        ids: Sequence[int],
        stored_events: Sequence[Any],
        kwargs: dict[str, Any],
        done: dict[str, int] | None,
    ) -> None:
        events = kwargs.get("ledger_events")
        if events is not None:
            self.projector.apply(c, list(zip(ids, events, strict=True)), done)
        insert_rows(
            c,
            self.dialect,
            "pl_merkle_leaves",
            ("position", "leaf"),
            [
                (
                    pos,
                    leaf_hash(
                        leaf_data(pos, e.originator_id, e.originator_version, e.topic, e.state)
                    ),
                )
                for pos, e in zip(ids, stored_events, strict=True)
            ],
        )
        if len(ids) > 1:
            c.execute(
                self.dialect.q("INSERT INTO {t}pl_commits (last_pos, first_pos) VALUES (?, ?)"),
                (ids[-1], ids[0]),
            )
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
        self.projector = Projector(dialect=SQLITE, reader=self.read_after, vouch=self.vouch)
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
        for name in APPEND_ONLY:
            statements += [
                f"CREATE TRIGGER IF NOT EXISTS {name}_no_update BEFORE UPDATE ON {name} "
                f"BEGIN SELECT RAISE(ABORT, '{name} is append-only: UPDATE refused'); END",
                f"CREATE TRIGGER IF NOT EXISTS {name}_no_delete BEFORE DELETE ON {name} "
                f"BEGIN SELECT RAISE(ABORT, '{name} is append-only: DELETE refused'); END",
            ]
        return statements

    def _create_table(self, c: SQLiteCursor) -> None:
        super()._create_table(c)
        self.projector.create_tables(c)

    @property
    def events_table(self) -> str:
        """The stored events table, as SQL."""
        return self.events_table_name

    def originator_key(self, originator_id: UUID) -> Any:
        """An aggregate id as the events table stores it (hex text)."""
        return originator_id.hex

    def max_position(self, c: Cursor) -> int:
        """The newest log position, read inside an open transaction."""
        c.execute(f"SELECT MAX(rowid) AS m FROM {self.events_table_name}")
        return int(c.fetchone()["m"] or 0)

    def lock_for_write(self, c: Cursor) -> None:
        """A write statement takes SQLite's write lock (waiting up to the busy timeout)."""
        c.execute("UPDATE pl_tracking SET position = position WHERE view = '#lock'")

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[Any], **kwargs: Any
    ) -> Sequence[int] | None:
        # One executemany instead of eventsourcing's statement per event. The
        # table is a rowid table that never loses a row (append-only triggers), and
        # this transaction holds the write lock from the first insert on, so the new
        # rows take the next consecutive rowids after the current maximum.
        rows = [
            (
                s.originator_id.hex if isinstance(s.originator_id, UUID) else s.originator_id,
                s.originator_version,
                s.topic,
                s.state,
            )
            for s in stored_events
        ]
        if len(rows) == 1:
            c.execute(self.insert_events_statement, rows[0])
            last = int(c.lastrowid)
        else:
            c.executemany(self.insert_events_statement, rows)
            last = self.max_position(c)
        ids = list(range(last - len(stored_events) + 1, last + 1))
        self.after_insert(c, ids, stored_events, kwargs)
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


class LedgerPostgresRecorder(LedgerRecorderMixin, PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL application recorder, with views in the same transaction.

    Writers are serialised by eventsourcing's table lock, taken before the
    command's guard runs, so a guard sees every earlier command's views.
    """

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"):
        self.dialect = postgres_dialect(datastore.schema)
        self.projector = Projector(dialect=self.dialect, reader=self.read_after, vouch=self.vouch)
        super().__init__(datastore, events_table_name=events_table_name)
        self._table = f"{datastore.schema}.{events_table_name}"
        # eventsourcing sends the events as one array of a composite type, whose
        # values psycopg dumps in Python; four arrays of plain types dump in C.
        self._insert_plain = (
            f"INSERT INTO {self._table} (originator_id, originator_version, topic, state) "
            f"SELECT * FROM unnest(%s::{datastore.originator_id_type}[], %s::bigint[], "
            "%s::text[], %s::bytea[]) RETURNING notification_id"
        )

    def create_table(self) -> None:
        """Create everything once, even when several processes open a fresh database.

        Concurrent ``CREATE TABLE IF NOT EXISTS`` (and ``CREATE TYPE``) race in
        PostgreSQL's catalogue; a session advisory lock keyed on the schema makes
        the openers take turns.
        """
        key = zlib.crc32(f"provledger:{self.datastore.schema}".encode())
        schema = self.datastore.schema
        with self.datastore.get_connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                # DDL on a live table (CREATE TRIGGER) takes locks that deadlock with
                # writers, so an existing, complete schema is left untouched.
                marker = conn.execute(
                    "SELECT to_regclass(%s) IS NOT NULL AS done", (f"{schema}.pl_schema",)
                ).fetchone()
                if marker is not None and marker["done"]:
                    self.datastore.register_type_adapters()
                    return
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                super().create_table()
                with self.datastore.transaction(commit=True) as c:
                    for statement in SNAPSHOT_DDL:
                        c.execute(self.dialect.q(statement))
                    self.projector.create_tables(c)
                    c.execute(
                        f"CREATE OR REPLACE FUNCTION {schema}.pl_append_only() RETURNS trigger "
                        "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION "
                        "'% is append-only: % refused', TG_TABLE_NAME, TG_OP; END $$"
                    )
                    for table, name in [
                        (self._table, self.events_table_name),
                        *((f"{schema}.{t}", t) for t in APPEND_ONLY),
                    ]:
                        c.execute(
                            f"CREATE OR REPLACE TRIGGER {name}_append_only "
                            f"BEFORE UPDATE OR DELETE ON {table} FOR EACH ROW "
                            f"EXECUTE FUNCTION {schema}.pl_append_only()"
                        )
                        c.execute(
                            f"CREATE OR REPLACE TRIGGER {name}_no_truncate "
                            f"BEFORE TRUNCATE ON {table} FOR EACH STATEMENT "
                            f"EXECUTE FUNCTION {schema}.pl_append_only()"
                        )
                    c.execute(f"CREATE TABLE {schema}.pl_schema (version INTEGER NOT NULL)")
                    c.execute(f"INSERT INTO {schema}.pl_schema (version) VALUES (1)")
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    @property
    def events_table(self) -> str:
        """The stored events table, schema-qualified."""
        return self._table

    def max_position(self, c: Cursor) -> int:
        """The newest log position, read inside an open transaction."""
        c.execute(f"SELECT MAX(notification_id) AS m FROM {self._table}")
        return int(c.fetchone()["m"] or 0)

    def lock_for_write(self, c: Cursor) -> None:
        """The same table lock the writers take."""
        self._lock_table(c)  # type: ignore[arg-type]

    def insert_events(self, stored_events: Sequence[Any], **kwargs: Any) -> Sequence[int] | None:
        """Lock, insert, then guard/views/snapshots — one transaction."""
        if not stored_events:
            return []
        # The table lock, NOTIFY and the insert travel in one round trip (pipeline
        # mode); then the guard, the views and the leaves, in the same transaction.
        failed: Exception | None = None
        with (
            self.datastore.get_connection() as conn,  # turns psycopg errors into ours
            conn.transaction(),
            conn.cursor() as curs,
        ):
            with conn.pipeline() as pipeline:
                try:
                    self._lock_table(curs)
                    self._notify_channel(curs)
                    curs.execute(
                        self._insert_plain,
                        (
                            [e.originator_id for e in stored_events],
                            [e.originator_version for e in stored_events],
                            [e.topic for e in stored_events],
                            [e.state for e in stored_events],
                        ),
                    )
                    pipeline.sync()
                    ids = [int(row["notification_id"]) for row in curs.fetchall()]
                except Exception as exc:  # raised again once the pipeline has ended
                    failed = exc
            if failed is not None:
                raise failed
            self.after_insert(curs, ids, stored_events, kwargs)
        return ids

    def read_after(self, c: Cursor, after: int, limit: int) -> list[Notification]:
        """Stored events after ``after``, read inside an open transaction."""
        c.execute(
            f"SELECT * FROM {self._table} WHERE notification_id > %s "
            "ORDER BY notification_id LIMIT %s",
            (after, limit),
        )
        return [
            Notification(
                id=row["notification_id"],
                originator_id=row["originator_id"],
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=bytes(row["state"]),
            )
            for row in c.fetchall()
        ]

    def select_record_events(self, c: Cursor, originator_id: UUID) -> list[Notification]:
        """Every stored event of one aggregate with its log position."""
        c.execute(
            f"SELECT * FROM {self._table} WHERE originator_id = %s ORDER BY originator_version",
            (originator_id,),
        )
        return [
            Notification(
                id=row["notification_id"],
                originator_id=originator_id,
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=bytes(row["state"]),
            )
            for row in c.fetchall()
        ]


LedgerRecorder = LedgerSQLiteRecorder | LedgerPostgresRecorder


class LedgerApplication(Application[UUID]):
    """The eventsourcing application behind a :class:`ledger.Ledger`."""

    name = "provledger"

    def construct_transcoder(self) -> Transcoder:
        """Every stored event is msgpack (see :mod:`ledger.serialization`)."""
        return MsgpackTranscoder()

    @property
    def ledger_recorder(self) -> LedgerRecorder:
        """The recorder, typed."""
        assert isinstance(self.recorder, (LedgerSQLiteRecorder, LedgerPostgresRecorder))
        return self.recorder
