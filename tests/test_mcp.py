"""The MCP server (``ledger.integrations.mcp``) through the SDK's own client.

In process, ``mcp.Client(server)`` talks to ``build_server(ledger, token)`` on each
backend of the ``ledger`` fixture: every tool, the role-dependent tool list, tool
errors for bad input and refusals (carrying the ``LedgerError``'s class and
message), one connection = one run (its reads observed on its proposals), scope
isolation, the record resource and its update notifications. One test spawns
``provledger mcp`` over stdio with the token in the environment.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import queue
import re
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged

from ledger import Kind, Ledger, Session
from ledger.domain import run_uuid
from ledger.errors import (
    AccessDeniedError,
    AuthenticationError,
    InvalidParentError,
    InvalidTransitionError,
    LedgerError,
    SelfApprovalError,
)
from ledger.graph import MAX_SERVED_NODES
from ledger.integrations.mcp import APPROVAL_TOOLS, TOOLS, build_server, record_uri
from ledger.integrations.mcp.results import USABLE_LISTED

from .conftest import raw_rows

pytestmark = pytest.mark.anyio

SCOPE = "proj-a"
OTHER = "proj-b"
CLAIM = "api.orders.retry_safe"
MEMORY_TOOLS = [
    "capture_evidence",
    "propose_memory",
    "read_memory",
    "explain_memory",
    "get_record",
    "list_records",
    "read_evidence",
    "audit_record",
]
APPROVALS = ["accept_memory", "reject_memory", "revoke_memory", "revalidate_memory"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Team:
    """A ledger with an agent (propose, read in proj-a), a reviewer (approve, read,
    audit in proj-a), a lead (propose, approve, read in proj-a), an outsider (propose,
    read in proj-b only); their tokens, sessions and MCP servers."""

    ledger: Ledger
    tokens: dict[str, str]
    sessions: dict[str, Session]
    servers: dict[str, MCPServer[Any]]

    @asynccontextmanager
    async def client(self, who: str) -> AsyncIterator[Client]:
        """A connection to ``who``'s server (a new one each time: a new run)."""
        async with Client(self.servers[who]) as client:
            yield client


@pytest.fixture
def team(ledger: Ledger) -> Team:
    admin = ledger.admin()
    grants = {
        "agent-1": (SCOPE, ["propose", "read"]),
        "reviewer": (SCOPE, ["approve", "read", "audit"]),
        "lead": (SCOPE, ["propose", "approve", "read"]),
        "outsider": (OTHER, ["propose", "read", "approve", "audit"]),
    }
    tokens = {}
    for subject, (scope, roles) in grants.items():
        admin.grant(subject, scope=scope, roles=roles)
        tokens[subject] = admin.issue_token(subject)
    return Team(
        ledger=ledger,
        tokens=tokens,
        sessions={who: ledger.authenticate(token) for who, token in tokens.items()},
        servers={who: build_server(ledger, token) for who, token in tokens.items()},
    )


async def ok(client: Client, tool: str, **arguments: Any) -> Any:
    """Call ``tool``; it must succeed; its structured result."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    """Call ``tool``; it must be a tool error; its text."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    text = result.content[0].text
    assert isinstance(text, str)
    return text


def refusal(exc: LedgerError) -> str:
    """What a tool error carries for ``exc``."""
    return f"{type(exc).__name__}: {exc}"


def records_state(ledger: Ledger) -> dict[str, Any]:
    """What the ledger holds besides runs: records by status, snapshots, deliveries."""
    stats = ledger.stats()
    return {k: stats[k] for k in ("records", "statuses", "snapshots", "deliveries")}


def library_refusal(call: Callable[[], object]) -> str:
    """The refusal the library itself gives for ``call``."""
    with pytest.raises(LedgerError) as info:
        call()
    return refusal(info.value)


async def accepted_evidence(team: Team, rid: str, content: str = "retries are safe") -> None:
    """The agent captures a document; the reviewer accepts it."""
    async with team.client("agent-1") as agent:
        await ok(
            agent,
            "capture_evidence",
            scope=SCOPE,
            uri=f"https://docs.test/{rid}",
            content=content,
            id=rid,
        )
    async with team.client("reviewer") as reviewer:
        await ok(reviewer, "accept_memory", record_id=rid)


# -- the tool list --------------------------------------------------------------------------


async def test_a_refusal_names_the_ledger_without_its_url_or_file(team: Team) -> None:
    # Given a connection, and the ledger closed under it (its URL names its file,
    # or its host, database and schema: the operator's to know, not every agent's)
    async with team.client("agent-1") as agent:
        team.ledger.close()
        # When the agent calls a tool
        text = await refused(agent, "get_record", record_id="M1")
    # Then the refusal says the ledger is closed, and not where it lives
    assert text == "Error executing tool get_record: ClosedLedgerError: the ledger is closed"
    assert team.ledger.url not in text


async def test_a_resource_read_refused_names_the_ledger_without_its_url(team: Team) -> None:
    async with team.client("agent-1") as agent:
        team.ledger.close()
        with pytest.raises(MCPError) as caught:
            await agent.read_resource(record_uri("M1"))
    assert str(caught.value) == "ClosedLedgerError: the ledger is closed"


async def test_a_token_repeated_in_a_tool_error_is_masked(team: Team) -> None:
    token = team.tokens["agent-1"]
    async with team.client("agent-1") as agent:
        text = await refused(agent, "get_record", record_id=token)
    assert token[:24] not in text
    assert "plt_…" in text


async def test_an_agent_token_gets_the_memory_tools_and_no_approval_tool(team: Team) -> None:
    async with team.client("agent-1") as agent:
        # When the agent's client lists the tools
        names = [t.name for t in (await agent.list_tools()).tools]

        # Then it has the memory tools and none of the approval tools,
        assert names == MEMORY_TOOLS
        # which cannot be called either
        text = await refused(agent, "accept_memory", record_id="E1")
        assert "accept_memory" in text


async def test_a_misspelt_tool_is_refused_naming_the_closest_and_every_tool_it_may_use(
    team: Team,
) -> None:
    async with team.client("agent-1") as agent:
        # When the model calls a tool that does not exist
        text = await refused(agent, "read_memry", scope=SCOPE, claim_key="k")
        nothing = await refused(agent, "zzz")

    # Then the refusal names the closest tool and lists those it may call (no
    # approval tool for an agent)
    assert text.startswith("Unknown tool: read_memry. Did you mean read_memory? ")
    assert text.endswith(f"The tools are: {', '.join(MEMORY_TOOLS)}.")
    assert "Did you mean" not in nothing and "The tools are: capture_evidence" in nothing


async def test_a_tool_name_echoed_in_a_refusal_is_cut_and_escaped(team: Team) -> None:
    async with team.client("agent-1") as agent:
        long = await refused(agent, "A" * 200_000)
        loose = await refused(agent, "x\n\u202eevil")
    assert len(long) < 1_000 and long.startswith("Unknown tool: 'AAAA")
    assert "\n" not in loose and "\u202e" not in loose and "\\u202e" in loose


async def test_a_token_holding_approve_also_gets_the_approval_tools(team: Team) -> None:
    async with team.client("reviewer") as reviewer:
        names = [t.name for t in (await reviewer.list_tools()).tools]
    assert names == MEMORY_TOOLS + APPROVALS


async def test_the_tool_list_follows_grants_made_and_withdrawn_while_the_server_runs(
    team: Team,
) -> None:
    admin = team.ledger.admin()
    async with team.client("agent-1") as agent:
        admin.grant("agent-1", "proj-c", ["approve"])
        names = [t.name for t in (await agent.list_tools()).tools]
        assert names == MEMORY_TOOLS + APPROVALS
        admin.revoke_grant("agent-1", "proj-c")
        names = [t.name for t in (await agent.list_tools()).tools]
        assert names == MEMORY_TOOLS


async def test_a_client_that_listed_the_tools_is_told_when_a_grant_changes_them(
    team: Team,
) -> None:
    admin = team.ledger.admin()
    server = team.servers["agent-1"]
    read = {"scope": SCOPE, "claim_key": CLAIM}
    # Given a client of the initialize handshake, its tools listed
    heard: list[Any] = []

    async def hear(message: Any) -> None:
        heard.append(message)

    async with Client(server, mode="legacy", message_handler=hear) as agent:
        caps = agent.server_capabilities
        assert caps is not None and caps.tools is not None and caps.tools.list_changed
        assert [t.name for t in (await agent.list_tools()).tools] == MEMORY_TOOLS
        # When a call is made with the grants unchanged, nothing is said
        await agent.call_tool("read_memory", read)
        assert heard == []
        # When approve is granted meanwhile, the next call tells it, once
        admin.grant("agent-1", "proj-c", ["approve"])
        await agent.call_tool("read_memory", read)
        await agent.call_tool("read_memory", read)
        changed = [m for m in heard if isinstance(m, types.ToolListChangedNotification)]
        assert len(changed) == 1, heard
        assert [t.name for t in (await agent.list_tools()).tools] == MEMORY_TOOLS + APPROVALS
    # A client of the later protocol, listening, hears it as an event
    admin.revoke_grant("agent-1", "proj-c")
    async with Client(server) as agent, agent.listen(tools_list_changed=True) as events:
        assert [t.name for t in (await agent.list_tools()).tools] == MEMORY_TOOLS
        admin.grant("agent-1", "proj-c", ["approve"])
        await agent.call_tool("read_memory", read)
        with anyio.fail_after(30):  # a guard against hanging, not a timing check
            event = await anext(aiter(events))
        assert isinstance(event, ToolsListChanged)
        assert [t.name for t in (await agent.list_tools()).tools] == MEMORY_TOOLS + APPROVALS


async def test_every_tool_is_described_for_a_model_with_schemas_and_annotations(
    team: Team,
) -> None:
    async with team.client("reviewer") as reviewer:
        tools = {t.name: t for t in (await reviewer.list_tools()).tools}

    for name, tool in tools.items():
        # Each tool has a description, an input schema with described arguments,
        # an output schema and annotations
        assert tool.description and len(tool.description) > 150, name
        properties = tool.input_schema["properties"]
        assert properties and all(p.get("description") for p in properties.values()), name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tool.annotations is not None and tool.annotations.open_world_hint is False
    # Reads are read-only; revoking and rejecting are destructive, accepting is not
    for name in (
        "read_memory",
        "explain_memory",
        "get_record",
        "list_records",
        "read_evidence",
        "audit_record",
    ):
        hints = tools[name].annotations
        assert hints is not None and hints.read_only_hint and hints.idempotent_hint
    for name, destructive in (
        ("capture_evidence", False),
        ("propose_memory", False),
        ("accept_memory", False),
        ("revalidate_memory", False),
        ("reject_memory", True),
        ("revoke_memory", True),
    ):
        hints = tools[name].annotations
        assert hints is not None and hints.read_only_hint is False, name
        assert hints.destructive_hint is destructive, name
    # The descriptions say what a model must know
    assert "CANDIDATE" in tools["propose_memory"].description
    assert "never" in tools["propose_memory"].description
    for outcome in ("FOUND", "MISSING", "CONFLICT"):
        assert outcome in tools["read_memory"].description
    # The library's argument names
    assert set(tools["propose_memory"].input_schema["properties"]) == {
        *("scope", "claim_key", "value", "kind", "parents", "expires", "conditions", "id"),
        "supersedes",
    }
    kind_schema = tools["propose_memory"].input_schema["properties"]["kind"]
    assert kind_schema["enum"] == [k.value for k in Kind if k is not Kind.EVIDENCE]
    assert [fn.__name__ for fn, _, _ in TOOLS] == MEMORY_TOOLS
    assert [fn.__name__ for fn, _, _ in APPROVAL_TOOLS] == APPROVALS


async def test_the_server_says_once_that_an_unanswered_write_may_be_written_and_how_to_retry(
    team: Team,
) -> None:
    # A call cancelled while it waits for the writers' lock is still written once the
    # lock frees (the write is not withdrawn): a model that retries must know. The
    # server's instructions say it once, not each writing tool's description.
    async with team.client("reviewer") as reviewer:
        instructions = reviewer.instructions or ""
        tools = {t.name: t for t in (await reviewer.list_tools()).tools}

    assert "answer did not arrive" in instructions
    assert "may still have been written" in instructions
    assert "your own `id`" in instructions
    assert "refused as a duplicate (DuplicateRecordError" in instructions
    assert "refused by the record's new status" in instructions
    for name, tool in tools.items():
        assert "answer did not arrive" not in (tool.description or ""), name
    # and the `id` of each proposing tool says what giving one is for
    for name in ("capture_evidence", "propose_memory"):
        described = tools[name].input_schema["properties"]["id"]["description"]
        assert "refused as a duplicate (DuplicateRecordError)" in described, name


async def test_a_result_reaches_the_model_as_compact_json_text_equal_to_the_structured_one(
    team: Team,
) -> None:
    async with team.client("agent-1") as agent:
        # Given a record with text beyond ASCII
        proposal = {"scope": SCOPE, "claim_key": CLAIM, "value": "déjà vu", "kind": "fact"}
        await ok(agent, "propose_memory", **proposal, id="M1")
        # When a model lists it and reads it
        results = [
            await agent.call_tool("list_records", {"scope": SCOPE}),
            await agent.call_tool("get_record", {"record_id": "M1"}),
        ]

    for result in results:
        # Then the text a model reads is the structured result as JSON, without the
        # indentation that made a page of records half as long again
        assert not result.is_error and len(result.content) == 1
        text = result.content[0].text
        assert json.loads(text) == result.structured_content
        compact = json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))
        assert text == compact
        assert "déjà vu" in text


# -- the memory cycle -----------------------------------------------------------------------


async def test_a_proposal_reads_missing_until_a_reviewer_accepts_it_then_found(
    team: Team,
) -> None:
    async with team.client("agent-1") as agent, team.client("reviewer") as reviewer:
        # Given the agent proposes a fact
        proposal = await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value={"safe": True, "max": 3},
            kind="fact",
            id="M1",
        )
        assert proposal["id"] == "M1" and proposal["status"] == "CANDIDATE"
        assert "not memory yet" in proposal["note"]
        assert proposal["record"]["status"] == "CANDIDATE"

        # Then reading it is MISSING: a candidate is not memory
        missing = await ok(agent, "read_memory", scope=SCOPE, claim_key=CLAIM)
        assert missing["outcome"] == "MISSING" and missing["records"] == []
        assert "value" not in missing  # a read names a value only when FOUND

        # When the reviewer accepts it through its own server
        decision = await ok(reviewer, "accept_memory", record_id="M1", note="checked")
        assert decision["action"] == "accepted"
        assert decision["record"]["status"] == "ACCEPTED"

        # Then the agent reads it FOUND, with its value as stored
        found = await ok(agent, "read_memory", scope=SCOPE, claim_key=CLAIM)
        assert found["outcome"] == "FOUND"
        assert found["value"] == {"safe": True, "max": 3}
        assert [r["id"] for r in found["records"]] == ["M1"]
    assert team.sessions["agent-1"].get("M1").value == {"safe": True, "max": 3}


async def test_two_accepted_values_for_one_claim_read_as_a_conflict(team: Team) -> None:
    async with team.client("agent-1") as agent, team.client("reviewer") as reviewer:
        for rid, value in (("M1", True), ("M2", False)):
            await ok(
                agent,
                "propose_memory",
                scope=SCOPE,
                claim_key=CLAIM,
                value=value,
                kind="fact",
                id=rid,
            )
            await ok(reviewer, "accept_memory", record_id=rid)

        conflict = await ok(agent, "read_memory", scope=SCOPE, claim_key=CLAIM)

    assert conflict["outcome"] == "CONFLICT"
    assert sorted(r["id"] for r in conflict["records"]) == ["M1", "M2"]


async def test_captured_evidence_is_pinned_to_its_bytes_and_can_be_a_parent(
    team: Team,
) -> None:
    raw = b"\x00\xffretries are safe"
    async with team.client("agent-1") as agent:
        # When the agent captures text and binary content
        text = await ok(
            agent,
            "capture_evidence",
            scope=SCOPE,
            uri="https://docs.test/retries",
            content="retries are safe",
            id="E1",
            fetched_at="2026-01-01T11:00:00+00:00",
        )
        binary = await ok(
            agent,
            "capture_evidence",
            scope=SCOPE,
            uri="https://docs.test/blob",
            content=base64.b64encode(raw).decode(),
            content_encoding="base64",
            id="E2",
        )
        # and proposes a claim resting on the first
        claim = await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=True,
            kind="inference",
            parents=["E1"],
            id="M1",
        )

    # Then each evidence record names the exact bytes read, and when
    evidence = text["record"]["evidence"]
    assert evidence["content_hash"] == "sha256:" + hashlib.sha256(b"retries are safe").hexdigest()
    assert evidence["fetched_at"] == "2026-01-01T11:00:00+00:00"
    assert text["record"]["claim_key"] == "source:https://docs.test/retries"
    assert text["record"]["kind"] == "evidence" and text["status"] == "CANDIDATE"
    ref = binary["record"]["evidence"]["snapshot_ref"]
    assert team.sessions["agent-1"].snapshot(ref) == raw
    assert claim["record"]["parents"] == ["E1"]


async def test_a_uri_too_long_for_the_default_claim_key_is_refused_naming_the_uri(
    team: Team,
) -> None:
    # The default claim key is 'source:<uri>': a uri of 506 characters (within its
    # own limit of 2048) makes one of 513, over the claim key's 512. The refusal
    # names the uri, which the model sent, not a claim_key it never sent.
    uri = "https://docs.test/" + "p" * 488
    before = records_state(team.ledger)
    async with team.client("agent-1") as agent:
        text = await refused(agent, "capture_evidence", scope=SCOPE, uri=uri, content="x")
        assert records_state(team.ledger) == before
        # With a claim key of its own, or a uri one character shorter, it is captured
        keyed = await ok(
            agent, "capture_evidence", scope=SCOPE, uri=uri, content="x", claim_key="docs.page"
        )
        shorter = await ok(agent, "capture_evidence", scope=SCOPE, uri=uri[:-1], content="x")

    assert text == (
        "Error executing tool capture_evidence: ValueTooLargeError: uri is 506 characters: "
        "the default claim key 'source:<uri>' is 513 characters; the limit is 512; give a "
        "claim_key (or a shorter uri)"
    )
    assert text == "Error executing tool capture_evidence: " + library_refusal(
        lambda: team.sessions["agent-1"].capture(scope=SCOPE, uri=uri, content=b"x")
    )
    assert keyed["record"]["evidence"]["uri"] == uri
    assert len(shorter["record"]["claim_key"]) == 512


async def test_explain_memory_says_why_each_record_is_not_usable(team: Team) -> None:
    async with team.client("agent-1") as agent, team.client("reviewer") as reviewer:
        await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=True,
            kind="fact",
            id="M1",
        )
        await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=False,
            kind="fact",
            id="M2",
            conditions={"api_version": "v2"},
        )
        await ok(reviewer, "accept_memory", record_id="M2")
        await ok(reviewer, "reject_memory", record_id="M1", reason="no basis")

        # When the agent asks why, without and with a matching context
        without = await ok(agent, "explain_memory", scope=SCOPE, claim_key=CLAIM)
        matching = await ok(
            agent, "explain_memory", scope=SCOPE, claim_key=CLAIM, context={"api_version": "v2"}
        )

    # Then each record says why, and the matching context makes M2 usable
    reasons = {e["record"]["id"]: (e["usable"], e["reasons"]) for e in without["entries"]}
    assert without["outcome"] == "MISSING"
    assert reasons["M1"][0] is False and "no basis" in " ".join(reasons["M1"][1])
    assert reasons["M2"][0] is False and "api_version" in " ".join(reasons["M2"][1])
    assert matching["outcome"] == "FOUND"


async def test_explain_memory_shows_the_usable_records_and_at_most_limit_others(
    team: Team,
) -> None:
    agent, reviewer = team.sessions["agent-1"], team.sessions["reviewer"]
    agent.propose(scope=SCOPE, claim_key=CLAIM, value=True, kind=Kind.FACT, id="M1")
    reviewer.accept("M1")
    agent.propose(scope=SCOPE, claim_key=CLAIM, value=False, kind=Kind.FACT, id="M2")
    reviewer.accept("M2")
    reviewer.revoke("M2", reason="contradicted by the docs")
    # Given another proposer put 120 candidates under the claim
    team.sessions["lead"].propose_many(
        [
            {"scope": SCOPE, "claim_key": CLAIM, "value": i, "kind": "fact", "id": f"J{i:03d}"}
            for i in range(120)
        ]
    )
    async with team.client("agent-1") as client:
        # When the agent asks why, as it comes, and with a limit of 3
        default = await ok(client, "explain_memory", scope=SCOPE, claim_key=CLAIM)
        three = await ok(client, "explain_memory", scope=SCOPE, claim_key=CLAIM, limit=3)
        zero = await refused(client, "explain_memory", scope=SCOPE, claim_key=CLAIM, limit=0)
        proposal = await ok(
            client, "propose_memory", scope=SCOPE, claim_key="api.next", value=1, kind="plan"
        )

    # Then the answer holds the usable record and 100 others, the revoked one first
    # among them, and counts the rest
    assert default["outcome"] == three["outcome"] == "FOUND"
    assert len(default["entries"]) == 101
    assert default["omitted"] == 21
    assert "M2" in [e["record"]["id"] for e in default["entries"]]
    assert "21 more records of this claim, none of them usable" in default["note"]
    assert "larger `limit` (at most 1000)" in default["note"]
    # and with a limit of 3: M1, the revoked M2, and the two newest candidates
    assert [e["record"]["id"] for e in three["entries"]] == ["M1", "M2", "J118", "J119"]
    assert three["omitted"] == 118
    assert "limit" in zero and "greater than or equal to 1" in zero
    # and the connection's run recorded as read only what it was shown: M1, and the
    # 100 others, M2 and the 99 newest candidates (the second answer showed no more)
    engine = team.sessions["agent-1"].caller.engine
    with engine.reading() as c:
        run = engine.load(c, run_uuid(f"agent-1/{proposal['run_id']}"))
    assert sorted(run.reads) == [*(f"J{i:03d}" for i in range(21, 120)), "M1", "M2"]


async def test_explain_memory_says_it_picks_by_recency_and_shows_in_proposal_order(
    team: Team,
) -> None:
    # Given three accepted records revoked in another order than proposed: M3, M1, M2
    agent, reviewer = team.sessions["agent-1"], team.sessions["reviewer"]
    for name in ("M1", "M2", "M3"):
        agent.propose(scope=SCOPE, claim_key=CLAIM, value=name, kind=Kind.FACT, id=name)
        reviewer.accept(name)
    for name in ("M3", "M1", "M2"):
        reviewer.revoke(name, reason="wrong")
    async with team.client("agent-1") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        # When it is explained with a limit of 2
        two = await ok(client, "explain_memory", scope=SCOPE, claim_key=CLAIM, limit=2)

    # Then the two most recently changed are picked (M2, M1) and shown in proposal order
    assert [e["record"]["id"] for e in two["entries"]] == ["M1", "M2"]
    assert two["omitted"] == 1
    # as the tool's description and its `limit` say (not "the most recently changed first")
    explain = tools["explain_memory"]
    limit = explain.input_schema["properties"]["limit"]["description"]
    for text in (explain.description or "", limit):
        assert "each the most recently changed first" in text
        assert "in the order they were proposed" in text


async def test_get_record_and_audit_record_show_a_record_and_its_whole_history(
    team: Team,
) -> None:
    await accepted_evidence(team, "E1")
    async with team.client("agent-1") as agent, team.client("reviewer") as reviewer:
        await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=[1, "two", None],
            kind="inference",
            parents=["E1"],
            id="M1",
            expires="2026-06-01T00:00:00Z",
        )
        await ok(reviewer, "revoke_memory", record_id="E1", reason="doc changed")

        record = await ok(agent, "get_record", record_id="M1")
        trail = await ok(reviewer, "audit_record", record_id="E1")

    assert record["status"] == "STALE" and record["validity"] == "NEEDS_REVALIDATION"
    assert record["value"] == [1, "two", None]
    assert record["expires"] == "2026-06-01T00:00:00+00:00"
    assert record["cause"] == "E1" and record["proposer"] == "agent-1"
    assert [e["type"] for e in trail["events"]] == ["Proposed", "Accepted", "Revoked"]
    assert trail["events"][-1]["actor"] == "reviewer"
    assert trail["events"][-1]["details"]["reason"] == "doc changed"
    assert trail["record"]["status"] == "REVOKED"


async def test_list_records_pages_through_the_review_queue_and_what_needs_attention(
    team: Team,
) -> None:
    await accepted_evidence(team, "E1")
    async with team.client("agent-1") as agent, team.client("reviewer") as reviewer:
        for n in range(5):
            await ok(
                agent,
                "propose_memory",
                scope=SCOPE,
                claim_key=f"api.k{n}",
                value=n,
                kind="inference",
                parents=["E1"],
                id=f"M{n}",
            )
        await ok(reviewer, "accept_memory", record_id="M0")
        await ok(reviewer, "accept_memory", record_id="M1")

        # The review queue, two at a time, ordered by id
        first = await ok(agent, "list_records", scope=SCOPE, status="CANDIDATE", limit=2)
        second = await ok(
            agent,
            "list_records",
            scope=SCOPE,
            status="CANDIDATE",
            limit=2,
            after=first["next_after"],
        )
        assert [r["id"] for r in first["records"]] == ["M2", "M3"]
        assert first["next_after"] == "M3"
        assert [r["id"] for r in second["records"]] == ["M4"]
        assert "next_after" not in second  # the last page names no next one
        # A full page that nothing follows is the last one
        whole = await ok(agent, "list_records", scope=SCOPE, status="CANDIDATE", limit=3)
        assert [r["id"] for r in whole["records"]] == ["M2", "M3", "M4"]
        assert "next_after" not in whole

        # By kind and by key prefix
        evidence = await ok(agent, "list_records", scope=SCOPE, kind="evidence")
        assert [r["id"] for r in evidence["records"]] == ["E1"]
        prefixed = await ok(agent, "list_records", scope=SCOPE, claim_prefix="api.k3")
        assert [r["id"] for r in prefixed["records"]] == ["M3"]

        # After a revocation, what needs attention: everything resting on E1 (the
        # candidates included), not E1 itself (INVALID) nor an unrelated fact (VALID),
        # proposed outside this connection (which has been shown E1)
        team.sessions["agent-1"].propose(
            scope=SCOPE, claim_key="api.other", value=1, kind=Kind.FACT, id="M5"
        )
        await ok(reviewer, "accept_memory", record_id="M5")
        await ok(reviewer, "revoke_memory", record_id="E1", reason="doc changed")
        attention = await ok(agent, "list_records", scope=SCOPE, validity="NEEDS_REVALIDATION")
        stale = await ok(agent, "list_records", scope=SCOPE, status="STALE")
        assert [r["id"] for r in attention["records"]] == ["M0", "M1", "M2", "M3", "M4"]
        assert attention["records"] == stale["records"]
        assert {r["cause"] for r in stale["records"]} == {"E1"}


async def test_a_page_of_large_values_stops_before_4_mib_and_the_run_sees_only_it(
    team: Team,
) -> None:
    # Given six accepted records of about 0.9 MB each (the value limit is 1 MiB)
    big = "x" * 900_000
    for n in range(6):
        team.sessions["agent-1"].propose(
            scope=SCOPE, claim_key=f"big.k{n}", value=big, kind=Kind.FACT, id=f"B{n}"
        )
        team.sessions["reviewer"].accept(f"B{n}")
    async with team.client("agent-1") as agent:
        # When the agent asks for ten a page
        first = await ok(agent, "list_records", scope=SCOPE, limit=10)
        # Then the page stops before its JSON passes 4 MiB, and says where to go on
        assert [r["id"] for r in first["records"]] == ["B0", "B1", "B2", "B3"]
        assert first["next_after"] == "B3"
        proposal = await ok(
            agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=1, kind="fact"
        )
        rest = await ok(agent, "list_records", scope=SCOPE, limit=10, after="B3")
    assert [r["id"] for r in rest["records"]] == ["B4", "B5", proposal["id"]]
    assert "next_after" not in rest
    # And the run was shown only the records returned: they alone are observed
    assert proposal["record"]["observed"] == ["B0", "B1", "B2", "B3"]


async def test_an_explanation_keeps_its_unusable_records_under_4_mib(team: Team) -> None:
    # Given six candidates of about 0.9 MB each under a claim
    for n in range(6):
        team.sessions["agent-1"].propose(
            scope=SCOPE, claim_key="big.claim", value=f"{n}" + "x" * 900_000, kind=Kind.FACT
        )
    async with team.client("agent-1") as agent:
        # When the agent asks to see up to ten of them
        explained = await ok(agent, "explain_memory", scope=SCOPE, claim_key="big.claim", limit=10)
    # Then four are shown and two counted as left out, with how to see them
    assert len(explained["entries"]) == 4
    assert explained["omitted"] == 2
    assert "list_records" in explained["note"]


async def test_an_infinite_float_is_shown_as_the_string_inf_not_null(team: Team) -> None:
    # JSON has no infinity: shown as null, two different values would look alike.
    agent, reviewer = team.sessions["agent-1"], team.sessions["reviewer"]
    reviewer.accept(agent.propose(SCOPE, CLAIM, {"v": float("inf")}, Kind.FACT, id="H1"))
    reviewer.accept(agent.propose(SCOPE, CLAIM, {"v": None}, Kind.FACT, id="H2"))
    async with team.client("agent-1") as client:
        read = await ok(client, "read_memory", scope=SCOPE, claim_key=CLAIM)
        record = await ok(client, "get_record", record_id="H1")
    assert read["outcome"] == "CONFLICT"
    assert sorted(str(r["value"]) for r in read["records"]) == ["{'v': 'inf'}", "{'v': None}"]
    assert record["value"] == {"v": "inf"}


async def test_text_that_spells_json_is_stored_as_text_and_values_keep_their_type(
    team: Team,
) -> None:
    # "{}" is not {}: a value's type is part of it (the SDK alone would parse the text).
    texts = ["[1, 2]", "null", '{"retry": true}', "{}", "42", "true"]
    values: list[Any] = [*texts, [1, 2], None, {"retry": True}, {}]
    async with team.client("agent-1") as agent:
        ids = [
            (
                await ok(
                    agent, "propose_memory", scope=SCOPE, claim_key=f"v{i}", value=v, kind="fact"
                )
            )["id"]
            for i, v in enumerate(values)
        ]
        proposal = await ok(
            agent,
            "capture_evidence",
            scope=SCOPE,
            uri="https://x.test/v",
            content="c",
            value="[3]",
        )
    stored = [team.sessions["reviewer"].get(rid).value for rid in ids]
    assert stored == values
    assert team.sessions["reviewer"].get(proposal["id"]).value == "[3]"


async def test_text_arguments_that_spell_json_reach_the_library_as_that_text(team: Team) -> None:
    # The SDK reads text spelling JSON as that JSON unless an argument is typed
    # exactly `str`: an id or `after` of "null" would be no argument, '["a"]' a list.
    texts = ["null", "1", "true", '["a"]', '{"a":1}']
    agent_session = team.sessions["agent-1"]
    async with team.client("agent-1") as agent:
        # 1. Ids, the claim key of captured evidence and `supersedes` are kept as sent.
        for text in ["null", "1", "true"]:
            proposal = await ok(
                agent, "propose_memory", scope=SCOPE, claim_key=f"k.{text}", value=1,
                kind="fact", id=text,
            )  # fmt: skip
            assert proposal["id"] == text
        captured = []
        for i, text in enumerate(texts):
            evidence = await ok(
                agent, "capture_evidence", scope=SCOPE, uri=f"https://x.test/{i}",
                content=text, claim_key=text,
            )  # fmt: skip
            captured.append(evidence["id"])
        replacing = await ok(
            agent, "propose_memory", scope=SCOPE, claim_key="k.null", value=2, kind="fact",
            supersedes="null",
        )  # fmt: skip
        # 2. Text that is no id, status or instant is refused by the ledger, naming it.
        before = team.ledger.position
        bad_id = await refused(
            agent, "propose_memory", scope=SCOPE, claim_key="k", value=1, kind="fact",
            id='["a"]',
        )  # fmt: skip
        bad_status = await refused(agent, "list_records", scope=SCOPE, status="null")
        bad_at = await refused(agent, "read_memory", scope=SCOPE, claim_key="k", at="null")
        assert team.ledger.position == before
        # 3. Claim prefixes and `after` are the text sent: paging after "null" moves on.
        prefixed = {
            text: [r["claim_key"] for r in (await ok(
                agent, "list_records", scope=SCOPE, claim_prefix=text
            ))["records"]]
            for text in texts
        }  # fmt: skip
        page = await ok(agent, "list_records", scope=SCOPE, limit=2, after="null")
    assert [agent_session.get(rid).claim_key for rid in captured] == texts
    assert agent_session.get(replacing["id"]).supersedes == "null"
    assert bad_id.endswith(
        library_refusal(
            lambda: agent_session.propose(
                scope=SCOPE, claim_key="k", value=1, kind="fact", id='["a"]'
            )
        )
        + "; an id or a scope is 1 to 128 letters, digits, '.', '_', ':' or '-', starting "
        "with a letter or digit"
    )
    assert bad_status.endswith(library_refusal(lambda: agent_session.records(SCOPE, status="null")))
    assert "argument 'at' ('null'): " in bad_at
    assert prefixed["null"] == ["null"]
    assert prefixed['["a"]'] == ['["a"]']
    assert prefixed['{"a":1}'] == ['{"a":1}']
    expected = [r.id for r in agent_session.records(SCOPE, limit=2, after="null")]
    assert [r["id"] for r in page["records"]] == expected
    assert expected and expected[0] > "null"


async def test_an_argument_a_tool_does_not_take_is_refused_naming_it(team: Team) -> None:
    # The SDK would drop it: a misspelt `parents` would lose the provenance silently.
    await accepted_evidence(team, "E1")
    before = team.ledger.position
    async with team.client("agent-1") as agent:
        tools = await agent.list_tools()
        text = await refused(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=1,
            kind="inference",
            parent=["E1"],
            id="M1",
        )
    assert all(t.input_schema["additionalProperties"] is False for t in tools.tools)
    assert text.startswith(
        "Error executing tool propose_memory: InvalidInputError: propose_memory takes no "
        "argument 'parent'; "
    )
    assert "parents" in text
    assert team.ledger.position == before


async def test_null_for_an_optional_argument_is_that_argument_not_given(team: Team) -> None:
    # As the HTTP API reads an optional body field given null: a client that sends
    # every argument, null for those it has no value for, is not refused.
    async with team.client("reviewer") as reviewer:
        tools = {t.name: t for t in (await reviewer.list_tools()).tools}
    for name, tool in tools.items():
        required = set(tool.input_schema.get("required", ()))
        for argument, schema in tool.input_schema["properties"].items():
            # A schema of no type (`value`: any JSON value) admits null too
            untyped = "type" not in schema and "anyOf" not in schema
            admits_null = untyped or {"type": "null"} in schema.get("anyOf", ())
            optional = argument not in required
            assert admits_null is (optional or untyped), (name, argument, schema)
    assert tools["list_records"].input_schema["properties"]["limit"]["default"] == 100

    await accepted_evidence(team, "E1")
    async with team.client("agent-1") as agent, team.client("reviewer") as reviewer:
        nulls = {"expires": None, "conditions": None, "supersedes": None}
        propose = {"scope": SCOPE, "value": True, "kind": "inference", "parents": ["E1"]}
        await ok(agent, "propose_memory", **propose, claim_key=CLAIM, id="M1", **nulls)
        report = {**propose, "kind": "report", "parents": ["M1"]}
        await ok(agent, "propose_memory", **report, claim_key="weekly", id="R1", **nulls)
        captured = await ok(
            agent, "capture_evidence", scope=SCOPE, uri="https://docs.test/n", content="é",
            content_encoding=None, fetched_at=None, claim_key=None, id=None, value=None,
        )  # fmt: skip
        digest = "sha256:" + hashlib.sha256("é".encode()).hexdigest()
        assert captured["record"]["evidence"]["content_hash"] == digest
        accepted = await ok(reviewer, "accept_memory", record_id="M1", note=None)
        assert accepted["record"]["status"] == "ACCEPTED"
        await ok(reviewer, "accept_memory", record_id="R1", note=None)
        await ok(reviewer, "revoke_memory", record_id="E1", reason="doc changed")
        await accepted_evidence(team, "E2")
        revalidated = await ok(
            reviewer, "revalidate_memory", record_id="M1", note=None, parents=["E2"]
        )
        assert revalidated["record"]["status"] == "ACCEPTED"
        # Without a new basis: R1 rests on M1, usable again
        again = await ok(reviewer, "revalidate_memory", record_id="R1", note=None, parents=None)
        assert again["record"]["status"] == "ACCEPTED"
        page = await ok(
            agent, "list_records", scope=SCOPE, status=None, validity=None, kind=None,
            claim_prefix=None, limit=None, after=None,
        )  # fmt: skip
        assert page == await ok(agent, "list_records", scope=SCOPE)
        explained = await ok(
            agent, "explain_memory", scope=SCOPE, claim_key=CLAIM, at=None, context=None,
            kinds=None, limit=None,
        )  # fmt: skip
        assert [e["record"]["id"] for e in explained["entries"]] == ["M1"]
        read = await ok(
            agent, "read_memory", scope=SCOPE, claim_key=CLAIM, at=None, context=None, kinds=None
        )
        assert read["outcome"] == "FOUND"
        # A required argument stays required: null is no value for it.
        before = team.ledger.position
        assert (await refused(agent, "list_records", scope=None)).endswith(
            "argument 'scope' (None): Input should be a valid string"
        )
        assert (await refused(reviewer, "reject_memory", record_id="M1", reason=None)).endswith(
            "argument 'reason' (None): Input should be a valid string"
        )
        assert team.ledger.position == before
    # A null note is recorded as no note, as one not given is.
    events = team.sessions["reviewer"].audit("M1").events
    notes = [(e.type, e.details["note"]) for e in events if "note" in e.details]
    assert notes == [("Accepted", ""), ("Revalidated", "")]


async def test_a_long_unknown_argument_or_place_is_echoed_cut_with_its_length(
    team: Team,
) -> None:
    # Every refusal cuts what it echoes: an argument's name is the client's text too.
    propose = {"scope": SCOPE, "claim_key": CLAIM, "value": 1, "kind": "fact"}
    long_name = "z" * 50000
    before = team.ledger.position
    async with team.client("agent-1") as agent:
        text = await refused(agent, "propose_memory", **propose, **{long_name: 1})
        many = await refused(agent, "propose_memory", **propose, **{f"x{i}": 1 for i in range(500)})
    assert text.startswith(
        "Error executing tool propose_memory: InvalidInputError: propose_memory takes no "
        f"argument {'z' * 160!r}… (50000 characters); its arguments are "
    )
    assert len(text) < 600
    assert "'x0', 'x1', 'x10', " in many and " and 480 more; its arguments are " in many
    assert len(many) < 800
    # Nor is the place of a number JSON cannot hold echoed whole (the arguments
    # handed to the server as read off the wire: see
    # test_an_infinite_number_in_an_argument_is_refused_naming_where).
    with pytest.raises(ToolError) as infinite:
        await team.servers["agent-1"].call_tool(
            "propose_memory", {**propose, "value": {long_name: float("nan")}}
        )
    assert str(infinite.value) == (
        "Error executing tool propose_memory: InvalidInputError: "
        f"{('value.' + 'z' * 154)!r}… (50006 characters) is not a finite number "
        "(Infinity and NaN are not JSON)"
    )
    assert team.ledger.position == before


async def test_read_evidence_gives_back_the_bytes_captured_checked_and_observed(
    team: Team,
) -> None:
    text = "retries are safe\r\n\u00e9t\u00e9 \u2014 v2"
    await accepted_evidence(team, "E1", content=text)
    binary = bytes(range(256))
    async with team.client("agent-1") as agent:
        await ok(
            agent,
            "capture_evidence",
            scope=SCOPE,
            uri="https://docs.test/blob",
            content=base64.b64encode(binary).decode(),
            content_encoding="base64",
            id="E2",
        )
    async with team.client("agent-1") as agent:
        got = await ok(agent, "read_evidence", record_id="E1")
        blob = await ok(agent, "read_evidence", record_id="E2")
        await ok(
            agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=True, kind="inference"
        )
        unknown = await refused(agent, "read_evidence", record_id="NEVER1")
    assert (got["content"], got["content_encoding"], got["size"]) == (
        text,
        "utf-8",
        len(text.encode()),
    )
    assert got["content_hash"] == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert got["uri"] == "https://docs.test/E1" and got["snapshot_ref"]
    assert blob["content_encoding"] == "base64"
    assert base64.b64decode(blob["content"]) == binary
    # The accepted evidence read is a basis of what the session proposed next
    proposal = team.sessions["reviewer"].records(SCOPE, claim_prefix=CLAIM)[0]
    assert proposal.observed == ("E1",)
    assert unknown.startswith("Error executing tool read_evidence: UnknownRecordError:")


async def test_read_evidence_refuses_a_record_pinning_no_bytes_and_erased_bytes(
    team: Team,
) -> None:
    await accepted_evidence(team, "E1")
    async with team.client("agent-1") as agent:
        await ok(agent, "propose_memory", scope=SCOPE, claim_key="k", value=1, kind="fact", id="F1")
        team.sessions["reviewer"].accept("F1")
        before = team.ledger.position
        plain = await refused(agent, "read_evidence", record_id="F1")
        # A refusal records no read: what the session proposes next does not rest on F1
        assert team.ledger.position == before
        await ok(
            agent, "propose_memory", scope=SCOPE, claim_key="k2", value=2, kind="plan", id="P1"
        )
    assert team.sessions["reviewer"].get("P1").observed == ()
    ref = team.sessions["reviewer"].get("E1").evidence
    assert ref is not None
    team.ledger.admin().erase_snapshot(ref["snapshot_ref"], reason="personal data")
    async with team.client("agent-1") as agent:
        before = team.ledger.position
        erased = await refused(agent, "read_evidence", record_id="E1")
        assert team.ledger.position == before
    assert plain == (
        "Error executing tool read_evidence: InvalidInputError: record 'F1' pins no captured "
        "content (only capture_evidence stores the bytes read)"
    )
    assert erased.startswith("Error executing tool read_evidence: SnapshotErasedError:")


async def test_an_argument_of_the_wrong_type_is_refused_naming_it_plainly(team: Team) -> None:
    # Not pydantic's report (its model's name, a link, the server's wrappers).
    before = team.ledger.position
    async with team.client("agent-1") as agent:
        limit = await refused(agent, "list_records", scope=SCOPE, limit=0)
        scope = await refused(
            agent, "propose_memory", scope=123, claim_key=CLAIM, value="x" * 500, kind="fact"
        )
        missing = await refused(agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, kind="fact")
    assert limit == (
        "Error executing tool list_records: InvalidInputError: argument 'limit' (0): "
        "Input should be greater than or equal to 1"
    )
    assert scope == (
        "Error executing tool propose_memory: InvalidInputError: argument 'scope' (123): "
        "Input should be a valid string"
    )
    assert missing == (
        "Error executing tool propose_memory: InvalidInputError: argument 'value': Field required"
    )
    assert team.ledger.position == before


async def test_a_boolean_or_fraction_for_a_count_and_a_number_for_an_instant_are_refused(
    team: Team,
) -> None:
    # Not read as pydantic's lax mode would: True as 1, 2.0 as 2, 1700000000 as 2023.
    before = team.ledger.position
    async with team.client("agent-1") as agent:
        flag = await refused(agent, "list_records", scope=SCOPE, limit=True)
        fraction = await refused(agent, "list_records", scope=SCOPE, limit=2.0)
        at = await refused(agent, "read_memory", scope=SCOPE, claim_key=CLAIM, at=1700000000)
        expires = await refused(
            agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=1, kind="fact",
            expires=12345,
        )  # fmt: skip
    assert flag == (
        "Error executing tool list_records: InvalidInputError: argument 'limit' (True): "
        "Input should be a valid integer"
    )
    assert fraction.endswith("argument 'limit' (2.0): Input should be a valid integer")
    for text, name, number in ((at, "at", 1700000000), (expires, "expires", 12345)):
        assert f"InvalidInputError: argument {name!r} ({number}): " in text
        assert text.endswith("(e.g. '2026-12-31T00:00:00Z'), not a number")
    assert team.ledger.position == before


async def test_text_that_is_not_iso_8601_is_no_instant(team: Team) -> None:
    # Not read as pydantic's lax mode would: "1893456000" as 2030, "1.7e9" as 2023.
    before = team.ledger.position
    async with team.client("agent-1") as agent:
        expires = await refused(
            agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=1, kind="fact",
            expires="1893456000",
        )  # fmt: skip
        at = await refused(agent, "read_memory", scope=SCOPE, claim_key=CLAIM, at="1.7e9")
        assert team.ledger.position == before
        ok = await agent.call_tool(
            "read_memory", {"scope": SCOPE, "claim_key": CLAIM, "at": "2026-12-31T00:00:00Z"}
        )
    assert expires.endswith(
        "argument 'expires' ('1893456000'): an instant is RFC 3339 text with "
        "a timezone (e.g. '2026-12-31T00:00:00Z'), not '1893456000'"
    )
    assert at.endswith("argument 'at' ('1.7e9'): an instant is RFC 3339 text "
                       "with a timezone (e.g. '2026-12-31T00:00:00Z'), not '1.7e9'")  # fmt: skip
    assert not ok.is_error, ok.content


async def test_iso_8601_forms_other_than_rfc_3339_are_refused_as_the_http_api_does(
    team: Team,
) -> None:
    # ``format: date-time`` promises RFC 3339: a basic-format instant, a week date or
    # a space for the "T" was read all the same (and a week date as another day).
    before = team.ledger.position
    async with team.client("agent-1") as agent:
        for text in (
            "20301201T000000Z",
            "2030-W01-1T00:00Z",
            "2030-12-01 00:00:00+00:00",
            "2030-12-01T00:00:00+00:60",  # (Python reads it as +01:00)
        ):
            said = await refused(agent, "read_memory", scope=SCOPE, claim_key=CLAIM, at=text)
            assert said.endswith(
                f"argument 'at' ({text!r}): an instant is RFC 3339 text with a timezone "
                f"(e.g. '2026-12-31T00:00:00Z'), not {text!r}"
            ), said
        fetched = await refused(
            agent, "capture_evidence", scope=SCOPE, uri="https://x.test/d", content="x",
            fetched_at="20261201T000000+0000",
        )  # fmt: skip
        assert "an instant is RFC 3339 text" in fetched
        assert team.ledger.position == before
        ok = await agent.call_tool(
            "read_memory", {"scope": SCOPE, "claim_key": CLAIM, "at": "2026-12-31t00:00:00.5z"}
        )
    assert not ok.is_error, ok.content


async def test_iso_8601_text_naming_no_instant_is_refused_saying_which_number_is_wrong(
    team: Team,
) -> None:
    # ISO 8601 in form, but a 30th of February, an offset of 25 hours, a 61st second:
    # refused for that, not as text that is no ISO 8601.
    before = team.ledger.position
    async with team.client("agent-1") as agent:
        day, offset = [
            await refused(
                agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=1, kind="fact",
                expires=expires,
            )
            for expires in ("2026-02-30T00:00:00Z", "2030-01-01T00:00:00+25:00")
        ]  # fmt: skip
        second = await refused(
            agent, "read_memory", scope=SCOPE, claim_key=CLAIM, at="2026-01-01T00:00:60Z"
        )
    assert day == (
        "Error executing tool propose_memory: InvalidInputError: argument 'expires' "
        "('2026-02-30T00:00:00Z'): '2026-02-30T00:00:00Z' is no instant: day is out of range "
        "for month"
    )
    assert offset.endswith(
        "argument 'expires' ('2030-01-01T00:00:00+25:00'): '2030-01-01T00:00:00+25:00' is no "
        "instant: its UTC offset is out of range (it must be less than 24 hours)"
    )
    assert second.endswith(
        "argument 'at' ('2026-01-01T00:00:60Z'): '2026-01-01T00:00:60Z' is no instant: "
        "second must be in 0..59"
    )
    assert team.ledger.position == before


async def test_an_instant_with_rfc_3339_lower_case_t_and_z_is_read_and_a_naive_one_refused(
    team: Team,
) -> None:
    # The schemas say `format: date-time`: RFC 3339 lets its "T" and "Z" be lower case.
    async with team.client("agent-1") as agent:
        proposal = {"scope": SCOPE, "claim_key": CLAIM, "value": 1, "kind": "fact"}
        proposed = await ok(agent, "propose_memory", **proposal, expires="2099-01-01t00:00:00z")
        captured = await ok(
            agent,
            "capture_evidence",
            scope=SCOPE,
            uri="https://docs.test/lower",
            content="x",
            fetched_at="2026-01-01t11:00:00.5z",
        )
        read = await ok(
            agent, "read_memory", scope=SCOPE, claim_key=CLAIM, at="2030-06-01t00:00:00z"
        )
        explained = await ok(
            agent, "explain_memory", scope=SCOPE, claim_key=CLAIM, at="2030-06-01T00:00:00z"
        )
        before = records_state(team.ledger)
        naive = await refused(agent, "propose_memory", **proposal, expires="2099-01-01t00:00:00")
        unreadable = await refused(
            agent, "propose_memory", **proposal, expires="2099-01-01t25:00:00z"
        )

    assert proposed["record"]["expires"] == "2099-01-01T00:00:00+00:00"
    assert captured["record"]["evidence"]["fetched_at"] == "2026-01-01T11:00:00.500000+00:00"
    assert read["at"] == explained["at"] == "2030-06-01T00:00:00+00:00"
    # Everything else as before: an instant without a timezone is refused by name
    assert naive.endswith(
        "NaiveDatetimeError: expires 2099-01-01T00:00:00 has no timezone; give it with a "
        "timezone, e.g. '2026-12-31T00:00:00Z'"
    )
    assert unreadable.endswith("'2099-01-01t25:00:00z' is no instant: hour must be in 0..23")
    assert records_state(team.ledger) == before  # nothing proposed


async def test_an_infinite_number_in_an_argument_is_refused_naming_where(team: Team) -> None:
    # JSON has no Infinity, but Python's reader (the SDK's, on the wire) takes it;
    # stored, it would come back as the text "inf". The SDK's own client sends an
    # infinity as null, so the arguments are handed to the server as read off the wire.
    server = team.servers["agent-1"]
    before = team.ledger.position
    with pytest.raises(ToolError) as proposed:
        await server.call_tool(
            "propose_memory",
            {
                "scope": SCOPE,
                "claim_key": CLAIM,
                "value": {"limits": [1.5, float("inf")]},
                "kind": "fact",
            },
        )
    with pytest.raises(ToolError) as read:
        await server.call_tool(
            "read_memory", {"scope": SCOPE, "claim_key": CLAIM, "context": {"x": float("nan")}}
        )
    assert str(proposed.value) == (
        "Error executing tool propose_memory: InvalidInputError: value.limits[1] is not a "
        "finite number (Infinity and NaN are not JSON)"
    )
    assert "context.x is not a finite number" in str(read.value)
    assert team.ledger.position == before


async def test_a_non_finite_number_inside_json_text_for_an_argument_is_refused_naming_where(
    team: Team,
) -> None:
    # An object argument sent as JSON text is read by the SDK after the arguments
    # arrive, with Python's reader, which takes Infinity and NaN and reads 1e400 as
    # an infinity: what the tool is handed is checked, not only what was sent.
    before = team.ledger.position
    proposal = {"scope": SCOPE, "claim_key": CLAIM, "value": 1, "kind": "fact"}
    async with team.client("agent-1") as agent:
        infinity = await refused(
            agent, "propose_memory", **proposal, conditions='{"a": Infinity}', id="C1"
        )
        overflow = await refused(
            agent, "propose_memory", **proposal, conditions='{"a": [1, 1e400]}', id="C2"
        )
        captured = await refused(
            agent,
            "capture_evidence",
            scope=SCOPE,
            uri="https://docs.test/c",
            content="x",
            conditions='{"b": -Infinity}',
        )
        read = await refused(
            agent, "read_memory", scope=SCOPE, claim_key=CLAIM, context='{"x": NaN}'
        )
        explained = await refused(
            agent, "explain_memory", scope=SCOPE, claim_key=CLAIM, context='{"x": {"y": 1e999}}'
        )
        parents = await refused(agent, "propose_memory", **proposal, parents='["E1", Infinity]')
        assert team.ledger.position == before
        # JSON text holding only finite numbers is still read as the object it spells
        finite = await ok(agent, "propose_memory", **proposal, conditions='{"a": 1.5}', id="C3")

    assert infinity == (
        "Error executing tool propose_memory: InvalidInputError: conditions.a is not a "
        "finite number (Infinity and NaN are not JSON)"
    )
    assert overflow.endswith("InvalidInputError: conditions.a[1] is not a finite number "
                             "(Infinity and NaN are not JSON)")  # fmt: skip
    assert captured.startswith("Error executing tool capture_evidence: InvalidInputError: "
                               "conditions.b is not a finite number")  # fmt: skip
    assert read.startswith("Error executing tool read_memory: InvalidInputError: context.x is")
    assert "InvalidInputError: context.x.y is not a finite number" in explained
    assert "InvalidInputError: parents[1] is not a finite number" in parents
    assert finite["record"]["conditions"] == {"a": 1.5}
    with pytest.raises(LedgerError):
        team.sessions["agent-1"].get("C1")


async def test_a_connection_that_lost_read_on_what_it_read_proposes_no_more(
    team: Team,
) -> None:
    # What it proposes may rest on a record it can no longer cite: refused, naming it,
    # until a new connection (a new run) starts.
    admin = team.ledger.admin()
    admin.grant("agent-1", scope=OTHER, roles=["read"])
    admin.grant("reviewer", scope=OTHER, roles=["approve"])
    team.sessions["reviewer"].accept(
        team.sessions["outsider"].propose(OTHER, "b.fact", 1, Kind.FACT, id="B1")
    )
    async with team.client("agent-1") as agent:
        await ok(agent, "read_memory", scope=OTHER, claim_key="b.fact")
        admin.revoke_grant("agent-1", scope=OTHER)
        text = await refused(
            agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=1, kind="fact"
        )
    assert text.startswith("Error executing tool propose_memory: InvalidParentError: ")
    assert "'B1'" in text
    async with team.client("agent-1") as fresh:
        await ok(fresh, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=1, kind="fact")


async def test_reject_memory_makes_a_candidate_rejected_for_good(team: Team) -> None:
    async with team.client("agent-1") as agent, team.client("reviewer") as reviewer:
        await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=1,
            kind="fact",
            id="M1",
        )
        decision = await ok(reviewer, "reject_memory", record_id="M1", reason="no basis")
        again = await refused(reviewer, "accept_memory", record_id="M1")

    assert decision["action"] == "rejected" and decision["record"]["status"] == "REJECTED"
    assert decision["record"]["reason"] == "no basis"
    assert "InvalidTransitionError: " in again


async def test_revoke_then_revalidate_on_a_new_basis(team: Team) -> None:
    await accepted_evidence(team, "E1")
    await accepted_evidence(team, "E2", content="retries are safe, v2")
    async with team.client("agent-1") as agent, team.client("reviewer") as reviewer:
        await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=True,
            kind="inference",
            parents=["E1"],
            id="M1",
        )
        await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key="report.weekly",
            value="retry",
            kind="report",
            parents=["M1"],
            id="R1",
        )
        await ok(reviewer, "accept_memory", record_id="M1")
        await ok(reviewer, "accept_memory", record_id="R1")

        # When the source is revoked
        rev = await ok(reviewer, "revoke_memory", record_id="E1", reason="doc changed")

        # Then it and everything downstream is affected, and the claim is MISSING
        assert rev == {
            "root": "E1",
            "affected": ["E1", "M1", "R1"],
            "stale": ["M1", "R1"],
            "position": rev["position"],
            "affected_count": 3,
            "stale_count": 2,
        }  # no note: none is left out
        assert (await ok(agent, "read_memory", scope=SCOPE, claim_key=CLAIM))[
            "outcome"
        ] == "MISSING"

        # When the reviewer revalidates M1 on the new evidence
        decision = await ok(
            reviewer, "revalidate_memory", record_id="M1", note="re-checked", parents=["E2"]
        )

        # Then M1 is ACCEPTED on E2 again, and R1 stays STALE until revalidated itself
        assert decision["action"] == "revalidated"
        assert decision["record"]["status"] == "ACCEPTED"
        assert decision["record"]["parents"] == ["E2"]
        assert (await ok(agent, "get_record", record_id="R1"))["status"] == "STALE"
        found = await ok(agent, "read_memory", scope=SCOPE, claim_key=CLAIM)
        assert found["outcome"] == "FOUND"


async def test_a_superseding_proposal_replaces_the_old_value_instead_of_conflicting(
    team: Team,
) -> None:
    async with team.client("agent-1") as agent, team.client("reviewer") as reviewer:
        await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=3,
            kind="fact",
            id="M1",
        )
        await ok(reviewer, "accept_memory", record_id="M1")
        await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key="report.retries",
            value="3",
            kind="report",
            parents=["M1"],
            id="R1",
        )
        await ok(reviewer, "accept_memory", record_id="R1")

        # When the agent proposes a new value superseding M1, and it is accepted
        proposal = await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=5,
            kind="fact",
            id="M2",
            supersedes="M1",
        )
        assert proposal["record"]["supersedes"] == "M1"
        async with reviewer.listen(
            resource_subscriptions=[record_uri("M1"), record_uri("M2")]
        ) as subscription:
            await ok(reviewer, "accept_memory", record_id="M2")
            heard = []
            with anyio.fail_after(30):  # a guard against hanging, not a timing check
                async for event in subscription:
                    assert isinstance(event, ResourceUpdated)
                    heard.append(event.uri)
                    if len(heard) == 2:
                        break
        # (listeners hear of the accepted record and of the one it replaced)
        assert heard == [record_uri("M2"), record_uri("M1")]

        # Then the claim reads FOUND with the new value, M1 is SUPERSEDED, R1 STALE
        found = await ok(agent, "read_memory", scope=SCOPE, claim_key=CLAIM)
        old = await ok(agent, "get_record", record_id="M1")
        report = await ok(agent, "get_record", record_id="R1")
        # and superseding another claim key is refused
        wrong = await refused(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key="other.key",
            value=1,
            kind="fact",
            supersedes="M2",
        )

    assert found["outcome"] == "FOUND" and found["value"] == 5
    assert old["status"] == "SUPERSEDED" and old["superseded_by"] == "M2"
    assert report["status"] == "STALE"
    assert wrong.split(": ", 2)[1] == "InvalidInputError"


# -- one connection, one run ------------------------------------------------------------------


async def test_what_a_connection_reads_is_observed_on_what_it_proposes(team: Team) -> None:
    await accepted_evidence(team, "E1")
    await accepted_evidence(team, "E2", content="the queue is FIFO")
    async with team.client("agent-1") as first, team.client("agent-1") as second:
        # Given one connection reads E1 and gets E2, the other reads nothing
        read = await ok(first, "read_memory", scope=SCOPE, claim_key="source:https://docs.test/E1")
        assert read["outcome"] == "FOUND"
        await ok(first, "get_record", record_id="E2")

        # When each proposes without declaring parents
        observed = await ok(
            first,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=True,
            kind="inference",
            id="M1",
        )
        unobserved = await ok(
            second,
            "propose_memory",
            scope=SCOPE,
            claim_key="api.other",
            value=True,
            kind="inference",
            id="M2",
        )

    # Then the first connection's proposal carries its reads as observed dependencies
    assert observed["record"]["observed"] == ["E1", "E2"]
    assert observed["record"]["undeclared"] == ["E1", "E2"]
    assert "observed" not in unobserved["record"]  # none: an empty list is left out
    # and the two connections were two runs
    assert observed["run_id"] and unobserved["run_id"]
    assert observed["run_id"] != unobserved["run_id"]

    # And revoking what the first connection read makes its proposal STALE
    team.sessions["reviewer"].accept("M1")
    rev = team.sessions["reviewer"].revoke("E1", reason="doc changed")
    assert "M1" in rev.stale and "M2" not in rev.affected


async def test_a_connection_starts_its_run_at_its_first_read_and_ends_it_on_closing(
    team: Team, tmp_path: Path
) -> None:
    def runs() -> list[tuple[Any, ...]]:
        return raw_rows(
            team.ledger, tmp_path / "ledger.db", "SELECT run_id, actor, outcome FROM pl_runs"
        )

    # A connection that only lists its tools starts no run
    async with team.client("agent-1") as agent:
        await agent.list_tools()
    assert runs() == []

    # One that proposes starts one, and ends it as completed when it closes
    async with team.client("agent-1") as agent:
        proposal = await ok(
            agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=1, kind="fact"
        )
        assert runs() == [(proposal["run_id"], "agent-1", None)]
    assert runs() == [(proposal["run_id"], "agent-1", "completed")]


async def test_what_a_connection_lists_or_explains_is_observed_too(team: Team) -> None:
    await accepted_evidence(team, "E1")
    await accepted_evidence(team, "E2", content="the queue is FIFO")
    async with team.client("agent-1") as agent:
        # Given the connection lists E1 and has E2 explained
        listed = await ok(
            agent, "list_records", scope=SCOPE, claim_prefix="source:https://docs.test/E1"
        )
        assert [r["id"] for r in listed["records"]] == ["E1"]
        await ok(agent, "explain_memory", scope=SCOPE, claim_key="source:https://docs.test/E2")

        # When it proposes
        proposal = await ok(
            agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=1, kind="fact"
        )

    # Then both were observed: it was shown them
    assert proposal["record"]["observed"] == ["E1", "E2"]


async def test_a_connection_shown_withdrawn_records_can_still_propose_a_correction(
    team: Team,
) -> None:
    await accepted_evidence(team, "E1")
    agent, reviewer = team.sessions["agent-1"], team.sessions["reviewer"]
    agent.propose(scope=SCOPE, claim_key=CLAIM, value=1, kind=Kind.FACT, id="M1")
    agent.propose(
        scope=SCOPE,
        claim_key="api.derived",
        value=2,
        kind=Kind.INFERENCE,
        parents=["E1"],
        id="S1",
    )
    reviewer.accept("M1")
    reviewer.accept("S1")
    reviewer.revoke("M1", reason="wrong")
    reviewer.revoke("E1", reason="page changed")  # S1 is STALE
    async with team.client("agent-1") as client:
        # Given the connection is shown withdrawn records every way it can be
        assert (await ok(client, "read_memory", scope=SCOPE, claim_key=CLAIM))[
            "outcome"
        ] == "MISSING"
        explained = await ok(client, "explain_memory", scope=SCOPE, claim_key=CLAIM)
        assert [e["record"]["status"] for e in explained["entries"]] == ["REVOKED"]
        assert (await ok(client, "get_record", record_id="S1"))["status"] == "STALE"
        attention = await ok(client, "list_records", scope=SCOPE, validity="NEEDS_REVALIDATION")
        assert [r["id"] for r in attention["records"]] == ["S1"]
        await client.read_resource(record_uri("M1"))

        # When it proposes the corrected value
        correction = await ok(
            client,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=3,
            kind="fact",
            id="M2",
        )

    # Then the proposal stands on nothing withdrawn
    assert "observed" not in correction["record"]


async def test_once_shown_that_a_record_it_read_was_withdrawn_a_connection_goes_on_without_it(
    team: Team,
) -> None:
    await accepted_evidence(team, "E1")
    await accepted_evidence(team, "E2", content="the queue is FIFO")
    async with team.client("agent-1") as agent:
        # Given the connection read E1 and E2 and built on them
        for rid in ("E1", "E2"):
            source = f"source:https://docs.test/{rid}"
            assert (await ok(agent, "read_memory", scope=SCOPE, claim_key=source))[
                "outcome"
            ] == "FOUND"
        first = await ok(
            agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=1, kind="fact"
        )
        assert first["record"]["observed"] == ["E1", "E2"]

        # When E1 is revoked elsewhere, its next proposal is refused, naming E1
        team.sessions["reviewer"].revoke("E1", reason="doc changed")
        blocked = await refused(
            agent, "propose_memory", scope=SCOPE, claim_key="api.k", value=2, kind="fact"
        )
        assert "InvalidParentError: observed dependency 'E1'" in blocked

        # Then once it has been shown E1's new state, its run goes on resting on E2 alone
        assert (await ok(agent, "get_record", record_id="E1"))["status"] == "REVOKED"
        after = await ok(
            agent, "propose_memory", scope=SCOPE, claim_key="api.k", value=2, kind="fact"
        )

    assert after["record"]["observed"] == ["E2"]
    assert after["run_id"] == first["run_id"]


# -- bad input and refusals ---------------------------------------------------------------------


async def test_bad_arguments_are_tool_errors_naming_the_argument(team: Team) -> None:
    async with team.client("agent-1") as agent:
        propose = {"scope": SCOPE, "claim_key": CLAIM, "value": 1, "kind": "fact"}
        before = records_state(team.ledger)

        missing = await refused(agent, "propose_memory", **{**propose, "scope": None})
        assert "scope" in missing
        unreadable = await refused(agent, "propose_memory", **propose, expires="yesterday")
        assert "expires" in unreadable
        too_many = await refused(agent, "list_records", scope=SCOPE, limit=5000)
        assert "limit" in too_many

        # Arguments the schema lets through are refused by the ledger, by name
        assert "InvalidKindError: kind 'gossip' is not one of" in await refused(
            agent, "propose_memory", **{**propose, "kind": "gossip"}
        )
        # Evidence pins the bytes read: it is captured, not proposed (nor offered)
        unpinned = await refused(agent, "propose_memory", **{**propose, "kind": "evidence"})
        assert "kind 'evidence' is proposed by capture" in unpinned
        tools = {t.name: t for t in (await agent.list_tools()).tools}
        kinds = tools["propose_memory"].input_schema["properties"]["kind"]["enum"]
        assert "evidence" not in kinds and "fact" in kinds
        naive = await refused(agent, "propose_memory", **propose, expires="2026-06-01T00:00:00")
        assert "NaiveDatetimeError: " in naive and "expires" in naive
        assert "InvalidIdError: record id 'bad id'" in await refused(
            agent, "propose_memory", **propose, id="bad id"
        )
        assert "InvalidInputError: content is not valid base64" in await refused(
            agent,
            "capture_evidence",
            scope=SCOPE,
            uri="https://x.test",
            content="%%%",
            content_encoding="base64",
        )

    # And no record was written (the connection's run was started and ended, that is all)
    assert records_state(team.ledger) == before


async def test_refusals_carry_the_ledger_errors_class_and_message(team: Team) -> None:
    lead, agent = team.sessions["lead"], team.sessions["agent-1"]
    rid = lead.propose(scope=SCOPE, claim_key=CLAIM, value=1, kind=Kind.FACT, id="L1")
    team.sessions["reviewer"].reject("L1", reason="no")
    own = lead.propose(scope=SCOPE, claim_key=CLAIM, value=2, kind=Kind.FACT, id="L2")
    expected = {
        "self": library_refusal(lambda: lead.accept(own)),
        "role": library_refusal(
            lambda: agent.propose(scope=OTHER, claim_key=CLAIM, value=1, kind=Kind.FACT)
        ),
        "transition": library_refusal(lambda: lead.accept(rid)),
        "parent": library_refusal(
            lambda: agent.propose(
                scope=SCOPE, claim_key=CLAIM, value=1, kind=Kind.FACT, parents=[rid], id="N1"
            )
        ),
    }
    assert expected["self"].startswith(SelfApprovalError.__name__)
    assert expected["role"].startswith(AccessDeniedError.__name__)
    assert expected["transition"].startswith(InvalidTransitionError.__name__)
    assert expected["parent"].startswith(InvalidParentError.__name__)
    before = records_state(team.ledger)

    async with team.client("lead") as lead_client, team.client("agent-1") as agent_client:
        got = {
            "self": await refused(lead_client, "accept_memory", record_id=own),
            "role": await refused(
                agent_client,
                "propose_memory",
                scope=OTHER,
                claim_key=CLAIM,
                value=1,
                kind="fact",
            ),
            "transition": await refused(lead_client, "accept_memory", record_id=rid),
            "parent": await refused(
                agent_client,
                "propose_memory",
                scope=SCOPE,
                claim_key=CLAIM,
                value=1,
                kind="fact",
                parents=[rid],
                id="N1",
            ),
        }

    # each followed by what a model can do next (a refusal no hint helps stands alone)
    hints = {
        "self": "; another approver must decide it",
        "role": "; you hold roles in: proj-a (propose, read)",
        "transition": "; that status is final: propose a new record instead",
        "parent": "",
    }
    for what, text in got.items():
        assert text.endswith(expected[what] + hints[what]), (what, text)
    # Rejecting one's own candidate is refused too, and withdrawing it is named
    async with team.client("lead") as lead_client:
        own_reject = await refused(lead_client, "reject_memory", record_id=own, reason="no")
    assert f"proposed record {own!r} and may not reject it" in own_reject
    assert own_reject.endswith(
        "; another approver must decide it, or withdraw it yourself with revoke_memory"
    )
    # Refused commands change no record (the connections' runs were started and ended)
    assert records_state(team.ledger) == before


async def test_a_bad_token_builds_no_server_and_a_revoked_one_is_refused_next_call(
    team: Team,
) -> None:
    with pytest.raises(AuthenticationError):
        build_server(team.ledger, "plt_not-a-token")

    async with team.client("agent-1") as agent:
        await ok(agent, "read_memory", scope=SCOPE, claim_key=CLAIM)
        team.ledger.admin().revoke_token(team.tokens["agent-1"])
        text = await refused(agent, "read_memory", scope=SCOPE, claim_key=CLAIM)
    assert "AuthenticationError: " in text
    assert text.endswith("; this server can do nothing more; ask the operator for a new token")
    assert team.tokens["agent-1"] not in text


async def test_a_refusal_says_what_to_do_next_where_a_model_could_not_guess_it(
    team: Team,
) -> None:
    # Given a token in another tenant's scope the agent knows nothing of
    team.ledger.admin().grant("someone", scope="tenant-z", roles=["read", "audit"])
    async with team.client("agent-1") as agent, team.client("reviewer") as reviewer:
        await ok(agent, "capture_evidence", scope=SCOPE, uri="https://docs.test/e", content="x")
        evidence = (await ok(agent, "list_records", scope=SCOPE))["records"][0]["id"]
        await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=True,
            kind="fact",
            parents=[evidence],
            id="M1",
        )
        # When the reviewer accepts a claim before the evidence it rests on
        waiting = await refused(reviewer, "accept_memory", record_id="M1")
        # decides a rejected record again, and revokes a revoked one
        await ok(reviewer, "reject_memory", record_id="M1", reason="premature")
        rejected = await refused(reviewer, "accept_memory", record_id="M1")
        await ok(reviewer, "revoke_memory", record_id=evidence, reason="wrong page")
        revoked = await refused(reviewer, "revoke_memory", record_id=evidence, reason="again")
        # and revalidates a stale record on a basis not accepted yet
        basis = team.sessions["agent-1"].capture(
            scope=SCOPE, uri="https://docs.test/b", content=b"b", id="B2"
        )
        team.sessions["agent-1"].propose(
            scope=SCOPE, claim_key="k3", value=1, kind=Kind.FACT, parents=[basis], id="S2"
        )
        team.sessions["reviewer"].accept(basis)
        team.sessions["reviewer"].accept("S2")
        await ok(reviewer, "revoke_memory", record_id=basis, reason="changed")
        stale_rejected = await refused(reviewer, "reject_memory", record_id="S2", reason="x")
        other = team.sessions["agent-1"].capture(
            scope=SCOPE, uri="https://docs.test/c", content=b"c", id="B3"
        )
        unaccepted = await refused(reviewer, "revalidate_memory", record_id="S2", parents=[other])
        # and the agent names a bad id, a scope it holds nothing in, an unknown kind,
        # and evidence as a kind to propose
        bad_id = await refused(agent, "get_record", record_id="bad id!")
        bad_scope = await refused(agent, "read_memory", scope="bad scope", claim_key=CLAIM)
        denied = await refused(agent, "read_memory", scope="proj-x", claim_key=CLAIM)
        proposal = {"scope": SCOPE, "claim_key": CLAIM, "value": 1}
        unknown_kind = await refused(agent, "propose_memory", **proposal, kind="bogus")
        evidence_kind = await refused(agent, "propose_memory", **proposal, kind="evidence")

    # Then each refusal is the ledger's, followed by what to do from here
    assert waiting.endswith(
        f"InvalidParentError: accept refused: dependency {evidence!r} of 'M1' is CANDIDATE; "
        f"accept {evidence!r} first (or reject 'M1')"
    )
    assert unaccepted.endswith("dependency 'B3' of 'S2' is CANDIDATE; accept 'B3' first")
    assert stale_rejected.endswith(
        "record 'S2' is STALE; reject needs CANDIDATE; only a candidate is rejected: "
        "revoke_memory withdraws a STALE record, revalidate_memory returns it to use"
    )
    for text in (rejected, revoked):
        assert text.endswith("; that status is final: propose a new record instead"), text
    for text in (bad_id, bad_scope):
        assert "InvalidIdError: " in text
        assert text.endswith(
            "; an id or a scope is 1 to 128 letters, digits, '.', '_', ':' or '-', starting "
            "with a letter or digit"
        )
    # the scopes the agent holds roles in, and no other tenant's
    assert denied.endswith(
        "AccessDeniedError: read refused: 'agent-1' lacks role 'read' in scope 'proj-x'; "
        "you hold roles in: proj-a (propose, read)"
    )
    assert "tenant-z" not in denied and OTHER not in denied
    # and the kinds propose_memory takes, evidence not among them
    assert unknown_kind.endswith(
        "InvalidKindError: kind 'bogus' is not one of: fact, user_constraint, "
        "user_preference, inference, plan, report (evidence is stored with capture_evidence)"
    )
    assert "InvalidKindError: kind 'evidence' is proposed by capture" in evidence_kind
    assert evidence_kind.endswith("(to capture it, call capture_evidence)")


def test_a_write_that_waited_too_long_for_the_lock_says_nothing_was_written_and_to_retry(
    tmp_path: Path, anyio_backend: str
) -> None:
    # Given a ledger whose writers wait at most a second for the lock, a candidate,
    # and another writer holding the lock
    url, token = _agent_ledger(tmp_path)
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("reviewer", scope=SCOPE, roles=["approve", "read"])
        reviewer_token = admin.issue_token("reviewer")
        led.authenticate(token).propose(scope=SCOPE, claim_key="k", value=1, kind="fact", id="C1")
    led = Ledger.open(url + "?timeout=1")
    locker = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    proposal = {"scope": SCOPE, "claim_key": "k", "value": 2, "kind": "fact", "id": "C2"}

    async def session() -> tuple[str, str]:
        async with (
            Client(build_server(led, token)) as agent,
            Client(build_server(led, reviewer_token)) as reviewer,
        ):
            await ok(agent, "read_memory", scope=SCOPE, claim_key="k")  # its run starts
            locker.execute("BEGIN IMMEDIATE")
            try:
                # When a proposal and an acceptance give up waiting
                proposed = await refused(agent, "propose_memory", **proposal)
                accepted = await refused(reviewer, "accept_memory", record_id="C1")
            finally:
                locker.execute("ROLLBACK")
        return proposed, accepted

    try:
        proposed, accepted = anyio.run(session, backend=anyio_backend)
        # Then each says nothing was written and to retry (a proposal with its id),
        # the hint adding only what the ledger's message does not say already
        assert "ConcurrencyError: " in proposed and "ConcurrencyError: " in accepted
        assert proposed.endswith(
            "; nothing was written — try again; in a few seconds, with the same `id`"
        )
        assert accepted.endswith("; nothing was written — try again; in a few seconds")
        for text in (proposed, accepted):
            assert text.count("nothing was written") == 1, text
        # and nothing was
        assert [r.id for r in led.authenticate(token).records(SCOPE)] == ["C1"]
        assert led.authenticate(token).get("C1").status == "CANDIDATE"
    finally:
        locker.close()
        led.close()


async def test_a_new_version_resting_on_the_old_one_is_refused_saying_how_a_model_goes_on(
    team: Team,
) -> None:
    # Given an accepted memory the agent reads, then re-captures its changed source
    agent, reviewer = team.sessions["agent-1"], team.sessions["reviewer"]
    agent.propose(scope=SCOPE, claim_key="svc.rate_limit", value=100, kind=Kind.FACT, id="RL1")
    reviewer.accept("RL1")
    async with team.client("agent-1") as client:
        await ok(client, "read_memory", scope=SCOPE, claim_key="svc.rate_limit")
        await ok(
            client,
            "capture_evidence",
            scope=SCOPE,
            uri="https://svc.test/limits",
            content="rate limit: 50/min",
            id="L2",
        )
        # When it proposes the new value superseding the old, citing the capture
        version = {"scope": SCOPE, "claim_key": "svc.rate_limit", "value": 50, "kind": "fact"}
        text = await refused(
            client, "propose_memory", **version, parents=["L2"], supersedes="RL1", id="RL2"
        )
        # Then the refusal says what this session can do, which works
        replacing = await ok(
            client,
            "propose_memory",
            **{**version, "value": {"limit": 50, "source": "L2"}},
            supersedes="RL1",
            id="RL3",
        )

    assert text.startswith(
        "Error executing tool propose_memory: InvalidParentError: propose refused: supersedes "
        "'RL1', but its dependency 'L2' rests on 'RL1'"
    )
    assert "a new MCP session" not in text
    assert text.endswith(
        "). From here: propose it with `supersedes` but without that dependency (name it in "
        "the value instead); or ask the operator to restart this MCP server (a new session "
        "starts a new run) and capture the source again there. Without `supersedes` it "
        "would CONFLICT with the old record and still rest on it"
    )
    assert replacing["record"]["supersedes"] == "RL1" and "observed" not in replacing["record"]


async def test_a_connection_that_lost_read_where_it_read_says_how_a_model_gets_a_new_run(
    team: Team,
) -> None:
    # Given the agent may read proj-b for a while, and reads a usable record there
    admin = team.ledger.admin()
    team.sessions["outsider"].propose(scope=OTHER, claim_key=CLAIM, value=1, kind="fact", id="B1")
    admin.grant("checker", scope=OTHER, roles=["approve"])
    team.ledger.authenticate(admin.issue_token("checker")).accept("B1")
    admin.grant("agent-1", scope=OTHER, roles=["read"])
    async with team.client("agent-1") as agent:
        await ok(agent, "get_record", record_id="B1")
        admin.revoke_grant("agent-1", OTHER)
        # When it proposes after losing that grant
        text = await refused(
            agent, "propose_memory", scope=SCOPE, claim_key=CLAIM, value=2, kind="fact"
        )

    # Then the refusal says how a model, which cannot open a session, gets a new run
    assert "InvalidParentError: " in text and "'B1'" in text
    assert text.endswith(
        "this session read it while you could, and every proposal of the session rests on "
        "what it read; ask the operator to restart this MCP server (a new session starts a "
        "new run)"
    )


async def test_the_descriptions_say_what_a_read_does_to_a_proposal_and_a_capture_to_a_source(
    team: Team,
) -> None:
    async with team.client("reviewer") as reviewer:
        tools = {t.name: t.description or "" for t in (await reviewer.list_tools()).tools}
    assert "expires no later than the earliest-expiring of them" in tools["propose_memory"]
    assert "observed dependencies" in tools["propose_memory"]
    assert (
        "Capturing a `uri` captured before with different content makes a new version of "
        "that source: once it is accepted, the earlier capture is SUPERSEDED and what rests "
        "on it becomes STALE"
    ) in tools["capture_evidence"]
    for name, text in tools.items():  # a model cannot start a session of its own
        assert "new session." not in text and "in a new session" not in text, name
        assert "start a new session" not in text, name

    # And what the description says of a read holds: the proposal expires with it
    agent, lead = team.sessions["agent-1"], team.sessions["lead"]
    soon = "2099-01-01T00:00:00+00:00"
    lead.propose(
        scope=SCOPE,
        claim_key="token.ttl",
        value=60,
        kind=Kind.FACT,
        id="T1",
        expires=datetime.fromisoformat(soon),
    )
    team.sessions["reviewer"].accept("T1")
    async with team.client("agent-1") as client:
        await ok(client, "read_memory", scope=SCOPE, claim_key="token.ttl")
        proposed = await ok(
            client, "propose_memory", scope=SCOPE, claim_key="plan.x", value="p", kind="plan"
        )
    record = proposed["record"]
    assert record["observed"] == ["T1"] and "expires" not in record  # none of its own
    assert record["effective_expires"] == soon and record["expiry_source"] == "T1"
    assert agent.get(proposed["id"]).effective_expires == datetime.fromisoformat(soon)


async def test_the_schemas_give_the_shape_of_ids_and_scopes_and_refuse_nothing_by_themselves(
    team: Team,
) -> None:
    async with team.client("reviewer") as reviewer:
        tools = {t.name: t.input_schema["properties"] for t in (await reviewer.list_tools()).tools}
        # The ledger refuses what the schemas rule out, in its own words
        empty = await refused(reviewer, "reject_memory", record_id="X1", reason="")
        no_kinds = await refused(reviewer, "read_memory", scope=SCOPE, claim_key=CLAIM, kinds=[])

    def strings(schema: dict[str, Any]) -> dict[str, Any]:
        return next(b for b in [schema, *schema.get("anyOf", ())] if b.get("type") == "string")

    scope = strings(tools["read_memory"]["scope"])
    record_id = strings(tools["get_record"]["record_id"])
    new_id = strings(tools["propose_memory"]["id"])
    parents = tools["propose_memory"]["parents"]["anyOf"][0]
    assert scope["maxLength"] == new_id["maxLength"] == 128
    assert record_id["maxLength"] == 258 and parents["items"]["maxLength"] == 258
    shapes = {"scope": scope, "id": new_id, "record_id": record_id, "parent": parents["items"]}
    for name, shape in shapes.items():
        for good in ("proj-a", "E1", "a.b_c:d-9", "x" * 128):
            jsonschema.validate(good, shape)
        for bad in ("", "-x", "bad id!", "é1", "x" * 129):
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(bad, shape)
        if name in ("record_id", "parent"):  # a record named id@@scope
            jsonschema.validate("E1@@proj-b", shape)
        else:
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate("E1@@proj-b", shape)
    for tool in ("reject_memory", "revoke_memory"):
        assert strings(tools[tool]["reason"])["minLength"] == 1
    # The lengths the ledger accepts, as the schemas give them, each refused past it
    on = {"scope": SCOPE, "claim_key": CLAIM}
    limits: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {
        ("propose_memory", "claim_key"): (512, {**on, "value": 1, "kind": "fact"}),
        ("read_memory", "claim_key"): (512, on),
        ("list_records", "claim_prefix"): (512, {"scope": SCOPE}),
        ("capture_evidence", "uri"): (2048, {"scope": SCOPE, "content": "x", "claim_key": "k"}),
        ("capture_evidence", "claim_key"): (512, {"scope": SCOPE, "content": "x", "uri": "u"}),
        ("reject_memory", "reason"): (1024, {"record_id": "X1"}),
        ("revoke_memory", "reason"): (1024, {"record_id": "X1"}),
        ("accept_memory", "note"): (1024, {"record_id": "X1"}),
        ("revalidate_memory", "note"): (1024, {"record_id": "X1"}),
    }
    async with team.client("reviewer") as reviewer:
        for (tool, name), (most, args) in limits.items():
            assert strings(tools[tool][name])["maxLength"] == most, (tool, name)
            text = await refused(reviewer, tool, **{**args, name: "x" * (most + 1)})
            assert f"{name} is {most + 1} characters; the limit is {most}" in text, text
    kinds = tools["read_memory"]["kinds"]["anyOf"][0]
    assert kinds["minItems"] == 1 and kinds["items"]["enum"][0] == "evidence"
    assert empty.endswith("InvalidValueError: reason must not be empty")
    assert no_kinds.endswith(
        "InvalidInputError: kinds is empty: leave it out to consider every kind"
    )


# -- isolation ----------------------------------------------------------------------------


async def test_a_token_for_scope_a_reads_and_gets_nothing_of_scope_b(team: Team) -> None:
    team.sessions["outsider"].propose(
        scope=OTHER, claim_key=CLAIM, value="secret", kind=Kind.FACT, id="B1"
    )
    async with team.client("agent-1") as agent:
        # Reading and explaining scope B are refused for want of a grant
        read = await refused(agent, "read_memory", scope=OTHER, claim_key=CLAIM)
        explain = await refused(agent, "explain_memory", scope=OTHER, claim_key=CLAIM)
        # Getting, or the resource of, a B record is exactly an unknown id's answer
        hidden = await refused(agent, "get_record", record_id="B1")
        unknown = await refused(agent, "get_record", record_id="B2")
        with pytest.raises(MCPError) as hidden_resource:
            await agent.read_resource(record_uri("B1"))
        with pytest.raises(MCPError) as unknown_resource:
            await agent.read_resource(record_uri("B2"))
        # and a B record cannot be a parent: it does not exist for this token
        parent = await refused(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=1,
            kind="fact",
            parents=["B1"],
        )

    assert read.startswith("Error executing tool read_memory: AccessDeniedError: ")
    assert "AccessDeniedError: " in explain
    assert hidden == unknown.replace("B2", "B1")
    assert "UnknownRecordError: " in hidden and "secret" not in hidden
    assert hidden_resource.value.error.code == unknown_resource.value.error.code
    assert hidden_resource.value.error.message == unknown_resource.value.error.message.replace(
        "B2", "B1"
    )
    assert "InvalidParentError: " in parent and "secret" not in parent


async def test_a_token_for_scope_a_lists_nothing_of_scope_b(team: Team) -> None:
    team.sessions["outsider"].propose(
        scope=OTHER, claim_key=CLAIM, value="secret", kind=Kind.FACT, id="B1"
    )
    async with team.client("agent-1") as agent:
        # Listing scope B is refused, not answered empty
        listed = await refused(agent, "list_records", scope=OTHER)
        # and its own scope lists nothing of B
        own = await ok(agent, "list_records", scope=SCOPE)

    assert listed.startswith("Error executing tool list_records: AccessDeniedError: ")
    assert own == {"records": []}


# -- the record resource and its notifications ------------------------------------------------


async def test_the_record_resource_is_the_records_json_and_is_observed(team: Team) -> None:
    await accepted_evidence(team, "E1")
    async with team.client("agent-1") as agent:
        templates = (await agent.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["provledger://record/{record_id}"]

        # When the agent reads E1 as a resource
        result = await agent.read_resource(record_uri("E1"))
        content = result.contents[0]
        as_tool = await ok(agent, "get_record", record_id="E1")
        proposal = await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key=CLAIM,
            value=1,
            kind="fact",
        )

    # Then it is the JSON get_record returns, and the read was observed
    assert content.mime_type == "application/json"
    assert json.loads(content.text) == as_tool
    assert proposal["record"]["observed"] == ["E1"]


async def test_a_resource_uri_holding_no_record_id_is_invalid_params_not_an_internal_error(
    team: Team,
) -> None:
    # The client's mistake, as an unknown id is (-32602), not the server's (-32603).
    before = records_state(team.ledger)
    async with team.client("agent-1") as agent:
        errors = {}
        for uri, record_id in (("provledger://record/bad%20id", "bad id"), (record_uri(""), "")):
            with pytest.raises(MCPError) as refused:
                await agent.read_resource(uri)
            errors[record_id] = refused.value.error

    for record_id, error in errors.items():
        assert error.code == -32602
        agent_get = partial(team.sessions["agent-1"].get, record_id)
        assert error.message == library_refusal(agent_get)
        assert error.message.startswith(f"InvalidIdError: record id {record_id!r} is invalid")
    assert errors["bad id"].data == {"uri": "provledger://record/bad%20id"}
    assert records_state(team.ledger) == before


async def test_a_revocation_notifies_listeners_of_every_affected_record_they_may_see(
    team: Team,
) -> None:
    await accepted_evidence(team, "E1")
    await accepted_evidence(team, "E2", content="unrelated")
    outsider = team.sessions["outsider"]
    team.ledger.admin().grant("outsider", scope=SCOPE, roles=["read"])
    # A record in proj-b rests on E1: the reviewer (proj-a only) may not see it
    outsider.propose(
        scope=OTHER, claim_key=CLAIM, value=1, kind=Kind.INFERENCE, parents=["E1"], id="B1"
    )
    agent = team.sessions["agent-1"]
    agent.propose(
        scope=SCOPE, claim_key=CLAIM, value=1, kind=Kind.INFERENCE, parents=["E1"], id="M1"
    )
    watched = [record_uri(rid) for rid in ("E1", "M1", "B1", "E2")]

    async with (
        team.client("reviewer") as reviewer,
        reviewer.listen(resource_subscriptions=watched) as subscription,
    ):
        # When the reviewer revokes E1, then (a later, separate change) revokes E2
        rev = await ok(reviewer, "revoke_memory", record_id="E1", reason="doc changed")
        await ok(reviewer, "revoke_memory", record_id="E2", reason="done")

        # Then listeners hear of E1 and M1, then E2, and never of the hidden B1
        heard: list[str] = []
        with anyio.fail_after(30):  # a guard against hanging, not a timing check
            async for event in subscription:
                assert isinstance(event, ResourceUpdated)
                heard.append(event.uri)
                if event.uri == record_uri("E2"):
                    break
    # (descendants outside the caller's scopes are neither named nor counted)
    assert rev["affected"] == ["E1", "M1"] and "hidden" not in rev
    assert heard == [record_uri("E1"), record_uri("M1"), record_uri("E2")]


async def test_revoking_a_record_under_many_lists_the_first_thousand_ids_and_counts_them_all(
    team: Team,
) -> None:
    # Given an accepted source E1 with 1,001 candidates resting on it
    await accepted_evidence(team, "E1")
    team.sessions["agent-1"].propose_many(
        {"scope": SCOPE, "claim_key": f"leaf.{i}", "value": i, "kind": "inference",
         "parents": ["E1"], "id": f"L{i:04d}"}
        for i in range(1001)
    )  # fmt: skip

    # and an unrelated candidate beside them
    team.sessions["agent-1"].propose(SCOPE, "other", 1, "fact", id="Z1")

    # When the reviewer revokes E1
    async with team.client("reviewer") as reviewer:
        rev = await ok(reviewer, "revoke_memory", record_id="E1", reason="doc changed")

        # Then the answer lists the first 1,000 ids of each list, counts them all,
        assert (len(rev["affected"]), rev["affected_count"]) == (1000, 1002)
        assert (len(rev["stale"]), rev["stale_count"]) == (1000, 1001)
        assert rev["affected"][:2] == ["E1", "L0000"]
        # and says where to find the rest
        assert rev["note"] == (
            "1002 records affected; the first 1000 are listed. list_records with "
            "status='STALE' pages through those now STALE."
        )
        # which lists exactly those it marked STALE (not the candidate beside them)
        first = await ok(reviewer, "list_records", scope=SCOPE, status="STALE", limit=1000)
        second = await ok(
            reviewer, "list_records", scope=SCOPE, status="STALE", after=first["next_after"]
        )
        listed = [r["id"] for r in first["records"] + second["records"]]
        assert len(listed) == rev["stale_count"] and listed[:1000] == rev["stale"]
    # (every one of them is STALE all the same)
    assert team.sessions["agent-1"].get("L1000").status.value == "STALE"


# -- the command -----------------------------------------------------------------------------


def _agent_ledger(tmp_path: Path) -> tuple[str, str]:
    """A SQLite ledger in ``tmp_path`` where agent-1 may propose and read in proj-a:
    its URL and agent-1's token."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
        return url, admin.issue_token("agent-1")


def test_provledger_mcp_serves_over_stdio_with_the_token_from_the_environment(
    tmp_path: Path, anyio_backend: str
) -> None:
    url, token = _agent_ledger(tmp_path)
    env = {"PROVLEDGER_TOKEN": token}
    if "PYTHONPATH" in os.environ:  # this checkout's package, however pytest was started
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "ledger", "mcp", "--url", url], env=env
    )
    stderr_path = tmp_path / "stderr.txt"

    async def session() -> tuple[list[str], Any, Any]:
        with stderr_path.open("w") as errlog:
            async with Client(stdio_client(server, errlog=errlog)) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                evidence = await client.call_tool(
                    "capture_evidence",
                    {"scope": SCOPE, "uri": "https://docs.test/e1", "content": "x", "id": "E1"},
                )
                denied = await client.call_tool("accept_memory", {"record_id": "E1"})
        return names, evidence, denied

    names, evidence, denied = anyio.run(session, backend=anyio_backend)

    assert names == MEMORY_TOOLS
    assert not evidence.is_error and evidence.structured_content["status"] == "CANDIDATE"
    assert denied.is_error
    with Ledger.open(url) as led:
        assert led.authenticate(token).get("E1").proposer == "agent-1"
    assert token not in stderr_path.read_text()


def test_provledger_mcp_over_stdio_answers_a_line_it_cannot_read_and_goes_on(
    tmp_path: Path,
) -> None:
    # The SDK's stdio transport drops what its JSON parser refuses: the client waited
    # for an answer forever. Each is a JSON-RPC error now, with the request's id.
    url, token = _agent_ledger(tmp_path)
    env = {**os.environ, "PROVLEDGER_TOKEN": token}
    with Ledger.open(url) as led:
        before = records_state(led)
    call = (
        '{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"propose_memory",'
        '"arguments":{"scope":"proj-a","claim_key":"raw","value":%s,"kind":"fact"}}}'
    )
    unreadable = {
        "1": call % ("1", '"\\ud800"'),
        "2": call % ("2", "9" * 5000),
        '"deep"': call % ('"deep"', "[" * 250 + "1" + "]" * 250),
        "null": '{"jsonrpc":"2.0","method":"tools/call","params":{"v":"\\udc00"}',
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "ledger", "mcp", "--url", url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in server.stdout], daemon=True).start()

    def send(line: str) -> None:
        assert server.stdin is not None
        server.stdin.write(line + "\n")
        server.stdin.flush()

    def answer() -> Any:
        return json.loads(lines.get(timeout=30))  # queue.Empty: no answer came

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        }}))  # fmt: skip
        answer()
        send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        errors = {}
        for request_id, line in unreadable.items():
            send(line)
            errors[request_id] = answer()
        send(
            '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"list_records",'
            '"arguments":{"scope":"proj-a"}}}'
        )
        later = answer()
    finally:
        server.stdin.close()
        server.wait(timeout=30)

    for request_id, error in errors.items():
        assert error["id"] == json.loads(request_id)
        assert error["error"]["code"] == -32700
    assert errors["1"]["error"]["message"].startswith("Parse error: lone surrogate")
    assert errors["2"]["error"]["message"].startswith("Parse error: integer too large")
    assert errors['"deep"']["error"]["message"].startswith("Parse error: nested too deep")
    assert errors["null"]["error"]["message"].startswith("Parse error: lone surrogate")
    assert later["id"] == 5 and later["result"]["structuredContent"]["records"] == []
    with Ledger.open(url) as led:
        assert records_state(led) == before  # nothing was proposed


def test_a_client_gone_before_its_answer_ends_the_server_quietly_with_the_call_kept(
    tmp_path: Path,
) -> None:
    # Given a client that stops reading, then asks for a proposal
    url, token = _agent_ledger(tmp_path)
    server = subprocess.Popen(
        [sys.executable, "-m", "ledger", "mcp", "--url", url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PROVLEDGER_TOKEN": token},
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    }}) + "\n" + '{"jsonrpc":"2.0","method":"notifications/initialized"}\n')  # fmt: skip
    server.stdin.flush()
    assert json.loads(server.stdout.readline())["id"] == 0
    server.stdout.close()  # its answer has nowhere to go
    server.stdin.write(
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"propose_memory",'
        '"arguments":{"scope":"proj-a","claim_key":"gone","value":1,"kind":"fact","id":"G1"}}}\n'
    )
    server.stdin.flush()
    with Ledger.open(url) as led:  # the proposal is made, answered or not
        agent = led.authenticate(token)
        for _ in range(600):
            if agent.records(SCOPE):
                break
            threading.Event().wait(0.05)
    server.stdin.close()
    server.wait(timeout=30)
    assert server.stderr is not None
    stderr = server.stderr.read()
    # Then the server ends as when the client closes its side: exit 0, nothing on
    # standard error, the call kept and its connection's run ended
    assert (server.returncode, stderr) == (0, "")
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        topics = [t for (t,) in db.execute("SELECT topic FROM stored_events ORDER BY rowid")]
    assert [t.rsplit(".", 1)[-1] for t in topics[-3:]] == ["Started", "Proposed", "Ended"]
    with Ledger.open(url) as led:
        assert led.authenticate(token).get("G1").proposer == "agent-1"


def test_a_call_abandoned_while_it_waits_for_the_lock_is_written_and_its_retry_refused(
    tmp_path: Path, anyio_backend: str
) -> None:
    # Given another writer holding the ledger's writers' lock
    url, token = _agent_ledger(tmp_path)
    env = {"PROVLEDGER_TOKEN": token}
    if "PYTHONPATH" in os.environ:  # this checkout's package, however pytest was started
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "ledger", "mcp", "--url", url], env=env
    )
    locker = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    proposal = {"scope": SCOPE, "claim_key": "k", "value": 1, "kind": "fact", "id": "C1"}

    async def session() -> tuple[MCPError, Any]:
        with (tmp_path / "stderr.txt").open("w") as errlog:
            async with Client(stdio_client(server, errlog=errlog)) as client:
                await client.list_tools()
                locker.execute("BEGIN IMMEDIATE")
                # When the client gives up on a proposal waiting for the lock (the SDK's
                # client sends notifications/cancelled) and the lock frees later
                with pytest.raises(MCPError) as abandoned:
                    await client.call_tool("propose_memory", proposal, read_timeout_seconds=1)
                locker.execute("COMMIT")
                with Ledger.open(url) as led:
                    agent = led.authenticate(token)
                    for _ in range(200):
                        if agent.records(SCOPE):
                            break
                        await anyio.sleep(0.05)
                # and retries the call with the same id
                retried = await client.call_tool("propose_memory", proposal)
        return abandoned.value, retried

    try:
        abandoned, retried = anyio.run(session, backend=anyio_backend)
    finally:
        locker.close()

    # Then the abandoned call was written all the same, and the retry is refused as a
    # duplicate naming the id (what the tool descriptions tell a model to rely on)
    assert "timed out" in str(abandoned)
    with Ledger.open(url) as led:
        assert [r.id for r in led.authenticate(token).records(SCOPE)] == ["C1"]
    assert retried.is_error and retried.content[0].text == (
        "Error executing tool propose_memory: DuplicateRecordError: record 'C1' already exists"
    )


def test_provledger_mcp_without_the_sdk_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from ledger.cli import main

    # Given the mcp package cannot be imported
    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in [m for m in sys.modules if m.startswith("ledger.integrations.mcp")]:
        monkeypatch.delitem(sys.modules, name)

    result = CliRunner().invoke(
        main, ["mcp", "--url", f"sqlite:///{tmp_path / 'l.db'}"], env={"PROVLEDGER_TOKEN": "t"}
    )

    assert result.exit_code == 1
    assert result.stderr == (
        "error: provledger mcp needs the MCP SDK (mcp is not installed); install the 'mcp' "
        "extra: pip install -e '.[mcp]' in provledger's source directory, or pip install "
        "'provledger[mcp]' where it was installed as a package\n"
    )


def test_provledger_mcp_refuses_a_bad_token_in_one_line_without_echoing_it(
    tmp_path: Path,
) -> None:
    from click.testing import CliRunner

    from ledger.cli import main

    url = f"sqlite:///{tmp_path / 'l.db'}"
    Ledger.open(url).close()
    secret = "plt_secret-value-that-must-not-be-printed"

    result = CliRunner().invoke(main, ["mcp", "--url", url], env={"PROVLEDGER_TOKEN": secret})

    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert secret not in result.output and secret not in result.stderr


def test_provledger_mcp_serves_streamable_http_at_the_mcp_path(
    tmp_path: Path, anyio_backend: str
) -> None:
    url, token = _agent_ledger(tmp_path)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "ledger", "mcp", "--url", url, "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--transport", "streamable-http"],
        env={**os.environ, "PROVLEDGER_TOKEN": token},
        stderr=subprocess.PIPE,
        text=True,
    )

    def said() -> str:  # its first line on standard error: where it listens
        assert server.stderr is not None
        return server.stderr.readline()

    async def session() -> tuple[list[str], Any]:
        with anyio.fail_after(60):
            first = await anyio.to_thread.run_sync(said, abandon_on_cancel=True)
        # It says where it listens once it does, on the address asked for
        assert f"MCP endpoint at http://127.0.0.1:{port}/mcp" in first, first
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            names = [t.name for t in (await client.list_tools()).tools]
            evidence = await client.call_tool(
                "capture_evidence", {"scope": SCOPE, "uri": "https://docs.test/e1", "content": "x"}
            )
        return names, evidence

    try:
        names, evidence = anyio.run(session, backend=anyio_backend)
    finally:
        server.terminate()
        server.communicate(timeout=30)

    assert names == MEMORY_TOOLS
    assert not evidence.is_error and evidence.structured_content["status"] == "CANDIDATE"


def test_provledger_mcp_over_http_on_a_taken_port_is_one_error_line_and_exit_1(
    tmp_path: Path,
) -> None:
    url, token = _agent_ledger(tmp_path)
    env = {**os.environ, "PROVLEDGER_TOKEN": token}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "ledger", "mcp", "--url", url, "--port", str(port)]
        done = subprocess.run(
            [*command, "--transport", "streamable-http"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )
    assert done.returncode == 1
    assert done.stderr == f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_provledger_help_does_not_import_the_mcp_sdk() -> None:
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from ledger.cli import main\n"
        "assert CliRunner().invoke(main, ['--help']).exit_code == 0\n"
        "assert CliRunner().invoke(main, ['mcp', '--help']).exit_code == 0\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


# -- what a drill of an agent over stdio found --------------------------------------------------


async def test_accepting_a_stale_record_is_refused_saying_to_revalidate_it_and_how(
    team: Team,
) -> None:
    # Given a fact accepted on evidence, a candidate on it never accepted, and one the
    # lead proposed, all STALE once the evidence is revoked
    agent, lead, reviewer = (team.sessions[who] for who in ("agent-1", "lead", "reviewer"))
    agent.capture(scope=SCOPE, uri="https://docs.test/e", content=b"e", id="E1")
    reviewer.accept("E1")
    for rid, proposer in (("F1", agent), ("C1", agent), ("L1", lead)):
        proposer.propose(
            scope=SCOPE, claim_key=f"k.{rid}", value=1, kind=Kind.FACT, parents=["E1"], id=rid
        )
    reviewer.accept("F1")
    reviewer.revoke("E1", "wrong page")
    async with team.client("reviewer") as client, team.client("lead") as lead_client:
        # When an approver accepts them
        refusals = {
            rid: await refused(client, "accept_memory", record_id=rid) for rid in ("F1", "C1")
        }
        own = await refused(lead_client, "accept_memory", record_id="L1")
        # Then each refusal says to revalidate it, on a new basis if need be
        for rid, text in refusals.items():
            assert text.endswith(
                f"InvalidTransitionError: record {rid!r} is STALE; accept needs CANDIDATE; a "
                "STALE record is revalidated, not accepted: call revalidate_memory when each "
                "record it rests on is usable again (a revoked or superseded one never is), "
                f"or revalidate {rid!r} with `parents` naming a new "
                "basis of usable records (they replace all its dependencies, declared and "
                "observed; parents=[] if it rests on nothing it read)"
            ), text
        # (its proposer is told another approver must)
        assert own.endswith(
            "; a STALE record is revalidated (revalidate_memory), not accepted, and by an "
            "approver other than its proposer"
        )
        # and following the hint returns each to what it was before it went stale
        fact = await ok(client, "revalidate_memory", record_id="F1", parents=[])
        candidate = await ok(client, "revalidate_memory", record_id="C1", parents=[])
    assert fact["record"]["status"] == "ACCEPTED" and "parents" not in fact["record"]
    assert candidate["record"]["status"] == "CANDIDATE"


async def test_a_revalidation_on_a_stale_dependency_says_parents_replace_declared_and_observed(
    team: Team,
) -> None:
    # Given an accepted inference on accepted evidence, a fact declaring it a parent,
    # and evidence captured by a session that read it (an observed dependency)
    agent, reviewer = team.sessions["agent-1"], team.sessions["reviewer"]
    agent.capture(scope=SCOPE, uri="https://docs.test/e", content=b"e", id="E1")
    reviewer.accept("E1")
    agent.propose(scope=SCOPE, claim_key="i", value=1, kind=Kind.INFERENCE, parents=["E1"], id="I1")
    reviewer.accept("I1")
    agent.propose(scope=SCOPE, claim_key="f", value=1, kind=Kind.FACT, parents=["I1"], id="F2")
    async with team.client("agent-1") as client:
        await ok(client, "get_record", record_id="I1")
        captured = await ok(
            client,
            "capture_evidence",
            scope=SCOPE,
            uri="https://docs.test/b",
            content="b",
            id="Eb2",
        )
    assert captured["record"]["observed"] == ["I1"]
    reviewer.accept("F2")
    reviewer.accept("Eb2")
    # and the evidence under them all revoked: the inference and both on it STALE
    reviewer.revoke("E1", "wrong page")
    async with team.client("reviewer") as client:
        # When the reviewer revalidates what rests on the stale inference
        fact = await refused(client, "revalidate_memory", record_id="F2")
        evidence = await refused(client, "revalidate_memory", record_id="Eb2")
        # Then each refusal says to revalidate the inference first, or give a new basis,
        # which replaces every dependency, observed ones included
        assert "dependency 'I1' of 'F2' is STALE" in fact
        assert fact.endswith(
            "; revalidate 'I1' first, or revalidate 'F2' with `parents` naming a new basis of "
            "usable records (they replace all its dependencies, declared and observed; "
            "parents=[] if it rests on nothing it read)"
        ), fact
        assert "dependency 'I1' of 'Eb2' is STALE" in evidence
        assert evidence.endswith(
            "; revalidate 'I1' first, or revalidate 'Eb2' with parents=[] (evidence names no "
            "parents; [] drops the reads it carries as observed dependencies)"
        ), evidence
        # and so it does: the evidence revalidated on parents=[] rests on nothing
        done = await ok(client, "revalidate_memory", record_id="Eb2", parents=[])
    assert done["record"]["status"] == "ACCEPTED" and "observed" not in done["record"]


async def test_the_output_schemas_are_plain_text_with_the_less_obvious_fields_described(
    team: Team,
) -> None:
    async with team.client("reviewer") as reviewer:
        tools = {t.name: t for t in (await reviewer.list_tools()).tools}
    schemas = {name: json.dumps(tool.output_schema) for name, tool in tools.items()}
    # No Sphinx role reaches a model, and each number is given as its value
    for name, text in schemas.items():
        assert not re.search(r":(func|data|class|meth|mod):`", text), name
        assert '"title"' not in text, name  # the field names again, title-cased
    read = tools["read_memory"].output_schema or {}
    assert f"at most {USABLE_LISTED} (" in read["description"]
    revocation = tools["revoke_memory"].output_schema or {}
    assert f"the first {MAX_SERVED_NODES} ids" in revocation["description"]
    # and the fields a model could not guess are described
    record = (tools["get_record"].output_schema or {})["properties"]
    for field in (
        "effective_expires",
        "expiry_source",
        "observed",
        "cause",
        "cause_superseded_by",
        "stale_causes",
        "supersedes",
        "superseded_by",
        "undeclared",
    ):
        assert record[field].get("description"), field


async def test_proposing_observes_what_was_shown_usable_and_not_what_was_audited(
    team: Team,
) -> None:
    # Given an accepted record in proj-b, where the outsider may read and audit
    outsider = team.sessions["outsider"]
    team.ledger.admin().grant("checker", scope=OTHER, roles=["approve"])
    checker = team.ledger.authenticate(team.ledger.admin().issue_token("checker"))
    outsider.propose(scope=OTHER, claim_key="a", value=1, kind=Kind.FACT, id="A1")
    checker.accept("A1")
    async with team.client("outsider") as client:
        # When it audits the record, then proposes
        await ok(client, "audit_record", record_id="A1")
        after_audit = await ok(
            client, "propose_memory", scope=OTHER, claim_key="b", value=1, kind="fact"
        )
        # and reads it, then proposes
        await ok(client, "get_record", record_id="A1")
        after_read = await ok(
            client, "propose_memory", scope=OTHER, claim_key="c", value=1, kind="fact"
        )
        tools = {t.name: t.description or "" for t in (await client.list_tools()).tools}
    # Then only the read is an observed dependency, as the description says
    assert "observed" not in after_audit["record"] and after_read["record"]["observed"] == ["A1"]
    assert "usable records this session was shown" in tools["propose_memory"]
    assert "not audited" in tools["propose_memory"]
    assert "Everything you read" not in tools["propose_memory"]
    # and a capture carries them too, and says how it returns once one is withdrawn
    assert "Like a proposal, it carries the usable records" in tools["capture_evidence"]
    assert "revalidates it with parents=[]" in tools["capture_evidence"]


async def test_read_memory_answers_with_the_claim_key_as_stored_not_as_given(team: Team) -> None:
    # Given a claim stored under its NFC key
    team.sessions["lead"].propose(
        scope=SCOPE, claim_key="caf\u00e9.menu", value="soup", kind=Kind.FACT, id="M1"
    )
    team.sessions["reviewer"].accept("M1")
    async with team.client("agent-1") as client:
        # When the agent asks for it in NFD, and for a claim nothing answers
        found = await ok(client, "read_memory", scope=SCOPE, claim_key="cafe\u0301.menu")
        missing = await ok(client, "read_memory", scope=SCOPE, claim_key="cafe\u0301.none")
    # Then each answer names the key in NFC, as explain_memory and the records do
    assert found["outcome"] == "FOUND" and found["claim_key"] == "caf\u00e9.menu"
    assert missing["outcome"] == "MISSING" and missing["claim_key"] == "caf\u00e9.none"


async def test_the_record_resource_is_compact_json_as_get_records_text_is(team: Team) -> None:
    await accepted_evidence(team, "E1")
    async with team.client("agent-1") as agent:
        content = (await agent.read_resource(record_uri("E1"))).contents[0]
        result = await agent.call_tool("get_record", {"record_id": "E1"})
    assert content.text == result.content[0].text
    compact = json.dumps(json.loads(content.text), ensure_ascii=False, separators=(",", ":"))
    assert content.text == compact


# -- the documentation ---------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def _agent_section() -> str:
    """The README's "Use it from an agent" section."""
    text = (ROOT / "README.md").read_text()
    assert "## Use it from an agent" in text
    return text.split("## Use it from an agent", 1)[1].split("\n## ", 1)[0]


def test_the_documented_session_prints_the_documented_transcript(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    section = _agent_section().split("### A session without a model", 1)[1]
    script = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    transcript = re.findall(r"```text\n(.*?)```", section, flags=re.S)[0]
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()

    with contextlib.redirect_stdout(printed):
        exec(compile(script, "the documented session", "exec"), {"__name__": "session"})

    assert printed.getvalue() == transcript, printed.getvalue()


def test_the_documented_client_configuration_runs_provledger_mcp_with_the_token_in_env() -> None:
    section = _agent_section()
    config = json.loads(re.findall(r"```json\n(.*?)```", section, flags=re.S)[0])
    server = config["mcpServers"]["provledger"]
    # The command by its full path (a client's PATH may not reach the venv's bin).
    assert server["command"].endswith("/.venv/bin/provledger") and server["args"][0] == "mcp"
    assert "PROVLEDGER_TOKEN" in server["env"] and "--token" not in server["args"]
    documented = set(re.findall(r"^\| `(\w+)`(?: / `(\w+)`)? \|", section, flags=re.M))
    assert {name for pair in documented for name in pair if name} == {*MEMORY_TOOLS, *APPROVALS}
