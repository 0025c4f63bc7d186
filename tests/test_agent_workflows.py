"""Agent workflows through the two agent surfaces, as an agent runs them.

MCP: ``mcp.Client(build_server(ledger, token))`` in process, an agent and a
reviewer on one ledger. A connection whose reads were withdrawn since is told,
in one refusal, every record in the way and the listing that shows them, so it
goes on after one call instead of one refusal per record.

LangGraph: ``LedgerStore`` refusals name the store's own operation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from mcp import Client

from ledger import Kind, Ledger
from ledger.errors import AccessDeniedError
from ledger.integrations.langgraph import LedgerStore
from ledger.integrations.mcp import build_server
from tests.test_mcp import ok, refused

SCOPE = "proj-a"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def tokens(ledger: Ledger) -> dict[str, str]:
    admin = ledger.admin()
    admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read"])
    return {who: admin.issue_token(who) for who in ("agent-1", "reviewer")}


@asynccontextmanager
async def connected(ledger: Ledger, token: str) -> AsyncIterator[Client]:
    """A new MCP connection (a new run) acting with ``token``."""
    async with Client(build_server(ledger, token)) as client:
        yield client


def _derived(ledger: Ledger, tokens: dict[str, str], count: int) -> None:
    """BASE (accepted) and ``count`` accepted inferences D0… resting on it."""
    agent, reviewer = (ledger.authenticate(tokens[who]) for who in ("agent-1", "reviewer"))
    reviewer.accept(agent.propose(SCOPE, "base", "b", Kind.FACT, id="BASE"))
    for i in range(count):
        rid = agent.propose(SCOPE, f"derived.{i}", i, Kind.INFERENCE, parents=["BASE"], id=f"D{i}")
        reviewer.accept(rid)


@pytest.mark.anyio
async def test_a_proposal_refused_for_reads_withdrawn_since_names_each_and_how_to_go_on(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    # Given a connection that listed four derived records and read M1
    _derived(ledger, tokens, 4)
    reviewer = ledger.authenticate(tokens["reviewer"])
    reviewer.accept(ledger.authenticate(tokens["agent-1"]).propose(SCOPE, "m", 1, "fact", id="M1"))
    async with connected(ledger, tokens["agent-1"]) as agent:
        listed = await ok(agent, "list_records", scope=SCOPE, claim_prefix="derived.")
        assert [r["id"] for r in listed["records"]] == ["D0", "D1", "D2", "D3"]
        await ok(agent, "read_memory", scope=SCOPE, claim_key="m")
        # and since then it replaced M1 itself, and BASE was revoked
        await ok(
            agent,
            "propose_memory",
            scope=SCOPE,
            claim_key="m",
            value=2,
            kind="fact",
            supersedes="M1",
            id="M2",
        )
        reviewer.accept("M2")
        reviewer.revoke("BASE", reason="the page changed")
        position = ledger.position

        # When it proposes
        text = await refused(
            agent, "propose_memory", scope=SCOPE, claim_key="n", value=1, kind="fact"
        )

        # Then one refusal names every record in the way and the listings showing them
        assert ledger.position == position
        assert "InvalidParentError: observed dependency 'D0'" in text
        for rid in ("D0", "D1", "D2", "D3"):
            assert f"{rid!r} (STALE)" in text
        assert "'M1' (SUPERSEDED)" in text
        assert f"list_records(scope={SCOPE!r}, status='STALE')" in text
        assert f"list_records(scope={SCOPE!r}, status='SUPERSEDED')" in text

        # and doing what it says lets the next proposal through
        await ok(agent, "list_records", scope=SCOPE, status="STALE")
        await ok(agent, "list_records", scope=SCOPE, status="SUPERSEDED")
        made = await ok(agent, "propose_memory", scope=SCOPE, claim_key="n", value=1, kind="fact")
        assert made["status"] == "CANDIDATE" and "observed" not in made["record"]  # none: left out


@pytest.mark.anyio
async def test_a_refused_capture_names_the_reads_withdrawn_since_too(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    _derived(ledger, tokens, 2)
    async with connected(ledger, tokens["agent-1"]) as agent:
        await ok(agent, "list_records", scope=SCOPE, claim_prefix="derived.")
        ledger.authenticate(tokens["reviewer"]).revoke("BASE", reason="gone")
        position = ledger.position
        text = await refused(
            agent, "capture_evidence", scope=SCOPE, uri="https://docs.test/p", content="page"
        )
        assert ledger.position == position
        assert "'D0' (STALE), 'D1' (STALE)" in text
        await ok(agent, "get_record", record_id="D0")
        await ok(agent, "get_record", record_id="D1")
        await ok(agent, "capture_evidence", scope=SCOPE, uri="https://docs.test/p", content="page")


@pytest.mark.anyio
async def test_a_refusal_for_a_record_no_longer_readable_names_no_other(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    # A record the token cannot read is never named by the hint (the ledger names
    # the one it met; the hint only lists what the token may see).
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-b", roles=["read"])
    admin.grant("owner", scope="proj-b", roles=["propose", "approve"])
    admin.grant("second", scope="proj-b", roles=["approve"])
    owner = ledger.authenticate(admin.issue_token("owner"))
    ledger.authenticate(admin.issue_token("second")).accept(
        owner.propose("proj-b", "b", 1, Kind.FACT, id="B1")
    )
    async with connected(ledger, tokens["agent-1"]) as agent:
        await ok(agent, "read_memory", scope="proj-b", claim_key="b")
        admin.revoke_grant("agent-1", scope="proj-b")
        text = await refused(
            agent, "propose_memory", scope=SCOPE, claim_key="n", value=1, kind="fact"
        )
    assert "'B1'" in text
    assert "This connection was shown" not in text


def test_a_langgraph_delete_without_read_is_refused_as_a_delete(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    admin = ledger.admin()
    admin.grant("agent-1", scope="write-only", roles=["propose"])
    store = LedgerStore(ledger, token=tokens["agent-1"], approver_token=tokens["reviewer"])
    position = ledger.position
    for namespace in (("write-only", "notes"), ("no-grant", "notes")):
        with pytest.raises(AccessDeniedError) as info:
            store.delete(namespace, "k")
        assert str(info.value) == (
            f"delete refused: 'agent-1' lacks role 'read' in scope {namespace[0]!r}"
        )
    # And every other operation is named as the store's, not as the ledger call
    # it makes (read, records, propose)
    calls = {
        "get": lambda: store.get(("write-only", "notes"), "k"),
        "search": lambda: store.search(("write-only",)),
        "put": lambda: store.put(("write-only", "notes"), "k", {"v": 1}),
        "list_namespaces": lambda: store.list_namespaces(prefix=("write-only",)),
    }
    for name, call in calls.items():
        with pytest.raises(AccessDeniedError) as info:
            call()
        assert str(info.value) == (
            f"{name} refused: 'agent-1' lacks role 'read' in scope 'write-only'"
        )
    with pytest.raises(AccessDeniedError) as info:
        store.put(("no-grant", "notes"), "k", {"v": 1})
    assert str(info.value) == "put refused: 'agent-1' lacks role 'propose' in scope 'no-grant'"
    assert ledger.position == position
    store.close()
