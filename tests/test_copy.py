"""``copy``: a ledger moved whole into an empty database of either backend.

A varied ledger copied SQLite → PostgreSQL, back, and within each backend must
answer every question as its source does, hold the same rows byte for byte,
verify, take its tokens and new writes; the source is never written. A copy
taken while writers go on is the log at one position. Refusals name what was
wrong and leave the target without a row.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner, Result

from ledger import Kind, Ledger
from ledger.cli import main
from ledger.errors import (
    AuthenticationError,
    CorruptEventError,
    InvalidURLError,
    SnapshotErasedError,
    StorageError,
)
from ledger.heads import generate_key
from ledger.persistence import copying
from ledger.persistence.copying import by_size, copy_ledger, read_only_source
from tests.conftest import PG_SERVER, Clock, new_pg_schema_url

FIXTURES = Path(__file__).parent / "fixtures"
#: The instants the 0.1.0 fixture's answers were read at (``tests/test_compat.py``).
AT = {"early": datetime(2026, 3, 1, tzinfo=UTC), "late": datetime(2026, 9, 1, tzinfo=UTC)}
PAIRS = [
    ("sqlite", "postgres"),
    ("postgres", "sqlite"),
    ("sqlite", "sqlite"),
    ("postgres", "postgres"),
]
IDS = ("E1", "E2", "E3", "M1", "R1", "O1", "G1", "B00", "B01", "B11")
CLAIMS = (
    ("p", "source:https://x.test/v2"),
    ("p", "api.retry_safe"),
    ("p", "report.weekly"),
    ("p", "api.version"),
    ("q", "bulk.00"),
    ("q", "bulk.01"),
)


@pytest.fixture
def new_url(tmp_path: Path) -> Iterator[Callable[[str, str], str]]:
    """``make(kind, name)``: a URL for a new SQLite file in the test's directory, or
    a fresh PostgreSQL schema (dropped after the test)."""
    drops: list[Callable[[], None]] = []

    def make(kind: str, name: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{tmp_path / f'{name}.db'}"
        url, drop = new_pg_schema_url()
        drops.append(drop)
        return url

    yield make
    for drop in drops:
        drop()


@dataclass
class Built:
    """A varied ledger's tokens and positions."""

    admin: str
    tokens: dict[str, str]
    revoked: str
    middle: int
    erased: str


def build(url: str, clock: Clock) -> Built:
    """Captures (one erased), a chain revoked and revalidated, a delivery and its
    correction, a rejection, a run with an observed read, a batch, grants and
    tokens (one revoked, a grant withdrawn)."""
    with Ledger.open(url, clock=clock) as led:
        admin = led.admin()
        admin_token = admin.bootstrap_admin_token()
        assert admin_token is not None
        admin.grant("agent", scope="p", roles=["propose", "read"])
        admin.grant("agent", scope="q", roles=["propose", "read"])
        admin.grant("reviewer", scope="p", roles=["approve", "read", "audit", "deliver"])
        admin.grant("reviewer", scope="q", roles=["approve", "read", "audit"])
        admin.grant("outsider", scope="q", roles=["read"])
        tokens = {s: admin.issue_token(s) for s in ("agent", "reviewer", "outsider")}
        revoked = admin.issue_token("agent")
        agent, reviewer = led.authenticate(tokens["agent"]), led.authenticate(tokens["reviewer"])
        e1 = agent.capture(scope="p", uri="https://x.test/doc", content=b"retries ok", id="E1")
        e2 = agent.capture(
            scope="p",
            uri="https://x.test/v2",
            content=b"\x00\xff retries ok, v2",
            id="E2",
            expires=clock.now + timedelta(days=90),
        )
        e3 = agent.capture(scope="p", uri="https://x.test/who", content=b"a person", id="E3")
        for rid in (e1, e2, e3):
            reviewer.accept(rid)
        agent.propose(
            scope="p",
            claim_key="api.retry_safe",
            value=True,
            kind=Kind.INFERENCE,
            parents=[e1],
            conditions={"api": "v2"},
            id="M1",
        )
        reviewer.accept("M1")
        agent.propose(
            scope="p",
            claim_key="report.weekly",
            value={"text": "retries on", "n": [1, 2.5, None, b"\x00\xff"]},
            kind=Kind.REPORT,
            parents=["M1"],
            id="R1",
        )
        reviewer.accept("R1")
        delivery = reviewer.deliver("R1", recipient="ops@x.test")
        with agent.run("task-1") as run:
            run.read(scope="p", claim_key="source:https://x.test/v2")
            run.propose(scope="p", claim_key="api.version", value="v2", kind=Kind.FACT, id="O1")
        reviewer.accept("O1")
        middle = led.position
        clock.advance(hours=1)
        reviewer.revoke("E1", reason="doc changed")
        reviewer.revalidate("M1", note="re-checked on E2", parents=[e2])
        reviewer.issue_correction(delivery, note="E1 was withdrawn")
        agent.propose(scope="p", claim_key="guess", value="x", kind=Kind.INFERENCE, id="G1")
        reviewer.reject("G1", reason="no basis")
        items = [
            {
                "scope": "q",
                "claim_key": f"bulk.{i:02d}",
                "value": i,
                "kind": "fact",
                "id": f"B{i:02d}",
            }
            for i in range(12)
        ]
        agent.propose_many(items)
        reviewer.accept("B00")
        admin.revoke_token(revoked)
        admin.revoke_grant("outsider", scope="q")
        erased = reviewer.get("E3").value
        admin.erase_snapshot(erased, reason="personal data")
    return Built(admin_token, tokens, revoked, middle, erased)


def answers(url: str, built: Built, clock: Clock) -> dict[str, Any]:
    """What the ledger at ``url`` answers: records, reads, audit, history, as-of
    answers, corrections due, snapshots, grants and tokens."""
    with Ledger.open(url, clock=clock) as led:
        reviewer = led.authenticate(built.tokens["reviewer"])
        at = clock.now
        past = reviewer.as_of(position=built.middle)
        with pytest.raises(SnapshotErasedError):
            reviewer.snapshot(built.erased)
        return {
            "position": led.position,
            "digest": str(led.digest()),
            "records": {rid: reviewer.get(rid) for rid in IDS},
            "reads": {f"{s}/{k}": reviewer.read(scope=s, claim_key=k, at=at) for s, k in CLAIMS},
            "explained": reviewer.explain(scope="p", claim_key="api.retry_safe", at=at),
            "audit": {rid: reviewer.audit(rid) for rid in IDS},
            "history": reviewer.history(),
            "as_of": {rid: past.get(rid) for rid in ("E1", "M1", "R1", "O1")},
            "as_of_read": past.read(scope="p", claim_key="api.retry_safe", at=at),
            "due": reviewer.corrections_due(),
            "snapshot": reviewer.snapshot(reviewer.get("E2").value),
            "grants": reviewer.grants(),
            "access": led.admin().access_history(),
            "tokens": led.admin().tokens(),
        }


def primary_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """The stored events and the tables beside them, as plain rows in key order."""
    with Ledger.open(url, create=False, catch_up=False) as led:
        rec = led.engine.recorder
        queries = {
            "events": f"SELECT {rec.position_column} AS p, originator_id, originator_version, "
            f"topic, state FROM {rec.events_table} ORDER BY 1",
            "leaves": "SELECT position, leaf FROM {t}pl_merkle_leaves ORDER BY position",
            "commits": "SELECT last_pos, first_pos FROM {t}pl_commits ORDER BY last_pos",
            "snapshots": "SELECT ref, content, size FROM {t}pl_snapshots",
        }
        out = {}
        with led.engine.reading() as c:
            for name, sql in queries.items():
                c.execute(led.engine.dialect.q(sql))
                out[name] = sorted(_plain(row) for row in c.fetchall())
        return out


def _plain(row: Any) -> tuple[Any, ...]:
    """A row's values as both backends can compare them (aggregate ids as hex)."""
    values = tuple(row.values()) if isinstance(row, dict) else tuple(row)
    return tuple(
        v.hex if isinstance(v, UUID) else bytes(v) if isinstance(v, memoryview) else v
        for v in values
    )


def files_of(url: str) -> dict[str, bytes]:
    """An SQLite ledger's file and its -wal, as bytes ({} for PostgreSQL); a -wal
    holding nothing (a reader may leave one) is left out."""
    if not url.startswith("sqlite:"):
        return {}
    path = Path(url.removeprefix("sqlite:///"))
    found = (path, Path(f"{path}-wal"))
    return {p.name: p.read_bytes() for p in found if p.exists() and p.stat().st_size}


# -- copies ---------------------------------------------------------------------------


@pytest.mark.parametrize(("source_kind", "target_kind"), PAIRS)
def test_a_copy_answers_holds_and_verifies_as_its_source_does(
    new_url: Callable[[str, str], str],
    clock: Clock,
    tmp_path: Path,
    source_kind: str,
    target_kind: str,
) -> None:
    # 1. A varied ledger, what it answers, and a head signed over it (kept elsewhere).
    source, target = new_url(source_kind, "source"), new_url(target_kind, "target")
    built = build(source, clock)
    expected = answers(source, built, clock)
    key = tmp_path / "heads.key"
    generate_key(key)
    with Ledger.open(source) as led:
        head = led.signed_head(key)
    rows = primary_rows(source)
    files = files_of(source)

    # 2. Copied: the report names the position and the source's digest.
    report = copy_ledger(source, target)
    assert (report.position, report.events) == (expected["position"], expected["position"])
    assert str(report.digest) == expected["digest"]
    assert report.snapshots == 2  # E1 and E2; E3's bytes were erased

    # 3. The copy holds the same rows, byte for byte, answers the same and verifies.
    assert primary_rows(target) == rows
    assert answers(target, built, clock) == expected
    with Ledger.open(target, clock=clock) as copy:
        assert copy.verify(against=report.digest, heads=[head], public_key=f"{key}.pub").ok
        # 4. Its tokens authenticate (the revoked one stays revoked), the admin
        # token works, and it takes new writes after the copied position.
        agent = copy.authenticate(built.tokens["agent"])
        with pytest.raises(AuthenticationError):
            copy.authenticate(built.revoked)
        copy.admin(built.admin).grant("newcomer", scope="p", roles=["read"])
        agent.propose(scope="p", claim_key="after", value=1, kind=Kind.FACT, id="N1")
        copy.authenticate(built.tokens["reviewer"]).accept("N1")
        assert copy.position > report.position
        assert copy.verify(against=report.digest).ok

    # 5. The source is as it was.
    assert files_of(source) == files
    assert primary_rows(source) == rows


@pytest.mark.parametrize(("source_kind", "target_kind"), PAIRS[:2])
def test_a_copy_taken_while_writers_go_on_is_the_log_at_one_position(
    new_url: Callable[[str, str], str], clock: Clock, source_kind: str, target_kind: str
) -> None:
    # 1. A source with enough events for several batches, and a writer beside the copy.
    source, target = new_url(source_kind, "source"), new_url(target_kind, "target")
    built = build(source, clock)
    with Ledger.open(source, clock=clock) as writer:
        agent = writer.authenticate(built.tokens["agent"])
        agent.propose_many(
            [
                {"scope": "q", "claim_key": f"more.{i}", "value": i, "kind": "fact"}
                for i in range(2500)
            ]
        )
        started = writer.position
        steps: list[tuple[str, int, int]] = []

        def step(what: str, reached: int, total: int) -> None:
            if not steps:  # after the first batch: another connection commits
                agent.propose(scope="q", claim_key="late", value=1, kind=Kind.FACT, id="L1")
            steps.append((what, reached, total))

        # 2. The copy is the log as it was when the copy began.
        report = copy_ledger(source, target, progress=step)
        assert writer.position > started == report.position
        assert writer.verify(against=report.digest).ok  # the source extends the copy
    assert {what for what, _, _ in steps} == {"events", "views"}
    assert steps[-1][1:] == (started, started)
    with Ledger.open(target) as copy:
        assert str(copy.digest()) == str(report.digest)
        assert copy.position == started
        assert copy.verify().ok


def test_an_open_ledger_in_memory_can_be_copied_to_a_file(
    new_url: Callable[[str, str], str], clock: Clock
) -> None:
    target = new_url("sqlite", "kept")
    with Ledger.open("memory:", clock=clock) as led:
        admin = led.admin()
        admin.grant("agent", scope="p", roles=["propose", "read"])
        token = admin.issue_token("agent")
        led.authenticate(token).propose(scope="p", claim_key="k", value=1, kind=Kind.FACT, id="K1")
        report = copy_ledger(led, target)
        assert report.digest == led.digest()
    with Ledger.open(target) as copy:
        assert copy.authenticate(token).get("K1").value == 1
        assert copy.verify().ok


def test_a_target_holding_an_empty_ledger_is_taken(
    new_url: Callable[[str, str], str], clock: Clock
) -> None:
    source, target = new_url("sqlite", "source"), new_url("postgres", "target")
    build(source, clock)
    Ledger.open(target).close()  # its tables, no events
    report = copy_ledger(source, target)
    with Ledger.open(target) as copy:
        assert copy.digest() == report.digest


def test_a_0_1_0_ledger_is_copied_as_it_is_and_answers_as_0_1_0_did(
    new_url: Callable[[str, str], str], tmp_path: Path
) -> None:
    # 1. A copy of the 0.1.0 fixture, its views in 0.1.0's layout.
    path = tmp_path / "ledger-0.1.0.db"
    shutil.copyfile(FIXTURES / "ledger-0.1.0.db", path)
    old = json.loads((FIXTURES / "ledger-0.1.0.json").read_text())
    before = path.read_bytes()

    # 2. Copied to PostgreSQL: its digest, and views built in this version's layout.
    target = new_url("postgres", "target")
    report = copy_ledger(f"sqlite:///{path}", target)
    assert str(report.digest) == old["digest"]
    with Ledger.open(target) as copy:
        reviewer = copy.authenticate(old["tokens"]["reviewer"])
        for rid, status in old["status"].items():
            assert str(reviewer.get(rid).status) == status
        for asked, answer in old["reads"].items():
            where, when = asked.rsplit("@", 1)
            scope, claim = where.split("/", 1)
            read = reviewer.read(scope=scope, claim_key=claim, at=AT[when])
            assert (str(read.outcome), sorted(r.id for r in read.records)) == (
                answer["outcome"],
                answer["ids"],
            )
        assert copy.verify(against=report.digest).ok

    # 3. The source file was not touched: its views were not rebuilt.
    assert path.read_bytes() == before
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT COUNT(*) FROM pl_record_ids").fetchone()[0] > 0


# -- refusals -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_target_holding_a_ledger_is_refused_naming_its_table(
    new_url: Callable[[str, str], str], clock: Clock, kind: str
) -> None:
    source, target = new_url("sqlite", "source"), new_url(kind, "target")
    build(source, clock)
    with Ledger.open(target) as other:
        other.admin().bootstrap_admin_token()
        kept = (other.position, str(other.digest()))
    with pytest.raises(
        StorageError,
        match=rf"not empty: its table \w*_events holds rows \(a ledger at log position {kept[0]}\)",
    ):
        copy_ledger(source, target)
    with Ledger.open(target) as other:
        assert (other.position, str(other.digest())) == kept


def test_a_target_holding_another_programs_tables_is_refused(
    new_url: Callable[[str, str], str], clock: Clock, tmp_path: Path
) -> None:
    import psycopg

    source = new_url("sqlite", "source")
    build(source, clock)
    # An SQLite file of another program: refused, and left as it was.
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE invoices (id INTEGER)")
    before = other.read_bytes()
    with pytest.raises(StorageError, match="holds invoices, not a ledger's tables"):
        copy_ledger(source, f"sqlite:///{other}")
    assert other.read_bytes() == before
    # A PostgreSQL schema of another program: the same.
    target = new_url("postgres", "target")
    schema = target.rsplit("schema=", 1)[1]
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.invoices (id INTEGER)")
    with pytest.raises(StorageError, match="holds invoices, not a ledger's tables"):
        copy_ledger(source, target)
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
    assert tables == [("invoices",)]
    # and so is another program's table named as the ledger's events table
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {schema}.invoices")
        conn.execute(f"CREATE TABLE {schema}.provledger_events (id INTEGER)")
    with pytest.raises(StorageError, match="holds provledger_events, not a ledger's tables"):
        copy_ledger(source, target)


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ("mysql://db/x", "is not memory:, sqlite:///path or postgresql://"),
        ("memory:", "would be gone once copied"),
        ("sqlite:///{tmp}/ro.db?mode=ro", "is opened read-only"),
        ("", "is empty"),
    ],
)
def test_a_target_url_that_names_no_new_database_is_refused(
    new_url: Callable[[str, str], str], clock: Clock, tmp_path: Path, target: str, match: str
) -> None:
    source = new_url("sqlite", "source")
    build(source, clock)
    with pytest.raises(InvalidURLError, match=match):
        copy_ledger(source, target.format(tmp=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db") == ["source.db"]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_source_itself_is_refused_as_the_target(
    new_url: Callable[[str, str], str], clock: Clock, tmp_path: Path, kind: str
) -> None:
    source = new_url(kind, "source")
    build(source, clock)
    same = source
    if kind == "sqlite":  # another spelling of the same file: a link to it
        (tmp_path / "link.db").symlink_to(tmp_path / "source.db")
        same = f"sqlite:///{tmp_path / 'link.db'}"
    with pytest.raises(InvalidURLError, match="is the source ledger itself"):
        copy_ledger(source, same)
    if kind == "sqlite":  # and so is a file SQLite keeps beside it, which it would remove
        for end in ("-wal", "-shm", "-journal"):
            with pytest.raises(InvalidURLError, match="is a file SQLite keeps beside"):
                copy_ledger(source, f"{source}{end}")
        Ledger.open(source).close()
        assert sorted(p.name for p in tmp_path.iterdir() if "source" in p.name) == ["source.db"]


def build_altered(source: str, clock: Clock, path: Path) -> None:
    """:func:`build` at ``source``, the SQLite file ``path``, then its event at
    position 3 changed behind the ledger's back (its trigger dropped)."""
    build(source, clock)
    with sqlite3.connect(path) as con:
        con.execute("DROP TRIGGER stored_events_no_update")
        con.execute("UPDATE stored_events SET state = substr(state, 2) WHERE rowid = 3")


def test_a_source_event_altered_behind_the_ledgers_back_fails_the_copy_leaving_nothing(
    new_url: Callable[[str, str], str], clock: Clock, tmp_path: Path
) -> None:
    # 1. A source whose event at position 3 was changed with the trigger dropped.
    source = new_url("sqlite", "source")
    build_altered(source, clock, tmp_path / "source.db")
    # 2. Into a new file: refused naming the position; no file is made, the
    # partial it was built in is gone.
    with pytest.raises(
        CorruptEventError, match=r"position 3 was altered.*no file was made at the target"
    ):
        copy_ledger(source, new_url("sqlite", "target"))
    assert sorted(p.name for p in tmp_path.iterdir() if "target" in p.name) == []
    # 3. Into PostgreSQL: no row written; the schema takes a good copy after.
    target = new_url("postgres", "target")
    with pytest.raises(CorruptEventError, match="holds an empty ledger's tables"):
        copy_ledger(source, target)
    with Ledger.open(target) as copy:
        assert copy.position == 0
    good = new_url("sqlite", "good")
    build(good, Clock())
    assert copy_ledger(good, target).position > 0


def test_a_source_table_this_version_does_not_know_is_refused(
    new_url: Callable[[str, str], str], clock: Clock, tmp_path: Path
) -> None:
    source = new_url("sqlite", "source")
    build(source, clock)
    with sqlite3.connect(tmp_path / "source.db") as con:
        con.execute("CREATE TABLE pl_future (x BLOB)")
    with pytest.raises(StorageError, match="holds the table pl_future, which this version"):
        copy_ledger(source, new_url("sqlite", "target"))
    assert not (tmp_path / "target.db").exists()


def test_a_copys_source_sqlite_url_is_opened_read_only() -> None:
    assert read_only_source("sqlite:///a.db") == "sqlite:///a.db?mode=ro"
    assert (
        read_only_source("sqlite:///a.db?mode=rw&timeout=5") == "sqlite:///a.db?timeout=5&mode=ro"
    )
    assert read_only_source("postgresql://u@h/db?schema=s") == "postgresql://u@h/db?schema=s"


# -- sessions, races, sizes -----------------------------------------------------------


def end_sessions(url: str) -> int:
    """End every session of the PostgreSQL ledger at ``url`` (as a server restart or
    its idle-in-transaction timeout would); how many there were."""
    import psycopg

    name = f"provledger:{url.rsplit('schema=', 1)[1]}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (name,),
        ).fetchall()
    return len(rows)


@pytest.mark.parametrize("target_kind", ["sqlite", "postgres"])
def test_a_copy_from_postgresql_needs_no_source_session_while_its_views_build(
    new_url: Callable[[str, str], str], clock: Clock, target_kind: str
) -> None:
    # 1. The source's sessions are ended while the target's views are built.
    source, target = new_url("postgres", "source"), new_url(target_kind, "target")
    build(source, clock)
    ended: list[int] = []

    def step(what: str, reached: int, total: int) -> None:
        if what == "views" and not ended:
            ended.append(end_sessions(source))

    # 2. The copy is complete and reported so: nothing is read from the source then.
    report = copy_ledger(source, target, progress=step)
    assert ended and ended[0] >= 1
    with Ledger.open(target) as copy:
        assert copy.digest() == report.digest
        assert copy.verify().ok


def test_a_copy_whose_views_take_longer_than_the_idle_transaction_timeout_is_complete(
    new_url: Callable[[str, str], str], clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1. Sessions ended by the server once idle in a transaction for 1 s (5 s by
    # default), and a views build that takes longer.
    monkeypatch.setenv("POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT", "1")
    source, target = new_url("postgres", "source"), new_url("sqlite", "target")
    build(source, clock)
    slow: list[str] = []

    def step(what: str, reached: int, total: int) -> None:
        if what == "views" and not slow:
            slow.append(what)
            time.sleep(2)

    # 2. The copy is complete: the source's read ended before the views were built.
    report = copy_ledger(source, target, progress=step)
    with Ledger.open(target) as copy:
        assert copy.digest() == report.digest


def test_snapshots_are_read_in_batches_bounded_by_their_bytes() -> None:
    sizes = [("a", 10), ("b", 20), ("c", 5), ("d", 100), ("e", 1), ("f", 30), ("g", 0)]
    assert list(by_size(sizes, 35)) == [["a", "b", "c"], ["d"], ["e", "f", "g"]]
    assert list(by_size([("a", 36)], 35)) == [["a"]]  # one over the limit: alone
    assert list(by_size([], 35)) == []
    assert copying.SNAPSHOT_BYTES == 32 * 1024 * 1024


@pytest.mark.parametrize("source_kind", ["sqlite", "postgres"])
def test_snapshots_copied_one_batch_each_and_a_page_at_a_time_are_all_there(
    new_url: Callable[[str, str], str],
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    source_kind: str,
) -> None:
    source, target = new_url(source_kind, "source"), new_url("sqlite", "target")
    built = build(source, clock)
    monkeypatch.setattr(copying, "SNAPSHOT_BYTES", 1)  # a snapshot a batch
    monkeypatch.setattr(copying, "ROW_BATCH", 1)  # a snapshot's size a page
    report = copy_ledger(source, target)
    assert report.snapshots == 2
    assert primary_rows(target) == primary_rows(source)
    assert answers(target, built, clock)["snapshot"] == answers(source, built, clock)["snapshot"]


def other_spelling(url: str) -> str:
    """The PostgreSQL ``url`` with its host named otherwise: 127.0.0.1 as localhost."""
    from urllib.parse import urlparse

    host = urlparse(url).hostname
    spelling = {"127.0.0.1": "localhost", "localhost": "127.0.0.1"}.get(host or "")
    if spelling is None:
        pytest.skip(f"no other name known for the test server's host {host}")
    return url.replace(f"@{host}", f"@{spelling}", 1)


def test_the_source_schema_by_another_name_of_its_server_is_refused_as_itself(
    new_url: Callable[[str, str], str], clock: Clock
) -> None:
    # 1. An empty ledger (it would copy "successfully" into itself), and one with rows.
    empty = new_url("postgres", "empty")
    Ledger.open(empty).close()
    with pytest.raises(InvalidURLError, match="is the source ledger itself"):
        copy_ledger(empty, other_spelling(empty))
    source = new_url("postgres", "source")
    build(source, clock)
    with pytest.raises(InvalidURLError, match="is the source ledger itself"):
        copy_ledger(source, other_spelling(source))
    # 2. Another schema on the same server, by the other name, is a copy's target.
    target = other_spelling(new_url("postgres", "target"))
    assert copy_ledger(source, target).position > 0


# -- the command ----------------------------------------------------------------------


def cli(*args: str) -> Result:
    return CliRunner().invoke(
        main, list(args), env={"PROVLEDGER_URL": None, "PROVLEDGER_ADMIN_TOKEN": None}
    )


def test_the_copy_command_prints_the_digest_and_json_and_names_refusals(
    new_url: Callable[[str, str], str], clock: Clock
) -> None:
    # 1. SQLite → PostgreSQL: the digest on stdout, what was copied on stderr.
    source, target = new_url("sqlite", "source"), new_url("postgres", "target")
    built = build(source, clock)
    made = cli("copy", "--url", source, "--to", target)
    assert made.exit_code == 0, made.output
    with Ledger.open(source) as led:
        digest, position = str(led.digest()), led.position
    assert made.stdout == f"{digest}\n"
    assert f"{position} events up to log position {position}, 2 evidence snapshots" in made.stderr
    # 2. Back to a new file, from PostgreSQL: its admin token is asked for.
    back = new_url("sqlite", "back")
    refused = cli("copy", "--url", target, "--to", back)
    assert refused.exit_code == 1
    assert "copy refused: it is an admin command" in refused.stderr
    made = cli("copy", "--url", target, "--to", back, "--admin-token", built.admin, "--json")
    assert made.exit_code == 0, made.output
    info = json.loads(made.stdout)
    assert (info["digest"], info["events"], info["snapshots"]) == (digest, position, 2)
    assert info["target"] == back
    # 3. A target that is not empty: exit 1, naming its table.
    again = cli("copy", "--url", source, "--to", back)
    assert again.exit_code == 1
    assert "its table stored_events holds rows" in again.stderr


def test_the_copy_command_names_its_source_as_given_and_warns_of_a_password_in_to(
    new_url: Callable[[str, str], str], clock: Clock, tmp_path: Path
) -> None:
    # 1. A refusal names the source as given, not as opened (read-only, mode=ro).
    source = new_url("sqlite", "source")
    build_altered(source, clock, tmp_path / "source.db")
    refused = cli("copy", "--url", source, "--to", new_url("sqlite", "target"))
    assert refused.exit_code == 1
    assert f"the source ledger {source!r} holds an event" in refused.stderr
    assert "mode=ro" not in refused.stderr
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    refused = cli("copy", "--url", missing, "--to", new_url("sqlite", "target"))
    assert refused.exit_code == 1
    assert f"no ledger at {missing}" in refused.stderr
    assert "mode=ro" not in refused.stderr
    # 2. A password in --to is warned about (and masked); a URL without one is not.
    secret = "postgresql://me:s3cret@127.0.0.1:1/db?schema=prov&connect_timeout=2"
    refused = cli("copy", "--url", source, "--to", secret)
    assert "warning: --to on the command line holds a password" in refused.stderr
    assert "s3cret" not in refused.output
    refused = cli("copy", "--url", source, "--to", secret.replace(":s3cret", ""))
    assert "holds a password" not in refused.stderr


@pytest.mark.parametrize("given", ["ops.db", "/srv/ledgers/ops.sqlite"])
def test_a_file_name_given_as_the_ledger_url_is_shown_as_an_sqlite_url(given: str) -> None:
    from ledger.persistence.urls import resolve_url

    with pytest.raises(InvalidURLError) as refused:
        resolve_url(given)

    assert str(refused.value) == (
        f"ledger URL {given!r} is not memory:, sqlite:///path or postgresql://user@host/db "
        f"(for the SQLite file {given}: sqlite:///{given})"
    )
