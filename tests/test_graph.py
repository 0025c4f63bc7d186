"""Dependency-graph pictures: the right nodes, edges and status colours.

The scenario (scope proj-a unless noted; M is the record drawn)::

    E2 (ACCEPTED) ──> R0 (ACCEPTED, delivered) ──> C (CANDIDATE) ──┐
    E2 - - observed - - - - - - - - - - - - - - - - - - - - - - - >├──> M (STALE) ──> D (STALE)
    E1 (REVOKED) ─────────────────────────────────────────────────>│
    X (REJECTED) ─────────────────────────────────────────────────>│
    P (proj-b, invisible to the reviewer) ────────────────────────>┘
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger import Kind, Ledger, Session
from ledger.cli import main
from ledger.diagram import EXPIRED_FILL, STATUS_COLOURS, to_dot, to_mermaid
from ledger.domain import Status
from ledger.errors import GraphTooLargeError, InvalidInputError, RenderError, UnknownRecordError
from ledger.graph import (
    collect,
    dot_available,
    draw,
    render,
    revocations,
)

from .conftest import World


@dataclass
class Scene:
    url: str
    ledger: Ledger
    reviewer: Session
    reviewer_token: str
    before_revocation: int


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    url = f"sqlite:///{tmp_path / 'graph.db'}"
    led = Ledger.open(url)
    admin = led.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("agent-1", scope="proj-b", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
    admin.grant("owner-b", scope="proj-b", roles=["approve", "read"])
    agent = led.authenticate(admin.issue_token("agent-1"))
    token = admin.issue_token("reviewer")
    reviewer = led.authenticate(token)
    owner_b = led.authenticate(admin.issue_token("owner-b"))

    # Given two accepted sources, a delivered report R0 on E2 and a candidate C on R0
    agent.capture(scope="proj-a", uri="https://x.test/one", content=b"one", id="E1")
    agent.capture(scope="proj-a", uri="https://x.test/two", content=b"two", id="E2")
    reviewer.accept("E1")
    reviewer.accept("E2")
    agent.propose(
        scope="proj-a", claim_key="r0", value="ok", kind=Kind.REPORT, parents=["E2"], id="R0"
    )
    reviewer.accept("R0")
    reviewer.deliver("R0", recipient="ops@x.test")
    agent.propose(
        scope="proj-a", claim_key="c", value=1, kind=Kind.INFERENCE, parents=["R0"], id="C"
    )
    agent.propose(scope="proj-a", claim_key="x", value=2, kind=Kind.INFERENCE, id="X")
    agent.capture(scope="proj-b", uri="https://b.test", content=b"b", id="P")
    owner_b.accept("P")
    # And M proposed in a run that read E2 without declaring it, and D built on M
    with agent.run("task-1") as run:
        run.read(scope="proj-a", claim_key="source:https://x.test/two")
        run.propose(
            scope="proj-a",
            claim_key="m",
            value=True,
            kind=Kind.PLAN,
            parents=["E1", "C", "X", "P"],
            id="M",
        )
    agent.propose(scope="proj-a", claim_key="d", value="r", kind=Kind.REPORT, parents=["M"], id="D")
    reviewer.reject("X", reason="no basis")
    before = led.position
    # When E1 is revoked
    reviewer.revoke("E1", reason="doc changed")
    yield Scene(url, led, reviewer, token, before)
    led.close()


NODE = re.compile(r'^\s+"(?P<id>[^"]+)" \[(?P<attrs>.*)\];$', re.M)
EDGE = re.compile(r'^\s+"(?P<parent>[^"]+)" -> "(?P<child>[^"]+)"(?: \[(?P<attrs>.*)\])?;$', re.M)
ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,\s]+)')


def _attrs(text: str | None) -> dict[str, str]:
    return {k: v.strip('"') for k, v in ATTR.findall(text or "")}


def _parse(dot: str) -> tuple[dict[str, dict[str, str]], dict[tuple[str, str], dict[str, str]]]:
    nodes = {m["id"]: _attrs(m["attrs"]) for m in NODE.finditer(dot)}
    edges = {(m["parent"], m["child"]): _attrs(m["attrs"]) for m in EDGE.finditer(dot)}
    return nodes, edges


def test_graph_dot_shows_the_right_nodes_edges_and_status_colours(scene: Scene) -> None:
    # When the reviewer draws M with its ancestors and descendants
    result = CliRunner().invoke(
        main,
        ["graph", "M", "--format", "dot", "--url", scene.url, "--token", scene.reviewer_token],
    )
    assert result.exit_code == 0, result.output
    nodes, edges = _parse(result.stdout)

    # Then every visible record is a node; P (proj-b) is the one <hidden> placeholder
    assert set(nodes) == {"M", "E1", "E2", "R0", "C", "X", "D", "<hidden>"}
    assert nodes["<hidden>"]["style"] == "rounded,dashed"
    assert set(edges) == {
        ("<hidden>", "M"),
        ("E1", "M"),
        ("C", "M"),
        ("X", "M"),
        ("E2", "M"),
        ("E2", "R0"),
        ("R0", "C"),
        ("M", "D"),
    }
    # And each node is coloured by its status
    expected = {
        "E1": Status.REVOKED,
        "M": Status.STALE,
        "D": Status.STALE,
        "C": Status.CANDIDATE,
        "X": Status.REJECTED,
        "E2": Status.ACCEPTED,
        "R0": Status.ACCEPTED,
    }
    for rid, status in expected.items():
        fill, border = STATUS_COLOURS[status]
        assert nodes[rid]["fillcolor"] == fill, rid
        assert nodes[rid]["color"] == border, rid
        assert f"{status} / " in nodes[rid]["label"], rid
    # And the four main statuses differ at a glance
    fills = {STATUS_COLOURS[s][0] for s in Status}
    assert len(fills) == len(Status)
    # And labels carry id, kind, validity and the stale cause
    assert nodes["M"]["label"] == "M\\n[plan]\\nSTALE / NEEDS_REVALIDATION\\n(E1 revoked)"
    # And a revoked record says why, who revoked it and when
    assert re.fullmatch(
        r"E1\\n\[evidence\]\\nREVOKED / INVALID\\nreason: [^\\]+\\nby reviewer at \S+",
        nodes["E1"]["label"],
    ), nodes["E1"]["label"]
    assert nodes["E2"]["label"] == "E2\\n[evidence]\\nACCEPTED / VALID"
    # And the observed edge is dashed, declared ones are solid
    assert edges[("E2", "M")] == {"style": "dashed", "label": "observed"}
    assert edges[("E1", "M")] == {}
    # And the delivered report is marked; the record drawn has a thick border
    assert nodes["R0"]["peripheries"] == "2" and "DELIVERED" in nodes["R0"]["label"]
    assert "peripheries" not in nodes["C"]
    assert nodes["M"]["penwidth"] == "3" and "penwidth" not in nodes["E1"]


def test_ancestors_and_descendants_can_be_drawn_separately(scene: Scene) -> None:
    up = collect(scene.reviewer, "M", ancestors=True)
    assert {n.id for n in up.nodes} == {"M", "E1", "E2", "R0", "C", "X"}
    down = collect(scene.reviewer, "E1", descendants=True)
    assert {n.id for n in down.nodes} == {"E1", "M", "D"}
    assert {(e.parent, e.child) for e in down.edges} == {("E1", "M"), ("M", "D")}
    alone = collect(scene.reviewer, "M")
    assert [n.id for n in alone.nodes] == ["M"] and alone.edges == ()


def test_a_reader_of_both_scopes_sees_the_cross_scope_parent(scene: Scene) -> None:
    admin = scene.ledger.admin()
    admin.grant("reviewer", scope="proj-b", roles=["read"])
    sub = collect(scene.reviewer, "M", ancestors=True)
    assert "P" in {n.id for n in sub.nodes}
    assert ("P", "M") in {(e.parent, e.child) for e in sub.edges}


def test_a_graph_over_the_callers_limit_is_refused_counting_only_records_it_may_see(
    scene: Scene,
) -> None:
    # Given M's graph: seven records the reviewer may see, and P in proj-b it may not
    whole = collect(scene.reviewer, "M", ancestors=True, descendants=True, limit=7)
    assert len(whole.nodes) == 7 and whole.shows_hidden

    # When one fewer is allowed, the graph is refused naming the record, its size and the limit
    with pytest.raises(GraphTooLargeError) as info:
        collect(scene.reviewer, "M", ancestors=True, descendants=True, limit=6)
    assert (info.value.count, info.value.limit) == (7, 6)
    assert str(info.value) == "the graph of 'M' has 7 records, more than the 6 allowed"

    # And a scope's records are counted the same way
    with pytest.raises(
        GraphTooLargeError, match="scope 'proj-a' with what its records rest on has 7 records"
    ):
        collect(scene.reviewer, scope="proj-a", limit=1)


def test_mermaid_has_the_same_nodes_classes_and_dashed_observed_edge(scene: Scene) -> None:
    text = to_mermaid(collect(scene.reviewer, "M", ancestors=True, descendants=True))
    assert text.startswith("flowchart TD\n")
    names = dict(re.findall(r"^\s+(n\d+)\[\[?\"([^<\"]+)<br/>", text, flags=re.M))
    ids = {v: k for k, v in names.items()}
    assert set(ids) == {"M", "E1", "E2", "R0", "C", "X", "D"}
    assert re.search(rf"^\s+{ids['E1']}\[\"E1<br/>.*\"\]:::revoked$", text, flags=re.M)
    assert re.search(rf"^\s+{ids['C']}\[.*:::candidate$", text, flags=re.M)
    assert re.search(
        rf"^\s+{ids['R0']}\[\[\"R0<br/>.*DELIVERED\"\]\]:::accepted$", text, flags=re.M
    )
    assert f"{ids['E2']} -. observed .-> {ids['M']}" in text
    assert f"{ids['E1']} --> {ids['M']}" in text
    assert f"style {ids['M']} stroke-width:3px" in text
    for status, (fill, border) in STATUS_COLOURS.items():
        assert f"classDef {status.lower()} fill:{fill},stroke:{border}" in text


def test_svg_is_rendered_by_graphviz_or_falls_back_to_dot(scene: Scene) -> None:
    picture = draw(scene.reviewer, "M", ancestors=True, descendants=True, format="svg")
    if shutil.which("dot"):
        assert dot_available() and not picture.fell_back and picture.note is None
        svg = picture.data.decode()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg
        assert f'fill="{STATUS_COLOURS[Status.REVOKED][0]}"' in svg
        assert f'fill="{STATUS_COLOURS[Status.CANDIDATE][0]}"' in svg
        assert "stroke-dasharray" in svg  # the observed edge
    else:  # pragma: no cover - only where Graphviz is not installed
        assert picture.fell_back and picture.format == "dot"


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_a_render_that_runs_out_of_time_is_stopped_and_named() -> None:
    # A layout Graphviz needs seconds for (a dense graph of 600 records)
    edges = " ".join(
        f"n{i} -> n{(i * 7 + 3) % 600}; n{i} -> n{(i * 13 + 5) % 600};" for i in range(600)
    )
    with pytest.raises(RenderError, match=r"did not draw the SVG within 0.2 s; draw fewer records"):
        render("digraph { " + edges + " }", "svg", timeout=0.2)


def test_png_is_rendered_by_graphviz_or_falls_back_to_dot(scene: Scene) -> None:
    picture = draw(scene.reviewer, "E1", descendants=True, format="png")
    if shutil.which("dot"):
        assert picture.format == "png" and picture.data.startswith(b"\x89PNG\r\n\x1a\n")
    else:  # pragma: no cover - only where Graphviz is not installed
        assert picture.fell_back and picture.data.startswith(b"digraph")


@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_without_the_dot_program_pictures_fall_back_to_dot_text_with_a_clear_note(
    scene: Scene, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    empty = tmp_path / "no-programs"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert not dot_available()
    picture = draw(scene.reviewer, "E1", descendants=True, format=fmt)
    assert picture.fell_back and picture.requested == fmt and picture.format == "dot"
    assert picture.data.decode() == to_dot(
        picture.subgraph, revocations(scene.reviewer, picture.subgraph)
    )
    assert picture.note is not None
    assert "`dot` program is not installed" in picture.note
    assert "apt-get install graphviz" in picture.note and "--format mermaid" in picture.note


def test_a_past_position_is_drawn_as_it_was(scene: Scene) -> None:
    then = scene.reviewer.as_of(position=scene.before_revocation)
    nodes, _ = _parse(to_dot(collect(then, "E1", descendants=True)))
    assert set(nodes) == {"E1", "M", "D"}
    assert nodes["E1"]["fillcolor"] == STATUS_COLOURS[Status.ACCEPTED][0]
    assert nodes["M"]["fillcolor"] == STATUS_COLOURS[Status.CANDIDATE][0]
    result = CliRunner().invoke(
        main,
        [
            "as-of",
            "--position",
            str(scene.before_revocation),
            "graph",
            "E1",
            "--format",
            "dot",
            "--url",
            scene.url,
            "--token",
            scene.reviewer_token,
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"(log position {scene.before_revocation})" in result.stdout


def test_a_whole_scope_can_be_collected(scene: Scene) -> None:
    sub = collect(scene.reviewer, scope="proj-a")
    assert {n.id for n in sub.nodes} == {"E1", "E2", "R0", "C", "X", "M", "D"}
    assert ("E2", "M", "observed") in {(e.parent, e.child, e.edge) for e in sub.edges}


def test_a_scope_or_whole_graph_shows_what_rests_on_a_hidden_record_as_a_walk_does(
    scene: Scene,
) -> None:
    # Given M, in proj-a, resting on P in proj-b, which the reviewer may not see:
    # a walk from M draws P as the placeholder (SPEC 13.1)
    walk = collect(scene.reviewer, "M", ancestors=True)
    assert ("<hidden>", "M") in {(e.parent, e.child) for e in walk.edges}

    # Then so do the scope's and the whole ledger's pictures: M is not drawn as
    # resting on less than it does, and P is not named
    for sub in (collect(scene.reviewer, scope="proj-a"), collect(scene.reviewer)):
        assert ("<hidden>", "M", "declared") in {(e.parent, e.child, e.edge) for e in sub.edges}
        assert sub.shows_hidden and "P" not in {n.id for n in sub.nodes}

    # And once the reviewer may read proj-b, proj-a's picture draws P itself
    scene.ledger.admin().grant("reviewer", scope="proj-b", roles=["read"])
    sub = collect(scene.reviewer, scope="proj-a")
    assert "P" in {n.id for n in sub.nodes} and not sub.shows_hidden
    assert ("P", "M") in {(e.parent, e.child) for e in sub.edges}
    # and counts it among what it draws, saying so
    with pytest.raises(GraphTooLargeError) as refused:
        collect(scene.reviewer, scope="proj-a", limit=7)
    assert str(refused.value) == (
        "scope 'proj-a' with what its records rest on has 8 records, more than the 7 allowed"
    )
    assert sub.title.startswith("records in scope proj-a and what they rest on")


def test_unknown_records_and_formats_are_refused(scene: Scene) -> None:
    with pytest.raises(UnknownRecordError, match="graph refused: record 'P' is unknown"):
        draw(scene.reviewer, "P", format="dot")  # exists, but in a scope it cannot see
    with pytest.raises(InvalidInputError, match="graph format 'gif' is not one of"):
        draw(scene.reviewer, "M", format="gif")


def test_the_title_and_tooltips_say_what_is_drawn(scene: Scene) -> None:
    dot = to_dot(collect(scene.reviewer, "E1", descendants=True))
    assert f'label="E1 and its descendants (log position {scene.ledger.position})"' in dot
    nodes, _ = _parse(dot)
    assert nodes["M"]["tooltip"] == "proj-a/m = true\\nreason: doc changed"
    assert nodes["E1"]["tooltip"].startswith("proj-a/source:https://x.test/one = ")


def test_the_subgraph_queries_work_on_every_backend(world: World) -> None:
    # Given E1 -> M1 (declared) and M1 read in a run by M2 (observed), on each backend
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test", content=b"x", id="E1")
    reviewer.accept("E1")
    agent.propose(scope="proj-a", claim_key="m1", value=1, kind=Kind.FACT, parents=["E1"], id="M1")
    reviewer.accept("M1")
    with agent.run("t") as run:
        run.get("M1")
        run.propose(scope="proj-a", claim_key="m2", value=2, kind=Kind.PLAN, id="M2")
    before = world.ledger.position
    reviewer.revoke("E1", reason="gone")

    # Then the lineage, the scope listing and a past position all come back right
    down = collect(reviewer, "E1", descendants=True)
    assert {(e.parent, e.child, e.edge) for e in down.edges} == {
        ("E1", "M1", "declared"),
        ("M1", "M2", "observed"),
    }
    assert {n.id: n.status for n in down.nodes} == {
        "E1": Status.REVOKED,
        "M1": Status.STALE,
        "M2": Status.STALE,
    }
    assert {n.id for n in collect(reviewer, "M2", ancestors=True).nodes} == {"E1", "M1", "M2"}
    assert {n.id for n in collect(reviewer, scope="proj-a").nodes} == {"E1", "M1", "M2"}
    then = collect(reviewer.as_of(position=before), "E1", descendants=True)
    assert {n.status for n in then.nodes} == {Status.ACCEPTED, Status.CANDIDATE}


def test_a_picture_tells_each_stale_cause_blocking_or_not_as_the_record_itself_does(
    world: World,
) -> None:
    # Given M2 on M1 and E2, M1 on E1; E1 revoked (both STALE), M1 re-based on E3
    # (E1 no longer under M2), then E2 revoked (under M2)
    agent, reviewer = world.agent, world.reviewer
    for rid in ("E1", "E2", "E3"):
        agent.propose(scope="proj-a", claim_key=rid.lower(), value=1, kind=Kind.FACT, id=rid)
        reviewer.accept(rid)
    agent.propose(scope="proj-a", claim_key="m1", value=1, kind=Kind.FACT, parents=["E1"], id="M1")
    reviewer.accept("M1")
    agent.propose(
        scope="proj-a", claim_key="m2", value=2, kind=Kind.FACT, parents=["M1", "E2"], id="M2"
    )
    reviewer.accept("M2")
    reviewer.revoke("E1", reason="gone")
    reviewer.revalidate("M1", note="re-based", parents=["E3"])
    reviewer.revoke("E2", reason="gone too")

    # When the picture around M2 and the whole scope are collected
    for sub in (collect(reviewer, "M2", ancestors=True), collect(reviewer, scope="proj-a")):
        # Then each record's causes, and whether each still blocks, are its own view's
        for node in sub.nodes:
            assert node.stale_causes == reviewer.get(node.id).stale_causes, node.id
    causes = {x.cause: x.blocking for x in reviewer.get("M2").stale_causes}
    assert causes == {"E1": False, "E2": True}


def test_a_record_called_legend_and_text_reading_like_an_entity_are_drawn_as_they_are(
    world: World,
) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="legend")
    reviewer.accept("legend")
    agent.propose(
        scope="proj-a", claim_key="m", value=2, kind=Kind.FACT, parents=["legend"], id="M1"
    )
    reviewer.accept("M1")
    reviewer.revoke("legend", reason='said #quot;42#quot; not "42" &lt;')
    sub = collect(reviewer, "legend", descendants=True)

    # DOT: the record keeps its node, apart from the legend's, and its edge
    dot = to_dot(sub)
    assert '"legend" -> "M1"' in dot and "_legend [shape=plaintext" in dot
    assert re.search(r'^\s*"legend" \[', dot, re.MULTILINE)
    # Mermaid: stored text that reads like an entity stays text; a quote is one
    mermaid = to_mermaid(sub, revocations(reviewer, sub))
    assert "#35;quot;42#35;quot; not #quot;42#quot;" in mermaid
    assert "#amp;lt;" in mermaid and "&lt;" not in mermaid  # its labels are HTML


def test_a_mermaid_directive_in_stored_text_is_drawn_not_obeyed(world: World) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="E1")
    reviewer.accept("E1")
    directive = "%%{init: {'themeCSS': 'rect{fill:green!important}'}}%%"
    reviewer.revoke("E1", reason=f"see {directive}")
    sub = collect(reviewer, "E1")
    mermaid = to_mermaid(sub, revocations(reviewer, sub))
    # Mermaid reads a directive anywhere: no "%" of stored text reaches it as one
    assert "%" not in mermaid
    assert "reason: see #37;#37;{init:" in mermaid


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_svg_text_and_tooltips_are_what_is_stored_and_always_xml(world: World) -> None:
    from lxml import etree

    agent, reviewer = world.agent, world.reviewer
    # Graphviz reads \N (node name), \G (graph name) and a backslash in a tooltip
    # twice; XML has no place for U+FFFE
    claim = 'k "q" \\ \\N \\G caf\u00e9 \ufffe'
    value = {"v": 'x"y\\z'}
    agent.propose(scope="proj-a", claim_key=claim, value=value, kind=Kind.FACT, id="A")
    reviewer.accept("A")
    reviewer.revoke("A", reason="why \\N\\G \\ \uffff end")
    svg = draw(reviewer, "A", format="svg").data
    root = etree.fromstring(svg)  # well-formed XML
    [tooltip] = [
        a.get("{http://www.w3.org/1999/xlink}title")
        for a in root.iter("{http://www.w3.org/2000/svg}a")
        if a.get("{http://www.w3.org/1999/xlink}title", "").startswith("proj-a/")
    ]
    # (a key holding a backslash is shown quoted, as everywhere: key_text)
    shown = json.dumps(claim)
    assert tooltip == (f'proj-a/{shown} = {{"v": "x\\"y\\\\z"}}\nreason: why \\N\\G \\ \\uFFFF end')


def test_a_new_version_is_joined_to_the_record_it_supersedes_by_a_dotted_edge(
    world: World,
) -> None:
    # Given V1 with a plan P1 on it, and V2 accepted as a new version of V1
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="api.timeout", value=30, kind=Kind.FACT, id="V1")
    reviewer.accept("V1")
    agent.propose(
        scope="proj-a", claim_key="plan", value="wait", kind=Kind.PLAN, parents=["V1"], id="P1"
    )
    reviewer.accept("P1")
    agent.propose(
        scope="proj-a", claim_key="api.timeout", value=60, kind=Kind.FACT, supersedes="V1", id="V2"
    )
    reviewer.accept("V2")

    # When the whole scope is drawn
    sub = collect(reviewer, scope="proj-a")
    nodes, edges = _parse(to_dot(sub))

    # Then V1 → V2 is a dotted, labelled "supersedes" edge, not a dependency
    assert [(e.parent, e.child, e.edge) for e in sub.supersessions] == [("V1", "V2", "supersedes")]
    assert {(e.parent, e.child) for e in sub.edges} == {("V1", "P1")}
    border = STATUS_COLOURS[Status.SUPERSEDED][1]
    assert edges[("V1", "V2")] == {
        "style": "dotted",
        "color": border,
        "fontcolor": border,
        "label": "supersedes",
    }
    assert edges[("V1", "P1")] == {}
    # And the labels say who replaced V1 and why P1 is stale
    assert nodes["V1"]["label"] == "V1\\n[fact]\\nSUPERSEDED / INVALID\\n(by V2)"
    assert nodes["P1"]["label"] == "P1\\n[plan]\\nSTALE / NEEDS_REVALIDATION\\n(V1 superseded)"
    assert nodes["V1"]["fillcolor"] == STATUS_COLOURS[Status.SUPERSEDED][0]
    # And Mermaid draws it as a thick labelled edge between the same two nodes
    mermaid = to_mermaid(sub)
    names = dict(re.findall(r"^  (n\d+)\[\"(\w+)<br/>", mermaid, re.M))
    ids = {rid: name for name, rid in names.items()}
    assert f"  {ids['V1']} == supersedes ==> {ids['V2']}" in mermaid.splitlines()


def test_the_supersedes_edge_is_drawn_only_when_both_versions_are_in_the_picture(
    world: World,
) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="V1")
    reviewer.accept("V1")
    agent.propose(scope="proj-a", claim_key="k", value=2, kind=Kind.FACT, supersedes="V1", id="V2")
    # V2 is still a candidate: the edge shows the proposed new version
    assert [(e.parent, e.child) for e in collect(reviewer, scope="proj-a").supersessions] == [
        ("V1", "V2")
    ]
    # Drawing V2 alone (or V1 with its descendants, which V2 is not) leaves it out
    assert collect(reviewer, "V2", ancestors=True).supersessions == ()
    down = collect(reviewer, "V1", descendants=True)
    assert [n.id for n in down.nodes] == ["V1"] and down.supersessions == ()
    assert "supersedes" not in to_dot(down)


#: A DOT quoted string, with its escapes.
QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
#: The longest quoted string Graphviz's ``dot`` reads, in bytes (longer: no picture at all).
DOT_STRING_LIMIT = 16_384


def test_a_huge_or_escape_heavy_text_is_cut_in_labels_and_tooltips_and_still_drawn(
    world: World,
) -> None:
    # Given, resting on B, records whose values are a string near the 1 MiB limit,
    # 200,000 "&" (each "&amp;" in DOT) and 200,000 backslashes (eight each in a
    # tooltip), and B revoked with a reason of 1,024 "&"
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="base", value=1, kind=Kind.FACT, id="B")
    reviewer.accept("B")
    values = {"N": "n" * 1_000_000, "AMP": "&" * 200_000, "BS": "\\" * 200_000}
    for rid, value in values.items():
        agent.propose(
            scope="proj-a", claim_key=f"k.{rid}", value=value, kind=Kind.INFERENCE,
            parents=["B"], id=rid,
        )  # fmt: skip
    reviewer.revoke("B", reason="&" * 1024)
    sub = collect(reviewer, "B", descendants=True)
    revoked = revocations(reviewer, sub)

    # When the graph is written as DOT and as Mermaid
    dot = to_dot(sub, revoked)
    mermaid = to_mermaid(sub, revoked)

    # Then no DOT string comes near Graphviz's limit for one
    assert max(len(q.encode()) for q in QUOTED.findall(dot)) < DOT_STRING_LIMIT // 2
    # And a tooltip shows the start of the value and of the reason, each length told
    nodes, _ = _parse(dot)
    tooltip = nodes["N"]["tooltip"]
    assert tooltip.startswith('proj-a/k.N = \\"' + "n" * 499 + "… (1,000,002 characters)\\n")
    assert tooltip.endswith("reason: " + "&amp;" * 200 + "… (1,024 characters)")
    # And the revoked record's label and its Mermaid node show the reason cut the same way
    label = nodes["B"]["label"]
    assert "&amp;" * 200 + "…" in label and "&amp;" * 201 not in label
    assert "#amp;" * 200 + "…" in mermaid and "#amp;" * 201 not in mermaid
    # And Graphviz draws it, as the command line asks (provledger graph B --descendants)
    if dot_available():
        drawn = draw(reviewer, "B", descendants=True, format="svg")
        assert drawn.format == "svg" and b"</svg>" in drawn.data


def test_a_record_past_its_expiry_is_drawn_expired_not_as_usable(world: World) -> None:
    from datetime import timedelta

    # Given S accepted until 13:00, R (accepted) resting on it, and a candidate C
    hour = world.clock.now + timedelta(hours=1)
    world.agent.propose(
        scope="proj-a", claim_key="s", value=1, kind=Kind.FACT, expires=hour, id="S"
    )
    world.reviewer.accept("S")
    world.agent.propose(
        scope="proj-a", claim_key="r", value=2, kind=Kind.INFERENCE, parents=["S"], id="R"
    )
    world.reviewer.accept("R")
    world.agent.propose(
        scope="proj-a", claim_key="c", value=3, kind=Kind.INFERENCE, parents=["S"], id="C"
    )
    before = to_dot(collect(world.reviewer, "S", descendants=True))
    nodes, _ = _parse(before)
    assert nodes["S"]["fillcolor"] == STATUS_COLOURS[Status.ACCEPTED][0]
    assert "expired" not in before
    # When 13:00 has passed
    world.clock.advance(hours=2)
    sub = collect(world.reviewer, "S", descendants=True)
    dot = to_dot(sub)
    nodes, _ = _parse(dot)
    # Then S, R (its expiry inherited) and C are pale and dashed, and say when they expired
    for rid in ("S", "R", "C"):
        assert nodes[rid]["fillcolor"] == EXPIRED_FILL, rid
        assert nodes[rid]["style"] == "rounded,filled,dashed", rid
        assert "\\nexpired 2026-01-01T13:00:00+00:00" in nodes[rid]["label"], rid
    assert nodes["S"]["color"] == STATUS_COLOURS[Status.ACCEPTED][1]
    assert nodes["C"]["color"] == STATUS_COLOURS[Status.CANDIDATE][1]
    assert "ACCEPTED, expired" in dot and "CANDIDATE, expired" in dot
    assert "pale, dashed border: past its expiry, not usable" in dot
    mermaid = to_mermaid(sub)
    assert ":::accepted_expired" in mermaid and ":::candidate_expired" in mermaid
    assert "classDef accepted_expired fill:#fafafa" in mermaid
    assert "stroke-dasharray:5 5" in mermaid
    # And as of a past moment it is drawn as it was then: as of the last position
    # (written at 12:00) unexpired, as of 13:30 expired
    then = world.reviewer.as_of(position=world.ledger.position)
    assert "expired" not in to_dot(collect(then, "S"))
    later = world.reviewer.as_of(time=world.clock.now - timedelta(minutes=30))
    assert "\\nexpired 2026-01-01T13:00:00+00:00" in to_dot(collect(later, "S"))
