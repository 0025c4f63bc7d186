"""Erasure of evidence bytes (GDPR Art. 17) without breaking verifiability.

``Admin.erase_snapshot(ref, reason)`` removes the captured bytes behind a
snapshot reference from the snapshot store and, in the same transaction,
appends a ``Record.SnapshotErased`` event (who, which reference, why) to every
evidence record captured with it whose capture was not erased already (one made
again since an earlier erasure). Nothing else changes:

- the log still verifies: Merkle leaves commit to the events, which carry only
  the content *hash*, never the bytes;
- records built on the evidence keep their status (erasure is not revocation;
  an admin who also wants that revokes the evidence);
- ``Session.snapshot(ref)`` then raises ``SnapshotErasedError`` naming the
  erasure, and ``verify`` checks that erased bytes are really gone and that no
  other bytes went missing without an erasure in the log.

Capturing the same bytes again later stores them again (a new act of
collection, with its own record), readable through that record only: a caller
whose readable evidence of them was all erased is still told of the erasure,
whether the bytes came back by a new capture in another scope or behind the
ledger's back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from eventsourcing.utils import get_topic

from ledger.access import Role
from ledger.domain import Record, uuid_of_hex
from ledger.errors import SnapshotErasedError, SnapshotIntegrityError, UnknownSnapshotError
from ledger.validation import check_text
from projections import record_table
from projections.base import Cursor

if TYPE_CHECKING:
    from ledger.caller import Caller
    from ledger.engine import Engine, Write

_SNAPSHOT_REF = re.compile(r"sha256:[0-9a-f]{64}")
_ERASED_TOPIC = get_topic(Record.SnapshotErased)


@dataclass(frozen=True)
class Erasure:
    """An erasure of snapshot bytes as the log records it."""

    snapshot_ref: str
    records: tuple[str, ...]  # the evidence records captured with it
    position: int  # log position of the (last) erasure event
    actor: str
    reason: str
    at: datetime
    deleted: bool = True  # False: no bytes were stored any more when it was recorded
    #: False: the database's files may still hold the bytes for now (see
    #: ``Recorder.scrub_deleted``: a reader kept SQLite's checkpoint from
    #: completing, or PostgreSQL's snapshot table could not be rewritten).
    scrubbed: bool = True


def _check_ref(ref: object) -> str:
    """``ref`` as stored (lower case: a hash pasted from another tool may be in
    capitals), or ``UnknownSnapshotError`` saying what a reference looks like."""
    given = ref.lower() if isinstance(ref, str) and ref.isascii() else ref
    if not isinstance(given, str) or not _SNAPSHOT_REF.fullmatch(given):
        raise UnknownSnapshotError(
            f"snapshot {ref!r:.100} is not a sha256:<64 hex digits> reference (an evidence "
            "record's is its evidence's snapshot_ref: `provledger get ID --json`)"
        )
    return given


def evidence_with(engine: Engine, c: Cursor, ref: str) -> dict[str, Any]:
    """The evidence records captured with ``ref`` (every scope): each one's id,
    scope, aggregate id (``agg_id``) and the position its view row is as of
    (``from_pos``) by record id, in id order."""
    c.execute(
        engine.dialect.q(
            "SELECT record_id, scope, agg_id, from_pos FROM {t}pl_records WHERE snapshot_ref=? "
            f"AND {record_table.NOW_FILTER} ORDER BY record_id"
        ),
        (ref,),
    )
    return {str(r["record_id"]): r for r in c.fetchall()}


def _erasure(engine: Engine, c: Cursor, ref: str, rid: str, row: Any) -> Erasure | None:
    """The newest erasure the log records of record ``rid``'s capture of ``ref``."""
    newest: Erasure | None = None
    for note in engine.recorder.record_events(c, row, rid):
        if note.topic != _ERASED_TOPIC:
            continue
        event = engine.projector.decode(note)
        if event.snapshot_ref == ref:
            newest = Erasure(
                snapshot_ref=ref,
                records=(rid,),
                position=note.id,
                actor=event.actor,
                reason=event.reason,
                at=event.timestamp,
            )
    return newest


def capture_erased(engine: Engine, c: Cursor, row: Any) -> bool:
    """Whether the log holds an erasure of the capture of record ``row`` (a record
    captures one snapshot): its events' topics, not vouched for. Internal."""
    notes = engine.recorder.select_record_events(c, uuid_of_hex(row["agg_id"]))
    return any(note.topic == _ERASED_TOPIC for note in notes)


def erased_all(engine: Engine, c: Cursor, ref: str, records: Mapping[str, Any]) -> Erasure | None:
    """The newest erasure of ``ref`` if every one of ``records`` (:func:`evidence_with`'s
    rows) had its capture of it erased, else None (found at the first record whose
    capture stands: the others' histories are not read)."""
    newest: Erasure | None = None
    for rid, row in records.items():
        found = _erasure(engine, c, ref, rid, row)
        if found is None:
            return None
        if newest is None or found.position > newest.position:
            newest = found
    return None if newest is None else dataclasses.replace(newest, records=tuple(records))


def check_not_erased(engine: Engine, c: Cursor, ref: str) -> None:
    """Raise ``SnapshotErasedError`` if the log records the erasure of every capture
    of ``ref``."""
    found = erased_all(engine, c, ref, evidence_with(engine, c, ref))
    if found is not None:
        raise erased_error(found)


def erased_error(found: Erasure) -> SnapshotErasedError:
    """The error a read of erased bytes raises, naming the erasure."""
    return SnapshotErasedError(
        f"snapshot {found.snapshot_ref!r} was erased at {found.at.isoformat()} by "
        f"{found.actor!r} (log position {found.position}): {found.reason}"
    )


class _ErasedAlready(Exception):
    """Inside an erasure's transaction: every capture of its bytes was erased already."""

    def __init__(self, found: Erasure) -> None:
        super().__init__(found.snapshot_ref)
        self.found = found


def erase_snapshot(
    engine: Engine,
    ref: str,
    reason: str,
    actor: str,
    authorize: Callable[[Cursor], None] | None = None,
) -> Erasure:
    """Remove the bytes behind ``ref`` and record who erased them and why, in one
    write transaction (see the module docstring); returns the erasure.
    ``authorize``: called first in that transaction, it may refuse the erasure.

    Raises:
        UnknownSnapshotError: ``ref`` is malformed or no evidence was captured with it.
        SnapshotErasedError: its bytes were erased already.
        InvalidValueError: ``reason`` is empty or not printable text.
    """
    engine.check_open()
    ref = _check_ref(ref)
    check_text(reason, "reason")

    def work(w: Write) -> Erasure:
        if authorize is not None:
            authorize(w.c)
        records = evidence_with(engine, w.c, ref)
        if not records:
            raise UnknownSnapshotError(f"snapshot {ref!r} is unknown")
        stored = engine.recorder.snapshot_content(w.c, ref) is not None
        if not stored and (found := erased_all(engine, w.c, ref, records)) is not None:
            raise _ErasedAlready(found)
        # Only captures not erased yet (made again since an erasure): one erased
        # before is not erased twice, nor is its scope told of the new capture.
        # (Read by topic, not vouched for: tampering elsewhere in a record's
        # history is verify's to name, and must not keep its bytes stored.)
        fresh = {r: row for r, row in records.items() if not capture_erased(engine, w.c, row)}
        records = fresh or records  # (every one erased, yet the bytes stored: all again)
        now = engine.now()
        events: list[Any] = []
        for rid, row in records.items():
            record = engine.load_record(w.c, rid, row)
            record.erase_snapshot(actor, ref, reason, now)
            events += record.collect_events()
        position = w.append(events)
        engine.recorder.delete_snapshot(w.c, ref)
        return Erasure(
            snapshot_ref=ref,
            records=tuple(records),
            position=position,
            actor=actor,
            reason=reason,
            at=now,
            deleted=stored,
        )

    try:
        done = engine.transact(work)
    except _ErasedAlready as already:
        # Asked again, as after an erasure whose process died between its commit
        # and its scrub: scrub now what the database's files may still hold.
        with engine.inflight.entered():
            clean = engine.recorder.scrub_deleted(already.found.position)
        left = (
            "the database's files are scrubbed of its bytes now"
            if clean
            else "the database's files may still hold some of its bytes: run "
            "`provledger scrub-erased` (Ledger.scrub_erased) once its readers are done"
        )
        raise SnapshotErasedError(f"{erased_error(already.found)}; {left}") from None
    if done.deleted:
        with engine.inflight.entered():  # a scrub under way is waited for by close()
            if not engine.recorder.scrub_deleted(done.position):
                done = dataclasses.replace(done, scrubbed=False)
    return done


def scrub_erased(engine: Engine, authorize: Callable[[Cursor], None] | None = None) -> bool:
    """Do again what an erasure does after its commit (``Recorder.scrub_deleted``),
    for every erasure so far: what one whose ``scrubbed`` was False (or that was
    interrupted before its scrub) left in the database's files. True when none of
    the erased bytes are left there as far as the database can tell, and when
    nothing was ever erased. ``authorize``: called first, it may refuse."""
    engine.check_open()
    with engine.reading() as c:
        if authorize is not None:
            authorize(c)
        newest = engine.recorder.newest_of_topic(c, _ERASED_TOPIC)
    if newest is None:
        return True
    with engine.inflight.entered():  # a scrub under way is waited for by close()
        return engine.recorder.scrub_deleted(newest)


def snapshot(caller: Caller, ref: str) -> bytes:
    """``Session.snapshot``: the bytes, re-hashed, if evidence carrying them is
    readable and not all of it was erased."""
    ref = _check_ref(ref)
    engine = caller.engine
    with caller.reading() as c:
        evidence = evidence_with(engine, c, ref)
        readable = {
            rid: row
            for rid, row in evidence.items()
            if Role.READ.value in caller.roles(c, row["scope"])
        }
        # Read through the caller's own evidence only: once each of those
        # captures was erased, bytes stored again (captured anew elsewhere, or
        # put back) are not theirs to read.
        gone = erased_all(engine, c, ref, readable)
        if gone is not None:
            raise erased_error(gone)
        found = engine.recorder.snapshot_content(c, ref) if readable else None
    if found is None:
        raise UnknownSnapshotError(
            f"snapshot {ref!r} is unknown or not readable by {caller.subject!r}"
        )
    stored = found[0]
    if stored is None or "sha256:" + hashlib.sha256(stored).hexdigest() != ref:
        raise SnapshotIntegrityError(f"snapshot {ref!r}: stored bytes do not match the hash")
    return stored


__all__ = [
    "Erasure",
    "check_not_erased",
    "erase_snapshot",
    "erased_all",
    "erased_error",
    "evidence_with",
    "scrub_erased",
    "snapshot",
]
