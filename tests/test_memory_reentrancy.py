"""A thread that holds the ledger's write transaction, or a read, and uses the
ledger again: the same answers on every backend, or at once a refusal naming why.

An acceptance check runs inside the command's write transaction: a read it makes
sees the ledger as committed before the command (on ``memory:`` through that
transaction, which has written nothing yet; on SQLite and PostgreSQL from a
connection of its own); a command it runs is refused. On ``memory:`` a write
waits for every open read, so a write on the thread iterating the history is
refused at once, and one on another thread says what it waited for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

import pytest

from ledger import (
    AcceptanceCheckError,
    Ledger,
    RecordView,
    Session,
    StorageError,
    UnknownRecordError,
)


class Principals:
    """An agent proposing in ``proj-a`` and a reviewer approving and reading there."""

    def __init__(self, led: Ledger) -> None:
        admin = led.admin()
        admin.grant("agent", scope="proj-a", roles=["propose", "read", "audit"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "propose", "audit"])
        self.ledger = led
        self.agent = led.authenticate(admin.issue_token("agent"))
        self.reviewer = led.authenticate(admin.issue_token("reviewer"))


@pytest.fixture
def with_check(open_ledger: Callable[..., Ledger]) -> Iterator[Callable[..., Principals]]:
    """A ledger whose one acceptance check is ``check(reviewer, record)``."""

    def _open(check: Callable[[Session, RecordView], str | None]) -> Principals:
        holder: list[Principals] = []

        def reading_check(view: RecordView) -> str | None:
            return check(holder[0].reviewer, view)

        holder.append(Principals(open_ledger(acceptance_checks=[reading_check])))
        return holder[0]

    yield _open


def what_a_check_sees(reviewer: Session, view: RecordView) -> tuple[Any, ...]:
    """What a check reading the ledger is answered about ``view`` and its claim."""
    try:
        status: Any = reviewer.get(view.id).status.value
    except UnknownRecordError:
        status = "unknown"
    return (
        reviewer.read("proj-a", "base").value,
        reviewer.read("proj-a", view.claim_key).outcome.value,
        status,
        tuple((e.record.status.value, e.usable) for e in reviewer.explain("proj-a", "k").entries),
        tuple(r.claim_key for r in reviewer.records("proj-a", status="CANDIDATE")),
        len(reviewer.history(limit=100)),
    )


def test_an_acceptance_check_reads_the_ledger_as_committed_before_the_accept(
    with_check: Callable[..., Principals],
) -> None:
    # Given a check that reads the ledger (and refuses a value other than base's)
    seen: list[tuple[Any, ...]] = []

    def check(reviewer: Session, view: RecordView) -> str | None:
        if view.claim_key == "base":
            return None
        seen.append(what_a_check_sees(reviewer, view))
        base = reviewer.read("proj-a", "base").value
        return None if view.value == base else f"{view.value!r} is not {base!r}"

    p = with_check(check)
    base = p.agent.propose("proj-a", "base", 7, "fact")
    p.reviewer.accept(base)
    candidate = p.agent.propose("proj-a", "k", 7, "fact")
    other = p.agent.propose("proj-a", "k", 8, "fact")
    before = p.ledger.position

    # When the reviewer accepts the candidate
    p.reviewer.accept(candidate)

    # Then the check saw the ledger as committed before it, on every backend
    assert seen[-1] == (
        7,  # the accepted record of another claim
        "MISSING",  # the candidate's claim has no usable record yet
        "CANDIDATE",  # the record being accepted, as it stands
        (("CANDIDATE", False), ("CANDIDATE", False)),  # the candidate and the other
        ("k", "k"),
        4,  # base's proposal and acceptance, the candidate's proposal and the other's
    )
    assert p.ledger.position > before
    assert p.reviewer.get(candidate).status.value == "ACCEPTED"
    assert p.reviewer.get(base).status.value == "ACCEPTED"

    # And what it read decides: the other value is refused, naming the reason
    with pytest.raises(AcceptanceCheckError, match=r"8 is not 7"):
        p.reviewer.accept(other)
    assert p.reviewer.get(other).status.value == "CANDIDATE"


def test_a_check_reading_the_ledger_during_propose_accepted(
    with_check: Callable[..., Principals], ledger_url: str
) -> None:
    # Given a check that reads the ledger, and a record accepted before
    seen: list[tuple[Any, ...]] = []

    def check(reviewer: Session, view: RecordView) -> str | None:
        if view.claim_key != "base":
            seen.append(what_a_check_sees(reviewer, view))
        return None

    p = with_check(check)
    p.agent.propose("proj-a", "base", 7, "fact", accepted_by=p.reviewer)
    before = p.ledger.position

    if ledger_url != "memory:":
        # When a record is proposed and accepted in one command
        made = p.agent.propose("proj-a", "k", 7, "fact", accepted_by=p.reviewer)

        # Then the check saw the ledger as committed: the proposal not yet there
        assert seen == [(7, "MISSING", "unknown", (), (), 2)]
        assert p.reviewer.get(made).status.value == "ACCEPTED"
        return

    # When the same happens in memory, where the proposal is written and not
    # committed when the check reads: then the read is refused at once, naming
    # why, rather than shown rows not committed
    with pytest.raises(AcceptanceCheckError) as refused:
        p.agent.propose("proj-a", "k", 7, "fact", accepted_by=p.reviewer)
    assert "StorageError" in str(refused.value)
    assert "cannot see the ledger as committed on the memory backend" in str(refused.value)
    assert "accepted_by" in str(refused.value)
    # And nothing was written
    assert seen == []
    assert p.ledger.position == before
    assert p.reviewer.records("proj-a", claim_prefix="k") == ()


def test_a_check_that_writes_is_refused_at_once(with_check: Callable[..., Principals]) -> None:
    # Given a check that runs a command on the same ledger
    def check(reviewer: Session, view: RecordView) -> str | None:
        reviewer.propose("proj-a", "side", 1, "fact")
        return None

    p = with_check(check)
    candidate = p.agent.propose("proj-a", "k", 1, "fact")
    before = p.ledger.position

    # When the candidate is accepted
    with pytest.raises(AcceptanceCheckError) as refused:
        p.reviewer.accept(candidate)

    # Then the acceptance is refused, naming the check's own refusal
    assert "acceptance check 'reading_check' failed" in str(refused.value)
    assert "a write transaction is already open here" in str(refused.value)
    # And nothing was written
    assert p.ledger.position == before
    assert p.reviewer.get(candidate).status.value == "CANDIDATE"


def test_a_write_while_this_thread_iterates_the_history(ledger: Ledger) -> None:
    # Given a history iteration left open on this thread
    p = Principals(ledger)
    first = p.agent.propose("proj-a", "a", 1, "fact")
    p.agent.propose("proj-a", "b", 2, "fact")
    before = ledger.position
    with closing(p.agent.iter_history()) as events:
        assert next(events).details["record_id"] == first

        # When the same thread writes
        if ledger.backend != "memory":
            # Then on SQLite and PostgreSQL it is written (the iteration has its snapshot)
            p.agent.propose("proj-a", "c", 3, "fact")
            assert ledger.position > before
            assert len(list(events)) == 1  # b's proposal: c is not in its snapshot
            return
        # Then in memory it is refused at once, naming the open iteration
        with pytest.raises(StorageError) as refused:
            p.agent.propose("proj-a", "c", 3, "fact")
        assert "iter_history() iteration not yet exhausted or closed" in str(refused.value)
        assert "Timed out" not in str(refused.value)
        assert ledger.position == before

    # And once it is closed, the write goes through
    p.agent.propose("proj-a", "c", 3, "fact")
    assert ledger.position > before


def test_a_write_while_another_thread_iterates_the_history(ledger: Ledger) -> None:
    # Given a history iteration left open on another thread
    p = Principals(ledger)
    p.agent.propose("proj-a", "a", 1, "fact")
    before = ledger.position
    if ledger.backend == "memory":
        ledger.engine.recorder.datastore.pool.pool_timeout = 0.2  # type: ignore[union-attr]
    opened, release = threading.Event(), threading.Event()

    def iterate() -> None:
        with closing(p.agent.iter_history()) as events:
            next(events)
            opened.set()
            release.wait(60)

    iterating = threading.Thread(target=iterate)
    iterating.start()
    try:
        assert opened.wait(60)

        # When this thread writes
        if ledger.backend == "memory":
            # Then in memory, once it has waited, it is refused, naming the open read
            with pytest.raises(StorageError) as refused:
                p.agent.propose("proj-a", "b", 2, "fact")
            assert "a read was still open in this process after 0.2 s" in str(refused.value)
            assert "iter_history()" in str(refused.value)
            assert ledger.position == before
        else:
            # Then on SQLite and PostgreSQL it is written beside the iteration
            p.agent.propose("proj-a", "b", 2, "fact")
            assert ledger.position > before
    finally:
        release.set()
        iterating.join()


def test_a_read_on_another_thread_while_a_check_runs(
    with_check: Callable[..., Principals], ledger_url: str
) -> None:
    # Given an acceptance check that holds the accept's write transaction open
    # until a read on another thread has been answered
    in_check, answered = threading.Event(), threading.Event()

    def check(reviewer: Session, view: RecordView) -> str | None:
        if view.claim_key != "base":
            in_check.set()
            answered.wait(60)
        return None

    p = with_check(check)
    p.agent.propose("proj-a", "base", 7, "fact", accepted_by=p.reviewer)
    candidate = p.agent.propose("proj-a", "k", 1, "fact")
    if ledger_url == "memory:":
        p.ledger.engine.recorder.datastore.pool.pool_timeout = 0.2  # type: ignore[union-attr]
    accepting = threading.Thread(target=p.reviewer.accept, args=(candidate,))
    accepting.start()
    try:
        assert in_check.wait(60)

        # When another thread reads meanwhile
        if ledger_url == "memory:":
            # Then in memory, once it has waited, it is refused, naming the write
            with pytest.raises(StorageError, match="a write transaction of another thread"):
                p.agent.read("proj-a", "base")
        else:
            # Then on SQLite and PostgreSQL it is answered, as committed
            assert p.agent.read("proj-a", "base").value == 7
    finally:
        answered.set()
        accepting.join()
    assert p.reviewer.get(candidate).status.value == "ACCEPTED"


def test_a_check_asking_for_the_position_or_a_past_state_is_answered(
    with_check: Callable[..., Principals],
) -> None:
    # Given a check that asks for the log position, a past state and the counts
    # (each reads the newest position, which in memory took a pooled reader that
    # waited for this thread's own write)
    seen: list[tuple[int, str, int]] = []

    def check(reviewer: Session, view: RecordView) -> str | None:
        led = holder[0].ledger
        then = reviewer.as_of(position=led.position).get(view.id).status.value
        seen.append((led.position, then, led.stats()["records"]))
        return None

    holder: list[Principals] = []
    p = with_check(check)
    holder.append(p)
    record = p.agent.propose("proj-a", "k", 1, "fact")
    before = p.ledger.position

    # When the reviewer accepts it
    p.reviewer.accept(record)

    # Then the check was answered as committed before the accept, on every backend
    assert seen == [(before, "CANDIDATE", 1)]
    assert p.reviewer.get(record).status.value == "ACCEPTED"


def test_a_history_iteration_closed_on_another_thread_leaves_no_read_open(
    ledger: Ledger,
) -> None:
    # Given a history iteration opened on another thread and closed on this one
    p = Principals(ledger)
    p.agent.propose("proj-a", "a", 1, "fact")
    p.agent.propose("proj-a", "b", 2, "fact")
    events = p.agent.iter_history()
    first: list[object] = []
    opening = threading.Thread(target=lambda: first.append(next(events)))
    opening.start()
    opening.join()
    assert first
    events.close()
    before = ledger.position

    # When each thread writes, both are written: no read is counted open anywhere
    p.agent.propose("proj-a", "c", 3, "fact")
    writer = threading.Thread(target=lambda: p.agent.propose("proj-a", "d", 4, "fact"))
    writer.start()
    writer.join()
    assert ledger.position == before + 2
