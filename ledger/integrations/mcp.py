"""provledger as an agent's memory over the Model Context Protocol (``provledger[mcp]``).

:func:`build_server` gives an MCP server (the official ``mcp`` SDK's ``MCPServer``)
acting with one principal's token; ``provledger mcp`` runs it over stdio or
streamable HTTP (:func:`serve`).

- Tools: ``capture_evidence``, ``propose_memory``, ``read_memory``,
  ``explain_memory``, ``get_record``, ``list_records``, ``audit_record``; and, only
  when the token holds ``approve`` in some scope, ``accept_memory``,
  ``reject_memory``, ``revoke_memory``, ``revalidate_memory``. Arguments carry the
  library's names; results are structured JSON (datetimes ISO 8601, bytes
  ``{"base64": …}``). A refusal is a tool error whose text names the
  ``LedgerError`` class and carries its message.
- Resources: ``provledger://record/{record_id}``, the JSON ``get_record`` returns.
  After ``revoke_memory`` every affected record the token can see is announced as
  updated (and after accept, reject and revalidate the record itself), to clients
  listening with ``subscriptions/listen``.
- One connection is one ledger run (:meth:`ledger.Session.run`), started at its
  first read or proposal: every usable record it is shown (by ``read_memory``,
  ``explain_memory``, ``get_record``, ``list_records``, the record resource) is
  recorded, and what it proposes carries those reads as ``observed`` dependencies.
  Records shown as not usable (candidates, stale, revoked, superseded, expired) are
  no basis and are not recorded; neither is ``audit_record``. Once shown that a
  record it read was withdrawn, the connection goes on in a new run keeping its
  other reads. Over stdio the
  connection is the process; in process (``mcp.Client(server)``) each client; over
  streamable HTTP, whose 2026 protocol has no sessions, the server's lifetime.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import (
    AbstractAsyncContextManager,
    ExitStack,
    asynccontextmanager,
    contextmanager,
)
from dataclasses import fields
from datetime import datetime
from enum import StrEnum
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from ledger import Ledger, RunContext, Session, __version__
from ledger.access import Role
from ledger.domain import Kind, Status, Validity
from ledger.errors import AccessDeniedError, InvalidInputError, LedgerError, UnknownRecordError
from ledger.values import AuditTrail, Delivery, Explanation, ReadResult, RecordView, Revocation

__all__ = [
    "APPROVAL_TOOLS",
    "RECORD_URI",
    "TOOLS",
    "build_server",
    "record_out",
    "record_uri",
    "serve",
]

log = logging.getLogger(__name__)

#: The URI template of the record resource.
RECORD_URI = "provledger://record/{record_id}"

T = TypeVar("T")

INSTRUCTIONS = """\
provledger is a provenance ledger used as memory. Everything stored is a record: a \
claim answering one question (scope + claim_key -> value), of a kind (evidence, fact, \
user_constraint, user_preference, inference, plan, report), naming what it rests on \
(parents).
- What you propose is a CANDIDATE, not memory: read_memory does not return it until \
an approver who is not its proposer accepts it.
- read_memory answers FOUND (the usable records agree on a value), MISSING (nothing \
is usable now; not proof that nothing was ever said - explain_memory says why) or \
CONFLICT (usable records disagree; all are returned, none wins).
- Store what you read from outside with capture_evidence and name it in the parents \
of claims you derive from it.
- To change what is remembered, propose the new value with supersedes=<the old record's \
id>; two accepted values for one claim are a CONFLICT.
- When a record is revoked, everything built on it becomes STALE (needs \
re-verification) and is no longer returned; list_records with \
validity=NEEDS_REVALIDATION shows what needs attention.
- This connection is one run: every usable record you are shown (read, explained, \
fetched or listed) is recorded, and what you propose carries those reads as observed \
dependencies.
"""


# -- argument types (the descriptions are what a model reads) -----------------------------


def _one_of(names: type[StrEnum]) -> Callable[[dict[str, Any]], None]:
    """Put the enum's values on the string in an argument's schema (also inside
    ``anyOf`` for an optional argument, or on a list's items). The ledger checks the
    value itself, naming it when it is none of these."""
    values = [member.value for member in names]

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
        "which scopes you may use; a scope you hold no grant in is refused."
    ),
]
ClaimKey = Annotated[
    str,
    Field(
        description="The precise question a record answers, as a structured key, "
        "e.g. 'api.orders.retry_safe'."
    ),
]
RecordId = Annotated[
    str,
    Field(
        description="A record id, as returned by propose_memory, capture_evidence, "
        "read_memory or list_records."
    ),
]
KindName = Annotated[
    str,
    Field(
        description="What the record is: 'fact'; 'inference' (your own deduction or "
        "suggestion); 'user_constraint' or 'user_preference' (what a user told you); "
        "'plan'; 'report'; 'evidence' (prefer capture_evidence for external content). "
        "Kinds are never merged: a user's constraint and your inference stay two records.",
        json_schema_extra=_one_of(Kind),
    ),
]
Parents = Annotated[
    list[str] | None,
    Field(
        description="Ids of the records this one rests on: evidence from capture_evidence, "
        "facts or inferences it was derived from. If one of them is revoked later, this "
        "record becomes STALE."
    ),
]
Expires = Annotated[
    datetime | None,
    Field(
        description="The last instant the claim may be used, ISO 8601 with a timezone "
        "(e.g. '2026-12-31T00:00:00Z'). Omit for no expiry."
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
        "'.', '_', ':' or '-'; at most 128). Omit to have one generated."
    ),
]
At = Annotated[
    datetime | None,
    Field(
        description="Answer for this instant (ISO 8601 with a timezone) instead of now, e.g. "
        "to ask whether a record was usable at some past or future time."
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
        description="Only consider records of these kinds.",
        json_schema_extra=_one_of(Kind),
    ),
]
Note = Annotated[str, Field(description="What you checked; recorded in the audit trail.")]
Reason = Annotated[
    str,
    Field(description="Why; recorded, and shown by explain_memory and audit_record."),
]


# -- results ------------------------------------------------------------------------------


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
    effective_expires: str | None
    expiry_source: str | None
    parents: list[str]
    observed: list[str]
    undeclared: list[str]
    conditions: dict[str, Any]
    proposer: str
    created_at: str
    evidence: dict[str, Any] | None
    cause: str | None
    reason: str | None
    supersedes: str | None
    superseded_by: str | None
    cause_superseded_by: str | None
    deliveries: list[dict[str, Any]]
    position: int


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
    """Per record, why it is or is not usable."""

    outcome: str
    scope: str
    claim_key: str
    at: str
    entries: list[ReasonOut]


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
    """What a revocation changed, as far as the token may see."""

    root: str
    affected: list[str]
    stale: list[str]
    hidden: int
    position: int


def _plain(value: Any) -> Any:
    """``value`` as JSON data: datetimes ISO 8601, bytes ``{"base64": …}``."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)  # a StrEnum member as its plain value
    return value


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def record_out(view: RecordView) -> RecordOut:
    """A record view as the JSON the tools and the resource return."""
    return {
        "id": view.id,
        "scope": view.scope,
        "claim_key": view.claim_key,
        "kind": str(view.kind),
        "value": _plain(view.value),
        "status": str(view.status),
        "validity": str(view.validity),
        "expires": _iso(view.expires),
        "effective_expires": _iso(view.effective_expires),
        "expiry_source": view.expiry_source,
        "parents": list(view.parents),
        "observed": list(view.observed),
        "undeclared": list(view.undeclared),
        "conditions": _plain(view.conditions),
        "proposer": view.proposer,
        "created_at": view.created_at.isoformat(),
        "evidence": None if view.evidence is None else _plain(view.evidence),
        "cause": view.cause,
        "reason": view.reason,
        "supersedes": view.supersedes,
        "superseded_by": view.superseded_by,
        "cause_superseded_by": view.cause_superseded_by,
        "deliveries": [_delivery_out(d) for d in view.deliveries],
        "position": view.position,
    }


def _delivery_out(delivery: Delivery) -> dict[str, Any]:
    out: dict[str, Any] = _plain(
        {f.name: getattr(delivery, f.name) for f in fields(delivery) if f.name != "corrections"}
    )
    out["state"] = delivery.state
    out["corrections"] = [
        _plain({f.name: getattr(c, f.name) for f in fields(c)}) for c in delivery.corrections
    ]
    return out


def _read_out(result: ReadResult) -> ReadOut:
    return {
        "outcome": str(result.outcome),
        "scope": result.scope,
        "claim_key": result.claim_key,
        "at": result.at.isoformat(),
        "value": _plain(result.value),
        "records": [record_out(r) for r in result.records],
    }


def _explain_out(explanation: Explanation) -> ExplainOut:
    return {
        "outcome": str(explanation.outcome),
        "scope": explanation.scope,
        "claim_key": explanation.claim_key,
        "at": explanation.at.isoformat(),
        "entries": [
            {"record": record_out(e.record), "usable": e.usable, "reasons": list(e.reasons)}
            for e in explanation.entries
        ],
    }


def _audit_out(trail: AuditTrail) -> AuditOut:
    return {
        "record": record_out(trail.record),
        "events": [
            {
                "position": e.position,
                "type": e.type,
                "at": e.at.isoformat(),
                "actor": e.actor,
                "details": _plain(e.details),
            }
            for e in trail.events
        ],
        "undeclared": list(trail.undeclared),
    }


def _revocation_out(rev: Revocation) -> RevocationOut:
    return {
        "root": rev.root,
        "affected": list(rev.affected),
        "stale": list(rev.stale),
        "hidden": rev.hidden,
        "position": rev.position,
    }


def record_uri(record_id: str) -> str:
    """The resource URI of a record."""
    return RECORD_URI.format(record_id=record_id)


# -- refusals -----------------------------------------------------------------------------


def _refusal(exc: LedgerError) -> str:
    return f"{type(exc).__name__}: {exc}"


@contextmanager
def _as_tool_error() -> Iterator[None]:
    """A ``LedgerError`` becomes a tool error the model reads (the SDK would hide it)."""
    try:
        yield
    except LedgerError as exc:
        raise ToolError(_refusal(exc)) from None


# -- one connection, one run -----------------------------------------------------------------


def _usable(view: RecordView) -> bool:
    """Whether a record may be relied on now (ACCEPTED, and it and its ancestors unexpired)."""
    return view.status == Status.ACCEPTED and view.validity == Validity.VALID


class _Connection:
    """One MCP connection: the token's session and, from its first read or proposal
    on, its run (so what it reads is observed on what it proposes).

    Two rules keep a long connection from a dead end, where the core's run would
    refuse every later proposal because an observed dependency is no longer usable
    (TEMPORARY until the run applies them itself; see :meth:`shown`):

    - a record shown as not usable (a candidate, stale, revoked, superseded or
      expired; by explain_memory, get_record, list_records, the resource) is no
      basis for anything and is not observed;
    - once the connection is shown that a record it read is no longer usable, it
      knows: its run ends and a new one carries on with its other reads.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self._lock = threading.Lock()
        self._stack = ExitStack()
        self._run: RunContext | None = None
        self._runless = False

    def _start(self) -> RunContext:
        return self._stack.enter_context(self.session.run(f"mcp-{secrets.token_hex(8)}"))

    def acting(self) -> RunContext | Session:
        """The run, started now if this is the connection's first read or proposal.

        A token holding neither ``propose`` nor ``read`` anywhere cannot start a run;
        its calls go to the session (and are refused there by role), as do calls
        made after the connection closed.
        """
        with self._lock:
            if self._run is None and not self._runless:
                try:
                    self._run = self._start()
                except AccessDeniedError:
                    self._runless = True
            return self._run if self._run is not None else self.session

    def shown(self, views: Iterable[RecordView]) -> None:
        """Record in the run the usable records among those just shown; if one the run
        read before is shown no longer usable, renew the run without it.

        TEMPORARY: ``RunContext.explain/get/records`` record every record shown, and
        a proposal in a run is refused while any observed dependency is REVOKED,
        REJECTED, STALE or SUPERSEDED, so one look at a withdrawn record (the
        explanation after a MISSING, the list of what needs attention), or one
        revocation of something read earlier, would block every later proposal of
        the connection, evidence captures included.
        """
        acting = self.acting()
        if not isinstance(acting, RunContext):
            return
        withdrawn = set()
        for view in views:
            if _usable(view):
                acting.observe(view.id)
            elif view.id in acting.reads:
                withdrawn.add(view.id)
        if withdrawn:
            self._renew(acting, withdrawn)

    def _renew(self, old: RunContext, withdrawn: set[str]) -> None:
        """End ``old`` and go on in a new run that has observed ``old``'s other reads."""
        with self._lock:
            if self._run is not old:
                return
            self._stack.close()
            self._stack = ExitStack()
            self._run = run = self._start()
        for rid in old.reads:
            if rid not in withdrawn:
                try:
                    run.observe(rid)
                except LedgerError:  # no longer visible: nothing can rest on it now
                    continue

    @property
    def run_id(self) -> str | None:
        """The current run's id once started."""
        return None if self._run is None else self._run.run_id

    def close(self) -> None:
        """End the run (recorded as completed)."""
        with self._lock:
            self._runless = True
            run, self._run = self._run, None
            try:
                self._stack.close()
            except LedgerError as exc:  # the ledger closed first: the run stays open in the log
                log.warning("could not end run %s: %s", run.run_id if run else "-", exc)


def _connection(ctx: Context[_Connection, Any]) -> _Connection:
    return ctx.request_context.lifespan_context


def _lifespan(
    session: Session,
) -> Callable[[MCPServer[_Connection]], AbstractAsyncContextManager[_Connection]]:
    @asynccontextmanager
    async def lifespan(_server: MCPServer[_Connection]) -> AsyncIterator[_Connection]:
        connection = _Connection(session)
        try:
            yield connection
        finally:
            # Shielded: a client that drops the connection still ends its run.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(connection.close)

    return lifespan


async def _off_loop(fn: Callable[[], T]) -> T:
    """Run a blocking ledger call on a worker thread (as the SDK does for sync tools)."""
    return await anyio.to_thread.run_sync(fn)


async def _announce(ctx: Context[_Connection, Any], record_ids: Iterable[str]) -> None:
    """Tell listening clients these records' resources changed."""
    for rid in dict.fromkeys(record_ids):
        await ctx.notify_resource_updated(record_uri(rid))


def _view_if_readable(session: Session, record_id: str) -> RecordView | None:
    """The record's view, or None when the token may act on it but not read it."""
    try:
        return session.get(record_id)
    except AccessDeniedError:
        return None


# -- the tools ----------------------------------------------------------------------------

_CANDIDATE_NOTE = (
    "A CANDIDATE: not memory yet. read_memory will not return it until an approver who is "
    "not you accepts it."
)


def _proposal(connection: _Connection, record_id: str) -> ProposalOut:
    view = _view_if_readable(connection.session, record_id)
    return {
        "id": record_id,
        "status": str(Status.CANDIDATE),
        "note": _CANDIDATE_NOTE,
        "run_id": connection.run_id,
        "record": None if view is None else record_out(view),
    }


def capture_evidence(
    ctx: Context[_Connection, Any],
    scope: Scope,
    uri: Annotated[str, Field(description="Where the content was read (URL, path, API call).")],
    content: Annotated[
        str,
        Field(
            description="The exact content read, as text (or base64 with "
            "content_encoding='base64'). It is stored and pinned by its sha256 hash."
        ),
    ],
    content_encoding: Annotated[
        Literal["utf-8", "base64"],
        Field(description="How `content` is given: 'utf-8' text (default) or 'base64' bytes."),
    ] = "utf-8",
    fetched_at: Annotated[
        datetime | None,
        Field(description="When it was read, ISO 8601 with a timezone; default now."),
    ] = None,
    claim_key: Annotated[
        str | None, Field(description="The key it answers; default 'source:<uri>'.")
    ] = None,
    expires: Expires = None,
    conditions: Conditions = None,
    id: NewId = None,
    value: Annotated[
        Any, Field(description="What the evidence says, as a JSON value; default its hash.")
    ] = None,
) -> ProposalOut:
    """The ``capture_evidence`` tool: :meth:`Session.capture` in the connection's run."""
    connection = _connection(ctx)
    with _as_tool_error():
        if content_encoding == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except binascii.Error as exc:
                raise InvalidInputError(f"content is not valid base64: {exc}") from None
        else:
            try:
                data = content.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidInputError(f"content is not valid text: {exc.reason}") from None
        record_id = connection.acting().capture(
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
    ctx: Context[_Connection, Any],
    scope: Scope,
    claim_key: ClaimKey,
    value: Annotated[
        Any,
        Field(
            description="The claim itself: any JSON value (text, number, boolean, null, "
            "array or object). Text that is itself a JSON array, object or null is taken as "
            "that value."
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
            "CONFLICT, and what was built on the old one becomes STALE."
        ),
    ] = None,
) -> ProposalOut:
    """The ``propose_memory`` tool: :meth:`Session.propose` in the connection's run."""
    connection = _connection(ctx)
    replaces: dict[str, Any] = {} if supersedes is None else {"supersedes": supersedes}
    with _as_tool_error():
        record_id = connection.acting().propose(
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


def read_memory(
    ctx: Context[_Connection, Any],
    scope: Scope,
    claim_key: ClaimKey,
    at: At = None,
    context: ReadContext = None,
    kinds: Kinds = None,
) -> ReadOut:
    """The ``read_memory`` tool: :meth:`Session.read`, recorded in the run."""
    with _as_tool_error():
        result = (
            _connection(ctx).acting().read(scope, claim_key, at=at, context=context, kinds=kinds)
        )
        return _read_out(result)


def explain_memory(
    ctx: Context[_Connection, Any],
    scope: Scope,
    claim_key: ClaimKey,
    at: At = None,
    context: ReadContext = None,
    kinds: Kinds = None,
) -> ExplainOut:
    """The ``explain_memory`` tool: :meth:`Session.explain`, recorded in the run."""
    with _as_tool_error():
        connection = _connection(ctx)
        explanation = connection.session.explain(
            scope, claim_key, at=at, context=context, kinds=kinds
        )
        connection.shown(e.record for e in explanation.entries)
        return _explain_out(explanation)


def get_record(ctx: Context[_Connection, Any], record_id: RecordId) -> RecordOut:
    """The ``get_record`` tool: :meth:`Session.get`, recorded in the run."""
    connection = _connection(ctx)
    with _as_tool_error():
        view = connection.session.get(record_id)
        connection.shown([view])
        return record_out(view)


def list_records(
    ctx: Context[_Connection, Any],
    scope: Scope,
    status: Annotated[
        str | None,
        Field(
            description="Only records in this status; 'CANDIDATE' is the review queue.",
            json_schema_extra=_one_of(Status),
        ),
    ] = None,
    validity: Annotated[
        str | None,
        Field(
            description="Only records of this validity: 'NEEDS_REVALIDATION' is what is "
            "not (or no longer) verified - candidates, records flagged STALE by a revocation, "
            "expired ones; 'VALID' what may be relied on; 'INVALID' what was revoked or "
            "rejected.",
            json_schema_extra=_one_of(Validity),
        ),
    ] = None,
    kind: Annotated[
        str | None,
        Field(
            description="Only records of this kind.",
            json_schema_extra=_one_of(Kind),
        ),
    ] = None,
    claim_prefix: Annotated[
        str | None, Field(description="Only records whose claim key starts with this.")
    ] = None,
    limit: Annotated[int, Field(description="At most this many records.", ge=1, le=1000)] = 100,
    after: Annotated[
        str | None,
        Field(description="The `next_after` of the previous page, to get the next one."),
    ] = None,
) -> PageOut:
    """The ``list_records`` tool: one page of :meth:`Session.records`, recorded in the run."""
    with _as_tool_error():
        connection = _connection(ctx)
        page = connection.session.records(
            scope,
            status=status,
            validity=validity,
            kind=kind,
            claim_prefix=claim_prefix,
            limit=limit,
            after=after,
        )
        connection.shown(page)
    records = [record_out(r) for r in page]
    return {
        "records": records,
        "next_after": records[-1]["id"] if len(records) == limit else None,
    }


def audit_record(ctx: Context[_Connection, Any], record_id: RecordId) -> AuditOut:
    """The ``audit_record`` tool: :meth:`Session.audit`."""
    with _as_tool_error():
        return _audit_out(_connection(ctx).session.audit(record_id))


async def accept_memory(
    ctx: Context[_Connection, Any], record_id: RecordId, note: Note = ""
) -> DecisionOut:
    """The ``accept_memory`` tool: :meth:`Session.accept`; announces the record."""
    session = _connection(ctx).session
    with _as_tool_error():
        await _off_loop(partial(session.accept, record_id, note=note))
        view = await _off_loop(partial(_view_if_readable, session, record_id))
    replaced = None if view is None else view.supersedes
    await _announce(ctx, [record_id, *([replaced] if replaced else [])])
    return {
        "id": record_id,
        "action": "accepted",
        "record": None if view is None else record_out(view),
    }


async def reject_memory(
    ctx: Context[_Connection, Any], record_id: RecordId, reason: Reason
) -> DecisionOut:
    """The ``reject_memory`` tool: :meth:`Session.reject`; announces the record."""
    session = _connection(ctx).session
    with _as_tool_error():
        await _off_loop(partial(session.reject, record_id, reason))
        view = await _off_loop(partial(_view_if_readable, session, record_id))
    await _announce(ctx, [record_id])
    return {
        "id": record_id,
        "action": "rejected",
        "record": None if view is None else record_out(view),
    }


async def revoke_memory(
    ctx: Context[_Connection, Any], record_id: RecordId, reason: Reason
) -> RevocationOut:
    """The ``revoke_memory`` tool: :meth:`Session.revoke`; announces what it affected."""
    session = _connection(ctx).session
    with _as_tool_error():
        rev = await _off_loop(partial(session.revoke, record_id, reason))
    # ``affected`` holds only what this token may see: hidden records are never named.
    await _announce(ctx, list(rev.affected))
    return _revocation_out(rev)


async def revalidate_memory(
    ctx: Context[_Connection, Any],
    record_id: RecordId,
    note: Note = "",
    parents: Annotated[
        list[str] | None,
        Field(
            description="A new basis: ids of usable records replacing the record's "
            "dependencies. Omit when its current dependencies are usable again."
        ),
    ] = None,
) -> DecisionOut:
    """The ``revalidate_memory`` tool: :meth:`Session.revalidate`; announces the record."""
    session = _connection(ctx).session
    with _as_tool_error():
        await _off_loop(partial(session.revalidate, record_id, note=note, parents=parents))
        view = await _off_loop(partial(_view_if_readable, session, record_id))
    await _announce(ctx, [record_id])
    return {
        "id": record_id,
        "action": "revalidated",
        "record": None if view is None else record_out(view),
    }


def _read_tool(title: str) -> ToolAnnotations:
    return ToolAnnotations(
        title=title, read_only_hint=True, idempotent_hint=True, open_world_hint=False
    )


def _write_tool(title: str, *, destructive: bool) -> ToolAnnotations:
    return ToolAnnotations(
        title=title,
        read_only_hint=False,
        destructive_hint=destructive,
        idempotent_hint=False,
        open_world_hint=False,
    )


#: (tool, description for the model, annotations) of the tools every token gets.
TOOLS: tuple[tuple[Callable[..., Any], str, ToolAnnotations], ...] = (
    (
        capture_evidence,
        "Store the exact content you read from an outside source (web page, file, API "
        "response) as an `evidence` record pinned to its bytes: sha256 content hash, fetch "
        "time, snapshot. Do this before proposing a claim that rests on the source, then name "
        "the returned id in that claim's `parents`. The evidence is a CANDIDATE until an "
        "approver accepts it, and claims resting on it cannot be accepted before it is. Its "
        "claim key defaults to 'source:<uri>'.",
        _write_tool("Capture evidence", destructive=False),
    ),
    (
        propose_memory,
        "Propose something to remember: a `value` answering `claim_key` in `scope`, of a "
        "`kind`, naming in `parents` the records it rests on. The result is a CANDIDATE, NOT "
        "memory yet: read_memory will not return it until an approver accepts it, and its "
        "proposer (you) never can. What you read in this session is attached as observed "
        "dependencies, so if any of it is revoked later this record is flagged STALE too. To "
        "replace an earlier record for the same claim, pass its id as `supersedes` instead of "
        "proposing a rival value (two accepted values for one claim are a CONFLICT). Refused "
        "when a parent is unknown, outside your scopes, or not usable (REVOKED, REJECTED, "
        "STALE, SUPERSEDED); and when a record you read in this session has been withdrawn "
        "since: look at it (get_record or explain_memory), then propose again.",
        _write_tool("Propose a memory", destructive=False),
    ),
    (
        read_memory,
        "Look up what is known for `claim_key` in `scope`: the memory you may rely on. Only "
        "ACCEPTED, unexpired records whose every ancestor is accepted and unexpired, and whose "
        "conditions match `context`, count. outcome FOUND: the usable records agree; `value` "
        "is the answer. MISSING: nothing is usable now - which does not mean nothing was ever "
        "said: a record may be a CANDIDATE awaiting approval, STALE, REVOKED, expired or "
        "conditioned on another context; explain_memory says which. CONFLICT: usable records "
        "disagree; all are returned and none wins - do not pick one silently. What this "
        "returns is recorded as read in this session and becomes an observed dependency of "
        "what you propose next.",
        _read_tool("Read memory"),
    ),
    (
        explain_memory,
        "Say, record by record, why each record for `claim_key` in `scope` is or is not "
        "usable: a candidate awaiting approval, rejected, revoked (with the reason), stale "
        "because something it rests on was revoked, an ancestor expired, a condition your "
        "`context` does not match. Use it when read_memory answers MISSING or CONFLICT, and "
        "before proposing a replacement. The usable records it shows are recorded as read in "
        "this session.",
        _read_tool("Explain a claim"),
    ),
    (
        get_record,
        "Fetch one record by id, whatever its status: value, kind, status (CANDIDATE, "
        "ACCEPTED, REJECTED, STALE, REVOKED, SUPERSEDED), validity (VALID, NEEDS_REVALIDATION, "
        "INVALID), parents, observed dependencies, conditions, expiry, evidence details and "
        "deliveries. A status is not permission to rely on it: read_memory decides that. An "
        "unknown id and an id in a scope you cannot see give the same error. If it is usable, "
        "it is recorded as read in this session.",
        _read_tool("Get a record"),
    ),
    (
        list_records,
        "List the records of `scope`, a page at a time, ordered by id, optionally filtered: "
        "status='CANDIDATE' is the review queue; status='STALE' what a revocation flagged for "
        "re-verification; validity='NEEDS_REVALIDATION' everything not (or no longer) "
        "verified - candidates, stale and expired records; or by `kind` or `claim_prefix`. "
        "Pass the returned `next_after` as `after` for the next page (null on the last "
        "page). A listed record is not necessarily usable: read_memory decides what you may "
        "rely on. The usable records listed are recorded as read in this session.",
        _read_tool("List records"),
    ),
    (
        audit_record,
        "The whole history of one record, event by event (proposed, accepted, rejected, "
        "revoked, marked stale, revalidated, delivered, corrected), with who did it, when and "
        "why - revoked records included - and the dependencies observed at run time but not "
        "declared as parents (`undeclared`). Needs the audit role in the record's scope.",
        _read_tool("Audit a record"),
    ),
)

#: The tools of a token holding ``approve`` in some scope.
APPROVAL_TOOLS: tuple[tuple[Callable[..., Any], str, ToolAnnotations], ...] = (
    (
        accept_memory,
        "Approve a CANDIDATE so it becomes ACCEPTED memory that read_memory returns. Only an "
        "approver may accept, never the record's own proposer, and every record it rests on "
        "must already be ACCEPTED and unexpired. Look at it first (get_record, audit_record): "
        "what it claims and what it rests on. If it supersedes an older record, the older one "
        "becomes SUPERSEDED and what was built on that one STALE.",
        _write_tool("Accept a candidate", destructive=False),
    ),
    (
        reject_memory,
        "Decline a CANDIDATE: it becomes REJECTED for good (kept in the history, never "
        "returned by read_memory). The `reason` is recorded and shown by explain_memory and "
        "audit_record. Never by the record's own proposer.",
        _write_tool("Reject a candidate", destructive=True),
    ),
    (
        revoke_memory,
        "Withdraw a record found to be wrong (a source changed or was retracted, a claim was "
        "disproved): it becomes REVOKED, and every record built on it - through declared "
        "parents and observed reads - becomes STALE (needs re-verification), in one step, with "
        "this revocation and `reason` as the cause. Nothing is deleted. Returns the records "
        "affected that you can see. Cannot be undone: a record revoked stays revoked.",
        _write_tool("Revoke a record", destructive=True),
    ),
    (
        revalidate_memory,
        "Return a STALE record to use after re-verifying it: it becomes ACCEPTED again (a "
        "stale record that was never accepted returns to CANDIDATE). Without `parents` every "
        "current dependency must be usable again; with `parents`, a new basis of usable "
        "records replaces its dependencies. Records built on it stay STALE until each is "
        "revalidated itself. Never by the record's own proposer.",
        _write_tool("Revalidate a stale record", destructive=False),
    ),
)


def _record_resource(ctx: Context[_Connection, Any], record_id: str) -> str:
    """One record as JSON (what get_record returns); recorded as read in the run."""
    connection = _connection(ctx)
    try:
        view = connection.session.get(record_id)
        connection.shown([view])
    except UnknownRecordError as exc:
        raise ResourceNotFoundError(_refusal(exc)) from None
    except LedgerError as exc:
        raise ResourceError(_refusal(exc)) from None
    return json.dumps(record_out(view), ensure_ascii=False)


# -- the server ---------------------------------------------------------------------------


def _held_roles(ledger: Ledger, session: Session) -> dict[str, tuple[str, ...]]:
    """TEMPORARY until the core has ``Session.grants()``: the roles the session's
    principal holds now, by scope, read from the host's access history (the server's
    process opened the ledger, so it is the host)."""
    held: dict[str, set[str]] = {}
    for change in ledger.admin().access_history(subject=session.principal):
        if change.revoked_position is None:
            held.setdefault(change.scope, set()).add(change.role)
    return {scope: tuple(sorted(roles)) for scope, roles in sorted(held.items())}


def build_server(ledger: Ledger, token: str) -> MCPServer[_Connection]:
    """An MCP server acting as the principal of ``token`` on ``ledger``.

    The approval tools are listed only when the token holds ``approve`` in some
    scope when the server is built; every call is checked against the token's grants
    at that moment anyway. The caller keeps ``ledger`` open while the server runs.

    Raises:
        AuthenticationError: the token is unknown, revoked or expired.
    """
    session = ledger.authenticate(token)
    roles = _held_roles(ledger, session)
    server: MCPServer[_Connection] = MCPServer(
        "provledger",
        title="provledger memory",
        instructions=INSTRUCTIONS,
        version=__version__,
        lifespan=_lifespan(session),
        # A refused tool call is an answer to the model, not an operator's concern.
        log_level="WARNING",
    )
    approves = any(Role.APPROVE.value in held for held in roles.values())
    for fn, description, hints in TOOLS + (APPROVAL_TOOLS if approves else ()):
        server.add_tool(
            fn,
            name=fn.__name__,
            title=hints.title,
            description=description,
            annotations=hints,
            structured_output=True,
        )
    server.resource(
        RECORD_URI,
        name="record",
        title="A provledger record",
        description="One record as JSON, whatever its status (the result of get_record). "
        "A usable record read this way is recorded as read in this connection's run.",
        mime_type="application/json",
    )(_record_resource)
    return server


def serve(
    ledger: Ledger,
    token: str,
    *,
    transport: Literal["stdio", "streamable-http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
) -> None:
    """Run :func:`build_server` until the client disconnects (stdio) or the process
    is stopped (streamable HTTP at ``http://HOST:PORT/mcp``).

    Raises:
        AuthenticationError: the token is unknown, revoked or expired.
    """
    server = build_server(ledger, token)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
