"""Bad input everywhere: adversarial arguments for every public callable (SPEC 11).

The contract under test: a call on the public Python API either succeeds or
raises a ``LedgerError`` subclass — never another exception — and when it raises,
the log position and the views are exactly as they were. A call that succeeds
must leave the ledger readable (its records get/audit/explain cleanly and the
views rebuilt from the log equal the live ones), and any id it created must
match the SPEC's id pattern in full.

Pieces:

* :func:`seed` builds the small world the calls run against (records in every
  status, a delivered report, a report awaiting a correction, a finished run);
  :class:`Arena` hands out pristine copies of it, cheaply;
* the strategies below generate arguments mixing valid and adversarial values;
* :data:`CALLS` is the table of every public callable with its argument strategy;
* :func:`fuzz_once` performs one call and checks the contract, raising
  :class:`FuzzFailure` (an ``AssertionError``) naming the callable and arguments;
* :func:`run_campaign` runs a long seeded campaign and returns counts, for the
  soak script.

The ledger's clock is fixed at :data:`FUZZ_NOW`, so "near future" arguments are
computed from it.
"""

from __future__ import annotations

import atexit
import hashlib
import re
import reprlib
import shutil
import sqlite3
import tempfile
import time
import traceback
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, closing, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo

from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from ledger import (
    Kind,
    Ledger,
    LedgerError,
    RebuildReport,
    RecordView,
    RetentionRule,
    Role,
    Session,
    Status,
    Validity,
)
from ledger.errors import ConnectionLostError, CorruptEventError, StorageError
from ledger.merkle import LogDigest

# -- the seeded world ------------------------------------------------------------

#: The fixed clock of every fuzzed ledger.
FUZZ_NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
#: The SPEC's record id pattern, matched in full (``re.fullmatch``).
SPEC_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

SCOPES = ("proj-a", "proj-b", "proj-c")
#: Ids that exist after :func:`seed` (``RS`` is a STALE delivered report).
KNOWN_IDS = (
    *("E1", "M1", "R1", "C1", "C2", "C3", "X1", "E0", "S1", "RS", "H1", "SOLO1", "EXP1"),
    "RUN1",
)
KNOWN_CLAIMS = ("claim.m1", "claim.r1", "claim.c1", "claim.s1", "source:https://docs.test/e1")
KNOWN_SUBJECTS = ("agent-1", "reviewer", "outsider", "solo", "owner-c", "ghost")
E1_CONTENT = b"the e1 document"
E1_SNAPSHOT = "sha256:" + hashlib.sha256(E1_CONTENT).hexdigest()
#: The principal the checks read through; never produced by the argument strategies.
PROBE_SUBJECT = "zz-fuzz-probe"


def fixed_clock() -> datetime:
    """The clock of every fuzzed ledger: always :data:`FUZZ_NOW`."""
    return FUZZ_NOW


def seed(ledger: Ledger) -> dict[str, Session]:
    """Fill an empty ledger with the fuzz world; returns the sessions by name
    (``agent``, ``reviewer``, ``outsider``, ``solo``, ``probe``)."""
    return {name: ledger.authenticate(token) for name, token in seed_tokens(ledger).items()}


def seed_tokens(ledger: Ledger) -> dict[str, str]:
    """Fill an empty ledger with the fuzz world; returns the sessions' tokens by name.

    ``proj-a``: E1 evidence ACCEPTED → M1 fact ACCEPTED → R1 report ACCEPTED and
    delivered; C1 and C2 CANDIDATEs; X1 REJECTED; E0 REVOKED with S1 and the
    delivered report RS STALE (so a correction is due); SOLO1 a CANDIDATE of
    ``solo``; EXP1 a CANDIDATE expiring in an hour, with conditions; RUN1
    ACCEPTED, proposed in run ``task-1`` after reading M1 (observed). ``proj-b``:
    C3 a CANDIDATE. ``proj-c``: H1, which only ``owner-c`` and the probe see.
    """
    admin = ledger.admin()
    for scope in ("proj-a", "proj-b"):
        admin.grant("agent-1", scope=scope, roles=["propose", "read"])
        admin.grant("reviewer", scope=scope, roles=["approve", "read", "audit", "deliver"])
    admin.grant("outsider", scope="proj-b", roles=["read"])
    admin.grant("solo", scope="proj-a", roles=["propose", "approve", "read"])
    admin.grant("owner-c", scope="proj-c", roles=["propose", "read"])
    for scope in SCOPES:
        admin.grant(PROBE_SUBJECT, scope=scope, roles=["read", "audit", "deliver"])
    tokens = {
        name: admin.issue_token(subject)
        for name, subject in (
            ("agent", "agent-1"),
            ("reviewer", "reviewer"),
            ("outsider", "outsider"),
            ("solo", "solo"),
            ("probe", PROBE_SUBJECT),
        )
    }
    agent, reviewer = ledger.authenticate(tokens["agent"]), ledger.authenticate(tokens["reviewer"])
    solo = ledger.authenticate(tokens["solo"])
    owner = ledger.authenticate(admin.issue_token("owner-c"))

    def propose(rid: str, scope: str = "proj-a", **kwargs: Any) -> str:
        kwargs.setdefault("claim_key", f"claim.{rid.lower()}")
        kwargs.setdefault("kind", Kind.FACT)
        kwargs.setdefault("value", rid)
        return agent.propose(scope=scope, id=rid, **kwargs)

    e1 = agent.capture(scope="proj-a", uri="https://docs.test/e1", content=E1_CONTENT, id="E1")
    reviewer.accept(e1)
    reviewer.accept(propose("M1", parents=[e1]))
    reviewer.accept(propose("R1", parents=["M1"], kind=Kind.REPORT))
    reviewer.deliver("R1", recipient="ops@x.test")
    propose("C1")
    propose("C2", parents=["M1"], claim_key="claim.m1", value="other")
    propose("C3", scope="proj-b", claim_key="k")
    reviewer.reject(propose("X1"), reason="wrong")
    e0 = agent.capture(scope="proj-a", uri="https://docs.test/e0", content=b"e0", id="E0")
    reviewer.accept(e0)
    reviewer.accept(propose("S1", parents=[e0]))
    reviewer.accept(propose("RS", parents=["S1"], kind=Kind.REPORT))
    reviewer.deliver("RS", recipient="ops@x.test", channel="slack")
    reviewer.revoke(e0, reason="doc changed")
    solo.propose(scope="proj-a", claim_key="solo", value=1, kind="fact", id="SOLO1")
    owner.propose(scope="proj-c", claim_key="hidden", value=1, kind="fact", id="H1")
    propose(
        "EXP1", expires=FUZZ_NOW + timedelta(hours=1), conditions={"api_version": "v2"}, value=2
    )
    with agent.run("task-1") as run:
        run.read("proj-a", "claim.m1")
        run.propose(scope="proj-a", claim_key="claim.run1", value=True, kind="inference", id="RUN1")
    reviewer.accept("RUN1")
    return tokens


class Arena:
    """Seeded ledgers for the fuzz to work on, replaced when they may be tainted.

    ``fresh()`` gives the current ledger and its sessions; ``reset()`` drops it so
    the next ``fresh()`` starts from a newly seeded one. ``reset_every=1`` gives
    every call a pristine world (failures reproduce exactly); a campaign uses a
    larger number and resets after every failure, so a bad write is never blamed
    on the calls after it. The world is seeded once into a template and copied:
    the SQLite file, or (with SQLite's backup API) the in-memory database.
    """

    def __init__(self, backend: str, directory: Path | None = None, reset_every: int = 1):
        if backend not in ("memory", "sqlite"):
            raise ValueError(f"backend {backend!r} is not memory or sqlite")
        self.backend = backend
        self.directory = directory if directory is not None else Path(fuzz_tmpdir())
        self.reset_every = reset_every
        self.resets = 0
        self._uses = 0
        self._current: tuple[Ledger, dict[str, Session]] | None = None
        self._template: tuple[Ledger | Path, dict[str, str]] | None = None
        self._copies: list[Path] = []

    def fresh(self) -> tuple[Ledger, dict[str, Session]]:
        """The current seeded ledger and its sessions (seeding one if needed)."""
        if self._current is not None and self.reset_every and self._uses >= self.reset_every:
            self.reset()
        if self._current is None:
            self._current = self._open()
            self._uses = 0
        self._uses += 1
        return self._current

    def _open(self) -> tuple[Ledger, dict[str, Session]]:
        if self._template is None:
            self._template = self._seed_template()
        template, tokens = self._template
        if isinstance(template, Ledger):
            led = Ledger.open("memory:", clock=fixed_clock)
            with (
                closing(sqlite3.connect(_memory_name(template), uri=True)) as source,
                closing(sqlite3.connect(_memory_name(led), uri=True)) as target,
            ):
                source.backup(target)
        else:
            path = self.directory / f"fuzz-{uuid.uuid4().hex[:12]}.db"
            for suffix in ("", "-wal", "-shm"):
                if Path(f"{template}{suffix}").exists():
                    shutil.copyfile(f"{template}{suffix}", f"{path}{suffix}")
            self._copies.append(path)
            led = Ledger.open(f"sqlite:///{path}", clock=fixed_clock)
        return led, {name: led.authenticate(token) for name, token in tokens.items()}

    def _seed_template(self) -> tuple[Ledger | Path, dict[str, str]]:
        if self.backend == "memory":
            # Kept open: an in-memory database lives as long as a connection to it.
            template = Ledger.open("memory:", clock=fixed_clock)
            return template, seed_tokens(template)
        path = self.directory / f"template-{uuid.uuid4().hex[:12]}.db"
        with Ledger.open(f"sqlite:///{path}", clock=fixed_clock) as led:
            tokens = seed_tokens(led)
        return path, tokens

    def reset(self) -> None:
        """Drop the current ledger; the next ``fresh()`` starts from a new copy."""
        if self._current is not None:
            self._current[0].close()
            self._current = None
            self.resets += 1
        for path in self._copies:
            _unlink_database(path)
        self._copies.clear()

    def close(self) -> None:
        """Drop the current ledger and the template."""
        self.reset()
        if self._template is not None:
            template = self._template[0]
            if isinstance(template, Ledger):
                template.close()
            else:
                _unlink_database(template)
            self._template = None


def _memory_name(led: Ledger) -> str:
    """The SQLite URI of a ``memory:`` ledger's database (an eventsourcing detail)."""
    pool: Any = led.engine.recorder.datastore.pool
    return str(pool.db_name)


def _unlink_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


_TMPDIR: list[str] = []


def fuzz_tmpdir() -> str:
    """A scratch directory for the SQLite files ``Ledger.open`` is fuzzed with."""
    if not _TMPDIR:
        path = tempfile.mkdtemp(prefix="provledger-fuzz-")
        _TMPDIR.append(path)
        Path(path, "not-a-database.db").write_bytes(b"this is not an SQLite file\n" * 64)
        Path(path, "a-directory.db").mkdir()
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return _TMPDIR[0]


# -- placeholders resolved against the live ledger ----------------------------------


@dataclass(frozen=True)
class Known:
    """An argument only the live ledger can supply (a token, a delivery id, a digest).

    ``token:<subject>`` a fresh token; ``token:revoked`` a revoked one;
    ``delivery`` R1's delivery; ``delivery:stale`` RS's delivery (correction due);
    ``position`` / ``position+1``; ``digest`` (text), ``digest:object``,
    ``digest:tampered``, ``digest:ahead``.
    """

    name: str


@dataclass(frozen=True)
class TmpUrl:
    """``sqlite:///<fuzz scratch directory>/<segment>``, resolved at call time."""

    segment: str


def _resolve(value: Any, ledger: Ledger, sessions: Mapping[str, Session], depth: int = 0) -> Any:
    if isinstance(value, Known):
        return _known(value.name, ledger, sessions)
    if isinstance(value, TmpUrl):
        return f"sqlite:///{fuzz_tmpdir()}/{value.segment}"
    if depth >= 2:
        return value
    if type(value) is list:
        return [_resolve(v, ledger, sessions, depth + 1) for v in value]
    if type(value) is dict:
        return {k: _resolve(v, ledger, sessions, depth + 1) for k, v in value.items()}
    return value


def _known(name: str, ledger: Ledger, sessions: Mapping[str, Session]) -> Any:
    admin = ledger.admin()
    if name == "token:revoked":
        token = admin.issue_token("agent-1")
        admin.revoke_token(token)
        return token
    if name.startswith("token:"):
        return admin.issue_token(name.removeprefix("token:"))
    if name.startswith("delivery"):
        record = "RS" if name == "delivery:stale" else "R1"
        deliveries = sessions["probe"].get(record).deliveries
        return deliveries[0].delivery_id if deliveries else "d-none"
    if name == "position":
        return ledger.position
    if name == "position+1":
        return ledger.position + 1
    digest = ledger.digest()
    if name == "digest":
        return str(digest)
    if name == "digest:object":
        return digest
    if name == "digest:tampered":
        flipped = ("1" if digest.root[0] == "0" else "0") + digest.root[1:]
        return f"{digest.size}:{digest.position}:{flipped}"
    if name == "digest:ahead":
        return f"{digest.size + 1}:{digest.position + 1}:{digest.root}"
    raise ValueError(f"unknown placeholder {name!r}")


# -- adversarial values ---------------------------------------------------------------

#: More than 1 MiB: over the default value limit and every text limit.
HUGE_TEXT = "x" * (1024 * 1024 + 1)
HUGE_BYTES = b"\x00" * (1024 * 1024 + 1)


class Opaque:
    """An arbitrary object of a type the ledger has never heard of."""

    def __repr__(self) -> str:
        return "<Opaque>"


class NoOffset(tzinfo):
    """A tzinfo whose offset is unknown: a datetime with it is naive."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None


class OddMapping(Mapping[Any, Any]):
    """A read-only mapping that is not a dict."""

    def __init__(self, data: dict[Any, Any]) -> None:
        self._data = data

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"OddMapping({self._data!r})"


def nest(depth: int, how: str) -> Any:
    """A value nested ``depth`` levels deep (lists, dicts, tuples or mixed)."""
    value: Any = 0
    for level in range(depth):
        shape = how if how != "mixed" else ("list", "dict", "tuple")[level % 3]
        value = [value] if shape == "list" else {"k": value} if shape == "dict" else (value,)
    return value


def self_referencing_list() -> list[Any]:
    """``[1, [1, [1, …]]]``: a list that contains itself."""
    value: list[Any] = [1]
    value.append(value)
    return value


def _memory_view(data: bytes) -> memoryview:
    return memoryview(data)


def one_shot(items: list[Any]) -> Iterator[Any]:
    """An iterator: iterable once, with no ``len``."""
    return iter(items)


SURROGATE_TEXT = st.text(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, codec=None, categories=["Cs"]),
    min_size=1,
    max_size=3,
)
CONTROL_TEXT = st.text(
    st.characters(min_codepoint=0, max_codepoint=0x1F, codec=None) | st.just("\x7f"),
    min_size=1,
    max_size=4,
)
NASTY_TEXT = (
    *("", " ", "\t", "\n", "\x00", "a\x00b", "\x7f", "\x1b[31m", "\ud800", "a\udfffb"),
    *("\u202eevil", "\ufeff", "\u200b", "é", "🙂", "a b", "a/b", "../x", "%s%n"),
    *("'; DROP TABLE stored_events; --", "a" * 128, "a" * 129, "a" * 2049, HUGE_TEXT),
)

#: Text that is wrong in some way: empty, huge, control characters, surrogates, NUL.
adversarial_text = st.one_of(
    st.sampled_from(NASTY_TEXT),
    st.text(max_size=30),
    CONTROL_TEXT.map(lambda s: f"a{s}b"),
    SURROGATE_TEXT.map(lambda s: f"ok{s}"),
    st.text(st.characters(codec=None), max_size=10),
)

#: Values of the wrong type for almost any parameter.
wrong_types = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from((2**63, 2**64, -(2**63) - 1, 2**100)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from((float("nan"), float("inf"), -float("inf"), -0.0)),
    st.binary(max_size=16),
    st.sampled_from((b"E1", b"proj-a", b"\xff\xfe")),
    st.builds(bytearray, st.binary(max_size=4)),
    st.binary(max_size=4).map(_memory_view),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.integers(), st.integers(), max_size=2),
    st.frozensets(st.integers(), max_size=2),
    st.tuples(st.text(max_size=3)),
    st.builds(Opaque),
    st.sampled_from(
        (
            *(object(), Opaque, len, Decimal("1.5"), complex(1, 2), uuid.UUID(int=1)),
            *(Path("/tmp"), FUZZ_NOW, date(2030, 1, 1), timedelta(days=1), Kind.FACT),
            *(Role.READ, Ellipsis, NotImplemented),
        )
    ),
)
not_none = wrong_types.filter(lambda v: v is not None)


@dataclass(frozen=True)
class Param:
    """One parameter: well-formed values, and values the ledger must refuse.

    Well-formed values can still be refused for the ledger's state (an unknown
    parent, a missing role); the bad ones never pass validation.
    """

    valid: st.SearchStrategy[Any]
    bad: st.SearchStrategy[Any]


def text_param(valid: tuple[str, ...], free: bool = True) -> Param:
    """A free-text parameter (note, reason, recipient…): printable text, or garbage."""
    printable = st.text(st.characters(categories=["L", "N", "P", "Zs"]), min_size=1, max_size=30)
    good = st.sampled_from(valid) | printable.filter(str.strip) if free else st.sampled_from(valid)
    return Param(good, adversarial_text | wrong_types)


valid_fresh_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,24}", fullmatch=True)
NEAR_IDS = (
    *("NOPE", "E1\n", "e1", " E1", "E1 ", "E1\t", "E1/x", "-E1", ".E1", "E1\x00"),
    *("\uff251", "E1\u200b", "a" * 129, "d-nope"),
)

RECORD = Param(
    st.sampled_from(KNOWN_IDS),
    st.one_of(valid_fresh_ids, st.sampled_from(NEAR_IDS), adversarial_text, wrong_types),
)
NEW_ID = Param(
    st.none() | valid_fresh_ids | st.just("a" * 128),
    st.sampled_from(NEAR_IDS + KNOWN_IDS) | adversarial_text | not_none,
)
SCOPE = Param(
    st.sampled_from(("proj-a", "proj-a", "proj-b", "proj-c")),
    st.one_of(
        valid_fresh_ids,
        st.sampled_from(("proj-a\n", "proj a", "PROJ-A", "proj-a/x", "")),
        adversarial_text,
        wrong_types,
    ),
)
SUBJECT = Param(
    st.sampled_from(KNOWN_SUBJECTS) | valid_fresh_ids,
    st.sampled_from(("agent-1\n", "agent 1", "")) | adversarial_text | wrong_types,
)
CLAIM = text_param(("claim.m1", "claim.r1", "claim.c1", "claim.s1", "k", "api.retry_safe"))
NOTE = text_param(("", "checked", "re-checked by hand", "a\tb\nc"))
REASON = text_param(("doc changed", "wrong", "x"))
RECIPIENT = text_param(("ops@x.test", "team", "a" * 512))
CHANNEL = text_param(("email", "slack", "a" * 64))
URI = text_param(("https://docs.test/new", "https://docs.test/e1", "file:///etc/passwd"))
KIND = Param(
    st.sampled_from(list(Kind)) | st.sampled_from([k.value for k in Kind]),
    st.sampled_from(("FACT", "Fact", " fact", "fact ", "rumour", "", "evidence\x00"))
    | adversarial_text
    | wrong_types,
)
KINDS = Param(
    st.none() | st.lists(KIND.valid, min_size=1, max_size=3),
    st.one_of(
        st.lists(KIND.bad, min_size=1, max_size=2),
        st.sampled_from((["fact"], {"fact": 1}, "fact", [["fact"]], [])),
        not_none,
    ),
)

TIMEZONES = (
    UTC,
    timezone(timedelta(hours=14)),
    timezone(timedelta(hours=-12)),
    timezone(timedelta(hours=5, minutes=30)),
    timezone(timedelta(seconds=1)),
    timezone(timedelta(hours=23, minutes=59)),
    timezone(-timedelta(hours=23, minutes=59)),
    ZoneInfo("America/New_York"),
    ZoneInfo("Pacific/Kiritimati"),
)
EXTREME_DATETIMES = (
    datetime.min.replace(tzinfo=UTC),
    datetime.max.replace(tzinfo=UTC),
    datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5))),
    datetime(1, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=5))),
    datetime(1970, 1, 1, tzinfo=UTC),
    FUZZ_NOW,
    FUZZ_NOW - timedelta(microseconds=1),
    datetime(2030, 1, 1, tzinfo=NoOffset()),
)
zones = st.sampled_from(TIMEZONES)
future = st.builds(
    lambda delta, zone: (FUZZ_NOW + delta).astimezone(zone),
    st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=3650)),
    zones,
)
naive_or_odd = st.one_of(
    st.datetimes(),
    st.sampled_from(EXTREME_DATETIMES),
    st.datetimes(timezones=zones),  # anywhere in years 1..9999
    st.sampled_from(("2030-01-01T00:00:00+00:00", 1893456000, 1.5e9, date(2030, 1, 1))),
    not_none,
)
#: An expiry: None or in the future, else naive, past, extreme or not a datetime.
EXPIRES = Param(st.none() | future, naive_or_odd)
#: A moment to read at (``at``, ``as_of(time=)``, ``fetched_at``): any aware time from 1900 to 2200.
MOMENT = Param(
    st.none()
    | st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=zones),
    naive_or_odd,
)

plain_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
odd_keys = st.one_of(
    st.sampled_from(("", "\x00", "\ud800", " ", "a" * 300)),
    st.integers(),
    st.none(),
    st.booleans(),
    st.binary(max_size=4),
    st.tuples(st.integers()),
    st.floats(allow_nan=True),
    st.builds(Opaque),
)
bad_values = st.one_of(
    st.sampled_from((float("nan"), [1, {"a": float("nan")}], {"x": [float("nan")]})),
    st.sets(st.integers(), max_size=3),
    st.frozensets(st.text(max_size=3), max_size=3),
    st.tuples(plain_values, plain_values),
    st.dictionaries(odd_keys, plain_values, min_size=1, max_size=3),
    st.builds(
        nest,
        st.integers(min_value=33, max_value=400),
        st.sampled_from(("list", "dict", "tuple", "mixed")),
    ),
    st.builds(self_referencing_list),
    st.sampled_from((HUGE_TEXT, HUGE_BYTES, [HUGE_TEXT], {"k": HUGE_BYTES})),
    st.sampled_from((2**64, -(2**63) - 1, 2**200)),
    SURROGATE_TEXT,
    st.lists(SURROGATE_TEXT, min_size=1, max_size=2),
    st.dictionaries(SURROGATE_TEXT, st.integers(), min_size=1, max_size=2),
    st.sampled_from((FUZZ_NOW, datetime(2030, 1, 1), uuid.UUID(int=7), Decimal("1"))),
    st.sampled_from((bytearray(b"x"), memoryview(b"x"), MappingProxyType({}))),
    wrong_types.filter(lambda v: not isinstance(v, int | float | bytes | str | list | type(None))),
)
#: Claim values: plain msgpack-friendly values, or NaN, sets, tuples, deep nesting, huge…
VALUE = Param(plain_values, bad_values)
#: ``context`` / ``conditions``: small str-keyed dicts, or odd keys, odd values, not mappings.
MAPPING = Param(
    st.none()
    | st.just({"api_version": "v2"})
    | st.dictionaries(st.text(max_size=10), plain_values, max_size=4)
    | st.sampled_from((OrderedDict(api_version="v2"), MappingProxyType({"api_version": "v2"}))),
    st.one_of(
        st.dictionaries(odd_keys, plain_values | bad_values, min_size=1, max_size=3),
        st.dictionaries(st.text(max_size=4), bad_values, min_size=1, max_size=2),
        st.builds(OddMapping, st.dictionaries(odd_keys, plain_values, min_size=1, max_size=2)),
        st.sampled_from(
            ([("api_version", "v2")], "api_version=v2", {"k": HUGE_TEXT}, {HUGE_TEXT: 1})
        ),
        not_none,
    ),
)
#: ``parents`` / a new basis: lists of known ids, or not lists of ids at all.
PARENTS = Param(
    st.just(()) | st.lists(st.sampled_from(KNOWN_IDS), max_size=3),
    st.one_of(
        st.lists(RECORD.bad, min_size=1, max_size=3),
        st.sampled_from(KNOWN_IDS),
        st.builds(one_shot, st.lists(st.sampled_from(KNOWN_IDS), max_size=2)),
        st.sampled_from(({"E1": 1}, {"E1", "M1"}, [["E1"]], ["E1"] * 1000, [None], "E1,M1")),
        not_none,
    ),
)
CONTENT = Param(
    st.binary(max_size=64) | st.sampled_from((b"", E1_CONTENT, bytearray(b"ba"), memoryview(b"m"))),
    st.sampled_from((HUGE_BYTES, "text", [1, 2])) | adversarial_text | wrong_types,
)
ROLES = Param(
    st.lists(
        st.sampled_from([r.value for r in Role]) | st.sampled_from(list(Role)),
        min_size=1,
        max_size=3,
    ),
    st.one_of(
        st.lists(
            st.sampled_from(("READ", "root", "", " read", "read\n", "admin")) | wrong_types,
            min_size=1,
            max_size=3,
        ),
        st.sampled_from(("read", {"read": True}, {"read", "audit"}, [["read"]], ("read",), [])),
        st.builds(one_shot, st.lists(st.sampled_from(["read", "nope"]), max_size=2)),
        adversarial_text,
        not_none,
    ),
)
TOKEN = Param(
    st.sampled_from((Known("token:agent-1"), Known("token:reviewer"), Known("token:ghost"))),
    st.one_of(
        st.sampled_from((Known("token:revoked"), "", "plt_", "plt_not-a-token", "plt_" + "A" * 43)),
        adversarial_text,
        wrong_types,
    ),
)
POSITION = Param(
    st.sampled_from((Known("position"), 0)) | st.integers(min_value=0, max_value=60),
    st.one_of(
        st.sampled_from((Known("position+1"), -1, 2**63 - 1, 2**63, 2**64, 2**70, -(2**70))),
        st.floats(allow_nan=True),
        st.sampled_from(("1", b"1", Decimal(1), [1], True, False)),
    ),
)
HISTORY_BOUND = Param(st.none() | POSITION.valid, POSITION.bad)
DIGEST = Param(
    st.none()
    | st.sampled_from(
        (Known("digest"), Known("digest:object"), Known("digest:tampered"), Known("digest:ahead"))
    ),
    st.one_of(
        st.from_regex(r"-?[0-9]{1,22}:-?[0-9]{1,22}:[0-9a-fA-Fg]{0,66}", fullmatch=True),
        st.sampled_from(
            (
                *("", "::", "0:0:" + "0" * 64, f"{2**70}:1:" + "0" * 64),
                *("1:1:" + "\ud800" * 64, "1:1:" + "0" * 63 + "\x00"),
            )
        ),
        st.builds(
            LogDigest,
            size=st.integers(min_value=-5, max_value=2**70) | wrong_types,
            position=st.integers(min_value=-5, max_value=2**70) | wrong_types,
            root=st.text(max_size=70) | st.just("0" * 64) | wrong_types,
        ),
        adversarial_text,
        not_none,
    ),
)
EVENT_TYPES = (
    *("Proposed", "Accepted", "Rejected", "Revoked", "MarkedStale", "Revalidated"),
    *("Delivered", "CorrectionIssued"),
)
EVENT_TYPE = Param(
    st.none() | st.sampled_from(EVENT_TYPES),
    st.sampled_from(("proposed", "Proposed ", "Registered", "Granted", "Started", ""))
    | adversarial_text
    | not_none,
)
SNAPSHOT = Param(
    st.sampled_from((E1_SNAPSHOT, "sha256:" + "0" * 64)),
    st.one_of(
        st.sampled_from(
            (
                *("sha256:" + "0" * 63, "sha256:" + "Z" * 64, "sha256:" + "\ud800" * 64),
                *("sha256:" + "\x00" * 64, "SHA256:" + E1_SNAPSHOT[7:], E1_SNAPSHOT[7:]),
            )
        ),
        adversarial_text,
        wrong_types,
    ),
)
DELIVERY = Param(
    st.sampled_from((Known("delivery"), Known("delivery:stale"))),
    st.sampled_from(("d-nope", "d-" + "0" * 32)) | RECORD.valid | RECORD.bad,
)
#: A signing key for heads (``Ledger.signed_head``, ``Ledger.verify(heads=…)``).
FUZZ_KEY = ed25519.Ed25519PrivateKey.generate()
PRIVATE_KEY = Param(
    st.just(FUZZ_KEY),
    st.one_of(
        st.just(FUZZ_KEY.public_key()),
        st.sampled_from(("missing.key", "", "/", "key\x00", b"-----BEGIN PRIVATE KEY-----")),
        adversarial_text,
        wrong_types,
    ),
)
PUBLIC_KEY = Param(
    st.none() | st.just(FUZZ_KEY.public_key()) | st.just(FUZZ_KEY),
    st.sampled_from(("missing.pub", "", "key\x00", b"not pem")) | adversarial_text | not_none,
)
HEADS = Param(
    st.none() | st.just(()),
    st.sampled_from(("missing.jsonl", "", "heads\x00", b"{}", ({},), ("x",)))
    | adversarial_text
    | not_none,
)
RUN_ID = Param(
    valid_fresh_ids, st.sampled_from(("task-1", *NEAR_IDS)) | adversarial_text | not_none
)

URL_SEGMENTS = (
    *("missing-dir/ledger.db", "a-directory.db", "not-a-database.db", "ok.db?timeout=abc"),
    *("ok.db?timeout=-1", "ok.db?timeout=1e9", "a%00b.db", "%ud800.db", "\ud800.db", ""),
    "x" * 300 + ".db",
)
URL = Param(
    st.sampled_from(("memory:", "memory://")) | valid_fresh_ids.map(lambda s: TmpUrl(f"{s}.db")),
    st.one_of(
        st.sampled_from(URL_SEGMENTS).map(TmpUrl),
        # No "/" or "%" (unquoted to "/"): the file must stay in the scratch directory.
        st.text(st.characters(codec="utf-8", exclude_characters="/%"), max_size=12).map(
            lambda s: TmpUrl(f"{s}.db")
        ),
        st.sampled_from(
            (
                *("", " ", "memory", "memory:?x", "sqlite:", "sqlite://", "sqlite:///"),
                *(
                    "sqlite:////",
                    "sqlite://host/x.db",
                    "postgresql://",
                    "postgresql://127.0.0.1:1/",
                ),
                "postgresql://nobody@127.0.0.1:1/db?connect_timeout=1",
                "postgresql://nobody@127.0.0.1:1/db?connect_timeout=1&schema=Bad-Name",
                "postgresql://nobody@127.0.0.1:1/db?connect_timeout=1&pool_size=x",
                "postgresql://nobody@127.0.0.1:1/db?connect_timeout=1&nope=1",
                *("mysql://x/y", "file:///tmp/x.db", "http://x.test", "\x00", "\ud800", HUGE_TEXT),
            )
        ),
        # Not None: that means $PROVLEDGER_URL or ./provledger.db, outside the scratch directory.
        not_none,
    ),
)


def _progress(done: int, target: int) -> None:
    return None


PROGRESS = Param(st.sampled_from((None, _progress)), st.sampled_from((1, "bar", True, [])))


def _good_check(record: RecordView) -> str | None:
    return None


def _naive_clock() -> datetime:
    return datetime(2026, 1, 1)


def _text_clock() -> str:
    return "2026-01-01"


LEDGER_OPTIONS = {
    "max_value_bytes": Param(
        st.sampled_from((512, 1024 * 1024, 4 * 1024 * 1024)),
        st.sampled_from((0, -1, 2**70, 1.5, float("nan"), "1MiB")) | not_none,
    ),
    "acceptance_checks": Param(
        st.sampled_from(((), [_good_check], (_good_check,))),
        st.sampled_from(([None], [1], ["check"], "check", _good_check)) | not_none,
    ),
    "clock": Param(
        st.just(fixed_clock),
        st.sampled_from((_naive_clock, _text_clock, None, FUZZ_NOW, len)) | not_none,
    ),
    "retention": Param(
        st.none() | st.just({Kind.FACT: RetentionRule(max_lifetime=timedelta(days=1))}),
        st.one_of(
            st.sampled_from(
                (
                    *({"rumour": RetentionRule()}, {"fact": "not a rule"}, {"fact": None}),
                    *({1: RetentionRule()}, ["fact"], "fact"),
                    {"fact": RetentionRule(max_lifetime="1 day")},  # type: ignore[arg-type]
                    {"fact": RetentionRule(max_lifetime=timedelta(days=-1))},
                )
            ),
            not_none,
        ),
    ),
}


# -- arguments: each parameter valid, or exactly one bad, or any mix -----------------------


@st.composite
def kwargs_for(
    draw: st.DrawFn, required: Mapping[str, Param], optional: Mapping[str, Param]
) -> dict[str, Any]:
    """Keyword arguments: all well-formed, or one bad, or each bad by a coin toss.

    Shrinking goes towards "all well-formed", so a minimal failing example keeps
    only the bad argument that matters.
    """
    names = list(required) + [name for name in optional if draw(st.booleans())]
    params = {**required, **optional}
    mode = draw(st.sampled_from(("valid", "one-bad", "one-bad", "any")))
    if mode == "one-bad" and names:
        bad = {draw(st.sampled_from(names))}
    elif mode == "any":
        bad = {name for name in names if draw(st.booleans())}
    else:
        bad = set()
    return {name: draw(params[name].bad if name in bad else params[name].valid) for name in names}


_PROPOSE = {"scope": SCOPE, "claim_key": CLAIM, "value": VALUE, "kind": KIND}
_PROPOSE_OPTIONAL = {"parents": PARENTS, "expires": EXPIRES, "conditions": MAPPING, "id": NEW_ID}
_CAPTURE = {"scope": SCOPE, "uri": URI, "content": CONTENT}
_CAPTURE_OPTIONAL = {
    "fetched_at": MOMENT,
    "claim_key": Param(st.none() | CLAIM.valid, CLAIM.bad),
    "expires": EXPIRES,
    "conditions": MAPPING,
    "id": NEW_ID,
    "value": VALUE,
}
_READ = {"scope": SCOPE, "claim_key": CLAIM}
_READ_OPTIONAL = {"at": MOMENT, "context": MAPPING, "kinds": KINDS}

_batch_item = Param(
    kwargs_for(
        {
            "scope": Param(st.sampled_from(("proj-a", "proj-b")), SCOPE.bad),
            "claim_key": CLAIM,
            "value": VALUE,
            "kind": KIND,
        },
        {
            "parents": Param(
                st.lists(st.sampled_from(("E1", "M1", "B1", "B2")), max_size=2), PARENTS.bad
            ),
            "expires": EXPIRES,
            "conditions": MAPPING,
            "id": Param(st.sampled_from(("B1", "B2", "B3")), NEW_ID.bad),
        },
    ),
    st.one_of(
        st.dictionaries(odd_keys, plain_values, min_size=1, max_size=3),
        st.sampled_from(({}, {"scope": "proj-a"}, {"bogus": 1, "scope": "proj-a"})),
        not_none,
    ),
)
ITEMS = Param(
    st.lists(_batch_item.valid, max_size=3),
    st.one_of(
        st.lists(_batch_item.valid | _batch_item.bad, min_size=1, max_size=3),
        st.builds(one_shot, st.lists(_batch_item.valid, max_size=2)),
        st.sampled_from(({"scope": "proj-a"}, "items")),
        adversarial_text,
        not_none,
    ),
)


# -- the table of public callables ----------------------------------------------------


@dataclass
class Args:
    """One call's arguments: who makes it, the keyword arguments, and for run calls
    the record ids the run observes first."""

    who: str
    kwargs: dict[str, Any]
    observe: tuple[str, ...] = ()

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in self.kwargs.items())
        pre = f" after observing {list(self.observe)}" if self.observe else ""
        return f"[{self.who}]({shown}){pre}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # hypothesis prints dataclasses field by field; a 1 MiB argument must stay short.
        printer.text(repr(self))


@dataclass(frozen=True)
class CallSpec:
    """One public callable: how to call it, who calls it, and its parameters.

    ``receivers`` name who calls it: ``class`` (``Ledger`` itself), ``ledger``,
    ``admin``, a session name (``agent``, ``reviewer``, ``outsider``, ``solo``,
    ``probe``), ``asof`` (the reviewer as of the newest position), ``revoked`` (a
    session whose token was revoked), ``run:<session>`` (an open run) or
    ``run-unopened`` (a run never entered). ``writes``: a success may append
    events. ``new_ids``: keyword arguments naming something the call creates.
    ``invoke``: how to call it when that is more than ``receiver.method(**kwargs)``.
    """

    name: str
    group: str
    receivers: tuple[str, ...]
    required: Mapping[str, Param] = field(default_factory=dict)
    optional: Mapping[str, Param] = field(default_factory=dict)
    writes: bool = False
    new_ids: tuple[str, ...] = ()
    invoke: Callable[[Any, dict[str, Any]], Any] | None = None

    @property
    def method(self) -> str:
        return self.name.rsplit(".", 1)[1]

    def args(self) -> st.SearchStrategy[Args]:
        """Arguments for this callable, valid and adversarial mixed."""
        observe = (
            st.lists(st.sampled_from(KNOWN_IDS), max_size=2).map(tuple)
            if self.name.startswith("RunContext.")
            else st.just(())
        )
        return st.builds(
            Args,
            who=st.sampled_from(self.receivers),
            kwargs=kwargs_for(self.required, self.optional),
            observe=observe,
        )

    def __repr__(self) -> str:
        return f"CallSpec({self.name!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def call(self, receiver: Any, kwargs: dict[str, Any]) -> Any:
        if self.invoke is not None:
            return self.invoke(receiver, kwargs)
        return getattr(receiver, self.method)(**kwargs)


class OpenedLedgerBroke(Exception):
    """``Ledger.open`` accepted a configuration the ledger then crashes on."""


class AsOfSessionBroke(Exception):
    """``Session.as_of`` returned a session whose reads then crash."""


def _open_and_use(cls: Any, kwargs: dict[str, Any]) -> Ledger:
    """``Ledger.open``, then a short life on the opened ledger.

    Its ``LedgerError`` s end that life quietly (a tiny ``max_value_bytes`` refuses
    every value); anything else raises ``OpenedLedgerBroke``.
    """
    led: Ledger = cls.open(**kwargs)
    try:
        admin = led.admin()
        steps: tuple[tuple[str, Callable[[], Any]], ...] = (
            ("grant", lambda: admin.grant("u1", scope="s", roles=["propose", "read"])),
            ("grant", lambda: admin.grant("u2", scope="s", roles=["approve", "read", "audit"])),
            ("issue_token", lambda: admin.issue_token("u1")),
            (
                "propose",
                lambda: led.authenticate(admin.issue_token("u1")).propose(
                    scope="s", claim_key="k", value=1, kind="fact", id="A1"
                ),
            ),
            ("accept", lambda: led.authenticate(admin.issue_token("u2")).accept("A1")),
            ("read", lambda: led.authenticate(admin.issue_token("u2")).read("s", "k")),
            ("audit", lambda: led.authenticate(admin.issue_token("u2")).audit("A1")),
            ("rebuild", led.rebuild),
        )
        for name, step in steps:
            try:
                step()
            except LedgerError:
                break
            except Exception as exc:
                raise OpenedLedgerBroke(
                    f"after Ledger.open, {name} raised {_describe(exc)}"
                ) from exc
    finally:
        led.close()
    return led


def _as_of_and_read(session: Session, kwargs: dict[str, Any]) -> Session:
    """``Session.as_of``, then the reads an as-of session is for (LedgerErrors tolerated)."""
    past = session.as_of(**kwargs)
    for name, read in (
        ("read", lambda: past.read("proj-a", "claim.m1")),
        ("explain", lambda: past.explain("proj-a", "claim.r1")),
        ("get", lambda: past.get("RS")),
        ("audit", lambda: past.audit("M1")),
        ("corrections_due", past.corrections_due),
        ("history", lambda: past.history(record="M1")),
    ):
        try:
            read()
        except LedgerError:
            pass
        except Exception as exc:
            raise AsOfSessionBroke(f"as_of succeeded, then {name} raised {_describe(exc)}") from exc
    return past


def _enter_and_leave(session: Session, kwargs: dict[str, Any]) -> str:
    with session.run(**kwargs) as run:
        return run.run_id


SESSIONS = ("agent", "agent", "reviewer", "solo", "outsider", "asof", "revoked")
APPROVERS = ("reviewer", "reviewer", "reviewer", "solo", "agent", "asof", "revoked")
READERS = ("agent", "reviewer", "reviewer", "outsider", "probe", "asof", "revoked")
RUNS = ("run:agent", "run:agent", "run:solo", "run-unopened")
_RECORD = {"record_id": RECORD}
_RECORDS_OPTIONAL = {
    "status": Param(
        st.none() | st.sampled_from(list(Status)) | st.sampled_from([x.value for x in Status]),
        st.sampled_from(("accepted", "LOST", "", " STALE")) | not_none,
    ),
    "validity": Param(
        st.none() | st.sampled_from([v.value for v in Validity]),
        st.sampled_from(("valid", "MAYBE", "")) | not_none,
    ),
    "kind": Param(st.none() | KIND.valid, KIND.bad.filter(lambda v: v is not None)),
    "claim_prefix": Param(
        st.none() | st.sampled_from(("claim.", "source:", "", "k")),
        adversarial_text.filter(lambda v: isinstance(v, str) and bool(v.strip()))
        | wrong_types.filter(lambda v: v is not None),
    ),
    "limit": Param(
        st.integers(min_value=1, max_value=1000),
        st.sampled_from((0, -1, 1001, True, 2.5, "10")),
    ),
    "after": Param(st.none() | RECORD.valid, RECORD.bad.filter(lambda v: v is not None)),
}

CALLS: tuple[CallSpec, ...] = (
    # -- lifecycle ---------------------------------------------------------------------
    CallSpec(
        "Ledger.open", "lifecycle", ("class",), {"url": URL}, LEDGER_OPTIONS, invoke=_open_and_use
    ),
    CallSpec(
        "Ledger.verify",
        "lifecycle",
        ("ledger",),
        optional={"against": DIGEST, "heads": HEADS, "public_key": PUBLIC_KEY},
    ),
    CallSpec("Ledger.signed_head", "lifecycle", ("ledger",), {"private_key": PRIVATE_KEY}),
    CallSpec("Ledger.rebuild", "lifecycle", ("ledger",), optional={"progress": PROGRESS}),
    # -- access ------------------------------------------------------------------------
    CallSpec("Ledger.authenticate", "access", ("ledger",), {"token": TOKEN}),
    CallSpec(
        "Admin.grant",
        "access",
        ("admin",),
        {"subject": SUBJECT, "scope": SCOPE, "roles": ROLES},
        writes=True,
        new_ids=("subject", "scope"),
    ),
    CallSpec(
        "Admin.revoke_grant",
        "access",
        ("admin",),
        {"subject": SUBJECT, "scope": SCOPE},
        {"roles": Param(st.none() | ROLES.valid, ROLES.bad)},
        writes=True,
    ),
    CallSpec(
        "Admin.issue_token",
        "access",
        ("admin",),
        {"subject": SUBJECT},
        {"expires": EXPIRES},
        writes=True,
        new_ids=("subject",),
    ),
    CallSpec(
        "Admin.revoke_token",
        "access",
        ("admin",),
        {"token": TOKEN},
        {
            "fingerprint": Param(
                st.none(), st.sampled_from(("0123456789ab", "zz", "")) | wrong_types
            )
        },
        writes=True,
    ),
    CallSpec("Admin.revoke_tokens_of", "access", ("admin",), {"subject": SUBJECT}, writes=True),
    CallSpec(
        "Admin.tokens",
        "access",
        ("admin",),
        optional={"subject": Param(st.none() | SUBJECT.valid, SUBJECT.bad)},
    ),
    CallSpec(
        "Admin.issue_admin_token", "access", ("admin",), optional={"expires": EXPIRES}, writes=True
    ),
    # Principals' tokens are not admin tokens: refused like bad ones.
    CallSpec(
        "Ledger.admin",
        "access",
        ("ledger",),
        optional={"token": Param(st.none(), st.one_of(TOKEN.valid, TOKEN.bad))},
    ),
    CallSpec(
        "Admin.erase_snapshot",
        "access",
        ("admin",),
        {"ref": SNAPSHOT, "reason": REASON},
        writes=True,
    ),
    CallSpec(
        "Admin.access_history",
        "access",
        ("admin",),
        optional={
            "subject": Param(st.none() | SUBJECT.valid, SUBJECT.bad),
            "scope": Param(st.none() | SCOPE.valid, SCOPE.bad),
        },
    ),
    # -- proposals ----------------------------------------------------------------------
    CallSpec(
        "Session.capture",
        "propose",
        SESSIONS,
        _CAPTURE,
        _CAPTURE_OPTIONAL,
        writes=True,
        new_ids=("id", "scope"),
    ),
    CallSpec(
        "Session.propose",
        "propose",
        SESSIONS,
        _PROPOSE,
        _PROPOSE_OPTIONAL,
        writes=True,
        new_ids=("id", "scope"),
    ),
    CallSpec("Session.propose_many", "propose", SESSIONS, {"items": ITEMS}, writes=True),
    # -- transitions ----------------------------------------------------------------------
    CallSpec("Session.accept", "approve", APPROVERS, _RECORD, {"note": NOTE}, writes=True),
    CallSpec("Session.reject", "approve", APPROVERS, {**_RECORD, "reason": REASON}, writes=True),
    CallSpec("Session.revoke", "approve", APPROVERS, {**_RECORD, "reason": REASON}, writes=True),
    CallSpec("Session.preview_revoke", "approve", APPROVERS, _RECORD),
    CallSpec(
        "Session.revalidate",
        "approve",
        APPROVERS,
        _RECORD,
        {"note": NOTE, "parents": Param(st.none() | PARENTS.valid, PARENTS.bad)},
        writes=True,
    ),
    # -- delivery --------------------------------------------------------------------------
    CallSpec(
        "Session.deliver",
        "deliver",
        APPROVERS,
        {**_RECORD, "recipient": RECIPIENT},
        {"channel": CHANNEL},
        writes=True,
    ),
    CallSpec(
        "Session.issue_correction",
        "deliver",
        APPROVERS,
        {"delivery_id": DELIVERY, "note": NOTE},
        {"replacement": Param(st.none() | RECORD.valid, RECORD.bad)},
        writes=True,
    ),
    CallSpec(
        "Session.corrections_due",
        "deliver",
        READERS,
        {},
        {"record_id": Param(st.none() | RECORD.valid, RECORD.bad)},
    ),
    # -- reads ---------------------------------------------------------------------------------
    CallSpec("Session.read", "read", READERS, _READ, _READ_OPTIONAL),
    CallSpec("Session.explain", "read", READERS, _READ, _READ_OPTIONAL),
    CallSpec("Session.get", "read", READERS, _RECORD),
    CallSpec("Session.records", "read", READERS, {"scope": SCOPE}, _RECORDS_OPTIONAL),
    CallSpec("Session.grants", "read", READERS),
    CallSpec("Session.audit", "read", READERS, _RECORD),
    CallSpec("Session.prove", "read", READERS, _RECORD),
    CallSpec("Session.snapshot", "read", READERS, {"ref": SNAPSHOT}),
    CallSpec(
        "Session.history",
        "read",
        READERS,
        optional={
            "record": Param(st.none() | RECORD.valid, RECORD.bad),
            "type": EVENT_TYPE,
            "start": HISTORY_BOUND,
            "stop": HISTORY_BOUND,
            "limit": Param(
                st.none() | st.integers(min_value=1, max_value=50),
                st.sampled_from((0, -1, True, 2.5, "10", 10**30)),
            ),
        },
    ),
    CallSpec(
        "Session.iter_history",
        "read",
        READERS,
        optional={
            "record": Param(st.none() | RECORD.valid, RECORD.bad),
            "type": EVENT_TYPE,
            "start": HISTORY_BOUND,
            "stop": HISTORY_BOUND,
        },
        # Every event asked for: its refusals come with the first.
        invoke=lambda session, kwargs: tuple(session.iter_history(**kwargs)),
    ),
    CallSpec(
        "Session.as_of",
        "read",
        READERS,
        optional={"position": POSITION, "time": MOMENT},
        invoke=_as_of_and_read,
    ),
    CallSpec("Session.sync", "read", READERS),
    # -- runs ------------------------------------------------------------------------------------
    CallSpec(
        "Session.run",
        "run",
        SESSIONS,
        {"run_id": RUN_ID},
        writes=True,
        new_ids=("run_id",),
        invoke=_enter_and_leave,
    ),
    CallSpec("RunContext.observe", "run", RUNS, _RECORD, writes=True),
    CallSpec("RunContext.read", "run", RUNS, _READ, _READ_OPTIONAL, writes=True),
    CallSpec("RunContext.get", "run", RUNS, _RECORD, writes=True),
    CallSpec("RunContext.explain", "run", RUNS, _READ, _READ_OPTIONAL, writes=True),
    CallSpec("RunContext.records", "run", RUNS, {"scope": SCOPE}, _RECORDS_OPTIONAL, writes=True),
    CallSpec(
        "RunContext.propose",
        "run",
        RUNS,
        _PROPOSE,
        _PROPOSE_OPTIONAL,
        writes=True,
        new_ids=("id", "scope"),
    ),
    CallSpec(
        "RunContext.capture",
        "run",
        RUNS,
        _CAPTURE,
        _CAPTURE_OPTIONAL,
        writes=True,
        new_ids=("id", "scope"),
    ),
)
CALLS_BY_NAME = {spec.name: spec for spec in CALLS}
GROUPS = tuple(dict.fromkeys(spec.group for spec in CALLS))


def calls_in(group: str) -> tuple[CallSpec, ...]:
    """The callables of one group (``lifecycle``, ``access``, ``propose``, …)."""
    return tuple(spec for spec in CALLS if spec.group == group)


def call_and_args(specs: tuple[CallSpec, ...] = CALLS) -> st.SearchStrategy[tuple[CallSpec, Args]]:
    """A callable from ``specs`` and arguments for it."""
    return st.sampled_from(specs).flatmap(lambda spec: st.tuples(st.just(spec), spec.args()))


# -- the check ---------------------------------------------------------------------------


class FuzzFailure(AssertionError):
    """The contract was broken: the message names the callable, the arguments,
    what happened and where."""

    def __init__(self, spec: CallSpec, args: Args, problem: str, where: str = "") -> None:
        self.spec, self.call_args, self.problem, self.where = spec, args, problem, where
        super().__init__(f"{spec.name}{args!r}: {problem}" + (f"\n  at {where}" if where else ""))

    @property
    def signature(self) -> str:
        """What distinguishes this bug from others: callable, problem class, place."""
        head = self.problem.split(":", 1)[0]
        return f"{self.spec.name} | {head} | {self.where.split(' <- ')[0]}"


@dataclass(frozen=True)
class Outcome:
    """What one fuzzed call did: ``succeeded`` (with ``value``) or ``refused`` (``error``)."""

    status: str
    value: Any = None
    error: LedgerError | None = None


_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlevel = 3
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = _repr.maxfrozenset = 4


def _short(value: Any) -> str:
    try:
        text = _repr.repr(value)
    except Exception as exc:  # a repr that raises is still worth reporting
        text = f"<unrepresentable {type(value).__name__}: {exc!r}>"
    if isinstance(value, str | bytes) and len(value) > 60:
        text += f" (len {len(value)})"
    return text


def _describe(exc: BaseException) -> str:
    """``module.Class: 'message'`` with the message cut at 300 characters."""
    try:
        text = str(exc)
    except Exception:
        text = "<str() raised>"
    if len(text) > 300:
        text = text[:300] + f"… ({len(text)} chars)"
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {text!r}"


def _where(exc: BaseException) -> str:
    """The innermost frames of ``exc``'s traceback, innermost first."""
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, OpenedLedgerBroke | AsOfSessionBroke) and exc.__cause__ is not None:
        frames = traceback.extract_tb(exc.__cause__.__traceback__)
    shown = []
    for frame in reversed(frames[-4:]):
        path = frame.filename
        for root in ("/ledger/", "/projections/", "/site-packages/", "/tests/"):
            if root in path:
                path = root.strip("/") + "/" + path.split(root, 1)[1]
                break
        shown.append(f"{path}:{frame.lineno} {frame.name}")
    return " <- ".join(shown)


@contextmanager
def _receiver(
    who: str, ledger: Ledger, sessions: Mapping[str, Session], observe: tuple[str, ...]
) -> Iterator[Any]:
    if who == "class":
        yield Ledger
    elif who == "ledger":
        yield ledger
    elif who == "admin":
        yield ledger.admin()
    elif who == "asof":
        yield sessions["reviewer"].as_of(position=ledger.position)
    elif who == "revoked":
        admin = ledger.admin()
        token = admin.issue_token("agent-1")
        session = ledger.authenticate(token)
        admin.revoke_token(token)
        yield session
    elif who == "run-unopened":
        yield sessions["agent"].run(f"fuzz-{uuid.uuid4().hex[:12]}")
    elif who.startswith("run:"):
        with sessions[who[4:]].run(f"fuzz-{uuid.uuid4().hex[:12]}") as run:
            for rid in observe:
                with suppress(LedgerError):
                    run.observe(rid)
            yield run
    else:
        yield sessions[who]


def fuzz_once(
    ledger: Ledger,
    sessions: Mapping[str, Session],
    call_spec: CallSpec,
    args: Args,
    fault: Callable[[], AbstractContextManager[Any]] | None = None,
) -> Outcome:
    """Make one call and check the bad-input contract; raise ``FuzzFailure`` if broken.

    ``sessions`` are those :func:`seed` returns (``probe`` must read, audit and
    deliver in every scope the calls can write to). The checks:

    * the call succeeds or raises a ``LedgerError`` subclass, whose ``str`` works;
    * when it raises, ``ledger.position`` and ``ledger.views_digest()`` are unchanged;
    * a read (``writes=False``) changes neither, even when it succeeds;
    * ids a successful call creates match the SPEC pattern in full;
    * after a successful write the records it names get, audit and explain without
      ``CorruptEventError`` or any non-``LedgerError``, and the views rebuilt from
      the log equal the live ones.

    ``fault``, if given, is entered around the call itself (a full disk, server
    sessions ended): the same contract must hold, and the checks run after it ends
    (see ``_storage_fault_after_a_command`` for what may move the log then).
    """
    if args.who.startswith("run:"):
        # Opening the run is part of the call: a principal whose grants an earlier
        # call withdrew is refused there, which must change nothing either.
        position, views = ledger.position, ledger.views_digest()
        try:
            with _receiver(args.who, ledger, sessions, ()):
                pass
        except LedgerError as exc:
            changed = _changes(ledger, position, views)
            if changed:
                raise FuzzFailure(
                    call_spec, args, f"run refused with {_describe(exc)} but {changed}"
                ) from exc
            return Outcome("refused", error=exc)
    with _receiver(args.who, ledger, sessions, args.observe) as receiver:
        kwargs = _resolve(args.kwargs, ledger, sessions)
        position, views = ledger.position, ledger.views_digest()
        try:
            with fault() if fault is not None else nullcontext():
                value = call_spec.call(receiver, kwargs)
        except LedgerError as exc:
            try:
                str(exc), repr(exc)
            except Exception as inner:
                raise FuzzFailure(
                    call_spec, args, f"{type(exc).__name__} cannot be shown: {_describe(inner)}"
                ) from inner
            changed = _changes(ledger, position, views)
            if changed and not _storage_fault_after_a_command(call_spec, exc, fault):
                raise FuzzFailure(
                    call_spec, args, f"refused with {_describe(exc)} but {changed}", _where(exc)
                ) from exc
            return Outcome("refused", error=exc)
        except Exception as exc:
            raise FuzzFailure(call_spec, args, f"raised {_describe(exc)}", _where(exc)) from exc
        if not call_spec.writes:
            changed = _changes(ledger, position, views)
            if changed:
                raise FuzzFailure(call_spec, args, f"a read, yet {changed}")
    _check_success(ledger, sessions, call_spec, args, kwargs, value, position)
    return Outcome("succeeded", value=value)


#: Calls that are two commands: a storage fault may refuse the second after the first
#: was applied (each command is still whole).
COMPOUND_CALLS = {"Session.run": "enters a run (one command) and leaves it (another)"}


def _storage_fault_after_a_command(
    spec: CallSpec, exc: LedgerError, fault: Callable[[], AbstractContextManager[Any]] | None
) -> bool:
    """Whether a refusal may leave the log moved: the connection was lost while
    committing (the message says the command may have been applied), or a storage
    fault refused the second command of a compound call."""
    if isinstance(exc, ConnectionLostError) and "may have been applied" in str(exc):
        return True
    return fault is not None and spec.name in COMPOUND_CALLS and isinstance(exc, StorageError)


def _changes(ledger: Ledger, position: int, views: str) -> str:
    now_position = ledger.position
    if now_position != position:
        return f"the log moved from position {position} to {now_position}"
    if ledger.views_digest() != views:
        return "the views changed"
    return ""


def _check_success(
    ledger: Ledger,
    sessions: Mapping[str, Session],
    spec: CallSpec,
    args: Args,
    kwargs: dict[str, Any],
    value: Any,
    position: int,
) -> None:
    created = [kwargs[k] for k in spec.new_ids if k in kwargs and kwargs[k] is not None]
    if spec.name.endswith(("propose", "capture")):
        created.append(value)
    elif spec.name == "Session.propose_many":
        created.extend(value)
        if isinstance(kwargs["items"], list):
            created.extend(i["scope"] for i in kwargs["items"])
    for name in created:
        if not isinstance(name, str) or not SPEC_ID.fullmatch(name):
            raise FuzzFailure(
                spec, args, f"accepted {_short(name)}, which the SPEC id pattern refuses"
            )
    if not spec.writes or ledger.position == position:
        return
    probe = sessions["probe"]
    touched = [v for v in (value, kwargs.get("record_id"), kwargs.get("replacement")) if v]
    if isinstance(value, list):
        touched.extend(value)
    record_reads: tuple[tuple[str, Callable[[str], Any]], ...] = (
        ("get", probe.get),
        ("audit", probe.audit),
        ("history", lambda rid: probe.history(record=rid)),
    )
    for rid in dict.fromkeys(t for t in touched if isinstance(t, str)):
        for step, read in record_reads:
            try:
                view = read(rid)
            except CorruptEventError as exc:
                raise FuzzFailure(
                    spec, args, f"succeeded, then {step}({rid!r}) raised {_describe(exc)}"
                ) from exc
            except LedgerError:
                break  # not a record (a delivery id), or not one the probe may see
            except Exception as exc:
                raise FuzzFailure(
                    spec,
                    args,
                    f"succeeded, then {step}({rid!r}) raised {_describe(exc)}",
                    _where(exc),
                ) from exc
            if isinstance(view, RecordView):
                _probe_claim(spec, args, probe, view)
    ledger_reads: tuple[tuple[str, Callable[[], Any]], ...] = (
        ("corrections_due", probe.corrections_due),
        ("access_history", ledger.admin().access_history),
        ("rebuild", ledger.rebuild),
    )
    for step, read_all in ledger_reads:
        try:
            result = read_all()
        except Exception as exc:
            raise FuzzFailure(
                spec, args, f"succeeded, then {step}() raised {_describe(exc)}", _where(exc)
            ) from exc
        if isinstance(result, RebuildReport) and result.digest_before != result.digest_after:
            raise FuzzFailure(spec, args, "succeeded, but the rebuilt views differ from the live")


def _probe_claim(spec: CallSpec, args: Args, probe: Session, view: RecordView) -> None:
    try:
        probe.explain(view.scope, view.claim_key)
        probe.read(view.scope, view.claim_key, context=view.conditions)
    except CorruptEventError as exc:
        raise FuzzFailure(
            spec, args, f"succeeded, then reading its claim raised {_describe(exc)}"
        ) from exc
    except LedgerError:
        pass
    except Exception as exc:
        raise FuzzFailure(
            spec,
            args,
            f"succeeded, then reading {view.claim_key!r} raised {_describe(exc)}",
            _where(exc),
        ) from exc


# -- the campaign ----------------------------------------------------------------------------


def run_campaign(examples: int, backend: str, seed: int) -> dict[str, Any]:
    """Fuzz every public callable with ``examples`` generated calls; never raises on a bug.

    Args:
        examples: how many calls to make (spread over :data:`CALLS`).
        backend: ``memory`` or ``sqlite`` (a file in a scratch directory).
        seed: the hypothesis seed; the same seed draws the same calls.

    Returns a JSON-friendly dict: ``backend``, ``seed``, ``examples`` (calls made),
    ``seconds``, ``tried`` / ``succeeded`` / ``refused`` / ``failed`` totals,
    ``per_callable`` (``{name: {"tried", "succeeded", "refused", "failed"}}``),
    ``refusals`` (count per ``LedgerError`` class), ``failures`` (count per
    distinct failure signature), ``failure_examples`` (the first message of each
    signature, with its arguments), and ``arena_resets``.
    """
    per: dict[str, Counter[str]] = {spec.name: Counter() for spec in CALLS}
    refusals: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    first: dict[str, str] = {}
    arena = Arena(backend, reset_every=100)
    started = time.perf_counter()

    @hypothesis_seed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        derandomize=False,
    )
    @given(drawn=call_and_args())
    def campaign(drawn: tuple[CallSpec, Args]) -> None:
        spec, args = drawn
        counts = per[spec.name]
        counts["tried"] += 1
        ledger, sessions = arena.fresh()
        try:
            outcome = fuzz_once(ledger, sessions, spec, args)
        except FuzzFailure as failure:
            counts["failed"] += 1
            failures[failure.signature] += 1
            first.setdefault(failure.signature, str(failure))
            arena.reset()
            return
        except Exception as exc:  # the world itself broke (e.g. seeding a receiver)
            counts["failed"] += 1
            signature = f"{spec.name} | harness {type(exc).__name__} | {_where(exc)}"
            failures[signature] += 1
            first.setdefault(signature, f"{spec.name}{args!r}: {_describe(exc)}")
            arena.reset()
            return
        counts[outcome.status] += 1
        if outcome.error is not None:
            refusals[type(outcome.error).__name__] += 1

    try:
        campaign()
    finally:
        arena.close()
    totals = Counter[str]()
    for counts in per.values():
        totals.update(counts)
    return {
        "backend": backend,
        "seed": seed,
        "examples": totals["tried"],
        "seconds": round(time.perf_counter() - started, 1),
        "tried": totals["tried"],
        "succeeded": totals["succeeded"],
        "refused": totals["refused"],
        "failed": totals["failed"],
        "per_callable": {
            name: {k: c[k] for k in ("tried", "succeeded", "refused", "failed")}
            for name, c in per.items()
        },
        "refusals": dict(refusals.most_common()),
        "failures": dict(failures.most_common()),
        "failure_examples": first,
        "arena_resets": arena.resets,
    }


if __name__ == "__main__":  # pragma: no cover - a manual soak: python -m tests.fuzz N backend seed
    import json
    import sys

    n, where, s = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    print(json.dumps(run_campaign(n, where, s), indent=2, default=str))
