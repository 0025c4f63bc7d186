"""Tokens named by their fingerprints: listed with their state, revoked without
the token itself (one by fingerprint, or all of a subject's), from the library
and from the command line, on every backend."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger import Ledger, TokenInfo
from ledger.access import ADMIN_PRINCIPAL, hash_token, token_fingerprint
from ledger.cli import main
from ledger.errors import (
    AuthenticationError,
    CorruptEventError,
    InvalidIdError,
    InvalidInputError,
    UnknownTokenError,
)
from tests.conftest import Clock


def _principals(led: Ledger) -> tuple[str, str, str]:
    """agent-1 with two tokens and reviewer with one; returns them in that order."""
    admin = led.admin()
    admin.grant("agent-1", "proj-a", ["read", "propose"])
    admin.grant("reviewer", "proj-a", ["read", "approve"])
    return admin.issue_token("agent-1"), admin.issue_token("agent-1"), admin.issue_token("reviewer")


def _log(led: Ledger) -> tuple[int, str]:
    """The log's position and the views' digest: what a refusal leaves as it was."""
    return led.position, led.views_digest()


def test_tokens_are_listed_by_fingerprint_with_their_state(
    open_ledger: Callable[..., Ledger], clock: Clock
) -> None:
    led = open_ledger()
    admin = led.admin()
    first, second, reviewer = _principals(led)
    brief = admin.issue_token("reviewer", expires=clock.now + timedelta(hours=1))
    admin.revoke_token(second)
    clock.advance(hours=2)

    listed = admin.tokens()
    assert all(isinstance(t, TokenInfo) for t in listed)
    assert [(t.fingerprint, t.subject, t.state) for t in listed] == [
        (token_fingerprint(first), "agent-1", "usable"),
        (token_fingerprint(second), "agent-1", "revoked"),
        (token_fingerprint(reviewer), "reviewer", "usable"),
        (token_fingerprint(brief), "reviewer", "expired"),
    ]
    assert token_fingerprint(first) == hash_token(first)[:12]
    assert listed[3].expires == clock.now - timedelta(hours=1)
    assert listed[1].revoked_position is not None and listed[0].revoked_position is None
    assert [t.issued_position for t in listed] == sorted(t.issued_position for t in listed)
    # No token text anywhere in what is listed.
    assert not any(tok in repr(listed) for tok in (first, second, reviewer, brief))

    assert [t.fingerprint for t in admin.tokens("agent-1")] == [
        token_fingerprint(first),
        token_fingerprint(second),
    ]
    assert admin.tokens("nobody") == ()
    # Admin tokens are the administrator's (@admin); none was issued on this ledger.
    assert admin.tokens(ADMIN_PRINCIPAL) == ()
    with pytest.raises(InvalidIdError, match="subject"):
        admin.tokens("bad subject!")


def test_a_token_is_revoked_by_its_fingerprint_and_only_that_one(
    open_ledger: Callable[..., Ledger],
) -> None:
    led = open_ledger()
    first, second, reviewer = _principals(led)
    # However much of it is given, the token's fingerprint is what comes back.
    assert led.admin().revoke_token(fingerprint=hash_token(first).upper()) == (
        token_fingerprint(first)
    )
    assert led.admin().revoke_token(reviewer) == token_fingerprint(reviewer)

    with pytest.raises(AuthenticationError, match="token of 'agent-1' was revoked"):
        led.authenticate(first)
    assert led.authenticate(second).principal == "agent-1"
    assert [t.state for t in led.admin().tokens()] == ["revoked", "usable", "revoked"]


def test_revoking_every_token_of_a_subject_leaves_its_grants_and_others_tokens(
    open_ledger: Callable[..., Ledger],
) -> None:
    led = open_ledger()
    first, second, reviewer = _principals(led)
    admin = led.admin()
    admin.revoke_token(first)
    before = led.position

    revoked = admin.revoke_tokens_of("agent-1")

    assert revoked == (token_fingerprint(second),)  # the one not revoked before
    assert led.position == before + 1
    with pytest.raises(AuthenticationError, match="revoked"):
        led.authenticate(second)
    assert led.authenticate(reviewer).principal == "reviewer"
    assert [g.role for g in admin.access_history("agent-1") if g.revoked_at is None] == [
        "propose",
        "read",
    ]
    # A token issued afterwards works: the subject is not banned, its tokens are gone.
    assert led.authenticate(admin.issue_token("agent-1")).principal == "agent-1"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a, f: a.revoke_token(fingerprint="12345"), "not 8 to 64 hex digits"),
        (lambda a, f: a.revoke_token(fingerprint="zz345678"), "not 8 to 64 hex digits"),
        (lambda a, f: a.revoke_token(fingerprint="0" * 65), "not 8 to 64 hex digits"),
        (lambda a, f: a.revoke_token(fingerprint=12345678), "not 8 to 64 hex digits"),
        (lambda a, f: a.revoke_token(fingerprint="%" * 8), "not 8 to 64 hex digits"),
        (lambda a, f: a.revoke_token(fingerprint="ffffffffffff"), "no token has fingerprint"),
        (lambda a, f: a.revoke_token(fingerprint=f), "already revoked"),
        (lambda a, f: a.revoke_token(), "not both or neither"),
        (lambda a, f: a.revoke_token("plt_x", fingerprint=f), "not both or neither"),
        (lambda a, f: a.revoke_tokens_of("nobody"), "'nobody' holds no token"),
        (lambda a, f: a.revoke_tokens_of("reviewer"), "'reviewer' holds no token"),
        (lambda a, f: a.revoke_tokens_of(ADMIN_PRINCIPAL), "admin tokens are revoked one"),
        (lambda a, f: a.revoke_tokens_of("admin"), "admin tokens are revoked one"),
    ],
    ids=[
        "short",
        "not-hex",
        "too-long",
        "not-text",
        "wildcards",
        "unknown",
        "revoked",
        "neither",
        "both",
        "no-tokens",
        "all-revoked",
        "admin",
        "admin-by-name",
    ],
)
def test_a_refused_revocation_names_why_and_writes_nothing(
    open_ledger: Callable[..., Ledger],
    call: Callable[..., object],
    message: str,
) -> None:
    led = open_ledger()
    first, _second, reviewer = _principals(led)
    admin = led.admin()
    admin.revoke_token(reviewer)
    before = _log(led)

    with pytest.raises((InvalidInputError, InvalidIdError), match=message):
        call(admin, token_fingerprint(reviewer))

    assert _log(led) == before
    assert led.authenticate(first).principal == "agent-1"


def test_a_fingerprint_naming_two_tokens_is_refused_naming_their_subjects(
    tmp_path: Path,
) -> None:
    # Two tokens whose hashes share 8 digits are too rare to issue: the second is a
    # row of the view alone, which the look-up goes by. Its ninth digit differs, so
    # nine digits name one token whatever the first token's hash.
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with Ledger.open(url) as led:
        first, _second, _reviewer = _principals(led)
        ninth = hash_token(first)[8]
        twin = hash_token(first)[:8] + ("0" if ninth != "0" else "1") + "f" * 55
        with closing(sqlite3.connect(tmp_path / "x.db")) as db, db:
            db.execute(
                "INSERT INTO pl_tokens (token_hash, subject, issued_pos, issued_at) "
                "VALUES (?, 'agent-2', 1, 0)",
                (twin,),
            )
        before = _log(led)
        with pytest.raises(
            InvalidInputError,
            match=r"fingerprint '[0-9a-f]{8}' names 2 tokens \(of 'agent-1', 'agent-2'\): give",
        ):
            led.admin().revoke_token(fingerprint=hash_token(first)[:8])
        assert _log(led) == before
        # Enough digits name one.
        led.admin().revoke_token(fingerprint=hash_token(first)[:9])
        with pytest.raises(AuthenticationError, match="revoked"):
            led.authenticate(first)


def test_the_last_usable_admin_token_is_not_revoked_by_fingerprint(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with Ledger.open(url) as led:
        only = led.admin().bootstrap_admin_token()
        assert only is not None
        (listed,) = led.admin().tokens(ADMIN_PRINCIPAL)
        assert listed.fingerprint == token_fingerprint(only)
        assert led.admin().tokens("admin") == (listed,)  # as messages name it
        with pytest.raises(InvalidInputError, match="last admin token"):
            led.admin().revoke_token(fingerprint=listed.fingerprint)
        assert led.admin(only).tokens(ADMIN_PRINCIPAL)[0].state == "usable"
        # With another, it goes; a second time, the message names the administrator
        # as everything else does.
        led.admin().issue_admin_token()
        led.admin().revoke_token(fingerprint=listed.fingerprint)
        with pytest.raises(InvalidInputError, match=r"of 'admin' is already revoked \(at log"):
            led.admin().revoke_token(fingerprint=listed.fingerprint)


# -- the command line ---------------------------------------------------------------------


def _run(*args: str, stdin: str | None = None) -> Result:
    env: dict[str, str | None] = {
        "PROVLEDGER_URL": None,
        "PROVLEDGER_TOKEN": None,
        "PROVLEDGER_ADMIN_TOKEN": None,
    }
    return CliRunner().invoke(main, list(args), env=env, input=stdin)


def _ok(*args: str) -> Result:
    result = _run(*args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


@pytest.fixture
def cli_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    _ok("init", "--url", url)
    _ok("grant", "agent-1", "--scope", "proj-a", "--roles", "read", "--url", url)
    return url


def test_token_list_shows_fingerprints_and_states_never_tokens(cli_url: str) -> None:
    issued = [_ok("token", "issue", "agent-1", "--url", cli_url).stdout.strip() for _ in range(2)]
    _ok("token", "revoke", "--fingerprint", token_fingerprint(issued[0]), "--url", cli_url)

    data = json.loads(_ok("token", "list", "--url", cli_url, "--json").stdout)
    assert [(t["fingerprint"], t["subject"], t["state"]) for t in data["tokens"]] == [
        (data["tokens"][0]["fingerprint"], "admin", "usable"),
        (token_fingerprint(issued[0]), "agent-1", "revoked"),
        (token_fingerprint(issued[1]), "agent-1", "usable"),
    ]
    text = _ok("token", "list", "--url", cli_url).stdout
    assert token_fingerprint(issued[1]) in text and "revoked (position" in text
    assert "admin" in text and not any(tok in text for tok in issued)
    usable = json.loads(
        _ok("token", "list", "--subject", "agent-1", "--usable", "--url", cli_url, "--json").stdout
    )
    assert [t["fingerprint"] for t in usable["tokens"]] == [token_fingerprint(issued[1])]
    admins = json.loads(
        _ok("token", "list", "--subject", "admin", "--url", cli_url, "--json").stdout
    )
    assert [t["subject"] for t in admins["tokens"]] == ["admin"]
    none = _ok("token", "list", "--subject", "agent-2", "--url", cli_url).stdout
    assert none == "no tokens of agent-2\n"


def test_token_revoke_by_fingerprint_reports_the_fingerprint_however_given(
    cli_url: str,
) -> None:
    issued = _ok("token", "issue", "agent-1", "--url", cli_url).stdout.strip()
    whole = f" {hash_token(issued).upper()} "
    out = _ok("token", "revoke", "--fingerprint", whole, "--url", cli_url, "--json").stdout
    assert json.loads(out)["fingerprints"] == [token_fingerprint(issued)]
    refused = _run("token", "revoke", "--all-of", "admin", "--url", cli_url)
    assert refused.exit_code == 1
    assert "admin tokens are revoked one at a time" in refused.stderr


def test_token_revoke_all_of_a_subject_from_the_command_line(cli_url: str) -> None:
    issued = [_ok("token", "issue", "agent-1", "--url", cli_url).stdout.strip() for _ in range(2)]
    out = _ok("token", "revoke", "--all-of", "agent-1", "--url", cli_url, "--json").stdout
    assert json.loads(out)["fingerprints"] == [token_fingerprint(t) for t in issued]
    text = _run("token", "revoke", "--all-of", "agent-1", "--url", cli_url)
    assert text.exit_code == 1
    assert (
        text.stderr == "error: token revoke refused: 'agent-1' holds no token that is not revoked\n"
    )
    with Ledger.open(cli_url) as led:
        for tok in issued:
            with pytest.raises(AuthenticationError, match="revoked"):
                led.authenticate(tok)


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("plt_x", "--fingerprint", "0123456789ab"),
        ("--fingerprint", "0123456789ab", "--all-of", "agent-1"),
    ],
    ids=["none", "token-and-fingerprint", "fingerprint-and-subject"],
)
def test_token_revoke_takes_exactly_one_way_of_naming_tokens(
    cli_url: str, args: tuple[str, ...]
) -> None:
    result = _run("token", "revoke", *args, "--url", cli_url)
    assert result.exit_code == 2
    assert "give one of TOKEN" in result.stderr


def test_a_revocation_deleted_from_the_log_does_not_bring_its_admin_token_back(
    tmp_path: Path,
) -> None:
    # Each event's Merkle leaf vouches for it; an event deleted with its leaf leaves
    # a gap in its principal's versions, which the token check refuses.
    db = tmp_path / "x.db"
    with Ledger.open(f"sqlite:///{db}") as led:
        host = led.admin()
        first = host.issue_admin_token()
        host.issue_admin_token()
        host.revoke_token(first)
        host.issue_admin_token()
    with closing(sqlite3.connect(db)) as con, con:
        (revoked,) = con.execute(
            "SELECT rowid FROM stored_events WHERE topic LIKE '%TokenRevoked'"
        ).fetchone()
        triggers = con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%no_delete'"
        ).fetchall()
        for (trigger,) in triggers:
            con.execute(f"DROP TRIGGER {trigger}")
        con.execute("DELETE FROM pl_merkle_leaves WHERE position = ?", (revoked,))
        con.execute("DELETE FROM stored_events WHERE rowid = ?", (revoked,))
    with (
        Ledger.open(f"sqlite:///{db}") as led,
        pytest.raises(CorruptEventError, match="lacks version 4 of the events of '@admin'"),
    ):
        led.admin(first)


def test_a_token_never_issued_is_told_apart_from_one_revoked_or_expired(
    open_ledger: Callable[..., Ledger], clock: Clock
) -> None:
    led = open_ledger()
    first, _, reviewer = _principals(led)
    admin = led.admin()
    brief = admin.issue_token("reviewer", expires=clock.now + timedelta(hours=1))
    admin.revoke_token(first)
    clock.advance(hours=2)

    with pytest.raises(UnknownTokenError, match="token is unknown"):
        led.authenticate("plt_never-issued")
    with pytest.raises(UnknownTokenError, match="admin token is unknown"):
        led.admin("plt_never-issued")
    with pytest.raises(UnknownTokenError, match="unknown"):
        admin.revoke_token("plt_never-issued")
    # Revoked and expired tokens were issued: they raise the parent class only.
    for issued, said in ((first, "was revoked"), (brief, "expired")):
        with pytest.raises(AuthenticationError, match=said) as refused:
            led.authenticate(issued)
        assert not isinstance(refused.value, UnknownTokenError)
    # A principal's token given as the admin token is known: it is whose it is.
    with pytest.raises(AuthenticationError, match="belongs to 'reviewer'") as wrong:
        led.admin(reviewer)
    assert not isinstance(wrong.value, UnknownTokenError)
