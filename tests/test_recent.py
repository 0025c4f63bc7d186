"""What a ledger remembers of its own writes (``Engine.recent``) never outlives a
write by anyone else.

A command skips the tracking query, its aggregate's events and its token's row
when nothing but this ledger wrote since its previous write transaction. These
tests write through a second ``Ledger`` on the same database (another
connection, as another process would) between two commands of the first, and
check that the first decides on what is stored, not on what it remembers.
Runs on an SQLite file and on PostgreSQL (which always reads everything again).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledger import Kind, Ledger, Status
from ledger.errors import AccessDeniedError, AuthenticationError, InvalidTransitionError


@pytest.fixture
def pair(shared_url: str) -> Iterator[tuple[Ledger, Ledger, dict[str, str]]]:
    """Two ledgers on one database, and tokens of a proposer and an approver; the
    first has proposed and accepted record ``warm``, so it remembers its writes."""
    first = Ledger.open(shared_url)
    admin = first.admin()
    admin.grant("proposer", "s", ["propose", "read"])
    admin.grant("approver", "s", ["approve", "read", "audit"])
    tokens = {
        "proposer": admin.issue_token("proposer"),
        "approver": admin.issue_token("approver"),
    }
    second = Ledger.open(shared_url)
    try:
        first.authenticate(tokens["proposer"]).propose("s", "k", "warm", Kind.FACT, id="warm")
        first.authenticate(tokens["approver"]).accept("warm")
        yield first, second, tokens
    finally:
        second.close()
        first.close()


def test_a_record_changed_elsewhere_is_decided_on_as_stored(
    pair: tuple[Ledger, Ledger, dict[str, str]],
) -> None:
    first, second, tokens = pair
    first.authenticate(tokens["proposer"]).propose("s", "k", "v", Kind.FACT, id="r1")
    # The other connection rejects r1: the first ledger remembers it as a candidate.
    second.authenticate(tokens["approver"]).reject("r1", "wrong")
    with pytest.raises(InvalidTransitionError, match="REJECTED"):
        first.authenticate(tokens["approver"]).accept("r1")
    assert first.authenticate(tokens["approver"]).get("r1").status is Status.REJECTED
    # And the first ledger's next commands go on from what is stored.
    first.authenticate(tokens["proposer"]).propose("s", "k", "w", Kind.FACT, id="r2")
    second.authenticate(tokens["approver"]).accept("r2")
    revocation = first.authenticate(tokens["approver"]).revoke("r2", "gone")
    assert revocation.root == "r2"
    audit = first.authenticate(tokens["approver"]).audit("r2")
    assert [e.type for e in audit.events][-3:] == ["Proposed", "Accepted", "Revoked"]
    assert first.rebuild().matched


def test_a_token_revoked_elsewhere_is_refused_at_the_next_command(
    pair: tuple[Ledger, Ledger, dict[str, str]],
) -> None:
    first, second, tokens = pair
    proposer = first.authenticate(tokens["proposer"])
    proposer.propose("s", "k", "v", Kind.FACT, id="r1")
    second.admin().revoke_token(tokens["proposer"])
    with pytest.raises(AuthenticationError, match="revoked"):
        proposer.propose("s", "k", "v", Kind.FACT, id="r2")
    assert [r.id for r in first.authenticate(tokens["approver"]).records("s")] == [
        "r1",
        "warm",
    ]


def test_a_grant_revoked_elsewhere_is_refused_at_the_next_command(
    pair: tuple[Ledger, Ledger, dict[str, str]],
) -> None:
    first, second, tokens = pair
    first.authenticate(tokens["proposer"]).propose("s", "k", "v", Kind.FACT, id="r1")
    second.admin().revoke_grant("approver", "s", ["approve"])
    with pytest.raises(AccessDeniedError):
        first.authenticate(tokens["approver"]).accept("r1")
    assert first.authenticate(tokens["proposer"]).get("r1").status is Status.CANDIDATE


def test_a_token_revoked_through_the_same_ledger_is_refused_at_once(
    pair: tuple[Ledger, Ledger, dict[str, str]],
) -> None:
    first, _, tokens = pair
    approver = first.authenticate(tokens["approver"])
    first.admin().revoke_grant("approver", "s", ["approve"])
    first.authenticate(tokens["proposer"]).propose("s", "k", "v", Kind.FACT, id="r1")
    with pytest.raises(AccessDeniedError):
        approver.accept("r1")
    first.admin().revoke_token(tokens["proposer"])
    with pytest.raises(AuthenticationError, match="revoked"):
        first.authenticate(tokens["proposer"]).propose("s", "k", "v", Kind.FACT, id="r2")


def test_a_refused_command_leaves_nothing_remembered_that_is_not_stored(
    pair: tuple[Ledger, Ledger, dict[str, str]],
) -> None:
    first, second, tokens = pair
    proposer = first.authenticate(tokens["proposer"])
    approver = first.authenticate(tokens["approver"])
    proposer.propose("s", "k", "v", Kind.FACT, id="r1")
    with pytest.raises(InvalidTransitionError):
        approver.accept("warm")  # already accepted: refused after loading it
    approver.accept("r1")
    approver.revoke("warm", "gone")
    # Every event is where both connections see it, in order, once.
    for led in (first, second):
        reader = led.authenticate(tokens["approver"])
        assert reader.get("warm").status is Status.REVOKED
        assert reader.get("r1").status is Status.ACCEPTED
        assert [e.type for e in reader.audit("warm").events] == [
            "Proposed",
            "Accepted",
            "Revoked",
        ]
    assert first.verify().ok
    assert second.rebuild().matched
