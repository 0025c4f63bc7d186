"""The review console read as WCAG 2.2 AA asks: labelled controls, headings in order,
landmarks, table headers, titles, announced refusals, a text equivalent of the
dependency picture, contrast of the stylesheet's colours, and pages that reflow
at 320 CSS pixels without scrolling sideways.

The served HTML is parsed with :mod:`html.parser`; the reflow test drives
Debian's ``chromium`` as ``tests/test_serve_browser.py`` does (and skips as it does).
"""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ledger import Kind, Ledger
from ledger.serve import create_app
from tests.serve_support import running
from tests.test_serve_browser import browser  # noqa: F401  (the Chromium fixture)
from tests.test_serve_console import csrf_of

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CSS = (Path(__file__).parent.parent / "ledger" / "serve" / "static" / "console.css").read_text()


@dataclass
class Parsed:
    """What a page offers a reader who does not see it."""

    lang: str | None = None
    title: str = ""
    headings: list[tuple[int, str]] = field(default_factory=list)
    landmarks: list[str] = field(default_factory=list)
    controls: list[dict[str, str]] = field(default_factory=list)
    labels_for: set[str] = field(default_factory=set)
    headers: list[dict[str, str]] = field(default_factory=list)
    named: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out = Parsed()
        self._text: list[tuple[str, list[str]]] = []  # open elements whose text is wanted
        self._label_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "html":
            self.out.lang = a.get("lang")
        if tag in ("main", "nav", "header") or a.get("role") in ("main", "navigation"):
            self.out.landmarks.append(a.get("role") or tag)
        if tag == "label":
            self._label_depth += 1
            if "for" in a:
                self.out.labels_for.add(a["for"])
        if tag in ("input", "select", "textarea") and a.get("type") != "hidden":
            self.out.controls.append({**a, "_tag": tag, "_wrapped": str(self._label_depth > 0)})
        if tag == "th":
            self.out.headers.append(a)
        if "aria-label" in a:
            self.out.named.append((tag, a))
        if tag in ("title", "a", "p") or re.fullmatch(r"h[1-6]", tag):
            self._text.append((tag, []))
            if tag == "a":
                self._href = a.get("href", "")
            if tag == "p":
                self._role = a.get("role", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "label":
            self._label_depth -= 1
        if self._text and self._text[-1][0] == tag:
            _, parts = self._text.pop()
            text = " ".join("".join(parts).split())
            if tag == "title":
                self.out.title = self.out.title or text  # the page's, not an SVG's
            elif tag == "a":
                self.out.links.append((self._href, text))
            elif tag == "p":
                if self._role == "alert":
                    self.out.alerts.append(text)
            else:
                self.out.headings.append((int(tag[1]), text))
            for _, outer in self._text:
                outer.append(text + " ")

    def handle_data(self, data: str) -> None:
        if self._text:
            self._text[-1][1].append(data)


def read(page: str) -> Parsed:
    """A page as parsed for the checks below."""
    reader = _Reader()
    reader.feed(page)
    return reader.out


@dataclass
class Desk:
    """A served ledger: a reviewer's client and the ledger behind it."""

    ledger: Ledger
    app: Any
    token: str

    def signed_in(self) -> TestClient:
        """A client signed in as the reviewer."""
        client = TestClient(self.app, follow_redirects=False)
        csrf = csrf_of(client.get("/").text)
        r = client.post("/signin", data={"token": self.token, "csrf": csrf})
        assert r.status_code == 303
        return client


def _seeded(led: Ledger) -> str:
    """Candidates to review; E2 revoked, X1 → X2 STALE and X2's delivery owing a
    correction; E1 → M1 → R1 accepted, R1 delivered. The reviewer's token."""
    admin = led.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
    admin.grant("reviewer-2", scope="proj-a", roles=["approve", "read"])
    token = admin.issue_token("reviewer")
    agent = led.authenticate(admin.issue_token("agent-1"))
    reviewer = led.authenticate(token)
    second = led.authenticate(admin.issue_token("reviewer-2"))
    agent.capture(scope="proj-a", uri="https://docs.example.test/a", content=b"a", id="E1")
    second.accept("E1")
    agent.propose(
        scope="proj-a", claim_key="api.retry_safe", value=True, kind=Kind.INFERENCE,
        parents=["E1"], id="M1",
    )  # fmt: skip
    second.accept("M1")
    agent.propose(
        scope="proj-a", claim_key="report.weekly", value="on", kind=Kind.REPORT,
        parents=["M1"], id="R1",
    )  # fmt: skip
    second.accept("R1")
    reviewer.deliver("R1", recipient="ops@example.test")
    agent.propose(
        scope="proj-a", claim_key="api.max_retries", value=3, kind=Kind.INFERENCE,
        parents=["E1"], id="M2",
    )  # fmt: skip
    agent.capture(scope="proj-a", uri="https://docs.example.test/b", content=b"b", id="E2")
    second.accept("E2")
    agent.propose(
        scope="proj-a", claim_key="x.y", value=1, kind=Kind.INFERENCE, parents=["E2"], id="X1"
    )
    second.accept("X1")
    agent.propose(
        scope="proj-a",
        claim_key="source:https://docs.example.test/a/very/long/path/without/any/break",
        value=2,
        kind=Kind.INFERENCE,
        parents=["X1"],
        id="X2",
    )
    second.accept("X2")
    reviewer.deliver("X2", recipient="audit@example.test")
    second.revoke("E2", reason="the source changed")
    return token


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as led:
        token = _seeded(led)
        yield Desk(ledger=led, app=create_app(led, mcp_factory=None), token=token)


PAGES = (
    "/",
    "/attention",
    "/records",
    "/records/X2",
    "/records/E2",
    "/records/E1/revoke",
    "/explain",
    "/explain?scope=proj-a&claim_key=api.retry_safe",
    "/records?as_of_position=3",
    "/attention?scope=proj-a&list=stale&after=X1&page=2",
)


def test_every_page_has_a_language_landmarks_ordered_headings_and_labelled_controls(
    desk: Desk,
) -> None:
    client = desk.signed_in()
    titles = {}
    for path in PAGES:
        r = client.get(path)
        assert r.status_code == 200, path
        page = read(r.text)
        assert page.lang == "en", path
        assert "main" in page.landmarks and "nav" in page.landmarks, (path, page.landmarks)
        levels = [level for level, _ in page.headings]
        assert levels[0] == 1 and levels.count(1) == 1, (path, page.headings)
        for before, after in itertools.pairwise(levels):
            assert after <= before + 1, f"{path}: heading skips from h{before} to h{after}"
        for control in page.controls:
            named = (
                control.get("id") in page.labels_for
                or control["_wrapped"] == "True"
                or control.get("aria-label")
            )
            assert named, f"{path}: a {control['_tag']} named {control.get('name')} has no label"
        if "<table" in r.text:
            assert page.headers, path
        for th in page.headers:
            assert th.get("scope") in ("col", "row"), f"{path}: a <th> without scope"
        titles[path.split("?")[0]] = page.title
    # One title per page, each naming the page.
    assert len(set(titles.values())) == len(titles), titles


def test_names_are_given_only_where_they_are_read(desk: Desk) -> None:
    """An aria-label on a paragraph or a plain span is not announced."""
    client = desk.signed_in()
    for path in PAGES:
        for tag, attrs in read(client.get(path).text).named:
            assert tag not in ("p", "span", "div") or attrs.get("role") in (
                "group",
                "region",
                "img",
            ), f"{path}: aria-label on a <{tag}> with no role is not announced"
    page = read(client.get("/records/X2").text)
    assert ("div", {"class": "badges", "role": "group", "aria-label": "Status and validity"}) in [
        (t, a) for t, a in page.named
    ]


def test_a_refused_token_says_error_in_the_page_title_and_an_alert(desk: Desk) -> None:
    client = TestClient(desk.app, follow_redirects=False)
    r = client.post("/signin", data={"token": "plt_wrong", "csrf": csrf_of(client.get("/").text)})
    page = read(r.text)
    assert page.title == "Error: Sign in · provledger"
    assert page.alerts == ["That token is unknown, revoked or expired."]
    # Without a refusal the title is the page's own.
    assert read(client.get("/").text).title == "Sign in · provledger"


def test_the_dependency_picture_is_also_given_as_text_with_what_each_record_depends_on(
    desk: Desk,
) -> None:
    r = desk.signed_in().get("/records/X2")
    assert 'role="img" aria-label="X2 and its ancestors and descendants' in r.text
    # its node links are left out of the keyboard's path (the table below has them)
    svg = r.text[r.text.index("<svg") : r.text.index("</svg>")]
    links = re.findall(r"<a [^>]*>", svg)
    assert links and all('tabindex="-1"' in a for a in links), links
    table = r.text[r.text.index("Records in the dependency graph") :]
    table = table[: table.index("</table>")]
    assert '<th scope="col">Depends on</th>' in table
    rows = {
        m.group(1): re.sub(r"<[^>]+>", "", m.group(0))
        for m in re.finditer(r'<tr><td><a href="/records/(\w+)".*?</tr>', table, re.S)
    }
    assert set(rows) == {"E2", "X1", "X2"}
    assert rows["X2"].rstrip().endswith("X1")
    assert rows["X1"].rstrip().endswith("E2")
    assert rows["E2"].rstrip().endswith("—")


def test_the_revocation_preview_says_what_happens_and_that_it_is_not_undone(desk: Desk) -> None:
    text = " ".join(
        re.sub(r"<[^>]+>", " ", desk.signed_in().get("/records/E1/revoke").text).split()
    )
    assert "Revoking it marks it REVOKED and every record that depends on it STALE" in text
    assert "it cannot be undone: a REVOKED record stays revoked" in text
    assert "each STALE record stays STALE until an approver revalidates it" in text
    # The records listed to go STALE show their status now, said as such.
    assert "M1 now ACCEPTED" in text


def test_row_links_name_the_record_they_open(desk: Desk) -> None:
    links = read(desk.signed_in().get("/attention").text).links
    reviews = [text for _, text in links if text.startswith("Review ") and text != "Review queue"]
    assert reviews == ["Review X1", "Review X2"]


def _focused(page: str) -> list[str]:
    """The elements a page gives the focus to as it opens (``autofocus``)."""
    return re.findall(r"<(?:p|input|textarea)\b[^>]*\bautofocus\b[^>]*>", page)


def test_what_a_decision_did_takes_the_focus_on_the_page_after_it(desk: Desk) -> None:
    client = desk.signed_in()
    csrf = csrf_of(client.get("/").text)
    # Signed in, the page opens where it starts (its first stop: Skip to content)
    assert _focused(client.get("/").text) == []
    # After an acceptance, its message takes the focus, and is announced as a status
    client.post("/records/M2/accept", data={"csrf": csrf, "next": "/"})
    [focused] = _focused(client.get("/").text)
    assert focused == '<p class="flash ok" role="status" id="result" tabindex="-1" autofocus>'
    # ... and after a refusal that is about no field, the refusal does (an alert)
    client.post("/records/M1/reject", data={"csrf": csrf, "reason": "x", "next": "/records/M1"})
    page = client.get("/records/M1").text
    [focused] = _focused(page)
    assert 'role="alert" id="result" tabindex="-1" autofocus' in focused
    # ... while a refusal about a field leaves the focus to that field, marked
    client.post("/records/X2/revalidate", data={"csrf": csrf, "note": "x" * 1025})
    [focused] = _focused(client.get("/records/X2").text)
    assert focused.startswith('<textarea id="rv-note"') and 'aria-invalid="true"' in focused


def test_the_record_list_is_a_table_to_screen_readers_however_it_is_laid_out(
    desk: Desk,
) -> None:
    page = desk.signed_in().get("/records").text
    table = page[page.index("<table") : page.index("</table>")]
    # (a narrow screen lays each row out as a card: the roles keep it a table)
    assert '<table class="cards" role="table">' in table
    rows = re.findall(r"<tr\b[^>]*>", table)
    assert rows and all('role="row"' in row for row in rows)
    cells = re.findall(r"<t[dh]\b[^>]*>", table)
    assert all('role="cell"' in c or 'role="columnheader"' in c for c in cells), cells


# -- colours ---------------------------------------------------------------------------------


def _luminance(colour: str) -> float:
    h = colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)

    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(int(h[i : i + 2], 16) / 255) for i in (0, 2, 4))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two sRGB colours."""
    x, y = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (x + 0.05) / (y + 0.05)


def _var(name: str) -> str:
    found = re.search(rf"--{name}:\s*(#[0-9a-fA-F]{{3,6}})", CSS)
    assert found is not None, name
    return found.group(1)


def _rule(selector: str) -> str:
    found = re.search(re.escape(selector) + r"\s*\{([^}]*)\}", CSS)
    assert found is not None, selector
    return found.group(1)


def _colour(body: str, prop: str) -> str:
    found = re.search(rf"(?<![-\w]){prop}:[^;]*?(#[0-9a-fA-F]{{3,6}}|var\(--([\w-]+)\))", body)
    assert found is not None, (prop, body)
    return found.group(1) if found.group(2) is None else _var(found.group(2))


#: The light backgrounds text and controls sit on: the page, cards, the as-of bar
#: (plain and viewing the past), evidence boxes, flashes.
LIGHT = ("#ffffff", "#f5f7fa", "#e8edf3", "#fff4d6", "#f3f6fa", "#e8f5e9", "#fdecea")
HEADER = "#17324f"


def test_every_status_badge_reads_at_4_5_to_1() -> None:
    badges = re.findall(r"((?:\.b-[\w]+,?\s*)+)\{([^}]*)\}", CSS)
    assert len(badges) >= 7
    for selectors, body in badges:
        ink, ground = _colour(body, "color"), _colour(body, "background")
        assert contrast(ink, ground) >= 4.5, (selectors.strip(), ink, ground)


def test_the_focus_ring_and_field_borders_stand_out_at_3_to_1() -> None:
    """WCAG 1.4.11: the focus indicator and a field's edge against what is next to them."""
    ring = _colour(_rule(":focus-visible"), "outline")
    for ground in LIGHT:
        assert contrast(ring, ground) >= 3, f"focus ring {ring} on {ground}"
    in_header = _colour(_rule(".top :focus-visible"), "outline-color")
    assert contrast(in_header, HEADER) >= 3
    edge = _colour(_rule("input, select, textarea"), "border")
    for ground in LIGHT[:4]:
        assert contrast(edge, ground) >= 3, f"field border {edge} on {ground}"


def test_text_colours_read_at_4_5_to_1() -> None:
    for ink in (_var("ink"), _var("muted"), _var("accent"), _var("danger")):
        for ground in LIGHT:
            assert contrast(ink, ground) >= 4.5, (ink, ground)
    assert contrast(_var("accent-ink"), _var("accent")) >= 4.5
    assert contrast("#ffffff", _var("ok")) >= 4.5  # the Accept button


# -- reflow, in the browser ------------------------------------------------------------------


def test_pages_reflow_at_320_pixels_with_tables_and_details_open(
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """WCAG 1.4.10: at 320 CSS pixels a page does not scroll sideways; a wide table
    scrolls within its own box."""
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as led:
        token = _seeded(led)
        with running(create_app(led, mcp_factory=None)) as base:
            page = browser.new_page(viewport={"width": 320, "height": 700})
            page.goto(base + "/")
            page.get_by_label("Token").fill(token)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("heading", name="Review queue").wait_for()
            for path in ("/attention", "/records/E1/revoke", "/records/X2", "/records/R1"):
                page.goto(base + path)
                page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
                overflow = page.evaluate(
                    "document.documentElement.scrollWidth - document.documentElement.clientWidth"
                )
                assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at 320px"


def test_a_hidden_dependency_says_what_it_is_in_text_not_only_a_tooltip(desk: Desk) -> None:
    # Given a record in proj-a resting on one in a scope the reviewer cannot see
    admin = desk.ledger.admin()
    admin.grant("agent-1", scope="proj-x", roles=["propose", "read"])
    agent = desk.ledger.authenticate(admin.issue_token("agent-1"))
    agent.propose(scope="proj-x", claim_key="secret", value=1, kind=Kind.FACT, id="S1")
    agent.propose(scope="proj-a", claim_key="uses.secret", value=2, kind=Kind.FACT,
                  parents=["S1"], id="U1")  # fmt: skip
    # Then its page says so in words a screen reader reads (a tooltip is out of
    # reach of the keyboard and of touch)
    page = desk.signed_in().get("/records/U1").text
    assert "&lt;hidden&gt;" in page
    assert '<span class="visually-hidden"> (a record in a scope you cannot see)</span>' in page
    # (the form tokens are random letters and digits: "S1" may be among them)
    shown = re.sub(r'name="csrf" value="[^"]*"', "", page)
    assert "S1" not in shown and "secret" not in shown.replace("uses.secret", "")


def _names(page: str, tag: str) -> list[str]:
    """The accessible names of the page's ``tag`` elements named by their content."""
    found = re.findall(rf"<{tag}\b[^>]*>(.*?)</{tag}>", page, re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split()) for text in found]


def test_each_cards_and_outbox_items_controls_name_what_they_act_on(desk: Desk) -> None:
    # Given two candidates in the queue and two deliveries owing a correction
    admin = desk.ledger.admin()
    agent = desk.ledger.authenticate(admin.issue_token("agent-1"))
    agent.propose(scope="proj-a", claim_key="api.timeout_ms", value=500, kind=Kind.FACT, id="M3")
    desk.ledger.authenticate(admin.issue_token("reviewer-2")).revoke("M1", reason="changed")
    client = desk.signed_in()
    # Then every card's Accept, Reject… and Reject names its record, told apart by it
    queue = client.get("/").text
    buttons, summaries = _names(queue, "button"), _names(queue, "summary")
    for rid in ("M2", "M3"):
        assert f"Accept {rid}" in buttons and f"Reject {rid}" in buttons, buttons
        assert f"Accept with this note {rid}" in buttons, buttons
        assert f"Reject… {rid}" in summaries and f"Accept with a note… {rid}" in summaries
    accepts = [b for b in buttons if b.startswith("Accept")]
    assert len(accepts) == len(set(accepts)) == 4
    assert "Accept" not in buttons and "Reject…" not in summaries
    # And every item of the outbox names the delivery it corrects
    issues = [b for b in _names(client.get("/attention").text, "button") if "correction" in b]
    assert sorted(issues) == [
        "Issue correction to audit@example.test for X2",
        "Issue correction to ops@example.test for R1",
    ]


OPEN_DETAILS = "document.querySelectorAll('details').forEach(d => d.open = true)"
SIDEWAYS = "document.documentElement.scrollWidth - document.documentElement.clientWidth"


def test_names_of_128_characters_wrap_inside_their_cards(
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Ids, scopes and principals may run to 128 characters without a space: at a
    desktop's width and a phone's, they wrap inside the box that holds them."""
    scope, agent_name, rid = "s-" + "x" * 126, "a-" + "y" * 126, "r-" + "z" * 126
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as led:
        admin = led.admin()
        admin.grant(agent_name, scope=scope, roles=["propose", "read"])
        admin.grant("reviewer", scope=scope, roles=["approve", "read", "audit"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
        token = admin.issue_token("reviewer")
        agent = led.authenticate(admin.issue_token(agent_name))
        agent.propose(scope=scope, claim_key="k." + "w" * 200, value=1, kind=Kind.FACT, id=rid)
        admin.grant("second", scope=scope, roles=["approve", "read", "deliver"])
        second = led.authenticate(admin.issue_token("second"))
        second.accept(rid)
        second.deliver(rid, recipient="r-" + "q" * 100 + "@x.test")
        with running(create_app(led, mcp_factory=None)) as base:
            for width in (1280, 375):
                page = browser.new_page(viewport={"width": width, "height": 800})
                page.goto(base + "/")
                page.get_by_label("Token").fill(token)
                page.get_by_role("button", name="Sign in").click()
                page.get_by_role("heading", name="Review queue").wait_for()
                explain = f"/explain?scope={scope}&claim_key=k.{'w' * 200}"
                for path in ("/", f"/records/{rid}", f"/records?scope={scope}", explain):
                    page.goto(base + path)
                    page.evaluate(OPEN_DETAILS)
                    overflow = page.evaluate(SIDEWAYS)
                    assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at {width}px"
                    # Nothing of a card reaches past its right edge (but inside a box
                    # that scrolls or clips: a table's, a graph's)
                    out = page.evaluate(
                        """() => [...document.querySelectorAll('.card')].flatMap(card => {
                          const edge = card.getBoundingClientRect().right;
                          const boxed = e => {
                            for (let a = e.parentElement; a && a !== card; a = a.parentElement)
                              if (getComputedStyle(a).overflowX !== 'visible') return true;
                            return false;
                          };
                          return [...card.querySelectorAll('*')]
                            .filter(e => e.getBoundingClientRect().right > edge + 1)
                            .filter(e => !boxed(e))
                            .map(e => e.tagName + ' ' + e.textContent.slice(0, 30));
                        })"""
                    )
                    assert out == [], f"{path} at {width}px: {out[:5]}"
                    if width == 1280:  # at a desktop's width no table needs to scroll
                        wide = page.evaluate(
                            "[...document.querySelectorAll('table')].map(t => "
                            "t.scrollWidth - t.parentElement.clientWidth).filter(d => d > 1)"
                        )
                        assert wide == [], f"{path}: a table wider than its box by {wide}px"
                page.close()
