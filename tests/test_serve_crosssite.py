"""The review console reached from another site: a link in chat or email lands on
the page it names, signed in, and a form another site submits changes nothing,
neither the ledger nor who is signed in.

The session cookie is ``SameSite=Lax``: a top-level link from another site carries
it (console GETs change nothing), a cross-site form POST does not, and a POST
without a cookie is refused with no ``Set-Cookie`` (one would replace the
reviewer's, signing them out). In Chromium, with the console on ``127.0.0.1`` and
the other site on ``localhost`` (a different site); the no-cookie answers are
checked over plain HTTP too, on every backend.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from ledger import Ledger
from ledger.serve import create_app
from ledger.serve.sessions import COOKIE, SessionStore
from tests import test_serve_browser
from tests.serve_support import running
from tests.test_serve_console import csrf_of

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: Chromium, as the console's browser tests launch it (skipped where it is missing).
browser = test_serve_browser.browser

#: The console's form targets, with a form each that would act if it were honoured.
FORMS = {
    "accept": ("/records/E1/accept", {"csrf": "guessed", "next": "/"}),
    "sign-out": ("/signout", {"csrf": "guessed"}),
    "sign-in": ("/signin", {"csrf": "guessed", "token": "plt_the_other_sites_own"}),
}


def _grant(led: Ledger) -> dict[str, str]:
    """A reviewer, an agent, and E1 (the agent's) waiting for review; their tokens."""
    admin = led.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit"])
    tokens = {name: admin.issue_token(name) for name in ("agent-1", "reviewer")}
    led.authenticate(tokens["agent-1"]).capture(
        scope="proj-a", uri="https://docs.example.test/a", content=b"a fact", id="E1"
    )
    return tokens


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, Ledger]]:
    """The console of an SQLite ledger on 127.0.0.1: (base URL, reviewer token, ledger)."""
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as led:
        token = _grant(led)["reviewer"]
        with running(create_app(led, mcp_factory=None)) as base:
            yield base, token, led


@contextmanager
def other_site(pages: dict[str, str]) -> Iterator[str]:
    """Serve ``pages`` (path → HTML) at ``http://localhost:PORT``: another site than
    the console's ``127.0.0.1``. Yields its base URL."""

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet test output

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _sign_in(browser: Any, base: str, token: str) -> tuple[Any, Any, str]:
    """A new browser context signed in as the reviewer: (context, page, session cookie)."""
    from playwright.sync_api import expect

    context = browser.new_context()
    page = context.new_page()
    page.goto(base + "/")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_text("Signed in as reviewer", exact=True)).to_be_visible()
    return context, page, _cookie(context)


def _cookie(context: Any) -> str:
    found = [c["value"] for c in context.cookies() if c["name"] == COOKIE]
    assert len(found) == 1
    value: str = found[0]
    return value


@pytest.mark.parametrize(
    ("link", "lands", "heading"),
    [("/records/E1", "/records/E1", "E1"), ("/signout", "/", "Review queue")],
)
def test_a_link_from_another_site_lands_on_its_page_signed_in(
    browser: Any,
    served: tuple[str, str, Ledger],
    link: str,
    lands: str,
    heading: str,
) -> None:
    from playwright.sync_api import expect

    base, token, led = served
    context, page, cookie = _sign_in(browser, base, token)
    before = led.position

    # Given a page on another site linking to the console (a chat message, an email)
    with other_site({"/": f'<a id="go" href="{base}{link}">review this</a>'}) as other:
        page.goto(other + "/")
        # When the reviewer follows the link
        with page.expect_navigation():
            page.click("#go")
        assert page.url == base + lands

    # Then it lands on that page, still signed in with the same session
    expect(page.get_by_role("heading", name=heading, exact=False).first).to_be_visible()
    expect(page.get_by_text("Signed in as reviewer", exact=True)).to_be_visible()
    assert _cookie(context) == cookie
    # And a GET changed nothing: /signout signs out only by its form's POST
    assert led.position == before
    page.goto(base + "/")
    expect(page.get_by_text("Signed in as reviewer", exact=True)).to_be_visible()
    context.close()


@pytest.mark.parametrize("target", sorted(FORMS))
def test_a_form_another_site_submits_changes_nothing_and_signs_nobody_out(
    browser: Any,
    served: tuple[str, str, Ledger],
    target: str,
) -> None:
    from playwright.sync_api import expect

    base, token, led = served
    context, page, cookie = _sign_in(browser, base, token)
    before = led.position
    path, fields = FORMS[target]
    inputs = "".join(f'<input name="{k}" value="{v}">' for k, v in fields.items())
    attack = (
        f'<form id="f" method="post" action="{base}{path}">{inputs}</form>'
        "<script>document.getElementById('f').submit()</script>"
    )

    # Given a page on another site that submits a form to the console on load
    with other_site({"/": attack}) as other:
        # When the signed-in reviewer opens it
        with page.expect_response(base + path) as answered:
            page.goto(other + "/")
        response = answered.value

    # Then the console refuses it, setting no cookie
    assert response.status == 403
    assert "set-cookie" not in response.all_headers()
    # And the ledger is unchanged, E1 still waiting for review
    assert led.position == before
    assert led.authenticate(token).get("E1").status.value == "CANDIDATE"
    # And the reviewer is still signed in, with the same session cookie
    assert _cookie(context) == cookie
    page.goto(base + "/records/E1")
    expect(page.get_by_text("Signed in as reviewer", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Accept")).to_be_enabled()
    context.close()


def test_console_pages_another_site_loads_as_images_or_frames_sign_nobody_out(
    browser: Any,
    served: tuple[str, str, Ledger],
) -> None:
    from playwright.sync_api import expect

    base, token, _ = served
    context, page, cookie = _sign_in(browser, base, token)

    # Given a page on another site that embeds console pages (sent without the
    # Lax cookie, so answered as a browser without a session, with a new cookie)
    embeds = f'<img src="{base}/"><img src="{base}/records/E1"><iframe src="{base}/"></iframe>'
    with other_site({"/": embeds}) as other:
        # When the signed-in reviewer opens it
        with page.expect_response(base + "/records/E1"):
            page.goto(other + "/")
        page.wait_for_load_state("load")

    # Then the browser kept none of those cookies: the reviewer's session is the same
    assert _cookie(context) == cookie
    page.goto(base + "/")
    expect(page.get_by_text("Signed in as reviewer", exact=True)).to_be_visible()
    context.close()


def test_a_post_without_a_session_cookie_is_refused_with_no_cookie_over_http(
    served: tuple[str, str, Ledger],
) -> None:
    # What a browser sends for a form another site submits: no cookie at all.
    base, _, led = served
    before = led.position
    with httpx.Client(base_url=base, follow_redirects=False) as client:
        for path, fields in FORMS.values():
            r = client.post(path, data=fields)
            assert r.status_code == 403, path
            assert "set-cookie" not in r.headers, path
            assert not client.cookies
    assert led.position == before


def test_a_post_without_a_session_cookie_keeps_no_session(ledger: Ledger) -> None:
    tokens = _grant(ledger)
    store = SessionStore()
    app = create_app(ledger, mcp_factory=None, sessions=store)
    cookieless = TestClient(app, follow_redirects=False)
    for path, fields in FORMS.values():
        r = cookieless.post(path, data=fields)
        assert r.status_code == 403
        assert COOKIE not in r.headers.get("set-cookie", "")
    # Not even a real sign-in token with a sign-in form's own CSRF token signs in
    # without the cookie that form came with.
    form = TestClient(app).get("/")
    r = cookieless.post("/signin", data={"csrf": csrf_of(form.text), "token": tokens["reviewer"]})
    assert r.status_code == 403
    assert "expired" in r.text
    assert COOKIE not in r.headers.get("set-cookie", "")
    assert len(store) == 1  # the session of the page fetched above, no other
    assert store.get(form.cookies[COOKIE]) is not None


def test_console_gets_change_nothing_and_keep_the_session(ledger: Ledger) -> None:
    # A top-level link from another site carries a Lax cookie: what it can reach
    # (every GET of the console) must change nothing.
    tokens = _grant(ledger)
    client = TestClient(create_app(ledger, mcp_factory=None), follow_redirects=False)
    client.post(
        "/signin", data={"csrf": csrf_of(client.get("/").text), "token": tokens["reviewer"]}
    )
    cookie = client.cookies[COOKIE]
    before = ledger.position
    for path in (
        "/",
        "/signin",
        "/signout",
        "/records",
        "/records/E1",
        "/records/E1/accept",
        "/records/E1/revoke",
        "/attention",
        "/explain?scope=proj-a&claim_key=x",
    ):
        r = client.get(path)
        assert r.status_code in (200, 303, 405), path
        assert "set-cookie" not in r.headers, path
    assert ledger.position == before
    assert client.cookies[COOKIE] == cookie
    assert "Signed in as <strong>reviewer</strong>" in client.get("/").text
