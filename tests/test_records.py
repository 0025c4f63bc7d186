"""``Session.records``: the review queue and what needs attention, one call each."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import timedelta
from typing import Any

import pytest

from ledger import Kind, Status, Validity
from ledger.errors import AccessDeniedError, InvalidInputError, InvalidKindError
from projections import queries
from tests.conftest import World


def _setup(world: World) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/a", content=b"a", id="E1")
    reviewer.accept("E1")
    for i in range(5):
        agent.propose(
            scope="proj-a",
            claim_key=f"api.k{i}",
            value=i,
            kind=Kind.INFERENCE,
            parents=["E1"],
            id=f"M{i}",
        )
    for i in (0, 1, 2):
        reviewer.accept(f"M{i}")
    agent.propose(scope="proj-a", claim_key="plan.x", value=1, kind=Kind.PLAN, id="P1")
    agent.propose(scope="proj-b", claim_key="api.k0", value=9, kind=Kind.FACT, id="B1")


def test_the_review_queue_and_what_needs_attention_are_one_call_each(world: World) -> None:
    _setup(world)
    reviewer = world.reviewer
    queue = reviewer.records("proj-a", status="CANDIDATE")
    assert [r.id for r in queue] == ["M3", "M4", "P1"]
    assert all(r.status == Status.CANDIDATE for r in queue)
    reviewer.revoke("E1", reason="doc changed")
    attention = reviewer.records("proj-a", validity=Validity.NEEDS_REVALIDATION)
    assert [r.id for r in attention] == ["M0", "M1", "M2", "M3", "M4", "P1"]
    assert [r.id for r in reviewer.records("proj-a", status=Status.STALE)] == [
        "M0",
        "M1",
        "M2",
        "M3",
        "M4",
    ]
    assert [r.id for r in reviewer.records("proj-a", validity="INVALID")] == ["E1"]
    assert reviewer.records("proj-a", validity="VALID") == ()


def test_records_filter_by_kind_and_claim_prefix_and_page_by_id(world: World) -> None:
    _setup(world)
    reviewer = world.reviewer
    assert [r.id for r in reviewer.records("proj-a", kind="plan")] == ["P1"]
    assert [r.id for r in reviewer.records("proj-a", kind=Kind.EVIDENCE)] == ["E1"]
    assert [r.id for r in reviewer.records("proj-a", claim_prefix="api.")] == [
        "M0",
        "M1",
        "M2",
        "M3",
        "M4",
    ]
    assert [r.id for r in reviewer.records("proj-a", claim_prefix="source:")] == ["E1"]
    pages, after = [], None
    while True:
        page = reviewer.records("proj-a", limit=3, after=after)
        if not page:
            break
        pages.append([r.id for r in page])
        after = page[-1].id
    assert pages == [["E1", "M0", "M1"], ["M2", "M3", "M4"], ["P1"]]
    valid = reviewer.records("proj-a", validity="VALID", claim_prefix="api.")
    assert [r.id for r in valid] == ["M0", "M1", "M2"]


def test_records_validity_follows_expiry_at_the_sessions_now(world: World) -> None:
    agent, reviewer = world.agent, world.reviewer
    soon = world.clock.now + timedelta(hours=1)
    agent.propose(scope="proj-a", claim_key="t", value=1, kind=Kind.FACT, expires=soon, id="T1")
    reviewer.accept("T1")
    assert [r.id for r in reviewer.records("proj-a", validity="VALID")] == ["T1"]
    world.clock.advance(hours=2)
    assert reviewer.records("proj-a", validity="VALID") == ()
    assert [r.id for r in reviewer.records("proj-a", validity="NEEDS_REVALIDATION")] == ["T1"]


def test_records_as_of_a_past_position_lists_what_was_there(world: World) -> None:
    _setup(world)
    reviewer = world.reviewer
    before = world.ledger.position
    reviewer.revoke("E1", reason="x")
    then = reviewer.as_of(position=before)
    assert [r.id for r in then.records("proj-a", status="STALE")] == []
    assert [r.id for r in then.records("proj-a", status="ACCEPTED")] == ["E1", "M0", "M1", "M2"]


def test_records_of_a_scope_without_a_grant_are_refused_not_empty(world: World) -> None:
    _setup(world)
    with pytest.raises(AccessDeniedError, match="'outsider' lacks role 'read' in scope 'proj-a'"):
        world.outsider.records("proj-a")
    assert [r.id for r in world.outsider.records("proj-b")] == ["B1"]
    # A grant in proj-a shows nothing of proj-b.
    assert all(r.scope == "proj-a" for r in world.reviewer.records("proj-a", limit=1000))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"status": "LOST"}, InvalidInputError, "status 'LOST' is not one of"),
        ({"validity": "MAYBE"}, InvalidInputError, "validity 'MAYBE' is not one of"),
        ({"kind": "rumour"}, InvalidKindError, "kind 'rumour'"),
        ({"limit": 0}, InvalidInputError, "limit 0 is not between 1 and 1000"),
        ({"limit": 1001}, InvalidInputError, "limit 1001"),
        ({"after": "bad id!"}, InvalidInputError, "after 'bad id!' is invalid"),
    ],
)
def test_records_refuses_bad_filters_by_name(
    world: World, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        world.reviewer.records("proj-a", **kwargs)  # type: ignore[arg-type]


def test_records_read_in_a_run_are_observed(world: World) -> None:
    _setup(world)
    with world.agent.run("task-9") as run:
        seen = run.records("proj-a", validity="VALID")
        rid = run.propose(scope="proj-a", claim_key="summary", value="ok", kind=Kind.REPORT)
    assert set(world.reviewer.get(rid).observed) == {r.id for r in seen}


def test_grants_lists_the_roles_the_principal_holds_by_scope(world: World) -> None:
    roles = ("approve", "audit", "deliver", "read")
    assert world.reviewer.grants() == {"proj-a": roles, "proj-b": roles}
    assert world.outsider.grants() == {"proj-b": ("read",)}
    world.ledger.admin().revoke_grant("outsider", scope="proj-b")
    assert world.outsider.grants() == {}


def _mixed(world: World) -> dict[str, Status]:
    """Records of every status in proj-a, ids interleaved so that a page in id
    order mixes ACCEPTED rows with the rest; T3 is ACCEPTED and expired (the
    clock moved past it). Returns each id's status."""
    agent, reviewer = world.agent, world.reviewer
    soon = world.clock.now + timedelta(hours=1)

    def new(rid: str, **kw: object) -> str:
        return agent.propose(
            scope="proj-a", claim_key=f"c.{rid}", value=rid, kind=Kind.FACT, id=rid, **kw
        )

    new("A0")
    new("B1")
    new("C2")
    reviewer.accept("A0")
    reviewer.reject("B1", reason="wrong")
    new("D3", parents=["A0"])
    reviewer.accept("D3")
    new("E4")
    reviewer.accept("E4")
    new("F5")
    reviewer.accept("F5")
    agent.propose(
        scope="proj-a", claim_key="c.F5", value="v2", kind=Kind.FACT, supersedes="F5", id="G6"
    )
    reviewer.accept("G6")
    new("H7")
    reviewer.accept("H7")
    reviewer.revoke("H7", reason="gone")
    new("T3", expires=soon)
    reviewer.accept("T3")
    new("U8")
    reviewer.accept("U8")
    reviewer.revoke("A0", reason="source changed")  # D3 goes STALE
    world.clock.advance(hours=2)
    ids = ("A0", "B1", "C2", "D3", "E4", "F5", "G6", "H7", "T3", "U8")
    return {rid: reviewer.get(rid).status for rid in ids}


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"status": "ACCEPTED"},
        {"status": "CANDIDATE"},
        {"status": "STALE"},
        {"status": "SUPERSEDED"},
        {"validity": "VALID"},
        {"validity": "INVALID"},
        {"validity": "NEEDS_REVALIDATION"},
        {"status": "ACCEPTED", "validity": "NEEDS_REVALIDATION"},
        {"status": "CANDIDATE", "validity": "VALID"},
        {"kind": "fact", "validity": "NEEDS_REVALIDATION"},
    ],
)
def test_pages_of_every_filter_list_exactly_the_matching_records_in_id_order(
    world: World, filters: dict[str, str]
) -> None:
    """ACCEPTED rows and the others are listed from two indexes (expired ACCEPTED
    ones from a third): pages of two walk the scope in id order across them, with
    exactly the records each record's own view says match."""
    statuses = _mixed(world)
    reviewer = world.reviewer
    views = {rid: reviewer.get(rid) for rid in statuses}
    assert statuses["T3"] == Status.ACCEPTED and views["T3"].validity == Validity.NEEDS_REVALIDATION
    assert {s.value for s in statuses.values()} == {
        "ACCEPTED",
        "CANDIDATE",
        "REJECTED",
        "REVOKED",
        "STALE",
        "SUPERSEDED",
    }
    expected = [
        rid
        for rid, view in sorted(views.items())
        if view.status.value == filters.get("status", view.status.value)
        and view.validity.value == filters.get("validity", view.validity.value)
        and view.kind.value == filters.get("kind", view.kind.value)
    ]
    listed, after = [], None
    while page := reviewer.records("proj-a", limit=2, after=after, **filters):  # type: ignore[arg-type]
        assert len(page) <= 2
        listed += [r.id for r in page]
        after = page[-1].id
    assert listed == expected
    assert [r.id for r in reviewer.records("proj-a", limit=1000, **filters)] == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("filters", "indexes"),
    [
        ({}, ["pl_records_accepted", "pl_records_open"]),
        ({"status": "ACCEPTED"}, ["pl_records_accepted"]),
        ({"status": "CANDIDATE"}, ["pl_records_open"]),
        ({"validity": "VALID"}, ["pl_records_accepted"]),
        ({"validity": "INVALID"}, ["pl_records_open"]),
        ({"validity": "NEEDS_REVALIDATION"}, ["pl_records_open", "pl_records_expiring"]),
    ],
)
def test_a_page_reads_only_the_listing_indexes_its_filter_needs(
    world: World,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    filters: dict[str, str],
    indexes: list[str],
) -> None:
    """The review queue of a scope of many ACCEPTED records passes over none of
    them: SQLite's plan for each statement of a page names the index it reads."""
    _mixed(world)
    statements: list[tuple[str, tuple[object, ...]]] = []
    original = queries._page_rows

    class Recording:
        def __init__(self, c: Any) -> None:
            self.c = c

        def execute(self, sql: str, params: tuple[object, ...]) -> Any:
            statements.append((sql, params))
            return self.c.execute(sql, params)

        def fetchall(self) -> Any:
            return self.c.fetchall()

    def page_rows(c: Any, *args: Any, **kw: Any) -> Any:
        return original(Recording(c), *args, **kw)

    monkeypatch.setattr(queries, "_page_rows", page_rows)
    world.reviewer.records("proj-a", **filters)  # type: ignore[arg-type]
    with closing(sqlite3.connect(ledger_url.removeprefix("sqlite:///"))) as db:
        plans = [
            " ".join(str(row[3]) for row in db.execute("EXPLAIN QUERY PLAN " + sql, params))
            for sql, params in statements
        ]
    assert len(plans) == len(indexes)
    for plan, index in zip(plans, indexes, strict=True):
        assert f"USING INDEX {index} (scope=?" in plan, plan
