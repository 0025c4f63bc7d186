"""The current-validity view, kept as a versioned (temporal) table.

``pl_records`` holds one row per record *version*: each status change closes the
current row (``to_pos`` = the event's position) and opens a new one
(``from_pos``). The current state is ``to_pos IS NULL``; the state right after
log position N is ``from_pos <= N AND (to_pos IS NULL OR to_pos > N)``. Reads at
any position therefore cost an index lookup, never a replay.

Per version the row keeps the status, the blocking cause (``cause_root`` and
``reason``: which revoked ancestor made it stale and why), and the *effective
expiry* — the earliest expiry among the record and all its ancestors, with the
record whose own expiry it is (``eff_source``). Because an ACCEPTED record's
ancestors are all ACCEPTED (acceptance needs ACCEPTED parents and revocation marks
every descendant STALE in the same transaction), usability at instant T is
``status == ACCEPTED and T < eff_expires``: no ancestor walk on read.

A value longer than ``INLINE_VALUE`` bytes (packed) is kept once per record in
``pl_values``, by the position of the record's proposal, and its rows hold NULL:
``pl_records`` rows are the keys of its b-tree (``WITHOUT ROWID``), and a search
meeting a row spilt to overflow pages copies it whole to compare keys. So are
the packed lists and mappings of ``record_table.SPILLED`` longer than that,
in ``pl_spilled`` by a reference to their content, which the row keeps. The
statements that return rows (``row_columns``) give the value and those columns
either way.

``pl_edges`` is the reverse-dependency index (parent → child, declared or
observed), also versioned so a new basis given at revalidation keeps history.
The claim index is the ``(scope, claim_key)`` index on ``pl_records``.
"""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypedDict, cast
from uuid import UUID

from ledger.domain import Record, Status, uuid_of_hex
from ledger.errors import CorruptEventError
from ledger.serialization import datetime_to_micros, pack, unpack
from ledger.validation import quoted
from projections import edges, record_table
from projections.base import Cursor, Dialect, Query, insert_rows, rows_in, write_rows
from projections.record_table import (
    AS_OF_FILTER,
    COLUMNS,
    INLINE_VALUE,
    NOW_FILTER,
    ROW,
    kept,
    spill_rows,
)

VIEW = "validity"


class RecordRow(TypedDict):
    """One version of a record in ``pl_records`` (times in µs since the epoch,
    ``value``/``conditions``/``parents``/``observed``/``evidence`` msgpack)."""

    record_id: str
    from_pos: int
    to_pos: int | None
    scope: str
    claim_key: str
    kind: str
    value: bytes
    status: str
    proposer: str
    created_pos: int
    created_at: int
    expires: int | None
    eff_expires: int | None
    eff_source: str | None
    conditions: bytes
    parents: bytes
    observed: bytes
    evidence: bytes | None
    snapshot_ref: str | None
    run_id: str | None
    cause_root: str | None
    reason: str | None
    changed_by: str | None
    changed_at: int | None
    left_valid_pos: int | None
    supersedes: str | None
    superseded_by: str | None
    stale_via: str | None
    #: The record's aggregate id (hex), as its stored events are keyed.
    agg_id: str


class ListedRow(RecordRow):
    """A ``RecordRow`` as a listing or a read gives it: with whether it was delivered."""

    has_deliveries: int


#: The view's tables and indexes (:mod:`projections.record_table`).
DDL = record_table.DDL
AFTER_LOAD_DDL = record_table.AFTER_LOAD_DDL
TABLES = record_table.TABLES

#: ``ROW`` in a statement that is formatted (``rows_in``), and the columns as
#: stored (``value`` NULL where ``pl_values`` holds it), which need no braces.
_ROW_FORMATTED = ROW.replace("{t}", "{{t}}")
_STORED_ROW = ", ".join(f"r.{name}" for name in COLUMNS)


_INSERT = "INSERT INTO {{t}}pl_records ({}) VALUES ({})".format(
    ", ".join(COLUMNS),
    ", ".join("?" for _ in COLUMNS),
)

#: A row dict as the tuple ``_INSERT`` takes.
_AS_ROW = operator.itemgetter(*COLUMNS)
_COLUMN_LIST = list(COLUMNS)


def _micros(value: Any) -> int | None:
    return None if value is None else datetime_to_micros(value)


def record_id_in(rid_of: Mapping[str, str], originator_id: UUID, position: int) -> str:
    """The record id of the record event stored at ``position`` with aggregate id
    ``originator_id``, from ``rid_of`` (aggregate id hex → record id, as
    ``Projector.record_ids_of`` or the recorder's ``record_ids`` give it);
    ``CorruptEventError`` if no record was proposed with that aggregate id."""
    rid = rid_of.get(originator_id.hex)
    if rid is None:
        raise CorruptEventError(
            f"stored event at position {position} belongs to no proposed record"
        )
    return rid


def current_query(d: Dialect, record_id: str) -> Query:
    """The statement of :func:`current` now (its one row, if any, is the answer)."""
    return d.q(f"SELECT {ROW} FROM {{t}}pl_records r WHERE record_id=? AND {NOW_FILTER}"), (
        record_id,
    )


def current(c: Cursor, d: Dialect, record_id: str, position: int | None = None) -> RecordRow | None:
    """The record's row now, or right after ``position``; None if it did not exist."""
    if position is None:
        c.execute(*current_query(d, record_id))
    else:
        c.execute(
            d.q(f"SELECT {ROW} FROM {{t}}pl_records r WHERE record_id=? AND {AS_OF_FILTER}"),
            (record_id, position, position),
        )
    return cast("RecordRow | None", c.fetchone())


def aggregate_id(c: Cursor, d: Dialect, record_id: str) -> UUID | None:
    """The aggregate id the record's events are stored under (any version of its
    row keeps it), or None if the view has no such record."""
    # In key order: with few statistics PostgreSQL may otherwise scan for the first row.
    c.execute(
        d.q("SELECT agg_id FROM {t}pl_records WHERE record_id=? ORDER BY from_pos LIMIT 1"),
        (record_id,),
    )
    row = c.fetchone()
    return None if row is None else uuid_of_hex(row["agg_id"])


def existing(c: Cursor, d: Dialect, record_id: str, position: int | None = None) -> RecordRow:
    """``current``, for a record that must have a row (named by the log or the
    view itself).

    Raises:
        CorruptEventError: it has none (rows were removed behind the ledger's back).
    """
    row = current(c, d, record_id, position)
    if row is None:
        raise CorruptEventError(
            f"record {record_id!r} has no row in the views, though the log names it: view "
            "rows were removed behind the ledger's back; `provledger verify` names what "
            "differs, and `provledger rebuild` rebuilds the views from the log"
        )
    return row


def _effective_expiry(
    c: Cursor,
    d: Dialect,
    record_id: str,
    own: int | None,
    deps: Iterable[str],
) -> tuple[int | None, str | None]:
    """The earliest expiry among the record and its dependencies' effective expiries."""
    return _earliest_expiry(record_id, own, deps, lambda dep: current(c, d, dep))


def _earliest_expiry(
    record_id: str, own: int | None, deps: Iterable[str], row_of: Callable[[str], Any]
) -> tuple[int | None, str | None]:
    """(effective expiry, its source): the earliest of the record's own expiry and
    its dependencies' effective expiries (``row_of`` gives a dependency's current
    row, or None)."""
    eff, source = own, (record_id if own is not None else None)
    for dep in deps:
        row = row_of(dep)
        if row is None:
            continue
        dep_eff = row["eff_expires"]
        if dep_eff is not None and (eff is None or dep_eff < eff):
            eff, source = dep_eff, row["eff_source"]
    return eff, source


def _as_dict(row: Any) -> dict[str, Any]:
    """A view row (``sqlite3.Row`` or a psycopg dict row) as a plain dict of its columns."""
    if type(row) is sqlite3.Row and row.keys() == _COLUMN_LIST:
        return dict(zip(COLUMNS, row, strict=True))  # every column: no look-up by name
    return {name: row[name] for name in COLUMNS}


def _mark_left_valid(before: Any, after: dict[str, Any], pos: int) -> None:
    """``left_valid_pos`` of a new version: cleared while ACCEPTED, ``pos`` when an
    ACCEPTED record stops being so, else kept from ``before``."""
    if after["status"] == Status.ACCEPTED:
        after["left_valid_pos"] = None
    elif before["status"] == Status.ACCEPTED:
        after["left_valid_pos"] = pos


def _new_version(c: Cursor, d: Dialect, record_id: str, pos: int, at: int, **changes: Any) -> None:
    row = existing(c, d, record_id)
    values = _as_dict(row)
    values.update(changes)
    values["value"] = kept(values["value"])
    spill_rows(c, d, [values])
    values["from_pos"], values["to_pos"], values["changed_at"] = pos, None, at
    _mark_left_valid(row, values, pos)
    if row["from_pos"] == pos:
        # A second change by the same event: amend the version it opened.
        c.execute(
            d.q("DELETE FROM {t}pl_records WHERE record_id=? AND from_pos=?"), (record_id, pos)
        )
    else:
        c.execute(
            d.q("UPDATE {t}pl_records SET to_pos=? WHERE record_id=? AND to_pos IS NULL"),
            (pos, record_id),
        )
    c.execute(d.q(_INSERT), tuple(values[name] for name in COLUMNS))


#: The stored text of each status (an enum member's ``.value`` is slow to read).
_CANDIDATE, _ACCEPTED, _REJECTED, _REVOKED, _SUPERSEDED, _STALE = (
    s.value
    for s in (
        Status.CANDIDATE,
        Status.ACCEPTED,
        Status.REJECTED,
        Status.REVOKED,
        Status.SUPERSEDED,
        Status.STALE,
    )
)


def _status_change(event: Any, rid: str) -> dict[str, Any]:
    """The columns a status event other than Revalidated changes."""
    if isinstance(event, Record.Accepted):
        return {"status": _ACCEPTED, "cause_root": None, "reason": event.note or None}
    if isinstance(event, Record.Rejected):
        return {"status": _REJECTED, "cause_root": None, "reason": event.reason}
    if isinstance(event, Record.Revoked):
        return {"status": _REVOKED, "cause_root": rid, "reason": event.reason}
    if isinstance(event, Record.Superseded):
        return {
            "status": _SUPERSEDED,
            "cause_root": None,
            "reason": None,
            "superseded_by": event.by,
        }
    return {
        "status": _STALE,
        "cause_root": event.cause,
        "reason": event.reason,
        "stale_via": event.superseded_by,
    }


#: What ``pack`` makes of no conditions and of no dependencies (most proposals).
_NO_CONDITIONS, _NO_RECORDS = pack({}), pack([])


def _proposed_row(pos: int, event: Any, eff: int | None, source: str | None) -> dict[str, Any]:
    at = datetime_to_micros(event.timestamp)
    evidence = event.evidence
    return {
        "record_id": event.record_id,
        "from_pos": pos,
        "to_pos": None,
        "scope": event.scope,
        "claim_key": event.claim_key,
        "kind": event.kind,
        "value": pack(event.value),
        "status": _CANDIDATE,
        "proposer": event.actor,
        "created_pos": pos,
        "created_at": at,
        "expires": _micros(event.expires),
        "eff_expires": eff,
        "eff_source": source,
        "conditions": pack(event.conditions) if event.conditions else _NO_CONDITIONS,
        "parents": pack(list(event.parents)) if event.parents else _NO_RECORDS,
        "observed": pack(list(event.observed)) if event.observed else _NO_RECORDS,
        "evidence": None if evidence is None else pack(evidence),
        "snapshot_ref": None if evidence is None else evidence["snapshot_ref"],
        "run_id": event.run_id,
        "cause_root": None,
        "reason": None,
        "changed_by": event.actor,
        "changed_at": at,
        "left_valid_pos": None,
        "supersedes": event.supersedes,
        "superseded_by": None,
        "stale_via": None,
        "agg_id": event.originator_id.hex,
    }


def current_many(
    c: Cursor,
    d: Dialect,
    record_ids: Iterable[str],
    position: int | None = None,
    values: bool = True,
) -> dict[str, RecordRow]:
    """The rows of the given records now, or right after ``position`` (missing
    ones left out), in one query per 500 ids; ``values=False``: each ``value``
    as the row keeps it (None where ``pl_values`` holds it), for rows that are
    only copied into new versions."""
    # ``rows_in`` formats the statement: its own braces doubled.
    columns = _ROW_FORMATTED if values else _STORED_ROW
    select = f"SELECT {columns} FROM {{{{t}}}}pl_records r WHERE record_id IN ({{marks}}) AND "
    if position is None:
        return {row["record_id"]: row for row in rows_in(c, d, select + NOW_FILTER, record_ids)}
    rows = rows_in(c, d, select + AS_OF_FILTER, record_ids, (position, position))
    return {row["record_id"]: row for row in rows}


def qualified_keys(
    c: Cursor, d: Dialect, names: Iterable[str], position: int | None = None
) -> dict[str, list[tuple[str, str, int]]]:
    """For each of ``names``, the (key, scope, position of its proposal) of every
    record keyed ``name@@scope`` (proposed as ``name`` where it was taken), now or
    right after ``position``: one query per 500 names on the qualified keys' index."""
    select = (
        "SELECT record_id, scope, created_pos FROM {{t}}pl_records WHERE "
        + d.is_qualified("record_id")
        + " AND "
        + d.listing_order("record_id")
        + " IN ({marks}) AND "
    )
    if position is None:
        rows = rows_in(c, d, select + NOW_FILTER, names)
    else:
        rows = rows_in(c, d, select + AS_OF_FILTER, names, (position, position))
    out: dict[str, list[tuple[str, str, int]]] = {}
    for row in rows:
        key = str(row["record_id"])
        found = (key, str(row["scope"]), int(row["created_pos"]))
        out.setdefault(key.partition("@@")[0], []).append(found)
    return out


class _Fold:
    """Folds a run of proposals and status events in memory, then writes it with a
    few ``executemany`` statements: the rows it needs are read in one query per
    500 records up front, so the cost follows the events, not the statements."""

    def __init__(
        self,
        c: Cursor,
        d: Dialect,
        events: Sequence[tuple[int, Any]],
        rid_of: Mapping[str, str],
        known: Mapping[str, Any] | None = None,
    ) -> None:
        self.c, self.d = c, d
        #: aggregate id (hex) → record id, for every record among the events.
        self.rid_of = rid_of
        proposed = {e.record_id for _, e in events if type(e) is _PROPOSED}
        #: record id → its newest row (a dict), read from the view or made here.
        self.rows: dict[str, dict[str, Any]] = {}
        for row in (known or {}).values():
            self.rows[row["record_id"]] = _as_dict(row)
        wanted = [
            dep
            for _, e in events
            for dep in (
                (*e.parents, *e.observed)
                if type(e) is _PROPOSED
                else (rid_of.get(e.originator_id.hex, ""),)
            )
            if dep and dep not in self.rows and dep not in proposed
        ]
        for rid, row in current_many(c, d, wanted, values=False).items() if wanted else ():
            self.rows[rid] = _as_dict(row)
        self.fresh: set[str] = set()  # records whose newest row was made here
        self.closes: list[tuple[int, str]] = []  # (to_pos, record id) of stored rows
        self.versions: list[dict[str, Any]] = []
        self.values: list[tuple[int, bytes]] = []  # (created_pos, value) for pl_values
        self.edges: list[tuple[str, str, str, int]] = []

    def propose(self, pos: int, event: Any) -> None:
        rid = event.record_id
        deps = dict.fromkeys((*event.parents, *event.observed))
        eff, source = _earliest_expiry(rid, _micros(event.expires), deps, self.rows.get)
        row = _proposed_row(pos, event, eff, source)
        value = row["value"]
        if len(value) > INLINE_VALUE:
            self.values.append((pos, value))
            row["value"] = None
        self.versions.append(row)
        self.rows[rid] = row
        self.fresh.add(rid)
        self.edges.extend(edges.rows(rid, event.parents, event.observed, pos))

    def change(self, pos: int, event: Any) -> None:
        rid = record_id_in(self.rid_of, event.originator_id, pos)
        row = self.rows.get(rid)
        if row is None:
            raise CorruptEventError(
                f"stored event at position {pos} changes record {quoted(rid)}, of which the "
                "views hold no row (removed behind the ledger's back, or its proposal's "
                "event gone): `provledger verify` names which, and `provledger rebuild` "
                "rebuilds views that were altered"
            )
        new = dict(row)
        new.update(
            value=kept(row["value"]),  # a row read with its value from pl_values
            stale_via=None,
            changed_by=event.actor,
            from_pos=pos,
            to_pos=None,
            changed_at=datetime_to_micros(event.timestamp),
        )
        new.update(_status_change(event, rid))
        _mark_left_valid(row, new, pos)
        if rid in self.fresh:
            row["to_pos"] = pos
        else:
            self.closes.append((pos, rid))
            self.fresh.add(rid)
        self.versions.append(new)
        self.rows[rid] = new

    def flush(self) -> None:
        c, d = self.c, self.d
        if self.closes:
            write_rows(
                c,
                d.q("UPDATE {t}pl_records SET to_pos=? WHERE record_id=? AND to_pos IS NULL"),
                self.closes,
            )
        spill_rows(c, d, self.versions)
        insert_rows(c, d, "pl_records", COLUMNS, [_AS_ROW(row) for row in self.versions])
        insert_rows(c, d, "pl_values", ("created_pos", "value"), self.values)
        edges.insert(c, d, self.edges)


_PROPOSED = Record.Proposed
_FOLDED = (
    Record.Proposed,
    Record.Accepted,
    Record.Rejected,
    Record.Revoked,
    Record.MarkedStale,
    Record.Superseded,
)


def apply_many(
    c: Cursor,
    d: Dialect,
    events: Sequence[tuple[int, Any]],
    rid_of: Mapping[str, str],
    known: Mapping[str, Any] | None = None,
) -> None:
    """Fold events in log order.

    Runs of proposals and status changes are folded in memory and written with
    ``executemany`` (see ``_Fold``); a revalidation, which may replace edges and
    move effective expiries below it, is applied on its own between runs.
    ``known``: current rows read in this transaction, by aggregate id (hex), that
    the first run starts from instead of reading them. ``rid_of``: the record id
    of each record event's aggregate (hex), see ``Projector.record_ids_of``.
    """
    run: list[tuple[int, Any]] = []
    for pos, event in events:
        if type(event) in _FOLDED:
            run.append((pos, event))
        elif isinstance(event, Record.Revalidated):
            _fold(c, d, run, rid_of, known)
            run, known = [], None
            apply(c, d, pos, event, rid_of)
    _fold(c, d, run, rid_of, known)


def _fold(
    c: Cursor,
    d: Dialect,
    events: Sequence[tuple[int, Any]],
    rid_of: Mapping[str, str],
    known: Mapping[str, Any] | None = None,
) -> None:
    if not events:
        return
    fold = _Fold(c, d, events, rid_of, known)
    for pos, event in events:
        if type(event) is _PROPOSED:
            fold.propose(pos, event)
        else:
            fold.change(pos, event)
    fold.flush()


def apply(c: Cursor, d: Dialect, pos: int, event: Any, rid_of: Mapping[str, str]) -> None:
    """Fold one ``Record`` event (at log position ``pos``) into the view; ``rid_of``
    as for :func:`apply_many`."""
    if type(event) in _FOLDED:
        _fold(c, d, [(pos, event)], rid_of)
        return
    if not isinstance(event, Record.Revalidated):
        return  # deliveries belong to the delivery-history view; other aggregates elsewhere
    at = datetime_to_micros(event.timestamp)
    rid = record_id_in(rid_of, event.originator_id, pos)
    row = existing(c, d, rid)
    parents = list(unpack(row["parents"]))
    observed = list(unpack(row["observed"]))
    if event.parents is not None or event.observed is not None:
        if event.parents is not None:
            parents = list(event.parents)
        if event.observed is not None:
            observed = list(event.observed)
        edges.replace(c, d, rid, parents, observed, pos)
    eff, source = _effective_expiry(c, d, rid, row["expires"], dict.fromkeys((*parents, *observed)))
    _new_version(
        c,
        d,
        rid,
        pos,
        at,
        status=event.status,
        changed_by=event.actor,
        cause_root=None,
        stale_via=None,
        reason=event.note or None,
        parents=pack(parents),
        observed=pack(observed),
        eff_expires=eff,
        eff_source=source,
    )
    _refresh_effective_expiry(c, d, rid, pos, at)


def _refresh_effective_expiry(c: Cursor, d: Dialect, root: str, pos: int, at: int) -> None:
    """Recompute the effective expiry below ``root`` after its basis changed.

    Its descendants are STALE (so unusable whatever their expiry), but what the
    view says about them must follow the new basis, now and as of this position.
    """
    frontier = [root]
    while frontier:
        changed: list[str] = []
        for child in dict.fromkeys(child for _p, child, _e in edges.children(c, d, frontier)):
            row = existing(c, d, child)
            deps = dict.fromkeys((*unpack(row["parents"]), *unpack(row["observed"])))
            eff, source = _effective_expiry(c, d, child, row["expires"], deps)
            if (eff, source) != (row["eff_expires"], row["eff_source"]):
                _new_version(c, d, child, pos, at, eff_expires=eff, eff_source=source)
                changed.append(child)
        frontier = changed
