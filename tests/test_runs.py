"""Runs: what a run is shown is recorded; what it was shown VALID it depends on."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger import Kind, Ledger, Outcome
from ledger.errors import (
    AuthenticationError,
    ConcurrencyError,
    InvalidInputError,
    InvalidParentError,
)
from tests.conftest import World


def _accepted(world: World, rid: str, claim: str, value: object = 1) -> str:
    world.agent.propose(scope="proj-a", claim_key=claim, value=value, kind=Kind.FACT, id=rid)
    world.reviewer.accept(rid)
    return rid


def test_what_a_run_is_shown_is_recorded_but_only_valid_records_become_dependencies(
    world: World,
) -> None:
    _accepted(world, "A1", "a")
    _accepted(world, "B1", "b")
    world.reviewer.revoke("B1", reason="wrong")
    world.agent.propose(scope="proj-a", claim_key="c", value=1, kind=Kind.FACT, id="C1")
    with world.agent.run("task-1") as run:
        run.read(scope="proj-a", claim_key="a")
        run.explain(scope="proj-a", claim_key="b")  # shows B1, REVOKED
        run.records("proj-a", status="CANDIDATE")  # shows C1, a candidate
        rid = run.propose(scope="proj-a", claim_key="d", value=1, kind=Kind.INFERENCE)
        assert set(run.reads) == {"A1", "B1", "C1"}
    assert world.reviewer.get(rid).observed == ("A1",)


def test_a_run_told_that_a_record_it_read_was_withdrawn_no_longer_depends_on_it(
    world: World,
) -> None:
    _accepted(world, "A1", "a")
    with world.agent.run("task-2") as run:
        run.read(scope="proj-a", claim_key="a")
        world.reviewer.revoke("A1", reason="doc changed")
        # Not yet told: the proposal would rest on a withdrawn record, and is refused.
        with pytest.raises(InvalidParentError, match=r"observed dependency 'A1'.*REVOKED"):
            run.propose(scope="proj-a", claim_key="x", value=1, kind=Kind.FACT)
        # Shown the withdrawal, the run carries on without it.
        assert run.get("A1").status == "REVOKED"
        rid = run.propose(scope="proj-a", claim_key="x", value=1, kind=Kind.FACT)
    assert world.reviewer.get(rid).observed == ()


def test_observe_records_many_outside_reads_in_one_event(world: World) -> None:
    _accepted(world, "A1", "a")
    _accepted(world, "A2", "b")
    with world.agent.run("task-3") as run:
        before = world.ledger.position
        run.observe("A1", "A2")
        assert world.ledger.position == before + 1
        rid = run.propose(scope="proj-a", claim_key="y", value=1, kind=Kind.FACT)
    assert world.reviewer.get(rid).observed == ("A1", "A2")


def test_two_contexts_of_one_run_share_what_it_read_and_its_end(world: World) -> None:
    # Given one run resumed in a second context (as another process, or the
    # command line, resumes it): what each records, the other's proposals carry
    _accepted(world, "A1", "a")
    _accepted(world, "B1", "b")
    first = world.agent.run("task-7").start()
    second = world.agent.run("task-7").resume()
    second.observe("B1")
    first.read(scope="proj-a", claim_key="a")
    rid = first.propose(scope="proj-a", claim_key="x", value=1, kind=Kind.INFERENCE)
    assert set(world.reviewer.get(rid).observed) == {"A1", "B1"}
    # so revoking what the other context read marks the proposal STALE
    world.reviewer.accept(rid)
    world.reviewer.revoke("B1", reason="wrong")
    assert world.reviewer.get(rid).status == "STALE"

    # When the second context ends the run, the first records nothing more in it
    second.end()
    position, views = world.ledger.position, world.ledger.views_digest()
    with pytest.raises(InvalidInputError, match="run 'task-7' of 'agent-1' has ended"):
        first.propose(scope="proj-a", claim_key="y", value=1, kind=Kind.FACT)
    with pytest.raises(InvalidInputError, match="run 'task-7' is not open"):
        first.end()
    assert (world.ledger.position, world.ledger.views_digest()) == (position, views)


def test_a_run_is_not_ended_with_a_revoked_token(world: World) -> None:
    admin = world.ledger.admin()
    token = admin.issue_token("agent-1")
    agent = world.ledger.authenticate(token)
    run = agent.run("task-8").start()
    admin.revoke_token(token)
    position = world.ledger.position
    with pytest.raises(AuthenticationError, match="revoked"):
        run.end()
    assert world.ledger.position == position


def test_a_with_block_leaves_cleanly_when_the_run_was_ended_elsewhere(world: World) -> None:
    # Given a run that another process sharing it ends while the block runs
    _accepted(world, "A1", "a")
    with world.agent.run("task-9") as run:
        run.read(scope="proj-a", claim_key="a")
        world.agent.run("task-9").resume().end()
        position = world.ledger.position
    # the block's end records nothing more and raises nothing: the run has its end
    assert world.ledger.position == position
    with pytest.raises(InvalidInputError, match="run 'task-9' of 'agent-1' has ended"):
        world.agent.run("task-9").resume()


def test_a_run_that_cannot_be_ended_does_not_hide_the_blocks_own_error(world: World) -> None:
    # Given a block that fails after its token was revoked
    admin = world.ledger.admin()
    token = admin.issue_token("agent-1")
    agent = world.ledger.authenticate(token)
    position = None
    with (
        pytest.raises(ValueError, match="the agent's own error") as raised,
        agent.run("task-10"),
    ):
        admin.revoke_token(token)
        position = world.ledger.position
        raise ValueError("the agent's own error")
    # the block's error is the one raised, and it says why the run stays open
    assert raised.value.__notes__ == [
        "run 'task-10' could not be recorded as failed: token of 'agent-1' was revoked"
    ]
    assert world.ledger.position == position
    # Without an error of its own, the block raises why the run could not end
    token = admin.issue_token("agent-1")
    run = world.ledger.authenticate(token).run("task-11").start()
    admin.revoke_token(token)
    position = world.ledger.position
    with pytest.raises(AuthenticationError, match="revoked"):
        run.__exit__(None, None, None)
    assert world.ledger.position == position


def test_a_read_the_run_was_shown_already_does_not_wait_for_the_writers_lock(
    tmp_path: Path,
) -> None:
    # Given a run that read A1, on an SQLite file waiting at most 1 s for the lock
    path = tmp_path / "runs.db"
    with Ledger.open(f"sqlite:///{path}?timeout=1") as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        agent.propose(scope="proj-a", claim_key="a", value=1, kind=Kind.FACT, id="A1")
        led.authenticate(admin.issue_token("reviewer")).accept("A1")
        agent.propose(scope="proj-a", claim_key="b", value=1, kind=Kind.FACT, id="B1")
        with agent.run("task-lock") as run:
            run.read(scope="proj-a", claim_key="a")
            before = led.position
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
            try:
                # When it reads A1 again: it is answered, recording nothing
                assert run.read(scope="proj-a", claim_key="a").outcome == Outcome.FOUND
                assert run.get("A1").status == "ACCEPTED"
                # A record it was not shown yet must be recorded: that waits, and
                # is refused once the lock is not given
                with pytest.raises(ConcurrencyError, match="nothing was written"):
                    run.get("B1")
            finally:
                holder.rollback()
                holder.close()
            assert led.position == before
            assert set(run.reads) == {"A1"}
