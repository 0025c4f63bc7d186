"""What the MCP tools return: typed JSON objects (their schemas are the tools'
output schemas) built from the library's values with :mod:`ledger.jsonable`, the
JSON forms every surface shares (datetimes ISO 8601, bytes ``{"base64": …}``).

Every result is paid for with a model's context, so it leaves out what says
nothing: a field whose value is null is absent (its schema does not require it),
and so is a record's list or object that is empty (``parents``, ``observed``,
``conditions``, ``deliveries``, ``stale_causes``, ``undeclared``): absent means
none. A stored ``value`` is kept as stored, null included. The lists that are an
answer (a read's ``records``, a page's, an audit's ``events``, a revocation's ids)
are there even when empty. A write tool's record carries its value only when
small (:data:`ECHOED_VALUE_BYTES`): its proposer sent it, its approver was shown
it, and get_record gives it whole.

A model reads each type's docstring and each field's description in the schemas:
they are plain text, numbers given as their values (a test holds them to the
constants), not Sphinx roles."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Sequence
from typing import Annotated, Any, NotRequired, cast

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from ledger.answers import MAX_ANSWER_BYTES, USABLE_LISTED, usable_listed, usable_shown
from ledger.domain import Outcome
from ledger.graph import MAX_SERVED_NODES
from ledger.jsonable import (
    capped_explanation,
    capped_revocation,
    json_safe,
    plain,
    record_json,
)
from ledger.serialization import canonical
from ledger.values import (
    AuditEvent,
    AuditTrail,
    Explanation,
    ReadResult,
    RecordView,
    Revocation,
)

__all__ = [
    "ECHOED_VALUE_BYTES",
    "EVENTS_LISTED",
    "RECORD_URI",
    "USABLE_LISTED",
    "AuditOut",
    "DecisionOut",
    "EventOut",
    "EvidenceOut",
    "ExplainOut",
    "PageOut",
    "ProposalOut",
    "ReadOut",
    "ReasonOut",
    "RecordOut",
    "RevocationOut",
    "WrittenOut",
    "audit_out",
    "explain_out",
    "read_out",
    "record_out",
    "record_uri",
    "revocation_out",
    "written_out",
]

#: The URI template of the record resource.
RECORD_URI = "provledger://record/{record_id}"

#: The most deliveries of a record a result lists, the most recent (a report sent
#: to every customer is delivered thousands of times: each read of it would fill
#: a model's context); ``deliveries_count`` counts them all.
DELIVERIES_LISTED = 10

#: The most events of a record ``audit_record`` lists unless asked for more (a report
#: delivered thousands of times has an event per delivery); ``next_after`` pages on.
EVENTS_LISTED = 100

#: The largest value, in bytes of compact JSON, a write tool's result carries: a
#: larger one is given by its size and hash (the caller sent it; get_record shows it).
ECHOED_VALUE_BYTES = 1024


class _RecordHead(TypedDict):
    id: str
    scope: str
    claim_key: str
    kind: str


class _RecordTail(TypedDict):
    status: str
    validity: str
    expires: NotRequired[str]
    effective_expires: NotRequired[
        Annotated[
            str, Field(description="When it stops being usable: its or a dependency's expiry.")
        ]
    ]
    expiry_source: NotRequired[
        Annotated[str, Field(description="The record whose expiry that is.")]
    ]
    parents: NotRequired[list[str]]
    observed: NotRequired[
        Annotated[
            list[str], Field(description="Dependencies recorded from what its run was shown.")
        ]
    ]
    conditions: NotRequired[dict[str, Any]]
    proposer: str
    created_at: str
    evidence: NotRequired[
        Annotated[
            dict[str, Any],
            Field(description="Evidence: its uri, fetched_at, content_hash, snapshot_ref, size."),
        ]
    ]
    cause: NotRequired[
        Annotated[
            str,
            Field(description="STALE: the record whose revocation or supersession made it so."),
        ]
    ]
    reason: NotRequired[
        Annotated[
            str,
            Field(description="Why it was rejected or revoked; STALE: why `cause` was."),
        ]
    ]
    deliveries: NotRequired[
        Annotated[
            list[dict[str, Any]],
            Field(description="Its deliveries, the most recent 10 at most, oldest of them first."),
        ]
    ]
    deliveries_count: NotRequired[
        Annotated[
            int,
            Field(description="How many deliveries it has, when more than 10 (those listed)."),
        ]
    ]
    position: Annotated[int, Field(description="Log position of its latest change.")]
    supersedes: NotRequired[
        Annotated[str, Field(description="The record it was proposed to replace.")]
    ]
    superseded_by: NotRequired[
        Annotated[str, Field(description="SUPERSEDED: the record accepted in its place.")]
    ]
    cause_superseded_by: NotRequired[
        Annotated[
            str, Field(description="STALE because `cause` was superseded, not revoked: by what.")
        ]
    ]
    stale_causes: NotRequired[
        Annotated[
            list[dict[str, Any]],
            Field(description="Each cause that made it STALE since its last revalidation."),
        ]
    ]
    undeclared: NotRequired[
        Annotated[list[str], Field(description="Observed dependencies not named in `parents`.")]
    ]


class _Value(TypedDict):
    value: Annotated[Any, Field(description="The stored value, null included.")]


class _ValueOrDigest(TypedDict):
    value: NotRequired[
        Annotated[
            Any,
            Field(
                description="The stored value, null included; absent when its JSON is longer "
                f"than {ECHOED_VALUE_BYTES} bytes (`value_bytes` and `value_sha256` stand for it)."
            ),
        ]
    ]
    value_bytes: NotRequired[
        Annotated[int, Field(description="The size of the value left out: its compact JSON.")]
    ]
    value_sha256: NotRequired[
        Annotated[
            str,
            Field(
                description="'sha256:' and the hex digest of the value left out, as compact "
                "JSON with sorted keys in UTF-8."
            ),
        ]
    ]


class RecordOut(_RecordHead, _Value, _RecordTail):
    """One record as the ledger sees it now; a field that is null or an empty list or
    object is left out (no parents, no expiry, not stale...)."""


class WrittenOut(_RecordHead, _ValueOrDigest, _RecordTail):
    """The record as the write left it, as get_record gives it but that a value whose
    JSON is longer than 1024 bytes is left out for its size and hash."""


class EvidenceOut(TypedDict):
    """The captured bytes of an evidence record, re-verified against their hash."""

    id: str
    uri: NotRequired[str]
    fetched_at: NotRequired[str]
    content_hash: NotRequired[str]
    snapshot_ref: str
    size: int
    content_encoding: str
    content: str


class ProposalOut(TypedDict):
    """What capture_evidence and propose_memory return; `record` only when you may read
    its scope."""

    id: str
    status: str
    note: str
    run_id: NotRequired[str]
    record: NotRequired[WrittenOut]


class ReadOut(TypedDict):
    """A read's answer: its usable records, at most 100 (and 4 MiB of JSON); when
    some are left out, `omitted` counts them and `note` says how to see them."""

    outcome: str
    scope: str
    claim_key: str
    at: str
    value: NotRequired[
        Annotated[Any, Field(description="FOUND: the agreed value (null included); else absent.")]
    ]
    records: list[RecordOut]
    omitted: NotRequired[int]
    note: NotRequired[str]


class ReasonOut(TypedDict):
    """Why one record is or is not usable."""

    record: RecordOut
    usable: bool
    reasons: list[str]


class ExplainOut(TypedDict):
    """Per record, why it is or is not usable: the usable records (at most 100) and
    at most `limit` others; when some are left out `omitted` counts them,
    `usable_omitted` the usable among them, and `note` says how to see them."""

    outcome: str
    scope: str
    claim_key: str
    at: str
    entries: list[ReasonOut]
    omitted: NotRequired[int]
    usable_omitted: NotRequired[int]
    note: NotRequired[str]


class PageOut(TypedDict):
    """One page of records; `next_after` is the `after` of the next page, absent on
    the last page."""

    records: list[RecordOut]
    next_after: NotRequired[str]


class EventOut(TypedDict):
    """One event of a record's history; `details` are its recorded fields but those
    null or empty (a revalidation's `parents: []` stays: a new basis of nothing,
    where no `parents` kept the old one)."""

    position: int
    type: str
    at: str
    actor: NotRequired[str]
    details: dict[str, Any]


class AuditOut(TypedDict):
    """A page of a record's history, in log order; `next_after` is the `after` of
    the next page, absent on the last."""

    record: RecordOut
    events: list[EventOut]
    undeclared: NotRequired[
        Annotated[list[str], Field(description="Observed dependencies not named in `parents`.")]
    ]
    next_after: NotRequired[int]


class DecisionOut(TypedDict):
    """What an approval tool did; `record` is absent without the read role there."""

    id: str
    action: str
    record: NotRequired[WrittenOut]


class RevocationOut(TypedDict):
    """What a revocation changed, as far as you may see: the first 1000 ids of each
    list, how many there are, and when some are left out a note saying where to
    find them."""

    root: str
    affected: list[str]
    stale: list[str]
    position: int
    affected_count: int
    stale_count: int
    note: NotRequired[str]


#: A record's fields whose content a proposer stored: never pruned inside.
_STORED = frozenset({"value", "conditions"})


def _pruned(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without its members that are null, ``[]`` or ``{}``, at any depth;
    a ``value`` is kept as stored, and ``conditions`` when not empty (a null in
    them is what a proposer stored)."""
    out: dict[str, Any] = {}
    for key, item in data.items():
        if key != "value" and (item is None or item == [] or item == {}):
            continue
        if key not in _STORED:
            if isinstance(item, dict):
                item = _pruned(item)
            elif isinstance(item, list):
                item = [_pruned(x) if isinstance(x, dict) else x for x in item]
        out[key] = item
    return out


def record_out(view: RecordView) -> RecordOut:
    """A record view as the JSON the tools and the resource return: null and empty
    fields left out (:func:`_pruned`), and its most recent
    :data:`DELIVERIES_LISTED` deliveries only, with ``deliveries_count``."""
    data = json_safe(record_json(view, DELIVERIES_LISTED))
    if data["deliveries_count"] == len(data["deliveries"]):
        del data["deliveries_count"]
    return cast(RecordOut, _pruned(data))


def written_out(view: RecordView) -> WrittenOut:
    """A record as a write tool returns it: :func:`record_out`, but a value whose
    compact JSON passes :data:`ECHOED_VALUE_BYTES` given by ``value_bytes`` and
    ``value_sha256`` instead."""
    out: dict[str, Any] = dict(record_out(view))
    text = json.dumps(out["value"], ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    data = text.encode()
    if len(data) > ECHOED_VALUE_BYTES:
        del out["value"]
        out["value_bytes"] = len(data)
        out["value_sha256"] = "sha256:" + hashlib.sha256(data).hexdigest()
    return cast(WrittenOut, out)


def _usable_note(listed: int, usable: Sequence[RecordView], scope: str, claim_key: str) -> str:
    """What a read or an explanation says of the usable records it left out."""
    values = len({canonical(view.value) for view in usable})
    held = f"; they hold {values} different values" if values > 1 else ""
    return (
        f"{len(usable) - listed} of the {len(usable)} usable records of this claim are not "
        f"listed (the outcome counts them all, and all count as read{held}). "
        f"list_records(scope={scope!r}, claim_prefix={claim_key!r}, validity='VALID') "
        "pages through them (it also lists keys that begin with it)."
    )


def read_out(result: ReadResult) -> ReadOut:
    """A read's answer as JSON: its usable records as :func:`usable_listed` lists
    them (beside the agreed value when FOUND), ``omitted`` and ``note`` when some
    are left out."""
    value = json_safe(plain(result.value))
    budget = MAX_ANSWER_BYTES - len(json.dumps(value, ensure_ascii=False).encode())
    listed, _ = usable_listed(result.records, budget, DELIVERIES_LISTED)
    answer: ReadOut = {
        "outcome": str(result.outcome),
        "scope": result.scope,
        "claim_key": _stored_key(result),
        "at": result.at.isoformat(),
        "records": [record_out(r) for r in listed],
    }
    if result.outcome == Outcome.FOUND:
        answer["value"] = value
    if len(listed) < len(result.records):
        answer["omitted"] = len(result.records) - len(listed)
        answer["note"] = _usable_note(len(listed), result.records, result.scope, result.claim_key)
    return answer


def _stored_key(result: ReadResult) -> str:
    """The claim key a read answered, as the ledger keeps it: its records' key, or
    the key asked in NFC (the library's read echoes the key as given, and a key in
    another normal form names the same claim)."""
    if result.records:
        return result.records[0].claim_key
    return unicodedata.normalize("NFC", result.claim_key)


def explain_out(explanation: Explanation) -> ExplainOut:
    """An explanation asked with a limit as JSON (:func:`ledger.jsonable.capped_explanation`),
    its usable records as :func:`usable_listed` lists them (``usable_omitted``
    when some are left out); ``omitted`` and ``note`` only when some are."""
    shown, left = usable_shown(explanation, DELIVERIES_LISTED)
    rest = (
        f"Call explain_memory again with a larger `limit` (at most {MAX_SERVED_NODES}), or "
        "page through the claim's records with list_records "
        f"(claim_prefix={explanation.claim_key!r}; it also lists keys that begin with it)."
    )
    answer = json_safe(capped_explanation(shown, rest, DELIVERIES_LISTED))
    for entry in answer["entries"]:
        record = entry["record"]
        if record["deliveries_count"] == len(record["deliveries"]):
            del record["deliveries_count"]
        entry["record"] = _pruned(record)
    omitted, note = answer.pop("omitted"), answer.pop("note")
    if left:
        answer["usable_omitted"] = left
        omitted += left
        usable = [entry.record for entry in explanation.entries if entry.usable]
        more = _usable_note(len(usable) - left, usable, explanation.scope, explanation.claim_key)
        note = more if note is None else f"{more} {note}"
    if omitted:
        answer["omitted"] = omitted
    if note is not None:
        answer["note"] = note
    return cast(ExplainOut, answer)


def audit_out(
    trail: AuditTrail, events: Sequence[AuditEvent] | None = None, more: bool = False
) -> AuditOut:
    """A record's audit trail as JSON: ``events`` of it (all by default), each
    one's null ``actor`` and null details left out (but a null ``value``: a
    proposal of null), ``undeclared`` when any, and when ``more`` follow,
    ``next_after``: the last one's position."""
    shown = trail.events if events is None else events
    answer: AuditOut = {
        "record": record_out(trail.record),
        "events": [_event_out(event) for event in shown],
    }
    if trail.undeclared:
        answer["undeclared"] = list(trail.undeclared)
    if more and shown:
        answer["next_after"] = shown[-1].position
    return answer


#: A revalidation's details that name its new basis.
_NEW_BASIS = ("parents", "observed")


def _event_out(event: AuditEvent) -> EventOut:
    """One event as JSON, its details pruned as a record's fields are (:func:`_pruned`)
    but a revalidation's ``parents`` and ``observed``: their ``[]`` is a new, empty
    basis, where their absence kept the old one."""
    data = json_safe(plain(event))
    if data["actor"] is None:
        del data["actor"]
    details = data["details"]
    basis = _NEW_BASIS if event.type == "Revalidated" else ()
    kept = {key: details[key] for key in basis if details.get(key) is not None}
    data["details"] = _pruned(details) | kept
    return cast(EventOut, data)


def revocation_out(rev: Revocation, listed: int = MAX_SERVED_NODES) -> RevocationOut:
    """What a revocation changed, as JSON: at most ``listed`` ids per list, and
    ``note`` only when some are left out."""
    rest = "list_records with status='STALE' pages through those now STALE."
    answer = capped_revocation(rev, listed, rest)
    if answer["note"] is None:
        del answer["note"]
    return cast(RevocationOut, answer)


def record_uri(record_id: str) -> str:
    """The resource URI of a record."""
    return RECORD_URI.format(record_id=record_id)
