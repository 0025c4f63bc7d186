"""``provledger serve`` starts the server on the given host and port."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger import Ledger
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
    server = subprocess.Popen(
        [sys.executable, "-m", "ledger", "serve", "--url", url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
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
    assert len(logged) == 5, out
    assert bare[:12] not in out
    assert '"GET /api/v1/corrections?token=plt_…&scope=p HTTP/1.1" 401' in logged[0]
    assert "?access_token=… " in logged[1] and '"GET /plt_… HTTP/1.1" 404' in logged[2]
    assert '"GET /api/v1/read?t=plt_… HTTP/1.1"' in logged[3]
    assert ' - - "GET /api/v1/corrections?token=' in logged[0]  # no principal: "-"
    assert logged[4].endswith(' - agent-1 "GET /api/v1/corrections HTTP/1.1" 403'), out
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
    server = subprocess.Popen(
        [sys.executable, "-m", "ledger", "serve", "--url", f"sqlite:///{db}", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
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
