"""LedgerStore beside LangGraph's own stores: the same operations, the same answers.

Each scenario runs on a ``LedgerStore`` (puts accepted at once by an approver, so
a put is readable as in any store), on LangGraph's ``InMemoryStore`` and on its
``SqliteStore``, and the answers are compared. The scenarios follow LangGraph's
own store tests (batch order, get/put/delete, search, list_namespaces with
prefix/suffix/wildcards/max_depth/pages, namespace validation, async). Where the
ledger answers differently on purpose (access, provenance, a value or a filter
the ledger reads more strictly, what it does not offer), the last section asserts
the difference and says why.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from ledger import Ledger, Session, Status
from ledger.errors import (
    AccessDeniedError,
    InvalidInputError,
    InvalidValueError,
    LedgerError,
)
from ledger.integrations.langgraph import (
    LedgerStore,
    NamespaceLabelError,
    UnsupportedStoreOperationError,
)

#: First namespace labels used below: the scopes the store's principals hold roles in.
SCOPES = (
    "a", "admin", "b", "docs", "flags", "foo", "foo2", "foobar", "guests", "h",
    "items", "langgraph", "namespace", "prod", "t", "test", "uid", "users", "valid", "x",
)  # fmt: skip

LEDGER = "LedgerStore"
MEMORY = "InMemoryStore"
SQLITE = "SqliteStore"


@dataclass
class Stores:
    """The three stores side by side, the ledger behind the LedgerStore, and its reviewer."""

    ledger: Ledger
    reviewer: Session
    by_name: dict[str, BaseStore]

    @property
    def store(self) -> LedgerStore:
        store = self.by_name[LEDGER]
        assert isinstance(store, LedgerStore)
        return store

    def answers(self, scenario: Callable[[BaseStore], Any]) -> dict[str, Any]:
        """What each store answers to ``scenario`` (a refusal as ``Refused``)."""
        out: dict[str, Any] = {}
        for name, store in self.by_name.items():
            try:
                out[name] = shape(scenario(store))
            except Exception as exc:
                out[name] = Refused.of(exc)
        return out

    def agree(self, scenario: Callable[[BaseStore], Any]) -> Any:
        """Run ``scenario`` on every store; they must answer alike. Returns the answer."""
        got = self.answers(scenario)
        assert got[LEDGER] == got[MEMORY] == got[SQLITE], got
        return got[LEDGER]


@dataclass(frozen=True)
class Refused:
    """A refusal, by the LangGraph-level kind of error (what a graph would catch)."""

    kind: str

    @staticmethod
    def of(exc: Exception) -> Refused:
        for kind in (InvalidNamespaceError, NotImplementedError, ValueError, TypeError):
            if isinstance(exc, kind):
                return Refused(kind.__name__)
        return Refused(type(exc).__name__)


def shape(answer: Any) -> Any:
    """An answer without what stores may legitimately differ in (the times)."""
    if isinstance(answer, Item):
        return (answer.namespace, answer.key, answer.value)
    if isinstance(answer, list):
        return [shape(a) for a in answer]
    return answer


@pytest.fixture
def stores(ledger: Ledger) -> Iterator[Stores]:
    admin = ledger.admin()
    for scope in SCOPES:
        admin.grant("agent", scope, ["propose", "read"])
        admin.grant("reviewer", scope, ["approve", "read"])
    reviewer_token = admin.issue_token("reviewer")
    with (
        SqliteStore.from_conn_string(":memory:") as sqlite_store,
        LedgerStore(
            ledger, token=admin.issue_token("agent"), approver_token=reviewer_token
        ) as ledger_store,
    ):
        sqlite_store.setup()
        yield Stores(
            ledger=ledger,
            reviewer=ledger.authenticate(reviewer_token),
            by_name={LEDGER: ledger_store, MEMORY: InMemoryStore(), SQLITE: sqlite_store},
        )


def put_all(store: BaseStore, namespaces: list[tuple[str, ...]]) -> None:
    for i, namespace in enumerate(namespaces):
        store.put(namespace, f"id_{i}", {"data": f"value_{i:02d}"})


def found(items: list[SearchItem]) -> set[tuple[tuple[str, ...], str]]:
    return {(i.namespace, i.key) for i in items}


# -- batches ---------------------------------------------------------------------------


def test_a_batch_answers_each_operation_in_place_from_the_state_before_its_puts(
    stores: Stores,
) -> None:
    def scenario(store: BaseStore) -> list[Any]:
        store.put(("test", "foo"), "key1", {"data": "value1"})
        store.put(("test", "bar"), "key2", {"data": "value2"})
        first = store.batch(
            [
                GetOp(("test", "foo"), "key1"),
                PutOp(("test", "bar"), "key2", {"data": "changed"}),
                SearchOp(("test",), filter={"data": "value1"}),
                ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
                GetOp(("test", "foo"), "key3"),
                PutOp(("test", "new"), "key3", {"data": "value3"}),
                GetOp(("test", "bar"), "key2"),
                ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            ]
        )
        after = [store.get(("test", "bar"), "key2"), store.get(("test", "new"), "key3")]
        return [first, after]

    first, after = stores.agree(scenario)

    assert first[0] == (("test", "foo"), "key1", {"data": "value1"})
    assert first[1] is None and first[4] is None and first[5] is None
    assert first[2] == [(("test", "foo"), "key1", {"data": "value1"})]
    assert first[3] == [("test", "bar"), ("test", "foo")]  # not yet ("test", "new")
    assert first[6] == (("test", "bar"), "key2", {"data": "value2"})  # the put comes after
    assert after == [
        (("test", "bar"), "key2", {"data": "changed"}),
        (("test", "new"), "key3", {"data": "value3"}),
    ]


def test_in_a_batch_the_last_put_or_delete_of_a_key_wins(stores: Stores) -> None:
    def scenario(store: BaseStore) -> list[Any]:
        store.put(("test",), "gone", {"v": 0})
        results = store.batch(
            [
                PutOp(("test",), "key1", {"v": 1}),
                PutOp(("test",), "key1", {"v": 2}),
                PutOp(("test",), "key2", {"v": 1}),
                PutOp(("test",), "key2", None),
                PutOp(("test",), "key3", None),
                PutOp(("test",), "key3", {"v": 3}),
                PutOp(("test",), "gone", None),
                PutOp(("test",), "never", None),
            ]
        )
        keys = ["key1", "key2", "key3", "gone", "never"]
        return [results, [store.get(("test",), k) for k in keys]]

    results, items = stores.agree(scenario)

    assert results == [None] * 8
    assert items == [(("test",), "key1", {"v": 2}), None, (("test",), "key3", {"v": 3}), None, None]


def test_a_batch_with_one_bad_namespace_writes_nothing(stores: Stores) -> None:
    # LangGraph's test_invalid_namespace_batch (SqliteStore): the bad op may come
    # after a good put. InMemoryStore checks labels in its methods, not in batch.
    bad_namespaces: list[tuple[Any, ...]] = [("foo.bar",), ("foo", ""), ("foo", 1)]
    for namespace in bad_namespaces:
        ops: list[Op] = [
            GetOp(namespace, "key"),
            PutOp(namespace, "key", {"changed": True}),
            PutOp(namespace, "key", None),
            SearchOp(namespace),
            ListNamespacesOp((MatchCondition("prefix", namespace),)),
            ListNamespacesOp((MatchCondition("suffix", namespace),)),
        ]
        for op in ops:
            got = stores.answers(after_a_good_put(op))
            assert got[LEDGER] == got[SQLITE] == Refused("InvalidNamespaceError"), op
    got = stores.answers(lambda store: store.get(("valid",), "key"))
    assert got[LEDGER] is None and got[SQLITE] is None


def after_a_good_put(op: Op) -> Callable[[BaseStore], Any]:
    """A batch of a valid put, then ``op``."""
    return lambda store: store.batch([PutOp(("valid",), "key", {"new": True}), op])


# -- get, put, delete ------------------------------------------------------------------


def test_get_put_update_and_delete(stores: Stores) -> None:
    namespace = ("test", "documents")

    def scenario(store: BaseStore) -> list[Any]:
        seen = [store.get(namespace, "doc1")]
        store.put(namespace, "doc1", {"title": "Test Document", "content": "Hello, World!"})
        seen.append(store.get(namespace, "doc1"))
        store.put(namespace, "doc1", {"title": "Updated Document"})
        seen.append(store.get(namespace, "doc1"))
        seen.append(store.get(("test", "other_documents"), "doc1"))
        store.delete(namespace, "doc1")
        seen.append(store.get(namespace, "doc1"))
        store.delete(namespace, "doc1")  # deleting what is gone does nothing
        store.delete(namespace, "never-there")
        seen.append(store.get(namespace, "doc1"))
        return seen

    assert stores.agree(scenario) == [
        None,
        (namespace, "doc1", {"title": "Test Document", "content": "Hello, World!"}),
        (namespace, "doc1", {"title": "Updated Document"}),
        None,
        None,
        None,
    ]


def test_keys_and_labels_of_any_text_round_trip(stores: Stores) -> None:
    keys = ["x/y", "50%", "a.b", " spaced ", "é", "1", "*", "tab\there"]

    def scenario(store: BaseStore) -> list[Any]:
        for key in keys:
            store.put(("test", "x/y", "é", "*"), key, {"key": key})
        store.put(("test", "sub"), "", {"key": ""})  # an empty key below the first label
        return [
            [store.get(("test", "x/y", "é", "*"), key) for key in keys],
            store.get(("test", "sub"), ""),
            sorted(found(store.search(("test",), limit=20))),
            store.list_namespaces(prefix=("test",)),
        ]

    items, empty, listed, namespaces = stores.agree(scenario)

    assert [value["key"] for _, _, value in items] == keys
    assert empty == (("test", "sub"), "", {"key": ""})
    assert len(listed) == len(keys) + 1
    assert namespaces == [("test", "sub"), ("test", "x/y", "é", "*")]


def test_a_get_answers_langgraphs_item(stores: Stores) -> None:
    def scenario(store: BaseStore) -> list[Any]:
        store.put(("test",), "k", {"v": 1})
        item = store.get(("test",), "k", refresh_ttl=True)
        [hit] = store.search(("test",), refresh_ttl=False)
        assert item is not None
        return [
            type(item).__name__,
            type(hit).__name__,
            hit.score,
            sorted(item.dict()),
            type(item.namespace).__name__,
            isinstance(item.created_at, datetime) and item.created_at <= item.updated_at,
        ]

    assert stores.agree(scenario) == [
        "Item",
        "SearchItem",
        None,
        ["created_at", "key", "namespace", "updated_at", "value"],
        "tuple",
        True,
    ]
    # The ledger's times are aware, as InMemoryStore's (SqliteStore's are naive).
    item = stores.store.get(("test",), "k")
    assert item is not None and item.created_at.tzinfo is not None


def test_a_value_put_or_handed_back_is_a_copy_as_in_sqlite_store(stores: Stores) -> None:
    # InMemoryStore keeps a shallow copy of what was put and hands back the item
    # it keeps: changing either changes what the next get answers.
    def scenario(store: BaseStore) -> list[Any]:
        given: dict[str, Any] = {"v": 1, "list": [1]}
        store.put(("test",), "k", given)
        given["list"].append("after put")
        item = store.get(("test",), "k")
        assert item is not None
        item.value["v"] = "changed"
        store.search(("test",))[0].value["list"].append("after search")
        return [store.get(("test",), "k"), store.search(("test",))]

    got = stores.answers(scenario)

    assert (
        got[LEDGER]
        == got[SQLITE]
        == [
            (("test",), "k", {"v": 1, "list": [1]}),
            [(("test",), "k", {"v": 1, "list": [1]})],
        ]
    )
    changed = {"v": "changed", "list": [1, "after put", "after search"]}
    assert got[MEMORY][0] == (("test",), "k", changed)


def test_an_index_of_false_none_or_no_fields_asks_for_nothing_and_is_accepted(
    stores: Stores,
) -> None:
    def scenario(store: BaseStore) -> list[Any]:
        store.put(("test",), "none", {"v": 1}, index=None)
        store.put(("test",), "false", {"v": 2}, index=False)
        store.put(("test",), "empty", {"v": 3}, index=[])
        return [store.get(("test",), k) for k in ("none", "false", "empty")]

    assert [value for _, _, value in stores.agree(scenario)] == [{"v": 1}, {"v": 2}, {"v": 3}]


# -- search ----------------------------------------------------------------------------


def test_search_by_prefix_filter_limit_and_offset(stores: Stores) -> None:
    data = [
        (("test", "docs"), "doc1", {"title": "First", "author": "Alice", "tags": ["important"]}),
        (("test", "docs"), "doc2", {"title": "Second", "author": "Bob", "tags": ["draft"]}),
        (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]}),
        (("prod", "docs"), "doc3", {"title": "Prod", "author": "Alice", "tags": ["draft"]}),
    ]

    def scenario(store: BaseStore) -> list[Any]:
        for namespace, key, value in data:
            store.put(namespace, key, value)
        return [
            found(store.search(("test",))),
            found(store.search(("test", "docs"))),
            found(store.search(("test",), filter={"author": "Alice"})),
            found(store.search((), filter={"tags": ["draft"]})),
            found(store.search((), filter={"author": "Alice", "tags": ["draft"]})),
            len(store.search(("test",), limit=2)),
            len(store.search(("test",), offset=2)),
            len(store.search(("test",), offset=9)),
            store.search(("test",), limit=0),
            found(store.search(("test", "docs", "deeper"))),
            found(store.search(("t",))),  # a scope whose name begins "test"
        ]

    answer = stores.agree(scenario)

    assert answer[:5] == [
        {(("test", "docs"), "doc1"), (("test", "docs"), "doc2"), (("test", "images"), "img1")},
        {(("test", "docs"), "doc1"), (("test", "docs"), "doc2")},
        {(("test", "docs"), "doc1"), (("test", "images"), "img1")},
        {(("test", "docs"), "doc2"), (("prod", "docs"), "doc3")},
        {(("prod", "docs"), "doc3")},
    ]
    assert answer[5:] == [2, 1, 0, [], set(), set()]


def test_pages_of_a_search_are_disjoint_and_cover_it(stores: Stores) -> None:
    def scenario(store: BaseStore) -> list[Any]:
        for i in range(5):
            store.put(("test", "pages"), f"k{i}", {"i": i})
        pages = [found(store.search(("test",), limit=2, offset=o)) for o in (0, 2, 4)]
        union = set().union(*pages)
        return [[len(p) for p in pages], sum(len(p) for p in pages) == len(union), len(union)]

    assert stores.agree(scenario) == [[2, 2, 1], True, 5]


def test_search_stops_at_label_boundaries_and_is_case_sensitive(stores: Stores) -> None:
    # LangGraph's test_search_namespace_segment_boundary and ..._is_case_sensitive.
    namespaces = [
        ("foo",),
        ("foo", "child"),
        ("foo", "child", "deep"),
        ("foobar",),
        ("foobar", "baz"),
        ("foo2",),
        ("test", "Foo"),
        ("test", "foo"),
    ]

    def scenario(store: BaseStore) -> list[Any]:
        for namespace in namespaces:
            store.put(namespace, "k", {"v": 1})
        return [
            {i.namespace for i in store.search(prefix, limit=100)}
            for prefix in [("foo",), ("foobar",), ("foo2",), ("test", "foo"), ("test", "Foo")]
        ]

    assert stores.agree(scenario) == [
        {("foo",), ("foo", "child"), ("foo", "child", "deep")},
        {("foobar",), ("foobar", "baz")},
        {("foo2",)},
        {("test", "foo")},
        {("test", "Foo")},
    ]


def test_search_filters_where_langgraphs_stores_agree(stores: Stores) -> None:
    values = {
        "p10": {"price": 10, "name": "ten", "tags": ["a", "b"], "note": None},
        "p20": {"price": 20, "name": "twenty", "tags": ["b"]},
        "p30": {"price": 30.5, "name": "O'Brien's", "tags": []},
        "neg": {"price": -10, "name": "minus"},
    }
    filters: list[dict[str, Any]] = [
        {"price": 10},
        {"price": 10.0},
        {"price": {"$eq": 20}},
        {"price": {"$ne": 20}},
        {"price": {"$gt": 15}},
        {"price": {"$gte": 20}},
        {"price": {"$lt": 0}},
        {"price": {"$lte": 20}},
        {"price": {"$gt": 0, "$lt": 25}},
        {"price": {"$lt": math.inf}},
        {"price": {"$gt": -math.inf}},
        {"price": {"$lt": 10**100}},
        {"name": "O'Brien's"},
        {"name": "public' OR '1'='1"},
        {"name": "ten", "price": 10},
        {"name": "ten", "price": 20},
        {"tags": ["b"]},
        {"tags": []},
        {"note": None},  # a null field, and a field that is missing, equal null
        {"missing": None},
        {"price": "10"},  # a string is not a number
    ]

    def scenario(store: BaseStore) -> list[Any]:
        for key, value in values.items():
            store.put(("items",), key, value)
        return [sorted(i.key for i in store.search(("items",), filter=f)) for f in filters]

    answer = stores.agree(scenario)

    assert answer == [
        ["p10"],
        ["p10"],
        ["p20"],
        ["neg", "p10", "p30"],
        ["p20", "p30"],
        ["p20", "p30"],
        ["neg"],
        ["neg", "p10", "p20"],
        ["p10", "p20"],
        ["neg", "p10", "p20", "p30"],
        ["neg", "p10", "p20", "p30"],
        ["neg", "p10", "p20", "p30"],
        ["p30"],
        [],
        ["p10"],
        [],
        ["p20"],
        ["p30"],
        ["neg", "p10", "p20", "p30"],
        ["neg", "p10", "p20", "p30"],
        [],
    ]


def test_an_unknown_filter_operator_is_refused_as_a_value_error(stores: Stores) -> None:
    def scenario(store: BaseStore) -> Any:
        store.put(("items",), "k", {"v": 1})
        return store.search(("items",), filter={"v": {"$in": [1]}})

    assert stores.agree(scenario) == Refused("ValueError")
    with pytest.raises(InvalidInputError, match=r"'\$in' is not one of"):
        stores.store.search(("items",), filter={"v": {"$in": [1]}})


# -- list_namespaces -------------------------------------------------------------------


def test_list_namespaces_with_prefix_suffix_wildcards_depth_and_pages(stores: Stores) -> None:
    # LangGraph's test_list_namespaces_basic (checkpoint/tests/test_store.py).
    namespaces = [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
        ("users", "123"),
        ("users", "456", "settings"),
        ("admin", "users", "789"),
    ]

    def scenario(store: BaseStore) -> list[Any]:
        put_all(store, namespaces)
        return [
            store.list_namespaces(),
            store.list_namespaces(prefix=("a", "b")),
            store.list_namespaces(suffix=("f",)),
            store.list_namespaces(prefix=("a",), suffix=("f",)),
            store.list_namespaces(prefix=("a", "b"), max_depth=3),
            store.list_namespaces(prefix=("a", "b"), limit=2),
            store.list_namespaces(prefix=("a", "b"), offset=2),
            store.list_namespaces(prefix=("a", "*", "f")),
            store.list_namespaces(suffix=("*", "f")),
            store.list_namespaces(prefix=("x",)),  # nothing there
            store.list_namespaces(prefix=("users", "123")),
            store.list_namespaces(prefix=("*", "users")),
            store.list_namespaces(max_depth=1),
            store.list_namespaces(max_depth=2, limit=3, offset=1),
            store.list_namespaces(max_depth=10),
            store.list_namespaces(suffix=("a", "b", "c", "d", "e")),
            store.list_namespaces(prefix=("a", "b", "c", "d")),
            store.list_namespaces(limit=0),
            store.batch([ListNamespacesOp(match_conditions=(MatchCondition("prefix", ()),))]),
        ]

    answer = stores.agree(scenario)

    assert answer[0] == sorted(namespaces)
    assert answer[1:5] == [
        [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")],
        [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")],
        [("a", "b", "f"), ("a", "c", "f")],
        [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")],
    ]
    assert answer[5:9] == [
        [("a", "b", "c"), ("a", "b", "d", "e")],
        [("a", "b", "d", "i"), ("a", "b", "f")],
        [("a", "b", "f"), ("a", "c", "f")],
        [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")],
    ]
    assert answer[9:12] == [[], [("users", "123")], [("admin", "users", "789")]]
    assert answer[12] == [("a",), ("admin",), ("b",), ("users",)]
    assert answer[13] == [("a", "c"), ("admin", "users"), ("b", "a")]
    assert answer[14] == sorted(namespaces)
    assert answer[15:18] == [[], [], []]
    assert answer[18] == [sorted(namespaces)]


def test_list_namespaces_with_wildcards_and_pagination(stores: Stores) -> None:
    # LangGraph's test_list_namespaces_with_wildcards and ..._pagination.
    namespaces = [
        ("users", "123"),
        ("users", "456"),
        ("users", "789", "settings"),
        ("admin", "users", "789"),
        ("guests", "123"),
        ("guests", "456", "preferences"),
    ] + [("namespace", f"sub_{i:02d}") for i in range(20)]

    def scenario(store: BaseStore) -> list[Any]:
        put_all(store, namespaces)
        return [
            store.list_namespaces(prefix=("users", "*")),
            store.list_namespaces(suffix=("*", "preferences")),
            store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")),
            store.list_namespaces(prefix=("namespace",), limit=5, offset=0),
            store.list_namespaces(prefix=("namespace",), limit=5, offset=15),
            store.list_namespaces(prefix=("namespace",), limit=5, offset=20),
        ]

    answer = stores.agree(scenario)

    assert answer[:3] == [
        [("users", "123"), ("users", "456"), ("users", "789", "settings")],
        [("guests", "456", "preferences")],
        [],
    ]
    assert answer[3] == [("namespace", f"sub_{i:02d}") for i in range(5)]
    assert answer[4] == [("namespace", f"sub_{i:02d}") for i in range(15, 20)]
    assert answer[5] == []


def test_list_namespaces_matches_whole_labels(stores: Stores) -> None:
    # LangGraph's test_list_namespaces_segment_boundary and ..._trailing_newline.
    namespaces = [
        ("foo",),
        ("foo", "child"),
        ("foobar",),
        ("foobar", "baz"),
        ("uid", "users", "alice"),
        ("uid", "users", "malice"),
        ("uid", "a", "b", "alice"),
        ("uid", "users", "alice\n"),
        ("uid", "star*"),
        ("uid", "starX"),
    ]

    def scenario(store: BaseStore) -> list[Any]:
        put_all(store, namespaces)
        return [
            set(store.list_namespaces(prefix=("foo",), limit=100)),
            set(store.list_namespaces(suffix=("alice",), limit=100)),
            set(store.list_namespaces(prefix=("uid", "*", "alice"), limit=100)),
            set(store.list_namespaces(prefix=("uid", "users", "alice"), limit=100)),
            set(store.list_namespaces(prefix=("uid", "star*"), limit=100)),
        ]

    assert stores.agree(scenario) == [
        {("foo",), ("foo", "child")},
        {("uid", "users", "alice"), ("uid", "a", "b", "alice")},
        {("uid", "users", "alice")},
        {("uid", "users", "alice")},
        {("uid", "star*")},
    ]


def test_list_namespaces_with_several_conditions_keeps_what_meets_them_all(
    stores: Stores,
) -> None:
    def scenario(store: BaseStore) -> list[Any]:
        for namespace in [("a", "b", "c"), ("a", "b", "d"), ("a", "x", "c"), ("a", "b", "c", "e")]:
            store.put(namespace, "k", {"v": 1})
        both = (MatchCondition("prefix", ("a", "b")), MatchCondition("prefix", ("a", "*", "c")))
        ends = (MatchCondition("suffix", ("c",)), MatchCondition("suffix", ("*", "c")))
        return store.batch(
            [
                ListNamespacesOp(match_conditions=both),
                ListNamespacesOp(match_conditions=both[::-1]),
                ListNamespacesOp(match_conditions=ends, max_depth=2),
            ]
        )

    assert stores.agree(scenario) == [
        [("a", "b", "c"), ("a", "b", "c", "e")],
        [("a", "b", "c"), ("a", "b", "c", "e")],
        [("a", "b"), ("a", "x")],
    ]


def test_list_namespaces_of_an_empty_store_is_empty(stores: Stores) -> None:
    assert stores.agree(lambda store: store.list_namespaces()) == []
    assert stores.agree(lambda store: store.list_namespaces(max_depth=0)) == []


def test_max_depth_zero_cuts_every_namespace_to_the_empty_one_as_in_memory_store(
    stores: Stores,
) -> None:
    # InMemoryStore (LangGraph's reference store) answers [()]; SqliteStore
    # answers [("",)], a namespace with an empty label no store accepts
    # (PostgresStore's SQL joins no labels into NULL). The ledger follows
    # InMemoryStore.
    def scenario(store: BaseStore) -> list[Any]:
        store.put(("test", "a"), "k", {"v": 1})
        store.put(("prod",), "k", {"v": 1})
        return [
            store.list_namespaces(max_depth=0),
            store.list_namespaces(prefix=("test",), max_depth=0),
            store.list_namespaces(prefix=("x",), max_depth=0),
        ]

    got = stores.answers(scenario)

    assert got[LEDGER] == got[MEMORY] == [[()], [()], []]
    assert got[SQLITE] == [[("",)], [("",)], []]


# -- namespace validation --------------------------------------------------------------


def test_namespaces_langgraph_refuses_are_refused(stores: Stores) -> None:
    # LangGraph's test_cannot_put_empty_namespace.
    doc = {"foo": "bar"}
    refused: list[Callable[[BaseStore], Any]] = [
        lambda s: s.put((), "foo", doc),
        lambda s: s.put(("the", "thing.about"), "foo", doc),
        lambda s: s.put(("some", "fun", ""), "foo", doc),
        lambda s: s.put(("langgraph", "foo"), "bar", doc),
        lambda s: s.put(("test", 1), "foo", doc),  # type: ignore[arg-type]
        lambda s: s.put(("test", "nul\x00"), "foo", doc),
        lambda s: s.get(("test", "a.b"), "foo"),
        lambda s: s.search(("test", "")),
        lambda s: s.delete(("test", "a.b"), "foo"),
        lambda s: s.list_namespaces(prefix=("a.b",)),
        lambda s: s.list_namespaces(suffix=("",)),
        lambda s: asyncio.run(s.aput(("langgraph", "foo"), "bar", doc)),
    ]
    for scenario in refused[:-1]:
        assert stores.agree(scenario) == Refused("InvalidNamespaceError")
    # SqliteStore has no async methods: the async refusal against InMemoryStore only.
    got = stores.answers(refused[-1])
    assert got[LEDGER] == got[MEMORY] == Refused("InvalidNamespaceError")

    # "langgraph" is refused only as the root label.
    def nested(store: BaseStore) -> list[Any]:
        store.put(("foo", "langgraph", "foo"), "bar", doc)
        answer: list[Any] = [store.get(("foo", "langgraph", "foo"), "bar")]
        answer.append(found(store.search(("foo", "langgraph", "foo"))))
        store.delete(("foo", "langgraph", "foo"), "bar")
        return [*answer, store.get(("foo", "langgraph", "foo"), "bar")]

    assert stores.agree(nested) == [
        (("foo", "langgraph", "foo"), "bar", doc),
        {(("foo", "langgraph", "foo"), "bar")},
        None,
    ]


def test_a_ledger_refusal_of_a_namespace_is_a_ledger_error_naming_it(stores: Stores) -> None:
    store = stores.store
    before = stores.ledger.position
    with pytest.raises(NamespaceLabelError, match="cannot be empty") as empty:
        store.put((), "k", {"v": 1})
    with pytest.raises(NamespaceLabelError, match="'langgraph'") as root:
        store.put(("langgraph", "foo"), "k", {"v": 1})
    for refusal in (empty.value, root.value):
        assert isinstance(refusal, LedgerError) and isinstance(refusal, InvalidNamespaceError)
    assert stores.ledger.position == before


def test_a_namespace_given_as_a_string_is_refused_not_split_into_letters(
    stores: Stores,
) -> None:
    # ("t", "e", "s", "t") would be a namespace of scope "t", which the agent can
    # write to: a bare string must not silently become one label per letter.
    store = stores.store
    before = stores.ledger.position
    calls: list[Callable[[], Any]] = [
        lambda: store.put("test", "k", {"v": 1}),  # type: ignore[arg-type]
        lambda: store.get("test", "k"),  # type: ignore[arg-type]
        lambda: store.delete("test", "k"),  # type: ignore[arg-type]
        lambda: store.search("test"),  # type: ignore[arg-type]
        lambda: store.list_namespaces(prefix="test"),  # type: ignore[arg-type]
        lambda: store.list_namespaces(suffix="test"),  # type: ignore[arg-type]
        lambda: store.batch([GetOp("test", "k")]),  # type: ignore[arg-type]
        lambda: asyncio.run(store.aget("test", "k")),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(NamespaceLabelError, match=r"'test' is a str.*\('test',\)"):
            call()
    with pytest.raises(NamespaceLabelError, match="got NoneType"):
        store.batch([GetOp(None, "k")])  # type: ignore[arg-type]
    assert stores.ledger.position == before
    assert store.list_namespaces() == []

    # SqliteStore takes the string letter by letter; InMemoryStore keys it whole.
    def scenario(s: BaseStore) -> Any:
        s.put("test", "k", {"v": 1})  # type: ignore[arg-type]
        return s.list_namespaces()

    got = stores.answers(scenario)
    assert got[SQLITE] == [("t", "e", "s", "t")]
    assert got[MEMORY] == ["test"]
    assert got[LEDGER] == Refused("InvalidNamespaceError")
    # A list is a sequence of labels, as SqliteStore takes it.
    store.put(["test", "listed"], "k", {"v": 1})  # type: ignore[arg-type]
    assert store.search(["test"]) == store.search(("test",))  # type: ignore[arg-type]
    assert store.list_namespaces(prefix=["test"]) == [("test", "listed")]  # type: ignore[arg-type]


def test_a_key_or_condition_of_the_wrong_type_is_refused_by_name(stores: Stores) -> None:
    store = stores.store
    before = stores.ledger.position
    with pytest.raises(InvalidInputError, match="key must be a string, got list"):
        store.batch([GetOp(("test",), ["k"])])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="key must be a string, got list"):
        store.batch([PutOp(("test",), ["k"], {"v": 1})])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="key must be a string, got int"):
        store.batch([PutOp(("test",), 1, {"v": 1})])  # type: ignore[arg-type]
    one = MatchCondition("prefix", ("test",))
    with pytest.raises(InvalidInputError, match=r"a tuple of MatchCondition.*\(condition,\)"):
        store.batch([ListNamespacesOp(match_conditions=one)])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"match_type='infix'.* is not a prefix or suffix"):
        store.batch([ListNamespacesOp(match_conditions=(MatchCondition("infix", ("a",)),))])  # type: ignore[arg-type]
    assert stores.ledger.position == before


def test_a_delete_is_checked_as_langgraph_checks_it_not_as_a_put(stores: Stores) -> None:
    # BaseStore.delete refuses bad labels only: the put-only rules (no empty
    # namespace, no "langgraph" root) do not apply to it.
    led, reviewer = stores.ledger, stores.reviewer
    # A record of a scope named "langgraph", proposed through the library.
    agent = led.authenticate(led.admin().issue_token("agent"))
    written = agent.propose("langgraph", "foo/bar", {"v": 1}, "fact")
    reviewer.accept(written)
    store = stores.store
    assert stores.agree(lambda s: s.delete(("langgraph", "foo"), "missing")) is None

    assert store.get(("langgraph", "foo"), "bar") is not None
    store.delete(("langgraph", "foo"), "bar")

    assert store.get(("langgraph", "foo"), "bar") is None
    assert reviewer.get(written).status == Status.REVOKED
    # An empty namespace names no scope: a delete there is refused as a get is.
    calls: list[Callable[[], Any]] = [lambda: store.get((), "k"), lambda: store.delete((), "k")]
    for call in calls:
        with pytest.raises(NamespaceLabelError, match=r"namespace \(\) has fewer than scope_depth"):
            call()


# -- async -----------------------------------------------------------------------------


def test_async_operations_answer_as_in_memory_store(stores: Stores) -> None:
    async def scenario(store: BaseStore) -> list[Any]:
        await store.aput(("test", "a"), "k", {"v": 1})
        await store.aput(("test", "b"), "k", {"v": 2})
        answer: list[Any] = [
            await store.aget(("test", "a"), "k"),
            found(await store.asearch(("test",), filter={"v": {"$gt": 1}})),
            await store.alist_namespaces(prefix=("test",)),
            await store.alist_namespaces(max_depth=0),
        ]
        await store.adelete(("test", "a"), "k")
        answer.append(await store.aget(("test", "a"), "k"))
        answer.append(
            await store.abatch([GetOp(("test", "b"), "k"), PutOp(("test", "b"), "k", None)])
        )
        answer.append(await store.aget(("test", "b"), "k"))
        return answer

    got = stores.answers(lambda store: asyncio.run(scenario(store)))

    assert (
        got[LEDGER]
        == got[MEMORY]
        == [
            (("test", "a"), "k", {"v": 1}),
            {(("test", "b"), "k")},
            [("test", "a"), ("test", "b")],
            [()],
            None,
            [(("test", "b"), "k", {"v": 2}), None],
            None,
        ]
    )
    assert got[SQLITE] == Refused("NotImplementedError")  # it has AsyncSqliteStore for that


# -- where the ledger answers differently, and why -------------------------------------


def test_puts_are_versions_and_deletes_revocations_behind_the_same_answers(
    stores: Stores,
) -> None:
    # SPEC 13.4: a second put supersedes, a delete revokes; get answers as any store.
    def scenario(store: BaseStore) -> list[Any]:
        store.put(("test",), "k", {"v": 1})
        store.put(("test",), "k", {"v": 2})
        item = store.get(("test",), "k")
        store.delete(("test",), "k")
        return [item, store.get(("test",), "k")]

    assert stores.agree(scenario) == [(("test",), "k", {"v": 2}), None]
    history = stores.reviewer.explain("test", "k").entries
    assert sorted(entry.record.status.value for entry in history) == ["REVOKED", "SUPERSEDED"]


def test_without_an_approver_a_put_is_not_read_back_until_accepted(stores: Stores) -> None:
    # SPEC 13.4: get and search see usable records only; a candidate is not one.
    led = stores.ledger
    with LedgerStore(led, token=led.admin().issue_token("agent")) as review_store:
        review_store.put(("test",), "k", {"v": 1})
        assert review_store.get(("test",), "k") is None
        assert review_store.search(("test",)) == []
        assert review_store.list_namespaces() == []
        [candidate] = stores.reviewer.records("test", status="CANDIDATE")
        stores.reviewer.accept(candidate.id)
        item = review_store.get(("test",), "k")
        assert item is not None and item.value == {"v": 1}


def test_search_lists_scope_by_scope_and_newest_version_first(stores: Stores) -> None:
    # The stores order differently among themselves: InMemoryStore by first
    # insertion, SqliteStore by updated_at (to the second). The ledger lists a
    # scope at a time, in name order, the newest version first within a scope.
    def scenario(store: BaseStore) -> list[Any]:
        store.put(("test", "x"), "a", {"v": 1})
        store.put(("prod",), "b", {"v": 2})
        store.put(("test",), "c", {"v": 3})
        store.put(("test", "x"), "a", {"v": 4})
        return [(i.namespace, i.key) for i in store.search(())]

    got = stores.answers(scenario)

    assert sorted(got[LEDGER]) == sorted(got[MEMORY]) == sorted(got[SQLITE])
    assert got[LEDGER] == [(("prod",), "b"), (("test", "x"), "a"), (("test",), "c")]
    assert got[MEMORY] == [(("test", "x"), "a"), (("prod",), "b"), (("test",), "c")]


def test_filters_read_values_as_json_where_langgraphs_stores_differ(stores: Stores) -> None:
    values: dict[str, dict[str, Any]] = {
        "true": {"v": True, "d": {"x": 1, "y": 2}},
        "one": {"v": 1, "d": {"x": 1}},
        "none": {"w": 0},
    }
    filters: list[dict[str, Any]] = [
        {"v": True},  # a boolean is not the number 1
        {"v": 1},
        {"v": {"$ne": 1}},  # a missing field fails $ne, as in SqliteStore
        {"d": {"x": 1}},  # a nested mapping matches whole, as jsonb equality does
        {"d.x": 1},  # a dotted name reaches into it, as in SqliteStore
    ]

    def scenario(store: BaseStore) -> list[Any]:
        for key, value in values.items():
            store.put(("flags",), key, value)
        answer: list[Any] = []
        for f in filters:
            try:
                answer.append(sorted(i.key for i in store.search(("flags",), filter=f)))
            except ValueError:
                answer.append("refused")
        return answer

    got = stores.answers(scenario)

    assert got[LEDGER] == [["true"], ["one"], ["true"], ["one"], ["one", "true"]]
    assert got[MEMORY] == [["one", "true"], ["one", "true"], ["none"], ["one", "true"], []]
    assert got[SQLITE] == [["one", "true"], ["one", "true"], [], "refused", ["one", "true"]]


def test_values_the_ledger_cannot_hold_as_given_are_refused_by_name(stores: Stores) -> None:
    # InMemoryStore keeps any object; SqliteStore turns some into strings or nulls
    # and fails on others. The ledger hands back what was put, or refuses it.
    store = stores.store
    before = stores.ledger.position
    cases: list[tuple[Any, str]] = [
        ({"when": datetime(2026, 1, 1, tzinfo=UTC)}, "datetime"),
        ({"x": math.nan}, "NaN"),
        ({"n": 2**70}, "64-bit"),
        ({1: "x"}, "non-string key 1"),
        ({"pair": (1, 2)}, "tuple"),
    ]
    for value, why in cases:
        with pytest.raises(InvalidValueError, match=why):
            store.put(("test",), "k", value)
    with pytest.raises(InvalidInputError, match="must be a mapping or None, got str"):
        store.put(("test",), "k", "text")  # type: ignore[arg-type]
    assert stores.ledger.position == before
    assert stores.answers(lambda s: s.put(("test",), "k", "text"))[MEMORY] == Refused("ValueError")  # type: ignore[arg-type]


def test_what_the_ledger_does_not_offer_is_refused_where_other_stores_ignore_it(
    stores: Stores,
) -> None:
    # No semantic index, no refreshable TTL: refused (a NotImplementedError, as
    # BaseStore.put's own TTL refusal), never silently dropped.
    scenarios: list[Callable[[BaseStore], Any]] = [
        lambda s: s.search(("test",), query="what does the user like?"),
        lambda s: s.put(("test",), "k", {"text": "x"}, index=["text"]),
        lambda s: s.batch([PutOp(("test",), "k", {"text": "x"}, ttl=5.0)]),
        lambda s: s.put(("test",), "k", {"text": "x"}, ttl=5.0),
    ]
    for scenario in scenarios:
        got = stores.answers(scenario)
        assert got[LEDGER] == Refused("NotImplementedError")
        assert got[SQLITE] != Refused("NotImplementedError")  # it ignores or supports them
    with pytest.raises(UnsupportedStoreOperationError, match="no semantic index"):
        stores.store.search(("test",), query="anything")
    assert stores.store.get(("test",), "k") is None


def test_a_batch_put_under_the_langgraph_root_is_refused_as_a_put_is(stores: Stores) -> None:
    # LangGraph's stores take it through batch (BaseStore.put refuses it); the
    # ledger refuses it on every path, so no path writes what put refuses.
    got = stores.answers(lambda s: s.batch([PutOp(("langgraph", "foo"), "bar", {"v": 1})]))

    assert got[MEMORY] == got[SQLITE] == [None]
    assert got[LEDGER] == Refused("InvalidNamespaceError")


def test_scopes_without_grants_and_labels_that_cannot_be_scopes_are_refused(
    stores: Stores,
) -> None:
    # Scope isolation: an empty answer would hide that the principal may not look.
    store = stores.store
    calls: list[Callable[[], Any]] = [
        lambda: store.get(("nosuch",), "k"),
        lambda: store.search(("nosuch",)),
        lambda: store.list_namespaces(prefix=("nosuch",)),
        lambda: store.delete(("nosuch",), "k"),
    ]
    for call in calls:
        with pytest.raises(AccessDeniedError, match="'nosuch'"):
            call()
    with pytest.raises(NamespaceLabelError, match="'user 1'"):
        store.search(("user 1",))
    assert stores.answers(lambda s: s.get(("nosuch",), "k"))[MEMORY] is None


def test_negative_pages_and_depths_are_refused(stores: Stores) -> None:
    # LangGraph's stores read a negative limit, offset or depth each their own way
    # (a Python slice, SQL's LIMIT -1); an unknown match type, which they skip,
    # is refused too (test_a_key_or_condition_of_the_wrong_type_is_refused_by_name).
    store = stores.store
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: store.search(("test",), limit=-1), "search limit"),
        (lambda: store.search(("test",), offset=-1), "search offset"),
        (lambda: store.list_namespaces(limit=-1), "list_namespaces limit"),
        (lambda: store.list_namespaces(max_depth=-1), "list_namespaces max_depth"),
    ]
    for call, what in cases:
        with pytest.raises(InvalidInputError, match=f"{what} must be a non-negative int"):
            call()
    got = stores.answers(lambda s: s.search(("test",), limit=-1))
    assert got[MEMORY] == [] and got[LEDGER] == Refused("ValueError")


def test_a_namespace_only_read_or_emptied_is_not_listed_as_in_sqlite_store(
    stores: Stores,
) -> None:
    # InMemoryStore lists a namespace once it was looked into (its dict of
    # namespaces fills on a read) or after its last item was deleted.
    def scenario(store: BaseStore) -> list[Any]:
        store.get(("test", "read"), "k")
        store.put(("test", "emptied"), "k", {"v": 1})
        store.delete(("test", "emptied"), "k")
        store.put(("test", "kept"), "k", {"v": 1})
        return store.list_namespaces()

    got = stores.answers(scenario)

    assert got[LEDGER] == got[SQLITE] == [("test", "kept")]
    assert got[MEMORY] == [("test", "emptied"), ("test", "kept"), ("test", "read")]


def test_created_at_is_the_time_of_the_current_version_as_in_memory_store(
    stores: Stores,
) -> None:
    # SqliteStore keeps the first put's created_at; InMemoryStore and the ledger
    # give the current version's (the earlier ones are in the ledger's history).
    stores.store.put(("test",), "k", {"v": 1})
    first = stores.store.get(("test",), "k")
    stores.store.put(("test",), "k", {"v": 2})
    second = stores.store.get(("test",), "k")

    assert first is not None and second is not None
    assert second.created_at == second.updated_at >= first.created_at
    [version] = stores.reviewer.records("test", status=Status.ACCEPTED)
    assert second.created_at == version.created_at
