"""Semantics settled after review (SPEC 13.2), each as a user meets it."""

from __future__ import annotations

import re
from contextlib import closing
from datetime import timedelta

import pytest

from ledger import Kind, Outcome
from ledger.errors import (
    InvalidInputError,
    InvalidParentError,
    InvalidTransitionError,
    InvalidValueError,
    NotUsableError,
)
from tests.conftest import World


def _accepted(world: World, rid: str, **fields: object) -> str:
    world.agent.propose(id=rid, **fields)  # type: ignore[arg-type]
    world.reviewer.accept(rid)
    return rid


def test_a_dict_and_a_list_of_its_pairs_are_different_values_and_conflict(world: World) -> None:
    _accepted(world, "D1", scope="proj-a", claim_key="shape", value={"a": 1}, kind=Kind.FACT)
    _accepted(world, "L1", scope="proj-a", claim_key="shape", value=[["a", 1]], kind=Kind.FACT)
    assert world.agent.read(scope="proj-a", claim_key="shape").outcome == Outcome.CONFLICT
    _accepted(world, "D2", scope="proj-a", claim_key="empty", value={}, kind=Kind.FACT)
    _accepted(world, "L2", scope="proj-a", claim_key="empty", value=[], kind=Kind.FACT)
    assert world.agent.read(scope="proj-a", claim_key="empty").outcome == Outcome.CONFLICT


def test_nfc_and_nfd_spellings_of_a_claim_key_are_one_claim(world: World) -> None:
    nfc, nfd = "caf\u00e9.open", "cafe\u0301.open"
    _accepted(world, "N1", scope="proj-a", claim_key=nfc, value=True, kind=Kind.FACT)
    _accepted(world, "N2", scope="proj-a", claim_key=nfd, value=False, kind=Kind.FACT)
    assert world.reviewer.get("N2").claim_key == nfc
    read = world.agent.read(scope="proj-a", claim_key=nfd)
    assert read.outcome == Outcome.CONFLICT
    # Read and explain answer with the claim's key as stored, however it was spelt
    assert read.claim_key == nfc
    assert world.agent.explain(scope="proj-a", claim_key=nfd).claim_key == nfc


@pytest.mark.parametrize("claim", [" api.x", "api.x ", "api.x\u00a0"])
def test_a_claim_key_with_surrounding_whitespace_is_refused_by_name(
    world: World, claim: str
) -> None:
    position = world.ledger.position
    with pytest.raises(InvalidValueError, match="whitespace"):
        world.agent.propose(scope="proj-a", claim_key=claim, value=1, kind=Kind.FACT)
    assert world.ledger.position == position


@pytest.mark.parametrize("claim", ["api.x\t", "api\nx", "api.x\r"])
def test_a_claim_key_or_uri_is_one_line(world: World, claim: str) -> None:
    # A tab or line break would split the one-line header of `explain` and the CLI's
    # tables, and let a key pose as two.
    position = world.ledger.position
    with pytest.raises(InvalidValueError, match="control characters"):
        world.agent.propose(scope="proj-a", claim_key=claim, value=1, kind=Kind.FACT)
    with pytest.raises(InvalidValueError, match=r"uri .*control characters"):
        world.agent.capture("proj-a", f"https://x.test/{claim}", b"bytes")
    assert world.ledger.position == position


def test_a_capture_fetched_in_the_future_is_refused_beyond_five_minutes_of_skew(
    world: World,
) -> None:
    now = world.clock.now
    position = world.ledger.position
    with pytest.raises(InvalidValueError, match=r"fetched_at .* is in the future"):
        world.agent.capture(
            scope="proj-a", uri="https://x.test/a", content=b"a", fetched_at=now + timedelta(days=1)
        )
    assert world.ledger.position == position
    rid = world.agent.capture(
        scope="proj-a", uri="https://x.test/a", content=b"a", fetched_at=now + timedelta(minutes=4)
    )
    assert world.reviewer.get(rid).evidence["fetched_at"] == now + timedelta(minutes=4)  # type: ignore[index]


def test_a_record_derived_from_a_conditioned_one_inherits_its_conditions(world: World) -> None:
    _accepted(
        world,
        "M1",
        scope="proj-a",
        claim_key="api.retry_safe",
        value=True,
        kind=Kind.INFERENCE,
        conditions={"api": "v2"},
    )
    _accepted(
        world,
        "R1",
        scope="proj-a",
        claim_key="report",
        value="ok",
        kind=Kind.REPORT,
        parents=["M1"],
    )
    assert world.reviewer.get("R1").conditions == {"api": "v2"}
    read = world.agent.read(scope="proj-a", claim_key="report", context={"api": "v1"})
    assert read.outcome == Outcome.MISSING  # the summary kept the condition
    assert world.agent.read(scope="proj-a", claim_key="report", context={"api": "v2"}).value == "ok"


def test_contradictory_inherited_conditions_are_refused_naming_both_sides(world: World) -> None:
    _accepted(
        world, "A", scope="proj-a", claim_key="a", value=1, kind=Kind.FACT, conditions={"api": "v2"}
    )
    _accepted(
        world, "B", scope="proj-a", claim_key="b", value=1, kind=Kind.FACT, conditions={"api": "v1"}
    )
    position = world.ledger.position
    with pytest.raises(InvalidValueError, match=r"api='v2' \(from 'A'\) but api='v1' \(from 'B'\)"):
        world.agent.propose(
            scope="proj-a", claim_key="c", value=1, kind=Kind.PLAN, parents=["A", "B"]
        )
    with pytest.raises(
        InvalidValueError, match=r"api='v3' \(from the proposal\) but api='v2' \(from 'A'\)"
    ):
        world.agent.propose(
            scope="proj-a",
            claim_key="c",
            value=1,
            kind=Kind.PLAN,
            parents=["A"],
            conditions={"api": "v3"},
        )
    assert world.ledger.position == position


def test_a_run_shown_records_of_contradicting_conditions_states_which_one_applies(
    world: World,
) -> None:
    """A listing shows what holds under every context: a run that saw both
    versions is asked which condition its record holds under, not dead-ended."""
    for rid, version, safe in (("M1", "v1", False), ("M2", "v2", True)):
        _accepted(
            world,
            rid,
            scope="proj-a",
            claim_key="api.retry_safe",
            value=safe,
            kind=Kind.FACT,
            conditions={"api": version},
        )
    with world.agent.run("task-list") as run:
        run.records("proj-a")
        position = world.ledger.position
        with pytest.raises(
            InvalidValueError,
            match=r"its run read 'M1' \(api='v1'\) and 'M2' \(api='v2'\); state the 'api'",
        ):
            run.propose(scope="proj-a", claim_key="note", value="x", kind=Kind.INFERENCE)
        assert world.ledger.position == position
        rid = run.propose(
            scope="proj-a",
            claim_key="note",
            value="retry is safe",
            kind=Kind.INFERENCE,
            conditions={"api": "v2"},
        )
    note = world.reviewer.get(rid)
    assert note.conditions == {"api": "v2"}
    assert set(note.observed) == {"M1", "M2"}  # both still revoke it
    world.reviewer.accept(rid)
    assert world.agent.read(scope="proj-a", claim_key="note", context={"api": "v1"}).outcome == (
        Outcome.MISSING
    )
    world.reviewer.revoke("M1", reason="wrong")
    assert world.reviewer.get(rid).status == "STALE"


def test_a_record_read_as_of_before_it_expired_is_no_basis_now(world: World) -> None:
    start = world.clock.now
    _accepted(
        world,
        "T1",
        scope="proj-a",
        claim_key="token",
        value="abc",
        kind=Kind.FACT,
        expires=start + timedelta(hours=1),
    )
    world.clock.advance(hours=2)
    with world.agent.run("task-past") as run:
        past = run.read(scope="proj-a", claim_key="token", at=start + timedelta(minutes=30))
        assert past.outcome == Outcome.FOUND  # what held then is shown
        rid = run.propose(scope="proj-a", claim_key="d", value=1, kind=Kind.INFERENCE, parents=[])
    assert world.reviewer.get(rid).observed == ()
    assert "T1" in run.reads
    world.reviewer.accept(rid)  # nothing expired under it
    # The same when the run is continued elsewhere (a shell pipeline's next command)
    world.agent.run("task-elsewhere").start().read(
        scope="proj-a", claim_key="token", at=start + timedelta(minutes=30)
    )
    later = world.agent.run("task-elsewhere").resume()
    rid = later.propose(scope="proj-a", claim_key="e", value=1, kind=Kind.INFERENCE, parents=[])
    assert world.reviewer.get(rid).observed == () and later.reads == ("T1",)


def test_a_new_basis_may_not_make_a_record_drop_or_contradict_a_condition(world: World) -> None:
    fact = {"scope": "proj-a", "value": 1, "kind": Kind.FACT}
    _accepted(world, "E1", claim_key="e1", **fact)
    _accepted(world, "V2", claim_key="v2", conditions={"api": "v2"}, **fact)
    for rid, conditions in (("M", None), ("N", {"api": "v1"}), ("K", {"api": "v2"})):
        _accepted(
            world,
            rid,
            scope="proj-a",
            claim_key=rid.lower(),
            value=True,
            kind=Kind.INFERENCE,
            parents=["E1"],
            conditions=conditions,
        )
    world.reviewer.revoke("E1", reason="gone")
    position = world.ledger.position
    # M holds under any api: resting on V2 it would drop V2's condition
    with pytest.raises(InvalidParentError, match="new parent 'V2' holds under api='v2'"):
        world.reviewer.revalidate("M", note="x", parents=["V2"])
    with pytest.raises(InvalidValueError, match=r"api='v1' \(from 'N'\) but api='v2'"):
        world.reviewer.revalidate("N", note="x", parents=["V2"])
    assert world.ledger.position == position
    world.reviewer.revalidate("K", note="same condition", parents=["V2"])
    assert (world.reviewer.get("K").parents, world.reviewer.get("K").conditions) == (
        ("V2",),
        {"api": "v2"},
    )


def test_a_stale_record_that_was_never_accepted_returns_to_candidate(world: World) -> None:
    _accepted(world, "E1", scope="proj-a", claim_key="e1", value=1, kind=Kind.FACT)
    _accepted(world, "E2", scope="proj-a", claim_key="e2", value=2, kind=Kind.FACT)
    world.agent.propose(
        scope="proj-a", claim_key="m", value=1, kind=Kind.INFERENCE, parents=["E1"], id="M1"
    )
    world.reviewer.revoke("E1", reason="wrong")
    assert world.reviewer.get("M1").status == "STALE"
    world.reviewer.revalidate("M1", note="re-based", parents=["E2"])
    assert world.reviewer.get("M1").status == "CANDIDATE"  # still needs an acceptance
    assert world.agent.read(scope="proj-a", claim_key="m").outcome == Outcome.MISSING
    world.reviewer.accept("M1")
    assert world.agent.read(scope="proj-a", claim_key="m").outcome == Outcome.FOUND


def test_revalidation_refuses_an_empty_basis_for_kinds_that_need_one(world: World) -> None:
    _accepted(world, "E1", scope="proj-a", claim_key="e1", value=1, kind=Kind.FACT)
    _accepted(
        world, "M1", scope="proj-a", claim_key="m", value=1, kind=Kind.INFERENCE, parents=["E1"]
    )
    _accepted(world, "F1", scope="proj-a", claim_key="f", value=1, kind=Kind.FACT, parents=["E1"])
    world.reviewer.revoke("E1", reason="wrong")
    position = world.ledger.position
    with pytest.raises(InvalidParentError, match="'M1' is 'inference' and needs a basis"):
        world.reviewer.revalidate("M1", parents=[])
    assert world.ledger.position == position
    world.reviewer.revalidate("F1", note="a fact stands alone", parents=[])
    assert world.reviewer.get("F1").status == "ACCEPTED"


def test_evidence_is_revalidated_without_parents_as_it_was_captured_without(
    world: World,
) -> None:
    # Given evidence captured in a run that read M1 (so it observed M1), M1 revoked
    _accepted(world, "M1", scope="proj-a", claim_key="m", value=1, kind=Kind.FACT)
    _accepted(world, "F2", scope="proj-a", claim_key="f", value=2, kind=Kind.FACT)
    with world.agent.run("t1") as run:
        run.read(scope="proj-a", claim_key="m")
        run.capture(scope="proj-a", uri="https://x.test/e", content=b"e", id="E")
    world.reviewer.accept("E")
    world.reviewer.revoke("M1", reason="wrong")
    assert world.reviewer.get("E").status == "STALE"
    position, views = world.ledger.position, world.ledger.views_digest()

    # When it is revalidated onto a declared parent, that is refused by name
    with pytest.raises(InvalidParentError, match="evidence 'E' is captured, not derived"):
        world.reviewer.revalidate("E", note="x", parents=["F2"])
    assert (world.ledger.position, world.ledger.views_digest()) == (position, views)

    # Then it can be revalidated on no basis at all, as a capture stands
    world.reviewer.revalidate("E", note="the page still says so", parents=[])
    assert (world.reviewer.get("E").status, world.reviewer.get("E").parents) == ("ACCEPTED", ())


def test_an_accepted_record_whose_ancestor_expired_can_be_given_a_new_basis(world: World) -> None:
    soon = world.clock.now + timedelta(hours=1)
    _accepted(world, "E1", scope="proj-a", claim_key="e1", value=1, kind=Kind.FACT, expires=soon)
    _accepted(world, "E2", scope="proj-a", claim_key="e2", value=1, kind=Kind.FACT)
    _accepted(
        world, "M1", scope="proj-a", claim_key="m", value=1, kind=Kind.INFERENCE, parents=["E1"]
    )
    world.clock.advance(hours=2)
    assert world.agent.read(scope="proj-a", claim_key="m").outcome == Outcome.MISSING
    with pytest.raises(InvalidTransitionError) as same:
        world.reviewer.revalidate("M1")  # no new basis: nothing would change
    assert str(same.value) == (
        "record 'M1' is ACCEPTED on a basis that expired; revalidate needs STALE, or a "
        "new basis for it (parents)"
    )
    assert (same.value.status, same.value.allowed) == ("ACCEPTED", ("STALE", "ACCEPTED"))
    world.reviewer.revalidate("M1", note="re-checked against E2", parents=["E2"])
    assert world.agent.read(scope="proj-a", claim_key="m").outcome == Outcome.FOUND


def test_a_record_past_its_own_expiry_is_refused_a_new_basis_saying_what_renews_it(
    world: World,
) -> None:
    soon = world.clock.now + timedelta(hours=1)
    _accepted(world, "E2", scope="proj-a", claim_key="e2", value=1, kind=Kind.FACT)
    _accepted(world, "M", scope="proj-a", claim_key="m", value=1, kind=Kind.FACT, expires=soon)
    world.clock.advance(hours=2)
    position = world.ledger.position
    with pytest.raises(InvalidTransitionError) as refused:
        world.reviewer.revalidate("M", note="x", parents=["E2"])
    assert str(refused.value) == (
        f"revalidate refused: record 'M' expired at {soon.isoformat()} (its own expiry, "
        "which no new basis renews); propose a new version of it with supersedes='M'"
    )
    assert world.ledger.position == position
    new = world.agent.propose(
        scope="proj-a", claim_key="m", value=2, kind=Kind.FACT, supersedes="M"
    )
    world.reviewer.accept(new)
    assert world.agent.read(scope="proj-a", claim_key="m").value == 2


def test_a_url_password_never_appears_in_messages_or_the_ledger_s_url(pg_url: str) -> None:
    from ledger import Ledger
    from ledger.errors import InvalidURLError
    from ledger.persistence import resolve_url

    secret = "s3cr3t-pw"
    with_password = pg_url.replace("postgresql://postgres@", f"postgresql://postgres:{secret}@")
    with pytest.raises(InvalidURLError) as refused:
        Ledger.open(with_password + "&colour=blue")
    assert secret not in str(refused.value) and "***" in str(refused.value)
    backend = resolve_url(with_password)
    assert secret not in backend.url and secret not in repr(backend)
    with Ledger.open(with_password) as led:  # trust auth: the password is not checked
        assert secret not in led.url
        # The handles say what they are, and hold no secret to show.
        admin = led.admin()
        admin.grant("agent", scope="s", roles=["read"])
        token = admin.issue_token("agent")
        session = led.authenticate(token)
        then = session.as_of(position=1)  # right after the transaction holding position 1
        shown = [repr(led), repr(admin), repr(session), repr(then)]
        shown.append(repr(led.admin(admin.issue_admin_token())))
        run = session.run("task-1")
        shown.append(repr(run))
        assert not [r for r in shown if secret in r or token in r]
        assert shown[5] == "<RunContext 'task-1' of 'agent' (not open here)>"
        assert shown[0] == f"<Ledger {led.url!r} (postgresql, open)>"
        assert shown[1:4] == [
            f"<Admin of {led.url!r}, trusted as the host>",
            "<Session of 'agent'>",
            f"<Session of 'agent', as of position {then.position}>",
        ]
        assert shown[4] == f"<Admin of {led.url!r}, trusted as an admin token>"
    assert repr(led).endswith("(postgresql, closed)>")
    # As a query option, and in a URL too malformed to parse: masked all the same.
    as_option = pg_url.replace("?", f"?password={secret}&", 1)
    malformed = f"postgresql://postgres:{secret}@[::1/test?schema=x"
    unencoded = f"postgresql://postgres:ab#{secret}@127.0.0.1/test?schema=x&colour=1"
    others = (
        pg_url.replace("?", f"?sslpassword={secret}&", 1),
        pg_url.replace("?", f"?pass%77ord={secret}&", 1),
        f"sqlite:///x.db?password={secret}",
    )
    for url in (as_option, malformed, unencoded, *others):
        with pytest.raises(InvalidURLError) as refused:
            Ledger.open(url)
        assert secret not in str(refused.value) and "***" in str(refused.value)
    with pytest.raises(InvalidURLError, match="is not a valid URL"):  # not a traceback
        Ledger.open(malformed)


@pytest.mark.parametrize(
    "url",
    [
        " postgresql://alice:hunter2@db.test/ledger",  # pasted with a space before it
        "\tpostgresql://alice:hunter2@db.test/ledger",
        "postgresql:alice:hunter2@db.test/ledger",  # the // forgotten
        "//alice:hunter2@db.test/ledger",
        "mysql://alice:hunter2@db.test/ledger",
        b"postgresql://alice:hunter2@db.test/ledger",
    ],
)
def test_a_password_in_a_url_of_no_known_shape_is_masked_too(url: object) -> None:
    from ledger import Ledger
    from ledger.errors import InvalidURLError

    with pytest.raises(InvalidURLError) as refused:
        Ledger.open(url)  # type: ignore[arg-type]
    message = str(refused.value)
    assert "hunter2" not in message and "alice" not in message
    assert "***@db.test" in message or message == "ledger URL must be a string, got bytes"


def test_a_url_without_a_password_is_shown_as_it_is() -> None:
    from ledger.persistence.urls import redacted

    for url in (
        "postgresql://postgres@127.0.0.1:5432/te@st?schema=s",  # an @ in the path
        "postgresql://ledger@db.test/ledger",
        "postgresql://db.test:5432/ledger?schema=s",
    ):
        assert redacted(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://alice/etl:hunter2@db.test/ledger?schema=s",
        "postgresql://alice?x:hunter2@db.test/ledger",
        "postgresql://alice#x:hunter2@db.test/ledger",
        "postgresql://alice@corp:hunter2@db.test/ledger",
    ],
)
def test_a_password_after_a_user_part_no_parser_reads_as_one_is_masked(url: str) -> None:
    # A user part holding "/", "?" or "#" unencoded: the host is read from it
    # (so opening fails), but the password after it is still masked.
    from ledger import Ledger
    from ledger.errors import LedgerError

    with pytest.raises(LedgerError) as refused:
        Ledger.open(url)
    message = str(refused.value)
    assert "hunter2" not in message and "'postgresql://***@db.test/ledger" in message


def _delivered_report(world: World, expires: object = None) -> str:
    _accepted(world, "E1", scope="proj-a", claim_key="e1", value=1, kind=Kind.FACT)
    _accepted(world, "E2", scope="proj-a", claim_key="e2", value=2, kind=Kind.FACT)
    fields: dict[str, object] = {"expires": expires} if expires is not None else {}
    _accepted(
        world,
        "R1",
        scope="proj-a",
        claim_key="report",
        value="r",
        kind=Kind.REPORT,
        parents=["E1"],
        **fields,
    )
    return world.reviewer.deliver("R1", recipient="ops@x.test")


def test_a_correction_issued_while_valid_does_not_answer_a_later_expiry(world: World) -> None:
    delivery = _delivered_report(world, expires=world.clock.now + timedelta(hours=1))
    world.reviewer.issue_correction(delivery, note="an early note")
    assert world.reviewer.corrections_due() == ()
    world.clock.advance(hours=2)
    assert [d.delivery.delivery_id for d in world.reviewer.corrections_due()] == [delivery]
    world.reviewer.issue_correction(delivery, note="expired")
    assert world.reviewer.corrections_due() == ()


@pytest.mark.parametrize("left_by", ["expiry", "staleness"])
def test_a_revocation_after_the_correction_of_an_expiry_or_staleness_owes_none(
    world: World, left_by: str
) -> None:
    # Given a delivered report that left VALID (expired, or STALE) and was corrected
    hour = timedelta(hours=1)
    delivery = _delivered_report(
        world, expires=world.clock.now + hour if left_by == "expiry" else None
    )
    if left_by == "expiry":
        world.clock.advance(hours=2)
    else:
        world.reviewer.revoke("E1", reason="withdrawn")
    world.reviewer.issue_correction(delivery, note="not valid any more")
    assert world.reviewer.corrections_due() == ()
    # When it is revoked as well, it does not leave VALID again: nothing more is owed
    world.clock.advance(hours=1)
    world.reviewer.revoke("R1", reason="wrong")
    assert world.reviewer.corrections_due() == ()


def test_a_revocation_after_an_uncorrected_expiry_is_owed_once(world: World) -> None:
    delivery = _delivered_report(world, expires=world.clock.now + timedelta(hours=1))
    world.clock.advance(hours=2)
    world.reviewer.revoke("R1", reason="wrong")
    assert [d.delivery.delivery_id for d in world.reviewer.corrections_due()] == [delivery]
    world.reviewer.issue_correction(delivery, note="expired, then withdrawn")
    assert world.reviewer.corrections_due() == ()


def test_a_report_revalidated_on_another_basis_owes_a_correction(world: World) -> None:
    delivery = _delivered_report(world)
    world.reviewer.revoke("E1", reason="withdrawn")
    world.reviewer.issue_correction(delivery, note="E1 was withdrawn")
    world.reviewer.revalidate("R1", note="re-based on E2", parents=["E2"])
    assert world.reviewer.get("R1").validity == "VALID"
    # The recipient's copy still cites E1.
    assert [d.delivery.delivery_id for d in world.reviewer.corrections_due()] == [delivery]
    world.reviewer.issue_correction(delivery, note="now rests on E2")
    assert world.reviewer.corrections_due() == ()


def test_a_second_invalidation_after_a_correction_and_revalidation_is_owed_again(
    world: World,
) -> None:
    delivery = _delivered_report(world)
    world.reviewer.revoke("E1", reason="withdrawn")
    world.reviewer.issue_correction(delivery, note="first")
    world.reviewer.revalidate("R1", note="re-based", parents=["E2"])
    world.reviewer.issue_correction(delivery, note="re-based on E2")
    world.reviewer.revoke("E2", reason="withdrawn too")
    assert [d.delivery.delivery_id for d in world.reviewer.corrections_due()] == [delivery]


def _delivered_on_an_inference(world: World, expires: object = None) -> str:
    """E1 (``expires`` if given) <- M1 <- R1, all accepted, R1 delivered; E2 accepted."""
    fields: dict[str, object] = {"expires": expires} if expires is not None else {}
    _accepted(world, "E1", scope="proj-a", claim_key="e1", value=1, kind=Kind.FACT, **fields)
    _accepted(world, "E2", scope="proj-a", claim_key="e2", value=2, kind=Kind.FACT)
    _accepted(
        world, "M1", scope="proj-a", claim_key="m", value=3, kind=Kind.INFERENCE, parents=["E1"]
    )
    _accepted(
        world, "R1", scope="proj-a", claim_key="r", value="r", kind=Kind.REPORT, parents=["M1"]
    )
    return world.reviewer.deliver("R1", recipient="ops@x.test")


def test_a_report_whose_ancestor_was_re_based_still_owes_its_correction(world: World) -> None:
    # Given R1 delivered, then E1 revoked: R1 owes a correction
    delivery = _delivered_on_an_inference(world)
    world.reviewer.revoke("E1", reason="withdrawn")
    assert [d.delivery.delivery_id for d in world.reviewer.corrections_due()] == [delivery]

    # When M1 is re-based on E2 and R1 revalidated on its same parent, M1
    world.reviewer.revalidate("M1", note="re-based", parents=["E2"])
    world.reviewer.revalidate("R1", note="M1 holds again")
    assert world.reviewer.get("R1").validity == "VALID"

    # Then the correction is still owed: the recipient's copy rests on E1, through M1
    due = world.reviewer.corrections_due()
    assert [(d.delivery.delivery_id, d.validity) for d in due] == [(delivery, "VALID")]
    world.reviewer.issue_correction(delivery, note="now rests on E2, through M1")
    assert world.reviewer.corrections_due() == ()


def test_a_report_whose_ancestor_was_re_based_on_nothing_owes_its_correction(
    world: World,
) -> None:
    # Given R1 delivered, resting on E1 through M1 (a fact, which needs no basis),
    # and a first correction sent once E1 was revoked
    _accepted(world, "E1", scope="proj-a", claim_key="e1", value=1, kind=Kind.FACT)
    _accepted(world, "M1", scope="proj-a", claim_key="m", value=3, kind=Kind.FACT, parents=["E1"])
    _accepted(
        world, "R1", scope="proj-a", claim_key="r", value="r", kind=Kind.REPORT, parents=["M1"]
    )
    delivery = world.reviewer.deliver("R1", recipient="ops@x.test")
    world.reviewer.revoke("E1", reason="withdrawn")
    world.reviewer.issue_correction(delivery, note="R1 is stale, hold it")
    assert world.reviewer.corrections_due() == ()

    # When M1 is re-based on nothing and R1 revalidated on its same parent
    world.reviewer.revalidate("M1", note="checked first-hand", parents=[])
    world.reviewer.revalidate("R1", note="M1 holds again")
    assert world.reviewer.get("R1").validity == "VALID"

    # Then a correction is owed again: the recipient's copy still cites E1
    due = world.reviewer.corrections_due()
    assert [(d.delivery.delivery_id, d.validity) for d in due] == [(delivery, "VALID")]
    world.reviewer.issue_correction(delivery, note="M1 now stands on its own")
    assert world.reviewer.corrections_due() == ()


def test_re_basing_a_record_no_longer_above_the_delivered_one_owes_nothing(
    world: World,
) -> None:
    # Given R1 delivered on M1 on A1 on P1; P1 revoked, M1 re-based on nothing,
    # R1 revalidated, and the corrections sent
    _accepted(world, "P1", scope="proj-a", claim_key="p1", value=1, kind=Kind.FACT)
    _accepted(world, "A1", scope="proj-a", claim_key="a1", value=2, kind=Kind.FACT, parents=["P1"])
    _accepted(world, "M1", scope="proj-a", claim_key="m1", value=3, kind=Kind.FACT, parents=["A1"])
    _accepted(
        world, "R1", scope="proj-a", claim_key="r", value="r", kind=Kind.REPORT, parents=["M1"]
    )
    delivery = world.reviewer.deliver("R1", recipient="ops@x.test")
    world.reviewer.revoke("P1", reason="withdrawn")
    world.reviewer.issue_correction(delivery, note="R1 is stale")
    world.reviewer.revalidate("M1", note="first-hand", parents=[])
    world.reviewer.revalidate("R1", note="M1 holds")
    world.reviewer.issue_correction(delivery, note="M1 stands on its own")
    assert world.reviewer.corrections_due() == ()
    # When A1, which R1 no longer rests on, is re-based
    world.reviewer.revalidate("A1", note="checked again", parents=[])
    # Then R1's copy owes nothing more
    assert world.reviewer.corrections_due() == ()


def test_an_expiry_upstream_stays_owed_once_an_ancestor_is_re_based(world: World) -> None:
    # Given R1 delivered while E1, two steps up, is valid for an hour
    delivery = _delivered_on_an_inference(world, expires=world.clock.now + timedelta(hours=1))
    world.clock.advance(hours=2)
    assert [d.delivery.delivery_id for d in world.reviewer.corrections_due()] == [delivery]

    # When M1, on an expired basis, is re-based on E2 (R1 is VALID again, no event of its own)
    world.reviewer.revalidate("M1", note="re-based", parents=["E2"])
    assert world.reviewer.get("R1").validity == "VALID"

    # Then R1's delivery still owes its correction, and a correction answers it
    assert [d.delivery.delivery_id for d in world.reviewer.corrections_due()] == [delivery]
    world.reviewer.issue_correction(delivery, note="E1 expired; M1 now rests on E2")
    assert world.reviewer.corrections_due() == ()


def test_a_delivery_whose_ancestry_never_changed_owes_nothing(world: World) -> None:
    _delivered_on_an_inference(world)
    _accepted(world, "X1", scope="proj-a", claim_key="x", value=9, kind=Kind.FACT, parents=["M1"])
    world.reviewer.deliver("M1", recipient="ops@x.test")
    assert world.reviewer.corrections_due() == ()


def test_corrections_due_as_of_a_position_stay_what_they_were_then(world: World) -> None:
    delivery = _delivered_report(world)
    _accepted(world, "E3", scope="proj-a", claim_key="e3", value=3, kind=Kind.FACT)
    world.reviewer.revoke("E1", reason="withdrawn")
    world.reviewer.revalidate("R1", note="re-based", parents=["E2"])
    world.reviewer.issue_correction(delivery, note="now rests on E2")
    answered = world.ledger.position
    assert world.reviewer.as_of(position=answered).corrections_due() == ()
    # Later the report moves to yet another basis: what was due then stays as it was
    world.reviewer.revoke("E2", reason="withdrawn too")
    world.reviewer.revalidate("R1", note="re-based again", parents=["E3"])
    assert [d.delivery.delivery_id for d in world.reviewer.corrections_due()] == [delivery]
    assert world.reviewer.as_of(position=answered).corrections_due() == ()


def test_a_replacement_must_be_valid_and_not_the_delivered_record(world: World) -> None:
    delivery = _delivered_report(world)
    world.reviewer.revoke("E1", reason="withdrawn")
    world.agent.propose(scope="proj-a", claim_key="report", value="r2", kind=Kind.FACT, id="R2")
    position = world.ledger.position
    with pytest.raises(InvalidInputError, match="'R1' is the delivered record itself"):
        world.reviewer.issue_correction(delivery, note="x", replacement="R1")
    with pytest.raises(NotUsableError, match="'R2' is CANDIDATE"):
        world.reviewer.issue_correction(delivery, note="x", replacement="R2")
    assert world.ledger.position == position
    world.reviewer.accept("R2")
    world.reviewer.issue_correction(delivery, note="see R2", replacement="R2")
    assert world.reviewer.corrections_due() == ()


def test_listings_across_scopes_are_refused_without_the_role_not_answered_empty(
    world: World,
) -> None:
    from ledger.errors import AccessDeniedError

    with pytest.raises(AccessDeniedError, match="lacks role 'deliver' or 'audit' in every scope"):
        world.agent.corrections_due()
    with pytest.raises(AccessDeniedError, match="lacks role 'audit' in every scope"):
        world.agent.history()
    assert world.reviewer.corrections_due() == ()


def test_history_pages_with_a_limit_from_the_last_position_shown(world: World) -> None:
    # Given seven records, three accepted, in proj-a
    for n in range(7):
        world.agent.propose("proj-a", f"page.k{n}", n, Kind.FACT, id=f"P{n}")
    for n in range(3):
        world.reviewer.accept(f"P{n}")
    everything = world.reviewer.history()
    # When the auditor pages through three at a time
    pages = []
    start = None
    while page := world.reviewer.history(start=start, limit=3):
        pages.append(page)
        start = page[-1].position + 1
    # Then the pages are the whole history, in order, none longer than the limit
    assert [e for page in pages for e in page] == list(everything)
    assert [len(page) for page in pages] == [3, 3, 3, 1]
    # And a limit narrows filtered listings too, as-of sessions included
    accepted = world.reviewer.history(type="Accepted", limit=2)
    assert [e.details["record_id"] for e in accepted] == ["P0", "P1"]
    past = world.reviewer.as_of(position=everything[4].position)
    assert past.history(limit=10) == everything[:5]
    assert world.reviewer.history(record="P0", limit=1) == everything[:1]
    # and a limit beyond any log is no limit
    assert world.reviewer.history(limit=10**30) == everything


def test_iter_history_lists_one_snapshot_whatever_is_written_meanwhile(world: World) -> None:
    # Given events in proj-a and proj-b, both audited by the reviewer
    for n in range(6):
        world.agent.propose("proj-a" if n % 2 else "proj-b", f"snap.k{n}", n, Kind.FACT)
    everything = world.reviewer.history()
    with closing(world.reviewer.iter_history()) as events:
        first = next(events)
        if not world.ledger.url.startswith("memory"):
            # When the reviewer's audit role in proj-b is withdrawn, and more is
            # written, while the listing is under way (a file or server database:
            # the memory backend's writes wait for the reader)
            admin = world.ledger.admin()
            admin.revoke_grant("reviewer", "proj-b", ["audit"])
            world.agent.propose("proj-a", "snap.later", 1, Kind.FACT)
        rest = list(events)
    # Then the listing is the log as it was when it began, whole
    assert (first, *rest) == everything
    with pytest.raises(InvalidInputError, match="history type 'Nope'"):
        world.reviewer.iter_history(type="Nope")  # refused at once, not on first use


@pytest.mark.parametrize("limit", [0, -1, True, 2.0, "3"])
def test_a_history_limit_that_is_no_positive_count_is_refused_naming_it(
    world: World, limit: object
) -> None:
    with pytest.raises(InvalidInputError, match=rf"history limit {re.escape(repr(limit))} "):
        world.reviewer.history(limit=limit)  # type: ignore[arg-type]


# -- a bounded explanation -----------------------------------------------------------------


def _claim_with_history_and_junk(world: World) -> None:
    """proj-a/"shared" holds C0 (superseded by C2 last), X1 (accepted, expired), R1
    (revoked), C1 and C2 (usable, disagreeing), then 30 candidates J00..J29."""
    fields = {"scope": "proj-a", "claim_key": "shared", "kind": Kind.FACT}
    _accepted(world, "C0", value=0, **fields)
    expires = world.clock.now + timedelta(hours=1)
    _accepted(world, "X1", value="x", expires=expires, **fields)
    _accepted(world, "R1", value="r", **fields)
    world.reviewer.revoke("R1", reason="wrong")
    _accepted(world, "C1", value=1, **fields)
    _accepted(world, "C2", value=2, supersedes="C0", **fields)
    world.clock.advance(hours=2)
    world.agent.propose_many([{**fields, "value": i, "id": f"J{i:02d}"} for i in range(30)])


def test_a_bounded_explanation_shows_every_usable_record_and_the_others_once_accepted_first(
    world: World,
) -> None:
    _claim_with_history_and_junk(world)

    # When the claim is explained with at most 2, then 5 records that are not usable
    two = world.agent.explain("proj-a", "shared", limit=2)
    five = world.agent.explain("proj-a", "shared", limit=5)
    whole = world.agent.explain("proj-a", "shared")

    # Then the outcome is the one of every record: the usable C1 and C2 disagree
    assert two.outcome == five.outcome == whole.outcome == Outcome.CONFLICT
    # and both usable records are shown, with the two of those once accepted that
    # changed last (C0 superseded, R1 revoked) before the 30 candidates, in
    # proposal order
    assert [e.record.id for e in two.entries] == ["C0", "R1", "C1", "C2"]
    assert [e.usable for e in two.entries] == [False, False, True, True]
    assert two.omitted == 31
    # and a larger limit adds X1 (accepted, expired since), then the newest candidates
    assert [e.record.id for e in five.entries] == ["C0", "X1", "R1", "C1", "C2", "J28", "J29"]
    assert five.omitted == 28
    # and each entry says what the whole explanation says of it
    said = {e.record.id: e.reasons for e in whole.entries}
    assert all(e.reasons == said[e.record.id] for e in five.entries)
    # while the explanation without a limit still shows all 35 and leaves out none
    assert (len(whole.entries), whole.omitted) == (35, 0)
    assert "... and 31 more records, none usable, not shown" in str(two)
    assert "more records" not in str(whole)


def test_a_run_records_as_read_only_what_a_bounded_explanation_shows(world: World) -> None:
    _claim_with_history_and_junk(world)
    with world.agent.run("task-explain") as run:
        # When a run is shown the claim with at most one record that is not usable
        shown = run.explain("proj-a", "shared", limit=1)
        # Then it read those it was shown, none of the 31 left out
        assert [e.record.id for e in shown.entries] == ["C0", "C1", "C2"]
        assert sorted(run.reads) == ["C0", "C1", "C2"]
        rid = run.propose("proj-a", "plan", "p", Kind.PLAN)
    assert sorted(world.reviewer.get(rid).observed) == ["C1", "C2"]


def test_a_bounded_explanation_as_of_a_position_bounds_the_records_then(world: World) -> None:
    fields = {"scope": "proj-a", "claim_key": "then", "kind": Kind.FACT}
    _accepted(world, "T1", value=1, **fields)
    world.agent.propose_many([{**fields, "value": i, "id": f"K{i}"} for i in range(4)])
    position = world.ledger.position
    world.reviewer.revoke("T1", reason="later")

    # When the claim is explained as it stood before the revocation
    then = world.agent.as_of(position=position).explain("proj-a", "then", limit=1)

    # Then T1 was usable and one of its four candidates, the newest, is shown
    assert then.outcome == Outcome.FOUND
    assert [(e.record.id, e.usable) for e in then.entries] == [("T1", True), ("K3", False)]
    assert then.omitted == 3


@pytest.mark.parametrize("limit", [0, -1, True, 2.5, "3"])
def test_an_explanation_s_limit_must_be_a_positive_integer(world: World, limit: object) -> None:
    with pytest.raises(InvalidInputError, match=r"^limit .* is not a positive integer"):
        world.agent.explain("proj-a", "shared", limit=limit)  # type: ignore[arg-type]


def test_explain_says_what_a_candidates_acceptance_waits_for_or_is_refused_by(
    world: World,
) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="c", value=1, kind=Kind.FACT, id="C")
    agent.propose(
        scope="proj-a", claim_key="d", value=2, kind=Kind.INFERENCE, parents=["C"], id="D"
    )

    def reasons() -> tuple[str, ...]:
        [entry] = reviewer.explain(scope="proj-a", claim_key="d").entries
        return entry.reasons

    assert reasons() == (
        "candidate: not yet approved",
        "waits for its dependency 'C' (CANDIDATE) to be accepted",
    )
    reviewer.reject("C", reason="a guess")
    assert reasons() == (
        "candidate: not yet approved",
        "cannot be accepted while its dependency 'C' is REJECTED",
    )
    with pytest.raises(InvalidParentError, match="dependency 'C' of 'D' is REJECTED"):
        reviewer.accept("D")
