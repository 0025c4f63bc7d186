"""The review console of ``provledger serve``: sign-in, CSRF, the queue, record pages,
revocation with a preview, what needs attention, as-of browsing and isolation.

Driven over HTTP against the ASGI app (the browser tests drive the same pages in
Chromium); on every backend.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import pytest
from starlette.testclient import TestClient

from ledger import Kind, Ledger, Session
from ledger.serve import create_app
from ledger.serve.pages import MAX_DEPENDENCIES
from ledger.serve.sessions import COOKIE, SessionStore

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(page: str) -> str:
    """The CSRF token a page's forms carry."""
    found = _CSRF.search(page)
    assert found is not None, "the page has no form with a CSRF token"
    return found.group(1)


def card_of(page: str, record_id: str) -> str:
    """The queue card of one candidate."""
    card = page[page.index(f'id="c-{record_id}"') :]
    ends = [i for i in (card.find('<li class="card candidate"'), card.find("</ol>")) if i >= 0]
    return card[: min(ends)]


def text_of(page: str) -> str:
    """A page's text, tags removed and whitespace collapsed (what a reader sees)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def prose_of(page: str) -> str:
    """:func:`text_of`, without the space a tag left before punctuation ("L1, which")."""
    return re.sub(r" ([,.:;)])", r"\1", text_of(page))


@dataclass
class Desk:
    """A ledger behind the app, the library sessions and tokens of its principals."""

    ledger: Ledger
    app: Any
    agent: Session
    reviewer: Session
    tokens: dict[str, str]

    def browser(self) -> TestClient:
        """A new client with its own cookie jar (no redirects followed)."""
        return TestClient(self.app, follow_redirects=False)

    def signed_in(self, who: str) -> tuple[TestClient, str]:
        """A client signed in as ``who`` and its session's CSRF token."""
        client = self.browser()
        page = client.get("/")
        r = client.post("/signin", data={"token": self.tokens[who], "csrf": csrf_of(page.text)})
        assert r.status_code == 303
        queue = client.get("/")
        assert f"Signed in as <strong>{who}</strong>" in queue.text
        return client, csrf_of(queue.text)


@pytest.fixture
def desk(ledger: Ledger) -> Iterator[Desk]:
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant(
        "reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver", "propose"]
    )
    admin.grant("reviewer-2", scope="proj-a", roles=["approve", "read"])
    admin.grant("outsider", scope="proj-b", roles=["read", "approve", "deliver", "propose"])
    tokens = {n: admin.issue_token(n) for n in ("agent-1", "reviewer", "reviewer-2", "outsider")}
    app = create_app(ledger, mcp_factory=None)
    yield Desk(
        ledger=ledger,
        app=app,
        agent=ledger.authenticate(tokens["agent-1"]),
        reviewer=ledger.authenticate(tokens["reviewer"]),
        tokens=tokens,
    )


def _seed(d: Desk) -> None:
    """E1 → M1 → R1 (delivered) accepted; M2 on E1 waits for review; S1 is the reviewer's own."""
    d.agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"retries are safe", id="E1")
    d.reviewer.accept("E1")
    d.agent.propose(
        scope="proj-a", claim_key="api.retry_safe", value=True, kind=Kind.INFERENCE,
        parents=["E1"], id="M1",
    )  # fmt: skip
    d.reviewer.accept("M1")
    d.agent.propose(
        scope="proj-a", claim_key="report.weekly", value="retries on", kind=Kind.REPORT,
        parents=["M1"], id="R1",
    )  # fmt: skip
    d.reviewer.accept("R1")
    d.reviewer.deliver("R1", recipient="ops@x.test")
    d.agent.propose(
        scope="proj-a", claim_key="api.dedupe_window_s", value=30, kind=Kind.INFERENCE,
        parents=["E1"], id="M2",
    )  # fmt: skip
    d.reviewer.propose(
        scope="proj-a", claim_key="team.style", value="dry-run first", kind=Kind.USER_PREFERENCE,
        id="S1",
    )  # fmt: skip


# -- sign-in, cookies, CSRF --------------------------------------------------------------------


def test_requests_without_a_cookie_never_push_a_signed_in_reviewer_out(ledger: Ledger) -> None:
    # Each request without a cookie opens an anonymous session (the sign-in form's
    # CSRF token); the store's own settings are used (an empty store is still one).
    admin = ledger.admin()
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
    store = SessionStore(capacity=5)
    desk = Desk(ledger, create_app(ledger, mcp_factory=None, sessions=store), None, None, {})  # type: ignore[arg-type]
    desk.tokens["reviewer"] = admin.issue_token("reviewer")
    client, _ = desk.signed_in("reviewer")
    for _ in range(40):
        desk.browser().get("/")  # a signed-out page
        desk.browser().get("/no/such/page")  # the 404 page
    assert 0 < len(store) <= 2 * store.capacity
    assert "Signed in as <strong>reviewer</strong>" in client.get("/").text
    # The store on its own: anonymous sessions evict only anonymous ones
    signed = store.sign_in(store.new(), "plt_x", "someone")
    for _ in range(3 * store.capacity):
        store.new()
    assert store.get(signed.sid) is signed


def test_one_token_signing_in_again_and_again_never_pushes_another_principal_out(
    ledger: Ledger,
) -> None:
    admin = ledger.admin()
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    store = SessionStore(capacity=10)
    store.per_principal = 3
    desk = Desk(ledger, create_app(ledger, mcp_factory=None, sessions=store), None, None, {})  # type: ignore[arg-type]
    desk.tokens = {who: admin.issue_token(who) for who in ("reviewer", "agent-1")}
    reviewer, _ = desk.signed_in("reviewer")
    agents = [desk.signed_in("agent-1")[0] for _ in range(3 * store.capacity)]
    assert "Signed in as <strong>reviewer</strong>" in reviewer.get("/").text
    assert "Signed in as <strong>agent-1</strong>" in agents[-1].get("/").text
    assert 'name="token"' in agents[0].get("/").text  # its oldest session ended


def test_secure_cookies_mark_the_session_cookie_secure_behind_a_tls_proxy(ledger: Ledger) -> None:
    admin = ledger.admin()
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
    app = create_app(ledger, mcp_factory=None, secure_cookies=True)
    desk = Desk(ledger, app, None, None, {"reviewer": admin.issue_token("reviewer")})  # type: ignore[arg-type]
    client = desk.browser()  # plain http, as the server sees requests a proxy forwards
    page = client.get("/")
    assert "secure" in page.headers["set-cookie"].lower()
    # The browser talks HTTPS to the proxy, so it sends the Secure cookie back
    # (the test client, on plain http, would not: it is sent by hand).
    sent = {"Cookie": f"{COOKIE}={page.cookies[COOKIE]}"}
    r = client.post(
        "/signin",
        data={"token": desk.tokens["reviewer"], "csrf": csrf_of(page.text)},
        headers=sent,
    )
    assert r.status_code == 303
    assert "secure" in r.headers["set-cookie"].lower()
    signed = {"Cookie": f"{COOKIE}={r.cookies[COOKIE]}"}
    assert "Signed in as <strong>reviewer</strong>" in client.get("/", headers=signed).text


def test_the_revocation_preview_lists_deliveries_an_approver_without_deliver_can_see(
    desk: Desk,
) -> None:
    _seed(desk)  # R1 (on M1 on E1) delivered to ops@x.test
    client, _ = desk.signed_in("reviewer-2")  # approve + read, no deliver
    assert "ops@x.test" in client.get("/records/R1").text  # it sees the delivery
    preview = client.get("/records/E1/revoke")
    assert "Deliveries that will owe corrections (1)" in text_of(preview.text)
    assert "ops@x.test" in preview.text and "None that you can see" not in preview.text


def test_a_queue_entry_shows_a_bounded_number_of_dependencies(desk: Desk) -> None:
    # Given a candidate resting on 60 records (the ledger sets no limit)
    _seed(desk)
    many = [f"F{i:02d}" for i in range(60)]
    for rid in many:
        desk.agent.propose(scope="proj-a", claim_key=f"f.{rid}", value=1, kind=Kind.FACT, id=rid)
    desk.agent.propose(
        scope="proj-a", claim_key="wide", value=1, kind=Kind.INFERENCE, parents=many, id="A0"
    )
    # When a reviewer opens the queue
    client, _ = desk.signed_in("reviewer")
    page = client.get("/")
    assert page.status_code == 200
    # Then A0's card lists the first 25 and counts the rest, pointing to its page
    card = page.text[page.text.index('id="c-A0"') :].split('<li class="card candidate"')[0]
    parents = card[card.index('<ul class="parents">') : card.index("</ul>")]
    shown = [rid for rid in many if f'/records/{rid}"' in parents]
    assert shown == many[:MAX_DEPENDENCIES]
    assert f"and {60 - MAX_DEPENDENCIES} more: see" in text_of(card)


def test_the_sign_in_page_has_a_token_field_and_a_sign_in_button(desk: Desk) -> None:
    page = desk.browser().get("/")
    assert page.status_code == 200
    assert re.search(r'<label for="token">Token</label>', page.text)
    assert re.search(r'<input id="token" name="token" type="password"', page.text)
    assert '<button type="submit">Sign in</button>' in page.text


def test_signing_in_keeps_the_token_on_the_server_behind_a_lax_httponly_cookie(
    desk: Desk,
) -> None:
    client = desk.browser()
    first = client.get("/")
    before = first.cookies[COOKIE]
    r = client.post("/signin", data={"token": desk.tokens["reviewer"], "csrf": csrf_of(first.text)})
    assert r.status_code == 303
    set_cookie = r.headers["set-cookie"]
    assert "HttpOnly" in set_cookie
    assert "SameSite=lax" in set_cookie
    assert "Path=/" in set_cookie
    after = r.cookies[COOKIE]
    assert after != before  # a new session id on sign-in: a planted id is worthless
    assert desk.tokens["reviewer"] not in set_cookie
    assert desk.tokens["reviewer"] not in client.get("/").text


def test_a_wrong_token_is_refused_and_signs_nobody_in(desk: Desk) -> None:
    client = desk.browser()
    page = client.get("/")
    r = client.post("/signin", data={"token": "plt_wrong", "csrf": csrf_of(page.text)})
    assert r.status_code == 401
    assert "That token is unknown, revoked or expired." in r.text
    assert "Signed in as" not in client.get("/").text


def test_the_admin_token_is_told_apart_from_an_unknown_one_and_signs_nobody_in(
    desk: Desk,
) -> None:
    admin_token = desk.ledger.admin().issue_admin_token()
    client = desk.browser()
    page = client.get("/")
    r = client.post("/signin", data={"token": admin_token, "csrf": csrf_of(page.text)})
    assert r.status_code == 401
    assert "That is the ledger&#39;s admin token" in r.text
    assert "provledger token issue SUBJECT" in r.text
    assert "unknown, revoked or expired" not in r.text
    assert "Signed in as" not in client.get("/").text


def test_forms_without_this_sessions_csrf_token_are_refused_and_change_nothing(
    desk: Desk,
) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer-2")
    _other, other_csrf = desk.signed_in("reviewer")
    before = desk.ledger.position
    for data in ({}, {"csrf": "forged"}, {"csrf": other_csrf}):
        r = client.post("/records/M2/accept", data=data)
        assert r.status_code == 403
        assert "CSRF" in r.text
    for path, data in (
        ("/records/E1/revoke", {"reason": "x"}),
        ("/records/M2/reject", {"reason": "x"}),
        ("/signout", {}),
    ):
        assert client.post(path, data=data).status_code == 403
    assert desk.ledger.position == before
    assert desk.agent.get("M2").status.value == "CANDIDATE"
    assert "Signed in as" in client.get("/").text  # the refused sign-out did nothing
    fresh = desk.browser()
    fresh.get("/")
    signin = fresh.post("/signin", data={"token": desk.tokens["reviewer"]})
    assert "Signed in as" not in fresh.get("/").text
    assert signin.status_code == 303
    ok = client.post("/records/M2/accept", data={"csrf": csrf})
    assert ok.status_code == 303
    assert desk.agent.get("M2").status.value == "ACCEPTED"


def test_signing_out_ends_the_session(desk: Desk) -> None:
    client, csrf = desk.signed_in("reviewer")
    old = client.cookies[COOKIE]
    r = client.post("/signout", data={"csrf": csrf})
    assert r.status_code == 303
    replay = desk.browser()
    replay.cookies.set(COOKIE, old)
    assert replay.get("/attention").status_code == 303  # back to sign-in
    assert "Sign in" in client.get("/").text


def test_the_sign_in_and_sign_out_addresses_opened_as_pages_lead_to_the_start(
    desk: Desk,
) -> None:
    # The page of a refused token is at /signin: reached again through the
    # history, bookmarked or typed, it is the start page (it was a 405 page)
    client = desk.browser()
    client.get("/")  # the sign-in page's cookie (a POST without one sets none: 403)
    assert client.post("/signin", data={"token": "plt_wrong", "csrf": "x"}).status_code == 303
    r = client.get("/signin")
    assert (r.status_code, r.headers["location"]) == (303, "/")
    assert "Sign in" in client.get("/").text
    # and a GET of /signout signs nobody out (only the form's POST does)
    signed, _ = desk.signed_in("reviewer")
    r = signed.get("/signout")
    assert (r.status_code, r.headers["location"]) == (303, "/")
    assert "Signed in as <strong>reviewer</strong>" in signed.get("/").text


def test_a_revoked_token_signs_the_session_out(desk: Desk) -> None:
    client, _ = desk.signed_in("reviewer")
    desk.ledger.admin().revoke_token(desk.tokens["reviewer"])
    r = client.get("/attention")
    assert r.status_code == 303
    assert "no longer valid" in client.get("/").text


def test_a_form_sent_after_the_session_ended_says_so_and_writes_nothing(desk: Desk) -> None:
    _seed(desk)
    # The token revoked while the form was open
    client, csrf = desk.signed_in("reviewer-2")
    desk.ledger.admin().revoke_token(desk.tokens["reviewer-2"])
    before = desk.ledger.position
    r = client.post("/records/M2/reject", data={"csrf": csrf, "reason": "no basis"})
    assert (r.status_code, r.headers["location"]) == (303, "/")
    page = text_of(client.get("/").text)
    assert "Your token is no longer valid; nothing was written. Sign in again (with" in page
    # The session ended (here: signed out in another tab) while the form was open
    client, csrf = desk.signed_in("reviewer")
    other = desk.browser()
    other.cookies.set(COOKIE, client.cookies[COOKIE])
    other.post("/signout", data={"csrf": csrf})
    r = client.post("/records/M2/reject", data={"csrf": csrf, "reason": "no basis"})
    assert (r.status_code, r.headers["location"]) == (303, "/")
    page = text_of(client.get("/").text)
    assert "Your session ended before the form was sent; nothing was written." in page
    assert desk.ledger.position == before


def test_a_form_refused_as_its_token_ended_returns_to_its_page_with_what_was_typed(
    desk: Desk,
) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer-2")
    desk.ledger.admin().revoke_token(desk.tokens["reviewer-2"])
    before = desk.ledger.position
    sent = {"csrf": csrf, "reason": "no basis given", "next": "/records/M2"}
    r = client.post("/records/M2/reject", data=sent)
    # Sent to sign in, then back to the record's page
    assert (r.status_code, r.headers["location"]) == (303, "/?next=%2Frecords%2FM2")
    page = client.get(r.headers["location"]).text
    assert "what you typed is kept for you" in text_of(page)
    # Signed in again as reviewer-2 (a new token), the reason is filled in again
    desk.tokens["reviewer-2"] = desk.ledger.admin().issue_token("reviewer-2")
    signed = client.post(
        "/signin",
        data={"token": desk.tokens["reviewer-2"], "csrf": csrf_of(page), "next": "/records/M2"},
    )
    assert (signed.status_code, signed.headers["location"]) == (303, "/records/M2")
    assert "no basis given" in client.get("/records/M2").text
    assert desk.ledger.position == before + 1  # the new token's event alone
    # Whoever else signs in on that browser is not shown it
    client, csrf = desk.signed_in("reviewer-2")
    desk.ledger.admin().revoke_token(desk.tokens["reviewer-2"])
    client.post("/records/M2/reject", data={**sent, "csrf": csrf})
    page = client.get("/?next=%2Frecords%2FM2").text
    client.post(
        "/signin",
        data={"token": desk.tokens["reviewer"], "csrf": csrf_of(page), "next": "/records/M2"},
    )
    shown = client.get("/records/M2").text
    assert "Signed in as <strong>reviewer</strong>" in shown
    assert "no basis given" not in shown


def test_a_form_refused_as_its_token_ended_carries_no_token_into_the_sign_in_address(
    desk: Desk,
) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer-2")
    desk.ledger.admin().revoke_token(desk.tokens["reviewer-2"])
    page = "/?scope=proj-a&after=" + desk.tokens["reviewer"]  # a token in the address
    r = client.post("/records/M2/reject", data={"csrf": csrf, "reason": "x", "next": page})
    assert (r.status_code, r.headers["location"]) == (303, "/")


# -- the queue ----------------------------------------------------------------------------------


def test_the_queue_shows_each_candidate_with_its_evidence_and_parents(desk: Desk) -> None:
    _seed(desk)
    client, _ = desk.signed_in("reviewer-2")
    page = client.get("/")
    text = text_of(page.text)
    assert "Scope proj-a" in text
    assert "api.dedupe_window_s" in text and "30" in text
    assert "inference" in text and "agent-1" in text
    e1 = desk.agent.get("E1")
    assert e1.evidence is not None
    assert "https://x.test/doc" in text
    assert e1.evidence["content_hash"] in text
    assert f'href="/snapshots/{e1.evidence["snapshot_ref"]}"' in page.text
    assert 'href="/records/E1"' in page.text
    assert 'action="/records/M2/accept"' in page.text
    assert "Reject…" in text
    assert "M1" not in re.findall(r'action="/records/([^/"]+)/accept"', page.text)


def test_self_approval_is_visibly_impossible_in_the_queue(desk: Desk) -> None:
    _seed(desk)
    client, _ = desk.signed_in("reviewer")
    page = client.get("/").text
    card = card_of(page, "S1")
    assert re.search(
        r'<button type="submit" class="accept" disabled aria-describedby="why-S1">', card
    )
    assert re.search(
        r'<button type="button" class="danger" disabled aria-describedby="why-S1">', card
    )
    assert "You proposed this record: another approver must review it." in card
    assert 'action="/records/S1/reject"' not in card
    assert re.search(
        r'class="accept">Accept<span class="visually-hidden"> M2</span></button>',
        card_of(page, "M2"),
    )


def test_a_candidate_whose_parent_is_not_accepted_cannot_be_accepted_yet(desk: Desk) -> None:
    desk.agent.capture(scope="proj-a", uri="https://x.test/new", content=b"n", id="E9")
    desk.agent.propose(
        scope="proj-a", claim_key="c", value=1, kind=Kind.INFERENCE, parents=["E9"], id="M9"
    )
    client, _ = desk.signed_in("reviewer")
    page = client.get("/").text
    assert "Its dependency E9 is CANDIDATE; settle that first." in card_of(page, "M9")


def test_accepting_and_rejecting_from_the_queue(desk: Desk) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer-2")
    r = client.post("/records/M2/accept", data={"csrf": csrf, "next": "/"})
    assert (r.status_code, r.headers["location"]) == (303, "/")
    assert "Accepted M2." in client.get("/").text
    assert desk.agent.get("M2").status.value == "ACCEPTED"
    empty = client.post("/records/S1/reject", data={"csrf": csrf, "reason": "  "})
    assert empty.status_code == 303
    assert "Rejection of S1 refused" in client.get("/").text
    assert desk.agent.get("S1").status.value == "CANDIDATE"
    client.post("/records/S1/reject", data={"csrf": csrf, "reason": "not a team rule"})
    assert desk.agent.get("S1").status.value == "REJECTED"
    assert desk.agent.get("S1").reason == "not a team rule"


def test_after_a_decision_the_queue_links_on_to_the_card_after_it(desk: Desk) -> None:
    # Given four candidates in proj-a, Q1 to Q4
    for n in range(1, 5):
        desk.agent.propose("proj-a", f"q.k{n}", n, Kind.FACT, id=f"Q{n}")
    client, csrf = desk.signed_in("reviewer-2")
    # The scope's heading reads as words (its name and its count apart)
    assert re.search(r">Scope proj-a\s+<span class=\"count\">4 candidates<", client.get("/").text)
    # When a reviewer skips Q1 and Q2 and accepts Q3 from the queue
    client.post("/records/Q3/accept", data={"csrf": csrf, "next": "/"})
    page = client.get("/").text
    # Then the page it lands on, right after what was done (which has the focus),
    # links on to Q4, the card after Q3
    told = page.index('id="result"')
    link = page.index('<a href="#c-Q4">Go on with the next candidate, Q4</a>')
    assert told < link < page.index('id="c-Q1"')
    assert 'id="c-Q4"' in page
    # and once shown, the link is gone; after the last card, none is given
    assert "Go on with the next candidate" not in client.get("/").text
    client.post("/records/Q4/reject", data={"csrf": csrf, "reason": "no", "next": "/"})
    assert "Go on with the next candidate" not in client.get("/").text


def test_accepting_a_rival_from_a_card_shown_before_says_the_claim_reads_conflict(
    desk: Desk,
) -> None:
    # Two candidates answer db.host differently; the card of NEW2 was shown when
    # nothing disagreed with it, then another reviewer accepted NEW1.
    for rid, value in (("NEW1", "a.example"), ("NEW2", "b.example")):
        desk.agent.propose(scope="proj-a", claim_key="db.host", value=value, kind=Kind.FACT, id=rid)
    client, csrf = desk.signed_in("reviewer-2")
    assert "NEW2" in client.get("/").text
    desk.reviewer.accept("NEW1")

    r = client.post("/records/NEW2/accept", data={"csrf": csrf, "next": "/"})

    assert r.status_code == 303
    page = client.get("/").text
    assert (
        "Accepted NEW2. Its claim db.host reads CONFLICT now: it disagrees with NEW1 "
        "(Explain shows each)." in page
    )
    assert desk.agent.read("proj-a", "db.host").outcome.value == "CONFLICT"
    # a record agreeing with one of them is said to disagree only with the other
    desk.agent.propose(
        scope="proj-a", claim_key="db.host", value="a.example", kind=Kind.FACT, id="NEW3"
    )
    client.post("/records/NEW3/accept", data={"csrf": csrf, "next": "/"})
    assert "Accepted NEW3. Its claim db.host reads CONFLICT now: it disagrees with NEW2 " in (
        client.get("/").text
    )
    # an acceptance that leaves its claim FOUND says nothing more
    desk.agent.propose(scope="proj-a", claim_key="db.port", value=1, kind=Kind.FACT, id="P1")
    client.post("/records/P1/accept", data={"csrf": csrf, "next": "/"})
    assert "Accepted P1.</" in client.get("/").text.replace("\n", "")


def test_a_refused_action_says_why_on_the_next_page(desk: Desk) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer")
    client.post("/records/S1/accept", data={"csrf": csrf})
    page = client.get("/").text
    assert "Acceptance of S1 refused (SelfApprovalError)" in page
    assert 'role="alert"' in page


def _messages(page: str) -> list[tuple[str, str]]:
    """The messages shown atop a page: (``status`` or ``alert``, text)."""
    return [
        (role, text_of(body))
        for role, body in re.findall(r'<p class="flash [^"]*" role="(\w+)"[^>]*>(.*?)</p>', page)
    ]


def test_a_form_over_the_limit_gets_a_page_of_the_console_saying_what_to_do(desk: Desk) -> None:
    from ledger.serve.app import MAX_FORM_BODY

    # Given a reviewer rejecting with a reason longer than any form the console takes
    _seed(desk)
    client, csrf = desk.signed_in("reviewer-2")
    before = desk.ledger.position
    reason = "x" * (MAX_FORM_BODY + 1)
    refused = client.post("/records/M2/reject", data={"csrf": csrf, "reason": reason})
    # Then a page in the console's language and layout says so; nothing is written
    assert refused.status_code == 413
    page = refused.text
    assert '<html lang="en">' in page and 'name="viewport"' in page
    assert '<link rel="stylesheet" href="/static/console.css">' in page
    assert _messages(page) == [
        (
            "alert",
            f"What was sent is over the console's limit of {MAX_FORM_BODY:,} bytes, and "
            "nothing was written. Go back (your browser keeps what you typed), shorten "
            "it, and send it again.",
        )
    ]
    assert '<a href="/">' in page
    assert desk.ledger.position == before


def test_a_decision_sent_twice_at_once_is_told_on_the_page_the_browser_shows(desk: Desk) -> None:
    # Given a reviewer on a record's page
    _seed(desk)
    client, csrf = desk.signed_in("reviewer-2")
    # When Accept is sent twice before either answer is followed (a double click on
    # a slow link: two redirects to one page; the browser abandons the first)
    for _ in range(2):
        sent = client.post("/records/M2/accept", data={"csrf": csrf, "next": "/records/M2"})
        assert sent.headers["location"] == "/records/M2"
    abandoned = _messages(client.get("/records/M2").text)
    shown = _messages(client.get("/records/M2").text)
    # Then the page shown tells what was done, as the abandoned one would have
    told = [
        ("status", "Accepted M2."),
        ("status", "M2 is ACCEPTED: you accepted it already, and sending the form again "
                   "changed nothing."),
    ]  # fmt: skip
    assert abandoned == told and shown == told
    # but another page, or the page once the moment has passed, tells nothing again
    assert _messages(client.get("/").text) == []
    assert _messages(client.get("/records/M2").text) == []
    # nor does the page of a form sent once, opened again at once (its answer seen)
    desk.agent.propose(scope="proj-a", claim_key="x.once", value=1, kind=Kind.FACT, id="X1")
    client.post("/records/X1/reject", data={"csrf": csrf, "reason": "no", "next": "/records/X1"})
    assert _messages(client.get("/records/X1").text) == [("status", "Rejected X1.")]
    assert _messages(client.get("/records/X1").text) == []


def test_a_decision_sent_twice_shows_what_the_first_did_not_a_refusal(desk: Desk) -> None:
    # Given a reviewer on the queue, and a STALE-free record to revoke
    _seed(desk)
    client, csrf = desk.signed_in("reviewer-2")
    desk.agent.propose(scope="proj-a", claim_key="x.gone", value=1, kind=Kind.FACT, id="X1")
    # When Accept is sent twice (a double click: the page after the first is shown
    # to nobody, as the browser leaves it for the second)
    first = client.post("/records/M2/accept", data={"csrf": csrf, "next": "/"})
    client.get(first.headers["location"])
    before = desk.ledger.position
    second = client.post("/records/M2/accept", data={"csrf": csrf, "next": "/"})
    # Then the page after the second says M2 is accepted, by the first; no refusal
    assert (second.status_code, second.headers["location"]) == (303, "/")
    assert _messages(client.get("/").text) == [
        ("status", "M2 is ACCEPTED: you accepted it already, and sending the form again "
                   "changed nothing.")
    ]  # fmt: skip
    assert desk.ledger.position == before
    # And so for a rejection and a revocation sent twice
    for _ in range(2):
        client.post("/records/X1/reject", data={"csrf": csrf, "reason": "no", "next": "/"})
    assert _messages(client.get("/").text) == [
        ("status", "Rejected X1."),
        ("status", "X1 is REJECTED: you rejected it already, and sending the form again "
                   "changed nothing."),
    ]  # fmt: skip
    mark = _PREVIEW.search(client.get("/records/M2/revoke").text)
    assert mark is not None
    for _ in range(2):
        done = client.post(
            "/records/M2/revoke", data={"csrf": csrf, "reason": "wrong", "preview": mark[1]}
        )
        assert done.headers["location"] == "/records/M2"
    shown = _messages(client.get("/records/M2").text)
    assert [role for role, _ in shown] == ["status", "status"], shown
    assert shown[1][1] == (
        "M2 is REVOKED: you revoked it already, and sending the form again changed nothing."
    )
    assert desk.agent.get("X1").reason == "no"
    # But a decision another principal made first is still refused, sent twice or not
    desk.agent.propose(scope="proj-a", claim_key="x.y", value=1, kind=Kind.FACT, id="X2")
    desk.reviewer.accept("X2")
    for _ in range(2):
        client.post("/records/X2/accept", data={"csrf": csrf, "next": "/"})
    shown = _messages(client.get("/").text)
    assert [role for role, _ in shown] == ["alert", "alert"], shown
    assert all(text.startswith("Acceptance of X2 refused (InvalidTransition") for _, text in shown)
    assert all(
        text.endswith(
            "accept needs CANDIDATE: another decision came first, and nothing of yours was written"
        )
        for _, text in shown
    ), shown
    # ... and so is another decision after this reviewer's own (not a repeat of it)
    desk.agent.propose(scope="proj-a", claim_key="x.z", value=1, kind=Kind.FACT, id="X3")
    client.post("/records/X3/accept", data={"csrf": csrf, "next": "/"})
    client.post("/records/X3/reject", data={"csrf": csrf, "reason": "no", "next": "/"})
    assert [role for role, _ in _messages(client.get("/").text)] == ["status", "alert"]


def test_a_record_id_sent_with_an_encoded_slash_is_named_as_decoded(desk: Desk) -> None:
    # Given a reviewer, and the API's answer for the id "a/b"
    _seed(desk)
    client, csrf = desk.signed_in("reviewer")
    api = client.get(
        "/api/v1/records/a%2Fb", headers={"Authorization": f"Bearer {desk.tokens['reviewer']}"}
    )
    assert api.json()["error"]["message"].startswith("record id 'a/b' is invalid")
    # When its page is asked for, the slash encoded (an id's segment of the path)
    page = client.get("/records/a%2Fb")
    # Then it is the id "a/b" the page names, as the API does (no record can hold it)
    assert page.status_code == 422
    assert "<title>Check the input: Record a/b · provledger</title>" in page.text
    assert "record id 'a/b' is invalid" in text_of(page.text)
    assert "a%2F" not in text_of(page.text)
    assert "Revoke a/b?" in text_of(client.get("/records/a%2Fb/revoke").text)
    # And a decision on it is refused naming it, returning to its own page
    r = client.post("/records/a%2Fb/revalidate", data={"csrf": csrf, "note": "x"})
    assert r.headers["location"] == "/records/a%2Fb"
    refused = text_of(client.get(r.headers["location"]).text)
    assert "Revalidation of a/b refused (InvalidIdError): record id 'a/b' is invalid" in refused


def test_an_off_site_next_target_is_ignored(desk: Desk) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer-2")
    for target in (
        "//evil.test/x",
        "/\\evil.test/x",
        "https://evil.test/",
        "/x\r\nSet-Cookie: a=b",
    ):
        r = client.post("/records/NOPE/reject", data={"csrf": csrf, "next": target, "reason": "x"})
        assert r.headers["location"] == "/", target
    kept = client.post("/records/M2/accept", data={"csrf": csrf, "next": "/attention?x=1"})
    assert kept.headers["location"] == "/attention?x=1"


# -- record pages, revocation, attention ------------------------------------------------------


def test_the_record_page_shows_status_validity_reason_deliveries_audit_and_graph(
    desk: Desk,
) -> None:
    _seed(desk)
    desk.reviewer.revoke("E1", reason="doc changed")
    client, _ = desk.signed_in("reviewer")
    page = client.get("/records/R1")
    assert page.status_code == 200
    text = text_of(page.text)
    assert "Status STALE" in text and "Validity NEEDS_REVALIDATION" in text
    why = text_of(page.text[page.text.index('class="card why"') :].split("</section>")[0])
    assert "Not usable now" in why and "E1" in why and "doc changed" in why
    assert "STALE means it needs re-verification" in why
    assert "ops@x.test" in text and "DELIVERED" in text
    assert re.search(r"Proposed .* Accepted .* Delivered .* MarkedStale", text)
    svg = page.text[page.text.index("<svg") : page.text.index("</svg>")]
    assert 'role="img"' in svg
    assert "#ffcc80" in svg  # STALE's fill, as the CLI draws it
    assert "#ef9a9a" in svg  # REVOKED (E1)
    assert 'href="/records/E1"' in svg
    # E1's revocation on its node, as `provledger graph` draws it
    assert "reason: doc changed" in svg and "by reviewer at " in svg
    assert "Revoke…" in text and "Revalidate…" in text


def test_revoking_shows_what_will_go_stale_and_who_is_owed_a_correction_first(
    desk: Desk,
) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer")
    before = desk.ledger.position
    preview = client.get("/records/E1/revoke")
    assert preview.status_code == 200
    assert desk.ledger.position == before  # the preview writes nothing
    text = text_of(preview.text)
    assert "Will be marked STALE (3)" in text
    for rid in ("M1", "M2", "R1"):
        assert f'href="/records/{rid}"' in preview.text
    assert "Deliveries that will owe corrections (1)" in text
    assert "ops@x.test" in text
    assert "in scopes you hold no role in go STALE too and their deliveries owe" in text
    assert "Confirm revocation" in text
    mark = _PREVIEW.search(preview.text)
    assert mark is not None
    done = client.post(
        "/records/E1/revoke", data={"csrf": csrf, "reason": "doc changed", "preview": mark[1]}
    )
    assert (done.status_code, done.headers["location"]) == (303, "/records/E1")
    assert (
        "Revoked E1; 3 records you can see marked STALE; 1 delivery now owes a correction"
        in text_of(client.get("/records/E1").text)
    )
    assert desk.agent.get("R1").status.value == "STALE"


_PREVIEW = re.compile(r'name="preview" value="([0-9a-f]+)"')


def test_revoking_an_unknown_id_is_refused_as_a_revocation(desk: Desk) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer")
    before = desk.ledger.position
    done = client.post("/records/NOPE/revoke", data={"csrf": csrf, "reason": "x", "preview": "0"})
    assert done.status_code == 303
    text = text_of(client.get(done.headers["location"]).text)
    # (the page the form came back to is the record's own, which is not found)
    assert "Revocation of NOPE refused (UnknownRecordError): record 'NOPE' is unknown" in text
    assert desk.ledger.position == before


def test_a_revocation_whose_preview_changed_meanwhile_is_shown_again_not_done(
    desk: Desk,
) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer")
    preview = client.get("/records/M2/revoke")
    assert "Will be marked STALE (0)" in text_of(preview.text)
    mark = _PREVIEW.search(preview.text)
    assert mark is not None
    # Meanwhile, in another tab: a report on M2, accepted and delivered
    desk.reviewer.accept("M2")
    desk.agent.propose(
        scope="proj-a", claim_key="report.dedupe", value="30 s", kind=Kind.REPORT,
        parents=["M2"], id="R2",
    )  # fmt: skip
    desk.reviewer.accept("R2")
    desk.reviewer.deliver("R2", recipient="cto@x.test")
    before = desk.ledger.position
    for form in ({"preview": mark[1]}, {}):  # the old preview, and none at all
        done = client.post("/records/M2/revoke", data={"csrf": csrf, "reason": "x", **form})
        assert (done.status_code, done.headers["location"]) == (303, "/records/M2/revoke")
        again = client.get(done.headers["location"])
        text = text_of(again.text)
        assert "Nothing was revoked" in text and "now 1 record, 1 delivery" in text
        assert "Will be marked STALE (1)" in text and "cto@x.test" in text
    assert desk.ledger.position == before
    assert desk.reviewer.get("M2").status.value == "ACCEPTED"
    fresh = _PREVIEW.search(again.text)
    assert fresh is not None and fresh[1] != mark[1]
    done = client.post(
        "/records/M2/revoke", data={"csrf": csrf, "reason": "x", "preview": fresh[1]}
    )
    assert done.headers["location"] == "/records/M2"
    assert desk.reviewer.get("R2").status.value == "STALE"


@pytest.mark.parametrize("roles", [["approve", "read"], ["approve"]])
def test_a_form_whose_record_id_names_another_record_since_acts_on_nothing(
    desk: Desk, roles: list[str]
) -> None:
    # "Z" is taken in proj-b, so the agent's "Z" in proj-a is keyed Z@@proj-a and
    # shown to reviewer-2 as "Z"; then reviewer-2 is granted proj-b, where "Z" is
    # another record. The accept form it was shown must not land on that one.
    outsider = desk.ledger.authenticate(desk.tokens["outsider"])
    outsider.propose("proj-b", "b.claim", "never shown", Kind.FACT, id="Z")
    desk.agent.propose("proj-a", "a.claim", "reviewed", Kind.FACT, id="Z")
    client, csrf = desk.signed_in("reviewer-2")
    card = card_of(client.get("/").text, "Z")
    assert 'name="scope" value="proj-a"' in card and "reviewed" in card
    desk.ledger.admin().grant("reviewer-2", scope="proj-b", roles=roles)  # read or not
    before = desk.ledger.position
    form = {"csrf": csrf, "scope": "proj-a", "next": "/"}
    done = client.post("/records/Z/accept", data=form)
    assert (done.status_code, done.headers["location"]) == (303, "/records/Z")
    text = text_of(client.get("/records/Z").text)
    assert "Nothing was done: Z now names a record in scope 'proj-b'" in text
    assert desk.ledger.position == before
    assert outsider.get("Z").status.value == "CANDIDATE"
    if "read" not in roles:
        return
    # The page shown now names proj-b's; its form acts on it
    assert 'name="scope" value="proj-b"' in card_of(client.get("/").text, "Z")
    client.post("/records/Z/reject", data={**form, "scope": "proj-b", "reason": "unseen"})
    assert outsider.get("Z").status.value == "REJECTED"
    assert desk.agent.get("Z").status.value == "CANDIDATE"


@pytest.mark.parametrize("action", ["accept", "reject", "revoke", "revalidate"])
def test_a_form_naming_an_id_reused_in_a_hidden_scope_tells_nothing_of_it(
    desk: Desk, action: str
) -> None:
    # Given the agent's INV-1 and INV-2 in proj-a, then proj-b's own INV-1 (keyed
    # INV-1@@proj-b, a scope the agent holds no grant in)
    for rid in ("INV-1", "INV-2"):
        desk.agent.propose("proj-a", f"c.{rid}", 1, Kind.FACT, id=rid)
    outsider = desk.ledger.authenticate(desk.tokens["outsider"])
    outsider.propose("proj-b", "b.claim", "hidden", Kind.FACT, id="INV-1")
    client, csrf = desk.signed_in("agent-1")
    before = desk.ledger.position
    answers = []
    for rid in ("INV-1@@proj-b", "INV-2@@proj-b"):
        form = {"csrf": csrf, "scope": "proj-a", "reason": "x", "next": "/"}
        done = client.post(f"/records/{rid}/{action}", data=form, follow_redirects=True)
        answers.append((done.status_code, text_of(done.text).replace(rid, "ID")))
    # Then the form naming proj-b's record is answered as the one naming nothing
    assert answers[0] == answers[1]
    assert "proj-b" not in answers[0][1]
    assert desk.ledger.position == before
    assert outsider.get("INV-1").status.value == "CANDIDATE"


def test_needs_attention_says_why_each_correction_is_owed(desk: Desk) -> None:
    # Given M1 delivered too, then replaced by M1b: M1 is SUPERSEDED, R1 on it STALE
    _seed(desk)
    desk.reviewer.deliver("M1", recipient="m@x.test")
    desk.agent.propose(
        scope="proj-a", claim_key="api.retry_safe", value=False, kind=Kind.INFERENCE,
        parents=["E1"], supersedes="M1", id="M1b",
    )  # fmt: skip
    desk.reviewer.accept("M1b")
    due = {c.delivery.record_id: c for c in desk.reviewer.corrections_due()}
    assert due["M1"].superseded_by == "M1b" and due["M1"].cause is None
    assert (due["R1"].cause, due["R1"].cause_superseded_by) == ("M1", "M1b")
    client, _ = desk.signed_in("reviewer")
    text = text_of(client.get("/attention").text)
    # Then the outbox says which was superseded by what, not "withdrawn or replaced"
    assert "m@x.test received M1 on" in text
    assert "Now SUPERSEDED INVALID : superseded by M1b ." in text
    assert "Now STALE NEEDS_REVALIDATION : M1 , which it rests on, was superseded by M1b ." in text
    assert "withdrawn or replaced" not in text
    # And once R1 is revoked itself, its entry says so
    desk.reviewer.revoke("R1", reason="wrong advice")
    text = text_of(client.get("/attention").text)
    assert "Now REVOKED INVALID : revoked, “ wrong advice ”." in text


def test_needs_attention_lists_stale_records_and_issues_the_correction_due(desk: Desk) -> None:
    _seed(desk)
    desk.reviewer.revoke("E1", reason="doc changed")
    client, csrf = desk.signed_in("reviewer")
    page = client.get("/attention")
    text = text_of(page.text)
    assert "Corrections due (1)" in text
    assert "ops@x.test received R1" in text
    assert "STALE or expired records (3)" in text
    [delivery] = desk.reviewer.get("R1").deliveries
    action = f'action="/deliveries/{delivery.delivery_id}/correction"'
    assert action in page.text
    r = client.post(
        f"/deliveries/{delivery.delivery_id}/correction",
        data={"csrf": csrf, "note": "retry advice withdrawn", "next": "/attention"},
    )
    assert r.status_code == 303
    after = client.get("/attention").text
    assert "Corrections due (0)" in text_of(after)
    assert "issued for delivery" in after
    assert desk.reviewer.corrections_due() == ()
    # The same form submitted again (a double click) issues nothing more
    again = client.post(
        f"/deliveries/{delivery.delivery_id}/correction",
        data={"csrf": csrf, "note": "retry advice withdrawn", "next": "/attention"},
    )
    assert "owes no correction now" in text_of(client.get(again.headers["location"]).text)
    assert len(desk.reviewer.get("R1").deliveries[0].corrections) == 1


def test_the_record_page_tells_deliverers_which_deliveries_owe_a_correction(
    desk: Desk,
) -> None:
    _seed(desk)
    desk.reviewer.deliver("R1", recipient="audit@x.test")
    delivered = desk.ledger.position
    desk.reviewer.revoke("E1", reason="doc changed")
    revoked = desk.ledger.position
    first, second = (d.delivery_id for d in desk.reviewer.get("R1").deliveries)
    desk.reviewer.issue_correction(first, note="retry advice withdrawn")
    client, _ = desk.signed_in("reviewer")

    def owed(page: str) -> dict[str, str]:
        rows = page[page.index('id="del-h"') :].split("</table>")[0].split('<tr role="row">')[2:]
        return {
            text_of(row).split()[0]: text_of(
                row.split('class="owed s-whole" data-label="Correction owed">')[1].split("</td>")[0]
            ).replace(" :", ":")  # text_of puts a space where the tag was
            for row in rows
        }

    # Then each delivery says whether it owes one: the corrected one no longer
    page = client.get("/records/R1").text
    assert "Correction owed" in page
    assert owed(page) == {first: "no", second: "yes: issue it in the outbox"}
    assert 'href="/attention#due-h"' in page
    # and as of a position before the revocation, neither did then
    then = client.get(f"/records/R1?as_of_position={delivered}").text
    assert owed(then) == {first: "no", second: "no"}
    # and right after it, both did, leading to the outbox as it was then
    then = client.get(f"/records/R1?as_of_position={revoked}").text
    assert owed(then) == {first: "yes: in the outbox then", second: "yes: in the outbox then"}
    assert f'href="/attention?as_of_position={revoked}#due-h"' in then
    # A reader who delivers nowhere is not told (the outbox is not theirs to see)
    reader, _ = desk.signed_in("reviewer-2")
    page = reader.get("/records/R1").text
    assert "ops@x.test" in page and "Correction owed" not in page and 'class="owed"' not in page


def test_needs_attention_says_when_the_outbox_is_not_the_readers_to_see(desk: Desk) -> None:
    # reviewer-2 reads proj-a but delivers nowhere: corrections are owed, and
    # the page must not say that none are.
    _seed(desk)
    desk.reviewer.revoke("E1", reason="doc changed")
    client, _ = desk.signed_in("reviewer-2")
    text = text_of(client.get("/attention").text)
    assert "No correction is owed" not in text
    assert "Corrections due (" not in text
    assert "Your roles include deliver or audit in no scope" in text
    assert "STALE or expired records (3)" in text


def test_an_auditor_sees_the_corrections_owed_but_no_form_to_issue_them(desk: Desk) -> None:
    # An auditor checks that corrections are issued: it is shown the outbox
    # (``audit`` in proj-a) but issues nothing there (no ``deliver``).
    _seed(desk)
    desk.reviewer.revoke("E1", reason="doc changed")
    desk.ledger.admin().grant("auditor", scope="proj-a", roles=["read", "audit"])
    desk.tokens["auditor"] = desk.ledger.admin().issue_token("auditor")
    [delivery] = desk.reviewer.get("R1").deliveries
    client, csrf = desk.signed_in("auditor")
    page = client.get("/attention").text
    text = text_of(page)
    assert "Corrections due (1)" in text and "ops@x.test received R1" in text
    assert "Shown to you as an auditor of proj-a" in text
    assert f'action="/deliveries/{delivery.delivery_id}/correction"' not in page
    record = client.get("/records/R1").text
    assert "Correction owed" in record and "issue it in the outbox" not in record
    # A correction sent all the same is refused, and nothing is written
    position = desk.ledger.position
    r = client.post(
        f"/deliveries/{delivery.delivery_id}/correction",
        data={"csrf": csrf, "note": "withdrawn", "next": "/attention"},
    )
    assert "lacks role 'deliver'" in text_of(client.get(r.headers["location"]).text)
    assert desk.ledger.position == position


def test_a_usable_record_in_a_conflict_says_so_and_the_queue_warns_before_another(
    desk: Desk,
) -> None:
    for rid, value in (("C1", "postgres"), ("C2", "mysql")):
        desk.agent.propose(
            scope="proj-a", claim_key="db.engine", value=value, kind=Kind.FACT, id=rid
        )
        desk.reviewer.accept(rid)
    desk.agent.propose(
        scope="proj-a", claim_key="db.engine", value="sqlite", kind=Kind.FACT, id="C3"
    )
    desk.agent.propose(
        scope="proj-a", claim_key="db.engine", value="postgres", kind=Kind.FACT, id="C4"
    )
    client, _ = desk.signed_in("reviewer-2")
    text = text_of(client.get("/records/C1").text)
    assert "Usable now" not in text
    assert "Usable, but in a CONFLICT" in text and "for C2 holds another value" in text
    queue = client.get("/").text
    card = text_of(card_of(queue, "C3")).replace(" ,", ",")  # a link's end is a space
    assert (
        "Accepting it makes reads of proj-a/db.engine a CONFLICT: C1, C2 hold another value" in card
    )
    # C4 agrees with C1 but not with C2: the warning names C2 only
    assert "a CONFLICT: C2 holds another value" in text_of(card_of(queue, "C4"))
    assert "CONFLICT" in text_of(client.get("/records/C3").text)  # its own page too
    # Once C2 is gone, C1 is plainly usable and C4 would agree with it
    desk.reviewer.revoke("C2", reason="wrong engine")
    assert "Usable now" in text_of(client.get("/records/C1").text)
    assert "CONFLICT" not in text_of(card_of(client.get("/").text, "C4"))


def test_a_decision_on_a_later_page_of_the_queue_returns_to_that_page(desk: Desk) -> None:
    desk.agent.propose_many(
        {"scope": "proj-a", "claim_key": f"bulk.{n:03d}", "value": n, "kind": Kind.FACT,
         "id": f"B{n:03d}"}
        for n in range(60)
    )  # fmt: skip
    client, csrf = desk.signed_in("reviewer")
    first = client.get("/").text
    more = re.search(r'href="(/\?scope=proj-a&amp;after=[^"]+)"', first)
    assert more is not None
    later_url = html.unescape(more[1])
    later = client.get(later_url).text
    assert "First candidates in proj-a" in later
    # The first page counts at least its candidates; a later one its own, saying so
    assert "50+ candidates" in text_of(first)
    assert "10 candidates on this page" in text_of(later)
    rid = re.search(r'id="c-(B\d+)"', later)
    assert rid is not None and rid[1] not in first
    card = card_of(later, rid[1])
    back = re.search(r'name="next" value="([^"]+)"', card)
    assert back is not None and html.unescape(back[1]) == later_url
    done = client.post(
        f"/records/{rid[1]}/accept", data={"csrf": csrf, "next": html.unescape(back[1])}
    )
    assert (done.status_code, done.headers["location"]) == (303, later_url)
    assert desk.reviewer.get(rid[1]).status.value == "ACCEPTED"
    # The first page filtered by scope returns to itself too
    filtered = client.get("/?scope=proj-a").text
    back = re.search(r'name="next" value="([^"]+)"', filtered)
    assert back is not None and html.unescape(back[1]) == "/?scope=proj-a"


def test_pages_can_be_browsed_as_of_a_past_position_read_only(desk: Desk) -> None:
    _seed(desk)
    before = desk.ledger.position
    desk.reviewer.revoke("E1", reason="doc changed")
    client, _ = desk.signed_in("reviewer-2")
    page = client.get("/records/R1", params={"as_of_position": before})
    text = text_of(page.text)
    assert f"as of log position {before}" in text
    assert "Status ACCEPTED" in text
    assert "Revoke…" not in text
    assert f'href="/records/M1?as_of_position={before}"' in page.text
    queue = client.get("/", params={"as_of_position": before}).text
    assert "api.dedupe_window_s" in queue
    assert 'action="/records/M2/accept"' not in queue
    now = client.get("/records/R1").text
    assert "Status STALE" in text_of(now)
    bad = client.get("/records/R1", params={"as_of_position": "soon"})
    assert bad.status_code == 422
    # The refused form keeps what was typed, marked, with the focus on it
    field = re.search(r'<input id="as_of_position"[^>]*>', bad.text)
    assert field is not None
    assert 'value="soon" aria-invalid="true" aria-describedby="refusal" autofocus' in field[0]
    assert 'id="refusal"' in bad.text
    assert "aria-invalid" not in re.search(r'<input id="as_of_time"[^>]*>', bad.text)[0]
    # Odd moments are refused the same way, never a server error
    for odd in ({"as_of_position": "²"}, {"as_of_time": "9999-12-31T23:59:59-10:00"}):
        r = client.get("/records/R1", params=odd)
        assert r.status_code == 422, (odd, r.text[:300])
        assert "Check the input" in r.text
    huge = client.get("/records/R1", params={"as_of_position": "9" * 20})
    assert huge.status_code == 422
    assert "as-of position 99999999999999999999 is beyond the log" in text_of(huge.text)
    # A position and a time together: as the API, neither silently wins
    both = client.get(
        "/records/R1", params={"as_of_position": before, "as_of_time": "2026-01-01T00:00:00Z"}
    )
    assert both.status_code == 422
    assert "give an as-of position or an as-of time, not both" in text_of(both.text)
    marked = re.findall(r'<input id="as_of_(position|time)"[^>]*aria-invalid="true"', both.text)
    assert marked == ["position", "time"]
    assert 'value="2026-01-01T00:00:00Z" aria-invalid' in both.text
    late = client.get("/records/R1", params={"as_of_time": "<b>next week</b>"})
    assert 'value="&lt;b&gt;next week&lt;/b&gt;" aria-invalid="true"' in late.text


def test_the_queue_filtered_by_a_scope_it_does_not_approve_in_says_so(desk: Desk) -> None:
    client, _ = desk.signed_in("reviewer")
    page = text_of(client.get("/", params={"scope": "nosuch"}).text)
    assert "You do not hold the approve role in scope nosuch" in page
    assert "in no scope" not in page


def cf(point: str) -> str:
    """How a page marks an invisible character it writes out."""
    return f'<span class="cf" title="an invisible character">&lt;U+{point}&gt;</span>'


def test_two_claims_that_differ_by_an_invisible_character_show_apart(desk: Desk) -> None:
    # Given api.retry_safe and a look-alike holding a zero-width space
    desk.agent.propose("proj-a", "api.retry_safe", False, Kind.FACT, id="REAL")
    desk.agent.propose("proj-a", "api.retry\u200b_safe", True, Kind.FACT, id="SPOOF")
    desk.agent.propose("proj-a", "team", "\U0001f468\u200d\U0001f469 ok\u00ad", Kind.FACT, id="V")
    client, _ = desk.signed_in("reviewer")
    queue = client.get("/").text
    # Then the look-alike's card writes it out; the real one's is as it is
    assert f"api.retry{cf('200B')}_safe" in card_of(queue, "SPOOF")
    assert "api.retry_safe" in card_of(queue, "REAL") and "U+200B" not in card_of(queue, "REAL")
    assert "\u200b" not in queue
    # and in a value: a soft hyphen written out, an emoji sequence's joiner kept
    value = card_of(queue, "V")
    assert f"ok{cf('00AD')}" in value and "\U0001f468\u200d\U0001f469" in value
    assert f"api.retry{cf('200B')}_safe" in client.get("/records/SPOOF").text
    # (in an attribute or the title, where a mark would be markup, written out plain)
    explained = client.get(
        "/explain", params={"scope": "proj-a", "claim_key": "api.retry\u200b_safe"}
    )
    title = explained.text.split("<title>")[1].split("</title>")[0]
    assert "&lt;U+200B&gt;" in title and "<span" not in title
    assert 'value="api.retry&lt;U+200B&gt;_safe"' not in explained.text  # the form: as stored
    late = client.get("/records", params={"as_of_time": "2026-01-01\u200bT00:00:00Z"}).text
    assert 'value="2026-01-01&lt;U+200B&gt;T00:00:00Z" aria-invalid="true"' in late
    # and the same letters typed are shown as typed: the two are told apart
    desk.agent.propose("proj-a", "api.retry<U+200B>_safe", 1, Kind.FACT, id="TYPED")
    typed = card_of(client.get("/").text, "TYPED")
    assert "api.retry&lt;U+200B&gt;_safe" in typed and 'class="cf"' not in typed


def test_a_capture_whose_bytes_were_erased_shows_accept_disabled_saying_why(desk: Desk) -> None:
    desk.agent.capture(scope="proj-a", uri="https://x.test/pii", content=b"Jane", id="P2")
    ref = (desk.reviewer.get("P2").evidence or {})["snapshot_ref"]
    desk.ledger.admin().erase_snapshot(ref, reason="request")
    client, _ = desk.signed_in("reviewer")
    card = card_of(client.get("/").text, "P2")
    assert '<button type="submit" class="accept" disabled aria-describedby="why-P2"' in card
    assert "Its captured bytes were erased, so no approver can check them" in text_of(card)


def test_a_value_shown_in_part_is_accepted_where_it_is_shown_whole(desk: Desk) -> None:
    # Given a candidate whose value a card cannot show whole, and one it can
    desk.agent.propose("proj-a", "long", {"a": "V" * 5000, "z": "tail"}, Kind.FACT, id="L1")
    desk.agent.propose("proj-a", "short", {"a": "V" * 500}, Kind.FACT, id="S1")
    client, csrf = desk.signed_in("reviewer")
    queue = client.get("/").text
    long, short = card_of(queue, "L1"), card_of(queue, "S1")
    # Then the card says so, links the record page, and its Accept waits there
    assert "Shown in part: its first 600 characters." in text_of(long)
    assert '<button type="submit" class="accept" disabled aria-describedby="cut-L1"' in long
    assert "Accept with a note" not in long and "Reject" in long
    assert "Shown in part" not in short and "Accept with a note" in short
    assert '<button type="submit" class="accept">' in short
    page = client.get("/records/L1").text
    assert '"z": "tail"' in text_of(page) and "Shown in part" not in page
    assert '<button type="submit" class="accept">' in page
    done = client.post("/records/L1/accept", data={"csrf": csrf, "scope": "proj-a"})
    assert done.status_code == 303 and desk.reviewer.get("L1").status.value == "ACCEPTED"


def test_a_candidate_gone_stale_under_its_card_says_why_not_who_decided(desk: Desk) -> None:
    # Given a candidate resting on E1, its card shown, then E1 revoked
    desk.agent.capture(scope="proj-a", uri="https://x.test/d", content=b"d", id="E1")
    desk.reviewer.accept("E1")
    desk.agent.propose("proj-a", "k", 1, Kind.FACT, parents=["E1"], id="RC1")
    client, csrf = desk.signed_in("reviewer-2")
    desk.reviewer.revoke("E1", reason="wrong")
    before = desk.ledger.position
    client.post("/records/RC1/accept", data={"csrf": csrf, "scope": "proj-a", "next": "/"})
    shown = _messages(client.get("/").text)
    # Then the refusal says what happened to it: nobody decided it
    assert [role for role, _ in shown] == ["alert"], shown
    assert shown[0][1].endswith(
        "accept needs CANDIDATE: it is STALE now (E1, which it rests on, was revoked), "
        "and nothing of yours was written"
    ), shown
    assert desk.ledger.position == before
    # So is one another reviewer accepted before it went STALE
    desk.agent.capture(scope="proj-a", uri="https://x.test/e", content=b"e", id="E2")
    desk.reviewer.accept("E2")
    desk.agent.propose("proj-a", "k2", 1, Kind.FACT, parents=["E2"], id="RC2")
    desk.reviewer.accept("RC2")
    desk.reviewer.revoke("E2", reason="wrong")
    client.post("/records/RC2/accept", data={"csrf": csrf, "scope": "proj-a", "next": "/"})
    shown = _messages(client.get("/").text)
    assert shown[0][1].endswith(
        "accept needs CANDIDATE: it is STALE now (E2, which it rests on, was revoked), "
        "and nothing of yours was written"
    ), shown


def test_thousands_of_deliveries_owing_corrections_are_shown_in_parts(desk: Desk) -> None:
    # Given a report delivered 120 times, then its evidence revoked
    desk.agent.capture(scope="proj-a", uri="https://x.test/d", content=b"d", id="E1")
    desk.reviewer.accept("E1")
    desk.agent.propose("proj-a", "r", 1, Kind.REPORT, parents=["E1"], id="R1")
    desk.reviewer.accept("R1")
    sent = [desk.reviewer.deliver("R1", recipient=f"c{n}@x.test") for n in range(120)]
    desk.reviewer.revoke("E1", reason="wrong")
    client, _ = desk.signed_in("reviewer")
    # Then Needs attention shows the oldest 50 of the 120 owed, and links on
    seen: list[str] = []
    path = "/attention"
    for told in ("1 to 50 shown", "51 to 100 shown", "101 to 120 shown"):
        page = client.get(path).text
        assert "Corrections due (120)" in text_of(page) and told in text_of(page)
        seen += re.findall(r'<div class="muted mono">([^<]+)</div>', page)
        found = re.search(r'href="(/attention\?due_from=\d+)#due-h">Next', page)
        path = found[1] if found else ""
    assert seen == sent and path == ""
    assert "First 50" in page
    # and a record's page its deliveries, 50 at a time
    record = client.get("/records/R1").text
    assert len(re.findall(r'<td role="cell" class="mono s-whole">', record)) == 50
    assert "120 deliveries, the oldest first: 1 to 50 shown." in text_of(record)
    last = client.get("/records/R1", params={"deliveries_from": "100"}).text
    assert len(re.findall(r'<td role="cell" class="mono s-whole">', last)) == 20
    rows = re.findall(r'<td role="cell" class="mono s-whole">([^<]+)</td>', last)
    assert rows == sent[100:]
    trail = client.get("/records/R1", params={"events_from": "100"}).text
    assert "123 events, the oldest first: 101 to 123 shown." in text_of(trail)
    # Each list's links keep the other's place
    both = client.get("/records/R1", params={"deliveries_from": "50"}).text
    assert 'href="/records/R1?deliveries_from=50&amp;events_from=50#audit-h">Next 50' in both
    other = client.get("/records/R1", params={"events_from": "50"}).text
    assert 'href="/records/R1?events_from=50&amp;deliveries_from=50#del-h">Next 50' in other
    # A correction form of a later part comes back to that part
    second = client.get("/attention", params={"due_from": "50"}).text
    assert '<input type="hidden" name="next" value="/attention?due_from=50">' in second
    bad = client.get("/attention", params={"due_from": "-1"})
    assert "due_from must be a whole number, got '-1'" in text_of(bad.text)


def test_an_auditor_landing_on_the_queue_is_shown_where_to_go(desk: Desk) -> None:
    desk.ledger.admin().grant("auditor", scope="proj-a", roles=["read", "audit"])
    desk.tokens["auditor"] = desk.ledger.admin().issue_token("auditor")
    client, _ = desk.signed_in("auditor")
    queue = client.get("/").text
    assert "You hold the approve role in no scope" in queue
    assert '<a href="/records">Records</a>' in queue
    assert "and the corrections due under" in text_of(queue)
    agent, _ = desk.signed_in("agent-1")  # no audit, no deliver: no outbox promised
    assert "corrections due" not in text_of(agent.get("/").text)
    # the records page says which scope it lists; a bad as-of position says what it takes
    listed = client.get("/records", params={"scope": "proj-a"}).text
    assert "<h1>Records in proj-a</h1>" in listed
    bad = client.get("/records", params={"as_of_position": "-1"}).text
    assert "as-of position '-1' is not a log position (a whole number, 0 or more)" in text_of(bad)


def test_direction_controls_in_stored_text_are_shown_not_obeyed(desk: Desk) -> None:
    # A right-to-left override in a reason would make the console's sentence read
    # backwards; it is written out instead.
    desk.agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"d", id="E1")
    desk.reviewer.accept("E1")
    desk.reviewer.revoke("E1", reason="wrong \u202eodd")
    client, _ = desk.signed_in("reviewer")
    page = client.get("/records/E1").text
    assert "\u202e" not in page
    assert f"wrong {cf('202E')}odd" in page
    # but a form sends back the very claim shown (its value is not rewritten)
    claim = "price\u202eusd"
    desk.reviewer.accept(desk.agent.propose("proj-a", claim, 1, Kind.FACT, id="P1"))
    asked = client.get("/explain", params={"scope": "proj-a", "claim_key": claim}).text
    assert f'name="claim_key" value="{claim}"' in asked
    assert f"price{cf('202E')}usd" in asked
    again = client.get(
        "/explain", params={"scope": "proj-a", "claim_key": claim, "as_of_position": "999999"}
    )
    assert f'<input type="hidden" name="claim_key" value="{claim}">' in again.text


def test_the_explain_page_lists_the_usable_records_and_a_bounded_number_of_others(
    desk: Desk,
) -> None:
    desk.agent.propose("proj-a", "api.x", True, Kind.FACT, id="M1", accepted_by=desk.reviewer)
    desk.agent.propose("proj-a", "api.x", False, Kind.FACT, id="M2", accepted_by=desk.reviewer)
    desk.reviewer.revoke("M2", reason="contradicted")
    # Given 70 candidates were put under the claim
    desk.agent.propose_many(
        [
            {"scope": "proj-a", "claim_key": "api.x", "value": i, "kind": "fact", "id": f"J{i:03d}"}
            for i in range(70)
        ]
    )
    client, _ = desk.signed_in("reviewer")

    # When a reviewer asks the console why
    page = client.get("/explain", params={"scope": "proj-a", "claim_key": "api.x"}).text

    # Then it lists M1, the revoked M2 and the 49 newest candidates, not the others
    listed = re.findall(r'href="/records/([^"?]+)"', page)
    assert listed == ["M1", "M2", *(f"J{i:03d}" for i in range(21, 70))]
    # and says how many it left out and where to find them
    assert "21 more records of this claim, none of them usable, are not listed here" in text_of(
        page
    )
    assert 'href="/records?scope=proj-a&amp;claim_prefix=api.x"' in page
    # while the page of a candidate it left out still says it is not usable
    assert "Not usable now" in text_of(client.get("/records/J000").text)


def test_changing_the_moment_keeps_the_pages_own_question(desk: Desk) -> None:
    _seed(desk)
    before = desk.ledger.position
    client, _ = desk.signed_in("reviewer")
    past = client.get(
        "/records", params={"scope": "proj-a", "status": "ACCEPTED", "as_of_position": before}
    ).text
    # the link back to now keeps the filters, and so does the as-of form
    assert 'href="/records?scope=proj-a&amp;status=ACCEPTED">Back to now</a>' in past
    asof = past[past.index('<section class="asof') :]
    asof = asof[: asof.index("</section>")]
    assert '<input type="hidden" name="status" value="ACCEPTED">' in asof
    assert '<input type="hidden" name="as_of_position"' not in asof


def test_pages_can_be_browsed_as_of_a_past_time(desk: Desk, clock: Any) -> None:
    _seed(desk)
    then = clock.now
    clock.advance(hours=1)
    desk.reviewer.revoke("E1", reason="doc changed")
    client, _ = desk.signed_in("reviewer-2")
    page = client.get("/records/M1", params={"as_of_time": then.isoformat()})
    assert "Status ACCEPTED" in text_of(page.text)
    # RFC 3339 lets the "T" and "Z" be lowercase
    lower = then.astimezone(UTC).strftime("%Y-%m-%dt%H:%M:%S.%fz")
    page = client.get("/records/M1", params={"as_of_time": lower})
    assert "Status ACCEPTED" in text_of(page.text), text_of(page.text)[:300]


def test_a_large_graph_is_summarised_not_drawn_whole(desk: Desk) -> None:
    desk.agent.capture(scope="proj-a", uri="https://x.test/root", content=b"r", id="E1")
    desk.reviewer.accept("E1")
    desk.agent.propose(
        scope="proj-a", claim_key="hub", value=1, kind=Kind.INFERENCE, parents=["E1"], id="H"
    )
    desk.reviewer.accept("H")
    desk.agent.propose_many(
        {"scope": "proj-a", "claim_key": f"leaf.{i}", "value": i, "kind": "inference",
         "parents": ["H"], "id": f"L{i:02d}"}
        for i in range(45)
    )  # fmt: skip
    client, _ = desk.signed_in("reviewer")
    page = client.get("/records/E1").text
    text = text_of(page)
    assert "2 of 47 records drawn" in text
    assert "Not drawn: 45 CANDIDATE" in text
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert "L00" not in svg
    assert "All 47 records in the graph" in text


def hub_with_leaves(desk: Desk, leaves: int) -> None:
    """An accepted fact ``H`` with ``leaves`` candidate inferences ``H-0000``, … resting on it."""
    desk.agent.propose(scope="proj-a", claim_key="hub", value=1, kind=Kind.FACT, id="H")
    desk.reviewer.accept("H")
    desk.agent.propose_many(
        {"scope": "proj-a", "claim_key": f"leaf.{i}", "value": i, "kind": "inference",
         "parents": ["H"], "id": f"H-{i:04d}"}
        for i in range(leaves)
    )  # fmt: skip


def test_a_graph_over_the_served_cap_is_neither_gathered_nor_listed_and_says_how_to_draw_it(
    desk: Desk,
) -> None:
    # Given a fact H with 1,000 candidates resting on it: a graph of 1,001 records
    hub_with_leaves(desk, 1000)
    client, _ = desk.signed_in("reviewer")

    # When the reviewer opens H's page
    page = client.get("/records/H")

    # Then the graph is not drawn or listed; the page names its size, the cap and the CLI
    assert page.status_code == 200
    text = text_of(page.text)
    assert "This record's graph has 1,001 records, more than the 1,000 the console" in text
    assert "provledger graph H --format svg --max-nodes 1001" in text
    assert "<svg" not in page.text and "records in the graph" not in text
    assert 'href="/records/H-' not in page.text


def test_a_revocation_preview_lists_a_page_of_what_goes_stale_and_counts_the_rest(
    desk: Desk,
) -> None:
    # Given a fact H with 250 candidates resting on it
    hub_with_leaves(desk, 250)
    client, csrf = desk.signed_in("reviewer")

    # When the reviewer previews revoking H
    preview = client.get("/records/H/revoke")

    # Then the heading counts all 250 and says 200 are listed; the page says 50 more
    # are not
    text = text_of(preview.text)
    assert "Will be marked STALE (250; 200 listed)" in text
    assert preview.text.count('href="/records/H-') == 200
    assert "Not listed: 50 more after the first 200." in text
    # ... and links to them all (STALE: a candidate also needs revalidation)
    assert 'href="/records?scope=proj-a&amp;status=STALE">Records (status STALE)</a>' in (
        preview.text
    )

    # And confirming it revokes H and marks every one of them STALE
    mark = _PREVIEW.search(preview.text)
    assert mark is not None
    done = client.post(
        "/records/H/revoke", data={"csrf": csrf, "reason": "wrong", "preview": mark[1]}
    )
    assert done.status_code == 303
    assert desk.agent.get("H-0249").status.value == "STALE"
    # ... and the message after counts them as the preview did
    after = text_of(client.get(done.headers["location"]).text)
    assert "Revoked H; 250 records you can see marked STALE." in after


def test_snapshots_are_served_as_inert_text(desk: Desk) -> None:
    desk.agent.capture(
        scope="proj-a", uri="https://x.test/x", content=b"<script>alert(1)</script>", id="E1"
    )
    ref = desk.agent.get("E1").evidence["snapshot_ref"]  # type: ignore[index]
    client, _ = desk.signed_in("reviewer")
    r = client.get(f"/snapshots/{ref}")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert r.headers["content-security-policy"] == "sandbox"
    assert r.text == "<script>alert(1)</script>"


def test_an_erased_snapshot_is_an_error_page_saying_so(desk: Desk) -> None:
    desk.agent.capture(scope="proj-a", uri="https://x.test/x", content=b"secret", id="E1")
    ref = desk.agent.get("E1").evidence["snapshot_ref"]  # type: ignore[index]
    desk.ledger.admin().erase_snapshot(ref, reason="court order")
    client, _ = desk.signed_in("reviewer")
    r = client.get(f"/snapshots/{ref}")
    assert r.status_code == 410
    assert r.headers["content-type"].startswith("text/html")
    assert "was erased" in text_of(r.text) and "secret" not in r.text
    assert "default-src 'none'" in r.headers["content-security-policy"]
    # and the record's page says so where it showed the link to the bytes
    page = client.get("/records/E1").text
    assert f'href="/snapshots/{ref}"' not in page
    assert "by admin (log position" in text_of(page) and "“court order”" in text_of(page)


def test_every_page_carries_the_security_headers(desk: Desk) -> None:
    r = desk.browser().get("/")
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp
    assert "frame-ancestors 'none'" in csp
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["cache-control"] == "no-store"


# -- isolation -------------------------------------------------------------------------------------


def _blank(page: str, record_id: str, csrf: str) -> str:
    """A page with its CSRF token and then the asked-for id blanked out (the random
    token may spell an id by chance)."""
    return page.replace(csrf, "<CSRF>").replace(record_id, "<ID>")


def _same_page(a: Any, b: Any, a_id: str, b_id: str, csrf: str) -> None:
    assert a.status_code == b.status_code
    assert sorted(a.headers.items()) == sorted(b.headers.items())
    assert _blank(a.text, a_id, csrf) == _blank(b.text, b_id, csrf)


def test_a_hidden_record_page_is_byte_for_byte_a_missing_one(desk: Desk) -> None:
    _seed(desk)
    ref = desk.agent.get("E1").evidence["snapshot_ref"]  # type: ignore[index]
    client, csrf = desk.signed_in("outsider")
    for hidden, absent in (("M1", "Q9"), ("E1", "Q8"), ("R1", "Q7")):
        for suffix in ("", "/revoke"):
            seen = client.get(f"/records/{hidden}{suffix}")
            none = client.get(f"/records/{absent}{suffix}")
            assert seen.status_code == 404
            _same_page(seen, none, hidden, absent, csrf)
    fake = "sha256:" + "0" * 64
    _same_page(client.get(f"/snapshots/{ref}"), client.get(f"/snapshots/{fake}"), ref, fake, csrf)
    before = desk.ledger.position
    for action, data in (("accept", {}), ("reject", {"reason": "x"}), ("revoke", {"reason": "x"})):
        client.post(f"/records/M2/{action}", data={"csrf": csrf, **data})
        refused = client.get("/").text
        client.post(f"/records/Q9/{action}", data={"csrf": csrf, **data})
        missing = client.get("/").text
        assert _blank(refused, "M2", csrf) == _blank(missing, "Q9", csrf)
    assert desk.ledger.position == before


def test_an_outsiders_pages_show_nothing_of_another_scope(desk: Desk) -> None:
    _seed(desk)
    desk.reviewer.revoke("E1", reason="secret reason")
    client, _ = desk.signed_in("outsider")
    pages = [
        client.get("/").text,
        client.get("/attention").text,
        client.get("/records").text,
        client.get("/records", params={"scope": "proj-a"}).text,
        client.get("/explain", params={"scope": "proj-a", "claim_key": "api.retry_safe"}).text,
    ]
    for page in pages:
        # The visible text and every link (a random CSRF token may spell anything).
        seen = text_of(page) + " ".join(re.findall(r'(?:href|action)="([^"]*)"', page))
        for secret in ("M1", "M2", "R1", "E1", "api.retry_safe", "secret reason", "ops@x.test"):
            assert secret not in seen, secret


def test_a_superseding_candidate_names_what_it_replaces_and_the_old_page_says_by_what(
    desk: Desk,
) -> None:
    desk.agent.propose(scope="proj-a", claim_key="api.limit", value=60, kind=Kind.FACT, id="L1")
    desk.reviewer.accept("L1")
    desk.agent.propose(
        scope="proj-a", claim_key="api.limit", value=120, kind=Kind.FACT, id="L2", supersedes="L1"
    )
    client, csrf = desk.signed_in("reviewer")
    card = card_of(client.get("/").text, "L2")
    assert "Replaces" in text_of(card) and 'href="/records/L1"' in card
    client.post("/records/L2/accept", data={"csrf": csrf})
    old = client.get("/records/L1").text
    assert "Status SUPERSEDED" in text_of(old)
    assert "Superseded by L2" in text_of(old)
    assert "Revoke…" not in text_of(old)


def test_an_expired_record_needs_attention_until_revalidated(desk: Desk, clock: Any) -> None:
    from datetime import timedelta

    desk.agent.propose(
        scope="proj-a", claim_key="price", value=9, kind=Kind.FACT, id="X1",
        expires=clock.now + timedelta(hours=1),
    )  # fmt: skip
    desk.reviewer.accept("X1")
    client, _ = desk.signed_in("reviewer")
    assert "X1" not in text_of(client.get("/attention").text)
    assert "Usable until 2026-01-01 13:00:00 UTC" in text_of(client.get("/records/X1").text)
    clock.advance(hours=2)
    text = text_of(client.get("/attention").text)
    assert "STALE or expired records (1)" in text
    assert "X1" in text and "expired 2026-01-01 13:00:00 UTC" in text
    page = text_of(client.get("/records/X1").text)
    assert "Validity NEEDS_REVALIDATION" in page
    # and its page no longer calls it usable until a time gone by; the Why box
    # says once when it expired
    assert "Usable until" not in page and "Its expiry:" not in page
    why = page[page.index("Not usable now") : page.index("Explain every record")]
    assert why.count("expired at 2026-01-01 13:00:00 UTC") == 1, why


# -- refused forms, past moments ---------------------------------------------------------------


def _field_value(page: str, element: str, name: str) -> str:
    """What a form field shows: a textarea's text or an input's value."""
    if element == "textarea":
        found = re.search(rf'<textarea[^>]* name="{name}"[^>]*>(.*?)</textarea>', page, re.S)
    else:
        found = re.search(rf'<input[^>]* name="{name}"[^>]* value="([^"]*)"', page)
    assert found is not None, f"no {element} {name!r} on the page"
    return html.unescape(found.group(1))


def test_a_refused_form_comes_back_with_what_was_typed(desk: Desk) -> None:
    _seed(desk)
    desk.reviewer.revoke("E1", reason="doc changed")
    [delivery] = desk.reviewer.get("R1").deliveries
    client, csrf = desk.signed_in("reviewer")
    note = "Retry advice withdrawn: the docs changed. Do <not> enable retries & re-check."
    # 1. A correction with a mistyped replacement: refused, the note is not lost
    action = f"/deliveries/{delivery.delivery_id}/correction"
    r = client.post(action, data={"csrf": csrf, "note": note, "replacement": "R1-typo"})
    page = client.get(r.headers["location"]).text
    assert f"Correction for delivery {delivery.delivery_id} refused (UnknownRecordError)" in page
    assert _field_value(page, "textarea", "note") == note
    assert _field_value(page, "input", "replacement") == "R1-typo"
    # ... given back once: the next visit shows an empty form again
    assert _field_value(client.get("/attention").text, "textarea", "note") == ""
    # 2. A revalidation on an unknown basis: the form opens again, filled in
    r = client.post(
        "/records/M1/revalidate", data={"csrf": csrf, "note": "re-read it", "parents": "NOPE"}
    )
    page = client.get(r.headers["location"]).text
    assert "Revalidation of M1 refused (InvalidParentError)" in page
    assert '<details class="revalidate" open>' in page
    assert _field_value(page, "textarea", "note") == "re-read it"
    assert _field_value(page, "input", "parents") == "NOPE"
    # 3. A revocation whose preview changed: the new preview keeps the reason
    r = client.post(
        "/records/M2/revoke", data={"csrf": csrf, "reason": "dupes seen", "preview": "x"}
    )
    page = client.get(r.headers["location"]).text
    assert "Nothing was revoked" in text_of(page)
    assert _field_value(page, "textarea", "reason") == "dupes seen"


def test_a_refused_rejection_keeps_its_reason_in_the_queue(desk: Desk) -> None:
    _seed(desk)
    desk.agent.propose(scope="proj-a", claim_key="api.other", value=1, kind=Kind.FACT, id="M3")
    client, csrf = desk.signed_in("reviewer-2")
    # The reason is refused (blank once trimmed); the queue reopens M2's form with it
    r = client.post("/records/M2/reject", data={"csrf": csrf, "reason": "   ", "next": "/"})
    page = client.get(r.headers["location"]).text
    assert "Rejection of M2 refused (" in page
    card = card_of(page, "M2")
    assert '<details class="reject" open>' in card
    assert '<details class="reject" open>' not in card_of(page, "M3")


@pytest.mark.parametrize(
    ("body", "content_type", "said"),
    [
        (b"reason=" + "caf\u00e9".encode(), "urlencoded", "bytes that are not URL-encoded"),
        (b"reason=\xff\xferaw", "urlencoded", "bytes that are not URL-encoded"),
        (b"reason=pct%C0%AFoverlong", "urlencoded", "field 'reason' is not UTF-8"),
        (
            b'--b\r\nContent-Disposition: form-data; name="reason"\r\n\r\nx\r\n--b--\r\n',
            "multipart",
            "sent URL-encoded, not as multipart/form-data",
        ),
        (b"reason=x", "text", "sent URL-encoded, not as text/plain"),
    ],
    ids=["raw-utf-8", "raw-latin", "percent-not-utf-8", "multipart", "text"],
)
def test_a_form_that_is_not_url_encoded_utf_8_is_refused_not_stored_garbled(
    desk: Desk, body: bytes, content_type: str, said: str
) -> None:
    # A page of the console sends URL-encoded UTF-8; other bytes were read as
    # Latin-1 (or U+FFFD) and the rejection's reason kept in the log garbled.
    _seed(desk)
    client, csrf = desk.signed_in("reviewer-2")
    position = desk.ledger.position
    kinds = {
        "urlencoded": "application/x-www-form-urlencoded",
        "multipart": "multipart/form-data; boundary=b",
        "text": "text/plain",
    }
    if content_type in ("urlencoded", "text"):
        body = f"csrf={csrf}&next=/&".encode() + body
    else:
        body = (
            f'--b\r\nContent-Disposition: form-data; name="csrf"\r\n\r\n{csrf}\r\n'.encode() + body
        )
    r = client.post(
        "/records/M2/reject", content=body, headers={"content-type": kinds[content_type]}
    )
    assert r.status_code == 400, r.text
    assert "The form could not be read" in text_of(r.text) and said in text_of(r.text)
    assert desk.ledger.position == position
    assert desk.reviewer.get("M2").status == "CANDIDATE"


def test_a_past_page_names_the_position_it_really_shows(desk: Desk) -> None:
    _seed(desk)
    start = desk.ledger.position + 1
    desk.reviewer.revoke("E1", reason="doc changed")  # one transaction: several events
    end = desk.ledger.position
    assert end > start
    client, _ = desk.signed_in("reviewer")
    text = text_of(client.get("/records/R1", params={"as_of_position": start}).text)
    assert f"as of log position {start} (through position {end}:" in text
    assert "Status STALE" in text and "Not usable then" in text
    exact = text_of(client.get("/records/R1", params={"as_of_position": end}).text)
    assert "through position" not in exact
    assert "Not usable now" not in exact


def test_a_revocation_preview_asked_of_the_past_shows_the_record_then(desk: Desk) -> None:
    _seed(desk)
    before = desk.ledger.position
    client, _ = desk.signed_in("reviewer")
    r = client.get("/records/E1/revoke", params={"as_of_position": before})
    assert (r.status_code, r.headers["location"]) == (
        303,
        f"/records/E1?as_of_position={before}",
    )
    page = text_of(client.get(r.headers["location"]).text)
    assert "A revocation preview shows what revoking would do now" in page
    assert "Status ACCEPTED" in page


def test_the_record_page_leads_to_its_claim_and_to_each_past_state(desk: Desk) -> None:
    _seed(desk)
    client, _ = desk.signed_in("reviewer")
    page = client.get("/records/R1").text
    assert 'href="/explain?scope=proj-a&amp;claim_key=report.weekly">' in page
    for event in desk.reviewer.audit("R1").events:
        assert f'href="/records/R1?as_of_position={event.position}"' in page


def test_a_conditioned_record_is_explained_where_it_applies(desk: Desk) -> None:
    # C1 holds where api=v2: without a context no read may use it, so its page
    # must not call a VALID record unusable, nor miss a rival of that context.
    cond = {"api": "v2"}
    desk.agent.propose(
        scope="proj-a", claim_key="auth.mode", value="oauth", kind=Kind.FACT, conditions=cond,
        id="C1",
    )  # fmt: skip
    desk.reviewer.accept("C1")
    desk.agent.propose(
        scope="proj-a", claim_key="auth.mode", value="basic", kind=Kind.FACT, conditions=cond,
        id="C2",
    )  # fmt: skip
    client, _ = desk.signed_in("reviewer-2")
    text = text_of(client.get("/records/C1").text)
    assert "Validity VALID" in text
    assert "Not usable now" not in text
    assert 'Usable now where {"api": "v2"}' in text
    assert "reads of proj-a/auth.mode in that context may hand it on" in text
    card = text_of(card_of(client.get("/").text, "C2"))
    assert "a CONFLICT: C1 holds another value" in card
    # Once both are accepted, C1's page names the conflict where it applies
    desk.reviewer.accept("C2")
    text = text_of(client.get("/records/C1").text)
    assert 'Usable, but in a CONFLICT: reads of proj-a/auth.mode where {"api": "v2"}' in text


# -- what a decision does, said before and after -----------------------------------------------


def _approver_only_in_ops(desk: Desk) -> Session:
    """The reviewer may approve in scope ops but not read it; ``reviewer-2`` (returned)
    approves and reads there. Scope secret: the reviewer holds no grant in it."""
    admin = desk.ledger.admin()
    admin.grant("reviewer", scope="ops", roles=["approve"])
    for scope in ("ops", "secret"):
        admin.grant("agent-1", scope=scope, roles=["propose", "read"])
        admin.grant("reviewer-2", scope=scope, roles=["approve", "read"])
    return desk.ledger.authenticate(admin.issue_token("reviewer-2"))


def _new_version_of_a_delivered_fact(desk: Desk) -> None:
    """L1 (60, delivered) ← P1 ← R1 (delivered), all accepted; on L1 also O1 in scope
    ops and S1 in scope secret (see :func:`_approver_only_in_ops`); L2 (120) waits
    to supersede L1."""
    second = _approver_only_in_ops(desk)
    desk.agent.propose(scope="proj-a", claim_key="api.limit", value=60, kind=Kind.FACT, id="L1")
    desk.reviewer.accept("L1")
    desk.reviewer.deliver("L1", recipient="ops@x.test")
    desk.agent.propose(
        scope="proj-a", claim_key="plan.limit", value="wait", kind=Kind.PLAN, parents=["L1"],
        id="P1",
    )  # fmt: skip
    desk.reviewer.accept("P1")
    desk.agent.propose(
        scope="proj-a", claim_key="report.limit", value="60/s", kind=Kind.REPORT,
        parents=["P1"], id="R1",
    )  # fmt: skip
    desk.reviewer.accept("R1")
    desk.reviewer.deliver("R1", recipient="cto@x.test")
    for scope, rid in (("ops", "O1"), ("secret", "S1")):
        desk.agent.propose(
            scope=scope, claim_key=f"{scope}.plan", value="x", kind=Kind.PLAN, parents=["L1"],
            id=rid,
        )  # fmt: skip
        second.accept(rid)
    desk.agent.propose(
        scope="proj-a", claim_key="api.limit", value=120, kind=Kind.FACT, id="L2", supersedes="L1"
    )


def test_accepting_a_new_version_says_before_and_after_what_it_does(desk: Desk) -> None:
    # Given L2, a new version of L1, on which P1, R1, O1 and S1 rest (L1, R1 delivered)
    _new_version_of_a_delivered_fact(desk)
    client, csrf = desk.signed_in("reviewer")
    said = (
        "Accepting it replaces L1: that version, with any version before it never "
        "accepted, becomes SUPERSEDED, the records resting on them STALE, and deliveries "
        "of any of these owe a correction; the page of L1 shows what rests on it."
    )
    # When the reviewer looks at its card and its page, both say so before the click,
    # linking to L1, and the Accept button is described by it
    card = card_of(client.get("/").text, "L2")
    assert said in prose_of(card)
    assert 'aria-describedby="replacing-L2">Accept<span class="visually-hidden"> L2</span>' in card
    note = card[card.index('id="replacing-L2"') :]
    assert 'href="/records/L1"' in note[: note.index("</p>")]
    actions = client.get("/records/L2").text
    actions = actions[actions.index('id="act-h"') :]
    assert said in prose_of(actions[: actions.index("</section>")])

    # And once accepted, the message says what was done, which is what happened
    done = client.post("/records/L2/accept", data={"csrf": csrf, "next": "/"})
    assert (
        "Accepted L2; what it replaced is SUPERSEDED and what rested on that STALE (Needs "
        "attention lists the corrections owed)."
    ) in text_of(client.get(done.headers["location"]).text)
    second = desk.ledger.authenticate(desk.ledger.admin().issue_token("reviewer-2"))
    assert [second.get(r).status.value for r in ("L1", "P1", "R1", "O1", "S1")] == [
        "SUPERSEDED", "STALE", "STALE", "STALE", "STALE",
    ]  # fmt: skip
    assert len(desk.reviewer.corrections_due()) == 2


def test_a_capture_of_a_source_again_says_it_replaces_and_calls_no_capture_a_rival(
    desk: Desk,
) -> None:
    # Given an accepted capture of a source, and a capture of other bytes of it
    desk.agent.capture(scope="proj-a", uri="https://x.test/log", content=b"v1", id="F1")
    desk.reviewer.accept("F1")
    desk.agent.capture(scope="proj-a", uri="https://x.test/log", content=b"v2", id="F2")
    client, csrf = desk.signed_in("reviewer")
    card = card_of(client.get("/").text, "F2")
    # Then its card says accepting it replaces the earlier captures, and calls F1
    # no rival (accepting F2 replaces it: reads of the source never CONFLICT)
    assert "replaces the earlier captures of its source that hold other bytes" in prose_of(card)
    assert "CONFLICT" not in card
    done = client.post("/records/F2/accept", data={"csrf": csrf, "next": "/"})
    assert "Accepted F2; what it replaced is SUPERSEDED" in text_of(
        client.get(done.headers["location"]).text
    )
    assert desk.reviewer.get("F1").status.value == "SUPERSEDED"
    # Nor, to a capture naming no version to replace (F2's bytes again, captured while
    # F2 was the accepted one), the capture accepted since
    desk.agent.capture(scope="proj-a", uri="https://x.test/log", content=b"v3", id="F3")
    desk.agent.capture(scope="proj-a", uri="https://x.test/log", content=b"v2", id="F4")
    assert desk.reviewer.get("F4").supersedes is None
    desk.reviewer.accept("F3")
    card = card_of(client.get("/").text, "F4")
    assert "replaces the earlier captures" in prose_of(card) and "CONFLICT" not in card
    client.post("/records/F4/accept", data={"csrf": csrf, "next": "/"})
    assert desk.reviewer.get("F3").status.value == "SUPERSEDED"


def test_a_revocation_preview_counts_what_it_lists_and_where_the_rest_may_not_be_read(
    desk: Desk,
) -> None:
    # Given E1 → M1 → R1 (delivered) and M2, and on M1 two more: O1 in scope ops
    # (the reviewer approves there, cannot read) and X1 in scope secret (no grant)
    _seed(desk)
    second = _approver_only_in_ops(desk)
    for scope, rid in (("ops", "O1"), ("secret", "X1")):
        desk.agent.propose(
            scope=scope, claim_key=f"{scope}.runbook", value="r", kind=Kind.PLAN, parents=["M1"],
            id=rid,
        )  # fmt: skip
        second.accept(rid)
    client, csrf = desk.signed_in("reviewer")

    # When it previews revoking E1
    preview = client.get("/records/E1/revoke")

    # Then the heading counts the three listed; O1's scope is named, not O1; X1 is not told
    text = text_of(preview.text)
    assert "Will be marked STALE (3)" in text
    assert "Not listed: 1 more in scope ops, which you may act in but not read." in text
    for unseen in ("O1", "X1", "secret"):
        assert unseen not in text
    # And the message after confirming counts the same way
    mark = _PREVIEW.search(preview.text)
    assert mark is not None
    done = client.post(
        "/records/E1/revoke", data={"csrf": csrf, "reason": "doc changed", "preview": mark[1]}
    )
    after = text_of(client.get(done.headers["location"]).text)
    assert (
        "Revoked E1; 3 records you can see marked STALE, 1 more in scope ops, which you may "
        "act in but not read; 1 delivery now owes a correction"
    ) in after
    assert second.get("O1").status.value == "STALE"


def test_the_queue_counts_no_candidates_in_a_scope_it_may_approve_in_but_not_read(
    desk: Desk,
) -> None:
    _approver_only_in_ops(desk)
    desk.agent.propose(scope="ops", claim_key="pager", value="weekly", kind=Kind.FACT, id="O1")
    client, _ = desk.signed_in("reviewer")
    text = text_of(client.get("/").text)
    # No count where it cannot know one; a count where it can
    assert "Scope ops You may approve in ops but not read it" in text
    assert "Scope proj-a 0 candidates" in text


def test_an_expired_candidate_or_one_on_an_expired_dependency_offers_no_accept(
    desk: Desk, clock: Any
) -> None:
    from datetime import timedelta

    # Given X1 (a candidate) and D1 (accepted) expiring in an hour; D2 (accepted) on D1,
    # M1 and M2 waiting on D1 and D2; two hours later
    hour = clock.now + timedelta(hours=1)
    desk.agent.propose(
        scope="proj-a", claim_key="x", value=1, kind=Kind.FACT, expires=hour, id="X1"
    )
    desk.agent.propose(
        scope="proj-a", claim_key="d", value=1, kind=Kind.FACT, expires=hour, id="D1"
    )
    desk.reviewer.accept("D1")
    desk.agent.propose(
        scope="proj-a", claim_key="d2", value=1, kind=Kind.INFERENCE, parents=["D1"], id="D2"
    )
    desk.reviewer.accept("D2")
    for rid, dep in (("M1", "D1"), ("M2", "D2")):
        desk.agent.propose(
            scope="proj-a", claim_key=f"m.{rid}", value=1, kind=Kind.INFERENCE, parents=[dep],
            id=rid,
        )  # fmt: skip
    clock.advance(hours=2)
    client, _ = desk.signed_in("reviewer")
    queue = client.get("/").text

    # Then each card's Accept is disabled, saying when what expired
    why = {
        "X1": "It expired at 2026-01-01 13:00:00 UTC: it can no longer be accepted.",
        "M1": "Its dependency D1 expired at 2026-01-01 13:00:00 UTC.",
        "M2": "Its dependency D2 expired at 2026-01-01 13:00:00 UTC (the expiry of D1).",
    }
    for rid, reason in why.items():
        for page in (card_of(queue, rid), client.get(f"/records/{rid}").text):
            assert f'class="accept" disabled aria-describedby="why-{rid}">' in page
            assert reason in text_of(page)
    # ... while X1 may still be rejected
    assert 'action="/records/X1/reject"' in card_of(queue, "X1")


# -- large values in a graph, refused revocations, locks -----------------------------------


def test_a_huge_value_or_many_ampersands_in_a_graph_leaves_its_pages_and_picture_up(
    desk: Desk,
) -> None:
    # Given B accepted, and resting on it a candidate whose value is a string near the
    # 1 MiB limit and one of 200,000 "&" (either made Graphviz refuse the picture)
    desk.agent.propose(scope="proj-a", claim_key="base", value=1, kind=Kind.FACT, id="B")
    desk.reviewer.accept("B")
    for rid, value in (("NOTES", "n" * 1_000_000), ("AMP", "&" * 200_000)):
        desk.agent.propose(
            scope="proj-a", claim_key=f"k.{rid}", value=value, kind=Kind.INFERENCE,
            parents=["B"], id=rid,
        )  # fmt: skip
    client, _ = desk.signed_in("reviewer")

    # When the reviewer opens each record's page, Then it shows its status, its
    # actions and the picture
    for rid, status, action in (("B", "ACCEPTED", "Revoke…"), ("NOTES", "CANDIDATE", "Accept")):
        page = client.get(f"/records/{rid}")
        assert page.status_code == 200, rid
        text = text_of(page.text)
        assert f"Status {status}" in text and action in text, rid
        assert '<svg role="img"' in page.text and "No picture is drawn" not in text, rid
    # And the API draws the graph as SVG too
    api = client.get(
        "/api/v1/records/B/graph",
        params={"format": "svg"},
        headers={"Authorization": f"Bearer {desk.tokens['reviewer']}"},
    )
    assert api.status_code == 200 and api.text.rstrip().endswith("</svg>")


def test_a_picture_graphviz_fails_to_draw_leaves_the_record_page_up_saying_so(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.errors import RenderError
    from ledger.serve import pictures

    _seed(desk)

    def failing(source: str, format: str, timeout: float | None = None) -> bytes:
        raise RenderError("Graphviz's dot could not draw the SVG: out of memory")

    monkeypatch.setattr(pictures, "render", failing)
    client, _ = desk.signed_in("reviewer")
    page = client.get("/records/M1")
    assert page.status_code == 200
    text = text_of(page.text)
    assert "No picture is drawn: Graphviz's dot could not draw the SVG: out of memory." in text
    assert "<svg" not in page.text and "All 3 records in the graph" in text
    assert "Status ACCEPTED" in text and "Revoke…" in text


def test_a_reason_or_note_typed_on_several_lines_is_taken_as_the_browser_sends_it(
    desk: Desk,
) -> None:
    # A browser sends each line break of a text box as CR LF, which the ledger
    # refused as a control character: no reason of two lines could be given.
    _seed(desk)
    client, csrf = desk.signed_in("reviewer")
    mark = _PREVIEW.search(client.get("/records/M1/revoke").text)
    assert mark is not None
    reason = "Retracted by its author.\r\nSee the erratum."
    r = client.post("/records/M1/revoke", data={"csrf": csrf, "reason": reason, "preview": mark[1]})
    assert r.status_code == 303
    assert desk.reviewer.get("M1").reason == "Retracted by its author.\nSee the erratum."
    # and the record page shows it on its lines, as written
    page = client.get("/records/M1").text
    shown = re.search(r'<li class="said">([^<]*)</li>', page)
    assert shown is not None and "Retracted by its author.\nSee the erratum." in shown[1]
    assert ".said { white-space: pre-line; }" in client.get("/static/console.css").text
    other, csrf2 = desk.signed_in("reviewer-2")
    other.post("/records/M2/reject", data={"csrf": csrf2, "reason": "no\r\nbasis"})
    assert desk.reviewer.get("M2").reason == "no\nbasis"


def test_a_refused_revocation_comes_back_to_its_preview_with_the_reason_typed(
    desk: Desk,
) -> None:
    import inspect

    from ledger.serve.pages import TEXT_LIMIT
    from ledger.validation import check_text

    _seed(desk)
    client, csrf = desk.signed_in("reviewer")
    preview = client.get("/records/M1/revoke")
    mark = _PREVIEW.search(preview.text)
    assert mark is not None
    # The reason box takes what the ledger takes: no more
    assert TEXT_LIMIT == inspect.signature(check_text).parameters["max_len"].default == 1024
    assert f'name="reason" rows="2" maxlength="{TEXT_LIMIT}" required>' in preview.text
    before = desk.ledger.position

    # When a reason one character too long is sent (as a browser ignoring the limit may)
    reason = "The upstream document was retracted by its author. " * 21
    reason = reason[: TEXT_LIMIT + 1]
    r = client.post("/records/M1/revoke", data={"csrf": csrf, "reason": reason, "preview": mark[1]})

    # Then it is back on the preview, saying why, the reason as typed; nothing was written
    assert (r.status_code, r.headers["location"]) == (303, "/records/M1/revoke")
    page = client.get(r.headers["location"]).text
    assert (
        "Revocation of M1 refused (ValueTooLargeError): reason is 1025 characters; "
        "the limit is 1024"
    ) in text_of(page)
    assert _field_value(page, "textarea", "reason") == reason
    assert desk.ledger.position == before
    # ... while one refused for what the record is now (revoked meanwhile) goes to its page
    desk.reviewer.revoke("M2", reason="gone")
    r = client.post("/records/M2/revoke", data={"csrf": csrf, "reason": "x", "preview": "x"})
    assert r.headers["location"] == "/records/M2"
    assert "Revocation of M2 refused (InvalidTransitionError)" in client.get("/records/M2").text


def _locked_desk(tmp_path: Any) -> tuple[Desk, str]:
    """A desk on an SQLite file whose writers wait at most a second for the lock;
    and the file's path."""
    path = str(tmp_path / "locked.db")
    ledger = Ledger.open(f"sqlite:///{path}?timeout=1")
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
    tokens = {n: admin.issue_token(n) for n in ("agent-1", "reviewer")}
    desk = Desk(
        ledger=ledger,
        app=create_app(ledger, mcp_factory=None),
        agent=ledger.authenticate(tokens["agent-1"]),
        reviewer=ledger.authenticate(tokens["reviewer"]),
        tokens=tokens,
    )
    return desk, path


def test_a_write_the_ledger_stayed_locked_for_names_its_record_and_writes_nothing(
    tmp_path: Any,
) -> None:
    import sqlite3

    # Given E1 accepted and M2 on it waiting, on an SQLite ledger another process
    # then holds the write lock of, past the ledger's one-second wait
    desk, path = _locked_desk(tmp_path)
    desk.agent.propose(scope="proj-a", claim_key="e", value=1, kind=Kind.FACT, id="E1")
    desk.reviewer.accept("E1")
    desk.agent.propose(
        scope="proj-a", claim_key="m", value=2, kind=Kind.INFERENCE, parents=["E1"], id="M2"
    )
    client, csrf = desk.signed_in("reviewer")
    preview = client.get("/records/E1/revoke")
    mark = _PREVIEW.search(preview.text)
    assert mark is not None
    before = desk.ledger.position
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        # When the reviewer accepts M2, then revokes E1
        accepted = client.post("/records/M2/accept", data={"csrf": csrf, "next": "/"})
        accept_page = text_of(client.get(accepted.headers["location"]).text)
        revoked = client.post(
            "/records/E1/revoke",
            data={"csrf": csrf, "reason": "the source was withdrawn", "preview": mark[1]},
        )
        revoke_page = client.get(revoked.headers["location"]).text
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    # Then each says which record it was about and that nothing was written
    assert accepted.headers["location"] == "/"
    assert "Nothing was written for record M2: the ledger stayed locked by other writers" in (
        accept_page
    )
    # And the revocation is back on its preview, its reason as typed
    assert revoked.headers["location"] == "/records/E1/revoke"
    assert "Nothing was written for record E1: the ledger stayed locked" in text_of(revoke_page)
    assert _field_value(revoke_page, "textarea", "reason") == "the source was withdrawn"
    assert desk.ledger.position == before
    desk.ledger.close()


def test_a_closed_ledger_page_names_the_ledger_without_its_url(desk: Desk) -> None:
    # Given a signed-in reviewer, and the ledger closed under the console
    client, _ = desk.signed_in("reviewer")
    desk.ledger.close()
    # When a page is asked for
    page = client.get("/records", params={"scope": "proj-a"})
    # Then it says the ledger is closed, and not where it lives (the operator's to know)
    assert page.status_code == 503
    assert "the ledger is closed" in text_of(page.text)
    assert desk.ledger.url not in page.text


def test_the_500_and_503_error_pages_are_titled_for_what_happened(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.errors import ClosedLedgerError, CorruptEventError

    client, _ = desk.signed_in("reviewer")
    for error, status, title in (
        (CorruptEventError("event 7 does not decode"), 500, "Server error"),
        (ClosedLedgerError("the ledger is closed"), 503, "Ledger unavailable"),
    ):

        def failing(*args: Any, error: Exception = error, **kwargs: Any) -> Any:
            raise error

        monkeypatch.setattr(Session, "records", failing)
        page = client.get("/records", params={"scope": "proj-a"})
        assert page.status_code == status
        assert f"<h1>{title}</h1>" in page.text, page.text[:2000]


def test_an_open_tab_after_signing_out_in_another_is_told_its_session_ended(
    desk: Desk,
) -> None:
    # Given two tabs of one browser (one cookie jar), M2 waiting in the queue of both
    _seed(desk)
    client, csrf = desk.signed_in("reviewer-2")
    # When one tab signs out (the browser then holds the new, signed-out session's cookie)
    client.post("/signout", data={"csrf": csrf})
    before = desk.ledger.position
    # And the other, still showing the queue, accepts M2
    r = client.post("/records/M2/accept", data={"csrf": csrf, "next": "/"})

    # Then it is told its session ended and nothing was written (not "CSRF check failed")
    assert (r.status_code, r.headers["location"]) == (303, "/")
    page = text_of(client.get("/").text)
    assert "Your session ended before the form was sent; nothing was written." in page
    assert "Sign in" in page
    assert desk.ledger.position == before


def test_a_revalidation_after_another_principals_is_refused_not_told_done_already(
    desk: Desk,
) -> None:
    # Given X resting on P1, which is revoked (X STALE)
    for parent in ("P1", "P2", "P3"):
        desk.agent.propose(scope="proj-a", claim_key=f"p.{parent}", value=1, kind=Kind.FACT,
                           id=parent, accepted_by=desk.reviewer)  # fmt: skip
    desk.agent.propose(scope="proj-a", claim_key="x", value=1, kind=Kind.INFERENCE,
                       parents=["P1"], id="X", accepted_by=desk.reviewer)  # fmt: skip
    desk.reviewer.revoke("P1", reason="wrong")
    client, csrf = desk.signed_in("reviewer-2")
    # When this reviewer revalidates X on P2, P2 is revoked, and another principal
    # revalidates X on P3 before this reviewer sends a new revalidation
    form = {"csrf": csrf, "note": "checked", "parents": "P2"}
    client.post("/records/X/revalidate", data=form)
    assert _messages(client.get("/records/X").text) == [("status", "Revalidated X.")]
    desk.reviewer.revoke("P2", reason="wrong too")
    desk.reviewer.revalidate("X", note="done here", parents=["P3"])
    before = desk.ledger.position
    client.post("/records/X/revalidate", data={**form, "note": "mine", "parents": "P3"})

    # Then it is refused (the record changed since this reviewer's own revalidation)
    shown = _messages(client.get("/records/X").text)
    assert [role for role, _ in shown] == ["alert"], shown
    assert shown[0][1].startswith("Revalidation of X refused (InvalidTransitionError)")
    assert desk.ledger.position == before


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_two_forms_sent_together_after_another_principals_decision_are_both_refused(
    desk: Desk, ledger_url: str
) -> None:
    import asyncio
    import sqlite3
    import threading
    import time

    import httpx

    # Given M2 accepted by another principal, and a reviewer's page still offering it
    desk.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="M2")
    client, csrf = desk.signed_in("reviewer-2")
    desk.reviewer.accept("M2")
    before = desk.ledger.position

    async def double_click() -> list[int]:
        # (a ledger slow to write: another process holds its lock a moment, so both
        # forms reach the server together)
        holder = sqlite3.connect(
            ledger_url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False
        )
        holder.execute("BEGIN IMMEDIATE")
        threading.Thread(target=lambda: (time.sleep(0.5), holder.execute("ROLLBACK"))).start()
        transport = httpx.ASGITransport(app=desk.app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", cookies=dict(client.cookies)
        ) as browser:
            sent = [
                browser.post("/records/M2/accept", data={"csrf": csrf, "next": "/"})
                for _ in range(2)
            ]
            return [r.status_code for r in await asyncio.gather(*sent)]

    # When Accept is sent twice at once
    assert asyncio.run(double_click()) == [303, 303]

    # Then both are refused: neither is told this reviewer accepted it
    shown = _messages(client.get("/").text)
    assert [role for role, _ in shown] == ["alert", "alert"], shown
    assert desk.ledger.position == before


def test_the_link_on_follows_the_queues_order_where_an_id_is_shown_qualified(
    desk: Desk,
) -> None:
    # Given Q1 proposed in proj-b by outsider and in proj-a (its id taken in a scope
    # the proposer cannot see), with Q10 and Q2 after it; a reviewer of both scopes
    admin = desk.ledger.admin()
    admin.grant("both", "proj-a", ["approve", "read"])
    admin.grant("both", "proj-b", ["approve", "read"])
    desk.tokens["both"] = admin.issue_token("both")
    outsider = desk.ledger.authenticate(desk.tokens["outsider"])
    outsider.propose("proj-b", "q", 0, Kind.FACT, id="Q1")
    for rid in ("Q1", "Q10", "Q2"):
        desk.agent.propose("proj-a", f"q.{rid}", 1, Kind.FACT, id=rid)
    client, csrf = desk.signed_in("both")
    cards = re.findall(r'<h3 id="c-([^"]+)"', client.get("/").text)
    assert cards[:3] == ["Q1@@proj-a", "Q10", "Q2"], cards
    # When the first card is accepted, the link goes on to the next in that order
    client.post("/records/Q1@@proj-a/accept", data={"csrf": csrf, "next": "/"})
    assert "Go on with the next candidate, Q10</a>" in client.get("/").text


def test_a_decision_after_ones_own_on_a_card_shown_before_says_whose_came_first(
    desk: Desk,
) -> None:
    desk.agent.propose("proj-a", "x.y", 1, Kind.FACT, id="X3")
    client, csrf = desk.signed_in("reviewer")
    client.post("/records/X3/accept", data={"csrf": csrf, "next": "/"})
    client.post("/records/X3/reject", data={"csrf": csrf, "reason": "no", "next": "/"})
    text = text_of(client.get("/").text)
    assert "your own acceptance of it came first, and nothing of yours was written" in text
    assert "another decision came first" not in text


def test_needs_attention_names_a_supersession_once_not_again_as_a_quoted_reason(
    desk: Desk,
) -> None:
    # Given P1 resting on F1, then F1 replaced by F2
    desk.agent.propose("proj-a", "f", 1, Kind.FACT, id="F1")
    desk.reviewer.accept("F1")
    desk.agent.propose("proj-a", "p", "plan", Kind.PLAN, parents=["F1"], id="P1")
    desk.reviewer.accept("P1")
    desk.agent.propose("proj-a", "f", 2, Kind.FACT, supersedes="F1", id="F2")
    desk.reviewer.accept("F2")
    client, _ = desk.signed_in("reviewer")
    text = text_of(client.get("/attention").text)
    # Then P1's row says what happened, once: no quote of the ledger's own words
    assert "F1 superseded by F2" in text
    assert not re.search(r"“\s*superseded by F2\s*”", text), text


def test_a_record_page_as_of_before_the_record_says_it_was_not_there_yet(desk: Desk) -> None:
    _seed(desk)
    client, _ = desk.signed_in("reviewer")
    # A moment before R1 was proposed: its page is refused, saying as of when
    page = client.get("/records/R1?as_of_position=1")
    assert page.status_code == 404
    text = text_of(page.text)
    assert re.search(
        r"record 'R1' is unknown or not visible to 'reviewer' as of log position \d+: one "
        r"proposed since is not there yet",
        text,
    ), text
    # while now it is there, and an id that never was is refused as ever
    assert client.get("/records/R1").status_code == 200
    never = text_of(client.get("/records/NOPE").text)
    assert "not visible to 'reviewer'" in never and "as of log position" not in never


def test_a_revocation_page_of_a_record_revoked_since_links_to_the_record(desk: Desk) -> None:
    # Given E1 revoked since the reviewer was given a link to revoke it
    _seed(desk)
    desk.reviewer.revoke("E1", reason="doc changed")
    client, _ = desk.signed_in("reviewer")
    # When the link is followed
    page = client.get("/records/E1/revoke")
    # Then the refusal links to E1 as it is now, and to the queue
    assert page.status_code == 409
    text = text_of(page.text)
    assert "record 'E1' is REVOKED" in text
    assert 'href="/records/E1">See record E1 as it is now</a>' in page.text
    assert "Back to the review queue" in text
    # And a page refused for another reason (an unknown record) has no such link
    unknown = client.get("/records/NOPE/revoke")
    assert unknown.status_code == 404 and "See record" not in unknown.text


def test_the_outbox_and_a_record_page_tell_an_expiry_as_an_expiry(desk: Desk, clock: Any) -> None:
    from datetime import timedelta

    # Given X1 (on E1) delivered and expiring in 30 days, and D1 delivered expiring in an hour
    _seed(desk)
    month, hour = clock.now + timedelta(days=30), clock.now + timedelta(hours=1)
    for rid, expires in (("X1", month), ("D1", hour)):
        desk.agent.propose(
            scope="proj-a", claim_key=f"k.{rid}", value=1, kind=Kind.INFERENCE,
            parents=["E1"], expires=expires, id=rid,
        )  # fmt: skip
        desk.reviewer.accept(rid)
        desk.reviewer.deliver(rid, recipient=f"{rid.lower()}@x.test")
    client, _ = desk.signed_in("reviewer")
    # When D1's hour has passed, then E1 is revoked for a reason that speaks of expiry
    clock.advance(hours=2)
    text = text_of(client.get("/attention").text)
    # Then the outbox says why D1's delivery owes a correction
    assert "d1@x.test received D1" in text
    owed = "Now ACCEPTED NEEDS_REVALIDATION : past its expiry, or that of a record it rests on"
    assert owed in text
    desk.reviewer.revoke("E1", reason="the cert expired at noon")
    page = text_of(client.get("/records/X1").text)
    # And X1's page, STALE for that reason, still says when X1 itself expires
    assert "the cert expired at noon" in page
    assert "Its expiry: 2026-01-31 12:00:00 UTC" in page
