"""The PostgreSQL backend: its recorder and its read and write transactions.

Several processes and hosts may write one ledger; writers take eventsourcing's
table lock first. The stored events table is append-only: triggers refuse any
UPDATE, DELETE or TRUNCATE.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

from ledger.persistence.base import APPEND_ONLY, SNAPSHOT_DDL, LedgerRecorderMixin
from projections.base import Cursor, postgres_dialect
from projections.projector import Projector


class LedgerPostgresRecorder(LedgerRecorderMixin, PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL application recorder, with views in the same
    transaction, and the ledger's read and write transactions on PostgreSQL.

    Writers are serialised by eventsourcing's table lock, taken first in every
    write transaction, so a command reads what it decides on under the lock.
    """

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"):
        self.dialect = postgres_dialect(datastore.schema)
        self.projector = Projector(
            dialect=self.dialect,
            reader=self.read_after,
            vouch=self.vouch,
            row_reader=self.read_rows_after,
            vouch_rows=self.vouch_rows,
        )
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

    # -- transactions ----------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[Cursor]:
        """One snapshot for every statement of a read, begun in the same round trip
        as the transaction."""
        datastore: Any = self.datastore
        with datastore.get_connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                with conn.cursor() as cursor:
                    yield cursor
            finally:
                conn.execute("ROLLBACK")

    @contextmanager
    def statement(self) -> Iterator[Cursor]:
        """A cursor outside any explicit transaction (a statement sees one snapshot)."""
        datastore: Any = self.datastore
        with datastore.get_connection() as conn, conn.cursor() as cursor:
            yield cursor

    @contextmanager
    def writing(self) -> Iterator[Cursor]:
        """A write transaction (READ COMMITTED: after the table lock, every
        statement sees every earlier writer's commit)."""
        with self.datastore.transaction(commit=True) as c:
            yield c

    def insert_in(
        self,
        c: Cursor,
        stored_events: Sequence[Any],
        events: Sequence[Any],
        snapshots: Sequence[tuple[str, bytes]],
        done: dict[str, int] | None,
    ) -> list[int]:
        """The command's events (the table lock is already held), then its views,
        leaves and snapshots, in its transaction."""
        curs: Any = c
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
        ids = [int(row["notification_id"]) for row in curs.fetchall()]
        self.write_after(
            c, ids, stored_events, {"ledger_events": events, "snapshots": snapshots}, done
        )
        return ids

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
