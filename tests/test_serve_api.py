"""The JSON API of ``provledger serve`` (SPEC §13.4 HTTP), on every backend.

Every answer is checked against the OpenAPI document (its status must be
documented for the route, its body must match the schema), so these tests also
prove that ``/openapi.json`` describes what the server does.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import json
import logging
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from openapi_spec_validator import validate
from starlette.testclient import TestClient

from ledger import Kind, Ledger, Session
from ledger.answers import MAX_ANSWER_BYTES, explanation_within
from ledger.graph import Edge, Subgraph
from ledger.serve import api as api_module
from ledger.serve import create_app, payloads
from ledger.serve.errors import STATUS, status_of
from ledger.serve.inputs import FieldError
from tests.conftest import Clock
from tests.serve_support import DOC, Api, error_of, running

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@dataclass
class Served:
    """A ledger behind the ASGI app, with a token per principal."""

    ledger: Ledger
    client: TestClient
    agent: Api
    reviewer: Api
    outsider: Api
    anonymous: Api
    clock: Clock
    tokens: dict[str, str]


@pytest.fixture
def served(ledger: Ledger, clock: Clock) -> Iterator[Served]:
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("agent-1", scope="proj-b", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
    admin.grant("reviewer", scope="proj-b", roles=["approve", "read", "audit", "deliver"])
    admin.grant("outsider", scope="proj-b", roles=["read"])
    tokens = {name: admin.issue_token(name) for name in ("agent-1", "reviewer", "outsider")}
    app = create_app(ledger, mcp_factory=None, max_body_bytes=64 * 1024)
    with TestClient(app) as client:
        yield Served(
            ledger=ledger,
            client=client,
            agent=Api(client, tokens["agent-1"]),
            reviewer=Api(client, tokens["reviewer"]),
            outsider=Api(client, tokens["outsider"]),
            anonymous=Api(client, None),
            clock=clock,
            tokens=tokens,
        )


def _seed(s: Served) -> None:
    """E1 (evidence) → M1 (inference) → R1 (report, delivered), all accepted, in proj-a."""
    r = s.agent.post(
        "/evidence",
        json={
            "scope": "proj-a",
            "uri": "https://x.test/doc",
            "content": "retries are safe",
            "id": "E1",
        },
    )
    assert r.status_code == 201, r.text
    assert s.reviewer.post("/records/{record_id}/accept", record_id="E1").status_code == 200
    r = s.agent.post(
        "/records",
        json={
            "scope": "proj-a",
            "claim_key": "api.retry_safe",
            "value": True,
            "kind": "inference",
            "parents": ["E1"],
            "id": "M1",
        },
    )
    assert r.status_code == 201, r.text
    assert s.reviewer.post("/records/{record_id}/accept", record_id="M1").status_code == 200
    r = s.agent.post(
        "/records",
        json={
            "scope": "proj-a",
            "claim_key": "report.weekly",
            "value": "retries on",
            "kind": "report",
            "parents": ["M1"],
            "id": "R1",
        },
    )
    assert r.status_code == 201, r.text
    assert s.reviewer.post("/records/{record_id}/accept", record_id="R1").status_code == 200
    r = s.reviewer.post(
        "/records/{record_id}/deliveries", record_id="R1", json={"recipient": "ops@x.test"}
    )
    assert r.status_code == 201, r.text


# -- the routes, one by one ------------------------------------------------------------------


def test_a_delivery_is_recorded_over_http_and_owes_a_correction_once_its_basis_goes(
    served: Served,
) -> None:
    _seed(served)
    # Given R1 delivered (by _seed) and delivered again, by chat
    r = served.reviewer.post(
        "/records/{record_id}/deliveries",
        record_id="R1",
        json={"recipient": "lead@x.test", "channel": "chat"},
    )
    assert r.status_code == 201, r.text
    assert r.headers["location"] == "/api/v1/records/R1"
    # (a delivery has no address of its own: the document says where it is listed)
    doc = served.client.get("/openapi.json").json()
    created = doc["paths"]["/api/v1/records/{record_id}/deliveries"]["post"]["responses"]["201"]
    assert "whose `deliveries` list" in created["headers"]["Location"]["description"]
    made = r.json()
    assert made["record_id"] == "R1" and made["delivery_id"].startswith("d-")
    record = served.agent.get("/records/{record_id}", record_id="R1").json()
    assert [(d["recipient"], d["channel"], d["state"]) for d in record["deliveries"]] == [
        ("ops@x.test", "email", "DELIVERED"),
        ("lead@x.test", "chat", "DELIVERED"),
    ]
    # When E1, which it rests on, is revoked
    served.reviewer.post("/records/{record_id}/revoke", record_id="E1", json={"reason": "x"})
    # Then both deliveries owe a correction, and stay DELIVERED
    due = served.reviewer.get("/corrections").json()["corrections"]
    assert {d["delivery"]["delivery_id"] for d in due} >= {made["delivery_id"]}
    assert len(due) == 2
    # And a delivery of what is not usable now, by whom may not deliver, or without
    # a recipient, is refused, naming what is wrong, and writes nothing
    before = served.ledger.position
    for who, rid, body, status, field, words in (
        (served.reviewer, "R1", {"recipient": "x@x.test"}, 409, None, "STALE"),
        (served.agent, "M1", {"recipient": "x@x.test"}, 403, None, "lacks role 'deliver'"),
        (served.reviewer, "R1", {}, 422, "recipient", "'recipient' is required"),
        (served.reviewer, "R1", {"recipient": "a\nb"}, 422, "recipient", "control"),
        (served.reviewer, "R1", {"recipient": "x", "channel": ""}, 422, "channel", "empty"),
        (served.reviewer, "NOPE", {"recipient": "x"}, 404, None, "'NOPE' is unknown"),
        (served.reviewer, "R1", {"recipient": "x", "to": "y"}, 422, "to", "'to'"),
    ):
        refused = who.post("/records/{record_id}/deliveries", record_id=rid, json=body)
        assert refused.status_code == status, (body, refused.text)
        error = error_of(refused)
        assert error["field"] == field and words in error["message"], (body, error)
    assert served.ledger.position == before


def test_proposing_answers_201_with_the_candidate_and_its_location(served: Served) -> None:
    r = served.agent.post(
        "/records",
        json={
            "scope": "proj-a",
            "claim_key": "api.limit",
            "value": {"per_minute": 60},
            "kind": "fact",
            "conditions": {"api_version": "v2"},
            "expires": (served.clock.now + timedelta(days=1)).isoformat(),
            "id": "F1",
        },
    )
    assert r.status_code == 201
    assert r.headers["location"] == "/api/v1/records/F1"
    body = r.json()
    assert body["id"] == "F1"
    assert body["record"]["status"] == "CANDIDATE"
    assert body["record"]["value"] == {"per_minute": 60}
    assert body["record"]["conditions"] == {"api_version": "v2"}
    assert body["record"]["proposer"] == "agent-1"


def test_capturing_evidence_pins_the_bytes_given_as_text_or_base64(served: Served) -> None:
    raw = b"\x00\x01binary page"
    r = served.agent.post(
        "/evidence",
        json={
            "scope": "proj-a",
            "uri": "https://x.test/bin",
            "content_base64": base64.b64encode(raw).decode(),
        },
    )
    assert r.status_code == 201
    evidence = r.json()["record"]["evidence"]
    assert evidence["content_hash"] == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert evidence["uri"] == "https://x.test/bin"
    assert r.json()["record"]["claim_key"] == "source:https://x.test/bin"
    text = served.agent.post(
        "/evidence", json={"scope": "proj-a", "uri": "https://x.test/t", "content": "héllo"}
    )
    digest = "sha256:" + hashlib.sha256("héllo".encode()).hexdigest()
    assert text.json()["record"]["evidence"]["content_hash"] == digest


def test_an_infinite_float_is_the_string_inf_and_the_body_strict_json(served: Served) -> None:
    # JSON has no infinity; a value the library stored with one reads back as "inf".
    reviewer = served.ledger.authenticate(served.tokens["reviewer"])
    agent = served.ledger.authenticate(served.tokens["agent-1"])
    value = {"huge": float("inf"), "small": [-float("inf"), 1.5]}
    reviewer.accept(agent.propose("proj-a", "api.huge", value, Kind.FACT, id="H1"))
    r = served.agent.get("/records/{record_id}", record_id="H1")
    assert "Infinity" not in r.text
    assert json.loads(r.text)["value"] == {"huge": "inf", "small": ["-inf", 1.5]}


def test_listing_pages_a_scope_by_id_with_filters(served: Served) -> None:
    _seed(served)
    served.agent.post(
        "/records",
        json={"scope": "proj-a", "claim_key": "api.x", "value": 1, "kind": "fact", "id": "A0"},
    )
    first = served.agent.get("/records", params={"scope": "proj-a", "limit": 2})
    assert first.status_code == 200
    assert [x["id"] for x in first.json()["records"]] == ["A0", "E1"]
    assert first.json()["next_after"] == "E1"
    rest = served.agent.get("/records", params={"scope": "proj-a", "limit": 2, "after": "E1"})
    assert [x["id"] for x in rest.json()["records"]] == ["M1", "R1"]
    assert rest.json()["next_after"] is None  # a full page, but nothing follows it
    candidates = served.agent.get("/records", params={"scope": "proj-a", "status": "CANDIDATE"})
    assert [x["id"] for x in candidates.json()["records"]] == ["A0"]
    assert candidates.json()["next_after"] is None
    reports = served.agent.get("/records", params={"scope": "proj-a", "kind": "report"})
    assert [x["id"] for x in reports.json()["records"]] == ["R1"]
    by_claim = served.agent.get("/records", params={"scope": "proj-a", "claim_prefix": "api."})
    assert [x["id"] for x in by_claim.json()["records"]] == ["A0", "M1"]
    valid = served.agent.get("/records", params={"scope": "proj-a", "validity": "VALID"})
    assert [x["id"] for x in valid.json()["records"]] == ["E1", "M1", "R1"]


def test_getting_a_record_shows_status_validity_and_deliveries(served: Served) -> None:
    _seed(served)
    r = served.agent.get("/records/{record_id}", record_id="R1")
    assert r.status_code == 200
    body = r.json()
    assert (body["status"], body["validity"]) == ("ACCEPTED", "VALID")
    assert body["parents"] == ["M1"]
    assert [d["recipient"] for d in body["deliveries"]] == ["ops@x.test"]
    assert body["deliveries"][0]["state"] == "DELIVERED"


def _delivered_150(served: Served) -> Session:
    """R1 delivered once by :func:`_seed` and 149 more times (to c1@…); the reviewer."""
    _seed(served)
    courier = served.ledger.authenticate(served.tokens["reviewer"])
    for n in range(1, 150):
        courier.deliver("R1", recipient=f"c{n}@x.test")
    return courier


def test_a_record_delivered_many_times_lists_its_latest_and_pages_through_every_one(
    served: Served,
) -> None:
    # Given R1 delivered once (by _seed) and 149 more times
    _delivered_150(served)
    everyone = ["ops@x.test", *(f"c{n}@x.test" for n in range(1, 150))]
    # When it is got, read, explained, audited and drawn
    got = served.agent.get("/records/{record_id}", record_id="R1").json()
    query = {"scope": "proj-a", "claim_key": "report.weekly"}
    read = served.agent.get("/read", params=query).json()["records"][0]
    explained = served.agent.get("/explain", params=query).json()["entries"][0]["record"]
    audited = served.reviewer.get("/records/{record_id}/audit", record_id="R1").json()["record"]
    graph = served.agent.get("/records/{record_id}/graph", record_id="R1").json()
    drawn = next(node for node in graph["nodes"] if node["id"] == "R1")
    # Then each lists the 100 most recent deliveries, oldest of them first, and counts all
    for record in (got, read, explained, audited, drawn):
        assert record["deliveries_count"] == 150
        assert [d["recipient"] for d in record["deliveries"]] == everyone[50:]
    # And a record with few lists them all, with their count
    m1 = served.agent.get("/records/{record_id}", record_id="M1").json()
    assert (m1["deliveries"], m1["deliveries_count"]) == ([], 0)
    # And the deliveries route pages through every one, in the order recorded
    pages = _pages(served.agent, "/records/{record_id}/deliveries", "deliveries", record_id="R1")
    assert [d["recipient"] for page in pages for d in page] == everyone
    assert [len(page) for page in pages] == [64, 64, 22]
    first = served.agent.get("/records/{record_id}/deliveries", record_id="R1").json()
    assert (first["record_id"], first["deliveries_count"], len(first["deliveries"])) == (
        "R1",
        150,
        100,  # by default
    )
    assert first["next_after"] == first["deliveries"][-1]["delivery_id"]
    assert {d["state"] for d in first["deliveries"]} == {"DELIVERED"}
    # And an `after` that is not one of its deliveries is refused, naming the field
    r = served.agent.get(
        "/records/{record_id}/deliveries", record_id="M1", params={"after": page_id(got)}
    )
    assert (r.status_code, error_of(r)["field"]) == (422, "after")
    assert error_of(r)["message"] == f"after {page_id(got)!r} is not a delivery of M1"
    # And as of a moment before a delivery, the delivery is not yet one of them
    then = {"after": page_id(got), "as_of_position": str(got["deliveries"][-1]["position"] - 1)}
    r = served.agent.get("/records/{record_id}/deliveries", record_id="R1", params=then)
    assert (r.status_code, error_of(r)["field"]) == (422, "after")
    assert error_of(r)["message"].endswith(
        " is not a delivery of R1 as of position " + then["as_of_position"]
    )
    # And a record the caller cannot see is unknown to it
    r = served.outsider.get("/records/{record_id}/deliveries", record_id="R1")
    assert (r.status_code, error_of(r)["type"]) == (404, "UnknownRecordError")


def _pages(api: Api, template: str, key: str, **kwargs: Any) -> list[list[dict[str, Any]]]:
    """Every page of a list paged by ``after``/``next_after``, 64 items a page."""
    pages: list[list[dict[str, Any]]] = []
    params: dict[str, Any] = {"limit": "64"}
    while True:
        r = api.get(template, params=params, **kwargs)
        assert r.status_code == 200, r.text
        pages.append(r.json()[key])
        if r.json()["next_after"] is None:
            return pages
        params = {"limit": "64", "after": r.json()["next_after"]}


def test_an_audit_trail_and_the_corrections_owed_are_paged_by_log_position(
    served: Served,
) -> None:
    # Given R1 delivered 150 times in all, then its basis revoked: 150 owe a correction
    courier = _delivered_150(served)
    courier.revoke("E1", "wrong")
    # When the trail is paged through, 64 events a page
    trail = _pages(served.reviewer, "/records/{record_id}/audit", "events", record_id="R1")
    # Then every event comes once, in log order
    events = [e for page in trail for e in page]
    assert [len(page) for page in trail] == [64, 64, 25]
    types = ["Proposed", "Accepted", *["Delivered"] * 150, "MarkedStale"]
    assert [e["type"] for e in events] == types
    positions = [e["position"] for e in events]
    assert positions == sorted(set(positions))
    whole = served.reviewer.get("/records/{record_id}/audit", record_id="R1").json()
    assert (whole["events"], whole["next_after"]) == (events, None)
    # And the corrections owed too, a correction issued between two pages moving
    # none of the others
    first = served.reviewer.get("/corrections", params={"limit": "64"}).json()
    owed = [d["delivery"]["delivery_id"] for d in first["corrections"]]
    courier.issue_correction(owed[0], "withdrawn")
    rest = _pages(served.reviewer, "/corrections", "corrections")
    assert [len(page) for page in rest] == [64, 64, 21]
    later = served.reviewer.get(
        "/corrections", params={"limit": "64", "after": first["next_after"]}
    ).json()
    fresh = [d["delivery"]["delivery_id"] for page in rest for d in page]
    assert fresh[:63] == owed[1:]  # the one corrected is gone, the others in place
    assert [d["delivery"]["delivery_id"] for d in later["corrections"]] == fresh[63:127]
    # And a position that is no integer is refused, naming it
    r = served.reviewer.get("/corrections", params={"after": "d-1"})
    assert (r.status_code, error_of(r)["field"]) == (422, "after")


def test_an_explanation_stops_before_its_entries_and_their_reasons_pass_the_budget(
    served: Served,
) -> None:
    # Given 12 candidate inferences on one claim, each waiting for 300 candidate facts
    # (a reason per dependency: each entry's reasons are several times its record)
    agent = served.ledger.authenticate(served.tokens["agent-1"])
    facts = [f"P{i:04d}" for i in range(300)]
    for rid in facts:
        agent.propose(scope="proj-a", claim_key=f"f.{rid}", value=1, kind=Kind.FACT, id=rid)
    for n in range(12):
        agent.propose(scope="proj-a", claim_key="wide", value=n, kind=Kind.INFERENCE, parents=facts)
    # When the entries are fitted into 60,000 bytes, as GET /explain fits them in 4 MiB
    budget = 60_000
    result, fitted = explanation_within(agent, "proj-a", "wide", 100, budget)
    # Then the answer, reasons and all, stays within it, and counts those left out
    sent = len(json.dumps(payloads.explanation(result, 1000)).encode())
    assert sent <= budget < sent + 30_000, sent
    assert (fitted, len(result.entries), result.omitted) == (2, 2, 10)
    assert len(result.entries[0].reasons) == 301


def test_a_read_lists_its_usable_records_within_4_mib_and_counts_the_rest(
    served: Served,
) -> None:
    # Given five accepted records of about 1 MB each, each value its own, and 105
    # accepted records agreeing on another claim
    agent = served.ledger.authenticate(served.tokens["agent-1"])
    reviewer = served.ledger.authenticate(served.tokens["reviewer"])
    for i in range(5):
        value = f"{i}" + "h" * 1_000_000
        agent.propose(
            scope="proj-a", claim_key="big", value=value, kind=Kind.FACT, accepted_by=reviewer
        )
    for _ in range(105):
        agent.propose(
            scope="proj-a", claim_key="same", value=50, kind=Kind.FACT, accepted_by=reviewer
        )
    # When each is read over HTTP
    big = served.agent.get("/read", params={"scope": "proj-a", "claim_key": "big"})
    same = served.agent.get("/read", params={"scope": "proj-a", "claim_key": "same"}).json()
    # Then as many as fit in 4 MiB are listed and the rest counted; the outcome is
    # decided on all of them
    answer = big.json()
    assert answer["outcome"] == "CONFLICT"
    assert (len(answer["records"]), answer["omitted"]) == (4, 1)
    assert len(big.content) <= MAX_ANSWER_BYTES + 4096
    assert "1 of the 5 usable records of this claim are not listed" in answer["note"]
    assert "they hold 5 different values" in answer["note"]
    # And at most 100 are listed however small, the note linking the listing of the rest
    assert (same["outcome"], same["value"]) == ("FOUND", 50)
    assert (len(same["records"]), same["omitted"]) == (100, 5)
    assert "<GET /api/v1/records?scope=proj-a&claim_prefix=same&validity=VALID>" in same["note"]
    # (as of a past moment, the link lists the claim's records as of it)
    now = str(served.ledger.position)
    then = {"scope": "proj-a", "claim_key": "same", "as_of_position": now}
    earlier = served.agent.get("/read", params=then).json()
    assert f"claim_prefix=same&validity=VALID&as_of_position={now}>" in earlier["note"]
    # And an explanation lists the usable records as the read does, counting the rest
    why = served.agent.get("/explain", params={"scope": "proj-a", "claim_key": "big"})
    assert len(why.content) <= MAX_ANSWER_BYTES + 4096
    assert (len(why.json()["entries"]), why.json()["usable_omitted"]) == (4, 1)
    assert why.json()["note"].startswith("1 of the 5 usable records of this claim are not")
    many = served.agent.get("/explain", params={"scope": "proj-a", "claim_key": "same"}).json()
    assert (len(many["entries"]), many["usable_omitted"], many["omitted"]) == (100, 5, 0)
    # And an answer that lists every record says nothing left out
    served.agent.post("/records", json={"scope": "proj-a", "claim_key": "few", "value": 1})
    few = served.agent.get("/read", params={"scope": "proj-a", "claim_key": "few"}).json()
    assert (few["outcome"], few["omitted"], few["note"]) == ("MISSING", 0, None)


def page_id(record: dict[str, Any]) -> str:
    """The id of a record answer's most recent delivery."""
    delivery_id: str = record["deliveries"][-1]["delivery_id"]
    return delivery_id


def test_the_audit_trail_lists_every_event_of_a_record(served: Served) -> None:
    _seed(served)
    r = served.reviewer.get("/records/{record_id}/audit", record_id="R1")
    assert r.status_code == 200
    assert [e["type"] for e in r.json()["events"]] == ["Proposed", "Accepted", "Delivered"]
    assert r.json()["events"][1]["actor"] == "reviewer"


def test_the_graph_route_answers_json_svg_dot_and_mermaid(served: Served) -> None:
    _seed(served)
    r = served.agent.get("/records/{record_id}/graph", record_id="M1")
    assert r.status_code == 200
    graph = r.json()
    assert graph["root"] == "M1"
    assert sorted(n["id"] for n in graph["nodes"]) == ["E1", "M1", "R1"]
    assert {(e["parent"], e["child"]) for e in graph["edges"]} == {("E1", "M1"), ("M1", "R1")}
    up = served.agent.get(
        "/records/{record_id}/graph", record_id="M1", params={"descendants": "false"}
    )
    assert sorted(n["id"] for n in up.json()["nodes"]) == ["E1", "M1"]
    svg = served.agent.get("/records/{record_id}/graph", record_id="M1", params={"format": "svg"})
    assert svg.headers["content-type"].startswith("image/svg+xml")
    assert b"<svg" in svg.content and b"#c8e6c9" in svg.content  # ACCEPTED's fill
    dot = served.agent.get("/records/{record_id}/graph", record_id="M1", params={"format": "dot"})
    assert dot.text.startswith("digraph provledger")
    mermaid = served.agent.get(
        "/records/{record_id}/graph", record_id="M1", params={"format": "mermaid"}
    )
    assert mermaid.text.startswith("flowchart TD")
    # A REVOKED record shows its revocation in every format, as the command line draws it
    revoked = served.reviewer.post(
        "/records/{record_id}/revoke", record_id="E1", json={"reason": "doc changed"}
    )
    assert revoked.status_code == 200, revoked.text
    for fmt in ("dot", "mermaid", "svg"):
        shown = served.agent.get(
            "/records/{record_id}/graph", record_id="M1", params={"format": fmt}
        ).text
        assert "reason: doc changed" in shown and "by reviewer at " in shown, fmt


def test_an_svg_graph_over_the_size_limit_is_refused_naming_what_to_ask_for(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(served)
    monkeypatch.setattr(api_module, "MAX_SVG_NODES", 2)  # E1 → M1 → R1 is three
    r = served.agent.get("/records/{record_id}/graph", record_id="M1", params={"format": "svg"})
    assert (r.status_code, error_of(r)["field"]) == (422, "format")
    assert "the graph has 3 records; format=svg draws at most 2" in error_of(r)["message"]
    one = served.agent.get(
        "/records/{record_id}/graph",
        record_id="M1",
        params={"format": "svg", "ancestors": "false", "descendants": "false"},
    )
    assert one.status_code == 200 and one.text.lstrip().startswith(("<?xml", "<svg"))
    dot = served.agent.get("/records/{record_id}/graph", record_id="M1", params={"format": "dot"})
    assert dot.status_code == 200 and '"M1"' in dot.text  # the text formats have a cap of their own


def _fan(s: Served, root: str, children: int) -> None:
    """An accepted fact ``root`` in proj-a and ``children`` candidates resting on it."""
    agent = s.ledger.authenticate(s.tokens["agent-1"])
    agent.propose(scope="proj-a", claim_key="root", value=1, kind=Kind.FACT, id=root)
    s.ledger.authenticate(s.tokens["reviewer"]).accept(root)
    agent.propose_many(
        {"scope": "proj-a", "claim_key": f"child.{i}", "value": i, "kind": "inference",
         "parents": [root], "id": f"{root}-{i}"}
        for i in range(children)
    )  # fmt: skip


def test_a_graph_over_the_cap_is_refused_in_every_format_naming_the_count_and_what_to_ask(
    served: Served,
) -> None:
    # Given a record and 999 descendants, as many as a text format may return: answered
    _fan(served, "HUB", 999)
    r = served.agent.get("/records/{record_id}/graph", record_id="HUB", params={"format": "dot"})
    assert r.status_code == 200 and r.text.count(' -> "HUB-') == 999

    # When one more rests on it
    served.ledger.authenticate(served.tokens["agent-1"]).propose(
        scope="proj-a", claim_key="one.more", value=0, kind="inference", parents=["HUB"], id="X"
    )

    # Then every format refuses it, naming the count, the format's cap and what to ask for
    cap = {"json": 1000, "dot": 1000, "mermaid": 1000, "svg": 200}
    for fmt, most in cap.items():
        r = served.agent.get("/records/{record_id}/graph", record_id="HUB", params={"format": fmt})
        assert (r.status_code, error_of(r)["field"]) == (422, "format"), fmt
        message = error_of(r)["message"]
        verb = "draws" if fmt == "svg" else "returns"
        assert message.startswith(
            f"the graph has 1001 records; format={fmt} {verb} at most {most}."
        )
        assert "ancestors=false or descendants=false" in message
        assert "provledger graph HUB --format dot --max-nodes 1001" in message
        assert "format=dot, json or mermaid" not in message  # no text format would answer

    # And one direction, or a record further along, is answered
    up = served.agent.get(
        "/records/{record_id}/graph", record_id="HUB", params={"descendants": "false"}
    )
    assert up.status_code == 200 and [n["id"] for n in up.json()["nodes"]] == ["HUB"]
    child = served.agent.get("/records/{record_id}/graph", record_id="X")
    assert child.status_code == 200 and len(child.json()["nodes"]) == 2


def test_a_graph_whose_records_pass_4_mib_of_json_is_refused_as_json_and_drawn_as_text(
    served: Served,
) -> None:
    # Given a fact and five records of about 1 MB each resting on it
    agent = served.ledger.authenticate(served.tokens["agent-1"])
    agent.propose(scope="proj-a", claim_key="root", value=1, kind=Kind.FACT, id="BIG")
    for i in range(5):
        value = f"{i}" + "h" * 1_000_000
        agent.propose(
            scope="proj-a", claim_key=f"big.{i}", value=value, kind=Kind.INFERENCE, parents=["BIG"]
        )
    # When its graph is asked for as JSON, it is refused, naming the budget and what to ask
    r = served.agent.get("/records/{record_id}/graph", record_id="BIG")
    assert (r.status_code, error_of(r)["field"]) == (422, "format")
    assert error_of(r)["message"].startswith(
        "the graph's 6 records and 5 edges come to more than 4 MiB of JSON, their values "
        "included; "
        "format=json returns at most that. Ask for format=dot or mermaid (no values)"
    )
    # And as DOT it is drawn, every record in it; and one record's own graph is answered
    dot = served.agent.get("/records/{record_id}/graph", record_id="BIG", params={"format": "dot"})
    assert dot.status_code == 200 and dot.text.count(' -> "') == 5
    up = served.agent.get(
        "/records/{record_id}/graph", record_id="BIG", params={"descendants": "false"}
    )
    assert up.status_code == 200 and [n["id"] for n in up.json()["nodes"]] == ["BIG"]


def test_a_graph_whose_edges_pass_4_mib_of_json_is_refused_as_json() -> None:
    # Given a graph of few, small records with 90,000 edges among them (300 records
    # each resting on the same 300 others)
    edges = tuple(
        Edge(parent=f"P{i:03d}", child=f"C{j:03d}", edge="parent")
        for i in range(300)
        for j in range(300)
    )
    sub = Subgraph(root="ROOT", nodes=(), edges=edges, position=1, title="ROOT")
    # Then its JSON is refused, the edges counted with the records
    with pytest.raises(FieldError, match=r"^the graph's 0 records and 90000 edges come to "):
        api_module.check_json_size(sub, "ROOT")
    api_module.check_json_size(dataclasses.replace(sub, edges=edges[:60_000]), "ROOT")


def test_revoking_a_record_under_many_lists_the_first_thousand_ids_and_counts_them_all(
    served: Served,
) -> None:
    # Given HUB with 1,001 candidates resting on it, and a candidate on nothing
    _fan(served, "HUB", 1001)
    served.agent.post(
        "/records", json={"scope": "proj-a", "claim_key": "other", "value": 1, "kind": "fact"}
    )

    # When the reviewer revokes it through the API
    r = served.reviewer.post(
        "/records/{record_id}/revoke", record_id="HUB", json={"reason": "wrong"}
    )

    # Then each list holds the first 1,000 ids, the counts all, and a note the way on
    assert r.status_code == 200
    body = r.json()
    assert (len(body["affected"]), body["affected_count"]) == (1000, 1002)
    assert (len(body["stale"]), body["stale_count"]) == (1000, 1001)
    # (every scope the reviewer may list: those left out may be in any of them)
    assert body["note"] == (
        "1002 records affected; the first 1000 are listed. "
        "<GET /api/v1/records?scope=proj-a&status=STALE> and "
        "<GET /api/v1/records?scope=proj-b&status=STALE> page through every record now "
        "STALE in those scopes, not only those this revocation marked (each record's "
        "`stale_causes` names what marked it)."
    )
    # And the listing it names, as it names it, pages through exactly those (a
    # candidate needs revalidation too, but was not marked STALE)
    named = body["note"].split("<GET /api/v1/records?", 1)[1].split(">", 1)[0]
    stale: list[str] = []
    after = None
    while True:
        params = {**dict(urllib.parse.parse_qsl(named)), "limit": 1000}
        page = served.agent.get(
            "/records", params={**params, **({"after": after} if after else {})}
        )
        stale += [v["id"] for v in page.json()["records"]]
        after = page.json()["next_after"]
        if after is None:
            break
    assert len(stale) == 1001 and set(body["stale"]) <= set(stale)


def test_an_svg_graph_shows_text_holding_a_character_reference_as_stored(served: Served) -> None:
    _seed(served)
    for rid, key in (("P1", "a&amp;b"), ("P2", "a&b")):
        r = served.agent.post(
            "/records",
            json={"scope": "proj-a", "claim_key": key, "value": 1, "kind": "inference",
                  "parents": ["M1"], "id": rid},
        )  # fmt: skip
        assert r.status_code == 201
    svg = served.agent.get("/records/{record_id}/graph", record_id="M1", params={"format": "svg"})
    # XML-escaped once: a reader of the SVG sees "a&amp;b" and "a&b", two claims
    assert "proj&#45;a/a&amp;amp;b = 1" in svg.text
    assert "proj&#45;a/a&amp;b = 1" in svg.text


def test_an_svg_graph_without_graphviz_is_503_pointing_to_dot(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(served)
    monkeypatch.setenv("PATH", "/nonexistent")  # no `dot` to be found
    r = served.agent.get("/records/{record_id}/graph", record_id="M1", params={"format": "svg"})
    assert r.status_code == 503
    assert error_of(r)["field"] == "format"
    assert "format=dot" in error_of(r)["message"]
    dot = served.agent.get("/records/{record_id}/graph", record_id="M1", params={"format": "dot"})
    assert dot.status_code == 200


def test_accept_reject_revoke_and_revalidate_move_records_through_the_machine(
    served: Served,
) -> None:
    _seed(served)
    served.agent.post(
        "/records",
        json={"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact", "id": "X1"},
    )
    rejected = served.reviewer.post(
        "/records/{record_id}/reject", record_id="X1", json={"reason": "unsupported"}
    )
    assert rejected.status_code == 200
    assert rejected.json()["record"]["status"] == "REJECTED"
    assert rejected.json()["record"]["reason"] == "unsupported"

    revoked = served.reviewer.post(
        "/records/{record_id}/revoke", record_id="E1", json={"reason": "doc changed"}
    )
    assert revoked.status_code == 200
    assert revoked.json()["root"] == "E1"
    assert revoked.json()["affected"] == ["E1", "M1", "R1"]
    assert "hidden" not in revoked.json()
    stale = served.agent.get("/records/{record_id}", record_id="M1").json()
    assert (stale["status"], stale["validity"]) == ("STALE", "NEEDS_REVALIDATION")

    served.agent.post(
        "/evidence",
        json={"scope": "proj-a", "uri": "https://x.test/doc2", "content": "still safe", "id": "E2"},
    )
    served.reviewer.post("/records/{record_id}/accept", record_id="E2")
    back = served.reviewer.post(
        "/records/{record_id}/revalidate",
        record_id="M1",
        json={"note": "re-checked", "parents": ["E2"]},
    )
    assert back.status_code == 200
    assert back.json()["record"]["status"] == "ACCEPTED"
    assert back.json()["record"]["parents"] == ["E2"]


def test_read_and_explain_apply_the_eligibility_chain(served: Served) -> None:
    _seed(served)
    found = served.agent.get("/read", params={"scope": "proj-a", "claim_key": "api.retry_safe"})
    assert found.status_code == 200
    assert (found.json()["outcome"], found.json()["value"]) == ("FOUND", True)
    served.reviewer.post("/records/{record_id}/revoke", record_id="E1", json={"reason": "wrong"})
    missing = served.agent.get("/read", params={"scope": "proj-a", "claim_key": "api.retry_safe"})
    assert missing.json()["outcome"] == "MISSING"
    assert missing.json()["records"] == []
    why = served.agent.get("/explain", params={"scope": "proj-a", "claim_key": "api.retry_safe"})
    assert why.status_code == 200
    [entry] = why.json()["entries"]
    assert entry["usable"] is False
    assert any("E1" in reason for reason in entry["reasons"])


def test_explain_answers_every_usable_record_and_at_most_limit_others(served: Served) -> None:
    agent = served.ledger.authenticate(served.tokens["agent-1"])
    reviewer = served.ledger.authenticate(served.tokens["reviewer"])
    claim = {"scope": "proj-a", "claim_key": "api.retry_safe", "kind": "fact"}
    agent.propose(**claim, value=True, id="M1", accepted_by=reviewer)  # type: ignore[arg-type]
    agent.propose(**claim, value=False, id="M2", accepted_by=reviewer)  # type: ignore[arg-type]
    reviewer.revoke("M2", reason="contradicted by the docs")
    # Given 120 candidates were put under the claim
    agent.propose_many([{**claim, "value": i, "id": f"J{i:03d}"} for i in range(120)])
    asked = {"scope": "proj-a", "claim_key": "api.retry_safe"}

    # When the claim is explained as it comes, and with limit=3
    default = served.agent.get("/explain", params=asked)
    three = served.agent.get("/explain", params={**asked, "limit": "3"})

    # Then the usable M1 and 100 others are answered (the revoked M2 among them)
    assert default.status_code == 200
    body = default.json()
    assert body["outcome"] == "FOUND"
    ids = [e["record"]["id"] for e in body["entries"]]
    assert len(ids) == 101 and ids[:2] == ["M1", "M2"]
    # with how many were left out and how to see them
    assert body["omitted"] == 21
    assert body["note"] == (
        "21 more records of this claim, none of them usable, are not listed. Ask again with "
        "a larger limit (at most 1000), or page through the claim's records (with those "
        "of keys that begin with it) at <GET /api/v1/records?scope=proj-a&claim_prefix="
        "api.retry_safe>."
    )
    # and limit=3 gives M1, M2 and the two newest candidates
    assert [e["record"]["id"] for e in three.json()["entries"]] == ["M1", "M2", "J118", "J119"]
    assert (three.json()["outcome"], three.json()["omitted"]) == ("FOUND", 118)
    # and a limit out of bounds is refused, naming it
    for bad in ("0", "1001", "-2", "many"):
        refused = served.agent.get("/explain", params={**asked, "limit": bad})
        assert refused.status_code == 422, bad
        assert error_of(refused)["field"] == "limit"
    # while a claim with few records answers all of them, leaving none out
    few = served.agent.get("/explain", params={"scope": "proj-a", "claim_key": "nothing"}).json()
    assert (few["entries"], few["omitted"], few["note"]) == ([], 0, None)


def test_reads_take_an_applicability_context_and_kinds(served: Served) -> None:
    s = served
    s.agent.post(
        "/records",
        json={
            "scope": "proj-a",
            "claim_key": "api.mode",
            "value": "v2-only",
            "kind": "fact",
            "conditions": {"api_version": "v2"},
            "id": "C1",
        },
    )
    s.reviewer.post("/records/{record_id}/accept", record_id="C1")
    plain = s.agent.get("/read", params={"scope": "proj-a", "claim_key": "api.mode"})
    assert plain.json()["outcome"] == "MISSING"
    matched = s.agent.get(
        "/read",
        params={"scope": "proj-a", "claim_key": "api.mode", "context": '{"api_version": "v2"}'},
    )
    assert matched.json()["outcome"] == "FOUND"
    other_kind = s.agent.get(
        "/read",
        params={
            "scope": "proj-a",
            "claim_key": "api.mode",
            "context": '{"api_version": "v2"}',
            "kinds": "inference,report",
        },
    )
    assert other_kind.json()["outcome"] == "MISSING"


def test_pages_and_explanations_stop_before_4_mib_of_records(served: Served) -> None:
    # Given one usable record and six candidates of about 0.9 MB each under a claim
    agent = served.ledger.authenticate(served.tokens["agent-1"])
    reviewer = served.ledger.authenticate(served.tokens["reviewer"])
    claim = {"scope": "proj-a", "claim_key": "big.claim", "kind": Kind.FACT}
    agent.propose(**claim, value="usable", id="B0", accepted_by=reviewer)  # type: ignore[arg-type]
    for n in range(1, 7):
        agent.propose(**claim, value=f"{n}" + "x" * 900_000, id=f"B{n}")  # type: ignore[arg-type]
    # When a page of ten is listed, and the claim explained with room for ten others
    first = served.agent.get("/records", params={"scope": "proj-a", "limit": 10})
    explained = served.agent.get(
        "/explain", params={"scope": "proj-a", "claim_key": "big.claim", "limit": 10}
    ).json()
    # Then the page stops before 4 MiB, and says where to go on
    assert first.status_code == 200
    assert len(first.content) < 4 * 1024 * 1024
    assert [r["id"] for r in first.json()["records"]] == ["B0", "B1", "B2", "B3", "B4"]
    assert first.json()["next_after"] == "B4"
    rest = served.agent.get("/records", params={"scope": "proj-a", "limit": 10, "after": "B4"})
    assert [r["id"] for r in rest.json()["records"]] == ["B5", "B6"]
    assert rest.json()["next_after"] is None
    # And the explanation keeps the usable record and as many others as fit
    # (the most recently changed, listed by id)
    assert [e["record"]["id"] for e in explained["entries"]] == ["B0", "B3", "B4", "B5", "B6"]
    assert explained["omitted"] == 2
    assert explained["note"].startswith("2 more records of this claim, none of them usable")


def test_corrections_due_are_listed_and_issued_through_the_outbox(served: Served) -> None:
    _seed(served)
    assert served.reviewer.get("/corrections").json() == {"corrections": [], "next_after": None}
    served.reviewer.post("/records/{record_id}/revoke", record_id="E1", json={"reason": "wrong"})
    due = served.reviewer.get("/corrections")
    assert due.status_code == 200
    [item] = due.json()["corrections"]
    assert (item["delivery"]["record_id"], item["scope"]) == ("R1", "proj-a")
    assert (item["status"], item["validity"]) == ("STALE", "NEEDS_REVALIDATION")
    # Those of one record: R1's is the same; M1 was never delivered
    assert served.reviewer.get("/corrections", params={"record_id": "R1"}).json() == due.json()
    of_m1 = served.reviewer.get("/corrections", params={"record_id": "M1"})
    assert of_m1.json() == {"corrections": [], "next_after": None}
    # and a record unknown, or in a scope where the caller does not deliver, refused
    unknown = served.reviewer.get("/corrections", params={"record_id": "nope"})
    assert (unknown.status_code, error_of(unknown)["type"]) == (404, "UnknownRecordError")
    assert "record 'nope' is unknown or not visible" in error_of(unknown)["message"]
    assert error_of(unknown)["field"] == "record_id"  # the query's, not a path's
    denied = served.agent.get("/corrections", params={"record_id": "R1"})
    assert (denied.status_code, error_of(denied)["type"]) == (403, "AccessDeniedError")
    delivery_id = item["delivery"]["delivery_id"]
    issued = served.reviewer.post(
        "/deliveries/{delivery_id}/corrections",
        delivery_id=delivery_id,
        json={"note": "the retry advice was withdrawn"},
    )
    assert issued.status_code == 201
    assert issued.json()["delivery_id"] == delivery_id
    assert issued.json()["correction_id"].startswith("c-")
    assert served.reviewer.get("/corrections").json() == {"corrections": [], "next_after": None}
    record = served.reviewer.get("/records/{record_id}", record_id="R1").json()
    assert record["deliveries"][0]["corrections"][0]["note"] == "the retry advice was withdrawn"


def test_a_correction_only_if_owed_is_issued_once_by_two_workers(served: Served) -> None:
    _seed(served)
    served.reviewer.post("/records/{record_id}/revoke", record_id="E1", json={"reason": "wrong"})
    [item] = served.reviewer.get("/corrections").json()["corrections"]
    delivery_id = item["delivery"]["delivery_id"]
    body = {"note": "withdrawn", "only_if_owed": True}

    # Two workers drained the same list: the first issues it, the second is refused
    first, second = (
        served.reviewer.post(
            "/deliveries/{delivery_id}/corrections", delivery_id=delivery_id, json=body
        )
        for _ in range(2)
    )
    assert first.status_code == 201
    assert second.status_code == 409, second.json()
    position = served.ledger.position
    record = served.reviewer.get("/records/{record_id}", record_id="R1").json()
    assert len(record["deliveries"][0]["corrections"]) == 1
    refused = served.reviewer.post(
        "/deliveries/{delivery_id}/corrections",
        delivery_id=delivery_id,
        json={"note": "x", "only_if_owed": "yes"},
    )
    assert refused.status_code == 422 and error_of(refused)["field"] == "only_if_owed"
    assert served.ledger.position == position


def test_get_routes_answer_as_of_a_past_position(served: Served) -> None:
    _seed(served)
    before = served.ledger.position
    served.reviewer.post("/records/{record_id}/revoke", record_id="E1", json={"reason": "wrong"})
    then = served.agent.get(
        "/records/{record_id}", record_id="M1", params={"as_of_position": before}
    )
    assert then.json()["status"] == "ACCEPTED"
    read_then = served.agent.get(
        "/read",
        params={"scope": "proj-a", "claim_key": "api.retry_safe", "as_of_position": before},
    )
    assert read_then.json()["outcome"] == "FOUND"
    assert served.agent.get("/records/{record_id}", record_id="M1").json()["status"] == "STALE"


def test_a_record_unknown_as_of_a_past_moment_is_said_unknown_then(served: Served) -> None:
    # One proposed since is not there yet: "unknown" alone would hide that it exists now.
    _seed(served)
    before = served.ledger.position
    served.agent.post(
        "/records",
        json={"scope": "proj-a", "claim_key": "api.new", "value": 1, "kind": "fact", "id": "N1"},
    )
    then = served.agent.get(
        "/records/{record_id}", record_id="N1", params={"as_of_position": before}
    )
    assert then.status_code == 404
    message = error_of(then)["message"]
    assert "record 'N1' is unknown" in message
    assert f"as of log position {before} (" in message
    audit_then = served.agent.get(
        "/records/{record_id}/audit", record_id="N1", params={"as_of_position": before}
    )
    assert f"as of log position {before} (" in error_of(audit_then)["message"]
    now = served.agent.get("/records/{record_id}", record_id="NOPE")
    assert now.status_code == 404 and "as of" not in error_of(now)["message"]


def test_proposing_with_supersedes_replaces_the_old_record_once_accepted(served: Served) -> None:
    s = served
    s.agent.post(
        "/records",
        json={"scope": "proj-a", "claim_key": "api.limit", "value": 60, "kind": "fact", "id": "L1"},
    )
    s.reviewer.post("/records/{record_id}/accept", record_id="L1")
    r = s.agent.post(
        "/records",
        json={
            "scope": "proj-a",
            "claim_key": "api.limit",
            "value": 120,
            "kind": "fact",
            "id": "L2",
            "supersedes": "L1",
        },
    )
    assert r.status_code == 201
    s.reviewer.post("/records/{record_id}/accept", record_id="L2")
    old = s.agent.get("/records/{record_id}", record_id="L1").json()
    assert old["status"] == "SUPERSEDED"
    assert old["superseded_by"] == "L2"
    read = s.agent.get("/read", params={"scope": "proj-a", "claim_key": "api.limit"})
    assert (read.json()["outcome"], read.json()["value"]) == ("FOUND", 120)


# -- status codes ------------------------------------------------------------------------------


def test_no_token_or_a_bad_token_is_401_with_a_bearer_challenge(served: Served) -> None:
    for caller, refused in (
        (served.anonymous, "AuthenticationError"),
        (served.anonymous.as_("plt_not-a-token"), "UnknownTokenError"),  # a subclass
    ):
        r = caller.get("/records/{record_id}", record_id="E1")
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert error_of(r)["type"] == refused
    basic = served.anonymous.get("/corrections", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert basic.status_code == 401


def test_two_authorization_headers_are_401_whichever_comes_first(served: Served) -> None:
    # A proxy that reads the last of two headers would act for another principal
    # than a server that read the first: neither is taken
    agent, other = served.tokens["agent-1"], "plt_not-a-token"
    for first, second in ((agent, other), (other, agent), (agent, agent)):
        headers = [("Authorization", f"Bearer {first}"), ("Authorization", f"Bearer {second}")]
        r = served.anonymous.client.get("/api/v1/records/E1", headers=headers)
        assert r.status_code == 401, r.text
        assert error_of(r) == {
            "type": "AuthenticationError",
            "message": "send one Authorization header, not 2: 'Authorization: Bearer <token>'",
            "field": None,
        }


def test_a_bad_token_is_401_even_when_the_body_is_malformed_too(served: Served) -> None:
    bad = served.anonymous.as_("plt_not-a-token")
    for content in (b"{not json", b"[1, 2]"):
        r = bad.post("/records", content=content, headers={"Content-Type": "application/json"})
        assert (r.status_code, error_of(r)["type"]) == (401, "UnknownTokenError")
    # nor do the names a route takes reach an unknown caller
    r = bad.post("/records", json={"parent": ["E1"]})
    assert (r.status_code, error_of(r)["type"]) == (401, "UnknownTokenError")
    assert "parents" not in r.text
    r = bad.get("/corrections", params={"bogus": "1"})
    assert (r.status_code, error_of(r)["type"]) == (401, "UnknownTokenError")
    r = served.agent.post("/records", content=b"{not json")  # a good token: the body's fault
    assert (r.status_code, error_of(r)["type"]) == (422, "InvalidInputError")


def test_superseding_an_unknown_record_or_another_claim_names_the_field(served: Served) -> None:
    _seed(served)
    new = {"scope": "proj-a", "claim_key": "other", "value": 1, "kind": "fact"}
    r = served.agent.post("/records", json={**new, "supersedes": "NOPE"})
    assert (r.status_code, error_of(r)["type"]) == (404, "UnknownRecordError")
    assert error_of(r)["field"] == "supersedes"
    r = served.agent.post("/records", json={**new, "supersedes": "E1"})
    error = error_of(r)
    assert (r.status_code, error["field"]) == (422, "supersedes")
    assert error["message"].startswith("propose refused: supersedes 'E1' (proj-a/source:")


def test_an_unknown_replacement_names_the_field_not_the_delivery(served: Served) -> None:
    _seed(served)
    delivery = served.ledger.authenticate(served.tokens["reviewer"]).get("R1").deliveries[0]
    r = served.reviewer.post(
        "/deliveries/{delivery_id}/corrections",
        json={"note": "n", "replacement": "NOPE"},
        delivery_id=delivery.delivery_id,
    )
    assert (r.status_code, error_of(r)["field"]) == (404, "replacement")
    r = served.reviewer.post(
        "/deliveries/{delivery_id}/corrections", json={"note": "n"}, delivery_id="NOPE"
    )
    assert (r.status_code, error_of(r)["field"]) == (404, None)  # the path's delivery
    r = served.reviewer.get("/records/{record_id}", record_id="NOPE")
    assert (r.status_code, error_of(r)["field"]) == (404, None)


def test_a_revoked_token_is_refused_from_its_next_request(served: Served) -> None:
    assert served.agent.get("/corrections").status_code == 403  # no 'deliver' anywhere
    assert served.reviewer.get("/corrections").status_code == 200
    served.ledger.admin().revoke_token(served.tokens["agent-1"])
    r = served.agent.get("/corrections")
    assert r.status_code == 401
    assert served.tokens["agent-1"] not in r.text


def test_a_missing_role_is_403_naming_the_role(served: Served) -> None:
    _seed(served)
    served.agent.post(
        "/records",
        json={"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact", "id": "X1"},
    )
    r = served.agent.post("/records/{record_id}/accept", record_id="X1")
    assert r.status_code == 403
    assert error_of(r)["type"] == "AccessDeniedError"
    assert "approve" in error_of(r)["message"]
    audit = served.agent.get("/records/{record_id}/audit", record_id="E1")
    assert audit.status_code == 403
    propose = served.outsider.post(
        "/records", json={"scope": "proj-b", "claim_key": "c", "value": 1, "kind": "fact"}
    )
    assert propose.status_code == 403


def test_self_approval_is_403(served: Served) -> None:
    served.ledger.admin().grant("reviewer", scope="proj-a", roles=["propose"])
    served.reviewer.post(
        "/records",
        json={"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact", "id": "S1"},
    )
    for action, body in (("accept", {}), ("reject", {"reason": "mine"})):
        r = served.reviewer.post(f"/records/{{record_id}}/{action}", record_id="S1", json=body)
        assert r.status_code == 403
        assert error_of(r)["type"] == "SelfApprovalError"
    assert served.agent.get("/records/{record_id}", record_id="S1").json()["status"] == "CANDIDATE"


def test_unknown_records_and_deliveries_are_404(served: Served) -> None:
    for template in (
        "/records/{record_id}",
        "/records/{record_id}/audit",
        "/records/{record_id}/graph",
    ):
        r = served.reviewer.get(template, record_id="NOPE")
        assert r.status_code == 404
        assert error_of(r)["type"] == "UnknownRecordError"
    r = served.reviewer.post("/records/{record_id}/revoke", record_id="NOPE", json={"reason": "x"})
    assert r.status_code == 404
    d = served.reviewer.post(
        "/deliveries/{delivery_id}/corrections", delivery_id="d-nope", json={"note": "x"}
    )
    assert d.status_code == 404
    assert error_of(d)["type"] == "UnknownDeliveryError"
    assert served.reviewer.client.get("/api/v1/nowhere").status_code == 404


def test_an_invalid_transition_or_a_taken_id_is_409(served: Served) -> None:
    _seed(served)
    r = served.reviewer.post("/records/{record_id}/accept", record_id="E1")
    assert r.status_code == 409
    assert error_of(r)["type"] == "InvalidTransitionError"
    # the record's status and what the command needs, for a program to act on
    assert (error_of(r)["status"], error_of(r)["allowed"]) == ("ACCEPTED", ["CANDIDATE"])
    served.reviewer.post("/records/{record_id}/revoke", record_id="E1", json={"reason": "x"})
    again = served.reviewer.post(
        "/records/{record_id}/revoke", record_id="E1", json={"reason": "y"}
    )
    assert again.status_code == 409
    assert error_of(again)["status"] == "REVOKED"
    assert error_of(again)["allowed"] == ["CANDIDATE", "ACCEPTED", "STALE"]
    revalidate = served.reviewer.post("/records/{record_id}/revalidate", record_id="E1")
    assert revalidate.status_code == 409
    taken = served.agent.post(
        "/records",
        json={"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact", "id": "M1"},
    )
    assert taken.status_code == 409
    assert error_of(taken)["type"] == "DuplicateRecordError"
    assert "status" not in error_of(taken)  # (no status machine refusal)
    assert error_of(taken)["field"] == "id"  # the id given is taken
    # and so for evidence captured under an id already taken
    captured = served.agent.post(
        "/evidence",
        json={"scope": "proj-a", "uri": "https://x.test/z", "content": "z", "id": "M1"},
    )
    assert captured.status_code == 409 and error_of(captured)["field"] == "id"


@pytest.mark.parametrize(
    ("body", "field", "error_type"),
    [
        ({"claim_key": "c", "value": 1, "kind": "fact"}, "scope", "InvalidInputError"),
        ({"scope": "proj-a", "value": 1, "kind": "fact"}, "claim_key", "InvalidInputError"),
        ({"scope": "proj-a", "claim_key": "c", "kind": "fact"}, "value", "InvalidInputError"),
        (
            {"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "guess"},
            "kind",
            "InvalidKindError",
        ),
        ({"scope": "proj-a", "claim_key": "c", "value": 1, "kind": 7}, "kind", "InvalidInputError"),
        (
            {"scope": "bad scope", "claim_key": "c", "value": 1, "kind": "fact"},
            "scope",
            "InvalidIdError",
        ),
        (
            {"scope": "proj-a", "claim_key": " c", "value": 1, "kind": "fact"},
            "claim_key",
            "InvalidValueError",
        ),
        (
            {"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact", "id": "-x"},
            "id",
            "InvalidIdError",
        ),
        (
            {
                "scope": "proj-a",
                "claim_key": "c",
                "value": 1,
                "kind": "fact",
                "expires": "2030-01-01T00:00:00",
            },
            "expires",
            "NaiveDatetimeError",
        ),
        (
            {"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact", "expires": "soon"},
            "expires",
            "InvalidInputError",
        ),
        (
            {
                "scope": "proj-a",
                "claim_key": "c",
                "value": 1,
                "kind": "fact",
                "expires": "2020-01-01T00:00:00Z",
            },
            "expires",
            "ExpiryInPastError",
        ),
        (
            {
                "scope": "proj-a",
                "claim_key": "c",
                "value": 1,
                "kind": "inference",
                "parents": ["GHOST"],
            },
            "parents",
            "InvalidParentError",
        ),
        (
            {"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact", "parents": "E1"},
            "parents",
            "InvalidInputError",
        ),
        (
            {"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact", "conditions": [1]},
            "conditions",
            "InvalidInputError",
        ),
        (
            {
                "scope": "proj-a",
                "claim_key": "c",
                "value": 1,
                "kind": "fact",
                "id": "Z1",
                "parents": ["Z1"],
            },
            "parents",
            "CycleError",
        ),
    ],
)
def test_bad_input_is_422_naming_the_field(
    served: Served, body: dict[str, object], field: str, error_type: str | None
) -> None:
    before = served.ledger.position
    r = served.agent.post("/records", json=body)
    assert r.status_code == 422, r.text
    error = error_of(r)
    assert error["field"] == field, error
    if error_type is not None:
        assert error["type"] == error_type
    assert served.ledger.position == before


#: An instant as RFC 3339 writes it, in the forms the API reads: each gives the
#: text for a UTC instant, and the instant that text names.
RFC_3339_FORMS: dict[str, Callable[[datetime], tuple[str, datetime]]] = {
    "Z": lambda at: (at.strftime("%Y-%m-%dT%H:%M:%SZ"), at),
    "lower-case t and z": lambda at: (at.strftime("%Y-%m-%dt%H:%M:%Sz"), at),
    "a fraction": lambda at: (
        at.strftime("%Y-%m-%dT%H:%M:%S.25Z"),
        at + timedelta(milliseconds=250),
    ),
    "nine fraction digits": lambda at: (
        at.strftime("%Y-%m-%dT%H:%M:%S.123456789Z"),
        at + timedelta(microseconds=123456),  # as many as a datetime holds
    ),
    "an offset": lambda at: (
        at.astimezone(timezone(timedelta(hours=5, minutes=30))).isoformat(),
        at,
    ),
    "a negative offset": lambda at: (
        at.astimezone(timezone(-timedelta(hours=10))).isoformat(),
        at,
    ),
    "-00:00": lambda at: (at.strftime("%Y-%m-%dT%H:%M:%S-00:00"), at),
}

#: Date-times that are not RFC 3339 (most of them other ISO 8601 forms, which
#: Python's datetime.fromisoformat reads), as strftime patterns for an instant.
NOT_RFC_3339 = {
    "basic format": "%Y%m%dT%H%M%SZ",
    "week date": "%G-W%V-%uT%H:%MZ",
    "a space for the T": "%Y-%m-%d %H:%M+00:00",
    "an offset without its colon": "%Y-%m-%dT%H:%M:%S+0000",
    "an hour-only offset": "%Y-%m-%dT%H:%M:%S+05",
    "no seconds": "%Y-%m-%dT%H:%MZ",
    "a date only": "%Y-%m-%d",
    "an ordinal date": "%Y-%jT%H:%M:%SZ",
    "an empty fraction": "%Y-%m-%dT%H:%M:%S.Z",
    "a comma for the fraction": "%Y-%m-%dT%H:%M:%S,5Z",
    "a 24-hour offset": "%Y-%m-%dT%H:%M:%S+24:00",
    "an offset's 60th minute": "%Y-%m-%dT%H:%M:%S+05:60",
    "a 13th month": "%Y-13-%dT%H:%M:%SZ",
    "a leap second": "%Y-%m-%dT23:59:60Z",
    "other digits": "\uff12\uff10\uff12\uff16-%m-%dT%H:%M:%SZ",  # fullwidth 2026
    "a trailing space": "%Y-%m-%dT%H:%M:%SZ ",
}


def _not_rfc_3339(name: str, text: str) -> dict[str, str]:
    return {
        "type": "InvalidInputError",
        "field": name,
        "message": (
            f"{name} must be an RFC 3339 date-time (e.g. 2026-12-05T22:10:00Z), not {text!r}"
        ),
    }


@pytest.mark.parametrize("form", RFC_3339_FORMS)
def test_an_rfc_3339_date_time_is_read_in_a_query_parameter_and_a_body_field(
    served: Served, form: str
) -> None:
    # Given M1, proposed and accepted an hour ago
    _seed(served)
    now = served.clock.advance(hours=1)
    # When as_of_time is given in this form, the answer is as of that instant (a
    # second ago: a form may add a fraction, and a later time is in the future)
    when, _ = RFC_3339_FORMS[form](now - timedelta(seconds=1))
    then = served.agent.get("/records/{record_id}", record_id="M1", params={"as_of_time": when})
    assert then.status_code == 200, then.text
    assert then.json()["status"] == "ACCEPTED"
    # And a record's expiry given in this form is that instant
    expires, instant = RFC_3339_FORMS[form](now + timedelta(days=1))
    body = {"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact", "expires": expires}
    made = served.agent.post("/records", json=body)
    assert made.status_code == 201, made.text
    assert datetime.fromisoformat(made.json()["record"]["expires"]) == instant


def test_an_as_of_time_in_the_future_is_422_not_a_made_up_past(served: Served) -> None:
    # Given M1 accepted, and an auditor who mistypes a year
    _seed(served)
    later = (served.clock.now + timedelta(days=365)).isoformat()
    for template, params in (
        ("/records/{record_id}", {"as_of_time": later}),
        ("/read", {"scope": "proj-a", "claim_key": "api.retry_safe", "as_of_time": later}),
    ):
        # When a record or a read is asked for as of that time
        then = served.reviewer.get(template, record_id="M1", params=params)
        # Then it is refused, naming the parameter, as a position beyond the log is
        assert then.status_code == 422, then.text
        error = error_of(then)
        assert error["field"] == "as_of_time"
        assert "is in the future" in error["message"]
    # And the ledger's present moment is a past it shows
    now = served.clock.now.isoformat()
    shown = served.reviewer.get("/records/{record_id}", record_id="M1", params={"as_of_time": now})
    assert shown.status_code == 200, shown.text


@pytest.mark.parametrize("form", NOT_RFC_3339)
def test_a_date_time_not_rfc_3339_is_422_naming_the_field_and_writes_nothing(
    served: Served, form: str
) -> None:
    # Given M1, proposed and accepted an hour ago
    _seed(served)
    now = served.clock.advance(hours=1)
    before = served.ledger.position
    # When as_of_time is given as another form of an instant
    when = now.strftime(NOT_RFC_3339[form])
    then = served.agent.get("/records/{record_id}", record_id="M1", params={"as_of_time": when})
    # Then it is refused, naming the parameter and the form it must have
    assert then.status_code == 422, then.text
    assert error_of(then) == _not_rfc_3339("as_of_time", when)
    # And so is a record's expiry, and no record is proposed
    expires = (now + timedelta(days=1)).strftime(NOT_RFC_3339[form])
    body = {"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact", "expires": expires}
    refused = served.agent.post("/records", json=body)
    assert refused.status_code == 422, refused.text
    assert error_of(refused) == _not_rfc_3339("expires", expires)
    assert served.ledger.position == before


def test_an_rfc_3339_date_time_without_its_offset_is_refused_as_naive(served: Served) -> None:
    _seed(served)
    before = served.ledger.position
    naive = "2026-01-01T13:00:00"
    then = served.agent.get("/records/{record_id}", record_id="M1", params={"as_of_time": naive})
    assert then.status_code == 422, then.text
    assert error_of(then)["type"] == "NaiveDatetimeError"
    assert error_of(then)["field"] == "as_of_time"
    body = {"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact", "expires": naive}
    refused = served.agent.post("/records", json=body)
    assert refused.status_code == 422, refused.text
    assert (error_of(refused)["type"], error_of(refused)["field"]) == (
        "NaiveDatetimeError",
        "expires",
    )
    assert served.ledger.position == before


def test_bad_query_parameters_are_422_naming_them(served: Served) -> None:
    cases = [
        ("/records", {"scope": "proj-a", "limit": "0"}, "limit"),
        ("/records", {"scope": "proj-a", "limit": "lots"}, "limit"),
        ("/records", {"scope": "proj-a", "status": "MAYBE"}, "status"),
        ("/records", {"scope": "proj-a", "validity": "SORT_OF"}, "validity"),
        ("/records", {"scope": "proj-a", "kind": "guess"}, "kind"),
        ("/records", {}, "scope"),
        ("/read", {"scope": "proj-a"}, "claim_key"),
        ("/read", {"scope": "proj-a", "claim_key": "c", "at": "noon"}, "at"),
        ("/read", {"scope": "proj-a", "claim_key": "c", "at": "2026-01-01T00:00:00"}, "at"),
        ("/read", {"scope": "proj-a", "claim_key": "c", "context": "[1]"}, "context"),
        # Numbers JSON cannot hold, as in a body
        ("/read", {"scope": "proj-a", "claim_key": "c", "context": '{"x": Infinity}'}, "context"),
        ("/explain", {"scope": "proj-a", "claim_key": "c", "context": '{"x": 1e999}'}, "context"),
        # A parameter given twice would keep its last value silently
        ("/records", [("scope", "proj-b"), ("scope", "proj-a")], "scope"),
        ("/explain", {"scope": "proj-a", "claim_key": "c", "kinds": "guess"}, "kinds"),
        ("/read", {"scope": "proj-a", "claim_key": "c", "kinds": ",,"}, "kinds"),
        ("/corrections", {"as_of_position": "-1"}, "as_of_position"),
        ("/corrections", {"as_of_position": "99999"}, "as_of_position"),
        (
            "/corrections",
            {"as_of_position": "1", "as_of_time": "2026-01-01T00:00:00Z"},
            "as_of_time",
        ),
        # A misspelt parameter would otherwise drop the filter it meant
        ("/records", {"scope": "proj-a", "stauts": "STALE"}, "stauts"),
        ("/read", {"scope": "proj-a", "claim_key": "c", "as_of": "1"}, "as_of"),
    ]
    for template, params, field in cases:
        r = served.agent.get(template, params=params)
        assert r.status_code == 422, (template, params, r.text)
        assert error_of(r)["field"] == field, (template, params, r.text)
    # The bounds are told as they are, none of them "None"
    below = served.agent.get("/corrections", params={"as_of_position": "-1"})
    assert error_of(below)["message"] == "as_of_position -1 is not at least 0"
    over = served.agent.get("/records", params={"scope": "proj-a", "limit": "0"})
    assert error_of(over)["message"].startswith("limit 0 is not in 1..")


def test_a_body_that_is_not_a_json_object_is_422(served: Served) -> None:
    for raw in (b"{not json", b"[1, 2]", b'{"value": Infinity}', b'{"value": -Infinity}'):
        r = served.agent.post("/records", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 422
        assert error_of(r)["type"] == "InvalidInputError"
    missing_reason = served.reviewer.post("/records/{record_id}/reject", record_id="X", json={})
    assert missing_reason.status_code == 422
    assert error_of(missing_reason)["field"] == "reason"
    both = served.agent.post(
        "/evidence",
        json={"scope": "proj-a", "uri": "u", "content": "a", "content_base64": "YQ=="},
    )
    assert (both.status_code, error_of(both)["field"]) == (422, "content")
    lone = served.agent.post(
        "/evidence",
        content=b'{"scope": "proj-a", "uri": "u", "content": "a\\ud800"}',
        headers={"Content-Type": "application/json"},
    )
    assert (lone.status_code, error_of(lone)["field"]) == (422, "content")


def test_oversized_evidence_names_the_field_the_bytes_came_in(served: Served) -> None:
    before = served.ledger.position
    raw = b"x" * (1024 * 1024 + 1)  # over the ledger's value limit, within the body limit
    with TestClient(create_app(served.ledger, mcp_factory=None)) as client:
        agent = Api(client, served.tokens["agent-1"])
        for field, given in (("content", raw), ("content_base64", base64.b64encode(raw))):
            body = {"scope": "proj-a", "uri": "https://x.test/big", field: given.decode()}
            r = agent.post("/evidence", json=body)
            assert (r.status_code, error_of(r)["type"]) == (422, "ValueTooLargeError")
            assert error_of(r)["field"] == field
    assert served.ledger.position == before


def test_a_number_is_plain_digits_and_a_query_is_utf8(served: Served) -> None:
    # int() reads "1_0", "+5", " 5" and other scripts' digits; a client sending them
    # has a bug the API should tell, as it tells "ten".
    for text in ("1_0", "+5", " 5", "\u0663", "ten", "-1"):
        r = served.agent.get("/records", params={"scope": "proj-a", "limit": text})
        assert (r.status_code, error_of(r)["field"]) == (422, "limit"), text
    auth = {"Authorization": f"Bearer {served.tokens['agent-1']}"}
    # caf\xe9 in Latin-1 would be read as U+FFFD: a wrong answer (MISSING), not an error
    r = served.client.get("/api/v1/read?scope=proj-a&claim_key=caf%E9.x", headers=auth)
    assert (r.status_code, error_of(r)["field"]) == (422, "claim_key")
    assert "not UTF-8" in error_of(r)["message"]
    r = served.client.get("/api/v1/read?scope=proj-a&claim_key=caf%C3%A9.x", headers=auth)
    assert r.status_code == 200 and r.json()["claim_key"] == "caf\u00e9.x"


def test_an_integer_longer_than_python_converts_is_422_naming_it(served: Served) -> None:
    # int() refuses text of over 4,300 digits with a ValueError: it was a 500.
    huge = "9" * 4301
    for path, params in [
        ("/records", {"scope": "proj-a", "limit": huge}),
        ("/read", {"scope": "proj-a", "claim_key": "k", "as_of_position": huge}),
    ]:
        r = served.agent.get(path, params=params)
        field = "limit" if "limit" in params else "as_of_position"
        assert (r.status_code, error_of(r)["field"]) == (422, field), r.text
        assert error_of(r)["message"] == f"{field} of 4,301 digits is out of range"
    # leading zeros are no digits of the number: 0…05 is 5, however many zeros
    r = served.agent.get("/records", params={"scope": "proj-a", "limit": "0" * 4400 + "5"})
    assert r.status_code == 200, r.text


def test_an_encoded_slash_stays_in_its_segment_and_runs_no_other_route(served: Served) -> None:
    # /records/M1%2Faudit is the record "M1/audit" (no such id), not M1's audit
    # trail; a POST to …%2Faccept accepts nothing.
    _seed(served)
    candidate = served.agent.post(
        "/records", json={"scope": "proj-a", "claim_key": "k.c", "value": 1, "kind": "fact"}
    ).json()["id"]
    auth = {"Authorization": f"Bearer {served.tokens['reviewer']}"}
    for suffix in ("%2Faudit", "%2fgraph"):
        r = served.client.get(f"/api/v1/records/M1{suffix}", headers=auth)
        assert (r.status_code, error_of(r)["type"]) == (422, "InvalidIdError"), r.text
    before = served.ledger.position
    r = served.client.post(f"/api/v1/records/{candidate}%2Faccept", headers=auth)
    assert r.status_code == 405, r.text
    assert served.ledger.position == before
    assert served.reviewer.get("/records/{record_id}", record_id=candidate).json()["status"] == (
        "CANDIDATE"
    )
    # the id itself, percent-encoded or not, is still read as it is spelt
    r = served.client.get("/api/v1/records/%4D1", headers=auth)
    assert (r.status_code, r.json()["id"]) == (200, "M1")


def test_a_coded_body_is_415_naming_the_coding_and_writes_nothing(served: Served) -> None:
    # A gzip body was refused as "not UTF-8"; a plain one labelled gzip was written.
    body = json.dumps({"scope": "proj-a", "claim_key": "k.z", "value": 1, "kind": "fact"})
    auth = {"Authorization": f"Bearer {served.tokens['agent-1']}"}
    before = served.ledger.position
    for coding, data in (("gzip", gzip.compress(body.encode())), ("gzip", body.encode())):
        headers = {**auth, "Content-Type": "application/json", "Content-Encoding": coding}
        r = served.client.post("/api/v1/records", content=data, headers=headers)
        assert r.status_code == 415, r.text
        assert "Content-Encoding 'gzip'" in error_of(r)["message"]
    assert served.ledger.position == before
    # Codings given in one header, or in several, count alike (the first line alone
    # was checked: identity, then gzip on a line of its own, was written)
    for codings in (["identity, gzip"], ["identity", "gzip"], ["gzip", "identity"]):
        both = [*auth.items(), ("Content-Type", "application/json")]
        both += [("Content-Encoding", coding) for coding in codings]
        r = served.client.post("/api/v1/records", content=body.encode(), headers=both)
        assert r.status_code == 415, codings
        assert "Content-Encoding 'gzip'" in error_of(r)["message"]
    # And a Content-Type given twice is refused, whichever comes first
    for types in (["application/json", "text/plain"], ["text/plain", "application/json"]):
        twice = [*auth.items(), *(("Content-Type", media) for media in types)]
        r = served.client.post("/api/v1/records", content=body.encode(), headers=twice)
        assert r.status_code == 415, types
        assert error_of(r)["message"] == (
            f"Content-Type is given 2 times ({', '.join(types)!r}); give it once"
        )
    assert served.ledger.position == before
    headers = {**auth, "Content-Type": "application/json", "Content-Encoding": "identity"}
    r = served.client.post("/api/v1/records", content=body.encode(), headers=headers)
    assert r.status_code == 201, r.text


def test_evidence_is_captured_not_proposed(served: Served) -> None:
    # Proposed, it would pin no bytes yet read FOUND as `source:…` evidence.
    before = served.ledger.position
    new = {"scope": "proj-a", "claim_key": "source:https://x.test", "value": 1}
    r = served.agent.post("/records", json={**new, "kind": "evidence"})
    assert (r.status_code, error_of(r)["type"], error_of(r)["field"]) == (
        422,
        "InvalidKindError",
        "kind",
    )
    assert (
        "POST /evidence"
        in DOC["components"]["schemas"]["ProposeRequest"]["properties"]["kind"]["description"]
    )
    assert served.ledger.position == before


def test_a_body_declared_as_another_media_type_is_415_and_writes_nothing(
    served: Served,
) -> None:
    # A form or text/plain body is not read as JSON by guesswork, even when it parses.
    before = served.ledger.position
    raw = b'{"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "fact"}'
    for media in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
    ):
        r = served.agent.post("/records", content=raw, headers={"Content-Type": media})
        assert r.status_code == 415, media
        error = error_of(r)
        assert error["type"] == "InvalidInputError"
        assert repr(media.split(";")[0]) in error["message"]
        assert "application/json" in error["message"]
    # nor is JSON declared in a charset where it reads otherwise than in UTF-8
    accented = raw.replace(b'"c"', '"café"'.encode())
    for media, body in (
        ("application/json; charset=latin-1", accented),
        ('application/json;charset="UTF-16"', accented),
        ("application/json; charset=utf-7", raw.replace(b'"c"', b'"caf+AOk-"')),  # café
        ("application/json; charset=utf-16-le", raw.decode().encode("utf-16-le")),
        ("application/json; charset=x-no-such", raw),
    ):
        r = served.agent.post("/records", content=body, headers={"Content-Type": media})
        assert r.status_code == 415, media
        assert "reads JSON as UTF-8" in error_of(r)["message"]
    assert served.ledger.position == before
    # JSON by any of its names, or no declared type at all, is read
    for n, headers in enumerate(
        (
            {"Content-Type": "application/json; charset=utf-8"},
            {"Content-Type": 'application/json; charset="UTF8"'},
            {"Content-Type": "application/json; charset=us-ascii"},  # ASCII: read alike
            {"Content-Type": "Application/JSON"},
            {"Content-Type": "application/vnd.provledger+json"},
            {},
        )
    ):
        body = raw.replace(b'"c"', b'"c-%d"' % n)
        r = served.agent.post("/records", content=body, headers=headers)
        assert r.status_code == 201, (headers, r.text)
    # an empty body declared as a form is nothing to refuse: the route's own check speaks
    empty = served.reviewer.post(
        "/records/{record_id}/reject",
        record_id="X",
        content=b"",
        headers={"Content-Type": "text/plain"},
    )
    assert (empty.status_code, error_of(empty)["field"]) == (422, "reason")
    # a bad token is still told first
    bad = served.anonymous.as_("plt_not-a-token").post(
        "/records", content=raw, headers={"Content-Type": "text/plain"}
    )
    assert (bad.status_code, error_of(bad)["type"]) == (401, "UnknownTokenError")


def test_a_body_with_a_utf8_byte_order_mark_is_read(served: Served) -> None:
    # RFC 8259 lets a reader ignore the mark (some Windows tools write it)
    body = {"scope": "proj-a", "claim_key": "bom", "value": "é", "kind": "fact", "id": "B1"}
    raw = b"\xef\xbb\xbf" + json.dumps(body).encode("utf-8")
    r = served.agent.post("/records", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 201, r.text
    assert served.agent.get("/records/{record_id}", record_id="B1").json()["value"] == "é"


def test_a_number_out_of_range_or_a_field_given_twice_is_422_and_writes_nothing(
    served: Served,
) -> None:
    # 1e999 would be read as infinity, and a repeated `parents` would keep its last value.
    _seed(served)
    before = served.ledger.position
    head = b'{"scope": "proj-a", "claim_key": "c", "kind": "fact", '
    for raw, message, field in (
        (
            head + b'"value": 1e999}',
            "the request body holds the number 1e999 at value, out of range",
            "value",
        ),
        (
            b'{"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "inference", '
            b'"parents": ["M1"], "parents": []}',
            "the request body gives 'parents' more than once",
            "parents",
        ),
        # Inside a field, the field holding it is named, not a key of the same name.
        (
            head + b'"value": 1, "conditions": {"scope": 1, "scope": 2}}',
            "the request body gives 'scope' more than once in 'conditions'",
            "conditions",
        ),
        (
            head + b'"value": 1e-400}',
            "the request body holds the number 1e-400 at value, too small to keep (it would "
            "be 0.0)",
            "value",
        ),
        # Valid JSON that is more than the API takes is said so, not "not JSON".
        (
            head + b'"value": ' + b"9" * 5000 + b"}",
            "the request body holds an integer of 5000 digits at value, out of range",
            "value",
        ),
        (
            head + b'"value": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            "the request body is nested too deeply",
            None,
        ),
        # Inside a field, the place in it is named too
        (
            head + b'"value": 1, "conditions": {"limits": [1, 1e400]}}',
            "the request body holds the number 1e400 at conditions.limits[1], out of range",
            "conditions",
        ),
        ('{"scope": "proj-a"}'.encode("utf-16"), "the request body is not UTF-8", None),
    ):
        r = served.agent.post("/records", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        assert (error_of(r)["message"], error_of(r)["field"]) == (message, field)
    assert served.ledger.position == before


def test_revalidating_on_a_dependency_not_usable_now_is_a_409_naming_no_field(
    served: Served,
) -> None:
    # Nothing in the request is bad input, whether it gives no parents or null.
    _seed(served)
    served.reviewer.post("/records/{record_id}/revoke", record_id="E1", json={"reason": "x"})
    before = served.ledger.position
    for body in (None, {}, {"parents": None}, {"note": "checked"}):
        r = served.reviewer.post("/records/{record_id}/revalidate", record_id="R1", json=body)
        assert r.status_code == 409, (body, r.text)
        error = error_of(r)
        assert (error["type"], error["field"]) == ("InvalidParentError", None), error
        assert "'M1'" in error["message"] and "STALE" in error["message"]
    # A basis the request names that is not usable now is a conflict naming it...
    named = served.reviewer.post(
        "/records/{record_id}/revalidate", record_id="R1", json={"parents": ["E1"]}
    )
    assert (named.status_code, error_of(named)["field"]) == (409, "parents"), named.text
    # ...and one that does not exist is the request's mistake: 422 naming it.
    ghost = served.reviewer.post(
        "/records/{record_id}/revalidate", record_id="R1", json={"parents": ["GHOST"]}
    )
    assert (ghost.status_code, error_of(ghost)["field"]) == (422, "parents"), ghost.text
    assert served.ledger.position == before


def test_accepting_a_record_whose_parent_is_a_candidate_is_a_409_conflict(served: Served) -> None:
    # Nothing in the request is bad input: the state of a dependency refuses it.
    body = {"scope": "proj-a", "claim_key": "x", "value": 1, "kind": "fact", "id": "X1"}
    assert served.agent.post("/records", json=body).status_code == 201
    body = {**body, "claim_key": "xr", "kind": "inference", "id": "XR", "parents": ["X1"]}
    assert served.agent.post("/records", json=body).status_code == 201
    before = served.ledger.position
    r = served.reviewer.post("/records/{record_id}/accept", record_id="XR", json={})
    assert r.status_code == 409, r.text
    assert error_of(r)["type"] == "InvalidParentError" and error_of(r)["field"] is None
    assert "'X1'" in error_of(r)["message"]
    assert served.ledger.position == before


def test_a_path_with_a_trailing_slash_is_404_not_a_redirect(served: Served) -> None:
    for path in ("/api/v1/records/", "/api/v1/records/E1/", "/records/E1/"):
        r = served.client.get(path, headers={"Host": "elsewhere.example"})
        assert r.status_code == 404, (path, r.status_code)
        assert "location" not in r.headers


def test_a_field_a_route_does_not_take_is_422_naming_it_and_writes_nothing(
    served: Served,
) -> None:
    # Dropped, a misspelt `parents` would lose the provenance and `expire` the expiry.
    _seed(served)
    before = served.ledger.position
    body = {"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "report"}
    for extra in ({"parent": ["M1"]}, {"expire": "2020-01-01T00:00:00Z"}):
        r = served.agent.post("/records", json={**body, **extra})
        assert r.status_code == 422, r.text
        (name,) = extra
        assert error_of(r)["field"] == name
        assert error_of(r)["message"].startswith(f"unknown field {name!r} (this route takes: ")
    r = served.reviewer.post("/records/{record_id}/accept", record_id="M1", json={"reason": "x"})
    assert (r.status_code, error_of(r)["field"]) == (422, "reason")
    r = served.agent.post("/records", json=body, params={"as_of_position": "1"})
    assert (r.status_code, error_of(r)["field"]) == (422, "as_of_position")
    assert served.ledger.position == before


def test_a_long_field_name_is_echoed_cut_to_a_prefix_with_its_length(served: Served) -> None:
    # Every refusal cuts what it echoes, `field` included: a field name is the
    # client's text too. A name of at most 160 characters is echoed whole (above).
    before = served.ledger.position
    body = {"scope": "proj-a", "claim_key": "c", "value": 1, "kind": "report"}
    cut = f"{'z' * 160!r}… (50000 characters)"
    r = served.agent.post("/records", json={**body, "z" * 50000: 1})
    assert r.status_code == 422, r.text[:300]
    assert error_of(r)["field"] == cut
    assert error_of(r)["message"].startswith(f"unknown field {cut} (this route takes: ")
    assert len(r.content) < 1000
    many = served.agent.post("/records", json={**body, **{f"x{i}": 1 for i in range(500)}})
    assert error_of(many)["field"] == "x0"
    assert "'x0', 'x1', 'x10', " in error_of(many)["message"]
    assert " and 480 more (this route takes: " in error_of(many)["message"]
    assert len(many.content) < 1000
    twice = served.agent.post(
        "/records",
        content=b'{"' + b"y" * 30000 + b'": 1, "' + b"y" * 30000 + b'": 2}',
        headers={"Content-Type": "application/json"},
    )
    assert error_of(twice)["field"] == f"{'y' * 160!r}… (30000 characters)"
    assert len(twice.content) < 1000
    # A query parameter's name too (one that is not UTF-8 once percent-decoded)
    query = "scope=proj-a&" + "q" * 3000 + "%FF=1"
    auth = {"Authorization": f"Bearer {served.tokens['agent-1']}"}
    r = served.client.get(f"/api/v1/records?{query}", headers=auth)
    assert r.status_code == 422, r.text[:300]
    assert error_of(r)["field"] == f"{'q' * 160!r}… (3001 characters)"
    assert len(r.content) < 1000
    assert served.ledger.position == before


def test_nan_or_infinity_in_a_body_is_refused_naming_where_it_is(served: Served) -> None:
    # Python's reader takes them; JSON has neither. Said where it is, as over MCP.
    before = served.ledger.position
    head = b'{"scope": "proj-a", "claim_key": "c", "kind": "fact", '
    for raw, message, field in (
        (
            head + b'"value": {"limits": [1.5, NaN]}}',
            "the request body holds NaN at value.limits[1], not a finite number "
            "(Infinity and NaN are not JSON)",
            "value",
        ),
        (
            head + b'"value": 1, "conditions": {"api": [{"max": -Infinity}]}}',
            "the request body holds -Infinity at conditions.api[0].max, not a finite number "
            "(Infinity and NaN are not JSON)",
            "conditions",
        ),
        (
            head + b'"value": Infinity}',
            "the request body holds Infinity at value, not a finite number "
            "(Infinity and NaN are not JSON)",
            "value",
        ),
        (  # a place that would not print on one line is shown escaped
            head + b'"value": {"a\\n\\u202eb": NaN}}',
            "the request body holds NaN at 'value.a\\n\\u202eb', not a finite number "
            "(Infinity and NaN are not JSON)",
            "value",
        ),
    ):
        r = served.agent.post("/records", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        error = error_of(r)
        assert (error["type"], error["message"], error["field"]) == (
            "InvalidInputError",
            message,
            field,
        )
    # Not JSON otherwise is still said so, and where it stops reading as JSON
    broken = served.agent.post(
        "/records", content=head + b'"value": NaN', headers={"Content-Type": "application/json"}
    )
    at = len(head + b'"value": NaN') + 1
    assert (error_of(broken)["message"], error_of(broken)["field"]) == (
        f"the request body is not JSON: Expecting ',' delimiter at line 1 column {at}",
        None,
    )
    cut = served.agent.post(
        "/records", content=b'{"scope": "proj-a",\n', headers={"Content-Type": "application/json"}
    )
    assert error_of(cut)["message"] == (
        "the request body is not JSON: Expecting property name enclosed in double quotes "
        "at line 2 column 1"
    )
    assert served.ledger.position == before


def test_a_method_a_route_does_not_take_is_405_with_allow(served: Served) -> None:
    r = served.client.put("/api/v1/records/E1")
    assert r.status_code == 405
    assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}
    assert error_of(r)["type"] == "MethodNotAllowed"
    page = served.client.post("/records")
    assert page.status_code == 405 and "GET" in page.headers["allow"]
    document = served.client.post("/openapi.json")  # read by programs: answered in JSON
    assert document.status_code == 405 and error_of(document)["type"] == "MethodNotAllowed"


def test_a_body_over_the_limit_is_413_before_anything_is_written(served: Served) -> None:
    before = served.ledger.position
    big = {"scope": "proj-a", "claim_key": "c", "value": "x" * 70_000, "kind": "fact"}
    r = served.agent.post("/records", json=big)
    assert r.status_code == 413
    assert error_of(r)["type"] == "ValueTooLargeError"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streaming
        yield b'{"scope": "proj-a", "claim_key": "c", "kind": "fact", "value": "'
        for _ in range(20):
            yield b"y" * 4096
        yield b'"}'

    streamed = served.client.post(
        "/api/v1/records",
        content=chunks(),
        headers={"Authorization": f"Bearer {served.tokens['agent-1']}"},
    )
    assert streamed.status_code == 413
    # A GET's body is held to the limit too, and its 413 is documented
    for template in ("/records", "/records/{record_id}"):
        got = served.agent.get(
            template, record_id="E1", params={"scope": "proj-a"}, content=b"x" * 70_000
        )
        assert got.status_code == 413, template
    assert served.ledger.position == before


def test_a_client_that_sends_its_whole_body_first_still_gets_the_413(served: Served) -> None:
    # Python's urllib writes the whole body before reading the answer: had the server
    # closed without reading it, urllib would see a reset connection, not the 413.
    before = served.ledger.position
    body = (
        b'{"scope": "proj-a", "claim_key": "c", "kind": "fact", "value": "'
        + b"x" * (5 * 1024 * 1024)
        + b'"}'
    )
    with running(served.client.app) as base:  # a real server on a real socket
        request = urllib.request.Request(
            f"{base}/api/v1/records",
            data=body,
            method="POST",
            headers={
                "Authorization": f"Bearer {served.tokens['agent-1']}",
                "Content-Type": "application/json",
            },
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 413
    error = json.loads(refused.value.read())["error"]
    assert error["type"] == "ValueTooLargeError" and "over the limit" in error["message"]
    assert served.ledger.position == before


def test_a_client_waiting_to_send_is_refused_before_it_sends(served: Served) -> None:
    # Expect: 100-continue: the 413 comes first, with no "100 Continue" asking for a
    # body that would be refused anyway.
    with running(served.client.app) as base:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as conn:
            conn.sendall(
                b"POST /api/v1/records HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 5000000\r\n"
                b"Expect: 100-continue\r\n\r\n"
            )
            answer = conn.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:80]


def test_a_client_gone_before_its_body_arrived_is_no_application_error(served: Served) -> None:
    # An ordinary abort must not fill the server's log with tracebacks.
    errors: list[logging.LogRecord] = []
    handler = logging.Handler(level=logging.ERROR)
    handler.emit = errors.append  # type: ignore[method-assign]
    before = served.ledger.position
    try:
        with running(served.client.app) as base:
            # uvicorn sets up its loggers as it starts: listen from then on
            logging.getLogger("uvicorn.error").addHandler(handler)
            host, port = base.removeprefix("http://").split(":")
            for path in ("/api/v1/records", "/records/M1/accept"):
                with socket.create_connection((host, int(port)), timeout=30) as conn:
                    # A known token: the API reads the body of no other caller.
                    conn.sendall(
                        f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode()
                        + f"Authorization: Bearer {served.tokens['agent-1']}\r\n".encode()
                        + b"Content-Type: application/json\r\n"
                        b'Content-Length: 1000\r\n\r\n{"scope": "pro'
                    )
                    time.sleep(0.3)  # the server is reading the body when the client goes
                time.sleep(0.3)
            # and it still answers
            assert urllib.request.urlopen(f"{base}/openapi.json", timeout=30).status == 200
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert [r.getMessage() for r in errors] == []
    assert served.ledger.position == before


def test_a_program_s_path_with_a_slash_after_it_is_answered_in_json(served: Served) -> None:
    r = served.client.get("/openapi.json/")
    assert (r.status_code, r.headers["content-type"]) == (404, "application/json")
    assert error_of(r)["type"] == "NotFound"
    # and a path that merely begins like one is the console's (a page for people)
    for path in ("/openapi.jsonx", "/api/v1x"):
        r = served.client.get(path)
        assert r.status_code == 404
        assert r.headers["content-type"].startswith("text/html"), path


# -- isolation -----------------------------------------------------------------------------------


def _comparable(r: Any, record_id: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, headers (but the date) and body, with the asked-for id blanked out."""
    headers = sorted((k, v) for k, v in r.headers.items() if k != "date")
    return r.status_code, headers, r.content.replace(record_id.encode(), b"<ID>")


def test_a_hidden_record_answers_byte_for_byte_like_one_that_does_not_exist(
    served: Served,
) -> None:
    _seed(served)  # everything in proj-a, where the outsider holds no grant
    delivery = served.reviewer.get("/records/{record_id}", record_id="R1").json()["deliveries"][0]
    routes = [
        ("GET", "/records/{record_id}", None),
        ("GET", "/records/{record_id}/audit", None),
        ("GET", "/records/{record_id}/graph", None),
        ("POST", "/records/{record_id}/accept", {}),
        ("POST", "/records/{record_id}/reject", {"reason": "x"}),
        ("POST", "/records/{record_id}/revoke", {"reason": "x"}),
        ("POST", "/records/{record_id}/revalidate", {}),
    ]
    for method, template, body in routes:
        for hidden, absent in (("M1", "Q9"), ("R1", "Q8"), ("E1", "Q7")):
            seen = served.outsider.call(method, template, record_id=hidden, json=body)
            none = served.outsider.call(method, template, record_id=absent, json=body)
            assert seen.status_code == 404, (method, template, seen.text)
            assert _comparable(seen, hidden) == _comparable(none, absent), (method, template)
    hidden_delivery = served.outsider.post(
        "/deliveries/{delivery_id}/corrections",
        delivery_id=delivery["delivery_id"],
        json={"note": "x"},
    )
    fake = "d-" + "0" * (len(delivery["delivery_id"]) - 2)
    absent_delivery = served.outsider.post(
        "/deliveries/{delivery_id}/corrections", delivery_id=fake, json={"note": "x"}
    )
    assert _comparable(hidden_delivery, delivery["delivery_id"]) == _comparable(
        absent_delivery, fake
    )
    for template, params in (
        ("/records", {"scope": "proj-a"}),
        ("/read", {"scope": "proj-a", "claim_key": "api.retry_safe"}),
        ("/explain", {"scope": "proj-a", "claim_key": "api.retry_safe"}),
    ):
        seen = served.outsider.get(template, params=params)
        none = served.outsider.get(template, params={**params, "scope": "proj-z"})
        assert seen.status_code == 403
        assert _comparable(seen, "proj-a") == _comparable(none, "proj-z")
    served.reviewer.post("/records/{record_id}/revoke", record_id="E1", json={"reason": "x"})
    owed = served.outsider.get("/corrections")  # no 'deliver' anywhere: refused, revealing nothing
    assert owed.status_code == 403
    assert "proj-a" not in owed.text and "E1" not in owed.text


def test_a_record_resting_on_a_hidden_one_never_names_it(served: Served) -> None:
    _seed(served)
    served.agent.post(
        "/records",
        json={
            "scope": "proj-b",
            "claim_key": "derived",
            "value": 1,
            "kind": "inference",
            "parents": ["M1"],
            "id": "B1",
        },
    )
    served.reviewer.post("/records/{record_id}/accept", record_id="B1")
    served.reviewer.post("/records/{record_id}/revoke", record_id="E1", json={"reason": "secret"})
    answers = [
        served.outsider.get("/records/{record_id}", record_id="B1"),
        served.outsider.get("/records/{record_id}/graph", record_id="B1"),
        served.outsider.get("/records/{record_id}/graph", record_id="B1", params={"format": "dot"}),
        served.outsider.get("/records", params={"scope": "proj-b"}),
        served.outsider.get("/explain", params={"scope": "proj-b", "claim_key": "derived"}),
    ]
    for r in answers:
        assert r.status_code == 200, r.text
        for secret in ("M1", "E1", "R1", "api.retry_safe", "secret", "proj-a"):
            assert secret not in r.text, (r.request.url, secret)


# -- the contract itself ------------------------------------------------------------------------


def test_a_closed_ledger_is_a_documented_503_and_bodies_are_closed_schemas(
    served: Served,
) -> None:
    doc = served.client.get("/openapi.json").json()
    for path, ops in doc["paths"].items():
        if not path.startswith("/api/v1/"):
            continue  # /healthz answers 200 or 503 only (tests/test_serve_health.py)
        for method, op in ops.items():
            assert {"500", "503"} <= set(op["responses"]), (method, path)
            if "requestBody" in op:
                ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                schema = doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]
                assert schema["additionalProperties"] is False, (method, path)
    served.ledger.close()
    r = served.agent.get("/records/{record_id}", record_id="E1")  # checked against the document
    assert (r.status_code, error_of(r)["type"]) == (503, "ClosedLedgerError")
    # The message names the ledger without its URL (its host, database, schema or
    # file are the operator's, not every agent's, to know)
    assert error_of(r)["message"] == "the ledger is closed"
    assert served.ledger.url not in r.text
    r = served.agent.post("/records", json={"scope": "proj-a", "claim_key": "k", "value": 1})
    assert (r.status_code, error_of(r)["message"]) == (503, "the ledger is closed")


def test_the_openapi_document_is_valid_3_1_and_lists_every_route(served: Served) -> None:
    r = served.client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    validate(doc)  # raises on an invalid OpenAPI document
    assert doc["openapi"].startswith("3.1")
    documented = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    served_routes = {(m, "/api/v1" + p) for m, p, _ in api_module.ROUTES} | {("GET", "/healthz")}
    assert documented == served_routes
    spec_routes = {
        ("POST", "/records"),
        ("POST", "/evidence"),
        ("GET", "/records"),
        ("GET", "/records/{record_id}"),
        ("GET", "/records/{record_id}/audit"),
        ("GET", "/records/{record_id}/graph"),
        ("POST", "/records/{record_id}/accept"),
        ("POST", "/records/{record_id}/reject"),
        ("POST", "/records/{record_id}/revoke"),
        ("POST", "/records/{record_id}/revalidate"),
        ("POST", "/records/{record_id}/deliveries"),
        ("GET", "/records/{record_id}/deliveries"),  # a record lists its 100 latest
        ("GET", "/read"),
        ("GET", "/explain"),
        ("GET", "/corrections"),
        ("POST", "/deliveries/{delivery_id}/corrections"),
    }
    assert {(m, p) for m, p, _ in api_module.ROUTES} == spec_routes
    for ops in doc["paths"].values():
        for op in ops.values():
            assert op["summary"] and op["operationId"]


def test_every_ledger_error_class_has_one_status_in_the_table() -> None:
    import ledger.errors as errors

    classes = [
        c
        for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, errors.LedgerError)
    ]
    assert errors.LedgerError in STATUS
    for cls in classes:
        code = status_of(cls("x"))
        assert code in (401, 403, 404, 409, 410, 422, 500, 503), cls
    assert status_of(errors.SnapshotErasedError("x")) == 410  # the console's snapshot page
    assert status_of(errors.SelfApprovalError("x")) == 403
    assert status_of(errors.CycleError("x")) == 422
    assert status_of(errors.UnknownDeliveryError("x")) == 404


def test_no_secret_of_a_request_or_a_console_session_is_in_its_repr() -> None:
    from starlette.datastructures import QueryParams

    from ledger.serve.sessions import SessionStore

    with Ledger.open("memory:") as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["read"])
        token = admin.issue_token("agent-1")
        call = api_module.Call(led, token, {}, QueryParams(""), {})
        store = SessionStore()
        session = store.sign_in(store.new(), token, "agent-1")

        shown = repr(call), repr(session)

    for text in shown:
        assert token not in text
    assert session.sid not in shown[1] and session.csrf not in shown[1]
    assert "agent-1" in shown[1]  # what is not secret is still shown
