"""Crash injection: a writer runs in a child process and is SIGKILLed at a random
moment; then the ledger it was writing is opened and checked.

Scenarios (``SCENARIOS``), each a ``prepare`` / ``work`` / ``check`` triple:

``batch_import``
    The child calls ``propose_many`` batch after batch (2,000 records each, ids
    ``b<batch>-<item>``). After the kill every batch is wholly present or wholly
    absent, the present ones are a prefix, every batch the child saw committed is
    there, and the log holds exactly the setup events plus the complete batches.
``revocation``
    The child revokes a root with thousands of ACCEPTED descendants (a fan-out of
    chains with diamonds, plus one descendant over an *observed* edge). After:
    either the root is REVOKED and every descendant STALE with the root as cause,
    or the root is ACCEPTED and no descendant is STALE — never in between.
``catch_up``
    The views are behind the log by tens of thousands of events (written with the
    projector stopped); the child opens the ledger, which catches them up. After:
    the next open finishes the catch-up, nothing was applied twice (one record
    version per status event, one timeline row per event, the views' position —
    the time index's newest — at the log position).
``rebuild``
    The child runs ``Ledger.rebuild()`` over tens of thousands of events. After:
    the views digest equals the digest before the child started.

After every kill, for every scenario: ``Ledger.open`` succeeds, the views are
current (``catch_up() == 0``), ``verify()`` passes and so does
``verify(against=<digest taken after preparation>)`` (the log still extends
what was there), and ``rebuild().matched``.

A campaign (``run_campaign``) measures the child's working window once with an
unkilled run (which is checked too), then kills each child after a seeded
delay drawn uniformly over that window (plus ``overshoot``), and counts where
the kills landed. On SQLite each kill gets a fresh copy of one prepared file;
on PostgreSQL, where a schema cannot be copied cheaply, a ledger the kill left
exactly as prepared is reused for the next kill and otherwise a new one is
prepared.

Run from the repository root (the child imports ``tests.crash``).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger import Kind, Ledger, Session, Status
from ledger.persistence import resolve_url

REPO = Path(__file__).resolve().parents[1]
SCOPE = "crash"
BATCH = 2000
#: Events that open a new version row of a record in the validity view.
STATUS_EVENTS = frozenset(
    {"Proposed", "Accepted", "Rejected", "Revoked", "MarkedStale", "Revalidated"}
)

State = dict[str, Any]
"""What a prepared ledger's checker needs to know (JSON-serialisable)."""

Cleanup = Callable[[], None]
UrlFactory = Callable[[], "str | tuple[str, Cleanup]"]
"""Returns a URL for a new, empty ledger, optionally with a function deleting it."""


# -- markers (child side) ----------------------------------------------------------


def emit(marker: str) -> None:
    """Print a progress marker for the parent; flushed so a kill cannot lose it."""
    print(marker, flush=True)


def child_main(argv: Sequence[str]) -> None:
    """Child-process entry point: ``<scenario> <url> <state as JSON>``."""
    scenario, url, state_json = argv
    SCENARIOS[scenario].work(url, json.loads(state_json))


# -- the child run and the killer (parent side) -------------------------------------


@dataclass(frozen=True)
class ChildRun:
    """What one child printed, and whether and when it was killed.

    Times are seconds after the child printed ``ready``.
    """

    markers: tuple[tuple[float, str], ...]
    killed_at: float | None
    returncode: int | None
    stderr: str

    def saw(self, marker: str) -> bool:
        """Whether the child printed ``marker``."""
        return any(m == marker for _, m in self.markers)

    def numbers(self, prefix: str) -> set[int]:
        """The integers N of every ``<prefix> N`` marker."""
        return {int(m.split()[1]) for _, m in self.markers if m.startswith(prefix + " ")}

    def time_of(self, marker: str) -> float | None:
        """When the child printed ``marker`` (None if it did not)."""
        return next((t for t, m in self.markers if m == marker), None)

    @property
    def phase(self) -> str:
        """Where the kill landed: ``before`` the work started, ``mid`` work,
        ``after`` it was done (also when the child was not killed)."""
        if self.saw("done") or self.killed_at is None:
            return "after"
        return "mid" if self.saw("started") else "before"


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def run_child(
    scenario: str,
    url: str,
    state: State,
    delay: float | None,
    *,
    after: str = "ready",
    timeout: float = 600.0,
) -> ChildRun:
    """Run the scenario's writer in a child process; SIGKILL it ``delay`` seconds
    after it printed the marker ``after`` (never, if ``delay`` is None)."""
    code = "import sys; from tests.crash import child_main; child_main(sys.argv[1:])"
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, scenario, url, json.dumps(state)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=REPO,
            env=_child_env(),
        )
        lines: list[tuple[float, str]] = []
        seen = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append((time.monotonic(), line.strip()))
                if line.strip() == after:
                    seen.set()
            seen.set()  # the child ended without printing the marker

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        seen.wait(timeout)
        now = time.monotonic()
        t0 = next((t for t, m in lines if m == "ready"), now)
        start = next((t for t, m in lines if m == after), now)
        killed_at: float | None = None
        deadline = start + (timeout if delay is None else delay)
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            killed_at = time.monotonic() - t0
        returncode = proc.wait()
        reader.join(10)
        err.seek(0)
        stderr = err.read()
    return ChildRun(
        markers=tuple((t - t0, m) for t, m in lines),
        killed_at=killed_at,
        returncode=returncode,
        stderr=stderr,
    )


# -- helpers ------------------------------------------------------------------------


def _principals(led: Ledger) -> dict[str, str]:
    admin = led.admin()
    admin.grant("agent", scope=SCOPE, roles=["propose", "read"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read", "audit", "deliver"])
    return {"agent": admin.issue_token("agent"), "reviewer": admin.issue_token("reviewer")}


def _sessions(led: Ledger, state: State) -> tuple[Session, Session]:
    tokens = state["tokens"]
    return led.authenticate(tokens["agent"]), led.authenticate(tokens["reviewer"])


def _seal(led: Ledger, state: State) -> State:
    """Note what the prepared ledger holds, for the checker."""
    stats = led.stats()
    state["events"] = stats["events"]
    state["position"] = stats["position"]
    state["log_digest"] = str(led.digest())
    state["views_digest"] = led.views_digest()
    return state


def _batch_items(prefix: str, batch: int, size: int) -> list[dict[str, Any]]:
    """One import batch: ids ``<prefix><batch>-<i>``; every 7th item names an
    earlier item of the same batch as its parent."""
    items: list[dict[str, Any]] = []
    for i in range(size):
        item: dict[str, Any] = {
            "scope": SCOPE,
            "claim_key": f"import.k{i % 50}",
            "value": {"batch": batch, "i": i},
            "kind": Kind.FACT,
            "id": f"{prefix}{batch:04d}-{i:05d}",
        }
        if i % 7 == 6:
            item["parents"] = [f"{prefix}{batch:04d}-{i - 3:05d}"]
        items.append(item)
    return items


def _rows(led: Ledger, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Rows of a query on the ledger's own tables (``{t}`` prefixes, ``?`` marks)."""
    with led.engine.reading() as c:
        c.execute(led.engine.dialect.q(sql), params)
        rows = c.fetchall()
    # psycopg returns dicts; sqlite3.Row iterates values and names them in keys().
    return [r if isinstance(r, dict) else dict(zip(r.keys(), r, strict=True)) for r in rows]


def _status_groups(led: Ledger, prefix: str) -> dict[tuple[str, str | None], int]:
    """(status, cause) -> how many records whose id starts with ``prefix``, now."""
    rows = _rows(
        led,
        "SELECT status, cause_root, COUNT(*) AS n FROM {t}pl_records "
        "WHERE to_pos IS NULL AND substr(record_id, 1, ?) = ? GROUP BY status, cause_root",
        (len(prefix), prefix),
    )
    return {(r["status"], r["cause_root"]): int(r["n"]) for r in rows}


def _log_has(led: Ledger, record_id: str) -> bool:
    """Whether the event log (not a view) holds any event of ``record_id``."""
    from ledger.domain import Record
    from projections.projector import decode_row

    with led.engine.reading() as c:
        rows = led.engine.recorder.read_rows_after(c, 0, 1 << 30)
    proposed = (decode_row(row) for row in rows if row[2] == 1)
    return any(isinstance(e, Record.Proposed) and e.record_id == record_id for e in proposed)


def raw_tracking(url: str) -> tuple[dict[str, int], int]:
    """(the views' position — the newest position in the time index, which every
    view applies in step — and the newest log position), read straight from the
    database without opening a ``Ledger`` (which would catch the views up)."""
    backend = resolve_url(url)
    tracking_sql = "SELECT 'views', COALESCE(MAX(position), 0) FROM {t}pl_timeline"
    log_sql = "SELECT MAX(position) FROM {t}pl_merkle_leaves"
    if backend.kind == "sqlite":
        assert backend.path is not None
        con = sqlite3.connect(backend.path)
        try:
            tracking = dict(con.execute(tracking_sql.format(t="")).fetchall())
            (log,) = con.execute(log_sql.format(t="")).fetchone()
        finally:
            con.close()
    else:
        import psycopg

        env = backend.env
        prefix = env.get("POSTGRES_SCHEMA", "public") + "."
        with psycopg.connect(
            host=env["POSTGRES_HOST"],
            port=int(env["POSTGRES_PORT"]),
            dbname=env["POSTGRES_DBNAME"],
            user=env["POSTGRES_USER"],
            password=env["POSTGRES_PASSWORD"] or None,
        ) as conn:
            tracking = dict(conn.execute(tracking_sql.format(t=prefix)).fetchall())
            row = conn.execute(log_sql.format(t=prefix)).fetchone()
            log = row[0] if row else None
    return {str(k): int(v) for k, v in tracking.items()}, int(log or 0)


# -- the checker --------------------------------------------------------------------


@dataclass
class Checked:
    """The checker's verdict on one ledger after one child run."""

    outcome: str
    failures: list[str] = field(default_factory=list)
    #: The ledger is exactly as prepared, so the next kill may run on it again.
    reusable: bool = False


def check_common(led: Ledger, state: State) -> list[str]:
    """What must hold after any kill: views current and applied exactly once,
    the Merkle tamper check (also against the prepared log's digest), rebuild."""
    failures: list[str] = []
    if (n := led.catch_up()) != 0:
        failures.append(f"views were still {n} events behind after Ledger.open")
    position = led.position
    (applied,) = _rows(led, "SELECT MAX(position) AS p FROM {t}pl_timeline")
    if int(applied["p"] or 0) != position:
        failures.append(f"the views are at position {applied['p']}, not the log's {position}")
    events = led.stats()["events"]
    status_events = sum(
        int(r["n"])
        for r in _rows(
            led,
            f"SELECT topic, COUNT(*) AS n FROM {led.engine.recorder.events_table} GROUP BY topic",
        )
        if ":Record." in r["topic"] and r["topic"].rsplit(".", 1)[1] in STATUS_EVENTS
    )
    (versions,) = _rows(led, "SELECT COUNT(*) AS n FROM {t}pl_records")
    if int(versions["n"]) != status_events:
        failures.append(
            f"{versions['n']} record versions in the validity view for {status_events} "
            "status events in the log (an event applied twice or missed)"
        )
    (timeline,) = _rows(
        led, "SELECT COUNT(*) AS n, COUNT(DISTINCT position) AS d FROM {t}pl_timeline"
    )
    if (int(timeline["n"]), int(timeline["d"])) != (events, events):
        failures.append(
            f"timeline has {timeline['n']} rows ({timeline['d']} positions) for {events} events"
        )
    verification = led.verify()
    if not verification.ok:
        failures.append(f"verify() failed: {verification.problem}")
    extends = led.verify(against=state["log_digest"])
    if not extends.ok:
        failures.append(f"verify(against=prepared digest) failed: {extends.problem}")
    report = led.rebuild()
    if not report.matched:
        failures.append(f"rebuild() did not match: {report.digest_before} != {report.digest_after}")
    return failures


@contextmanager
def _opened(url: str, failures: list[str]) -> Iterator[Ledger | None]:
    try:
        led = Ledger.open(url)
    except Exception as exc:
        failures.append(f"Ledger.open failed: {type(exc).__name__}: {exc}")
        yield None
        return
    try:
        yield led
    finally:
        led.close()


def check(scenario: str, url: str, state: State, run: ChildRun) -> Checked:
    """Check the ledger at ``url`` after ``run``; never raises."""
    try:
        checked = SCENARIOS[scenario].check(url, state, run)
    except Exception as exc:
        checked = Checked("error", [f"checker raised {type(exc).__name__}: {exc}"])
    if run.killed_at is None and run.returncode != 0:
        checked.failures.append(
            f"the child exited with {run.returncode}: {run.stderr.strip()[-2000:]}"
        )
    if checked.failures:
        checked.reusable = False  # never carry a broken ledger into the next kill
    return checked


# -- scenario: batch import -----------------------------------------------------------


def prepare_batch_import(url: str, scale: float = 1.0) -> State:
    """A ledger with two principals and one accepted evidence record; the child
    will import ``8 * scale`` batches of 2,000 records."""
    with Ledger.open(url) as led:
        tokens = _principals(led)
        agent, reviewer = _sessions(led, {"tokens": tokens})
        agent.capture(SCOPE, uri="https://x.test/base", content=b"base", id="E0")
        reviewer.accept("E0")
        state: State = {"tokens": tokens, "batches": max(2, round(8 * scale)), "size": BATCH}
        state["records"] = led.stats()["records"]
        return _seal(led, state)


def work_batch_import(url: str, state: State) -> None:
    """Child: ``propose_many`` one batch after another."""
    with Ledger.open(url) as led:
        agent, _ = _sessions(led, state)
        items = [_batch_items("b", b, state["size"]) for b in range(state["batches"])]
        for batch in items:
            batch[0]["parents"] = ["E0"]
        emit("ready")
        emit("started")
        for b, batch in enumerate(items):
            emit(f"batch-start {b}")
            agent.propose_many(batch)
            emit(f"batch-done {b}")
        emit("done")


def check_batch_import(url: str, state: State, run: ChildRun) -> Checked:
    """Every batch whole or absent; acknowledged batches present; counts exact."""
    failures: list[str] = []
    size, batches = state["size"], state["batches"]
    with _opened(url, failures) as led:
        if led is None:
            return Checked("unopenable", failures)
        counts = {
            int(r["b"]): int(r["n"])
            for r in _rows(
                led,
                "SELECT substr(record_id, 2, 4) AS b, COUNT(*) AS n FROM {t}pl_records "
                "WHERE to_pos IS NULL AND substr(record_id, 1, 1) = 'b' "
                "AND substr(record_id, 6, 1) = '-' GROUP BY substr(record_id, 2, 4)",
            )
        }
        complete = sorted(b for b, n in counts.items() if n == size)
        partial = {b: n for b, n in counts.items() if n != size}
        if partial:
            failures.append(f"half-imported batches (batch: records of {size}): {partial}")
        if complete != list(range(len(complete))):
            failures.append(f"the complete batches {complete} are not a prefix of the import")
        lost = run.numbers("batch-done") - set(complete)
        if lost:
            failures.append(f"batches {sorted(lost)} were acknowledged but are missing")
        unexpected = set(counts) - run.numbers("batch-start")
        if unexpected:
            failures.append(f"batches {sorted(unexpected)} exist but were never started")
        for b in range(batches):
            for i in (0, size - 1):
                rid = f"b{b:04d}-{i:05d}"
                if _log_has(led, rid) != (b in complete):
                    failures.append(
                        f"the log {'holds' if _log_has(led, rid) else 'lacks'} {rid} but "
                        f"batch {b} is {'complete' if b in complete else 'absent'} in the views"
                    )
        stats = led.stats()
        want_events = state["events"] + size * len(complete)
        if stats["events"] != want_events:
            failures.append(
                f"{stats['events']} events; expected {state['events']} (setup) + "
                f"{size} x {len(complete)} complete batches = {want_events}"
            )
        if stats["records"] != state["records"] + size * len(complete):
            failures.append(
                f"{stats['records']} records; expected {state['records'] + size * len(complete)}"
            )
        failures += check_common(led, state)
    return Checked(f"{len(complete)}/{batches} batches", failures, reusable=not counts)


# -- scenario: revocation ---------------------------------------------------------------


def prepare_revocation(url: str, scale: float = 1.0) -> State:
    """A root with ``3000 * scale`` ACCEPTED descendants: 30 children of the root,
    each heading a chain, every 7th record with a second (diamond) parent, and
    one descendant reached only over an observed edge. Beside them an unrelated
    ACCEPTED record and a REJECTED child of the root, which must not change."""
    n = max(10, round(3000 * scale))
    fan = 30
    with Ledger.open(url) as led:
        tokens = _principals(led)
        agent, reviewer = _sessions(led, {"tokens": tokens})
        agent.capture(SCOPE, uri="https://x.test/root", content=b"root", id="ROOT")
        reviewer.accept("ROOT")
        agent.propose(SCOPE, "other", 1, Kind.FACT, id="OTHER")
        reviewer.accept("OTHER")
        agent.propose(SCOPE, "rejected", 0, Kind.INFERENCE, parents=["ROOT"], id="x-rejected")
        reviewer.reject("x-rejected", reason="a guess")
        items: list[dict[str, Any]] = []
        for i in range(n - 1):
            parents = ["ROOT"] if i < fan else [f"d-{i - fan:05d}"]
            if i >= fan and i % 7 == 0 and i // 2 != i - fan:
                parents.append(f"d-{i // 2:05d}")
            items.append(
                {
                    "scope": SCOPE,
                    "claim_key": f"derived.k{i % 40}",
                    "value": i,
                    "kind": Kind.INFERENCE,
                    "parents": parents,
                    "id": f"d-{i:05d}",
                }
            )
        for start in range(0, len(items), BATCH):
            agent.propose_many(items[start : start + BATCH])
        for item in items:  # parents come first, so each is accepted after its parents
            reviewer.accept(item["id"])
        # A run depends on what it was shown VALID: read d-00005 once it is accepted.
        with agent.run("crash-task") as run:
            run.get("d-00005")
            run.propose(SCOPE, "observed.child", True, Kind.INFERENCE, id="d-observed")
        reviewer.accept("d-observed")
        return _seal(led, {"tokens": tokens, "descendants": n})


def work_revocation(url: str, state: State) -> None:
    """Child: revoke the root."""
    with Ledger.open(url) as led:
        _, reviewer = _sessions(led, state)
        emit("ready")
        emit("started")
        revocation = reviewer.revoke("ROOT", reason="source withdrawn")
        emit(f"affected {len(revocation.affected)}")
        emit("done")


def check_revocation(url: str, state: State, run: ChildRun) -> Checked:
    """Root REVOKED and every descendant STALE because of it, or nothing changed."""
    failures: list[str] = []
    n = state["descendants"]
    with _opened(url, failures) as led:
        if led is None:
            return Checked("unopenable", failures)
        _, reviewer = _sessions(led, state)
        root = reviewer.get("ROOT").status
        groups = _status_groups(led, "d-")
        applied = root == Status.REVOKED
        if root not in (Status.REVOKED, Status.ACCEPTED):
            failures.append(f"root is {root}; expected REVOKED or ACCEPTED")
        want = {(Status.STALE.value, "ROOT"): n} if applied else {(Status.ACCEPTED.value, None): n}
        if groups != want:
            failures.append(
                f"root is {root} but the descendants are {groups} (status, cause): expected {want}"
            )
        if run.saw("done") and not applied:
            failures.append("the child saw the revocation commit but the root is not REVOKED")
        for rid in ("ROOT", "d-00000", f"d-{n - 2:05d}", "d-observed"):
            types = {e.type for e in reviewer.audit(rid).events}
            marked = bool(types & {"Revoked", "MarkedStale"})
            if marked != applied:
                failures.append(
                    f"the log {'has' if marked else 'lacks'} a revocation event for {rid} "
                    f"but the root is {root}"
                )
        others = (reviewer.get("OTHER").status, reviewer.get("x-rejected").status)
        if others != (Status.ACCEPTED, Status.REJECTED):
            failures.append(f"OTHER and x-rejected are {others}; expected ACCEPTED, REJECTED")
        events = led.stats()["events"]
        want_events = state["events"] + (n + 1 if applied else 0)
        if events != want_events:
            failures.append(f"{events} events; expected {want_events} (root {root})")
        failures += check_common(led, state)
    return Checked("applied" if applied else "absent", failures, reusable=not applied)


# -- scenario: view catch-up ------------------------------------------------------------


def prepare_catch_up(url: str, scale: float = 1.0) -> State:
    """A ledger whose views stopped ``~21,000 * scale`` events ago: during the
    stop, ``1000 * scale`` candidates were accepted, ``10 * scale`` batches of
    2,000 imported, and their root revoked (so each child also has a STALE
    marking to apply)."""
    m = max(10, round(1000 * scale))
    batches = max(1, round(10 * scale))
    with Ledger.open(url) as led:
        tokens = _principals(led)
        agent, reviewer = _sessions(led, {"tokens": tokens})
        agent.capture(SCOPE, uri="https://x.test/root", content=b"root", id="ROOT")
        reviewer.accept("ROOT")
        children = [f"c-{i:05d}" for i in range(m)]
        for start in range(0, m, BATCH):
            agent.propose_many(
                {"scope": SCOPE, "claim_key": "child", "value": i, "kind": Kind.FACT}
                | {"parents": ["ROOT"], "id": cid}
                for i, cid in enumerate(children[start : start + BATCH], start)
            )
        stopped_at = led.position

        # The views stop; every command below is in the log only.
        led.engine.projector.enabled = False
        for cid in children:
            reviewer.accept(cid)
        for b in range(batches):
            agent.propose_many(_batch_items("q", b, BATCH))
        reviewer.revoke("ROOT", reason="source withdrawn")
        state: State = {
            "tokens": tokens,
            "children": m,
            "batches": batches,
            "stopped_at": stopped_at,
        }
        _seal(led, state)
        state["behind"] = state["position"] - stopped_at
        return state


def work_catch_up(url: str, state: State) -> None:
    """Child: open the ledger (which catches the views up)."""
    emit("ready")
    emit("started")
    with Ledger.open(url) as led:
        emit(f"caught-up {led.position}")
        emit("done")


def check_catch_up(url: str, state: State, run: ChildRun) -> Checked:
    """The next open finishes the catch-up; nothing was applied twice."""
    failures: list[str] = []
    tracking, log = raw_tracking(url)
    if log != state["position"]:
        failures.append(f"the log moved from {state['position']} to {log} during a catch-up")
    if set(tracking.values()) == {state["stopped_at"]}:
        outcome = "rolled back"
    elif set(tracking.values()) == {log}:
        outcome = "committed"
    else:
        outcome = "partial"
    if run.saw("done") and outcome != "committed":
        failures.append(f"the child finished its catch-up but the views are at {tracking}")
    m = state["children"]
    with _opened(url, failures) as led:
        if led is None:
            return Checked(outcome, failures)
        _, reviewer = _sessions(led, state)
        groups = _status_groups(led, "c-")
        if groups != {(Status.STALE.value, "ROOT"): m}:
            failures.append(f"the children are {groups}; expected {m} STALE because of ROOT")
        (imported,) = _rows(
            led, "SELECT COUNT(*) AS n FROM {t}pl_records WHERE substr(record_id, 1, 1) = 'q'"
        )
        if int(imported["n"]) != state["batches"] * BATCH:
            want = state["batches"] * BATCH
            failures.append(f"{imported['n']} versions of imported records; expected {want}")
        sample = ["ROOT", "c-00000", f"c-{m - 1:05d}", "q0000-00000"]
        sample.append(f"q{state['batches'] - 1:04d}-{BATCH - 1:05d}")
        for rid in sample:
            (versions,) = _rows(
                led, "SELECT COUNT(*) AS n FROM {t}pl_records WHERE record_id=?", (rid,)
            )
            status_events = [e for e in reviewer.audit(rid).events if e.type in STATUS_EVENTS]
            if int(versions["n"]) != len(status_events):
                failures.append(
                    f"{rid} has {versions['n']} versions for {len(status_events)} status events"
                )
        failures += check_common(led, state)
    return Checked(outcome, failures)


# -- scenario: rebuild -----------------------------------------------------------------


def prepare_rebuild(url: str, scale: float = 1.0) -> State:
    """A ledger of ``~30,000 * scale`` events touching every view: grants and
    tokens, captures with snapshots, accepted chains, deliveries, a revocation
    with STALE descendants and corrections, then large imports."""
    target = max(2000, round(30000 * scale))
    with Ledger.open(url) as led:
        tokens = _principals(led)
        agent, reviewer = _sessions(led, {"tokens": tokens})
        agent.capture(SCOPE, uri="https://x.test/root", content=b"root", id="ROOT")
        reviewer.accept("ROOT")
        agent.propose_many(
            {"scope": SCOPE, "claim_key": f"report.k{i % 10}", "value": i, "kind": Kind.REPORT}
            | {"parents": ["ROOT" if i < 10 else f"r-{i - 10:04d}"], "id": f"r-{i:04d}"}
            for i in range(300)
        )
        for i in range(300):
            reviewer.accept(f"r-{i:04d}")
        for i in range(0, 300, 30):
            reviewer.deliver(f"r-{i:04d}", recipient="ops@x.test")
        reviewer.revoke("ROOT", reason="source withdrawn")
        for due in reviewer.corrections_due():
            reviewer.issue_correction(due.delivery.delivery_id, note="source withdrawn")
        b = 0
        while led.position < target:
            agent.propose_many(_batch_items("f", b, min(BATCH, target - led.position)))
            b += 1
        return _seal(led, {"tokens": tokens})


def work_rebuild(url: str, state: State) -> None:
    """Child: rebuild every view from the log."""
    with Ledger.open(url) as led:
        emit("ready")
        emit("started")
        report = led.rebuild(progress=lambda done, total: emit(f"progress {done}"))
        emit(f"matched {report.matched}")
        emit("done")


def check_rebuild(url: str, state: State, run: ChildRun) -> Checked:
    """The views are exactly what they were before the child started."""
    failures: list[str] = []
    with _opened(url, failures) as led:
        if led is None:
            return Checked("unopenable", failures)
        if led.views_digest() != state["views_digest"]:
            failures.append("the views digest differs from the one before the rebuild")
        if run.saw("matched False"):
            failures.append("the child's own rebuild did not match")
        events = led.stats()["events"]
        if events != state["events"]:
            failures.append(f"a rebuild changed the log: {events} events, {state['events']} before")
        failures += check_common(led, state)
    outcome = "completed" if run.saw("done") else "interrupted"
    return Checked(outcome, failures, reusable=True)


# -- scenarios and campaigns ------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A crash scenario: prepare a ledger, the child's work, the checker."""

    name: str
    prepare: Callable[[str, float], State]
    work: Callable[[str, State], None]
    check: Callable[[str, State, ChildRun], Checked]


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("batch_import", prepare_batch_import, work_batch_import, check_batch_import),
        Scenario("revocation", prepare_revocation, work_revocation, check_revocation),
        Scenario("catch_up", prepare_catch_up, work_catch_up, check_catch_up),
        Scenario("rebuild", prepare_rebuild, work_rebuild, check_rebuild),
    )
}


def sqlite_files(directory: Path | str) -> Callable[[], tuple[str, Cleanup]]:
    """A URL factory: new SQLite files in ``directory``, each with a deleter."""
    folder = Path(directory).resolve()
    counter = itertools.count()

    def make() -> tuple[str, Cleanup]:
        path = folder / f"crash-{next(counter):05d}-{uuid.uuid4().hex[:6]}.db"

        def remove() -> None:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)

        return f"sqlite:///{path}", remove

    return make


def postgres_schemas(server: str) -> Callable[[], tuple[str, Cleanup]]:
    """A URL factory: new schemas on the PostgreSQL ``server`` URL, each with a
    function dropping it."""
    import psycopg

    def make() -> tuple[str, Cleanup]:
        schema = f"crash_{uuid.uuid4().hex[:16]}"
        url = f"{server}{'&' if '?' in server else '?'}schema={schema}"
        env = resolve_url(url).env

        def drop() -> None:
            with psycopg.connect(
                host=env["POSTGRES_HOST"],
                port=int(env["POSTGRES_PORT"]),
                dbname=env["POSTGRES_DBNAME"],
                user=env["POSTGRES_USER"],
                password=env["POSTGRES_PASSWORD"] or None,
                autocommit=True,
            ) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

        return url, drop

    return make


def _copy_sqlite(source: str, target: str) -> None:
    """Copy a closed SQLite ledger file with SQLite's online backup."""
    src_path, dst_path = resolve_url(source).path, resolve_url(target).path
    assert src_path is not None and dst_path is not None
    src, dst = sqlite3.connect(src_path), sqlite3.connect(dst_path)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def _keep() -> None:
    """The cleanup of a URL the factory gave without one: leave the ledger."""


class _Ledgers:
    """Hands out prepared ledgers: copies of one SQLite file, or on PostgreSQL a
    ledger the last kill left as prepared, else a newly prepared one."""

    def __init__(self, scenario: Scenario, url_factory: UrlFactory, scale: float) -> None:
        self._scenario = scenario
        self._factory = url_factory
        self._scale = scale
        self._template: tuple[str, State, Cleanup] | None = None
        self._spare: tuple[str, State, Cleanup] | None = None
        self.prepared = 0
        self.backend = ""

    def _new(self) -> tuple[str, Cleanup]:
        made = self._factory()
        url, cleanup = (made, _keep) if isinstance(made, str) else made
        self.backend = resolve_url(url).kind
        if self.backend == "memory":
            cleanup()
            raise ValueError(f"{url!r}: a killed child's ledger must outlive it (use sqlite)")
        return url, cleanup

    def _prepare(self) -> tuple[str, State, Cleanup]:
        url, cleanup = self._new()
        try:
            state = self._scenario.prepare(url, self._scale)
        except BaseException:
            cleanup()
            raise
        self.prepared += 1
        return url, state, cleanup

    def take(self) -> tuple[str, State, Cleanup]:
        if self._spare is not None:
            spare, self._spare = self._spare, None
            return spare
        if self._template is None:
            url, state, cleanup = self._prepare()
            if self.backend != "sqlite":
                return url, state, cleanup
            self._template = (url, state, cleanup)
        url, state, _ = self._template
        copy, cleanup = self._new()
        _copy_sqlite(url, copy)
        return copy, dict(state), cleanup

    def give_back(self, ledger: tuple[str, State, Cleanup], reusable: bool) -> None:
        if reusable and self._template is None and self._spare is None:
            self._spare = ledger
        else:
            ledger[2]()

    def close(self) -> None:
        for held in (self._spare, self._template):
            if held is not None:
                held[2]()
        self._spare = self._template = None


@dataclass(frozen=True)
class KillResult:
    """One kill and the checker's verdict."""

    index: int
    delay: float
    phase: str
    outcome: str
    failures: tuple[str, ...]
    seconds: float


def run_campaign(
    scenario: str,
    kills: int,
    url_factory: UrlFactory,
    seed: int,
    *,
    scale: float = 1.0,
    window: float | None = None,
    overshoot: float = 0.1,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Kill the scenario's writer ``kills`` times and check the ledger after each.

    Args:
        scenario: a key of ``SCENARIOS``.
        kills: how many children to SIGKILL.
        url_factory: returns a URL for a new empty ledger, or ``(url, cleanup)``;
            ``sqlite_files(dir)`` and ``postgres_schemas(server)`` make one.
        seed: seeds the kill delays.
        scale: multiplies the scenario's size (batches, descendants, events).
        window: the child's working time in seconds (``ready`` to ``done``);
            None measures it with one unkilled, checked run.
        overshoot: delays are uniform over ``[0, window * (1 + overshoot)]``, so
            a few kills land just after the work committed.
        log: called with one line per kill.

    Returns:
        ``scenario``, ``backend``, ``seed``, ``kills``, ``mid_work`` (the child had
        printed ``started`` but not ``done``), ``before_work``, ``after_work``,
        ``failures`` (kills with a failed check), ``checks_passed``, ``outcomes``
        (outcome → count), ``window``, ``prepared`` (ledgers prepared),
        ``seconds``, ``calibration`` (outcome and failures of the unkilled run,
        or None) and ``failed`` (per failing kill: index, delay, phase, outcome,
        failures).
    """
    spec = SCENARIOS[scenario]
    rng = random.Random(seed)
    started = time.perf_counter()
    pool = _Ledgers(spec, url_factory, scale)
    results: list[KillResult] = []
    calibration: dict[str, Any] | None = None
    try:
        if window is None:
            held = pool.take()
            run = run_child(scenario, held[0], held[1], None)
            checked = check(scenario, held[0], held[1], run)
            pool.give_back(held, checked.reusable)
            done = run.time_of("done")
            if done is None:
                checked.failures.append(f"the unkilled child never finished: {run.stderr[-2000:]}")
            window = done or 1.0
            calibration = {"outcome": checked.outcome, "failures": checked.failures}
            if log is not None:
                log(f"{scenario}: window {window:.2f} s, unkilled run {checked.outcome}")
        for index in range(kills):
            t = time.perf_counter()
            delay = rng.uniform(0.0, window * (1 + overshoot))
            held = pool.take()
            run = run_child(scenario, held[0], held[1], delay)
            checked = check(scenario, held[0], held[1], run)
            pool.give_back(held, checked.reusable)
            result = KillResult(
                index=index,
                delay=delay,
                phase=run.phase,
                outcome=checked.outcome,
                failures=tuple(checked.failures),
                seconds=time.perf_counter() - t,
            )
            results.append(result)
            if log is not None:
                verdict = "ok" if not result.failures else "FAILED: " + "; ".join(result.failures)
                log(
                    f"{scenario} kill {index + 1}/{kills} at {delay:.3f} s ({result.phase}): "
                    f"{result.outcome} — {verdict}"
                )
    finally:
        pool.close()
    phases = Counter(r.phase for r in results)
    failed = [r for r in results if r.failures]
    return {
        "scenario": scenario,
        "backend": pool.backend,
        "seed": seed,
        "kills": len(results),
        "mid_work": phases["mid"],
        "before_work": phases["before"],
        "after_work": phases["after"],
        "failures": len(failed),
        "checks_passed": len(results) - len(failed),
        "outcomes": dict(Counter(r.outcome for r in results)),
        "window": window,
        "prepared": pool.prepared,
        "seconds": time.perf_counter() - started,
        "calibration": calibration,
        "failed": [
            {
                "index": r.index,
                "delay": r.delay,
                "phase": r.phase,
                "outcome": r.outcome,
                "failures": list(r.failures),
            }
            for r in failed
        ],
    }


__all__ = [
    "SCENARIOS",
    "Checked",
    "ChildRun",
    "KillResult",
    "Scenario",
    "check",
    "check_common",
    "child_main",
    "emit",
    "postgres_schemas",
    "raw_tracking",
    "run_campaign",
    "run_child",
    "sqlite_files",
]
