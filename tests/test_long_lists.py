"""Long dependency lists and evidence stay out of the table every look-up of a
record searches: a record may rest on any number of records (a run observes
everything it was shown) and evidence may name a URI of hundreds of characters, so a
row keeps such packed columns by reference (``record_table.SPILLED``), each kept
once in ``pl_spilled`` however many versions or records hold it, and every way
of reading a record shows them as they are."""

from __future__ import annotations

from pathlib import Path

from ledger import Kind, Ledger, Session, Status

from .conftest import sqlite_pages

SCOPE = "proj-a"
N = 300  # dependencies of a long list: about 12 kB of packed ids
URI = "https://docs.test/" + "a" * 450  # its claim key, source:URI, at most 512


def longest(ledger: Ledger, column: str) -> int:
    """The longest ``column`` any row version of the record table holds itself."""
    with ledger.engine.reading() as c:
        c.execute(
            ledger.engine.dialect.q(f"SELECT MAX(length({column})) AS n FROM {{t}}pl_records")
        )
        row = c.fetchone()
    return int(row["n"] if isinstance(row, dict) else row[0])


def spilled(ledger: Ledger) -> int:
    """How many packed lists and mappings ``pl_spilled`` holds."""
    with ledger.engine.reading() as c:
        c.execute(ledger.engine.dialect.q("SELECT COUNT(*) AS n FROM {t}pl_spilled"))
        row = c.fetchone()
    return int(row["n"] if isinstance(row, dict) else row[0])


def long_lists(ledger: Ledger) -> tuple[Session, Session, int]:
    """An agent and a reviewer once ``N + 1`` accepted facts F000.. are there, L1 and
    L2 rest on all of them (the same list), R1 observes them (proposed in a run
    that listed them), E1 captures a page with a long URI, L1 is made STALE by a
    revocation and then revalidated on another long list; with the log position
    before the revocation."""
    admin = ledger.admin()
    admin.grant("agent", scope=SCOPE, roles=["propose", "read"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read", "audit"])
    agent = ledger.authenticate(admin.issue_token("agent"))
    reviewer = ledger.authenticate(admin.issue_token("reviewer"))
    ids = agent.propose_many(
        [
            {"scope": SCOPE, "claim_key": f"f{i:03d}", "value": i, "kind": "fact", "id": rid}
            for i, rid in enumerate(f"F{i:03d}" for i in range(N + 1))
        ]
    )
    for rid in ids:
        reviewer.accept(rid)
    sources = ids[:N]
    for name in ("L1", "L2"):
        agent.propose(SCOPE, name.lower(), 1, Kind.INFERENCE, sources, id=name)
        reviewer.accept(name)
    with agent.run("survey") as run:
        assert len(run.records(SCOPE, kind="fact", limit=N)) == N
        run.propose(SCOPE, "r1", "seen", Kind.INFERENCE, id="R1")
    reviewer.accept("R1")
    reviewer.accept(agent.capture(SCOPE, URI, b"page", id="E1"))
    before = ledger.position
    reviewer.revoke("F000", reason="source changed")
    reviewer.revalidate("L1", parents=ids[1:])
    return agent, reviewer, before


def test_long_lists_are_kept_once_outside_the_record_rows(ledger: Ledger, tmp_path: Path) -> None:
    # Given records resting on 300 records, declared and observed, and evidence
    # with a long URI, with several row versions each
    agent, reviewer, before = long_lists(ledger)
    ids = [f"F{i:03d}" for i in range(N + 1)]

    # Then no row of the record table holds a long list or mapping itself
    for column in ("parents", "observed", "evidence", "conditions"):
        assert longest(ledger, column) < 300, column
    # and each distinct one is kept once: L1's and L2's first list, which R1 observed
    # too (the same ids in the same order), L1's new basis and E1's evidence
    assert spilled(ledger) == 3
    # and every way of reading a record shows them as they are
    l1, l2, r1 = agent.get("L1"), agent.get("L2"), agent.get("R1")
    assert l1.parents == tuple(ids[1:]) and l1.status == Status.ACCEPTED
    assert l2.parents == tuple(ids[:N]) and l2.status == Status.STALE
    assert set(r1.observed) == set(ids[:N]) and r1.status == Status.STALE
    assert agent.get("E1").evidence["uri"] == URI  # type: ignore[index]
    assert agent.read(SCOPE, "l1").records[0].parents == tuple(ids[1:])
    page = {r.id: r for r in agent.records(SCOPE, kind="inference", limit=10)}
    assert page["L2"].parents == tuple(ids[:N]) and set(page["R1"].observed) == set(ids[:N])
    assert agent.explain(SCOPE, "l2").entries[0].record.parents == tuple(ids[:N])
    then = reviewer.as_of(position=before)
    assert then.get("L1").parents == tuple(ids[:N])
    assert then.read(SCOPE, "l1").records[0].parents == tuple(ids[:N])
    # and a recapture of the long URI finds the capture it replaces
    second = agent.capture(SCOPE, URI, b"page, changed")
    reviewer.accept(second)
    assert agent.get("E1").status == Status.SUPERSEDED
    # and the views are what a replay of the log makes of them
    assert ledger.rebuild().matched
    assert ledger.verify().ok
    if ledger.backend == "sqlite":
        # and the rows fit their pages: a search never copies a list out of overflow
        # pages to compare keys (it did, four pages a row version, lists inside)
        ledger.close()
        pages = sqlite_pages(tmp_path / "ledger.db", "pl_records")
        assert pages["leaf"] and "overflow" not in pages
