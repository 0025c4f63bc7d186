"""LedgerStore under contention and at the edges of its life: threads that all
found a key missing and put it (no update lost, on every backend, across
processes), a store closed after its ledger, where its warnings point, and what
a conflict tells the user to do.
"""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing as mp
import operator
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, GetOp, PutOp
from langgraph.types import RetryPolicy

from ledger import Kind, Ledger, Session, Status
from ledger.errors import InvalidParentError
from ledger.integrations.langgraph import (
    LedgerStore,
    MemoryConflictError,
    NoThreadWarning,
    RunsLeftOpenWarning,
    run_id_of,
)
from tests.conftest import Clock

NS = ("proj-a", "c")


@dataclass
class Setup:
    """A ledger, and the tokens and sessions of an agent and its reviewer."""

    ledger: Ledger
    agent_token: str
    reviewer_token: str
    reviewer: Session


def _setup(led: Ledger) -> Setup:
    admin = led.admin()
    admin.grant("agent", "proj-a", ["propose", "read"])
    admin.grant("reviewer", "proj-a", ["approve", "read", "audit"])
    reviewer_token = admin.issue_token("reviewer")
    return Setup(led, admin.issue_token("agent"), reviewer_token, led.authenticate(reviewer_token))


def _store(setup: Setup, cls: type[LedgerStore] = LedgerStore) -> LedgerStore:
    return cls(setup.ledger, token=setup.agent_token, approver_token=setup.reviewer_token)


@pytest.fixture
def lg(ledger: Ledger) -> Setup:
    return _setup(ledger)


@pytest.fixture
def store(lg: Setup) -> Iterator[LedgerStore]:
    with _store(lg) as s:
        yield s


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def in_thread(store: BaseStore, thread: str, step: Callable[[BaseStore], object]) -> None:
    """Run ``step`` with the injected store, as the one node of a graph, in ``thread``."""

    def node(state: State) -> State:
        step(get_store())
        return {"log": ["step"]}

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    builder.compile(store=store).invoke({"log": []}, {"configurable": {"thread_id": thread}})


def then(*steps: Callable[[BaseStore], object]) -> Callable[[BaseStore], None]:
    """The steps, one after the other."""

    def run(s: BaseStore) -> None:
        for step in steps:
            step(s)

    return run


def increment(s: BaseStore, key: str = "n") -> None:
    """Read the counter and put it one up (0 when it is missing)."""
    item = s.get(NS, key)
    s.put(NS, key, {"n": (item.value["n"] if item else 0) + 1})


def versions(setup: Setup, claim: str = "c/n") -> list[tuple[Status, Any]]:
    """(status, value) of every version of a key, in proposal order."""
    entries = setup.reviewer.explain("proj-a", claim).entries
    return [(e.record.status, e.record.value) for e in entries]


REFUSED_MISSING = (
    r"key 'n' of namespace \('proj-a', 'c'\) was missing when LangGraph thread 't1' read it"
    r".*get key 'n' of namespace \('proj-a', 'c'\) again in this thread"
)


# -- a key the thread found missing -------------------------------------------------------


def test_a_put_of_a_key_the_thread_found_missing_is_refused_once_another_thread_put_it(
    lg: Setup, store: LedgerStore
) -> None:
    # Given two threads that both find the counter missing
    in_thread(store, "t1", lambda s: s.get(NS, "n"))
    # When the second puts it first
    in_thread(store, "t2", increment)
    # Then the first thread's put, which would replace that version unseen, is refused
    with pytest.raises(InvalidParentError, match=REFUSED_MISSING):
        in_thread(store, "t1", lambda s: s.put(NS, "n", {"n": 1}))
    assert versions(lg) == [(Status.ACCEPTED, {"n": 1})]
    # and goes through once the thread reads the key again
    in_thread(store, "t1", increment)
    assert versions(lg) == [(Status.SUPERSEDED, {"n": 1}), (Status.ACCEPTED, {"n": 2})]


def test_a_put_of_a_key_found_missing_goes_through_when_nobody_put_it_since(
    lg: Setup, store: LedgerStore
) -> None:
    store.put(NS, "other", {"v": 1})  # the log moves on, not the key
    in_thread(store, "t1", lambda s: s.get(NS, "n"))
    in_thread(store, "t1", lambda s: s.put(NS, "n", {"n": 1}))
    # and its next puts follow its own version
    in_thread(store, "t1", lambda s: s.put(NS, "n", {"n": 2}))
    assert versions(lg) == [(Status.SUPERSEDED, {"n": 1}), (Status.ACCEPTED, {"n": 2})]


def test_a_stale_version_rewritten_or_a_candidate_proposed_since_refuses_no_put(
    lg: Setup, store: LedgerStore
) -> None:
    # Given n, which rests on two sources, made STALE by deleting the first
    store.put(NS, "src1", {"v": 1})
    store.put(NS, "src2", {"v": 2})
    in_thread(
        store,
        "w",
        then(lambda s: s.get(NS, "src1"), lambda s: s.get(NS, "src2"), increment),
    )
    store.delete(NS, "src1")
    in_thread(store, "t1", lambda s: s.get(NS, "n"))  # missing: its one version is STALE
    # When its row is rewritten (the other source deleted: still STALE), and another
    # surface proposes a candidate no read shows
    store.delete(NS, "src2")
    agent = lg.ledger.authenticate(lg.agent_token)
    agent.propose("proj-a", "c/n", {"n": 99}, Kind.FACT)
    # Then nothing usable appeared that the thread could have read: its put goes through
    in_thread(store, "t1", lambda s: s.put(NS, "n", {"n": 1}))
    assert versions(lg)[-1] == (Status.ACCEPTED, {"n": 1})


def test_an_older_candidate_accepted_after_the_read_refuses_the_put(
    lg: Setup, store: LedgerStore, clock: Clock
) -> None:
    # Given an older candidate, and a newer version usable only under a condition
    agent = lg.ledger.authenticate(lg.agent_token)
    older = agent.propose("proj-a", "c/n", {"n": 41}, Kind.FACT)
    clock.advance(seconds=1)  # proposed after it: the newest accepted one once accepted
    lg.reviewer.accept(
        agent.propose("proj-a", "c/n", {"n": 0}, Kind.FACT, conditions={"env": "prod"})
    )
    in_thread(store, "t1", lambda s: s.get(NS, "n"))  # missing to the store's read
    # When the older candidate is accepted after the read
    lg.reviewer.accept(older)
    # Then the put, which would replace it unseen, is refused
    with pytest.raises(InvalidParentError, match=REFUSED_MISSING):
        in_thread(store, "t1", lambda s: s.put(NS, "n", {"n": 1}))


def test_a_put_without_such_a_read_still_replaces_the_newest_version(
    lg: Setup, store: LedgerStore
) -> None:
    in_thread(store, "t2", increment)
    in_thread(store, "t1", lambda s: s.put(NS, "n", {"n": 7}))  # never read: last put wins
    store.put(NS, "n", {"n": 8})  # outside a thread alike
    assert [v for _, v in versions(lg)] == [{"n": 1}, {"n": 7}, {"n": 8}]


def test_a_key_a_search_showed_since_is_not_missing_to_the_thread(
    lg: Setup, store: LedgerStore
) -> None:
    in_thread(store, "t1", lambda s: s.get(NS, "n"))
    in_thread(store, "t2", increment)
    # The thread's search shows it the version put meanwhile: its put replaces it
    in_thread(store, "t1", then(lambda s: s.search(NS), lambda s: s.put(NS, "n", {"n": 2})))
    assert versions(lg) == [(Status.SUPERSEDED, {"n": 1}), (Status.ACCEPTED, {"n": 2})]


def test_a_batch_that_gets_a_missing_key_and_puts_it_is_refused_if_it_appeared_between(
    lg: Setup,
) -> None:
    # Given a store whose put of the key is preceded by another writer's put of it
    class Interleaved(LedgerStore):
        def _put(self, state: Any, op: PutOp) -> None:
            _store(lg).put(NS, "n", {"n": "theirs"})
            super()._put(state, op)

    store = Interleaved(lg.ledger, token=lg.agent_token, approver_token=lg.reviewer_token)
    # When a batch in a thread gets the missing key and puts it
    with store, pytest.raises(InvalidParentError, match=REFUSED_MISSING):
        in_thread(store, "t1", lambda s: s.batch([GetOp(NS, "n"), PutOp(NS, "n", {"n": 1})]))
    # Then the other writer's version stands
    assert versions(lg) == [(Status.ACCEPTED, {"n": "theirs"})]


def test_a_put_after_the_threads_delete_is_refused_once_another_thread_put_the_key(
    lg: Setup, store: LedgerStore
) -> None:
    store.put(NS, "n", {"n": 1})
    in_thread(store, "t1", then(lambda s: s.get(NS, "n"), lambda s: s.delete(NS, "n")))
    in_thread(store, "t1", lambda s: s.put(NS, "n", {"n": 2}))  # nobody put it since: fine
    in_thread(store, "t1", lambda s: s.delete(NS, "n"))
    in_thread(store, "t2", lambda s: s.put(NS, "n", {"n": "t2"}))
    with pytest.raises(InvalidParentError, match=r"was missing when .* read it \(or deleted it\)"):
        in_thread(store, "t1", lambda s: s.put(NS, "n", {"n": 3}))
    assert store.get(NS, "n").value == {"n": "t2"}  # type: ignore[union-attr]


def test_a_thread_in_its_next_run_still_guards_a_key_it_found_missing(lg: Setup) -> None:
    with _store(lg) as store:
        in_thread(store, "t1", lambda s: s.get(NS, "n"))
        store.close()  # ends t1's run; its next batch goes on in the next run
        in_thread(store, "t2", increment)
        with pytest.raises(InvalidParentError, match=REFUSED_MISSING):
            in_thread(store, "t1", lambda s: s.put(NS, "n", {"n": 1}))
    assert versions(lg) == [(Status.ACCEPTED, {"n": 1})]


def _counter_graph(store: BaseStore) -> Any:
    async def inc(state: State, *, store: BaseStore) -> State:
        item = await store.aget(NS, "n")
        await store.aput(NS, "n", {"n": (item.value["n"] if item else 0) + 1})
        return {"log": ["inc"]}

    policy = RetryPolicy(
        retry_on=InvalidParentError, max_attempts=50, initial_interval=0.01, max_interval=0.2
    )
    builder = StateGraph(State)
    builder.add_node("inc", inc, retry_policy=policy)
    builder.add_edge(START, "inc")
    builder.add_edge("inc", END)
    return builder.compile(store=store)


def test_invocations_that_all_find_a_counter_missing_lose_no_increment(shared_url: str) -> None:
    # Given a counter no invocation finds (it was never put)
    invocations = 12
    with Ledger.open(shared_url) as led:
        lg = _setup(led)
        store = _store(lg)
        graph = _counter_graph(store)

        # When invocations in threads of their own all increment it at once
        async def run_all() -> list[Any]:
            return await asyncio.gather(
                *(
                    graph.ainvoke({"log": []}, {"configurable": {"thread_id": f"t{i}"}})
                    for i in range(invocations)
                ),
                return_exceptions=True,
            )

        results = asyncio.run(run_all())
        store.close()

        # Then every increment counted: one line of versions, 1 to N
        assert [r for r in results if isinstance(r, BaseException)] == []
        found = versions(lg)
        assert [v for _, v in found] == [{"n": n} for n in range(1, invocations + 1)]
        assert [s for s, _ in found] == [Status.SUPERSEDED] * (invocations - 1) + [Status.ACCEPTED]


def _racer(url: str, setup: tuple[str, str], thread: str, barrier: Any, out: Any) -> None:
    """One process: its thread finds the key missing, then puts it at once with
    the other process (``barrier``); reports ``put`` or ``refused``."""
    agent_token, reviewer_token = setup
    with (
        Ledger.open(url) as led,
        LedgerStore(led, token=agent_token, approver_token=reviewer_token) as store,
    ):

        def race(s: BaseStore) -> None:
            assert s.get(NS, "n") is None
            barrier.wait(60)
            s.put(NS, "n", {"by": thread})

        try:
            in_thread(store, thread, race)
            out.put("put")
        except InvalidParentError:
            out.put("refused")
        except BaseException as exc:  # pragma: no cover - reported to the test
            out.put(f"{type(exc).__name__}: {exc}")


def test_processes_that_both_found_a_key_missing_make_one_version(shared_url: str) -> None:
    # Given two processes whose threads both found the key missing
    with Ledger.open(shared_url) as led:
        lg = _setup(led)
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    racers = [
        ctx.Process(
            target=_racer,
            args=(shared_url, (lg.agent_token, lg.reviewer_token), f"p{i}", barrier, out),
        )
        for i in range(2)
    ]
    # When both put it at once
    for racer in racers:
        racer.start()
    said = sorted(out.get(timeout=120) for _ in racers)
    for racer in racers:
        racer.join(30)
    # Then one put wins and the other is refused (decided under the writers' lock)
    assert said == ["put", "refused"]
    with Ledger.open(shared_url) as led:
        reviewer = led.authenticate(lg.reviewer_token)
        entries = reviewer.explain("proj-a", "c/n").entries
        assert [e.record.status for e in entries] == [Status.ACCEPTED]


# -- closing ----------------------------------------------------------------------------


def test_a_store_closed_after_its_ledger_warns_that_its_runs_stay_open(shared_url: str) -> None:
    led = Ledger.open(shared_url)
    lg = _setup(led)
    store = _store(lg)
    in_thread(store, "t1", lambda s: s.get(NS, "n"))
    led.close()

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        store.close()  # raises nothing
        store.close()  # nor does a second close, which has nothing left to say
    said = [w for w in said if w.category is not ResourceWarning]  # (an earlier test's, collected)
    assert [(w.category, w.filename) for w in said] == [(RunsLeftOpenWarning, __file__)]
    assert "'langgraph:t1'" in str(said[0].message)

    # And the run is left open, continued by a later store serving the thread
    with Ledger.open(shared_url) as again:
        agent = again.authenticate(lg.agent_token)
        assert agent.run(run_id_of("t1")).state() == "open"
        with LedgerStore(again, token=lg.agent_token) as later:
            in_thread(later, "t1", lambda s: s.get(NS, "n"))
        assert agent.run(run_id_of("t1")).state() == "ended"


def test_a_store_block_the_ledger_closed_inside_leaves_without_raising(shared_url: str) -> None:
    led = Ledger.open(shared_url)
    lg = _setup(led)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with _store(lg) as store:
            in_thread(store, "t1", lambda s: s.get(NS, "n"))
            led.close()
    assert [w.category for w in said if w.category is not ResourceWarning] == [RunsLeftOpenWarning]


# -- where a warning points ----------------------------------------------------------------


def _no_thread_warnings(store: LedgerStore, node: Callable[..., Any]) -> list[Any]:
    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    graph = builder.compile(store=store)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        if inspect.iscoroutinefunction(node):
            asyncio.run(graph.ainvoke({"log": []}))
        else:
            graph.invoke({"log": []})
    return [w for w in said if w.category is NoThreadWarning]


@pytest.mark.parametrize("how", ["put", "batch", "aput", "abatch"])
def test_the_no_thread_warning_points_at_the_code_that_called_the_store(
    lg: Setup, how: str
) -> None:
    def node(state: State) -> State:
        s = get_store()
        if how == "put":
            s.put(NS, "k", {"v": 1})
        else:
            s.batch([PutOp(NS, "k", {"v": 1})])
        return {"log": [how]}

    async def anode(state: State) -> State:
        s = get_store()
        if how == "aput":
            await s.aput(NS, "k", {"v": 1})
        else:
            await s.abatch([PutOp(NS, "k", {"v": 1})])
        return {"log": [how]}

    with _store(lg) as store:
        said = _no_thread_warnings(store, anode if how.startswith("a") else node)
    assert [w.filename for w in said] == [__file__]


# -- conflicts ----------------------------------------------------------------------------


def test_a_conflict_names_the_stores_own_way_out(lg: Setup, store: LedgerStore) -> None:
    # Two accepted versions of one key, neither replacing the other (another surface)
    agent = lg.ledger.authenticate(lg.agent_token)
    for n in (1, 2):
        lg.reviewer.accept(agent.propose("proj-a", "c/name", {"v": n}, Kind.FACT))
    way_out = r"store\.delete\(\('proj-a', 'c'\), 'name'\) revokes every version of it\) and put"
    with pytest.raises(
        MemoryConflictError, match=r"^search of \('proj-a',\): key 'name'.*" + way_out
    ):
        store.search(("proj-a",))
    with pytest.raises(
        MemoryConflictError, match=r"^get of \('proj-a', 'c'\) key 'name'.*" + way_out
    ):
        store.get(NS, "name")
    with pytest.raises(MemoryConflictError, match=way_out):
        in_thread(store, "t1", lambda s: s.get(NS, "name"))
    store.delete(NS, "name")
    store.put(NS, "name", {"v": 3})
    assert [i.value for i in store.search(("proj-a",))] == [{"v": 3}]
