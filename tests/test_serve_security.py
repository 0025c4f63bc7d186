"""What ``provledger serve`` does for callers it does not know yet, and for large
inputs: no work for an unknown token's body, sign-in that floods of cookieless
requests cannot block, error pages that open no sessions and aim no form at
another site, and pages that encode a stored value only as far as they show it.
On every backend."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from ledger import Kind, Ledger
from ledger.serve import api as api_module
from ledger.serve import create_app
from ledger.serve.app import ACCESS_LOGGER
from ledger.serve.inputs import parse_body
from ledger.serve.pages import environment
from ledger.serve.sessions import COOKIE, SessionStore
from tests.test_serve_console import csrf_of as _csrf

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@pytest.fixture
def tokens(ledger: Ledger) -> dict[str, str]:
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
    return {name: admin.issue_token(name) for name in ("agent-1", "reviewer")}


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Each time the API parses a request body: whether it ran on the event loop."""
    calls: list[bool] = []

    def watched(raw: bytes) -> Any:
        calls.append(_on_event_loop())
        return parse_body(raw)

    monkeypatch.setattr(api_module, "parse_body", watched)
    yield calls


def test_an_unknown_token_is_refused_before_its_body_is_parsed(
    ledger: Ledger, tokens: dict[str, str], parsed: list[bool]
) -> None:
    # Parsing a large JSON body takes a good part of a second of CPU: done for any
    # caller on the event loop, it held up every other request meanwhile.
    body = b'{"scope": "proj-a", "value": [' + b"1," * 50_000 + b"1]}"
    before = ledger.position
    with TestClient(create_app(ledger, mcp_factory=None)) as client:
        for headers, refused in (
            ({"Authorization": "Bearer plt_unknown"}, "UnknownTokenError"),
            ({}, "AuthenticationError"),
        ):
            r = client.post(
                "/api/v1/records",
                content=body,
                headers={**headers, "Content-Type": "application/json"},
            )
            assert r.status_code == 401
            assert r.json()["error"]["type"] == refused
        assert parsed == []
        # A known caller's body is parsed in a worker thread, off the event loop.
        r = client.post(
            "/api/v1/records",
            json={"scope": "proj-a", "claim_key": "k", "value": 1, "kind": "fact", "id": "A1"},
            headers={"Authorization": f"Bearer {tokens['agent-1']}"},
        )
        assert r.status_code == 201
        assert parsed == [False]
    assert ledger.position == before + 1  # the refusals wrote nothing


def test_a_token_sent_in_a_query_parameter_is_not_repeated_in_the_refusal(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    # Given an agent that pasted its token into a parameter, as well as its header
    token = tokens["agent-1"]
    client = TestClient(create_app(ledger, mcp_factory=None))
    r = client.get(
        "/api/v1/records", params={"scope": token}, headers={"Authorization": f"Bearer {token}"}
    )
    # Then it is refused, naming the parameter, and the token is not repeated
    assert r.status_code == 422, r.text
    assert token not in r.text
    assert r.json()["error"]["field"] == "scope"
    assert r.json()["error"]["message"].startswith(
        "query parameter 'scope' holds a token: send a token in the Authorization header only"
    )
    # as in a parameter a success would have shown back (a read's claim key)
    read = client.get(
        "/api/v1/read",
        params={"scope": "proj-a", "claim_key": f"k.{token}"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert read.status_code == 422 and token not in read.text, read.text
    # while a name that merely holds "plt_" is no token: a key proposed is read
    key = "python:matplotlib.plt_savefig_default_dpi_for_quarterly_report_figs"
    named = client.get(
        "/api/v1/read",
        params={"scope": "proj-a", "claim_key": key},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert named.status_code == 200 and named.json()["outcome"] == "MISSING", named.text


def test_a_console_address_holding_a_token_shows_nothing(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    # A page would show its address's parameters back (its links, its forms)
    token = tokens["reviewer"]
    client = TestClient(create_app(ledger, mcp_factory=None))
    page = client.get("/")
    client.post("/signin", data={"csrf": _csrf(page.text), "token": token})
    for path, params in (
        ("/explain", {"scope": "proj-a", "claim_key": token}),
        ("/records", {"scope": "proj-a", "claim_prefix": token}),
    ):
        r = client.get(path, params=params, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == path, r.text
        shown = client.get(path, params={"scope": "proj-a"}).text
        assert token not in shown and token[:24] not in shown
        assert "Nothing was shown at that address: query parameter" in shown
    assert client.get("/records", params={"scope": "proj-a"}).status_code == 200


def test_a_token_cut_short_in_a_refusal_or_named_as_a_parameter_is_masked(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    token = tokens["agent-1"]
    client = TestClient(create_app(ledger, mcp_factory=None))
    auth = {"Authorization": f"Bearer {token}"}
    # A value the refusal would quote only its first 40 characters of: refused first
    # for the token it holds
    cut = client.get("/api/v1/records/M1", params={"as_of_time": token}, headers=auth)
    assert cut.status_code == 422, cut.text
    assert token[:24] not in cut.text
    assert "'as_of_time' holds a token" in cut.json()["error"]["message"]
    # A parameter named by the token itself: masked in the field named too
    named = client.get("/api/v1/records", params={"scope": "proj-a", token: "1"}, headers=auth)
    assert named.status_code == 422, named.text
    assert token[:24] not in named.text
    assert named.json()["error"]["field"] == "plt_…"


def test_an_sqlite_ledgers_file_is_not_named_to_callers(tmp_path: Any) -> None:
    # Given a served SQLite ledger in a directory whose name is the operator's
    import os

    where = tmp_path / "secret-dir"
    where.mkdir()
    led = Ledger.open(f"sqlite:///{where / 'ledger.db'}")
    admin = led.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    token = admin.issue_token("agent-1")
    client = TestClient(create_app(led, mcp_factory=None))
    auth = {"Authorization": f"Bearer {token}"}
    # When its file is moved away under the server, and an agent calls
    os.rename(where / "ledger.db", tmp_path / "moved.db")
    r = client.get("/api/v1/records", params={"scope": "proj-a"}, headers=auth)
    led.close()
    # Then the refusal says what happened to the ledger's file, not where it is
    assert r.status_code == 503, r.text
    message = r.json()["error"]["message"]
    assert "the ledger's file was removed or moved away" in message
    assert "secret-dir" not in r.text


def test_a_relative_ledger_path_is_left_out_only_where_it_names_the_file() -> None:
    from ledger.persistence.urls import without_location

    # A relative file name is any word: only its quoted and absolute forms are the file's
    text = "InvalidInputError: scope 'alpha' holds no ledger record 'nope-l' nor 'l'"
    assert without_location(text, "sqlite:///l") == text
    import os

    shown = f"the ledger file {os.path.abspath('l')!r} was removed"
    assert without_location(shown, "sqlite:///l") == "the ledger's file was removed"
    # An id that merely starts as a token does is no token
    from ledger.access import mask_tokens

    assert mask_tokens("record 'plt_training_loss_curves_v2'") == (
        "record 'plt_training_loss_curves_v2'"
    )


def test_a_field_given_twice_deep_inside_a_body_is_named_as_such(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    nested = "[" * 600 + '{"x": 1, "x": 2}' + "]" * 600
    before = ledger.position
    with TestClient(create_app(ledger, mcp_factory=None)) as client:
        r = client.post(
            "/api/v1/records",
            content=f'{{"scope": "proj-a", "value": {nested}}}',
            headers={
                "Authorization": f"Bearer {tokens['agent-1']}",
                "Content-Type": "application/json",
            },
        )
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["message"] == "the request body gives 'x' more than once in 'value'"
    assert error["field"] == "value"
    assert ledger.position == before


def test_a_sign_in_form_still_works_after_a_flood_of_requests_without_a_cookie(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    # Each cookieless request opens an anonymous session; enough of them used to
    # evict the session of a sign-in form before it was sent, refusing the sign-in.
    store = SessionStore(capacity=5)
    app = create_app(ledger, mcp_factory=None, sessions=store)
    reviewer = TestClient(app, follow_redirects=False)
    form_csrf = _csrf(reviewer.get("/").text)
    for _ in range(4 * store.capacity):
        TestClient(app).get("/")
    r = reviewer.post("/signin", data={"csrf": form_csrf, "token": tokens["reviewer"]})
    assert r.status_code == 303
    assert "Signed in as <strong>reviewer</strong>" in reviewer.get("/").text


def test_an_evicted_sign_in_form_vouches_only_for_its_own_session(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    store = SessionStore(capacity=2)
    app = create_app(ledger, mcp_factory=None, sessions=store)
    victim, attacker = (TestClient(app, follow_redirects=False) for _ in range(2))
    victim_csrf = _csrf(victim.get("/").text)
    attacker_csrf = _csrf(attacker.get("/").text)
    for _ in range(4 * store.capacity):
        TestClient(app).get("/")
    before = len(store)
    # Another session's form token, a made-up one, or none: each is refused.
    for sent in ({"csrf": attacker_csrf}, {"csrf": victim_csrf + "x"}, {}):
        r = victim.post("/signin", data={**sent, "token": tokens["reviewer"]})
        assert r.status_code == 303
        page = victim.get("/").text
        assert "The sign-in form had expired" in page
        assert "Signed in as" not in page
        victim_csrf = _csrf(page)  # the page of the fresh session that says so
    # A cookie made up by the client is not vouched for by a token of another.
    forger = TestClient(app, follow_redirects=False)
    forger.cookies.set(COOKIE, "made-up")
    r = forger.post("/signin", data={"csrf": attacker_csrf, "token": tokens["reviewer"]})
    assert "Signed in as" not in forger.get("/").text
    assert len(store) <= before + 4


def test_error_pages_open_no_sessions(ledger: Ledger) -> None:
    store = SessionStore()
    client = TestClient(create_app(ledger, mcp_factory=None, sessions=store))
    for path in ("/no/such/page", "/static/no-such.css", "/api"):
        r = client.get(path)
        assert r.status_code == 404
        assert COOKIE not in r.headers.get("set-cookie", "")
    assert client.put("/records").status_code == 405
    assert len(store) == 0


def test_the_page_of_a_protocol_relative_path_aims_no_form_at_another_site(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    client = TestClient(create_app(ledger, mcp_factory=None), follow_redirects=False)
    client.post("/signin", data={"csrf": _csrf(client.get("/").text), "token": tokens["reviewer"]})
    for path in ("//evil.example/x", "//evil.example/x?as_of_position=1"):
        page = client.get(f"http://testserver{path}")
        assert page.status_code == 404
        assert "Signed in as <strong>reviewer</strong>" in page.text
        targets = re.findall(r'(?:action|href)="([^"]*)"', page.text)
        targets.remove("data:,")  # the page's empty icon, in the page itself
        assert targets and all(t[:1] in "/#" and not t.startswith("//") for t in targets)


class _Counted:
    """A value the ``json`` filter has no JSON type for: counts its conversions."""

    converted = 0

    def __str__(self) -> str:
        _Counted.converted += 1
        return "counted"


def test_a_cut_value_is_encoded_only_as_far_as_it_is_shown() -> None:
    # A page of records with values of a megabyte each encoded all of every value
    # to show a line of each, on the event loop: seconds without any other answer.
    shown = environment().filters["json"]
    value = {"head": "x" * 200, "tail": [_Counted()], "more": list(range(10_000))}
    text = shown(value, 120, compact=True)
    assert text == '{"head": "' + "x" * 110 + " …"
    assert _Counted.converted == 0
    assert shown({"tail": _Counted()}, 120) == '{\n  "tail": "counted"\n}'
    assert _Counted.converted == 1


def test_a_page_of_records_with_large_values_shows_each_cut(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    agent = ledger.authenticate(tokens["agent-1"])
    large = {f"k{i}": "v" * 80 for i in range(2_000)}
    for i in range(3):
        agent.propose(scope="proj-a", claim_key=f"big.{i}", value=large, kind=Kind.FACT, id=f"B{i}")
    client = TestClient(create_app(ledger, mcp_factory=None), follow_redirects=False)
    client.post("/signin", data={"csrf": _csrf(client.get("/").text), "token": tokens["reviewer"]})
    page = client.get("/records", params={"scope": "proj-a"}).text
    cells = re.findall(r'<code class="details">([^<]*)</code>', page)
    assert len(cells) == 3
    assert all(len(cell) < 200 and cell.endswith(" …") for cell in cells)


def test_the_access_log_names_the_principal_of_each_surface(
    ledger: Ledger, tokens: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(ledger, mcp_factory=None)
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER), TestClient(app) as client:
        # an API call, a console page before and after signing in, an unknown token
        client.get(
            "/api/v1/records",
            params={"scope": "proj-a"},
            headers={"Authorization": f"Bearer {tokens['agent-1']}"},
        )
        client.post(
            "/signin", data={"csrf": _csrf(client.get("/").text), "token": tokens["reviewer"]}
        )
        client.get("/records", params={"scope": "proj-a"})
        client.get("/api/v1/records", headers={"Authorization": "Bearer plt_unknown"})
    lines = [r.getMessage() for r in caplog.records if r.name == ACCESS_LOGGER]
    shown = [(line.split('"')[0].split(" - ")[1].strip(), line.split('"')[1]) for line in lines]
    assert shown == [
        ("agent-1", "GET /api/v1/records?scope=proj-a HTTP/1.1"),
        ("-", "GET / HTTP/1.1"),
        ("-", "POST /signin HTTP/1.1"),
        ("reviewer", "GET / HTTP/1.1"),  # where the sign-in sent it
        ("reviewer", "GET /records?scope=proj-a HTTP/1.1"),
        ("-", "GET /api/v1/records HTTP/1.1"),
    ], lines
    assert [line.rsplit(" ", 1)[1] for line in lines] == ["200", "200", "303", "200", "200", "401"]


def test_the_access_log_names_the_principal_of_every_console_form(
    ledger: Ledger, tokens: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given a reviewer signed in to the console, and two candidates of the agent's
    agent = ledger.authenticate(tokens["agent-1"])
    for rid in ("C1", "C2"):
        agent.propose(scope="proj-a", claim_key=rid.lower(), value=1, kind=Kind.FACT, id=rid)
    app = create_app(ledger, mcp_factory=None)
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER), TestClient(app) as client:
        client.post(
            "/signin", data={"csrf": _csrf(client.get("/").text), "token": tokens["reviewer"]}
        )
        csrf = _csrf(client.get("/").text)
        caplog.clear()
        # When it sends each of the console's forms (the ledger refusing some)
        for path, fields in (
            ("/records/C1/accept", {}),
            ("/records/C2/reject", {"reason": "no basis"}),
            ("/records/C1/revoke", {"reason": "wrong", "preview": "stale"}),
            ("/records/C1/revalidate", {"note": "checked"}),
            ("/deliveries/D-none/correction", {"note": "withdrawn"}),
            ("/signout", {}),
        ):
            client.post(path, data={"csrf": csrf, **fields}, follow_redirects=False)
        # Then each line names the reviewer, not "-"
        lines = [r.getMessage() for r in caplog.records if r.name == ACCESS_LOGGER]
        assert len(lines) == 6, lines
        for line in lines:
            assert ' - reviewer "POST /' in line and line.endswith(" 303"), line
        # while a form sent with its session's cookie but not its CSRF token (forged
        # in its name, refused) is not logged as the reviewer's
        page = client.get("/").text
        client.post("/signin", data={"csrf": _csrf(page), "token": tokens["reviewer"]})
        caplog.clear()
        forged = client.post("/records/C2/accept", data={"csrf": "x"}, follow_redirects=False)
        assert forged.status_code == 403
    lines = [r.getMessage() for r in caplog.records if r.name == ACCESS_LOGGER]
    assert len(lines) == 1 and ' - - "POST /records/C2/accept' in lines[0], lines


def test_a_form_the_server_cannot_read_is_said_to_be_unreadable_not_forbidden(
    ledger: Ledger,
) -> None:
    client = TestClient(create_app(ledger, mcp_factory=None))
    client.get("/")
    position = ledger.position
    flood = {f"f{i}": (None, "x") for i in range(1500)}
    broken = {"content": b"--x\r\n", "headers": {"content-type": "multipart/form-data"}}
    for r in (client.post("/signin", files=flood), client.post("/signin", **broken)):
        assert r.status_code == 400
        assert "The form could not be read" in r.text and "is not allowed" not in r.text
        assert "allow" not in r.headers
    assert "sent URL-encoded, not as multipart" in client.post("/signin", files=flood).text
    assert ledger.position == position
