"""A bundle of large, repetitive values unpacks to more than `verify-bundle`
unpacks unless told: its writer says so, and the auditor can say how much."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import InvalidInputError, Kind, Ledger
from ledger.bundle import verify as bundle_verify
from ledger.bundle import verify_bundle
from ledger.cli import main
from ledger.heads import generate_key


def _big_bundle(tmp_path: Path) -> tuple[Path, Path, str]:
    """(ledger file, key, principal's token) of a report resting on four records
    of 300 KB of log lines each (they pack a thousand times smaller)."""
    path = tmp_path / "l.db"
    with Ledger.open(f"sqlite:///{path}") as led:
        admin = led.admin()
        admin.grant("agent", scope="p", roles=["propose", "read"])
        admin.grant("boss", scope="p", roles=["approve", "read", "audit"])
        agent = led.authenticate(admin.issue_token("agent"))
        boss_token = admin.issue_token("boss")
        boss = led.authenticate(boss_token)
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

    # Then verify-bundle refuses it by default, naming the option and the figure
    pub = str(key) + ".pub"
    refused = runner.invoke(main, ["verify-bundle", out, "--public-key", pub])
    assert refused.exit_code == 1
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
