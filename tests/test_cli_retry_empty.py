"""An empty ledger left by a ``copy`` or an ``init`` that did not finish is taken by
the next one: ``copy`` into it again, or ``init`` there, works and says what it
found; tables missing are made. A target holding any event is never written:
the refusal names its table and log position, and the ledger stays as it was.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from ledger import Ledger
from ledger.cli import main
from tests.conftest import Clock, new_pg_schema_url
from tests.test_copy import build, build_altered
from tests.test_copy_killed import kill_copy_at


def run(*args: str, **env: str) -> Result:
    environment: dict[str, str | None] = {
        "PROVLEDGER_URL": None,
        "PROVLEDGER_TOKEN": None,
        "PROVLEDGER_ADMIN_TOKEN": None,
        **env,
    }
    return CliRunner().invoke(main, list(args), env=environment)


def where(url: str) -> str:
    """How the note and the refusals name the target: its path, or its schema."""
    if url.startswith("sqlite:"):
        return url.removeprefix("sqlite:///")
    return f"schema {url.rpartition('schema=')[2]!r} of {url}"


def events_table(url: str) -> str:
    return "stored_events" if url.startswith("sqlite:") else "provledger_events"


def drop(url: str, *tables: str) -> None:
    """Drop ``tables`` of the ledger at ``url`` behind its back."""
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as con:
            for table in tables:
                con.execute(f"DROP TABLE {table}")
        return
    schema = url.rpartition("schema=")[2]
    with psycopg.connect(url.partition("?")[0], autocommit=True) as conn:
        for table in tables:
            conn.execute(f"DROP TABLE {schema}.{table}")


def note_of(result: Result) -> str:
    """The one ``note:`` line on stderr."""
    (line,) = [s for s in result.stderr.splitlines() if s.startswith("note: ")]
    return line


def refused_as_holding(result: Result, url: str, position: int) -> None:
    """``result`` is copy's refusal of ``url`` as a ledger at ``position``, as JSON."""
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "StorageError"
    assert error["message"] == (
        f"copy refused: the target {where(url)} is not empty: its table "
        f"{events_table(url)} holds rows (a ledger at log position {position}); copy "
        "into a new file or an empty schema (nothing was written)"
    )


@pytest.mark.parametrize(
    "missing",
    [("pl_tracking", "pl_merkle_leaves"), ("pl_records",)],
    ids=["views-and-leaves", "a-view"],
)
def test_init_takes_an_empty_ledgers_tables_makes_those_missing_and_says_so(
    shared_url: str, tmp_path: Path, missing: tuple[str, ...]
) -> None:
    # 1. A ledger's tables without an event, some of them missing (on PostgreSQL
    # the mark of a complete schema too).
    Ledger.open(shared_url).close()
    drop(shared_url, *missing, *(() if shared_url.startswith("sqlite:") else ("pl_schema",)))
    # 2. init makes the ledger there, naming what it found.
    made = run("init", "--url", shared_url, "--json")
    assert made.exit_code == 0, made.output
    answer = json.loads(made.stdout)
    assert answer["created"] is True and answer["position"] == 2
    assert note_of(made) == (
        f"note: {where(shared_url)} held a ledger's tables with no event in its log (as "
        "an init or a copy that did not finish leaves them, or one running at the same "
        "moment): init makes the ledger there, "
        "with any table missing"
    )
    token = answer["admin_token"]
    with Ledger.open(shared_url, create=False) as led:
        led.admin(token)
        assert led.verify().ok
    # 3. Once it holds events it is a ledger: init says it exists, finding nothing.
    again = run("init", "--url", shared_url, "--json")
    assert again.exit_code == 0 and "note:" not in again.stderr
    assert json.loads(again.stdout)["created"] is False
    # 4. And a copy into it is refused by its table and position; nothing is written.
    source = f"sqlite:///{tmp_path / 'source.db'}"
    build(source, Clock())
    refused = run("copy", "--url", source, "--to", shared_url, "--json")
    refused_as_holding(refused, shared_url, 2)
    with Ledger.open(shared_url, create=False) as led:
        assert led.position == 2
        led.admin(token)


def _target(kind: str, tmp_path: Path, drops: list[Any]) -> str:
    """A target: an SQLite file holding an empty ledger (a copy into a new file leaves
    nothing at its name), or a new PostgreSQL schema (dropped after the test)."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'target.db'}"
        Ledger.open(url).close()
        return url
    url, dropper = new_pg_schema_url()
    drops.append(dropper)
    return url


@pytest.fixture
def drops() -> Any:
    held: list[Any] = []
    yield held
    for dropper in held:
        dropper()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_copy_whose_source_fails_midway_is_taken_by_the_copy_run_again(
    kind: str, tmp_path: Path, clock: Clock, drops: list[Any]
) -> None:
    # 1. A copy refused part way: the source's event at position 3 was altered,
    # found once its rows are in the target's transaction.
    altered = f"sqlite:///{tmp_path / 'altered.db'}"
    build_altered(altered, clock, tmp_path / "altered.db")
    target = _target(kind, tmp_path, drops)
    failed = run("copy", "--url", altered, "--to", target)
    assert failed.exit_code == 1
    assert "position 3" in failed.stderr and "copy into it again" in failed.stderr
    # 2. The copy run again, from the source put right, takes the empty ledger.
    good = f"sqlite:///{tmp_path / 'good.db'}"
    build(good, Clock())
    copied = run("copy", "--url", good, "--to", target)
    assert copied.exit_code == 0, copied.output
    assert note_of(copied) == (
        f"note: {where(target)} held a ledger's tables with no event in its log (as an "
        "init or a copy that did not finish leaves them, or one running at the same "
        "moment): the copy is in them"
    )
    with Ledger.open(good) as led:
        digest = led.digest()
    assert copied.stdout == f"{digest}\n"
    # 3. Run once more, it is refused: the copy is a ledger now, and stays whole.
    refused_as_holding(
        run("copy", "--url", good, "--to", target, "--json"), target, digest.position
    )
    with Ledger.open(target, create=False) as led:
        assert led.digest() == digest


@pytest.mark.parametrize("step", ["events", "views"])
def test_a_copy_killed_midway_into_postgresql_is_taken_by_init_or_a_copy(
    pg_url: str, tmp_path: Path, clock: Clock, step: str
) -> None:
    # 1. A copy into a new schema SIGKILLed as it writes the log, or builds views.
    source = f"sqlite:///{tmp_path / 'source.db'}"
    build(source, clock)
    kill_copy_at(source, pg_url, step)
    # 2. init there makes a new ledger, saying what it found.
    made = run("init", "--url", pg_url, "--json")
    assert made.exit_code == 0, made.output
    assert json.loads(made.stdout)["created"] is True
    assert "held a ledger's tables with no event in its log" in note_of(made)
    # 3. Another killed copy's schema: the copy run again takes it.
    other, dropper = new_pg_schema_url()
    try:
        kill_copy_at(source, other, step)
        copied = run("copy", "--url", source, "--to", other, "--json")
        assert copied.exit_code == 0, copied.output
        assert note_of(copied).endswith(": the copy is in them")
        with Ledger.open(source) as led:
            assert json.loads(copied.stdout)["digest"] == str(led.digest())
    finally:
        dropper()


def test_init_leaves_another_eventsourcing_applications_empty_file_alone(
    tmp_path: Path,
) -> None:
    # Given another eventsourcing application's file: its events table, empty
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as con:
        con.execute(
            "CREATE TABLE stored_events (originator_id TEXT, originator_version INTEGER, "
            "topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
        )
    con.close()

    # When init is pointed at it
    result = run("init", "--url", f"sqlite:///{path}")

    # Then it is refused, nothing taken for a ledger's leftovers, no table added
    assert result.exit_code == 1, result.output
    assert "note:" not in result.stderr
    with closing(sqlite3.connect(path)) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert tables == ["stored_events"]


@pytest.mark.parametrize("kept", ["pl_merkle_leaves", "pl_records"])
def test_an_empty_log_beside_rows_of_the_ledgers_other_tables_is_no_leftover(
    shared_url: str, kept: str
) -> None:
    # Given a ledger whose events alone were deleted behind its back (its leaves,
    # or its view rows, kept)
    with Ledger.open(shared_url) as led:
        led.admin().grant("agent-1", scope="proj-a", roles=["propose"])
    table = events_table(shared_url)
    emptied = [table, *(t for t in ("pl_merkle_leaves", "pl_records") if t != kept)]
    if shared_url.startswith("sqlite:"):
        with sqlite3.connect(shared_url.removeprefix("sqlite:///")) as con:
            con.execute("DROP TRIGGER IF EXISTS stored_events_no_delete")
            con.execute("DROP TRIGGER IF EXISTS pl_merkle_leaves_no_delete")
            for name in emptied:
                con.execute(f"DELETE FROM {name}")
    else:
        schema = shared_url.rpartition("schema=")[2]
        with psycopg.connect(shared_url.partition("?")[0], autocommit=True) as conn:
            for name in emptied:
                conn.execute(f"ALTER TABLE {schema}.{name} DISABLE TRIGGER USER")
                conn.execute(f"DELETE FROM {schema}.{name}")

    # When init is pointed at it
    result = run("init", "--url", shared_url)

    # Then it is not said to be what an unfinished init or copy left
    assert "note:" not in result.stderr, result.stderr
