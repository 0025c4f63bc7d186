"""A ledger opened read-only (``sqlite:///path.db?mode=ro``): an auditor's copy, or
a ledger on a read-only file system.

Nothing is created or written: reads, audit, ``verify`` and the digest answer as
on the ledger opened for writing, every write is refused with ``ReadOnlyError``
naming it, and the file's bytes do not change. Where SQLite cannot create the
``-shm`` file beside the ledger (a real read-only bind mount here), it is opened
as immutable, unless a ``-wal`` file holding transactions is beside it, which an
immutable open would silently leave out.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner, Result

from ledger import Kind, Ledger, Outcome
from ledger.cli import main
from ledger.errors import (
    InvalidURLError,
    LedgerNotFoundError,
    ReadOnlyError,
    StorageError,
)

FIXTURES = Path(__file__).parent / "fixtures"


def run(*args: str) -> Result:
    env: dict[str, str | None] = {
        "PROVLEDGER_URL": None,
        "PROVLEDGER_TOKEN": None,
        "PROVLEDGER_ADMIN_TOKEN": None,
    }
    return CliRunner().invoke(main, list(args), env=env)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_ledger(path: Path) -> tuple[Ledger, dict[str, str]]:
    """A ledger with a proposal, an acceptance, a capture and a revocation; open."""
    led = Ledger.open(f"sqlite:///{path}")
    admin = led.admin()
    tokens = {}
    for subject, roles in (
        ("agent-1", ["propose", "read"]),
        ("reviewer", ["approve", "read", "audit"]),
    ):
        admin.grant(subject, "proj-a", roles)
        tokens[subject] = admin.issue_token(subject)
    agent = led.authenticate(tokens["agent-1"])
    reviewer = led.authenticate(tokens["reviewer"])
    ev = agent.capture("proj-a", "https://example.org/doc", b"the source", id="E1")
    reviewer.accept(ev)
    fact = agent.propose("proj-a", "api.retry_safe", True, Kind.FACT, parents=[ev], id="F1")
    reviewer.accept(fact)
    old = agent.propose("proj-a", "api.version", "v1", Kind.FACT, id="V1")
    reviewer.accept(old)
    reviewer.revoke(old, "superseded upstream")
    return led, tokens


def answers(led: Ledger, tokens: dict[str, str]) -> dict[str, Any]:
    """What an auditor asks a ledger."""
    reviewer = led.authenticate(tokens["reviewer"])
    read = reviewer.read("proj-a", "api.retry_safe")
    return {
        "position": led.position,
        "digest": str(led.digest()),
        "read": (read.outcome, [r.id for r in read.records], read.value),
        "statuses": {r: str(reviewer.get(r).status) for r in ("E1", "F1", "V1")},
        "audit": [e.type for e in reviewer.audit("V1").events],
        "history": len(reviewer.history()),
        "snapshot": reviewer.snapshot((reviewer.get("E1").evidence or {})["snapshot_ref"]),
    }


def test_a_read_only_ledger_answers_as_the_writable_one_and_refuses_every_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "l.db"
    led, tokens = write_ledger(path)
    expected = answers(led, tokens)
    led.close()
    before = sha256(path)

    ro = Ledger.open(f"sqlite:///{path}?mode=ro")
    try:
        assert ro.read_only
        assert answers(ro, tokens) == expected
        assert expected["read"][0] == Outcome.FOUND
        report = ro.verify()
        assert report.ok, report.problem
        assert "views" in report.checks
        agent = ro.authenticate(tokens["agent-1"])
        reviewer = ro.authenticate(tokens["reviewer"])
        assert agent.read_only and reviewer.read_only
        writes: dict[str, Callable[[], object]] = {
            "propose": lambda: agent.propose("proj-a", "c", 1, Kind.FACT),
            "capture": lambda: agent.capture("proj-a", "u", b"x"),
            "accept": lambda: reviewer.accept("F1"),
            "revoke": lambda: reviewer.revoke("F1", "why"),
            "grant": lambda: ro.admin().grant("agent-2", "proj-a", ["read"]),
            "issue_token": lambda: ro.admin().issue_token("agent-2"),
            "revoke_token": lambda: ro.admin().revoke_token(tokens["agent-1"]),
            "scrub_erased": lambda: ro.admin().scrub_erased(),
            "rebuild": ro.rebuild,
            "run": lambda: agent.run("r-1").start(),
        }
        for name, write in writes.items():
            with pytest.raises(ReadOnlyError, match=rf"^{name} refused: .*opened read-only"):
                write()
        assert ro.position == expected["position"]
    finally:
        ro.close()
    assert sha256(path) == before
    wal = tmp_path / "l.db-wal"  # SQLite's own, as for any reader: nothing in it
    assert not wal.exists() or wal.stat().st_size == 0
    again = Ledger.open(f"sqlite:///{path}")  # and it still opens for writing
    try:
        assert answers(again, tokens) == expected
    finally:
        again.close()


def test_nothing_is_created_where_there_is_no_ledger(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(LedgerNotFoundError, match="no ledger"):
        Ledger.open(f"sqlite:///{missing}?mode=ro")
    assert not missing.exists()
    other = tmp_path / "other.db"
    other.write_bytes(b"not a database at all, just text\n" * 4)
    with pytest.raises(LedgerNotFoundError, match="not an SQLite database"):
        Ledger.open(f"sqlite:///{other}?mode=ro")
    refused = run("init", "--url", f"sqlite:///{missing}?mode=ro")
    assert refused.exit_code == 1
    assert "init refused" in refused.stderr and "read-only" in refused.stderr
    assert not missing.exists()
    stats = run("stats", "--url", f"sqlite:///{missing}?mode=ro")
    assert stats.exit_code == 1 and "nothing was created" in stats.stderr
    assert "init" not in stats.stderr
    assert not missing.exists()


@pytest.mark.parametrize("url", ["?mode=rw&mode=ro", "?mode=write", "?mode="])
def test_the_mode_option_is_ro_or_rw_once(tmp_path: Path, url: str) -> None:
    with pytest.raises(InvalidURLError, match="mode"):
        Ledger.open(f"sqlite:///{tmp_path / 'l.db'}{url}")
    assert not (tmp_path / "l.db").exists()


def test_an_earlier_versions_ledger_opened_read_only_verifies_and_says_why_it_cannot_read(
    tmp_path: Path,
) -> None:
    # Its views are in 0.1.0's layout and are not rebuilt (that would write): the log
    # checks pass, and a read the old views cannot answer says so, not "no such column".
    copy = tmp_path / "old.db"
    shutil.copy(FIXTURES / "ledger-0.1.0.db", copy)
    before = sha256(copy)
    # Opened to be read, it is refused: its views cannot be rebuilt without writing
    with pytest.raises(StorageError, match=r"read-only .*earlier version .*`provledger verify`"):
        Ledger.open(f"sqlite:///{copy}?mode=ro")
    ro = Ledger.open(f"sqlite:///{copy}?mode=ro", catch_up=False)
    try:
        report = ro.verify()
        assert report.ok, report.problem
        assert "log" in report.checks and "views" not in report.checks
        tokens = __import__("json").loads((FIXTURES / "ledger-0.1.0.json").read_text())["tokens"]
        agent = ro.authenticate(tokens["agent-1"])
        with pytest.raises(StorageError, match=r"built by an earlier version.*read-only"):
            agent.read("proj-a", "api.retry_safe")
    finally:
        ro.close()
    assert sha256(copy) == before
    shown = run("verify", "--url", f"sqlite:///{copy}?mode=ro")
    assert shown.exit_code == 0, shown.output
    assert "views not compared" in shown.stderr and "read-only" in shown.stderr
    assert sha256(copy) == before


def test_views_behind_the_log_are_refused_read_only_not_served_as_current(
    tmp_path: Path,
) -> None:
    # Events the views never saw (commands write both in one transaction, so only
    # something behind the ledger's back leaves this; reopening for writing catches
    # up): read-only, F1's row still says ACCEPTED though the log revoked it.
    path = tmp_path / "l.db"
    led, tokens = write_ledger(path)
    led.engine.projector.enabled = False  # the views stop following the log
    led.authenticate(tokens["reviewer"]).revoke("F1", "source withdrawn")
    newest = led.position
    led.close()
    with pytest.raises(StorageError, match=r"views have not caught up with the log"):
        Ledger.open(f"sqlite:///{path}?mode=ro")
    audit = Ledger.open(f"sqlite:///{path}?mode=ro", catch_up=False)
    try:
        report = audit.verify()  # names the gap; the views agree as far as they go
        assert (report.ok, report.failed_checks) == (False, ("views",))
        assert f"while the log goes on to {newest}" in (report.problem or "")
        assert len(report.problems) == 1
    finally:
        audit.close()
    writable = Ledger.open(f"sqlite:///{path}")  # catches up
    try:
        assert str(writable.authenticate(tokens["reviewer"]).get("F1").status) == "REVOKED"
    finally:
        writable.close()
    ro = Ledger.open(f"sqlite:///{path}?mode=ro")
    try:
        assert str(ro.authenticate(tokens["reviewer"]).get("F1").status) == "REVOKED"
    finally:
        ro.close()


_COUNT = """
import sys
from ledger import Ledger
with Ledger.open(sys.argv[1]) as led:
    print(led.position)
"""


def test_a_read_only_handle_beside_a_writer_in_one_process_loses_none_of_its_writes(
    tmp_path: Path,
) -> None:
    # Given a process writing to a ledger that also opens it read-only (an auditor's
    # handle): opening the file to read its header, then closing it, dropped every
    # lock SQLite held on it in this process (POSIX), so the next process to open
    # and close the ledger checked the WAL into the file and deleted it, and the
    # writer's later commits went to a WAL nobody else could see.
    url = f"sqlite:///{tmp_path / 'l.db'}"
    led = Ledger.open(url)
    admin = led.admin()
    admin.grant("agent-1", scope="s", roles=["propose", "read"])
    agent = led.authenticate(admin.issue_token("agent-1"))
    for i in range(5):
        agent.propose("s", f"a{i}", i, Kind.FACT)
    read_only = Ledger.open(f"{url}?mode=ro")
    try:
        assert read_only.position == led.position
        # When another process opens the ledger and exits, and the writer goes on
        other = subprocess.run([sys.executable, "-c", _COUNT, url], capture_output=True, text=True)
        assert other.returncode == 0, other.stderr
        assert Path(f"{tmp_path / 'l.db'}-wal").exists()
        for i in range(5):
            agent.propose("s", f"b{i}", i, Kind.FACT)
        written = led.position
        # Then every write it was told of is there for any other process
        seen = subprocess.run([sys.executable, "-c", _COUNT, url], capture_output=True, text=True)
        assert int(seen.stdout) == written, seen.stderr
    finally:
        read_only.close()
        led.close()
    with Ledger.open(url) as again:
        assert again.position == written


def test_a_run_is_refused_on_a_read_only_ledger_not_ignored(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    led, tokens = write_ledger(path)
    led.close()
    result = CliRunner().invoke(
        main,
        ["read", "--scope", "proj-a", "--claim", "api.retry_safe", "--run", "r-1"],
        env={"PROVLEDGER_URL": f"sqlite:///{path}?mode=ro", "PROVLEDGER_TOKEN": tokens["agent-1"]},
    )
    assert result.exit_code == 1
    assert "--run 'r-1' refused: the ledger is opened read-only" in result.stderr


def test_a_writable_ledger_in_a_directory_named_mode_ro_is_still_wal(tmp_path: Path) -> None:
    folder = tmp_path / "mode=ro-archive"
    folder.mkdir()
    led, _ = write_ledger(folder / "l.db")
    led.close()
    with sqlite3.connect(folder / "l.db") as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# -- a read-only file system -------------------------------------------------------------


@contextmanager
def read_only_mount(source: Path, target: Path) -> Iterator[Path]:
    """``source`` bind-mounted read-only at ``target`` (skips where that is not allowed)."""
    target.mkdir()
    bind = subprocess.run(
        ["mount", "--bind", "-o", "ro", str(source), str(target)],
        capture_output=True,
        check=False,
    )
    if bind.returncode != 0:
        pytest.skip(f"no read-only bind mount here: {bind.stderr.decode().strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_a_ledger_on_a_read_only_mount_is_refused_for_writing_and_opens_read_only(
    tmp_path: Path,
) -> None:
    # SQLite cannot make a WAL ledger's -shm file on a read-only file system: opening
    # it for writing says so (not "no ledger", which sent people to `init`), and
    # mode=ro opens it; the command line opens it read-only, saying so.
    src = tmp_path / "src"
    src.mkdir()
    led, tokens = write_ledger(src / "l.db")
    expected = answers(led, tokens)
    led.close()
    assert sorted(p.name for p in src.iterdir()) == ["l.db"]  # checkpointed on close
    with read_only_mount(src, tmp_path / "ro") as mounted:
        url = f"sqlite:///{mounted / 'l.db'}"
        with pytest.raises(StorageError, match="cannot be opened for writing where it is"):
            Ledger.open(url)
        for args in (("verify",), ("stats",), ("digest",)):
            read = run(*args, "--url", url)
            assert read.exit_code == 0, read.output
            assert read.stderr.startswith(
                f"warning: opened the ledger at {mounted / 'l.db'} read-only, as this user "
                "cannot write it: the file is not writable (no permission, or a read-only "
                "file system); "
            ), read.stderr
        for given in (url, f"{url}?mode=ro"):
            verified = run("verify", "--url", given)
            assert verified.exit_code == 0, verified.output
            assert verified.stdout.startswith(f"ok: {expected['digest']} ")
        granted = run(
            "grant", "agent-2", "--scope", "proj-a", "--roles", "read", "--url", f"{url}?mode=ro"
        )
        assert granted.exit_code == 1 and "grant refused" in granted.stderr
        ro = Ledger.open(f"{url}?mode=ro")
        try:
            assert answers(ro, tokens) == expected
        finally:
            ro.close()
        assert sorted(p.name for p in mounted.iterdir()) == ["l.db"]


def test_a_new_ledger_in_a_read_only_directory_is_refused_naming_the_directory(
    tmp_path: Path,
) -> None:
    (tmp_path / "src").mkdir()
    with read_only_mount(tmp_path / "src", tmp_path / "ro") as mounted:
        url = f"sqlite:///{mounted / 'new.db'}"
        refused = run("init", "--url", url)
        assert refused.exit_code == 1
        assert refused.stderr == (
            f"error: cannot open ledger {url!r}: the file does not exist and the directory "
            f"{str(mounted)!r} is not writable (a read-only file system, or no permission): "
            "create the ledger elsewhere\n"
        )
        assert list(mounted.iterdir()) == []


def test_a_read_only_mount_with_a_wal_file_is_read_whole_or_refused(tmp_path: Path) -> None:
    # Copied while the writer was open, the main file lacks what the -wal file holds.
    # With the -shm file beside them SQLite reads both; without it an immutable open
    # would silently miss the WAL's transactions, so it is refused.
    src = tmp_path / "src"
    src.mkdir()
    led, tokens = write_ledger(tmp_path / "live.db")
    try:
        expected = answers(led, tokens)
        for name in ("with-shm", "no-shm"):
            for suffix in ("", "-wal", "-shm") if name == "with-shm" else ("", "-wal"):
                shutil.copy(tmp_path / f"live.db{suffix}", src / f"{name}.db{suffix}")
    finally:
        led.close()
    assert (src / "no-shm.db-wal").stat().st_size > 0
    with read_only_mount(src, tmp_path / "ro") as mounted:
        whole = Ledger.open(f"sqlite:///{mounted / 'with-shm.db'}?mode=ro")
        try:
            assert answers(whole, tokens) == expected
            assert whole.verify().ok
        finally:
            whole.close()
        with pytest.raises(StorageError, match=r"its -wal file holds transactions"):
            Ledger.open(f"sqlite:///{mounted / 'no-shm.db'}?mode=ro")
        # Through a link, SQLite looks for the -wal file beside the file linked to
        link = tmp_path / "link.db"
        os.symlink(mounted / "no-shm.db", link)
        with pytest.raises(StorageError, match=r"its -wal file holds transactions"):
            Ledger.open(f"sqlite:///{link}?mode=ro")


def test_an_mcp_server_on_a_read_only_ledger_reads_and_refuses_proposals(tmp_path: Path) -> None:
    # A connection's run is written, so on a read-only ledger none starts: its reads
    # answer from the session, and a proposal is refused by name.
    from mcp import Client

    from ledger.integrations.mcp import build_server

    path = tmp_path / "l.db"
    led, tokens = write_ledger(path)
    led.close()
    before = sha256(path)
    ro = Ledger.open(f"sqlite:///{path}?mode=ro")

    async def session() -> tuple[Any, Any]:
        async with Client(build_server(ro, tokens["agent-1"])) as client:
            read = await client.call_tool(
                "read_memory", {"scope": "proj-a", "claim_key": "api.retry_safe"}
            )
            proposed = await client.call_tool(
                "propose_memory",
                {"scope": "proj-a", "claim_key": "k", "value": 1, "kind": "fact"},
            )
            return read, proposed

    try:
        read, proposed = anyio.run(session)
    finally:
        ro.close()
    assert not read.is_error, read.content
    assert read.structured_content["outcome"] == "FOUND"
    assert proposed.is_error
    # (the ledger named without its URL, as to any MCP client)
    assert "ReadOnlyError: propose refused: the ledger is opened read-only" in (
        proposed.content[0].text
    )
    assert sha256(path) == before


_OPENING = """
import sys
from ledger import Ledger
from ledger.errors import StorageError
for url in sys.argv[1:]:
    try:
        with Ledger.open(url, create=False) as led:
            print("opened", led.verify().ok)
    except StorageError as exc:
        print("refused", exc)
"""


def without_override(*argv: str, env: dict[str, str] | None = None) -> Any:
    """``python argv…`` run as root without the capabilities that let it write
    files it does not own (as any other user is)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def drop() -> None:  # from the bounding set: gone once the child runs Python
        for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=drop,
        env={**os.environ, **(env or {})},
    )


def opened_without_override(*urls: str) -> list[str]:
    """What opening each of ``urls`` does for a user who may not write them."""
    done = without_override("-c", _OPENING, *urls)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to hand the files to another user")
def test_a_ledger_this_user_may_not_write_is_refused_for_writing_and_opens_read_only(
    tmp_path: Path,
) -> None:
    # Given ledgers of another user: one in a directory only that user may write
    # (its file writable by all), one whose file only that user may write (in a
    # directory all may write)
    folder, shared = tmp_path / "folder", tmp_path / "shared"
    for where, modes in ((folder, (0o755, 0o666)), (shared, (0o777, 0o644))):
        where.mkdir()
        write_ledger(where / "l.db")[0].close()
        os.chown(where, 65534, 65534)
        os.chown(where / "l.db", 65534, 65534)
        os.chmod(where, modes[0])
        os.chmod(where / "l.db", modes[1])
    # When this user opens each for writing, then read-only
    said = opened_without_override(
        *(f"sqlite:///{w / 'l.db'}{mode}" for w in (folder, shared) for mode in ("", "?mode=ro"))
    )
    # Then each writable open is refused, saying why and how to read it; each
    # read-only open reads (SQLite cannot create its -shm file in the first
    # directory: the file is opened as immutable)
    advice = "; open it read-only (sqlite:///{}?mode=ro: reads, audit, verify and bundles)"
    assert said[0] == (
        f"refused the ledger at {folder / 'l.db'} cannot be opened for writing where it "
        "is: SQLite cannot create its -wal and -shm files beside it (a read-only "
        "directory or file system, or no permission to write there)"
        + advice.format(folder / "l.db")
        + " or copy the file to a writable directory (nothing was changed)"
    )
    assert said[2] == (
        f"refused the ledger at {shared / 'l.db'} cannot be opened for writing where it "
        "is: the file is not writable (no permission, or a read-only file system)"
        + advice.format(shared / "l.db")
        + " or copy the file to a writable directory (nothing was changed)"
    )
    assert said[1] == said[3] == "opened True"
    assert sorted(p.name for p in folder.iterdir()) == ["l.db"]


def not_ours(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """:func:`write_ledger`'s ledger, closed, its file another user's (0644), and its
    tokens."""
    path = tmp_path / "l.db"
    led, tokens = write_ledger(path)
    led.close()
    os.chown(path, 65534, 65534)
    os.chmod(path, 0o644)
    return path, tokens


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to hand the files to another user")
def test_the_command_line_reads_a_ledger_this_user_may_not_write_read_only_saying_so(
    tmp_path: Path,
) -> None:
    # Given a ledger another user owns, which this one may read but not write
    path, tokens = not_ours(tmp_path)
    before = sha256(path)
    env = {"PROVLEDGER_URL": f"sqlite:///{path}", "PROVLEDGER_TOKEN": tokens["reviewer"]}
    # When it reads a record, then proposes
    got = without_override("-m", "ledger", "get", "F1", "--json", env=env)
    propose = ("propose", "--scope", "proj-a", "--claim", "k", "--kind", "fact", "--value", "1")
    refused = without_override("-m", "ledger", *propose, env=env)
    # Then the read answers, saying the ledger was opened read-only and why, and
    # the proposal is refused as a write on a read-only ledger; nothing changed
    warning = (
        f"warning: opened the ledger at {path} read-only, as this user cannot write it: "
        "the file is not writable (no permission, or a read-only file system); reads, "
        "audit, verify and bundles answer, writes are refused\n"
    )
    assert got.returncode == 0 and json.loads(got.stdout)["id"] == "F1", got.stderr
    assert got.stderr == warning
    assert refused.returncode == 1
    assert refused.stderr == warning + (
        f"error: propose refused: ledger 'sqlite:///{path}?mode=ro' is opened read-only "
        "(mode=ro); nothing was written\n"
    )
    assert sha256(path) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to hand the files to another user")
def test_a_ledger_this_user_may_not_write_is_refused_to_a_server_and_to_mode_rw(
    tmp_path: Path,
) -> None:
    # Given a ledger another user owns, which this one may read but not write
    path, tokens = not_ours(tmp_path)
    env = {"PROVLEDGER_TOKEN": tokens["reviewer"]}
    refusal = (
        f"error: the ledger at {path} cannot be opened for writing where it is: the file is "
        "not writable (no permission, or a read-only file system); open it read-only "
        f"(sqlite:///{path}?mode=ro: reads, audit, verify and bundles) or copy the file to a "
        "writable directory (nothing was changed)\n"
    )
    # When a server is started on it, or a read asks for it writable (mode=rw)
    served = without_override("-m", "ledger", "serve", "--url", f"sqlite:///{path}", env=env)
    asked = f"sqlite:///{path}?mode=rw"
    read = without_override("-m", "ledger", "get", "F1", "--url", asked, env=env)
    # Then each is refused, saying why, with no warning of a read-only open
    assert (served.returncode, served.stderr) == (1, refusal)
    assert (read.returncode, read.stderr) == (1, refusal)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to drop the capability to write")
def test_a_shm_file_left_read_only_is_named_not_a_raw_readonly_database(tmp_path: Path) -> None:
    # Given a ledger read while its file was read-only (SQLite made its -shm file
    # read-only too), then made writable again, the -shm file left as it was
    path = tmp_path / "l.db"
    led, tokens = write_ledger(path)
    led.close()
    os.chmod(path, 0o444)
    assert opened_without_override(f"sqlite:///{path}")[0].startswith("refused")
    env = {"PROVLEDGER_URL": f"sqlite:///{path}", "PROVLEDGER_TOKEN": tokens["agent-1"]}
    assert without_override("-m", "ledger", "get", "F1", env=env).returncode == 0
    shm = Path(f"{path}-shm")
    assert shm.exists() and (shm.stat().st_mode & 0o222) == 0
    os.chmod(path, 0o644)
    # When a proposal is made
    propose = ("propose", "--scope", "proj-a", "--claim", "k", "--kind", "fact", "--value", "1")
    refused = without_override("-m", "ledger", *propose, env=env)
    # Then it is refused naming the -shm file and what to do, nothing written
    assert refused.returncode == 1, refused.stderr
    # (the -wal file first: never to be removed, it may hold the newest transactions)
    assert (
        "its -wal file is not writable (made while the ledger was read-only, or another "
        "user's): make it writable (never remove it" in refused.stderr
    )
    os.chmod(f"{path}-wal", 0o644)
    refused = without_override("-m", "ledger", *propose, env=env)
    assert "its -shm file is not writable" in refused.stderr
    os.chmod(shm, 0o644)
    proposed = without_override("-m", "ledger", *propose, env=env)
    assert proposed.returncode == 0, proposed.stderr
    assert "attempt to write a readonly database" not in refused.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to hand the files to another user")
def test_a_ledger_in_a_directory_this_user_may_not_write_is_backed_up(tmp_path: Path) -> None:
    # Given a ledger in another user's directory, where SQLite cannot make the -shm
    # file a read needs (as on a read-only file system)
    folder = tmp_path / "folder"
    folder.mkdir()
    led, _ = write_ledger(folder / "l.db")
    admin_token = led.admin().issue_admin_token()
    digest = str(led.digest())
    led.close()
    for path in (folder, folder / "l.db"):
        os.chown(path, 65534, 65534)
    os.chmod(folder, 0o755)
    os.chmod(folder / "l.db", 0o644)
    out = tmp_path / "out"
    out.mkdir()
    # When this user backs it up into a directory of its own
    env = {"PROVLEDGER_URL": f"sqlite:///{folder / 'l.db'}", "PROVLEDGER_ADMIN_TOKEN": admin_token}
    made = without_override("-m", "ledger", "backup", str(out / "copy.db"), env=env)
    # Then the copy is made, whole (it was refused: "unable to open database file")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == digest
    with Ledger.open(f"sqlite:///{out / 'copy.db'}?mode=ro") as copy:
        assert str(copy.digest()) == digest and copy.verify().ok
    assert sorted(p.name for p in folder.iterdir()) == ["l.db"]
