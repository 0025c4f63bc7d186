"""The review console in a real browser: Playwright driving Debian's ``chromium``.

A reviewer signs in, sees a candidate in the queue (and their own proposal with
its buttons disabled), accepts it, revokes its evidence after the preview, sees
the record STALE and the correction due, and issues it. Screenshots are saved
as test artefacts (``$PROVLEDGER_ARTEFACTS`` or the test's temporary directory);
with ``PROVLEDGER_DOCS_SCREENSHOTS=docs`` the queue and record page shots are
also copied there (how ``docs/console-*.png`` are made).

Browser downloads are not available, so the browser is the system's
(``$PROVLEDGER_CHROMIUM``, default ``/usr/bin/chromium``). Without it or
without Playwright these tests skip — except on CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import Kind, Ledger
from ledger.serve import create_app
from tests.serve_support import running

CHROMIUM = os.environ.get("PROVLEDGER_CHROMIUM", "/usr/bin/chromium")
ON_CI = os.environ.get("CI", "").lower() == "true"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _unavailable(why: str) -> None:
    if ON_CI:
        pytest.fail(f"browser tests must run on CI: {why}")
    pytest.skip(why)


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright for Python is not installed (pip install playwright)")
    if not Path(CHROMIUM).exists():
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def artefacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("PROVLEDGER_ARTEFACTS") or tmp_path / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[tuple[str, str, Ledger]]:
    """A served SQLite ledger: E1 → M1 → R1 (delivered) accepted, M2 on E1 to review,
    and S1 proposed by the reviewer themself. Yields (base URL, reviewer token, ledger)."""
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant(
            "reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver", "propose"]
        )
        admin.grant("reviewer-2", scope="proj-a", roles=["approve", "read"])
        token = admin.issue_token("reviewer")
        agent = led.authenticate(admin.issue_token("agent-1"))
        reviewer = led.authenticate(token)
        second = led.authenticate(admin.issue_token("reviewer-2"))
        agent.capture(
            scope="proj-a",
            uri="https://docs.example.test/api/retries",
            content=b"POST /orders is idempotent with an Idempotency-Key; retries are safe.",
            id="E1",
        )
        second.accept("E1")
        agent.propose(
            scope="proj-a",
            claim_key="api.orders.retry_safe",
            value=True,
            kind=Kind.INFERENCE,
            parents=["E1"],
            id="M1",
        )
        second.accept("M1")
        agent.propose(
            scope="proj-a",
            claim_key="report.weekly.reliability",
            value={"summary": "Enable automatic retries on POST /orders", "confidence": 0.8},
            kind=Kind.REPORT,
            parents=["M1"],
            id="R1",
        )
        second.accept("R1")
        reviewer.deliver("R1", recipient="ops@example.test")
        agent.propose(
            scope="proj-a",
            claim_key="api.orders.max_retries",
            value=3,
            kind=Kind.INFERENCE,
            parents=["E1"],
            id="M2",
        )
        reviewer.propose(
            scope="proj-a",
            claim_key="team.review.style",
            value="dry-run every migration first",
            kind=Kind.USER_PREFERENCE,
            id="S1",
        )
        with running(create_app(led, mcp_factory=None)) as base:
            yield base, token, led


def _shot(page: Any, artefacts: Path, name: str) -> Path:
    path = artefacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    docs = os.environ.get("PROVLEDGER_DOCS_SCREENSHOTS")
    if docs and name in ("console-queue", "console-record"):
        shutil.copyfile(path, Path(docs) / path.name)
    return path


def test_a_reviewer_does_the_whole_job_in_the_browser(
    browser: Any, desk: tuple[str, str, Ledger], artefacts: Path
) -> None:
    from playwright.sync_api import expect

    base, token, led = desk
    page = browser.new_page(viewport={"width": 1280, "height": 900})

    # Sign in with the token.
    page.goto(base + "/")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Review queue")).to_be_visible()
    expect(page.get_by_text("Signed in as reviewer", exact=True)).to_be_visible()

    # The queue: M2 with its evidence and parent; S1 is the reviewer's own.
    m2 = page.get_by_role("listitem", name="api.orders.max_retries")
    expect(m2.get_by_text("https://docs.example.test/api/retries", exact=True)).to_be_visible()
    expect(m2.get_by_role("link", name="view the captured bytes")).to_be_visible()
    expect(m2.get_by_role("link", name="E1", exact=True)).to_be_visible()
    own = page.get_by_role("listitem", name="team.review.style")
    expect(own.get_by_role("button", name="Accept")).to_be_disabled()
    expect(own.get_by_role("button", name="Reject…")).to_be_disabled()
    expect(own.get_by_text("You proposed this record")).to_be_visible()
    _shot(page, artefacts, "console-queue")

    # Reject asks for a reason (the form opens in place).
    m2.get_by_text("Reject…").click()
    expect(m2.get_by_label("Reason for rejecting M2")).to_be_visible()

    # Accept M2.
    m2.get_by_role("button", name="Accept").click()
    expect(page.get_by_role("status").filter(has_text="Accepted M2.")).to_be_visible()
    expect(page.get_by_role("listitem", name="api.orders.max_retries")).to_have_count(0)

    # Revoke its evidence, after the preview.
    page.goto(base + "/records/E1")
    page.get_by_role("link", name="Revoke…").click()
    expect(page.get_by_role("heading", name="Will be marked STALE (3)")).to_be_visible()
    expect(
        page.get_by_role("heading", name="Deliveries that will owe corrections (1)")
    ).to_be_visible()
    expect(page.get_by_role("cell", name="ops@example.test")).to_be_visible()
    _shot(page, artefacts, "console-revoke-preview")
    page.get_by_label("Reason for revoking E1").fill(
        "the docs page now says retries duplicate orders"
    )
    page.get_by_role("button", name="Confirm revocation").click()
    expect(
        page.get_by_text(
            "Revoked E1; 3 records you can see marked STALE; "
            "1 delivery now owes a correction (see Needs attention)."
        )
    ).to_be_visible()

    # The report is STALE and needs revalidation; the graph links the records.
    page.goto(base + "/records/R1")
    badges = page.get_by_label("Status and validity")
    expect(badges.get_by_text("STALE", exact=True)).to_be_visible()
    expect(badges.get_by_text("NEEDS_REVALIDATION")).to_be_visible()
    expect(page.locator("svg.graph")).to_be_visible()
    expect(
        page.get_by_text("the docs page now says retries duplicate orders").first
    ).to_be_visible()
    # Its delivery says it owes a correction, and leads to the outbox.
    deliveries = page.get_by_role("region", name="Deliveries")
    owed = deliveries.get_by_role("row").filter(has_text="ops@example.test")
    expect(owed.get_by_role("cell").last).to_have_text("yes: issue it in the outbox")
    _shot(page, artefacts, "console-record")

    # The correction is due; issue it.
    owed.get_by_role("link", name="issue it in the outbox").click()
    expect(page.get_by_role("heading", name="Corrections due (1)")).to_be_visible()
    page.get_by_label("Correction note to ops@example.test").fill(
        "Retry advice withdrawn: the source changed. Do not enable automatic retries."
    )
    page.get_by_role("button", name="Issue correction").click()
    expect(page.get_by_role("heading", name="Corrections due (0)")).to_be_visible()
    expect(page.get_by_text("issued for delivery")).to_be_visible()
    _shot(page, artefacts, "console-attention")

    # What the ledger now says, seen from the library.
    reviewer = led.authenticate(token)
    assert reviewer.get("M2").status == "STALE"
    assert reviewer.get("E1").status == "REVOKED"
    assert reviewer.corrections_due() == ()
    [delivery] = reviewer.get("R1").deliveries
    assert delivery.corrections[0].note.startswith("Retry advice withdrawn")
    for name in ("console-queue", "console-revoke-preview", "console-record", "console-attention"):
        assert (artefacts / f"{name}.png").stat().st_size > 10_000


def test_the_console_works_on_a_narrow_screen_and_from_the_keyboard(
    browser: Any, desk: tuple[str, str, Ledger], artefacts: Path
) -> None:
    from playwright.sync_api import expect

    base, token, _led = desk
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(base + "/")
    # The token field has the focus: type and press Enter, no mouse.
    assert page.evaluate("document.activeElement.id") == "token"
    page.keyboard.type(token)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Review queue")).to_be_visible()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    for path in ("/", "/records/R1", "/attention", "/records"):
        page.goto(base + path)
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at 390px"
    page.goto(base + "/")
    _shot(page, artefacts, "console-queue-narrow")


def test_a_refused_correction_keeps_the_note_typed_in_the_browser(
    browser: Any, desk: tuple[str, str, Ledger], artefacts: Path
) -> None:
    from playwright.sync_api import expect

    base, token, led = desk
    led.authenticate(token).revoke("E1", reason="the docs changed")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(base + "/")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()

    # A long note and a mistyped replacement id: the ledger refuses the correction.
    note = "Retry advice withdrawn: the source changed. Do not enable automatic retries."
    page.get_by_role("link", name="Needs attention").click()
    page.get_by_label("Correction note to ops@example.test").fill(note)
    page.get_by_label("Replacement record").fill("R1-typo")
    page.get_by_role("button", name="Issue correction").click()
    expect(page.get_by_role("alert").filter(has_text="replacement 'R1-typo'")).to_be_visible()

    # What was typed is still there: fix the id (clear it) and send again.
    expect(page.get_by_label("Correction note to ops@example.test")).to_have_value(note)
    expect(page.get_by_label("Replacement record")).to_have_value("R1-typo")
    _shot(page, artefacts, "console-correction-refused")
    page.get_by_label("Replacement record").fill("")
    page.get_by_role("button", name="Issue correction").click()
    expect(page.get_by_role("heading", name="Corrections due (0)")).to_be_visible()
    [delivery] = led.authenticate(token).get("R1").deliveries
    assert delivery.corrections[0].note == note


def test_a_refused_as_of_time_keeps_what_was_typed_with_the_focus_on_it(
    browser: Any, desk: tuple[str, str, Ledger]
) -> None:
    from playwright.sync_api import expect

    base, token, _ = desk
    page = _signed_in(browser, base, token, 1280, 900)
    page.get_by_label("or time").fill("last tuesday")
    page.get_by_role("button", name="Browse").click()
    expect(page.get_by_role("alert")).to_contain_text("'last tuesday' is not an ISO 8601")
    field = page.get_by_label("or time")
    expect(field).to_have_value("last tuesday")
    expect(field).to_be_focused()
    expect(field).to_have_attribute("aria-invalid", "true")
    # Fixed in place and sent again: the past page, without retyping the rest
    page.keyboard.press("Control+A")
    page.keyboard.type("2000-01-01T00:00:00Z")
    page.keyboard.press("Enter")
    expect(page.get_by_role("status").filter(has_text="Viewing the past")).to_be_visible()


def _signed_in(browser: Any, base: str, token: str, width: int, height: int) -> Any:
    """A new page of the given size, signed in with ``token``, on the queue."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(base + "/")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Review queue")).to_be_visible()
    return page


def _sideways(page: Any) -> int:
    """How far the page scrolls sideways (0 or less: not at all)."""
    return int(
        page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    )


def test_a_long_claim_key_never_makes_the_queue_scroll_sideways(
    browser: Any, desk: tuple[str, str, Ledger], artefacts: Path
) -> None:
    from playwright.sync_api import expect

    # Given a candidate whose claim key (and id) has no space to break at
    base, token, led = desk
    agent = led.authenticate(led.admin().issue_token("agent-1"))
    key = "long." + "k" * 500
    agent.propose(scope="proj-a", claim_key=key, value="v", kind=Kind.FACT, id="L" * 128)
    for width, height in ((1280, 900), (390, 844)):
        # When the reviewer opens the queue on a wide and on a narrow screen
        page = _signed_in(browser, base, token, width, height)
        card = page.get_by_role("listitem", name=key)
        expect(card.get_by_role("link", name=key)).to_be_visible()
        # Then the key wraps inside its card: the page never scrolls sideways
        assert _sideways(page) <= 0, f"the queue scrolls sideways at {width}px"
        _shot(page, artefacts, f"console-queue-long-key-{width}")
        page.close()


def _width_in_characters(cell: str, text: str) -> str:
    """A script answering the width of the table cell ``cell`` (a JavaScript
    expression), its content box, in characters of the font of ``text`` (a selector
    within it), measured against 12 zeros."""
    return f"""() => {{
  const cell = {cell};
  const style = getComputedStyle(cell);
  const inside = cell.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const probe = document.createElement('span');
  probe.style.cssText = 'position:absolute;visibility:hidden;white-space:pre';
  probe.style.font = getComputedStyle(cell.querySelector('{text}')).font;
  probe.textContent = '0'.repeat(12);
  document.body.appendChild(probe);
  const twelve = probe.getBoundingClientRect().width;
  probe.remove();
  return inside / twelve * 12;
}}"""


#: The width of the audit trail's details cell, in characters of its own text.
_DETAILS_WIDTH = _width_in_characters(
    "[...document.querySelectorAll('section[aria-labelledby=\"audit-h\"] tbody tr')]"
    ".map(row => row.lastElementChild).find(td => td.querySelector('code'))",
    "code",
)


def test_the_audit_trail_keeps_its_details_readable_on_a_narrow_screen(
    browser: Any, desk: tuple[str, str, Ledger], artefacts: Path
) -> None:
    # Given a report whose proposal carries a long value, on a 390 px screen
    base, token, led = desk
    agent = led.authenticate(led.admin().issue_token("agent-1"))
    agent.propose(
        scope="proj-a", claim_key="report.long", value="r" * 500, kind=Kind.REPORT,
        parents=["M1"], id="LR" + "9" * 60,
    )  # fmt: skip
    page = _signed_in(browser, base, token, 390, 844)
    # When it opens the record page
    page.goto(base + "/records/LR" + "9" * 60)
    # Then the audit trail's details column is at least about 12 characters wide
    # (its box scrolls sideways instead; the page itself does not)
    chars = page.evaluate(_DETAILS_WIDTH)
    assert chars >= 12, f"the details column is {chars:.1f} characters wide at 390px"
    assert _sideways(page) <= 0
    _shot(page, artefacts, "console-audit-narrow")


def test_explaining_a_key_with_a_line_feed_from_the_records_list_round_trips(
    browser: Any, tmp_path: Path
) -> None:
    import json

    from playwright.sync_api import expect

    # Given a copy of a 0.1.0 ledger holding the key "two\nlines" (LF) and, added
    # now, "two lines" (LOOKALIKE)
    fixtures = Path(__file__).parent / "fixtures"
    path = tmp_path / "keys.db"
    shutil.copyfile(fixtures / "ledger-0.1.0-keys.db", path)
    tokens = json.loads((fixtures / "ledger-0.1.0-keys.json").read_text())["tokens"]
    with Ledger.open(f"sqlite:///{path}") as led:
        agent = led.authenticate(tokens["agent-1"])
        agent.propose(scope="s", claim_key="two lines", value=3, kind=Kind.FACT, id="LOOKALIKE")
        with running(create_app(led, mcp_factory=None)) as base:
            page = _signed_in(browser, base, tokens["reviewer"], 1280, 900)
            # When the reviewer finds LF in the records list, opens it and explains its claim
            page.goto(base + "/records?scope=s")
            link = page.get_by_role("link", name="LF", exact=True)
            row = page.get_by_role("row").filter(has=link)
            expect(row).to_contain_text('"two\\nlines"')
            link.click()
            page.get_by_role("link", name="Explain every record of this claim").click()
            heading = page.locator("#res-h")
            expect(heading).to_contain_text('FOUND s/"two\\nlines"')
            # Then the form shows the key as the page does, and sent again asks the same
            expect(page.get_by_label("Claim key")).to_have_value('"two\\nlines"')
            page.get_by_role("button", name="Explain").click()
            expect(heading).to_contain_text('FOUND s/"two\\nlines"')
            assert "claim_key=%22two%5Cnlines%22" in page.url
            records = page.locator("tbody tr td:first-child")
            expect(records).to_have_text(["LF"])


def test_a_refused_rejection_puts_the_focus_on_its_reason_naming_the_record(
    browser: Any, desk: tuple[str, str, Ledger]
) -> None:
    from playwright.sync_api import expect

    base, token, led = desk
    page = _signed_in(browser, base, token, 1280, 900)
    # When M2 is rejected with a reason of spaces only (the box's "required" lets it by)
    m2 = page.get_by_role("listitem", name="api.orders.max_retries")
    m2.get_by_text("Reject…").click()
    m2.get_by_label("Reason for rejecting M2").fill("   ")
    m2.get_by_role("button", name="Reject M2", exact=True).click()
    # Then the refusal names M2, and the focus is on M2's reason, marked and described
    alert = page.get_by_role("alert")
    expect(alert).to_have_text(
        "Rejection of M2 refused (InvalidValueError): reason must not be empty"
    )
    reason = page.get_by_role("listitem", name="api.orders.max_retries").get_by_label(
        "Reason for rejecting M2"
    )
    expect(reason).to_be_focused()
    expect(reason).to_have_attribute("aria-invalid", "true")
    expect(reason).to_have_accessible_description(
        "Rejection of M2 refused (InvalidValueError): reason must not be empty"
    )
    # And typed again in place, it is taken
    page.keyboard.press("Control+A")
    page.keyboard.type("a duplicate of M1")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.get_by_role("status").filter(has_text="Rejected M2.")).to_be_visible()
    assert led.authenticate(token).get("M2").status == "REJECTED"


def test_a_tab_shown_before_signing_in_again_keeps_what_was_typed(
    browser: Any, desk: tuple[str, str, Ledger]
) -> None:
    from playwright.sync_api import expect

    base, token, led = desk
    # Given two tabs of one browser, both on the queue
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    old = context.new_page()
    old.goto(base + "/")
    old.get_by_label("Token").fill(token)
    old.get_by_role("button", name="Sign in").click()
    expect(old.get_by_role("heading", name="Review queue")).to_be_visible()
    other = context.new_page()
    other.goto(base + "/")
    # When the other signs out and in again
    other.get_by_role("button", name="Sign out").click()
    other.get_by_label("Token").fill(token)
    other.get_by_role("button", name="Sign in").click()
    expect(other.get_by_role("heading", name="Review queue")).to_be_visible()
    before = led.position
    # And the first, shown before that, sends a rejection with its reason typed
    m2 = old.get_by_role("listitem", name="api.orders.max_retries")
    m2.get_by_text("Reject…").click()
    m2.get_by_label("Reason for rejecting M2").fill("a duplicate of M1")
    m2.get_by_role("button", name="Reject M2", exact=True).click()
    # Then it is told so plainly, nothing written, the reason still there to send again
    expect(old.get_by_role("alert")).to_contain_text(
        "That form was on a page shown before you last signed in"
    )
    assert led.position == before
    reason = old.get_by_role("listitem", name="api.orders.max_retries").get_by_label(
        "Reason for rejecting M2"
    )
    expect(reason).to_have_value("a duplicate of M1")
    old.get_by_role("button", name="Reject M2", exact=True).click()
    expect(old.get_by_role("status").filter(has_text="Rejected M2.")).to_be_visible()
    context.close()


#: The width of the first cell (record and claim key) of the STALE records' first
#: row on Needs attention, in characters of its claim key's font.
_KEY_WIDTH = _width_in_characters(
    "document.querySelector('section[aria-labelledby=\"stale-h\"] tbody td')", ".claim"
)


def test_needs_attention_keeps_claim_keys_readable_at_375_pixels(
    browser: Any, desk: tuple[str, str, Ledger], artefacts: Path
) -> None:
    # Given STALE records, one of them under a long claim key without a space
    base, token, led = desk
    admin = led.admin()
    agent = led.authenticate(admin.issue_token("agent-1"))
    agent.propose(
        scope="proj-a", claim_key="source:https://docs.example.test/a/very/long/path/no/break",
        value=1, kind=Kind.INFERENCE, parents=["M1"], id="A1",
    )  # fmt: skip
    led.authenticate(admin.issue_token("reviewer-2")).accept("A1")
    led.authenticate(admin.issue_token("reviewer-2")).revoke("E1", reason="the docs changed")
    # When the reviewer opens Needs attention on a 375 px screen
    page = _signed_in(browser, base, token, 375, 812)
    page.goto(base + "/attention")
    # Then the record column keeps room for a dozen characters of its key, and each
    # row is a card: nothing scrolls sideways, its box no more than the page, and
    # every row's Review link and reason are on the screen
    chars = page.evaluate(_KEY_WIDTH)
    assert chars >= 12, f"the record column is {chars:.1f} characters wide at 375px"
    assert _sideways(page) <= 0
    assert page.evaluate(_BOXES_SIDEWAYS) <= 0
    _assert_on_screen(page, 'section[aria-labelledby="stale-h"] a:text-is("Review")', 375)
    _assert_on_screen(page, 'section[aria-labelledby="stale-h"] td.why', 375)
    _shot(page, artefacts, "console-attention-narrow")
    # and so are a record's deliveries, with whether each owes a correction
    page.goto(base + "/records/R1")
    assert _sideways(page) <= 0
    deliveries = "document.querySelector('table[aria-labelledby=\"del-h\"]').closest('.scroll')"
    assert (
        page.evaluate(f"() => {{ const b = {deliveries}; return b.scrollWidth - b.clientWidth; }}")
        <= 0
    )
    _assert_on_screen(page, "td.owed", 375)
    assert page.locator("td.owed").first.inner_text().startswith("yes")


#: How far the scrolling boxes of a page's tables scroll sideways, at most (0: none).
_BOXES_SIDEWAYS = (
    "() => Math.max(0, ...[...document.querySelectorAll('.scroll')]"
    ".map(box => box.scrollWidth - box.clientWidth))"
)


def _assert_on_screen(page: Any, selector: str, width: int) -> None:
    """Every element ``selector`` finds is shown within the screen's ``width``."""
    boxes = page.locator(selector).evaluate_all(
        "els => els.map(e => { const r = e.getBoundingClientRect(); return [r.left, r.right]; })"
    )
    assert boxes, selector
    assert all(left >= 0 and right <= width for left, right in boxes), (selector, boxes)


#: How the dependency picture is drawn: the size in CSS pixels of its records'
#: labels (Graphviz's font size, in the picture's units, as drawn), and how far its
#: box scrolls sideways.
_GRAPH_DRAWN = """() => {
  const svg = document.querySelector('svg.graph');
  const box = svg.closest('.graph-box');
  const label = svg.querySelector('g.node text');
  const drawn = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  return {
    font: parseFloat(label.getAttribute('font-size')) * drawn,
    scrolls: box.scrollWidth - box.clientWidth,
  };
}"""


def test_a_graph_of_many_records_keeps_its_labels_readable_and_scrolls_in_its_box(
    browser: Any, desk: tuple[str, str, Ledger], artefacts: Path
) -> None:
    # Given M1 with some forty records resting on it (the most a picture draws)
    base, token, led = desk
    agent = led.authenticate(led.admin().issue_token("agent-1"))
    agent.propose_many(
        {
            "scope": "proj-a",
            "claim_key": f"wide.{n}",
            "value": n,
            "kind": Kind.INFERENCE,
            "parents": ["M1"],
            "id": f"W{n:02}",
        }
        for n in range(38)
    )
    for width, height in ((1280, 900), (390, 844)):
        # When the reviewer opens its page
        page = _signed_in(browser, base, token, width, height)
        page.goto(base + "/records/M1")
        drawn = page.evaluate(_GRAPH_DRAWN)
        # Then the picture is not shrunk to fit: its labels stay readable, and its
        # box scrolls sideways instead; the page itself does not
        assert drawn["font"] >= 11, drawn
        assert drawn["scrolls"] > 0, drawn
        assert _sideways(page) <= 0
        _shot(page, artefacts, f"console-graph-wide-{width}")
        page.close()


def test_a_double_click_on_accept_lands_on_the_record_accepted_not_a_refusal(
    browser: Any, desk: tuple[str, str, Ledger], tmp_path: Path
) -> None:
    import sqlite3

    from playwright.sync_api import expect

    base, token, led = desk
    page = _signed_in(browser, base, token, 1280, 900)
    before = led.position
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    # Given a ledger slow to write (another process holds its write lock a moment)
    holder = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        # When the reviewer double-clicks M2's Accept: two clicks, each sending the
        # form (the second leaves the page the first was loading)
        m2 = page.get_by_role("listitem", name="api.orders.max_retries")
        box = m2.get_by_role("button", name="Accept M2", exact=True).bounding_box()
        assert box is not None
        for _ in range(2):  # (as far apart as a person's double click)
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.wait_for_timeout(150)
        for _ in range(50):  # (until both are on their way)
            if len(posts) == 2:
                break
            page.wait_for_timeout(100)
        assert len(posts) == 2, posts
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    page.wait_for_load_state("networkidle")
    # Then the page says M2 is accepted, and refuses nothing
    expect(page.get_by_role("status").filter(has_text="M2").first).to_be_visible()
    expect(page.get_by_role("listitem", name="api.orders.max_retries")).to_have_count(0)
    assert page.get_by_role("alert").count() == 0, page.get_by_role("alert").all_inner_texts()
    assert not page.title().startswith("Error")
    reviewer = led.authenticate(token)
    assert reviewer.get("M2").status == "ACCEPTED"
    assert len([e for e in reviewer.audit("M2").events if e.type == "Accepted"]) == 1
    assert led.position == before + 1


def test_after_a_decision_the_focus_is_on_what_happened(
    browser: Any, desk: tuple[str, str, Ledger]
) -> None:
    from playwright.sync_api import expect

    base, token, _ = desk
    page = _signed_in(browser, base, token, 1280, 900)
    # When the reviewer accepts M2 from the keyboard
    m2 = page.get_by_role("listitem", name="api.orders.max_retries")
    m2.get_by_role("button", name="Accept M2", exact=True).focus()
    page.keyboard.press("Enter")
    # Then the page after it opens with the focus on its message, not at its top
    done = page.get_by_role("status").filter(has_text="Accepted M2.")
    expect(done).to_be_focused()
    # ... so the next Tab goes on from there, not from the page's first link
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") != "Skip to content"
    # And so after a revocation confirmed on its preview
    page.goto(base + "/records/E1/revoke")
    page.get_by_label("Reason for revoking E1").fill("the docs changed")
    page.get_by_role("button", name="Confirm revocation").click()
    expect(page.get_by_role("status").filter(has_text="Revoked E1;")).to_be_focused()
    # ... while a page merely opened keeps the focus where it starts
    page.goto(base + "/records/E1")
    assert page.evaluate("document.activeElement === document.body")


#: Where the record's own node is drawn in the box of the dependency picture: its
#: centre against the box's, and how far the box and the page have scrolled.
_NODE_IN_BOX = """rid => {
  const box = document.querySelector('.graph-box');
  const node = [...box.querySelectorAll('svg.graph g.node')]
    .find(g => g.querySelector('title').textContent === rid);
  const b = box.getBoundingClientRect(), n = node.getBoundingClientRect();
  return {
    dx: (n.left + n.width / 2) - (b.left + box.clientLeft + box.clientWidth / 2),
    scrolled: box.scrollLeft,
    page: window.scrollY,
  };
}"""


def test_a_wide_graph_opens_with_the_records_own_node_in_the_middle_of_its_box(
    browser: Any, desk: tuple[str, str, Ledger], artefacts: Path
) -> None:
    # Given M1 with some forty records resting on it: drawn wider than any screen
    base, token, led = desk
    agent = led.authenticate(led.admin().issue_token("agent-1"))
    agent.propose_many(
        {"scope": "proj-a", "claim_key": f"wide.{n}", "value": n, "kind": Kind.INFERENCE,
         "parents": ["M1"], "id": f"W{n:02}"}
        for n in range(38)
    )  # fmt: skip
    for width, height in ((1280, 900), (390, 844)):
        # When the reviewer opens M1's page
        page = _signed_in(browser, base, token, width, height)
        page.goto(base + "/records/M1")
        where = page.evaluate(_NODE_IN_BOX, "M1")
        # Then its box has scrolled to M1's node, in its middle; the page has not
        assert where["scrolled"] > 0, where
        assert abs(where["dx"]) <= 2, where
        assert where["page"] == 0, where
        _shot(page, artefacts, f"console-graph-centred-{width}")
        page.close()


def test_the_records_list_reads_as_short_cards_at_375_pixels(
    browser: Any, desk: tuple[str, str, Ledger], artefacts: Path
) -> None:
    from playwright.sync_api import expect

    # Given records with long values, claim keys and ids
    base, token, led = desk
    agent = led.authenticate(led.admin().issue_token("agent-1"))
    agent.propose(
        scope="proj-a", claim_key="source:https://docs.example.test/a/very/long/path/no/break",
        value={"a": [1, 2, 3], "b": "some text here"}, kind=Kind.FACT,
        id="r-0f3c9a7e5b2d4c1a8e6f0b9d7c5a3e1f",
    )  # fmt: skip
    # When the reviewer opens the record list on a 375 px screen
    page = _signed_in(browser, base, token, 375, 812)
    page.goto(base + "/records")
    # Then every row is a short card (squeezed into seven columns they were over 300 px
    # tall), nothing scrolls sideways, and it is still a table of records
    heights = page.evaluate(
        "[...document.querySelectorAll('tbody tr')].map(r => r.getBoundingClientRect().height)"
    )
    assert len(heights) == 6 and max(heights) <= 180, heights
    box = page.evaluate("(s => s.scrollWidth - s.clientWidth)(document.querySelector('.scroll'))")
    assert box <= 0 and _sideways(page) <= 0
    table = page.get_by_role("table", name="Records in proj-a")
    expect(table.get_by_role("row")).to_have_count(7)  # with its header row
    expect(table.get_by_role("cell", name="api.orders.retry_safe")).to_be_visible()
    _shot(page, artefacts, "console-records-375")
