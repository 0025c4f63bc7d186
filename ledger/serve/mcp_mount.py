"""The MCP streamable-HTTP endpoint at ``/mcp``, one MCP server per bearer token.

INTEGRATION POINT: the MCP server itself comes from
``ledger.integrations.mcp.build_server(ledger, token) -> MCPServer`` (SPEC §13.4
"MCP"). Each request's ``Authorization: Bearer`` token is checked with
``Ledger.authenticate`` first; the first request with a token builds that token's
server and starts its session manager in the application's task group (so an
MCP session id only ever reaches the server of the token that opened it). When
that module is not installed, ``/mcp`` answers 501 naming what is missing.

Each token's server keeps at most :data:`MCP_SESSIONS_PER_TOKEN` sessions open
(a further ``initialize`` is answered 503 until one ends or idles out), and a
token refused once (revoked, expired) has its server and sessions dropped: what
one token can make the server hold is bounded, and ends with the token.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from ledger.application import Ledger
from ledger.errors import AuthenticationError, LedgerError, install_hint
from ledger.serve.api import json_response, ledger_error_response
from ledger.serve.errors import error_body
from ledger.serve.inputs import bearer_token, check_no_token, check_uncoded, media_type_of
from ledger.serve.threads import write_limit


class SessionManager(Protocol):
    """What the MCP SDK's ``StreamableHTTPSessionManager`` offers that this mount uses."""

    def run(self) -> AbstractAsyncContextManager[None]: ...

    async def handle_request(self, scope: Scope, receive: Receive, send: Send) -> None: ...


class MCPServerLike(Protocol):
    """The part of ``mcp.server.mcpserver.MCPServer`` this mount uses."""

    def streamable_http_app(
        self,
        *,
        streamable_http_path: str = ...,
        host: str = ...,
        max_sessions: int | None = ...,
        json_response: bool = ...,
    ) -> Any: ...

    @property
    def session_manager(self) -> Any: ...


#: Open MCP sessions one token's server keeps (each holds its streams in memory
#: until it is closed or idle for the SDK's timeout, 30 minutes).
MCP_SESSIONS_PER_TOKEN = 256

#: ``build_server(ledger, token)``: the MCP server acting as that token's principal.
ServerFactory = Callable[[Ledger, str], MCPServerLike]


def default_factory() -> ServerFactory | None:
    """``ledger.integrations.mcp.build_server`` when that module is installed, else None."""
    try:
        from ledger.integrations.mcp import build_server  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    factory: ServerFactory = build_server
    return factory


@dataclass
class _Running:
    manager: SessionManager
    stop: anyio.Event
    #: What answers the token's requests: its manager, ending a session's run once
    #: the client ends the session (``ending_sessions``, when the server has runs).
    handle: Any = None


class MCPMount:
    """ASGI app serving ``/mcp``; :meth:`lifespan` must wrap the server's life."""

    def __init__(
        self,
        ledger: Ledger,
        factory: ServerFactory | None,
        host: str,
        max_sessions: int = MCP_SESSIONS_PER_TOKEN,
    ) -> None:
        self.ledger = ledger
        self.factory = factory
        self.host = host
        self.max_sessions = max_sessions
        self._running: dict[str, _Running] = {}
        self._tasks: TaskGroup | None = None
        self._lock = anyio.Lock()

    @asynccontextmanager
    async def lifespan(self) -> Any:
        """Run the per-token session managers while the application runs."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._tasks = None
                for running in self._running.values():
                    running.stop.set()
                self._running.clear()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if self.factory is None:
            response = json_response(
                error_body(
                    "NotImplemented",
                    "the MCP endpoint needs the MCP SDK, which is not installed; "
                    + install_hint("mcp"),
                ),
                501,
            )
            await response(scope, receive, send)
            return
        token = None
        try:
            token = bearer_token(request.headers)
            session = await run_in_threadpool(self.ledger.authenticate, token)
            request.state.principal = session.principal  # for the access log
            check_uncoded(request.headers)  # the SDK would read it as it came
            media_type_of(request.headers)  # given twice: the SDK reads the first
            check_no_token(request.query_params.multi_items())  # (an address is logged)
        except LedgerError as exc:
            if token is not None and isinstance(exc, AuthenticationError):
                await self._drop(token)
            await ledger_error_response(exc, url=self.ledger.url)(scope, receive, send)
            return
        if self._tasks is None:
            response = json_response(
                error_body(
                    "Unavailable", "the MCP endpoint runs only inside the server's lifespan"
                ),
                503,
            )
            await response(scope, receive, send)
            return
        handle = await self._manager(token)
        await handle(scope, receive, send)

    @staticmethod
    def _key(token: str) -> str:
        return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()

    async def _drop(self, token: str) -> None:
        """Stop the server of a token refused now, closing its sessions."""
        async with self._lock:
            running = self._running.pop(self._key(token), None)
        if running is not None:
            running.stop.set()

    @property
    def servers(self) -> int:
        """How many tokens' servers are running."""
        return len(self._running)

    async def _manager(self, token: str) -> Any:
        key = self._key(token)
        async with self._lock:
            running = self._running.get(key)
            if running is None:
                assert self.factory is not None and self._tasks is not None
                server = await run_in_threadpool(self.factory, self.ledger, token)
                server.streamable_http_app(
                    streamable_http_path="/mcp",
                    host=self.host,
                    max_sessions=self.max_sessions,
                    # A call's answer as one JSON body, not a stream: a stream is
                    # closed at a server's stop, unanswered, while the call goes on.
                    json_response=True,
                )
                manager: SessionManager = server.session_manager
                running = _Running(manager, anyio.Event(), manager.handle_request)
                if hasattr(type(server), "connections"):  # a server with runs
                    from ledger.integrations.mcp.connection import ending_sessions, sessions_only

                    ending = ending_sessions(manager.handle_request, server)
                    security = getattr(manager, "security_settings", None)
                    running.handle = sessions_only(ending, security)
                    # A tool's work (a run records what it shows: a write) in a
                    # worker thread of the pool reads use: under the writes'
                    # limit, calls queued behind a lock held elsewhere leave reads
                    # and pages their threads. The turn is held for the work
                    # alone, not for the request (a body still arriving, a
                    # listening stream, an answer nobody reads hold none).
                    server.work_limit = write_limit  # type: ignore[attr-defined]
                await self._tasks.start(self._serve, running)
                self._running[key] = running
        return running.handle

    @staticmethod
    async def _serve(running: _Running, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with running.manager.run():
            task_status.started()
            await running.stop.wait()
