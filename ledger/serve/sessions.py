"""The review console's sign-in sessions, kept in the server's memory.

The browser holds only a random session id (an HttpOnly, SameSite=Lax cookie:
see :func:`set_cookie`); the ledger token it signed in with stays here, next to
the session's CSRF token (a synchronizer token every form sends back). Signing
in replaces the session id, so an id planted before sign-in is worthless
afterwards. The sign-in form's CSRF token is a keyed hash of its session id, so
the form still works after its anonymous session was evicted by others' requests.
Sessions end on sign-out, after :attr:`SessionStore.idle` seconds unused, or
:attr:`SessionStore.lifetime` seconds after sign-in; restarting the server ends
them all. A session that follows another in the same browser (sign-out, sign-in,
a token no longer valid) remembers the CSRF tokens before it, so that a form on
a page shown before is told apart from a forged one (it is refused all the same).
They are one principal's: signing in as another forgets them, so a tab of the
principal before (on a shared machine) gives the next one none of its text.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from starlette.responses import Response

COOKIE = "provledger_session"
#: How many of the browser's earlier CSRF tokens a session remembers.
EARLIER = 8
#: How many of its latest decisions a session remembers (see :meth:`ConsoleSession.sending`).
DECISIONS = 32
#: For how long (seconds) a page asked for again shows the messages it showed.
RESHOWN = 3.0


class Result(str):
    """A message that says what a form just did (a decision, or its refusal): the
    page that shows it moves the keyboard's focus to it (see
    :meth:`ConsoleSession.results`). Otherwise the message itself."""

    __slots__ = ()


@dataclass
class _Sent:
    """A decision a session sent: its forms go to the ledger one at a time
    (``lock``), and ``taken_at`` is the record's position (its newest change)
    once the ledger took one (None: none taken)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    taken_at: int | None = None


@dataclass(frozen=True)
class Refused:
    """A form the ledger refused: the path it was sent to, what was typed into it,
    the field the refusal is about (None: the form as a whole) and the message."""

    action: str
    values: dict[str, str]
    field: str | None = None
    message: str = ""


@dataclass
class ConsoleSession:
    """One browser's session: its CSRF token and, once signed in, its ledger token
    (none of the three secrets is in its ``repr``)."""

    sid: str = field(repr=False)
    csrf: str = field(repr=False)
    created: float
    seen: float
    token: str | None = field(default=None, repr=False)
    principal: str | None = None
    flashes: list[tuple[str, str]] = field(default_factory=list)
    #: The page the last messages were shown on, when, and they (see take_flashes).
    shown: tuple[str, float, list[tuple[str, str]]] | None = field(default=None, repr=False)
    #: Forms answered (redirected) whose answer no page has shown yet.
    unseen: int = 0
    #: The last form the ledger refused, to be given back on the next page.
    refused: Refused | None = field(default=None, repr=False)
    #: The CSRF tokens of this browser's earlier sessions, newest first.
    earlier: tuple[str, ...] = field(default=(), repr=False)
    #: The principal those earlier sessions were signed in as (one: see
    #: :meth:`SessionStore.sign_in`); None when there were none.
    earlier_of: str | None = None
    #: The scope and the id (as proposed) of the record its latest decision was on,
    #: until the next page: the queue shown then links to the card after it (the
    #: keyboard's way on).
    decided: tuple[str, str] | None = None
    #: Its latest decisions ("accept M1"), oldest first: see :meth:`sending`.
    decisions: OrderedDict[str, _Sent] = field(default_factory=OrderedDict, repr=False)

    @property
    def signed_in(self) -> bool:
        """Whether a token was accepted for this session."""
        return self.token is not None

    def flash(self, kind: str, message: str) -> None:
        """Show ``message`` on the next page (``kind``: ``ok`` or ``error``)."""
        self.flashes.append((kind, message))
        del self.flashes[:-5]

    def take_flashes(self, page: str) -> list[tuple[str, str]]:
        """The messages to show now on ``page`` (its path and query), then forgotten.
        With none new, the page asked for next after showing some shows them once
        more if it is the same page, less than :data:`RESHOWN` seconds later, and
        a form's answer is still unseen: a form sent twice (a double click) is
        answered by two redirects to one page, and the browser shows the second,
        abandoning the first, which took the messages of both. (A page opened
        again after its form's answer was seen shows nothing again.)"""
        out, self.flashes = self.flashes, []
        now, shown, self.shown = time.monotonic(), self.shown, None
        if out:
            self.shown = (page, now, out)
        elif (
            shown is not None and self.unseen > 0 and shown[0] == page and now - shown[1] < RESHOWN
        ):
            out = shown[2]
        if out:
            self.unseen = max(0, self.unseen - 1)
        return out

    def results(self) -> None:
        """Mark the messages waiting to be shown as saying what a form just did
        (:class:`Result`): the next page moves the focus to them; one more form's
        answer is unseen (:meth:`take_flashes`)."""
        self.flashes = [(kind, Result(message)) for kind, message in self.flashes]
        self.unseen += 1

    def deciding(self, decision: str) -> _Sent:
        """The session's note of ``decision`` (``"accept M1"``), made if new: its
        forms go to the ledger one at a time, under its ``lock``. The latest
        :data:`DECISIONS` are kept."""
        sent = self.decisions.pop(decision, None) or _Sent()
        self.decisions[decision] = sent
        while len(self.decisions) > DECISIONS:
            self.decisions.popitem(last=False)
        return sent

    def taken(self, decision: str, position: int) -> None:
        """Note that the ledger took a form of ``decision``, leaving its record's
        newest change at ``position``."""
        sent = self.decisions.get(decision)
        if sent is not None:
            sent.taken_at = position

    def sent_again(self, decision: str, position: int) -> bool:
        """Whether a form of ``decision`` the ledger refuses now is this session's
        own sent again (a double click, a page sent again from the history): the
        ledger took an earlier one, and the record has not changed since (its
        newest change is still at ``position``). Forms of one decision go one at a
        time (:meth:`deciding`), so a second is judged once the first is back."""
        sent = self.decisions.get(decision)
        return sent is not None and sent.taken_at == position

    def made(self, record_id: str, position: int) -> str | None:
        """Which of this session's decisions on ``record_id`` the ledger took last,
        leaving the record as it is (its newest change at ``position``): ``"accept"``,
        …; None if none did (another principal changed it since, or none was sent)."""
        for decision, sent in reversed(self.decisions.items()):
            verb, _, rid = decision.partition(" ")
            if rid == record_id and sent.taken_at == position:
                return verb
        return None

    def keep_refused(
        self,
        action: str,
        values: dict[str, str],
        field: str | None = None,
        message: str = "",
    ) -> None:
        """Keep what was typed into a form sent to ``action`` that was refused, so
        the next page fills it in again (a long correction note is not lost to a
        mistyped record id) and marks ``field``, the one at fault, with ``message``."""
        self.refused = Refused(action, values, field, message)

    def take_refused(self) -> Refused | None:
        """The refused form to fill in again now (then forgotten)."""
        out, self.refused = self.refused, None
        return out

    def csrf_ok(self, sent: object) -> bool:
        """Whether ``sent`` is this session's CSRF token (constant-time)."""
        return isinstance(sent, str) and hmac.compare_digest(sent.encode(), self.csrf.encode())

    def was_earlier(self, sent: object) -> bool:
        """Whether ``sent`` is the CSRF token of an earlier session of this browser
        (a page shown before it signed out, or in again): not forged, but stale."""
        if not isinstance(sent, str) or not sent:
            return False
        found = False
        for token in self.earlier:  # every one compared, in constant time
            found |= hmac.compare_digest(sent.encode(), token.encode())
        return found


def set_cookie(response: Response, session: ConsoleSession, *, secure: bool) -> None:
    """Give the browser ``session``'s id: HttpOnly, and SameSite=Lax, so a link from
    another site (chat, email) arrives signed in while a form another site submits
    arrives without it. That is safe because no console GET changes anything, every
    write is a POST with the session's CSRF token, and a POST without the cookie is
    answered without one. (Strict sent no cookie with such a link, and the new
    session's cookie answering it signed the reviewer out.)"""
    response.set_cookie(COOKIE, session.sid, httponly=True, samesite="lax", secure=secure, path="/")


class SessionStore:
    """Sessions by id, least recently used first, at most ``capacity`` anonymous
    ones and ``capacity`` signed-in ones: each kind evicts only its own, so
    requests without a cookie (each opens an anonymous session for the sign-in
    form's CSRF token) can never push a signed-in reviewer out. A principal keeps
    at most ``per_principal`` signed-in sessions (signing in again ends its own
    least recently used one), so one token signing in over and over cannot push
    other principals out either."""

    def __init__(
        self,
        *,
        idle: float = 8 * 3600,
        lifetime: float = 24 * 3600,
        capacity: int = 10_000,
        per_principal: int = 20,
    ) -> None:
        self.idle = idle
        self.lifetime = lifetime
        self.capacity = capacity
        self.per_principal = per_principal
        self._anonymous: OrderedDict[str, ConsoleSession] = OrderedDict()
        self._signed_in: OrderedDict[str, ConsoleSession] = OrderedDict()
        self._lock = threading.Lock()
        #: Signs anonymous sessions' CSRF tokens (see :meth:`vouched`); one per store.
        self._key = secrets.token_bytes(32)

    def __len__(self) -> int:
        return len(self._anonymous) + len(self._signed_in)

    def new(self) -> ConsoleSession:
        """A fresh anonymous session (it carries a CSRF token for the sign-in form)."""
        session = self.passing()
        with self._lock:
            self._keep(self._anonymous, session)
        return session

    def after(self, ended: ConsoleSession) -> ConsoleSession:
        """A fresh anonymous session for the browser whose session ``ended`` (signed
        out, its token no longer valid), remembering that one's CSRF tokens."""
        session = self.new()
        session.earlier = (ended.csrf, *ended.earlier)[:EARLIER]
        session.earlier_of = ended.principal or ended.earlier_of
        return session

    def passing(self) -> ConsoleSession:
        """A fresh anonymous session that is not kept (a page shown to a browser that
        is given no cookie, such as a 404, needs one to render)."""
        now = time.monotonic()
        sid = secrets.token_urlsafe(32)
        return ConsoleSession(sid=sid, csrf=self._signed(sid), created=now, seen=now)

    def vouched(self, sid: str | None, sent: object) -> ConsoleSession | None:
        """The anonymous session ``sid`` again, kept anew, when ``sent`` is the CSRF
        token this store gave that session's sign-in form; None otherwise. Anonymous
        sessions are evicted by everyone's requests without a cookie (each opens
        one), so a sign-in form must not depend on its session still being kept:
        a flood of such requests would otherwise keep anyone from signing in."""
        if not sid or not isinstance(sent, str):
            return None
        if not hmac.compare_digest(sent.encode(), self._signed(sid).encode()):
            return None
        now = time.monotonic()
        session = ConsoleSession(sid=sid, csrf=sent, created=now, seen=now)
        with self._lock:
            self._keep(self._anonymous, session)
        return session

    def _signed(self, sid: str) -> str:
        digest = hmac.new(self._key, sid.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()

    def get(self, sid: str | None) -> ConsoleSession | None:
        """The live session with that id, or None (unknown, idle too long or too old)."""
        if not sid:
            return None
        now = time.monotonic()
        with self._lock:
            for kind in (self._signed_in, self._anonymous):
                session = kind.get(sid)
                if session is None:
                    continue
                if now - session.seen > self.idle or now - session.created > self.lifetime:
                    del kind[sid]
                    return None
                session.seen = now
                kind.move_to_end(sid)
                return session
            return None

    def sign_in(self, old: ConsoleSession, token: str, principal: str) -> ConsoleSession:
        """Replace ``old`` by a new signed-in session (new id, new CSRF token). It
        remembers the browser's earlier CSRF tokens only when they were
        ``principal``'s own: a form from a tab of whoever used the browser before
        is then refused, not filled in again on the page of the one signed in now."""
        session = self._fresh()
        session.token = token
        session.principal = principal
        if (old.principal or old.earlier_of) in (None, principal):
            session.earlier = (old.csrf, *old.earlier)[:EARLIER]
            session.earlier_of = principal
        if old.earlier_of == principal:  # a form of theirs refused as their token ended
            session.refused = old.refused
        with self._lock:
            self._anonymous.pop(old.sid, None)
            self._signed_in.pop(old.sid, None)
            mine = [sid for sid, s in self._signed_in.items() if s.principal == principal]
            for sid in mine[: max(0, len(mine) - self.per_principal + 1)]:
                del self._signed_in[sid]  # its own least recently used first
            self._keep(self._signed_in, session)
        return session

    def drop(self, sid: str) -> None:
        """End a session (sign-out)."""
        with self._lock:
            self._anonymous.pop(sid, None)
            self._signed_in.pop(sid, None)

    @staticmethod
    def _fresh() -> ConsoleSession:
        now = time.monotonic()
        return ConsoleSession(
            sid=secrets.token_urlsafe(32), csrf=secrets.token_urlsafe(32), created=now, seen=now
        )

    def _keep(self, kind: OrderedDict[str, ConsoleSession], session: ConsoleSession) -> None:
        kind[session.sid] = session
        while len(kind) > self.capacity:
            kind.popitem(last=False)
