"""The MCP server: its instructions for a model, the tool table (each tool's
description and annotations) and :func:`build_server` / :func:`serve`."""

from __future__ import annotations

import difflib
import json
import signal
from collections import OrderedDict
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager, nullcontext, suppress
from typing import Any, Literal

import anyio
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.stdio import stdio_server
from mcp.types import (
    CallToolResult,
    InputRequiredResult,
    ListToolsResult,
    TextContent,
    ToolAnnotations,
)
from mcp.types import Tool as MCPTool
from pydantic import ValidationError
from pydantic.networks import AnyUrl

from ledger import Ledger, __version__
from ledger.access import Role, mask_tokens
from ledger.errors import InvalidInputError, LedgerError
from ledger.graph import MAX_SERVED_NODES
from ledger.integrations.mcp.arguments import argument_errors, make_tool, non_finite
from ledger.integrations.mcp.connection import (
    SESSIONS,
    Connections,
    lifespan_of,
    refusal,
    session_key,
)
from ledger.integrations.mcp.hints import NEW_RUN
from ledger.integrations.mcp.http import serve_http
from ledger.integrations.mcp.results import ECHOED_VALUE_BYTES, RECORD_URI, USABLE_LISTED
from ledger.integrations.mcp.stdio import Answering, Stopping, serve_stdio, strict_stdin
from ledger.integrations.mcp.tools import (
    accept_memory,
    audit_record,
    capture_evidence,
    explain_memory,
    get_record,
    list_records,
    propose_memory,
    read_evidence,
    read_memory,
    record_resource,
    reject_memory,
    revalidate_memory,
    revoke_memory,
)
from ledger.jsonable import EXPLAINED
from ledger.persistence.urls import without_location
from ledger.validation import echoed, listed

__all__ = ["APPROVAL_TOOLS", "INSTRUCTIONS", "TOOLS", "build_server", "serve"]


#: How the SDK's refusal of a tool it does not know begins.
_UNKNOWN_TOOL = "Unknown tool: "


class LedgerServer(MCPServer[Connections]):
    """The SDK's server, strict about arguments: a tool's input schema admits no
    other properties, and a call naming an argument the tool does not take is
    refused naming it (the SDK would drop it, so a misspelt ``parent`` would
    silently lose provenance)."""

    #: Each tool's argument names, read from the schemas on the first call.
    _takes: dict[str, frozenset[str]] | None = None
    #: The role each tool listed only to a principal holding it somewhere needs
    #: (the approval tools ``approve``), and the roles
    #: the principal holds in some scope now (asked at each listing: grants change
    #: while a server runs).
    _needs: dict[str, str] = {}
    _held: Callable[[], frozenset[str]] | None = None
    #: Per session that listed the tools, the tools of ``_needs`` it was shown.
    _listed: OrderedDict[str | None, frozenset[str]] | None = None
    #: The tools it was given, by name.
    given: dict[str, Tool] = {}
    #: The URL of the ledger it serves, as messages show it (left out of refusals).
    ledger_url: str | None = None
    #: Its sessions' connections, while it runs (set by its lifespan).
    connections: Connections | None = None
    #: What a tool's work or a resource read holds a turn of while it runs, if
    #: anything (``provledger serve`` gives its writes' limit: the work writes).
    work_limit: Callable[[], AbstractAsyncContextManager[Any]] | None = None

    def list_while(self, needs: dict[str, str], held: Callable[[], frozenset[str]]) -> None:
        """List each tool of ``needs`` only while ``held()`` (asked at each listing:
        the roles the principal holds in some scope) holds the role it names; a
        session that listed the tools is told when that list has changed (the
        ``notifications/tools/list_changed`` after its next call, its
        capabilities saying ``tools.listChanged``)."""
        self._needs, self._held = dict(needs), held
        self._listed = OrderedDict()
        lowlevel = self._lowlevel_server
        capabilities = lowlevel.get_capabilities

        def told_of_changes(options: NotificationOptions | None = None, *a: Any, **k: Any) -> Any:
            options = options or NotificationOptions()
            options.tools_changed = True
            return capabilities(options, *a, **k)

        lowlevel.get_capabilities = told_of_changes  # type: ignore[method-assign,assignment]

    async def _handle_list_tools(self, ctx: Any, params: Any) -> ListToolsResult:
        """The SDK's answer to ``tools/list``, noting which tools of ``needs`` the
        session was shown."""
        answer: ListToolsResult = await super()._handle_list_tools(ctx, params)
        if (listed := self._listed) is not None:
            key = session_key(ctx)
            listed[key] = frozenset(t.name for t in answer.tools if t.name in self._needs)
            listed.move_to_end(key)
            while len(listed) > SESSIONS:
                listed.popitem(last=False)
        return answer

    async def _tell_if_tools_changed(self, context: Context[Connections, Any] | None) -> None:
        """Tell the session of ``context`` that its tools changed, if the tools of
        ``needs`` the principal may use now are not those it was last shown (a
        grant of ``approve`` given or withdrawn meanwhile)."""
        listed = self._listed
        if context is None or listed is None:
            return
        key = session_key(context.request_context)
        if (shown := listed.get(key)) is None:  # (it never listed them)
            return
        held = await anyio.to_thread.run_sync(self._held or frozenset)
        now = frozenset(name for name, role in self._needs.items() if role in held)
        if now != shown:  # told as far as it can be: a call is never failed for it
            listed[key] = now
            with suppress(Exception):  # a client gone, or of a later protocol
                await context.request_context.session.send_tool_list_changed()
            with suppress(Exception):  # its listeners, on the later protocols
                await context.notify_tools_changed()

    async def list_tools(self) -> list[MCPTool]:
        """Every tool the principal may use now (the approval tools only while it
        holds ``approve`` somewhere), its input schema closed to other arguments."""
        tools = await super().list_tools()
        if self._held is not None:
            held = await anyio.to_thread.run_sync(self._held)
            needs = self._needs
            tools = [t for t in tools if t.name not in needs or needs[t.name] in held]
        for tool in tools:
            tool.input_schema = {**tool.input_schema, "additionalProperties": False}
        return tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Connections, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Call ``name`` (:meth:`_call_tool`); a refusal names the ledger without its
        location (:func:`~ledger.persistence.urls.without_location`: the clients of
        ``provledger serve``'s endpoint are not its operator)."""
        try:
            async with self._turn():
                result = await self._call_tool(name, arguments, context)
        except ToolError as exc:
            await self._tell_if_tools_changed(context)
            text = mask_tokens(without_location(str(exc), self.ledger_url))
            if str(exc) == _UNKNOWN_TOOL + name:
                text = await self._unknown_tool(name)
            if text == str(exc):
                raise
            raise ToolError(text) from None
        await self._tell_if_tools_changed(context)
        return result

    async def _unknown_tool(self, name: str) -> str:
        """The SDK's refusal of a tool it does not know (its name echoed as any
        refusal echoes what it was sent), with the tools the principal may use now
        and the closest of them to ``name``: a model that misspelt one learns what
        to call instead."""
        names = [tool.name for tool in await self.list_tools()]
        close = difflib.get_close_matches(name[:100], names, n=1)
        guess = f" Did you mean {close[0]}?" if close else ""
        said = mask_tokens(echoed(name))
        return f"{_UNKNOWN_TOOL}{said}.{guess} The tools are: {', '.join(names)}."

    def _turn(self) -> AbstractAsyncContextManager[Any]:
        """A turn of :attr:`work_limit`, or nothing to wait for."""
        return nullcontext() if self.work_limit is None else self.work_limit()

    async def read_resource(
        self, uri: AnyUrl | str, context: Context[Connections, Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        """Read ``uri`` under a turn of :attr:`work_limit` (reading a record
        records it in the run, a write)."""
        async with self._turn():
            return await super().read_resource(uri, context)

    async def _call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Connections, Any] | None
    ) -> CallToolResult | InputRequiredResult:
        """Refuse arguments ``name`` does not take, then call it (text given for an
        argument that takes text kept as that text: :class:`.TextAsSent`)."""
        takes = (await self._arguments()).get(name)
        for argument, given in self._passed_on(name, arguments).items():
            where = non_finite(given, argument)
            if where is not None:
                # JSON has no infinity (Python's reader takes it, and reads 1e400 as
                # one): it would be stored as a number and shown back as the text
                # "inf". A place whose keys are long is cut as any echoed text is.
                shown = echoed(where)
                raise ToolError(
                    f"Error executing tool {name}: "
                    + refusal(
                        InvalidInputError(
                            f"{shown} is not a finite number (Infinity and NaN are not JSON)"
                        )
                    )
                )
        if takes is not None:
            unknown = sorted(set(arguments) - takes)
            if unknown:
                # Worded as the SDK words a tool's refusal; each name cut as any
                # echoed text is (a refusal must not hand back what it was sent).
                named = listed(unknown)
                raise ToolError(
                    f"Error executing tool {name}: "
                    + refusal(
                        InvalidInputError(
                            f"{name} takes no argument {named}; its arguments are "
                            + ", ".join(sorted(takes))
                        )
                    )
                )
        try:
            result = await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            # The SDK's text is pydantic's (its model's name, a link, the wrappers
            # of arguments): say which argument is wrong and why, in the ledger's words.
            raise ToolError(
                f"Error executing tool {name}: "
                + refusal(InvalidInputError(argument_errors(exc.__cause__)))
            ) from None
        if isinstance(result, CallToolResult) and result.structured_content is not None:
            # The text most clients hand the model: the structured result as compact
            # JSON (the SDK indents it, a page of records half as long again).
            text = json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))
            result.content = [TextContent(type="text", text=text)]
        return result

    def _passed_on(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``arguments`` as the tool ``name`` is handed them: text given for an
        argument that takes no text read as the JSON it spells (``conditions`` sent
        as '{"a": Infinity}'), as the SDK reads it (:class:`.TextAsSent`)."""
        tool = self.given.get(name)
        return arguments if tool is None else tool.fn_metadata.pre_parse_json(arguments)

    async def run_stdio_async(self, stopping: Stopping | None = None) -> None:
        """Serve over stdio as the SDK does, but answer a line the SDK cannot read
        with a JSON-RPC error instead of dropping it (:class:`Answering`), a line
        that is not UTF-8 included (:func:`strict_stdin`; the SDK would read it with
        U+FFFD in place of each byte that is no UTF-8); and with ``stopping``, end
        at a stop signal once the calls under way are answered."""
        # Standard input is read in place, not moved off fd 0 as the SDK moves it:
        # nothing the server runs reads standard input. Standard output is still
        # the SDK's, moved off fd 1 so stray output cannot reach the client.
        async with stdio_server(stdin=strict_stdin(stopping)) as (read_stream, write_stream):
            # The SDK's own ``run_stdio_async``, with the streams wrapped.
            lowlevel = self._lowlevel_server
            reading = Answering(read_stream, write_stream, stopping)
            await lowlevel.run(reading, reading.answers, lowlevel.create_initialization_options())

    async def _arguments(self) -> dict[str, frozenset[str]]:
        """Each tool's argument names, read from its schema once (the tools are all
        added before the server serves)."""
        known = self._takes
        if known is None:
            known = {
                tool.name: frozenset(tool.input_schema.get("properties", {}))
                for tool in await super().list_tools()
            }
            self._takes = known
        return known


INSTRUCTIONS = f"""\
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
of claims you derive from it; read_evidence gives the stored content back, checked.
- To change what is remembered, propose the new value with supersedes=<the old record's \
id>; two accepted values for one claim are a CONFLICT.
- When a record is revoked, everything built on it becomes STALE (needs \
re-verification) and is no longer returned; list_records with \
validity=NEEDS_REVALIDATION shows what needs attention.
- This connection is one run: what you are shown (read, explained, fetched or listed) \
is recorded, and what you propose carries the usable records among it as observed \
dependencies. A record you were last shown not usable is not one of them.
- A write whose answer did not arrive (a timeout, a cancelled call, a dropped \
connection) may still have been written: a cancelled call waiting for the ledger is \
not withdrawn. Give capture_evidence and propose_memory your own `id`, so that a retry \
of a call already written is refused as a duplicate (DuplicateRecordError naming that \
id) instead of creating a second record; a decision retried once written is refused \
by the record's new status (get_record shows it).
- Results leave out what is empty: a field that would be null, and a record's empty \
list or object (no `parents` means none). A write's result gives a value longer \
than {ECHOED_VALUE_BYTES} bytes of JSON by its size and hash (get_record gives it).
"""


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
        "claim key defaults to 'source:<uri>'. Capturing a `uri` captured before with "
        "different content makes a new version of that source: once it is accepted, the "
        "earlier capture is SUPERSEDED and what rests on it becomes STALE. Like a proposal, "
        "it carries the usable records this session was shown as observed dependencies: if "
        "one is revoked or superseded the capture becomes STALE (an approver revalidates it "
        "with parents=[]), and a new version of that record (`supersedes`) cannot rest on "
        "it: capture a source that may replace a memory before reading that memory.",
        _write_tool("Capture evidence", destructive=False),
    ),
    (
        propose_memory,
        "Propose something to remember: a `value` answering `claim_key` in `scope`, of a "
        "`kind`, naming in `parents` the records it rests on. The result is a CANDIDATE, NOT "
        "memory yet: read_memory will not return it until an approver accepts it, and its "
        "proposer (you) never can. The usable records this session was shown (read, "
        "explained, fetched or listed; not audited) are attached as its observed "
        "dependencies, but not one you were last shown not usable: if one is revoked later "
        "this record is flagged STALE too, and it expires no later than the earliest-expiring "
        "of them (`effective_expires`). To replace an earlier record for the same claim, "
        "pass its id as `supersedes` instead of proposing a rival value (two accepted values "
        "for one claim are a CONFLICT). Refused when a parent is unknown, outside your "
        "scopes, or not usable (REVOKED, REJECTED, STALE, SUPERSEDED); and when a record "
        "you read in this session has been withdrawn since: look at it (get_record or "
        "explain_memory), then propose again. If you can "
        "no longer read a record this session read (your access was withdrawn), what you "
        "propose here may rest on it, so every proposal of this session is refused: "
        f"{NEW_RUN}.",
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
        "disagree; none wins - do not pick one silently. `records` lists the usable records, "
        f"at most {USABLE_LISTED} (fewer past 4 MiB; a CONFLICT's values first), `omitted` "
        "counts the rest and `note` says how to page through them. Every usable record, "
        "listed or not, is recorded as read in this session and becomes an observed "
        "dependency of what you propose next.",
        _read_tool("Read memory"),
    ),
    (
        explain_memory,
        "Say, record by record, why each record for `claim_key` in `scope` is or is not "
        "usable: a candidate awaiting approval, rejected, revoked (with the reason), stale "
        "because something it rests on was revoked, an ancestor expired, a condition your "
        "`context` does not match. Use it when read_memory answers MISSING or CONFLICT, and "
        "before proposing a replacement. The usable records are shown (at most "
        f"{USABLE_LISTED}, as read_memory lists them), and at most `limit` others (default "
        f"{EXPLAINED}): it picks those once accepted before candidates and "
        "rejected ones, each the most recently changed first, and lists `entries` in the order "
        "they were proposed. `omitted` counts the rest (`usable_omitted` of them usable) and "
        "`note` says how to see them. Every usable record, shown or not, becomes an observed "
        "dependency of what you propose in this session.",
        _read_tool("Explain a claim"),
    ),
    (
        get_record,
        "Fetch one record by id, whatever its status: value, kind, status (CANDIDATE, "
        "ACCEPTED, REJECTED, STALE, REVOKED, SUPERSEDED), validity (VALID, NEEDS_REVALIDATION, "
        "INVALID), parents, observed dependencies, conditions, expiry, evidence details and "
        "deliveries. A status is not permission to rely on it: read_memory decides that. An "
        "unknown id and an id in a scope you cannot see give the same error. If it is usable, "
        "it becomes an observed dependency of what you propose in this session.",
        _read_tool("Get a record"),
    ),
    (
        list_records,
        "List the records of `scope`, a page at a time, ordered by id, optionally filtered: "
        "status='CANDIDATE' is the review queue; status='STALE' what a revocation flagged for "
        "re-verification; validity='NEEDS_REVALIDATION' everything not (or no longer) "
        "verified - candidates, stale and expired records; or by `kind` or `claim_prefix`. "
        "Pass the returned `next_after` as `after` for the next page (absent on the last "
        "page). A listed record is not necessarily usable: read_memory decides what you may "
        "rely on. The usable records listed become observed dependencies of what you propose "
        "in this session.",
        _read_tool("List records"),
    ),
    (
        read_evidence,
        "Read back the exact content an evidence record pins (what capture_evidence "
        "stored), checked against its sha256 hash first: to quote a source, or to check "
        "what a claim rests on before relying on it or proposing from it. Text comes back "
        "as text (content_encoding 'utf-8'), other bytes as base64. Refused for a record "
        "that pins no captured content, and when an administrator erased the bytes. The "
        "record becomes an observed dependency of what you propose in this session if it "
        "is usable.",
        _read_tool("Read evidence"),
    ),
    (
        audit_record,
        "The whole history of one record, event by event (proposed, accepted, rejected, "
        "revoked, marked stale, revalidated, delivered, corrected), with who did it, when and "
        "why - revoked records included - and the dependencies observed at run time but not "
        "declared as parents (`undeclared`). Needs the audit role in the record's scope. "
        "Events come in log order, 100 at a time unless `limit` says otherwise; "
        "`next_after`, when present, is the `after` of the next page.",
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
        f"affected that you can see (the first {MAX_SERVED_NODES} ids, with the counts; "
        "list_records with status='STALE' in each scope pages through the rest). Cannot be "
        "undone: a record "
        "revoked stays revoked.",
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


# -- the server ---------------------------------------------------------------------------


def build_server(ledger: Ledger, token: str) -> MCPServer[Connections]:
    """An MCP server acting as the principal of ``token`` on ``ledger``.

    The approval tools are listed only while the token's principal holds
    ``approve`` in some scope (asked at each listing); every call is checked
    against the token's grants at that moment anyway. The caller keeps
    ``ledger`` open while the server runs.

    Raises:
        AuthenticationError: the token is unknown, revoked or expired.
    """
    return _ledger_server(ledger, token)


def _ledger_server(ledger: Ledger, token: str) -> LedgerServer:
    """:func:`build_server`'s server, as its class."""
    session = ledger.authenticate(token)
    tools = [make_tool(fn, description, hints) for fn, description, hints in TOOLS + APPROVAL_TOOLS]
    server = LedgerServer(
        "provledger",
        title="provledger memory",
        instructions=INSTRUCTIONS,
        version=__version__,
        lifespan=lifespan_of(session, ledger.url),
        # A refused tool call is an answer to the model, not an operator's concern.
        log_level="WARNING",
        tools=tools,
    )
    server.given = {tool.name: tool for tool in tools}
    server.ledger_url = ledger.url

    def held() -> frozenset[str]:
        try:
            grants = session.grants()
        except LedgerError:  # the token ended: no tool will work, none is offered
            return frozenset()
        return frozenset(role for roles in grants.values() for role in roles)

    needs = {fn.__name__: Role.APPROVE.value for fn, _, _ in APPROVAL_TOOLS}
    # audit_record stays listed whatever the grants (SPEC 13.4): it is refused, naming
    # the missing role, to a principal holding ``audit`` nowhere.
    server.list_while(needs, held)
    server.resource(
        RECORD_URI,
        name="record",
        title="A provledger record",
        description="One record as JSON, whatever its status (the result of get_record). "
        "A usable record read this way becomes an observed dependency of what this "
        "connection proposes.",
        mime_type="application/json",
    )(record_resource)
    return server


def serve(
    ledger: Ledger,
    token: str,
    *,
    transport: Literal["stdio", "streamable-http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    allowed_hosts: Iterable[str] = (),
) -> signal.Signals | None:
    """Run :func:`build_server` until the client disconnects (stdio) or the process
    is stopped by SIGINT or SIGTERM (over stdio, or streamable HTTP at
    ``http://HOST:PORT/mcp``, which it says on standard error once it listens, as
    ``provledger serve`` does).

    Over streamable HTTP a request whose ``Host`` header names no loopback
    address, not ``host:port`` and none of ``allowed_hosts`` (``HOST[:PORT]``) is
    refused, whatever ``host`` is bound; a ``host`` that is not loopback is warned
    about on standard error (:mod:`~ledger.integrations.mcp.http`).

    Returns the signal (SIGINT or SIGTERM) that stopped it, once the requests under
    way are answered and every run still open ended (stop signals are handled so
    only when called from the main thread); else None. Over stdio the read of
    standard input under way at a stop is left to its thread, which the
    interpreter waits for at exit: end the process by the signal, as ``provledger
    mcp`` does, or it lives on until the client closes its side.

    Raises:
        AuthenticationError: the token is unknown, revoked or expired.
        InvalidInputError: over streamable HTTP, nothing can listen on ``host:port``,
            or an allowed host is no ``HOST[:PORT]``.
    """
    server = _ledger_server(ledger, token)
    if transport == "stdio":
        stopping = Stopping()
        try:
            return serve_stdio(server.run_stdio_async, stopping)
        except (BrokenPipeError, BaseExceptionGroup) as exc:
            # The client went away before an answer was written (what the call
            # did is in the log, as for any call): its end, as closing stdin is
            # (after a stop signal, still a stop by that signal).
            rest = exc.split(BrokenPipeError)[1] if isinstance(exc, BaseExceptionGroup) else None
            if rest is not None:
                raise rest from None
        return stopping.signal
    from ledger.connections import stop_wait  # uvicorn's, imported only to serve HTTP

    # A stop waits as provledger serve's does, then cancels what is under way.
    wait = stop_wait(ledger.engine.recorder.lock_wait)
    return serve_http(server, host, port, allowed_hosts, wait)
