"""The PostgreSQL backend's connections.

Opening a ledger connects once directly, so a wrong database, role or address is
reported at once with the server's own reason; a pooled connection whose server
session ended while it sat idle (a terminated backend, a restart) is noticed when
it is handed out and replaced, with the pool's other idle connections checked.
"""

from __future__ import annotations

import os
import select
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from eventsourcing.persistence import OperationalError
from eventsourcing.postgres import PostgresFactory

if TYPE_CHECKING:
    import psycopg

__all__ = ["LedgerPostgresFactory", "probe"]


class LedgerPostgresFactory(PostgresFactory):
    """eventsourcing's PostgreSQL persistence, connecting once before the pool opens
    (the server's reason for refusing comes back within the connect timeout instead
    of a pool timeout), and with a pool that replaces connections whose session
    ended while they were idle."""

    def __init__(self, env: Any):
        super().__init__(env)
        pool: Any = self.datastore.pool
        # Named in pg_stat_activity, so an administrator can tell a ledger's sessions.
        pool.kwargs["application_name"] = f"provledger:{self.datastore.schema}"[:63]
        # Every session (reads too: another session's ACCESS EXCLUSIVE, say) waits
        # for a lock no longer than the URL's ``lock_timeout``: given at connection
        # (after the environment's PGOPTIONS, which an explicit ``options`` would
        # otherwise replace), and set again once connected, where a pooler in
        # between (PgBouncer's ``ignore_startup_parameters``) dropped it.
        wait = int(self.datastore.lock_timeout)
        given = os.environ.get("PGOPTIONS", "").strip()
        pool.kwargs["options"] = f"{given} -c lock_timeout={wait}s".strip()
        pool._configure = _setting_lock_wait(pool._configure, wait)
        probe(pool.kwargs, pool.timeout)
        if hasattr(pool, "_check") and pool._check is None:
            pool._check = _quick_check(pool)


def _setting_lock_wait(configure: Any, seconds: int) -> Any:
    """The pool's ``configure`` (eventsourcing's: autocommit, its idle timeout), then
    ``SET lock_timeout`` to ``seconds``."""
    statement = f"SET lock_timeout = '{seconds}s'"

    def configured(conn: Any) -> None:
        if configure is not None:
            configure(conn)
        conn.execute(statement, prepare=False)

    return configured


def plain_connection(env: dict[str, str]) -> psycopg.Connection[Any]:
    """A connection of its own (autocommit, outside the ledger's pool) to the
    database of a PostgreSQL ledger URL (``env``: its backend's), for a look at its
    schema before the ledger is opened there."""
    import psycopg

    return psycopg.connect(
        dbname=env["POSTGRES_DBNAME"],
        host=env["POSTGRES_HOST"],
        port=int(env["POSTGRES_PORT"]),
        user=env["POSTGRES_USER"],
        password=env["POSTGRES_PASSWORD"] or None,
        connect_timeout=max(2, int(env.get("POSTGRES_CONNECT_TIMEOUT", "5"))),
        autocommit=True,
    )


def others_pg_tables(env: dict[str, str]) -> list[str]:
    """The tables, views and sequences of a PostgreSQL ledger URL's schema (``env``:
    its backend's) that are not a ledger's (``provledger_events``, ``stored_events``,
    their sequences, ``pl_…``); []
    when it holds none or cannot be reached (opening the ledger names why)."""
    import psycopg

    try:
        with plain_connection(env) as conn:
            rows = conn.execute(
                "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
                " ON n.oid = c.relnamespace WHERE n.nspname = %s"
                " AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')",
                (env["POSTGRES_SCHEMA"],),
            ).fetchall()
    except psycopg.Error:
        return []
    # A ledger's event tables (``stored_events`` is eventsourcing's own name), the
    # sequences of their serial columns, and its views' ``pl_…`` tables; any
    # other name is another program's.
    ours = {
        f"{table}{suffix}"
        for table in ("provledger_events", "stored_events")
        for suffix in ("", "_notification_id_seq")
    }
    names = {str(n) for (n,) in rows}
    # (an events table without its serial column's sequence is another program's)
    ours -= {
        t for t in ("provledger_events", "stored_events") if f"{t}_notification_id_seq" not in names
    }
    return sorted(n for n in names if n not in ours and not n.startswith("pl_"))


def probe(kwargs: dict[str, Any], timeout: float) -> None:
    """Connect once with ``kwargs`` (libpq's connect timeout is whole seconds, at
    least 2); raise eventsourcing's ``OperationalError`` with the server's reason."""
    import psycopg

    options = {k: v for k, v in kwargs.items() if k != "row_factory"}
    try:
        with psycopg.connect(**options, connect_timeout=max(2, int(timeout)), autocommit=True):
            pass
    except psycopg.Error as exc:
        raise OperationalError(str(exc)) from exc


def _quick_check(pool: Any) -> Any:
    """A check run as the pool hands out a connection: nothing should be waiting on
    an idle connection's socket (one system call); if something is, the server may
    have ended the session — confirm with an empty query, and on failure check the
    pool's other idle connections too (they were likely ended together)."""

    def check(conn: Any) -> None:
        try:
            poll = select.poll()  # no limit on descriptor numbers, unlike select()
            poll.register(conn.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
            if not poll.poll(0):
                return
        except (OSError, ValueError, AttributeError):  # no poll(): confirm below
            pass
        try:
            conn.execute("")
        except Exception:
            with suppress(Exception):
                pool.check()
            raise

    return check
