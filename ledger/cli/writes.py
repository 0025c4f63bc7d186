"""Commands that change records: capture, propose, accept, reject, revoke,
revalidate, deliver, correct."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

import click

from ledger.cli.failures import errors_exit_1
from ledger.cli.options import (
    DATETIME,
    JSON,
    KINDS,
    json_file_text,
    json_option,
    parse_json,
    principal_session,
    printable,
    run_option,
    shown_key,
    token_option,
    url_option,
    within,
)
from ledger.cli.render import (
    echo_json,
    make_console,
    print_revocation,
    report_done,
    revocation_json,
    working,
)
from ledger.errors import AccessDeniedError, LedgerError, ValueTooLargeError
from ledger.validation import DEFAULT_MAX_VALUE_BYTES, quoted


class InputFile(click.File):
    """A file to read, ``-`` for standard input: refused, as a usage error naming
    it, when standard input is closed (click would fail with a traceback)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "-" and sys.stdin is None:
            self.fail("-: standard input is closed (pipe the value in, or name a file)", param, ctx)
        return super().convert(value, param, ctx)


@click.command()
@click.argument("file", metavar="FILE")
@click.option("--scope", required=True, help="The scope the evidence belongs to.")
@click.option("--uri", required=True, help="Where the content was read from.")
@click.option("--id", "record_id", help="The record id (default: generated).")
@click.option("--claim-key", "--claim", "claim_key", help="Default: source:<uri>.")
@click.option("--fetched-at", type=DATETIME, help="When it was read (default: now).")
@click.option(
    "--expires",
    type=DATETIME,
    help="When the record stops being valid: usable before it, not at it (ISO 8601 with offset).",
)
@click.option("--conditions", type=JSON, help='Applicability as JSON, e.g. {"api_version": "v2"}.')
@click.option("--value", type=JSON, help="The claim as JSON (default: the content hash).")
@run_option
@token_option
@url_option
@json_option
@errors_exit_1
def capture(
    file: str,
    scope: str,
    uri: str,
    record_id: str | None,
    claim_key: str | None,
    fetched_at: datetime | None,
    expires: datetime | None,
    conditions: Any,
    value: Any,
    run_id: str | None,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Capture FILE (- for stdin) as evidence: snapshot its bytes, propose an evidence record.

    Prints the record id.

    \b
    Example:
      provledger capture doc.txt --scope proj-a --uri https://x.test/doc --id E1
    """
    if file == "-" and sys.stdin is None:
        raise click.BadParameter(
            "-: standard input is closed (pipe the content in, or name a file)",
            param_hint="FILE",
        )
    if file == "-" and sys.stdin.isatty():
        click.echo("reading the content from the terminal; end it with Ctrl-D", err=True)
    try:
        # Read no further than the ledger would store (an endless input, such as
        # `yes |` or /dev/zero, would otherwise fill the memory first).
        if file == "-":
            content = sys.stdin.buffer.read(DEFAULT_MAX_VALUE_BYTES + 1)
        else:
            with Path(file).open("rb") as stream:
                content = stream.read(DEFAULT_MAX_VALUE_BYTES + 1)
    except (OSError, ValueError, UnicodeError) as exc:  # a usage error, like click.File's
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        message = f"{printable(file)}: {printable(reason)}"
        raise click.BadParameter(message, param_hint="FILE") from None
    if len(content) > DEFAULT_MAX_VALUE_BYTES:
        source = "standard input" if file == "-" else printable(file)
        raise ValueTooLargeError(
            f"content of {quoted(uri)} ({source}) is more than {DEFAULT_MAX_VALUE_BYTES} "
            f"bytes; the limit is {DEFAULT_MAX_VALUE_BYTES} (read no further)"
        )
    with principal_session(url, token) as (led, session):
        rid = within(session, run_id).capture(
            scope=scope,
            uri=uri,
            content=content,
            fetched_at=fetched_at,
            claim_key=claim_key,
            expires=expires,
            conditions=conditions,
            id=record_id,
            value=value,
        )
        position = led.position
    if not content:  # e.g. a fetch that failed upstream in a pipeline
        source = "standard input" if file == "-" else printable(file)
        click.echo(f"warning: {rid} holds 0 bytes: {source} was empty", err=True)
    report_done(as_json, {"id": rid, "position": position}, rid)


@click.command()
@click.option("--scope", required=True, help="The scope the record belongs to.")
@click.option(
    "--claim-key",
    "--claim",
    "claim_key",
    required=True,
    callback=shown_key,
    help="The question answered (a key tables show as a JSON string may be given so).",
)
@click.option("--kind", type=click.Choice(KINDS), required=True, help="What the record is.")
@click.option("--value", "raw_value", help='The claim as JSON: true, 3, "text", {"a": 1}.')
@click.option("--value-str", help="The claim as a plain string (instead of --value).")
@click.option(
    "--value-file",
    type=InputFile("rb"),
    help="The claim as JSON read from FILE (- for standard input): a value too long "
    "for a command line.",
)
@click.option("--parent", "parents", multiple=True, help="A declared dependency (repeatable).")
@click.option("--id", "record_id", help="The record id (default: generated).")
@click.option(
    "--expires",
    type=DATETIME,
    help="When the record stops being valid: usable before it, not at it (ISO 8601 with offset).",
)
@click.option("--conditions", type=JSON, help='Applicability as JSON, e.g. {"api_version": "v2"}.')
@click.option(
    "--supersedes",
    metavar="OLD",
    help="A new version of OLD (same scope and claim): once this is accepted, "
    "OLD is SUPERSEDED and what rests on it STALE.",
)
@run_option
@token_option
@url_option
@json_option
@errors_exit_1
def propose(
    scope: str,
    claim_key: str,
    kind: str,
    raw_value: str | None,
    value_str: str | None,
    value_file: BinaryIO | None,
    parents: tuple[str, ...],
    record_id: str | None,
    expires: datetime | None,
    conditions: Any,
    supersedes: str | None,
    run_id: str | None,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Propose a record; it is a CANDIDATE until an approver accepts it. Prints its id.

    Give the value as JSON with --value (or --value-file), or as a plain string
    with --value-str.
    Update a claim with --supersedes OLD instead of proposing a conflicting value.

    \b
    Example:
      provledger propose --scope proj-a --claim api.retry_safe --kind inference \\
        --value true --parent E1 --id M1
      provledger propose --scope proj-a --claim api.timeout --kind fact \\
        --value 60 --supersedes T1
    """
    if [raw_value, value_str, value_file].count(None) != 2:
        raise click.UsageError(
            "give exactly one of --value (JSON), --value-str (plain string) or --value-file "
            "(JSON from a file)"
        )
    if value_file is not None:
        raw_value = json_file_text(value_file)
    if raw_value is not None:
        try:
            value: Any = parse_json(raw_value)
        except ValueError as exc:
            if value_file is not None:
                source = printable(getattr(value_file, "name", "-"))
                raise click.BadParameter(
                    f"{source}: {printable(exc)}", param_hint="--value-file"
                ) from None
            raise click.BadParameter(
                f"{printable(exc)}; use --value-str for plain text", param_hint="--value"
            ) from None
    else:
        value = value_str
    with principal_session(url, token) as (led, session):
        rid = within(session, run_id).propose(
            scope=scope,
            claim_key=claim_key,
            value=value,
            kind=kind,
            parents=list(parents),
            expires=expires,
            conditions=conditions,
            id=record_id,
            supersedes=supersedes,
        )
        position = led.position
    report_done(as_json, {"id": rid, "position": position}, rid)


@click.command()
@click.argument("record_id", metavar="ID")
@click.option("--note", default="", help="Why it was accepted.")
@token_option
@url_option
@json_option
@errors_exit_1
def accept(record_id: str, note: str, token: str, url: str | None, as_json: bool) -> None:
    """Accept a CANDIDATE (approver only, never its proposer; every parent ACCEPTED).

    \b
    Example:
      provledger accept M1 --note "matches the vendor docs"
    """
    with principal_session(url, token) as (led, session):
        session.accept(record_id, note=note)
        position = led.position
    report_done(
        as_json,
        {"id": record_id, "status": "ACCEPTED", "position": position},
        f"accepted {record_id}",
    )


@click.command()
@click.argument("record_id", metavar="ID")
@click.option("--reason", required=True, help="Why it was rejected.")
@token_option
@url_option
@json_option
@errors_exit_1
def reject(record_id: str, reason: str, token: str, url: str | None, as_json: bool) -> None:
    """Reject a CANDIDATE (approver only, never its proposer).

    \b
    Example:
      provledger reject M1 --reason "no evidence for this"
    """
    with principal_session(url, token) as (led, session):
        session.reject(record_id, reason=reason)
        position = led.position
    report_done(
        as_json,
        {"id": record_id, "status": "REJECTED", "position": position},
        f"rejected {record_id}",
    )


@click.command()
@click.argument("record_id", metavar="ID")
@click.option("--reason", required=True, help="Why it is withdrawn.")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="List at most this many of the records marked STALE (after the revoked one).",
)
@click.option("--all", "show_all", is_flag=True, help="List every record affected.")
@token_option
@url_option
@json_option
@errors_exit_1
def revoke(
    record_id: str,
    reason: str,
    limit: int,
    show_all: bool,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Revoke a record: it becomes REVOKED and every descendant STALE, in one transaction.

    Prints a summary (the revocation's log position and the `as-of` command that
    shows the state before it, counts, deliveries now owing a correction) and the first
    --limit records marked STALE; --all lists them all, --json gives everything.

    \b
    Example:
      provledger revoke E1 --reason "doc changed"
    """
    typed = click.get_current_context().get_parameter_source("limit")
    if show_all and typed is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("give --all or --limit, not both (--all lists every record)")
    with principal_session(url, token) as (_led, session):
        with working(f"revoking {record_id} and marking its descendants STALE", quiet=as_json):
            rev = session.revoke(record_id, reason=reason)
        affected = set(rev.affected)
        try:
            owing: Any = tuple(
                d for d in session.corrections_due() if d.delivery.record_id in affected
            )
        except AccessDeniedError:  # neither deliver nor audit anywhere: not shown
            owing = None
    if as_json:
        echo_json(revocation_json(rev, owing))
    else:
        print_revocation(rev, owing, make_console(), None if show_all else limit)


@click.command()
@click.argument("record_id", metavar="ID")
@click.option("--note", default="", help="What was re-checked.")
@click.option(
    "--parent",
    "parents",
    multiple=True,
    help="A new basis (repeatable); replaces the record's dependencies.",
)
@token_option
@url_option
@json_option
@errors_exit_1
def revalidate(
    record_id: str,
    note: str,
    parents: tuple[str, ...],
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Revalidate a STALE record once its dependencies are usable again, or on a new basis.

    \b
    Example:
      provledger revalidate M1 --parent E2 --note "re-checked against the new docs"
    """
    with principal_session(url, token) as (led, session):
        session.revalidate(record_id, note=note, parents=list(parents) if parents else None)
        position = led.position
        # ACCEPTED, or CANDIDATE for a record never accepted (None: not readable here).
        try:
            status: str | None = session.get(record_id).status.value
        except LedgerError:
            status = None
    report_done(
        as_json,
        {"id": record_id, "status": status, "position": position},
        f"revalidated {record_id}" + (f": {status}" if status else ""),
    )


@click.command()
@click.argument("record_id", metavar="ID")
@click.option("--to", "recipient", required=True, help="Who received it.")
@click.option("--channel", default="email", show_default=True, help="How it was sent.")
@token_option
@url_option
@json_option
@errors_exit_1
def deliver(
    record_id: str, recipient: str, channel: str, token: str, url: str | None, as_json: bool
) -> None:
    """Record that a usable record (typically a report) left the system. Prints the delivery id.

    \b
    Example:
      provledger deliver R1 --to ops@x.test
    """
    with principal_session(url, token) as (led, session):
        delivery_id = session.deliver(record_id, recipient=recipient, channel=channel)
        position = led.position
    report_done(
        as_json,
        {"delivery_id": delivery_id, "id": record_id, "position": position},
        delivery_id,
    )


@click.command()
@click.argument("delivery_id", metavar="DELIVERY_ID")
@click.option("--note", required=True, help="What the correction says.")
@click.option("--replacement", help="A record that replaces the delivered one.")
@click.option(
    "--only-if-owed",
    is_flag=True,
    help="Refuse unless the delivery owes a correction now (checked in the command's "
    "transaction: workers draining `corrections` at once issue one each).",
)
@token_option
@url_option
@json_option
@errors_exit_1
def correct(
    delivery_id: str,
    note: str,
    replacement: str | None,
    only_if_owed: bool,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Issue a correction for a delivery into the outbox (nothing is sent). Prints its id.

    \b
    Example:
      provledger correct d-1234 --note "retries are not safe after all" --only-if-owed
    """
    with principal_session(url, token) as (led, session):
        correction_id = session.issue_correction(
            delivery_id, note=note, replacement=replacement, only_if_owed=only_if_owed
        )
        position = led.position
    report_done(
        as_json,
        {"correction_id": correction_id, "delivery_id": delivery_id, "position": position},
        correction_id,
    )
