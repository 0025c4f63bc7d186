"""Shared fixtures: one ``ledger`` fixture parametrised over every backend.

Each test gets a fresh ledger: ``memory:`` or an SQLite file in its own
temporary directory. ``world`` adds the principals most tests need.
"""

from __future__ import annotations

import os
import re
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import Kind, Ledger, Session
from ledger.heads import generate_key

BACKENDS = ["memory", "sqlite", "postgres"]

#: The PostgreSQL server the tests use; each test gets its own schema.
PG_SERVER = os.environ.get("PROVLEDGER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
#: On CI a missing server fails the run instead of skipping the PostgreSQL tests.
PG_REQUIRED = os.environ.get("CI", "").lower() == "true"


def _pg_dsn() -> str:
    from urllib.parse import urlparse

    p = urlparse(PG_SERVER)
    return (
        f"host={p.hostname} port={p.port or 5432} dbname={p.path.lstrip('/')} "
        f"user={p.username or 'postgres'}" + (f" password={p.password}" if p.password else "")
    )


def pg_reachable() -> bool:
    try:
        import psycopg

        with psycopg.connect(_pg_dsn(), connect_timeout=3):
            return True
    except Exception:
        return False


def new_pg_schema_url() -> tuple[str, Callable[[], None]]:
    """A URL for a fresh schema on the test server, and a function dropping it."""
    import psycopg

    if not pg_reachable():
        if PG_REQUIRED:
            pytest.fail(f"PostgreSQL is required on CI but {PG_SERVER} is unreachable")
        pytest.skip(f"PostgreSQL server {PG_SERVER} is unreachable")
    schema = f"t_{uuid.uuid4().hex[:16]}"

    def drop() -> None:
        with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

    return f"{PG_SERVER}?schema={schema}", drop


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema for this test, dropped afterwards."""
    url, drop = new_pg_schema_url()
    try:
        yield url
    finally:
        drop()


class Clock:
    """A controllable clock so tests can move time forward."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=BACKENDS)
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """memory:, an SQLite file in the test's directory, or a fresh PostgreSQL schema."""
    if request.param == "memory":
        yield "memory:"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        url, drop = new_pg_schema_url()
        try:
            yield url
        finally:
            drop()


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database several ledgers (or processes) open at once: an SQLite file in
    the test's directory, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    url, drop = new_pg_schema_url()
    try:
        yield url
    finally:
        drop()


@pytest.fixture
def open_ledger(ledger_url: str, clock: Clock) -> Iterator[Callable[..., Ledger]]:
    """Open (or reopen) the test's ledger; everything opened is closed afterwards."""
    opened: list[Ledger] = []

    def _open(**kwargs: Any) -> Ledger:
        kwargs.setdefault("clock", clock)
        led = Ledger.open(ledger_url, **kwargs)
        opened.append(led)
        return led

    yield _open
    for led in opened:
        led.close()


@pytest.fixture
def ledger(open_ledger: Callable[..., Ledger]) -> Ledger:
    return open_ledger()


def raw_rows(
    led: Ledger, db_path: Path | None, sql: str, params: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    """Rows straight from the database, bypassing the library's queries.

    ``sqlite3`` on an SQLite file; otherwise the ledger's own connection
    (``memory:`` lives only inside the process; PostgreSQL tables are qualified
    by the ledger's schema and take ``%s`` placeholders).
    """
    if led.backend == "sqlite":
        assert db_path is not None
        con = sqlite3.connect(db_path)
        try:
            return [tuple(r) for r in con.execute(sql, params).fetchall()]
        finally:
            con.close()
    if led.backend == "postgresql":
        sql = re.sub(r"\bpl_", led.engine.dialect.prefix + "pl_", sql).replace("?", "%s")
    with led.engine.reading() as c:
        c.execute(sql, params)
        return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in c.fetchall()]


def aggregate_of(led: Ledger, record_id: str) -> uuid.UUID:
    """The aggregate id ``record_id``'s events are stored under (the validity
    view keeps it: it is not a function of the record id alone)."""
    with led.engine.reading() as c:
        return led.engine.aggregate_of(c, record_id)


@dataclass
class World:
    """A ledger with an agent (propose, read), a reviewer (approve, read, audit,
    deliver) in ``proj-a``, and an outsider with read only in ``proj-b``."""

    ledger: Ledger
    agent: Session
    reviewer: Session
    outsider: Session
    clock: Clock


@pytest.fixture
def world(ledger: Ledger, clock: Clock) -> World:
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("agent-1", scope="proj-b", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
    admin.grant("reviewer", scope="proj-b", roles=["approve", "read", "audit", "deliver"])
    admin.grant("outsider", scope="proj-b", roles=["read"])
    return World(
        ledger=ledger,
        agent=ledger.authenticate(admin.issue_token("agent-1")),
        reviewer=ledger.authenticate(admin.issue_token("reviewer")),
        outsider=ledger.authenticate(admin.issue_token("outsider")),
        clock=clock,
    )


def sqlite_pages(path: Path, table: str) -> dict[str, int]:
    """How many pages of each type (``leaf``, ``internal``, ``overflow``) the
    table ``table`` of the SQLite file ``path`` takes (SQLite's ``dbstat``
    table; the test is skipped where SQLite is built without it)."""
    with sqlite3.connect(path) as con:
        try:
            rows = con.execute(
                "SELECT pagetype, COUNT(*) FROM dbstat WHERE name = ? GROUP BY pagetype", (table,)
            ).fetchall()
        except sqlite3.OperationalError:
            pytest.skip("this SQLite is built without the dbstat table")
    return {str(kind): int(n) for kind, n in rows}


@pytest.fixture
def hidden_cause(ledger: Ledger, tmp_path: Path) -> tuple[Ledger, Any, Path]:
    """(Bundle tests.) H1 in proj-h (no grant for the auditor); M1 <- H1 and R1 <- M1 in proj-a; R1
    delivered; H1 revoked (M1, R1 STALE, their MarkedStale withheld); a correction."""
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("agent-1", scope="proj-h", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "deliver"])
    admin.grant("reviewer", scope="proj-h", roles=["read"])
    admin.grant("hboss", scope="proj-h", roles=["approve", "read"])
    admin.grant("auditor", scope="proj-a", roles=["read", "audit"])
    agent = ledger.authenticate(admin.issue_token("agent-1"))
    reviewer = ledger.authenticate(admin.issue_token("reviewer"))
    hboss = ledger.authenticate(admin.issue_token("hboss"))
    agent.propose(scope="proj-h", claim_key="h", value=1, kind=Kind.FACT, id="H1")
    hboss.accept("H1")
    agent.propose(
        scope="proj-a", claim_key="m", value=2, kind=Kind.INFERENCE, parents=["H1"], id="M1"
    )
    agent.propose(
        scope="proj-a", claim_key="r", value="x", kind=Kind.REPORT, parents=["M1"], id="R1"
    )
    reviewer.accept("M1")
    reviewer.accept("R1")
    delivery = reviewer.deliver("R1", recipient="ops@x.test")
    hboss.revoke("H1", reason="secret")
    reviewer.issue_correction(delivery, note="R1 no longer holds")
    generate_key(tmp_path / "k")
    return ledger, ledger.authenticate(admin.issue_token("auditor")), tmp_path
