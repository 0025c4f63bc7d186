"""The JSON Schemas of the API's bodies, for :mod:`ledger.serve.openapi`.

Enum schemas are built from the library's own enums, so a new status appears
here with no edit. Request fields carry the checks the ledger makes that JSON
Schema can say (identifiers, one-line texts, lengths), so a client validating
against the document is refused for nothing the document allows but what only
the ledger's state decides (a role, an expiry already past, a record unknown).
"""

from __future__ import annotations

from typing import Any

from ledger.answers import USABLE_LISTED
from ledger.domain import Kind, Outcome, Status, Validity
from ledger.serve.api import MAX_GRAPH_NODES
from ledger.serve.payloads import DELIVERIES_LISTED
from ledger.validation import FLAG


def ref(name: str) -> dict[str, str]:
    """A reference to the schema ``name`` of the document's components."""
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema``, or null."""
    return {"anyOf": [schema, {"type": "null"}]}


STR = {"type": "string"}
_INT = {"type": "integer"}
TIME = {"type": "string", "format": "date-time"}
_IDS = {"type": "array", "items": STR}
_ANY: dict[str, Any] = {"description": "Any JSON value."}
#: A value a request gives the ledger to hold: what it refuses, JSON Schema cannot say.
_VALUE: dict[str, Any] = {
    "description": "Any JSON value the ledger can hold (else 422 InvalidValueError or "
    "ValueTooLargeError, naming the path): at most 1 MiB as JSON, nested at most 32 "
    "deep (a scalar counts as a level), integers from -2^63 to 2^64-1, no NaN or "
    "Infinity."
}

# -- what the ledger checks of its inputs (ledger.validation), as patterns -------------

#: One identifier (``ledger.validation.ID_PATTERN``).
_NAME = "[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
#: A scope, a new record's id, a delivery id.
ID = {"type": "string", "pattern": f"^{_NAME}$"}
#: A record named by a request: its id, or ``id@@scope`` (an id taken in a scope its
#: proposer could not see).
REF = {"type": "string", "pattern": f"^{_NAME}(@@{_NAME})?$"}
#: A new record's id, when the client gives one.
_NEW_ID = {
    **ID,
    "description": "The new record's id (default: one the ledger makes). Give your own to "
    "retry safely: a retry whose first answer was lost is refused with 409 "
    "DuplicateRecordError, not written twice (GET the record to see it).",
}
_REFS = {"type": "array", "items": REF}
#: Control characters no text may hold (C0 but tab and line feed, and DEL).
_CONTROL = r"\x00-\x08\x0b-\x1f\x7f"
#: What a one-line text may not hold (every C0 character, DEL, and the line breaks
#: NEL, U+2028 and U+2029).
_LINE_CONTROL = r"\x00-\x1f\x7f\x85\u2028\u2029"
#: Whitespace as the ledger strips it (Python's ``str.isspace``).
_SPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def _text(max_length: int, *, empty: bool = False, line: bool = False) -> dict[str, Any]:
    """A text of at most ``max_length`` characters without control characters
    (nor a tab or line break when ``line``); unless ``empty``, not blank."""
    bad = _LINE_CONTROL if line else _CONTROL
    pattern = f"^[^{bad}]*$" if empty else f"^[^{bad}]*[^{bad}{_SPACE}][^{bad}]*$"
    return {"type": "string", "maxLength": max_length, "pattern": pattern}


#: A claim key: one line, neither blank nor with whitespace around it.
CLAIM_KEY = {
    "type": "string",
    "maxLength": 512,
    "pattern": (f"^[^{_LINE_CONTROL}{_SPACE}]([^{_LINE_CONTROL}]*[^{_LINE_CONTROL}{_SPACE}])?$"),
}
#: Unicode's invisible format characters (category Cf, as this Python's
#: ``unicodedata`` has them: a test compares), which a new claim's key and a
#: captured URI may not start or end with (``ledger.validation.check_format_edges``).
FORMAT = (
    r"\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    r"\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)


def _edged(max_length: int, description: str) -> dict[str, Any]:
    """One line, neither starting nor ending with whitespace or a format character
    (but for a subdivision flag at the end)."""
    edge = f"[^{_LINE_CONTROL}{_SPACE}{FORMAT}]"
    return {
        "type": "string",
        "maxLength": max_length,
        "pattern": f"^(?={edge})[^{_LINE_CONTROL}]*(?:{edge}|{FLAG})$",
        "description": description,
    }


#: A new claim's key (a new version's keeps the old one's, which an earlier
#: version may have taken with a format character at an end).
NEW_CLAIM_KEY = _edged(
    512,
    "One line; no whitespace or invisible format character (U+200B, U+FEFF, "
    "bidirectional marks…) at either end of a new claim's key.",
)
_URI = _edged(2048, "One line; no whitespace or invisible format character at either end.")
#: A claim key prefix (empty: every claim).
CLAIM_PREFIX = _text(512, empty=True)
_NOTE = _text(1024, empty=True)
_REASON = _text(1024)
_BASE64 = {
    "type": "string",
    "contentEncoding": "base64",
    "pattern": "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
}


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
                        "method no route has (404, 405 with Allow); RequestTimeout (408) "
                        "and ServiceUnavailable (503, too many connections) from the "
                        "connection, before any route.",
                    },
                    "message": STR,
                    "field": nullable(
                        {
                            "type": "string",
                            "description": "For bad input (422), the body field or query "
                            "parameter at fault; for an unknown record (404), the field "
                            "naming it when not the path; for an id already taken (409 "
                            "DuplicateRecordError), `id`; for a dependency not usable now "
                            "(409), `parents` or `supersedes`.",
                        }
                    ),
                    "status": {
                        **_enum(Status),
                        "description": "For a command the record's status does not allow "
                        "(409 InvalidTransitionError), that status; absent otherwise.",
                    },
                    "allowed": {
                        "type": "array",
                        "items": _enum(Status),
                        "description": "With `status`: the statuses the command takes "
                        "(a revalidation of an ACCEPTED record whose basis expired takes "
                        "ACCEPTED too, given a new basis: the message says so).",
                    },
                },
                required=["type", "message", "field"],
            )
        },
        description="Every refusal: the error class, its message and the offending field.",
    ),
    "AsOf": _object(
        {
            "position": {
                "type": "integer",
                "minimum": 0,
                "description": "The log position the answer shows the ledger right after: "
                "the end of the transaction holding the position asked for (a command's "
                "events are seen together), or the newest at or before `as_of_time`.",
            },
            "time": {
                **TIME,
                "description": "The instant of that moment: `as_of_time` when given, "
                "else the time of that position's event (for position 0, the empty "
                "ledger, that of the first event). Reads judge expiry then, unless "
                "`at` names another instant.",
            },
        },
        description="The past moment an answer given as of `as_of_position` or "
        "`as_of_time` shows; an answer of now has no `as_of`.",
    ),
    "Kind": _enum(Kind),
    "Status": _enum(Status),
    "Validity": _enum(Validity),
    "Outcome": _enum(Outcome),
    "Correction": _object(
        {
            "correction_id": STR,
            "delivery_id": STR,
            "record_id": STR,
            "note": STR,
            "replacement": nullable(STR),
            "issued_at": TIME,
            "issued_by": STR,
            "position": _INT,
        }
    ),
    "Delivery": _object(
        {
            "delivery_id": STR,
            "record_id": STR,
            "recipient": STR,
            "channel": STR,
            "delivered_at": TIME,
            "delivered_by": STR,
            "position": _INT,
            "corrections": {"type": "array", "items": ref("Correction")},
            "state": {"type": "string", "enum": ["DELIVERED"]},
        }
    ),
    "Record": _object(
        {
            "id": STR,
            "scope": STR,
            "claim_key": STR,
            "kind": ref("Kind"),
            "value": _ANY,
            "status": ref("Status"),
            "validity": ref("Validity"),
            "expires": nullable(TIME),
            "effective_expires": nullable(TIME),
            "expiry_source": nullable(STR),
            "parents": _IDS,
            "observed": _IDS,
            "undeclared": _IDS,
            "conditions": {"type": "object"},
            "proposer": STR,
            "created_at": TIME,
            "evidence": nullable(
                _object(
                    {
                        "uri": STR,
                        "fetched_at": TIME,
                        "content_hash": STR,
                        "snapshot_ref": STR,
                        "size": _INT,
                    },
                    required=["uri", "fetched_at", "content_hash", "snapshot_ref"],
                )
            ),
            "cause": nullable(STR),
            "reason": nullable(STR),
            "deliveries": {
                "type": "array",
                "items": ref("Delivery"),
                "description": f"Its {DELIVERIES_LISTED} most recent deliveries at most, the "
                "oldest of them first; `GET /records/{record_id}/deliveries` pages through "
                "every one.",
            },
            "deliveries_count": {
                "type": "integer",
                "minimum": 0,
                "description": "How many deliveries it has, listed or not.",
            },
            "position": _INT,
            "supersedes": nullable(
                {"type": "string", "description": "The record this one was proposed to replace."}
            ),
            "superseded_by": nullable(
                {"type": "string", "description": "Set once this record is SUPERSEDED."}
            ),
            "cause_superseded_by": nullable(
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
                        "cause": STR,
                        "reason": STR,
                        "superseded_by": nullable(STR),
                        "position": _INT,
                        "at": {"type": "string", "format": "date-time"},
                        "blocking": {"type": "boolean"},
                    }
                ),
            },
        },
        description="A record as the views see it (hidden dependencies show as <hidden>).",
    ),
    "RecordAnswer": {
        "allOf": [ref("Record")],
        "properties": {"as_of": ref("AsOf")},
        "description": "A record; as of a past moment, with `as_of`.",
    },
    "RecordPage": _object(
        {
            "records": {"type": "array", "items": ref("Record")},
            "next_after": nullable(STR),
        },
        description="One page; pass next_after as `after` for the next (null: last page).",
    ),
    "DeliveryPage": _object(
        {
            "record_id": STR,
            "deliveries": {"type": "array", "items": ref("Delivery")},
            "deliveries_count": {"type": "integer", "minimum": 0},
            "next_after": nullable(STR),
        },
        description="One page of a record's deliveries, in the order they were recorded; "
        "pass next_after as `after` for the next (null: last page).",
    ),
    "AuditEvent": _object(
        {
            "position": _INT,
            "type": STR,
            "at": TIME,
            "actor": nullable(STR),
            "details": {"type": "object"},
        }
    ),
    "AuditTrail": _object(
        {
            "record": ref("Record"),
            "events": {"type": "array", "items": ref("AuditEvent")},
            "undeclared": _IDS,
            "next_after": nullable(_INT),
        },
        description="One page of a record's history, in log order; pass next_after as "
        "`after` for the next (null: last page).",
    ),
    "Graph": _object(
        {
            "root": nullable(STR),
            "title": STR,
            "position": _INT,
            "nodes": {"type": "array", "items": ref("Record")},
            "edges": {
                "type": "array",
                "items": _object(
                    {
                        "parent": STR,
                        "child": STR,
                        "edge": {"type": "string", "enum": ["declared", "observed"]},
                    }
                ),
            },
        }
    ),
    "ReadResult": _object(
        {
            "outcome": ref("Outcome"),
            "scope": STR,
            "claim_key": STR,
            "at": TIME,
            "value": _ANY,
            "records": {
                "type": "array",
                "items": ref("Record"),
                "description": f"Its usable records: at most {USABLE_LISTED}, fewer once their "
                "JSON would pass 4 MiB beside the value, a record of each value before a "
                "second of any (a CONFLICT shows the values it is between).",
            },
            "omitted": {
                "type": "integer",
                "minimum": 0,
                "description": "How many usable records are not listed (the outcome counts "
                "them all).",
            },
            "note": nullable(STR),
        },
        description="FOUND (value is the agreed value), MISSING or CONFLICT.",
    ),
    "Explanation": _object(
        {
            "outcome": ref("Outcome"),
            "scope": STR,
            "claim_key": STR,
            "at": TIME,
            "entries": {
                "type": "array",
                "items": _object(
                    {
                        "record": ref("Record"),
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
            "usable_omitted": {
                "type": "integer",
                "minimum": 0,
                "description": "How many usable records are left out of `entries` (the "
                "outcome counts them all).",
            },
            "note": nullable(STR),
        },
        description="Per record of the claim, whether it is usable and why not, in proposal "
        f"order: the usable records as GET /read lists them (at most {USABLE_LISTED}, within "
        "4 MiB, a record of each value first; the outcome is decided on all of them) and "
        "at most `limit` others, those once accepted (ACCEPTED but not usable now, STALE, REVOKED, "
        "SUPERSEDED) before CANDIDATE and REJECTED ones, each the most recently changed "
        "first, stopped before their JSON passes 4 MiB. `omitted` counts the rest and "
        "`note`, when some are left out, says how to see them.",
    ),
    "CorrectionDue": _object(
        {
            "delivery": ref("Delivery"),
            "scope": STR,
            "validity": ref("Validity"),
            "status": ref("Status"),
            "cause": nullable(STR),
            "reason": nullable(STR),
            "superseded_by": nullable(STR),
            "cause_superseded_by": nullable(STR),
        }
    ),
    "CorrectionsDue": _object(
        {
            "corrections": {"type": "array", "items": ref("CorrectionDue")},
            "next_after": nullable(_INT),
        },
        description="One page, oldest delivery first; pass next_after as `after` for the "
        "next (null: last page).",
    ),
    "Revocation": _object(
        {
            "root": STR,
            "affected": _IDS,
            "position": {
                "type": "integer",
                "description": "The Revoked event's log position (as of position - 1: before).",
            },
            "stale": _IDS,
            "affected_count": {
                "type": "integer",
                "description": "How many records were affected in all "
                "(`affected` lists the first of them).",
            },
            "stale_count": {
                "type": "integer",
                "description": "How many records were marked STALE in all "
                "(`stale` lists the first of them).",
            },
            "note": nullable(STR),
        },
        description="What a revocation marked, as far as the caller may see: records in "
        "scopes it holds no grant in are neither named nor counted. Each list holds at most "
        f"the first {MAX_GRAPH_NODES} ids; the counts say how many there are and `note`, "
        "when some are left out, where to find them.",
    ),
    "ActionResult": _object(
        {"id": STR, "record": nullable(ref("Record"))},
        description="The record's id and, when the caller may read it, the record now.",
    ),
    "CorrectionIssued": _object({"correction_id": STR, "delivery_id": STR}),
    "DeliveryRecorded": _object({"delivery_id": STR, "record_id": STR}),
    "DeliverRequest": _object(
        {
            "recipient": {**_text(512, line=True), "description": "Who received it."},
            "channel": nullable(
                {**_text(64, line=True), "default": "email", "description": "How it left."}
            ),
        },
        required=["recipient"],
    ),
    "ProposeRequest": _object(
        {
            "scope": ID,
            "claim_key": NEW_CLAIM_KEY,
            "value": _VALUE,
            "kind": {
                "type": "string",
                "enum": [k.value for k in Kind if k is not Kind.EVIDENCE],
                "description": "Evidence is captured (POST /evidence), which pins its bytes.",
            },
            "parents": nullable(_REFS),
            "expires": nullable(TIME),
            "conditions": nullable({"type": "object"}),
            "id": nullable(_NEW_ID),
            "supersedes": nullable(
                {**REF, "description": "The record (same scope and claim) replaced."}
            ),
        },
        required=["scope", "claim_key", "value", "kind"],
    ),
    "EvidenceRequest": {
        **_object(
            {
                "scope": ID,
                "uri": _URI,
                "content": nullable(
                    {"type": "string", "description": "Text content (stored as UTF-8)."}
                ),
                "content_base64": nullable(_BASE64),
                "fetched_at": nullable(TIME),
                "claim_key": nullable(NEW_CLAIM_KEY),
                "expires": nullable(TIME),
                "conditions": nullable({"type": "object"}),
                "id": nullable(_NEW_ID),
                "value": _VALUE,
            },
            required=["scope", "uri"],
            description="Give exactly one of content or content_base64.",
        ),
        "oneOf": [
            {"properties": {name: {"type": "string"}}, "required": [name]}
            for name in ("content", "content_base64")
        ],
        # Without a claim_key the key is "source:<uri>", which must fit a claim key.
        "if": {"not": {"properties": {"claim_key": {"type": "string"}}, "required": ["claim_key"]}},
        "then": {"properties": {"uri": {"maxLength": 512 - len("source:")}}},
    },
    "NoteRequest": _object({"note": nullable(_NOTE)}, required=[]),
    "ReasonRequest": _object({"reason": _REASON}),
    "RevalidateRequest": _object(
        {"note": nullable(_NOTE), "parents": nullable({**_REFS, "description": "A new basis."})},
        required=[],
    ),
    "CorrectionRequest": _object(
        {
            "note": _REASON,
            "replacement": nullable(REF),
            "only_if_owed": {
                "type": ["boolean", "null"],
                "default": False,
                "description": "Refuse (409) unless the delivery owes a correction now, "
                "checked in the command's own transaction: two workers draining the "
                "outbox issue one correction per owed delivery.",
            },
        },
        required=["note"],
    ),
}

#: The answers of the operations that take ``as_of_position`` and ``as_of_time``
#: (a record's is ``RecordAnswer``): given as of a past moment, each carries
#: ``as_of`` (optional: an answer of now has none).
AS_OF_ANSWERS = (
    "RecordPage",
    "DeliveryPage",
    "AuditTrail",
    "Graph",
    "ReadResult",
    "Explanation",
    "CorrectionsDue",
)
for _name in AS_OF_ANSWERS:
    _schema = SCHEMAS[_name]
    SCHEMAS[_name] = {**_schema, "properties": {"as_of": ref("AsOf"), **_schema["properties"]}}
