"""The ASGI application of ``provledger serve``: API, OpenAPI, MCP and console.

``create_app(ledger)`` wires them into one Starlette application:

- ``/api/v1/…``: the JSON API (:mod:`ledger.serve.api`), bearer tokens;
- ``/openapi.json``: its OpenAPI 3.1 description (:mod:`ledger.serve.openapi`);
- ``/healthz``: whether the ledger answers, without a token (:mod:`ledger.serve.health`);
- ``/mcp``: the MCP streamable-HTTP endpoint (:mod:`ledger.serve.mcp_mount`);
- everything else: the review console (:mod:`ledger.serve.console`).

Two pure-ASGI middlewares wrap it all: a request-body limit (413 before the
handler runs when ``Content-Length`` says so, and while streaming otherwise)
and security headers (a strict Content-Security-Policy: the console runs no
script at all).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger.application import Ledger
from ledger.serve import api, health, openapi
from ledger.serve.console import Console
from ledger.serve.errors import error_body, masked
from ledger.serve.mcp_mount import (
    MCP_SESSIONS_PER_TOKEN,
    MCPMount,
    ServerFactory,
    default_factory,
)
from ledger.serve.sessions import SessionStore

#: Largest request body of the API (JSON with a base64 capture of the ledger's
#: default 1 MiB limit fits) and of everything else (console forms).
MAX_API_BODY = 4 * 1024 * 1024
MAX_FORM_BODY = 256 * 1024
#: How much of a refused body is read (and dropped) before the 413 is sent: a
#: client that writes its whole body before reading the answer (Python's
#: ``urllib``) would otherwise meet a reset connection instead of the 413.
DRAIN_BODY = 16 * 1024 * 1024
#: Paths under these are for programs: an error there is JSON, not a console page.
_FOR_PROGRAMS = (api.PREFIX, "/openapi.json", health.PATH)


def for_programs(path: str) -> bool:
    """Whether ``path`` is one of :data:`_FOR_PROGRAMS` or below one."""
    return any(path == root or path.startswith(root + "/") for root in _FOR_PROGRAMS)


_CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)

_DEFAULT: Any = object()


class _TooLarge(Exception):
    pass


class HttpMiddleware:
    """An ASGI middleware that acts on HTTP requests (:meth:`http`) and passes
    everything else (the lifespan) on as it is."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one HTTP request (passing it on to ``self.app``)."""
        raise NotImplementedError


class SlashesInSegments(HttpMiddleware):
    """Route on the path as sent: an encoded slash (``%2F``) stays part of its
    segment, as RFC 3986 has it, rather than splitting it as the decoded path
    would (``/records/M1%2Faudit`` ran the audit of M1, which the access log, a
    proxy's rules and the OpenAPI document took for a record id)."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw: bytes = scope.get("raw_path") or b""
        if b"%2f" in raw.lower():
            segments = raw.decode("latin-1").split("/")
            path = "/".join(unquote(segment).replace("/", "%2F") for segment in segments)
            scope = {**scope, "path": path}
        await self.app(scope, receive, send)


class BodyLimit(HttpMiddleware):
    """Refuse request bodies over the limit with 413 (paths for programs get the JSON
    error body, the console's an HTML page)."""

    def __init__(self, app: ASGIApp, api_limit: int, form_limit: int) -> None:
        super().__init__(app)
        self.api_limit = api_limit
        self.form_limit = form_limit

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        is_api = path.startswith(api.PREFIX) or path.startswith("/mcp")
        limit = self.api_limit if is_api else self.form_limit
        as_json = is_api or for_programs(path)  # the refusal's form: JSON or a page
        declared = dict(scope["headers"]).get(b"content-length")
        # A client that asked to wait (Expect: 100-continue) has sent nothing yet:
        # reading would ask it for the body it is refused.
        waits = dict(scope["headers"]).get(b"expect", b"").lower() == b"100-continue"
        if declared is not None and declared.isdigit() and int(declared) > limit:
            if not waits:
                await _drain(receive, DRAIN_BODY)
            await self._refuse(as_json, limit)(scope, receive, send)
            return
        seen = 0
        started = ended = False

        async def limited_receive() -> Message:
            nonlocal seen, ended
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                ended = not message.get("more_body", False)
                if seen > limit:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if started:
                raise
            if not ended:  # another receive after the last part waits for the client
                await _drain(receive, DRAIN_BODY - seen)
            await self._refuse(as_json, limit)(scope, receive, send)

    @staticmethod
    def _refuse(as_json: bool, limit: int) -> Response:
        message = f"the request body is over the limit of {limit} bytes"
        close = {"Connection": "close"}  # the rest of an undrained body is not read
        if as_json:
            body = error_body("ValueTooLargeError", message)
            return JSONResponse(body, status_code=413, headers=close)
        return HTMLResponse(_TOO_LARGE_PAGE.format(limit=limit), 413, headers=close)


#: The console's answer to a form over the limit: a page of its own (the form's
#: page is not rendered again: the body was not read).
_TOO_LARGE_PAGE = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">'
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
    "<title>Form too large - provledger</title>"
    '<link rel="stylesheet" href="/static/console.css"></head><body><main>'
    "<h1>Form too large</h1>"
    '<p class="flash error" role="alert">What was sent is over the console\'s limit of '
    "{limit:,} bytes, and nothing was written. Go back (your browser keeps what you "
    "typed), shorten it, and send it again.</p>"
    '<p><a href="/">Go to the start page</a></p></main></body></html>'
)


async def _drain(receive: Receive, budget: int) -> None:
    """Read and drop up to ``budget`` bytes of the request body (until its end or
    the client goes)."""
    while budget > 0:
        message = await receive()
        if message["type"] != "http.request":
            return
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return


class SecurityHeaders(HttpMiddleware):
    """Headers every answer carries: CSP, no framing, no sniffing, no caching of pages."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        static = scope["path"].startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                wanted = [
                    (b"content-security-policy", _CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"same-origin"),
                ]
                if not static:
                    wanted.append((b"cache-control", b"no-store"))
                headers += [(k, v) for k, v in wanted if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


#: The logger of :class:`AccessLog`'s lines (``provledger serve`` prints them).
ACCESS_LOGGER = "provledger.access"
_access = logging.getLogger(ACCESS_LOGGER)


class AccessLog(HttpMiddleware):
    """One line per request, as its answer starts: the client, the principal the
    request authenticated as (``-`` when none did), the request line and the
    status. Handlers name the principal in ``request.state.principal``. A request
    cancelled before its answer started (at the end of a stop's wait) is answered
    503, saying so, not with the server's plain-text 500."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = scope.setdefault("state", {})
        started = False

        async def logged(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                client = scope.get("client")
                query = scope.get("query_string", b"").decode("latin-1")
                _access.info(
                    '%s - %s "%s %s HTTP/%s" %d',
                    f"{client[0]}:{client[1]}" if client else "-",
                    state.get("principal") or "-",
                    scope["method"],
                    scope.get("raw_path", scope["path"].encode()).decode("latin-1")
                    + (f"?{query}" if query else ""),
                    scope.get("http_version", "1.1"),
                    message["status"],
                )
            await send(message)

        try:
            await self.app(scope, receive, logged)
        except asyncio.CancelledError:
            if not started:
                await _stopped(scope)(scope, receive, logged)
            raise


def _stopped(scope: Scope) -> Response:
    """The answer to a request cancelled as the server stopped, before it answered:
    its work never began (an API or console write that began is waited for), except
    on ``/mcp``, whose tool calls run apart from the request."""
    outcome = (
        "whether its call was carried out is not known: look before sending it again"
        if scope["path"].startswith("/mcp")
        else "nothing of it was done: send it again"
    )
    message = f"the server stopped before this request was answered; {outcome}"
    if for_programs(scope["path"]):
        return JSONResponse(error_body("ServerStoppedError", message), status_code=503)
    return Response(message + "\n", status_code=503, media_type="text/plain")


def create_app(
    ledger: Ledger,
    *,
    max_body_bytes: int = MAX_API_BODY,
    max_form_bytes: int = MAX_FORM_BODY,
    mcp_factory: ServerFactory | None = _DEFAULT,
    host: str = "127.0.0.1",
    sessions: SessionStore | None = None,
    secure_cookies: bool = False,
    mcp_sessions: int = MCP_SESSIONS_PER_TOKEN,
) -> Starlette:
    """The ``provledger serve`` application over an open ``ledger``.

    Args:
        ledger: the ledger it serves (the caller opens and closes it).
        max_body_bytes: largest request body of ``/api/v1`` and ``/mcp`` (413 above).
        max_form_bytes: largest console form body (413 above).
        mcp_factory: ``build_server(ledger, token)`` for ``/mcp``; by default
            ``ledger.integrations.mcp.build_server`` when installed, else ``/mcp``
            answers 501.
        host: the host the server listens on (the MCP endpoint's DNS-rebinding
            protection allows only loopback names when it is a loopback address).
        sessions: the console's session store (default: a new in-memory one).
        secure_cookies: always mark the session cookie Secure (behind a reverse
            proxy that terminates TLS the server itself only sees http).
        mcp_sessions: open MCP sessions kept per token (503 for more until one
            ends or idles out).
    """
    factory = default_factory() if mcp_factory is _DEFAULT else mcp_factory
    mcp = MCPMount(ledger, factory, host, mcp_sessions)
    console = Console(ledger, sessions, secure_cookies=secure_cookies)
    probe = health.Health(ledger)

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(openapi.document())

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        path = request.url.path
        status = exc.status_code
        if for_programs(path):
            if status == 405:
                return api.method_not_allowed(request.method, path, exc.headers)
            if status != 404:  # a body the server could not read
                body = error_body("BadRequest", masked(f"{exc.detail} ({path!r})"))
                return api.json_response(body, status)
            return api.not_found(path)
        # A token pasted into the address is not shown back (as in every message).
        if status == 404:
            title, message = "Not found", masked(f"There is no page {path!r}.")
        elif status == 405:
            title, message = "Not allowed", masked(f"{request.method} is not allowed on {path!r}.")
        else:  # a form the server could not read: too many fields, a broken body
            title = "The form could not be read"
            message = masked(f"The form sent to {path!r} could not be read: {exc.detail}")
        session = console.viewer(request)
        page = console.render(
            request,
            session,
            "error.html",
            status=status,
            title=title,
            error_type=str(status),
            message=message,
        )
        page.headers.update(exc.headers or {})  # a 405's Allow
        return page

    async def client_gone(request: Request, exc: Exception) -> Response:
        # The request never arrived whole (the client closed the connection, or did
        # not send it in time: ledger.connections answered it 408): nothing ran.
        # The access log says 408, as the client was told, or would have been.
        del request, exc
        return Response(status_code=408)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with mcp.lifespan():
            yield

    routes = [
        Route("/openapi.json", openapi_json),
        Route(health.PATH, probe.endpoint),  # GET and HEAD
        *api.routes(ledger),
        Route("/mcp", mcp),
        Route("/mcp/", mcp),  # as some MCP clients are configured (no redirect: see below)
        *console.routes(),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(AccessLog),
            Middleware(SlashesInSegments),
            Middleware(SecurityHeaders),
            Middleware(BodyLimit, api_limit=max_body_bytes, form_limit=max_form_bytes),
        ],
        exception_handlers={HTTPException: http_error, ClientDisconnect: client_gone},
        lifespan=lifespan,
    )
    # ``/api/v1/records/`` is not a route: answered like any unknown path, not
    # redirected to an address built from the request's Host header.
    app.router.redirect_slashes = False
    app.state.ledger = ledger
    app.state.console = console
    app.state.mcp = mcp
    app.state.health = probe
    return app
