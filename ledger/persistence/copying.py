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

The target is written in one write transaction holding its writers' lock: the
rows, then its views replayed from them (which checks every event against its
Merkle leaf), then the row counts and the digest compared with the source's; any
difference rolls it all back. The rows are read from the source in one read
transaction (the log at one position while writers go on; nothing is written to
it), ended once they are copied: a PostgreSQL server ends a session left idle in
a transaction for longer than ``idle_in_transaction_session_timeout`` (5 s unless
the URL's ``idle_timeout`` says) and the views may take longer. Once the target
has committed (a new SQLite file: once it has its name, below), the copy is
complete: nothing that fails after (closing either ledger) fails it.

A new SQLite file is not written at its name: it is built in a hidden file beside
it (``.NAME.partial-PID``), then checked into one file (no ``-wal`` beside it),
checked again (its events and digest) and linked to its name, which never
replaces a file made there meanwhile (:mod:`ledger.persistence.copy_target`). A
copy killed midway thus leaves no file at the name (where one would open as an
empty ledger, and verify), only its hidden partial, removed by the next copy into
that folder. A target that is there already (an empty ledger) is written in place.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

from ledger.errors import CorruptEventError, InvalidURLError, LedgerError, StorageError
from ledger.merkle import LogDigest, root_of
from ledger.persistence.base import LEDGER_TABLES
from ledger.persistence.copy_target import (
    PRIMARY_TABLES,
    Made,
    Server,
    claim_file,
    claim_partial,
    failure,
    insert_events,
    occupant,
    partial_url,
    put_in_place,
    refuse_occupied,
    refuse_same,
    remove_claimed,
    remove_partial,
    server_of,
    set_sequence,
    target_of,
)
from ledger.persistence.faults import DATABASE_ERRORS
from ledger.persistence.urls import Backend, redacted, resolve_url
from projections.base import Cursor, insert_rows
from projections.projector import RETIRED

if TYPE_CHECKING:
    from ledger.application import Ledger
    from ledger.engine import Engine

__all__ = ["PRIMARY_TABLES", "CopyReport", "by_size", "copy_ledger", "read_only_source"]

#: Rows read from the source at a time: events (a rebuild's batch), leaves and
#: transaction bounds (and snapshots' sizes).
EVENT_BATCH, ROW_BATCH = 1000, 5000
#: Bytes of evidence snapshots read from the source at a time, as many snapshots as
#: fit (one at least, however big): memory held is bounded by the biggest
#: snapshot and this, not by a count of snapshots of any size.
SNAPSHOT_BYTES = 32 * 1024 * 1024

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
    source: Ledger | str,
    target: str,
    *,
    progress: Progress | None = None,
    source_url: str | None = None,
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
    takes them again). A new SQLite file is built in a hidden file beside it
    (``.NAME.partial-PID``) and given its name only once committed, checked and
    one self-contained file, never replacing a file made there meanwhile: a copy
    killed midway leaves no file at the name (the next copy into that folder
    removes what it left). Once it has committed (a new SQLite file: once it has
    its name), the copy is returned whatever fails after (closing either ledger).

    ``source_url``: how messages and the report name an open ``source`` (default:
    the URL it was opened with; the command line opens an SQLite source with
    ``mode=ro`` added, and names it as it was given).

    Raises:
        InvalidURLError: ``target`` is no ledger URL, is ``memory:`` or read-only,
            or names the source's own database.
        StorageError: the target holds rows or another program's tables (naming
            the table), either database cannot be reached, the copy differs, or
            a new file's name was taken by another process meanwhile (or the
            new file could not be made one file and given its name).
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
        led = source
        shown = redacted(source_url) if source_url is not None else resolve_url(led.url).url
    made = Made()
    try:
        led.engine.check_open()  # before anything is made on the target
        refuse_same(resolve_url(led.url), into, _server(led))
        refuse_occupied(into)
        if into.path is not None:  # a new file is made here, not by opening it
            made.partial = claim_partial(into.path)
            if made.partial is None:  # the path names a file: it is written in place
                made.file = claim_file(into.path)
        try:
            return _copy(led, shown, target, into, made, progress)
        except BaseException:
            if into.path is not None and made.file is not None and not made.keep:
                remove_claimed(into.path, made.file)
            raise
        finally:
            if made.partial is not None:  # at its name once the copy is complete
                remove_partial(made.partial)
    finally:
        if own:
            _close(led, made.committed)


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


def _server(led: Ledger) -> Server | None:
    """The PostgreSQL server and database of ``led`` (None: not PostgreSQL, or
    not reachable now: copying then says why)."""
    if led.engine.backend != "postgresql":
        return None
    try:
        with led.engine.statement() as c:
            return server_of(c)
    except Exception:  # not known: the copy's own reads name the failure
        return None


def _copy(
    led: Ledger, shown: str, target: str, into: Backend, made: Made, progress: Progress | None
) -> CopyReport:
    """Open (create) the target, copy in one write transaction, close it."""
    from ledger.application import Ledger

    started = time.perf_counter()
    try:
        dest = Ledger.open(target if made.partial is None else partial_url(target, made.partial))
    except LedgerError as exc:
        if made.partial is None:
            raise
        raise failure(exc, led.url, shown, into, made) from None
    try:
        digest, counts = _transaction(led, dest, into, made, progress)
    except LedgerError as exc:
        raise failure(exc, led.url, shown, into, made) from None
    finally:
        _close(dest, made.committed)
    if made.partial is not None and into.path is not None:
        put_in_place(made.partial, into.path, digest, counts["events"])
    return CopyReport(
        source=shown,
        target=into.url,
        events=counts["events"],
        position=digest.position,
        digest=digest,
        snapshots=counts["snapshots"],
        seconds=time.perf_counter() - started,
    )


def _transaction(
    led: Ledger, dest: Ledger, into: Backend, made: Made, progress: Progress | None
) -> tuple[LogDigest, dict[str, int]]:
    """The copy's write transaction on ``dest``: refused if written to meanwhile;
    the rows read in one read transaction of ``led``, ended before the views are
    built; ``made.committed`` once it has committed."""
    target = dest.engine
    done = False
    try:
        with target.locked("copy") as w:
            with target.recorder.replaying(w):
                with _named(target):
                    occupied = occupant(target.recorder, w, into.url)
                if occupied is not None:
                    made.keep = True  # another copy's, or another program's: not ours
                    raise occupied
                with _read_once(led.engine) as r:
                    digest, counts = _copy_rows(_Sides(led.engine, r, target, w), progress)
                step = None if progress is None else _step(progress, "views", digest.position)
                with _named(target):
                    target.projector.replay(w, step)
                    _check_copy(target.recorder, w, digest, counts)
                    set_sequence(target.recorder, w)
            done = True
    except BaseException:
        if done:  # failed as it committed (a lost connection): it may have
            made.keep, made.committing = True, str(digest)
        raise
    made.committed = True
    return digest, counts


def _close(led: Ledger, committed: bool) -> None:
    """Close ``led``; once the copy has committed, a failure to close fails
    nothing (the copy is complete; the connections go with the process)."""
    try:
        led.close()
    except Exception:
        if not committed:
            raise


@contextmanager
def _read_once(engine: Engine) -> Iterator[Cursor]:
    """A read transaction of ``engine`` that cannot fail as it ends once its block has
    read everything (a ROLLBACK on a session the server ended meanwhile)."""
    read = False
    try:
        with engine.reading() as r:
            yield r
            read = True
    except Exception:
        if not read:
            raise


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


def _step(progress: Progress, step: str, total: int) -> Callable[[int], None]:
    return lambda reached: progress(step, reached, total)


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
            insert_events(s.dst, s.w, rows)
        after = rows[-1][0]
        if progress is not None:
            progress("events", after, newest)
    for table, columns in (
        ("pl_merkle_leaves", ("position", "leaf")),
        ("pl_commits", ("last_pos", "first_pos")),
    ):
        for batch in _batches(s, table, columns):
            with s.writing():
                insert_rows(s.w, s.dst.dialect, table, columns, batch)
    for batch in _snapshot_batches(s):
        with s.writing():
            insert_rows(s.w, s.dst.dialect, "pl_snapshots", ("ref", "content", "size"), batch)
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
    known = {*LEDGER_TABLES, *RETIRED}
    for row in r.fetchall():
        name = str(row["name"])
        if name.startswith("pl_") and name not in known:
            raise StorageError(
                f"copy refused: the source holds the table {name}, which this version of "
                "provledger does not know (a later version's?): the copy would leave what "
                "it holds behind; copy with the version that wrote it"
            )


def _batches(s: _Sides, table: str, columns: Sequence[str]) -> Iterator[list[tuple[Any, ...]]]:
    """The source's rows of ``table`` in batches of :data:`ROW_BATCH`, in the order of
    its key (the first of ``columns``, a log position); bytes as bytes."""
    key = columns[0]
    statement = s.src.dialect.q(
        f"SELECT {', '.join(columns)} FROM {{t}}{table} WHERE {key} > ? ORDER BY {key} LIMIT ?"
    )
    after = 0
    while True:
        with s.reading():
            s.r.execute(statement, (after, ROW_BATCH))
            batch = [tuple(_plain(row[c]) for c in columns) for row in s.r.fetchall()]
        if not batch:
            return
        yield batch
        after = batch[-1][0]


def _snapshot_batches(s: _Sides) -> Iterator[list[tuple[Any, ...]]]:
    """The source's evidence snapshots (ref, content, size) in the order of their
    ref, in batches of at most :data:`SNAPSHOT_BYTES` of content (:func:`by_size`;
    their sizes read first, :data:`ROW_BATCH` at a time)."""
    d, columns = s.src.dialect, ("ref", "content", "size")
    length = "octet_length" if d.name == "postgresql" else "length"
    sizes = d.q(
        f"SELECT ref, {length}(content) AS n FROM {{t}}pl_snapshots WHERE ref > ? "
        "ORDER BY ref LIMIT ?"
    )
    rows = d.q(
        f"SELECT {', '.join(columns)} FROM {{t}}pl_snapshots WHERE ref > ? AND ref <= ? "
        "ORDER BY ref"
    )
    after = ""
    while True:
        with s.reading():
            s.r.execute(sizes, (after, ROW_BATCH))
            page = [(str(row["ref"]), int(row["n"])) for row in s.r.fetchall()]
        if not page:
            return
        for refs in by_size(page, SNAPSHOT_BYTES):
            with s.reading():
                s.r.execute(rows, (after, refs[-1]))
                batch = [tuple(_plain(row[c]) for c in columns) for row in s.r.fetchall()]
            yield batch
            after = refs[-1]


def by_size(sizes: Iterable[tuple[str, int]], limit: int) -> Iterator[list[str]]:
    """The keys of ``sizes`` ((key, bytes), in order) in runs whose bytes add up to
    at most ``limit``; a key over ``limit`` alone is a run of its own."""
    run: list[str] = []
    held = 0
    for key, size in sizes:
        if run and held + size > limit:
            yield run
            run, held = [], 0
        run.append(key)
        held += size
    if run:
        yield run


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
