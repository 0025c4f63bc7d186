"""The review console's ways in and out: a moment the ledger refuses, a refused form
tied to its field, a form from a page shown before signing in again, a link
followed while signed out, titles that tell pages apart, and what the pages say
of captures, revocations and paging.

Driven over HTTP against the ASGI app, as ``tests/test_serve_console.py`` does;
on every backend.
"""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlsplit

import pytest

from ledger import Kind
from tests import test_serve_console
from tests.test_serve_console import Desk, _seed, card_of, csrf_of, text_of

#: The ledger behind a served console, its principals and their tokens (every backend).
desk = test_serve_console.desk

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def title_of(page: str) -> str:
    """A page's title, as a browser tab or a screen reader names it."""
    found = re.search(r"<title>(.*?)</title>", page, re.S)
    assert found is not None
    return html.unescape(found[1])


def tag_of(page: str, tag: str, element_id: str) -> str:
    """The start tag of the element ``element_id``."""
    found = re.search(rf'<{tag} id="{re.escape(element_id)}"[^>]*>', page)
    assert found is not None, f"no <{tag} id={element_id!r}> on the page"
    return found[0]


AT_FAULT = 'aria-invalid="true" aria-describedby="form-refusal" autofocus'


# -- a moment the ledger refuses -------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "field"),
    [
        ({"as_of_position": "999999"}, "as_of_position"),
        ({"as_of_time": "2099-01-01T00:00:00Z"}, "as_of_time"),
    ],
)
def test_a_moment_past_the_log_or_the_clock_is_refused_with_links_back_to_now(
    desk: Desk, asked: dict[str, str], field: str
) -> None:
    # Given a signed-in reviewer
    _seed(desk)
    client, _ = desk.signed_in("reviewer")
    # When a page is asked as of a position past the log, or a time still to come
    r = client.get("/records/E1", params=asked)

    # Then the page refuses it, as for a moment that does not parse ...
    assert r.status_code == 422
    assert "Check the input" in r.text
    # ... claiming to show no past, every link leading back to now
    assert "Viewing the past" not in r.text
    links = re.findall(r'href="([^"]*)"', r.text)
    assert links and not [link for link in links if "as_of" in link], links
    # ... and the field at fault keeps what was typed, marked and described by the refusal
    typed = html.escape(next(iter(asked.values())), quote=True)
    marked = tag_of(r.text, "input", field)
    assert f'value="{typed}" aria-invalid="true" aria-describedby="refusal" autofocus' in marked
    other = "as_of_time" if field == "as_of_position" else "as_of_position"
    assert "aria-invalid" not in tag_of(r.text, "input", other)
    assert 'id="refusal"' in r.text
    # ... and the review queue it leads back to is now's
    assert client.get("/").status_code == 200


# -- a refused form ------------------------------------------------------------------------------


def test_a_refused_rejection_names_its_record_and_marks_its_reason_in_the_queue(
    desk: Desk,
) -> None:
    # Given a queue of several candidates
    _seed(desk)
    desk.agent.propose(scope="proj-a", claim_key="api.other", value=1, kind=Kind.FACT, id="M3")
    client, csrf = desk.signed_in("reviewer-2")
    # When M2 is rejected with a reason of spaces only
    r = client.post("/records/M2/reject", data={"csrf": csrf, "reason": "   ", "next": "/"})
    page = client.get(r.headers["location"]).text

    # Then the message names the record the refusal is about
    flash = re.search(r'<p class="flash error" role="alert" id="form-refusal">(.*?)</p>', page)
    assert flash is not None
    assert html.unescape(flash[1]) == (
        "Rejection of M2 refused (InvalidValueError): reason must not be empty"
    )
    # And M2's reason box is open, marked invalid, described by it and focused
    card = card_of(page, "M2")
    assert '<details class="reject" open>' in card
    assert AT_FAULT in tag_of(card, "textarea", "reason-M2")
    # ... while no other card's is
    assert "aria-invalid" not in card_of(page, "M3")
    assert page.count("aria-invalid") == 1
    # ... once: the next visit marks nothing
    assert "aria-invalid" not in client.get("/").text


def test_a_refused_correction_revocation_or_revalidation_marks_the_field_at_fault(
    desk: Desk,
) -> None:
    # Given R1 STALE (its evidence revoked), its delivery owing a correction
    _seed(desk)
    desk.reviewer.revoke("E1", reason="doc changed")
    [delivery] = desk.reviewer.get("R1").deliveries
    client, csrf = desk.signed_in("reviewer")

    # A mistyped replacement: the replacement is marked, not the note
    action = f"/deliveries/{delivery.delivery_id}/correction"
    r = client.post(action, data={"csrf": csrf, "note": "withdrawn", "replacement": "R1-typo"})
    page = client.get(r.headers["location"]).text
    assert f"Correction for delivery {delivery.delivery_id} refused (UnknownRecordError)" in (
        text_of(page)
    )
    assert AT_FAULT in tag_of(page, "input", "repl-1")
    assert "aria-invalid" not in tag_of(page, "textarea", "note-1")

    # A revocation's reason of spaces: back on its preview, the reason marked
    preview = client.get("/records/M2/revoke").text
    mark = re.search(r'name="preview" value="([0-9a-f]+)"', preview)
    assert mark is not None
    r = client.post("/records/M2/revoke", data={"csrf": csrf, "reason": "  ", "preview": mark[1]})
    assert r.headers["location"] == "/records/M2/revoke"
    page = client.get(r.headers["location"]).text
    assert "Revocation of M2 refused (InvalidValueError)" in text_of(page)
    assert AT_FAULT in tag_of(page, "textarea", "reason")

    # A revalidation on an unknown basis: the basis marked, not the note
    r = client.post("/records/M1/revalidate", data={"csrf": csrf, "note": "x", "parents": "NOPE"})
    page = client.get(r.headers["location"]).text
    assert "Revalidation of M1 refused (InvalidParentError)" in text_of(page)
    assert AT_FAULT in tag_of(page, "input", "rv-parents")
    assert "aria-invalid" not in tag_of(page, "textarea", "rv-note")
    assert desk.reviewer.get("M2").status.value == "STALE"


# -- a form from a page shown before signing in again ---------------------------------------------


def test_a_form_from_a_page_shown_before_signing_in_again_is_told_so_and_keeps_its_text(
    desk: Desk,
) -> None:
    # Given a tab showing the queue, and the browser signed out and in again since
    # (in another tab: the same cookie jar)
    _seed(desk)
    client, stale = desk.signed_in("reviewer-2")
    client.post("/signout", data={"csrf": stale})
    page = client.get("/")
    client.post("/signin", data={"token": desk.tokens["reviewer-2"], "csrf": csrf_of(page.text)})
    before = desk.ledger.position

    # When the old tab sends a rejection with its reason typed
    reason = "Duplicate of an earlier\nfinding."
    r = client.post("/records/M2/reject", data={"csrf": stale, "reason": reason, "next": "/"})

    # Then nothing is written, and it is back on the page, told why in plain words
    assert (r.status_code, r.headers["location"]) == (303, "/")
    assert desk.ledger.position == before
    page = client.get("/")
    text = text_of(page.text)
    assert "That form was on a page shown before you last signed in" in text
    assert "nothing was written" in text and "CSRF" not in text
    # And the reason typed is in M2's form again, to be sent with this session's token
    card = card_of(page.text, "M2")
    assert '<details class="reject" open>' in card
    box = re.search(r"<textarea[^>]*>(.*?)</textarea>", card, re.S)
    assert box is not None and html.unescape(box[1]) == reason
    r = client.post(
        "/records/M2/reject", data={"csrf": csrf_of(page.text), "reason": reason, "next": "/"}
    )
    assert desk.agent.get("M2").status.value == "REJECTED"


def test_a_form_sent_by_a_page_of_the_console_is_told_it_is_stale_not_forged(
    desk: Desk,
) -> None:
    # Given a signed-in reviewer (its session ended and began again where the
    # browser kept no earlier token: idle, or the server restarted)
    _seed(desk)
    client, _ = desk.signed_in("reviewer")
    before = desk.ledger.position
    # A form its browser says a page of this console sent, with another token
    r = client.post(
        "/records/E1/revoke",
        data={"csrf": "from-an-older-session", "reason": "source withdrawn", "preview": "x"},
        headers={"Sec-Fetch-Site": "same-origin"},
    )
    # is shown its page again (the revocation's preview), the reason kept
    assert (r.status_code, r.headers["location"]) == (303, "/records/E1/revoke")
    page = client.get(r.headers["location"]).text
    assert "shown before you last signed in" in text_of(page)
    assert "source withdrawn" in page
    # while one another origin of the site sent, or that says nothing, is refused as forged
    for headers in ({"Sec-Fetch-Site": "same-site"}, {}):
        r = client.post(
            "/records/E1/revoke",
            data={"csrf": "from-an-older-session", "reason": "x", "preview": "x"},
            headers=headers,
        )
        assert r.status_code == 403
        assert "CSRF check failed" in r.text
    assert desk.ledger.position == before


# -- a link followed while signed out ---------------------------------------------------------


def test_a_link_followed_while_signed_out_opens_its_page_after_sign_in(desk: Desk) -> None:
    _seed(desk)
    client = desk.browser()
    # When a signed-out browser follows a link to a record as of a position
    r = client.get("/records/R1", params={"as_of_position": "3"})
    # Then it is sent to sign in, the page it asked for kept
    assert r.status_code == 303
    split = urlsplit(r.headers["location"])
    assert split.path == "/"
    assert parse_qs(split.query) == {"next": ["/records/R1?as_of_position=3"]}
    page = client.get(r.headers["location"]).text
    assert '<input type="hidden" name="next" value="/records/R1?as_of_position=3">' in page
    # And signing in (once refused, the page kept all the same) opens it
    r = client.post(
        "/signin",
        data={"token": "plt_wrong", "csrf": csrf_of(page), "next": "/records/R1?as_of_position=3"},
    )
    assert r.status_code == 401
    assert 'name="next" value="/records/R1?as_of_position=3"' in r.text
    r = client.post(
        "/signin",
        data={
            "token": desk.tokens["reviewer"],
            "csrf": csrf_of(r.text),
            "next": "/records/R1?as_of_position=3",
        },
    )
    assert (r.status_code, r.headers["location"]) == (303, "/records/R1?as_of_position=3")
    assert "as of log position 3" in text_of(client.get(r.headers["location"]).text)


def test_a_page_whose_token_ended_returns_there_after_sign_in(desk: Desk) -> None:
    _seed(desk)
    client, _ = desk.signed_in("reviewer")
    desk.ledger.admin().revoke_token(desk.tokens["reviewer"])
    r = client.get("/records/R1")
    assert (r.status_code, r.headers["location"]) == (303, "/?next=%2Frecords%2FR1")
    page = client.get(r.headers["location"]).text
    assert "Your token is no longer valid" in text_of(page)
    assert '<input type="hidden" name="next" value="/records/R1">' in page


@pytest.mark.parametrize(
    "target", ["//evil.test/x", "/\\evil.test/x", "https://evil.test/", "/x\r\nSet-Cookie: a=b"]
)
def test_sign_in_never_returns_to_another_site(desk: Desk, target: str) -> None:
    client = desk.browser()
    page = client.get("/", params={"next": target}).text
    assert 'name="next"' not in page  # the sign-in form does not carry it
    r = client.post(
        "/signin", data={"token": desk.tokens["reviewer"], "csrf": csrf_of(page), "next": target}
    )
    assert (r.status_code, r.headers["location"]) == (303, "/")


# -- what pages are called ---------------------------------------------------------------------


def test_titles_tell_pages_apart_by_moment_claim_page_and_refusal(desk: Desk) -> None:
    # Given 60 candidates (two pages of the queue and of the records) and E1 → M1 → R1
    _seed(desk)
    past = desk.ledger.position
    desk.agent.propose_many(
        {"scope": "proj-a", "claim_key": f"bulk.{n:03d}", "value": n, "kind": Kind.FACT,
         "id": f"B{n:03d}"}
        for n in range(60)
    )  # fmt: skip
    client, _ = desk.signed_in("reviewer")

    # A record now and as of a past position
    assert title_of(client.get("/records/E1").text) == "Record E1 · provledger"
    then = client.get("/records/E1", params={"as_of_position": past}).text
    assert title_of(then) == f"Record E1 as of position {past} · provledger"
    # The claim explained
    explained = client.get("/explain", params={"scope": "proj-a", "claim_key": "api.retry_safe"})
    assert title_of(explained.text) == "Explain api.retry_safe in proj-a · provledger"
    assert title_of(client.get("/explain").text) == "Explain a claim · provledger"
    # The second page of the queue and of the records, each with a way to the first
    first = client.get("/", params={"scope": "proj-a"}).text
    assert title_of(first) == "Review queue in proj-a · provledger"
    more = re.search(r'href="(/\?scope=proj-a&amp;after=[^"]+)">More candidates', first)
    assert more is not None
    assert title_of(client.get(html.unescape(more[1])).text) == (
        "Review queue in proj-a, page 2 · provledger"
    )
    records = client.get("/records", params={"scope": "proj-a"}).text
    assert title_of(records) == "Records in proj-a · provledger"
    assert "First page" not in records
    following = re.search(r'href="([^"]+)">Next page</a>', records)
    assert following is not None
    second = client.get(html.unescape(following[1])).text
    assert title_of(second) == "Records in proj-a, page 2 · provledger"
    assert '<a href="/records?scope=proj-a">First page</a>' in second
    # A page that refuses keeps the name of the page asked for
    assert title_of(client.get("/records/NOPE").text) == "Not found: Record NOPE · provledger"
    refused = client.get("/records/E1", params={"as_of_position": "soon"}).text
    assert title_of(refused) == "Check the input: Record E1 · provledger"


# -- what pages say -----------------------------------------------------------------------------


def test_a_record_with_nothing_left_to_do_shows_no_actions(desk: Desk) -> None:
    # Given E1 revoked and S1 rejected, M1 STALE
    _seed(desk)
    desk.reviewer.revoke("E1", reason="doc changed")
    desk.ledger.authenticate(desk.tokens["reviewer-2"]).reject("S1", reason="not a rule")
    client, _ = desk.signed_in("reviewer-2")
    # Then neither of their pages has an Actions heading with nothing under it
    for rid in ("E1", "S1"):
        assert 'id="act-h"' not in client.get(f"/records/{rid}").text, rid
    # while a STALE record's page offers what can still be done
    page = client.get("/records/M1").text
    assert 'id="act-h"' in page and "Revalidate…" in page and "Revoke…" in page


def test_the_revocation_preview_counts_only_what_it_would_mark_stale(desk: Desk) -> None:
    # Given N1 resting on E1 and E2, STALE since E1 was revoked, and P1 on E2 alone
    _seed(desk)
    desk.agent.capture(scope="proj-a", uri="https://x.test/other", content=b"o", id="E2")
    desk.reviewer.accept("E2")
    for rid, parents in (("N1", ["E1", "E2"]), ("P1", ["E2"])):
        desk.agent.propose(
            scope="proj-a", claim_key=f"n.{rid}", value=1, kind=Kind.INFERENCE, parents=parents,
            id=rid,
        )  # fmt: skip
        desk.reviewer.accept(rid)
    desk.reviewer.revoke("E1", reason="doc changed")
    client, _ = desk.signed_in("reviewer-2")

    # When revoking E2 is previewed
    text = text_of(client.get("/records/E2/revoke").text)

    # Then only P1 is counted as what goes STALE; N1 is said to stay STALE
    marked = text[text.index("Will be marked STALE") : text.index("Already STALE")]
    assert marked.startswith("Will be marked STALE (1)")
    assert "P1 now ACCEPTED" in marked and "N1" not in marked
    already = text[text.index("Already STALE") : text.index("Deliveries that will owe")]
    assert already.startswith("Already STALE (1)")
    assert "N1" in already and "stay STALE" in already


def test_the_first_capture_of_a_source_is_not_said_to_replace_earlier_ones(desk: Desk) -> None:
    # Given the first capture of a source waiting for review
    desk.agent.capture(scope="proj-a", uri="https://x.test/new", content=b"n", id="F1")
    client, csrf = desk.signed_in("reviewer")
    # Then its card says nothing of replacing earlier captures (there are none)
    card = card_of(client.get("/").text, "F1")
    assert "earlier captures" not in card
    assert '<button type="submit" class="accept">Accept<' in card
    # And once accepted, neither does the message
    r = client.post("/records/F1/accept", data={"csrf": csrf, "next": "/"})
    text = text_of(client.get(r.headers["location"]).text)
    assert "Accepted F1." in text and "what it replaced" not in text


def test_a_graph_of_one_record_is_counted_as_one(desk: Desk) -> None:
    desk.agent.propose(scope="proj-a", claim_key="alone", value=1, kind=Kind.FACT, id="A1")
    client, _ = desk.signed_in("reviewer")
    text = text_of(client.get("/records/A1").text)
    assert "The one record in the graph (no edges)" in text
    assert "All 1 records" not in text
