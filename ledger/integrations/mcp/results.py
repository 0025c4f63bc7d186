"""What the MCP tools return: typed JSON objects (their schemas are the tools'
output schemas) built from the library's values with :mod:`ledger.jsonable`, the
JSON forms every surface shares (datetimes ISO 8601, bytes ``{"base64": …}``)."""

from __future__ import annotations

from typing import Any, cast

from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from ledger.graph import MAX_SERVED_NODES
from ledger.jsonable import (
    capped_explanation,
    capped_revocation,
    json_safe,
    plain,
    record_json,
)
from ledger.values import AuditTrail, Explanation, ReadResult, RecordView, Revocation

__all__ = [
    "RECORD_URI",
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
]

#: The URI template of the record resource.
RECORD_URI = "provledger://record/{record_id}"


class RecordOut(TypedDict):
    """One record as the ledger sees it now (:func:`ledger.jsonable.record_json`)."""

    id: str
    scope: str
    claim_key: str
    kind: str
    value: Any
    status: str
    validity: str
    expires: str | None
    effective_expires: str | None
    expiry_source: str | None
    parents: list[str]
    observed: list[str]
    conditions: dict[str, Any]
    proposer: str
    created_at: str
    evidence: dict[str, Any] | None
    cause: str | None
    reason: str | None
    deliveries: list[dict[str, Any]]
    position: int
    supersedes: str | None
    superseded_by: str | None
    cause_superseded_by: str | None
    stale_causes: list[dict[str, Any]]
    undeclared: list[str]


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
    """The answer of the eligibility chain."""

    outcome: str
    scope: str
    claim_key: str
    at: str
    value: Any
    records: list[RecordOut]


class ReasonOut(TypedDict):
    """Why one record is or is not usable."""

    record: RecordOut
    usable: bool
    reasons: list[str]


class ExplainOut(TypedDict):
    """Per record, why it is or is not usable: every usable record and at most
    ``limit`` others; ``omitted`` records (none usable) left out, and when some
    are a note saying how to see them."""

    outcome: str
    scope: str
    claim_key: str
    at: str
    entries: list[ReasonOut]
    omitted: int
    note: str | None


class PageOut(TypedDict):
    """One page of records; ``next_after`` is the ``after`` of the next page."""

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
    """What an approval tool did; ``record`` is None without the read role there."""

    id: str
    action: str
    record: RecordOut | None


class RevocationOut(TypedDict):
    """What a revocation changed, as far as the token may see: the first
    :data:`~ledger.graph.MAX_SERVED_NODES` ids of each list, how many there are,
    and when some are left out a note saying where to find them."""

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


def read_out(result: ReadResult) -> ReadOut:
    """A read's answer as JSON."""
    return {
        "outcome": str(result.outcome),
        "scope": result.scope,
        "claim_key": result.claim_key,
        "at": result.at.isoformat(),
        "value": json_safe(plain(result.value)),
        "records": [record_out(r) for r in result.records],
    }


def explain_out(explanation: Explanation) -> ExplainOut:
    """An explanation asked with a limit as JSON (:func:`ledger.jsonable.capped_explanation`)."""
    rest = (
        f"Call explain_memory again with a larger `limit` (at most {MAX_SERVED_NODES}), or "
        "page through the claim's records with list_records "
        f"(claim_prefix={explanation.claim_key!r}; it also lists keys that begin with it)."
    )
    return cast(ExplainOut, json_safe(capped_explanation(explanation, rest)))


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
