"""Domain model: the ``Record``, ``Principal`` and ``Run`` aggregates and their events.

Events are the only truth. Each command on an aggregate checks its invariant in a
small ``check_…`` method, then triggers a past-tense event; ``apply`` only folds
the event into state. Event fields are plain msgpack-friendly values.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from uuid import NAMESPACE_URL, UUID, SafeUUID, uuid5

from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic

from ledger.errors import (
    InvalidInputError,
    InvalidParentError,
    InvalidTransitionError,
    RetentionRuleError,
    SelfApprovalError,
)
from ledger.serialization import datetime_to_micros


class Kind(StrEnum):
    """What a record is; kinds are never merged."""

    EVIDENCE = "evidence"
    FACT = "fact"
    USER_CONSTRAINT = "user_constraint"
    USER_PREFERENCE = "user_preference"
    INFERENCE = "inference"
    PLAN = "plan"
    REPORT = "report"


class Status(StrEnum):
    """Where a record stands in the status machine."""

    CANDIDATE = "CANDIDATE"
    ACCEPTED = "ACCEPTED"
    REJECTED = "REJECTED"
    STALE = "STALE"
    REVOKED = "REVOKED"
    SUPERSEDED = "SUPERSEDED"


class Outcome(StrEnum):
    """The answer of a read."""

    FOUND = "FOUND"
    MISSING = "MISSING"
    CONFLICT = "CONFLICT"


class Validity(StrEnum):
    """Whether a record may be relied on now (separate from delivery history)."""

    VALID = "VALID"
    NEEDS_REVALIDATION = "NEEDS_REVALIDATION"
    INVALID = "INVALID"


_NAMESPACE = uuid5(NAMESPACE_URL, "urn:provledger")

#: SHA-1 state after the namespace and the prefix a record's name starts with.
_RECORD_SHA1 = hashlib.sha1(_NAMESPACE.bytes + b"record:", usedforsecurity=False)
#: A version 7 UUID's version and variant bits (RFC 9562), and the 62 bits of a
#: record's hash it keeps.
_V7_SET = (7 << 76) | (0b10 << 62)
_LOW_62 = (1 << 62) - 1
_MS_48 = (1 << 48) - 1


def record_uuid(record_id: str, at: datetime) -> UUID:
    """The aggregate id of the record called ``record_id`` proposed ``at``: a
    version 7 UUID (RFC 9562) that sorts by the proposal's time — 48 bits of
    milliseconds since the epoch, then the microseconds within that millisecond
    (12 bits), then 62 bits of ``SHA-1(namespace, "record:" + record_id)``.

    Ids made later sort later: each proposal's key goes at the end of the events'
    index, not at a random place. Every try of a command makes the same id; the
    view keeps it (``pl_records.agg_id``, found by ``Engine.aggregate_of``).
    Records proposed by 0.1 keep theirs (``uuid5(namespace, "record:" + id)``)."""
    sha = _RECORD_SHA1.copy()
    sha.update(record_id.encode())
    ms, sub = divmod(datetime_to_micros(at), 1000)
    head = ((ms & _MS_48) << 80) | (sub << 64)
    return _uuid_of_int(head | _V7_SET | (int.from_bytes(sha.digest()[:8]) & _LOW_62))


def uuid_of_hex(text: str) -> UUID:
    """``UUID(text)`` for the 32 hex digits a stored event's aggregate id is kept
    as on SQLite, without ``UUID.__init__``'s general parsing (a rebuild makes one
    per event); anything else is parsed by ``UUID`` (and what ``int`` would take
    but ``UUID`` refuses — a sign, spaces, underscores — refused as it refuses it)."""
    if len(text) != 32 or not (text.isascii() and text.isalnum()):
        return UUID(text)
    return _uuid_of_int(int(text, 16))


def _uuid_of_int(value: int) -> UUID:
    """The UUID whose 128-bit value is ``value`` (0 <= value < 2**128)."""
    made: UUID = object.__new__(UUID)
    _set(made, "int", value)
    _set(made, "is_safe", _UNKNOWN_SAFETY)
    return made


_set = object.__setattr__
#: Read once: an enum member's attribute access costs more than the rest of the call.
_UNKNOWN_SAFETY = SafeUUID.unknown


def principal_uuid(subject: str) -> UUID:
    """The aggregate id of the principal ``subject``."""
    return uuid5(_NAMESPACE, "principal:" + subject)


def run_uuid(run_id: str) -> UUID:
    """The aggregate id of the run ``run_id``."""
    return uuid5(_NAMESPACE, "run:" + run_id)


@dataclass(frozen=True)
class RetentionRule:
    """What the embedding application requires of one kind's lifetime.

    ``max_lifetime``: a record of this kind must expire within that long of its
    proposal (volatile service state must not be cached as fact forever).
    ``expiry_required``: a record of this kind must have an expiry at all.
    """

    max_lifetime: timedelta | None = None
    expiry_required: bool = False

    def check(self, kind: Kind, expires: datetime | None, now: datetime) -> None:
        """Raise ``RetentionRuleError`` naming the rule a proposal breaks."""
        lifetime = self.max_lifetime
        if (self.expiry_required or lifetime is not None) and expires is None:
            rule = "expiry_required" if lifetime is None else f"max_lifetime={lifetime}"
            raise RetentionRuleError(
                f"retention rule {rule} for kind {kind.value!r}: an expiry is required"
            )
        if lifetime is not None and expires is not None and expires - now > lifetime:
            raise RetentionRuleError(
                f"retention rule max_lifetime={lifetime} for kind "
                f"{kind.value!r}: expiry {expires} is too far away"
            )


#: Kinds whose claim rests on others: revalidation may not leave them without a basis.
NEEDS_BASIS = frozenset({Kind.INFERENCE, Kind.REPORT, Kind.PLAN})


class Record(Aggregate):
    """A memory record: evidence, fact, constraint, preference, inference, plan or report."""

    class Proposed(Aggregate.Created):
        """A principal proposed the record; it starts as ``CANDIDATE``.

        Version 2 added ``supersedes`` (the record this one replaces once accepted);
        version 1 events, written before it existed, read as ``supersedes=None``.
        """

        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """0.1.0 proposals replace nothing."""
            state["supersedes"] = None

        record_id: str
        scope: str
        claim_key: str
        kind: str
        value: Any
        actor: str
        expires: datetime | None
        parents: tuple[str, ...]
        observed: tuple[str, ...]
        conditions: dict[str, Any]
        evidence: dict[str, Any] | None
        run_id: str | None
        supersedes: str | None

    class Accepted(Aggregate.Event):
        """An approver accepted the candidate."""

        actor: str
        note: str

        def apply(self, aggregate: Record) -> None:
            aggregate.status, aggregate.changed = Status.ACCEPTED, (self.actor, self.timestamp)
            aggregate.accepted_once = True

    class Rejected(Aggregate.Event):
        """An approver rejected the candidate."""

        actor: str
        reason: str

        def apply(self, aggregate: Record) -> None:
            aggregate.status, aggregate.changed = Status.REJECTED, (self.actor, self.timestamp)

    class Revoked(Aggregate.Event):
        """An approver withdrew the record; its descendants were marked stale with it."""

        actor: str
        reason: str

        def apply(self, aggregate: Record) -> None:
            aggregate.status, aggregate.changed = Status.REVOKED, (self.actor, self.timestamp)

    class MarkedStale(Aggregate.Event):
        """An ancestor (``cause``) was revoked, or superseded by ``superseded_by``;
        the record needs re-verification. Version 2 added ``superseded_by``;
        version 1 events (0.1.0) were all caused by revocations and read as
        ``superseded_by=None``."""

        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """0.1.0 stale markings were all caused by revocations."""
            state["superseded_by"] = None

        actor: str
        cause: str
        reason: str
        superseded_by: str | None

        def apply(self, aggregate: Record) -> None:
            # (by whom is not kept: an ancestor's revoker may act unseen, ledger.pipeline)
            aggregate.status, aggregate.changed = Status.STALE, None

    class Superseded(Aggregate.Event):
        """A newer record for the same claim (``by``) was accepted in its place."""

        actor: str
        by: str

        def apply(self, aggregate: Record) -> None:
            aggregate.status, aggregate.changed = Status.SUPERSEDED, (self.actor, self.timestamp)
            aggregate.superseded_by = self.by

    class Revalidated(Aggregate.Event):
        """An approver re-verified a record (STALE, or ACCEPTED on an expired basis),
        optionally on a new basis; it became ``status`` again: ACCEPTED, or
        CANDIDATE if it had never been accepted.

        Version 2 added ``status``; version 1 events (0.1.0) all made the record
        ACCEPTED.
        """

        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """0.1.0 revalidations all made the record ACCEPTED."""
            state["status"] = Status.ACCEPTED.value

        actor: str
        note: str
        parents: tuple[str, ...] | None
        observed: tuple[str, ...] | None
        status: str

        def apply(self, aggregate: Record) -> None:
            aggregate.status, aggregate.changed = Status(self.status), (self.actor, self.timestamp)
            if aggregate.status == Status.ACCEPTED:
                aggregate.accepted_once = True
            if self.parents is not None:
                aggregate.parents = tuple(self.parents)
            if self.observed is not None:
                aggregate.observed = tuple(self.observed)

    class Delivered(Aggregate.Event):
        """The record (a report) left the system to a recipient."""

        actor: str
        delivery_id: str
        recipient: str
        channel: str

        def apply(self, aggregate: Record) -> None:
            aggregate.deliveries.append(self.delivery_id)

    class CorrectionIssued(Aggregate.Event):
        """A correction for one delivery was put in the outbox."""

        actor: str
        correction_id: str
        delivery_id: str
        note: str
        replacement: str | None

        def apply(self, aggregate: Record) -> None:
            pass

    class SnapshotErased(Aggregate.Event):
        """An admin erased the evidence bytes behind ``snapshot_ref`` (the record,
        its content hash and its status stay; only the stored bytes are gone)."""

        actor: str
        snapshot_ref: str
        reason: str

        def apply(self, aggregate: Record) -> None:
            pass

    def __init__(
        self,
        *,
        record_id: str,
        scope: str,
        claim_key: str,
        kind: str,
        value: Any,
        actor: str,
        expires: datetime | None,
        parents: tuple[str, ...],
        observed: tuple[str, ...],
        conditions: dict[str, Any],
        evidence: dict[str, Any] | None,
        run_id: str | None,
        supersedes: str | None,
    ) -> None:
        self.record_id = record_id
        self.scope = scope
        self.claim_key = claim_key
        self.kind = Kind(kind)
        self.value = value
        self.proposer = actor
        self.expires = expires
        self.parents = tuple(parents)
        self.observed = tuple(observed)
        self.conditions = dict(conditions)
        self.evidence = evidence
        self.run_id = run_id
        self.supersedes = supersedes
        self.superseded_by: str | None = None
        self.status = Status.CANDIDATE
        self.accepted_once = False
        #: (who, when) of the last status change; None if never decided, or STALE.
        self.changed: tuple[str, datetime] | None = None
        self.deliveries: list[str] = []

    @classmethod
    def propose(cls, *, at: datetime, record_id: str, **fields: Any) -> Record:
        """A new CANDIDATE record (its ``Proposed`` event stamped ``at``)."""
        return cls._create(
            cls.Proposed, id=record_uuid(record_id, at), timestamp=at, record_id=record_id, **fields
        )

    @classmethod
    def proposed_event(cls, *, at: datetime, record_id: str, **fields: Any) -> Record.Proposed:
        """The ``Proposed`` event :meth:`propose` would record, without building the
        aggregate (the batch write path appends events directly)."""
        event: Record.Proposed = _make_event(
            cls.Proposed,
            originator_topic=_RECORD_TOPIC,
            originator_id=record_uuid(record_id, at),
            originator_version=1,
            timestamp=at,
            record_id=record_id,
            **fields,
        )
        return event

    @classmethod
    def stale_event(
        cls,
        *,
        aggregate_id: UUID,
        version: int,
        actor: str,
        cause: str,
        reason: str,
        at: datetime,
        superseded_by: str | None = None,
    ) -> Record.MarkedStale:
        """The ``MarkedStale`` event :meth:`mark_stale` would record on the record
        (aggregate ``aggregate_id``) whose last event has ``version`` and whose
        status the caller checked (CANDIDATE, ACCEPTED or STALE); a concurrent
        change clashes on the version when stored."""
        event: Record.MarkedStale = _make_event(
            cls.MarkedStale,
            originator_id=aggregate_id,
            originator_version=version + 1,
            timestamp=at,
            actor=actor,
            cause=cause,
            reason=reason,
            superseded_by=superseded_by,
        )
        return event

    # -- invariants -------------------------------------------------------------

    def check_status(self, command: str, *allowed: Status) -> None:
        """Raise ``InvalidTransitionError`` unless the status is one of ``allowed``."""
        if self.status not in allowed:
            need = "|".join(s.value for s in allowed)
            raise InvalidTransitionError(
                f"record {self.record_id!r} is {self.status.value}; {command} needs {need}",
                status=self.status.value,
                allowed=tuple(s.value for s in allowed),
            )

    def check_not_proposer(self, actor: str, command: str) -> None:
        """Separation of duties: the proposer may not approve its own record."""
        if actor == self.proposer:
            raise SelfApprovalError(
                f"{actor!r} proposed record {self.record_id!r} and may not {command} it"
            )

    # -- commands ---------------------------------------------------------------

    def accept(self, actor: str, note: str, at: datetime) -> None:
        """CANDIDATE → ACCEPTED."""
        self.check_status("accept", Status.CANDIDATE)
        self.check_not_proposer(actor, "accept")
        self.trigger_event(self.Accepted, actor=actor, note=note, timestamp=at)

    def reject(self, actor: str, reason: str, at: datetime) -> None:
        """CANDIDATE → REJECTED."""
        self.check_status("reject", Status.CANDIDATE)
        self.check_not_proposer(actor, "reject")
        self.trigger_event(self.Rejected, actor=actor, reason=reason, timestamp=at)

    def revoke(self, actor: str, reason: str, at: datetime) -> None:
        """CANDIDATE|ACCEPTED|STALE → REVOKED."""
        self.check_status("revoke", Status.CANDIDATE, Status.ACCEPTED, Status.STALE)
        self.trigger_event(self.Revoked, actor=actor, reason=reason, timestamp=at)

    def mark_stale(self, actor: str, cause: str, reason: str, at: datetime) -> None:
        """Any status but REVOKED/REJECTED → STALE, because ``cause`` was revoked."""
        self.check_status("mark stale", Status.CANDIDATE, Status.ACCEPTED, Status.STALE)
        self.trigger_event(
            self.MarkedStale,
            actor=actor,
            cause=cause,
            reason=reason,
            superseded_by=None,
            timestamp=at,
        )

    def supersede(self, actor: str, by: str, at: datetime) -> None:
        """CANDIDATE|ACCEPTED|STALE → SUPERSEDED: ``by`` was accepted in its place."""
        self.check_not_superseded(by)
        self.check_status("supersede", Status.CANDIDATE, Status.ACCEPTED, Status.STALE)
        self.trigger_event(self.Superseded, actor=actor, by=by, timestamp=at)

    def check_not_superseded(self, by: str) -> None:
        """A record is superseded once: a second replacement must name the first."""
        if self.superseded_by is not None:
            raise InvalidTransitionError(
                f"record {self.record_id!r} was already superseded by {self.superseded_by!r}; "
                f"{by!r} must supersede {self.superseded_by!r} instead"
            )

    def check_revalidatable(
        self, actor: str, parents: tuple[str, ...] | None, basis_expired: bool
    ) -> None:
        """STALE, or ACCEPTED whose basis expired and is given a new one; never by
        the proposer; a kind that needs a basis keeps one."""
        if (renewed := self.status == Status.ACCEPTED and basis_expired) and parents is None:
            raise InvalidTransitionError(
                f"record {self.record_id!r} is ACCEPTED on a basis that expired; revalidate "
                "needs STALE, or a new basis for it (parents)",
                status=self.status.value,
                allowed=(Status.STALE.value, Status.ACCEPTED.value),
            )
        if not renewed:
            self.check_status("revalidate", Status.STALE)
        self.check_not_proposer(actor, "revalidate")
        if parents is not None and not parents and self.kind in NEEDS_BASIS:
            raise InvalidParentError(
                f"revalidate refused: record {self.record_id!r} is {self.kind.value!r} and "
                "needs a basis; parents=[] would leave it none"
            )
        if parents and self.kind == Kind.EVIDENCE:
            raise InvalidParentError(
                f"revalidate refused: evidence {self.record_id!r} is captured, not derived: "
                "it names no parents (give parents=[], or capture the source again)"
            )

    def revalidate(
        self,
        actor: str,
        note: str,
        parents: tuple[str, ...] | None,
        observed: tuple[str, ...] | None,
        at: datetime,
        basis_expired: bool = False,
    ) -> None:
        """STALE (or ACCEPTED on an expired basis, given a new one) → ACCEPTED, or
        CANDIDATE if it was never accepted; optionally replacing the basis."""
        self.check_revalidatable(actor, parents, basis_expired)
        self.trigger_event(
            self.Revalidated,
            actor=actor,
            note=note,
            parents=parents,
            observed=observed,
            status=(Status.ACCEPTED if self.accepted_once else Status.CANDIDATE).value,
            timestamp=at,
        )

    def deliver(
        self, actor: str, delivery_id: str, recipient: str, channel: str, at: datetime
    ) -> None:
        """Record that the record left the system (needs it ACCEPTED)."""
        self.check_status("deliver", Status.ACCEPTED)
        self.trigger_event(
            self.Delivered,
            actor=actor,
            delivery_id=delivery_id,
            recipient=recipient,
            channel=channel,
            timestamp=at,
        )

    def issue_correction(
        self,
        actor: str,
        correction_id: str,
        delivery_id: str,
        note: str,
        replacement: str | None,
        at: datetime,
    ) -> None:
        """Record a correction for one of this record's deliveries."""
        self.trigger_event(
            self.CorrectionIssued,
            actor=actor,
            correction_id=correction_id,
            delivery_id=delivery_id,
            note=note,
            replacement=replacement,
            timestamp=at,
        )

    def check_snapshot(self, snapshot_ref: str) -> None:
        """Raise ``InvalidInputError`` unless this is evidence captured with ``snapshot_ref``."""
        held = (self.evidence or {}).get("snapshot_ref")
        if self.kind != Kind.EVIDENCE or held != snapshot_ref:
            raise InvalidInputError(
                f"record {self.record_id!r} is not evidence captured as {snapshot_ref!r}"
            )

    def erase_snapshot(self, actor: str, snapshot_ref: str, reason: str, at: datetime) -> None:
        """Record that the bytes behind the record's snapshot were erased (any status)."""
        self.check_snapshot(snapshot_ref)
        self.trigger_event(
            self.SnapshotErased,
            actor=actor,
            snapshot_ref=snapshot_ref,
            reason=reason,
            timestamp=at,
        )

    @property
    def dependencies(self) -> tuple[str, ...]:
        """Declared parents then observed dependencies, without repeats."""
        return tuple(dict.fromkeys((*self.parents, *self.observed)))


_RECORD_TOPIC = get_topic(Record)


def _make_event(cls: type, **values: Any) -> Any:
    """An event exactly as its dataclass constructor would build it (fields in
    declaration order, so it encodes to the same bytes), without running the
    frozen constructor's per-field ``object.__setattr__``. Every field must be given."""
    event: Any = object.__new__(cls)
    object.__setattr__(event, "__dict__", {name: values[name] for name in _field_names(cls)})
    return event


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


class Principal(Aggregate):
    """An authenticated subject: its grants and tokens are events."""

    class Registered(Aggregate.Created):
        """The subject was first named by an admin."""

        subject: str

    class Granted(Aggregate.Event):
        """Roles in a scope were granted."""

        actor: str
        scope: str
        roles: tuple[str, ...]

        def apply(self, aggregate: Principal) -> None:
            have = aggregate.grants.get(self.scope, ())
            aggregate.grants[self.scope] = tuple(sorted({*have, *self.roles}))

    class GrantRevoked(Aggregate.Event):
        """Roles in a scope were withdrawn."""

        actor: str
        scope: str
        roles: tuple[str, ...]

        def apply(self, aggregate: Principal) -> None:
            have = aggregate.grants.get(self.scope, ())
            aggregate.grants[self.scope] = tuple(r for r in have if r not in self.roles)

    class TokenIssued(Aggregate.Event):
        """A token was issued; only its sha256 is kept."""

        actor: str
        token_hash: str
        expires: datetime | None

        def apply(self, aggregate: Principal) -> None:
            aggregate.tokens[self.token_hash] = True

    class TokenRevoked(Aggregate.Event):
        """A token was withdrawn."""

        actor: str
        token_hash: str

        def apply(self, aggregate: Principal) -> None:
            aggregate.tokens[self.token_hash] = False

    def __init__(self, *, subject: str) -> None:
        self.subject = subject
        self.grants: dict[str, tuple[str, ...]] = {}
        self.tokens: dict[str, bool] = {}

    @staticmethod
    def create_id(subject: str) -> UUID:
        """Aggregate ids derive from subjects."""
        return principal_uuid(subject)


class Run(Aggregate):
    """One agent task: what it read is recorded so proposals carry observed deps."""

    class Started(Aggregate.Created):
        """The run began."""

        run_id: str
        actor: str

    class ReadRecorded(Aggregate.Event):
        """Records were read (through the ledger or a tool wrapper); version 2 added
        ``valid``: those of them VALID when shown (only those may be relied on)."""

        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """0.1.0 counted every record a run read as VALID then."""
            state["valid"] = state["record_ids"]

        record_ids: tuple[str, ...]
        how: str
        valid: tuple[str, ...]

        def apply(self, aggregate: Run) -> None:
            valid = set(self.valid)
            aggregate.reads.update((rid, rid in valid) for rid in self.record_ids)

    class Ended(Aggregate.Event):
        """The run finished."""

        outcome: str

        def apply(self, aggregate: Run) -> None:
            aggregate.ended = True

    def __init__(self, *, run_id: str, actor: str) -> None:
        self.run_id = run_id
        self.actor = actor
        #: Each record read (in order): whether it was VALID when last shown.
        self.reads: dict[str, bool] = {}
        self.ended = False

    @staticmethod
    def create_id(run_id: str) -> UUID:
        """Aggregate ids derive from run ids."""
        return run_uuid(run_id)
