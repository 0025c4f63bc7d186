"""The review console's ways in and out: a moment the ledger refuses, a refused form
tied to its field, a form from a page shown before signing in again, a link
followed while signed out, titles that tell pages apart, and what the pages say
of captures, revocations and paging.

Driven over HTTP against the ASGI app, as ``tests/test_serve_console.py`` does,
and the last few on a real server (uvicorn on a loopback port); on every backend.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from ledger import Kind
from ledger.serve.sessions import COOKIE
from tests import test_serve_console
from tests.serve_support import running
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
    # (the message takes the keyboard's focus, as what became of any form does)
    told = re.search(r'<p class="flash error"[^>]*id="result" tabindex="-1" autofocus>', page.text)
    assert told is not None and "shown before you last signed in" in page.text[told.end() :]
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
    # is shown its page again (the revocation's preview), the reason not kept: the
    # page may have been another principal's, on a shared machine
    assert (r.status_code, r.headers["location"]) == (303, "/records/E1/revoke")
    page = client.get(r.headers["location"]).text
    assert "shown before you last signed in" in text_of(page)
    assert "not filled in again" in text_of(page)
    assert "source withdrawn" not in page
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


# -- found in review: on a real server ----------------------------------------------------------


@dataclass
class Served:
    """The desk's console on a real server (uvicorn on a loopback port), and the
    browsers (cookie jars) opened on it."""

    desk: Desk
    base: str
    opened: list[httpx.Client] = field(default_factory=list)

    def browser(self) -> httpx.Client:
        """A new client with its own cookie jar (no redirects followed)."""
        client = httpx.Client(base_url=self.base, follow_redirects=False)
        self.opened.append(client)
        return client

    def sign_in(self, client: httpx.Client, who: str) -> str:
        """Sign ``client`` in as ``who``; its session's CSRF token."""
        page = client.get("/")
        data = {"token": self.desk.tokens[who], "csrf": csrf_of(page.text)}
        assert client.post("/signin", data=data).status_code == 303
        queue = client.get("/").text
        assert f"Signed in as <strong>{who}</strong>" in queue
        return csrf_of(queue)

    def signed_in(self, who: str) -> tuple[httpx.Client, str]:
        """A new browser signed in as ``who``, and its session's CSRF token."""
        client = self.browser()
        return client, self.sign_in(client, who)


@pytest.fixture
def served(desk: Desk) -> Iterator[Served]:
    with running(desk.app) as base:
        found = Served(desk, base)
        try:
            yield found
        finally:
            for client in found.opened:
                client.close()


def test_a_capture_whose_id_a_scope_unseen_took_is_not_said_to_replace_earlier_ones(
    desk: Desk, served: Served
) -> None:
    # Given Z1 taken in scope secret, and agent-2 (proj-a only) capturing a source
    # as Z1 in proj-a for the first time there (stored as Z1@@proj-a)
    admin = desk.ledger.admin()
    admin.grant("agent-1", scope="secret", roles=["propose", "read"])
    admin.grant("agent-2", scope="proj-a", roles=["propose", "read"])
    agent_2 = desk.ledger.authenticate(admin.issue_token("agent-2"))
    desk.agent.capture(scope="secret", uri="https://x.test/coll", content=b"s", id="Z1")
    agent_2.capture(scope="proj-a", uri="https://x.test/coll", content=b"p", id="Z1")
    # When a reviewer with no grant in secret (shown it as Z1) reviews it
    client, csrf = served.signed_in("reviewer")
    card = card_of(client.get("/").text, "Z1")

    # Then its card says nothing of replacing earlier captures (there are none)
    assert "earlier captures" not in card and 'id="replacing-Z1"' not in card
    # And once accepted, neither does the message
    r = client.post("/records/Z1/accept", data={"csrf": csrf, "next": "/"})
    text = text_of(client.get(r.headers["location"]).text)
    assert "Accepted Z1." in text and "what it replaced" not in text
    # While a later capture of that source holding other bytes is said to replace it
    agent_2.capture(scope="proj-a", uri="https://x.test/coll", content=b"p2", id="Z2")
    page = client.get("/").text
    assert "replaces the earlier captures of its source" in text_of(card_of(page, "Z2"))
    r = client.post("/records/Z2/accept", data={"csrf": csrf_of(page), "next": "/"})
    text = text_of(client.get(r.headers["location"]).text)
    assert "Accepted Z2; what it replaced is SUPERSEDED" in text
    assert desk.reviewer.get("Z1").status.value == "SUPERSEDED"


def _counts_of(preview: str) -> tuple[str, str]:
    """The headings of a revocation preview's two counts, as a reader sees them."""
    text = text_of(preview)
    marked = re.search(r"Will be marked STALE \(([^)]*)\)", text)
    already = re.search(r"Already STALE \(([^)]*)\)", text)
    assert marked is not None and already is not None, text
    return marked[1], already[1]


def _revoke_as_previewed(client: httpx.Client, record_id: str) -> tuple[str, str]:
    """Preview revoking ``record_id`` and confirm it: the preview, and the message after."""
    preview = client.get(f"/records/{record_id}/revoke").text
    mark = re.search(r'name="preview" value="([0-9a-f]+)"', preview)
    assert mark is not None
    data = {"csrf": csrf_of(preview), "reason": "source withdrawn", "preview": mark[1]}
    r = client.post(f"/records/{record_id}/revoke", data=data)
    assert r.status_code == 303
    return preview, text_of(client.get(r.headers["location"]).text)


def _ops_unread(desk: Desk) -> None:
    """agent-1 proposing in scope ops, and reviewer-2 approving there without ``read``."""
    admin = desk.ledger.admin()
    admin.grant("agent-1", scope="ops", roles=["propose", "read"])
    admin.grant("reviewer-2", scope="ops", roles=["approve"])


def test_a_revocation_preview_and_its_result_count_alike(desk: Desk, served: Served) -> None:
    # Given E1 under D1 and D2 (STALE already: they rest on E2 too, revoked), D3 and
    # D4, and O1 and O2 in scope ops, which reviewer-2 may act in but not read
    _ops_unread(desk)
    for rid in ("E1", "E2"):
        desk.agent.capture(
            scope="proj-a", uri=f"https://x.test/{rid}", content=rid.encode(), id=rid
        )
        desk.reviewer.accept(rid)
    for scope, rid, parents in (
        ("proj-a", "D1", ["E1", "E2"]), ("proj-a", "D2", ["E1", "E2"]),
        ("proj-a", "D3", ["E1"]), ("proj-a", "D4", ["E1"]),
        ("ops", "O1", ["E1"]), ("ops", "O2", ["E1", "E2"]),
    ):  # fmt: skip
        desk.agent.propose(
            scope=scope, claim_key=f"d.{rid}", value=1, kind=Kind.INFERENCE, parents=parents,
            id=rid,
        )  # fmt: skip
    desk.reviewer.revoke("E2", reason="doc changed")
    client, _ = served.signed_in("reviewer-2")

    # When reviewer-2 previews revoking E1 and confirms it
    preview, after = _revoke_as_previewed(client, "E1")

    # Then the preview counts the two it marks STALE, the two STALE already apart,
    # and the two it may not read by scope
    assert _counts_of(preview) == ("2", "2")
    assert "Not listed: 2 more in scope ops, which you may act in but not read." in (
        text_of(preview)
    )
    # And the message after says the same
    assert (
        "Revoked E1; 2 records you can see marked STALE (2 more were STALE already and "
        "stay so), 2 more in scope ops, which you may act in but not read."
    ) in after
    assert {desk.reviewer.get(r).status.value for r in ("D1", "D2", "D3", "D4")} == {"STALE"}


def test_a_revocation_preview_past_its_first_page_counts_as_its_result(
    desk: Desk, served: Served
) -> None:
    # Given E1 under 215 candidates in proj-a: 5 STALE already (on E2 too, revoked),
    # then 200 more, then 10 more STALE already; and 3 in scope ops (one STALE
    # already), which reviewer-2 may act in but not read
    _ops_unread(desk)
    for rid in ("E1", "E2"):
        desk.agent.capture(
            scope="proj-a", uri=f"https://x.test/{rid}", content=rid.encode(), id=rid
        )
        desk.reviewer.accept(rid)
    batches = [
        ("proj-a", 5, ["E1", "E2"]),
        ("proj-a", 200, ["E1"]),
        ("proj-a", 10, ["E1", "E2"]),
        ("ops", 2, ["E1"]),
        ("ops", 1, ["E1", "E2"]),
    ]
    for b, (scope, count, parents) in enumerate(batches):
        desk.agent.propose_many(
            {"scope": scope, "claim_key": f"leaf.{b}.{n:03d}", "value": n,
             "kind": Kind.INFERENCE, "parents": parents, "id": f"L{b}-{n:03d}"}
            for n in range(count)
        )  # fmt: skip
    desk.reviewer.revoke("E2", reason="doc changed")
    client, _ = served.signed_in("reviewer-2")

    # When reviewer-2 previews revoking E1 and confirms it
    preview, after = _revoke_as_previewed(client, "E1")

    # Then the preview counts every one of the 200 it marks STALE (195 listed) and the
    # 15 STALE already (5 listed), and says what the 15 after the first 200 are
    assert _counts_of(preview) == ("200; 195 listed", "15; 5 listed")
    text = text_of(preview)
    assert (
        "Not listed: 15 more after the first 200 (5 to be marked STALE, 10 STALE already)."
    ) in text
    assert "Not listed: 3 more in scope ops, which you may act in but not read." in text
    assert preview.count('href="/records/L1-') == 195
    # And the message after counts the same
    assert (
        "Revoked E1; 200 records you can see marked STALE (15 more were STALE already and "
        "stay so), 3 more in scope ops, which you may act in but not read."
    ) in after


def test_a_tab_of_the_principal_signed_in_before_gives_the_next_one_nothing(
    desk: Desk, served: Served
) -> None:
    # Given the reviewer's tab showing the queue, the reviewer signed out since and
    # reviewer-2 signed in, in the same browser (a shared machine)
    _seed(desk)
    client, stale = served.signed_in("reviewer")
    client.post("/signout", data={"csrf": stale})
    served.sign_in(client, "reviewer-2")
    before = desk.ledger.position
    reason = "The reviewer's own words"

    # When the reviewer's tab sends a rejection with its reason typed
    r = client.post("/records/M2/reject", data={"csrf": stale, "reason": reason, "next": "/"})

    # Then it is refused as any form of another session is
    assert r.status_code == 403 and "CSRF check failed" in r.text
    # And sent by a browser that says a page of this console sent it, the page is
    # shown again, but without the reviewer's text
    r = client.post(
        "/records/M2/reject",
        data={"csrf": stale, "reason": reason, "next": "/"},
        headers={"Sec-Fetch-Site": "same-origin"},
    )
    assert (r.status_code, r.headers["location"]) == (303, "/")
    page = client.get("/").text
    assert reason not in html.unescape(page)
    assert "Signed in as <strong>reviewer-2</strong>" in page
    text = text_of(page)
    assert "shown before you last signed in" in text and "not filled in again" in text
    assert '<details class="reject" open>' not in card_of(page, "M2")
    assert desk.ledger.position == before
    # While a tab of reviewer-2's own earlier session still gets its text back
    served.sign_in(client, "reviewer-2")
    r = client.post("/records/M2/reject", data={"csrf": csrf_of(page), "reason": reason})
    assert r.status_code == 303
    assert reason in html.unescape(client.get("/").text)
    assert desk.ledger.position == before


def test_an_earlier_token_is_refused_when_the_browser_says_another_origin_sent_it(
    desk: Desk, served: Served
) -> None:
    # Given a tab from before the reviewer last signed in
    _seed(desk)
    client, stale = served.signed_in("reviewer-2")
    client.post("/signout", data={"csrf": stale})
    current = served.sign_in(client, "reviewer-2")
    before = desk.ledger.position

    for site in ("same-site", "cross-site"):
        # When a form with its token comes, the browser saying another origin sent it
        sent = {"Sec-Fetch-Site": site}
        for token in (stale, current):
            data = {"csrf": token, "reason": "not mine", "next": "/"}
            r = client.post("/records/M2/reject", data=data, headers=sent)
            # Then it is refused, whatever its token, setting no cookie
            assert r.status_code == 403 and "CSRF check failed" in r.text, (site, token)
            assert "set-cookie" not in r.headers
        assert client.post("/signout", data={"csrf": stale}, headers=sent).status_code == 403

    # And nothing was written or kept; the reviewer is still signed in
    page = client.get("/").text
    assert "Signed in as <strong>reviewer-2</strong>" in page
    assert "not mine" not in page and "shown before" not in page
    assert desk.ledger.position == before
    # While this console's own pages (or the reader) are taken as ever
    for site in ("same-origin", "none"):
        r = client.post(
            "/records/M2/reject",
            data={"csrf": current, "reason": "not a finding", "next": "/"},
            headers={"Sec-Fetch-Site": site},
        )
        assert r.status_code == 303
    assert desk.agent.get("M2").status.value == "REJECTED"


def test_a_sign_in_another_origin_sends_is_refused_even_with_this_browsers_cookie(
    desk: Desk,
) -> None:
    # Given a browser signed in as reviewer, and a sign-in form built from a session
    # another site (a sibling port or host name) planted: its cookie and form token
    client, _ = desk.signed_in("reviewer")
    planted = desk.browser()
    form_token = csrf_of(planted.get("/").text)
    cookie = planted.cookies.get(COOKIE)
    assert cookie is not None
    for site in ("same-site", "cross-site"):
        # When the browser says another origin sent that form, with the agent's token
        r = client.post(
            "/signin",
            data={"csrf": form_token, "token": desk.tokens["agent-1"]},
            headers={"Sec-Fetch-Site": site},
            cookies={COOKIE: cookie},
        )
        # Then nobody is signed in by it, and no cookie is set
        assert r.status_code == 403 and "Sign-in refused" in r.text, site
        assert "set-cookie" not in r.headers
    assert "Signed in as <strong>agent-1</strong>" not in planted.get("/").text
    # While the console's own sign-in page is taken as ever
    r = planted.post(
        "/signin",
        data={"csrf": form_token, "token": desk.tokens["agent-1"]},
        headers={"Sec-Fetch-Site": "same-origin"},
    )
    assert r.status_code == 303
    assert "Signed in as <strong>agent-1</strong>" in planted.get("/").text


def test_signing_out_from_a_tab_shown_before_signs_out(desk: Desk, served: Served) -> None:
    # Given a tab from before the reviewer last signed in
    client, stale = served.signed_in("reviewer")
    client.post("/signout", data={"csrf": stale})
    served.sign_in(client, "reviewer")

    # When its Sign out is pressed
    r = client.post("/signout", data={"csrf": stale})

    # Then the browser is signed out, and told so
    assert (r.status_code, r.headers["location"]) == (303, "/")
    page = client.get("/").text
    assert 'name="token"' in page and "Signed in as" not in page
    assert "Signed out." in text_of(page) and "send the form again" not in text_of(page)
    # As it is when a page of this console sent it with a token this browser never had
    served.sign_in(client, "reviewer")
    headers = {"Sec-Fetch-Site": "same-origin"}
    r = client.post("/signout", data={"csrf": "from-an-older-session"}, headers=headers)
    assert (r.status_code, r.headers["location"]) == (303, "/")
    assert 'name="token"' in client.get("/").text
    # And pressed again, once nobody is signed in, it says so (nothing to send again)
    r = client.post("/signout", data={"csrf": stale})
    assert (r.status_code, r.headers["location"]) == (303, "/")
    text = text_of(client.get("/").text)
    assert "You were signed out already: nobody is signed in." in text
    assert "send it again" not in text
