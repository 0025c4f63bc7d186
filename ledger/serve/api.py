"""The JSON API under ``/api/v1`` (SPEC §13.4): one small handler per route.

Each handler reads its inputs through a :class:`Call` (which remembers the
fields it was given, so a refusal can name the offending one), makes one
library call on the session of the request's bearer token, and returns JSON.
The ledger's calls block on the database, so each handler's body runs in a
worker thread. Errors become ``{"error": {"type", "message", "field"}}`` with
the status of :data:`ledger.serve.errors.STATUS`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ledger import Ledger, Session
from ledger.answers import explanation_within, page_within
from ledger.domain import Kind, Status, Validity
from ledger.errors import ConcurrencyError, GraphTooLargeError, InvalidParentError, LedgerError
from ledger.graph import (
    MAX_SERVED_NODES,
    RENDER_TIMEOUT,
    collect,
    dot_available,
    render,
    revocations,
    to_dot,
    to_mermaid,
)
from ledger.jsonable import EXPLAINED, json_safe
from ledger.serve import payloads
from ledger.serve.errors import error_body, field_of, masked, status_of, told
from ledger.serve.inputs import (
    FieldError,
    MediaTypeError,
    Refused,
    bearer_token,
    check_json_body,
    check_names,
    check_once,
    check_utf8,
    json_type,
    loads_strict,
    parse_body,
    parse_time,
)
from ledger.serve.threads import finish_in_thread
from ledger.session import next_after

PREFIX = "/api/v1"

#: ``GET /records`` returns at most this many records per page, and ``GET /explain``
#: this many records that are not usable (besides every usable one).
MAX_LIMIT = 1000
#: ``GET /records/{id}/graph?format=svg`` draws at most this many records: Graphviz's
#: layout time grows much faster than the graph (500 records: ~15 s of CPU, 1000:
#: minutes), and any reader could otherwise hold a worker thread and a core per request.
MAX_SVG_NODES = 200
#: ``GET /records/{id}/graph`` in a text format (json, dot, mermaid) answers at most
#: this many records (:data:`ledger.graph.MAX_SERVED_NODES`): the answer grows with
#: what is stored, and any reader could otherwise ask for all of it.
MAX_GRAPH_NODES = MAX_SERVED_NODES
#: An integer query parameter with more digits is out of any range a route takes.
_MOST_DIGITS = 30


def json_response(
    data: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """``data`` as a JSON response (UTF-8; an infinity as ``"inf"``: see
    :func:`ledger.jsonable.json_safe`)."""
    return JSONResponse(json_safe(data), status_code=status, headers=dict(headers or {}))


def ledger_error_response(
    exc: LedgerError,
    fields: tuple[str, ...] = (),
    paths: tuple[str, ...] = (),
    url: str | None = None,
) -> Response:
    """The response for a refusal: the table's status and the error body
    (``fields``: the request's fields it used; ``paths``: its path parameters;
    ``url``: the ledger's, left out of the message, :func:`told`)."""
    status = status_of(exc)
    found: str | None
    if isinstance(exc, MediaTypeError):
        name, found, status = "InvalidInputError", None, 415
    elif isinstance(exc, FieldError):
        name, found = "InvalidInputError", exc.field
    elif isinstance(exc, InvalidParentError) and not {"parents", "supersedes"} & set(fields):
        # The state of a record's dependencies (accept a record whose parent is a
        # CANDIDATE), not a dependency the request named: a conflict, not bad input.
        name, found, status = type(exc).__name__, None, 409
    else:
        name, found = type(exc).__name__, field_of(exc, fields, paths)
    headers: dict[str, str] | None = None
    if status == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="provledger"'}
    elif isinstance(exc, ConcurrencyError):  # the lock was held: nothing was written
        headers = {"Retry-After": "1"}
    found = None if found is None else masked(found)  # a parameter's name may be a token
    return json_response(error_body(name, told(exc, url), found), status, headers)


@dataclass
class Call:
    """One API request's inputs, read field by field (each name is remembered);
    its ``repr`` leaves out the token."""

    ledger: Ledger
    token: str = field(repr=False)
    path: Mapping[str, str]
    query: QueryParams
    body: Mapping[str, Any]
    used: list[str] = field(default_factory=list)
    #: The token's session, once the token was checked (None: checked on first use).
    authenticated: Session | None = field(default=None, repr=False)

    # -- the principal ---------------------------------------------------------

    def session(self) -> Session:
        """The token's session, as of a past moment when the query asks for one."""
        session = self.authenticated
        if session is None:
            session = self.ledger.authenticate(self.token)
        position = self.query_int("as_of_position", minimum=0)
        when = self.query_time("as_of_time")
        if position is not None and when is not None:
            raise FieldError("as_of_time", "give as_of_position or as_of_time, not both")
        if position is not None or when is not None:
            session = session.as_of(position=position, time=when)
        return session

    # -- path and query --------------------------------------------------------

    def path_id(self, name: str = "record_id") -> str:
        """A path parameter."""
        self.used.append(name)
        return self.path[name]

    def query_str(self, name: str, *, required: bool = False, empty: bool = False) -> str | None:
        """A query parameter; ``required`` refuses a missing one. An empty one is
        refused unless ``empty`` says it means what leaving it out does (a claim
        prefix): ``as_of_time=`` left blank must not answer as of now, nor
        ``status=`` list every status."""
        value = self.query.get(name)
        if value is None:
            if required:
                raise FieldError(name, f"query parameter {name!r} is required")
            return None
        self.used.append(name)  # a refusal may be about it (never one not given)
        if value == "":
            if empty and not required:
                return None
            leave = "" if required else " or leave it out"
            raise FieldError(name, f"query parameter {name!r} is empty: give a value{leave}")
        return value

    def query_int(
        self, name: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> int | None:
        """An integer query parameter within bounds."""
        text = self.query_str(name)
        if text is None:
            return None
        # Digits only: int() would also read "1_0", "+5", " 5" and other scripts' digits.
        digits = text[1:] if text.startswith("-") else text
        if not (digits.isascii() and digits.isdigit()):
            raise FieldError(name, f"{name} {text[:40]!r} is not an integer")
        significant = digits.lstrip("0") or "0"
        if len(significant) > _MOST_DIGITS:  # int() refuses over 4,300 digits (a 500)
            raise FieldError(name, f"{name} of {len(significant):,} digits is out of range")
        value = -int(significant) if text.startswith("-") else int(significant)
        if minimum is not None and value < minimum:
            bound = f"at least {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            raise FieldError(name, f"{name} {value} is not {bound}")
        if maximum is not None and value > maximum:
            bound = f"at most {maximum}" if minimum is None else f"in {minimum}..{maximum}"
            raise FieldError(name, f"{name} {value} is not {bound}")
        return value

    def query_choice(self, name: str, choices: type[Kind | Status | Validity]) -> str | None:
        """A query parameter naming one member of an enum."""
        text = self.query_str(name)
        allowed = [c.value for c in choices]
        if text is not None and text not in allowed:
            raise FieldError(name, f"{name} {text[:40]!r} is not one of: {', '.join(allowed)}")
        return text

    def query_time(self, name: str) -> datetime | None:
        """An RFC 3339 date-time query parameter (:func:`parse_time`)."""
        return parse_time(name, self.query_str(name))

    def query_bool(self, name: str, default: bool) -> bool:
        """``true``/``false`` (also 1/0, yes/no)."""
        text = self.query_str(name)
        if text is None:
            return default
        lowered = text.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise FieldError(name, f"{name} {text[:40]!r} is not true or false")

    # -- body ------------------------------------------------------------------

    def has(self, name: str) -> bool:
        """Whether the body gives ``name`` (null counts as not given)."""
        return self.body.get(name) is not None

    def body_any(self, name: str, *, required: bool = False) -> Any:
        """A body field of any JSON type."""
        if self.body.get(name) is not None:
            self.used.append(name)  # a refusal may be about it (never one not given)
        if name not in self.body and required:
            raise FieldError(name, f"field {name!r} is required")
        return self.body.get(name)

    def body_str(self, name: str, *, required: bool = False, default: str | None = None) -> Any:
        """A string body field (the ledger checks its content)."""
        value = self.body_any(name, required=required)
        if value is None:
            if required:
                raise FieldError(name, f"field {name!r} must be a string, got null")
            return default
        if not isinstance(value, str):
            raise FieldError(name, f"field {name!r} must be a string, got {json_type(value)}")
        return value

    def body_list(self, name: str) -> list[str] | None:
        """A list-of-strings body field."""
        value = self.body_any(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise FieldError(name, f"field {name!r} must be a list of strings")
        return value

    def _body_of(self, name: str, kind: type, what: str) -> Any:
        """A body field that is null, absent or of JSON type ``what`` (Python ``kind``)."""
        value = self.body_any(name)
        if value is not None and not isinstance(value, kind):
            raise FieldError(name, f"field {name!r} must be {what}, got {json_type(value)}")
        return value

    def body_object(self, name: str) -> dict[str, Any] | None:
        """An object body field."""
        value: dict[str, Any] | None = self._body_of(name, dict, "an object")
        return value

    def body_bool(self, name: str, default: bool) -> bool:
        """A boolean body field (``default`` when absent or null)."""
        value: bool | None = self._body_of(name, bool, "a boolean")
        return default if value is None else value

    def body_time(self, name: str) -> datetime | None:
        """An RFC 3339 date-time body field (:func:`parse_time`)."""
        return parse_time(name, self.body_str(name))


Handler = Callable[[Call], Response]


def endpoint(
    ledger: Ledger, handler: Handler, accepted: tuple[frozenset[str], frozenset[str]]
) -> Callable[[Request], Awaitable[Response]]:
    """An ASGI endpoint running ``handler`` in a worker thread, errors as JSON;
    ``accepted``: the query parameters and body fields it takes (any other is
    refused before anything runs: a misspelt ``parents`` must not lose provenance)."""

    async def run(request: Request) -> Response:
        raw = await request.body() if request.method == "POST" else b""

        def guarded() -> Response:
            # The token is checked before the body is parsed (in this worker thread,
            # never on the event loop): an unknown caller costs no parsing, and is
            # told 401 before anything about its input or the route's names.
            try:
                token = bearer_token(request.headers)
                live = ledger.authenticate(token)
                request.state.principal = live.principal  # for the access log
                body: Mapping[str, Any] = {}
                if request.method == "POST":
                    check_json_body(request.headers, raw)
                    body = parse_body(raw)
                check_utf8(request.scope.get("query_string", b""))
                check_names(request.query_params.keys(), accepted[0], "query parameter")
                check_once(request.query_params.multi_items())
                check_names(body.keys(), accepted[1], "field")
            except LedgerError as exc:
                return ledger_error_response(exc, url=ledger.url)
            call = Call(ledger, token, request.path_params, request.query_params, body)
            call.authenticated = live
            try:
                return handler(call)
            except LedgerError as exc:
                return ledger_error_response(exc, tuple(call.used), tuple(call.path), ledger.url)

        return await finish_in_thread(guarded, write=request.method == "POST")

    run.__name__ = handler.__name__
    run.__doc__ = handler.__doc__
    return run


# -- handlers --------------------------------------------------------------------------


def _created(record_id: str, session: Session) -> Response:
    return json_response(
        _result(record_id, session), 201, {"Location": f"{PREFIX}/records/{record_id}"}
    )


def _result(record_id: str, session: Session) -> dict[str, Any]:
    """The id and, when the caller may read it, the record as it is now."""
    try:
        view = session.get(record_id)
    except LedgerError:
        return {"id": record_id, "record": None}
    return {"id": record_id, "record": payloads.record(view)}


def propose(call: Call) -> Response:
    """Propose a record (a CANDIDATE until an approver accepts it)."""
    session = call.session()
    kwargs: dict[str, Any] = {}
    if call.has("supersedes"):
        kwargs["supersedes"] = call.body_str("supersedes")
    record_id = session.propose(
        scope=call.body_str("scope", required=True),
        claim_key=call.body_str("claim_key", required=True),
        value=call.body_any("value", required=True),
        kind=call.body_str("kind", required=True),
        parents=call.body_list("parents") or (),
        expires=call.body_time("expires"),
        conditions=call.body_object("conditions"),
        id=call.body_str("id"),
        **kwargs,
    )
    return _created(record_id, session)


def capture(call: Call) -> Response:
    """Capture evidence: store the bytes and propose an ``evidence`` record."""
    session = call.session()
    text = call.body_str("content")
    encoded = call.body_str("content_base64")
    if (text is None) == (encoded is None):
        raise FieldError("content", "give exactly one of 'content' (text) or 'content_base64'")
    if encoded is not None:
        try:
            content = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise FieldError("content_base64", "content_base64 is not base64") from None
    else:
        assert text is not None
        try:  # JSON may spell a lone surrogate (\ud800), which no UTF-8 text holds
            content = text.encode("utf-8")
        except UnicodeEncodeError:
            raise FieldError(
                "content", "content is not valid text (a lone surrogate); send content_base64"
            ) from None
    kwargs: dict[str, Any] = {}
    if call.has("value"):
        kwargs["value"] = call.body_any("value")
    record_id = session.capture(
        scope=call.body_str("scope", required=True),
        uri=call.body_str("uri", required=True),
        content=content,
        fetched_at=call.body_time("fetched_at"),
        claim_key=call.body_str("claim_key"),
        expires=call.body_time("expires"),
        conditions=call.body_object("conditions"),
        id=call.body_str("id"),
        **kwargs,
    )
    return _created(record_id, session)


def list_records(call: Call) -> Response:
    """One page of a scope's records, ordered by id."""
    session = call.session()
    limit = call.query_int("limit", minimum=1, maximum=MAX_LIMIT) or 100
    scope = call.query_str("scope", required=True) or ""
    filters: dict[str, Any] = {
        "status": call.query_choice("status", Status),
        "validity": call.query_choice("validity", Validity),
        "kind": call.query_choice("kind", Kind),
        "claim_prefix": call.query_str("claim_prefix", empty=True),
    }
    # At most ``limit``, and stopped before the page passes MAX_ANSWER_BYTES of JSON.
    views = page_within(session, scope, limit, call.query_str("after"), filters)
    following = next_after(session, scope, views, len(views) or 1, **filters)
    return json_response(payloads.records_page(views, following))


def get_record(call: Call) -> Response:
    """One record with its status, validity and deliveries."""
    return json_response(payloads.record(call.session().get(call.path_id())))


def audit_record(call: Call) -> Response:
    """A record's whole history (needs ``audit``)."""
    return json_response(payloads.audit(call.session().audit(call.path_id())))


GRAPH_FORMATS = ("json", "svg", "dot", "mermaid")
_MEDIA = {
    "svg": "image/svg+xml",
    "dot": "text/vnd.graphviz; charset=utf-8",
    "mermaid": "text/plain; charset=utf-8",
}


def graph_record(call: Call) -> Response:
    """A record's dependency subgraph as JSON, SVG, DOT or Mermaid."""
    session = call.session()
    fmt = call.query_str("format") or "json"
    if fmt not in GRAPH_FORMATS:
        raise FieldError("format", f"format {fmt[:40]!r} is not one of: {', '.join(GRAPH_FORMATS)}")
    ancestors = call.query_bool("ancestors", True)
    descendants = call.query_bool("descendants", True)
    record_id = call.path_id()
    limit = MAX_SVG_NODES if fmt == "svg" else MAX_GRAPH_NODES
    try:
        sub = collect(session, record_id, ancestors=ancestors, descendants=descendants, limit=limit)
    except GraphTooLargeError as exc:
        raise FieldError("format", _too_large(exc, fmt, record_id)) from None
    if fmt == "json":
        return json_response(payloads.graph(sub))
    revoked = revocations(session, sub)  # drawn as `provledger graph` draws them
    if fmt == "mermaid":
        return Response(to_mermaid(sub, revoked), media_type=_MEDIA["mermaid"])
    source = to_dot(sub, revoked)
    if fmt == "dot":
        return Response(source, media_type=_MEDIA["dot"])
    if not dot_available():
        message = "Graphviz's dot program is not installed on the server; ask for format=dot"
        return json_response(error_body("GraphvizMissing", message, "format"), 503)
    return Response(render(source, "svg", RENDER_TIMEOUT), media_type=_MEDIA["svg"])


def _too_large(exc: GraphTooLargeError, fmt: str, record_id: str) -> str:
    """Why a graph is refused (its size, the format's cap) and what to ask for instead."""
    instead = ["one direction (ancestors=false or descendants=false)", "a record further along"]
    if fmt == "svg" and exc.count <= MAX_GRAPH_NODES:
        instead.insert(0, "format=dot, json or mermaid")
    verb = "draws" if fmt == "svg" else "returns"
    return (
        f"the graph has {exc.count} records; format={fmt} {verb} at most {exc.limit}. "
        f"Ask for {', '.join(instead[:-1])} or {instead[-1]}; or draw the whole graph on "
        f"the ledger's machine: provledger graph {record_id} --format dot "
        f"--max-nodes {exc.count}"
    )


def accept(call: Call) -> Response:
    """CANDIDATE → ACCEPTED (an approver other than the proposer)."""
    session = call.session()
    record_id = call.path_id()
    session.accept(record_id, note=call.body_str("note", default=""))
    return json_response(_result(record_id, session))


def reject(call: Call) -> Response:
    """CANDIDATE → REJECTED, with a reason."""
    session = call.session()
    record_id = call.path_id()
    session.reject(record_id, reason=call.body_str("reason", required=True))
    return json_response(_result(record_id, session))


def revoke(call: Call) -> Response:
    """Withdraw a record; every descendant becomes STALE."""
    session = call.session()
    result = session.revoke(call.path_id(), reason=call.body_str("reason", required=True))
    return json_response(payloads.revocation(result))


def revalidate(call: Call) -> Response:
    """STALE → ACCEPTED after re-verification, optionally on a new basis."""
    session = call.session()
    record_id = call.path_id()
    session.revalidate(
        record_id, note=call.body_str("note", default=""), parents=call.body_list("parents")
    )
    return json_response(_result(record_id, session))


def _context(call: Call) -> dict[str, Any] | None:
    text = call.query_str("context")
    if text is None:
        return None
    try:
        data = loads_strict(text)
    except Refused as exc:
        raise FieldError("context", f"context {exc}") from None
    except (ValueError, RecursionError):
        raise FieldError("context", "context is not a JSON object") from None
    if not isinstance(data, dict):
        raise FieldError("context", f"context must be a JSON object, got {json_type(data)}")
    return data


def _kinds(call: Call) -> list[str] | None:
    text = call.query_str("kinds")
    if text is None:
        return None
    # An empty item is refused too: "fact," or ",," names no kind (an empty list
    # would filter every record out: MISSING, wrongly).
    kinds = [k.strip() for k in text.split(",")]
    allowed = [k.value for k in Kind]
    for k in kinds:
        if k not in allowed:
            raise FieldError("kinds", f"kind {k[:40]!r} is not one of: {', '.join(allowed)}")
    return kinds


def read(call: Call) -> Response:
    """The eligibility chain's answer for ``(scope, claim_key)``."""
    session = call.session()
    result = session.read(
        call.query_str("scope", required=True) or "",
        call.query_str("claim_key", required=True) or "",
        at=call.query_time("at"),
        context=_context(call),
        kinds=_kinds(call),
    )
    return json_response(payloads.read_result(result))


def explain(call: Call) -> Response:
    """Per record, why it is or is not usable for ``(scope, claim_key)``: every
    usable record and at most ``limit`` others, with how many were left out."""
    session = call.session()
    # Every usable record, and the others stopped before MAX_ANSWER_BYTES of JSON.
    result, _ = explanation_within(
        session,
        call.query_str("scope", required=True) or "",
        call.query_str("claim_key", required=True) or "",
        call.query_int("limit", minimum=1, maximum=MAX_LIMIT) or EXPLAINED,
        at=call.query_time("at"),
        context=_context(call),
        kinds=_kinds(call),
    )
    return json_response(payloads.explanation(result, MAX_LIMIT))


def corrections(call: Call) -> Response:
    """Deliveries that owe a correction (scopes where the caller holds ``deliver``),
    or those of one record (``record_id``)."""
    due = call.session().corrections_due(call.query_str("record_id"))
    return json_response({"corrections": [payloads.correction_due(d) for d in due]})


def issue_correction(call: Call) -> Response:
    """Record a correction for a delivery in the outbox (nothing is sent)."""
    session = call.session()
    delivery_id = call.path_id("delivery_id")
    correction_id = session.issue_correction(
        delivery_id,
        note=call.body_str("note", required=True),
        replacement=call.body_str("replacement"),
        only_if_owed=call.body_bool("only_if_owed", False),
    )
    return json_response({"correction_id": correction_id, "delivery_id": delivery_id}, 201)


#: (method, path under PREFIX, handler): the routes of SPEC §13.4, in its order.
ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("POST", "/records", propose),
    ("POST", "/evidence", capture),
    ("GET", "/records", list_records),
    ("GET", "/records/{record_id}", get_record),
    ("GET", "/records/{record_id}/audit", audit_record),
    ("GET", "/records/{record_id}/graph", graph_record),
    ("POST", "/records/{record_id}/accept", accept),
    ("POST", "/records/{record_id}/reject", reject),
    ("POST", "/records/{record_id}/revoke", revoke),
    ("POST", "/records/{record_id}/revalidate", revalidate),
    ("GET", "/read", read),
    ("GET", "/explain", explain),
    ("GET", "/corrections", corrections),
    ("POST", "/deliveries/{delivery_id}/corrections", issue_correction),
)


def routes(ledger: Ledger) -> list[BaseRoute]:
    """The API's Starlette routes (one per path, methods merged), each taking the
    inputs its OpenAPI operation documents."""
    from ledger.serve.openapi import accepted_inputs, document  # it describes these routes

    doc = document()
    by_path: dict[str, dict[str, Callable[[Request], Awaitable[Response]]]] = {}
    for method, path, handler in ROUTES:
        by_path.setdefault(path, {})[method] = endpoint(
            ledger, handler, accepted_inputs(doc, method, path)
        )
    return [
        Route(PREFIX + path, _dispatch(endpoints), methods=list(endpoints))
        for path, endpoints in by_path.items()
    ]


def _dispatch(
    endpoints: Mapping[str, Callable[[Request], Awaitable[Response]]],
) -> Callable[[Request], Awaitable[Response]]:

    async def dispatch(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await endpoints[method](request)

    return dispatch


def not_found(path: str) -> Response:
    """The API's answer for a path it does not serve."""
    return json_response(error_body("NotFound", f"no API route {path!r}"), 404)


def method_not_allowed(
    method: str, path: str, headers: Mapping[str, str] | None = None
) -> Response:
    """The API's answer for a method a path does not take (``headers``: the
    ``Allow`` header naming the methods it does take, which a 405 must carry)."""
    return json_response(
        error_body("MethodNotAllowed", f"{method} is not allowed on {path!r}"), 405, headers
    )


__all__ = [
    "MAX_GRAPH_NODES",
    "MAX_LIMIT",
    "MAX_SVG_NODES",
    "PREFIX",
    "ROUTES",
    "Call",
    "FieldError",
    "bearer_token",
    "ledger_error_response",
    "routes",
]
