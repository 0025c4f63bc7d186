"""HTTP status codes for ledger errors: the one table both the API and the console use.

A refused command raises a :class:`ledger.errors.LedgerError` subclass; its HTTP
status is the entry of :data:`STATUS` for the nearest class in its MRO. The JSON
error body names the class, the message and, for bad input, the offending field::

    {"error": {"type": "InvalidKindError", "message": "kind 'x' is not one of: …",
               "field": "kind"}}
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ledger.access import mask_tokens
from ledger.errors import (
    AcceptanceCheckError,
    AccessDeniedError,
    AuthenticationError,
    ClosedLedgerError,
    ConcurrencyError,
    CorruptEventError,
    DuplicateRecordError,
    InvalidInputError,
    InvalidKindError,
    InvalidParentError,
    InvalidTransitionError,
    LedgerError,
    NotUsableError,
    ReadOnlyError,
    RenderError,
    RetentionRuleError,
    SelfApprovalError,
    SnapshotErasedError,
    SnapshotIntegrityError,
    StorageError,
    UnknownDeliveryError,
    UnknownRecordError,
    UnknownSnapshotError,
)
from ledger.persistence.urls import without_location

#: HTTP status per ledger error class; a class not listed takes its nearest base's.
STATUS: dict[type[LedgerError], int] = {
    LedgerError: 500,
    AuthenticationError: 401,
    AccessDeniedError: 403,
    SelfApprovalError: 403,
    UnknownRecordError: 404,
    UnknownDeliveryError: 404,
    UnknownSnapshotError: 404,
    SnapshotErasedError: 410,
    InvalidTransitionError: 409,
    DuplicateRecordError: 409,
    NotUsableError: 409,
    AcceptanceCheckError: 409,
    ConcurrencyError: 409,
    ReadOnlyError: 409,
    InvalidInputError: 422,
    InvalidParentError: 422,
    RetentionRuleError: 422,
    SnapshotIntegrityError: 500,
    CorruptEventError: 500,
    StorageError: 503,
    ClosedLedgerError: 503,
    RenderError: 503,  # Graphviz failed or ran out of time, as when it is missing
}

#: How the library's messages name a request field (``"<name> …"``), longest first.
_FIELD_WORDS: tuple[tuple[str, str], ...] = tuple(
    sorted(
        {
            "as_of time": "as_of_time",
            "as_of position": "as_of_position",
            "channel": "channel",
            "claim_key": "claim_key",
            "claim_prefix": "claim_prefix",
            "conditions": "conditions",
            "content": "content",
            "context": "context",
            "delivery id": "delivery_id",
            "expires": "expires",
            "fetched_at": "fetched_at",
            "kind": "kind",
            "kinds": "kinds",
            "limit": "limit",
            "after": "after",
            "at": "at",
            "note": "note",
            "observed dependency": "parents",
            "parent id": "parents",
            "parent": "parents",
            "parents": "parents",
            "reason": "reason",
            "recipient": "recipient",
            "record id": "id",
            "replacement id": "replacement",
            "replacement": "replacement",
            "scope": "scope",
            "status": "status",
            "superseded record": "supersedes",
            "supersedes": "supersedes",
            "uri": "uri",
            "validity": "validity",
            "value": "value",
        }.items(),
        key=lambda item: -len(item[0]),
    )
)

#: A field that requests may give in another form (bytes as base64).
_GIVEN_AS: dict[str, str] = {"content": "content_base64"}

#: A field named by the error class alone, when the message does not say.
_FIELD_OF_CLASS: tuple[tuple[type[LedgerError], str], ...] = (
    (InvalidKindError, "kind"),
    (InvalidParentError, "parents"),
    (RetentionRuleError, "expires"),
)

_REFUSED = re.compile(r"^[a-z_]+ refused: ")


def status_of(exc: LedgerError) -> int:
    """The HTTP status for ``exc``: the :data:`STATUS` entry of its nearest class."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def field_of(exc: LedgerError, fields: Iterable[str], paths: Iterable[str] = ()) -> str | None:
    """The request field ``exc`` is about, among ``fields`` (those the request used;
    ``paths``: those of them that are path parameters).

    Library messages start with the name of what they refuse (``"expires
    2020-… has no timezone"``, ``"parent id 'x' is invalid"``); the error class
    decides where the message does not. ``record id`` is ``id`` in a request
    body that gives one and the path's ``record_id`` otherwise. A 404 names a
    field only when a query parameter or body field named the unknown record
    (``record_id`` of a query, ``supersedes``, ``replacement``): otherwise the
    unknown one is the path's record or delivery. A 409 names a field only for
    an ``id`` already taken (``DuplicateRecordError``): ``id``.
    """
    status = status_of(exc)
    given, in_path = set(fields), set(paths)
    if isinstance(exc, DuplicateRecordError):  # 409: the id the request gave is taken
        return "id" if "id" in given else None
    if status not in (404, 422):
        return None
    message = _REFUSED.sub("", str(exc))
    for word, name in _FIELD_WORDS:
        if message.startswith(word) and message[len(word) : len(word) + 1] in (" ", ":", ""):
            if name == "id" and "id" not in given:
                name = "record_id"
            if name not in given and _GIVEN_AS.get(name) in given:
                name = _GIVEN_AS[name]
            if status == 404:
                return name if name in given and name not in in_path else None
            if name in given or not given:
                return name
    if status == 404:
        # "record 'x' is unknown or not visible": the query's record, if it named one.
        named = isinstance(exc, UnknownRecordError) and "record_id" not in in_path
        return "record_id" if named and "record_id" in given else None
    for cls, name in _FIELD_OF_CLASS:
        if isinstance(exc, cls) and (name in given or not given):
            return name
    return None


def masked(text: str) -> str:
    """``text`` with any token in it masked (:func:`ledger.access.mask_tokens`)."""
    return mask_tokens(text)


def told(exc: LedgerError, url: str | None) -> str:
    """``exc``'s message as the server tells it to a caller: the ledger's location
    (``url``) left out (:func:`~ledger.persistence.urls.without_location`), and any
    token it repeats (one sent in a query parameter, say) masked."""
    return masked(without_location(str(exc), url))


def error_body(
    type_name: str, message: str, field: str | None = None, exc: LedgerError | None = None
) -> dict[str, Any]:
    """The JSON error body every refusal of the API carries; for a refusal by the
    status machine (``exc``, an ``InvalidTransitionError`` naming the record's
    status), also that status and the statuses the command needs."""
    body: dict[str, Any] = {"type": type_name, "message": message, "field": field}
    if isinstance(exc, InvalidTransitionError) and exc.status is not None:
        body.update(status=exc.status, allowed=list(exc.allowed))
    return {"error": body}
