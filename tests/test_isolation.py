"""Scope isolation as two tenants meet it (SPEC §13.1), on memory, SQLite and PostgreSQL.

Tenant A works in ``proj-a``, tenant B in ``proj-b``. A bridge principal, granted
in both, builds B's records on A's (and A's on B's). A revokes its source with a
confidential reason. Everything B can call then answers without naming any A
record, claim or reason: one ``<hidden>`` placeholder stands for them, and the
reason is withheld.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ledger import HIDDEN, WITHHELD, Kind, Ledger, Session, Status, merkle, serialization
from ledger.bundle import verify_bundle, write_bundle
from ledger.cli import main
from ledger.errors import (
    AccessDeniedError,
    DuplicateRecordError,
    InvalidIdError,
    InvalidParentError,
    LedgerError,
    UnknownRecordError,
)
from ledger.graph import collect, draw, revocations
from ledger.heads import generate_key
from ledger.prov import export_text
from tests.conftest import Clock

#: What B must never see: A's ids, claim key, scope, confidential reason and who
#: acts there (``tenant-a`` revoked A-E1, which marked B's records STALE).
SECRETS = ("A-E1", "A-M1", "A-X", "api.secret_claim", "proj-a", "merger with ACME", "tenant-a")


def grant(led: Ledger, subject: str, roles: dict[str, list[str]]) -> Session:
    admin = led.admin()
    for scope, granted in roles.items():
        admin.grant(subject, scope=scope, roles=granted)
    return led.authenticate(admin.issue_token(subject))


ALL = ["read", "propose", "approve", "deliver", "audit"]


@dataclass
class Tenants:
    led: Ledger
    a: Session  # every role in proj-a
    a_rev: Session  # every role in proj-a (approves what ``a`` proposes)
    b: Session  # every role in proj-b only
    bridge: Session  # read and propose in both
    delivery: str  # of B-R1, before A's revocation


@pytest.fixture
def tenants(ledger: Ledger, clock: Clock) -> Tenants:
    led = ledger
    a = grant(led, "tenant-a", {"proj-a": ALL})
    a_rev = grant(led, "tenant-a-reviewer", {"proj-a": ALL})
    b = grant(led, "tenant-b", {"proj-b": ALL})
    b_rev = grant(led, "tenant-b-reviewer", {"proj-b": ALL})
    bridge = grant(led, "bridge", {"proj-a": ["read", "propose"], "proj-b": ["read", "propose"]})
    expires = clock() + timedelta(days=30)
    a.capture("proj-a", uri="https://a.test/doc", content=b"a secret", id="A-E1")
    a_rev.accept("A-E1")
    a.propose(
        "proj-a", "api.secret_claim", 1, Kind.FACT, parents=["A-E1"], id="A-M1", expires=expires
    )
    a_rev.accept("A-M1")
    # B's report rests on A's fact (the bridge could read both)
    bridge.propose("proj-b", "b.report", "go", Kind.REPORT, parents=["A-M1"], id="B-R1")
    # B's approver cannot read A-M1: it may not vouch for B-R1 (checked below);
    # A's approver holds no role in proj-b, so accept B-R1 before A's revocation
    # with a principal that can read both.
    approver = grant(led, "approver-ab", {"proj-a": ["read"], "proj-b": ["approve", "read"]})
    approver.accept("B-R1")
    delivery = b.deliver("B-R1", recipient="ops@b.test")
    # A chain B-B0 → A-X → B-B2: B's graph must not walk through A-X to B-B2
    b.propose("proj-b", "b.base", 0, Kind.FACT, id="B-B0")
    b_rev.accept("B-B0")
    bridge.propose("proj-a", "a.mid", 1, Kind.INFERENCE, parents=["B-B0"], id="A-X")
    bridge.propose("proj-b", "b.top", 2, Kind.INFERENCE, parents=["A-X"], id="B-B2")
    a.revoke("A-E1", reason="merger with ACME")
    return Tenants(led, a, a_rev, b, bridge, delivery)


def assert_nothing_of_a(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, secret


def test_a_record_resting_on_a_hidden_one_shows_one_placeholder_and_no_reason(
    tenants: Tenants,
) -> None:
    view = tenants.b.get("B-R1")
    assert view.status == Status.STALE
    assert view.parents == (HIDDEN,)
    assert (view.cause, view.reason) == (HIDDEN, WITHHELD)
    assert view.expiry_source == HIDDEN  # it inherits A-M1's expiry
    assert [(c.cause, c.reason, c.blocking) for c in view.stale_causes] == [
        (HIDDEN, WITHHELD, True)
    ]
    assert_nothing_of_a(repr(view))
    # The bridge, granted in both, sees the real ids (redaction is per caller)
    seen = tenants.bridge.get("B-R1")
    assert (seen.parents, seen.cause, seen.reason) == (("A-M1",), "A-E1", "merger with ACME")


def test_explain_audit_history_and_corrections_name_nothing_of_the_other_scope(
    tenants: Tenants,
) -> None:
    b = tenants.b
    explained = b.explain("proj-b", "b.report")
    assert explained.entries[0].reasons == (f"stale because {HIDDEN} was revoked: {WITHHELD}",)
    assert_nothing_of_a(str(explained) + repr(explained))
    trail = b.audit("B-R1")
    assert trail.events[0].details["parents"] == (HIDDEN,)
    marked = [e for e in trail.events if e.type == "MarkedStale"]
    assert [(e.details["cause"], e.details["reason"]) for e in marked] == [(HIDDEN, WITHHELD)]
    # Who revoked A's source acted in proj-a: the marking it caused shows no actor's name.
    assert [e.actor for e in marked] == [HIDDEN]
    assert_nothing_of_a(repr(trail))
    assert_nothing_of_a(repr(b.history()))
    (due,) = b.corrections_due()
    assert (due.delivery.delivery_id, due.cause, due.reason) == (
        tenants.delivery,
        HIDDEN,
        WITHHELD,
    )
    assert_nothing_of_a(repr(due))
    before = b.as_of(position=tenants.led.position - 1)
    assert_nothing_of_a(repr(before.get("B-R1")) + repr(before.audit("B-R1")))


def test_a_hidden_dependency_superseded_is_said_superseded_everywhere(
    tenants: Tenants, tmp_path: Path
) -> None:
    # Given B's record observing A's fact, which A then replaces with a new version
    a, b, bridge = tenants.a, tenants.b, tenants.bridge
    a.propose("proj-a", "a.rate", 1, Kind.FACT, id="A-F1")
    grant(tenants.led, "approver-a", {"proj-a": ALL}).accept("A-F1")
    bridge.propose("proj-b", "b.plan", "x", Kind.INFERENCE, parents=["A-F1"], id="B-P1")
    grant(tenants.led, "approver-ab2", {"proj-a": ["read"], "proj-b": ["approve", "read"]}).accept(
        "B-P1"
    )
    a.propose("proj-a", "a.rate", 2, Kind.FACT, supersedes="A-F1", id="A-F2")
    grant(tenants.led, "approver-a2", {"proj-a": ALL}).accept("A-F2")
    superseded = "a dependency outside your scopes was superseded"
    # Then B is told, wherever the reason shows, that it was superseded (as the
    # cause's placeholder for what superseded it already says), and nothing of A
    view = b.get("B-P1")
    assert (view.cause, view.cause_superseded_by, view.reason) == (HIDDEN, HIDDEN, superseded)
    assert [(c.superseded_by, c.reason) for c in view.stale_causes] == [(HIDDEN, superseded)]
    [marked] = [e for e in b.audit("B-P1").events if e.type == "MarkedStale"]
    assert marked.details == {"cause": HIDDEN, "reason": superseded, "superseded_by": HIDDEN}
    [listed] = b.records("proj-b", status="STALE", claim_prefix="b.plan")
    assert listed.reason == superseded
    assert_nothing_of_a(repr(view) + repr(marked) + repr(listed))
    # and so does B-P1's compliance bundle, in its summary and its PROV
    key = tmp_path / "k"
    generate_key(key)
    write_bundle(b, "B-P1", key, tmp_path / "b.zip")
    with zipfile.ZipFile(tmp_path / "b.zip") as archive:
        summary, prov = archive.read("summary.txt").decode(), archive.read("prov.json").decode()
    assert f"status:    STALE / NEEDS_REVALIDATION ({superseded})" in summary
    assert "scopes was revoked" not in summary + prov and superseded in prov
    assert verify_bundle(tmp_path / "b.zip", tmp_path / "k.pub").ok


def test_a_hidden_cause_looks_the_same_whatever_is_done_in_its_scope(tenants: Tenants) -> None:
    b = tenants.b
    before = b.get("B-R1"), b.explain("proj-b", "b.report")
    # When A gives A-M1 a new basis, so that A-E1 no longer rests under B-R1
    tenants.a.capture("proj-a", uri="https://a.test/doc2", content=b"a secret 2", id="A-E2")
    tenants.a_rev.accept("A-E2")
    tenants.a_rev.revalidate("A-M1", note="re-based", parents=["A-E2"])

    # Then B is shown exactly what it was shown before: that is A's to know
    after = b.get("B-R1"), b.explain("proj-b", "b.report")
    assert [(c.cause, c.blocking) for c in after[0].stale_causes] == [(HIDDEN, True)]
    assert after[0].stale_causes == before[0].stale_causes
    assert [e.reasons for e in after[1].entries] == [e.reasons for e in before[1].entries]
    # while the bridge, who sees A's records, is told the cause no longer rests under it
    assert [(c.cause, c.blocking) for c in tenants.bridge.get("B-R1").stale_causes] == [
        ("A-E1", False)
    ]


def test_graph_and_prov_show_the_placeholder_and_do_not_walk_through_it(
    tenants: Tenants,
) -> None:
    b = tenants.b
    down = collect(b, "B-B0", descendants=True)
    assert [n.id for n in down.nodes] == ["B-B0"]  # B-B2 lies beyond A-X
    # A-X, in A, rests on B-B0: not even a placeholder says so (when A built on
    # B's record is A's to know); a record of B resting on one of A's shows one.
    assert down.edges == ()
    up = collect(b, "B-R1", ancestors=True)
    assert [n.id for n in up.nodes] == ["B-R1"]
    for fmt in ("dot", "mermaid"):
        text = draw(b, "B-R1", ancestors=True, format=fmt).data.decode()
        assert "hidden" in text
        assert_nothing_of_a(text)
        text = draw(b, "B-B0", descendants=True, format=fmt).data.decode()
        assert "B-B2" not in text and "hidden" not in text
    prov = export_text(b, "prov-json", record="B-R1", ancestors=True)
    assert_nothing_of_a(prov)
    document = json.loads(prov)
    # B-R1 rests on A-M1: derived from the placeholder, which its proposal used
    derived = document["wasDerivedFrom"].values()
    assert [(d["prov:generatedEntity"], d["prov:usedEntity"]) for d in derived] == [
        ("rec:B-R1", "pl:hidden")
    ]
    assert "pl:hidden" in [u["prov:entity"] for u in document["used"].values()]


def test_an_approver_vouches_only_for_what_it_can_read(tenants: Tenants) -> None:
    led, b, bridge = tenants.led, tenants.b, tenants.bridge
    bridge.propose("proj-b", "b.other", 3, Kind.INFERENCE, parents=["B-B0"], id="B-OK")
    bridge.propose("proj-a", "a.fact", 1, Kind.FACT, id="A-F")
    tenants.a_rev.accept("A-F")
    bridge.propose("proj-b", "b.more", 4, Kind.INFERENCE, parents=["A-F"], id="B-C")
    position, digest = led.position, led.views_digest()
    with pytest.raises(InvalidParentError) as refused:
        b.accept("B-C")
    assert HIDDEN in str(refused.value) and "A-F" not in str(refused.value)
    # and says what it may do instead
    assert str(refused.value).endswith(
        "only an approver who can read every dependency may accept it: leave it to one, "
        "or reject it"
    )
    with pytest.raises(InvalidParentError) as revalidate:
        b.revalidate("B-R1", note="looks fine")
    assert_nothing_of_a(str(revalidate.value))
    assert str(revalidate.value).endswith(": leave it to one, or revoke it")
    assert (led.position, led.views_digest()) == (position, digest)
    b.accept("B-OK")  # what it can read, it may accept
    assert b.get("B-OK").status == Status.ACCEPTED


def test_a_revocation_reports_only_what_the_caller_may_see(tenants: Tenants) -> None:
    b = tenants.b
    rev = b.revoke("B-B0", reason="wrong")
    # A-X is STALE all the same, neither named nor counted; B-B2, B's own record
    # beyond it, is named (its parents show only the placeholder)
    assert rev.affected == ("B-B0", "B-B2")
    assert not hasattr(rev, "hidden")
    assert tenants.bridge.get("A-X").status == Status.STALE
    assert tenants.bridge.get("B-B2").status == Status.STALE
    assert b.get("B-B2").status == Status.STALE


def taken_in_a(led: Ledger, record_id: str) -> Session:
    """Tenant A (every role in proj-a) with a record proposed as ``record_id``."""
    a = grant(led, "tenant-a", {"proj-a": ALL})
    a.propose("proj-a", "api.secret_claim", 1, Kind.FACT, id=record_id)
    return a


def test_acting_on_a_record_that_names_a_hidden_one_keeps_the_stored_names(
    tenants: Tenants,
) -> None:
    # B-R1's row names A-M1 (its expiry source) and A-E1 (the cause of its
    # staleness); B is shown placeholders for both, but its revocation must not
    # write them into the view: the next version keeps the real names.
    led, b = tenants.led, tenants.b
    assert b.get("B-R1").expiry_source == HIDDEN
    b.revoke("B-R1", reason="withdrawn")
    seen = tenants.bridge.get("B-R1")
    assert (seen.status, seen.expiry_source) == (Status.REVOKED, "A-M1")
    assert b.get("B-R1").expiry_source == HIDDEN
    check = led.verify()
    assert check.ok, check.problems
    report = led.rebuild()
    assert report.digest_before == report.digest_after


def test_two_records_proposed_as_one_id_in_two_granted_scopes_are_told_apart(
    ledger: Ledger,
) -> None:
    # "x" is taken in proj-a; B and C, who cannot see proj-a, each propose "x"
    # (keyed x@@proj-b and x@@proj-c). A principal granted in proj-b and proj-c
    # is shown the first proposed as "x" and the other by its key.
    led = ledger
    a = taken_in_a(led, "x")
    b = grant(led, "tenant-b", {"proj-b": ALL})
    c = grant(led, "tenant-c", {"proj-c": ALL})
    approver = grant(led, "approver-bc", {"proj-b": ALL, "proj-c": ALL})
    assert b.propose("proj-b", "b.claim", "b", Kind.FACT, id="x") == "x"
    assert c.propose("proj-c", "c.claim", "c", Kind.FACT, id="x") == "x"
    assert [v.id for v in approver.records("proj-b")] == ["x"]
    assert [v.id for v in approver.records("proj-c")] == ["x@@proj-c"]
    assert (approver.get("x").scope, approver.get("x@@proj-c").scope) == ("proj-b", "proj-c")
    # C alone is shown its record as "x"; the key denotes nothing to it
    assert c.get("x").scope == "proj-c"
    with pytest.raises(UnknownRecordError):
        c.get("x@@proj-c")
    # "x" is taken for the approver: it sees a record shown so
    with pytest.raises(DuplicateRecordError):
        approver.propose("proj-c", "c.other", 1, Kind.FACT, id="x")
    # A command names the record the caller was shown
    approver.accept("x@@proj-c")
    assert (b.get("x").status, c.get("x").status) == (Status.CANDIDATE, Status.ACCEPTED)
    approver.revoke("x", reason="b's withdrawn")
    assert (b.get("x").status, c.get("x").status) == (Status.REVOKED, Status.ACCEPTED)
    assert a.get("x").status == Status.CANDIDATE
    check = led.verify()
    assert check.ok, check.problems


@pytest.mark.parametrize("taken", [False, True])
def test_where_a_record_is_listed_does_not_tell_whether_its_id_is_taken_elsewhere(
    ledger: Ledger, taken: bool
) -> None:
    led = ledger
    if taken:
        taken_in_a(led, "x")
    b = grant(led, "tenant-b", {"proj-b": ALL})
    for rid in ("xa", "x.2", "x", "x-1"):
        b.propose("proj-b", f"claim.{rid}", 1, Kind.FACT, id=rid)
    assert [v.id for v in b.records("proj-b")] == ["x", "x-1", "x.2", "xa"]
    pages, after = [], None
    while page := b.records("proj-b", limit=1, after=after):
        pages.append(page[0].id)
        after = page[0].id
    assert pages == ["x", "x-1", "x.2", "xa"]
    # The principal who also sees proj-a pages through both, each name once
    both = grant(led, "reader-ab", {"proj-a": ["read"], "proj-b": ["read"]})
    listed = [v.id for v in both.records("proj-b")]
    assert listed == ["x@@proj-b" if taken else "x", "x-1", "x.2", "xa"]
    assert [v.id for v in both.records("proj-b", after=listed[0])] == listed[1:]


@pytest.mark.parametrize("taken", [False, True])
def test_an_audit_of_ones_own_record_does_not_tell_whether_its_id_is_taken_elsewhere(
    ledger: Ledger, taken: bool
) -> None:
    if taken:
        taken_in_a(ledger, "x")
    b = grant(ledger, "tenant-b", {"proj-b": ALL})
    b.propose("proj-b", "claim.base", 0, Kind.FACT, id="base")
    b.propose("proj-b", "claim.x", 1, Kind.FACT, parents=["base"], id="x")
    audited = b.audit("x").events[0].details
    proposed = next(
        e for e in b.history() if e.type == "Proposed" and e.details["record_id"] == "x"
    )
    for details in (audited, proposed.details):
        assert (details["parents"], details["observed"]) == (("base",), ())


def test_a_name_keeps_its_record_when_another_is_proposed_under_it_later(
    ledger: Ledger,
) -> None:
    # The approver reviews proj-c's "x"; then proj-b, whose scope sorts first, gets
    # an "x" too. The name must not move to it: a decision on what the approver
    # was shown would land on a record it never saw.
    led = ledger
    taken_in_a(led, "x")
    b = grant(led, "tenant-b", {"proj-b": ALL})
    c = grant(led, "tenant-c", {"proj-c": ALL})
    bc = grant(led, "approver-bc", {"proj-b": ALL, "proj-c": ALL})
    c.propose("proj-c", "c.claim", "reviewed", Kind.FACT, id="x")  # keyed x@@proj-c
    shown = bc.get("x")
    assert (shown.scope, shown.value) == ("proj-c", "reviewed")
    before = led.position
    b.propose("proj-b", "b.claim", "unseen", Kind.FACT, id="x")  # keyed x@@proj-b
    assert [v.id for v in bc.records("proj-c")] == ["x"]
    assert [v.id for v in bc.records("proj-b")] == ["x@@proj-b"]
    assert bc.get("x").value == "reviewed" and bc.audit("x").record.scope == "proj-c"
    bc.accept("x")
    assert (c.get("x").status, b.get("x").status) == (Status.ACCEPTED, Status.CANDIDATE)
    bc.reject("x@@proj-b", reason="not reviewed yet")
    assert b.get("x").status == Status.REJECTED
    # As of a position before proj-b's, "x" is proj-c's there too
    then = bc.as_of(position=before)
    assert [v.id for v in then.records("proj-c")] == ["x"]
    assert then.records("proj-b") == ()
    assert (then.get("x").scope, then.audit("x").record.id) == ("proj-c", "x")


def test_an_invalid_id_is_echoed_as_typed_even_when_it_is_a_key_shown_otherwise(
    ledger: Ledger,
) -> None:
    taken_in_a(ledger, "x")
    b = grant(ledger, "tenant-b", {"proj-b": ALL})
    b.propose("proj-b", "b.claim", 1, Kind.FACT, id="x")  # keyed x@@proj-b, shown "x"
    with pytest.raises(InvalidIdError, match=r"^record id 'x@@proj-b' is invalid"):
        b.propose("proj-b", "b.other", 1, Kind.FACT, id="x@@proj-b")


def test_a_batch_cannot_propose_one_id_twice_for_a_caller_who_would_see_both(
    ledger: Ledger,
) -> None:
    led = ledger
    taken_in_a(led, "x")
    bc = grant(led, "approver-bc", {"proj-b": ALL, "proj-c": ALL})
    position = led.position
    items = [
        {"scope": "proj-c", "claim_key": "c.claim", "value": "c", "kind": "fact", "id": "x"},
        {"scope": "proj-b", "claim_key": "b.claim", "value": "b", "kind": "fact", "id": "x"},
    ]
    with pytest.raises(DuplicateRecordError, match="item 1: record 'x' already exists"):
        bc.propose_many(items)
    assert led.position == position
    assert bc.propose_many(items[:1]) == ["x"]
    with pytest.raises(DuplicateRecordError):
        bc.propose_many(items[1:])


def test_a_store_whose_approver_cannot_see_its_scope_acts_on_no_other_record(
    ledger: Ledger,
) -> None:
    from ledger.integrations.langgraph import LedgerStore

    led, admin = ledger, ledger.admin()
    taken_in_a(led, "note-1")
    b = grant(led, "tenant-b", {"proj-b": ALL})
    c = grant(led, "tenant-c", {"proj-c": ALL})
    admin.grant("agent-b", scope="proj-b", roles=["propose", "read"])
    c_approver = grant(led, "approver-c", {"proj-c": ALL})
    b.propose("proj-b", "user/name", {"text": "Ada"}, Kind.FACT, id="note-1")
    grant(led, "tenant-b-rev", {"proj-b": ALL}).accept("note-1")
    c.propose("proj-c", "c.claim", "c's", Kind.FACT, id="note-1")
    c_approver.accept("note-1")
    with (
        LedgerStore(
            led, token=admin.issue_token("agent-b"), approver_token=admin.issue_token("approver-c")
        ) as store,
        pytest.raises(AccessDeniedError, match="approver 'approver-c' holds no role in scope"),
    ):
        store.delete(("proj-b", "user"), "name")
    assert (b.get("note-1").status, c.get("note-1").status) == (Status.ACCEPTED, Status.ACCEPTED)


def test_the_langgraph_store_acts_on_its_own_record_when_its_approver_sees_more(
    ledger: Ledger,
) -> None:
    from ledger.integrations.langgraph import LedgerStore

    led, admin = ledger, ledger.admin()
    a = taken_in_a(led, "note-1")
    b = grant(led, "tenant-b", {"proj-b": ALL})
    central = grant(led, "central-reviewer", {"proj-a": ALL, "proj-b": ALL})
    admin.grant("agent-b", scope="proj-b", roles=["propose", "read"])
    central.accept("note-1")
    # B's memory item is proposed as "note-1" (free to B: keyed note-1@@proj-b)
    b.propose("proj-b", "user/name", {"text": "Ada"}, Kind.FACT, id="note-1")
    central.accept("note-1@@proj-b")
    with LedgerStore(
        led,
        token=admin.issue_token("agent-b"),
        approver_token=admin.issue_token("central-reviewer"),
    ) as store:
        assert store.get(("proj-b", "user"), "name") is not None
        store.delete(("proj-b", "user"), "name")
        assert store.get(("proj-b", "user"), "name") is None
        store.put(("proj-b", "user"), "name", {"text": "Grace"})
        item = store.get(("proj-b", "user"), "name")
        assert item is not None and item.value == {"text": "Grace"}
    # The approver revoked B's record, not A's it would call "note-1"
    assert (a.get("note-1").status, a.get("note-1").reason) == (Status.ACCEPTED, None)
    assert b.get("note-1").status == Status.REVOKED


def test_a_langgraph_thread_goes_on_after_rereading_a_withdrawn_record_keyed_qualified(
    ledger: Ledger,
) -> None:
    from ledger.integrations.langgraph import LedgerStore
    from tests.test_langgraph_store import greeting_graph, writer_graph

    # The store works in proj-a here; "note-1" is taken in proj-z, hidden from it
    led, admin = ledger, ledger.admin()
    z = grant(led, "tenant-z", {"proj-z": ALL})
    z.propose("proj-z", "api.secret_claim", 1, Kind.FACT, id="note-1")
    a = grant(led, "tenant-a", {"proj-a": ALL})
    a_rev = grant(led, "tenant-a-reviewer", {"proj-a": ALL})
    admin.grant("agent-a", scope="proj-a", roles=["propose", "read"])
    a.propose("proj-a", "user/name", {"text": "Mallory"}, Kind.FACT, id="note-1")
    a_rev.accept("note-1")  # keyed note-1@@proj-a, shown to A as note-1
    thread = {"configurable": {"thread_id": "chat-1"}}
    tokens = {"token": admin.issue_token("agent-a")}
    tokens["approver_token"] = admin.issue_token("tenant-a-reviewer")
    with LedgerStore(led, **tokens) as store:
        greeting_graph(store).invoke({"greeting": ""}, thread)
        a_rev.revoke("note-1", "poisoned")
        with pytest.raises(InvalidParentError):
            writer_graph(store).invoke({"greeting": "hi"}, thread)
        # Reading the key again (nothing usable now) frees the thread, as for any id
        out = greeting_graph(store).invoke({"greeting": ""}, thread)
        assert out["greeting"] == "Hello, stranger!"
        writer_graph(store).invoke({"greeting": "hi"}, thread)
        assert store.get(("proj-a", "notes"), "last") is not None


def test_explain_says_a_hidden_ancestor_expired_without_naming_it(
    ledger: Ledger, clock: Clock
) -> None:
    led = ledger
    a = grant(led, "tenant-a", {"proj-a": ALL})
    a_rev = grant(led, "tenant-a-reviewer", {"proj-a": ALL})
    b = grant(led, "tenant-b", {"proj-b": ALL})
    bridge = grant(led, "bridge", {"proj-a": ["read", "propose"], "proj-b": ["read", "propose"]})
    approver = grant(led, "approver-ab", {"proj-a": ["read"], "proj-b": ["approve", "read"]})
    a.propose(
        "proj-a", "api.secret_claim", 1, Kind.FACT, id="A-M1", expires=clock() + timedelta(days=30)
    )
    a_rev.accept("A-M1")
    bridge.propose("proj-b", "b.report", "go", Kind.REPORT, parents=["A-M1"], id="B-R1")
    approver.accept("B-R1")
    when = clock.advance(days=31)
    expired = (clock() - timedelta(days=1)).isoformat()
    explained = b.explain("proj-b", "b.report")
    assert explained.entries[0].reasons == (f"ancestor {HIDDEN} expired at {expired}",)
    assert_nothing_of_a(repr(explained))
    seen = bridge.explain("proj-b", "b.report", at=when)
    assert seen.entries[0].reasons == (f"ancestor A-M1 expired at {expired}",)


def test_a_hidden_cause_superseded_names_not_what_superseded_it(ledger: Ledger) -> None:
    led = ledger
    a = grant(led, "tenant-a", {"proj-a": ALL})
    b = grant(led, "tenant-b", {"proj-b": ALL})
    b_rev = grant(led, "tenant-b-reviewer", {"proj-b": ALL})
    bridge = grant(led, "bridge", {"proj-a": ["read", "propose"], "proj-b": ["read", "propose"]})
    approver = grant(led, "approver-ab", {"proj-a": ["approve", "read"], "proj-b": ["read"]})
    b.propose("proj-b", "b.fact", 1, Kind.FACT, id="SECRET-H")
    b_rev.accept("SECRET-H")
    bridge.propose("proj-a", "a.view", 1, Kind.INFERENCE, parents=["SECRET-H"], id="V")
    approver.accept("V")
    b.propose("proj-b", "b.fact", 2, Kind.FACT, id="SECRET-H2", supersedes="SECRET-H")
    b_rev.accept("SECRET-H2")

    view = a.get("V")

    assert view.status == Status.STALE
    assert [(x.cause, x.superseded_by) for x in view.stale_causes] == [(HIDDEN, HIDDEN)]
    assert "SECRET" not in repr(view)


def test_a_supersession_is_told_with_the_ids_as_the_caller_knows_them(ledger: Ledger) -> None:
    led = ledger
    taken_in_a(led, "A-V2")
    b = grant(led, "tenant-b", {"proj-b": ALL})
    b_rev = grant(led, "tenant-b-reviewer", {"proj-b": ALL})
    b.propose("proj-b", "b.fact", 1, Kind.FACT, id="B-OLD")
    b_rev.accept("B-OLD")
    b.propose("proj-b", "b.child", 2, Kind.REPORT, parents=["B-OLD"], id="B-CHILD")
    b_rev.accept("B-CHILD")
    b.deliver("B-CHILD", recipient="ops@b.test")
    # "A-V2" is free to B (keyed A-V2@@proj-b); the stored reason names the key
    b.propose("proj-b", "b.fact", 2, Kind.FACT, id="A-V2", supersedes="B-OLD")
    b_rev.accept("A-V2")
    child = b.get("B-CHILD")
    assert [(x.cause, x.reason, x.superseded_by) for x in child.stale_causes] == [
        ("B-OLD", "superseded by A-V2", "A-V2")
    ]
    assert b.explain("proj-b", "b.child").entries[0].reasons == (
        "stale because B-OLD was superseded by A-V2",
    )
    assert b.explain("proj-b", "b.fact").entries[0].reasons == ("superseded by A-V2",)
    stale = [e for e in b.audit("B-CHILD").events if e.type == "MarkedStale"]
    assert [e.details["reason"] for e in stale] == ["superseded by A-V2"]
    assert [(d.delivery.record_id, d.cause, d.reason) for d in b.corrections_due()] == [
        ("B-CHILD", "B-OLD", "superseded by A-V2")
    ]
    for text in (repr(child), repr(b.audit("B-CHILD")), repr(b.history())):
        no_key_in(text)


def test_an_acceptance_note_naming_a_key_reads_as_the_caller_knows_it(ledger: Ledger) -> None:
    led = ledger
    taken_in_a(led, "A-V2")
    b = grant(led, "tenant-b", {"proj-b": ALL})
    b_rev = grant(led, "tenant-b-reviewer", {"proj-b": ALL})
    b.propose("proj-b", "b.fact", 2, Kind.FACT, id="A-V2")  # keyed A-V2@@proj-b
    b_rev.accept("A-V2")
    b.propose("proj-b", "b.other", 3, Kind.FACT, id="B-X")
    b_rev.accept("B-X", note="checked, as A-V2@@proj-b says")
    # A read of a plain record and a get of it tell the note alike.
    (read,) = b.read("proj-b", "b.other").records
    assert read.reason == b.get("B-X").reason == "checked, as A-V2 says"
    assert read == b.get("B-X") == b.explain("proj-b", "b.other").entries[0].record


def test_graphs_draw_the_callers_own_revocation_and_title(ledger: Ledger) -> None:
    led = ledger
    a = grant(led, "tenant-a", {"proj-a": ALL})
    a_rev = grant(led, "tenant-a-reviewer", {"proj-a": ALL})
    b = grant(led, "tenant-b", {"proj-b": ALL})
    b_rev = grant(led, "tenant-b-reviewer", {"proj-b": ALL})
    a.capture("proj-a", uri="https://a.test/doc", content=b"a secret", id="A-E1")
    a_rev.accept("A-E1")
    a_rev.revoke("A-E1", reason="merger with ACME")
    # B uses the id A-E1, free to it, and revokes its own record
    b.capture("proj-b", uri="https://b.test/doc", content=b"b's", id="A-E1")
    b_rev.accept("A-E1")
    b_rev.revoke("A-E1", reason="b's own reason")
    sub = collect(b, "A-E1")
    assert sub.title.startswith("A-E1 ")
    assert {k: v.reason for k, v in revocations(b, sub).items()} == {"A-E1": "b's own reason"}
    for fmt in ("dot", "mermaid"):
        text = draw(b, "A-E1", format=fmt).data.decode()
        assert "b's own reason" in text and "merger with ACME" not in text
        no_key_in(text)


def test_proofs_withhold_the_bytes_of_events_that_name_a_hidden_record(
    tenants: Tenants,
) -> None:
    # B-R1 rests on A-M1 and was made STALE by A-E1, both in proj-a
    proofs = tenants.b.prove("B-R1")
    types = [e.type for e in tenants.b.audit("B-R1").events]
    assert [p.leaf_data is None for p in proofs] == [
        t in ("Proposed", "MarkedStale") for t in types
    ]
    digest = tenants.led.digest()
    for proof in proofs:
        assert proof.verify() and proof.root == digest.root
        if proof.leaf_data is not None:
            assert_nothing_of_a(bytes.fromhex(proof.leaf_data).decode("latin-1"))
    # A caller granted in proj-a gets every event's bytes
    a_auditor = grant(tenants.led, "auditor-ab", {"proj-a": ["audit"], "proj-b": ["audit"]})
    assert all(p.leaf_data is not None and p.verify() for p in a_auditor.prove("B-R1"))


def test_a_withheld_events_leaf_hash_confirms_no_guess_of_its_bytes(tenants: Tenants) -> None:
    # B is shown the leaf hash of each event of B-R1 whose bytes name A's records.
    # Whoever guesses every field of such an event right (the hidden parent's id,
    # A's reason, who revoked) still cannot confirm it by hashing: the stored state
    # ends with a random salt that is withheld with it.
    withheld = [p for p in tenants.b.prove("B-R1") if p.leaf_data is None]
    assert len(withheld) == 2
    with tenants.led.engine.reading() as c:
        rows = {r[0]: r for r in tenants.led.engine.recorder.read_rows_after(c, 0, 10_000)}
    salts = set()
    for proof in withheld:
        position, oid, version, topic, state = rows[proof.position]
        fields = serialization.unpack(state)
        salt = fields.pop(serialization.SALT)
        assert type(salt) is bytes and len(salt) == 16
        salts.add(salt)
        perfect_guess = merkle.leaf_data(position, oid, version, topic, serialization.pack(fields))
        assert merkle.leaf_hash(perfect_guess).hex() != proof.leaf
        fields[serialization.SALT] = salt  # what the guess lacks, and only that
        with_salt = merkle.leaf_data(position, oid, version, topic, serialization.pack(fields))
        assert merkle.leaf_hash(with_salt).hex() == proof.leaf
    assert len(salts) == 2


def test_a_key_quoted_in_a_note_does_not_tell_whether_it_names_a_hidden_record(
    ledger: Ledger,
) -> None:
    a = grant(ledger, "tenant-a", {"proj-a": ALL})
    a_rev = grant(ledger, "tenant-a-reviewer", {"proj-a": ALL})
    b = grant(ledger, "tenant-b", {"proj-b": ALL})
    for rid in ("E1", "E2"):
        a.propose("proj-a", "k." + rid, 1, Kind.FACT, id=rid)
    b.propose("proj-b", "b.claim", 1, Kind.FACT, id="E1")  # stored as E1@@proj-b
    withheld = {}
    for guess in ("E1@@proj-b", "E2@@proj-b"):
        rid = a.propose("proj-a", "probe", guess, Kind.FACT)
        a_rev.accept(rid, note=f"see {guess}")
        withheld[guess] = [p.leaf_data is None for p in a_rev.prove(rid)]
    # The same answer whether or not proj-b holds a record keyed so
    assert withheld["E1@@proj-b"] == withheld["E2@@proj-b"]


def test_every_cause_is_kept_and_explain_names_only_those_still_blocking(
    ledger: Ledger,
) -> None:
    led = ledger
    s = grant(led, "owner", {"p": ALL})
    r = grant(led, "reviewer", {"p": ALL})
    s.capture("p", uri="https://x.test/1", content=b"1", id="E1")
    s.capture("p", uri="https://x.test/2", content=b"2", id="E2")
    s.capture("p", uri="https://x.test/3", content=b"3", id="E3")
    for rid in ("E1", "E2", "E3"):
        r.accept(rid)
    s.propose("p", "mid", 1, Kind.INFERENCE, parents=["E1"], id="M")
    r.accept("M")
    s.propose("p", "top", 2, Kind.INFERENCE, parents=["M", "E2"], id="T")
    r.accept("T")
    r.revoke("E1", reason="first")
    r.revoke("E2", reason="second")
    view = r.get("T")
    assert [(c.cause, c.reason, c.blocking) for c in view.stale_causes] == [
        ("E1", "first", True),
        ("E2", "second", True),
    ]
    assert r.explain("p", "top").entries[0].reasons == (
        "stale because E1 was revoked: first",
        "stale because E2 was revoked: second",
    )
    # M gets a new basis: E1 no longer rests under T, E2 still does
    r.revalidate("M", note="re-checked", parents=["E3"])
    assert [c.blocking for c in r.get("T").stale_causes] == [False, True]
    assert r.explain("p", "top").entries[0].reasons == ("stale because E2 was revoked: second",)
    # Revalidated on a new basis, T has no stale causes left
    r.revalidate("T", note="ok", parents=["M", "E3"])
    assert r.get("T").stale_causes == ()


def test_which_error_a_bad_batch_meets_does_not_tell_whether_an_id_is_taken(
    tenants: Tenants,
) -> None:
    led, b = tenants.led, tenants.b
    position, digest = led.position, led.views_digest()
    errors = []
    for rid in ("A-M1", "FREE-ID"):  # taken in a hidden scope; free
        with pytest.raises(LedgerError) as refused:
            b.propose_many(
                [
                    {"scope": "proj-b", "claim_key": "k", "value": 1, "kind": "fact", "id": rid},
                    {"scope": "proj-b", "claim_key": "k2", "value": 1, "kind": "bogus"},
                ]
            )
        errors.append((type(refused.value), str(refused.value)))
        with pytest.raises(LedgerError) as single:
            b.propose("proj-b", "k", 1, Kind.INFERENCE, parents=["NO-SUCH"], id=rid)
        errors.append((type(single.value), str(single.value).replace(rid, "ID")))
    assert errors[:2] == errors[2:]
    assert (led.position, led.views_digest()) == (position, digest)


def no_key_in(text: str) -> None:
    assert "@@" not in text, text


def test_an_id_taken_only_in_a_hidden_scope_is_free_to_propose_and_use(
    tenants: Tenants,
) -> None:
    led, a, b, bridge = tenants.led, tenants.a, tenants.b, tenants.bridge
    b_rev = grant(led, "tenant-b-approver", {"proj-b": ALL})
    a_before = repr(a.get("A-M1")), repr(a.audit("A-M1"))
    # A-E1 and A-M1 are taken in proj-a, which B cannot see: to B they are free
    assert b.capture("proj-b", uri="https://b.test/doc", content=b"b's", id="A-E1") == "A-E1"
    b_rev.accept("A-E1")
    assert b.propose("proj-b", "b.fact", 7, Kind.FACT, parents=["A-E1"], id="A-M1") == "A-M1"
    b_rev.accept("A-M1")
    b.propose("proj-b", "b.child", 8, Kind.INFERENCE, parents=["A-M1"], id="B-CHILD")
    b_rev.accept("B-CHILD")
    # A run that reads it observes it by the same name
    with b.run("b-task") as run:
        assert run.get("A-M1").id == "A-M1"
        run.observe("A-E1")
        run.propose("proj-b", "b.ran", 9, Kind.INFERENCE, parents=["B-CHILD"], id="B-RAN")
        assert run.reads == ("A-M1", "A-E1")
    assert b.get("B-RAN").observed == ("A-M1", "A-E1")
    assert tenants.bridge.get("B-RAN").observed == ("A-M1@@proj-b", "A-E1@@proj-b")
    view = b.get("A-M1")
    assert (view.id, view.scope, view.value, view.parents) == ("A-M1", "proj-b", 7, ("A-E1",))
    assert view.status == Status.ACCEPTED
    assert b.get("B-CHILD").parents == ("A-M1",)
    assert [r.id for r in b.read("proj-b", "b.fact").records] == ["A-M1"]
    ids = [v.id for v in b.records("proj-b")]
    assert {"A-E1", "A-M1", "B-CHILD"} <= set(ids)
    # paging after a record shown by its bare id does not show it again
    after = [v.id for v in b.records("proj-b", after="A-M1")]
    assert "A-M1" not in after and "A-E1" not in after
    sub = collect(b, "B-CHILD", ancestors=True)
    assert {n.id for n in sub.nodes} == {"A-E1", "A-M1", "B-CHILD"}
    assert {(e.parent, e.child) for e in sub.edges} == {("A-E1", "A-M1"), ("A-M1", "B-CHILD")}
    outputs = [
        repr(view),
        repr(b.explain("proj-b", "b.child")),
        repr(b.audit("A-M1")),
        repr(b.audit("B-CHILD")),
        repr(b.history()),
        repr(sub),
        draw(b, "B-CHILD", ancestors=True, format="dot").data.decode(),
        export_text(b, "prov-json", record="B-CHILD", ancestors=True),
    ]
    for text in outputs:
        no_key_in(text)
    preview = b_rev.preview_revoke("A-M1")
    assert (preview.root, preview.stale) == ("A-M1", ("B-CHILD", "B-RAN"))
    rev = b_rev.revoke("A-M1", reason="b withdrew it")
    assert (rev.root, rev.affected) == ("A-M1", ("A-M1", "B-CHILD", "B-RAN"))
    assert b.get("B-CHILD").cause == "A-M1"
    assert b.explain("proj-b", "b.child").entries[0].reasons == (
        "stale because A-M1 was revoked: b withdrew it",
    )
    for text in (
        repr(b.get("B-CHILD")),
        repr(b.history()),
        repr(b.audit("B-CHILD")),
        draw(b, "A-M1", descendants=True, format="mermaid").data.decode(),
    ):
        no_key_in(text)
    assert b.get("A-M1").status == Status.REVOKED
    # Refusals name it as B knows it
    for refused_call in (
        lambda: b_rev.accept("A-M1"),
        lambda: b_rev.revoke("A-M1", reason="again"),
        lambda: b_rev.preview_revoke("A-M1"),
        lambda: b.deliver("A-M1", recipient="ops@b.test"),
        lambda: b.propose("proj-b", "b.fact", 1, Kind.FACT, id="A-M1"),
        lambda: b.propose("proj-b", "b.x", 1, Kind.INFERENCE, parents=["A-M1"]),
    ):
        with pytest.raises(LedgerError) as refused:
            refused_call()
        assert "A-M1" in str(refused.value)
        no_key_in(str(refused.value))
    # A's records are untouched and A sees nothing of B's
    assert (repr(a.get("A-M1")), repr(a.audit("A-M1"))) == a_before
    # The bridge, granted in both, tells them apart by the qualified form
    assert bridge.get("A-M1").scope == "proj-a"
    both = bridge.get("A-M1@@proj-b")
    assert (both.id, both.scope, both.status) == ("A-M1@@proj-b", "proj-b", Status.REVOKED)
    assert bridge.get("B-CHILD").parents == ("A-M1@@proj-b",)
    assert bridge.get("B-CHILD").cause == "A-M1@@proj-b"
    # The log replays to the same views and verifies
    assert led.rebuild().matched
    assert led.verify().ok


def refusals(b: Session, rid: str) -> list[tuple[type, str]]:
    """What B meets proposing ``rid`` again (by each way in) and naming its
    qualified forms, with ``rid`` itself written as ID."""
    calls = (
        lambda: b.propose("proj-b", "k", 1, Kind.FACT, id=rid),
        lambda: b.propose_many(
            [{"scope": "proj-b", "claim_key": "k", "value": 1, "kind": "fact", "id": rid}]
        ),
        lambda: b.capture("proj-b", uri="https://b.test/again", content=b"y", id=rid),
        lambda: b.get(f"{rid}@@proj-b"),
        lambda: b.get(f"{rid}@@proj-a"),
        lambda: b.propose("proj-b", "k", 1, Kind.INFERENCE, parents=[f"{rid}@@proj-b"], id="B-NEW"),
        lambda: b.revoke(f"{rid}@@proj-b", reason="no"),
        lambda: b.revalidate(rid, note="n", parents=["NO-SUCH"]),
    )
    out: list[tuple[type, str]] = []
    for call in calls:
        with pytest.raises(LedgerError) as refused:
            call()
        out.append((type(refused.value), str(refused.value).replace(rid, "ID")))
    return out


def test_a_source_captured_under_an_id_taken_in_a_hidden_scope_can_be_captured_again(
    tenants: Tenants,
) -> None:
    # A-E1 is taken in proj-a, which B cannot see: B's capture of it is keyed
    # A-E1@@proj-b, and its re-capture must find it as B knows it, A-E1.
    led, b = tenants.led, tenants.b
    b_rev = grant(led, "tenant-b-approver", {"proj-b": ALL})
    uri = "https://b.test/collision"
    assert b.capture("proj-b", uri=uri, content=b"first", id="A-E1") == "A-E1"
    b_rev.accept("A-E1")

    again = b.capture("proj-b", uri=uri, content=b"second")
    b_rev.accept(again)

    assert b.get("A-E1").status == Status.SUPERSEDED
    assert [r.id for r in b.read("proj-b", b.get(again).claim_key).records] == [again]
    assert tenants.a.get("A-E1").status == Status.REVOKED  # A's own, untouched


def test_a_bundle_names_an_id_taken_in_a_hidden_scope_as_its_proposer_knows_it(
    tenants: Tenants, tmp_path: Path
) -> None:
    b = tenants.b
    b_rev = grant(tenants.led, "tenant-b-approver", {"proj-b": ALL})
    b.capture("proj-b", uri="https://b.test/doc", content=b"b's", id="A-E1")
    b_rev.accept("A-E1")
    b.propose("proj-b", "b.fact", 7, Kind.FACT, parents=["A-E1"], id="A-M1")
    b_rev.accept("A-M1")
    generate_key(tmp_path / "k")
    info = write_bundle(b, "A-M1", tmp_path / "k", tmp_path / "b.zip")
    assert (info.record, info.records) == ("A-M1", ("A-M1", "A-E1"))
    report = verify_bundle(tmp_path / "b.zip", tmp_path / "k.pub")
    assert report.ok, report.problem
    # The stored events hold the records' keys: their bytes are withheld, their
    # inclusion still proved
    assert report.withheld > 0
    with zipfile.ZipFile(tmp_path / "b.zip") as archive:
        for name in archive.namelist():
            assert b"@@" not in archive.read(name), name


def test_a_free_id_and_a_hidden_taken_id_behave_alike(tenants: Tenants) -> None:
    """Propose, propose_many and capture answer the same for an id taken in a
    scope the caller cannot see as for one never used, and so does naming a
    qualified form it was never shown."""
    led, b = tenants.led, tenants.b
    ways: dict[str, Callable[[str], object]] = {
        "propose": lambda rid: b.propose("proj-b", f"k.{rid}", 1, Kind.FACT, id=rid),
        "propose_many": lambda rid: b.propose_many(
            [{"scope": "proj-b", "claim_key": f"m.{rid}", "value": 1, "kind": "fact", "id": rid}]
        ),
        "capture": lambda rid: b.capture(
            "proj-b", uri=f"https://b.test/{rid}", content=b"x", id=rid
        ),
    }
    for way, taken, free in (
        ("propose", "A-M1", "FREE-M1"),
        ("propose_many", "A-X", "FREE-X"),
        ("capture", "A-E1", "FREE-E1"),
    ):
        answers = []
        for rid in (taken, free):
            got = ways[way](rid)
            view = b.get(rid)
            answers.append(
                (
                    str(got).replace(rid, "ID"),
                    refusals(b, rid),
                    (view.id.replace(rid, "ID"), view.scope, view.value),
                )
            )
        for hidden_taken, free_one in zip(*answers, strict=True):
            assert hidden_taken == free_one, way
    assert led.rebuild().matched
    assert led.verify().ok


#: CLI commands an outsider aims at a record id ({id}); each is run with a hidden id
#: and with one that does not exist, and must answer alike.
CLI_PROBES = (
    "get {id}",
    "audit {id}",
    "history --record {id}",
    "accept {id}",
    "reject {id} --reason no",
    "revoke {id} --reason no",
    "revalidate {id} --note ok",
    "deliver {id} --to me@evil.test",
    "graph {id} --ancestors --format dot",
    "propose --scope proj-b --claim k --kind inference --value 1 --parent {id}",
)


@pytest.mark.parametrize("probe", CLI_PROBES)
def test_the_command_line_answers_a_hidden_id_as_it_answers_a_free_one(
    tmp_path: Path, probe: str
) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with Ledger.open(url) as led:
        owner = grant(led, "owner-a", {"proj-a": ALL})
        grant(led, "reviewer-a", {"proj-a": ALL}).accept(
            owner.capture("proj-a", uri="https://a.test/s", content=b"s", id="SECRET-1")
        )
        grant(led, "outsider", {"proj-b": ALL})
        token = led.admin().issue_token("outsider")
        position, digest = led.position, led.views_digest()

    def run(rid: str) -> tuple[int, str]:
        env = {"PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": token}
        result = CliRunner().invoke(main, shlex.split(probe.format(id=rid)), env=env)
        return result.exit_code, result.output.replace(rid, "<ID>")

    hidden, free = run("SECRET-1"), run("NO-SUCH-1")
    assert hidden == free
    assert hidden[0] == 1 and "proj-a" not in hidden[1]
    with Ledger.open(url) as led:
        assert (led.position, led.views_digest()) == (position, digest)


def test_a_record_on_many_records_hides_exactly_those_in_scopes_not_granted(
    ledger: Ledger,
) -> None:
    """A record resting on records of its own scope, of a scope every reader
    here sees and of one only some see: a reader granted all three sees every
    dependency in order; one without the third sees one placeholder where the
    first of those stood, in a read and in ``get`` (a read and ``get`` decide this
    from the dependencies' scopes first, then id by id only where one is hidden)."""
    scopes = ("own", "open", "closed")
    bridge = grant(ledger, "bridge", {s: ["read", "propose"] for s in scopes})
    approver = grant(ledger, "approver", {s: ["read", "approve"] for s in scopes})
    partial = grant(ledger, "partial", {"own": ["read"], "open": ["read"]})
    deps = []
    for scope in ("own", "closed", "open"):
        for i in range(40):
            rid = bridge.propose(scope, f"f{i}", i, Kind.FACT, id=f"{scope}-{i:02d}")
            approver.accept(rid)
            deps.append(rid)
    top = bridge.propose("own", "sum", 1, Kind.INFERENCE, parents=deps, id="SUM")
    approver.accept(top)
    for session in (approver, bridge):
        assert session.read("own", "sum").records[0].parents == tuple(deps)
        assert session.get("SUM").parents == tuple(deps)
    shown = (*deps[:40], HIDDEN, *deps[80:])
    assert partial.read("own", "sum").records[0].parents == shown
    assert partial.get("SUM").parents == shown


#: What a principal of proj-b can aim at an id (``{id}``) it cannot see or that was
#: never used: each must run the same statements for both.
AIMED: dict[str, Callable[[Session, str], object]] = {
    "get": lambda b, rid: b.get(rid),
    "audit": lambda b, rid: b.audit(rid),
    "accept": lambda b, rid: b.accept(rid),
    "propose parents": lambda b, rid: b.propose("proj-b", "b.x", 1, Kind.FACT, parents=[rid]),
    "propose supersedes": lambda b, rid: b.propose("proj-b", "b.x", 1, Kind.FACT, supersedes=rid),
    "propose_many parents": lambda b, rid: b.propose_many(
        [{"scope": "proj-b", "claim_key": "b.x", "value": 1, "kind": "fact", "parents": [rid]}]
    ),
}


@pytest.mark.parametrize("aimed", list(AIMED))
def test_aiming_at_a_hidden_id_runs_the_statements_a_free_id_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aimed: str
) -> None:
    # Time must not tell an id taken in a hidden scope from one never used: on
    # PostgreSQL each statement is a round trip. Both run the same statements.
    ran: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        con = connect(*args, **kwargs)
        con.set_trace_callback(ran.append)
        return con

    monkeypatch.setattr(sqlite3, "connect", traced)
    with Ledger.open(f"sqlite:///{tmp_path / 'timing.db'}") as led:
        b = grant(led, "tenant-b", {"proj-b": ALL})
        a = grant(led, "tenant-a", {"proj-a": ALL})
        a.propose("proj-a", "a.secret", 1, Kind.FACT, id="A-SECRET")
        statements: dict[str, list[str]] = {}
        # (the first command of a session reads what later ones find cached)
        for rid in ("WARM-UP", "A-SECRET", "NEVER-USED"):
            ran.clear()
            with pytest.raises(LedgerError) as refused:
                AIMED[aimed](b, rid)
            statements[rid] = [s.replace(rid, "ID") for s in ran]
            assert rid in str(refused.value)
    assert statements["A-SECRET"] == statements["NEVER-USED"]
