"""The OpenAPI 3.1 description of the JSON API, served at ``/openapi.json``.

Written by hand next to :data:`ledger.serve.api.ROUTES` (a test checks that
both list the same routes and that every answer matches its schema). Enum
schemas are built from the library's own enums, so a new status appears here
with no edit.
"""

from __future__ import annotations

from typing import Any

from ledger import __version__
from ledger.domain import Kind, Outcome, Status, Validity
from ledger.jsonable import EXPLAINED
from ledger.serve.api import GRAPH_FORMATS, MAX_GRAPH_NODES, MAX_LIMIT, MAX_SVG_NODES, PREFIX


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


_STR = {"type": "string"}
_INT = {"type": "integer"}
_TIME = {"type": "string", "format": "date-time"}
_IDS = {"type": "array", "items": _STR}
_ANY: dict[str, Any] = {"description": "Any JSON value."}


def _object(
    properties: dict[str, Any], required: list[str] | None = None, description: str = ""
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    schema["required"] = list(properties) if required is None else required
    if description:
        schema["description"] = description
    return schema


def _enum(members: type[Kind | Status | Validity | Outcome]) -> dict[str, Any]:
    return {"type": "string", "enum": [m.value for m in members]}


SCHEMAS: dict[str, dict[str, Any]] = {
    "Error": _object(
        {
            "error": _object(
                {
                    "type": {
                        "type": "string",
                        "description": "The ledger error class (ledger.errors), e.g. "
                        "UnknownRecordError; NotFound or MethodNotAllowed for a path or "
                        "method no route has (404, 405 with Allow).",
                    },
                    "message": _STR,
                    "field": _nullable(
                        {
                            "type": "string",
                            "description": "For bad input (422), the body field or query "
                            "parameter at fault.",
                        }
                    ),
                }
            )
        },
        description="Every refusal: the error class, its message and the offending field.",
    ),
    "Kind": _enum(Kind),
    "Status": _enum(Status),
    "Validity": _enum(Validity),
    "Outcome": _enum(Outcome),
    "Correction": _object(
        {
            "correction_id": _STR,
            "delivery_id": _STR,
            "record_id": _STR,
            "note": _STR,
            "replacement": _nullable(_STR),
            "issued_at": _TIME,
            "issued_by": _STR,
            "position": _INT,
        }
    ),
    "Delivery": _object(
        {
            "delivery_id": _STR,
            "record_id": _STR,
            "recipient": _STR,
            "channel": _STR,
            "delivered_at": _TIME,
            "delivered_by": _STR,
            "position": _INT,
            "corrections": {"type": "array", "items": _ref("Correction")},
            "state": {"type": "string", "enum": ["DELIVERED"]},
        }
    ),
    "Record": _object(
        {
            "id": _STR,
            "scope": _STR,
            "claim_key": _STR,
            "kind": _ref("Kind"),
            "value": _ANY,
            "status": _ref("Status"),
            "validity": _ref("Validity"),
            "expires": _nullable(_TIME),
            "effective_expires": _nullable(_TIME),
            "expiry_source": _nullable(_STR),
            "parents": _IDS,
            "observed": _IDS,
            "undeclared": _IDS,
            "conditions": {"type": "object"},
            "proposer": _STR,
            "created_at": _TIME,
            "evidence": _nullable(
                _object(
                    {
                        "uri": _STR,
                        "fetched_at": _TIME,
                        "content_hash": _STR,
                        "snapshot_ref": _STR,
                        "size": _INT,
                    },
                    required=["uri", "fetched_at", "content_hash", "snapshot_ref"],
                )
            ),
            "cause": _nullable(_STR),
            "reason": _nullable(_STR),
            "deliveries": {"type": "array", "items": _ref("Delivery")},
            "position": _INT,
            "supersedes": _nullable(
                {"type": "string", "description": "The record this one was proposed to replace."}
            ),
            "superseded_by": _nullable(
                {"type": "string", "description": "Set once this record is SUPERSEDED."}
            ),
            "cause_superseded_by": _nullable(
                {
                    "type": "string",
                    "description": "When STALE because `cause` was superseded: by what.",
                }
            ),
            "stale_causes": {
                "type": "array",
                "description": "Every cause that marked it STALE since its last revalidation; "
                "`blocking` is false once the cause no longer rests under it.",
                "items": _object(
                    {
                        "cause": _STR,
                        "reason": _STR,
                        "superseded_by": _nullable(_STR),
                        "position": _INT,
                        "at": {"type": "string", "format": "date-time"},
                        "blocking": {"type": "boolean"},
                    }
                ),
            },
        },
        description="A record as the views see it (hidden dependencies show as <hidden>).",
    ),
    "RecordPage": _object(
        {
            "records": {"type": "array", "items": _ref("Record")},
            "next_after": _nullable(_STR),
        },
        description="One page; pass next_after as `after` for the next (null: last page).",
    ),
    "AuditEvent": _object(
        {
            "position": _INT,
            "type": _STR,
            "at": _TIME,
            "actor": _nullable(_STR),
            "details": {"type": "object"},
        }
    ),
    "AuditTrail": _object(
        {
            "record": _ref("Record"),
            "events": {"type": "array", "items": _ref("AuditEvent")},
            "undeclared": _IDS,
        }
    ),
    "Graph": _object(
        {
            "root": _nullable(_STR),
            "title": _STR,
            "position": _INT,
            "nodes": {"type": "array", "items": _ref("Record")},
            "edges": {
                "type": "array",
                "items": _object(
                    {
                        "parent": _STR,
                        "child": _STR,
                        "edge": {"type": "string", "enum": ["declared", "observed"]},
                    }
                ),
            },
        }
    ),
    "ReadResult": _object(
        {
            "outcome": _ref("Outcome"),
            "scope": _STR,
            "claim_key": _STR,
            "at": _TIME,
            "value": _ANY,
            "records": {"type": "array", "items": _ref("Record")},
        },
        description="FOUND (value is the agreed value), MISSING or CONFLICT.",
    ),
    "Explanation": _object(
        {
            "outcome": _ref("Outcome"),
            "scope": _STR,
            "claim_key": _STR,
            "at": _TIME,
            "entries": {
                "type": "array",
                "items": _object(
                    {
                        "record": _ref("Record"),
                        "usable": {"type": "boolean"},
                        "reasons": _IDS,
                    }
                ),
            },
            "omitted": {
                "type": "integer",
                "minimum": 0,
                "description": "How many records of the claim, none of them usable, are left "
                "out of `entries`.",
            },
            "note": _nullable(_STR),
        },
        description="Per record of the claim, whether it is usable and why not, in proposal "
        "order: every usable record (the outcome is decided on all of them) and at most "
        "`limit` others, those once accepted (ACCEPTED but not usable now, STALE, REVOKED, "
        "SUPERSEDED) before CANDIDATE and REJECTED ones, each the most recently changed "
        "first, stopped before their JSON passes 4 MiB. `omitted` counts the rest and "
        "`note`, when some are left out, says how to see them.",
    ),
    "CorrectionDue": _object(
        {
            "delivery": _ref("Delivery"),
            "validity": _ref("Validity"),
            "status": _ref("Status"),
            "cause": _nullable(_STR),
            "reason": _nullable(_STR),
        }
    ),
    "CorrectionsDue": _object({"corrections": {"type": "array", "items": _ref("CorrectionDue")}}),
    "Revocation": _object(
        {
            "root": _STR,
            "affected": _IDS,
            "position": {
                "type": "integer",
                "description": "The Revoked event's log position (as of position - 1: before).",
            },
            "stale": _IDS,
            "affected_count": {"type": "integer", "description": "How many `affected` holds."},
            "stale_count": {"type": "integer", "description": "How many `stale` holds."},
            "note": _nullable(_STR),
        },
        description="What a revocation marked, as far as the caller may see: records in "
        "scopes it holds no grant in are neither named nor counted. Each list holds at most "
        f"the first {MAX_GRAPH_NODES} ids; the counts say how many there are and `note`, "
        "when some are left out, where to find them.",
    ),
    "ActionResult": _object(
        {"id": _STR, "record": _nullable(_ref("Record"))},
        description="The record's id and, when the caller may read it, the record now.",
    ),
    "CorrectionIssued": _object({"correction_id": _STR, "delivery_id": _STR}),
    "ProposeRequest": _object(
        {
            "scope": _STR,
            "claim_key": _STR,
            "value": _ANY,
            "kind": {
                "type": "string",
                "enum": [k.value for k in Kind if k is not Kind.EVIDENCE],
                "description": "Evidence is captured (POST /evidence), which pins its bytes.",
            },
            "parents": _IDS,
            "expires": _nullable(_TIME),
            "conditions": _nullable({"type": "object"}),
            "id": _nullable(_STR),
            "supersedes": _nullable(
                {"type": "string", "description": "The record (same scope and claim) replaced."}
            ),
        },
        required=["scope", "claim_key", "value", "kind"],
    ),
    "EvidenceRequest": _object(
        {
            "scope": _STR,
            "uri": _STR,
            "content": {"type": "string", "description": "Text content (stored as UTF-8)."},
            "content_base64": {"type": "string", "contentEncoding": "base64"},
            "fetched_at": _nullable(_TIME),
            "claim_key": _nullable(_STR),
            "expires": _nullable(_TIME),
            "conditions": _nullable({"type": "object"}),
            "id": _nullable(_STR),
            "value": _ANY,
        },
        required=["scope", "uri"],
        description="Give exactly one of content or content_base64.",
    ),
    "NoteRequest": _object({"note": _STR}, required=[]),
    "ReasonRequest": _object({"reason": _STR}),
    "RevalidateRequest": _object(
        {"note": _STR, "parents": _nullable({**_IDS, "description": "A new basis."})},
        required=[],
    ),
    "CorrectionRequest": _object(
        {
            "note": _STR,
            "replacement": _nullable(_STR),
            "only_if_owed": {
                "type": "boolean",
                "default": False,
                "description": "Refuse (409) unless the delivery owes a correction now, "
                "checked in the command's own transaction: two workers draining the "
                "outbox issue one correction per owed delivery.",
            },
        },
        required=["note"],
    ),
}

_ERRORS = {
    "401": "No token, or a token that is unknown, revoked or expired.",
    "403": "The principal lacks the role in the record's scope, or approves its own proposal.",
    "404": "No such record or delivery, or one in a scope the principal cannot see.",
    "409": "The status machine does not allow this now (e.g. accepting a REVOKED record, or "
    "one whose dependency is not usable).",
    "413": "The request body is over the server's limit.",
    "415": "The request body is declared as another media type than JSON "
    "(send Content-Type: application/json, or none).",
    "422": "Bad input; error.field names the offending field.",
    "503": "The ledger cannot be reached or is closed (StorageError, ClosedLedgerError); "
    "for format=svg, also: Graphviz's dot program is not installed on the server.",
    "500": "Stored data failed its integrity check (CorruptEventError, SnapshotIntegrityError).",
}
#: What any operation may answer, whatever it does (the body limit holds for a
#: GET's body too).
_ALWAYS = ("413", "500", "503")


def _param(
    name: str, where: str, schema: dict[str, Any], description: str, required: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "description": description,
        "schema": schema,
    }


_AS_OF = [
    _param(
        "as_of_position",
        "query",
        {"type": "integer", "minimum": 0},
        "Answer as of this log position.",
    ),
    _param("as_of_time", "query", _TIME, "Answer as of this instant (ISO 8601 with offset)."),
]
_RECORD_ID = _param("record_id", "path", _STR, "A record id.")
_READ_PARAMS = [
    _param("scope", "query", _STR, "The scope.", required=True),
    _param("claim_key", "query", _STR, "The claim key.", required=True),
    _param("at", "query", _TIME, "Validity at this instant (default: now)."),
    _param("context", "query", _STR, "Applicability context: a JSON object."),
    _param("kinds", "query", _STR, "Comma-separated kinds to consider."),
]


def _op(
    summary: str,
    ok: str,
    schema: str,
    errors: str,
    *,
    params: list[dict[str, Any]] | None = None,
    body: str | None = None,
    body_required: bool = True,
    description: str = "",
    extra_media: dict[str, Any] | None = None,
) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": _ref(schema)}}
    content.update(extra_media or {})
    op: dict[str, Any] = {
        "summary": summary,
        "operationId": "",
        "parameters": params or [],
        "responses": {
            ok: {"description": "OK" if ok == "200" else "Created", "content": content},
            **{code: {"$ref": f"#/components/responses/E{code}"} for code in errors.split()},
        },
    }
    if description:
        op["description"] = description
    if body is not None:
        op["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    return op


def _paths() -> dict[str, dict[str, Any]]:
    list_params = [
        _param("scope", "query", _STR, "The scope to list.", required=True),
        _param("status", "query", _ref("Status"), "Only records in this status."),
        _param("validity", "query", _ref("Validity"), "Only records with this validity."),
        _param("kind", "query", _ref("Kind"), "Only records of this kind."),
        _param("claim_prefix", "query", _STR, "Only claim keys starting with this."),
        _param(
            "limit",
            "query",
            {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 100},
            "Page size: at most this many records, fewer when their JSON would pass 4 MiB "
            "(`next_after` goes on from the last one sent).",
        ),
        _param("after", "query", _STR, "The last id of the previous page."),
        *_AS_OF,
    ]
    graph_params = [
        _RECORD_ID,
        _param("ancestors", "query", {"type": "boolean", "default": True}, "Include ancestors."),
        _param(
            "descendants", "query", {"type": "boolean", "default": True}, "Include descendants."
        ),
        _param(
            "format",
            "query",
            {"type": "string", "enum": list(GRAPH_FORMATS), "default": "json"},
            "json, or a picture: svg (needs Graphviz), dot or mermaid.",
        ),
        *_AS_OF,
    ]
    text = {"schema": {"type": "string"}}
    return {
        "/records": {
            "post": _op(
                "Propose a record",
                "201",
                "ActionResult",
                "401 403 404 409 413 422",
                body="ProposeRequest",
                description="Needs `propose` in the scope. The record is a CANDIDATE until "
                "an approver other than the proposer accepts it.",
            ),
            "get": _op(
                "List a scope's records, ordered by id",
                "200",
                "RecordPage",
                "401 403 422",
                params=list_params,
                description="Needs `read` in the scope.",
            ),
        },
        "/evidence": {
            "post": _op(
                "Capture evidence",
                "201",
                "ActionResult",
                "401 403 409 413 422",
                body="EvidenceRequest",
                description="Stores the bytes (content hash, fetch time, snapshot) and "
                "proposes an evidence record.",
            )
        },
        "/records/{record_id}": {
            "get": _op(
                "Get a record",
                "200",
                "Record",
                "401 403 404 422",
                params=[_RECORD_ID, *_AS_OF],
            )
        },
        "/records/{record_id}/audit": {
            "get": _op(
                "A record's history",
                "200",
                "AuditTrail",
                "401 403 404 422",
                params=[_RECORD_ID, *_AS_OF],
                description="Needs `audit` in the record's scope.",
            )
        },
        "/records/{record_id}/graph": {
            "get": _op(
                "A record's dependency graph",
                "200",
                "Graph",
                "401 403 404 422 503",
                params=graph_params,
                description="Needs `read` in the record's scope. A graph of more than "
                f"{MAX_GRAPH_NODES} records you can see ({MAX_SVG_NODES} for format=svg) is "
                "refused with 422 (error.field `format`), the message naming the count, the "
                "cap and what to ask for instead: one direction, a record further along, or "
                "`provledger graph` on the ledger's machine.",
                extra_media={
                    "image/svg+xml": text,
                    "text/vnd.graphviz": text,
                    "text/plain": text,
                },
            )
        },
        "/records/{record_id}/accept": {
            "post": _op(
                "Accept a candidate",
                "200",
                "ActionResult",
                "401 403 404 409 413 422",
                params=[_RECORD_ID],
                body="NoteRequest",
                body_required=False,
                description="Needs `approve`; the proposer may not accept its own record (403).",
            )
        },
        "/records/{record_id}/reject": {
            "post": _op(
                "Reject a candidate",
                "200",
                "ActionResult",
                "401 403 404 409 413 422",
                params=[_RECORD_ID],
                body="ReasonRequest",
            )
        },
        "/records/{record_id}/revoke": {
            "post": _op(
                "Revoke a record; its descendants become STALE",
                "200",
                "Revocation",
                "401 403 404 409 413 422",
                params=[_RECORD_ID],
                body="ReasonRequest",
            )
        },
        "/records/{record_id}/revalidate": {
            "post": _op(
                "Revalidate a STALE record",
                "200",
                "ActionResult",
                "401 403 404 409 413 422",
                params=[_RECORD_ID],
                body="RevalidateRequest",
                body_required=False,
            )
        },
        "/read": {
            "get": _op(
                "Read a claim through the eligibility chain",
                "200",
                "ReadResult",
                "401 403 422",
                params=[*_READ_PARAMS, *_AS_OF],
            )
        },
        "/explain": {
            "get": _op(
                "Why each record is or is not usable for a claim",
                "200",
                "Explanation",
                "401 403 422",
                params=[
                    *_READ_PARAMS,
                    _param(
                        "limit",
                        "query",
                        {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_LIMIT,
                            "default": EXPLAINED,
                        },
                        "At most this many records that are not usable (every usable one is "
                        "shown), fewer when their JSON would pass 4 MiB.",
                    ),
                    *_AS_OF,
                ],
            )
        },
        "/corrections": {
            "get": _op(
                "Deliveries that owe a correction",
                "200",
                "CorrectionsDue",
                "401 403 404 422",
                params=[
                    _param(
                        "record_id",
                        "query",
                        _STR,
                        "Only this record's deliveries (404 if it is unknown or not visible, "
                        "403 without `deliver` in its scope).",
                    ),
                    *_AS_OF,
                ],
                description=(
                    "Lists scopes where the principal holds `deliver`; 403 if it holds "
                    "`deliver` in no scope."
                ),
            )
        },
        "/deliveries/{delivery_id}/corrections": {
            "post": _op(
                "Issue a correction for a delivery (outbox; nothing is sent)",
                "201",
                "CorrectionIssued",
                "401 403 404 409 413 422",
                params=[_param("delivery_id", "path", _STR, "A delivery id.")],
                body="CorrectionRequest",
            )
        },
    }


def accepted_inputs(
    doc: dict[str, Any], method: str, path: str
) -> tuple[frozenset[str], frozenset[str]]:
    """The query parameters and body fields the operation ``method`` on ``path``
    (under the API's prefix) documents in ``doc`` (:func:`document`): the API
    refuses any other, naming it."""
    op = doc["paths"][PREFIX + path][method.lower()]
    query = frozenset(p["name"] for p in op.get("parameters", ()) if p["in"] == "query")
    body: frozenset[str] = frozenset()
    if "requestBody" in op:
        ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        body = frozenset(doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]["properties"])
    return query, body


def document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document."""
    paths = {PREFIX + path: ops for path, ops in _paths().items()}
    schemas = {name: dict(schema) for name, schema in SCHEMAS.items()}
    for path, ops in paths.items():
        for method, op in ops.items():
            op["operationId"] = method + path.replace(PREFIX, "").replace("/", "_").replace(
                "{", ""
            ).replace("}", "")
            for code in _ALWAYS:
                op["responses"].setdefault(code, {"$ref": f"#/components/responses/E{code}"})
            if "requestBody" in op:
                op["responses"].setdefault("415", {"$ref": "#/components/responses/E415"})
                # The API refuses a field its operation does not document.
                ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                schemas[ref.rsplit("/", 1)[-1]]["additionalProperties"] = False
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "provledger",
            "version": __version__,
            "description": "An event-sourced provenance ledger for AI agents' memory. "
            "Authenticate with the ledger's own tokens: `Authorization: Bearer <token>`.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {
                f"E{code}": {
                    "description": text,
                    "content": {"application/json": {"schema": _ref("Error")}},
                }
                for code, text in _ERRORS.items()
            },
        },
    }
