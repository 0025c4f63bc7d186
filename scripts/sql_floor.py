"""How much of each write workload is the database's own work: the SQL floor.

For bulk import (``Session.propose_many``), single commands (propose + accept,
one transaction each) and a view rebuild (``Ledger.rebuild``) on an SQLite file,
this script runs the workload three times on identical copies of one ledger:

1. *timed*: through provledger, as the benchmark does;
2. *captured*: through provledger again, recording every statement and its
   parameters on every connection (``sqlite3`` connections made with a
   recording cursor);
3. *replayed*: those same statements and parameters, in the same order and
   transactions, run again with plain ``sqlite3`` (prepared-statement cache,
   the ledger's ``journal_mode`` and ``synchronous``) on the third copy.

The replay is the database's share of the workload: what it would cost if
provledger's Python took no time at all. The script checks that the replayed
copy ends equal to the captured one (the same schema; every row of every table,
rowids included, so the same log positions), and prints beside it the raw
baseline ``scripts/bench.py`` compares against, so
``floor ÷ baseline`` is the best ratio any Python on this schema could reach.
Statements that only compute a view digest (``SELECT * FROM <table>``) are left
out of the rebuild's replay, as ``Ledger.rebuild`` leaves the digests out of
its timing.

Example::

    python scripts/sql_floor.py --records 20000 --commands 500 --json /tmp/floor.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench

from ledger import Kind, Ledger

CHUNK = 1_000  # records per propose_many call, as in the benchmark
DIGEST_SCAN = re.compile(r"^SELECT \* FROM \w+$")


@dataclass
class Capture:
    """Statements recorded in order: (connection number, SQL, parameter rows, many)."""

    on: bool = False
    calls: list[tuple[int, str, list[tuple[Any, ...]], bool]] = field(default_factory=list)
    #: id → (number, the connection itself: held, so its id is never reused).
    connections: dict[int, tuple[int, object]] = field(default_factory=dict)

    def add(self, connection: object, sql: str, rows: list[tuple[Any, ...]], many: bool) -> None:
        if self.on:
            number, _ = self.connections.setdefault(
                id(connection), (len(self.connections), connection)
            )
            self.calls.append((number, sql, rows, many))


CAPTURE = Capture()


class RecordingCursor(sqlite3.Cursor):
    """A cursor that records what it runs while ``CAPTURE.on``."""

    def execute(self, sql: str, parameters: Any = (), /) -> RecordingCursor:
        CAPTURE.add(self.connection, sql, [tuple(parameters)], False)
        super().execute(sql, parameters)
        return self

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> RecordingCursor:
        rows = [tuple(p) for p in seq_of_parameters]
        CAPTURE.add(self.connection, sql, rows, True)
        super().executemany(sql, rows)
        return self


class RecordingConnection(sqlite3.Connection):
    """A connection whose cursors record, and whose commits and rollbacks do."""

    def cursor(self, factory: Any = RecordingCursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        cursor: sqlite3.Cursor = self.cursor().execute(sql, parameters)
        return cursor

    def commit(self) -> None:
        if self.in_transaction:
            CAPTURE.add(self, "COMMIT", [()], False)
        super().commit()

    def rollback(self) -> None:
        if self.in_transaction:
            CAPTURE.add(self, "ROLLBACK", [()], False)
        super().rollback()


_connect = sqlite3.connect


@contextmanager
def recording_connections() -> Iterator[None]:
    """While inside, new ``sqlite3`` connections record what they run."""

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", RecordingConnection)
        con: sqlite3.Connection = _connect(*args, **kwargs)
        return con

    sqlite3.connect = connect  # type: ignore[assignment]
    try:
        yield
    finally:
        sqlite3.connect = _connect


@dataclass(frozen=True)
class Base:
    """A built ledger file and the tokens of its proposer and approver."""

    path: Path
    proposer_token: str
    approver_token: str
    pragmas: tuple[str, int]


@dataclass(frozen=True)
class Sessions:
    ledger: Ledger
    proposer: Any
    approver: Any


def build_base(path: Path, records: int) -> Base:
    """A ledger file with ``records`` filler records imported with ``propose_many``."""
    ledger = Ledger.open(f"sqlite:///{path}")
    admin = ledger.admin()
    admin.grant(bench.PROPOSER, bench.SCOPE, ["propose", "read"])
    admin.grant(bench.APPROVER, bench.SCOPE, ["approve", "read"])
    proposer_token = admin.issue_token(bench.PROPOSER)
    approver_token = admin.issue_token(bench.APPROVER)
    proposer = ledger.authenticate(proposer_token)
    items = [bench.filler_item(i) for i in range(records)]
    for start in range(0, records, CHUNK):
        proposer.propose_many(items[start : start + CHUNK])
    pragmas = bench.ledger_pragmas(ledger)
    ledger.close()
    return Base(path, proposer_token, approver_token, pragmas)


def copy_of(base: Base, name: str) -> Sessions:
    """Open a fresh copy of the base ledger (connections made now may record)."""
    target = base.path.with_name(name)
    bench.copy_sqlite(base.path, target)
    ledger = Ledger.open(f"sqlite:///{target}")
    return Sessions(
        ledger, ledger.authenticate(base.proposer_token), ledger.authenticate(base.approver_token)
    )


Workload = Callable[[Sessions], float]  # runs the workload, returns its seconds


def bulk_workload(start: int, records: int) -> Workload:
    def run(s: Sessions) -> float:
        items = [bench.filler_item(i) for i in range(start, start + records)]
        began = time.perf_counter()
        for first in range(0, records, CHUNK):
            s.proposer.propose_many(items[first : first + CHUNK])
        return time.perf_counter() - began

    return run


def single_workload(pairs: int) -> Workload:
    def run(s: Sessions) -> float:
        began = time.perf_counter()
        for n in range(pairs):
            rid = s.proposer.propose(
                bench.SCOPE, f"single:{n}", bench.filler_value(n), Kind.FACT, id=f"s-{n:07d}"
            )
            s.approver.accept(rid)
        return time.perf_counter() - began

    return run


def rebuild_workload(s: Sessions) -> float:
    report = s.ledger.rebuild()
    bench.check(report.digest_before == report.digest_after, "rebuild changed the views")
    return report.seconds


def replay(
    path: Path,
    calls: Sequence[tuple[int, str, list[tuple[Any, ...]], bool]],
    pragmas: tuple[str, int],
) -> tuple[float, dict[str, float]]:
    """Run the recorded calls with plain ``sqlite3``: (seconds, seconds by statement)."""
    journal, sync = pragmas
    connections: dict[int, sqlite3.Connection] = {}
    for number, *_ in calls:
        if number not in connections:
            con = _connect(path, isolation_level=None, cached_statements=256)
            con.execute(f"PRAGMA journal_mode={journal}")
            con.execute(f"PRAGMA synchronous={sync}")
            connections[number] = con
    by_statement: dict[str, float] = {}
    total = 0.0
    try:
        for number, sql, rows, many in calls:
            con = connections[number]
            began = time.perf_counter()
            if many:
                con.executemany(sql, rows)
            elif sql == "COMMIT":
                con.commit()
            elif sql == "ROLLBACK":
                con.rollback()
            else:
                con.execute(sql, rows[0]).fetchall()
            spent = time.perf_counter() - began
            total += spent
            key = " ".join(sql.split()[:3])
            by_statement[key] = by_statement.get(key, 0.0) + spent
    finally:
        for con in connections.values():
            con.close()
    return total, by_statement


def contents(path: Path) -> str:
    """A digest of an SQLite file's schema and of every row of every table, rowids
    included (the log's positions are the events table's rowids), independent of
    the order rows are stored in."""
    con = _connect(path)
    try:
        schema = sorted(
            repr(row) for row in con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")
        )
        digest = hashlib.sha256("\n".join(schema).encode())
        tables = con.execute(
            "SELECT name, sql FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        for table, sql in sorted(tables):
            rowid = "" if "WITHOUT ROWID" in str(sql).upper() else "rowid, "
            rows = sorted(repr(tuple(r)) for r in con.execute(f'SELECT {rowid}* FROM "{table}"'))
            digest.update(f"{table}:{len(rows)}:".encode())
            for row in rows:
                digest.update(row.encode())
        return digest.hexdigest()
    finally:
        con.close()


@dataclass(frozen=True)
class Floor:
    name: str
    units: int
    unit: str
    ledger_seconds: float
    floor_seconds: float
    baseline_rate: float
    baseline: str
    executions: int
    by_statement: list[tuple[str, float]]
    #: The workload must also do the baseline's own work beside its SQL (a rebuild
    #: decodes every event, as the raw decode does); its ceiling counts both.
    plus_baseline: bool = False

    def figures(self) -> dict[str, Any]:
        ledger_rate = self.units / self.ledger_seconds
        floor_rate = self.units / self.floor_seconds
        best = self.floor_seconds + (self.units / self.baseline_rate if self.plus_baseline else 0)
        return {
            "units": self.units,
            "ledger_per_s": ledger_rate,
            "floor_per_s": floor_rate,
            "baseline_per_s": self.baseline_rate,
            "ratio": ledger_rate / self.baseline_rate,
            "ceiling_ratio": self.units / best / self.baseline_rate,
            "sql_share": self.floor_seconds / self.ledger_seconds,
            "statements_per_unit": self.executions / self.units,
            "floor_us_by_statement": {k: v / self.units * 1e6 for k, v in self.by_statement},
        }


def measure(
    name: str,
    unit: str,
    base: Base,
    work: Workload,
    units: int,
    baseline: tuple[float, str],
    leave_out: Callable[[str], bool],
    plus_baseline: bool = False,
) -> Floor:
    """Timed run, captured run and replay of one workload on copies of ``base``."""
    timed = copy_of(base, f"{name}-timed.db")
    seconds = work(timed)
    timed.ledger.close()
    replayed_path = base.path.with_name(f"{name}-replayed.db")
    bench.copy_sqlite(base.path, replayed_path)
    CAPTURE.calls.clear()
    CAPTURE.connections.clear()
    with recording_connections():  # connections the ledger opens later record too
        captured = copy_of(base, f"{name}-captured.db")
        CAPTURE.on = True
        try:
            work(captured)
        finally:
            CAPTURE.on = False
        captured.ledger.close()
    calls = [call for call in CAPTURE.calls if not leave_out(call[1])]
    floor_seconds, by_statement = replay(replayed_path, calls, base.pragmas)
    bench.check(
        contents(replayed_path) == contents(base.path.with_name(f"{name}-captured.db")),
        f"{name}: the replayed copy differs from the captured one",
    )
    return Floor(
        name=name,
        units=units,
        unit=unit,
        ledger_seconds=seconds,
        floor_seconds=floor_seconds,
        baseline_rate=baseline[0],
        baseline=baseline[1],
        executions=sum(len(rows) for _, _, rows, _ in calls),
        by_statement=sorted(by_statement.items(), key=lambda kv: -kv[1])[:6],
        plus_baseline=plus_baseline,
    )


def raw_bulk_rate(base: Base, rows: int, workdir: Path) -> float:
    """Raw ``executemany`` of ``rows`` event rows in one transaction, into a copy of
    the ledger's events table already holding the base's events (as the ledger's
    import starts from them); ids random like the ledger's, states the ledger's."""
    source = _connect(base.path)
    try:
        existing = source.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events"
        ).fetchall()
    finally:
        source.close()
    states = existing[-CHUNK:]
    batch = [
        (uuid.uuid4().hex, 1, topic, state)
        for (_, _, topic, state) in (states[i % len(states)] for i in range(rows))
    ]
    raw = bench.raw_events_db(workdir / "raw-bulk.db", bench.events_ddl(base.path), base.pragmas)
    try:
        raw.execute("BEGIN")
        raw.executemany(bench.RAW_INSERT_SQL, existing)
        raw.execute("COMMIT")
        began = time.perf_counter()
        raw.execute("BEGIN")
        raw.executemany(bench.RAW_INSERT_SQL, batch)
        raw.execute("COMMIT")
        return rows / (time.perf_counter() - began)
    finally:
        raw.close()


def raw_commit_rate(base: Base, commits: int, workdir: Path) -> float:
    """Raw single-row insert + commit, ``commits`` times, once the WAL file has
    stopped growing (``bench.settle_wal``)."""
    topic, state = bench.sample_event(base.path)
    raw = bench.raw_events_db(workdir / "raw-single.db", bench.events_ddl(base.path), base.pragmas)
    try:
        insert = bench.sqlite_raw_inserter(raw, topic, state)
        bench.settle_wal(workdir / "raw-single.db", insert, "raw single commits")
        began = time.perf_counter()
        for _ in range(commits):
            insert()
        return commits / (time.perf_counter() - began)
    finally:
        raw.close()


def raw_decode_rate(base: Base) -> tuple[int, float]:
    """(events, events/s) of reading and unpacking the base's stored events (median of 3)."""
    passes = [bench.raw_decode(base.path) for _ in range(3)]
    return passes[0][0], passes[0][0] / statistics.median(s for _, s in passes)


def keep_all(sql: str) -> bool:
    """Leave nothing out of the replay."""
    return False


def digest_scan(sql: str) -> bool:
    """A whole-table scan that only feeds a view digest."""
    return bool(DIGEST_SCAN.match(sql.strip()))


def run(records: int, pairs: int, workdir: Path) -> list[Floor]:
    bench.note(f"building the base ledger: {records:,} records via propose_many")
    base = build_base(workdir / "base.db", records)
    events, decode_rate = raw_decode_rate(base)
    floors = []
    bench.note(f"bulk import: {records:,} more records, timed / captured / replayed")
    floors.append(
        measure(
            "bulk_import",
            "record",
            base,
            bulk_workload(records, records),
            records,
            (raw_bulk_rate(base, records, workdir), "raw executemany rows/s"),
            keep_all,
        )
    )
    bench.note(f"single commands: {pairs:,} propose + accept pairs")
    floors.append(
        measure(
            "single_command",
            "command",
            base,
            single_workload(pairs),
            2 * pairs,
            (raw_commit_rate(base, 2 * pairs, workdir), "raw commits/s"),
            keep_all,
        )
    )
    bench.note(f"rebuild: {events:,} events")
    floors.append(
        measure(
            "rebuild",
            "event",
            base,
            rebuild_workload,
            events,
            (decode_rate, "raw read + unpackb events/s"),
            digest_scan,
            plus_baseline=True,
        )
    )
    return floors


def render(floors: Sequence[Floor]) -> str:
    lines = [
        f"{'workload':<15} {'provledger':>12} {'SQL floor':>12} {'baseline':>12} "
        f"{'ratio':>7} {'ceiling':>8} {'SQL share':>9}"
    ]
    for f in floors:
        g = f.figures()
        lines.append(
            f"{f.name:<15} {g['ledger_per_s']:>10,.0f}/s {g['floor_per_s']:>10,.0f}/s "
            f"{g['baseline_per_s']:>10,.0f}/s {g['ratio']:>7.3f} {g['ceiling_ratio']:>8.3f} "
            f"{g['sql_share']:>8.0%}"
        )
    for f in floors:
        g = f.figures()
        lines.append(
            f"\n{f.name}: {g['statements_per_unit']:.1f} statement executions per {f.unit}; "
            f"baseline = {f.baseline}"
            + ("; ceiling = SQL floor + the baseline's decode" if f.plus_baseline else "")
            + f"; floor µs per {f.unit} by statement:"
        )
        lines += [f"  {us:8.2f}  {sql}" for sql, us in g["floor_us_by_statement"].items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--records",
        type=int,
        default=20_000,
        help="records in the base ledger, and imported by the bulk workload",
    )
    parser.add_argument(
        "--commands",
        type=int,
        default=500,
        help="propose + accept pairs of the single-command workload",
    )
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.records < 1 or args.commands < 1:
        parser.error("--records and --commands must be at least 1")
    try:
        with tempfile.TemporaryDirectory(prefix="provledger-floor-") as tmp:
            floors = run(args.records, args.commands, Path(tmp))
    except bench.BenchError as e:
        print(f"check failed: {e}", file=sys.stderr)
        return 1
    print(render(floors))
    if args.json is not None:
        args.json.write_text(json.dumps({f.name: f.figures() for f in floors}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
