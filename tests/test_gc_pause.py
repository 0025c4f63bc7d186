"""Automatic garbage collection is paused while the ledger works through a log
(``ledger.gc_pause``): a rebuild, a bulk import, a verification and a catch-up.

Inside, the collector is off; after, it is as the process had it, also when the
work fails; nested and concurrent pauses share one.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

import ledger.gc_pause as gc_pause
import ledger.transitions as transitions
import ledger.verification as verification
from ledger import Kind
from ledger.errors import InvalidInputError

from .conftest import World


def items(n: int, prefix: str = "k") -> list[dict[str, Any]]:
    return [
        {"scope": "proj-a", "claim_key": f"{prefix}{i}", "value": {"n": i}, "kind": Kind.FACT}
        for i in range(n)
    ]


class Watching(Mapping[str, Any]):
    """A ``propose_many`` item that notes whether the collector was on when read."""

    def __init__(self, fields: dict[str, Any], seen: list[bool]) -> None:
        self._fields, self._seen = fields, seen

    def __getitem__(self, key: str) -> Any:
        self._seen.append(gc.isenabled())
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        self._seen.append(gc.isenabled())
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        (gc.enable if was else gc.disable)()


def test_a_rebuild_replays_with_the_collector_off(world: World, collector_on: None) -> None:
    world.agent.propose_many(items(50))
    states: list[bool] = []
    report = world.ledger.rebuild(progress=lambda reached, target: states.append(gc.isenabled()))
    assert states and not any(states)
    assert gc.isenabled()
    assert report.digest_before == report.digest_after


def test_propose_many_imports_with_the_collector_off(world: World, collector_on: None) -> None:
    seen: list[bool] = []
    ids = world.agent.propose_many([Watching(item, seen) for item in items(3)])
    assert len(ids) == 3 and seen and not any(seen)
    assert gc.isenabled()


def test_a_refused_import_turns_the_collector_back_on(world: World, collector_on: None) -> None:
    position = world.ledger.position
    bad = [*items(2), {"scope": "proj-a", "claim_key": "x", "value": 1, "kind": "rumour"}]
    with pytest.raises(InvalidInputError, match="propose_many item 2"):
        world.agent.propose_many(bad)
    assert gc.isenabled()
    assert world.ledger.position == position


def test_a_process_that_turned_the_collector_off_keeps_it_off(world: World) -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        world.agent.propose_many(items(5))
        world.ledger.rebuild()
        assert world.ledger.verify().ok
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def collector_states(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[bool]:
    """Whether the collector was on at each call of ``owner.name`` from now on (the
    function still does its work)."""
    states: list[bool] = []
    original = getattr(owner, name)

    def watched(*args: Any, **kwargs: Any) -> Any:
        states.append(gc.isenabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, watched)
    return states


def test_verify_walks_the_log_with_the_collector_off(
    world: World, collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.agent.propose_many(items(20))
    states = collector_states(monkeypatch, verification, "_walk_log")
    assert world.ledger.verify().ok
    assert states == [False]
    assert gc.isenabled()


def test_a_catch_up_applies_with_the_collector_off(
    world: World, collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = world.ledger
    projector = led.engine.projector
    projector.enabled = False  # the views stop following the log
    try:
        ids = world.agent.propose_many(items(30, "behind"))
    finally:
        projector.enabled = True
    states = collector_states(monkeypatch, projector, "_apply")
    led.engine.recent.forget()  # what it knew of the views' position is stale
    assert led.catch_up() == 30
    assert states and not any(states)
    assert gc.isenabled()
    world.reviewer.accept(ids[7])
    assert [r.id for r in world.agent.read("proj-a", "behind7").records] == [ids[7]]
    assert led.verify().ok


def test_a_revocation_marks_its_descendants_with_the_collector_off(
    world: World, collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root,) = world.agent.propose_many(items(1, "root"))
    world.reviewer.accept(root)
    below = world.agent.propose_many([{**item, "parents": [root]} for item in items(20, "below")])
    for rid in below:
        world.reviewer.accept(rid)
    states = collector_states(monkeypatch, transitions, "stale_marking")
    revocation = world.reviewer.revoke(root, "retracted")
    assert states == [False]
    assert gc.isenabled()
    assert set(revocation.stale) == set(below)


def cycles_left_by(work: Callable[[], object]) -> int:
    """How many objects ``work`` left in reference cycles (found by a collection
    with automatic collection off meanwhile)."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        work()
        return gc.collect()
    finally:
        if was:
            gc.enable()


def test_commands_and_reads_leave_no_reference_cycles(world: World) -> None:
    """Garbage is freed as it is made, not left for the collector (a paused one
    would keep it until the pause ends)."""
    made: list[str] = []
    assert (
        cycles_left_by(lambda: made.append(world.agent.propose("proj-a", "c", {"n": 1}, Kind.FACT)))
        == 0
    )
    assert cycles_left_by(lambda: world.reviewer.accept(made[0])) == 0
    assert cycles_left_by(lambda: world.agent.read("proj-a", "c")) == 0
    assert cycles_left_by(lambda: world.agent.propose_many(items(20, "many"))) == 0
    assert cycles_left_by(lambda: world.reviewer.revoke(made[0], "retracted")) == 0
    assert cycles_left_by(world.ledger.rebuild) == 0
    # A value that takes the full walk (a tuple is normalised to a list).
    assert (
        cycles_left_by(lambda: world.agent.propose("proj-a", "t", {"pair": (1, 2)}, Kind.FACT)) == 0
    )


def test_a_run_leaves_no_reference_cycle(world: World) -> None:
    """A run's own session refers back to the run weakly: a finished run is
    freed when its last reference goes, not by the collector."""
    world.reviewer.accept(world.agent.propose("proj-a", "c", {"n": 1}, Kind.FACT, id="C1"))

    def a_run(run_id: str) -> None:
        with world.agent.run(run_id) as run:
            assert run.read("proj-a", "c").records[0].id == "C1"
            made = run.propose("proj-a", "d", 2, Kind.FACT, id=f"D-{run_id}")
        # the run's reads became the proposal's observed dependencies
        assert world.agent.get(made).observed == ("C1",)

    assert cycles_left_by(lambda: a_run("task-1")) == 0
    assert cycles_left_by(lambda: a_run("task-2")) == 0


def test_pauses_nest_and_the_last_one_out_turns_the_collector_on(collector_on: None) -> None:
    entered, release, done = threading.Event(), threading.Event(), threading.Event()
    states: list[bool] = []

    def other() -> None:
        with gc_pause.paused():
            entered.set()
            release.wait(10)
            states.append(gc.isenabled())
        done.set()

    thread = threading.Thread(target=other)
    with gc_pause.paused():
        thread.start()
        assert entered.wait(10)
        with gc_pause.paused():
            states.append(gc.isenabled())
        states.append(gc.isenabled())
    states.append(gc.isenabled())  # the other thread still pauses
    release.set()
    assert done.wait(10)
    thread.join(10)
    assert states == [False, False, False, False]
    assert gc.isenabled()


def _forked(child: Callable[[], bytes]) -> bytes:
    """What ``child`` returns, run in a child forked now (which leaves at once)."""
    import os
    import select

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write_end, child())
        os._exit(0)
    os.close(write_end)
    ready, _, _ = select.select([read_end], [], [], 30)
    said = os.read(read_end, 100) if ready else b"hung"
    if not ready:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    os.close(read_end)
    return said


def test_a_child_forked_while_another_thread_pauses_collection_has_it_back() -> None:
    # Given another thread inside a pause when this one forks
    inside, leave = threading.Event(), threading.Event()

    def pausing() -> None:
        with gc_pause.paused():
            inside.set()
            leave.wait(30)

    thread = threading.Thread(target=pausing)
    thread.start()
    inside.wait(30)
    try:
        # Then in the child (where that thread never ends its pause) collection is
        # on, and its own pauses turn it off and on again
        def child() -> bytes:
            before = gc.isenabled()
            with gc_pause.paused():
                during = gc.isenabled()
            return bytes([before, during, gc.isenabled()])

        assert _forked(child) == bytes([True, False, True])
        assert not gc.isenabled()  # the parent's pause holds
    finally:
        leave.set()
        thread.join()
    assert gc.isenabled()
