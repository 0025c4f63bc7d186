"""The same public API calls give the same answers on memory, SQLite and PostgreSQL.

A generated sequence of operations (two principals interleaving proposals and
approvals in two scopes, batch proposals with a bad item inside, captures, runs
with observed reads, revocations, revalidations with and without a new basis,
supersession, deliveries and corrections, grants given and withdrawn midway, a
token expiring, time moving past expiries, rebuilds, verifications, the file
reopened between steps and a second handle on the same database) is carried out
on every backend (``differential_driver``). After each step every backend must
have answered the same (the value or the error and its message, and the log
position); after each write, everything the auditor and a one-scope reader are
told must be the same too (reads, also at a later instant, explanations with and
without a limit, every record and its audit trail, listings filtered and paged,
which must agree with the whole listing filtered by hand, due corrections, the
history). At the end, as of every earlier log position and moment, the auditor
must be told exactly what it was told then (SPEC §8), on every backend.

PostgreSQL takes part when the test server is reachable (always on CI: see
``conftest.PG_REQUIRED``); each example gets its own schema, dropped afterwards.
``PROVLEDGER_DIFF_EXAMPLES=N`` runs a longer campaign.
"""

from __future__ import annotations

import os
from datetime import datetime
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ledger.errors import InvalidValueError

from .conftest import PG_REQUIRED, World, pg_reachable
from .differential_driver import CLAIMS, LATER, SCOPES, Backend, Driver, Op, observe

BACKENDS = (
    ("memory", "sqlite", "postgres") if PG_REQUIRED or pg_reachable() else ("memory", "sqlite")
)
EXAMPLES = int(os.environ.get("PROVLEDGER_DIFF_EXAMPLES", "12"))
_ON_CI = os.environ.get("CI", "").lower() == "true"

# -- the operations ---------------------------------------------------------------

index = st.integers(0, 40)
actor = st.sampled_from(("alice", "alice", "bob", "bob", "carol", "dave"))
approver = st.sampled_from(("bob", "bob", "bob", "carol", "dave", "alice"))
scope = st.sampled_from(SCOPES)
claim = st.sampled_from(CLAIMS)
value = st.sampled_from((0, 1, 1.0, True, "yes", None, (1, 2)))
kind = st.sampled_from(("fact", "inference", "report", "plan"))
minutes = st.sampled_from((None, None, None, 30, 60, 120, 600))
conditions = st.sampled_from(((), (), (("v", "1"),), (("v", "2"),)))
flaw = st.sampled_from(("none", "none", "none", "duplicate", "ghost-parent", "spaced-claim",
                        "past-expiry", "earlier-item"))  # fmt: skip

OPS: st.SearchStrategy[Op] = st.one_of(
    st.tuples(
        st.just("propose"),
        st.tuples(actor, scope, claim, value, kind),
        st.lists(index, max_size=2).map(tuple),
        st.tuples(minutes, conditions, st.one_of(st.none(), st.none(), index)),
    ).map(lambda t: (t[0], *t[1], t[2], *t[3])),
    st.tuples(
        st.just("propose_many"),
        actor,
        st.lists(
            st.tuples(
                scope, claim, st.integers(0, 3), st.lists(index, max_size=1).map(tuple), flaw
            ),
            min_size=1,
            max_size=3,
        ).map(tuple),
    ),
    st.tuples(st.just("capture"), actor, scope, st.integers(0, 2), st.integers(0, 3), minutes),
    st.tuples(
        st.just("propose_accepted"),
        actor,
        approver,
        scope,
        claim,
        st.lists(index, max_size=2).map(tuple),
    ),
    st.tuples(st.just("accept"), approver, index),
    st.tuples(st.just("accept"), approver, index),
    st.tuples(st.just("reject"), approver, index),
    st.tuples(st.just("revoke"), approver, index),
    st.tuples(
        st.just("revalidate"),
        approver,
        index,
        st.one_of(st.none(), st.lists(index, max_size=2).map(tuple)),
    ),
    st.tuples(st.just("deliver"), approver, index),
    st.tuples(st.just("correct"), st.sampled_from(("bob", "auditor", "eve")), index, st.booleans()),
    st.tuples(st.just("run"), actor, scope, st.lists(claim, max_size=2).map(tuple), claim, index),
    st.tuples(
        st.sampled_from(("grant", "revoke_grant")),
        st.sampled_from(("alice", "bob", "carol", "eve")),
        scope,
        st.sampled_from(("read", "propose", "approve", "audit", "deliver")),
    ),
    st.tuples(st.just("revoke_token"), st.sampled_from(("carol", "dave"))),
    st.tuples(st.just("advance"), st.sampled_from((1, 29, 31, 61, 91, 200))),
    st.tuples(st.sampled_from(("rebuild", "verify", "reopen", "swap", "swap"))),
)

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    print_blob=True,
    phases=[p for p in Phase if not (_ON_CI and p == Phase.shrink)],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- comparisons ----------------------------------------------------------------------


def _same(what: str, answers: dict[str, Any]) -> None:
    """Every backend answered as the first one did."""
    first_name, first = next(iter(answers.items()))
    for name, got in answers.items():
        if got != first:
            diff = _differences(first, got)
            raise AssertionError(f"{what}: {first_name} and {name} differ: {diff}")


def _differences(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    return (a, b)


def run_sequence(driver: Driver, ops: list[Op]) -> None:
    """Carry out ``ops`` on every backend, comparing every answer; then replay as of
    every position written, comparing with what was answered then."""
    _same("setup", driver.setup())
    kept: dict[str, list[Kept]] = {b.name: [] for b in driver.backends}
    position = driver.backends[0].led.position

    def look(step: str, record: bool) -> None:
        seen = driver.each(driver.observe)
        for name, told in seen.items():
            for scope in driver.scopes.values():
                wrong = told.get(f"listing problems {scope}") if isinstance(told, dict) else None
                assert not wrong, f"{step}: {name}: {wrong}"
        _same(f"{step}: what the auditor is told", seen)
        _same(f"{step}: what eve (B only) is told", driver.each(lambda b: driver.observe(b, "eve")))
        if record:
            for b in driver.backends:
                kept[b.name].append(
                    (b.led.position, driver.clock.now, list(driver.ids), seen[b.name])
                )

    look("after setup", True)
    for n, op in enumerate(ops):
        answers = driver.apply(op)
        _same(f"step {n} {op}", answers)
        now = driver.backends[0].led.position
        if now != position or op[0] in ("advance", "reopen", "rebuild", "revoke_grant", "swap"):
            look(f"after step {n} {op}", now != position)
        position = now
    for who in ("alice", "bob", "carol", "dave"):
        _same(f"at the end, what {who} is told", driver.each(partial(driver.observe, who=who)))
    for b in driver.backends:
        _replay(driver, b, kept[b.name])


#: What the auditor was told right after a command: (log position, clock, record ids
#: named so far, the observation).
Kept = tuple[int, datetime, list[str], Any]


def _replay(driver: Driver, b: Backend, kept: list[Kept]) -> None:
    """As of each kept position, and as of each kept moment (the newest position at
    or before it), the auditor is told what it was told then."""
    auditor = b.session("auditor")
    assert not isinstance(auditor, Exception), auditor
    scopes = tuple(driver.scopes.values())
    newest_at = {when: n for n, (_, when, _, _) in enumerate(kept)}
    for n, (position, when, ids, then) in enumerate(kept):
        asks = [("position", auditor.as_of(position=position))]
        if newest_at[when] == n:
            asks.append(("time", auditor.as_of(time=when)))
        for how, past in asks:
            now = observe(past, b.norm, ids, scopes, driver.claims, driver.page, when + LATER)
            if now != then:
                raise AssertionError(
                    f"{b.name}: as of {how} (position {position}, {when.isoformat()}) the "
                    f"auditor is told otherwise than it was then: {_differences(then, now)}"
                )


# -- the tests ------------------------------------------------------------------------


@SETTINGS
@given(ops=st.lists(OPS, min_size=4, max_size=24))
def test_generated_sequences_answer_alike_on_every_backend_and_as_of_every_position(
    ops: list[Op],
) -> None:
    driver = Driver(BACKENDS)
    try:
        run_sequence(driver, ops)
    finally:
        driver.close()


# -- refusals that leave every backend alike ----------------------------------------


@pytest.mark.skipif("postgres" not in BACKENDS, reason="PostgreSQL is unreachable")
def test_a_refused_proposal_with_acceptance_leaves_the_same_positions_on_every_backend() -> None:
    driver = Driver(BACKENDS)
    try:
        _same("setup", driver.setup())
        # Given a candidate C1
        _same(
            "propose C1",
            driver.apply(("propose", "alice", "A", "k0", 1, "fact", (), None, (), None)),
        )
        # When a proposal resting on it is made with acceptance by bob (refused:
        # C1 is not accepted) and then another proposal is made
        refused = driver.apply(("propose_accepted", "alice", "bob", "A", "k1", (0,)))
        assert all(answer[0][1] == "InvalidParentError" for answer in refused.values()), refused
        then = driver.apply(("propose", "alice", "A", "k2", 2, "fact", (), None, (), None))
        # Then every backend stores it at the same log position
        _same("the proposal after the refused one", then)
    finally:
        driver.close()


def test_capture_refuses_a_claim_key_holding_a_lone_surrogate_as_propose_does(
    world: World,
) -> None:
    # Given a claim key that is not valid Unicode, which propose refuses by name
    before = world.ledger.position
    with pytest.raises(InvalidValueError, match="claim_key"):
        world.agent.propose("proj-a", "ok\ud866", 1, "fact")
    # Then capture refuses it the same way, and the log is unchanged
    with pytest.raises(InvalidValueError, match="claim_key"):
        world.agent.capture(
            scope="proj-a", uri="https://x.test/d", content=b"x", claim_key="ok\ud866"
        )
    assert world.ledger.position == before
