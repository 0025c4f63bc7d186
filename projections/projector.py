"""Runs every view over the event log, inside the writer's transaction or after it.

The ledger's recorder calls :meth:`Projector.apply` in the same database
transaction that appends the events, so in normal operation the views never lag
the log and every process sees them consistent. If a view is behind (events
written while it was stopped, a dropped view, a crash of an older version), the
next transaction first catches it up from its tracking position; opening the
ledger does the same. Each view's rows and tracking position are written in one
transaction, so nothing is applied twice or skipped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from eventsourcing.persistence import Mapper, Notification, PersistenceError

from ledger.errors import CorruptEventError, LedgerError
from ledger.shapes import check_event_shape
from projections import access, delivery, timeline, validity
from projections.base import (
    TRACKING_DDL,
    Cursor,
    Dialect,
    fetch_in_chunks,
    rows_digest,
)

VIEWS: tuple[ModuleType, ...] = (validity, delivery, access)

#: The layout of the view tables, kept in ``pl_tracking`` under ``LAYOUT_KEY``. Views
#: built with another layout (a ledger written by 0.1.0 has none recorded) are
#: dropped and rebuilt from the log when the ledger opens; stored events never change.
LAYOUT = 2
LAYOUT_KEY = "#layout"

#: Reads stored events after a position inside an open transaction:
#: ``(cursor, after, limit) -> notifications``.
NotificationReader = Callable[[Cursor, int, int], Sequence[Notification]]


@dataclass
class Projector:
    """Applies events to every view and keeps their tracking positions."""

    dialect: Dialect
    reader: NotificationReader
    mapper: Mapper[Any] | None = None
    #: Checks stored events against what the ledger appended before they are
    #: applied (raises ``CorruptEventError``), so a row slipped into the table
    #: behind the ledger's back never reaches the views.
    vouch: Callable[[Cursor, Sequence[Notification]], None] | None = None
    enabled: bool = True
    batch: int = 1000
    _names: tuple[str, ...] = field(default=(), init=False)

    @property
    def view_names(self) -> tuple[str, ...]:
        """Names of the tracked views (``validity``, ``delivery``, ``access``, ``timeline``)."""
        return (*(v.VIEW for v in VIEWS), timeline.VIEW)

    @property
    def tables(self) -> tuple[str, ...]:
        """Every view table (the snapshot store is primary data, not a view)."""
        return (*(t for v in VIEWS for t in v.TABLES), *timeline.TABLES)

    def create_tables(self, c: Cursor) -> None:
        """Create the view tables if missing."""
        for statement in (*TRACKING_DDL, *(s for v in VIEWS for s in v.DDL), *timeline.DDL):
            c.execute(self.dialect.q(statement))

    def drop_tables(self, c: Cursor) -> None:
        """Drop every view table and forget the tracking positions."""
        for table in self.tables:
            c.execute(self.dialect.q(f"DROP TABLE IF EXISTS {{t}}{table}"))
        c.execute(self.dialect.q("DROP TABLE IF EXISTS {t}pl_tracking"))

    def layout(self, c: Cursor) -> int | None:
        """The layout the view tables were built with (None: not recorded)."""
        c.execute(self.dialect.q("SELECT position FROM {t}pl_tracking WHERE view=?"), (LAYOUT_KEY,))
        row = c.fetchone()
        return None if row is None else int(row["position"])

    def reset(self, c: Cursor) -> None:
        """Drop every view table and create empty ones in the current layout."""
        self.drop_tables(c)
        self.create_tables(c)
        c.execute(
            self.dialect.q("INSERT INTO {t}pl_tracking (view, position) VALUES (?, ?)"),
            (LAYOUT_KEY, LAYOUT),
        )

    def replay(self, c: Cursor, progress: Callable[[int], None] | None = None) -> int:
        """Reset the views and apply the whole log to them; returns the event count.
        ``progress`` is called with the log position reached after each batch."""
        self.reset(c)
        applied = 0
        for batch in self.pending(c):
            self._apply(c, batch)
            applied += len(batch)
            if progress is not None:
                progress(batch[-1][0])
        return applied

    def tracking_map(self, c: Cursor) -> dict[str, int]:
        """Each view's tracking position (0 for a view that has applied nothing)."""
        c.execute(self.dialect.q("SELECT view, position FROM {t}pl_tracking"))
        found = {str(r["view"]): int(r["position"]) for r in c.fetchall()}
        return {name: found.get(name, 0) for name in self.view_names}

    def tracking(self, c: Cursor) -> int:
        """The lowest tracking position among the views (what is fully applied)."""
        return min(self.tracking_map(c).values())

    def decode(self, notification: Notification) -> Any:
        """The domain event of a stored notification; corrupt bytes raise CorruptEventError."""
        assert self.mapper is not None
        try:
            event = self.mapper.to_domain_event(notification)
            check_event_shape(event)
            return event
        except Exception as exc:
            raise CorruptEventError(
                f"stored event at position {notification.id} "
                f"({notification.topic}) cannot be decoded: {exc}"
            ) from None

    def apply(
        self, c: Cursor, events: Sequence[tuple[int, Any]], done: dict[str, int] | None = None
    ) -> None:
        """Apply new (position, event) pairs in the writer's transaction.

        Views that are behind are caught up first (one query when they are not;
        none when the caller passes the tracking positions it just read as ``done``).
        """
        if not self.enabled or not events:
            return
        if done is None:
            done = self.tracking_map(c)
        if min(done.values()) < events[0][0] - 1 and self.catch_up(c, upto=events[0][0] - 1):
            done = self.tracking_map(c)
        self._apply(c, events, done)

    def _apply(
        self, c: Cursor, events: Sequence[tuple[int, Any]], done: dict[str, int] | None = None
    ) -> None:
        try:
            self._apply_views(c, events, self.tracking_map(c) if done is None else done)
        except (LedgerError, PersistenceError, sqlite3.Error):
            raise  # a database failure (a full disk, a lost connection) is not the event's
        except Exception as exc:
            if type(exc).__module__.split(".", 1)[0] == "psycopg":
                raise
            first, last = events[0][0], events[-1][0]
            where = f"position {first}" if first == last else f"positions {first}-{last}"
            raise CorruptEventError(
                f"stored events at {where} cannot be applied to the views: {exc!r}"
            ) from None

    def _apply_views(
        self, c: Cursor, events: Sequence[tuple[int, Any]], done: dict[str, int]
    ) -> None:
        d = self.dialect
        last = events[-1][0]
        for view in VIEWS:
            todo = [(p, e) for p, e in events if p > done[view.VIEW]]
            many = getattr(view, "apply_many", None)
            if many is not None:
                many(c, d, todo)
            else:
                for pos, event in todo:
                    view.apply(c, d, pos, event)
        timeline.apply_many(c, d, [(p, e) for p, e in events if p > done[timeline.VIEW]])
        moved = [name for name, position in done.items() if last > position]
        if moved:
            c.execute(
                d.q(
                    "INSERT INTO {t}pl_tracking (view, position) VALUES "
                    + ", ".join("(?, ?)" for _ in moved)
                    + " ON CONFLICT (view) DO UPDATE SET position=excluded.position"
                ),
                tuple(value for name in moved for value in (name, last)),
            )

    def pending(self, c: Cursor, upto: int | None = None) -> Iterator[list[tuple[int, Any]]]:
        """Batches of decoded events after the views' tracking position."""
        after = self.tracking(c)
        if upto is not None and after >= upto:
            return
        while True:
            notes = self.reader(c, after, self.batch)
            notes = [n for n in notes if upto is None or n.id <= upto]
            if not notes:
                return
            if self.vouch is not None:
                self.vouch(c, notes)
            yield [(n.id, self.decode(n)) for n in notes]
            after = notes[-1].id

    def catch_up(self, c: Cursor, upto: int | None = None) -> int:
        """Apply every stored event the views have not seen (up to ``upto``)."""
        count = 0
        if not self.enabled:
            return count
        for batch in self.pending(c, upto):
            self._apply(c, batch)
            count += len(batch)
        return count

    def digest(self, c: Cursor) -> str:
        """Order-independent digest of every view row (hex)."""
        total = 0
        for table in (*self.tables, "pl_tracking"):
            c.execute(self.dialect.q(f"SELECT * FROM {{t}}{table}"))
            rows = ([table, *_values(row)] for row in fetch_in_chunks(c))
            total = (total + rows_digest(rows)) % (1 << 256)
        return f"{total:064x}"


def _values(row: Any) -> tuple[Any, ...]:
    # sqlite3.Row iterates values; psycopg's dict rows iterate keys.
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)
