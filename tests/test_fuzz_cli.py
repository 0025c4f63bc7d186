"""Bad input on the command line, by fuzzing (the CLI side of ``test_fuzz.py``).

Hypothesis builds argument lists for every ``provledger`` command (enumerated from
``ledger.cli.main``, ``token issue|revoke`` and ``as-of <read command>`` included):
the command's real option names with adversarial values (empty, huge, control
characters, NUL, lone surrogates, deep or invalid JSON, NaN, naive and malformed
datetimes, huge integers, unknown ids, missing files), unknown options, missing
required options, and the seeded world's real tokens and ids so that some calls
get past validation. Each call runs through click's test runner on a fresh copy of
a seeded SQLite ledger, with ``$PROVLEDGER_URL`` set and ``$PROVLEDGER_TOKEN``
unset, and must keep the CLI's contract:

* it exits 0, 1 or 2, and nothing but ``SystemExit`` escapes (no traceback);
* exit 1 prints exactly one line on stderr, starting with ``error: ``;
* exit 2 prints click's usage message on stderr (its parser reports a flag given a
  value, ``--json=yes``, or an option missing its value with the ``Error:`` line alone);
* a refused command (exit 1 or 2), and any read command, leaves the log position
  and the views digest as they were;
* a write command that succeeds leaves a ledger that opens, verifies and whose
  views rebuilt from the log equal the live ones.

Click's test runner writes stdout as strict UTF-8 and stderr with
``backslashreplace``, as Python does for a real process under a UTF-8 locale other
than C/POSIX (where stdout would use ``surrogateescape`` instead).

``FOUND`` keeps each violation the fuzz has found as a plain example: each fails
until the CLI is fixed. :func:`run_campaign` runs a long seeded campaign for the
soak script.
"""

from __future__ import annotations

import contextlib
import json
import re
import reprlib
import shutil
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from ledger import Ledger
from ledger.bundle import write_bundle
from ledger.cli import main
from ledger.cli.options import DateTimeType, JSONType
from ledger.heads import generate_key, publish_head

from .fuzz import (
    CONTROL_TEXT,
    EVENT_TYPES,
    FUZZ_NOW,
    HUGE_BYTES,
    KNOWN_CLAIMS,
    KNOWN_IDS,
    KNOWN_SUBJECTS,
    NEAR_IDS,
    SCOPES,
    TIMEZONES,
    adversarial_text,
    fixed_clock,
    seed_tokens,
    valid_fresh_ids,
)

# -- every command ------------------------------------------------------------------------

CommandPath = tuple[str, ...]


def command_paths(group: click.Group = main, prefix: CommandPath = ()) -> list[CommandPath]:
    """Every command under ``group``, groups included, ``()`` being ``provledger`` itself."""
    ctx = click.Context(group)
    paths = [prefix] if not prefix else []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        paths.append((*prefix, name))
        if isinstance(command, click.Group):
            paths.extend(p for p in command_paths(command, (*prefix, name)) if p)
    return paths


def commands_on(path: CommandPath) -> list[tuple[str, click.Command]]:
    """The commands a path goes through, outermost first (``provledger`` itself first)."""
    chain: list[tuple[str, click.Command]] = [("provledger", main)]
    for name in path:
        group = chain[-1][1]
        assert isinstance(group, click.Group)
        command = group.get_command(click.Context(group), name)
        assert command is not None, path
        chain.append((name, command))
    return chain


def name_of(path: CommandPath) -> str:
    return " ".join(path) or "provledger"


#: Commands that serve until stopped are not fuzzed here (tests/test_mcp.py and
#: tests/test_serve_*.py cover them).
SERVERS = frozenset({"mcp", "serve"})
PATHS = [p for p in command_paths() if name_of(p) not in SERVERS]

#: Commands that may append to the log (or build a ledger) when they succeed.
WRITES = frozenset(
    {
        *("grant", "token issue", "token revoke", "capture", "propose", "accept", "reject"),
        *("revoke", "revalidate", "deliver", "correct", "demo", "erase-snapshot"),
        # init issues the first admin token of a ledger that has none.
        *("init", "revoke-grant", "run start", "run observe", "run end"),
    }
)
_READ_COMMANDS = (
    *("read", "get", "explain", "audit", "history", "corrections", "export", "graph"),
    "records",
)
#: Commands that must leave the log and the views as they were even when they succeed
#: (``rebuild`` replays the log into identical views).
READS = frozenset(
    {
        *("provledger", "token", "token list", "as-of", "digest", "verify", "prove", "stats"),
        "grants",
        *("run", "snapshot"),
        # Keys, heads and bundles are files outside the ledger; the log stays as it was.
        *("keygen", "head", "bundle", "verify-bundle"),
        "rebuild",
        # Scrubbing the files of erased bytes writes nothing to the log; a backup
        # writes a new file beside it, a copy a new database elsewhere.
        "scrub-erased",
        "backup",
        "copy",
        *_READ_COMMANDS,
        *(f"as-of {name}" for name in _READ_COMMANDS),
    }
)


def _takes_token(path: CommandPath) -> bool:
    return any(p.name == "token" for p in commands_on(path)[-1][1].params)


# -- the seeded world ---------------------------------------------------------------------

#: ``<<name>>`` in an argument is replaced, at call time, by the world's ``name``.
MARKER = re.compile(r"<<([A-Za-z0-9:+]+)>>")
TOKENS = tuple(f"<<token:{n}>>" for n in ("agent", "reviewer", "outsider", "solo", "probe"))


@dataclass(frozen=True)
class World:
    """A seeded SQLite ledger (the ``tests/fuzz.py`` world) every call gets a copy of.

    ``refs`` fills the ``<<…>>`` markers: ``token:<agent|reviewer|outsider|solo|
    probe|revoked>``, ``admin`` (an admin token), ``delivery:R1`` / ``delivery:RS``
    (RS is STALE: a correction is due), ``digest`` / ``digest:tampered`` /
    ``digest:ahead``, ``position`` / ``position+1``; ``url`` is the copy's own URL.
    """

    directory: Path
    template: Path
    refs: dict[str, str]
    position: int
    views: str

    @classmethod
    def seed(cls, directory: Path) -> World:
        template = directory / "template.db"
        with Ledger.open(f"sqlite:///{template}", clock=fixed_clock) as led:
            tokens = seed_tokens(led)
            admin = led.admin()
            revoked = admin.issue_token("agent-1")
            admin.revoke_token(revoked)
            probe = led.authenticate(tokens["probe"])
            refs = {f"token:{name}": token for name, token in tokens.items()}
            refs["token:revoked"] = revoked
            refs["admin"] = admin.issue_admin_token()
            for rid in ("R1", "RS"):
                refs[f"delivery:{rid}"] = probe.get(rid).deliveries[0].delivery_id
            digest = led.digest()
            flipped = ("1" if digest.root[0] == "0" else "0") + digest.root[1:]
            refs["digest"] = str(digest)
            refs["digest:tampered"] = f"{digest.size}:{digest.position}:{flipped}"
            refs["digest:ahead"] = f"{digest.size + 1}:{digest.position + 1}:{digest.root}"
            refs["position"] = str(led.position)
            refs["position+1"] = str(led.position + 1)
            # A signing key, a heads file and a bundle beside the template (outside
            # every example's directory), for keygen/head/verify/bundle/verify-bundle.
            key = directory / "ledger-key"
            generate_key(key)
            publish_head(led, key, directory / "heads.jsonl")
            write_bundle(probe, "R1", key, directory / "r1.zip")
            refs["key"] = str(key)
            refs["heads"] = str(directory / "heads.jsonl")
            refs["bundle"] = str(directory / "r1.zip")
            refs["snapshot:E1"] = str((probe.get("E1").evidence or {})["snapshot_ref"])
            position, views = led.position, led.views_digest()
        return cls(directory, template, refs, position, views)

    @contextlib.contextmanager
    def example(self) -> Iterator[tuple[Path, str]]:
        """A scratch directory holding a copy of the ledger (``ledger.db``), a document
        (``doc.txt``), a file that is not a database and a directory; and the copy's URL."""
        where = Path(tempfile.mkdtemp(prefix="example-", dir=self.directory))
        try:
            for suffix in ("", "-wal", "-shm"):
                if Path(f"{self.template}{suffix}").exists():
                    shutil.copyfile(f"{self.template}{suffix}", where / f"ledger.db{suffix}")
            (where / "doc.txt").write_bytes(b"retries are safe\n")
            (where / "not-a-database.db").write_bytes(b"this is not an SQLite file\n" * 64)
            (where / "a-directory.db").mkdir()
            yield where, f"sqlite:///{where / 'ledger.db'}"
        finally:
            shutil.rmtree(where, ignore_errors=True)

    def resolve(self, argv: tuple[str, ...], url: str) -> list[str]:
        refs = {**self.refs, "url": url}
        return [MARKER.sub(lambda m: refs.get(m.group(1), m.group(0)), arg) for arg in argv]


# -- argument values ----------------------------------------------------------------------

#: Text as a shell passes undecodable bytes: each bad byte a lone surrogate (surrogateescape).
shell_bytes = st.binary(min_size=1, max_size=12).map(
    lambda b: b.decode("utf-8", errors="surrogateescape")
)
bad_text = st.one_of(
    adversarial_text,
    shell_bytes,
    CONTROL_TEXT,
    st.sampled_from(("", "x" * 100_000, "-", "--", "--json", "a\nb", "\x00", "\udc80")),
)


def _pool(*values: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from(values)


PLAUSIBLE_JSON = st.one_of(
    _pool('{"api_version": "v2"}', "{}", "true", "3", '"text"', "[1, 2]", "null", "-0"),
    _pool('{"a": {"b": [1, 2.5, null]}}', '{"a": 1, "a": 2}', '{"k": "\\u0000"}', "[]"),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=8,
    ).map(json.dumps),
)
TRICKY_JSON = st.one_of(
    _pool("NaN", "Infinity", "-Infinity", "1e400", '{"a": NaN}', "[-1e999]", "1.5e-400"),
    _pool('"\\ud800"', '{"\\udc80": 1}', '["a\\udfffb"]', "{", "not json", "", "'single'"),
    _pool("1" * 5000, "9" * 400, "[" * 50 + "]" * 50, '{"k": ' * 50 + "0" + "}" * 50),
    st.sampled_from((100, 1000, 100_000)).flatmap(
        lambda n: _pool("[" * n + "]" * n, '{"k":' * n + "0" + "}" * n, "[" * n)
    ),
)
PLAUSIBLE_DATETIMES = st.one_of(
    _pool("2031-06-01T12:00:00+00:00", "2032-01-01T00:00:00Z", "2030-01-01T12:00:00.5+05:30"),
    st.builds(
        lambda delta, zone: (FUZZ_NOW + delta).astimezone(zone).isoformat(),
        st.timedeltas(min_value=-timedelta(days=3650), max_value=timedelta(days=3650)),
        st.sampled_from(TIMEZONES),
    ),
)
TRICKY_DATETIMES = st.one_of(
    _pool(
        *("2026-01-01T00:00:00", "2026-01-01", "2026-01-01T00:00", "20260101T000000"),
        *("9999-12-31T23:59:59+00:00", "9999-12-31T23:00:00-05:00", "0001-01-01T00:00:00+05:00"),
        *("0001-01-01T00:00:00+00:00", "1970-01-01T00:00:00+00:00", "2026-13-01T00:00:00+00:00"),
        *("2026-02-30T00:00:00+00:00", "2026-01-01T00:00:00+24:00", "2026-01-01T25:00:00+00:00"),
        *("yesterday", "now", "", "2026-01-01T00:00:00+00:00[UTC]"),
        "\u0661\u0669\u0667\u0660-\u0660\u0661-\u0660\u0661",  # Arabic-Indic digits
    ),
    st.datetimes().map(datetime.isoformat),  # naive
    st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat),
)
PLAUSIBLE_INTEGERS = _pool("0", "1", "3", "20", "<<position>>", "<<position+1>>")
TRICKY_INTEGERS = st.one_of(
    _pool("-1", str(2**63 - 1), str(2**63), str(2**64), str(2**70), "1" + "0" * 30, "9" * 5000),
    _pool("1e3", "", "\u0663", " 7 ", "+5", "0x10", "1_000", "1.0"),
    st.integers().map(str),
)


@st.composite
def _one_in(draw: st.DrawFn, n: int, rare: Any, usual: Any) -> Any:
    """``rare`` once in ``n`` draws, else ``usual`` (shrinking towards ``usual``).

    ``st.one_of(usual, usual, rare)`` would not do: hypothesis drops repeated branches.
    """
    return draw(rare if draw(st.integers(0, n - 1)) == n - 1 else usual)


def _strategy(values: Any) -> st.SearchStrategy[str]:
    return _pool(*values) if isinstance(values, tuple) else values


@dataclass(frozen=True)
class Pool:
    """A parameter's values: ``usual`` ones that can get past validation, and ``odd``
    ones that are well-formed for the shell but wrong for the ledger."""

    usual: st.SearchStrategy[str]
    odd: st.SearchStrategy[str]

    @classmethod
    def of(cls, usual: Any, odd: Any) -> Pool:
        """From tuples of values or strategies."""
        return cls(_strategy(usual), _strategy(odd))


RECORD_IDS = Pool.of(KNOWN_IDS, _pool(*NEAR_IDS, "N1", "new.id-2", "a" * 128) | valid_fresh_ids)
URLS = Pool.of(
    ("<<url>>", "<<url>>", "sqlite:///ledger.db"),
    (
        *("memory:", "sqlite:///new.db", "sqlite:///nope/x.db", "sqlite:///not-a-database.db"),
        *("sqlite:///a-directory.db", "sqlite:///x.db?timeout=abc", "sqlite:///x.db?timeout=0"),
        *("sqlite:///a%00b.db", "sqlite:///\udc80.db", "sqlite://relative.db", "sqlite:///"),
        *("nonsense", "", " ", "http://x.test/"),
    ),
)
#: Refused by the URL alone, without contacting a server: only for the commands
#: without a token (the others would try to connect, taking a second or more).
POSTGRES_URL = "postgresql://user:secret@127.0.0.1:1/ledger?connect_timeout=1"

#: The values of a click parameter, by its name (else by its type, in ``value_for``).
POOLS: dict[str, Pool] = {
    "record_id": RECORD_IDS,
    "replacement": RECORD_IDS,
    "parents": RECORD_IDS,
    "delivery_id": Pool.of(("<<delivery:R1>>", "<<delivery:RS>>"), ("d-nope", "R1")),
    "scope": Pool.of(("proj-a", "proj-a", *SCOPES), ("proj-z", "proj-a\n", "PROJ-A")),
    "claim_key": Pool.of((*KNOWN_CLAIMS, "k", "api.retry_safe"), ("claim.exp1", "solo", "")),
    "subject": Pool.of(KNOWN_SUBJECTS, valid_fresh_ids),
    "roles": Pool.of(
        ("read", "propose,read", "approve, audit ,deliver"), ("read,superuser", ",,,", "READ")
    ),
    "token": Pool.of(
        ("<<token:agent>>", "<<token:reviewer>>", "<<token:reviewer>>", "<<token:solo>>"),
        ("<<token:outsider>>", "<<token:probe>>", "<<token:revoked>>", "plt_nope", ""),
    ),
    "token_value": Pool.of(TOKENS, ("<<token:revoked>>", "plt_nope", "")),
    "admin_token": Pool.of(("<<admin>>",), ("<<token:reviewer>>", "plt_nope", "")),
    "run_id": Pool.of(("task-1", "task-2"), ("", "bad id!", "RUN1")),
    "record_ids": RECORD_IDS,
    "url": URLS,
    "note": Pool.of(("checked", "re-checked by hand"), ("", "a\tb")),
    "reason": Pool.of(("doc changed", "wrong"), ("", " ")),
    "recipient": Pool.of(("ops@x.test", "team"), ("a" * 512, "a" * 513, "")),
    "channel": Pool.of(("email", "slack"), ("a" * 64, "a" * 65, "")),
    "uri": Pool.of(("https://x.test/doc", "https://docs.test/e1"), ("file:///etc/passwd", "")),
    "value_str": Pool.of(("retries on", "true"), ("", "x" * 2_000_000)),
    "raw_value": Pool(PLAUSIBLE_JSON, TRICKY_JSON),
    "event_type": Pool.of(EVENT_TYPES, ("proposed", "Granted", "")),
    "against": Pool.of(
        ("<<digest>>", "<<digest:tampered>>", "<<digest:ahead>>"),
        (f"{2**70}:1:" + "0" * 64, "-1:0:" + "0" * 64, "0:0:" + "0" * 64, "1:1:", "x", ""),
    ),
    # Relative paths land in the example's scratch directory (the working directory).
    "file": Pool.of(("-", "doc.txt"), ("missing.txt", "a-directory.db", "ledger.db", "f-\udc80")),
    "output": Pool.of(
        ("-", "out.bin", "out.svg"),
        ("nope/out.bin", "a-directory.db", "o-\udc80.out", "o-a\nb/x.out"),
    ),
    "out": Pool.of(("new-key", "k2"), ("nope/k", "a-directory.db", "doc.txt", "k-\udc80")),
    "key": Pool.of(("<<key>>",), ("<<key>>.pub", "doc.txt", "missing.key", "a-directory.db")),
    "public_key": Pool.of(("<<key>>.pub",), ("<<key>>", "doc.txt", "missing.pub")),
    "append_to": Pool.of(("heads.jsonl",), ("a-directory.db", "doc.txt", "nope/h.jsonl")),
    "heads_file": Pool.of(("<<heads>>",), ("doc.txt", "missing.jsonl", "a-directory.db")),
    "path": Pool.of(("<<bundle>>",), ("doc.txt", "ledger.db", "a-directory.db", "missing.zip")),
    "ref": Pool.of(("<<snapshot:E1>>",), ("sha256:" + "0" * 64, "E1", "sha256:", "")),
}
#: Usual values a command needs to get anywhere (the seeded world's CANDIDATEs for
#: accept, its STALE records for revalidate…), by command and parameter name.
USUAL_FOR = {
    ("accept", "record_id"): _pool("C1", "C2", "C3", "SOLO1", "EXP1"),
    ("reject", "record_id"): _pool("C1", "C2", "C3", "SOLO1", "EXP1"),
    ("revalidate", "record_id"): _pool("S1", "RS"),
    ("revalidate", "parents"): _pool("E1", "M1", "S1", "C1"),
    ("deliver", "record_id"): _pool("R1", "M1", "E1", "RUN1", "RS"),
    ("correct", "replacement"): _pool("R1", "M1", "C1"),
}
#: Adversarial values that must stay inside the scratch directory: prefixed, so a
#: path can never climb out of it (the prefixed first component does not exist).
CONFINED = {
    "file": "f-",
    "output": "o-",
    "out": "k-",
    "key": "k-",
    "public_key": "k-",
    "append_to": "h-",
    "heads_file": "h-",
    "path": "b-",
}


def pool_for(param: click.Parameter, path: CommandPath) -> Pool:
    """``param``'s pool: by its name, else by its type."""
    name = param.name or ""
    if name in POOLS:
        pool = POOLS[name]
    elif isinstance(param.type, DateTimeType):
        pool = Pool(PLAUSIBLE_DATETIMES, TRICKY_DATETIMES)
    elif isinstance(param.type, JSONType):
        pool = Pool(PLAUSIBLE_JSON, TRICKY_JSON)
    elif isinstance(param.type, click.IntRange):
        pool = Pool(PLAUSIBLE_INTEGERS, TRICKY_INTEGERS)
    elif isinstance(param.type, click.Choice):
        choices = tuple(str(c) for c in param.type.choices)
        pool = Pool.of(choices, (choices[0].upper(), f" {choices[0]}", "gossip", ""))
    else:
        pool = Pool.of(("x",), ("",))
    if name == "url" and not _takes_token(path):
        pool = Pool(pool.usual, pool.odd | st.just(POSTGRES_URL))
    usual = USUAL_FOR.get((path[-1] if path else "", name))
    return pool if usual is None else Pool(usual, pool.usual | pool.odd)


def value_for(param: click.Parameter, path: CommandPath, clean: bool) -> st.SearchStrategy[str]:
    """Values for ``param``: a ``clean`` command line gets usual values only; otherwise
    one in three is odd, and one in six garbage (``bad_text``)."""
    pool = pool_for(param, path)
    if clean:
        return pool.usual
    name = param.name or ""
    bad = bad_text.map(lambda text: CONFINED[name] + text) if name in CONFINED else bad_text
    return _one_in(6, bad, _one_in(3, pool.odd, pool.usual))


EXTRAS = st.one_of(
    _pool("--bogus", "--bogus=1", "-x", "--", "-", "---", "--json=yes", "--token", "--url"),
    _pool("extra", "E1", "-hx", "--vers", "--scope", "--help", "--version", "frobnicate"),
    bad_text,
)


#: Options of which a command wants exactly one: one is nearly always given.
EXCLUSIVE = {"as-of": ("position", "when"), "propose": ("raw_value", "value_str")}


@st.composite
def _pieces(draw: st.DrawFn, command: click.Command, path: CommandPath, clean: bool) -> list[str]:
    """Arguments for one command: options (real names, any order, sometimes missing or
    repeated, ``--opt value`` or ``--opt=value``) and its positional arguments."""
    options: list[list[str]] = []
    exclusive = EXCLUSIVE.get(str(command.name), ())
    chosen = draw(st.sampled_from(exclusive)) if exclusive else None
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        # Out of twenty: required (or chosen) options are given 19 times, others 6,
        # the unchosen one of an exclusive pair twice.
        wanted = param.required or param.name == chosen
        odds = 19 if wanted else (2 if param.name in exclusive else 6)
        if draw(st.integers(0, 19)) >= odds:
            continue
        for _ in range(draw(st.integers(1, 3)) if param.multiple else 1):
            flag = draw(st.sampled_from(param.opts + param.secondary_opts))
            if param.is_flag:
                options.append([flag])
                continue
            value = draw(value_for(param, path, clean))
            glued = flag.startswith("--") and draw(st.integers(0, 4)) == 0
            options.append([f"{flag}={value}"] if glued else [flag, value])
    positional = [
        draw(value_for(param, path, clean))
        for param in command.params
        if isinstance(param, click.Argument) and draw(st.integers(0, 19)) < 19
    ]
    ordered = [token for piece in draw(st.permutations(options)) for token in piece]
    return positional + ordered if draw(st.booleans()) else ordered + positional


@dataclass(frozen=True)
class Case:
    """One command line: the command path it aims at, its argv (with ``<<…>>``
    markers) and the bytes on stdin."""

    path: CommandPath
    argv: tuple[str, ...]
    stdin: bytes = b""

    def __repr__(self) -> str:
        argv = ", ".join(_short(a) for a in self.argv)
        return f"Case({name_of(self.path)!r}: [{argv}], stdin={_short(self.stdin)})"


@st.composite
def cases(draw: st.DrawFn, path: CommandPath) -> Case:
    """A command line for ``path``: its commands' pieces, then up to two stray arguments
    (unknown options, positionals, garbage) anywhere after ``provledger``.

    One line in three is *clean*: usual values only and no stray arguments, so that
    write commands get past validation often enough to check what they leave behind.
    """
    clean = draw(st.integers(0, 2)) == 0
    argv: list[str] = []
    for name, command in commands_on(path):
        if command is not main:
            argv.append(name)
        if command is not main or not path:  # --version on every path would end most early
            argv.extend(draw(_pieces(command, path, clean)))
    for _ in range(0 if clean else draw(_pool(0, 0, 0, 0, 0, 1, 1, 2))):
        argv.insert(draw(st.integers(min(1, len(argv)), len(argv))), draw(EXTRAS))
    stdin = draw(_one_in(4, _pool(b"", b"\xff\xfe\x00", HUGE_BYTES), st.binary(max_size=64)))
    return Case(path, tuple(argv), stdin)


# -- the check ----------------------------------------------------------------------------

_repr = reprlib.Repr()
_repr.maxstring = 50


def _short(value: str | bytes) -> str:
    text = _repr.repr(value)
    return text + f" (len {len(value)})" if len(value) > 50 else text


class CliFuzzFailure(AssertionError):
    """A command line broke the contract: the message names it and what happened."""

    def __init__(self, case: Case, exit_code: int, problem: str, where: str = "") -> None:
        self.case, self.exit_code, self.problem, self.where = case, exit_code, problem, where
        super().__init__(f"{case!r}: {problem}" + (f"\n  at {where}" if where else ""))

    @property
    def signature(self) -> str:
        """What tells this bug from others: command, kind of problem, place."""
        return f"{name_of(self.case.path)} | {self.problem.split(':', 1)[0]} | {self.where}"


def _where(exc: BaseException) -> str:
    """The innermost frame of ``exc`` in the project (else the innermost at all)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/ledger/" in f.filename or "/projections/" in f.filename]
    if not (ours or frames):
        return ""
    frame = (ours or frames)[-1]
    return f"{Path(frame.filename).parent.name}/{Path(frame.filename).name}:{frame.lineno}"


def _usage_error(stderr: str) -> bool:
    """Click's usage message; its parser reports a flag given a value (``--json=yes``)
    or an option missing its value with the ``Error:`` line alone."""
    return "Usage:" in stderr or re.fullmatch(r"Error: [^\n]*\n", stderr) is not None


#: The checks, which exit 3 when they could not check (1 is a problem found).
CHECKS = frozenset({"verify", "verify-bundle"})
#: The warning a password in ``--url`` on the command line gets, before any answer.
_PASSWORD_WARNING = re.compile(r"warning: --url on the command line holds a password[^\n]*\n")
#: What `token revoke TOKEN` says first, however it ends (the token was on the command line).
_TOKEN_WARNING = re.compile(r"warning: TOKEN was on the command line[^\n]*\n")


def _output_problem(result: Result, path: CommandPath) -> str:
    """What is wrong with a command's exit code and output, or ``""``."""
    allowed = (0, 1, 2, 3) if name_of(path) in CHECKS else (0, 1, 2)
    if result.exit_code not in allowed:
        return f"exit code {result.exit_code}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        exc = result.exception
        return f"raised {type(exc).__module__}.{type(exc).__qualname__}: {_short(str(exc))}"
    if "Traceback" in result.output:
        return f"a traceback in the output: {_short(result.output)}"
    stderr = _TOKEN_WARNING.sub("", _PASSWORD_WARNING.sub("", result.stderr, count=1), count=1)
    if result.exit_code in (1, 3) and not re.fullmatch(r"error: [^\n]*\n", stderr):
        return f"exit {result.exit_code} without one 'error: ' line on stderr: {_short(stderr)}"
    if result.exit_code == 2 and not _usage_error(stderr):
        return f"exit 2 without a usage message on stderr: {_short(stderr)}"
    return ""


def _ledger_problem(world: World, url: str, must_be_unchanged: bool) -> str:
    """What is wrong with the seeded copy after the call, or ``""``."""
    try:
        with Ledger.open(url) as led:
            if must_be_unchanged:
                if led.position != world.position:
                    return f"the log moved from position {world.position} to {led.position}"
                if led.views_digest() != world.views:
                    return "the views changed"
                return ""
            if not led.verify().ok:
                return "succeeded, but the log no longer verifies"
            if not led.rebuild().matched:
                return "succeeded, but the rebuilt views differ from the live ones"
    except Exception as exc:
        return f"the ledger is unusable afterwards: {type(exc).__name__}: {_short(str(exc))}"
    return ""


def fuzz_cli_once(world: World, case: Case) -> int:
    """Run one command line on a fresh copy of the world; return its exit code.

    Raises ``CliFuzzFailure`` if the call broke the contract (see the module docstring).
    A successful write is also checked on every other ledger file it may have made in
    the scratch directory (``--url sqlite:///new.db``).
    """
    with world.example() as (directory, url):
        argv = world.resolve(case.argv, url)
        environment = {"PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": None}
        with contextlib.chdir(directory):
            result = CliRunner().invoke(main, argv, input=case.stdin, env=environment)
        problem = _output_problem(result, case.path)
        if problem:
            exc = result.exception
            where = _where(exc) if exc is not None else ""
            raise CliFuzzFailure(case, result.exit_code, problem, where)
        wrote = result.exit_code == 0 and name_of(case.path) in WRITES
        problem = _ledger_problem(world, url, must_be_unchanged=not wrote)
        if problem:
            what = "a read" if result.exit_code == 0 else f"refused with exit {result.exit_code}"
            raise CliFuzzFailure(
                case, result.exit_code, problem if wrote else f"{what}, but {problem}"
            )
        if wrote:
            for other in sorted(directory.glob("*.db")):
                if other.name in ("ledger.db", "not-a-database.db") or not other.is_file():
                    continue
                problem = _ledger_problem(world, f"sqlite:///{other}", must_be_unchanged=False)
                if problem:
                    raise CliFuzzFailure(case, 0, f"on {other.name}: {problem}")
        return result.exit_code


# -- the tests ------------------------------------------------------------------------------

#: Examples per command path (about 40 paths): the whole file stays well under a minute.
EXAMPLES_PER_COMMAND = 20
FUZZ = settings(
    deadline=None,
    database=None,
    # Every example copies a ledger file, so shrinking is affordable and gives the
    # shortest failing command line.
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
    suppress_health_check=(
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ),
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World.seed(tmp_path_factory.mktemp("cli-fuzz"))


def test_every_command_is_fuzzed_as_a_read_or_a_write() -> None:
    # Given every command path under `provledger`, as-of's and token's included
    names = [name_of(p) for p in PATHS]
    assert {"token issue", "token revoke", "as-of read", "as-of graph", "demo"} <= set(names)
    assert len(names) == len(set(names))

    # Then each is declared exactly once a read or a write, and nothing declared is made up
    assert READS.isdisjoint(WRITES)
    assert set(names) == READS | WRITES


@pytest.mark.parametrize("path", PATHS, ids=name_of)
def test_adversarial_command_lines_exit_0_1_or_2_with_a_message_and_refusals_change_nothing(
    world: World, path: CommandPath
) -> None:
    exits: Counter[int] = Counter()

    # Given a fresh copy of the seeded ledger for every command line
    @settings(FUZZ, max_examples=EXAMPLES_PER_COMMAND)
    @given(case=cases(path))
    def fuzz(case: Case) -> None:
        # When the command runs with generated arguments,
        # Then it keeps the contract (fuzz_cli_once raises otherwise)
        exits[fuzz_cli_once(world, case)] += 1

    fuzz()

    # And every command line ended with one of the exit codes (3: a check that could
    # not check)
    assert exits and set(exits) <= {0, 1, 2, 3}


def test_a_short_campaign_counts_every_command_line_once() -> None:
    # When the soak entry point runs a few dozen command lines
    report = run_campaign(examples=40, seed=5)

    # Then each is counted once, by command and by exit code
    assert report["tried"] == 40
    per = report["per_command"]
    assert set(per) == {name_of(p) for p in PATHS}
    assert sum(c["tried"] for c in per.values()) == 40
    exits = sum(report[f"exit_{k}"] for k in ("0", "1", "2", "other"))
    assert exits == 40
    assert sum(report["failures"].values()) == report["failed"]


# -- found by the fuzz: each fails until the CLI is fixed ------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000
RV = "<<token:reviewer>>"
AG = "<<token:agent>>"
LONG_INTEGER = "1" * 5000
PROPOSE = ("propose", "--scope", "proj-a", "--claim", "k", "--kind", "fact", "--token", AG)


@dataclass(frozen=True)
class Found:
    """A command line the fuzz found breaking the contract (the bug is named in ``name``)."""

    name: str
    path: CommandPath
    argv: tuple[str, ...]
    stdin: bytes = b""


FOUND = [
    # JSONType.convert and propose --value catch only JSONDecodeError: json.loads raises
    # RecursionError for deep nesting and ValueError for an integer over 4300 digits.
    Found(
        "deep-json-context",
        ("read",),
        ("read", "--scope", "proj-a", "--claim", "k", "--context", DEEP, "--token", RV),
    ),
    Found("deep-json-conditions", ("propose",), (*PROPOSE, "--value", "1", "--conditions", DEEP)),
    Found("deep-json-value", ("propose",), (*PROPOSE, "--value", DEEP)),
    Found(
        "deep-json-capture-value",
        ("capture",),
        ("capture", "-", "--scope", "proj-a", "--uri", "u", "--value", DEEP, "--token", AG),
        b"x",
    ),
    Found("long-integer-json-value", ("propose",), (*PROPOSE, "--value", LONG_INTEGER)),
    Found(
        "long-integer-json-context",
        ("as-of", "explain"),
        (
            "as-of",
            "--position",
            "1",
            "explain",
            "--scope",
            "proj-a",
            "--claim",
            "k",
            "--context",
            LONG_INTEGER,
            "--token",
            RV,
        ),
    ),
    # The OSError message names the file raw: a newline in it splits the error line.
    Found(
        "newline-in-output-directory",
        ("graph",),
        ("graph", "E1", "--format", "dot", "-o", "o-a\nb/x.dot", "--token", RV),
    ),
    Found(
        "newline-in-export-output", ("export",), ("export", "-o", "o-a\nb/x.json", "--token", RV)
    ),
    # A non-UTF-8 file name (bytes a shell passes as lone surrogates): the file is
    # written, then echoing "wrote <name>" to a strict UTF-8 stdout raises
    # UnicodeEncodeError.
    Found(
        "undecodable-export-output", ("export",), ("export", "-o", "o-\udc80.json", "--token", RV)
    ),
    Found(
        "undecodable-graph-output",
        ("graph",),
        ("graph", "E1", "--format", "mermaid", "-o", "o-\udc80.mmd", "--token", RV),
    ),
    # A NUL in a path: open() raises ValueError, which neither click.File nor
    # _errors_exit_1 catches (only reachable in-process: argv cannot hold NUL).
    Found(
        "nul-in-capture-file",
        ("capture",),
        ("capture", "f-\x00", "--scope", "proj-a", "--uri", "u", "--token", AG),
    ),
    Found("nul-in-output", ("export",), ("export", "-o", "o-\x00", "--token", RV)),
    # A surrogate outside U+DC80..U+DCFF cannot be turned into a file name: os.fsencode
    # raises UnicodeEncodeError (only reachable in-process, like NUL).
    Found(
        "high-surrogate-in-capture-file",
        ("capture",),
        ("capture", "f-\ud800", "--scope", "proj-a", "--uri", "u", "--token", AG),
    ),
    # export --scope reaches SQLite unchecked (ledger.graph.collect -> Session._require):
    # a lone surrogate (`--scope $'\x80'`) raises UnicodeEncodeError whatever the locale.
    Found("undecodable-export-scope", ("export",), ("export", "--scope", "\udc80", "--token", RV)),
    # An SQLite URL naming a non-UTF-8 file (`--url $'sqlite:///\x80.db'`) opens fine,
    # then printing the URL to a strict UTF-8 stdout raises UnicodeEncodeError.
    Found("undecodable-url-init", ("init",), ("init", "--url", "sqlite:///\udc80.db")),
    Found(
        "undecodable-url-init-json", ("init",), ("init", "--url", "sqlite:///\udc80.db", "--json")
    ),
    Found("undecodable-url-stats", ("stats",), ("stats", "--url", "sqlite:///\udc80.db")),
    Found("undecodable-url-demo", ("demo",), ("demo", "--url", "sqlite:///\udc80.db")),
]


def test_found_names_are_unique_and_their_paths_exist() -> None:
    assert len({f.name for f in FOUND}) == len(FOUND)
    assert {f.path for f in FOUND} <= set(PATHS)


@pytest.mark.parametrize("found", FOUND, ids=lambda f: f.name)
def test_command_lines_the_fuzz_found_keep_the_contract(world: World, found: Found) -> None:
    # When the command line the fuzz found runs on a fresh copy of the seeded ledger,
    # Then it keeps the contract (fuzz_cli_once raises otherwise)
    exit_code = fuzz_cli_once(world, Case(found.path, found.argv, found.stdin))
    assert exit_code in (0, 1, 2)


# -- the campaign --------------------------------------------------------------------------


def run_campaign(examples: int, seed: int) -> dict[str, Any]:
    """Fuzz every command with ``examples`` generated command lines; never raises on a bug.

    Args:
        examples: how many command lines to run, spread evenly over the command paths.
        seed: the hypothesis seed; the same seed draws the same command lines.

    Returns a JSON-friendly dict: ``seed``, ``seconds``, ``tried``, ``exit_0`` /
    ``exit_1`` / ``exit_2`` / ``exit_other`` (every line counted once by its exit
    code), ``failed`` (lines that broke the contract, whatever their exit code),
    ``per_command`` (``{"as-of get": {"tried", "exit_0", "exit_1", "exit_2",
    "exit_other", "failed"}}``), ``failures`` (count per distinct signature:
    command | problem | place) and ``failure_examples`` (the first message of each).
    """
    keys = ("tried", "exit_0", "exit_1", "exit_2", "exit_other", "failed")
    per: dict[str, Counter[str]] = {name_of(p): Counter() for p in PATHS}
    failures: Counter[str] = Counter()
    first: dict[str, str] = {}
    started = time.perf_counter()

    def record(counts: Counter[str], exit_code: int | None) -> None:
        counts[f"exit_{exit_code}" if exit_code in (0, 1, 2) else "exit_other"] += 1

    def run(world: World, index: int, path: CommandPath, count: int) -> None:
        counts = per[name_of(path)]

        @hypothesis_seed(seed * 1000 + index)  # one stream per path, not the same one
        @settings(
            max_examples=count,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=cases(path))
        def campaign(case: Case) -> None:
            counts["tried"] += 1
            try:
                record(counts, fuzz_cli_once(world, case))
            except CliFuzzFailure as failure:
                counts["failed"] += 1
                record(counts, failure.exit_code)
                failures[failure.signature] += 1
                first.setdefault(failure.signature, str(failure))
            except Exception as exc:  # the harness itself broke
                counts["failed"] += 1
                record(counts, None)
                signature = f"{name_of(path)} | harness {type(exc).__name__} | {_where(exc)}"
                failures[signature] += 1
                first.setdefault(signature, f"{case!r}: {type(exc).__name__}: {exc}")

        campaign()

    with tempfile.TemporaryDirectory(prefix="provledger-cli-fuzz-") as scratch:
        world = World.seed(Path(scratch))
        # An even share per command path (one hypothesis run each), the first ones
        # taking the remainder.
        share, remainder = divmod(examples, len(PATHS))
        for index, path in enumerate(PATHS):
            if share + (index < remainder):
                run(world, index, path, share + (index < remainder))
    totals: Counter[str] = Counter()
    for counts in per.values():
        totals.update(counts)
    return {
        "seed": seed,
        "seconds": round(time.perf_counter() - started, 1),
        **{k: totals[k] for k in keys},
        "per_command": {name: {k: c[k] for k in keys} for name, c in per.items()},
        "failures": dict(failures.most_common()),
        "failure_examples": first,
    }


if __name__ == "__main__":  # pragma: no cover - a manual soak: python -m tests.test_fuzz_cli N seed
    import sys

    n, s = int(sys.argv[1]), int(sys.argv[2])
    print(json.dumps(run_campaign(n, s), indent=2))
