"""The MCP tools' argument types: each an ``Annotated`` type whose description is
what a model reads, with the enum values on string arguments that name a kind,
status or validity (the ledger checks the value itself, naming a wrong one).

Every optional argument's type admits null, which is read as the argument not
given (its default), as the HTTP API reads an optional body field given null."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

from ledger.domain import Kind
from ledger.validation import (
    CLAIM_KEY_MAX,
    ID_PATTERN,
    RFC_3339,
    TEXT_MAX,
    URI_MAX,
    from_iso,
)

__all__ = [
    "ID_WORDS",
    "REF_SCHEMA",
    "At",
    "ClaimKey",
    "ClaimPrefix",
    "Conditions",
    "Expires",
    "KindName",
    "Kinds",
    "NewId",
    "Note",
    "Parents",
    "ReadContext",
    "Reason",
    "RecordId",
    "Scope",
    "Uri",
    "iso_text",
    "one_of",
    "shaped",
]


#: An id or a scope, as a JSON schema pattern, and in words (what a refusal says).
_ID = ID_PATTERN.pattern
#: A record as a principal may be shown it: its id, or ``id@@scope`` (an id taken
#: in two of the scopes it sees).
_REF = f"^{_ID[1:-1]}(@@{_ID[1:-1]})?$"
ID_WORDS = "1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit"


def shaped(**keywords: Any) -> Callable[[dict[str, Any]], None]:
    """Put JSON schema ``keywords`` (``pattern``, ``maxLength``, ``minLength``,
    ``minItems``) on the branch of an argument's schema they apply to: the string
    (also inside ``anyOf``), a list's items for a string keyword on a list, the list
    for ``minItems``. Only the schema says it: the ledger checks the value itself,
    naming what is wrong with it."""

    def annotate(schema: dict[str, Any]) -> None:
        for branch in [schema, *schema.get("anyOf", ())]:
            if branch.get("type") == "string":
                branch.update({k: v for k, v in keywords.items() if k != "minItems"})
            elif branch.get("type") == "array":
                if "minItems" in keywords:
                    branch["minItems"] = keywords["minItems"]
                strings = {k: v for k, v in keywords.items() if k != "minItems"}
                if strings:
                    branch["items"] = {**branch.get("items", {"type": "string"}), **strings}

    return annotate


def _both(*annotations: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """Each of ``annotations`` applied in turn."""

    def annotate(schema: dict[str, Any]) -> None:
        for one in annotations:
            one(schema)

    return annotate


#: The schema of an id or a scope, and of a record as named to the principal.
_AN_ID = shaped(pattern=_ID, maxLength=128)
REF_SCHEMA = shaped(pattern=_REF, maxLength=2 * 128 + 2)


def one_of(
    names: type[StrEnum], leave_out: tuple[StrEnum, ...] = ()
) -> Callable[[dict[str, Any]], None]:
    """Put the enum's values (but ``leave_out``) on the string in an argument's
    schema (also inside ``anyOf`` for an optional argument, or on a list's items).
    The ledger checks the value itself, naming it when it is none of these."""
    values = [member.value for member in names if member not in leave_out]

    def annotate(schema: dict[str, Any]) -> None:
        for branch in [schema, *schema.get("anyOf", ())]:
            if branch.get("type") == "string":
                branch["enum"] = values
            elif branch.get("type") == "array":
                branch["items"] = {"type": "string", "enum": values}

    return annotate


Scope = Annotated[
    str,
    Field(
        description="The project or tenant the record belongs to. Your token's grants decide "
        "which scopes you may use; a scope you hold no grant in is refused.",
        json_schema_extra=_AN_ID,
    ),
]
ClaimKey = Annotated[
    str,
    Field(
        description="The precise question a record answers, as a structured key, "
        "e.g. 'api.orders.retry_safe'.",
        json_schema_extra=shaped(minLength=1, maxLength=CLAIM_KEY_MAX),
    ),
]
ClaimPrefix = Annotated[
    str | None,
    Field(
        description="Only records whose claim key starts with this.",
        json_schema_extra=shaped(maxLength=CLAIM_KEY_MAX),
    ),
]
Uri = Annotated[
    str,
    Field(
        description="Where the content was read (URL, path, API call).",
        json_schema_extra=shaped(minLength=1, maxLength=URI_MAX),
    ),
]
RecordId = Annotated[
    str,
    Field(
        description="A record id, as returned by propose_memory, capture_evidence, "
        "read_memory or list_records.",
        json_schema_extra=REF_SCHEMA,
    ),
]
KindName = Annotated[
    str,
    Field(
        description="What the record is: 'fact'; 'inference' (your own deduction or "
        "suggestion); 'user_constraint' or 'user_preference' (what a user told you); "
        "'plan'; 'report'. Evidence (external content) is captured with "
        "capture_evidence, which pins the bytes you read. "
        "Kinds are never merged: a user's constraint and your inference stay two records.",
        json_schema_extra=one_of(Kind, leave_out=(Kind.EVIDENCE,)),
    ),
]
Parents = Annotated[
    list[str] | None,
    Field(
        description="Ids of the records this one rests on: evidence from capture_evidence, "
        "facts or inferences it was derived from. If one of them is revoked later, this "
        "record becomes STALE.",
        json_schema_extra=REF_SCHEMA,
    ),
]


#: What an instant that is no RFC 3339 text is refused with, but the value itself.
_ISO_TEXT = "an instant is RFC 3339 text with a timezone (e.g. '2026-12-31T00:00:00Z'), not "


def _refused(message: str) -> PydanticCustomError:
    """An argument's refusal worded as given (pydantic words a ``ValueError`` as
    "Value error, …")."""
    return PydanticCustomError("instant", "{message}", {"message": message})


def _no_instant(text: str, reason: str) -> str:
    """Why ``text`` is no instant, from what Python's reader said (``reason``): not
    RFC 3339 at all, or RFC 3339 whose numbers name no instant (a 30th of
    February, an offset of 24 hours or more)."""
    shown = repr(text[:40])
    if reason.startswith("Invalid isoformat string"):
        return _ISO_TEXT + shown
    if reason.startswith("offset must be"):  # Python names its timedelta bounds
        reason = "its UTC offset is out of range (it must be less than 24 hours)"
    return f"{shown} is no instant: {reason.rstrip('.')}"


#: RFC 3339 (section 5.6) lets the "T" and "Z" of a date-time be lower case, which
#: the schemas' ``format: date-time`` promises; Python's reader refuses a "z".
def iso_text(value: object) -> object:
    """An instant must come as RFC 3339 text (:data:`ledger.validation.RFC_3339`,
    as the HTTP API takes it): a number is refused, not read as seconds since the
    epoch (pydantic's lax reading), nor a boolean as one, nor text of digits as one
    ("1700000000"), nor another ISO 8601 form; text whose numbers name no instant
    is refused saying which ("day is out of range for month")."""
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, str):
        if not RFC_3339.fullmatch(value):
            raise _refused(_ISO_TEXT + repr(value[:40]))
        try:
            return from_iso(value)
        except ValueError as exc:
            raise _refused(_no_instant(value, str(exc))) from None
    kinds = {bool: "true or false", int: "a number", float: "a number", list: "a list"}
    raise _refused(
        _ISO_TEXT + kinds.get(type(value), "an object" if isinstance(value, dict) else "that")
    )


Expires = Annotated[
    datetime | None,
    BeforeValidator(iso_text),
    Field(
        description="When the claim stops being valid: usable before this instant, not "
        "at it; RFC 3339 with a timezone (e.g. '2026-12-31T00:00:00Z'). Omit for no expiry."
    ),
]
Conditions = Annotated[
    dict[str, Any] | None,
    Field(
        description='When the claim applies, e.g. {"api_version": "v2"}. A read returns '
        "it only when its `context` matches every condition."
    ),
]
NewId = Annotated[
    str | None,
    Field(
        description="Your own id for the new record (a letter or digit, then letters, digits, "
        "'.', '_', ':' or '-'; at most 128), else one is generated. Give one so that a retry "
        "of a call whose answer was lost is refused as a duplicate (DuplicateRecordError) if "
        "it was written, instead of creating a second record.",
        json_schema_extra=_AN_ID,
    ),
]
At = Annotated[
    datetime | None,
    BeforeValidator(iso_text),
    Field(
        description="Judge expiry at this instant (RFC 3339 with a timezone) instead of now, "
        "from what the ledger holds now, e.g. to ask whether a record will still be within "
        "its expiry tomorrow. It is no view of the past: records revoked, superseded or "
        "proposed since count as they stand now."
    ),
]
ReadContext = Annotated[
    dict[str, Any] | None,
    Field(
        description="Your situation, matched against the records' conditions, e.g. "
        '{"api_version": "v2"}. A record with a condition your context does not match '
        "is not usable."
    ),
]
Kinds = Annotated[
    list[str] | None,
    Field(
        description="Only consider records of these kinds (at least one; omit for every kind).",
        json_schema_extra=_both(one_of(Kind), shaped(minItems=1)),
    ),
]
Note = Annotated[
    str | None,
    Field(
        description="What you checked; recorded in the audit trail.",
        json_schema_extra=shaped(maxLength=TEXT_MAX),
    ),
]
Reason = Annotated[
    str,
    Field(
        description="Why (not empty); recorded, and shown by explain_memory and audit_record.",
        json_schema_extra=shaped(minLength=1, maxLength=TEXT_MAX),
    ),
]
