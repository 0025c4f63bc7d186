"""Audit: a record's whole history, the event log, inclusion proofs, and as-of
sessions that answer as the ledger did at a past position or time."""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterable, Iterator
from contextlib import closing
from datetime import datetime
from itertools import islice
from typing import Any

from eventsourcing.utils import get_topic

from ledger import merkle, redaction
from ledger.access import Role
from ledger.caller import Caller
from ledger.domain import Record, uuid_of_hex
from ledger.errors import CorruptEventError, InvalidInputError
from ledger.merkle import InclusionProof, LogDigest
from ledger.reads import record_view
from ledger.rules import CLOCK_SKEW
from ledger.serialization import datetime_to_micros, micros_to_datetime
from ledger.stored_types import read_events
from ledger.validation import check_aware, quoted
from ledger.values import AuditEvent, AuditTrail
from projections import timeline
from projections import validity as validity_view
from projections.base import Cursor

#: The ``Record`` events ``history(type=…)`` knows.
RECORD_EVENTS = (
    "Proposed",
    "Accepted",
    "Rejected",
    "Revoked",
    "MarkedStale",
    "Superseded",
    "Revalidated",
    "Delivered",
    "CorrectionIssued",
    "SnapshotErased",
)
_RECORD_TOPIC = get_topic(Record)
#: Events a history reads from the log at a time.
_HISTORY_BATCH = 1000
_PLUMBING = ("originator_id", "originator_version", "timestamp", "actor", "originator_topic")


def audit(caller: Caller, record_id: str) -> AuditTrail:
    """``Session.audit``: every event of one record, revoked ones included."""
    engine = caller.engine
    with caller.reading() as c:
        row = caller.visible(c, record_id, Role.AUDIT, "audit")
        view = record_view(caller, c, row, caller.at(None))
        notes = engine.recorder.record_events(c, row, record_id)
        decoded = [
            (note, engine.projector.decode(note))
            for note in notes
            if caller.position is None or note.id <= caller.position
        ]
        fields = [{k: v for k, v in vars(e).items() if k not in _PLUMBING} for _, e in decoded]
        named = set().union(*(redaction.event_dependencies(f) for f in fields))
        hidden = caller.hidden_among(c, named, seen=view.scope)
        names = caller.names(c, (*named, row["record_id"]))
    events = tuple(
        AuditEvent(
            position=note.id,
            type=type(event).__name__,
            at=event.timestamp,
            actor=redaction.actor(getattr(event, "actor", None), f, hidden),
            details=redaction.details(f, hidden, names),
        )
        for (note, event), f in zip(decoded, fields, strict=True)
    )
    return AuditTrail(record=view, events=events, undeclared=view.undeclared)


def history(
    caller: Caller,
    record: str | None,
    type: str | None,
    start: int | None,
    stop: int | None,
    limit: int | None = None,
) -> tuple[AuditEvent, ...]:
    """``Session.history``: record events in position order, in audited scopes."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidInputError(f"history limit {limit!r} is not a positive count")
    with closing(iter_history(caller, record, type, start, stop)) as events:
        return tuple(islice(events, None if limit is None else min(limit, sys.maxsize)))


def iter_history(
    caller: Caller,
    record: str | None,
    type: str | None,
    start: int | None,
    stop: int | None,
) -> Generator[AuditEvent, None, None]:
    """``Session.iter_history``: :func:`history`'s events one at a time, from one
    read transaction (the caller's refusal comes with the first)."""
    if type is not None and type not in RECORD_EVENTS:
        raise InvalidInputError(
            f"history type {quoted(type)} is not one of: {', '.join(RECORD_EVENTS)}"
        )
    for bound, what in ((start, "start"), (stop, "stop")):
        if bound is not None and (
            isinstance(bound, bool) or not isinstance(bound, int) or not 0 <= bound < 2**62
        ):
            raise InvalidInputError(f"history {what} {quoted(bound)} is not a position")
    first = start or 0
    last = min(
        stop if stop is not None else 1 << 62,
        caller.position if caller.position is not None else 1 << 62,
    )
    return _history_events(caller, record, type, first, last)


def _history_events(
    caller: Caller, record: str | None, type: str | None, first: int, last: int
) -> Generator[AuditEvent, None, None]:
    engine = caller.engine
    prefix = _RECORD_TOPIC + "."
    with caller.reading() as c:

        def log() -> Iterator[Any]:
            # Each batch is vouched for before it is shown (none altered, none gone),
            # as far as ``last``: a batch that reaches it, or the log's end, is the
            # last, and no event the ledger appended may be gone from after it.
            after = max(first - 1, 0)
            while True:
                batch, unreadable = read_events(engine, c, after, _HISTORY_BATCH)
                shown = [n for n in batch if n.id <= last]
                problem = engine.recorder.vouch_problem(c, shown, after)
                if unreadable is not None and unreadable[0] <= last:
                    problem = min(problem or unreadable, unreadable)
                if problem is not None:  # shown as far as it, then refused
                    yield from (n for n in shown if n.id < problem[0])
                    raise CorruptEventError(problem[1])
                if len(shown) < _HISTORY_BATCH:
                    yield from shown
                    engine.recorder.vouch_end(c, shown[-1].id if shown else after, last)
                    return
                yield from shown
                after = shown[-1].id

        notes: Iterable[Any]
        if record is None:
            caller.require_somewhere(c, Role.AUDIT, "history")
        if record is not None:
            row = caller.visible(c, record, Role.AUDIT, "history")
            notes = engine.recorder.record_events(c, row, record)
        else:
            notes = log()
        # aggregate id -> (record id, may audit), or the error its first event meets
        records: dict[Any, tuple[str, bool] | CorruptEventError] = {}
        for batch, failure in _batches(notes):
            wanted = [
                note
                for note in batch
                if first <= note.id <= last
                and note.topic.startswith(prefix)
                and (type is None or note.topic[len(prefix) :] == type)
            ]
            _learn(caller, c, wanted, records)
            for note in wanted:
                known = records[note.originator_id]
                if isinstance(known, CorruptEventError):
                    raise known
                rid, allowed = known
                if not allowed:
                    continue
                event = engine.projector.decode(note)
                details = {k: v for k, v in vars(event).items() if k not in _PLUMBING}
                named = redaction.event_dependencies(details)
                hidden = caller.hidden_among(c, named)
                names = caller.names(c, (*named, rid))
                actor = redaction.actor(getattr(event, "actor", None), details, hidden)
                details = redaction.details(details, hidden, names)
                yield AuditEvent(
                    position=note.id,
                    type=event.__class__.__name__,
                    at=event.timestamp,
                    actor=actor,
                    details={"record_id": names.get(rid, rid), **details},
                )
            if failure is not None:
                raise failure
            if batch and batch[-1].id > last:
                return


def _batches(notes: Iterable[Any]) -> Iterator[tuple[list[Any], Exception | None]]:
    """``notes`` :data:`_HISTORY_BATCH` at a time, each with the error reading on
    met, if any (the notes read before it are still shown, then it is raised)."""
    it = iter(notes)
    while True:
        batch: list[Any] = []
        try:
            batch.extend(islice(it, _HISTORY_BATCH))
        except Exception as exc:  # raised once what was read before it is shown
            yield batch, exc
            return
        yield batch, None
        if len(batch) < _HISTORY_BATCH:
            return


def _learn(
    caller: Caller,
    c: Cursor,
    notes: list[Any],
    records: dict[Any, tuple[str, bool] | CorruptEventError],
) -> None:
    """Add to ``records`` the record and whether the caller may audit it of each
    aggregate ``notes`` name that it lacks: one query for their record ids and one
    for their rows, not three a record (a history over a scope holding little of a
    large log looked each record up alone). What its first event cannot be told
    of is kept as the error that event meets (:func:`validity_view.record_id_in`,
    :func:`validity_view.existing`)."""
    first_at: dict[Any, int] = {}
    for note in notes:
        if note.originator_id not in records:
            first_at.setdefault(note.originator_id, note.id)
    if not first_at:
        return
    engine, d = caller.engine, caller.engine.dialect
    # (a notification's originator id is a UUID already)
    found = engine.recorder.record_ids(c, first_at)
    rows = validity_view.current_many(c, d, set(found.values()), values=False)
    for originator, position in first_at.items():
        try:
            rid = validity_view.record_id_in(found, originator, position)
            row = rows.get(rid) or validity_view.existing(c, d, rid)  # (which raises)
        except CorruptEventError as exc:
            records[originator] = exc
            continue
        records[originator] = (rid, Role.AUDIT.value in caller.roles(c, row["scope"]))


def _digest(against: LogDigest | str) -> LogDigest:
    """``against`` as a digest (its text read), or InvalidInputError naming it."""
    return against if isinstance(against, LogDigest) else LogDigest.parse(against)


def prove(
    caller: Caller, record_id: str, against: LogDigest | str | None = None
) -> tuple[InclusionProof, ...]:
    """``Session.prove``: inclusion proofs of a record's events in the current tree,
    or in the tree of the digest ``against`` (its events up to the digest's position)."""
    engine = caller.engine
    target = None if against is None else _digest(against)
    with caller.reading() as c:
        row = caller.visible_row(c, record_id, Role.AUDIT, "prove")
        key = row["record_id"]
        notes = engine.recorder.select_record_events(c, uuid_of_hex(row["agg_id"]))
        if caller.position is not None:  # as of then: the events the record had then
            notes = [note for note in notes if note.id <= caller.position]
        if target is not None:  # the events in the digest's tree
            notes = [note for note in notes if note.id <= target.position]
        # An event's bytes name what its fields name: withheld where the audit
        # trail shows a placeholder or a key as the caller is shown it.
        withheld = set()
        for note in notes:
            fields = vars(engine.projector.decode(note))
            named = redaction.event_dependencies(fields)
            # Placeholders stand only for ids (the audit trail shows a note's or
            # reason's text as written): a key quoted in a text that names a hidden
            # record must not withhold more than one naming nothing would.
            hidden = caller.hidden_among(c, redaction.event_ids(fields), seen=row["scope"])
            if hidden or caller.names(c, (*named, key)):
                withheld.add(note.id)
        # One pass over the leaves, in the same snapshot: the root and each
        # event's path, in memory that does not grow with the log, and the
        # leaves stored for the record's own events.
        size, index_of = engine.recorder.leaf_indexes(c, [note.id for note in notes])
        if target is not None:
            if target.size > size:
                raise InvalidInputError(
                    f"digest {target} is of a tree of {target.size} leaves; this log has "
                    f"{size}: it is a digest of another ledger, or the log lost events "
                    "(`provledger verify --against` says which)"
                )
            size = target.size
            if any(index >= size for index in index_of.values()):
                raise InvalidInputError(
                    f"digest {target} is not a digest this log could give: an event at or "
                    f"before position {target.position} is not among its first {size} leaves"
                )
        stored: dict[int, bytes] = {}
        last = [0]  # the position of the tree's last leaf (of ``size``)

        def leaves() -> Iterator[bytes]:
            for n, (position, leaf) in enumerate(engine.recorder.leaves(c), start=1):
                if position in index_of:
                    stored[position] = leaf
                if n == size:
                    last[0] = position
                yield leaf

        root, paths = merkle.inclusion_paths(leaves(), size, index_of.values())
    if target is not None:
        _check_extends(target, root, last[0], record_id, notes)
    proofs = []
    for note in notes:
        data = merkle.leaf_data(
            note.id, note.originator_id, note.originator_version, note.topic, note.state
        )
        index = index_of.get(note.id)
        if index is None or stored.get(note.id) != merkle.leaf_hash(data):
            # No proof can hold for it: said here, by position, as `verify` says it.
            why = (
                "has no Merkle leaf (it was not appended by the ledger)"
                if index is None
                else "does not match its Merkle leaf (it or the leaf was altered)"
            )
            raise CorruptEventError(
                f"prove refused: the stored event at position {note.id} {why} "
                "(`provledger verify` names every problem)"
            )
        proofs.append(
            InclusionProof(
                position=note.id,
                index=index,
                size=size,
                leaf=merkle.leaf_hash(data).hex(),
                leaf_data=None if note.id in withheld else data.hex(),
                path=tuple(p.hex() for p in paths[index]),
                root=root.hex(),
            )
        )
    return tuple(proofs)


def _check_extends(
    target: LogDigest, root: bytes, last: int, record_id: str, notes: list[Any]
) -> None:
    """Refuse proofs against ``target`` unless the log's first ``target.size`` leaves
    (the last of them at log position ``last``) are its tree, as ``verify`` checks
    a digest, and ``record_id`` had an event in it (``notes``)."""
    if root.hex() != target.root:
        raise InvalidInputError(
            f"the log does not extend digest {target}: its first {target.size} leaves have "
            "another root (a digest of another ledger, or the log was rewritten: "
            "`provledger verify --against` says which)"
        )
    if target.size and last != target.position:
        raise InvalidInputError(
            f"digest {target} ends at log position {target.position}, but the last event "
            f"of its tree is at position {last}: it is not a digest the log gave"
        )
    if not notes:
        raise InvalidInputError(
            f"record {record_id!r} had no event at or before position {target.position}, "
            f"the digest's: nothing of it is in that tree to prove"
        )


def _time_of_event(caller: Caller, c: Cursor, position: int) -> datetime | None:
    """The time the event at ``position`` carries (None: before the first). The
    time index keeps the latest time seen up to each position, which is later than
    the event's own where a writer's clock stepped back: an as-of read at a position
    is made at the time of the event there, as a read just after it was."""
    notes = caller.engine.recorder.read_after(c, position - 1, 1) if position > 0 else []
    if not notes or notes[0].id != position:
        at_micros = timeline.time_of(c, caller.engine.dialect, position)
        return None if at_micros is None else micros_to_datetime(at_micros)
    timestamp: datetime = caller.engine.projector.decode(notes[0]).timestamp
    return timestamp


def as_of(caller: Caller, position: int | None, time: datetime | None) -> Caller:
    """``Session.as_of``: the caller as of a log position (the end of the
    transaction that appended it) or the newest position at or before ``time``."""
    if (position is None) == (time is None):
        raise InvalidInputError("as_of needs exactly one of position= or time=")
    d = caller.engine.dialect
    with caller.reading() as c:
        if position is not None:
            if isinstance(position, bool) or not isinstance(position, int) or position < 0:
                raise InvalidInputError(f"as_of position {quoted(position)} is not a position")
            newest = caller.engine.position()
            if position > newest:
                raise InvalidInputError(
                    f"as_of position {position} is beyond the log (newest is {newest})"
                )
            pos = timeline.commit_end(c, d, position)
            # Before the first event the ledger was empty until that event's time.
            at = _time_of_event(caller, c, pos or min(1, newest)) or caller.engine.now()
        else:
            when = check_aware(time, "as_of time")
            now = caller.engine.now()
            # As a position beyond the log: there is no past there to show yet (a
            # writer's clock ahead of this one's may have timed events later; a
            # client's running a little fast asks for now).
            if when > now + CLOCK_SKEW and datetime_to_micros(when) > timeline.last_time(c, d):
                minutes = int(CLOCK_SKEW.total_seconds() // 60)
                raise InvalidInputError(
                    f"as_of time {when.isoformat()} is in the future (the ledger's clock "
                    f"reads {now.isoformat()}, allowing {minutes} minutes of clock skew); "
                    "to ask about a later moment, read as of now at that moment (at)"
                )
            pos = timeline.commit_end(c, d, timeline.position_at(c, d, datetime_to_micros(when)))
            at = when
    return caller.derive(position=pos, at=at)
