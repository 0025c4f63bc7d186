"""The usual LangGraph memory loop over a ``LedgerStore``, on every backend.

Each turn a node searches every memory of the user into the prompt and puts one
more; now and then it corrects an old memory by putting its key again (a second
put supersedes the first: SPEC §13.3). By default what a thread is shown is
observed on what it puts (SPEC §13.4), so each memory rests on every memory
before it, and correcting one makes every memory put after it STALE. With
``observe_search=False`` a search is context, not a basis: the loop keeps every
memory usable, and ``get`` is still observed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypedDict

import pytest
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from ledger import Kind, Ledger, Session, Status, Validity
from ledger.errors import InvalidInputError, InvalidKindError, InvalidParentError
from ledger.integrations.langgraph import LedgerStore

NS = ("proj-a", "memories", "u1")
#: The turns of the loop: eight new memories, then a correction of the oldest.
TURNS = 9
#: Turns per chat session (a LangGraph thread).
SESSION = 5


class Turn(TypedDict):
    turn: int


def remember(state: Turn) -> Turn:
    """One turn: every memory into the prompt, then one put (the last turn
    corrects the oldest memory shown)."""
    store = get_store()
    memories = store.search(NS, limit=1000)
    turn = state["turn"]
    if turn == TURNS - 1:
        oldest = memories[-1]  # the store's own puts are listed newest first
        store.put(NS, oldest.key, {"text": oldest.value["text"] + " (corrected)"})
    else:
        store.put(NS, f"m{turn}", {"text": f"fact {turn}", "prompt": len(memories)})
    return state


class Node(Protocol):
    def __call__(self, state: Turn) -> Turn: ...


def graph_of(store: BaseStore, node: Node) -> Any:
    builder = StateGraph(Turn)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    return builder.compile(store=store)


def run_the_loop(store: LedgerStore) -> None:
    graph = graph_of(store, remember)
    for turn in range(TURNS):
        graph.invoke({"turn": turn}, {"configurable": {"thread_id": f"chat-{turn // SESSION}"}})


def usable_keys(store: LedgerStore) -> list[str]:
    return sorted(item.key for item in store.search(NS, limit=1000))


def record_of(reviewer: Session, key: str) -> Any:
    """The usable-or-STALE record of a memory (the one not SUPERSEDED)."""
    [record] = [
        e.record
        for e in reviewer.explain(NS[0], f"memories/u1/{key}").entries
        if e.record.status != Status.SUPERSEDED
    ]
    return record


@pytest.fixture
def tokens(ledger: Ledger) -> dict[str, str]:
    admin = ledger.admin()
    admin.grant("agent", NS[0], ["propose", "read"])
    admin.grant("reviewer", NS[0], ["approve", "read"])
    return {"agent": admin.issue_token("agent"), "reviewer": admin.issue_token("reviewer")}


def open_store(ledger: Ledger, tokens: dict[str, str], **options: Any) -> LedgerStore:
    return LedgerStore(ledger, token=tokens["agent"], approver_token=tokens["reviewer"], **options)


ALL_KEYS = sorted(f"m{turn}" for turn in range(TURNS - 1))


def test_by_default_correcting_one_memory_makes_every_later_memory_stale(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    with open_store(ledger, tokens) as store:
        # When the loop runs, correcting m0 at its last turn
        run_the_loop(store)
        # Then only the correction is left usable: every memory put after m0 was
        # shown m0, so rests on it, and its new version made them STALE
        assert usable_keys(store) == ["m0"]
        reviewer = ledger.authenticate(tokens["reviewer"])
        for key in ALL_KEYS[1:]:
            assert record_of(reviewer, key).status == Status.STALE, key


def test_with_observe_search_false_the_memory_loop_keeps_every_memory_usable(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    with open_store(ledger, tokens, observe_search=False) as store:
        # When the same loop runs
        run_the_loop(store)
        # Then every memory is usable, the oldest as corrected
        assert usable_keys(store) == ALL_KEYS
        oldest = store.get(NS, "m0")
        assert oldest is not None and oldest.value == {"text": "fact 0 (corrected)"}
        # and what a search showed is observed on nothing
        reviewer = ledger.authenticate(tokens["reviewer"])
        for key in ALL_KEYS:
            record = record_of(reviewer, key)
            assert (record.status, record.validity) == (Status.ACCEPTED, Validity.VALID), key
            assert record.observed == (), key
        last = store.get(NS, "m7")
        assert last is not None and last.value["prompt"] == 7  # it was shown m0 to m6


def test_with_observe_search_false_what_a_thread_gets_is_still_observed(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    with open_store(ledger, tokens, observe_search=False) as store:
        store.put(NS, "name", {"text": "Ada"})
        store.put(NS, "city", {"text": "Paris"})

        def greet(state: Turn) -> Turn:
            memories = get_store()
            memories.search(NS)
            name = memories.get(NS, "name")
            assert name is not None
            memories.put(NS, "greeting", {"text": f"Hello, {name.value['text']}!"})
            return state

        graph_of(store, greet).invoke({"turn": 0}, {"configurable": {"thread_id": "t"}})

        reviewer = ledger.authenticate(tokens["reviewer"])
        greeting = record_of(reviewer, "greeting")
        assert greeting.observed == (record_of(reviewer, "name").id,)
        # and revoking what it got still hides what was derived from it
        reviewer.revoke(record_of(reviewer, "name").id, "a guess")
        assert store.get(NS, "greeting") is None


def steps(*each: Callable[[BaseStore], None]) -> Node:
    """A node doing ``each[turn]`` with the injected store."""

    def node(state: Turn) -> Turn:
        each[state["turn"]](get_store())
        return state

    return node


def get_missing(store: BaseStore) -> None:
    assert store.get(NS, "k") is None


def search_and_put(store: BaseStore) -> None:
    store.search(NS)
    store.put(NS, "k", {"v": "mine"})


def get_and_put(store: BaseStore) -> None:
    store.get(NS, "k")
    store.put(NS, "k", {"v": "mine"})


def test_with_observe_search_false_a_search_does_not_count_as_reading_a_key(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    # A key the thread got as missing stays guarded though a search showed it
    # since: only a get tells the thread's checks what the key holds now.
    with open_store(ledger, tokens, observe_search=False) as store:
        graph = graph_of(store, steps(get_missing, search_and_put, get_and_put))
        config = {"configurable": {"thread_id": "t"}}
        graph.invoke({"turn": 0}, config)
        store.put(NS, "k", {"v": "theirs"})  # put meanwhile, outside the thread
        with pytest.raises(InvalidParentError, match=r"key 'k' of namespace .* was missing"):
            graph.invoke({"turn": 1}, config)
        graph.invoke({"turn": 2}, config)
        item = store.get(NS, "k")
        assert item is not None and item.value == {"v": "mine"}


def test_by_default_a_search_counts_as_reading_a_key(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    # A search showing the key is how the thread learns it is there now.
    with open_store(ledger, tokens) as store:
        graph = graph_of(store, steps(get_missing, search_and_put))
        config = {"configurable": {"thread_id": "t"}}
        graph.invoke({"turn": 0}, config)
        store.put(NS, "k", {"v": "theirs"})
        graph.invoke({"turn": 1}, config)
        item = store.get(NS, "k")
        assert item is not None and item.value == {"v": "mine"}


@pytest.mark.parametrize("given", ["no", 0, 1, None])
def test_observe_search_must_be_a_bool(
    ledger: Ledger, tokens: dict[str, str], given: object
) -> None:
    with pytest.raises(InvalidInputError, match=rf"observe_search must be a bool, got {given!r}"):
        open_store(ledger, tokens, observe_search=given)


@pytest.mark.parametrize("given", ["evidence", Kind.EVIDENCE, "note"])
def test_a_store_of_a_kind_it_cannot_put_is_refused_when_made(
    ledger: Ledger, tokens: dict[str, str], given: object
) -> None:
    # Evidence is made by capture: every put of it would be refused, and its
    # values (snapshot references) are no items
    with pytest.raises(InvalidKindError, match=r"^kind 'evidence' cannot be|'note' is not"):
        open_store(ledger, tokens, kind=given)


def test_the_store_says_whether_it_observes_searches(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    with (
        open_store(ledger, tokens) as store,
        open_store(ledger, tokens, observe_search=False) as context_only,
    ):
        assert "observe_search=True" in repr(store)
        assert store.observe_search is True
        assert repr(context_only).endswith("observe_search=False)")
        assert context_only.observe_search is False


def test_a_memory_made_stale_by_a_correction_is_revalidated_on_the_new_version(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    with open_store(ledger, tokens) as store:
        run_the_loop(store)
        reviewer = ledger.authenticate(tokens["reviewer"])
        m1 = record_of(reviewer, "m1")
        new_m0 = record_of(reviewer, "m0")
        assert m1.status == Status.STALE
        # When the reviewer revalidates m1 as it is, the refusal says the way out:
        # the new version of m0, as a parent
        with pytest.raises(InvalidParentError) as refused:
            reviewer.revalidate(m1.id, note="still true")
        said = str(refused.value)
        assert f"is SUPERSEDED (superseded by {new_m0.id})" in said, said
        assert f"with parents naming the newest version of that claim ({new_m0.id!r}" in said, said
        # and following it works
        reviewer.revalidate(m1.id, note="still true", parents=[new_m0.id])
        item = store.get(NS, "m1")
        assert item is not None and item.value["text"] == "fact 1"


def save_profile_then_note(state: Turn) -> Turn:
    """A turn that saves the profile whether or not it changed (as nodes do), then
    puts a note resting on it."""
    store = get_store()
    store.get(NS, "profile")
    store.put(NS, "profile", {"name": "Ada"})
    profile = store.get(NS, "profile")
    assert profile is not None
    store.put(NS, f"n{state['turn']}", {"text": f"note for {profile.value['name']}"})
    return state


def test_putting_a_key_again_with_its_value_writes_nothing_and_keeps_what_rests_on_it(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    with open_store(ledger, tokens) as store:
        graph = graph_of(store, save_profile_then_note)
        # When three turns each save the same profile and put a note on it
        for turn in range(3):
            graph.invoke({"turn": turn}, {"configurable": {"thread_id": "chat"}})
        # Then the profile has one version and every note is usable, as in any store
        reviewer = ledger.authenticate(tokens["reviewer"])
        versions = reviewer.explain(NS[0], "memories/u1/profile").entries
        assert [e.record.status for e in versions] == [Status.ACCEPTED]
        assert usable_keys(store) == ["n0", "n1", "n2", "profile"]
        profile = versions[0].record.id
        for note in ("n0", "n1", "n2"):
            assert record_of(reviewer, note).observed == (profile,), note
        # and a put of the same value outside a graph writes nothing either
        position = ledger.position
        store.put(NS, "profile", {"name": "Ada"})
        assert ledger.position == position
        # while a changed value is a new version, and what rested on the old goes STALE
        store.put(NS, "profile", {"name": "Ada", "city": "Paris"})
        assert usable_keys(store) == ["profile"]
        assert record_of(reviewer, "n0").status == Status.STALE


def test_a_resumed_thread_saving_what_it_saved_before_writes_nothing(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    def save_profile(state: Turn) -> Turn:  # as a graph resumed from its checkpoint does
        get_store().put(NS, "profile", {"name": "Ada"})
        return state

    def note_on_profile(state: Turn) -> Turn:
        memories = get_store()
        profile = memories.get(NS, "profile")
        assert profile is not None
        memories.put(NS, "note", {"text": f"note for {profile.value['name']}"})
        return state

    reviewer = ledger.authenticate(tokens["reviewer"])

    def versions() -> list[str]:
        return [e.record.id for e in reviewer.explain(NS[0], "memories/u1/profile").entries]

    # Given thread "chat" saved the profile (unread), and thread "notes" a note on it,
    # in a store now closed
    with open_store(ledger, tokens) as store:
        graph_of(store, save_profile).invoke({"turn": 0}, {"configurable": {"thread_id": "chat"}})
        graph_of(store, note_on_profile).invoke(
            {"turn": 0}, {"configurable": {"thread_id": "notes"}}
        )
    saved = versions()
    assert len(saved) == 1
    # When a later store resumes "chat" (its next run), which saves the same profile
    # without reading it
    with open_store(ledger, tokens) as store:
        graph_of(store, save_profile).invoke({"turn": 1}, {"configurable": {"thread_id": "chat"}})
        # Then no version is written: the note on it stays usable
        assert versions() == saved
        assert usable_keys(store) == ["note", "profile"]
        # And a thread that never saved it (nor read it) proposes, as before
        graph_of(store, save_profile).invoke({"turn": 2}, {"configurable": {"thread_id": "other"}})
        assert len(versions()) == 2 and usable_keys(store) == ["profile"]
    # And once another thread's version holds the value, the resumed thread's put
    # of it proposes again (it put the key's first version, not this one)
    with open_store(ledger, tokens) as store:
        graph_of(store, save_profile).invoke({"turn": 3}, {"configurable": {"thread_id": "chat"}})
        assert len(versions()) == 3


def read_counter(state: Turn) -> Turn:
    get_store().get(NS, "counter")
    return state


def increment(state: Turn) -> Turn:
    memories = get_store()
    counter = memories.get(NS, "counter")
    memories.put(NS, "counter", {"n": (counter.value["n"] if counter else 0) + 1})
    return state


def save(n: int) -> Node:
    """A node saving a count computed earlier, unread."""

    def node(state: Turn) -> Turn:
        get_store().put(NS, "counter", {"n": n})
        return state

    return node


def test_a_resumed_thread_keeps_only_what_its_own_principal_put_before_it_resumed(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    def look_elsewhere(state: Turn) -> Turn:
        get_store().get(NS, "title")
        return state

    reviewer = ledger.authenticate(tokens["reviewer"])

    def versions() -> list[Any]:
        return [e.record for e in reviewer.explain(NS[0], "memories/u1/counter").entries]

    one = {"configurable": {"thread_id": "1"}}
    # Given the agent's thread "1" ran once (it read another key), and bob, another
    # principal, whose own thread "1" (a run of the same name: his) saved n=1
    with open_store(ledger, tokens) as store:
        graph_of(store, look_elsewhere).invoke({"turn": 0}, one)
    admin = ledger.admin()
    admin.grant("bob", NS[0], ["propose", "read"])
    with LedgerStore(
        ledger, token=admin.issue_token("bob"), approver_token=tokens["reviewer"]
    ) as store:
        graph_of(store, save(1)).invoke({"turn": 0}, one)
    assert [v.proposer for v in versions()] == ["bob"]
    # When the agent's thread "1" resumes and saves n=1 too
    with open_store(ledger, tokens) as store:
        graph_of(store, save(1)).invoke({"turn": 1}, one)
    # Then it is no put of its own it saves again: written, as before
    assert [v.proposer for v in versions() if v.status == Status.ACCEPTED] == ["agent"]

    # And a version another store serving the thread at once put after this store
    # took it (the same open run) is not kept: both incremented the same count
    first, second = open_store(ledger, tokens), open_store(ledger, tokens)
    shared = {"configurable": {"thread_id": "shared"}}
    try:
        graph_of(first, increment).invoke({"turn": 0}, shared)  # n=2; its run left open
        graph_of(second, read_counter).invoke({"turn": 0}, shared)  # takes the thread, reads 2
        graph_of(first, increment).invoke({"turn": 1}, shared)  # n=3
        with pytest.raises(InvalidParentError, match="get key 'counter'"):
            graph_of(second, save(3)).invoke({"turn": 1}, shared)  # 2 + 1, from its read
    finally:
        second.close()
        first.close()
    assert [v.value for v in versions() if v.status == Status.ACCEPTED] == [{"n": 3}]


def test_a_thread_a_store_let_go_and_took_again_keeps_no_version_put_meanwhile(
    ledger: Ledger, tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.integrations.langgraph import threads

    monkeypatch.setattr(threads, "MAX_THREADS", 2)

    shared = {"configurable": {"thread_id": "shared"}}
    first, second = open_store(ledger, tokens), open_store(ledger, tokens)
    try:
        # Given the counter at 2, read by a second store serving the thread too
        graph_of(first, increment).invoke({"turn": 0}, shared)
        graph_of(first, increment).invoke({"turn": 1}, shared)
        graph_of(second, read_counter).invoke({"turn": 0}, shared)
        # When the first increments it to 3, and the second lets the thread go
        # (it serves others: it keeps 2), then saves 3, computed from its read of 2
        graph_of(first, increment).invoke({"turn": 2}, shared)
        for other in ("o1", "o2", "o3"):
            graph_of(second, read_counter).invoke(
                {"turn": 0}, {"configurable": {"thread_id": other}}
            )
        # Then that put is refused as before, not taken for the version the first put
        with pytest.raises(InvalidParentError, match="get key 'counter'"):
            graph_of(second, save(3)).invoke({"turn": 1}, shared)  # 2 + 1, from its read of 2
    finally:
        second.close()
        first.close()


def test_a_thread_resumed_after_two_stores_shared_its_run_keeps_no_version_put_then(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    shared = {"configurable": {"thread_id": "shared"}}
    first, second = open_store(ledger, tokens), open_store(ledger, tokens)
    try:
        # Given the counter at 2, read by the first store's graph (its checkpoint
        # holds 2), and incremented to 3 by a second store serving the thread then
        graph_of(first, increment).invoke({"turn": 0}, shared)
        graph_of(first, increment).invoke({"turn": 1}, shared)
        graph_of(first, read_counter).invoke({"turn": 2}, shared)
        graph_of(second, increment).invoke({"turn": 0}, shared)
    finally:
        first.close()  # ends the thread's run
        second.close()
    # When a later store resumes the thread from the first's checkpoint: it saves
    # 2 + 1, the value the second store's version holds
    with open_store(ledger, tokens) as later, pytest.raises(InvalidParentError, match="get key"):
        graph_of(later, save(3)).invoke({"turn": 3}, shared)
    # Then it is refused as before (two increments from 2 are not 3), not kept
    reviewer = ledger.authenticate(tokens["reviewer"])
    assert reviewer.read(NS[0], "memories/u1/counter").records[0].value == {"n": 3}
    assert len(reviewer.explain(NS[0], "memories/u1/counter").entries) == 3


def test_putting_a_stale_key_again_with_its_value_makes_a_new_version(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    # A STALE version is not what get shows: putting its value again re-bases it.
    with open_store(ledger, tokens) as store:
        store.put(NS, "city", {"text": "Paris"})

        def derive(state: Turn) -> Turn:
            memories = get_store()
            city = memories.get(NS, "city")
            assert city is not None
            memories.put(NS, "weather", {"text": f"rain in {city.value['text']}"})
            return state

        graph_of(store, derive).invoke({"turn": 0}, {"configurable": {"thread_id": "t"}})
        reviewer = ledger.authenticate(tokens["reviewer"])
        reviewer.revoke(record_of(reviewer, "city").id, "wrong city")
        assert store.get(NS, "weather") is None
        position = ledger.position
        store.put(NS, "weather", {"text": "rain in Paris"})
        assert ledger.position > position
        weather = store.get(NS, "weather")
        assert weather is not None and weather.value == {"text": "rain in Paris"}


def test_putting_back_the_accepted_value_while_another_awaits_review_is_a_new_version(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    # Without an approver: blue accepted, red awaiting review, then blue put back
    reviewer = ledger.authenticate(tokens["reviewer"])
    with LedgerStore(ledger, token=tokens["agent"]) as store:
        store.put(NS, "colour", {"c": "blue"})
        reviewer.accept(record_of(reviewer, "colour").id)
        store.put(NS, "colour", {"c": "red"})
        position = ledger.position
        store.put(NS, "colour", {"c": "blue"})
        # Then the put back is written: the reviewer decides it too, not only red
        assert ledger.position > position
        waiting = reviewer.records(NS[0], status=Status.CANDIDATE)
        assert sorted(v.value["c"] for v in waiting) == ["blue", "red"]


def test_a_put_of_an_expiring_or_conditioned_versions_value_makes_the_stores_own(
    ledger: Ledger, tokens: dict[str, str], clock: Any
) -> None:
    # Given versions another surface wrote: one that expires, one with conditions
    from datetime import timedelta

    agent, reviewer = (ledger.authenticate(tokens[n]) for n in ("agent", "reviewer"))
    soon = clock() + timedelta(hours=1)
    agent.propose(NS[0], "memories/u1/tz", {"tz": "UTC"}, Kind.FACT, expires=soon, id="TZ")
    reviewer.accept("TZ")
    with open_store(ledger, tokens) as store:
        # When the store puts the same value
        position = ledger.position
        store.put(NS, "tz", {"tz": "UTC"})
        # Then it writes its own version, which outlives the expiry
        assert ledger.position > position
        clock.advance(hours=2)
        kept = store.get(NS, "tz")
        assert kept is not None and kept.value == {"tz": "UTC"}


def test_a_put_the_principal_may_not_make_is_refused_whatever_its_value(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    from ledger.errors import AccessDeniedError

    with open_store(ledger, tokens) as store:
        store.put(NS, "k", {"v": 1})
    admin = ledger.admin()
    admin.grant("reader", NS[0], ["read"])
    with LedgerStore(ledger, token=admin.issue_token("reader")) as reading:
        assert reading.get(NS, "k") is not None
        for value in ({"v": 1}, {"v": 2}):  # the value it holds, and another
            with pytest.raises(AccessDeniedError, match="lacks role 'propose'"):
                reading.put(NS, "k", value)


def test_an_unchanged_put_is_told_by_its_own_key_not_by_keys_it_prefixes(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    reviewer = ledger.authenticate(tokens["reviewer"])
    with open_store(ledger, tokens) as store, LedgerStore(ledger, token=tokens["agent"]) as asks:
        # Given a key with an escaped character, and a key it prefixes awaiting review
        store.put(NS, "a%b/c", {"v": 1})
        asks.put(NS, "a%b/c2", {"v": 2})
        assert [v.claim_key for v in reviewer.records(NS[0], status=Status.CANDIDATE)] == [
            "memories/u1/a%25b%2Fc2"
        ]
        # Then putting the first's value again writes nothing
        position = ledger.position
        store.put(NS, "a%b/c", {"v": 1})
        assert ledger.position == position


def test_a_put_the_stores_approver_may_not_accept_is_refused_whatever_its_value(
    ledger: Ledger, tokens: dict[str, str]
) -> None:
    from ledger.errors import AccessDeniedError, AuthenticationError

    with open_store(ledger, tokens) as store:
        store.put(NS, "k", {"v": 1})
        # When the approver loses approve there, a put of the value held is refused
        # as one of another value is
        ledger.admin().revoke_grant("reviewer", NS[0], ["approve"])
        for value in ({"v": 1}, {"v": 2}):
            with pytest.raises(AccessDeniedError, match="lacks role 'approve'"):
                store.put(NS, "k", value)
        # and so once its token is revoked
        ledger.admin().grant("reviewer", NS[0], ["approve"])
        ledger.admin().revoke_token(tokens["reviewer"])
        with pytest.raises(AuthenticationError):
            store.put(NS, "k", {"v": 1})
