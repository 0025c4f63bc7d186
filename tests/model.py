"""A naive in-memory reference model of SPEC §3-5, for the state-machine tests.

It is meant to be obviously correct by reading, so it does the opposite of the
library's indexes: plain dicts, no stored effective expiry, no reverse-dependency
index. Every question walks the graph from scratch:

- ``ancestors`` walks parents and observed dependencies on every call;
- ``descendants`` is a fixed-point scan over *all* records;
- ``usable`` checks the record and every ancestor literally (status ACCEPTED and
  ``at`` before every expiry), instead of trusting "ACCEPTED implies ancestors
  ACCEPTED".

Commands check every rule first and raise :class:`Refused` (naming each broken
rule with the error classes it may be reported as) without touching the state;
only then do they change it. ``Model.commit`` keeps a deep copy of the state per
log position so as-of reads can be compared with what the model said then.

Choices where SPEC is silent (documented so a reader can disagree):

- The record an expiry is blamed on (``expiry_source``, "ancestor X expired at")
  is the one with the earliest expiry in the ancestry; on a tie, the first met in
  a depth-first walk: the record itself, then each dependency's ancestry in order
  (declared parents, then observed).
- ``explain`` reports the first failing stage of the eligibility chain only
  (status, then time, then applicability), as SPEC §4 lists the stages "in order".
- A correction answers a delivery if it was issued after the delivery and after
  the record last left ACCEPTED, so a report revalidated and invalidated again
  needs a new correction.
- Supersession (SPEC §13.3): a new version never rests on the version it
  replaces. A run's own read of OLD is not an observed dependency of a proposal
  that supersedes OLD (the run read the version it replaces); any other path from
  the new record down to OLD is refused, at proposal and again at approval (a
  new basis given on revalidation can create one). The supersession happens when
  the new record is first approved: by ``accept``, or by ``revalidate`` when it
  was made STALE while still a candidate.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ledger import Kind, Outcome, Status, Validity
from ledger.errors import (
    CycleError,
    DuplicateRecordError,
    ExpiryInPastError,
    InvalidInputError,
    InvalidKindError,
    InvalidParentError,
    InvalidTransitionError,
    InvalidValueError,
    LedgerError,
    NotUsableError,
    SelfApprovalError,
    UnknownDeliveryError,
    UnknownRecordError,
)
from ledger.serialization import canonical

BLOCKING = (Status.REVOKED, Status.REJECTED, Status.STALE, Status.SUPERSEDED)
#: Statuses nothing moves a record out of; a revocation or supersession leaves them alone.
FINAL = (Status.REVOKED, Status.REJECTED, Status.SUPERSEDED)
#: Statuses a supersession can replace.
REPLACEABLE = (Status.CANDIDATE, Status.ACCEPTED, Status.STALE)
#: An old version withdrawn this way is not superseded by its new version's approval.
WITHDRAWN = (Status.REVOKED, Status.REJECTED)
#: Kinds revalidation may not leave without a basis.
NEEDS_BASIS = (Kind.INFERENCE, Kind.REPORT, Kind.PLAN)

Problem = tuple[frozenset[type[LedgerError]], str]


class Refused(Exception):
    """The model refuses a command: each problem is (acceptable error classes, why)."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(why for _, why in problems))
        self.problems = tuple(problems)

    @property
    def errors(self) -> frozenset[type[LedgerError]]:
        """Every error class the ledger may raise for this refusal."""
        return frozenset().union(*(errors for errors, _ in self.problems))


def _one(error: type[LedgerError], why: str) -> Problem:
    return (frozenset({error}), why)


def _refuse_if(problems: list[Problem]) -> None:
    if problems:
        raise Refused(problems)


@dataclass
class Rec:
    """One record as the model sees it."""

    id: str
    claim_key: str
    kind: Kind
    value: Any
    proposer: str
    expires: datetime | None
    parents: tuple[str, ...]
    observed: tuple[str, ...]
    conditions: dict[str, Any]
    supersedes: str | None = None  # the record it replaces once approved
    status: Status = Status.CANDIDATE
    cause: str | None = None  # the revoked or superseded root, while STALE
    cause_superseded_by: str | None = None  # what superseded ``cause``, if it was superseded
    reason: str | None = None  # why it is STALE, REVOKED or REJECTED
    superseded_by: str | None = None  # the record approved in its place, once SUPERSEDED
    left_accepted_step: int | None = None  # when it last stopped being ACCEPTED
    left_accepted_at: datetime | None = None  # and the instant it did
    accepted_once: bool = False  # ever ACCEPTED (a STALE candidate revalidates to CANDIDATE)
    basis_step: int = 0  # the step from which its current dependencies hold
    #: Every (cause, reason, superseded by) that marked it STALE since it was last
    #: revalidated, oldest first.
    stale_causes: list[tuple[str, str, str | None]] = field(default_factory=list)

    @property
    def deps(self) -> tuple[str, ...]:
        """Declared parents, then observed dependencies, without repeats."""
        return tuple(dict.fromkeys((*self.parents, *self.observed)))


@dataclass
class Delivery:
    """One delivery and the corrections issued for it (with the model step of each)."""

    id: str
    record_id: str
    step: int
    basis: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # (parents, observed) then
    lineage: frozenset[tuple[str, str, str]] = frozenset()  # ``State.basis_edges`` then
    corrections: list[tuple[str, int, datetime]] = field(default_factory=list)


@dataclass(frozen=True)
class Entry:
    """One line of an explanation."""

    id: str
    usable: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Answer:
    """What ``explain`` (and so ``read``) must say for one claim."""

    outcome: Outcome
    entries: tuple[Entry, ...]

    @property
    def usable(self) -> tuple[str, ...]:
        """Ids of the usable records, in proposal order (what ``read`` returns)."""
        return tuple(e.id for e in self.entries if e.usable)


@dataclass(frozen=True)
class Due:
    """One entry of ``corrections_due``."""

    delivery_id: str
    record_id: str
    validity: Validity
    status: Status


@dataclass
class State:
    """Everything observable; pure queries only."""

    records: dict[str, Rec] = field(default_factory=dict)  # in proposal order
    deliveries: dict[str, Delivery] = field(default_factory=dict)  # in delivery order

    # -- the graph, walked from scratch every time ----------------------------

    def ancestry(self, rid: str) -> list[str]:
        """The record, then every ancestor, depth-first in dependency order, once each."""
        seen: list[str] = []

        def walk(node: str) -> None:
            if node in seen:
                return
            seen.append(node)
            for dep in self.records[node].deps:
                walk(dep)

        walk(rid)
        return seen

    def descendants(self, root: str) -> set[str]:
        """Every record that depends on ``root``, transitively: a fixed-point scan."""
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for rid, rec in self.records.items():
                if rid == root or rid in found:
                    continue
                if any(dep == root or dep in found for dep in rec.deps):
                    found.add(rid)
                    changed = True
        return found

    def basis_edges(self, rid: str) -> frozenset[tuple[str, str, str]]:
        """Every (dependency, dependent, how) edge above ``rid``: what it rests on,
        transitively, and through which declared parent or observed read."""
        edges: set[tuple[str, str, str]] = set()
        for node in self.ancestry(rid):
            rec = self.records[node]
            edges.update((p, node, "parent") for p in rec.parents)
            edges.update((o, node, "observed") for o in rec.observed if o not in rec.parents)
        return frozenset(edges)

    def rests_on(self, deps: Iterable[str], rid: str) -> bool:
        """Whether ``rid`` is one of ``deps`` or an ancestor of one of them."""
        return any(rid in self.ancestry(dep) for dep in deps if dep in self.records)

    def effective_expiry(self, rid: str) -> tuple[datetime | None, str | None]:
        """The earliest expiry in the record's ancestry (itself included), and whose."""
        best: tuple[datetime | None, str | None] = (None, None)
        for node in self.ancestry(rid):
            expires = self.records[node].expires
            if expires is not None and (best[0] is None or expires < best[0]):
                best = (expires, node)
        return best

    def usable(self, rid: str, at: datetime) -> bool:
        """ACCEPTED, every ancestor ACCEPTED, and ``at`` before every expiry (SPEC §4.2)."""
        for node in self.ancestry(rid):
            rec = self.records[node]
            if rec.status != Status.ACCEPTED:
                return False
            if rec.expires is not None and not at < rec.expires:
                return False
        return True

    def validity(self, rid: str, at: datetime) -> Validity:
        """SPEC §5: VALID while usable; INVALID once revoked, rejected or superseded;
        else it needs work."""
        if self.records[rid].status in FINAL:
            return Validity.INVALID
        return Validity.VALID if self.usable(rid, at) else Validity.NEEDS_REVALIDATION

    # -- reading ----------------------------------------------------------------

    def reasons(
        self,
        rid: str,
        at: datetime,
        context: Mapping[str, Any] | None = None,
        kinds: Iterable[Kind] | None = None,
    ) -> tuple[str, ...]:
        """Why the record is not usable (empty when it is), first failing stage only."""
        rec = self.records[rid]
        if rec.status == Status.CANDIDATE:
            # and what its acceptance waits for, or is refused by
            waits = []
            for dep in rec.deps:
                status = self.records[dep].status
                if status == Status.CANDIDATE:
                    waits.append(f"waits for its dependency {dep!r} (CANDIDATE) to be accepted")
                elif status != Status.ACCEPTED:
                    waits.append(f"cannot be accepted while its dependency {dep!r} is {status}")
            return ("candidate: not yet approved", *waits)
        if rec.status == Status.REJECTED:
            return (f"rejected: {rec.reason}",)
        if rec.status == Status.REVOKED:
            return (f"revoked: {rec.reason}",)
        if rec.status == Status.STALE:
            # SPEC §13.2: every cause is kept; explain names those still resting
            # under the record (an ancestor given a new basis resolves its cause).
            above = set(self.ancestry(rid)[1:])
            blocking = [c for c in rec.stale_causes if c[0] in above]
            if not blocking:
                resolved = ", ".join(dict.fromkeys(c[0] for c in rec.stale_causes))
                return (
                    f"stale until revalidated: its causes ({resolved}) no longer rest under it",
                )
            return tuple(
                dict.fromkeys(
                    f"stale because {cause} was superseded by {by}"
                    if by is not None
                    else f"stale because {cause} was revoked: {why}"
                    for cause, why, by in blocking
                )
            )
        if rec.status == Status.SUPERSEDED:
            return (f"superseded by {rec.superseded_by}",)
        # ACCEPTED: every ancestor must be ACCEPTED too (the library never says this
        # text; the model does, so a broken invariant shows up as a difference).
        for node in self.ancestry(rid)[1:]:
            status = self.records[node].status
            if status != Status.ACCEPTED:
                return (f"ancestor {node} is {status}",)
        expires, source = self.effective_expiry(rid)
        if expires is not None and at >= expires:
            if source == rid:
                return (f"expired at {expires.isoformat()}",)
            return (f"ancestor {source} expired at {expires.isoformat()}",)
        ctx = dict(context or {})
        out = []
        for key, wanted in rec.conditions.items():
            if key not in ctx:
                out.append(f"condition {key}={wanted!r} not met: context has no {key!r}")
            elif canonical(ctx[key]) != canonical(wanted):
                out.append(f"condition {key}={wanted!r} not met: context has {ctx[key]!r}")
        if kinds is not None and rec.kind not in set(kinds):
            out.append(f"kind {rec.kind.value} not requested")
        return tuple(out)

    def explain(
        self,
        claim_key: str,
        at: datetime,
        context: Mapping[str, Any] | None = None,
        kinds: Iterable[Kind] | None = None,
    ) -> Answer:
        """SPEC §4: per record why, then FOUND / CONFLICT / MISSING."""
        wanted = None if kinds is None else list(kinds)
        entries = []
        for rid, rec in self.records.items():
            if rec.claim_key == claim_key:
                why = self.reasons(rid, at, context, wanted)
                entries.append(Entry(rid, not why, why))
        values = {canonical(self.records[e.id].value) for e in entries if e.usable}
        if not values:
            outcome = Outcome.MISSING
        elif len(values) > 1:
            outcome = Outcome.CONFLICT
        else:
            outcome = Outcome.FOUND
        return Answer(outcome, tuple(entries))

    def listing(
        self,
        at: datetime,
        status: Status | None = None,
        validity: Validity | None = None,
        kind: Kind | None = None,
        claim_prefix: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> tuple[str, ...]:
        """SPEC §13.3 ``records``: ids in id order after ``after``, filtered, at most ``limit``."""
        out = [
            rid
            for rid, rec in sorted(self.records.items())
            if (after is None or rid > after)
            and (status is None or rec.status == status)
            and (validity is None or self.validity(rid, at) == validity)
            and (kind is None or rec.kind == kind)
            and (claim_prefix is None or rec.claim_key.startswith(claim_prefix))
        ]
        return tuple(out[:limit])

    def corrections_due(self, now: datetime) -> tuple[Due, ...]:
        """Deliveries owing a correction (SPEC §13.2): the record left VALID after the
        delivery and no correction came after that (after the step it left ACCEPTED,
        or, when it expired first, at or after the expiry instant); or it is VALID
        again on another basis than the delivered copy cites — its own, or that of
        a record it rests on — with no correction since that basis."""
        out = []
        for d in self.deliveries.values():
            rec = self.records[d.record_id]
            validity = self.validity(d.record_id, now)
            instant: datetime | None = None
            if validity != Validity.VALID:
                if rec.status == Status.ACCEPTED:
                    since, instant = d.step, self.effective_expiry(d.record_id)[0]
                else:
                    since = max(d.step, rec.left_accepted_step or 0)
                    expiry = self.effective_expiry(d.record_id)[0]
                    left_at = rec.left_accepted_at
                    if since > d.step and expiry is not None and left_at is not None:
                        # It expired before its status changed: it left VALID then.
                        since, instant = (d.step, expiry) if expiry < left_at else (since, None)
            elif (rec.parents, rec.observed) != d.basis:
                since = max(d.step, rec.basis_step)
            elif (lineage := self.basis_edges(d.record_id)) != d.lineage:
                # the same parents, but one of the records it rests on was re-based
                # (every record above it now, also one re-based on nothing, which
                # is in the lineage only as a dependency)
                above = {node for edge in lineage for node in edge[:2]} | {d.record_id}
                since = max(d.step, *(self.records[node].basis_step for node in above))
            else:
                continue
            if any(
                step > since and (instant is None or at >= instant) for _, step, at in d.corrections
            ):
                continue
            out.append(Due(d.id, d.record_id, validity, rec.status))
        return tuple(out)


@dataclass(frozen=True)
class Snapshot:
    """The model's state right after a command, for as-of comparisons.

    ``first``..``last`` are the log positions that must answer with this state
    (a command's events commit together, so any position inside it shows all of it).
    """

    first: int
    last: int
    time: datetime
    state: State


class Model:
    """The state machine of SPEC §3 and §5 over a :class:`State`."""

    def __init__(self, now: datetime) -> None:
        self.state = State()
        self.now = now
        self.step = 0
        self.history: dict[int, Snapshot] = {}

    @property
    def records(self) -> dict[str, Rec]:
        """The current records by id."""
        return self.state.records

    def advance(self, delta: timedelta) -> None:
        """Time moves forward (the ledger's clock is moved by the same amount)."""
        self.now += delta

    def commit(self, first: int, last: int) -> None:
        """Remember the state as what log positions ``first``..``last`` must show."""
        self.history[last] = Snapshot(first, last, self.now, copy.deepcopy(self.state))

    # -- shared checks ------------------------------------------------------------

    def _problems_with_dependency(self, dep: str, what: str) -> list[Problem]:
        """propose: a dependency must exist and not be REVOKED/REJECTED/STALE."""
        rec = self.records.get(dep)
        if rec is None:
            return [_one(InvalidParentError, f"{what} {dep} is unknown")]
        if rec.status in BLOCKING:
            return [_one(InvalidParentError, f"{what} {dep} is {rec.status}")]
        return []

    def _problems_with_usable(self, dep: str) -> list[Problem]:
        """accept / revalidate: a dependency must be usable now."""
        if dep not in self.records:
            return [_one(InvalidParentError, f"dependency {dep} is unknown")]
        if not self.state.usable(dep, self.now):
            return [_one(InvalidParentError, f"dependency {dep} is not usable now")]
        return []

    def _known(self, rid: str) -> Rec:
        rec = self.records.get(rid)
        _refuse_if([] if rec is not None else [_one(UnknownRecordError, f"{rid} is unknown")])
        assert rec is not None
        return rec

    def _set_status(self, rec: Rec, status: Status) -> None:
        if rec.status == Status.ACCEPTED and status != Status.ACCEPTED:
            rec.left_accepted_step, rec.left_accepted_at = self.step, self.now
        if status == Status.ACCEPTED:
            rec.left_accepted_step = rec.left_accepted_at = None
            rec.accepted_once = True
        rec.status = status

    def _mark_stale(self, rids: Iterable[str], cause: str, reason: str, by: str | None) -> None:
        """Each record → STALE because ``cause`` was revoked (``by`` None) or superseded."""
        for rid in rids:
            rec = self.records[rid]
            self._set_status(rec, Status.STALE)
            rec.cause, rec.reason, rec.cause_superseded_by = cause, reason, by
            rec.stale_causes.append((cause, reason, by))

    def _replaced(self, rec: Rec) -> list[Rec]:
        """The versions approving ``rec`` replaces: ``rec.supersedes`` and, while a
        version was never approved, the one it was proposed to replace in turn (a
        version already replaced by another, there or down the line, refuses the
        approval: see :meth:`_problems_superseding`); withdrawn ones included
        (they are passed over, not replaced)."""
        out: list[Rec] = []
        target = rec.supersedes
        while target is not None and all(r.id != target for r in out):
            old = self.records[target]
            out.append(old)
            if old.accepted_once or old.superseded_by is not None:
                break
            target = old.supersedes
        return out

    def _problems_superseding(self, rec: Rec, deps: Sequence[str]) -> list[Problem]:
        """Approving ``rec`` (on the dependencies ``deps``) supersedes what it
        replaces (``_replaced``): once only, not what was withdrawn, and not what
        ``rec`` would rest on."""
        problems = []
        for old in self._replaced(rec):
            if old.superseded_by == rec.id or old.status in WITHDRAWN:
                continue  # a withdrawn old version leaves nothing to replace
            if old.superseded_by is not None:
                problems.append(
                    _one(
                        InvalidTransitionError,
                        f"{old.id} was already superseded by {old.superseded_by}",
                    )
                )
            elif old.status not in REPLACEABLE:
                problems.append(_one(InvalidTransitionError, f"{old.id} is {old.status}"))
            if self.state.rests_on(deps, old.id):
                problems.append(
                    (
                        frozenset({InvalidParentError, InvalidTransitionError}),
                        f"{rec.id} rests on {old.id}, which it supersedes",
                    )
                )
        return problems

    def _supersede(self, rec: Rec) -> None:
        """What ``rec`` replaces → SUPERSEDED by ``rec``; their descendants not FINAL →
        STALE."""
        for old in self._replaced(rec):
            if old.superseded_by == rec.id or old.status in WITHDRAWN:
                continue
            stale = [
                d for d in self.state.descendants(old.id) if self.records[d].status not in FINAL
            ]
            self._set_status(old, Status.SUPERSEDED)
            old.superseded_by = rec.id
            old.cause = old.reason = old.cause_superseded_by = None
            self._mark_stale(stale, old.id, f"superseded by {rec.id}", rec.id)

    # -- commands (SPEC §3) ---------------------------------------------------------

    def propose(
        self,
        rid: str,
        proposer: str,
        claim_key: str,
        value: Any,
        kind: Kind,
        parents: Sequence[str] = (),
        expires: datetime | None = None,
        conditions: Mapping[str, Any] | None = None,
        run_reads: Sequence[str] = (),
        supersedes: str | None = None,
    ) -> None:
        """→ CANDIDATE; parents and observed reads must exist and not be blocking.

        ``supersedes`` (a new version of it) must exist, answer the same claim, not be
        REVOKED/REJECTED/SUPERSEDED, and not be something the proposal rests on; the
        run's read of it is not an observed dependency.
        """
        declared = tuple(dict.fromkeys(parents))
        observed = tuple(
            r for r in dict.fromkeys(run_reads) if r not in declared and r != supersedes
        )
        if supersedes is not None and supersedes in self.records:
            # What rests on the old version goes STALE with it: no basis for the new.
            observed = tuple(r for r in observed if not self.state.rests_on((r,), supersedes))
        problems: list[Problem] = []
        if expires is not None and expires <= self.now:
            problems.append(_one(ExpiryInPastError, f"expiry {expires} is not in the future"))
        if rid in self.records:
            problems.append(_one(DuplicateRecordError, f"{rid} already exists"))
        if rid in declared:
            problems.append(_one(CycleError, f"{rid} is its own parent"))
        for dep in declared:
            problems += self._problems_with_dependency(dep, "parent")
        for dep in observed:
            problems += self._problems_with_dependency(dep, "observed dependency")
        if supersedes is not None:
            problems += self._problems_with_supersedes(
                supersedes, claim_key, kind, declared, observed
            )
        inherited = dict(conditions or {})
        for dep in declared:
            for key, wanted in (
                self.records[dep].conditions if dep in self.records else {}
            ).items():
                if key not in inherited:
                    inherited[key] = wanted
                elif canonical(inherited[key]) != canonical(wanted):
                    problems.append(_one(InvalidValueError, f"conditions contradict on {key}"))
        # An observed record holding under other conditions than those stated (its
        # own and its parents') adds none; those that apply may not contradict.
        stated = dict(inherited)
        for dep in observed:
            held = self.records[dep].conditions if dep in self.records else {}
            if any(canonical(stated[k]) != canonical(v) for k, v in held.items() if k in stated):
                continue
            for key, wanted in held.items():
                if key not in inherited:
                    inherited[key] = wanted
                elif canonical(inherited[key]) != canonical(wanted):
                    problems.append(_one(InvalidValueError, f"observed contradict on {key}"))
        _refuse_if(problems)
        self.step += 1
        self.records[rid] = Rec(
            id=rid,
            claim_key=claim_key,
            kind=kind,
            value=copy.deepcopy(value),
            proposer=proposer,
            expires=expires,
            parents=declared,
            observed=observed,
            conditions=inherited,
            supersedes=supersedes,
            basis_step=self.step,
        )

    def _problems_with_supersedes(
        self,
        old: str,
        claim_key: str,
        kind: Kind,
        declared: Sequence[str],
        observed: Sequence[str],
    ) -> list[Problem]:
        """propose(supersedes=old): what may be replaced by a new proposal (of the
        same claim and kind: kinds are never merged)."""
        rec = self.records.get(old)
        if rec is None:
            return [_one(UnknownRecordError, f"superseded record {old} is unknown")]
        problems = []
        if rec.claim_key != claim_key:
            problems.append(_one(InvalidInputError, f"{old} answers {rec.claim_key}"))
        if rec.kind != kind:
            problems.append(_one(InvalidKindError, f"{old} is a {rec.kind}, not a {kind}"))
        if rec.status in FINAL:
            problems.append(_one(InvalidTransitionError, f"{old} is {rec.status}"))
        if old in declared:
            problems.append(_one(InvalidParentError, f"{old} is also a parent"))
        elif self.state.rests_on((*declared, *observed), old):
            problems.append(_one(InvalidParentError, f"a dependency rests on {old}"))
        return problems

    def accept(self, rid: str, actor: str) -> None:
        """CANDIDATE → ACCEPTED: not by the proposer, unexpired, every dependency usable."""
        rec = self._known(rid)
        problems: list[Problem] = []
        if rec.status != Status.CANDIDATE:
            problems.append(_one(InvalidTransitionError, f"{rid} is {rec.status}"))
        if actor == rec.proposer:
            problems.append(_one(SelfApprovalError, f"{actor} proposed {rid}"))
        if rec.expires is not None and self.now >= rec.expires:
            problems.append(
                (frozenset({InvalidTransitionError, NotUsableError}), f"{rid} has expired")
            )
        for dep in rec.deps:
            problems += self._problems_with_usable(dep)
        problems += self._problems_superseding(rec, rec.deps)
        _refuse_if(problems)
        self.step += 1
        self._set_status(rec, Status.ACCEPTED)
        self._supersede(rec)

    def reject(self, rid: str, actor: str, reason: str) -> None:
        """CANDIDATE → REJECTED, not by the proposer."""
        rec = self._known(rid)
        problems: list[Problem] = []
        if rec.status != Status.CANDIDATE:
            problems.append(_one(InvalidTransitionError, f"{rid} is {rec.status}"))
        if actor == rec.proposer:
            problems.append(_one(SelfApprovalError, f"{actor} proposed {rid}"))
        _refuse_if(problems)
        self.step += 1
        self._set_status(rec, Status.REJECTED)
        rec.reason = reason

    def revoke(self, rid: str, reason: str) -> set[str]:
        """CANDIDATE|ACCEPTED|STALE → REVOKED; every descendant not FINAL → STALE.

        Returns the ids marked STALE.
        """
        rec = self._known(rid)
        allowed = (Status.CANDIDATE, Status.ACCEPTED, Status.STALE)
        _refuse_if(
            []
            if rec.status in allowed
            else [_one(InvalidTransitionError, f"{rid} is {rec.status}")]
        )
        self.step += 1
        stale = {d for d in self.state.descendants(rid) if self.records[d].status not in FINAL}
        self._set_status(rec, Status.REVOKED)
        rec.cause, rec.reason, rec.cause_superseded_by = rid, reason, None
        self._mark_stale(stale, rid, reason, None)
        return stale

    def revalidate(self, rid: str, actor: str, parents: Sequence[str] | None = None) -> None:
        """STALE → ACCEPTED (CANDIDATE if it was never accepted), not by the proposer.

        An ACCEPTED record whose basis expired (an ancestor's expiry, not its own)
        may be given a new basis too. Like accept, the record itself must not have
        expired. Without ``parents`` every current dependency must be usable; with
        them they must all be usable, none may be the record or depend on it or hold
        a condition the record does not hold alike, they replace both the declared
        parents and the observed dependencies, and a kind that needs a basis
        (inference, report, plan) may not be left without one.
        A revalidation supersedes nothing: a never-approved new version returns to
        CANDIDATE and supersedes when it is accepted.
        """
        rec = self._known(rid)
        problems: list[Problem] = []
        source = self.state.effective_expiry(rid)[1]
        basis_expired = (
            rec.status == Status.ACCEPTED
            and not self.state.usable(rid, self.now)
            and source is not None
            and source != rid
        )
        if rec.status != Status.STALE and not (basis_expired and parents is not None):
            problems.append(_one(InvalidTransitionError, f"{rid} is {rec.status}"))
        if actor == rec.proposer:
            problems.append(_one(SelfApprovalError, f"{actor} proposed {rid}"))
        if parents is not None and not parents and rec.kind in NEEDS_BASIS:
            problems.append(_one(InvalidParentError, f"{rid} is {rec.kind} and needs a basis"))
        if rec.expires is not None and self.now >= rec.expires:
            problems.append(_one(InvalidTransitionError, f"{rid} has expired"))
        if parents is None:
            for dep in rec.deps:
                problems += self._problems_with_usable(dep)
        else:
            below = self.state.descendants(rid) | {rid}
            seen: dict[str, Any] = {}  # the new parents may not contradict each other
            for dep in dict.fromkeys(parents):
                for key, wanted in (
                    self.records[dep].conditions if dep in self.records else {}
                ).items():
                    if key in seen and canonical(seen[key]) != canonical(wanted):
                        problems.append(_one(InvalidValueError, f"new basis contradicts on {key}"))
                    seen.setdefault(key, wanted)
            for dep in dict.fromkeys(parents):
                if dep in below:
                    problems.append(_one(CycleError, f"{dep} depends on {rid}"))
                problems += self._problems_with_usable(dep)
                # The new basis may neither contradict nor add to the record's conditions.
                held = self.records[dep].conditions if dep in self.records else {}
                for key, wanted in held.items():
                    if key not in rec.conditions:
                        problems.append(_one(InvalidParentError, f"{dep} adds {key} to {rid}"))
                    elif canonical(rec.conditions[key]) != canonical(wanted):
                        problems.append(
                            _one(InvalidValueError, f"{dep} contradicts {rid} on {key}")
                        )
        basis = rec.deps if parents is None else tuple(dict.fromkeys(parents))
        _refuse_if(problems)
        self.step += 1
        self._set_status(rec, Status.ACCEPTED if rec.accepted_once else Status.CANDIDATE)
        rec.cause = rec.reason = rec.cause_superseded_by = None
        rec.stale_causes = []
        if parents is not None:
            rec.parents, rec.observed = basis, ()
            rec.basis_step = self.step

    def deliver(self, rid: str, delivery_id: str) -> None:
        """Record a delivery of a record usable now (SPEC §5)."""
        rec = self._known(rid)
        if rec.status != Status.ACCEPTED:
            raise Refused([_one(InvalidTransitionError, f"{rid} is {rec.status}")])
        if not self.state.usable(rid, self.now):
            raise Refused([_one(NotUsableError, f"{rid} is not usable now")])
        self.step += 1
        self.state.deliveries[delivery_id] = Delivery(
            delivery_id, rid, self.step, (rec.parents, rec.observed), self.state.basis_edges(rid)
        )

    def issue_correction(self, delivery_id: str, correction_id: str) -> None:
        """Put a correction for a delivery in the outbox; the delivery stays delivered."""
        delivery = self.state.deliveries.get(delivery_id)
        if delivery is None:
            raise Refused([_one(UnknownDeliveryError, f"delivery {delivery_id} is unknown")])
        self.step += 1
        delivery.corrections.append((correction_id, self.step, self.now))
