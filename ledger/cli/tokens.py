"""Token commands: issue bearer tokens, list them by fingerprint, revoke them.

Only a token's sha256 is stored, as an event; the token itself is printed once.
A token is named afterwards by its fingerprint, the first 12 hex digits of that
hash (``ledger.access.token_fingerprint``), so one that nobody kept can still be
found and revoked.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import datetime

import click

from ledger.access import NEVER_ISSUED, subject_named, token_fingerprint
from ledger.cli.failures import errors_exit_1
from ledger.cli.options import (
    DATETIME,
    admin_options,
    host_ledger,
    json_option,
    printable,
)
from ledger.cli.parsing import CheckedGroup
from ledger.cli.render import echo_json, make_console, new_table, report_done, show, when_text
from ledger.errors import AccessDeniedError, InvalidInputError, LedgerError

__all__ = ["token"]


@click.group(cls=CheckedGroup)
def token() -> None:
    """Issue, list and revoke bearer tokens (principals' and admin tokens).

    Admin: see `provledger init` for the admin token. Only a token's sha256 is
    stored, as an event; the token itself is printed once. Listings name each
    token by its fingerprint (the first 12 hex digits of that hash).

    \b
    Example:
      provledger token issue agent-1
      provledger token list --subject agent-1
    """


@token.command("issue")
@click.argument("subject", required=False)
@click.option("--expires", type=DATETIME, help="When the token stops working (ISO 8601).")
@click.option("--admin", "for_admin", is_flag=True, help="Issue another admin token instead.")
@click.option("--force", is_flag=True, help="Issue it even though SUBJECT holds no role yet.")
@admin_options
@json_option
@errors_exit_1
def token_issue(
    subject: str | None,
    expires: datetime | None,
    for_admin: bool,
    force: bool,
    url: str | None,
    admin_token: str | None,
    as_json: bool,
) -> None:
    """Issue a bearer token for SUBJECT and print it (nothing else goes to stdout;
    with --json, its fingerprint too).

    SUBJECT must hold a role somewhere (`provledger grant`) unless --force.

    \b
    Example:
      AGENT=$(provledger token issue agent-1)
      provledger token issue --admin --expires 2027-01-01T00:00:00+00:00
    """
    if for_admin == (subject is not None):
        raise click.UsageError(
            "give SUBJECT or --admin, not both or neither (e.g. provledger token issue agent-1)"
        )
    with host_ledger(url, "token issue", admin_token) as led:
        admin = led.admin()
        if subject is None:
            issued = admin.issue_admin_token(expires=expires)
        else:
            held = [g for g in admin.access_history(subject=subject) if g.revoked_position is None]
            if not held and not force:
                raise AccessDeniedError(
                    f"token issue refused: {subject!r} holds no role in any scope; grant one "
                    f"first (provledger grant {subject} --scope SCOPE --roles read) or add --force"
                )
            issued = admin.issue_token(subject, expires=expires)
    who = "admin" if subject is None else subject
    data = {
        "subject": who,
        "token": issued,
        "fingerprint": token_fingerprint(issued),
        "expires": expires,
    }
    report_done(as_json, data, issued)
    if not as_json:  # stdout holds the token alone (``AGENT=$(…)``): the rest on stderr
        until = f"expires {expires.isoformat()}" if expires else "no expiry"
        click.echo(
            f"issued a token to {printable(who)} (fingerprint {data['fingerprint']}, "
            f"{until}); it is on stdout, shown this once: `provledger token list` and "
            "`token revoke --fingerprint` know it by its fingerprint",
            err=True,
        )


#: The longest line `token revoke -` reads (a token is far shorter).
_LINE_MOST = 4096


def _token_from_stdin() -> str:
    """The token `token revoke -` reads: the first line of standard input, refused
    before the ledger is opened when there is none (not taken for an unknown token)."""
    if sys.stdin is None:  # started with stdin closed (``<&-``), as `capture -`
        raise click.BadParameter(
            "-: standard input is closed (pipe the token in, or give it as TOKEN)",
            param_hint="TOKEN",
        )
    line = sys.stdin.readline(_LINE_MOST + 1).strip()  # an endless input is no line
    if len(line) > _LINE_MOST:
        raise InvalidInputError(
            f"the first line of standard input is longer than {_LINE_MOST} characters: "
            "no token (token revoke - reads one line)"
        )
    if not line:  # empty input, or a blank first line
        raise InvalidInputError("no token on standard input (token revoke - reads one line)")
    return line


@token.command("revoke")
@click.argument("token_value", metavar="[TOKEN]", required=False)
@click.option(
    "--fingerprint",
    metavar="FP",
    help="Revoke the token of this fingerprint (`provledger token list`; 8 or more of "
    "its first hex digits) instead.",
)
@click.option(
    "--all-of",
    "all_of",
    metavar="SUBJECT",
    help="Revoke every token of SUBJECT not yet revoked instead (its grants stay).",
)
@admin_options
@json_option
@errors_exit_1
def token_revoke(
    token_value: str | None,
    fingerprint: str | None,
    all_of: str | None,
    url: str | None,
    admin_token: str | None,
    as_json: bool,
) -> None:
    """Withdraw TOKEN; commands using it are refused from now on. TOKEN "-" reads
    it from standard input (its first line), out of other users' sight (`ps`).
    A token nobody kept is named by its fingerprint (--fingerprint), or revoked
    with all of its subject's (--all-of).

    \b
    Example:
      printf '%s\\n' "$AGENT" | provledger token revoke -
      provledger token revoke --fingerprint 3f2a9c0d41b7
      provledger token revoke --all-of agent-1
    """
    if sum(given is not None for given in (token_value, fingerprint, all_of)) != 1:
        raise click.UsageError(
            "give one of TOKEN (or - to read it from standard input), --fingerprint FP "
            "and --all-of SUBJECT"
        )
    shown = token_value not in (None, "-")  # in the process list while this runs
    if token_value == "-":
        token_value = _token_from_stdin()
    elif token_value is not None and not token_value.strip():
        raise InvalidInputError(
            f"token revoke refused: TOKEN {token_value!r} is empty; give the token to "
            "withdraw, or - to read it from standard input"
        )
    try:
        with host_ledger(url, "token revoke", admin_token) as led:
            admin = led.admin()
            if all_of is not None:
                revoked = list(admin.revoke_tokens_of(all_of))
            else:
                revoked = [admin.revoke_token(token_value, fingerprint=fingerprint)]
            position = led.position
    except (LedgerError, click.ClickException, KeyboardInterrupt) as exc:
        if shown and str(exc) != NEVER_ISSUED:  # revoked, it would have been harmless
            click.echo(
                "warning: TOKEN was on the command line, visible to other users (ps, "
                "/proc/PID/cmdline) while this ran; if it still works, revoke it with - "
                "and the token on standard input",
                err=True,
            )
        raise
    line = f"{len(revoked)} tokens revoked" if len(revoked) > 1 else "token revoked"
    report_done(
        as_json,
        {"revoked": True, "fingerprints": revoked, "position": position},
        f"{line} ({', '.join(revoked)})",
    )


@token.command("list")
@click.option("--subject", help="Only this principal's tokens (admin: the admin tokens).")
@click.option("--usable", is_flag=True, help="Only the tokens neither revoked nor expired.")
@admin_options
@json_option
@errors_exit_1
def token_list(
    subject: str | None, usable: bool, url: str | None, admin_token: str | None, as_json: bool
) -> None:
    """Show every token issued, oldest first, by fingerprint (the tokens themselves
    are not kept): whose, issued when, expiring when, and whether it is usable,
    expired or revoked.

    Admin: see `provledger init` for the admin token.

    \b
    Example:
      provledger token list --subject agent-1 --usable
    """
    with host_ledger(url, "token list", admin_token) as led:
        tokens = [t for t in led.admin().tokens(subject) if not usable or t.state == "usable"]
    if as_json:
        echo_json({"tokens": [replace(t, subject=subject_named(t.subject)) for t in tokens]})
        return
    console = make_console()
    if not tokens:
        console.print(
            ("no usable tokens" if usable else "no tokens")
            + ("" if subject is None else f" of {subject}")
        )
        return
    table = new_table(
        "fingerprint",
        "subject",
        "issued",
        "expires",
        "state",
        ids={"subject": [subject_named(t.subject) for t in tokens]},
    )
    for t in tokens:
        state = t.state
        if t.revoked_position is not None:
            state += f" (position {t.revoked_position})"
        table.add_row(
            t.fingerprint,
            subject_named(t.subject),
            f"{when_text(t.issued_at)} (position {t.issued_position})",
            when_text(t.expires),
            state,
        )
    show(console, table)
