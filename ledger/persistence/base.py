"""What every backend shares: the tables beside the events and the recorder mixin.

The recorders are eventsourcing's own, extended in one place: after the events
of a command are inserted, the same transaction applies them to every view,
writes their Merkle leaves and stores evidence snapshots. Either all of that
commits or none of it does.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import SimpleNamespace
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.persistence import Notification

from ledger.domain import Record, uuid_of_hex
from ledger.errors import CorruptEventError
from ledger.merkle import leaf_data, leaf_hash, leaf_hashes
from ledger.stored_types import READ_ERRORS, mistyped_event
from projections import delivery as delivery_view
from projections.base import Cursor, Dialect, Query, fetch_in_chunks, insert_rows, rows_in
from projections.projector import APPLIED_SQL, VIEW_TABLES, Projector, Row

#: Primary data beside the events (not views: never dropped by a rebuild): the
#: content-addressed evidence snapshots, and the boundaries of transactions that
#: appended more than one event, so an as-of position never lands inside one.
SNAPSHOT_DDL = (
    "CREATE TABLE IF NOT EXISTS {t}pl_snapshots ("
    "ref TEXT PRIMARY KEY, content {blob} NOT NULL, size {bigint} NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {t}pl_commits ("
    "last_pos {bigint} PRIMARY KEY, first_pos {bigint} NOT NULL)",
    "CREATE INDEX IF NOT EXISTS pl_commits_first ON {t}pl_commits (first_pos)",
    "CREATE TABLE IF NOT EXISTS {t}pl_merkle_leaves ("
    "position {bigint} PRIMARY KEY, leaf {blob} NOT NULL)",
)

#: Positions whose leaves' indexes one statement finds (``leaf_indexes``), and
#: the widths its statement is written for (a batch is padded to the next).
LEAF_BATCH = 512
LEAF_WIDTHS = (1, 8, 64, LEAF_BATCH)

#: Tables beside the events that must never change once written.
APPEND_ONLY = ("pl_commits", "pl_merkle_leaves")
#: The tables beside the events that hold primary data (a copy copies them row for row).
PRIMARY_TABLES = ("pl_merkle_leaves", "pl_commits", "pl_snapshots")
#: Every table a ledger of this version makes beside its events: primary data, the
#: views, the views' layout and position, and PostgreSQL's mark of a complete schema.
LEDGER_TABLES = frozenset((*PRIMARY_TABLES, *VIEW_TABLES, "pl_tracking", "pl_schema"))

#: A guard runs inside the command's transaction, after the views caught up and
#: before the command's own events are applied; it raises to refuse the command.
Guard = Callable[[Cursor], None]

T = TypeVar("T")

#: The topic of a record's first event.
PROPOSED_TOPIC = f"{Record.Proposed.__module__}:{Record.Proposed.__qualname__}"


def leaf_of(position: int, stored_event: Any) -> bytes:
    """The Merkle leaf of a stored event appended at ``position``."""
    e = stored_event
    return leaf_hash(leaf_data(position, e.originator_id, e.originator_version, e.topic, e.state))


def rows_of(notes: Iterable[Notification]) -> list[Row]:
    """Stored events as plain rows (position, originator id, version, topic, state)."""
    return [(n.id, n.originator_id, n.originator_version, n.topic, n.state) for n in notes]


def _skipped(notes: Sequence[Notification], version: int, name: str | None) -> str:
    """Why the events of record ``name`` (None: of an aggregate), read in version
    order, lack ``version``."""
    found = notes[version - 1]
    whose = f"aggregate {UUID(str(found.originator_id)).hex}" if name is None else repr(name)
    where = (
        f"before position {found.id}"
        if version == 1
        else f"between positions {notes[version - 2].id} and {found.id}"
    )
    return (
        f"the stored events of {whose} lack version {version} "
        f"({where}): an event was removed or changed after it was appended (run "
        "`provledger verify`)"
    )


def _gone_from(position: int, whose: str) -> str:
    """Why a delivery or correction the views hold of a record is not among its events."""
    return (
        f"the event at position {position}, a delivery or correction of {whose!r} the views "
        "hold, is not among its stored events: it was removed or changed after it was "
        "appended (run `provledger verify`)"
    )


def in_log(notes: list[Notification]) -> list[Notification]:
    """One aggregate's stored events, refused (``CorruptEventError``) if one sits
    below the log's first position: only a row written behind the ledger's back
    can be there, and its version would otherwise clash with the next command's."""
    for note in notes:
        if note.id < 1:
            raise CorruptEventError(
                f"stored event at position {note.id} ({note.topic}) was not appended by the "
                "ledger (log positions start at 1)"
            )
    return notes


class LedgerRecorderMixin:
    """What every backend's recorder adds to eventsourcing's: the ledger's
    transactions, and the work done in the transaction that appends events.

    Each backend module implements ``reading`` (one snapshot for several
    statements), ``statement`` (one statement, no transaction), ``writing`` (a
    write transaction), ``lock_for_write`` and ``insert_in`` (events inserted in
    the caller's write transaction, then views, leaves and snapshots).
    """

    projector: Projector
    dialect: Dialect
    #: Seconds a writer waits for another's lock before the database says it is
    #: busy (None: the backend reports no such wait); a command tried again after
    #: that stops being tried once this much time has passed since its first try.
    lock_wait: float | None = None

    def vouch(self, c: Cursor, notes: Sequence[Notification], after: int | None = None) -> None:
        """Raise ``CorruptEventError`` unless each stored event is byte for byte what
        the ledger appended (its Merkle leaf, written in the same transaction);
        with ``after`` (``notes`` are every stored event after that position, up to
        the last of them), also if an event it appended among them is gone."""
        self.vouch_rows(c, rows_of(notes), after)

    def vouched_events(
        self,
        c: Cursor,
        originator_id: UUID,
        latest: int | None = None,
        name: str | None = None,
        key: str | None = None,
    ) -> list[Notification]:
        """Every stored event of one aggregate (``select_record_events``), each
        vouched for by its Merkle leaf (:meth:`vouch`): for what is shown of a
        record's history (audit, history, graphs), which must not show bytes
        altered behind the ledger's back, nor leave out an event removed.

        Its versions must run 1, 2, 3… with none missing; ``latest``, the log
        position of the event its view row was last changed by, must hold that
        event still; and with ``key`` (the record's), the deliveries and
        corrections the views hold of it must each be one of its events (an
        aggregate's last event removed, or moved to another aggregate, leaves no
        gap in its versions). ``CorruptEventError`` otherwise, naming the record
        ``name`` (else the aggregate's id). A ``SnapshotErased`` event, which no
        view records, removed from the end of a record's events is found by
        ``verify`` alone.
        """
        notes = self.select_record_events(c, originator_id)
        self.vouch(c, notes)
        for version, note in enumerate(notes, start=1):
            if note.originator_version != version:
                raise CorruptEventError(_skipped(notes, version, name))
        positions = {note.id for note in notes}
        if key is not None:
            for position in sorted(delivery_view.event_positions(c, self.dialect, key)):
                if position not in positions:
                    raise CorruptEventError(_gone_from(position, name or originator_id.hex))
        if latest is not None and latest not in positions:
            # Another aggregate's event may have changed the view row: it must be
            # there, as appended; a leaf without its row is an event gone.
            try:
                there = self.read_after(c, latest - 1, 1)[:1]
            except READ_ERRORS as exc:  # (SQLite: a value of a type never written)
                raise CorruptEventError(
                    f"stored event at position {latest} cannot be read as the ledger "
                    "appended it: it was changed after it was appended (run `provledger verify`)"
                ) from exc
            self.vouch(c, there, after=latest - 1)
            if not there or there[0].id != latest:
                self.vouch_end(c, latest - 1, latest)  # (names a leaf without its row)
                raise CorruptEventError(
                    f"the event at position {latest} is missing: the views were changed by "
                    "it, and its row is gone (run `provledger verify`)"
                )
        return notes

    def record_events(self, c: Cursor, row: Any, name: str) -> list[Notification]:
        """:meth:`vouched_events` of the record whose view row is ``row`` (its
        aggregate, the position the row is as of, its deliveries and corrections),
        refusals naming it ``name`` (as the caller gave or is shown it)."""
        oid = uuid_of_hex(row["agg_id"])
        return self.vouched_events(c, oid, int(row["from_pos"]), name, row["record_id"])

    def read_rows_after(self, c: Cursor, after: int, limit: int) -> list[Row]:
        """Stored events after ``after`` as plain rows (see ``projections.projector.Row``),
        read inside an open transaction."""
        return rows_of(self.read_after(c, after, limit))

    def read_after(self, c: Cursor, after: int, limit: int) -> list[Notification]:
        """Stored events after ``after``, read inside an open transaction."""
        raise NotImplementedError

    def select_record_events(
        self, c: Cursor, originator_id: UUID, after: int = 0
    ) -> list[Notification]:
        """Every stored event of one aggregate (of a version above ``after``) with
        its log position."""
        raise NotImplementedError

    def vouch_rows(self, c: Cursor, rows: Sequence[Row], after: int | None = None) -> None:
        """:meth:`vouch` for plain rows (with ``after``: every stored event after
        that position, up to the last of them)."""
        problem = self.rows_problem(c, rows, after)
        if problem is not None:
            raise CorruptEventError(problem[1])

    def vouch_problem(
        self, c: Cursor, notes: Sequence[Notification], after: int | None = None
    ) -> tuple[int, str] | None:
        """The first position among ``notes`` (with ``after``: among every stored
        event after that position, up to the last of them) that :meth:`vouch`
        refuses, and why; None if it refuses none. For what shows the events before
        it and then refuses."""
        return self.rows_problem(c, rows_of(notes), after)

    def rows_problem(
        self, c: Cursor, rows: Sequence[Row], after: int | None = None
    ) -> tuple[int, str] | None:
        """:meth:`vouch_problem` of plain rows."""
        if not rows:
            return None
        last = rows[-1][0]
        if after is None:
            # One record's events lie anywhere in the log: their own leaves, not
            # every leaf between its first event and its last.
            select = "SELECT position, leaf FROM {{t}}pl_merkle_leaves WHERE position IN ({marks})"
            found = rows_in(c, self.dialect, select, (row[0] for row in rows))
        else:
            c.execute(
                self.dialect.q(
                    "SELECT position, leaf FROM {t}pl_merkle_leaves WHERE position >= ? "
                    "AND position <= ?"
                ),
                (after + 1, last),
            )
            found = iter(c.fetchall())
        leaves = {int(r["position"]): bytes(r["leaf"]) for r in found}
        # Rows read after a position are every event since (a record's events, read
        # without it, are not): a leaf among them without its row is a row gone.
        gone = [] if after is None else sorted(set(leaves).difference(row[0] for row in rows))
        problems = [(gone[0], _gone(gone[0]))] if gone else []
        for index, (position, _, version, topic, state) in enumerate(rows):
            odd = mistyped_event(
                SimpleNamespace(id=position, originator_version=version, topic=topic, state=state)
            )
            if odd is not None:  # (its leaf cannot even be computed)
                problems.append((position, odd))
                rows = rows[:index]
                break
        for (position, *_), leaf in zip(rows, leaf_hashes(rows), strict=True):
            stored = leaves.get(position)
            if stored != leaf:
                why = "was not appended by the ledger" if stored is None else "was altered"
                problems.append((position, f"stored event at position {position} {why}"))
                break
        return min(problems) if problems else None

    def vouch_end(self, c: Cursor, after: int, upto: int | None = None) -> None:
        """Raise ``CorruptEventError`` if an event the ledger appended after position
        ``after``, the last read (and up to ``upto``, if given), is gone (its
        Merkle leaf is there)."""
        c.execute(
            self.dialect.q(
                "SELECT MIN(position) AS p FROM {t}pl_merkle_leaves WHERE position > ? "
                "AND position <= ?"
            ),
            (after, (1 << 62) if upto is None else upto),
        )
        row = c.fetchone()
        if row is not None and row["p"] is not None:
            raise CorruptEventError(_gone(int(row["p"])))

    def lock_for_write(self, c: Cursor, ahead: Query | None = None) -> list[Any] | None:
        """Take the writers' lock in an open transaction (before reading what to
        write). ``ahead``: a query the command will make first, which a backend
        that pays a round trip per answer sends with the lock and answers here (its
        rows); None when it did not (the command then runs it itself)."""
        raise NotImplementedError

    def others_wrote(self, c: Cursor) -> bool:
        """Whether another connection may have committed since this recorder's
        previous write transaction (asked first in a write transaction, under the
        writers' lock). True whenever the backend cannot tell: what the engine
        remembers of its own writes is then read again."""
        del c
        return True

    def tracking_and_newest(self, c: Cursor) -> tuple[dict[str, int], int]:
        """In one statement: each view's tracking position and the newest log position."""
        c.execute(self.tracking_statement())
        return self.tracking_of(c.fetchone())

    def tracking_statement(self) -> str:
        """The statement :meth:`tracking_and_newest` runs (see :meth:`tracking_of`)."""
        return self.dialect.q(
            f"SELECT ({APPLIED_SQL}) AS done, (SELECT MAX({self.position_column}) "
            f"FROM {self.events_table}) AS newest"
        )

    def tracking_of(self, row: Any) -> tuple[dict[str, int], int]:
        """:meth:`tracking_and_newest`'s answer from the row of its statement."""
        done = dict.fromkeys(self.projector.view_names, int(row["done"] or 0))
        return done, int(row["newest"] or 0)

    #: The column holding an event's log position.
    position_column = "notification_id"

    def reading(self) -> AbstractContextManager[Cursor]:
        """A read transaction: every statement sees one snapshot; nothing is written."""
        raise NotImplementedError

    def statement(self) -> AbstractContextManager[Cursor]:
        """A cursor outside any explicit transaction, for a read that is one statement."""
        raise NotImplementedError

    def query(self, fetch: Callable[[Cursor], T]) -> T:
        """What ``fetch`` reads with a cursor of :meth:`statement` (a read that is
        one statement and fetches all its rows)."""
        with self.statement() as c:
            return fetch(c)

    def writing(self) -> AbstractContextManager[Cursor]:
        """A write transaction, committed when the block ends without an exception."""
        raise NotImplementedError

    def replaying(self, c: Cursor) -> AbstractContextManager[None]:
        """Around a replay of the whole log in the write transaction of ``c``
        (rebuild, view migration): what the backend sets for it and restores after.
        Nothing by default."""
        return nullcontext()

    def insert_in(
        self,
        c: Cursor,
        stored_events: Sequence[Any],
        events: Sequence[Any],
        snapshots: Sequence[tuple[str, bytes]],
        done: dict[str, int] | None,
        first: int | None = None,
    ) -> list[int]:
        """Insert a command's events in the caller's write transaction (which holds
        the writers' lock and whose views have applied every earlier event, as
        ``done`` says), then apply them to the views and write their Merkle leaves
        and the evidence snapshots. Returns the events' log positions. ``first``:
        the position of the transaction's first event when it appended earlier
        ones (its bounds then cover them too)."""
        raise NotImplementedError

    def close_readers(self) -> None:
        """Close connections kept for reads (the pool closes the rest)."""

    def open_readers(self) -> int:
        """How many connections are kept for reads (one per thread on an SQLite file)."""
        return 0

    # -- the tables beside the events --------------------------------------------

    def delete_snapshot(self, c: Cursor, ref: str) -> None:
        """Delete the bytes stored for ``ref`` in the write transaction of ``c``
        (an erasure); :meth:`scrub_deleted` after the commit removes what the
        backend's files may still hold of them."""
        c.execute(self.dialect.q("DELETE FROM {t}pl_snapshots WHERE ref=?"), (ref,))

    def scrub_deleted(self, position: int) -> bool:
        """After an erasure (its event at log ``position``) has committed: leave none
        of the deleted bytes in the database's files where the backend can. False
        when it could not now (they go with the backend's next checkpoint or
        vacuum). Nothing to do by default."""
        del position
        return True

    def newest_of_topic(self, c: Cursor, topic: str) -> int | None:
        """The newest log position holding an event of ``topic`` (None: none), by a
        scan of the log: for maintenance, not for commands."""
        c.execute(
            f"SELECT MAX({self.position_column}) AS m FROM {self.events_table} "
            f"WHERE topic = {self.dialect.q('?')}",
            (topic,),
        )
        row = c.fetchone()
        return None if row is None or row["m"] is None else int(row["m"])

    def snapshot_content(self, c: Cursor, ref: str) -> tuple[bytes | None] | None:
        """``(bytes,)`` stored for a snapshot reference (``(None,)`` if what is stored
        is not bytes), or None if there is no such snapshot."""
        c.execute(self.dialect.q("SELECT content FROM {t}pl_snapshots WHERE ref=?"), (ref,))
        row = c.fetchone()
        if row is None:
            return None
        stored = row["content"]
        return (bytes(stored) if isinstance(stored, (bytes, bytearray, memoryview)) else None,)

    def leaves(
        self, c: Cursor, after: int = 0, upto: int | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """(position, Merkle leaf) stored at append time, after ``after`` and up to
        ``upto`` (inclusive; None: all), in position order, streamed (consume it
        before the transaction ends)."""
        if upto is None:
            c.execute(
                self.dialect.q(
                    "SELECT position, leaf FROM {t}pl_merkle_leaves WHERE position > ? "
                    "ORDER BY position"
                ),
                (after,),
            )
        else:
            c.execute(
                self.dialect.q(
                    "SELECT position, leaf FROM {t}pl_merkle_leaves "
                    "WHERE position > ? AND position <= ? ORDER BY position"
                ),
                (after, upto),
            )
        for r in fetch_in_chunks(c):
            yield int(r["position"]), bytes(r["leaf"])

    def leaf_indexes(self, c: Cursor, positions: Iterable[int]) -> tuple[int, dict[int, int]]:
        """How many Merkle leaves are stored, and the index in the tree (the number
        of leaves before it) of each of ``positions`` that has one: a statement
        for each ``LEAF_BATCH`` of them numbers the leaves from the previous
        batch's last position to its own, so together they pass over the
        leaves' key once, up to the last position asked (a statement per
        position before, a round trip each on PostgreSQL)."""
        size = self.leaf_count(c)
        wanted = sorted(set(positions))
        found: dict[int, int] = {}
        before = after = 0  # the leaves at or before position ``after``
        for start in range(0, len(wanted), LEAF_BATCH):
            batch = wanted[start : start + LEAF_BATCH]
            width = next(w for w in LEAF_WIDTHS if w >= len(batch))
            padded = batch + [batch[-1]] * (width - len(batch))
            c.execute(self._numbered(width), (after, batch[-1], *padded))
            for row in c.fetchall():
                found[int(row["position"])] = before + int(row["n"]) - 1
            after = batch[-1]
            if after in found:
                before = found[after] + 1
            elif start + LEAF_BATCH < len(wanted):
                c.execute(
                    self.dialect.q(
                        "SELECT COUNT(*) AS n FROM {t}pl_merkle_leaves WHERE position <= ?"
                    ),
                    (after,),
                )
                before = int(c.fetchone()["n"])
        return size, found

    def _numbered(self, width: int) -> str:
        """The statement numbering the leaves after a position up to another
        and keeping those at ``width`` positions (the same few statements for
        any count)."""
        marks = ", ".join("?" * width)
        return self.dialect.q(
            "SELECT position, n FROM (SELECT position, ROW_NUMBER() OVER (ORDER BY position) "
            "AS n FROM {t}pl_merkle_leaves WHERE position > ? AND position <= ?) numbered "
            f"WHERE position IN ({marks})"
        )

    def leaf_count(self, c: Cursor) -> int:
        """How many Merkle leaves are stored (the size of the log's tree)."""
        c.execute(self.dialect.q("SELECT COUNT(*) AS n FROM {t}pl_merkle_leaves"))
        return int(c.fetchone()["n"])

    def max_leaf_position(self, c: Cursor) -> int:
        """The log position of the newest Merkle leaf (0: none)."""
        c.execute(self.dialect.q("SELECT MAX(position) AS p FROM {t}pl_merkle_leaves"))
        return int(c.fetchone()["p"] or 0)

    def counts(self, c: Cursor) -> dict[str, int]:
        """How many stored events, snapshots and multi-event transactions there are."""
        c.execute(f"SELECT COUNT(*) AS n FROM {self.events_table}")
        out = {"events": int(c.fetchone()["n"])}
        c.execute(self.dialect.q("SELECT COUNT(*) AS n FROM {t}pl_snapshots"))
        out["snapshots"] = int(c.fetchone()["n"])
        return out

    def last_versions(self, c: Cursor, originator_ids: Sequence[UUID]) -> dict[UUID, int]:
        """The newest stored version of each aggregate (absent ones left out), read
        inside an open transaction, one query per 500 aggregates."""
        select = (
            "SELECT originator_id AS oid, MAX(originator_version) AS v "
            f"FROM {self.events_table} WHERE originator_id IN ({{marks}}) GROUP BY originator_id"
        )
        keys = (self.originator_key(oid) for oid in originator_ids)
        return {
            row["oid"] if isinstance(row["oid"], UUID) else UUID(row["oid"]): int(row["v"])
            for row in rows_in(c, self.dialect, select, keys)
        }

    def record_ids(self, c: Cursor, originator_ids: Collection[UUID]) -> dict[str, str]:
        """The record id of each of ``originator_ids`` (by the aggregate id's hex),
        read from the record's first stored event (its proposal) inside an open
        transaction, one query per 500 aggregates; aggregates with no stored
        proposal are left out. The events' own key is the index: no view keeps
        this map."""
        select = (
            f"SELECT {self.position_column} AS position, originator_id, originator_version, "
            f"topic, state FROM {self.events_table} "
            f"WHERE originator_version = 1 AND originator_id IN ({{marks}})"
        )
        keys = (self.originator_key(oid) for oid in originator_ids)
        found: dict[str, str] = {}
        for r in rows_in(c, self.dialect, select, keys):
            if r["topic"] != PROPOSED_TOPIC:
                continue
            row: Row = (
                int(r["position"]),
                r["originator_id"],
                int(r["originator_version"]),
                r["topic"],
                bytes(r["state"]),
            )
            event = self.projector.decode_any(row)
            found[event.originator_id.hex] = event.record_id
        return found

    def originator_key(self, originator_id: UUID) -> Any:
        """An aggregate id as the events table stores it."""
        return originator_id

    @property
    def events_table(self) -> str:
        """The stored events table, as SQL."""
        raise NotImplementedError

    def max_position(self, c: Cursor) -> int:
        """The newest log position, read inside an open transaction."""
        raise NotImplementedError

    def lowest_event_position(self, c: Cursor) -> int | None:
        """The lowest position holding a stored event (None: the log is empty)."""
        raise NotImplementedError

    def has_table(self, c: Cursor, name: str) -> bool:
        """Whether the ledger's schema holds a table ``name``, read inside an open
        transaction (which a missing table leaves usable)."""
        raise NotImplementedError

    def stray_position(self, c: Cursor) -> tuple[int, str] | None:
        """The lowest position below 1 holding a stored event or a Merkle leaf, and
        which of the two (``"event"``, or ``"Merkle leaf"`` when there is no event
        there), or None. The log starts at 1: only a row written behind the
        ledger's back can be there, and reading after position 0 never sees it."""
        c.execute(
            self.dialect.q("SELECT MIN(position) AS m FROM {t}pl_merkle_leaves WHERE position < 1")
        )
        leaf = c.fetchone()["m"]
        event = self.lowest_event_position(c)
        found = [
            (int(p), what)
            for p, what in ((event, "event"), (leaf, "Merkle leaf"))
            if p is not None and int(p) < 1
        ]
        return min(found, key=lambda item: item[0]) if found else None

    def after_insert(
        self,
        c: Cursor,
        ids: Sequence[int],
        stored_events: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> None:
        """Guard, views, snapshots and Merkle leaves, in the events' transaction."""
        if not ids:
            return
        guard: Guard | None = kwargs.get("guard")
        done = self.projector.tracking_map(c) if self.projector.enabled else None
        if guard is not None:
            # The guard reads the views: they must include every earlier event.
            if done is not None and min(done.values()) < ids[0] - 1:
                self.projector.catch_up(c, upto=ids[0] - 1)
                done = self.projector.tracking_map(c)
            guard(c)
        self.write_after(c, ids, stored_events, kwargs, done)

    def write_after(
        self,
        c: Cursor,
        ids: Sequence[int],
        stored_events: Sequence[Any],
        kwargs: dict[str, Any],
        done: dict[str, int] | None,
    ) -> None:
        """Views, Merkle leaves, transaction bounds and snapshots of inserted events
        (``kwargs["leaves"]``: the (position, leaf) rows, if the insert made them;
        ``kwargs["first"]``: the transaction's first position, if it appended
        events before these)."""
        events = kwargs.get("ledger_events")
        if events is not None:
            self.projector.apply(c, list(zip(ids, events, strict=True)), done)
        leaves: Sequence[tuple[int, bytes]] | None = kwargs.get("leaves")
        if leaves is None:
            leaves = [(pos, leaf_of(pos, e)) for pos, e in zip(ids, stored_events, strict=True)]
        insert_rows(c, self.dialect, "pl_merkle_leaves", ("position", "leaf"), leaves)
        first = kwargs.get("first") or ids[0]
        if ids[-1] > first:
            c.execute(
                self.dialect.q("INSERT INTO {t}pl_commits (last_pos, first_pos) VALUES (?, ?)"),
                (ids[-1], first),
            )
        snapshots: Sequence[tuple[str, bytes]] = kwargs.get("snapshots", ())
        for ref, content in snapshots:
            c.execute(
                self.dialect.q(
                    "INSERT INTO {t}pl_snapshots (ref, content, size) VALUES (?, ?, ?) "
                    "ON CONFLICT (ref) DO NOTHING"
                ),
                (ref, content, len(content)),
            )


def _gone(position: int) -> str:
    return (
        f"the event at position {position} is missing: the ledger appended it (its Merkle "
        "leaf is stored), and its row is gone; `provledger verify` names every problem"
    )
