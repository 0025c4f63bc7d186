"""Verifiable evidence: signed tree heads, full verification, compliance bundles, erasure.

The attacks of ``tests/attacks.py`` run on SQLite and PostgreSQL, each checked
with and without the kept heads against what docs/evidence.md promises.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import os
import re
import sqlite3
import stat
import time
import zipfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import Kind, Ledger, Outcome, Status, Validity, merkle
from ledger.bundle import HIDDEN, verify_bundle, write_bundle
from ledger.cli import main
from ledger.domain import Record
from ledger.errors import (
    AccessDeniedError,
    CorruptEventError,
    InvalidHeadError,
    InvalidInputError,
    InvalidKeyError,
    InvalidTransitionError,
    LedgerError,
    SnapshotErasedError,
    UnknownSnapshotError,
)
from ledger.heads import (
    SignedHead,
    append_head,
    generate_key,
    load_heads,
    publish_head,
    sign_head,
    verify_head,
)

from .attacks import (
    ATTACKS,
    EXPECTED,
    Scene,
    append_event,
    build_scene,
    detect,
    forge,
    forged_accept,
    truncate,
)
from .conftest import Clock, World, _pg_dsn, aggregate_of

BACKENDS = ["sqlite", "postgres"]

#: Attack -> (words the problem names with kept heads, without), when detected.
PROBLEMS: dict[str, tuple[str | None, str | None]] = {
    "truncation": ("events were removed after it was taken", None),
    "truncation-views-left": (
        "events were removed after it was taken",
        "view pl_records differs from a replay of the log",
    ),
    "rewrite-before-head": ("the log was rewritten after it was taken", None),
    "forged-append-authorized": (None, None),
    "forged-append-unauthorized": (
        "'agent-1' did not hold 'approve' in scope 'proj-a'",
        "'agent-1' did not hold 'approve' in scope 'proj-a'",
    ),
    "view-edit": (
        "the row record_id='M1', from_pos=",
        "has status='ACCEPTED' where the replay has 'STALE'",
    ),
    "forged-grant": ("'ghost' held no valid token then", "'ghost' held no valid token then"),
    "forged-grant-kept": ("'ghost' held no valid token then", "'ghost' held no valid token then"),
    "forged-role": (
        "Accepted of 'G1' at position",
        "'agent-1' did not hold 'approve' in scope 'proj-a' then",
    ),
    "bytes-deleted": ("no erasure of them", "are missing, and the log records no erasure"),
    "untyped-event": ("no command writes Event events", "no command writes Event events"),
    "stale-elsewhere": (
        "the record does not rest on its cause 'E1'",
        "the record does not rest on its cause 'E1'",
    ),
    "unmarked-revocation": (
        "'P2' is ACCEPTED, yet its dependency 'P1' is REVOKED",
        "the log lacks the stale marking that withdrawing it makes",
    ),
    "event-removed": (
        "the log was rewritten after it was taken",
        "but version 2 is not in the log (an event was removed)",
    ),
    "last-event-removed": ("the log was rewritten after it was taken", None),
    "unappliable-event": (  # which the views cannot take either
        "it names 'd-never', which was no delivery of the record",
        "it names 'd-never', which was no delivery of the record",
    ),
    "revalidate-unexpired": (
        "the record was ACCEPTED and no record it rests on had expired",
        "the record was ACCEPTED and no record it rests on had expired",
    ),
    "superseded-by-nothing": (
        "it names 'NOPE' as the newer record, which was never proposed",
        "it names 'NOPE' as the newer record, which was never proposed",
    ),
    "accept-without-supersession": (
        "the log lacks the supersession that accepting it makes",
        "the log lacks the supersession that accepting it makes",
    ),
}


@pytest.fixture
def scene(open_ledger: Callable[..., Ledger], tmp_path: Path, clock: Clock) -> Scene:
    return build_scene(open_ledger(), tmp_path, clock)


# -- every attack, with and without kept heads ------------------------------------------


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_attack_is_detected_exactly_as_documented(scene: Scene, attack: str) -> None:
    # Given an untouched ledger that verifies with and without its kept heads
    assert detect(scene, with_heads=True).ok, detect(scene, with_heads=True).problem
    assert detect(scene, with_heads=False).ok

    # When someone with write access to the database runs the attack
    ATTACKS[attack][1](scene)

    # Then verify fails (or not) exactly as docs/evidence.md says, naming the problem
    for with_heads, expected, words in zip(
        (True, False), EXPECTED[attack], PROBLEMS[attack], strict=True
    ):
        report = detect(scene, with_heads)
        assert (not report.ok) == expected, (attack, with_heads, report.problem)
        if expected:
            assert words is not None and words in (report.problem or ""), report.problem


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
@pytest.mark.parametrize("event", ["Accepted", "Delivered"])
def test_an_acceptance_or_delivery_after_an_expiry_appended_behind_the_ledgers_back_is_named(
    scene: Scene, clock: Clock, event: str
) -> None:
    # Given P2 resting on P1, which expires in a minute, then expired
    scene.agent.propose(
        scope="proj-a", claim_key="x.p1", value=1, kind=Kind.FACT, id="P1",
        expires=clock.now + timedelta(minutes=1),
    )  # fmt: skip
    scene.reviewer.accept("P1")
    scene.agent.propose(
        scope="proj-a", claim_key="x.p2", value=2, kind=Kind.INFERENCE, parents=["P1"], id="P2"
    )
    if event == "Delivered":
        scene.reviewer.accept("P2")
    clock.advance(minutes=2)
    # (which the commands refuse)
    with pytest.raises(LedgerError, match="expired"):
        if event == "Accepted":
            scene.reviewer.accept("P2")
        else:
            scene.reviewer.deliver("P2", recipient="ops@x.test")

    # When the event is appended by the real approver, with a recomputed leaf
    fields: dict[str, Any] = (
        {"note": ""}
        if event == "Accepted"
        else {"delivery_id": "d-forged", "recipient": "ops@x.test", "channel": "api"}
    )
    position = forge(scene, "P2", getattr(Record, event), actor="reviewer", **fields)

    # Then verify names it, with and without kept heads
    for with_heads in (True, False):
        report = detect(scene, with_heads)
        assert not report.ok
        assert report.problem == (
            f"{event} of 'P2' at position {position}: a record it rests on had expired"
        )


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_a_supersession_by_a_record_of_another_line_appended_behind_the_ledgers_back_is_named(
    scene: Scene,
) -> None:
    # Given Z, a record of another claim, just accepted
    scene.agent.propose(scope="proj-a", claim_key="other", value=1, kind=Kind.FACT, id="Z")
    scene.reviewer.accept("Z")
    # When a Superseded of the candidate F1 naming Z is appended by the real approver
    position = forge(scene, "F1", Record.Superseded, actor="reviewer", by="Z")
    # Then verify names it: Z was proposed to replace nothing of F1's line
    for with_heads in (True, False):
        assert detect(scene, with_heads).problem == (
            f"Superseded of 'F1' at position {position}: the newer record 'Z' is no version of it"
        )


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_a_supersession_between_captures_of_the_same_bytes_appended_behind_the_back_is_named(
    scene: Scene,
) -> None:
    # Given a page captured twice, unchanged, both accepted (neither replaces the other)
    for rid in ("X1", "X1b"):
        scene.agent.capture(scope="proj-a", uri="https://x.test/same", content=b"s", id=rid)
        scene.reviewer.accept(rid)
    # When a Superseded of X1 by X1b is appended by the real approver
    position = forge(scene, "X1", Record.Superseded, actor="reviewer", by="X1b")
    # Then verify names it: no command writes that
    for with_heads in (True, False):
        assert detect(scene, with_heads).problem == (
            f"Superseded of 'X1' at position {position}: the newer record 'X1b' is no version of it"
        )


def delivered_report(scene: Scene) -> str:
    """Propose D1, accept it and deliver it (through the API); its delivery id."""
    scene.agent.propose(scope="proj-a", claim_key="report.d", value=1, kind=Kind.FACT, id="D1")
    scene.reviewer.accept("D1")
    return scene.reviewer.deliver("D1", recipient="ops@x.test")


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
@pytest.mark.parametrize("names", ["another record's delivery", "no delivery", "itself"])
def test_a_correction_of_no_delivery_of_its_record_appended_behind_the_ledgers_back_is_named(
    scene: Scene, names: str
) -> None:
    # Given D1 delivered (through the API) and F1, a record never delivered
    delivery = delivered_report(scene)
    record, delivery_id, replacement = {
        "another record's delivery": ("F1", delivery, None),
        "no delivery": ("D1", "d-none", None),
        "itself": ("D1", delivery, "D1"),  # replaced by the very record delivered
    }[names]
    # When a correction is appended by the real approver, with a recomputed leaf
    fields = {"correction_id": "c-forged", "note": "forged", "replacement": replacement}
    if names == "no delivery":  # the views cannot take it: catching up refuses it
        with pytest.raises(CorruptEventError, match="corrects delivery 'd-none', which was"):
            forge(scene, record, Record.CorrectionIssued, actor="reviewer", **fields,
                  delivery_id=delivery_id)  # fmt: skip
        position = scene.ledger.position
    else:
        position = forge(
            scene, record, Record.CorrectionIssued, actor="reviewer", **fields,
            delivery_id=delivery_id,
        )  # fmt: skip
    # Then verify names it, with and without kept heads
    what = f"CorrectionIssued of {record!r} at position {position}: "
    expected = (
        f"its replacement {replacement!r} is the record or was never proposed"
        if replacement is not None
        else f"it names {delivery_id!r}, which was no delivery of the record"
    )
    for with_heads in (True, False):
        assert detect(scene, with_heads).problem == what + expected


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
@pytest.mark.parametrize("repeated", ["delivery", "correction"])
def test_a_delivery_or_correction_repeating_an_earlier_id_appended_behind_the_back_is_named(
    scene: Scene, repeated: str
) -> None:
    # Given D1 delivered, and that delivery corrected (through the API)
    delivery = delivered_report(scene)
    correction = scene.reviewer.issue_correction(delivery, "figures were wrong")
    written = scene.ledger.position
    # When a second one with the same id is appended by the real deliverer (a
    # recomputed leaf): the views cannot take it, and catching up says why
    if repeated == "delivery":
        event = Record.Delivered
        fields = {"delivery_id": delivery, "recipient": "cfo@x.test", "channel": "email"}
        expected = f"its delivery id {delivery!r} is that of a delivery of 'D1'"
    else:
        event = Record.CorrectionIssued
        fields = {"correction_id": correction, "delivery_id": delivery, "note": "again"}
        fields["replacement"] = None
        expected = f"its correction id {correction!r} is that of a correction of 'D1'"
    with pytest.raises(CorruptEventError, match="or a stored event repeats an id an earlier"):
        forge(scene, "D1", event, actor="reviewer", **fields)
    # Then verify names it, with and without kept heads, and no head is signed over it
    what = f"{event.__name__} of 'D1' at position {written + 1}: "
    for with_heads in (True, False):
        assert detect(scene, with_heads).problem == what + expected
    before = scene.heads.read_text()
    with pytest.raises(LedgerError, match=expected):
        publish_head(scene.ledger, scene.key, scene.heads)
    assert scene.heads.read_text() == before


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
@pytest.mark.parametrize("later", ["revoke", "reject"])
def test_an_acceptance_without_its_supersession_is_named_though_the_old_version_went_later(
    scene: Scene, later: str
) -> None:
    # Given F3, a new version of the candidate F1, accepted behind the ledger's
    # back (the real approver, a recomputed leaf) without F1's supersession
    scene.agent.propose(
        scope="proj-a", claim_key="api.timeout", value=60, kind=Kind.FACT, id="F3",
        supersedes="F1",
    )  # fmt: skip
    accepted_at = forge(scene, "F3", Record.Accepted, actor="reviewer", note="")
    # When F1 is then withdrawn through the API, which leaves nothing for the end
    # of the log to show: both versions stood accepted in between
    if later == "revoke":
        scene.reviewer.revoke("F1", reason="old")
    else:
        scene.reviewer.reject("F1", reason="old")
    assert scene.reviewer.get("F1").status.value == ("REVOKED" if later == "revoke" else "REJECTED")
    # Then verify names the event after the acceptance, with and without kept heads
    for with_heads in (True, False):
        problem = detect(scene, with_heads).problem or ""
        assert problem.startswith(
            f"{'Revoked' if later == 'revoke' else 'Rejected'} of 'F1' at position "
            f"{accepted_at + 1}: the acceptance of 'F3' at position {accepted_at} just "
            "before lacks the supersession of 'F1'"
        ), problem


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_a_revalidation_of_an_expired_record_appended_behind_the_ledgers_back_is_named(
    scene: Scene, clock: Clock
) -> None:
    # Given X, resting on P, expiring in a minute; P revoked, so X is STALE; then
    # X expired (which the command refuses to revalidate)
    scene.agent.propose(scope="proj-a", claim_key="x.p", value=1, kind=Kind.FACT, id="P")
    scene.reviewer.accept("P")
    scene.agent.propose(
        scope="proj-a", claim_key="x.x", value=1, kind=Kind.FACT, parents=["P"], id="X",
        expires=clock.now + timedelta(minutes=1),
    )  # fmt: skip
    scene.reviewer.accept("X")
    scene.reviewer.revoke("P", reason="wrong")
    clock.advance(minutes=2)
    with pytest.raises(LedgerError, match="expired"):
        scene.reviewer.revalidate("X", note="again", parents=[])
    # When the revalidation is appended by the real approver
    position = forge(
        scene, "X", Record.Revalidated, actor="reviewer", note="forged", parents=(),
        observed=(), status="ACCEPTED",
    )  # fmt: skip
    # Then verify names it
    for with_heads in (True, False):
        assert detect(scene, with_heads).problem == (
            f"Revalidated of 'X' at position {position}: the record had expired"
        )


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_record_delivered_after_an_ancestor_was_re_based_past_its_expiry_verifies(
    world: World,
) -> None:
    # Given C resting on B resting on A, which expires in a minute
    agent, reviewer, clock = world.agent, world.reviewer, world.clock
    agent.propose(
        scope="proj-a", claim_key="a", value=1, kind=Kind.FACT, id="A",
        expires=clock.now + timedelta(minutes=1),
    )  # fmt: skip
    agent.propose(scope="proj-a", claim_key="a2", value=1, kind=Kind.FACT, id="A2")
    for rid, parent in (("A", None), ("A2", None), ("B", "A"), ("C", "B")):
        if parent is not None:
            agent.propose(
                scope="proj-a", claim_key=rid, value=1, kind=Kind.INFERENCE,
                parents=[parent], id=rid,
            )  # fmt: skip
        reviewer.accept(rid)
    reviewer.deliver("C", recipient="ops@x.test")  # worked out before A expires
    clock.advance(minutes=2)
    # When A has expired, B is given a new basis, and C is usable and delivered again
    reviewer.revalidate("B", note="re-based", parents=["A2"])
    reviewer.deliver("C", recipient="ops@x.test")
    # Then the log verifies: what C rests on was worked out again after the re-basing
    report = world.ledger.verify()
    assert report.ok, report.problem


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_truncation_undoes_a_revocation_and_only_a_kept_head_notices(scene: Scene) -> None:
    assert scene.agent.read(scope="proj-a", claim_key="api.retry_safe").outcome == Outcome.MISSING

    ATTACKS["truncation"][1](scene)

    # The revocation is gone: M1 is usable again, and the log alone looks fine
    assert scene.agent.read(scope="proj-a", claim_key="api.retry_safe").outcome == Outcome.FOUND
    assert scene.ledger.verify().ok
    # but the newest kept head describes more events than the log has
    report = detect(scene, with_heads=True)
    assert not report.ok and report.heads == 2
    assert report.problem is not None and report.problem.startswith(
        f"the log has {scene.ledger.digest().size} events; head 2 "
    )


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_a_forged_accept_by_a_real_approver_after_the_newest_head_passes_every_check(
    scene: Scene,
) -> None:
    # The one attack no log can show: a well-formed command by someone holding the role
    forged_accept(scene, "reviewer")
    assert scene.reviewer.get("F1").status == Status.ACCEPTED
    assert detect(scene, with_heads=True).ok and detect(scene, with_heads=False).ok


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_verifying_never_repairs_an_edited_view(scene: Scene) -> None:
    ATTACKS["view-edit"][1](scene)
    assert scene.reviewer.get("M1").status == Status.ACCEPTED  # the edit took effect

    assert not scene.ledger.verify().ok

    # The edited row is still there for the investigation: verify wrote nothing
    assert scene.reviewer.get("M1").status == Status.ACCEPTED
    assert not scene.ledger.rebuild().matched
    assert scene.reviewer.get("M1").status == Status.STALE


# -- authorization replay ---------------------------------------------------------------


def _world_scene(world: World, tmp_path: Path) -> Scene:
    from .attacks import Raw

    return Scene(
        ledger=world.ledger,
        raw=Raw(world.ledger),
        agent=world.agent,
        agent2=world.agent,
        reviewer=world.reviewer,
        reviewer_token="",
        key=tmp_path / "unused",
        public_key=tmp_path / "unused.pub",
        heads=tmp_path / "unused.jsonl",
        clock=world.clock,
    )


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("kind", ["principal", "run"])
def test_a_principal_or_run_event_of_a_type_no_command_writes_is_named(
    world: World, tmp_path: Path, kind: str
) -> None:
    from ledger.domain import Principal, Run, principal_uuid, run_uuid

    with world.agent.run("task-1") as run:
        run.read(scope="proj-a", claim_key="k")
    aggregate, cls = (
        (principal_uuid("reviewer"), Principal.Event)
        if kind == "principal"
        else (run_uuid(f"agent-1/{run.run_id}"), Run.Event)
    )
    scene = _world_scene(world, tmp_path)
    key = aggregate.hex if scene.raw.backend == "sqlite" else aggregate
    (row,) = scene.raw.one(
        "SELECT MAX(originator_version) FROM EVENTS WHERE originator_id=?", (key,)
    )
    event = cls(
        originator_id=aggregate, originator_version=int(row[0]) + 1, timestamp=world.clock()
    )

    position = append_event(scene, event)

    report = world.ledger.verify()
    assert not report.ok and report.first_bad_position == position
    assert f"Event at position {position}: no command writes Event events" in (report.problem or "")


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_an_event_after_its_actors_token_was_revoked_is_named(world: World, tmp_path: Path) -> None:
    admin = world.ledger.admin()
    token = admin.issue_token("approver-2")
    admin.grant("approver-2", scope="proj-a", roles=["approve", "read"])
    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="F1")
    admin.revoke_token(token)

    forged_accept(_world_scene(world, tmp_path), "approver-2")

    report = world.ledger.verify()
    assert not report.ok
    assert report.problem == (
        f"Accepted of 'F1' at position {world.ledger.position}: 'approver-2' held no valid "
        "token then"
    )
    assert report.first_bad_position == world.ledger.position


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_an_event_after_its_actors_token_expired_is_named(world: World, tmp_path: Path) -> None:
    admin = world.ledger.admin()
    admin.grant("approver-2", scope="proj-a", roles=["approve", "read"])
    admin.issue_token("approver-2", expires=world.clock.now + timedelta(hours=1))
    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="F1")
    world.clock.advance(hours=2)

    forged_accept(_world_scene(world, tmp_path), "approver-2")

    assert "'approver-2' held no valid token then" in (world.ledger.verify().problem or "")


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_status_the_machine_forbids_is_named(world: World, tmp_path: Path) -> None:
    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="F1")
    world.reviewer.reject("F1", reason="no")

    forged_accept(_world_scene(world, tmp_path), "reviewer")

    assert world.reviewer.get("F1").status == Status.ACCEPTED
    problem = world.ledger.verify().problem or ""
    assert problem.endswith("the record was REJECTED; that needs CANDIDATE"), problem


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_revalidation_of_an_accepted_record_without_a_new_basis_is_named(
    world: World, tmp_path: Path
) -> None:
    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="F1")
    world.reviewer.accept("F1")
    scene = _world_scene(world, tmp_path)
    version = len(world.reviewer.audit("F1").events)
    event = Record.Revalidated(
        originator_id=aggregate_of(world.ledger, "F1"),
        originator_version=version + 1,
        timestamp=world.clock(),
        actor="reviewer",
        note="",
        parents=None,
        observed=None,
        status=Status.ACCEPTED.value,
    )
    append_event(scene, event)

    problem = world.ledger.verify().problem or ""
    assert problem.endswith("the record was ACCEPTED; revalidating it needs a new basis"), problem


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_an_approval_of_ones_own_proposal_is_named(world: World, tmp_path: Path) -> None:
    world.ledger.admin().grant("agent-1", scope="proj-b", roles=["approve"])
    world.agent.propose(scope="proj-b", claim_key="k", value=1, kind=Kind.FACT, id="F1")

    forged_accept(_world_scene(world, tmp_path), "agent-1")

    problem = world.ledger.verify().problem or ""
    assert "'agent-1' approved its own proposal (separation of duties)" in problem


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_grant_appended_by_someone_other_than_the_admin_is_named(
    world: World, tmp_path: Path
) -> None:
    from ledger.domain import Principal, principal_uuid

    scene = _world_scene(world, tmp_path)
    rows = scene.raw.one(
        "SELECT MAX(originator_version) FROM EVENTS WHERE originator_id=?",
        (principal_uuid("agent-1").hex,),
    )
    event = Principal.Granted(
        originator_id=principal_uuid("agent-1"),
        originator_version=int(rows[0][0]) + 1,
        timestamp=world.clock.now,
        actor="agent-1",
        scope="proj-a",
        roles=("approve",),
    )
    position = append_event(scene, event)

    assert world.ledger.verify().problem == (
        f"Granted for 'agent-1' at position {position} was appended by 'agent-1', not by the admin"
    )


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_roles_from_the_log_ignore_forged_grant_and_token_rows(scene: Scene) -> None:
    from ledger.access import hash_token
    from ledger.access_log import access_from_log
    from ledger.errors import AuthenticationError

    engine = scene.ledger.engine
    reviewer_hash = hash_token(scene.reviewer_token)
    ghost_token = "plt_ghost"
    scene.raw.run(
        (
            "INSERT INTO pl_tokens (token_hash, subject, issued_pos, issued_at) "
            "VALUES (?, 'ghost', 1, 0)",
            (hash_token(ghost_token),),
        ),
        (
            "INSERT INTO pl_grants (subject, scope, role, from_pos, granted_at, granted_by) "
            "VALUES ('reviewer', 'proj-b', 'approve', 1, 0, 'admin')",
            (),
        ),
    )
    with engine.reading() as c:
        # The view now says the ghost holds a token and the reviewer approves in proj-b
        assert scene.ledger.authenticate(ghost_token).principal == "ghost"
        # the log says neither
        with pytest.raises(AuthenticationError, match="token is unknown"):
            access_from_log(engine, c, hash_token(ghost_token), scene.clock())
        roles = access_from_log(engine, c, reviewer_hash, scene.clock())
    assert roles == {"proj-a": ["approve", "audit", "deliver", "read"]}


def test_a_ledger_used_in_every_way_verifies_on_every_backend(world: World) -> None:
    agent, reviewer, led = world.agent, world.reviewer, world.ledger
    e1 = agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"doc", id="E1")
    e2 = agent.capture(scope="proj-a", uri="https://x.test/doc2", content=b"doc2", id="E2")
    reviewer.accept(e1)
    reviewer.accept(e2)
    with agent.run("task-1") as run:
        run.read(scope="proj-a", claim_key="source:https://x.test/doc")
        run.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.INFERENCE, id="M1")
    agent.propose(
        scope="proj-a", claim_key="r", value="r", kind=Kind.REPORT, parents=["M1"], id="R1"
    )
    reviewer.accept("M1")
    reviewer.accept("R1")
    delivery = reviewer.deliver("R1", recipient="ops@x.test")
    agent.propose(scope="proj-b", claim_key="x", value=2, kind=Kind.FACT, id="X1")
    reviewer.reject("X1", reason="no")
    reviewer.revoke(e1, reason="wrong")
    reviewer.issue_correction(delivery, note="E1 was wrong")
    reviewer.revalidate("M1", note="checked", parents=[e2])
    reviewer.revalidate("R1", note="checked")
    # supersession: an explicit new version, and a re-capture with other bytes
    agent.propose(
        scope="proj-a", claim_key="k", value=2, kind=Kind.INFERENCE, parents=[e2],
        supersedes="M1", id="M2",
    )  # fmt: skip
    reviewer.accept("M2")
    e3 = agent.capture(scope="proj-a", uri="https://x.test/doc2", content=b"doc2, v2", id="E3")
    reviewer.accept(e3)
    assert reviewer.get("E2").status == Status.SUPERSEDED
    assert reviewer.get("R1").status == Status.STALE
    led.admin().revoke_grant("outsider", scope="proj-b")

    report = led.verify()

    assert report.ok, report.problem
    assert report.checks == ("log", "authorization", "views", "evidence bytes")
    assert report.unchecked == ()


def test_a_record_revalidated_on_a_new_basis_once_its_basis_expired_verifies(
    world: World,
) -> None:
    agent, reviewer, led = world.agent, world.reviewer, world.ledger
    for rid, expires in (("E1", world.clock() + timedelta(days=1)), ("E2", None)):
        agent.capture(
            scope="proj-a", uri=f"https://x.test/{rid}", content=b"", id=rid, expires=expires
        )
        reviewer.accept(rid)
    agent.propose(
        scope="proj-a", claim_key="r", value="r", kind=Kind.REPORT, parents=["E1"], id="R1"
    )
    reviewer.accept("R1")
    world.clock.advance(days=2)
    reviewer.revalidate("R1", note="rebased", parents=["E2"])  # ACCEPTED, basis expired

    report = led.verify()

    assert report.ok, report.problem
    assert reviewer.get("R1").validity == Validity.VALID


# -- signed heads -------------------------------------------------------------------------


def test_keygen_writes_a_private_key_only_its_owner_can_read_and_refuses_to_overwrite(
    tmp_path: Path,
) -> None:
    key_id = generate_key(tmp_path / "k")
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o600
    assert (tmp_path / "k.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    assert len(key_id) == 64
    with pytest.raises(InvalidKeyError, match="already exists; refusing to overwrite"):
        generate_key(tmp_path / "k")
    with pytest.raises(InvalidKeyError, match=r"not an Ed25519 private key|not an unencrypted"):
        sign_head(tmp_path / "k.pub", Ledger.open("memory:").digest(), Clock().now)


def test_a_signed_head_round_trips_through_json_and_any_changed_field_fails(
    tmp_path: Path, clock: Clock
) -> None:
    generate_key(tmp_path / "k")
    digest = merkle.LogDigest(size=7, position=9, root="ab" * 32)
    head = sign_head(tmp_path / "k", digest, clock.now)

    again = SignedHead.from_json(head.dumps())
    assert again == head and again.digest == digest
    assert verify_head(again, tmp_path / "k.pub")
    for field, value in (
        ("tree_size", 8),
        ("position", 10),
        ("root", "cd" * 32),
        ("time", (clock.now + timedelta(microseconds=1)).isoformat()),
    ):
        data = head.to_json()
        data[field] = value
        assert not verify_head(SignedHead.from_json(data), tmp_path / "k.pub"), field
    respelt = other_spelling(head.signature.encode()).decode()
    assert not verify_head(dataclasses.replace(head, signature=respelt), tmp_path / "k.pub")
    generate_key(tmp_path / "other")
    assert not verify_head(head, tmp_path / "other.pub")


@pytest.mark.parametrize(
    ("size", "position", "root", "refusal"),
    [
        (261, 258, "ab" * 32, "position 258 is below its tree_size 261: event number 261"),
        (1, 0, "ab" * 32, "position 0 is below its tree_size 1"),
        (0, 5, merkle.EMPTY_ROOT.hex(), "of tree_size 0 is at position 5 with root e3b0c442"),
        (0, 0, "ab" * 32, "of tree_size 0 is at position 0 with root abababab"),
    ],
)
def test_a_signed_head_no_log_can_have_is_refused_even_signed_by_the_key(
    tmp_path: Path, clock: Clock, size: int, position: int, root: str, refusal: str
) -> None:
    # Given a head signed with the ledger's own key over fields no log can have
    # (the n-th event is at position n or later; an empty log at 0, its root the
    # empty tree's): only the key's holder can sign one, so the signature passes
    generate_key(tmp_path / "k")
    head = sign_head(tmp_path / "k", merkle.LogDigest(size, position, root), clock.now)
    # Then reading it refuses it, naming the fields that cannot go together
    with pytest.raises(InvalidHeadError, match=re.escape(refusal)):
        SignedHead.from_json(head.dumps())
    # And the empty log's own head reads
    empty = sign_head(tmp_path / "k", merkle.LogDigest(0, 0, merkle.EMPTY_ROOT.hex()), clock.now)
    assert SignedHead.from_json(empty.dumps()) == empty


def test_a_malformed_heads_file_line_is_refused_by_number(tmp_path: Path, clock: Clock) -> None:
    generate_key(tmp_path / "k")
    heads = tmp_path / "heads.jsonl"
    append_head(heads, sign_head(tmp_path / "k", merkle.LogDigest(1, 1, "00" * 32), clock.now))
    with heads.open("a") as out:
        out.write('{"version": 1, "tree_size": -1}\n')
    with pytest.raises(InvalidHeadError, match=r"heads.jsonl line 2: the signed head lacks"):
        load_heads(heads)


def test_a_head_appended_to_a_file_cut_short_of_its_newline_gets_its_own_line(
    tmp_path: Path, clock: Clock
) -> None:
    generate_key(tmp_path / "k")
    first = sign_head(tmp_path / "k", merkle.LogDigest(1, 1, "00" * 32), clock.now)
    second = sign_head(tmp_path / "k", merkle.LogDigest(2, 2, "11" * 32), clock.now)
    heads = tmp_path / "heads.jsonl"
    heads.write_text(first.dumps())  # kept by hand, no newline at the end
    append_head(heads, second)
    assert load_heads(heads) == (first, second)
    assert heads.read_text() == first.dumps() + "\n" + second.dumps() + "\n"
    append_head(heads, first)  # a file that ends its line gets no blank one
    assert heads.read_text().count("\n") == 3 and load_heads(heads) == (first, second, first)


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_verifying_against_a_heads_file_that_holds_no_head_is_refused(
    scene: Scene, tmp_path: Path
) -> None:
    emptied = tmp_path / "emptied.jsonl"
    emptied.write_text("\n")
    with pytest.raises(InvalidHeadError, match=r"emptied.jsonl' holds no signed head"):
        scene.ledger.verify(heads=emptied, public_key=scene.public_key)
    assert scene.ledger.verify(heads=scene.heads, public_key=scene.public_key).ok


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_a_head_is_not_appended_once_the_log_no_longer_extends_the_newest(scene: Scene) -> None:
    before = scene.heads.read_text()
    ATTACKS["truncation"][1](scene)

    with pytest.raises(
        InvalidHeadError,
        match=r"not appended to .*events were removed.*; if that was a restore you made, "
        r"append to a new heads file from now on and keep this one as the record",
    ):
        publish_head(scene.ledger, scene.key, scene.heads)

    assert scene.heads.read_text() == before


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_a_head_is_appended_while_the_log_extends_the_newest(scene: Scene) -> None:
    # Given a ledger that grew after its newest kept head
    kept = load_heads(scene.heads)
    scene.agent.propose(scope="proj-a", claim_key="later", value=1, kind=Kind.FACT)

    # When a head is published, it is appended, over the longer log
    head = publish_head(scene.ledger, scene.key, scene.heads)
    assert load_heads(scene.heads) == (*kept, head)
    assert head.digest == scene.ledger.digest() and head.digest.size > kept[-1].digest.size
    assert scene.ledger.verify(heads=scene.heads, public_key=scene.public_key).ok


def _publish_heads(url: str, key: str, heads: str, times: int) -> None:
    """Child: publish ``times`` heads of the ledger at ``url`` to ``heads``."""
    with Ledger.open(url) as led:
        for _ in range(times):
            publish_head(led, key, heads)


def test_heads_published_at_once_are_appended_in_the_order_they_were_signed(
    tmp_path: Path,
) -> None:
    # Given three head-signing jobs at once (a schedule, a revocation, a
    # delivery) on one heads file, while the ledger grows
    import multiprocessing

    url = f"sqlite:///{tmp_path / 'l.db'}"
    key, heads = tmp_path / "key", tmp_path / "heads.jsonl"
    generate_key(key)
    with Ledger.open(url) as led:
        led.admin().grant("agent-1", scope="p", roles=["propose"])
        agent = led.authenticate(led.admin().issue_token("agent-1"))
        spawn = multiprocessing.get_context("spawn")
        jobs = [
            spawn.Process(target=_publish_heads, args=(url, str(key), str(heads), 25))
            for _ in range(3)
        ]
        for job in jobs:
            job.start()
        n = 0
        while any(job.is_alive() for job in jobs):
            agent.propose(scope="p", claim_key=f"k{n}", value=n, kind=Kind.FACT)
            n += 1
        for job in jobs:
            job.join()
        assert [job.exitcode for job in jobs] == [0, 0, 0]

        # Then the file holds every head, in the order of their tree sizes and
        # times, and the untouched ledger verifies against them
        kept = load_heads(heads)
        assert len(kept) == 75
        assert [h.digest.size for h in kept] == sorted(h.digest.size for h in kept)
        assert [h.time for h in kept] == sorted(h.time for h in kept)
        report = led.verify(heads=heads, public_key=tmp_path / "key.pub")
        assert report.ok, report.problem


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("forge", "refusal"),
    [
        (
            lambda d: merkle.LogDigest(d.size, d.position, "00" * 32),
            r"the first \d+ events do not match the newest kept head .*: the log was rewritten",
        ),
        (
            lambda d: merkle.LogDigest(d.size, d.position + 7, d.root),
            r"the newest kept head .* ends at log position \d+, but its last event is at",
        ),
    ],
)
def test_a_head_is_not_appended_over_a_newest_head_the_log_does_not_extend(
    scene: Scene, forge: Callable[[merkle.LogDigest], merkle.LogDigest], refusal: str
) -> None:
    # Given a heads file whose newest head (signed with the ledger's key) says
    # something else than the log about the same events
    append_head(scene.heads, sign_head(scene.key, forge(scene.ledger.digest()), scene.clock()))
    before = scene.heads.read_text()

    # When a head is published, it is refused, naming the head and what differs
    with pytest.raises(InvalidHeadError, match=refusal):
        publish_head(scene.ledger, scene.key, scene.heads)
    assert scene.heads.read_text() == before


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_heads_need_their_key_and_a_foreign_or_forged_head_is_named(scene: Scene) -> None:
    led = scene.ledger
    with pytest.raises(InvalidInputError, match="needs the public key"):
        led.verify(heads=scene.heads)

    # A head signed with another key
    generate_key(scene.key.parent / "other")
    foreign = led.signed_head(scene.key.parent / "other")
    report = led.verify(heads=[*load_heads(scene.heads), foreign], public_key=scene.public_key)
    assert report.problem is not None and report.problem.startswith("head 3 (tree size ")
    assert "was signed by key" in report.problem

    # A head whose root was edited in the heads file
    kept = load_heads(scene.heads)
    data = kept[0].to_json()
    data["root"] = "00" * 32
    report = led.verify(heads=[SignedHead.from_json(data), kept[1]], public_key=scene.public_key)
    assert report.problem is not None and report.problem.endswith("the signature does not verify")

    # A head the key signed whose key_id alone was edited (it is not signed for):
    # named as altered, not as another key's
    data = kept[0].to_json()
    data["key_id"] = "00" * 32
    report = led.verify(heads=[SignedHead.from_json(data), kept[1]], public_key=scene.public_key)
    assert report.problem is not None
    assert report.problem.startswith("head 1 (tree size ")
    assert ": its key_id was altered to 0000000000000000…; its signature is the given " in (
        report.problem
    )

    # Heads in the wrong order in the file (the later one first): named as such
    scene.clock.advance(hours=1)
    scene.agent.propose(scope="proj-a", claim_key="later", value=1, kind=Kind.FACT)
    later = led.signed_head(scene.key)
    report = led.verify(heads=[later, kept[1]], public_key=scene.public_key)
    assert report.failed_checks == ("heads",)
    assert report.problem is not None and report.problem.startswith("head 2 (tree size 18, ")
    assert "and was signed before it" in report.problem and "out of order" in report.problem
    # A larger head signed at an earlier time (the clock stepped back): in order
    scene.clock.advance(hours=-3)
    scene.agent.propose(scope="proj-a", claim_key="earlier", value=1, kind=Kind.FACT)
    stepped_back = led.signed_head(scene.key)
    report = led.verify(heads=[*kept, later, stepped_back], public_key=scene.public_key)
    assert report.ok, report.problem
    # A later head of a smaller tree: the log was cut back between them (tampering)
    truncate(scene)
    scene.clock.advance(hours=5)
    shorter = led.signed_head(scene.key)
    report = led.verify(heads=[*kept, shorter], public_key=scene.public_key)
    assert "consistency" in report.failed_checks and "heads" not in report.failed_checks
    assert "head 3 (" in (report.problem or "")
    assert "the log was cut back between them" in (report.problem or "")
    # A public key without heads to check is refused, not ignored
    with pytest.raises(InvalidInputError, match="give the heads it signed too"):
        led.verify(public_key=scene.public_key)


def test_merkle_tree_proofs_equal_the_rfc_6962_definitions() -> None:
    leaves = [merkle.leaf_hash(str(i).encode()) for i in range(70)]
    tree = merkle.MerkleTree(leaves)
    for size in range(71):
        assert tree.root(size) == merkle.root_of(leaves[:size])[1]
        for m in range(size + 1):
            path = tree.consistency_path(m, size)
            assert path == merkle.consistency_path(leaves[:size], m)
            if 0 < m < size:
                assert merkle.verify_consistency(m, size, tree.root(m), tree.root(size), path)
                assert not merkle.verify_consistency(m, size, tree.root(m), tree.root(size), [])
        for index in range(size):
            assert tree.inclusion_path(index, size) == merkle.inclusion_path(leaves[:size], index)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=2, max_value=300), st.data())
def test_a_consistency_proof_fails_for_any_changed_leaf_before_the_old_size(
    n: int, data: st.DataObject
) -> None:
    leaves = [merkle.leaf_hash(str(i).encode()) for i in range(n)]
    m = data.draw(st.integers(min_value=1, max_value=n - 1))
    victim = data.draw(st.integers(min_value=0, max_value=m - 1))
    old_root = merkle.MerkleTree(leaves).root(m)
    changed = list(leaves)
    changed[victim] = merkle.leaf_hash(b"forged")
    tree = merkle.MerkleTree(changed)
    assert not merkle.verify_consistency(m, n, old_root, tree.root(), tree.consistency_path(m))


# -- compliance bundles -------------------------------------------------------------------


@pytest.fixture
def bundled(world: World, tmp_path: Path) -> tuple[World, Path, Path]:
    """R1 ← M1 ← {E1, HIDDEN-SRC-7}, HIDDEN-SRC-7 in proj-b where the reviewer may not
    audit; R1's bundle."""
    agent, reviewer = world.agent, world.reviewer
    world.ledger.admin().revoke_grant("reviewer", scope="proj-b", roles=["audit"])
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"retries ok", id="E1")
    agent.capture(scope="proj-b", uri="https://secret.test/h", content=b"secret", id="HIDDEN-SRC-7")
    for rid in ("E1", "HIDDEN-SRC-7"):
        reviewer.accept(rid)
    agent.propose(
        scope="proj-a",
        claim_key="api.retry",
        value=True,
        kind=Kind.INFERENCE,
        parents=["E1", "HIDDEN-SRC-7"],
        id="M1",
    )
    agent.propose(
        scope="proj-a",
        claim_key="report.w",
        value="ok",
        kind=Kind.REPORT,
        parents=["M1"],
        id="R1",
    )
    reviewer.accept("M1")
    reviewer.accept("R1")
    generate_key(tmp_path / "k")
    write_bundle(reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    return world, tmp_path / "r1.zip", tmp_path / "k.pub"


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_a_bundle_verifies_offline_with_no_ledger(bundled: tuple[World, Path, Path]) -> None:
    world, path, public = bundled
    digest = world.ledger.digest()  # nothing was written since the bundle
    world.ledger.close()
    if world.ledger.backend == "sqlite":
        Path(world.ledger.url[len("sqlite:///") :]).unlink()

    report = verify_bundle(path, public)

    assert report.ok, report.problem
    assert report.record == "R1" and report.trusted_key
    # its signed head is the ledger's digest when it was written
    assert report.head is not None and report.head.digest == digest
    assert report.events == 5 and report.withheld == 1 and report.hidden == 1
    archive = zipfile.ZipFile(path)
    summary = archive.read("summary.txt").decode()
    assert "proposed:  by agent-1" in summary and "approved:  by reviewer" in summary
    assert "ancestry:  M1 (inference, ACCEPTED), E1 (evidence, ACCEPTED), <hidden>" in summary
    assert "evidence:  E1: https://x.test/doc" in summary


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_shows_the_basis_a_record_held_before_its_revalidation(
    world: World, tmp_path: Path
) -> None:
    # Given R1 delivered while M1 rested on E1, then E1 revoked and M1 re-based on E2
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"v1", id="E1")
    reviewer.accept("E1")
    agent.propose(scope="proj-a", claim_key="m", value=1, kind=Kind.FACT, parents=["E1"], id="M1")
    agent.propose(scope="proj-a", claim_key="r", value=2, kind=Kind.REPORT, parents=["M1"], id="R1")
    reviewer.accept("M1")
    reviewer.accept("R1")
    reviewer.deliver("R1", recipient="ops@x.test")
    reviewer.revoke("E1", reason="page changed")
    agent.capture(scope="proj-a", uri="https://x.test/doc2", content=b"v2", id="E2")
    reviewer.accept("E2")
    reviewer.revalidate("M1", note="re-based", parents=["E2"])
    revalidation = world.ledger.position
    generate_key(tmp_path / "k")

    info = write_bundle(reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")

    # Then the bundle holds E1, what R1 rested on when it was delivered, with its
    # events, and its PROV keeps that derivation, replaced by the revalidation;
    # the new basis derives M1 on that basis (an entity the revalidation generated)
    assert set(info.records) == {"R1", "M1", "E1", "E2"}
    assert verify_bundle(tmp_path / "r1.zip", tmp_path / "k.pub").ok
    archive = zipfile.ZipFile(tmp_path / "r1.zip")
    summary = archive.read("summary.txt").decode()
    assert "evidence:  E1: https://x.test/doc fetched" in summary and "REVOKED" in summary
    manifest = json.loads(archive.read("manifest.json"))
    assert ("E1", "Revoked") in {(e["record"], e["type"]) for e in manifest["events"]}
    prov = json.loads(archive.read("prov.json"))
    derived = {
        (d["prov:generatedEntity"], d["prov:usedEntity"]): d
        for d in prov["wasDerivedFrom"].values()
    }
    assert derived[("rec:M1", "rec:E1")]["pl:replacedBy"]["$"] == f"act:revalidate-{revalidation}"
    on_e2 = derived[(f"basis:M1.{revalidation}", "rec:E2")]
    assert "pl:replacedBy" not in on_e2
    assert on_e2["prov:activity"] == f"act:revalidate-{revalidation}"
    assert ("rec:M1", "rec:E2") not in derived


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_bundle_names_no_hidden_record_anywhere(bundled: tuple[World, Path, Path]) -> None:
    _world, path, _public = bundled
    archive = zipfile.ZipFile(path)
    for name in archive.namelist():
        content = archive.read(name)
        assert (
            b"HIDDEN-SRC-7" not in content and b"proj-b" not in content and b"secret" not in content
        ), name
    manifest = json.loads(archive.read("manifest.json"))
    assert {"id": HIDDEN} in manifest["records"]
    withheld = [e for e in manifest["events"] if e["file"] is None]
    assert [(e["record"], e["type"]) for e in withheld] == [("M1", "Proposed")]
    prov = json.loads(archive.read("prov.json"))
    assert prov["entity"]["pl:hidden"] == {"prov:label": HIDDEN}
    from prov.model import ProvDocument

    assert ProvDocument.deserialize(content=archive.read("prov.json").decode(), format="json")


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_any_altered_byte_of_a_bundle_fails(bundled: tuple[World, Path, Path]) -> None:
    _world, path, public = bundled
    original = path.read_bytes()
    altered = path.with_name("altered.zip")
    # Every byte of the archive's central directory, end record and signature, and
    # random bytes elsewhere (every byte of this bundle, four masks each, was checked
    # once by hand; too slow to repeat on every run)
    tail = range(original.index(b"PK\x01\x02"), len(original))

    def check(offset: int, mask: int) -> None:
        data = bytearray(original)
        data[offset] ^= mask
        altered.write_bytes(bytes(data))
        report = verify_bundle(altered, public)
        assert not report.ok and report.problem, (offset, mask)

    for offset in tail:
        check(offset, 0x01)

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.integers(0, len(original) - 1), st.integers(1, 255))
    def anywhere(offset: int, mask: int) -> None:
        check(offset, mask)

    anywhere()


#: Base64 digits in order: a digit's value is its index.
B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def other_spelling(text: bytes) -> bytes:
    """``text`` (base64 of 64 bytes, ending ``X==``) with the 2 bits of ``X`` that
    encode nothing changed: another spelling of the same bytes."""
    assert text.endswith(b"==")
    digit = B64.index(text[-3:-2])
    return text[:-3] + B64[digit ^ 1 : (digit ^ 1) + 1] + b"=="


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_bundle_whose_signature_is_spelt_otherwise_fails(
    bundled: tuple[World, Path, Path],
) -> None:
    _world, path, public = bundled
    original = path.read_bytes()
    altered = path.with_name("respelt.zip")
    altered.write_bytes(other_spelling(original))
    assert base64.b64decode(original[-88:]) == base64.b64decode(other_spelling(original)[-88:])

    report = verify_bundle(altered, public)

    assert not report.ok and report.problem


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_an_altered_file_in_a_bundle_is_named(bundled: tuple[World, Path, Path]) -> None:
    _world, path, _public = bundled
    members = {n: zipfile.ZipFile(path).read(n) for n in zipfile.ZipFile(path).namelist()}
    members["summary.txt"] = members["summary.txt"].replace(b"reviewer", b"reviewex")
    rebuilt = path.with_name("rebuilt.zip")
    with zipfile.ZipFile(rebuilt, "w") as out:
        for name, content in members.items():
            out.writestr(name, content)
    report = verify_bundle(rebuilt)
    assert report.problem == "summary.txt was altered: its SHA-256 does not match the manifest"


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_bundle_re_signed_with_another_key_fails_only_against_the_trusted_key(
    bundled: tuple[World, Path, Path], tmp_path: Path
) -> None:
    world, _path, public = bundled
    # An attacker with their own key writes a complete, self-consistent bundle
    generate_key(tmp_path / "attacker")
    forged = tmp_path / "forged.zip"
    write_bundle(world.reviewer, "R1", tmp_path / "attacker", forged)

    assert verify_bundle(forged).ok  # consistent with the key it carries
    report = verify_bundle(forged, public)  # the key the auditor holds
    assert not report.ok
    assert report.problem is not None and report.problem.startswith("the bundle was signed by key")


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_bundle_needs_the_audit_role(world: World, tmp_path: Path) -> None:
    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="F1")
    generate_key(tmp_path / "k")
    with pytest.raises(AccessDeniedError, match="lacks role 'audit'"):
        write_bundle(world.agent, "F1", tmp_path / "k", tmp_path / "f1.zip")
    assert not (tmp_path / "f1.zip").exists()


def test_a_garbage_file_is_not_a_bundle(tmp_path: Path) -> None:
    (tmp_path / "x.zip").write_bytes(b"not a zip")
    report = verify_bundle(tmp_path / "x.zip")
    assert (
        not report.ok
        and report.problem
        == f"{tmp_path / 'x.zip'} is not a readable zip archive (File is not a zip file)"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "hi")
    (tmp_path / "y.zip").write_bytes(buffer.getvalue())
    assert verify_bundle(tmp_path / "y.zip").problem == "the bundle lacks manifest.json"


# -- erasure --------------------------------------------------------------------------------


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_erasing_a_snapshot_removes_the_bytes_and_keeps_the_log_verifiable(scene: Scene) -> None:
    led, reviewer = scene.ledger, scene.reviewer
    ref = (reviewer.get("E1").evidence or {})["snapshot_ref"]
    before = {rid: reviewer.get(rid).status for rid in ("E1", "M1")}

    erased = led.admin().erase_snapshot(ref, reason="erasure request 2026-114")

    # The bytes are gone, and reading them names the erasure
    assert erased.records == ("E1",) and erased.deleted
    assert scene.raw.one("SELECT COUNT(*) FROM pl_snapshots WHERE ref=?", (ref,)) == [(0,)]
    with pytest.raises(
        SnapshotErasedError, match=r"erased .* by 'admin' .*erasure request 2026-114"
    ):
        scene.agent.snapshot(ref)
    # the records keep their status, the erasure is in E1's audit trail
    assert {rid: reviewer.get(rid).status for rid in ("E1", "M1")} == before
    last = reviewer.audit("E1").events[-1]
    assert (last.type, last.actor, last.details["reason"]) == (
        "SnapshotErased",
        "admin",
        "erasure request 2026-114",
    )
    assert [e.type for e in reviewer.history(type="SnapshotErased")] == ["SnapshotErased"]
    from ledger.prov import export_text

    prov = json.loads(export_text(reviewer, record="E1"))
    erasure = prov["activity"][f"act:erase-snapshot-{erased.position}"]
    assert erasure["pl:reason"] == "erasure request 2026-114" and erasure["pl:snapshotRef"] == ref
    # and everything still verifies, kept heads included
    report = detect(scene, with_heads=True)
    assert report.ok, report.problem
    # A second erasure is refused by name
    with pytest.raises(SnapshotErasedError, match="was erased at"):
        led.admin().erase_snapshot(ref, reason="again")


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_erased_bytes_leave_the_database_files_not_only_the_table(scene: Scene) -> None:
    # Given bytes captured and checkpointed into the database's file
    personal = b"".join(b"personal-%06d;" % i for i in range(2000))  # pages of them
    scene.agent.capture(scope="proj-a", uri="https://docs.test/p", content=personal, id="P1")
    ref = (scene.reviewer.get("P1").evidence or {})["snapshot_ref"]
    if scene.raw.backend == "sqlite":
        files = [Path(scene.raw.path), Path(f"{scene.raw.path}-wal")]
        with sqlite3.connect(scene.raw.path) as con:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert b"personal-001999;" in files[0].read_bytes()
    else:
        filenode = "SELECT pg_relation_filenode('pl_snapshots')"
        before = scene.raw.one(filenode)

    # When they are erased
    erased = scene.ledger.admin().erase_snapshot(ref, reason="erasure request 2026-115")

    # Then no file of the database holds them any more: SQLite's pages were
    # zeroed and its -wal emptied; PostgreSQL's table was rewritten. (PostgreSQL
    # says it is not sure while any transaction of the database older than the
    # erasure is open, another program's say, as on a database other tests share;
    # scrubbing again once that one has ended says it is.)
    scrubbed = erased.scrubbed
    for _ in range(0 if scene.raw.backend == "sqlite" else 40):
        if scrubbed:
            break
        time.sleep(0.25)
        scrubbed = scene.ledger.admin().scrub_erased()
    assert erased.deleted and scrubbed
    if scene.raw.backend == "sqlite":
        for path in files:
            assert not path.exists() or b"personal-" not in path.read_bytes(), path
    else:
        assert scene.raw.one(filenode) != before
    assert scene.ledger.verify().ok


def test_an_erasure_asked_again_after_its_scrub_never_ran_scrubs_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an erasure that committed but whose scrub never ran (its process died
    # between the two): the bytes stay in the -wal, and verify has nothing to say
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        agent.capture(scope="proj-a", uri="https://docs.test/p", content=b"personal-1", id="P1")
        ref = (agent.get("P1").evidence or {})["snapshot_ref"]
        recorder = led.engine.recorder
        with monkeypatch.context() as patched:
            patched.setattr(recorder, "scrub_deleted", lambda position: False)
            assert admin.erase_snapshot(ref, reason="request 1").scrubbed is False
        wal = tmp_path / "l.db-wal"
        assert b"personal-1" in wal.read_bytes()

        # When the operator, who got no answer, asks for it again
        with pytest.raises(SnapshotErasedError) as refused:
            admin.erase_snapshot(ref, reason="request 1")

        # Then it is refused as done, and what the files held is scrubbed now
        assert f"snapshot {ref!r} was erased at" in str(refused.value)
        assert str(refused.value).endswith("the database's files are scrubbed of its bytes now")
        files = [tmp_path / "l.db", wal]
        assert not any(f.exists() and b"personal-1" in f.read_bytes() for f in files)


def test_an_erasure_a_reader_keeps_from_the_wal_says_so(tmp_path: Path) -> None:
    # Given a reader in another connection holding a snapshot that predates it
    url = f"sqlite:///{tmp_path / 'l.db'}?timeout=1"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        agent.capture(scope="proj-a", uri="https://docs.test/p", content=b"personal", id="P1")
        ref = (agent.get("P1").evidence or {})["snapshot_ref"]
        assert admin.scrub_erased()  # nothing erased yet: nothing to scrub
        reader = sqlite3.connect(tmp_path / "l.db")
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM pl_snapshots").fetchone()
        files = [tmp_path / "l.db", tmp_path / "l.db-wal"]
        try:
            # When the bytes are erased, the -wal cannot be emptied under it
            erased = admin.erase_snapshot(ref, reason="request")
            # and scrubbing again while the reader holds on fails too
            again = admin.scrub_erased()
            held = [b"personal" in path.read_bytes() for path in files]
        finally:
            reader.rollback()
            reader.close()
        # Then the erasure happened and says the files still hold them
        assert erased.deleted and not erased.scrubbed
        assert not again and any(held)
        with pytest.raises(SnapshotErasedError):
            agent.snapshot(ref)
        # Once the reader has ended, scrubbing again leaves them in no file,
        # and writes nothing to the log
        position = led.position
        assert admin.scrub_erased()
        for path in files:
            assert not path.exists() or b"personal" not in path.read_bytes(), path
        assert led.position == position and led.verify().ok


def test_bytes_moved_by_later_writes_leave_no_copy_an_erasure_misses(tmp_path: Path) -> None:
    # Given a process that erased once already, then captured personal bytes
    # and enough more evidence after them that their table's pages split
    # (each split moves cells to new pages; freed space not zeroed keeps copies)
    path = tmp_path / "l.db"
    with Ledger.open(f"sqlite:///{path}") as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        agent.capture(scope="proj-a", uri="https://docs.test/d", content=b"other", id="D1")
        admin.erase_snapshot((agent.get("D1").evidence or {})["snapshot_ref"], "request 1")
        agent.capture(scope="proj-a", uri="https://docs.test/p", content=b"personal;" * 40, id="P1")
        for i in range(40):
            agent.capture(scope="proj-a", uri=f"https://docs.test/{i}", content=b"%0600d" % i)
        ref = (agent.get("P1").evidence or {})["snapshot_ref"]

        # When they are erased
        erased = admin.erase_snapshot(ref, "request 2")

        # Then no file of the database holds a copy of them
        assert erased.scrubbed
        for name in ("l.db", "l.db-wal"):
            file = tmp_path / name
            assert not file.exists() or file.read_bytes().count(b"personal;") == 0, name
        assert led.verify().ok


def _captured_personal(url: str) -> str:
    """A ledger at ``url`` with personal bytes captured; their snapshot ref."""
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        agent.capture(scope="proj-a", uri="https://docs.test/p", content=b"personal", id="P1")
        return str((agent.get("P1").evidence or {})["snapshot_ref"])


def test_on_postgresql_no_planner_statistics_keep_erased_bytes(pg_url: str) -> None:
    import psycopg

    schema = pg_url.rsplit("schema=", 1)[1]
    stats = (
        "SELECT COUNT(*) FROM pg_stats WHERE schemaname = %s AND tablename = 'pl_snapshots' "
        "AND attname = 'content'"
    )
    with Ledger.open(pg_url) as led, psycopg.connect(_pg_dsn(), autocommit=True) as db:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        for i in range(80):  # short captures, as ANALYZE samples them
            agent.capture("proj-a", uri=f"https://d.test/{i}", content=b"PII-%03d Jane" % i)
        # Given a new ledger: ANALYZE (autovacuum's) takes no statistics of the bytes
        db.execute(f"ANALYZE {schema}.pl_snapshots")
        assert db.execute(stats, (schema,)).fetchone() == (0,)
        # Given one created before this version, whose statistics hold a sample
        db.execute(f"ALTER TABLE {schema}.pl_snapshots ALTER COLUMN content SET STATISTICS -1")
        db.execute(f"ANALYZE {schema}.pl_snapshots")
        assert db.execute(stats, (schema,)).fetchone() == (1,)
        # When bytes are erased: the statistics are dropped, and not taken again
        ref = str(
            (agent.records("proj-a", kind=Kind.EVIDENCE, limit=1)[0].evidence or {})["snapshot_ref"]
        )
        erased = admin.erase_snapshot(ref, reason="request")
        scrubbed = erased.scrubbed
        for _ in range(40):  # (an older transaction of another test may hold it back)
            if scrubbed:
                break
            time.sleep(0.25)
            scrubbed = admin.scrub_erased()
        assert scrubbed
        assert db.execute(stats, (schema,)).fetchone() == (0,)
        db.execute(f"ANALYZE {schema}.pl_snapshots")
        assert db.execute(stats, (schema,)).fetchone() == (0,)
        assert led.verify().ok


def test_on_postgresql_an_erasure_whose_rewrite_cannot_get_the_table_stands_and_says_so(
    pg_url: str,
) -> None:
    import psycopg

    # Given a reader's open transaction holding the snapshot table
    ref = _captured_personal(pg_url)
    schema = pg_url.rsplit("schema=", 1)[1]
    with Ledger.open(pg_url) as led, psycopg.connect(_pg_dsn()) as reader:
        reader.execute(f"SELECT COUNT(*) FROM {schema}.pl_snapshots").fetchone()
        # When the bytes are erased, the table cannot be rewritten under it
        erased = led.admin().erase_snapshot(ref, reason="request")
        reader.rollback()
        # Then the erasure is recorded and in force, and says the files may
        # still hold the bytes (it raised the driver's lock timeout before)
        assert erased.deleted and not erased.scrubbed
        assert erased.position == led.position
        with pytest.raises(SnapshotErasedError):
            led.admin().erase_snapshot(ref, reason="again")
        assert led.verify().ok


def test_on_postgresql_an_erasure_an_older_transaction_keeps_in_the_file_says_so(
    pg_url: str,
) -> None:
    import psycopg

    # Given any transaction of the database begun before the erasure, still open
    # (another program's, or another ledger's read): its snapshot may see the row
    ref = _captured_personal(pg_url)
    schema = pg_url.rsplit("schema=", 1)[1]
    file_holds = "SELECT position(%s in pg_read_binary_file(pg_relation_filepath(%s))) > 0 AS held"
    with Ledger.open(pg_url) as led, psycopg.connect(_pg_dsn()) as other:
        other.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        other.execute("SELECT COUNT(*) FROM pg_class").fetchone()
        # When the bytes are erased
        erased = led.admin().erase_snapshot(ref, reason="request")
        # Then the rewrite kept the deleted row, and the erasure says so
        with psycopg.connect(_pg_dsn(), autocommit=True) as look:
            look.execute("CHECKPOINT")
            held = look.execute(file_holds, (b"personal", f"{schema}.pl_snapshots")).fetchone()
        assert held == (True,)
        assert erased.deleted and not erased.scrubbed
        assert not led.admin().scrub_erased()  # still held
        other.rollback()
        # Once it has ended, scrubbing again rewrites the table without the row
        # (tried again while another program's older transaction is still open)
        position = led.position
        scrubbed = led.admin().scrub_erased()
        for _ in range(40):
            if scrubbed:
                break
            time.sleep(0.25)
            scrubbed = led.admin().scrub_erased()
        assert scrubbed
        with psycopg.connect(_pg_dsn(), autocommit=True) as look:
            look.execute("CHECKPOINT")
            held = look.execute(file_holds, (b"personal", f"{schema}.pl_snapshots")).fetchone()
        assert held == (False,)
        assert led.position == position


def test_on_postgresql_an_erasure_by_a_role_that_cannot_rewrite_the_table_says_so(
    pg_url: str,
) -> None:
    import psycopg

    # Given a ledger used by a role that owns neither its tables nor the database
    ref = _captured_personal(pg_url)
    schema = pg_url.rsplit("schema=", 1)[1]
    role = f"t_role_{schema[2:]}"
    with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")
    try:
        parts = urlsplit(pg_url)
        url = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}"))
        with Ledger.open(url) as led:
            # When it erases the bytes: the server skips the rewrite with a warning
            erased = led.admin().erase_snapshot(ref, reason="request")
        # Then the erasure stands, and does not claim the files were rewritten
        assert erased.deleted and not erased.scrubbed
    finally:
        with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"DROP ROLE IF EXISTS {role}")


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_erased_bytes_put_back_behind_the_ledgers_back_are_named(scene: Scene) -> None:
    ref = (scene.reviewer.get("E1").evidence or {})["snapshot_ref"]
    scene.ledger.admin().erase_snapshot(ref, reason="request")
    scene.raw.one(
        "INSERT INTO pl_snapshots (ref, content, size) VALUES (?, ?, ?)",
        (ref, b"retries ok", 10),
    )
    problem = scene.ledger.verify().problem or ""
    assert (
        problem.startswith(f"snapshot {ref} was erased at position") and "still stored" in problem
    )
    # and reading them is refused as before: the log says they were erased
    with pytest.raises(SnapshotErasedError, match="was erased at"):
        scene.agent.snapshot(ref)


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_bytes_captured_again_in_another_scope_are_not_readable_through_the_erased_evidence(
    scene: Scene,
) -> None:
    # Given E1's bytes erased, and the same bytes captured anew in a scope
    # agent-1 holds no grant in
    ref = (scene.reviewer.get("E1").evidence or {})["snapshot_ref"]
    admin = scene.ledger.admin()
    admin.erase_snapshot(ref, reason="erasure request 114")
    admin.grant("tenant-b", scope="proj-b", roles=["propose", "read"])
    tenant_b = scene.ledger.authenticate(admin.issue_token("tenant-b"))
    tenant_b.capture(scope="proj-b", uri="https://b.test/page", content=b"retries ok")

    # Then the new capture's reader reads them, and agent-1 is still told of the erasure
    assert tenant_b.snapshot(ref) == b"retries ok"
    with pytest.raises(SnapshotErasedError, match="erasure request 114"):
        scene.agent.snapshot(ref)


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_erasing_bytes_captured_again_erases_the_new_capture_alone(scene: Scene) -> None:
    # Given E1's bytes erased, then captured anew in proj-b as B1
    ref = (scene.reviewer.get("E1").evidence or {})["snapshot_ref"]
    admin = scene.ledger.admin()
    first = admin.erase_snapshot(ref, reason="erasure request 114")
    admin.grant("tenant-b", scope="proj-b", roles=["propose", "read", "audit"])
    tenant_b = scene.ledger.authenticate(admin.issue_token("tenant-b"))
    tenant_b.capture(scope="proj-b", uri="https://b.test/page", content=b"retries ok", id="B1")

    # When they are erased again
    again = admin.erase_snapshot(ref, reason="erasure request 114, collected again")

    # Then only B1 is erased now: E1's capture keeps its one erasure, and agent-1
    # (who cannot see proj-b) is told of that one, not of the new capture's
    assert first.records == ("E1",) and again.records == ("B1",)
    erasures = [e for e in scene.reviewer.audit("E1").events if e.type == "SnapshotErased"]
    assert [e.position for e in erasures] == [first.position]
    with pytest.raises(
        SnapshotErasedError, match=rf"position {first.position}\): erasure request 114$"
    ):
        scene.agent.snapshot(ref)
    with pytest.raises(SnapshotErasedError, match="collected again"):
        tenant_b.snapshot(ref)
    assert scene.ledger.verify().ok


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
def test_a_capture_whose_bytes_were_erased_before_review_cannot_be_accepted(
    scene: Scene,
) -> None:
    # Given a capture awaiting review whose bytes were erased
    scene.agent.capture(scope="proj-a", uri="https://docs.test/pii", content=b"Jane", id="P2")
    ref = (scene.reviewer.get("P2").evidence or {})["snapshot_ref"]
    scene.ledger.admin().erase_snapshot(ref, reason="request")
    position = scene.ledger.position
    # Then no approver vouches for bytes no one can check any more
    with pytest.raises(InvalidTransitionError) as refused:
        scene.reviewer.accept("P2")
    assert str(refused.value) == (
        "accept refused: the captured bytes of 'P2' were erased, so no approver can "
        "check them: reject it, or capture the source again"
    )
    assert scene.ledger.position == position
    scene.reviewer.reject("P2", reason="bytes erased")
    assert scene.reviewer.get("P2").status == Status.REJECTED


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_an_unknown_snapshot_cannot_be_erased_and_capturing_again_stores_the_bytes(
    scene: Scene,
) -> None:
    admin = scene.ledger.admin()
    with pytest.raises(UnknownSnapshotError, match="is unknown"):
        admin.erase_snapshot("sha256:" + "0" * 64, reason="x")
    with pytest.raises(UnknownSnapshotError, match="not a sha256") as named:
        admin.erase_snapshot("E1", reason="x")
    assert "its evidence's snapshot_ref: `provledger get ID --json`" in str(named.value)
    ref = (scene.reviewer.get("E1").evidence or {})["snapshot_ref"]
    assert scene.reviewer.snapshot(ref.upper().replace("SHA256", "sha256"))  # any case
    admin.erase_snapshot(ref.upper(), reason="request")  # as another tool prints it

    scene.agent.capture(scope="proj-a", uri="https://docs.test/again", content=b"retries ok")

    assert scene.agent.snapshot(ref) == b"retries ok"
    assert scene.ledger.verify().ok


# -- the command line ---------------------------------------------------------------------


def test_the_evidence_commands_work_end_to_end(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        reviewer_token = admin.issue_token("reviewer")
        agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"doc", id="E1")
        led.authenticate(reviewer_token).accept("E1")
        ref = (agent.get("E1").evidence or {})["snapshot_ref"]
    runner = CliRunner()

    def run(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(main, [*args], env={"PROVLEDGER_URL": url})
        return result.exit_code, result.stdout, result.stderr

    key, heads = str(tmp_path / "k"), str(tmp_path / "heads.jsonl")
    assert run("keygen", "--out", key)[0] == 0
    code, out, _ = run("head", "--key", key, "--append", heads)
    assert code == 0 and SignedHead.from_json(out.strip()) == load_heads(heads)[0]
    code, out, _ = run("verify", "--heads", heads, "--public-key", f"{key}.pub")
    assert code == 0 and "consistent with 1 signed head" in out
    zip_path = str(tmp_path / "e1.zip")
    assert run("bundle", "E1", "--key", key, "-o", zip_path, "--token", reviewer_token)[0] == 0
    code, out, _ = run("verify-bundle", zip_path, "--public-key", f"{key}.pub")
    assert code == 0 and out.startswith("ok: bundle of E1: 2 events")
    code, out, _ = run("erase-snapshot", ref, "--reason", "request 7", "--json")
    assert code == 0 and json.loads(out)["records"] == ["E1"]
    assert run("verify", "--heads", heads, "--public-key", f"{key}.pub")[0] == 0
    # Another key than the heads': a mistake to be told as such, not tampering
    assert run("keygen", "--out", str(tmp_path / "other"))[0] == 0
    code, _, err = run("verify", "--heads", heads, "--public-key", str(tmp_path / "other.pub"))
    assert code == 1
    assert (
        err.startswith("error: the kept heads do not verify: head 1 (") and "signed by key" in err
    )

    # A truncated log: exit 1 naming the newest kept head
    assert run("head", "--key", key, "--append", heads)[0] == 0
    import sqlite3

    with sqlite3.connect(tmp_path / "l.db") as con:
        con.execute("DROP TRIGGER stored_events_no_delete")
        con.execute("DROP TRIGGER pl_merkle_leaves_no_delete")
        con.execute(
            "DELETE FROM stored_events WHERE rowid = (SELECT MAX(rowid) FROM stored_events)"
        )
        con.execute(
            "DELETE FROM pl_merkle_leaves "
            "WHERE position = (SELECT MAX(position) FROM pl_merkle_leaves)"
        )
    code, _, err = run("verify", "--heads", heads, "--public-key", f"{key}.pub")
    assert code == 1
    assert err.startswith("error: tampering detected: the log has ") and "head 2" in err

    # An altered bundle: exit 1 naming it
    data = bytearray(Path(zip_path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(zip_path).write_bytes(bytes(data))
    code, _, err = run("verify-bundle", zip_path)
    assert code == 1 and err.startswith("error: bundle check failed: ")


@pytest.mark.parametrize("ledger_url", BACKENDS, indirect=True)
@pytest.mark.parametrize(
    ("column", "edited", "shown"),
    [
        ("value", False, "value=<packed False> where the replay has <packed True>"),
        ("parents", ["F1"], "parents=<packed ['F1']> where the replay has <packed ['E1']>"),
    ],
)
def test_an_edited_value_or_list_of_parents_is_shown_as_what_it_holds(
    scene: Scene, column: str, edited: Any, shown: str
) -> None:
    from ledger.serialization import pack

    # Given M1's value (true) made false in the views, or its evidence E1 swapped for F1
    scene.raw.run((f"UPDATE pl_records SET {column} = ? WHERE record_id = 'M1'", (pack(edited),)))

    # Then verify says what the view holds, and what the replay has
    problem = detect(scene, with_heads=False).problem or ""
    assert shown in problem, problem


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_head_is_not_appended_to_a_file_whose_heads_verify_refuses(scene: Scene) -> None:
    # Given a heads file of two heads, written back in the other order
    scene.agent.propose(scope="proj-a", claim_key="later", value=1, kind=Kind.FACT)
    publish_head(scene.ledger, scene.key, scene.heads)
    lines = scene.heads.read_text().splitlines()
    assert len(lines) >= 2
    scene.heads.write_text("\n".join([*lines[:-2], lines[-1], lines[-2]]) + "\n")
    swapped = scene.heads.read_text()
    assert not scene.ledger.verify(heads=scene.heads, public_key=scene.public_key).ok
    # When a head is published to it, it is refused as verify refuses the file
    with pytest.raises(InvalidHeadError, match=r"not appended to .*is smaller than head"):
        publish_head(scene.ledger, scene.key, scene.heads)
    assert scene.heads.read_text() == swapped
    # And so is a file whose head's signature was altered
    altered = json.loads(lines[0])
    altered["signature"] = json.loads(lines[1])["signature"]  # another head's
    scene.heads.write_text(json.dumps(altered) + "\n")
    with pytest.raises(InvalidHeadError, match=r"head 1 .*the signature does not verify"):
        publish_head(scene.ledger, scene.key, scene.heads)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_head_line_is_taken_where_a_digest_is(scene: Scene) -> None:
    # A head kept in the heads file stands for the digest it signs
    line = scene.heads.read_text().splitlines()[-1]
    head = load_heads(scene.heads)[-1]
    assert merkle.LogDigest.parse(line) == head.digest
    assert scene.ledger.verify(against=line).ok
    assert scene.reviewer.prove("E1", against=line)
    for bad in ("{", '{"a": 1', '{"tree_size": "3", "position": 3, "root": "ab"}', '{"root": 1}'):
        with pytest.raises(InvalidInputError, match="nor a head's JSON line"):
            merkle.LogDigest.parse(bad)
