"""The reads the current-validity view serves (``projections.validity`` owns the
table and keeps it): a claim's rows for ``read`` and ``explain`` (with the token and
grants in the same statement), pages of a scope for ``records``, and the scopes,
ids and counts the graph, the snapshot check and the summary ask for.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, cast

from ledger.redaction import bare
from projections.base import Cursor, Dialect, as_of_filter
from projections.validity import (
    ACCEPTED_TERM,
    AS_OF_FILTER,
    COLUMNS,
    LIVE_STATUSES,
    NOW_FILTER,
    OPEN_TERM,
    ListedRow,
    RecordRow,
    live_filter,
)


def for_claim(c: Cursor, d: Dialect, scope: str, claim_key: str) -> list[RecordRow]:
    """The current rows of ``(scope, claim_key)`` in proposal order."""
    c.execute(
        d.q(
            "SELECT * FROM {t}pl_records WHERE scope=? AND claim_key=? "
            f"AND {NOW_FILTER} ORDER BY created_pos"
        ),
        (scope, claim_key),
    )
    return cast("list[RecordRow]", list(c.fetchall()))


def captures_of_claim(
    c: Cursor, d: Dialect, scope: str, claim_key: str
) -> list[tuple[str, str, bytes]]:
    """(record id, status, evidence) of the ACCEPTED and CANDIDATE evidence records
    of ``(scope, claim_key)`` in proposal order: what a re-capture may supersede,
    found on the live index without reading the claim's other rows' values."""
    c.execute(
        d.q(
            "SELECT record_id, status, evidence FROM {t}pl_records "
            f"WHERE scope=? AND claim_key=? AND {live_filter()} AND kind='evidence' "
            "AND (status='ACCEPTED' OR status='CANDIDATE') ORDER BY created_pos"
        ),
        (scope, claim_key),
    )
    return [(r["record_id"], r["status"], r["evidence"]) for r in c.fetchall()]


def live_of_claim(
    c: Cursor, d: Dialect, scope: str, claim_key: str, kind: str
) -> list[tuple[str, str, int, int]]:
    """(record id, status, created_at, from_pos) of the live records of ``kind`` in
    ``(scope, claim_key)`` (``validity.LIVE_FILTER``): one statement on the live
    index, however many earlier versions the claim has had."""
    c.execute(
        d.q(
            "SELECT record_id, status, created_at, from_pos FROM {t}pl_records "
            f"WHERE scope=? AND claim_key=? AND kind=? AND {live_filter()}"
        ),
        (scope, claim_key, kind),
    )
    return [(r["record_id"], r["status"], r["created_at"], r["from_pos"]) for r in c.fetchall()]


#: Per validity, the SQL condition on a row ``r`` given the instant (µs) as its
#: parameters.
VALIDITY_SQL = {
    "VALID": ("r.status='ACCEPTED' AND (r.eff_expires IS NULL OR r.eff_expires > ?)", 1),
    "NEEDS_REVALIDATION": (
        "(r.status IN ('CANDIDATE', 'STALE') OR (r.status='ACCEPTED' AND r.eff_expires <= ?))",
        1,
    ),
    "INVALID": ("r.status IN ('REVOKED', 'REJECTED', 'SUPERSEDED')", 0),
}


def page(
    c: Cursor,
    d: Dialect,
    scope: str,
    *,
    position: int | None,
    at: int,
    status: str | None,
    validity: str | None,
    kind: str | None,
    claim_prefix: str | None,
    limit: int,
    after: str | None,
) -> list[ListedRow]:
    """One page of a scope's rows in the order of the ids they were proposed as
    (``Session.records``; ``after``: such an id), each with ``has_deliveries``.

    Current rows are listed from the listing indexes (``Dialect.listing_order``):
    ``pl_records_accepted`` for ACCEPTED rows, ``pl_records_open`` for the rest,
    ``pl_records_expiring`` for ACCEPTED rows past their expiry. A page reads the
    one or two a filter needs, ``limit`` rows from each at most, and keeps the
    first ``limit`` of them in order; a page of the few CANDIDATE records of a
    scope passes over none of its ACCEPTED ones. On SQLite, a page with a
    ``claim_prefix`` whose range of claim keys holds a small share of the scope
    (see ``PREFIX_RANGE``) reads that range instead (:func:`_prefix_rows`): a
    namespace of a few keys in a busy scope costs its own rows, not the scope's.
    As of a position, the same listing indexes lead to each record's row then
    (:func:`_as_of_rows`)."""
    filters: list[str] = []
    values: list[Any] = []
    if status is not None:
        filters.append("r.status=?")
        values.append(status)
    if kind is not None:
        filters.append("r.kind=?")
        values.append(kind)
    if validity is not None:
        condition, uses_at = VALIDITY_SQL[validity]
        filters.append(condition)
        values += [at] * uses_at
    if claim_prefix:
        filters.append("substr(r.claim_key, 1, ?) = ?")
        values += [len(claim_prefix), claim_prefix]
    where = ["r.scope=?", "r.to_pos IS NULL" if position is None else _THEN]
    params: list[Any] = [scope, *([] if position is None else [position, position])]
    where += filters
    params += values
    order = d.listing_order("r.record_id")
    if after is not None:
        where.append(f"{order} > ?")
        params.append(after)
    if claim_prefix and d.name == "sqlite":
        # A page as of a position reads every version in the range (no live index then).
        live = position is None and (
            status in LIVE_STATUSES or validity in ("VALID", "NEEDS_REVALIDATION")
        )
        found = _prefix_rows(c, d, scope, claim_prefix, where, params, order, limit, live)
        if found is not None:
            return found
    if position is not None:
        return _as_of_rows(c, d, scope, position, filters, values, limit, after)
    sides = _sides(status, validity)
    rows: list[ListedRow] = []
    for term, expired in sides:
        if expired:
            rows += _page_rows(c, d, [*where, term, _EXPIRED], [*params, at], order, limit)
        else:
            rows += _page_rows(c, d, [*where, term], params, order, limit)
    return _merged(rows, limit) if len(sides) > 1 else rows


def _merged(rows: list[ListedRow], limit: int) -> list[ListedRow]:
    """The first ``limit`` of two listing indexes' rows, in listing order: by the
    id each record was proposed as (code points sort as the index's bytes)."""
    rows.sort(key=lambda row: bare(str(row["record_id"])))
    del rows[limit:]
    return rows


def _as_of_rows(
    c: Cursor,
    d: Dialect,
    scope: str,
    position: int,
    filters: list[str],
    values: list[Any],
    limit: int,
    after: str | None,
) -> list[ListedRow]:
    """A page of the scope's records as they stood right after ``position``, each
    row ``r`` holding ``filters``. Every record keeps one current row, in one of
    the two listing indexes, and never changes scope or id: the page walks both
    indexes in listing order past the records proposed later, and joins each
    record's row of then (a primary-key look-up), ``limit`` rows from each."""
    order = d.listing_order("cur.record_id")
    where = ["cur.scope=?", "cur.to_pos IS NULL", "cur.created_pos <= ?", *filters]
    params: list[Any] = [position, position, scope, position, *values]
    if after is not None:
        where.append(f"{order} > ?")
        params.append(after)
    then = f"{{t}}pl_records cur JOIN {{t}}pl_records r ON r.record_id = cur.record_id AND {_THEN}"
    rows: list[ListedRow] = []
    for side in (f"cur.{ACCEPTED_TERM}", f"cur.{OPEN_TERM}"):
        rows += _page_rows(c, d, [*where, side], params, order, limit, rows=then)
    return _merged(rows, limit)


_ACCEPTED, _OPEN = f"r.{ACCEPTED_TERM}", f"r.{OPEN_TERM}"
#: A row ``r`` as it stood right after a position.
_THEN = as_of_filter("r")
#: ACCEPTED rows expired by the instant (``pl_records_expiring``: the few that need
#: revalidation, not every ACCEPTED row of the scope in id order).
_EXPIRED = "r.eff_expires <= ?"


def _sides(status: str | None, validity: str | None) -> list[tuple[str, bool]]:
    """The listing indexes a page of current rows reads, each as the term that
    selects it and whether it is the expired ACCEPTED rows' (none: no row can
    pass the filters, such as CANDIDATE and VALID)."""
    accepted, expired, others = (_ACCEPTED, False), (_ACCEPTED, True), (_OPEN, False)
    if validity == "NEEDS_REVALIDATION":
        sides = [others, expired]
    elif validity == "VALID":
        sides = [accepted]
    elif validity == "INVALID":
        sides = [others]
    else:
        sides = [accepted, others]
    if status is not None:
        wanted = _ACCEPTED if status == "ACCEPTED" else _OPEN
        sides = [side for side in sides if side[0] == wanted]
    return sides


def _page_rows(
    c: Cursor,
    d: Dialect,
    where: list[str],
    params: list[Any],
    order: str,
    limit: int,
    index: str = "",
    rows: str = "{t}pl_records r",
) -> list[ListedRow]:
    """Up to ``limit`` rows ``r`` holding ``where``, in ``order``, of ``rows``
    (``pl_records``, or a join that names its rows ``r``, its parameters first in
    ``params``; ``index``: the index SQLite must read ``pl_records`` from)."""
    indexed = f" INDEXED BY {index}" if index else ""
    c.execute(
        d.q(
            "SELECT r.*, EXISTS (SELECT 1 FROM {t}pl_deliveries dl "
            "WHERE dl.record_id = r.record_id) AS has_deliveries "
            f"FROM {rows}{indexed} "
            f"WHERE {' AND '.join(where)} "
            f"ORDER BY {order} LIMIT ?"
        ),
        (*params, limit),
    )
    return cast("list[ListedRow]", list(c.fetchall()))


#: A page with a claim prefix reads the prefix's claim keys (``_prefix_rows``) when
#: they hold fewer row versions than this and under a ``1 / (1 + DENSE)`` share of
#: the scope's; else the scope's listing indexes, which then meet a matching row
#: every few rows, or pass over about ``limit * scope rows / PREFIX_RANGE`` at most.
PREFIX_RANGE = 4096
#: The scope's other row versions, per one under the prefix, from which a prefix
#: counts as sparse (3: the prefix holds under a quarter of the scope).
DENSE = 3


def _prefix_rows(
    c: Cursor,
    d: Dialect,
    scope: str,
    claim_prefix: str,
    where: list[str],
    params: list[Any],
    order: str,
    limit: int,
    live: bool,
) -> list[ListedRow] | None:
    """A page of the rows ``where`` selects (current ones, or as of a position)
    whose claim keys start with ``claim_prefix``, read from the range of those
    keys in ``pl_records_claim`` (every version), or in ``pl_records_live`` if
    ``live`` (current rows, the filter keeping only live statuses), and sorted;
    None if the scope's listing serves the page better (see ``PREFIX_RANGE``;
    each count stops at what it decides). SQLite only: its text order is the
    code points', so the keys with a prefix form one range."""
    span, bounds = ["r.claim_key >= ?"], [claim_prefix]
    end = prefix_end(claim_prefix)
    if end is not None:
        span.append("r.claim_key < ?")
        bounds.append(end)
    outside = [(["r.claim_key < ?"], [claim_prefix])]
    if end is not None:
        outside.append((["r.claim_key >= ?"], [end]))
    if not any(_versions(c, d, scope, *side, 1) for side in outside):
        return None  # the prefix holds the whole scope
    inside = _versions(c, d, scope, span, bounds, PREFIX_RANGE)
    if inside >= PREFIX_RANGE:
        return None
    cap = DENSE * inside + 1
    if sum(_versions(c, d, scope, *side, cap) for side in outside) < cap:
        return None  # a dense prefix
    if live:  # the partial index's own condition, for SQLite to read it
        span.append(live_filter("r"))
    index = "pl_records_live" if live else "pl_records_claim"
    return _page_rows(c, d, [*where, *span], [*params, *bounds], order, limit, index)


def _versions(
    c: Cursor, d: Dialect, scope: str, terms: list[str], params: list[Any], cap: int
) -> int:
    """How many row versions of ``scope`` hold ``terms`` (on its claim keys),
    counted up to ``cap`` in ``pl_records_claim``."""
    c.execute(
        d.q(
            "SELECT count(*) AS n FROM (SELECT 1 FROM {t}pl_records r "
            f"INDEXED BY pl_records_claim WHERE r.scope = ? AND {' AND '.join(terms)} LIMIT ?)"
        ),
        (scope, *params, cap),
    )
    return int(c.fetchone()["n"])


def prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``, in code
    point order (None: there is none, every character is the last code point)."""
    head = prefix
    while head:
        following = ord(head[-1]) + 1
        if 0xD800 <= following <= 0xDFFF:  # surrogates are never stored
            following = 0xE000
        head = head[:-1]
        if following <= 0x10FFFF:
            return head + chr(following)
    return None


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
#: The keys of a record row of ``for_claim_as``.
CLAIM_ROW = (*READ_COLUMNS, "has_deliveries")
#: The token's columns of a ``for_claim_as`` statement (after the record's).
TOKEN_COLUMNS = ("tok_subject", "tok_revoked", "tok_expires", "tok_roles")
#: (subject, revoked_pos, expires, roles in the scope comma separated or None)
Token = tuple[str, int | None, int | None, str | None]


def for_claim_as(
    c: Cursor,
    d: Dialect,
    token_hash: str,
    scope: str,
    claim_key: str,
    position: int | None = None,
    live_only: bool = False,
) -> tuple[Token | None, list[Any]]:
    """One statement for a read: the token's row with its subject's roles in
    ``scope`` (None: the token is unknown), and the claim's record rows in
    proposal order, as tuples of ``CLAIM_ROW`` (the ``READ_COLUMNS`` of the row
    and whether the record was delivered; ``claim_row`` makes one a dict);
    ``live_only``: only its live records' rows (``validity.LIVE_FILTER``).

    The caller checks the token and the roles before using any record row.
    """
    sql = _claim_as_sql(d, position is not None, live_only)
    if position is None:
        c.execute(sql, (scope, scope, claim_key, token_hash))
    else:
        c.execute(sql, (scope, scope, claim_key, position, position, token_hash))
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
    token = tuple(found[0][-4:])
    rows = [row for row in found if row[0] is not None]
    if len(rows) > 1:
        rows.sort(key=_created_pos)
    return token, rows


def claim_row(row: Sequence[Any]) -> dict[str, Any]:
    """A record row of ``for_claim_as`` as a dict of ``CLAIM_ROW``."""
    return dict(zip(CLAIM_ROW, row, strict=False))


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
    roles = "string_agg(g.role, ',')" if d.name == "postgresql" else "group_concat(g.role, ',')"
    if as_of:
        when = _THEN
        if live_only:  # as the records stood then
            when += " AND " + live_filter("r", now=False)
    else:
        when = live_filter("r") if live_only else "r.to_pos IS NULL"
    if live_only:
        # A read uses only ACCEPTED rows: a claim's CANDIDATE and STALE rows (any
        # number, values of up to the size limit each) are not fetched for it.
        when += " AND r.status = 'ACCEPTED'"
    # SQLite sorts a claim's few rows in Python (no temporary b-tree per read).
    order = "" if d.name == "sqlite" else " ORDER BY r.created_pos"
    return d.q(
        "SELECT "
        + ", ".join(f"r.{name}" for name in READ_COLUMNS)
        + ", EXISTS (SELECT 1 FROM {t}pl_deliveries dl WHERE dl.record_id = r.record_id) "
        "AS has_deliveries, t.subject AS tok_subject, t.revoked_pos AS tok_revoked, "
        "t.expires AS tok_expires, "
        f"(SELECT {roles} FROM {{t}}pl_grants g WHERE g.subject = t.subject "
        "AND g.scope = ? AND g.to_pos IS NULL) AS tok_roles "
        "FROM {t}pl_tokens t LEFT JOIN {t}pl_records r "
        f"ON r.scope = ? AND r.claim_key = ? AND {when} "
        f"WHERE t.token_hash = ?{order}"
    )


def status_counts(c: Cursor, d: Dialect) -> dict[str, int]:
    """How many records are in each status now."""
    c.execute(
        d.q(
            f"SELECT status, COUNT(*) AS n FROM {{t}}pl_records WHERE {NOW_FILTER} "
            "GROUP BY status ORDER BY status"
        )
    )
    return {str(r["status"]): int(r["n"]) for r in c.fetchall()}


def scopes(c: Cursor, d: Dialect, position: int | None = None) -> list[str]:
    """Every scope holding a record, now or after ``position``."""
    if position is None:
        c.execute(
            d.q(f"SELECT DISTINCT scope FROM {{t}}pl_records WHERE {NOW_FILTER} ORDER BY scope")
        )
    else:
        c.execute(
            d.q(f"SELECT DISTINCT scope FROM {{t}}pl_records WHERE {AS_OF_FILTER} ORDER BY scope"),
            (position, position),
        )
    return [r["scope"] for r in c.fetchall()]


def in_scope(c: Cursor, d: Dialect, scope: str, position: int | None = None) -> list[str]:
    """Ids of the records in ``scope`` in proposal order, now or after ``position``."""
    if position is None:
        c.execute(
            d.q(
                "SELECT record_id FROM {t}pl_records WHERE scope=? "
                f"AND {NOW_FILTER} ORDER BY created_pos"
            ),
            (scope,),
        )
    else:
        c.execute(
            d.q(
                "SELECT record_id FROM {t}pl_records WHERE scope=? "
                f"AND {AS_OF_FILTER} ORDER BY created_pos"
            ),
            (scope, position, position),
        )
    return [r["record_id"] for r in c.fetchall()]
