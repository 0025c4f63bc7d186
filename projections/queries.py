"""The reads of a whole scope the current-validity view serves
(``projections.validity`` owns the table and keeps it): pages of a scope for
``records``, and the scopes, ids and counts the graph, the snapshot check and
the summary ask for. A claim's reads are in :mod:`projections.claims`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from ledger.domain import Kind, Status
from ledger.redaction import bare
from projections.base import Cursor, Dialect, as_of_filter
from projections.record_table import (
    ACCEPTED_TERM,
    AS_OF_FILTER,
    LIVE_STATUSES,
    NOW_FILTER,
    OPEN_TERM,
    ROW,
    SCOPE_WALK,
    claim_walk,
    filter_walk,
    live_filter,
    status_is,
)
from projections.validity import ListedRow

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

    Current rows are listed from the listing indexes (``Dialect.listing_order``).
    A page of no filter but a claim prefix, of ACCEPTED rows, or of VALID ones,
    reads ``pl_records_accepted`` (ACCEPTED rows) and ``pl_records_open`` (the
    rest), ``limit`` rows from each at most, and keeps the first ``limit`` of
    them in order. A page with a kind, another status or validity reads
    ``pl_records_filtered`` (current rows by status and kind) instead, one range
    per status and kind the filters allow (and ``pl_records_expiring`` for
    ACCEPTED rows past their expiry), merged in one statement that stops at
    ``limit`` rows (:func:`_filtered_rows`): it costs the rows that match, not
    the scope's. A page with a ``claim_prefix`` whose range of claim keys holds a
    small share of the scope (see ``PREFIX_RANGE``) reads that range instead
    (:func:`_prefix_rows`): a namespace of a few keys in a busy scope costs its
    own rows, not the scope's. What a page still passes over: the expired
    ACCEPTED rows among the ACCEPTED ones it walks (a VALID page; a
    NEEDS_REVALIDATION page sorts the expired ACCEPTED rows while they are
    fewer than ``EXPIRED_SORT``, and from then on passes over the unexpired
    ones), though on SQLite in the index alone (``record_table.COVERED``, read
    keys first: :func:`_union_rows`); and under a claim prefix of more rows
    than that, the rows outside it among those the other filters select. As of
    a position, the same listing indexes lead to each record's row then
    (:func:`_as_of_rows`)."""
    filters: list[str] = []
    values: list[Any] = []
    if status is not None:
        filters.append(status_is(status, "r"))
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
    if claim_prefix:
        # A page as of a position reads every version in the range (no live index then).
        live = position is None and (
            status in LIVE_STATUSES or validity in ("VALID", "NEEDS_REVALIDATION")
        )
        found = _prefix_rows(c, d, scope, claim_prefix, (where, params), order, limit, live, after)
        if found is not None:
            return found
    if after is not None:
        where.append(f"{order} > ?")
        params.append(after)
    if position is not None:
        return _as_of_rows(c, d, scope, position, filters, values, limit, after)
    if kind is not None or status not in (None, "ACCEPTED") or validity not in (None, "VALID"):
        where, params = ["r.scope=?", "r.to_pos IS NULL", filter_walk(d, "r")], [scope]
        if claim_prefix:
            where.append("substr(r.claim_key, 1, ?) = ?")
            params += [len(claim_prefix), claim_prefix]
        if after is not None:
            where.append(f"{order} > ?")
            params.append(after)
        return _filtered_rows(c, d, where, params, order, limit, at, status, validity, kind)
    # No filter but ACCEPTED, VALID or a claim prefix: the ACCEPTED rows' listing
    # index, and the other rows' unless the filter keeps only ACCEPTED ones.
    sides = [_ACCEPTED] if status == "ACCEPTED" or validity == "VALID" else [_ACCEPTED, _OPEN]
    rows: list[ListedRow] = []
    for term in sides:
        rows += _page_rows(c, d, [*where, term], params, order, limit)
    return _merged(rows, limit) if len(sides) > 1 else rows


#: Every status and kind, in the order a filtered page reads their ranges.
STATUSES = tuple(s.value for s in Status)
KINDS = tuple(k.value for k in Kind)
#: The statuses of each validity that the filtered listing index holds in order
#: (NEEDS_REVALIDATION's expired ACCEPTED rows have an arm of their own: ``_expired_index``).
_VALIDITY_STATUSES = {
    "VALID": ("ACCEPTED",),
    "NEEDS_REVALIDATION": ("CANDIDATE", "STALE"),
    "INVALID": ("REVOKED", "REJECTED", "SUPERSEDED"),
}


def _filtered_rows(
    c: Cursor,
    d: Dialect,
    where: list[str],
    params: list[Any],
    order: str,
    limit: int,
    at: int,
    status: str | None,
    validity: str | None,
    kind: str | None,
) -> list[ListedRow]:
    """A page of current rows with a kind, a status other than ACCEPTED, or a
    validity other than VALID (``where``: the scope's current rows, and the
    claim prefix and ``after`` if any; the arms add the rest): one statement
    that reads, for each status and kind the filters allow, the range of
    ``pl_records_filtered`` of that status and kind in listing order, and merges
    the ranges as it goes, stopping at ``limit`` rows. What it reads is the rows
    that match and one entry per range, however many other rows the scope has;
    but a VALID page passes over the expired ACCEPTED rows among the ACCEPTED
    ones of its kind (validity is a matter of time: no index orders it; on
    SQLite their entries alone, ``record_table.COVERED``), and a
    NEEDS_REVALIDATION page reads and sorts the expired ACCEPTED rows
    (``pl_records_expiring``) while they are few, and otherwise passes over the
    unexpired ones among the ACCEPTED rows it walks (:func:`_expired_index`)."""
    statuses = STATUSES if status is None else (status,)
    if validity is not None:
        statuses = tuple(s for s in statuses if s in _VALIDITY_STATUSES[validity])
    kinds = KINDS if kind is None else (kind,)
    arms: list[tuple[list[str], list[Any], str]] = []
    index = "pl_records_filtered" if d.name == "sqlite" else ""
    # An arm's status decides the validity, but for an ACCEPTED row's expiry.
    unexpired = [_UNEXPIRED] if validity == "VALID" else []
    for one in statuses:
        for each in kinds:
            terms = [*where, status_is(one, "r"), "r.kind = ?", *unexpired]
            arms.append((terms, [*params, each, *([at] * len(unexpired))], index))
    if validity == "NEEDS_REVALIDATION" and status in (None, "ACCEPTED"):
        # The expired ACCEPTED rows: sorted while few, else walked (``_expired_index``).
        of_kind = [] if kind is None else ["r.kind = ?"]
        terms = [*where, _ACCEPTED, _EXPIRED, *of_kind]
        values = [*params, at, *([] if kind is None else [kind])]
        walk = "pl_records_accepted" if kind is None else "pl_records_filtered"
        arms.append((terms, values, _expired_index(c, d, terms, values, walk)))
    if not arms:
        return []  # no row can pass the filters (such as CANDIDATE and VALID)
    if len(arms) == 1:
        terms, values, index = arms[0]
        return _page_rows(c, d, terms, values, order, limit, index)
    return _union_rows(c, d, arms, order, limit)


def _union_rows(
    c: Cursor,
    d: Dialect,
    arms: Sequence[tuple[list[str], list[Any], str]],
    order: str,
    limit: int,
) -> list[ListedRow]:
    """Up to ``limit`` rows in ``order`` of the union of ``arms`` (each the
    conditions on rows ``r`` of ``pl_records``, their parameters and the index
    SQLite reads them from), in one statement that merges the arms' rows, each
    read in order from its index, a row at a time, and stops at ``limit``
    (SQLite's ``MERGE (UNION ALL)`` of the arms; PostgreSQL's Merge Append of
    the arms, each limited itself, as its planner merges only those): a page
    reads ``limit`` rows in all and one more entry per arm.

    Keys first: the arms select each row's key and listing key, and only the
    ``limit`` rows kept are read whole. On SQLite a row of ``pl_records``
    (clustered by its key) is otherwise read for every entry an arm passes,
    though the listing indexes hold what a page tests (``record_table.COVERED``):
    the statement of a VALID page past 20,000 expired rows took 11.4 ms, and 1.3
    ms so. PostgreSQL otherwise plans every arm's reads of values, long lists
    and deliveries: a NEEDS_REVALIDATION page's 15 arms were planned in 3.0 ms,
    and in 1.2 ms so."""
    selects: list[str] = []
    values: list[Any] = []
    for terms, params, index in arms:
        indexed = f" INDEXED BY {index}" if index else ""
        selected = f"r.record_id AS k_id, r.from_pos AS k_pos, {order} AS listing_key"
        select = f"SELECT {selected} FROM {{t}}pl_records r{indexed} WHERE {' AND '.join(terms)}"
        values += params
        if d.name != "sqlite":
            # SQLite would sort each limited arm again before merging them.
            select = f"({select} ORDER BY {order} LIMIT ?)"
            values.append(limit)
        selects.append(select)
    statement = " UNION ALL ".join(selects) + " ORDER BY listing_key LIMIT ?"
    c.execute(
        d.q(
            f"SELECT {ROW}, {_DELIVERED} FROM ({statement}) k CROSS JOIN {{t}}pl_records r "
            "WHERE r.record_id = k.k_id AND r.from_pos = k.k_pos"
        ),
        (*values, limit),
    )
    # The kept rows in listing order (ordered in SQL, the plan would sort them
    # in a temporary b-tree after reading them in that very order).
    return _merged(cast("list[ListedRow]", list(c.fetchall())), limit)


def _merged(rows: list[ListedRow], limit: int) -> list[ListedRow]:
    """The first ``limit`` of rows read from a scope's listing indexes, in listing
    order: by the id each record was proposed as (code points sort as the
    index's bytes; unique within a scope)."""
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
        side += f" AND cur.{SCOPE_WALK}"
        rows += _page_rows(c, d, [*where, side], params, order, limit, rows=then)
    return _merged(rows, limit)


#: The terms of a page's two listing indexes (``SCOPE_WALK``: only pages use them).
_ACCEPTED = f"r.{ACCEPTED_TERM} AND r.{SCOPE_WALK}"
_OPEN = f"r.{OPEN_TERM} AND r.{SCOPE_WALK}"
#: A row ``r`` as it stood right after a position.
_THEN = as_of_filter("r")
#: ACCEPTED rows expired by the instant (``pl_records_expiring`` orders them by
#: expiry, ``_expired_index``).
_EXPIRED = "r.eff_expires <= ?"
#: An ACCEPTED row ``r`` not expired by the instant.
_UNEXPIRED = "(r.eff_expires IS NULL OR r.eff_expires > ?)"


#: A page of expired ACCEPTED rows sorts them when there are fewer than this (read
#: by expiry from ``pl_records_expiring``); from this many on, it walks the scope's
#: ACCEPTED rows in listing order and keeps the expired ones (``_expired_index``).
EXPIRED_SORT = 2048


def _expired_index(c: Cursor, d: Dialect, terms: list[str], values: list[Any], walk: str) -> str:
    """The index SQLite reads a page's expired ACCEPTED rows ``terms`` from:
    ``pl_records_expiring`` (the rows expired by the instant, by expiry, then
    sorted) while they are fewer than ``EXPIRED_SORT`` (counted there, up to
    that), else ``walk``, the listing index of those ACCEPTED rows, passing
    over the unexpired ones: records that expire pile up once expired (nothing
    but a revalidation or a new version takes them out), and sorting them all
    for every page cost their number (20,000: 17 ms a page of 50). On
    PostgreSQL the planner picks ("": its statistics know the expiries)."""
    if d.name != "sqlite":
        return ""
    expired = _count_up_to(c, d, "pl_records_expiring", terms, values, EXPIRED_SORT)
    return walk if expired >= EXPIRED_SORT else "pl_records_expiring"


def _page_rows(
    c: Cursor,
    d: Dialect,
    where: list[str],
    params: list[Any],
    order: str,
    limit: int,
    index: str = "",
    rows: str = "",
) -> list[ListedRow]:
    """Up to ``limit`` rows ``r`` holding ``where``, in ``order``, of ``rows``
    (a join that names its rows ``r``, its parameters first in ``params``; by
    default ``pl_records``, read keys first on SQLite: :func:`_union_rows`;
    ``index``: the index SQLite must read ``pl_records`` from)."""
    if not rows and d.name == "sqlite":
        return _union_rows(c, d, [(where, params, index)], order, limit)
    indexed = f" INDEXED BY {index}" if index else ""
    c.execute(
        d.q(
            f"SELECT {ROW}, {_DELIVERED} FROM {rows or '{t}pl_records r'}{indexed} "
            f"WHERE {' AND '.join(where)} "
            f"ORDER BY {order} LIMIT ?"
        ),
        (*params, limit),
    )
    return cast("list[ListedRow]", list(c.fetchall()))


#: Whether a row ``r`` was delivered, as a page lists it.
_DELIVERED = "{delivered} AS has_deliveries"


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
    selected: tuple[list[str], list[Any]],
    order: str,
    limit: int,
    live: bool,
    after: str | None,
) -> list[ListedRow] | None:
    """A page of the rows ``selected`` (conditions on rows ``r`` and their
    parameters: current ones, or as of a position) after ``after`` in ``order``
    whose claim keys start with ``claim_prefix``, read from the range of those
    keys in ``pl_records_claim`` (every version), or in ``pl_records_live`` if
    ``live`` (current rows, the filter keeping only live statuses), and sorted;
    None if the scope's listing serves the page better (see ``PREFIX_RANGE``;
    each count stops at what it decides). The claim keys compare by code point
    on every backend (``record_table.DDL``), so the keys with a prefix form one range."""
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
    where, params = selected
    later = ([f"{order} > ?"], [after]) if after is not None else ([], [])
    if d.name == "sqlite":
        # The range's rows are sorted by their keys alone, then the page's rows
        # read whole (``_page_rows``): sorted whole, each row's values, long lists
        # and deliveries were read for every row of the range (a namespace of 600
        # keys: 700 µs a page of 10, against 500 µs).
        index = "pl_records_live" if live else "pl_records_claim"
        terms, values = [*where, *span, *later[0]], [*params, *bounds, *later[1]]
        return _page_rows(c, d, terms, values, order, limit, index)
    # PostgreSQL reads the range whole first (OFFSET 0 keeps the subquery apart, and
    # ``after`` is outside it): asked for rows in listing order, its planner may walk
    # a listing index instead, on estimates that know nothing of the counts above.
    walk = "" if live else claim_walk(d, "r")
    fenced = (
        f"(SELECT * FROM {{t}}pl_records r WHERE {' AND '.join([*where, *span])}{walk} OFFSET 0) r"
    )
    terms, values = later[0] or ["TRUE"], [*params, *bounds, *later[1]]
    return _page_rows(c, d, terms, values, order, limit, rows=fenced)


def _versions(
    c: Cursor, d: Dialect, scope: str, terms: list[str], params: list[Any], cap: int
) -> int:
    """How many row versions of ``scope`` hold ``terms`` (on its claim keys),
    counted up to ``cap`` in ``pl_records_claim``."""
    index = "pl_records_claim" if d.name == "sqlite" else ""
    walk = claim_walk(d, "r").removeprefix(" AND ")
    terms = ["r.scope = ?", *terms, *([walk] if walk else [])]
    return _count_up_to(c, d, index, terms, [scope, *params], cap)


def _count_up_to(
    c: Cursor, d: Dialect, index: str, terms: list[str], params: list[Any], cap: int
) -> int:
    """How many rows ``r`` of ``pl_records`` hold ``terms``, counted up to ``cap``
    (``index``: the index SQLite must count them in; "": the planner's choice)."""
    indexed = f" INDEXED BY {index}" if index else ""
    c.execute(
        d.q(
            f"SELECT count(*) AS n FROM (SELECT 1 FROM {{t}}pl_records r{indexed} "
            f"WHERE {' AND '.join(terms)} LIMIT ?) v"
        ),
        (*params, cap),
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


def status_counts(c: Cursor, d: Dialect) -> dict[str, int]:
    """How many records are in each status now."""
    c.execute(
        d.q(
            f"SELECT status, COUNT(*) AS n FROM {{t}}pl_records WHERE {NOW_FILTER} "
            f"AND {SCOPE_WALK} "
            "GROUP BY status ORDER BY status"
        )
    )
    return {str(r["status"]): int(r["n"]) for r in c.fetchall()}


def scopes(c: Cursor, d: Dialect, position: int | None = None) -> list[str]:
    """Every scope holding a record, now or after ``position``."""
    if position is None:
        c.execute(
            d.q(
                f"SELECT DISTINCT scope FROM {{t}}pl_records WHERE {NOW_FILTER} "
                f"AND {SCOPE_WALK} ORDER BY scope"
            )
        )
    else:
        c.execute(
            d.q(
                f"SELECT DISTINCT scope FROM {{t}}pl_records WHERE {AS_OF_FILTER}"
                f"{claim_walk(d)} ORDER BY scope"
            ),
            (position, position),
        )
    return [r["scope"] for r in c.fetchall()]


def in_scope(c: Cursor, d: Dialect, scope: str, position: int | None = None) -> list[str]:
    """Ids of the records in ``scope`` in proposal order, now or after ``position``."""
    if position is None:
        c.execute(
            d.q(
                "SELECT record_id FROM {t}pl_records WHERE scope=? "
                f"AND {NOW_FILTER} AND {filter_walk(d)} ORDER BY created_pos"
            ),
            (scope,),
        )
    else:
        c.execute(
            d.q(
                "SELECT record_id FROM {t}pl_records WHERE scope=? "
                f"AND {AS_OF_FILTER}{claim_walk(d)} ORDER BY created_pos"
            ),
            (scope, position, position),
        )
    return [r["record_id"] for r in c.fetchall()]
