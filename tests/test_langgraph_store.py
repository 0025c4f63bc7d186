"""LedgerStore: LangGraph's BaseStore over the ledger, on every backend.

The store behaviours are the ones LangGraph's own SQLite and PostgreSQL stores are
held to (results in batch order, get/put/search/list_namespaces, namespace edge
cases, async batching), plus what only a ledger-backed store does: approval,
supersession, revocation and provenance inside a graph.
"""

from __future__ import annotations

import asyncio
import re
import threading
import unicodedata
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
)

from ledger import Kind, Ledger, Outcome, Session, Status, Validity
from ledger.errors import (
    AccessDeniedError,
    InvalidInputError,
    InvalidParentError,
    InvalidValueError,
    LedgerError,
    ValueTooLargeError,
)
from ledger.integrations.langgraph import (
    LedgerStore,
    MemoryConflictError,
    NamespaceLabelError,
    NoThreadWarning,
    UnsupportedStoreOperationError,
    claim_key_of,
    parse_claim_key,
    run_id_of,
)
from ledger.validation import ID_PATTERN, check_text

#: Scopes the agent and the reviewer hold roles in (first namespace labels).
SCOPES = ("test", "prod", "docs", "items", "flags", "foo", "foobar", "foo2", "uid", "proj-a")


@dataclass
class Principals:
    """The ledger, the agent's and the reviewer's tokens and sessions."""

    ledger: Ledger
    agent_token: str
    reviewer_token: str
    agent: Session
    reviewer: Session


@pytest.fixture
def principals(ledger: Ledger) -> Principals:
    admin = ledger.admin()
    for scope in SCOPES:
        admin.grant("agent", scope, ["propose", "read"])
        admin.grant("reviewer", scope, ["approve", "read", "audit"])
    admin.grant("outsider", "secret", ["propose", "read", "approve"])
    agent_token = admin.issue_token("agent")
    reviewer_token = admin.issue_token("reviewer")
    return Principals(
        ledger=ledger,
        agent_token=agent_token,
        reviewer_token=reviewer_token,
        agent=ledger.authenticate(agent_token),
        reviewer=ledger.authenticate(reviewer_token),
    )


@pytest.fixture
def store(principals: Principals) -> Iterator[LedgerStore]:
    """Puts accepted at once by the reviewer (the convenience policy)."""
    with LedgerStore(
        principals.ledger, token=principals.agent_token, approver_token=principals.reviewer_token
    ) as s:
        yield s


@pytest.fixture
def review_store(principals: Principals) -> Iterator[LedgerStore]:
    """Puts stay candidates until the reviewer accepts them."""
    with LedgerStore(principals.ledger, token=principals.agent_token) as s:
        yield s


def current_id(session: Session, scope: str, claim_key: str) -> str:
    """The id of the one usable record of a claim."""
    result = session.read(scope, claim_key)
    assert result.outcome == Outcome.FOUND, result
    assert len(result.records) == 1
    return result.records[0].id


# -- batches ---------------------------------------------------------------------------


def test_batch_answers_each_operation_in_its_place(store: LedgerStore) -> None:
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})

    results = store.batch(
        [
            GetOp(namespace=("test", "foo"), key="key1"),
            PutOp(namespace=("test", "bar"), key="key2", value={"data": "value2"}),
            SearchOp(namespace_prefix=("test",), filter={"data": "value1"}, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            GetOp(namespace=("test",), key="key3"),
        ]
    )

    assert len(results) == 5
    first = results[0]
    assert isinstance(first, Item)
    assert (first.namespace, first.key, first.value) == (
        ("test", "foo"),
        "key1",
        {"data": "value1"},
    )
    assert results[1] is None
    found = results[2]
    assert isinstance(found, list)
    assert [(i.namespace, i.key) for i in found] == [(("test", "foo"), "key1")]
    listed = results[3]
    assert isinstance(listed, list)
    assert ("test", "foo") in listed and ("test", "bar") in listed
    assert results[4] is None

    reordered = store.batch(
        [
            SearchOp(namespace_prefix=("test",), filter=None, limit=5, offset=0),
            GetOp(namespace=("test", "bar"), key="key2"),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
            PutOp(namespace=("test",), key="key3", value={"data": "value3"}),
            GetOp(namespace=("test", "foo"), key="key1"),
        ]
    )
    assert isinstance(reordered[0], list) and len(reordered[0]) == 2
    assert isinstance(reordered[1], Item) and reordered[1].value == {"data": "value2"}
    assert isinstance(reordered[2], list) and len(reordered[2]) == 2
    assert reordered[3] is None
    assert isinstance(reordered[4], Item) and reordered[4].key == "key1"
    item3 = store.get(("test",), "key3")
    assert item3 is not None and item3.value == {"data": "value3"}


def test_batch_reads_see_the_state_before_its_puts_and_the_last_put_of_a_key_wins(
    store: LedgerStore,
) -> None:
    store.put(("test",), "k", {"v": 1})

    results = store.batch(
        [
            PutOp(("test",), "k", {"v": 2}),
            GetOp(("test",), "k"),
            PutOp(("test",), "k", {"v": 3}),
            PutOp(("test",), "gone", {"v": 0}),
            PutOp(("test",), "gone", None),
        ]
    )

    read = results[1]
    assert isinstance(read, Item) and read.value == {"v": 1}
    after = store.get(("test",), "k")
    assert after is not None and after.value == {"v": 3}
    assert store.get(("test",), "gone") is None


def test_batch_puts_and_deletes(store: LedgerStore) -> None:
    store.put(("test",), "key3", {"data": "old"})

    results = store.batch(
        [
            PutOp(("test",), "key1", {"data": "value1"}),
            PutOp(("test",), "key2", {"data": "value2"}),
            PutOp(("test",), "key3", None),
        ]
    )

    assert results == [None, None, None]
    item1, item2 = store.get(("test",), "key1"), store.get(("test",), "key2")
    assert item1 is not None and item1.value == {"data": "value1"}
    assert item2 is not None and item2.value == {"data": "value2"}
    assert store.get(("test",), "key3") is None


def test_a_refused_operation_fails_the_batch_before_anything_is_written(
    store: LedgerStore, principals: Principals
) -> None:
    before = principals.ledger.position

    with pytest.raises(NamespaceLabelError):
        store.batch([PutOp(("test",), "ok", {"v": 1}), PutOp(("bad label",), "k", {"v": 1})])

    assert principals.ledger.position == before
    assert store.get(("test",), "ok") is None


def test_a_put_where_the_principal_may_not_propose_fails_the_batch_before_anything_is_written(
    store: LedgerStore, principals: Principals
) -> None:
    before = principals.ledger.position

    with pytest.raises(AccessDeniedError) as refused:
        store.batch([PutOp(("test",), "ok", {"v": 1}), PutOp(("secret",), "k", {"v": 1})])

    assert str(refused.value) == "put refused: 'agent' lacks role 'propose' in scope 'secret'"
    assert principals.ledger.position == before
    assert store.get(("test",), "ok") is None


def test_a_value_the_ledger_cannot_hold_fails_the_batch_before_anything_is_written(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("test",), "old", {"v": 0})
    before = principals.ledger.position

    refused = "put of key 'bad' refused: value has a non-string key 1 at value"
    with pytest.raises(InvalidValueError, match=refused):
        store.batch(
            [
                PutOp(("test",), "ok", {"v": 1}),
                PutOp(("test",), "old", None),
                PutOp(("test",), "bad", {1: "a key that is no string"}),
            ]
        )
    with pytest.raises(ValueTooLargeError, match="put of key 'big' refused: value is "):
        store.batch([PutOp(("test",), "ok", {"v": 1}), PutOp(("test",), "big", {"s": "x" * 2**21})])

    assert principals.ledger.position == before
    assert store.get(("test",), "ok") is None
    assert store.get(("test",), "old") is not None  # the delete did not run either


def test_a_tuple_is_refused_where_it_would_come_back_a_list(
    store: LedgerStore, principals: Principals
) -> None:
    # LangGraph's own stores give back the tuple put; the ledger would store a list.
    before = principals.ledger.position
    for value, where in (
        ({"point": (1, 2)}, ".point"),
        ({"nested": {"pair": ["a", ("b", "c")]}}, ".nested.pair[1]"),
    ):
        refused = f"put of key 'k' refused: value{where} holds a tuple"
        with pytest.raises(InvalidValueError, match=re.escape(refused)):
            store.put(("test",), "k", value)
    assert principals.ledger.position == before
    store.put(("test",), "k", {"point": [1, 2]})
    item = store.get(("test",), "k")
    assert item is not None and item.value == {"point": [1, 2]}


def test_a_record_under_a_store_key_whose_value_is_no_mapping_is_not_an_item(
    store: LedgerStore, principals: Principals
) -> None:
    # Written through the library (or MCP, or the CLI) under a key the store maps:
    # LangGraph's Item.value is a dict, so node code indexing it must not get "Ada".
    store.put(("test", "user"), "age", {"years": 36})
    for key, value in (("name", "Ada"), ("tags", ["a"])):
        rid = principals.agent.propose("test", f"user/{key}", value, Kind.FACT)
        principals.reviewer.accept(rid)
    assert store.get(("test", "user"), "name") is None
    assert store.get(("test", "user"), "tags") is None
    assert [(i.key, i.value) for i in store.search(("test",))] == [("age", {"years": 36})]
    # a namespace holding only such records holds no item, so it is not listed
    rid = principals.agent.propose("test", "pets/count", 2, Kind.FACT)
    principals.reviewer.accept(rid)
    assert store.list_namespaces() == [("test", "user")]
    # deleting what get calls absent changes nothing (it is not the store's item)
    before = principals.ledger.position
    store.delete(("test", "user"), "tags")
    assert principals.ledger.position == before
    assert str(principals.reviewer.read("test", "user/tags").outcome) == "FOUND"
    store.put(("test", "user"), "name", {"first": "Ada"})  # a put replaces it
    item = store.get(("test", "user"), "name")
    assert item is not None and item.value == {"first": "Ada"}


# -- get / put / delete ----------------------------------------------------------------


def test_get_returns_the_value_with_times_from_the_record(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("test", "documents"), "doc1", {"title": "Test", "content": "Hello"})

    item = store.get(("test", "documents"), "doc1")

    assert item is not None
    assert item.namespace == ("test", "documents")
    assert item.key == "doc1"
    assert item.value == {"title": "Test", "content": "Hello"}
    record = principals.reviewer.get(current_id(principals.reviewer, "test", "documents/doc1"))
    assert record.kind == Kind.FACT
    assert record.proposer == "agent"
    assert item.created_at == record.created_at
    assert item.updated_at == record.created_at
    assert store.get(("test", "other_documents"), "doc1") is None
    assert store.get(("test", "documents"), "doc2") is None


def test_a_get_gives_the_item_langgraphs_constructor_makes(
    store: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.integrations.langgraph import items

    # Given an item put, and what LangGraph's Item constructor makes of its fields
    store.put(("test", "documents"), "doc1", {"title": "Test"})
    got = store.get(("test", "documents"), "doc1")
    assert got is not None
    made = Item(
        namespace=("test", "documents"),
        key="doc1",
        value={"title": "Test"},
        created_at=got.created_at,
        updated_at=got.created_at,
    )

    # Then the get's item holds in every slot what the constructor's holds
    # (it is made without the constructor), and so does one made with it
    assert items._BARE_ITEM
    for slot in Item.__slots__:
        assert getattr(got, slot) == getattr(made, slot), slot
        assert type(getattr(got, slot)) is type(getattr(made, slot)), slot
    monkeypatch.setattr(items, "_BARE_ITEM", False)
    assert store.get(("test", "documents"), "doc1") == got == made


def test_a_second_put_supersedes_the_first_version(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("test",), "profile", {"name": "Ada"})
    first = current_id(principals.reviewer, "test", "profile")

    store.put(("test",), "profile", {"name": "Ada Lovelace"})

    item = store.get(("test",), "profile")
    assert item is not None and item.value == {"name": "Ada Lovelace"}
    second = current_id(principals.reviewer, "test", "profile")
    old, new = principals.reviewer.get(first), principals.reviewer.get(second)
    assert old.status == Status.SUPERSEDED
    assert old.superseded_by == second
    assert new.status == Status.ACCEPTED
    assert new.supersedes == first


def test_delete_revokes_the_record_with_a_reason_naming_the_store(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("test",), "k", {"v": 1})
    record_id = current_id(principals.reviewer, "test", "k")

    store.delete(("test",), "k")

    assert store.get(("test",), "k") is None
    view = principals.reviewer.get(record_id)
    assert view.status == Status.REVOKED
    assert view.reason is not None and "LedgerStore" in view.reason
    store.delete(("test",), "never-there")  # deleting a missing key is not an error
    store.put(("test",), "k", {"v": 2})  # a deleted key can be written again
    again = store.get(("test",), "k")
    assert again is not None and again.value == {"v": 2}


def test_a_delete_leaves_candidates_others_proposed_to_their_reviewers(
    principals: Principals,
) -> None:
    agent, reviewer = principals.agent, principals.reviewer
    # Given a store whose own principal approves, an item under the key, the
    # store's own put awaiting review, and 20 candidates another principal proposed
    item = agent.propose("test", "k", {"v": 0}, Kind.FACT, accepted_by=reviewer)
    others = agent.propose_many(
        [{"scope": "test", "claim_key": "k", "value": {"v": n}, "kind": "fact"} for n in range(20)]
    )
    principals.ledger.admin().grant("reviewer", "test", ["approve", "read", "audit", "propose"])
    with LedgerStore(principals.ledger, token=principals.reviewer_token) as own:
        own.put(("test",), "k", {"v": 1})
        [mine] = [r.id for r in reviewer.records("test", status="CANDIDATE") if r.id not in others]
        before = principals.ledger.position

        # When the store deletes the key
        own.delete(("test",), "k")

        # Then it revoked the item and its own put (two events), not the others' candidates
        assert own.get(("test",), "k") is None
    assert principals.ledger.position == before + 2
    assert reviewer.get(item).status == reviewer.get(mine).status == Status.REVOKED
    assert {reviewer.get(rid).status for rid in others} == {Status.CANDIDATE}
    queue = [r.id for r in reviewer.records("test", status="CANDIDATE")]
    assert sorted(queue) == sorted(others)


def test_without_an_approver_a_put_is_a_candidate_until_reviewed(
    review_store: LedgerStore, principals: Principals
) -> None:
    review_store.put(("test",), "k", {"v": 1})

    assert review_store.get(("test",), "k") is None
    assert review_store.search(("test",)) == []
    queue = principals.reviewer.records("test", status="CANDIDATE")
    assert [(r.claim_key, r.value) for r in queue] == [("k", {"v": 1})]

    principals.reviewer.accept(queue[0].id)

    item = review_store.get(("test",), "k")
    assert item is not None and item.value == {"v": 1}
    review_store.put(("test",), "k", {"v": 2})
    still = review_store.get(("test",), "k")
    assert still is not None and still.value == {"v": 1}  # the new version awaits review


def test_without_an_approver_a_delete_needs_the_approve_role(
    review_store: LedgerStore, principals: Principals
) -> None:
    review_store.put(("test",), "k", {"v": 1})

    with pytest.raises(AccessDeniedError):
        review_store.delete(("test",), "k")

    assert principals.reviewer.records("test", status="CANDIDATE")[0].claim_key == "k"


def test_with_an_approver_a_put_is_proposed_and_accepted_in_one_transaction(
    store: LedgerStore, principals: Principals
) -> None:
    before = principals.ledger.position
    store.put(("test",), "k", {"v": 1})

    assert principals.ledger.position == before + 2
    rid = current_id(principals.reviewer, "test", "k")
    events = principals.reviewer.audit(rid).events
    assert [(e.type, e.actor) for e in events] == [("Proposed", "agent"), ("Accepted", "reviewer")]
    # Whole at either position of its transaction: never a candidate to anyone.
    past = principals.reviewer.as_of(position=before + 1)
    assert past.get(rid).status == Status.ACCEPTED


def test_with_an_approver_a_refused_acceptance_stores_nothing(
    open_ledger: Any,
) -> None:
    led = open_ledger(acceptance_checks=[lambda r: "no secrets" if "secret" in r.value else None])
    admin = led.admin()
    admin.grant("agent", "test", ["propose", "read"])
    admin.grant("reviewer", "test", ["approve", "read"])
    with LedgerStore(
        led, token=admin.issue_token("agent"), approver_token=admin.issue_token("reviewer")
    ) as s:
        before = led.position
        with pytest.raises(LedgerError, match="no secrets"):
            s.put(("test",), "k", {"secret": "hunter2"})
        assert led.position == before
        assert s.get(("test",), "k") is None
        reviewer = led.authenticate(admin.issue_token("reviewer"))
        assert reviewer.records("test", status="CANDIDATE") == ()
        s.put(("test",), "k", {"v": 1})
        item = s.get(("test",), "k")
        assert item is not None and item.value == {"v": 1}


def test_the_approver_must_be_another_principal(principals: Principals) -> None:
    with pytest.raises(InvalidInputError, match="separation of duties"):
        LedgerStore(
            principals.ledger,
            token=principals.agent_token,
            approver_token=principals.agent_token,
        )


def test_records_of_other_kinds_and_foreign_claim_keys_are_not_items(
    store: LedgerStore, principals: Principals
) -> None:
    guess = principals.agent.propose("test", "k", {"v": "guess"}, Kind.INFERENCE)
    principals.reviewer.accept(guess)
    odd = principals.agent.propose("test", "a.b/k", {"v": 1}, Kind.FACT)  # "a.b" is no label
    principals.reviewer.accept(odd)

    assert store.get(("test",), "k") is None
    assert store.search(("test",)) == []
    assert store.list_namespaces() == []


def test_usable_records_that_disagree_raise_instead_of_picking_one(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("test",), "k", {"v": 1})
    rival = principals.agent.propose("test", "k", {"v": 2}, Kind.FACT)
    principals.reviewer.accept(rival)

    with pytest.raises(MemoryConflictError, match=rival):
        store.get(("test",), "k")
    with pytest.raises(MemoryConflictError):
        store.search(("test",))


def test_values_that_are_no_items_count_in_no_conflict_of_the_store(
    store: LedgerStore, principals: Principals
) -> None:
    # Given two accepted plain strings that disagree on a claim (as 0.1.0 or the
    # library writes them: no items of the store's), in a scope it searches
    for value in ("draft", "final"):
        principals.reviewer.accept(principals.agent.propose("test", "plain", value, Kind.FACT))
    assert principals.reviewer.read("test", "plain").outcome == Outcome.CONFLICT
    store.put(("test",), "item", {"v": 1})

    # Then the store shows no item there, and searching the scope is not refused
    assert store.get(("test",), "plain") is None
    assert [i.key for i in store.search(("test",))] == ["item"]

    # And one item beside a plain value on a claim is that item
    store.put(("test",), "mixed", {"v": 2})
    principals.reviewer.accept(principals.agent.propose("test", "mixed", "x", Kind.FACT))
    shown = store.get(("test",), "mixed")
    assert shown is not None and shown.value == {"v": 2}
    # But items that differ only by type (1 and True) are a conflict, as the ledger says
    store.put(("test",), "typed", {"v": 1})
    principals.reviewer.accept(principals.agent.propose("test", "typed", {"v": True}, Kind.FACT))
    with pytest.raises(MemoryConflictError):
        store.get(("test",), "typed")


def test_a_scope_without_grants_is_refused(store: LedgerStore) -> None:
    with pytest.raises(AccessDeniedError):
        store.put(("secret",), "k", {"v": 1})
    with pytest.raises(AccessDeniedError):
        store.get(("secret",), "k")


# -- search ----------------------------------------------------------------------------


def test_search_by_namespace_prefix_filter_limit_and_offset(store: LedgerStore) -> None:
    data = [
        (("test", "docs"), "doc1", {"title": "First", "author": "Alice", "tags": ["important"]}),
        (("test", "docs"), "doc2", {"title": "Second", "author": "Bob", "tags": ["draft"]}),
        (("test", "images"), "img1", {"title": "Image", "author": "Alice", "tags": ["draft"]}),
    ]
    for namespace, key, value in data:
        store.put(namespace, key, value)

    assert len(store.search(("test",))) == 3
    docs = store.search(("test", "docs"))
    assert {i.key for i in docs} == {"doc1", "doc2"}
    assert all(i.namespace == ("test", "docs") for i in docs)
    alice = store.search(("test",), filter={"author": "Alice"})
    assert {i.key for i in alice} == {"doc1", "img1"}
    drafts = store.search(("test",), filter={"tags": ["draft"]})
    assert {i.key for i in drafts} == {"doc2", "img1"}
    first_page = store.search(("test",), limit=2)
    second_page = store.search(("test",), limit=2, offset=2)
    assert len(first_page) == 2 and len(second_page) == 1
    assert {i.key for i in first_page}.isdisjoint({i.key for i in second_page})
    assert store.search(("test",), limit=0) == []


def test_search_lists_the_newest_versions_first(store: LedgerStore) -> None:
    for key in ("a", "b", "c"):
        store.put(("test",), key, {"key": key})
    store.put(("test",), "a", {"key": "a", "version": 2})

    keys = [i.key for i in store.search(("test",))]

    assert keys == ["a", "c", "b"]
    assert store.search(("test",))[0].value == {"key": "a", "version": 2}


def test_a_few_items_at_a_time_are_the_slices_of_one_long_search(store: LedgerStore) -> None:
    """A search for a few items asks the ledger for a few records, then for more
    as its filter skips some: its pages are still the slices of the full answer."""
    for version in range(3):
        for n in range(12):
            store.put(("test",), f"k{n}", {"n": n, "even": n % 2 == 0, "version": version})
    store.put(("test", "other"), "k0", {"even": True, "n": 0, "version": 9})
    full = store.search(("test",), filter={"even": True}, limit=100)
    assert [i.value["n"] for i in full] == [0, 10, 8, 6, 4, 2, 0]
    assert all(i.value["version"] in (2, 9) for i in full)
    for limit in (1, 2, 3):
        pages = [
            store.search(("test",), filter={"even": True}, limit=limit, offset=offset)
            for offset in range(0, len(full) + limit, limit)
        ]
        assert [(i.namespace, i.key) for page in pages for i in page] == [
            (i.namespace, i.key) for i in full
        ]


def test_search_filter_operators(store: LedgerStore) -> None:
    store.put(("items",), "i1", {"price": 10, "name": "apple", "meta": {"rank": 1}})
    store.put(("items",), "i2", {"price": 20.5, "name": "pear", "meta": {"rank": 2}})
    store.put(("items",), "i3", {"price": 30, "name": "plum", "meta": {"rank": 3}})
    store.put(("items",), "i4", {"name": "free"})

    def keys(flt: dict[str, Any]) -> set[str]:
        return {i.key for i in store.search(("items",), filter=flt)}

    assert keys({"price": {"$gt": 15}}) == {"i2", "i3"}
    assert keys({"price": {"$gte": 20.5}}) == {"i2", "i3"}
    assert keys({"price": {"$lt": 20.5}}) == {"i1"}
    assert keys({"price": {"$lte": 20.5}}) == {"i1", "i2"}
    assert keys({"price": {"$eq": 10.0}}) == {"i1"}
    assert keys({"price": {"$ne": 10}}) == {"i2", "i3"}  # a missing field fails every condition
    assert keys({"price": {"$gt": 5, "$lt": 25}}) == {"i1", "i2"}
    assert keys({"price": {"$lt": float("inf")}}) == {"i1", "i2", "i3"}
    assert keys({"price": {"$eq": float("nan")}}) == set()
    assert keys({"name": {"$gte": "pear"}}) == {"i2", "i3"}
    assert keys({"meta.rank": {"$gte": 2}}) == {"i2", "i3"}
    assert keys({"meta": {"rank": 3}}) == {"i3"}
    assert keys({"name": "apple", "price": 10}) == {"i1"}
    assert keys({"name": "O'Brien' OR '1'='1"}) == set()


def test_a_missing_field_counts_as_null_as_in_langgraphs_stores(store: LedgerStore) -> None:
    store.put(("items",), "a", {"x": 1})
    store.put(("items",), "b", {"x": 1, "archived": None})
    store.put(("items",), "c", {"x": 1, "archived": True})

    def keys(flt: dict[str, Any]) -> list[str]:
        return sorted(i.key for i in store.search(("items",), filter=flt))

    assert keys({"archived": None}) == ["a", "b"]
    assert keys({"archived": {"$eq": None}}) == ["a", "b"]
    assert keys({"archived": True}) == ["c"]
    assert keys({"archived": {"$gt": 0}}) == []  # no order with a missing field


def test_search_filters_booleans_apart_from_numbers(store: LedgerStore) -> None:
    store.put(("flags",), "f1", {"active": True})
    store.put(("flags",), "f2", {"active": False})
    store.put(("flags",), "f3", {"active": 1})

    assert {i.key for i in store.search(("flags",), filter={"active": True})} == {"f1"}
    assert {i.key for i in store.search(("flags",), filter={"active": False})} == {"f2"}
    assert {i.key for i in store.search(("flags",), filter={"active": 1})} == {"f3"}


def test_search_refuses_an_unknown_operator(store: LedgerStore) -> None:
    with pytest.raises(InvalidInputError, match=r"\$in"):
        store.search(("items",), filter={"price": {"$in": [1, 2]}})


def test_search_stops_at_label_boundaries_and_is_case_sensitive(store: LedgerStore) -> None:
    for namespace in [
        ("foo",),
        ("foo", "child"),
        ("foo", "child", "deep"),
        ("foobar",),
        ("foobar", "baz"),
        ("foo2",),
        ("foo", "Child"),
        ("foo", "child2"),
    ]:
        store.put(namespace, "k", {"v": 1})

    def namespaces(prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        return {i.namespace for i in store.search(prefix, limit=100)}

    assert namespaces(("foo",)) == {
        ("foo",),
        ("foo", "child"),
        ("foo", "child", "deep"),
        ("foo", "Child"),
        ("foo", "child2"),
    }
    assert namespaces(("foo", "child")) == {("foo", "child"), ("foo", "child", "deep")}
    assert namespaces(("foo", "Child")) == {("foo", "Child")}
    assert namespaces(("foobar",)) == {("foobar",), ("foobar", "baz")}
    with pytest.raises(AccessDeniedError):  # a scope without grants: refused, not empty
        namespaces(("fo",))


def test_search_with_an_empty_prefix_covers_every_readable_scope(
    store: LedgerStore, principals: Principals
) -> None:
    for namespace in [("test",), ("prod", "c"), ("docs", "e", "f")]:
        store.put(namespace, "k", {"v": 1})
    outsider = principals.ledger.authenticate(principals.ledger.admin().issue_token("outsider"))
    hidden = outsider.propose("secret", "k", {"v": "hidden"}, Kind.FACT)
    assert hidden

    assert {i.namespace for i in store.search((), limit=100)} == {
        ("test",),
        ("prod", "c"),
        ("docs", "e", "f"),
    }


def test_listings_across_scopes_without_read_anywhere_are_refused_not_empty(
    principals: Principals,
) -> None:
    admin = principals.ledger.admin()
    admin.grant("courier", "test", ["deliver"])  # a grant, but no 'read' anywhere
    with LedgerStore(principals.ledger, token=admin.issue_token("courier")) as courier:
        for listing in (lambda: courier.search(()), courier.list_namespaces):
            with pytest.raises(AccessDeniedError, match="lacks role 'read' in every scope"):
                listing()


def test_namespaces_of_a_scope_without_read_are_refused_as_its_search_is(
    principals: Principals,
) -> None:
    admin = principals.ledger.admin()
    admin.grant("writer", "prod", ["propose", "read"])
    admin.grant("boss", "prod", ["approve", "read"])
    admin.grant("courier", "prod", ["propose"])  # may write there, may not read
    admin.grant("courier", "test", ["read"])
    with LedgerStore(
        principals.ledger,
        token=admin.issue_token("writer"),
        approver_token=admin.issue_token("boss"),
    ) as writer:
        writer.put(("prod", "users"), "u1", {"v": 1})
        assert writer.list_namespaces(prefix=("prod",)) == [("prod", "users")]
    with LedgerStore(principals.ledger, token=admin.issue_token("courier")) as courier:
        for scope in ("prod", "elsewhere"):  # no read there; no grant at all there
            with pytest.raises(AccessDeniedError, match=f"lacks role 'read' in scope '{scope}'"):
                courier.search((scope,))
            with pytest.raises(AccessDeniedError, match=f"lacks role 'read' in scope '{scope}'"):
                courier.list_namespaces(prefix=(scope, "users"))
        # A prefix that names no one scope lists the readable ones, as before.
        assert courier.list_namespaces(prefix=("*", "users")) == []


def test_an_operator_inside_a_value_to_match_exactly_is_refused_naming_the_dotted_form(
    store: LedgerStore,
) -> None:
    store.put(("test",), "d1", {"meta": {"a": 1}})
    store.put(("test",), "d2", {"meta": {"a": 2}})
    with pytest.raises(InvalidInputError, match=r"name it with dots: \{'meta.a': \{'\$gt'"):
        store.search(("test",), filter={"meta": {"a": {"$gt": 1}}})
    assert [i.key for i in store.search(("test",), filter={"meta.a": {"$gt": 1}})] == ["d2"]
    assert [i.key for i in store.search(("test",), filter={"meta": {"a": 1}})] == ["d1"]


def test_search_skips_candidates_and_withdrawn_records(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("test",), "kept", {"v": 1})
    store.put(("test",), "revoked", {"v": 2})
    principals.reviewer.revoke(current_id(principals.reviewer, "test", "revoked"), "wrong")
    principals.agent.propose("test", "pending", {"v": 3}, Kind.FACT)

    assert [i.key for i in store.search(("test",))] == ["kept"]


def test_a_semantic_query_an_index_or_a_ttl_is_refused_clearly(store: LedgerStore) -> None:
    with pytest.raises(UnsupportedStoreOperationError, match="semantic"):
        store.search(("test",), query="what does the user like?")
    with pytest.raises(UnsupportedStoreOperationError, match="index"):
        store.put(("test",), "k", {"text": "x"}, index=["text"])
    with pytest.raises(UnsupportedStoreOperationError, match="ttl"):
        store.batch([PutOp(("test",), "k", {"text": "x"}, ttl=5.0)])
    # put and aput refuse a ttl as the batch does (BaseStore's own check would
    # raise a bare NotImplementedError first); the error is one too.
    with pytest.raises(UnsupportedStoreOperationError, match=r"ttl=5\.0: LedgerStore does not"):
        store.put(("test",), "k", {"text": "x"}, ttl=5.0)
    with pytest.raises(NotImplementedError, match="pass ttl=None"):
        asyncio.run(store.aput(("test",), "k", {"text": "x"}, ttl=5.0))
    assert store.get(("test",), "k") is None
    store.put(("test",), "k", {"text": "x"}, index=False, ttl=None)
    assert store.get(("test",), "k") is not None


def test_puts_of_one_key_at_once_leave_one_value_and_later_puts_replace_it(
    principals: Principals, store: LedgerStore
) -> None:
    # Each put reads the version it replaces, then proposes and accepts: run at
    # once, they must still end in one line of versions, the last one winning.
    writers = 6
    start = threading.Barrier(writers)
    errors: list[BaseException] = []

    def put(n: int) -> None:
        try:
            start.wait()
            for round_ in range(3):
                store.put(("test", "race"), "key", {"writer": n, "round": round_})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=put, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    item = store.get(("test", "race"), "key")
    assert item is not None and item.value["round"] == 2
    versions = principals.reviewer.explain("test", "race/key").entries
    statuses = sorted(e.record.status.value for e in versions)
    assert statuses == ["ACCEPTED"] + ["SUPERSEDED"] * (3 * writers - 1)
    store.put(("test", "race"), "key", {"writer": "last"})
    assert store.get(("test", "race"), "key").value == {"writer": "last"}  # type: ignore[union-attr]
    asyncio.run(_aputs(store, [{"n": n} for n in range(4)]))
    current_id(principals.agent, "test", "race/key")  # one usable version
    item = store.get(("test", "race"), "key")
    assert item is not None and item.value in [{"n": n} for n in range(4)]


def test_a_conflict_of_two_versions_is_named_and_cleared_by_a_delete(
    principals: Principals, store: LedgerStore
) -> None:
    # Two accepted versions of one key, neither replacing the other (proposed
    # through another surface: the store's own puts replace the newest version).
    agent, reviewer = principals.agent, principals.reviewer
    ids = [agent.propose("test", "race/key", {"v": n}, Kind.FACT) for n in (1, 2)]
    for rid in ids:
        reviewer.accept(rid)
    with pytest.raises(MemoryConflictError, match=f"{ids[0]}.*{ids[1]}|{ids[1]}.*{ids[0]}"):
        store.get(("test", "race"), "key")
    store.delete(("test", "race"), "key")
    store.put(("test", "race"), "key", {"v": 3})
    assert store.get(("test", "race"), "key").value == {"v": 3}  # type: ignore[union-attr]


async def _aputs(store: LedgerStore, values: list[dict[str, int]]) -> None:
    await asyncio.gather(*(store.aput(("test", "race"), "key", value) for value in values))


def test_a_scope_whose_name_holds_a_period_is_no_namespace(
    principals: Principals, store: LedgerStore
) -> None:
    # LangGraph refuses a "." in a label: a scope named so is left out of the
    # namespaces the store lists and searches, so it never hands back one it refuses.
    admin = principals.ledger.admin()
    admin.grant("agent", "acme.billing", ["propose", "read"])
    admin.grant("reviewer", "acme.billing", ["approve", "read"])
    principals.reviewer.accept(
        principals.agent.propose("acme.billing", "plan", {"tier": 1}, Kind.FACT)
    )
    store.put(("test",), "k", {"v": 1})
    assert store.list_namespaces() == [("test",)]
    assert [(i.namespace, i.key) for i in store.search(())] == [(("test",), "k")]


# -- list_namespaces -------------------------------------------------------------------


def test_list_namespaces_with_prefix_suffix_depth_and_pages(store: LedgerStore) -> None:
    namespaces = [
        ("test", "documents", "public"),
        ("test", "documents", "private"),
        ("test", "images", "public"),
        ("test", "images", "private"),
        ("prod", "documents", "public"),
        ("prod", "documents", "some", "nesting", "public"),
        ("prod", "documents", "private"),
    ]
    for namespace in namespaces:
        store.put(namespace, "dummy", {"content": "dummy"})

    assert store.list_namespaces() == sorted(namespaces)
    assert set(store.list_namespaces(prefix=("test",))) == set(namespaces[:4])
    assert len(store.list_namespaces(prefix=("test", "documents"))) == 2
    assert {ns[-1] for ns in store.list_namespaces(suffix=("public",))} == {"public"}
    assert len(store.list_namespaces(suffix=("public",))) == 4
    assert set(store.list_namespaces(prefix=("test",), suffix=("public",))) == {
        ("test", "documents", "public"),
        ("test", "images", "public"),
    }
    assert len(store.list_namespaces(prefix=("*", "documents"))) == 5
    assert set(store.list_namespaces(suffix=("some", "*", "public"))) == {namespaces[5]}
    assert store.list_namespaces(max_depth=2) == [
        ("prod", "documents"),
        ("test", "documents"),
        ("test", "images"),
    ]
    assert store.list_namespaces(prefix=("prod",), max_depth=3) == [
        ("prod", "documents", "private"),
        ("prod", "documents", "public"),
        ("prod", "documents", "some"),
    ]
    assert store.list_namespaces(limit=3) == sorted(namespaces)[:3]
    assert store.list_namespaces(offset=3) == sorted(namespaces)[3:]


def test_list_namespaces_matches_whole_labels(store: LedgerStore) -> None:
    for namespace in [
        ("foo",),
        ("foo", "child"),
        ("foobar",),
        ("uid", "users", "alice"),
        ("uid", "users", "malice"),
        ("uid", "a", "b", "alice"),
        ("uid", "users", "alice\n"),
    ]:
        store.put(namespace, "k", {"v": 1})

    assert set(store.list_namespaces(prefix=("foo",))) == {("foo",), ("foo", "child")}
    assert set(store.list_namespaces(suffix=("alice",))) == {
        ("uid", "users", "alice"),
        ("uid", "a", "b", "alice"),
    }
    assert set(store.list_namespaces(prefix=("uid", "*", "alice"))) == {
        ("uid", "users", "alice"),
    }


def test_list_namespaces_leaves_out_namespaces_with_nothing_usable(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("test", "live"), "k", {"v": 1})
    store.put(("test", "dead"), "k", {"v": 1})

    store.delete(("test", "dead"), "k")

    assert store.list_namespaces() == [("test", "live")]


# -- namespaces and keys ---------------------------------------------------------------


def test_labels_the_ledger_cannot_hold_are_refused_by_name(
    store: LedgerStore, principals: Principals
) -> None:
    with pytest.raises(InvalidNamespaceError, match="user 1") as refused:
        store.put(("user 1", "notes"), "k", {"v": 1})
    assert isinstance(refused.value, LedgerError)
    with pytest.raises(InvalidNamespaceError, match="users"):
        store.get(("users.eu",), "k")  # LangGraph's own rule: no periods in labels
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("test", "a.b"), "k")])
    with pytest.raises(InvalidNamespaceError, match="langgraph"):
        store.batch([PutOp(("langgraph",), "k", {"v": 1})])
    with pytest.raises(InvalidNamespaceError, match="fewer than"):
        store.get((), "k")
    with pytest.raises(InvalidNamespaceError, match="at most 512"):
        store.put(("test", "x" * 300), "y" * 300, {"v": 1})
    with pytest.raises(InvalidNamespaceError, match="100301 characters") as long:
        store.put(("test", "x" * 100_000), "y" * 300, {"v": 1})
    assert len(str(long.value)) < 1_000  # the label is quoted cut, not whole
    with pytest.raises(InvalidNamespaceError, match="empty claim key"):
        store.put(("test",), "", {"v": 1})
    deep = LedgerStore(principals.ledger, token=principals.agent_token, scope_depth=2)
    with pytest.raises(InvalidNamespaceError, match="'a:b'"):
        deep.get(("a:b", "c"), "k")


def test_a_key_that_makes_no_claim_key_is_got_as_none_and_deleted_as_nothing(
    store: LedgerStore, principals: Principals
) -> None:
    # No item can be there: LangGraph's own stores answer None and do nothing.
    impossible = [(("test",), ""), (("test",), "k" * 600), (("test", "x" * 300), "y" * 300)]
    before = principals.ledger.position

    for namespace, key in impossible:
        assert store.get(namespace, key) is None
        assert store.batch([GetOp(namespace, key)]) == [None]
        store.delete(namespace, key)
        store.batch([PutOp(namespace, key, None)])

    assert principals.ledger.position == before
    assert get_in_thread(store, "t1", ("test",), "") is None
    for namespace, key in impossible:  # a put is still refused, naming why
        with pytest.raises(InvalidNamespaceError):
            store.put(namespace, key, {"v": 1})
    with pytest.raises(InvalidNamespaceError, match="user 1"):  # no scope: refused
        store.get(("user 1",), "")


def test_scope_depth_two_joins_the_first_labels_into_the_scope(principals: Principals) -> None:
    admin = principals.ledger.admin()
    for principal, roles in (("agent", ["propose", "read"]), ("reviewer", ["approve", "read"])):
        admin.grant(principal, "acme:support", roles)
    store = LedgerStore(
        principals.ledger,
        token=principals.agent_token,
        approver_token=principals.reviewer_token,
        scope_depth=2,
    )

    store.put(("acme", "support", "users", "u1"), "lang", {"value": "fr"})

    assert current_id(principals.reviewer, "acme:support", "users/u1/lang")
    item = store.get(("acme", "support", "users", "u1"), "lang")
    assert item is not None and item.value == {"value": "fr"}
    assert store.list_namespaces(prefix=("acme",)) == [("acme", "support", "users", "u1")]
    assert [i.key for i in store.search(("acme",))] == ["lang"]
    store.close()


TRICKY = [
    (("test",), "plain"),
    (("test",), "a/b"),
    (("test", "a"), "b"),
    (("test",), "a%2Fb"),
    (("test",), "100%"),
    (("test", "x/y"), "z"),
    (("test", "x", "y"), "z"),
    (("test",), " padded "),
    (("test",), "padded"),
    (("test",), "line\nbreak"),
    (("test",), "tab\there"),
    (("test",), "caf\u00e9"),  # NFC
    (("test",), "cafe\u0301"),  # NFD: another key, not normalised into the first
    (("test", "\u00e9t\u00e9"), "k"),
    (("test", "e\u0301te\u0301"), "k"),
    (("test",), "emoji \U0001f600"),
    (("test",), "zero\u200bwidth"),
    (("test", "ns"), ""),
]


def test_claim_keys_of_tricky_namespaces_and_keys_are_distinct_and_valid() -> None:
    claims = [claim_key_of(ns[1:], key) for ns, key in TRICKY]

    assert len(set(claims)) == len(claims)
    for (ns, key), claim in zip(TRICKY, claims, strict=True):
        assert parse_claim_key(claim) == (ns[1:], key)
        assert check_text(claim, "claim_key", max_len=512) == claim
        assert unicodedata.is_normalized("NFC", claim)
        assert claim == claim.strip()


def test_tricky_keys_round_trip_through_the_ledger(store: LedgerStore) -> None:
    for n, (namespace, key) in enumerate(TRICKY):
        store.put(namespace, key, {"n": n})

    for n, (namespace, key) in enumerate(TRICKY):
        item = store.get(namespace, key)
        assert item is not None and item.value == {"n": n}, (namespace, key)
    found = {(i.namespace, i.key): i.value["n"] for i in store.search(("test",), limit=100)}
    assert found == {(ns, key): n for n, (ns, key) in enumerate(TRICKY)}
    assert set(store.list_namespaces()) == {ns for ns, _ in TRICKY}


def test_an_empty_key_directly_under_the_scope_is_refused() -> None:
    with pytest.raises(NamespaceLabelError, match="empty"):
        claim_key_of((), "")


labels = st.text(min_size=1, max_size=12).filter(lambda s: "." not in s and "\x00" not in s)


@settings(max_examples=300, deadline=None)
@given(
    first=st.tuples(st.lists(labels, max_size=3), st.text(max_size=12)),
    second=st.tuples(st.lists(labels, max_size=3), st.text(max_size=12)),
)
def test_the_claim_key_mapping_is_injective_and_reversible(
    first: tuple[list[str], str], second: tuple[list[str], str]
) -> None:
    claims = []
    for rest, key in (first, second):
        try:
            claim = claim_key_of(rest, key)
        except NamespaceLabelError:
            continue  # lone surrogates and the empty key are refused by name
        assert parse_claim_key(claim) == (tuple(rest), key)
        assert unicodedata.is_normalized("NFC", claim)
        check_text(claim, "claim_key", max_len=512)
        claims.append(((tuple(rest), key), claim))
    if len(claims) == 2 and claims[0][0] != claims[1][0]:
        assert claims[0][1] != claims[1][1]


def test_run_ids_of_threads_are_ledger_names_no_two_threads_share() -> None:
    assert run_id_of("t1") == "langgraph:t1"
    assert run_id_of("t1", 2) == "langgraph:t1:2"
    odd = run_id_of("user 42 / chat \u00e9")
    assert odd.startswith("langgraph::h-") and odd != run_id_of("user 42 / chat e")
    # A thread whose id looks like another's digest, resumption or later run, or
    # like a run an earlier version named, gets a run id of its own
    looks_alike = [
        "chat",
        "chat.1",
        "chat:1",
        "",
        odd.removeprefix("langgraph::"),
        odd.removeprefix("langgraph:"),
        "user 42 / chat \u00e9",
    ]
    ids = [run_id_of(thread, n) for thread in looks_alike for n in (0, 1, 2, 10)]
    assert len(set(ids)) == len(ids)
    assert all(ID_PATTERN.fullmatch(i) for i in ids)
    assert not any(i.startswith("langgraph.") for i in ids)  # 0.1's: langgraph.THREAD.N
    assert ID_PATTERN.fullmatch(run_id_of("x" * 200, 10**12))
    # A lone surrogate (from JSON's "\ud800") is not taken for a "?"
    assert len({run_id_of("x\ud800"), run_id_of("x?"), run_id_of("x\udfff")}) == 3


# -- async -----------------------------------------------------------------------------


def test_async_operations_match_the_sync_ones(store: LedgerStore) -> None:
    async def scenario() -> None:
        await store.aput(("test", "a"), "k1", {"v": 1})
        await store.aput(("test", "b"), "k2", {"v": 2})
        item = await store.aget(("test", "a"), "k1")
        assert item is not None and item.value == {"v": 1}
        assert {i.key for i in await store.asearch(("test",))} == {"k1", "k2"}
        assert await store.alist_namespaces(prefix=("test",)) == [("test", "a"), ("test", "b")]
        await store.adelete(("test", "a"), "k1")
        assert await store.aget(("test", "a"), "k1") is None
        results = await store.abatch(
            [GetOp(("test", "b"), "k2"), PutOp(("test",), "k3", {"v": 3}), GetOp(("test",), "x")]
        )
        assert isinstance(results[0], Item) and results[1] is None and results[2] is None

    asyncio.run(scenario())
    assert store.get(("test",), "k3") is not None


def test_concurrent_async_puts_and_gets_all_land(store: LedgerStore) -> None:
    keys = [f"key{i}" for i in range(8)]

    async def scenario() -> list[Item | None]:
        await asyncio.gather(
            *(store.aput(("test", f"n{i % 2}"), k, {"i": i}) for i, k in enumerate(keys))
        )
        return await asyncio.gather(
            *(store.aget(("test", f"n{i % 2}"), k) for i, k in enumerate(keys))
        )

    items = asyncio.run(scenario())

    assert [i.value["i"] if i else None for i in items] == list(range(8))


class _GatedStore(LedgerStore):
    """Its batch waits until the event loop has run another task."""

    released = threading.Event()
    waited: bool | None = None

    def _execute(self, ops: list[Op], thread: str | None) -> list[Result]:
        type(self).waited = self.released.wait(timeout=10)
        return super()._execute(ops, thread)


def test_abatch_does_not_block_the_event_loop(principals: Principals) -> None:
    store = _GatedStore(
        principals.ledger, token=principals.agent_token, approver_token=principals.reviewer_token
    )

    async def release() -> None:
        await asyncio.sleep(0)
        store.released.set()

    async def scenario() -> None:
        await asyncio.gather(store.aput(("test",), "k", {"v": 1}), release())

    asyncio.run(scenario())

    assert _GatedStore.waited is True  # the loop ran release() while the batch waited
    assert store.get(("test",), "k") is not None


# -- inside a graph ----------------------------------------------------------------------


class State(TypedDict):
    greeting: str


def greeting_graph(store: BaseStore) -> Any:
    """A node that reads the user's name and writes a greeting derived from it."""

    def greet(state: State) -> State:
        memories = get_store()
        name = memories.get(("proj-a", "user"), "name")
        greeting = f"Hello, {name.value['text'] if name else 'stranger'}!"
        memories.put(("proj-a", "greetings"), "latest", {"text": greeting})
        return {"greeting": greeting}

    builder = StateGraph(State)
    builder.add_node("greet", greet)
    builder.add_edge(START, "greet")
    builder.add_edge("greet", END)
    return builder.compile(store=store)


def test_a_graph_node_writes_a_memory_derived_from_what_it_read(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("proj-a", "user"), "name", {"text": "Ada"})
    graph = greeting_graph(store)

    out = graph.invoke({"greeting": ""}, {"configurable": {"thread_id": "chat-1"}})

    assert out["greeting"] == "Hello, Ada!"
    name_id = current_id(principals.reviewer, "proj-a", "user/name")
    greeting = principals.reviewer.get(
        current_id(principals.reviewer, "proj-a", "greetings/latest")
    )
    assert greeting.observed == (name_id,)
    item = store.get(("proj-a", "greetings"), "latest")
    assert item is not None and item.value == {"text": "Hello, Ada!"}


def test_revoking_a_memory_hides_the_memories_derived_from_it(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("proj-a", "user"), "name", {"text": "Mallory (a poisoned guess)"})
    greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": "chat-1"}})
    assert store.get(("proj-a", "greetings"), "latest") is not None
    greeting_id = current_id(principals.reviewer, "proj-a", "greetings/latest")

    revocation = principals.reviewer.revoke(
        current_id(principals.reviewer, "proj-a", "user/name"), "the name was a guess"
    )

    assert greeting_id in revocation.stale
    assert principals.reviewer.get(greeting_id).status == Status.STALE
    assert store.get(("proj-a", "greetings"), "latest") is None
    assert store.search(("proj-a",)) == []


def test_deleting_a_memory_through_the_store_hides_what_was_derived_from_it(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("proj-a", "user"), "name", {"text": "Ada"})
    greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": "chat-1"}})

    store.delete(("proj-a", "user"), "name")

    assert store.get(("proj-a", "greetings"), "latest") is None


def test_a_graph_run_without_a_thread_records_nothing_as_observed(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("proj-a", "user"), "name", {"text": "Ada"})

    graph = greeting_graph(store)
    with pytest.warns(NoThreadWarning, match="no thread_id in its config") as said:
        graph.invoke({"greeting": ""})
        graph.invoke({"greeting": ""})  # said once per store

    greeting = principals.reviewer.get(
        current_id(principals.reviewer, "proj-a", "greetings/latest")
    )
    assert greeting.observed == ()
    assert len([w for w in said if w.category is NoThreadWarning]) == 1


def test_a_read_from_an_executor_thread_inside_a_node_is_warned_of_as_unrecorded(
    store: LedgerStore, principals: Principals
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    # Given a node that reads through a thread pool, whose threads do not carry the
    # graph's config (context variables), and a run that made the store serve a thread
    store.put(("proj-a", "user"), "name", {"text": "Ada"})
    greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": "t0"}})

    def greet(state: State) -> State:
        memories = get_store()
        with ThreadPoolExecutor(1) as pool:
            name = pool.submit(memories.get, ("proj-a", "user"), "name").result()
        memories.put(("proj-a", "greetings"), "pooled", {"text": str(name and name.value)})
        return {"greeting": "x"}

    builder = StateGraph(State)
    builder.add_node("greet", greet)
    builder.add_edge(START, "greet")
    builder.add_edge("greet", END)
    # When it runs in a thread, then the read it could not record is warned of, once
    with pytest.warns(NoThreadWarning, match="does not carry a graph.s config") as said:
        for _ in range(2):
            builder.compile(store=store).invoke(
                {"greeting": ""}, {"configurable": {"thread_id": "t"}}
            )
    assert len([w for w in said if w.category is NoThreadWarning]) == 1
    pooled = principals.reviewer.get(current_id(principals.reviewer, "proj-a", "greetings/pooled"))
    assert pooled.observed == ()  # (what the warning is about)
    # while the same read made in the node's own thread is recorded, and not warned of
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoThreadWarning)
        greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": "t2"}})


def test_a_read_from_a_web_servers_worker_thread_outside_graphs_is_not_warned(
    store: LedgerStore, principals: Principals
) -> None:
    # A server's request threads read the store outside any graph: nothing to record
    store.put(("proj-a", "user"), "name", {"text": "Ada"})
    greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": "t0"}})
    said: list[Any] = []

    def request() -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert store.get(("proj-a", "user"), "name") is not None
        said.extend(caught)

    worker = threading.Thread(target=request, name="AnyIO worker thread")
    worker.start()
    worker.join()
    assert [w for w in said if w.category is NoThreadWarning] == []


def test_a_graph_run_in_a_thread_or_a_put_outside_a_graph_is_not_warned(
    store: LedgerStore, principals: Principals
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoThreadWarning)
        store.put(("proj-a", "user"), "name", {"text": "Ada"})
        greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": "t"}})


def test_a_batch_is_refused_before_any_put_where_the_approver_may_not_approve(
    principals: Principals,
) -> None:
    # Given an approver without approve in one of the batch's scopes
    admin = principals.ledger.admin()
    admin.grant("half-reviewer", "proj-a", ["approve", "read"])
    half = LedgerStore(
        principals.ledger,
        token=principals.agent_token,
        approver_token=admin.issue_token("half-reviewer"),
    )
    before = principals.ledger.position
    # When a batch puts in both, it is refused, naming the approver and scope
    batch = [PutOp(("proj-a", "x"), "k", {"v": 1}), PutOp(("test", "x"), "k", {"v": 1})]
    with pytest.raises(AccessDeniedError, match="'half-reviewer' lacks role 'approve' in scope"):
        half.batch(batch)
    # and nothing of it was written
    assert principals.ledger.position == before


def test_a_put_the_approver_cannot_vouch_for_says_so_not_read_again(
    principals: Principals,
) -> None:
    # Given an approver that cannot read a scope the thread reads
    admin = principals.ledger.admin()
    admin.grant("a-only", "proj-a", ["approve", "read"])
    with LedgerStore(
        principals.ledger, token=principals.agent_token, approver_token=principals.reviewer_token
    ) as full:
        full.put(("test", "kb"), "fact", {"v": 1})
    with LedgerStore(
        principals.ledger, token=principals.agent_token, approver_token=admin.issue_token("a-only")
    ) as store:

        def node(state: State) -> State:
            memories = get_store()
            memories.get(("test", "kb"), "fact")
            memories.put(("proj-a", "notes"), "n", {"v": 2})
            return state

        builder = StateGraph(State)
        builder.add_node("n", node)
        builder.add_edge(START, "n")
        builder.add_edge("n", END)
        # When the thread puts what rests on it, the refusal names the put and the
        # approver's missing read, and not reading the key again
        with pytest.raises(InvalidParentError) as refused:
            builder.compile(store=store).invoke(
                {"greeting": ""}, {"configurable": {"thread_id": "t"}}
            )
    said = str(refused.value)
    assert "cannot accept the put of key 'n' of namespace ('proj-a', 'notes'):" in said, said
    assert "the store's approver needs the read role in every scope the thread reads" in said
    assert "read the key again" not in said and "lg-" not in said


def test_a_threads_run_is_opened_by_its_first_store_call_even_a_refused_one(
    store: LedgerStore, principals: Principals
) -> None:
    # Given a graph whose node asks for a memory in a scope the agent cannot read
    def peek(state: State) -> State:
        get_store().get(("secret", "notes"), "plan")
        return state

    builder = StateGraph(State)
    builder.add_node("peek", peek)
    builder.add_edge(START, "peek")
    builder.add_edge("peek", END)
    run = principals.agent.run(run_id_of("t-refused"))
    assert run.state() == "new"

    # When the thread runs, the get is refused
    with pytest.raises(AccessDeniedError, match="secret"):
        builder.compile(store=store).invoke(
            {"greeting": ""}, {"configurable": {"thread_id": "t-refused"}}
        )

    # Then the thread's run was opened all the same (the README: refused or not)
    assert run.state() == "open"


def test_a_search_in_a_node_is_observed_too(store: LedgerStore, principals: Principals) -> None:
    store.put(("proj-a", "facts"), "f1", {"text": "sky is blue"})
    store.put(("proj-a", "facts"), "f2", {"text": "grass is green"})

    def summarise(state: State) -> State:
        memories = get_store()
        facts = memories.search(("proj-a", "facts"))
        text = "; ".join(sorted(f.value["text"] for f in facts))
        memories.put(("proj-a", "summaries"), "all", {"text": text})
        return {"greeting": text}

    builder = StateGraph(State)
    builder.add_node("summarise", summarise)
    builder.add_edge(START, "summarise")
    builder.add_edge("summarise", END)
    builder.compile(store=store).invoke({"greeting": ""}, {"configurable": {"thread_id": "t"}})

    summary = principals.reviewer.get(current_id(principals.reviewer, "proj-a", "summaries/all"))
    assert set(summary.observed) == {
        current_id(principals.reviewer, "proj-a", "facts/f1"),
        current_id(principals.reviewer, "proj-a", "facts/f2"),
    }


def test_a_thread_that_updates_a_memory_it_read_keeps_writing(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("proj-a", "user"), "visits", {"count": 0})

    def count(state: State) -> State:
        memories = get_store()
        seen = memories.get(("proj-a", "user"), "visits")
        assert seen is not None
        visits = seen.value["count"] + 1
        memories.put(("proj-a", "user"), "visits", {"count": visits})
        memories.put(("proj-a", "greetings"), "latest", {"text": f"visit {visits}"})
        return {"greeting": f"visit {visits}"}

    builder = StateGraph(State)
    builder.add_node("count", count)
    builder.add_edge(START, "count")
    builder.add_edge("count", END)
    graph = builder.compile(store=store)
    for _ in range(3):
        graph.invoke({"greeting": ""}, {"configurable": {"thread_id": "chat-7"}})

    visits = store.get(("proj-a", "user"), "visits")
    assert visits is not None and visits.value == {"count": 3}
    greeting = store.get(("proj-a", "greetings"), "latest")
    assert greeting is not None and greeting.value == {"text": "visit 3"}
    latest = principals.reviewer.get(current_id(principals.reviewer, "proj-a", "greetings/latest"))
    visits_id = current_id(principals.reviewer, "proj-a", "user/visits")
    assert visits_id in latest.observed  # it rests on the version the thread wrote
    principals.reviewer.revoke(visits_id, "miscounted")
    assert store.get(("proj-a", "greetings"), "latest") is None


def test_a_thread_goes_on_writing_after_its_own_put_outdates_what_it_read(
    store: LedgerStore, principals: Principals
) -> None:
    # The usual memory loop: look at the namespace, update a counter, write a note.
    # Updating the counter makes the note an earlier run built on it STALE; the
    # thread made that change, so its next note no longer rests on the old note.
    def remember(state: State) -> State:
        memories = get_store()
        seen = memories.search(("proj-a", "notes"))
        counter = next((item.value["n"] for item in seen if item.key == "counter"), 0)
        memories.put(("proj-a", "notes"), "counter", {"n": counter + 1})
        memories.put(("proj-a", "notes"), f"note-{counter}", {"saw": len(seen)})
        return {"greeting": f"note {counter}"}

    graph = one_node_graph(store, remember)
    answers = [
        graph.invoke({"greeting": ""}, {"configurable": {"thread_id": f"t{n}"}})["greeting"]
        for n in range(4)
    ]
    assert answers == ["note 0", "note 1", "note 2", "note 3"]
    counter = store.get(("proj-a", "notes"), "counter")
    assert counter is not None and counter.value == {"n": 4}
    # Each note rests on the counter it was written beside: a later update of the
    # counter makes it STALE (the ledger's rule), and the newest note stays usable.
    reviewer = principals.reviewer
    last = reviewer.get(current_id(reviewer, "proj-a", "notes/note-3"))
    assert current_id(reviewer, "proj-a", "notes/counter") in last.observed
    for older in ("note-1", "note-2"):
        assert store.get(("proj-a", "notes"), older) is None
        [entry] = reviewer.explain("proj-a", f"notes/{older}").entries
        assert entry.record.status == Status.STALE
        assert entry.record.id not in last.observed


def _in_thread(store: LedgerStore, thread: str, step: Callable[[BaseStore], object]) -> None:
    """Run ``step`` with the injected store, as one node of a graph, in ``thread``."""

    def node(state: State) -> State:
        step(get_store())
        return state

    one_node_graph(store, node).invoke({"greeting": ""}, {"configurable": {"thread_id": thread}})


def test_a_threads_own_blind_put_outdating_what_it_read_lets_its_next_put_through(
    store: LedgerStore,
) -> None:
    ns = ("proj-a", "m")
    store.put(ns, "a", {"v": 1})
    _in_thread(store, "setup", lambda s: (s.get(ns, "a"), s.put(ns, "b", {"from_a": 1})))
    # T1 reads b (built on a), then puts a new a without reading it: b goes STALE
    _in_thread(store, "t1", lambda s: s.get(ns, "b"))
    _in_thread(store, "t1", lambda s: s.put(ns, "a", {"v": 2}))
    # Then T1's next put does not rest on b, which its own put outdated
    _in_thread(store, "t1", lambda s: s.put(ns, "c", {"n": 1}))
    item = store.get(ns, "c")
    assert item is not None and item.value == {"n": 1}


def test_what_another_thread_outdated_still_refuses_a_put_until_it_is_read_again(
    store: LedgerStore,
) -> None:
    ns = ("proj-a", "m")
    store.put(ns, "a", {"v": 1})
    _in_thread(store, "setup", lambda s: (s.get(ns, "a"), s.put(ns, "b", {"of_a": 1})))
    _in_thread(store, "t1", lambda s: s.get(ns, "b"))  # T1 rests on b (built on a)
    _in_thread(store, "t2", lambda s: (s.get(ns, "a"), s.put(ns, "a", {"v": 2})))  # b STALE
    _in_thread(store, "t1", lambda s: s.get(ns, "a"))  # T1 reads the new a, not b
    # Then T1 is refused until it reads b again: another thread made the change
    with pytest.raises(InvalidParentError, match=r"get key 'b' of namespace \('proj-a', 'm'\)"):
        _in_thread(store, "t1", lambda s: s.put(ns, "c", {"from_b": 1}))
    _in_thread(store, "t1", lambda s: (s.get(ns, "b"), s.put(ns, "c", {"without_b": 1})))
    item = store.get(ns, "c")
    assert item is not None and item.value == {"without_b": 1}


def one_node_graph(store: BaseStore, node: Callable[[State], State]) -> Any:
    """A graph of the one node ``node``."""
    builder = StateGraph(State)
    builder.add_node(node.__name__, node)
    builder.add_edge(START, node.__name__)
    builder.add_edge(node.__name__, END)
    return builder.compile(store=store)


def get_in_thread(store: BaseStore, thread: str, namespace: tuple[str, ...], key: str) -> Any:
    """``store.get(namespace, key)`` in a node of a graph run in ``thread``."""
    got: list[Any] = []

    def read(state: State) -> State:
        got.append(get_store().get(namespace, key))
        return state

    builder = StateGraph(State)
    builder.add_node("read", read)
    builder.add_edge(START, "read")
    builder.add_edge("read", END)
    builder.compile(store=store).invoke({"greeting": ""}, {"configurable": {"thread_id": thread}})
    return got[0]


def writer_graph(store: BaseStore) -> Any:
    """A node that only writes (it reads nothing in this invocation)."""

    def note(state: State) -> State:
        get_store().put(("proj-a", "notes"), "last", {"text": state["greeting"]})
        return state

    builder = StateGraph(State)
    builder.add_node("note", note)
    builder.add_edge(START, "note")
    builder.add_edge("note", END)
    return builder.compile(store=store)


def test_a_thread_goes_on_after_a_memory_it_read_was_updated_and_read_again(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("proj-a", "user"), "name", {"text": "Ada"})
    graph = greeting_graph(store)
    graph.invoke({"greeting": ""}, {"configurable": {"thread_id": "chat-1"}})
    store.put(("proj-a", "user"), "name", {"text": "Grace"})  # outside the thread

    out = graph.invoke({"greeting": ""}, {"configurable": {"thread_id": "chat-1"}})

    assert out["greeting"] == "Hello, Grace!"
    greeting = principals.reviewer.get(
        current_id(principals.reviewer, "proj-a", "greetings/latest")
    )
    assert greeting.observed == (current_id(principals.reviewer, "proj-a", "user/name"),)


def test_a_thread_that_read_a_withdrawn_memory_is_refused_its_next_put(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("proj-a", "user"), "name", {"text": "Mallory"})
    greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": "chat-1"}})
    name_id = current_id(principals.reviewer, "proj-a", "user/name")
    principals.reviewer.revoke(name_id, "poisoned")

    with pytest.raises(InvalidParentError) as refused:
        writer_graph(store).invoke({"greeting": "hi"}, {"configurable": {"thread_id": "chat-1"}})

    # The refusal names the record and the key to read again as the thread knows it,
    # and the put refused (not the id its version would have had, never written).
    assert name_id in str(refused.value)
    assert "of the put of key 'last' of namespace ('proj-a', 'notes') is" in str(refused.value)
    assert not re.search(r" of 'lg-[0-9a-f-]+'", str(refused.value))
    assert "get key 'name' of namespace ('proj-a', 'user') again in this thread" in str(
        refused.value
    )
    assert store.get(("proj-a", "notes"), "last") is None
    writer_graph(store).invoke({"greeting": "hi"}, {"configurable": {"thread_id": "chat-2"}})
    assert store.get(("proj-a", "notes"), "last") is not None  # a new thread starts clean


def test_a_put_refused_again_after_the_thread_caught_up_names_the_key_to_get_again(
    store: LedgerStore, principals: Principals
) -> None:
    namespace = ("proj-a", "m")
    store.put(namespace, "a", {"n": 1})

    def work(state: State) -> State:
        # The thread reads a, writes b twice (reading each version back); a reviewer
        # revokes a: b rests on a, so b is STALE; the thread follows b to its newer
        # version and its put is tried once more, and refused for b.
        memories = get_store()
        memories.search(namespace)
        memories.put(namespace, "b", {"v": 1})
        memories.search(namespace)
        memories.put(namespace, "b", {"v": 2})
        memories.search(namespace)
        principals.reviewer.revoke(current_id(principals.reviewer, "proj-a", "m/a"), "wrong")
        memories.put(namespace, "c", {"v": 1})
        return state

    with pytest.raises(InvalidParentError) as refused:
        one_node_graph(store, work).invoke({"greeting": ""}, {"configurable": {"thread_id": "t1"}})

    assert "LangGraph thread 't1' read it earlier in ledger run 'langgraph:t1'" in str(
        refused.value
    )
    assert "key 'b' of namespace ('proj-a', 'm') again in this thread" in str(refused.value)
    assert principals.reviewer.records("proj-a", claim_prefix="m/c") == ()


def test_a_thread_s_own_delete_no_more_blocks_its_later_puts_than_its_own_replace(
    store: LedgerStore, principals: Principals
) -> None:
    namespace = ("proj-a", "m")
    store.put(namespace, "a", {"n": 1})

    def work(state: State) -> State:
        # The thread reads a, writes a summary resting on it and reads it back (the
        # usual memory loop), then deletes a: the summary is STALE, by its own change
        memories = get_store()
        memories.get(namespace, "a")
        memories.put(namespace, "summary", {"of": "a"})
        memories.get(namespace, "summary")
        memories.delete(namespace, "a")
        memories.put(namespace, "log", {"t": "done"})
        return state

    one_node_graph(store, work).invoke({"greeting": ""}, {"configurable": {"thread_id": "t1"}})

    # Then its next put goes through, resting on neither a nor the STALE summary
    log = principals.reviewer.get(current_id(principals.reviewer, "proj-a", "m/log"))
    assert (log.status, log.validity, log.observed) == (Status.ACCEPTED, Validity.VALID, ())
    summary = principals.reviewer.records("proj-a", claim_prefix="m/summary")[0]
    assert summary.validity == Validity.NEEDS_REVALIDATION  # what the delete did stands
    # And a delete by someone else still refuses the thread's put until it reads again
    store.put(namespace, "b", {"n": 2})

    def other(state: State) -> State:
        memories = get_store()
        memories.get(namespace, "b")
        memories.put(namespace, "from_b", {"of": "b"})
        memories.get(namespace, "from_b")
        principals.reviewer.revoke(current_id(principals.reviewer, "proj-a", "m/b"), "wrong")
        memories.put(namespace, "log2", {"t": "done"})
        return state

    with pytest.raises(InvalidParentError) as refused:
        one_node_graph(store, other).invoke({"greeting": ""}, {"configurable": {"thread_id": "t2"}})
    assert "key 'from_b' of namespace ('proj-a', 'm') again in this thread" in str(refused.value)


def test_a_thread_refused_for_a_withdrawn_memory_goes_on_once_it_reads_the_key_again(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("proj-a", "user"), "name", {"text": "Mallory"})
    graph = greeting_graph(store)
    graph.invoke({"greeting": ""}, {"configurable": {"thread_id": "chat-1"}})
    principals.reviewer.revoke(current_id(principals.reviewer, "proj-a", "user/name"), "poisoned")
    with pytest.raises(InvalidParentError):
        writer_graph(store).invoke({"greeting": "hi"}, {"configurable": {"thread_id": "chat-1"}})

    # When the thread reads the name again, and finds nothing usable
    out = graph.invoke({"greeting": ""}, {"configurable": {"thread_id": "chat-1"}})

    # Then its put goes through, resting on nothing withdrawn, and so do later ones
    assert out["greeting"] == "Hello, stranger!"
    greeting = principals.reviewer.get(
        current_id(principals.reviewer, "proj-a", "greetings/latest")
    )
    assert greeting.observed == ()
    writer_graph(store).invoke({"greeting": "hi"}, {"configurable": {"thread_id": "chat-1"}})
    assert store.get(("proj-a", "notes"), "last") is not None


def test_a_thread_resumed_by_a_later_store_goes_on_in_a_new_run(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("proj-a", "user"), "name", {"text": "Ada"})
    greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": "chat-1"}})
    store.close()  # the thread's run ended; it cannot be reopened

    with LedgerStore(
        principals.ledger, token=principals.agent_token, approver_token=principals.reviewer_token
    ) as later:
        # (a greeting that changed: one unchanged would be no new version, see
        # test_a_resumed_thread_saving_what_it_saved_before_writes_nothing)
        later.put(("proj-a", "user"), "name", {"text": "Bob"})
        out = greeting_graph(later).invoke(
            {"greeting": ""}, {"configurable": {"thread_id": "chat-1"}}
        )

    assert out["greeting"] == "Hello, Bob!"
    greeting_id = current_id(principals.reviewer, "proj-a", "greetings/latest")
    proposed = principals.reviewer.audit(greeting_id).events[0]
    assert proposed.details["run_id"] == run_id_of("chat-1", 1)
    assert principals.reviewer.get(greeting_id).observed == (
        current_id(principals.reviewer, "proj-a", "user/name"),
    )


class Named(TypedDict):
    name: str
    greeting: str


def test_a_graph_resumed_from_its_checkpoint_by_a_later_store_rests_on_what_it_read(
    store: LedgerStore, principals: Principals
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    def read_name(state: Named) -> dict[str, str]:
        name = get_store().get(("proj-a", "user"), "name")
        return {"name": name.value["text"] if name else "stranger"}

    def greet(state: Named) -> dict[str, str]:
        greeting = f"Hello, {state['name']}!"  # from the checkpoint, read before
        get_store().put(("proj-a", "greetings"), "latest", {"text": greeting})
        return {"greeting": greeting}

    builder = StateGraph(Named)
    builder.add_node("read_name", read_name)
    builder.add_node("greet", greet)
    builder.add_edge(START, "read_name")
    builder.add_edge("read_name", "greet")
    builder.add_edge("greet", END)
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "paused"}}
    # Given a graph paused after reading, and its store closed (the thread's run ended)
    store.put(("proj-a", "user"), "name", {"text": "Ada"})
    builder.compile(store=store, checkpointer=saver, interrupt_before=["greet"]).invoke(
        {"name": "", "greeting": ""}, config
    )
    store.close()
    # When a later store resumes it from its checkpoint
    with LedgerStore(
        principals.ledger, token=principals.agent_token, approver_token=principals.reviewer_token
    ) as later:
        out = builder.compile(store=later, checkpointer=saver).invoke(None, config)
        assert out["greeting"] == "Hello, Ada!"
        # Then the greeting rests on the name read before the pause
        reviewer = principals.reviewer
        name_id = current_id(reviewer, "proj-a", "user/name")
        greeting = reviewer.get(current_id(reviewer, "proj-a", "greetings/latest"))
        assert greeting.observed == (name_id,)
        # and the name's revocation reaches it
        reviewer.revoke(name_id, reason="a guess")
        assert later.get(("proj-a", "greetings"), "latest") is None


def test_a_thread_resumed_by_a_later_store_does_not_carry_what_its_principal_may_no_longer_read(
    store: LedgerStore, principals: Principals
) -> None:
    # Given a thread that read a key in docs, then the agent's read there withdrawn
    store.put(("docs",), "secret", {"v": 1})
    assert get_in_thread(store, "t", ("docs",), "secret") is not None
    store.close()
    principals.ledger.admin().revoke_grant("agent", "docs", ["read"])
    # When a later store serves the thread, its put goes through, resting on nothing
    with LedgerStore(
        principals.ledger, token=principals.agent_token, approver_token=principals.reviewer_token
    ) as later:
        writer_graph(later).invoke({"greeting": "hi"}, {"configurable": {"thread_id": "t"}})
    note = principals.reviewer.get(current_id(principals.reviewer, "proj-a", "notes/last"))
    assert note.observed == ()


def test_a_thread_resumed_does_not_join_the_run_of_a_thread_named_like_its_next_run(
    store: LedgerStore, principals: Principals
) -> None:
    # Given thread "chat" whose first run ended, then thread "chat.1" reading a fact
    writer_graph(store).invoke({"greeting": "one"}, {"configurable": {"thread_id": "chat"}})
    store.close()
    with LedgerStore(
        principals.ledger, token=principals.agent_token, approver_token=principals.reviewer_token
    ) as second:
        second.put(("proj-a", "facts"), "other", {"v": 1})
        assert get_in_thread(second, "chat.1", ("proj-a", "facts"), "other") is not None

        # When thread "chat" comes back and puts without reading
        writer_graph(second).invoke({"greeting": "two"}, {"configurable": {"thread_id": "chat"}})

    # Then it went on in a run of its own, resting on nothing thread "chat.1" read
    note = principals.reviewer.get(current_id(principals.reviewer, "proj-a", "notes/last"))
    assert note.observed == ()
    assert principals.reviewer.audit(note.id).events[0].details["run_id"] == run_id_of("chat", 1)


def test_a_store_goes_on_in_a_threads_next_run_when_another_store_ended_it(
    principals: Principals,
) -> None:
    # Given two stores over one ledger serving one thread
    first = LedgerStore(
        principals.ledger, token=principals.agent_token, approver_token=principals.reviewer_token
    )
    other = LedgerStore(
        principals.ledger, token=principals.agent_token, approver_token=principals.reviewer_token
    )
    config = {"configurable": {"thread_id": "t"}}
    writer_graph(first).invoke({"greeting": "a"}, config)
    other.put(("proj-a", "facts"), "x", {"v": 1})
    other.put(("proj-a", "facts"), "z", {"v": 2})
    assert get_in_thread(other, "t", ("proj-a", "facts"), "x") is not None
    assert get_in_thread(other, "t", ("proj-a", "facts"), "z") is not None

    # When the first is closed (ending the thread's run), the other goes on, in
    # the thread's next run, resting on what the thread read in the ended one
    first.close()
    writer_graph(other).invoke({"greeting": "c"}, config)
    got = get_in_thread(other, "t", ("proj-a", "notes"), "last")
    assert got is not None and got.value == {"text": "c"}
    runs = [principals.agent.run(run_id_of("t", n)).state() for n in range(3)]
    assert runs == ["ended", "open", "new"]
    reviewer = principals.reviewer
    note = reviewer.get(current_id(reviewer, "proj-a", "notes/last"))
    x_id, z_id = (current_id(reviewer, "proj-a", f"facts/{k}") for k in ("x", "z"))
    assert set(note.observed) == {x_id, z_id}
    # and a put resting on a read withdrawn since is refused, as in one run
    reviewer.revoke(z_id, reason="wrong")
    principals.agent.run(run_id_of("t", 1)).resume().end()  # as another store's close
    with pytest.raises(InvalidParentError, match="REVOKED"):
        writer_graph(other).invoke({"greeting": "e"}, config)
    other.close()


def test_a_thread_resumed_by_store_after_store_keeps_going(principals: Principals) -> None:
    # One store per request on one long thread: each close ends the thread's run
    for turn in range(40):
        with LedgerStore(
            principals.ledger,
            token=principals.agent_token,
            approver_token=principals.reviewer_token,
        ) as store:
            writer_graph(store).invoke(
                {"greeting": str(turn)}, {"configurable": {"thread_id": "long"}}
            )
    latest = current_id(principals.reviewer, "proj-a", "notes/last")
    proposed = principals.reviewer.audit(latest).events[0]
    assert proposed.details["run_id"] == run_id_of("long", 39)
    assert principals.agent.run(run_id_of("long", 40)).state() == "new"


def test_closing_a_store_ends_its_threads_whose_runs_another_store_ended(
    store: LedgerStore, principals: Principals
) -> None:
    # Given two stores over one ledger, the second going on with the first's thread
    store.put(("proj-a", "user"), "name", {"text": "Ada"})
    other = LedgerStore(principals.ledger, token=principals.agent_token)
    for thread in ("chat-1", "chat-2"):
        greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": thread}})
    greeting_graph(other).invoke({"greeting": ""}, {"configurable": {"thread_id": "chat-1"}})
    other.close()  # ends chat-1's run

    store.close()  # chat-1's run is ended already; chat-2's is ended now

    for thread in ("chat-1", "chat-2"):
        with pytest.raises(InvalidInputError, match="has ended"):
            principals.agent.run(run_id_of(thread)).resume()


def test_a_store_left_with_an_error_raises_that_error_with_a_note(
    principals: Principals,
) -> None:
    # Given a store whose thread's run cannot be ended (its token revoked)
    admin = principals.ledger.admin()
    token = admin.issue_token("agent")
    with (
        pytest.raises(RuntimeError, match="the application's own error") as raised,
        LedgerStore(principals.ledger, token=token) as store,
    ):
        greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": "t"}})
        admin.revoke_token(token)
        raise RuntimeError("the application's own error")
    # Then the block's error is the one raised, and it says why the run stays open
    (note,) = raised.value.__notes__
    assert note.startswith("the store's thread runs could not all be ended: ")
    assert "revoked" in note


def test_a_put_by_a_principal_without_read_is_refused_for_want_of_it(
    principals: Principals,
) -> None:
    # Which version a put replaces is read: a principal that may only propose
    # is refused by name, on a new key and an existing one alike
    admin = principals.ledger.admin()
    admin.grant("blind", "test", ["propose"])
    principals.agent.propose("test", "memories/old", {"v": 1}, Kind.FACT)
    before = principals.ledger.position
    with LedgerStore(principals.ledger, token=admin.issue_token("blind")) as blind:
        for key in ("old", "new"):
            with pytest.raises(
                AccessDeniedError,
                match="put refused: 'blind' lacks role 'read' in scope 'test'",
            ):
                blind.put(("test", "memories"), key, {"v": 2})
    assert principals.ledger.position == before + 1  # the token issued, nothing else


def test_a_thread_that_deletes_a_memory_it_read_keeps_writing(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("proj-a", "memories"), "old", {"text": "stale plan"})

    def tidy(state: State) -> State:
        memories = get_store()
        found = memories.search(("proj-a", "memories"))
        for item in found:
            memories.delete(("proj-a", "memories"), item.key)
        memories.put(("proj-a", "memories"), f"new-{len(found)}", {"text": state["greeting"]})
        return state

    graph = one_node_graph(store, tidy)
    config = {"configurable": {"thread_id": "manage"}}
    graph.invoke({"greeting": "first"}, config)
    graph.invoke({"greeting": "second"}, config)  # deletes new-1 it found, then puts

    assert [i.key for i in store.search(("proj-a", "memories"))] == ["new-1"]
    latest = principals.reviewer.get(current_id(principals.reviewer, "proj-a", "memories/new-1"))
    assert latest.observed == ()  # nothing it deleted is a basis for it
    assert store.get(("proj-a", "memories"), "old") is None


def test_a_thread_whose_search_no_longer_finds_a_deleted_memory_goes_on(
    store: LedgerStore, principals: Principals
) -> None:
    store.put(("proj-a", "facts"), "f1", {"text": "sky is blue"})
    store.put(("proj-a", "facts"), "f2", {"text": "grass is green"})

    def summarise(state: State) -> State:
        memories = get_store()
        text = "; ".join(sorted(f.value["text"] for f in memories.search(("proj-a", "facts"))))
        memories.put(("proj-a", "summaries"), "all", {"text": text})
        return {"greeting": text}

    graph = one_node_graph(store, summarise)
    config = {"configurable": {"thread_id": "recall"}}
    graph.invoke({"greeting": ""}, config)
    f1 = current_id(principals.reviewer, "proj-a", "facts/f1")
    store.delete(("proj-a", "facts"), "f1")  # by another thread (none here)

    out = graph.invoke({"greeting": ""}, config)

    assert out["greeting"] == "grass is green"
    summary = principals.reviewer.get(current_id(principals.reviewer, "proj-a", "summaries/all"))
    assert summary.observed == (current_id(principals.reviewer, "proj-a", "facts/f2"),)
    assert f1 in principals.agent.run(run_id_of("recall")).resume().reads  # still a read


def test_a_thread_whose_own_version_another_thread_deleted_goes_on_once_it_reads_the_key(
    store: LedgerStore,
) -> None:
    # Given thread T read k, put a new version of it and, resting on that, put j
    ns = ("proj-a", "m")
    store.put(ns, "k", {"n": 1})
    _in_thread(store, "t", lambda s: (s.get(ns, "k"), s.put(ns, "k", {"n": 2})))
    _in_thread(store, "t", lambda s: s.put(ns, "j", {"n": 1}))
    # and thread U deleted k (T's own version)
    _in_thread(store, "u", lambda s: (s.get(ns, "k"), s.delete(ns, "k")))

    # When T reads k again (gone), then puts j
    _in_thread(store, "t", lambda s: (s.get(ns, "k"), s.put(ns, "j", {"n": 2})))

    # Then the put goes through, resting on nothing deleted
    item = store.get(ns, "j")
    assert item is not None and item.value == {"n": 2}


def test_a_thread_a_closed_store_serves_again_still_rests_on_what_it_read(
    store: LedgerStore, principals: Principals
) -> None:
    # Given thread T read the user's name, and the store serving it closed
    ns = ("proj-a", "user")
    store.put(ns, "name", {"text": "Ada"})
    _in_thread(store, "t", lambda s: s.get(ns, "name"))
    store.close()
    # and another writer replaced the name since
    with LedgerStore(
        principals.ledger, token=principals.agent_token, approver_token=principals.reviewer_token
    ) as other:
        other.put(ns, "name", {"text": "Mallory"})

    # Then T's next put through the store, in its next run, is refused as it would
    # have been in the first: it rests on what T read there
    with pytest.raises(InvalidParentError, match="SUPERSEDED"):
        _in_thread(store, "t", lambda s: s.put(("proj-a", "g"), "greet", {"t": "Hello Ada"}))
    assert principals.agent.run(run_id_of("t", 1)).state() == "open"
    # and once T reads the name again, its put rests on the new one
    _in_thread(store, "t", lambda s: (s.get(ns, "name"), s.put(("proj-a", "g"), "greet", {})))
    greet = current_id(principals.reviewer, "proj-a", "g/greet")
    assert principals.reviewer.get(greet).observed == (
        current_id(principals.reviewer, "proj-a", "user/name"),
    )
    store.close()


def test_a_closed_store_serving_a_thread_again_carries_what_another_store_read_in_it(
    store: LedgerStore, principals: Principals
) -> None:
    # Given two stores serving thread T: this one read the city, the other the name
    ns = ("proj-a", "user")
    store.put(ns, "city", {"text": "Paris"})
    store.put(ns, "name", {"text": "Ada"})
    other = LedgerStore(
        principals.ledger, token=principals.agent_token, approver_token=principals.reviewer_token
    )
    _in_thread(store, "t", lambda s: s.get(ns, "city"))
    _in_thread(other, "t", lambda s: s.get(ns, "name"))
    # and this store closed, then the name was replaced
    store.close()
    store.put(ns, "name", {"text": "Mallory"})

    # Then T's next put through this store rests on the name the other store read
    with pytest.raises(InvalidParentError, match="SUPERSEDED"):
        _in_thread(store, "t", lambda s: s.put(("proj-a", "g"), "greet", {"t": "Hello Ada"}))
    # and once the name is deleted and T reads it again (gone), T's puts go on
    store.delete(ns, "name")
    store.close()
    _in_thread(store, "t", lambda s: (s.get(ns, "name"), s.put(("proj-a", "g"), "greet", {})))
    item = store.get(("proj-a", "g"), "greet")
    assert item is not None and item.value == {}
    other.close()


def test_a_store_closed_and_served_again_each_turn_carries_only_what_the_thread_rests_on(
    store: LedgerStore, principals: Principals
) -> None:
    # Given a thread counting in one key, its store closed after each turn
    ns = ("proj-a", "c")
    store.put(ns, "n", {"n": 0})

    def count(s: BaseStore) -> None:
        item = s.get(ns, "n")
        assert item is not None
        s.put(ns, "n", {"n": item.value["n"] + 1})

    for _ in range(12):
        _in_thread(store, "t", count)
        store.close()
    _in_thread(store, "t", count)  # a thirteenth turn, in run 12, left open

    # Then it counted each turn, and run 12 holds the version carried over and
    # the one read now, not every version read before
    item = store.get(ns, "n")
    assert item is not None and item.value == {"n": 13}
    assert len(principals.agent.run(run_id_of("t", 12)).resume().reads) <= 3


def test_a_thread_the_store_let_go_comes_back_to_its_run_and_what_it_read(
    store: LedgerStore, principals: Principals, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ledger.integrations.langgraph.store.MAX_THREADS", 1)
    store.put(("proj-a", "user"), "name", {"text": "Ada"})
    greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": "t1"}})
    writer_graph(store).invoke({"greeting": "x"}, {"configurable": {"thread_id": "t2"}})

    # t1 was let go for t2; it comes back and writes without reading
    writer_graph(store).invoke({"greeting": "back"}, {"configurable": {"thread_id": "t1"}})

    note = principals.reviewer.get(current_id(principals.reviewer, "proj-a", "notes/last"))
    name = current_id(principals.reviewer, "proj-a", "user/name")
    assert note.observed == (name,)  # what it read before is still what it rests on
    proposed = principals.reviewer.audit(note.id).events[0]
    assert proposed.details["run_id"] == run_id_of("t1")  # its own run, continued
    principals.reviewer.revoke(name, "a guess")
    assert principals.reviewer.get(note.id).status == Status.STALE
    # Let go again, it reads the key anew (nothing usable) and goes on writing
    writer_graph(store).invoke({"greeting": "x"}, {"configurable": {"thread_id": "t2"}})
    out = greeting_graph(store).invoke({"greeting": ""}, {"configurable": {"thread_id": "t1"}})
    assert out["greeting"] == "Hello, stranger!"


def test_get_answers_and_refuses_exactly_as_a_batch_of_one_get_op(
    store: LedgerStore, principals: Principals
) -> None:
    """``get`` outside a graph skips the batch machinery: same items, same errors."""
    store.put(("test",), "k", {"v": 1})
    store.put(("test", "deep"), "k", {"v": 2})
    store.put(("test",), "clash", {"v": 1})
    principals.reviewer.accept(principals.agent.propose("test", "clash", {"v": 2}, Kind.FACT))

    for namespace, key in ((("test",), "k"), (["test", "deep"], "k"), (("test",), "absent")):
        direct, batched = store.get(namespace, key), store.batch([GetOp(tuple(namespace), key)])
        assert batched == [direct]
    item = store.get(("test",), "k")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (("test",), "k", {"v": 1})
    for namespace, key, error in (
        (("test",), "clash", MemoryConflictError),
        (("te.st",), "k", InvalidNamespaceError),
        (("",), "k", InvalidNamespaceError),
        (("test", ["deep"]), "k", InvalidNamespaceError),  # unhashable: no cache look-up
        (("test", 7), "k", InvalidNamespaceError),
        (("secret",), "k", AccessDeniedError),
        ((), "k", NamespaceLabelError),
    ):
        for _ in range(2):  # the second time as the first (a refusal is never cached)
            with pytest.raises(error) as again:
                store.get(namespace, key)
        with pytest.raises(error) as direct_error:
            store.get(namespace, key)
        assert str(again.value) == str(direct_error.value)
        with pytest.raises(error) as batched_error:
            store.batch([GetOp(namespace, key)])
        assert str(direct_error.value) == str(batched_error.value)


def test_a_child_forked_while_a_thread_puts_a_key_can_put_it_in_its_own_ledger(
    tmp_path: Path,
) -> None:
    import os
    import select

    from ledger.integrations.langgraph.keys import key_lock

    # Given a thread of this process in the middle of a put of ("s", "k") (holding
    # that key's lock) when another thread forks
    held, leave = threading.Event(), threading.Event()

    def putting() -> None:
        with key_lock("s", "user/k"):
            held.set()
            leave.wait(30)

    thread = threading.Thread(target=putting)
    thread.start()
    held.wait(30)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child opens a ledger of its own and puts the same key
        with Ledger.open(f"sqlite:///{tmp_path / 'child.db'}") as led:
            admin = led.admin()
            admin.grant("agent", "s", ["propose", "read"])
            with LedgerStore(led, token=admin.issue_token("agent")) as child_store:
                child_store.put(("s", "user"), "k", {"v": 1})
        os.write(write_end, b"put")
        os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], 30)
        said = os.read(read_end, 10) if ready else b"hung"
    finally:
        if not ready:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(read_end)
        leave.set()
        thread.join()
    # Then the put went through: the lock the parent's thread held is not the child's
    assert said == b"put"
