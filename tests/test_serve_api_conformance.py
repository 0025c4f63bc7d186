"""The JSON API of ``provledger serve`` against its own OpenAPI document.

The document is the contract a client validates against: a value it allows must
not be refused as bad input of that field, a value it refuses must be refused
(422 naming the field), a query parameter left blank is not one left out, and
every answer of the routes' happy paths matches its schema with formats checked.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from openapi_schema_validator import OAS31Validator, oas31_format_checker
from starlette.testclient import TestClient

from ledger import Kind, Ledger, LedgerError
from ledger.serve import create_app
from ledger.serve.openapi_schemas import CLAIM_KEY, FORMAT
from ledger.validation import check_text
from tests.conftest import Clock
from tests.serve_support import DOC, PREFIX, Api, error_of

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@dataclass
class Served:
    """A ledger behind the ASGI app: an agent (propose, read in proj-a; read in
    proj-b) and a reviewer (approve, read, audit, deliver in proj-a)."""

    ledger: Ledger
    agent: Api
    reviewer: Api
    tokens: dict[str, str]


@pytest.fixture
def served(ledger: Ledger, clock: Clock) -> Iterator[Served]:
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("agent-1", scope="proj-b", roles=["read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
    tokens = {name: admin.issue_token(name) for name in ("agent-1", "reviewer")}
    app = create_app(ledger, mcp_factory=None, max_body_bytes=64 * 1024)
    with TestClient(app) as client:
        yield Served(
            ledger=ledger,
            agent=Api(client, tokens["agent-1"]),
            reviewer=Api(client, tokens["reviewer"]),
            tokens=tokens,
        )


def _seed(s: Served) -> str:
    """E1 (evidence) → M1 (inference) → R1 (report), accepted in proj-a; R1 delivered.
    Returns the delivery's id."""
    agent = s.ledger.authenticate(s.tokens["agent-1"])
    reviewer = s.ledger.authenticate(s.tokens["reviewer"])
    reviewer.accept(agent.capture("proj-a", "https://x.test/doc", b"retries are safe", id="E1"))
    reviewer.accept(
        agent.propose("proj-a", "api.retry_safe", True, Kind.INFERENCE, parents=["E1"], id="M1")
    )
    reviewer.accept(
        agent.propose("proj-a", "report.weekly", "on", Kind.REPORT, parents=["M1"], id="R1")
    )
    return reviewer.deliver("R1", recipient="ops@x.test")


# -- a query parameter left blank ----------------------------------------------------------


def test_an_empty_query_parameter_is_422_naming_it_not_read_as_left_out(served: Served) -> None:
    # `as_of_time=` answered as of now, `status=` listed every status, `format=` drew
    # JSON: a client whose variable was empty got an answer to another question.
    _seed(served)
    page = {"scope": "proj-a"}
    claim = {"scope": "proj-a", "claim_key": "api.retry_safe"}
    cases: list[tuple[str, dict[str, str], str, dict[str, str]]] = [
        ("/records", page, "as_of_time", {}),
        ("/records", page, "as_of_position", {}),
        ("/records", page, "status", {}),
        ("/records", page, "validity", {}),
        ("/records", page, "kind", {}),
        ("/records", page, "limit", {}),
        ("/records", page, "after", {}),
        ("/records/{record_id}", {}, "as_of_time", {"record_id": "M1"}),
        ("/records/{record_id}/graph", {}, "format", {"record_id": "M1"}),
        ("/records/{record_id}/graph", {}, "ancestors", {"record_id": "M1"}),
        ("/read", claim, "at", {}),
        ("/read", claim, "context", {}),
        ("/read", claim, "kinds", {}),
        ("/explain", claim, "limit", {}),
        ("/corrections", {}, "record_id", {}),
        ("/records", {}, "scope", {}),
        ("/read", {"scope": "proj-a"}, "claim_key", {}),
    ]
    for template, params, name, path in cases:
        r = served.reviewer.get(template, params={**params, name: ""}, **path)
        assert r.status_code == 422, (template, name, r.text)
        assert error_of(r)["field"] == name, (template, name, r.text)
        assert "is empty" in error_of(r)["message"]
    # An empty claim prefix is the prefix of every claim: what leaving it out means.
    every = served.agent.get("/records", params={"scope": "proj-a", "claim_prefix": ""})
    assert [x["id"] for x in every.json()["records"]] == ["E1", "M1", "R1"]


def test_a_kinds_list_with_an_empty_item_is_422(served: Served) -> None:
    _seed(served)
    claim = {"scope": "proj-a", "claim_key": "api.retry_safe"}
    for kinds in ("inference,", ",inference", "inference,,fact"):
        r = served.agent.get("/read", params={**claim, "kinds": kinds})
        assert (r.status_code, error_of(r)["field"]) == (422, "kinds"), kinds
        assert error_of(r)["message"].startswith("kind '' is not one of: ")
    found = served.agent.get("/read", params={**claim, "kinds": "inference, fact"})
    assert found.json()["outcome"] == "FOUND"


def test_a_date_time_with_a_lower_case_t_or_z_is_read_as_rfc_3339_allows(
    served: Served,
) -> None:
    _seed(served)
    claim = {"scope": "proj-a", "claim_key": "api.retry_safe"}
    upper = served.agent.get("/read", params={**claim, "at": "2026-01-02T00:00:00Z"})
    lower = served.agent.get("/read", params={**claim, "at": "2026-01-02t00:00:00z"})
    assert lower.status_code == 200, lower.text
    assert lower.json() == upper.json()
    assert lower.json()["at"] == "2026-01-02T00:00:00+00:00"


# -- the document refuses what the server refuses, and nothing else ----------------------


def _validator(schema: Mapping[str, Any]) -> OAS31Validator:
    return OAS31Validator(
        {**schema, "components": DOC["components"]}, format_checker=oas31_format_checker
    )


def _body_schema(method: str, template: str) -> Mapping[str, Any]:
    op = DOC["paths"][PREFIX + template][method.lower()]
    schema: Mapping[str, Any] = op["requestBody"]["content"]["application/json"]["schema"]
    return schema


def _param_schema(template: str, name: str, method: str = "get") -> Mapping[str, Any]:
    for param in DOC["paths"][PREFIX + template][method]["parameters"]:
        if param["name"] == name:
            schema: Mapping[str, Any] = param["schema"]
            return schema
    raise AssertionError(f"{template} has no parameter {name}")


_IDS = ["proj-b", "a", "a.b:c-d_e", "x" * 128, "", "-a", ".a", "a b", "a/b", "x" * 129, "é"]
_REFS = [*_IDS, "a@@proj-a", "a@@", "@@a", "a@@b@@c"]
_CLAIM_KEYS = [
    "k",
    "source:https://x.test/doc",
    "a b",
    "é" * 512,
    "a\ufeff",  # not whitespace to the ledger, but a format character: no new claim
    "\u200bk",
    "a\u200bb",  # inside a key, a format character is kept
    "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",  # a flag
    "",
    " ",
    " k",
    "k ",
    "k\u3000",
    "k\x85",
    "a\tb",
    "a\x01b",
    "a\x7f",
    "é" * 513,
]
_REASONS = ["why", "a\tb\nc", "r" * 1024, "", " ", "\t\n", "\u2003", "a\x00", "a\x1b", "r" * 1025]
_NOTES = ["", " ", "ok", "a\nb", "n" * 1024, "a\x1b", "a\x7f", "n" * 1025]
_PREFIXES = ["", "a", "a\tb", " ", "p" * 512, "a\x01", "a\x7f", "p" * 513]
_URIS = [
    "https://x.test/a",
    "u" * 2048,
    "",
    " ",
    " a",
    "a ",
    "a\u200b",
    "a\u200bb",
    "a\nb",
    "a\tb",
    "a\x01",
    "u" * 2049,
]
_BASE64 = ["YQ==", "YWI=", "YWJj", "", "YQ", "Y Q==", "!!!!", "YQ==YQ=="]
_RECIPIENTS = ["ops@x.test", "r" * 512, "", " ", "a\tb", "a\nb", "a\x01", "a\u2028b", "r" * 513]
_CHANNELS = ["email", "c" * 64, "", " ", "a\tb", "a\nb", "a\x7f", "c" * 65]

#: (method, template, path parameters, body without the field, field, values).
_BODY_PROBES: list[tuple[str, str, dict[str, str], dict[str, Any], str, list[Any]]] = [
    # In proj-b, where the agent may not propose: a value the ledger takes gets 403.
    ("POST", "/records", {}, {"claim_key": "k", "value": 1, "kind": "fact"}, "scope", _IDS),
    (
        "POST",
        "/records",
        {},
        {"scope": "proj-b", "value": 1, "kind": "fact"},
        "claim_key",
        _CLAIM_KEYS,
    ),
    (
        "POST",
        "/records",
        {},
        {"scope": "proj-b", "claim_key": "k", "value": 1},
        "kind",
        ["fact", "plan", "evidence", "guess", ""],
    ),
    (
        "POST",
        "/records",
        {},
        {"scope": "proj-b", "claim_key": "k", "value": 1, "kind": "fact"},
        "id",
        _IDS,
    ),
    (
        "POST",
        "/records",
        {},
        {"scope": "proj-b", "claim_key": "k", "value": 1, "kind": "fact"},
        "parents",
        [[v] for v in _REFS],
    ),
    # In proj-a, naming no record there: a value the ledger takes gets 404.
    (
        "POST",
        "/records",
        {},
        {"scope": "proj-a", "claim_key": "k", "value": 1, "kind": "fact"},
        "supersedes",
        _REFS,
    ),
    ("POST", "/evidence", {}, {"scope": "proj-b", "content": "c"}, "uri", _URIS),
    (
        "POST",
        "/evidence",
        {},
        {"scope": "proj-b", "uri": "u", "content": "c"},
        "claim_key",
        _CLAIM_KEYS,
    ),
    ("POST", "/evidence", {}, {"scope": "proj-b", "uri": "u"}, "content_base64", _BASE64),
    # On a record or delivery that does not exist: a value the ledger takes gets 404.
    ("POST", "/records/{record_id}/reject", {"record_id": "NOPE"}, {}, "reason", _REASONS),
    ("POST", "/records/{record_id}/revoke", {"record_id": "NOPE"}, {}, "reason", _REASONS),
    ("POST", "/records/{record_id}/accept", {"record_id": "NOPE"}, {}, "note", _NOTES),
    ("POST", "/records/{record_id}/revalidate", {"record_id": "NOPE"}, {}, "note", _NOTES),
    (
        "POST",
        "/records/{record_id}/revalidate",
        {"record_id": "NOPE"},
        {},
        "parents",
        [[v] for v in _REFS],
    ),
    (
        "POST",
        "/deliveries/{delivery_id}/corrections",
        {"delivery_id": "NOPE"},
        {},
        "note",
        _REASONS,
    ),
    (
        "POST",
        "/records/{record_id}/deliveries",
        {"record_id": "NOPE"},
        {},
        "recipient",
        _RECIPIENTS,
    ),
    (
        "POST",
        "/records/{record_id}/deliveries",
        {"record_id": "NOPE"},
        {"recipient": "r"},
        "channel",
        _CHANNELS,
    ),
    (
        "POST",
        "/deliveries/{delivery_id}/corrections",
        {"delivery_id": "DELIVERED"},  # R1's delivery (the replacement is checked after it)
        {"note": "n"},
        "replacement",
        _REFS,
    ),
]


def _refused_as_bad(response: httpx.Response, field: str) -> bool:
    return response.status_code == 422 and error_of(response)["field"] == field


def test_a_body_field_the_document_allows_is_never_refused_as_bad_input_of_that_field(
    served: Served,
) -> None:
    # Each probe alone is at fault or not; a client validating its request against
    # the document is refused for no value the document allows, and the document
    # allows no value the server refuses as that field's.
    delivery = _seed(served)
    before = served.ledger.position
    mismatches = []
    for method, template, path, base, field, values in _BODY_PROBES:
        validator = _validator(_body_schema(method, template))
        api = served.reviewer if "{" in template else served.agent
        path = {k: delivery if v == "DELIVERED" else v for k, v in path.items()}
        for value in values:
            body = {**base, field: value}
            r = api.call(method, template, json=body, **path)
            if validator.is_valid(body) == _refused_as_bad(r, field):
                mismatches.append((template, field, value, r.status_code, r.text[:160]))
    assert mismatches == [], "\n".join(map(repr, mismatches))
    assert served.ledger.position == before  # every probe was refused: nothing written


def test_exactly_one_of_content_and_content_base64_is_what_both_take(served: Served) -> None:
    validator = _validator(_body_schema("POST", "/evidence"))
    base = {"scope": "proj-b", "uri": "u"}
    for given in (
        {"content": "c"},
        {"content_base64": "YQ=="},
        {"content": None, "content_base64": "YQ=="},
        {"content": "c", "content_base64": None},
        {},
        {"content": None},
        {"content": "c", "content_base64": "YQ=="},
    ):
        body = {**base, **given}
        r = served.agent.post("/evidence", json=body)
        refused = r.status_code == 422 and error_of(r)["field"] in ("content", "content_base64")
        assert validator.is_valid(body) != refused, (given, r.text)


def test_a_path_or_query_value_the_document_allows_is_never_refused_as_bad_input(
    served: Served,
) -> None:
    _seed(served)
    mismatches = []
    probes: list[tuple[str, str, dict[str, str], list[str]]] = [
        ("/records/{record_id}", "record_id", {}, _REFS),
        ("/records/{record_id}/audit", "record_id", {}, _REFS),
        ("/records", "scope", {}, _IDS),
        ("/records", "after", {"scope": "proj-a"}, _REFS),
        ("/records", "claim_prefix", {"scope": "proj-a"}, _PREFIXES),
        ("/read", "scope", {"claim_key": "k"}, _IDS),
        ("/read", "claim_key", {"scope": "proj-a"}, _CLAIM_KEYS),
        ("/explain", "claim_key", {"scope": "proj-a"}, _CLAIM_KEYS),
        ("/corrections", "record_id", {}, _REFS),
    ]
    for template, name, params, values in probes:
        validator = _validator(_param_schema(template, name))
        for value in values:
            if "{" in template and (value == "" or "/" in value):
                continue  # a path parameter cannot be empty or hold a slash
            if name == "record_id" and "{" in template:
                r = served.reviewer.get(template, params=params, record_id=value)
            else:
                r = served.reviewer.get(template, params={**params, name: value})
            if validator.is_valid(value) == _refused_as_bad(r, name):
                mismatches.append((template, name, value, r.status_code, r.text[:160]))
    assert mismatches == [], "\n".join(map(repr, mismatches))


# -- every answer of the happy paths, formats checked ----------------------------------------


def test_every_operation_s_happy_path_answer_matches_its_schema_with_formats_checked(
    served: Served,
) -> None:
    # tests.serve_support checks every answer's schema, but not its formats (a
    # date-time without an offset would pass); this walks each operation once.
    delivery = _seed(served)
    answered: set[tuple[str, str]] = set()

    def call(api: Api, method: str, template: str, **kwargs: Any) -> httpx.Response:
        r = api.call(method, template, **kwargs)
        op = DOC["paths"][PREFIX + template][method.lower()]
        ok = next(code for code in op["responses"] if code.startswith("2"))
        assert str(r.status_code) == ok, (method, template, r.text)
        if r.headers["content-type"].startswith("application/json"):
            schema = op["responses"][ok]["content"]["application/json"]["schema"]
            _validator(schema).validate(r.json())
        answered.add((method, template))
        return r

    agent, reviewer = served.agent, served.reviewer
    call(agent, "POST", "/evidence", json={"scope": "proj-a", "uri": "u2", "content": "x"})
    new = {"scope": "proj-a", "claim_key": "api.limit", "value": {"per_minute": 60}}
    call(agent, "POST", "/records", json={**new, "kind": "fact", "id": "C1", "parents": ["E1"]})
    call(agent, "POST", "/records", json={**new, "kind": "fact", "id": "C2"})
    call(reviewer, "POST", "/records/{record_id}/accept", record_id="C1", json={"note": "ok"})
    delivered = {"recipient": "ops@x.test", "channel": "chat"}
    call(reviewer, "POST", "/records/{record_id}/deliveries", record_id="C1", json=delivered)
    call(reviewer, "POST", "/records/{record_id}/reject", record_id="C2", json={"reason": "no"})
    call(agent, "GET", "/records", params={"scope": "proj-a", "limit": "2"})
    call(agent, "GET", "/records/{record_id}", record_id="R1")
    call(agent, "GET", "/records/{record_id}/deliveries", record_id="C1", params={"limit": "1"})
    call(reviewer, "GET", "/records/{record_id}/audit", record_id="R1")
    for fmt in ("json", "dot", "mermaid"):
        call(agent, "GET", "/records/{record_id}/graph", record_id="M1", params={"format": fmt})
    call(agent, "GET", "/read", params={"scope": "proj-a", "claim_key": "api.limit"})
    call(agent, "GET", "/explain", params={"scope": "proj-a", "claim_key": "api.limit"})
    call(reviewer, "POST", "/records/{record_id}/revoke", record_id="E1", json={"reason": "gone"})
    call(reviewer, "GET", "/corrections")
    call(reviewer, "GET", "/corrections", params={"record_id": "R1"})
    call(
        reviewer,
        "POST",
        "/deliveries/{delivery_id}/corrections",
        delivery_id=delivery,
        json={"note": "withdrawn"},
    )
    call(
        agent,
        "POST",
        "/evidence",
        json={"scope": "proj-a", "uri": "u3", "content": "y", "id": "E3"},
    )
    call(reviewer, "POST", "/records/{record_id}/accept", record_id="E3")
    call(
        reviewer,
        "POST",
        "/records/{record_id}/revalidate",
        record_id="M1",
        json={"parents": ["E3"]},
    )
    documented = {
        (method.upper(), path.removeprefix(PREFIX))
        for path, ops in DOC["paths"].items()
        if path.startswith(PREFIX)  # /healthz: tests/test_serve_health.py
        for method in ops
    }
    assert answered == documented


def test_the_documents_format_characters_are_unicodes_category_cf() -> None:
    # The patterns of a new claim's key and a captured URI list them: what the
    # ledger refuses at either end (`unicodedata.category(ch) == "Cf"`)
    listed = re.compile(f"[{FORMAT}]")
    wrong = [
        f"U+{c:04X}"
        for c in range(0x110000)
        if (unicodedata.category(chr(c)) == "Cf") != bool(listed.fullmatch(chr(c)))
    ]
    assert wrong == [], f"FORMAT differs from unicodedata {unicodedata.unidata_version}"


def test_the_documents_one_line_texts_refuse_what_the_ledger_refuses() -> None:
    # Given every character of the first two planes in the middle of a claim key
    pattern = re.compile(str(CLAIM_KEY["pattern"]))

    def refused(text: str) -> bool:
        try:
            check_text(text, "claim_key", line=True)
        except LedgerError:
            return True
        return False

    # Then the document's pattern refuses exactly those the ledger refuses
    # (C0, DEL, and the line breaks NEL, U+2028 and U+2029 among them)
    differ = [
        f"U+{c:04X}"
        for c in range(0x20000)
        if not 0xD800 <= c <= 0xDFFF  # lone surrogates: refused by both, as not UTF-8
        and refused(f"a{chr(c)}b") == bool(pattern.fullmatch(f"a{chr(c)}b"))
    ]
    assert differ == []
    assert refused("a\u2028b") and refused("a\x85b")
