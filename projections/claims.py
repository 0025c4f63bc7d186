"""The reads of one claim the current-validity view serves (``projections.validity``
owns the table and keeps it): a claim's rows for ``read`` and ``explain``, with the
token and its subject's ``read`` grant in the same statement, the rows a bounded
explanation picks and counts, and the live rows a re-capture or a new version
replaces. Each statement reads the claim's own indexes (``pl_records_live``,
``pl_records_withdrawn``, ``pl_records_claim``), never those of a whole scope.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from ledger.access import Role
from projections.base import Cursor, Dialect, as_of_filter
from projections.record_table import (
    COLUMNS,
    LIVE_STATUSES,
    claim_walk,
    live_filter,
    row_columns,
    status_is,
    withdrawn_filter,
)

#: A row ``r`` as it stood right after a position.
_THEN = as_of_filter("r")


def captures_of_claim(
    c: Cursor, d: Dialect, scope: str, claim_key: str
) -> list[tuple[str, str, bytes, bytes]]:
    """(record id, status, evidence, packed value) of the ACCEPTED, STALE and
    CANDIDATE evidence records of ``(scope, claim_key)`` in proposal order: what a
    re-capture may supersede, found on the live index without reading the claim's
    other rows' values."""
    c.execute(
        d.q(
            f"SELECT r.record_id, r.status, {row_columns('r', ['evidence', 'value'])} FROM "
            f"{{t}}pl_records r WHERE r.scope=? AND r.claim_key=? AND {live_filter('r')} "
            "AND r.kind='evidence' AND r.status IN ('ACCEPTED', 'STALE', 'CANDIDATE') "
            "ORDER BY r.created_pos"
        ),
        (scope, claim_key),
    )
    return [(r["record_id"], r["status"], r["evidence"], r["value"]) for r in c.fetchall()]


def accepted_after(
    c: Cursor, d: Dialect, scope: str, claim_key: str, kind: str, position: int
) -> bool:
    """Whether a record of ``kind`` in ``(scope, claim_key)`` is ACCEPTED now, and
    was proposed or last changed after log ``position`` (a version a read as of
    ``position`` could not have been shown): one look-up on the live index."""
    c.execute(
        d.q(
            "SELECT 1 FROM {t}pl_records WHERE scope=? AND claim_key=? AND "
            f"{status_is('ACCEPTED')} AND kind=? AND {live_filter()} AND from_pos > ? LIMIT 1"
        ),
        (scope, claim_key, kind, position),
    )
    return c.fetchone() is not None


#: The statement of ``newest_live_of_claim``: an arm per live status, the status
#: written into the statement rather than bound (``record_table.status_is``).
_NEWEST_LIVE = " UNION ALL ".join(
    "SELECT * FROM (SELECT record_id, status, created_at, from_pos FROM {t}pl_records "
    f"WHERE scope=? AND claim_key=? AND {status_is(status)} AND kind=? AND {live_filter()} "
    f"ORDER BY created_at DESC, from_pos DESC LIMIT 1) n{n}"
    for n, status in enumerate(LIVE_STATUSES)
)


def newest_live_of_claim(
    c: Cursor, d: Dialect, scope: str, claim_key: str, kind: str
) -> list[tuple[str, str, int, int]]:
    """(record id, status, created_at, from_pos) of the newest live record of
    ``kind`` in ``(scope, claim_key)`` (``record_table.LIVE_FILTER``) of each live
    status, newest by (created_at, from_pos): one statement of a look-up per
    status on the live index, which orders a claim's records of a status and
    kind by when they were proposed, so it reads one row of each however many
    versions or candidates the claim has."""
    c.execute(d.q(_NEWEST_LIVE), [scope, claim_key, kind] * len(LIVE_STATUSES))
    return [(r["record_id"], r["status"], r["created_at"], r["from_pos"]) for r in c.fetchall()]


#: What a read never shows of a record's row (its bookkeeping).
_UNREAD = (
    "to_pos",
    "snapshot_ref",
    "run_id",
    "changed_by",
    "changed_at",
    "left_valid_pos",
    "agg_id",
)
#: The record columns of a ``for_claim_as`` row: every column a read uses.
READ_COLUMNS = tuple(name for name in COLUMNS if name not in _UNREAD)
#: The keys of a record row of ``for_claim_as``: the ``READ_COLUMNS`` but the
#: scope and claim key (every row has those it was asked for, and a column
#: fetched costs a read as much as a few dict look-ups), and whether it was delivered.
CLAIM_ROW = (
    *(name for name in READ_COLUMNS if name not in ("scope", "claim_key")),
    "has_deliveries",
)
#: The token's columns of a ``for_claim_as`` statement (after the record's): not
#: its subject, which the session that holds the token knows.
TOKEN_COLUMNS = ("tok_revoked", "tok_expires", "tok_reads")
#: (revoked_pos, expires, whether its subject holds ``read`` in the scope)
Token = tuple[int | None, int | None, bool]
#: The role a read needs (``tok_reads``).
READ_ROLE = Role.READ.value


def for_claim_as(
    c: Cursor,
    d: Dialect,
    token_hash: str,
    scope: str,
    claim_key: str,
    position: int | None = None,
    live_only: bool = False,
) -> tuple[Token | None, list[Any]]:
    """One statement for a read: the token's ``TOKEN_COLUMNS`` (None: the token is
    unknown), and the claim's record rows in
    proposal order, as tuples of ``CLAIM_ROW`` (``claim_row`` makes one a dict
    of the ``READ_COLUMNS`` of the row and whether the record was delivered);
    ``live_only``: only its live ACCEPTED records' rows (those a read can use).

    The caller checks the token and the roles before using any record row.
    """
    sql = _claim_as_sql(d, position is not None, live_only)
    when = () if position is None else (position, position)
    if d.name == "sqlite":
        c.execute(sql, (scope, scope, claim_key, *when, token_hash))
    else:  # the token's row first (``_claim_as_statement``)
        c.execute(sql, (scope, token_hash, scope, claim_key, *when))
    found = c.fetchall()
    if not found:
        return None, []
    if d.name != "sqlite":
        head = found[0]
        token: Any = tuple(head[name] for name in TOKEN_COLUMNS)
        rows = [tuple(row.values()) for row in found if row["record_id"] is not None]
        return token, rows
    # The record's columns come first, the token's last. Rows stay tuples:
    # sqlite3.Row finds a column by name with a scan of every column before it,
    # and a dict costs more to make than most reads look up.
    head = found[0]
    if head[0] is None:  # no record row joined: the token's row alone
        return head[-3:], []
    if len(found) > 1:
        found.sort(key=_created_pos)
    return head[-3:], found


def claim_row(row: Sequence[Any], scope: str, claim_key: str) -> dict[str, Any]:
    """A record row of ``for_claim_as`` (or ``claim_others``) of ``(scope,
    claim_key)`` as a dict of ``CLAIM_ROW``, the scope and the claim key."""
    made = dict(zip(CLAIM_ROW, row, strict=False))
    made["scope"], made["claim_key"] = scope, claim_key
    return made


_created_pos = operator.itemgetter(CLAIM_ROW.index("created_pos"))


#: ``_claim_as_sql`` by as-of-ness and live-only-ness (``as_of + 2 * live_only``),
#: then by dialect (by identity: hashing a dialect costs more than the look-up).
_CLAIM_AS: tuple[dict[int, tuple[Dialect, str]], ...] = ({}, {}, {}, {})


def _claim_as_sql(d: Dialect, as_of: bool, live_only: bool) -> str:
    cache = _CLAIM_AS[as_of + 2 * live_only]
    known = cache.get(id(d))
    if known is not None and known[0] is d:
        return known[1]
    sql = _claim_as_statement(d, as_of, live_only)
    cache[id(d)] = (d, sql)
    return sql


def _claim_as_statement(d: Dialect, as_of: bool, live_only: bool) -> str:
    if as_of:
        when = _THEN
        if live_only:  # as the records stood then
            when += " AND " + live_filter("r", now=False)
    else:
        when = live_filter("r") if live_only else "r.to_pos IS NULL"
    if as_of or not live_only:  # every version, or every status: the claim index
        when += claim_walk(d, "r")
    if live_only:
        # A read uses only ACCEPTED rows: a claim's CANDIDATE and STALE rows (any
        # number, values of up to the size limit each) are not fetched for it.
        when += " AND r.status = 'ACCEPTED'"
    # SQLite sorts a claim's few rows in Python (no temporary b-tree per read).
    order = "" if d.name == "sqlite" else " ORDER BY r.created_pos"
    # Whether the subject reads in the scope, not its roles: the first current
    # ``read`` grant answers (no aggregate over every role it holds there).
    reads = (
        "EXISTS (SELECT 1 FROM {t}pl_grants g WHERE g.subject = t.subject "
        f"AND g.scope = ? AND g.role = '{READ_ROLE}' AND g.to_pos IS NULL)"
    )
    if d.name == "sqlite":
        token = f"t.revoked_pos AS tok_revoked, t.expires AS tok_expires, {reads} AS tok_reads "
        joined = "FROM {t}pl_tokens t LEFT JOIN {t}pl_records r "
        where = " WHERE t.token_hash = ?"
    else:
        # The token's row apart (OFFSET 0), its grant looked up once: joined to a
        # claim's rows, PostgreSQL may plan the look-up as a scan of the scope's
        # grants, hashed, when it expects many rows of the claim.
        token = "t.tok_revoked, t.tok_expires, t.tok_reads "
        joined = (
            "FROM (SELECT t.revoked_pos AS tok_revoked, t.expires AS tok_expires, "
            f"{reads} AS tok_reads FROM {{t}}pl_tokens t WHERE t.token_hash = ? OFFSET 0) t "
            "LEFT JOIN {t}pl_records r "
        )
        where = ""
    return d.q(
        "SELECT "
        + row_columns("r", CLAIM_ROW[:-1])
        + ", {delivered} AS has_deliveries, "
        + token
        + joined
        + f"ON r.scope = ? AND r.claim_key = ? AND {when}{where}{order}"
    )


#: The statuses of the records any proposer can put under a claim (never accepted):
#: ``claim_others`` lists them after the others.
PROPOSED_ONLY = ("CANDIDATE", "REJECTED")


def claim_others(
    c: Cursor,
    d: Dialect,
    scope: str,
    claim_key: str,
    position: int | None,
    limit: int,
) -> tuple[list[Any], int]:
    """At most ``limit`` of the claim's rows that are not ACCEPTED (now, or right
    after ``position``), as ``for_claim_as`` gives rows (tuples of ``CLAIM_ROW``),
    and how many such rows the claim has in all. First those an approver once
    accepted (STALE, REVOKED, SUPERSEDED), then the rest (``PROPOSED_ONLY``),
    each the most recently changed first (by ``from_pos``): however many
    candidates are put under a claim, they do not push out why the records once
    accepted are not usable now.

    Current rows are picked and counted on the entries of ``pl_records_live``
    (CANDIDATE and STALE rows) and ``pl_records_withdrawn`` (the rest) alone;
    only the ``limit`` picked are read whole (values included). As of a
    position, the claim's row versions are read from ``pl_records_claim``."""
    if position is None:
        params: tuple[Any, ...] = (scope, claim_key, scope, claim_key, limit)
    else:
        params = (scope, claim_key, position, position, limit)
    c.execute(_others_sql(d, position is not None), params)
    found = c.fetchall()
    if not found:
        return [], 0
    if d.name == "sqlite":  # rows by position: the count is the last column
        return [tuple(row)[:-1] for row in found], int(found[0][-1])
    return [tuple(row[name] for name in CLAIM_ROW) for row in found], int(found[0]["n_others"])


#: ``_others_statement`` by as-of-ness, then by dialect (as ``_CLAIM_AS``).
_OTHERS: tuple[dict[int, tuple[Dialect, str]], ...] = ({}, {})


def _others_sql(d: Dialect, as_of: bool) -> str:
    cache = _OTHERS[as_of]
    known = cache.get(id(d))
    if known is not None and known[0] is d:
        return known[1]
    sql = _others_statement(d, as_of)
    cache[id(d)] = (d, sql)
    return sql


def _tier(statuses: Sequence[str]) -> str:
    """1 for a row ``o`` in one of ``statuses`` (of ``PROPOSED_ONLY``), else 0."""
    terms = " OR ".join(f"o.status = '{s}'" for s in statuses)
    return f"CASE WHEN {terms} THEN 1 ELSE 0 END" if terms else "0"


def _others_statement(d: Dialect, as_of: bool) -> str:
    claim = "SELECT o.record_id, o.from_pos, {tier} AS tier FROM {{t}}pl_records o "
    claim += "WHERE o.scope = ? AND o.claim_key = ? AND "
    if as_of:
        rows = (
            claim.format(tier=_tier(PROPOSED_ONLY))
            + f"{as_of_filter('o')}{claim_walk(d, 'o')} AND o.status <> 'ACCEPTED'"
        )
    else:
        live = [s for s in LIVE_STATUSES if s != "ACCEPTED"]
        rows = (
            claim.format(tier=_tier([s for s in PROPOSED_ONLY if s in live]))
            + f"{live_filter('o')} AND o.status <> 'ACCEPTED' UNION ALL "
            + claim.format(tier=_tier([s for s in PROPOSED_ONLY if s not in live]))
            + withdrawn_filter("o")
        )
    return d.q(
        "SELECT " + row_columns("r", CLAIM_ROW[:-1]) + ", {delivered} "
        "AS has_deliveries, k.n_others "
        "FROM (SELECT u.record_id, u.from_pos, u.tier, count(*) OVER () AS n_others "
        f"FROM ({rows}) u ORDER BY u.tier, u.from_pos DESC LIMIT ?) k "
        "JOIN {t}pl_records r ON r.record_id = k.record_id AND r.from_pos = k.from_pos "
        "ORDER BY k.tier, k.from_pos DESC"
    )
