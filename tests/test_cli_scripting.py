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
import uuid
import zipfile
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
    if kind == "a table named like a ledger's":
        with sqlite3.connect(tmp_path / "like.db") as con:
            con.execute("CREATE TABLE pl_users (x)")
        return f"sqlite:///{tmp_path / 'like.db'}", "LedgerNotFoundError"
    if kind == "another eventsourcing application's events":
        with sqlite3.connect(tmp_path / "es.db") as con:
            con.execute(
                "CREATE TABLE stored_events (originator_id TEXT, originator_version INTEGER, "
                "topic TEXT, state BLOB)"
            )
        return f"sqlite:///{tmp_path / 'es.db'}", "StorageError"
    (tmp_path / "notes.txt").write_text("not a database at all\n" * 100)
    return f"sqlite:///{tmp_path / 'notes.txt'}", "LedgerNotFoundError"


UNOPENABLE = [
    "missing",
    "directory",
    "another program's SQLite file",
    "a table named like a ledger's",
    "another eventsourcing application's events",
    "a text file",
]


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


def test_verify_of_an_empty_log_passes_warning_that_it_is_empty(
    tmp_path: Path, scene: Scene
) -> None:
    # Given a ledger nothing was written to (as an init or a copy that did not
    # finish may leave), and one with events
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    Ledger.open(empty).close()

    # When each is verified
    said = run("verify", "--url", empty)
    held = run("verify", "--url", scene.url)

    # Then both pass; the empty one says it is empty, on stderr
    assert said.exit_code == 0, said.output
    assert said.stdout.startswith("ok: 0:0:")
    assert said.stderr.startswith("warning: the log is empty: no events")
    assert held.exit_code == 0 and "log is empty" not in held.stderr
    # and a head signed over it says so too (a signing job pointed at a leftover)
    key = tmp_path / "key"
    run("keygen", "--out", str(key))
    signed = run("head", "--key", str(key), "--url", empty)
    assert signed.exit_code == 0, signed.output
    assert json.loads(signed.stdout)["tree_size"] == 0
    assert signed.stderr.startswith("warning: the log is empty: no events")
    assert "the head holds for that empty log alone" in signed.stderr


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
    assert code == 3 and answer["error"]["type"] == "UnknownTokenError"
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
    assert json.loads(result.stdout)["error"]["type"] == "UnknownTokenError"
    assert secret not in result.output


def test_a_usage_error_with_json_stays_text(scene: Scene) -> None:
    result = run("get", "--json", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN=scene.agent)
    assert result.exit_code == 2 and result.stdout == "" and "Usage:" in result.stderr


@pytest.mark.parametrize(
    ("command", "refused_as"),
    [("head", "InvalidKeyError"), ("prove", "UnknownRecordError")],
)
def test_head_and_prove_take_json_and_print_a_refusal_as_json(
    scene: Scene, tmp_path: Path, command: str, refused_as: str
) -> None:
    # head's key missing, prove's record unknown
    asked = {
        "head": ["head", "--key", str(tmp_path / "no-such-key")],
        "prove": ["prove", "NOPE"],
    }[command]
    env = {"PROVLEDGER_URL": scene.url, "PROVLEDGER_TOKEN": scene.agent}

    # When refused with --json: its one error line, and the same as JSON on stdout
    refused = run(*asked, "--json", **env)
    assert refused.exit_code == 1, refused.output
    message = error_line(refused)
    assert json.loads(refused.stdout) == {"error": {"type": refused_as, "message": message}}
    # Without --json, nothing on stdout
    plain = run(*asked, **env)
    assert plain.exit_code == 1 and plain.stdout == "" and error_line(plain) == message


def test_head_and_prove_answer_json_with_json_given(scene: Scene) -> None:
    env = {"PROVLEDGER_URL": scene.url, "PROVLEDGER_TOKEN": scene.agent}
    # head: one line without --json (a heads file's), the same head indented with it
    line = run("head", "--key", str(scene.key), **env)
    assert line.exit_code == 0 and line.stdout.count("\n") == 1
    indented = run("head", "--key", str(scene.key), "--json", **env)
    assert indented.exit_code == 0 and indented.stdout.count("\n") > 1
    heads = [json.loads(line.stdout), json.loads(indented.stdout)]
    same = ("tree_size", "root", "position", "key_id")
    assert [heads[1][k] for k in same] == [heads[0][k] for k in same]
    assert heads[0]["tree_size"] > 0 and set(heads[1]) == set(heads[0])
    # prove: the same proofs either way
    proofs = run("prove", "F1", **env)
    assert proofs.exit_code == 0
    assert json.loads(run("prove", "F1", "--json", **env).stdout) == json.loads(proofs.stdout)


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


def test_a_token_with_white_space_at_an_end_is_a_usage_error_naming_it(scene: Scene) -> None:
    # A token file saved with CRLF line ends: $(cat file) keeps the \r
    crlf = run("get", "F1", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN=scene.agent + "\r")
    assert crlf.exit_code == 2
    assert (
        "Error: $PROVLEDGER_TOKEN ends with white space ('\\r'): a token holds none; "
        "remove it (a file with CRLF line ends? tr -d '\\r')"
    ) in crlf.stderr
    # An option's, and the admin token's, alike (the token itself never shown)
    spaced = run("stats", "--url", scene.url, "--admin-token", " plt_x")
    assert spaced.exit_code == 2
    assert "Error: --admin-token begins with white space (' ')" in spaced.stderr
    assert "plt_x" not in spaced.stderr
    # Without it, the same token works
    assert run("get", "F1", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN=scene.agent).exit_code == 0


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


def test_a_refused_token_from_a_variable_is_named_as_that_variables(
    scene: Scene, tmp_path: Path
) -> None:
    # Another ledger's tokens, left in the environment
    with Ledger.open(f"sqlite:///{tmp_path / 'other.db'}") as other:
        theirs, their_admin = other.admin().issue_token("x"), other.admin().issue_admin_token()
    unknown = run("get", "F1", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN=theirs)
    assert unknown.exit_code == 1
    assert error_line(unknown) == (
        "token is unknown (the token in $PROVLEDGER_TOKEN: one left there for another ledger?)"
    )
    admin = run("stats", PROVLEDGER_URL=scene.url, PROVLEDGER_ADMIN_TOKEN=their_admin)
    assert admin.exit_code == 1
    assert error_line(admin) == (
        "admin token is unknown (the token in $PROVLEDGER_ADMIN_TOKEN: one left there for "
        "another ledger?)"
    )
    # A token of this ledger revoked since: said as before, naming where it came from
    with Ledger.open(scene.url) as led:
        led.admin().revoke_token(scene.agent)
    revoked = run("get", "F1", "--json", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN=scene.agent)
    said = "token of 'agent-1' was revoked (the token in $PROVLEDGER_TOKEN)"
    assert revoked.exit_code == 1 and error_line(revoked) == said
    assert json.loads(revoked.stdout)["error"]["message"] == said
    # Given as an option, the token is the one typed: nothing added
    typed = run("get", "F1", "--url", scene.url, "--token", theirs)
    assert error_line(typed) == "token is unknown"


def test_an_answer_stdouts_encoding_cannot_show_is_named_as_such_not_as_a_path(
    scene: Scene,
) -> None:
    # Given a record holding a character Latin-1 has not
    with Ledger.open(scene.url) as led:
        led.authenticate(scene.agent).propose("p", "rocket", "\U0001f680", Kind.FACT, id="U1")
    # When it is shown on a stdout encoded so
    env = {"PROVLEDGER_URL": scene.url, "PROVLEDGER_TOKEN": scene.agent}
    shown = provledger("get", "U1", **env, PYTHONIOENCODING="latin-1")
    # Then the refusal says what could not be shown and how to show it
    assert shown.returncode == 1
    assert shown.stderr.splitlines()[-1] == (
        "error: the answer could not be written to stdout: its encoding (iso8859-1) "
        "cannot show '\\U0001f680'; set PYTHONIOENCODING=utf-8 (or a UTF-8 locale); "
        "anything the command wrote to the ledger stands (look before running it again)"
    )
    assert "cannot use that path" not in shown.stderr
    assert provledger("get", "U1", **env, PYTHONIOENCODING="utf-8").returncode == 0


def test_a_reads_outcome_line_is_one_line_however_long_its_value(scene: Scene) -> None:
    # Given an accepted record of a 400-character value
    with Ledger.open(scene.url) as led:
        admin = led.admin()
        boss = led.authenticate(admin.issue_token("boss"))
        agent = led.authenticate(scene.agent)
        agent.propose("p", "long.k", "x" * 400, Kind.FACT, id="L1", accepted_by=boss)
    env = {"PROVLEDGER_URL": scene.url, "PROVLEDGER_TOKEN": scene.agent}
    for asked in (("read",), ("explain",)):
        # When read (or explained) into a pipe
        done = run(*asked, "--scope", "p", "--claim", "long.k", **env)
        # Then its first line is the whole outcome (a script's `head -1`), value and all
        assert done.exit_code == 0, done.output
        first = done.stdout.splitlines()[0]
        assert first.startswith("FOUND  p/long.k at "), first
        if asked == ("read",):
            assert first.endswith('value: "' + "x" * 400 + '"')


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
    assert "as_of" not in message and "(at)" not in message
    assert message.endswith("to ask about a later moment, run the command then")
    beyond = run("as-of", "--position", "999", "history", "--json", **env)
    assert beyond.exit_code == 1
    message = error_line(beyond)
    assert message.startswith("as-of --position 999 is beyond the log (newest is ")
    assert json.loads(beyond.stdout)["error"] == {"type": "InvalidInputError", "message": message}


@pytest.mark.parametrize("command", ["get", "history", "audit", "records"])
def test_a_moment_to_come_is_not_told_to_use_an_at_the_command_has_not(
    scene: Scene, command: str
) -> None:
    args = {"get": ["F1"], "audit": ["F1"], "records": ["--scope", "p"], "history": []}[command]
    env = {"PROVLEDGER_URL": scene.url, "PROVLEDGER_TOKEN": scene.agent}
    future = run("as-of", "--time", "2099-01-01T00:00:00+00:00", command, *args, **env)
    assert future.exit_code == 1
    assert "--at" not in error_line(future)
    assert error_line(future).endswith("run the command then")


@pytest.mark.parametrize("command", ["read", "explain"])
def test_a_moment_to_come_is_told_to_read_now_with_at_where_the_command_takes_it(
    scene: Scene, command: str
) -> None:
    env = {"PROVLEDGER_URL": scene.url, "PROVLEDGER_TOKEN": scene.agent}
    asked = ("--scope", "p", "--claim", "k")
    future = run("as-of", "--time", "2099-01-01T00:00:00+00:00", command, *asked, **env)
    assert future.exit_code == 1
    assert error_line(future).endswith(
        f"run the command then, or {command} now with --at for validity at that instant"
    )


@pytest.mark.parametrize("command", ["read", "explain"])
def test_an_at_outside_the_years_utc_holds_is_refused_by_the_options_name(
    scene: Scene, command: str
) -> None:
    env = {"PROVLEDGER_URL": scene.url, "PROVLEDGER_TOKEN": scene.agent}
    asked = ("--scope", "p", "--claim", "k", "--at", "0001-01-01T00:00:00+14:00")
    said = run(command, *asked, "--json", **env)
    assert said.exit_code == 1
    message = "--at 0001-01-01T00:00:00+14:00 is outside the years 1-9999 in UTC"
    assert error_line(said) == message
    assert json.loads(said.stdout)["error"]["message"] == message
    # Under as-of too (its --time is named as before)
    past = run("as-of", "--position", "1", command, *asked, **env)
    assert error_line(past) == message


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_digest_to_verify_against_is_a_usage_error(scene: Scene, empty: str) -> None:
    # What `--against "$(cat digest.txt)"` gives when the file is missing or empty
    said = run("verify", "--url", scene.url, "--against", empty, "--json")
    assert said.exit_code == 2 and said.stdout == ""
    assert "Invalid value for --against: the digest is empty" in said.stderr


# -- a ledger damaged behind its back: a problem found (1), not "could not check" (3) -----


def _tamper(url: str, *statements: str) -> None:
    """Run ``statements`` on the ledger's database behind its back: ``{t}`` is where
    its tables are, ``{events}`` its events table."""
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as con:
            for statement in statements:
                con.execute(statement.format(t="", events="stored_events"))
        return
    from ledger.persistence import resolve_url
    from ledger.persistence.pg_pool import plain_connection

    env = resolve_url(url).env
    with plain_connection(env) as conn:
        for statement in statements:
            conn.execute(
                statement.format(t=f"{env['POSTGRES_SCHEMA']}.", events="provledger_events")
            )


@dataclass
class Shared:
    """A ledger whose admin token is needed (PostgreSQL; on SQLite given all the
    same, as to a file of another user), with F1 and a signed head of it."""

    url: str
    admin_token: str
    heads: Path
    key: Path

    def verify(self, *args: str) -> Result:
        return run(
            "verify",
            "--url",
            self.url,
            "--heads",
            str(self.heads),
            "--public-key",
            f"{self.key}.pub",
            *args,
            PROVLEDGER_ADMIN_TOKEN=self.admin_token,
        )


@pytest.fixture
def shared(shared_url: str, tmp_path: Path) -> Shared:
    with Ledger.open(shared_url) as led:
        admin = led.admin()
        admin_token = admin.bootstrap_admin_token()
        assert admin_token is not None
        admin.grant("agent-1", scope="p", roles=["propose", "read", "audit"])
        admin.grant("boss", scope="p", roles=["approve", "read"])
        boss = led.authenticate(admin.issue_token("boss"))
        led.authenticate(admin.issue_token("agent-1")).propose(
            scope="p", claim_key="k", value=1, kind=Kind.FACT, id="F1", accepted_by=boss
        )
        generate_key(tmp_path / "key")
        publish_head(led, tmp_path / "key", tmp_path / "heads.jsonl")
    return Shared(shared_url, admin_token, tmp_path / "heads.jsonl", tmp_path / "key")


def _found(result: Result) -> dict[str, Any]:
    """The report of a verify that found a problem: exit 1, one ``error:`` line
    saying tampering, the JSON report (never ``{"error": …}``)."""
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    answer: dict[str, Any] = json.loads(result.stdout)
    assert answer["ok"] is False and "error" not in answer, answer
    more = len(answer["problems"]) - 1
    others = f" (and {more} more: --json lists every one)" if more > 0 else ""
    assert error_line(result) == f"tampering detected: {answer['problem']}{others}"
    return answer


def test_verify_with_the_admin_token_names_token_rows_deleted_from_the_view(
    shared: Shared,
) -> None:
    # Given the access view's token rows deleted behind the ledger's back (on
    # PostgreSQL the admin token is always needed: it used to be refused, exit 3)
    _tamper(shared.url, "DELETE FROM {t}pl_tokens")

    # When verify runs with the admin token
    answer = _found(shared.verify("--json"))

    # Then the token passes by the log's own events, and the view is named
    assert answer["problem"].startswith("view pl_tokens lacks a row the log produces")
    assert answer["failed_checks"] == ["views"]
    # A token the log never issued is still refused: could not check
    wrong = run("verify", "--url", shared.url, PROVLEDGER_ADMIN_TOKEN="plt_not-a-token")
    assert wrong.exit_code == 3 and error_line(wrong).startswith("admin token is unknown (the")


def _events(url: str) -> str:
    return "stored_events" if url.startswith("sqlite:") else "provledger_events"


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ("{events}", "the log's events, is missing, while the database holds the rest of a ledger"),
        ("pl_merkle_leaves", "the log's Merkle leaves, is missing"),
        ("pl_tracking", "the views' layout and position, is missing"),
        ("pl_timeline", "the views' time index, is missing"),
        ("pl_snapshots", "the evidence bytes, is missing"),
    ],
)
def test_a_ledger_table_dropped_is_tampering_found_not_a_failure_to_check(
    shared: Shared, table: str, named: str
) -> None:
    # Given one of the tables verify reads dropped, the rest of the ledger there
    _tamper(shared.url, f"DROP TABLE {{t}}{table}")

    # When it is verified (with the admin token)
    said = shared.verify()
    answer = _found(shared.verify("--json"))

    # Then it exits 1 naming the table (it used to be 3, "no such table", "no ledger")
    dropped = table.format(events=_events(shared.url))
    assert answer["problem"].startswith(f"table {dropped}, {named}")
    assert answer["digest"] is None and answer["checks"] == []
    assert said.exit_code == 1 and error_line(said) == error_line(shared.verify("--json"))


def test_a_column_renamed_or_a_position_made_text_is_tampering_without_a_traceback(
    shared: Shared,
) -> None:
    # Given the events' state column renamed (an IndexError traceback before)
    _tamper(shared.url, "ALTER TABLE {t}{events} RENAME COLUMN state TO st")
    answer = _found(shared.verify("--json"))
    assert answer["problem"] == (
        f"table {_events(shared.url)}, the log's events, lacks its column 'state'"
    )
    assert answer["failed_checks"] == ["log"]
    _tamper(shared.url, "ALTER TABLE {t}{events} RENAME COLUMN st TO state")
    assert shared.verify().exit_code == 0

    # And the views' layout row holding text where the ledger writes a number (a
    # ValueError traceback before)
    if shared.url.startswith("sqlite:"):
        _tamper(shared.url, "UPDATE pl_tracking SET position = 'abc'")
        said = "holds 'abc' in its column 'position', where the ledger writes whole numbers"
    else:
        _tamper(
            shared.url,
            "ALTER TABLE {t}pl_tracking ALTER COLUMN position TYPE text",
            "UPDATE {t}pl_tracking SET position = 'abc'",
        )
        said = "has its column 'position' of type text, where the ledger keeps whole numbers"
    answer = _found(shared.verify("--json"))
    assert answer["problem"] == f"table pl_tracking, the views' layout and position, {said}"
    assert answer["failed_checks"] == ["views"]


def test_the_administrators_own_events_tampered_with_are_found_not_refused(
    shared: Shared,
) -> None:
    # Given the event issuing the admin token (position 2) deleted from the log,
    # its Merkle leaf left: the token cannot be checked, but the log is damaged
    if shared.url.startswith("sqlite:"):
        _tamper(
            shared.url,
            "DROP TRIGGER stored_events_no_delete",
            "DELETE FROM stored_events WHERE rowid = 2",
        )
    else:
        _tamper(
            shared.url,
            "ALTER TABLE {t}{events} DISABLE TRIGGER ALL",
            "DELETE FROM {t}{events} WHERE notification_id = 2",
        )

    # Then verify with that token and the kept heads names the event missing (exit
    # 1), not the token (3), and what else the ledger as stored fails
    answer = _found(shared.verify("--json"))
    assert answer["problem"] == "the event at position 2 is missing"
    assert answer["first_bad_position"] == 2 and answer["failed_checks"][0] == "log"


def test_the_administrators_event_stored_as_text_is_found_not_refused(scene: Scene) -> None:
    # Given an admin token, and then the event issuing it stored as text
    with Ledger.open(scene.url) as led:
        token = led.admin().issue_admin_token()
        position = led.position
    _tamper(
        scene.url,
        "DROP TRIGGER stored_events_no_update",
        f"UPDATE stored_events SET state = CAST(state AS TEXT) || 'x' WHERE rowid = {position}",
    )

    # When verify checks that token first (a StorageError before: exit 3)
    answer = _found(run("verify", "--url", scene.url, "--json", PROVLEDGER_ADMIN_TOKEN=token))

    # Then the event is named as verify names it
    assert answer["problem"] == (
        f"the event at position {position} holds its state as text where the ledger "
        "stores bytes: it was changed after it was appended"
    )
    assert answer["first_bad_position"] == position


# -- a report that cannot be written, and a JSON answer streamed part way ------------------


def _to_full_stdout(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command as its own process, its stdout a device that is always full."""
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith("PROVLEDGER_") and k != "PGPASSWORD"
    }
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "ledger", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env={**environment, "PYTHONPATH": str(ROOT), **env},
            timeout=120,
            check=False,
        )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_check_that_found_a_problem_says_it_when_its_report_cannot_be_written(
    scene: Scene, bundle: Path
) -> None:
    # An intact ledger's report that cannot be written: nothing found, none told (3)
    intact = _to_full_stdout("verify", "--url", scene.url, "--json")
    assert intact.returncode == 3, intact.stderr
    assert intact.stderr.startswith("error: the answer could not be written to stdout")

    # Given a tampered ledger and an altered bundle
    _tamper(scene.url, "DELETE FROM pl_tokens")
    data = bytearray(bundle.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bundle.write_bytes(bytes(data))

    # When their checks' JSON reports go to a full disk
    verified = _to_full_stdout("verify", "--url", scene.url, "--json")
    checked = _to_full_stdout("verify-bundle", str(bundle), "--json")

    # Then each exits 1 (a problem found, not 3), its one error line naming it
    for done, what in (
        (verified, "tampering detected: view pl_tokens lacks a row"),
        (checked, "bundle check failed: "),
    ):
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith(f"error: {what}"), done.stderr
        assert done.stderr.endswith(
            " (the report could not be written to stdout: No space left on device)\n"
        )
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_refusal_whose_json_cannot_be_written_keeps_its_line_and_status(
    tmp_path: Path,
) -> None:
    done = _to_full_stdout("verify", "--url", f"sqlite:///{tmp_path / 'none.db'}", "--json")
    assert done.returncode == 3
    assert done.stderr.startswith("error: no ledger at ") and done.stderr.count("\n") == 1


def _history(scene: Scene, *args: str) -> Result:
    return run(*args, "history", "--json", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN=scene.agent)


def test_history_refused_part_way_prints_the_events_before_then_why(scene: Scene) -> None:
    # Given the state of the newest event (F1's acceptance) made unreadable
    with Ledger.open(scene.url) as led:
        newest = led.position
    listed = json.loads(_history(scene).stdout)["events"]
    _tamper(
        scene.url,
        "DROP TRIGGER stored_events_no_update",
        f"UPDATE stored_events SET state = x'00' WHERE rowid = {newest}",
    )

    # When history is listed for people, every event
    result = run("history", "--all", PROVLEDGER_URL=scene.url, PROVLEDGER_TOKEN=scene.agent)

    # Then the events before it are printed (they were held back in a table), then why
    assert result.exit_code == 1
    assert f"position {newest}" in error_line(result)
    before = [e for e in listed if e["position"] < newest]
    assert before and all(f"{e['position']}" in result.stdout for e in before)
    assert str(newest) not in result.stdout.split()


def test_history_json_refused_part_way_is_still_one_json_object(scene: Scene) -> None:
    # Given the state of the newest event (F1's acceptance) made unreadable
    with Ledger.open(scene.url) as led:
        newest = led.position
        listed = json.loads(_history(scene, "as-of", "--position", str(newest)).stdout)
    assert len(listed["events"]) >= 2 and listed["events"][-1]["position"] == newest
    _tamper(
        scene.url,
        "DROP TRIGGER stored_events_no_update",
        f"UPDATE stored_events SET state = x'00' WHERE rowid = {newest}",
    )

    # When history is listed as JSON: the events before it are written first
    result = _history(scene)

    # Then stdout is one JSON object: the events written, and the error in place
    # of next_from; stderr its one line
    assert result.exit_code == 1
    answer = json.loads(result.stdout)
    assert list(answer) == ["events", "error"]
    assert answer["events"] == listed["events"][:-1]
    assert answer["error"]["type"] == "CorruptEventError"
    assert answer["error"]["message"] == error_line(result)
    assert f"position {newest}" in answer["error"]["message"]


@pytest.mark.parametrize("past", [False, True])
def test_history_json_losing_its_connection_part_way_is_one_json_object(
    scene: Scene, monkeypatch: pytest.MonkeyPatch, past: bool
) -> None:
    from ledger.errors import ConnectionLostError
    from ledger.session import Session

    with Ledger.open(scene.url) as led:
        as_of = ("as-of", "--position", str(led.position)) if past else ()
    whole = json.loads(_history(scene, *as_of).stdout)
    listed = whole["events"]
    assert len(listed) >= 2
    real = Session.iter_history

    def dropped(self: Session, **kwargs: Any) -> Iterator[Any]:
        events = real(self, **kwargs)
        yield next(events)
        yield next(events)
        raise ConnectionLostError("the server closed the connection")

    monkeypatch.setattr(Session, "iter_history", dropped)
    result = _history(scene, *as_of)
    assert result.exit_code == 1
    answer = json.loads(result.stdout)
    # As of a past moment, the document cut short still says which (as_of, first)
    moment = {"as_of": whole["as_of"]} if past else {}
    assert answer == {
        **moment,
        "events": listed[:2],
        "error": {"type": "ConnectionLostError", "message": error_line(result)},
    }
    assert ("as_of" in whole) == past


# -- verify-bundle: nothing in the file checked is "could not check" (3) ------------------


def _could_not_check(path: str, *args: str) -> str:
    """The message of verify-bundle's exit 3 on ``path``, the same as JSON."""
    said = run("verify-bundle", path, *args)
    answered = run("verify-bundle", path, *args, "--json")
    assert said.exit_code == answered.exit_code == 3, said.output
    message = error_line(said)
    assert message.startswith("could not check the bundle: ")
    assert json.loads(answered.stdout) == {
        "ok": False,
        "error": {"type": "InvalidInputError", "message": message},
    }
    return message


def test_a_directory_is_no_bundle_checked_as_bundle_or_as_earlier(
    bundle: Path, tmp_path: Path
) -> None:
    # Given as the bundle: exit 3, as given as --earlier (it was 1 as the bundle)
    message = _could_not_check(str(tmp_path))
    assert message.endswith("it is a directory, not a regular file; nothing was read from it")
    earlier = run("verify-bundle", str(bundle), "--earlier", str(tmp_path))
    assert earlier.exit_code == 3


def test_a_bundle_over_the_limit_it_was_given_could_not_be_checked(bundle: Path) -> None:
    size = bundle.stat().st_size
    message = _could_not_check(str(bundle), "--max-unpacked", str(size - 1))
    assert f"give --max-unpacked {size}" in message
    assert run("verify-bundle", str(bundle), "--max-unpacked", str(size)).exit_code == 0


def test_members_unpacking_past_the_limit_could_not_be_checked(tmp_path: Path) -> None:
    # Given a zip whose one member unpacks to 4 MiB of zeros (a few KiB packed)
    packed = tmp_path / "zeros.zip"
    with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manifest.json", b"\0" * (4 << 20))
    message = _could_not_check(str(packed), "--max-unpacked", str(1 << 20))
    assert "give --max-unpacked" in message and "nothing in it was unpacked" in message
    # A member packed otherwise than a bundle's is a problem found: no bundle
    other = tmp_path / "bzip2.zip"
    with zipfile.ZipFile(other, "w", zipfile.ZIP_BZIP2) as archive:
        archive.writestr("manifest.json", b"{}")
    assert run("verify-bundle", str(other)).exit_code == 1


def test_a_bundle_that_grew_while_it_was_read_could_not_be_checked(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ledger.bundle.verify as bundle_verify

    real = os.fstat

    def smaller(fd: int) -> os.stat_result:  # the file as it was before it grew
        info = list(real(fd))
        info[6] -= 10  # st_size
        return os.stat_result(info)

    monkeypatch.setattr(bundle_verify.os, "fstat", smaller)
    message = _could_not_check(str(bundle))
    assert "it grew while it was read" in message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_no_bundle_checked(tmp_path: Path) -> None:
    fifo = tmp_path / "b.zip"
    os.mkfifo(fifo)
    assert _could_not_check(str(fifo)).endswith(
        "it is a FIFO (named pipe), not a regular file; nothing was read from it"
    )


@pytest.mark.postgres
def test_verify_by_a_role_that_may_not_read_a_table_could_not_check(pg_url: str) -> None:
    # A table the role may not read is no table gone: an outage of rights, exit 3.
    import psycopg

    from .conftest import _pg_dsn

    admin_token = run("init", "--url", pg_url).stdout.strip()
    schema = pg_url.rsplit("schema=", 1)[1]
    role = f"r_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
        conn.execute(f"REVOKE SELECT ON {schema}.pl_snapshots FROM {role}")
    try:
        as_role = pg_url.replace("://postgres@", f"://{role}@", 1)
        assert as_role != pg_url
        result = run("verify", "--url", as_role, PROVLEDGER_ADMIN_TOKEN=admin_token)
        assert result.exit_code == 3, result.output
        assert "permission denied" in error_line(result)
    finally:
        with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_a_bundle_named_like_an_unread_one_is_still_a_problem_found(
    scene: Scene, tmp_path: Path
) -> None:
    # Whether a bundle was read is the report's word, not its file's name.
    junk = tmp_path / "q; nothing was read from it, give --max-unpacked 1.zip"
    junk.write_bytes(b"not a zip archive" * 10)
    result = run("verify-bundle", str(junk), "--public-key", str(scene.public_key))
    assert result.exit_code == 1, result.output
    assert "is not a readable zip archive" in error_line(result)
