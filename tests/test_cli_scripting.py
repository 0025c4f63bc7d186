"""``provledger`` as scripts and cron jobs use it, through click's test runner (and
the real process where what is read is the process's own command line).

A check (``verify``, ``verify-bundle``) exits 1 only for a problem it found and 3
when it could not check; a refused command given ``--json`` prints its error as
one JSON object on stdout too; an empty token variable, a password in a
``--url`` on the command line and the ``as-of`` options are named as the user
gave them.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ledger import Kind, Ledger
from ledger.bundle import write_bundle
from ledger.cli import main
from ledger.heads import generate_key, publish_head

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, **env: str | None) -> Result:
    environment: dict[str, str | None] = {
        "PROVLEDGER_URL": None,
        "PROVLEDGER_TOKEN": None,
        "PROVLEDGER_ADMIN_TOKEN": None,
        "PROVLEDGER_RUN": None,
        **env,
    }
    return CliRunner().invoke(main, list(args), env=environment)


def provledger(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command as its own process (what it says of its own command line)."""
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith("PROVLEDGER_") and k != "PGPASSWORD"
    }
    return subprocess.run(
        [sys.executable, "-m", "ledger", *args],
        capture_output=True,
        text=True,
        env={**environment, "PYTHONPATH": str(ROOT), **env},
        timeout=120,
    )


def error_line(result: Result) -> str:
    """The one ``error: …`` line a refusal prints on stderr, without ``error: ``."""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr.removeprefix("error: ").rstrip("\n")


@dataclass
class Scene:
    """A ledger file with agent-1 (propose, read, audit) holding fact F1, and a key."""

    path: Path
    url: str
    agent: str
    key: Path

    @property
    def public_key(self) -> str:
        return f"{self.key}.pub"


@pytest.fixture
def scene(tmp_path: Path) -> Scene:
    path = tmp_path / "l.db"
    url = f"sqlite:///{path}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="p", roles=["propose", "read", "audit"])
        admin.grant("boss", scope="p", roles=["approve", "read"])
        token = admin.issue_token("agent-1")
        boss = led.authenticate(admin.issue_token("boss"))
        led.authenticate(token).propose(
            scope="p", claim_key="k", value=1, kind=Kind.FACT, id="F1", accepted_by=boss
        )
    generate_key(tmp_path / "key")
    return Scene(path=path, url=url, agent=token, key=tmp_path / "key")


@pytest.fixture
def bundle(scene: Scene, tmp_path: Path) -> Path:
    with Ledger.open(scene.url) as led:
        write_bundle(led.authenticate(scene.agent), "F1", scene.key, tmp_path / "f1.zip")
    return tmp_path / "f1.zip"


# -- exit statuses: 1 a problem found, 3 could not check, 2 a usage error -----------------


def _unopenable(tmp_path: Path, kind: str) -> tuple[str, str]:
    """(URL, the error type named) of a ledger ``verify`` cannot open."""
    if kind == "missing":
        return f"sqlite:///{tmp_path / 'nope.db'}", "LedgerNotFoundError"
    if kind == "directory":
        return f"sqlite:///{tmp_path}", "LedgerNotFoundError"
    if kind == "another program's SQLite file":
        with sqlite3.connect(tmp_path / "other.db") as con:
            con.execute("CREATE TABLE t (x)")
        return f"sqlite:///{tmp_path / 'other.db'}", "LedgerNotFoundError"
    (tmp_path / "notes.txt").write_text("not a database at all\n" * 100)
    return f"sqlite:///{tmp_path / 'notes.txt'}", "LedgerNotFoundError"


UNOPENABLE = ["missing", "directory", "another program's SQLite file", "a text file"]


@pytest.mark.parametrize("kind", UNOPENABLE)
def test_verify_exits_3_when_it_cannot_open_the_ledger_not_1_as_for_tampering(
    tmp_path: Path, kind: str
) -> None:
    # Given a URL that holds no ledger verify can open
    url, error_type = _unopenable(tmp_path, kind)

    # When verify runs on it, for people and as JSON
    said = run("verify", "--url", url)
    answered = run("verify", "--url", url, "--json")

    # Then it exits 3 (could not check), one error line on stderr
    assert said.exit_code == 3, said.output
    message = error_line(said)
    assert said.stdout == ""
    # And with --json the same error as one JSON object on stdout
    assert answered.exit_code == 3, answered.output
    assert json.loads(answered.stdout) == {
        "ok": False,
        "error": {"type": error_type, "message": message},
    }
    assert error_line(answered) == message


def test_verify_of_a_tampered_ledger_still_exits_1_with_its_report(scene: Scene) -> None:
    # Given a ledger whose stored bytes were changed behind its back
    with sqlite3.connect(scene.path) as con:
        con.execute("DROP TRIGGER stored_events_no_update")
        con.execute("UPDATE stored_events SET topic = topic || 'x' WHERE rowid = 3")

    # When it is verified
    said = run("verify", "--url", scene.url)
    report = run("verify", "--url", scene.url, "--json")

    # Then the check ran and found a problem: exit 1, and the report (no error object)
    assert said.exit_code == 1
    assert error_line(said).startswith("tampering detected: the stored bytes at position 3")
    assert report.exit_code == 1
    answer = json.loads(report.stdout)
    assert answer["ok"] is False and answer["first_bad_position"] == 3 and "error" not in answer


def test_verify_exits_3_when_what_it_checks_against_cannot_be_read(
    scene: Scene, tmp_path: Path
) -> None:
    def verify(*args: str, **env: str) -> tuple[int, str, Any]:
        said = run("verify", "--url", scene.url, *args, **env)
        answered = run("verify", "--url", scene.url, *args, "--json", **env)
        assert answered.exit_code == said.exit_code
        return said.exit_code, error_line(said), json.loads(answered.stdout)

    # A heads file that is not there
    heads = str(tmp_path / "missing-heads.jsonl")
    code, message, answer = verify("--heads", heads, "--public-key", scene.public_key)
    assert code == 3 and "cannot read the heads file" in message
    assert answer == {"ok": False, "error": {"type": "InvalidHeadError", "message": message}}
    # A public key that is not there
    with Ledger.open(scene.url) as led:
        publish_head(led, scene.key, tmp_path / "heads.jsonl")
    code, message, answer = verify(
        "--heads", str(tmp_path / "heads.jsonl"), "--public-key", str(tmp_path / "none.pub")
    )
    assert code == 3 and answer["error"]["type"] == "InvalidKeyError"
    # A digest that is no digest
    code, message, answer = verify("--against", "not-a-digest")
    assert code == 3 and message.startswith("cannot verify against 'not-a-digest'")
    assert answer["error"]["type"] == "InvalidInputError"
    # An admin token the ledger does not know
    code, message, answer = verify(PROVLEDGER_ADMIN_TOKEN="plt_not-a-real-token")
    assert code == 3 and answer["error"]["type"] == "AuthenticationError"
    assert "plt_not-a-real-token" not in json.dumps(answer) + message


def test_verify_bundle_exits_3_for_a_file_it_cannot_read_and_1_for_an_altered_bundle(
    scene: Scene, bundle: Path, tmp_path: Path
) -> None:
    # A bundle that is not there: could not check, said as JSON too
    missing = str(tmp_path / "nofile.zip")
    said = run("verify-bundle", missing)
    answered = run("verify-bundle", missing, "--json")
    assert said.exit_code == answered.exit_code == 3
    message = error_line(said)
    assert message == f"{missing}: No such file or directory"
    assert json.loads(answered.stdout) == {
        "ok": False,
        "error": {"type": "FileNotFoundError", "message": message},
    }
    # A trusted key that is not there: could not check
    no_key = run("verify-bundle", str(bundle), "--public-key", str(tmp_path / "none.pub"))
    assert no_key.exit_code == 3 and "none.pub" in error_line(no_key)
    # The intact bundle checks
    assert run("verify-bundle", str(bundle), "--public-key", scene.public_key).exit_code == 0
    # An altered one: the check ran and found the problem, exit 1, its report as JSON
    data = bytearray(bundle.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bundle.write_bytes(bytes(data))
    altered = run("verify-bundle", str(bundle), "--json")
    assert altered.exit_code == 1
    assert error_line(altered).startswith("bundle check failed: ")
    report = json.loads(altered.stdout)
    assert report["ok"] is False and report["problem"] and "error" not in report


def test_a_usage_error_of_a_check_still_exits_2_as_text(scene: Scene) -> None:
    result = run("verify", "--url", scene.url, "--heads", "h.jsonl", "--json")
    assert result.exit_code == 2
    assert result.stdout == "" and "Error: --heads needs --public-key" in result.stderr


@pytest.mark.parametrize("command", ["verify", "verify-bundle"])
def test_the_checks_help_tells_the_exit_statuses(command: str) -> None:
    text = " ".join(run(command, "--help").stdout.split())
    assert "Exit status: 0 " in text and "found a problem" in text
    assert "3 could not check" in text and "2 a usage error" in text
    assert 'on exit 3 {"ok": false, "error": {"type": …, "message": …}}' in text


# -- --json: a refusal is JSON on stdout too ---------------------------------------------


def test_a_refused_json_command_prints_its_error_as_json_on_stdout(scene: Scene) -> None:
    # When a read with --json is refused
    result = run("get", "NOPE", "--json", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN=scene.agent)

    # Then stderr has its one line, and stdout one JSON object with the same message
    assert result.exit_code == 1
    message = error_line(result)
    assert message.startswith("get refused: ") or "NOPE" in message
    assert json.loads(result.stdout) == {
        "error": {"type": "UnknownRecordError", "message": message}
    }
    # Without --json, nothing on stdout
    plain = run("get", "NOPE", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN=scene.agent)
    assert plain.exit_code == 1 and plain.stdout == "" and error_line(plain) == message


def test_a_file_a_json_command_cannot_write_is_json_too(tmp_path: Path) -> None:
    target = str(tmp_path / "missing-dir" / "key")
    result = run("keygen", "--out", target, "--json")
    assert result.exit_code == 1
    answer = json.loads(result.stdout)
    assert answer["error"]["message"] == error_line(result)
    assert answer["error"]["type"] in ("FileNotFoundError", "InvalidKeyError")


def test_a_json_error_never_shows_the_token_given(scene: Scene) -> None:
    secret = "plt_this-token-is-secret"
    result = run("get", "F1", "--json", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN=secret)
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["type"] == "AuthenticationError"
    assert secret not in result.output


def test_a_usage_error_with_json_stays_text(scene: Scene) -> None:
    result = run("get", "--json", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN=scene.agent)
    assert result.exit_code == 2 and result.stdout == "" and "Usage:" in result.stderr


# -- empty tokens ------------------------------------------------------------------------


def test_an_empty_token_variable_is_named_as_set_but_empty(scene: Scene) -> None:
    empty = run("get", "F1", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN="")
    assert empty.exit_code == 2
    assert "Error: PROVLEDGER_TOKEN is set but empty" in empty.stderr
    assert "Missing option" not in empty.stderr
    # A blank one too
    blank = run("get", "F1", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN="  ")
    assert blank.exit_code == 2 and "PROVLEDGER_TOKEN is set but empty" in blank.stderr
    # Unset, it is missing, as before
    unset = run("get", "F1", PROVLEDGER_URL=scene.url)
    assert unset.exit_code == 2 and "Missing option '--token'" in unset.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [(("get", "F1", "--token", ""), "--token"), (("stats", "--admin-token", ""), "--admin-token")],
)
def test_an_empty_token_on_the_command_line_is_named_not_warned_visible(
    scene: Scene, args: tuple[str, ...], option: str
) -> None:
    done = provledger(*args, PROVLEDGER_URL=scene.url)
    assert done.returncode == 2, done.stderr
    assert f"Error: {option} is empty" in done.stderr
    assert "visible to other users" not in done.stderr


def test_an_empty_admin_token_variable_is_named_where_the_admin_token_is_needed(
    scene: Scene,
) -> None:
    # On a file this user owns no admin token is needed: an empty variable is no matter
    assert run("stats", "--url", scene.url, PROVLEDGER_ADMIN_TOKEN="").exit_code == 0
    if os.geteuid() != 0:  # pragma: no cover - only root can give a file away
        pytest.skip("needs root to hand the file to another user")
    os.chown(scene.path, 65534, 65534)
    refused = run("stats", "--url", scene.url, PROVLEDGER_ADMIN_TOKEN="")
    assert refused.exit_code == 1
    assert "PROVLEDGER_ADMIN_TOKEN is set but empty" in error_line(refused)


# -- a password in --url on the command line ---------------------------------------------


@pytest.fixture
def unreachable() -> Iterator[str]:
    """A PostgreSQL URL nothing answers at (connection refused at once)."""
    pytest.importorskip("psycopg")
    yield "postgresql://u:hunter2@127.0.0.1:1/db"


def test_a_password_in_a_url_on_the_command_line_is_warned_about_once(
    unreachable: str,
) -> None:
    given = run("get", "X", "--url", unreachable, "--json", PROVLEDGER_TOKEN="plt_x")
    assert given.exit_code == 1
    warnings = [line for line in given.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, given.stderr
    assert "--url on the command line holds a password" in warnings[0]
    assert "export PROVLEDGER_URL" in warnings[0] and "$PGPASSWORD or ~/.pgpass" in warnings[0]
    assert "hunter2" not in given.output
    assert json.loads(given.stdout)["error"]["type"] == "StorageError"
    # As a query option too
    query = "postgresql://u@127.0.0.1:1/db?password=hunter2"
    also = run("get", "X", "--url", query, PROVLEDGER_TOKEN="plt_x")
    assert "holds a password" in also.stderr and "hunter2" not in also.output


def test_a_url_from_the_environment_or_without_a_password_is_not_warned_about(
    unreachable: str,
) -> None:
    from_env = run("get", "X", PROVLEDGER_URL=unreachable, PROVLEDGER_TOKEN="plt_x")
    assert from_env.exit_code == 1 and "warning" not in from_env.stderr
    bare = run("get", "X", "--url", "postgresql://u@127.0.0.1:1/db", PROVLEDGER_TOKEN="plt_x")
    assert bare.exit_code == 1 and "warning" not in bare.stderr


# -- the CLI's own words -----------------------------------------------------------------


def test_as_of_refusals_name_the_cli_options_not_the_library_parameters(scene: Scene) -> None:
    env = {"PROVLEDGER_URL": scene.url, "PROVLEDGER_TOKEN": scene.agent}
    future = run("as-of", "--time", "2099-01-01T00:00:00+00:00", "history", **env)
    assert future.exit_code == 1
    message = error_line(future)
    assert message.startswith("as-of --time 2099-01-01T00:00:00+00:00 is in the future")
    assert "as_of" not in message and "(at)" not in message and "--at" in message
    beyond = run("as-of", "--position", "999", "history", "--json", **env)
    assert beyond.exit_code == 1
    message = error_line(beyond)
    assert message.startswith("as-of --position 999 is beyond the log (newest is ")
    assert json.loads(beyond.stdout)["error"] == {"type": "InvalidInputError", "message": message}
