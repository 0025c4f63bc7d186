"""A proposal accepted by another principal in the same transaction:
``Session.propose(..., accepted_by=...)`` (SPEC §2: an approver who is never the
proposer), on every backend.

Both steps are checked as their own commands would be; the log holds both
events, each by its own principal, written in one commit; if either step is
refused nothing is written.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ledger import Kind, Ledger, Session, Status
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


# -- what the proposer is told when the acceptor refuses ----------------------------


def _principals(led: Ledger, grants: dict[str, dict[str, list[str]]]) -> dict[str, Session]:
    admin = led.admin()
    for subject, scopes in grants.items():
        for scope, roles in scopes.items():
            admin.grant(subject, scope, roles)
    return {subject: led.authenticate(admin.issue_token(subject)) for subject in grants}


def _behind_a_hidden_ancestor(p: dict[str, Session], hidden: str, rid: str, expires: Any) -> None:
    """An accepted record ``rid`` in scope B resting on the accepted "secret-g" in
    scope ``hidden`` (expiring at ``expires``), both the owner's, accepted by rev."""
    secret = p["owner"].propose(hidden, "g", 1, Kind.FACT, id="secret-g", expires=expires)
    p["rev"].accept(secret)
    p["rev"].accept(p["owner"].propose("B", rid, 2, Kind.INFERENCE, id=rid, parents=[secret]))


def test_a_refusal_names_the_record_as_the_proposer_is_shown_it(
    open_ledger: Callable[..., Ledger],
) -> None:
    # "x" is taken in scope A, which the agent cannot see; the acceptor sees both
    # scopes, so to it the agent's record is "x@@B". The agent must not learn that.
    led = open_ledger(acceptance_checks=[lambda r: "nope" if r.value == "bad" else None])
    p = _principals(
        led,
        {
            "owner": {"A": ["propose", "read"]},
            "agent": {"B": ["propose", "read"]},
            "rev": {"A": ["approve", "read"], "B": ["approve", "read"]},
        },
    )
    p["owner"].propose("A", "k", 1, Kind.FACT, id="x")

    with pytest.raises(AcceptanceCheckError) as refused:
        p["agent"].propose("B", "k", "bad", Kind.FACT, id="x", accepted_by=p["rev"])

    assert str(refused.value) == "acceptance check '<lambda>' refused record 'x': nope"
    assert p["agent"].propose("B", "k", "ok", Kind.FACT, id="x", accepted_by=p["rev"]) == "x"


def test_a_refusal_names_no_record_hidden_from_the_proposer(
    open_ledger: Callable[..., Ledger], clock: Any
) -> None:
    # The parent's ancestor, in a scope only the acceptor sees, has expired.
    led = open_ledger()
    p = _principals(
        led,
        {
            "owner": {"B": ["propose", "read"], "C": ["propose", "read"]},
            "agent": {"B": ["propose", "read"]},
            "rev": {"B": ["approve", "read"], "C": ["approve", "read"]},
        },
    )
    _behind_a_hidden_ancestor(p, "C", "p", clock.now + timedelta(days=1))
    clock.advance(days=2)
    before = led.position

    with pytest.raises(InvalidParentError) as refused:
        p["agent"].propose("B", "n", 3, Kind.INFERENCE, parents=["p"], accepted_by=p["rev"])

    assert "secret-g" not in str(refused.value) and "<hidden>" in str(refused.value)
    assert "'p'" in str(refused.value)
    assert led.position == before


def test_a_refusal_from_what_only_the_acceptor_lacks_says_so(world: World) -> None:
    # The agent rests its proposal on a record in proj-b; an acceptor who cannot
    # read proj-b may not vouch for it. The agent is told who refused and why, in
    # terms of its own record.
    admin = world.ledger.admin()
    admin.grant("approver-a", SCOPE, ["approve", "read"])
    approver = world.ledger.authenticate(admin.issue_token("approver-a"))
    source = world.agent.propose("proj-b", "src", 1, Kind.FACT, accepted_by=world.reviewer)
    before = world.ledger.position

    with pytest.raises(InvalidParentError, match="accepted_by 'approver-a' cannot accept 'n'"):
        world.agent.propose(
            SCOPE, "k", 2, Kind.INFERENCE, id="n", parents=[source], accepted_by=approver
        )

    assert world.ledger.position == before


def test_both_events_carry_one_time(open_ledger: Callable[..., Ledger]) -> None:
    # On a clock that moves at every reading, the two steps still share one.
    ticks = itertools.count()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    led = open_ledger(clock=lambda: start + timedelta(microseconds=next(ticks)))
    p = _principals(led, {"agent": {SCOPE: ["propose"]}, "rev": {SCOPE: ["approve", "audit"]}})
    rid = p["agent"].propose(SCOPE, "k", 1, Kind.FACT, accepted_by=p["rev"])
    proposed, accepted = p["rev"].audit(rid).events
    assert (proposed.type, accepted.type) == ("Proposed", "Accepted")
    assert proposed.at == accepted.at


def test_a_refusal_of_another_kind_as_the_proposer_sees_it_is_not_passed_off_as_the_reason(
    open_ledger: Callable[..., Ledger], clock: Any
) -> None:
    # The acceptor is refused for a dependency it cannot read (in proj-d). Checked
    # again as the agent sees the record, that dependency passes and a check that
    # depends on what is hidden from the agent refuses: the agent must be told of
    # the dependency (the acceptor's reason, in its own terms), not of the check.
    def known_expiry(view: Any) -> str | None:
        hidden = view.effective_expires is not None and view.expiry_source == "<hidden>"
        return "expiry source unknown" if hidden else None

    led = open_ledger(acceptance_checks=[known_expiry])
    p = _principals(
        led,
        {
            "owner": {"S": ["propose", "read"], "B": ["propose", "read"]},
            "agent": {"B": ["propose", "read"], "D": ["propose", "read"]},
            "revd": {"D": ["approve", "read"]},
            "rev": {"S": ["approve", "read"], "B": ["approve", "read"]},
        },
    )
    _behind_a_hidden_ancestor(p, "S", "q", clock.now + timedelta(days=9))
    d = p["agent"].propose("D", "d", 1, Kind.FACT, id="d", accepted_by=p["revd"])
    before = led.position

    with pytest.raises(InvalidParentError, match="accepted_by 'rev' cannot accept 'n'"):
        p["agent"].propose(
            "B", "k", 1, Kind.INFERENCE, id="n", parents=["q", d], accepted_by=p["rev"]
        )

    assert led.position == before
    assert (
        p["agent"].propose("B", "k", 1, Kind.INFERENCE, id="n", parents=["q"], accepted_by=p["rev"])
        == "n"
    )


def test_the_proposer_is_told_the_refusal_at_the_time_the_acceptor_was_refused(
    open_ledger: Callable[..., Ledger],
) -> None:
    # A clock a second further at every reading; the record expires two seconds
    # after the proposal. The acceptor is refused for a dependency it cannot read;
    # checked again later, the record would have expired: the agent must still be
    # told of the dependency.
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    tick = [timedelta(0)]

    def clock() -> datetime:
        reading = now[0]
        now[0] += tick[0]
        return reading

    led = open_ledger(clock=clock)
    p = _principals(
        led,
        {
            "agent": {"B": ["propose", "read"], "D": ["propose", "read"]},
            "revd": {"D": ["approve", "read"]},
            "rev": {"B": ["approve", "read"]},
        },
    )
    source = p["agent"].propose("D", "s", 1, Kind.FACT, id="src", accepted_by=p["revd"])
    before = led.position
    tick[0] = timedelta(seconds=1)

    with pytest.raises(InvalidParentError, match="accepted_by 'rev' cannot accept 'n'"):
        p["agent"].propose(
            "B",
            "k",
            1,
            Kind.FACT,
            id="n",
            parents=[source],
            expires=now[0] + timedelta(seconds=2),
            accepted_by=p["rev"],
        )

    assert led.position == before


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_acceptance_step_reads_no_stored_event_of_the_record_just_proposed(
    world: World, ledger_url: str
) -> None:
    # The record was created in this very transaction: its aggregate is folded from
    # the events appended a step earlier, not read back from the event table.
    with world.ledger.engine.locked() as c:
        writer = c.connection
    old = world.agent.propose(SCOPE, "k", 1, Kind.FACT, accepted_by=world.reviewer)
    statements: list[str] = []
    writer.set_trace_callback(statements.append)
    try:
        rid = world.agent.propose(
            SCOPE, "k", 2, Kind.FACT, supersedes=old, accepted_by=world.reviewer
        )
    finally:
        writer.set_trace_callback(None)
    assert [s for s in statements if "FROM stored_events WHERE originator_id" in s] == []
    assert world.reviewer.get(rid).status == Status.ACCEPTED
    assert world.reviewer.get(old).status == Status.SUPERSEDED
    assert world.ledger.verify().ok
    assert world.ledger.rebuild().matched
