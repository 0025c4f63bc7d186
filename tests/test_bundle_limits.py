"""A bundle of large, repetitive values unpacks to more than `verify-bundle`
unpacks unless told: its writer says so, and the auditor can say how much."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import InvalidInputError, Kind, Ledger, Session
from ledger.bundle import verify as bundle_verify
from ledger.bundle import verify_bundle, write_bundle
from ledger.cli import main
from ledger.heads import generate_key


def _agent_and_boss(led: Ledger) -> tuple[Session, Session, str]:
    """A proposer and an approver-auditor in scope ``p``, and the latter's token."""
    admin = led.admin()
    admin.grant("agent", scope="p", roles=["propose", "read"])
    admin.grant("boss", scope="p", roles=["approve", "read", "audit"])
    boss_token = admin.issue_token("boss")
    return led.authenticate(admin.issue_token("agent")), led.authenticate(boss_token), boss_token


def _big_bundle(tmp_path: Path) -> tuple[Path, Path, str]:
    """(ledger file, key, principal's token) of a report resting on four records
    of 300 KB of log lines each (they pack a thousand times smaller)."""
    path = tmp_path / "l.db"
    with Ledger.open(f"sqlite:///{path}") as led:
        agent, boss, boss_token = _agent_and_boss(led)
        value = {"log": "2026-01-01 INFO request ok status=200\n" * 8000}
        logs = [
            agent.propose("p", f"log.{i}", value, Kind.FACT, id=f"L{i}", accepted_by=boss)
            for i in range(4)
        ]
        agent.propose("p", "report", "weekly", Kind.REPORT, parents=logs, id="R", accepted_by=boss)
    generate_key(tmp_path / "key")
    return path, tmp_path / "key", boss_token


def test_a_bundle_larger_than_the_default_says_so_and_verifies_when_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given verify-bundle's default of 1 MiB here (256 MiB in use), and a bundle over it
    monkeypatch.setattr(bundle_verify, "MAX_UNPACKED", 1 << 20)
    path, key, token = _big_bundle(tmp_path)
    runner = CliRunner()
    env = {"PROVLEDGER_URL": f"sqlite:///{path}", "PROVLEDGER_TOKEN": token}

    # When it is written, the writer warns, saying what verify-bundle needs
    out = str(tmp_path / "r.zip")
    written = runner.invoke(main, ["bundle", "R", "--key", str(key), "-o", out], env=env)
    assert written.exit_code == 0, written.output
    warning = written.stderr.strip()
    assert warning.startswith("warning: the bundle unpacks to "), warning
    needs = int(warning.rsplit(" ", 1)[1])
    assert needs > 1 << 20

    # Then verify-bundle cannot check it by default (exit 3), naming the option and the figure
    pub = str(key) + ".pub"
    refused = runner.invoke(main, ["verify-bundle", out, "--public-key", pub])
    assert refused.exit_code == 3
    assert f"give --max-unpacked {needs}, or max_unpacked={needs}" in refused.stderr

    # And checks it whole when told that much, not one byte less
    told = runner.invoke(
        main, ["verify-bundle", out, "--public-key", pub, "--max-unpacked", str(needs)]
    )
    assert told.exit_code == 0, told.output
    assert verify_bundle(out, pub, max_unpacked=needs).ok
    assert not verify_bundle(out, pub, max_unpacked=needs - 1).ok


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "1000"])
def test_max_unpacked_is_a_positive_whole_number(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidInputError, match="max_unpacked must be a positive whole number"):
        verify_bundle(tmp_path / "missing.zip", max_unpacked=bad)  # type: ignore[arg-type]


# -- the bundle file itself: read only if it is a regular file within the limit -------


def _small_ledger(tmp_path: Path) -> tuple[Path, Path, str]:
    """(ledger file, key, principal's token) of one accepted fact."""
    path = tmp_path / "s.db"
    with Ledger.open(f"sqlite:///{path}") as led:
        agent, boss, boss_token = _agent_and_boss(led)
        agent.propose("p", "fact", "the sky is blue", Kind.FACT, id="F", accepted_by=boss)
    generate_key(tmp_path / "key")
    return path, tmp_path / "key", boss_token


def _small_bundle(tmp_path: Path) -> tuple[Path, str]:
    """(bundle, its public key) of one accepted fact."""
    path, key, token = _small_ledger(tmp_path)
    with Ledger.open(f"sqlite:///{path}") as led:
        write_bundle(led.authenticate(token), "F", key, tmp_path / "f.zip")
    return tmp_path / "f.zip", f"{key}.pub"


def _refused_by_cli(path: str, *args: str) -> str:
    """What verify-bundle says, on one line of stderr, of ``path`` it could not
    check: nothing in it was read (exit 3)."""
    done = CliRunner().invoke(main, ["verify-bundle", path, *args])
    assert done.exit_code == 3, done.output
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_an_endless_device_is_refused_by_name_before_anything_is_read() -> None:
    expected = (
        "/dev/zero is not a bundle: it is a character device, not a regular file; "
        "nothing was read from it"
    )
    report = verify_bundle("/dev/zero")
    assert not report.ok and report.problems == (expected,)
    assert _refused_by_cli("/dev/zero") == f"error: could not check the bundle: {expected}"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "b.zip"
    os.mkfifo(fifo)
    expected = (
        f"{fifo} is not a bundle: it is a FIFO (named pipe), not a regular file; "
        "nothing was read from it"
    )
    assert verify_bundle(fifo).problems == (expected,)
    assert _refused_by_cli(str(fifo)) == f"error: could not check the bundle: {expected}"


def test_a_directory_is_refused_as_no_bundle(tmp_path: Path) -> None:
    (tmp_path / "d.zip").mkdir()
    expected = (
        f"{tmp_path / 'd.zip'} is not a bundle: it is a directory, not a regular file; "
        "nothing was read from it"
    )
    assert verify_bundle(tmp_path / "d.zip").problems == (expected,)
    assert _refused_by_cli(str(tmp_path / "d.zip")) == (
        f"error: could not check the bundle: {expected}"
    )


def test_a_file_over_the_limit_is_refused_naming_its_size_unread(tmp_path: Path) -> None:
    # Given a file one byte over the default limit (sparse: no disk is used)
    big = tmp_path / "big.zip"
    with big.open("wb") as file:
        file.truncate(bundle_verify.MAX_UNPACKED + 1)
    size = bundle_verify.MAX_UNPACKED + 1

    # Then it is refused, naming its size, the limit and how to raise it
    expected = (
        f"{big} is not a bundle: it is {size} bytes, more than the "
        f"{bundle_verify.MAX_UNPACKED} a bundle may be; nothing was read from it (if its "
        f"writer said verify-bundle needs this, give --max-unpacked {size}, or "
        f"max_unpacked={size})"
    )
    assert verify_bundle(big).problems == (expected,)
    assert _refused_by_cli(str(big)) == f"error: could not check the bundle: {expected}"

    # And a limit given in its place holds too
    told = verify_bundle(big, max_unpacked=1000).problem or ""
    assert f"it is {size} bytes, more than the 1000 a bundle may be" in told


def test_an_honest_bundle_verifies_up_to_a_limit_of_its_own_size(tmp_path: Path) -> None:
    bundle, pub = _small_bundle(tmp_path)
    size = bundle.stat().st_size

    # An honest bundle verifies by default, and at a limit of exactly its size
    assert verify_bundle(bundle, pub).ok
    assert verify_bundle(bundle, pub, max_unpacked=size).ok
    done = CliRunner().invoke(main, ["verify-bundle", str(bundle), "--public-key", pub])
    assert done.exit_code == 0 and done.stdout.startswith("ok: bundle of F"), done.output

    # But not at a limit one byte below it, which it is refused by before it is read
    report = verify_bundle(bundle, pub, max_unpacked=size - 1)
    assert report.problem == (
        f"{bundle} is not a bundle: it is {size} bytes, more than the {size - 1} a bundle "
        f"may be; nothing was read from it (if its writer said verify-bundle needs this, "
        f"give --max-unpacked {size}, or max_unpacked={size})"
    )


@pytest.mark.skipif(
    not Path("/proc/self/status").is_file(), reason="no /proc files (regular, sized 0) here"
)
def test_a_file_holding_more_than_its_size_says_is_read_no_further() -> None:
    # /proc/self/status is a regular file whose size is 0 but which holds lines:
    # as a file growing while it is read, it is read one byte past that, no more
    status = "/proc/self/status"
    assert os.stat(status).st_size == 0
    report = verify_bundle(status)
    assert report.problems == (
        f"{status} is not a bundle: it grew while it was read, past the 0 bytes it held; "
        "nothing in it was checked",
    )


def test_a_bundle_file_larger_than_the_default_is_warned_of_and_verifies_when_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a default below the size of an ordinary bundle, whose members unpack
    # to less than 16 times that size
    path, key, token = _small_ledger(tmp_path)
    monkeypatch.setattr(bundle_verify, "MAX_UNPACKED", 1024)
    runner = CliRunner()
    env = {"PROVLEDGER_URL": f"sqlite:///{path}", "PROVLEDGER_TOKEN": token}
    out = str(tmp_path / "f.zip")
    written = runner.invoke(main, ["bundle", "F", "--key", str(key), "-o", out], env=env)
    assert written.exit_code == 0, written.output
    size = Path(out).stat().st_size
    with zipfile.ZipFile(out) as archive:
        assert 1024 < size < sum(i.file_size for i in archive.infolist()) < 16 * size

    # Then the writer warns, with a figure covering the file
    warning = written.stderr.strip()
    assert warning.startswith("warning: the bundle unpacks to (or is) "), warning
    needs = int(warning.rsplit(" ", 1)[1])
    assert needs >= size

    # And verify-bundle refuses it by default, checks it whole when given that figure
    pub = str(key) + ".pub"
    refused = _refused_by_cli(out, "--public-key", pub)
    assert f"it is {size} bytes, more than the 1024 a bundle may be" in refused
    told = runner.invoke(
        main, ["verify-bundle", out, "--public-key", pub, "--max-unpacked", str(needs)]
    )
    assert told.exit_code == 0, told.output
