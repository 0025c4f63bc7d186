"""How the review console answers a request: the browser's session, a page rendered
with the header's context, the sign-in guard of every page, the CSRF guard of every
form, a write's POST → redirect → GET, and the pages that refuse.

:class:`Plumbing` is the base of :class:`ledger.serve.console.Console`, which adds
the routes, the pages and the writes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote, unquote, urlencode

from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ledger import Ledger, Session
from ledger.domain import Kind, Status, Validity
from ledger.errors import (
    AuthenticationError,
    InvalidInputError,
    LedgerError,
    UnknownDeliveryError,
    UnknownRecordError,
    retold,
)
from ledger.serve.confirming import PreviewChanged, still_shown
from ledger.serve.errors import field_of, masked, status_of, told
from ledger.serve.inputs import FieldError, check_no_token, read_form
from ledger.serve.pages import Access, Moment, TypedMoment, environment
from ledger.serve.refusals import (
    ENDED,
    REFUSED,
    SIGNED_OUT,
    TITLES,
    TYPED_OR_BUSY,
    refused_write,
    shown_before,
)
from ledger.serve.sessions import COOKIE, ConsoleSession, Result, SessionStore, set_cookie
from ledger.serve.threads import finish_in_thread

#: A path on this site (browsers read ``//host`` and ``/\host`` as another site).
LOCAL_PATH = re.compile(r"/(?![/\\])[^\s\\]*")
#: The query parameters that name a page's moment (see ``pages.Moment``).
_MOMENT = ("as_of_position", "as_of_time")
#: Form fields the console fills in itself (a refused form is given back without them;
#: ``seen`` is what a changed revocation preview showed, kept by the console alone).
_NOT_TYPED = ("csrf", "next", "preview", "scope", "extent", "seen")
#: The field a refused form is given back for: invalid, described by the refusal
#: (the message shown above the page, ``id="form-refusal"``), and focused.
_AT_FAULT = Markup(' aria-invalid="true" aria-describedby="form-refusal" autofocus')
#: What a path keeps unquoted when it is sent on as a sign-in's ``next``.
_PATH_SAFE = "/%:@!$&'()*+,;=~"

Page = Callable[[Request, ConsoleSession], Awaitable[Response]]


class _MomentRefused(Exception):
    """The ledger refused a page's moment (a position beyond the log, a time after
    its clock): the page is refused as for a moment that does not parse."""

    def __init__(self, error: InvalidInputError) -> None:
        super().__init__(str(error))
        self.error = error


def _typed(form: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """A form's text fields, and those of them the reader typed (given back when
    the form is refused). A browser sends every line break of a text box as CR LF
    (HTML's form encoding); the ledger takes a line break as LF and refuses a CR."""
    values = {k: v.replace("\r\n", "\n") for k, v in form.items() if isinstance(v, str)}
    return values, {k: v for k, v in values.items() if k not in _NOT_TYPED}


class Plumbing:
    """Sessions, rendering and the guards of pages and forms, over one ledger and
    one session store."""

    def __init__(
        self, ledger: Ledger, store: SessionStore | None = None, *, secure_cookies: bool = False
    ) -> None:
        self.ledger = ledger
        self.secure_cookies = secure_cookies
        self.store = store if store is not None else SessionStore()
        self.env = environment()

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
        # Kept across a sign-in (a form refused as its token ended) for its page.
        refused = session.take_refused() if session.signed_in else None
        page = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        flashes = session.take_flashes(page)
        session.decided = None  # told by this page (the queue's link on), or by none
        # The refusal a field is marked for: its message is what describes the field.
        refusal_at = None
        if refused is not None and refused.field is not None:
            shown = [i for i, flash in enumerate(flashes) if flash == ("error", refused.message)]
            refusal_at = shown[-1] if shown else None

        def url(path: str, **params: Any) -> str:
            query = {**moment.params(), **{k: str(v) for k, v in params.items() if v is not None}}
            return path + ("?" + urlencode(query) if query else "")

        def refill(action: str, name: str) -> str:
            """What was typed into field ``name`` of the refused form sent to ``action``."""
            if refused is None or refused.action != action:
                return ""
            return refused.values.get(name, "")

        def was_refused(action: str) -> bool:
            """Whether the form sent to ``action`` is given back refused."""
            return refused is not None and refused.action == action

        def at_fault(action: str, name: str) -> Markup:
            """The attributes that mark field ``name`` of the form sent to ``action``
            when its refusal is about that field (none otherwise)."""
            if refused is None or refusal_at is None:
                return Markup("")
            return _AT_FAULT if (refused.action, refused.field) == (action, name) else Markup("")

        html = self.env.get_template(template).render(
            request=request,
            session=session,
            principal=session.principal,
            csrf=session.csrf,
            flashes=flashes,
            refusal_at=refusal_at,
            moment=moment,
            url=url,
            refill=refill,
            was_refused=was_refused,
            at_fault=at_fault,
            # The as-of form's target: a path this site serves (the 404 page of
            # "//other.example/x" must not aim a form at another site).
            path=request.url.path if LOCAL_PATH.fullmatch(request.url.path) else "/",
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
        self,
        request: Request,
        session: ConsoleSession,
        exc: LedgerError,
        moment: Moment,
        name: str | None = None,
    ) -> HTMLResponse:
        """A refusal as a page, with the status of the one error table; ``name``:
        the page's, kept in its title ("Not found: Record E9"). A page about a
        record that is there but not in a state for it (409: the revocation of a
        record revoked since) links to that record too."""
        status = status_of(exc)
        heading = TITLES.get(status, "Refused")
        about = request.path_params.get("record_id") if status == 409 else None
        return self.render(
            request,
            session,
            "error.html",
            status=status,
            moment=moment,
            title=f"{heading}: {name}" if name else heading,
            heading=heading,
            error_type=type(exc).__name__,
            message=told(exc, self.ledger.url),
            about=about,
        )

    def _moment_refused(
        self, request: Request, session: ConsoleSession, exc: InvalidInputError, name: str
    ) -> HTMLResponse:
        """A page whose moment was refused: shown as of now (its links lead back to
        now), the as-of form keeping what was typed, its faulty fields marked."""
        typed = TypedMoment.of(request.query_params)
        return self.error_page(request, session, exc, Moment(typed=typed), name)

    def _live(self, session: ConsoleSession) -> Session:
        assert session.token is not None
        return self.ledger.authenticate(session.token)

    @staticmethod
    def _to_sign_in(request: Request) -> str:
        """The sign-in page, which returns to the page ``request`` asked for once
        signed in (a path on this site, as :meth:`_back` takes it)."""
        raw = request.scope.get("raw_path")
        path = raw.decode("latin-1") if isinstance(raw, bytes) and raw else request.url.path
        wanted = quote(path, safe=_PATH_SAFE)
        if request.url.query:
            wanted += "?" + request.url.query
        if wanted == "/" or not LOCAL_PATH.fullmatch(wanted):
            return "/"
        if masked(unquote(wanted)) != unquote(wanted):
            return "/"  # a token in the address is not carried on (nor into history)
        return "/?" + urlencode({"next": wanted})

    def _page(self, handler: Page, signed_out: Page | None = None) -> Callable[..., Any]:
        """A GET page: signed-in only (else ``signed_out``, or the sign-in page that
        returns here)."""

        async def page(request: Request) -> Response:
            session, fresh = self._session(request)
            refused = _token_in_address(request)
            response: Response
            if refused is not None:  # shown back in the page (links, forms): never
                session.flash("error", f"Nothing was shown at that address: {refused}.")
                response = RedirectResponse(request.url.path, status_code=303)
            elif not session.signed_in:
                if signed_out is not None:
                    response = await signed_out(request, session)
                else:
                    response = RedirectResponse(self._to_sign_in(request), status_code=303)
            else:
                try:
                    response = await handler(request, session)
                except AuthenticationError:
                    self.store.drop(session.sid)
                    session, fresh = self.store.after(session), True
                    session.flash("error", "Your token is no longer valid; sign in again.")
                    response = RedirectResponse(self._to_sign_in(request), status_code=303)
            if fresh:
                self._set_cookie(request, response, session)
            return response

        return page

    def _post(
        self, handler: Page, *, own_page: bool = False, signs_out: bool = False
    ) -> Callable[..., Any]:
        """A form target: signed-in session and its CSRF token, then POST → redirect.
        ``own_page``: the form is on the page at its own address (a revocation's
        preview), where it is shown again when sent from a page shown before.
        ``signs_out``: the form writes nothing to the ledger (sign-out), so sent
        from a page shown before it is done all the same (a stale tab on a shared
        machine must not leave its reader signed in)."""

        async def post(request: Request) -> Response:
            if another_site(request):
                # Whatever its token: the browser says no page of this console sent it.
                # Answered without touching the session (its messages stay for its pages).
                return self._refused(request, None, "CSRF check failed")
            cookie = request.cookies.get(COOKIE)
            session = self.store.get(cookie)
            form = await read_form(request)
            if session is None and cookie:
                # A session that ended (idle too long, too old, the server restarted):
                # say so, rather than call the form forged.
                if signs_out:
                    return self._ended(request, SIGNED_OUT, kind="ok")
                return self._ended(request, ENDED, back=self._back_to(request, form, own_page))
            if session is not None and not session.signed_in:
                # Signed out (in another tab: the cookie names that tab's new session)
                # since the form was shown; nobody is signed in, so nothing is forged.
                session.flash("ok" if signs_out else "error", SIGNED_OUT if signs_out else ENDED)
                return RedirectResponse("/", status_code=303)
            sent = form.get("csrf")
            if session is None or not session.csrf_ok(sent):
                earlier = session is not None and session.was_earlier(sent)
                if session is not None and (earlier or _same_origin(request)):
                    if signs_out:
                        request.state.principal = session.principal
                        return await handler(request, session)
                    return self._shown_before(request, session, form, own_page, earlier)
                return self._refused(request, session, "CSRF check failed")
            # for the access log: a form the session sent (not one forged in its name)
            request.state.principal = session.principal
            try:
                return await handler(request, session)
            except AuthenticationError:
                self.store.drop(session.sid)
                _, typed = _typed(form)
                kept = any(value.strip() for value in typed.values())
                return self._ended(
                    request,
                    "Your token is no longer valid; nothing was written. Sign in again"
                    + (
                        " (with a token of yours: what you typed is kept for you)." if kept else "."
                    ),
                    session,
                    back=self._back_to(request, form, own_page),
                    typed=typed if kept else None,
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

    def _shown_before(
        self,
        request: Request,
        session: ConsoleSession,
        form: Mapping[str, Any],
        own_page: bool,
        earlier: bool,
    ) -> Response:
        """A form from a page shown before this browser last signed in (its CSRF
        token is an earlier session's, or a page of this console sent it): not
        forged, but not this session's, so nothing is written. The page is shown
        again as it is now; ``earlier``: the token is one of this principal's
        earlier sessions', and what was typed in the form is filled in again (a
        token this session does not know may be another principal's, whose text
        the one signed in now must neither read nor send as theirs)."""
        _, typed = _typed(form)
        written = any(value.strip() for value in typed.values())
        kept = earlier and written
        if kept:
            session.keep_refused(request.url.path, typed)
        # What became of the form: the next page takes the focus to it.
        session.flash("error", Result(shown_before(kept, dropped=written and not earlier)))
        return RedirectResponse(self._back_to(request, form, own_page), status_code=303)

    def _back_to(self, request: Request, form: Mapping[str, Any], own_page: bool) -> str:
        """The page a form came from: its own address, or the form's ``next``."""
        return request.url.path if own_page else self._back(request, form, "/")

    def _ended(
        self,
        request: Request,
        message: str,
        ended: ConsoleSession | None = None,
        kind: str = "error",
        back: str = "/",
        typed: dict[str, str] | None = None,
    ) -> Response:
        """To the sign-in page of a new session that shows ``message`` and returns to
        ``back`` once signed in (``ended``: the session it follows in this browser;
        ``kind``: the message's). ``typed``: what was typed into the form, filled in
        again there if ``ended``'s principal signs in (no one else sees it)."""
        session = self.store.new() if ended is None else self.store.after(ended)
        session.flash(kind, message)
        if typed is not None and ended is not None:
            session.keep_refused(request.url.path, typed)
        if masked(unquote(back)) != unquote(back):
            back = "/"  # a token in the address is not carried on (nor into history)
        target = "/" if back == "/" else "/?" + urlencode({"next": back})
        response = RedirectResponse(target, status_code=303)
        self._set_cookie(request, response, session)
        return response

    @staticmethod
    def _back(request: Request, form: Mapping[str, Any], default: str) -> str:
        """The local page to return to after a form (never another site)."""
        target = form.get("next")
        if isinstance(target, str) and LOCAL_PATH.fullmatch(target):
            return target
        return default

    async def _act(
        self,
        request: Request,
        session: ConsoleSession,
        action: Callable[[Session, Mapping[str, Any]], str],
        default_back: str,
        doing: str,
        again: str | None = None,
    ) -> Response:
        """Run a write from a form; its message (or the refusal) shows on the next page.
        ``doing``: what the form asks, as a refusal names it ("Rejection of C1");
        ``again``: the form's own page, where it is filled in again when refused for
        what was typed or a lock (:data:`~ledger.serve.refusals.TYPED_OR_BUSY`)."""
        values, typed = _typed(await read_form(request))
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
            refusal = refused_write(exc, doing, subject, self.ledger.url)
            session.flash("error", refusal)
            # the field it is about, among those typed (none for the form as a whole)
            field = field_of(exc, typed) if typed else None
            session.keep_refused(request.url.path, typed, field, refusal)
            if again is not None and isinstance(exc, TYPED_OR_BUSY):
                return RedirectResponse(again, status_code=303)
        except PreviewChanged as exc:
            session.flash("error", str(exc))
            session.keep_refused(request.url.path, {**typed, **exc.kept})
            return RedirectResponse(exc.back, status_code=303)
        return RedirectResponse(self._back(request, values, default_back), status_code=303)

    async def _gather(
        self,
        request: Request,
        session: ConsoleSession,
        template: str,
        load: Callable[[Session, Moment, Access], dict[str, Any]],
        name: str,
    ) -> Response:
        """Load a page's data in a worker thread (as of the page's moment) and render
        it; ``name``: the page's, for the title of the page that refuses it."""
        try:
            moment = Moment.of(request.query_params)
        except InvalidInputError as exc:
            return self._moment_refused(request, session, exc, name)

        def run() -> tuple[dict[str, Any], int | None]:
            live = self._live(session)
            access = Access.of(live)
            try:
                then = moment.session(live)
            except InvalidInputError as exc:  # beyond the log, after the ledger's clock
                raise _MomentRefused(exc) from None
            try:
                return load(then, moment, access), then.position
            except (UnknownRecordError, UnknownDeliveryError) as exc:
                if then.position is None:
                    raise
                # Unknown then, not for ever: it may have been proposed since.
                raise retold(
                    exc,
                    f"{exc} as of log position {then.position}: one proposed "
                    "since is not there yet (the page of now shows it)",
                ) from None

        try:
            context, through = await run_in_threadpool(run)
        except AuthenticationError:
            raise
        except _MomentRefused as refused:
            return self._moment_refused(request, session, refused.error, name)
        except LedgerError as exc:
            return self.error_page(request, session, exc, moment, name)
        shown = replace(moment, through=through)  # the position the page really shows
        return self.render(request, session, template, moment=shown, **context)


def _same_origin(request: Request) -> bool:
    """Whether the browser says a page of this console sent the request (a form of
    another site, or of another origin of the same site, says otherwise)."""
    return request.headers.get("sec-fetch-site") == "same-origin"


def _token_in_address(request: Request) -> str | None:
    """Why a page's address is refused for holding a token, or None."""
    try:
        check_no_token(request.query_params.multi_items())
    except FieldError as exc:
        return str(exc)
    return None


def another_site(request: Request) -> bool:
    """Whether the browser says another origin sent the request (``Sec-Fetch-Site``
    ``same-site`` or ``cross-site``): no page of this console did (``same-origin``),
    nor the reader (``none``). A browser that sends no such header says nothing."""
    site = request.headers.get("sec-fetch-site")
    return site is not None and site not in ("same-origin", "none")
