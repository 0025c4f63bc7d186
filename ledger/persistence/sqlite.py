"""The SQLite backend (a file, or ``memory:``): its connection pool, its recorder,
and its read and write transactions.

The stored events table is append-only: triggers created with the tables make any
UPDATE or DELETE on it fail.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from time import monotonic
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit
from uuid import UUID

from eventsourcing.persistence import InterfaceError, Notification
from eventsourcing.sqlite import (
    SQLITE3_DEFAULT_LOCK_TIMEOUT,
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteCursor,
    SQLiteDatastore,
    SQLiteFactory,
)

from ledger.errors import CorruptEventError
from ledger.persistence.base import APPEND_ONLY, SNAPSHOT_DDL, LedgerRecorderMixin, in_log
from ledger.persistence.memory import MemoryInterlock
from projections.base import SQLITE, Cursor, Query
from projections.projector import Projector, Row

#: Threads that get their own SQLite connection for single-statement reads.
MAX_READERS = 32

#: Prepared statements each SQLite connection keeps. eventsourcing opens its
#: connections with ``cached_statements=True`` (that is, one), so a transaction
#: of several statements prepared every one of them again on every call.
STATEMENT_CACHE = 256

T = TypeVar("T")


#: Pages the writer connection keeps in memory (KiB; SQLite's default is 2 MiB).
#: Every record adds entries at random places in the events' and id map's keys; with
#: the default, an import's rate at 600k records fell to 0.64 of its rate at
#: the start, with 64 MiB to 0.86 (the two imports run side by side).
WRITER_CACHE_KIB = 65_536
#: The writer's page cache during a replay of the whole log (KiB). A replay writes
#: every view row once, in log order, and builds the read indexes after the load:
#: a bigger cache neither speeds it up nor is given back after. Rebuilds of 1M
#: events peaked at 154 MiB with ``WRITER_CACHE_KIB``, at 48 MiB with this, at the
#: same rate (33k events/s); 40k events peaked at 61 and 41 MiB.
REPLAY_CACHE_KIB = 8_192
#: Pages each thread's reading connection keeps in memory (KiB; SQLite's default is
#: 2 MiB). A read passes a claim index leaf, a record row's leaf and the pages
#: above them: reading 256 claims in turn, reads on a 300k-record ledger took
#: 1.27-1.36 times as long as on a 2,000-record one with 2 MiB, 1.14-1.16 with
#: this. The cache holds only what a thread read and goes when its connection does.
READER_CACHE_KIB = 8_192
#: How often (seconds) reads look whether the ledger's path still names the file
#: opened: a reading connection kept open goes on reading a file removed or
#: replaced under it (a backup moved into place would answer from the old log).
#: One ``stat`` costs about a tenth of a read; at most one per interval is taken.
FILE_CHECK_EVERY = 0.01


def _create_private(path: str) -> None:
    """Create the ledger file at ``path``, if there is none, readable and writable
    by its owner alone (0600, or less by the umask): it holds every record and the
    bytes captured as evidence, where SQLite would create it readable by everyone
    (0644 under the usual umask). SQLite gives the ``-wal`` and ``-shm`` files the
    file's own permissions; a file that exists keeps its own."""
    # There already (or made meanwhile), no such folder, no permission: SQLite opens
    # it, or its own error says which. Where the path is a link to no file yet, the
    # file it names is made (SQLite follows the link).
    with suppress(OSError):
        os.close(os.open(os.path.realpath(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


class LedgerSQLitePool(SQLiteConnectionPool):
    """eventsourcing's SQLite connection pool, with a real prepared-statement cache.

    Once it has opened the ledger's file, it opens it again only read-write (a
    connection never creates a file at the path) and only while the path still
    names that file: a file removed or replaced under a running process would take
    its later writes with it, or leave them in a new, empty database."""

    #: The ledger file's absolute path and (device, inode), once first opened
    #: read-write (its later connections open that path read-write only).
    opened: tuple[str, int, int] | None = None
    #: The same of the file first opened, read-write or read-only: what
    #: :meth:`check_same_file` holds the path to.
    watched: tuple[str, int, int] | None = None

    def check_same_file(self) -> None:
        """Raise ``sqlite3.OperationalError`` if the ledger's path no longer names the
        file this pool opened (removed, moved away, or replaced by another file)."""
        if self.watched is None:
            return
        path, device, inode = self.watched
        try:
            found = os.stat(path)
        except FileNotFoundError:
            what = "removed or moved away"
        except OSError as exc:  # a folder on the path made a file, no permission…
            what = f"made unreachable ({exc.strerror or type(exc).__name__})"
        else:
            if (found.st_dev, found.st_ino) == (device, inode):
                return
            what = "replaced by another file"
        raise sqlite3.OperationalError(
            f"the ledger file {path!r} was {what} after this process opened it; it neither "
            "writes (what it wrote would be lost) nor reads it again, and nothing was "
            "written (restore the file, then open the ledger again)"
        )

    def _create_connection(self) -> SQLiteConnection:
        database = self.db_name
        if self.opened is not None:
            self.check_same_file()
            database = f"file:{quote(self.opened[0])}?mode=rw"
        elif not self.is_sqlite_memory_mode and not self.db_name.startswith("file:"):
            _create_private(self.db_name)
        try:
            c = sqlite3.connect(
                database=database,
                uri=True,
                check_same_thread=False,
                isolation_level=None,  # auto-commit; transactions BEGIN explicitly
                cached_statements=STATEMENT_CACHE,
                timeout=self.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT,
            )
        except (sqlite3.Error, TypeError) as e:
            raise InterfaceError(e) from e
        # Only read_only_uri's URIs start with "file:" and say mode=ro (a ledger URL's
        # path cannot be a "file:" URI).
        read_only = self.db_name.startswith("file:") and "?mode=ro" in self.db_name
        if not self.is_sqlite_memory_mode and not self.is_journal_mode_wal and not read_only:
            cursor = c.cursor()
            cursor.execute("PRAGMA journal_mode;")
            if str(cursor.fetchone()[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL;")
                self.journal_mode_was_changed_to_wal = True
            self.is_journal_mode_wal = True
        c.row_factory = sqlite3.Row
        if self.watched is None and not self.is_sqlite_memory_mode:
            path = unquote(urlsplit(self.db_name).path) if read_only else self.db_name
            found = os.stat(path)
            self.watched = (os.path.abspath(path), found.st_dev, found.st_ino)
            self.opened = None if read_only else self.watched
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


#: How long an erasure's checkpoint waits for readers (ms): it holds the write lock
#: meanwhile, so every other writer waits too.
SCRUB_WAIT_MS = 250

#: The writer connection's busy timeout (ms): the write lock is waited for in slices
#: this long, so that a signal is handled between them (``_begin``).
BUSY_SLICE_MS = 100


class LedgerSQLiteRecorder(LedgerRecorderMixin, SQLiteApplicationRecorder):
    """eventsourcing's SQLite application recorder, with views in the same
    transaction, and the ledger's read and write transactions on SQLite."""

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str = "stored_events"):
        self.dialect = SQLITE
        self.projector = Projector(
            dialect=SQLITE,
            reader=self.read_after,
            vouch=self.vouch,
            vouch_end=self.vouch_end,
            row_reader=self.read_rows_after,
            vouch_rows=self.vouch_rows,
            record_ids=self.record_ids,
        )
        super().__init__(datastore, events_table_name)
        # On a file, one connection per thread serves single-statement reads and
        # read transactions (a pool round trip costs as much as the statement); an
        # in-memory database keeps eventsourcing's reader/writer interlocking.
        self._file = not self.datastore.pool.is_sqlite_memory_mode
        self.lock_wait: float = float(
            self.datastore.pool.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT
        )
        self._reader = threading.local()
        self._readers: list[sqlite3.Connection] = []
        # Re-entrant: a reader collected (its ``__del__``) while this thread holds
        # it forgets its connection here without waiting on itself.
        self._readers_lock = threading.RLock()
        #: Held while a connection closes: the last to close must see no other
        #: open, or it leaves the ``-wal`` (two closing at once each see the other).
        self.closing = threading.RLock()
        self._writer: sqlite3.Connection | None = None
        # Re-entrant: a thread that closes the ledger, or writes again, inside its
        # own write transaction gets an error, not a deadlock.
        self._writer_lock = threading.RLock()
        self._writing = False  # a write transaction is open (read under the lock)
        self._closed = False
        #: The writer's ``PRAGMA data_version`` in its previous write transaction.
        self._data_version: int | None = None
        self._file_checked = 0.0  # when reads last found the path naming the file
        #: In memory: the readers' and writer's interlocking, per thread.
        self._memory = MemoryInterlock(self.datastore)

    # -- transactions ----------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[Cursor]:
        """A read transaction on this thread's connection (a pooled one when that
        is busy with an outer read, or the database is in memory)."""
        if not self._file:
            with self._memory.read(transaction=True) as c:
                yield c
            return
        self._same_file()
        held = self._own_reader()
        if held is not None and not held.busy:
            held.busy = True
            cursor = held.connection.cursor()
            try:
                cursor.execute("BEGIN")
                yield cursor
            finally:
                held.busy = False
                if _is_open(held.connection):  # not closed under a half-read iteration
                    held.connection.rollback()
            return
        with self.datastore.transaction(commit=False) as c:
            yield c

    @contextmanager
    def statement(self) -> Iterator[Cursor]:
        """A cursor outside any explicit transaction (a statement sees one snapshot)."""
        if not self._file:
            with self._memory.read(transaction=False) as c:
                yield c
            return
        self._same_file()
        held = self._own_reader()
        if held is not None and not held.busy:
            yield held.connection.cursor()
        else:
            with self.datastore.get_connection(commit=False) as conn:
                yield conn.cursor()

    def max_notification_id(self) -> int:
        """The newest log position, through :meth:`statement` (eventsourcing's own
        takes a pooled reader, which on ``memory:`` waits for a write transaction
        the same thread holds: an acceptance check asking for the position)."""
        with self.statement() as c:
            c.execute(self.select_max_notification_id_statement)
            return int(c.fetchone()[0] or 0)

    def query(self, fetch: Callable[[Cursor], T]) -> T:
        """What ``fetch`` reads with this thread's cursor for single statements (no
        context manager, no new cursor per read); see :meth:`statement`."""
        if self._file and monotonic() - self._file_checked >= FILE_CHECK_EVERY:
            self._same_file()  # (looked at here first: the hot path of every read)
        held = self._own_reader() if self._file else None
        if held is not None and not held.busy:
            return fetch(held.cursor)
        return super().query(fetch)

    def _same_file(self) -> None:
        """Refuse a read once the ledger's path no longer names the file opened
        (``check_same_file``), looked at most every ``FILE_CHECK_EVERY`` seconds."""
        now = monotonic()
        if now - self._file_checked >= FILE_CHECK_EVERY:
            pool: Any = self.datastore.pool
            pool.check_same_file()
            self._file_checked = now

    @contextmanager
    def writing(self) -> Iterator[Cursor]:
        """A write transaction begun with ``BEGIN IMMEDIATE``: the database's write
        lock is taken with it (waiting up to the busy timeout), so what the
        transaction reads nobody else can change.

        On a file it runs on the recorder's own writer connection, one thread at a
        time (a pool round trip costs as much as a statement); an in-memory
        database keeps eventsourcing's writer connection (see ``MemoryInterlock``)."""
        if not self._file:
            yield from self._memory.write()
            return
        with self._writer_lock:
            if self._writing:
                # Its BEGIN would fail, and the rollback would end the outer one.
                raise sqlite3.OperationalError("a write transaction is already open here")
            self._writing = True
            try:
                writer = self._own_writer()
                pool: Any = self.datastore.pool
                pool.check_same_file()
                yield from _transaction(writer, writer.cursor(), self.lock_wait)
            finally:
                self._writing = False

    def _own_writer(self) -> sqlite3.Connection:
        """The writer connection, opened on first use (under ``_writer_lock``)."""
        if self._writer is None:
            if self._closed:
                raise sqlite3.ProgrammingError("the ledger is closed")
            pool: Any = self.datastore.pool
            self._writer = pool._create_connection()._sqlite_conn
            self._writer.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")
            # Freed space is written back zeroed, not merely marked free, on every
            # write: an erasure's delete, and also each page split, which moves
            # cells and would leave copies behind that no later erasure could find.
            self._writer.execute("PRAGMA secure_delete=ON")
            if self.lock_wait * 1000 > BUSY_SLICE_MS:
                self._writer.execute(f"PRAGMA busy_timeout={BUSY_SLICE_MS}")
            self._data_version = None  # a new connection has its own counter
        return self._writer

    def _own_reader(self) -> _Reader | None:
        """This thread's reading connection, opened on first use; None once
        ``MAX_READERS`` threads have one (the pool serves the rest)."""
        held: _Reader | None = getattr(self._reader, "held", None)
        if held is None:
            with self._readers_lock:
                if self._closed or len(self._readers) >= MAX_READERS:
                    return None
                pool: Any = self.datastore.pool
                connection = pool._create_connection()._sqlite_conn
                connection.execute(f"PRAGMA cache_size=-{READER_CACHE_KIB}")
                held = _Reader(connection, self)
                self._readers.append(held.connection)
            self._reader.held = held
        return held

    def close_readers(self) -> None:
        """Close every thread's reading connection and the writer (the ledger is closing)."""
        with self._readers_lock:
            self._closed = True
            readers, self._readers = self._readers, []
        # The writer's lock first, as a thread writing takes it before a reader's
        # ``__del__`` (collected then) takes ``closing``.
        with self._writer_lock, self.closing:
            for reader in readers:
                reader.close()
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    def open_readers(self) -> int:
        """How many threads' reading connections are open."""
        with self._readers_lock:
            return len(self._readers)

    def forget_reader(self, connection: sqlite3.Connection) -> None:
        """A thread's reading connection is closing with its thread."""
        with self._readers_lock:
            if connection in self._readers:
                self._readers.remove(connection)

    def holds_ledger(self) -> bool:
        """Whether the database already holds the events table (nothing is created)."""
        with self.statement() as c:
            c.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                (self.events_table_name,),
            )
            return c.fetchone() is not None

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

    position_column = "rowid"

    def originator_key(self, originator_id: UUID) -> Any:
        """An aggregate id as the events table stores it (hex text)."""
        return originator_id.hex

    def max_position(self, c: Cursor) -> int:
        """The newest log position, read inside an open transaction."""
        c.execute(f"SELECT MAX(rowid) AS m FROM {self.events_table_name}")
        return int(c.fetchone()["m"] or 0)

    def lowest_event_position(self, c: Cursor) -> int | None:
        """The lowest position holding a stored event (None: the log is empty)."""
        c.execute(f"SELECT MIN(rowid) AS m FROM {self.events_table_name}")
        low = c.fetchone()["m"]
        return None if low is None else int(low)

    def has_table(self, c: Cursor, name: str) -> bool:
        """Whether the database holds a table ``name``."""
        c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,))
        return c.fetchone() is not None

    @contextmanager
    def replaying(self, c: Cursor) -> Iterator[None]:
        """The writer's page cache shrinks to ``REPLAY_CACHE_KIB`` during a replay
        (on a file; pages beyond it are freed) and is set back after, so a rebuild's
        memory does not grow with the log."""
        if not self._file:
            yield
            return
        c.execute(f"PRAGMA cache_size=-{REPLAY_CACHE_KIB}")
        try:
            yield
        finally:
            c.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")

    def scrub_deleted(self, position: int) -> bool:
        """Checkpoint the zeroed pages into the file and empty the ``-wal``, whose
        earlier frames still hold the bytes (``wal_checkpoint(TRUNCATE)``). It
        holds the write lock while it waits for readers, so it waits at most
        ``SCRUB_WAIT_MS``, not the busy timeout (other writers wait meanwhile).
        False when a reader kept it from completing: the zeroed pages then wait in
        the ``-wal`` while the file (or the ``-wal``'s older frames) still holds
        the bytes, until this is done again once the reader is done (``scrub_erased``)
        or the last connection closes: SQLite's own checkpoints leave the ``-wal``'s
        frames as they are."""
        del position  # whichever erasure: what the checkpoint could not copy waits
        if not self._file:
            return True
        with self.statement() as c:
            c.execute("PRAGMA busy_timeout")
            waits = int(c.fetchone()[0])
            c.execute(f"PRAGMA busy_timeout={SCRUB_WAIT_MS}")
            try:
                c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                busy = c.fetchone()[0]
            finally:
                c.execute(f"PRAGMA busy_timeout={waits}")
        return not busy

    def lock_for_write(self, c: Cursor, ahead: Query | None = None) -> list[Any] | None:
        """Nothing more to do: ``writing`` began with ``BEGIN IMMEDIATE``, which took
        SQLite's write lock (and a query costs no round trip: ``ahead`` is left to
        the command)."""
        del ahead
        return None

    def others_wrote(self, c: Cursor) -> bool:
        """SQLite's ``PRAGMA data_version`` on the writer connection changes when
        any other connection commits (its own commits leave it alone); under the
        write lock nobody else can commit until this transaction ends, so the
        value read now holds until the next write transaction reads it again."""
        if not self._file:
            return True
        c.execute("PRAGMA data_version")
        version = int(c.fetchone()[0])
        seen, self._data_version = self._data_version, version
        return version != seen

    def insert_in(
        self,
        c: Cursor,
        stored_events: Sequence[Any],
        events: Sequence[Any],
        snapshots: Sequence[tuple[str, bytes]],
        done: dict[str, int] | None,
        first: int | None = None,
    ) -> list[int]:
        """The command's events, views, leaves and snapshots, in its transaction."""
        ids = self._insert_rows(c, stored_events)
        after = {"ledger_events": events, "snapshots": snapshots, "first": first}
        self.write_after(c, ids, stored_events, after, done)
        return ids

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[Any], **kwargs: Any
    ) -> Sequence[int] | None:
        """eventsourcing's insert path (``Application.save``): events, then the
        guard, views, leaves and snapshots in the same transaction."""
        ids = self._insert_rows(c, stored_events)
        self.after_insert(c, ids, stored_events, kwargs)
        return ids

    def _insert_rows(self, c: Cursor, stored_events: Sequence[Any]) -> list[int]:
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
            last = int(getattr(c, "lastrowid"))  # noqa: B009  (sqlite3 cursors have it)
        else:
            c.executemany(self.insert_events_statement, rows)
            last = self.max_position(c)
        return list(range(last - len(stored_events) + 1, last + 1))

    def read_after(self, c: Cursor, after: int, limit: int) -> list[Notification]:
        """Stored events after ``after``, read inside an open transaction.

        Raises:
            CorruptEventError: an aggregate id is not stored as the ledger writes it
                (32 lower-case hex digits): the same id spelt otherwise (upper case,
                dashes) would make the same Merkle leaf and the same UUID, while a
                look-up of the aggregate's events would miss it.
        """
        c.execute(
            f"SELECT rowid, * FROM {self.events_table_name} WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, limit),
        )
        notes = []
        for row in c.fetchall():
            text = row["originator_id"]
            originator_id = UUID(text)
            if originator_id.hex != text:
                raise CorruptEventError(
                    f"stored event at position {row['rowid']} holds its aggregate id "
                    "not as the ledger writes it: it was changed after it was appended "
                    "(run `provledger verify`)"
                )
            notes.append(_notification(row, originator_id))
        return notes

    def read_rows_after(self, c: Cursor, after: int, limit: int) -> list[Row]:
        """Stored events after ``after`` as plain rows (the aggregate id as stored:
        its hex), read inside an open transaction."""
        c.execute(
            f"SELECT rowid, originator_id, originator_version, topic, state "
            f"FROM {self.events_table_name} WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, limit),
        )
        return [tuple(row) for row in c.fetchall()]

    def select_record_events(
        self, c: Cursor, originator_id: UUID, after: int = 0
    ) -> list[Notification]:
        """Every stored event of one aggregate (of a version above ``after``) with
        its log position."""
        c.execute(
            f"SELECT rowid, * FROM {self.events_table_name} WHERE originator_id=? "
            "AND originator_version>? ORDER BY originator_version",
            (originator_id.hex, after),
        )
        return in_log([_notification(row, originator_id) for row in c.fetchall()])


def _notification(row: Any, originator_id: UUID) -> Notification:
    """A stored event's row (``rowid, *``) as eventsourcing's notification."""
    return Notification(
        id=row["rowid"],
        originator_id=originator_id,
        originator_version=row["originator_version"],
        topic=row["topic"],
        state=row["state"],
    )


def _transaction(connection: Any, cursor: Any, wait: float) -> Iterator[Cursor]:
    """``cursor`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` on ``connection``, the
    write lock waited for up to ``wait`` seconds; rolled back if the block raises
    or the commit fails."""
    _begin(cursor, wait)
    try:
        yield cursor
        connection.commit()
    except BaseException:
        connection.rollback()
        raise


def _begin(cursor: Any, wait: float) -> None:
    """``BEGIN IMMEDIATE`` on the writer, waiting up to ``wait`` seconds for the
    write lock in slices of its busy timeout (``BUSY_SLICE_MS``): SQLite waits in
    C, where a signal (Ctrl-C, a stop's SIGTERM) is not handled until the wait
    ends; between slices, Python handles it."""
    deadline = time.monotonic() + wait
    while True:
        try:
            cursor.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            code = getattr(exc, "sqlite_errorcode", sqlite3.SQLITE_BUSY) & 0xFF
            if code != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise


def _is_open(connection: sqlite3.Connection) -> bool:
    """Whether ``connection`` is still open: a closed one has no transaction to
    end (an iteration half read at interpreter exit is finished after its
    thread's connection was closed)."""
    try:
        connection.in_transaction  # noqa: B018 (refused once closed)
    except sqlite3.ProgrammingError:
        return False
    return True


class _Reader:
    """A thread's reading connection; closed when its thread ends (the thread's
    local data is dropped) or when the ledger closes, whichever comes first."""

    def __init__(self, connection: sqlite3.Connection, recorder: LedgerSQLiteRecorder) -> None:
        self.connection = connection
        #: Serves ``query``: each fetch runs its statement to the end, and reads
        #: rows by position (plain tuples, made faster than ``sqlite3.Row``).
        self.cursor = connection.cursor()
        self.cursor.row_factory = None
        self.busy = False  # a read transaction is open on it
        self._recorder = weakref.ref(recorder)
        # Held here, not reached through the recorder: a reader collected in a
        # reference cycle finds its weak reference to the recorder already cleared.
        self._closing = recorder.closing

    def __del__(self) -> None:
        recorder = self._recorder()
        if recorder is not None:
            recorder.forget_reader(self.connection)
        with self._closing:
            self.connection.close()
