"""``GET /healthz`` of ``provledger serve``: up or not, and nothing more.

A load balancer or an orchestrator probes it without a token, every second or so:
it answers 200 ``{"status": "ok"}`` when the ledger answers a read and 503 with a
fixed reason when it does not, tells nothing of the ledger's content, its URL or
its password, opens no console session, and adds one access-log line per probe.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from openapi_schema_validator import OAS31Validator, oas31_format_checker
from openapi_spec_validator import validate
from starlette.applications import Starlette
from starlette.testclient import TestClient

from ledger import Kind, Ledger
from ledger.serve import create_app
from ledger.serve.app import ACCESS_LOGGER
from ledger.serve.health import HEALTH_LOGGER, OTHER_REASON, REASONS
from tests.conftest import PG_SERVER, Clock, _pg_dsn
from tests.faults import end_sessions
from tests.serve_support import DOC, error_of

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

OK = b'{"status":"ok"}'
#: The password put in a PostgreSQL test URL (trust authentication ignores it).
PASSWORD = "pw-never-shown"
UNREACHABLE = {text for cls, text in REASONS if cls.__name__ != "ClosedLedgerError"}


def _with_password(url: str) -> tuple[str, str]:
    """``url`` with a password in it (PostgreSQL), and that password ("" if none)."""
    if not url.startswith("postgresql"):
        return url, ""
    parts = urlsplit(url)
    if parts.password:
        return url, parts.password
    netloc = f"{parts.username or 'postgres'}:{PASSWORD}@{parts.hostname}:{parts.port or 5432}"
    return urlunsplit(parts._replace(netloc=netloc)), PASSWORD


@dataclass
class Probed:
    """A ledger behind the ASGI app, opened from a URL that holds a password on
    PostgreSQL."""

    ledger: Ledger
    app: Starlette
    client: TestClient
    url: str
    secret: str


@pytest.fixture
def probed(ledger_url: str, clock: Clock) -> Iterator[Probed]:
    url, secret = _with_password(ledger_url)
    led = Ledger.open(url, clock=clock)
    try:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        agent.propose("proj-a", "api.retry_safe", True, Kind.FACT, id="M1")
        app = create_app(led, mcp_factory=None)
        with TestClient(app) as client:
            yield Probed(led, app, client, url, secret)
    finally:
        led.close()


def _documented(r: httpx.Response) -> None:
    """The answer's status, body and Cache-Control are as ``/openapi.json`` says."""
    answer = DOC["paths"]["/healthz"]["get"]["responses"][str(r.status_code)]
    schema = {**answer["content"]["application/json"]["schema"], "components": DOC["components"]}
    OAS31Validator(schema, format_checker=oas31_format_checker).validate(r.json())
    assert r.headers["content-type"] == "application/json"
    assert r.headers["cache-control"] == answer["headers"]["Cache-Control"]["schema"]["const"]


def _ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records the server's own loggers wrote."""
    return [r for r in caplog.records if r.name.startswith("provledger")]


# -- up ------------------------------------------------------------------------------------


def test_a_probe_without_a_token_answers_200_ok_and_nothing_of_the_ledger(
    probed: Probed,
) -> None:
    # Given a ledger with grants, a token and a record
    token = probed.ledger.admin().issue_token("agent-1")
    # When it is probed with no token, a bogus one, a real one and a bogus cookie
    answers = [
        probed.client.get("/healthz"),
        probed.client.get("/healthz", headers={"Authorization": "Bearer plt_bogus"}),
        probed.client.get("/healthz", headers={"Authorization": f"Bearer {token}"}),
        probed.client.get("/healthz", headers={"Cookie": "provledger_session=made-up"}),
    ]
    # Then each answer is the same 200, its body exactly {"status": "ok"}, not cached
    for r in answers:
        assert r.status_code == 200, r.text
        assert r.content == OK
        assert r.json() == {"status": "ok"}
        assert "set-cookie" not in r.headers
        _documented(r)


def test_head_answers_the_same_status_and_headers_without_a_body(probed: Probed) -> None:
    r = probed.client.head("/healthz")
    assert r.status_code == 200
    assert r.content == b""
    assert r.headers["content-type"] == "application/json"
    assert r.headers["cache-control"] == "no-store"
    assert "set-cookie" not in r.headers


def test_another_method_is_a_json_405_with_allow_like_the_api(probed: Probed) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        r = probed.client.request(method, "/healthz")
        assert r.status_code == 405, method
        assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}
        assert error_of(r)["type"] == "MethodNotAllowed"
        assert "set-cookie" not in r.headers
    assert len(probed.app.state.console.store) == 0


def test_probes_open_no_session_and_each_writes_one_access_line_and_nothing_else(
    probed: Probed, caplog: pytest.LogCaptureFixture
) -> None:
    # When a balancer probes thirty times (and once with a method it does not take)
    with caplog.at_level(logging.INFO):
        for _ in range(30):
            assert probed.client.get("/healthz").status_code == 200
        assert probed.client.post("/healthz").status_code == 405
    # Then no console session was opened for it
    assert len(probed.app.state.console.store) == 0
    # And the server logged one access line per request, naming no principal, and no other line
    lines = [(r.name, r.getMessage()) for r in _ours(caplog)]
    probe = (ACCESS_LOGGER, 'testclient:50000 - - "GET /healthz HTTP/1.1" 200')
    refused = (ACCESS_LOGGER, 'testclient:50000 - - "POST /healthz HTTP/1.1" 405')
    assert lines == [probe] * 30 + [refused]


def test_a_body_over_the_limit_is_a_json_413_as_documented_here_and_for_the_document(
    probed: Probed,
) -> None:
    # Paths for programs answer a refusal in JSON, as /openapi.json documents it,
    # not with the console's HTML page
    for path in ("/healthz", "/openapi.json"):
        r = probed.client.request("GET", path, content=b"x" * (300 * 1024))
        assert r.status_code == 413, path
        assert r.headers["content-type"] == "application/json", path
        assert error_of(r)["type"] == "ValueTooLargeError", path
    # The console's own paths keep their page
    page = probed.client.request("POST", "/signin", content=b"x" * (300 * 1024))
    assert page.status_code == 413
    assert page.headers["content-type"].startswith("text/html")


def test_the_openapi_document_lists_healthz_without_a_token_and_still_validates(
    probed: Probed,
) -> None:
    doc = probed.client.get("/openapi.json").json()
    validate(doc)  # raises on an invalid OpenAPI document
    assert set(doc["paths"]["/healthz"]) == {"get"}
    op = doc["paths"]["/healthz"]["get"]
    assert op["security"] == []  # the document's default is a bearer token
    assert op["parameters"] == []
    assert set(op["responses"]) == {"200", "503", "413", "405", "408"}
    reasons = doc["components"]["schemas"]["HealthUnavailable"]["properties"]["reason"]["enum"]
    assert set(reasons) == {text for _, text in REASONS} | {OTHER_REASON}


# -- down ----------------------------------------------------------------------------------


def test_a_closed_ledger_answers_503_with_a_fixed_reason_and_no_url_or_password(
    probed: Probed, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    # Given a ledger that answered, then was closed
    assert probed.client.get("/healthz").status_code == 200
    probed.ledger.close()
    # When it is probed three times
    with caplog.at_level(logging.INFO):
        answers = [probed.client.get("/healthz") for _ in range(3)]
        head = probed.client.head("/healthz")
    # Then each answer is a 503 saying why in a fixed phrase (its own message names the URL)
    for r in answers:
        assert r.status_code == 503, r.text
        assert r.json() == {"status": "unavailable", "reason": "the ledger is closed"}
        assert "set-cookie" not in r.headers
        _documented(r)
        for leak in (probed.url, probed.ledger.url, str(tmp_path), "postgresql", "sqlite"):
            assert leak not in r.text
        if probed.secret:
            assert probed.secret not in r.text
    assert (head.status_code, head.content) == (503, b"")
    # And the server logged why once, not once a probe, its password left out
    warnings = [r.getMessage() for r in _ours(caplog) if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("health: the ledger is closed (") and "closed)" in warnings[0]
    if probed.secret:
        assert probed.secret not in warnings[0]
    assert len(probed.app.state.console.store) == 0


@pytest.fixture
def pg_app(pg_url: str) -> Iterator[tuple[Ledger, Starlette]]:
    led = Ledger.open(pg_url)
    try:
        yield led, create_app(led, mcp_factory=None)
    finally:
        led.close()


def test_pg_sessions_ended_by_the_server_are_replaced_and_the_probe_still_answers_200(
    pg_url: str, pg_app: tuple[Ledger, Starlette]
) -> None:
    # A terminated backend is not an outage: the ledger's next read opens a fresh
    # connection (tests/test_storage_faults.py), so the probe says it is up.
    _, app = pg_app
    with TestClient(app) as client:
        assert client.get("/healthz").content == OK
        assert end_sessions(pg_url) >= 1
        time.sleep(0.2)  # the server closes the ended sessions
        r = client.get("/healthz")
        assert (r.status_code, r.content) == (200, OK)


class Forwarder:
    """A TCP forwarder from a loopback port to the test's PostgreSQL server: a ledger
    opened through it loses its database on :meth:`stop` (listener and every
    connection closed) and gets it back on :meth:`start` (the same port again)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        with self._lock:
            sockets, self._open = self._open, []
        for s in [s for s in (listener,) if s is not None] + sockets:
            _shut(s)  # wakes the thread blocked in accept() or recv()
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
                server = socket.create_connection(self.target)
            except OSError:
                return
            with self._lock:
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _shut(sink)


def _shut(s: socket.socket) -> None:
    with suppress(OSError):  # already shut, or never connected
        s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def forwarder() -> Iterator[Forwarder]:
    server = urlsplit(PG_SERVER)
    forwarding = Forwarder(server.hostname or "127.0.0.1", server.port or 5432)
    forwarding.start()
    try:
        yield forwarding
    finally:
        forwarding.stop()


def test_pg_an_unreachable_database_answers_503_then_200_once_it_is_back(
    pg_url: str, forwarder: Forwarder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a ledger whose database is reached through a forwarder, by a URL with a password
    server = urlsplit(PG_SERVER)
    secret = server.password or PASSWORD
    schema = pg_url.split("?", 1)[1]
    url = (
        f"postgresql://{server.username or 'postgres'}:{secret}@127.0.0.1:{forwarder.port}"
        f"{server.path}?{schema}&connect_timeout=1"
    )
    led = Ledger.open(url)
    try:
        app = create_app(led, mcp_factory=None)
        with caplog.at_level(logging.INFO), TestClient(app) as client:
            assert client.get("/healthz").content == OK
            # When the database cannot be reached any more
            forwarder.stop()
            r = client.get("/healthz")
            # Then the probe answers 503 with a fixed reason, nothing of the URL in it
            assert r.status_code == 503, r.text
            assert r.json()["status"] == "unavailable"
            down = r.json()["reason"]
            assert down in UNREACHABLE
            _documented(r)
            for leak in (secret, str(forwarder.port), "127.0.0.1", schema.split("=")[1]):
                assert leak not in r.text
            # And once it is back, the probe answers 200 again (the pool reconnects)
            forwarder.start()
            deadline = time.monotonic() + 60
            while (r := client.get("/healthz")).status_code != 200:
                assert time.monotonic() < deadline, r.text
                time.sleep(0.2)
            assert r.content == OK
        # The server logged the outage once and the recovery once, the password left out
        said = [(r.levelno, r.getMessage()) for r in _ours(caplog) if r.name == HEALTH_LOGGER]
        assert [level for level, _ in said] == [logging.WARNING, logging.INFO]
        assert said[0][1].startswith(f"health: {down} (")
        assert "\n" not in said[0][1]  # one line of the log, though psycopg says more
        assert secret not in said[0][1]
        assert said[1][1] == "health: the ledger answers again"
    finally:
        led.close()


def _schema_of(pg_url: str) -> str:
    """The schema a test's PostgreSQL ledger URL names."""
    return pg_url.split("schema=")[1].split("&")[0]


@contextmanager
def _log_locked(pg_url: str, led: Ledger) -> Iterator[Callable[[], None]]:
    """The ledger's log locked by another session (every read of it waits) until
    the function yielded is called, or the block ends."""
    import psycopg

    log = f"{_schema_of(pg_url)}.{led.engine.recorder.events_table_name}"
    with psycopg.connect(_pg_dsn()) as locker:
        locker.execute(f"LOCK TABLE {log} IN ACCESS EXCLUSIVE MODE")
        yield locker.rollback


def test_pg_probes_arriving_while_a_read_waits_share_that_one_read(
    pg_url: str, pg_app: tuple[Ledger, Starlette]
) -> None:
    # A database that does not answer must not fill the worker threads the API
    # needs with one waiting read per probe.
    import psycopg

    led, app = pg_app
    schema = _schema_of(pg_url)

    def reads_waiting() -> int:
        with psycopg.connect(_pg_dsn(), autocommit=True) as watcher:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = %s AND wait_event_type = 'Lock'",
                (f"provledger:{schema}",),
            ).fetchone()
            return int(row[0]) if row else 0

    # Given the ledger's log locked by another session (every read of it waits)
    with _log_locked(pg_url, led) as release:
        # When five probes arrive while the first one's read waits
        answers, waiting = asyncio.run(_probe_while(app, 5, reads_waiting, release))
    # Then only one read waited, and every probe got its answer
    assert waiting == 1
    assert [(r.status_code, r.content) for r in answers] == [(200, OK)] * 5


async def _probe_while(
    app: Starlette, count: int, waiting: Callable[[], int], release: Callable[[], None]
) -> tuple[list[httpx.Response], int]:
    """``count`` probes at once; how many reads wait once one does; then ``release``."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://probe") as client:
        probes = [asyncio.create_task(client.get("/healthz")) for _ in range(count)]
        deadline = time.monotonic() + 30
        while await asyncio.to_thread(waiting) == 0:
            assert time.monotonic() < deadline, "no read reached the locked log"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # room for any other probe's own read to reach the lock
        waited = await asyncio.to_thread(waiting)
        release()
        return list(await asyncio.gather(*probes)), waited


def test_provledger_serve_logs_once_why_the_ledger_stopped_answering(
    tmp_path: Path,
) -> None:
    # Given the logging `provledger serve` sets up, in a process of its own
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    script = f"""
import logging.config
from starlette.testclient import TestClient
from ledger import Ledger
from ledger.serve import create_app, log_config

logging.config.dictConfig(log_config())
led = Ledger.open({url!r})
client = TestClient(create_app(led))
codes = [client.get("/healthz").status_code]
led.close()  # When the ledger stops answering, probed three times
codes += [client.get("/healthz").status_code for _ in range(3)]
print("codes:", *codes)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "codes: 200 503 503 503" in done.stdout.splitlines(), done.stdout
    # Then standard error says why once, stamped with the time as every line of the
    # server's is, naming the ledger
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d "
    said = [line for line in done.stderr.splitlines() if "health:" in line]
    assert len(said) == 1, done.stderr
    assert re.match(stamp + r"WARNING: +health: the ledger is closed \(", said[0]), said
    assert url in said[0]


def test_a_probe_cancelled_as_it_starts_leaves_the_next_probe_its_answer(
    probed: Probed,
) -> None:
    # A client that disconnects (its request cancelled) before the read it started
    # runs must not leave every later probe waiting on that read
    health = probed.app.state.health

    async def cancelled_then_probed() -> list[str | None]:
        answers = []
        for _ in range(3):
            first = asyncio.ensure_future(health.check())
            await asyncio.sleep(0)  # started, the read not yet run
            first.cancel()
            with suppress(asyncio.CancelledError):
                await first
            answers.append(await asyncio.wait_for(health.check(), 30))
        return answers

    assert asyncio.run(cancelled_then_probed()) == [None, None, None]
    assert probed.client.get("/healthz").content == OK


def test_pg_a_waiting_probe_cancelled_leaves_the_others_their_answer(
    pg_url: str, pg_app: tuple[Ledger, Starlette]
) -> None:
    led, app = pg_app
    health = app.state.health

    async def one_cancelled(release: Callable[[], None]) -> list[object]:
        probes = [asyncio.ensure_future(health.check()) for _ in range(3)]
        await asyncio.sleep(0.5)  # the read waits on the lock
        assert not any(p.done() for p in probes)
        probes[1].cancel()  # a probe that joined the read: its client goes away
        await asyncio.sleep(0.1)
        release()
        return list(await asyncio.gather(*probes, return_exceptions=True))

    # Given the log locked, so the probes' one read waits
    with _log_locked(pg_url, led) as release:
        answers = asyncio.run(one_cancelled(release))
    # Then the cancelled one is cancelled, and the others answer: the ledger is up
    assert isinstance(answers[1], asyncio.CancelledError)
    assert [answers[0], answers[2]] == [None, None]
    with TestClient(app) as client:
        assert client.get("/healthz").content == OK
