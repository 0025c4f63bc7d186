"""Proposals: ``propose``, ``propose_many`` and ``capture`` (evidence pinned to the
exact bytes read), each a CANDIDATE until an approver accepts it.

A proposal is validated completely before anything is written: its own fields,
then — under the writers' lock — the caller's role, the id's freshness, and
every parent and observed dependency (readable, not withdrawn); a batch is all
or nothing.
"""

from __future__ import annotations

import hashlib
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ledger import gc_pause, pipeline, redaction, rules, versions
from ledger.access import Role
from ledger.caller import Caller
from ledger.domain import Kind, Record
from ledger.errors import (
    CycleError,
    DuplicateRecordError,
    InvalidInputError,
    InvalidKindError,
    InvalidParentError,
    InvalidTransitionError,
    InvalidValueError,
    LedgerError,
    UnknownRecordError,
    ValueTooLargeError,
    retold,
)
from ledger.pipeline import Decision
from ledger.serialization import unpack
from ledger.validation import (
    URI_MAX,
    check_aware,
    check_claim_key,
    check_conditions,
    check_format_edges,
    check_id,
    check_kind,
    check_list,
    check_ref,
    check_text,
    check_value,
    quoted,
)
from projections import edges as edges_index
from projections import validity as validity_view
from projections.base import Cursor

#: The fields a ``propose_many`` item may have.
BATCH_FIELDS = (
    "scope",
    "claim_key",
    "value",
    "kind",
    "parents",
    "expires",
    "conditions",
    "id",
    "supersedes",
)
CLOCK_SKEW = rules.CLOCK_SKEW  # how far ahead of the ledger's clock fetched_at may be
_RECAPTURE: Any = object()  # capture's ``supersedes``: "the previous capture, if any"


@dataclass(frozen=True)
class NewestOf:
    """A ``supersedes`` (internal: the LangGraph store's put) meaning "the newest
    live version of the claim of this kind when the proposal commits": its newest
    ACCEPTED or STALE record of ``kind``, else its newest CANDIDATE one, else
    nothing. Found under the writers' lock, so two processes putting one new key
    at once make one version and its successor, not two rival versions.

    ``unseen_after``: the log position as of which the putter found the claim with
    no usable version of ``kind``; the proposal is then refused
    (:class:`ledger.versions.NewerVersionError`) if a version of it was accepted
    after that position, which the putter never saw."""

    kind: str
    unseen_after: int | None = None


class Batch(dict[str, Record.Proposed]):
    """The events proposed earlier in one batch, by key, and the ids they were
    proposed as (each key's bare id: a second proposal under one is a duplicate)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def add(self, event: Record.Proposed) -> None:
        """Keep ``event``, proposed in the batch."""
        self[event.record_id] = event
        self.ids.add(redaction.bare(event.record_id))


def propose(caller: Caller, **fields: Any) -> str:
    """``Session.propose``: ``fields`` are :func:`prepare`'s keyword arguments."""
    caller.writable("propose")
    return _propose(caller, "propose", (), fields)


def capture(
    caller: Caller,
    *,
    scope: str,
    uri: str,
    content: bytes,
    fetched_at: datetime | None,
    claim_key: str | None,
    expires: datetime | None,
    conditions: Mapping[str, Any] | None,
    record_id: str | None,
    value: Any,
) -> str:
    """``Session.capture``: the bytes into the snapshot store, an evidence record
    carrying their hash; a re-capture of the URI with other bytes supersedes the
    newest accepted capture of it (see :func:`ledger.versions.previous_capture`)."""
    caller.writable("capture")
    check_text(uri, "uri", max_len=URI_MAX, line=True)
    if uri != uri.strip():  # else refused as its claim key "source:<uri>", not by name
        raise InvalidValueError(f"uri {quoted(uri)} has leading or trailing whitespace")
    check_format_edges(uri, "uri")
    if claim_key is None:  # else refused naming a claim_key the caller never gave
        try:
            check_claim_key(f"source:{uri}", "the default claim key 'source:<uri>'")
        except ValueTooLargeError as exc:
            raise ValueTooLargeError(
                f"uri is {len(uri)} characters: {exc}; give a claim_key (or a shorter uri)"
            ) from None
    if not isinstance(content, (bytes, bytearray, memoryview)):
        raise InvalidValueError(f"content must be bytes, got {type(content).__name__}")
    data = bytes(content)
    limit = caller.engine.max_value_bytes
    if len(data) > limit:
        raise ValueTooLargeError(
            f"content of {quoted(uri)} is {len(data)} bytes; the limit is {limit}"
        )
    now = caller.engine.now()
    fetched = now if fetched_at is None else check_aware(fetched_at, "fetched_at")
    if fetched > now + CLOCK_SKEW:
        raise InvalidValueError(
            f"fetched_at {fetched.isoformat()} is in the future (now {now.isoformat()}, "
            f"allowing {int(CLOCK_SKEW.total_seconds() // 60)} minutes of clock skew)"
        )
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    evidence = {
        "uri": uri,
        "fetched_at": fetched,
        "content_hash": digest,
        "snapshot_ref": digest,
        "size": len(data),
    }
    fields = {
        "scope": scope,
        "claim_key": claim_key if claim_key is not None else f"source:{uri}",
        "value": digest if value is None else value,
        "kind": Kind.EVIDENCE,
        "parents": (),
        "expires": expires,
        "conditions": conditions,
        "record_id": record_id,
        "evidence": evidence,
        "supersedes": _RECAPTURE,
    }
    return _propose(caller, "capture", ((digest, data),), fields)


def _propose(
    caller: Caller, name: str, snapshots: Sequence[tuple[str, bytes]], fields: dict[str, Any]
) -> str:
    decision = proposal(caller, snapshots, fields)
    record_id = named(fields)
    try:
        return pipeline.command(caller, name, decision, record_id)
    except LedgerError as exc:
        drawn = repr(str(record_id))
        if not isinstance(record_id, DrawnId) or drawn not in str(exc):
            raise
        # The id was drawn for this proposal: the caller never saw it, no record holds it.
        raise retold(exc, str(exc).replace(drawn, "the new record")) from None


def named(fields: dict[str, Any]) -> object:
    """The id of the record a proposal's ``fields`` make, drawn now (and kept in
    ``fields``) when the caller gave none: the command can then name it before
    its transaction (``pipeline.command``'s ``about``) and every try of it
    proposes the same id."""
    if fields.get("record_id") is None:
        fields["record_id"] = DrawnId(new_record_id())
    return fields["record_id"]


def new_record_id() -> str:
    """An id for a record proposed without one."""
    return f"r-{uuid.uuid4().hex}"


class DrawnId(str):
    """An id :func:`named` drew for a proposal naming none: messages about it say
    "the proposal" or "the new record", not an id nobody gave."""

    __slots__ = ()


def proposal(
    caller: Caller, snapshots: Sequence[tuple[str, bytes]], fields: dict[str, Any]
) -> Callable[[Cursor, datetime], Decision[str]]:
    """The decision of one proposal (``fields``: :func:`prepare`'s keyword
    arguments): its ``Proposed`` event; the result is its id as the caller is shown it."""

    def decide(c: Cursor, now: datetime) -> Decision[str]:
        given = dict(fields)  # each try finds the previous capture anew
        found = given.get("supersedes") is _RECAPTURE
        if found:
            given["supersedes"] = versions.previous_capture(
                caller, c, given["scope"], given["claim_key"], given["evidence"], given["value"]
            )
        newest = given.get("supersedes")
        if isinstance(newest, NewestOf):
            given["supersedes"] = versions.newest_version(
                caller, c, given["scope"], given["claim_key"], newest.kind, newest.unseen_after
            )
        record = prepare(caller, c, Batch(), {}, now=now, found=found, **given)
        return Decision([record], lambda _: redaction.bare(record.record_id), snapshots)

    return decide


def propose_many(caller: Caller, items: Iterable[Mapping[str, Any]]) -> list[str]:
    """``Session.propose_many``: every item or none, in one transaction."""
    caller.writable("propose_many")
    batch = check_list(items, "items")

    def decide(c: Cursor, now: datetime) -> Decision[list[str]]:
        records: list[Record.Proposed] = []
        pending = Batch()
        mentioned = _mentioned_ids(batch)
        found = validity_view.current_many(c, caller.engine.dialect, mentioned)
        known = {rid: found.get(rid) for rid in mentioned}
        # A taken id is reported only if no item has another problem: the error a
        # batch meets does not tell whether an id exists.
        taken: DuplicateRecordError | None = None
        for index, item in enumerate(batch):
            drawn = ""  # the id drawn for an item naming none, which no one saw
            try:
                fields = _batch_fields(item)
                if fields["record_id"] is None:
                    fields["record_id"] = DrawnId(new_record_id())
                    drawn = repr(str(fields["record_id"]))
                record = prepare(caller, c, pending, known, **fields)
            except DuplicateRecordError as exc:
                taken = taken or DuplicateRecordError(f"propose_many item {index}: {exc}")
                continue
            except LedgerError as exc:
                told = str(exc).replace(drawn, "the new record") if drawn else str(exc)
                raise retold(exc, f"propose_many item {index}: {told}") from None
            pending.add(record)
            records.append(record)
        if taken is not None:
            raise taken
        return Decision(records, lambda _: [redaction.bare(r.record_id) for r in records])

    with gc_pause.paused():  # thousands of short-lived objects and no cycles
        return pipeline.command(caller, "propose_many", decide)


def _batch_fields(item: object) -> dict[str, Any]:
    """A ``propose_many`` item as :func:`prepare`'s keyword arguments."""
    if not isinstance(item, Mapping):
        raise InvalidInputError(f"must be a mapping, got {type(item).__name__}")
    odd = [k for k in item if not isinstance(k, str)]
    if odd:
        raise InvalidInputError(f"field names must be strings, got {odd[0]!r}")
    unknown = sorted(set(item) - set(BATCH_FIELDS))
    if unknown:
        raise InvalidInputError(f"unknown field {unknown[0]!r}")
    missing = [k for k in ("scope", "claim_key", "value", "kind") if k not in item]
    if missing:
        raise InvalidInputError(f"missing field {missing[0]!r}")
    return {
        "scope": item["scope"],
        "claim_key": item["claim_key"],
        "value": item["value"],
        "kind": item["kind"],
        "parents": item.get("parents", ()),
        "expires": item.get("expires"),
        "conditions": item.get("conditions"),
        "record_id": item.get("id"),
        "evidence": None,
        "supersedes": item.get("supersedes"),
    }


def prepare(
    caller: Caller,
    c: Cursor,
    pending: Batch,
    known: dict[str, Any],
    *,
    scope: str,
    claim_key: str,
    value: Any,
    kind: Kind | str,
    parents: Iterable[str],
    expires: datetime | None,
    conditions: Mapping[str, Any] | None,
    record_id: str | None,
    evidence: dict[str, Any] | None,
    supersedes: str | None = None,
    now: datetime | None = None,
    found: bool = False,
) -> Record.Proposed:
    """Validate one proposal completely and build its event (nothing written),
    timed ``now`` (else the ledger's clock is read). ``found``: ``supersedes``
    is the previous capture the ledger found for a re-capture, not a record the
    caller named (which it must be allowed to read).

    ``pending`` maps ids proposed earlier in the same batch to their events;
    ``known`` holds current view rows read for the whole batch up front (a record
    id it has no key for is looked up, and kept there).
    """
    engine = caller.engine
    now = engine.now() if now is None else now
    check_id(scope, "scope")
    if supersedes is None:
        claim_key = check_claim_key(claim_key)
        check_format_edges(claim_key, "claim_key")
    # (A new version keeps its claim's key as it is stored: ``_version_key``.)
    the_kind = check_kind(kind)
    if the_kind is Kind.EVIDENCE and evidence is None:
        raise InvalidKindError(
            "kind 'evidence' is proposed by capture, which pins the bytes read (content "
            "hash, fetch time, snapshot): capture the content, or propose another kind"
        )
    the_value = check_value(value, "value", engine.max_value_bytes)
    the_conditions = check_conditions(conditions, engine.max_value_bytes)
    if expires is not None:
        engine.check_future(check_aware(expires, "expires"), "expires")
    rule = engine.retention.get(the_kind)
    if rule is not None:
        rule.check(the_kind, expires, now)
    drawn = record_id is None or isinstance(record_id, DrawnId)
    rid = str(check_id(record_id)) if record_id is not None else new_record_id()
    named = tuple(dict.fromkeys(check_ref(p, "parent id") for p in check_list(parents, "parents")))
    # The role first: what is taken in a scope is told only to who may propose there.
    caller.require(c, scope, Role.PROPOSE, "propose" if evidence is None else "capture")
    if rid in named:
        # A taken id first: a record that exists is no parent-to-be of itself.
        if _new_key(caller, c, rid, scope, known, pending) is None:
            raise DuplicateRecordError(f"record {rid!r} already exists")
        raise CycleError(f"record {rid!r} cannot be its own parent")
    # Dependencies are named as the caller sees them; the event holds their keys
    # (two names of one record make one parent, shown by the first).
    keys: dict[str, str] = {}
    for name in named:
        keys.setdefault(_resolve(caller, c, name, known, pending), name)
    declared = tuple(keys)
    shown = keys if declared != named else {}
    if supersedes is not None:
        old_name = check_ref(supersedes, "supersedes id")
        supersedes = _resolve(caller, c, old_name, known, pending)
        shown.setdefault(supersedes, old_name)
        claim_key = _version_key(caller, c, supersedes, claim_key, known, pending, found)
    observed = caller.run.observed_for(declared, c) if caller.run is not None else ()
    # A new version read the one it replaces: that is not a dependency.
    observed = tuple(o for o in observed if o != supersedes)
    # What rests on the version replaced (None: it is not visible, and refused below).
    below = None if supersedes is None else _below(caller, c, supersedes, known, found)
    if below is not None:
        # Accepting the new version makes those STALE: the run's reads of them
        # (that carried the old version forward) are no basis for the new one.
        observed = tuple(o for o in observed if not _rests_on(o, below, pending))
    inherited: list[tuple[str, dict[str, Any]]] = []
    refused: list[tuple[str, InvalidParentError]] = []  # every bad parent, named at once
    for dep in declared:
        if dep in pending and Role.READ.value in caller.roles(c, pending[dep].scope):
            inherited.append((dep, pending[dep].conditions))
            continue
        name = shown.get(dep, dep)
        try:
            row = _check_dependency(caller, c, dep, "parent", rid, known, name)
        except InvalidParentError as exc:
            refused.append((name, exc))
            continue
        inherited.append((name, unpack(row["conditions"])))
    rules.check_dependencies_refused(refused, "parent", rid, caller.subject)
    seen: list[tuple[str, dict[str, Any]]] = []
    for dep in observed:
        row = _check_dependency(caller, c, dep, "observed dependency", rid, known)
        seen.append((caller.shown(c, dep), unpack(row["conditions"])))
    label = "the proposal" if drawn else repr(rid)
    the_conditions = rules.with_inherited(label, the_conditions, inherited)
    the_conditions = rules.with_observed(label, the_conditions, seen)
    if supersedes is not None:
        _check_supersedable(
            caller,
            c,
            supersedes,
            shown.get(supersedes, supersedes),
            rid,
            scope,
            claim_key,
            the_kind,
            (*declared, *observed),
            known,
            pending,
            below or set(),
            found,
        )
    # Last: every other refusal comes first, so which error a bad proposal meets
    # does not tell whether its id is taken. An id taken only in a scope the
    # caller cannot see is free to it (the record is keyed ``id@@scope``).
    key = _new_key(caller, c, rid, scope, known, pending)
    if key is None:
        raise DuplicateRecordError(f"record {rid!r} already exists")
    return Record.proposed_event(
        at=now,
        record_id=key,
        scope=scope,
        claim_key=claim_key,
        kind=the_kind.value,
        value=the_value,
        actor=caller.subject,
        expires=expires,
        parents=declared,
        observed=observed,
        conditions=the_conditions,
        evidence=evidence,
        run_id=caller.run.run_id if caller.run is not None else None,
        supersedes=supersedes,
    )


def _check_supersedable(
    caller: Caller,
    c: Cursor,
    old_id: str,
    old_name: str,
    rid: str,
    scope: str,
    claim_key: str,
    kind: Kind,
    deps: Sequence[str],
    known: dict[str, Any],
    pending: Mapping[str, Record.Proposed],
    below: set[str],
    found: bool = False,
) -> None:
    """``old`` may be superseded by the proposal ``rid``: visible, same scope,
    claim key and kind (kinds are never merged), not withdrawn, and neither a
    dependency of the proposal nor an ancestor of one (a new version may not rest
    on what it replaces: ``below`` holds its descendants, :func:`_below`).
    ``old_id`` is its key, ``old_name`` the id the caller named it by."""
    row = _row(caller, c, old_id, known)
    if row is None or not _may_supersede(caller, c, row, found):
        raise UnknownRecordError(
            f"propose refused: superseded record {old_name!r} is unknown or not visible "
            f"to {caller.subject!r}"
        )
    if (row["scope"], row["claim_key"]) != (scope, claim_key):
        stored = row["claim_key"]
        # Keys that print alike (one an earlier version took): say which is stored.
        alike = unicodedata.normalize("NFC", stored.strip()) == claim_key
        raise InvalidInputError(
            f"propose refused: supersedes {old_name!r} ({row['scope']}/{stored}), "
            f"not {scope}/{claim_key}: a new version keeps scope and claim key"
            + (f" (the claim is stored as {stored!a}: give that)" if alike else "")
        )
    if row["kind"] != kind.value:
        raise InvalidKindError(
            f"propose refused: supersedes {old_name!r} (kind {row['kind']}) with kind "
            f"{kind.value}: a new version keeps its kind (kinds are never merged)"
        )
    if row["status"] in rules.FINAL:
        raise InvalidTransitionError(
            f"propose refused: supersedes {old_name!r}, which is "
            f"{row['status']}{rules.cause_text(row)}; only a CANDIDATE, ACCEPTED or STALE "
            "record can be superseded"
        )
    if old_id in deps:
        raise InvalidParentError(
            f"propose refused: supersedes {old_name!r}, which it would also depend on "
            "(a new version cannot both depend on and supersede the old)"
        )
    # A record of this batch may rest on ``old`` itself (it is not among ``below``).
    under = below | {old_id}
    for dep in deps:
        if _rests_on(dep, under, pending):
            raise InvalidParentError(
                f"propose refused: supersedes {old_name!r}, but its dependency "
                f"{caller.shown(c, dep)!r} rests on {old_name!r}, and accepting the new "
                f"version would make it STALE; depend on records that do not (what is "
                f"captured or proposed in a run after it was shown {old_name!r} usable "
                "carries that read and rests on it: capture or propose it again in a run "
                "that has not, such as a new MCP session, LangGraph thread or "
                "session.run())"
            )


def _version_key(
    caller: Caller,
    c: Cursor,
    old: str,
    given: str,
    known: dict[str, Any],
    pending: Mapping[str, Record.Proposed],
    found: bool,
) -> str:
    """A new version's claim key: ``given`` as is when ``old`` stores it so (a key
    an earlier version took: whitespace at its ends, or not NFC), else checked."""
    stored = pending[old].claim_key if old in pending else None
    row = None if old in pending else _row(caller, c, old, known)
    if row is not None and _may_supersede(caller, c, row, found):
        stored = row["claim_key"]
    return given if given == stored else check_claim_key(given)


def _may_supersede(caller: Caller, c: Cursor, row: Any, found: bool) -> bool:
    """Whether the caller may supersede the record of ``row``: one it named it must
    read, as a parent (naming it, one who may not learns nothing of it, not its
    claim key, status or reason); the previous capture of a source it captures
    again (``found``) is superseded in any scope where it holds a role."""
    roles = caller.roles(c, row["scope"])
    return bool(roles) if found else Role.READ.value in roles


def _below(
    caller: Caller, c: Cursor, old_id: str, known: dict[str, Any], found: bool = False
) -> set[str] | None:
    """The descendants of ``old_id``, the record a proposal supersedes; None when
    the caller may not supersede it (the proposal is then refused for it, telling
    nothing)."""
    row = _row(caller, c, old_id, known)
    if row is None or not _may_supersede(caller, c, row, found):
        return None
    return {cid for cid, _ in edges_index.descendants(c, caller.engine.dialect, old_id)}


def _rests_on(dep: str, below: set[str], pending: Mapping[str, Record.Proposed]) -> bool:
    """Whether ``dep`` is in ``below``, or is a record of this batch resting on it."""
    if dep in below:
        return True
    event = pending.get(dep)
    return event is not None and any(
        _rests_on(p, below, pending) for p in (*event.parents, *event.observed)
    )


def _row(caller: Caller, c: Cursor, rid: str, known: dict[str, Any]) -> Any:
    """The current row of ``rid`` (None if there is none), read once a command."""
    if rid not in known:
        known[rid] = caller.engine.current_row(c, rid)
    return known[rid]


def _resolve(
    caller: Caller,
    c: Cursor,
    name: str,
    known: dict[str, Any],
    pending: Mapping[str, Record.Proposed],
) -> str:
    """The key of the record ``name`` denotes for the caller
    (:meth:`Caller.resolve`), records proposed earlier in the batch included."""
    if name in pending or redaction.QUALIFIER in name:
        return name if name in pending else caller.resolve(c, name)
    row = _row(caller, c, name, known)
    if row is not None and caller.roles(c, row["scope"]):
        return name
    # A dependency never used is looked up as one taken in a hidden scope is (it is
    # refused either way), so the time taken does not tell the two apart.
    for key, event in pending.items():
        if key == redaction.qualified(name, event.scope) and caller.roles(c, event.scope):
            return key
    return caller.resolve(c, name)


def _new_key(
    caller: Caller, c: Cursor, rid: str, scope: str, known: dict[str, Any], pending: Batch
) -> str | None:
    """The key of a new record proposed as ``rid`` in ``scope``; None if the id is
    taken where the caller can see it (see :meth:`Caller.key_for`)."""
    if rid in pending.ids:
        return None  # proposed earlier in the batch, where the caller sees it
    row = _row(caller, c, rid, known)
    if row is None:
        return rid
    if caller.roles(c, row["scope"]):
        return None
    key = caller.key_for(c, rid, scope)
    return None if key is None or key in pending else key


def _check_dependency(
    caller: Caller,
    c: Cursor,
    dep: str,
    what: str,
    child: str,
    known: dict[str, Any],
    name: str | None = None,
) -> Any:
    """The row of ``dep`` (a key; ``name``: how the caller named it), which
    ``child`` may rest on."""
    shown = name or caller.shown(c, dep)
    row = caller.readable_dependency(c, _row(caller, c, dep, known), shown, what, child)
    rules.check_buildable_on(row, shown, what, child)
    return row


def _mentioned_ids(batch: Sequence[Any]) -> list[str]:
    """Well-formed record ids a ``propose_many`` batch names (as ids or parents),
    so their view rows are read in one query; anything odd is left to the
    per-item validation, which reports it."""
    ids: list[str] = []
    for item in batch:
        if not isinstance(item, Mapping):
            continue
        named = [item.get("id")]
        parents = item.get("parents")
        if isinstance(parents, (list, tuple)):
            named.extend(parents)
        for rid in named:
            if isinstance(rid, str):
                try:
                    ids.append(check_id(rid))
                except LedgerError:
                    continue
    return ids
