"""A proposal naming several bad parents is refused once, naming every one of them
(an agent fixing its input needs one round trip, not one per parent), with one
error whose class and ``dependency`` follow a fixed precedence; a parent hidden
from the caller reads exactly as an unknown one; a taken id is reported before a
record naming itself as its parent. Every refusal leaves the log and the views
unchanged. Each test runs on every backend (memory, SQLite, PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from starlette.testclient import TestClient

from ledger import Kind, Ledger, Session
from ledger.errors import (
    CycleError,
    DuplicateRecordError,
    InvalidParentError,
    LedgerError,
)
from ledger.rules import NAMED_AT_MOST
from ledger.serve import create_app
from tests.serve_support import Api, error_of

UNKNOWN = "are unknown or not readable by 'agent-1'"


@dataclass
class Parents:
    """``A1`` ACCEPTED, ``C1`` CANDIDATE, ``R1`` REVOKED ("wrong"), ``S1`` REVOKED
    ("gone") so ``D1`` (resting on it) is STALE, ``E1`` CANDIDATE, all in
    ``proj-a``; ``H1`` ACCEPTED in ``proj-h``, where the agent holds no grant."""

    ledger: Ledger
    agent: Session
    reviewer: Session
    hidden: Session  # proposes in proj-h only
    tokens: dict[str, str]


def _principals(ledger: Ledger) -> tuple[dict[str, str], Session, Session, Session]:
    """Tokens and sessions of agent-1 (proposes in proj-a), reviewer (approves in
    proj-a and proj-h) and hboss (proposes in proj-h, hidden from agent-1)."""
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
    admin.grant("hboss", scope="proj-h", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-h", roles=["approve", "read"])
    tokens = {name: admin.issue_token(name) for name in ("agent-1", "reviewer", "hboss")}
    agent, reviewer, hidden = (ledger.authenticate(tokens[n]) for n in tokens)
    return tokens, agent, reviewer, hidden


@pytest.fixture
def parents(ledger: Ledger) -> Parents:
    tokens, agent, reviewer, hidden = _principals(ledger)
    for rid in ("A1", "C1", "R1", "S1", "E1"):
        agent.propose(scope="proj-a", claim_key=rid.lower(), value=1, kind=Kind.FACT, id=rid)
    agent.propose(
        scope="proj-a", claim_key="d1", value=1, kind=Kind.INFERENCE, parents=["S1"], id="D1"
    )
    for rid in ("A1", "R1", "S1", "D1"):
        reviewer.accept(rid)
    reviewer.revoke("S1", reason="gone")
    reviewer.revoke("R1", reason="wrong")
    hidden.propose(scope="proj-h", claim_key="h", value=1, kind=Kind.FACT, id="H1")
    reviewer.accept("H1")
    return Parents(ledger, agent, reviewer, hidden, tokens)


def _refused(p: Parents, act: Callable[[], object]) -> InvalidParentError:
    """The refusal ``act`` meets, checked to leave the log and the views unchanged."""
    position, digest = p.ledger.position, p.ledger.views_digest()
    with pytest.raises(LedgerError) as info:
        act()
    assert p.ledger.position == position
    assert p.ledger.views_digest() == digest
    assert isinstance(info.value, InvalidParentError), type(info.value)
    return info.value


def _propose(p: Parents, parents: list[str], **kwargs: Any) -> Callable[[], object]:
    kwargs.setdefault("id", "X1")
    return lambda: p.agent.propose(
        scope="proj-a", claim_key="x", value=1, kind=Kind.INFERENCE, parents=parents, **kwargs
    )


def test_several_unknown_parents_are_all_named_in_one_refusal(parents: Parents) -> None:
    # Given a proposal naming a good parent and three that do not exist
    # When it is proposed, alone, without an id, or in a batch
    one = _refused(parents, _propose(parents, ["A1", "U1", "U2", "U3"]))
    drawn = _refused(parents, _propose(parents, ["U1", "U2"], id=None))
    batch = _refused(
        parents,
        lambda: parents.agent.propose_many(
            [
                {"scope": "proj-a", "claim_key": "y", "value": 1, "kind": "fact", "id": "Y1"},
                {
                    "scope": "proj-a",
                    "claim_key": "x",
                    "value": 1,
                    "kind": "inference",
                    "parents": ["U1", "Y1", "U2"],
                    "id": "X1",
                },
            ]
        ),
    )

    # Then each refusal names every bad parent in the order given, none of the good
    assert str(one) == f"parents 'U1', 'U2' and 'U3' of 'X1' {UNKNOWN}"
    assert str(drawn) == f"parents 'U1' and 'U2' of the new record {UNKNOWN}"
    assert str(batch) == f"propose_many item 1: parents 'U1' and 'U2' of 'X1' {UNKNOWN}"
    # And none of them is a state that may change: bad input
    assert (one.dependency, drawn.dependency, batch.dependency) == (None, None, None)
    assert type(one) is type(drawn) is type(batch) is InvalidParentError


def test_a_single_bad_parent_is_refused_as_before(parents: Parents) -> None:
    unknown = _refused(parents, _propose(parents, ["A1", "U1"]))
    hidden = _refused(parents, _propose(parents, ["H1", "A1"]))
    stale = _refused(parents, _propose(parents, ["D1"]))
    revoked = _refused(parents, _propose(parents, ["R1", "C1"]))
    assert str(unknown) == "parent 'U1' of 'X1' is unknown or not readable by 'agent-1'"
    assert str(hidden) == "parent 'H1' of 'X1' is unknown or not readable by 'agent-1'"
    assert str(stale) == "parent 'D1' of 'X1' is STALE (S1 was revoked: gone)"
    assert str(revoked) == "parent 'R1' of 'X1' is REVOKED (wrong)"
    assert [e.dependency for e in (unknown, hidden, stale, revoked)] == [None, None, "D1", "R1"]


def test_a_hidden_parent_among_several_reads_exactly_as_an_unknown_one(ledger: Ledger) -> None:
    # Given parents that do not exist yet (G1, G2) among unknown and revoked ones
    _, agent, reviewer, hidden = _principals(ledger)
    agent.propose(scope="proj-a", claim_key="r", value=1, kind=Kind.FACT, id="R1")
    reviewer.accept("R1")
    reviewer.revoke("R1", reason="wrong")
    named = (["U1", "G1", "U2"], ["G1", "G2"], ["R1", "G2", "U1", "G1"])

    def refusals() -> list[tuple[type[InvalidParentError], str, str | None]]:
        out = []
        for parents in named:
            position, digest = ledger.position, ledger.views_digest()
            with pytest.raises(InvalidParentError) as info:
                agent.propose(
                    scope="proj-a", claim_key="x", value=1, kind="inference", parents=parents
                )
            assert (ledger.position, ledger.views_digest()) == (position, digest)
            out.append((type(info.value), str(info.value), info.value.dependency))
        return out

    absent = refusals()

    # When G1 and G2 are proposed, one accepted, in a scope the agent cannot see
    hidden.propose(scope="proj-h", claim_key="g1", value=1, kind=Kind.FACT, id="G1")
    hidden.propose(scope="proj-h", claim_key="g2", value=1, kind=Kind.FACT, id="G2")
    reviewer.accept("G1")

    # Then every refusal is the same, byte for byte, class and dependency included
    assert refusals() == absent
    assert absent[0][1] == f"parents 'U1', 'G1' and 'U2' of the new record {UNKNOWN}"
    assert absent[2][1] == (
        f"parents 'G2', 'U1' and 'G1' of the new record {UNKNOWN}; "
        "parent 'R1' of the new record is REVOKED (wrong)"
    )


def test_unknown_parents_take_precedence_over_unusable_ones(parents: Parents) -> None:
    # Given parents that are unknown, hidden, REVOKED and STALE, in any order
    first_revoked = _refused(parents, _propose(parents, ["R1", "U1", "D1", "H1"]))
    first_unknown = _refused(parents, _propose(parents, ["U1", "D1", "H1", "R1"]))

    # Then all are named: the unknown or hidden ones first (in the order given), then
    # each unusable one with its status; with any unknown, it is bad input (no
    # dependency), whatever comes first
    assert str(first_revoked) == (
        f"parents 'U1' and 'H1' of 'X1' {UNKNOWN}; parent 'R1' of 'X1' is REVOKED "
        "(wrong); parent 'D1' of 'X1' is STALE (S1 was revoked: gone)"
    )
    assert str(first_unknown) == (
        f"parents 'U1' and 'H1' of 'X1' {UNKNOWN}; parent 'D1' of 'X1' is STALE "
        "(S1 was revoked: gone); parent 'R1' of 'X1' is REVOKED (wrong)"
    )
    assert (first_revoked.dependency, first_unknown.dependency) == (None, None)

    # And one unknown among unusable ones is told as alone
    one = _refused(parents, _propose(parents, ["D1", "U1"]))
    assert str(one) == (
        "parent 'U1' of 'X1' is unknown or not readable by 'agent-1'; "
        "parent 'D1' of 'X1' is STALE (S1 was revoked: gone)"
    )
    assert one.dependency is None


def test_only_unusable_parents_name_the_first_given_as_the_dependency(parents: Parents) -> None:
    stale_first = _refused(parents, _propose(parents, ["A1", "D1", "R1"]))
    revoked_first = _refused(parents, _propose(parents, ["R1", "C1", "D1"]))
    assert str(stale_first) == (
        "parent 'D1' of 'X1' is STALE (S1 was revoked: gone); "
        "parent 'R1' of 'X1' is REVOKED (wrong)"
    )
    assert (stale_first.dependency, revoked_first.dependency) == ("D1", "R1")
    assert type(stale_first) is type(revoked_first) is InvalidParentError


def test_a_long_list_of_bad_parents_names_the_first_and_counts_the_rest(
    parents: Parents,
) -> None:
    many = [f"U{i}" for i in range(1, NAMED_AT_MOST + 6)]
    refused = _refused(parents, _propose(parents, ["R1", *many]))
    text = str(refused)
    # The first NAMED_AT_MOST bad parents in the order given: R1 and U1..U19
    named = ", ".join(repr(f"U{i}") for i in range(1, NAMED_AT_MOST - 1))
    assert text == (
        f"parents {named} and 'U{NAMED_AT_MOST - 1}' of 'X1' {UNKNOWN}; "
        "parent 'R1' of 'X1' is REVOKED (wrong); "
        "6 more parents of 'X1' are unknown, not readable or not usable"
    )
    assert f"'U{NAMED_AT_MOST}'" not in text
    assert refused.dependency is None


def test_a_taken_id_is_refused_before_a_record_naming_itself_as_parent(
    parents: Parents,
) -> None:
    # Given E1 exists where the agent sees it
    position, digest = parents.ledger.position, parents.ledger.views_digest()

    # When a proposal takes its id and names it as its own parent, alone or in a batch
    with pytest.raises(LedgerError) as alone:
        parents.agent.propose(
            scope="proj-a", claim_key="e", value=2, kind="inference", parents=["E1"], id="E1"
        )
    item = {"scope": "proj-a", "claim_key": "e", "value": 2, "kind": "inference", "id": "E1"}
    with pytest.raises(LedgerError) as batch:
        parents.agent.propose_many([{**item, "parents": ["E1", "U1"]}])

    # Then the taken id is what is refused
    assert type(alone.value) is DuplicateRecordError, repr(alone.value)
    assert str(alone.value) == "record 'E1' already exists"
    assert type(batch.value) is DuplicateRecordError, repr(batch.value)
    assert str(batch.value) == "propose_many item 0: record 'E1' already exists"
    assert (parents.ledger.position, parents.ledger.views_digest()) == (position, digest)


def test_an_id_taken_only_where_the_caller_cannot_see_is_a_cycle_like_a_free_one(
    parents: Parents,
) -> None:
    # H1 is taken in proj-h, hidden from the agent; N1 is taken nowhere
    told = []
    for rid in ("H1", "N1"):
        position, digest = parents.ledger.position, parents.ledger.views_digest()
        with pytest.raises(LedgerError) as info:
            parents.agent.propose(
                scope="proj-a", claim_key="n", value=1, kind="inference", parents=[rid], id=rid
            )
        assert (parents.ledger.position, parents.ledger.views_digest()) == (position, digest)
        assert type(info.value) is CycleError, repr(info.value)
        told.append(str(info.value).replace(rid, "<id>"))
    assert told[0] == told[1] == "record '<id>' cannot be its own parent"


def test_naming_itself_in_a_scope_without_a_grant_tells_nothing_of_what_is_taken_there(
    parents: Parents,
) -> None:
    # H1, taken in proj-h, is proposed again in proj-z (stored as H1@@proj-z), where
    # the agent holds no grant, as it holds none in proj-q, which holds nothing
    admin = parents.ledger.admin()
    admin.grant("zed", scope="proj-z", roles=["propose", "read"])
    zed = parents.ledger.authenticate(admin.issue_token("zed"))
    zed.propose(scope="proj-z", claim_key="h", value=1, kind=Kind.FACT, id="H1")
    told = []
    for scope in ("proj-z", "proj-q"):
        position, digest = parents.ledger.position, parents.ledger.views_digest()
        with pytest.raises(LedgerError) as info:
            parents.agent.propose(
                scope=scope, claim_key="n", value=1, kind="inference", parents=["H1"], id="H1"
            )
        assert (parents.ledger.position, parents.ledger.views_digest()) == (position, digest)
        told.append((type(info.value).__name__, str(info.value).replace(scope, "<scope>")))
    assert told[0] == told[1]
    assert told[0][0] == "AccessDeniedError"


def test_over_http_unknown_parents_are_422_and_only_unusable_ones_409(parents: Parents) -> None:
    app = create_app(parents.ledger, mcp_factory=None, max_body_bytes=64 * 1024)
    body = {"scope": "proj-a", "claim_key": "x", "value": 1, "kind": "inference", "id": "X1"}
    with TestClient(app) as client:
        agent = Api(client, parents.tokens["agent-1"])
        position = parents.ledger.position
        # An unknown parent anywhere in the list is the request's mistake, whatever
        # the order: 422 naming the field and every bad parent
        for given in (["R1", "U1"], ["U1", "R1"]):
            r = agent.post("/records", json={**body, "parents": given})
            error = error_of(r)
            assert (r.status_code, error["type"], error["field"]) == (
                422,
                "InvalidParentError",
                "parents",
            ), r.text
            assert "'U1'" in error["message"] and "'R1'" in error["message"]
        # Only unusable ones: a conflict (the same request may succeed later)
        r = agent.post("/records", json={**body, "parents": ["D1", "R1"]})
        assert (r.status_code, error_of(r)["field"]) == (409, "parents"), r.text
        assert "'D1'" in error_of(r)["message"] and "'R1'" in error_of(r)["message"]
        assert parents.ledger.position == position


def test_two_names_of_one_parent_do_not_shift_the_name_of_a_bad_one(ledger: Ledger) -> None:
    # Given X taken in a scope the agent cannot see, and a batch proposing X in
    # proj-a (stored as X@@proj-a) then a record naming it twice and an unknown U1
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("hboss", scope="proj-h", roles=["propose", "read"])
    hidden = ledger.authenticate(admin.issue_token("hboss"))
    agent = ledger.authenticate(admin.issue_token("agent-1"))
    hidden.propose(scope="proj-h", claim_key="x", value=1, kind=Kind.FACT, id="X")
    position, digest = ledger.position, ledger.views_digest()
    with pytest.raises(InvalidParentError) as info:
        agent.propose_many(
            [
                {"scope": "proj-a", "claim_key": "x", "value": 1, "kind": "fact", "id": "X"},
                {
                    "scope": "proj-a",
                    "claim_key": "y",
                    "value": 1,
                    "kind": "inference",
                    "id": "Y",
                    "parents": ["X", "X@@proj-a", "U1"],
                },
            ]
        )
    # Then the refusal names U1, not the good parent's second name
    assert str(info.value) == (
        "propose_many item 1: parent 'U1' of 'Y' is unknown or not readable by 'agent-1'"
    )
    assert (ledger.position, ledger.views_digest()) == (position, digest)


def test_revalidating_on_a_new_basis_names_every_bad_parent(parents: Parents) -> None:
    refused = _refused(
        parents,
        lambda: parents.reviewer.revalidate("D1", note="n", parents=["A1", "U1", "R1", "U2"]),
    )
    assert str(refused) == (
        "parents 'U1' and 'U2' of 'D1' are unknown or not readable by 'reviewer'; "
        "parent 'R1' of 'D1' is REVOKED (wrong)"
    )
    assert refused.dependency is None


def test_a_batch_item_without_an_id_is_named_the_new_record_not_a_drawn_id(
    parents: Parents,
) -> None:
    item = {"scope": "proj-a", "claim_key": "x", "value": 1, "kind": "inference"}
    refused = _refused(
        parents, lambda: parents.agent.propose_many([{**item, "parents": ["U1", "U2"]}])
    )
    assert str(refused) == (
        "propose_many item 0: parents 'U1' and 'U2' of the new record are unknown or not "
        "readable by 'agent-1'"
    )
