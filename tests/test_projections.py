"""Views, replay and rebuild (SPEC §3, §5, §8).

The views are updated inside each command's transaction; they can be dropped
and replayed from the log and must come back identical; ``as_of`` answers
exactly as the ledger did at an earlier log position; delivery history is never
rewritten; a view that missed events catches up exactly once.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import Kind, Ledger, LedgerError, Outcome, Session, Status, Validity
from ledger.domain import Record, record_uuid
from ledger.errors import CorruptEventError, InvalidInputError
from ledger.rules import CLOCK_SKEW
from projections.base import COPY_FROM

from .conftest import BACKENDS, Clock, World, new_pg_schema_url, raw_rows

SCOPE = "proj-a"
STATUS_EVENTS = {"Proposed", "Accepted", "Rejected", "Revoked", "MarkedStale", "Revalidated"}

# -- helpers ---------------------------------------------------------------------


def db_path_of(led: Ledger, tmp_path: Path) -> Path | None:
    return tmp_path / "ledger.db" if led.backend == "sqlite" else None


def attempt(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """``("ok", result)`` or ``("error", "ErrorName: message")`` for one ledger call."""
    try:
        return ("ok", call(*args, **kwargs))
    except LedgerError as exc:
        return ("error", f"{type(exc).__name__}: {exc}")


def principals(led: Ledger) -> tuple[Session, Session, dict[str, str]]:
    """An agent (propose, read) and a reviewer (approve, read, audit, deliver) in SCOPE."""
    admin = led.admin()
    admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read", "audit", "deliver"])
    tokens = {"agent-1": admin.issue_token("agent-1"), "reviewer": admin.issue_token("reviewer")}
    return led.authenticate(tokens["agent-1"]), led.authenticate(tokens["reviewer"]), tokens


# -- property: random command sequences, a reference model, and rebuild ------------

BLOCKING = {Status.REVOKED, Status.REJECTED, Status.STALE}
#: Kinds revalidation may not leave without a basis.
NEEDS_BASIS = {Kind.INFERENCE, Kind.REPORT, Kind.PLAN}


@dataclass
class ModelRecord:
    status: Status
    expires: datetime | None
    deps: tuple[str, ...]
    kind: Kind = Kind.FACT
    accepted_once: bool = False  # a STALE record never accepted revalidates to CANDIDATE


@dataclass
class Model:
    """A small reference model of the status machine and revocation propagation."""

    records: dict[str, ModelRecord] = field(default_factory=dict)
    deliveries: list[str] = field(default_factory=list)

    def eff_expires(self, rid: str) -> datetime | None:
        rec = self.records[rid]
        known = [e for e in (rec.expires, *map(self.eff_expires, rec.deps)) if e is not None]
        return min(known) if known else None

    def usable(self, rid: str, now: datetime) -> bool:
        eff = self.eff_expires(rid)
        return self.records[rid].status == Status.ACCEPTED and (eff is None or now < eff)

    def descendants(self, root: str) -> set[str]:
        found: set[str] = set()
        frontier = {root}
        while frontier:
            frontier = {
                rid
                for rid, rec in self.records.items()
                if rid not in found and rid != root and frontier & set(rec.deps)
            }
            found |= frontier
        return found

    # Each ``can_*`` predicts whether the library must carry the command out.

    def can_propose(self, parents: tuple[str, ...]) -> bool:
        return all(self.records[p].status not in BLOCKING for p in parents)

    def can_accept(self, rid: str, now: datetime) -> bool:
        rec = self.records[rid]
        return (
            rec.status == Status.CANDIDATE
            and (rec.expires is None or now < rec.expires)
            and all(self.usable(d, now) for d in rec.deps)
        )

    def can_revalidate(self, rid: str, basis: tuple[str, ...] | None, now: datetime) -> bool:
        rec = self.records[rid]
        if rec.expires is not None and now >= rec.expires:
            return False
        eff = self.eff_expires(rid)
        basis_expired = rec.status == Status.ACCEPTED and eff is not None and now >= eff
        if rec.status != Status.STALE and not (basis_expired and basis is not None):
            return False
        if basis is not None and not basis and rec.kind in NEEDS_BASIS:
            return False
        if basis is None:
            return all(self.usable(d, now) for d in rec.deps)
        below = self.descendants(rid) | {rid}
        return all(d not in below and self.usable(d, now) for d in basis)

    def revoke(self, rid: str) -> set[str]:
        stale = {
            child
            for child in self.descendants(rid)
            if self.records[child].status not in (Status.REVOKED, Status.REJECTED)
        }
        for child in stale:
            self.records[child].status = Status.STALE
        self.records[rid].status = Status.REVOKED
        return stale


class Cmd(NamedTuple):
    """One generated command; each command uses the fields it needs."""

    name: str
    i: int  # which record (or delivery), modulo how many there are
    targeted: bool  # pick among records in the status the command needs
    picks: tuple[int, ...]  # parents (propose) or a new basis (revalidate)
    new_basis: bool  # revalidate with ``picks`` as the new basis
    hours: int | None  # expiry of a proposal, or how far to advance the clock
    kind: Kind


# Weighted by repetition: histories need approvals and revocations to get deep.
NAMES = (
    *["propose"] * 4,
    "capture",
    *["accept"] * 4,
    "reject",
    *["revoke"] * 2,
    "deliver",
    *["revalidate"] * 2,
    "correct",
    "advance",
)
_index = st.integers(min_value=0, max_value=50)
_cmds = st.lists(
    st.builds(
        Cmd,
        name=st.sampled_from(NAMES),
        i=_index,
        targeted=st.booleans(),
        picks=st.lists(_index, max_size=3).map(tuple),
        new_basis=st.booleans(),
        hours=st.sampled_from([None, 1, 3]),
        kind=st.sampled_from([Kind.FACT, Kind.INFERENCE, Kind.REPORT]),
    ),
    min_size=20,
    max_size=50,
)


def _pick(items: list[str], i: int) -> str:
    return items[i % len(items)]


def _choose(model: Model, ids: list[str], i: int, targeted: bool, purpose: str) -> str:
    """A targeted pick chooses among records where the command can do something (so
    histories reach deep states); an untargeted one among all (so refusals happen)."""
    recs = model.records
    wanted: dict[str, Callable[[str], bool]] = {
        "accept": lambda r: recs[r].status == Status.CANDIDATE,
        "reject": lambda r: recs[r].status == Status.CANDIDATE,
        # revoking a record with live descendants makes STALE ones to revalidate
        "revoke": lambda r: (
            recs[r].status == Status.ACCEPTED
            and any(recs[d].status != Status.REVOKED for d in model.descendants(r))
        ),
        "deliver": lambda r: recs[r].status == Status.ACCEPTED,
        "revalidate": lambda r: recs[r].status == Status.STALE,
        "parent": lambda r: recs[r].status == Status.ACCEPTED,
    }
    pool = [r for r in ids if wanted[purpose](r)] if targeted else []
    return _pick(pool or ids, i)


def _run_command(
    cmd: Cmd, agent: Session, reviewer: Session, clock: Clock, model: Model, ids: list[str]
) -> None:
    """Run one command, check the library carries it out exactly when the model
    allows it (a refusal is a ``LedgerError``), and fold it into the model."""
    now = clock.now
    if cmd.name == "advance":
        clock.advance(hours=cmd.hours or 2)
        return
    if cmd.name == "capture":
        rid = f"E{len(ids)}"
        content = b"doc %d" % (cmd.i % 4)
        outcome = attempt(
            agent.capture, SCOPE, uri=f"https://x.test/{cmd.i % 4}", content=content, id=rid
        )
        assert outcome[0] == "ok", (cmd, outcome)
        model.records[rid] = ModelRecord(Status.CANDIDATE, None, (), Kind.EVIDENCE)
        ids.append(rid)
        return
    if cmd.name == "propose":
        parents = tuple(
            dict.fromkeys(_choose(model, ids, i, cmd.targeted, "parent") for i in cmd.picks if ids)
        )
        expires = None if cmd.hours is None else now + timedelta(hours=cmd.hours)
        rid = f"R{len(ids)}"
        expected = model.can_propose(parents)
        outcome = attempt(
            agent.propose,
            SCOPE,
            f"claim.{cmd.i % 2}",
            cmd.i % 3,
            cmd.kind,
            parents=list(parents),
            expires=expires,
            id=rid,
        )
        assert (outcome[0] == "ok") == expected, (cmd, parents, outcome)
        if expected:
            model.records[rid] = ModelRecord(Status.CANDIDATE, expires, parents, cmd.kind)
            ids.append(rid)
        return
    if cmd.name == "correct":
        if model.deliveries:
            outcome = attempt(reviewer.issue_correction, _pick(model.deliveries, cmd.i), "fixed")
            assert outcome[0] == "ok", (cmd, outcome)
        return
    if not ids:
        return
    rid = _choose(model, ids, cmd.i, cmd.targeted, cmd.name)
    rec = model.records[rid]
    if cmd.name == "accept":
        expected = model.can_accept(rid, now)
        outcome = attempt(reviewer.accept, rid)
        if expected:
            rec.status, rec.accepted_once = Status.ACCEPTED, True
    elif cmd.name == "reject":
        expected = rec.status == Status.CANDIDATE
        outcome = attempt(reviewer.reject, rid, reason="wrong")
        if expected:
            rec.status = Status.REJECTED
    elif cmd.name == "revoke":
        expected = rec.status in (Status.CANDIDATE, Status.ACCEPTED, Status.STALE)
        outcome = attempt(reviewer.revoke, rid, reason="withdrawn")
        if expected and outcome[0] == "ok":
            stale = model.revoke(rid)
            assert set(outcome[1].stale) == stale, (cmd, outcome)
    elif cmd.name == "deliver":
        expected = model.usable(rid, now)
        outcome = attempt(reviewer.deliver, rid, recipient="ops@x.test")
        if expected and outcome[0] == "ok":
            model.deliveries.append(outcome[1])
    else:  # revalidate
        basis = (
            tuple(dict.fromkeys(_choose(model, ids, i, True, "parent") for i in cmd.picks))
            if cmd.new_basis
            else None
        )
        expected = model.can_revalidate(rid, basis, now)
        outcome = attempt(reviewer.revalidate, rid, note="re-checked", parents=basis)
        if expected:
            rec.status = Status.ACCEPTED if rec.accepted_once else Status.CANDIDATE
            if basis is not None:
                rec.deps = basis
    assert (outcome[0] == "ok") == expected, (cmd, rid, outcome)


@contextmanager
def fresh_ledger(backend: str, clock: Clock) -> Iterator[Ledger]:
    """A new, empty ledger (memory, a temporary SQLite file or a fresh PostgreSQL
    schema), closed and removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        drop: Callable[[], None] = lambda: None  # noqa: E731
        if backend == "memory":
            url = "memory:"
        elif backend == "sqlite":
            url = f"sqlite:///{tmp}/ledger.db"
        else:
            url, drop = new_pg_schema_url()
        led = Ledger.open(url, clock=clock)
        try:
            yield led
        finally:
            led.close()
            drop()


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=_cmds)
def test_random_histories_follow_the_model_and_rebuild_to_identical_views(
    backend: str, script: list[Cmd]
) -> None:
    clock = Clock()
    with fresh_ledger(backend, clock) as led:
        agent, reviewer, _ = principals(led)
        model, ids = Model(), []

        # Step 1: every command is carried out exactly when the reference model allows it.
        for cmd in script:
            _run_command(cmd, agent, reviewer, clock, model, ids)

        # Step 2: the live views agree with the model about every record.
        live = {rid: reviewer.get(rid).status for rid in ids}
        assert live == {rid: rec.status for rid, rec in model.records.items()}
        digest = led.views_digest()

        # Step 3: dropping and replaying the views from every event gives the same digest...
        first = led.rebuild()
        assert first.matched, (first.digest_before, first.digest_after)
        assert first.digest_before == digest
        assert first.events == led.stats()["events"]

        # Step 4: ...and doing it again is harmless.
        second = led.rebuild()
        assert second.matched
        assert second.digest_after == first.digest_after == led.views_digest()
        assert {rid: reviewer.get(rid).status for rid in ids} == live


# -- as_of answers exactly what the ledger said then --------------------------------

CLAIMS = ("api.retry_safe", "report.weekly", "source:https://x.test/doc1")
RECORDS = ("E1", "E2", "M1", "M2", "M3", "R1")


def observe(session: Session) -> dict[str, Any]:
    """Everything a reviewer can ask: reads, explanations, records, audits, corrections due."""
    state: dict[str, Any] = {}
    for key in CLAIMS:
        state[f"read {key}"] = attempt(session.read, SCOPE, key)
        state[f"explain {key}"] = attempt(session.explain, SCOPE, key)
    for rid in RECORDS:
        state[f"get {rid}"] = attempt(session.get, rid)
        state[f"audit {rid}"] = attempt(session.audit, rid)
    state["corrections_due"] = attempt(session.corrections_due)
    return state


@dataclass(frozen=True)
class Captured:
    step: str
    position: int
    time: datetime
    state: dict[str, Any]


def test_as_of_every_position_answers_exactly_what_the_ledger_said_then(world: World) -> None:
    agent, reviewer, led, clock = world.agent, world.reviewer, world.ledger, world.clock
    made: dict[str, str] = {}

    def deliver() -> None:
        made["d"] = reviewer.deliver("R1", recipient="ops@x.test")

    steps: list[tuple[str, Callable[[], Any]]] = [
        (
            "capture E1",
            lambda: agent.capture(SCOPE, uri="https://x.test/doc1", content=b"safe", id="E1"),
        ),
        ("accept E1", lambda: reviewer.accept("E1")),
        (
            "propose M1",
            lambda: agent.propose(
                SCOPE,
                "api.retry_safe",
                True,
                Kind.FACT,
                parents=["E1"],
                expires=clock.now + timedelta(hours=2),
                id="M1",
            ),
        ),
        ("accept M1", lambda: reviewer.accept("M1", note="checked")),
        (
            "propose M2",
            lambda: agent.propose(
                SCOPE, "api.retry_safe", False, Kind.INFERENCE, parents=["E1"], id="M2"
            ),
        ),
        ("accept M2", lambda: reviewer.accept("M2")),
        (
            "propose M3",
            lambda: agent.propose(
                SCOPE,
                "api.retry_safe",
                True,
                Kind.FACT,
                conditions={"api_version": "v2"},
                id="M3",
            ),
        ),
        ("reject M3", lambda: reviewer.reject("M3", reason="unsupported")),
        (
            "propose R1",
            lambda: agent.propose(
                SCOPE, "report.weekly", "retry freely", Kind.REPORT, parents=["M1"], id="R1"
            ),
        ),
        ("accept R1", lambda: reviewer.accept("R1")),
        ("deliver R1", deliver),
        ("revoke M2", lambda: reviewer.revoke("M2", reason="model guess")),
        (
            "capture E2",
            lambda: agent.capture(SCOPE, uri="https://x.test/doc2", content=b"safe v2", id="E2"),
        ),
        ("accept E2", lambda: reviewer.accept("E2")),
        ("revoke E1", lambda: reviewer.revoke("E1", reason="doc changed")),
        ("revalidate M1", lambda: reviewer.revalidate("M1", note="doc2", parents=["E2"])),
        ("correct R1", lambda: reviewer.issue_correction(made["d"], "E1 was withdrawn")),
        ("revalidate R1", lambda: reviewer.revalidate("R1", note="re-read")),
        # M1 (and with it R1) expires before this step: time alone changes the answers.
        ("advance 3h", lambda: clock.advance(hours=3)),
        (
            "capture E3",
            lambda: agent.capture(SCOPE, uri="https://x.test/doc3", content=b"late", id="E3"),
        ),
    ]

    # Step 1: run the script, capturing every answer right after every command.
    captured = [Captured("start", led.position, clock.now, observe(reviewer))]
    for name, command in steps:
        clock.advance(minutes=1)
        command()
        if name.startswith("advance"):
            continue  # not a command: nothing in the log records it
        captured.append(Captured(name, led.position, clock.now, observe(reviewer)))
    assert len({c.position for c in captured}) == len(captured)  # every command wrote
    final = captured[-1].state
    assert final["read api.retry_safe"][1].outcome == Outcome.MISSING  # M1 expired by now
    assert captured[6].state["read api.retry_safe"][1].outcome == Outcome.CONFLICT

    # Step 2: as_of(position) of every captured position answers exactly the same.
    for cap in captured:
        past = reviewer.as_of(position=cap.position)
        assert past.read_only
        assert observe(past) == cap.state, cap.step

    # Step 3: as_of(time) at each step's clock time is the same as as_of(position).
    for cap in captured:
        by_time = reviewer.as_of(time=cap.time)
        assert by_time.position == cap.position, cap.step
        assert observe(by_time) == observe(reviewer.as_of(position=cap.position)), cap.step


def test_as_of_time_finds_the_newest_position_at_or_before_it_when_clocks_step_back(
    world: World, tmp_path: Path
) -> None:
    """The time index keeps a running maximum, so ``as_of(time=)`` bisects positions:
    with the writers' clock stepping back and repeating, every instant (between,
    on and around the indexed times) gives the position a scan of the index gives."""
    agent, reviewer, led, clock = world.agent, world.reviewer, world.ledger, world.clock
    for n, step in enumerate([0, 2, -3, 0, 5, -1, 1, 0, 0, 7, -9, 4, 1, 3]):
        clock.advance(seconds=step)
        rid = agent.propose("proj-a", f"tick.{n}", n, Kind.FACT, id=f"T{n}")
        if n % 3 == 0:
            reviewer.accept(rid)
    db = tmp_path / "ledger.db" if led.backend == "sqlite" else None
    index = raw_rows(led, db, "SELECT position, at FROM pl_timeline ORDER BY position")
    assert len(index) == led.position
    commits = raw_rows(led, db, "SELECT first_pos, last_pos FROM pl_commits")
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    latest = max(at for _, at in index)
    for micros in sorted({at + delta for _, at in index for delta in (-1, 0, 1)}):
        instant = epoch + timedelta(microseconds=micros)
        if micros > latest and instant > clock.now + CLOCK_SKEW:
            # After every event's time and the clock's (skew allowed): refused, as
            # a position beyond the log is (there is no past there yet)
            with pytest.raises(InvalidInputError, match="is in the future"):
                reviewer.as_of(time=instant)
            continue
        newest = max((p for p, at in index if at <= micros), default=0)
        expected = next((last for first, last in commits if first <= newest <= last), newest)
        assert reviewer.as_of(time=instant).position == expected, micros


def test_as_of_with_at_answers_what_was_believed_then_about_validity_at_another_time(
    world: World,
) -> None:
    agent, reviewer, led, clock = world.agent, world.reviewer, world.ledger, world.clock
    t0 = clock.now
    expiry = t0 + timedelta(hours=2)
    e1 = agent.capture(SCOPE, uri="https://x.test/doc", content=b"doc", id="E1")
    reviewer.accept(e1)
    agent.propose(SCOPE, "api.retry_safe", True, Kind.FACT, parents=[e1], expires=expiry, id="M1")
    candidate_pos = led.position
    clock.advance(minutes=5)
    reviewer.accept("M1")
    accepted_pos = led.position
    clock.advance(minutes=5)
    reviewer.revoke("M1", reason="vendor says otherwise")
    revoked_pos = led.position
    before, after = t0 + timedelta(hours=1), t0 + timedelta(hours=3)

    # Step 1: at the acceptance position we believed M1 valid until its expiry.
    believed = reviewer.as_of(position=accepted_pos)
    found = believed.read(SCOPE, "api.retry_safe", at=before)
    assert found.outcome == Outcome.FOUND
    assert [r.id for r in found.records] == ["M1"]
    assert found.at == before
    gone = believed.read(SCOPE, "api.retry_safe", at=after)
    assert gone.outcome == Outcome.MISSING
    assert gone.records == ()
    why = believed.explain(SCOPE, "api.retry_safe", at=after).entries[0]
    assert not why.usable
    assert any("expired" in r and expiry.isoformat() in r for r in why.reasons)
    assert believed.read(SCOPE, "api.retry_safe", at=expiry).outcome == Outcome.MISSING

    # Step 2: before acceptance it was only a candidate, whatever the time asked about.
    early = reviewer.as_of(position=candidate_pos)
    assert early.read(SCOPE, "api.retry_safe", at=before).outcome == Outcome.MISSING
    assert early.explain(SCOPE, "api.retry_safe", at=before).entries[0].reasons == (
        "candidate: not yet approved",
    )

    # Step 3: after the revocation nothing is believed valid, also about the past.
    assert (
        reviewer.as_of(position=revoked_pos).read(SCOPE, "api.retry_safe", at=before).outcome
        == Outcome.MISSING
    )
    assert reviewer.read(SCOPE, "api.retry_safe", at=before).outcome == Outcome.MISSING
    # ...while the belief at the acceptance position is unchanged by what came later.
    assert believed.read(SCOPE, "api.retry_safe", at=before).outcome == Outcome.FOUND


def test_as_of_any_position_of_a_revocation_shows_it_whole_or_not_at_all(world: World) -> None:
    """The root revocation and its stale markings are one atomic transaction (§3),
    so no log position may show the root REVOKED while a descendant is still usable."""
    agent, reviewer, led = world.agent, world.reviewer, world.ledger
    agent.capture(SCOPE, uri="https://x.test/doc", content=b"doc", id="E1")
    reviewer.accept("E1")
    agent.propose(SCOPE, "api.retry_safe", True, Kind.FACT, parents=["E1"], id="M1")
    reviewer.accept("M1")
    agent.propose(SCOPE, "report.weekly", "retry", Kind.REPORT, parents=["M1"], id="R1")
    reviewer.accept("R1")
    before = led.position
    revocation = reviewer.revoke("E1", reason="doc changed")
    (revoked_at,) = [e.position for e in reviewer.audit("E1").events if e.type == "Revoked"]
    assert before < revoked_at == revocation.position <= led.position

    # Every position from just before to just after the transaction, including the
    # one the audit trail gives for the revocation, is either all-before or all-after.
    for p in range(before, led.position + 1):
        past = reviewer.as_of(position=p)
        statuses = tuple(past.get(rid).status for rid in ("E1", "M1", "R1"))
        assert statuses in (
            (Status.ACCEPTED, Status.ACCEPTED, Status.ACCEPTED),
            (Status.REVOKED, Status.STALE, Status.STALE),
        ), (p, statuses)
        if statuses[0] == Status.REVOKED:
            assert past.read(SCOPE, "api.retry_safe").outcome == Outcome.MISSING, p


# -- delivery is history, validity is now --------------------------------------------


def test_delivery_stays_delivered_while_validity_changes_and_corrections_go_to_the_outbox(
    world: World, tmp_path: Path
) -> None:
    agent, reviewer, led = world.agent, world.reviewer, world.ledger
    db = db_path_of(led, tmp_path)
    deliveries_sql = "SELECT * FROM pl_deliveries ORDER BY delivery_id"
    e1 = agent.capture(SCOPE, uri="https://x.test/doc", content=b"doc", id="E1")
    reviewer.accept(e1)
    agent.propose(SCOPE, "report.weekly", "retry freely", Kind.REPORT, parents=[e1], id="R1")
    reviewer.accept("R1")

    # Step 1: deliver the report; it is VALID and nothing is due.
    d = reviewer.deliver("R1", recipient="ops@x.test", channel="email")
    delivered = reviewer.get("R1").deliveries
    assert [x.delivery_id for x in delivered] == [d]
    assert delivered[0].state == "DELIVERED"
    assert (delivered[0].recipient, delivered[0].channel) == ("ops@x.test", "email")
    assert reviewer.get("R1").validity == Validity.VALID
    assert reviewer.corrections_due() == ()
    rows_before = raw_rows(led, db, deliveries_sql)
    assert len(rows_before) == 1

    # Step 2: an upstream source is revoked: STALE, NEEDS_REVALIDATION, still delivered.
    reviewer.revoke(e1, reason="doc changed")
    stale = reviewer.get("R1")
    assert stale.status == Status.STALE
    assert stale.validity == Validity.NEEDS_REVALIDATION
    assert stale.deliveries == delivered
    due = reviewer.corrections_due()
    assert [x.delivery.delivery_id for x in due] == [d]
    assert due[0].validity == Validity.NEEDS_REVALIDATION
    assert due[0].cause == "E1"

    # Step 3: the report itself is revoked: INVALID, still delivered, rows untouched.
    reviewer.revoke("R1", reason="report withdrawn")
    revoked = reviewer.get("R1")
    assert revoked.status == Status.REVOKED
    assert revoked.validity == Validity.INVALID
    assert revoked.deliveries == delivered
    assert revoked.deliveries[0].state == "DELIVERED"
    assert raw_rows(led, db, deliveries_sql) == rows_before
    due = reviewer.corrections_due()
    assert [(x.delivery.delivery_id, x.validity) for x in due] == [(d, Validity.INVALID)]

    # Step 4: a correction takes it off the list and lands in the outbox.
    note = "E1 was withdrawn; retries are not known to be safe"
    cid = reviewer.issue_correction(d, note)
    assert reviewer.corrections_due() == ()
    (delivery,) = reviewer.get("R1").deliveries
    assert delivery.state == "DELIVERED"
    assert [(c.correction_id, c.note, c.issued_by) for c in delivery.corrections] == [
        (cid, note, "reviewer")
    ]
    outbox = raw_rows(
        led, db, "SELECT correction_id, delivery_id, recipient, channel, note FROM pl_outbox"
    )
    assert outbox == [(cid, d, "ops@x.test", "email", note)]
    assert raw_rows(led, db, deliveries_sql) == rows_before
    assert led.rebuild().matched


# -- a crash between the command and the view update -------------------------------


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_views_that_missed_events_catch_up_exactly_once_when_the_ledger_is_reopened(
    open_ledger: Callable[..., Ledger], tmp_path: Path
) -> None:
    db = tmp_path / "ledger.db"
    led = open_ledger()
    agent, reviewer, tokens = principals(led)
    e1 = agent.capture(SCOPE, uri="https://x.test/1", content=b"one", id="E1")
    e2 = agent.capture(SCOPE, uri="https://x.test/2", content=b"two", id="E2")
    agent.propose(SCOPE, "api.retry_safe", True, Kind.INFERENCE, parents=[e1], id="M1")

    # Step 1: stop the views (as if the process died after each commit) and keep writing.
    led.engine.projector.enabled = False
    stopped_at = led.position
    reviewer.accept(e1)
    reviewer.reject("M1", reason="a guess")
    agent.propose(SCOPE, "api.retry_safe", True, Kind.FACT, parents=[e1], id="M2")
    reviewer.revoke(e2, reason="doc changed")
    written = led.position
    assert written > stopped_at
    assert reviewer.get("E1").status == Status.CANDIDATE  # the view is behind the log
    # The views' position is the time index's newest: every view applies in step.
    assert raw_rows(led, db, "SELECT MAX(position) FROM pl_timeline") == [(stopped_at,)]
    led.close()

    # Step 2: reopening catches every view up from its tracking position.
    led = open_ledger()
    assert led.position == written
    agent = led.authenticate(tokens["agent-1"])
    reviewer = led.authenticate(tokens["reviewer"])
    statuses = {rid: reviewer.get(rid).status for rid in ("E1", "E2", "M1", "M2")}
    assert statuses == {
        "E1": Status.ACCEPTED,
        "E2": Status.REVOKED,
        "M1": Status.REJECTED,
        "M2": Status.CANDIDATE,
    }
    assert raw_rows(led, db, "SELECT MAX(position) FROM pl_timeline") == [(led.position,)]
    assert raw_rows(led, db, "SELECT view FROM pl_tracking") == [("#layout",)]

    # Step 3: nothing was applied twice: one row version per status event, one
    # timeline row per position, and nothing left to catch up.
    for rid in ("E1", "E2", "M1", "M2"):
        versions = raw_rows(led, db, "SELECT COUNT(*) FROM pl_records WHERE record_id=?", (rid,))
        status_events = [e for e in reviewer.audit(rid).events if e.type in STATUS_EVENTS]
        assert versions == [(len(status_events),)], rid
    assert raw_rows(led, db, "SELECT COUNT(*), COUNT(DISTINCT position) FROM pl_timeline") == [
        (written, written)
    ]
    assert led.catch_up() == 0
    assert led.rebuild().matched

    # Step 4: the caught-up views serve commands and reads as if nothing happened.
    reviewer.accept("M2")
    found = agent.read(SCOPE, "api.retry_safe")
    assert found.outcome == Outcome.FOUND
    assert [r.id for r in found.records] == ["M2"]
    assert led.rebuild().matched


def test_a_batch_writes_the_same_view_rows_as_one_command_at_a_time(
    world: World, tmp_path: Path
) -> None:
    # On PostgreSQL a batch's rows are streamed with COPY, one command's with
    # INSERT: text that COPY escapes (tab, newline, backslash, its null marker
    # \N), bytes, NULLs and edges must come out the same either way.
    led, agent = world.ledger, world.agent
    db = db_path_of(led, tmp_path)
    expires = world.clock.now + timedelta(days=3)

    def items(prefix: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i in range(10):
            out.append(
                {
                    "scope": SCOPE,
                    "claim_key": f"{prefix}.k\\N\\{i}\u200d\u00a0.é",
                    "value": {"t": "tab\there\nnew line \\N back\\slash", "n": i, "b": b"\x00\\\n"},
                    "kind": Kind.FACT,
                    "conditions": {"region": "eu\tw"} if i % 2 else {},
                    "expires": expires if i % 3 == 0 else None,
                    "parents": [f"{prefix}-{i - 1}"] if i else [],
                    "id": f"{prefix}-{i}",
                }
            )
        return out

    assert len(items("batch")) >= COPY_FROM  # so PostgreSQL takes the COPY path
    assert agent.propose_many(items("batch")) == [f"batch-{i}" for i in range(10)]
    for item in items("single"):
        fields = dict(item)
        rid = fields.pop("id")
        agent.propose(
            fields.pop("scope"),
            fields.pop("claim_key"),
            fields.pop("value"),
            fields.pop("kind"),
            id=rid,
            **fields,
        )

    columns = "kind, value, status, proposer, expires, eff_expires, conditions, to_pos"

    def view(prefix: str) -> list[tuple[Any, ...]]:
        rows = raw_rows(
            led,
            db,
            f"SELECT record_id, claim_key, {columns} FROM pl_records "
            "WHERE record_id LIKE ? ORDER BY record_id",
            (f"{prefix}-%",),
        )
        return [(rid.split("-", 1)[1], key.split(".", 1)[1], *rest) for rid, key, *rest in rows]

    def edges(prefix: str) -> list[tuple[str, str, str]]:
        rows = raw_rows(
            led,
            db,
            "SELECT parent_id, child_id, edge FROM pl_edges WHERE child_id LIKE ? "
            "ORDER BY child_id",
            (f"{prefix}-%",),
        )
        return [(p.split("-", 1)[1], ch.split("-", 1)[1], e) for p, ch, e in rows]

    batch = view("batch")
    assert len(batch) == 10
    assert batch == view("single")
    assert edges("batch") == edges("single") and len(edges("batch")) == 9
    got = agent.get("batch-4")
    assert got.value == items("batch")[4]["value"]
    assert got.claim_key == items("batch")[4]["claim_key"]


def _view_indexes(led: Ledger, db: Path | None) -> set[tuple[str, str]]:
    """(index, definition) of every index on the views, as the database states it."""
    if led.backend == "postgresql":
        schema = led.engine.dialect.prefix.rstrip(".").strip('"')
        with led.engine.reading() as c:
            c.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname=%s "
                "AND tablename LIKE 'pl%%'",
                (schema,),
            )
            rows = [tuple(r.values()) for r in c.fetchall()]
    else:  # an SQLite file, or memory: (read on the ledger's own connection)
        rows = raw_rows(
            led,
            db,
            "SELECT name, sql FROM sqlite_master WHERE type='index' AND tbl_name LIKE 'pl%'",
        )
    return {(str(name), str(sql)) for name, sql in rows}


def test_a_rebuild_builds_every_index_a_fresh_ledger_has(
    open_ledger: Callable[..., Ledger], ledger_url: str, tmp_path: Path
) -> None:
    """The read-only indexes are built after a rebuild's rows are in, not left out."""
    db = tmp_path / "ledger.db" if ledger_url.startswith("sqlite") else None
    led = open_ledger()
    fresh = _view_indexes(led, db)
    assert {
        "pl_records_claim",
        "pl_records_accepted",
        "pl_records_open",
        "pl_records_expiring",
        "pl_records_snapshot",
    } <= {name for name, _ in fresh}
    agent, reviewer, _ = principals(led)
    agent.capture(SCOPE, uri="https://x.test/1", content=b"one", id="E1")
    agent.propose(SCOPE, "k", 1, Kind.FACT, parents=["E1"], id="M1")
    reviewer.accept("E1")
    assert led.rebuild().matched
    assert _view_indexes(led, db) == fresh
    assert [r.id for r in reviewer.records(SCOPE)] == ["E1", "M1"]


def test_a_later_event_of_a_record_never_proposed_is_refused_and_nothing_is_written(
    world: World,
) -> None:
    """Views find a record event's record by its stored proposal (no id map is kept):
    an event whose aggregate has none is refused as corrupt, naming its position,
    and the log and the views stay as they were."""
    led, reviewer = world.ledger, world.reviewer
    world.agent.propose("proj-a", "k", 1, Kind.FACT, id="M1")
    before, digest = led.position, led.digest()
    ghost = Record.Accepted(
        originator_id=record_uuid("never-proposed", datetime.now(UTC)),
        originator_version=2,
        timestamp=datetime.now(UTC),
        actor="reviewer",
        note="",
    )
    with pytest.raises(CorruptEventError, match=rf"position {before + 1} belongs to no proposed"):
        led.engine.transact(lambda w: w.append([ghost]))
    assert (led.position, led.digest()) == (before, digest)
    # A real record's later event still finds its record, within one batch or not.
    reviewer.accept("M1")
    assert reviewer.get("M1").status == Status.ACCEPTED
    assert led.rebuild().matched
    assert led.verify().ok


def test_postgres_batches_and_rebuilds_leave_the_planner_current_statistics(
    pg_url: str,
) -> None:
    """Right after a large import or a rebuild (before PostgreSQL's autovacuum has
    looked), a record's current row is found by its key, not by reading a whole
    partial listing index, which is what stale statistics made the planner do."""
    import psycopg

    from .conftest import _pg_dsn

    led = Ledger.open(pg_url)
    schema = pg_url.rsplit("schema=", 1)[1]
    try:
        admin = led.admin()
        admin.grant("agent", "s", ["propose"])
        agent = led.authenticate(admin.issue_token("agent"))
        for start in range(0, 6000, 1000):
            agent.propose_many(
                [
                    {"scope": "s", "claim_key": f"k{i}", "value": i, "kind": "fact", "id": f"F{i}"}
                    for i in range(start, start + 1000)
                ]
            )

        def plan() -> str:
            with psycopg.connect(_pg_dsn()) as db:
                rows = db.execute(
                    f"EXPLAIN SELECT * FROM {schema}.pl_records "
                    "WHERE record_id = 'F10' AND to_pos IS NULL"
                ).fetchall()
            return "\n".join(str(r[0]) for r in rows)

        def analyzed() -> bool:
            with psycopg.connect(_pg_dsn()) as db:
                row = db.execute(
                    "SELECT reltuples FROM pg_class WHERE oid = %s::regclass",
                    (f"{schema}.pl_records",),
                ).fetchone()
            return row is not None and float(row[0]) >= 4000

        assert analyzed()
        assert "pl_records_pkey" in plan() and "_accepted" not in plan() and "_open" not in plan()
        assert led.rebuild().matched
        assert analyzed()
        assert "pl_records_pkey" in plan() and "_accepted" not in plan() and "_open" not in plan()
    finally:
        led.close()


def test_inserted_rows_keep_every_value_whether_its_column_is_null_in_all_rows_or_some() -> None:
    # On SQLite, columns NULL in every row of an insert are written as a NULL
    # literal rather than bound: falsy values (0, "", b"", False) are values, a
    # column NULL in one row but not another is bound, and one row or many agree.
    import sqlite3

    from projections.base import SQLITE, insert_rows

    columns = ("a", "b", "c", "d", "e", "f")
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, a, b, c, d, e, f)")
    batches: list[list[tuple[Any, ...]]] = [
        [(0, None, "", None, b"", None)],
        [(None, None, None, None, None, 1)],
        [(1, None, False, None, b"x", None), (None, None, 2.5, None, b"", "z")],
        [(None,) * 6, (None,) * 6],
        [(i, None, str(i) if i % 2 else None, None, bytes([i]), None) for i in range(50)],
        [(7, "b", "c", "d", b"e", 0.0)],
    ]
    written: list[tuple[Any, ...]] = []
    for rows in batches:
        numbered = [(len(written) + i, *row) for i, row in enumerate(rows)]
        insert_rows(con, SQLITE, "t", ("n", *columns), numbered)
        written += numbered
    got = con.execute("SELECT n, a, b, c, d, e, f FROM t ORDER BY n").fetchall()
    assert got == [tuple(int(v) if isinstance(v, bool) else v for v in row) for row in written]
    assert [type(v) for v in got[0]] == [int, int, type(None), str, type(None), bytes, type(None)]


def test_the_delivery_and_access_views_are_handed_every_event_type_they_fold() -> None:
    # The projector gives these views only the event types in their EVENTS: one
    # missing there would silently never reach its view.
    import re

    from eventsourcing.domain import DomainEvent

    from ledger.domain import Principal, Run
    from projections import access, delivery

    def events_of(*aggregates: type) -> set[type]:
        return {
            value
            for aggregate in aggregates
            for name, value in vars(aggregate).items()
            if isinstance(value, type)
            and issubclass(value, DomainEvent)
            and name not in ("Event", "Created")  # eventsourcing's own bases
        }

    assert events_of(Principal, Run) == access.EVENTS
    assert {Record.Delivered, Record.CorrectionIssued} == delivery.EVENTS
    folded = {
        name
        for module in (access, delivery)
        for name in re.findall(
            r"isinstance\(event, (\w+\.\w+)\)", Path(str(module.__file__)).read_text("utf-8")
        )
    }
    assert folded == {t.__qualname__ for t in access.EVENTS | delivery.EVENTS}


def test_a_revocation_hands_the_views_the_rows_it_read_instead_of_reading_again(
    tmp_path: Path,
) -> None:
    # Revoking reads each descendant's view row once (to decide which to mark);
    # the views continue from those rows: no second read of them, and no look-up of
    # the descendants' stored proposals to learn their record ids.
    led = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        admin = led.admin()
        admin.grant("agent", SCOPE, ["propose", "read"])
        admin.grant("reviewer", SCOPE, ["approve", "read"])
        agent = led.authenticate(admin.issue_token("agent"))
        reviewer = led.authenticate(admin.issue_token("reviewer"))
        items: list[dict[str, Any]] = [
            {"scope": SCOPE, "claim_key": "root", "value": 0, "kind": Kind.FACT, "id": "root"}
        ]
        items += [
            {
                "scope": SCOPE,
                "claim_key": f"k{i}",
                "value": i,
                "kind": Kind.INFERENCE,
                "parents": ["root"] if i < 10 else [f"d{i - 10}"],
                "id": f"d{i}",
            }
            for i in range(40)
        ]
        for rid in agent.propose_many(items):
            reviewer.accept(rid)
        with led.engine.locked() as c:
            writer = c.connection
        statements: list[str] = []
        writer.set_trace_callback(statements.append)
        try:
            revocation = reviewer.revoke("root", "retracted")
        finally:
            writer.set_trace_callback(None)
        assert len(revocation.stale) == 40
        proposals = [s for s in statements if "originator_version = 1" in s]
        current = "FROM pl_records r WHERE record_id IN"
        rows = [s for s in statements if s.startswith("SELECT ") and current in s]
        assert proposals == [] and len(rows) == 1, statements
        assert {reviewer.get(f"d{i}").status for i in range(40)} == {Status.STALE}
        assert led.rebuild().matched
    finally:
        led.close()


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgres"], indirect=True)
def test_views_of_layout_14_are_rebuilt_in_each_backends_layout(
    open_ledger: Callable[..., Ledger], ledger_url: str
) -> None:
    """Layout 15 changed SQLite's listing indexes alone (``record_table.COVERED``),
    and 16 and 17 PostgreSQL's indexes alone (``record_table.CLAIM_WALK``,
    ``FILTER_WALK``): views of layout 14 are rebuilt on open, in 15 on SQLite and
    17 on PostgreSQL, each with its own indexes."""
    from .attacks import Raw

    led = open_ledger()
    agent, _, _ = principals(led)
    agent.propose(SCOPE, "k", 1, Kind.FACT, id="M1")
    raw = Raw(led)
    sqlite = led.backend == "sqlite"
    layout = 15 if sqlite else 17
    assert raw.one("SELECT position FROM pl_tracking WHERE view = '#layout'") == [(layout,)]
    led.close()
    # Given views of layout 14, and a view row changed, which only a rebuild puts back
    raw.run(
        ("UPDATE pl_tracking SET position = 14 WHERE view = '#layout'", ()),
        ("UPDATE pl_records SET proposer = 'forged' WHERE record_id = 'M1'", ()),
    )
    # When the ledger opens again
    open_ledger()
    # Then its views were rebuilt in the backend's layout
    assert raw.one("SELECT position FROM pl_tracking WHERE view = '#layout'") == [(layout,)]
    assert raw.one("SELECT proposer FROM pl_records WHERE record_id = 'M1'") == [("agent-1",)]
    # with SQLite's listing entries holding expiries, PostgreSQL's claim index partial
    if sqlite:
        (accepted,) = raw.one("SELECT sql FROM sqlite_master WHERE name = 'pl_records_accepted'")
        (claim,) = raw.one("SELECT sql FROM sqlite_master WHERE name = 'pl_records_claim'")
    else:
        indexdef = "SELECT indexdef FROM pg_indexes WHERE schemaname = ? AND indexname = ?"
        (accepted,) = raw.one(indexdef, (raw.schema, "pl_records_accepted"))
        (claim,) = raw.one(indexdef, (raw.schema, "pl_records_claim"))
    assert ("eff_expires" in accepted[0]) == sqlite, accepted
    assert ("WHERE (length(claim_key) >= 0)" in claim[0]) != sqlite, claim


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgres"], indirect=True)
def test_views_a_later_version_built_are_refused_not_rebuilt_until_an_explicit_rebuild(
    open_ledger: Callable[..., Ledger], ledger_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An older version opening a ledger a later one migrated would rebuild the views
    in its own layout, and the later version again in its own: it refuses instead."""
    from .attacks import Raw

    led = open_ledger()
    agent, _, tokens = principals(led)
    agent.propose(SCOPE, "k", 1, Kind.FACT, id="M1")
    raw = Raw(led)
    (current,) = raw.one("SELECT position FROM pl_tracking WHERE view = '#layout'")[0]
    written = led.position
    led.close()
    # Given views that say a later version built them (PostgreSQL's 15 is no later's)
    raw.run(("UPDATE pl_tracking SET position = ? WHERE view = '#layout'", (current + 2,)))
    # When the ledger opens, it is refused, and the views are left as they were
    with pytest.raises(LedgerError, match=r"built by a later version of provledger \(layout "):
        open_ledger()
    assert raw.one("SELECT position FROM pl_tracking WHERE view = '#layout'") == [(current + 2,)]
    # Opened without catching up, it reads, and a write is refused, naming the version
    kept = open_ledger(catch_up=False)
    assert kept.authenticate(tokens["reviewer"]).get("M1").status is Status.CANDIDATE
    with pytest.raises(LedgerError, match="open it with that version or a later one"):
        kept.authenticate(tokens["reviewer"]).accept("M1")
    assert kept.position == written
    # An explicit rebuild goes back to this version's layout, saying whose they were
    assert kept.rebuild().matched
    assert f"built by a later version of provledger (layout {current + 2})" in caplog.text
    assert "earlier version" not in caplog.text
    assert raw.one("SELECT position FROM pl_tracking WHERE view = '#layout'") == [(current,)]
    kept.close()
    open_ledger().authenticate(tokens["reviewer"]).accept("M1")


@pytest.mark.parametrize("ledger_url", ["postgres"], indirect=True)
def test_postgresql_views_development_builds_marked_15_are_rebuilt_not_refused(
    open_ledger: Callable[..., Ledger], ledger_url: str
) -> None:
    from .attacks import Raw

    led = open_ledger()
    agent, _, _ = principals(led)
    agent.propose(SCOPE, "k", 1, Kind.FACT, id="M1")
    raw = Raw(led)
    led.close()
    raw.run(("UPDATE pl_tracking SET position = 15 WHERE view = '#layout'", ()))

    open_ledger()

    assert raw.one("SELECT position FROM pl_tracking WHERE view = '#layout'") == [(17,)]
