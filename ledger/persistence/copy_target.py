"""A copy's target before anything is written to it: which database it is, and
whether it is empty (no ledger rows, no other program's tables), read without
opening it as a ledger, which would create tables or catch up views."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing, suppress
from pathlib import Path

from ledger.errors import InvalidURLError, StorageError
from ledger.persistence.sqlite_files import foreign_file, others_tables
from ledger.persistence.urls import Backend, resolve_url

__all__ = [
    "EVENT_TABLES",
    "PRIMARY_TABLES",
    "not_empty",
    "refuse_occupied",
    "refuse_same",
    "target_of",
]

#: The tables beside the events that hold primary data (a copy copies them row for row).
PRIMARY_TABLES = ("pl_merkle_leaves", "pl_commits", "pl_snapshots")
#: The names a ledger's events table has (eventsourcing's, on SQLite and PostgreSQL).
EVENT_TABLES = ("stored_events", "provledger_events")


def target_of(target: str) -> Backend:
    """The target's backend; ``memory:`` and read-only URLs refused."""
    if not isinstance(target, str):
        raise InvalidURLError(f"copy target must be a URL string, got {type(target).__name__}")
    into = resolve_url(target)
    if into.kind == "memory":
        raise InvalidURLError(
            "copy refused: the target memory: would be gone once copied; give a "
            "sqlite:///path.db file or a postgresql:// schema (nothing was written)"
        )
    if into.read_only:
        raise InvalidURLError(
            f"copy refused: the target {into.url!r} is opened read-only (mode=ro); "
            "nothing was written"
        )
    return into


def refuse_same(source: Backend, into: Backend) -> None:
    """Refuse a target that is the source's own file or schema."""
    if source.kind != into.kind:
        return
    if into.kind == "sqlite" and source.path is not None and into.path is not None:
        same = os.path.realpath(source.path) == os.path.realpath(into.path)
        with suppress(OSError):  # the target does not exist yet
            same = same or os.path.samefile(source.path, into.path)
    else:
        keys = ("POSTGRES_HOST", "POSTGRES_PORT", "POSTGRES_DBNAME", "POSTGRES_SCHEMA")
        same = all(source.env.get(k) == into.env.get(k) for k in keys)
    if same:
        raise InvalidURLError(
            f"copy refused: the target {into.url!r} is the source ledger itself; give "
            "another file or schema (nothing was written)"
        )


def refuse_occupied(into: Backend) -> None:
    """Refuse a target holding ledger rows or another program's tables, read
    without opening it as a ledger (which would create or catch up tables)."""
    if into.kind == "postgresql":
        from ledger.persistence.pg_pool import others_pg_tables

        where = f"schema {into.env['POSTGRES_SCHEMA']!r} of {into.url}"
        others = others_pg_tables(into.env)
        held = None if others else _pg_rows(into.env)
    else:
        assert into.path is not None
        where = into.path
        found = "a directory" if os.path.isdir(into.path) else foreign_file(into.path)
        if found in ("a directory", "not an SQLite database"):
            raise StorageError(
                f"copy refused: the target {into.path} is {found}; give the path of a new "
                "file (nothing was written)"
            )
        others = others_tables(into.path)
        held = None if others else _sqlite_rows(into.path)
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise StorageError(
            f"copy refused: the target {where} holds {shown}, not a ledger's tables; give "
            "a new file or a schema of its own (nothing was written)"
        )
    if held is not None:
        raise not_empty(where, *held)


def not_empty(where: str, table: str, newest: int | None) -> StorageError:
    """The refusal of a target (``where``) whose ``table`` holds rows (``newest``:
    the newest log position, when it is the events table)."""
    ledger = "" if newest is None else f" (a ledger at log position {newest})"
    return StorageError(
        f"copy refused: the target {where} is not empty: its table {table} holds rows"
        f"{ledger}; copy into a new file or an empty schema (nothing was written)"
    )


def _sqlite_rows(path: str) -> tuple[str, int | None] | None:
    """The first ledger table of the SQLite file at ``path`` holding rows, and its
    newest log position if it is the events table (read-only); None if none."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return None
    uri = f"{Path(path).absolute().as_uri()}?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True)) as con:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            for table in (*EVENT_TABLES, *PRIMARY_TABLES):
                if table in names and con.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone():
                    newest = None
                    if table in EVENT_TABLES:
                        newest = int(con.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()[0])
                    return table, newest
    except sqlite3.Error as exc:
        raise StorageError(
            f"copy refused: the target {path} cannot be read ({exc}); nothing was written"
        ) from None
    return None


def _pg_rows(env: dict[str, str]) -> tuple[str, int | None] | None:
    """:func:`_sqlite_rows` for a PostgreSQL schema (None also when the server
    cannot be reached: opening the target then says why)."""
    import psycopg

    from ledger.persistence.pg_pool import plain_connection

    schema = env["POSTGRES_SCHEMA"]
    try:
        with plain_connection(env) as conn:
            for table in (*EVENT_TABLES, *PRIMARY_TABLES):
                name = f"{schema}.{table}"
                found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
                if not found or not found[0]:
                    continue
                if conn.execute(f"SELECT 1 FROM {name} LIMIT 1").fetchone():
                    newest = None
                    if table in EVENT_TABLES:
                        row = conn.execute(f"SELECT MAX(notification_id) FROM {name}").fetchone()
                        newest = int(row[0]) if row else None
                    return table, newest
    except psycopg.Error:
        return None
    return None
