"""Many writer processes on one ledger: nothing lost, nothing duplicated, and no
interleaving lets a record with a revoked or stale ancestor be read as usable.

Runs on an SQLite file and on PostgreSQL (required when CI=true).
"""

from __future__ import annotations

import multiprocessing as mp
import random
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger import Kind, Ledger, LedgerError, Outcome, Status
from ledger.errors import InvalidInputError

WRITERS = 4
SECONDS = 6.0
CLAIMS = 6
ROLES = ["propose", "read", "approve", "deliver", "audit"]


def _writer(url: str, token: str, seed: int, seconds: float) -> dict[str, Any]:
    """One writer process: random commands on shared records until the deadline."""
    rng = random.Random(seed)
    stats: Counter[str] = Counter()
    events = 0
    with Ledger.open(url) as led:
        me = led.authenticate(token)
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            claim = f"c{rng.randrange(CLAIMS)}"
            entries = me.explain("s", claim).entries
            pick = rng.random()
            try:
                if pick < 0.4:
                    parents = [
                        e.record.id
                        for e in entries
                        if e.record.status in (Status.ACCEPTED, Status.CANDIDATE)
                    ]
                    chosen = rng.sample(parents, k=min(len(parents), rng.choice([1, 1, 2])))
                    n += 1
                    me.propose(
                        "s",
                        f"c{rng.randrange(CLAIMS)}",
                        value=rng.randrange(3),
                        kind=Kind.INFERENCE,
                        parents=chosen,
                        id=f"w{seed}-{n}",
                    )
                    events += 1
                    stats["propose"] += 1
                elif pick < 0.65:
                    cands = [
                        e.record.id
                        for e in entries
                        if e.record.status == Status.CANDIDATE and e.record.proposer != me.principal
                    ]
                    if cands:
                        me.accept(rng.choice(cands))
                        events += 1
                        stats["accept"] += 1
                elif pick < 0.75:
                    live = [
                        e.record.id
                        for e in entries
                        if e.record.status in (Status.ACCEPTED, Status.STALE)
                    ]
                    if live:
                        rev = me.revoke(rng.choice(live), reason=f"writer {seed}")
                        events += len(rev.affected)
                        stats["revoke"] += 1
                        stats["stale_marked"] += len(rev.stale)
                elif pick < 0.9:
                    stale = [
                        e.record.id
                        for e in entries
                        if e.record.status == Status.STALE and e.record.proposer != me.principal
                    ]
                    usable = [e.record.id for e in entries if e.usable]
                    if stale:
                        target = rng.choice(stale)
                        if usable and rng.random() < 0.7:
                            me.revalidate(target, note="new basis", parents=[rng.choice(usable)])
                            stats["revalidate_new_basis"] += 1
                        else:
                            me.revalidate(target, note="re-checked")
                            stats["revalidate"] += 1
                        events += 1
                else:
                    cands = [
                        e.record.id
                        for e in entries
                        if e.record.status == Status.CANDIDATE and e.record.proposer != me.principal
                    ]
                    if cands:
                        me.reject(rng.choice(cands), reason="no")
                        events += 1
                        stats["reject"] += 1
            except LedgerError as exc:
                stats[f"refused:{type(exc).__name__}"] += 1
                if "meanwhile" in str(exc):
                    stats["guard_caught_race"] += 1
            # A consistent snapshot: nothing readable may have an unusable ancestor.
            if rng.random() < 0.2:
                stats["checked_reads"] += 1
                snap = me.as_of(position=led.position)
                result = snap.read("s", f"c{rng.randrange(CLAIMS)}")
                if result.outcome != Outcome.MISSING:
                    for record in result.records:
                        _assert_ancestors_accepted(snap, record.id)
    return {"events": events, "stats": dict(stats)}


def _assert_ancestors_accepted(session: Any, record_id: str) -> None:
    todo, seen = [record_id], set()
    while todo:
        rid = todo.pop()
        if rid in seen:
            continue
        seen.add(rid)
        view = session.get(rid)
        assert view.status == Status.ACCEPTED, (
            f"{record_id} readable but ancestor {rid} is {view.status}"
        )
        todo.extend((*view.parents, *view.observed))


def _setup(url: str) -> tuple[list[str], int]:
    with Ledger.open(url) as led:
        admin = led.admin()
        tokens = []
        for i in range(WRITERS):
            admin.grant(f"w{i}", scope="s", roles=ROLES)
            tokens.append(admin.issue_token(f"w{i}"))
        admin.grant("seed", scope="s", roles=ROLES)
        seed = led.authenticate(admin.issue_token("seed"))
        checker = led.authenticate(tokens[0])
        for k in range(CLAIMS):
            rid = seed.capture(
                scope="s",
                uri=f"https://x.test/{k}",
                content=bytes([k]),
                claim_key=f"c{k}",
                id=f"E{k}",
            )
            checker.accept(rid)
        return tokens, led.stats()["events"]


def _transitive_invariant(led: Ledger) -> int:
    """Every record with a REVOKED or STALE ancestor is STALE, REVOKED or REJECTED."""
    with led.engine.reading() as c:
        c.execute(
            "SELECT record_id, status FROM " + _prefix(led) + "pl_records WHERE to_pos IS NULL"
        )
        status = {r["record_id"]: r["status"] for r in c.fetchall()}
        c.execute(
            "SELECT parent_id, child_id FROM " + _prefix(led) + "pl_edges WHERE to_pos IS NULL"
        )
        parents: dict[str, list[str]] = {}
        for r in c.fetchall():
            parents.setdefault(r["child_id"], []).append(r["parent_id"])
    checked = 0
    for rid in status:
        todo, seen = list(parents.get(rid, [])), set()
        while todo:
            p = todo.pop()
            if p in seen:
                continue
            seen.add(p)
            todo.extend(parents.get(p, []))
        if any(status[a] in (Status.REVOKED, Status.STALE) for a in seen):
            assert status[rid] in (Status.STALE, Status.REVOKED, Status.REJECTED), (
                f"{rid} is {status[rid]} although an ancestor is revoked or stale"
            )
            checked += 1
    return checked


def _prefix(led: Ledger) -> str:
    return led.engine.dialect.prefix


def test_four_writer_processes_lose_nothing_and_never_expose_revoked_knowledge(
    shared_url: str,
) -> None:
    # Given a ledger with shared evidence every writer builds on
    tokens, setup_events = _setup(shared_url)

    # When four processes propose, accept, revoke, revalidate and reject on shared
    # parents for a bounded time
    ctx = mp.get_context("spawn")
    with ctx.Pool(WRITERS) as pool:
        results = pool.starmap(
            _writer, [(shared_url, tokens[i], i, SECONDS) for i in range(WRITERS)]
        )

    # Then the log holds exactly the events of the commands that reported success
    reported = sum(r["events"] for r in results)
    with Ledger.open(shared_url) as led:
        assert led.stats()["events"] == setup_events + reported
        # and the live views equal a rebuild from the log
        assert led.rebuild().matched
        # and every record with a revoked or stale ancestor is itself stale
        _transitive_invariant(led)
    totals: Counter[str] = Counter()
    for r in results:
        totals.update(r["stats"])
    print(f"\ninterleavings on {shared_url.split(':')[0]}: {dict(sorted(totals.items()))}")
    assert totals["propose"] > 0 and totals["revoke"] > 0 and totals["checked_reads"] > 0


def test_a_rebuild_while_another_process_writes_compares_like_with_like(
    shared_url: str,
) -> None:
    # Given a writer process at work on the ledger (reading, and writing on what it read)
    tokens, _ = _setup(shared_url)
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool, Ledger.open(shared_url) as led:
        writing = pool.apply_async(_writer, (shared_url, tokens[0], 0, 4.0))
        reports = []
        while not writing.ready():
            # When the views are rebuilt meanwhile, again and again
            reports.append(led.rebuild())
        # Then its reads and commands all went through (a read transaction begun
        # before a rebuild read the views as they were; none met empty views, or
        # a deadlock over the views' locks, on PostgreSQL)
        assert sum(writing.get()["stats"].values()) > 0
    # and each rebuild compares the views before it with the views it built:
    # a command committed right after it counts in neither digest
    assert reports and all(r.matched for r in reports), [
        (r.digest_before[:12], r.digest_after[:12]) for r in reports if not r.matched
    ]


def _open_fresh(url: str) -> int:
    with Ledger.open(url) as led:
        return led.position


@pytest.mark.parametrize("openers", [4])
def test_processes_opening_a_fresh_database_at_once_all_succeed(
    shared_url: str, openers: int
) -> None:
    ctx = mp.get_context("spawn")
    with ctx.Pool(openers) as pool:
        positions = pool.map(_open_fresh, [shared_url] * openers)
    assert positions == [0] * openers
    with Ledger.open(shared_url) as led:
        led.admin().grant("a", scope="s", roles=["read"])
        assert led.position == 2


def _raw_sql(url: str) -> Callable[[str], None]:
    if url.startswith("sqlite"):
        path = url[len("sqlite:///") :]

        def run_sqlite(sql: str) -> None:
            with sqlite3.connect(path) as conn:
                conn.execute(sql.replace("{events}", "stored_events"))

        return run_sqlite
    import psycopg

    from .conftest import _pg_dsn

    schema = url.split("schema=")[1]

    def run_pg(sql: str) -> None:
        with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
            conn.execute(sql.replace("{events}", f"{schema}.provledger_events"))

    return run_pg


def _revoke_approve(url: str, barrier: Any) -> str:
    with Ledger.open(url) as led:
        admin = led.admin()
        barrier.wait()
        try:
            admin.revoke_grant("agent", "s", ["approve"])
        except InvalidInputError as exc:
            return str(exc)
        return "revoked"


def test_two_processes_revoking_one_grant_at_once_revoke_it_once(shared_url: str) -> None:
    # Given a grant, and two administrators' processes revoking it at the same moment
    with Ledger.open(shared_url) as led:
        led.admin().grant("agent", scope="s", roles=["approve", "read"])
        before = led.position
    ctx = mp.get_context("spawn")
    barrier = ctx.Manager().Barrier(2)
    with ctx.Pool(2) as pool:
        results = pool.starmap(_revoke_approve, [(shared_url, barrier)] * 2)
    # Then one revokes it and the other is refused as it would be after it: the
    # roles held are read under the writers' lock
    assert sorted(results) == ["'agent' does not hold approve in scope 's'", "revoked"]
    with Ledger.open(shared_url) as led:
        assert led.position == before + 1
        assert led.verify().ok


def test_a_ledger_opened_before_a_fork_is_refused_in_the_child_and_keeps_serving_the_parent(
    shared_url: str,
) -> None:
    import os

    # Given a ledger open in this process, in use
    with Ledger.open(shared_url) as led:
        admin = led.admin()
        admin.grant("agent", scope="s", roles=["propose", "read"])
        agent = led.authenticate(admin.issue_token("agent"))
        agent.propose("s", "k", 1, Kind.FACT, id="F1")
        # When a child forked from it uses it (multiprocessing's default on Linux)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: say what happened, then leave without cleanup
            try:
                agent.propose("s", "k2", 2, Kind.FACT, id="F2")
                said = "proposed"
            except LedgerError as exc:
                said = f"{type(exc).__name__}: {exc}"
            said += f" | {led!r}"  # closed to the child, as it says
            led.close()  # closes nothing of the parent's
            os.write(write_end, said.encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            said = pipe.read().decode()
        os.waitpid(pid, 0)
        # Then it is refused by name, and the parent's ledger goes on working
        assert said == (
            f"ClosedLedgerError: ledger {led.url!r} was opened in the process this one "
            "was forked from, whose connections it holds: open it again in this process"
            f" | <Ledger {led.url!r} ({led.backend}, closed)>"
        )
        agent.propose("s", "k3", 3, Kind.FACT, id="F3")
        assert [v.id for v in agent.records("s")] == ["F1", "F3"]
        assert led.verify().ok


def _put_name(url: str, tokens: tuple[str, str], key: str, text: str, barrier: Any) -> None:
    from ledger.integrations.langgraph import LedgerStore

    with Ledger.open(url) as led:
        store = LedgerStore(led, token=tokens[0], approver_token=tokens[1])
        barrier.wait()
        store.put(("s", "user"), key, {"text": text})
        store.close()


def _store_tokens(led: Ledger) -> tuple[str, str]:
    """An agent's and a reviewer's token, granted in scope ``s`` of ``led``."""
    admin = led.admin()
    admin.grant("agent", scope="s", roles=["propose", "read"])
    admin.grant("reviewer", scope="s", roles=["approve", "read"])
    return admin.issue_token("agent"), admin.issue_token("reviewer")


def test_two_processes_putting_one_new_store_key_at_once_leave_one_value(
    shared_url: str,
) -> None:
    from ledger.integrations.langgraph import LedgerStore

    # Given two processes with a LangGraph store each, putting the same new key
    # at the same moment (three keys, to meet the race)
    with Ledger.open(shared_url) as led:
        tokens = _store_tokens(led)
    ctx = mp.get_context("spawn")
    barrier = ctx.Manager().Barrier(2)
    keys = ["name0", "name1", "name2"]
    with ctx.Pool(2) as pool:
        for key in keys:
            pool.starmap(
                _put_name, [(shared_url, tokens, key, text, barrier) for text in ("a", "b")]
            )
    # Then each key holds one value, the later put's, which superseded the other:
    # not two rival versions the store would report as a conflict
    with Ledger.open(shared_url) as led:
        store = LedgerStore(led, token=tokens[0])
        reviewer = led.authenticate(tokens[1])
        for key in keys:
            item = store.get(("s", "user"), key)
            assert item is not None and item.value["text"] in ("a", "b")
            read = reviewer.read("s", f"user/{key}")
            assert [r.value for r in read.records] == [item.value]
            statuses = sorted(e.record.status for e in reviewer.explain("s", f"user/{key}").entries)
            assert statuses == [Status.ACCEPTED, Status.SUPERSEDED]
        assert led.verify().ok


def _change_key(url: str, tokens: tuple[str, str], key: str, how: str, barrier: Any) -> str:
    """Child: delete the key, or put it anew, at the barrier; what it raised, if anything."""
    from ledger.integrations.langgraph import LedgerStore

    with Ledger.open(url) as led:
        store = LedgerStore(led, token=tokens[0], approver_token=tokens[1])
        barrier.wait()
        try:
            if how == "delete":
                store.delete(("s", "mem"), key)
            else:
                store.put(("s", "mem"), key, {"v": how})
        except LedgerError as exc:
            return f"{how}: {type(exc).__name__}: {exc}"
        finally:
            store.close()
    return ""


def test_two_processes_deleting_or_replacing_one_store_key_at_once_both_succeed(
    shared_url: str,
) -> None:
    from ledger.integrations.langgraph import LedgerStore

    # Given stored keys, and two processes with a store each that change one key
    # at the same moment: both delete it, or one deletes and one puts it anew
    with Ledger.open(shared_url) as led:
        tokens = _store_tokens(led)
        store = LedgerStore(led, token=tokens[0], approver_token=tokens[1])
        for k in range(4):
            store.put(("s", "mem"), f"d{k}", {"v": 0})
            store.put(("s", "mem"), f"p{k}", {"v": 0})
        store.close()
    ctx = mp.get_context("spawn")
    barrier = ctx.Manager().Barrier(2)
    raised: list[str] = []
    with ctx.Pool(2) as pool:
        for k in range(4):
            for key, hows in ((f"d{k}", ("delete", "delete")), (f"p{k}", ("delete", "new"))):
                raised += pool.starmap(
                    _change_key, [(shared_url, tokens, key, how, barrier) for how in hows]
                )

    # Then neither raised (a delete of a key gone already does nothing, as in
    # every BaseStore), the deleted keys are gone, and each key deleted while
    # put anew holds the new value or nothing, as one order or the other leaves it
    assert [r for r in raised if r] == []
    with Ledger.open(shared_url) as led:
        store = LedgerStore(led, token=tokens[0])
        for k in range(4):
            assert store.get(("s", "mem"), f"d{k}") is None
            left = store.get(("s", "mem"), f"p{k}")
            assert left is None or left.value == {"v": "new"}
        store.close()
        assert led.verify().ok


@pytest.mark.parametrize(
    "statement",
    ["UPDATE {events} SET topic = 'x'", "DELETE FROM {events}"],
)
def test_the_database_refuses_to_update_or_delete_stored_events(
    shared_url: str, statement: str
) -> None:
    with Ledger.open(shared_url) as led:
        led.admin().grant("a", scope="s", roles=["read"])
        before = led.stats()["events"]
    run = _raw_sql(shared_url)
    with pytest.raises(Exception, match="append-only"):
        run(statement)
    with Ledger.open(shared_url) as led:
        assert led.stats()["events"] == before
        assert led.rebuild().matched


def test_a_command_started_inside_another_on_its_thread_is_refused_and_the_outer_commits(
    tmp_path: Path,
) -> None:
    """A file ledger writes on one connection: a second write transaction opened on
    the thread already inside one is refused at once (not a deadlock, and not a
    rollback of the outer transaction), and the outer command still commits."""
    refused: list[LedgerError] = []

    def check(view: Any) -> None:
        try:
            agent.propose("p", "nested", 1, Kind.FACT, id="N1")
        except LedgerError as exc:
            refused.append(exc)

    led = Ledger.open(f"sqlite:///{tmp_path / 'l.db'}", acceptance_checks=[check])
    try:
        admin = led.admin()
        admin.grant("agent", "p", ["propose", "read"])
        admin.grant("reviewer", "p", ["approve", "read"])
        agent = led.authenticate(admin.issue_token("agent"))
        reviewer = led.authenticate(admin.issue_token("reviewer"))
        agent.propose("p", "k", 1, Kind.FACT, id="R1")
        before = led.position
        reviewer.accept("R1")
        assert [type(e).__name__ for e in refused] == ["StorageError"]
        assert "already open" in str(refused[0])
        assert reviewer.get("R1").status == Status.ACCEPTED
        assert led.position == before + 1  # the accept only: nothing of N1
        assert reviewer.read("p", "nested").outcome == Outcome.MISSING
    finally:
        led.close()


_CLOSING = """
import sys, threading, time
from ledger import Kind, Ledger
from ledger.errors import ClosedLedgerError
url, op = sys.argv[1], sys.argv[2]
led = Ledger.open(url)
admin = led.admin()
admin.grant("agent", scope="p", roles=["propose", "read", "audit"])
agent = led.authenticate(admin.issue_token("agent"))
for i in range(200):
    agent.propose("p", f"k{i}", i, Kind.FACT)
seen = set()
if op == "handoff":  # an iteration started here, read by another thread during close
    it = agent.iter_history()
    next(it)
def work():
    try:
        if op == "handoff":
            for _ in it:
                time.sleep(0.001)
            seen.add("exhausted")
            return
        while True:
            if op == "read":
                agent.records("p", limit=200)
            else:
                agent.propose("p", "w", 1, Kind.FACT)
    except ClosedLedgerError:
        seen.add("ClosedLedgerError")
    except BaseException as exc:
        seen.add(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
threads = [threading.Thread(target=work) for _ in range(1 if op == "handoff" else 3)]
for t in threads:
    t.start()
time.sleep(0.3)
led.close()
for t in threads:
    t.join()
print(sorted(seen))
"""


_HALF_READ = """
import sys
from ledger import Kind, Ledger
led = Ledger.open(sys.argv[1])
admin = led.admin()
admin.grant("agent", scope="p", roles=["propose", "read", "audit"])
agent = led.authenticate(admin.issue_token("agent"))
for i in range(300):
    agent.propose("p", f"k{i}", i, Kind.FACT)
it = agent.iter_history()
next(it)
def handler():  # a module-level function, as a program has many
    agent.records("p")
print("done")
"""


def test_an_iteration_half_read_at_interpreter_exit_ends_quietly(tmp_path: Path) -> None:
    # Given a program that leaves an iteration of the log half read, and the
    # ledger open, when it exits (its reading connection is closed first)
    done = subprocess.run(
        [sys.executable, "-c", _HALF_READ, f"sqlite:///{tmp_path / 'l.db'}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # Then it exits as it would without the iteration: nothing on stderr
    assert (done.returncode, done.stdout, done.stderr) == (0, "done\n", "")


@pytest.mark.parametrize("op", ["read", "write", "handoff"])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_closing_a_ledger_other_threads_are_using_refuses_them_by_name(
    tmp_path: Path, backend: str, op: str
) -> None:
    # Given threads reading or writing in a loop when the ledger is closed
    url = "memory:" if backend == "memory" else f"sqlite:///{tmp_path / 'l.db'}"
    done = subprocess.run(
        [sys.executable, "-c", _CLOSING, url, op], capture_output=True, text=True, timeout=120
    )
    # Then the process lives on (no connection was closed under a running
    # statement) and every thread is refused with ClosedLedgerError alone; an
    # iteration another thread was reading runs to its end, then the ledger closes
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    said = "['exhausted']" if op == "handoff" else "['ClosedLedgerError']"
    assert done.stdout.strip() == said, done.stdout + done.stderr[-2000:]


def _f1_proposed(url: str, check: Callable[[Any], None]) -> tuple[Ledger, Any]:
    """A ledger at ``url`` whose acceptances run ``check``, with F1 proposed by an
    agent: the ledger and its reviewer's session."""
    led = Ledger.open(url, acceptance_checks=[check])
    admin = led.admin()
    admin.grant("agent", scope="p", roles=["propose", "read"])
    admin.grant("reviewer", scope="p", roles=["approve", "read"])
    led.authenticate(admin.issue_token("agent")).propose("p", "k", 1, Kind.FACT, id="F1")
    return led, led.authenticate(admin.issue_token("reviewer"))


def test_closing_waits_for_a_command_under_way_in_another_thread(tmp_path: Path) -> None:
    # Given an acceptance check that takes a while, running in another thread
    inside, url = threading.Event(), f"sqlite:///{tmp_path / 'l.db'}"

    def slow(record: Any) -> None:
        inside.set()
        time.sleep(0.2)

    led, reviewer = _f1_proposed(url, slow)
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(reviewer.accept("F1")))
    worker.start()
    # When the ledger is closed while the acceptance is under way
    assert inside.wait(10)
    led.close()
    worker.join()
    # Then the acceptance finished before the connections closed, and is stored
    assert len(outcome) == 1
    with Ledger.open(url) as again:
        token = again.admin().issue_token("reviewer")
        assert again.authenticate(token).get("F1").status == Status.ACCEPTED


def test_connections_close_only_once_no_operation_is_under_way() -> None:
    from ledger.errors import ClosedLedgerError
    from ledger.inflight import InFlight

    closed: list[str] = []
    state = {"closed": False}

    def check_open() -> None:
        if state["closed"]:
            raise ClosedLedgerError("closed")

    flight = InFlight(check_open, lambda: closed.append("connections"))
    # Given an operation this thread started (an iteration, say), still under way
    token = flight.enter()
    # When the ledger is closed: the connections stay open under it, and what
    # enters after is refused
    state["closed"] = True
    assert flight.close(timeout=0.05) is False and closed == []
    with pytest.raises(ClosedLedgerError):
        flight.enter()
    assert closed == []
    # Then the operation, finished in another thread, closes them, once
    finisher = threading.Thread(target=flight.leave, args=(token,))
    finisher.start()
    finisher.join()
    assert closed == ["connections"]
    flight.leave(token)
    assert closed == ["connections"]

    # And an operation of another thread that ends while close waits is waited for
    other = InFlight(lambda: None, lambda: closed.append("other"))
    started = threading.Event()

    def briefly() -> None:
        with other.entered():
            started.set()
            time.sleep(0.1)

    worker = threading.Thread(target=briefly)
    worker.start()
    assert started.wait(10)
    assert other.close() is True and closed[-1] == "other"
    worker.join()


def test_a_close_cut_short_while_it_waits_still_closes_when_the_last_operation_ends() -> None:
    import signal

    from ledger.inflight import InFlight

    closed: list[str] = []
    flight = InFlight(lambda: None, lambda: closed.append("connections"))
    # Given an operation of another thread under way
    token = (-1, -1)  # another thread's (any thread may leave a token)
    flight._under_way.add(token)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # When Ctrl-C cuts close() short while it waits for that operation
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(KeyboardInterrupt):
            flight.close(timeout=10)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert closed == []
    # Then the operation's end still closes the connections, once
    flight.leave(token)
    assert closed == ["connections"]


def test_a_database_failure_of_an_operation_a_close_waits_for_is_not_called_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.errors import ClosedLedgerError, StorageError

    monkeypatch.setattr("ledger.inflight.CLOSE_WAIT", 0.05)

    led = Ledger.open(f"sqlite:///{tmp_path / 'l.db'}")
    engine = led.engine
    failure = sqlite3.OperationalError("attempt to write a readonly database")
    # Given an operation under way in another thread when the ledger is closed
    ready, done = threading.Event(), threading.Event()

    def operation() -> None:
        with engine.inflight.entered():
            ready.set()
            done.wait(10)

    worker = threading.Thread(target=operation)
    worker.start()
    assert ready.wait(10)
    led.close()  # returns after its wait: the connections stay open under it
    # Then a failure of that operation is told as itself, not as the close
    try:
        told = engine.storage_error(failure)
        assert isinstance(told, StorageError) and "readonly database" in str(told)
    finally:
        done.set()
        worker.join()
    # And once the connections are closed, a failure is still told as itself; a
    # driver refusing a closed connection is the close
    assert engine.inflight.connections_closed
    assert isinstance(engine.storage_error(failure), StorageError)
    closed = sqlite3.ProgrammingError("Cannot operate on a closed database.")
    assert isinstance(engine.storage_error(closed), ClosedLedgerError)


@pytest.mark.parametrize("url", ["memory:", "sqlite"])
def test_a_close_inside_a_command_lets_a_read_another_thread_began_answer(
    tmp_path: Path, url: str
) -> None:
    # Given an acceptance check that starts a read in another thread, then closes
    # the ledger (on memory: the read waits for this command's transaction)
    url = f"sqlite:///{tmp_path / 'l.db'}" if url == "sqlite" else url
    read: list[object] = []
    started = threading.Event()

    def reading() -> None:
        started.set()
        try:
            read.append(reviewer.get("F1").status)
        except LedgerError as exc:
            read.append(type(exc).__name__)

    def check(record: Any) -> None:
        worker = threading.Thread(target=reading)
        worker.start()
        assert started.wait(10)
        time.sleep(0.1)  # the read is under way
        led.close()
        workers.append(worker)

    workers: list[threading.Thread] = []
    led, reviewer = _f1_proposed(url, check)
    # When the acceptance runs
    reviewer.accept("F1")
    workers[0].join(30)
    # Then the read begun before the close answers (it is not refused as closed
    # after waiting for a command that could not end while the close waited), and
    # the connections close once both are done
    assert read and isinstance(read[0], Status), read
    assert led.engine.inflight.connections_closed


def test_a_command_failing_after_a_close_waited_for_it_is_told_its_own_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.errors import DiskFullError

    monkeypatch.setattr("ledger.inflight.CLOSE_WAIT", 0.05)
    led = Ledger.open(f"sqlite:///{tmp_path / 'l.db'}")
    ready, go = threading.Event(), threading.Event()
    told: list[LedgerError] = []

    def work(write: Any) -> None:
        ready.set()
        go.wait(10)
        raise sqlite3.OperationalError("database or disk is full")

    def command() -> None:
        try:
            led.engine.transact(work)
        except LedgerError as exc:
            told.append(exc)

    # Given a command under way in another thread when the ledger is closed
    worker = threading.Thread(target=command)
    worker.start()
    assert ready.wait(10)
    led.close()
    # When its write then fails (the last operation's end closes the connections)
    go.set()
    worker.join(30)
    # Then it is told the failure, not that the ledger is closed
    assert len(told) == 1 and isinstance(told[0], DiskFullError), told
    assert led.engine.inflight.connections_closed
