"""The domain's rules about usability, applied to rows of the current-validity view.

Status transitions are checked by the aggregates (``Record.check_…``); what
depends on *other* records — whether a dependency is usable, whether an ancestor
expired, what validity a record has at an instant, why it is not usable — is
decided here from view rows, so every command and read applies the same rule.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime, timedelta
from typing import Any, cast

from ledger.domain import Kind, Record, Status, Validity
from ledger.errors import InvalidParentError, InvalidTransitionError, InvalidValueError
from ledger.serialization import canonical, datetime_to_micros, micros_to_datetime, unpack
from ledger.values import HIDDEN, StaleCause
from projections.validity import RecordRow

#: How far ahead of the ledger's clock another clock's instant is taken as now: a
#: capture's ``fetched_at``, and an ``as_of`` time (its writer's clock, or a
#: client's, running slightly fast).
CLOCK_SKEW = timedelta(minutes=5)
#: Statuses a record may not be built on (as a parent or observed dependency).
BLOCKING = (Status.REVOKED, Status.REJECTED, Status.STALE, Status.SUPERSEDED)
#: Statuses a revocation or supersession does not mark STALE (nothing left to re-verify).
FINAL = (Status.REVOKED, Status.REJECTED, Status.SUPERSEDED)
#: Looked up once (an enum member's attribute lookup costs more than the compare).
_ACCEPTED = Status.ACCEPTED


def validity(row: RecordRow, at: datetime) -> Validity:
    """VALID (usable at ``at``), NEEDS_REVALIDATION (candidate, stale or expired) or
    INVALID (revoked, rejected or superseded)."""
    status = row["status"]
    if status == _ACCEPTED:
        eff = row["eff_expires"]
        if eff is None or datetime_to_micros(at) < eff:
            return Validity.VALID
        return Validity.NEEDS_REVALIDATION
    if status in FINAL:
        return Validity.INVALID
    return Validity.NEEDS_REVALIDATION


def stale_text(row: RecordRow) -> str:
    """Why a STALE row is stale: its cause was revoked (with the reason) or superseded."""
    if row["stale_via"] is not None:
        return f"{row['cause_root']} was superseded by {row['stale_via']}"
    return f"{row['cause_root']} was revoked: {row['reason']}"


def stale_reasons(row: RecordRow, causes: Sequence[StaleCause]) -> tuple[str, ...]:
    """Why a STALE record is stale: each cause still blocking it (all of them
    when only the row is known), or that none does any more."""
    if not causes:
        return (f"stale because {stale_text(row)}",)
    blocking = [x for x in causes if x.blocking]
    if not blocking:
        resolved = ", ".join(dict.fromkeys(x.cause for x in causes))
        return (f"stale until revalidated: its causes ({resolved}) no longer rest under it",)
    return tuple(
        dict.fromkeys(
            f"stale because {x.cause} was superseded by {x.superseded_by}"
            if x.superseded_by is not None
            else f"stale because {x.cause} was revoked: {x.reason}"
            for x in blocking
        )
    )


def cause_text(row: RecordRow) -> str:
    """`` (why)`` after a status that blocks, or nothing."""
    status = row["status"]
    if status == Status.STALE:
        return f" ({stale_text(row)})"
    if status == Status.SUPERSEDED:
        return f" (superseded by {row['superseded_by']})"
    if status in (Status.REVOKED, Status.REJECTED) and row["reason"]:
        return f" ({row['reason']})"
    return ""


def expiry_text(row: RecordRow, rid: str) -> str:
    """Why a record that is not VALID is not: its status, or which expiry passed."""
    eff = row["eff_expires"]
    if row["status"] != Status.ACCEPTED or eff is None:
        return f"is {row['status']}{cause_text(row)}"
    when = micros_to_datetime(eff).isoformat()
    if row["eff_source"] == rid:
        return f"expired at {when}"
    return f"is unusable: ancestor {row['eff_source']} expired at {when}"


def blocking_reasons(
    row: RecordRow,
    at: datetime,
    context: dict[str, Any],
    kinds: AbstractSet[Kind] | None,
    causes: Sequence[StaleCause] = (),
) -> tuple[str, ...]:
    """Why a record is not usable for a read at ``at`` under ``context``: the first
    failing stage of the eligibility chain (status, then time, then
    applicability); empty when it is usable. A STALE record with its ``causes``
    known names those still blocking it, not ones already resolved."""
    status = row["status"]
    if status != _ACCEPTED:
        blocked = _status_reasons(row, causes)
        if blocked is not None:
            return blocked
    eff = row["eff_expires"]
    if eff is not None and datetime_to_micros(at) >= eff:
        when = micros_to_datetime(eff).isoformat()
        if row["eff_source"] == row["record_id"]:
            return (f"expired at {when}",)
        return (f"ancestor {row['eff_source']} expired at {when}",)
    reasons = []
    for key, wanted in conditions(row).items():
        if key not in context:
            reasons.append(f"condition {key}={wanted!r} not met: context has no {key!r}")
        elif canonical(context[key]) != canonical(wanted):
            reasons.append(f"condition {key}={wanted!r} not met: context has {context[key]!r}")
    if kinds is not None and Kind(row["kind"]) not in kinds:
        reasons.append(f"kind {row['kind']} not requested")
    return tuple(reasons)


def with_inherited(
    label: str, own: dict[str, Any], inherited: Sequence[tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    """A record's conditions with those of its declared parents (``inherited``:
    (parent as named, its conditions)): a summary may not drop a condition; a
    contradiction is refused naming both sides. ``label`` names the record in
    messages (its id quoted, or e.g. "the proposal" when it has none yet)."""
    out = dict(own)
    source = dict.fromkeys(own, label)
    for dep, conditions in inherited:
        for key, value in conditions.items():
            if key not in out:
                out[key], source[key] = value, repr(dep)
            elif canonical(out[key]) != canonical(value):
                raise InvalidValueError(
                    f"conditions of {label} contradict: {key}={out[key]!r} (from "
                    f"{source[key]}) but {key}={value!r} (from {dep!r})"
                )
    return out


def with_observed(
    label: str, stated: dict[str, Any], observed: Sequence[tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    """``stated`` (the record's own conditions and its parents') with those of the
    records its run read (``observed``: (record as named, its conditions)).

    A run is shown what holds in other contexts too (a listing, reads under
    different contexts): an observed record whose conditions contradict
    ``stated`` holds only where this record does not apply, so it adds none.
    The others add theirs; two of them contradicting each other on a condition
    ``stated`` leaves open is refused naming both, and stating that condition
    (``conditions=``) settles which of them applies.
    """
    out = dict(stated)
    source: dict[str, str] = {}
    applicable = [
        (dep, conditions)
        for dep, conditions in observed
        if all(canonical(stated[k]) == canonical(v) for k, v in conditions.items() if k in stated)
    ]
    for dep, conditions in applicable:
        for key, value in conditions.items():
            if key not in out:
                out[key], source[key] = value, dep
            elif key in source and canonical(out[key]) != canonical(value):
                raise InvalidValueError(
                    f"conditions of {label} contradict: its run read {source[key]!r} "
                    f"({key}={out[key]!r}) and {dep!r} ({key}={value!r}); state the "
                    f"{key!r} it applies under with conditions={{{key!r}: ...}}, and what "
                    "holds under another is no basis for it"
                )
    return out


#: How the view stores a record without conditions.
NO_CONDITIONS = b"\x80"


def conditions(row: RecordRow) -> dict[str, Any]:
    """A row's applicability conditions (a new dict each time)."""
    data = row["conditions"]
    return {} if data == NO_CONDITIONS else cast("dict[str, Any]", unpack(data))


def _status_reasons(row: RecordRow, causes: Sequence[StaleCause]) -> tuple[str, ...] | None:
    """Why a record is not usable for its status (None: not for its status)."""
    status = row["status"]
    if status == Status.CANDIDATE:
        return ("candidate: not yet approved",)
    if status == Status.REJECTED:
        return (f"rejected: {row['reason']}",)
    if status == Status.REVOKED:
        return (f"revoked: {row['reason']}",)
    if status == Status.STALE:
        return stale_reasons(row, causes)
    if status == Status.SUPERSEDED:
        return (f"superseded by {row['superseded_by']}",)
    return None


def check_not_expired(row: RecordRow, now: datetime, command: str) -> None:
    """A record past its own expiry cannot become ACCEPTED."""
    if row["expires"] is not None and datetime_to_micros(now) >= row["expires"]:
        raise InvalidTransitionError(
            f"record {row['record_id']!r} expired at "
            f"{micros_to_datetime(row['expires']).isoformat()}; {command} refused"
        )


def check_buildable_on(row: RecordRow, dep: str, what: str, child: str) -> None:
    """A proposal may not rest on a revoked, rejected, stale or superseded record."""
    refused = unbuildable(row, dep, what, child)
    if refused is not None:
        raise refused


def unbuildable(row: RecordRow, dep: str, what: str, child: str) -> InvalidParentError | None:
    """Why ``child`` may not rest on ``dep`` (:func:`check_buildable_on`), or None."""
    if row["status"] not in BLOCKING:
        return None
    return InvalidParentError(
        f"{what} {dep!r} of {child!r} is {row['status']}{cause_text(row)}", dep
    )


#: How many refused dependencies one refusal names; the rest it counts.
NAMED_AT_MOST = 20


def check_dependencies_refused(
    refused: Sequence[tuple[str, InvalidParentError]], what: str, child: str, reader: str
) -> None:
    """Raise one ``InvalidParentError`` naming every dependency of ``child`` that
    was refused, so a caller fixes them all in one go.

    ``refused``: (the dependency as the caller named it, its refusal), in the
    order given; a refusal without ``dependency`` is one for a record unknown to
    ``reader`` or not readable by it (the two alike), one with it a record the
    reader can see that may not be built on. One refusal is raised as it is. For
    several, the precedence is fixed: the error is an ``InvalidParentError``
    whose ``dependency`` is None if any of them is unknown or not readable (the
    input must change whatever happens to the others: bad input), else the first
    of them in the order given. The message names the first
    :data:`NAMED_AT_MOST` in the order given, those unknown or not readable
    together in one phrase (in the order given: a hidden record reads exactly as
    an absent one), then each of the others with its status, and counts the rest.
    """
    if len(refused) == 1:
        raise refused[0][1]
    if not refused:
        return
    named = refused[:NAMED_AT_MOST]
    unknown = [(name, exc) for name, exc in named if exc.dependency is None]
    parts = [str(unknown[0][1])] if len(unknown) == 1 else []
    if len(unknown) > 1:
        parts.append(
            f"{_plural(what)} {_listed([name for name, _ in unknown])} of {child!r} are "
            f"unknown or not readable by {reader!r}"
        )
    parts.extend(str(exc) for _, exc in named if exc.dependency is not None)
    rest = len(refused) - len(named)
    if rest:
        parts.append(
            f"{rest} more {what if rest == 1 else _plural(what)} of {child!r} "
            f"{'is' if rest == 1 else 'are'} unknown, not readable or not usable"
        )
    blocked = all(exc.dependency is not None for _, exc in refused)
    raise InvalidParentError("; ".join(parts), refused[0][1].dependency if blocked else None)


def _plural(what: str) -> str:
    """``parent`` → ``parents``, ``observed dependency`` → ``observed dependencies``."""
    return what[:-1] + "ies" if what.endswith("y") else what + "s"


def _listed(names: Sequence[str]) -> str:
    """``'a', 'b' and 'c'``."""
    quoted = [repr(name) for name in names]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


def check_usable_dependency(
    row: RecordRow | None, dep: str, rid: str, command: str, now: datetime
) -> None:
    """Acceptance needs every dependency ACCEPTED and unexpired at ``now``."""
    if row is None:
        raise InvalidParentError(f"{command} refused: dependency {dep!r} of {rid!r} is unknown")
    if row["status"] != Status.ACCEPTED:
        hint = ""
        newer = row["superseded_by"]
        if command == "revalidate" and row["status"] == Status.SUPERSEDED and newer != HIDDEN:
            # Its dependencies never change by themselves: the way out is a new basis
            # (one the approver cannot read it could not vouch for).
            hint = (
                f"; revalidate {rid!r} on a new basis instead, with parents naming the "
                f"newest version of that claim ({newer!r}, or the version that replaced it) "
                "and every other dependency it keeps (parents replace its dependencies, "
                "observed ones included)"
            )
        raise InvalidParentError(
            f"{command} refused: dependency {dep!r} of {rid!r} is {row['status']}"
            f"{cause_text(row)}{hint}",
            dep,
        )
    if row["eff_expires"] is not None and datetime_to_micros(now) >= row["eff_expires"]:
        raise InvalidParentError(
            f"{command} refused: dependency {dep!r} of {rid!r} {expiry_text(row, dep)}", dep
        )


def same_source(uri: object, other: object) -> bool:
    """Whether two captures' uris name one source: equal in Unicode NFC, the form
    of the claim key ``source:<uri>`` they share (a uri is stored as given)."""
    if not isinstance(uri, str) or not isinstance(other, str):
        return uri == other
    return unicodedata.normalize("NFC", uri) == unicodedata.normalize("NFC", other)


def same_capture(record: Record, other: Record) -> bool:
    """Whether two captures hold the same bytes and claim value."""
    return (record.evidence or {}).get("content_hash") == (other.evidence or {}).get(
        "content_hash"
    ) and canonical(record.value) == canonical(other.value)
