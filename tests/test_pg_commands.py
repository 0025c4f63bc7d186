"""PostgreSQL commands in two round trips: the writers' lock with the views' and
the sequence's positions and the current row of the record the command names,
then its writes with the COMMIT.

A command's log positions are taken from the events' sequence as read with the
lock, so its insert needs no answer. Every way of appending (a single command, two
principals' steps in one transaction, a batch's ``COPY``) must go on drawing
positions in order from the same sequence, leave the sequence at the newest
position, and step over anything drawn outside the lock or by a command that
failed. The row read with the lock serves only while nothing in the transaction
has changed the views.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ledger import Kind, Ledger, Session, Status
from ledger.errors import InvalidIdError
from ledger.validation import quoted
from projections.base import COPY_FROM

from .conftest import _pg_dsn

SCOPE = "proj-a"


class Pg:
    """A ledger on a fresh schema with a proposer and an approver, and a plain
    connection to look at its events table and sequence."""

    def __init__(self, url: str) -> None:
        self.schema = url.split("schema=")[1]
        self.led = Ledger.open(url)
        admin = self.led.admin()
        admin.grant("agent", scope=SCOPE, roles=["propose", "read"])
        admin.grant("reviewer", scope=SCOPE, roles=["approve", "read", "audit"])
        self.agent: Session = self.led.authenticate(admin.issue_token("agent"))
        self.reviewer: Session = self.led.authenticate(admin.issue_token("reviewer"))
        self.raw = psycopg.connect(_pg_dsn(), autocommit=True)
        self.table = f"{self.schema}.provledger_events"
        self.sequence = f"pg_get_serial_sequence('{self.table}', 'notification_id')"

    def positions(self) -> list[int]:
        return [
            int(r[0])
            for r in self.raw.execute(
                f"SELECT notification_id FROM {self.table} ORDER BY notification_id"
            )
        ]

    def sequence_last(self) -> int:
        row = self.raw.execute(f"SELECT pg_sequence_last_value({self.sequence})").fetchone()
        assert row is not None
        return int(row[0])

    def draw(self) -> int:
        """A position drawn from the sequence outside the ledger (never used)."""
        row = self.raw.execute(f"SELECT nextval({self.sequence})").fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        self.raw.close()
        self.led.close()


@pytest.fixture
def pg(pg_url: str) -> Iterator[Pg]:
    opened = Pg(pg_url)
    try:
        yield opened
    finally:
        opened.close()


def propose(session: Session, n: int, **extra: Any) -> str:
    return session.propose(SCOPE, f"k{n}", {"n": n}, Kind.FACT, id=f"M{n}", **extra)


def test_single_commands_take_the_next_positions_and_leave_the_sequence_there(pg: Pg) -> None:
    before = pg.positions()
    propose(pg.agent, 1)
    pg.reviewer.accept("M1")
    after = pg.positions()
    assert after == [*before, before[-1] + 1, before[-1] + 2]
    assert pg.sequence_last() == after[-1] == pg.led.position


def test_two_steps_in_one_transaction_take_consecutive_positions(pg: Pg) -> None:
    newest = pg.positions()[-1]
    propose(pg.agent, 1, accepted_by=pg.reviewer)
    assert pg.positions()[-2:] == [newest + 1, newest + 2]
    assert pg.sequence_last() == newest + 2
    assert pg.reviewer.get("M1").status == "ACCEPTED"


def test_positions_drawn_outside_the_lock_are_stepped_over(pg: Pg) -> None:
    propose(pg.agent, 1)
    drawn = [pg.draw(), pg.draw()]
    pg.reviewer.accept("M1")
    assert pg.positions()[-1] == drawn[-1] + 1
    assert not set(drawn) & set(pg.positions())
    assert pg.sequence_last() == drawn[-1] + 1
    assert pg.led.verify().ok


def test_single_commands_and_copy_batches_interleave_in_order(pg: Pg) -> None:
    propose(pg.agent, 1)
    items = [
        {"scope": SCOPE, "claim_key": f"b{i}", "value": i, "kind": Kind.FACT, "id": f"B{i}"}
        for i in range(COPY_FROM + 5)
    ]
    pg.agent.propose_many(items)  # the COPY path: positions reserved with nextval
    pg.reviewer.accept("M1")  # a single command after it reads the sequence again
    propose(pg.agent, 2)
    positions = pg.positions()
    assert positions == sorted(set(positions))
    assert positions[-COPY_FROM - 7 :] == list(
        range(positions[-COPY_FROM - 7], positions[-COPY_FROM - 7] + COPY_FROM + 7)
    )
    assert pg.sequence_last() == positions[-1] == pg.led.position
    assert pg.reviewer.get("M1").status == "ACCEPTED"
    assert pg.agent.get("B0").status == "CANDIDATE"
    assert pg.led.verify().ok
    assert pg.led.rebuild().matched


def test_a_refused_command_leaves_a_gap_the_next_command_steps_over(pg: Pg) -> None:
    """The statement that stores a command's events moves the sequence past them
    before the server refuses a later write of the same transaction: nothing of
    the command is kept, the sequence stays moved, and the next command takes the
    position after the gap."""
    propose(pg.agent, 1)
    newest = pg.positions()[-1]
    pg.raw.execute(
        f"CREATE FUNCTION {pg.schema}.refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'refused by a test'; END $$; "
        f"CREATE TRIGGER refuse BEFORE INSERT ON {pg.schema}.pl_merkle_leaves "
        f"FOR EACH ROW EXECUTE FUNCTION {pg.schema}.refuse()"
    )
    with pytest.raises(Exception, match="refused by a test"):
        pg.reviewer.accept("M1")
    pg.raw.execute(f"DROP TRIGGER refuse ON {pg.schema}.pl_merkle_leaves")
    assert pg.positions()[-1] == newest
    assert pg.sequence_last() == newest + 1
    pg.reviewer.accept("M1")
    assert pg.positions()[-1] == newest + 2
    assert pg.reviewer.get("M1").status == "ACCEPTED"
    assert pg.led.verify().ok
    assert pg.led.rebuild().matched


def test_a_row_read_with_the_lock_is_not_used_once_the_views_caught_up(pg: Pg) -> None:
    """Views that missed events (stopped, as if a process died after its commit)
    catch up in the next command's transaction, after its record's row was read
    with the lock: the command reads the row again, and its view rows continue
    from the row as it now is."""
    propose(pg.agent, 1)
    pg.led.engine.projector.enabled = False
    pg.reviewer.accept("M1")  # the view still says CANDIDATE
    pg.led.engine.projector.enabled = True
    revocation = pg.reviewer.revoke("M1", reason="withdrawn")
    assert revocation.root == "M1" and revocation.position == pg.led.position
    view = pg.reviewer.get("M1")
    assert view.status == Status.REVOKED
    assert [e.type for e in pg.reviewer.audit("M1").events][-2:] == ["Accepted", "Revoked"]
    assert pg.led.rebuild().matched


def test_the_row_read_with_the_lock_serves_the_command_that_named_it(pg: Pg) -> None:
    """Each kind of command that names its record reads it with the lock and
    decides as it would on a row read on its own: a duplicate id is refused, a
    record hidden from the caller is unknown to it, and two steps in one
    transaction see what the first appended."""
    propose(pg.agent, 1)
    with pytest.raises(Exception, match="already exists"):
        propose(pg.agent, 1)
    admin = pg.led.admin()
    admin.grant("other", scope="proj-b", roles=["approve", "read"])
    other = pg.led.authenticate(admin.issue_token("other"))
    with pytest.raises(Exception, match="unknown or not visible"):
        other.accept("M1")
    pg.reviewer.accept("M1")
    assert pg.reviewer.get("M1").status == Status.ACCEPTED
    propose(pg.agent, 2, accepted_by=pg.reviewer)
    assert pg.reviewer.get("M2").status == Status.ACCEPTED
    # Without an id the proposal's id is drawn before the transaction.
    drawn = pg.agent.propose(SCOPE, "k3", 3, Kind.FACT)
    both = pg.agent.propose(SCOPE, "k4", 4, Kind.FACT, accepted_by=pg.reviewer)
    assert drawn.startswith("r-") and both.startswith("r-") and drawn != both
    assert pg.reviewer.get(drawn).status == Status.CANDIDATE
    assert pg.reviewer.get(both).status == Status.ACCEPTED
    assert pg.led.rebuild().matched


@pytest.mark.parametrize("bad", ["M1\x00", "a b", "", "-M1", "x" * 200])
def test_an_id_the_command_refuses_is_never_read_with_the_lock(pg: Pg, bad: str) -> None:
    """Only a plain record id is read with the lock: any other is refused by the
    command itself, naming it, and nothing is written."""
    propose(pg.agent, 1)
    before = pg.positions()
    with pytest.raises(InvalidIdError) as accepting:
        pg.reviewer.accept(bad)
    assert quoted(bad) in str(accepting.value)  # a long one cut, its length told
    with pytest.raises(InvalidIdError) as proposing:
        pg.agent.propose(SCOPE, "k", 1, Kind.FACT, id=bad)
    assert quoted(bad) in str(proposing.value)
    assert pg.positions() == before
    pg.reviewer.accept("M1")
    assert pg.positions() == [*before, before[-1] + 1]


def test_the_lock_wait_is_set_on_every_session_and_pgoptions_still_counts(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given settings an operator gives every session in PGOPTIONS (one of them a
    # lock wait the ledger's URL overrides)
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=7MB -c lock_timeout=99s")
    # When the ledger is opened with a lock wait of 2 s
    with Ledger.open(f"{pg_url}&lock_timeout=2") as led:
        with led.engine.reading() as c:
            c.execute(
                "SELECT current_setting('work_mem') AS w, current_setting('lock_timeout') AS l"
            )
            row = c.fetchone()
        # Then PGOPTIONS still counts, and the URL's lock wait is the session's
        assert (row["w"], row["l"]) == ("7MB", "2s")
        # And a session that was told no lock wait at connection (a pooler in
        # between dropped it) is given it once connected
        pool: Any = led.engine.recorder.datastore.pool
        fresh = psycopg.connect(_pg_dsn(), autocommit=True)
        try:
            pool._configure(fresh)
            assert fresh.execute("SHOW lock_timeout").fetchone() == ("2s",)
        finally:
            fresh.close()


def test_a_statement_timeout_is_said_to_have_written_nothing(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.errors import StorageError

    # Given a ledger whose sessions have a statement timeout of 300 ms (PGOPTIONS),
    # and another session holding the events table's lock
    with Ledger.open(pg_url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose"])
        token = admin.issue_token("agent-1")
        schema = pg_url.rsplit("schema=", 1)[1]
    monkeypatch.setenv("PGOPTIONS", "-c statement_timeout=300")
    with Ledger.open(pg_url) as led, psycopg.connect(_pg_dsn()) as holder:
        before = led.position
        holder.execute(f"LOCK TABLE {schema}.provledger_events IN EXCLUSIVE MODE")
        # When a command waits for it past the timeout
        with pytest.raises(StorageError) as refused:
            led.authenticate(token).propose(
                scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="T1"
            )
        holder.rollback()
        # Then the refusal says so, and that nothing was written
        assert "the database cancelled a statement" in str(refused.value)
        assert "nothing was written" in str(refused.value)
        assert led.position == before


def test_a_connection_of_its_own_during_a_command_gets_the_lock_wait_too(pg_url: str) -> None:
    # Given a ledger of one pooled connection whose lock wait a pooler in between
    # dropped at connection (the startup options), and an acceptance check that reads
    # the ledger (a read within the command: on a connection of its own)
    seen: list[Any] = []

    def check(record: Any) -> None:
        with led.engine.reading() as c:
            c.execute("SELECT current_setting('lock_timeout') AS wait")
            seen.append(c.fetchone()["wait"])

    led = Ledger.open(
        f"{pg_url}&lock_timeout=2&pool_size=1&max_overflow=0", acceptance_checks=[check]
    )
    try:
        pool: Any = led.engine.recorder.datastore.pool
        pool.kwargs["options"] = ""
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose"])
        admin.grant("reviewer", scope="proj-a", roles=["approve"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="K1")
        led.authenticate(admin.issue_token("reviewer")).accept("K1")
        # Then that connection waits for a lock as long as the ledger's do
        assert seen == ["2s"]
    finally:
        led.close()
