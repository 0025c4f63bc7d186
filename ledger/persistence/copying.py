"""Copying a ledger into an empty database: SQLite to PostgreSQL, back, between two
PostgreSQL schemas, or into a new SQLite file.

What is copied is what no view can give back, row for row and byte for byte:

- the stored events (eventsourcing's table: ``stored_events`` on SQLite,
  ``provledger_events`` on PostgreSQL), each at its own log position (gaps
  included), its topic, version and state bytes as stored. Principals, grants
  and tokens are events: they go with the log, so every token works on the copy;
- ``pl_merkle_leaves``: each event's Merkle leaf (the log's digest is their root);
- ``pl_commits``: the bounds of transactions that appended several events (an
  as-of position never lands inside one);
- ``pl_snapshots``: the evidence bytes captured. Erased bytes are gone from the
  source already, and their erasures are events: they stay erased.

Every other ``pl_`` table is a view, rebuilt on the target from the copied log;
PostgreSQL's ``pl_schema`` marks a complete schema and is made by opening the
target. Signing keys and heads files are not in the database
(:mod:`ledger.heads`): they verify the copy as they did the source. A source
holding a ``pl_`` table this version does not know (a later version's data) is
refused rather than copied without it.

The source is read in one read transaction, so the copy is the log at one
position while writers go on; nothing is written to it. The target is written in
one write transaction holding its writers' lock: the rows, then its views
replayed from them (which checks every event against its Merkle leaf), then the
row counts and the digest compared with the source's; any difference rolls it
all back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode
from uuid import UUID

from ledger.errors import CorruptEventError, InvalidURLError, LedgerError, StorageError
from ledger.merkle import LogDigest, root_of
from ledger.persistence.copy_target import (
    PRIMARY_TABLES,
    not_empty,
    refuse_occupied,
    refuse_same,
    target_of,
)
from ledger.persistence.faults import DATABASE_ERRORS
from ledger.persistence.urls import Backend, resolve_url
from projections.base import Cursor, insert_rows
from projections.projector import RETIRED

if TYPE_CHECKING:
    from ledger.application import Ledger
    from ledger.engine import Engine

__all__ = ["PRIMARY_TABLES", "CopyReport", "copy_ledger", "read_only_source"]

#: Rows read from the source at a time: events (a rebuild's batch), leaves and
#: transaction bounds, snapshots (each up to the ledger's value limit).
EVENT_BATCH, ROW_BATCH, SNAPSHOT_BATCH = 1000, 5000, 64

#: ``progress(step, reached, total)``: ``step`` is ``"events"`` while the log is
#: copied, ``"views"`` while the target's views are built; ``reached`` is the log
#: position done, ``total`` the position copied.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class CopyReport:
    """What :func:`copy_ledger` copied: the log up to ``position`` (``events`` of
    them), whose digest, the source's and the target's, is ``digest``."""

    source: str  # the URLs as messages show them (credentials masked)
    target: str
    events: int
    position: int
    digest: LogDigest
    snapshots: int
    seconds: float


def copy_ledger(
    source: Ledger | str, target: str, *, progress: Progress | None = None
) -> CopyReport:
    """Copy the ledger ``source`` (an open ledger, or its URL) into the empty
    database ``target`` (a ledger URL): its log at one position with its Merkle
    leaves, transaction bounds and evidence snapshots, byte for byte; the target's
    views are built from them. Nothing is written to the source.

    The target must hold no ledger data (a new SQLite file, an empty or new
    PostgreSQL schema, or a ledger with no events) and no other program's tables.
    It is written in one transaction that commits only once its views are built
    and its row counts and digest equal the source's: a failed copy writes no
    row (a file it created is removed; tables it created stay, empty, and a copy
    takes them again).

    Raises:
        InvalidURLError: ``target`` is no ledger URL, is ``memory:`` or read-only,
            or names the source's own database.
        StorageError: the target holds rows or another program's tables (naming
            the table), either database cannot be reached, or the copy differs.
        CorruptEventError: a stored event of the source is not what the ledger
            appended (``provledger verify`` on the source names every problem).
        LedgerNotFoundError: ``source`` is a URL with no ledger there.
    """
    from ledger.application import Ledger

    into = target_of(target)
    own = isinstance(source, str)
    if isinstance(source, str):
        backend = resolve_url(source)
        if backend.kind == "memory":
            raise InvalidURLError(
                "copy refused: memory: as a source URL is a new, empty ledger; pass the "
                "open Ledger instead (nothing was written)"
            )
        led = Ledger.open(read_only_source(source), create=False, catch_up=False)
        shown = backend.url
    else:
        led, shown = source, resolve_url(source.url).url
    try:
        led.engine.check_open()  # before anything is made on the target
        refuse_same(resolve_url(led.url), into)
        refuse_occupied(into)
        created = into.path is not None and not os.path.lexists(into.path)
        try:
            return _copy(led, shown, target, into, created, progress)
        except BaseException:
            if into.path is not None and created:
                _remove_new_file(into.path)
            raise
    finally:
        if own:
            led.close()


def read_only_source(url: str | None) -> str:
    """The ledger URL ``url`` (None: ``$PROVLEDGER_URL``, else the default file) as a
    copy's source opens it: an SQLite file read-only (``mode=ro``: not even its
    journal mode is set), any other URL as it is.

    Raises:
        InvalidURLError: the URL names no supported backend.
    """
    backend = resolve_url(url)  # refuses an empty $PROVLEDGER_URL
    given = url if url is not None else os.environ.get("PROVLEDGER_URL") or backend.url
    if backend.kind != "sqlite" or backend.read_only:
        return given
    base, _, query = given.partition("?")
    options = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "mode"]
    return f"{base}?{urlencode([*options, ('mode', 'ro')])}"


# -- the copy -------------------------------------------------------------------------


def _copy(
    led: Ledger, shown: str, target: str, into: Backend, created: bool, progress: Progress | None
) -> CopyReport:
    """Open (create) the target, copy in one write transaction, close it."""
    from ledger.application import Ledger

    started = time.perf_counter()
    with Ledger.open(target) as dest:
        occupied: StorageError | None = None
        try:
            with (
                led.engine.reading() as r,
                dest.engine.locked("copy") as w,
                dest.engine.recorder.replaying(w),
            ):
                sides = _Sides(led.engine, r, dest.engine, w)
                with sides.writing():
                    occupied = _occupant(sides.dst, w, into.url)
                if occupied is not None:
                    raise occupied
                digest, counts = _copy_rows(sides, progress)
                step = None if progress is None else _step(progress, "views", digest.position)
                with sides.writing():
                    dest.engine.projector.replay(w, step)
                    _check_copy(sides.dst, w, digest, counts)
                    _set_sequence(sides.dst, w)
        except CorruptEventError as exc:
            raise CorruptEventError(
                f"copy refused: the source ledger {shown!r} holds an event that is not what "
                f"the ledger appended ({exc}); `provledger verify` on it names every "
                f"problem; {_aftermath(into, created)}"
            ) from None
        except LedgerError as exc:
            if exc is occupied:
                raise
            raise type(exc)(f"{exc}; {_aftermath(into, created)}") from None
    return CopyReport(
        source=shown,
        target=into.url,
        events=counts["events"],
        position=digest.position,
        digest=digest,
        snapshots=counts["snapshots"],
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True)
class _Sides:
    """The two databases of a copy, each in its transaction: the source read with
    ``r``, the target written with ``w``. A failure of either is raised as its
    typed error naming its own URL (:meth:`reading`, :meth:`writing`): the
    transactions' own blocks, nested, would name whichever is innermost."""

    source: Engine
    r: Cursor
    target: Engine
    w: Cursor

    @property
    def src(self) -> Any:
        return self.source.recorder

    @property
    def dst(self) -> Any:
        return self.target.recorder

    def reading(self) -> AbstractContextManager[None]:
        return _named(self.source)

    def writing(self) -> AbstractContextManager[None]:
        return _named(self.target)


@contextmanager
def _named(engine: Engine) -> Iterator[None]:
    """A failure of ``engine``'s database inside, as the engine's typed error."""
    try:
        yield
    except LedgerError:
        raise
    except Exception as exc:
        driver = type(exc).__module__.split(".", 1)[0] in ("psycopg", "psycopg_pool")
        if isinstance(exc, DATABASE_ERRORS) or driver:
            raise engine.storage_error(exc) from None
        raise


def _aftermath(into: Backend, created: bool) -> str:
    """What a failed copy left on the target: no row."""
    if into.kind == "postgresql":
        return (
            f"no row was written to the target (schema {into.env['POSTGRES_SCHEMA']!r} "
            "holds an empty ledger's tables: copy into it again, or drop it)"
        )
    if created:
        return "no row was written to the target (the file the copy created is removed)"
    return "no row was written to the target (it holds an empty ledger: copy into it again)"


def _step(progress: Progress, step: str, total: int) -> Callable[[int], None]:
    return lambda reached: progress(step, reached, total)


def _occupant(rec: Any, w: Cursor, shown: str) -> StorageError | None:
    """Under the target's writers' lock: the refusal of a target written to since
    it was first looked at (None: it is still empty)."""
    newest = rec.max_position(w)
    if newest:
        return not_empty(shown, rec.events_table.rsplit(".", 1)[-1], newest)
    for table in PRIMARY_TABLES:
        w.execute(rec.dialect.q(f"SELECT 1 AS found FROM {{t}}{table} LIMIT 1"))
        if w.fetchone() is not None:
            return not_empty(shown, table, None)
    return None


def _copy_rows(s: _Sides, progress: Progress | None) -> tuple[LogDigest, dict[str, int]]:
    """Copy the events and the primary tables; return the source's digest and row
    counts, read in the same read transaction as the rows."""
    with s.reading():
        _check_source_tables(s.src, s.r)
        stray = s.src.stray_position(s.r)
        counts = _counts(s.src, s.r)
        newest = s.src.max_position(s.r)
    if stray is not None:
        raise CorruptEventError(
            f"a stored {stray[1]} at log position {stray[0]}, below the log's first (1), "
            "was written behind the ledger's back"
        )
    after = 0
    while True:
        with s.reading():
            rows = s.src.read_rows_after(s.r, after, EVENT_BATCH)
        if not rows:
            break
        with s.writing():
            _insert_events(s.dst, s.w, rows)
        after = rows[-1][0]
        if progress is not None:
            progress("events", after, newest)
    for table, columns, size, start in (
        ("pl_merkle_leaves", ("position", "leaf"), ROW_BATCH, 0),
        ("pl_commits", ("last_pos", "first_pos"), ROW_BATCH, 0),
        ("pl_snapshots", ("ref", "content", "size"), SNAPSHOT_BATCH, ""),
    ):
        for batch in _batches(s, table, columns, size, start):
            with s.writing():
                insert_rows(s.w, s.dst.dialect, table, columns, batch)
    with s.reading():
        return _digest(s.src, s.r), counts


def _check_source_tables(src: Any, r: Cursor) -> None:
    """Refuse a source holding a ``pl_`` table that is neither a view nor one of
    :data:`PRIMARY_TABLES`: data this version does not know would be left behind."""
    if src.dialect.name == "postgresql":
        r.execute(
            "SELECT c.relname AS name FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
            " ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p')",
            (src.datastore.schema,),
        )
    else:
        r.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    known = {*PRIMARY_TABLES, "pl_schema", "pl_tracking", *src.projector.tables, *RETIRED}
    for row in r.fetchall():
        name = str(row["name"])
        if name.startswith("pl_") and name not in known:
            raise StorageError(
                f"copy refused: the source holds the table {name}, which this version of "
                "provledger does not know (a later version's?): the copy would leave what "
                "it holds behind; copy with the version that wrote it"
            )


def _insert_events(dst: Any, w: Cursor, rows: Sequence[Any]) -> None:
    """Insert stored events at their own positions (the aggregate id as the target
    stores it: hex text on SQLite, a UUID on PostgreSQL)."""
    table = dst.events_table
    if dst.dialect.name == "postgresql":
        curs: Any = w
        statement = (
            f"COPY {table} (originator_id, originator_version, topic, state, notification_id) "
            "FROM STDIN (FORMAT BINARY)"
        )
        with curs.copy(statement) as copy:
            copy.set_types([dst.datastore.originator_id_type, "int8", "text", "bytea", "int8"])
            for position, oid, version, topic, state in rows:
                oid = oid if isinstance(oid, UUID) else UUID(hex=str(oid))
                copy.write_row((oid, version, topic, bytes(state), position))
        return
    w.executemany(
        f"INSERT INTO {table} (rowid, originator_id, originator_version, topic, state) "
        "VALUES (?, ?, ?, ?, ?)",
        [
            (position, oid.hex if isinstance(oid, UUID) else oid, version, topic, bytes(state))
            for position, oid, version, topic, state in rows
        ],
    )


def _batches(
    s: _Sides, table: str, columns: Sequence[str], size: int, start: object
) -> Iterator[list[tuple[Any, ...]]]:
    """The source's rows of ``table`` in batches of ``size``, in the order of its key
    (the first of ``columns``) from after ``start``; bytes as bytes."""
    key = columns[0]
    statement = s.src.dialect.q(
        f"SELECT {', '.join(columns)} FROM {{t}}{table} WHERE {key} > ? ORDER BY {key} LIMIT ?"
    )
    after = start
    while True:
        with s.reading():
            s.r.execute(statement, (after, size))
            batch = [tuple(_plain(row[c]) for c in columns) for row in s.r.fetchall()]
        if not batch:
            return
        yield batch
        after = batch[-1][0]


def _plain(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def _counts(rec: Any, c: Cursor) -> dict[str, int]:
    """How many events, leaves, transaction bounds and snapshots (and snapshot
    bytes) are stored, read with ``c``."""
    d = rec.dialect
    length = "octet_length" if d.name == "postgresql" else "length"
    c.execute(
        d.q(
            f"SELECT (SELECT COUNT(*) FROM {rec.events_table}) AS events, "
            "(SELECT COUNT(*) FROM {t}pl_merkle_leaves) AS leaves, "
            "(SELECT COUNT(*) FROM {t}pl_commits) AS commits, "
            "(SELECT COUNT(*) FROM {t}pl_snapshots) AS snapshots, "
            f"(SELECT COALESCE(SUM({length}(content)), 0) FROM {{t}}pl_snapshots) AS bytes"
        )
    )
    row = c.fetchone()
    return {k: int(row[k]) for k in ("events", "leaves", "commits", "snapshots", "bytes")}


def _digest(rec: Any, c: Cursor) -> LogDigest:
    """The log's digest (the root over its stored Merkle leaves), read with ``c``."""
    last = 0

    def leaves() -> Iterator[bytes]:
        nonlocal last
        for position, leaf in rec.leaves(c):
            last = position
            yield leaf

    size, root = root_of(leaves())
    return LogDigest(size=size, position=last, root=root.hex())


def _check_copy(rec: Any, w: Cursor, digest: LogDigest, counts: dict[str, int]) -> None:
    """Refuse the copy unless the target, as written in ``w``, has the source's
    row counts and digest (its events were each checked against their leaf by
    the views' replay)."""
    copied = _counts(rec, w)
    for what, n in counts.items():
        if copied[what] != n:
            raise StorageError(
                f"copy failed: the target holds {copied[what]} {what} where the source "
                f"holds {n}; it was rolled back"
            )
    found = _digest(rec, w)
    if found != digest:
        raise StorageError(
            f"copy failed: the target's digest {found} is not the source's {digest}; it "
            "was rolled back"
        )


def _set_sequence(rec: Any, w: Cursor) -> None:
    """On PostgreSQL, move the events' sequence to the newest copied position (the
    next command appends after it). Last before the commit: ``setval`` is not
    rolled back."""
    if rec.dialect.name != "postgresql":
        return
    table = rec.events_table
    w.execute(
        f"SELECT setval(pg_get_serial_sequence('{table}', 'notification_id'), "
        f"(SELECT MAX(notification_id) FROM {table})) WHERE EXISTS (SELECT 1 FROM {table})"
    )


def _remove_new_file(path: str) -> None:
    """Remove the SQLite file a failed copy created, with its ``-wal`` and ``-shm``."""
    for end in ("", "-wal", "-shm", "-journal"):
        with suppress(OSError):
            Path(f"{path}{end}").unlink(missing_ok=True)
