"""Bad input everywhere, by fuzzing (SPEC 11; complements ``test_bad_input.py``).

``test_bad_input.py`` pins the exact error class and message of each known bad
input. Here hypothesis throws arbitrary and adversarial arguments at every public
callable (see ``tests/fuzz.py``) and checks the contract that must hold for all
of them: only ``LedgerError`` subclasses escape, a refused call leaves the log
and the views unchanged, a successful one leaves the ledger readable. Corrupt
bytes planted in the SQLite event table must surface as ``CorruptEventError``
naming the position or the record.

``FOUND`` keeps every failure the fuzz has found as a plain example: each fails
until the library is fixed.
"""

from __future__ import annotations

import inspect
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from ledger import Admin, Ledger, RunContext, Session
from ledger.errors import CorruptEventError, InvalidIdError, LedgerError
from ledger.merkle import LogDigest
from ledger.serialization import pack

from .conftest import new_pg_schema_url
from .faults import SmallDisk, end_sessions, small_disk
from .fuzz import (
    CALLS,
    CALLS_BY_NAME,
    GROUPS,
    NEAR_IDS,
    SPEC_ID,
    Arena,
    Args,
    Known,
    TmpUrl,
    call_and_args,
    calls_in,
    fixed_clock,
    fuzz_once,
    run_campaign,
    seed,
)

BACKENDS = ("memory", "sqlite")
#: Examples per group of callables (groups with costly or many callables get more).
EXAMPLES = {
    "lifecycle": 40,
    "access": 60,
    "propose": 60,
    "approve": 60,
    "deliver": 50,
    "read": 80,
    "run": 60,
}
FUZZ = settings(
    deadline=None,
    # Every example seeds a fresh world, so shrinking would cost a reseed per step;
    # the argument strategies already lean towards one bad argument at a time.
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
    database=None,
)


@pytest.fixture(scope="module")
def arenas() -> Iterator[dict[str, Arena]]:
    """A pristine seeded world per call, on each backend (SQLite copies a template)."""
    made = {backend: Arena(backend) for backend in BACKENDS}
    yield made
    for arena in made.values():
        arena.close()


# -- the table covers the public API ---------------------------------------------------

#: Public callables deliberately not fuzzed, and why.
NOT_FUZZED = {
    "Ledger.close": "takes no arguments",
    "Admin.bootstrap_admin_token": "takes no arguments",
    "Ledger.now": "takes no arguments",
    "Ledger.stats": "takes no arguments",
    "Ledger.digest": "takes no arguments",
    "Ledger.catch_up": "takes no arguments",
    "Ledger.views_digest": "takes no arguments",
    "RunContext.observed_for": "a helper of propose; takes the declared parents it is given",
    "RunContext.carry_into": "takes another open run, not input (tests/test_langgraph_store.py)",
    "RunContext.start": "what entering the run does (Session.run is fuzzed entering it)",
    "RunContext.resume": "takes no arguments",
    "RunContext.state": "takes no arguments",
    "Admin.scrub_erased": "takes no arguments",
    "RunContext.end": "ends the run the other run calls use (Session.run is fuzzed leaving it)",
}


def _public_methods(cls: type) -> set[str]:
    return {
        f"{cls.__name__}.{name}"
        for name, member in vars(cls).items()
        if not name.startswith("_")
        and (inspect.isfunction(member) or isinstance(member, classmethod))
    }


def test_every_public_callable_is_in_the_fuzz_table() -> None:
    # Given every public method of the API's classes
    public = set().union(*(_public_methods(c) for c in (Ledger, Admin, Session, RunContext)))

    # Then each is fuzzed or deliberately left out, and nothing fuzzed is made up
    assert public - set(CALLS_BY_NAME) - set(NOT_FUZZED) == set()
    assert set(CALLS_BY_NAME) <= public
    assert len(CALLS_BY_NAME) == len(CALLS)


# -- the fuzz ----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("group", GROUPS)
def test_adversarial_arguments_raise_only_ledger_errors_and_change_nothing(
    arenas: dict[str, Arena], group: str, backend: str
) -> None:
    arena = arenas[backend]
    outcomes: Counter[str] = Counter()

    # Given a pristine seeded ledger for every call
    @settings(FUZZ, max_examples=EXAMPLES[group])
    @given(drawn=call_and_args(calls_in(group)))
    def fuzz(drawn: tuple[Any, Args]) -> None:
        spec, args = drawn
        ledger, sessions = arena.fresh()

        # When a callable of the group is called with generated arguments,
        # Then it succeeds (leaving the ledger readable) or raises a LedgerError
        # (leaving the log and the views unchanged): fuzz_once raises otherwise
        outcomes[fuzz_once(ledger, sessions, spec, args).status] += 1

    fuzz()

    # And the arguments reached both sides: some calls passed, some were refused
    assert outcomes["refused"] > 0
    assert outcomes["succeeded"] > 0


@settings(FUZZ, max_examples=100)
@given(
    candidate=st.one_of(st.sampled_from(NEAR_IDS), st.text(max_size=140)).filter(
        lambda s: not SPEC_ID.fullmatch(s)
    )
)
@example(candidate="NL1\n")
def test_ids_outside_the_spec_pattern_are_refused_as_invalid_ids(
    arenas: dict[str, Arena], candidate: str
) -> None:
    # Given the SPEC's id pattern ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$ (no newline)
    ledger, sessions = arenas["memory"].fresh()
    admin = ledger.admin()
    attempts: dict[str, Callable[[], object]] = {
        "propose id": lambda: sessions["agent"].propose(
            scope="proj-a", claim_key="k", value=1, kind="fact", id=candidate
        ),
        "grant subject": lambda: admin.grant(candidate, scope="proj-a", roles=["read"]),
        "grant scope": lambda: admin.grant("agent-1", scope=candidate, roles=["read"]),
        "issue_token subject": lambda: admin.issue_token(candidate),
        "run id": lambda: sessions["agent"].run(candidate),
    }
    position = ledger.position

    # When each kind of id is given a string the pattern refuses
    accepted = []
    for what, attempt in attempts.items():
        try:
            attempt()
        except InvalidIdError:
            continue
        accepted.append(what)

    # Then every one is refused as an invalid id, and nothing was written
    assert accepted == [], f"{candidate!r} accepted as {', '.join(accepted)}"
    assert ledger.position == position


def test_a_short_campaign_reports_counts_per_callable() -> None:
    # When the soak entry point runs a few examples
    report = run_campaign(examples=30, backend="memory", seed=3)

    # Then it counts every input once, per callable and in total
    assert report["tried"] == 30 == report["examples"]
    assert report["succeeded"] + report["refused"] + report["failed"] == 30
    per = report["per_callable"]
    assert set(per) == set(CALLS_BY_NAME)
    assert sum(c["tried"] for c in per.values()) == 30
    assert sum(report["refusals"].values()) == report["refused"]
    assert sum(report["failures"].values()) == report["failed"]


# -- found by the fuzz: each fails until the library is fixed -------------------------------

MINUS_5 = timezone(timedelta(hours=-5))
PLUS_5 = timezone(timedelta(hours=5))


@dataclass(frozen=True)
class Found:
    """A call the fuzz found breaking the contract (the bug is named in ``name``)."""

    name: str
    call: str
    who: str
    kwargs: dict[str, Any]


def _propose(**kwargs: Any) -> dict[str, Any]:
    return {"scope": "proj-a", "claim_key": "k", "value": 1, "kind": "fact", **kwargs}


FOUND = [
    # Lone surrogates pass check_text/check_value, then msgpack or SQLite cannot encode them.
    Found("surrogate-in-claim-key", "Session.propose", "agent", _propose(claim_key="k\ud800")),
    Found("surrogate-in-value", "Session.propose", "agent", _propose(value=["\udfca"])),
    Found(
        "surrogate-in-condition-key", "Session.propose", "agent", _propose(conditions={"\ud800": 1})
    ),
    Found(
        "surrogate-in-read-claim-key",
        "Session.read",
        "reviewer",
        {"scope": "proj-a", "claim_key": "ok\ud800"},
    ),
    Found(
        "surrogate-in-read-context",
        "Session.read",
        "reviewer",
        {"scope": "proj-a", "claim_key": "claim.m1", "context": {"k": "\ud800"}},
    ),
    Found(
        "surrogate-in-explain-claim-key",
        "Session.explain",
        "reviewer",
        {"scope": "proj-a", "claim_key": "\ud800"},
    ),
    Found(
        "surrogate-in-reason", "Session.reject", "reviewer", {"record_id": "C1", "reason": "\ud800"}
    ),
    Found(
        "surrogate-in-recipient",
        "Session.deliver",
        "reviewer",
        {"record_id": "R1", "recipient": "\ud800"},
    ),
    Found(
        "surrogate-in-correction-note",
        "Session.issue_correction",
        "reviewer",
        {"delivery_id": Known("delivery:stale"), "note": "ok\ud800"},
    ),
    Found(
        "surrogate-in-uri",
        "Session.capture",
        "agent",
        {"scope": "proj-a", "uri": "https://x.test/\ud800", "content": b"x"},
    ),
    Found(
        "surrogate-in-snapshot-ref", "Session.snapshot", "agent", {"ref": "sha256:" + "\ud800" * 64}
    ),
    Found(
        "surrogate-in-run-read",
        "RunContext.read",
        "run:agent",
        {"scope": "proj-a", "claim_key": "\ud800"},
    ),
    # An aware datetime whose UTC instant is outside years 1..9999 is stored, then unreadable.
    Found(
        "expiry-past-year-9999-in-utc",
        "Session.propose",
        "agent",
        _propose(expires=datetime(9999, 12, 31, 23, 0, tzinfo=MINUS_5)),
    ),
    Found(
        "fetched-at-before-year-1-in-utc",
        "Session.capture",
        "agent",
        {
            "scope": "proj-a",
            "uri": "https://x.test/old",
            "content": b"old",
            "fetched_at": datetime(1, 1, 1, 1, 0, tzinfo=PLUS_5),
        },
    ),
    Found(
        "token-expiry-past-year-9999-in-utc",
        "Admin.issue_token",
        "admin",
        {"subject": "agent-1", "expires": datetime(9999, 12, 31, 23, 0, tzinfo=MINUS_5)},
    ),
    # Positions beyond 64 bits reach SQLite.
    Found("history-start-beyond-64-bits", "Session.history", "reviewer", {"start": 2**70}),
    # propose_many sorts the keys of an item before checking they are strings.
    Found(
        "batch-item-with-non-str-keys", "Session.propose_many", "agent", {"items": [{1: 2, "x": 3}]}
    ),
    # verify(against=) only catches ValueError/TypeError of LogDigest.parse, and trusts a LogDigest.
    Found("verify-against-a-number", "Ledger.verify", "ledger", {"against": 123}),
    Found(
        "verify-against-negative-size",
        "Ledger.verify",
        "ledger",
        {"against": LogDigest(size=-5, position=0, root="0" * 64)},
    ),
    Found(
        "verify-against-text-size",
        "Ledger.verify",
        "ledger",
        {"against": LogDigest(size="1", position=1, root="0" * 64)},  # type: ignore[arg-type]
    ),
    # rebuild(progress=) is called without a check.
    Found("rebuild-progress-not-callable", "Ledger.rebuild", "ledger", {"progress": 1}),
    # The id pattern's `$` matches before a trailing newline (re.match, not re.fullmatch).
    Found("record-id-with-trailing-newline", "Session.propose", "agent", _propose(id="NL1\n")),
    Found(
        "scope-with-trailing-newline",
        "Admin.grant",
        "admin",
        {"subject": "agent-1", "scope": "proj-a\n", "roles": ["read"]},
    ),
    Found("run-id-with-trailing-newline", "Session.run", "agent", {"run_id": "r1\n"}),
    # Ledger.open lets storage errors through, and does not check its options.
    Found("open-sqlite-in-missing-directory", "Ledger.open", "class", {"url": TmpUrl("nope/x.db")}),
    Found("open-sqlite-on-a-directory", "Ledger.open", "class", {"url": TmpUrl("a-directory.db")}),
    Found(
        "open-sqlite-on-a-non-database",
        "Ledger.open",
        "class",
        {"url": TmpUrl("not-a-database.db")},
    ),
    Found("open-sqlite-bad-timeout", "Ledger.open", "class", {"url": TmpUrl("ok.db?timeout=abc")}),
    Found("open-sqlite-nul-in-path", "Ledger.open", "class", {"url": TmpUrl("a%00b.db")}),
    Found("open-sqlite-surrogate-in-path", "Ledger.open", "class", {"url": TmpUrl("\ud800.db")}),
    Found(
        "open-postgres-unreachable",
        "Ledger.open",
        "class",
        {"url": "postgresql://nobody@127.0.0.1:1/db?connect_timeout=1"},
    ),
    Found(
        "open-retention-not-a-mapping",
        "Ledger.open",
        "class",
        {"url": "memory:", "retention": True},
    ),
    Found(
        "open-acceptance-checks-not-a-list",
        "Ledger.open",
        "class",
        {"url": "memory:", "acceptance_checks": 1},
    ),
    Found(
        "open-acceptance-check-not-callable",
        "Ledger.open",
        "class",
        {"url": "memory:", "acceptance_checks": [None]},
    ),
    Found(
        "open-clock-returns-naive",
        "Ledger.open",
        "class",
        {"url": "memory:", "clock": lambda: datetime(2026, 1, 1)},
    ),
    Found(
        "open-clock-not-callable",
        "Ledger.open",
        "class",
        {"url": "memory:", "clock": datetime.now(UTC)},
    ),
    Found(
        "open-max-value-bytes-not-a-number",
        "Ledger.open",
        "class",
        {"url": "memory:", "max_value_bytes": "1MiB"},
    ),
]


def test_found_names_are_unique_and_their_calls_exist() -> None:
    assert len({f.name for f in FOUND}) == len(FOUND)
    assert {f.call for f in FOUND} <= set(CALLS_BY_NAME)


# Ledger.open makes its own ledger: once is enough.
FOUND_RUNS = [
    pytest.param(found, backend, id=f"{found.name}-{backend}")
    for found in FOUND
    for backend in (("memory",) if found.who == "class" else BACKENDS)
]


@pytest.mark.parametrize(("found", "backend"), FOUND_RUNS)
def test_calls_the_fuzz_found_keep_the_contract(
    arenas: dict[str, Arena], found: Found, backend: str
) -> None:
    # Given a pristine seeded ledger
    ledger, sessions = arenas[backend].fresh()

    # When the call the fuzz found is made, it keeps the contract (or fuzz_once raises)
    outcome = fuzz_once(ledger, sessions, CALLS_BY_NAME[found.call], Args(found.who, found.kwargs))

    # Then it was either refused with a LedgerError or it succeeded
    assert outcome.status in ("refused", "succeeded")


# -- corrupt bytes planted in the SQLite event table ------------------------------------------

ACCEPTED = "ledger.domain:Record.Accepted"


def _truncated(real: bytes) -> bytes:
    return real[: len(real) // 2]


#: name -> (topic or None for the real one, state bytes or a function of the real state)
CORRUPT: dict[str, tuple[str | None, bytes | Callable[[bytes], bytes]]] = {
    "undecodable": (None, b"\xc1\xc1\xc1"),
    "empty": (None, b""),
    "truncated": (None, _truncated),
    "not-a-map": (None, pack(42)),
    "a-list": (None, pack([1, 2])),
    "empty-map": (None, pack({})),
    "wrong-field-types": (None, pack({"actor": 1, "timestamp": "x", "note": None})),
    "unknown-ext-type": (None, msgpack.packb({"timestamp": msgpack.ExtType(99, b"x")})),
    "garbled-datetime": (None, msgpack.packb({"timestamp": msgpack.ExtType(2, b"\xc1")})),
    "datetime-out-of-range": (
        None,
        msgpack.packb({"timestamp": msgpack.ExtType(2, msgpack.packb([2**62, 0]))}),
    ),
    "unknown-event-topic": ("ledger.domain:Record.NoSuchEvent", lambda real: real),
    "unimportable-topic": ("no_such_module_xyz:Thing", lambda real: real),
    "topic-not-an-event": ("builtins:dict", lambda real: real),
}


@dataclass(frozen=True)
class Action:
    """Something done to a ledger holding a planted event; ``must``: it has to be refused."""

    name: str
    run: Callable[[Ledger, dict[str, Session]], object]
    must: bool


def _reopen(led: Ledger, sessions: dict[str, Session]) -> None:
    Ledger.open(led.url).close()


ACTIONS = (
    Action("catch_up", lambda led, s: led.catch_up(), must=True),
    Action("rebuild", lambda led, s: led.rebuild(), must=True),
    Action("grant", lambda led, s: led.admin().grant("newcomer", "proj-a", ["read"]), must=True),
    Action(
        "propose",
        lambda led, s: s["agent"].propose(scope="proj-a", claim_key="k", value=1, kind="fact"),
        must=True,
    ),
    Action("revoke M1", lambda led, s: s["reviewer"].revoke("M1", reason="x"), must=True),
    Action("accept C2", lambda led, s: s["reviewer"].accept("C2"), must=True),
    Action("get M1", lambda led, s: s["reviewer"].get("M1"), must=False),
    Action("read", lambda led, s: s["reviewer"].read("proj-a", "claim.m1"), must=False),
    Action("audit M1", lambda led, s: s["reviewer"].audit("M1"), must=False),
    Action("history", lambda led, s: s["reviewer"].history(), must=False),
    Action("history M1", lambda led, s: s["reviewer"].history(record="M1"), must=False),
    Action("prove M1", lambda led, s: s["reviewer"].prove("M1"), must=False),
    Action("corrections_due", lambda led, s: s["reviewer"].corrections_due(), must=False),
    Action("verify", lambda led, s: led.verify(), must=False),
    Action("stats", lambda led, s: led.stats(), must=False),
    Action("reopen", _reopen, must=False),
)


def _plant(path: str, originator: str, version: int, topic: str, state: bytes) -> None:
    with closing(sqlite3.connect(path)) as con:
        con.execute(
            "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
            "VALUES (?, ?, ?, ?)",
            (originator, version, topic, state),
        )
        con.commit()


def _m1_oid(path: str) -> str:
    """M1's aggregate id (hex) as the validity view keeps it."""
    with closing(sqlite3.connect(path)) as con:
        (oid,) = con.execute(
            "SELECT agg_id FROM pl_records WHERE record_id = 'M1' LIMIT 1"
        ).fetchone()
        return str(oid)


def _m1_events(path: str) -> list[tuple[int, str, bytes]]:
    with closing(sqlite3.connect(path)) as con:
        return con.execute(
            "SELECT originator_version, topic, state FROM stored_events "
            "WHERE originator_id = ? ORDER BY originator_version",
            (_m1_oid(path),),
        ).fetchall()


def _problems(
    led: Ledger, sessions: dict[str, Session], position: int, must: set[str]
) -> list[str]:
    """Run every action; describe each that breaks the contract."""
    problems = []
    for action in ACTIONS:
        before = (led.position, led.views_digest())
        try:
            action.run(led, sessions)
        except CorruptEventError as exc:
            if f"position {position}" not in str(exc) and "'M1'" not in str(exc):
                problems.append(f"{action.name}: CorruptEventError names neither: {exc}")
            if (led.position, led.views_digest()) != before:
                problems.append(f"{action.name}: refused, but the log or the views changed")
            continue
        except LedgerError as exc:
            problems.append(
                f"{action.name}: {type(exc).__name__} instead of CorruptEventError: {exc}"
            )
            continue
        except Exception as exc:
            problems.append(
                f"{action.name}: raised {type(exc).__module__}.{type(exc).__name__}: {exc}"
            )
            continue
        if action.must or action.name in must:
            problems.append(f"{action.name}: succeeded over the corrupt event")
    return problems


@pytest.mark.parametrize("placement", ["new-aggregate", "in-M1-history"])
@pytest.mark.parametrize("variant", sorted(CORRUPT))
def test_corrupt_stored_events_surface_as_corrupt_event_errors_naming_them(
    arenas: dict[str, Arena], variant: str, placement: str
) -> None:
    # Given a seeded ledger file, and a bad row slipped into its event table behind
    # its back: after the log, either for a new aggregate or as M1's next event
    led, sessions = arenas["sqlite"].fresh()
    path = led.url.removeprefix("sqlite:///")
    events = _m1_events(path)
    _, real_topic, real_state = events[1]  # M1's Accepted
    topic, state = CORRUPT[variant]
    planted_state = state(real_state) if callable(state) else state
    if placement == "new-aggregate":
        originator, version = uuid.uuid4().hex, 1
    else:
        originator, version = _m1_oid(path), len(events) + 1
    position = led.position + 1
    _plant(path, originator, version, topic or real_topic, planted_state)
    assert led.position == position

    # When the ledger is used: views catch up, rebuild, commands, reads, reopening,
    # Then each is refused with a CorruptEventError naming the position or M1 (the
    # log and views unchanged), or it succeeds where it need not touch the row
    decodes_m1 = set()
    if placement == "in-M1-history":
        decodes_m1.add("audit M1")
        if (topic or real_topic).startswith("ledger.domain:Record."):
            decodes_m1.add("history M1")  # history lists record events only
    problems = _problems(led, sessions, position, decodes_m1)
    assert problems == [], "\n".join(problems)


def test_an_orphan_event_in_the_log_is_a_corrupt_event(arenas: dict[str, Arena]) -> None:
    # Given a well-formed Accepted event for a record that was never proposed
    led, sessions = arenas["sqlite"].fresh()
    path = led.url.removeprefix("sqlite:///")
    _, topic, state = _m1_events(path)[1]
    position = led.position + 1
    _plant(path, uuid.uuid4().hex, 1, topic, state)
    assert topic == ACCEPTED

    # When the ledger is used, Then the orphan is reported as corrupt, by position
    problems = _problems(led, sessions, position, set())
    assert problems == [], "\n".join(problems)


# -- storage faults ----------------------------------------------------------------------

#: Groups whose callables write (reads are fuzzed under faults as part of them).
FAULT_GROUPS = ("access", "propose", "approve", "deliver", "run")
FAULT_EXAMPLES = 15
#: A well-formed call that writes much, by group: the fault fuzz always tries it.
FAULT_WRITES = {
    "access": (
        CALLS_BY_NAME["Admin.grant"],
        Args("admin", {"subject": "agent-9", "scope": "proj-a", "roles": ["read", "propose"]}),
    ),
    "propose": (
        CALLS_BY_NAME["Session.capture"],
        Args("agent", {"scope": "proj-a", "uri": "https://x.test/big", "content": b"x" * 65536}),
    ),
}


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Arena, SmallDisk]]:
    """An arena of SQLite ledgers on an 8 MiB tmpfs (needs root to mount it; the
    file-size-limit tests of ``test_storage_faults.py`` run without)."""
    with small_disk(tmp_path_factory.mktemp("disk"), "8m") as disk:
        arena = Arena("sqlite", directory=disk.mount)
        try:
            yield arena, disk
        finally:
            arena.close()


@pytest.mark.parametrize("group", FAULT_GROUPS)
def test_adversarial_calls_on_a_full_disk_raise_only_ledger_errors_and_change_nothing(
    full_disk: tuple[Arena, SmallDisk], group: str
) -> None:
    arena, disk = full_disk
    refused: Counter[str] = Counter()

    # Given a pristine seeded SQLite ledger on a disk that fills up for each call
    # (with one well-formed writing call among the examples, whatever the seed)
    @settings(FUZZ, max_examples=FAULT_EXAMPLES)
    @given(drawn=call_and_args(calls_in(group)))
    @example(drawn=FAULT_WRITES.get(group, FAULT_WRITES["access"]))
    def fuzz(drawn: tuple[Any, Args]) -> None:
        spec, args = drawn
        ledger, sessions = arena.fresh()
        # When a callable is called while the disk is full, Then it succeeds or
        # raises a LedgerError leaving the log and the views unchanged (checked
        # once space is back)
        outcome = fuzz_once(ledger, sessions, spec, args, fault=disk.full)
        if outcome.error is not None:
            refused[type(outcome.error).__name__] += 1
        # (the world holds no corrupt event: a fault must not be reported as one)
        assert not isinstance(outcome.error, CorruptEventError), outcome.error

    fuzz()

    # And the full disk was met as a typed error (calls that append little may fit in
    # the pages SQLite's write-ahead log already holds, so only where much is written)
    if group in ("access", "propose"):
        assert refused["DiskFullError"] > 0, refused


@pytest.fixture
def pg_world() -> Iterator[tuple[str, Ledger, dict[str, Session]]]:
    """One seeded PostgreSQL ledger a group's fault fuzz works on (its campaign's
    arena: what one group's calls change, another's never meets)."""
    url, drop = new_pg_schema_url()
    ledger = Ledger.open(url, clock=fixed_clock)
    try:
        yield url, ledger, seed(ledger)
    finally:
        ledger.close()
        drop()


@contextmanager
def _sessions_ended(url: str, after: float) -> Iterator[None]:
    """The ledger's server sessions terminated ``after`` seconds into the block
    (mid-command, or once it is over: idle connections die then)."""
    killer = threading.Timer(after, end_sessions, (url,))
    killer.start()
    try:
        yield
    finally:
        killer.join()
        # The server closes the ended sessions' sockets before the checks read (as
        # test_storage_faults waits): a socket not closed yet looks alive to the pool,
        # and the checks' first read would then meet the ending, not the contract.
        time.sleep(0.2)


#: Calls that can revoke the seeded principals' tokens (``reviewer``'s, say): on the
#: world a campaign shares, every later example would then meet a session that no
#: longer authenticates. They are fuzzed on fresh worlds, and on a full disk, above.
_ENDS_SEEDED_SESSIONS = ("Admin.revoke_token", "Admin.revoke_tokens_of")


# The connection pool replaces ended sessions in its worker threads, drawing its retry
# jitter from ``random`` while hypothesis generates the next example.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
@pytest.mark.parametrize("group", FAULT_GROUPS)
def test_adversarial_calls_while_postgresql_ends_sessions_keep_the_contract(
    pg_world: tuple[str, Ledger, dict[str, Session]], group: str
) -> None:
    url, ledger, sessions = pg_world
    outcomes: Counter[str] = Counter()

    # Given a seeded PostgreSQL ledger whose server sessions are terminated during
    # or right after each call
    calls = tuple(spec for spec in calls_in(group) if spec.name not in _ENDS_SEEDED_SESSIONS)

    @settings(FUZZ, max_examples=FAULT_EXAMPLES)
    @given(
        drawn=call_and_args(calls),
        after=st.sampled_from((0.0, 0.002, 0.005, 0.01, 0.02)),
    )
    def fuzz(drawn: tuple[Any, Args], after: float) -> None:
        spec, args = drawn
        # Then each call succeeds or raises a LedgerError (ConnectionLostError when
        # its session ended) with the log and the views unchanged, and the calls
        # after it work
        outcome = fuzz_once(ledger, sessions, spec, args, fault=lambda: _sessions_ended(url, after))
        outcomes[outcome.status] += 1
        assert not isinstance(outcome.error, CorruptEventError), outcome.error

    fuzz()

    # And afterwards the whole ledger verifies
    assert sum(outcomes.values()) == FAULT_EXAMPLES
    assert ledger.verify().ok
