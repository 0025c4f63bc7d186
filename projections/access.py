"""The access view: who holds which role in which scope, tokens, and runs.

Grants are versioned like records (``from_pos``/``to_pos``) so "who could do
what, where, and when did that change" is a query. Tokens are kept only as
sha256 hashes. Runs record what a task read, for observed dependencies.
"""

from __future__ import annotations

from typing import Any

from ledger.domain import Principal, Run
from ledger.errors import CorruptEventError
from ledger.serialization import datetime_to_micros
from projections.base import Cursor, Dialect, write_rows

VIEW = "access"

DDL = (
    "CREATE TABLE IF NOT EXISTS {t}pl_principals (agg_id TEXT PRIMARY KEY, subject TEXT)",
    "CREATE TABLE IF NOT EXISTS {t}pl_grants ("
    "subject TEXT NOT NULL, scope TEXT NOT NULL, role TEXT NOT NULL, "
    "from_pos {bigint} NOT NULL, to_pos {bigint}, granted_at {bigint} NOT NULL, "
    "granted_by TEXT NOT NULL, revoked_at {bigint}, revoked_by TEXT, "
    "PRIMARY KEY (subject, scope, role, from_pos))",
    "CREATE INDEX IF NOT EXISTS pl_grants_scope ON {t}pl_grants (scope)",
    "CREATE TABLE IF NOT EXISTS {t}pl_tokens ("
    "token_hash TEXT PRIMARY KEY, subject TEXT NOT NULL, issued_pos {bigint} NOT NULL, "
    "issued_at {bigint} NOT NULL, expires {bigint}, revoked_pos {bigint})",
    "CREATE TABLE IF NOT EXISTS {t}pl_runs ("
    "agg_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, actor TEXT NOT NULL, "
    "started_pos {bigint} NOT NULL, ended_pos {bigint}, outcome TEXT)",
    "CREATE TABLE IF NOT EXISTS {t}pl_run_reads ("
    "run_id TEXT NOT NULL, record_id TEXT NOT NULL, how TEXT NOT NULL, "
    "position {bigint} NOT NULL, PRIMARY KEY (run_id, record_id, position))",
)

TABLES = ("pl_principals", "pl_grants", "pl_tokens", "pl_runs", "pl_run_reads")


def _lookup(c: Cursor, d: Dialect, sql: str, agg_id: Any, pos: int, what: str) -> str:
    c.execute(d.q(sql), (agg_id.hex,))
    row = c.fetchone()
    if row is None:
        raise CorruptEventError(f"stored event at position {pos} belongs to no registered {what}")
    return str(row[0] if not isinstance(row, dict) else next(iter(row.values())))


def _subject(c: Cursor, d: Dialect, agg_id: Any, pos: int) -> str:
    sql = "SELECT subject FROM {t}pl_principals WHERE agg_id=?"
    return _lookup(c, d, sql, agg_id, pos, "principal")


def _run_id(c: Cursor, d: Dialect, agg_id: Any, pos: int) -> str:
    return _lookup(c, d, "SELECT run_id FROM {t}pl_runs WHERE agg_id=?", agg_id, pos, "run")


#: The events this view folds (``Principal`` and ``Run`` ones); the projector
#: hands it no other (a record's events would only be looked at and skipped).
EVENTS = frozenset(
    (
        Principal.Registered,
        Principal.Granted,
        Principal.GrantRevoked,
        Principal.TokenIssued,
        Principal.TokenRevoked,
        Run.Started,
        Run.ReadRecorded,
        Run.Ended,
    )
)


def apply(c: Cursor, d: Dialect, pos: int, event: Any) -> None:
    """Fold one ``Principal`` or ``Run`` event into the view."""
    at = datetime_to_micros(event.timestamp)
    if isinstance(event, Principal.Registered):
        c.execute(
            d.q("INSERT INTO {t}pl_principals (agg_id, subject) VALUES (?, ?)"),
            (event.originator_id.hex, event.subject),
        )
    elif isinstance(event, Principal.Granted):
        subject = _subject(c, d, event.originator_id, pos)
        have = set(roles_of(c, d, subject, event.scope))
        rows = [
            (subject, event.scope, role, pos, at, event.actor)
            for role in event.roles
            if role not in have
        ]
        write_rows(
            c,
            d.q(
                "INSERT INTO {t}pl_grants (subject, scope, role, from_pos, granted_at, "
                "granted_by) VALUES (?,?,?,?,?,?)"
            ),
            rows,
        )
    elif isinstance(event, Principal.GrantRevoked):
        subject = _subject(c, d, event.originator_id, pos)
        for role in event.roles:
            c.execute(
                d.q(
                    "UPDATE {t}pl_grants SET to_pos=?, revoked_at=?, revoked_by=? "
                    "WHERE subject=? AND scope=? AND role=? AND to_pos IS NULL"
                ),
                (pos, at, event.actor, subject, event.scope, role),
            )
    elif isinstance(event, Principal.TokenIssued):
        c.execute(
            d.q(
                "INSERT INTO {t}pl_tokens (token_hash, subject, issued_pos, issued_at, expires) "
                "VALUES (?,?,?,?,?)"
            ),
            (
                event.token_hash,
                _subject(c, d, event.originator_id, pos),
                pos,
                at,
                None if event.expires is None else datetime_to_micros(event.expires),
            ),
        )
    elif isinstance(event, Principal.TokenRevoked):
        c.execute(
            d.q("UPDATE {t}pl_tokens SET revoked_pos=? WHERE token_hash=?"),
            (pos, event.token_hash),
        )
    elif isinstance(event, Run.Started):
        c.execute(
            d.q("INSERT INTO {t}pl_runs (agg_id, run_id, actor, started_pos) VALUES (?,?,?,?)"),
            (event.originator_id.hex, event.run_id, event.actor, pos),
        )
    elif isinstance(event, Run.ReadRecorded):
        run_id = _run_id(c, d, event.originator_id, pos)
        write_rows(
            c,
            d.q(
                "INSERT INTO {t}pl_run_reads (run_id, record_id, how, position) "
                "VALUES (?,?,?,?) ON CONFLICT DO NOTHING"
            ),
            [(run_id, rid, event.how, pos) for rid in event.record_ids],
        )
    elif isinstance(event, Run.Ended):
        c.execute(
            d.q("UPDATE {t}pl_runs SET ended_pos=?, outcome=? WHERE agg_id=?"),
            (pos, event.outcome, event.originator_id.hex),
        )


def roles_of(c: Cursor, d: Dialect, subject: str, scope: str) -> list[str]:
    """The roles ``subject`` holds in ``scope`` now."""
    c.execute(
        d.q(
            "SELECT role FROM {t}pl_grants WHERE subject=? AND scope=? AND to_pos IS NULL "
            "ORDER BY role"
        ),
        (subject, scope),
    )
    return [r["role"] for r in c.fetchall()]


def token_and_roles(c: Cursor, d: Dialect, token_hash: str) -> tuple[Any, dict[str, list[str]]]:
    """In one statement: the token row for a hash (None if unknown) and every role
    its subject holds now, by scope (roles sorted)."""
    c.execute(
        d.q(
            "SELECT t.subject AS subject, t.revoked_pos AS revoked_pos, t.expires AS expires, "
            "g.scope AS g_scope, g.role AS g_role FROM {t}pl_tokens t "
            "LEFT JOIN {t}pl_grants g ON g.subject = t.subject AND g.to_pos IS NULL "
            "WHERE t.token_hash = ? ORDER BY g.scope, g.role"
        ),
        (token_hash,),
    )
    rows = c.fetchall()
    roles: dict[str, list[str]] = {}
    for row in rows:
        if row["g_scope"] is not None:
            roles.setdefault(row["g_scope"], []).append(row["g_role"])
    return (rows[0] if rows else None), roles


def token(c: Cursor, d: Dialect, token_hash: str) -> Any:
    """The token row for a hash, or None."""
    c.execute(d.q("SELECT * FROM {t}pl_tokens WHERE token_hash=?"), (token_hash,))
    return c.fetchone()


def token_rows(c: Cursor, d: Dialect, subject: str | None) -> list[Any]:
    """Every token row (of ``subject`` only, if given), oldest first."""
    where, params = ("WHERE subject=? ", (subject,)) if subject is not None else ("", ())
    c.execute(d.q(f"SELECT * FROM {{t}}pl_tokens {where}ORDER BY issued_pos"), params)
    return list(c.fetchall())


def tokens_by_prefix(c: Cursor, d: Dialect, prefix: str) -> list[Any]:
    """The token rows whose hash starts with ``prefix`` (hex digits only)."""
    c.execute(
        d.q("SELECT * FROM {t}pl_tokens WHERE token_hash LIKE ? ORDER BY issued_pos"),
        (prefix + "%",),
    )
    return list(c.fetchall())


def holds_any(c: Cursor, d: Dialect, subject: str, roles: tuple[str, ...]) -> bool:
    """Whether ``subject`` holds one of ``roles`` in some scope now."""
    marks = ", ".join("?" for _ in roles)
    c.execute(
        d.q(
            "SELECT COUNT(*) AS n FROM {t}pl_grants WHERE subject=? AND to_pos IS NULL "
            f"AND role IN ({marks})"
        ),
        (subject, *roles),
    )
    return bool(c.fetchone()["n"])


def grant_rows(c: Cursor, d: Dialect, subject: str | None, scope: str | None) -> list[Any]:
    """Every grant row (current and withdrawn), optionally of one subject or scope."""
    clauses, params = [], []
    if subject is not None:
        clauses.append("subject=?")
        params.append(subject)
    if scope is not None:
        clauses.append("scope=?")
        params.append(scope)
    where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
    c.execute(d.q(f"SELECT * FROM {{t}}pl_grants {where} ORDER BY from_pos, role"), tuple(params))
    return list(c.fetchall())


def run_count(c: Cursor, d: Dialect) -> int:
    """How many runs were started."""
    c.execute(d.q("SELECT COUNT(*) AS n FROM {t}pl_runs"))
    return int(c.fetchone()["n"])
