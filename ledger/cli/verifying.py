"""`provledger verify`: every check of a ledger, and its report."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from ledger.cli.failures import errors_exit_3, found_problem, warn_if_empty
from ledger.cli.options import admin_options, host_ledger, json_option
from ledger.cli.render import echo_json
from ledger.damage import Damage, damaged
from ledger.errors import CorruptEventError, LedgerError, StorageError, UnknownTokenError
from ledger.merkle import LogDigest, Verification
from ledger.verification import LATER_VIEWS

if TYPE_CHECKING:
    from ledger.application import Ledger


@click.command()
@click.option(
    "--against",
    "against",
    default=None,
    metavar="DIGEST",
    help="A digest printed earlier by `provledger digest`, or a signed head's JSON line.",
)
@click.option(
    "--heads",
    "heads_file",
    default=None,
    metavar="HEADS.jsonl",
    help="Signed heads kept elsewhere (`provledger head --append`); needs --public-key.",
)
@click.option(
    "--public-key",
    "public_key",
    default=None,
    metavar="KEY.pub",
    help="The public key the heads were signed with.",
)
@click.option(
    "--older-copy",
    is_flag=True,
    help="The ledger is a copy made before some of the kept heads: those are counted, "
    "not checked (a log cut back looks the same).",
)
@admin_options
@json_option
@errors_exit_3
def verify(
    against: str | None,
    heads_file: str | None,
    public_key: str | None,
    older_copy: bool,
    url: str | None,
    admin_token: str | None,
    as_json: bool,
) -> None:
    """Check the whole ledger; exit 1 naming the first problem found.

    Recomputes the Merkle tree from the stored bytes (naming the first position
    that differs), proves (RFC 6962 consistency proofs) that the log extends
    every kept signed head and the --against digest, replays authorization
    (every event's actor held the role it needed, by the log's own grants),
    compares the views with a replay of the log in a scratch database, and
    checks the evidence bytes. Maintenance: see `provledger init` for the admin
    token. An auditor's copy made before the newest kept heads: --older-copy
    (the heads of a longer log are counted, not checked).

    \b
    Exit status: 0 every check passed;
      1 a check found a problem (tampering, heads that do not verify; a
        ledger table or column verify reads missing or altered);
      3 could not check (the ledger, heads file, key or digest could not be
        opened or read; the admin token was refused; a storage error);
      2 a usage error.
    With --json: the report ("ok", "problem", …) on exit 0 or 1; on exit 3
    {"ok": false, "error": {"type": …, "message": …}}; usage errors are text.

    \b
    Example:
      provledger verify --heads /mnt/witness/heads.jsonl --public-key ledger-key.pub
      provledger verify --url 'sqlite:///audit-copy.db?mode=ro'   # opened read-only
    """
    if (heads_file is None) != (public_key is None):
        pair = ("--heads", "--public-key")
        given, missing = pair if public_key is None else pair[::-1]
        raise click.UsageError(f"{given} needs {missing}: heads are checked with their key")
    if older_copy and heads_file is None:
        raise click.UsageError(
            "--older-copy is about kept heads (those of a longer log than the copy): "
            "give --heads and --public-key"
        )
    if against is not None and not against.strip():
        # What `--against "$(cat digest.txt)"` gives when the file is missing or empty.
        raise click.BadParameter(
            "the digest is empty (was the file it was read from missing or empty?); give "
            "the size:position:root `provledger digest` printed",
            param_hint="--against",
        )
    read_only = False
    report: Verification | Damage

    # The views as stored: a row written behind the ledger's back must be named by
    # the checks, in their order, not refused by opening.
    def check(led: Ledger) -> Verification:
        return led.verify(
            against=against, heads=heads_file, public_key=public_key, older_copy=older_copy
        )

    try:
        with host_ledger(url, "verify", admin_token, catch_up=False) as led:
            report = check(led)
            read_only = led.read_only
    except (LedgerError, LookupError, ValueError, TypeError) as exc:
        # What the ledger's own tables, damaged, may be behind (ledger.damage), an admin
        # token unknown to the log too (its event may be gone); any other refusal, of
        # the user's input (a digest, heads, a key) or token, fails to check (exit 3).
        damage = isinstance(exc, (CorruptEventError, StorageError, UnknownTokenError))
        if isinstance(exc, LedgerError) and not damage:
            raise
        report = damaged(exc, url, check if heads_file or against else None)
    if as_json:
        if not report.ok:
            found_problem(_found_line(report))
        echo_json(
            {
                "ok": report.ok,
                "digest": None if report.digest is None else str(report.digest),
                "first_bad_position": report.first_bad_position,
                "problem": report.problem,
                "failed_checks": list(report.failed_checks),
                "problems": list(report.problems),
                "checks": list(report.checks),
                "heads": report.heads,
                "heads_beyond": report.beyond,
                "consistency_proof": list(report.consistency_proof),
            }
        )
    elif report.ok:
        extends = f"; extends {LogDigest.parse(against)}" if against else ""  # (a head's too)
        n = report.heads
        kept = f"; consistent with {n} signed head{'' if n == 1 else 's'}" if n else ""
        click.echo(f"ok: {report.digest}{extends}{kept} ({', '.join(report.checks)})")
        if report.beyond:
            n = report.beyond
            click.echo(
                f"{n} kept head{' describes' if n == 1 else 's describe'} a longer log than "
                f"this copy's {report.digest.size if report.digest else 0} events: not "
                "checked (--older-copy)",
                err=True,
            )
        if report.digest is not None:
            warn_if_empty(report.digest.size, "the check")
        if "authorization" in report.checks and "views" not in report.checks:
            click.echo(
                "views not compared: they were built by an earlier version (their "
                "layout); "
                + (
                    "opened read-only, they stay as stored: verify a writable copy, "
                    "where any other command rebuilds them from the log, to compare them"
                    if read_only
                    else "any command but verify, backup, digest, head and copy rebuilds "
                    "them from the log (provledger stats, say), and verify then compares them"
                ),
                err=True,
            )
    if not report.ok:
        click.echo(f"error: {_found_line(report)}", err=True)
        sys.exit(1)  # a problem found (3, could not check: errors_exit_3)


def _found_line(report: Verification | Damage) -> str:
    """The ``error:`` line (without ``error: ``) of a report that found a problem."""
    # Heads that alone do not verify may be the wrong key or file, not tampering.
    alone = report.failed_checks == ("heads",)
    what = "the kept heads do not verify" if alone else "tampering detected"
    later = report.problem is not None and report.problem.startswith(LATER_VIEWS)
    if later and report.failed_checks == ("views",):  # else what else failed says it
        what = "not verified by this version"  # nor passed: it cannot vouch for them
    more = len(report.problems) - 1
    # The first problem is not always the cause (an event removed makes a later one
    # look forged): say that there are others.
    others = f" (and {more} more: --json lists every one)" if more > 0 else ""
    return f"{what}: {report.problem}{others}"
