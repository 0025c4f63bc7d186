"""The MCP tools: each one library call on the connection's run (reads, proposals)
or on the token's session (audit, approvals), its result as typed JSON, a
refusal as a tool error naming the ``LedgerError``."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import Annotated, Any, Literal, cast
from urllib.parse import quote

from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import BeforeValidator, Field

from ledger.answers import explained_limit, page_within
from ledger.domain import Kind, Status, Validity
from ledger.errors import (
    InvalidInputError,
    InvalidKindError,
    InvalidParentError,
    LedgerError,
    UnknownRecordError,
)
from ledger.graph import MAX_SERVED_NODES
from ledger.integrations.mcp.connection import (
    Connection,
    Ctx,
    announce,
    as_tool_error,
    connection_of,
    hinted,
    off_loop,
    refusal,
    view_if_readable,
)
from ledger.integrations.mcp.hints import superseding, unreadable_read
from ledger.integrations.mcp.results import (
    DELIVERIES_LISTED,
    EVENTS_LISTED,
    USABLE_LISTED,
    AuditOut,
    DecisionOut,
    EvidenceOut,
    ExplainOut,
    PageOut,
    ProposalOut,
    ReadOut,
    RecordOut,
    RevocationOut,
    audit_out,
    explain_out,
    read_out,
    record_out,
    record_uri,
    revocation_out,
    written_out,
)
from ledger.integrations.mcp.schemas import (
    REF_SCHEMA,
    At,
    ClaimKey,
    ClaimPrefix,
    Conditions,
    Expires,
    KindName,
    Kinds,
    NewId,
    Note,
    Parents,
    ReadContext,
    Reason,
    RecordId,
    Scope,
    Uri,
    iso_text,
    one_of,
    shaped,
)
from ledger.jsonable import EXPLAINED
from ledger.session import next_after
from ledger.validation import CLAIM_KEY_MAX, quoted
from ledger.values import RecordView

__all__ = [
    "accept_memory",
    "audit_record",
    "capture_evidence",
    "explain_memory",
    "get_record",
    "list_records",
    "propose_memory",
    "read_evidence",
    "read_memory",
    "record_resource",
    "reject_memory",
    "revalidate_memory",
    "revoke_memory",
]

_CANDIDATE_NOTE = (
    "A CANDIDATE: not memory yet. read_memory will not return it until an approver who is "
    "not you accepts it."
)


#: How many records list_records returns when no ``limit`` is given (or null).
LISTED = 100

#: How many of the records a refused proposal rested on, withdrawn since, it names.
WITHDRAWN_NAMED = 20


@contextmanager
def naming_withdrawn(connection: Connection) -> Iterator[None]:
    """A proposal refused for a dependency withdrawn since is refused naming every
    record the connection was shown usable that nothing may be built on now, and
    how to go on: the ledger names the first it meets, so a model that looked at
    only that one would be refused again for the next, once per record. A refusal
    that tells the caller to start a new run says how a model gets one
    (:func:`~ledger.integrations.mcp.hints.superseding`, ``unreadable_read``)."""
    try:
        yield
    except InvalidParentError as exc:
        reworded = superseding(exc) or unreadable_read(exc)
        raise reworded or _resting_on_withdrawn(connection, exc) from None


def _resting_on_withdrawn(connection: Connection, exc: InvalidParentError) -> InvalidParentError:
    withdrawn = connection.withdrawn()
    if not withdrawn:
        return exc
    named = ", ".join(f"{view.id!r} ({view.status})" for view in withdrawn[:WITHDRAWN_NAMED])
    if len(withdrawn) > WITHDRAWN_NAMED:
        named += f" and {len(withdrawn) - WITHDRAWN_NAMED} more"
    listings = " and ".join(
        f"list_records(scope={scope!r}, status={status!r})"
        for scope, status in sorted({(view.scope, str(view.status)) for view in withdrawn})
    )
    return InvalidParentError(
        f"{exc}. This connection was shown {len(withdrawn)} record(s) usable that nothing "
        f"may be built on now: {named}. What it proposes rests on everything it was shown, "
        "so each of its proposals is refused until it has been shown these as they are now: "
        f"{listings} (paging with `after`), or get_record for each; then propose again"
    )


def _proposal(connection: Connection, record_id: str) -> ProposalOut:
    view = view_if_readable(connection.session, record_id)
    answer: ProposalOut = {
        "id": record_id,
        "status": str(Status.CANDIDATE),
        "note": _CANDIDATE_NOTE,
    }
    if connection.run_id is not None:
        answer["run_id"] = connection.run_id
    if view is not None:
        answer["record"] = written_out(view)
    return answer


def _decision(record_id: str, action: str, view: RecordView | None) -> DecisionOut:
    """What an approval tool returns: the record as written when it may be read."""
    answer: DecisionOut = {"id": record_id, "action": action}
    if view is not None:
        answer["record"] = written_out(view)
    return answer


def capture_evidence(
    ctx: Ctx,
    scope: Scope,
    uri: Uri,
    content: Annotated[
        str,
        Field(
            description="The exact content read, as text (or base64 with "
            "content_encoding='base64'). It is stored and pinned by its sha256 hash."
        ),
    ],
    content_encoding: Annotated[
        Literal["utf-8", "base64"] | None,
        Field(description="How `content` is given: 'utf-8' text (default) or 'base64' bytes."),
    ] = "utf-8",
    fetched_at: Annotated[
        datetime | None,
        BeforeValidator(iso_text),
        Field(description="When it was read, RFC 3339 with a timezone; default now."),
    ] = None,
    claim_key: Annotated[
        str | None,
        Field(
            description="The key it answers; default 'source:<uri>' (give one for a uri "
            "longer than 505 characters: a claim key holds at most 512).",
            json_schema_extra=shaped(minLength=1, maxLength=CLAIM_KEY_MAX),
        ),
    ] = None,
    expires: Expires = None,
    conditions: Conditions = None,
    id: NewId = None,
    value: Annotated[
        Any, Field(description="What the evidence says, as a JSON value; default its hash.")
    ] = None,
) -> ProposalOut:
    """The ``capture_evidence`` tool: :meth:`Session.capture` in the connection's run."""
    connection = connection_of(ctx)
    with as_tool_error(connection.session, writing="record"):
        if content_encoding == "base64":  # None (null) is the default, utf-8
            try:
                data = base64.b64decode(content, validate=True)
            except binascii.Error as exc:
                raise InvalidInputError(f"content is not valid base64: {exc}") from None
        else:
            try:
                data = content.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidInputError(f"content is not valid text: {exc.reason}") from None
        with naming_withdrawn(connection), connection.acting() as acting:
            record_id = acting.capture(
                scope=scope,
                uri=uri,
                content=data,
                fetched_at=fetched_at,
                claim_key=claim_key,
                expires=expires,
                conditions=conditions,
                id=id,
                value=value,
            )
        return _proposal(connection, record_id)


def propose_memory(
    ctx: Ctx,
    scope: Scope,
    claim_key: ClaimKey,
    value: Annotated[
        Any,
        Field(
            description="The claim itself: any JSON value (text, number, boolean, null, "
            "array or object), kept with its type: text stays text even when it spells "
            "JSON (send an array as an array, not as text)."
        ),
    ],
    kind: KindName,
    parents: Parents = None,
    expires: Expires = None,
    conditions: Conditions = None,
    id: NewId = None,
    supersedes: Annotated[
        str | None,
        Field(
            description="The id of the record this one replaces (same scope and claim key). "
            "When this one is accepted the old one becomes SUPERSEDED, so the two do not "
            "CONFLICT, and what was built on the old one becomes STALE.",
            json_schema_extra=REF_SCHEMA,
        ),
    ] = None,
) -> ProposalOut:
    """The ``propose_memory`` tool: :meth:`Session.propose` in the connection's run."""
    connection = connection_of(ctx)
    replaces: dict[str, Any] = {} if supersedes is None else {"supersedes": supersedes}
    with as_tool_error(connection.session, writing="record"):
        with naming_withdrawn(connection), proposable(kind), connection.acting() as acting:
            record_id = acting.propose(
                scope=scope,
                claim_key=claim_key,
                value=value,
                kind=kind,
                parents=parents or (),
                expires=expires,
                conditions=conditions,
                id=id,
                **replaces,
            )
        return _proposal(connection, record_id)


@contextmanager
def proposable(kind: str) -> Iterator[None]:
    """A kind propose_memory refuses is refused naming the kinds it takes: the
    ledger names every kind, evidence included, which only capture_evidence stores."""
    try:
        yield
    except InvalidKindError as exc:
        if kind == Kind.EVIDENCE.value:
            raise InvalidKindError(f"{exc} (to capture it, call capture_evidence)") from None
        if kind in {k.value for k in Kind}:
            raise
        takes = ", ".join(k.value for k in Kind if k is not Kind.EVIDENCE)
        raise InvalidKindError(
            f"kind {quoted(kind)} is not one of: {takes} (evidence is stored with capture_evidence)"
        ) from None


def read_memory(
    ctx: Ctx,
    scope: Scope,
    claim_key: ClaimKey,
    at: At = None,
    context: ReadContext = None,
    kinds: Kinds = None,
) -> ReadOut:
    """The ``read_memory`` tool: :meth:`Session.read`, recorded in the run (every
    usable record: the outcome rests on them all), its records listed as
    :func:`~ledger.answers.usable_listed` lists them."""
    connection = connection_of(ctx)
    with as_tool_error(connection.session), connection.acting("read_memory") as acting:
        return read_out(acting.read(scope, claim_key, at=at, context=context, kinds=kinds))


def explain_memory(
    ctx: Ctx,
    scope: Scope,
    claim_key: ClaimKey,
    at: At = None,
    context: ReadContext = None,
    kinds: Kinds = None,
    limit: Annotated[
        int | None,
        Field(
            description="At most this many records that are not usable (the usable ones "
            f"are shown besides, at most {USABLE_LISTED}; fewer when their JSON would pass "
            "4 MiB), picked among those "
            "once accepted (now expired, stale, revoked or superseded) before candidates and "
            "rejected ones, each the most recently changed first; all are listed in the order "
            "they were proposed.",
            ge=1,
            le=MAX_SERVED_NODES,
            strict=True,
        ),
    ] = EXPLAINED,
) -> ExplainOut:
    """The ``explain_memory`` tool: :meth:`Session.explain` with a ``limit``,
    recorded in the run (only the records shown)."""
    connection = connection_of(ctx)
    asked: dict[str, Any] = {"at": at, "context": context, "kinds": kinds}
    limit = EXPLAINED if limit is None else limit
    with as_tool_error(connection.session):
        # Sized through the session first (the run is shown only what is returned):
        # the unusable records stop before the answer passes MAX_ANSWER_BYTES.
        session = connection.session
        limit = explained_limit(session, scope, claim_key, limit, DELIVERIES_LISTED, **asked)
        with connection.acting("explain_memory") as acting:
            return explain_out(acting.explain(scope, claim_key, limit=limit, **asked))


def get_record(ctx: Ctx, record_id: RecordId) -> RecordOut:
    """The ``get_record`` tool: :meth:`Session.get`, recorded in the run."""
    connection = connection_of(ctx)
    with as_tool_error(connection.session), connection.acting("get_record") as acting:
        return record_out(acting.get(record_id))


def list_records(
    ctx: Ctx,
    scope: Scope,
    status: Annotated[
        str | None,
        Field(
            description="Only records in this status; 'CANDIDATE' is the review queue.",
            json_schema_extra=one_of(Status),
        ),
    ] = None,
    validity: Annotated[
        str | None,
        Field(
            description="Only records of this validity: 'NEEDS_REVALIDATION' is what is "
            "not (or no longer) verified - candidates, records flagged STALE by a revocation, "
            "expired ones; 'VALID' what may be relied on; 'INVALID' what was revoked or "
            "rejected.",
            json_schema_extra=one_of(Validity),
        ),
    ] = None,
    kind: Annotated[
        str | None,
        Field(
            description="Only records of this kind.",
            json_schema_extra=one_of(Kind),
        ),
    ] = None,
    claim_prefix: ClaimPrefix = None,
    limit: Annotated[
        int | None,
        Field(
            description="At most this many records (fewer when their JSON would pass 4 MiB: "
            "`next_after` goes on from the last one returned).",
            ge=1,
            le=1000,
            strict=True,
        ),
    ] = LISTED,
    after: Annotated[
        str | None,
        Field(description="The `next_after` of the previous page, to get the next one."),
    ] = None,
) -> PageOut:
    """The ``list_records`` tool: one page of :meth:`Session.records`, recorded in the run."""
    filters: dict[str, Any] = {
        "status": status,
        "validity": validity,
        "kind": kind,
        "claim_prefix": claim_prefix,
    }
    connection = connection_of(ctx)
    limit = LISTED if limit is None else limit
    with as_tool_error(connection.session):
        # Sized through the session first (the run is shown only what is returned):
        # a page stops before its records pass MAX_ANSWER_BYTES of JSON.
        session, cap = connection.session, DELIVERIES_LISTED
        limit = len(page_within(session, scope, limit, after, filters, deliveries_listed=cap)) or 1
        with connection.acting("list_records") as acting:
            page = acting.records(scope, limit=limit, after=after, **filters)
        # The look past a full page goes through the session: the run was not shown it.
        following = next_after(connection.session, scope, page, limit, **filters)
    answer: PageOut = {"records": [record_out(r) for r in page]}
    if following is not None:
        answer["next_after"] = following
    return answer


def read_evidence(ctx: Ctx, record_id: RecordId) -> EvidenceOut:
    """The ``read_evidence`` tool: the bytes an evidence record pins
    (:meth:`Session.snapshot`, re-verified against their hash), the record read in
    the run; as text when they are UTF-8, else base64."""
    connection = connection_of(ctx)
    with as_tool_error(connection.session):
        # Checked before the run records the read: a refusal shows the model
        # nothing, so nothing it proposes next may rest on the record.
        view = connection.session.get(record_id)
        ref = None if view.evidence is None else view.evidence.get("snapshot_ref")
        if not isinstance(ref, str):
            raise InvalidInputError(
                f"record {record_id!r} pins no captured content (only capture_evidence "
                "stores the bytes read)"
            )
        data = connection.session.snapshot(ref)
        with connection.acting("read_evidence") as acting:
            view = acting.get(record_id)
    try:
        content, encoding = data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        content, encoding = base64.b64encode(data).decode("ascii"), "base64"
    shown = record_out(view).get("evidence", {})  # pruned: no field of it is null
    pinned = {k: shown[k] for k in ("uri", "fetched_at", "content_hash") if k in shown}
    return cast(
        EvidenceOut,
        {
            "id": view.id,
            **pinned,
            "snapshot_ref": ref,
            "size": len(data),
            "content_encoding": encoding,
            "content": content,
        },
    )


def audit_record(
    ctx: Ctx,
    record_id: RecordId,
    limit: Annotated[
        int | None,
        Field(
            description=f"At most this many events (default {EVENTS_LISTED}): "
            "`next_after` goes on from the last one returned.",
            ge=1,
            le=1000,
            strict=True,
        ),
    ] = EVENTS_LISTED,
    after: Annotated[
        int | None,
        Field(
            description="The `next_after` of the previous page (a log position), to get "
            "the next one.",
            ge=0,
            strict=True,
        ),
    ] = None,
) -> AuditOut:
    """The ``audit_record`` tool: one page of :meth:`Session.audit`'s events."""
    session = connection_of(ctx).session
    with as_tool_error(session):
        trail = session.audit(record_id)
    limit = EVENTS_LISTED if limit is None else limit
    events = [e for e in trail.events if after is None or e.position > after]
    return audit_out(trail, events[:limit], len(events) > limit)


async def accept_memory(ctx: Ctx, record_id: RecordId, note: Note = "") -> DecisionOut:
    """The ``accept_memory`` tool: :meth:`Session.accept`; announces the record."""
    session = connection_of(ctx).session
    accept = partial(session.accept, record_id, note=note or "")
    with as_tool_error():
        await off_loop(hinted(accept, session, record_id, "decision"))
        view = await off_loop(partial(view_if_readable, session, record_id))
    replaced = None if view is None else view.supersedes
    await announce(ctx, [record_id, *([replaced] if replaced else [])])
    return _decision(record_id, "accepted", view)


async def reject_memory(ctx: Ctx, record_id: RecordId, reason: Reason) -> DecisionOut:
    """The ``reject_memory`` tool: :meth:`Session.reject`; announces the record."""
    session = connection_of(ctx).session
    reject = partial(session.reject, record_id, reason)
    with as_tool_error():
        await off_loop(hinted(reject, session, record_id, "decision"))
        view = await off_loop(partial(view_if_readable, session, record_id))
    await announce(ctx, [record_id])
    return _decision(record_id, "rejected", view)


async def revoke_memory(ctx: Ctx, record_id: RecordId, reason: Reason) -> RevocationOut:
    """The ``revoke_memory`` tool: :meth:`Session.revoke`; announces what it affected."""
    session = connection_of(ctx).session
    revoke = partial(session.revoke, record_id, reason)
    with as_tool_error():
        rev = await off_loop(hinted(revoke, session, record_id, "decision"))
    # ``affected`` holds only what this token may see: hidden records are never named.
    await announce(ctx, list(rev.affected))
    return revocation_out(rev)


async def revalidate_memory(
    ctx: Ctx,
    record_id: RecordId,
    note: Note = "",
    parents: Annotated[
        list[str] | None,
        Field(
            description="A new basis: ids of usable records replacing the record's "
            "dependencies. Omit when its current dependencies are usable again.",
            json_schema_extra=REF_SCHEMA,
        ),
    ] = None,
) -> DecisionOut:
    """The ``revalidate_memory`` tool: :meth:`Session.revalidate`; announces the record."""
    session = connection_of(ctx).session
    with as_tool_error():
        revalidate = partial(session.revalidate, record_id, note=note or "", parents=parents)
        await off_loop(hinted(revalidate, session, record_id, "decision"))
        view = await off_loop(partial(view_if_readable, session, record_id))
    await announce(ctx, [record_id])
    return _decision(record_id, "revalidated", view)


def record_resource(ctx: Ctx, record_id: str) -> str:
    """The record resource: one record as compact JSON (the text of get_record's
    result), recorded in the run. An id that is no record id is the client's
    mistake, as an unknown one is: invalid params (-32602), not an internal error."""
    connection = connection_of(ctx)
    try:
        with connection.acting("the record resource") as acting:
            view = acting.get(record_id)
    except UnknownRecordError as exc:
        raise ResourceNotFoundError(refusal(exc, connection.url)) from None
    except InvalidInputError as exc:
        uri = record_uri(quote(record_id, safe=""))
        message = refusal(exc, connection.url)
        raise MCPError(code=INVALID_PARAMS, message=message, data={"uri": uri}) from None
    except LedgerError as exc:
        raise ResourceError(refusal(exc, connection.url)) from None
    return json.dumps(record_out(view), ensure_ascii=False, separators=(",", ":"))
