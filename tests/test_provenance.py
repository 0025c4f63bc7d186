"""Provenance capture, runs, access and retention (SPEC §2, §6, §7, §11).

Snapshots are content-addressed and re-verified; reads made in a run become
observed dependencies; credentials and grants are events that take effect on the
next call; every command needs its role and no command reaches into a scope the
principal has no grant for; retention rules bound how long a kind may live.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import Kind, Ledger, LedgerError, Outcome, RetentionRule, Session, Status, Validity
from ledger.errors import (
    AccessDeniedError,
    AuthenticationError,
    InvalidInputError,
    InvalidParentError,
    RetentionRuleError,
    SnapshotIntegrityError,
    UnknownDeliveryError,
    UnknownRecordError,
    UnknownSnapshotError,
)

from .conftest import World, raw_rows

SCOPE = "proj-a"
URI = "https://x.test/doc"
ROLES = ("read", "propose", "approve", "deliver", "audit")


def ref_of(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def session_for(led: Ledger, subject: str, roles: dict[str, list[str]]) -> Session:
    admin = led.admin()
    for scope, granted in roles.items():
        admin.grant(subject, scope=scope, roles=granted)
    return led.authenticate(admin.issue_token(subject))


# -- snapshots -----------------------------------------------------------------------


def test_identical_content_is_stored_once_and_returned_by_snapshot(
    world: World, tmp_path: Path
) -> None:
    agent, reviewer, led = world.agent, world.reviewer, world.ledger
    content = b"<html>retries are safe</html>"

    # Step 1: capture the same bytes twice, under two ids and two URIs.
    e1 = agent.capture(SCOPE, uri=URI, content=content, id="E1")
    e2 = agent.capture(SCOPE, uri="https://mirror.x.test/doc", content=content, id="E2")

    # Step 2: both evidence records point at one snapshot row.
    ev1, ev2 = reviewer.get(e1), reviewer.get(e2)
    assert ev1.kind == Kind.EVIDENCE
    assert ev1.claim_key == f"source:{URI}"
    assert ev1.evidence is not None and ev2.evidence is not None
    assert ev1.evidence["uri"] == URI
    assert ev1.evidence["fetched_at"] == world.clock.now
    assert ev1.evidence["content_hash"] == ev2.evidence["content_hash"] == ref_of(content)
    assert ev1.evidence["snapshot_ref"] == ev2.evidence["snapshot_ref"] == ref_of(content)
    rows = raw_rows(led, tmp_path / "ledger.db", "SELECT ref, size FROM pl_snapshots")
    assert rows == [(ref_of(content), len(content))]

    # Step 3: the bytes come back, verified.
    assert reviewer.snapshot(ref_of(content)) == content
    assert agent.snapshot(ref_of(content)) == content


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "tampered", [b"retries are NOT safe", "retries are NOT safe"], ids=["blob", "text"]
)
def test_tampered_snapshot_bytes_raise_integrity_error_naming_the_ref(
    world: World, tmp_path: Path, tampered: bytes | str
) -> None:
    content = b"retries are safe"
    world.agent.capture(SCOPE, uri=URI, content=content, id="E1")
    ref = ref_of(content)
    assert world.reviewer.snapshot(ref) == content

    # Step 1: someone edits the stored bytes behind the ledger's back.
    con = sqlite3.connect(tmp_path / "ledger.db")
    with con:
        con.execute("UPDATE pl_snapshots SET content=? WHERE ref=?", (tampered, ref))
    con.close()
    position = world.ledger.position

    # Step 2: reading the snapshot detects it and names the ref.
    with pytest.raises(SnapshotIntegrityError) as err:
        world.reviewer.snapshot(ref)
    assert ref in str(err.value)
    assert world.ledger.position == position


def test_recapturing_a_uri_with_new_content_adds_new_evidence_and_keeps_the_old(
    world: World,
) -> None:
    agent, reviewer = world.agent, world.reviewer
    old, new = b"version 1: retries are safe", b"version 2: retries are unsafe"
    agent.capture(SCOPE, uri=URI, content=old, id="E1")
    reviewer.accept("E1")
    before = reviewer.get("E1")
    world.clock.advance(days=30)

    # Step 1: the same URI, fetched again, now says something else.
    agent.capture(SCOPE, uri=URI, content=new, id="E2")

    # Step 2: a new evidence record with its own hash; the old one is untouched.
    after = reviewer.get("E2")
    assert after.evidence is not None and before.evidence is not None
    assert after.evidence["uri"] == before.evidence["uri"] == URI
    assert after.evidence["content_hash"] == ref_of(new) != before.evidence["content_hash"]
    assert after.evidence["fetched_at"] == before.evidence["fetched_at"] + timedelta(days=30)
    assert reviewer.get("E1") == before
    assert reviewer.snapshot(ref_of(old)) == old
    assert reviewer.snapshot(ref_of(new)) == new
    entries = reviewer.explain(SCOPE, f"source:{URI}").entries
    assert [(e.record.id, e.record.status) for e in entries] == [
        ("E1", Status.ACCEPTED),
        ("E2", Status.CANDIDATE),
    ]


def test_a_snapshot_in_an_unreadable_scope_looks_exactly_like_a_missing_one(
    world: World,
) -> None:
    content = b"internal design doc"
    world.agent.capture(SCOPE, uri=URI, content=content, id="E1")
    ref, missing = ref_of(content), ref_of(b"never captured")

    # The outsider reads proj-b only: the proj-a snapshot is refused as unknown.
    with pytest.raises(UnknownSnapshotError) as hidden:
        world.outsider.snapshot(ref)
    with pytest.raises(UnknownSnapshotError) as absent:
        world.outsider.snapshot(missing)
    assert str(hidden.value).replace(ref, "<ref>") == str(absent.value).replace(missing, "<ref>")
    assert "outsider" in str(hidden.value)
    assert world.reviewer.snapshot(ref) == content


# -- observed dependencies -----------------------------------------------------------


def test_a_read_in_a_run_becomes_an_observed_dependency_that_revocation_follows(
    world: World,
) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.capture(SCOPE, uri=URI, content=b"retries are safe", id="E1")
    reviewer.accept("E1")

    # Step 1: the agent reads E1 inside a run and proposes M without declaring it.
    with agent.run("task-42") as run:
        seen = run.read(SCOPE, f"source:{URI}")
        assert [r.id for r in seen.records] == ["E1"]
        run.propose(SCOPE, "api.retry_safe", True, Kind.INFERENCE, id="M")
    assert run.reads == ("E1",)

    # Step 2: M records what it was really built on.
    m = reviewer.get("M")
    assert m.parents == ()
    assert m.observed == ("E1",)
    assert m.undeclared == ("E1",)
    trail = reviewer.audit("M")
    assert trail.undeclared == ("E1",)
    assert trail.events[0].type == "Proposed"
    assert trail.events[0].details["observed"] == ("E1",)
    reviewer.accept("M")
    (entry,) = reviewer.explain(SCOPE, "api.retry_safe").entries
    assert entry.usable
    assert entry.record.observed == ("E1",)

    # Step 3: revoking E1 reaches M through the observed edge.
    revocation = reviewer.revoke("E1", reason="doc changed")
    assert revocation.affected == ("E1", "M")
    m = reviewer.get("M")
    assert (m.status, m.validity, m.cause) == (
        Status.STALE,
        Validity.NEEDS_REVALIDATION,
        "E1",
    )
    (entry,) = reviewer.explain(SCOPE, "api.retry_safe").entries
    assert entry.reasons == ("stale because E1 was revoked: doc changed",)
    assert reviewer.audit("M").undeclared == ("E1",)
    assert agent.read(SCOPE, "api.retry_safe").outcome == Outcome.MISSING


def test_what_a_run_read_is_answerable_afterwards_including_tool_reads(
    world: World, tmp_path: Path
) -> None:
    agent, reviewer, led = world.agent, world.reviewer, world.ledger
    for rid, uri in (("E1", URI), ("E2", "https://x.test/tool-output")):
        agent.capture(SCOPE, uri=uri, content=rid.encode(), id=rid)
        reviewer.accept(rid)

    # Step 1: one ledger read, one tool read reported with observe(), one bad observe.
    with agent.run("task-42") as run:
        run.read(SCOPE, f"source:{URI}")
        run.observe("E2")
        with pytest.raises(UnknownRecordError):
            run.observe("NO-SUCH-RECORD")
        run.propose(SCOPE, "api.retry_safe", True, Kind.INFERENCE, id="M")
    assert reviewer.get("M").observed == ("E1", "E2")

    # Step 2: "what did run task-42 read" comes from the run-reads view.
    reads = raw_rows(
        led,
        tmp_path / "ledger.db",
        "SELECT record_id, how FROM pl_run_reads WHERE run_id=? ORDER BY position",
        ("task-42",),
    )
    assert reads == [("E1", "read"), ("E2", "observed")]
    runs = raw_rows(led, tmp_path / "ledger.db", "SELECT run_id, actor, outcome FROM pl_runs")
    assert runs == [("task-42", "agent-1", "completed")]


# -- credentials and grants -----------------------------------------------------------


def test_a_revoked_token_is_refused_on_the_sessions_next_call(world: World) -> None:
    led, admin = world.ledger, world.ledger.admin()
    token = admin.issue_token("agent-1")
    session = led.authenticate(token)
    assert session.read(SCOPE, "anything").outcome == Outcome.MISSING

    # Step 1: revoke the token while the session is open.
    admin.revoke_token(token)
    position = led.position

    # Step 2: the very next call, read or write, is refused and writes nothing.
    with pytest.raises(AuthenticationError):
        session.read(SCOPE, "anything")
    with pytest.raises(AuthenticationError):
        session.propose(SCOPE, "k", 1, Kind.FACT)
    with pytest.raises(AuthenticationError):
        led.authenticate(token)
    assert led.position == position
    # The principal's other token still works.
    assert world.agent.read(SCOPE, "anything").outcome == Outcome.MISSING


def test_an_expired_token_is_refused_on_the_next_call(world: World) -> None:
    led, clock = world.ledger, world.clock
    expires = clock.now + timedelta(hours=1)
    session = led.authenticate(led.admin().issue_token("agent-1", expires=expires))

    # Step 1: just before the expiry the session works.
    clock.advance(minutes=59, seconds=59)
    session.propose(SCOPE, "k", 1, Kind.FACT, id="F1")

    # Step 2: from the expiry instant on, it is refused.
    clock.advance(seconds=1)
    position = led.position
    with pytest.raises(AuthenticationError) as err:
        session.propose(SCOPE, "k", 1, Kind.FACT, id="F2")
    assert "agent-1" in str(err.value)
    assert expires.isoformat() in str(err.value)
    with pytest.raises(AuthenticationError):
        session.get("F1")
    assert led.position == position


def test_revoking_a_grant_removes_the_role_and_access_history_shows_both(
    world: World,
) -> None:
    led, clock, admin = world.ledger, world.clock, world.ledger.admin()
    granted_at = clock.advance(minutes=1)
    admin.grant("auditor", scope=SCOPE, roles=["read", "audit"])
    granted_pos = led.position
    auditor = led.authenticate(admin.issue_token("auditor"))
    world.agent.propose(SCOPE, "k", 1, Kind.FACT, id="F1")
    assert auditor.audit("F1").events[0].type == "Proposed"

    # Step 1: withdraw the audit role only.
    revoked_at = clock.advance(hours=2)
    admin.revoke_grant("auditor", SCOPE, roles=["audit"])
    revoked_pos = led.position

    # Step 2: the same session loses audit at once and keeps read.
    with pytest.raises(AccessDeniedError) as err:
        auditor.audit("F1")
    assert "'auditor'" in str(err.value) and "'audit'" in str(err.value)
    assert auditor.get("F1").id == "F1"

    # Step 3: the history says who held what, from when until when.
    history = admin.access_history(subject="auditor", scope=SCOPE)
    summary = [
        (
            h.role,
            h.granted_position,
            h.granted_at,
            h.granted_by,
            h.revoked_position,
            h.revoked_at,
            h.revoked_by,
        )
        for h in history
    ]
    assert summary == [
        ("audit", granted_pos, granted_at, "admin", revoked_pos, revoked_at, "admin"),
        ("read", granted_pos, granted_at, "admin", None, None, None),
    ]
    assert admin.access_history(subject="auditor", scope="proj-b") == ()


# -- the role-by-command matrix -------------------------------------------------------


@dataclass
class Targets:
    """A proj-a ledger holding one target per command."""

    candidate: str  # C1: to accept or reject
    accepted: str  # A1: to get, audit or revoke
    stale: str  # M2: STALE with a usable parent again, to revalidate
    report: str  # R2: accepted report, to deliver
    delivery: str  # of R1, which went stale after delivery
    ref: str  # snapshot of E1
    b_stale: str = ""  # BM: STALE in proj-b, to revalidate on a new basis
    b_delivery: str = ""  # of BR in proj-b, to correct with a replacement


def build_targets(world: World) -> Targets:
    agent, reviewer = world.agent, world.reviewer
    for rid in ("E1", "S1", "S2"):
        agent.capture(SCOPE, uri=f"https://x.test/{rid}", content=rid.encode(), id=rid)
        reviewer.accept(rid)
    agent.propose(SCOPE, "api.retry_safe", True, Kind.FACT, parents=["E1"], id="A1")
    reviewer.accept("A1")
    agent.propose(SCOPE, "api.timeout", 30, Kind.FACT, parents=["E1"], id="C1")
    agent.propose(SCOPE, "report.daily", "ok", Kind.REPORT, parents=["E1"], id="R2")
    reviewer.accept("R2")
    agent.propose(SCOPE, "api.idempotent", True, Kind.INFERENCE, parents=["S1"], id="M1")
    reviewer.accept("M1")
    agent.propose(SCOPE, "api.idempotent.why", "keys", Kind.INFERENCE, parents=["M1"], id="M2")
    reviewer.accept("M2")
    agent.propose(SCOPE, "report.weekly", "retry", Kind.REPORT, parents=["M1"], id="R1")
    reviewer.accept("R1")
    delivery = reviewer.deliver("R1", recipient="ops@x.test")
    reviewer.revoke("S1", reason="doc changed")
    reviewer.revalidate("M1", note="re-checked", parents=["S2"])
    return Targets(
        candidate="C1",
        accepted="A1",
        stale="M2",
        report="R2",
        delivery=delivery,
        ref=ref_of(b"E1"),
    )


@dataclass(frozen=True)
class Command:
    role: str
    call: Callable[[Session, Targets], Any]
    # other roles that allow it too, each alone
    also: tuple[str, ...] = ()
    # how a refusal shows: AccessDeniedError unless the API documents otherwise
    refused: type[LedgerError] | None = AccessDeniedError
    # the refusal names the scope (not for a call across every scope)
    scoped: bool = True


COMMANDS: dict[str, Command] = {
    "read": Command("read", lambda s, t: s.read(SCOPE, "api.retry_safe")),
    "explain": Command("read", lambda s, t: s.explain(SCOPE, "api.retry_safe")),
    "get": Command("read", lambda s, t: s.get(t.accepted)),
    "audit": Command("audit", lambda s, t: s.audit(t.accepted)),
    # snapshot(): documented as UnknownSnapshotError when no evidence with it is readable
    "snapshot": Command("read", lambda s, t: s.snapshot(t.ref), refused=UnknownSnapshotError),
    "capture": Command("propose", lambda s, t: s.capture(SCOPE, uri=URI, content=b"new")),
    "propose": Command("propose", lambda s, t: s.propose(SCOPE, "k", 1, Kind.FACT)),
    "accept": Command("approve", lambda s, t: s.accept(t.candidate)),
    "reject": Command("approve", lambda s, t: s.reject(t.candidate, reason="no")),
    "revoke": Command("approve", lambda s, t: s.revoke(t.accepted, reason="no")),
    "revalidate": Command("approve", lambda s, t: s.revalidate(t.stale, note="ok")),
    "deliver": Command("deliver", lambda s, t: s.deliver(t.report, recipient="ops@x.test")),
    "issue_correction": Command("deliver", lambda s, t: s.issue_correction(t.delivery, "fix")),
    # corrections_due(): across scopes, so refused only when no scope allows it;
    # shown to those who issue corrections and to auditors checking they are issued
    "corrections_due": Command(
        "deliver", lambda s, t: s.corrections_due(), scoped=False, also=("audit",)
    ),
    "corrections_due of a record": Command(
        "deliver", lambda s, t: s.corrections_due("R1"), also=("audit",)
    ),
}


def _effect(name: str, result: Any, world: World, t: Targets) -> None:
    """What the allowed command must have done."""
    reviewer = world.reviewer
    if name == "read":
        assert result.outcome == Outcome.FOUND and [r.id for r in result.records] == ["A1"]
    elif name == "explain":
        assert [e.record.id for e in result.entries] == ["A1"]
    elif name == "get":
        assert result.id == t.accepted
    elif name == "audit":
        assert [e.type for e in result.events] == ["Proposed", "Accepted"]
    elif name == "snapshot":
        assert result == b"E1"
    elif name in ("capture", "propose"):
        assert reviewer.get(result).status == Status.CANDIDATE
    elif name == "accept":
        assert reviewer.get(t.candidate).status == Status.ACCEPTED
    elif name == "reject":
        assert reviewer.get(t.candidate).status == Status.REJECTED
    elif name == "revoke":
        assert reviewer.get(t.accepted).status == Status.REVOKED
    elif name == "revalidate":
        assert reviewer.get(t.stale).status == Status.ACCEPTED
    elif name == "deliver":
        assert [d.delivery_id for d in reviewer.get(t.report).deliveries] == [result]
    elif name == "issue_correction":
        (delivery,) = reviewer.get("R1").deliveries
        assert [c.correction_id for c in delivery.corrections] == [result]
    elif name in ("corrections_due", "corrections_due of a record"):
        assert [d.delivery.delivery_id for d in result] == [t.delivery]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_is_refused_without_its_role_and_allowed_with_it(
    world: World, name: str
) -> None:
    command, led = COMMANDS[name], world.ledger
    targets = build_targets(world)
    allowing = (command.role, *command.also)
    others = [r for r in ROLES if r not in allowing]
    lacking = session_for(led, "lacks-role", {SCOPE: others})
    position, digest = led.position, led.views_digest()

    # Step 1: every other role in the scope is not enough; nothing is written.
    if command.refused is None:
        assert command.call(lacking, targets) == ()
    else:
        with pytest.raises(command.refused) as err:
            command.call(lacking, targets)
        message = str(err.value)
        assert "'lacks-role'" in message
        if command.refused is AccessDeniedError:
            assert (f"scope {SCOPE!r}" if command.scoped else "every scope") in message
            assert "role " + " or ".join(repr(r) for r in allowing) in message
    assert led.position == position
    assert led.views_digest() == digest

    # Step 2: the one role is enough (each of them, when several allow it).
    for role in allowing:
        holding = session_for(led, f"holds-{role}", {SCOPE: [role]})
        result = command.call(holding, targets)
        _effect(name, result, world, targets)


def test_a_refusal_of_explain_names_explain(world: World) -> None:
    lacking = session_for(world.ledger, "lacks-read", {SCOPE: ["propose"]})
    with pytest.raises(AccessDeniedError) as refused:
        lacking.explain(SCOPE, "api.retry_safe")
    assert str(refused.value) == (
        f"explain refused: 'lacks-read' lacks role 'read' in scope {SCOPE!r}"
    )
    with pytest.raises(AccessDeniedError, match=r"^read refused"):
        lacking.read(SCOPE, "api.retry_safe")


# -- nothing crosses a scope boundary --------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """A command aimed at a proj-a item, and at a same-shaped item that does not exist."""

    error: type[LedgerError]
    call: Callable[[Session, str, Targets], Any]
    real: Callable[[Targets], str]
    fake: str


PROBES: dict[str, Probe] = {
    "read": Probe(
        AccessDeniedError, lambda s, x, t: s.read(x, "api.retry_safe"), lambda t: SCOPE, "proj-zz"
    ),
    "explain": Probe(
        AccessDeniedError,
        lambda s, x, t: s.explain(x, "api.retry_safe"),
        lambda t: SCOPE,
        "proj-zz",
    ),
    "get": Probe(UnknownRecordError, lambda s, x, t: s.get(x), lambda t: t.accepted, "NO-SUCH"),
    "audit": Probe(UnknownRecordError, lambda s, x, t: s.audit(x), lambda t: t.accepted, "NO-SUCH"),
    "cite as parent": Probe(
        InvalidParentError,
        lambda s, x, t: s.propose("proj-b", "k", 1, Kind.FACT, parents=[x], id="P1"),
        lambda t: t.accepted,
        "NO-SUCH",
    ),
    "accept": Probe(
        UnknownRecordError, lambda s, x, t: s.accept(x), lambda t: t.candidate, "NO-SUCH"
    ),
    "reject": Probe(
        UnknownRecordError,
        lambda s, x, t: s.reject(x, reason="no"),
        lambda t: t.candidate,
        "NO-SUCH",
    ),
    "revoke": Probe(
        UnknownRecordError,
        lambda s, x, t: s.revoke(x, reason="no"),
        lambda t: t.accepted,
        "NO-SUCH",
    ),
    "revalidate": Probe(
        UnknownRecordError, lambda s, x, t: s.revalidate(x, note="ok"), lambda t: t.stale, "NO-SUCH"
    ),
    "deliver": Probe(
        UnknownRecordError,
        lambda s, x, t: s.deliver(x, recipient="me@evil.test"),
        lambda t: t.report,
        "NO-SUCH",
    ),
    "issue_correction": Probe(
        UnknownDeliveryError,
        lambda s, x, t: s.issue_correction(x, "fix"),
        lambda t: t.delivery,
        "d-" + "0" * 32,
    ),
    "snapshot": Probe(
        UnknownSnapshotError, lambda s, x, t: s.snapshot(x), lambda t: t.ref, ref_of(b"nothing")
    ),
    "corrections_due of a record": Probe(
        UnknownRecordError, lambda s, x, t: s.corrections_due(x), lambda t: "R1", "NO-SUCH"
    ),
    "revalidate on a new basis": Probe(
        InvalidParentError,
        lambda s, x, t: s.revalidate(t.b_stale, note="ok", parents=[x]),
        lambda t: t.accepted,
        "NO-SUCH",
    ),
    "correct with a replacement": Probe(
        UnknownRecordError,
        lambda s, x, t: s.issue_correction(t.b_delivery, "fix", replacement=x),
        lambda t: t.accepted,
        "NO-SUCH",
    ),
    "as_of get": Probe(
        UnknownRecordError,
        lambda s, x, t: s.as_of(position=s.caller.engine.position()).get(x),
        lambda t: t.accepted,
        "NO-SUCH",
    ),
}


def build_proj_b(world: World, targets: Targets) -> Targets:
    """proj-b items the stranger may work on, to aim proj-a ids at."""
    agent, reviewer = world.agent, world.reviewer
    agent.capture("proj-b", uri="https://x.test/b", content=b"b", id="BS")
    reviewer.accept("BS")
    agent.propose("proj-b", "b.claim", 1, Kind.FACT, parents=["BS"], id="BM")
    reviewer.accept("BM")
    agent.propose("proj-b", "b.report", "r", Kind.REPORT, id="BR")
    reviewer.accept("BR")
    b_delivery = reviewer.deliver("BR", recipient="ops@x.test")
    reviewer.revoke("BS", reason="gone")
    return replace(targets, b_stale="BM", b_delivery=b_delivery)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_a_record_in_a_scope_without_grant_is_unreachable_and_looks_nonexistent(
    world: World, name: str
) -> None:
    probe, led = PROBES[name], world.ledger
    targets = build_proj_b(world, build_targets(world))
    # Every role, but in proj-b only.
    stranger = session_for(led, "stranger", {"proj-b": list(ROLES)})
    real = probe.real(targets)
    ids = ("A1", "C1", "M2", "R1", "R2", "BM", "BR")
    before = {rid: world.reviewer.get(rid) for rid in ids}
    position = led.position

    # Step 1: the command is refused for the real item and for a non-existent one...
    with pytest.raises(probe.error) as hidden:
        probe.call(stranger, real, targets)
    with pytest.raises(probe.error) as absent:
        probe.call(stranger, probe.fake, targets)

    # Step 2: ...with the same words, so the refusal reveals nothing.
    assert type(hidden.value) is type(absent.value)
    assert str(hidden.value).replace(real, "<x>") == str(absent.value).replace(probe.fake, "<x>")

    # Step 3: nothing changed.
    assert led.position == position
    assert {rid: world.reviewer.get(rid) for rid in before} == before


def test_a_principal_without_grant_sees_no_corrections_due_and_cannot_observe_in_a_run(
    world: World,
) -> None:
    targets = build_targets(world)
    stranger = session_for(world.ledger, "stranger", {"proj-b": list(ROLES)})
    assert [d.delivery.delivery_id for d in world.reviewer.corrections_due()] == [targets.delivery]
    assert stranger.corrections_due() == ()
    with stranger.run("task-x") as run:
        with pytest.raises(UnknownRecordError) as hidden:
            run.observe(targets.accepted)
        with pytest.raises(UnknownRecordError) as absent:
            run.observe("NO-SUCH")
    assert str(hidden.value).replace(targets.accepted, "<x>") == str(absent.value).replace(
        "NO-SUCH", "<x>"
    )
    assert run.reads == ()


# -- retention rules ----------------------------------------------------------------------


def _retention_sessions(led: Ledger) -> tuple[Session, Session]:
    agent = session_for(led, "agent-1", {SCOPE: ["propose", "read"]})
    reviewer = session_for(led, "reviewer", {SCOPE: ["approve", "read"]})
    return agent, reviewer


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (RetentionRule(max_lifetime=5), "max_lifetime must be a positive timedelta, got 5"),  # type: ignore[arg-type]
        (RetentionRule(max_lifetime=timedelta(0)), "max_lifetime must be a positive timedelta"),
        (RetentionRule(expiry_required="yes"), "expiry_required must be True or False"),  # type: ignore[arg-type]
        (RetentionRule(), "it requires nothing; give max_lifetime or expiry_required=True"),
    ],
)
def test_a_malformed_retention_rule_is_refused_when_the_ledger_opens(
    rule: RetentionRule, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=f"retention rule for 'fact': {message}"):
        Ledger.open("memory:", retention={"fact": rule})
    with pytest.raises(InvalidInputError, match=f"retention rule for 'fact': {message}"):
        Ledger.open("memory:", retention={Kind.FACT: rule})  # (named as it is spelt)


def test_a_max_lifetime_rule_refuses_facts_without_expiry_or_expiring_too_late(
    open_ledger: Callable[..., Ledger], clock: Any
) -> None:
    led = open_ledger(retention={"fact": RetentionRule(max_lifetime=timedelta(hours=1))})
    agent, reviewer = _retention_sessions(led)
    position = led.position

    # Step 1: no expiry, or one two hours away, breaks the rule and writes nothing.
    with pytest.raises(RetentionRuleError) as no_expiry:
        agent.propose(SCOPE, "svc.status", "up", Kind.FACT)
    with pytest.raises(RetentionRuleError) as too_late:
        agent.propose(SCOPE, "svc.status", "up", Kind.FACT, expires=clock.now + timedelta(hours=2))
    for err in (no_expiry, too_late):
        assert "max_lifetime=1:00:00" in str(err.value)
        assert "'fact'" in str(err.value)
    assert led.position == position

    # Step 2: within the hour is fine, up to the hour itself.
    agent.propose(
        SCOPE, "svc.status", "up", Kind.FACT, expires=clock.now + timedelta(minutes=30), id="F1"
    )
    agent.propose(
        SCOPE, "svc.status", "up", Kind.FACT, expires=clock.now + timedelta(hours=1), id="F2"
    )
    reviewer.accept("F1")
    assert agent.read(SCOPE, "svc.status").outcome == Outcome.FOUND

    # Step 3: the rule is for facts only.
    agent.propose(SCOPE, "svc.guess", "up", Kind.INFERENCE, id="I1")
    assert reviewer.get("I1").expires is None


def test_an_expiry_required_rule_refuses_records_of_that_kind_without_expiry(
    open_ledger: Callable[..., Ledger], clock: Any
) -> None:
    led = open_ledger(retention={Kind.EVIDENCE: RetentionRule(expiry_required=True)})
    agent, reviewer = _retention_sessions(led)
    position = led.position

    # Step 1: captured evidence without an expiry is refused; its bytes are not kept.
    with pytest.raises(RetentionRuleError) as err:
        agent.capture(SCOPE, uri=URI, content=b"page")
    assert "expiry_required" in str(err.value)
    assert "'evidence'" in str(err.value)
    assert led.position == position
    with pytest.raises(LedgerError):
        reviewer.snapshot(ref_of(b"page"))

    # Step 2: any expiry at all satisfies it; other kinds need none.
    expires = clock.now + timedelta(days=365)
    agent.capture(SCOPE, uri=URI, content=b"page", expires=expires, id="E1")
    assert reviewer.get("E1").expires == expires
    agent.propose(SCOPE, "k", 1, Kind.FACT, id="F1")
    assert reviewer.get("F1").expires is None


def test_a_run_records_only_record_ids_and_one_line_of_text(ledger: Ledger) -> None:
    admin = ledger.admin()
    admin.grant("reader", scope="proj-a", roles=["read"])
    reader = ledger.authenticate(admin.issue_token("reader"))
    run = reader.run("task-1")
    run.start()
    before = ledger.position
    for ids, how in (((1,), "read"), (("E1",), "\x1b[2J"), (("E1",), "x" * 100_000)):
        with pytest.raises(LedgerError):
            run._record_reads(ids, how)
    assert ledger.position == before
    run._record_reads(("E1",), "observed")
    assert ledger.verify().ok


def test_a_run_is_carried_only_into_another_run_of_its_own_principal(ledger: Ledger) -> None:
    # What one principal read (perhaps in a scope another cannot see) is no basis
    # of another principal's run: carrying it would store ids the other cannot
    # see in its run for good, and refuse its every proposal until the run ends.
    admin = ledger.admin()
    admin.grant("x", scope="proj-x", roles=["read", "propose"])
    admin.grant("y", scope="proj-y", roles=["read", "propose"])
    x = ledger.authenticate(admin.issue_token("x"))
    y = ledger.authenticate(admin.issue_token("y"))
    x.propose("proj-x", "k", 1, Kind.FACT, id="X-SECRET")
    admin.grant("x2", scope="proj-x", roles=["approve", "read"])
    ledger.authenticate(admin.issue_token("x2")).accept("X-SECRET")
    with x.run("task-x") as ran, y.run("task-y") as other:
        ran.read("proj-x", "k")
        before = ledger.position
        with pytest.raises(InvalidInputError, match="not into run 'task-y' of 'y'"):
            ran.carry_into(other)
        assert ledger.position == before and other.reads == ()
        other.propose("proj-y", "k", 2, Kind.FACT)  # its run goes on
        with x.run("task-x2") as mine:
            ran.carry_into(mine)  # another run of its own: carried
            assert mine.reads == ("X-SECRET",)
