"""Shared plumbing for the views: SQL dialects, the tracking table, row digests.

Every view is a set of tables in the ledger's own database. Each view has one
row in ``pl_tracking`` holding the last log position it has applied; the view's
rows and that position are always written in the same transaction, so a view is
updated exactly once per event even across crashes.
"""

from __future__ import annotations

import hashlib
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


@dataclass(frozen=True)
class Dialect:
    """How one SQL backend spells placeholders, types and table names."""

    name: str
    placeholder: str
    blob: str
    bigint: str
    prefix: str = ""

    def q(self, statement: str) -> str:
        """Translate a statement written with ``?`` and ``{t}`` table prefixes."""
        statement = statement.replace("{t}", self.prefix)
        statement = statement.replace("{blob}", self.blob).replace("{bigint}", self.bigint)
        if self.placeholder != "?":
            statement = statement.replace("?", self.placeholder)
        return statement


SQLITE = Dialect(name="sqlite", placeholder="?", blob="BLOB", bigint="INTEGER")


def postgres_dialect(schema: str) -> Dialect:
    """The PostgreSQL dialect with tables qualified by ``schema``."""
    return Dialect(
        name="postgres", placeholder="%s", blob="BYTEA", bigint="BIGINT", prefix=f"{schema}."
    )


TRACKING_DDL = (
    "CREATE TABLE IF NOT EXISTS {t}pl_tracking (view TEXT PRIMARY KEY, position {bigint} NOT NULL)",
)


def get_tracking(c: Cursor, d: Dialect, view: str) -> int:
    """The last position applied to ``view`` (0 if none)."""
    c.execute(d.q("SELECT position FROM {t}pl_tracking WHERE view=?"), (view,))
    row = c.fetchone()
    return int(row["position"]) if row else 0


def set_tracking(c: Cursor, d: Dialect, view: str, position: int) -> None:
    """Record that ``view`` has applied everything up to ``position``."""
    c.execute(
        d.q(
            "INSERT INTO {t}pl_tracking (view, position) VALUES (?, ?) "
            "ON CONFLICT (view) DO UPDATE SET position=excluded.position"
        ),
        (view, position),
    )


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
