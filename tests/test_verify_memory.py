"""What ``verify()`` keeps for the whole log is small per record (the
authorization replay keys records by their aggregate id's integer and keeps each
scope and principal name once), and a proof finds its leaves' indexes by counting
in the database, not by a map of every position."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

import ledger.verification as verification
from ledger import Kind, Ledger
from ledger.authorization import AuthorizationReplay

from .conftest import World, aggregate_of


@pytest.fixture
def replays(monkeypatch: pytest.MonkeyPatch) -> list[AuthorizationReplay]:
    """Every authorization replay ``verify()`` makes."""
    made: list[AuthorizationReplay] = []

    def keep() -> AuthorizationReplay:
        made.append(AuthorizationReplay())
        return made[-1]

    monkeypatch.setattr(verification, "AuthorizationReplay", keep)
    return made


def test_the_replay_keeps_one_string_per_name_and_no_uuid_objects(
    world: World, replays: list[AuthorizationReplay]
) -> None:
    # Given records proposed by one agent in one scope (each event decodes its
    # own copy of the scope and the proposer's name)
    ids = [
        world.agent.propose("proj-a", f"k{i}", {"n": i}, Kind.FACT, id=f"R{i}") for i in range(5)
    ]
    world.reviewer.accept(ids[0])

    # When the ledger is verified
    report = world.ledger.verify()

    # Then it is intact, and the replay's states share one scope and one name
    assert report.ok, report.problem
    (replay,) = replays
    states = [replay.by_id[rid] for rid in ids]
    assert len({id(s.scope) for s in states}) == 1 and states[0].scope == "proj-a"
    assert len({id(s.proposer) for s in states}) == 1 and states[0].proposer == "agent-1"
    # keyed by the aggregate id's integer, the same state as by record id
    for rid, state in zip(ids, states, strict=True):
        assert replay.records[aggregate_of(world.ledger, rid).int] is state
    assert all(type(key) is int for key in replay.records)
    # and the accepted record's status was followed
    assert [s.status for s in states] == [
        "ACCEPTED",
        "CANDIDATE",
        "CANDIDATE",
        "CANDIDATE",
        "CANDIDATE",
    ]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_leaf_indexes_count_the_leaves_before_each_position(
    ledger: Ledger, ledger_url: str
) -> None:
    # Given a ledger file whose leaf at position 4 was removed behind its back
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose"])
    session = ledger.authenticate(admin.issue_token("agent-1"))
    for i in range(6):
        session.propose("proj-a", f"k{i}", i, Kind.FACT)
    with closing(sqlite3.connect(ledger_url.removeprefix("sqlite:///"))) as con:
        con.execute("DROP TRIGGER pl_merkle_leaves_no_delete")
        con.execute("DELETE FROM pl_merkle_leaves WHERE position = 4")
        con.commit()
        stored = [p for (p,) in con.execute("SELECT position FROM pl_merkle_leaves ORDER BY 1")]

    # When the indexes of some positions are asked, in any order and repeated
    engine = ledger._engine
    with engine.reading() as c:
        size, found = engine.recorder.leaf_indexes(c, [7, 2, 4, 99, 7, 5, 1])

    # Then each held position's index is the number of leaves before it
    assert size == len(stored) == ledger.position - 1
    assert found == {p: stored.index(p) for p in (1, 2, 5, 7)}
