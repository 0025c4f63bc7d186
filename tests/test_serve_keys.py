"""Claim keys an earlier version stored in the review console: a key with a tab or a
line break, space at an end or in another normal form is shown as the command line
shows it (a JSON string, escaped beyond ASCII), so it looks like no other key; and
the explain page's form asks about the very key it shows.

On a copy of the 0.1.0 fixture ``tests/fixtures/ledger-0.1.0-keys.db`` (SQLite).
"""

from __future__ import annotations

import html
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ledger import Kind, Ledger
from ledger.serve import create_app
from ledger.serve.pages import environment
from ledger.validation import key_text
from tests.test_serve_console import card_of, csrf_of, prose_of, text_of

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FIXTURES = Path(__file__).parent / "fixtures"
ANSWERS = json.loads((FIXTURES / "ledger-0.1.0-keys.json").read_text())
#: The fixture's keys by record id: PLAIN and NFC as a new claim may have them.
KEYS: dict[str, str] = ANSWERS["keys"]
_ROW = re.compile(
    r'<a href="/records/([^"?]+)" class="rid">[^<]*</a></td>'
    r'<td [^>]*class="[^"]*\bkeyed">([^<]*)</td>'
)
_USABLE = re.compile(r'<tr><td><a href="/records/([^"?]+)" class="rid">.*?<td>(yes|no)</td>', re.S)
_CLAIM_FIELD = re.compile(r'<input id="e-claim" name="claim_key" value="([^"]*)"')


@pytest.fixture
def keys_ledger(tmp_path: Path) -> Iterator[tuple[Ledger, TestClient]]:
    """The fixture's copy with LF2, a new version of LF waiting for review, and
    LOOKALIKE, whose key reads "two lines"; and a client signed in as its reviewer."""
    path = tmp_path / "keys.db"
    shutil.copyfile(FIXTURES / "ledger-0.1.0-keys.db", path)
    with Ledger.open(f"sqlite:///{path}") as led:
        agent = led.authenticate(ANSWERS["tokens"]["agent-1"])
        agent.propose(
            scope="s", claim_key=KEYS["LF"], value=2, kind=Kind.FACT, supersedes="LF", id="LF2"
        )
        agent.propose(scope="s", claim_key="two lines", value=3, kind=Kind.FACT, id="LOOKALIKE")
        client = TestClient(create_app(led, mcp_factory=None), follow_redirects=False)
        client.post(
            "/signin",
            data={"csrf": csrf_of(client.get("/").text), "token": ANSWERS["tokens"]["reviewer"]},
        )
        yield led, client


def _explained(client: TestClient, claim_key: str) -> tuple[str, dict[str, str], str]:
    """The explain page's heading (up to its time), each record's "usable" cell, and
    the claim field."""
    page = client.get("/explain", params={"scope": "s", "claim_key": claim_key}).text
    heading = text_of(page[page.index('<h2 id="res-h">') :].split("</h2>")[0]).split(" at ")[0]
    field = _CLAIM_FIELD.search(page)
    assert field is not None
    return heading, dict(_USABLE.findall(page)), html.unescape(field.group(1))


def test_keys_an_earlier_version_took_are_shown_quoted_on_every_page(
    keys_ledger: tuple[Ledger, Any],
) -> None:
    _, client = keys_ledger
    # The console's rule is the command line's
    assert environment().filters["key"] is key_text
    shown = {rid: key_text(key) for rid, key in KEYS.items()}
    assert {rid for rid, text in shown.items() if text == KEYS[rid]} == {"PLAIN", "NFC"}
    assert shown["LF"] == '"two\\nlines"' and shown["NFD"] == '"cafe\\u0301"'

    # The records list: each key on its row as the command line shows it, LF apart
    # from the key that reads like it
    page = client.get("/records", params={"scope": "s"}).text
    rows = {rid: html.unescape(cell) for rid, cell in _ROW.findall(page)}
    assert {rid: rows[rid] for rid in KEYS} == shown
    assert rows["LOOKALIKE"] == "two lines" and rows["LF2"] == shown["LF"]

    # The record page: the claim key, the sentences naming the claim, the audit trail
    page = client.get("/records/LF").text
    assert '<dd class="mono wrap">&#34;two\\nlines&#34;</dd>' in page
    assert 'reads of s/"two\\nlines"' in text_of(page)
    assert 'claim_key "two\\nlines" kind' in text_of(page)  # the audit trail's Proposed
    assert "two\nlines" not in re.sub(r"<svg.*?</svg>", "", page, flags=re.S)

    # The queue card of its new version, the revocation preview, the explain heading
    card = card_of(client.get("/", params={"scope": "s"}).text, "LF2")
    assert '<a href="/records/LF2">&#34;two\\nlines&#34;</a></h3>' in card
    preview = prose_of(client.get("/records/LF/revoke").text)
    assert 'fact s/"two\\nlines", now ACCEPTED' in preview
    heading, _, _ = _explained(client, KEYS["NEL"])
    assert heading == 'FOUND s/"next\\u0085line"'


@pytest.mark.parametrize("rid", sorted(KEYS))
def test_the_explain_form_asks_about_the_very_key_it_shows(
    keys_ledger: tuple[Ledger, Any], rid: str
) -> None:
    _, client = keys_ledger
    # Given the explanation of a key as stored (the record page's link asks so)
    heading, usable, field = _explained(client, KEYS[rid])
    assert heading == f"FOUND s/{key_text(KEYS[rid])}"
    assert usable[rid] == "yes"
    # Then its form holds the key as shown, and sent again asks about the same key
    assert field == key_text(KEYS[rid])
    assert _explained(client, field) == (heading, usable, field)


def test_a_key_that_looks_quoted_is_found_as_typed_and_as_shown(
    keys_ledger: tuple[Ledger, Any],
) -> None:
    led, client = keys_ledger
    agent = led.authenticate(ANSWERS["tokens"]["agent-1"])
    reviewer = led.authenticate(ANSWERS["tokens"]["reviewer"])
    # A new key may start with a quote mark; the console quotes it to tell it apart
    agent.propose(scope="s", claim_key='"q"', value=1, kind=Kind.FACT, id="Q")
    reviewer.accept("Q")
    assert key_text('"q"') == '"\\"q\\""'
    for typed in ('"q"', '"\\"q\\""'):
        heading, usable, _ = _explained(client, typed)
        assert (heading, usable) == ('FOUND s/"\\"q\\""', {"Q": "yes"}), typed
    # So may one with a backslash: quoted, it is not taken for a key holding U+202E,
    # which a terminal writes out as \u202e
    agent.propose(scope="s", claim_key="evil\\u202ekey", value=1, kind=Kind.FACT, id="BS")
    reviewer.accept("BS")
    assert key_text("evil\\u202ekey") == '"evil\\\\u202ekey"'
    assert key_text("evil\u202ekey") == "evil\u202ekey"  # the real one, as it is
    heading, usable, _ = _explained(client, '"evil\\\\u202ekey"')
    assert (heading, usable) == ('FOUND s/"evil\\\\u202ekey"', {"BS": "yes"})
    # A record page's link to its claim asks about that claim, whatever its key
    agent.propose(scope="s", claim_key='"a\\\\b"', value=1, kind=Kind.FACT, id="Q1")
    agent.propose(scope="s", claim_key="a\\b", value=2, kind=Kind.FACT, id="Q2")
    for rid in ("Q1", "Q2"):
        link = re.search(
            r'<a href="(/explain\?[^"]+)">Explain every record', client.get(f"/records/{rid}").text
        )
        assert link is not None
        listed = re.findall(r'<a href="/records/(Q\d)"', client.get(html.unescape(link[1])).text)
        assert rid in listed and len(set(listed)) == 1, (rid, listed)
    # And the "two lines" look-alike is its own claim, not LF's
    _, usable, _ = _explained(client, "two lines")
    assert usable == {"LOOKALIKE": "no"}


_PREFIX_FIELD = re.compile(r'<input id="f-prefix" name="claim_prefix" value="([^"]*)"')


@pytest.mark.parametrize("rid", ["LF", "TAB", "PAD", "PLAIN"])
def test_the_records_filter_takes_a_key_as_shown_and_shows_it_so(
    keys_ledger: tuple[Ledger, Any], rid: str
) -> None:
    _, client = keys_ledger
    # Given the records whose key starts with the key as stored (explain's link)
    asked = client.get("/records", params={"scope": "s", "claim_prefix": KEYS[rid]}).text
    field = _PREFIX_FIELD.search(asked)
    assert field is not None
    # Then its filter shows the key as the pages show it, and sent again lists the same
    shown = html.unescape(field.group(1))
    assert shown == key_text(KEYS[rid])
    again = client.get("/records", params={"scope": "s", "claim_prefix": shown}).text
    listed = [found for found, _ in _ROW.findall(asked)]
    assert rid in listed and [found for found, _ in _ROW.findall(again)] == listed
