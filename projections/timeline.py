"""The position ↔ time index used by ``as_of(time=…)``.

Event timestamps come from the writers' clocks and need not rise with the log
position (two processes, clock steps). The index stores, per position, the
running maximum of the timestamps so far: monotonic by construction, so the
position for an instant is a single indexed lookup, and the index is a pure
function of the log (a rebuild reproduces it exactly).
"""

from __future__ import annotations

from typing import Any

from ledger.serialization import datetime_to_micros
from projections.base import Cursor, Dialect, insert_rows

VIEW = "timeline"

DDL = (
    "CREATE TABLE IF NOT EXISTS {t}pl_timeline ("
    "position {bigint} PRIMARY KEY, at {bigint} NOT NULL)",
    "CREATE INDEX IF NOT EXISTS pl_timeline_at ON {t}pl_timeline (at)",
)

TABLES = ("pl_timeline",)

#: Up to this many events are indexed with one statement (a command's events).
_ONE_STATEMENT = 16


def last_time(c: Cursor, d: Dialect) -> int:
    """The time of the newest indexed position (0 for an empty log)."""
    c.execute(d.q("SELECT at FROM {t}pl_timeline ORDER BY position DESC LIMIT 1"))
    row = c.fetchone()
    return int(row["at"]) if row else 0


def apply_many(c: Cursor, d: Dialect, events: list[tuple[int, Any]]) -> None:
    """Index a batch of (position, event) in log order."""
    if not events:
        return
    if len(events) > _ONE_STATEMENT:
        at = last_time(c, d)
        rows = []
        for pos, event in events:
            at = max(at, datetime_to_micros(event.timestamp))
            rows.append((pos, at))
        insert_rows(c, d, "pl_timeline", ("position", "at"), rows)
        return
    # A command's few events: the running maximum among them here, the stored
    # maximum joined in by the statement itself (one statement, no read first).
    running, params = 0, []
    for pos, event in events:
        running = max(running, datetime_to_micros(event.timestamp))
        params += [pos, running]
    values = ", ".join("(CAST(? AS {bigint}), CAST(? AS {bigint}))" for _ in events)
    c.execute(
        d.q(
            "INSERT INTO {t}pl_timeline (position, at) "
            "SELECT v.column1, CASE WHEN v.column2 > m.at THEN v.column2 ELSE m.at END "
            f"FROM (VALUES {values}) AS v, (SELECT COALESCE((SELECT at FROM {{t}}pl_timeline "
            "ORDER BY position DESC LIMIT 1), 0) AS at) AS m"
        ),
        tuple(params),
    )


def position_at(c: Cursor, d: Dialect, at: int) -> int:
    """The newest position recorded at or before ``at`` (0 if none)."""
    c.execute(d.q("SELECT MAX(position) AS p FROM {t}pl_timeline WHERE at <= ?"), (at,))
    row = c.fetchone()
    return int(row["p"]) if row and row["p"] is not None else 0


def time_of(c: Cursor, d: Dialect, position: int) -> int | None:
    """The indexed time of the newest position at or before ``position``."""
    c.execute(
        d.q("SELECT at FROM {t}pl_timeline WHERE position <= ? ORDER BY position DESC LIMIT 1"),
        (position,),
    )
    row = c.fetchone()
    return int(row["at"]) if row else None


def commit_end(c: Cursor, d: Dialect, position: int) -> int:
    """The last position of the transaction that appended ``position``.

    A command's events are committed together, so no reader ever saw the ledger
    between them; as-of answers are given at transaction ends only.
    """
    c.execute(
        d.q("SELECT last_pos FROM {t}pl_commits WHERE first_pos <= ? AND last_pos >= ?"),
        (position, position),
    )
    row = c.fetchone()
    return int(row["last_pos"]) if row else position
