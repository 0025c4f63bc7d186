"""What the MCP tools' results cost a model's context, through the SDK's own client.

Each result leaves out what says nothing (a null field, a record's empty list or
object) and still fits the output schema the tool declares (the SDK's client
checks each result against it; these tests check it again with ``jsonschema``);
its text is the compact JSON of its structured content; a write tool does not
echo a large value back, and a read tool still returns every value whole.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import pytest
from mcp import Client

from ledger import Kind, Ledger, Session
from ledger.integrations.mcp import APPROVAL_TOOLS, TOOLS, build_server
from ledger.integrations.mcp.results import ECHOED_VALUE_BYTES
from ledger.integrations.mcp.server import INSTRUCTIONS

pytestmark = pytest.mark.anyio

SCOPE = "proj-a"
CLAIM = "api.orders.retry_safe"
#: A record's fields left out when empty: absent means none.
EMPTY_LEFT_OUT = ("parents", "observed", "conditions", "deliveries", "stale_causes", "undeclared")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Desk:
    """A ledger with an agent (propose, read), a reviewer (approve, read, audit) and
    a courier (deliver) in proj-a; every result a test's calls got, by tool."""

    ledger: Ledger
    tokens: dict[str, str]
    results: dict[str, list[tuple[dict[str, Any], str]]] = field(default_factory=dict)
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)

    def session(self, who: str) -> Session:
        return self.ledger.authenticate(self.tokens[who])

    @asynccontextmanager
    async def client(self, who: str) -> AsyncIterator[Client]:
        """A connection to ``who``'s server (a new run)."""
        async with Client(build_server(self.ledger, self.tokens[who])) as client:
            for tool in (await client.list_tools()).tools:
                assert tool.output_schema is not None
                self.schemas[tool.name] = tool.output_schema
            yield client

    async def call(self, client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
        """Call ``tool``; it must succeed (the client has checked its result against
        the tool's output schema); its structured result, kept with its text."""
        result = await client.call_tool(tool, arguments)
        assert not result.is_error, result.content
        data = result.structured_content
        assert data is not None
        text = result.content[0].text
        assert isinstance(text, str)
        self.results.setdefault(tool, []).append((data, text))
        return data


@pytest.fixture
def desk(ledger: Ledger) -> Desk:
    admin = ledger.admin()
    tokens = {}
    for who, roles in (
        ("agent-1", ["propose", "read"]),
        ("reviewer", ["approve", "read", "audit"]),
        ("courier", ["deliver", "read"]),
    ):
        admin.grant(who, scope=SCOPE, roles=roles)
        tokens[who] = admin.issue_token(who)
    return Desk(ledger=ledger, tokens=tokens)


def nulls(data: Any, path: str = "$") -> Iterator[str]:
    """Where in ``data`` a null is."""
    if data is None:
        yield path
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from nulls(value, f"{path}.{key}")
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from nulls(value, f"{path}[{i}]")


def records_in(data: Any) -> Iterator[dict[str, Any]]:
    """Every record (an object with a ``proposer``) anywhere in a result."""
    if isinstance(data, dict):
        if "proposer" in data:
            yield data
        for value in data.values():
            yield from records_in(value)
    elif isinstance(data, list):
        for value in data:
            yield from records_in(value)


def null_types(schema: Any, path: str = "#") -> Iterator[str]:
    """Where a JSON schema admits null."""
    if isinstance(schema, dict):
        if schema.get("type") == "null" or "null" in (schema.get("type") or []):
            yield path
        for key, value in schema.items():
            yield from null_types(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from null_types(value, f"{path}/{i}")


async def a_working_day(desk: Desk) -> None:
    """Every tool called at least once, on records with expiries, conditions,
    parents, observed reads, a delivery and its correction, a stale marking, a
    supersession, a revocation and revalidations."""
    courier = desk.session("courier")
    async with (
        desk.client("agent-1") as agent,
        desk.client("reviewer") as reviewer,
    ):
        call = desk.call
        page = {"scope": SCOPE, "uri": "https://docs.test/orders"}
        await call(agent, "capture_evidence", **page, content="POST /orders is idempotent", id="E1")
        await call(agent, "capture_evidence", **page, content="\x00 v2", id="E2")
        claim = {"scope": SCOPE, "claim_key": CLAIM}
        await call(agent, "read_memory", **claim)
        await call(
            agent,
            "propose_memory",
            **claim,
            value={"safe": True, "retries": [1, 2]},
            kind="inference",
            parents=["E1"],
            id="M1",
        )
        await call(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key="cfg.limits",
            value=3,
            kind="fact",
            conditions={"api_version": "v2"},
            expires="2099-01-01T00:00:00Z",
            id="C1",
        )
        for rid in ("E1", "M1", "C1"):
            await call(reviewer, "accept_memory", record_id=rid, note="checked")
        await call(agent, "read_memory", **claim)
        await call(
            agent, "read_memory", scope=SCOPE, claim_key="cfg.limits", context={"api_version": "v2"}
        )
        await call(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key="report.weekly",
            value="ok",
            kind="report",
            id="R1",
        )
        await call(reviewer, "accept_memory", record_id="R1")
        delivery = courier.deliver("R1", "ops@example.test")
        courier.issue_correction(delivery, "superseded by next week's")
        await call(agent, "get_record", record_id="R1")
        await call(agent, "read_evidence", record_id="E1")
        await call(agent, "read_evidence", record_id="E2")
        await call(agent, "explain_memory", **claim)
        await call(agent, "list_records", scope=SCOPE)
        await call(agent, "list_records", scope=SCOPE, limit=2)
        await call(reviewer, "revoke_memory", record_id="E1", reason="page changed")
        await call(agent, "explain_memory", **claim)
        await call(agent, "list_records", scope=SCOPE, status="STALE")
        await call(
            reviewer, "revalidate_memory", record_id="R1", note="still right", parents=["C1"]
        )
        await call(reviewer, "accept_memory", record_id="E2")
        await call(reviewer, "revalidate_memory", record_id="M1", parents=["E2"])
        await call(agent, "get_record", record_id="E1")  # shown revoked: no basis now
        await call(
            agent,
            "propose_memory",
            **claim,
            value={"safe": False},
            kind="inference",
            parents=["E2"],
            supersedes="M1",
            id="M2",
        )
        await call(reviewer, "accept_memory", record_id="M2")
        await call(
            agent, "propose_memory", scope=SCOPE, claim_key="x", value=1, kind="fact", id="X1"
        )
        await call(reviewer, "reject_memory", record_id="X1", reason="no basis")
        for rid in ("M1", "M2", "R1", "E1", "C1"):
            await call(reviewer, "audit_record", record_id=rid)
            await call(agent, "get_record", record_id=rid)


async def test_no_tool_result_holds_a_null_or_a_records_empty_field(desk: Desk) -> None:
    # Given a working day that calls every tool
    await a_working_day(desk)
    every = [fn.__name__ for fn, _, _ in TOOLS + APPROVAL_TOOLS]
    assert sorted(desk.results) == sorted(every)

    for tool, results in desk.results.items():
        for data, _ in results:
            # Then no result holds a null anywhere (no stored value here is null)
            assert list(nulls(data)) == [], (tool, list(nulls(data)))
            # and no record holds an empty list or object: absent means none
            for record in records_in(data):
                empty = [k for k in EMPTY_LEFT_OUT if k in record and not record[k]]
                assert empty == [], (tool, record["id"], empty)
    # and what is not empty is there: a delivery with its correction, a stale cause,
    # conditions, an expiry, observed reads
    r1 = desk.results["get_record"][0][0]
    assert r1["deliveries"][0]["corrections"][0]["note"] == "superseded by next week's"
    assert "replacement" not in r1["deliveries"][0]["corrections"][0]
    stale = desk.results["list_records"][2][0]["records"]
    m1 = next(d for d in stale if d["id"] == "M1")
    assert m1["stale_causes"][0]["cause"] == "E1" and "superseded_by" not in m1["stale_causes"][0]
    c1 = next(d for d, _ in desk.results["get_record"] if d["id"] == "C1")
    assert c1["conditions"] == {"api_version": "v2"} and c1["expires"].startswith("2099")
    assert desk.results["propose_memory"][-3][0]["record"]["observed"]


async def test_every_result_fits_its_tools_output_schema_which_admits_no_null(
    desk: Desk,
) -> None:
    await a_working_day(desk)
    for tool, results in desk.results.items():
        schema = desk.schemas[tool]
        # A field that can be left out is not required, and none is typed null
        assert list(null_types(schema)) == [], (tool, list(null_types(schema)))
        for data, text in results:
            jsonschema.validate(data, schema)
            # and the text a model is handed is the compact JSON of the result
            assert text == json.dumps(data, ensure_ascii=False, separators=(",", ":"))


async def test_a_stored_null_is_kept_as_the_value_and_in_what_was_proposed(desk: Desk) -> None:
    async with desk.client("agent-1") as agent, desk.client("reviewer") as reviewer:
        proposed = await desk.call(
            agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=None, kind="fact", id="N1"
        )
        nested = await desk.call(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key="n2",
            value={"a": None, "b": []},
            kind="fact",
            id="N2",
        )
        await desk.call(reviewer, "accept_memory", record_id="N1")
        found = await desk.call(agent, "read_memory", scope=SCOPE, claim_key=CLAIM)
        audit = await desk.call(reviewer, "audit_record", record_id="N1")
        missing = await desk.call(agent, "read_memory", scope=SCOPE, claim_key="n2")

    # A null value is a value: kept in the record, the read and the proposal's event
    assert proposed["record"]["value"] is None
    assert found["outcome"] == "FOUND" and found["value"] is None
    assert found["records"][0]["value"] is None
    assert audit["events"][0]["details"]["value"] is None
    # and a value's own nulls and empty lists are kept as stored
    assert nested["record"]["value"] == {"a": None, "b": []}
    # while a read that found nothing names no value at all
    assert missing["outcome"] == "MISSING" and "value" not in missing


async def test_a_revalidation_on_an_empty_basis_says_so_and_one_on_the_old_basis_does_not(
    desk: Desk,
) -> None:
    agent, reviewer = desk.session("agent-1"), desk.session("reviewer")
    agent.capture(SCOPE, uri="https://docs.test/a", content=b"a", id="E1")
    reviewer.accept("E1")
    agent.propose(SCOPE, "k", 1, Kind.FACT, parents=["E1"], id="F1")
    agent.propose(SCOPE, "j", 1, Kind.FACT, parents=["E1"], id="F2")
    reviewer.accept("F1")
    reviewer.accept("F2")
    agent.capture(SCOPE, uri="https://docs.test/a", content=b"b", id="E2")
    reviewer.accept("E2")  # E1 superseded: F1 and F2 stale
    reviewer.revalidate("F1", parents=[])
    async with desk.client("reviewer") as client:
        emptied = await desk.call(client, "audit_record", record_id="F1")
        await desk.call(client, "revalidate_memory", record_id="F2", parents=["E2"])
        rebased = await desk.call(client, "audit_record", record_id="F2")

    # [] is a new basis of nothing: it stays; no parents at all kept the old basis
    revalidated = [e for e in emptied["events"] if e["type"] == "Revalidated"]
    assert revalidated[0]["details"]["parents"] == []
    rebased_event = next(e for e in rebased["events"] if e["type"] == "Revalidated")
    assert rebased_event["details"]["parents"] == ["E2"]
    # and the proposal's own empty fields are left out, as a record's are
    proposed = emptied["events"][0]["details"]
    assert proposed["parents"] == ["E1"] and "conditions" not in proposed
    assert "supersedes" not in proposed and "evidence" not in proposed


async def test_a_write_answers_a_1_mb_value_by_its_size_and_hash_and_a_read_returns_it(
    desk: Desk,
) -> None:
    big = "x" * 1_000_000
    text = json.dumps(big, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    async with desk.client("agent-1") as agent, desk.client("reviewer") as reviewer:
        # When the agent proposes a 1 MB value
        proposal = await agent.call_tool(
            "propose_memory",
            {"scope": SCOPE, "claim_key": CLAIM, "value": big, "kind": "report", "id": "B1"},
        )
        # and captures evidence whose stated value is as large
        capture = await agent.call_tool(
            "capture_evidence",
            {
                "scope": SCOPE,
                "uri": "https://docs.test/b",
                "content": "b",
                "value": big,
                "id": "EB",
            },
        )
        # and a reviewer accepts and rejects such records
        accepted = await reviewer.call_tool("accept_memory", {"record_id": "B1"})
        rejected = await reviewer.call_tool("reject_memory", {"record_id": "EB", "reason": "no"})
        got = await desk.call(agent, "get_record", record_id="B1")
        read = await desk.call(agent, "read_memory", scope=SCOPE, claim_key=CLAIM)

    # Then each answer is small: the record as written, its value by size and hash
    for result in (proposal, capture, accepted, rejected):
        assert not result.is_error and result.structured_content is not None
        assert len(result.content[0].text) < 2000, result.content[0].text[:300]
        record = result.structured_content["record"]
        assert "value" not in record
        assert record["value_bytes"] == len(text.encode()) == 1_000_002
        assert record["value_sha256"] == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert proposal.structured_content is not None
    assert proposal.structured_content["record"]["status"] == "CANDIDATE"
    assert proposal.structured_content["record"]["kind"] == "report"
    # while the read tools return the value whole
    assert got["value"] == big and "value_bytes" not in got
    assert read["value"] == big and read["records"][0]["value"] == big


async def test_a_write_echoes_a_value_of_at_most_1024_bytes_of_json(desk: Desk) -> None:
    # "é" is two bytes in UTF-8: the limit is in bytes, not characters
    fits = "é" * ((ECHOED_VALUE_BYTES - 2) // 2)
    over = fits + "x"
    async with desk.client("agent-1") as agent:
        echoed = await desk.call(
            agent, "propose_memory", scope=SCOPE, claim_key="a", value=fits, kind="fact"
        )
        digested = await desk.call(
            agent, "propose_memory", scope=SCOPE, claim_key="b", value=over, kind="fact"
        )
    assert len(json.dumps(fits, ensure_ascii=False).encode()) == ECHOED_VALUE_BYTES
    assert echoed["record"]["value"] == fits and "value_bytes" not in echoed["record"]
    assert "value" not in digested["record"]
    assert digested["record"]["value_bytes"] == ECHOED_VALUE_BYTES + 1


async def test_a_default_page_of_small_facts_costs_a_few_hundred_characters_a_record(
    desk: Desk,
) -> None:
    agent = desk.session("agent-1")
    agent.propose_many(
        {"scope": SCOPE, "claim_key": f"svc.{i}.enabled", "value": True, "kind": Kind.FACT}
        for i in range(100)
    )
    async with desk.client("agent-1") as client:
        page = await desk.call(client, "list_records", scope=SCOPE)
    text = desk.results["list_records"][0][1]
    # 100 records, each what a model needs of it, and no padding: about 240 each
    assert len(page["records"]) == 100 and "next_after" not in page
    assert len(text) < 100 * 300, len(text)
    assert set(page["records"][0]) == {
        *("id", "scope", "claim_key", "kind", "value", "status", "validity"),
        *("proposer", "created_at", "position"),
    }


async def test_the_instructions_and_schemas_give_the_echo_limit_as_its_value(
    desk: Desk,
) -> None:
    async with desk.client("agent-1") as agent:
        await desk.call(agent, "list_records", scope=SCOPE)
    written = desk.schemas["propose_memory"]["$defs"]["WrittenOut"]
    assert f"longer than {ECHOED_VALUE_BYTES} bytes" in " ".join(written["description"].split())
    assert (
        f"longer than {ECHOED_VALUE_BYTES} bytes" in written["properties"]["value"]["description"]
    )
    assert f"than {ECHOED_VALUE_BYTES} bytes of JSON" in INSTRUCTIONS
    page = " ".join(desk.schemas["list_records"]["description"].split())
    assert "absent on the last page" in page


def _delivered(desk: Desk, times: int) -> Session:
    """R1, a report accepted and delivered ``times`` times (to c0@…, c1@…); the agent."""
    agent, courier = desk.session("agent-1"), desk.session("courier")
    agent.propose(
        scope=SCOPE, claim_key=CLAIM, value=1, kind=Kind.REPORT, id="R1",
        accepted_by=desk.session("reviewer"),
    )  # fmt: skip
    for n in range(times):
        courier.deliver("R1", recipient=f"c{n}@example.com")
    return agent


async def test_an_audit_trail_comes_a_page_at_a_time(desk: Desk) -> None:
    # Given a report accepted and delivered 150 times: 152 events
    _delivered(desk, 150)
    # When the reviewer audits it, page after page
    pages = []
    async with desk.client("reviewer") as client:
        page = await desk.call(client, "audit_record", record_id="R1")
        pages.append(page)
        while "next_after" in page:
            page = await desk.call(client, "audit_record", record_id="R1", after=page["next_after"])
            pages.append(page)
        few = await desk.call(client, "audit_record", record_id="R1", limit=2)
    # Then the first 100 come first, the rest after, each once, in log order
    assert [len(p["events"]) for p in pages] == [100, 52]
    events = [e for p in pages for e in p["events"]]
    assert [e["type"] for e in events] == ["Proposed", "Accepted", *["Delivered"] * 150]
    assert [e["position"] for e in events] == sorted({e["position"] for e in events})
    assert pages[0]["next_after"] == events[99]["position"]
    assert [e["type"] for e in few["events"]] == ["Proposed", "Accepted"]
    assert few["next_after"] == events[1]["position"]


async def test_a_record_delivered_many_times_lists_its_most_recent_deliveries(
    desk: Desk,
) -> None:
    # Given a report accepted and delivered 25 times
    agent = _delivered(desk, 25)
    # When an agent reads it and gets it
    async with desk.client("agent-1") as agent_client:
        read = await desk.call(agent_client, "read_memory", scope=SCOPE, claim_key=CLAIM)
        got = await desk.call(agent_client, "get_record", record_id="R1")
        why = await desk.call(agent_client, "explain_memory", scope=SCOPE, claim_key=CLAIM)
        listed = await desk.call(agent_client, "list_records", scope=SCOPE)
    # Then each lists the 10 most recent deliveries, oldest of them first, and counts all
    explained = why["entries"][0]["record"]
    for record in (read["records"][0], got, explained, listed["records"][0]):
        assert record["deliveries_count"] == 25
        listed = [d["recipient"] for d in record["deliveries"]]
        assert listed == [f"c{n}@example.com" for n in range(15, 25)]
    # (the library's view keeps every one)
    assert len(agent.get("R1").deliveries) == 25
