"""No list an MCP tool returns grows without bound: ``read_memory`` and
``explain_memory`` list at most 100 usable records (and 4 MiB of JSON) however
many a claim has, the outcome still decided on all of them, ``omitted`` counting
the rest and a ``note`` naming the ``list_records`` call that pages through them.

Driven through the SDK's own client (``mcp.Client(server)``) on each backend of the
``ledger`` fixture; each answer is checked against the tool's output schema.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import jsonschema
import pytest
from mcp import Client

from ledger import Kind, Ledger, Session
from ledger.answers import MAX_ANSWER_BYTES
from ledger.domain import run_uuid
from ledger.integrations.mcp import build_server

pytestmark = pytest.mark.anyio

SCOPE = "proj-a"
CLAIM = "hot.claim"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Desk:
    """An agent (propose, read) and a reviewer (approve, read) in proj-a."""

    ledger: Ledger
    agent: Session
    reviewer: Session
    agent_token: str

    def accepted(self, count: int, value: Any, claim: str = CLAIM, prefix: str = "V") -> None:
        """``count`` accepted records of ``claim``; ``value(i)`` the value of the i-th."""
        for i in range(count):
            rid = self.agent.propose(
                scope=SCOPE,
                claim_key=claim,
                value=value(i),
                kind=Kind.FACT,
                id=f"{prefix}{i:04d}",
            )
            self.reviewer.accept(rid)

    @asynccontextmanager
    async def client(self) -> AsyncIterator[Client]:
        """A connection of the agent's own (a new run)."""
        async with Client(build_server(self.ledger, self.agent_token)) as client:
            yield client


@pytest.fixture
def desk(ledger: Ledger) -> Desk:
    admin = ledger.admin()
    admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read"])
    token = admin.issue_token("agent-1")
    return Desk(
        ledger=ledger,
        agent=ledger.authenticate(token),
        reviewer=ledger.authenticate(admin.issue_token("reviewer")),
        agent_token=token,
    )


async def answer(client: Client, tool: str, **arguments: Any) -> tuple[dict[str, Any], int]:
    """Call ``tool``; it must succeed and its result fit the tool's output schema;
    the result, and the bytes of the text a model reads."""
    schemas = {t.name: t.output_schema for t in (await client.list_tools()).tools}
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    data = result.structured_content
    assert data is not None
    jsonschema.validate(data, schemas[tool])
    text = result.content[0].text
    assert json.loads(text) == data
    return data, len(text.encode())


async def test_read_memory_lists_100_of_many_rivals_and_says_how_to_page_through_the_rest(
    desk: Desk,
) -> None:
    # Given 130 accepted records of one claim, each with its own value
    desk.accepted(130, lambda i: f"value {i}")
    async with desk.client() as client:
        # When the agent reads the claim
        read, _ = await answer(client, "read_memory", scope=SCOPE, claim_key=CLAIM)
        # and follows the note, paging through the claim's usable records
        paged: list[str] = []
        after = None
        while True:
            page, _ = await answer(
                client,
                "list_records",
                scope=SCOPE,
                claim_prefix=CLAIM,
                validity="VALID",
                after=after,
            )
            paged += [r["id"] for r in page["records"]]
            after = page.get("next_after")  # absent on the last page
            if after is None:
                break
        proposal, _ = await answer(
            client, "propose_memory", scope=SCOPE, claim_key="plan", value="p", kind="plan"
        )

    # Then the outcome counts all 130, and 100 of them are listed, the rest counted
    assert read["outcome"] == "CONFLICT" and "value" not in read
    assert [r["id"] for r in read["records"]] == [f"V{i:04d}" for i in range(100)]
    assert read["omitted"] == 30
    assert read["note"] == (
        "30 of the 130 usable records of this claim are not listed (the outcome counts them "
        "all, and all count as read; they hold 130 different values). list_records("
        "scope='proj-a', claim_prefix='hot.claim', validity='VALID') pages through them (it "
        "also lists keys that begin with it)."
    )
    # and that call pages through every one of them
    assert paged == [f"V{i:04d}" for i in range(130)]
    # and every usable record counts as read, listed or not: the outcome rests on them
    engine = desk.agent.caller.engine
    with engine.reading() as c:
        run = engine.load(c, run_uuid(f"agent-1/{proposal['run_id']}"))
    assert sorted(rid for rid, valid in run.reads.items() if valid) == paged


async def test_read_memory_lists_each_value_of_a_conflict_before_a_second_of_any(
    desk: Desk,
) -> None:
    # Given 120 accepted records agreeing, then one disagreeing, proposed last
    desk.accepted(120, lambda i: "same")
    desk.accepted(1, lambda i: "other", prefix="X")
    async with desk.client() as client:
        read, _ = await answer(client, "read_memory", scope=SCOPE, claim_key=CLAIM)

    # Then the CONFLICT lists the record that disagrees, with 99 of the others
    listed = [r["id"] for r in read["records"]]
    assert read["outcome"] == "CONFLICT"
    assert len(listed) == 100 and listed[-1] == "X0000"
    assert {r["value"] for r in read["records"]} == {"same", "other"}
    assert read["omitted"] == 21
    assert "they hold 2 different values" in read["note"]


async def test_read_memory_found_on_many_agreeing_records_lists_100_and_says_so(
    desk: Desk,
) -> None:
    desk.accepted(105, lambda i: {"limit": 50})
    async with desk.client() as client:
        read, _ = await answer(client, "read_memory", scope=SCOPE, claim_key=CLAIM)
        few, _ = await answer(client, "read_memory", scope=SCOPE, claim_key="no.such.claim")

    assert read["outcome"] == "FOUND" and read["value"] == {"limit": 50}
    assert len(read["records"]) == 100 and read["omitted"] == 5
    assert "different values" not in read["note"]
    # An answer that leaves nothing out says nothing of it
    assert few["outcome"] == "MISSING" and "omitted" not in few and "note" not in few


async def test_read_memory_stops_before_its_records_pass_4_mib(desk: Desk) -> None:
    # Given five accepted records of about 1 MB each (values the ledger takes)
    desk.accepted(5, lambda i: f"{i}" + "h" * 1_000_000)
    async with desk.client() as client:
        read, size = await answer(client, "read_memory", scope=SCOPE, claim_key=CLAIM)

    # Then as many as fit in 4 MiB are listed (the answer holds little else), the
    # rest counted; the outcome is decided on all five
    listed = [r["id"] for r in read["records"]]
    assert read["outcome"] == "CONFLICT"
    assert listed == ["V0000", "V0001", "V0002", "V0003"]
    assert read["omitted"] == 1
    assert size <= MAX_ANSWER_BYTES + 4096


async def test_explain_memory_bounds_the_usable_records_too_whatever_its_limit(
    desk: Desk,
) -> None:
    # Given 130 usable records, and 3 revoked ones
    desk.accepted(130, lambda i: i)
    desk.accepted(3, lambda i: -i, prefix="R")
    for i in range(3):
        desk.reviewer.revoke(f"R{i:04d}", reason="wrong")
    async with desk.client() as client:
        # When the agent asks for an explanation with a limit of 1
        one, _ = await answer(client, "explain_memory", scope=SCOPE, claim_key=CLAIM, limit=1)
        every, _ = await answer(client, "explain_memory", scope=SCOPE, claim_key=CLAIM)

    # Then 100 usable records are shown and one that is not; the rest are counted,
    # which of them are usable said apart, and the note says where to see each
    usable = [e["record"]["id"] for e in one["entries"] if e["usable"]]
    others = [e["record"]["id"] for e in one["entries"] if not e["usable"]]
    assert one["outcome"] == every["outcome"] == "CONFLICT"
    assert usable == [f"V{i:04d}" for i in range(100)] and others == ["R0002"]
    assert one["omitted"] == 30 + 2 and one["usable_omitted"] == 30
    assert one["note"].startswith("30 of the 130 usable records of this claim are not listed")
    assert "validity='VALID'" in one["note"]
    assert "2 more records of this claim, none of them usable, are not listed" in one["note"]
    # and without a limit every record that is not usable is shown beside them
    assert len(every["entries"]) == 103 and every["usable_omitted"] == 30
    assert every["omitted"] == 30


async def test_explain_memory_of_a_few_records_is_as_it_was(desk: Desk) -> None:
    desk.accepted(2, lambda i: i)
    async with desk.client() as client:
        explained, _ = await answer(client, "explain_memory", scope=SCOPE, claim_key=CLAIM)

    assert [e["record"]["id"] for e in explained["entries"]] == ["V0000", "V0001"]
    # (nothing left out: no count of it, no note)
    assert not {"omitted", "usable_omitted", "note"} & set(explained)
