"""What drills of the JSON API found: a caller without a token made the server hold
its body, a token in an address was shown back, a parent not usable now was told
as bad input, a body missing fields named only the first, a path's id was echoed
encoded, and the OpenAPI document left out headers and HEAD. On every backend."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from starlette.testclient import TestClient

from ledger import Kind, Ledger
from ledger.serve import create_app
from tests.serve_support import DOC, PREFIX, Api, error_of, running

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@dataclass
class Served:
    """A ledger behind the app: an agent (propose, read in proj-a) and a reviewer
    (approve, read in proj-a); proj-c is a scope neither can see."""

    ledger: Ledger
    client: TestClient
    agent: Api
    reviewer: Api
    tokens: dict[str, str]


@pytest.fixture
def served(ledger: Ledger) -> Iterator[Served]:
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
    admin.grant("other", scope="proj-c", roles=["propose", "approve", "read"])
    tokens = {name: admin.issue_token(name) for name in ("agent-1", "reviewer", "other")}
    with TestClient(create_app(ledger, mcp_factory=None)) as client:
        yield Served(
            ledger, client, Api(client, tokens["agent-1"]), Api(client, tokens["reviewer"]), tokens
        )


def _head(sock: socket.socket) -> bytes:
    """What the server sent until the end of its answer's headers (or it closed)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


# -- 1. the token before the body ----------------------------------------------------------


def test_a_caller_without_a_known_token_is_refused_before_its_body_arrives(
    served: Served,
) -> None:
    # Given requests declaring a 4,000,000-byte body (under the 4 MiB limit) that
    # send a few bytes of it and wait
    with running(served.client.app) as base:
        host, port = base.removeprefix("http://").split(":")
        for auth in (b"", b"Authorization: Bearer plt_unknown\r\n"):
            with socket.create_connection((host, int(port)), timeout=20) as conn:
                conn.sendall(
                    b"POST /api/v1/records HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Type: "
                    b"application/json\r\nContent-Length: 4000000\r\n\r\n" + b'{"scope": '
                )
                # Then each is answered 401 with the body still incomplete
                answer = _head(conn)
                assert answer.startswith(b"HTTP/1.1 401"), (auth, answer[:200])
                assert b"\r\nwww-authenticate: bearer" in answer.lower()
        # And a known caller's body is waited for and read as before
        with socket.create_connection((host, int(port)), timeout=20) as conn:
            body = b'{"scope": "proj-a", "claim_key": "k", "value": 1, "kind": "fact"}'
            conn.sendall(
                b"POST /api/v1/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                + served.tokens["agent-1"].encode()
                + b"\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body[:10]
            )
            conn.sendall(body[10:])
            assert _head(conn).startswith(b"HTTP/1.1 201")


# -- 2. a token in an address --------------------------------------------------------------


def test_a_token_in_an_address_is_masked_on_every_not_found_and_not_allowed_answer(
    served: Served,
) -> None:
    token = served.tokens["agent-1"]
    auth = {"Authorization": f"Bearer {token}"}
    answers = [
        served.client.get(f"/api/v1/{token}", headers=auth),  # API 404
        served.client.put(f"/api/v1/records/{token}", headers=auth),  # API 405
        served.client.get(f"/no/{token}"),  # console 404 page
        served.client.post(f"/attention/{token}"),  # console 404 page, by POST
        served.client.put(f"/records/{token}"),  # console 405 page
    ]
    assert [r.status_code for r in answers] == [404, 405, 404, 404, 405]
    for r in answers:
        assert token not in r.text and token[:24] not in r.text, r.text
        assert "plt_…" in r.text, r.text


def test_a_token_in_the_start_page_s_address_is_not_carried_into_the_sign_in_form(
    served: Served,
) -> None:
    token = served.tokens["agent-1"]
    browser = TestClient(served.client.app)
    for params in ({"token": token}, {"next": f"/records?scope=proj-a&token={token}"}):
        page = browser.get("/", params=params)
        assert page.status_code == 200
        assert token not in page.text and 'name="next"' not in page.text, params
    # Another page to return to is still carried
    page = browser.get("/", params={"next": "/records?scope=proj-a"}).text
    assert 'name="next" value="/records?scope=proj-a"' in page
    # Nor is a token in the address of another page, signed out, carried to sign-in
    moved = browser.get("/records", params={"token": token}, follow_redirects=False)
    assert moved.status_code == 303 and token not in moved.headers["location"]
    kept = browser.get("/records", params={"scope": "proj-a"}, follow_redirects=False)
    assert kept.headers["location"] == "/?next=%2Frecords%3Fscope%3Dproj-a"


# -- 3. a parent not usable now: 409; unknown or hidden: 422 -------------------------------


def _fact(served: Served, rid: str, **extra: object) -> None:
    body = {"scope": "proj-a", "claim_key": f"k.{rid}", "value": 1, "kind": "fact", "id": rid}
    r = served.agent.post("/records", json={**body, **extra})
    assert r.status_code == 201, r.text


def test_a_named_parent_not_usable_now_is_409_and_an_unknown_or_hidden_one_422(
    served: Served,
) -> None:
    # Given a record in each status no new record may rest on, in proj-a
    for rid in ("REV", "REJ", "OLD", "BASE"):
        _fact(served, rid)
    for rid in ("REV", "OLD", "BASE"):
        served.reviewer.post("/records/{record_id}/accept", record_id=rid)
    _fact(served, "ST", parents=["BASE"])
    served.reviewer.post("/records/{record_id}/accept", record_id="ST")
    served.reviewer.post("/records/{record_id}/revoke", record_id="REV", json={"reason": "x"})
    served.reviewer.post("/records/{record_id}/reject", record_id="REJ", json={"reason": "x"})
    served.reviewer.post("/records/{record_id}/revoke", record_id="BASE", json={"reason": "x"})
    _fact(served, "NEW", claim_key="k.OLD", supersedes="OLD")
    served.reviewer.post("/records/{record_id}/accept", record_id="NEW")
    # and a revoked record in proj-c, which the agent cannot see
    other = served.ledger.authenticate(served.tokens["other"])
    hidden = other.propose("proj-c", "k.h", 1, Kind.FACT, id="HID")
    other.revoke(hidden, reason="x")
    before = served.ledger.position
    child = {"scope": "proj-a", "claim_key": "k.c", "value": 1, "kind": "inference", "id": "CH"}

    # When a child names each unusable one, it is a conflict naming the field
    for parent, status in (("REV", "REVOKED"), ("REJ", "REJECTED"), ("ST", "STALE")):
        r = served.agent.post("/records", json={**child, "parents": [parent]})
        error = error_of(r)
        assert (r.status_code, error["type"], error["field"]) == (
            409,
            "InvalidParentError",
            "parents",
        ), r.text
        assert status in error["message"]
    r = served.agent.post("/records", json={**child, "parents": ["OLD"]})
    assert (r.status_code, error_of(r)["field"]) == (409, "parents"), r.text
    # and superseding a withdrawn version is one naming `supersedes`
    r = served.agent.post(
        "/records", json={**child, "kind": "fact", "claim_key": "k.REV", "supersedes": "REV"}
    )
    assert (r.status_code, error_of(r)["field"]) == (409, "supersedes"), r.text

    # But a parent unknown or hidden is bad input, the two told alike
    hidden_r = served.agent.post("/records", json={**child, "parents": ["HID"]})
    absent_r = served.agent.post("/records", json={**child, "parents": ["NOP"]})
    assert (hidden_r.status_code, error_of(hidden_r)["field"]) == (422, "parents")
    assert hidden_r.content.replace(b"HID", b"<ID>") == absent_r.content.replace(b"NOP", b"<ID>")
    # as is a cycle, and an unusable parent after an unknown one (checked in order)
    r = served.agent.post("/records", json={**child, "id": "C9", "parents": ["C9"]})
    assert r.status_code == 422, r.text
    r = served.agent.post("/records", json={**child, "parents": ["NOP", "REV"]})
    assert (r.status_code, error_of(r)["field"]) == (422, "parents"), r.text
    assert served.ledger.position == before


def test_a_new_basis_not_accepted_is_a_409_naming_parents(served: Served) -> None:
    # Given M1 STALE (its parent revoked) and a CANDIDATE it could rest on
    _fact(served, "E1")
    served.reviewer.post("/records/{record_id}/accept", record_id="E1")
    _fact(served, "M1", parents=["E1"])
    served.reviewer.post("/records/{record_id}/accept", record_id="M1")
    served.reviewer.post("/records/{record_id}/revoke", record_id="E1", json={"reason": "x"})
    _fact(served, "CAND")
    before = served.ledger.position
    # When the reviewer revalidates M1 on the candidate, it is a conflict naming parents
    r = served.reviewer.post(
        "/records/{record_id}/revalidate", record_id="M1", json={"parents": ["CAND"]}
    )
    error = error_of(r)
    assert (r.status_code, error["field"]) == (409, "parents"), r.text
    assert "CANDIDATE" in error["message"]
    assert served.ledger.position == before
    # But a new basis refused by a rule no change of its state would lift (it holds
    # under a condition M1 does not) is bad input, candidate or not
    _fact(served, "V2", conditions={"api": "v2"})
    for accepted in (False, True):
        if accepted:
            served.reviewer.post("/records/{record_id}/accept", record_id="V2")
        r = served.reviewer.post(
            "/records/{record_id}/revalidate", record_id="M1", json={"parents": ["V2"]}
        )
        assert (r.status_code, error_of(r)["field"]) == (422, "parents"), r.text


# -- 4. every required field left out ------------------------------------------------------


def test_a_body_missing_several_required_fields_names_them_all(served: Served) -> None:
    r = served.agent.post("/records", json={})
    error = error_of(r)
    assert (r.status_code, error["field"]) == (422, "scope")
    assert error["message"] == "fields 'scope', 'claim_key', 'value' and 'kind' are required"
    r = served.agent.post("/records", json={"scope": "proj-a", "value": None})
    assert error_of(r)["message"] == "fields 'claim_key' and 'kind' are required"
    r = served.agent.post("/evidence", json={"content": "x"})
    assert error_of(r) == {
        "type": "InvalidInputError",
        "message": "fields 'scope' and 'uri' are required",
        "field": "scope",
    }


# -- 6. a path's id as it was asked for ----------------------------------------------------


def test_a_path_id_is_echoed_decoded_and_refused_when_not_utf8(served: Served) -> None:
    auth = {"Authorization": f"Bearer {served.tokens['agent-1']}"}
    r = served.client.get("/api/v1/records/M1%2Faudit", headers=auth)
    error = error_of(r)
    assert (r.status_code, error["field"]) == (422, "record_id"), r.text
    assert error["message"].startswith("record id 'M1/audit' is invalid"), error
    r = served.client.get("/api/v1/records/%FF/audit", headers=auth)
    assert error_of(r) == {
        "type": "InvalidInputError",
        "message": "record id '%FF' is not UTF-8 once percent-decoded",
        "field": "record_id",
    }


# -- 7. the document's headers and HEAD ----------------------------------------------------


def test_the_headers_the_server_sends_are_in_the_document(served: Served) -> None:
    # 201 with Location, on both routes that create a record
    for template, body in (
        ("/records", {"scope": "proj-a", "claim_key": "k", "value": 1, "kind": "fact"}),
        ("/evidence", {"scope": "proj-a", "uri": "u", "content": "c"}),
    ):
        r = served.agent.post(template, json=body)
        declared = DOC["paths"][PREFIX + template]["post"]["responses"]["201"]["headers"]
        assert r.headers["location"] == f"{PREFIX}/records/{r.json()['id']}"
        assert declared["Location"]["required"] is True
    # 401 with its challenge; 409 may carry Retry-After (ConcurrencyError)
    responses = DOC["components"]["responses"]
    r = served.agent.as_(None).get("/records", params={"scope": "proj-a"})
    challenge = responses["E401"]["headers"]["WWW-Authenticate"]["schema"]["const"]
    assert r.headers["www-authenticate"] == challenge
    assert "Retry-After" in responses["E409"]["headers"]
    # 405 names the methods the path takes; 503 may carry Retry-After (a picture
    # being drawn, connections full); and every operation lists 405 and 408, which
    # come before any route reads the request
    assert responses["E405"]["headers"]["Allow"]["required"] is True
    assert "Retry-After" in responses["E503"]["headers"]
    for path, ops in DOC["paths"].items():
        for method, op in ops.items():
            assert {"405", "408"} <= set(op["responses"]), (method, path)
    auth = {"Authorization": f"Bearer {served.tokens['agent-1']}"}
    r = served.client.put(f"{PREFIX}/records/R1", json={}, headers=auth)
    assert r.status_code == 405 and set(r.headers["allow"].split(", ")) == {"HEAD", "GET"}
    assert error_of(r)["type"] == "MethodNotAllowed"


def test_every_get_operation_answers_head_as_the_document_says(served: Served) -> None:
    assert "Every GET operation also answers HEAD" in DOC["info"]["description"]
    _fact(served, "R1")
    auth = {"Authorization": f"Bearer {served.tokens['reviewer']}"}
    claim = {"scope": "proj-a", "claim_key": "k.R1"}
    params = {"/records": {"scope": "proj-a"}, "/read": claim, "/explain": claim}
    answered = []
    for path, ops in DOC["paths"].items():
        if "get" not in ops:
            continue
        url = path.replace("{record_id}", "R1")
        asked = params.get(path.removeprefix(PREFIX), {})
        got = served.client.get(url, params=asked, headers=auth)
        head = served.client.head(url, params=asked, headers=auth)
        assert (head.status_code, head.content) == (got.status_code, b""), path
        assert head.headers["content-type"] == got.headers["content-type"], path
        answered.append(got.status_code)
    assert answered.count(200) >= 6, answered  # not merely refused alike
