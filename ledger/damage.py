"""A ledger damaged past what ``verify`` reads: its own tables dropped or altered
behind its back, looked at apart from the ledger (a read-only connection of its
own) when opening or checking it failed. A database holding a ledger's tables but
missing some, or holding values of another type in them, was damaged: a problem
found (``provledger verify`` exits 1), not a failure to check (exit 3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger.errors import CorruptEventError, UnknownTokenError
from ledger.merkle import LogDigest
from ledger.persistence import resolve_url
from ledger.persistence.base import LEDGER_TABLES
from ledger.stored_types import STORAGE_CLASSES

if TYPE_CHECKING:
    from ledger.application import Ledger
    from ledger.merkle import Verification
    from ledger.persistence.urls import Backend

__all__ = ["Damage", "damaged"]

#: The events table, by backend (eventsourcing's name on SQLite, the ledger's on
#: PostgreSQL), and the columns ``verify`` reads of it.
_EVENTS = {"sqlite": "stored_events", "postgresql": "provledger_events"}
_EVENT_COLUMNS = ("originator_id", "originator_version", "topic", "state")
#: The tables ``verify`` reads whatever the views' layout (0.1.0's too), with the
#: columns it reads and the check that names a problem with them: the events'
#: Merkle leaves, the views' layout and position (``pl_tracking``, ``pl_timeline``),
#: and the evidence bytes. The events table comes first (:data:`_EVENTS`).
_READ_BY_VERIFY: dict[str, tuple[tuple[str, ...], str]] = {
    "pl_merkle_leaves": (("position", "leaf"), "log"),
    "pl_tracking": (("view", "position"), "views"),
    "pl_timeline": (("position", "at"), "views"),
    "pl_snapshots": (("ref", "content"), "evidence bytes"),
}
#: Of those, the columns the ledger writes whole numbers into (SQLite lets any
#: value into a column; PostgreSQL's are of a whole-number type unless altered).
_WHOLE_NUMBERS = {
    "pl_merkle_leaves": ("position",),
    "pl_tracking": ("position",),
    "pl_timeline": ("position", "at"),
}
_PG_WHOLE = ("bigint", "integer", "smallint")
#: What a table is, in a problem naming it missing.
_WHAT = {
    "pl_merkle_leaves": "the log's Merkle leaves",
    "pl_tracking": "the views' layout and position",
    "pl_timeline": "the views' time index",
    "pl_snapshots": "the evidence bytes",
}
#: A problem :func:`damaged` found: the check that names it, what it is, and the
#: log position it is at (None: none).
_Found = tuple[str, str, int | None]
#: The order checks are reported in (``ledger.verification``).
_CHECK_ORDER = ("heads", "log", "consistency", "authorization", "views", "evidence bytes")


@dataclass(frozen=True)
class Damage:
    """A report of ``verify`` (as :class:`~ledger.merkle.Verification`) of a ledger
    it could not run on, damaged: no digest, no check run, the problems found."""

    problem: str
    problems: tuple[str, ...]
    failed_checks: tuple[str, ...]
    ok: bool = False
    digest: LogDigest | None = None
    first_bad_position: int | None = None
    checks: tuple[str, ...] = ()
    heads: int = 0
    consistency_proof: tuple[str, ...] = ()
    beyond: int = 0


def damaged(
    exc: BaseException, url: str | None, check: Callable[[Ledger], Verification] | None = None
) -> Damage | Verification:
    """The report of a ledger ``verify`` could not open or read for ``exc``, when
    what is wrong is the ledger's own tables: a stored event not appended by the
    ledger (``CorruptEventError``), or a table or column of those it reads
    whatever the views' layout missing, or a whole-number column holding
    something else, looked at apart from the ledger (its own read-only
    connection). A database holding a ledger's tables but missing some was
    damaged behind the ledger's back: a problem found (exit 1), not a failure
    to check (exit 3). An admin token unknown to the log may be one whose issuing
    event is among events removed: given ``check`` (the caller holds kept heads or
    a digest, which show a rollback), the ledger is then opened as stored, without
    its administrator, and ``check`` run on it; what it finds is the report.

    Raises:
        exc: nothing of a ledger is there at all (no table of one), its tables
            look whole, or they cannot be read: the failure stands as it was.
    """
    if isinstance(exc, UnknownTokenError) and check is not None:
        found_as_stored = _as_stored(url, check)
        if found_as_stored is not None:
            return found_as_stored
    if isinstance(exc, CorruptEventError):
        found: list[_Found] = [("log", str(exc), None)]
    elif "permission denied" in str(exc).lower():
        found = []  # what the ledger's role may not read is no table gone
    else:
        try:
            found = _table_problems(resolve_url(url))
        except Exception:  # the database cannot be read apart either: as it was
            found = []
    if not found:
        raise exc
    found.sort(key=lambda item: _CHECK_ORDER.index(item[0]))
    problems = tuple(_one_line(problem) for _, problem, _ in found)
    located = [position for _, _, position in found if position is not None]
    return Damage(
        problem=problems[0],
        problems=problems,
        failed_checks=tuple(dict.fromkeys(check for check, _, _ in found)),
        first_bad_position=located[0] if located else None,
    )


def _as_stored(url: str | None, check: Callable[[Ledger], Verification]) -> Verification | None:
    """What ``check`` finds on the ledger at ``url`` opened as stored (views not
    caught up), without its administrator; None if it finds nothing, or the
    ledger cannot be opened or checked (the refusal it was asked for stands)."""
    from ledger.application import Ledger

    try:
        with Ledger.open(url, catch_up=False, create=False) as led:
            report = check(led)
    except Exception:
        return None
    return None if report.ok else report


def _table_problems(backend: Backend) -> list[_Found]:
    """A problem (:data:`_Found`) for each table ``verify`` reads whatever the layout that is
    missing, lacks a column it reads, or holds something other than a whole number
    where the ledger writes one; [] when the database holds no table only a ledger
    has (:data:`LEDGER_TABLES`; an events table alone may be another eventsourcing
    application's), or ``backend`` is ``memory:``."""
    if backend.kind == "sqlite" and backend.path is not None:
        tables, odd = _sqlite_tables(backend.path)
    elif backend.kind == "postgresql":
        tables, odd = _postgres_tables(backend.env)
    else:
        return []
    events = _EVENTS[backend.kind]
    held = sorted(set(tables) & LEDGER_TABLES)
    if not held:
        # No table only a ledger has (another program's, or another eventsourcing
        # application's events alone): "no ledger" stands.
        return []
    wanted = {events: (_EVENT_COLUMNS, "log")} | _READ_BY_VERIFY
    found: list[_Found] = []
    for table, (columns, check) in wanted.items():
        what = _WHAT.get(table, "the log's events")
        if table not in tables:
            more = f", … {len(held)} tables" if len(held) > 2 else ""
            rest = (
                f", while the database holds the rest of a ledger ({', '.join(held[:2])}{more})"
                if table == events
                else ""
            )
            found.append((check, f"table {table}, {what}, is missing{rest}", None))
            continue
        lacking = [c for c in columns if c not in tables[table]]
        if lacking:
            found.append((check, f"table {table}, {what}, lacks its column {lacking[0]!r}", None))
    found += odd
    return found


def _sqlite_tables(path: str) -> tuple[dict[str, set[str]], list[_Found]]:
    """The tables of the SQLite file at ``path`` with their columns, and the
    problems of their values (:data:`_Found`): an event's of another type than
    the ledger writes, a Merkle leaf whose event is gone, a whole-number column
    holding something else (the first of each), read-only."""
    import sqlite3
    from contextlib import closing
    from pathlib import Path

    uri = f"{Path(path).absolute().as_uri()}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as con:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        tables = {
            name: {str(r[1]) for r in con.execute("SELECT * FROM pragma_table_info(?)", (name,))}
            for name in names
        }
        odd: list[_Found] = []
        if set(_EVENT_STORED) <= tables.get(_EVENTS["sqlite"], set()):
            odd += _mistyped_event(con)
            if "position" in tables.get("pl_merkle_leaves", ()):
                odd += _lost_event(con, "rowid", "")
        for table, columns in _WHOLE_NUMBERS.items():
            for column in columns:
                if column not in tables.get(table, ()):
                    continue
                row = con.execute(
                    f"SELECT {column} FROM {table} WHERE typeof({column}) <> 'integer' LIMIT 1"
                ).fetchone()
                if row is not None:
                    check = _READ_BY_VERIFY[table][1]
                    odd.append(
                        (
                            check,
                            f"table {table}, {_WHAT[table]}, holds {_shown(row[0])} in its "
                            f"column {column!r}, where the ledger writes whole numbers",
                            None,
                        )
                    )
    return tables, odd


#: The storage class the ledger writes in each column of SQLite's events table
#: (``ledger.stored_types``, which names one of another type as verify reads it).
_EVENT_STORED = {
    "originator_id": "text",
    "originator_version": "integer",
    "topic": "text",
    "state": "blob",
}


def _mistyped_event(con: Any) -> list[_Found]:
    """The problem (:data:`_Found`) of the first stored event holding a value of another type
    than the ledger writes in its column, as :mod:`ledger.stored_types` names it
    (what an admin token's check reads before verify can: the administrator's
    events); [] if none does."""
    types = ", ".join(f"typeof({column})" for column in _EVENT_STORED)
    odd = " OR ".join(f"typeof({column}) <> '{kind}'" for column, kind in _EVENT_STORED.items())
    row = con.execute(
        f"SELECT rowid, {types} FROM {_EVENTS['sqlite']} WHERE {odd} ORDER BY rowid LIMIT 1"
    ).fetchone()
    if row is None:
        return []
    for (column, kind), found in zip(_EVENT_STORED.items(), row[1:], strict=True):
        if found != kind:
            return [
                (
                    "log",
                    f"the event at position {row[0]} holds its {column} as {_KINDS[found]} "
                    f"where the ledger stores {_KINDS[kind]}: it was changed after it was "
                    "appended",
                    int(row[0]),
                )
            ]
    return []


#: SQLite's storage classes (``typeof``), as ``ledger.stored_types`` names them.
_KINDS = STORAGE_CLASSES


def _postgres_tables(env: dict[str, str]) -> tuple[dict[str, set[str]], list[_Found]]:
    """:func:`_sqlite_tables` for a PostgreSQL schema: a whole-number column is
    one of a whole-number type."""
    from ledger.persistence.pg_pool import plain_connection

    with plain_connection(env) as conn:
        # The catalog, not information_schema, which shows a role only the columns it
        # may use: a table it may not read is no table gone.
        rows = conn.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) "
            "FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped",
            (env["POSTGRES_SCHEMA"],),
        ).fetchall()
        tables: dict[str, set[str]] = {}
        odd: list[_Found] = []
        for table, column, data_type in rows:
            tables.setdefault(str(table), set()).add(str(column))
            if column in _WHOLE_NUMBERS.get(table, ()) and data_type not in _PG_WHOLE:
                odd.append(
                    (
                        _READ_BY_VERIFY[table][1],
                        f"table {table}, {_WHAT[table]}, has its column {column!r} of type "
                        f"{data_type}, where the ledger keeps whole numbers",
                        None,
                    )
                )
        if "notification_id" in tables.get(_EVENTS["postgresql"], ()) and "position" in tables.get(
            "pl_merkle_leaves", ()
        ):
            odd += _lost_event(conn, "notification_id", f"{env['POSTGRES_SCHEMA']}.")
    return tables, odd


def _lost_event(con: Any, key: str, schema: str) -> list[_Found]:
    """The problem (:data:`_Found`) of the first Merkle leaf whose event is gone from the events
    table (of ``schema``, numbered by ``key``), in verify's words; [] if none is:
    what leaves an admin token the log no longer shows issued."""
    events = _EVENTS["sqlite" if key == "rowid" else "postgresql"]
    row = con.execute(
        f"SELECT l.position FROM {schema}pl_merkle_leaves l LEFT JOIN {schema}{events} e "
        f"ON e.{key} = l.position WHERE e.{key} IS NULL ORDER BY l.position LIMIT 1"
    ).fetchone()
    if row is None:
        return []
    return [("log", f"the event at position {row[0]} is missing", int(row[0]))]


def _shown(value: object) -> str:
    """A stored value in a problem: its repr, cut to 40 characters."""
    text = repr(bytes(value) if isinstance(value, memoryview) else value)
    return text if len(text) <= 40 else text[:39] + "…"


def _one_line(text: str) -> str:
    """A problem on one line, with anything a terminal cannot show escaped."""
    line = text.replace("\r", "\\r").replace("\n", "\\n")
    return line.encode("utf-8", "backslashreplace").decode("utf-8")
