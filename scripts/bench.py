"""Benchmark provledger's views and reads against raw SQLite floors, side by side.

Everything runs in one process on SQLite files in a temporary directory, and the
script prints figures and ratios; it asserts correctness (a rebuild reproduces
the views, reads find what they should) but never timings.

Ledgers
    *small*: ``--small`` records (10k), written one command at a time through
    ``Session.propose`` / ``Session.accept``. It holds a chain of 50 accepted
    records (each the parent of the next) and fillers with their own claim keys.

    *large*: ``--large`` filler records (200k; 50k with ``--quick``). Going
    through the commands costs ~1-2 ms each, so the large ledger is populated
    through the library's own batch write path: ``Record.propose(...)`` and
    ``.accept(...)`` build the aggregates, and ``Ledger._save(*aggregates)`` saves
    500 of them (1000 events) per transaction, updating the views in that same
    transaction exactly as the commands do. Grants, tokens and the one revocation
    go through the public API.

Measurements (every ratio but the first is a *time* ratio, cost of the first over
cost of the second, so above 1 means the first costs more)
    rebuild_vs_raw_decode
        A *rate* ratio: ``Ledger.rebuild()`` events/s of the large ledger over a raw
        ``sqlite3`` read of the same ``stored_events`` rows in log order plus
        ``msgpack.unpackb`` of each state (the physical floor; median of 3 passes),
        so 1.0 would mean rebuilding is as fast as merely decoding.
    read_depth_growth
        ``session.read(scope, claim_key)`` of the last record of the 50-deep chain
        over the first one (ancestry depth 50 vs 1), in the small ledger.
    read_size_growth
        The same read of filler records in the large ledger over the small one;
        each side cycles through 256 fillers picked at random (fixed seed).
    read_vs_raw_lookup
        The small-ledger filler read over a raw ``sqlite3`` primary-key lookup of
        the same records' current row in ``pl_records``.
    as_of_vs_rebuild
        ``session.as_of(position=mid).read(...)`` at the middle of the large log
        (a record accepted before ``mid`` and revoked after it) over the whole
        rebuild.

Latencies are medians of many calls; the calls of the two (or three) sides of a
comparison are interleaved, rotating their order, so drift hits both alike.

Examples::

    python scripts/bench.py --quick
    python scripts/bench.py --json results/bench.json
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import cycle
from pathlib import Path
from typing import Any

import msgpack
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ledger import Kind, Ledger, Outcome, Session
from ledger.domain import Record

SCOPE = "bench"
PROPOSER = "agent"
APPROVER = "reviewer"
CHAIN_DEPTH = 50
BATCH = 500  # aggregates per transaction on the batch path (2 events each)
SAMPLE = 256  # filler records each size-growth side cycles through
SEED = 20260101

FULL = {"small": 10_000, "large": 200_000, "calls": 3_000, "as_of_calls": 1_000}
QUICK = {"small": 10_000, "large": 50_000, "calls": 1_000, "as_of_calls": 300}

RAW_EVENTS_SQL = (
    "SELECT rowid, originator_id, originator_version, topic, state FROM stored_events "
    "ORDER BY rowid"
)
RAW_LOOKUP_SQL = "SELECT * FROM pl_records WHERE record_id=? AND to_pos IS NULL"

err = Console(stderr=True)


class BenchError(Exception):
    """A correctness check failed: the figures would measure the wrong thing."""


@dataclass(frozen=True)
class Opened:
    """A ledger with a proposer and an approver session (both may read)."""

    ledger: Ledger
    proposer: Session
    approver: Session
    path: Path


def filler_id(i: int) -> str:
    """Record id of filler ``i`` (same in both ledgers)."""
    return f"fill-{i:07d}"


def filler_key(i: int) -> str:
    """Claim key of filler ``i``."""
    return f"fill:{i}"


def filler_value(i: int) -> dict[str, Any]:
    """A small, realistic claim value."""
    return {"n": i, "text": f"observed value number {i}"}


def chain_id(i: int) -> str:
    """Record id of the ``i``-th chain record (0 has no parent)."""
    return f"chain-{i:03d}"


def open_ledger(path: Path) -> Opened:
    """Create a ledger file with the two principals granted in ``SCOPE``."""
    ledger = Ledger.open(f"sqlite:///{path}")
    admin = ledger.admin()
    admin.grant(PROPOSER, SCOPE, ["propose", "read"])
    admin.grant(APPROVER, SCOPE, ["approve", "read"])
    return Opened(
        ledger=ledger,
        proposer=ledger.authenticate(admin.issue_token(PROPOSER)),
        approver=ledger.authenticate(admin.issue_token(APPROVER)),
        path=path,
    )


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


def build_small(path: Path, records: int) -> tuple[Opened, float]:
    """The chain and ``records - CHAIN_DEPTH`` fillers, one command at a time."""
    opened = open_ledger(path)
    proposer, approver = opened.proposer, opened.approver
    started = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task(f"small ledger (commands) {path.name}", total=records)
        parent: list[str] = []
        for i in range(CHAIN_DEPTH):
            rid = proposer.propose(
                SCOPE, f"chain:{i}", filler_value(i), Kind.FACT, parents=parent, id=chain_id(i)
            )
            approver.accept(rid)
            parent = [rid]
            bar.advance(task)
        for i in range(records - CHAIN_DEPTH):
            rid = proposer.propose(
                SCOPE, filler_key(i), filler_value(i), Kind.FACT, id=filler_id(i)
            )
            approver.accept(rid)
            bar.advance(task)
    return opened, time.perf_counter() - started


def build_large(path: Path, records: int) -> tuple[Opened, float]:
    """``records`` fillers through the batch path (``BATCH`` aggregates per transaction)."""
    opened = open_ledger(path)
    ledger = opened.ledger
    started = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task(f"large ledger (batches) {path.name}", total=records)
        for first in range(0, records, BATCH):
            at = datetime.now(UTC)
            batch: list[Record] = []
            for i in range(first, min(first + BATCH, records)):
                record = Record.propose(
                    at=at,
                    record_id=filler_id(i),
                    scope=SCOPE,
                    claim_key=filler_key(i),
                    kind=Kind.FACT.value,
                    value=filler_value(i),
                    actor=PROPOSER,
                    expires=None,
                    parents=(),
                    observed=(),
                    conditions={},
                    evidence=None,
                    run_id=None,
                )
                record.accept(APPROVER, "", at)
                batch.append(record)
            ledger._save(*batch)
            bar.advance(task, len(batch))
    return opened, time.perf_counter() - started


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


def run(small_n: int, large_n: int, calls: int, as_of_calls: int, workdir: Path) -> dict[str, Any]:
    """Build both ledgers, measure, and return ``{"ratios": …, "figures": …}``."""
    if small_n <= CHAIN_DEPTH + SAMPLE or large_n <= SAMPLE:
        raise BenchError(
            f"sizes too small: need --small > {CHAIN_DEPTH + SAMPLE} and --large > {SAMPLE}"
        )
    rng = random.Random(SEED)
    small, small_build = build_small(workdir / "small.db", small_n)
    large, large_build = build_large(workdir / "large.db", large_n)
    raw_con = sqlite3.connect(small.path)
    try:
        reviewer_small, reviewer_large = small.approver, large.approver

        # (b) depth: the first and the last record of the chain.
        first, last = chain_id(0), chain_id(CHAIN_DEPTH - 1)
        check_found(reviewer_small, "chain:0", first, "small ledger")
        check_found(reviewer_small, f"chain:{CHAIN_DEPTH - 1}", last, "small ledger")
        deepest = reviewer_small.get(last)
        check(
            deepest.parents == (chain_id(CHAIN_DEPTH - 2),),
            f"{last} has parents {deepest.parents}",
        )
        err.print(f"measuring read latency by ancestry depth ({calls} calls each)")
        depth = interleaved(
            {
                "depth1": lambda: reviewer_small.read(SCOPE, "chain:0"),
                "depth50": lambda: reviewer_small.read(SCOPE, f"chain:{CHAIN_DEPTH - 1}"),
            },
            calls,
        )

        # (b) size and the raw floor: fillers sampled at random in each ledger.
        small_idx = rng.sample(range(small_n - CHAIN_DEPTH), SAMPLE)
        large_idx = rng.sample(range(large_n), SAMPLE)
        for i in small_idx[:3]:
            check_found(reviewer_small, filler_key(i), filler_id(i), "small ledger")
        for i in large_idx[:3]:
            check_found(reviewer_large, filler_key(i), filler_id(i), "large ledger")
        small_ids = [filler_id(i) for i in small_idx]
        for rid in small_ids:
            check(raw_con.execute(RAW_LOOKUP_SQL, (rid,)).fetchone() is not None, rid)
        err.print(f"measuring read latency by ledger size and raw lookup ({calls} calls each)")
        size = interleaved(
            {
                "small": reader(reviewer_small, [filler_key(i) for i in small_idx]),
                "large": reader(reviewer_large, [filler_key(i) for i in large_idx]),
                "raw": raw_lookup(raw_con, small_ids),
            },
            calls,
        )
    finally:
        raw_con.close()

    # (c) as-of at the middle of the large log: a record accepted before mid,
    # revoked after it, so the as-of answer differs from the live one.
    target = large_n // 4  # its two events sit near position large_n / 2
    target_key, target_id = filler_key(target), filler_id(target)
    mid = large.ledger.position // 2
    reviewer_large.revoke(target_id, "benchmark: answer differs after mid")
    live = reviewer_large.read(SCOPE, target_key)
    check(live.outcome == Outcome.MISSING, f"live read of revoked {target_id}: {live.outcome}")
    then = reviewer_large.as_of(position=mid)
    check_found(then, target_key, target_id, f"large ledger as of {mid}")
    err.print(f"measuring as-of reads at position {mid} ({as_of_calls} calls)")
    as_of = interleaved(
        {"as_of": lambda: reviewer_large.as_of(position=mid).read(SCOPE, target_key)},
        as_of_calls,
    )["as_of"]

    # (a) rebuild against the raw floor, on the large ledger.
    err.print("measuring raw decode of the large log (3 passes)")
    passes = [raw_decode(large.path) for _ in range(3)]
    raw_rows = passes[0][0]
    raw_seconds = statistics.median(seconds for _, seconds in passes)
    err.print(f"rebuilding the large ledger's views ({raw_rows} events)")
    report = large.ledger.rebuild()
    check(
        report.digest_before == report.digest_after,
        f"rebuild changed the views: {report.digest_before} != {report.digest_after}",
    )
    check(report.events == raw_rows, f"rebuild applied {report.events} of {raw_rows} events")
    check_found(reviewer_large, filler_key(large_idx[0]), filler_id(large_idx[0]), "rebuilt")
    small.ledger.close()
    large.ledger.close()

    rebuild_rate = report.events / report.seconds
    raw_rate = raw_rows / raw_seconds
    figures: dict[str, float] = {
        "small_records": small_n,
        "large_records": large_n,
        "large_events": raw_rows,
        "small_build_seconds": small_build,
        "large_build_seconds": large_build,
        "large_build_records_per_s": large_n / large_build,
        "rebuild_seconds": report.seconds,
        "rebuild_events_per_s": rebuild_rate,
        "raw_decode_seconds": raw_seconds,
        "raw_decode_events_per_s": raw_rate,
        "read_depth1_us": depth["depth1"] * 1e6,
        "read_depth50_us": depth["depth50"] * 1e6,
        "read_small_us": size["small"] * 1e6,
        "read_large_us": size["large"] * 1e6,
        "raw_lookup_us": size["raw"] * 1e6,
        "as_of_position": mid,
        "as_of_read_us": as_of * 1e6,
    }
    ratios = {
        "rebuild_vs_raw_decode": rebuild_rate / raw_rate,
        "read_depth_growth": depth["depth50"] / depth["depth1"],
        "read_size_growth": size["large"] / size["small"],
        "read_vs_raw_lookup": size["small"] / size["raw"],
        "as_of_vs_rebuild": as_of / report.seconds,
    }
    return {"ratios": ratios, "figures": figures}


def render(result: dict[str, Any]) -> Table:
    """The side-by-side table: what was measured, its baseline, the time ratio."""
    f, r = result["figures"], result["ratios"]
    small, large = f"{f['small_records']:,.0f}", f"{f['large_records']:,.0f}"
    table = Table(
        title="provledger benchmark",
        caption=(
            "ratio = time(measured) / time(baseline), medians of interleaved calls; "
            "rebuild_vs_raw_decode is a rate ratio (events/s over events/s)\n"
            f"small: {small} records via commands ({f['small_build_seconds']:.1f} s); "
            f"large: {large} records via batch path ({f['large_build_seconds']:.1f} s, "
            f"{f['large_build_records_per_s']:,.0f} rec/s), {f['large_events']:,.0f} events; "
            f"as-of at position {f['as_of_position']:,.0f}"
        ),
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    table.add_column("ratio", no_wrap=True)
    table.add_column("measured", justify="right", no_wrap=True)
    table.add_column("baseline", justify="right", no_wrap=True)
    table.add_column("value", justify="right", style="bold", no_wrap=True)
    rows = {
        "rebuild_vs_raw_decode": (
            f"rebuild {f['rebuild_events_per_s']:,.0f} ev/s",
            f"raw {f['raw_decode_events_per_s']:,.0f} ev/s",
        ),
        "read_depth_growth": (
            f"depth 50 {f['read_depth50_us']:,.1f} µs",
            f"depth 1 {f['read_depth1_us']:,.1f} µs",
        ),
        "read_size_growth": (
            f"{large} recs {f['read_large_us']:,.1f} µs",
            f"{small} recs {f['read_small_us']:,.1f} µs",
        ),
        "read_vs_raw_lookup": (
            f"read {f['read_small_us']:,.1f} µs",
            f"PK lookup {f['raw_lookup_us']:,.1f} µs",
        ),
        "as_of_vs_rebuild": (
            f"as-of read {f['as_of_read_us']:,.1f} µs",
            f"rebuild {f['rebuild_seconds']:,.2f} s",
        ),
    }
    for name, (measured, baseline) in rows.items():
        table.add_row(name, measured, baseline, f"{r[name]:.4g}")
    return table


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        description=(
            "Measure provledger side by side with raw SQLite floors, on SQLite files in a "
            "temporary directory: view rebuild vs raw decode, read latency by ancestry depth "
            "and ledger size vs a raw primary-key lookup, and an as-of read vs a full rebuild. "
            "Prints a table of figures and time ratios; never asserts timings."
        ),
        epilog="example: python scripts/bench.py --quick --json /tmp/bench.json",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"small sizes ({QUICK['small']:,} vs {QUICK['large']:,} records, fewer calls); "
        f"default {FULL['small']:,} vs {FULL['large']:,}",
    )
    parser.add_argument(
        "--small", type=int, metavar="N", help="records in the small ledger (via commands)"
    )
    parser.add_argument(
        "--large", type=int, metavar="N", help="records in the large ledger (via batch path)"
    )
    parser.add_argument(
        "--json", type=Path, metavar="PATH", help='also write {"ratios": …, "figures": …} here'
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    small_n = args.small if args.small is not None else sizes["small"]
    large_n = args.large if args.large is not None else sizes["large"]
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="provledger-bench-") as tmp:
            result = run(small_n, large_n, sizes["calls"], sizes["as_of_calls"], Path(tmp))
    except BenchError as exc:
        err.print(f"[red]benchmark check failed:[/red] {exc}")
        return 1
    Console().print(render(result))
    err.print(f"total {time.perf_counter() - started:.1f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
