"""What a record's events tell of it: its status after each event, its bases,
its expiry, folded in log order (:func:`_tell`).

The one definition used both to write a bundle (checked against the views) and
to verify one (checked against what the bundle states).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ledger import redaction
from ledger.domain import Status, Validity
from ledger.values import HIDDEN

#: The status each record event leaves its record in (``Revalidated`` names its own).
_STATUS_AFTER = {
    "Proposed": Status.CANDIDATE,
    "Accepted": Status.ACCEPTED,
    "Rejected": Status.REJECTED,
    "Revoked": Status.REVOKED,
    "MarkedStale": Status.STALE,
    "Superseded": Status.SUPERSEDED,
}
_FINAL = (Status.REVOKED, Status.REJECTED, Status.SUPERSEDED)


@dataclass
class _Told:
    """What one record's events say of it, folded in log order. ``None`` (and
    ``bases_known`` false) where an event whose bytes are withheld leaves it open;
    ``unknown`` says which event, for the report."""

    record: str
    record_id: str | None = None
    status: Status | None = None
    by: str = "no event"  # the event that set ``status``
    parents: tuple[str, ...] | None = None
    observed: tuple[str, ...] | None = None
    bases: set[str] = field(default_factory=set)  # every basis ever declared or observed
    bases_known: bool = True
    #: The version it was proposed to replace (a ``prov:Revision`` in PROV-JSON).
    supersedes: str | None = None
    expires: datetime | None = None
    unknown: list[str] = field(default_factory=list)
    #: What the proposal states of the record (None: its bytes are withheld):
    #: scope, claim key, kind, value, conditions, evidence.
    proposal: dict[str, Any] | None = None

    def validities(self, at: datetime | None) -> tuple[Validity, ...]:
        """The validities the status allows (``at``: when it was stated, for the expiry)."""
        if self.status is None:
            return tuple(Validity)
        if self.status == Status.ACCEPTED:
            if at is not None and self.expires is not None and self.expires <= at:
                return (Validity.NEEDS_REVALIDATION,)
            return (Validity.VALID, Validity.NEEDS_REVALIDATION)
        if self.status in _FINAL:
            return (Validity.INVALID,)
        return (Validity.NEEDS_REVALIDATION,)


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{value!r} is not a list of record ids")
    return tuple(str(v) for v in value)


def _tell(record: str, events: Iterable[tuple[int, str, Any]]) -> _Told:
    """Fold ``(position, type, fields)`` of one record's events, in log order, into
    what they say of it; ``fields`` is None for an event whose bytes are withheld
    (only the type the manifest lists for it is known). The one definition used
    both to write a bundle and to verify one.

    Raises:
        ValueError, KeyError, TypeError: an event's fields are not a record event's.
    """
    told = _Told(record)
    for position, kind, fields in events:
        where = f"{kind} at position {position}"
        if not isinstance(fields, dict):  # withheld
            if kind in ("Proposed", "Revalidated"):
                told.parents = told.observed = None
                told.bases_known = False
                told.unknown.append(f"its basis ({where}, bytes withheld)")
            if kind == "Proposed":
                told.record_id = record  # the manifest's word: the bytes are withheld
            if kind == "Revalidated":
                told.status, told.by = None, where
                told.unknown.append(f"its status after {where} (bytes withheld)")
            elif kind in _STATUS_AFTER:
                told.status, told.by = _STATUS_AFTER[kind], f"{where} (bytes withheld)"
            else:
                # Only manifest.json says it is a {kind}: withheld bytes may be of
                # any type (a MarkedStale or a Revoked listed as a Delivered).
                told.unknown.append(
                    f"its status after {where}, whose type only manifest.json states "
                    "(bytes withheld)"
                )
            continue
        if kind == "Proposed":
            told.record_id = str(fields["record_id"])
            told.parents, told.observed = _names(fields["parents"]), _names(fields["observed"])
            told.bases.update(told.parents, told.observed)
            replaced = fields.get("supersedes")  # none in 0.1.0's proposals
            told.supersedes = None if replaced is None else str(replaced)
            expires = fields.get("expires")
            told.expires = expires if isinstance(expires, datetime) else None
            told.proposal = {
                name: fields.get(name)
                for name in ("scope", "claim_key", "kind", "value", "conditions", "evidence")
            }
        if kind == "Revalidated":
            # Version 1 revalidations (0.1.0) all made the record ACCEPTED.
            told.status = Status(str(fields.get("status", Status.ACCEPTED.value)))
            told.by = where
            for name in ("parents", "observed"):
                if fields.get(name) is not None:
                    setattr(told, name, _names(fields[name]))
                    told.bases.update(_names(fields[name]))
        elif kind in _STATUS_AFTER:
            told.status, told.by = _STATUS_AFTER[kind], where
    return told


def _as_shown(
    told: _Told, key: str, rid: str, hidden: frozenset[str], names: dict[str, str]
) -> _Told:
    """``told`` (of the record stored under ``key``, shown as ``rid``) with the ids
    it names as :mod:`ledger.redaction` shows them to the caller."""
    return dataclasses.replace(
        told,
        record_id=rid if told.record_id == key else told.record_id,
        parents=None if told.parents is None else redaction.ids(told.parents, hidden, names),
        observed=None if told.observed is None else redaction.ids(told.observed, hidden, names),
        bases={redaction.one(b, hidden, names) or b for b in told.bases} - {HIDDEN},
        supersedes=None
        if told.supersedes is None
        else redaction.one(told.supersedes, hidden, names) or told.supersedes,
    )


#: summary.txt's word for each event type its history lines tell.
HISTORY_LABELS = {
    "Proposed": "proposed",
    "Accepted": "approved",
    "Rejected": "rejected",
    "Revoked": "revoked",
    "Revalidated": "revalidated",
    "Delivered": "delivered",
    "SnapshotErased": "erased",
}


def one_line(text: str) -> str:
    """``text`` with every character that is not printable escaped (``\\n``,
    ``\\u202e``), as summary.txt writes each line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
