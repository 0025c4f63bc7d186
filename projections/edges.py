"""The reverse-dependency index: ``pl_edges``, parent → child over declared and
observed dependencies, part of the current-validity view.

Edges are versioned like record rows (``from_pos``/``to_pos``), so a new basis
given at revalidation replaces a record's edges without losing what they were at
any past position. Walks over the index cost what the subgraph holds, never what
the ledger holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set

from projections.base import Cursor, Dialect, as_of_filter, insert_rows, rows_in

DDL = (
    "CREATE TABLE IF NOT EXISTS {t}pl_edges ("
    "parent_id TEXT NOT NULL, child_id TEXT NOT NULL, edge TEXT NOT NULL, "
    "from_pos {bigint} NOT NULL, to_pos {bigint}, "
    "PRIMARY KEY (child_id, parent_id, from_pos))",
    "CREATE INDEX IF NOT EXISTS pl_edges_parent ON {t}pl_edges (parent_id)",
)

TABLES = ("pl_edges",)

COLUMNS = ("parent_id", "child_id", "edge", "from_pos")

AS_OF_FILTER = as_of_filter()

Edge = tuple[str, str, str, int]


def rows(child: str, parents: Sequence[str], observed: Sequence[str], pos: int) -> list[Edge]:
    """The edge rows of ``child`` opened at ``pos``: declared, then observed-only."""
    out = [(p, child, "declared", pos) for p in parents]
    out += [(o, child, "observed", pos) for o in observed if o not in parents]
    return out


def insert(c: Cursor, d: Dialect, edges: Sequence[Edge]) -> None:
    """Insert edge rows (from :func:`rows`)."""
    insert_rows(c, d, "pl_edges", COLUMNS, edges)


def replace(
    c: Cursor, d: Dialect, child: str, parents: Sequence[str], observed: Sequence[str], pos: int
) -> None:
    """Close ``child``'s current edges at ``pos`` and open its new basis."""
    c.execute(
        d.q("UPDATE {t}pl_edges SET to_pos=? WHERE child_id=? AND to_pos IS NULL"), (pos, child)
    )
    insert(c, d, rows(child, parents, observed, pos))


def children(c: Cursor, d: Dialect, parent_ids: Sequence[str]) -> list[tuple[str, str, str]]:
    """Current (parent, child, edge) rows for the given parents."""
    return _edges_where(c, d, "parent_id", parent_ids, None)


def descendants(c: Cursor, d: Dialect, root: str) -> list[tuple[str, str]]:
    """Every transitive descendant of ``root`` with the parent it was first reached from.

    Breadth-first over the reverse-dependency index: the cost follows the number
    of descendants, not the size of the ledger.
    """
    seen: dict[str, str] = {}
    frontier = [root]
    while frontier:
        nxt: list[str] = []
        for parent, child, _edge in children(c, d, frontier):
            if child != root and child not in seen:
                seen[child] = parent
                nxt.append(child)
        frontier = nxt
    return list(seen.items())


def _edges_where(
    c: Cursor,
    d: Dialect,
    column: str,
    ids: Sequence[str],
    position: int | None,
    former: bool = False,
) -> list[tuple[str, str, str]]:
    """(parent, child, edge) rows whose ``column`` is one of ``ids``, now or after
    ``position``; ``former``: also the edges of bases replaced by then."""
    after: tuple[int, ...]
    if former:
        when, after = ("1=1", ()) if position is None else ("from_pos <= ?", (position,))
    else:
        when = "to_pos IS NULL" if position is None else AS_OF_FILTER
        after = () if position is None else (position, position)
    # A basis held twice (kept at a revalidation) is one edge; current edges are
    # unique already, and revocations walk them: no DISTINCT there.
    distinct = "DISTINCT " if former else ""
    select = (
        f"SELECT {distinct}parent_id, child_id, edge FROM {{{{t}}}}pl_edges "
        f"WHERE {column} IN ({{marks}}) AND {when} ORDER BY parent_id, child_id"
    )
    return [(r["parent_id"], r["child_id"], r["edge"]) for r in rows_in(c, d, select, ids, after)]


def bases(
    c: Cursor, d: Dialect, children: Sequence[str], position: int | None = None
) -> list[tuple[str, str, str, int, int | None]]:
    """Every basis the ``children`` held up to ``position`` (None: now):
    (parent, child, edge, from_pos, to_pos) rows, ``to_pos`` None while it holds
    (or held at ``position``), in the order they were opened."""
    after: tuple[int, ...] = () if position is None else (position,)
    when = "1=1" if position is None else "from_pos <= ?"
    select = (
        "SELECT parent_id, child_id, edge, from_pos, to_pos FROM {{t}}pl_edges "
        f"WHERE child_id IN ({{marks}}) AND {when} ORDER BY from_pos, child_id, parent_id"
    )
    return [
        (
            r["parent_id"],
            r["child_id"],
            r["edge"],
            int(r["from_pos"]),
            None
            if r["to_pos"] is None or (position is not None and r["to_pos"] > position)
            else int(r["to_pos"]),
        )
        for r in rows_in(c, d, select, children, after)
    ]


def lineage(
    c: Cursor,
    d: Dialect,
    root: str,
    *,
    ancestors: bool,
    descendants: bool,
    position: int | None = None,
    stop: Callable[[list[str]], Set[str]] | None = None,
    former: bool = False,
) -> list[tuple[str, str, str]]:
    """Every (parent, child, edge) on a path up from ``root`` (its ancestors) and/or
    down from it (its descendants), over declared and observed edges. ``stop``,
    given the records a step reached, names those not to walk through (their own
    edges to ``root``'s side are kept). ``former``: over the edges of bases
    replaced at revalidation too (what each record ever rested on).

    Breadth-first over the edge index; the cost follows the size of the subgraph.
    """
    found: dict[tuple[str, str, str], None] = {}
    for wanted, near, far in ((ancestors, "child_id", 0), (descendants, "parent_id", 1)):
        if not wanted:
            continue
        seen = {root}
        frontier = [root]
        while frontier:
            nxt: list[str] = []
            for row in _edges_where(c, d, near, frontier, position, former):
                found.setdefault(row, None)
                if row[far] not in seen:
                    seen.add(row[far])
                    nxt.append(row[far])
            if stop is not None and nxt:
                ends = stop(nxt)
                nxt = [rid for rid in nxt if rid not in ends]
            frontier = nxt
    return list(found)


def ancestors_among(
    c: Cursor, d: Dialect, root: str, wanted: Set[str], position: int | None = None
) -> set[str]:
    """Which of ``wanted`` are ancestors of ``root`` (over declared and observed
    edges, now or after ``position``): breadth-first up from ``root``, stopping as
    soon as every one of them is found, so a cause that is a near ancestor costs
    the few levels above ``root``, not the whole of its ancestry."""
    found: set[str] = set()
    seen = {root}
    frontier = [root]
    while frontier and len(found) < len(wanted):
        nxt: list[str] = []
        for parent, _, _ in _edges_where(c, d, "child_id", frontier, position):
            if parent in wanted:
                found.add(parent)
            if parent not in seen:
                seen.add(parent)
                nxt.append(parent)
        frontier = nxt
    return found


def edges_into(
    c: Cursor, d: Dialect, ids: Sequence[str], position: int | None = None, former: bool = False
) -> list[tuple[str, str, str]]:
    """(parent, child, edge) rows whose child is one of ``ids``, wherever the parent
    is, now or after ``position`` (``former``: replaced bases' too)."""
    return _edges_where(c, d, "child_id", list(ids), position, former)


def basis_since(c: Cursor, d: Dialect, child: str, position: int | None = None) -> int | None:
    """The log position from which ``child``'s dependencies hold, now or right after
    ``position`` (None if it has none)."""
    if position is None:
        c.execute(
            d.q("SELECT MAX(from_pos) AS p FROM {t}pl_edges WHERE child_id=? AND to_pos IS NULL"),
            (child,),
        )
    else:
        c.execute(
            d.q(
                f"SELECT MAX(from_pos) AS p FROM {{t}}pl_edges WHERE child_id=? AND {AS_OF_FILTER}"
            ),
            (child, position, position),
        )
    row = c.fetchone()
    return None if row is None or row["p"] is None else int(row["p"])


def basis_changed_at(c: Cursor, d: Dialect, child: str, position: int | None = None) -> int | None:
    """The newest log position (up to ``position``; None: now) at which ``child``'s
    dependencies were given or replaced, also by none (None if it never had any):
    unlike :func:`basis_since`, a basis made empty still has a position."""
    upto = "" if position is None else " AND from_pos <= ?"
    closed = "to_pos IS NOT NULL" + ("" if position is None else " AND to_pos <= ?")
    c.execute(
        d.q(
            f"SELECT MAX(from_pos) AS f, MAX(CASE WHEN {closed} THEN to_pos END) AS t "
            f"FROM {{t}}pl_edges WHERE child_id=?{upto}"
        ),
        (child,) if position is None else (position, child, position),
    )
    row = c.fetchone()
    found = [int(p) for p in (row["f"], row["t"]) if p is not None] if row else []
    return max(found, default=None)
