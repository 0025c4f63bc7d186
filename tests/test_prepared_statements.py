"""No statement the ledger runs on SQLite is prepared again on every run.

SQLite decides whether a partial index serves a statement by comparing the
statement's terms with the index's WHERE clause. Where a bound parameter meets
a constant there (``status=?`` against ``pl_records_live``'s
``status = 'ACCEPTED'``), the plan depends on the parameter's value, so SQLite
marks the statement to be prepared again whenever that parameter is bound:
Python's ``sqlite3`` binds every parameter on every run, so such a statement
is planned from scratch each time (about 20 µs a statement, against 2 µs for
the look-up it makes). A ``LIKE ?`` does the same.

The tests record every statement a broad workload runs (commands, reads,
explanations, pages under every filter, as-of reads, the LangGraph store) and
run each again through SQLite's own C interface, which counts how often a
statement was prepared again (``sqlite3_stmt_status``,
``SQLITE_STMTSTATUS_REPREPARE``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import Kind, Ledger, Status
from ledger.integrations.langgraph import LedgerStore
from projections.record_table import ROW_STATUSES, status_is

SQLITE_ROW = 100
SQLITE_STMTSTATUS_REPREPARE = 5


def _library() -> Any:
    found = ctypes.util.find_library("sqlite3")
    if found is None:
        pytest.skip("no SQLite shared library to ask how often a statement was prepared")
    lib = ctypes.CDLL(found)
    p = ctypes.c_void_p
    lib.sqlite3_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(p)]
    lib.sqlite3_close.argtypes = [p]
    lib.sqlite3_prepare_v2.argtypes = [p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(p), p]
    lib.sqlite3_bind_parameter_count.argtypes = [p]
    lib.sqlite3_bind_int64.argtypes = [p, ctypes.c_int, ctypes.c_int64]
    lib.sqlite3_bind_double.argtypes = [p, ctypes.c_int, ctypes.c_double]
    lib.sqlite3_bind_text.argtypes = [p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, p]
    lib.sqlite3_bind_blob.argtypes = [p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, p]
    lib.sqlite3_bind_null.argtypes = [p, ctypes.c_int]
    lib.sqlite3_step.argtypes = [p]
    lib.sqlite3_reset.argtypes = [p]
    lib.sqlite3_finalize.argtypes = [p]
    lib.sqlite3_stmt_status.argtypes = [p, ctypes.c_int, ctypes.c_int]
    lib.sqlite3_exec.argtypes = [p, ctypes.c_char_p, p, p, p]
    lib.sqlite3_libversion.restype = ctypes.c_char_p
    if lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
        pytest.skip("Python's sqlite3 runs another SQLite than the shared library")
    return lib


def _bind(lib: Any, stmt: ctypes.c_void_p, i: int, value: Any) -> None:
    transient = ctypes.c_void_p(-1)  # SQLite copies the bytes
    if value is None:
        lib.sqlite3_bind_null(stmt, i)
    elif isinstance(value, int):
        lib.sqlite3_bind_int64(stmt, i, int(value))
    elif isinstance(value, float):
        lib.sqlite3_bind_double(stmt, i, value)
    elif isinstance(value, str):
        data = value.encode()
        lib.sqlite3_bind_text(stmt, i, data, len(data), transient)
    else:
        data = bytes(value)
        lib.sqlite3_bind_blob(stmt, i, data, len(data), transient)


def prepared_again(path: Path, statements: dict[str, tuple[Any, ...]]) -> list[str]:
    """Those of ``statements`` (SQL → parameters of one of its runs) that SQLite
    prepares again when they are run three times on the file ``path``, each run
    rolled back."""
    lib = _library()
    db = ctypes.c_void_p()
    assert lib.sqlite3_open(str(path).encode(), ctypes.byref(db)) == 0
    again: list[str] = []
    try:
        for sql, params in statements.items():
            stmt = ctypes.c_void_p()
            rc = lib.sqlite3_prepare_v2(db, sql.encode(), -1, ctypes.byref(stmt), None)
            assert rc == 0 and stmt.value, f"SQLite cannot prepare {sql!r}"
            assert lib.sqlite3_bind_parameter_count(stmt) == len(params), sql
            lib.sqlite3_exec(db, b"SAVEPOINT probe", None, None, None)
            try:
                for _ in range(3):
                    for i, value in enumerate(params, 1):
                        _bind(lib, stmt, i, value)
                    while lib.sqlite3_step(stmt) == SQLITE_ROW:
                        pass
                    lib.sqlite3_reset(stmt)
                if lib.sqlite3_stmt_status(stmt, SQLITE_STMTSTATUS_REPREPARE, 0):
                    again.append(sql)
            finally:
                lib.sqlite3_exec(db, b"ROLLBACK TO probe", None, None, None)
                lib.sqlite3_exec(db, b"RELEASE probe", None, None, None)
                lib.sqlite3_finalize(stmt)
    finally:
        lib.sqlite3_close(db)
    return again


_NOT_DATA = ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA", "CREATE", "DROP", "ALTER", "SAVEPOINT")


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, tuple[Any, ...]]]:
    """Every distinct statement of data that new ``sqlite3`` connections run,
    with the parameters of its first run."""
    seen: dict[str, tuple[Any, ...]] = {}

    def note(sql: str, params: Any) -> None:
        if sql not in seen and not sql.lstrip().upper().startswith(_NOT_DATA):
            seen[sql] = tuple(params)

    class Cursor(sqlite3.Cursor):
        def execute(self, sql: str, parameters: Any = (), /) -> Cursor:
            note(sql, parameters)
            super().execute(sql, parameters)
            return self

        def executemany(self, sql: str, seq_of_parameters: Any, /) -> Cursor:
            rows = [tuple(p) for p in seq_of_parameters]
            if rows:
                note(sql, rows[0])
            super().executemany(sql, rows)
            return self

    class Connection(sqlite3.Connection):
        def cursor(self, factory: Any = Cursor) -> Any:
            return super().cursor(factory)

        def execute(self, sql: str, parameters: Any = (), /) -> Any:
            return self.cursor().execute(sql, parameters)

        def executemany(self, sql: str, seq_of_parameters: Any, /) -> Any:
            return self.cursor().executemany(sql, seq_of_parameters)

    connect = sqlite3.connect

    def recording(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", Connection)
        return connect(*args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", recording)
    yield seen


def _workload(led: Ledger) -> None:
    """Commands, reads and pages of every kind a ledger serves."""
    admin = led.admin()
    admin.grant("agent", scope="s", roles=["propose", "read"])
    admin.grant("reviewer", scope="s", roles=["approve", "read", "audit", "deliver"])
    agent = led.authenticate(admin.issue_token("agent"))
    reviewer = led.authenticate(admin.issue_token("reviewer"))
    soon = datetime.now(UTC) + timedelta(days=1)
    e1 = agent.capture(scope="s", uri="https://x.test/doc", content=b"one", id="E1")
    m1 = agent.propose("s", "notes/m", 1, Kind.INFERENCE, parents=[e1], id="M1")
    r1 = agent.propose("s", "notes/r", "r", Kind.REPORT, parents=[m1], id="R1", expires=soon)
    for rid in (e1, m1, r1):
        reviewer.accept(rid)
    agent.propose("s", "notes/m", 2, Kind.INFERENCE, parents=[e1], id="M2")
    reviewer.reject("M2", "no")
    agent.propose("s", "notes/c", 3, Kind.FACT, id="C1")
    agent.propose("s", "other", 4, Kind.FACT, id="O1", conditions={"api": "v1"})
    reviewer.accept("O1")
    reviewer.deliver("R1", recipient="ops@x.test")
    before = led.position
    agent.capture(scope="s", uri="https://x.test/doc", content=b"two", id="E2")
    reviewer.accept("E2")
    reviewer.revoke("M1", "wrong")
    reviewer.revalidate("R1", parents=["E2"])
    for claim in ("notes/m", "notes/r", "other", "missing"):
        agent.read("s", claim)
        reviewer.explain("s", claim, limit=2)
        reviewer.explain("s", claim, context={"api": "v1"})
    for rid in ("E1", "M1", "R1", "C1"):
        reviewer.get(rid)
    for status in (None, *ROW_STATUSES):
        for validity in (None, "VALID", "NEEDS_REVALIDATION", "INVALID"):
            for kind in (None, Kind.FACT):
                for prefix in (None, "notes/"):
                    reviewer.records(
                        "s", status=status, validity=validity, kind=kind, claim_prefix=prefix
                    )
                    reviewer.records(
                        "s",
                        status=status,
                        validity=validity,
                        kind=kind,
                        claim_prefix=prefix,
                        limit=1,
                        after="C1",
                    )
    then = reviewer.as_of(position=before)
    then.read("s", "notes/m")
    then.records("s")
    then.records("s", status=Status.ACCEPTED, kind=Kind.INFERENCE)
    reviewer.corrections_due()
    store = LedgerStore(
        led, token=admin.issue_token("agent"), approver_token=admin.issue_token("reviewer")
    )
    for n in range(3):
        store.put(("s", "mem"), f"k{n}", {"n": n})
    store.put(("s", "mem"), "k0", {"n": 10})
    store.get(("s", "mem"), "k0")
    store.search(("s", "mem"), limit=2)
    store.search(("s",), query=None, filter={"n": 1})
    store.delete(("s", "mem"), "k1")


def test_no_statement_of_a_workload_is_prepared_again_on_each_run(
    tmp_path: Path, recorded: dict[str, tuple[Any, ...]]
) -> None:
    path = tmp_path / "ledger.db"
    led = Ledger.open(f"sqlite:///{path}")
    try:
        _workload(led)
    finally:
        led.close()
    assert sum("pl_records" in sql for sql in recorded) > 50  # the workload's statements
    again = prepared_again(path, recorded)
    assert again == [], "prepared again on every run:\n" + "\n".join(again)


def test_the_probe_sees_a_statement_prepared_again(tmp_path: Path) -> None:
    """The statement the store's ``put`` ran before: its status bound."""
    path = tmp_path / "ledger.db"
    Ledger.open(f"sqlite:///{path}").close()
    bound = (
        "SELECT record_id FROM pl_records WHERE scope=? AND claim_key=? AND status=? "
        "AND to_pos IS NULL AND (status = 'ACCEPTED' OR status = 'STALE' OR "
        "status = 'CANDIDATE') ORDER BY created_at DESC LIMIT 1"
    )
    written = bound.replace("status=?", status_is("ACCEPTED"))
    found = prepared_again(path, {bound: ("s", "k", "ACCEPTED"), written: ("s", "k")})
    assert found == [bound]


def test_only_a_record_status_is_written_into_a_statement() -> None:
    assert sorted(ROW_STATUSES) == sorted(s.value for s in Status)  # every one, once
    assert status_is("STALE", "r") == "r.status = 'STALE'"
    with pytest.raises(ValueError, match="is not a record status"):
        status_is("ACCEPTED' OR 1=1")
