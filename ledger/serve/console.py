"""The review console: server-rendered pages for the people who approve, revoke and audit.

Pages (Jinja2 templates, no JavaScript): sign-in, the review queue (``/``),
record pages with the dependency picture, the revocation preview, what needs
attention (STALE or expired records, corrections due), a record list and an
explain page. Every page can be viewed as the ledger was at a past log position
or time (``?as_of_position=`` / ``?as_of_time=``; links keep it). Every form
carries the session's CSRF token; every write is POST → redirect → GET with a
message. Ledger calls block, so each page's data is gathered in a worker thread.
What a page shows is built in :mod:`ledger.serve.pages`; how a request is answered
(its session, the guards of pages and forms, rendering) in :mod:`ledger.serve.plumbing`.
A page asked for while signed out opens once signed in (``/?next=``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ledger import Session, redaction
from ledger.access import Role
from ledger.deliveries import LISTS_OWED
from ledger.domain import Status, Validity
from ledger.errors import (
    AccessDeniedError,
    AuthenticationError,
    InvalidInputError,
    InvalidTransitionError,
    LedgerError,
)
from ledger.serve import refusals
from ledger.serve.call import path_parameters
from ledger.serve.confirming import (
    BY_THEN,
    LISTED,
    PreviewChanged,
    preview_changed,
    reach,
    revocation_preview,
    revoked,
)
from ledger.serve.deciding import (
    REVOCABLE,
    UNDECIDED,
    came_first,
    done_already,
    next_card,
    repeated,
)
from ledger.serve.errors import masked
from ledger.serve.inputs import FieldError, read_form
from ledger.serve.pages import (
    EXPLAINED,
    HERE,
    Access,
    Moment,
    candidate,
    conflict_after,
    explain_line,
    page_number,
    paged_title,
    preview_mark,
    replaces,
    window,
)
from ledger.serve.pictures import picture
from ledger.serve.plumbing import LOCAL_PATH, Page, Plumbing, another_site
from ledger.serve.sessions import COOKIE, ConsoleSession
from ledger.session import next_after
from ledger.validation import asked_key, key_text
from ledger.values import RecordView

#: Records shown per page of the queue, of each list of Needs attention and of the
#: record list.
PAGE = 50

#: The lists of Needs attention, by the name a link pages one by (``?list=``): what
#: each is called and the filters of ``Session.records`` that list it. STALE, and
#: ACCEPTED but expired (a CANDIDATE is not valid yet either, but it waits in the
#: review queue, not here).
ATTENTION: dict[str, tuple[str, dict[str, Status | Validity]]] = {
    "stale": ("STALE", {"status": Status.STALE}),
    "expired": (
        "ACCEPTED but expired",
        {"status": Status.ACCEPTED, "validity": Validity.NEEDS_REVALIDATION},
    ),
}


class Console(Plumbing):
    """The console's routes over one ledger and one session store."""

    # -- routes ------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        """The console's Starlette routes."""

        def page(path: str, handler: Page) -> Route:
            return Route(path, self._page(_as_sent(path, handler)))

        def form(path: str, handler: Page, own_page: bool = False) -> Route:
            return Route(
                path, self._post(_as_sent(path, handler), own_page=own_page), methods=["POST"]
            )

        return [
            Route("/", self._page(self.queue, signed_out=self.signin_page)),
            Route("/signin", self.signin, methods=["POST"]),
            Route("/signout", self._post(self.signout, signs_out=True), methods=["POST"]),
            # Typed, bookmarked or reached back through the history (the page of a
            # refused token is at /signin): the start page, changing nothing.
            Route("/signin", self.to_start),
            Route("/signout", self.to_start),
            Route("/records", self._page(self.records)),
            page("/records/{record_id}", self.record),
            form("/records/{record_id}/accept", self.accept),
            form("/records/{record_id}/reject", self.reject),
            form("/records/{record_id}/revalidate", self.revalidate),
            page("/records/{record_id}/revoke", self.revoke_preview),
            form("/records/{record_id}/revoke", self.revoke, own_page=True),
            Route("/attention", self._page(self.attention)),
            form("/deliveries/{delivery_id}/correction", self.issue_correction),
            Route("/explain", self._page(self.explain)),
            page("/snapshots/{ref}", self.snapshot),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]

    # -- sign-in -----------------------------------------------------------------

    async def signin_page(self, request: Request, session: ConsoleSession) -> Response:
        """The sign-in form; once signed in, the page asked for (``?next=``: a page
        that sent a signed-out browser here) or the start page asked with its query."""
        back = request.query_params.get("next")
        if back is None and request.url.query:
            back = "/?" + request.url.query
        if back is not None and not LOCAL_PATH.fullmatch(back):
            back = None
        if back is not None and masked(unquote(back)) != unquote(back):
            # A token in the address (``/?token=…``) is not carried into the form,
            # nor into the address the browser goes to once signed in (its history).
            back = None
        return self.render(request, session, "signin.html", title="Sign in", back=back)

    async def to_start(self, request: Request) -> Response:
        """The start page (the queue, or the sign-in form)."""
        return RedirectResponse("/", status_code=303)

    async def signin(self, request: Request) -> Response:
        """Check the token; on success a new signed-in session replaces the old one."""
        if another_site(request):
            # Another site's form, even one that set this console's cookie from a
            # sibling port or host name: it would sign the reader in as its author.
            return self._refused(request, None, "Sign-in refused")
        cookie = request.cookies.get(COOKIE)
        session = self.store.get(cookie)
        form = await read_form(request)
        if not cookie:  # another site's form, or a browser keeping no cookie
            return self._refused(request, None, "Sign-in refused")
        if session is None:  # evicted or idle: its form still vouches for it
            session = self.store.vouched(cookie, form.get("csrf"))
        # The page to return to once signed in: on this site, else the start page.
        back = self._back(request, form, "/")
        if session is None or not session.csrf_ok(form.get("csrf")):
            session = session or self.store.new()
            session.flash("error", "The sign-in form had expired; please try again.")
            again = "/" if back == "/" else "/?" + urlencode({"next": back})
            response: Response = RedirectResponse(again, status_code=303)
            self._set_cookie(request, response, session)
            return response
        token = form.get("token")
        token = token.strip() if isinstance(token, str) else ""
        try:
            live = await run_in_threadpool(self.ledger.authenticate, token)
        except LedgerError as exc:
            message, status = refusals.signin_refused(exc, self.ledger.url)
            session.flash("error", message)
            return self.render(
                request,
                session,
                "signin.html",
                status=status,
                title="Sign in",
                back=None if back == "/" else back,
            )
        signed = self.store.sign_in(session, token, live.principal)
        signed.flash("ok", f"Signed in as {live.principal}.")
        response = RedirectResponse(back, status_code=303)
        self._set_cookie(request, response, signed)
        return response

    async def signout(self, request: Request, session: ConsoleSession) -> Response:
        """End the session."""
        self.store.drop(session.sid)
        fresh = self.store.after(session)
        fresh.flash("ok", "Signed out.")
        response = RedirectResponse("/", status_code=303)
        self._set_cookie(request, response, fresh)
        return response

    # -- pages -------------------------------------------------------------------

    async def queue(self, request: Request, session: ConsoleSession) -> Response:
        """Candidates in every scope where the principal may approve."""
        only = request.query_params.get("scope") or None
        after = request.query_params.get("after") or None
        # Only a queue of one scope is paged (``after``): the others show its first page.
        page = page_number(request.query_params) if only else 1
        name = "Review queue" if only is None else f"Review queue in {only}"

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
                "title": paged_title(name, page),
                "groups": groups,
                "next_card": next_card(groups, session.decided),
                "page": page,
                # A decision returns to the page it was made on, not to the first.
                "here": _here("/", {"scope": only, "after": after, "page": page}) if only else "/",
                "paged": only is not None and after is not None,
                "approves": bool(approving),
                "audits": bool(access.scopes(Role.AUDIT) or access.scopes(Role.DELIVER)),
                # Filtered by a scope it does not approve in (whether or not it exists).
                "not_approving": only if only is not None and only not in approving else None,
            }

        return await self._gather(request, session, "queue.html", load, name)

    async def records(self, request: Request, session: ConsoleSession) -> Response:
        """A scope's records, filtered and paged."""
        q = request.query_params
        page = page_number(q)

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
                "title": paged_title(f"Records in {scope}", page) if scope else "Records",
                "page": page,
                "scopes": scopes,
                "scope": scope,
                "filters": filters,
                "views": views,
                "next_after": next_after(live, scope, views, PAGE, **filters) if scope else None,
            }

        return await self._gather(request, session, "records.html", load, "Records")

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

            # Which deliveries owe a correction: told to those who issue them or
            # audit them (``deliver`` or ``audit`` in the record's scope), as the
            # outbox tells them.
            owed = None
            if view.deliveries and any(access.has(view.scope, r) for r in LISTS_OWED):
                owed = {x.delivery.delivery_id for x in live.corrections_due(view.id)}
            q = request.query_params
            shown = window(view.deliveries, q, "deliveries_from", PAGE)
            events = window(trail.events if trail else (), q, "events_from", PAGE)

            return {
                "title": f"Record {view.id}",
                "view": view,
                "usable": usable,
                "reasons": reasons,
                # The Why box's reasons already say when it expired (an ACCEPTED
                # record's first failing stage is its expiry): not said again.
                "expiry_told": bool(reasons) and _expired(view, live.caller.at(None)),
                "conflicts": conflicts,
                "trail": trail,
                "audit_note": audit_note,
                "owed": owed,
                "deliveries": shown,
                "events": events,
                "corrects": access.has(view.scope, Role.DELIVER),
                "picture": picture(live, view.id, link),
                "approver": access.has(view.scope, Role.APPROVE) and not moment.past,
                "entry": candidate(live, view) if view.status == Status.CANDIDATE else None,
                # Past its own expiry, which no revalidation renews (only a new version).
                "expired_itself": view.expires is not None and view.expires <= live.caller.at(None),
            }

        return await self._gather(request, session, "record.html", load, f"Record {record_id}")

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
            return RedirectResponse(f"{_record_path(record_id)}?{query}", 303)

        def load(live: Session, moment: Moment, access: Access) -> dict[str, Any]:
            view, preview, stale = revocation_preview(live, record_id)
            return {
                "title": f"Revoke {view.id}?",
                "view": view,
                "preview": preview,
                "stale": stale,
                "listed": LISTED,
                "mark": preview_mark(preview),
                "by_then": BY_THEN,
            }

        return await self._gather(request, session, "revoke.html", load, f"Revoke {record_id}?")

    async def attention(self, request: Request, session: ConsoleSession) -> Response:
        """STALE or expired records, and the deliveries that owe corrections. The
        records come in lists, one per scope and kind (:data:`ATTENTION`), each of
        its first :data:`PAGE` in id order and paged on its own (``?scope=&list=
        &after=``: that list alone, without the outbox)."""
        q = request.query_params
        only, which = q.get("scope") or None, q.get("list") or None
        after = q.get("after") or None
        paged = only is not None and which in ATTENTION and after is not None
        page = page_number(q) if paged else 1
        name = "Needs attention"
        if paged and which is not None:
            name = f"Needs attention: {ATTENTION[which][0]} in {only}"

        def load(live: Session, moment: Moment, access: Access) -> dict[str, Any]:
            if (only, which, after) != (None, None, None) and not paged:
                # (a page of one list names all three; a link cut short is not the
                # whole page, which it would otherwise silently be)
                raise InvalidInputError(
                    "a page of Needs attention names its scope, its list (stale or "
                    "expired) and where it starts (after), as its Next page link does"
                )
            lists = []
            for scope in [only] if paged else access.scopes(Role.READ):
                assert scope is not None
                for kind, (label, wanted) in ATTENTION.items():
                    if paged and kind != which:
                        continue
                    # A page of PAGE, and one look at the record after it: what
                    # follows is linked to, never loaded (nor counted) here.
                    start = after if paged else None
                    views = live.records(scope, limit=PAGE, after=start, **wanted)
                    if not views and not paged:
                        continue
                    more = next_after(live, scope, views, PAGE, **wanted)
                    filters = {k: str(v) for k, v in wanted.items()}
                    lists.append(_Listed(scope, kind, label, views, filters, more))
            # Corrections are the deliverers' outbox, which auditors see too (the
            # form to issue one only where the principal delivers): without either
            # role anywhere the page says so rather than show an empty (and so
            # false) outbox.
            sees = any(access.scopes(r) for r in LISTS_OWED)
            due = window(live.corrections_due() if sees and not paged else (), q, "due_from", PAGE)
            return {
                "title": paged_title(name, page),
                "lists": lists,
                "shown": sum(len(x.views) for x in lists),
                "more": any(x.next_after for x in lists),
                "paged": paged,
                "page": page,
                "due": due,
                "sees_due": sees,
                "delivers": set(access.scopes(Role.DELIVER)),
                "approves": set(access.scopes(Role.APPROVE)),
            }

        return await self._gather(request, session, "attention.html", load, name)

    async def explain(self, request: Request, session: ConsoleSession) -> Response:
        """Why each record for a claim is or is not usable: every usable record and
        at most :data:`~ledger.serve.pages.EXPLAINED` others, the rest counted."""
        scope = request.query_params.get("scope") or None
        typed = request.query_params.get("claim_key") or None
        claim_key = None if typed is None else asked_key(typed)
        # Named by its claim once explained (a page that refuses it is not: the claim
        # asked about is not said back where the ledger would not explain it).
        title = "Explain a claim"
        if scope is not None and claim_key is not None:
            title = f"Explain {key_text(claim_key)} in {scope}"

        def load(live: Session, moment: Moment, access: Access) -> dict[str, Any]:
            result = None
            if scope is not None and claim_key is not None:
                result = live.explain(scope, claim_key, limit=EXPLAINED)
            return {
                "title": title,
                "scopes": access.scopes(Role.READ),
                "scope": scope,
                "claim_key": claim_key,
                "result": result,
            }

        return await self._gather(request, session, "explain.html", load, "Explain a claim")

    async def snapshot(self, request: Request, session: ConsoleSession) -> Response:
        """The captured bytes of a snapshot, as plain text or a download; never rendered."""
        ref = request.path_params["ref"]
        try:
            data = await run_in_threadpool(lambda: self._live(session).snapshot(ref))
        except AuthenticationError:
            raise
        except LedgerError as exc:  # unknown, erased, or bytes that fail their hash
            return self.error_page(request, session, exc, Moment(), f"Snapshot {ref}")
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
        decision = f"accept {record_id}"

        def act(live: Session, form: Mapping[str, Any]) -> str:
            replacing = replaces(live, record_id)  # as its card said it may
            try:
                live.accept(record_id, note=form.get("note", ""))
            except InvalidTransitionError as exc:
                if repeated(live, session, decision, record_id, (Status.ACCEPTED,)) is None:
                    raise came_first(live, session, record_id, exc, UNDECIDED) from None
                return done_already(record_id, Status.ACCEPTED, "accepted")
            conflict = conflict_after(live, record_id)
            if not replacing:
                return f"Accepted {record_id}.{conflict}"
            return (
                f"Accepted {record_id}; what it replaced is SUPERSEDED and what rested on "
                f"that STALE (Needs attention lists the corrections owed).{conflict}"
            )

        doing = f"Acceptance of {record_id}"
        return await self._decide(request, session, decision, act, "/", doing)

    async def reject(self, request: Request, session: ConsoleSession) -> Response:
        """Reject a candidate with a reason."""
        record_id = request.path_params["record_id"]
        decision = f"reject {record_id}"

        def act(live: Session, form: Mapping[str, Any]) -> str:
            try:
                live.reject(record_id, reason=form.get("reason", ""))
            except InvalidTransitionError as exc:
                if repeated(live, session, decision, record_id, (Status.REJECTED,)) is None:
                    raise came_first(live, session, record_id, exc, UNDECIDED) from None
                return done_already(record_id, Status.REJECTED, "rejected")
            return f"Rejected {record_id}."

        doing = f"Rejection of {record_id}"
        return await self._decide(request, session, decision, act, "/", doing)

    async def revalidate(self, request: Request, session: ConsoleSession) -> Response:
        """Revalidate a STALE record, optionally on a new basis."""
        record_id = request.path_params["record_id"]
        decision = f"revalidate {record_id}"

        def act(live: Session, form: Mapping[str, Any]) -> str:
            basis = [p for p in form.get("parents", "").replace(",", " ").split() if p]
            try:
                live.revalidate(record_id, note=form.get("note", ""), parents=basis or None)
            except InvalidTransitionError:
                # (revalidated, a record never accepted is a CANDIDATE again)
                done = (Status.ACCEPTED, Status.CANDIDATE)
                view = repeated(live, session, decision, record_id, done)
                if view is None:
                    raise
                return done_already(record_id, view.status, "revalidated")
            return f"Revalidated {record_id}."

        back, doing = _record_path(record_id), f"Revalidation of {record_id}"
        return await self._decide(request, session, decision, act, back, doing)

    async def revoke(self, request: Request, session: ConsoleSession) -> Response:
        """Revoke a record (after its preview)."""
        record_id = request.path_params["record_id"]
        decision = f"revoke {record_id}"

        def act(live: Session, form: Mapping[str, Any]) -> str:
            # What the approver confirmed is the preview: if records or deliveries
            # were added under the record since (or the form carries no preview),
            # nothing is revoked and the new preview is shown to confirm again,
            # offering to revoke it with whatever is built on it by then (BY_THEN:
            # the preview is not compared, and the message counts what it marked).
            by_then = form.get("extent") == BY_THEN
            try:
                _, preview, shown = revocation_preview(live, record_id)
                if not by_then and form.get("preview") != preview_mark(preview):
                    # (counted as "records you can see": not those it may act on unread)
                    seen = {"seen": str(len(shown.listed) + shown.beyond)}
                    again = f"{back}/revoke"
                    raise PreviewChanged(preview_changed(record_id, preview), again, seen)
                result = live.revoke(record_id, reason=form.get("reason", ""))
            except InvalidTransitionError as exc:  # (a REVOKED record has no preview either)
                if repeated(live, session, decision, record_id, (Status.REVOKED,)) is None:
                    raise came_first(live, session, record_id, exc, REVOCABLE) from None
                return done_already(record_id, Status.REVOKED, "revoked")
            # Counted as the preview counts: by their status just before revoking.
            before = live.as_of(position=result.position - 1)
            stale = reach(before, result.stale)
            return revoked(result.root, stale, len(preview.deliveries), by_then)

        back = _record_path(record_id)
        doing = f"Revocation of {record_id}"
        return await self._decide(
            request, session, decision, act, back, doing, again=f"{back}/revoke"
        )

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
            return (
                f"Correction {cid} issued for delivery {delivery_id}: its record's page "
                "lists it under Deliveries (nothing is sent)."
            )

        doing = f"Correction for delivery {delivery_id}"
        response = await self._act(request, session, act, "/attention", doing)
        session.results()  # the next page takes the focus to what happened
        return response

    async def _decide(
        self,
        request: Request,
        session: ConsoleSession,
        decision: str,
        act: Callable[[Session, Mapping[str, Any]], str],
        back: str,
        doing: str,
        again: str | None = None,
    ) -> Response:
        """:meth:`_act` for a decision on a record (``decision``: ``"accept M1"``):
        the session's forms of it go one at a time, and once the ledger took one,
        where it left the record is noted (a form sent twice, as by a double click,
        is then told it was done already: :func:`_again`). The next page takes the
        keyboard's focus to what happened."""
        record_id = decision.partition(" ")[2]

        def deciding(live: Session, form: Mapping[str, Any]) -> str:
            message = act(live, form)
            with suppress(LedgerError):  # (unread: a form sent again is refused)
                view = live.get(record_id)
                session.taken(decision, view.position)
                session.decided = (view.scope, redaction.bare(view.id))
            return message

        async with session.deciding(decision).lock:
            try:
                return await self._act(request, session, deciding, back, doing, again)
            finally:
                session.results()


@dataclass(frozen=True)
class _Listed:
    """One list of Needs attention: a page of the records of one scope and kind."""

    scope: str
    kind: str  # its name in ``ATTENTION`` (``?list=``)
    label: str
    views: tuple[RecordView, ...]
    #: Its filters, as the record list's form takes them (the link to all of them).
    filters: dict[str, str]
    #: The ``after`` of its next page (None: nothing follows).
    next_after: str | None


def _record_path(record_id: str) -> str:
    """The address of a record's page (an id is a path segment of its own)."""
    return "/records/" + quote(record_id, safe="@:")


def _as_sent(template: str, handler: Page) -> Page:
    """``handler`` with the path parameters of its route (``template``) as the
    browser sent them, percent-decoded once (as the API takes them,
    :func:`~ledger.serve.call.path_parameters`): the page of ``/records/a%2Fb``
    is about the id ``a/b``, not ``a%2Fb`` (the router keeps an encoded slash
    encoded, so that it stays in its segment). A parameter that is not UTF-8 once
    decoded stays as the router has it (the ledger refuses it, shown as it is)."""

    async def decoded(request: Request, session: ConsoleSession) -> Response:
        try:
            sent = path_parameters(template, request.scope.get("raw_path"), request.path_params)
        except FieldError:
            sent = dict(request.path_params)
        request.scope["path_params"] = sent
        return await handler(request, session)

    return decoded


def _here(path: str, query: Mapping[str, object]) -> str:
    """``path`` with the parts of ``query`` that are given (a page 1 is not)."""
    given = {k: str(v) for k, v in query.items() if v is not None and (k, v) != ("page", 1)}
    return path + ("?" + urlencode(given) if given else "")


def _expired(view: RecordView, at: datetime) -> bool:
    """Whether ``view`` is an ACCEPTED record past its expiry (its own or one it
    inherits) at ``at``: its Why box's reasons then say so."""
    due = view.effective_expires
    return view.status == Status.ACCEPTED and due is not None and due <= at
