"""What one call costs is bounded by what it asks for, not by what other principals
put beside it: a read of a claim and a re-capture pass over none of the claim's
other records (nor, whatever PostgreSQL's planner statistics, the scope's), a
page of a kind or status few records have passes over none of the scope's
others, a LangGraph put reads none of the candidates under its key, a run shown
again what it was shown appends nothing, showing a STALE record does not walk
its whole ancestry, neither a run's read nor a report's delivery replays the
run's or the report's whole history, a record's deliveries' corrections are
read at once, and large values stay out of the table every look-up of a record
searches."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ledger import Kind, Ledger, Outcome, Session, Status, reads, recent, versions
from ledger.domain import Record, Run
from ledger.integrations.langgraph import LedgerStore
from ledger.integrations.langgraph.keys import location
from projections import claims as claim_queries
from projections import delivery as delivery_view
from projections import edges as edges_index
from projections import queries as view_queries
from projections import validity as validity_view

from .conftest import sqlite_pages

SCOPE, CLAIM = "proj-a", "api.timeout"
URI = "https://docs.test/orders"
N = 60  # records of the dense ancestry


def people(ledger: Ledger) -> tuple[Session, Session, Session]:
    """An agent and a flooder (each propose and read in ``SCOPE``) and a reviewer."""
    admin = ledger.admin()
    roles = {"agent": ["propose", "read"], "flooder": ["propose", "read"]}
    roles["reviewer"] = ["approve", "read"]
    sessions = []
    for who, held in roles.items():
        admin.grant(who, scope=SCOPE, roles=held)
        sessions.append(ledger.authenticate(admin.issue_token(who)))
    agent, flooder, reviewer = sessions
    return agent, flooder, reviewer


def facts(agent: Session, reviewer: Session, n: int) -> None:
    """``n`` accepted facts ``F00``, ``F01``, … proposed by ``agent``."""
    for i in range(n):
        agent.propose(SCOPE, f"k{i}", i, Kind.FACT, id=f"F{i:02d}", accepted_by=reviewer)


# -- a read passes over the claim's candidates -------------------------------------------


def test_a_read_fetches_none_of_the_claims_candidates(ledger: Ledger) -> None:
    agent, flooder, reviewer = people(ledger)
    agent.propose(SCOPE, CLAIM, 30, Kind.FACT, id="T1", accepted_by=reviewer)
    # Given another principal proposed 40 candidates under the same claim
    flooder.propose_many(
        [{"scope": SCOPE, "claim_key": CLAIM, "value": "x" * 1000, "kind": "fact"}] * 40
    )

    # When the statement a read runs fetches the claim's rows
    engine = agent.caller.engine
    token, rows = engine.query(
        lambda c: claim_queries.for_claim_as(
            c, engine.dialect, agent.caller.token_hash, SCOPE, CLAIM, None, True
        )
    )

    # Then only the usable record left the database (not 41 rows)
    assert token is not None
    assert len(rows) == 1
    # and the read and explain answer as before
    assert [r.id for r in agent.read(SCOPE, CLAIM).records] == ["T1"]
    assert agent.read(SCOPE, CLAIM).outcome == Outcome.FOUND
    assert len(agent.explain(SCOPE, CLAIM).entries) == 41


def test_a_bounded_explanation_builds_the_usable_records_and_at_most_limit_others(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, flooder, reviewer = people(ledger)
    agent.propose(SCOPE, CLAIM, 30, Kind.FACT, id="T1", accepted_by=reviewer)
    # Given another principal proposed 40 candidates under the same claim
    flooder.propose_many(
        [{"scope": SCOPE, "claim_key": CLAIM, "value": "x" * 1000, "kind": "fact"}] * 40
    )

    # When the statement for the claim's other rows is asked for 5 of them
    engine = agent.caller.engine
    with engine.reading() as c:
        others, count = claim_queries.claim_others(c, engine.dialect, SCOPE, CLAIM, None, 5)
        plan = ""
        if engine.dialect.name == "sqlite":
            c.execute(
                "EXPLAIN QUERY PLAN " + claim_queries._others_sql(engine.dialect, False),
                (SCOPE, CLAIM, SCOPE, CLAIM, 5),
            )
            plan = " ".join(str(row[3]) for row in c.fetchall())
    # Then 5 rows left the database, and all 40 were counted
    assert (len(others), count) == (5, 40)
    # from index entries alone: no row but the 5 was read (nor its value)
    if plan:
        assert "COVERING INDEX pl_records_live" in plan, plan
        assert "COVERING INDEX pl_records_withdrawn" in plan, plan

    # And an explanation with limit=5 builds 6 record views (the usable one and 5 others)
    built: list[str] = []
    record_view = reads.record_view

    def counting(*args: Any, **kwargs: Any) -> Any:
        view = record_view(*args, **kwargs)
        built.append(view.id)
        return view

    monkeypatch.setattr(reads, "record_view", counting)
    explanation = agent.explain(SCOPE, CLAIM, limit=5)
    assert len(built) == 6
    assert [e.usable for e in explanation.entries] == [True] + [False] * 5
    assert (explanation.outcome, explanation.omitted) == (Outcome.FOUND, 35)


# -- a re-capture passes over the claim's records of other kinds --------------------------


def test_a_recapture_reads_only_the_claims_live_captures(ledger: Ledger) -> None:
    agent, flooder, reviewer = people(ledger)
    flooder.propose_many(
        [{"scope": SCOPE, "claim_key": f"source:{URI}", "value": "x" * 2000, "kind": "fact"}] * 30
    )
    first = agent.capture(SCOPE, URI, b"v1")
    reviewer.accept(first)
    second = agent.capture(SCOPE, URI, b"v2")

    engine = agent.caller.engine
    with engine.reading() as c:
        rows = claim_queries.captures_of_claim(c, engine.dialect, SCOPE, f"source:{URI}")
        plan = ""
        if engine.dialect.name == "sqlite":
            c.execute(
                "EXPLAIN QUERY PLAN SELECT record_id FROM pl_records WHERE scope=? "
                "AND claim_key=? AND to_pos IS NULL AND (status = 'ACCEPTED' OR "
                "status = 'STALE' OR status = 'CANDIDATE') AND kind='evidence' "
                "AND (status='ACCEPTED' OR status='CANDIDATE')",
                (SCOPE, f"source:{URI}"),
            )
            plan = " ".join(str(tuple(step)[3]) for step in c.fetchall())
    assert [r[0] for r in rows] == [first, second]
    if engine.dialect.name == "sqlite":
        assert "kind=?" in plan, plan  # the index decides the kind: no table row read
    reviewer.accept(second)
    assert agent.get(first).status == Status.SUPERSEDED


# -- a page of a sparse filter passes over none of the scope's other records ---------------

#: A statement run and its parameters.
Statement = tuple[str, Any]


@contextmanager
def recorded(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, cursor_at: int = 0
) -> Iterator[list[Statement]]:
    """The statements ``module.name`` (a function taking a cursor as its argument
    ``cursor_at``) runs with that cursor while the block runs."""
    statements: list[Statement] = []
    original = getattr(module, name)

    class Recording:
        def __init__(self, c: Any) -> None:
            self.c = c

        def execute(self, sql: str, params: Any = ()) -> Any:
            statements.append((sql, params))
            return self.c.execute(sql, params)

        def __getattr__(self, attr: str) -> Any:
            return getattr(self.c, attr)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        args = (*args[:cursor_at], Recording(args[cursor_at]), *args[cursor_at + 1 :])
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(module, name, wrapped)
        yield statements


def work_of(ledger: Ledger, statements: list[Statement], table: str = "pl_records") -> int:
    """What ``statements`` cost run again: the SQLite virtual machine's steps, or
    on PostgreSQL the rows of ``table`` its plans read (kept or filtered out)."""
    assert statements
    engine = ledger.engine
    total = 0
    with engine.reading() as c:
        for sql, params in statements:
            if engine.dialect.name == "sqlite":
                total += _steps(c, sql, params)
            else:
                c.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
                total += _rows_read(c.fetchone()["QUERY PLAN"][0]["Plan"], table)
    return total


def _steps(c: Any, sql: str, params: Any) -> int:
    """The SQLite virtual machine's steps to run ``sql`` and fetch its rows."""
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    # memory: wraps its sqlite3 cursor (eventsourcing's SQLiteCursor)
    connection = getattr(c, "sqlite_cursor", c).connection
    connection.set_progress_handler(step, 1)
    try:
        c.execute(sql, params)
        c.fetchall()
    finally:
        connection.set_progress_handler(None, 1)
    return steps[0]


def _rows_read(node: dict[str, Any], table: str = "pl_records") -> int:
    """Rows of ``table`` a PostgreSQL plan node and those under it read."""
    own = 0
    if node.get("Relation Name") == table:
        loops = node.get("Actual Loops", 1)
        kept = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        own = kept * loops
    return own + sum(_rows_read(child, table) for child in node.get("Plans", ()))


def candidates(session: Session, start: int, stop: int) -> None:
    """Facts ``start..stop`` proposed in ``SCOPE`` under ``c.<n>`` (left CANDIDATE)."""
    session.propose_many(
        [
            {"scope": SCOPE, "claim_key": f"c.{i}", "value": i, "kind": "fact"}
            for i in range(start, stop)
        ]
    )


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"kind": "plan"}, ["P1", "P2"]),
        ({"status": "STALE"}, []),
        ({"validity": "INVALID"}, ["P3"]),
        ({"kind": "plan", "status": "CANDIDATE"}, ["P2"]),
        ({"kind": "plan", "validity": "NEEDS_REVALIDATION"}, ["P2"]),
        ({"kind": "plan", "validity": "VALID"}, ["P1"]),
        ({"claim_prefix": "notes/"}, ["P1", "P2", "P3"]),
        ({"claim_prefix": "notes/", "kind": "plan", "status": "CANDIDATE"}, ["P2"]),
    ],
    ids=lambda case: "+".join(case) if isinstance(case, list) else ",".join(case.values()),
)
def test_a_page_of_a_sparse_filter_costs_what_matches_not_the_scope(
    ledger: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    filters: dict[str, str],
    expected: list[str],
) -> None:
    agent, flooder, reviewer = people(ledger)
    # Given a scope of CANDIDATE facts, and a few records of other kinds and statuses
    agent.propose(SCOPE, "notes/a", "n", Kind.PLAN, id="P1", accepted_by=reviewer)
    agent.propose(SCOPE, "notes/b", "n", Kind.PLAN, id="P2")
    agent.propose(SCOPE, "notes/c", "n", Kind.REPORT, id="P3")
    reviewer.reject("P3", reason="wrong")
    candidates(flooder, 0, 40)

    def page() -> tuple[list[str], int]:
        with recorded(monkeypatch, view_queries, "page") as statements:
            found = [r.id for r in reviewer.records(SCOPE, limit=1, after="P3", **filters)]  # type: ignore[arg-type]
        return found, work_of(ledger, statements)

    # When a page after the matching records is listed, before and after the scope
    # grew 35-fold (in a batch of over 1,000 records, after which PostgreSQL's
    # planner statistics are refreshed, as a ledger's batches keep them)
    few, small = page()
    candidates(flooder, 40, 1400)
    many, large = page()

    # Then it found nothing either time, and cost no more with 1,400 records than with 40
    assert few == many == []
    assert large <= small + 8, (small, large)
    # and a page from the start lists what matches
    assert [r.id for r in reviewer.records(SCOPE, **filters)] == expected  # type: ignore[arg-type]


def test_a_read_reads_its_claims_rows_whatever_the_planners_statistics(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, flooder, reviewer = people(ledger)
    # Given a scope imported as candidates (a batch of over 1,000 records, after
    # which PostgreSQL's planner statistics are refreshed: no ACCEPTED row then)
    ids = flooder.propose_many(
        [{"scope": SCOPE, "claim_key": f"c.{i}", "value": i, "kind": "fact"} for i in range(1400)]
    )
    reviewer.accept(ids[0])

    def read() -> tuple[object, int]:
        with recorded(monkeypatch, claim_queries, "for_claim_as") as statements:
            value = agent.read(SCOPE, "c.0").value
        return value, work_of(ledger, statements)

    # When the claim is read before and after 300 more records were accepted one by
    # one (commands, which leave the statistics as they were)
    first, few = read()
    for record_id in ids[1:301]:
        reviewer.accept(record_id)
    second, many = read()

    # Then the read found its record and cost no more with 301 ACCEPTED records in
    # the scope than with one (on PostgreSQL the planner took the scope's index of
    # ACCEPTED rows, estimated empty, and read all 301 of them for the claim's one)
    assert first == second == 0
    assert many <= few + 8, (few, many)


def analysed(ledger: Ledger, *commands: str) -> None:
    """Run maintenance ``commands`` on ``pl_records`` as PostgreSQL's autovacuum
    does (each in its own transaction, committed): ``VACUUM`` sets the table's
    size for the planner, and ``ANALYZE`` its statistics."""
    from .attacks import Raw

    raw = Raw(ledger)
    with raw.connect(autocommit=True) as conn:
        for command in commands:
            conn.execute(f"{command} {raw.schema}.pl_records")


@pytest.mark.parametrize("ledger_url", ["postgres"], indirect=True)
@pytest.mark.parametrize(
    "statistics", [pytest.param((), id="none"), pytest.param(("VACUUM",), id="vacuumed")]
)
def test_a_read_and_a_put_pass_over_a_claims_candidates_without_statistics(
    open_ledger: Callable[..., Ledger],
    ledger_url: str,
    statistics: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On PostgreSQL without statistics, the planner estimated one row on the claim's
    index of all its versions as on its index of live rows, took the smaller, and
    filtered every candidate under the key (``record_table.CLAIM_WALK``)."""
    ledger = open_ledger()
    agent, flooder, _ = people(ledger)
    admin = ledger.admin()
    store = LedgerStore(
        ledger, token=admin.issue_token("agent"), approver_token=admin.issue_token("reviewer")
    )
    _, claim = location((SCOPE, "prefs"), "theme", store.scope_depth)
    store.put((SCOPE, "prefs"), "theme", {"v": 0})
    # Given 400 candidates under the key, and no planner statistics (none yet, or
    # the table vacuumed but not analysed: its size known, not what it holds)
    for _ in range(4):
        flooder.propose_many(
            [{"scope": SCOPE, "claim_key": claim, "value": 1, "kind": store.kind.value}] * 100
        )
    analysed(ledger, *statistics)

    # When the key is read, and put
    with recorded(monkeypatch, claim_queries, "for_claim_as") as reading:
        assert agent.read(SCOPE, claim).value == {"v": 0}
    with recorded(monkeypatch, versions, "newest_version", 1) as putting:
        store.put((SCOPE, "prefs"), "theme", {"v": 1})

    # Then each read a few rows of pl_records, not the 400 candidates
    assert work_of(ledger, reading) <= 8
    assert work_of(ledger, putting) <= 8
    assert store.get((SCOPE, "prefs"), "theme").value == {"v": 1}  # type: ignore[union-attr]
    store.close()


@pytest.mark.parametrize("ledger_url", ["postgres"], indirect=True)
def test_a_read_as_of_a_position_passes_over_the_claims_candidates(
    open_ledger: Callable[..., Ledger], ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read as of a position reads the claim's versions of then from the index of
    all its versions; PostgreSQL's holds their status too (``record_table.claim_index``)."""
    ledger = open_ledger()
    agent, flooder, reviewer = people(ledger)
    agent.propose(SCOPE, CLAIM, 30, Kind.FACT, id="T1", accepted_by=reviewer)
    flooder.propose_many([{"scope": SCOPE, "claim_key": CLAIM, "value": 1, "kind": "fact"}] * 400)
    then = ledger.position

    with recorded(monkeypatch, claim_queries, "for_claim_as") as statements:
        assert agent.as_of(position=then).read(SCOPE, CLAIM).value == 30

    assert work_of(ledger, statements) <= 8


def _indexes_used(node: dict[str, Any]) -> set[str]:
    """The indexes a PostgreSQL plan node and those under it read."""
    own = {node["Index Name"]} if "Index Name" in node else set()
    return own.union(*(_indexes_used(child) for child in node.get("Plans", ())))


@pytest.mark.parametrize("ledger_url", ["postgres"], indirect=True)
def test_a_page_of_a_status_or_kind_cannot_be_planned_over_the_scopes_listing_indexes(
    open_ledger: Callable[..., Ledger], ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CANDIDATE row is one of the scope's open rows too: with statistics that
    estimate one row either way, PostgreSQL's planner may take the index of every
    open row (or ACCEPTED one) for a page of a status or kind, and read the
    scope's rows for a page of a few (``record_table.FILTER_WALK``)."""
    ledger = open_ledger()
    agent, flooder, reviewer = people(ledger)
    candidates(flooder, 0, 20)
    agent.propose(SCOPE, "plans/a", 1, Kind.PLAN, id="PL1")
    agent.propose(SCOPE, "plans/b", 2, Kind.PLAN, id="PL2", accepted_by=reviewer)
    pages = [{"status": "CANDIDATE", "kind": "plan"}, {"kind": "plan"}, {"status": "STALE"}]
    for filters in pages:
        # When a filtered page's statements are planned without the index they are
        # meant for (dropped in a transaction rolled back after)
        with recorded(monkeypatch, view_queries, "page") as statements:
            agent.records(SCOPE, **filters)  # type: ignore[arg-type]
        from .attacks import Raw

        used: set[str] = set()
        with Raw(ledger).connect() as conn:
            conn.execute(ledger.engine.dialect.q("DROP INDEX {t}pl_records_filtered"))
            conn.execute("SET LOCAL enable_seqscan = off")
            for sql, params in statements:
                (plan,) = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
                used |= _indexes_used(plan[0]["Plan"])
            conn.rollback()
        # Then no listing index of the whole scope could serve them instead
        assert not used & {"pl_records_open", "pl_records_accepted"}, (filters, used)


@pytest.mark.parametrize("ledger_url", ["postgres"], indirect=True)
def test_whether_a_record_was_delivered_reads_none_of_another_reports_deliveries(
    open_ledger: Callable[..., Ledger], ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With statistics saying a record has hundreds of deliveries, PostgreSQL
    planned the EXISTS of a row's deliveries as a scan of them all."""
    ledger = open_ledger()
    agent, _, reviewer = people(ledger)
    admin = ledger.admin()
    admin.grant("deliverer", scope=SCOPE, roles=["deliver", "read"])
    deliverer = ledger.authenticate(admin.issue_token("deliverer"))
    # Given two reports delivered 300 times each, and statistics taken since
    for report in ("R1", "R2"):
        agent.propose(SCOPE, f"report.{report}", 1, Kind.REPORT, id=report, accepted_by=reviewer)
        for i in range(300):
            deliverer.deliver(report, recipient=f"r{i}@x.test")
    agent.propose(SCOPE, CLAIM, 30, Kind.FACT, id="T1", accepted_by=reviewer)
    analysed(ledger, "ANALYZE")

    # When a claim is read, and a page of records listed
    with recorded(monkeypatch, claim_queries, "for_claim_as") as reading:
        assert agent.read(SCOPE, CLAIM).value == 30
    with recorded(monkeypatch, view_queries, "page") as listing:
        assert [r.id for r in agent.records(SCOPE, kind="fact")] == ["T1"]

    # Then neither read the reports' deliveries
    assert work_of(ledger, reading, "pl_deliveries") <= 2
    assert work_of(ledger, listing, "pl_deliveries") <= 2


# -- a LangGraph put reads none of the candidates under its key ---------------------------


def test_a_langgraph_put_reads_none_of_the_candidates_under_its_key(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, flooder, _ = people(ledger)
    admin = ledger.admin()
    store = LedgerStore(
        ledger, token=admin.issue_token("agent"), approver_token=admin.issue_token("reviewer")
    )
    scope, claim = location((SCOPE, "prefs"), "theme", store.scope_depth)
    assert scope == SCOPE
    store.put((SCOPE, "prefs"), "theme", {"v": 0})

    def flood(count: int) -> None:
        kind = store.kind.value
        flooder.propose_many(
            [{"scope": SCOPE, "claim_key": claim, "value": {"junk": 1}, "kind": kind}] * count
        )

    def put(value: int) -> int:
        with recorded(monkeypatch, versions, "newest_version", 1) as statements:
            store.put((SCOPE, "prefs"), "theme", {"v": value})
        return work_of(ledger, statements)

    # Given another principal put 20 candidates of the store's kind under the key
    flood(20)
    # When the store puts the key, and again once 400 candidates are there
    small = put(1)
    flood(380)
    large = put(2)

    # Then finding the version a put replaces cost no more with 400 than with 20
    assert large <= small + 8, (small, large)
    # and each put replaced the newest accepted version, not a candidate
    item = store.get((SCOPE, "prefs"), "theme")
    assert item is not None and item.value == {"v": 2}
    assert len(agent.read(SCOPE, claim).records) == 1
    store.close()


# -- a run shown again what it was shown appends nothing ---------------------------------


def test_listing_the_same_page_again_appends_nothing(ledger: Ledger) -> None:
    agent, _, reviewer = people(ledger)
    facts(agent, reviewer, 20)
    with agent.run("task") as run:
        run.records(SCOPE, limit=20)
        after_first = ledger.position
        # When the run lists the same page four more times, and gets a record it listed
        for _ in range(4):
            run.records(SCOPE, limit=20)
        run.get("F03")
        # Then nothing was appended
        assert ledger.position == after_first
        # and a proposal still rests on every record the run was shown
        rid = run.propose(SCOPE, "plan", "p", Kind.PLAN)
    assert sorted(agent.get(rid).observed) == [f"F{i:02d}" for i in range(20)]


def test_a_record_shown_again_in_another_state_is_recorded(ledger: Ledger) -> None:
    agent, _, reviewer = people(ledger)
    agent.propose(SCOPE, "k", 1, Kind.FACT, id="F1")
    with agent.run("task") as run:
        run.get("F1")  # a candidate: no basis
        before = ledger.position
        reviewer.accept("F1")
        run.get("F1")  # now VALID: recorded again
        assert ledger.position > before + 1
        rid = run.propose(SCOPE, "plan", "p", Kind.PLAN)
    assert agent.get(rid).observed == ("F1",)


# -- a STALE record's causes are found without walking its whole ancestry ----------------


def test_showing_a_stale_record_does_not_walk_its_whole_ancestry(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, _, reviewer = people(ledger)
    agent.propose(SCOPE, "root", 0, "fact", id="M0", accepted_by=reviewer)
    agent.propose_many(
        [
            {
                "scope": SCOPE,
                "claim_key": f"mem{i}",
                "value": i,
                "kind": "fact",
                "id": f"M{i}",
                "parents": [f"M{j}" for j in range(i)],
            }
            for i in range(1, N)
        ]
    )
    reviewer.revoke("M0", reason="root was wrong")
    fetched: list[int] = []
    walk = edges_index._edges_where

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows = walk(*args, **kwargs)
        fetched.append(len(rows))
        return rows

    monkeypatch.setattr(edges_index, "_edges_where", counted)

    view = agent.get(f"M{N - 1}")

    assert view.status == Status.STALE
    assert [(x.cause, x.blocking) for x in view.stale_causes] == [("M0", True)]
    # M0 is a parent of M59: one level up (59 edges), not its 1,770 ancestry edges
    assert sum(fetched) <= 2 * N


# -- a command on a long history folds only its newer events ---------------------------


def count_folded(monkeypatch: pytest.MonkeyPatch, event_class: Any) -> list[int]:
    """A list that gets one entry each time an event of ``event_class`` is applied."""
    folded: list[int] = []
    apply = event_class.apply

    def counted(event: Any, aggregate: Any) -> None:
        folded.append(1)
        apply(event, aggregate)

    monkeypatch.setattr(event_class, "apply", counted)
    return folded


def test_a_runs_read_does_not_replay_the_run(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, _, reviewer = people(ledger)
    facts(agent, reviewer, N)
    with agent.run("task") as run:
        for i in range(N - 1):
            run.get(f"F{i:02d}")  # 59 reads recorded: 60 events of the run
        folded = count_folded(monkeypatch, Run.ReadRecorded)

        # When the run reads once more
        run.get(f"F{N - 1:02d}")

        # Then only the new read was applied, not the 59 before it
        assert len(folded) == 1
        rid = run.propose(SCOPE, "plan", "p", Kind.PLAN)
    # and a proposal rests on every record the run was shown
    assert sorted(agent.get(rid).observed) == [f"F{i:02d}" for i in range(N)]


def test_runs_in_turn_beyond_what_the_engine_keeps_read_only_their_newer_events(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, _, reviewer = people(ledger)
    facts(agent, reviewer, N)
    # Given more long runs read in turn than the engine keeps folded
    monkeypatch.setattr(recent, "FOLDED", 1)
    runs = [agent.run(f"task-{n}").start() for n in range(3)]
    for i in range(N - 1):
        for run in runs:
            run.get(f"F{i:02d}")
    folded = count_folded(monkeypatch, Run.ReadRecorded)

    # When each reads once more
    for run in runs:
        run.get(f"F{N - 1:02d}")

    # Then each applied only its new read (its context keeps its own run)
    assert len(folded) == len(runs)
    for run in runs:
        run.end()


def test_a_run_shared_with_another_writer_reads_only_the_newer_events(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Ledger.open(shared_url) as here, Ledger.open(shared_url) as there:
        agent, _, reviewer = people(here)
        facts(agent, reviewer, N)
        elsewhere = there.authenticate(here.admin().issue_token("agent"))
        with agent.run("task") as run:
            for i in range(N - 2):
                run.get(f"F{i:02d}")
            # Given the same run, resumed by another process, read a record
            elsewhere.run("task").resume().get(f"F{N - 2:02d}")
            folded = count_folded(monkeypatch, Run.ReadRecorded)

            # When the first context reads once more (another ledger wrote since)
            run.get(f"F{N - 1:02d}")

            # Then the other's read was read from the log and applied, then the
            # new one: not the run's whole history
            assert len(folded) == 2
            rid = run.propose(SCOPE, "plan", "p", Kind.PLAN)
        # and the proposal rests on every record either context was shown
        assert sorted(agent.get(rid).observed) == [f"F{i:02d}" for i in range(N)]


def test_a_delivery_does_not_replay_the_reports_deliveries(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Ledger.open(shared_url) as here, Ledger.open(shared_url) as there:
        admin = here.admin()
        admin.grant("writer", scope=SCOPE, roles=["propose", "read", "deliver"])
        admin.grant("reviewer", scope=SCOPE, roles=["approve", "read"])
        token = admin.issue_token("writer")
        writer = here.authenticate(token)
        reviewer = here.authenticate(admin.issue_token("reviewer"))
        rid = writer.propose(SCOPE, "weekly", "report", Kind.REPORT, accepted_by=reviewer)
        for i in range(N):
            writer.deliver(rid, f"reader{i}@example.org")
        folded = count_folded(monkeypatch, Record.Delivered)

        # When the report is delivered once more
        writer.deliver(rid, "late@example.org")
        # Then only that delivery was applied (to the record, and to the copy kept)
        assert len(folded) == 2

        # and after another process delivered it too, only its delivery is read back
        there.authenticate(token).deliver(rid, "elsewhere@example.org")
        folded.clear()
        writer.deliver(rid, "last@example.org")
        assert len(folded) == 3
        assert len(writer.get(rid).deliveries) == N + 3


# -- large values stay out of the table every look-up searches ---------------------------

BIG = "x" * 200_000  # a value of 200 KB: 50 pages


def count(ledger: Ledger, sql: str) -> int:
    """The ``n`` of one row of ``sql`` (written with ``{t}`` table prefixes)."""
    with ledger.engine.reading() as c:
        c.execute(ledger.engine.dialect.q(sql))
        row = c.fetchone()
    return int(row["n"] if isinstance(row, dict) else row[0])


def big_records(ledger: Ledger) -> tuple[Session, Session, int]:
    """The agent and the reviewer of ``people``, once B0..B3 (values of ``BIG``, B1
    built on B0) and S0..S3 (small values) are accepted and B0 revoked (B1 STALE,
    then revalidated on B2); with the log position before the revocation."""
    agent, _, reviewer = people(ledger)
    for i in range(4):
        parents = ["B0"] if i == 1 else []
        agent.propose(SCOPE, f"big{i}", BIG, Kind.FACT, parents, id=f"B{i}", accepted_by=reviewer)
        agent.propose(SCOPE, f"small{i}", i, Kind.FACT, id=f"S{i}", accepted_by=reviewer)
    before = ledger.position
    reviewer.revoke("B0", reason="source changed")
    reviewer.revalidate("B1", parents=["B2"])
    return agent, reviewer, before


def test_a_large_value_is_kept_once_outside_the_record_rows(ledger: Ledger) -> None:
    # Given records with values of 200 KB, each with three or four row versions
    agent, reviewer, before = big_records(ledger)

    # Then no row of the record table holds a large value, in any version (nor
    # anything near the kilobyte from which SQLite moves a row's end out of its page)
    longest = "SELECT MAX(length(value)) AS n FROM {t}pl_records"
    assert count(ledger, longest) < 1000
    # and each large value is kept once, however many versions its record has
    assert count(ledger, "SELECT COUNT(*) AS n FROM {t}pl_values") == 4
    # and every way of reading a record still shows it
    assert agent.get("B1").value == BIG
    assert agent.read(SCOPE, "big1").value == BIG
    assert agent.read(SCOPE, "small1").value == 1
    page = {r.id: r.value for r in agent.records(SCOPE, limit=100)}
    assert page == {**{f"B{i}": BIG for i in range(4)}, **{f"S{i}": i for i in range(4)}}
    assert [e.record.value for e in agent.explain(SCOPE, "big0").entries] == [BIG]
    then = reviewer.as_of(position=before)
    assert then.get("B0").value == BIG and then.read(SCOPE, "big0").value == BIG
    assert [r.value for r in then.records(SCOPE, status="ACCEPTED", limit=1)] == [BIG]
    # and the views are what a replay of the log makes of it
    assert ledger.rebuild().matched
    assert ledger.verify().ok


def test_a_large_value_shows_in_every_kind_of_page_and_explanation(ledger: Ledger) -> None:
    # Given records with values of 200 KB in every status a page can filter on
    agent, _, _ = big_records(ledger)
    agent.propose(SCOPE, "big-candidate", BIG, Kind.FACT, id="BC")

    # When pages are read through each of the listing's paths
    pages = {
        "kind": agent.records(SCOPE, kind="fact", limit=100),
        "status": agent.records(SCOPE, status="CANDIDATE", limit=100),
        "validity": agent.records(SCOPE, validity="INVALID", limit=100),
        "needs": agent.records(SCOPE, validity="NEEDS_REVALIDATION", limit=100),
        "prefix": agent.records(SCOPE, claim_prefix="big", limit=100),
    }

    # Then every large record in them shows its value
    for name, page in pages.items():
        shown = {r.id: r.value for r in page if r.id.startswith("B")}
        assert shown and set(shown.values()) == {BIG}, name
    assert {r.id for r in pages["validity"]} == {"B0"}
    assert {r.id for r in pages["needs"]} == {"BC"}
    # and so does a bounded explanation's record that is not usable
    bounded = agent.explain(SCOPE, "big-candidate", limit=1)
    assert [(e.record.id, e.record.value) for e in bounded.entries] == [("BC", BIG)]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_large_values_leave_no_overflow_page_in_the_record_table(
    ledger: Ledger, tmp_path: Path
) -> None:
    # Given records with values of 200 KB beside small ones, in an SQLite file
    big_records(ledger)
    ledger.close()

    # When the pages of the record table are counted (SQLite's dbstat table)
    pages = sqlite_pages(tmp_path / "ledger.db", "pl_records")

    # Then its rows fit its pages: a search never copies a value out of overflow
    # pages to compare keys (it would, 50 pages a row version, with the values inside)
    assert "overflow" not in pages
    assert sum(pages.values()) <= 4


# -- corrections due read a report's row once, and corrections only where owed, at once -


def delivered_report(ledger: Ledger) -> tuple[Session, Session, str, list[str]]:
    """A writer (propose, read, deliver) and a reviewer in ``SCOPE``, and an
    accepted report the writer delivered ``N`` times (its id, the deliveries')."""
    admin = ledger.admin()
    admin.grant("writer", scope=SCOPE, roles=["propose", "read", "deliver"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read"])
    writer = ledger.authenticate(admin.issue_token("writer"))
    reviewer = ledger.authenticate(admin.issue_token("reviewer"))
    rid = writer.propose(SCOPE, "weekly", "report", Kind.REPORT, accepted_by=reviewer)
    delivered = [writer.deliver(rid, f"reader{i}@example.org") for i in range(N)]
    return writer, reviewer, rid, delivered


def counted_calls(monkeypatch: pytest.MonkeyPatch, *functions: tuple[Any, str]) -> dict[str, int]:
    """How often each of ``functions`` (module, name) is called from now on."""
    calls = dict.fromkeys((name for _, name in functions), 0)
    for module, name in functions:
        real = getattr(module, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return calls


def test_corrections_due_read_a_reports_row_once_and_corrections_only_where_owed(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reviewer, rid, _ = delivered_report(ledger)
    calls = counted_calls(
        monkeypatch, (validity_view, "existing"), (delivery_view, "corrections_of_record")
    )

    # When no delivery owes a correction
    assert writer.corrections_due() == ()
    # Then neither the report's row nor any delivery's corrections were read
    # on their own: the statement left out the deliveries of a VALID, unchanged row
    assert calls == {"existing": 0, "corrections_of_record": 0}

    # and once the report is revoked, every delivery owes one
    reviewer.revoke(rid, reason="figures were wrong")
    calls.update(existing=0, corrections_of_record=0)
    due = writer.corrections_due()
    assert len(due) == N and {x.delivery.record_id for x in due} == {rid}
    # and the corrections of all its deliveries were read at once
    assert calls == {"existing": 1, "corrections_of_record": 1}


def test_a_get_reads_the_corrections_of_all_a_records_deliveries_at_once(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reviewer, rid, delivered = delivered_report(ledger)
    reviewer.revoke(rid, reason="figures were wrong")
    writer.issue_correction(delivered[7], note="withdrawn")
    calls = counted_calls(
        monkeypatch, (delivery_view, "corrections_for"), (delivery_view, "corrections_of_record")
    )

    # When a record delivered N times, once corrected, is shown
    view = writer.get(rid)

    # Then every delivery is there with its own corrections, read in one statement
    assert [len(d.corrections) for d in view.deliveries] == [int(i == 7) for i in range(N)]
    assert calls == {"corrections_for": 0, "corrections_of_record": 1}


@pytest.mark.parametrize("ledger_url", ["postgres"], indirect=True)
def test_a_ledger_grown_by_commands_one_by_one_gets_its_planner_statistics(
    open_ledger: Callable[..., Ledger], ledger_url: str
) -> None:
    """Statistics are refreshed after a ledger's writes added half the record view's
    rows (at least 1,000 events), by commands too, not only by batches: a plan made
    for a small table is made again for the grown one."""
    from .attacks import Raw

    ledger = open_ledger()
    agent, _, _ = people(ledger)
    raw = Raw(ledger)

    def analysed_rows() -> int:
        query = "SELECT count(*) FROM pg_stats WHERE schemaname = %s AND tablename = 'pl_records'"
        with raw.connect() as conn:
            (n,) = conn.execute(query, (raw.schema,)).fetchone()
        return int(n)

    # Given a new ledger, with no statistics of its record view
    assert analysed_rows() == 0
    # When 1,100 records are proposed one command at a time
    for i in range(1100):
        agent.propose(SCOPE, f"k.{i}", i, Kind.FACT)
    # Then the record view has statistics
    assert analysed_rows() > 0
