"""Long lists kept by reference (``record_table.SPILLED``) through every way a
row version is written: a revalidation on a new basis, a batch of proposals and
their acceptances, a rebuild; and the same long list in two scopes, which
``pl_spilled`` keeps once, shows each principal only its own records."""

from __future__ import annotations

from ledger import Kind, Ledger, Session, Status

N = 120  # dependencies of a long list: about 5 kB of packed ids


def staffed(ledger: Ledger, *scopes: str) -> tuple[Session, Session]:
    """An agent and a reviewer with their roles in each of ``scopes``."""
    admin = ledger.admin()
    for scope in scopes:
        admin.grant("agent", scope=scope, roles=["propose", "read"])
        admin.grant("reviewer", scope=scope, roles=["approve", "read", "audit"])
    return (
        ledger.authenticate(admin.issue_token("agent")),
        ledger.authenticate(admin.issue_token("reviewer")),
    )


def facts(agent: Session, reviewer: Session, scope: str, n: int) -> list[str]:
    """``n`` accepted facts of ``scope``, proposed in one batch."""
    ids = agent.propose_many(
        [{"scope": scope, "claim_key": f"f{i:03d}", "value": i, "kind": "fact"} for i in range(n)]
    )
    for rid in ids:
        reviewer.accept(rid)
    return ids


def test_a_revalidation_on_a_long_basis_keeps_each_basis_where_it_stood(ledger: Ledger) -> None:
    # Given an inference on a long list, made STALE, then revalidated on another
    agent, reviewer = staffed(ledger, "proj-a")
    ids = facts(agent, reviewer, "proj-a", N + 1)
    first, second = ids[:N], ids[1:]
    agent.propose("proj-a", "l1", 1, Kind.INFERENCE, first, id="L1")
    reviewer.accept("L1")
    accepted = ledger.position
    reviewer.revoke(ids[0], reason="source changed")
    stale = ledger.position
    reviewer.revalidate("L1", parents=second)
    revalidated = ledger.position
    # and, once a fact of that one is revoked too, on the first but its revoked fact
    reviewer.revoke(ids[N], reason="source changed")
    reviewer.revalidate("L1", parents=first[1:])

    # Then each position shows the basis it had
    for position, parents, status in (
        (accepted, first, Status.ACCEPTED),
        (stale, first, Status.STALE),
        (revalidated, second, Status.ACCEPTED),
    ):
        then = agent.as_of(position=position)
        assert then.get("L1").parents == tuple(parents)
        assert then.get("L1").status == status
        assert then.explain("proj-a", "l1").entries[0].record.parents == tuple(parents)
        if status == Status.ACCEPTED:
            assert then.read("proj-a", "l1").records[0].parents == tuple(parents)
    assert agent.read("proj-a", "l1").records[0].parents == tuple(first[1:])
    # and the views are what a replay makes of the log
    assert ledger.rebuild().matched
    assert ledger.verify().ok
    assert agent.as_of(position=revalidated).get("L1").parents == tuple(second)


def test_a_batch_of_records_on_long_lists_reads_back_after_a_rebuild(ledger: Ledger) -> None:
    # Given a batch of records each resting on a long list (some the same list,
    # some a list of their own), accepted, and one revoked under them
    agent, reviewer = staffed(ledger, "proj-a")
    ids = facts(agent, reviewer, "proj-a", N + 12)
    batch = agent.propose_many(
        [
            {
                "scope": "proj-a",
                "claim_key": f"s{i:02d}",
                "value": i,
                "kind": "inference",
                "parents": ids[i % 3 : i % 3 + N],
                "conditions": {f"region-{j:03d}": "eu-west" for j in range(40)},
            }
            for i in range(12)
        ]
    )
    for rid in batch:
        reviewer.accept(rid)
    reviewer.revoke(ids[0], reason="source changed")  # in the lists of i % 3 == 0 only

    def seen() -> list[tuple[str, tuple[str, ...], str, dict[str, object]]]:
        return [
            (rid, (v := agent.get(rid)).parents, v.status.value, dict(v.conditions))
            for rid in batch
        ]

    before = seen()
    assert [b[1] for b in before] == [tuple(ids[i % 3 : i % 3 + N]) for i in range(12)]
    assert [b[2] for b in before] == ["STALE" if i % 3 == 0 else "ACCEPTED" for i in range(12)]
    # Then a rebuild makes the very same views, and every read shows the same
    assert ledger.rebuild().matched
    assert ledger.verify().ok
    assert seen() == before
    page = agent.records("proj-a", kind="inference", limit=20)
    assert sorted((r.id, r.parents) for r in page) == sorted((b[0], b[1]) for b in before)


def test_the_same_long_list_in_two_scopes_shows_each_principal_only_its_own(
    ledger: Ledger,
) -> None:
    # Given the same long conditions on a record of proj-a and of proj-b, and a
    # principal who reads proj-b only
    agent, reviewer = staffed(ledger, "proj-a", "proj-b")
    admin = ledger.admin()
    admin.grant("other", scope="proj-b", roles=["read", "audit"])
    other = ledger.authenticate(admin.issue_token("other"))
    conditions = {f"region-{j:03d}": "eu-west" for j in range(60)}
    for scope, rid in (("proj-b", "S1"), ("proj-a", "S2")):
        agent.propose(scope, "shared", 1, Kind.FACT, conditions=conditions, id=rid)
        reviewer.accept(rid)
    shown_before = (
        other.get("S1"),
        other.explain("proj-b", "shared", context=conditions),
        other.records("proj-b"),
    )

    # When proj-a's record is revoked, and a rebuild makes the views anew
    reviewer.revoke("S2", reason="withdrawn")
    assert ledger.rebuild().matched

    # Then the proj-b reader sees its record as before, conditions whole, and
    # nothing of proj-a
    shown_after = (
        other.get("S1"),
        other.explain("proj-b", "shared", context=conditions),
        other.records("proj-b"),
    )
    assert shown_after == shown_before
    assert dict(shown_after[0].conditions) == conditions
    assert other.read("proj-b", "shared", context=conditions).records[0].id == "S1"
    assert all(e.record.scope == "proj-b" for e in shown_after[1].entries)
    assert [r.id for r in shown_after[2]] == ["S1"]
    assert ledger.verify().ok
