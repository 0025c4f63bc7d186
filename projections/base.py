"""Shared plumbing for the views: SQL dialects, the tracking table, row digests.

Every view is a set of tables in the ledger's own database. The views apply each
event in the same transaction as the time index's row for it, so the newest
position in ``pl_timeline`` is the last log position every view has applied: a
view is updated exactly once per event even across crashes. ``pl_tracking``
keeps the layout the views were built with.
"""

from __future__ import annotations

import functools
import hashlib
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ledger.serialization import pack


class Cursor(Protocol):
    """The DB-API cursor subset the views use (sqlite3 and psycopg both fit)."""

    def execute(self, statement: Any, params: Any = ...) -> Any: ...

    def executemany(self, statement: Any, params: Any) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Any: ...


#: A statement (in the backend's own placeholders) and its parameters.
Query = tuple[str, Sequence[Any]]


@dataclass(frozen=True)
class Dialect:
    """How one SQL backend spells placeholders, types and table names."""

    name: str
    placeholder: str
    blob: str
    bigint: str
    prefix: str = ""
    #: Appended to a text column to order it by code point, as SQLite and Python do.
    bytewise: str = ""
    #: Ends a table whose primary key is its only b-tree (SQLite's ``WITHOUT ROWID``):
    #: a row written touches one page fewer than with a separate key index.
    clustered: str = ""
    #: The id a record key was proposed as (the key up to ``@@``), of column ``{c}``.
    bare_id: str = "substr({c}, 1, instr({c} || '@@', '@@') - 1)"
    #: Whether the key in column ``{c}`` is qualified (``name@@scope``).
    qualified: str = "instr({c}, '@@') > 0"
    #: A statement answering one row, true when table ``?`` exists (None: the
    #: backend's views are replaced whole on a reset). On PostgreSQL a view table
    #: dropped and made anew is not what a reader's snapshot taken before saw: it
    #: would read it empty. Its views are emptied in place while their layout holds.
    table_exists: str | None = None
    #: Whether a record row ``r`` was delivered (``{delivered}``). PostgreSQL asks
    #: for its first delivery by position, on ``pl_deliveries_record``'s keys
    #: (``{delivered_key}``): an EXISTS there may be planned as a scan of every
    #: delivery once a report is delivered many times (its estimate of each
    #: record's deliveries then high), and such a look-up cannot.
    delivered: str = "EXISTS (SELECT 1 FROM {t}pl_deliveries dl WHERE dl.record_id = r.record_id)"
    delivered_key: str = ""

    def listing_order(self, column: str) -> str:
        """What a scope's listing is ordered by: the id each record was proposed
        as (unique within a scope), by code point; an index on it serves pages."""
        return "(" + self.bare_id.format(c=column) + ")" + self.bytewise

    def is_qualified(self, column: str) -> str:
        """A condition: the key in ``column`` is qualified (``name@@scope``)."""
        return self.qualified.format(c=column)

    def q(self, statement: str) -> str:
        """Translate a statement written with ``?`` and ``{t}`` table prefixes."""
        return _translated(self, statement)

    def _translate(self, statement: str) -> str:
        statement = statement.replace("{delivered}", self.delivered)
        statement = statement.replace("{delivered_key}", self.delivered_key)
        statement = statement.replace("{t}", self.prefix)
        statement = statement.replace("{blob}", self.blob).replace("{bigint}", self.bigint)
        statement = statement.replace("{bytewise}", self.bytewise)
        statement = statement.replace("{clustered}", self.clustered)
        if self.placeholder != "?":
            statement = statement.replace("?", self.placeholder)
        return statement


@functools.lru_cache(maxsize=4096)
def _translated(d: Dialect, statement: str) -> str:
    """``Dialect.q``, remembered: a command translates the same few statements."""
    return d._translate(statement)


SQLITE = Dialect(
    name="sqlite", placeholder="?", blob="BLOB", bigint="INTEGER", clustered=" WITHOUT ROWID"
)


def postgres_dialect(schema: str) -> Dialect:
    """The PostgreSQL dialect with tables qualified by ``schema``."""
    return Dialect(
        name="postgresql",
        placeholder="%s",
        blob="BYTEA",
        bigint="BIGINT",
        prefix=f"{schema}.",
        bytewise=' COLLATE "C"',
        bare_id="split_part({c}, '@@', 1)",
        table_exists="SELECT to_regclass(%s) IS NOT NULL AS e",
        qualified="strpos({c}, '@@') > 0",
        delivered="(SELECT dl.position FROM {t}pl_deliveries dl WHERE dl.record_id = "
        "r.record_id ORDER BY dl.position LIMIT 1) IS NOT NULL",
        delivered_key=", position",
    )


TRACKING_DDL = (
    "CREATE TABLE IF NOT EXISTS {t}pl_tracking ("
    "view TEXT PRIMARY KEY, position {bigint} NOT NULL){clustered}",
)


def as_of_filter(alias: str = "") -> str:
    """The rows of a versioned view (``from_pos``/``to_pos``: records, edges) under
    table alias ``alias`` as they stood right after a position (its two
    parameters: the position, twice)."""
    col = f"{alias}." if alias else ""
    return f"{col}from_pos <= ? AND ({col}to_pos IS NULL OR {col}to_pos > ?)"


def write_rows(c: Cursor, statement: str, rows: Sequence[Sequence[Any]]) -> None:
    """``executemany``, except that one row is one ``execute``: psycopg runs
    ``executemany`` in pipeline mode, which costs extra round trips for one row."""
    if len(rows) == 1:
        c.execute(statement, rows[0])
    elif rows:
        c.executemany(statement, rows)


#: From this many rows a PostgreSQL insert streams them with ``COPY`` instead of
#: ``executemany`` (which sends one bind/execute per row and dumps every
#: parameter in Python); below it the per-statement cost of ``COPY`` dominates.
COPY_FROM = 8


def insert_rows(
    c: Cursor, d: Dialect, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> None:
    """Insert ``rows`` (tuples in ``columns`` order) into the view table ``table``:
    ``COPY`` on PostgreSQL for ``COPY_FROM`` rows or more (unless the connection
    is queueing statements in pipeline mode, where ``COPY`` cannot run), else
    ``write_rows``."""
    if d.name == "postgresql" and len(rows) >= COPY_FROM and not _pipelined(c):
        copy: Any = getattr(c, "copy")  # noqa: B009  (psycopg cursors only)
        with copy(_copy_sql(d, table, tuple(columns))) as stream:
            for row in rows:
                stream.write_row(row)
    elif rows:
        columns = tuple(columns)
        bound = _bound(rows, len(columns)) if d.name == "sqlite" else None
        if bound is None:
            write_rows(c, _insert_sql(d, table, columns), rows)
        else:
            # Columns NULL in every row are written as a NULL literal: SQLite's
            # Python driver binds a None through its adapter look-up (about 0.3 µs
            # a parameter, a third of a wide view row's insert), a literal costs nothing.
            take = operator.itemgetter(*bound)
            write_rows(c, _insert_sql(d, table, columns, bound), [take(row) for row in rows])


#: Tables a batch grows, whose planner statistics PostgreSQL needs current: with
#: none (a new table, a rebuild) or stale ones, its planner takes a partial
#: listing index for every ``to_pos IS NULL`` lookup and reads all of it.
STATISTICS_TABLES = ("pl_records", "pl_edges", "pl_timeline")


def refresh_statistics(c: Cursor, d: Dialect) -> None:
    """``ANALYZE`` :data:`STATISTICS_TABLES` on PostgreSQL, in the caller's
    transaction (its autovacuum would get there only after its next pass, a minute
    or more later); nothing on SQLite, whose planner needs no statistics here."""
    if d.name == "postgresql":
        for table in STATISTICS_TABLES:
            c.execute(f"ANALYZE {d.prefix}{table}")


def _pipelined(c: Cursor) -> bool:
    """Whether a psycopg cursor's connection is in pipeline mode."""
    connection: Any = getattr(c, "connection", None)
    return bool(connection is not None and connection.pgconn.pipeline_status)


@functools.cache
def _copy_sql(d: Dialect, table: str, columns: tuple[str, ...]) -> str:
    return f"COPY {d.prefix}{table} ({', '.join(columns)}) FROM STDIN"


@functools.cache
def _insert_sql(
    d: Dialect, table: str, columns: tuple[str, ...], bound: tuple[int, ...] | None = None
) -> str:
    """The insert of ``columns``; with ``bound``, only those (by index, two or
    more) take a parameter and the others are NULL."""
    if bound is None:
        marks = ", ".join("?" for _ in columns)
    else:
        marks = ", ".join("?" if i in bound else "NULL" for i in range(len(columns)))
    return d.q(f"INSERT INTO {{t}}{table} ({', '.join(columns)}) VALUES ({marks})")


def _bound(rows: Sequence[Sequence[Any]], width: int) -> tuple[int, ...] | None:
    """The indexes of the columns holding a value in some row, if at least two
    (``itemgetter`` of one index gives no tuple) and fewer than all; else None."""
    if len(rows) == 1:
        bound = tuple(i for i, value in enumerate(rows[0]) if value is not None)
    else:
        n, columns = len(rows), zip(*rows, strict=True)
        bound = tuple(i for i, values in enumerate(columns) if values.count(None) != n)
    return bound if 1 < len(bound) < width else None


def rows_in(
    c: Cursor, d: Dialect, select: str, ids: Iterable[Any], after: Sequence[Any] = ()
) -> Iterator[Any]:
    """Rows of ``select`` for each distinct one of ``ids``, one query per 500.

    ``select`` is written for ``Dialect.q`` with ``{marks}`` where the list of
    placeholders goes (``... IN ({marks})``; literal braces doubled); ``after``
    are the parameters of any placeholders following it.
    """
    distinct = list(dict.fromkeys(ids))
    if d.name == "postgresql" and "IN ({marks})" in select:
        # One array parameter: the statement's text is the same for every chunk,
        # so psycopg parses it once instead of 500 placeholders per query.
        statement = d.q(select.replace("IN ({marks})", "= ANY(?)").format())
        for start in range(0, len(distinct), 500):
            c.execute(statement, (distinct[start : start + 500], *after))
            yield from c.fetchall()
        return
    for start in range(0, len(distinct), 500):
        chunk = distinct[start : start + 500]
        c.execute(d.q(select.format(marks=", ".join("?" for _ in chunk))), (*chunk, *after))
        yield from c.fetchall()


def rows_digest(rows: Iterable[Sequence[Any]]) -> int:
    """Order-independent digest of rows: the sum of their sha256 values mod 2**256."""
    total = 0
    for row in rows:
        total = (total + int.from_bytes(hashlib.sha256(pack(list(row))).digest(), "big")) % (
            1 << 256
        )
    return total


def fetch_in_chunks(c: Cursor, size: int = 1000) -> Iterator[Any]:
    """Stream the rows of the last query without holding them all in memory."""
    raw: Any = getattr(c, "sqlite_cursor", c)  # eventsourcing wraps sqlite3 cursors
    fetchmany = raw.fetchmany
    while True:
        chunk = fetchmany(size)
        if not chunk:
            return
        yield from chunk
