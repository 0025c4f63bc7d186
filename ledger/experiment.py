"""The reproducible experiment: revocation propagation and read filtering.

Builds, on a fresh ledger, evidence E1 → memory M1 → plan basis M2 → report R1,
plus independent evidence E2 (with an expiry), and checks each row of the
table. Approvals are made by a separate reviewer principal, never the proposer.
``provledger demo`` and ``scripts/run_experiment.py`` both run it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from ledger.application import Ledger
from ledger.domain import Kind, Outcome, Status, Validity
from ledger.errors import LedgerError


@dataclass(frozen=True)
class Row:
    """One check of the experiment."""

    check: str
    expected: str
    observed: str
    passed: bool


@dataclass(frozen=True)
class ExperimentResult:
    """Every row, and whether all passed."""

    url: str
    rows: tuple[Row, ...]

    @property
    def passed(self) -> bool:
        """True when every row passed."""
        return all(r.passed for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        """The JSON document written by ``scripts/run_experiment.py``."""
        return {"url": self.url, "passed": self.passed, "rows": [asdict(r) for r in self.rows]}


CLAIM = "api.orders.retry_safe"


def run_experiment(ledger: Ledger) -> ExperimentResult:
    """Run the scenario on ``ledger`` (which must be empty) and check every row.

    Raises:
        LedgerError: the ledger is not empty.
    """
    if ledger.position != 0:
        raise LedgerError(f"the experiment needs an empty ledger; {ledger.url!r} has events")
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("agent-1", scope="proj-b", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
    agent = ledger.authenticate(admin.issue_token("agent-1"))
    reviewer = ledger.authenticate(admin.issue_token("reviewer"))
    rows: list[Row] = []

    def row(check: str, expected: str, observed: str, passed: bool) -> None:
        rows.append(Row(check=check, expected=expected, observed=observed, passed=passed))

    # The chain E1 -> M1 -> M2 -> R1, each accepted by the reviewer.
    e1 = agent.capture(
        scope="proj-a",
        uri="https://docs.example.test/orders-api",
        content=b"POST /orders may be retried safely with an Idempotency-Key header.",
        id="E1",
    )
    reviewer.accept(e1, note="fetched from the vendor's docs")
    m1 = agent.propose(
        scope="proj-a", claim_key=CLAIM, value=True, kind=Kind.INFERENCE, parents=[e1], id="M1"
    )
    fresh = agent.read(scope="proj-a", claim_key=CLAIM)
    row("a fresh, unapproved candidate", "MISSING", fresh.outcome, fresh.outcome == Outcome.MISSING)
    reviewer.accept(m1, note="matches E1")
    m2 = agent.propose(
        scope="proj-a",
        claim_key="plan.orders.retry_policy",
        value="retry POST /orders up to 3 times",
        kind=Kind.PLAN,
        parents=[m1],
        id="M2",
    )
    reviewer.accept(m2)
    r1 = agent.propose(
        scope="proj-a",
        claim_key="report.orders.weekly",
        value="Orders API: safe retries enabled",
        kind=Kind.REPORT,
        parents=[m2],
        id="R1",
    )
    reviewer.accept(r1)
    reviewer.deliver(r1, recipient="ops@example.test", channel="email")

    # Independent evidence E2 with an expiry.
    e2_expires = ledger.now() + timedelta(days=30)
    e2 = agent.capture(
        scope="proj-a",
        uri="https://status.example.test/orders",
        content=b"orders service: operational",
        claim_key="status.orders",
        value="operational",
        expires=e2_expires,
        id="E2",
    )
    reviewer.accept(e2)

    other = agent.read(scope="proj-b", claim_key=CLAIM)
    row(
        "project A's memory read under project B's scope",
        "MISSING",
        other.outcome,
        other.outcome == Outcome.MISSING,
    )

    # A run that reads E1 without declaring it, then proposes M3.
    with agent.run("task-42") as run:
        run.read(scope="proj-a", claim_key="source:https://docs.example.test/orders-api")
        m3 = run.propose(
            scope="proj-a",
            claim_key="api.orders.retry_backoff",
            value="exponential",
            kind=Kind.INFERENCE,
            id="M3",
        )
    reviewer.accept(m3)

    revocation = reviewer.revoke(e1, reason="vendor docs changed: retries are not idempotent")
    want = {"E1", "M1", "M2", "R1"}
    row(
        "revoke E1",
        "E1, M1, M2, R1 all in the affected set",
        ", ".join(revocation.affected),
        want <= set(revocation.affected),
    )

    after = agent.read(scope="proj-a", claim_key="report.orders.weekly")
    row("read R1 afterwards", "MISSING", after.outcome, after.outcome == Outcome.MISSING)

    independent = agent.read(scope="proj-a", claim_key="status.orders")
    row(
        "read independent E2",
        "FOUND",
        independent.outcome,
        independent.outcome == Outcome.FOUND and independent.records[0].id == "E2",
    )

    at_expiry = agent.read(scope="proj-a", claim_key="status.orders", at=e2_expires)
    row(
        "read E2 at its expiry instant",
        "MISSING",
        at_expiry.outcome,
        at_expiry.outcome == Outcome.MISSING,
    )

    yes = agent.propose(
        scope="proj-a",
        claim_key="api.orders.idempotent",
        value=True,
        kind=Kind.FACT,
        parents=[e2],
        id="F1",
    )
    no = agent.propose(
        scope="proj-a",
        claim_key="api.orders.idempotent",
        value=False,
        kind=Kind.FACT,
        parents=[e2],
        id="F2",
    )
    reviewer.accept(yes)
    reviewer.accept(no)
    conflict = agent.read(scope="proj-a", claim_key="api.orders.idempotent")
    kept = ", ".join(r.id for r in conflict.records)
    row(
        "two valid records with opposite values for one claim",
        "CONFLICT, both kept",
        f"{conflict.outcome} ({kept})",
        conflict.outcome == Outcome.CONFLICT and {r.id for r in conflict.records} == {"F1", "F2"},
    )

    report = reviewer.get("R1")
    delivered = "DELIVERED" if report.deliveries else "not delivered"
    row(
        "R1 was delivered before the revocation",
        "DELIVERED and NEEDS_REVALIDATION",
        f"{delivered} and {report.validity}",
        bool(report.deliveries) and report.validity == Validity.NEEDS_REVALIDATION,
    )

    trail = reviewer.audit("E1")
    revoked = [e for e in trail.events if e.type == "Revoked"]
    reason = revoked[-1].details.get("reason", "") if revoked else ""
    row(
        "audit of E1",
        "still shows its status and the revocation reason",
        f"{trail.record.status}: {reason}",
        trail.record.status == Status.REVOKED and bool(reason),
    )

    observed = reviewer.audit("M3")
    row(
        "a record built on a read it observed but did not declare becomes "
        "STALE when that source is revoked",
        "M3 STALE, E1 flagged undeclared",
        f"M3 {observed.record.status}, undeclared: {', '.join(observed.undeclared) or '-'}",
        observed.record.status == Status.STALE and "E1" in observed.undeclared,
    )
    return ExperimentResult(url=ledger.url, rows=tuple(rows))
