"""The review console: server-rendered pages for the people who approve, revoke and audit.

Pages (Jinja2 templates, no JavaScript): sign-in, the review queue (``/``),
record pages with the dependency picture, the revocation preview, what needs
attention (STALE or expired records, corrections due), a record list and an
explain page. Every page can be viewed as the ledger was at a past log position
or time (``?as_of_position=`` / ``?as_of_time=``; links keep it). Every form
carries the session's CSRF token; every write is POST → redirect → GET with a
message. Ledger calls block, so each page's data is gathered in a worker thread.
What a page shows is built in :mod:`ledger.serve.pages`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ledger import Ledger, Session
from ledger.access import Role
from ledger.domain import Kind, Status, Validity
from ledger.errors import AccessDeniedError, AuthenticationError, InvalidInputError, LedgerError
from ledger.serve import refusals
from ledger.serve.confirming import (
    LISTED,
    PreviewChanged,
    preview_changed,
    reach,
    revocation_preview,
    revoked,
    still_shown,
)
from ledger.serve.errors import status_of, told
from ledger.serve.pages import (
    EXPLAINED,
    HERE,
    Access,
    Moment,
    TypedMoment,
    candidate,
    conflict_after,
    environment,
    explain_line,
    preview_mark,
    replaces,
)
from ledger.serve.pictures import picture
from ledger.serve.refusals import ENDED, REFUSED, TITLES, TYPED_OR_BUSY, refused_write
from ledger.serve.sessions import COOKIE, ConsoleSession, SessionStore, set_cookie
from ledger.serve.threads import finish_in_thread
from ledger.session import next_after
from ledger.validation import asked_key
from ledger.values import RecordView

#: Records shown per page of the queue, the attention list and the record list.
PAGE = 50
#: A path on this site (browsers read ``//host`` and ``/\host`` as another site).
_LOCAL_PATH = re.compile(r"/(?![/\\])[^\s\\]*")


# -- the console -------------------------------------------------------------------------------


Page = Callable[[Request, ConsoleSession], Awaitable[Response]]


#: The query parameters that name a page's moment (see ``pages.Moment``).
_MOMENT = ("as_of_position", "as_of_time")
#: Form fields the console fills in itself (a refused form is given back without them).
_NOT_TYPED = ("csrf", "next", "preview", "scope")


class Console:
    """The console's routes over one ledger and one session store."""

    def __init__(
        self, ledger: Ledger, store: SessionStore | None = None, *, secure_cookies: bool = False
    ) -> None:
        self.ledger = ledger
        self.secure_cookies = secure_cookies
        self.store = store if store is not None else SessionStore()
        self.env = environment()

    # -- plumbing ----------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        """The console's Starlette routes."""
        return [
            Route("/", self._page(self.queue, signed_out=self.signin_page)),
            Route("/signin", self.signin, methods=["POST"]),
            Route("/signout", self._post(self.signout), methods=["POST"]),
            # Typed, bookmarked or reached back through the history (the page of a
            # refused token is at /signin): the start page, changing nothing.
            Route("/signin", self.to_start),
            Route("/signout", self.to_start),
            Route("/records", self._page(self.records)),
            Route("/records/{record_id}", self._page(self.record)),
            Route("/records/{record_id}/accept", self._post(self.accept), methods=["POST"]),
            Route("/records/{record_id}/reject", self._post(self.reject), methods=["POST"]),
            Route("/records/{record_id}/revalidate", self._post(self.revalidate), methods=["POST"]),
            Route("/records/{record_id}/revoke", self._page(self.revoke_preview)),
            Route("/records/{record_id}/revoke", self._post(self.revoke), methods=["POST"]),
            Route("/attention", self._page(self.attention)),
            Route(
                "/deliveries/{delivery_id}/correction",
                self._post(self.issue_correction),
                methods=["POST"],
            ),
            Route("/explain", self._page(self.explain)),
            Route("/snapshots/{ref}", self._page(self.snapshot)),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]

    def _session(self, request: Request) -> tuple[ConsoleSession, bool]:
        """The request's console session, and whether it was made just now."""
        found = self.store.get(request.cookies.get(COOKIE))
        if found is not None:
            request.state.principal = found.principal  # for the access log
            return found, False
        return self.store.new(), True

    def viewer(self, request: Request) -> ConsoleSession:
        """The request's live session, else one that is not kept: for a page whose
        answer sets no cookie (an error page), which must not open sessions that no
        browser will ever send back."""
        found = self.store.get(request.cookies.get(COOKIE))
        if found is None:
            return self.store.passing()
        request.state.principal = found.principal  # for the access log
        return found

    def _set_cookie(self, request: Request, response: Response, session: ConsoleSession) -> None:
        set_cookie(response, session, secure=self.secure_cookies or request.url.scheme == "https")

    def render(
        self,
        request: Request,
        session: ConsoleSession,
        template: str,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        """A page from ``template`` with the header's context."""
        moment = context.pop("moment", None) or Moment()
        refused = session.take_refused()

        def url(path: str, **params: Any) -> str:
            query = {**moment.params(), **{k: str(v) for k, v in params.items() if v is not None}}
            return path + ("?" + urlencode(query) if query else "")

        def refill(action: str, name: str) -> str:
            """What was typed into field ``name`` of the refused form sent to ``action``."""
            if refused is None or refused[0] != action:
                return ""
            return refused[1].get(name, "")

        html = self.env.get_template(template).render(
            request=request,
            session=session,
            principal=session.principal,
            csrf=session.csrf,
            flashes=session.take_flashes(),
            moment=moment,
            url=url,
            refill=refill,
            # The as-of form's target: a path this site serves (the 404 page of
            # "//other.example/x" must not aim a form at another site).
            path=request.url.path if _LOCAL_PATH.fullmatch(request.url.path) else "/",
            # The page's own question (filters, claim, page), kept when its moment
            # changes: by the as-of form and the link back to now.
            kept=[(k, v) for k, v in request.query_params.multi_items() if k not in _MOMENT],
            Status=Status,
            Validity=Validity,
            Kind=Kind,
            **context,
        )
        return HTMLResponse(html, status_code=status)

    def error_page(
        self, request: Request, session: ConsoleSession, exc: LedgerError, moment: Moment
    ) -> HTMLResponse:
        """A refusal as a page, with the status of the one error table."""
        status = status_of(exc)
        return self.render(
            request,
            session,
            "error.html",
            status=status,
            moment=moment,
            title=TITLES.get(status, "Refused"),
            error_type=type(exc).__name__,
            message=told(exc, self.ledger.url),
        )

    def _live(self, session: ConsoleSession) -> Session:
        assert session.token is not None
        return self.ledger.authenticate(session.token)

    def _page(self, handler: Page, signed_out: Page | None = None) -> Callable[..., Any]:
        """A GET page: signed-in only (else ``signed_out`` or a redirect to sign-in)."""

        async def page(request: Request) -> Response:
            session, fresh = self._session(request)
            if not session.signed_in:
                if signed_out is not None:
                    response = await signed_out(request, session)
                else:
                    response = RedirectResponse("/", status_code=303)
            else:
                try:
                    response = await handler(request, session)
                except AuthenticationError:
                    self.store.drop(session.sid)
                    session, fresh = self.store.new(), True
                    session.flash("error", "Your token is no longer valid; sign in again.")
                    response = RedirectResponse("/", status_code=303)
            if fresh:
                self._set_cookie(request, response, session)
            return response

        return page

    def _post(self, handler: Page) -> Callable[..., Any]:
        """A form target: signed-in session and its CSRF token, then POST → redirect."""

        async def post(request: Request) -> Response:
            cookie = request.cookies.get(COOKIE)
            session = self.store.get(cookie)
            form = await request.form()
            if session is None and cookie:
                # A session that ended (idle too long, too old, the server restarted):
                # say so, rather than call the form forged.
                return self._ended(request, ENDED)
            if session is not None and not session.signed_in:
                # Signed out (in another tab: the cookie names that tab's new session)
                # since the form was shown; nobody is signed in, so nothing is forged.
                session.flash("error", ENDED)
                return RedirectResponse("/", status_code=303)
            if session is None or not session.csrf_ok(form.get("csrf")):
                return self._refused(request, session, "CSRF check failed")
            # for the access log: a form the session sent (not one forged in its name)
            request.state.principal = session.principal
            try:
                return await handler(request, session)
            except AuthenticationError:
                self.store.drop(session.sid)
                return self._ended(
                    request,
                    "Your token is no longer valid; nothing was written. Sign in again.",
                )

        return post

    def _refused(self, request: Request, session: ConsoleSession | None, kind: str) -> Response:
        """A form refused (403); sent without a cookie, answered without one (another
        site's form carries no Lax cookie: a new one would sign the reviewer out)."""
        return self.render(
            request,
            session or self.store.passing(),
            "error.html",
            status=403,
            title="Form refused",
            error_type=kind,
            message=REFUSED[kind],
        )

    def _ended(self, request: Request, message: str) -> Response:
        """To the sign-in page of a new session that shows ``message``."""
        session = self.store.new()
        session.flash("error", message)
        response = RedirectResponse("/", status_code=303)
        self._set_cookie(request, response, session)
        return response

    @staticmethod
    def _back(request: Request, form: Mapping[str, Any], default: str) -> str:
        """The local page to return to after a form (never another site)."""
        target = form.get("next")
        if isinstance(target, str) and _LOCAL_PATH.fullmatch(target):
            return target
        return default

    async def _act(
        self,
        request: Request,
        session: ConsoleSession,
        action: Callable[[Session, Mapping[str, Any]], str],
        default_back: str,
        again: str | None = None,
    ) -> Response:
        """Run a write from a form; its message (or the refusal) shows on the next page.
        ``again``: the form's own page, where it is filled in again when refused for
        what was typed or a lock (:data:`~ledger.serve.refusals.TYPED_OR_BUSY`)."""
        form = await request.form()
        # A browser sends every line break of a text box as CR LF (HTML's form
        # encoding); the ledger takes a line break as LF and refuses a CR.
        values = {k: v.replace("\r\n", "\n") for k, v in form.items() if isinstance(v, str)}
        typed = {k: v for k, v in values.items() if k not in _NOT_TYPED}
        record_id = request.path_params.get("record_id")
        delivery_id = request.path_params.get("delivery_id")
        subject = f"record {record_id}" if record_id else f"delivery {delivery_id}"

        def run() -> str:
            live = self._live(session)
            if record_id is not None:
                still_shown(live, record_id, values)
            return action(live, values)

        try:
            message = await finish_in_thread(run, write=True)  # answered as it ended
            session.flash("ok", message)
        except AuthenticationError:
            raise
        except LedgerError as exc:
            session.flash("error", refused_write(exc, subject, self.ledger.url))
            session.keep_refused(request.url.path, typed)
            if again is not None and isinstance(exc, TYPED_OR_BUSY):
                return RedirectResponse(again, status_code=303)
        except PreviewChanged as exc:
            session.flash("error", str(exc))
            session.keep_refused(request.url.path, typed)
            return RedirectResponse(exc.back, status_code=303)
        return RedirectResponse(self._back(request, values, default_back), status_code=303)

    async def _gather(
        self,
        request: Request,
        session: ConsoleSession,
        template: str,
        load: Callable[[Session, Moment, Access], dict[str, Any]],
    ) -> Response:
        """Load a page's data in a worker thread (as of the page's moment) and render it."""
        try:
            moment = Moment.of(request.query_params)
        except InvalidInputError as exc:
            typed = TypedMoment.of(request.query_params)  # kept, the faulty fields marked
            return self.error_page(request, session, exc, Moment(typed=typed))

        def run() -> tuple[dict[str, Any], int | None]:
            live = self._live(session)
            access = Access.of(live)
            then = moment.session(live)
            return load(then, moment, access), then.position

        try:
            context, through = await run_in_threadpool(run)
        except AuthenticationError:
            raise
        except LedgerError as exc:
            return self.error_page(request, session, exc, moment)
        shown = replace(moment, through=through)  # the position the page really shows
        return self.render(request, session, template, moment=shown, **context)

    # -- sign-in -----------------------------------------------------------------

    async def signin_page(self, request: Request, session: ConsoleSession) -> Response:
        """The sign-in form."""
        return self.render(request, session, "signin.html", title="Sign in")

    async def to_start(self, request: Request) -> Response:
        """The start page (the queue, or the sign-in form)."""
        return RedirectResponse("/", status_code=303)

    async def signin(self, request: Request) -> Response:
        """Check the token; on success a new signed-in session replaces the old one."""
        cookie = request.cookies.get(COOKIE)
        session = self.store.get(cookie)
        form = await request.form()
        if not cookie:  # another site's form, or a browser keeping no cookie
            return self._refused(request, None, "Sign-in refused")
        if session is None:  # evicted or idle: its form still vouches for it
            session = self.store.vouched(cookie, form.get("csrf"))
        if session is None or not session.csrf_ok(form.get("csrf")):
            session = session or self.store.new()
            session.flash("error", "The sign-in form had expired; please try again.")
            response: Response = RedirectResponse("/", status_code=303)
            self._set_cookie(request, response, session)
            return response
        token = form.get("token")
        token = token.strip() if isinstance(token, str) else ""
        try:
            live = await run_in_threadpool(self.ledger.authenticate, token)
        except LedgerError as exc:
            message, status = refusals.signin_refused(exc, self.ledger.url)
            session.flash("error", message)
            return self.render(request, session, "signin.html", status=status, title="Sign in")
        signed = self.store.sign_in(session, token, live.principal)
        signed.flash("ok", f"Signed in as {live.principal}.")
        response = RedirectResponse("/", status_code=303)
        self._set_cookie(request, response, signed)
        return response

    async def signout(self, request: Request, session: ConsoleSession) -> Response:
        """End the session."""
        self.store.drop(session.sid)
        fresh = self.store.new()
        fresh.flash("ok", "Signed out.")
        response = RedirectResponse("/", status_code=303)
        self._set_cookie(request, response, fresh)
        return response

    # -- pages -------------------------------------------------------------------

    async def queue(self, request: Request, session: ConsoleSession) -> Response:
        """Candidates in every scope where the principal may approve."""
        only = request.query_params.get("scope") or None
        after = request.query_params.get("after") or None

        def load(live: Session, moment: Moment, access: Access) -> dict[str, Any]:
            groups = []
            explained: dict[tuple[str, str, bytes], Any] = {}  # one per claim and context
            for scope in access.scopes(Role.APPROVE):
                if only is not None and scope != only:
                    continue
                if not access.has(scope, Role.READ):
                    groups.append({"scope": scope, "candidates": [], "unreadable": True})
                    continue
                views = live.records(
                    scope, status=Status.CANDIDATE, limit=PAGE, after=after if only else None
                )
                groups.append(
                    {
                        "scope": scope,
                        "candidates": [candidate(live, v, explained) for v in views],
                        "next_after": next_after(live, scope, views, PAGE, status=Status.CANDIDATE),
                        "unreadable": False,
                    }
                )
            approving = access.scopes(Role.APPROVE)
            return {
                "title": "Review queue",
                "groups": groups,
                # A decision returns to the page it was made on, not to the first.
                "here": "/?" + urlencode({"scope": only, **({"after": after} if after else {})})
                if only
                else "/",
                "paged": only is not None and after is not None,
                "approves": bool(approving),
                # Filtered by a scope it does not approve in (whether or not it exists).
                "not_approving": only if only is not None and only not in approving else None,
            }

        return await self._gather(request, session, "queue.html", load)

    async def records(self, request: Request, session: ConsoleSession) -> Response:
        """A scope's records, filtered and paged."""
        q = request.query_params

        def load(live: Session, moment: Moment, access: Access) -> dict[str, Any]:
            scopes = access.scopes(Role.READ)
            scope = q.get("scope") or (scopes[0] if scopes else None)
            filters = {
                "status": q.get("status") or None,
                "validity": q.get("validity") or None,
                "kind": q.get("kind") or None,
                # as the filter shows it: a key an earlier version took, quoted
                "claim_prefix": asked_key(q.get("claim_prefix") or "") or None,
            }
            views: tuple[RecordView, ...] = ()
            if scope is not None:
                views = live.records(scope, limit=PAGE, after=q.get("after") or None, **filters)
            return {
                "title": "Records",
                "scopes": scopes,
                "scope": scope,
                "filters": filters,
                "views": views,
                "next_after": next_after(live, scope, views, PAGE, **filters) if scope else None,
            }

        return await self._gather(request, session, "records.html", load)

    async def record(self, request: Request, session: ConsoleSession) -> Response:
        """One record: status and validity with the reason, deliveries, audit, picture."""
        record_id = request.path_params["record_id"]

        def load(live: Session, moment: Moment, access: Access) -> dict[str, Any]:
            view = live.get(record_id)
            usable, reasons, conflicts = explain_line(live, view)
            try:
                trail = live.audit(record_id)
                audit_note = None
            except AccessDeniedError:
                trail, audit_note = None, f"Your roles in {view.scope} do not include audit."

            def link(rid: str) -> str:
                query = urlencode(moment.params())
                return f"/records/{rid}" + (f"?{query}" if query else "")

            # Which deliveries owe a correction: told to those who issue them
            # (``deliver`` in the record's scope), as the outbox tells them.
            owed = None
            if view.deliveries and access.has(view.scope, Role.DELIVER):
                owed = {x.delivery.delivery_id for x in live.corrections_due(view.id)}

            return {
                "title": f"Record {view.id}",
                "view": view,
                "usable": usable,
                "reasons": reasons,
                "conflicts": conflicts,
                "trail": trail,
                "audit_note": audit_note,
                "owed": owed,
                "picture": picture(live, view.id, link),
                "approver": access.has(view.scope, Role.APPROVE) and not moment.past,
                "entry": candidate(live, view) if view.status == Status.CANDIDATE else None,
            }

        return await self._gather(request, session, "record.html", load)

    async def revoke_preview(self, request: Request, session: ConsoleSession) -> Response:
        """What a revocation would mark STALE and which deliveries would owe corrections
        (now: asked as of a past moment, the record page as of then instead)."""
        record_id = request.path_params["record_id"]
        try:
            moment = Moment.of(request.query_params)
        except InvalidInputError:
            moment = Moment()  # the preview page refuses it, as every page does
        if moment.past:
            session.flash(
                "ok",
                "A revocation preview shows what revoking would do now; "
                "here is the record as it was then.",
            )
            query = urlencode(moment.params())
            return RedirectResponse(f"/records/{quote(record_id, safe='@:')}?{query}", 303)

        def load(live: Session, moment: Moment, access: Access) -> dict[str, Any]:
            view, preview, stale = revocation_preview(live, record_id)
            return {
                "title": f"Revoke {view.id}?",
                "view": view,
                "preview": preview,
                "stale": stale,
                "listed": LISTED,
                "mark": preview_mark(preview),
            }

        return await self._gather(request, session, "revoke.html", load)

    async def attention(self, request: Request, session: ConsoleSession) -> Response:
        """STALE or expired records, and the deliveries that owe corrections."""

        def load(live: Session, moment: Moment, access: Access) -> dict[str, Any]:
            found: dict[str, RecordView] = {}
            truncated = False
            for scope in access.scopes(Role.READ):
                # STALE, and ACCEPTED but expired (a CANDIDATE is not valid yet either,
                # but it waits in the review queue, not here).
                for wanted in (
                    {"status": Status.STALE},
                    {"status": Status.ACCEPTED, "validity": Validity.NEEDS_REVALIDATION},
                ):
                    views = live.records(scope, limit=PAGE, **wanted)
                    truncated = truncated or len(views) >= PAGE
                    for v in views:
                        found.setdefault(v.id, v)
            # Corrections are the deliverers' outbox: without ``deliver`` anywhere
            # the page says so rather than show an empty (and so false) outbox.
            delivers = bool(access.scopes(Role.DELIVER))
            due = live.corrections_due() if delivers else ()
            return {
                "title": "Needs attention",
                "needs": sorted(found.values(), key=lambda v: (v.scope, v.id)),
                "truncated": truncated,
                "due": due,
                "delivers": delivers,
                "approves": set(access.scopes(Role.APPROVE)),
            }

        return await self._gather(request, session, "attention.html", load)

    async def explain(self, request: Request, session: ConsoleSession) -> Response:
        """Why each record for a claim is or is not usable: every usable record and
        at most :data:`~ledger.serve.pages.EXPLAINED` others, the rest counted."""
        scope = request.query_params.get("scope") or None
        typed = request.query_params.get("claim_key") or None
        claim_key = None if typed is None else asked_key(typed)

        def load(live: Session, moment: Moment, access: Access) -> dict[str, Any]:
            result = None
            if scope is not None and claim_key is not None:
                result = live.explain(scope, claim_key, limit=EXPLAINED)
            return {
                "title": "Explain a claim",
                "scopes": access.scopes(Role.READ),
                "scope": scope,
                "claim_key": claim_key,
                "result": result,
            }

        return await self._gather(request, session, "explain.html", load)

    async def snapshot(self, request: Request, session: ConsoleSession) -> Response:
        """The captured bytes of a snapshot, as plain text or a download; never rendered."""
        ref = request.path_params["ref"]
        try:
            data = await run_in_threadpool(lambda: self._live(session).snapshot(ref))
        except AuthenticationError:
            raise
        except LedgerError as exc:  # unknown, erased, or bytes that fail their hash
            return self.error_page(request, session, exc, Moment())
        headers = {"Content-Security-Policy": "sandbox", "X-Content-Type-Options": "nosniff"}
        try:
            return Response(
                data.decode("utf-8"), media_type="text/plain; charset=utf-8", headers=headers
            )
        except UnicodeDecodeError:
            name = ref.replace(":", "-")
            headers["Content-Disposition"] = f'attachment; filename="{name}"'
            return Response(data, media_type="application/octet-stream", headers=headers)

    # -- writes ------------------------------------------------------------------

    async def accept(self, request: Request, session: ConsoleSession) -> Response:
        """Accept a candidate."""
        record_id = request.path_params["record_id"]

        def act(live: Session, form: Mapping[str, Any]) -> str:
            replacing = replaces(live, record_id)  # as its card said it may
            live.accept(record_id, note=form.get("note", ""))
            conflict = conflict_after(live, record_id)
            if not replacing:
                return f"Accepted {record_id}.{conflict}"
            return (
                f"Accepted {record_id}; what it replaced is SUPERSEDED and what rested on "
                f"that STALE (Needs attention lists the corrections owed).{conflict}"
            )

        return await self._act(request, session, act, "/")

    async def reject(self, request: Request, session: ConsoleSession) -> Response:
        """Reject a candidate with a reason."""
        record_id = request.path_params["record_id"]

        def act(live: Session, form: Mapping[str, Any]) -> str:
            live.reject(record_id, reason=form.get("reason", ""))
            return f"Rejected {record_id}."

        return await self._act(request, session, act, "/")

    async def revalidate(self, request: Request, session: ConsoleSession) -> Response:
        """Revalidate a STALE record, optionally on a new basis."""
        record_id = request.path_params["record_id"]

        def act(live: Session, form: Mapping[str, Any]) -> str:
            basis = [p for p in form.get("parents", "").replace(",", " ").split() if p]
            live.revalidate(record_id, note=form.get("note", ""), parents=basis or None)
            return f"Revalidated {record_id}."

        return await self._act(request, session, act, f"/records/{record_id}")

    async def revoke(self, request: Request, session: ConsoleSession) -> Response:
        """Revoke a record (after its preview)."""
        record_id = request.path_params["record_id"]

        def act(live: Session, form: Mapping[str, Any]) -> str:
            # What the approver confirmed is the preview: if records or deliveries
            # were added under the record since (or the form carries no preview),
            # nothing is revoked and the new preview is shown to confirm again.
            _, preview, _ = revocation_preview(live, record_id)
            if form.get("preview") != preview_mark(preview):
                raise PreviewChanged(preview_changed(record_id, preview), f"{back}/revoke")
            result = live.revoke(record_id, reason=form.get("reason", ""))
            return revoked(result.root, reach(live, result.stale), len(preview.deliveries))

        back = f"/records/{record_id}"
        return await self._act(request, session, act, back, again=f"{back}/revoke")

    async def issue_correction(self, request: Request, session: ConsoleSession) -> Response:
        """Issue a correction for a delivery (outbox)."""
        delivery_id = request.path_params["delivery_id"]

        def act(live: Session, form: Mapping[str, Any]) -> str:
            replacement = form.get("replacement", "").strip() or None
            # The form is offered for a correction due: a second submission of it
            # finds none owed and issues nothing.
            cid = live.issue_correction(
                delivery_id, note=form.get("note", ""), replacement=replacement, only_if_owed=True
            )
            return f"Correction {cid} issued for delivery {delivery_id} (in the outbox)."

        return await self._act(request, session, act, "/attention")
