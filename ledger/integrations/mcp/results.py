"""What the MCP tools return: typed JSON objects (their schemas are the tools'
output schemas) built from the library's values with :mod:`ledger.jsonable`, the
JSON forms every surface shares (datetimes ISO 8601, bytes ``{"base64": …}``).

A model reads each type's docstring and each field's description in the schemas:
they are plain text, numbers given as their values (a test holds them to the
constants), not Sphinx roles."""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from collections.abc import Sequence
from typing import Annotated, Any, NotRequired, cast

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from ledger.answers import MAX_ANSWER_BYTES, size_of
from ledger.graph import MAX_SERVED_NODES
from ledger.jsonable import (
    capped_explanation,
    capped_revocation,
    json_safe,
    plain,
    record_json,
)
from ledger.serialization import canonical
from ledger.values import AuditTrail, Explanation, ReadResult, RecordView, Revocation

__all__ = [
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
    "audit_out",
    "explain_out",
    "read_out",
    "record_out",
    "record_uri",
    "revocation_out",
    "usable_listed",
]

#: The URI template of the record resource.
RECORD_URI = "provledger://record/{record_id}"

#: The most usable records read_memory and explain_memory list (fewer when their
#: JSON would pass :data:`~ledger.answers.MAX_ANSWER_BYTES`); the outcome counts all.
USABLE_LISTED = 100


class RecordOut(TypedDict):
    """One record as the ledger sees it now."""

    id: str
    scope: str
    claim_key: str
    kind: str
    value: Any
    status: str
    validity: str
    expires: str | None
    effective_expires: Annotated[
        str | None,
        Field(description="When it stops being usable: its or a dependency's expiry."),
    ]
    expiry_source: Annotated[str | None, Field(description="The record whose expiry that is.")]
    parents: list[str]
    observed: Annotated[
        list[str], Field(description="Dependencies recorded from what its run was shown.")
    ]
    conditions: dict[str, Any]
    proposer: str
    created_at: str
    evidence: dict[str, Any] | None
    cause: Annotated[
        str | None,
        Field(description="STALE: the record whose revocation or supersession made it so."),
    ]
    reason: Annotated[
        str | None, Field(description="Why it was rejected or revoked; STALE: why `cause` was.")
    ]
    deliveries: list[dict[str, Any]]
    position: Annotated[int, Field(description="Log position of its latest change.")]
    supersedes: Annotated[str | None, Field(description="The record it was proposed to replace.")]
    superseded_by: Annotated[
        str | None, Field(description="SUPERSEDED: the record accepted in its place.")
    ]
    cause_superseded_by: Annotated[
        str | None, Field(description="STALE because `cause` was superseded, not revoked: by what.")
    ]
    stale_causes: Annotated[
        list[dict[str, Any]],
        Field(description="Each cause that made it STALE since its last revalidation."),
    ]
    undeclared: Annotated[
        list[str], Field(description="Observed dependencies not named in `parents`.")
    ]


class EvidenceOut(TypedDict):
    """The captured bytes of an evidence record, re-verified against their hash."""

    id: str
    uri: str | None
    fetched_at: str | None
    content_hash: str | None
    snapshot_ref: str
    size: int
    content_encoding: str
    content: str


class ProposalOut(TypedDict):
    """What capture_evidence and propose_memory return."""

    id: str
    status: str
    note: str
    run_id: str | None
    record: RecordOut | None


class ReadOut(TypedDict):
    """A read's answer: its usable records, at most 100 (and 4 MiB of JSON); when
    some are left out, `omitted` counts them and `note` says how to see them."""

    outcome: str
    scope: str
    claim_key: str
    at: str
    value: Any
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
    at most `limit` others; `omitted` counts those left out, `usable_omitted` the
    usable among them, and `note` says how to see them."""

    outcome: str
    scope: str
    claim_key: str
    at: str
    entries: list[ReasonOut]
    omitted: int
    usable_omitted: NotRequired[int]
    note: str | None


class PageOut(TypedDict):
    """One page of records; `next_after` is the `after` of the next page."""

    records: list[RecordOut]
    next_after: str | None


class EventOut(TypedDict):
    """One event of a record's history."""

    position: int
    type: str
    at: str
    actor: str | None
    details: dict[str, Any]


class AuditOut(TypedDict):
    """A record's whole history."""

    record: RecordOut
    events: list[EventOut]
    undeclared: list[str]


class DecisionOut(TypedDict):
    """What an approval tool did; `record` is null without the read role there."""

    id: str
    action: str
    record: RecordOut | None


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
    note: str | None


def record_out(view: RecordView) -> RecordOut:
    """A record view as the JSON the tools and the resource return."""
    return cast(RecordOut, json_safe(record_json(view)))


def usable_listed(
    usable: Sequence[RecordView], budget: int = MAX_ANSWER_BYTES
) -> tuple[list[RecordView], int]:
    """The usable records an answer lists, in their order, and the bytes of their
    JSON: every one when they are at most :data:`USABLE_LISTED` and fit in
    ``budget``; else at most that many, stopped before the one that would pass
    ``budget`` (the first always stays), a record of each value picked before a
    second of any (a CONFLICT shows the values it is between, as far as they fit)."""
    sizes = [size_of(view) for view in usable[: USABLE_LISTED + 1]]
    if len(usable) <= USABLE_LISTED and sum(sizes) <= budget:
        return list(usable), sum(sizes)
    seen: set[bytes] = set()
    first: list[int] = []
    second: list[int] = []
    for i, view in enumerate(usable):
        value = canonical(view.value)
        (second if value in seen else first).append(i)
        seen.add(value)
    picked: list[int] = []
    size = 0
    for i in (first + second)[:USABLE_LISTED]:
        grown = size + (sizes[i] if i < len(sizes) else size_of(usable[i]))
        if picked and grown > budget:
            break
        picked.append(i)
        size = grown
    return [usable[i] for i in sorted(picked)], size


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
    them (beside the agreed value), ``omitted`` and ``note`` when some are left out."""
    value = json_safe(plain(result.value))
    budget = MAX_ANSWER_BYTES - len(json.dumps(value, ensure_ascii=False).encode())
    listed, _ = usable_listed(result.records, budget)
    answer: ReadOut = {
        "outcome": str(result.outcome),
        "scope": result.scope,
        "claim_key": _stored_key(result),
        "at": result.at.isoformat(),
        "value": value,
        "records": [record_out(r) for r in listed],
    }
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
    when some are left out)."""
    usable = [entry.record for entry in explanation.entries if entry.usable]
    listed, _ = usable_listed(usable)
    kept = {id(view) for view in listed}
    entries = tuple(e for e in explanation.entries if not e.usable or id(e.record) in kept)
    shown = dataclasses.replace(explanation, entries=entries)
    rest = (
        f"Call explain_memory again with a larger `limit` (at most {MAX_SERVED_NODES}), or "
        "page through the claim's records with list_records "
        f"(claim_prefix={explanation.claim_key!r}; it also lists keys that begin with it)."
    )
    answer = cast(ExplainOut, json_safe(capped_explanation(shown, rest)))
    left = len(usable) - len(listed)
    if left:
        answer["usable_omitted"] = left
        answer["omitted"] += left
        more = _usable_note(len(listed), usable, explanation.scope, explanation.claim_key)
        answer["note"] = more if answer["note"] is None else f"{more} {answer['note']}"
    return answer


def audit_out(trail: AuditTrail) -> AuditOut:
    """A record's audit trail as JSON."""
    return {
        "record": record_out(trail.record),
        "events": [cast(EventOut, json_safe(plain(e))) for e in trail.events],
        "undeclared": list(trail.undeclared),
    }


def revocation_out(rev: Revocation, listed: int = MAX_SERVED_NODES) -> RevocationOut:
    """What a revocation changed, as JSON: at most ``listed`` ids per list."""
    rest = "list_records with status='STALE' pages through those now STALE."
    return cast(RevocationOut, capped_revocation(rev, listed, rest))


def record_uri(record_id: str) -> str:
    """The resource URI of a record."""
    return RECORD_URI.format(record_id=record_id)
