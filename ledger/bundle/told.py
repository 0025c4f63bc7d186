"""What a record's events tell of it: its status after each event, its bases,
its expiry, folded in log order (:func:`_tell`); whether the events a bundle
lists could have been a ledger's at all, by the status machine the ledger's own
check of its log replays (:func:`_machine`); and summary.txt's line for each
event it tells (:func:`history_line`).

The one definition used both to write a bundle (checked against the views) and
to verify one (checked against what the bundle states).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ledger import redaction
from ledger.authorization import _BLOCKING, _REPLACEABLE, _RULES, _WITHDRAWN
from ledger.domain import Status, Validity
from ledger.values import HIDDEN, withheld

#: The status each record event leaves its record in (``Revalidated`` names its
#: own), as the ledger's check of its log has it.
_STATUS_AFTER = {
    "Proposed": Status.CANDIDATE,
    **{kind: Status(after) for kind, (*_, after) in _RULES.items() if after is not None},
}
_FINAL = (Status.REVOKED, Status.REJECTED, Status.SUPERSEDED)
#: What a proposal alone says of its record, none of it checked when its bytes
#: are withheld (what the bundle states of it is then the signer's word).
PROPOSED_UNCHECKED = (
    "its value, claim key, kind, scope, conditions, expiry, evidence fields (URI, fetch "
    "time, content hash, snapshot, size) and bases"
)


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
                told.unknown.append(
                    f"{PROPOSED_UNCHECKED}, which only its proposal ({where}, bytes withheld) says,"
                    if kind == "Proposed"
                    else f"its basis ({where}, bytes withheld)"
                )
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
    "MarkedStale": "stale",
    "Revalidated": "revalidated",
    "Delivered": "delivered",
    "CorrectionIssued": "corrected",
    "SnapshotErased": "erased",
}
#: The event types summary.txt has told since bundles of this release (earlier
#: bundles' summaries tell none of them, and still verify).
LATER_LABELS = ("MarkedStale", "CorrectionIssued")


def history_line(
    kind: str,
    rid: str | None,
    actor: object,
    at: datetime,
    position: int,
    details: Mapping[str, Any],
    shown: Callable[[str], bool] = lambda _rid: True,
    *,
    proposal: bool = True,
) -> str:
    """summary.txt's history line of one event (``rid``: the record's id, for an
    ancestor's lines; ``shown``: whether a record the event names may be named,
    else it is told as hidden), before :func:`one_line` escapes it: the one
    form writing and verifying share. A proposal's line tells the record it is a
    new version of and its own expiry (``proposal=False``: the line of earlier
    bundles, which told neither)."""
    label = HISTORY_LABELS[kind] + ":"
    cause = details.get("cause")
    if kind == "MarkedStale" and (not isinstance(cause, str) or not shown(cause)):
        actor = HIDDEN  # they acted in the scope whose record is not told
    when = at.astimezone(UTC).isoformat(timespec="seconds")
    line = f"{label:<10} {rid + ' ' if rid else ''}by {actor} at {when} (log position {position})"
    why: object = _proposal(details, shown) if kind == "Proposed" and proposal else None
    why = why or _why(kind, details, shown)
    return line + (f": {why}" if why else "")


def _proposal(details: Mapping[str, Any], shown: Callable[[str], bool]) -> str:
    """What a proposal's history line tells: the record it is a new version of
    (hidden when that may not be named) and when it expires."""
    told = []
    supersedes = details.get("supersedes")
    if isinstance(supersedes, str):
        told.append(f"a new version of {supersedes if shown(supersedes) else HIDDEN}")
    expires = details.get("expires")
    if isinstance(expires, datetime):
        told.append(f"expires {expires.astimezone(UTC).isoformat(timespec='seconds')}")
    return "; ".join(told)


def _why(kind: str, details: Mapping[str, Any], shown: Callable[[str], bool]) -> object:
    """What a history line tells after its position: a stale marking's cause, a
    correction's delivery and replacement, else the event's reason or note."""
    note = details.get("reason") or details.get("note")
    if kind == "MarkedStale":
        cause, by = details.get("cause"), details.get("superseded_by")
        if not isinstance(cause, str) or cause == HIDDEN or not shown(cause):
            return withheld(by)
        return f"{cause} was revoked: {note}" if by is None else f"{cause} was superseded by {by}"
    if kind == "CorrectionIssued":
        replacement = details.get("replacement")
        if isinstance(replacement, str) and replacement != HIDDEN and not shown(replacement):
            replacement = HIDDEN
        return (
            f"delivery {details.get('delivery_id')}"
            + (f", replaced by {replacement}" if replacement else "")
            + (f": {note}" if note else "")
        )
    return note


def one_line(text: str) -> str:
    """``text`` with every character that is not printable escaped (``\\n``,
    ``\\u202e``), as summary.txt writes each line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# -- the status machine over every event a bundle lists --------------------------------------

_ACCEPTED, _CANDIDATE = Status.ACCEPTED.value, Status.CANDIDATE.value


@dataclass
class _Step:
    """One included record as the listed events before the one checked leave it
    (None: unknown, an event's bytes being withheld)."""

    status: str | None
    by: str  # the event that set ``status``
    proposer: str | None
    parents: tuple[str, ...] | None
    observed: tuple[str, ...] | None
    supersedes: str | None
    accepted_once: bool = False
    #: Whether its proposal captured evidence bytes (None: its bytes are withheld).
    evidence: bool | None = None
    delivered: bool = False  # a Delivered of it is listed before

    @property
    def bases(self) -> tuple[str, ...] | None:
        """The records it rests on now (None: not known)."""
        if self.parents is None or self.observed is None:
            return None
        return tuple(dict.fromkeys((*self.parents, *self.observed)))


def _machine(events: Mapping[str, Iterable[tuple[int, str, Any]]]) -> list[str]:
    """Why the events a bundle lists, ``(position, type, fields)`` of each record
    it includes (``fields`` None where the bytes are withheld: the type is then
    the manifest's word), could not have been written by a ledger: each event
    against the status machine :mod:`ledger.authorization` replays a ledger's log
    with (the statuses it may follow, separation of duties, a stale marking's
    cause withdrawn and rested on, every basis ACCEPTED where acceptance needs
    it), in log order, as the listed events before it leave the records it
    names; then each CANDIDATE or ACCEPTED record still resting on one withdrawn.
    A record the bundle does not include (one outside the reader's scopes) or an
    event withheld leaves unknown is passed over, never guessed."""
    included = set(events)
    ordered = sorted(
        ((p, rid, kind, fields) for rid, evs in events.items() for p, kind, fields in evs),
        key=lambda e: (e[0], e[1]),
    )
    steps: dict[str, _Step] = {}
    problems: list[str] = []
    for position, rid, kind, fields in ordered:
        carried = isinstance(fields, dict)
        what = f"the {kind} of {rid} at position {position}" + (
            "" if carried else " (bytes withheld: its type is manifest.json's word)"
        )
        step = steps.get(rid)
        if kind == "Proposed":
            if step is None:  # a second one is named by the check of versions
                steps[rid] = step = _proposed(position, fields)
                problems += _proposal_problems(what, step, steps, included)
            continue
        if step is None:
            continue  # named: its events do not start with its proposal
        problem = _step_problem(what, rid, kind, fields, step, steps, included)
        if problem is not None:
            problems.append(problem)
        _fold(step, position, kind, fields)
    return problems + _unmarked(steps)


def _either(statuses: Iterable[str]) -> str:
    *rest, last = statuses
    return f"{', '.join(rest)} or {last}" if rest else last


def _proposed(position: int, fields: Any) -> _Step:
    by = f"its proposal at position {position}"
    if not isinstance(fields, dict):
        return _Step(_CANDIDATE, by, None, None, None, None)
    replaced = fields.get("supersedes")
    return _Step(
        _CANDIDATE,
        by,
        str(fields.get("actor")),
        _names(fields["parents"]),
        _names(fields["observed"]),
        None if replaced is None else str(replaced),
        evidence=fields.get("evidence") is not None,
    )


def _proposal_problems(
    what: str, step: _Step, steps: dict[str, _Step], included: set[str]
) -> list[str]:
    """A proposal rests only on records proposed before it, none of them withdrawn
    or rejected."""
    out = []
    for dep in step.bases or ():
        found = steps.get(dep)
        if dep in included and found is None:
            out.append(f"{what} names {dep} as a basis, which the bundle shows proposed after it")
        elif found is not None and found.status in _BLOCKING:
            out.append(
                f"{what} names {dep} as a basis, but the events the bundle lists leave {dep} "
                f"{found.status} then ({found.by}): a ledger takes no proposal resting on a "
                f"record that is {_either(_BLOCKING)}"
            )
    return out


def _step_problem(
    what: str,
    rid: str,
    kind: str,
    fields: Any,
    step: _Step,
    steps: dict[str, _Step],
    included: set[str],
) -> str | None:
    """The first rule of the status machine ``kind`` breaks, following ``step``."""
    rule = _RULES.get(kind)
    if rule is None:
        return f"{what}: no command writes a {kind} event of a record"
    _role, allowed, separate, _after = rule
    if allowed and step.status is not None and step.status not in allowed:
        return (
            f"{what} follows {step.by}, which left {rid} {step.status}, but a ledger writes "
            f"{'an' if kind[0] in 'AEIOU' else 'a'} {kind} only of a record that is "
            f"{_either(allowed)}"
        )
    if kind == "CorrectionIssued" and not step.delivered:
        return f"{what} follows no delivery of {rid}: a ledger corrects only what it delivered"
    # (Bytes erased, captured again elsewhere and erased again mark every capture
    # of them again: a second erasure of a record is no forgery.)
    if kind == "SnapshotErased" and step.evidence is False:
        return f"{what}: {rid} was proposed with no captured bytes, so none were erased"
    if not isinstance(fields, dict):
        if kind == "Delivered" and step.proposer is not None:
            return (
                f"{what} names no record but {rid}, whose proposal the bundle carries: "
                "nothing in a delivery's bytes is withheld then"
            )
        return _bases_problem(what, step.bases, steps) if kind == "Accepted" else None
    actor = fields.get("actor")
    if separate and step.proposer is not None and str(actor) == step.proposer:
        verb = {"Accepted": "accept", "Rejected": "reject"}.get(kind, "revalidate")
        return (
            f"{what} is by {actor}, who proposed {rid}: a ledger never lets a proposer "
            f"{verb} its own record"
        )
    if kind == "Revalidated" and step.status == _ACCEPTED and fields.get("parents") is None:
        return (
            f"{what} follows {step.by}, which left {rid} {_ACCEPTED}, and gives it no new "
            f"basis: a ledger revalidates an {_ACCEPTED} record only on a new one"
        )
    if kind == "MarkedStale":
        return _marking_problem(what, rid, fields, steps, included)
    if kind == "Superseded":
        newer = fields.get("by")
        found = steps.get(str(newer))
        if newer in included and (found is None or found.status not in (None, _ACCEPTED)):
            return (
                f"{what} names {newer} as the version accepted in its place, but the events "
                f"the bundle lists leave {newer} "
                + (f"{found.status} then ({found.by})" if found else "unproposed then")
                + ": a record is superseded only by the one just accepted"
            )
    if kind == "Revalidated" and fields.get("parents") is not None:
        new = (*_names(fields["parents"]), *_names(fields.get("observed") or ()))
        return _bases_problem(what, new, steps)
    if kind in ("Accepted", "Revalidated"):
        return _bases_problem(what, step.bases, steps)
    return None


def _bases_problem(what: str, bases: Iterable[str] | None, steps: dict[str, _Step]) -> str | None:
    """Accepting or revalidating a record needs every record it rests on ACCEPTED."""
    for dep in bases or ():
        found = steps.get(dep)
        if found is not None and found.status is not None and found.status != _ACCEPTED:
            return (
                f"{what} rests on {dep}, which the events the bundle lists leave "
                f"{found.status} then ({found.by}): a ledger accepts or revalidates a record "
                f"only while every record it rests on is {_ACCEPTED}"
            )
    return None


def _marking_problem(
    what: str, rid: str, fields: dict[str, Any], steps: dict[str, _Step], included: set[str]
) -> str | None:
    """A stale marking follows the revocation (supersession, when ``superseded_by``
    is set) of its cause, which the record rests on."""
    cause, by = fields.get("cause"), fields.get("superseded_by")
    if not isinstance(cause, str) or cause not in included:
        return None  # outside the reader's scopes: its bytes would be withheld
    found = steps.get(cause)
    wanted = Status.REVOKED.value if by is None else Status.SUPERSEDED.value
    withdrawal = "revocation" if by is None else "supersession"
    if found is None or found.status not in (None, wanted):
        return (
            f"{what} names {cause} as its cause, but the events the bundle lists leave "
            + (f"{cause} {found.status} then ({found.by})" if found else f"{cause} unproposed then")
            + f": a record is marked stale only after the {withdrawal} of its cause"
        )
    if _rests_on(steps, included, rid, cause) is False:
        return (
            f"{what} names {cause} as its cause, but {rid} does not rest on {cause} then: "
            "a stale marking reaches only what rests on the record withdrawn"
        )
    return None


def _rests_on(steps: dict[str, _Step], included: set[str], rid: str, cause: str) -> bool | None:
    """Whether ``rid`` rests on ``cause`` now, transitively (None: a record on the
    way is not included, or its bases are not known)."""
    seen: set[str] = set()
    stack, known = [rid], True
    while stack:
        node = steps.get(stack.pop())
        bases = None if node is None else node.bases
        if bases is None:
            known = False
            continue
        for dep in bases:
            if dep == cause:
                return True
            if dep not in seen:
                seen.add(dep)
                if dep in included:
                    stack.append(dep)
                else:
                    known = False
    return None if not known else False


def _fold(step: _Step, position: int, kind: str, fields: Any) -> None:
    by = f"its {kind} at position {position}"
    step.delivered = step.delivered or kind == "Delivered"
    if kind == "Revalidated":
        step.by = by
        if isinstance(fields, dict):
            step.status = str(fields.get("status", _ACCEPTED))
            for name in ("parents", "observed"):
                if fields.get(name) is not None:
                    setattr(step, name, _names(fields[name]))
        else:  # ACCEPTED if it ever was (in every release), else CANDIDATE since 0.2
            step.status = _ACCEPTED if step.accepted_once else None
            step.parents = step.observed = None
    else:
        rule = _RULES.get(kind)
        after = None if rule is None else rule[3]
        if after is not None:
            step.status, step.by = after, by
    step.accepted_once = step.accepted_once or step.status == _ACCEPTED


def _unmarked(steps: dict[str, _Step]) -> list[str]:
    """Each record accepted though the version it replaces was not superseded, and
    each CANDIDATE or ACCEPTED record resting on one REVOKED, STALE or SUPERSEDED:
    the ledger marks them in the transaction that withdraws, so its log never
    ends so (``provledger verify`` checks it of the whole log)."""
    out = []
    for rid, step in steps.items():
        old = None if step.supersedes is None else steps.get(step.supersedes)
        if step.accepted_once and old is not None and old.status in _REPLACEABLE:
            out.append(
                f"{rid} was accepted, yet {step.supersedes}, which it was proposed to replace, "
                f"is {old.status} ({old.by}): accepting {rid} supersedes it, and the bundle "
                f"lists no such Superseded of {step.supersedes}"
            )
        if step.status not in (_CANDIDATE, _ACCEPTED):
            continue
        for dep in step.bases or ():
            found = steps.get(dep)
            if found is not None and found.status in _WITHDRAWN:
                out.append(
                    f"{rid} is {step.status} ({step.by}), yet its basis {dep} is "
                    f"{found.status} ({found.by}): withdrawing {dep} marks every record "
                    f"resting on it STALE, and the bundle lists no such marking of {rid}"
                )
                break
    return out
