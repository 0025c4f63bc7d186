"""The PostgreSQL backend: its connections, its recorder and its read and write
transactions.

Several processes and hosts may write one ledger; writers take eventsourcing's
table lock first. The stored events table is append-only: triggers refuse any
UPDATE, DELETE or TRUNCATE.

A thread holding a read or write transaction open never waits for a second
pooled connection — a read nested in it takes an idle one or opens its own. How
connections are opened and checked: :mod:`ledger.persistence.pg_pool`.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification, OperationalError
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

from ledger.persistence.base import (
    APPEND_ONLY,
    SNAPSHOT_DDL,
    LedgerRecorderMixin,
    in_log,
    leaf_of,
)
from ledger.persistence.faults import DATABASE_ERRORS, CommitFailed
from projections.base import COPY_FROM, Cursor, Query, postgres_dialect, refresh_statistics
from projections.projector import Projector


def columns_of(stored_events: Sequence[Any]) -> tuple[list[Any], ...]:
    """The parameters of the recorder's ``unnest`` insert: one list per column."""
    return (
        [e.originator_id for e in stored_events],
        [e.originator_version for e in stored_events],
        [e.topic for e in stored_events],
        [e.state for e in stored_events],
    )


#: How long an erasure's rewrite of the snapshot table waits for the table's lock
#: (ms): captures and snapshot reads queue behind a waiting ``VACUUM FULL``.
SCRUB_LOCK_WAIT_MS = 500
#: No planner statistics of captured bytes (see ``_drop_content_statistics``).
NO_CONTENT_STATISTICS = "ALTER TABLE {t}pl_snapshots ALTER COLUMN content SET STATISTICS 0"

#: Whether a transaction that may still see rows the erasure at log position %s
#: deleted is open in the database (a session's snapshot or transaction id as old
#: as the erasure's transaction, a prepared transaction, a replication slot's
#: horizon): ``VACUUM FULL`` then keeps the deleted row, bytes included.
OLDER_HOLDERS = """
WITH erasure AS (SELECT xmin AS x FROM {events} WHERE notification_id = %s)
SELECT NOT EXISTS (SELECT 1 FROM erasure)
    OR EXISTS (SELECT 1 FROM pg_stat_activity, erasure
               WHERE datname = current_database() AND pid <> pg_backend_pid()
                 AND (age(backend_xmin) >= age(x) OR age(backend_xid) >= age(x)))
    OR EXISTS (SELECT 1 FROM pg_prepared_xacts, erasure
               WHERE database = current_database() AND age(transaction) >= age(x))
    OR EXISTS (SELECT 1 FROM pg_replication_slots, erasure
               WHERE age(xmin) >= age(x) OR age(catalog_xmin) >= age(x)) AS held
"""

#: A batch refreshes the views' planner statistics once the batches since the last
#: refresh wrote this share of the record view's rows then (and this many events).
_STALE_SHARE, _STALE_MIN = 0.5, 1000


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
            vouch_end=self.vouch_end,
            row_reader=self.read_rows_after,
            vouch_rows=self.vouch_rows,
            record_ids=self.record_ids,
        )
        super().__init__(datastore, events_table_name=events_table_name)
        # What a command waits for the writers' lock (the URL's ``lock_timeout``), its
        # wait behind this process's other writers included (``Engine.transact``).
        self.lock_wait = float(datastore.lock_timeout) if datastore.lock_timeout else None
        self._lock_wait_statement = (
            f"SET lock_timeout = '{int(self.lock_wait)}s'"
            if self.lock_wait
            else "RESET lock_timeout"
        )
        self._table = f"{datastore.schema}.{events_table_name}"
        # The events' positions come from this sequence (eventsourcing's BIGSERIAL).
        sequence = f"pg_get_serial_sequence('{self._table}', 'notification_id')::regclass"
        # The connection of the read or write transaction open on each thread.
        self._held = threading.local()
        # eventsourcing sends the events as one array of a composite type, whose
        # values psycopg dumps in Python; four arrays of plain types dump in C. The
        # listeners are notified (as eventsourcing's NOTIFY does) by the same
        # statement: its filter calls ``pg_notify`` once, before the rows go in.
        self._insert_plain = (
            f"INSERT INTO {self._table} (originator_id, originator_version, topic, state) "
            f"SELECT * FROM unnest(%s::{datastore.originator_id_type}[], %s::bigint[], "
            "%s::text[], %s::bytea[]) WHERE (SELECT pg_notify(%s, '')) IS NOT NULL "
            "RETURNING notification_id"
        )
        # The same at positions drawn from the sequence's state read with the lock
        # (``lock_for_write``): the sequence is moved past them by the statement
        # itself, and nothing comes back, so it travels with the COMMIT.
        self._insert_at = (
            f"INSERT INTO {self._table} (originator_id, originator_version, topic, state, "
            f"notification_id) SELECT * FROM unnest(%s::{datastore.originator_id_type}[], "
            "%s::bigint[], %s::text[], %s::bytea[], %s::bigint[]) "
            f"WHERE (SELECT pg_notify(%s, '')) IS NOT NULL AND (SELECT setval({sequence}, %s)) "
            "IS NOT NULL"
        )
        # The writers' lock alone: every connection of the pool (and every spare
        # one) already has the ledger's ``lock_timeout`` (see the datastore), so
        # eventsourcing's ``SET LOCAL lock_timeout`` before it would change nothing.
        self.lock_table_statements = self.lock_table_statements[-1:]
        # What a write transaction reads once it holds the lock: the views' and
        # the log's positions, and its own transaction id (see ``others_wrote``).
        # And the events' sequence's last value: under the lock no other writer
        # draws from it, so a small command's positions are known before its
        # insert, which then needs no answer (``insert_in``).
        self._tracking_and_xid = self.tracking_statement().replace(
            " AS newest",
            f" AS newest, txid_current() AS xid, pg_sequence_last_value({sequence}) AS seq_last",
            1,
        )
        # When this recorder's last write transaction committed (None: unknown):
        # the log's newest position, and the transaction's id. Each thread's open
        # write transaction keeps both in ``_held`` until it commits.
        self._newest_written: int | None = None
        self._xid_written: int | None = None
        # Events this recorder's batches wrote since the views' statistics were
        # refreshed, and the record view's rows then (None: not read yet).
        self._batched = 0
        self._rows_when_analyzed: int | None = None
        # A batch: its positions drawn from the events' sequence as one block (and
        # the listeners notified, as eventsourcing's insert does), then one COPY.
        # A write transaction refused after its events went in (a proposal whose
        # acceptance in the same transaction is refused) moves the sequence back to
        # where it found it, still holding the lock: ``setval`` is not rolled back,
        # and a refusal must leave no gap for others to see. Only if no one drew
        # from it meanwhile (a writer outside the lock).
        self._unreserve = (
            f"SELECT setval({sequence}, %s) WHERE pg_sequence_last_value({sequence}) = %s"
        )
        self._reserve_positions = (
            f"SELECT pg_notify(%s, ''), setval({sequence}, nextval({sequence}) + %s - 1) AS last"
        )
        self._copy_statement = (
            f"COPY {self._table} (originator_id, originator_version, topic, state, "
            "notification_id) FROM STDIN (FORMAT BINARY)"
        )
        self._copy_types = [datastore.originator_id_type, "int8", "text", "bytea", "int8"]

    def create_table(self) -> None:
        """Create everything once, even when several processes open a fresh database.

        Concurrent ``CREATE TABLE IF NOT EXISTS`` (and ``CREATE TYPE``) race in
        PostgreSQL's catalogue; a session advisory lock keyed on the schema makes
        the openers take turns.
        """
        key = zlib.crc32(f"provledger:{self.datastore.schema}".encode())
        schema = self.datastore.schema
        # One connection does it all, so a pool of one connection can open a ledger.
        with self.datastore.get_connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                # DDL on a live table (CREATE TRIGGER) takes locks that deadlock with
                # writers, so an existing, complete schema is left untouched.
                # (CREATE SCHEMA IF NOT EXISTS needs CREATE on the database, which a
                # role owning the schema it is given may lack: asked first instead)
                marker = conn.execute(
                    "SELECT to_regclass(%s) IS NOT NULL AS done, "
                    "to_regnamespace(%s) IS NOT NULL AS there",
                    (f"{schema}.pl_schema", schema),
                ).fetchone()
                if marker is None or not marker["done"]:
                    if marker is None or not marker["there"]:
                        conn.execute(f"CREATE SCHEMA {schema}")
                    self._create_all(conn)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        self.datastore.register_type_adapters()

    def _create_all(self, conn: Any) -> None:
        """eventsourcing's types and tables, then the ledger's, on ``conn``."""
        import psycopg

        schema = self.datastore.schema
        for create in self.sql_create_statements:
            if "CREATE TYPE" in create.as_string():
                # No IF NOT EXISTS for types: each in its own transaction.
                with suppress(psycopg.errors.DuplicateObject), conn.transaction():
                    conn.execute(create, prepare=False)
        with conn.transaction(), conn.cursor() as c:
            self._create_table(c)
            for statement in SNAPSHOT_DDL:
                c.execute(self.dialect.q(statement))
            c.execute(self.dialect.q(NO_CONTENT_STATISTICS))
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

    def holds_ledger(self) -> bool:
        """Whether the schema already holds a ledger's events table (nothing is created)."""
        with self.datastore.get_connection() as conn:
            row = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (self._table,))
            found = row.fetchone()
        return bool(found is not None and found["found"])

    @property
    def events_table(self) -> str:
        """The stored events table, schema-qualified."""
        return self._table

    def max_position(self, c: Cursor) -> int:
        """The newest log position, read inside an open transaction."""
        c.execute(f"SELECT MAX(notification_id) AS m FROM {self._table}")
        return int(c.fetchone()["m"] or 0)

    def lowest_event_position(self, c: Cursor) -> int | None:
        """The lowest position holding a stored event (None: the log is empty)."""
        c.execute(f"SELECT MIN(notification_id) AS m FROM {self._table}")
        low = c.fetchone()["m"]
        return None if low is None else int(low)

    def has_table(self, c: Cursor, name: str) -> bool:
        """Whether the ledger's schema holds a table ``name``."""
        c.execute(
            "SELECT to_regclass(%s) IS NOT NULL AS found", (f"{self.datastore.schema}.{name}",)
        )
        return bool(c.fetchone()["found"])

    def scrub_deleted(self, position: int) -> bool:
        """Rewrite the snapshot table (``VACUUM FULL``): a deleted row's bytes stay
        in its pages (and its TOAST table's) until then, and a plain ``VACUUM``
        only marks the space free. The rewrite holds the table's exclusive lock
        while it copies the table, and waits for that lock at most
        ``SCRUB_LOCK_WAIT_MS`` (meanwhile other captures and snapshot reads queue
        behind it). False when it could not be done: the lock was not granted in
        time, the connection failed, or the server skipped the table (a role that
        neither owns it nor the database); and when it may have kept the deleted
        row, which it does while any transaction of the database that began
        before the erasure committed is open (``OLDER_HOLDERS``, asked before and
        after the rewrite). The erasure stands either way, and the next one, or an
        operator's ``VACUUM FULL`` once those transactions end, rewrites the table.
        The server's WAL and any backups are the operator's to expire."""
        import psycopg

        failures: tuple[type[BaseException], ...] = (*DATABASE_ERRORS, psycopg.Error)
        skipped: list[str] = []

        def notice(diag: Any) -> None:
            if diag.severity_nonlocalized == "WARNING":
                skipped.append(str(diag.message_primary))

        older = OLDER_HOLDERS.format(events=self._table)
        try:
            with self.statement() as c:
                # Never prepared: PostgreSQL cannot prepare a VACUUM (psycopg would
                # try from its fifth run on one connection).
                vacuum: Any = c
                conn = vacuum.connection
                held = bool(vacuum.execute(older, (position,)).fetchone()["held"])
                conn.add_notice_handler(notice)
                try:
                    vacuum.execute(f"SET lock_timeout = {SCRUB_LOCK_WAIT_MS}", prepare=False)
                    try:
                        vacuum.execute(self.dialect.q("VACUUM FULL {t}pl_snapshots"), prepare=False)
                        self._drop_content_statistics(vacuum)
                    finally:  # the ledger's wait again (RESET would forget a SET one)
                        vacuum.execute(self._lock_wait_statement, prepare=False)
                finally:
                    conn.remove_notice_handler(notice)
                held = held or bool(vacuum.execute(older, (position,)).fetchone()["held"])
        except failures:
            # Already committed, the erasure stands: the scrub is what failed.
            return False
        return not skipped and not held

    def _drop_content_statistics(self, c: Any) -> None:
        """Keep no planner statistics of captured bytes (``ANALYZE`` copies values
        into ``pg_statistic``, out of a rewrite's reach): an older ledger's target
        set to 0, and a row taken dropped (``ALTER COLUMN … TYPE`` its own type)."""
        schema = self.datastore.schema
        row = c.execute(
            "SELECT a.attstattarget AS target, EXISTS (SELECT 1 FROM pg_stats s WHERE "
            "s.schemaname = %s AND s.tablename = 'pl_snapshots' AND s.attname = 'content') "
            "AS kept FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) "
            "AND a.attname = 'content'",
            (schema, f"{schema}.pl_snapshots"),
            prepare=False,
        ).fetchone()
        if row is not None and row["target"] != 0:
            c.execute(self.dialect.q(NO_CONTENT_STATISTICS), prepare=False)
        if row is not None and row["kept"]:
            c.execute(
                self.dialect.q("ALTER TABLE {t}pl_snapshots ALTER COLUMN content TYPE bytea"),
                prepare=False,
            )

    def lock_for_write(self, c: Cursor, ahead: Query | None = None) -> list[Any] | None:
        """The same table lock the writers take. In a transaction begun by
        :meth:`writing`, its BEGIN, the lock, the views' tracking read (which a
        command makes next: see :meth:`tracking_and_newest`) and ``ahead`` travel
        in one round trip; ``ahead``'s rows are returned."""
        self._lock_table(c)  # type: ignore[arg-type]
        if getattr(self._held, "pipe", None) is None:
            return None
        c.execute(self._tracking_and_xid)
        curs: Any = c
        first = None
        if ahead is not None:
            first = curs.connection.cursor(row_factory=curs.row_factory)
            first.execute(*ahead)
        self._pipe_off()
        row = c.fetchone()
        answer = None
        if first is not None:
            answer = first.fetchall()
            first.close()
        tracking = self.tracking_of(row)
        self._held.tracking = (c, tracking)
        self._held.newest, self._held.xid = tracking[1], int(row["xid"])
        last = row["seq_last"]
        self._held.next_position = None if last is None else int(last) + 1
        self._held.first_position = self._held.next_position
        return answer

    def others_wrote(self, c: Cursor) -> bool:
        """Whether anyone else may have written since this recorder's last write
        transaction committed. Read with the writers' lock (:meth:`lock_for_write`):
        this transaction's id is not the next one after that transaction's (any
        other session that wrote anything, on any table, took an id in between),
        or the log's newest position moved. True whenever either is unknown.
        Under the lock no one else can append until this transaction ends."""
        held = getattr(self._held, "tracking", None)
        newest = getattr(self._held, "newest", None)
        xid = getattr(self._held, "xid", None)
        if held is None or held[0] is not c or newest is None or xid is None:
            return True
        if self._newest_written is None or self._xid_written is None:
            return True
        return bool(newest != self._newest_written or xid != self._xid_written + 1)

    def tracking_and_newest(self, c: Cursor) -> tuple[dict[str, int], int]:
        """Each view's tracking position and the newest log position: as read with
        the writers' lock when ``c``'s transaction has just taken it, else now."""
        held = getattr(self._held, "tracking", None)
        self._held.tracking = None
        if held is not None and held[0] is c:
            answer: tuple[dict[str, int], int] = held[1]
            return answer
        return super().tracking_and_newest(c)

    def _pipe_on(self, conn: Any) -> None:
        """Queue this thread's next statements (pipeline mode) until a result is
        fetched or :meth:`_pipe_off`; a transaction's BEGIN and its last writes and
        COMMIT each travel with the statement after or before them."""
        if getattr(self._held, "pipe", None) is None:
            pipe = conn.pipeline()
            pipe.__enter__()
            self._held.pipe = pipe

    def _pipe_off(self, exc: BaseException | None = None) -> None:
        """Send what is queued and leave pipeline mode (``COPY`` cannot run in it);
        raise the first queued statement's error (ignored when ending with ``exc``)."""
        pipe, self._held.pipe = getattr(self._held, "pipe", None), None
        if pipe is not None:
            pipe.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)

    # -- transactions ----------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[Cursor]:
        """One snapshot for every statement of a read, begun in the same round trip
        as the transaction (a read nested in a transaction open on this thread gets
        its own snapshot on a spare connection: see ``_connection``)."""
        with self._connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            outer, self._held.conn = getattr(self._held, "conn", None), conn
            try:
                with conn.cursor() as cursor:
                    yield cursor
            finally:
                self._held.conn = outer
                if not conn.broken:
                    conn.execute("ROLLBACK")

    @contextmanager
    def statement(self) -> Iterator[Cursor]:
        """A cursor outside any explicit transaction (a statement sees one snapshot)."""
        with self._connection() as conn, conn.cursor() as cursor:
            yield cursor

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled connection; but while this thread holds a transaction open, never
        one it would wait for (the open transaction would sit idle, holding its
        locks, and a pool of threads doing the same would deadlock): an idle pooled
        connection if there is one, else a connection of its own, closed after."""
        datastore: Any = self.datastore
        if getattr(self._held, "conn", None) is None:
            with datastore.get_connection() as conn:
                yield conn
            return
        import psycopg
        import psycopg_pool

        pool = datastore.pool
        try:
            spare = pool.getconn(timeout=0.001)
            owned = False
        except psycopg_pool.PoolTimeout:
            spare, owned = None, True
        try:
            if spare is None:
                spare = psycopg.connect(
                    **pool.kwargs, autocommit=True, connect_timeout=max(2, int(pool.timeout))
                )
                # The lock wait, as the pool sets it on its own (a pooler may drop it).
                spare.execute(self._lock_wait_statement, prepare=False)
            yield spare
        except psycopg.Error as exc:
            raise OperationalError(str(exc)) from exc
        finally:
            if spare is not None:
                if owned:
                    spare.close()
                else:
                    pool.putconn(spare)

    @contextmanager
    def writing(self) -> Iterator[Cursor]:
        """A write transaction (READ COMMITTED: after the table lock, every
        statement sees every earlier writer's commit), on a connection got as
        ``_connection`` says. It starts in pipeline mode, so BEGIN is sent with
        the writers' lock, and a small command's last writes with the COMMIT. A
        failure while committing is raised as ``CommitFailed`` (its outcome may be
        unknown); a queued write the server refused is not one (COMMIT never ran)."""
        import psycopg

        held = self._held
        if getattr(held, "writing", False):
            # A second one (a command run by an acceptance check) would wait for
            # the writers' lock this thread holds: refused, as on SQLite.
            raise OperationalError("a write transaction is already open here")
        outer = (getattr(held, "conn", None), getattr(held, "pipe", None))
        committing = False
        try:
            with self._connection() as conn:
                held.conn, held.pipe, held.tracking = conn, None, None
                held.newest = held.xid = held.next_position = held.first_position = None
                # BEGIN is sent with the writers' lock (``lock_for_write``); a small
                # command's writes with its COMMIT (``insert_in``).
                self._pipe_on(conn)
                try:
                    held.writing = True
                    with conn.cursor() as cursor:
                        cursor.execute("BEGIN")
                        yield cursor
                        committing = True
                        cursor.execute("COMMIT")
                        self._pipe_off()
                    self._newest_written, self._xid_written = held.newest, held.xid
                except BaseException as exc:
                    self._newest_written = self._xid_written = None
                    self._pipe_off(exc)
                    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                        committing = False  # a queued write failed: COMMIT never ran
                    elif not committing and not conn.broken:
                        self._give_back_positions(conn)
                    if not conn.broken:
                        with suppress(psycopg.Error):
                            conn.rollback()
                    raise
                finally:
                    held.conn, held.pipe, held.writing = (*outer, False)
                    held.tracking = held.next_position = held.first_position = None
        except Exception as exc:
            if committing:
                raise CommitFailed() from exc
            raise

    def _give_back_positions(self, conn: Any) -> None:
        """Before a refused write transaction rolls back: move the events' sequence
        back past the positions it drew under the lock (see ``_unreserve``)."""
        import psycopg

        first = getattr(self._held, "first_position", None)
        following = getattr(self._held, "next_position", None)
        if first is None or following is None or following == first:
            return
        with suppress(psycopg.Error):
            conn.execute(self._unreserve, (first - 1, following - 1))

    def max_notification_id(self) -> int | None:
        """The newest log position, in one statement (never waiting for a pooled
        connection while this thread holds a transaction open)."""
        with self.statement() as c:
            c.execute(f"SELECT MAX(notification_id) AS m FROM {self._table}")
            row = c.fetchone()
        return None if row is None else row["m"]

    def insert_in(
        self,
        c: Cursor,
        stored_events: Sequence[Any],
        events: Sequence[Any],
        snapshots: Sequence[tuple[str, bytes]],
        done: dict[str, int] | None,
        first: int | None = None,
    ) -> list[int]:
        """The command's events (the table lock is already held), then its views,
        leaves and snapshots, in its transaction."""
        curs: Any = c
        self._held.tracking = None  # read before these writes: no longer the answer
        after: dict[str, Any] = {"ledger_events": events, "snapshots": snapshots, "first": first}
        held = self._held
        mine = getattr(held, "conn", None) is curs.connection
        first_free = getattr(held, "next_position", None) if mine else None
        if len(stored_events) >= COPY_FROM:
            held.next_position = None
            self._pipe_off()
            ids, after["leaves"] = self._copy_events(curs, stored_events)
        elif first_free is not None:
            # Positions known (see ``_insert_at``): nothing to wait for, so the
            # insert is queued with the views' writes and sent with the COMMIT.
            self._pipe_on(curs.connection)
            ids = list(range(first_free, first_free + len(stored_events)))
            held.next_position = ids[-1] + 1
            curs.execute(
                self._insert_at,
                (*columns_of(stored_events), ids, self.channel_name, ids[-1]),
            )
        else:
            # The insert (which notifies the listeners too) in one round trip; the
            # views' and leaves' writes after it are sent with the COMMIT (``writing``).
            if getattr(self._held, "conn", None) is curs.connection:
                self._pipe_on(curs.connection)
            curs.execute(self._insert_plain, (*columns_of(stored_events), self.channel_name))
            ids = [int(row["notification_id"]) for row in curs.fetchall()]
        if ids:
            self._held.newest = max(ids)
        self.write_after(c, ids, stored_events, after, done)
        self._after_batch(curs, len(stored_events))
        return ids

    def _after_batch(self, curs: Any, events: int) -> None:
        """Refresh the views' planner statistics once this recorder's writes (a
        batch, or commands one by one) have added half as many events as the record
        view had rows when they were last refreshed (and at least ``_STALE_MIN``):
        an import leaves them current, and so does a ledger grown by commands,
        whose statements PostgreSQL may otherwise go on running with a plan it
        made for a small table (a refresh makes it plan them again)."""
        self._batched += events
        if self._batched < _STALE_MIN:
            return  # (a command's writes stay queued: nothing is read here)
        if self._rows_when_analyzed is None:
            curs.execute(
                "SELECT GREATEST(reltuples, 0) AS n FROM pg_class WHERE oid = %s::regclass",
                (f"{self.datastore.schema}.pl_records",),
            )
            self._rows_when_analyzed = int(curs.fetchone()["n"])
        if self._batched >= max(_STALE_MIN, _STALE_SHARE * self._rows_when_analyzed):
            refresh_statistics(curs, self.dialect)
            self._rows_when_analyzed += self._batched
            self._batched = 0

    def _copy_events(
        self, curs: Any, stored_events: Sequence[Any]
    ) -> tuple[list[int], list[tuple[int, bytes]]]:
        """Insert a batch of events with one binary ``COPY`` (the table lock is held);
        return their log positions and their (position, Merkle leaf) rows, hashed
        while the server takes in the rows already sent.

        The positions are taken from the events table's own sequence before the
        rows are sent, as one block (``nextval`` then ``setval`` past the block, in
        the statement that also notifies the listeners), so they are consecutive
        and in the order of ``stored_events``. Under the table lock no other writer
        draws from the sequence; a session that drew from it anyway would collide
        on the unique position index and the transaction would fail, never store
        two events at one position or interleave.
        """
        n = len(stored_events)
        curs.execute(self._reserve_positions, (self.channel_name, n))
        first = int(curs.fetchone()["last"]) - n + 1
        text_ids = self.datastore.originator_id_type != "uuid"
        leaves: list[tuple[int, bytes]] = []
        with curs.copy(self._copy_statement) as copy:
            copy.set_types(self._copy_types)
            write = copy.write_row
            for position, e in enumerate(stored_events, first):
                oid = str(e.originator_id) if text_ids else e.originator_id
                write((oid, e.originator_version, e.topic, e.state, position))
                leaves.append((position, leaf_of(position, e)))
        return list(range(first, first + n)), leaves

    def insert_events(self, stored_events: Sequence[Any], **kwargs: Any) -> Sequence[int] | None:
        """Lock, insert, then guard/views/snapshots — one transaction."""
        if not stored_events:
            return []
        # The table lock and the insert (with its NOTIFY) travel in one round trip (pipeline
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
                    curs.execute(
                        self._insert_plain, (*columns_of(stored_events), self.channel_name)
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

    def select_record_events(
        self, c: Cursor, originator_id: UUID, after: int = 0
    ) -> list[Notification]:
        """Every stored event of one aggregate (of a version above ``after``) with
        its log position."""
        c.execute(
            f"SELECT * FROM {self._table} WHERE originator_id = %s "
            "AND originator_version > %s ORDER BY originator_version",
            (originator_id, after),
        )
        return in_log(
            [
                Notification(
                    id=row["notification_id"],
                    originator_id=originator_id,
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in c.fetchall()
            ]
        )
