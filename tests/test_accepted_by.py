"""A proposal accepted by another principal in the same transaction:
``Session.propose(..., accepted_by=...)`` (SPEC §2: an approver who is never the
proposer), on every backend.

Both steps are checked as their own commands would be; the log holds both
events, each by its own principal, written in one commit; if either step is
refused nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ledger import Kind, Ledger, Status
from ledger.errors import (
    AcceptanceCheckError,
    AccessDeniedError,
    DuplicateRecordError,
    InvalidInputError,
    InvalidParentError,
    ReadOnlyError,
    SelfApprovalError,
)

from .conftest import World

SCOPE = "proj-a"


def test_the_record_is_proposed_and_accepted_by_its_two_principals_in_one_commit(
    world: World,
) -> None:
    before = world.ledger.position
    rid = world.agent.propose(SCOPE, "k", {"v": 1}, Kind.FACT, accepted_by=world.reviewer)

    assert world.ledger.position == before + 2
    assert world.reviewer.get(rid).status == Status.ACCEPTED
    events = world.reviewer.audit(rid).events
    assert [(e.type, e.actor, e.position) for e in events] == [
        ("Proposed", "agent-1", before + 1),
        ("Accepted", "reviewer", before + 2),
    ]
    # One transaction: as of the proposal's own position the record is already
    # accepted (a past state shows a transaction whole), and before it absent.
    assert world.reviewer.as_of(position=before + 1).get(rid).status == Status.ACCEPTED
    assert world.agent.read(SCOPE, "k").records[0].id == rid
    assert world.ledger.verify().ok
    assert world.ledger.rebuild().matched


def test_a_new_version_accepted_at_once_supersedes_the_old_one(world: World) -> None:
    old = world.agent.propose(SCOPE, "k", 1, Kind.FACT, accepted_by=world.reviewer)
    child = world.agent.propose(SCOPE, "c", 2, Kind.INFERENCE, parents=[old])
    world.reviewer.accept(child)

    new = world.agent.propose(SCOPE, "k", 3, Kind.FACT, supersedes=old, accepted_by=world.reviewer)

    assert world.reviewer.get(old).status == Status.SUPERSEDED
    assert world.reviewer.get(new).status == Status.ACCEPTED
    assert world.reviewer.get(child).status == Status.STALE
    assert [r.value for r in world.agent.read(SCOPE, "k").records] == [3]


def test_a_run_proposal_accepted_at_once_keeps_what_the_run_read_as_observed(
    world: World,
) -> None:
    source = world.agent.propose(SCOPE, "src", "fact", Kind.FACT, accepted_by=world.reviewer)
    with world.agent.run("task-1") as run:
        run.read(SCOPE, "src")
        derived = run.propose(SCOPE, "out", "derived", Kind.INFERENCE, accepted_by=world.reviewer)

    view = world.reviewer.get(derived)
    assert view.status == Status.ACCEPTED
    assert view.observed == (source,)
    world.reviewer.revoke(source, "retracted")
    assert world.reviewer.get(derived).status == Status.STALE


@pytest.mark.parametrize("case", ["self", "no_role", "read_only", "not_a_session", "other_ledger"])
def test_an_acceptor_that_cannot_accept_is_refused_and_nothing_is_written(
    world: World, open_ledger: Callable[..., Ledger], case: str
) -> None:
    admin = world.ledger.admin()
    admin.grant("reader", SCOPE, ["read"])
    reader = world.ledger.authenticate(admin.issue_token("reader"))
    acceptors: dict[str, tuple[object, type[Exception], str]] = {
        "self": (world.agent, SelfApprovalError, "accepted_by is 'agent-1', the proposer"),
        "no_role": (reader, AccessDeniedError, "'reader' lacks role 'approve' in scope 'proj-a'"),
        "read_only": (world.reviewer.as_of(position=1), ReadOnlyError, "read-only"),
        "not_a_session": ("reviewer", InvalidInputError, "accepted_by must be a Session"),
        "other_ledger": (None, InvalidInputError, "a session of the same ledger"),
    }
    acceptor, error, message = acceptors[case]
    if case == "other_ledger":
        other = Ledger.open("memory://")
        other.admin().grant("reviewer", SCOPE, ["approve"])
        acceptor = other.authenticate(other.admin().issue_token("reviewer"))
    before = world.ledger.position

    with pytest.raises(error, match=message):
        world.agent.propose(SCOPE, "k", 1, Kind.FACT, id="r1", accepted_by=acceptor)  # type: ignore[arg-type]

    assert world.ledger.position == before
    assert world.reviewer.records(SCOPE) == ()
    world.agent.propose(SCOPE, "k", 1, Kind.FACT, id="r1")  # the id was never taken


def test_a_refused_acceptance_writes_nothing_not_even_the_candidate(
    open_ledger: Callable[..., Ledger],
) -> None:
    led = open_ledger(acceptance_checks=[lambda r: "needs a source" if r.value == "bad" else None])
    admin = led.admin()
    admin.grant("agent", SCOPE, ["propose", "read"])
    admin.grant("reviewer", SCOPE, ["approve", "read"])
    agent = led.authenticate(admin.issue_token("agent"))
    reviewer = led.authenticate(admin.issue_token("reviewer"))
    candidate = agent.propose(SCOPE, "p", 1, Kind.FACT)  # not usable until accepted
    before = led.position

    with pytest.raises(AcceptanceCheckError, match="needs a source"):
        agent.propose(SCOPE, "k", "bad", Kind.FACT, accepted_by=reviewer)
    with pytest.raises(InvalidParentError):
        agent.propose(SCOPE, "k", "ok", Kind.INFERENCE, parents=[candidate], accepted_by=reviewer)

    assert led.position == before
    assert [r.id for r in reviewer.records(SCOPE, status="CANDIDATE")] == [candidate]
    assert led.verify().ok


def test_a_refused_proposal_is_refused_as_propose_refuses_it(world: World) -> None:
    world.agent.propose(SCOPE, "k", 1, Kind.FACT, id="taken")
    before = world.ledger.position

    with pytest.raises(DuplicateRecordError):
        world.agent.propose(SCOPE, "k", 2, Kind.FACT, id="taken", accepted_by=world.reviewer)

    assert world.ledger.position == before
    assert world.reviewer.get("taken").status == Status.CANDIDATE
