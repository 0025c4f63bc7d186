"""The record view's table (``pl_records``, with ``pl_values`` for long values,
``pl_spilled`` for long lists and the edge tables): its columns, its schema and
indexes, and the fragments of SQL that select its rows and pick its current,
live or withdrawn ones. The view that writes it is :mod:`projections.validity`;
the statements that read it are in :mod:`projections.claims` (one claim's) and
:mod:`projections.queries` (a whole scope's)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from projections import edges
from projections.base import Cursor, Dialect, as_of_filter, write_rows

COLUMNS = (
    "record_id",
    "from_pos",
    "to_pos",
    "scope",
    "claim_key",
    "kind",
    "value",
    "status",
    "proposer",
    "created_pos",
    "created_at",
    "expires",
    "eff_expires",
    "eff_source",
    "conditions",
    "parents",
    "observed",
    "evidence",
    "snapshot_ref",
    "run_id",
    "cause_root",
    "reason",
    "changed_by",
    "changed_at",
    "left_valid_pos",
    "supersedes",
    "superseded_by",
    "stale_via",
    "agg_id",
)


#: ``claim_key`` compares by code point on every backend (``{bytewise}``: "C" on
#: PostgreSQL): a prefix's keys are one range of the claim index (``queries.page``).
DDL = (
    "CREATE TABLE IF NOT EXISTS {t}pl_records ("
    "record_id TEXT NOT NULL, from_pos {bigint} NOT NULL, to_pos {bigint}, "
    "scope TEXT NOT NULL, claim_key TEXT{bytewise} NOT NULL, kind TEXT NOT NULL, value {blob}, "
    "status TEXT NOT NULL, proposer TEXT NOT NULL, created_pos {bigint} NOT NULL, "
    "created_at {bigint} NOT NULL, expires {bigint}, eff_expires {bigint}, eff_source TEXT, "
    "conditions {blob}, parents {blob}, observed {blob}, evidence {blob}, "
    "snapshot_ref TEXT, run_id TEXT, "
    "cause_root TEXT, reason TEXT, changed_by TEXT, changed_at {bigint}, "
    "left_valid_pos {bigint}, supersedes TEXT, superseded_by TEXT, stale_via TEXT, "
    "agg_id TEXT NOT NULL, PRIMARY KEY (record_id, from_pos)){clustered}",
    # Values longer than INLINE_VALUE: a rowid table (its key is the rowid), whose
    # searches compare integers and never read a row's value.
    "CREATE TABLE IF NOT EXISTS {t}pl_values ("
    "created_pos {bigint} PRIMARY KEY, value {blob} NOT NULL)",
    # The longer ``SPILLED`` columns of rows, by reference (``spill``): a rowid
    # table with an index of its short references, so neither's searches ever
    # meet the long data.
    "CREATE TABLE IF NOT EXISTS {t}pl_spilled (ref {blob} PRIMARY KEY, data {blob} NOT NULL)",
    *edges.DDL,
)

#: The terms that put a current row in ``pl_records_accepted`` or ``pl_records_open``;
#: a statement uses one of the two when its WHERE holds the very same term.
ACCEPTED_TERM = "status = 'ACCEPTED'"
OPEN_TERM = "status <> 'ACCEPTED'"
#: A term true of every row, held only by the statements that walk a scope's rows
#: (its pages, counts and lists). The indexes that order a whole scope
#: (``pl_records_accepted``, ``pl_records_open``, ``pl_records_filtered``) require
#: it in their predicate, so no statement about a claim's rows can be planned over
#: them: PostgreSQL's planner would, on statistics taken before the scope had such
#: rows (an import of candidates, then acceptances one by one until its autovacuum
#: analyses the table), and read the scope's rows one by one for a claim's few.
SCOPE_WALK = "created_pos > 0"
#: A term true of every row, held only by the statements that read a claim's (or a
#: scope's) row versions whatever their status: as of a position, every current
#: one, a range of claim keys. PostgreSQL's ``pl_records_claim`` requires it in its
#: predicate (:func:`claim_walk`), so a statement about a claim's live or withdrawn
#: rows now cannot be planned over it, whatever the planner's statistics: with
#: none yet (a new table, or one vacuumed but not analysed), or ones taken before
#: the claim had candidates, it estimated one row on either index and took the
#: smaller, and a read or a put reading one row read every candidate under the key.
#: SQLite's planner takes the index matching more of a statement's terms, and its
#: claim index holds every row with no condition.
CLAIM_WALK = "length({c}claim_key) >= 0"


def claim_walk(d: Dialect, alias: str = "") -> str:
    """``" AND "`` and :data:`CLAIM_WALK` on the rows of table alias ``alias`` on
    PostgreSQL; "" on SQLite, whose claim index is no partial one."""
    if d.name != "postgresql":
        return ""
    return " AND " + CLAIM_WALK.format(c=f"{alias}." if alias else "")


def claim_index(d: Dialect) -> str:
    """``pl_records_claim``'s keys and condition (``{claim_index}``): on PostgreSQL
    its status too, so that a read as of a position tests it on the entries, not
    on each of the claim's versions (candidates are no version a read uses)."""
    if d.name != "postgresql":
        return "(scope, claim_key)"
    return f"(scope, claim_key, status) WHERE {CLAIM_WALK.format(c='')}"


#: On PostgreSQL, a term true of every row held only by the statements of a filtered
#: page (a kind, a status or a validity: ``queries._filtered_rows``), which
#: ``pl_records_filtered`` requires in its condition instead of ``SCOPE_WALK``: a
#: CANDIDATE row is also one of ``pl_records_open``'s, and with no statistics its
#: planner took that index (the scope's every open row) for a page of a status as
#: readily as the one holding that status's rows alone. SQLite names the index.
FILTER_WALK = "length({c}kind) >= 0"


def filter_walk(d: Dialect, alias: str = "") -> str:
    """The term of ``pl_records_filtered``'s condition on rows of ``alias``:
    :data:`FILTER_WALK` on PostgreSQL, ``SCOPE_WALK`` on SQLite."""
    col = f"{alias}." if alias else ""
    return FILTER_WALK.format(c=col) if d.name == "postgresql" else f"{col}{SCOPE_WALK}"


#: What the listing indexes hold after their keys on SQLite, so that a page tests
#: a row's expiry, and the index's own condition (``to_pos IS NULL``,
#: ``SCOPE_WALK``), on the entry: SQLite tests those again for every entry it
#: passes, and would otherwise read the row for it (about 0.5 µs against 0.05 µs
#: an entry). ``AFTER_LOAD_DDL`` writes such columns ``{+...}`` (:func:`held`):
#: PostgreSQL tests them on the row whatever its index holds, and holds none.
COVERED = "eff_expires, to_pos, created_pos"


def held(statement: str, d: Dialect) -> str:
    """``statement`` (of ``AFTER_LOAD_DDL``) with the columns it writes ``{+...}``
    held after an index's keys on SQLite, and left out on PostgreSQL."""
    return re.sub(r"\{\+([^}]*)\}", r", \1" if d.name == "sqlite" else "", statement)


#: Indexes that applying events never reads (reads do): a replay builds them once
#: its rows are in, which costs a sort instead of an index entry per row.
AFTER_LOAD_DDL = (
    # Every version of a claim's rows (a read as of a position, a range of claim
    # keys): on PostgreSQL only for the statements that hold ``CLAIM_WALK``.
    "CREATE INDEX IF NOT EXISTS pl_records_claim ON {t}pl_records {claim_index}",
    # A claim's live records (``LIVE_FILTER``: what a read may use, what a new
    # version may replace) by status and kind, then by when each was proposed: a
    # read reaches its ACCEPTED rows, a re-capture its live evidence rows and a new
    # version the newest record it replaces (``claims.newest_live_of_claim``)
    # without passing over the claim's other rows, whatever their number.
    # ``to_pos`` (NULL in every entry) makes it cover a look at a claim's CANDIDATE
    # and STALE rows' ids and statuses: SQLite reads no row for it.
    "CREATE INDEX IF NOT EXISTS pl_records_live ON {t}pl_records "
    "(scope, claim_key, status, kind, created_at, from_pos, to_pos) WHERE {live}",
    # A claim's current rows withdrawn for good (REVOKED, REJECTED, SUPERSEDED): with
    # ``pl_records_live`` (its CANDIDATE and STALE rows), the rows a bounded
    # explanation picks from and counts, found without reading (the values of) any
    # row but the few it shows. Partial: other rows cost no entry.
    "CREATE INDEX IF NOT EXISTS pl_records_withdrawn ON {t}pl_records "
    "(scope, claim_key, status, to_pos) WHERE {withdrawn}",
    # Listing a scope page by page in id order (``Session.records``): current rows
    # ordered by the id each was proposed as ({listing}: see Dialect.listing_order),
    # the ACCEPTED ones in one index and the rest in another, so a page of the few
    # CANDIDATE or STALE records of a big scope passes over no ACCEPTED one, and a
    # command still changes one entry of the two per row version. On SQLite each
    # entry also holds the columns of its index's own condition, and an ACCEPTED
    # one the row's expiry (``COVERED``), so a VALID page passes over expired rows
    # (or a page of expired ones over unexpired rows), and a page as of a position
    # over the records proposed after it, without reading them.
    "CREATE INDEX IF NOT EXISTS pl_records_accepted ON {t}pl_records "
    f"(scope, {{listing}}{{+{COVERED}, status}}) "
    f"WHERE to_pos IS NULL AND {ACCEPTED_TERM} AND {SCOPE_WALK}",
    "CREATE INDEX IF NOT EXISTS pl_records_open ON {t}pl_records "
    "(scope, {listing}{+to_pos, created_pos, status}) "
    f"WHERE to_pos IS NULL AND {OPEN_TERM} AND {SCOPE_WALK}",
    # A page with a kind or a status (``Session.records``): a scope's current rows
    # by status and kind, each pair's in listing order, so a page of a kind or a
    # status few rows have reads those rows, not the scope (``queries.page``); with
    # ``COVERED``, a page of a kind's VALID rows passes over its expired ones unread.
    "CREATE INDEX IF NOT EXISTS pl_records_filtered ON {t}pl_records "
    f"(scope, status, kind, {{listing}}{{+{COVERED}}}) WHERE to_pos IS NULL AND {{filter_walk}}",
    # ACCEPTED records that expire, by when (what needs revalidation once expired):
    # records without an expiry cost no entry. Held on SQLite, what a page tests:
    # it counts and sorts the expired ones (of a kind) without reading them.
    "CREATE INDEX IF NOT EXISTS pl_records_expiring ON {t}pl_records "
    f"(scope, eff_expires{{+to_pos, created_pos, status, kind}}) "
    f"WHERE to_pos IS NULL AND {ACCEPTED_TERM} AND eff_expires IS NOT NULL",
    # The qualified keys (``name@@scope``, few) by the id they were proposed as: who
    # else is known by a name (``Caller.names``). Partial: other rows cost nothing.
    "CREATE INDEX IF NOT EXISTS pl_records_qualified ON {t}pl_records ({listing}, scope) "
    "WHERE {qualified}",
    # Partial: only evidence has a snapshot, and other rows then cost no index entry.
    "CREATE INDEX IF NOT EXISTS pl_records_snapshot ON {t}pl_records (snapshot_ref) "
    "WHERE snapshot_ref IS NOT NULL",
)

TABLES = ("pl_records", "pl_values", "pl_spilled", *edges.TABLES)

#: The longest packed value a ``pl_records`` row holds itself (bytes); a longer
#: one is in ``pl_values`` (the row's ``value`` NULL): rows stay well under the
#: 1,002 bytes (of a 4 KiB page) past which SQLite moves a ``WITHOUT ROWID`` row's
#: end to overflow pages, which every search meeting the row then reads.
INLINE_VALUE = 256


#: The columns of packed lists and mappings a ``pl_records`` row keeps by reference
#: once longer than ``INLINE_VALUE``: a record's dependencies have no count limit
#: (a run that was shown 500 records observes them all) and evidence may name a
#: URI of hundreds of characters. Unlike a value, they can change with a new version
#: (a revalidation's new basis), so ``pl_spilled`` keys them by their content.
SPILLED = ("conditions", "parents", "observed", "evidence")
#: The first byte of a reference (``spill``), which starts no msgpack data.
SPILL_MARK = b"\xc1"
#: The length of a reference: ``SPILL_MARK`` and a sha256 digest.
SPILL_REF = 1 + 32


def spill(data: bytes) -> bytes:
    """The reference a ``pl_records`` row keeps in place of ``data`` (a packed
    column of ``SPILLED`` longer than ``INLINE_VALUE``), under which
    ``pl_spilled`` holds it: ``SPILL_MARK`` and the data's sha256 digest, so
    the same data always has the same reference, whichever version of whichever
    record holds it (a replay writes the very rows the commands wrote)."""
    return SPILL_MARK + hashlib.sha256(data).digest()


def spilled_of(alias: str, name: str) -> str:
    """Column ``name`` (of ``SPILLED``) of a row of ``pl_records`` under table
    alias ``alias``, from ``pl_spilled`` where the row holds a reference. Only a
    value of a reference's length is looked up (its length is in the row's
    header: nothing is read for the others), and data of that length that is
    no reference finds nothing, so it is given as it is."""
    column = f"{alias}.{name}"
    return (
        f"CASE WHEN length({column}) = {SPILL_REF} THEN coalesce((SELECT s.data FROM "
        f"{{t}}pl_spilled s WHERE s.ref = {column}), {column}) ELSE {column} END"
    )


def value_of(alias: str) -> str:
    """The value of a row of ``pl_records`` under table alias ``alias``, from the
    row or else ``pl_values`` (``coalesce`` evaluates the look-up only for NULL)."""
    return (
        f"coalesce({alias}.value, (SELECT v.value FROM {{t}}pl_values v "
        f"WHERE v.created_pos = {alias}.created_pos))"
    )


def row_columns(alias: str, names: Iterable[str] = COLUMNS) -> str:
    """The select list of the columns ``names`` of ``pl_records`` under table
    alias ``alias``, the value and the ``SPILLED`` columns taken where they are
    kept (:func:`value_of`, :func:`spilled_of`)."""
    return ", ".join(_column(alias, name) for name in names)


def _column(alias: str, name: str) -> str:
    if name == "value":
        return f"{value_of(alias)} AS value"
    if name in SPILLED:
        return f"{spilled_of(alias, name)} AS {name}"
    return f"{alias}.{name}"


#: Every column of a ``pl_records`` row ``r``, as ``SELECT *`` would name them.
ROW = row_columns("r")


def kept(value: bytes | None) -> bytes | None:
    """A packed value as a ``pl_records`` row keeps it: None if longer than
    ``INLINE_VALUE`` (``pl_values`` holds it from the record's proposal on)."""
    return None if value is None or len(value) > INLINE_VALUE else value


def spill_rows(c: Cursor, d: Dialect, rows: Iterable[dict[str, object]]) -> None:
    """Put in each of ``rows`` (of ``pl_records``, about to be written) a
    reference in place of each of its ``SPILLED`` columns longer than
    ``INLINE_VALUE``, and add the data to ``pl_spilled`` (not with ``COPY``: a
    reference may be there already, holding the same data). Columns that hold a
    reference already are left as they are."""
    spilled: dict[bytes, bytes] = {}
    for row in rows:
        for name in SPILLED:
            data = row[name]
            if type(data) is bytes and len(data) > INLINE_VALUE:
                ref = spill(data)
                spilled[ref] = data
                row[name] = ref
    if spilled:
        write_rows(c, d.q(_INSERT_SPILLED), list(spilled.items()))


#: Adds rows to ``pl_spilled`` (a reference already there holds the same data).
_INSERT_SPILLED = "INSERT INTO {t}pl_spilled (ref, data) VALUES (?, ?) ON CONFLICT DO NOTHING"


NOW_FILTER = "to_pos IS NULL"
#: The current rows of live records: ACCEPTED ones (the only usable status), and
#: STALE and CANDIDATE ones (which a new version may still supersede); not those
#: withdrawn for good. ``pl_records_live`` indexes exactly these rows, and a
#: statement uses it when its WHERE holds these very terms (``live_filter``).
LIVE_STATUSES = ("ACCEPTED", "STALE", "CANDIDATE")


def live_filter(alias: str = "", now: bool = True) -> str:
    """``LIVE_FILTER`` on the rows of table alias ``alias`` (``now=False``: the
    status terms alone, for rows as they stood at an earlier position). The
    statuses are ORed equalities: SQLite builds a temporary table for an IN list
    on every run of the statement (1.5 µs a read here)."""
    col = f"{alias}." if alias else ""
    status = "(" + " OR ".join(f"{col}status = '{s}'" for s in LIVE_STATUSES) + ")"
    return f"{col}to_pos IS NULL AND {status}" if now else status


LIVE_FILTER = live_filter()
#: The statuses a record leaves only by a new version (never usable again).
WITHDRAWN_STATUSES = ("REVOKED", "REJECTED", "SUPERSEDED")


def withdrawn_filter(alias: str = "") -> str:
    """The current rows of records withdrawn for good, on table alias ``alias``
    (``pl_records_withdrawn`` indexes exactly these rows; ORed equalities as in
    :func:`live_filter`)."""
    col = f"{alias}." if alias else ""
    status = "(" + " OR ".join(f"{col}status = '{s}'" for s in WITHDRAWN_STATUSES) + ")"
    return f"{col}to_pos IS NULL AND {status}"


#: Every status a record row may hold.
ROW_STATUSES = (*LIVE_STATUSES, *WITHDRAWN_STATUSES)


def status_is(status: str, alias: str = "") -> str:
    """The term ``status = '<status>'`` on table alias ``alias``, the status
    written into the statement, not bound. SQLite decides whether a partial
    index serves a statement by comparing the statement's terms with the index's
    WHERE clause; a bound parameter compared there with a constant (``status=?``
    against the live index's ``status = 'ACCEPTED'``) makes it re-prepare the
    statement every time the parameter is bound, that is on every run (about
    20 µs a statement here, against 2 µs for the look-up itself). Only the words
    of ``ROW_STATUSES`` are ever written into SQL: any other ``status`` is a
    ``ValueError``."""
    if status not in ROW_STATUSES:
        raise ValueError(f"{status!r} is not a record status")
    col = f"{alias}." if alias else ""
    return f"{col}status = '{status}'"


AS_OF_FILTER = as_of_filter()
