"""One MCP session, one ledger run; and the helpers every tool shares (refusals
as tool errors, blocking calls off the event loop, resource announcements)."""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager, contextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from mcp_types import PARSE_ERROR, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse

from ledger import RunContext, Session
from ledger.access import mask_tokens
from ledger.errors import AccessDeniedError, ConcurrencyError, LedgerError
from ledger.integrations.mcp.hints import Writing, next_step
from ledger.integrations.mcp.results import record_uri
from ledger.integrations.mcp.stdio import given_twice, request_id, twice_message
from ledger.persistence.urls import without_location
from ledger.rules import BLOCKING
from ledger.values import RecordView

__all__ = [
    "Connection",
    "Connections",
    "Ctx",
    "announce",
    "as_tool_error",
    "connection_of",
    "ending_sessions",
    "hinted",
    "lifespan_of",
    "off_loop",
    "refusal",
    "view_if_readable",
]

log = logging.getLogger("ledger.integrations.mcp")

T = TypeVar("T")


# -- refusals -------------------------------------------------------------------------------


def refusal(exc: LedgerError, url: str | None = None) -> str:
    """The text of a refusal: the error's class, then its message, any token in it
    masked and the ledger's location (``url``) left out (the clients of ``provledger
    serve``'s endpoint are not its operator)."""
    return f"{type(exc).__name__}: {mask_tokens(without_location(str(exc), url))}"


@contextmanager
def as_tool_error(
    session: Session | None = None, record_id: str | None = None, writing: Writing | None = None
) -> Iterator[None]:
    """A ``LedgerError`` becomes a tool error the model reads (the SDK would hide
    it), followed by what to do next (:func:`~ledger.integrations.mcp.hints.next_step`:
    ``session`` is the caller's, ``record_id`` the record a decision is about,
    ``writing`` what the call writes)."""
    try:
        yield
    except LedgerError as exc:
        raise ToolError(refusal(exc) + next_step(exc, session, record_id, writing)) from None


def hinted(
    fn: Callable[[], T],
    session: Session,
    record_id: str | None = None,
    writing: Writing | None = None,
) -> Callable[[], T]:
    """``fn`` refused as :func:`as_tool_error` refuses, its hint looked up where it
    runs (for :func:`off_loop`: a hint may read the ledger)."""

    def call() -> T:
        with as_tool_error(session, record_id, writing):
            return fn()

    return call


# -- one connection, one run ------------------------------------------------------------------


class Connection:
    """One MCP connection: the token's session and, from its first read or proposal
    on, its run.

    The run decides what the connection's proposals depend on: every record shown
    through it is recorded, and those shown VALID (last time they were shown)
    become ``observed`` dependencies. A record shown as not usable, or shown
    withdrawn after it was read, is no dependency, so a long connection that has
    looked at what changed never reaches a dead end — unless the token loses
    ``read`` where a record it was shown lives: what it proposes may rest on what
    it can no longer cite, so its proposals are refused until a new connection
    (a new run) starts.
    """

    def __init__(self, session: Session, url: str | None = None) -> None:
        self.session = session
        self.url = url  # the ledger's, left out of refusals (:func:`refusal`)
        # One call at a time on the run: it records what it was shown in order.
        self._lock = threading.Lock()
        self._stack = ExitStack()
        self._run: RunContext | None = None
        self._runless = False

    @contextmanager
    def acting(self, reading: str | None = None) -> Iterator[RunContext | Session]:
        """The run (started now if this is the connection's first read or proposal),
        held for one call; ``reading``: the read tool calling, if one is.

        A token holding neither ``propose`` nor ``read`` anywhere cannot start a run;
        its calls go to the session (and are refused there by role), as do calls
        made after the connection closed and calls on a ledger opened read-only
        (where a run, which is written, cannot start; its reads still answer).

        Raises:
            ConcurrencyError: for a read tool, saying why a read waited for the
                writers' lock (:func:`_recording_waited`).
        """
        with self._lock:
            try:
                if self._run is None and not self._runless and not self.session.read_only:
                    try:
                        run = self.session.run(f"mcp-{secrets.token_hex(8)}")
                        self._run = self._stack.enter_context(run)
                    except AccessDeniedError:
                        self._runless = True
                yield self._run if self._run is not None else self.session
            except ConcurrencyError as exc:
                if reading is None:
                    raise
                raise _recording_waited(reading, exc) from None

    def withdrawn(self) -> list[RecordView]:
        """The records the run was last shown usable that nothing may be built on
        now (revoked, rejected, stale, superseded), as they are now, in the order
        they were read; looked up without recording them in the run. Those the
        token can no longer read are left out (the ledger names them itself)."""
        with self._lock:
            named = () if self._run is None else self._run.relied_on
        found = []
        for name in named:
            try:
                view = self.session.get(name)
            except LedgerError:
                continue
            if view.status in BLOCKING:
                found.append(view)
        return found

    @property
    def run_id(self) -> str | None:
        """The run's id once started."""
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


class Connections:
    """A server's connections, one per MCP session, each with its run (SPEC §13.4:
    one MCP session is one run), so one client's reads are never another's observed
    dependencies: over streamable HTTP each client session (``Mcp-Session-Id`` of
    the 2025 protocol, whose sessions the SDK checks before any tool runs);
    otherwise the server's one connection (stdio's session, an in-process client's;
    a request of the 2026 protocol, which has no sessions, is refused over HTTP by
    :func:`sessions_only`, and a session id it names would pick nothing). A
    session's run ends when its client ends the session (:func:`ending_sessions`),
    when :data:`SESSIONS` later sessions have been used
    since it was last used (one that idled out is never ended by its client), and
    at the latest when the server stops.
    """

    def __init__(self, session: Session, url: str | None = None) -> None:
        self.session = session
        self.url = url
        self._lock = threading.Lock()
        self._by_id: OrderedDict[str, Connection] = OrderedDict()
        self._shared: Connection | None = None

    def of(self, context: Any) -> Connection:
        """The connection a call came on (``context``: its request context), made on
        the session's first call."""
        sid = _session_id(getattr(getattr(context, "request", None), "headers", None))
        with self._lock:
            if sid is None:
                if self._shared is None:
                    self._shared = Connection(self.session, self.url)
                return self._shared
            found = self._by_id.get(sid)
            if found is None:
                found = self._by_id[sid] = Connection(self.session, self.url)
            self._by_id.move_to_end(sid)
            stale = self._by_id.popitem(last=False)[1] if len(self._by_id) > SESSIONS else None
        if stale is not None:  # on a thread of its own: a call on it may be under way
            threading.Thread(target=stale.close, name="provledger-mcp-run-end").start()
        return found

    def end(self, sid: str) -> None:
        """End the run of the session ``sid`` (its client ended it), if it has one."""
        with self._lock:
            connection = self._by_id.pop(sid, None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        """End every run still open (the server stops)."""
        with self._lock:
            still = [*self._by_id.values(), *([self._shared] if self._shared else [])]
            self._by_id.clear()
        for connection in still:
            connection.close()


#: Sessions whose runs a server keeps open at once; the least recently used one's
#: run is ended beyond that.
SESSIONS = 1000


def session_key(context: Any) -> str | None:
    """The MCP session a request (``context``: its request context) came on, as a
    key: its session id over HTTP, None for the one session of stdio."""
    return _session_id(getattr(getattr(context, "request", None), "headers", None))


def _session_id(headers: Any) -> str | None:
    """The 2025 protocol's session id in an HTTP request's ``headers`` (their first
    ``Mcp-Session-Id``, as the SDK reads it), or None (no headers, no id, or a
    request of a later protocol, which has no sessions: the SDK routes it past
    every session check, so an id it names is the client's word only)."""
    if headers is None:
        return None
    version = headers.get("mcp-protocol-version")
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None
    sid = headers.get("mcp-session-id")
    return str(sid) if sid else None


def _recording_waited(tool: str, exc: ConcurrencyError) -> ConcurrencyError:
    """The refusal of a read tool that gave up waiting for the writers' lock: a
    read takes no lock, but the run records what it shows (starting the run
    first, on a connection's first call), and that is a write."""
    return ConcurrencyError(
        f"{tool} records in this connection's run what it shows you (the observed "
        "dependencies of what you propose next), a write that needs the ledger's writers' "
        f"lock: {exc}; nothing was shown or recorded: try again"
    )


#: The request context the tools receive.
Ctx = Context[Connections, Any]


def connection_of(ctx: Ctx) -> Connection:
    """The connection (the MCP session) a tool call came on."""
    context = ctx.request_context
    return context.lifespan_context.of(context)


def lifespan_of(
    session: Session, url: str | None = None
) -> Callable[[MCPServer[Connections]], AbstractAsyncContextManager[Connections]]:
    """The server's lifespan: its :class:`Connections`, every run still open ended
    when the server stops."""

    @asynccontextmanager
    async def lifespan(server: MCPServer[Connections]) -> AsyncIterator[Connections]:
        connections = Connections(session, url)
        server.connections = connections  # type: ignore[attr-defined]  # for ending_sessions
        try:
            yield connections
        finally:
            # Shielded: a client that drops the connection still ends its run.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(connections.close)

    return lifespan


async def off_loop(fn: Callable[[], T]) -> T:
    """Run a blocking ledger call on a worker thread (as the SDK does for sync tools)."""
    return await anyio.to_thread.run_sync(fn)


async def announce(ctx: Ctx, record_ids: Iterable[str]) -> None:
    """Tell listening clients these records' resources changed."""
    for rid in dict.fromkeys(record_ids):
        await ctx.notify_resource_updated(record_uri(rid))


def view_if_readable(session: Session, record_id: str) -> RecordView | None:
    """The record's view (not recorded in the run), or None when the token may act
    on it but not read it."""
    try:
        return session.get(record_id)
    except AccessDeniedError:
        return None


def ending_sessions(app: Any, server: object) -> Any:
    """``app`` (an ASGI app serving ``server`` over streamable HTTP), ending a
    session's run once its client has ended the session (a ``DELETE`` naming it
    that the SDK answered 2xx; one it refused ends nothing)."""

    async def ending(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("method") != "DELETE":
            await app(scope, receive, send)
            return
        status: list[int] = []

        async def sending(message: Any) -> None:
            if message.get("type") == "http.response.start":
                status.append(int(message.get("status", 0)))
            await send(message)

        await app(scope, receive, sending)
        sid = _session_id(Headers(scope=scope))
        connections = getattr(server, "connections", None)
        if sid and status and 200 <= status[0] < 300 and isinstance(connections, Connections):
            await anyio.to_thread.run_sync(connections.end, sid)

    return ending


#: Why a request of a protocol without sessions is refused over HTTP.
SESSIONLESS = (
    "this server keeps each MCP session in a run of its own (what a session is shown "
    "becomes the observed dependencies of what it proposes, and only its own), and "
    "protocol {version} has no sessions, so over HTTP one client's reads would be "
    "another's provenance: connect with the initialize handshake (protocol "
    "{latest}); the MCP Python SDK's Client does so on this answer"
)
#: The most of a refused request's body read to find its JSON-RPC id (an id is
#: near its start; a body is not otherwise read).
_ID_READ = 1 << 16


def sessions_only(app: Any, security: TransportSecuritySettings | None) -> Any:
    """``app`` (an MCP server over streamable HTTP) serving only the protocols with
    sessions (SPEC §13.4: one MCP session is one run). A request naming another
    protocol version (``MCP-Protocol-Version: 2026-07-28``, which has no sessions:
    the SDK would serve every such request of every client in the one run of the
    server) is answered HTTP 400 with JSON-RPC error -32022 (unsupported protocol
    version) naming the versions served; a client negotiating (the MCP Python
    SDK's ``Client``, mode ``auto``) then opens a session with ``initialize``.
    ``security``: the server's checks of ``Host`` and ``Origin`` (against DNS
    rebinding), made first, as the SDK makes them before any other answer."""
    checks = TransportSecurityMiddleware(security)
    once = names_once(app)

    async def serving(scope: Any, receive: Any, send: Any) -> None:
        version = (
            Headers(scope=scope).get("mcp-protocol-version") if scope["type"] == "http" else None
        )
        post = scope.get("method") == "POST"
        if post or (version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS):
            # The SDK's checks of the headers first, before any body is read.
            refused = await checks.validate_request(Request(scope, receive), is_post=post)
            if refused is not None:
                await refused(scope, receive, send)
                return
        if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
            await once(scope, receive, send)
            return
        request_id = await _request_id(receive) if post else None
        latest = HANDSHAKE_PROTOCOL_VERSIONS[-1]
        said = mask_tokens(version[:40])
        error = {
            "code": UNSUPPORTED_PROTOCOL_VERSION,
            "message": SESSIONLESS.format(version=said, latest=latest),
            "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": said},
        }
        answer = JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error}, 400)
        await answer(scope, receive, send)

    return serving


async def _request_id(receive: Any) -> str | int | None:
    """The JSON-RPC id of the request whose body ``receive`` gives (its first
    :data:`_ID_READ` bytes), or None (not JSON, a batch, no id)."""
    body = b""
    while len(body) < _ID_READ:
        message = await receive()
        if message.get("type") != "http.request":
            break
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    body = body[:_ID_READ]
    try:  # (a body cut at the limit is no JSON: no id)
        found = json.loads(body)
    except (ValueError, RecursionError):
        return None
    request_id = found.get("id") if isinstance(found, dict) else None
    ok = isinstance(request_id, str | int) and not isinstance(request_id, bool)
    return request_id if ok else None


def names_once(app: Any) -> Any:
    """``app`` (an MCP server over streamable HTTP), a ``POST`` whose JSON gives a
    name twice in one object answered HTTP 400 with a JSON-RPC parse error naming
    it, as over stdio (the SDK would keep the last value silently: a ``parents``
    given twice, the second empty, would lose the first). The body, read whole as
    the SDK reads it (up to the SDK's limit: a larger one is passed on, for the SDK
    to refuse), is then passed on as it came."""

    async def once(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await app(scope, receive, send)
            return
        parts, message, size = [], {"more_body": True}, 0
        while message.get("more_body", False) and size <= DEFAULT_MAX_REQUEST_BODY_SIZE:
            message = await receive()
            if message.get("type") != "http.request":  # the client went away
                await app(scope, receive, send)
                return
            parts.append(message.get("body", b""))
            size += len(parts[-1])
        body = b"".join(parts)
        whole = not message.get("more_body", False)  # (else over the limit: the SDK's 413)
        line = body.decode("utf-8", "surrogateescape") if whole else ""
        if (twice := given_twice(line)) is not None:
            error = {"code": PARSE_ERROR, "message": twice_message(twice)}
            answer = JSONResponse({"jsonrpc": "2.0", "id": request_id(line), "error": error}, 400)
            await answer(scope, receive, send)
            return
        given = False

        async def again() -> Any:
            nonlocal given
            if given:
                return await receive()
            given = True
            return {"type": "http.request", "body": body, "more_body": not whole}

        await app(scope, again, send)

    return once
