"""Storage faults as a user meets them: a full disk, a PostgreSQL server that ends
the ledger's sessions, a wrong database, a bad URL option.

Every fault is a typed ``LedgerError`` (``DiskFullError``, ``ConnectionLostError``,
``StorageError``, ``InvalidURLError`` naming the option) with a one-line message
and no credentials; the log and the views are exactly as they were (position,
Merkle digest, views digest, audit and reads compared before and after); after the
fault the ledger opens, ``verify()`` passes and the next call works.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from click.testing import CliRunner

from ledger import (
    ConnectionLostError,
    DiskFullError,
    Kind,
    Ledger,
    Session,
    Status,
    StorageError,
)
from ledger.cli import main
from ledger.errors import InvalidURLError, LedgerError, LedgerNotFoundError
from ledger.persistence.faults import storage_error
from ledger.persistence.sqlite import FILE_CHECK_EVERY
from ledger.persistence.urls import PG_BOUNDS, resolve_url

from .conftest import PG_SERVER, _pg_dsn
from .faults import SmallDisk, end_sessions, small_disk

ROOT = Path(__file__).resolve().parent.parent

# -- a ledger in use, and everything a user could compare before and after -------------


@dataclass
class InUse:
    """An open ledger with an agent and a reviewer, some accepted knowledge, and a
    delivery."""

    led: Ledger
    agent: Session
    reviewer: Session
    agent_token: str
    reviewer_token: str

    def state(self) -> tuple[Any, ...]:
        """What the ledger says: position, digest, views, one audit trail, one read."""
        read = self.reviewer.read(scope="proj-a", claim_key="api.retry_safe")
        return (
            self.led.position,
            self.led.digest(),
            self.led.views_digest(),
            self.reviewer.audit("M1"),
            read.outcome,
            tuple(r.id for r in read.records),
            self.led.stats()["events"],
        )


def in_use(url: str, **options: Any) -> InUse:
    led = Ledger.open(url, **options)
    admin = led.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
    agent_token, reviewer_token = admin.issue_token("agent-1"), admin.issue_token("reviewer")
    agent, reviewer = led.authenticate(agent_token), led.authenticate(reviewer_token)
    e1 = agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"retry is safe", id="E1")
    reviewer.accept(e1)
    agent.propose(
        scope="proj-a",
        claim_key="api.retry_safe",
        value=True,
        kind=Kind.INFERENCE,
        parents=[e1],
        id="M1",
    )
    reviewer.accept("M1")
    reviewer.deliver("M1", recipient="ops@x.test")
    return InUse(led, agent, reviewer, agent_token, reviewer_token)


def reopened(url: str, before: InUse) -> InUse:
    led = Ledger.open(url)
    return InUse(
        led,
        led.authenticate(before.agent_token),
        led.authenticate(before.reviewer_token),
        before.agent_token,
        before.reviewer_token,
    )


def one_line(message: str) -> None:
    assert message.strip() and "\n" not in message.strip(), message
    assert "Traceback" not in message


# -- a full disk: a small tmpfs, or a file size limit ------------------------------


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """A 4 MiB tmpfs (needs root; the file-size-limit tests below need nothing)."""
    (tmp_path / "disk").mkdir()
    with small_disk(tmp_path / "disk", "4m") as mounted:
        yield mounted


def big_items(n: int, size: int) -> list[dict[str, Any]]:
    return [
        {
            "scope": "proj-a",
            "claim_key": f"bulk.{i}",
            "value": "x" * size,
            "kind": "inference",
            "parents": ["E1"],
        }
        for i in range(n)
    ]


def big_writes(agent: Session) -> list[Callable[[], object]]:
    """Commands that each need more than a few free pages: a large proposal, a batch,
    a large capture."""
    return [
        lambda: agent.propose(
            scope="proj-a",
            claim_key="big",
            value="v" * 900_000,
            kind=Kind.INFERENCE,
            parents=["E1"],
            id="BIG",
        ),
        lambda: agent.propose_many(big_items(20, 40_000)),
        lambda: agent.capture(
            scope="proj-a", uri="https://x.test/big", content=os.urandom(900_000)
        ),
    ]


def refused_as_full(agent: Session, reason: str) -> None:
    """Each of ``big_writes`` is refused with ``DiskFullError``: one line, the
    database's ``reason``, nothing written."""
    for attempt in big_writes(agent):
        with pytest.raises(DiskFullError) as caught:
            attempt()
        message = str(caught.value)
        one_line(message)
        assert "disk is full" in message and reason in message
        assert "nothing was written" in message


def test_full_disk_refuses_propose_and_propose_many_then_the_ledger_is_whole(
    disk: SmallDisk,
) -> None:
    url = f"sqlite:///{disk.mount / 'ledger.db'}"
    use = in_use(url)
    before = use.state()
    disk.fill()

    refused_as_full(use.agent, "database or disk is full")
    # Still full: reads answer exactly as before.
    assert use.state() == before

    disk.free()
    use.led.close()
    again = reopened(url, use)
    try:
        assert again.led.verify().ok
        assert again.state() == before
        with pytest.raises(LedgerError):
            again.reviewer.get("BIG")
        assert again.agent.propose_many(big_items(3, 1000))  # space is back: it works
        assert again.led.position > before[0]
        assert again.led.verify().ok
    finally:
        again.led.close()


def test_a_ledger_opened_on_a_full_disk_without_create_is_not_reported_absent(
    disk: SmallDisk,
) -> None:
    # Given a ledger written and closed (no -wal or -shm file beside it)
    url = f"sqlite:///{disk.mount / 'ledger.db'}"
    use = in_use(url)
    before = use.state()
    use.led.close()
    # When the disk fills up and the ledger is opened as every command opens it
    disk.fill()
    with pytest.raises(DiskFullError) as caught:
        Ledger.open(url, create=False)
    # Then it is a full disk, not "no ledger there"
    assert not isinstance(caught.value, LedgerNotFoundError)
    one_line(str(caught.value))
    disk.free()
    again = reopened(url, use)
    try:
        assert again.state() == before
        assert again.led.verify().ok
    finally:
        again.led.close()


def test_full_disk_on_the_cli_is_one_line(disk: SmallDisk) -> None:
    url = f"sqlite:///{disk.mount / 'ledger.db'}"
    use = in_use(url)
    before = use.state()
    content = disk.mount.parent / "big.bin"
    content.write_bytes(os.urandom(600_000))
    disk.fill()
    result = CliRunner().invoke(
        main,
        ["capture", str(content), "--scope", "proj-a", "--uri", "https://x.test/big"],
        env={"PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": use.agent_token},
    )
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ") and "disk is full" in result.stderr
    one_line(result.stderr)
    disk.free()
    assert use.state() == before
    use.led.close()


_UNDER_LIMIT = """
import json, resource, signal, sys
from ledger import Ledger, LedgerError
url, token, what, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
led = Ledger.open(url)
agent = led.authenticate(token)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
items = [dict(scope="proj-a", claim_key=f"bulk.{i}", value="x" * 40000, kind="inference",
              parents=["E1"]) for i in range(20)]
try:
    if what == "propose":
        agent.propose(scope="proj-a", claim_key="big", value="v" * 600000, kind="inference",
                      parents=["E1"], id="BIG")
    else:
        agent.propose_many(items)
    print(json.dumps({"error": None}))
except LedgerError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""


def _limit_for(db: Path) -> int:
    """A file size limit a little above every file of the ledger now."""
    sizes = [p.stat().st_size for p in db.parent.glob(db.name + "*")]
    return max([*sizes, 64 * 1024]) + 16 * 1024


@pytest.mark.parametrize("what", ["propose", "propose_many"])
def test_file_size_limit_refuses_the_command_then_the_ledger_is_whole(
    tmp_path: Path, what: str
) -> None:
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    use = in_use(url)
    before = use.state()
    use.led.close()
    done = subprocess.run(
        [sys.executable, "-c", _UNDER_LIMIT, url, use.agent_token, what, str(_limit_for(db))],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["error"] == "DiskFullError", outcome
    one_line(outcome["message"])
    again = reopened(url, use)
    try:
        assert again.led.verify().ok
        assert again.state() == before
        assert again.agent.propose_many(big_items(2, 100))
    finally:
        again.led.close()


def test_file_size_limit_on_the_cli_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    use = in_use(url)
    before = use.state()
    use.led.close()
    content = tmp_path / "big.bin"
    content.write_bytes(os.urandom(600_000))
    limit = _limit_for(db)

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # stays ignored across exec
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ledger",
            "capture",
            str(content),
            "--scope",
            "proj-a",
            "--uri",
            "https://x.test/big",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PROVLEDGER_URL": url,
            "PROVLEDGER_TOKEN": use.agent_token,
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        preexec_fn=limited,
        check=False,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: ") and "disk is full" in done.stderr, done.stderr
    one_line(done.stderr)
    again = reopened(url, use)
    try:
        assert again.led.verify().ok
        assert again.state() == before
    finally:
        again.led.close()


# -- PostgreSQL: sessions ended by the server ---------------------------------------


@pytest.fixture
def pg(pg_url: str) -> str:
    return pg_url


def terminate(url: str) -> int:
    """End the ledger's server sessions and give the server time to close them."""
    ended = end_sessions(url)
    time.sleep(0.2)
    return ended


def test_pg_sessions_ended_while_idle_are_replaced_without_an_error(pg: str) -> None:
    use = in_use(pg)
    try:
        before = use.state()
        assert terminate(pg) >= 1
        assert use.state() == before  # reads: a fresh connection, no error
        assert terminate(pg) >= 1
        m2 = use.agent.propose(
            scope="proj-a", claim_key="api.other", value=1, kind=Kind.INFERENCE, parents=["E1"]
        )
        assert use.reviewer.get(m2).id == m2
        assert use.led.position == before[0] + 1
        assert use.led.verify().ok
    finally:
        use.led.close()


def test_pg_session_ended_mid_command_is_typed_nothing_lost_next_call_works(pg: str) -> None:
    ended: list[int] = []
    armed: list[bool] = []

    def check(record: Any) -> None:  # runs inside the accept's write transaction
        if armed and not ended:
            ended.append(terminate(pg))

    use = in_use(pg, acceptance_checks=[check])
    try:
        armed.append(True)
        m2 = use.agent.propose(
            scope="proj-a", claim_key="api.other", value=1, kind=Kind.INFERENCE, parents=["E1"]
        )
        before = use.state()
        with pytest.raises(ConnectionLostError) as caught:
            use.reviewer.accept(m2)
        assert ended and ended[0] >= 1
        message = str(caught.value)
        one_line(message)
        assert "was not applied" in message
        assert use.state() == before
        assert use.reviewer.get(m2).status == "CANDIDATE"
        use.reviewer.accept(m2)  # the next call works
        assert use.reviewer.get(m2).status == "ACCEPTED"
        assert use.led.verify().ok
    finally:
        use.led.close()


def test_pg_a_refused_last_write_is_not_taken_for_a_failed_commit(pg: str) -> None:
    """A command's last writes travel with its COMMIT: one the server refuses is
    reported as not applied (not as a commit whose outcome is unknown), and the
    command leaves nothing behind."""
    import psycopg

    use = in_use(pg)
    schema = pg.split("schema=")[1]
    refuse = (
        f"CREATE FUNCTION {schema}.refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'refused by a test' USING ERRCODE = '57P01'; END $$; "
        f"CREATE TRIGGER refuse BEFORE INSERT ON {schema}.pl_merkle_leaves "
        f"FOR EACH ROW EXECUTE FUNCTION {schema}.refuse()"
    )
    try:
        before = use.state()
        with psycopg.connect(_pg_dsn(), autocommit=True) as admin:
            admin.execute(refuse)
            with pytest.raises(ConnectionLostError) as caught:
                use.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT)
            message = str(caught.value)
            one_line(message)
            assert "refused by a test" in message and "was not applied" in message
            admin.execute(f"DROP TRIGGER refuse ON {schema}.pl_merkle_leaves")
        assert use.state() == before
        use.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT)
        assert use.led.stats()["events"] == before[-1] + 1
        assert use.led.verify().ok
    finally:
        use.led.close()


def test_pg_session_ended_mid_rebuild_leaves_the_views(pg: str) -> None:
    use = in_use(pg)
    try:
        before = use.state()
        ended: list[int] = []

        def progress(reached: int, target: int) -> None:
            if not ended:
                ended.append(terminate(pg))

        with pytest.raises(ConnectionLostError):
            use.led.rebuild(progress=progress)
        assert ended and ended[0] >= 1
        assert use.state() == before
        report = use.led.rebuild()
        assert report.digest_before == report.digest_after
        assert use.led.verify().ok
    finally:
        use.led.close()


def test_pg_reads_inside_a_transaction_never_wait_for_a_second_connection(pg: str) -> None:
    # A pool of one connection: a read nested in a transaction that waited for a
    # second pooled connection would time out (connect_timeout) instead.
    seen: list[tuple[int, str]] = []
    holder: list[InUse] = []

    def check(record: Any) -> None:
        if holder:
            use = holder[0]
            seen.append((use.led.position, str(use.reviewer.get("E1").status)))

    use = in_use(f"{pg}&pool_size=1&max_overflow=0&connect_timeout=2", acceptance_checks=[check])
    holder.append(use)
    try:
        m2 = use.agent.propose(
            scope="proj-a", claim_key="api.other", value=1, kind=Kind.INFERENCE, parents=["E1"]
        )
        position = use.led.position
        use.reviewer.accept(m2)
        assert seen == [(position, "ACCEPTED")]
        with use.led.engine.reading() as c:
            c.execute("SELECT 1 AS one")
            assert use.led.position == position + 1
            use.reviewer.revoke(m2, reason="withdrawn")  # a command inside the read
            assert use.reviewer.get(m2).status == "REVOKED"  # a nested read: the newest
            assert use.led.position > position + 1
            position = use.led.position
        progressed: list[int] = []
        use.led.rebuild(progress=lambda reached, target: progressed.append(use.led.position))
        assert progressed and set(progressed) == {position}
    finally:
        use.led.close()


# -- PostgreSQL: a connection refused is reported at once, with the server's reason ---


def _server(user: str | None = None, password: str = "", dbname: str | None = None) -> str:
    p = urlparse(PG_SERVER)
    who = user or p.username or "postgres"
    secret = f":{password}" if password else ""
    return f"postgresql://{who}{secret}@{p.hostname}:{p.port or 5432}/{dbname or p.path[1:]}"


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (
            lambda: _server(password="S3CRET", dbname=f"no_such_db_{uuid.uuid4().hex[:8]}"),
            "does not",
        ),
        (
            lambda: _server(password="S3CRET", user=f"no_such_role_{uuid.uuid4().hex[:8]}"),
            "does not",
        ),
        (lambda: "postgresql://postgres:S3CRET@127.0.0.1:1/test", "refused"),
    ],
    ids=["wrong-database", "wrong-role", "nothing-listening"],
)
def test_pg_connection_refused_is_reported_within_the_connect_timeout(
    pg: str, make: Callable[[], str], reason: str
) -> None:
    url = make()
    started = time.monotonic()
    with pytest.raises(StorageError) as caught:
        Ledger.open(f"{url}?connect_timeout=10")
    elapsed = time.monotonic() - started
    # A correctness bound (the reason comes back within the connect timeout), not a
    # speed claim: the old behaviour waited out the whole pool timeout.
    assert elapsed < 10
    message = str(caught.value)
    one_line(message)
    assert reason in message and "couldn't get a connection" not in message
    assert "S3CRET" not in message and ":***@" in message


def test_pg_wrong_database_on_the_cli_is_one_line_with_the_reason() -> None:
    url = _server(password="S3CRET", dbname="no_such_db_cli") + "?connect_timeout=10"
    # From the environment: a password on the command line would be warned about first.
    result = CliRunner().invoke(main, ["get", "X", "--token", "t"], env={"PROVLEDGER_URL": url})
    assert result.exit_code == 1, result.output
    one_line(result.stderr)
    assert 'database "no_such_db_cli" does not exist' in result.stderr
    assert "S3CRET" not in result.output + result.stderr


def test_a_url_without_a_password_takes_pgpassword_and_leaves_messages_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As psql would: libpq reads $PGPASSWORD only where no password is given, and the
    # ledger always gave one (empty), so the variable went unread.
    monkeypatch.setenv("PGPASSWORD", "does")
    assert resolve_url(_server()).env["POSTGRES_PASSWORD"] == "does"
    assert resolve_url(_server(password="own")).env["POSTGRES_PASSWORD"] == "own"
    # No server repeats it, so nothing is masked for it: masking its text wherever it
    # happened to appear garbled messages and, beside the URL, told it.
    url = _server(dbname="no_such_db_pgpassword") + "?connect_timeout=10"
    with pytest.raises(StorageError) as caught:
        Ledger.open(url)
    assert 'database "no_such_db_pgpassword" does not exist' in str(caught.value)
    # A password the URL holds is masked, in the URL and where the server repeats it.
    with pytest.raises(StorageError) as caught:
        Ledger.open(_server(password="S3CRET", dbname="no_such_db_pw") + "?connect_timeout=10")
    assert "S3CRET" not in str(caught.value) and ":***@" in str(caught.value)


# -- URL options ---------------------------------------------------------------------

PG = "postgresql://me:S3CRET@127.0.0.1:5432/test"


@pytest.mark.parametrize(
    ("url", "named"),
    [
        (f"{PG}?schema=information_schema", "information_schema"),
        (f"{PG}?schema=pg_catalog", "pg_catalog"),
        (f"{PG}?schema=pg_toast", "pg_toast"),
        (f"{PG}?schema=pg_mine", "pg_mine"),
        (f"{PG}?schema=a%0Ab", "schema"),
        (f"{PG}?schema=ledger%0A", "schema"),
        (f"{PG}?schema=Agents", "schema"),
        (f"{PG}?schema=a-b", "schema"),
        (f"{PG}?schema=", "schema"),
        (f"{PG}?schema={'a' * 64}", "schema"),
        (f"{PG}?schema=select", "reserved"),
        (f"{PG}?schema=user", "reserved"),
        (f"{PG}?pool_size=100000", "pool_size"),
        (f"{PG}?pool_size=21", "pool_size"),
        (f"{PG}?pool_size=0", "pool_size"),
        (f"{PG}?max_overflow=51", "max_overflow"),
        (f"{PG}?lock_timeout=99999999999999999999", "lock_timeout"),
        (f"{PG}?lock_timeout=0", "lock_timeout"),
        (f"{PG}?lock_timeout=-1", "lock_timeout"),
        (f"{PG}?lock_timeout=1.5", "lock_timeout"),
        (f"{PG}?connect_timeout=0", "connect_timeout"),
        (f"{PG}?connect_timeout=301", "connect_timeout"),
        (f"{PG}?connect_timeout=%D9%A3", "connect_timeout"),  # an Arabic-Indic digit
        ("postgresql://me:S3CRET@127.0.0.1:99999/test", "port"),
        ("sqlite:///file:x%3Fmode%3Dmemory", "file:"),
        ("sqlite:///file:ledger.db", "file:"),
        ("sqlite:///FILE:ledger.db", "FILE:"),
        ("sqlite:///:memory:", ":memory:"),
        ("sqlite:///ledger.db?mode=memory", "mode"),
        (f"{PG}?schema=a&schema=b", "option 'schema' is given 2 times"),
        (f"{PG}?password=S3CRET&password=S3CRET", "option 'password' is given 2 times"),
        ("sqlite:///ledger.db?timeout=5&timeout=50", "option 'timeout' is given 2 times"),
        (os.fsdecode(b"sqlite:///\xff.db"), "its path is not UTF-8 text"),  # a shell's $'\xff'
        ("sqlite:///%FF.db", "its path is not UTF-8 text once its %-escapes are decoded"),
    ],
)
def test_url_options_are_validated_naming_the_option(
    url: str, named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidURLError) as caught:
        Ledger.open(url)
    message = str(caught.value)
    one_line(message)
    assert named in message
    assert "S3CRET" not in message and "S3CRET" not in repr(caught.value)
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_url_bounds_are_accepted_at_their_limits(pg: str) -> None:
    # Every option at its upper bound but the pool size (that many connections stay
    # open), then at its lower bound.
    highs = {name: high for name, (_, high, _) in PG_BOUNDS.items()} | {"pool_size": 1}
    lows = {name: low for name, (low, _, _) in PG_BOUNDS.items()} | {"max_overflow": 1}
    for values in (highs, lows):
        options = "&".join(f"{name}={value}" for name, value in values.items())
        with Ledger.open(f"{pg}&{options}") as led:
            before = led.position
            led.admin().grant("a", scope="s", roles=["read"])
            assert led.position > before


def test_lock_timeout_overflow_on_the_cli_is_one_line(pg: str) -> None:
    url = f"{pg}&lock_timeout=99999999999999999999"
    # From the environment: a password on the command line would be warned about first.
    result = CliRunner().invoke(main, ["get", "X", "--token", "t"], env={"PROVLEDGER_URL": url})
    assert result.exit_code == 1, result.output
    one_line(result.stderr)
    assert "lock_timeout must be a whole number from 1 to 3600" in result.stderr


def test_sqlite_file_uri_does_not_open_a_database_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["init", "--url", "sqlite:///file:x%3Fmode%3Dmemory"])
    assert result.exit_code != 0
    assert "file:" in result.output + result.stderr
    assert list(tmp_path.iterdir()) == []


# -- SQLite: the file removed or replaced under a running process ---------------------


def _remove_ledger_files(path: Path) -> None:
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        name.unlink(missing_ok=True)


@pytest.mark.parametrize("how", ["removed", "replaced", "made unreachable"])
def test_a_ledger_file_removed_or_replaced_under_a_process_takes_no_more_writes(
    tmp_path: Path, how: str
) -> None:
    # Given a process writing to a ledger file, another writing to a second one
    (tmp_path / "dir").mkdir()
    path, other = tmp_path / "dir" / "ledger.db", tmp_path / "other.db"
    led = Ledger.open(f"sqlite:///{path}")
    admin = led.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    agent = led.authenticate(admin.issue_token("agent-1"))
    agent.propose("proj-a", "k", 1, Kind.FACT, id="P1")
    assert agent.get("P1").status is Status.CANDIDATE  # this thread's reader is open
    with Ledger.open(f"sqlite:///{other}") as elsewhere:
        elsewhere.admin().grant("someone", scope="proj-z", roles=["read"])
        positions = {"other": elsewhere.position}

    # When the file is deleted (as with its WAL), or another ledger moved over it
    if how == "made unreachable":  # its folder moved away, a file in its place
        os.rename(tmp_path / "dir", tmp_path / "moved")
        (tmp_path / "dir").write_bytes(b"")
    else:
        _remove_ledger_files(path)
    if how == "replaced":
        os.rename(other, path)
    try:
        # Then the next write is refused, saying so, instead of landing in the
        # unlinked file (lost at exit) or in the file now there
        with pytest.raises(StorageError, match=f"was {how}.*nothing was written"):
            agent.propose("proj-a", "k2", 2, Kind.FACT, id="P2")
        # nor does a read on the thread's open reader answer from the file it had open
        time.sleep(FILE_CHECK_EVERY)
        for read in (lambda: agent.get("P1"), lambda: agent.read("proj-a", "k")):
            with pytest.raises(StorageError, match=f"was {how}.*nor reads it again"):
                read()
        # and a read on a new thread's connection creates no empty file at the path
        failed: list[BaseException] = []
        reader = threading.Thread(target=lambda: _read_into(agent, failed))
        reader.start()
        reader.join()
    finally:
        led.close()
    assert len(failed) == 1 and f"was {how}" in str(failed[0])
    if how == "removed":
        assert not path.exists()
    elif how == "replaced":
        with Ledger.open(f"sqlite:///{path}", create=False) as there:
            assert there.position == positions["other"]


def test_a_ledger_opened_read_only_reads_no_file_moved_into_its_place(tmp_path: Path) -> None:
    # Given a ledger where K1 is accepted, a copy of it from before, and the
    # ledger opened read-only (an auditor's process), having read K1
    path = tmp_path / "ledger.db"
    with Ledger.open(f"sqlite:///{path}") as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("boss", scope="proj-a", roles=["approve", "read"])
        token = admin.issue_token("agent-1")
        agent = led.authenticate(token)
        agent.propose("proj-a", "k", 1, Kind.FACT, id="K1")
        shutil.copy(path, tmp_path / "before.db")
        led.authenticate(admin.issue_token("boss")).accept("K1")
    read_only = Ledger.open(f"sqlite:///{path}?mode=ro")
    try:
        reader = read_only.authenticate(token)
        assert reader.read("proj-a", "k").outcome == "FOUND"
        # When the copy from before is moved into the ledger's place
        os.replace(tmp_path / "before.db", path)
        time.sleep(FILE_CHECK_EVERY)
        # Then its next read is refused, not answered from the file it had open
        with pytest.raises(StorageError, match=r"was replaced by another file.*nor reads it"):
            reader.read("proj-a", "k")
    finally:
        read_only.close()


def _read_into(session: Session, failed: list[BaseException]) -> None:
    try:
        session.get("P1")
    except LedgerError as exc:
        failed.append(exc)


# -- SQLite: the write lock held by another process -----------------------------------


@contextmanager
def _write_locked_elsewhere(path: Path) -> Iterator[None]:
    """The SQLite file's write lock held by another connection until the block ends."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # holds the write lock until it ends
        yield
        other.execute("ROLLBACK")
    finally:
        other.close()


def test_sqlite_lock_held_elsewhere_is_refused_once_the_urls_timeout_has_passed(
    tmp_path: Path,
) -> None:
    """``?timeout=1`` bounds the whole command: the tries after a busy database stop
    once the wait has passed, instead of each waiting it again."""
    from ledger.errors import ConcurrencyError

    path = tmp_path / "ledger.db"
    use = in_use(f"sqlite:///{path}?timeout=1")
    try:
        before = use.state()
        with _write_locked_elsewhere(path):
            started = time.monotonic()
            with pytest.raises(ConcurrencyError, match=r"lock wait is 1 s\); gave up after 1 try"):
                use.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT)
            # A correctness bound: one wait of the timeout, not one per try (20 tries).
            assert time.monotonic() - started < 10
        assert use.state() == before
        use.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT)
        assert use.led.position == before[0] + 1
    finally:
        use.led.close()


def _queued_writers_refused(use: Any, writers: int = 8) -> list[float]:
    """How long each of ``writers`` threads proposing at once through ``use`` waited
    before its refusal (each must be refused: a lock is held elsewhere)."""
    import threading

    from ledger.errors import ConcurrencyError

    waited: list[float] = []
    refused: list[BaseException] = []

    def propose(n: int) -> None:
        started = time.monotonic()
        try:
            use.agent.propose(scope="proj-a", claim_key=f"k{n}", value=n, kind=Kind.FACT)
        except ConcurrencyError as exc:
            refused.append(exc)
        waited.append(time.monotonic() - started)

    threads = [threading.Thread(target=propose, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(refused) == writers, refused
    return waited


@contextmanager
def _events_locked_elsewhere(pg: str) -> Iterator[None]:
    """The ledger's events table locked by another PostgreSQL session until the
    block ends."""
    import psycopg

    schema = pg.split("schema=")[1]
    with psycopg.connect(_pg_dsn()) as other:  # holds the lock until it leaves
        other.execute(f"LOCK TABLE {schema}.provledger_events IN ACCESS EXCLUSIVE MODE")
        yield


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_writers_queued_in_one_process_each_give_up_within_the_lock_wait(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Waiting behind the process's other writers counts against the lock wait
    (``?timeout=``, ``lock_timeout``): the eighth writer queued behind a lock held
    elsewhere is refused about when the first is, not after eight lock waits one
    after the other."""
    if backend == "sqlite":
        path = tmp_path / "ledger.db"
        url, held = f"sqlite:///{path}?timeout=1", _write_locked_elsewhere(path)
    else:
        pg = request.getfixturevalue("pg")
        url, held = f"{pg}&lock_timeout=1", _events_locked_elsewhere(pg)
    use = in_use(url)
    try:
        before = use.state()
        with held:
            waited = _queued_writers_refused(use)
        # A correctness bound: at most about two waits of the timeout (behind this
        # process's writers, then for the database's lock), not eight in a row.
        assert max(waited) < 4.5, sorted(waited)
        assert use.state() == before
    finally:
        use.led.close()


# -- PostgreSQL: a lock held by another session --------------------------------------


def test_pg_foreign_table_lock_is_a_concurrency_error_within_the_lock_timeout(pg: str) -> None:
    from ledger.errors import ConcurrencyError

    use = in_use(f"{pg}&lock_timeout=1")
    try:
        before = use.state()
        with _events_locked_elsewhere(pg):
            attempts: list[Callable[[], object]] = [
                lambda: use.agent.propose(
                    scope="proj-a", claim_key="k", value=1, kind=Kind.INFERENCE, parents=["E1"]
                ),
                lambda: use.reviewer.audit("M1"),
                lambda: use.led.position,
            ]
            for attempt in attempts:
                started = time.monotonic()
                with pytest.raises(ConcurrencyError) as caught:
                    attempt()
                # A correctness bound: the refusal comes after lock_timeout, not a hang.
                assert time.monotonic() - started < 20
                one_line(str(caught.value))
                assert "lock timeout" in str(caught.value)
                # the server's reason, not the statement it was running
                assert "LINE 1" not in str(caught.value) and "SELECT" not in str(caught.value)
        assert use.state() == before  # the lock is gone: everything as it was
        use.agent.propose(
            scope="proj-a", claim_key="k", value=1, kind=Kind.INFERENCE, parents=["E1"]
        )
        assert use.led.position == before[0] + 1
    finally:
        use.led.close()


# -- PostgreSQL: the server's disk is full --------------------------------------------


@pytest.fixture
def pg_small_disk(pg: str) -> Iterator[tuple[str, SmallDisk]]:
    """The ledger's tables moved to a tablespace on an 8 MiB tmpfs (needs root and the
    PostgreSQL server on this machine, as the ``postgres`` user)."""
    import psycopg

    if urlparse(PG_SERVER).hostname not in ("127.0.0.1", "localhost"):
        pytest.skip("needs the PostgreSQL server on this machine")
    name = f"provledger_disk_{uuid.uuid4().hex[:8]}"
    mount = Path("/tmp") / name  # the server's user must reach it
    mount.mkdir()
    schema = pg.split("schema=")[1]
    try:
        with (
            small_disk(mount, "8m", owner="postgres") as disk,
            psycopg.connect(_pg_dsn(), autocommit=True) as admin,
        ):
            admin.execute(f"CREATE TABLESPACE {name} LOCATION '{mount}'")
            try:
                Ledger.open(pg).close()  # the tables, then moved to the small disk
                for (table,) in admin.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
                ).fetchall():
                    admin.execute(f"ALTER TABLE {schema}.{table} SET TABLESPACE {name}")
                yield pg, disk
            finally:
                admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                admin.execute(f"DROP TABLESPACE IF EXISTS {name}")
    finally:
        mount.rmdir()


def test_pg_full_disk_refuses_propose_and_propose_many_then_the_ledger_is_whole(
    pg_small_disk: tuple[str, SmallDisk],
) -> None:
    url, disk = pg_small_disk
    use = in_use(url)
    try:
        before = use.state()
        disk.fill()
        refused_as_full(use.agent, "No space left on device")
        assert use.state() == before
        disk.free()
        assert use.led.verify().ok
        assert use.state() == before
        assert use.agent.propose_many(big_items(3, 1000))
    finally:
        use.led.close()


def test_a_commit_whose_pipeline_could_not_be_left_may_have_been_applied() -> None:
    """psycopg refusing to leave pipeline mode once a command's last writes and its
    COMMIT were sent (the server ended the session meanwhile) leaves the outcome
    unknown: the error says so, as for a connection lost while committing; before
    the COMMIT was sent the same refusal is a plain storage error."""
    import psycopg

    stuck = psycopg.OperationalError("cannot exit pipeline mode while busy")
    url = "postgresql://postgres@127.0.0.1:5432/test"
    committed = storage_error(stuck, url, committing=True)
    assert isinstance(committed, ConnectionLostError)
    assert "may have been applied" in str(committed)
    # (the driver's words, about its pipeline, say nothing a user can act on)
    assert "cannot exit pipeline mode" not in str(committed)
    assert "was lost while committing; the command may have been applied" in str(committed)
    earlier = storage_error(stuck, url)
    assert type(earlier) is StorageError
    assert "not applied" not in str(earlier) and "may have been" not in str(earlier)


def test_a_failure_a_ctrl_c_caused_is_the_ctrl_c_not_a_storage_error() -> None:
    """Ctrl-C landing while psycopg was busy leaves it unable to end its pipeline, or
    its connection broken: that failure raises the interrupt again, not a
    ``LedgerError`` (a loop retrying a ``LedgerError`` would not stop), at any
    depth of the failure's context; a failure with none behind it stays typed."""
    import psycopg

    url = "postgresql://postgres@127.0.0.1:5432/test"
    interrupt = KeyboardInterrupt()
    for committing in (False, True):
        try:
            try:
                raise interrupt
            except KeyboardInterrupt:
                try:
                    raise psycopg.OperationalError("cannot exit pipeline mode while busy")
                except psycopg.OperationalError as inner:
                    raise RuntimeError("eventsourcing's wrapper") from inner
        except RuntimeError as failure:
            with pytest.raises(KeyboardInterrupt) as raised:
                storage_error(failure, url, committing=committing)
            assert raised.value is interrupt
    alone = psycopg.OperationalError("server closed the connection unexpectedly")
    assert isinstance(storage_error(alone, url), ConnectionLostError)
