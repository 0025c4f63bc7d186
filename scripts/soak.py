#!/usr/bin/env python3
"""Long randomised test campaigns against provledger, beyond what CI can afford.

Campaigns (``--campaign``, default ``model``):

model
    The reference-model state machine of ``tests/test_model.py``: random command
    sequences run on the real ledger and on ``tests/model.py`` side by side, every
    answer compared after every step. CI runs 30 examples per backend; this runs
    as many as asked, in batches (each batch a fresh hypothesis run), printing
    progress after each.
fuzz
    ``tests/fuzz.py``: ``--examples`` adversarial calls of every public method
    (memory, sqlite); each must succeed or raise a ``LedgerError`` that leaves the
    log and the views unchanged.
cli-fuzz
    ``tests/test_fuzz_cli.py``: ``--examples`` adversarial argument lists over
    every ``provledger`` command (sqlite); exit 0/1/2 only, one error line, and a
    refused command changes nothing.
tamper
    ``--examples`` random tamperings of an SQLite ledger file (a flipped bit, a
    deleted, swapped or inserted event); ``verify`` must name each one. Then
    ``--examples`` attacks of ``tests/attacks.py`` (truncation, forged appends,
    rewriting, view edits, forged grants and tokens, deleted evidence bytes, an
    altered compliance bundle), each on a fresh ledger with a random amount of
    history, checked with and without the kept signed heads against what
    docs/evidence.md promises; prints the detection table as measured (also on
    ``--backend postgres``).
crash
    ``tests/crash.py``: a writer subprocess is SIGKILLed ``--kills`` times at
    random points of each scenario (batch import, a revocation with thousands of
    descendants, a view catch-up, a rebuild); after every kill the ledger must
    open, every command be all-or-nothing, views equal a rebuild, ``verify()`` pass.

Prints per backend the examples run, the elapsed time and any failure (hypothesis
prints the shrunk command sequence); exits 1 if any campaign found a failure.

Examples::

    python scripts/soak.py --examples 500
    python scripts/soak.py --examples 2000 --steps 80 --backend sqlite
    python scripts/soak.py --backend postgres --examples 100   # needs $PROVLEDGER_TEST_PG
    python scripts/soak.py --campaign fuzz --examples 20000
    python scripts/soak.py --campaign crash --kills 100 --backend sqlite
    python scripts/soak.py --campaign tamper --examples 500 --backend sqlite
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The campaigns live in the test suite, which is not an installed package.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, settings  # noqa: E402 (after the path setup)
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402

BACKENDS = ("memory", "sqlite", "postgres")


@dataclass
class Outcome:
    """What one campaign on one backend did."""

    campaign: str
    backend: str
    examples: int
    seconds: float
    failure: str | None = None


def model_campaign(args: argparse.Namespace, backend: str) -> Outcome:
    """Run the reference-model state machine for ``args.examples`` examples."""
    from tests.test_model import KNOWN_BUGS, MACHINES

    unknown = sorted(set(args.ignore) - set(KNOWN_BUGS))
    if unknown:
        raise SystemExit(f"--ignore {unknown[0]!r}: not one of {', '.join(sorted(KNOWN_BUGS))}")
    machine = type(
        f"Soak{MACHINES[backend].__name__}",
        (MACHINES[backend],),
        {"ignore": frozenset(args.ignore)},
    )
    phases = [Phase.explicit, Phase.generate] + ([] if args.no_shrink else [Phase.shrink])
    started = time.perf_counter()
    done = 0
    while done < args.examples:
        batch = min(args.batch, args.examples - done)
        try:
            run_state_machine_as_test(
                machine,
                settings=settings(
                    max_examples=batch,
                    stateful_step_count=args.steps,
                    deadline=None,
                    database=None,
                    phases=phases,
                    print_blob=True,
                    suppress_health_check=list(HealthCheck),
                ),
            )
        except Exception as exc:
            # ``done`` counts the examples of the batches that passed; the failure is
            # somewhere in this batch (runs made while shrinking are not examples).
            failure = (
                f"in examples {done + 1}-{done + batch}: "
                + "".join(traceback.format_exception_only(type(exc), exc)).strip()
            )
            return Outcome("model", backend, done, time.perf_counter() - started, failure)
        done += batch
        elapsed = time.perf_counter() - started
        print(f"  model/{backend}: {done}/{args.examples} examples, {elapsed:.0f} s", flush=True)
    return Outcome("model", backend, done, time.perf_counter() - started)


def fuzz_campaign(args: argparse.Namespace, backend: str) -> Outcome:
    """Fuzz every public method with ``args.examples`` adversarial calls."""
    from tests.fuzz import run_campaign

    if backend == "postgres":
        raise SystemExit("the fuzz campaign runs on memory and sqlite")
    result = run_campaign(args.examples, backend, args.seed)
    print(
        f"  fuzz/{backend}: tried {result['tried']}, succeeded {result['succeeded']}, "
        f"refused {result['refused']} (a LedgerError, log and views unchanged), "
        f"failed {result['failed']}",
        flush=True,
    )
    failure = None
    if result["failed"]:
        examples = list(result["failure_examples"].values())[:3]
        failure = f"{result['failed']} calls broke the contract, e.g. " + " | ".join(examples)
    return Outcome("fuzz", backend, int(result["tried"]), float(result["seconds"]), failure)


def crash_campaign(args: argparse.Namespace, backend: str) -> Outcome:
    """SIGKILL a writer ``args.kills`` times in each crash scenario, checking after each."""
    import tempfile

    from tests.conftest import PG_SERVER
    from tests.crash import SCENARIOS, postgres_schemas, run_campaign, sqlite_files

    if backend == "memory":
        raise SystemExit("the crash campaign needs a database another process can open")
    started = time.perf_counter()
    kills, failures = 0, []
    with tempfile.TemporaryDirectory(prefix="provledger-crash-") as tmp:
        factory = sqlite_files(tmp) if backend == "sqlite" else postgres_schemas(PG_SERVER)
        for name in args.scenario or sorted(SCENARIOS):
            result = run_campaign(name, args.kills, factory, args.seed)
            kills += int(result["kills"])
            print(
                f"  crash/{backend}/{name}: {result['kills']} kills "
                f"({result['mid_work']} mid-work), checks passed {result['checks_passed']}, "
                f"failed {result['failures']}, {result['seconds']:.0f} s",
                flush=True,
            )
            failures += [f"{name}: {f}" for f in result["failed"]]
    failure = (
        None if not failures else f"{len(failures)} kills left a broken ledger: {failures[:3]}"
    )
    return Outcome("crash", backend, kills, time.perf_counter() - started, failure)


def cli_fuzz_campaign(args: argparse.Namespace, backend: str) -> Outcome:
    """Fuzz every command line with ``args.examples`` adversarial argument lists."""
    from tests.test_fuzz_cli import run_campaign

    if backend != "sqlite":
        raise SystemExit("the cli-fuzz campaign runs on sqlite")
    result = run_campaign(args.examples, args.seed)
    print(
        f"  cli-fuzz: tried {result['tried']}: exit 0 {result['exit_0']}, exit 1 "
        f"{result['exit_1']}, exit 2 {result['exit_2']}, other {result['exit_other']}, "
        f"failed {result['failed']}",
        flush=True,
    )
    failure = None
    if result["failed"]:
        examples = list(result["failure_examples"].values())[:3]
        failure = f"{result['failed']} command lines broke the contract, e.g. {examples}"
    return Outcome("cli-fuzz", backend, int(result["tried"]), float(result["seconds"]), failure)


def tamper_campaign(args: argparse.Namespace, backend: str) -> Outcome:
    """Tamper with a ledger file ``args.examples`` times; ``verify`` must catch each.

    Each case copies a seeded SQLite ledger, then (with the append-only triggers
    dropped, as an attacker with the file could) flips one byte of a random event,
    deletes one, swaps two, or inserts one; ``verify()`` must fail and name the
    first position that differs, and the digest kept before must no longer verify.
    """
    import random
    import shutil
    import sqlite3
    import tempfile

    from ledger import Kind, Ledger
    from ledger.errors import CorruptEventError

    if backend == "memory":
        raise SystemExit("the tamper campaign edits a database another connection can open")
    if backend == "postgres":
        return attack_campaign(args, backend)
    rng = random.Random(args.seed)
    started = time.perf_counter()
    detected, failures = 0, []
    with tempfile.TemporaryDirectory(prefix="provledger-tamper-") as tmp:
        seed_path = Path(tmp) / "seed.db"
        with Ledger.open(f"sqlite:///{seed_path}") as led:
            admin = led.admin()
            admin.grant("a", scope="s", roles=["propose", "read", "approve"])
            admin.grant("b", scope="s", roles=["approve", "read"])
            a, b = (led.authenticate(admin.issue_token(x)) for x in ("a", "b"))
            ids = a.propose_many(
                [
                    {"scope": "s", "claim_key": f"k{i}", "value": i, "kind": Kind.FACT}
                    for i in range(60)
                ]
            )
            for rid in ids[:30]:
                b.accept(rid)
            b.revoke(ids[0], reason="campaign")
            kept = led.digest()
        for case in range(args.examples):
            path = Path(tmp) / f"case-{case}.db"
            shutil.copyfile(seed_path, path)
            kind = rng.choice(["flip", "delete", "swap", "insert"])
            victim = rng.randrange(1, kept.position + (1 if kind != "swap" else 0))
            with sqlite3.connect(path) as con:
                con.execute("DROP TRIGGER stored_events_no_update")
                con.execute("DROP TRIGGER stored_events_no_delete")
                if kind == "flip":
                    (state,) = con.execute(
                        "SELECT state FROM stored_events WHERE rowid=?", (victim,)
                    ).fetchone()
                    data = bytearray(state)
                    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
                    con.execute(
                        "UPDATE stored_events SET state=? WHERE rowid=?", (bytes(data), victim)
                    )
                elif kind == "delete":
                    con.execute("DELETE FROM stored_events WHERE rowid=?", (victim,))
                elif kind == "swap":
                    rows = con.execute(
                        "SELECT rowid, topic, state FROM stored_events WHERE rowid IN (?, ?)",
                        (victim, victim + 1),
                    ).fetchall()
                    (p1, t1, s1), (p2, t2, s2) = rows
                    if (t1, s1) == (t2, s2):
                        victim = -1  # identical rows: swapping changes nothing
                    con.execute(
                        "UPDATE stored_events SET topic=?, state=? WHERE rowid=?", (t2, s2, p1)
                    )
                    con.execute(
                        "UPDATE stored_events SET topic=?, state=? WHERE rowid=?", (t1, s1, p2)
                    )
                else:
                    victim = kept.position + 1
                    con.execute(
                        "INSERT INTO stored_events VALUES (?, ?, ?, ?)",
                        ("0" * 32, 1, "ledger.domain:Record.Accepted", b"\x80"),
                    )
            try:
                with Ledger.open(f"sqlite:///{path}") as led:
                    report = led.verify()
                    problem = report.problem
                    caught = not report.ok and report.first_bad_position == victim
                    if kind != "insert":
                        caught = caught and not led.verify(against=kept).ok
            except CorruptEventError as exc:
                # An event the views have not applied yet is checked against its
                # Merkle leaf when the ledger opens: refused, naming its position.
                problem = str(exc)
                caught = f"position {victim} " in problem
            if caught or victim == -1:
                detected += 1
            else:
                failures.append(f"case {case}: {kind} at {victim}: {problem}")
            path.unlink()
    print(f"  tamper/sqlite: detected {detected} of {args.examples} tamperings", flush=True)
    attacks = attack_campaign(args, backend)
    failures += [attacks.failure] if attacks.failure else []
    failure = None if not failures else f"{len(failures)} failed: {failures[:3]}"
    return Outcome("tamper", backend, 2 * args.examples, time.perf_counter() - started, failure)


def attack_campaign(args: argparse.Namespace, backend: str) -> Outcome:
    """``args.examples`` attacks of ``tests/attacks.py`` (plus altered bundles), each
    on a fresh ledger with random history, checked with and without the kept heads;
    prints the detection table as measured."""
    import random
    import tempfile
    from collections import Counter

    from ledger import Ledger
    from tests.attacks import ATTACKS, EXPECTED, build_scene, detect
    from tests.conftest import PG_SERVER
    from tests.crash import postgres_schemas, sqlite_files

    rng = random.Random(args.seed + 1)
    started = time.perf_counter()
    runs: Counter[str] = Counter()
    caught: Counter[tuple[str, bool]] = Counter()
    failures: list[str] = []
    bundles = {"bundle-altered": (True, True), "bundle-re-signed": (True, False)}
    names = [*sorted(ATTACKS), *bundles]
    with tempfile.TemporaryDirectory(prefix="provledger-attack-") as tmp:
        factory = sqlite_files(tmp) if backend == "sqlite" else postgres_schemas(PG_SERVER)
        for case in range(args.examples):
            name = rng.choice(names)
            url, cleanup = factory()
            where = Path(tmp) / f"case-{case}"
            where.mkdir()
            try:
                with Ledger.open(url) as led:
                    scene = build_scene(led, where, led.now, noise=rng.randrange(0, 12))
                    if name in bundles:
                        got = _altered_bundle(scene, where, rng, re_signed=name != "bundle-altered")
                        expected = bundles[name]
                    else:
                        ATTACKS[name][1](scene)
                        got = (not detect(scene, True).ok, not detect(scene, False).ok)
                        expected = EXPECTED[name]
            finally:
                cleanup()
            runs[name] += 1
            for with_heads, detected in zip((True, False), got, strict=True):
                caught[(name, with_heads)] += int(detected)
            if tuple(got) != expected:
                failures.append(f"case {case}: {name}: detected {got}, expected {expected}")
    print(f"  attacks/{backend}: detection as measured (detected / runs):", flush=True)
    print(f"    {'attack':<28} {'with heads':>11} {'without':>9}   expected", flush=True)
    for name in names:
        if not runs[name]:
            continue
        want = bundles.get(name) or EXPECTED[name]
        print(
            f"    {name:<28} {caught[(name, True)]:>5}/{runs[name]:<5} "
            f"{caught[(name, False)]:>4}/{runs[name]:<4}   "
            + " / ".join("yes" if w else "no" for w in want),
            flush=True,
        )
    failure = None if not failures else f"{len(failures)} deviations: {failures[:3]}"
    return Outcome("attacks", backend, args.examples, time.perf_counter() - started, failure)


def _altered_bundle(scene: Any, where: Path, rng: Any, re_signed: bool) -> tuple[bool, bool]:
    """A bundle of M1 with one random byte flipped, or written whole and signed by
    another key: (caught against the trusted key, caught with the key it carries)."""
    from ledger.bundle import verify_bundle, write_bundle
    from ledger.heads import generate_key

    path = where / "m1.zip"
    if re_signed:
        generate_key(where / "attacker-key")
        write_bundle(scene.reviewer, "M1", where / "attacker-key", path)
    else:
        write_bundle(scene.reviewer, "M1", scene.key, path)
        data = bytearray(path.read_bytes())
        data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
        path.write_bytes(bytes(data))
    return (not verify_bundle(path, scene.public_key).ok, not verify_bundle(path).ok)


#: Campaign name -> runner.
CAMPAIGNS: dict[str, Callable[[argparse.Namespace, str], Outcome]] = {
    "model": model_campaign,
    "fuzz": fuzz_campaign,
    "crash": crash_campaign,
    "cli-fuzz": cli_fuzz_campaign,
    "tamper": tamper_campaign,
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[2:]),
    )
    parser.add_argument("--campaign", choices=sorted(CAMPAIGNS), default="model")
    parser.add_argument("--examples", type=int, default=500, help="examples per backend")
    parser.add_argument("--steps", type=int, default=40, help="max commands per example")
    parser.add_argument(
        "--backend",
        choices=(*BACKENDS, "all"),
        action="append",
        help="repeatable; default memory and sqlite; 'all' adds postgres",
    )
    parser.add_argument("--batch", type=int, default=50, help="examples per progress line")
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="BUG",
        help="leave out what a known library bug breaks (tests/test_model.py KNOWN_BUGS)",
    )
    parser.add_argument("--no-shrink", action="store_true", help="report failures unshrunk")
    parser.add_argument("--seed", type=int, default=20261130, help="fuzz and crash campaigns")
    parser.add_argument("--kills", type=int, default=100, help="crash: kills per scenario")
    parser.add_argument(
        "--scenario", action="append", help="crash: repeatable; default every scenario"
    )
    args = parser.parse_args(argv)
    chosen = args.backend or ["memory", "sqlite"]
    args.backends = list(BACKENDS) if "all" in chosen else list(dict.fromkeys(chosen))
    if args.examples < 1 or args.steps < 1 or args.batch < 1:
        parser.error("--examples, --steps and --batch must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen campaign on each backend; returns the exit status."""
    args = parse_args(argv)
    run = CAMPAIGNS[args.campaign]
    outcomes = []
    for backend in args.backends:
        if args.campaign == "crash":
            print(f"crash/{backend}: {args.kills} kills per scenario")
        else:
            print(
                f"{args.campaign}/{backend}: {args.examples} examples of up to {args.steps} steps"
            )
        outcomes.append(run(args, backend))
    print()
    for o in outcomes:
        status = "ok" if o.failure is None else "FAILED"
        unit = "kills" if o.campaign == "crash" else "examples"
        print(f"{o.campaign}/{o.backend}: {o.examples} {unit} in {o.seconds:.1f} s: {status}")
        if o.failure is not None:
            print(f"  {o.failure}")
    return 0 if all(o.failure is None for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
