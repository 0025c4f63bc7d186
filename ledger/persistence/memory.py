"""Reads and writes of a ``memory:`` ledger, one thread at a time against the writer.

A ``memory:`` ledger is an SQLite database in shared-cache mode: its tables are
locked, not versioned, so eventsourcing's pool lets no read run beside a write
(each waits for the other, up to the pool's timeout). :class:`MemoryInterlock`
keeps that, and adds what a thread does while it holds one of them itself:

- a read on the thread whose write transaction is open (an acceptance check
  reading the ledger) reads through that transaction instead of waiting for
  itself; so long as the transaction has written nothing, that is the ledger as
  committed, as a read on an SQLite file or on PostgreSQL sees it from its own
  connection. Once it has written (the proposal of ``propose(...,
  accepted_by=...)``), the read would see rows not committed: it is refused;
- a write on a thread holding a read open (an ``iter_history()`` not yet
  exhausted or closed) would wait for its own read: it is refused at once;
- a wait for another thread's read or write that times out says so, in place of
  the pool's "Timed out waiting for return of reader".
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from eventsourcing.persistence import ConnectionPoolClosedError, ConnectionUnavailableError
from eventsourcing.sqlite import SQLiteDatastore

from projections.base import Cursor

#: What a write, then a read, that waited out the pool's timeout says.
_WAITED_FOR_READ = (
    "a read was still open in this process after {seconds:g} s (an iter_history() "
    "iteration on another thread not yet exhausted or closed?): on the memory backend "
    "a write waits for every open read; finish or close it before writing (nothing "
    "was written)"
)
_WAITED_FOR_WRITE = (
    "a write transaction of another thread was still open after {seconds:g} s: on the "
    "memory backend a read waits for the write in progress"
)


class MemoryInterlock:
    """The read and write transactions of a ``memory:`` ledger (see the module)."""

    def __init__(self, datastore: SQLiteDatastore) -> None:
        self._datastore = datastore
        #: Per thread: ``writer``, its open write transaction (the connection, and
        #: the connection's count of changed rows when it began), and ``reads``,
        #: how many reads it holds open.
        self._held = threading.local()

    def write(self) -> Iterator[Cursor]:
        """A write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back if the
        block raises) on eventsourcing's writer connection, once no read is open."""
        if getattr(self._held, "writer", None) is not None:
            # As on a file: its BEGIN would fail, and the rollback end the outer one.
            raise sqlite3.OperationalError("a write transaction is already open here")
        if self._reads()[0]:
            raise sqlite3.OperationalError(
                "a read is still open on this thread (an iter_history() iteration not "
                "yet exhausted or closed): on the memory backend a write waits for "
                "every open read, so it would wait for its own; finish or close the "
                "iteration before writing (nothing was written)"
            )
        conn = self._connection(writer=True)
        try:
            cursor = conn.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            self._held.writer = (conn, conn._sqlite_conn.total_changes)
            try:
                yield cursor
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
            finally:
                self._held.writer = None
        finally:
            _give_back(self._datastore.pool, conn)

    @contextmanager
    def read(self, *, transaction: bool) -> Iterator[Cursor]:
        """A read: a transaction (one snapshot) or a cursor for one statement; on
        the thread writing, through its write transaction (see the module)."""
        writer = getattr(self._held, "writer", None)
        if writer is not None:
            conn, changes = writer
            if conn._sqlite_conn.total_changes != changes:
                raise sqlite3.OperationalError(
                    "a read inside this thread's write transaction, after it wrote (an "
                    "acceptance check of propose(..., accepted_by=...)), cannot see the "
                    "ledger as committed on the memory backend, and is refused rather "
                    "than shown rows not committed (on SQLite and PostgreSQL it reads "
                    "the ledger as committed)"
                )
            yield conn.cursor()
            return
        pool = self._datastore.pool
        got = self._connection(writer=False)
        # The opening thread's count: a read may be closed on another thread (an
        # iter_history() generator closed, or collected, elsewhere).
        opened = self._reads()
        opened[0] += 1
        try:
            if transaction:
                with got.transaction(commit=False) as c:
                    yield c
            else:
                yield got.cursor()
        finally:
            opened[0] -= 1
            _give_back(pool, got)

    def _connection(self, *, writer: bool) -> Any:
        """The pool's writer or a reader connection; a wait for the other kind that
        runs out says what it waited for, in place of the pool's message."""
        pool = self._datastore.pool
        try:
            return pool.get_connection(is_writer=writer)
        except ConnectionUnavailableError as exc:
            if ("reader" if writer else "writer") not in str(exc):
                raise
            waited = _WAITED_FOR_READ if writer else _WAITED_FOR_WRITE
            raise sqlite3.OperationalError(waited.format(seconds=pool.pool_timeout)) from None

    def _reads(self) -> list[int]:
        """This thread's count of open reads, as a one-item list that a read
        closed on another thread still counts down."""
        reads: list[int] | None = getattr(self._held, "reads", None)
        if reads is None:
            reads = self._held.reads = [0]
        return reads


def _give_back(pool: Any, connection: Any) -> None:
    """Return ``connection`` to ``pool``; if the pool was closed meanwhile (the
    application collected, at the interpreter's exit, under an iterator left
    unfinished), its connections closed with it: nothing to give back."""
    with suppress(ConnectionPoolClosedError):
        pool.put_connection(connection)
