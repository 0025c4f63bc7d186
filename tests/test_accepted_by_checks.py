"""Acceptance checks run by ``Session.propose(..., accepted_by=...)``, on SQLite and
PostgreSQL (on ``memory:`` a check's read there is refused: see
``tests/test_memory_reentrancy.py``).

A check may read the ledger: it sees the ledger as committed before the command
(the proposal not there yet), and it gets the record as the acceptor's
``accept`` shows it. A check that raises, or that runs a command, refuses the
command, and nothing is written.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ledger import (
    AcceptanceCheckError,
    AccessDeniedError,
    Kind,
    Ledger,
    RecordView,
    Session,
    SlowCheckError,
    Status,
    UnknownRecordError,
    Validity,
)
from ledger.errors import InvalidParentError
from ledger.integrations.langgraph import LedgerStore

from .conftest import Clock

SCOPE = "proj-a"


class Checked:
    """A ledger whose one acceptance check calls :attr:`check` (set by the test)
    with the record, after noting the record in :attr:`calls`; an agent proposing
    in ``proj-a``, a reviewer approving there, and an outsider approving in
    ``proj-b`` only."""

    def __init__(self, open_ledger: Callable[..., Ledger]) -> None:
        self.calls: list[RecordView] = []
        self.check: Callable[[RecordView], str | None] = lambda view: None

        def check(view: RecordView) -> str | None:
            self.calls.append(view)
            return self.check(view)

        self.ledger = open_ledger(acceptance_checks=[check])
        admin = self.ledger.admin()
        admin.grant("agent", scope=SCOPE, roles=["propose", "read"])
        admin.grant("reviewer", scope=SCOPE, roles=["approve", "read", "propose", "audit"])
        admin.grant("outsider", scope="proj-b", roles=["approve", "read"])
        self.agent = self.ledger.authenticate(admin.issue_token("agent"))
        self.reviewer = self.ledger.authenticate(admin.issue_token("reviewer"))
        self.outsider = self.ledger.authenticate(admin.issue_token("outsider"))


@pytest.fixture
def ledger_url(shared_url: str) -> str:
    """An SQLite file or a PostgreSQL schema, in place of conftest's three backends."""
    return shared_url


@pytest.fixture
def checked(open_ledger: Callable[..., Ledger]) -> Checked:
    return Checked(open_ledger)


def what_the_check_read(checked: Checked, reviewer: Session, view: RecordView) -> tuple[Any, ...]:
    """What a check reading the ledger is answered about ``view`` and its claim."""
    try:
        status: Any = reviewer.get(view.id).status.value
    except UnknownRecordError:
        status = "unknown"
    return (
        checked.ledger.position,
        reviewer.read(SCOPE, "base").value,
        reviewer.read(SCOPE, view.claim_key).outcome.value,
        status,
        tuple(r.claim_key for r in reviewer.records(SCOPE)),
        tuple(e.type for e in reviewer.history(limit=100)),
    )


def test_a_check_reading_the_ledger_sees_it_as_committed_before_the_proposal(
    checked: Checked, clock: Clock
) -> None:
    # Given an accepted record, expiring, and a check that reads the ledger
    expires = clock.now + timedelta(days=3)
    base = checked.agent.propose(SCOPE, "base", 7, Kind.FACT, expires=expires)
    checked.reviewer.accept(base)
    checked.calls.clear()
    read: list[tuple[Any, ...]] = []
    checked.check = lambda view: read.append(what_the_check_read(checked, checked.reviewer, view))
    before = checked.ledger.position

    # When a record resting on it is proposed and accepted in one command
    rid = checked.agent.propose(
        SCOPE, "k", 7, Kind.INFERENCE, parents=[base], accepted_by=checked.reviewer
    )

    # Then the check read the ledger as committed: the proposal not yet there
    assert read == [(before, 7, "MISSING", "unknown", ("base",), ("Proposed", "Accepted"))]
    # And it got the record as the reviewer's accept shows it: the candidate at
    # the proposal's position, its expiry inherited from its parent
    (view,) = checked.calls
    assert (
        view.id,
        view.claim_key,
        view.value,
        view.status,
        view.parents,
        view.proposer,
        view.position,
        view.created_at,
        view.effective_expires,
        view.expiry_source,
        view.deliveries,
    ) == (rid, "k", 7, Status.CANDIDATE, (base,), "agent", before + 1, clock.now, expires, base, ())
    assert view.validity == Validity.NEEDS_REVALIDATION  # a candidate is not usable yet
    # And the record is stored ACCEPTED, both events in one commit
    assert checked.ledger.position == before + 2
    assert checked.reviewer.get(rid).status == Status.ACCEPTED
    events = checked.reviewer.audit(rid).events
    assert [(e.type, e.actor, e.position) for e in events] == [
        ("Proposed", "agent", before + 1),
        ("Accepted", "reviewer", before + 2),
    ]
    assert checked.ledger.verify().ok


def test_a_check_decides_on_what_it_read(checked: Checked) -> None:
    # Given a check that refuses a value other than the accepted base's
    checked.reviewer.accept(checked.agent.propose(SCOPE, "base", 7, Kind.FACT))

    def same_as_base(view: RecordView) -> str | None:
        base = checked.reviewer.read(SCOPE, "base").value
        return None if view.value == base else f"{view.value!r} is not {base!r}"

    checked.check = same_as_base
    before = checked.ledger.position

    # When another value is proposed and accepted at once, it is refused with
    # the check's reason, and nothing is written
    with pytest.raises(AcceptanceCheckError, match=r"refused record 'r1': 8 is not 7"):
        checked.agent.propose(SCOPE, "k", 8, Kind.FACT, id="r1", accepted_by=checked.reviewer)
    assert checked.ledger.position == before
    assert checked.reviewer.records(SCOPE, claim_prefix="k") == ()

    # And the same value is accepted
    rid = checked.agent.propose(SCOPE, "k", 7, Kind.FACT, id="r1", accepted_by=checked.reviewer)
    assert checked.reviewer.get(rid).status == Status.ACCEPTED


def test_a_check_that_raises_refuses_the_command_and_nothing_is_written(
    checked: Checked,
) -> None:
    # Given a check that reads the ledger, then raises
    checked.reviewer.accept(checked.agent.propose(SCOPE, "base", 7, Kind.FACT))
    before = checked.ledger.position
    read: list[int] = []

    def failing(view: RecordView) -> str | None:
        read.append(checked.ledger.position)
        raise RuntimeError("boom")

    checked.check = failing
    checked.calls.clear()

    # When a record is proposed and accepted at once
    with pytest.raises(AcceptanceCheckError) as refused:
        checked.agent.propose(SCOPE, "k", 1, Kind.FACT, id="r1", accepted_by=checked.reviewer)

    # Then it is refused, naming the check, the record and the exception
    assert str(refused.value) == (
        "accept refused: acceptance check 'check' failed on record 'r1': RuntimeError('boom')"
    )
    # And the check read the ledger as committed: once as the reviewer is shown the
    # record, once as the agent is (what the agent may be told)
    assert read == [before, before]
    assert [(v.id, v.status) for v in checked.calls] == [("r1", Status.CANDIDATE)] * 2
    # And nothing was written: not the proposal, and its id is free
    assert checked.ledger.position == before
    assert checked.reviewer.records(SCOPE, claim_prefix="k") == ()
    checked.check = lambda view: None
    assert checked.agent.propose(SCOPE, "k", 1, Kind.FACT, id="r1") == "r1"


def test_a_check_that_runs_a_command_is_refused(checked: Checked) -> None:
    # Given a check that proposes a record of its own
    def writing(view: RecordView) -> str | None:
        checked.reviewer.propose(SCOPE, "side", 1, Kind.FACT)
        return None

    checked.check = writing
    before = checked.ledger.position

    # When a record is proposed and accepted at once, it is refused
    with pytest.raises(AcceptanceCheckError) as refused:
        checked.agent.propose(SCOPE, "k", 1, Kind.FACT, id="r1", accepted_by=checked.reviewer)

    # Naming the check's own refusal; and nothing was written
    assert "acceptance check 'check' failed on record 'r1'" in str(refused.value)
    assert "a write transaction is already open here" in str(refused.value)
    assert checked.ledger.position == before
    assert checked.reviewer.records(SCOPE) == ()


def test_a_command_refused_before_the_acceptance_runs_no_check(checked: Checked) -> None:
    # Given a check that reads the ledger
    checked.check = lambda view: "refused by the check" if checked.ledger.position else None
    before = checked.ledger.position

    # When the proposal is refused for its input, it is refused as propose refuses it
    with pytest.raises(InvalidParentError, match="unknown"):
        checked.agent.propose(
            SCOPE, "k", 1, Kind.INFERENCE, parents=["nope"], accepted_by=checked.reviewer
        )
    # And an acceptor without the role where the record is refuses for that
    with pytest.raises(AccessDeniedError, match="accepted_by 'outsider' lacks role 'approve'"):
        checked.agent.propose(SCOPE, "k", 1, Kind.FACT, accepted_by=checked.outsider)
    # And a candidate dependency is refused as accept refuses it
    candidate = checked.agent.propose(SCOPE, "c", 1, Kind.FACT)
    with pytest.raises(InvalidParentError, match="CANDIDATE"):
        checked.agent.propose(
            SCOPE, "k", 1, Kind.INFERENCE, parents=[candidate], accepted_by=checked.reviewer
        )

    # Then no check ran, and nothing but the candidate was written
    assert checked.calls == []
    assert checked.ledger.position == before + 1


def test_a_check_run_as_the_proposer_sees_the_record_reads_the_ledger_as_committed(
    checked: Checked,
) -> None:
    # Given a record in proj-d, which the agent reads and the reviewer does not
    admin = checked.ledger.admin()
    admin.grant("agent", scope="proj-d", roles=["propose", "read"])
    admin.grant("revd", scope="proj-d", roles=["approve"])
    revd = checked.ledger.authenticate(admin.issue_token("revd"))
    dep = checked.agent.propose("proj-d", "d", 1, Kind.FACT, accepted_by=revd)
    read: list[tuple[int, str]] = []
    checked.check = lambda view: read.append((checked.ledger.position, view.id)) or None
    checked.calls.clear()
    before = checked.ledger.position

    # When a record resting on it is proposed for the reviewer to accept at once
    with pytest.raises(InvalidParentError) as refused:
        checked.agent.propose(
            SCOPE, "k", 1, Kind.INFERENCE, id="n", parents=[dep], accepted_by=checked.reviewer
        )

    # Then the reviewer is refused for the dependency, and the checks, run once as
    # the agent sees the record (to tell whether the agent may be told why), read
    # the ledger as committed before the command
    assert str(refused.value) == (
        "accept refused: accepted_by 'reviewer' cannot accept 'n': a dependency of it "
        "is not usable as that principal sees it; nothing was written"
    )
    assert read == [(before, "n")]
    assert [v.parents for v in checked.calls] == [(dep,)]
    assert checked.ledger.position == before


def test_a_store_with_an_approver_puts_through_a_check_reading_the_ledger(
    checked: Checked,
) -> None:
    # Given a LangGraph store whose puts the reviewer accepts at once, and a check
    # that refuses a value the ledger already holds under another key
    admin = checked.ledger.admin()
    store = LedgerStore(
        checked.ledger,
        token=admin.issue_token("agent"),
        approver_token=admin.issue_token("reviewer"),
    )

    def unique(view: RecordView) -> str | None:
        held = [r.value for r in checked.reviewer.records(SCOPE) if r.id != view.id]
        return "already held" if view.value in held else None

    checked.check = unique
    with store:
        # When two keys are put with one value
        store.put((SCOPE,), "a", {"v": 1})
        before = checked.ledger.position
        with pytest.raises(AcceptanceCheckError, match="already held"):
            store.put((SCOPE,), "b", {"v": 1})

        # Then the first is stored accepted, the second refused with nothing written
        item = store.get((SCOPE,), "a")
        assert item is not None and item.value == {"v": 1}
        assert store.get((SCOPE,), "b") is None
        assert checked.ledger.position == before


@pytest.mark.postgres
def test_a_check_slower_than_a_postgresql_transaction_may_wait_is_named_as_such(
    pg_url: str,
) -> None:
    # The server ends a session left idle in a transaction (idle_timeout, 5 s unless
    # the URL says): a check that took that long is named, not "connection lost".
    naps: list[float] = [1.5]

    def slow(record: RecordView) -> str | None:
        time.sleep(naps[0])
        return None

    with Ledger.open(f"{pg_url}&idle_timeout=1", acceptance_checks=[slow]) as led:
        admin = led.admin()
        admin.grant("agent", "p", ["propose", "read"])
        admin.grant("reviewer", "p", ["approve", "read"])
        agent = led.authenticate(admin.issue_token("agent"))
        reviewer = led.authenticate(admin.issue_token("reviewer"))
        agent.propose("p", "k", 1, Kind.FACT, id="F1")
        position = led.position
        with pytest.raises(AcceptanceCheckError) as refused:
            reviewer.accept("F1")
        # (its own class, importable from the package as every error is)
        assert type(refused.value) is SlowCheckError and refused.value.checks == ("slow",)
        assert re.fullmatch(
            r"accept refused: acceptance check 'slow' took \d+\.\d s on record 'F1', and a "
            r"PostgreSQL ledger's transaction may wait 1 s \(the URL's idle_timeout\): the "
            "server ended it, and nothing was written; make the checks quicker, or raise "
            "idle_timeout",
            str(refused.value),
        ), refused.value
        assert led.position == position and reviewer.get("F1").status == Status.CANDIDATE
        # The ledger goes on (the ended session is not used again), and a quicker
        # check passes.
        naps[0] = 0
        reviewer.accept("F1")
        assert reviewer.get("F1").status == Status.ACCEPTED
    # A limit the check keeps within lets it take its time.
    naps[0] = 1.5
    with Ledger.open(f"{pg_url}&idle_timeout=5", acceptance_checks=[slow]) as led:
        admin = led.admin()
        agent = led.authenticate(admin.issue_token("agent"))
        reviewer = led.authenticate(admin.issue_token("reviewer"))
        agent.propose("p", "k", 2, Kind.FACT, id="F2", supersedes="F1")
        reviewer.accept("F2")
        assert reviewer.get("F2").status == Status.ACCEPTED


@pytest.mark.postgres
def test_checks_that_together_outlast_the_wait_or_run_for_accepted_by_are_named(
    pg_url: str,
) -> None:
    # The server times the whole wait, every check's; and a proposal accepted at once
    # is told the same, not that a check "refused it as that principal sees it".
    def nap(record: RecordView) -> str | None:
        time.sleep(0.7)
        return None

    def nap_again(record: RecordView) -> str | None:
        time.sleep(0.7)
        return None

    with Ledger.open(f"{pg_url}&idle_timeout=1", acceptance_checks=[nap, nap_again]) as led:
        admin = led.admin()
        admin.grant("agent", "p", ["propose", "read"])
        admin.grant("reviewer", "p", ["approve", "read"])
        agent = led.authenticate(admin.issue_token("agent"))
        reviewer = led.authenticate(admin.issue_token("reviewer"))
        agent.propose("p", "k", 1, Kind.FACT, id="F1")
        with pytest.raises(
            AcceptanceCheckError,
            match=(
                r"^accept refused: acceptance checks 'nap', 'nap_again' took together \d+\.\d s "
                r"on record 'F1', and a PostgreSQL ledger's transaction may wait 1 s"
            ),
        ):
            reviewer.accept("F1")
        position = led.position
        with pytest.raises(
            AcceptanceCheckError,
            match=(
                r"^accept refused: acceptance checks 'nap', 'nap_again' took together \d+\.\d s "
                r"on record 'F2', and a PostgreSQL"
            ),
        ):
            agent.propose("p", "k2", 2, Kind.FACT, id="F2", accepted_by=reviewer)
        assert led.position == position
