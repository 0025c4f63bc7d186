"""The OpenAPI 3.1 description of the JSON API, served at ``/openapi.json``.

Written by hand next to :data:`ledger.serve.api.ROUTES` (a test checks that
both list the same routes and that every answer matches its schema); the
bodies' schemas are :data:`ledger.serve.openapi_schemas.SCHEMAS`. It also
describes ``/healthz`` (:mod:`ledger.serve.health`), which needs no token.
"""

from __future__ import annotations

from typing import Any

from ledger import __version__
from ledger.graph import MAX_DRAWN_EDGES, RENDER_TIMEOUT, RENDERS_AT_ONCE
from ledger.jsonable import EXPLAINED
from ledger.serve import health
from ledger.serve.api import GRAPH_FORMATS, MAX_GRAPH_NODES, MAX_LIMIT, MAX_SVG_NODES, PREFIX
from ledger.serve.openapi_schemas import (
    CLAIM_KEY,
    CLAIM_PREFIX,
    ID,
    REF,
    SCHEMAS,
    TIME,
    ref,
)
from ledger.serve.payloads import DELIVERIES_LISTED

_ERRORS = {
    "401": "No token, or a token that is unknown, revoked or expired.",
    "403": "The principal lacks the role in the record's scope, or approves its own proposal.",
    "404": "No such record or delivery, or one in a scope the principal cannot see.",
    "409": "The status machine does not allow this now (e.g. accepting a REVOKED record, or "
    "one whose dependency is not usable; a parent the request names that is not usable "
    "now: error.field `parents`), or a new record's `id` is taken "
    "(DuplicateRecordError): a retry of a proposal already written, when the first answer "
    "was lost, is refused so rather than written twice. Also a ledger opened read-only "
    "(ReadOnlyError), and other writers holding the ledger's lock past its lock wait "
    "(ConcurrencyError, with Retry-After: nothing was written; send the same request, "
    "with the same id, again).",
    "405": "The path takes no such method (MethodNotAllowed; `Allow` names those it takes).",
    "408": "The request did not arrive whole within the server's request timeout "
    "(RequestTimeout); the connection is closed.",
    "413": "The request body is over the server's limit.",
    "415": "The request body is declared as another media type than JSON "
    "(send Content-Type: application/json, or none), in a charset where it reads "
    "otherwise than in UTF-8, or as coded (a Content-Encoding other than identity: send "
    "it uncompressed).",
    "422": "Bad input; error.field names the offending field (the first, when the message "
    "names several: every required field left out, say). A parent id unknown to the "
    "principal, or in a scope it cannot read, is 422 too (error.field `parents`). A body "
    "nested past the parser's depth (about 1000 levels) cannot be read at all: "
    "InvalidInputError with no field.",
    "503": "The ledger cannot be reached or is closed (StorageError, ClosedLedgerError); "
    "the server holds as many connections as it may (ServiceUnavailable, with "
    "Retry-After: 1; the connection is closed); "
    "for format=svg, also: Graphviz's dot program is not installed on the server, did "
    f"not draw within {RENDER_TIMEOUT} s, or the server is drawing {RENDERS_AT_ONCE} "
    "pictures already (RenderBusyError, with Retry-After: 1).",
    "500": "Stored data failed its integrity check (CorruptEventError, SnapshotIntegrityError).",
}
#: What any operation may answer, whatever it does (the body limit holds for a
#: GET's body too).
_ALWAYS = ("405", "408", "413", "500", "503")
#: The headers an error status carries (``ledger.serve.api.ledger_error_response``).
_ERROR_HEADERS: dict[str, dict[str, Any]] = {
    "401": {
        "WWW-Authenticate": {
            "description": "Always: the bearer challenge.",
            "required": True,
            "schema": {"const": 'Bearer realm="provledger"'},
        }
    },
    "405": {
        "Allow": {
            "description": "The methods the path takes.",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    "409": {
        "Retry-After": {
            "description": "Only on ConcurrencyError (nothing was written): seconds to "
            "wait before sending the same request again.",
            "schema": {"type": "integer", "minimum": 0},
        }
    },
    "503": {
        "Retry-After": {
            "description": "On RenderBusyError and ServiceUnavailable (too many "
            "connections): seconds to wait before asking again.",
            "schema": {"type": "integer", "minimum": 0},
        }
    },
}
#: The ``Location`` of a record created (201).
_LOCATION = {
    "description": "The new record's address: `/api/v1/records/{id}`.",
    "required": True,
    "schema": {"type": "string"},
}
#: The ``Location`` of a delivery recorded (201): a delivery has no address of its own.
_DELIVERED = {
    "description": "The delivered record's address, `/api/v1/records/{record_id}`, whose "
    "`deliveries` list the new delivery.",
    "required": True,
    "schema": {"type": "string"},
}


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
        "Answer as of this log position (not with as_of_time: 422).",
    ),
    _param(
        "as_of_time",
        "query",
        TIME,
        "Answer as of this instant (RFC 3339 with offset; not with as_of_position: 422).",
    ),
]
_RECORD_ID = _param("record_id", "path", REF, "A record id.")
_READ_PARAMS = [
    _param("scope", "query", ID, "The scope.", required=True),
    _param("claim_key", "query", CLAIM_KEY, "The claim key.", required=True),
    _param("at", "query", TIME, "Validity at this instant (default: now)."),
    {  # JSON in the query string: described by its media type, not a schema
        "name": "context",
        "in": "query",
        "required": False,
        "description": "Applicability context: a JSON object.",
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    {
        **_param(
            "kinds",
            "query",
            {"type": "array", "items": ref("Kind"), "minItems": 1},
            "Only records of these kinds, separated by commas (default: every kind).",
        ),
        "style": "form",
        "explode": False,
    },
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
    location: bool | dict[str, Any] = False,
) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": ref(schema)}}
    content.update(extra_media or {})
    answer: dict[str, Any] = {"description": "OK" if ok == "200" else "Created"}
    if location:
        answer["headers"] = {"Location": _LOCATION if location is True else location}
    answer["content"] = content
    op: dict[str, Any] = {
        "summary": summary,
        "operationId": "",
        "parameters": params or [],
        "responses": {
            ok: answer,
            **{code: {"$ref": f"#/components/responses/E{code}"} for code in errors.split()},
        },
    }
    if description:
        op["description"] = description
    if body is not None:
        op["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": ref(body)}},
        }
    return op


def _positions(items: str) -> list[dict[str, Any]]:
    """The ``limit`` and ``after`` of a list paged by log position."""
    return [
        _param(
            "limit",
            "query",
            {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": MAX_LIMIT},
            f"Page size: at most this many {items}.",
        ),
        _param(
            "after",
            "query",
            {"type": "integer", "minimum": 0},
            "The `next_after` of the previous page: the log position it ended at.",
        ),
    ]


def _paths() -> dict[str, dict[str, Any]]:
    list_params = [
        _param("scope", "query", ID, "The scope to list.", required=True),
        _param("status", "query", ref("Status"), "Only records in this status."),
        _param("validity", "query", ref("Validity"), "Only records with this validity."),
        _param("kind", "query", ref("Kind"), "Only records of this kind."),
        _param("claim_prefix", "query", CLAIM_PREFIX, "Only claim keys starting with this."),
        _param(
            "limit",
            "query",
            {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 100},
            "Page size: at most this many records, fewer when their JSON would pass 4 MiB "
            "(`next_after` goes on from the last one sent).",
        ),
        _param("after", "query", REF, "The last id of the previous page."),
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
                "an approver other than the proposer accepts it. A parent (or the version "
                "`supersedes` names) you can see but that is not usable now (REVOKED, "
                "REJECTED, STALE, SUPERSEDED) is 409 with error.field `parents` (or "
                "`supersedes`): the same request may succeed later; one unknown to you, or "
                "in a scope you cannot read, is 422 (`parents`) or 404 (`supersedes`).",
                location=True,
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
                location=True,
            )
        },
        "/records/{record_id}": {
            "get": _op(
                "Get a record",
                "200",
                "RecordAnswer",
                "401 403 404 422",
                params=[_RECORD_ID, *_AS_OF],
            )
        },
        "/records/{record_id}/audit": {
            "get": _op(
                "A record's history, a page at a time",
                "200",
                "AuditTrail",
                "401 403 404 422",
                params=[_RECORD_ID, *_positions("events"), *_AS_OF],
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
                f"{MAX_GRAPH_NODES} records you can see ({MAX_SVG_NODES} for format=svg, "
                f"or more than {MAX_DRAWN_EDGES} edges) is "
                "refused with 422 (error.field `format`), the message naming the count, the "
                "cap and what to ask for instead: one direction, a record further along, or "
                "`provledger graph` on the ledger's machine. So is format=json when its "
                "records, values included, would pass 4 MiB of JSON (format=dot and mermaid "
                "carry no values).",
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
                description="Needs `approve`. Without `parents`, on the record's own "
                "dependencies: one not usable now is 409 naming no field. With `parents` "
                "(a new basis), one you can see that is not ACCEPTED and unexpired is 409 "
                "with error.field `parents`; one unknown to you, or in a scope you cannot "
                "read, is 422 (`parents`).",
            )
        },
        "/records/{record_id}/deliveries": {
            "get": _op(
                "A record's deliveries, a page at a time",
                "200",
                "DeliveryPage",
                "401 403 404 422",
                params=[
                    _RECORD_ID,
                    _param(
                        "limit",
                        "query",
                        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 100},
                        "Page size.",
                    ),
                    _param(
                        "after",
                        "query",
                        ID,
                        "The last delivery id of the previous page (422 if it is not one "
                        "of this record's deliveries).",
                    ),
                    *_AS_OF,
                ],
                description="Needs `read` in the record's scope. Every delivery, in the "
                f"order recorded: a record's answer lists its {DELIVERIES_LISTED} most "
                "recent only, with `deliveries_count`.",
            ),
            "post": _op(
                "Record a delivery: a usable record left the system",
                "201",
                "DeliveryRecorded",
                "401 403 404 409 413 422",
                params=[_RECORD_ID],
                body="DeliverRequest",
                description="Needs `deliver` in the record's scope; the record must be "
                "ACCEPTED and unexpired (409 otherwise). The delivery stays DELIVERED "
                "whatever happens to the record since: `GET /records/{record_id}/deliveries` "
                "lists it, and `GET /corrections` once it owes a correction. "
                "Nothing is sent. A retry whose first answer was lost records a second "
                "delivery.",
                location=_DELIVERED,
            ),
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
                        "At most this many records that are not usable (besides the usable "
                        "ones, listed as GET /read lists them), fewer when their JSON would "
                        "pass 4 MiB.",
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
                        REF,
                        "Only this record's deliveries (404 if it is unknown or not visible, "
                        "403 without `deliver` or `audit` in its scope).",
                    ),
                    *_positions("deliveries owing a correction"),
                    *_AS_OF,
                ],
                description=(
                    "Lists scopes where the principal holds `deliver` (it issues the "
                    "corrections) or `audit`; each entry names its record's scope. 403 if "
                    "it holds neither in any scope."
                ),
            )
        },
        "/deliveries/{delivery_id}/corrections": {
            "post": _op(
                "Issue a correction for a delivery (outbox; nothing is sent)",
                "201",
                "CorrectionIssued",
                "401 403 404 409 413 422",
                params=[_param("delivery_id", "path", ID, "A delivery id.")],
                body="CorrectionRequest",
            )
        },
    }


#: The bodies of ``/healthz``: nothing but whether the ledger answers.
_HEALTH_SCHEMAS: dict[str, dict[str, Any]] = {
    "Health": {
        "type": "object",
        "properties": {"status": {"const": "ok"}},
        "required": ["status"],
        "additionalProperties": False,
    },
    "HealthUnavailable": {
        "type": "object",
        "properties": {
            "status": {"const": "unavailable"},
            "reason": {
                "type": "string",
                "enum": [*(text for _, text in health.REASONS), health.OTHER_REASON],
            },
        },
        "required": ["status", "reason"],
        "additionalProperties": False,
    },
}


def _health_path() -> dict[str, Any]:
    """The operation of ``/healthz`` (outside the API's prefix, without a token)."""

    def answer(description: str, schema: str) -> dict[str, Any]:
        return {
            "description": description,
            "headers": {
                "Cache-Control": {
                    "description": "Always `no-store`.",
                    "schema": {"const": "no-store"},
                }
            },
            "content": {"application/json": {"schema": ref(schema)}},
        }

    return {
        "get": {
            "summary": "Whether the ledger answers (for load balancers; no token)",
            "operationId": "get_healthz",
            "description": "Reads the ledger once (its log position, which is not shown) "
            "and says only whether that worked: no token is needed or read, no cookie "
            "is set, and nothing of the ledger's content is told. HEAD answers the same "
            "without the body.",
            "security": [],
            "parameters": [],
            "responses": {
                "200": answer("The ledger answers.", "Health"),
                "503": {
                    **answer(
                        "The ledger does not answer (closed, or its database cannot be "
                        "reached); `reason` says which, in a fixed phrase. Or the server "
                        "holds as many connections as it may: the error JSON "
                        "(ServiceUnavailable, with Retry-After: 1, before the request "
                        "is read).",
                        "HealthUnavailable",
                    ),
                    "content": {
                        "application/json": {
                            "schema": {"anyOf": [ref("HealthUnavailable"), ref("Error")]}
                        }
                    },
                },
                # A probe sends no body; one over the server's limit is refused.
                "413": {"$ref": "#/components/responses/E413"},
                # And as on any path: another method, or a request never whole.
                "405": {"$ref": "#/components/responses/E405"},
                "408": {"$ref": "#/components/responses/E408"},
            },
        }
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
        name = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        body = frozenset(doc["components"]["schemas"][name.rsplit("/", 1)[-1]]["properties"])
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
                name = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                schemas[name.rsplit("/", 1)[-1]]["additionalProperties"] = False
    paths[health.PATH] = _health_path()
    schemas.update({name: dict(schema) for name, schema in _HEALTH_SCHEMAS.items()})
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "provledger",
            "version": __version__,
            "description": "An event-sourced provenance ledger for AI agents' memory. "
            "Authenticate with the ledger's own tokens: `Authorization: Bearer <token>`. "
            "Every GET operation also answers HEAD (`Allow: HEAD, GET`): the same status "
            "and headers as the GET, without the body.",
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
                    **({"headers": _ERROR_HEADERS[code]} if code in _ERROR_HEADERS else {}),
                    "content": {"application/json": {"schema": ref("Error")}},
                }
                for code, text in _ERRORS.items()
            },
        },
    }
