"""The JSON API under ``/api/v1`` (SPEC §13.4): one small handler per route.

Each handler reads its inputs through a :class:`~ledger.serve.call.Call` (which
remembers the fields it was given, so a refusal can name the offending one), makes one
library call on the session of the request's bearer token, and returns JSON.
The ledger's calls block on the database, so each handler's body runs in a
worker thread. Errors become ``{"error": {"type", "message", "field"}}`` with
the status of :data:`ledger.serve.errors.STATUS`.
"""

from __future__ import annotations

import base64
import binascii
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ledger import Ledger, Session
from ledger.access import Role
from ledger.answers import MAX_ANSWER_BYTES, explained_limit, page_within, size_of
from ledger.diagram import to_dot, to_mermaid
from ledger.domain import Kind, Status, Validity
from ledger.errors import (
    ConcurrencyError,
    GraphTooLargeError,
    InvalidParentError,
    InvalidTransitionError,
    LedgerError,
    RenderBusyError,
)
from ledger.graph import (
    MAX_SERVED_NODES,
    RENDER_TIMEOUT,
    Subgraph,
    check_drawable,
    collect,
    dot_available,
    render,
    revocations,
)
from ledger.jsonable import EXPLAINED, json_safe
from ledger.serve import payloads
from ledger.serve.call import Call, path_parameters
from ledger.serve.errors import error_body, field_of, masked, status_of, told
from ledger.serve.inputs import (
    FieldError,
    MediaTypeError,
    Refused,
    bearer_token,
    check_json_body,
    check_names,
    check_no_token,
    check_once,
    check_utf8,
    json_type,
    loads_strict,
    parse_body,
)
from ledger.serve.paging import after_id, after_position
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
    elif isinstance(exc, DependencyConflict):
        name, found, status = exc.reported, exc.field, 409
    elif isinstance(exc, InvalidParentError) and not {"parents", "supersedes"} & set(fields):
        # The state of a record's dependencies (accept a record whose parent is a
        # CANDIDATE), not a dependency the request named: a conflict, not bad input.
        name, found, status = type(exc).__name__, None, 409
    else:
        name, found = type(exc).__name__, field_of(exc, fields, paths)
    headers: dict[str, str] | None = None
    if status == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="provledger"'}
    elif isinstance(exc, ConcurrencyError | RenderBusyError):  # nothing was done: send it again
        headers = {"Retry-After": "1"}
    found = None if found is None else masked(found)  # a parameter's name may be a token
    return json_response(error_body(name, told(exc, url), found, exc), status, headers)


class DependencyConflict(LedgerError):
    """A record the request named (a parent, the version it supersedes) that the
    caller can see but that is not usable now (REVOKED, STALE, a CANDIDATE, …):
    409 naming the field, reported as the library's error (``reported``). The same
    request may succeed once that record's state changes; an id unknown to the
    caller (or hidden from it, which must look the same) stays bad input, 422."""

    def __init__(self, exc: LedgerError, field_name: str) -> None:
        super().__init__(str(exc))
        self.reported = type(exc).__name__
        self.field = field_name


Handler = Callable[[Call], Response]


def endpoint(
    ledger: Ledger,
    handler: Handler,
    accepted: tuple[frozenset[str], frozenset[str]],
    template: str = "",
) -> Callable[[Request], Awaitable[Response]]:
    """An ASGI endpoint running ``handler`` in a worker thread, errors as JSON;
    ``accepted``: the query parameters and body fields it takes (any other is
    refused before anything runs: a misspelt ``parents`` must not lose provenance);
    ``template``: its path under the application (``/api/v1/records/{record_id}``).

    A request is checked in this order, the first failure answering:

    1. the token (401), before a byte of the body is read: a caller without a
       known token makes the server hold none of it (a body whose
       ``Content-Length`` is over the limit is refused 413 earlier still by
       :class:`ledger.serve.app.BodyLimit`, which reads and drops up to 16 MiB of
       it first, keeping none, so that the client reads the answer);
    2. the body, read now: over the limit as it streams (413), coded or declared
       as another media type than JSON or in a charset where it reads otherwise
       than in UTF-8 (415), not a strict JSON object (422);
    3. the query string and the path, UTF-8 once percent-decoded; then the names
       the route does not take, and a query parameter given twice (422);
    4. the handler (its library call's refusals: 403, 404, 409, 422, …).

    The token is checked, and the body parsed, in worker threads: never on the
    event loop, where an unknown caller's work would hold up every other request.
    """

    async def run(request: Request) -> Response:
        write = request.method == "POST"
        live: tuple[str, Session] | None = None
        raw = b""
        if write:
            try:
                live = await finish_in_thread(lambda: _authenticated(ledger, request))
            except LedgerError as exc:
                return ledger_error_response(exc, url=ledger.url)
            raw = await request.body()

        def guarded() -> Response:
            try:
                token, session = live or _authenticated(ledger, request)
                body: Mapping[str, Any] = {}
                if write:
                    check_json_body(request.headers, raw)
                    body = parse_body(raw)
                check_utf8(request.scope.get("query_string", b""))
                check_no_token(request.query_params.multi_items())
                path = path_parameters(template, request.scope.get("raw_path"), request.path_params)
                check_names(request.query_params.keys(), accepted[0], "query parameter")
                check_once(request.query_params.multi_items())
                check_names(body.keys(), accepted[1], "field")
            except LedgerError as exc:
                return ledger_error_response(exc, url=ledger.url)
            call = Call(ledger, token, path, request.query_params, body)
            call.authenticated = session
            try:
                return handler(call)
            except LedgerError as exc:
                exc = call.unknown_then(exc)
                return ledger_error_response(exc, tuple(call.used), tuple(call.path), ledger.url)

        return await finish_in_thread(guarded, write=write)

    run.__name__ = handler.__name__
    run.__doc__ = handler.__doc__
    return run


def _authenticated(ledger: Ledger, request: Request) -> tuple[str, Session]:
    """The request's bearer token and its session (named in the access log).

    Raises:
        AuthenticationError: no token, or one unknown, revoked or expired.
    """
    token = bearer_token(request.headers)
    session = ledger.authenticate(token)
    request.state.principal = session.principal
    return token, session


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
    call.require("scope", "claim_key", "value", "kind")
    kwargs: dict[str, Any] = {}
    if call.has("supersedes"):
        kwargs["supersedes"] = call.body_str("supersedes")
    parents = call.body_list("parents") or ()
    try:
        record_id = session.propose(
            scope=call.body_str("scope", required=True),
            claim_key=call.body_str("claim_key", required=True),
            value=call.body_any("value", required=True),
            kind=call.body_str("kind", required=True),
            parents=parents,
            expires=call.body_time("expires"),
            conditions=call.body_object("conditions"),
            id=call.body_str("id"),
            **kwargs,
        )
    except (InvalidParentError, InvalidTransitionError) as exc:
        raise _named_conflict(exc, session, parents, kwargs.get("supersedes")) from None
    return _created(record_id, session)


#: Statuses a record can no longer be superseded from.
_FINAL = (Status.REVOKED, Status.REJECTED, Status.SUPERSEDED)


def _named_conflict(
    exc: LedgerError, session: Session, parents: Sequence[str], supersedes: str | None = None
) -> LedgerError:
    """``exc`` as a :class:`DependencyConflict` (409) when it refuses a record the
    request named that the caller can see, in a state that stops it now: a parent
    the library found not usable (:attr:`InvalidParentError.dependency`), or a
    ``supersedes`` in a final status; else ``exc`` as it is (422: an unknown or
    hidden id, a cycle, a rule such as a basis's conditions)."""
    if isinstance(exc, InvalidTransitionError):
        if supersedes is not None and _status_of(session, supersedes) in _FINAL:
            return DependencyConflict(exc, "supersedes")
        return exc
    if isinstance(exc, InvalidParentError) and exc.dependency is not None and parents:
        return DependencyConflict(exc, "parents")
    return exc


def _status_of(session: Session, record_id: str) -> Status | None:
    """``record_id``'s status as the caller sees it now; None if it cannot (unknown,
    hidden, not readable, an id of the wrong shape)."""
    try:
        return session.get(record_id).status
    except LedgerError:
        return None


def capture(call: Call) -> Response:
    """Capture evidence: store the bytes and propose an ``evidence`` record."""
    session = call.session()
    call.require("scope", "uri")
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
    after = call.query_str("after")
    views = page_within(
        session, scope, limit, after, filters, deliveries_listed=payloads.DELIVERIES_LISTED
    )
    following = next_after(session, scope, views, len(views) or 1, **filters)
    return json_response(payloads.stamped(session, payloads.records_page(views, following)))


def get_record(call: Call) -> Response:
    """One record with its status, validity and deliveries."""
    session = call.session()
    return json_response(payloads.stamped(session, payloads.record(session.get(call.path_id()))))


def list_deliveries(call: Call) -> Response:
    """One page of a record's deliveries, in the order they were recorded (a
    record's answer lists only its most recent ones)."""
    session = call.session()
    limit = call.query_int("limit", minimum=1, maximum=MAX_LIMIT) or 100
    after = call.query_str("after")
    view = session.get(call.path_id())
    then = "" if session.position is None else f" as of position {session.position}"
    of = f"a delivery of {view.id}{then}"
    page, following = after_id(view.deliveries, lambda d: d.delivery_id, limit, after, of)
    answer = payloads.deliveries_page(view.id, page, len(view.deliveries), following)
    return json_response(payloads.stamped(session, answer))


def audit_record(call: Call) -> Response:
    """One page of a record's history (needs ``audit``): its events in log order."""
    session = call.session()
    limit = call.query_int("limit", minimum=1, maximum=MAX_LIMIT) or MAX_LIMIT
    after = call.query_int("after", minimum=0)
    trail = session.audit(call.path_id())
    events, following = after_position(trail.events, lambda e: e.position, limit, after)
    return json_response(payloads.stamped(session, payloads.audit(trail, events, following)))


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
        check_json_size(sub, record_id)
        return json_response(payloads.stamped(session, payloads.graph(sub)))
    revoked = revocations(session, sub)  # drawn as `provledger graph` draws them
    if fmt == "mermaid":
        return Response(to_mermaid(sub, revoked), media_type=_MEDIA["mermaid"])
    source = to_dot(sub, revoked)
    if fmt == "dot":
        return Response(source, media_type=_MEDIA["dot"])
    if not dot_available():
        message = "Graphviz's dot program is not installed on the server; ask for format=dot"
        return json_response(error_body("GraphvizMissing", message, "format"), 503)
    try:
        check_drawable(sub)
    except GraphTooLargeError as exc:
        raise FieldError(
            "format",
            f"the graph has {exc.count} edges; format=svg draws at most {exc.limit}. Ask for "
            "format=dot, json or mermaid, one direction (ancestors=false or "
            "descendants=false) or a record further along; or draw it on the ledger's "
            f"machine: provledger graph {record_id} --format svg",
        ) from None
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


def check_json_size(sub: Subgraph, record_id: str) -> None:
    """Refuse a graph whose JSON would pass :data:`MAX_ANSWER_BYTES`: its records
    carry their values, and a thousand of them can be a gigabyte (with as many
    edges as each rests on; an edge counted at ``{"parent", "child", "edge"}``'s
    40 bytes of JSON besides its three names).

    Raises:
        FieldError: naming ``format`` and what to ask for instead.
    """
    sizes = (size_of(node, payloads.DELIVERIES_LISTED) for node in sub.nodes)
    edges = (len(e.parent) + len(e.child) + len(e.edge) + 40 for e in sub.edges)
    size = 0
    for part in itertools.chain(sizes, edges):
        size += part
        if size > MAX_ANSWER_BYTES:
            raise FieldError(
                "format",
                f"the graph's {len(sub.nodes)} records and {len(sub.edges)} edges come to "
                "more than "
                f"{MAX_ANSWER_BYTES // (1024 * 1024)} MiB of JSON, their values included; "
                "format=json returns at most that. Ask for format=dot or mermaid (no values), "
                "one direction (ancestors=false or descendants=false) or a record further "
                f"along; or draw it on the ledger's machine: provledger graph {record_id} "
                "--format dot",
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
    scopes: list[str] = []
    if len(result.affected) > MAX_SERVED_NODES:  # the answer's note says where the rest are
        # Every scope the caller lists (those left out may be in any of them), not
        # those of the records listed, which may all be of one scope.
        scopes = sorted(s for s, roles in session.grants().items() if Role.READ.value in roles)
    return json_response(payloads.revocation(result, scopes))


def revalidate(call: Call) -> Response:
    """STALE → ACCEPTED after re-verification, optionally on a new basis."""
    session = call.session()
    record_id = call.path_id()
    parents = call.body_list("parents")
    try:
        session.revalidate(record_id, note=call.body_str("note", default=""), parents=parents)
    except InvalidParentError as exc:
        if parents is None:
            raise  # its own dependencies: a conflict naming no field (ledger_error_response)
        raise _named_conflict(exc, session, parents) from None
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
    answer = payloads.read_result(result, session.position)
    return json_response(payloads.stamped(session, answer))


def explain(call: Call) -> Response:
    """Per record, why it is or is not usable for ``(scope, claim_key)``: the usable
    records as a read lists them and at most ``limit`` others, with how many of
    each were left out."""
    session = call.session()
    # The usable records as a read lists them, and as many others as fit beside them
    # in MAX_ANSWER_BYTES of JSON.
    scope = call.query_str("scope", required=True) or ""
    claim_key = call.query_str("claim_key", required=True) or ""
    limit = call.query_int("limit", minimum=1, maximum=MAX_LIMIT) or EXPLAINED
    asked: dict[str, Any] = {"at": call.query_time("at"), "context": _context(call)}
    asked["kinds"] = _kinds(call)
    cap = payloads.DELIVERIES_LISTED
    limit = explained_limit(session, scope, claim_key, limit, cap, **asked)
    result = session.explain(scope, claim_key, limit=limit, **asked)
    answer = payloads.explanation(result, MAX_LIMIT, session.position)
    return json_response(payloads.stamped(session, answer))


def corrections(call: Call) -> Response:
    """Deliveries that owe a correction (scopes where the caller holds ``deliver`` or
    ``audit``), or those of one record (``record_id``)."""
    session = call.session()
    limit = call.query_int("limit", minimum=1, maximum=MAX_LIMIT) or MAX_LIMIT
    after = call.query_int("after", minimum=0)
    due = session.corrections_due(call.query_str("record_id"))
    page, following = after_position(due, lambda d: d.delivery.position, limit, after)
    answer = {"corrections": [payloads.correction_due(d) for d in page], "next_after": following}
    return json_response(payloads.stamped(session, answer))


def deliver(call: Call) -> Response:
    """Record that a usable record left the system (to ``recipient`` by ``channel``)."""
    session = call.session()
    record_id = call.path_id()
    delivery_id = session.deliver(
        record_id,
        recipient=call.body_str("recipient", required=True),
        channel=call.body_str("channel", default="email"),
    )
    answer = {"delivery_id": delivery_id, "record_id": record_id}
    return json_response(answer, 201, {"Location": f"{PREFIX}/records/{record_id}"})


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
    ("GET", "/records/{record_id}/deliveries", list_deliveries),
    ("GET", "/records/{record_id}/audit", audit_record),
    ("GET", "/records/{record_id}/graph", graph_record),
    ("POST", "/records/{record_id}/accept", accept),
    ("POST", "/records/{record_id}/reject", reject),
    ("POST", "/records/{record_id}/revoke", revoke),
    ("POST", "/records/{record_id}/revalidate", revalidate),
    ("POST", "/records/{record_id}/deliveries", deliver),
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
            ledger, handler, accepted_inputs(doc, method, path), PREFIX + path
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
    """The API's answer for a path it does not serve (a token in it masked)."""
    return json_response(error_body("NotFound", masked(f"no API route {path!r}")), 404)


def method_not_allowed(
    method: str, path: str, headers: Mapping[str, str] | None = None
) -> Response:
    """The API's answer for a method a path does not take (``headers``: the
    ``Allow`` header naming the methods it does take, which a 405 must carry); a
    token in the path is masked."""
    return json_response(
        error_body("MethodNotAllowed", masked(f"{method} is not allowed on {path!r}")),
        405,
        headers,
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
