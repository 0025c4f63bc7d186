"""``provledger serve`` starts the server on the given host and port."""

from __future__ import annotations

import json
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from ledger import Ledger
from ledger.serve import create_app
from tests.serve_support import free_port


def first_answer(
    server: subprocess.Popen[Any], get: Callable[[], httpx.Response]
) -> httpx.Response:
    """``get()``'s answer once the server listens (60 s at most, and only while it runs)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.poll() is None:
        try:
            return get()
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError("the server did not answer")


def serving(url: str, port: int) -> subprocess.Popen[str]:
    """``provledger serve`` of ``url`` on ``port``, its log (stdout and stderr) as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "ledger", "serve", "--url", url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_provledger_serve_answers_on_the_given_port_until_stopped(tmp_path: Path) -> None:
    port = free_port()
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger.open(url).close()  # `provledger init` would do: serve refuses a missing ledger
    server = subprocess.Popen(
        [sys.executable, "-m", "ledger", "serve", "--url", url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        answer = first_answer(
            server, lambda: httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=5)
        )
        assert answer.status_code == 200
        assert answer.json()["openapi"].startswith("3.1")
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
        assert '<label for="token">Token</label>' in page.text
        refused = httpx.get(f"http://127.0.0.1:{port}/api/v1/corrections", timeout=5)
        assert refused.status_code == 401
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert server.returncode is not None


def test_provledger_serve_on_a_taken_port_is_one_error_line_and_exit_1(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger.open(url).close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "ledger", "serve", "--url", url, "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert done.stderr == f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_a_token_a_client_puts_in_the_url_is_not_written_to_the_access_log(
    tmp_path: Path,
) -> None:
    port = free_port()
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url) as led:
        led.admin().grant("agent-1", scope="p", roles=["read"])
        token = led.admin().issue_token("agent-1")
    server = serving(url, port)
    try:
        answer = None
        deadline = time.monotonic() + 60
        while answer is None and time.monotonic() < deadline and server.poll() is None:
            try:
                # The API reads tokens from the Authorization header only: refused
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/api/v1/corrections",
                    params={"token": token, "scope": "p"},
                    timeout=5,
                )
            except httpx.TransportError:
                time.sleep(0.2)
        assert answer is not None and answer.status_code == 401
        bare = token.removeprefix("plt_")
        httpx.get(f"http://127.0.0.1:{port}/api/v1/corrections?access_token={bare}", timeout=5)
        httpx.get(f"http://127.0.0.1:{port}/{token}", timeout=5)
        encoded = "%70lt%5F" + bare  # plt_ percent-encoded
        httpx.get(f"http://127.0.0.1:{port}/api/v1/read?t={encoded}", timeout=5)
        twice = "%2570lt%255F" + bare  # plt_ percent-encoded twice
        httpx.get(f"http://127.0.0.1:{port}/api/v1/records/{twice}", timeout=5)
        mixed = "%25%37%30lt_" + bare  # p as %70, each of its characters encoded again
        httpx.get(f"http://127.0.0.1:{port}/x?q={mixed}", timeout=5)
        # A query decoded to mask a token writes no line of its own, erases none
        forged = "%1b%5b2K%0d2026-01-01T00:00:00+00:00 INFO: x - admin %22GET /%22 200%0aX"
        httpx.get(f"http://127.0.0.1:{port}/healthz?token=1&x={forged}", timeout=5)
        # An authenticated request's line names its principal (refused or not)
        httpx.get(
            f"http://127.0.0.1:{port}/api/v1/corrections",
            headers={"Authorization": f"Bearer {token}"},
            timeout=5,
        )
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=30)
    logged = [line for line in out.splitlines() if "GET /" in line]
    assert len(logged) == 8, out
    assert bare[:12] not in out
    assert '"GET /api/v1/corrections?token=plt_…&scope=p HTTP/1.1" 401' in logged[0]
    assert "?access_token=… " in logged[1] and '"GET /plt_… HTTP/1.1" 404' in logged[2]
    assert '"GET /api/v1/read?t=plt_… HTTP/1.1"' in logged[3]
    assert ' - - "GET /api/v1/corrections?token=' in logged[0]  # no principal: "-"
    assert '"GET /api/v1/records/plt_… HTTP/1.1"' in logged[4]
    assert '"GET /x?q=plt_… HTTP/1.1" 404' in logged[5], out
    assert logged[6].endswith(
        '"GET /healthz?token=…&x=\\x1b[2K\\x0d2026-01-01T00:00:00+00:00 INFO: x - admin '
        '"GET /" 200\\x0aX HTTP/1.1" 200'
    ), out
    assert "\x1b" not in out and "\r" not in out
    assert logged[7].endswith(' - agent-1 "GET /api/v1/corrections HTTP/1.1" 403'), out
    # Every line says when (to line requests up with the ledger's history), and the
    # server says which ledger it serves
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d "  # RFC 3339
    assert all(re.match(stamp, line) for line in out.splitlines() if line.strip()), out
    assert re.search(stamp + rf"INFO: +Serving ledger {re.escape(url)}$", out, re.MULTILINE), out


def test_provledger_serve_secure_cookies_marks_the_session_cookie_secure(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger.open(url).close()
    cookies: dict[tuple[str, ...], str] = {}
    for flags in ((), ("--secure-cookies",)):
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "ledger", "serve", "--url", url, "--port", str(port), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:  # plain HTTP, as a server behind a TLS-terminating proxy sees it
            home = f"http://127.0.0.1:{port}/"
            page = first_answer(server, lambda: httpx.get(home, timeout=5))  # noqa: B023
            cookies[flags] = page.headers["set-cookie"].lower()
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert cookies[()].startswith("provledger_session=") and "secure" not in cookies[()]
    assert "; secure" in cookies[("--secure-cookies",)]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_closes_the_ledger_and_ends_the_server_by_that_signal(
    tmp_path: Path, stop: signal.Signals
) -> None:
    # Given a server on a SQLite ledger that has answered a request (its -wal and
    # -shm files exist while it holds the ledger open)
    port = free_port()
    db = tmp_path / "ledger.db"
    Ledger.open(f"sqlite:///{db}").close()
    server = serving(f"sqlite:///{db}", port)
    try:
        answer = first_answer(server, lambda: httpx.get(f"http://127.0.0.1:{port}/healthz"))
        assert answer.status_code == 200
        assert (tmp_path / "ledger.db-wal").exists()
    finally:
        # When it is sent a stop signal (what kill, systemd and docker stop send)
        server.send_signal(stop)
        out, _ = server.communicate(timeout=30)
    # Then it closed the ledger first (SQLite removes -wal and -shm on the last close),
    # said so, and ended by that signal: no "error: interrupted", which tells of a
    # command cut short
    assert not (tmp_path / "ledger.db-wal").exists(), out
    assert not (tmp_path / "ledger.db-shm").exists(), out
    assert f"INFO:     Stopped by {stop.name}; the ledger is closed" in out, out
    assert "error:" not in out and "Traceback" not in out, out
    assert server.returncode == -stop, out


#: ``provledger`` with the ledger's close slowed down (a long checkpoint, a pool
#: waiting for its connections), saying when the close begins.
SLOW_CLOSE = """
import sys, time
from ledger.engine import Engine
close = Engine.close
def slow_close(self):
    print("closing the ledger", flush=True)
    time.sleep(2)
    close(self)
Engine.close = slow_close
from ledger.cli import main
main()
"""


def test_a_second_stop_signal_does_not_cut_the_ledgers_close_short(tmp_path: Path) -> None:
    # Given a server whose ledger takes a while to close
    port = free_port()
    db = tmp_path / "ledger.db"
    Ledger.open(f"sqlite:///{db}").close()
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SLOW_CLOSE,
            "serve",
            "--url",
            f"sqlite:///{db}",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert first_answer(
            server, lambda: httpx.get(f"http://127.0.0.1:{port}/healthz")
        ).is_success
        assert (tmp_path / "ledger.db-wal").exists()
        # When it is sent SIGTERM, and again while the ledger closes
        server.send_signal(signal.SIGTERM)
        said: list[str] = []
        assert server.stdout is not None
        # (`serve` closes the ledger once before serving: it checks that it exists)
        while said.count("closing the ledger\n") < 2:
            said.append(server.stdout.readline())
            assert said[-1], "".join(said)  # not ended before closing the ledger
        server.send_signal(signal.SIGTERM)
    finally:
        out, _ = server.communicate(timeout=30)
    # Then the close went on to the end: the ledger is closed, as the log says
    assert not (tmp_path / "ledger.db-wal").exists(), out
    assert "Stopped by SIGTERM; the ledger is closed" in out, out
    assert server.returncode == -signal.SIGTERM, out


def test_a_second_sigint_lets_a_write_waiting_for_its_lock_finish_and_answer(
    tmp_path: Path,
) -> None:
    # Given a server on a SQLite ledger, an agent allowed to propose, and another
    # connection holding the ledger's write lock
    port = free_port()
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}?timeout=30"
    with Ledger.open(url) as led:
        led.admin().grant("agent-1", scope="p", roles=["propose", "read"])
        token = led.admin().issue_token("agent-1")
    server = serving(url, port)
    said: list[str] = []
    answered: list[httpx.Response | BaseException] = []
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        assert first_answer(
            server, lambda: httpx.get(f"http://127.0.0.1:{port}/healthz")
        ).is_success
        holder.execute("BEGIN IMMEDIATE")

        def propose() -> None:
            try:
                answered.append(
                    httpx.post(
                        f"http://127.0.0.1:{port}/api/v1/records",
                        headers={"Authorization": f"Bearer {token}"},
                        json={"scope": "p", "claim_key": "k", "value": 1, "kind": "fact"},
                        timeout=60,
                    )
                )
            except BaseException as exc:  # told below, not lost in the thread
                answered.append(exc)

        client = threading.Thread(target=propose)
        client.start()
        time.sleep(1)  # the request is under way, its write waiting for the lock
        assert not answered, answered

        def read_until(text: str) -> None:
            assert server.stdout is not None
            while not any(text in line for line in said):
                said.append(server.stdout.readline())
                assert said[-1], "".join(said)  # not ended before saying it

        # When it is sent SIGINT (Ctrl-C), and again a second later (Ctrl-C twice)
        server.send_signal(signal.SIGINT)
        read_until("Shutting down")
        time.sleep(1)
        server.send_signal(signal.SIGINT)
        time.sleep(1)
        # Then the request is not cut short (it was, with a plain-text 500, and its
        # write committed once the lock was free)
        assert not answered, [getattr(a, "text", a) for a in answered]
        # And the server says it is already stopping, and what it waits for
        read_until("Already stopping")
    finally:
        # And when the lock is released, the write commits and is answered
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
        out, _ = server.communicate(timeout=60)
        said.append(out)
    client.join(timeout=60)
    log = "".join(said)
    assert len(answered) == 1, log
    response = answered[0]
    assert isinstance(response, httpx.Response), (response, log)
    assert response.status_code == 201, (response.text, log)
    waiting = [line for line in log.splitlines() if "Already stopping" in line]
    assert len(waiting) == 1 and "1 request under way" in waiting[0], log
    assert "Stopped by SIGINT; the ledger is closed" in log, log
    assert "Traceback" not in log and "CancelledError" not in log, log
    assert "force quit" not in log, log  # uvicorn's offer, which no Ctrl-C takes up now
    assert server.returncode == -signal.SIGINT, log
    # The record exists, once: a client told 201 has no reason to send it again
    with Ledger.open(url) as led:
        records = led.authenticate(token).records("p")
    assert [(r.id, r.claim_key) for r in records] == [(response.json()["id"], "k")]


def test_a_client_sending_its_body_slowly_does_not_hold_a_stop_open(tmp_path: Path) -> None:
    # Given a server whose writes wait at most 1 s for the lock, and a client that
    # sent a request's headers and part of its body, then nothing more
    # (with a token: the body of a request without one is never read)
    port, url = free_port(), f"sqlite:///{tmp_path / 'ledger.db'}?timeout=1"
    with Ledger.open(url) as led:
        token = led.admin().issue_token("agent-1")
    server = serving(url, port)
    try:
        assert first_answer(
            server, lambda: httpx.get(f"http://127.0.0.1:{port}/healthz")
        ).is_success
        with socket.create_connection(("127.0.0.1", port)) as stalled:
            stalled.sendall(
                b"POST /api/v1/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                + f"\r\nAuthorization: Bearer {token}".encode()
                + b'\r\nContent-Length: 100\r\n\r\n{"scope":'
            )
            time.sleep(0.5)
            # When the server is stopped, and told again
            server.send_signal(signal.SIGINT)
            time.sleep(1)
            server.send_signal(signal.SIGTERM)
            # Then it stops once the stop's wait (twice the lock wait, and 5 s) is over,
            # the client still connected, telling the request's end in one line and
            # the client that it was not done (not a plain-text 500)
            out, _ = server.communicate(timeout=60)
            stalled.settimeout(10)
            answer = b""
            while chunk := stalled.recv(65536):
                answer += chunk
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == -signal.SIGINT, out
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), answer
    assert json.loads(body)["error"] == {
        "type": "ServerStoppedError",
        "message": "the server stopped before this request was answered; nothing of it was "
        "done: send it again",
        "field": None,
    }
    assert '"POST /api/v1/records HTTP/1.1" 503' in out, out
    assert "waiting for 1 request under way to finish (at most 7 s since the stop" in out, out
    assert "A request still under way at the end of the stop's wait was cancelled: " in out, out
    assert "Traceback" not in out and "Stopped by SIGINT; the ledger is closed" in out, out


def test_a_write_its_request_is_cancelled_under_is_answered_as_it_ended(
    tmp_path: Path,
) -> None:
    # Given the app served by uvicorn, which cancels the requests still under way
    # half a second into a stop, and another connection holding the write lock
    db = tmp_path / "ledger.db"
    with Ledger.open(f"sqlite:///{db}?timeout=30") as led:
        led.admin().grant("agent-1", scope="p", roles=["propose", "read"])
        token = led.admin().issue_token("agent-1")
        port = free_port()
        config = uvicorn.Config(
            create_app(led, mcp_factory=None),
            host="127.0.0.1",
            port=port,
            log_level="critical",
            timeout_graceful_shutdown=0.5,
        )
        server = uvicorn.Server(config)
        serving = threading.Thread(target=server.run)
        serving.start()
        answered: list[httpx.Response] = []
        holder = sqlite3.connect(db, isolation_level=None)
        try:
            deadline = time.monotonic() + 30
            while not server.started:
                assert serving.is_alive() and time.monotonic() < deadline
                time.sleep(0.05)
            holder.execute("BEGIN IMMEDIATE")
            client = threading.Thread(
                target=lambda: answered.append(
                    httpx.post(
                        f"http://127.0.0.1:{port}/api/v1/records",
                        headers={"Authorization": f"Bearer {token}"},
                        json={"scope": "p", "claim_key": "k", "value": 1, "kind": "fact"},
                        timeout=60,
                    )
                )
            )
            client.start()
            time.sleep(1)  # its write waits for the lock
            # When the server stops and, half a second on, cancels the request
            server.should_exit = True
            time.sleep(1.5)
            # Then the request is not answered before its write ends (it was: a
            # plain-text 500, and the write committed once the lock was free)
            assert not answered, [a.text for a in answered]
        finally:
            if holder.in_transaction:
                holder.execute("ROLLBACK")
            holder.close()
            server.should_exit = True
            serving.join(timeout=60)
        client.join(timeout=60)
        # And once the lock is free it is answered with what the write did: 201
        assert [a.status_code for a in answered] == [201], [a.text for a in answered]
        records = led.authenticate(token).records("p")
        assert [r.id for r in records] == [answered[0].json()["id"]]


def test_an_mcp_write_under_way_when_the_server_stops_is_answered_with_what_it_did(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mcp")
    # Given a server whose writes wait for a lock another connection holds, and an
    # MCP session whose proposal is waiting for it
    port, db = free_port(), tmp_path / "ledger.db"
    url = f"sqlite:///{db}?timeout=30"
    with Ledger.open(url) as led:
        led.admin().grant("agent-1", scope="p", roles=["propose", "read"])
        token = led.admin().issue_token("agent-1")
    server = serving(url, port)
    endpoint = f"http://127.0.0.1:{port}/mcp/"
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    answered: list[httpx.Response | BaseException] = []
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        assert first_answer(server, lambda: httpx.get(f"http://127.0.0.1:{port}/healthz"))
        started = httpx.post(endpoint, headers=headers, timeout=30, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}})  # fmt: skip
        headers["mcp-session-id"] = started.headers["mcp-session-id"]
        headers["mcp-protocol-version"] = "2025-06-18"
        httpx.post(
            endpoint,
            headers=headers,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            timeout=30,
        )
        holder.execute("BEGIN IMMEDIATE")
        arguments = {"scope": "p", "claim_key": "k", "value": 1, "kind": "fact", "id": "M1"}
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "propose_memory", "arguments": arguments},
        }

        def propose() -> None:
            try:
                answered.append(httpx.post(endpoint, headers=headers, json=call, timeout=60))
            except BaseException as exc:  # told below, not lost in the thread
                answered.append(exc)

        client = threading.Thread(target=propose)
        client.start()
        time.sleep(1)  # the call is under way, its write waiting for the lock
        # When the server is stopped, and the lock is then released
        server.send_signal(signal.SIGTERM)
        time.sleep(1)
        holder.execute("ROLLBACK")
        client.join(60)
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
        out, _ = server.communicate(timeout=60)
    # Then the call is answered with its result (it was an empty answer, and the
    # proposal committed after it), and the record is there
    assert len(answered) == 1 and isinstance(answered[0], httpx.Response), (answered, out)
    result = answered[0].json()["result"]
    assert not result.get("isError") and result["structuredContent"]["id"] == "M1", result
    with Ledger.open(url) as led:
        assert led.authenticate(token).get("M1").status == "CANDIDATE"


def test_a_write_refused_for_a_lock_held_too_long_says_when_to_retry(tmp_path: Path) -> None:
    # Given a server whose ledger waits 1 s for its lock, which another process holds
    from starlette.testclient import TestClient

    from ledger.serve import create_app

    db = tmp_path / "ledger.db"
    with Ledger.open(f"sqlite:///{db}?timeout=1") as led:
        led.admin().grant("agent-1", scope="p", roles=["propose", "read"])
        token = led.admin().issue_token("agent-1")
        before = led.position
        holder = sqlite3.connect(db, isolation_level=None)
        try:
            with TestClient(create_app(led, mcp_factory=None)) as client:
                holder.execute("BEGIN IMMEDIATE")
                # When a client proposes
                r = client.post(
                    "/api/v1/records",
                    headers={"Authorization": f"Bearer {token}"},
                    json={"scope": "p", "claim_key": "k", "value": 1, "kind": "fact", "id": "L1"},
                )
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        # Then it is told 409 ConcurrencyError, that nothing was written, and when
        # to send it again
        assert r.status_code == 409, r.text
        assert r.headers["retry-after"] == "1"
        error = r.json()["error"]
        assert error["type"] == "ConcurrencyError"
        assert error["message"].endswith("nothing was written — try again")
        assert led.position == before


def test_a_warning_after_the_mcp_endpoint_was_used_is_stamped_as_every_line(
    tmp_path: Path,
) -> None:
    # Given a served ledger and an agent whose MCP session has started its run
    port = free_port()
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["read", "propose"])
        token = admin.issue_token("agent-1")
    server = serving(url, port)
    mcp = f"http://127.0.0.1:{port}/mcp"
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
    }
    init = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}},
    }  # fmt: skip
    try:
        opened = first_answer(server, lambda: httpx.post(mcp, json=init, headers=headers))
        assert opened.status_code == 200, opened.text
        headers |= {"mcp-session-id": opened.headers["mcp-session-id"]}
        headers |= {"mcp-protocol-version": "2025-11-25"}
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert httpx.post(mcp, json=ready, headers=headers).status_code == 202
        call = {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "read_memory",
                       "arguments": {"scope": "proj-a", "claim_key": "k"}},
        }  # fmt: skip
        assert httpx.post(mcp, json=call, headers=headers, timeout=30).status_code == 200
        # When its token is revoked, and the endpoint drops its server (whose run
        # can no longer be ended by that token: a warning)
        with Ledger.open(url) as led:
            led.admin().revoke_token(token)
        assert httpx.post(mcp, json=call, headers=headers, timeout=30).status_code == 401
        time.sleep(1)
    finally:
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=30)
    # Then that warning is a line of the server's log, stamped as every line is
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d "  # RFC 3339
    assert re.search(stamp + r"WARNING: +could not end run mcp-", out), out
    assert all(re.match(stamp, line) for line in out.splitlines() if line.strip()), out
