"""Reads: the eligibility chain (``read``, ``explain``), single records and
listings (evidence snapshots: :func:`ledger.erasure.snapshot`).

``read`` applies, in order: scope (the caller's grants) → status and expiry of the
record and every ancestor (the view's effective expiry) → applicability
(conditions matched by the context) → conflict. Inside a run, what a read shows
is recorded as observed.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from datetime import datetime
from typing import Any

from ledger import redaction, rules
from ledger.access import Role
from ledger.caller import Caller
from ledger.deliveries import correction_of, delivery_of
from ledger.domain import Kind, Outcome, Status, Validity
from ledger.errors import AuthenticationError, InvalidInputError, InvalidValueError, LedgerError
from ledger.serialization import canonical, micros_to_datetime, unpack
from ledger.validation import (
    check_claim_key,
    check_context,
    check_id,
    check_kind,
    check_list,
    check_text,
)
from ledger.values import (
    HIDDEN,
    Explanation,
    ReadResult,
    Reason,
    RecordView,
    StaleCause,
    assembled,
    withheld,
)
from projections import claims as claim_queries
from projections import delivery as delivery_view
from projections import edges as edges_index
from projections.base import Cursor

#: The records that rest on a record (its descendants), as a view of many records
#: (a graph, an export) finds them once for all of them: see :func:`stale_causes`.
Below = Callable[[str], Set[str]]


def record_view(
    caller: Caller,
    c: Cursor | None,
    row: Any,
    at: datetime,
    deliveries: bool = True,
    below: Below | None = None,
) -> RecordView:
    """The public view of a record row (``deliveries=False``: the caller knows it
    has none, so they are not looked up), naming no record the caller may not see
    (:mod:`ledger.redaction`). A STALE record's causes need ``c``; ``below``, for
    their blocking, see :func:`stale_causes`."""
    causes = stale_causes(caller, c, row, below) if row["status"] == _STALE else ()
    delivered = []
    if deliveries and c is not None:
        d, rid, position = caller.engine.dialect, row["record_id"], caller.position
        drows = delivery_view.for_record(c, d, rid, position)
        issued = delivery_view.corrections_of_record(c, d, rid, position) if drows else {}
        for drow in drows:
            corrections = tuple(map(correction_of, issued.get(drow["delivery_id"], ())))
            delivered.append(delivery_of(drow, corrections))
    parents, observed = redaction.id_list(row["parents"]), redaction.id_list(row["observed"])
    named = redaction.row_dependencies(row, parents, observed)
    if causes:
        named.update(x.cause for x in causes)
        named.update(x.superseded_by for x in causes if x.superseded_by)
        named.update(k for x in causes for k in redaction.keys_in(x.reason or ""))
    if row["reason"]:
        named.update(redaction.keys_in(row["reason"]))
    if delivered:
        named.update(x.replacement for y in delivered for x in y.corrections if x.replacement)
    hidden = caller.hidden_among(c, named, seen=row["scope"]) if named else frozenset()
    if hidden:
        causes = tuple(_redacted_cause(x, hidden) for x in causes)
        row = redaction.row(row, hidden)
        delivered = [
            dataclasses.replace(
                y,
                corrections=tuple(
                    dataclasses.replace(x, replacement=redaction.one(x.replacement, hidden))
                    for x in y.corrections
                ),
            )
            for y in delivered
        ]
    rid = row["record_id"]
    names = caller.names(c, (*named, rid)) if named or redaction.QUALIFIER in rid else {}
    eff, expires, evidence = row["eff_expires"], row["expires"], row["evidence"]
    view = assembled(
        RecordView,
        {
            "id": rid,
            "scope": row["scope"],
            "claim_key": row["claim_key"],
            "kind": _KINDS.get(row["kind"]) or Kind(row["kind"]),
            "value": unpack(row["value"]),
            "status": _STATUSES.get(row["status"]) or Status(row["status"]),
            "validity": rules.validity(row, at),
            "expires": None if expires is None else micros_to_datetime(expires),
            "effective_expires": None if eff is None else micros_to_datetime(eff),
            "expiry_source": row["eff_source"],
            "parents": redaction.ids(parents, hidden) if parents else (),
            "observed": redaction.ids(observed, hidden) if observed else (),
            "conditions": rules.conditions(row),
            "proposer": row["proposer"],
            "created_at": micros_to_datetime(row["created_at"]),
            "evidence": None if evidence is None else unpack(evidence),
            "cause": row["cause_root"],
            "reason": row["reason"],
            "deliveries": tuple(delivered),
            "position": row["from_pos"],
            "supersedes": row["supersedes"],
            "superseded_by": row["superseded_by"],
            "cause_superseded_by": row["stale_via"],
            "stale_causes": causes,
        },
    )
    return redaction.view(view, names)


#: Members by stored value (an enum's own call is slower than a dict).
_KINDS = {k.value: k for k in Kind}
_STATUSES = {s.value: s for s in Status}


def stale_causes(
    caller: Caller, c: Cursor | None, row: Any, below: Below | None = None
) -> tuple[StaleCause, ...]:
    """Every cause that marked a STALE row's record STALE since its last
    revalidation (from its events, as of the caller's position), each saying
    whether it still rests under the record; ``()`` for other rows. ``below``:
    each cause's descendants, when many records are shown (one walk down from
    each cause for them all, not one up from each record, which a deep chain
    makes quadratic); by default the record's ancestors are walked."""
    if row["status"] != Status.STALE or c is None:
        return ()
    engine = caller.engine
    causes: list[StaleCause] = []
    for note in engine.recorder.select_record_events(c, engine.aggregate_of(c, row["record_id"])):
        if caller.position is not None and note.id > caller.position:
            break
        kind = note.topic.rsplit(".", 1)[-1]
        if kind == "Revalidated":
            causes.clear()
        elif kind == "MarkedStale":
            event = engine.projector.decode(note)
            causes.append(
                StaleCause(
                    cause=event.cause,
                    reason=event.reason,
                    superseded_by=event.superseded_by,
                    position=note.id,
                    at=event.timestamp,
                )
            )
    if not causes:
        return ()
    if below is not None:
        rid = row["record_id"]
        return tuple(dataclasses.replace(x, blocking=rid in below(x.cause)) for x in causes)
    # Only whether each cause is still above the record: the walk up stops once
    # every cause is found (a dense ancestry would otherwise be walked whole, for
    # every STALE record a page or an explanation shows).
    above = edges_index.ancestors_among(
        c, engine.dialect, row["record_id"], {x.cause for x in causes}, caller.position
    )
    return tuple(dataclasses.replace(x, blocking=x.cause in above) for x in causes)


def _redacted_cause(cause: StaleCause, hidden: frozenset[str]) -> StaleCause:
    """A cause as a caller who may not see it is shown it: the placeholder, no
    reason, and always blocking (whether it still rests under the record changes
    with what is done in its scope, which is that scope's to know)."""
    if cause.cause not in hidden:
        return cause
    return dataclasses.replace(
        cause,
        cause=HIDDEN,
        reason=withheld(cause.superseded_by),
        superseded_by=redaction.one(cause.superseded_by, hidden),
        blocking=True,
    )


def read(
    caller: Caller,
    scope: str,
    claim_key: str,
    at: datetime | None,
    context: Mapping[str, Any] | None,
    kinds: Iterable[Kind | str] | None,
) -> ReadResult:
    """``Session.read``: the usable records of the eligibility chain and the outcome."""
    claim_key, when, judged = _judge(caller, scope, claim_key, at, context, kinds, True)
    if len(judged) == 1:  # the claim's one ACCEPTED record (most claims have one)
        view, reasons = judged[0]
        usable: tuple[RecordView, ...] = () if reasons else (view,)
    else:
        usable = tuple([view for view, reasons in judged if not reasons])
    if caller.run is not None:
        caller.note_reads(usable, "read")
    result: ReadResult = _new(ReadResult)  # as ``assembled`` makes it, every field given
    _set_attr(
        result,
        "__dict__",
        {
            "outcome": _FOUND if len(usable) == 1 else _outcome(usable),
            "records": usable,
            "scope": scope,
            "claim_key": claim_key,
            "at": when,
        },
    )
    return result


def explain(
    caller: Caller,
    scope: str,
    claim_key: str,
    at: datetime | None,
    context: Mapping[str, Any] | None,
    kinds: Iterable[Kind | str] | None,
    limit: int | None = None,
) -> Explanation:
    """``Session.explain``: the eligibility chain for ``(scope, claim_key)``, per
    record; every record shown counts as read inside a run. ``limit``: show each
    usable record and at most this many others (:func:`_judge_bounded`)."""
    if limit is None:
        claim_key, when, judged = _judge(caller, scope, claim_key, at, context, kinds)
        omitted = 0
    else:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInputError(f"limit {limit!r} is not a positive integer")
        claim_key, when, judged, omitted = _judge_bounded(
            caller, scope, claim_key, at, context, kinds, limit
        )
    caller.note_reads((view for view, _ in judged), "explain")
    judged = _waiting(caller, judged)
    return Explanation(
        outcome=_outcome([view for view, reasons in judged if not reasons]),
        scope=scope,
        claim_key=claim_key,
        at=when,
        entries=tuple(
            Reason(record=view, usable=not reasons, reasons=reasons) for view, reasons in judged
        ),
        omitted=omitted,
    )


def _waiting(
    caller: Caller, judged: list[tuple[RecordView, tuple[str, ...]]]
) -> list[tuple[RecordView, tuple[str, ...]]]:
    """``judged`` with each CANDIDATE's reasons also naming the dependencies its
    acceptance waits for (a CANDIDATE) or that refuse it (withdrawn): "not yet
    approved" alone would leave a candidate whose parent was rejected waiting
    in the queue for an acceptance that cannot come. A dependency outside the
    caller's scopes is not named."""
    deps = {
        view.id: [d for d in dict.fromkeys((*view.parents, *view.observed)) if d != HIDDEN]
        for view, _ in judged
        if view.status == Status.CANDIDATE
    }
    wanted = {d for found in deps.values() for d in found}
    if not wanted:
        return judged
    with caller.reading() as c:
        statuses = {name: row["status"] for name in wanted if (row := caller.lookup(c, name))}
    out = []
    for view, reasons in judged:
        notes = []
        for dep in deps.get(view.id, ()):
            status = statuses.get(dep)
            if status == Status.CANDIDATE:
                notes.append(f"waits for its dependency {dep!r} (CANDIDATE) to be accepted")
            elif status is not None and status != Status.ACCEPTED:
                notes.append(f"cannot be accepted while its dependency {dep!r} is {status}")
        out.append((view, (*reasons, *notes)))
    return out


def _asked(
    caller: Caller,
    scope: str,
    claim_key: str,
    at: datetime | None,
    context: Mapping[str, Any] | None,
    kinds: Iterable[Kind | str] | None,
) -> tuple[str, datetime, dict[str, Any], frozenset[Kind] | None]:
    """What a read or an explanation asks for, checked: the claim key
    (normalised), the instant, the context and the kinds (None: every kind)."""
    ctx = _NO_CONTEXT if context is None else check_context(context)
    wanted = None if kinds is None else _wanted(kinds)
    try:
        checked = _checked_claim(scope, claim_key)
    except InvalidValueError:  # whitespace at its ends, a line break: an earlier key?
        if not _held_as_given(caller, scope, claim_key):
            raise
        return claim_key, caller.at(at), ctx, wanted
    if checked != claim_key and _held_as_given(caller, scope, claim_key):
        checked = claim_key  # not in NFC, as an earlier version stored it
    return checked, caller.at(at), ctx, wanted


def _held_as_given(caller: Caller, scope: str, claim_key: str) -> bool:
    """Whether records of ``(scope, claim_key)``, a key no new claim may have (an
    earlier version took such keys), are stored under it as given, as a valid reader
    of the scope sees: they are read then (a key not held is refused, or normalised)."""
    try:  # whitespace at the ends or inside (a tab, a line break), another normal form
        check_text(claim_key, "claim_key", max_len=512)
    except LedgerError:
        return False
    engine, position = caller.engine, caller.position

    def fetch(c: Cursor) -> tuple[claim_queries.Token | None, list[Any]]:
        d = engine.dialect
        return claim_queries.for_claim_as(c, d, caller.token_hash, scope, claim_key, position)

    token, rows = engine.query(fetch)
    if token is None or not token[2] or not rows:
        return False
    row = {"subject": caller.subject, "revoked_pos": token[0], "expires": token[1]}
    try:  # a token no longer valid learns nothing of which such keys exist
        return bool(engine.check_token(row))
    except AuthenticationError:
        return False


def _judge_bounded(
    caller: Caller,
    scope: str,
    claim_key: str,
    at: datetime | None,
    context: Mapping[str, Any] | None,
    kinds: Iterable[Kind | str] | None,
    limit: int,
) -> tuple[str, datetime, list[tuple[RecordView, tuple[str, ...]]], int]:
    """As :func:`_judge` for ``explain``, but only each usable record and at most
    ``limit`` others, in proposal order, and how many others are left out.

    The claim's ACCEPTED rows are read as a read reads them (only they can be
    usable, and the outcome needs them all); of the others, at most ``limit``
    are read (``claim_queries.claim_others``) and the rest only counted. The
    others shown are those once accepted (ACCEPTED but not usable now, STALE,
    REVOKED, SUPERSEDED) before those any proposer can add (CANDIDATE,
    REJECTED), each the most recently changed first."""
    claim_key, when, ctx, wanted = _asked(caller, scope, claim_key, at, context, kinds)
    engine = caller.engine
    d, position = engine.dialect, caller.position
    with engine.reading() as c:
        token, rows = claim_queries.for_claim_as(
            c, d, caller.token_hash, scope, claim_key, position, True
        )
        _check_read(caller, token, scope, "explain")
        others, count = claim_queries.claim_others(c, d, scope, claim_key, position, limit)
        judged = _judged(caller, c, token, rows, scope, claim_key, when, ctx, wanted, "explain")
        shown = [(row, j) for row, j in zip(rows, judged, strict=True) if not j[1]]
        # An ACCEPTED record that is not usable competes with the others once
        # accepted (expired, conditioned, of a kind not asked for).
        ranked: list[tuple[int, int, Any, tuple[RecordView, tuple[str, ...]] | None]] = [
            (0, -row[_FROM_POS], row, j) for row, j in zip(rows, judged, strict=True) if j[1]
        ]
        ranked += [(int(row[_STATUS] in _PROPOSED), -row[_FROM_POS], row, None) for row in others]
        ranked.sort(key=operator.itemgetter(0, 1))
        picked = ranked[:limit]
        fresh = [row for _, _, row, j in picked if j is None]
        if fresh:
            seen = _judged(caller, c, token, fresh, scope, claim_key, when, ctx, wanted, "explain")
            shown += zip(fresh, seen, strict=True)
        shown += [(row, j) for _, _, row, j in picked if j is not None]
    shown.sort(key=lambda pair: pair[0][_CREATED_POS])
    omitted = len(ranked) - len(picked) + count - len(others)
    return claim_key, when, [j for _, j in shown], omitted


def _outcome(usable: Sequence[RecordView]) -> Outcome:
    """FOUND, MISSING, or CONFLICT when the usable records disagree on the value."""
    if not usable:
        return Outcome.MISSING
    if len(usable) > 1 and len({canonical(r.value) for r in usable}) > 1:
        return Outcome.CONFLICT
    return Outcome.FOUND


def _judge(
    caller: Caller,
    scope: str,
    claim_key: str,
    at: datetime | None,
    context: Mapping[str, Any] | None,
    kinds: Iterable[Kind | str] | None,
    usable_only: bool = False,
) -> tuple[str, datetime, list[tuple[RecordView, tuple[str, ...]]]]:
    """The claim key (normalised), the instant, and each record of the claim with
    why it is not usable (nothing when it is). ``usable_only``: leave out the
    records whose status alone makes them unusable (every status but ACCEPTED:
    see ``rules.blocking_reasons``), as a read shows none of them: only the
    claim's live ACCEPTED rows are read (``claim_queries.for_claim_as``)."""
    command = "read" if usable_only else "explain"
    claim_key, when, ctx, wanted = _asked(caller, scope, claim_key, at, context, kinds)
    engine = caller.engine
    d, token_hash, position = engine.dialect, caller.token_hash, caller.position

    def fetch(c: Cursor) -> tuple[claim_queries.Token | None, list[Any]]:
        return claim_queries.for_claim_as(c, d, token_hash, scope, claim_key, position, usable_only)

    # Token, read role and the claim's rows in one statement, outside a transaction;
    # a record with deliveries or stale causes needs more statements, so then the
    # whole read is done again in one read transaction.
    token, rows = engine.query(fetch)
    for row in rows:
        if row[_HAS_DELIVERIES] or row[_STATUS] == _STALE:
            with engine.reading() as c:
                token, rows = fetch(c)
                return (
                    claim_key,
                    when,
                    _judged(caller, c, token, rows, scope, claim_key, when, ctx, wanted, command),
                )
    return (
        claim_key,
        when,
        _judged(caller, None, token, rows, scope, claim_key, when, ctx, wanted, command),
    )


#: The context of a read given none (never changed: rules only read it).
_NO_CONTEXT: dict[str, Any] = {}
#: Scope and claim key pairs already checked, with the claim key normalised.
_CHECKED: dict[tuple[str, str], str] = {}
_CHECKED_MAX = 4096
_STALE = Status.STALE
_FOUND = Outcome.FOUND


#: The kinds a read asked for, by the tuple of plain strings or Kinds it gave.
_WANTED: dict[tuple[Any, ...], frozenset[Kind]] = {}
_PLAIN_KIND = (str, Kind)


def _wanted(kinds: Iterable[Kind | str]) -> frozenset[Kind]:
    """The kinds a read keeps, checked (a tuple of plain strings or ``Kind``
    members checked before is not checked again: the check depends on nothing else)."""
    key = None
    if type(kinds) is tuple:
        for k in kinds:
            if type(k) not in _PLAIN_KIND:
                break
        else:
            key = kinds
    if key is not None:
        known = _WANTED.get(key)
        if known is not None:
            return known
    wanted = frozenset(check_kind(k) for k in check_list(kinds, "kinds"))
    if not wanted:  # it would keep no record: MISSING whatever is stored
        raise InvalidInputError("kinds is empty: leave it out to consider every kind")
    if key is not None:
        if len(_WANTED) >= _CHECKED_MAX:
            _WANTED.clear()
        _WANTED[key] = wanted
    return wanted


def _checked_claim(scope: str, claim_key: str) -> str:
    """``claim_key`` normalised once ``scope`` and it are checked (a pair of plain
    strings checked before is not checked again: the checks depend on nothing else)."""
    plain = type(scope) is str and type(claim_key) is str
    if plain:
        known = _CHECKED.get((scope, claim_key))
        if known is not None:
            return known
    check_id(scope, "scope")
    normalised = check_claim_key(claim_key)
    if plain:
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[scope, claim_key] = normalised
    return normalised


def _judged(
    caller: Caller,
    c: Cursor | None,
    token: claim_queries.Token | None,
    rows: list[Any],
    scope: str,
    claim_key: str,
    when: datetime,
    ctx: dict[str, Any],
    wanted: frozenset[Kind] | None,
    command: str = "read",
) -> list[tuple[RecordView, tuple[str, ...]]]:
    """The records of ``for_claim_as`` rows, each with why it is not usable, once
    the token and the caller's ``read`` role are checked (deliveries read with ``c``;
    ``command``: what a refusal names)."""
    _check_read(caller, token, scope, command)
    judged: list[tuple[RecordView, tuple[str, ...]]] = []
    for found in rows:
        view = None if c is not None else _plain_view(caller, found, scope, claim_key, wanted)
        if view is not None:
            judged.append((view, ()))
            continue
        row: Any = claim_queries.claim_row(found, scope, claim_key)
        view = record_view(caller, c, row, when, deliveries=c is not None)
        shown = _as_shown(row, view)
        judged.append((view, rules.blocking_reasons(shown, when, ctx, wanted, view.stale_causes)))
    return judged


def _check_read(
    caller: Caller, token: claim_queries.Token | None, scope: str, command: str = "read"
) -> None:
    """Raise unless ``token`` (of ``for_claim_as``: the caller's) is valid now and
    holds ``read`` in ``scope`` (a refusal names ``command``)."""
    if token is None or token[0] is not None or token[1] is not None:
        caller.engine.check_token(
            None
            if token is None
            else {"subject": caller.subject, "revoked_pos": token[0], "expires": token[1]}
        )
    assert token is not None
    if not token[2]:
        raise caller.denied(scope, Role.READ, command)


def _as_shown(row: dict[str, Any], view: RecordView) -> Any:
    """``row`` naming records and giving reasons as ``view`` shows them to its
    caller (placeholders, withheld reasons, qualified keys as shown), so what is
    said about the row names nothing the view does not."""
    return {
        **row,
        "record_id": view.id,
        "eff_source": view.expiry_source,
        "cause_root": view.cause,
        "reason": view.reason,
        "stale_via": view.cause_superseded_by,
        "supersedes": view.supersedes,
        "superseded_by": view.superseded_by,
    }


#: Positions in a record row of ``for_claim_as``.
_AT = {name: i for i, name in enumerate(claim_queries.CLAIM_ROW)}
_ID, _KIND, _VALUE, _STATUS = (_AT[name] for name in ("record_id", "kind", "value", "status"))
_PROPOSER, _CREATED_AT, _EVIDENCE, _REASON, _FROM_POS, _HAS_DELIVERIES = (
    _AT[name]
    for name in ("proposer", "created_at", "evidence", "reason", "from_pos", "has_deliveries")
)
_PARENTS, _OBSERVED, _SUPERSEDES = _AT["parents"], _AT["observed"], _AT["supersedes"]
_CREATED_POS = _AT["created_pos"]
_PROPOSED = frozenset(claim_queries.PROPOSED_ONLY)
#: What a plain row holds in these columns: no expiry (nor a record it comes
#: from), no conditions, no stale cause, not superseded, no deliveries.
_PLAIN_COLUMNS = {
    "expires": None,
    "eff_expires": None,
    "eff_source": None,
    "conditions": rules.NO_CONDITIONS,
    "cause_root": None,
    "stale_via": None,
    "superseded_by": None,
    "has_deliveries": 0,
}
_PLAIN_OF = operator.itemgetter(*(_AT[name] for name in _PLAIN_COLUMNS))
_PLAIN = tuple(_PLAIN_COLUMNS.values())
_ACCEPTED = Status.ACCEPTED


def _plain_view(
    caller: Caller, row: Any, scope: str, claim_key: str, wanted: frozenset[Kind] | None
) -> RecordView | None:
    """The view of an ACCEPTED record row of ``(scope, claim_key)`` (of
    ``for_claim_as``, without deliveries) that names no other record than its
    parents, observed dependencies and the version it supersedes, all of them
    shown as they are (none hidden, none qualified, and no qualified key in its
    acceptance note), has neither an expiry nor conditions, and is of a kind
    ``wanted``: usable whatever the instant and the context. None for any other
    row (``record_view`` and ``rules.blocking_reasons`` then decide).

    A superseded version is never hidden from a caller who sees the new one: a
    new version keeps its scope and claim key (``proposals``), so only a
    qualified name needs the full path."""
    if row[_STATUS] != _ACCEPTED or _PLAIN_OF(row) != _PLAIN:
        return None
    rid, kind, reason = row[_ID], _KINDS.get(row[_KIND]), row[_REASON]
    if kind is None or _QUALIFIER in rid or (wanted is not None and kind not in wanted):
        return None
    if reason is not None and _QUALIFIER in reason:
        return None  # an acceptance note naming a qualified key: shown as the caller knows it
    supersedes = row[_SUPERSEDES]
    if supersedes is not None and _QUALIFIER in supersedes:
        return None
    parents: tuple[str, ...] = ()
    observed: tuple[str, ...] = ()
    if row[_PARENTS] != _NO_IDS or row[_OBSERVED] != _NO_IDS:
        # Only a qualified key holds "@@" (a bare id has no "@"); any other "@@"
        # in the packed list only sends the row the longer way.
        if _QUALIFIER_BYTES in row[_PARENTS] or _QUALIFIER_BYTES in row[_OBSERVED]:
            return None
        parents = tuple(redaction.id_list(row[_PARENTS]))
        observed = tuple(redaction.id_list(row[_OBSERVED]))
        # The record itself, if named, is in the scope seen.
        if caller.hidden_among(None, parents + observed, seen=scope):
            return None
    evidence, micros = row[_EVIDENCE], row[_CREATED_AT]
    created = _INSTANTS.get(micros)
    if created is None:
        created = _instant(micros)
    fields = _PLAIN_FIELDS.copy()
    fields["id"] = rid
    fields["scope"] = scope
    fields["claim_key"] = claim_key
    fields["kind"] = kind
    fields["value"] = unpack(row[_VALUE])
    fields["parents"] = parents
    fields["observed"] = observed
    fields["conditions"] = {}
    fields["proposer"] = row[_PROPOSER]
    fields["created_at"] = created
    fields["evidence"] = None if evidence is None else unpack(evidence)
    fields["reason"] = reason
    fields["position"] = row[_FROM_POS]
    fields["supersedes"] = supersedes
    # As ``assembled`` makes it, without its count of the fields: a copy of
    # ``_PLAIN_FIELDS`` has every one.
    view: RecordView = _new(RecordView)
    _set_attr(view, "__dict__", fields)
    return view


def _instant(micros: int) -> datetime:
    """The datetime of ``micros`` (remembered in ``_INSTANTS``)."""
    if len(_INSTANTS) >= _CHECKED_MAX:
        _INSTANTS.clear()
    made = _INSTANTS[micros] = micros_to_datetime(micros)
    return made


#: Records' ``created_at`` by its microseconds: a datetime is immutable, and
#: making one costs as much as the rest of a plain view's fields (a graph reads
#: the same few records over and over).
_INSTANTS: dict[int, datetime] = {}
_QUALIFIER, _NO_IDS = redaction.QUALIFIER, redaction.NO_IDS
_QUALIFIER_BYTES = _QUALIFIER.encode()
_new, _set_attr = object.__new__, object.__setattr__


#: The fields of a plain row's view, in order, with the values every such view
#: shares (the others are set from the row; ``conditions`` is a new dict each time).
_PLAIN_FIELDS: dict[str, Any] = dict.fromkeys(f.name for f in dataclasses.fields(RecordView)) | {
    "status": Status.ACCEPTED,
    "validity": Validity.VALID,
    "expires": None,
    "effective_expires": None,
    "expiry_source": None,
    "cause": None,
    "deliveries": (),
    "superseded_by": None,
    "cause_superseded_by": None,
    "stale_causes": (),
}


def get(caller: Caller, record_id: str) -> RecordView:
    """``Session.get``."""
    with caller.reading() as c:
        row = caller.visible(c, record_id, Role.READ, "get")
        view = record_view(caller, c, row, caller.at(None))
    caller.note_reads((view,), "get")
    return view


def grants(caller: Caller) -> dict[str, tuple[str, ...]]:
    """``Session.grants``: the caller's roles now, by scope (the token checked)."""
    with caller.engine.reading() as c:
        held = caller.authenticate(c)
    return {scope: tuple(sorted(roles)) for scope, roles in sorted(held.items()) if roles}


def sync(caller: Caller) -> int:
    """``Session.sync``: the token checked, any missed events applied; the position."""
    caller.writable("sync")
    with caller.reading():
        pass
    caller.engine.catch_up()
    return caller.engine.position()
