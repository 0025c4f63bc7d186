"""``Session.preview_revoke``: what a revocation would reach, before confirming it."""

from __future__ import annotations

import pytest

from ledger import Kind, Status
from ledger.errors import AccessDeniedError, InvalidTransitionError, UnknownRecordError
from tests.conftest import World


def test_the_preview_names_what_would_go_stale_and_which_deliveries_would_owe(
    world: World,
) -> None:
    agent, reviewer, led = world.agent, world.reviewer, world.ledger
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"x", id="E1")
    reviewer.accept("E1")
    agent.propose(
        scope="proj-a", claim_key="m", value=1, kind=Kind.INFERENCE, parents=["E1"], id="M1"
    )
    reviewer.accept("M1")
    agent.propose(
        scope="proj-a", claim_key="r", value="r", kind=Kind.REPORT, parents=["M1"], id="R1"
    )
    reviewer.accept("R1")
    delivery = reviewer.deliver("R1", recipient="ops@x.test")
    agent.propose(scope="proj-a", claim_key="c", value=1, kind=Kind.PLAN, parents=["M1"], id="C1")
    position = led.position

    preview = reviewer.preview_revoke("E1")

    assert preview.root == "E1"
    assert set(preview.stale) == {"M1", "R1", "C1"}
    assert [d.delivery_id for d in preview.deliveries] == [delivery]
    # Nothing was written, and the revocation then does exactly what was previewed.
    assert led.position == position
    assert reviewer.get("M1").status == Status.ACCEPTED
    rev = reviewer.revoke("E1", reason="doc changed")
    assert set(rev.stale) == set(preview.stale)
    assert [d.delivery.delivery_id for d in reviewer.corrections_due()] == [delivery]


def test_the_preview_needs_the_approve_role_and_a_revocable_record(world: World) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="K1")
    with pytest.raises(AccessDeniedError, match="lacks role 'approve'"):
        agent.preview_revoke("K1")
    with pytest.raises(UnknownRecordError, match="'K1' is unknown or not visible"):
        world.outsider.preview_revoke("K1")
    reviewer.reject("K1", reason="no")
    with pytest.raises(InvalidTransitionError, match="'K1' is REJECTED"):
        reviewer.preview_revoke("K1")


def test_the_preview_lists_deliveries_an_approver_without_deliver_is_shown_anyway(
    world: World,
) -> None:
    # Given R1 on E1, delivered, and an approver who reads proj-a but cannot deliver
    agent, reviewer, led = world.agent, world.reviewer, world.ledger
    admin = led.admin()
    admin.grant("approver-2", scope="proj-a", roles=["approve", "read"])
    approver = led.authenticate(admin.issue_token("approver-2"))
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"x", id="E1")
    reviewer.accept("E1")
    agent.propose(
        scope="proj-a", claim_key="r", value="r", kind=Kind.REPORT, parents=["E1"], id="R1"
    )
    reviewer.accept("R1")
    delivery = reviewer.deliver("R1", recipient="ops@x.test")
    assert [d.delivery_id for d in approver.get("R1").deliveries] == [delivery]

    # When it previews revoking E1, then the delivery that would owe a correction is listed
    preview = approver.preview_revoke("E1")
    assert [d.delivery_id for d in preview.deliveries] == [delivery]
    # and so it is to an approver who audits proj-a, reading and delivering nowhere
    # (who is shown the corrections owed, and the deliveries in each record's audit)
    admin.grant("approver-3", scope="proj-a", roles=["approve", "audit"])
    auditing = led.authenticate(admin.issue_token("approver-3"))
    assert [d.delivery_id for d in auditing.preview_revoke("E1").deliveries] == [delivery]
    # while one who only approves there is shown none
    admin.grant("approver-4", scope="proj-a", roles=["approve"])
    bare = led.authenticate(admin.issue_token("approver-4"))
    assert bare.preview_revoke("E1").deliveries == ()
