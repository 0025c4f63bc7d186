"""``scripts/sql_floor.py``: it replays exactly the SQL a workload ran.

The script checks itself that the replayed copy of the ledger ends equal, row
for row, to the copy the workload ran on (and exits 1 if not); here a tiny run
must pass that check, and the content digest it relies on must notice a single
changed or missing row. Nothing here times anything. The scripts (``sql_floor``
builds on ``bench``) call the library only through its public API and the
documented internal ``Ledger.engine``: no private attribute of a library object.
"""

from __future__ import annotations

import ast
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

import sql_floor  # noqa: E402


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    out = tmp_path_factory.mktemp("floor") / "floor.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "sql_floor.py"),
            "--records",
            "300",
            "--commands",
            "5",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "check failed" not in done.stderr
    result: dict[str, dict[str, object]] = json.loads(out.read_text())
    return result


def test_each_workload_replays_to_the_same_database(figures: dict[str, dict[str, object]]) -> None:
    # Exit 0 above means every replayed copy equalled its captured copy.
    assert set(figures) == {"bulk_import", "single_command", "rebuild"}
    assert figures["bulk_import"]["units"] == 300
    assert figures["single_command"]["units"] == 10  # 5 proposes + 5 accepts
    for name, got in figures.items():
        statements = got["floor_us_by_statement"]
        assert isinstance(statements, dict) and statements, name
        share = got["sql_share"]
        assert isinstance(share, float) and share > 0, name


def test_bulk_import_writes_the_event_and_its_view_rows(
    figures: dict[str, dict[str, object]],
) -> None:
    statements = figures["bulk_import"]["floor_us_by_statement"]
    assert isinstance(statements, dict)
    assert {"INSERT INTO stored_events", "INSERT INTO pl_records"} <= set(statements)
    # One event, its record row, its time index row, its Merkle leaf (no id map: a
    # record's proposal, found by the events' own key, names it).
    assert figures["bulk_import"]["statements_per_unit"] == pytest.approx(4.0, abs=0.1)


def test_the_content_digest_notices_one_changed_or_missing_row(tmp_path: Path) -> None:
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    for path in (first, second):
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v BLOB)")
        con.executemany("INSERT INTO t VALUES (?, ?)", [("a", b"1"), ("b", b"2")])
        con.commit()
        con.close()
    assert sql_floor.contents(first) == sql_floor.contents(second)
    con = sqlite3.connect(second)
    con.execute("UPDATE t SET v = ? WHERE k = 'b'", (b"3",))
    con.commit()
    assert sql_floor.contents(first) != sql_floor.contents(second)
    con.execute("DELETE FROM t WHERE k = 'b'")
    con.execute("INSERT INTO t VALUES ('b', ?)", (b"2",))
    con.commit()
    assert sql_floor.contents(first) == sql_floor.contents(second)
    con.execute("DELETE FROM t WHERE k = 'a'")
    con.commit()
    con.close()
    assert sql_floor.contents(first) != sql_floor.contents(second)


def test_the_content_digest_notices_rows_at_other_rowids_or_another_schema(
    tmp_path: Path,
) -> None:
    # A log position is its event's rowid: the same rows at other rowids differ.
    def made(name: str, order: list[str], index: bool = False) -> Path:
        path = tmp_path / name
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t (k TEXT)")
        if index:
            con.execute("CREATE INDEX t_k ON t (k)")
        con.executemany("INSERT INTO t VALUES (?)", [(k,) for k in order])
        con.commit()
        con.close()
        return path

    same = sql_floor.contents(made("a.db", ["x", "y"]))
    assert same == sql_floor.contents(made("b.db", ["x", "y"]))
    assert same != sql_floor.contents(made("c.db", ["y", "x"]))
    assert same != sql_floor.contents(made("d.db", ["x", "y"], index=True))


def private_reaches(source: str) -> list[str]:
    """``obj._name`` (and ``getattr(obj, "_name")``) in ``source``, other than on
    ``self`` or ``cls`` and other than dunders: ``"line: obj._name"`` each."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        name, base, line = None, None, 0
        if isinstance(node, ast.Attribute):
            name, base, line = node.attr, node.value, node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            name, base, line = node.args[1].value, node.args[0], node.lineno
        if name is None or base is None or not name.startswith("_") or name.startswith("__"):
            continue
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            continue
        found.append((line, f"{line}: {ast.unparse(base)}.{name}"))
    return [text for _, text in sorted(found)]


def test_the_private_reach_check_finds_attributes_and_getattr() -> None:
    source = "led._reading()\ngetattr(led, '_app')\nself._x = 1\nled.engine.reading()\n"
    assert private_reaches(source) == ["1: led._reading", "2: led._app"]


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_the_scripts_use_no_private_attribute_of_a_library_object(script: str) -> None:
    assert private_reaches((SCRIPTS / script).read_text()) == []
