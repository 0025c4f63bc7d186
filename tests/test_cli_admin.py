"""``provledger init`` and the admin token on every backend, a missing ledger, extras.

``init`` creates the ledger and prints an admin token once; admin commands take
it as ``--admin-token`` / ``$PROVLEDGER_ADMIN_TOKEN`` (the owner of a local
SQLite file may omit it); every other command refuses a ledger that does not
exist and creates nothing; ``provledger --help`` imports no optional package.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ledger import Ledger
from ledger.access import Admin
from ledger.cli import main
from ledger.errors import AuthenticationError, InvalidInputError, LedgerNotFoundError

ROOT = Path(__file__).resolve().parent.parent

#: An unknown admin token, given in the environment, refused.
FROM_VARIABLE = (
    "admin token is unknown (the token in $PROVLEDGER_ADMIN_TOKEN: one left there for "
    "another ledger?)"
)


def run(*args: str, **env: str | None) -> Result:
    environment: dict[str, str | None] = {
        "PROVLEDGER_URL": None,
        "PROVLEDGER_TOKEN": None,
        "PROVLEDGER_ADMIN_TOKEN": None,
        **env,
    }
    return CliRunner().invoke(main, list(args), env=environment)


def ok(*args: str, **env: str | None) -> Result:
    result = run(*args, **env)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


# -- init --------------------------------------------------------------------------------


def test_init_creates_the_ledger_and_prints_the_admin_token_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    first = ok("init", "--url", url)
    token = first.stdout.strip()
    assert token.startswith("plt_") and first.stdout == token + "\n"  # alone on stdout
    assert "created ledger" in first.stderr and "shown this once" in first.stderr
    again = ok("init", "--url", url)
    assert again.stdout == ""
    assert "ledger exists" in again.stderr and "admin token already" in again.stderr
    data = json.loads(ok("init", "--url", url, "--json").stdout)
    assert data == {
        "url": url,
        "backend": "sqlite",
        "position": 2,
        "created": False,
        "admin_token": None,
        "reissued": False,
    }
    with Ledger.open(url) as led:
        led.admin(token)  # a valid admin token
        # Only its sha256 is stored, as an event in the log.
        assert token not in (tmp_path / "new.db").read_bytes().decode("latin-1")
        assert led.verify().ok


@pytest.mark.postgres
def test_a_role_owning_only_its_schema_creates_and_copies_a_ledger_there(
    pg_url: str, tmp_path: Path
) -> None:
    # The usual least-privilege set-up: a schema made for the role, no CREATE on the
    # database (CREATE SCHEMA IF NOT EXISTS was refused it: "permission denied for
    # database")
    import psycopg

    from .conftest import _pg_dsn

    schema = pg_url.rsplit("schema=", 1)[1]
    role = f"r_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {role}")
    try:
        as_role = pg_url.replace("://postgres@", f"://{role}@", 1)
        assert as_role != pg_url
        made = run("init", "--url", as_role)
        assert made.exit_code == 0, made.output
        with Ledger.open(as_role) as led:
            assert led.verify().ok
        # and a copy into another schema the role owns
        other = f"{schema}_c"
        with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {other} AUTHORIZATION {role}")
        source = f"sqlite:///{tmp_path / 'l.db'}"
        assert run("init", "--url", source).exit_code == 0
        target = as_role.replace(f"schema={schema}", f"schema={other}")
        copied = run("copy", "--url", source, "--to", target)
        assert copied.exit_code == 0, copied.output
    finally:
        with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_inits_racing_on_a_new_ledger_name_one_creator_and_one_token(pg_url: str) -> None:
    # Six `provledger init` at once on a schema that does not exist yet
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    racing = [
        subprocess.Popen(
            [sys.executable, "-m", "ledger", "init", "--url", pg_url, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(6)
    ]
    said = []
    for process in racing:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        said.append(json.loads(out))

    # Exactly one printed the admin token and says it created the ledger; none other does
    (holder,) = [s for s in said if s["admin_token"] is not None]
    assert holder["created"] is True
    assert all(not s["created"] for s in said if s is not holder)
    with Ledger.open(pg_url) as led:
        led.admin(holder["admin_token"])


def test_init_of_an_existing_ledger_without_an_admin_token_does_not_say_it_created_it(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'made-by-code.db'}"
    with Ledger.open(url) as led:  # built through the library: no admin token yet
        led.admin().grant("agent-1", scope="proj-a", roles=["read"])

    data = json.loads(ok("init", "--url", url, "--json").stdout)

    assert data["created"] is False and data["admin_token"] is not None


def test_init_of_a_ledger_with_tables_but_an_empty_log_says_it_created_it(
    tmp_path: Path,
) -> None:
    # As another init racing this one leaves it: the tables made, nothing written yet
    url = f"sqlite:///{tmp_path / 'just-made.db'}"
    Ledger.open(url).close()

    data = json.loads(ok("init", "--url", url, "--json").stdout)

    assert data["created"] is True and data["admin_token"] is not None
    assert json.loads(ok("init", "--url", url, "--json").stdout)["created"] is False


def _with_a_reader(tmp_path: Path) -> tuple[str, str, str]:
    """(URL, admin token, agent-1's token) of a new ledger where agent-1 may read."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    admin_token = ok("init", "--url", url).stdout.strip()
    ok("grant", "agent-1", "--scope", "p", "--roles", "read", "--url", url)
    return url, admin_token, ok("token", "issue", "agent-1", "--url", url).stdout.strip()


def test_an_admin_token_is_no_principal_token_and_a_principal_token_no_admin_token(
    tmp_path: Path,
) -> None:
    url, admin_token, agent = _with_a_reader(tmp_path)
    with Ledger.open(url) as led:
        with pytest.raises(AuthenticationError, match="that is an admin token"):
            led.authenticate(admin_token)
        with pytest.raises(AuthenticationError, match="belongs to 'agent-1'"):
            led.admin(agent)
    refused = run("stats", "--url", url, "--admin-token", agent)
    assert refused.exit_code == 1
    assert "belongs to 'agent-1', not to the administrator" in refused.stderr


def test_another_admin_token_can_be_issued_and_the_last_one_is_never_revoked(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    first = ok("init", "--url", url).stdout.strip()
    last = run("token", "revoke", first, "--url", url, "--admin-token", first)
    assert last.exit_code == 1 and "last admin token" in last.stderr
    second = ok("token", "issue", "--admin", "--url", url, "--admin-token", first).stdout.strip()
    ok("token", "revoke", first, "--url", url, "--admin-token", second)
    refused = run("stats", "--url", url, "--admin-token", first)
    assert refused.exit_code == 1 and refused.stderr == (
        "error: admin token was revoked (if no admin token is usable any more, "
        "`provledger init` issues a new one)\n"
    )
    assert json.loads(ok("stats", "--url", url, "--admin-token", second, "--json").stdout)


def test_a_token_revoke_that_fails_warns_of_the_token_given_on_the_command_line(
    tmp_path: Path,
) -> None:
    url, admin, agent = _with_a_reader(tmp_path)
    warned = "warning: TOKEN was on the command line, visible to other users"

    failed = run("token", "revoke", agent, "--url", url, "--admin-token", agent)
    piped = CliRunner().invoke(
        main, ["token", "revoke", "-", "--url", url, "--admin-token", agent], input=agent
    )
    done = ok("token", "revoke", agent, "--url", url, "--admin-token", admin)

    assert failed.exit_code == 1 and warned in failed.stderr, failed.stderr
    assert piped.exit_code == 1 and warned not in piped.stderr, piped.stderr
    assert warned not in done.stderr  # revoked: harmless where it was seen


@pytest.mark.parametrize("given", ["", "  \t \n", "\nplt_x\n"], ids=["empty", "blank", "2nd-line"])
def test_token_revoke_dash_without_a_token_on_stdin_says_so_and_writes_nothing(
    tmp_path: Path, given: str
) -> None:
    # Not "token is unknown": no token was read (only the first line is).
    url = f"sqlite:///{tmp_path / 'x.db'}"
    env = {"PROVLEDGER_URL": url, "PROVLEDGER_ADMIN_TOKEN": ok("init", "--url", url).stdout.strip()}
    ok("grant", "agent-1", "--scope", "p", "--roles", "read", **env)
    agent = ok("token", "issue", "agent-1", **env).stdout.strip()
    with Ledger.open(url) as led:
        before = led.position
    refused = CliRunner().invoke(main, ["token", "revoke", "-"], input=given, env=env)
    assert refused.exit_code == 1, refused.output
    assert refused.stderr == "error: no token on standard input (token revoke - reads one line)\n"
    with Ledger.open(url) as led:
        assert led.position == before and led.authenticate(agent).principal == "agent-1"
    two = CliRunner().invoke(main, ["token", "revoke", "-"], input=f"{agent} {agent}\n", env=env)
    assert two.stderr == "error: token is unknown: this ledger never issued it\n"


def test_token_revoke_dash_with_stdin_closed_is_a_usage_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    admin = ok("init", "--url", url).stdout.strip()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PROVLEDGER_URL": url}
    done = subprocess.run(
        [sys.executable, "-m", "ledger", "token", "revoke", "-"],
        preexec_fn=lambda: os.close(0),  # as `<&-` in a shell
        capture_output=True,
        text=True,
        env={**env, "PROVLEDGER_ADMIN_TOKEN": admin},
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "standard input is closed (pipe the token in, or give it as TOKEN)" in done.stderr
    with Ledger.open(url) as led:
        assert led.position == 2  # init's events only


def test_admin_commands_on_a_file_another_user_owns_need_the_admin_token(tmp_path: Path) -> None:
    if os.geteuid() != 0:  # pragma: no cover - only root can give a file away
        pytest.skip("needs root to hand the file to another user")
    path = tmp_path / "x.db"
    url = f"sqlite:///{path}"
    admin_token = ok("init", "--url", url).stdout.strip()
    os.chown(path, 65534, 65534)
    refused = run("grant", "a", "--scope", "p", "--roles", "read", "--url", url)
    assert refused.exit_code == 1
    assert "a file another user owns" in refused.stderr and "--admin-token" in refused.stderr
    ok("grant", "a", "--scope", "p", "--roles", "read", "--url", url, "--admin-token", admin_token)
    ok("stats", "--url", url, PROVLEDGER_ADMIN_TOKEN=admin_token)


@pytest.mark.postgres
def test_init_and_copy_warn_of_a_postgresql_url_that_names_no_schema(
    pg_url: str, tmp_path: Path
) -> None:
    import psycopg

    # A database of this test's own, whose public schema nothing else uses.
    database = f"t_{uuid.uuid4().hex[:16]}"
    server = pg_url.split("?")[0].rsplit("/", 1)[0]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    try:
        bare, other = f"{server}/{database}", f"{server}/{database}?schema=copied"
        source = f"sqlite:///{tmp_path / 'x.db'}"
        ok("init", "--url", source)
        warned = f"warning: {bare} names no schema: {{}} puts the ledger into schema 'public'"

        made = run("init", "--url", bare)
        again = run("init", "--url", bare)  # exists: nothing is put anywhere
        copied = run("copy", "--url", source, "--to", bare)  # refused: not empty
        named = run("copy", "--url", source, "--to", other)

        assert made.exit_code == 0 and warned.format("init") in made.stderr, made.stderr
        assert again.exit_code == 0 and "warning" not in again.stderr, again.stderr
        assert copied.exit_code == 1 and warned.format("copy") in copied.stderr, copied.stderr
        assert named.exit_code == 0 and "warning" not in named.stderr, named.stderr
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


@pytest.mark.postgres
def test_the_admin_token_flow_on_postgresql(pg_url: str) -> None:
    # Before init: nothing there, and nothing is created by asking.
    missing = run("stats", "--url", pg_url)
    assert missing.exit_code == 1
    assert "no ledger at" in missing.stderr and "run `provledger init`" in missing.stderr
    with pytest.raises(LedgerNotFoundError):
        Ledger.open(pg_url, create=False)
    # init prints the admin token once.
    admin_token = ok("init", "--url", pg_url).stdout.strip()
    assert admin_token.startswith("plt_")
    assert ok("init", "--url", pg_url).stdout == ""
    # Admin commands need it on a shared database.
    grant = ["grant", "agent-1", "--scope", "proj-a", "--roles", "propose,read", "--url", pg_url]
    refused = run(*grant)
    assert refused.exit_code == 1
    assert "shared postgresql database" in refused.stderr and "--admin-token" in refused.stderr
    assert run(*grant, "--admin-token", "plt_wrong").stderr == "error: admin token is unknown\n"
    ok(*grant, "--admin-token", admin_token)
    agent = ok(
        "token", "issue", "agent-1", "--url", pg_url, PROVLEDGER_ADMIN_TOKEN=admin_token
    ).stdout.strip()
    # The principal's token works for principal commands.
    got = ok("records", "--scope", "proj-a", "--url", pg_url, "--json", PROVLEDGER_TOKEN=agent)
    assert json.loads(got.stdout)["records"] == []
    # Authorization replay accepts the admin token's events.
    verified = ok("verify", "--url", pg_url, "--json", PROVLEDGER_ADMIN_TOKEN=admin_token)
    assert json.loads(verified.stdout)["ok"] is True


def test_grants_shows_who_held_which_role_where_and_until_when(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    ok("init", "--url", url)
    ok("grant", "agent-1", "--scope", "proj-a", "--roles", "propose,read", "--url", url)
    ok("grant", "reviewer", "--scope", "proj-b", "--roles", "approve", "--url", url)
    ok("revoke-grant", "agent-1", "--scope", "proj-a", "--roles", "propose", "--url", url)

    data = json.loads(ok("grants", "--subject", "agent-1", "--url", url, "--json").stdout)

    held = {(g["role"], g["revoked_position"] is None) for g in data["grants"]}
    assert held == {("propose", False), ("read", True)}
    assert {g["scope"] for g in data["grants"]} == {"proj-a"}
    assert all(g["granted_by"] == "admin" for g in data["grants"])
    table = ok("grants", "--url", url, COLUMNS="200").stdout
    assert "reviewer" in table and "held now" in table and "by admin (position" in table
    assert ok("grants", "--scope", "nowhere", "--url", url).stdout == "no grants in nowhere\n"
    refused = run("grant", "admin", "--scope", "proj-a", "--roles", "read", "--url", url)
    assert refused.exit_code == 1 and "'admin' is reserved" in refused.stderr


# -- a ledger that does not exist ----------------------------------------------------------


def test_a_ledger_url_in_a_directory_that_does_not_exist_names_the_directory(
    tmp_path: Path,
) -> None:
    path = tmp_path / "no-such-dir" / "x.db"
    result = run("get", "E1", "--token", "plt_x", "--url", f"sqlite:///{path}")
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: no ledger at sqlite:///{path}: the directory {path.parent} does not "
        "exist; check --url\n"
    )
    assert not path.parent.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["read", "--scope", "p", "--claim", "k", "--token", "plt_x"],
        ["get", "E1", "--token", "plt_x"],
        ["stats"],
        ["grant", "a", "--scope", "p", "--roles", "read"],
        ["verify"],
        ["token", "issue", "a"],
    ],
    ids=lambda a: a[0],
)
def test_every_command_but_init_refuses_a_missing_ledger_and_creates_nothing(
    tmp_path: Path, args: list[str]
) -> None:
    path = tmp_path / "walkthroug.db"  # a typo of the real name
    result = run(*args, "--url", f"sqlite:///{path}")
    # verify, a check, exits 3: it could not check (1 is a problem it found)
    assert result.exit_code == (3 if args == ["verify"] else 1)
    # (the URL came from --url: that is what to check)
    assert result.stderr == (
        f"error: no ledger at sqlite:///{path}; run `provledger init` to create one, "
        "put back a backup if it was lost, or check --url\n"
    )
    assert list(tmp_path.iterdir()) == []  # no file, no -wal, no -shm
    from_variable = run(*args, PROVLEDGER_URL=f"sqlite:///{path}")
    assert from_variable.stderr.endswith("or check PROVLEDGER_URL\n")
    assert list(tmp_path.iterdir()) == []


def test_the_default_url_is_not_created_by_a_read_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = run("read", "--scope", "p", "--claim", "k", "--token", "plt_x")
    assert result.exit_code == 1 and "no ledger at sqlite:///provledger.db" in result.stderr
    assert result.stderr.endswith("or check --url or PROVLEDGER_URL\n")
    assert not (tmp_path / "provledger.db").exists()


def test_a_url_variable_set_empty_is_refused_not_taken_for_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A shell that lost the value (PROVLEDGER_URL=$UNSET) must not start a second ledger.
    monkeypatch.chdir(tmp_path)
    for args in (("init",), ("stats",)):
        result = run(*args, PROVLEDGER_URL="")
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith("error: $PROVLEDGER_URL is set but empty")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("sqlite:///l.db ", "ledger URL 'sqlite:///l.db' ends with white space (' ')"),
        ("sqlite:///l.db\n", "ledger URL 'sqlite:///l.db' ends with white space ('\\n')"),
        (" postgresql://me:pw@h/db", "ledger URL 'postgresql://***@h/db' begins with"),
    ],
)
def test_a_url_with_white_space_at_an_end_is_refused_not_taken_for_another_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, said: str
) -> None:
    # A pasted URL's stray space would create "l.db " beside "l.db".
    monkeypatch.chdir(tmp_path)
    result = run("init", PROVLEDGER_URL=url)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {said}") and "pw" not in result.stderr
    assert list(tmp_path.iterdir()) == []
    # A name that does end in a space is written %20.
    assert run("init", PROVLEDGER_URL="sqlite:///l.db%20").exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["l.db "]


def test_a_file_that_is_not_a_ledger_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"")
    result = run("get", "E1", "--token", "plt_x", "--url", f"sqlite:///{path}")
    assert result.exit_code == 1 and "no ledger at" in result.stderr
    assert path.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_a_damaged_ledger_file_is_called_unreadable_not_absent(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(f"sqlite:///{path}") as led:
        led.admin().grant("agent-1", scope="p", roles=["propose", "read"])
        agent = led.authenticate(led.admin().issue_token("agent-1"))
        for i in range(300):
            agent.propose(scope="p", claim_key=f"k{i}", value="x" * 200, kind="fact")
    with open(path, "r+b") as f:  # cut off its second half
        f.truncate(path.stat().st_size // 2)
    damaged = path.read_bytes()
    url = f"sqlite:///{path}"
    for args in (("verify", "--url", url), ("get", "E1", "--url", url), ("init", "--url", url)):
        result = run(*args, PROVLEDGER_TOKEN="plt_x")
        assert result.exit_code == (3 if args[0] == "verify" else 1), args
        assert result.stderr == (
            f"error: the SQLite file at {path} cannot be read: database disk image is "
            "malformed; whether it holds a ledger is not known (a damaged file: restore "
            "it from a copy)\n"
        ), args
    assert path.read_bytes() == damaged


def test_a_file_of_something_else_is_named_for_what_it_is_not_sent_to_init(
    tmp_path: Path,
) -> None:
    # `init` is no answer for another program's file: say what the file is.
    text, other = tmp_path / "notes.db", tmp_path / "other.db"
    text.write_bytes(b"hello, not a database")
    with closing(sqlite3.connect(other)) as c:
        c.execute("CREATE TABLE t (x)")
        c.commit()
    before = {p.name: p.read_bytes() for p in (text, other)}
    for path, what in (
        (text, "not an SQLite database"),
        (other, "an SQLite database without a ledger in it"),
    ):
        result = run("get", "E1", "--token", "plt_x", "--url", f"sqlite:///{path}")
        assert result.exit_code == 1
        assert result.stderr == (
            f"error: no ledger at sqlite:///{path}: the file there is {what}; check --url\n"
        )
    assert {p.name: p.read_bytes() for p in (text, other)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db", "other.db"]
    # Nor does `init` or `demo` put a ledger into them
    for path, holds in ((text, "is not an SQLite database"), (other, "holds t")):
        for command in ("init", "demo"):
            refused = run(command, "--url", f"sqlite:///{path}")
            assert refused.exit_code == 1
            assert refused.stderr == (
                f"error: not creating a ledger in {path}: it {holds}, not a ledger; "
                "give a ledger a file of its own (nothing was changed)\n"
            )
    assert {p.name: p.read_bytes() for p in (text, other)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db", "other.db"]
    # An SQLite file with no table yet is a file of its own
    empty = tmp_path / "empty.db"
    with closing(sqlite3.connect(empty)) as c:
        c.execute("PRAGMA user_version = 1")
        c.commit()
    assert ok("init", "--url", f"sqlite:///{empty}").stdout.startswith("plt_")


def test_a_postgresql_schema_of_another_program_gets_no_ledger(pg_url: str) -> None:
    # Given a schema holding another program's table
    import psycopg

    from tests.conftest import _pg_dsn

    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.payroll (x int)")
    # Then neither `init` nor `demo` puts a ledger into it, as into such a file
    for command in ("init", "demo"):
        refused = run(command, "--url", pg_url)
        assert refused.exit_code == 1, refused.output
        assert refused.stderr == (
            f"error: not creating a ledger in schema {schema!r} of {pg_url}: it holds payroll, "
            "not a ledger; give a ledger a schema of its own (nothing was changed)\n"
        )
    with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
    assert tables == [("payroll",)]


def test_a_schema_holding_only_another_programs_view_or_sequence_gets_no_ledger(
    pg_url: str,
) -> None:
    # Given a schema holding only another program's sequence, then also a view
    import psycopg

    from tests.conftest import _pg_dsn

    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE SEQUENCE {schema}.invoice_numbers")
        # (named like a ledger's, but none of its own)
        conn.execute(f"CREATE SEQUENCE {schema}.provledger_events_counter")
    # Then `init` refuses it, naming the sequence, and leaves the schema as it was
    refused = run("init", "--url", pg_url)
    assert refused.exit_code == 1, refused.output
    assert "it holds invoice_numbers, provledger_events_counter, not a ledger" in refused.stderr
    with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE VIEW {schema}.open_invoices AS SELECT 1 AS n")
    refused = run("demo", "--url", pg_url)
    assert refused.exit_code == 1, refused.output
    assert "invoice_numbers, open_invoices, provledger_events_counter, not a" in refused.stderr
    with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
        kept = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s ORDER BY 1",
            (schema,),
        ).fetchall()
    assert kept == [("invoice_numbers",), ("open_invoices",), ("provledger_events_counter",)]


# -- extras and lazy imports ------------------------------------------------------------------


def _modules_after(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return {m.split(".", 1)[0] for m in done.stdout.split()}


def test_help_imports_no_postgresql_prov_or_graphviz() -> None:
    loaded = _modules_after(
        "from ledger.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert "ledger" in loaded and "click" in loaded
    assert not loaded & {"psycopg", "psycopg_pool", "prov", "lxml", "graphviz", "cryptography"}


def test_a_sqlite_command_imports_no_postgresql(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    ok("init", "--url", url)
    loaded = _modules_after(
        "from ledger.cli import main\n"
        f"try:\n    main(['stats', '--url', {url!r}])\nexcept SystemExit:\n    pass"
    )
    assert "eventsourcing" in loaded and "psycopg" not in loaded


def _without(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``provledger ARGS`` in a fresh interpreter where ``module`` is not installed."""
    code = (
        f"import sys\nsys.modules[{module!r}] = None\n"
        f"from ledger.cli import main\nmain({list(args)!r})"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_a_missing_extra_is_named_in_the_error() -> None:
    done = _without("psycopg", "stats", "--url", "postgresql://u@db.invalid/x")
    assert done.returncode == 1
    assert "install the 'postgres' extra: pip install -e '.[postgres]'" in done.stderr


def test_serve_without_its_extra_says_which_extra_to_install_as_an_error_line() -> None:
    done = _without("starlette", "serve", "--url", "sqlite:///never-made.db")
    assert done.returncode == 1
    assert done.stderr == (
        "error: this needs starlette, which is not installed; install the 'serve' extra: "
        "pip install -e '.[serve]' in provledger's source directory, or pip install "
        "'provledger[serve]' where it was installed as a package\n"
    )


def _intact_bundle(tmp_path: Path) -> tuple[str, str]:
    """(bundle, public key) of record F1, signed by a key made in ``tmp_path``."""
    from ledger import Kind
    from ledger.bundle import write_bundle
    from ledger.heads import generate_key

    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}") as led:
        led.admin().grant("agent-1", scope="p", roles=["propose", "read", "audit"])
        agent = led.authenticate(led.admin().issue_token("agent-1"))
        agent.propose(scope="p", claim_key="k", value=1, kind=Kind.FACT, id="F1")
        generate_key(tmp_path / "key")
        write_bundle(agent, "F1", tmp_path / "key", tmp_path / "b.zip")
    return str(tmp_path / "b.zip"), str(tmp_path / "key.pub")


def test_verify_bundle_without_cryptography_names_the_extra_not_an_alteration(
    tmp_path: Path,
) -> None:
    # Given an intact bundle
    bundle, _ = _intact_bundle(tmp_path)

    # When it is checked where the cryptography package is not installed
    done = _without("cryptography", "verify-bundle", bundle)

    # Then it says what to install, and does not call the bundle altered: it could
    # not check it (exit 3), which is no problem found (exit 1)
    assert done.returncode == 3
    assert "install the 'evidence' extra: pip install -e '.[evidence]'" in done.stderr
    assert "altered" not in done.stderr


def test_verify_bundle_needs_only_the_evidence_extra_not_prov(tmp_path: Path) -> None:
    # An auditor with the evidence extra only (no prov) checks a bundle offline
    bundle, key = _intact_bundle(tmp_path)
    done = _without("prov", "verify-bundle", bundle, "--public-key", key)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert "F1" in done.stdout


def test_export_without_the_prov_extra_says_which_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    ok("init", "--url", url)
    ok("grant", "auditor", "--scope", "p", "--roles", "audit", "--url", url)
    token = ok("token", "issue", "auditor", "--url", url).stdout.strip()
    # As if prov were not installed (its modules imported by earlier tests included).
    for name in [m for m in sys.modules if m == "prov" or m.startswith("prov.")] or ["prov"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "ledger.prov", raising=False)
    result = run("export", "--url", url, PROVLEDGER_TOKEN=token)
    assert result.exit_code == 1
    assert result.stderr == (
        "error: this needs prov, which is not installed; install the 'prov' extra: "
        "pip install -e '.[prov]' in provledger's source directory, or pip install "
        "'provledger[prov]' where it was installed as a package\n"
    )


def test_pyproject_declares_the_extras_and_test_pulls_them_all() -> None:
    import tomllib

    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {"postgres", "prov", "mcp", "langgraph", "serve", "evidence"} <= set(extras)
    core = " ".join(project["dependencies"])
    assert "psycopg" not in core and "prov" not in core and "graphviz" not in core
    test = set(extras["test"])
    for name in ("postgres", "prov", "mcp", "langgraph", "serve", "evidence"):
        assert set(extras[name]) <= test, name


def test_an_expired_admin_token_does_not_count_as_another(ledger: Ledger, clock: Any) -> None:
    admin = ledger.admin()
    first = admin.bootstrap_admin_token()
    assert first is not None
    admin.issue_admin_token(expires=clock.advance(minutes=0) + timedelta(minutes=1))
    clock.advance(minutes=2)  # the second token has expired
    before = ledger.position
    with pytest.raises(InvalidInputError, match="still usable \\(the others have expired\\)"):
        admin.revoke_token(first)
    assert ledger.position == before
    ledger.admin(first)  # still the administrator's
    third = admin.issue_admin_token()
    admin.revoke_token(first)
    # An expired token takes nothing away when revoked, even with only one left usable
    fourth = admin.issue_admin_token(expires=clock.now + timedelta(minutes=1))
    clock.advance(minutes=2)
    admin.revoke_token(fourth)
    with pytest.raises(AuthenticationError, match="revoked"):
        ledger.admin(fourth)
    with pytest.raises(AuthenticationError, match="revoked"):
        ledger.admin(first)
    assert ledger.admin(third) is not None


def test_the_last_admin_token_that_does_not_expire_is_not_revoked(
    ledger: Ledger, clock: Any
) -> None:
    admin = ledger.admin()
    first = admin.bootstrap_admin_token()
    assert first is not None
    brief = admin.issue_admin_token(expires=clock.now + timedelta(hours=1))
    before = ledger.position
    with pytest.raises(
        InvalidInputError,
        match=r"^that is the last admin token that does not expire: the others expire "
        r"\(the last at .+\), and then no admin command could run: issue one without "
        r"--expires first",
    ):
        admin.revoke_token(first)
    assert ledger.position == before
    admin.revoke_token(brief)  # an expiring one goes: one that does not expire stays
    lasting = admin.issue_admin_token()
    admin.revoke_token(first)  # another that does not expire is kept
    clock.advance(hours=2)
    assert ledger.admin(lasting) is not None


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_init_issues_an_admin_token_to_a_ledger_none_of_whose_tokens_is_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    first = ok("init", "--url", url).stdout.strip()
    with Ledger.open(url) as led, monkeypatch.context() as older:
        # Revoked as a ledger made before the rule kept one that does not expire.
        older.setattr(Admin, "_keep_an_admin_token", lambda *_: None)
        brief = led.admin().issue_admin_token(expires=datetime.now(UTC) + timedelta(seconds=1))
        led.admin().revoke_token(first)
    time.sleep(1.2)
    refused = run("stats", "--url", url, "--admin-token", brief)
    assert refused.exit_code == 1
    assert "(if no admin token is usable any more, `provledger init` issues" in refused.stderr

    if as_json:
        again = json.loads(ok("init", "--url", url, "--json").stdout)
        assert again["reissued"] is True and again["created"] is False
        issued = again["admin_token"]
    else:
        said = ok("init", "--url", url)
        assert "none of its admin tokens was usable any more" in said.stderr
        issued = said.stdout.strip()
    assert issued not in (first, brief)
    assert json.loads(ok("stats", "--url", url, "--admin-token", issued, "--json").stdout)
    third = ok("init", "--url", url)  # once: a usable token now exists
    assert third.stdout == "" and "admin token already" in third.stderr


def test_init_goes_by_the_logs_admin_tokens_not_a_forged_token_view(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    url = f"sqlite:///{path}"
    ok("init", "--url", url)
    # Given the token view altered to say the admin token has expired
    with closing(sqlite3.connect(path)) as c:
        c.execute("UPDATE pl_tokens SET expires = 1 WHERE subject = '@admin'")
        c.commit()

    again = ok("init", "--url", url)

    assert again.stdout == "" and "admin token already" in again.stderr


def _at_once(calls: list[Any]) -> list[BaseException | None]:
    """Run ``calls`` in threads released together; what each raised (or None)."""
    start = threading.Barrier(len(calls))
    outcomes: list[BaseException | None] = [None] * len(calls)

    def run_one(i: int) -> None:
        start.wait()
        try:
            calls[i]()
        except BaseException as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run_one, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_admins_revoking_each_others_tokens_at_once_keep_one(shared_url: str) -> None:
    # Each admin in its own ledger object (its own connections), as two processes.
    with Ledger.open(shared_url) as one, Ledger.open(shared_url) as two:
        kept = one.admin().bootstrap_admin_token()
        assert kept is not None
        one.admin().grant("agent-1", "p", ["read"])
        for _ in range(8):
            a, b = kept, one.admin().issue_admin_token()  # the only two usable ones
            outcomes = _at_once(
                [
                    lambda a=a, b=b: one.admin(a).revoke_token(b),
                    lambda a=a, b=b: two.admin(b).revoke_token(a),
                ]
            )
            refused = [o for o in outcomes if o is not None]
            assert len(refused) == 1, outcomes
            assert isinstance(refused[0], (InvalidInputError, AuthenticationError))
            kept = a if outcomes[0] is None else b
            assert one.admin(kept) is not None
            # One revocation of one token is appended once, however many ask
            token = one.admin().issue_token("agent-1")
            before = one.position
            outcomes = _at_once(
                [
                    lambda t=token: one.admin().revoke_token(t),
                    lambda t=token: one.admin().revoke_token(t),
                    lambda t=token: two.admin().revoke_token(t),
                ]
            )
            assert sum(o is None for o in outcomes) == 1, outcomes
            assert one.position == before + 1


def test_an_admin_handle_is_refused_once_its_token_is_revoked_or_expired(
    ledger: Ledger, clock: Any
) -> None:
    host = ledger.admin()  # the code that opened the ledger: trusted as it is
    first = host.bootstrap_admin_token()
    assert first is not None
    short = host.issue_admin_token(expires=clock.now + timedelta(minutes=1))
    host.grant("agent-1", scope="p", roles=["propose", "read"])
    agent = ledger.authenticate(host.issue_token("agent-1"))
    agent.capture(scope="p", uri="https://x.test/a", content=b"the bytes", id="E1")
    ref = (agent.get("E1").evidence or {})["snapshot_ref"]
    bound, timed = ledger.admin(first), ledger.admin(short)
    bound.grant("agent-2", scope="p", roles=["read"])  # works while its token is valid
    timed.grant("agent-3", scope="p", roles=["read"])
    kept = host.issue_admin_token()
    host.revoke_token(first)
    clock.advance(minutes=2)  # `short` has expired
    before = ledger.position

    calls: dict[str, Any] = {
        "grant": lambda a: a.grant("agent-2", scope="p", roles=["approve"]),
        "revoke_grant": lambda a: a.revoke_grant("agent-2", scope="p"),
        "issue_token": lambda a: a.issue_token("agent-2"),
        "issue_admin_token": lambda a: a.issue_admin_token(),
        "bootstrap_admin_token": lambda a: a.bootstrap_admin_token(),
        "revoke_token": lambda a: a.revoke_token(kept),
        "erase_snapshot": lambda a: a.erase_snapshot(ref, reason="request"),
        "scrub_erased": lambda a: a.scrub_erased(),
        "access_history": lambda a: a.access_history(),
    }
    for handle, why in ((bound, "admin token was revoked"), (timed, "admin token expired")):
        why += " (if no admin token is usable any more, `provledger init` issues a new one)"
        for name, call in calls.items():
            with pytest.raises(AuthenticationError) as refused:
                call(handle)
            assert str(refused.value) == why, name

    # Nothing was written, and the bytes are still there
    assert ledger.position == before
    assert agent.snapshot(ref) == b"the bytes"
    assert [g.role for g in host.access_history(subject="agent-2")] == ["read"]
    ledger.admin(kept).grant("agent-2", scope="p", roles=["approve"])


def test_scrub_erased_fails_while_a_reader_keeps_the_bytes_and_scrubs_them_after(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    url = f"sqlite:///{path}"
    with Ledger.open(url) as led:
        led.admin().grant("agent-1", scope="p", roles=["propose", "read"])
        agent = led.authenticate(led.admin().issue_token("agent-1"))
        agent.capture(scope="p", uri="https://x.test/p", content=b"personal-data", id="P1")
        ref = (agent.get("P1").evidence or {})["snapshot_ref"]
    files = [path, tmp_path / "x.db-wal"]
    with closing(sqlite3.connect(path)) as reader:
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM pl_snapshots").fetchone()
        erased = ok("erase-snapshot", ref, "--reason", "request 7", "--url", url, "--json")
        assert json.loads(erased.stdout)["scrubbed"] is False
        assert "may still hold the erased bytes" in erased.stderr
        refused = run("scrub-erased", "--url", url, "--json")
        assert refused.exit_code == 1
        said = json.loads(refused.stdout)  # why, as stderr says it
        assert said["scrubbed"] is False and refused.stderr == f"error: {said['reason']}\n"
        assert said["reason"].startswith("the database's files may still hold erased bytes: a")
        assert any(b"personal-data" in p.read_bytes() for p in files if p.exists())
        reader.rollback()
    done = ok("scrub-erased", "--url", url)
    assert done.stdout == (
        "scrubbed: the database's files hold no erased bytes, as far as the database can "
        "tell (docs/evidence.md: what an SQLite file 0.1.0 wrote may still hold)\n"
    )
    assert all(b"personal-data" not in p.read_bytes() for p in files if p.exists())


@pytest.mark.parametrize(
    "args",
    [
        ("init",),
        ("grant", "a", "--scope", "s", "--roles", "read"),
        ("stats",),
        ("get", "E1", "--token", "plt_x"),
    ],
)
def test_memory_is_refused_by_commands_that_would_lose_what_they_write(
    args: tuple[str, ...],
) -> None:
    # Each command is a process of its own: an in-memory ledger would be gone
    # when it exits, a grant or an admin token with it
    refused = run(*args, "--url", "memory:")
    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: memory: keeps a ledger only inside one process")
    assert refused.stdout == ""


def test_the_demo_runs_on_memory_in_one_process() -> None:
    result = ok("demo", "--json", "--url", "memory:")
    assert json.loads(result.stdout)["rows"]


@pytest.mark.parametrize("command", ["init", "stats", "demo"])
def test_a_ledger_url_naming_a_directory_says_so(tmp_path: Path, command: str) -> None:
    url = f"sqlite:///{tmp_path}"
    refused = run(command, "--url", url)
    assert refused.exit_code == 1
    # init and demo create a ledger: there is none to miss, but one they cannot make
    told = "no ledger at" if command == "stats" else "cannot create a ledger at"
    assert refused.stderr == (
        f"error: {told} {url}: {tmp_path} is a directory; give the path of "
        f"a file in it (sqlite:///{tmp_path / 'provledger.db'})\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_rebuild_projections_help_describes_the_script() -> None:
    script = str(ROOT / "scripts" / "rebuild_projections.py")
    done = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Drop every view and replay the whole event log, then compare digests." in done.stdout
    assert "exits 1 if the rebuilt views differ" in done.stdout  # the rest, as the epilog


def test_a_rollback_removing_the_admin_tokens_issue_is_caught_by_a_kept_head(
    pg_url: str, tmp_path: Path
) -> None:
    from urllib.parse import parse_qs, urlparse

    import psycopg

    # Given a PostgreSQL ledger, a second admin token, and a head kept after its issue
    first = ok("init", "--url", pg_url).stdout.strip()
    issued = ok("token", "issue", "--admin", "--url", pg_url, PROVLEDGER_ADMIN_TOKEN=first)
    second = issued.stdout.strip()
    key, heads = tmp_path / "key", tmp_path / "heads.jsonl"
    ok("keygen", "--out", str(key))
    head = ["head", "--key", str(key), "--append", str(heads), "--url", pg_url]
    ok(*head, PROVLEDGER_ADMIN_TOKEN=second)
    # (where a token never issued is refused as unknown: could not check, exit 3)
    never = run("verify", "--url", pg_url, PROVLEDGER_ADMIN_TOKEN="plt_" + "0" * 40)
    assert (never.exit_code, never.stderr) == (3, f"error: {FROM_VARIABLE}\n")
    # When the log is rolled back past that issue (the event and its leaf deleted)
    schema = parse_qs(urlparse(pg_url).query)["schema"][0]
    with psycopg.connect("host=127.0.0.1 dbname=test user=postgres", autocommit=True) as conn:
        for table in ("provledger_events", "pl_merkle_leaves"):
            conn.execute(f"ALTER TABLE {schema}.{table} DISABLE TRIGGER USER")
        (last,) = conn.execute(f"SELECT max(position) FROM {schema}.pl_merkle_leaves").fetchone()
        conn.execute(f"DELETE FROM {schema}.provledger_events WHERE notification_id = {last}")
        conn.execute(f"DELETE FROM {schema}.pl_merkle_leaves WHERE position = {last}")

    # Then verify with the kept head names the rollback (exit 1), not the token (exit 3)
    checked = run(
        "verify", "--heads", str(heads), "--public-key", f"{key}.pub", "--url", pg_url,
        "--json", PROVLEDGER_ADMIN_TOKEN=second,
    )  # fmt: skip
    assert checked.exit_code == 1, checked.output
    report = json.loads(checked.stdout)
    assert report["failed_checks"][0] == "consistency", report
    assert "events were removed after it was taken" in report["problem"]
    assert "error: tampering detected" in checked.stderr


def test_an_unknown_admin_token_gets_no_report_of_a_ledger_without_kept_heads(
    pg_url: str,
) -> None:
    import psycopg

    # Given a PostgreSQL ledger whose views were edited behind its back
    token = ok("init", "--url", pg_url).stdout.strip()
    ok("grant", "agent-1", "--scope", "proj-a", "--roles", "read", "--url", pg_url,
       PROVLEDGER_ADMIN_TOKEN=token)  # fmt: skip
    schema = pg_url.rpartition("schema=")[2]
    with psycopg.connect("host=127.0.0.1 dbname=test user=postgres", autocommit=True) as conn:
        conn.execute(f"UPDATE {schema}.pl_grants SET scope = 'proj-z'")

    # When verify is given a token the log never issued, and no kept head
    made_up = run("verify", "--url", pg_url, "--json", PROVLEDGER_ADMIN_TOKEN="plt_made_up")
    real = run("verify", "--url", pg_url, "--json", PROVLEDGER_ADMIN_TOKEN=token)

    # Then it is refused (could not check), the report kept for the administrator
    assert made_up.exit_code == 3, made_up.output
    assert json.loads(made_up.stdout)["error"]["message"] == FROM_VARIABLE
    assert real.exit_code == 1 and "proj-z" in json.loads(real.stdout)["problem"]


def test_an_admin_token_on_a_ledger_with_an_empty_log_is_refused_saying_none_was_issued(
    pg_url: str,
) -> None:
    # Given a schema holding a ledger's tables and no event (a copy into it killed,
    # an init that did not finish, a library open)
    Ledger.open(pg_url).close()
    # Then an admin command says why no admin token can be known there
    refused = run("stats", "--url", pg_url, PROVLEDGER_ADMIN_TOKEN="plt_" + "0" * 40)
    assert refused.exit_code == 1
    assert refused.stderr.startswith(
        "error: admin token is unknown: this ledger's log is empty, so no admin token was "
        "ever issued here"
    ), refused.stderr
    assert "`provledger init` issues the first one" in refused.stderr
    # and init then issues the first
    assert ok("init", "--url", pg_url).stdout.startswith("plt_")
