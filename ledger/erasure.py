"""Erasure of evidence bytes (GDPR Art. 17) without breaking verifiability.

``Admin.erase_snapshot(ref, reason)`` removes the captured bytes behind a
snapshot reference from the snapshot store and, in the same transaction,
appends a ``Record.SnapshotErased`` event (who, which reference, why) to every
evidence record captured with it. Nothing else changes:

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
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from eventsourcing.utils import get_topic

from ledger.domain import Record, uuid_of_hex
from ledger.errors import SnapshotErasedError, UnknownSnapshotError
from ledger.validation import check_text
from projections import validity as validity_view
from projections.base import Cursor

if TYPE_CHECKING:
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


def _check_ref(ref: object) -> str:
    if not isinstance(ref, str) or not _SNAPSHOT_REF.fullmatch(ref):
        raise UnknownSnapshotError(f"snapshot {ref!r} is not a sha256:<hex> reference")
    return ref


def evidence_with(engine: Engine, c: Cursor, ref: str) -> dict[str, Any]:
    """The evidence records captured with ``ref`` (every scope): each one's id,
    scope and aggregate id (``agg_id``) by record id, in id order."""
    c.execute(
        engine.dialect.q(
            "SELECT record_id, scope, agg_id FROM {t}pl_records WHERE snapshot_ref=? "
            f"AND {validity_view.NOW_FILTER} ORDER BY record_id"
        ),
        (ref,),
    )
    return {str(r["record_id"]): r for r in c.fetchall()}


def erased(engine: Engine, c: Cursor, ref: str, records: Mapping[str, Any]) -> dict[str, Erasure]:
    """Of ``records`` (:func:`evidence_with`'s rows), those whose capture of ``ref``
    the log records erased: the newest erasure of each, by record id."""
    found: dict[str, Erasure] = {}
    for rid, row in records.items():
        for note in engine.recorder.select_record_events(c, uuid_of_hex(row["agg_id"])):
            if note.topic != _ERASED_TOPIC:
                continue
            event = engine.projector.decode(note)
            if event.snapshot_ref == ref:
                found[rid] = Erasure(
                    snapshot_ref=ref,
                    records=(rid,),
                    position=note.id,
                    actor=event.actor,
                    reason=event.reason,
                    at=event.timestamp,
                )
    return found


def erasure_of(
    engine: Engine, c: Cursor, ref: str, records: Mapping[str, Any] | None = None
) -> Erasure | None:
    """The newest erasure of ``ref`` recorded in the log (read with ``c``) for
    ``records`` (default: every evidence record captured with it), or None."""
    records = evidence_with(engine, c, ref) if records is None else records
    each = erased(engine, c, ref, records)
    if not each:
        return None
    newest = max(each.values(), key=lambda e: e.position)
    return dataclasses.replace(newest, records=tuple(records))


def check_not_erased(
    engine: Engine, c: Cursor, ref: str, records: Mapping[str, Any] | None = None
) -> None:
    """Raise ``SnapshotErasedError`` if the log records an erasure of ``ref`` (for
    ``records``, default every evidence record captured with it)."""
    found = erasure_of(engine, c, ref, records)
    if found is not None:
        raise erased_error(found)


def erased_error(found: Erasure) -> SnapshotErasedError:
    """The error a read of erased bytes raises, naming the erasure."""
    return SnapshotErasedError(
        f"snapshot {found.snapshot_ref!r} was erased at {found.at.isoformat()} by "
        f"{found.actor!r} (log position {found.position}): {found.reason}"
    )


def erase_snapshot(engine: Engine, ref: str, reason: str, actor: str) -> Erasure:
    """Remove the bytes behind ``ref`` and record who erased them and why, in one
    write transaction (see the module docstring); returns the erasure.

    Raises:
        UnknownSnapshotError: ``ref`` is malformed or no evidence was captured with it.
        SnapshotErasedError: its bytes were erased already.
        InvalidValueError: ``reason`` is empty or not printable text.
    """
    engine.check_open()
    ref = _check_ref(ref)
    check_text(reason, "reason")

    def work(w: Write) -> Erasure:
        records = evidence_with(engine, w.c, ref)
        if not records:
            raise UnknownSnapshotError(f"snapshot {ref!r} is unknown")
        stored = engine.recorder.snapshot_content(w.c, ref) is not None
        if not stored:
            check_not_erased(engine, w.c, ref)
        now = engine.now()
        events: list[Any] = []
        for rid, row in records.items():
            record = engine.load_record(w.c, rid, row)
            record.erase_snapshot(actor, ref, reason, now)
            events += record.collect_events()
        position = w.append(events)
        w.c.execute(engine.dialect.q("DELETE FROM {t}pl_snapshots WHERE ref=?"), (ref,))
        return Erasure(
            snapshot_ref=ref,
            records=tuple(records),
            position=position,
            actor=actor,
            reason=reason,
            at=now,
            deleted=stored,
        )

    return engine.transact(work)


__all__ = [
    "Erasure",
    "check_not_erased",
    "erase_snapshot",
    "erased",
    "erased_error",
    "erasure_of",
    "evidence_with",
]
