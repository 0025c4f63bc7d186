"""``provledger serve`` under load: writes waiting for the ledger's lock leave the
threads that reads and console pages run in.

A writer waits for the ledger's write lock in a worker thread, up to the lock
timeout. Writes piling up behind a lock another process holds (a backup, a
rebuild, another host's writer) run under a limit of their own, so the API's
reads and the console's pages still answer while they wait.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger import Kind, Ledger
from ledger.serve import create_app, threads
from ledger.serve.threads import WRITE_THREADS
from tests.serve_support import running

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: More writes at once than Starlette's pool has threads (40).
WRITES = 45


@pytest.fixture
def flooded(tmp_path: Path) -> Iterator[tuple[str, Path, str, str]]:
    """A served SQLite ledger whose writers wait up to 120 s for the lock: its base
    URL, its file, an agent's token and a reader's token."""
    path = tmp_path / "ledger.db"
    led = Ledger.open(f"sqlite:///{path}?timeout=120")
    try:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("auditor", scope="proj-a", roles=["read"])
        agent_token = admin.issue_token("agent-1")
        reader_token = admin.issue_token("auditor")
        led.authenticate(agent_token).propose("proj-a", "k", 1, Kind.FACT, id="M1")
        with running(create_app(led)) as base:
            yield base, path, agent_token, reader_token
    finally:
        led.close()


def _writes_in(deadline: float = 60) -> int:
    """The writes the server has taken in (under way or waiting for a turn), once
    ``WRITES`` have been or the deadline passed."""
    end = time.monotonic() + deadline
    while True:
        taken = sum(
            limit.borrowed_tokens + limit.statistics().tasks_waiting
            for limit in list(threads._write_limits.values())
        )
        if taken >= WRITES or time.monotonic() > end:
            return taken
        time.sleep(0.05)


def test_a_read_answers_while_more_writes_than_the_pool_has_threads_wait_for_the_lock(
    flooded: tuple[str, Path, str, str],
) -> None:
    base, path, agent_token, reader_token = flooded
    # Given another process's connection holding the ledger's write lock
    holder = sqlite3.connect(path, isolation_level=None)
    with closing(holder):
        holder.execute("BEGIN IMMEDIATE")
        # And 45 agents' writes waiting for it (each may wait 120 s)
        answers: list[int] = []

        def write(i: int) -> None:
            r = httpx.post(
                f"{base}/api/v1/records",
                headers={"Authorization": f"Bearer {agent_token}"},
                json={"scope": "proj-a", "claim_key": f"f{i}", "value": i, "kind": "fact"},
                timeout=300,
            )
            answers.append(r.status_code)

        # When a reader asks for a record while they wait, the lock still held
        # (a read that found no thread would wait the writers' 120 s: 60 s fails it)
        writers, read, answers_meanwhile = _read_while_waiting(write, answers, base, reader_token)
        # Then it was answered, while no write had been
        assert read.status_code == 200, read.text
        assert read.json()["id"] == "M1"
        assert answers_meanwhile == 0
        holder.execute("ROLLBACK")
    # And once the lock is let go every write is made
    for t in writers:
        t.join(timeout=240)
    assert answers == [201] * WRITES
    with closing(sqlite3.connect(path)) as c:
        (made,) = c.execute(
            "SELECT count(*) FROM pl_records WHERE claim_key LIKE 'f%' AND to_pos IS NULL"
        ).fetchone()
    assert made == WRITES
    assert WRITE_THREADS < 40 < WRITES


def test_a_read_answers_while_more_mcp_calls_than_the_pool_has_threads_wait_for_the_lock(
    flooded: tuple[str, Path, str, str],
) -> None:
    pytest.importorskip("mcp.server.mcpserver")
    base, path, agent_token, reader_token = flooded
    # Given an agent's MCP session on the served ledger
    headers = _mcp_session(base, agent_token)
    holder = sqlite3.connect(path, isolation_level=None)
    with closing(holder):
        # And another process's connection holding the ledger's write lock, while
        # the agent makes 45 calls (each records in the session's run: a write)
        holder.execute("BEGIN IMMEDIATE")
        answers: list[int] = []

        def call(i: int) -> None:
            message = {
                "jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                "params": {"name": "get_record", "arguments": {"record_id": "M1"}},
            }  # fmt: skip
            r = httpx.post(f"{base}/mcp", json=message, headers=headers, timeout=300)
            answers.append(r.status_code)

        # When a reader asks the API for a record meanwhile, the lock still held
        callers, read, answered_meanwhile = _read_while_waiting(call, answers, base, reader_token)
        # Then it was answered, while no call had been
        assert read.status_code == 200, read.text
        assert answered_meanwhile == 0
        holder.execute("ROLLBACK")
    # And once the lock is let go every call is answered
    for t in callers:
        t.join(timeout=240)
    assert answers == [200] * WRITES


def test_mcp_posts_whose_bodies_have_not_arrived_hold_no_writers_turn(
    flooded: tuple[str, Path, str, str],
) -> None:
    import socket
    from urllib.parse import urlsplit

    pytest.importorskip("mcp.server.mcpserver")
    base, _, agent_token, _ = flooded
    where = urlsplit(base)
    # Given more MCP POSTs than writes may run at once, each sending its body slowly
    slow = []
    try:
        for _ in range(WRITE_THREADS + 1):
            sock = socket.create_connection((where.hostname, where.port))
            sock.sendall(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Accept: application/json, text/event-stream\r\n"
                + f"Authorization: Bearer {agent_token}\r\n".encode()
                + b'Content-Length: 1000\r\n\r\n{"jsonrpc":'
            )
            slow.append(sock)
        time.sleep(0.5)  # each reaches the endpoint and waits for the rest of its body
        # When an agent proposes through the API meanwhile
        made = httpx.post(
            f"{base}/api/v1/records",
            headers={"Authorization": f"Bearer {agent_token}"},
            json={"scope": "proj-a", "claim_key": "k2", "value": 2, "kind": "fact"},
            timeout=20,
        )
    finally:
        for sock in slow:
            sock.close()
    # Then it is made at once: a body still arriving holds no writer's turn
    assert made.status_code == 201, made.text


def test_a_call_whose_answer_a_later_request_took_holds_no_turn_once_its_work_is_done(
    flooded: tuple[str, Path, str, str],
) -> None:
    pytest.importorskip("mcp.server.mcpserver")
    base, path, agent_token, _ = flooded
    holder = sqlite3.connect(path, isolation_level=None)
    callers = []
    with closing(holder):
        # Given another process holding the ledger's write lock
        holder.execute("BEGIN IMMEDIATE")
        # And more sessions than writes may run at once, each calling a tool, then
        # pinging with the call's request id (the SDK hands the ping the call's
        # answer stream: the call is answered to nobody)
        for _ in range(WRITE_THREADS + 1):
            session = _mcp_session(base, agent_token)
            call = {
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "get_record", "arguments": {"record_id": "M1"}},
            }  # fmt: skip

            def calling(sent: dict[str, str] = session, message: Any = call) -> None:
                with suppress(httpx.HTTPError):
                    httpx.post(f"{base}/mcp", json=message, headers=sent, timeout=5)

            t = threading.Thread(target=calling)
            t.start()
            callers.append(t)
            time.sleep(0.3)  # the call waits for the lock
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            httpx.post(f"{base}/mcp", json=ping, headers=session, timeout=30)
        # When the lock is let go (each call's work is then done)
        holder.execute("ROLLBACK")
    for t in callers:
        t.join(timeout=60)
    # Then a write through the API is made at once: no turn is left held
    made = httpx.post(
        f"{base}/api/v1/records",
        headers={"Authorization": f"Bearer {agent_token}"},
        json={"scope": "proj-a", "claim_key": "k3", "value": 3, "kind": "fact"},
        timeout=20,
    )
    assert made.status_code == 201, made.text


def _read_while_waiting(
    send: Callable[[int], None], answers: list[int], base: str, reader_token: str
) -> tuple[list[threading.Thread], httpx.Response, int]:
    """Start ``WRITES`` senders (``send(i)``, each adding its status to ``answers``),
    wait until the server has taken them all in, then read M1 through the API: the
    senders, the read's answer, and how many senders were answered before it."""
    senders = [threading.Thread(target=send, args=(i,)) for i in range(WRITES)]
    for t in senders:
        t.start()
    assert _writes_in() == WRITES
    with httpx.Client(base_url=base, timeout=60) as client:
        read = client.get("/api/v1/records/M1", headers={"Authorization": f"Bearer {reader_token}"})
        meanwhile = len(answers)
    return senders, read, meanwhile


def _mcp_session(base: str, token: str) -> dict[str, str]:
    """The headers of a new, initialized MCP session (protocol 2025-06-18) of ``token``."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "load", "version": "1"}},
    }  # fmt: skip
    opened = httpx.post(f"{base}/mcp", json=init, headers=headers, timeout=30)
    assert opened.status_code == 200, opened.text
    headers |= {"mcp-session-id": opened.headers["mcp-session-id"]}
    headers |= {"mcp-protocol-version": "2025-06-18"}
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx.post(f"{base}/mcp", json=ready, headers=headers, timeout=30).status_code == 202
    return headers
