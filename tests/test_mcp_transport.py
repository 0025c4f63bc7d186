"""``provledger mcp``'s transports, run for real: a subprocess spoken to over
stdio with raw bytes, and over streamable HTTP with real requests.

Over stdio a line that is not UTF-8 is refused, not read with U+FFFD in place of
its bytes. Over streamable HTTP the Host and Origin checks against DNS
rebinding stay on whatever address it binds (a non-loopback bind is warned
about). Over either, a stop by SIGINT or SIGTERM ends it as ``provledger serve``
ends: the call under way answered, the ledger closed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, AnyStr

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from ledger import Kind, Ledger

SCOPE = "proj-a"

#: A JSON-RPC ``initialize`` request and the notification that follows it.
_INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "0"},
}})  # fmt: skip
_INITIALIZED = '{"jsonrpc":"2.0","method":"notifications/initialized"}'


def _agent_ledger(tmp_path: Path) -> tuple[str, str]:
    """A SQLite ledger in ``tmp_path`` where agent-1 may propose and read in proj-a:
    its URL and agent-1's token."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
        return url, admin.issue_token("agent-1")


def _with_k1_accepted(tmp_path: Path, capture: bool = False) -> tuple[str, str]:
    """:func:`_agent_ledger` with K1 (claim ``k``) proposed by agent-1 and accepted
    by a reviewer (``capture``: and evidence E1 captured, a candidate)."""
    url, token = _agent_ledger(tmp_path)
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("reviewer", scope=SCOPE, roles=["approve", "read"])
        agent = led.authenticate(token)
        agent.propose(scope=SCOPE, claim_key="k", value=1, kind=Kind.FACT, id="K1")
        if capture:
            agent.capture(scope=SCOPE, uri="https://docs.test/e", content=b"e", id="E1")
        led.authenticate(admin.issue_token("reviewer")).accept("K1")
    return url, token


def _lines(stream: IO[AnyStr]) -> queue.Queue[AnyStr | None]:
    """The lines ``stream`` gives, as they come (read on a thread), then None."""
    found: queue.Queue[AnyStr | None] = queue.Queue()

    def read() -> None:
        for line in stream:
            found.put(line)
        found.put(None)

    threading.Thread(target=read, daemon=True).start()
    return found


def _text(result: Any) -> str:
    """A tool result's text (a refusal's message)."""
    assert result.is_error, result.structured_content
    text = result.content[0].text
    assert isinstance(text, str)
    return text


# -- stdio -----------------------------------------------------------------------------------


def _capture(request_id: int, content: bytes) -> bytes:
    """A ``capture_evidence`` call, its content the raw bytes given (UTF-8 or not)."""
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"capture_evidence",'
        b'"arguments":{"scope":"proj-a","uri":"https://docs.test/a","content":"%s","id":"E%d"}}}'
        % (request_id, content, request_id)
    )


def test_a_line_that_is_not_utf8_over_stdio_is_a_parse_error_and_writes_nothing(
    tmp_path: Path,
) -> None:
    # Given provledger mcp over stdio, spoken to in raw bytes
    url, token = _agent_ledger(tmp_path)
    server = subprocess.Popen(
        [sys.executable, "-m", "ledger", "mcp", "--url", url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PROVLEDGER_TOKEN": token},
    )
    assert server.stdin is not None and server.stdout is not None
    answers = _lines(server.stdout)

    def ask(line: bytes) -> Any:
        assert server.stdin is not None
        server.stdin.write(line + b"\n")
        server.stdin.flush()
        answer = answers.get(timeout=30)  # queue.Empty: no answer came
        assert answer is not None, "the server ended"
        return json.loads(answer)

    try:
        ask(_INITIALIZE.encode())
        server.stdin.write(_INITIALIZED.encode() + b"\n")
        # When a call's content is "caf" and the byte 0xe9 (Latin-1, not UTF-8)
        sent = _capture(1, b"caf\xe9")
        latin1 = ask(sent)
        # and then the same word in UTF-8
        utf8 = ask(_capture(2, "café".encode()))
    finally:
        server.stdin.close()
        server.wait(timeout=30)

    # Then the first is a parse error naming the line as not UTF-8 and where, with its id
    at = sent.index(b"\xe9") + 1
    assert latin1 == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {
            "code": -32700,
            "message": f"Parse error: not UTF-8: the line is not UTF-8 text (byte 0xe9 at byte "
            f"{at})",
        },
    }
    # and nothing was stored for it (not "caf\ufffd"), while the UTF-8 one is kept as sent
    assert utf8["result"]["structuredContent"]["id"] == "E2"
    with Ledger.open(url) as led:
        records = led.authenticate(token).records(SCOPE)
    assert [r.id for r in records] == ["E2"]
    assert records[0].evidence is not None
    assert (
        records[0].evidence["content_hash"]
        == f"sha256:{hashlib.sha256('café'.encode()).hexdigest()}"
    )


def _call(request_id: int, tool: str, arguments: str) -> str:
    """A ``tools/call`` line, its arguments the raw JSON given (a name twice, say)."""
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":'
        f'{{"name":"{tool}","arguments":{arguments}}}}}'
    )


def test_calls_piped_in_whole_are_each_answered_before_the_server_ends(tmp_path: Path) -> None:
    # Given calls written to provledger mcp's standard input, which then ends at once
    # (`provledger mcp < calls.jsonl`): a write, a read, and a name given twice
    url, token = _with_k1_accepted(tmp_path)
    propose = '{"scope":"proj-a","claim_key":"p","value":1,"kind":"fact","id":"P1"}'
    twice = (
        '{"scope":"proj-a","claim_key":"d","value":1,"kind":"fact",'
        '"parents":["E1"],"parents":[],"id":"D1"}'
    )
    calls = [
        _INITIALIZE,
        _INITIALIZED,
        _call(1, "propose_memory", propose),
        _call(2, "read_memory", '{"scope":"proj-a","claim_key":"k"}'),
        _call(3, "propose_memory", twice),
        # (a line like the server's own mark of such a line is a line like any other)
        '\x00given twice:xyz\x00{"id":5}',
        '{"jsonrpc":"2.0","id":6,"method":"ping"}',
    ]
    (tmp_path / "calls.jsonl").write_text("\n".join(calls) + "\n")
    with (tmp_path / "calls.jsonl").open("rb") as given:
        done = subprocess.run(
            [sys.executable, "-m", "ledger", "mcp", "--url", url],
            stdin=given,
            capture_output=True,
            env={**os.environ, "PROVLEDGER_TOKEN": token},
            timeout=60,
            check=False,
        )
    # Then each call is answered, in whatever order they end, and the server ends 0
    assert done.returncode == 0, done.stderr
    answers = {a["id"]: a for a in map(json.loads, done.stdout.decode().splitlines())}
    assert sorted(answers) == [0, 1, 2, 3, 5, 6], done.stdout
    assert answers[5]["error"]["code"] == -32700 and answers[6]["result"] == {}
    assert answers[1]["result"]["structuredContent"]["id"] == "P1"
    assert answers[2]["result"]["structuredContent"]["outcome"] == "FOUND"
    # the one giving a name twice refused as the HTTP API and the command line refuse
    # it, not read as its last value (its declared parent lost), and nothing stored
    assert answers[3]["error"] == {
        "code": -32700,
        "message": "Parse error: the name 'parents' is given twice in one object: give "
        "each once (which value would count is not said)",
    }
    with Ledger.open(url) as led:
        ids = [r.id for r in led.authenticate(token).records(SCOPE)]
    assert sorted(ids) == ["K1", "P1"]


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_provledger_mcp_over_stdio_stopped_by_a_signal_answers_the_call_under_way_and_ends_by_it(
    tmp_path: Path, sent: signal.Signals
) -> None:
    # Given provledger mcp over stdio, its run begun by a read
    url, token = _agent_ledger(tmp_path)
    server = subprocess.Popen(
        [sys.executable, "-m", "ledger", "mcp", "--url", f"{url}?timeout=20"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PROVLEDGER_TOKEN": token},
    )
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    answers = _lines(server.stdout)
    holder = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)

    def send(message: dict[str, Any]) -> None:
        assert server.stdin is not None
        server.stdin.write(json.dumps(message).encode() + b"\n")
        server.stdin.flush()

    def call(request_id: int, tool: str, **arguments: Any) -> None:
        params = {"name": tool, "arguments": arguments}
        send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})

    try:
        send(json.loads(_INITIALIZE))
        assert answers.get(timeout=30) is not None
        send(json.loads(_INITIALIZED))
        call(1, "read_memory", scope=SCOPE, claim_key="k")
        assert answers.get(timeout=30) is not None
        # and a proposal waiting for a lock another process holds
        holder.execute("BEGIN IMMEDIATE")
        call(2, "propose_memory", scope=SCOPE, claim_key="k", value=1, kind="fact", id="STOP1")
        time.sleep(3)  # the call reaches the server and waits for the lock
        # When it is stopped meanwhile (stdin left open), and the lock let go after
        server.send_signal(sent)
        time.sleep(1.0)
        holder.execute("ROLLBACK")
        answer = answers.get(timeout=60)
        status = server.wait(timeout=60)
    finally:
        holder.close()
        server.kill()
        stderr = server.stderr.read().decode()
    # Then the call under way was answered with what it wrote
    assert answer is not None, stderr
    result = json.loads(answer)["result"]
    assert not result.get("isError") and result["structuredContent"]["id"] == "STOP1", result
    # and the server said so and ended by that signal, its run ended and the ledger closed
    assert stderr.endswith(f"Stopped by {sent.name}; the ledger is closed\n"), stderr
    assert "interrupted" not in stderr and "Traceback" not in stderr
    assert status == -sent, stderr
    assert not (tmp_path / "ledger.db-wal").exists()
    runs = sqlite3.connect(tmp_path / "ledger.db")
    try:
        assert runs.execute("SELECT count(*) FROM pl_runs WHERE ended_pos IS NULL").fetchone() == (
            0,
        )
        assert runs.execute("SELECT record_id FROM pl_records").fetchall() == [("STOP1",)]
    finally:
        runs.close()


def test_provledger_mcp_over_stdio_stops_by_a_signal_while_a_client_listens_for_updates(
    tmp_path: Path,
) -> None:
    # Given provledger mcp over stdio, and a client listening for resource updates
    # (a request the server answers only when its stream ends)
    url, token = _agent_ledger(tmp_path)
    started = tmp_path / "pid"
    command = f"echo $$ > {started}; exec {sys.executable} -m ledger mcp --url {url}"
    params = StdioServerParameters(
        command="sh", args=["-c", command], env={**os.environ, "PROVLEDGER_TOKEN": token}
    )
    ended: list[bool] = []

    async def listen_and_stop() -> None:
        with (tmp_path / "stderr").open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                await client.list_tools()
                pid = int(started.read_text())
                async with client.listen(resource_subscriptions=["provledger://record/X"]):
                    # When the server is sent SIGTERM
                    os.kill(pid, signal.SIGTERM)
                    for _ in range(300):
                        try:
                            os.kill(pid, 0)
                        except ProcessLookupError:
                            ended.append(True)
                            return
                        await anyio.sleep(0.1)

    # (the client's own end, once the server is gone, may raise)
    try:
        with contextlib.suppress(Exception, BaseExceptionGroup):
            anyio.run(listen_and_stop)
    finally:
        if not ended and started.exists():  # never left running
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(started.read_text()), signal.SIGKILL)
    # Then it stops as it does otherwise, the listening client notwithstanding
    assert ended == [True], (tmp_path / "stderr").read_text()
    assert (tmp_path / "stderr").read_text().endswith("Stopped by SIGTERM; the ledger is closed\n")


def test_a_read_under_another_writers_lock_is_refused_saying_recording_it_needed_the_lock(
    tmp_path: Path,
) -> None:
    # Given an accepted record and captured evidence, and provledger mcp over stdio on
    # a ledger whose lock wait is 1 s
    url, token = _with_k1_accepted(tmp_path, capture=True)
    env = {**os.environ, "PROVLEDGER_TOKEN": token}
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "ledger", "mcp", "--url", f"{url}?timeout=1"], env=env
    )
    locker = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    reads = {
        "read_memory": {"scope": SCOPE, "claim_key": "k"},
        "explain_memory": {"scope": SCOPE, "claim_key": "k"},
        "get_record": {"record_id": "K1"},
        "list_records": {"scope": SCOPE},
        "read_evidence": {"record_id": "E1"},
    }

    async def session() -> tuple[dict[str, str], str, Any]:
        with (tmp_path / "stderr.txt").open("w") as errlog:
            async with Client(stdio_client(server, errlog=errlog)) as client:
                # its run begins, shown nothing yet
                first = await client.call_tool("read_memory", {"scope": SCOPE, "claim_key": "none"})
                assert not first.is_error, first.content
                # When another writer holds the writers' lock while it reads
                locker.execute("BEGIN IMMEDIATE")
                try:
                    waited = {
                        name: _text(await client.call_tool(name, arguments))
                        for name, arguments in reads.items()
                    }
                    with pytest.raises(MCPError) as resource:
                        await client.read_resource("provledger://record/K1")
                finally:
                    locker.execute("ROLLBACK")
                later = await client.call_tool("read_memory", reads["read_memory"])
                # A read showing only what the run was shown already records nothing,
                # so it does not wait for the lock
                locker.execute("BEGIN IMMEDIATE")
                try:
                    again = await client.call_tool("read_memory", reads["read_memory"])
                finally:
                    locker.execute("ROLLBACK")
                assert not again.is_error and again.structured_content["outcome"] == "FOUND"
        return waited, resource.value.error.message, later

    try:
        waited, resource, later = anyio.run(session, backend="asyncio")
    finally:
        locker.close()

    # Then each read is refused saying that recording what it showed needed the lock
    def why(reader: str) -> str:
        return (
            f"ConcurrencyError: {reader} records in this connection's run what it shows you "
            "(the observed dependencies of what you propose next), a write that needs the "
            "ledger's writers' lock: the ledger stayed locked by other writers (of this "
            "process or another) for "
        )

    for name, text in waited.items():
        assert text.startswith(f"Error executing tool {name}: {why(name)}"), text
        assert text.endswith("; nothing was shown or recorded: try again"), text
    assert resource.startswith(why("the record resource")), resource
    # and once the lock is free the read answers
    assert not later.is_error and later.structured_content["outcome"] == "FOUND"


# -- streamable HTTP -------------------------------------------------------------------------


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port = probe.getsockname()[1]
        assert isinstance(port, int)
        return port


class _Served:
    """A process serving MCP over streamable HTTP, and what it says on standard error."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.process.stderr is not None
        self._said = _lines(self.process.stderr)
        self.said: list[str] = []
        self._ended = False

    def listening(self) -> list[str]:
        """What it said up to the line saying where it listens."""
        while not self.said or "MCP endpoint at" not in self.said[-1]:
            line = self._said.get(timeout=60)  # queue.Empty: it never listened
            self._ended = line is None
            assert line is not None, "".join(self.said)
            self.said.append(line)
        return self.said

    def stop(self, sent: signal.Signals) -> tuple[int, str, str]:
        """Send ``sent``; its exit status, standard output and all it said."""
        self.process.send_signal(sent)
        try:
            self.process.wait(timeout=60)
        finally:
            self.process.kill()
        assert self.process.stdout is not None
        out = self.process.stdout.read()
        while not self._ended and (line := self._said.get(timeout=60)) is not None:
            self.said.append(line)
        return self.process.returncode, out, "".join(self.said)


def _status(url: str, **headers: str) -> int:
    """The HTTP status of an ``initialize`` request sent to ``url`` with ``headers``."""
    sent = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        **headers,
    }
    with httpx.Client(timeout=30) as client:
        return client.post(url, content=_INITIALIZE, headers=sent).status_code


async def _tools(url: str) -> list[str]:
    async with Client(url) as client:
        return [tool.name for tool in (await client.list_tools()).tools]


def test_bound_to_every_address_it_warns_and_still_refuses_a_host_it_was_not_told_of(
    tmp_path: Path,
) -> None:
    # Given provledger mcp over streamable HTTP bound to every address (the SDK
    # checks Host and Origin only on 127.0.0.1, localhost and ::1)
    url, token = _agent_ledger(tmp_path)
    port = _free_port("0.0.0.0")
    served = _Served(
        [sys.executable, "-m", "ledger", "mcp", "--url", url, "--transport", "streamable-http",
         "--host", "0.0.0.0", "--port", str(port)],
        {**os.environ, "PROVLEDGER_TOKEN": token},
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}/mcp"
    try:
        said = list(served.listening())
        # When a page's script reaches it through a name of its own (DNS rebinding)
        rebound = _status(endpoint, Host=f"evil.example:{port}", Origin="http://evil.example")
        # or from another origin through this machine's name
        foreign = _status(endpoint, Origin="http://evil.example")
        # Then both are refused, while a client on this machine is served
        tools = anyio.run(_tools, endpoint, backend="asyncio")
        local = _status(endpoint, Host=f"localhost:{port}", Origin=f"http://localhost:{port}")
    finally:
        served.stop(signal.SIGTERM)
    assert (rebound, foreign, local) == (421, 403, 200)
    assert "read_memory" in tools
    # and it warned that it is reachable from elsewhere, and how to allow a host
    assert said[0] == (
        "WARNING:  MCP endpoint bound to 0.0.0.0, not loopback only: it asks for no "
        "credentials, and every client that reaches it acts with this server's token. Only "
        "requests whose Host header names 127.0.0.1, localhost, [::1] (on any port) are "
        "served (others get 421); name the hosts clients reach it by with --allowed-host "
        "HOST[:PORT]\n"
    ), said
    assert (
        said[1] == f"INFO:     MCP endpoint at http://0.0.0.0:{port}/mcp (Press CTRL+C to quit)\n"
    )


#: ``serve`` called as a library, its result printed.
_SERVE = """
import os, sys
from ledger import Ledger
from ledger.integrations.mcp import serve
host, port, *allowed = sys.argv[1:]
told = {"allowed_hosts": allowed} if allowed else {}
with Ledger.open(os.environ["URL"]) as led:
    stopped = serve(led, os.environ["TOKEN"], transport="streamable-http", host=host,
                    port=int(port), **told)
print("stopped by", stopped and stopped.name)
"""


def test_the_hosts_named_are_allowed_and_a_stop_signal_is_returned_once_it_shut_down(
    tmp_path: Path,
) -> None:
    # Given the server bound to a loopback address the SDK does not know as one
    # (127.0.0.2), told of two hosts, the second with a port
    url, token = _agent_ledger(tmp_path)
    port = _free_port("127.0.0.2")
    served = _Served(
        [sys.executable, "-c", _SERVE, "127.0.0.2", str(port), "MCP.Example.test",
         f"10.1.2.3:{port}"],
        {**os.environ, "URL": url, "TOKEN": token},
    )  # fmt: skip
    endpoint = f"http://127.0.0.2:{port}/mcp"
    try:
        said = list(served.listening())
        # When requests name those hosts (any port for the first), the address bound,
        # or another
        named = _status(endpoint, Host="mcp.example.test", Origin="https://mcp.example.test")
        any_port = _status(endpoint, Host="mcp.example.test:8443")
        with_port = _status(endpoint, Host=f"10.1.2.3:{port}", Origin=f"http://10.1.2.3:{port}")
        other_port = _status(endpoint, Host="10.1.2.3:1")
        bound = _status(endpoint)
        other = _status(endpoint, Host="evil.example")
        rebinding = _status(endpoint, Origin="http://evil.example")
    finally:
        # and it is stopped with Ctrl-C
        status, out, stderr = served.stop(signal.SIGINT)
    # Then the hosts named and the address bound are served, no other
    assert (named, any_port, with_port, bound) == (200, 200, 200, 200)
    assert (other_port, other, rebinding) == (421, 421, 403)
    assert not said[0].startswith("WARNING")  # loopback: nothing to warn of
    # and serve returned SIGINT after uvicorn's shutdown: no KeyboardInterrupt
    assert (status, out) == (0, "stopped by SIGINT\n"), stderr
    assert "Application shutdown complete" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_ends_serve_returning_it_so_its_caller_closes_the_ledger(
    tmp_path: Path, sent: signal.Signals
) -> None:
    # Given serve over streamable HTTP, called from a script that closes the ledger
    # it opened when serve returns
    url, token = _agent_ledger(tmp_path)
    port = _free_port("127.0.0.1")
    served = _Served(
        [sys.executable, "-c", _SERVE, "127.0.0.1", str(port)],
        {**os.environ, "URL": url, "TOKEN": token},
    )
    try:
        served.listening()
        assert anyio.run(_tools, f"http://127.0.0.1:{port}/mcp", backend="asyncio")
    finally:
        # When it is sent a stop signal
        status, out, stderr = served.stop(sent)
    # Then serve returns that signal once uvicorn has shut down (SIGINT was a
    # KeyboardInterrupt out of uvicorn; SIGTERM's default action ended the process
    # there, the ledger left open)
    assert (status, out) == (0, f"stopped by {sent.name}\n"), stderr
    assert "Application shutdown complete" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "ledger.db-wal").exists()  # closed: SQLite folded its log in


@pytest.mark.parametrize(
    "given",
    ["*", "", "evil.example:", "evil.example:0", "evil.example:65536", "[::1", "[nothost]:80",
     "a b", "http://evil.example", "evil.example/mcp"],
)  # fmt: skip
def test_an_allowed_host_that_is_no_host_or_host_and_port_is_refused_naming_it(
    given: str,
) -> None:
    from ledger.errors import InvalidInputError
    from ledger.integrations.mcp.http import allowed_host

    with pytest.raises(InvalidInputError) as refused:
        allowed_host(given)
    assert str(refused.value) == (
        f"allowed host {given!r} is not HOST or HOST:PORT (a name or address, e.g. "
        "mcp.example.com, 10.0.0.5:8000 or [fe80::1]:8000)"
    )


def test_an_allowed_host_reads_as_a_requests_host_header_does() -> None:
    from ledger.integrations.mcp.http import allowed_host

    given = ["MCP.example.com", "10.0.0.5:8000", "[FE80::1]:8000", "fe80::1", "host_1.lan."]
    assert [allowed_host(text) for text in given] == [
        "mcp.example.com", "10.0.0.5:8000", "[fe80::1]:8000", "[fe80::1]", "host_1.lan.",
    ]  # fmt: skip


# -- the command (ledger/cli/agents.py) -------------------------------------------------------


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_provledger_mcp_over_http_stopped_by_a_signal_ends_as_provledger_serve_does(
    tmp_path: Path, sent: signal.Signals
) -> None:
    # Given provledger mcp over streamable HTTP, serving
    url, token = _agent_ledger(tmp_path)
    port = _free_port("127.0.0.1")
    served = _Served(
        [sys.executable, "-m", "ledger", "mcp", "--url", url, "--transport", "streamable-http",
         "--port", str(port)],
        {**os.environ, "PROVLEDGER_TOKEN": token},
    )  # fmt: skip
    try:
        served.listening()
        assert anyio.run(_tools, f"http://127.0.0.1:{port}/mcp", backend="asyncio")
    finally:
        # When it is stopped with Ctrl-C or SIGTERM
        status, _, stderr = served.stop(sent)
    # Then it says it stopped with the ledger closed, and ends by that signal, as
    # provledger serve does: not "interrupted" and 130, which tell of a command cut short
    assert stderr.endswith(f"INFO:     Stopped by {sent.name}; the ledger is closed\n"), stderr
    assert "interrupted" not in stderr and "Traceback" not in stderr
    assert status == -sent, stderr
    assert not (tmp_path / "ledger.db-wal").exists()


def test_provledger_mcp_over_http_stops_within_its_wait_while_a_client_listens(
    tmp_path: Path,
) -> None:
    # Given provledger mcp over streamable HTTP, its stop's wait 7 s (a lock wait of
    # 1 s: twice that and 5 s), and a client in a session listening for what the
    # server sends it (its GET stream, which never ends by itself)
    url, token = _agent_ledger(tmp_path)
    port = _free_port("127.0.0.1")
    served = _Served(
        [sys.executable, "-m", "ledger", "mcp", "--url", f"{url}?timeout=1", "--transport",
         "streamable-http", "--port", str(port)],
        {**os.environ, "PROVLEDGER_TOKEN": token},
    )  # fmt: skip
    ended: list[float] = []

    async def listen_and_stop() -> None:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            await client.list_tools()
            await anyio.sleep(0.5)  # (its GET stream open)
            # When it is sent SIGTERM
            served.process.send_signal(signal.SIGTERM)
            began = time.monotonic()
            while served.process.poll() is None and time.monotonic() - began < 60:
                await anyio.sleep(0.2)
            ended.append(time.monotonic() - began)

    try:
        served.listening()
        with contextlib.suppress(Exception, BaseExceptionGroup):  # its end, the server gone
            anyio.run(listen_and_stop)
    finally:
        status, _, stderr = served.stop(signal.SIGTERM)
    # Then it ends by that signal within the wait (the session's stream closed by
    # the stop), not a traceback
    assert ended and ended[0] < 7, (ended, stderr)
    assert status == -signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    assert stderr.endswith("INFO:     Stopped by SIGTERM; the ledger is closed\n"), stderr


def test_a_call_under_way_when_it_is_stopped_is_answered_with_what_it_wrote(
    tmp_path: Path,
) -> None:
    # Given provledger mcp over streamable HTTP, and an agent's session
    url, token = _agent_ledger(tmp_path)
    port = _free_port("127.0.0.1")
    served = _Served(
        [sys.executable, "-m", "ledger", "mcp", "--url", f"{url}?timeout=20", "--transport",
         "streamable-http", "--port", str(port)],
        {**os.environ, "PROVLEDGER_TOKEN": token},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}/mcp"
    headers = {"Accept": "application/json, text/event-stream"}
    answer: list[httpx.Response] = []
    holder = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    try:
        served.listening()
        init = {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}},
        }  # fmt: skip
        opened = httpx.post(base, json=init, headers=headers, timeout=30)
        headers |= {"mcp-session-id": opened.headers["mcp-session-id"]}
        headers |= {"mcp-protocol-version": "2025-06-18"}
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        httpx.post(base, json=ready, headers=headers, timeout=30)
        # And a proposal waiting for a lock another process holds
        holder.execute("BEGIN IMMEDIATE")
        call = {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "propose_memory", "arguments": {
                "scope": "proj-a", "claim_key": "k", "value": 1, "kind": "fact", "id": "STOP1"}},
        }  # fmt: skip
        proposing = threading.Thread(
            target=lambda: answer.append(httpx.post(base, json=call, headers=headers, timeout=90))
        )
        proposing.start()
        time.sleep(1.5)  # the call reaches the server and waits for the lock
        # When the server is stopped meanwhile, and the lock let go after
        served.process.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        holder.execute("ROLLBACK")
        proposing.join(timeout=90)
    finally:
        holder.close()
        status, _, stderr = served.stop(signal.SIGTERM)
    # Then the call was answered with what it wrote, not an empty stream
    assert status == -signal.SIGTERM, stderr
    assert len(answer) == 1 and answer[0].status_code == 200, stderr
    result = answer[0].json()["result"]
    assert not result.get("isError"), result
    assert json.loads(result["content"][0]["text"])["id"] == "STOP1"


def test_provledger_mcp_allowed_host_names_what_a_requests_host_may_be(tmp_path: Path) -> None:
    url, token = _agent_ledger(tmp_path)
    env = {**os.environ, "PROVLEDGER_TOKEN": token}
    port = _free_port("127.0.0.1")
    command = [sys.executable, "-m", "ledger", "mcp", "--url", url,
               "--transport", "streamable-http", "--port", str(port)]  # fmt: skip
    # A wildcard is no host: refused in one line, before it listens
    wildcard = subprocess.run(
        [*command, "--allowed-host", "*"], env=env, capture_output=True, text=True, timeout=60
    )
    assert (wildcard.returncode, wildcard.stdout) == (1, "")
    assert wildcard.stderr == (
        "error: allowed host '*' is not HOST or HOST:PORT (a name or address, e.g. "
        "mcp.example.com, 10.0.0.5:8000 or [fe80::1]:8000)\n"
    )
    # Hosts named (one on any port, one on its port) are served, another refused
    served = _Served(
        [*command, "--allowed-host", "mcp.example.test", "--allowed-host", f"10.1.2.3:{port}"],
        env,
    )
    endpoint = f"http://127.0.0.1:{port}/mcp"
    try:
        served.listening()
        named = _status(endpoint, Host="mcp.example.test:443", Origin="https://mcp.example.test")
        with_port = _status(endpoint, Host=f"10.1.2.3:{port}")
        other = _status(endpoint, Host="10.1.2.3:1")
    finally:
        served.stop(signal.SIGTERM)
    assert (named, with_port, other) == (200, 200, 421)


def test_over_http_each_client_session_is_a_run_and_sessionless_requests_are_refused(
    tmp_path: Path,
) -> None:
    # Given provledger mcp over streamable HTTP (every client acts with its token)
    # and K1 accepted
    url, token = _with_k1_accepted(tmp_path)
    port = _free_port("127.0.0.1")
    endpoint = f"http://127.0.0.1:{port}/mcp"
    served = _Served(
        [sys.executable, "-m", "ledger", "mcp", "--url", url, "--transport",
         "streamable-http", "--port", str(port)],
        {**os.environ, "PROVLEDGER_TOKEN": token},
    )  # fmt: skip

    async def two_clients() -> list[str]:
        async with Client(endpoint) as a, Client(endpoint) as b:
            await a.call_tool("read_memory", {"scope": SCOPE, "claim_key": "k"})
            for who, rid in ((a, "A1"), (b, "B1")):
                args = {"scope": SCOPE, "claim_key": rid, "value": 1, "kind": "inference"}
                done = await who.call_tool("propose_memory", {**args, "id": rid})
                assert not done.is_error, done
            return [a.session.protocol_version, b.session.protocol_version]

    try:
        served.listening()
        # When a request of the 2026 protocol (no sessions) lists the tools
        refused = httpx.post(
            endpoint,
            json={"jsonrpc": "2.0", "id": "q", "method": "tools/list", "params": {}},
            headers={"Accept": "application/json, text/event-stream",
                     "MCP-Protocol-Version": "2026-07-28"},
            timeout=30,
        )  # fmt: skip
        # Then it is refused, naming the versions served; the SDK's Client then opens
        # sessions, each its own run
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == -32022
        assert refused.json()["id"] == "q"
        sessionless = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": "2026-07-28",
        }
        # (a body nested past what a parser follows is refused so too, its id unread)
        deep = httpx.post(endpoint, content=b"[" * 200_000, headers=sessionless, timeout=30)
        assert deep.status_code == 400 and deep.json()["id"] is None, deep.text
        # (and a Host it was not told of is refused first, as any request is)
        rebound = httpx.post(
            endpoint, content=b"{}", headers={**sessionless, "Host": f"evil.example:{port}"}
        )
        assert rebound.status_code == 421
        versions = anyio.run(two_clients)
    finally:
        _, _, stderr = served.stop(signal.SIGTERM)
    assert versions == ["2025-11-25", "2025-11-25"], stderr
    with Ledger.open(url) as led:
        agent = led.authenticate(token)
        # What A read is A1's basis, not B1's
        assert agent.get("A1").observed == ("K1",)
        assert agent.get("B1").observed == ()
