"""The review console at work on a busy ledger: Needs attention listing every
STALE and expired record reachably, a revocation while an agent keeps building on
the record, a note on an acceptance, a readable dependency picture, the outbox's
rule, candidates on a final dependency, revalidation past a record's own expiry, a
refused as-of time in the console's terms, and expiry reasons shown as every other
instant is.

Driven over HTTP against the ASGI app, on every backend (``tests.test_serve_console``
has the desk and its helpers).
"""

# ruff: noqa: F811  (``desk`` is tests.test_serve_console's fixture, imported)

from __future__ import annotations

import html
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import Kind, Session
from ledger.serve import console
from tests.test_serve_console import Desk, _seed, card_of, desk, text_of  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

_PREVIEW = re.compile(r'name="preview" value="([0-9a-f]+)"')


def _hrefs(page: str) -> list[str]:
    """The targets of a page's links, unescaped."""
    return [html.unescape(h) for h in re.findall(r'<a href="([^"]+)"', page)]


def _section(page: str, heading_id: str) -> str:
    """The section of a page labelled by the heading ``heading_id``."""
    start = page.index(f'aria-labelledby="{heading_id}"')
    return page[start : page.index("</section>", start)]


# -- 1. Needs attention: every list paged, the rest linked, nothing left out silently ------


def _stale_and_expired(d: Desk, clock: Any, stale: int, expired: int) -> None:
    """``stale`` STALE records (S01…, on E1, revoked) and ``expired`` ACCEPTED records
    past their expiry (X01…) in proj-a."""
    d.agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"doc", id="E1")
    d.reviewer.accept("E1")
    for n in range(1, stale + 1):
        d.agent.propose(
            scope="proj-a", claim_key=f"s.{n}", value=n, kind=Kind.INFERENCE,
            parents=["E1"], id=f"S{n:02}",
        )  # fmt: skip
        d.reviewer.accept(f"S{n:02}")
    for n in range(1, expired + 1):
        d.agent.propose(
            scope="proj-a", claim_key=f"x.{n}", value=n, kind=Kind.FACT, id=f"X{n:02}",
            expires=clock.now + timedelta(hours=1),
        )  # fmt: skip
        d.reviewer.accept(f"X{n:02}")
    d.reviewer.revoke("E1", reason="doc changed")
    clock.advance(hours=2)


def test_needs_attention_pages_each_scope_and_kind_and_links_to_the_rest(
    desk: Desk, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given more STALE and more expired records than a page shows (2, for the test)
    monkeypatch.setattr(console, "PAGE", 2)
    _stale_and_expired(desk, clock, stale=5, expired=3)
    client, _ = desk.signed_in("reviewer")
    asked: list[int] = []
    records = Session.records

    def counted(self: Session, scope: str, **kwargs: Any) -> Any:
        asked.append(kwargs.get("limit", 100))
        return records(self, scope, **kwargs)

    monkeypatch.setattr(Session, "records", counted)
    # When the reviewer opens Needs attention
    page = client.get("/attention").text
    text = text_of(page)
    # Then each list says it shows its first records, in id order, and that more follow
    assert "STALE or expired records (4 shown; more follow)" in text
    assert "STALE in proj-a (the first 2 in id order; more follow)" in text
    assert "ACCEPTED but expired in proj-a (the first 2 in id order; more follow)" in text
    assert "Only the first" not in text and "+)" not in text
    # ... having loaded a page of each and looked one record past it, no more
    assert asked and max(asked) <= 2, asked
    # ... and leads to the rest: its next page, and the record list filtered alike
    links = _hrefs(page)
    assert "/attention?scope=proj-a&list=stale&after=S02&page=2" in links
    assert "/attention?scope=proj-a&list=expired&after=X02&page=2" in links
    assert "/records?scope=proj-a&status=STALE" in links
    assert "/records?scope=proj-a&status=ACCEPTED&validity=NEEDS_REVALIDATION" in links
    # When it follows the STALE list's next pages
    second = client.get("/attention?scope=proj-a&list=stale&after=S02&page=2")
    assert second.status_code == 200
    text = text_of(second.text)
    assert "Needs attention: STALE in proj-a, page 2" in text
    assert "S03" in text and "S04" in text and "S01" not in text and "X01" not in text
    assert "Corrections due" not in text  # that list alone
    third = text_of(client.get("/attention?scope=proj-a&list=stale&after=S04&page=3").text)
    assert "STALE in proj-a (1 on this page, the last)" in third and "S05" in third
    # And the record list those links name holds them all
    listed = text_of(
        client.get("/records?scope=proj-a&status=ACCEPTED&validity=NEEDS_REVALIDATION").text
    )
    assert "X01" in listed and "X02" in listed and "S01" not in listed
    # A page link cut short, or naming no list, is refused, not read as the whole page
    for cut in ("list=bogus&scope=proj-a&after=A", "scope=proj-a&list=stale", "after=S02"):
        refused = client.get(f"/attention?{cut}")
        assert refused.status_code == 422, cut
        assert "names its scope, its list (stale or expired)" in text_of(refused.text)


def test_needs_attention_names_the_whole_count_when_nothing_more_follows(
    desk: Desk, clock: Any
) -> None:
    _stale_and_expired(desk, clock, stale=2, expired=1)
    client, _ = desk.signed_in("reviewer")
    page = client.get("/attention").text
    text = text_of(page)
    assert "STALE or expired records (3)" in text
    assert "STALE in proj-a (2)" in text and "ACCEPTED but expired in proj-a (1)" in text
    assert "more follow" not in text and "list=stale" not in page


# -- 2. Revoking while an agent keeps building on the record ---------------------------------


def _child(d: Desk, parent: str, rid: str) -> None:
    d.agent.propose(
        scope="proj-a", claim_key=f"c.{rid}", value=rid, kind=Kind.INFERENCE,
        parents=[parent], id=rid,
    )  # fmt: skip


def test_a_revocation_refused_as_records_keep_coming_can_be_made_with_what_is_built_by_then(
    desk: Desk,
) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer")
    preview = client.get("/records/E1/revoke").text
    # A plain preview offers only to confirm what it shows
    assert 'name="extent"' not in preview
    mark = _PREVIEW.search(preview)
    assert mark is not None
    # When an agent builds on E1 between the preview and each confirmation
    _child(desk, "M1", "C1")
    form = {"csrf": csrf, "reason": "the doc was withdrawn", "preview": mark[1]}
    refused = client.post("/records/E1/revoke", data=form)
    assert refused.headers["location"] == "/records/E1/revoke"
    page = client.get(refused.headers["location"]).text
    text = text_of(page)
    # Then nothing was revoked, and the page offers to revoke it with whatever is
    # built on it by the time it is revoked, saying what rested on it at the refusal
    assert "Nothing was revoked" in text
    assert desk.reviewer.get("E1").status.value == "ACCEPTED"
    assert "when your confirmation was refused, 4 records you can see rested on it" in text
    button = re.search(
        r'<button type="submit" name="extent" value="([^"]+)"[^>]*>(.*?)</button>', page
    )
    assert button is not None
    extent = {"extent": button[1]}
    assert text_of(button[2]) == "Revoke E1 and whatever is built on it by then"
    # ... in the same form as the reason typed, which is kept, and its CSRF token
    assert "the doc was withdrawn</textarea>" in page
    # Its offer is for that refusal: the preview opened again does not repeat it
    assert 'name="extent"' not in client.get("/records/E1/revoke").text
    # A forged form asking it (no CSRF token of this session) writes nothing
    before = desk.ledger.position
    forged = client.post("/records/E1/revoke", data={**form, "csrf": "x", **extent})
    assert forged.status_code == 403 and desk.ledger.position == before
    # When the agent adds another meanwhile and the reviewer takes the offer
    _child(desk, "M1", "C2")
    done = client.post("/records/E1/revoke", data={**form, **extent})
    assert done.headers["location"] == "/records/E1"
    told = text_of(client.get("/records/E1").text)
    # Then E1 is revoked with all built on it, and the message counts what was marked
    assert (
        "Revoked E1 and whatever had been built on it by then; 5 records you can see "
        "marked STALE; 1 delivery now owes a correction" in told
    )
    assert desk.reviewer.get("E1").status.value == "REVOKED"
    assert desk.reviewer.get("E1").reason == "the doc was withdrawn"
    for rid in ("M1", "R1", "M2", "C1", "C2"):
        assert desk.reviewer.get(rid).status.value == "STALE", rid


def test_the_offer_counts_only_the_records_the_reviewer_can_see(desk: Desk) -> None:
    # Given E1 → M1, and HC1 on M1 in proj-c, where the reviewer may deliver but not read
    _seed(desk)
    admin = desk.ledger.admin()
    admin.grant("agent-1", scope="proj-c", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-c", roles=["deliver"])
    desk.agent.propose(
        scope="proj-c", claim_key="c", value=1, kind=Kind.INFERENCE, parents=["M1"], id="HC1"
    )
    client, csrf = desk.signed_in("reviewer")
    preview = client.get("/records/E1/revoke").text
    mark = _PREVIEW.search(preview)
    assert mark is not None
    # When a confirmation is refused because C1 was built on M1 meanwhile
    _child(desk, "M1", "C1")
    form = {"csrf": csrf, "reason": "withdrawn", "preview": mark[1]}
    refused = client.post("/records/E1/revoke", data=form)
    text = text_of(client.get(refused.headers["location"]).text)
    # Then the offer counts M1, R1, M2 and C1 as the records it can see, not HC1
    assert "when your confirmation was refused, 4 records you can see rested on it" in text


# -- 3. A note on an acceptance ---------------------------------------------------------------


def test_the_accept_form_takes_an_optional_note_the_record_page_shows(desk: Desk) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer")
    card = card_of(client.get("/").text, "M2")
    # The card holds a labelled, optional note, as long as a reason may be, sent with
    # the accept form (its ``form`` attribute) by Accept or by its own button
    assert '<label for="note-M2">Note (optional)' in card
    box = re.search(r'<textarea id="note-M2" name="note" form="accept-M2"([^>]*)>', card)
    assert box is not None and 'maxlength="1024"' in box[1] and "required" not in box[1]
    assert re.search(r'<form method="post" action="/records/M2/accept" id="accept-M2">', card)
    assert '<button type="submit" form="accept-M2" class="accept">Accept with this note' in card
    # ... tucked away, closed: one click on Accept still accepts
    assert '<details class="note">' in card
    assert card.index('class="accept"') < card.index('<details class="note">')
    done = client.post(
        "/records/M2/accept",
        data={"csrf": csrf, "scope": "proj-a", "next": "/", "note": "checked the window"},
    )
    assert done.status_code == 303
    assert desk.reviewer.get("M2").status.value == "ACCEPTED"
    shown = client.get("/records/M2").text
    assert 'Reason recorded: “<span class="said">checked the window</span>”' in shown


def test_a_refused_acceptance_keeps_its_note_open(desk: Desk) -> None:
    _seed(desk)
    client, csrf = desk.signed_in("reviewer")
    # A note longer than the ledger takes (typed past the box's limit): refused, kept
    note = "n" * 1025
    done = client.post(
        "/records/M2/accept", data={"csrf": csrf, "scope": "proj-a", "next": "/", "note": note}
    )
    page = client.get(done.headers["location"]).text
    assert "Acceptance of M2 refused" in text_of(page)
    assert desk.reviewer.get("M2").status.value == "CANDIDATE"
    card = card_of(page, "M2")
    assert '<details class="note" open>' in card
    box = re.search(r'<textarea id="note-M2" name="note"([^>]*)>(n+)</textarea>', card)
    assert box is not None and box[2] == note
    assert 'aria-invalid="true"' in box[1]


# -- 4. The dependency picture keeps its size ------------------------------------------------


def test_the_dependency_picture_is_never_shrunk_to_fit_its_box() -> None:
    css = (Path(console.__file__).parent / "static" / "console.css").read_text()
    rule = re.search(r"svg\.graph\s*\{([^}]*)\}", css)
    assert rule is not None
    # A wide graph scrolls in its box (overflow: auto) at its own, readable size
    assert "max-width: 100%" not in rule[1]
    box = re.search(r"\.graph-box\s*\{([^}]*)\}", css)
    assert box is not None and "overflow: auto" in box[1]


# -- 5. The outbox says its rule ------------------------------------------------------------


def test_the_outbox_says_a_record_valid_again_may_still_owe_a_correction(desk: Desk) -> None:
    # Given R1, delivered, made STALE and then revalidated on a new basis
    _seed(desk)
    desk.reviewer.revoke("E1", reason="doc changed")
    desk.agent.capture(scope="proj-a", uri="https://x.test/doc2", content=b"v2", id="E2")
    second = desk.ledger.authenticate(desk.tokens["reviewer-2"])
    second.accept("E2")
    second.revalidate("M1", note="re-read", parents=["E2"])
    second.revalidate("R1", note="chain re-checked")
    client, _ = desk.signed_in("reviewer")
    due = _section(client.get("/attention").text, "due-h")
    text = text_of(due)
    # Then its delivery owes a correction, and the outbox's own words say why
    assert "Now ACCEPTED VALID" in text
    assert "Deliveries whose record is no longer VALID" not in text
    assert "left VALID since it was delivered (or since its last correction)" in text
    assert "revalidated on another basis" in text
    assert "So a record VALID again may still owe one." in text


# -- 6. A candidate on a final dependency ----------------------------------------------------


@pytest.mark.parametrize("parents", [["M2"], ["S1", "M2"]])
def test_a_candidate_on_a_rejected_dependency_is_told_to_be_rejected_not_to_wait(
    desk: Desk, parents: list[str]
) -> None:
    # (with S1, a candidate, named first: waiting for it would be in vain too)
    _seed(desk)
    desk.agent.propose(
        scope="proj-a", claim_key="n", value=1, kind=Kind.INFERENCE, parents=parents, id="N1"
    )
    desk.ledger.authenticate(desk.tokens["reviewer-2"]).reject("M2", reason="wrong")
    client, _ = desk.signed_in("reviewer")
    for page in (card_of(client.get("/").text, "N1"), client.get("/records/N1").text):
        text = text_of(page)
        assert "settle that first" not in text
        assert (
            "Its dependency M2 is REJECTED, for good: it can never be accepted on it. "
            "Reject it, or have it proposed again on another basis." in text
        )


def test_a_candidate_on_a_dependency_not_yet_decided_still_waits_for_it(desk: Desk) -> None:
    _seed(desk)
    desk.agent.propose(
        scope="proj-a", claim_key="n", value=1, kind=Kind.INFERENCE, parents=["M2"], id="N1"
    )
    client, _ = desk.signed_in("reviewer")
    assert "Its dependency M2 is CANDIDATE; settle that first." in text_of(
        card_of(client.get("/").text, "N1")
    )


# -- 7. Revalidation past a record's own expiry ----------------------------------------------


def test_revalidation_is_not_offered_past_a_records_own_expiry(desk: Desk, clock: Any) -> None:
    # Given X1 past its own expiry, and D2 past the expiry of D1 it rests on
    hour = clock.now + timedelta(hours=1)
    desk.agent.propose(
        scope="proj-a", claim_key="x", value=1, kind=Kind.FACT, expires=hour, id="X1"
    )
    desk.agent.propose(
        scope="proj-a", claim_key="d", value=1, kind=Kind.FACT, expires=hour, id="D1"
    )
    for rid in ("X1", "D1"):
        desk.reviewer.accept(rid)
    desk.agent.propose(
        scope="proj-a", claim_key="d2", value=1, kind=Kind.INFERENCE, parents=["D1"], id="D2"
    )
    desk.reviewer.accept("D2")
    clock.advance(hours=2)
    client, _ = desk.signed_in("reviewer")
    # Then X1's page offers no revalidation, saying why and what to do instead
    page = client.get("/records/X1").text
    assert 'action="/records/X1/revalidate"' not in page and "Revalidate…" not in page
    text = text_of(page)
    assert (
        "Not to be revalidated: it expired at 2026-01-01 13:00:00 UTC, its own expiry, "
        "which no revalidation renews" in text
    )
    assert "propose a new version of it ( supersedes=X1 )" in text
    # ... while D2, whose basis expired, may still be given a new one
    assert 'action="/records/D2/revalidate"' in client.get("/records/D2").text
    # And a STALE record past its own expiry is not offered it either
    desk.agent.capture(scope="proj-a", uri="https://x.test/e", content=b"e", id="E1")
    desk.reviewer.accept("E1")
    desk.agent.propose(
        scope="proj-a", claim_key="y", value=1, kind=Kind.INFERENCE, parents=["E1"], id="Y2",
        expires=clock.now + timedelta(hours=1),
    )  # fmt: skip
    desk.reviewer.accept("Y2")
    desk.reviewer.revoke("E1", reason="gone")
    clock.advance(hours=2)
    page = client.get("/records/Y2").text
    assert "Status STALE" in text_of(page)
    assert 'action="/records/Y2/revalidate"' not in page
    assert "Not to be revalidated: it expired at" in text_of(page)


# -- 8. A refused as-of moment in the console's terms ----------------------------------------


def test_an_as_of_time_after_the_ledgers_clock_is_refused_in_the_consoles_terms(
    desk: Desk,
) -> None:
    _seed(desk)
    client, _ = desk.signed_in("reviewer")
    r = client.get("/attention", params={"as_of_time": "2999-01-01T00:00:00Z"})
    assert r.status_code == 422
    text = text_of(r.text)
    assert (
        "as-of time 2999-01-01 00:00:00 UTC is later than the ledger's clock "
        "(2026-01-01 12:00:00 UTC): there is no past there to show yet" in text
    )
    assert "(at)" not in text and "as_of " not in text
    r = client.get("/attention", params={"as_of_position": "999999"})
    assert r.status_code == 422
    text = text_of(r.text)
    newest = desk.ledger.position
    assert f"as-of position 999999 is beyond the log (its newest position is {newest})" in text
    assert "as_of " not in text


# -- 9. Expiry reasons shown as every instant is ---------------------------------------------


def test_an_expiry_reason_shows_its_instant_as_the_pages_show_instants(
    desk: Desk, clock: Any
) -> None:
    hour = clock.now + timedelta(hours=1, microseconds=527868)
    desk.agent.propose(
        scope="proj-a", claim_key="d", value=1, kind=Kind.FACT, expires=hour, id="D1"
    )
    desk.reviewer.accept("D1")
    desk.agent.propose(
        scope="proj-a", claim_key="d2", value=1, kind=Kind.INFERENCE, parents=["D1"], id="D2"
    )
    desk.reviewer.accept("D2")
    clock.advance(hours=2)
    client, _ = desk.signed_in("reviewer")
    why = {
        "D1": ("d", "expired at 2026-01-01 13:00:00 UTC"),
        "D2": ("d2", "ancestor D1 expired at 2026-01-01 13:00:00 UTC"),
    }
    for rid, (claim, reason) in why.items():
        box = _section(client.get(f"/records/{rid}").text, "why-h")
        assert f'<li class="said">{reason}</li>' in box, box
        assert "T13:00:00" not in box
        explained = client.get("/explain", params={"scope": "proj-a", "claim_key": claim})
        assert reason in text_of(explained.text)
        assert "T13:00:00" not in explained.text
