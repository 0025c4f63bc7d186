"""``backup``: a whole copy of a live SQLite ledger, and what restoring one means.

A copy made while writers run must open and verify, and the live ledger must
extend the digest it prints; a restored copy takes writes again, passes
``verify --against`` its own digest and refuses one taken after it. Refusals
name what was wrong and change nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger import Kind, Ledger
from ledger.cli import main
from ledger.persistence.copy_target import UNTOUCHED_FOR
from tests.faults import small_disk

ROOT = Path(__file__).resolve().parent.parent

_WRITER = textwrap.dedent(
    """
    import sys
    from ledger import Kind, Ledger
    url, agent_token, reviewer_token, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with Ledger.open(url) as led:
        agent, reviewer = led.authenticate(agent_token), led.authenticate(reviewer_token)
        for i in range(n):
            reviewer.accept(
                agent.propose(scope="p", claim_key=f"k.{i}", value=i, kind=Kind.FACT, id=f"W{i}")
            )
            if i == 20:
                print("writing", flush=True)
    """
)


def new_ledger(db: Path) -> tuple[str, str, str]:
    """A ledger with an agent and a reviewer; their tokens."""
    url = f"sqlite:///{db}"
    with Ledger.open(url, create=True) as led:
        admin = led.admin()
        admin.grant("agent", scope="p", roles=["propose", "read"])
        admin.grant("reviewer", scope="p", roles=["approve", "read"])
        return url, admin.issue_token("agent"), admin.issue_token("reviewer")


def run_backup(*args: str) -> Result:
    return cli("backup", *args)


def cli(*args: str) -> Result:
    return CliRunner().invoke(
        main, list(args), env={"PROVLEDGER_URL": None, "PROVLEDGER_ADMIN_TOKEN": None}
    )


def state(url: str) -> tuple[int, str, bytes]:
    with Ledger.open(url) as led:
        return led.position, str(led.digest()), Path(url.removeprefix("sqlite:///")).read_bytes()


def test_a_backup_taken_while_another_process_writes_opens_and_verifies(tmp_path: Path) -> None:
    url, agent, reviewer = new_ledger(tmp_path / "live.db")
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, url, agent, reviewer, "600"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert writer.stdout is not None
    assert writer.stdout.readline() == "writing\n"  # the writer is under way
    made = run_backup(str(tmp_path / "copy.db"), "--url", url)
    assert writer.wait(timeout=120) == 0
    assert made.exit_code == 0, (made.output, made.exception)
    kept = made.stdout.strip()
    assert "backed up" in made.stderr
    # The copy is whole: it opens, its views equal a replay, and it is the digest printed.
    copy = cli("verify", "--url", f"sqlite:///{tmp_path / 'copy.db'}", "--against", kept)
    assert copy.exit_code == 0, copy.output
    assert copy.stdout.startswith(f"ok: {kept}")
    # The live ledger went on writing and still extends the copy's digest.
    live = cli("verify", "--url", url, "--against", kept)
    assert live.exit_code == 0, live.output
    with Ledger.open(url) as led:
        assert led.position == 2 * 600 + 6
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("copy", ".copy"))) == [
        "copy.db"
    ]


def test_a_restored_backup_takes_writes_and_refuses_digests_taken_after_it(
    tmp_path: Path,
) -> None:
    url, agent, _ = new_ledger(tmp_path / "live.db")
    with Ledger.open(url) as led:
        led.authenticate(agent).propose(scope="p", claim_key="a", value=1, kind=Kind.FACT, id="A")
    made = run_backup(str(tmp_path / "copy.db"), "--url", url)
    assert made.exit_code == 0, made.output
    at_backup = made.stdout.strip()
    with Ledger.open(url) as led:
        led.authenticate(agent).propose(scope="p", claim_key="b", value=2, kind=Kind.FACT, id="B")
        led.admin().revoke_token(agent)
        after_backup = str(led.digest())
    # Restore: the ledger's files replaced by the copy, then writing goes on.
    for end in ("-wal", "-shm"):
        Path(f"{tmp_path / 'live.db'}{end}").unlink(missing_ok=True)
    shutil.copyfile(tmp_path / "copy.db", tmp_path / "live.db")
    with Ledger.open(url) as led:
        # What was written after the backup is gone: the agent's token works again.
        session = led.authenticate(agent)
        session.propose(scope="p", claim_key="c", value=3, kind=Kind.FACT, id="C")
        assert led.verify(against=at_backup).ok
        refused = led.verify(against=after_backup)
    assert not refused.ok and refused.problem is not None
    assert cli("verify", "--url", url, "--against", after_backup).exit_code == 1


def test_a_backup_refuses_an_existing_file_and_leaves_both_unchanged(tmp_path: Path) -> None:
    url, _, _ = new_ledger(tmp_path / "live.db")
    (tmp_path / "old.db").write_bytes(b"an earlier backup")
    before = state(url)
    refused = run_backup(str(tmp_path / "old.db"), "--url", url)
    assert refused.exit_code == 1
    assert refused.stderr == (
        f"error: backup refused: {tmp_path / 'old.db'} exists; give a new file "
        "(nothing was written)\n"
    )
    assert (tmp_path / "old.db").read_bytes() == b"an earlier backup"
    assert state(url) == before


def test_a_backup_refuses_the_ledger_itself(tmp_path: Path) -> None:
    url, _, _ = new_ledger(tmp_path / "live.db")
    before = state(url)
    refused = run_backup(str(tmp_path / "live.db"), "--url", url)
    assert refused.exit_code == 1
    assert f"{tmp_path / 'live.db'} exists" in refused.stderr
    assert state(url) == before


@pytest.mark.parametrize("end", ["-journal", "-wal", "-shm"])
def test_a_backup_refuses_a_file_sqlite_keeps_beside_the_ledger(tmp_path: Path, end: str) -> None:
    # (written as the ledger's -journal, the backup made the ledger unopenable, and
    # the next opening of the ledger by another tool removed it)
    url, _, _ = new_ledger(tmp_path / "live.db")
    refused = run_backup(str(tmp_path / f"live.db{end}"), "--url", url)
    assert refused.exit_code == 1
    assert refused.stderr == (
        f"error: backup refused: {tmp_path / f'live.db{end}'} is a file SQLite keeps beside "
        "the ledger (its -wal, -shm or -journal), where the next opening of the ledger would "
        "take it for its own or remove it; give another file (nothing was written)\n"
    )
    assert not (tmp_path / "live.db-journal").exists()
    with Ledger.open(url) as led:
        assert led.verify().ok


def test_erased_bytes_leave_a_backup_made_where_sqlite_deletes_without_overwriting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a build whose SQLite leaves deleted content in free pages (secure_delete
    # off by default, as on python.org, macOS and Windows builds), and a ledger of
    # 300 small captures, each holding a marker 20 times
    connect = sqlite3.connect

    def connect_as_such_a_build(*args: object, **kwargs: object) -> sqlite3.Connection:
        con = connect(*args, **kwargs)  # type: ignore[arg-type]
        con.execute("PRAGMA secure_delete=OFF")
        return con

    monkeypatch.setattr(sqlite3, "connect", connect_as_such_a_build)
    url = f"sqlite:///{tmp_path / 'live.db'}"
    with Ledger.open(url, create=True) as led:
        admin = led.admin()
        admin.grant("agent", scope="p", roles=["propose", "read"])
        agent = led.authenticate(admin.issue_token("agent"))
        refs = [
            agent.get(
                agent.capture(
                    scope="p",
                    uri=f"https://x.test/{i}",
                    content=f"ZQX{i:04d}-".encode() * 20,
                    id=f"S{i}",
                )
            ).evidence
            for i in range(300)
        ]
    # When it is backed up, and S1's bytes are erased in the backup
    backup = tmp_path / "b.db"
    assert run_backup(str(backup), "--url", url).exit_code == 0
    assert refs[1] is not None
    with Ledger.open(f"sqlite:///{backup}") as copy:
        assert copy.admin().erase_snapshot(refs[1]["snapshot_ref"], reason="request").scrubbed
    # Then no copy of them is left anywhere in the backup's file
    found = b"".join(p.read_bytes() for p in tmp_path.glob("b.db*")).count(b"ZQX0001-")
    assert found == 0
    assert (tmp_path / "b.db").read_bytes().count(b"ZQX0002-") == 20  # (the others stay)


def test_ctrl_c_during_a_backup_says_the_ledger_is_unchanged_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.cli import admin as admin_cli

    url, _, _ = new_ledger(tmp_path / "live.db")
    before = state(url)

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(admin_cli, "_vacuum_into", interrupted)
    result = run_backup(str(tmp_path / "b.db"), "--url", url)
    assert result.exit_code == 130
    assert result.stderr == (
        "error: interrupted; the ledger is unchanged, and a backup is put under its name "
        "whole or not at all (its partial file is removed)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("b.db", ".b.db"))) == []
    assert state(url) == before


def test_a_backup_refuses_a_missing_directory(tmp_path: Path) -> None:
    url, _, _ = new_ledger(tmp_path / "live.db")
    refused = run_backup(str(tmp_path / "nowhere" / "copy.db"), "--url", url)
    assert refused.exit_code == 1
    assert f"the directory {tmp_path / 'nowhere'} does not exist" in refused.stderr
    assert not (tmp_path / "nowhere").exists()


def test_a_backup_of_a_postgresql_ledger_is_refused_naming_pg_dump(
    pg_url: str, tmp_path: Path
) -> None:
    refused = run_backup(str(tmp_path / "copy.db"), "--url", pg_url)
    assert refused.exit_code == 1
    assert "is not an SQLite file" in refused.stderr and "pg_dump --schema" in refused.stderr
    assert pg_url.split("?")[0] in refused.stderr
    assert not (tmp_path / "copy.db").exists()


def test_a_backup_onto_a_full_disk_fails_whole_and_leaves_nothing(tmp_path: Path) -> None:
    url, agent, _ = new_ledger(tmp_path / "live.db")
    with Ledger.open(url) as led:
        for i in range(2):  # more than the small disk holds
            led.authenticate(agent).capture(
                scope="p", uri=f"https://x.test/big{i}", content=os.urandom(900_000), id=f"B{i}"
            )
    before = state(url)
    (tmp_path / "disk").mkdir()
    with small_disk(tmp_path / "disk", "1m") as disk:
        refused = run_backup(str(disk.mount / "copy.db"), "--url", url)
        assert refused.exit_code == 1
        assert refused.stderr.startswith(f"error: backup to {disk.mount / 'copy.db'} failed: ")
        # the disk it names is the copy's (the ledger's has room)
        assert "failed: the disk it is written to is full" in refused.stderr
        assert "the ledger is unchanged and no backup was written" in refused.stderr
        assert list(disk.mount.iterdir()) == []
    assert state(url) == before


def test_a_backup_removes_what_backups_killed_midway_left_in_its_directory(
    tmp_path: Path,
) -> None:
    # Given the hidden copies killed backups to copy.db and to other.db left (whole
    # snapshot bytes an erasure would never reach: backups named by date may never
    # be made to the same name again), and one of a backup still running
    url, _, _ = new_ledger(tmp_path / "live.db")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(gone.stdout)
    left = [tmp_path / f".copy.db.partial-{dead}", tmp_path / f".copy.db.partial-{dead}-journal"]
    for path in left:
        path.write_bytes(b"snapshot bytes")
    running = tmp_path / f".copy.db.partial-{os.getppid()}"
    running.write_bytes(b"in progress")
    # (to other names: one left long ago, and one touched lately, whose writer may
    # be one this process cannot see, in another container)
    other = tmp_path / f".other.db.partial-{dead}"
    lately = tmp_path / f".lately.db.partial-{dead}"
    for path in (other, lately):
        path.write_bytes(b"another destination's")
        os.chmod(path, 0o600)
    long_ago = time.time() - UNTOUCHED_FOR - 60
    os.utime(other, (long_ago, long_ago))
    # nor is a file of a like name that is no such copy, or a folder of that name
    notes = tmp_path / f".copy.db.partial-{dead}-notes.txt"
    notes.write_bytes(b"someone's notes")
    folder = tmp_path / f".copy.db.partial-{dead}-wal"
    folder.mkdir()

    # When a backup to copy.db is made
    made = run_backup(str(tmp_path / "copy.db"), "--url", url)

    # Then the dead ones are gone, whatever their name; the running one's and
    # another file's stay
    assert made.exit_code == 0, made.output
    assert not any(path.exists() for path in (*left, other))
    assert running.exists() and lately.exists() and notes.exists() and folder.is_dir()


def test_a_backup_prints_json_for_scripts(tmp_path: Path) -> None:
    dest = "copy.db"
    url, _, _ = new_ledger(tmp_path / "live.db")
    made = run_backup(str(tmp_path / dest), "--url", url, "--json")
    assert made.exit_code == 0, made.output
    with Ledger.open(url) as led:
        digest = led.digest()
    assert json.loads(made.stdout) == {
        "url": url,
        "backup": str(tmp_path / dest),
        "position": digest.position,
        "events": digest.size,
        "digest": str(digest),
        "problem": None,
    }


@pytest.mark.parametrize("as_json", [False, True])
def test_a_backup_of_a_tampered_log_is_kept_but_says_what_verify_finds(
    tmp_path: Path, as_json: bool
) -> None:
    # Given an event's stored bytes altered behind the ledger's back
    url, agent, _ = new_ledger(tmp_path / "live.db")
    with Ledger.open(url) as led:
        led.authenticate(agent).propose(scope="p", claim_key="k", value="a" * 40, kind="fact")
        last = led.position
    with sqlite3.connect(tmp_path / "live.db") as con:
        con.execute("DROP TRIGGER stored_events_no_update")
        (state_,) = con.execute("SELECT state FROM stored_events WHERE rowid=?", (last,)).fetchone()
        changed = bytes(state_).replace(b"a" * 40, b"b" * 40)
        con.execute("UPDATE stored_events SET state=? WHERE rowid=?", (changed, last))
    con.close()
    # When it is backed up, the backup is written (all there is to restore from),
    # and the command exits 1 naming what verify finds, not "backed up"
    dest = tmp_path / "copy.db"
    made = run_backup(str(dest), "--url", url, *(["--json"] if as_json else []))
    assert made.exit_code == 1, made.output
    assert dest.exists()
    said = f"the stored bytes at position {last} differ from what was appended"
    assert made.stderr.startswith(f"error: the backup {dest} was written (digest ")
    assert f"but the log fails verify's log check: {said} (run `provledger verify`)" in (
        made.stderr
    )
    if as_json:
        assert said in json.loads(made.stdout)["problem"]
    else:
        assert "backed up" not in made.stderr


def test_a_backup_of_a_ledger_written_by_0_1_0_writes_nothing_to_it(tmp_path: Path) -> None:
    # Opened read-only, a ledger whose views an earlier version built is copied as
    # it is: the copy upgrades when it is next opened, the original is never touched.
    old = tmp_path / "old.db"
    shutil.copyfile(ROOT / "tests" / "fixtures" / "ledger-0.1.0.db", old)
    before = old.read_bytes()
    made = run_backup(str(tmp_path / "copy.db"), "--url", f"sqlite:///{old}?mode=ro")
    assert made.exit_code == 0, (made.output, made.exception)
    assert old.read_bytes() == before
    with Ledger.open(f"sqlite:///{tmp_path / 'copy.db'}") as copy:
        assert str(copy.digest()) == made.stdout.strip()
        assert copy.verify().ok


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_ledger_file_and_its_wal_are_its_owners_alone_whatever_the_umask(
    tmp_path: Path,
) -> None:
    # It holds every record and the bytes captured as evidence.
    before = os.umask(0o022)  # SQLite would make the file 0644 under it
    try:
        db = tmp_path / "new.db"
        with Ledger.open(f"sqlite:///{db}") as led:
            led.admin().grant("agent", scope="p", roles=["read"])
            modes = {p.name: _mode(p) for p in tmp_path.iterdir()}
        assert modes == {"new.db": 0o600, "new.db-wal": 0o600, "new.db-shm": 0o600}
        # A file that exists keeps its own: sharing it with a group is the owner's call.
        db.chmod(0o660)
        with Ledger.open(f"sqlite:///{db}") as led:
            led.admin().grant("agent", scope="p", roles=["propose"])
        assert _mode(db) == 0o660
    finally:
        os.umask(before)


def test_a_backup_is_no_more_readable_than_its_ledger(tmp_path: Path) -> None:
    before = os.umask(0o022)
    try:
        url, _agent, _reviewer = new_ledger(tmp_path / "l.db")
        assert run_backup(str(tmp_path / "b1.db"), "--url", url).exit_code == 0
        assert _mode(tmp_path / "b1.db") == 0o600
        (tmp_path / "l.db").chmod(0o640)
        assert run_backup(str(tmp_path / "b2.db"), "--url", url).exit_code == 0
        assert _mode(tmp_path / "b2.db") == 0o640
    finally:
        os.umask(before)


def test_a_new_ledger_at_a_link_to_no_file_yet_is_its_owners_alone(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    link = tmp_path / "ledger.db"
    link.symlink_to(tmp_path / "data" / "real.db")
    before = os.umask(0o022)
    try:
        with Ledger.open(f"sqlite:///{link}") as led:
            led.admin().grant("agent", scope="p", roles=["read"])
    finally:
        os.umask(before)
    assert _mode(tmp_path / "data" / "real.db") == 0o600


def test_a_backup_takes_the_ledgers_group_or_gives_no_group_a_read() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:  # pragma: no cover
        pytest.skip("needs root and setpriv to run a backup as a member of another group")
    # Outside pytest's own folder, which only root may enter.
    where = Path(tempfile.mkdtemp(prefix="provledger-group-"))
    try:
        where.chmod(0o777)
        _backups_by_root_and_by_a_member(where)
    finally:
        shutil.rmtree(where)


def _ledger_with_admin_token(where: Path) -> tuple[str, str]:
    """(URL, admin token) of a new ledger at ``where/l.db``."""
    url, _agent, _reviewer = new_ledger(where / "l.db")
    with Ledger.open(url) as led:
        admin_token = led.admin().bootstrap_admin_token()
    assert admin_token is not None
    return url, admin_token


def _backups_by_root_and_by_a_member(where: Path) -> None:
    url, admin_token = _ledger_with_admin_token(where)
    for end in ("", "-wal", "-shm"):
        if (where / f"l.db{end}").exists():
            os.chown(where / f"l.db{end}", 1234, 2000)
            (where / f"l.db{end}").chmod(0o640)
    # Root gives the copy the ledger's group.
    root = run_backup(str(where / "b1.db"), "--url", url, "--admin-token", admin_token)
    assert root.exit_code == 0, root.output
    assert ((where / "b1.db").stat().st_gid, _mode(where / "b1.db")) == (2000, 0o640)
    # A member of its group whose own group is another gives the copy that group.
    member = _backup_as(where, url, admin_token, "b2.db", "--groups=2000")
    assert member.returncode == 0, member.stderr
    assert _owner_and_mode(where / "b2.db") == (4321, 2000, 0o640)
    # One who is not (the ledger readable by everyone) cannot: no group reads more of
    # the copy than everyone does.
    for end in ("", "-wal", "-shm"):
        if (where / f"l.db{end}").exists():
            (where / f"l.db{end}").chmod(0o664)
    other = _backup_as(where, url, admin_token, "b3.db", "--clear-groups")
    assert other.returncode == 0, other.stderr
    assert _owner_and_mode(where / "b3.db") == (4321, 100, 0o604)


def _backup_as(
    where: Path, url: str, admin_token: str, name: str, groups: str
) -> subprocess.CompletedProcess[str]:
    """``provledger backup`` run as user 4321 of group 100 (and ``groups``)."""
    return subprocess.run(
        [
            *("setpriv", "--reuid=4321", "--regid=100", groups),
            *("--inh-caps=-all", "--bounding-set=-all"),
            *(sys.executable, "-m", "ledger", "backup", str(where / name)),
            *("--url", f"{url}?mode=ro"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PROVLEDGER_ADMIN_TOKEN": admin_token, "HOME": str(where)},
        timeout=120,
    )


def _owner_and_mode(path: Path) -> tuple[int, int, int]:
    found = path.stat()
    return found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)


def test_a_backup_into_a_directory_the_user_may_not_write_says_so() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:  # pragma: no cover
        pytest.skip("needs root and setpriv to run a backup as another user")
    where = Path(tempfile.mkdtemp(prefix="provledger-nowrite-"))
    try:
        where.chmod(0o777)
        url, admin_token = _ledger_with_admin_token(where)
        for end in ("", "-wal", "-shm"):
            if (where / f"l.db{end}").exists():
                (where / f"l.db{end}").chmod(0o644)
        (where / "kept").mkdir(mode=0o555)
        refused = _backup_as(where, url, admin_token, "kept/b.db", "--clear-groups")
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr == (
            f"error: backup to {where / 'kept' / 'b.db'} failed: this user may not create "
            f"files in {where / 'kept'}; the ledger is unchanged and no backup was "
            "written: back up into a directory you may write\n"
        )
        assert list((where / "kept").iterdir()) == []
    finally:
        shutil.rmtree(where)
