"""What ``provledger serve`` does against clients that would hold it up.

A connection must deliver a whole request within the request timeout (408 and
closed otherwise), connections beyond what the open-file limit allows are
refused (503) rather than starving the server of files, and SVG pictures are
bounded: in edges, in pictures drawn at once, in time.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger import Kind, Ledger
from ledger import graph as graph_module
from ledger.connections import (
    ACCEPT_TURNS,
    FILES_PER_THREAD,
    RESERVED_FILES,
    WORKER_THREADS,
    limits,
)
from ledger.serve import create_app
from tests.serve_support import free_port, running
from tests.test_serve_cli import first_answer

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is missing")


# -- connections -------------------------------------------------------------------------------


def _serving(url: str, port: int, request_timeout: float, files: int | None = None) -> Any:
    """``ledger.serve.run`` (what ``provledger serve`` calls) in a process of its own,
    its soft open-file limit set to ``files``; its log as text."""
    code = textwrap.dedent(
        f"""
        import resource
        from ledger.serve import run
        if {files!r} is not None:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, ({files!r}, hard))
        run({url!r}, port={port}, create=False, request_timeout={request_timeout!r})
        """
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _stopped(server: Any) -> str:
    """Stop the server (SIGINT) and return its log."""
    if server.poll() is None:
        server.send_signal(signal.SIGINT)
    try:
        out, _ = server.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        out, _ = server.communicate()
    return str(out)


def _until_closed(conn: socket.socket, wait: float = 30) -> bytes:
    """What the server sent on ``conn`` until it closed it (fails if it did not
    within ``wait`` seconds: a generous margin over the timeouts under test)."""
    conn.settimeout(wait)
    said = b""
    try:
        while chunk := conn.recv(65536):
            said += chunk
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open; it sent {said!r}") from None
    except ConnectionResetError:
        pass  # closed at once, its answer perhaps unread
    return said


def test_a_connection_that_sends_no_whole_request_in_time_is_answered_408_and_closed(
    tmp_path: Path,
) -> None:
    # Given a server whose clients have 1 s to send a request, and a principal
    url, port = f"sqlite:///{tmp_path / 'ledger.db'}", free_port()
    with Ledger.open(url) as led:
        led.admin().grant("agent-1", scope="p", roles=["propose", "read"])
        token = led.admin().issue_token("agent-1")
    server = _serving(url, port, request_timeout=1)
    try:
        assert first_answer(
            server, lambda: httpx.get(f"http://127.0.0.1:{port}/healthz")
        ).is_success
        # When one connection sends nothing, one half its headers, one (with a
        # token the API reads the body for) half its body
        stalls = [
            b"",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
            b"POST /api/v1/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + token.encode()
            + b'\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"scope":',
        ]
        conns = [socket.create_connection(("127.0.0.1", port)) for _ in stalls]
        for conn, sent in zip(conns, stalls, strict=True):
            conn.sendall(sent)
        # Then each is answered 408 and closed by the server
        for conn in conns:
            with conn:
                said = _until_closed(conn)
            assert said.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), said
            head, _, body = said.partition(b"\r\n\r\n")
            assert b"\r\ncontent-type: application/json\r\n" in head, said
            assert json.loads(body) == {
                "error": {
                    "type": "RequestTimeout",
                    "message": "the request did not arrive whole within 1 s",
                    "field": None,
                }
            }
        # And a connection kept alive after its answer is closed too (idle)
        with socket.create_connection(("127.0.0.1", port)) as idle:
            idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _until_closed(idle).startswith(b"HTTP/1.1 200 OK\r\n")
        # And the server answers as before
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").json() == {"status": "ok"}
    finally:
        log = _stopped(server)
    assert "At most " in log and "a request must arrive whole within 1 s" in log, log
    assert log.count("no whole request within 1 s: answered 408 and closed") == 3, log
    # (the access log tells the request cut short as the client was told it)
    assert '"POST /api/v1/records HTTP/1.1" 408' in log, log
    assert "Traceback" not in log, log


def _answer(conn: socket.socket) -> bytes:
    """One whole answer read from ``conn``: its head, and its body by its length."""
    said = b""
    while b"\r\n\r\n" not in said:
        said += conn.recv(65536)
    head, _, body = said.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)\r\ncontent-length: (\d+)", head)
    while length is not None and len(body) < int(length.group(1)):
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_request_after_one_answered_before_its_body_arrived_gets_its_own_time(
    tmp_path: Path,
) -> None:
    # Given a server whose clients have 3 s to send a request
    url, port = f"sqlite:///{tmp_path / 'ledger.db'}", free_port()
    Ledger.open(url).close()
    server = _serving(url, port, request_timeout=3)
    try:
        assert first_answer(
            server, lambda: httpx.get(f"http://127.0.0.1:{port}/healthz")
        ).is_success
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.settimeout(30)
            # When a request without a token is answered 401 before its body is sent
            conn.sendall(
                b"POST /api/v1/records HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n"
            )
            assert _answer(conn).startswith(b"HTTP/1.1 401 ")
            # and its body comes 2 s later, then the next request over 1.6 s
            threading.Event().wait(2)
            conn.sendall(b"{}")
            threading.Event().wait(0.4)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            threading.Event().wait(1.2)
            conn.sendall(b"\r\n")
            # Then the next request is answered: its time began after the first ended
            said = _answer(conn)
        assert said.startswith(b"HTTP/1.1 200 OK\r\n"), said
    finally:
        log = _stopped(server)
    assert "no whole request" not in log, log


def test_the_connection_limit_leaves_room_in_the_open_file_limit() -> None:
    # The connections held, a burst being accepted, the worker threads' files and
    # the process's own fit in the open-file limit, however low
    for files in (256, 512, 1024, 4096, 1 << 20):
        fitting = limits(files)
        used = RESERVED_FILES + WORKER_THREADS * FILES_PER_THREAD
        used += fitting.max_connections + ACCEPT_TURNS * fitting.backlog
        assert fitting.max_connections >= 8 and (used <= files or files <= 256), files
    assert limits(256).max_connections == 32
    assert limits(1 << 20).max_connections == 1024


def test_idle_connections_beyond_the_limit_are_refused_and_the_server_keeps_answering(
    tmp_path: Path,
) -> None:
    # Given a server under an open-file limit of 256 (ulimit -n 256)
    url, port = f"sqlite:///{tmp_path / 'ledger.db'}", free_port()
    Ledger.open(url).close()
    server = _serving(url, port, request_timeout=2, files=256)
    conns: list[socket.socket] = []
    try:
        assert first_answer(
            server, lambda: httpx.get(f"http://127.0.0.1:{port}/healthz")
        ).is_success
        # When 300 connections are opened and send nothing
        conns = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(300)]
        # Then the server closes every one: over its limit at once (503), the
        # others when their request does not come (408)
        said = [_until_closed(conn) for conn in conns]
        answers = {s[: len(b"HTTP/1.1 503")] for s in said}
        assert answers <= {b"HTTP/1.1 503", b"HTTP/1.1 408", b""}, answers
        assert any(s.startswith(b"HTTP/1.1 503 Service Unavailable\r\n") for s in said)
        assert all(b"retry-after: 1\r\n" in s for s in said if s.startswith(b"HTTP/1.1 503"))
        refused = next(s for s in said if s.startswith(b"HTTP/1.1 503"))
        assert json.loads(refused.partition(b"\r\n\r\n")[2])["error"] == {
            "type": "ServiceUnavailable",
            "message": "too many connections; try again",
            "field": None,
        }
        # And it still answers
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30).status_code == 200
    finally:
        for conn in conns:
            conn.close()
        log = _stopped(server)
    assert "At most 32 connections at once" in log, log
    assert "32 connections are open, as many as this server holds" in log, log
    assert "Too many open files" not in log and "Traceback" not in log, log


# -- SVG pictures ------------------------------------------------------------------------------


@dataclass
class Dense:
    """A served ledger whose record DN32 rests on DN0..DN31, each on every earlier one
    (528 edges among 33 records); ``token``: a reader's."""

    base: str
    token: str


@pytest.fixture
def dense(tmp_path: Path) -> Iterator[Dense]:
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as led:
        led.admin().grant("agent-1", scope="p", roles=["propose", "read"])
        token = led.admin().issue_token("agent-1")
        agent = led.authenticate(token)
        for i in range(33):
            agent.propose(
                scope="p", claim_key=f"k{i}", value=i, kind=Kind.INFERENCE,
                parents=[f"DN{p}" for p in range(i)], id=f"DN{i}",
            )  # fmt: skip
        with running(create_app(led, mcp_factory=None)) as base:
            yield Dense(base, token)


def _svg(d: Dense, record_id: str) -> httpx.Response:
    return httpx.get(
        f"{d.base}/api/v1/records/{record_id}/graph",
        params={"format": "svg", "descendants": "false"},
        headers={"Authorization": f"Bearer {d.token}"},
        timeout=60,
    )


@needs_dot
def test_an_svg_graph_over_the_edge_limit_is_refused_without_drawing(dense: Dense) -> None:
    # When a reader asks for the SVG of 33 records joined by 528 edges
    r = _svg(dense, "DN32")
    # Then it is refused, saying why and what to ask for instead
    assert r.status_code == 422
    error = r.json()["error"]
    assert (error["type"], error["field"]) == ("InvalidInputError", "format")
    assert error["message"].startswith("the graph has 528 edges; format=svg draws at most 500.")
    assert "format=dot" in error["message"]
    # And what it names is served
    dot = httpx.get(
        f"{dense.base}/api/v1/records/DN32/graph",
        params={"format": "dot", "descendants": "false"},
        headers={"Authorization": f"Bearer {dense.token}"},
    )
    assert dot.status_code == 200 and dot.text.count(" -> ") == 528


@needs_dot
def test_an_svg_graph_is_refused_while_the_server_draws_as_many_as_it_draws_at_once(
    dense: Dense,
) -> None:
    # Given every turn to draw taken (RENDERS_AT_ONCE pictures being drawn)
    taken = 0
    try:
        while graph_module._turns.acquire(blocking=False):
            taken += 1
        assert taken == graph_module.RENDERS_AT_ONCE
        # When a reader asks for a small SVG
        r = _svg(dense, "DN1")
        # Then it is refused at once (503: try again), not queued behind them
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["type"] == "RenderBusyError"
        message = r.json()["error"]["message"]
        assert message == (
            "the server is drawing 2 other pictures, as many as it draws at once; "
            "try again in a few seconds"
        )
    finally:
        for _ in range(taken):
            graph_module._turns.release()
    # And once a turn is free, it is drawn
    drawn = _svg(dense, "DN1")
    assert drawn.status_code == 200 and "<svg" in drawn.text


@needs_dot
def test_the_record_page_of_a_graph_over_the_edge_limit_lists_its_records_without_a_picture(
    dense: Dense,
) -> None:
    # Given a reviewer signed in to the console
    with httpx.Client(base_url=dense.base, timeout=60) as browser:
        page = browser.get("/")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        signin = browser.post("/signin", data={"token": dense.token, "csrf": csrf[1]})
        assert signin.status_code == 303
        # When it opens the page of the record resting on 528 edges
        page = browser.get("/records/DN32")
    # Then the page is shown, saying why no picture is drawn, with the records listed
    assert page.status_code == 200
    assert "No picture is drawn: the picture has 528 edges, more than the 500" in page.text
    assert "<svg" not in page.text
    assert 'href="/records/DN0"' in page.text and 'href="/records/DN31"' in page.text
