"""Immutable value objects the public API returns (never aggregates)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal, TypedDict, TypeVar

from ledger.domain import Kind, Outcome, Status, Validity

#: What every output shows in place of a record in a scope the caller holds no
#: grant in (its id, reason and claim are never shown; several are shown once).
HIDDEN = "<hidden>"
#: The reason shown when a hidden dependency's revocation made a record STALE.
WITHHELD = "a dependency outside your scopes was revoked"
#: The reason shown when a hidden dependency's supersession (a new version of it
#: accepted) made a record STALE.
WITHHELD_SUPERSEDED = "a dependency outside your scopes was superseded"


def withheld(superseded_by: str | None) -> str:
    """The reason shown for a hidden cause of a stale marking: revoked, or
    superseded (``superseded_by``, as the caller is shown it, is set)."""
    return WITHHELD if superseded_by is None else WITHHELD_SUPERSEDED


T = TypeVar("T")


class LedgerStats(TypedDict):
    """``Ledger.stats()``: the ``backend`` (``sqlite``, ``postgresql``, ``memory``),
    stored ``events``, the newest event's log ``position``, ``records`` and
    ``statuses`` (records per status name), ``deliveries``, ``corrections``
    issued, stored ``snapshots`` of evidence bytes and ``runs``; then
    ``corrections_owed``, the deliveries that owe a correction now in any scope
    (what ``Session.corrections_due`` lists, to a principal delivering in every
    scope; None when the views are in an earlier version's layout, left so by a
    read-only open or ``catch_up=False``: they cannot tell), and
    ``last_event_at``, the newest event's time (the time index's: the latest
    event time up to it, as writers' clocks need not rise with the log), None for
    an empty ledger. All are read in one read transaction."""

    backend: str
    events: int
    position: int
    records: int
    statuses: dict[str, int]
    deliveries: int
    corrections: int
    snapshots: int
    runs: int
    corrections_owed: int | None
    last_event_at: datetime | None


class Evidence(TypedDict):
    """What an evidence record pins (``RecordView.evidence``): the source's
    ``uri``, when its bytes were ``fetched_at``, their ``content_hash``
    (``sha256:…``), the ``snapshot_ref`` they are stored under (``Session.snapshot``)
    and their ``size`` in bytes."""

    uri: str
    fetched_at: datetime
    content_hash: str
    snapshot_ref: str
    size: int


def assembled(cls: type[T], values: dict[str, Any]) -> T:
    """The frozen dataclass ``cls`` with every field given by name in ``values``,
    as its constructor builds it but without its ``object.__setattr__`` call per
    field (a read builds a view per record); ``values`` becomes the instance's own
    attribute dict, so the caller must not keep it."""
    count = _FIELD_COUNTS.get(cls)
    if count is None:
        count = _FIELD_COUNTS[cls] = len(fields(cls))  # type: ignore[arg-type]
    if len(values) != count:
        raise TypeError(f"{cls.__name__} needs {count} fields, got {tuple(values)}")
    made: Any = object.__new__(cls)
    object.__setattr__(made, "__dict__", values)
    return made  # type: ignore[no-any-return]


#: How many fields each class given to ``assembled`` has.
_FIELD_COUNTS: dict[type, int] = {}


@dataclass(frozen=True)
class StaleCause:
    """One reason a record was marked STALE: ``cause`` was revoked (``reason``) or
    superseded (by ``superseded_by``), at log ``position``.

    ``blocking`` is False once the cause no longer rests under the record (an
    ancestor in between was given a new basis): the record still needs
    revalidation, but not because of this cause.
    """

    cause: str
    reason: str
    superseded_by: str | None
    position: int
    at: datetime
    blocking: bool = True


@dataclass(frozen=True)
class Correction:
    """A correction issued for one delivery (an outbox entry; nothing is sent)."""

    correction_id: str
    delivery_id: str
    record_id: str
    note: str
    replacement: str | None
    issued_at: datetime
    issued_by: str
    position: int


@dataclass(frozen=True)
class Delivery:
    """One delivery of a record: history, never changed by later events."""

    delivery_id: str
    record_id: str
    recipient: str
    channel: str
    delivered_at: datetime
    delivered_by: str
    position: int
    corrections: tuple[Correction, ...] = ()

    @property
    def state(self) -> Literal["DELIVERED"]:
        """Always ``"DELIVERED"``: nothing un-delivers a report."""
        return "DELIVERED"


@dataclass(frozen=True)
class RecordView:
    """A record as the views see it now (or at an as-of position)."""

    id: str
    scope: str
    claim_key: str
    kind: Kind
    value: Any
    status: Status
    validity: Validity
    expires: datetime | None
    effective_expires: datetime | None
    expiry_source: str | None
    parents: tuple[str, ...]
    observed: tuple[str, ...]
    conditions: dict[str, Any]
    proposer: str
    created_at: datetime
    evidence: Evidence | None
    cause: str | None
    reason: str | None
    deliveries: tuple[Delivery, ...]
    position: int
    #: The record this one was proposed to replace (``propose(supersedes=…)``).
    supersedes: str | None = None
    #: The record accepted in this one's place, once it is ``SUPERSEDED``.
    superseded_by: str | None = None
    #: When STALE because ``cause`` was superseded (not revoked): what superseded it.
    cause_superseded_by: str | None = None
    #: Every cause that marked this record STALE since it was last revalidated,
    #: oldest first (``cause``/``reason`` are the newest).
    stale_causes: tuple[StaleCause, ...] = ()

    @property
    def undeclared(self) -> tuple[str, ...]:
        """Dependencies observed at run time but not declared as parents."""
        return tuple(o for o in self.observed if o not in self.parents)


@dataclass(frozen=True)
class ReadResult:
    """The answer of the eligibility chain for one ``(scope, claim_key)``."""

    outcome: Outcome
    records: tuple[RecordView, ...]
    scope: str
    claim_key: str
    at: datetime

    @property
    def value(self) -> Any:
        """The agreed value when FOUND, else None."""
        return self.records[0].value if self.outcome == Outcome.FOUND else None


@dataclass(frozen=True)
class Reason:
    """Why one record is or is not usable."""

    record: RecordView
    usable: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Explanation:
    """Per record, why it is or is not usable for a read.

    ``omitted``: how many records of the claim, none of them usable, an
    explanation asked with a ``limit`` leaves out (0 when it shows every one)."""

    outcome: Outcome
    scope: str
    claim_key: str
    at: datetime
    entries: tuple[Reason, ...]
    omitted: int = 0

    def __str__(self) -> str:
        lines = [f"{self.scope}/{self.claim_key} at {self.at.isoformat()}: {self.outcome}"]
        for e in self.entries:
            why = "usable" if e.usable else "; ".join(e.reasons)
            line = f"  {e.record.id} [{e.record.kind}] {e.record.status}: {why}"
            if e.record.undeclared:
                line += f" (observed but undeclared: {', '.join(e.record.undeclared)})"
            lines.append(line)
        if self.omitted:
            lines.append(f"  ... and {self.omitted} more records, none usable, not shown")
        return "\n".join(lines)


#: The texts an audit event's details may hold, each with the PROV attribute an
#: export gives it (``ledger.prov``; ``verify-bundle`` checks them against the
#: carried events).
DETAIL_ATTRIBUTES = (
    ("note", "pl:note"),
    ("reason", "pl:reason"),
    ("recipient", "pl:recipient"),
    ("channel", "pl:channel"),
    ("delivery_id", "pl:deliveryId"),
    ("correction_id", "pl:correctionId"),
    ("snapshot_ref", "pl:snapshotRef"),
)


@dataclass(frozen=True)
class AuditEvent:
    """One event in a record's history."""

    position: int
    type: str
    at: datetime
    actor: str | None
    details: dict[str, Any]


@dataclass(frozen=True)
class AuditTrail:
    """The whole history of a record, including revoked ones."""

    record: RecordView
    events: tuple[AuditEvent, ...]
    undeclared: tuple[str, ...]


@dataclass(frozen=True)
class Revocation:
    """What a revocation changed: the root is REVOKED, its descendants STALE.

    ``affected`` is the root and the descendants marked STALE that the caller
    may see; descendants in scopes it holds no grant in are marked all the same
    but neither named nor counted. ``stale`` is ``affected`` without the root:
    the descendants the caller may see that became STALE. ``position`` is the log
    position of the ``Revoked`` event: ``as_of(position=position - 1)`` is the
    state before.
    """

    root: str
    affected: tuple[str, ...]
    position: int
    stale: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class RevocationPreview:
    """What revoking ``root`` would do now (``Session.preview_revoke``; nothing written).

    ``stale``: the descendants the caller may see that would become STALE;
    ``deliveries``: deliveries of the root or of those records, in scopes where the
    caller holds ``read``, ``deliver`` or ``audit`` (where it is shown deliveries), whose
    record is VALID now and would then owe a correction.
    """

    root: str
    stale: tuple[str, ...]
    deliveries: tuple[Delivery, ...]


@dataclass(frozen=True)
class CorrectionDue:
    """A delivery that owes a correction (``Session.corrections_due``): its record
    left VALID after the delivery (revoked, superseded, STALE, expired), or is VALID
    again on another basis than the delivered copy rests on, with no correction
    since.

    ``scope`` is the record's scope; ``validity`` and ``status`` are the record's
    now; ``cause`` the id of the record whose withdrawal it answers (the record
    itself when REVOKED, the revoked or superseded ancestor when STALE; ``<hidden>``
    outside the caller's scopes; None otherwise); ``reason`` the text of its newest
    change of status (a revocation's or rejection's reason, an acceptance's or
    revalidation's note), as its ``RecordView`` gives it. ``superseded_by`` and
    ``cause_superseded_by`` are the record's (:class:`RecordView`): what replaced it
    when SUPERSEDED, and what replaced ``cause`` when it is STALE because ``cause``
    was superseded rather than revoked.
    """

    delivery: Delivery
    scope: str
    validity: Validity
    status: Status
    cause: str | None
    reason: str | None
    superseded_by: str | None = None
    cause_superseded_by: str | None = None


@dataclass(frozen=True)
class RebuildReport:
    """The outcome of emptying every view and replaying the log into it."""

    events: int
    seconds: float
    digest_before: str
    digest_after: str

    @property
    def matched(self) -> bool:
        """Whether the rebuilt views equal what was there before."""
        return self.digest_before == self.digest_after

    @property
    def events_per_second(self) -> float:
        """Replay rate."""
        return self.events / self.seconds if self.seconds > 0 else float("inf")
