"""What a ledger remembers of its own writes (``Engine.recent``) never outlives a
write by anyone else.

A command skips the tracking query, its aggregate's events and its token's row
when nothing but this ledger wrote since its previous write transaction. These
tests write through a second ``Ledger`` on the same database (another
connection, as another process would) between two commands of the first, and
check that the first decides on what is stored, not on what it remembers.
Runs on an SQLite file (``PRAGMA data_version`` tells another connection's
commit) and on PostgreSQL (the newest log position, read with the writers' lock,
is not the one this ledger's last write transaction committed).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger import Kind, Ledger, Status
from ledger.errors import AccessDeniedError, AuthenticationError, InvalidTransitionError

from .conftest import _pg_dsn, aggregate_of


@pytest.fixture
def pair(shared_url: str) -> Iterator[tuple[Ledger, Ledger, dict[str, str]]]:
    """Two ledgers on one database, and tokens of a proposer and an approver; the
    first has proposed and accepted record ``warm``, so it remembers its writes."""
    first = Ledger.open(shared_url)
    admin = first.admin()
    admin.grant("proposer", "s", ["propose", "read"])
    admin.grant("approver", "s", ["approve", "read", "audit"])
    tokens = {
        "proposer": admin.issue_token("proposer"),
        "approver": admin.issue_token("approver"),
    }
    second = Ledger.open(shared_url)
    try:
        first.authenticate(tokens["proposer"]).propose("s", "k", "warm", Kind.FACT, id="warm")
        first.authenticate(tokens["approver"]).accept("warm")
        yield first, second, tokens
    finally:
        second.close()
        first.close()


def test_a_record_changed_elsewhere_is_decided_on_as_stored(
    pair: tuple[Ledger, Ledger, dict[str, str]],
) -> None:
    first, second, tokens = pair
    first.authenticate(tokens["proposer"]).propose("s", "k", "v", Kind.FACT, id="r1")
    # The other connection rejects r1: the first ledger remembers it as a candidate.
    second.authenticate(tokens["approver"]).reject("r1", "wrong")
    with pytest.raises(InvalidTransitionError, match="REJECTED"):
        first.authenticate(tokens["approver"]).accept("r1")
    assert first.authenticate(tokens["approver"]).get("r1").status is Status.REJECTED
    # And the first ledger's next commands go on from what is stored.
    first.authenticate(tokens["proposer"]).propose("s", "k", "w", Kind.FACT, id="r2")
    second.authenticate(tokens["approver"]).accept("r2")
    revocation = first.authenticate(tokens["approver"]).revoke("r2", "gone")
    assert revocation.root == "r2"
    audit = first.authenticate(tokens["approver"]).audit("r2")
    assert [e.type for e in audit.events][-3:] == ["Proposed", "Accepted", "Revoked"]
    assert first.rebuild().matched


def test_a_token_revoked_elsewhere_is_refused_at_the_next_command(
    pair: tuple[Ledger, Ledger, dict[str, str]],
) -> None:
    first, second, tokens = pair
    proposer = first.authenticate(tokens["proposer"])
    proposer.propose("s", "k", "v", Kind.FACT, id="r1")
    second.admin().revoke_token(tokens["proposer"])
    with pytest.raises(AuthenticationError, match="revoked"):
        proposer.propose("s", "k", "v", Kind.FACT, id="r2")
    assert [r.id for r in first.authenticate(tokens["approver"]).records("s")] == [
        "r1",
        "warm",
    ]


def test_a_grant_revoked_elsewhere_is_refused_at_the_next_command(
    pair: tuple[Ledger, Ledger, dict[str, str]],
) -> None:
    first, second, tokens = pair
    first.authenticate(tokens["proposer"]).propose("s", "k", "v", Kind.FACT, id="r1")
    second.admin().revoke_grant("approver", "s", ["approve"])
    with pytest.raises(AccessDeniedError):
        first.authenticate(tokens["approver"]).accept("r1")
    assert first.authenticate(tokens["proposer"]).get("r1").status is Status.CANDIDATE


def test_a_token_revoked_through_the_same_ledger_is_refused_at_once(
    pair: tuple[Ledger, Ledger, dict[str, str]],
) -> None:
    first, _, tokens = pair
    approver = first.authenticate(tokens["approver"])
    first.admin().revoke_grant("approver", "s", ["approve"])
    first.authenticate(tokens["proposer"]).propose("s", "k", "v", Kind.FACT, id="r1")
    with pytest.raises(AccessDeniedError):
        approver.accept("r1")
    first.admin().revoke_token(tokens["proposer"])
    with pytest.raises(AuthenticationError, match="revoked"):
        first.authenticate(tokens["proposer"]).propose("s", "k", "v", Kind.FACT, id="r2")


def test_a_refused_command_leaves_nothing_remembered_that_is_not_stored(
    pair: tuple[Ledger, Ledger, dict[str, str]],
) -> None:
    first, second, tokens = pair
    proposer = first.authenticate(tokens["proposer"])
    approver = first.authenticate(tokens["approver"])
    proposer.propose("s", "k", "v", Kind.FACT, id="r1")
    with pytest.raises(InvalidTransitionError):
        approver.accept("warm")  # already accepted: refused after loading it
    approver.accept("r1")
    approver.revoke("warm", "gone")
    # Every event is where both connections see it, in order, once.
    for led in (first, second):
        reader = led.authenticate(tokens["approver"])
        assert reader.get("warm").status is Status.REVOKED
        assert reader.get("r1").status is Status.ACCEPTED
        assert [e.type for e in reader.audit("warm").events] == [
            "Proposed",
            "Accepted",
            "Revoked",
        ]
    assert first.verify().ok
    assert second.rebuild().matched


def test_only_another_connections_write_counts_as_someone_else_writing(
    pair: tuple[Ledger, Ledger, dict[str, str]],
) -> None:
    first, second, tokens = pair
    recorder = first.engine.recorder

    def others_wrote() -> bool:
        # A write transaction of the first ledger's own that appends nothing.
        with recorder.writing() as c:
            recorder.lock_for_write(c)
            return recorder.others_wrote(c)

    def scenario(n: int) -> None:
        if n:
            second.admin().grant("proposer", "s", ["propose"])  # if revoked the time before
        others_wrote()  # seen whatever came before
        assert others_wrote() is False  # after a transaction of its own
        first.authenticate(tokens["proposer"]).propose("s", "k", "v", Kind.FACT, id=f"r{n}")
        assert others_wrote() is False
        second.authenticate(tokens["approver"]).accept(f"r{n}")
        assert others_wrote() is True
        assert others_wrote() is False  # the previous transaction saw that write
        second.admin().revoke_grant("proposer", "s", ["propose"])
        assert others_wrote() is True
        assert others_wrote() is False
        # A write that appends no event (here to a table of its own) counts too: a
        # view row changed behind the ledger's back is read again, not remembered.
        _raw_write(first.url, f"CREATE TABLE scratch{n} (x INTEGER)")
        assert others_wrote() is True

    # On PostgreSQL any session that takes a transaction id in between counts (a
    # false alarm only makes a command read again): one the server's autovacuum
    # takes to analyse a table, say. Such a coincidence does not repeat three
    # times in a row; a transaction of the ledger's own counted would.
    tries = 3 if first.backend == "postgresql" else 1
    for n in range(tries):
        try:
            scenario(n)
            return
        except AssertionError:
            if n == tries - 1:
                raise


def _raw_write(url: str, statement: str) -> None:
    """Run one statement on the ledger's database through a connection of its own."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute(statement)
        return
    import psycopg

    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(_pg_dsn(), autocommit=True) as db:
        db.execute(f"SET search_path TO {schema}")
        db.execute(statement)


def test_postgres_listeners_are_notified_of_each_command_and_batch(pg_url: str) -> None:
    """The events' insert notifies the recorder's channel, as eventsourcing's does."""
    import psycopg

    led = Ledger.open(pg_url)
    try:
        admin = led.admin()
        admin.grant("proposer", "s", ["propose"])
        proposer = led.authenticate(admin.issue_token("proposer"))
        channel = led.engine.recorder.channel_name
        with psycopg.connect(_pg_dsn(), autocommit=True) as listener:
            listener.execute(f'LISTEN "{channel}"')
            # The channel is named after the events table, so a ledger in another
            # schema of the database notifies it too: what is heard is the channel only.
            proposer.propose("s", "k", "v", Kind.FACT, id="one")
            heard = [n.channel for n in listener.notifies(timeout=5, stop_after=1)]
            assert heard and set(heard) == {channel}
            proposer.propose_many(
                [{"scope": "s", "claim_key": f"k{i}", "value": i, "kind": "fact"} for i in range(3)]
            )
            heard = [n.channel for n in listener.notifies(timeout=5, stop_after=1)]
            assert heard and set(heard) == {channel}
    finally:
        led.close()


def test_a_ledger_file_restored_under_an_open_ledger_is_decided_on_as_stored(
    tmp_path: Path,
) -> None:
    """What ``Engine.folded`` keeps of a long history is checked against the log:
    a backup restored in place (SQLite's backup API, as ``.restore`` does; a
    failover to a standby lacking the last commits does the same on PostgreSQL)
    lost events it holds, and the next command must neither decide on them nor
    number its event after them (a gap no process could replay)."""
    path = tmp_path / "l.db"
    url = f"sqlite:///{path}"
    with Ledger.open(url) as first, Ledger.open(url) as second:
        admin = first.admin()
        admin.grant("writer", "s", ["propose", "read", "deliver"])
        admin.grant("reviewer", "s", ["approve", "read", "deliver"])
        writer = first.authenticate(admin.issue_token("writer"))
        reviewer = first.authenticate(admin.issue_token("reviewer"))
        rid = writer.propose("s", "weekly", "r", Kind.REPORT, accepted_by=reviewer, id="R1")
        for i in range(40):  # a long history: the report is kept as last committed
            reviewer.deliver(rid, f"reader{i}@example.org")
        backup = sqlite3.connect(tmp_path / "backup.db")
        with sqlite3.connect(path) as live:
            live.backup(backup)
        reviewer.deliver(rid, "lost1@example.org")
        reviewer.deliver(rid, "lost2@example.org")
        with sqlite3.connect(path) as live:
            backup.backup(live)  # the backup restored in place
        backup.close()

        # When the first ledger delivers the report again
        reviewer.deliver(rid, "after@example.org")
        # Then its delivery follows what is stored, and every process can replay it
        with Ledger.open(url) as fresh:
            assert len(fresh.authenticate(admin.issue_token("reviewer")).get(rid).deliveries) == 41
            assert fresh.verify().ok

        # and after another ledger stored other events of the versions lost, the
        # first decides on those, not on the lost ones
        backup = sqlite3.connect(tmp_path / "backup.db")
        with sqlite3.connect(path) as live:
            backup.backup(live)
        backup.close()
        other = second.authenticate(admin.issue_token("reviewer"))
        other.deliver(rid, "new1@example.org")
        other.deliver(rid, "new2@example.org")
        reviewer.deliver(rid, "last@example.org")
        engine = first.engine
        kept = engine.folded.kept[aggregate_of(first, rid)]
        with Ledger.open(url) as fresh, fresh.engine.reading() as c:
            replayed = fresh.engine.load(c, kept.id)
        assert kept.deliveries == replayed.deliveries


def test_what_a_ledger_remembers_of_its_writes_is_bounded_in_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger import recent

    # Given a process alone writing to its file, proposing values of 200 KB
    monkeypatch.setattr(recent, "RECENT_BYTES", 1_000_000)
    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}") as led:
        admin = led.admin()
        admin.grant("agent", "s", ["propose", "read"])
        agent = led.authenticate(admin.issue_token("agent"))
        sizes = []
        for i in range(20):
            agent.propose("s", f"k{i}", "x" * 200_000, Kind.FACT, id=f"V{i}")
            sizes.append((led.engine.recent.size, len(led.engine.recent.events)))
        # Then what it remembers never grows past the bound by more than one write
        assert max(size for size, _ in sizes) <= 1_000_000 + 201_000, sizes
        assert min(count for _, count in sizes[5:]) < 6, sizes
        # and what it remembers still decides as what is stored would
        assert agent.get("V19").value == "x" * 200_000
