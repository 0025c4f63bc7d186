"""The record page's dependency picture: inline SVG, coloured as the CLI draws it.

The subgraph comes from :func:`ledger.graph.collect` and the DOT source from
:func:`ledger.diagram.to_dot` (so the colours, dashed observed edges and double
borders of delivered records are the CLI's); each node links to its record
page. A graph of more than :data:`MAX_NODES` records is summarised: the record,
its direct parents and children are drawn, the rest counted by status. A graph of
more than :data:`ledger.graph.MAX_SERVED_NODES` records is neither gathered nor
drawn: the page says how many there are and how to draw them on the command line.
Where Graphviz is missing, fails or runs out of time, the page says so instead of
the picture and still lists the records. A picture wider or taller than its box
opens with the record's own node in the middle of the box (:attr:`Picture.here`).
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from markupsafe import Markup

from ledger import Session
from ledger.diagram import to_dot
from ledger.errors import GraphTooLargeError, RenderError
from ledger.graph import (
    MAX_SERVED_NODES,
    RENDER_TIMEOUT,
    Subgraph,
    collect,
    dot_available,
    render,
    revocations,
)
from ledger.serve.pages import controls_written_out
from ledger.values import RecordView

#: Pictures with more records than this are summarised.
MAX_NODES = 40


@dataclass(frozen=True)
class Picture:
    """What the record page shows of the dependency graph."""

    svg: Markup | None
    note: str | None
    drawn: tuple[RecordView, ...]
    left_out: dict[str, int]
    records: tuple[RecordView, ...]
    edges: int
    #: Where the record's own node is drawn: its centre, in points from the top
    #: left corner of the picture (None: not found). The page marks it there, and
    #: its box opens scrolled to the mark (a wide graph's record may be drawn far
    #: to the right of where the box would open).
    here: tuple[float, float] | None = None


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def summarise(sub: Subgraph, limit: int = MAX_NODES) -> tuple[Subgraph, dict[str, int]]:
    """``sub`` cut to the root and its direct neighbours when it has over ``limit`` records;
    the records left out, counted by status."""
    if len(sub.nodes) <= limit or sub.root is None:
        return sub, {}
    near = {sub.root}
    for e in sub.edges:
        if e.child == sub.root:
            near.add(e.parent)
        if e.parent == sub.root:
            near.add(e.child)
    ordered = [n for n in sub.nodes if n.id == sub.root] + [
        n for n in sub.nodes if n.id in near and n.id != sub.root
    ]
    kept = {n.id for n in ordered[:limit]}
    left = Counter(str(n.status) for n in sub.nodes if n.id not in kept)
    small = replace(
        sub,
        nodes=tuple(n for n in sub.nodes if n.id in kept),
        edges=tuple(e for e in sub.edges if e.parent in kept and e.child in kept),
        title=f"{sub.title}: {len(kept)} of {len(sub.nodes)} records drawn",
    )
    return small, dict(sorted(left.items()))


def with_links(source: str, sub: Subgraph, link: Callable[[str], str]) -> str:
    """DOT source whose nodes link to their record pages."""
    for node in sub.nodes:
        head = f"  {_quote(node.id)} ["
        source = source.replace(head, f'{head}URL={_quote(link(node.id))}, target="_top", ', 1)
    return source


def svg_inline(data: bytes, label: str) -> Markup:
    """Graphviz's SVG made fit to sit inside an HTML page, labelled for screen readers."""
    text = data.decode("utf-8")
    text = text[text.index("<svg") :]
    text = text.replace(
        "<svg ", f'<svg role="img" aria-label="{Markup.escape(label)}" class="graph" ', 1
    )
    # An image's contents are hidden from screen readers: its node links would be
    # unnamed stops for the keyboard. They stay for the mouse; the page lists the
    # same records, linked, as text.
    text = text.replace("<a ", '<a tabindex="-1" ')
    # Graphviz escapes every label and attribute it writes into the SVG; direction
    # controls in a label or tooltip are written out, as everywhere on the pages.
    return Markup(controls_written_out(text, markup=True))


#: A node of Graphviz's SVG (``<g id="node3" class="node"><title>M1</title>``).
_NODE = re.compile(r'<g id="[^"]*" class="node">\s*<title>([^<]*)</title>')
#: The corners of a node's shape: the coordinate pairs of its paths and polygons.
_POINT = re.compile(r"(-?\d+(?:\.\d+)?),(-?\d+(?:\.\d+)?)")
_SHAPE = re.compile(r' (?:d|points)="([^"]*)"')
_ELLIPSE = re.compile(r'<ellipse [^>]*cx="(-?[\d.]+)" cy="(-?[\d.]+)" rx="([\d.]+)" ry="([\d.]+)"')
_SIZE = re.compile(r'<svg [^>]*width="([\d.]+)pt" height="([\d.]+)pt"\s+viewBox="([-\d. ]+)"')
_TRANSFORM = re.compile(
    r'class="graph" transform="scale\(([\d.]+) ([\d.]+)\) rotate\(0\) '
    r'translate\((-?[\d.]+) (-?[\d.]+)\)"'
)


def node_centre(svg: str, node_id: str) -> tuple[float, float] | None:
    """The centre of the node ``node_id`` in Graphviz's SVG ``svg``, in points from
    the picture's top left corner; None when it is not found there."""
    size, transform = _SIZE.search(svg), _TRANSFORM.search(svg)
    if size is None or transform is None:
        return None
    for found in _NODE.finditer(svg):
        if html.unescape(found.group(1)) != node_id:
            continue
        end = svg.find("</g>\n</g>", found.end())
        shape = svg[found.end() : end if end >= 0 else None]
        xs: list[float] = []
        ys: list[float] = []
        for drawn in _SHAPE.findall(shape):
            for x, y in _POINT.findall(drawn):
                xs.append(float(x))
                ys.append(float(y))
        for cx, cy, rx, ry in _ELLIPSE.findall(shape):
            xs += [float(cx) - float(rx), float(cx) + float(rx)]
            ys += [float(cy) - float(ry), float(cy) + float(ry)]
        if not xs:
            return None
        # Graphviz draws in its graph's units, placed by the group's transform and
        # shown in the picture's size by its view box.
        width, height = float(size.group(1)), float(size.group(2))
        box = [float(n) for n in size.group(3).split()]
        sx, sy, tx, ty = (float(n) for n in transform.groups())
        if len(box) != 4 or box[2] <= 0 or box[3] <= 0:
            return None
        x = (sx * ((min(xs) + max(xs)) / 2 + tx) - box[0]) * width / box[2]
        y = (sy * ((min(ys) + max(ys)) / 2 + ty) - box[1]) * height / box[3]
        return round(x, 2), round(y, 2)
    return None


def picture(session: Session, record_id: str, link: Callable[[str], str]) -> Picture:
    """The picture of ``record_id`` with its ancestors and descendants.

    Raises:
        UnknownRecordError, AccessDeniedError: as :func:`ledger.graph.collect`.
    """
    try:
        sub = collect(session, record_id, ancestors=True, descendants=True, limit=MAX_SERVED_NODES)
    except GraphTooLargeError as exc:
        too_large = (
            f"This record's graph has {exc.count:,} records, more than the {exc.limit:,} "
            "the console draws or lists. Open a record further along, or draw the whole "
            f"graph from the command line: provledger graph {record_id} --format svg "
            f"--max-nodes {exc.count} -o {record_id}.svg"
        )
        return Picture(svg=None, note=too_large, drawn=(), left_out={}, records=(), edges=0)
    drawn, left_out = summarise(sub)
    note: str | None = None
    svg = None
    here = None
    if dot_available():
        source = with_links(to_dot(drawn, revocations(session, drawn)), drawn, link)
        try:
            svg = svg_inline(render(source, "svg", RENDER_TIMEOUT), drawn.title)
        except RenderError as exc:  # the page and its list of records still stand
            note = f"No picture is drawn: {str(exc).rstrip('.')}."
        else:
            here = node_centre(svg, record_id)
    else:
        note = "Graphviz's dot program is not installed on the server, so no picture is drawn."
    return Picture(
        svg=svg,
        note=note,
        drawn=drawn.nodes,
        left_out=left_out,
        records=sub.nodes,
        edges=len(sub.edges),
        here=here,
    )
