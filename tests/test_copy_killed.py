"""``copy`` into a new SQLite file: built beside its name, named once complete.

A copy killed midway (a real ``kill -9``) must leave no file at the target, where
one would open as an empty ledger that verifies: only its hidden partial, which
the next copy into that folder removes. A finished copy is one self-contained file,
readable by its owner alone; a file another process makes at the name meanwhile
is never replaced, nor one that was there (written in place) removed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ledger import Ledger
from ledger.cli import main
from ledger.errors import (
    ConnectionLostError,
    CorruptEventError,
    LedgerNotFoundError,
    StorageError,
)
from ledger.persistence.copy_target import UNTOUCHED_FOR
from ledger.persistence.copying import copy_ledger
from tests.conftest import Clock
from tests.test_copy import build, build_altered

REPO = Path(__file__).resolve().parent.parent
#: The child: a copy that prints "ready" when it reaches the step named, then waits
#: there (in the middle of its write transaction) to be killed.
CHILD = """
import sys, time
from ledger.persistence.copying import copy_ledger

def step(what, reached, total):
    if what == sys.argv[3]:
        print("ready", flush=True)
        time.sleep(600)

copy_ledger(sys.argv[1], sys.argv[2], progress=step)
"""


def urls(tmp_path: Path, clock: Clock) -> tuple[str, str, Path]:
    """A varied source ledger's URL, a new target's URL and its path."""
    source = f"sqlite:///{tmp_path / 'source.db'}"
    build(source, clock)
    return source, *urls_of(tmp_path)


def urls_of(tmp_path: Path) -> tuple[str, Path]:
    """A new target's URL and its path."""
    return f"sqlite:///{tmp_path / 'target.db'}", tmp_path / "target.db"


def partials(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial-" in p.name)


def kill_copy_at(source: str, target: str, step: str) -> int:
    """Run a copy of ``source`` into ``target`` in a child process and SIGKILL it once
    it reached ``step``; its pid."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PROVLEDGER_URL", None)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, source, target, step],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    return child.pid


def cli(*args: str) -> Any:
    return CliRunner().invoke(
        main, list(args), env={"PROVLEDGER_URL": None, "PROVLEDGER_ADMIN_TOKEN": None}
    )


def assert_one_private_file(path: Path) -> None:
    """``path`` is a ledger file alone (no -wal, -shm or partial beside it), 0600."""
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 & ~_umask()
    beside = [p.name for p in path.parent.iterdir() if p.name.startswith(f"{path.name}-")]
    assert beside == []
    assert partials(path.parent) == []
    uri = f"{path.absolute().as_uri()}?mode=ro"
    con = sqlite3.connect(uri, uri=True)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        con.close()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("step", ["events", "views"])
def test_a_copy_killed_midway_leaves_no_file_at_the_target_and_the_next_removes_its_partial(
    tmp_path: Path, clock: Clock, step: str
) -> None:
    # 1. A copy into a new file, SIGKILLed while it writes the log, or builds views.
    source, target, path = urls(tmp_path, clock)
    pid = kill_copy_at(source, target, step)
    # 2. Nothing at the target: it is no ledger, and verify and stats say so.
    assert not os.path.lexists(path)
    with pytest.raises(LedgerNotFoundError):
        Ledger.open(target, create=False)
    for command in ("verify", "stats"):
        refused = cli(command, "--url", target)
        assert refused.exit_code != 0
        assert f"no ledger at {target}" in refused.stderr
    # 3. Only the hidden partial of the killed copy, with its -wal.
    assert f".target.db.partial-{pid}" in partials(tmp_path)
    assert f".target.db.partial-{pid}-wal" in partials(tmp_path)
    # 4. The next copy into the folder removes it, and is one file whose digest is the
    # source's.
    report = copy_ledger(source, target)
    assert_one_private_file(path)
    with Ledger.open(source) as led:
        assert report.digest == led.digest()
    checked = cli("verify", "--url", target, "--against", str(report.digest))
    assert checked.exit_code == 0, checked.output
    assert checked.stdout.startswith(f"ok: {report.digest}")


def test_a_new_file_is_built_beside_its_name_and_named_once_complete(
    tmp_path: Path, clock: Clock
) -> None:
    source, target, path = urls(tmp_path, clock)
    seen: list[tuple[bool, tuple[str, ...], int]] = []

    def step(what: str, reached: int, total: int) -> None:
        partial = tmp_path / f".target.db.partial-{os.getpid()}"
        mode = stat.S_IMODE(partial.stat().st_mode)
        seen.append((os.path.lexists(path), tuple(partials(tmp_path)[:1]), mode))

    report = copy_ledger(source, target, progress=step)
    # While the copy runs: no file at the name; its partial, 0600.
    assert seen
    assert set(seen) == {(False, (f".target.db.partial-{os.getpid()}",), 0o600 & ~_umask())}
    # Once done: one file, 0600, holding the copy.
    assert_one_private_file(path)
    with Ledger.open(target, create=False) as copy:
        assert copy.digest() == report.digest
        assert copy.verify().ok


def test_a_file_another_process_makes_at_the_target_meanwhile_is_never_replaced(
    tmp_path: Path, clock: Clock
) -> None:
    # 1. Another process makes its ledger at the target's name while the copy
    # builds its views.
    source, target, _ = urls(tmp_path, clock)
    theirs: list[tuple[int, str]] = []

    def step(what: str, reached: int, total: int) -> None:
        if what == "views" and not theirs:
            with Ledger.open(f"{target}?timeout=1") as other:
                other.admin().bootstrap_admin_token()
                theirs.append((other.position, str(other.digest())))

    # 2. The copy is refused naming the target; their ledger stays as it was; the
    # copy's partial is gone.
    with pytest.raises(StorageError, match=r"was made by another process while the copy"):
        copy_ledger(source, target, progress=step)
    with Ledger.open(target, create=False) as other:
        assert (other.position, str(other.digest())) == theirs[0]
    assert partials(tmp_path) == []


def test_a_target_there_already_written_to_meanwhile_is_never_removed(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1. The target holds an empty ledger (it is written in place); another
    # process writes to it after the copy found it empty, before the copy opens it.
    source, target, _ = urls(tmp_path, clock)
    Ledger.open(target).close()
    opened = Ledger.open
    other: list[tuple[int, str]] = []

    def open_(cls: type[Ledger], /, url: str | None = None, **kwargs: Any) -> Ledger:
        if url == target and not other:
            with opened(target) as theirs:
                theirs.admin().bootstrap_admin_token()
                other.append((theirs.position, str(theirs.digest())))
        return opened(url, **kwargs)

    monkeypatch.setattr(Ledger, "open", classmethod(open_))

    # 2. The copy is refused as not empty; the other ledger stays as it was.
    with pytest.raises(StorageError, match="is not empty"):
        copy_ledger(source, target)
    monkeypatch.undo()
    with Ledger.open(target, create=False) as theirs:
        assert (theirs.position, str(theirs.digest())) == other[0]


@pytest.mark.parametrize("there", [False, True])
def test_a_copy_that_fails_as_it_commits_is_removed_or_said_to_be_perhaps_committed(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, there: bool
) -> None:
    # 1. The target's commit goes through, but its connection is lost as it
    # answers; the target is a new file, or an empty ledger written in place.
    from ledger.engine import Engine

    source, target, path = urls(tmp_path, clock)
    if there:
        Ledger.open(target).close()
    locked = Engine.locked

    @contextmanager
    def lost(self: Engine, what: str = "maintenance") -> Iterator[Any]:
        with locked(self, what) as w:
            yield w
        if what == "copy":
            raise ConnectionLostError(f"ledger {self.url!r}: lost while committing")

    monkeypatch.setattr(Engine, "locked", lost)
    with Ledger.open(source) as led:
        digest = str(led.digest())

    # 2. A new file: never named, its partial removed, the target named in the
    # message (not the partial).
    if not there:
        with pytest.raises(ConnectionLostError) as failed:
            copy_ledger(source, target)
        assert str(failed.value) == (
            f"ledger {target!r}: lost while committing; no file was made at the target "
            "(the copy built beside it is removed)"
        )
        assert not os.path.lexists(path)
        assert partials(tmp_path) == []
        return
    # 3. Written in place: refused as perhaps committed, naming the digest to
    # check; the file stays.
    with pytest.raises(ConnectionLostError, match=f"may have been committed.*{digest}"):
        copy_ledger(source, target)
    monkeypatch.undo()
    with Ledger.open(target, create=False) as copy:
        assert str(copy.digest()) == digest


def test_a_failure_once_the_copy_has_committed_fails_nothing(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1. Closing either ledger fails, after the copy committed.
    source, target, path = urls(tmp_path, clock)
    close = Ledger.close

    def failing(self: Ledger) -> None:
        close(self)
        raise StorageError("closing failed")

    monkeypatch.setattr(Ledger, "close", failing)

    # 2. The copy is reported, and is at its name, one file.
    report = copy_ledger(source, target)
    monkeypatch.undo()
    assert_one_private_file(path)
    with Ledger.open(target, create=False) as copy:
        assert copy.digest() == report.digest


def test_a_failed_copy_leaves_a_file_made_at_the_target_meanwhile(
    tmp_path: Path, clock: Clock
) -> None:
    # 1. A source the copy fails on (an event altered), and a file put at the
    # target's name by another program while the copy runs.
    source, target, path = f"sqlite:///{tmp_path / 'source.db'}", *urls_of(tmp_path)
    build_altered(source, clock, tmp_path / "source.db")

    def step(what: str, reached: int, total: int) -> None:
        if what == "events" and not (tmp_path / "theirs.db").exists():
            (tmp_path / "theirs.db").write_bytes(b"their data")
            os.replace(tmp_path / "theirs.db", path)

    # 2. The copy fails; the file at the name is not its own and stays.
    with pytest.raises(CorruptEventError, match="position 3 was altered"):
        copy_ledger(source, target, progress=step)
    assert path.read_bytes() == b"their data"
    assert partials(tmp_path) == []


def test_partials_of_gone_processes_are_removed_and_a_running_ones_kept(
    tmp_path: Path, clock: Clock
) -> None:
    # 1. Partials beside the target: a gone process's (with its -wal, and one to
    # another name), a running one's, and a name that is no partial's.
    source, target, _ = urls(tmp_path, clock)
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        for name in (
            f".target.db.partial-{gone.pid}",
            f".target.db.partial-{gone.pid}-wal",
            f".2026-11-30.db.partial-{gone.pid}",
            f".2026-12-01.db.partial-{gone.pid}",
            f".2026-12-02.db.partial-{gone.pid}",
            f".target.db.partial-{running.pid}",
            ".target.db.partial-x",
            ".target.db.partial-99999999999999999999",
        ):
            (tmp_path / name).write_bytes(b"left")
            os.chmod(tmp_path / name, 0o600)
        # Those to other names: one left long ago; one touched lately (its writer
        # may be one this process cannot see, in another container); one that
        # others may read, as no partial is made
        long_ago = time.time() - UNTOUCHED_FOR - 60
        os.utime(tmp_path / f".2026-11-30.db.partial-{gone.pid}", (long_ago, long_ago))
        os.utime(tmp_path / f".2026-12-02.db.partial-{gone.pid}", (long_ago, long_ago))
        os.chmod(tmp_path / f".2026-12-02.db.partial-{gone.pid}", 0o644)
        # 2. A copy into that folder removes the gone process's to its own name, and
        # to another name the one left long ago, private, only
        copy_ledger(source, target)
        assert partials(tmp_path) == sorted(
            [
                f".2026-12-01.db.partial-{gone.pid}",
                f".2026-12-02.db.partial-{gone.pid}",
                f".target.db.partial-{running.pid}",
                ".target.db.partial-99999999999999999999",
                ".target.db.partial-x",
            ]
        )
    finally:
        running.kill()
        running.wait()


def test_a_second_copy_into_the_same_new_file_in_one_process_is_refused(
    tmp_path: Path, clock: Clock
) -> None:
    source, target, path = urls(tmp_path, clock)
    refused: list[str] = []

    def step(what: str, reached: int, total: int) -> None:
        if not refused:
            with pytest.raises(StorageError) as second:
                copy_ledger(source, target)
            refused.append(str(second.value))

    report = copy_ledger(source, target, progress=step)
    assert refused == [
        f"copy refused: another copy into {path} is running in this process; wait for it "
        "to end (nothing was written)"
    ]
    with Ledger.open(target, create=False) as copy:
        assert copy.digest() == report.digest


def test_a_name_too_long_for_the_partial_beside_it_is_refused(tmp_path: Path, clock: Clock) -> None:
    source, _, _ = urls(tmp_path, clock)
    name = "t" * 240 + ".db"
    with pytest.raises(StorageError, match=r"copy refused: the name 't+\.db' is too long"):
        copy_ledger(source, f"sqlite:///{tmp_path / name}")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("source")) == []


@pytest.mark.parametrize("left", ["-wal", "-journal"])
def test_a_file_an_earlier_database_left_at_the_name_is_refused_not_applied_to_the_copy(
    tmp_path: Path, clock: Clock, left: str
) -> None:
    # 1. An earlier database at the target's name was deleted without its SQLite
    # files: the first open of a file given that name would apply them to it.
    source, target, path = urls(tmp_path, clock)
    stale = Path(f"{path}{left}")
    stale.write_bytes(b"an earlier database's frames, past a header" * 2)
    # 2. A copy, and a backup, to that name are refused naming the file; nothing is
    # made at the name, and the file is left as it was.
    with pytest.raises(StorageError, match=rf"copy refused: {path}{left} lies at the name"):
        copy_ledger(source, target)
    backup = CliRunner().invoke(
        main, ["backup", str(path), "--url", source], env={"PROVLEDGER_ADMIN_TOKEN": None}
    )
    assert backup.exit_code == 1
    assert f"backup refused: {path}{left} lies at the name" in backup.stderr
    assert (
        not path.exists()
        and stale.read_bytes() == b"an earlier database's frames, past a header" * 2
    )
    assert partials(tmp_path) == []


def test_what_a_read_only_open_leaves_at_the_name_is_no_obstacle(
    tmp_path: Path, clock: Clock
) -> None:
    # An empty -wal and a -shm (what a read-only open of a ledger moved away since
    # leaves) hold nothing SQLite would apply: the copy is made, and whole.
    source, target, path = urls(tmp_path, clock)
    Path(f"{path}-wal").write_bytes(b"")
    Path(f"{path}-shm").write_bytes(b"\0" * 32768)
    report = copy_ledger(source, target)
    with Ledger.open(f"{target}?mode=ro") as copy:
        assert copy.digest() == report.digest and copy.verify().ok


def test_a_partial_named_for_no_process_is_left_alone_not_a_crash(
    tmp_path: Path, clock: Clock
) -> None:
    # A name whose number no process id can be (above 2**31) fails no copy.
    source, target, path = urls(tmp_path, clock)
    odd = tmp_path / ".target.db.partial-9999999999"
    odd.write_bytes(b"left")
    copy_ledger(source, target)
    assert path.exists() and odd.exists()


def test_one_new_file_named_two_ways_is_copied_into_once_at_a_time(tmp_path: Path) -> None:
    # A folder reached through a link is the same folder: a second copy into the
    # same file, spelt through the link, is refused while the first is built.
    from ledger.persistence.copy_target import claim_partial, remove_partial

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    first = claim_partial(str(tmp_path / "real" / "x.db"))
    assert first is not None
    try:
        with pytest.raises(StorageError, match=r"another copy into .* is running in this process"):
            claim_partial(str(tmp_path / "link" / "x.db"))
        assert Path(first).exists()
    finally:
        remove_partial(first)


def test_ctrl_c_during_a_copy_says_the_target_tells_whether_it_committed(
    tmp_path: Path, clock: Clock
) -> None:
    import psycopg

    from tests.conftest import new_pg_schema_url

    # Given a source, and a PostgreSQL target whose events table another session
    # holds locked (the copy waits for it)
    source = f"sqlite:///{tmp_path / 'source.db'}"
    build(source, clock)
    target, drop = new_pg_schema_url()
    schema = target.rpartition("schema=")[2]
    try:
        Ledger.open(target).close()
        holder = psycopg.connect(target.partition("?")[0])
        holder.execute(f"LOCK TABLE {schema}.provledger_events IN ACCESS EXCLUSIVE MODE")
        watcher = psycopg.connect(target.partition("?")[0], autocommit=True)
        env = dict(os.environ, PYTHONPATH=str(REPO), PROVLEDGER_URL=source)
        child = subprocess.Popen(
            [sys.executable, "-m", "ledger", "copy", "--to", target],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            waiting = (  # a session waiting for the holder's lock: the copy's
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY (pg_blocking_pids(pid))"
            )
            deadline = time.monotonic() + 30
            while watcher.execute(waiting, (holder.info.backend_pid,)).fetchone() == (0,):
                assert child.poll() is None, child.communicate()
                assert time.monotonic() < deadline, "the copy never waited for the lock"
                time.sleep(0.05)
            # When the person at the terminal presses Ctrl-C
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            holder.rollback()
            holder.close()
            watcher.close()
        # Then it exits 130, pointing at the target's digest, not the source's history
        assert child.returncode == 130, err
        assert err.decode().splitlines()[-1] == (
            "error: interrupted; a copy is one transaction: its target holds the whole "
            "copy or nothing of it (provledger digest --url TARGET shows which)"
        )
        with Ledger.open(target, create=False) as led:
            assert led.position == 0
    finally:
        drop()
