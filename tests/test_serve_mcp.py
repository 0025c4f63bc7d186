"""The MCP streamable-HTTP endpoint at ``/mcp``: one MCP server per bearer token.

The mount is exercised with a real ``MCPServer`` from the ``mcp`` SDK, built per
token by a factory given to ``create_app`` (the ledger's own server comes from
``ledger.integrations.mcp.build_server``, the default factory), behind uvicorn.
"""

from __future__ import annotations

import gzip
import importlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ledger import Kind, Ledger
from ledger.serve import create_app
from ledger.serve.app import ACCESS_LOGGER
from tests.serve_support import running

mcpserver = pytest.importorskip("mcp.server.mcpserver")

ACCEPT = {"Accept": "application/json, text/event-stream"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


def _whoami_factory(ledger: Ledger, token: str) -> Any:
    server = mcpserver.MCPServer(name="whoami")

    @server.tool()
    def whoami() -> str:
        return ledger.authenticate(token).principal

    return server


def _messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a streamable-HTTP answer (SSE or plain JSON)."""
    if response.headers["content-type"].startswith("application/json"):
        return [response.json()]
    return [
        json.loads(line[len("data: ") :])
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]


def _rpc(base: str, token: str, message: dict[str, Any], session: str | None = None) -> Any:
    headers = {**ACCEPT, "Authorization": f"Bearer {token}"}
    if session is not None:
        headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
    return httpx.post(f"{base}/mcp", json=message, headers=headers, timeout=30)


@pytest.fixture
def tokens(ledger: Ledger) -> dict[str, str]:
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["read", "propose"])
    admin.grant("agent-2", scope="proj-b", roles=["read"])
    return {name: admin.issue_token(name) for name in ("agent-1", "agent-2")}


@pytest.fixture
def base(ledger: Ledger) -> Iterator[str]:
    with running(create_app(ledger, mcp_factory=_whoami_factory)) as url:
        yield url


def test_each_bearer_token_gets_an_mcp_server_acting_as_its_principal(
    base: str, tokens: dict[str, str]
) -> None:
    for name, token in tokens.items():
        init = _rpc(base, token, INIT)
        assert init.status_code == 200
        session = init.headers["mcp-session-id"]
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "whoami"}}
        [answer] = _messages(_rpc(base, token, call, session))
        assert answer["result"]["structuredContent"] == {"result": name}


def test_the_mcp_endpoint_refuses_a_token_in_its_address_as_the_api_does(
    base: str, tokens: dict[str, str]
) -> None:
    token = tokens["agent-1"]
    headers = {**ACCEPT, "Authorization": f"Bearer {token}"}
    r = httpx.post(f"{base}/mcp", params={"token": token}, json=INIT, headers=headers)
    assert r.status_code == 422 and token not in r.text, r.text
    assert r.json()["error"]["message"].startswith("query parameter 'token' holds a token")


def test_the_mcp_endpoint_refuses_a_missing_or_bad_token(base: str) -> None:
    missing = httpx.post(f"{base}/mcp", json=INIT, headers=ACCEPT)
    assert missing.status_code == 401
    assert missing.json()["error"]["type"] == "AuthenticationError"
    bad = _rpc(base, "plt_wrong", INIT)
    assert bad.status_code == 401
    slashed = httpx.post(f"{base}/mcp/", json=INIT, headers=ACCEPT)  # the same endpoint
    assert slashed.status_code == 401
    assert slashed.json()["error"]["type"] == "AuthenticationError"


def test_the_mcp_endpoint_refuses_a_coded_body_as_the_api_does(
    base: str, tokens: dict[str, str]
) -> None:
    # A plain body labelled gzip was read as it came; a gzip one was a parse error.
    headers = {
        **ACCEPT,
        "Authorization": f"Bearer {tokens['agent-1']}",
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
    }
    for body in (json.dumps(INIT).encode(), gzip.compress(json.dumps(INIT).encode())):
        r = httpx.post(f"{base}/mcp", content=body, headers=headers, timeout=30)
        assert r.status_code == 415, r.text
        assert "Content-Encoding 'gzip'" in r.json()["error"]["message"]
    # And a Content-Type given twice, whichever first (the SDK reads only the first)
    auth = [("Authorization", f"Bearer {tokens['agent-1']}"), *ACCEPT.items()]
    for types in (["application/json", "text/plain"], ["text/plain", "application/json"]):
        twice = [*auth, *(("Content-Type", media) for media in types)]
        r = httpx.post(f"{base}/mcp", content=json.dumps(INIT).encode(), headers=twice)
        assert r.status_code == 415, r.text
        assert r.json()["error"]["message"].startswith("Content-Type is given 2 times")


def test_an_mcp_session_opened_with_one_token_is_unknown_to_another(
    base: str, tokens: dict[str, str]
) -> None:
    session = _rpc(base, tokens["agent-1"], INIT).headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    assert _rpc(base, tokens["agent-2"], listing, session).status_code == 404
    assert _rpc(base, tokens["agent-1"], listing, session).status_code == 200


def test_the_default_mcp_server_is_the_ledger_integration_when_installed(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    with running(create_app(ledger)) as url:
        r = _rpc(url, tokens["agent-1"], INIT)
        try:
            importlib.import_module("ledger.integrations.mcp")
            installed = True
        except ImportError:
            installed = False
        if not installed:
            assert r.status_code == 501
            assert "install the 'mcp' extra" in r.json()["error"]["message"]
            return
        assert r.status_code == 200
        session = r.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        [answer] = _messages(_rpc(url, tokens["agent-1"], listing, session))
        names = {tool["name"] for tool in answer["result"]["tools"]}
        assert {"read_memory", "propose_memory", "capture_evidence"} <= names


def test_a_token_keeps_at_most_its_share_of_open_mcp_sessions(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    with running(create_app(ledger, mcp_factory=_whoami_factory, mcp_sessions=2)) as url:
        # Given agent-1 holds two open sessions, its share
        first = _rpc(url, tokens["agent-1"], INIT).headers["mcp-session-id"]
        assert _rpc(url, tokens["agent-1"], INIT).status_code == 200
        # Then a third is refused while they are open, and another token is not
        refused = _rpc(url, tokens["agent-1"], INIT)
        assert refused.status_code == 503
        assert "Too many open sessions" in refused.text
        assert _rpc(url, tokens["agent-2"], INIT).status_code == 200
        # And once one is closed, agent-1 opens another
        closed = httpx.delete(
            f"{url}/mcp",
            headers={
                **ACCEPT,
                "Authorization": f"Bearer {tokens['agent-1']}",
                "mcp-session-id": first,
                "mcp-protocol-version": "2025-06-18",
            },
        )
        assert closed.status_code == 200
        assert _rpc(url, tokens["agent-1"], INIT).status_code == 200


def test_a_revoked_tokens_mcp_server_and_sessions_are_dropped(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    app = create_app(ledger, mcp_factory=_whoami_factory)
    with running(app) as url:
        session = _rpc(url, tokens["agent-1"], INIT).headers["mcp-session-id"]
        assert _rpc(url, tokens["agent-2"], INIT).status_code == 200
        assert app.state.mcp.servers == 2
        # When agent-1's token is revoked, its next request is refused
        ledger.admin().revoke_token(tokens["agent-1"])
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        assert _rpc(url, tokens["agent-1"], listing, session).status_code == 401
        # Then its server (and the sessions it held) is gone; agent-2's stays
        assert app.state.mcp.servers == 1
        assert _rpc(url, tokens["agent-2"], INIT).status_code == 200


def test_the_access_log_names_the_principal_of_an_mcp_request(
    base: str, tokens: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER):
        assert _rpc(base, tokens["agent-1"], INIT).status_code == 200
        assert _rpc(base, "plt_wrong", INIT).status_code == 401
    lines = [r.getMessage() for r in caplog.records if r.name == ACCESS_LOGGER]
    assert [line.split(' "')[0].rsplit(" - ", 1)[1] for line in lines] == ["agent-1", "-"]
    assert all('"POST /mcp HTTP/1.1"' in line for line in lines), lines


def test_each_mcp_session_is_a_run_of_its_own_ended_with_the_session(tmp_path: Any) -> None:
    import sqlite3
    import time
    from contextlib import closing

    from ledger import Kind

    # Given K1 accepted, and an agent's two MCP sessions on the served ledger
    path = tmp_path / "ledger.db"
    led = Ledger.open(f"sqlite:///{path}")
    admin = led.admin()
    admin.grant("agent-1", scope="proj-a", roles=["read", "propose"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
    token = admin.issue_token("agent-1")
    led.authenticate(token).propose("proj-a", "k", 1, Kind.FACT, id="K1")
    led.authenticate(admin.issue_token("reviewer")).accept("K1")
    try:
        with running(create_app(led)) as base:
            first, second = (_session(base, token) for _ in range(2))

            def call(sid: str, tool: str, **arguments: Any) -> Any:
                message = {
                    "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments},
                }  # fmt: skip
                answer = _messages(_rpc(base, token, message, sid))[0]["result"]
                assert not answer.get("isError"), answer
                return answer["structuredContent"]

            # When the first session reads K1, and each session then proposes
            assert call(first, "read_memory", scope="proj-a", claim_key="k")["outcome"] == "FOUND"
            other = call(second, "propose_memory", scope="proj-a", claim_key="p", value=2,
                         kind="plan", id="P2")  # fmt: skip
            own = call(first, "propose_memory", scope="proj-a", claim_key="p", value=1,
                       kind="plan", id="P1")  # fmt: skip
            # Then only the proposal of the session that read K1 rests on it, each
            # session in a run of its own
            assert led.authenticate(token).get("P1").observed == ("K1",)
            assert led.authenticate(token).get("P2").observed == ()
            assert own["run_id"] != other["run_id"]
            # And a session the client ends ends its run
            headers = {"Authorization": f"Bearer {token}", "mcp-session-id": first}
            headers |= {"mcp-protocol-version": "2025-06-18"}
            assert httpx.delete(f"{base}/mcp", headers=headers, timeout=30).status_code == 200
            deadline = time.monotonic() + 30
            while True:
                with closing(sqlite3.connect(path)) as c:
                    ended = dict(c.execute("SELECT run_id, ended_pos FROM pl_runs").fetchall())
                if ended.get(own["run_id"]) is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.1)  # ended just after the DELETE is answered
            assert ended[own["run_id"]] is not None
            assert ended[other["run_id"]] is None  # still open
        # And the server's stop ends every run still open
        with closing(sqlite3.connect(path)) as c:
            still = c.execute("SELECT count(*) FROM pl_runs WHERE ended_pos IS NULL").fetchone()
        assert still == (0,)
    finally:
        led.close()


def _session(base: str, token: str) -> str:
    """A new MCP session of ``token`` (2025-06-18, initialized): its id."""
    opened = _rpc(base, token, INIT)
    assert opened.status_code == 200, opened.text
    sid = opened.headers["mcp-session-id"]
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert _rpc(base, token, ready, sid).status_code == 202
    return str(sid)


def test_a_protocol_without_sessions_is_refused_and_each_sdk_client_gets_its_own_run(
    tmp_path: Any,
) -> None:
    import sqlite3
    from contextlib import closing

    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    # Given an agent on the served ledger and an accepted record K1
    path = tmp_path / "ledger.db"
    led = Ledger.open(f"sqlite:///{path}")
    admin = led.admin()
    admin.grant("agent-1", scope="proj-a", roles=["read", "propose"])
    admin.grant("reviewer", scope="proj-a", roles=["read", "approve"])
    token = admin.issue_token("agent-1")
    agent = led.authenticate(token)
    agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="K1")
    led.authenticate(admin.issue_token("reviewer")).accept("K1")

    def runs() -> int:
        with closing(sqlite3.connect(path)) as c:
            (count,) = c.execute("SELECT count(*) FROM pl_runs").fetchone()
        return int(count)

    async def two_clients(base: str) -> list[str]:
        def client() -> Any:
            headers = {"Authorization": f"Bearer {token}"}
            http = httpx2.AsyncClient(headers=headers)
            return Client(streamable_http_client(f"{base}/mcp", http_client=http))

        async with client() as a, client() as b:
            versions = [a.session.protocol_version, b.session.protocol_version]
            await a.call_tool("read_memory", {"scope": "proj-a", "claim_key": "k"})
            for who, rid in ((a, "A1"), (b, "B1")):
                args = {"scope": "proj-a", "claim_key": rid, "value": 1, "kind": "inference"}
                done = await who.call_tool("propose_memory", {**args, "id": rid})
                assert not done.is_error, done
        return versions

    try:
        with running(create_app(led)) as base:
            # When a request of the 2026 protocol (which has no sessions) calls a tool
            headers = {
                "Authorization": f"Bearer {token}", **ACCEPT,
                "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
                "Mcp-Name": "read_memory",
            }  # fmt: skip
            meta = {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
            body = {
                "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "read_memory", "_meta": meta,
                           "arguments": {"scope": "proj-a", "claim_key": "k"}},
            }  # fmt: skip
            refused = httpx.post(f"{base}/mcp", json=body, headers=headers, timeout=30)
            # Then it is refused, naming the versions served, and no run is started
            assert refused.status_code == 400, refused.text
            answer = refused.json()
            assert answer["id"] == 7 and answer["error"]["code"] == -32022
            assert answer["error"]["data"] == {
                "supported": ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"],
                "requested": "2026-07-28",
            }
            assert "protocol 2026-07-28 has no sessions" in answer["error"]["message"]
            assert runs() == 0
            # And the MCP SDK's Client, told so, opens a session; two clients of one
            # token each get their own run: what one read is not the other's basis
            versions = anyio.run(two_clients, base)
        assert versions == ["2025-11-25", "2025-11-25"]
        assert agent.get("A1").observed == ("K1",)
        assert agent.get("B1").observed == ()
        assert runs() == 2
    finally:
        led.close()


def test_a_delete_the_sdk_refuses_ends_no_run(tmp_path: Any) -> None:
    import time

    led, token = _agent_on_file(tmp_path)

    def propose(base: str, sid: str, rid: str) -> str:
        return _proposed_in_run(base, token, sid, rid)

    try:
        with running(create_app(led)) as base:
            # Given a session in its run
            sid = _session(base, token)
            first = propose(base, sid, "P1")
            # When a DELETE naming it is refused (a protocol version without sessions)
            headers = {"Authorization": f"Bearer {token}", "mcp-session-id": sid}
            headers |= {"mcp-protocol-version": "2026-07-28"}
            refused = httpx.delete(f"{base}/mcp", headers=headers, timeout=30)
            assert not 200 <= refused.status_code < 300
            time.sleep(0.5)  # (a run ended would be ended by now)
            # Then the session goes on in the same run
            assert propose(base, sid, "P2") == first
    finally:
        led.close()


def test_a_delete_naming_two_sessions_ends_the_run_of_the_first_as_the_sdk_reads_it(
    tmp_path: Any,
) -> None:
    import time

    led, token = _agent_on_file(tmp_path)

    def propose(base: str, sid: str, rid: str) -> str:
        return _proposed_in_run(base, token, sid, rid)

    try:
        with running(create_app(led)) as base:
            # Given two sessions, each in its run
            first, second = _session(base, token), _session(base, token)
            propose(base, first, "A1")
            run = propose(base, second, "B1")
            # When a DELETE names the first, then the second
            headers = [("authorization", f"Bearer {token}"), ("mcp-session-id", first)]
            headers += [("mcp-session-id", second), ("mcp-protocol-version", "2025-06-18")]
            ended = httpx.delete(f"{base}/mcp", headers=headers, timeout=30)
            assert ended.status_code == 200, ended.text
            time.sleep(0.5)  # (a run ended would be ended by now)
            # Then the second session goes on in its run (the SDK ended the first)
            assert propose(base, second, "B2") == run
    finally:
        led.close()


def _agent_on_file(tmp_path: Any) -> tuple[Ledger, str]:
    """An SQLite ledger in ``tmp_path`` where agent-1 may read and propose in
    proj-a, and agent-1's token."""
    led = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    admin = led.admin()
    admin.grant("agent-1", scope="proj-a", roles=["read", "propose"])
    return led, admin.issue_token("agent-1")


def _proposed_in_run(base: str, token: str, sid: str, rid: str) -> str:
    """Propose ``rid`` (a fact) in session ``sid``; the run it was proposed in."""
    message = {
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "propose_memory", "arguments": {
            "scope": "proj-a", "claim_key": rid, "value": 1, "kind": "fact", "id": rid}},
    }  # fmt: skip
    answer = _messages(_rpc(base, token, message, sid))[0]["result"]
    return str(answer["structuredContent"]["run_id"])


def test_a_call_giving_a_name_twice_is_a_parse_error_as_over_stdio(tmp_path: Any) -> None:
    # Given an agent's MCP session on the served ledger
    led = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    admin = led.admin()
    admin.grant("agent-1", scope="proj-a", roles=["read", "propose"])
    token = admin.issue_token("agent-1")
    try:
        with running(create_app(led)) as base:
            sid = _session(base, token)
            before = led.position
            # When a call gives "parents" twice, the second empty
            body = (
                '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":'
                '"propose_memory","arguments":{"scope":"proj-a","claim_key":"d","value":1,'
                '"kind":"fact","parents":["E1"],"parents":[],"id":"D1"}}}'
            )
            headers = {
                **ACCEPT,
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "mcp-session-id": sid,
                "mcp-protocol-version": "2025-06-18",
            }
            r = httpx.post(f"{base}/mcp", content=body, headers=headers, timeout=30)
            # Then it is refused, naming the name, its id kept; nothing is written
            assert r.status_code == 400, r.text
            assert r.json() == {
                "jsonrpc": "2.0",
                "id": 7,
                "error": {
                    "code": -32700,
                    "message": "Parse error: the name 'parents' is given twice in one "
                    "object: give each once (which value would count is not said)",
                },
            }
            assert led.position == before
            # (but a body the SDK's checks of the headers refuse is refused so first,
            # unread: a web page's text/plain form, say)
            plain = {**headers, "Content-Type": "text/plain"}
            r = httpx.post(f"{base}/mcp", content=body, headers=plain, timeout=30)
            assert (r.status_code, r.text) == (400, "Invalid Content-Type header")
            # and the same call giving it once is served
            once = body.replace('"parents":["E1"],', "")
            r = httpx.post(f"{base}/mcp", content=once, headers=headers, timeout=30)
            assert _messages(r)[0]["result"]["structuredContent"]["id"] == "D1"
    finally:
        led.close()
