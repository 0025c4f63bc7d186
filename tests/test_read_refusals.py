"""A read's statement asks whether the token is valid and whether its subject
holds ``read`` in the scope: every way that answer changes between two reads
(a token revoked or expired, a grant withdrawn, a role only in another scope,
or another role only) refuses the read, the explanation, the as-of read and
the read in a run alike."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from ledger import Kind, Ledger, Outcome, Session
from ledger.errors import AccessDeniedError, AuthenticationError

from .conftest import Clock


def asks(session: Session, scope: str = "proj-a") -> list[Callable[[], object]]:
    """The questions about a claim with one ACCEPTED record: a read (with and
    without a context), an explanation, and a read as of a past position."""
    return [
        lambda: session.read(scope, "k"),
        lambda: session.read(scope, "k", context={"region": "eu"}),
        lambda: session.explain(scope, "k"),
        lambda: session.as_of(position=2).read(scope, "k"),
    ]


def test_a_read_is_refused_once_its_token_or_grant_no_longer_allows_it(
    ledger: Ledger, clock: Clock
) -> None:
    # Given a fact read by a reader, and a principal that reads only proj-b and
    # one that only approves in proj-a
    admin = ledger.admin()
    admin.grant("agent", scope="proj-a", roles=["propose", "read"])
    admin.grant("checker", scope="proj-a", roles=["approve", "read"])
    admin.grant("reader", scope="proj-a", roles=["read", "audit"])
    admin.grant("elsewhere", scope="proj-b", roles=["read"])
    admin.grant("elsewhere", scope="proj-a", roles=["audit", "approve"])
    agent = ledger.authenticate(admin.issue_token("agent"))
    agent.propose("proj-a", "k", 1, Kind.FACT, id="F1")
    ledger.authenticate(admin.issue_token("checker")).accept("F1")
    reader_token = admin.issue_token("reader")
    reader = ledger.authenticate(reader_token)
    short = ledger.authenticate(
        admin.issue_token("reader", expires=clock.now + timedelta(minutes=5))
    )
    elsewhere = ledger.authenticate(admin.issue_token("elsewhere"))
    for ask in asks(reader) + asks(short):
        ask()
    assert reader.read("proj-a", "k").outcome == Outcome.FOUND

    # Then a role held only in another scope, or other roles only, is refused
    for ask in asks(elsewhere):
        with pytest.raises(AccessDeniedError):
            ask()
    # and once the token expired, every read of it is refused
    clock.advance(minutes=6)
    for ask in asks(short):
        with pytest.raises(AuthenticationError):
            ask()
    # and once the reader's read grant is withdrawn, every read is refused
    admin.revoke_grant("reader", scope="proj-a", roles=["read"])
    for ask in asks(reader):
        with pytest.raises(AccessDeniedError):
            ask()
    with pytest.raises(AccessDeniedError), reader.run("task") as run:
        run.read("proj-a", "k")
    # and granted again, then the token revoked: refused as unauthenticated
    admin.grant("reader", scope="proj-a", roles=["read"])
    assert reader.read("proj-a", "k").records[0].id == "F1"
    admin.revoke_token(reader_token)
    for ask in asks(reader):
        with pytest.raises(AuthenticationError):
            ask()


def test_a_read_shows_each_record_as_get_shows_it_to_every_principal(ledger: Ledger) -> None:
    # Given the id x taken in proj-a and proj-b (keyed x@@proj-b), a record of
    # proj-b resting on both, accepted with a note naming the second, and a new
    # version of it; and readers of proj-a, of proj-b and of both
    admin = ledger.admin()
    for scope in ("proj-a", "proj-b"):
        admin.grant("writer", scope=scope, roles=["propose", "read"])
        admin.grant("checker", scope=scope, roles=["approve", "read"])
        admin.grant(f"reader-{scope}", scope=scope, roles=["read"])
        admin.grant("both", scope=scope, roles=["read"])
    admin.grant("writer-b", scope="proj-b", roles=["propose", "read"])
    writer = ledger.authenticate(admin.issue_token("writer"))
    checker = ledger.authenticate(admin.issue_token("checker"))
    writer.propose("proj-a", "x", 1, Kind.FACT, id="x")
    checker.accept("x")
    # free to a writer who cannot see proj-a: keyed x@@proj-b
    ledger.authenticate(admin.issue_token("writer-b")).propose("proj-b", "x", 2, Kind.FACT, id="x")
    checker.accept("x@@proj-b")
    writer.propose("proj-b", "c", 3, Kind.INFERENCE, ["x", "x@@proj-b"], id="c1")
    checker.accept("c1", note="checked against x@@proj-b")
    writer.propose("proj-b", "c", 4, Kind.INFERENCE, ["x@@proj-b"], id="c2", supersedes="c1")
    checker.accept("c2")
    writer.propose("proj-b", "d", 5, Kind.INFERENCE, ["x"], id="d1")
    checker.accept("d1")
    readers = {
        name: ledger.authenticate(admin.issue_token(name))
        for name in ("reader-proj-a", "reader-proj-b", "both")
    }

    # Then every record a read shows is the record get shows, field for field
    # (placeholders and qualified ids alike), now and as of a position
    position = ledger.position
    shown = 0
    for name, reader in readers.items():
        for session in (reader, reader.as_of(position=position)):
            for scope, claim in (
                ("proj-a", "x"),
                ("proj-b", "x"),
                ("proj-b", "c"),
                ("proj-b", "d"),
            ):
                if scope == "proj-a" and name == "reader-proj-b":
                    continue
                if scope == "proj-b" and name == "reader-proj-a":
                    continue
                for record in session.read(scope, claim).records:
                    assert record == session.get(record.id), (name, scope, claim)
                    shown += 1
    assert shown == 16
    assert readers["reader-proj-b"].read("proj-b", "d").records[0].parents == ("<hidden>",)
