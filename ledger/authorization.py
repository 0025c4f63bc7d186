"""Authorization replay: did every event's actor hold what it needed, by the log alone?

:class:`~ledger.access_log.AccessState` folds the ``Principal`` events
(registrations, grants, tokens) into who held which role in which scope, and
which tokens were valid, after any log position. :class:`AuthorizationReplay`
walks the whole log in order and checks each record and run event against that
state and against the status machine, using nothing but the events before it:

========================  ===============================================================
event                     must hold
========================  ===============================================================
``Proposed``              a valid token; ``propose`` in the scope; ``read`` in the scope of
                          every parent and observed dependency, each of which exists and is
                          not REVOKED, REJECTED, STALE or SUPERSEDED; a record it supersedes
                          exists in the same scope
``Accepted``              a valid token; ``approve``; not the proposer; the record is a
                          CANDIDATE and every dependency ACCEPTED; neither it nor a record
                          it rests on expired at the event's time; if the version it was
                          proposed to replace is CANDIDATE, ACCEPTED or STALE and not yet
                          superseded, the next event is that version's ``Superseded`` by it
``Rejected``              a valid token; ``approve``; not the proposer; a CANDIDATE
``Revoked``               a valid token; ``approve``; CANDIDATE, ACCEPTED or STALE
``MarkedStale``           a valid token; ``approve`` in the scope of the cause, which exists,
                          is REVOKED (SUPERSEDED when ``superseded_by`` is set) and is
                          among the record's dependencies, transitively; the record is
                          CANDIDATE, ACCEPTED or STALE
``Superseded``            a valid token; ``approve``; CANDIDATE, ACCEPTED or STALE; the
                          newer record it names is the one the latest ``Accepted`` accepted,
                          in its scope, proposed to replace a version of its line (a
                          capture also replaces the captures of its source before it)
``Revalidated``           a valid token; ``approve``; not the proposer; STALE, or ACCEPTED
                          on a new basis when a record it rests on (not the record itself)
                          had expired; the record not expired; every dependency (the new
                          basis, if given) ACCEPTED, nothing the new basis rests on expired
``Delivered``             a valid token; ``deliver``; ACCEPTED, and neither it nor a record
                          it rests on expired at the event's time
``CorrectionIssued``      a valid token; ``deliver``; it names a delivery of this record,
                          and a replacement, if any, that was proposed and is another
                          record
``SnapshotErased``        the admin (the embedding host)
``Principal`` events      the admin
``Run.Started``           a valid token; ``propose`` or ``read`` in some scope
========================  ===============================================================

A *valid token* is one issued to the actor before the event, not revoked before
it, and not expired at the event's timestamp. An event of a type this table has
no rule for is refused: every type a command writes has one (a type no version
knows cannot even be decoded), so such an event was written behind the ledger's
back, and letting it pass would switch off the status machine for its record
(:attr:`AuthorizationReplay.unchecked` counts them by type). A status this table
cannot follow (a revalidation of a record never accepted) becomes *unknown* and
is not checked until a known event sets it again.

Grants and tokens come only from events here: forged rows in the access views
(``pl_grants``, ``pl_tokens``) cannot make an event pass.
:func:`~ledger.access_log.access_from_log` gives run-time checks the same
footing: a principal's roles and token from its own events (vouched by their
Merkle leaves), the view serving only as an index.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.access_log import ADMIN, AccessState
from ledger.domain import Principal, Record, Run, Status
from ledger.serialization import canonical, datetime_to_micros
from projections import access as access_view

if TYPE_CHECKING:
    pass

_BLOCKING = (
    Status.REVOKED.value,
    Status.REJECTED.value,
    Status.STALE.value,
    Status.SUPERSEDED.value,
)
#: The principal and run events commands write (any other is refused): those the
#: access view folds.
_WRITTEN = access_view.EVENTS
#: What withdrawing a record leaves it as; whatever rests on it is then STALE.
_WITHDRAWN = (Status.REVOKED.value, Status.STALE.value, Status.SUPERSEDED.value)
#: What accepting a newer version supersedes (``transitions.supersession``).
_REPLACEABLE = (Status.CANDIDATE.value, Status.ACCEPTED.value, Status.STALE.value)


@dataclass(slots=True)
class _RecordState:
    record_id: str
    scope: str
    proposer: str
    status: str | None  # None: unknown (an event this replay has no rule for)
    dependencies: tuple[str, ...]
    accepted_once: bool = False
    #: The version of the record's latest event so far.
    version: int = 1
    #: Its own expiry (microseconds), the record it was proposed to replace, and
    #: the record that replaced it.
    expires: int | None = None
    supersedes: str | None = None
    superseded_by: str | None = None
    #: The earliest expiry of it and everything it rests on, and the replay's
    #: basis epoch it was worked out in (-1: never).
    earliest: int | None = None
    earliest_epoch: int = -1
    #: A capture's (claim key, URI, position of its proposal, what it holds: its
    #: content hash and a digest of its value); None for other records.
    capture: tuple[str, str, int, str, bytes] | None = None


@dataclass
class AuthorizationReplay:
    """Checks each event of the log, in order, against the log before it.

    It keeps one small state per record for the whole log, so that is what its
    memory grows with: records are keyed by their aggregate id's integer (the
    ``UUID`` objects are let go), and each scope and principal name is kept once,
    however many records name it."""

    access: AccessState = field(default_factory=AccessState)
    #: By the integer of the record's aggregate id (``UUID.int``).
    records: dict[int, _RecordState] = field(default_factory=dict)
    by_id: dict[str, _RecordState] = field(default_factory=dict)
    #: Each scope and proposer name seen, once (decoding makes a new string per event).
    names: dict[str, str] = field(default_factory=dict)
    #: Snapshot reference -> (position, "captured" | "erased", record id, by, reason).
    snapshots: dict[str, tuple[int, str, str, str, str]] = field(default_factory=dict)
    #: The latest version so far of each principal and run (records keep theirs).
    versions: dict[int, int] = field(default_factory=dict)
    #: Events of types without a rule here (each refused), by type name.
    unchecked: Counter[str] = field(default_factory=Counter)
    #: How many records have an expiry of their own (none: no expiry to work out).
    expiring: int = 0
    #: Bumped whenever a revalidation gives a record a basis with another earliest
    #: expiry (``_earliest``).
    basis_epoch: int = 0
    #: The record of the latest ``Accepted`` event (a ``Superseded`` names it).
    last_accepted: str | None = None
    #: (newer, older, position): the acceptance at ``position`` of a record
    #: proposed to replace ``older``, still replaceable; the next event must be
    #: ``older``'s ``Superseded`` by ``newer`` (one transaction writes both).
    owed: tuple[str, str, int] | None = None
    #: Delivery id -> the record delivered (a correction names a delivery of its record).
    delivered: dict[str, str] = field(default_factory=dict)
    #: Correction id -> the record whose delivery it corrects.
    corrections: dict[str, str] = field(default_factory=dict)
    events: int = 0

    def apply(self, position: int, event: Any) -> str | None:
        """Check and fold one decoded event; returns the first problem with it, or None."""
        self.events += 1
        owed = self._owed(position, event) if self.owed is not None else None
        if isinstance(event, Record.Proposed):
            return owed or self._proposed(position, event)
        if isinstance(event, Record.Event):
            return owed or self._record_event(position, event)
        what = f"{type(event).__name__} at position {position}"
        if type(event) not in _WRITTEN:
            return self._unwritten(what, event)
        key = event.originator_id.int
        gap = _out_of_sequence(what, event.originator_version, self.versions.get(key, 0))
        self.versions[key] = event.originator_version
        # Folded all the same: a removed event is named once, not again by every
        # later event of its principal.
        problem = self._access_or_run(position, event)
        return owed or gap or problem

    def _owed(self, position: int, event: Any) -> str | None:
        """Why ``event`` cannot follow the acceptance in :attr:`owed`: only the
        supersession it owes can. Checked here, not only at the end of the log, so
        that a later withdrawal of the older version cannot hide the two versions
        accepted side by side in between."""
        assert self.owed is not None
        newer, older, accepted_at = self.owed
        self.owed = None
        state = self.records.get(event.originator_id.int)
        superseding = isinstance(event, Record.Superseded) and event.by == newer
        if superseding and state is not None and state.record_id == older:
            return None
        what = type(event).__name__
        if isinstance(event, Record.Event) and state is not None:
            what += f" of {state.record_id!r}"
        return (
            f"{what} at position {position}: the acceptance of {newer!r} "
            f"at position {accepted_at} just before lacks the supersession of {older!r}, "
            "which it was proposed to replace: the log lacks the supersession that "
            "accepting it makes"
        )

    def _access_or_run(self, position: int, event: Any) -> str | None:
        if isinstance(event, Principal.Event):
            return self.access.apply(position, event)
        if isinstance(event, Run.Started):
            if not self._token(event.actor, event):
                return (
                    f"Run.Started of run {event.run_id!r} at position {position}: "
                    f"{event.actor!r} held no valid token then"
                )
            if not self.access.holds_anywhere(event.actor, ("propose", "read")):
                return (
                    f"Run.Started of run {event.run_id!r} at position {position}: "
                    f"{event.actor!r} held neither 'propose' nor 'read' in any scope then"
                )
        return None

    def unmarked(self) -> Iterator[str]:
        """After the whole log: each CANDIDATE or ACCEPTED record resting on one
        REVOKED, STALE or SUPERSEDED. Every command that withdraws a record marks
        everything resting on it STALE in the same transaction, so only a log
        written behind the ledger's back leaves one (a revocation without its
        stale markings, say)."""
        live = (Status.CANDIDATE.value, Status.ACCEPTED.value)
        for state in self.records.values():
            if state.accepted_once and state.supersedes is not None:
                old = self.by_id.get(state.supersedes)
                if old is not None and old.status in _REPLACEABLE:
                    yield (
                        f"{state.record_id!r} was accepted, yet {state.supersedes!r}, which "
                        f"it was proposed to replace, is {old.status}: the log lacks the "
                        "supersession that accepting it makes"
                    )
            if state.status not in live:
                continue
            for dep in state.dependencies:
                found = self.by_id.get(dep)
                if found is not None and found.status in _WITHDRAWN:
                    yield (
                        f"{state.record_id!r} is {state.status}, yet its dependency {dep!r} "
                        f"is {found.status}: the log lacks the stale marking that "
                        "withdrawing it makes"
                    )
                    break

    def _unwritten(self, what: str, event: Any) -> str:
        """An event of a type no command writes: counted, and refused."""
        name = type(event).__name__
        self.unchecked[name] += 1
        return f"{what}: no command writes {name} events (it was added behind the ledger's back)"

    # -- records ----------------------------------------------------------------------

    def _token(self, actor: str, event: Any) -> bool:
        return self.access.has_valid_token(actor, datetime_to_micros(event.timestamp))

    def _proposed(self, position: int, event: Record.Proposed) -> str | None:
        deps = tuple(dict.fromkeys((*event.parents, *event.observed)))
        what = f"Proposed of {event.record_id!r} at position {position}"
        problem = _out_of_sequence(what, event.originator_version, 0)
        problem = problem or self._proposal_problem(what, event, deps)
        names = self.names
        state = _RecordState(
            record_id=event.record_id,
            scope=names.setdefault(event.scope, event.scope),
            proposer=names.setdefault(event.actor, event.actor),
            status=Status.CANDIDATE.value,
            dependencies=deps,
            expires=None if event.expires is None else datetime_to_micros(event.expires),
            supersedes=getattr(event, "supersedes", None),
            capture=_capture_of(event, position),
        )
        self.expiring += state.expires is not None
        self.records[event.originator_id.int] = state
        self.by_id[event.record_id] = state
        ref = (event.evidence or {}).get("snapshot_ref")
        if isinstance(ref, str):
            self.snapshots[ref] = (position, "captured", event.record_id, event.actor, "")
        return problem

    def _proposal_problem(
        self, what: str, event: Record.Proposed, deps: tuple[str, ...]
    ) -> str | None:
        if event.record_id in self.by_id:
            return f"{what}: the record was proposed before"
        if not self._token(event.actor, event):
            return f"{what}: {event.actor!r} held no valid token then"
        if not self.access.holds(event.actor, event.scope, "propose"):
            return f"{what}: {event.actor!r} did not hold 'propose' in scope {event.scope!r} then"
        replaced = getattr(event, "supersedes", None)
        if replaced is not None:
            old = self.by_id.get(replaced)
            if old is None or old.scope != event.scope:
                return f"{what}: the record it supersedes, {replaced!r}, is not in its scope"
        for dep in deps:
            found = self.by_id.get(dep)
            if found is None:
                return f"{what}: its dependency {dep!r} was never proposed"
            if not self.access.holds(event.actor, found.scope, "read"):
                return (
                    f"{what}: {event.actor!r} could not read its dependency {dep!r} "
                    f"(no 'read' in scope {found.scope!r})"
                )
            if found.status in _BLOCKING:
                return f"{what}: its dependency {dep!r} was {found.status}"
        return None

    def _record_event(self, position: int, event: Any) -> str | None:
        kind = type(event).__name__
        state = self.records.get(event.originator_id.int)
        if state is None:
            return f"{kind} at position {position} belongs to no proposed record"
        what = f"{kind} of {state.record_id!r} at position {position}"
        gap = _out_of_sequence(what, event.originator_version, state.version)
        state.version = event.originator_version
        rule = _RULES.get(kind)
        if rule is None:
            return self._unwritten(what, event)
        problem = self._check(what, state, event, rule)
        self._fold(state, event, rule[3], position)  # folded after a gap too
        return gap or problem

    def _check(
        self, what: str, state: _RecordState, event: Any, rule: tuple[str, Any, bool, Any]
    ) -> str | None:
        """The first rule of ``rule`` (role, allowed statuses, separation of duties)
        that ``event`` breaks, or None."""
        role, allowed, separate, _after = rule
        actor = str(getattr(event, "actor", None))
        if role == ADMIN:
            return None if actor == ADMIN else f"{what}: appended by {actor!r}, not by the admin"
        if not self._token(actor, event):
            return f"{what}: {actor!r} held no valid token then"
        scope = state.scope
        if isinstance(event, Record.MarkedStale):
            cause = self.by_id.get(event.cause)
            if cause is None:
                return f"{what}: its cause {event.cause!r} was never proposed"
            # Revoked, or superseded by the record named in ``superseded_by``.
            why = Status.REVOKED if getattr(event, "superseded_by", None) is None else None
            wanted = (why or Status.SUPERSEDED).value
            if cause.status is not None and cause.status != wanted:
                return f"{what}: its cause {event.cause!r} was {cause.status}, not {wanted}"
            if not self._rests_on(state, event.cause):
                return f"{what}: the record does not rest on its cause {event.cause!r}"
            scope = cause.scope  # the revoker needed approve where the revoked record is
        if not self.access.holds(actor, scope, role):
            return f"{what}: {actor!r} did not hold {role!r} in scope {scope!r} then"
        if separate and actor == state.proposer:
            return f"{what}: {actor!r} approved its own proposal (separation of duties)"
        if allowed and state.status is not None and state.status not in allowed:
            return f"{what}: the record was {state.status}; that needs {'|'.join(allowed)}"
        if isinstance(event, Record.Revalidated):
            problem = self._revalidation_expired(what, state, event)
            if problem is not None:
                return problem
        if isinstance(event, Record.Revalidated) and state.status == _A:
            problem = self._basis_expired(what, state, event)
            if problem is not None:
                return problem
        if isinstance(event, Record.Superseded):
            problem = self._superseded_by(what, state, event)
            if problem is not None:
                return problem
        if isinstance(event, Record.Delivered) and event.delivery_id in self.delivered:
            earlier = self.delivered[event.delivery_id]
            return (
                f"{what}: its delivery id {event.delivery_id!r} is that of a delivery "
                f"of {earlier!r}"
            )
        if isinstance(event, (Record.Accepted, Record.Delivered)):
            problem = self._expired(what, state, event)
            if problem is not None:
                return problem
        if isinstance(event, Record.CorrectionIssued):
            return self._correction(what, state, event)
        if isinstance(event, (Record.Accepted, Record.Revalidated)):
            return self._dependencies_accepted(what, state, event)
        return None

    def _correction(self, what: str, state: _RecordState, event: Any) -> str | None:
        """Why a correction cannot stand: the delivery it corrects is no delivery
        of its record, or its replacement was never proposed or is the record."""
        earlier = self.corrections.get(event.correction_id)
        if earlier is not None:
            return (
                f"{what}: its correction id {event.correction_id!r} is that of a correction "
                f"of {earlier!r}"
            )
        if self.delivered.get(event.delivery_id) != state.record_id:
            return f"{what}: it names {event.delivery_id!r}, which was no delivery of the record"
        replacement = event.replacement
        if replacement is not None and (
            replacement == state.record_id or replacement not in self.by_id
        ):
            return f"{what}: its replacement {replacement!r} is the record or was never proposed"
        return None

    def _expired(self, what: str, state: _RecordState, event: Any) -> str | None:
        """Why a record could not be accepted or delivered then: it, or a record it
        rests on, had expired (accept and deliver need it usable)."""
        at = datetime_to_micros(event.timestamp)
        if state.expires is not None and state.expires <= at:
            return f"{what}: the record had expired"
        earliest = self._earliest_ancestor_expiry(state)
        if earliest is not None and earliest <= at:
            return f"{what}: a record it rests on had expired"
        return None

    def _revalidation_expired(self, what: str, state: _RecordState, event: Any) -> str | None:
        """Why a record could not be revalidated then: it had expired, or the new
        basis it is given rests on a record that had."""
        at = datetime_to_micros(event.timestamp)
        if state.expires is not None and state.expires <= at:
            return f"{what}: the record had expired"
        for dep in event.parents or ():
            found = self.by_id.get(dep)
            earliest = None if found is None or not self.expiring else self._earliest(found)
            if earliest is not None and earliest <= at:
                return f"{what}: its new basis {dep!r} rests on a record that had expired"
        return None

    def _basis_expired(self, what: str, state: _RecordState, event: Any) -> str | None:
        """Why an ACCEPTED record could not be revalidated: only one whose basis
        expired (an ancestor's expiry, not its own) is, and only on a new basis."""
        if event.parents is None:
            return f"{what}: the record was {_A}; revalidating it needs a new basis"
        at = datetime_to_micros(event.timestamp)
        earliest = self._earliest_ancestor_expiry(state)
        if earliest is None or earliest > at:
            return (
                f"{what}: the record was {_A} and no record it rests on had expired; "
                f"revalidating it needs it {_S}"
            )
        return None

    def _earliest_ancestor_expiry(self, state: _RecordState) -> int | None:
        """The earliest own expiry among the records ``state`` rests on, transitively."""
        if not self.expiring:  # no record expires: nothing to walk
            return None
        earliest: int | None = None
        for dep in state.dependencies:
            found = self.by_id.get(dep)
            value = None if found is None else self._earliest(found)
            if value is not None and (earliest is None or value < earliest):
                earliest = value
        return earliest

    def _earliest(self, state: _RecordState) -> int | None:
        """The earliest expiry of ``state`` and everything it rests on. Kept per
        record until a revalidation gives some record a new basis (the epoch), so
        a log's acceptances cost one step per record, not a walk of its ancestry."""
        epoch = self.basis_epoch
        if state.earliest_epoch == epoch:
            return state.earliest
        stack: list[tuple[_RecordState, bool]] = [(state, False)]
        while stack:
            node, ready = stack.pop()
            if node.earliest_epoch == epoch:
                continue
            deps = [d for d in map(self.by_id.get, node.dependencies) if d is not None]
            if not ready:
                stack.append((node, True))
                stack.extend((d, False) for d in deps if d.earliest_epoch != epoch)
                continue
            earliest = node.expires
            for dep in deps:
                # A dependency still unworked here is on a cycle (only a forged log
                # has one): it adds nothing.
                value = dep.earliest if dep.earliest_epoch == epoch else None
                if value is not None and (earliest is None or value < earliest):
                    earliest = value
            node.earliest, node.earliest_epoch = earliest, epoch
        return state.earliest

    def _superseded_by(self, what: str, state: _RecordState, event: Any) -> str | None:
        """Why a ``Superseded`` cannot stand: it names the record accepted in the
        same transaction, just before, in the same scope."""
        by = self.by_id.get(event.by)
        if by is None:
            return f"{what}: it names {event.by!r} as the newer record, which was never proposed"
        if by.scope != state.scope:
            return f"{what}: the newer record {event.by!r} is not in its scope"
        if by.status != _A or self.last_accepted != event.by:
            return f"{what}: the newer record {event.by!r} was not the one just accepted"
        if not self._same_line(by, state.record_id):
            return f"{what}: the newer record {event.by!r} is no version of it"
        return None

    def _same_line(self, newer: _RecordState, older: str) -> bool:
        """Whether ``older`` is in the line of versions ``newer`` was proposed to
        replace: what it names, what that one names, and the records those were
        replaced by (a capture replaces the newest capture of its source); or, for
        a capture, any capture of its source proposed before it (its acceptance
        replaces those holding other content)."""
        seen: set[str] = set()
        stack = [newer.supersedes]
        while stack:
            rid = stack.pop()
            if rid is None or rid in seen:
                continue
            if rid == older:
                return True
            seen.add(rid)
            found = self.by_id.get(rid)
            if found is not None:
                stack += [found.supersedes, found.superseded_by]
        was = self.by_id.get(older)
        if newer.capture is None or was is None or was.capture is None:
            return False
        claim, uri, proposed, *held = newer.capture
        return (
            was.capture[:2] == (claim, uri)
            and was.capture[2] < proposed
            and (
                list(was.capture[3:]) != held  # the same bytes and value replace nothing
            )
        )

    def _rests_on(self, state: _RecordState, cause: str) -> bool:
        """Whether ``cause`` is among ``state``'s dependencies, transitively, as they
        stand now (a stale marking reaches only what rests on what was withdrawn)."""
        seen: set[str] = set()
        stack = list(state.dependencies)
        while stack:
            dep = stack.pop()
            if dep == cause:
                return True
            if dep not in seen:
                seen.add(dep)
                found = self.by_id.get(dep)
                if found is not None:
                    stack.extend(found.dependencies)
        return False

    def _dependencies_accepted(self, what: str, state: _RecordState, event: Any) -> str | None:
        deps = state.dependencies
        if isinstance(event, Record.Revalidated) and event.parents is not None:
            deps = tuple(dict.fromkeys((*event.parents, *(event.observed or ()))))
        for dep in deps:
            found = self.by_id.get(dep)
            if found is None:
                return f"{what}: its dependency {dep!r} was never proposed"
            if found.status is not None and found.status != Status.ACCEPTED.value:
                return f"{what}: its dependency {dep!r} was {found.status}"
        return None

    def _fold(self, state: _RecordState, event: Any, after: str | None, position: int) -> None:
        if isinstance(event, Record.Revalidated):
            if event.parents is not None or event.observed is not None:
                before = self._earliest(state) if self.expiring else None
                parents = event.parents if event.parents is not None else state.dependencies
                state.dependencies = tuple(dict.fromkeys((*parents, *(event.observed or ()))))
                if self.expiring:
                    state.earliest_epoch = -1
                    if self._earliest(state) != before:
                        # What rests on it rests on another expiry now: worked out again.
                        self.basis_epoch += 1
            # A record never accepted may come back as a CANDIDATE in later versions.
            state.status = Status.ACCEPTED.value if state.accepted_once else None
            return
        if isinstance(event, Record.SnapshotErased):
            self.snapshots[event.snapshot_ref] = (
                position,
                "erased",
                state.record_id,
                str(event.actor),
                event.reason,
            )
            return
        if isinstance(event, Record.Accepted):
            self.last_accepted = state.record_id
            older = self.by_id.get(state.supersedes) if state.supersedes is not None else None
            if older is not None and older.superseded_by is None and older.status in _REPLACEABLE:
                self.owed = (state.record_id, older.record_id, position)
        if isinstance(event, Record.Superseded):
            state.superseded_by = event.by
        if isinstance(event, Record.Delivered):  # the first keeps its id (a repeat is named)
            self.delivered.setdefault(event.delivery_id, state.record_id)
        if isinstance(event, Record.CorrectionIssued):
            self.corrections.setdefault(event.correction_id, state.record_id)
        if after is not None:
            state.status = after
            if after == Status.ACCEPTED.value:
                state.accepted_once = True


def _capture_of(event: Record.Proposed, position: int) -> tuple[str, str, int, str, bytes] | None:
    """A capture's (claim key, URI, position of its proposal, content hash, value
    digest), for :meth:`_same_line`."""
    evidence = event.evidence
    if not evidence:
        return None
    held = hashlib.blake2b(canonical(event.value), digest_size=16).digest()
    return (
        event.claim_key,
        str(evidence.get("uri")),
        position,
        str(evidence.get("content_hash")),
        held,
    )


def _out_of_sequence(what: str, version: int, before: int) -> str | None:
    """Why an aggregate's event of ``version``, after one of version ``before`` (0:
    none), cannot be next: each aggregate's events are numbered 1, 2, 3 … in log order."""
    if version == before + 1:
        return None
    here = f"{what}: it is version {version} of its aggregate"
    if version == before + 2:
        return f"{here}, but version {before + 1} is not in the log (an event was removed)"
    if version > before + 2:
        return (
            f"{here}, but versions {before + 1} to {version - 1} are not in the log "
            "(events were removed)"
        )
    return f"{here}, after version {before} (events were reordered)"


_C, _A, _S = Status.CANDIDATE.value, Status.ACCEPTED.value, Status.STALE.value

#: Event type -> (role needed, statuses it may follow, separation of duties, status after).
_RULES: dict[str, tuple[str, tuple[str, ...], bool, str | None]] = {
    "Accepted": ("approve", (_C,), True, _A),
    "Rejected": ("approve", (_C,), True, Status.REJECTED.value),
    "Revoked": ("approve", (_C, _A, _S), False, Status.REVOKED.value),
    "MarkedStale": ("approve", (_C, _A, _S), False, _S),
    "Superseded": ("approve", (_C, _A, _S), False, Status.SUPERSEDED.value),
    # ACCEPTED too: a record whose basis expired is revalidated on a new one (_check).
    "Revalidated": ("approve", (_S, _A), True, None),
    "Delivered": ("deliver", (_A,), False, None),
    "CorrectionIssued": ("deliver", (), False, None),
    "SnapshotErased": (ADMIN, (), False, None),
}

__all__ = ["AuthorizationReplay"]
