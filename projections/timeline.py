"""The position ↔ time index used by ``as_of(time=…)``.

Event timestamps come from the writers' clocks and need not rise with the log
position (two processes, clock steps). The index stores, per position, the
running maximum of the timestamps so far: monotonic by construction, so the
position for an instant is a binary search on the position key (no second
index for a command to write), and the index is a pure function of the log (a
rebuild reproduces it exactly).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ledger.serialization import datetime_to_micros
from projections.base import Cursor, Dialect, insert_rows

VIEW = "timeline"

DDL = (
    "CREATE TABLE IF NOT EXISTS {t}pl_timeline ("
    "position {bigint} PRIMARY KEY, at {bigint} NOT NULL)",
)

TABLES = ("pl_timeline",)

#: Up to this many events are indexed with one statement (a command's events).
_ONE_STATEMENT = 16


def last_time(c: Cursor, d: Dialect) -> int:
    """The time of the newest indexed position (0 for an empty log)."""
    c.execute(d.q("SELECT at FROM {t}pl_timeline ORDER BY position DESC LIMIT 1"))
    row = c.fetchone()
    return int(row["at"]) if row else 0


def apply_many(c: Cursor, d: Dialect, events: Sequence[tuple[int, Any]]) -> None:
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
    # maximum taken by the statement itself (one statement, no read first).
    running, params = 0, []
    for pos, event in events:
        running = max(running, datetime_to_micros(event.timestamp))
        params += [pos, running]
    c.execute(_insert_sql(d, len(events)), tuple(params))


@functools.cache
def _insert_sql(d: Dialect, count: int) -> str:
    """Index ``count`` (position, running time) pairs, each time raised to the
    stored maximum (a scalar subquery on the newest row: the cheapest form; a
    join against a ``VALUES`` table costs SQLite several times more)."""
    greatest = "GREATEST" if d.name == "postgresql" else "max"
    newest = "COALESCE((SELECT at FROM {t}pl_timeline ORDER BY position DESC LIMIT 1), 0)"
    one = f"(CAST(? AS {{bigint}}), {greatest}(CAST(? AS {{bigint}}), {newest}))"
    return d.q(f"INSERT INTO {{t}}pl_timeline (position, at) VALUES {', '.join([one] * count)}")


#: The middle of the bisection's range, and the time indexed at the newest position
#: at or before it (NULL if none).
_MID = "(lo + hi + 1) / 2"
_AT_OR_BEFORE = (
    f"(SELECT at FROM {{t}}pl_timeline WHERE position <= {_MID} ORDER BY position DESC LIMIT 1)"
)

#: ``at`` never falls as the position rises, so the newest position recorded at or
#: before an instant is found by bisecting positions, each step one key lookup:
#: ``hi`` only moves below a middle whose time is after the instant, ``lo`` only up
#: to one whose time is not (or that has no position at or before it).
_POSITION_AT = (
    "WITH RECURSIVE s(lo, hi) AS ("
    "SELECT CAST(0 AS {bigint}), CAST(COALESCE(MAX(position), 0) AS {bigint}) "
    "FROM {t}pl_timeline "
    "UNION ALL "
    f"SELECT CASE WHEN {_AT_OR_BEFORE} > ? THEN lo ELSE {_MID} END, "
    f"CASE WHEN {_AT_OR_BEFORE} > ? THEN {_MID} - 1 ELSE hi END "
    "FROM s WHERE lo < hi) "
    "SELECT COALESCE((SELECT MAX(position) FROM {t}pl_timeline WHERE position <= s.lo), 0) "
    "AS p FROM s WHERE s.lo >= s.hi"
)


def position_at(c: Cursor, d: Dialect, at: int) -> int:
    """The newest position recorded at or before ``at`` (0 if none)."""
    c.execute(d.q(_POSITION_AT), (at, at))
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
    # A transaction of several appends has a row for each of its later appends,
    # all from its first position: the widest is the transaction.
    c.execute(
        d.q(
            "SELECT MAX(last_pos) AS last_pos FROM {t}pl_commits "
            "WHERE first_pos <= ? AND last_pos >= ?"
        ),
        (position, position),
    )
    row = c.fetchone()
    return int(row["last_pos"]) if row and row["last_pos"] is not None else position
