"""Core behaviour of the ledger: the status machine, revocation, the eligibility
chain, delivery and validity, audit, as-of reads and persistence (SPEC 2-6, 10).

Every test runs on each backend of the ``ledger`` fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, timedelta, timezone
from typing import Any

import pytest

from ledger import Kind, Ledger, Outcome, RecordView, Session, Status, Validity, reads, rules
from ledger.errors import (
    AcceptanceCheckError,
    AccessDeniedError,
    CycleError,
    InvalidKindError,
    InvalidParentError,
    InvalidTransitionError,
    ReadOnlyError,
    SelfApprovalError,
    UnknownRecordError,
)
from projections.record_table import LIVE_STATUSES

from .conftest import Clock, World

SCOPE = "proj-a"
CLAIM = "api.orders.retry_safe"


# -- helpers ----------------------------------------------------------------------


def evidence(world: World, rid: str, **kwargs: Any) -> str:
    """Capture a document as evidence and have the reviewer accept it."""
    kwargs.setdefault("scope", SCOPE)
    e = world.agent.capture(uri=f"https://docs.test/{rid}", content=rid.encode(), id=rid, **kwargs)
    world.reviewer.accept(e)
    return e


def accepted(
    world: World,
    rid: str,
    *,
    parents: Iterable[str] = (),
    claim_key: str = CLAIM,
    value: Any = True,
    kind: Kind | str = Kind.INFERENCE,
    scope: str = SCOPE,
    **kwargs: Any,
) -> str:
    """Propose a record as the agent and accept it as the reviewer."""
    r = world.agent.propose(
        scope=scope,
        claim_key=claim_key,
        value=value,
        kind=kind,
        parents=list(parents),
        id=rid,
        **kwargs,
    )
    world.reviewer.accept(r)
    return r


def statuses(session: Session, *ids: str) -> dict[str, Status]:
    return {rid: session.get(rid).status for rid in ids}


def event_types(session: Session, rid: str) -> list[str]:
    return [e.type for e in session.audit(rid).events]


# -- proposing and approving ------------------------------------------------------


def test_candidate_reads_as_missing_until_accepted(world: World) -> None:
    # Given an inference that has only been proposed
    m1 = world.agent.propose(scope=SCOPE, claim_key=CLAIM, value=True, kind=Kind.INFERENCE)
    assert world.agent.get(m1).status == Status.CANDIDATE

    # Then a read hands nothing on, and explain says it is a candidate
    before = world.agent.read(SCOPE, CLAIM)
    assert before.outcome == Outcome.MISSING
    assert before.records == ()
    (entry,) = world.agent.explain(SCOPE, CLAIM).entries
    assert entry.record.id == m1
    assert not entry.usable
    assert any("candidate" in r for r in entry.reasons)

    # When an approver accepts it, the same read finds it
    world.reviewer.accept(m1)
    after = world.agent.read(SCOPE, CLAIM)
    assert after.outcome == Outcome.FOUND
    assert [r.id for r in after.records] == [m1]
    assert after.value is True


def test_proposer_cannot_approve_its_own_candidate(world: World) -> None:
    # Given a principal that may both propose and approve
    admin = world.ledger.admin()
    admin.grant("solo", scope=SCOPE, roles=["propose", "approve", "read"])
    solo = world.ledger.authenticate(admin.issue_token("solo"))
    m1 = solo.propose(scope=SCOPE, claim_key=CLAIM, value=True, kind=Kind.FACT, id="M1")
    position = world.ledger.position

    # When it tries to accept or reject its own candidate, it is refused
    with pytest.raises(SelfApprovalError) as accept_info:
        solo.accept(m1)
    with pytest.raises(SelfApprovalError):
        solo.reject(m1, reason="changed my mind")

    # Then the refusal names both and nothing was written
    assert "'solo'" in str(accept_info.value)
    assert "'M1'" in str(accept_info.value)
    assert world.ledger.position == position
    assert solo.get(m1).status == Status.CANDIDATE

    # And a different approver may accept it
    world.reviewer.accept(m1)
    assert solo.get(m1).status == Status.ACCEPTED


def test_a_decision_too_late_names_who_decided_first_and_when(world: World) -> None:
    # Given M1 accepted by the reviewer, and two more approvers in proj-a: one who
    # may audit there, one who may not
    admin = world.ledger.admin()
    admin.grant("reviewer-2", scope="proj-a", roles=["approve", "read", "audit"])
    admin.grant("approver", scope="proj-a", roles=["approve", "read"])
    second = world.ledger.authenticate(admin.issue_token("reviewer-2"))
    unaudited = world.ledger.authenticate(admin.issue_token("approver"))
    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="M1")
    world.reviewer.accept("M1")
    when = world.clock.now.astimezone(UTC).isoformat()

    # When the second rejects it, having read it as a candidate, the refusal says
    # who acted first and when (what its audit trail would tell it)
    with pytest.raises(InvalidTransitionError) as refused:
        second.reject("M1", reason="wrong")
    assert str(refused.value) == (
        f"record 'M1' is ACCEPTED; reject needs CANDIDATE (ACCEPTED since {when}, by 'reviewer')"
    )
    # and to an approver who may not audit there, only the status
    with pytest.raises(InvalidTransitionError) as refused:
        unaudited.reject("M1", reason="wrong")
    assert str(refused.value) == "record 'M1' is ACCEPTED; reject needs CANDIDATE"


def test_a_stale_record_refused_names_no_revoker_of_its_ancestor(world: World) -> None:
    # Given M1 in proj-a resting on H1 in proj-h, revoked there by hboss (whose name
    # a caller reading proj-a alone may not learn: the ancestor's revoker is never told)
    admin = world.ledger.admin()
    admin.grant("agent-1", scope="proj-h", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-h", roles=["read", "audit"])  # to accept M1
    admin.grant("hboss", scope="proj-h", roles=["approve", "read"])
    hboss = world.ledger.authenticate(admin.issue_token("hboss"))
    world.agent.propose(scope="proj-h", claim_key="h", value=1, kind=Kind.FACT, id="H1")
    hboss.accept("H1")
    world.agent.propose(
        scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, parents=["H1"], id="M1"
    )
    world.reviewer.accept("M1")
    hboss.revoke("H1", reason="withdrawn")

    # When the reviewer rejects M1 (now STALE), the refusal names no one
    with pytest.raises(InvalidTransitionError) as refused:
        world.reviewer.reject("M1", reason="x")
    assert str(refused.value) == "record 'M1' is STALE; reject needs CANDIDATE"


def test_accept_needs_every_parent_accepted(world: World) -> None:
    # Given evidence that is still a candidate and an inference built on it
    e1 = world.agent.capture(scope=SCOPE, uri="https://docs.test/e1", content=b"e1", id="E1")
    m1 = world.agent.propose(
        scope=SCOPE, claim_key=CLAIM, value=True, kind=Kind.INFERENCE, parents=[e1], id="M1"
    )

    # When the inference is accepted first, it is refused naming the parent
    with pytest.raises(InvalidParentError) as info:
        world.reviewer.accept(m1)
    assert "'E1'" in str(info.value)
    assert "CANDIDATE" in str(info.value)
    assert world.reviewer.get(m1).status == Status.CANDIDATE

    # Then once the parent is accepted, the child can be too
    world.reviewer.accept(e1)
    world.reviewer.accept(m1)
    assert statuses(world.reviewer, e1, m1) == {e1: Status.ACCEPTED, m1: Status.ACCEPTED}


def test_accept_needs_every_parent_unexpired(world: World, clock: Clock) -> None:
    # Given accepted evidence that expires in one hour and a candidate built on it
    e1 = evidence(world, "E1", expires=clock.now + timedelta(hours=1))
    m1 = world.agent.propose(
        scope=SCOPE, claim_key=CLAIM, value=True, kind=Kind.INFERENCE, parents=[e1], id="M1"
    )

    # When the evidence expires before the candidate is reviewed
    clock.advance(hours=2)

    # Then accepting the candidate is refused, naming the expired parent
    with pytest.raises(InvalidParentError) as info:
        world.reviewer.accept(m1)
    assert "'E1'" in str(info.value)
    assert "expired" in str(info.value)
    assert world.reviewer.get(m1).status == Status.CANDIDATE


def test_registered_acceptance_check_refuses_with_its_reason(
    open_ledger: Callable[..., Ledger],
) -> None:
    # Given a ledger whose application requires inferences to cite something
    def inference_needs_a_parent(record: RecordView) -> str | None:
        if record.kind == Kind.INFERENCE and not record.parents:
            return "an inference must cite a parent"
        return None

    led = open_ledger(acceptance_checks=[inference_needs_a_parent])
    admin = led.admin()
    admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read"])
    agent = led.authenticate(admin.issue_token("agent-1"))
    reviewer = led.authenticate(admin.issue_token("reviewer"))
    bare = agent.propose(scope=SCOPE, claim_key=CLAIM, value=True, kind=Kind.INFERENCE, id="M1")
    position, digest = led.position, led.views_digest()

    # When the bare inference is accepted, the check refuses it with its reason
    with pytest.raises(AcceptanceCheckError) as info:
        reviewer.accept(bare)
    assert "an inference must cite a parent" in str(info.value)
    assert "'M1'" in str(info.value)
    assert "inference_needs_a_parent" in str(info.value)

    # Then nothing changed
    assert (led.position, led.views_digest()) == (position, digest)
    assert reviewer.get(bare).status == Status.CANDIDATE

    # And a record the check passes is accepted
    e1 = agent.capture(scope=SCOPE, uri="https://docs.test/e1", content=b"e1", id="E1")
    reviewer.accept(e1)
    m2 = agent.propose(
        scope=SCOPE, claim_key=CLAIM, value=True, kind=Kind.INFERENCE, parents=[e1], id="M2"
    )
    reviewer.accept(m2)
    assert reviewer.get(m2).status == Status.ACCEPTED


def test_rejected_candidate_is_never_usable(world: World) -> None:
    # Given a candidate
    m1 = world.agent.propose(scope=SCOPE, claim_key=CLAIM, value=True, kind=Kind.INFERENCE)

    # When the reviewer rejects it with a reason
    world.reviewer.reject(m1, reason="no source given")

    # Then it is REJECTED and INVALID, reads are MISSING and explain gives the reason
    view = world.reviewer.get(m1)
    assert view.status == Status.REJECTED
    assert view.validity == Validity.INVALID
    assert view.reason == "no source given"
    assert world.agent.read(SCOPE, CLAIM).outcome == Outcome.MISSING
    (entry,) = world.agent.explain(SCOPE, CLAIM).entries
    assert entry.reasons == ("rejected: no source given",)
    assert event_types(world.reviewer, m1) == ["Proposed", "Rejected"]


# -- revocation -------------------------------------------------------------------


def test_revoking_evidence_marks_every_descendant_of_a_deep_chain_stale(world: World) -> None:
    # Given evidence E1 and a chain of 30 inferences, each built on the previous
    e1 = evidence(world, "E1")
    chain = []
    parent = e1
    for i in range(1, 31):
        parent = accepted(world, f"M{i}", parents=[parent], claim_key=f"step.{i}")
        chain.append(parent)

    # When the evidence is revoked
    rev = world.reviewer.revoke(e1, reason="doc changed")

    # Then the root is REVOKED and all 30 descendants are STALE, caused by E1
    assert rev.root == e1
    assert rev.affected == (e1, *chain)
    assert rev.stale == tuple(chain)
    # (the position is the Revoked event's: the markings follow it)
    assert rev.position == world.ledger.position - len(chain)
    assert world.reviewer.get(e1).status == Status.REVOKED
    for rid in chain:
        view = world.reviewer.get(rid)
        assert view.status == Status.STALE, rid
        assert view.cause == e1
        assert view.reason == "doc changed"

    # And nothing along the chain is handed on any more
    assert world.agent.read(SCOPE, "step.30").outcome == Outcome.MISSING
    (entry,) = world.agent.explain(SCOPE, "step.30").entries
    assert entry.reasons == ("stale because E1 was revoked: doc changed",)


def test_revoking_evidence_under_a_diamond_marks_the_join_once(world: World) -> None:
    # Given E1 -> A, E1 -> B and A + B -> C
    e1 = evidence(world, "E1")
    a = accepted(world, "A", parents=[e1], claim_key="a")
    b = accepted(world, "B", parents=[e1], claim_key="b")
    c = accepted(world, "C", parents=[a, b], claim_key="c")
    unrelated = accepted(world, "U", claim_key="u")

    # When E1 is revoked
    rev = world.reviewer.revoke(e1, reason="retracted")

    # Then the affected set is exactly the root and its three descendants, no repeats
    assert len(rev.affected) == 4
    assert set(rev.affected) == {e1, a, b, c}
    assert rev.affected[0] == e1
    assert sorted(rev.stale) == sorted([a, b, c])

    # And C was marked stale exactly once; the unrelated record is untouched
    assert event_types(world.reviewer, c).count("MarkedStale") == 1
    assert statuses(world.reviewer, a, b, c, unrelated) == {
        a: Status.STALE,
        b: Status.STALE,
        c: Status.STALE,
        unrelated: Status.ACCEPTED,
    }


def test_revocation_skips_descendants_already_rejected(world: World) -> None:
    # Given E1 with one accepted child and one rejected child
    e1 = evidence(world, "E1")
    good = accepted(world, "GOOD", parents=[e1], claim_key="good")
    bad = world.agent.propose(
        scope=SCOPE, claim_key="bad", value=1, kind=Kind.INFERENCE, parents=[e1], id="BAD"
    )
    world.reviewer.reject(bad, reason="sloppy")

    # When E1 is revoked
    rev = world.reviewer.revoke(e1, reason="doc changed")

    # Then the rejected child is neither affected nor re-marked
    assert rev.affected == (e1, good)
    assert rev.stale == (good,)
    assert world.reviewer.get(bad).status == Status.REJECTED
    assert event_types(world.reviewer, bad) == ["Proposed", "Rejected"]


def test_revocation_follows_observed_dependencies(world: World) -> None:
    # Given a record proposed in a run that read E1 without declaring it
    e1 = evidence(world, "E1", claim_key="source.doc")
    with world.agent.run("task-1") as run:
        assert run.read(SCOPE, "source.doc").outcome == Outcome.FOUND
        m1 = run.propose(scope=SCOPE, claim_key=CLAIM, value=True, kind=Kind.INFERENCE, id="M1")
    world.reviewer.accept(m1)
    view = world.reviewer.get(m1)
    assert view.parents == ()
    assert view.observed == (e1,)
    assert world.reviewer.audit(m1).undeclared == (e1,)

    # When E1 is revoked
    rev = world.reviewer.revoke(e1, reason="doc changed")

    # Then the observed edge is followed too
    assert rev.stale == (m1,)
    assert world.reviewer.get(m1).status == Status.STALE


# -- the eligibility chain: time ------------------------------------------------------


def test_expired_grandparent_makes_grandchild_missing(world: World, clock: Clock) -> None:
    # Given E1 (expires in a day) -> M1 -> R1, all accepted without their own expiry
    t0 = clock.now
    expiry = t0 + timedelta(days=1)
    e1 = evidence(world, "E1", expires=expiry)
    m1 = accepted(world, "M1", parents=[e1], claim_key="m")
    r1 = accepted(world, "R1", parents=[m1], kind=Kind.REPORT)
    view = world.agent.get(r1)
    assert view.expires is None
    assert view.effective_expires == expiry
    assert view.expiry_source == e1

    # Then before the expiry the grandchild is found, also when asked with at=
    assert world.agent.read(SCOPE, CLAIM).outcome == Outcome.FOUND
    assert world.agent.read(SCOPE, CLAIM, at=t0 + timedelta(hours=23)).outcome == Outcome.FOUND
    # and asking about an instant after it already says MISSING
    assert world.agent.read(SCOPE, CLAIM, at=t0 + timedelta(days=2)).outcome == Outcome.MISSING

    # When time passes the expiry
    clock.advance(days=2)

    # Then the grandchild is MISSING and explain names the ancestor and its expiry
    assert world.agent.read(SCOPE, CLAIM).outcome == Outcome.MISSING
    (entry,) = world.agent.explain(SCOPE, CLAIM).entries
    assert entry.record.id == r1
    assert not entry.usable
    assert entry.reasons == (f"ancestor E1 expired at {expiry.isoformat()}",)
    assert world.agent.get(r1).validity == Validity.NEEDS_REVALIDATION
    # while the status is unchanged: expiry is not a revocation
    assert world.agent.get(r1).status == Status.ACCEPTED


def test_expiry_exactly_at_the_read_instant_is_unusable(world: World, clock: Clock) -> None:
    # Given a fact that expires at T, given in a non-UTC offset
    expires = (clock.now + timedelta(hours=1)).astimezone(timezone(timedelta(hours=5, minutes=30)))
    f1 = accepted(world, "F1", kind=Kind.FACT, expires=expires)
    assert world.agent.get(f1).expires == expires

    # Then it is usable strictly before T and not at T
    just_before = world.agent.read(SCOPE, CLAIM, at=expires - timedelta(microseconds=1))
    assert just_before.outcome == Outcome.FOUND
    assert world.agent.read(SCOPE, CLAIM, at=expires).outcome == Outcome.MISSING
    (entry,) = world.agent.explain(SCOPE, CLAIM, at=expires).entries
    assert entry.reasons == (f"expired at {expires.astimezone(UTC).isoformat()}",)


# -- the eligibility chain: applicability, kinds, conflict ------------------------------


def test_conditions_must_be_matched_by_the_context(world: World) -> None:
    # Given a fact that only applies to API v2
    f1 = accepted(world, "F1", kind=Kind.FACT, conditions={"api_version": "v2"})
    assert world.agent.get(f1).conditions == {"api_version": "v2"}

    # Then a v2 context finds it
    found = world.agent.read(SCOPE, CLAIM, context={"api_version": "v2", "region": "eu"})
    assert found.outcome == Outcome.FOUND
    assert found.records[0].conditions == {"api_version": "v2"}

    # And a v1 context or no context does not, with the condition named
    assert world.agent.read(SCOPE, CLAIM, context={"api_version": "v1"}).outcome == Outcome.MISSING
    assert world.agent.read(SCOPE, CLAIM).outcome == Outcome.MISSING
    (entry,) = world.agent.explain(SCOPE, CLAIM, context={"api_version": "v1"}).entries
    assert len(entry.reasons) == 1
    assert "api_version" in entry.reasons[0]
    assert "v1" in entry.reasons[0]


def test_kinds_filter_limits_the_read_to_those_kinds(world: World) -> None:
    # Given a fact and a plan answering the same claim differently
    fact = accepted(world, "F1", kind=Kind.FACT, value="yes")
    plan = accepted(world, "P1", kind=Kind.PLAN, value="later")

    # Then unfiltered they conflict, filtered each is found alone
    assert world.agent.read(SCOPE, CLAIM).outcome == Outcome.CONFLICT
    only_facts = world.agent.read(SCOPE, CLAIM, kinds=[Kind.FACT])
    assert only_facts.outcome == Outcome.FOUND
    assert [r.id for r in only_facts.records] == [fact]
    only_plans = world.agent.read(SCOPE, CLAIM, kinds=["plan"])
    assert [r.id for r in only_plans.records] == [plan]
    assert world.agent.read(SCOPE, CLAIM, kinds=[Kind.REPORT]).outcome == Outcome.MISSING


def test_kinds_given_as_the_same_tuple_again_answer_alike_and_bad_ones_are_refused(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store reads with the same kinds tuple every time; what it asks for is
    # checked once, and a lookalike string cannot stand in for another kind.
    monkeypatch.setattr(reads, "_WANTED", {})  # what earlier tests asked for is not kept
    fact = accepted(world, "F1", kind=Kind.FACT, value="yes")
    plan = accepted(world, "P1", kind=Kind.PLAN, value="later")

    class Lookalike(str):
        # hashes and compares as "fact" would: kept in a cache, it would answer for it
        def __hash__(self) -> int:
            return hash("fact")

        def __eq__(self, other: object) -> bool:
            return True

    looks = (Lookalike("plan"),)
    assert [r.id for r in world.agent.read(SCOPE, CLAIM, kinds=looks).records] == [plan]
    for _ in range(2):
        assert [r.id for r in world.agent.read(SCOPE, CLAIM, kinds=("fact",)).records] == [fact]
        assert [r.id for r in world.agent.read(SCOPE, CLAIM, kinds=(Kind.FACT,)).records] == [fact]
        assert [r.id for r in world.agent.read(SCOPE, CLAIM, kinds=("plan",)).records] == [plan]
        with pytest.raises(InvalidKindError, match="'nope'"):
            world.agent.read(SCOPE, CLAIM, kinds=("nope",))


def test_two_accepted_records_disagreeing_are_a_conflict_with_both(world: World) -> None:
    # Given two accepted facts with opposite values
    yes = accepted(world, "F-YES", kind=Kind.FACT, value=True)
    no = accepted(world, "F-NO", kind=Kind.FACT, value=False)

    # Then the read is a CONFLICT holding both: no last-write-wins
    result = world.agent.read(SCOPE, CLAIM)
    assert result.outcome == Outcome.CONFLICT
    assert {r.id: r.value for r in result.records} == {yes: True, no: False}
    assert result.value is None


def test_two_accepted_records_agreeing_are_found(world: World) -> None:
    # Given two accepted facts with the same value (dict key order differing)
    a = accepted(world, "F1", kind=Kind.FACT, value={"max": 3, "backoff": "exp"})
    b = accepted(world, "F2", kind=Kind.FACT, value={"backoff": "exp", "max": 3})

    # Then the read is FOUND with both records and the agreed value
    result = world.agent.read(SCOPE, CLAIM)
    assert result.outcome == Outcome.FOUND
    assert sorted(r.id for r in result.records) == sorted([a, b])
    assert result.value == {"max": 3, "backoff": "exp"}


def test_kinds_are_never_merged(world: World) -> None:
    # Given a user constraint, external content and a model suggestion on one claim
    claim = "publish.auto"
    constraint = accepted(
        world, "UC1", kind=Kind.USER_CONSTRAINT, claim_key=claim, value="only after review"
    )
    site = evidence(world, "EV1", claim_key=claim, value="can auto-publish")
    guess = accepted(world, "INF1", kind=Kind.INFERENCE, claim_key=claim, value="auto is easier")

    # Then a reader sees three records, each with its own kind
    result = world.agent.read(SCOPE, claim)
    assert result.outcome == Outcome.CONFLICT
    assert {r.id: r.kind for r in result.records} == {
        constraint: Kind.USER_CONSTRAINT,
        site: Kind.EVIDENCE,
        guess: Kind.INFERENCE,
    }
    # and the evidence keeps what exactly was read
    ev = next(r for r in result.records if r.id == site)
    assert ev.evidence is not None
    assert ev.evidence["uri"] == "https://docs.test/EV1"
    assert ev.evidence["content_hash"].startswith("sha256:")


# -- revalidation -----------------------------------------------------------------


def test_revalidate_is_refused_while_a_parent_is_still_revoked(world: World) -> None:
    # Given E1 -> M1 with E1 revoked
    e1 = evidence(world, "E1")
    m1 = accepted(world, "M1", parents=[e1])
    world.reviewer.revoke(e1, reason="doc changed")
    position = world.ledger.position

    # When M1 is revalidated on its old basis, it is refused naming E1
    with pytest.raises(InvalidParentError) as info:
        world.reviewer.revalidate(m1, note="looks fine")
    assert "'E1'" in str(info.value)
    assert "REVOKED" in str(info.value)

    # Then M1 stays STALE and nothing was written
    assert world.reviewer.get(m1).status == Status.STALE
    assert world.ledger.position == position


def test_revalidate_on_a_new_basis_leaves_descendants_stale(world: World) -> None:
    # Given E1 -> M1 -> R1 with E1 revoked, and new evidence E2
    e1 = evidence(world, "E1")
    m1 = accepted(world, "M1", parents=[e1], claim_key="m")
    r1 = accepted(world, "R1", parents=[m1], kind=Kind.REPORT)
    world.reviewer.revoke(e1, reason="doc changed")
    e2 = evidence(world, "E2")

    # When M1 is revalidated on E2
    world.reviewer.revalidate(m1, note="re-checked against E2", parents=[e2])

    # Then M1 is ACCEPTED on the new basis, and R1 is still STALE
    m1_view = world.reviewer.get(m1)
    assert m1_view.status == Status.ACCEPTED
    assert m1_view.parents == (e2,)
    assert world.agent.read(SCOPE, "m").outcome == Outcome.FOUND
    assert world.reviewer.get(r1).status == Status.STALE
    assert world.agent.read(SCOPE, CLAIM).outcome == Outcome.MISSING

    # When R1 is revalidated itself (its parent M1 is usable again)
    world.reviewer.revalidate(r1, note="parent re-checked")

    # Then it is found again, and its history keeps the staleness
    assert world.reviewer.get(r1).status == Status.ACCEPTED
    assert world.agent.read(SCOPE, CLAIM).outcome == Outcome.FOUND
    assert event_types(world.reviewer, r1) == ["Proposed", "Accepted", "MarkedStale", "Revalidated"]

    # And revoking the new basis reaches M1 and R1 through the new edge
    rev = world.reviewer.revoke(e2, reason="E2 wrong too")
    assert rev.affected == (e2, m1, r1)


def test_revalidate_onto_own_descendant_is_refused_as_a_cycle(world: World) -> None:
    # Given E1 -> M1 -> R1 with E1 revoked
    e1 = evidence(world, "E1")
    m1 = accepted(world, "M1", parents=[e1], claim_key="m")
    r1 = accepted(world, "R1", parents=[m1])
    world.reviewer.revoke(e1, reason="doc changed")
    position = world.ledger.position

    # When M1 is revalidated with its own descendant as the new basis
    with pytest.raises(CycleError) as info:
        world.reviewer.revalidate(m1, note="circular", parents=[r1])

    # Then it is refused naming the descendant, and nothing changed
    assert "'R1'" in str(info.value)
    assert world.ledger.position == position
    assert world.reviewer.get(m1).parents == (e1,)
    assert world.reviewer.get(m1).status == Status.STALE


# -- delivery and validity ----------------------------------------------------------


def test_delivered_report_needs_revalidation_after_upstream_revocation(world: World) -> None:
    # Given E1 -> M1 -> R1 (a report) delivered to ops
    e1 = evidence(world, "E1")
    m1 = accepted(world, "M1", parents=[e1], claim_key="m")
    r1 = accepted(world, "R1", parents=[m1], kind=Kind.REPORT)
    d1 = world.reviewer.deliver(r1, recipient="ops@x.test", channel="email")
    assert world.reviewer.get(r1).validity == Validity.VALID
    assert world.reviewer.corrections_due() == ()

    # When the upstream evidence is revoked
    world.reviewer.revoke(e1, reason="doc changed")

    # Then the report is STALE / NEEDS_REVALIDATION and still delivered
    view = world.reviewer.get(r1)
    assert view.status == Status.STALE
    assert view.validity == Validity.NEEDS_REVALIDATION
    assert [d.delivery_id for d in view.deliveries] == [d1]
    assert view.deliveries[0].state == "DELIVERED"
    assert view.deliveries[0].recipient == "ops@x.test"
    (due,) = world.reviewer.corrections_due()
    assert due.delivery.delivery_id == d1
    assert due.validity == Validity.NEEDS_REVALIDATION
    assert due.cause == e1

    # When a correction is issued, the delivery is no longer due but still delivered
    c1 = world.reviewer.issue_correction(d1, note="upstream doc changed")
    assert world.reviewer.corrections_due() == ()
    (delivery,) = world.reviewer.get(r1).deliveries
    assert delivery.state == "DELIVERED"
    assert [c.correction_id for c in delivery.corrections] == [c1]

    # When the report itself is revoked
    world.reviewer.revoke(r1, reason="report withdrawn")

    # Then it is INVALID, and the delivery is still history
    view = world.reviewer.get(r1)
    assert view.status == Status.REVOKED
    assert view.validity == Validity.INVALID
    assert [d.delivery_id for d in view.deliveries] == [d1]


def test_each_delivery_shows_its_own_corrections_now_and_as_of_a_position(
    world: World,
) -> None:
    """A record delivered three times, two of the deliveries corrected (one
    twice): ``get`` gives each delivery its own corrections in the order they
    were issued, as of a position only the deliveries and corrections made by
    then, and ``corrections_due`` the delivery no correction answered."""
    e1 = evidence(world, "E1")
    r1 = accepted(world, "R1", parents=[e1], kind=Kind.REPORT)
    d1, d2 = (world.reviewer.deliver(r1, recipient=f"{n}@x.test") for n in "ab")
    two_delivered = world.ledger.position
    d3 = world.reviewer.deliver(r1, recipient="c@x.test")
    world.reviewer.revoke(e1, reason="doc changed")
    assert [x.delivery.delivery_id for x in world.reviewer.corrections_due()] == [d1, d2, d3]
    c3 = world.reviewer.issue_correction(d3, note="first for c")
    c1 = world.reviewer.issue_correction(d1, note="for a")
    (due,) = world.reviewer.corrections_due()  # each delivery answered by its own only
    assert due.delivery.delivery_id == d2 and due.delivery.corrections == ()
    between = world.ledger.position
    c3b = world.reviewer.issue_correction(d3, note="second for c")

    def corrections(session: Session) -> dict[str, list[str]]:
        view = session.get(r1)
        return {d.delivery_id: [c.correction_id for c in d.corrections] for d in view.deliveries}

    assert corrections(world.reviewer) == {d1: [c1], d2: [], d3: [c3, c3b]}
    assert list(corrections(world.reviewer)) == [d1, d2, d3]
    then = world.reviewer.as_of(position=between)
    assert corrections(then) == {d1: [c1], d2: [], d3: [c3]}
    assert corrections(world.reviewer.as_of(position=two_delivered)) == {d1: [], d2: []}


def test_corrections_due_of_one_record_are_its_owed_deliveries_now_and_as_of_a_position(
    world: World,
) -> None:
    """``corrections_due(record_id)``: the deliveries of that record which owe a
    correction, as the whole outbox lists them; as of a position, those owed
    then; a record unknown, hidden or where the caller does not deliver is
    refused as every command refuses it."""
    e1, e2 = evidence(world, "E1"), evidence(world, "E2", claim_key="source:2")
    r1 = accepted(world, "R1", parents=[e1], kind=Kind.REPORT)
    r2 = accepted(world, "R2", parents=[e2], claim_key="other", kind=Kind.REPORT)
    d1a, d2, d1b = (
        world.reviewer.deliver(r, recipient=f"{n}@x.test")
        for r, n in ((r1, "a"), (r2, "b"), (r1, "c"))
    )
    assert world.reviewer.corrections_due(r1) == ()
    delivered = world.ledger.position
    world.reviewer.revoke(e1, reason="doc changed")
    world.reviewer.revoke(e2, reason="doc changed too")
    revoked = world.ledger.position
    every = world.reviewer.corrections_due()
    assert [x.delivery.delivery_id for x in every] == [d1a, d2, d1b]

    # Of one record: exactly its owed deliveries, as the whole list gives them
    assert world.reviewer.corrections_due(r1) == tuple(
        x for x in every if x.delivery.record_id == r1
    )
    assert [x.delivery.delivery_id for x in world.reviewer.corrections_due(r2)] == [d2]
    world.reviewer.issue_correction(d1a, note="upstream doc changed")
    assert [x.delivery.delivery_id for x in world.reviewer.corrections_due(r1)] == [d1b]
    # As of a position: before the revocations nothing was owed, after them both
    assert world.reviewer.as_of(position=delivered).corrections_due(r1) == ()
    then = world.reviewer.as_of(position=revoked).corrections_due(r1)
    assert [x.delivery.delivery_id for x in then] == [d1a, d1b]

    # A record unknown, or hidden from the caller, is refused alike; so is one in
    # a scope where the caller neither delivers nor audits
    with pytest.raises(UnknownRecordError, match="'nope' is unknown or not visible"):
        world.reviewer.corrections_due("nope")
    with pytest.raises(UnknownRecordError, match="'R1' is unknown or not visible"):
        world.outsider.corrections_due(r1)
    with pytest.raises(
        AccessDeniedError, match="lacks role 'deliver' or 'audit' in scope 'proj-a'"
    ):
        world.agent.corrections_due(r1)


# -- audit and as-of ------------------------------------------------------------------


def test_audit_of_a_revoked_record_shows_its_events_and_reason(world: World) -> None:
    # Given evidence E1 accepted, a child built on it, then E1 revoked
    e1 = evidence(world, "E1")
    m1 = accepted(world, "M1", parents=[e1])
    rev = world.reviewer.revoke(e1, reason="doc changed")

    # Then the revoked record's whole history is there, with who and why
    trail = world.reviewer.audit(e1)
    assert trail.record.status == Status.REVOKED
    assert [e.type for e in trail.events] == ["Proposed", "Accepted", "Revoked"]
    proposed, acc, revoked = trail.events
    assert proposed.actor == "agent-1"
    assert acc.actor == "reviewer"
    assert revoked.actor == "reviewer"
    assert revoked.details["reason"] == "doc changed"
    assert [e.position for e in trail.events] == sorted(e.position for e in trail.events)

    # And the child's history records the cause of its staleness, in the same step
    marked = world.reviewer.audit(m1).events[-1]
    assert marked.type == "MarkedStale"
    assert (revoked.position, marked.position) == (rev.position, rev.position + 1)
    assert marked.details["cause"] == e1
    assert marked.details["reason"] == "doc changed"


def test_as_of_answers_as_the_ledger_did_at_that_position(world: World) -> None:
    # Given E1 -> M1 accepted, remembered at position p, then E1 revoked
    e1 = evidence(world, "E1")
    m1 = accepted(world, "M1", parents=[e1])
    p = world.ledger.position
    world.reviewer.revoke(e1, reason="doc changed")
    assert world.agent.read(SCOPE, CLAIM).outcome == Outcome.MISSING

    # Then the as-of session at p still finds M1 and sees it ACCEPTED
    then = world.reviewer.as_of(position=p)
    assert then.read_only
    found = then.read(SCOPE, CLAIM)
    assert found.outcome == Outcome.FOUND
    assert [r.id for r in found.records] == [m1]
    assert then.get(m1).status == Status.ACCEPTED
    assert [e.type for e in then.audit(e1).events] == ["Proposed", "Accepted"]

    # And one at the newest position agrees with now
    now = world.reviewer.as_of(position=world.ledger.position)
    assert now.read(SCOPE, CLAIM).outcome == Outcome.MISSING
    assert now.get(m1).status == Status.STALE


def test_as_of_a_position_is_made_at_the_time_of_the_event_there_after_the_clock_stepped_back(
    world: World,
) -> None:
    # Given F1 accepted until 10 minutes on, then a writer's clock 20 minutes
    # ahead, then set back to 5 minutes on before the next write at position p
    start = world.clock.now
    world.agent.propose(
        scope=SCOPE, claim_key="k", value=1, kind=Kind.FACT, id="F1",
        expires=start + timedelta(minutes=10),
    )  # fmt: skip
    world.reviewer.accept("F1")
    world.clock.advance(minutes=20)
    world.agent.propose(scope=SCOPE, claim_key="x", value=0, kind=Kind.FACT, id="X")
    world.clock.now = start + timedelta(minutes=5)
    world.agent.propose(scope=SCOPE, claim_key="y", value=0, kind=Kind.FACT, id="Y")
    p = world.ledger.position
    live = world.reviewer.read(SCOPE, "k")
    assert live.outcome == Outcome.FOUND

    # Then the as-of read at p answers as the live read just after it did: at the
    # time of the event at p, when F1 had not expired
    then = world.reviewer.as_of(position=p)
    past = then.read(SCOPE, "k")
    assert (past.outcome, past.at) == (Outcome.FOUND, live.at)
    assert then.get("F1").validity == Validity.VALID
    # while the as-of read at X's position, 20 minutes on, found F1 expired
    at_x = world.reviewer.as_of(position=p - 1)
    assert at_x.read(SCOPE, "k").outcome == Outcome.MISSING


def test_as_of_position_0_is_the_empty_ledger_at_the_time_of_its_first_event(
    world: World,
) -> None:
    # Given a ledger whose first event (a grant) was written, then the clock moved on
    first = world.reviewer.as_of(position=1).read(SCOPE, CLAIM).at
    world.clock.advance(minutes=30)
    evidence(world, "E1")

    # Then the read before everything finds nothing, made when the ledger was
    # still empty: the time of its first event, not 1970
    before = world.reviewer.as_of(position=0).read(SCOPE, CLAIM)
    assert (before.outcome, before.at) == (Outcome.MISSING, first)
    assert before.at.year > 1970


WRITES: dict[str, Callable[[Session], object]] = {
    "propose": lambda s: s.propose(scope=SCOPE, claim_key="x", value=1, kind=Kind.FACT),
    "capture": lambda s: s.capture(scope=SCOPE, uri="https://docs.test/x", content=b"x"),
    "accept": lambda s: s.accept("C1"),
    "reject": lambda s: s.reject("C1", reason="no"),
    "revoke": lambda s: s.revoke("E1", reason="no"),
    "revalidate": lambda s: s.revalidate("E1"),
    "deliver": lambda s: s.deliver("E1", recipient="ops@x.test"),
    "issue_correction": lambda s: s.issue_correction("d-x", note="fix"),
    "run": lambda s: s.run("task-x"),
}


@pytest.mark.parametrize("command", sorted(WRITES))
def test_every_write_on_an_as_of_session_is_read_only(world: World, command: str) -> None:
    # Given an as-of session over a small ledger
    evidence(world, "E1")
    world.agent.propose(scope=SCOPE, claim_key="c", value=1, kind=Kind.FACT, id="C1")
    then = world.reviewer.as_of(position=world.ledger.position)
    position, digest = world.ledger.position, world.ledger.views_digest()

    # When it is asked to write, it refuses naming the command
    with pytest.raises(ReadOnlyError) as info:
        WRITES[command](then)
    assert command in str(info.value)

    # Then nothing changed
    assert (world.ledger.position, world.ledger.views_digest()) == (position, digest)


# -- persistence --------------------------------------------------------------------


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_reopening_an_sqlite_file_keeps_everything(open_ledger: Callable[..., Ledger]) -> None:
    # Given a ledger file with principals, records in every status and a delivery
    first = open_ledger()
    admin = first.admin()
    admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read", "audit", "deliver"])
    agent_token = admin.issue_token("agent-1")
    reviewer_token = admin.issue_token("reviewer")
    agent = first.authenticate(agent_token)
    reviewer = first.authenticate(reviewer_token)
    e1 = agent.capture(scope=SCOPE, uri="https://docs.test/e1", content=b"e1", id="E1")
    reviewer.accept(e1)
    m1 = agent.propose(scope=SCOPE, claim_key="m", value=1, kind=Kind.FACT, parents=[e1], id="M1")
    reviewer.accept(m1)
    r1 = agent.propose(scope=SCOPE, claim_key=CLAIM, value=2, kind=Kind.REPORT, parents=[m1])
    reviewer.accept(r1)
    d1 = reviewer.deliver(r1, recipient="ops@x.test")
    f1 = agent.propose(scope=SCOPE, claim_key="f", value=3, kind=Kind.FACT, id="F1")
    reviewer.accept(f1)
    x1 = agent.propose(scope=SCOPE, claim_key="x", value=4, kind=Kind.FACT, id="X1")
    reviewer.reject(x1, reason="nope")
    c1 = agent.propose(scope=SCOPE, claim_key="c", value=5, kind=Kind.FACT, id="C1")
    reviewer.revoke(e1, reason="doc changed")
    expected = statuses(reviewer, e1, m1, r1, f1, x1, c1)
    position, digest = first.position, first.views_digest()
    first.close()

    # When the file is opened again
    second = open_ledger()

    # Then the position, views, statuses, deliveries and tokens are all still there
    assert second.position == position
    assert second.views_digest() == digest
    reviewer2 = second.authenticate(reviewer_token)
    agent2 = second.authenticate(agent_token)
    assert statuses(reviewer2, e1, m1, r1, f1, x1, c1) == expected
    assert expected == {
        e1: Status.REVOKED,
        m1: Status.STALE,
        r1: Status.STALE,
        f1: Status.ACCEPTED,
        x1: Status.REJECTED,
        c1: Status.CANDIDATE,
    }
    assert [d.delivery_id for d in reviewer2.get(r1).deliveries] == [d1]
    assert agent2.read(SCOPE, "f").value == 3
    assert [e.type for e in reviewer2.audit(e1).events] == ["Proposed", "Accepted", "Revoked"]

    # And the reopened ledger keeps writing after the old position
    reviewer2.accept(c1)
    assert second.position == position + 1


# -- access -------------------------------------------------------------------------


def test_memory_of_one_project_is_missing_under_another_scope(world: World) -> None:
    # Given a fact in proj-a, and the agent holding read in both proj-a and proj-b
    f1 = accepted(world, "F1", kind=Kind.FACT, scope="proj-a")
    assert world.agent.read("proj-a", CLAIM).outcome == Outcome.FOUND

    # Then the same claim read under proj-b is MISSING
    other = world.agent.read("proj-b", CLAIM)
    assert other.outcome == Outcome.MISSING
    assert other.records == ()
    assert world.agent.explain("proj-b", CLAIM).entries == ()

    # And a principal with no grant in proj-a cannot see the record at all
    with pytest.raises(UnknownRecordError) as info:
        world.outsider.get(f1)
    assert "'F1'" in str(info.value)


def test_reading_a_scope_without_a_grant_is_denied(world: World) -> None:
    # Given a fact in proj-a and an outsider who only holds read in proj-b
    accepted(world, "F1", kind=Kind.FACT, scope="proj-a")

    # When the outsider reads proj-a (a scope string is never authorisation)
    with pytest.raises(AccessDeniedError) as info:
        world.outsider.read("proj-a", CLAIM)
    with pytest.raises(AccessDeniedError):
        world.outsider.explain("proj-a", CLAIM)

    # Then the refusal names the principal, the role and the scope
    message = str(info.value)
    assert "'outsider'" in message
    assert "'read'" in message
    assert "'proj-a'" in message
    # while its own scope answers normally
    assert world.outsider.read("proj-b", CLAIM).outcome == Outcome.MISSING


def test_revocation_is_one_atomic_step_at_one_position(world: World) -> None:
    # Given E1 with two children
    e1 = evidence(world, "E1")
    a = accepted(world, "A", parents=[e1], claim_key="a")
    b = accepted(world, "B", parents=[e1], claim_key="b")
    before = world.ledger.position

    # When E1 is revoked
    rev = world.reviewer.revoke(e1, reason="doc changed")

    # Then the root event and both markings were appended together
    assert world.ledger.position == before + 3
    assert rev.position == before + 1  # the Revoked event; the markings follow
    positions = {world.reviewer.audit(rid).events[-1].position for rid in (e1, a, b)}
    assert positions == {before + 1, before + 2, before + 3}
    # and an as-of read just before it sees none of them, one at it sees all
    just_before = world.reviewer.as_of(position=rev.position - 1)
    assert set(statuses(just_before, e1, a, b).values()) == {Status.ACCEPTED}
    at_it = world.reviewer.as_of(position=rev.position)
    assert statuses(at_it, e1, a, b) == {e1: Status.REVOKED, a: Status.STALE, b: Status.STALE}


def test_reads_on_many_threads_follow_writes_made_anywhere(world: World) -> None:
    """Reads may run on a connection of their own per thread: each thread's read
    after a command on another thread has returned sees that command."""
    from concurrent.futures import ThreadPoolExecutor

    e1 = evidence(world, "e1")
    accepted(world, "c1", parents=[e1])

    def outcome(_: int) -> Outcome:
        return world.agent.read(SCOPE, CLAIM).outcome

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert set(pool.map(outcome, range(40))) == {Outcome.FOUND}
        world.reviewer.revoke(e1, reason="retracted")
        assert set(pool.map(outcome, range(40))) == {Outcome.MISSING}
        accepted(world, "c2", value=False)
        assert set(pool.map(outcome, range(40))) == {Outcome.FOUND}
    world.ledger.close()
    assert world.ledger.engine.recorder.open_readers() == 0


def test_a_thread_s_reading_connection_is_closed_when_the_thread_ends(world: World) -> None:
    import threading

    accepted(world, "c1")
    before = world.ledger.engine.recorder.open_readers()  # this thread's own, if any
    seen: list[Outcome] = []
    grown: list[int] = []

    def read() -> None:
        seen.append(world.agent.read(SCOPE, CLAIM).outcome)
        grown.append(world.ledger.engine.recorder.open_readers() - before)

    reader = threading.Thread(target=read)
    reader.start()
    reader.join()
    assert seen == [Outcome.FOUND]
    assert grown == ([1] if world.ledger.backend == "sqlite" else [0])
    assert world.ledger.engine.recorder.open_readers() == before


def test_a_read_begun_inside_another_on_the_same_thread_sees_the_newest_state(
    world: World,
) -> None:
    """A read transaction left open (a snapshot) does not leak into later reads on
    the same thread, nor stop a nested one from starting."""
    if world.ledger.backend == "memory":
        pytest.skip("memory: serialises readers and writers, so a write waits for the read")
    e1 = evidence(world, "e1")
    accepted(world, "c1", parents=[e1])
    status = "SELECT status FROM {t}pl_records WHERE record_id=? AND to_pos IS NULL"
    q = world.ledger.engine.dialect.q(status)
    with world.ledger.engine.reading() as outer:
        outer.execute(q, ("e1",))
        assert outer.fetchone()["status"] == Status.ACCEPTED
        world.reviewer.revoke(e1, reason="retracted")
        assert world.agent.read(SCOPE, CLAIM).outcome == Outcome.MISSING
        with world.ledger.engine.reading() as inner:
            inner.execute(q, ("e1",))
            assert inner.fetchone()["status"] == Status.REVOKED
        outer.execute(q, ("e1",))
        assert outer.fetchone()["status"] == Status.ACCEPTED  # its own snapshot


def test_read_shows_each_record_as_get_and_explain_show_it(world: World, clock: Clock) -> None:
    """However a record is shaped, ``read`` shows the view ``get`` gives and keeps
    exactly the records ``explain`` calls usable."""
    agent, reviewer = world.agent, world.reviewer
    evidence(world, "E1", claim_key="doc.e1")
    accepted(world, "plain", claim_key="k.plain", kind=Kind.FACT)
    agent.propose(SCOPE, "k.noted", {"v": [1, 2]}, Kind.FACT, id="noted")
    reviewer.accept("noted", note="checked by hand")
    accepted(world, "child", parents=["E1"], claim_key="k.child")
    accepted(world, "soon", claim_key="k.soon", expires=clock.now + timedelta(hours=1))
    accepted(world, "cond", claim_key="k.cond", conditions={"env": "prod"})
    accepted(world, "old", claim_key="k.super", kind=Kind.FACT)
    accepted(world, "new", claim_key="k.super", kind=Kind.FACT, supersedes="old")
    agent.propose(SCOPE, "k.cand", 1, Kind.FACT, id="cand")
    accepted(world, "gone", claim_key="k.gone", kind=Kind.FACT)
    reviewer.revoke("gone", reason="wrong")
    accepted(world, "plan", claim_key="k.plain", kind=Kind.PLAN, value=2)
    claims = ["doc.e1", "k.plain", "k.noted", "k.child", "k.soon", "k.cond", "k.super"]
    claims += ["k.cand", "k.gone"]
    asks: list[dict[str, Any]] = [{}, {"context": {"env": "prod"}}, {"kinds": [Kind.FACT]}]
    for claim in claims:
        for ask in asks:
            result, why = reviewer.read(SCOPE, claim, **ask), reviewer.explain(SCOPE, claim, **ask)
            usable = tuple(e.record for e in why.entries if e.usable)
            assert result.records == usable, (claim, ask)
            assert result.outcome == why.outcome, (claim, ask)
            for entry in why.entries:
                assert entry.record == reviewer.get(entry.record.id), (claim, ask)
                valid = entry.record.validity == Validity.VALID
                assert entry.usable == (valid and not entry.reasons), (claim, ask)
    assert [r.id for r in reviewer.read(SCOPE, "k.plain").records] == ["plain", "plan"]
    assert [r.id for r in reviewer.read(SCOPE, "k.plain", kinds=["fact"]).records] == ["plain"]
    assert reviewer.read(SCOPE, "k.noted").records[0].reason == "checked by hand"
    assert reviewer.read(SCOPE, "k.noted").value == {"v": [1, 2]}
    assert reviewer.read(SCOPE, "k.cond").outcome == Outcome.MISSING
    assert [r.id for r in reviewer.read(SCOPE, "k.super").records] == ["new"]
    assert reviewer.read(SCOPE, "k.super").records[0].supersedes == "old"
    clock.advance(hours=2)
    assert reviewer.read(SCOPE, "k.soon").outcome == Outcome.MISSING


def _claim_history(world: World) -> tuple[str, str, int]:
    """A claim whose history holds every unusable status and a delivery: v1
    delivered and then superseded by v2 (whose descendant goes STALE), v2
    accepted, a rejected proposal, a candidate, and a record made STALE by a
    revoked parent. Returns (the usable record, the claim, the log's position
    before that revocation)."""
    agent, reviewer = world.agent, world.reviewer
    claim = "k.history"
    v1 = accepted(world, "v1", claim_key=claim, kind=Kind.FACT)
    reviewer.deliver(v1, recipient="ops@x.test")
    accepted(world, "v1-child", parents=[v1], claim_key=claim, kind=Kind.FACT)
    v2 = accepted(world, "v2", claim_key=claim, kind=Kind.FACT, value=2, supersedes=v1)
    reviewer.reject(agent.propose(SCOPE, claim, 3, Kind.FACT, id="no"), reason="wrong")
    agent.propose(SCOPE, claim, 4, Kind.FACT, id="maybe")
    source = evidence(world, "src", claim_key="doc.src")
    accepted(world, "leaning", parents=[source], claim_key=claim, kind=Kind.FACT, value=2)
    before = world.ledger.position
    reviewer.revoke(source, reason="retracted")
    return v2, claim, before


def test_a_read_shows_a_new_version_as_get_does_beside_every_unusable_status(
    world: World,
) -> None:
    """A claim's superseded, delivered, stale, rejected and candidate records are
    never usable, so a read leaves them out; the version that supersedes shows
    as ``get`` and ``explain`` show it."""
    v2, claim, revoked_after = _claim_history(world)
    reviewer = world.reviewer
    why = reviewer.explain(SCOPE, claim)
    assert {e.record.id: e.record.status for e in why.entries} == {
        "v1": Status.SUPERSEDED,
        "v1-child": Status.STALE,
        "v2": Status.ACCEPTED,
        "no": Status.REJECTED,
        "maybe": Status.CANDIDATE,
        "leaning": Status.STALE,
    }
    for ask in ({}, {"kinds": [Kind.FACT]}, {"context": {"env": "prod"}}):
        result = reviewer.read(SCOPE, claim, **ask)
        assert result.outcome == Outcome.FOUND
        assert result.records == (reviewer.get(v2),)
        shown = reviewer.explain(SCOPE, claim, **ask).entries
        assert result.records == tuple(e.record for e in shown if e.usable)
    assert reviewer.read(SCOPE, claim).records[0].supersedes == "v1"
    assert reviewer.read(SCOPE, claim).value == 2
    now = reviewer.as_of(world.ledger.position)
    assert now.read(SCOPE, claim).records == (now.get(v2),)
    before = reviewer.as_of(revoked_after)  # before the source was revoked
    assert [r.id for r in before.read(SCOPE, claim).records] == ["v2", "leaning"]
    assert before.read(SCOPE, claim).outcome == Outcome.FOUND  # both say 2


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_read_runs_one_statement_whatever_the_claim_history(
    world: World, ledger_url: str
) -> None:
    """Only the claim's live records leave the database, found through an index
    of those alone, so its withdrawn versions are not even passed over; and the
    unusable ones (a delivered one among them) need no read transaction."""
    v2, claim, _ = _claim_history(world)
    reader = world.ledger.engine.query(lambda c: c.connection)
    statements: list[str] = []
    reader.set_trace_callback(statements.append)
    try:
        result = world.reviewer.read(SCOPE, claim)
    finally:
        reader.set_trace_callback(None)
    assert [r.id for r in result.records] == [v2]
    assert len(statements) == 1, statements
    plan = " ".join(str(step[3]) for step in reader.execute("EXPLAIN QUERY PLAN " + statements[0]))
    assert "USING INDEX pl_records_live" in plan, plan


def test_live_statuses_are_those_a_record_can_still_leave() -> None:
    # Live: every status a record can still leave (see rules.FINAL).
    assert set(LIVE_STATUSES) == {s.value for s in Status} - {s.value for s in rules.FINAL}
