"""``Session.records``: the review queue and what needs attention, one call each."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import timedelta
from typing import Any

import pytest

from ledger import Kind, Session, Status, Validity
from ledger.errors import (
    AccessDeniedError,
    InvalidInputError,
    InvalidKindError,
    UnknownRecordError,
)
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


def _paged(session: Session, **filters: Any) -> list[str]:
    """The ids of proj-a's records ``filters`` selects, read two a page, each
    page after the last id of the one before."""
    listed: list[str] = []
    after = None
    while page := session.records("proj-a", limit=2, after=after, **filters):
        assert len(page) <= 2
        listed += [r.id for r in page]
        after = page[-1].id
    return listed


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
    assert _paged(reviewer, **filters) == expected
    assert [r.id for r in reviewer.records("proj-a", limit=1000, **filters)] == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"status": "ACCEPTED"},
        {"status": "CANDIDATE"},
        {"status": "REVOKED"},
        {"validity": "VALID"},
        {"validity": "INVALID"},
        {"validity": "NEEDS_REVALIDATION"},
        {"claim_prefix": "c.F"},
    ],
)
def test_pages_as_of_each_position_list_exactly_the_records_matching_then(
    world: World, filters: dict[str, str]
) -> None:
    """As of every few positions of a history with every status, pages of two
    walk the records that existed then in id order, with exactly those whose row
    of then matches (what each record's own view as of that position says)."""
    statuses = _mixed(world)
    reviewer = world.reviewer
    for position in range(1, world.ledger.position + 1, 3):
        then = reviewer.as_of(position=position)
        views = {}
        for rid in statuses:
            try:
                views[rid] = then.get(rid)
            except UnknownRecordError:
                continue  # proposed later
        expected = [
            rid
            for rid, view in sorted(views.items())
            if view.status.value == filters.get("status", view.status.value)
            and view.validity.value == filters.get("validity", view.validity.value)
            and view.claim_key.startswith(filters.get("claim_prefix", ""))
        ]
        assert _paged(then, **filters) == expected, position
        assert [r.status for r in then.records("proj-a", limit=1000, **filters)] == [  # type: ignore[arg-type]
            views[rid].status for rid in expected
        ]


@pytest.mark.parametrize("through", ["range", "listing"])
@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"status": "ACCEPTED"},
        {"status": "CANDIDATE"},
        {"status": "SUPERSEDED"},
        {"validity": "VALID"},
        {"validity": "INVALID"},
        {"validity": "NEEDS_REVALIDATION"},
        {"kind": "fact", "validity": "NEEDS_REVALIDATION"},
    ],
)
def test_pages_under_a_claim_prefix_list_exactly_its_matching_records_in_id_order(
    world: World, monkeypatch: pytest.MonkeyPatch, filters: dict[str, str], through: str
) -> None:
    """A page with a claim prefix lists the records under it that match, in id
    order, whether SQLite reads the prefix's range of claim keys (``range``) or
    the scope's listing indexes (``listing``: the range counted too large)."""
    if through == "listing":
        monkeypatch.setattr(queries, "PREFIX_RANGE", 1)
    else:  # a prefix's range however large its share of the scope
        monkeypatch.setattr(queries, "DENSE", 0)
    statuses = _mixed(world)
    reviewer = world.reviewer
    views = {rid: reviewer.get(rid) for rid in statuses}
    for prefix in ("c.", "c.F", "c.F5", "c.H7", "c.Z", "c"):
        expected = [
            rid
            for rid, view in sorted(views.items())
            if view.claim_key.startswith(prefix)
            and view.status.value == filters.get("status", view.status.value)
            and view.validity.value == filters.get("validity", view.validity.value)
            and view.kind.value == filters.get("kind", view.kind.value)
        ]
        assert _paged(reviewer, claim_prefix=prefix, **filters) == expected, prefix
    # Every record's claim key starts with "c.": the same records as without a prefix.
    under = reviewer.records("proj-a", claim_prefix="c.", limit=1000, **filters)  # type: ignore[arg-type]
    every = reviewer.records("proj-a", limit=1000, **filters)  # type: ignore[arg-type]
    assert [r.id for r in under] == [r.id for r in every]


def test_a_prefix_range_ends_at_the_least_string_above_every_string_under_it() -> None:
    assert queries.prefix_end("c.") == "c/"
    assert queries.prefix_end("memories/") == "memories0"
    assert queries.prefix_end("a\U0010ffff") == "b"
    assert queries.prefix_end("\U0010ffff\U0010ffff") is None
    assert queries.prefix_end("x\ud7ff") == "x\ue000"  # past the surrogates
    for prefix in ("c.", "a\U0010ffff", "x\ud7ff", "é"):
        end = queries.prefix_end(prefix)
        assert end is not None and prefix < end
        assert all(key < end for key in (prefix, prefix + "\U0010ffff", prefix + "\x00"))
        assert all(k.encode() < end.encode() for k in (prefix, prefix + "\U0010ffff"))


def _expiring(world: World) -> None:
    """Beside ``_mixed``'s records, ACCEPTED facts X0..X4 expired and Y0..Y4 that
    expire later, their ids interleaved with the others'."""
    now = world.clock.now
    for n in range(5):
        for rid, hours in ((f"X{n}", 1), (f"Y{n}", 10)):
            world.agent.propose(
                scope="proj-a", claim_key=f"c.{rid}", value=rid, kind=Kind.FACT, id=rid,
                expires=now + timedelta(hours=hours),
            )  # fmt: skip
            world.reviewer.accept(rid)
    world.clock.advance(hours=2)


@pytest.mark.parametrize("through", ["sort", "walk"])
@pytest.mark.parametrize(
    "filters",
    [
        {"validity": "NEEDS_REVALIDATION"},
        {"validity": "NEEDS_REVALIDATION", "status": "ACCEPTED"},
        {"validity": "NEEDS_REVALIDATION", "kind": "fact"},
        {"validity": "NEEDS_REVALIDATION", "claim_prefix": "c."},
        {"validity": "VALID"},
    ],
)
def test_pages_of_expired_records_list_exactly_them_in_id_order(
    world: World, monkeypatch: pytest.MonkeyPatch, filters: dict[str, str], through: str
) -> None:
    """Expired ACCEPTED records are listed in id order, page by page, whether
    SQLite sorts them (``sort``: fewer than ``EXPIRED_SORT``) or walks the
    ACCEPTED rows in id order past the unexpired ones (``walk``)."""
    monkeypatch.setattr(queries, "EXPIRED_SORT", 10**6 if through == "sort" else 1)
    _mixed(world)
    _expiring(world)
    reviewer = world.reviewer
    every = reviewer.records("proj-a", limit=1000)
    expected = [
        v.id
        for v in every
        if v.validity.value == filters["validity"]
        and v.status.value == filters.get("status", v.status.value)
        and v.kind.value == filters.get("kind", v.kind.value)
    ]
    assert {"T3", "X0", "X4"} <= set(expected) or filters["validity"] == "VALID"
    assert _paged(reviewer, **filters) == expected


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_page_of_many_expired_records_walks_the_accepted_ones_in_id_order(
    world: World, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expired ACCEPTED records pile up: from ``EXPIRED_SORT`` of them on, a
    NEEDS_REVALIDATION page reads them from the ACCEPTED rows' listing index (of
    its kind, with one) instead of sorting them all from ``pl_records_expiring``."""
    _mixed(world)
    _expiring(world)  # 6 expired: T3, X0..X4
    needs = {"validity": "NEEDS_REVALIDATION"}
    filtered = "USING INDEX pl_records_filtered (scope=? AND status=? AND kind=?)"
    expiring = "USING INDEX pl_records_expiring (scope=? AND eff_expires<?)"
    accepted = "USING INDEX pl_records_accepted (scope=?)"
    # Fewer than EXPIRED_SORT: read by expiry from pl_records_expiring, and sorted
    monkeypatch.setattr(queries, "EXPIRED_SORT", 7)
    for filters in (needs, {**needs, "kind": "fact"}):
        assert _planned(world, ledger_url, monkeypatch, filters) == [f"{filtered}; {expiring}"]
        assert "TEMP B-TREE" in _plan_of(world, ledger_url, monkeypatch, filters)
    # As many: the ACCEPTED rows in id order (of the kind's range, with a kind),
    # merged with the other arms as they are read, none of them sorted
    monkeypatch.setattr(queries, "EXPIRED_SORT", 6)
    assert _planned(world, ledger_url, monkeypatch, needs) == [f"{filtered}; {accepted}"]
    assert _planned(world, ledger_url, monkeypatch, {**needs, "kind": "fact"}) == [filtered]
    for filters in (needs, {**needs, "kind": "fact"}):
        assert "TEMP B-TREE" not in _plan_of(world, ledger_url, monkeypatch, filters)


def _plan_of(
    world: World, ledger_url: str, monkeypatch: pytest.MonkeyPatch, filters: dict[str, str]
) -> str:
    """SQLite's whole plan of the one statement of a page of proj-a."""
    (plan,) = _plans(ledger_url, monkeypatch, lambda: world.reviewer.records("proj-a", **filters))  # type: ignore[arg-type]
    return plan


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_page_under_a_prefix_of_many_claim_keys_reads_the_listing(
    world: World, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page walks the scope's listing indexes in id order (and stops at
    ``limit``) once the prefix's range holds ``PREFIX_RANGE`` row versions, or
    more than a ``1 / (1 + DENSE)`` share of the scope's, or all of them."""
    _mixed(world)
    listing = ["USING INDEX pl_records_accepted (scope=?)", "USING INDEX pl_records_open (scope=?)"]
    claim_range = ["USING INDEX pl_records_claim (scope=? AND claim_key>? AND claim_key<?)"]
    assert _planned(world, ledger_url, monkeypatch, {"claim_prefix": "c."}) == listing
    # c.F: 5 of the scope's 23 row versions (F5 proposed, accepted, superseded; G6).
    assert _planned(world, ledger_url, monkeypatch, {"claim_prefix": "c.F"}) == claim_range
    monkeypatch.setattr(queries, "DENSE", 4)
    assert _planned(world, ledger_url, monkeypatch, {"claim_prefix": "c.F"}) == listing
    monkeypatch.setattr(queries, "DENSE", 3)
    monkeypatch.setattr(queries, "PREFIX_RANGE", 5)
    assert _planned(world, ledger_url, monkeypatch, {"claim_prefix": "c.F"}) == listing
    assert _planned(world, ledger_url, monkeypatch, {"claim_prefix": "c.C2"}) == claim_range


def _planned(
    world: World, ledger_url: str, monkeypatch: pytest.MonkeyPatch, filters: dict[str, str]
) -> list[str]:
    """The index parts of SQLite's plan for each statement of a page of proj-a
    (each index's first search, joined by "; ", covering or not), but for the
    look-ups of a returned row's long lists by their reference (``pl_spilled``)
    and of whether it was delivered (``pl_deliveries_record``)."""
    plans = _plans(ledger_url, monkeypatch, lambda: world.reviewer.records("proj-a", **filters))  # type: ignore[arg-type]
    found = []
    for plan in plans:
        steps = plan.replace("USING COVERING INDEX", "USING INDEX").split("USING INDEX")[1:]
        parts = ["USING INDEX" + part.split(")")[0] + ")" for part in steps]
        parts = [part for part in parts if "pl_spilled" not in part and "pl_deliveries" not in part]
        found.append("; ".join(dict.fromkeys(parts)))
    return found


def _plans(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch, page: Callable[[], object]
) -> list[str]:
    """SQLite's plan for each statement that lists rows in ``page()``, its steps
    joined by "; "."""
    statements: list[tuple[str, tuple[object, ...]]] = []

    class Recording:
        recording = True

        def __init__(self, c: Any) -> None:
            self.c = c

        def execute(self, sql: str, params: tuple[object, ...]) -> Any:
            statements.append((sql, params))
            return self.c.execute(sql, params)

        def fetchall(self) -> Any:
            return self.c.fetchall()

    def recorded(original: Callable[..., Any]) -> Callable[..., Any]:
        def rows(c: Any, *args: Any, **kw: Any) -> Any:
            # Once per statement: _page_rows passes pl_records' rows to _union_rows,
            # and an earlier _plans of the same test left its own wrappers.
            recording = c if getattr(c, "recording", False) else Recording(c)
            return original(recording, *args, **kw)

        return rows

    for name in ("_page_rows", "_union_rows"):
        monkeypatch.setattr(queries, name, recorded(getattr(queries, name)))
    page()
    with closing(sqlite3.connect(ledger_url.removeprefix("sqlite:///"))) as db:
        return [
            "; ".join(str(row[3]) for row in db.execute("EXPLAIN QUERY PLAN " + sql, params))
            for sql, params in statements
        ]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("filters", [{}, {"status": "REVOKED"}, {"validity": "VALID"}])
def test_a_page_as_of_a_position_walks_the_listing_indexes_to_each_row_then(
    world: World, ledger_url: str, monkeypatch: pytest.MonkeyPatch, filters: dict[str, str]
) -> None:
    """An auditor's page of a scope as it stood then passes over records in id
    order from the two listing indexes and looks up each one's row of then by its
    key: neither every row version of the scope nor a sort of them."""
    _mixed(world)
    then = world.reviewer.as_of(position=world.ledger.position - 4)
    plans = _plans(ledger_url, monkeypatch, lambda: then.records("proj-a", **filters))  # type: ignore[arg-type]
    assert len(plans) == 2
    # Each entry holds what the walk tests of it (record_table.COVERED): no row is
    # read for a record proposed after the position.
    for plan, index in zip(plans, ["pl_records_accepted", "pl_records_open"], strict=True):
        assert plan.startswith(
            f"SEARCH cur USING COVERING INDEX {index} (scope=?); "
            "SEARCH r USING PRIMARY KEY (record_id=? AND from_pos<?)"
        ), plan
        assert "TEMP B-TREE" not in plan, plan


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("through", ["sort", "walk"])
@pytest.mark.parametrize(
    "filters",
    [
        {"status": "ACCEPTED"},
        {"validity": "VALID"},
        {"validity": "VALID", "kind": "fact"},
        {"validity": "NEEDS_REVALIDATION"},
        {"validity": "NEEDS_REVALIDATION", "kind": "fact"},
        {"validity": "NEEDS_REVALIDATION", "status": "ACCEPTED"},
    ],
)
def test_a_page_passes_over_the_rows_it_leaves_out_without_reading_them(
    world: World,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    filters: dict[str, str],
    through: str,
) -> None:
    """A VALID page passes over the expired ACCEPTED rows in its way, and a page
    of expired ones (walked, from ``EXPIRED_SORT`` of them) over the unexpired:
    SQLite finds the page's keys in index entries that hold all it tests
    (``record_table.COVERED``: it would otherwise read each row it passes, about
    ten times the cost), and then reads only the rows it keeps, by key."""
    _mixed(world)
    _expiring(world)  # 6 expired: T3, X0..X4
    monkeypatch.setattr(queries, "EXPIRED_SORT", 7 if through == "sort" else 6)
    steps = _plan_of(world, ledger_url, monkeypatch, filters).split("; ")
    searches = [step for step in steps if step.startswith("SEARCH r ")]
    *arms, kept = searches
    assert arms, steps
    for arm in arms:
        assert arm.startswith("SEARCH r USING COVERING INDEX pl_records_"), steps
    assert kept == "SEARCH r USING PRIMARY KEY (record_id=? AND from_pos=?)", steps


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("filters", "indexes"),
    [
        ({}, [["pl_records_accepted"], ["pl_records_open"]]),
        ({"status": "ACCEPTED"}, [["pl_records_accepted"]]),
        ({"status": "CANDIDATE"}, [["pl_records_filtered"]]),
        ({"validity": "VALID"}, [["pl_records_accepted"]]),
        ({"validity": "INVALID"}, [["pl_records_filtered"]]),
        ({"validity": "NEEDS_REVALIDATION"}, [["pl_records_filtered", "pl_records_expiring"]]),
        ({"kind": "plan"}, [["pl_records_filtered"]]),
        ({"kind": "plan", "status": "STALE"}, [["pl_records_filtered"]]),
        ({"kind": "plan", "validity": "VALID"}, [["pl_records_filtered"]]),
        ({"claim_prefix": "c.F"}, [["pl_records_claim"]]),
        ({"claim_prefix": "c.F", "status": "CANDIDATE"}, [["pl_records_live"]]),
        ({"claim_prefix": "c.F", "validity": "VALID"}, [["pl_records_live"]]),
        ({"claim_prefix": "c.F", "validity": "NEEDS_REVALIDATION"}, [["pl_records_live"]]),
        ({"claim_prefix": "c.F", "validity": "INVALID"}, [["pl_records_claim"]]),
        ({"claim_prefix": "c.F", "kind": "plan"}, [["pl_records_claim"]]),
    ],
)
def test_a_page_reads_only_the_indexes_its_filter_needs(
    world: World,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    filters: dict[str, str],
    indexes: list[list[str]],
) -> None:
    """The review queue of a scope of many ACCEPTED records passes over none of
    them, a page of a kind or a status reads the range of each status and kind
    it allows, and a page under a claim prefix reads that prefix's range of claim
    keys (in the live records' index when the filter keeps only live statuses),
    so a namespace of a few keys in a busy scope passes over none of the scope's
    other records: SQLite's plan for each statement of a page names the indexes
    it reads."""
    _mixed(world)
    monkeypatch.setattr(queries, "DENSE", 0)  # a prefix's range however small the scope
    plans = _planned(world, ledger_url, monkeypatch, filters)
    assert len(plans) == len(indexes)
    for plan, names in zip(plans, indexes, strict=True):
        parts = plan.split("; ")
        assert len(parts) == len(names), plan
        for part, index in zip(parts, names, strict=True):
            in_range = {
                "pl_records_filtered": "scope=? AND status=? AND kind=?",
                "pl_records_claim": "scope=? AND claim_key>? AND claim_key<?",
                "pl_records_live": "scope=? AND claim_key>? AND claim_key<?",
            }.get(index, "scope=?")
            assert part.startswith(f"USING INDEX {index} ({in_range}"), plan
