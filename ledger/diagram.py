"""The text of a dependency picture: Graphviz DOT (:func:`to_dot`) and Mermaid
(:func:`to_mermaid`) for a :class:`ledger.graph.Subgraph`.

Each node shows the record's id, kind, status and validity; the fill colour is
the status (:data:`STATUS_COLOURS`), observed dependencies are dashed edges,
a new version is joined to the record it supersedes by a dotted ``supersedes``
edge (old → new) when both are drawn, delivered records get a double border and
a ``DELIVERED`` line, and the record the picture is about gets a thick border. A
record past its expiry (its own or one it inherits) at the picture's instant is
drawn pale with a dashed border and an ``expired`` line, whatever its status: it
is not usable then, though its status may read ACCEPTED. A label or tooltip
shows at most :data:`TEXT_SHOWN` characters of a stored text and
:data:`VALUE_SHOWN` of a value's JSON, the rest cut and its length told.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from ledger.domain import Status
from ledger.validation import key_text
from ledger.values import HIDDEN, RecordView

if TYPE_CHECKING:
    from ledger.graph import RevokedBy, Subgraph

#: (fill, border) colour per status: REVOKED red, STALE orange, ACCEPTED green,
#: CANDIDATE yellow, REJECTED grey.
STATUS_COLOURS: dict[Status, tuple[str, str]] = {
    Status.ACCEPTED: ("#c8e6c9", "#2e7d32"),
    Status.CANDIDATE: ("#fff59d", "#f9a825"),
    Status.STALE: ("#ffcc80", "#e65100"),
    Status.REVOKED: ("#ef9a9a", "#b71c1c"),
    Status.REJECTED: ("#e0e0e0", "#616161"),
    Status.SUPERSEDED: ("#bbdefb", "#1565c0"),
}


def _wrap(text: str, width: int = 36) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line] if line else lines


#: The most characters of a stored text (a claim key, a reason, a principal's name)
#: that a picture's label or tooltip shows, and of a value's JSON (``VALUE_SHOWN``);
#: a longer one is cut, its length told. Graphviz refuses a quoted string over
#: 16 KB (escaped and in UTF-8, up to 9 bytes a character): one large value in a
#: graph failed the whole picture.
TEXT_SHOWN = 200
VALUE_SHOWN = 500


def _cut(text: str, limit: int = TEXT_SHOWN) -> str:
    """``text`` whole when at most ``limit`` characters long, else its first ``limit``,
    an ellipsis and its length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


#: The fill of a record drawn past its expiry (its border keeps its status's colour).
EXPIRED_FILL = "#fafafa"
#: The statuses whose colour would say a record is usable or may be accepted: one
#: past its expiry is drawn :data:`EXPIRED_FILL`, border dashed, instead.
_EXPIRING = (Status.ACCEPTED, Status.CANDIDATE)


def expired(node: RecordView, at: datetime | None) -> bool:
    """Whether ``node`` is drawn expired: ACCEPTED or a CANDIDATE, past its expiry
    (its own or one it inherits) at ``at``, the picture's instant."""
    due = node.effective_expires
    return at is not None and due is not None and due <= at and node.status in _EXPIRING


def _lines(
    node: RecordView, revoked: RevokedBy | None = None, at: datetime | None = None
) -> list[str]:
    lines = [node.id, f"[{node.kind}]", f"{node.status} / {node.validity}"]
    if expired(node, at) and node.effective_expires is not None:
        lines.append(f"expired {node.effective_expires.isoformat(timespec='seconds')}")
    if revoked is not None:
        lines += _wrap(f"reason: {_cut(revoked.reason)}")
        when = revoked.at.isoformat(timespec="seconds")
        lines.append(f"by {_cut(revoked.actor)} at {when}")
    if node.status == Status.STALE and node.cause:
        verb = "revoked" if node.cause_superseded_by is None else "superseded"
        lines.append(f"({node.cause} {verb})")
    if node.superseded_by is not None:
        lines.append(f"(by {node.superseded_by})")
    if node.deliveries:
        lines.append(
            "DELIVERED" + (f" x{len(node.deliveries)}" if len(node.deliveries) > 1 else "")
        )
    return lines


def _tooltip(node: RecordView) -> str:
    value = json.dumps(node.value, default=repr, ensure_ascii=False)
    parts = [f"{node.scope}/{_cut(key_text(node.claim_key))} = {_cut(value, VALUE_SHOWN)}"]
    if node.reason:
        parts.append(f"reason: {_cut(node.reason)}")
    return "\n".join(parts)


#: A character XML 1.0 cannot hold (JSON, DOT and PROV-N can): C0 controls but tab
#: and line ends, and the noncharacters U+FFFE and U+FFFF.
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _dot_quote(text: str, *, tooltip: bool = False) -> str:
    """``text`` as a DOT string drawn as it is stored. Graphviz reads ``\\N``,
    ``\\G`` … in a label once and in a tooltip twice, so a tooltip's backslashes
    are doubled twice; a character XML cannot hold is written out (``\\uFFFE``), as
    an SVG holding it would be no XML at all."""
    text = NOT_XML.sub(lambda found: f"\\u{ord(found.group()):04X}", text)
    # "&" first: Graphviz reads "&amp;", "&lt;", "&#60;" … in a string as the character
    # they name, so stored text holding one would be drawn as another text.
    text = text.replace("&", "&amp;").replace("\\", "\\\\\\\\" if tooltip else "\\\\")
    return '"' + text.replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot_attrs(attrs: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{k}={v}" for k, v in attrs)


_QUOTED_SUPERSEDED_BORDER = _dot_quote(STATUS_COLOURS[Status.SUPERSEDED][1])


#: The placeholder node for records outside the caller's scopes (white, dashed).
_HIDDEN_FILL, _HIDDEN_BORDER = "#ffffff", "#9e9e9e"
_HIDDEN_DOT = (
    ("label", _dot_quote(f"{HIDDEN}\noutside your scopes")),
    ("style", '"rounded,dashed"'),
    ("color", _dot_quote(_HIDDEN_BORDER)),
    ("fontcolor", _dot_quote(_HIDDEN_BORDER)),
)

#: DOT attributes of the edge from a superseded record to its new version.
_SUPERSEDES_DOT = (
    ("style", "dotted"),
    ("color", _QUOTED_SUPERSEDED_BORDER),
    ("fontcolor", _QUOTED_SUPERSEDED_BORDER),
    ("label", '"supersedes"'),
)


def _expired_statuses(sub: Subgraph) -> list[Status]:
    """The statuses of the records ``sub`` draws expired, in legend order."""
    return [s for s in _EXPIRING if any(n.status == s and expired(n, sub.at) for n in sub.nodes)]


def _legend_dot(sub: Subgraph) -> list[str]:
    """A legend node: the colour of each status drawn, and what the line styles mean."""
    statuses = [s for s in STATUS_COLOURS if any(n.status == s for n in sub.nodes)]
    rows = [
        f'<TR><TD BGCOLOR="{STATUS_COLOURS[s][0]}" COLOR="{STATUS_COLOURS[s][1]}">{s}</TD></TR>'
        for s in statuses
    ]
    rows += [
        f'<TR><TD BGCOLOR="{EXPIRED_FILL}" COLOR="{STATUS_COLOURS[s][1]}">{s}, expired</TD></TR>'
        for s in _expired_statuses(sub)
    ]
    notes = ["thick border: the record asked about"]
    if _expired_statuses(sub):
        notes.append("pale, dashed border: past its expiry, not usable")
    if any(n.deliveries for n in sub.nodes):
        notes.append("double border: delivered")
    if any(e.edge == "observed" for e in sub.edges):
        notes.append("dashed edge: observed at run time")
    if sub.supersessions:
        notes.append("dotted edge: new version")
    if sub.shows_hidden:
        notes.append(f"{html.escape(HIDDEN)}: records outside your scopes")
    rows += [f"<TR><TD>{note}</TD></TR>" for note in notes]
    table = '<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="2">' + "".join(rows) + "</TABLE>"
    return [
        "  subgraph cluster_legend {",
        '    label="legend"; fontsize=10; color="#9e9e9e";',
        # Named as no record id can be (one starts with a letter or digit): a record
        # called "legend" keeps its own node.
        f"    _legend [shape=plaintext, style=solid, fontsize=10, label=<{table}>];",
        "  }",
    ]


def to_dot(sub: Subgraph, revoked: Mapping[str, RevokedBy] | None = None) -> str:
    """Graphviz DOT source: parent → child, fill colour by status, observed edges
    dashed, old version → new version dotted and labelled ``supersedes``, a legend,
    and on REVOKED records (``revoked``) the reason, the revoker and the time."""
    revoked = revoked or {}
    out = [
        "digraph provledger {",
        f"  graph [rankdir=TB, labelloc=t, fontname=Helvetica, label={_dot_quote(sub.title)}];",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica];',
        "  edge [fontname=Helvetica, fontsize=10];",
    ]
    for node in sub.nodes:
        fill, border = STATUS_COLOURS[node.status]
        if expired(node, sub.at):
            fill = EXPIRED_FILL
        attrs = [
            ("label", _dot_quote("\n".join(_lines(node, revoked.get(node.id), sub.at)))),
            ("fillcolor", _dot_quote(fill)),
            ("color", _dot_quote(border)),
            ("tooltip", _dot_quote(_tooltip(node), tooltip=True)),
        ]
        if expired(node, sub.at):
            attrs.append(("style", '"rounded,filled,dashed"'))
        if node.deliveries:
            attrs.append(("peripheries", "2"))
        if node.id == sub.root:
            attrs.append(("penwidth", "3"))
        out.append(f"  {_dot_quote(node.id)} [{_dot_attrs(attrs)}];")
    if sub.shows_hidden:
        out.append(f"  {_dot_quote(HIDDEN)} [{_dot_attrs(_HIDDEN_DOT)}];")
    for e in sub.edges:
        attrs = [("style", "dashed"), ("label", '"observed"')] if e.edge == "observed" else []
        suffix = f" [{_dot_attrs(attrs)}]" if attrs else ""
        out.append(f"  {_dot_quote(e.parent)} -> {_dot_quote(e.child)}{suffix};")
    for e in sub.supersessions:
        out.append(
            f"  {_dot_quote(e.parent)} -> {_dot_quote(e.child)} [{_dot_attrs(_SUPERSEDES_DOT)}];"
        )
    out += _legend_dot(sub)
    out.append("}")
    return "\n".join(out) + "\n"


def _mermaid_text(text: str) -> str:
    # "#" first: stored text reading "#quot;" must not become a quote mark; "&" too,
    # as Mermaid's labels are HTML, where "&lt;" would be drawn as "<"; "%", as
    # Mermaid obeys a "%%{init: …}%%" directive anywhere, labels included.
    text = text.replace("#", "#35;").replace("&", "#amp;").replace("%", "#37;")
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


#: The edges Mermaid draws in one diagram by default (its ``maxEdges``).
MERMAID_EDGES = 500


def to_mermaid(sub: Subgraph, revoked: Mapping[str, RevokedBy] | None = None) -> str:
    """A Mermaid flowchart: the same nodes, colours (classes), dashed observed edges
    and thick ``supersedes`` edges (Mermaid has no dotted style apart from dashed),
    a legend of the statuses drawn, and the revocation of REVOKED records."""
    revoked = revoked or {}
    names = {node.id: f"n{i}" for i, node in enumerate(sub.nodes)}
    out = ["flowchart TD"]
    if sub.shows_hidden:
        names[HIDDEN] = "hidden"
        out.append(f'  hidden["{_mermaid_text(HIDDEN)}"]:::hidden')
        out.append(f"  classDef hidden fill:{_HIDDEN_FILL},stroke:{_HIDDEN_BORDER},color:#000")
    for node in sub.nodes:
        lines = _lines(node, revoked.get(node.id), sub.at)
        label = "<br/>".join(_mermaid_text(line) for line in lines)
        # A delivered record gets the double-bordered "subroutine" shape.
        opening, closing = ('[["', '"]]') if node.deliveries else ('["', '"]')
        drawn_as = node.status.lower() + ("_expired" if expired(node, sub.at) else "")
        out.append(f"  {names[node.id]}{opening}{label}{closing}:::{drawn_as}")
    for e in sub.edges:
        arrow = "-. observed .->" if e.edge == "observed" else "-->"
        out.append(f"  {names[e.parent]} {arrow} {names[e.child]}")
    for e in sub.supersessions:
        out.append(f"  {names[e.parent]} == supersedes ==> {names[e.child]}")
    for status, (fill, border) in STATUS_COLOURS.items():
        out.append(f"  classDef {status.lower()} fill:{fill},stroke:{border},color:#000")
    for status in _expired_statuses(sub):
        border = STATUS_COLOURS[status][1]
        out.append(
            f"  classDef {status.lower()}_expired fill:{EXPIRED_FILL},stroke:{border},"
            "stroke-dasharray:5 5,color:#000"
        )
    if sub.root in names:
        out.append(f"  style {names[sub.root]} stroke-width:3px")
    drawn = [s for s in STATUS_COLOURS if any(n.status == s for n in sub.nodes)]
    out.append("  subgraph legend [legend]")
    out += [f'    legend_{s.lower()}["{s}"]:::{s.lower()}' for s in drawn]
    out += [
        f'    legend_{s.lower()}_expired["{s}, expired"]:::{s.lower()}_expired'
        for s in _expired_statuses(sub)
    ]
    out.append("  end")
    return "\n".join(out) + "\n"
