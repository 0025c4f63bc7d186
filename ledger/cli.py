"""The ``provledger`` command line: a thin layer, one library call per command.

``--url`` / ``$PROVLEDGER_URL`` selects the ledger. Admin and maintenance
commands (``init``, ``grant``, ``token``, ``rebuild``, ``stats``, ``demo``) act as
the embedding host, without a token, and only on a local embedded database;
every other command authenticates with ``--token`` / ``$PROVLEDGER_TOKEN``.
Read commands print aligned tables for people and JSON with ``--json``;
``as-of`` runs them as the ledger was at a past position or time.

Errors from the library print one line on stderr and exit 1; usage errors exit 2.
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ledger import __version__
from ledger.application import Ledger, Session
from ledger.domain import Kind, Status, Validity
from ledger.errors import AccessDeniedError, LedgerError
from ledger.experiment import ExperimentResult, run_experiment
from ledger.persistence import resolve_url
from ledger.values import (
    AuditEvent,
    AuditTrail,
    CorrectionDue,
    Explanation,
    ReadResult,
    RecordView,
    Revocation,
)

F = TypeVar("F", bound=Callable[..., Any])

URL_HELP = (
    "Ledger URL (memory:, sqlite:///path.db, postgresql://…). "
    "Default: $PROVLEDGER_URL, else sqlite:///provledger.db."
)
TOKEN_HELP = "Bearer token of the principal acting (from `provledger token issue`)."
KINDS = [k.value for k in Kind]
EVENT_TYPES = (
    "Proposed, Accepted, Rejected, Revoked, MarkedStale, Revalidated, Delivered, CorrectionIssued"
)

STATUS_STYLE = {
    "ACCEPTED": "bold green",
    "CANDIDATE": "bold yellow",
    "STALE": "bold dark_orange",
    "REVOKED": "bold red",
    "REJECTED": "dim",
}
VALIDITY_STYLE = {"VALID": "green", "NEEDS_REVALIDATION": "yellow", "INVALID": "red"}
OUTCOME_STYLE = {"FOUND": "bold green", "MISSING": "bold yellow", "CONFLICT": "bold red"}


def printable(text: object) -> str:
    """``text`` on one line, with anything a terminal cannot show escaped."""
    one_line = str(text).replace("\r", "\\r").replace("\n", "\\n")
    return one_line.encode("utf-8", "backslashreplace").decode("utf-8")


def _errors_exit_1(fn: F) -> F:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LedgerError as exc:
            click.echo(f"error: {printable(exc)}", err=True)
            sys.exit(1)
        except OSError as exc:  # reading FILE or writing -o FILE
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"error: {printable(where)}{printable(exc.strerror or exc)}", err=True)
            sys.exit(1)
        except (ValueError, UnicodeError) as exc:  # a path Python cannot open (NUL, surrogate)
            if not isinstance(exc, UnicodeError) and "null" not in str(exc):
                raise
            click.echo(f"error: cannot use that path: {printable(exc)}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def _parse_json(value: str) -> Any:
    """A JSON document; ValueError names what is wrong with it (not the whole text)."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{value[:40]!r} is not JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # huge integers, deep nesting
        kind = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ValueError(f"{value[:40]!r}… is not usable JSON ({kind})") from None


# -- parameter types ---------------------------------------------------------------

if TYPE_CHECKING:
    _ParamType = click.ParamType[Any]
else:  # subscripting it at run time needs a newer click than type checking does
    _ParamType = click.ParamType


class JSONType(_ParamType):
    """A JSON document given on the command line."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return _parse_json(value)
        except ValueError as exc:
            self.fail(printable(exc), param, ctx)


class DateTimeType(_ParamType):
    """An ISO 8601 date-time; give an offset (naive ones are refused by the ledger)."""

    name = "datetime"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            return datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(
                f"{value!r} is not an ISO 8601 date-time (e.g. 2026-05-01T12:00:00+00:00)",
                param,
                ctx,
            )


JSON = JSONType()
DATETIME = DateTimeType()


def url_option(fn: F) -> F:
    return click.option(
        "--url", envvar="PROVLEDGER_URL", show_envvar=True, default=None, help=URL_HELP
    )(fn)


def token_option(fn: F) -> F:
    return click.option(
        "--token", envvar="PROVLEDGER_TOKEN", show_envvar=True, required=True, help=TOKEN_HELP
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(fn)


# -- opening the ledger ---------------------------------------------------------------


@dataclass(frozen=True)
class AsOf:
    """The past moment ``provledger as-of`` asked for (kept in the click context)."""

    position: int | None
    time: datetime | None


@contextmanager
def _host(url: str | None, command: str) -> Iterator[Ledger]:
    """The ledger as its embedding host: only a local embedded database qualifies."""
    backend = resolve_url(url)
    if backend.kind not in ("sqlite", "memory"):
        raise AccessDeniedError(
            f"{command} refused: admin and maintenance commands run without a token only on "
            f"a local embedded database (sqlite:///path.db), not on a shared {backend.kind} "
            "server; run them from the embedding host's code (Ledger.admin(), Ledger.rebuild())"
        )
    with Ledger.open(url) as led:
        yield led


@contextmanager
def _principal(url: str | None, token: str) -> Iterator[tuple[Ledger, Session]]:
    """The ledger and the session of the token's principal (as of a past moment under as-of)."""
    with Ledger.open(url) as led:
        session = led.authenticate(token)
        ctx = click.get_current_context(silent=True)
        moment = ctx.find_object(AsOf) if ctx is not None else None
        if moment is not None:
            session = session.as_of(position=moment.position, time=moment.time)
        yield led, session


# -- output -----------------------------------------------------------------------------


def _console() -> Console:
    # Piped output keeps long ids and reasons on one line instead of 80 columns.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses become objects, datetimes ISO 8601,
    bytes ``{"base64": …}``."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def record_json(record: RecordView) -> dict[str, Any]:
    """A record as JSON: every field, plus ``undeclared`` and each delivery's ``state``."""
    out: dict[str, Any] = plain(record)
    out["undeclared"] = list(record.undeclared)
    for delivery, data in zip(record.deliveries, out["deliveries"], strict=True):
        data["state"] = delivery.state
    return out


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(plain(data), indent=2, ensure_ascii=False))


def _styled(value: object, styles: Mapping[str, str]) -> Text:
    return Text(str(value), style=styles.get(str(value), ""))


def _value_text(value: Any) -> str:
    return json.dumps(plain(value), ensure_ascii=False)


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def _done(as_json: bool, data: dict[str, Any], line: str) -> None:
    """What a write command prints: ``line`` for people, ``data`` with ``--json``."""
    if as_json:
        _echo_json(data)
    else:
        click.echo(line)


def _records_table(records: Sequence[RecordView]) -> Table:
    table = Table()
    for column in ("id", "kind", "status", "validity", "value", "parents", "expires"):
        table.add_column(column)
    for r in records:
        parents = ", ".join(r.parents)
        if r.undeclared:
            parents += f" (observed: {', '.join(r.undeclared)})"
        table.add_row(
            Text(r.id),
            Text(str(r.kind)),
            _styled(r.status, STATUS_STYLE),
            _styled(r.validity, VALIDITY_STYLE),
            Text(_value_text(r.value)),
            Text(parents or "-"),
            Text(_when(r.expires)),
        )
    return table


def _heading(outcome: str, scope: str, claim_key: str, at: datetime) -> Text:
    text = _styled(outcome, OUTCOME_STYLE)
    text.append(f"  {scope}/{claim_key} at {at.isoformat(timespec='seconds')}")
    return text


def print_read(result: ReadResult, console: Console) -> None:
    """A read's outcome and its usable records."""
    heading = _heading(result.outcome, result.scope, result.claim_key, result.at)
    if result.outcome == "FOUND":
        heading.append(f"  value: {_value_text(result.value)}")
    console.print(heading)
    if result.records:
        console.print(_records_table(result.records))
    else:
        console.print("no usable record; `provledger explain` says why")


def print_explanation(explanation: Explanation, console: Console) -> None:
    """Per record, why it is or is not usable."""
    console.print(
        _heading(explanation.outcome, explanation.scope, explanation.claim_key, explanation.at)
    )
    table = Table()
    for column in ("id", "kind", "status", "usable", "why"):
        table.add_column(column)
    for e in explanation.entries:
        why = "usable" if e.usable else "; ".join(e.reasons)
        if e.record.undeclared:
            why += f" (observed but undeclared: {', '.join(e.record.undeclared)})"
        table.add_row(
            Text(e.record.id),
            Text(str(e.record.kind)),
            _styled(e.record.status, STATUS_STYLE),
            Text("yes", style="green") if e.usable else Text("no", style="red"),
            Text(why),
        )
    console.print(table if explanation.entries else "no record answers this claim")


def print_record(record: RecordView, console: Console) -> None:
    """One record, field by field."""
    console.print(Text(f"record {record.id}", style="bold"))
    table = Table(show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    rows: list[tuple[str, Text]] = [
        ("scope", Text(record.scope)),
        ("claim_key", Text(record.claim_key)),
        ("kind", Text(str(record.kind))),
        ("value", Text(_value_text(record.value))),
        ("status", _styled(record.status, STATUS_STYLE)),
        ("validity", _styled(record.validity, VALIDITY_STYLE)),
        ("parents", Text(", ".join(record.parents) or "-")),
        ("observed", Text(", ".join(record.observed) or "-")),
        ("conditions", Text(_value_text(record.conditions) if record.conditions else "-")),
        ("expires", Text(_when(record.expires))),
        ("effective expiry", Text(_when(record.effective_expires))),
        ("proposer", Text(record.proposer)),
        ("created", Text(_when(record.created_at))),
    ]
    if record.cause is not None and record.cause != record.id:
        rows.append(("cause", Text(f"{record.cause} revoked")))
    if record.reason:
        rows.append(("reason", Text(record.reason)))
    if record.undeclared:
        rows.append(("undeclared", Text(", ".join(record.undeclared), style="yellow")))
    for key, value in (record.evidence or {}).items():
        rows.append((key, Text(_when(value) if isinstance(value, datetime) else str(value))))
    for d in record.deliveries:
        corrected = f", {len(d.corrections)} correction(s)" if d.corrections else ""
        rows.append(
            (
                "delivery",
                Text(
                    f"{d.state} to {d.recipient} via {d.channel} at {_when(d.delivered_at)} "
                    f"({d.delivery_id}{corrected})"
                ),
            )
        )
    for name, text in rows:
        table.add_row(name, text)
    console.print(table)


def _details_text(details: Mapping[str, Any], skip: Sequence[str] = ()) -> str:
    shown = {k: v for k, v in details.items() if k not in skip and v not in (None, "", [], ())}
    return ", ".join(f"{k}={_value_text(v)}" for k, v in shown.items())


def _events_table(events: Sequence[AuditEvent], with_record: bool) -> Table:
    table = Table()
    columns = ["position", "type", *(["record"] * with_record), "at", "actor", "details"]
    for column in columns:
        table.add_column(column, justify="right" if column == "position" else "left")
    for e in events:
        cells = [Text(str(e.position)), Text(e.type)]
        if with_record:
            cells.append(Text(str(e.details.get("record_id", ""))))
        cells += [
            Text(_when(e.at)),
            Text(e.actor or "-"),
            Text(_details_text(e.details, skip=("record_id",))),
        ]
        table.add_row(*cells)
    return table


def print_audit(trail: AuditTrail, console: Console) -> None:
    """A record's state and its whole history."""
    heading = Text(f"{trail.record.id} [{trail.record.kind}] ")
    heading.append_text(_styled(trail.record.status, STATUS_STYLE))
    heading.append(" / ")
    heading.append_text(_styled(trail.record.validity, VALIDITY_STYLE))
    if trail.undeclared:
        heading.append(f"  observed but undeclared: {', '.join(trail.undeclared)}", "yellow")
    console.print(heading)
    console.print(_events_table(trail.events, with_record=False))


def print_corrections(due: Sequence[CorrectionDue], console: Console) -> None:
    """Deliveries that need a correction."""
    if not due:
        console.print("no corrections due")
        return
    console.print(Text(f"{len(due)} correction(s) due", style="bold"))
    table = Table()
    for column in ("delivery", "record", "recipient", "status", "validity", "why"):
        table.add_column(column)
    for c in due:
        why = f"{c.cause} revoked: {c.reason}" if c.cause else (c.reason or "-")
        table.add_row(
            Text(c.delivery.delivery_id),
            Text(c.delivery.record_id),
            Text(c.delivery.recipient),
            _styled(c.status, STATUS_STYLE),
            _styled(c.validity, VALIDITY_STYLE),
            Text(why),
        )
    console.print(table)


def print_revocation(rev: Revocation, console: Console) -> None:
    """The revoked root and every record now STALE because of it."""
    console.print(Text(f"revoked {rev.root} (log position {rev.position})", style="bold"))
    table = Table()
    table.add_column("record")
    table.add_column("now")
    table.add_row(Text(rev.root), _styled("REVOKED", STATUS_STYLE))
    for rid in rev.stale:
        table.add_row(Text(rid), _styled("STALE", STATUS_STYLE))
    console.print(table)
    if rev.hidden:
        console.print(f"and {rev.hidden} STALE in scopes you cannot see")


def print_experiment(result: ExperimentResult, console: Console) -> None:
    """Print the experiment's table."""
    table = Table(title=f"provledger experiment ({printable(result.url)})")
    table.add_column("check")
    table.add_column("expected")
    table.add_column("observed")
    table.add_column("passed")
    for row in result.rows:
        mark = "[green]yes[/green]" if row.passed else "[red]NO[/red]"
        table.add_row(row.check, row.expected, row.observed, mark)
    console.print(table)
    verdict = "[green]all rows passed[/green]" if result.passed else "[red]a row deviated[/red]"
    console.print(verdict)


def _write(output: str, data: bytes) -> None:
    if output == "-":
        click.echo(data, nl=False)  # bytes go to the binary stdout
    else:
        Path(output).write_bytes(data)


# -- the commands ---------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provledger")
def main() -> None:
    """provledger: an event-sourced provenance ledger for AI agents' memory.

    Admin commands (init, grant, token, rebuild, stats, demo) need no token
    and work on a local SQLite file only; the others take --token or
    $PROVLEDGER_TOKEN. --url or $PROVLEDGER_URL selects the ledger.

    \b
    Example:
      provledger demo
    """


@main.command()
@url_option
@json_option
@_errors_exit_1
def init(url: str | None, as_json: bool) -> None:
    """Create the ledger database (or open an existing one) and say where it is.

    Admin: no token, local embedded database only.

    \b
    Example:
      provledger init --url sqlite:///provledger.db
    """
    with _host(url, "init") as led:
        info = {"url": printable(led.url), "backend": led.backend, "position": led.position}
    _done(as_json, info, f"ledger ready: {info['url']} (log position {info['position']})")


@main.command()
@click.argument("subject")
@click.option("--scope", required=True, help="The scope (project / tenant) the roles apply in.")
@click.option(
    "--roles",
    required=True,
    help="Comma-separated roles: read, propose, approve, deliver, audit.",
)
@url_option
@json_option
@_errors_exit_1
def grant(subject: str, scope: str, roles: str, url: str | None, as_json: bool) -> None:
    """Give SUBJECT roles in a scope (the grant is an event in the log).

    Admin: no token, local embedded database only.

    \b
    Example:
      provledger grant agent-1 --scope proj-a --roles propose,read
    """
    wanted = [r.strip() for r in roles.split(",") if r.strip()]
    with _host(url, "grant") as led:
        led.admin().grant(subject, scope=scope, roles=wanted)
        position = led.position
    _done(
        as_json,
        {"subject": subject, "scope": scope, "roles": sorted(set(wanted)), "position": position},
        f"granted {', '.join(sorted(set(wanted)))} in {scope} to {subject}",
    )


@main.group()
def token() -> None:
    """Issue and revoke bearer tokens.

    Admin: no token, local embedded database only. Only a token's sha256 is
    stored; the token itself is printed once.

    \b
    Example:
      provledger token issue agent-1
    """


@token.command("issue")
@click.argument("subject")
@click.option("--expires", type=DATETIME, help="When the token stops working (ISO 8601).")
@url_option
@json_option
@_errors_exit_1
def token_issue(subject: str, expires: datetime | None, url: str | None, as_json: bool) -> None:
    """Issue a bearer token for SUBJECT and print it (nothing else goes to stdout).

    \b
    Example:
      AGENT=$(provledger token issue agent-1)
    """
    with _host(url, "token issue") as led:
        issued = led.admin().issue_token(subject, expires=expires)
    _done(as_json, {"subject": subject, "token": issued, "expires": expires}, issued)


@token.command("revoke")
@click.argument("token_value", metavar="TOKEN")
@url_option
@json_option
@_errors_exit_1
def token_revoke(token_value: str, url: str | None, as_json: bool) -> None:
    """Withdraw TOKEN; commands using it are refused from now on.

    \b
    Example:
      provledger token revoke "$AGENT"
    """
    with _host(url, "token revoke") as led:
        led.admin().revoke_token(token_value)
        position = led.position
    _done(as_json, {"revoked": True, "position": position}, "token revoked")


@main.command()
@click.argument("file", metavar="FILE")
@click.option("--scope", required=True, help="The scope the evidence belongs to.")
@click.option("--uri", required=True, help="Where the content was read from.")
@click.option("--id", "record_id", help="The record id (default: generated).")
@click.option("--claim-key", "--claim", "claim_key", help="Default: source:<uri>.")
@click.option("--fetched-at", type=DATETIME, help="When it was read (default: now).")
@click.option("--expires", type=DATETIME, help="Latest valid instant (ISO 8601 with offset).")
@click.option("--conditions", type=JSON, help='Applicability as JSON, e.g. {"api_version": "v2"}.')
@click.option("--value", type=JSON, help="The claim as JSON (default: the content hash).")
@token_option
@url_option
@json_option
@_errors_exit_1
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
    try:
        content = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except (OSError, ValueError, UnicodeError) as exc:  # a usage error, like click.File's
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        message = f"{printable(file)}: {printable(reason)}"
        raise click.BadParameter(message, param_hint="FILE") from None
    with _principal(url, token) as (led, session):
        rid = session.capture(
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
    _done(as_json, {"id": rid, "position": position}, rid)


@main.command()
@click.option("--scope", required=True, help="The scope the record belongs to.")
@click.option("--claim-key", "--claim", "claim_key", required=True, help="The question answered.")
@click.option("--kind", type=click.Choice(KINDS), required=True, help="What the record is.")
@click.option("--value", "raw_value", help='The claim as JSON: true, 3, "text", {"a": 1}.')
@click.option("--value-str", help="The claim as a plain string (instead of --value).")
@click.option("--parent", "parents", multiple=True, help="A declared dependency (repeatable).")
@click.option("--id", "record_id", help="The record id (default: generated).")
@click.option("--expires", type=DATETIME, help="Latest valid instant (ISO 8601 with offset).")
@click.option("--conditions", type=JSON, help='Applicability as JSON, e.g. {"api_version": "v2"}.')
@click.option(
    "--supersedes",
    metavar="OLD",
    help="A new version of OLD (same scope and claim): once this is accepted, "
    "OLD is SUPERSEDED and what rests on it STALE.",
)
@token_option
@url_option
@json_option
@_errors_exit_1
def propose(
    scope: str,
    claim_key: str,
    kind: str,
    raw_value: str | None,
    value_str: str | None,
    parents: tuple[str, ...],
    record_id: str | None,
    expires: datetime | None,
    conditions: Any,
    supersedes: str | None,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Propose a record; it is a CANDIDATE until an approver accepts it. Prints its id.

    Give the value as JSON with --value, or as a plain string with --value-str.
    Update a claim with --supersedes OLD instead of proposing a conflicting value.

    \b
    Example:
      provledger propose --scope proj-a --claim api.retry_safe --kind inference \\
        --value true --parent E1 --id M1
      provledger propose --scope proj-a --claim api.timeout --kind fact \\
        --value 60 --supersedes T1
    """
    if (raw_value is None) == (value_str is None):
        raise click.UsageError("give exactly one of --value (JSON) or --value-str (plain string)")
    if raw_value is not None:
        try:
            value: Any = _parse_json(raw_value)
        except ValueError as exc:
            raise click.BadParameter(
                f"{printable(exc)}; use --value-str for plain text", param_hint="--value"
            ) from None
    else:
        value = value_str
    with _principal(url, token) as (led, session):
        rid = session.propose(
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
    _done(as_json, {"id": rid, "position": position}, rid)


@main.command()
@click.argument("record_id", metavar="ID")
@click.option("--note", default="", help="Why it was accepted.")
@token_option
@url_option
@json_option
@_errors_exit_1
def accept(record_id: str, note: str, token: str, url: str | None, as_json: bool) -> None:
    """Accept a CANDIDATE (approver only, never its proposer; every parent ACCEPTED).

    \b
    Example:
      provledger accept M1 --note "matches the vendor docs"
    """
    with _principal(url, token) as (led, session):
        session.accept(record_id, note=note)
        position = led.position
    _done(
        as_json,
        {"id": record_id, "status": "ACCEPTED", "position": position},
        f"accepted {record_id}",
    )


@main.command()
@click.argument("record_id", metavar="ID")
@click.option("--reason", required=True, help="Why it was rejected.")
@token_option
@url_option
@json_option
@_errors_exit_1
def reject(record_id: str, reason: str, token: str, url: str | None, as_json: bool) -> None:
    """Reject a CANDIDATE (approver only, never its proposer).

    \b
    Example:
      provledger reject M1 --reason "no evidence for this"
    """
    with _principal(url, token) as (led, session):
        session.reject(record_id, reason=reason)
        position = led.position
    _done(
        as_json,
        {"id": record_id, "status": "REJECTED", "position": position},
        f"rejected {record_id}",
    )


@main.command()
@click.argument("record_id", metavar="ID")
@click.option("--reason", required=True, help="Why it is withdrawn.")
@token_option
@url_option
@json_option
@_errors_exit_1
def revoke(record_id: str, reason: str, token: str, url: str | None, as_json: bool) -> None:
    """Revoke a record: it becomes REVOKED and every descendant STALE, in one transaction.

    \b
    Example:
      provledger revoke E1 --reason "doc changed"
    """
    with _principal(url, token) as (_led, session):
        rev = session.revoke(record_id, reason=reason)
    if as_json:
        _echo_json(rev)
    else:
        print_revocation(rev, _console())


@main.command()
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
@_errors_exit_1
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
    with _principal(url, token) as (led, session):
        session.revalidate(record_id, note=note, parents=list(parents) if parents else None)
        position = led.position
    _done(
        as_json,
        {"id": record_id, "status": "ACCEPTED", "position": position},
        f"revalidated {record_id}",
    )


@main.command()
@click.argument("record_id", metavar="ID")
@click.option("--to", "recipient", required=True, help="Who received it.")
@click.option("--channel", default="email", show_default=True, help="How it was sent.")
@token_option
@url_option
@json_option
@_errors_exit_1
def deliver(
    record_id: str, recipient: str, channel: str, token: str, url: str | None, as_json: bool
) -> None:
    """Record that a usable record (typically a report) left the system. Prints the delivery id.

    \b
    Example:
      provledger deliver R1 --to ops@x.test
    """
    with _principal(url, token) as (led, session):
        delivery_id = session.deliver(record_id, recipient=recipient, channel=channel)
        position = led.position
    _done(
        as_json,
        {"delivery_id": delivery_id, "id": record_id, "position": position},
        delivery_id,
    )


@main.command()
@click.argument("delivery_id", metavar="DELIVERY_ID")
@click.option("--note", required=True, help="What the correction says.")
@click.option("--replacement", help="A record that replaces the delivered one.")
@token_option
@url_option
@json_option
@_errors_exit_1
def correct(
    delivery_id: str,
    note: str,
    replacement: str | None,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Issue a correction for a delivery into the outbox (nothing is sent). Prints its id.

    \b
    Example:
      provledger correct d-1234 --note "retries are not safe after all"
    """
    with _principal(url, token) as (led, session):
        correction_id = session.issue_correction(delivery_id, note=note, replacement=replacement)
        position = led.position
    _done(
        as_json,
        {"correction_id": correction_id, "delivery_id": delivery_id, "position": position},
        correction_id,
    )


# -- read commands (also under as-of) ----------------------------------------------


@click.command()
@click.option("--scope", required=True, help="The scope to read in.")
@click.option("--claim-key", "--claim", "claim_key", required=True, help="The question asked.")
@click.option("--at", type=DATETIME, help="Validity at this instant (default: now).")
@click.option(
    "--context", type=JSON, help='Applicability context as JSON, e.g. {"api_version": "v2"}.'
)
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS), help="Only these kinds.")
@token_option
@url_option
@json_option
@_errors_exit_1
def read(
    scope: str,
    claim_key: str,
    at: datetime | None,
    context: Any,
    kinds: tuple[str, ...],
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Read a claim through the eligibility chain: FOUND, MISSING or CONFLICT.

    \b
    Example:
      provledger read --scope proj-a --claim api.retry_safe
    """
    with _principal(url, token) as (_led, session):
        result = session.read(scope, claim_key, at=at, context=context, kinds=kinds or None)
    if as_json:
        _echo_json(
            {
                "outcome": result.outcome,
                "scope": result.scope,
                "claim_key": result.claim_key,
                "at": result.at,
                "value": result.value,
                "records": [record_json(r) for r in result.records],
            }
        )
    else:
        print_read(result, _console())


@click.command()
@click.argument("record_id", metavar="ID")
@token_option
@url_option
@json_option
@_errors_exit_1
def get(record_id: str, token: str, url: str | None, as_json: bool) -> None:
    """Show one record: status, validity, dependencies, evidence, deliveries.

    \b
    Example:
      provledger get R1
    """
    with _principal(url, token) as (_led, session):
        record = session.get(record_id)
    if as_json:
        _echo_json(record_json(record))
    else:
        print_record(record, _console())


@click.command()
@click.option("--scope", required=True, help="The scope to read in.")
@click.option("--claim-key", "--claim", "claim_key", required=True, help="The question asked.")
@click.option("--at", type=DATETIME, help="Validity at this instant (default: now).")
@click.option(
    "--context", type=JSON, help='Applicability context as JSON, e.g. {"api_version": "v2"}.'
)
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS), help="Only these kinds.")
@token_option
@url_option
@json_option
@_errors_exit_1
def explain(
    scope: str,
    claim_key: str,
    at: datetime | None,
    context: Any,
    kinds: tuple[str, ...],
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Say, per record answering a claim, why it is or is not usable.

    \b
    Example:
      provledger explain --scope proj-a --claim api.retry_safe
    """
    with _principal(url, token) as (_led, session):
        explanation = session.explain(scope, claim_key, at=at, context=context, kinds=kinds or None)
    if as_json:
        _echo_json(
            {
                "outcome": explanation.outcome,
                "scope": explanation.scope,
                "claim_key": explanation.claim_key,
                "at": explanation.at,
                "entries": [
                    {"record": record_json(e.record), "usable": e.usable, "reasons": e.reasons}
                    for e in explanation.entries
                ],
            }
        )
    else:
        print_explanation(explanation, _console())


@click.command()
@click.argument("record_id", metavar="ID")
@token_option
@url_option
@json_option
@_errors_exit_1
def audit(record_id: str, token: str, url: str | None, as_json: bool) -> None:
    """Show the whole history of a record, revoked ones included (needs the audit role).

    \b
    Example:
      provledger audit E1
    """
    with _principal(url, token) as (_led, session):
        trail = session.audit(record_id)
    if as_json:
        _echo_json(
            {
                "record": record_json(trail.record),
                "events": trail.events,
                "undeclared": trail.undeclared,
            }
        )
    else:
        print_audit(trail, _console())


@click.command()
@click.option("--record", "record_id", help="Only this record's events.")
@click.option("--type", "event_type", help=f"Only this event type: {EVENT_TYPES}.")
@click.option("--from", "start", type=click.IntRange(min=0), help="First log position.")
@click.option("--to", "stop", type=click.IntRange(min=0), help="Last log position (inclusive).")
@token_option
@url_option
@json_option
@_errors_exit_1
def history(
    record_id: str | None,
    event_type: str | None,
    start: int | None,
    stop: int | None,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """List the event log: record events in scopes where you hold the audit role.

    \b
    Example:
      provledger history --type Revoked --from 10 --to 40
    """
    with _principal(url, token) as (_led, session):
        events = session.history(record=record_id, type=event_type, start=start, stop=stop)
    if as_json:
        _echo_json({"events": events})
    elif events:
        _console().print(_events_table(events, with_record=True))
    else:
        click.echo("no events")


@click.command()
@token_option
@url_option
@json_option
@_errors_exit_1
def corrections(token: str, url: str | None, as_json: bool) -> None:
    """List delivered records that are no longer VALID and have no correction yet.

    \b
    Example:
      provledger corrections
    """
    with _principal(url, token) as (_led, session):
        due = session.corrections_due()
    if as_json:
        _echo_json({"due": due})
    else:
        print_corrections(due, _console())


@click.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["prov-json", "prov-n", "prov-xml"]),
    default="prov-json",
    show_default=True,
    help="PROV serialisation.",
)
@click.option("--scope", help="Only records in this scope.")
@click.option("--record", "record_id", help="Only this record (with --ancestors/--descendants).")
@click.option("--ancestors", is_flag=True, help="With --record: add everything it depends on.")
@click.option("--descendants", is_flag=True, help="With --record: add everything depending on it.")
@click.option(
    "-o", "--output", default="-", show_default=True, help="File to write (- for stdout)."
)
@token_option
@url_option
@_errors_exit_1
def export(
    fmt: str,
    scope: str | None,
    record_id: str | None,
    ancestors: bool,
    descendants: bool,
    output: str,
    token: str,
    url: str | None,
) -> None:
    """Export records, events and principals as a W3C PROV document (needs the audit role).

    \b
    Example:
      provledger export --format prov-json --record R1 --ancestors -o r1.prov.json
    """
    from ledger.prov import export_text  # the prov package loads only when needed

    if (ancestors or descendants) and record_id is None:
        raise click.UsageError("--ancestors and --descendants need --record")
    with _principal(url, token) as (_led, session):
        text = export_text(
            session,
            fmt,
            scope=scope,
            record=record_id,
            ancestors=ancestors,
            descendants=descendants,
        )
    _write(output, text.encode())
    if output != "-":
        click.echo(f"wrote {printable(output)} ({fmt})")


@click.command()
@click.argument("record_id", metavar="ID")
@click.option("--ancestors", is_flag=True, help="Draw everything it depends on.")
@click.option("--descendants", is_flag=True, help="Draw everything depending on it.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["svg", "png", "dot", "mermaid"]),
    default="svg",
    show_default=True,
    help="svg and png need Graphviz's dot program.",
)
@click.option(
    "-o", "--output", default="-", show_default=True, help="File to write (- for stdout)."
)
@token_option
@url_option
@_errors_exit_1
def graph(
    record_id: str,
    ancestors: bool,
    descendants: bool,
    fmt: str,
    output: str,
    token: str,
    url: str | None,
) -> None:
    """Draw a record's dependency subgraph, coloured by status (neither flag: both directions).

    Nodes show id, kind, status and validity; observed edges are dashed;
    delivered records have a double border. Without Graphviz's dot program,
    svg and png fall back to DOT text (FILE.dot) with a warning.

    \b
    Example:
      provledger graph E1 --descendants --format svg -o impact.svg
    """
    from ledger.graph import draw

    both = not ancestors and not descendants
    with _principal(url, token) as (_led, session):
        picture = draw(
            session,
            record_id,
            ancestors=ancestors or both,
            descendants=descendants or both,
            format=fmt,
        )
    target = output
    if picture.fell_back and output != "-":
        target = str(Path(output).with_suffix(".dot"))
    _write(target, picture.data)
    if picture.note:
        click.echo(f"warning: {picture.note} ({target})", err=True)
    if target != "-":
        sub = picture.subgraph
        click.echo(
            f"wrote {printable(target)} ({picture.format}: {len(sub.nodes)} records, "
            f"{len(sub.edges)} edges)"
        )


READ_COMMANDS = (read, get, explain, audit, history, corrections, export, graph)
for _command in READ_COMMANDS:
    main.add_command(_command)


@main.group("as-of")
@click.option("--position", type=click.IntRange(min=0), help="Right after this log position.")
@click.option("--time", "when", type=DATETIME, help="At this instant (ISO 8601 with offset).")
@click.pass_context
def as_of(ctx: click.Context, position: int | None, when: datetime | None) -> None:
    """Run a read command as the ledger was at a past log position or time.

    Give exactly one of --position or --time; read, get, explain, audit,
    history, corrections, export and graph then answer as of then.

    \b
    Example:
      provledger as-of --position 12 read --scope proj-a --claim api.retry_safe
    """
    if (position is None) == (when is None):
        raise click.UsageError("give exactly one of --position or --time")
    ctx.obj = AsOf(position=position, time=when)


for _command in READ_COMMANDS:
    as_of.add_command(_command)


# -- tamper evidence --------------------------------------------------------------------


@main.command()
@url_option
@json_option
@_errors_exit_1
def digest(url: str | None, as_json: bool) -> None:
    """Print the log's Merkle digest (size:position:root) to keep somewhere else.

    Maintenance: no token, local embedded database only. Later,
    `provledger verify --against DIGEST` proves the log still extends it.

    \b
    Example:
      provledger digest > digest-2026-11-30.txt
    """
    with _host(url, "digest") as led:
        kept = led.digest()
    if as_json:
        _echo_json(
            {"size": kept.size, "position": kept.position, "root": kept.root, "digest": str(kept)}
        )
    else:
        click.echo(str(kept))


@main.command()
@click.option(
    "--against",
    "against",
    default=None,
    metavar="DIGEST",
    help="A digest printed earlier by `provledger digest`.",
)
@url_option
@json_option
@_errors_exit_1
def verify(against: str | None, url: str | None, as_json: bool) -> None:
    """Recompute the Merkle tree from the stored bytes; exit 1 if anything changed.

    Names the first position whose stored bytes differ from what was appended.
    With --against, also proves (RFC 6962 consistency proof) that the current
    log extends the log that digest described. Maintenance: no token, local
    embedded database only.

    \b
    Example:
      provledger verify --against "$(cat digest-2026-11-30.txt)"
    """
    with _host(url, "verify") as led:
        report = led.verify(against=against)
    if as_json:
        _echo_json(
            {
                "ok": report.ok,
                "digest": str(report.digest),
                "first_bad_position": report.first_bad_position,
                "problem": report.problem,
                "consistency_proof": list(report.consistency_proof),
            }
        )
    elif report.ok:
        extends = f"; extends {against}" if against else ""
        click.echo(f"ok: {report.digest}{extends}")
    if not report.ok:
        click.echo(f"error: tampering detected: {report.problem}", err=True)
        sys.exit(1)


@main.command()
@click.argument("record_id", metavar="ID")
@token_option
@url_option
@_errors_exit_1
def prove(record_id: str, token: str, url: str | None) -> None:
    """Print inclusion proofs (JSON) of a record's events in the current Merkle tree.

    A third party checks them against a digest it trusts with the few lines of
    code in the README ("Tamper evidence"). Needs the audit role.

    \b
    Example:
      provledger prove E1 > e1-proof.json
    """
    with _principal(url, token) as (_led, session):
        proofs = session.prove(record_id)
    _echo_json(
        [
            {
                "position": p.position,
                "index": p.index,
                "size": p.size,
                "leaf_data": p.leaf_data,
                "path": list(p.path),
                "root": p.root,
            }
            for p in proofs
        ]
    )


# -- maintenance ------------------------------------------------------------------------


@main.command()
@url_option
@json_option
@_errors_exit_1
def stats(url: str | None, as_json: bool) -> None:
    """Show counts: events, log position, records per status, deliveries, snapshots.

    Maintenance: no token, local embedded database only.

    \b
    Example:
      provledger stats --json
    """
    with _host(url, "stats") as led:
        counts = led.stats()
    if as_json:
        _echo_json(counts)
        return
    console = _console()
    console.print(Text(f"ledger {printable(led.url)}", style="bold"))
    table = Table(show_header=False)
    table.add_column("what", style="bold")
    table.add_column("count", justify="right")
    for key, value in counts.items():
        if key == "statuses":
            for status, n in value.items():
                table.add_row(_styled(status, STATUS_STYLE), Text(str(n)))
        else:
            table.add_row(key, Text(str(value)))
    console.print(table)


@main.command()
@click.option(
    "--url",
    default=None,
    help="Where to build the scenario (must be an empty "
    "ledger). Default: a fresh SQLite file in a temporary directory.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@_errors_exit_1
def demo(url: str | None, as_json: bool) -> None:
    """Run the experiment on a fresh embedded SQLite ledger and print its table.

    Exits 1 if any row deviates.

    \b
    Example:
      provledger demo --json
    """
    with tempfile.TemporaryDirectory(prefix="provledger-demo-") as tmp:
        target = url or f"sqlite:///{Path(tmp) / 'demo.db'}"
        with _host(target, "demo") as led:
            result = run_experiment(led)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        print_experiment(result, Console())
    if not result.passed:
        sys.exit(1)


@main.command()
@url_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@_errors_exit_1
def rebuild(url: str | None, as_json: bool) -> None:
    """Drop the views and replay the whole log; exit 1 unless they match.

    Maintenance: no token, local embedded database only.

    \b
    Example:
      provledger rebuild --url sqlite:///provledger.db
    """
    with _host(url, "rebuild") as led:
        report = rebuild_with_progress(led, quiet=as_json)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "events": report.events,
                    "seconds": report.seconds,
                    "events_per_second": report.events_per_second,
                    "digest_before": report.digest_before,
                    "digest_after": report.digest_after,
                    "matched": report.matched,
                }
            )
        )
    if not report.matched:
        click.echo(
            f"error: rebuilt views differ (before {report.digest_before[:16]}…, "
            f"after {report.digest_after[:16]}…)",
            err=True,
        )
        sys.exit(1)


def rebuild_with_progress(led: Ledger, *, quiet: bool = False) -> Any:
    """Rebuild ``led``'s views with a rich progress bar and print the rate."""
    console = Console(stderr=True)
    with Progress(
        TextColumn("rebuilding views"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} positions"),
        TimeRemainingColumn(),
        console=console,
        disable=quiet,
    ) as progress:
        task = progress.add_task("rebuild", total=max(led.position, 1))

        def step(done: int, total: int) -> None:
            progress.update(task, completed=done, total=max(total, 1))

        report = led.rebuild(progress=step)
    if not quiet:
        verdict = "views match" if report.matched else "VIEWS DIFFER"
        console.print(
            f"replayed {report.events} events in {report.seconds:.2f} s "
            f"({report.events_per_second:,.0f} events/s); {verdict} "
            f"(digest {report.digest_after[:16]})"
        )
    return report


# -- listing records --------------------------------------------------------------------


def _listing_table(records: Sequence[RecordView]) -> Table:
    """One row per record; the id column is never wrapped or cut."""
    table = Table()
    table.add_column("id", no_wrap=True, min_width=max(len(r.id) for r in records))
    for column in ("kind", "claim", "status", "validity", "value", "why"):
        table.add_column(column, overflow="fold")
    for r in records:
        notes = []
        if r.status == Status.SUPERSEDED:
            notes.append(f"superseded by {r.superseded_by}")
        elif r.status == Status.STALE and r.cause_superseded_by is not None:
            notes.append(f"{r.cause} superseded by {r.cause_superseded_by}")
        elif r.status == Status.STALE:
            notes.append(f"{r.cause} revoked: {r.reason}")
        elif r.status in (Status.REVOKED, Status.REJECTED) and r.reason:
            notes.append(r.reason)
        if r.supersedes is not None:
            notes.append(f"new version of {r.supersedes}")
        table.add_row(
            Text(r.id),
            Text(str(r.kind)),
            Text(r.claim_key),
            _styled(r.status, STATUS_STYLE),
            _styled(r.validity, VALIDITY_STYLE),
            Text(_value_text(r.value)),
            Text("; ".join(notes) or "-"),
        )
    return table


@click.command("records")
@click.option("--scope", required=True, help="The scope to list.")
@click.option(
    "--status",
    type=click.Choice([s.value for s in Status]),
    help="Only this status (CANDIDATE is the review queue).",
)
@click.option(
    "--validity",
    type=click.Choice([v.value for v in Validity]),
    help="Only this validity (NEEDS_REVALIDATION is what needs attention).",
)
@click.option("--kind", type=click.Choice(KINDS), help="Only this kind.")
@click.option("--claim-prefix", help="Only claim keys starting with this text.")
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="At most this many records (one page).",
)
@click.option("--after", metavar="ID", help="Start after this id (the last of the previous page).")
@token_option
@url_option
@json_option
@_errors_exit_1
def records(
    scope: str,
    status: str | None,
    validity: str | None,
    kind: str | None,
    claim_prefix: str | None,
    limit: int,
    after: str | None,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """List one page of a scope's records in id order, optionally filtered.

    A full page ends with the --after value for the next one (JSON: next_after).

    \b
    Example:
      provledger records --scope proj-a --status CANDIDATE
      provledger records --scope proj-a --validity NEEDS_REVALIDATION --json
    """
    with _principal(url, token) as (_led, session):
        found = session.records(
            scope,
            status=status,
            validity=validity,
            kind=kind,
            claim_prefix=claim_prefix,
            limit=limit,
            after=after,
        )
    next_after = found[-1].id if len(found) == limit else None
    if as_json:
        _echo_json({"records": [record_json(r) for r in found], "next_after": next_after})
        return
    if not found:
        click.echo("no records")
        return
    _console().print(_listing_table(found))
    if next_after is not None:
        click.echo(f"more may follow: add --after {next_after}")


main.add_command(records)
as_of.add_command(records)


if __name__ == "__main__":  # pragma: no cover
    main()
