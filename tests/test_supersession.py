"""Supersession: a new version of a claim replaces the old one instead of conflicting.

``propose(..., supersedes=OLD)``: when the new record is accepted, OLD becomes
SUPERSEDED (not usable; its view names ``superseded_by``) and OLD's descendants
become STALE with the cause "OLD superseded by NEW", in one transaction. Capturing
a URI again with other bytes supersedes the newest accepted capture of that URI.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ledger import Kind, Ledger, Outcome, Status, Validity
from ledger.errors import (
    InvalidInputError,
    InvalidKindError,
    InvalidParentError,
    InvalidTransitionError,
    LedgerError,
    UnknownRecordError,
)
from tests.conftest import World


def _accepted(world: World, rid: str, **fields: object) -> str:
    world.agent.propose(id=rid, **fields)  # type: ignore[arg-type]
    world.reviewer.accept(rid)
    return rid


def test_accepting_a_new_version_supersedes_the_old_and_marks_its_descendants_stale(
    world: World,
) -> None:
    agent, reviewer, led = world.agent, world.reviewer, world.ledger
    _accepted(world, "V1", scope="proj-a", claim_key="api.timeout", value=30, kind=Kind.FACT)
    _accepted(
        world,
        "P1",
        scope="proj-a",
        claim_key="plan.retry",
        value="wait 30s",
        kind=Kind.PLAN,
        parents=["V1"],
    )
    # Step 1: the new version is a candidate; the old one still answers.
    agent.propose(
        scope="proj-a", claim_key="api.timeout", value=60, kind=Kind.FACT, supersedes="V1", id="V2"
    )
    assert reviewer.get("V2").supersedes == "V1"
    read = agent.read(scope="proj-a", claim_key="api.timeout")
    assert (read.outcome, read.value) == (Outcome.FOUND, 30)
    before = led.position

    # Step 2: accepting it replaces V1 and flags what rested on V1, atomically.
    reviewer.accept("V2")
    read = agent.read(scope="proj-a", claim_key="api.timeout")
    assert (read.outcome, read.value, read.records[0].id) == (Outcome.FOUND, 60, "V2")
    v1 = reviewer.get("V1")
    assert (v1.status, v1.validity, v1.superseded_by) == (
        Status.SUPERSEDED,
        Validity.INVALID,
        "V2",
    )
    p1 = reviewer.get("P1")
    assert (p1.status, p1.cause) == (Status.STALE, "V1")
    why = reviewer.explain(scope="proj-a", claim_key="plan.retry").entries[0].reasons
    assert why == ("stale because V1 was superseded by V2",)
    assert [e.type for e in reviewer.audit("V1").events] == ["Proposed", "Accepted", "Superseded"]
    assert [e.type for e in reviewer.audit("P1").events][-1] == "MarkedStale"
    # The three changes are one transaction: no position shows V2 accepted alone.
    then = reviewer.as_of(position=before + 1)
    assert then.get("V1").status == Status.SUPERSEDED
    assert then.get("P1").status == Status.STALE
    # And history keeps the old answer.
    old = reviewer.as_of(position=before).read(scope="proj-a", claim_key="api.timeout")
    assert old.value == 30


def test_a_superseded_record_cannot_be_a_parent_revoked_or_superseded_twice(world: World) -> None:
    agent, reviewer = world.agent, world.reviewer
    _accepted(world, "V1", scope="proj-a", claim_key="k", value=1, kind=Kind.FACT)
    agent.propose(scope="proj-a", claim_key="k", value=2, kind=Kind.FACT, supersedes="V1", id="V2")
    agent.propose(scope="proj-a", claim_key="k", value=3, kind=Kind.FACT, supersedes="V1", id="V3")
    reviewer.accept("V2")
    position = world.ledger.position
    with pytest.raises(InvalidTransitionError, match="'V1', which was already superseded by 'V2'"):
        reviewer.accept("V3")
    # and the reviewer is told what is left to do with V3, which only a rejection settles
    with pytest.raises(InvalidTransitionError, match=r"\(or reject 'V3': it can no longer be"):
        reviewer.accept("V3")
    with pytest.raises(InvalidParentError, match="'V1'"):
        agent.propose(scope="proj-a", claim_key="x", value=1, kind=Kind.FACT, parents=["V1"])
    with pytest.raises(InvalidTransitionError, match="SUPERSEDED"):
        reviewer.revoke("V1", reason="no")
    with pytest.raises(InvalidTransitionError, match="supersedes 'V1', which is SUPERSEDED"):
        agent.propose(scope="proj-a", claim_key="k", value=4, kind=Kind.FACT, supersedes="V1")
    assert world.ledger.position == position
    assert reviewer.get("V3").status == Status.CANDIDATE
    reviewer.reject("V3", reason="V2 replaced V1 first")
    assert reviewer.get("V3").status == Status.REJECTED


def test_supersedes_must_keep_scope_and_claim_key_and_be_visible(world: World) -> None:
    agent = world.agent
    _accepted(world, "V1", scope="proj-a", claim_key="k", value=1, kind=Kind.FACT)
    position = world.ledger.position
    with pytest.raises(InvalidInputError, match="keeps scope and claim key"):
        agent.propose(scope="proj-a", claim_key="other", value=2, kind=Kind.FACT, supersedes="V1")
    with pytest.raises(InvalidInputError, match="keeps scope and claim key"):
        agent.propose(scope="proj-b", claim_key="k", value=2, kind=Kind.FACT, supersedes="V1")
    with pytest.raises(InvalidParentError, match="supersedes 'V1', which it would also depend on"):
        agent.propose(
            scope="proj-a", claim_key="k", value=2, kind=Kind.FACT, parents=["V1"], supersedes="V1"
        )
    with pytest.raises(UnknownRecordError, match="'NOPE' is unknown"):
        agent.propose(scope="proj-a", claim_key="k", value=2, kind=Kind.FACT, supersedes="NOPE")
    # The outsider (proj-b only) cannot tell V1 from an id that does not exist.
    outsider_admin = world.ledger.admin()
    outsider_admin.grant("outsider", scope="proj-b", roles=["propose"])
    hidden = world.outsider
    with pytest.raises(UnknownRecordError) as seen:
        hidden.propose(scope="proj-b", claim_key="k", value=2, kind=Kind.FACT, supersedes="V1")
    with pytest.raises(UnknownRecordError) as absent:
        hidden.propose(scope="proj-b", claim_key="k", value=2, kind=Kind.FACT, supersedes="V9")
    assert str(seen.value).replace("V1", "V9") == str(absent.value)
    assert world.ledger.position == position + 1  # only the grant


def test_a_new_version_keeps_its_kind_a_model_guess_never_replaces_a_users_rule(
    world: World,
) -> None:
    # Given a user's constraint, accepted
    agent, reviewer = world.agent, world.reviewer
    _accepted(
        world, "C1", scope="proj-a", claim_key="publish.policy", value="only after review",
        kind=Kind.USER_CONSTRAINT,
    )  # fmt: skip
    position = world.ledger.position
    # When a model's inference is proposed as its new version
    with pytest.raises(InvalidKindError) as refused:
        agent.propose(
            scope="proj-a", claim_key="publish.policy", value="auto-publish is easier",
            kind=Kind.INFERENCE, supersedes="C1",
        )  # fmt: skip
    # Then it is refused, naming both kinds, and nothing is written (kinds are never merged)
    assert str(refused.value) == (
        "propose refused: supersedes 'C1' (kind user_constraint) with kind inference: "
        "a new version keeps its kind (kinds are never merged)"
    )
    assert world.ledger.position == position
    # And proposed as a record of its own, both stand, each with its kind
    agent.propose(
        scope="proj-a", claim_key="publish.policy", value="auto-publish is easier",
        kind=Kind.INFERENCE, id="I1",
    )  # fmt: skip
    reviewer.accept("I1")
    read = agent.read(scope="proj-a", claim_key="publish.policy")
    assert read.outcome == Outcome.CONFLICT
    assert {(r.id, r.kind) for r in read.records} == {
        ("C1", Kind.USER_CONSTRAINT),
        ("I1", Kind.INFERENCE),
    }
    # And a new version of the constraint, of its kind, replaces it
    _accepted(
        world, "C2", scope="proj-a", claim_key="publish.policy", value="after two reviews",
        kind=Kind.USER_CONSTRAINT, supersedes="C1",
    )  # fmt: skip
    assert reviewer.get("C1").status == Status.SUPERSEDED
    kinds = agent.read(scope="proj-a", claim_key="publish.policy", kinds=[Kind.USER_CONSTRAINT])
    assert [r.id for r in kinds.records] == ["C2"]


def test_recapturing_a_changed_source_supersedes_the_old_capture(world: World) -> None:
    agent, reviewer = world.agent, world.reviewer
    uri = "https://x.test/doc"
    e1 = agent.capture(scope="proj-a", uri=uri, content=b"v1", id="E1")
    reviewer.accept(e1)
    _accepted(
        world,
        "M1",
        scope="proj-a",
        claim_key="api.v",
        value=1,
        kind=Kind.INFERENCE,
        parents=["E1"],
    )
    # The same bytes again supersede nothing.
    same = agent.capture(scope="proj-a", uri=uri, content=b"v1", id="E1b")
    assert reviewer.get(same).supersedes is None
    # Other bytes: the new capture supersedes E1 once accepted.
    e2 = agent.capture(scope="proj-a", uri=uri, content=b"v2", id="E2")
    assert reviewer.get(e2).supersedes == "E1"
    reviewer.accept(e2)
    read = agent.read(scope="proj-a", claim_key=f"source:{uri}")
    assert read.outcome == Outcome.FOUND
    assert [r.id for r in read.records] == ["E2"]
    assert reviewer.get("E1").status == Status.SUPERSEDED
    m1 = reviewer.get("M1")
    assert (m1.status, m1.validity) == (Status.STALE, Validity.NEEDS_REVALIDATION)
    # The old bytes stay in the snapshot store: nothing is deleted.
    assert agent.snapshot(reviewer.get("E1").evidence["snapshot_ref"]) == b"v1"  # type: ignore[index]


def test_a_capture_of_new_bytes_replaces_every_earlier_capture_of_the_old_ones(
    world: World,
) -> None:
    agent, reviewer = world.agent, world.reviewer
    uri, claim = "https://x.test/doc", "source:https://x.test/doc"
    reviewer.accept(agent.capture(scope="proj-a", uri=uri, content=b"v1", id="E1"))
    _accepted(
        world, "M1", scope="proj-a", claim_key="api.v", value=1, kind=Kind.INFERENCE,
        parents=["E1"],
    )  # fmt: skip
    # The page fetched again, unchanged: accepted beside E1, replacing nothing
    reviewer.accept(agent.capture(scope="proj-a", uri=uri, content=b"v1", id="E1b"))
    agent.capture(scope="proj-a", uri=uri, content=b"v1", id="E1c")  # left pending
    read = agent.read(scope="proj-a", claim_key=claim)
    assert (read.outcome, [r.id for r in read.records]) == (Outcome.FOUND, ["E1", "E1b"])
    assert reviewer.get("M1").validity == Validity.VALID
    # Then it changes: the new capture replaces the newest, and the others of v1 too
    e2 = agent.capture(scope="proj-a", uri=uri, content=b"v2", id="E2")
    assert reviewer.get(e2).supersedes == "E1b"
    reviewer.accept(e2)
    read = agent.read(scope="proj-a", claim_key=claim)
    assert (read.outcome, [r.id for r in read.records]) == (Outcome.FOUND, ["E2"])
    for old in ("E1", "E1b", "E1c"):
        view = reviewer.get(old)
        assert (view.status, view.superseded_by) == (Status.SUPERSEDED, "E2"), old
    m1 = reviewer.get("M1")
    assert (m1.status, m1.cause, m1.cause_superseded_by) == (Status.STALE, "E1", "E2")
    # The same bytes with another value are another version: it replaces E2
    agent.capture(scope="proj-a", uri=uri, content=b"v2", id="E2v", value="summary")
    assert reviewer.get("E2v").supersedes == "E2"
    reviewer.accept("E2v")
    read = agent.read(scope="proj-a", claim_key=claim)
    assert (read.outcome, [r.id for r in read.records]) == (Outcome.FOUND, ["E2v"])
    _consistent(world)


def test_a_capture_gone_stale_is_replaced_by_a_newer_one_all_the_same(world: World) -> None:
    agent, reviewer = world.agent, world.reviewer
    uri = "https://x.test/doc"
    _accepted(world, "F", scope="proj-a", claim_key="cfg", value=1, kind=Kind.FACT)
    with agent.run("r1") as run:  # E1 observed F
        run.read(scope="proj-a", claim_key="cfg")
        run.capture(scope="proj-a", uri=uri, content=b"v1", id="E1")
    reviewer.accept("E1")
    reviewer.revoke("F", reason="wrong")
    assert reviewer.get("E1").status == Status.STALE
    reviewer.accept(agent.capture(scope="proj-a", uri=uri, content=b"v2", id="E2"))
    assert (reviewer.get("E1").status, reviewer.get("E1").superseded_by) == (
        Status.SUPERSEDED,
        "E2",
    )
    with pytest.raises(InvalidTransitionError, match="'E1' is SUPERSEDED"):
        reviewer.revalidate("E1", note="checked", parents=[])
    read = agent.read(scope="proj-a", claim_key=f"source:{uri}")
    assert (read.outcome, [r.id for r in read.records]) == (Outcome.FOUND, ["E2"])
    _consistent(world)


def _consistent(world: World) -> None:
    check = world.ledger.verify()
    assert check.ok, check.problems
    report = world.ledger.rebuild()
    assert report.digest_before == report.digest_after


def test_accepting_a_version_of_a_pending_version_replaces_the_whole_line(world: World) -> None:
    agent, reviewer = world.agent, world.reviewer
    _accepted(world, "A", scope="proj-a", claim_key="k", value=1, kind=Kind.FACT)
    agent.propose(scope="proj-a", claim_key="k", value=2, kind=Kind.FACT, supersedes="A", id="B")
    agent.propose(scope="proj-a", claim_key="k", value=3, kind=Kind.FACT, supersedes="B", id="C")
    reviewer.accept("C")  # B was never accepted: C replaces what B would have
    assert [reviewer.get(r).status for r in ("A", "B", "C")] == [
        Status.SUPERSEDED,
        Status.SUPERSEDED,
        Status.ACCEPTED,
    ]
    assert (reviewer.get("A").superseded_by, reviewer.get("B").superseded_by) == ("C", "C")
    read = agent.read(scope="proj-a", claim_key="k")
    assert (read.outcome, [r.id for r in read.records]) == (Outcome.FOUND, ["C"])
    _consistent(world)


def test_a_version_of_a_line_another_version_replaced_meanwhile_is_refused(world: World) -> None:
    # Given A accepted; B a new version of A, C of B (both pending); D of A, accepted
    agent, reviewer = world.agent, world.reviewer
    fact = {"scope": "proj-a", "claim_key": "k", "kind": Kind.FACT}
    _accepted(world, "A", value=1, **fact)
    agent.propose(value=2, supersedes="A", id="B", **fact)
    agent.propose(value=3, supersedes="B", id="C", **fact)
    _accepted(world, "D", value=4, supersedes="A", **fact)
    before = world.ledger.position
    # When C is accepted, it is refused as a direct new version of A would be,
    # naming the version to build on: it would stand beside D, a CONFLICT
    with pytest.raises(
        InvalidTransitionError,
        match="'C' supersedes 'B', a new version of 'A', which was already superseded by "
        "'D'; propose a new version of 'D'",
    ):
        reviewer.accept("C")
    assert world.ledger.position == before
    read = agent.read(scope="proj-a", claim_key="k")
    assert (read.outcome, [r.id for r in read.records]) == (Outcome.FOUND, ["D"])


def test_the_newest_fetch_is_accepted_though_its_line_was_replaced_below_it(
    world: World,
) -> None:
    # Given four fetches of a source, none accepted: E1 (v1), E2 and E3 (v2), E5
    # (v5), each proposed to replace the newest before it; E2 accepted first
    agent, reviewer = world.agent, world.reviewer
    uri = "https://x.test/page"
    for rid, content in (("E1", b"v1"), ("E2", b"v2"), ("E3", b"v2"), ("E5", b"v5")):
        agent.capture(scope="proj-a", uri=uri, content=content, id=rid)
    assert reviewer.get("E5").supersedes == "E3"
    reviewer.accept("E2")
    # When the newest fetch is accepted, it replaces every earlier one (it is no
    # rival version of a line another replaced: a capture is what its source says)
    reviewer.accept("E5")
    assert [reviewer.get(r).status for r in ("E1", "E2", "E3", "E5")] == [
        Status.SUPERSEDED,
        Status.SUPERSEDED,
        Status.SUPERSEDED,
        Status.ACCEPTED,
    ]
    read = agent.read(scope="proj-a", claim_key=f"source:{uri}")
    assert (read.outcome, [r.id for r in read.records]) == (Outcome.FOUND, ["E5"])
    _consistent(world)


def test_a_second_fetch_of_the_bytes_that_replaced_a_capture_replaces_nothing(
    world: World,
) -> None:
    # Given X1 accepted; X2 and X3, two fetches of the same new bytes, both pending
    # (each proposed to replace X1); X2 accepted and M built on it
    agent, reviewer = world.agent, world.reviewer
    uri = "https://x.test/doc"
    agent.capture(scope="proj-a", uri=uri, content=b"v1", id="X1")
    reviewer.accept("X1")
    agent.capture(scope="proj-a", uri=uri, content=b"v2", id="X2")
    agent.capture(scope="proj-a", uri=uri, content=b"v2", id="X3")
    reviewer.accept("X2")
    _accepted(world, "M", scope="proj-a", claim_key="m", value=1, kind=Kind.INFERENCE,
              parents=["X2"])  # fmt: skip
    # When X3 is accepted, it replaces nothing: both stand, and M stays VALID
    reviewer.accept("X3")
    assert [reviewer.get(r).status for r in ("X1", "X2", "X3")] == [
        Status.SUPERSEDED,
        Status.ACCEPTED,
        Status.ACCEPTED,
    ]
    assert reviewer.get("M").validity == Validity.VALID
    assert agent.read(scope="proj-a", claim_key=f"source:{uri}").outcome == Outcome.FOUND
    _consistent(world)


def test_a_capture_of_a_uri_spelt_in_another_normal_form_replaces_the_earlier(
    world: World,
) -> None:
    # Given a capture of a uri in NFD, accepted, then of the same uri in NFC with
    # other bytes: one claim key, "source:" and the uri in NFC
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/cafe\u0301", content=b"v1", id="U1")
    reviewer.accept("U1")
    agent.capture(scope="proj-a", uri="https://x.test/caf\u00e9", content=b"v2", id="U2")
    reviewer.accept("U2")
    # Then the second replaces the first, and the claim answers FOUND
    assert reviewer.get("U2").supersedes == "U1"
    assert reviewer.get("U1").status == Status.SUPERSEDED
    read = agent.read(scope="proj-a", claim_key="source:https://x.test/caf\u00e9")
    assert (read.outcome, [r.id for r in read.records]) == (Outcome.FOUND, ["U2"])
    _consistent(world)


def test_a_version_replaced_in_a_line_is_not_also_marked_stale_below_an_older_one(
    world: World,
) -> None:
    agent, reviewer = world.agent, world.reviewer
    fact = {"scope": "proj-a", "kind": Kind.FACT}
    for rid, fields in (("A", {}), ("E", {}), ("D", {"parents": ["E"]})):
        _accepted(world, rid, claim_key=rid.lower(), value=1, **{**fact, **fields})
    # B, a new version of A, rests on D; D moves onto A: B now rests on A too
    agent.propose(claim_key="a", value=2, supersedes="A", parents=["D"], id="B", **fact)
    reviewer.revoke("E", reason="gone")
    reviewer.revalidate("D", note="on A", parents=["A"])
    agent.propose(claim_key="a", value=3, supersedes="B", id="C", **fact)
    reviewer.accept("C")
    assert [e.type for e in reviewer.history("B")][-1] == "Superseded"
    assert (reviewer.get("A").status, reviewer.get("B").status) == (
        Status.SUPERSEDED,
        Status.SUPERSEDED,
    )
    _consistent(world)


@pytest.mark.parametrize("order", [("E2", "E3"), ("E3", "E2")])
def test_captures_pending_together_leave_the_newest_found(
    world: World, order: tuple[str, str]
) -> None:
    agent, reviewer = world.agent, world.reviewer
    uri = "https://x.test/doc"
    reviewer.accept(agent.capture(scope="proj-a", uri=uri, content=b"v1", id="E1"))
    agent.capture(scope="proj-a", uri=uri, content=b"v2", id="E2")
    agent.capture(scope="proj-a", uri=uri, content=b"v3", id="E3")
    first, second = order
    reviewer.accept(first)
    if second == "E3":
        reviewer.accept("E3")  # E1 went to E2 first: E3 replaces E2
        assert reviewer.get("E2").superseded_by == "E3"
    else:
        # E3 replaced the earlier capture E2 too, pending as it was
        assert reviewer.get("E2").superseded_by == "E3"
        position = world.ledger.position
        with pytest.raises(InvalidTransitionError, match="'E2' is SUPERSEDED"):
            reviewer.accept("E2")
        assert world.ledger.position == position
    read = agent.read(scope="proj-a", claim_key=f"source:{uri}")
    assert (read.outcome, [r.id for r in read.records]) == (Outcome.FOUND, ["E3"])
    _consistent(world)


def test_a_capture_of_a_source_no_capture_of_which_is_accepted_yet_replaces_the_newest(
    world: World,
) -> None:
    agent, reviewer = world.agent, world.reviewer
    uri = "https://x.test/doc"
    agent.capture(scope="proj-a", uri=uri, content=b"v1", id="F1")
    agent.capture(scope="proj-a", uri=uri, content=b"v2", id="F2")
    assert reviewer.get("F2").supersedes == "F1"
    reviewer.accept("F1")
    reviewer.accept("F2")
    read = agent.read(scope="proj-a", claim_key=f"source:{uri}")
    assert (read.outcome, [r.id for r in read.records]) == (Outcome.FOUND, ["F2"])
    _consistent(world)


def test_a_delivered_record_that_is_superseded_owes_a_correction(world: World) -> None:
    reviewer = world.reviewer
    _accepted(world, "R1", scope="proj-a", claim_key="report", value="a", kind=Kind.FACT)
    delivery = reviewer.deliver("R1", recipient="ops@x.test")
    world.agent.propose(
        scope="proj-a", claim_key="report", value="b", kind=Kind.FACT, supersedes="R1", id="R2"
    )
    assert reviewer.corrections_due() == ()
    reviewer.accept("R2")
    due = reviewer.corrections_due()
    assert [(d.delivery.delivery_id, d.status) for d in due] == [(delivery, Status.SUPERSEDED)]
    reviewer.issue_correction(delivery, note="replaced", replacement="R2")
    assert reviewer.corrections_due() == ()


def test_supersession_survives_a_rebuild_and_a_reopen(world: World) -> None:
    _accepted(world, "V1", scope="proj-a", claim_key="k", value=1, kind=Kind.FACT)
    _accepted(world, "C1", scope="proj-a", claim_key="c", value=1, kind=Kind.FACT, parents=["V1"])
    world.agent.propose(
        scope="proj-a", claim_key="k", value=2, kind=Kind.FACT, supersedes="V1", id="V2"
    )
    world.reviewer.accept("V2")
    report = world.ledger.rebuild()
    assert report.matched
    assert world.reviewer.get("C1").cause == "V1"
    assert world.reviewer.get("V1").superseded_by == "V2"


def test_a_new_version_may_not_rest_on_what_it_supersedes(world: World) -> None:
    agent = world.agent
    _accepted(world, "V1", scope="proj-a", claim_key="k", value=1, kind=Kind.FACT)
    _accepted(world, "X", scope="proj-a", claim_key="x", value=1, kind=Kind.FACT, parents=["V1"])
    position = world.ledger.position
    with pytest.raises(InvalidParentError, match="its dependency 'X' rests on 'V1'"):
        agent.propose(
            scope="proj-a", claim_key="k", value=2, kind=Kind.FACT, parents=["X"], supersedes="V1"
        )
    assert world.ledger.position == position
    # A run that read V1 proposes V2: reading the old version is not resting on it.
    with agent.run("task-v2") as run:
        run.read(scope="proj-a", claim_key="k")
        v2 = run.propose(scope="proj-a", claim_key="k", value=2, kind=Kind.FACT, supersedes="V1")
    assert world.reviewer.get(v2).observed == ()
    world.reviewer.accept(v2)
    assert agent.read(scope="proj-a", claim_key="k").value == 2


def test_evidence_captured_after_reading_the_old_version_is_refused_with_the_way_out(
    world: World,
) -> None:
    # Given an accepted memory, and a run that reads it, then captures a source
    # saying otherwise (the capture carries the run's read of V1 as observed)
    agent, reviewer = world.agent, world.reviewer
    _accepted(world, "V1", scope="proj-a", claim_key="k", value=10, kind=Kind.FACT)
    with agent.run("update") as run:
        run.read(scope="proj-a", claim_key="k")
        run.capture(scope="proj-a", uri="https://x.test/log", content=b"now 20", id="N1")
        position = world.ledger.position
        # When the run proposes the new version on it, superseding V1
        with pytest.raises(InvalidParentError) as refused:
            run.propose(
                scope="proj-a", claim_key="k", value=20, kind=Kind.FACT, parents=["N1"],
                supersedes="V1",
            )  # fmt: skip
        assert world.ledger.position == position
    # Then it is refused, writing nothing, saying why (N1 observed V1) and what to
    # do instead
    assert str(refused.value) == (
        "propose refused: supersedes 'V1', but its dependency 'N1' rests on 'V1', and "
        "accepting the new version would make it STALE; depend on records that do not "
        "(what is captured or proposed in a run after it was shown 'V1' usable carries "
        "that read and rests on it: capture or propose it again in a run that has not, "
        "such as a new MCP session, LangGraph thread or session.run())"
    )
    # And the way out it names works: captured again in another run, the source
    # holds the new version, which replaces V1
    with agent.run("update-2") as run:
        again = run.capture(scope="proj-a", uri="https://x.test/log", content=b"now 20")
        v2 = run.propose(
            scope="proj-a", claim_key="k", value=20, kind=Kind.FACT, parents=[again],
            supersedes="V1",
        )  # fmt: skip
    reviewer.accept(again)
    reviewer.accept(v2)
    read = agent.read(scope="proj-a", claim_key="k")
    assert (read.outcome, read.value) == (Outcome.FOUND, 20)
    assert reviewer.get("V1").status == Status.SUPERSEDED
    assert reviewer.get("N1").status == Status.STALE  # it observed V1


def test_a_batch_may_not_give_a_new_version_a_parent_of_the_batch_resting_on_the_old(
    world: World,
) -> None:
    _accepted(world, "V1", scope="proj-a", claim_key="k", value=1, kind=Kind.FACT)
    position, views = world.ledger.position, world.ledger.views_digest()
    fields = {"scope": "proj-a", "kind": "fact"}
    items = [
        {**fields, "claim_key": "w", "value": 1, "parents": ["V1"], "id": "W1"},
        {**fields, "claim_key": "k", "value": 2, "parents": ["W1"], "supersedes": "V1"},
    ]
    with pytest.raises(InvalidParentError, match=r"item 1: .*its dependency 'W1' rests on 'V1'"):
        world.agent.propose_many(items)
    assert (world.ledger.position, world.ledger.views_digest()) == (position, views)


def test_only_a_reader_may_name_a_record_to_supersede_but_a_recapture_needs_no_read(
    world: World,
) -> None:
    # Given a writer with propose but not read in proj-a
    admin = world.ledger.admin()
    admin.grant("writer", scope="proj-a", roles=["propose"])
    writer = world.ledger.authenticate(admin.issue_token("writer"))
    _accepted(world, "S1", scope="proj-a", claim_key="secret", value=1, kind=Kind.FACT)
    world.reviewer.revoke(
        _accepted(world, "S2", scope="proj-a", claim_key="s2", value=1, kind=Kind.FACT), "rotated"
    )
    position, views = world.ledger.position, world.ledger.views_digest()

    # When it names records to supersede, it learns nothing of them: each is
    # refused as one that does not exist (not by claim key, status or reason)
    answers = set()
    for old, claim in (("S1", "wrong"), ("S1", "secret"), ("S2", "s2"), ("NOPE", "secret")):
        with pytest.raises(UnknownRecordError) as refused:
            writer.propose(scope="proj-a", claim_key=claim, value=2, kind=Kind.FACT, supersedes=old)
        answers.add(str(refused.value).replace(repr(old), "<ID>"))
    assert answers == {
        "propose refused: superseded record <ID> is unknown or not visible to 'writer'"
    }
    assert (world.ledger.position, world.ledger.views_digest()) == (position, views)

    # But capturing a source again supersedes its previous capture, as for any capturer
    first = writer.capture(scope="proj-a", uri="https://x.test/p", content=b"one")
    world.reviewer.accept(first)
    second = writer.capture(scope="proj-a", uri="https://x.test/p", content=b"two")
    assert world.reviewer.get(second).supersedes == first


def test_a_run_that_read_what_rests_on_the_old_version_may_still_supersede_it(
    world: World,
) -> None:
    """Read, derive, then update: what the run read that rests on the old version
    goes STALE when the new one is accepted, so it is no basis for the new one."""
    agent, reviewer = world.agent, world.reviewer
    _accepted(world, "M1", scope="proj-a", claim_key="user.name", value="Ada", kind=Kind.FACT)
    _accepted(world, "U", scope="proj-a", claim_key="user.city", value="Paris", kind=Kind.FACT)
    with agent.run("task-profile") as run:
        run.read(scope="proj-a", claim_key="user.name")
        p1 = run.propose(scope="proj-a", claim_key="greeting", value="Hi Ada", kind=Kind.PLAN)
        reviewer.accept(p1)
        run.read(scope="proj-a", claim_key="greeting")
        run.read(scope="proj-a", claim_key="user.city")
        m2 = run.propose(
            scope="proj-a", claim_key="user.name", value="Ada L.", kind=Kind.FACT, supersedes="M1"
        )
    assert reviewer.get(p1).observed == ("M1",)
    assert reviewer.get(m2).observed == ("U",)  # not P1, which rests on M1
    reviewer.accept(m2)
    assert reviewer.get("M1").status == Status.SUPERSEDED
    assert reviewer.get(p1).status == Status.STALE
    assert agent.read(scope="proj-a", claim_key="user.name").value == "Ada L."
    # Declared, the same dependency is still refused: the proposer said it rests on it.
    _accepted(world, "P2", scope="proj-a", claim_key="g2", value=1, kind=Kind.PLAN, parents=[m2])
    position = world.ledger.position
    with pytest.raises(InvalidParentError, match=r"its dependency 'P2' rests on"):
        agent.propose(
            scope="proj-a",
            claim_key="user.name",
            value="A",
            kind=Kind.FACT,
            parents=["P2"],
            supersedes=m2,
        )
    assert world.ledger.position == position


def test_a_new_version_of_a_record_withdrawn_meanwhile_is_accepted_on_its_own(
    world: World,
) -> None:
    _accepted(world, "V1", scope="proj-a", claim_key="k", value=1, kind=Kind.FACT)
    world.agent.propose(
        scope="proj-a", claim_key="k", value=2, kind=Kind.FACT, supersedes="V1", id="V2"
    )
    world.reviewer.revoke("V1", reason="wrong")
    world.reviewer.accept("V2")
    assert world.reviewer.get("V1").status == Status.REVOKED
    assert world.agent.read(scope="proj-a", claim_key="k").value == 2


def test_the_newest_version_is_found_under_the_claim_key_as_normalised(world: World) -> None:
    import unicodedata

    from ledger.proposals import NewestOf

    # Given a claim proposed under its NFC key, then a version of it given in NFD
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    for value, key in ((1, nfc), (2, nfd)):
        world.agent.propose(
            "proj-a", key, {"v": value}, Kind.FACT,
            supersedes=NewestOf("fact"), accepted_by=world.reviewer,  # type: ignore[arg-type]
        )  # fmt: skip
    # Then the second replaced the first: one value, not a conflict
    read = world.reviewer.read("proj-a", nfc)
    assert (read.outcome, [r.value for r in read.records]) == (Outcome.FOUND, [{"v": 2}])


#: A step of the capture sequences: capture bytes number n % 3, or accept or reject
#: the n-th capture so far (mostly captures and acceptances).
_STEP = st.tuples(
    st.sampled_from(["capture", "capture", "accept", "accept", "reject"]),
    st.integers(min_value=0, max_value=5),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_STEP, min_size=1, max_size=12))
# a re-fetch of unchanged bytes accepted, then other bytes
@example(
    [("capture", 0), ("accept", 0), ("capture", 0), ("accept", 1), ("capture", 1), ("accept", 2)]
)
# a re-fetch of b proposed while c was pending, both then accepted
@example(
    [
        *[("capture", 1), ("capture", 0), ("capture", 2), ("accept", 0), ("capture", 1)],
        *[("accept", 2), ("accept", 3)],
    ]
)
def test_fetches_of_one_source_decided_in_any_order_never_read_conflict(
    steps: list[tuple[str, int]],
) -> None:
    # Captures of one page, accepted and rejected in any order (out of order too):
    # the source's claim answers with one version, never CONFLICT between fetches.
    with Ledger.open("memory:") as led:
        admin = led.admin()
        admin.grant("agent", scope="p", roles=["propose", "read"])
        admin.grant("reviewer", scope="p", roles=["approve", "read"])
        agent = led.authenticate(admin.issue_token("agent"))
        reviewer = led.authenticate(admin.issue_token("reviewer"))
        captured: list[str] = []
        for n, (what, arg) in enumerate(steps):
            if what == "capture" or not captured:
                content = b"abc"[arg % 3 : arg % 3 + 1]
                captured.append(agent.capture("p", "https://x.test/u", content, id=f"C{n}"))
                continue
            with contextlib.suppress(LedgerError):  # e.g. no longer a CANDIDATE
                decide = reviewer.accept if what == "accept" else reviewer.reject
                decide(captured[arg % len(captured)], *(() if what == "accept" else ("no",)))
            read = agent.read(scope="p", claim_key="source:https://x.test/u")
            assert read.outcome != Outcome.CONFLICT, (steps[: n + 1], read.records)
        check = led.verify()
        assert check.ok, check.problems
