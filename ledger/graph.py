"""Dependency-graph pictures: a record's ancestors and descendants, coloured by status.

:func:`collect` gathers the subgraph a session may see; :mod:`ledger.diagram`'s
:func:`~ledger.diagram.to_dot` and :func:`~ledger.diagram.to_mermaid` turn it into
text (how each record and edge is drawn is told there); :func:`draw` is the one
call the command line makes. SVG and PNG are rendered by Graphviz's ``dot``
program; when ``dot`` is not installed, :func:`draw` falls back to the DOT source
and says so in :attr:`Picture.note`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from ledger.access import Role
from ledger.diagram import MERMAID_EDGES, to_dot, to_mermaid
from ledger.domain import Record, Status
from ledger.errors import GraphTooLargeError, InvalidInputError, RenderBusyError, RenderError
from ledger.reads import record_view
from ledger.session import Session
from ledger.validation import check_id
from ledger.values import HIDDEN, RecordView
from projections import edges as edges_index
from projections import queries as view_queries
from projections import validity as validity_view

#: What :func:`draw` can produce.
FORMATS = ("svg", "png", "dot", "mermaid")

#: The most records a graph sent over the network holds: ``provledger serve``'s
#: ``GET /records/{id}/graph`` in every text format (JSON runs to ~0.5 KB a record)
#: and its console's record page; the MCP tools list at most this many ids. Any
#: reader could otherwise make the server gather and send everything stored
#: beneath a popular record. The command line, on the operator's own machine,
#: draws any size (``provledger graph --max-nodes``).
MAX_SERVED_NODES = 1000

#: What to do where Graphviz's ``dot`` program is missing.
GRAPHVIZ_HINT = (
    "install Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz)"
)


@dataclass(frozen=True)
class Edge:
    """``child`` depends on ``parent``: declared by its proposer, or observed at run
    time; or (``edge="supersedes"``, in :attr:`Subgraph.supersessions` only)
    ``child`` is a new version of ``parent``."""

    parent: str
    child: str
    edge: str  # "declared" | "observed" | "supersedes"


@dataclass(frozen=True)
class Basis:
    """``child`` rested on ``parent`` from log position ``since`` until ``until``
    (None: it still does, or did at the subgraph's position), when a
    revalidation gave it a new basis."""

    parent: str
    child: str
    edge: str  # "declared" | "observed"
    since: int
    until: int | None


@dataclass(frozen=True)
class Subgraph:
    """Records a session may see and the dependency edges between them."""

    root: str | None
    nodes: tuple[RecordView, ...]
    edges: tuple[Edge, ...]
    position: int
    title: str
    #: Old version → new version, for each record proposed to supersede another
    #: when both are among ``nodes`` (not dependencies: kept apart from ``edges``).
    supersessions: tuple[Edge, ...] = ()
    #: With ``former``: every basis each node held, both ends among ``nodes``.
    bases: tuple[Basis, ...] = ()
    #: The instant the records' expiry is judged at (an as-of session's, else now);
    #: one past it is drawn expired (:func:`ledger.diagram.expired`).
    at: datetime | None = None

    @property
    def shows_hidden(self) -> bool:
        """Whether an edge ends at the :data:`~ledger.values.HIDDEN` placeholder (a
        record outside the caller's scopes; the walk does not go through it)."""
        return any(HIDDEN in (e.parent, e.child) for e in self.edges)


@dataclass(frozen=True)
class Picture:
    """What :func:`draw` produced: ``data`` in ``format``.

    ``format`` differs from ``requested`` only on a fallback (SVG or PNG asked
    for, Graphviz's ``dot`` missing); ``note`` then says why and what to do. A
    Mermaid picture with more edges than Mermaid draws by default has a note too.
    """

    requested: str
    format: str
    data: bytes
    subgraph: Subgraph
    note: str | None = None

    @property
    def fell_back(self) -> bool:
        """True when the picture is DOT text because ``dot`` was missing."""
        return self.format != self.requested


def collect(
    session: Session,
    record: str | None = None,
    *,
    scope: str | None = None,
    ancestors: bool = False,
    descendants: bool = False,
    role: Role = Role.READ,
    command: str = "graph",
    former: bool = False,
    limit: int | None = None,
) -> Subgraph:
    """The records ``session`` may see around ``record`` (or in ``scope``, or all).

    With ``record``: that record plus its ancestors and/or descendants over
    declared and observed edges (``former``: also over the bases records held
    before a revalidation gave them new ones, as audits need); ``scope`` with it
    needs ``role`` there too (a caller keeps that scope's part). Without it: every
    record in ``scope``, or in every scope where the principal holds ``role``.
    A drawn record resting on one the principal may not see rests on the one
    ``<hidden>`` placeholder; without ``record``, one it may see in another scope
    is drawn too. Records in scopes where the principal lacks ``role`` are
    otherwise left out, with their edges, as if absent (what rests on a drawn
    record from there is not drawn). An as-of session answers as the ledger did
    at its position.

    Raises:
        UnknownRecordError: ``record`` is unknown or not visible.
        AccessDeniedError: no ``role`` in ``record``'s scope or in ``scope`` (in
            no scope at all, with neither).
    """
    caller = session.caller
    d = caller.engine.dialect
    position = session.position
    allowed: dict[str, bool] = {}
    with caller.reading() as c:

        def may(scope_name: str) -> bool:
            if scope_name not in allowed:
                allowed[scope_name] = role.value in caller.roles(c, scope_name)
            return allowed[scope_name]

        def unshown(reached: list[str]) -> set[str]:
            scopes = caller.engine.scopes_of(c, reached)
            return {rid for rid in reached if rid not in scopes or not may(scopes[rid])}

        if record is not None:
            row = caller.visible(c, record, role, command)
            if scope is not None:  # what is shown is that scope's part of the walk
                caller.require(c, check_id(scope, "scope"), role, command)
            root: str | None = row["record_id"]
            # The walk stops at a record the caller may not see: what lies beyond
            # it is reached only through it, so it is not drawn either.
            rows = edges_index.lineage(
                c,
                d,
                row["record_id"],
                ancestors=ancestors,
                descendants=descendants,
                position=position,
                stop=unshown,
                former=former,
            )
            ids = list(dict.fromkeys([row["record_id"], *(x for e in rows for x in e[:2])]))
        else:
            root = None
            if scope is not None:
                caller.require(c, check_id(scope, "scope"), role, command)
                wanted = [scope]
            else:
                # Across scopes: refused, not answered empty, without the role anywhere.
                caller.require_somewhere(c, role, command)
                wanted = [s for s in view_queries.scopes(c, d, position) if may(s)]
            ids = [rid for s in wanted for rid in view_queries.in_scope(c, d, s, position)]
            rows = edges_index.edges_into(c, d, ids, position, former)
            # What the drawn records rest on outside them: drawn too where the
            # caller may see it (a scope's records resting on another's), else
            # the placeholder below, as on a walk from one record.
            outside = sorted({p for p, _, _ in rows} - set(ids))
            hidden = unshown(outside)
            ids += [p for p in outside if p not in hidden]
        if limit is not None:
            _check_size(caller.engine.scopes_of(c, ids), may, limit, record, scope)
        at = caller.at(None)
        nodes: dict[str, RecordView] = {}
        descendants_of: dict[str, set[str]] = {}

        def below(cause: str) -> set[str]:
            # Once a cause for every record it made STALE (see reads.stale_causes).
            if cause not in descendants_of:
                down = edges_index.lineage(
                    c, d, cause, ancestors=False, descendants=True, position=position
                )
                descendants_of[cause] = {child for _, child, _ in down}
            return descendants_of[cause]

        for rid in ids:
            found = validity_view.current(c, d, rid, position)
            if found is not None and may(found["scope"]):
                nodes[rid] = record_view(caller, c, found, at, below=below)
        # Read in the same transaction as the records: a commit landing meanwhile
        # is in neither (a position read apart from them could hold it).
        now = caller.engine.recorder.max_position(c) if position is None else position
        names = caller.names(c, nodes)
        held = edges_index.bases(c, d, list(nodes), position) if former else []
    # A drawn record resting on one not drawn rests on the one placeholder node;
    # what rests on a drawn record from a scope the caller cannot see is left out
    # (its existence, and when it appeared, are that scope's to know).
    edges = tuple(
        dict.fromkeys(
            Edge(
                parent=names.get(p, p) if p in nodes else HIDDEN, child=names.get(ch, ch), edge=kind
            )
            for p, ch, kind in rows
            if ch in nodes
        )
    )
    drawn = {n.id for n in nodes.values()}
    supersessions = tuple(
        Edge(parent=n.supersedes, child=n.id, edge="supersedes")
        for n in nodes.values()
        if n.supersedes is not None and n.supersedes in drawn
    )
    shown_root = None if root is None else names.get(root, root)
    return Subgraph(
        root=shown_root,
        nodes=tuple(nodes.values()),
        edges=edges,
        position=now,
        title=_title(shown_root, scope, ancestors, descendants, now),
        at=at,
        supersessions=supersessions,
        bases=tuple(
            Basis(names.get(p, p), names.get(ch, ch), kind, since, until)
            for p, ch, kind, since, until in held
            if p in nodes
        ),
    )


def _check_size(
    scopes: Mapping[str, str],
    may: Callable[[str], bool],
    limit: int,
    record: str | None,
    scope: str | None,
) -> None:
    """Refuse a subgraph of more than ``limit`` records the caller may see (records
    it may not see are not counted: their number is their scopes' to know)."""
    count = sum(1 for in_scope in scopes.values() if may(in_scope))
    if count > limit:
        if record is not None:
            what = f"the graph of {record!r}"
        else:
            what = (
                f"scope {scope!r} with what its records rest on"
                if scope is not None
                else "every visible record"
            )
        raise GraphTooLargeError(
            f"{what} has {count} records, more than the {limit} allowed", count, limit
        )


def _title(
    root: str | None, scope: str | None, ancestors: bool, descendants: bool, position: int
) -> str:
    if root is None:
        what = (
            f"records in scope {scope} and what they rest on"
            if scope is not None
            else "every visible record"
        )
    else:
        sides = [n for n, on in (("ancestors", ancestors), ("descendants", descendants)) if on]
        what = f"{root} and its {' and '.join(sides)}" if sides else root
    return f"{what} (log position {position})"


@dataclass(frozen=True)
class RevokedBy:
    """Who revoked a record, when, and why (drawn on REVOKED nodes)."""

    actor: str
    at: datetime
    reason: str


def revocations(session: Session, sub: Subgraph) -> dict[str, RevokedBy]:
    """Who revoked each REVOKED record of ``sub``, when and why, from its events up to
    the subgraph's log position."""
    caller = session.caller
    engine = caller.engine
    found: dict[str, RevokedBy] = {}
    revoked = [node for node in sub.nodes if node.status == Status.REVOKED]
    keys = caller.keys_of(revoked)  # a node shows its id as the caller is shown it
    with caller.reading() as c:
        for node in revoked:
            key = keys[node.id, node.scope]
            row = validity_view.current(c, engine.dialect, key)
            notes = [] if row is None else engine.recorder.record_events(c, row, node.id)
            for note in notes:
                event = engine.projector.decode(note) if note.id <= sub.position else None
                if isinstance(event, Record.Revoked):
                    found[node.id] = RevokedBy(event.actor, event.timestamp, event.reason)
    return found


def dot_available() -> bool:
    """Whether Graphviz's ``dot`` program is on the PATH."""
    return shutil.which("dot") is not None


#: A picture ``provledger serve`` draws (:func:`render` with a timeout) gets ``dot``
#: for ``RENDER_TIMEOUT`` s (then it is killed), has at most ``MAX_DRAWN_EDGES``
#: edges, and waits ``RENDER_WAIT`` s at most for one of ``RENDERS_AT_ONCE`` turns:
#: each holds a core and a thread, and layout time grows much faster than the graph.
#: ``LAYOUT_EFFORT`` caps Graphviz's rounds (long edges make them run for minutes)
#: for a picture of over ``FULL_EFFORT_EDGES`` edges (a smaller one is tidier without).
RENDER_TIMEOUT = 10
MAX_DRAWN_EDGES = 500
RENDERS_AT_ONCE = 2
RENDER_WAIT = 1.0
LAYOUT_EFFORT, FULL_EFFORT_EDGES = ("-Gnslimit=1", "-Gnslimit1=1", "-Gmclimit=0.1"), 100
_turns = threading.BoundedSemaphore(RENDERS_AT_ONCE)
#: An edge statement of DOT source as :func:`to_dot` writes it: ``"a" -> "b"``.
_EDGE = re.compile(r'^\s*"(?:[^"\\]|\\.)*"\s*->', re.MULTILINE)


def check_drawable(sub: Subgraph, limit: int = MAX_DRAWN_EDGES) -> None:
    """Raise GraphTooLargeError (``count`` edges) for a picture of over ``limit`` edges."""
    if (count := len(sub.edges) + len(sub.supersessions)) > limit:
        message = f"the picture has {count} edges, more than the {limit} a server draws"
        raise GraphTooLargeError(message, count, limit)


def render(dot_source: str, format: str, timeout: float | None = None) -> bytes:
    """Render DOT source to ``svg`` or ``png`` bytes with Graphviz's ``dot``;
    ``timeout``: seconds it may take, for a server's picture, bounded as
    :data:`RENDER_TIMEOUT` says (None: as long as it needs, the command line's).

    Raises:
        FileNotFoundError: ``dot`` is not installed.
        RenderError: ``dot`` failed, drew nothing, took longer than ``timeout``,
            or had to shrink a bitmap too large for it (the picture would be
            unreadable); with a ``timeout``, also: the picture has more than
            :data:`MAX_DRAWN_EDGES` edges, or :data:`RENDERS_AT_ONCE` others are
            being drawn and none ended within :data:`RENDER_WAIT` seconds.
    """
    if timeout is None:
        return _render(dot_source, format, None)
    edges = len(_EDGE.findall(dot_source))
    if edges > MAX_DRAWN_EDGES:
        raise RenderError(
            f"the picture has {edges} edges, more than the {MAX_DRAWN_EDGES} a server draws; "
            "get its DOT source (the API's format=dot) or draw it with provledger graph"
        )
    if not _turns.acquire(timeout=RENDER_WAIT):
        raise RenderBusyError(
            f"the server is drawing {RENDERS_AT_ONCE} other pictures, as many as it draws "
            "at once; try again in a few seconds"
        )
    effort = LAYOUT_EFFORT if edges > FULL_EFFORT_EDGES else ()
    try:
        return _render(dot_source, format, timeout, effort)
    finally:
        _turns.release()


def _render(
    dot_source: str, format: str, timeout: float | None, options: Iterable[str] = ()
) -> bytes:
    """:func:`render`'s drawing (``dot`` is killed when ``timeout`` passes)."""
    try:
        done = subprocess.run(
            ["dot", f"-T{format}", *options],
            input=dot_source.encode(),
            capture_output=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise RenderError(
            f"Graphviz's dot did not draw the {format.upper()} within {timeout:g} s; "
            "draw fewer records"
        ) from None
    said = done.stderr.decode("utf-8", "replace").strip()
    last = said.splitlines()[-1] if said else ""
    if done.returncode != 0:
        why = last or f"exit status {done.returncode}"
        raise RenderError(f"Graphviz's dot could not draw the {format.upper()}: {why}")
    if not done.stdout:
        raise RenderError(f"Graphviz's dot drew an empty {format.upper()}: {last or 'no output'}")
    if "too large" in said:
        raise RenderError(
            f"the picture is too large for a {format.upper()} ({last}); "
            "use --format svg or draw fewer records"
        )
    return done.stdout


def draw(
    session: Session,
    record: str,
    *,
    ancestors: bool = False,
    descendants: bool = False,
    format: str = "svg",
) -> Picture:
    """The dependency picture of ``record`` in ``format`` (svg, png, dot, mermaid).

    Neither ``ancestors`` nor ``descendants`` draws just the record. SVG and PNG
    fall back to DOT text (``Picture.note`` says why) when ``dot`` is missing.

    Raises:
        InvalidInputError: an unknown format.
        UnknownRecordError: ``record`` is unknown or not visible.
        AccessDeniedError: no ``read`` role in its scope.
    """
    if format not in FORMATS:
        raise InvalidInputError(f"graph format {format!r} is not one of: {', '.join(FORMATS)}")
    sub = collect(session, record, ancestors=ancestors, descendants=descendants)
    return picture(sub, format, revocations(session, sub))


def picture(sub: Subgraph, format: str, revoked: Mapping[str, RevokedBy] | None = None) -> Picture:
    """``sub`` drawn in ``format`` (see :func:`draw`).

    Raises:
        InvalidInputError: an unknown format.
        RenderError: ``dot`` failed or drew nothing.
    """
    if format not in FORMATS:
        raise InvalidInputError(f"graph format {format!r} is not one of: {', '.join(FORMATS)}")
    if format == "mermaid":
        edges = len(sub.edges) + len(sub.supersessions)
        crowded = None
        if edges > MERMAID_EDGES:
            crowded = (
                f"the picture has {edges:,} edges, and Mermaid draws at most {MERMAID_EDGES} "
                "unless the page showing it raises its maxEdges setting (a diagram cannot); "
                "use --format svg, or draw fewer records"
            )
        return Picture(format, format, to_mermaid(sub, revoked).encode(), sub, note=crowded)
    source = to_dot(sub, revoked)
    if format == "dot":
        return Picture(format, format, source.encode(), sub)
    note = f"Graphviz's `dot` program is not installed, so no {format.upper()} was drawn"
    if dot_available():
        try:
            return Picture(format, format, render(source, format), sub)
        except FileNotFoundError:
            pass
    return Picture(
        format,
        "dot",
        source.encode(),
        sub,
        note=f"{note}: wrote the DOT source instead; {GRAPHVIZ_HINT}, or use --format mermaid",
    )
