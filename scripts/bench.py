"""Benchmark provledger against raw SQLite / PostgreSQL floors, side by side in one run.

SQLite ledgers live in a temporary directory; the PostgreSQL part uses a fresh
schema ``bench_<random>`` that is dropped afterwards. The script prints one table
of ratios, each with its goal and whether it holds, and (``--json``) writes
``{"ratios": {name: value}, "figures": {name: value}}``. It asserts correctness
(a revocation marks exactly the expected descendants, rebuilds reproduce the
views, reads find what they should, raw baselines use the ledger's own SQLite
settings) and exits 1 with a message if a check fails; it never asserts timings.

Ledgers
    *small*: ``--small`` records (10k): a chain of 50 accepted records (each the
    parent of the next), written one command at a time through
    ``Session.propose`` / ``Session.accept``, then accepted fillers through the
    library's batch write path: ``Record.propose(...)`` / ``.accept(...)`` build
    the aggregates, and the events of 500 of them (``collect_events()``, 1000
    events) are appended in one ``ledger.engine.transact(lambda w: w.append(events))``
    (the commands' own write transaction and ``Write.append``), updating the views
    in that transaction exactly as the commands do (through the commands, at ~1 ms
    each, the fillers alone would take a quarter of the ``--quick`` time; command
    throughput has its own ratio).
    The single-command measurement and the revocation DAGs (below) add a few
    thousand records to it.

    *large*: ``--large`` accepted fillers (200k; 25k with ``--quick``) through the
    same batch path. It serves the rebuild and as-of measurements.

    *huge*: ``--huge`` filler records (1M; 400k with ``--quick``) imported with
    ``Session.propose_many`` in chunks of ``--chunk`` (one transaction each). The
    import's rate is measured from its first chunk on; if finishing would overrun
    ``--build-budget`` seconds the import stops at the largest size that fits, and
    the figures and the table caption give the size actually built
    (``huge_records`` beside ``huge_records_requested``). When the import passes
    ``--rss-base`` records the file is copied (SQLite backup API): that copy is the
    *base* ledger of ``rss_growth``. 256 sampled fillers are then accepted through
    the batch path so reads find them.

    *revocation DAGs*: in the small and the huge ledger, ``--revokes`` + 1 DAGs of a
    root and 1,000 descendants (fan-out 10: levels of 10, 100, 890; below level 1
    every record also has a second parent on the level above, so it is a DAG, not a
    tree), proposed with ``propose_many`` and accepted through the batch path.

    *PostgreSQL*: a ledger in a fresh schema; ``--pg-records`` fillers imported
    with ``propose_many``, then single commands.

Ratios (goal in brackets; "rate" ratios are ledger rate / raw rate, "time" ratios
are ledger cost / baseline cost, except the speedup, which is baseline / ledger)
    single_command_vs_raw_txn [>= 0.5]
        Rate: durable single commands/s in the small ledger (``propose`` of a new
        record, then ``accept`` of it; each its own transaction, views included)
        over raw ``sqlite3`` single-row inserts into a copy of the ``stored_events``
        table (same DDL, same ``journal_mode`` and ``synchronous``, checked with
        PRAGMA), BEGIN/INSERT/COMMIT each. Blocks of 50 of each side alternate.
        Raw inserts first run until the copy's WAL file stops growing, as the
        ledger's has (``settle_wal``): a commit that grows the file costs about
        twice one that overwrites frames already checkpointed.
    bulk_import_vs_raw_executemany [>= 0.3]
        Rate: events/s inside the ``propose_many`` calls that built the huge ledger
        over one raw ``executemany`` transaction writing the same stored rows (the
        same msgpack blobs, read back from the huge ledger) into a copy of the table.
    bulk_rate_growth [>= 0.8]
        Rate: the huge import's marginal rate (records/s inside ``propose_many``)
        over its last 10,000 records (whole chunks; 1M records in a full run, the
        ``--quick`` huge size otherwise) over the same from 10,000 records on: how
        well the import keeps its pace as the ledger grows.
    revoke_size_growth [<= 1.5]
        Time: ``Session.revoke`` of a root with 1,000 descendants in the huge ledger
        over the same in the small one (medians of ``--revokes`` revocations each,
        alternating between the ledgers).
    revoke_vs_naive_speedup [>= 20]
        Time: the naive baseline over provledger's revoke, in the huge ledger. The
        naive baseline is the seed's algorithm: repeat ``affected |= {records whose
        parents or observed dependencies intersect affected}`` by scanning every
        current record's ``parents``/``observed`` in ``pl_records`` until a pass adds
        nothing, then build the same Revoked / MarkedStale events the way
        ``Session.revoke`` does and append them in one
        ``ledger.engine.transact(lambda w: w.append(events))`` (the same write
        path). It skips the command's access checks and reads outside the writers'
        lock, which favours the baseline.
        The scan costs in proportion to the ledger's records and the revocation
        does not, so the ratio grows with the huge ledger: ``--quick`` builds 400k
        records to keep it comparable with the full run's 1M.
    stale_marking_vs_bulk_event [<= 2]
        Time: cost per descendant marked STALE (huge-ledger revoke time / 1,000) over
        the cost per event of the huge import.
    read_depth_growth [<= 1.3]
        Time: ``session.read(scope, claim_key)`` of the last record of the 50-deep
        chain over the first one (ancestry depth 50 vs 1), in the small ledger.
    read_size_growth [<= 1.3]
        Time: the same read of accepted fillers in the huge ledger over the small
        one; each side cycles through 256 fillers picked at random (fixed seed).
        The large ledger is read in the same rotation (figure ``read_large_us``).
    read_vs_raw_lookup [<= 3]
        Time: the small-ledger filler read over a raw ``sqlite3`` primary-key lookup
        of the same records' current row in ``pl_records``.
    rebuild_vs_raw_decode [>= 0.25; 0.5 the longer aim]
        Rate: ``Ledger.rebuild()`` events/s of the large ledger over a raw ``sqlite3``
        read of the same ``stored_events`` rows in log order plus ``msgpack.unpackb``
        of each state (the physical floor; median of 3 passes).
    as_of_vs_rebuild [<= 0.1]
        Time: ``session.as_of(position=mid).read(...)`` at the middle of the large log
        (a record accepted before ``mid`` and revoked after it) over the rebuild.
    as_of_page_vs_page [<= 2]
        Time: ``session.as_of(position=mid).records(scope, limit=PAGE)`` over
        ``session.records(scope, limit=PAGE)`` on the large ledger (the same records:
        its ids sort in the order they were proposed).
    rss_growth [<= 2]
        Peak RSS (VmHWM in ``/proc/self/status``) of a child process running
        ``Ledger.open(url).rebuild()`` on the huge ledger over the same on the base
        copy (not ``ru_maxrss``: see ``REBUILD_CHILD``).
    pg_bulk_vs_raw_executemany [>= 0.3]
        Rate: PostgreSQL ``propose_many`` import events/s over a raw ``psycopg``
        ``executemany`` of the same rows (the same blobs) in one transaction into a
        table made ``LIKE`` the ledger's ``provledger_events`` (indexes included).
    pg_single_command_vs_raw_txn [>= 0.5]
        Rate: PostgreSQL single commands/s over raw
        ``psycopg`` single-row inserts with a commit each (same server settings;
        ``synchronous_commit`` checked to match).

LangGraph's SQLite store (what agent builders pick instead): a fresh ledger file and
a fresh ``SqliteStore`` file on its own connection, set to the ledger's
``journal_mode`` and ``synchronous`` (checked with PRAGMA after ``setup()``), each
first given ``SAMPLE`` memories under the same namespace and keys. Latencies are
medians of interleaved calls; every put writes a new key on each side.
    store_put_vs_langgraph_sqlite [<= 2]
        Time: ``LedgerStore.put`` (approver policy: a proposal, then its acceptance,
        two ledger commands; so the goal is twice propose's) over ``SqliteStore.put``.
        Both files' WALs are first settled at their size with untimed puts
        (``settle_wal``, as for single commands).
    store_get_vs_langgraph_sqlite [<= 1]
        Time: ``LedgerStore.get`` (the eligibility chain) over ``SqliteStore.get``.
    store_get_updated_vs_langgraph_sqlite [<= 1]
        The same for ``SAMPLE`` other keys each put twice on both sides: the ledger
        keeps the first version, SUPERSEDED, beside the second, which names it.
    store_get_history_growth [<= 1.3]
        Time: ``LedgerStore.get`` of 4 keys put ``HISTORY`` times each over the
        same of the keys put once (the ledger keeps every version).
    store_put_history_growth [<= 1.3]
        Time: ``LedgerStore.put`` of a new version of those 4 keys over the same of
        the keys put once (each put adds a version on either side).
    store_search_history_growth [<= 1.3]
        Time: ``LedgerStore.search(namespace, limit=10)`` of a namespace of 50 keys
        put ``HISTORY // 10`` times each over the same of 50 keys put once (each
        namespace in a scope of its own).
    store_search_crowd_growth [<= 1.3]
        Time: ``LedgerStore.search(namespace, limit=10)`` of a namespace of 50 keys
        put once in a scope whose 100 other namespaces then got ``CROWD`` keys, over
        the same of the 50 keys in a scope of their own.
    propose_vs_langgraph_sqlite_put [<= 1]
        Time: ``Session.propose`` of a new record over ``SqliteStore.put``.
    read_vs_langgraph_sqlite_get [<= 1]
        Time: ``Session.read`` of the stored memories' claims over ``SqliteStore.get``.
    ``--only`` with just these names builds nothing else (a few seconds); any other
    name runs the whole benchmark and shows the names given.

Latencies are medians of many calls; the calls of the sides of a comparison are
interleaved, rotating their order, so drift hits both alike.

Examples::

    python scripts/bench.py --quick --json /tmp/bench.json
    python scripts/bench.py --huge 500000 --build-budget 300 --no-pg
    python scripts/bench.py --json results/bench.json
    python scripts/bench.py --only store_put_vs_langgraph_sqlite,store_get_vs_langgraph_sqlite
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from itertools import cycle
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import msgpack
import psycopg
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ledger import Kind, Ledger, Outcome, Session
from ledger.domain import Record, Status, uuid_of_hex
from ledger.engine import Write
from ledger.errors import install_hint
from ledger.rules import FINAL
from ledger.serialization import unpack
from projections.record_table import row_columns
from projections.validity import current_many

SCOPE = "bench"
PROPOSER = "agent"
APPROVER = "reviewer"
CHAIN_DEPTH = 50
BATCH = 500  # aggregates per transaction on the batch path
SAMPLE = 256  # filler records each size-growth side cycles through
HISTORY = 200  # versions of each long-lived LangGraph key (``store_*_history_growth``)
PAGE = 50  # records of a page of ``Session.records`` (``as_of_page_vs_page``)
CROWD = 20_000  # keys of other namespaces beside a searched one (``store_search_crowd_growth``)
DESCENDANTS = 1_000  # records below each revoked root
FANOUT = 10
BLOCK = 50  # single commands (and raw inserts) per interleaved block
WAL_SETTLE_BLOCK = 100  # writes between looks at a WAL file's size (settle_wal)
WAL_SETTLE_LIMIT = 50_000
SLOWDOWN = 1.25  # assumed slowdown of the rest of the import when projecting its time
SEED = 20260101
GROWTH_AT = 10_000  # bulk_rate_growth compares the import's rate here with its end
GROWTH_WINDOW = 10_000  # records each side of bulk_rate_growth is measured over
REASON = "benchmark: evidence withdrawn"

FULL: dict[str, Any] = {
    "small": 10_000,
    "large": 200_000,
    "huge": 1_000_000,
    "rss_base": 100_000,
    "pg_records": 50_000,
    "calls": 3_000,
    "as_of_calls": 1_000,
    "commands": 2_000,
    "revokes": 3,
    "build_budget": 540.0,
}
QUICK: dict[str, Any] = {
    "small": 10_000,
    "large": 25_000,
    # revoke_vs_naive_speedup grows with this size (the naive scan costs in
    # proportion to the records, the revocation does not): 400k keeps it near the
    # full run's, 200k read about half of it.
    "huge": 400_000,
    "rss_base": 40_000,
    "pg_records": 10_000,
    "calls": 1_000,
    "as_of_calls": 300,
    "commands": 300,
    "revokes": 2,
    "build_budget": 120.0,
}

#: name → (comparison, threshold); every ratio the script reports, in table order.
GOALS: dict[str, tuple[str, float]] = {
    "single_command_vs_raw_txn": (">=", 0.5),
    "bulk_import_vs_raw_executemany": (">=", 0.3),
    "bulk_rate_growth": (">=", 0.8),
    "revoke_size_growth": ("<=", 1.5),
    "revoke_vs_naive_speedup": (">=", 20.0),
    "stale_marking_vs_bulk_event": ("<=", 2.0),
    "read_depth_growth": ("<=", 1.3),
    "read_size_growth": ("<=", 1.3),
    "read_vs_raw_lookup": ("<=", 3.0),
    "rebuild_vs_raw_decode": (">=", 0.25),  # 0.5 is the longer aim
    "as_of_vs_rebuild": ("<=", 0.1),
    "as_of_page_vs_page": ("<=", 2.0),
    "rss_growth": ("<=", 2.0),
    "pg_bulk_vs_raw_executemany": (">=", 0.3),
    "pg_single_command_vs_raw_txn": (">=", 0.5),
    "store_put_vs_langgraph_sqlite": ("<=", 2.0),
    "store_get_vs_langgraph_sqlite": ("<=", 1.0),
    "store_get_updated_vs_langgraph_sqlite": ("<=", 1.0),
    "store_get_history_growth": ("<=", 1.3),
    "store_put_history_growth": ("<=", 1.3),
    "store_search_history_growth": ("<=", 1.3),
    "store_search_crowd_growth": ("<=", 1.3),
    "propose_vs_langgraph_sqlite_put": ("<=", 1.0),
    "read_vs_langgraph_sqlite_get": ("<=", 1.0),
}
#: The ratios ``langgraph_bench`` measures; ``--only`` with just these runs nothing else.
LANGGRAPH_RATIOS = (
    "store_put_vs_langgraph_sqlite",
    "store_get_vs_langgraph_sqlite",
    "store_get_updated_vs_langgraph_sqlite",
    "store_get_history_growth",
    "store_put_history_growth",
    "store_search_history_growth",
    "store_search_crowd_growth",
    "propose_vs_langgraph_sqlite_put",
    "read_vs_langgraph_sqlite_get",
)
LG_NAMESPACE = (SCOPE, "memories")

RAW_EVENTS_SQL = (
    "SELECT rowid, originator_id, originator_version, topic, state FROM stored_events "
    "ORDER BY rowid"
)
RAW_LOOKUP_SQL = "SELECT * FROM pl_records WHERE record_id=? AND to_pos IS NULL"
RAW_INSERT_SQL = (
    "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
    "VALUES (?, ?, ?, ?)"
)
STORED_ROWS_SQL = (
    "SELECT originator_id, originator_version, topic, state FROM stored_events "
    "WHERE rowid BETWEEN ? AND ? ORDER BY rowid"
)
NAIVE_SCAN_SQL = (
    f"SELECT r.record_id, {row_columns('r', ['parents', 'observed'])} "
    "FROM pl_records r WHERE r.to_pos IS NULL"
).replace("{t}", "")

#: Runs in a child process so its peak RSS is the rebuild's alone. The peak is
#: VmHWM, not ``ru_maxrss``: Linux carries the parent's RSS at fork over exec into
#: the child's ``ru_maxrss`` (and so into RUSAGE_CHILDREN), which would report the
#: benchmark process's own size for both ledgers.
REBUILD_CHILD = """
import json, sys
from ledger import Ledger

def hwm_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0

with Ledger.open(sys.argv[1]) as ledger:
    opened = hwm_kib()
    report = ledger.rebuild()
print(json.dumps({
    "events": report.events,
    "seconds": report.seconds,
    "matched": report.digest_before == report.digest_after,
    "open_kib": opened,
    "peak_kib": hwm_kib(),
}))
"""

err = Console(stderr=True)
_T0 = time.perf_counter()


def note(message: str) -> None:
    """A progress line on stderr, stamped with the seconds since the script started."""
    err.print(f"[dim]{time.perf_counter() - _T0:7.1f} s[/dim]  {message}")


class BenchError(Exception):
    """A correctness check failed: the figures would measure the wrong thing."""


@dataclass(frozen=True)
class Opened:
    """A ledger with a proposer and an approver session (both may read)."""

    ledger: Ledger
    proposer: Session
    approver: Session
    path: Path | None


@dataclass(frozen=True)
class Sizes:
    """What to build and how many calls to time (see ``FULL`` / ``QUICK``)."""

    small: int
    large: int
    huge: int
    rss_base: int
    pg_records: int
    calls: int
    as_of_calls: int
    commands: int
    revokes: int
    build_budget: float
    chunk: int


@dataclass(frozen=True)
class Import:
    """The huge ledger's ``propose_many`` import."""

    requested: int
    records: int
    events: int
    seconds: float  # inside propose_many only
    wall: float
    first_position: int
    last_position: int
    base_path: Path | None
    base_records: int
    first_rate: float  # records/s of the first chunk (the calibration)
    #: (records before the call, records in it, seconds inside it) per ``propose_many``
    chunks: tuple[tuple[int, int, float], ...] = ()


@dataclass(frozen=True)
class Dag:
    """A revocation root and its descendants."""

    root: str
    descendants: frozenset[str]
    depth: int


def filler_id(i: int) -> str:
    """Record id of filler ``i`` (same in every ledger)."""
    return f"fill-{i:07d}"


def filler_key(i: int) -> str:
    """Claim key of filler ``i``."""
    return f"fill:{i}"


def filler_value(i: int) -> dict[str, Any]:
    """A small, realistic claim value."""
    return {"n": i, "text": f"observed value number {i}"}


def filler_item(i: int) -> dict[str, Any]:
    """The ``propose_many`` item of filler ``i``."""
    return {
        "scope": SCOPE,
        "claim_key": filler_key(i),
        "value": filler_value(i),
        "kind": Kind.FACT,
        "id": filler_id(i),
    }


def chain_id(i: int) -> str:
    """Record id of the ``i``-th chain record (0 has no parent)."""
    return f"chain-{i:03d}"


def open_url(url: str, path: Path | None = None) -> Opened:
    """Open (create) a ledger with the two principals granted in ``SCOPE``."""
    ledger = Ledger.open(url)
    admin = ledger.admin()
    admin.grant(PROPOSER, SCOPE, ["propose", "read"])
    admin.grant(APPROVER, SCOPE, ["approve", "read"])
    return Opened(
        ledger=ledger,
        proposer=ledger.authenticate(admin.issue_token(PROPOSER)),
        approver=ledger.authenticate(admin.issue_token(APPROVER)),
        path=path,
    )


def open_ledger(path: Path) -> Opened:
    """Create a ledger file with the two principals granted in ``SCOPE``."""
    return open_url(f"sqlite:///{path}", path)


def file_of(opened: Opened) -> Path:
    """The SQLite file of a file ledger."""
    if opened.path is None:
        raise BenchError(f"ledger {opened.ledger.url} is not an SQLite file")
    return opened.path


def progress_bar() -> Progress:
    """A transient progress bar on stderr."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )


def check(ok: bool, what: str) -> None:
    """Refuse to report figures when the thing measured is not what it should be."""
    if not ok:
        raise BenchError(what)


def check_found(session: Session, claim_key: str, record_id: str, where: str) -> None:
    """The read of ``claim_key`` answers FOUND with exactly ``record_id``."""
    result = session.read(SCOPE, claim_key)
    ids = [r.id for r in result.records]
    check(
        result.outcome == Outcome.FOUND and ids == [record_id],
        f"{where}: read({claim_key!r}) gave {result.outcome} {ids}, expected FOUND [{record_id!r}]",
    )


# -- building the ledgers ------------------------------------------------------------


def append(ledger: Ledger, events: Sequence[Any]) -> int:
    """Append ``events`` in one write transaction of the commands' own path (the
    writers' lock, views caught up, view rows and Merkle leaves with the events);
    returns the log position of the last one."""
    return ledger.engine.transact(lambda w: w.append(events))


def batch_fillers(opened: Opened, records: int, label: str) -> None:
    """``records`` accepted fillers through the batch path (``BATCH`` aggregates per
    transaction)."""
    batch_records(opened, records, label, lambda i: (filler_id(i), SCOPE, filler_key(i)))


def batch_records(
    opened: Opened, records: int, label: str, made: Callable[[int], tuple[str, str, str]]
) -> None:
    """``records`` accepted records through the batch path (``BATCH`` aggregates per
    transaction): record ``i`` has the (id, scope, claim key) ``made(i)`` and the
    value ``filler_value(i)``."""
    ledger = opened.ledger
    with progress_bar() as bar:
        task = bar.add_task(f"{label} (batch path)", total=records)
        for first in range(0, records, BATCH):
            at = datetime.now(UTC)
            batch: list[Record] = []
            for i in range(first, min(first + BATCH, records)):
                record_id, scope, claim_key = made(i)
                record = Record.propose(
                    at=at,
                    record_id=record_id,
                    scope=scope,
                    claim_key=claim_key,
                    kind=Kind.FACT.value,
                    value=filler_value(i),
                    actor=PROPOSER,
                    expires=None,
                    parents=(),
                    observed=(),
                    conditions={},
                    evidence=None,
                    run_id=None,
                    supersedes=None,
                )
                record.accept(APPROVER, "", at)
                batch.append(record)
            append(ledger, [event for record in batch for event in record.collect_events()])
            bar.advance(task, len(batch))


def build_small(path: Path, records: int) -> tuple[Opened, float]:
    """The chain (one command at a time), then ``records - CHAIN_DEPTH`` batch-path fillers."""
    opened = open_ledger(path)
    proposer, approver = opened.proposer, opened.approver
    started = time.perf_counter()
    parent: list[str] = []
    for i in range(CHAIN_DEPTH):
        rid = proposer.propose(
            SCOPE, f"chain:{i}", filler_value(i), Kind.FACT, parents=parent, id=chain_id(i)
        )
        approver.accept(rid)
        parent = [rid]
    batch_fillers(opened, records - CHAIN_DEPTH, "small ledger")
    return opened, time.perf_counter() - started


def build_large(path: Path, records: int) -> tuple[Opened, float]:
    """``records`` fillers through the batch path."""
    opened = open_ledger(path)
    started = time.perf_counter()
    batch_fillers(opened, records, "large ledger")
    return opened, time.perf_counter() - started


def copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite ledger file (the backup API)."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def import_fillers(
    opened: Opened,
    requested: int,
    chunk: int,
    budget: float,
    label: str,
    base: tuple[int, Path] | None = None,
) -> Import:
    """Import fillers ``0..requested-1`` with ``propose_many`` in chunks, within ``budget`` s.

    After each chunk the rest of the import is projected from the wall-clock rate
    of the last few chunks (times ``SLOWDOWN``, as the rate falls while the ledger
    grows); when it would overrun the budget the target shrinks to what fits.
    ``base`` = (records, path): copy the file once that many are in.
    """
    ledger, proposer = opened.ledger, opened.proposer
    first_position = ledger.position + 1
    target, done, inside, first_rate = requested, 0, 0.0, 0.0
    base_path: Path | None = None
    base_records = 0
    recent: deque[tuple[int, float]] = deque(maxlen=5)  # (records, wall seconds) per chunk
    chunks: list[tuple[int, int, float]] = []
    started = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task(f"{label} (propose_many, {chunk} per call)", total=target)
        while done < target:
            n = min(chunk, target - done)
            if base is not None and done < base[0]:
                n = min(n, base[0] - done)  # the base copy gets exactly base[0] records
            t0 = time.perf_counter()
            items = [filler_item(i) for i in range(done, done + n)]
            t1 = time.perf_counter()
            ids = proposer.propose_many(items)
            t2 = time.perf_counter()
            check(len(ids) == n, f"{label}: propose_many returned {len(ids)} ids for {n} items")
            inside += t2 - t1
            chunks.append((done, n, t2 - t1))
            done += n
            bar.advance(task, n)
            recent.append((n, t2 - t0))
            rate = sum(k for k, _ in recent) / sum(s for _, s in recent)
            if not first_rate:
                first_rate = rate
                note(
                    f"{label}: propose_many {rate:,.0f} records/s on the first chunk; "
                    f"{requested:,} records projected at "
                    f"~{requested / rate * SLOWDOWN:,.0f} s"
                    + (f" (budget {budget:,.0f} s)" if budget < float("inf") else "")
                )
            if base is not None and base_path is None and done >= base[0]:
                copy_sqlite(file_of(opened), base[1])
                base_path, base_records = base[1], done
            left = budget - (time.perf_counter() - started)
            if done < target and (target - done) / rate * SLOWDOWN > left:
                fits = int(max(0.0, left) * rate / SLOWDOWN) // chunk * chunk
                target = done + fits
                bar.update(task, total=target)
    wall = time.perf_counter() - started
    if target < requested:
        note(
            f"[yellow]{label}: stopped at {done:,} of {requested:,} records to stay within "
            f"the {budget:,.0f} s build budget[/yellow]"
        )
    last_position = ledger.position
    return Import(
        requested=requested,
        records=done,
        events=last_position - first_position + 1,
        seconds=inside,
        wall=wall,
        first_position=first_position,
        last_position=last_position,
        base_path=base_path,
        base_records=base_records,
        first_rate=first_rate,
        chunks=tuple(chunks),
    )


def marginal_rate(chunks: Sequence[tuple[int, int, float]]) -> tuple[float, int, int]:
    """Records/s inside the ``propose_many`` calls of ``chunks`` (consecutive
    (records before, records, seconds)), with the range of ledger sizes they cover."""
    records = sum(n for _, n, _ in chunks)
    seconds = sum(s for _, _, s in chunks)
    return records / seconds, chunks[0][0], chunks[-1][0] + chunks[-1][1]


def rate_growth(imported: Import) -> tuple[tuple[float, int, int], tuple[float, int, int]]:
    """The import's marginal rate over ``GROWTH_WINDOW`` records from ``GROWTH_AT``
    records on, and over its last ``GROWTH_WINDOW`` records (whole chunks each)."""

    def window(chunks: Sequence[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
        taken: list[tuple[int, int, float]] = []
        for chunk in chunks:
            taken.append(chunk)
            if sum(n for _, n, _ in taken) >= GROWTH_WINDOW:
                break
        return taken

    early = window([c for c in imported.chunks if c[0] >= GROWTH_AT])
    late = window(imported.chunks[::-1])[::-1]
    check(
        bool(early) and early[-1][0] + early[-1][1] <= late[0][0],
        f"the huge import ({imported.records:,} records) is too small to compare its rate "
        f"at {GROWTH_AT:,} records with its end: need at least "
        f"{GROWTH_AT + 2 * GROWTH_WINDOW:,}",
    )
    return marginal_rate(early), marginal_rate(late)


def accept_batch(ledger: Ledger, record_ids: Sequence[str]) -> None:
    """Accept records through the batch path (``BATCH`` per transaction, views included):
    each aggregate is loaded from its events and accepted inside the transaction."""
    at = datetime.now(UTC)
    engine = ledger.engine
    for first in range(0, len(record_ids), BATCH):
        chunk = record_ids[first : first + BATCH]

        def work(w: Write, chunk: Sequence[str] = chunk) -> int:
            events: list[Any] = []
            for rid in chunk:
                record = engine.load_record(w.c, rid)
                record.accept(APPROVER, "", at)
                events += record.collect_events()
            return w.append(events)

        engine.transact(work)


def dag_items(tag: str) -> tuple[Dag, list[dict[str, Any]]]:
    """A root and ``DESCENDANTS`` records below it, as ``propose_many`` items.

    Breadth-first with ``FANOUT`` children per record; below level 1 each record
    also names a second parent on the level above (a DAG: reached twice, marked once).
    """
    root = f"{tag}-root"
    items: list[dict[str, Any]] = [
        {
            "scope": SCOPE,
            "claim_key": f"{tag}:root",
            "value": {"root": tag},
            "kind": Kind.FACT,
            "id": root,
        }
    ]
    levels: list[list[str]] = [[root]]
    made = 0
    while made < DESCENDANTS:
        above: list[str] = levels[-1]
        level: list[str] = []
        for j, parent in enumerate(above):
            for _ in range(FANOUT):
                if made == DESCENDANTS:
                    break
                rid = f"{tag}-{len(levels)}-{len(level)}"
                parents = [parent]
                if len(above) > 1:
                    parents.append(above[(j + 1) % len(above)])
                items.append(
                    {
                        "scope": SCOPE,
                        "claim_key": f"{tag}:{rid}",
                        "value": {"derived": rid},
                        "kind": Kind.INFERENCE,
                        "parents": parents,
                        "id": rid,
                    }
                )
                level.append(rid)
                made += 1
        levels.append(level)
    below = frozenset(rid for level in levels[1:] for rid in level)
    return Dag(root=root, descendants=below, depth=len(levels) - 1), items


def add_dags(opened: Opened, prefix: str, count: int) -> list[Dag]:
    """``count`` accepted revocation DAGs in the ledger."""
    dags = []
    for n in range(count):
        dag, items = dag_items(f"{prefix}{n}")
        ids = opened.proposer.propose_many(items)
        check(len(ids) == DESCENDANTS + 1, f"DAG {dag.root}: {len(ids)} records proposed")
        accept_batch(opened.ledger, ids)
        dags.append(dag)
    return dags


# -- raw floors ----------------------------------------------------------------------


def ledger_pragmas(ledger: Ledger) -> tuple[str, int]:
    """``journal_mode`` and ``synchronous`` of the ledger's own SQLite connection."""
    with ledger.engine.reading() as c:
        c.execute("PRAGMA journal_mode")
        journal = str(c.fetchone()[0]).lower()
        c.execute("PRAGMA synchronous")
        sync = int(c.fetchone()[0])
    return journal, sync


def events_ddl(path: Path) -> list[str]:
    """The DDL of the ledger's ``stored_events`` table and indexes (not its triggers)."""
    con = sqlite3.connect(path)
    try:
        rows = con.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name='stored_events' "
            "AND type IN ('table', 'index') AND sql IS NOT NULL ORDER BY type DESC"
        ).fetchall()
    finally:
        con.close()
    check(bool(rows), f"{path} has no stored_events table")
    return [str(sql) for (sql,) in rows]


def raw_events_db(path: Path, ddl: Sequence[str], pragmas: tuple[str, int]) -> sqlite3.Connection:
    """A raw copy of the events table with the ledger's journal mode and synchronous setting."""
    con = sqlite3.connect(path, isolation_level=None)
    journal, sync = pragmas
    con.execute(f"PRAGMA journal_mode={journal}")
    con.execute(f"PRAGMA synchronous={sync}")
    got = (
        str(con.execute("PRAGMA journal_mode").fetchone()[0]).lower(),
        int(con.execute("PRAGMA synchronous").fetchone()[0]),
    )
    check(got == pragmas, f"raw connection has journal_mode/synchronous {got}, ledger {pragmas}")
    for statement in ddl:
        con.execute(statement)
    return con


def sample_event(path: Path) -> tuple[str, bytes]:
    """(topic, state) of the newest stored event: a realistic row to insert raw."""
    con = sqlite3.connect(path)
    try:
        row = con.execute(
            "SELECT topic, state FROM stored_events ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
    finally:
        con.close()
    check(row is not None, f"{path} has no stored events")
    return str(row[0]), bytes(row[1])


def raw_decode(path: Path) -> tuple[int, float]:
    """Read every stored event in log order and unpack its state: (rows, seconds)."""
    con = sqlite3.connect(path)
    try:
        rows = 0
        started = time.perf_counter()
        for _rowid, _oid, _version, _topic, state in con.execute(RAW_EVENTS_SQL):
            msgpack.unpackb(state)
            rows += 1
        return rows, time.perf_counter() - started
    finally:
        con.close()


def raw_executemany(
    source: Path, imported: Import, target: Path, pragmas: tuple[str, int]
) -> tuple[int, float]:
    """Write the import's stored rows again with raw ``executemany``, one transaction.

    Rows are read from the ledger in untimed slices; only the ``executemany``
    calls and the commit are timed. Returns (rows, seconds).
    """
    src = sqlite3.connect(source)
    raw = raw_events_db(target, events_ddl(source), pragmas)
    try:
        cursor = src.execute(STORED_ROWS_SQL, (imported.first_position, imported.last_position))
        rows, seconds = 0, 0.0
        raw.execute("BEGIN")
        while chunk := cursor.fetchmany(20_000):
            started = time.perf_counter()
            raw.executemany(RAW_INSERT_SQL, chunk)
            seconds += time.perf_counter() - started
            rows += len(chunk)
        started = time.perf_counter()
        raw.execute("COMMIT")
        seconds += time.perf_counter() - started
        return rows, seconds
    finally:
        raw.close()
        src.close()
        for leftover in (target, Path(f"{target}-wal"), Path(f"{target}-shm")):
            leftover.unlink(missing_ok=True)


def commands_block(opened: Opened, start: int, pairs: int) -> None:
    """``pairs`` times: propose a new record, accept it (2 * ``pairs`` transactions)."""
    for n in range(start, start + pairs):
        rid = opened.proposer.propose(
            SCOPE, f"single:{n}", filler_value(n), Kind.FACT, id=f"single-{n:07d}"
        )
        opened.approver.accept(rid)


def single_commands(
    opened: Opened, raw_insert: Callable[[], None], commands: int
) -> tuple[float, float]:
    """(ledger commands/s, raw single-row commits/s), blocks of ``BLOCK`` alternating."""
    pairs = BLOCK // 2
    ledger_s = raw_s = 0.0
    done = 0
    for block in range(max(1, commands // BLOCK)):
        sides = ["ledger", "raw"] if block % 2 == 0 else ["raw", "ledger"]
        for side in sides:
            started = time.perf_counter()
            if side == "ledger":
                commands_block(opened, block * pairs, pairs)
                ledger_s += time.perf_counter() - started
            else:
                for _ in range(2 * pairs):
                    raw_insert()
                raw_s += time.perf_counter() - started
        done += 2 * pairs
    return done / ledger_s, done / raw_s


def settle_wal(db: Path, write: Callable[[], None], where: str) -> int:
    """Run ``write`` until ``db``'s WAL file stops growing; returns the writes made.

    A commit that appends to a growing WAL file also syncs the file's new size,
    which costs this disk about twice a commit that overwrites frames of a WAL
    already checkpointed (a raw commit: ~300 µs against ~110 µs). The ledger's
    WAL has reached its size before anything is timed, so the raw side's must
    too, or the baseline is slowed by its file's first growth."""
    wal = Path(f"{db}-wal")
    writes = 0
    while True:
        before = wal.stat().st_size if wal.exists() else -1
        for _ in range(WAL_SETTLE_BLOCK):
            write()
        writes += WAL_SETTLE_BLOCK
        if wal.exists() and wal.stat().st_size == before:
            return writes
        check(writes < WAL_SETTLE_LIMIT, f"{where}: the WAL still grew after {writes:,} writes")


def sqlite_raw_inserter(con: sqlite3.Connection, topic: str, state: bytes) -> Callable[[], None]:
    """One raw event row per call: BEGIN / INSERT / COMMIT."""

    def insert() -> None:
        con.execute("BEGIN")
        con.execute(RAW_INSERT_SQL, (uuid.uuid4().hex, 1, topic, state))
        con.execute("COMMIT")

    return insert


# -- revocation ------------------------------------------------------------------------


def timed_revoke(opened: Opened, dag: Dag, where: str) -> float:
    """Seconds of ``Session.revoke`` of the DAG's root; exactly its descendants must go STALE."""
    started = time.perf_counter()
    revocation = opened.approver.revoke(dag.root, REASON)
    seconds = time.perf_counter() - started
    check(
        len(revocation.stale) == len(dag.descendants) and set(revocation.stale) == dag.descendants,
        f"{where}: revoking {dag.root} marked {len(revocation.stale)} records STALE, "
        f"expected exactly its {len(dag.descendants)} descendants",
    )
    return seconds


def naive_revoke(opened: Opened, dag: Dag, where: str) -> tuple[float, float, int]:
    """The seed's fixed-point scan, then the same events through the batch path's append.

    Returns (total seconds, scanning seconds, full passes over ``pl_records``).
    """
    ledger = opened.ledger
    started = time.perf_counter()
    affected = {dag.root}
    passes = 0
    engine = ledger.engine
    with engine.reading() as c:
        while True:
            passes += 1
            c.execute(NAIVE_SCAN_SQL)
            raw: Any = getattr(c, "sqlite_cursor", c)  # eventsourcing wraps sqlite3 cursors
            grown = set()
            while rows := raw.fetchmany(5_000):
                for record_id, parents, observed in rows:
                    if record_id in affected:
                        continue
                    if not affected.isdisjoint(unpack(parents)) or not affected.isdisjoint(
                        unpack(observed)
                    ):
                        grown.add(record_id)
            if not grown:
                break
            affected |= grown
    scanned = time.perf_counter() - started
    check(
        affected - {dag.root} == dag.descendants,
        f"{where}: naive scan reached {len(affected) - 1} records, "
        f"expected {len(dag.descendants)} descendants",
    )
    # The events are built as Session.revoke builds them: the root's from its
    # aggregate, the stale markings from current rows and newest stored versions.
    now = ledger.now()
    below = sorted(affected - {dag.root})
    with engine.reading() as c:
        root = engine.load_record(c, dag.root)
        rows = current_many(c, engine.dialect, below)
        aggregate = {rid: uuid_of_hex(rows[rid]["agg_id"]) for rid in below}
        versions = engine.recorder.last_versions(c, list(aggregate.values()))
    root.revoke(APPROVER, REASON, now)
    marked = [
        Record.stale_event(
            aggregate_id=aggregate[rid],
            version=versions[aggregate[rid]],
            actor=APPROVER,
            cause=dag.root,
            reason=REASON,
            at=now,
        )
        for rid in below
        if rows[rid]["status"] not in FINAL
    ]
    append(ledger, [*root.collect_events(), *marked])
    return time.perf_counter() - started, scanned, passes


def check_statuses(opened: Opened, where: str, revoked: int, stale: int) -> dict[str, Any]:
    """``Ledger.stats()`` shows the expected REVOKED and STALE counts; returns the stats."""
    stats = opened.ledger.stats()
    statuses = stats["statuses"]
    got = (statuses.get(Status.REVOKED.value, 0), statuses.get(Status.STALE.value, 0))
    check(
        got == (revoked, stale),
        f"{where}: {got[0]} REVOKED / {got[1]} STALE records, expected {revoked} / {stale}",
    )
    return stats


# -- reads -----------------------------------------------------------------------------


def interleaved(fns: dict[str, Callable[[], object]], calls: int) -> dict[str, float]:
    """Median seconds per call of each function, calls interleaved in rotating order."""
    names = list(fns)
    for name in names:  # warm caches and prepared statements
        for _ in range(max(10, calls // 20)):
            fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    clock = time.perf_counter
    for n in range(calls):
        shift = n % len(names)
        for name in names[shift:] + names[:shift]:
            fn = fns[name]
            start = clock()
            fn()
            samples[name].append(clock() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def reader(session: Session, keys: Sequence[str]) -> Callable[[], object]:
    """A call that reads the next claim key of ``keys`` (round-robin)."""
    nxt = cycle(keys).__next__

    def call() -> object:
        return session.read(SCOPE, nxt())

    return call


def raw_lookup(con: sqlite3.Connection, ids: Sequence[str]) -> Callable[[], object]:
    """A call that fetches the next record's current row by primary key."""
    nxt = cycle(ids).__next__

    def call() -> object:
        return con.execute(RAW_LOOKUP_SQL, (nxt(),)).fetchone()

    return call


# -- peak RSS of a rebuild -------------------------------------------------------------


def rebuild_in_child(path: Path, where: str) -> dict[str, Any]:
    """Rebuild the ledger at ``path`` in a child process; its figures (peak RSS in KiB)."""
    done = subprocess.run(
        [sys.executable, "-c", REBUILD_CHILD, f"sqlite:///{path}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"{where}: rebuild child failed: {done.stderr.strip()[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    check(bool(figures["matched"]), f"{where}: rebuild in the child changed the views")
    return figures


# -- PostgreSQL ------------------------------------------------------------------------


def pg_conninfo(url: str) -> str:
    """The libpq URL of a ledger URL (its ``?schema=…`` and other options dropped)."""
    parts = urlsplit(url)
    return urlunsplit(("postgresql", parts.netloc, parts.path, "", ""))


def pg_bench(url: str, sizes: Sizes) -> dict[str, float]:
    """PostgreSQL import and single commands vs raw psycopg, in a fresh schema."""
    schema = f"bench_{secrets.token_hex(6)}"
    conninfo = pg_conninfo(url)
    try:
        admin = psycopg.connect(conninfo, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        raise BenchError(
            f"PostgreSQL at {conninfo} is unreachable ({exc}); pass --no-pg to skip it"
        ) from None
    opened: Opened | None = None
    raw: psycopg.Connection[Any] | None = None
    try:
        opened = open_url(f"{conninfo}?schema={schema}")
        table = f"{schema}.provledger_events"
        imported = import_fillers(
            opened, sizes.pg_records, sizes.chunk, float("inf"), "PostgreSQL ledger"
        )
        check(
            imported.events == sizes.pg_records,
            f"PostgreSQL import appended {imported.events} events for {sizes.pg_records} records",
        )
        raw = psycopg.connect(conninfo)
        with opened.ledger.engine.reading() as c:
            c.execute("SHOW synchronous_commit")
            ledger_sync = str(c.fetchone()["synchronous_commit"])
        raw_sync = raw.execute("SHOW synchronous_commit").fetchone()
        check(
            raw_sync is not None and raw_sync[0] == ledger_sync,
            f"raw connection synchronous_commit={raw_sync}, ledger's {ledger_sync}",
        )
        raw.execute(f"CREATE TABLE {schema}.raw_events (LIKE {table} INCLUDING INDEXES)")
        raw.execute(f"CREATE SEQUENCE {schema}.raw_events_seq")
        raw.execute(
            f"ALTER TABLE {schema}.raw_events ALTER COLUMN notification_id "
            f"SET DEFAULT nextval('{schema}.raw_events_seq')"
        )
        rows = raw.execute(
            f"SELECT originator_id, originator_version, topic, state FROM {table} "
            "WHERE notification_id BETWEEN %s AND %s ORDER BY notification_id",
            (imported.first_position, imported.last_position),
        ).fetchall()
        raw.commit()
        check(len(rows) == imported.events, f"read back {len(rows)} of {imported.events} rows")
        insert = (
            f"INSERT INTO {schema}.raw_events (originator_id, originator_version, topic, state) "
            "VALUES (%s, %s, %s, %s)"
        )
        note(f"PostgreSQL: raw executemany of {len(rows):,} rows in one transaction")
        started = time.perf_counter()
        with raw.cursor() as cur:
            cur.executemany(insert, rows)
        raw.commit()
        raw_bulk = time.perf_counter() - started
        topic, state = rows[-1][2], rows[-1][3]
        pg_raw = raw

        def raw_insert() -> None:
            pg_raw.execute(insert, (uuid.uuid4(), 1, topic, state))
            pg_raw.commit()

        note(f"PostgreSQL: {sizes.commands} single commands vs raw insert + commit")
        ledger_rate, raw_rate = single_commands(opened, raw_insert, sizes.commands)
        import_rate = imported.events / imported.seconds
        return {
            "pg_records": imported.records,
            "pg_import_seconds": imported.seconds,
            "pg_import_events_per_s": import_rate,
            "pg_raw_executemany_seconds": raw_bulk,
            "pg_raw_executemany_rows_per_s": len(rows) / raw_bulk,
            "pg_commands_per_s": ledger_rate,
            "pg_raw_commits_per_s": raw_rate,
        }
    finally:
        if raw is not None:
            raw.close()
        if opened is not None:
            opened.ledger.close()
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.close()


# -- LangGraph's SQLite store ------------------------------------------------------------


def sqlite_store(path: Path, pragmas: tuple[str, int]) -> Any:
    """LangGraph's ``SqliteStore`` on its own file, with the ledger's journal mode and
    synchronous setting (checked after ``setup()``)."""
    try:
        from langgraph.store.sqlite import SqliteStore
    except ImportError:
        raise BenchError(
            f"LangGraph's SQLite store is not installed; {install_hint('langgraph')}"
        ) from None
    con = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    journal, sync = pragmas
    con.execute(f"PRAGMA journal_mode={journal}")
    con.execute(f"PRAGMA synchronous={sync}")
    store = SqliteStore(con)
    store.setup()
    got = (
        str(con.execute("PRAGMA journal_mode").fetchone()[0]).lower(),
        int(con.execute("PRAGMA synchronous").fetchone()[0]),
    )
    check(got == pragmas, f"SqliteStore has journal_mode/synchronous {got}, ledger {pragmas}")
    return store


def langgraph_bench(workdir: Path, sizes: Sizes) -> dict[str, float]:
    """``LedgerStore`` put/get and ``Session`` propose/read against ``SqliteStore``."""
    from ledger.integrations.langgraph import LedgerStore
    from ledger.integrations.langgraph.threads import Ids

    opened = open_ledger(workdir / "langgraph-ledger.db")
    admin = opened.ledger.admin()
    pragmas = ledger_pragmas(opened.ledger)
    baseline = sqlite_store(workdir / "langgraph-sqlite-store.db", pragmas)
    store = LedgerStore(
        opened.ledger,
        token=admin.issue_token(PROPOSER),
        approver_token=admin.issue_token(APPROVER),
    )
    try:
        keys = [f"k{i}" for i in range(SAMPLE)]
        for i, key in enumerate(keys):
            store.put(LG_NAMESPACE, key, filler_value(i))
            baseline.put(LG_NAMESPACE, key, filler_value(i))
        claims = [f"{LG_NAMESPACE[1]}/{key}" for key in keys]
        for i in (0, SAMPLE - 1):
            mine, theirs = store.get(LG_NAMESPACE, keys[i]), baseline.get(LG_NAMESPACE, keys[i])
            check(
                mine is not None and theirs is not None and mine.value == theirs.value,
                f"LedgerStore.get({keys[i]!r}) gave {mine}, SqliteStore.get gave {theirs}",
            )
            check_found(
                opened.proposer,
                claims[i],
                opened.proposer.read(SCOPE, claims[i]).records[0].id,
                "LedgerStore's ledger",
            )
        fresh = iter(range(10**9)).__next__
        cycle_keys, cycle_claims = cycle(keys).__next__, cycle(claims).__next__
        # Both files' WALs at their size before anything is timed (see settle_wal).
        settle_wal(
            workdir / "langgraph-sqlite-store.db",
            lambda: baseline.put(LG_NAMESPACE, f"warm-{fresh()}", filler_value(0)),
            "SqliteStore",
        )
        settle_wal(
            workdir / "langgraph-ledger.db",
            lambda: store.put(LG_NAMESPACE, f"warm-{fresh()}", filler_value(0)),
            "LedgerStore's ledger",
        )

        def store_put() -> None:
            store.put(LG_NAMESPACE, f"new-{fresh()}", filler_value(0))

        def sqlite_put() -> None:
            baseline.put(LG_NAMESPACE, f"new-{fresh()}", filler_value(0))

        def propose() -> None:
            opened.proposer.propose(SCOPE, f"new:{fresh()}", filler_value(0), Kind.FACT)

        note(f"LangGraph: put vs SqliteStore.put ({sizes.commands} calls each, {pragmas})")
        puts = interleaved(
            {"store_put": store_put, "sqlite_put": sqlite_put, "propose": propose},
            sizes.commands,
        )
        note(f"LangGraph: get vs SqliteStore.get ({sizes.calls} calls each)")
        gets = interleaved(
            {
                "store_get": lambda: store.get(LG_NAMESPACE, cycle_keys()),
                "sqlite_get": lambda: baseline.get(LG_NAMESPACE, cycle_keys()),
                "read": lambda: opened.proposer.read(SCOPE, cycle_claims()),
            },
            sizes.calls,
        )
        written = store.search(LG_NAMESPACE, limit=1)
        check(
            bool(written) and written[0].key.startswith("new-"),
            f"the newest LedgerStore item is {written[0].key if written else None}, not a put",
        )
        # Keys put twice, measured after the rest so its ratios keep their own run.
        updated = [f"u{i}" for i in range(SAMPLE)]
        for i, key in enumerate(updated):
            for value in (filler_value(i), filler_value(i + 1)):
                store.put(LG_NAMESPACE, key, value)
                baseline.put(LG_NAMESPACE, key, value)
        for i in (0, SAMPLE - 1):
            mine, theirs = (
                store.get(LG_NAMESPACE, updated[i]),
                baseline.get(LG_NAMESPACE, updated[i]),
            )
            check(
                mine is not None
                and theirs is not None
                and mine.value == theirs.value
                and mine.value == filler_value(i + 1),
                f"LedgerStore.get({updated[i]!r}) gave {mine}, SqliteStore.get gave {theirs}",
            )
        cycle_updated = cycle(updated).__next__
        note(f"LangGraph: get of keys put twice ({sizes.calls} calls each)")
        gets |= interleaved(
            {
                "store_get_updated": lambda: store.get(LG_NAMESPACE, cycle_updated()),
                "sqlite_get_updated": lambda: baseline.get(LG_NAMESPACE, cycle_updated()),
            },
            sizes.calls,
        )
        # Long-lived keys: does a key's history slow its gets and puts?
        long = [f"long{i}" for i in range(4)]
        for key in long:
            for version in range(HISTORY):
                store.put(LG_NAMESPACE, key, filler_value(version))
        got = store.get(LG_NAMESPACE, long[0])
        check(
            got is not None and got.value == filler_value(HISTORY - 1),
            f"LedgerStore.get({long[0]!r}) after {HISTORY} puts gave {got}",
        )
        cycle_long = cycle(long).__next__
        note(f"LangGraph: keys put {HISTORY} times vs once ({sizes.calls} gets each)")
        gets |= interleaved(
            {
                "store_get_short": lambda: store.get(LG_NAMESPACE, cycle_keys()),
                "store_get_long": lambda: store.get(LG_NAMESPACE, cycle_long()),
            },
            sizes.calls,
        )
        note(f"LangGraph: put on keys put {HISTORY} times vs once ({sizes.commands // 4} each)")
        puts |= interleaved(
            {
                "store_put_short": lambda: store.put(LG_NAMESPACE, cycle_keys(), filler_value(1)),
                "store_put_long": lambda: store.put(LG_NAMESPACE, cycle_long(), filler_value(1)),
            },
            sizes.commands // 4,
        )
        # Each in a scope of its own: a scope's listing passes over its other keys.
        once, often = ("lg-once", "memories"), ("lg-often", "memories")
        for scope in (once[0], often[0]):
            admin.grant(PROPOSER, scope, ["propose", "read"])
            admin.grant(APPROVER, scope, ["approve", "read"])
        for version in range(HISTORY // 10):
            for n in range(50):
                if version == 0:
                    store.put(once, f"k{n}", filler_value(n))
                store.put(often, f"k{n}", filler_value(version))
        found = store.search(often, limit=10)
        check(
            len(found) == 10 and all(i.value == filler_value(HISTORY // 10 - 1) for i in found),
            f"LedgerStore.search({often!r}, limit=10) gave {found}",
        )

        def searches(what: str, **namespaces: tuple[str, str]) -> dict[str, float]:
            """Interleaved ``search(namespace, limit=10)`` of each named namespace."""
            note(f"LangGraph: search, {what} ({sizes.calls // 10})")
            return interleaved(
                {name: partial(store.search, ns, limit=10) for name, ns in namespaces.items()},
                sizes.calls // 10,
            )

        gets |= searches(
            f"keys put {HISTORY // 10} times vs once",
            store_search_short=once,
            store_search_long=often,
        )
        # The same 50 keys in a scope where other namespaces then got CROWD keys,
        # with the store's own ids (newer ones sort first, as a listing meets them).
        busy = ("lg-busy", "memories")
        admin.grant(PROPOSER, busy[0], ["propose", "read"])
        admin.grant(APPROVER, busy[0], ["approve", "read"])
        for n in range(50):
            store.put(busy, f"k{n}", filler_value(n))
        ids = Ids()
        batch_records(
            opened,
            CROWD,
            f"LangGraph: {CROWD:,} keys in 100 other namespaces",
            lambda i: (ids.next(), busy[0], f"other{i % 100}/k{i}"),
        )
        found = store.search(busy, limit=10)
        check(
            len(found) == 10 and all(i.namespace == busy for i in found),
            f"LedgerStore.search({busy!r}, limit=10) gave {found}",
        )
        gets |= searches(
            f"among {CROWD:,} other keys vs alone",
            store_search_alone=once,
            store_search_crowded=busy,
        )
    finally:
        store.close()
        baseline.conn.close()
        opened.ledger.close()
    return {
        "lg_sample": SAMPLE,
        "lg_sqlite_synchronous": pragmas[1],
        "lg_store_put_us": puts["store_put"] * 1e6,
        "lg_sqlite_put_us": puts["sqlite_put"] * 1e6,
        "lg_propose_us": puts["propose"] * 1e6,
        "lg_store_get_us": gets["store_get"] * 1e6,
        "lg_sqlite_get_us": gets["sqlite_get"] * 1e6,
        "lg_read_us": gets["read"] * 1e6,
        "lg_store_get_updated_us": gets["store_get_updated"] * 1e6,
        "lg_sqlite_get_updated_us": gets["sqlite_get_updated"] * 1e6,
        "lg_history": HISTORY,
        "lg_store_get_short_us": gets["store_get_short"] * 1e6,
        "lg_store_get_long_us": gets["store_get_long"] * 1e6,
        "lg_store_put_short_us": puts["store_put_short"] * 1e6,
        "lg_store_put_long_us": puts["store_put_long"] * 1e6,
        "lg_store_search_short_us": gets["store_search_short"] * 1e6,
        "lg_store_search_long_us": gets["store_search_long"] * 1e6,
        "lg_crowd": CROWD,
        "lg_store_search_alone_us": gets["store_search_alone"] * 1e6,
        "lg_store_search_crowded_us": gets["store_search_crowded"] * 1e6,
    }


def langgraph_ratios(f: dict[str, float]) -> dict[str, float]:
    """The LangGraph ratios from ``langgraph_bench``'s figures."""
    return {
        "store_put_vs_langgraph_sqlite": f["lg_store_put_us"] / f["lg_sqlite_put_us"],
        "store_get_vs_langgraph_sqlite": f["lg_store_get_us"] / f["lg_sqlite_get_us"],
        "store_get_updated_vs_langgraph_sqlite": f["lg_store_get_updated_us"]
        / f["lg_sqlite_get_updated_us"],
        "store_get_history_growth": f["lg_store_get_long_us"] / f["lg_store_get_short_us"],
        "store_put_history_growth": f["lg_store_put_long_us"] / f["lg_store_put_short_us"],
        "store_search_history_growth": f["lg_store_search_long_us"] / f["lg_store_search_short_us"],
        "store_search_crowd_growth": f["lg_store_search_crowded_us"]
        / f["lg_store_search_alone_us"],
        "propose_vs_langgraph_sqlite_put": f["lg_propose_us"] / f["lg_sqlite_put_us"],
        "read_vs_langgraph_sqlite_get": f["lg_read_us"] / f["lg_sqlite_get_us"],
    }


# -- the run ---------------------------------------------------------------------------


def check_sizes(sizes: Sizes) -> None:
    """Refuse sizes the measurements cannot work with."""
    if sizes.small <= CHAIN_DEPTH + SAMPLE or sizes.large <= SAMPLE:
        raise BenchError(
            f"sizes too small: need --small > {CHAIN_DEPTH + SAMPLE} and --large > {SAMPLE}"
        )
    if not SAMPLE < sizes.rss_base < sizes.huge:
        raise BenchError(f"need {SAMPLE} < --rss-base < --huge (got {sizes.rss_base:,})")
    if sizes.huge < GROWTH_AT + 2 * GROWTH_WINDOW:
        raise BenchError(
            f"need --huge >= {GROWTH_AT + 2 * GROWTH_WINDOW:,} (bulk_rate_growth compares "
            f"the import's rate at {GROWTH_AT:,} records with its end)"
        )
    if sizes.chunk < 1 or sizes.revokes < 1 or sizes.commands < BLOCK or sizes.pg_records < 1:
        raise BenchError(
            f"need --chunk >= 1, --revokes >= 1, --commands >= {BLOCK}, --pg-records >= 1"
        )


def measure_reads(
    small: Opened, large: Opened, huge: Opened, huge_records: int, sizes: Sizes, rng: random.Random
) -> tuple[dict[str, float], dict[str, float]]:
    """Read latency by ancestry depth, and by ledger size beside a raw PK lookup."""
    reviewer_small = small.approver
    first, last = chain_id(0), chain_id(CHAIN_DEPTH - 1)
    check_found(reviewer_small, "chain:0", first, "small ledger")
    check_found(reviewer_small, f"chain:{CHAIN_DEPTH - 1}", last, "small ledger")
    deepest = reviewer_small.get(last)
    check(deepest.parents == (chain_id(CHAIN_DEPTH - 2),), f"{last} has parents {deepest.parents}")
    note(f"measuring read latency by ancestry depth ({sizes.calls} calls each)")
    depth = interleaved(
        {
            "depth1": lambda: reviewer_small.read(SCOPE, "chain:0"),
            "depth50": lambda: reviewer_small.read(SCOPE, f"chain:{CHAIN_DEPTH - 1}"),
        },
        sizes.calls,
    )

    samples = {
        "small": rng.sample(range(sizes.small - CHAIN_DEPTH), SAMPLE),
        "large": rng.sample(range(sizes.large), SAMPLE),
        "huge": rng.sample(range(huge_records), SAMPLE),
    }
    # The huge ledger's fillers were only proposed; accept the sampled ones.
    accept_batch(huge.ledger, [filler_id(i) for i in samples["huge"]])
    ledgers = {"small": small, "large": large, "huge": huge}
    for name, opened in ledgers.items():
        for i in samples[name][:3]:
            check_found(opened.approver, filler_key(i), filler_id(i), f"{name} ledger")
    small_ids = [filler_id(i) for i in samples["small"]]
    raw_con = sqlite3.connect(file_of(small))
    try:
        for rid in small_ids:
            check(raw_con.execute(RAW_LOOKUP_SQL, (rid,)).fetchone() is not None, rid)
        note(f"measuring read latency by ledger size and raw lookup ({sizes.calls} calls each)")
        fns: dict[str, Callable[[], object]] = {
            name: reader(opened.approver, [filler_key(i) for i in samples[name]])
            for name, opened in ledgers.items()
        }
        fns["raw"] = raw_lookup(raw_con, small_ids)
        size = interleaved(fns, sizes.calls)
    finally:
        raw_con.close()
    return depth, size


def measure_revokes(
    small: Opened, huge: Opened, sizes: Sizes
) -> tuple[list[float], list[float], tuple[float, float, int], tuple[float, float, int], int]:
    """Revocations in the small and the huge ledger, then the naive baseline in each."""
    note(f"building {sizes.revokes + 1} revocation DAGs (1 root + {DESCENDANTS} each) per ledger")
    small_dags = add_dags(small, "dag", sizes.revokes + 1)
    huge_dags = add_dags(huge, "dag", sizes.revokes + 1)
    note(f"revoking {sizes.revokes} roots per ledger, alternating")
    small_times: list[float] = []
    huge_times: list[float] = []
    for n in range(sizes.revokes):
        order = [(small, small_dags, small_times, "small"), (huge, huge_dags, huge_times, "huge")]
        for opened, dags, times, name in order if n % 2 == 0 else order[::-1]:
            times.append(timed_revoke(opened, dags[n], f"{name} ledger"))
    probe = sorted(huge_dags[0].descendants)[-1]
    view = huge.approver.get(probe)
    check(
        view.status == Status.STALE and view.cause == huge_dags[0].root,
        f"huge ledger: {probe} is {view.status} (cause {view.cause}) after revoking its root",
    )
    note("naive fixed-point revocation baseline (small, then huge ledger)")
    naive_small = naive_revoke(small, small_dags[-1], "small ledger")
    naive_huge = naive_revoke(huge, huge_dags[-1], "huge ledger")
    revoked = sizes.revokes + 1
    check_statuses(small, "small ledger", revoked, revoked * DESCENDANTS)
    check_statuses(huge, "huge ledger", revoked, revoked * DESCENDANTS)
    return small_times, huge_times, naive_small, naive_huge, huge_dags[0].depth


def measure_as_of_and_rebuild(
    large: Opened, sizes: Sizes
) -> tuple[int, float, dict[str, float], tuple[int, float], Any]:
    """As-of read and page at the middle of the large log; rebuild against the raw
    decode floor."""
    reviewer = large.approver
    # A record accepted before mid, revoked after it: the as-of answer differs.
    target = sizes.large // 4  # its two events sit near position large / 2
    target_key, target_id = filler_key(target), filler_id(target)
    mid = large.ledger.position // 2
    reviewer.revoke(target_id, "benchmark: answer differs after mid")
    live = reviewer.read(SCOPE, target_key)
    check(live.outcome == Outcome.MISSING, f"live read of revoked {target_id}: {live.outcome}")
    then = reviewer.as_of(position=mid)
    check_found(then, target_key, target_id, f"large ledger as of {mid}")
    note(f"measuring as-of reads at position {mid} ({sizes.as_of_calls} calls)")
    as_of = interleaved(
        {"as_of": lambda: reviewer.as_of(position=mid).read(SCOPE, target_key)},
        sizes.as_of_calls,
    )["as_of"]
    shown = [v.id for v in then.records(SCOPE, limit=PAGE)]
    check(
        len(shown) == PAGE and shown == [v.id for v in reviewer.records(SCOPE, limit=PAGE)],
        f"a page as of {mid} lists {shown[:3]}…, not the first {PAGE} records of the scope",
    )
    note(f"measuring pages of {PAGE} records as of position {mid} and now")
    pages = interleaved(
        {
            "as_of_page": lambda: reviewer.as_of(position=mid).records(SCOPE, limit=PAGE),
            "page": lambda: reviewer.records(SCOPE, limit=PAGE),
        },
        sizes.as_of_calls,
    )

    note("measuring raw decode of the large log (3 passes)")
    passes = [raw_decode(file_of(large)) for _ in range(3)]
    raw_rows = passes[0][0]
    raw_seconds = statistics.median(seconds for _, seconds in passes)
    note(f"rebuilding the large ledger's views ({raw_rows:,} events)")
    report = large.ledger.rebuild()
    check(
        report.digest_before == report.digest_after,
        f"rebuild changed the views: {report.digest_before} != {report.digest_after}",
    )
    check(report.events == raw_rows, f"rebuild applied {report.events} of {raw_rows} events")
    check_found(reviewer, filler_key(0), filler_id(0), "rebuilt large ledger")
    return mid, as_of, pages, (raw_rows, raw_seconds), report


def run(
    sizes: Sizes, workdir: Path, pg_url: str | None, only: Sequence[str] = ()
) -> dict[str, Any]:
    """Build the ledgers, measure, and return ``{"ratios": …, "figures": …}``
    (only the LangGraph comparison when ``only`` names nothing else)."""
    if only and set(only) <= set(LANGGRAPH_RATIOS):
        note("LangGraph's SQLite store only (--only)")
        lg = langgraph_bench(workdir, sizes)
        return {"ratios": langgraph_ratios(lg), "figures": dict(lg)}
    check_sizes(sizes)
    rng = random.Random(SEED)
    small_path = workdir / "small.db"
    note(f"building the small ledger: {sizes.small:,} records (chain via commands)")
    small, small_build = build_small(small_path, sizes.small)
    pragmas = ledger_pragmas(small.ledger)
    check(pragmas[0] == "wal", f"the ledger's SQLite journal_mode is {pragmas[0]}, not wal")

    note(f"single commands vs raw insert + commit ({sizes.commands} each, {pragmas})")
    topic, state = sample_event(small_path)
    raw_single = raw_events_db(workdir / "raw-single.db", events_ddl(small_path), pragmas)
    try:
        raw_insert = sqlite_raw_inserter(raw_single, topic, state)
        settle_wal(workdir / "raw-single.db", raw_insert, "raw single commits")
        command_rate, raw_commit_rate = single_commands(small, raw_insert, sizes.commands)
    finally:
        raw_single.close()

    note(f"building the large ledger: {sizes.large:,} records via the batch path")
    large, large_build = build_large(workdir / "large.db", sizes.large)
    note(f"importing the huge ledger: {sizes.huge:,} records via propose_many")
    huge = open_ledger(workdir / "huge.db")
    imported = import_fillers(
        huge,
        sizes.huge,
        sizes.chunk,
        sizes.build_budget,
        "huge ledger",
        base=(sizes.rss_base, workdir / "base.db"),
    )
    check(
        imported.events == imported.records,
        f"huge import appended {imported.events} events for {imported.records} records",
    )
    if imported.base_path is None or imported.records <= imported.base_records:
        raise BenchError(
            f"the huge import stopped at {imported.records:,} records, not above --rss-base "
            f"{sizes.rss_base:,}; raise --build-budget or lower --rss-base"
        )
    (early_rate, early_from, early_to), (late_rate, late_from, late_to) = rate_growth(imported)
    note(f"raw executemany of the huge import's {imported.events:,} rows, one transaction")
    raw_rows, raw_bulk_seconds = raw_executemany(
        file_of(huge), imported, workdir / "raw-bulk.db", ledger_pragmas(huge.ledger)
    )
    check(raw_rows == imported.events, f"raw executemany wrote {raw_rows} of {imported.events}")

    depth, size = measure_reads(small, large, huge, imported.records, sizes, rng)
    small_times, huge_times, naive_small, naive_huge, dag_depth = measure_revokes(
        small, huge, sizes
    )
    small_stats, huge_stats = small.ledger.stats(), huge.ledger.stats()
    small.ledger.close()
    huge.ledger.close()

    mid, as_of, pages, (decode_rows, decode_seconds), report = measure_as_of_and_rebuild(
        large, sizes
    )
    large.ledger.close()

    note(f"rebuilding the huge ledger ({huge_stats['events']:,} events) in a child process")
    rss_huge = rebuild_in_child(file_of(huge), "huge ledger")
    note(f"rebuilding the base copy ({imported.base_records:,} records) in a child process")
    rss_base = rebuild_in_child(imported.base_path, "base copy")
    check(
        rss_huge["events"] == huge_stats["events"],
        f"child rebuilt {rss_huge['events']} of the huge ledger's {huge_stats['events']} events",
    )

    note("LangGraph's SQLite store: fresh files on both sides")
    lg = langgraph_bench(workdir, sizes)

    pg: dict[str, float] = {}
    if pg_url is not None:
        note(f"PostgreSQL: {sizes.pg_records:,} records via propose_many, fresh schema")
        pg = pg_bench(pg_url, sizes)

    revoke_small = statistics.median(small_times)
    revoke_huge = statistics.median(huge_times)
    import_rate = imported.events / imported.seconds
    raw_bulk_rate = raw_rows / raw_bulk_seconds
    rebuild_rate = report.events / report.seconds
    decode_rate = decode_rows / decode_seconds
    figures: dict[str, float] = {
        "small_records": sizes.small,
        "small_records_total": small_stats["records"],
        "small_build_seconds": small_build,
        "large_records": sizes.large,
        "large_events": decode_rows,
        "large_build_seconds": large_build,
        "large_build_records_per_s": sizes.large / large_build,
        "huge_records_requested": imported.requested,
        "huge_records": imported.records,
        "huge_records_total": huge_stats["records"],
        "huge_events_total": huge_stats["events"],
        "huge_build_budget_seconds": sizes.build_budget,
        "huge_import_wall_seconds": imported.wall,
        "huge_import_seconds": imported.seconds,
        "huge_import_first_chunk_records_per_s": imported.first_rate,
        "import_chunk": sizes.chunk,
        "import_events": imported.events,
        "import_events_per_s": import_rate,
        "bulk_rate_early_records_per_s": early_rate,
        "bulk_rate_early_from": early_from,
        "bulk_rate_early_to": early_to,
        "bulk_rate_late_records_per_s": late_rate,
        "bulk_rate_late_from": late_from,
        "bulk_rate_late_to": late_to,
        "raw_executemany_seconds": raw_bulk_seconds,
        "raw_executemany_rows_per_s": raw_bulk_rate,
        "sqlite_synchronous": pragmas[1],
        "commands_per_s": command_rate,
        "raw_commits_per_s": raw_commit_rate,
        "revoke_descendants": DESCENDANTS,
        "revoke_dag_depth": dag_depth,
        "revokes_per_ledger": sizes.revokes,
        "revoke_small_seconds": revoke_small,
        "revoke_huge_seconds": revoke_huge,
        "revoke_huge_max_seconds": max(huge_times),
        "naive_small_seconds": naive_small[0],
        "naive_small_scan_seconds": naive_small[1],
        "naive_huge_seconds": naive_huge[0],
        "naive_huge_scan_seconds": naive_huge[1],
        "naive_passes": naive_huge[2],
        "stale_mark_us": revoke_huge / DESCENDANTS * 1e6,
        "import_event_us": imported.seconds / imported.events * 1e6,
        "read_depth1_us": depth["depth1"] * 1e6,
        "read_depth50_us": depth["depth50"] * 1e6,
        "read_small_us": size["small"] * 1e6,
        "read_large_us": size["large"] * 1e6,
        "read_huge_us": size["huge"] * 1e6,
        "raw_lookup_us": size["raw"] * 1e6,
        "rebuild_seconds": report.seconds,
        "rebuild_events_per_s": rebuild_rate,
        "raw_decode_seconds": decode_seconds,
        "raw_decode_events_per_s": decode_rate,
        "as_of_position": mid,
        "as_of_read_us": as_of * 1e6,
        "page_records": PAGE,
        "as_of_page_us": pages["as_of_page"] * 1e6,
        "page_us": pages["page"] * 1e6,
        "rss_base_records": imported.base_records,
        "rss_base_events": rss_base["events"],
        "rss_base_peak_mib": rss_base["peak_kib"] / 1024,
        "rss_base_open_mib": rss_base["open_kib"] / 1024,
        "rss_huge_events": rss_huge["events"],
        "rss_huge_peak_mib": rss_huge["peak_kib"] / 1024,
        "rss_huge_open_mib": rss_huge["open_kib"] / 1024,
        "rebuild_huge_seconds": rss_huge["seconds"],
        "rebuild_huge_events_per_s": rss_huge["events"] / rss_huge["seconds"],
        **lg,
        **pg,
    }
    ratios = {
        "single_command_vs_raw_txn": command_rate / raw_commit_rate,
        "bulk_import_vs_raw_executemany": import_rate / raw_bulk_rate,
        "bulk_rate_growth": late_rate / early_rate,
        "revoke_size_growth": revoke_huge / revoke_small,
        "revoke_vs_naive_speedup": naive_huge[0] / revoke_huge,
        "stale_marking_vs_bulk_event": (revoke_huge / DESCENDANTS)
        / (imported.seconds / imported.events),
        "read_depth_growth": depth["depth50"] / depth["depth1"],
        "read_size_growth": size["huge"] / size["small"],
        "read_vs_raw_lookup": size["small"] / size["raw"],
        "rebuild_vs_raw_decode": rebuild_rate / decode_rate,
        "as_of_vs_rebuild": as_of / report.seconds,
        "as_of_page_vs_page": pages["as_of_page"] / pages["page"],
        "rss_growth": rss_huge["peak_kib"] / rss_base["peak_kib"],
        **langgraph_ratios(lg),
    }
    if pg:
        ratios["pg_bulk_vs_raw_executemany"] = (
            pg["pg_import_events_per_s"] / pg["pg_raw_executemany_rows_per_s"]
        )
        ratios["pg_single_command_vs_raw_txn"] = (
            pg["pg_commands_per_s"] / pg["pg_raw_commits_per_s"]
        )
    return {"ratios": ratios, "figures": figures}


# -- output ----------------------------------------------------------------------------


def holds(name: str, value: float) -> bool:
    """Whether ``value`` meets the goal of ratio ``name``."""
    op, threshold = GOALS[name]
    return value >= threshold if op == ">=" else value <= threshold


def sides(f: dict[str, float]) -> dict[str, tuple[str, str]]:
    """(measured, baseline) text of every ratio, from the figures."""
    rows: dict[str, tuple[str, str]] = {}
    if "lg_store_put_us" in f:
        rows["store_put_vs_langgraph_sqlite"] = (
            f"LedgerStore.put {f['lg_store_put_us']:,.1f} µs",
            f"SqliteStore.put {f['lg_sqlite_put_us']:,.1f} µs",
        )
        rows["store_get_vs_langgraph_sqlite"] = (
            f"LedgerStore.get {f['lg_store_get_us']:,.1f} µs",
            f"SqliteStore.get {f['lg_sqlite_get_us']:,.1f} µs",
        )
        rows["store_get_updated_vs_langgraph_sqlite"] = (
            f"LedgerStore.get {f['lg_store_get_updated_us']:,.1f} µs",
            f"SqliteStore.get {f['lg_sqlite_get_updated_us']:,.1f} µs",
        )
        history = f"{f['lg_history']:,.0f} versions"
        rows["store_get_history_growth"] = (
            f"{history}: get {f['lg_store_get_long_us']:,.1f} µs",
            f"1 version: {f['lg_store_get_short_us']:,.1f} µs",
        )
        rows["store_put_history_growth"] = (
            f"{history}: put {f['lg_store_put_long_us']:,.1f} µs",
            f"1 version: {f['lg_store_put_short_us']:,.1f} µs",
        )
        rows["store_search_history_growth"] = (
            f"{f['lg_history'] // 10:,.0f} versions: search {f['lg_store_search_long_us']:,.1f} µs",
            f"1 version: {f['lg_store_search_short_us']:,.1f} µs",
        )
        rows["store_search_crowd_growth"] = (
            f"among {f['lg_crowd']:,.0f} keys: search {f['lg_store_search_crowded_us']:,.1f} µs",
            f"alone: {f['lg_store_search_alone_us']:,.1f} µs",
        )
        rows["propose_vs_langgraph_sqlite_put"] = (
            f"propose {f['lg_propose_us']:,.1f} µs",
            f"SqliteStore.put {f['lg_sqlite_put_us']:,.1f} µs",
        )
        rows["read_vs_langgraph_sqlite_get"] = (
            f"read {f['lg_read_us']:,.1f} µs",
            f"SqliteStore.get {f['lg_sqlite_get_us']:,.1f} µs",
        )
    if "small_records" not in f:
        return rows
    small, huge = f"{f['small_records']:,.0f}", f"{f['huge_records']:,.0f}"
    rows |= {
        "single_command_vs_raw_txn": (
            f"commands {f['commands_per_s']:,.0f}/s",
            f"raw commits {f['raw_commits_per_s']:,.0f}/s",
        ),
        "bulk_import_vs_raw_executemany": (
            f"propose_many {f['import_events_per_s']:,.0f} ev/s",
            f"executemany {f['raw_executemany_rows_per_s']:,.0f} rows/s",
        ),
        "bulk_rate_growth": (
            f"{f['bulk_rate_late_from']:,.0f}-{f['bulk_rate_late_to']:,.0f} recs "
            f"{f['bulk_rate_late_records_per_s']:,.0f}/s",
            f"{f['bulk_rate_early_from']:,.0f}-{f['bulk_rate_early_to']:,.0f} recs "
            f"{f['bulk_rate_early_records_per_s']:,.0f}/s",
        ),
        "revoke_size_growth": (
            f"{huge} recs {f['revoke_huge_seconds'] * 1e3:,.0f} ms",
            f"{small} recs {f['revoke_small_seconds'] * 1e3:,.0f} ms",
        ),
        "revoke_vs_naive_speedup": (
            f"naive {f['naive_huge_seconds'] * 1e3:,.0f} ms",
            f"revoke {f['revoke_huge_seconds'] * 1e3:,.0f} ms",
        ),
        "stale_marking_vs_bulk_event": (
            f"{f['stale_mark_us']:,.0f} µs/stale mark",
            f"{f['import_event_us']:,.0f} µs/imported ev",
        ),
        "read_depth_growth": (
            f"depth 50 {f['read_depth50_us']:,.1f} µs",
            f"depth 1 {f['read_depth1_us']:,.1f} µs",
        ),
        "read_size_growth": (
            f"{huge} recs {f['read_huge_us']:,.1f} µs",
            f"{small} recs {f['read_small_us']:,.1f} µs",
        ),
        "read_vs_raw_lookup": (
            f"read {f['read_small_us']:,.1f} µs",
            f"PK lookup {f['raw_lookup_us']:,.1f} µs",
        ),
        "rebuild_vs_raw_decode": (
            f"rebuild {f['rebuild_events_per_s']:,.0f} ev/s",
            f"raw {f['raw_decode_events_per_s']:,.0f} ev/s",
        ),
        "as_of_vs_rebuild": (
            f"as-of read {f['as_of_read_us']:,.1f} µs",
            f"rebuild {f['rebuild_seconds']:,.2f} s",
        ),
        "as_of_page_vs_page": (
            f"as-of page of {f['page_records']:,.0f} {f['as_of_page_us']:,.1f} µs",
            f"page now {f['page_us']:,.1f} µs",
        ),
        "rss_growth": (
            f"{f['rss_huge_events']:,.0f} ev {f['rss_huge_peak_mib']:,.0f} MiB",
            f"{f['rss_base_events']:,.0f} ev {f['rss_base_peak_mib']:,.0f} MiB",
        ),
    }
    if "pg_import_events_per_s" in f:
        rows["pg_bulk_vs_raw_executemany"] = (
            f"propose_many {f['pg_import_events_per_s']:,.0f} ev/s",
            f"executemany {f['pg_raw_executemany_rows_per_s']:,.0f} rows/s",
        )
        rows["pg_single_command_vs_raw_txn"] = (
            f"commands {f['pg_commands_per_s']:,.0f}/s",
            f"raw commits {f['pg_raw_commits_per_s']:,.0f}/s",
        )
    return rows


def core_caption(f: dict[str, float]) -> str:
    """The caption lines of the ledgers the core ratios were measured on."""
    capped = f["huge_records"] < f["huge_records_requested"]
    huge_note = (
        f" (requested {f['huge_records_requested']:,.0f}: capped by the "
        f"{f['huge_build_budget_seconds']:,.0f} s build budget)"
        if capped
        else ""
    )
    pg_note = (
        f"PostgreSQL: {f['pg_records']:,.0f} records via propose_many"
        if "pg_records" in f
        else "PostgreSQL: skipped (--no-pg)"
    )
    return (
        f"small: {f['small_records']:,.0f} records via batch path "
        f"({f['small_records_total']:,.0f} in all); "
        f"large: {f['large_records']:,.0f} records via batch path "
        f"({f['large_events']:,.0f} events); "
        f"huge: {f['huge_records']:,.0f} records via propose_many{huge_note} "
        f"({f['import_events_per_s']:,.0f} ev/s, {f['huge_records_total']:,.0f} in all)\n"
        f"revocations: root + {f['revoke_descendants']:,.0f} descendants "
        f"(DAG depth {f['revoke_dag_depth']:.0f}), median of {f['revokes_per_ledger']:.0f}; "
        f"naive: {f['naive_passes']:.0f} full scans; rss: huge vs copy at "
        f"{f['rss_base_records']:,.0f} records; as-of at position "
        f"{f['as_of_position']:,.0f}\n{pg_note}"
    )


def render(result: dict[str, Any], names: Sequence[str] = ()) -> Table:
    """The side-by-side table: what was measured, its baseline, the ratio and its goal
    (of ``names`` only, when given)."""
    f, r = result["figures"], result["ratios"]
    lines = [
        "rate ratios (…/s) are ledger over raw; time ratios are cost over baseline cost; "
        "latencies are medians of interleaved calls"
    ]
    if "small_records" in f:
        lines.append(core_caption(f))
    if "lg_sample" in f:
        lines.append(
            f"LangGraph: fresh ledger and SqliteStore files (synchronous="
            f"{f['lg_sqlite_synchronous']:.0f}), {f['lg_sample']:.0f} memories each first, "
            "then puts until both WAL files stop growing; LedgerStore with the approver policy"
        )
    table = Table(
        title="provledger benchmark",
        caption="\n".join(lines),
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    table.add_column("ratio", no_wrap=True)
    table.add_column("measured", justify="right", no_wrap=True)
    table.add_column("baseline", justify="right", no_wrap=True)
    table.add_column("value", justify="right", style="bold", no_wrap=True)
    table.add_column("goal", justify="right", no_wrap=True)
    table.add_column("holds", no_wrap=True)
    text = sides(f)
    for name, (op, threshold) in GOALS.items():
        if names and name not in names:
            continue
        goal = f"{op} {threshold:g}"
        if name not in r:
            table.add_row(name, "not measured", "", "-", goal, "-")
            continue
        ok = holds(name, r[name])
        measured, baseline = text[name]
        mark = "[green]yes[/green]" if ok else "[red]NO[/red]"
        table.add_row(name, measured, baseline, f"{r[name]:.4g}", goal, mark)
    return table


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        description=(
            "Measure provledger side by side with raw SQLite and PostgreSQL floors: single "
            "commands and bulk import vs raw inserts, revocation by ledger size and vs a naive "
            "scan, reads by depth and size vs a primary-key lookup, rebuild vs raw decode, "
            "as-of vs rebuild, peak RSS of rebuilds. Prints each ratio beside its goal; "
            "never asserts timings, exits 1 if a correctness check fails."
        ),
        epilog="example: python scripts/bench.py --quick --json /tmp/bench.json",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smaller sizes (huge {QUICK['huge']:,}, large {QUICK['large']:,}, fewer calls; "
        "about a minute on 2 cores) instead of the full run (huge "
        f"{FULL['huge']:,}, large {FULL['large']:,}; about 3 minutes)",
    )
    parser.add_argument(
        "--small",
        type=int,
        metavar="N",
        help="records in the small ledger (chain via commands, the rest via batch path)",
    )
    parser.add_argument(
        "--large", type=int, metavar="N", help="records in the large ledger (via batch path)"
    )
    parser.add_argument(
        "--huge", type=int, metavar="N", help="records in the huge ledger (via propose_many)"
    )
    parser.add_argument(
        "--rss-base",
        type=int,
        metavar="N",
        help="records in the copy of the huge ledger that rss_growth compares against",
    )
    parser.add_argument(
        "--chunk", type=int, default=5_000, metavar="N", help="records per propose_many call"
    )
    parser.add_argument(
        "--build-budget",
        type=float,
        metavar="S",
        help="seconds the huge import may take; it stops at the largest size that fits",
    )
    parser.add_argument(
        "--revokes", type=int, metavar="N", help="timed revocations per ledger (median)"
    )
    parser.add_argument(
        "--commands", type=int, metavar="N", help="single commands timed per backend"
    )
    parser.add_argument(
        "--pg-url",
        default="postgresql://postgres@127.0.0.1:5432/test",
        metavar="URL",
        help="PostgreSQL database; a schema bench_<random> is created and dropped",
    )
    parser.add_argument(
        "--pg-records", type=int, metavar="N", help="records imported into PostgreSQL"
    )
    parser.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL ratios")
    parser.add_argument(
        "--json", type=Path, metavar="PATH", help='also write {"ratios": …, "figures": …} here'
    )
    parser.add_argument(
        "--only",
        type=ratio_names,
        default=(),
        metavar="NAME[,NAME]",
        help="show only these ratios; the LangGraph ones (e.g. "
        "store_put_vs_langgraph_sqlite) alone build nothing else",
    )
    return parser.parse_args(argv)


def ratio_names(text: str) -> tuple[str, ...]:
    """``--only``'s comma-separated ratio names, each one the script reports."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in GOALS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown ratio {', '.join(unknown) or text!r}; one of: {', '.join(GOALS)}"
        )
    return names


def sizes_of(args: argparse.Namespace) -> Sizes:
    """The preset (full or ``--quick``) with the command line's overrides."""
    preset = QUICK if args.quick else FULL

    def pick(name: str) -> Any:
        given = getattr(args, name)
        return preset[name] if given is None else given

    return Sizes(
        small=pick("small"),
        large=pick("large"),
        huge=pick("huge"),
        rss_base=pick("rss_base"),
        pg_records=pick("pg_records"),
        calls=preset["calls"],
        as_of_calls=preset["as_of_calls"],
        commands=pick("commands"),
        revokes=pick("revokes"),
        build_budget=pick("build_budget"),
        chunk=args.chunk,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        sizes = sizes_of(args)
        with tempfile.TemporaryDirectory(prefix="provledger-bench-") as tmp:
            result = run(sizes, Path(tmp), None if args.no_pg else args.pg_url, args.only)
    except BenchError as exc:
        err.print(f"[red]benchmark check failed:[/red] {exc}")
        return 1
    wall = time.perf_counter() - started
    result["figures"]["wall_seconds"] = wall
    out = Console()
    if not out.is_terminal:  # piped or redirected: keep the table on one line per row
        out = Console(width=150)
    if args.only:
        result["ratios"] = {k: v for k, v in result["ratios"].items() if k in args.only}
    out.print(render(result, args.only))
    missed = [name for name, value in result["ratios"].items() if not holds(name, value)]
    err.print(f"total {wall:.1f} s; goals missed: {', '.join(missed) or 'none'}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
