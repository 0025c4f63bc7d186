"""Runs every view over the event log, inside the writer's transaction or after it.

The ledger's recorder calls :meth:`Projector.apply` in the same database
transaction that appends the events, so in normal operation the views never lag
the log and every process sees them consistent. If a view is behind (events
written while it was stopped, a dropped view, a crash of an older version), the
next transaction first catches it up from its tracking position; opening the
ledger does the same. Every view applies every event in the transaction that
indexes the event's time (``pl_timeline``), so the newest indexed position is
how far all of them got: nothing is applied twice or skipped, and a command
writes no tracking row of its own.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Mapper, Notification, PersistenceError
from eventsourcing.utils import resolve_topic

from ledger import gc_pause, stored
from ledger.domain import Record, uuid_of_hex
from ledger.errors import CorruptEventError, LedgerError, StorageError
from ledger.serialization import SALT, unpack
from ledger.shapes import check_event_shape
from projections import access, delivery, record_table, timeline, validity
from projections.base import (
    TRACKING_DDL,
    Cursor,
    Dialect,
    fetch_in_chunks,
    refresh_statistics,
    rows_digest,
)

VIEWS: tuple[ModuleType, ...] = (validity, delivery, access)
#: Every view table (the snapshot store is primary data, not a view).
VIEW_TABLES: tuple[str, ...] = (*(t for v in VIEWS for t in v.TABLES), *timeline.TABLES)

#: The layout of the view tables, kept in ``pl_tracking`` under ``LAYOUT_KEY``. Views
#: built with another layout (a ledger written by 0.1.0 has none recorded) are
#: dropped and rebuilt from the log when the ledger opens; stored events never change.
LAYOUT = 15
#: The layout of PostgreSQL's views: 15 changed SQLite's indexes alone (a
#: PostgreSQL ledger of layout 14 kept its views), and 16 and 17 PostgreSQL's alone
#: (SQLite's views stay at 15): the next change to both is 18. Development builds
#: wrote 15 on PostgreSQL for views like 14's, and 16 for 17's but three indexes:
#: rebuilt, as earlier ones.
POSTGRES_LAYOUT = 17
#: Tables of earlier layouts, dropped with the views (4 keeps no map from aggregate
#: ids to record ids: a record's proposal, found by the events' key, holds it; 5
#: indexes a scope's listing by the id each record was proposed as; 6 a claim's
#: live rows; 7 keeps each record's aggregate id, which is no longer a function
#: of its record id alone; 8 lists ACCEPTED and other current rows from two
#: indexes, and expiring ACCEPTED ones from a third; 9 indexes a claim's live
#: rows by status, so a read passes over none of its candidates; 10 lists a
#: scope's current rows by status and kind, so a page of a kind or a status few
#: rows have passes over none of the others, and orders a claim's live rows of a
#: status and kind by when they were proposed, so a put finds the newest at once;
#: 11 keeps values longer than ``record_table.INLINE_VALUE`` once per record in
#: ``pl_values``; 12 indexes a claim's rows withdrawn for good, and both
#: indexes of a claim's rows cover what a bounded explanation picks and counts;
#: 13 keeps a claim's statements off the indexes of a whole scope, whatever the
#: planner's statistics, ``record_table.SCOPE_WALK``); 14 keeps a row's long lists
#: and mappings (``record_table.SPILLED``) in ``pl_spilled``; 15 holds each
#: listed row's expiry, and what the listing indexes' conditions test, in their
#: entries on SQLite: ``record_table.COVERED``; 16 keeps, on PostgreSQL, a
#: claim's statements about its current rows off the index of all its versions,
#: whatever the planner's statistics: ``record_table.CLAIM_WALK``; 17 keeps a
#: page of a status or kind off the scope's listing indexes,
#: ``record_table.FILTER_WALK``, holds the status in the claim index, and orders
#: a record's deliveries by position in their index, ``Dialect.delivered``).
RETIRED = ("pl_record_ids",)
LAYOUT_KEY = "#layout"

#: How far the views got (NULL before the first event): see the module docstring.
APPLIED_SQL = "SELECT MAX(position) AS p FROM {t}pl_timeline"

#: Reads stored events after a position inside an open transaction:
#: ``(cursor, after, limit) -> notifications``.
NotificationReader = Callable[[Cursor, int, int], Sequence[Notification]]

#: A stored event as a plain tuple: (position, originator id — a ``UUID`` or its
#: hex —, originator version, topic, state).
Row = tuple[int, Any, int, str, bytes]
#: Reads stored events after a position as :data:`Row` tuples: ``(cursor, after,
#: limit) -> rows``.
RowReader = Callable[[Cursor, int, int], Sequence[Row]]
#: Reads the record ids of aggregates from their stored proposals inside an open
#: transaction: ``(cursor, aggregate ids) -> {aggregate id hex: record id}``.
RecordIdReader = Callable[[Cursor, Collection[UUID]], dict[str, str]]

#: Events of a record after its proposal: the views find the record they belong
#: to by their aggregate id.
_LATER = frozenset(
    (
        Record.Accepted,
        Record.Rejected,
        Record.Revoked,
        Record.MarkedStale,
        Record.Superseded,
        Record.Revalidated,
        Record.Delivered,
        Record.CorrectionIssued,
    )
)


#: Says, once, that opening a ledger rebuilt views an earlier version built.
_LOG = logging.getLogger("provledger.views")


def note_migrated(events: int, layout: int, seconds: float, built: int | None = None) -> None:
    """Say (a warning on the ``provledger.views`` logger, which a program without
    logging set up prints on standard error) that the views of a ledger an earlier
    version wrote were rebuilt in this version's ``layout``: the stored events are
    unchanged, but the earlier version cannot open the ledger any more. Views a
    later version built (``built`` above ``layout``: an explicit rebuild) are said
    to be that version's, which rebuilds them again when it opens the ledger."""
    if later_layout(built, layout):
        _LOG.warning(
            "the views of this ledger were built by a later version of provledger "
            "(layout %d): rebuilt from its %d stored events in layout %d in %.1f s (the "
            "events are unchanged; that version rebuilds them in its own layout when it "
            "next opens the ledger)",
            built,
            events,
            layout,
            seconds,
        )
        return
    _LOG.warning(
        "the views of this ledger were built by an earlier version of provledger: "
        "rebuilt from its %d stored events in layout %d in %.1f s (the events are "
        "unchanged; the earlier version can no longer open this ledger: go back with "
        "a backup made before)",
        events,
        layout,
        seconds,
    )


def later_layout(layout: int | None, current: int) -> bool:
    """Whether views of ``layout`` were built by a version later than the one
    building ``current`` (a higher layout)."""
    return layout is not None and layout > current


def needs_migration(layout: int | None, current: int, *, later: bool, url: str) -> bool:
    """Whether views built with ``layout`` must be rebuilt in this version's
    ``current`` one (the ledger at ``url``).

    Views a later version built (a higher layout) are refused unless ``later``
    (an explicit rebuild): rebuilt here, that version would rebuild them again on
    its next open, each taking the other for an earlier one.

    Raises:
        StorageError: the views are a later version's and not ``later``.
    """
    if layout == current:
        return False
    if later_layout(layout, current) and not later:
        raise StorageError(
            f"ledger {url!r}: its views were built by a later version of provledger "
            f"(layout {layout}; this version builds layout {current}): open it with that "
            "version or a later one; this one would rebuild the views in its own layout, "
            "and that version again in its own (the log is unchanged; `provledger "
            "verify` checks it as it is, and `provledger rebuild` rebuilds the views "
            "for this version if you mean to go back)"
        )
    return True


def layout_of(d: Dialect) -> int:
    """The layout this version builds the views in on ``d``'s backend."""
    return POSTGRES_LAYOUT if d.name == "postgresql" else LAYOUT


@dataclass
class Projector:
    """Applies events to every view, all of them in step."""

    dialect: Dialect
    reader: NotificationReader
    mapper: Mapper[Any] | None = None
    #: Checks stored events against what the ledger appended before they are
    #: applied (raises ``CorruptEventError``), so a row slipped into the table
    #: behind the ledger's back never reaches the views.
    #: Given the position the events were read after, it also raises if an event
    #: appended since is gone; ``vouch_end``, if one is gone after the last read.
    vouch: Callable[[Cursor, Sequence[Notification], int], None] | None = None
    vouch_end: Callable[[Cursor, int], None] | None = None
    #: The rebuild's reader and check of plain rows (``reader`` and ``vouch``
    #: otherwise): no ``Notification`` per event.
    row_reader: RowReader | None = None
    vouch_rows: Callable[[Cursor, Sequence[Row], int], None] | None = None
    #: Where the record id of an aggregate is found (its stored proposal).
    record_ids: RecordIdReader | None = None
    enabled: bool = True
    batch: int = 1000
    _names: tuple[str, ...] = field(default=(), init=False)
    #: Per open write transaction (by cursor id): current view rows its command read.
    _known: dict[int, Mapping[str, Any]] = field(default_factory=dict, init=False)

    @property
    def current_layout(self) -> int:
        """The layout this version builds the views in (:func:`layout_of`)."""
        return layout_of(self.dialect)

    @contextmanager
    def knowing(self, c: Cursor, rows: Mapping[str, Any] | None) -> Iterator[None]:
        """While inside, events applied with ``c`` start from ``rows`` (current
        validity rows read in ``c``'s transaction, by aggregate id in hex) instead
        of reading them again."""
        if not rows:
            yield
            return
        self._known[id(c)] = rows
        try:
            yield
        finally:
            del self._known[id(c)]

    @property
    def view_names(self) -> tuple[str, ...]:
        """Names of the tracked views (``validity``, ``delivery``, ``access``, ``timeline``)."""
        return (*(v.VIEW for v in VIEWS), timeline.VIEW)

    @property
    def tables(self) -> tuple[str, ...]:
        """Every view table (:data:`VIEW_TABLES`)."""
        return VIEW_TABLES

    def create_tables(self, c: Cursor, indexes: bool = True) -> None:
        """Create the view tables if missing (and every index, unless ``indexes``
        is false: then :meth:`create_indexes` adds the ones a replay never reads)."""
        for statement in (*TRACKING_DDL, *(s for v in VIEWS for s in v.DDL), *timeline.DDL):
            c.execute(self.dialect.q(statement))
        if indexes:
            self.create_indexes(c)

    def create_indexes(self, c: Cursor) -> None:
        """The indexes only reads use, built over the rows already in."""
        d = self.dialect
        listing, qualified = d.listing_order("record_id"), d.is_qualified("record_id")
        for statement in record_table.AFTER_LOAD_DDL:
            statement = statement.replace("{listing}", listing).replace("{qualified}", qualified)
            statement = statement.replace("{live}", record_table.LIVE_FILTER)
            statement = statement.replace("{withdrawn}", record_table.withdrawn_filter())
            statement = statement.replace("{claim_index}", record_table.claim_index(d))
            statement = statement.replace("{filter_walk}", record_table.filter_walk(d))
            c.execute(d.q(record_table.held(statement, d)))

    def drop_tables(self, c: Cursor) -> None:
        """Drop every view table (and with the time index, the views' position)."""
        for table in (*self.tables, *RETIRED):
            c.execute(self.dialect.q(f"DROP TABLE IF EXISTS {{t}}{table}"))
        c.execute(self.dialect.q("DROP TABLE IF EXISTS {t}pl_tracking"))

    def layout(self, c: Cursor) -> int | None:
        """The layout the view tables were built with (None: not recorded)."""
        c.execute(self.dialect.q("SELECT position FROM {t}pl_tracking WHERE view=?"), (LAYOUT_KEY,))
        row = c.fetchone()
        return None if row is None else int(row["position"])

    def reset(self, c: Cursor, indexes: bool = True) -> None:
        """Empty views in the current layout: every view table dropped and created
        anew (without the read-only indexes unless ``indexes``), or, where the
        dialect says so (:attr:`Dialect.table_exists`) and the layout holds, every
        row deleted, so that a read transaction begun before reads the old rows
        until this one commits, and the new ones after."""
        if self._in_layout(c):
            for table in (*self.tables, "pl_tracking"):
                c.execute(self.dialect.q(f"DELETE FROM {{t}}{table}"))
            for table in RETIRED:
                c.execute(self.dialect.q(f"DROP TABLE IF EXISTS {{t}}{table}"))
        else:
            self.drop_tables(c)
            self.create_tables(c, indexes)
        c.execute(
            self.dialect.q("INSERT INTO {t}pl_tracking (view, position) VALUES (?, ?)"),
            (LAYOUT_KEY, self.current_layout),
        )

    def _in_layout(self, c: Cursor) -> bool:
        """Whether the views are emptied in place (see :meth:`reset`): the dialect
        asks for it and every view table is there, in the current layout."""
        exists = self.dialect.table_exists
        if exists is None:
            return False
        for table in (*self.tables, "pl_tracking"):
            c.execute(exists, (self.dialect.q(f"{{t}}{table}"),))
            if not c.fetchone()["e"]:
                return False
        return self.layout(c) == self.current_layout

    def has_table(self, c: Cursor, table: str) -> bool:
        """Whether the view table ``table`` is there."""
        exists = self.dialect.table_exists
        if exists is None:  # SQLite
            c.execute("SELECT 1 AS e FROM sqlite_master WHERE type='table' AND name=?", (table,))
            return c.fetchone() is not None
        c.execute(exists, (self.dialect.q(f"{{t}}{table}"),))
        return bool(c.fetchone()["e"])

    def replay(self, c: Cursor, progress: Callable[[int], None] | None = None) -> int:
        """Reset the views and apply the whole log to them; returns the event count.
        ``progress`` is called with the log position reached after each batch.
        Automatic garbage collection is paused meanwhile (:mod:`ledger.gc_pause`)."""
        self.reset(c, indexes=False)
        applied = 0
        streamed = self.row_reader is not None and self.mapper is not None
        with gc_pause.paused():
            for batch in self.streamed(c) if streamed else self.pending(c):
                self._apply(c, batch)
                applied += len(batch)
                if progress is not None:
                    progress(batch[-1][0])
        self.create_indexes(c)
        refresh_statistics(c, self.dialect)
        return applied

    def tracking_map(self, c: Cursor) -> dict[str, int]:
        """Each view's tracking position (0 before the first event): the newest
        position in the time index, the same for every view."""
        c.execute(self.dialect.q(APPLIED_SQL))
        row = c.fetchone()
        return dict.fromkeys(self.view_names, int(row["p"] or 0) if row else 0)

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

    def decode_any(self, row: Row) -> Any:
        """The domain event of a stored row (:func:`decode_row`, or the mapper's
        decoding when it does more than transcode)."""
        assert self.mapper is not None
        if stored.plain(self.mapper):
            return decode_row(row)
        position, originator_id, version, topic, state = row
        oid = originator_id if isinstance(originator_id, UUID) else uuid_of_hex(originator_id)
        return self.decode(
            Notification(
                id=position,
                originator_id=oid,
                originator_version=version,
                topic=topic,
                state=state,
            )
        )

    def record_ids_of(
        self, c: Cursor, events: Sequence[tuple[int, Any]], known: Mapping[str, Any] | None
    ) -> dict[str, str]:
        """The record id of every record event among ``events``, by aggregate id
        (hex): from the proposals among them, ``known`` rows, then the stored
        proposals of the rest (one query). Aggregates with no proposal are left out."""
        rid_of = {e.originator_id.hex: e.record_id for _, e in events if type(e) is _PROPOSED}
        if known:
            rid_of.update((agg, row["record_id"]) for agg, row in known.items())
        missing = {
            e.originator_id
            for _, e in events
            if type(e) in _LATER and e.originator_id.hex not in rid_of
        }
        if missing:
            assert self.record_ids is not None, "the projector has no record id reader"
            rid_of.update(self.record_ids(c, missing))
        return rid_of

    def apply(
        self, c: Cursor, events: Sequence[tuple[int, Any]], done: dict[str, int] | None = None
    ) -> None:
        """Apply new (position, event) pairs in the writer's transaction.

        Views that are behind are caught up first (one query when they are not;
        none when the caller passes the tracking positions it just read as ``done``).
        """
        if not self.enabled or not events:
            return
        known = self._known.get(id(c))
        if done is None:
            done = self.tracking_map(c)
        if min(done.values()) < events[0][0] - 1 and self.catch_up(c, upto=events[0][0] - 1):
            done = self.tracking_map(c)
            known = None  # read before the catch-up: no longer current
        self._apply(c, events, done, known)

    def _apply(
        self,
        c: Cursor,
        events: Sequence[tuple[int, Any]],
        done: dict[str, int] | None = None,
        known: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            self._apply_views(c, events, self.tracking_map(c) if done is None else done, known)
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
        self,
        c: Cursor,
        events: Sequence[tuple[int, Any]],
        done: dict[str, int],
        known: Mapping[str, Any] | None = None,
    ) -> None:
        d = self.dialect
        first = events[0][0]
        # Views in step (every one has applied the event just before these) take
        # the events as they are; any that are ahead skip what they have applied.
        in_step = all(position == first - 1 for position in done.values())

        def todo(view: str) -> Sequence[tuple[int, Any]]:
            return events if in_step else [(p, e) for p, e in events if p > done[view]]

        rid_of = self.record_ids_of(c, events, known)
        validity.apply_many(c, d, todo(validity.VIEW), rid_of, known)
        for pos, event in todo(delivery.VIEW):
            if type(event) in delivery.EVENTS:
                delivery.apply(c, d, pos, event, rid_of)
        for pos, event in todo(access.VIEW):
            if type(event) in access.EVENTS:
                access.apply(c, d, pos, event)
        timeline.apply_many(c, d, todo(timeline.VIEW))

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
                self.vouch(c, notes, after)
            yield [(n.id, self.decode(n)) for n in notes]
            after = notes[-1].id

    def streamed(self, c: Cursor) -> Iterator[list[tuple[int, Any]]]:
        """Batches of the whole log decoded straight from plain rows (the rebuild):
        each state unpacked by the ledger's transcoder and upcast as the mapper
        does, without a ``Notification`` or the mapper per event; shape-checked.
        Falls back to the mapper's decoding if it does more than transcode."""
        assert self.row_reader is not None and self.mapper is not None
        if not stored.plain(self.mapper):
            yield from self.pending(c)
            if self.vouch_end is not None:  # the whole log: none gone at its end
                self.vouch_end(c, self.tracking(c))
            return
        after = 0
        while True:
            rows = self.row_reader(c, after, self.batch)
            if not rows:
                if self.vouch_end is not None:  # the whole log: none gone at its end
                    self.vouch_end(c, after)
                return
            if self.vouch_rows is not None:
                self.vouch_rows(c, rows, after)
            yield [(row[0], decode_row(row)) for row in rows]
            after = rows[-1][0]

    def catch_up(self, c: Cursor, upto: int | None = None) -> int:
        """Apply every stored event the views have not seen (up to ``upto``)."""
        count = 0
        if not self.enabled:
            return count
        for batch in self.pending(c, upto):
            try:
                self._apply(c, batch)
            except Exception as exc:  # SQLite's, or psycopg's (unique_violation)
                if (
                    isinstance(exc, sqlite3.IntegrityError)
                    or getattr(exc, "sqlstate", "") == "23505"
                ):
                    raise _applied_already(batch[0][0]) from None
                raise
            count += len(batch)
        return count

    def digest(self, c: Cursor) -> str:
        """Order-independent digest of every view row (hex); a table that is not
        there counts as a row of its own (a view dropped outside the ledger differs
        from an empty one, and ``rebuild`` makes it anew)."""
        total = 0
        for table in (*self.tables, "pl_tracking"):
            if not self.has_table(c, table):
                total = (total + rows_digest([[table, "(no such table)"]])) % (1 << 256)
                continue
            c.execute(self.dialect.q(f"SELECT * FROM {{t}}{table}"))
            rows = ([table, *_values(row)] for row in fetch_in_chunks(c))
            total = (total + rows_digest(rows)) % (1 << 256)
        return f"{total:064x}"


def decode_row(row: Row) -> Any:
    """The domain event of a stored row, as eventsourcing's mapper (with the
    ledger's transcoder only) decodes it: the class of its topic, its state
    unpacked and upcast to the class's version, the originator fields added;
    shape-checked. Undecodable rows raise ``CorruptEventError``."""
    position, originator_id, version, topic, state = row
    try:
        cls = _event_class(topic)
        data = unpack(state)
        data.pop(SALT, None)
        data["originator_id"] = (
            originator_id if isinstance(originator_id, UUID) else uuid_of_hex(originator_id)
        )
        data["originator_version"] = version
        have, want = data.pop("class_version", 1), getattr(cls, "class_version", 1)
        while have < want:
            getattr(cls, f"upcast_v{have}_v{have + 1}")(data)
            have += 1
        event = object.__new__(cls)
        object.__setattr__(event, "__dict__", data)
        check_event_shape(event)
        return event
    except Exception as exc:
        raise CorruptEventError(
            f"stored event at position {position} ({topic}) cannot be decoded: {exc}"
        ) from None


_PROPOSED = Record.Proposed


@functools.lru_cache(maxsize=256)
def _event_class(topic: str) -> Any:
    return resolve_topic(topic)


def _values(row: Any) -> tuple[Any, ...]:
    # sqlite3.Row iterates values; psycopg's dict rows iterate keys.
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)


def _applied_already(position: int) -> CorruptEventError:
    """What a catch-up whose view rows clash with stored ones means: the views
    hold rows of events their time index says they have not applied, or an event
    repeats a key (a delivery's or a correction's id) an earlier one took; no
    command leaves either (events and view rows are written in one transaction)."""
    return CorruptEventError(
        f"the views already hold a row that an event from position {position} on writes: "
        "view rows were removed or altered behind the ledger's back, or a stored event "
        "repeats an id an earlier one took; nothing was written: `provledger verify` "
        "names which, and `provledger rebuild` rebuilds views that were altered"
    )
