"""Read commands (also under ``as-of``): read, get, explain, audit, history,
corrections, export, graph, records."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import closing
from datetime import datetime
from itertools import chain, islice
from pathlib import Path
from typing import Any

import click

from ledger.audit import RECORD_EVENTS
from ledger.cli.failures import errors_exit_1, open_json
from ledger.cli.options import (
    KINDS,
    claim_options,
    json_option,
    not_the_ledger,
    principal_session,
    printable,
    run_option,
    shown_key,
    token_option,
    url_option,
    within,
)
from ledger.cli.render import (
    Moment,
    echo_json,
    events_table,
    listing_table,
    moment_console,
    moment_note,
    moment_of,
    print_audit,
    print_corrections,
    print_explanation,
    print_read,
    print_record,
    show,
    stamped,
    working,
    write_output,
)
from ledger.domain import Status, Validity
from ledger.errors import LedgerError
from ledger.jsonable import json_safe, plain, record_json
from ledger.session import Session, next_after
from ledger.validation import key_text
from ledger.values import AuditEvent, CorrectionDue, RecordView

# -- read commands (also under as-of) ----------------------------------------------


@click.command()
@claim_options
@run_option
@token_option
@url_option
@json_option
@errors_exit_1
def read(
    scope: str,
    claim_key: str,
    at: datetime | None,
    context: Any,
    kinds: tuple[str, ...],
    run_id: str | None,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Read a claim through the eligibility chain: FOUND, MISSING or CONFLICT.

    \b
    Example:
      provledger read --scope proj-a --claim api.retry_safe
    """
    with principal_session(url, token) as (_led, session):
        result = within(session, run_id).read(
            scope, claim_key, at=at, context=context, kinds=kinds or None
        )
        moment = moment_of(session)
    if as_json:
        echo_json(
            stamped(
                {
                    "outcome": result.outcome,
                    "scope": result.scope,
                    "claim_key": result.claim_key,
                    "at": result.at,
                    "value": result.value,
                    "records": [record_json(r) for r in result.records],
                },
                moment,
            )
        )
    else:
        print_read(result, moment_console(moment))


@click.command()
@click.argument("record_id", metavar="ID")
@run_option
@token_option
@url_option
@json_option
@errors_exit_1
def get(record_id: str, run_id: str | None, token: str, url: str | None, as_json: bool) -> None:
    """Show one record: status, validity, dependencies, evidence, deliveries.

    \b
    Example:
      provledger get R1
    """
    with principal_session(url, token) as (_led, session):
        record = within(session, run_id).get(record_id)
        moment = moment_of(session)
    if as_json:
        echo_json(stamped(record_json(record), moment))
    else:
        print_record(record, moment_console(moment))


@click.command()
@claim_options
@run_option
@token_option
@url_option
@json_option
@errors_exit_1
def explain(
    scope: str,
    claim_key: str,
    at: datetime | None,
    context: Any,
    kinds: tuple[str, ...],
    run_id: str | None,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Say, per record answering a claim, why it is or is not usable.

    \b
    Example:
      provledger explain --scope proj-a --claim api.retry_safe
    """
    with principal_session(url, token) as (_led, session):
        explanation = within(session, run_id).explain(
            scope, claim_key, at=at, context=context, kinds=kinds or None
        )
        moment = moment_of(session)
    if as_json:
        entries = [
            {"record": record_json(e.record), "usable": e.usable, "reasons": e.reasons}
            for e in explanation.entries
        ]
        echo_json(
            stamped(
                {
                    "outcome": explanation.outcome,
                    "scope": explanation.scope,
                    "claim_key": explanation.claim_key,
                    "at": explanation.at,
                    "entries": entries,
                },
                moment,
            )
        )
    else:
        print_explanation(explanation, moment_console(moment))


@click.command()
@click.argument("record_id", metavar="ID")
@token_option
@url_option
@json_option
@errors_exit_1
def audit(record_id: str, token: str, url: str | None, as_json: bool) -> None:
    """Show the whole history of a record, revoked ones included (needs the audit role).

    \b
    Example:
      provledger audit E1
    """
    with principal_session(url, token) as (_led, session):
        trail = session.audit(record_id)
        moment = moment_of(session)
    if as_json:
        echo_json(
            stamped(
                {
                    "record": record_json(trail.record),
                    "events": trail.events,
                    "undeclared": trail.undeclared,
                },
                moment,
            )
        )
    else:
        print_audit(trail, moment_console(moment))


#: Events ``history`` lists without ``--limit`` (``--json``: every one).
HISTORY_LIMIT = 1000


@click.command()
@click.option("--record", "record_id", help="Only this record's events.")
@click.option(
    "--type",
    "event_type",
    type=click.Choice(RECORD_EVENTS),
    metavar="TYPE",
    help=f"Only this event type: {', '.join(RECORD_EVENTS)}.",
)
@click.option("--from", "start", type=click.IntRange(min=0), help="First log position.")
@click.option("--to", "stop", type=click.IntRange(min=0), help="Last log position (inclusive).")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help=f"List at most this many events (default {HISTORY_LIMIT}; the last line gives the "
    "--from of the next page). With --json: only this many (default every one).",
)
@click.option("--all", "show_all", is_flag=True, help="List every event.")
@token_option
@url_option
@json_option
@errors_exit_1
def history(
    record_id: str | None,
    event_type: str | None,
    start: int | None,
    stop: int | None,
    limit: int | None,
    show_all: bool,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """List the event log: record events in scopes where you hold the audit role.

    Prints the first --limit events (the last line says where the next page
    starts); --all lists them all, --json gives everything (or the first
    --limit, when given, with next_from: the --from of the next page). The log is listed
    from one snapshot an event at a time, so a long one starts printing at once.

    \b
    Example:
      provledger history --type Revoked --from 10 --to 40
    """
    if show_all and limit is not None:
        raise click.UsageError("give --all or --limit, not both (--all lists every event)")
    if start is not None and stop is not None and start > stop:
        raise click.UsageError(
            f"--from {start} is after --to {stop} (an empty range); give --from at most --to"
        )
    with principal_session(url, token) as (_led, session):
        found = session.iter_history(record=record_id, type=event_type, start=start, stop=stop)
        with closing(found) as events:
            # One read transaction, one snapshot, however long the log; the
            # first event is read before anything is printed, so a refusal
            # comes before any output.
            first = next(events, None)
            listed = events if first is None else chain((first,), events)
            moment = moment_of(session)
            if as_json:
                echo_json_events(listed, None if show_all else limit, moment)
                return
            limit = HISTORY_LIMIT if limit is None else limit
            console = moment_console(moment)
            shown = 0
            waiting: list[AuditEvent] = []
            try:
                for event in listed:
                    if not show_all and shown == limit:
                        if waiting:
                            show(console, events_table(waiting, with_record=True))
                        click.echo(
                            f"… more events from log position {event.position}: "
                            f"--from {event.position} lists the next page, --all (without "
                            "--limit) every one"
                        )
                        return
                    waiting.append(event)
                    shown += 1
                    if len(waiting) == HISTORY_TABLE_ROWS:
                        show(console, events_table(waiting, with_record=True))
                        waiting = []
            except LedgerError:  # refused part way: what was read is shown, then why
                if waiting:
                    show(console, events_table(waiting, with_record=True))
                raise
            if waiting:
                show(console, events_table(waiting, with_record=True))
            elif not shown:
                click.echo("no events")


#: Events ``history --all`` prints as one table.
HISTORY_TABLE_ROWS = 1000


def echo_json_events(
    events: Iterator[AuditEvent], limit: int | None, moment: Moment | None = None
) -> None:
    """``{"events": [...], "next_from": N}`` as :func:`echo_json` prints it, written an
    event at a time: the first ``limit`` events (all if None), and the log position
    of the next one, for ``--from`` (null when no more follow); as of a past
    ``moment``, ``as_of`` comes first. Refused part way (an
    event that cannot be read, a connection lost), the document ends with the events
    written so far and ``"error": {"type", "message"}`` in place of ``next_from``:
    stdout stays one JSON object."""
    head = "{\n"
    if moment is not None:
        text = json.dumps(moment.json(), indent=2, ensure_ascii=False).replace("\n", "\n  ")
        head += f'  "as_of": {text},\n'
    click.echo(head + '  "events": [', nl=False)
    separator = "\n"

    def close(error: dict[str, Any]) -> None:
        text = json.dumps(error, indent=2, ensure_ascii=False).replace("\n", "\n  ")
        click.echo(("\n  ]" if separator == ",\n" else "]") + f',\n  "error": {text}\n}}')

    with open_json(close):
        for event in events if limit is None else islice(events, limit):
            text = json.dumps(json_safe(plain(event)), indent=2, ensure_ascii=False)
            # JSON's own line breaks only: the text holds no raw "\n" inside a string
            # (U+2028 and others are left as they are, as in the stored value).
            click.echo(separator + "    " + text.replace("\n", "\n    "), nl=False)
            separator = ",\n"
        following = next(events, None)
    click.echo("\n  ]" if separator == ",\n" else "]", nl=False)
    click.echo(f',\n  "next_from": {"null" if following is None else following.position}\n}}')


@click.command()
@click.option("--record", "record_id", help="Only this record's deliveries.")
@token_option
@url_option
@json_option
@errors_exit_1
def corrections(record_id: str | None, token: str, url: str | None, as_json: bool) -> None:
    """List deliveries owing a correction: their record left VALID after the
    delivery, or is VALID again on another basis than the delivered copy rests on
    (its own, or that of a record it rests on), with no correction since.

    Lists the scopes where the token's principal holds deliver (it issues the
    corrections, with `provledger correct`) or audit (it checks they are issued).

    \b
    Example:
      provledger corrections
      provledger corrections --record R1
    """
    with principal_session(url, token) as (_led, session):
        due = session.corrections_due(record_id)
        views = {} if as_json else views_of(session, due)
        moment = moment_of(session)
    if as_json:
        echo_json(stamped({"due": due}, moment))
    else:
        print_corrections(due, moment_console(moment), views)


def views_of(session: Session, due: Sequence[CorrectionDue]) -> dict[str, RecordView]:
    """The records of ``due`` whose why needs more than a ``CorrectionDue`` says
    (whether a STALE one's cause was revoked or superseded, what superseded a
    SUPERSEDED one, which expiry an ACCEPTED one passed), by the id shown; one the
    principal may not ``get`` (no read role there) is left out."""
    views = {}
    for c in due:
        if c.validity != Validity.VALID and c.status not in (Status.REVOKED, Status.REJECTED):
            rid = c.delivery.record_id
            try:
                views[rid] = session.get(rid)
            except LedgerError:
                continue
    return views


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
@errors_exit_1
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
    not_the_ledger(output, url, "export")
    with principal_session(url, token) as (_led, session):
        text = export_text(
            session,
            fmt,
            scope=scope,
            record=record_id,
            ancestors=ancestors,
            descendants=descendants,
        )
        moment = moment_of(session)
    write_output(output, text.encode())
    if output != "-":
        click.echo(f"wrote {printable(output)} ({fmt}){moment_note(moment)}")


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
@click.option(
    "--max-nodes",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Refuse (with a summary) a picture of more records than this.",
)
@token_option
@url_option
@errors_exit_1
def graph(
    record_id: str,
    ancestors: bool,
    descendants: bool,
    fmt: str,
    output: str,
    max_nodes: int,
    token: str,
    url: str | None,
) -> None:
    """Draw a record's dependency subgraph, coloured by status (neither flag: both directions).

    Nodes show id, kind, status and validity, and on REVOKED records the reason,
    who revoked them and when; observed edges are dashed; delivered records have
    a double border; a legend says what the colours mean. Above --max-nodes the
    picture is refused with a summary. Without Graphviz's dot program, svg and
    png fall back to DOT text (-o FILE.png writes FILE.dot) with a warning, and
    are refused to stdout. PNG is binary: give -o FILE (or pipe it) rather than
    print it to a terminal.

    \b
    Example:
      provledger graph E1 --descendants --format svg -o impact.svg
    """
    from ledger.graph import GRAPHVIZ_HINT, collect, picture, revocations

    if fmt == "png" and output == "-" and sys.stdout.isatty():
        raise click.UsageError(
            "--format png is binary and stdout is a terminal: give -o FILE.png "
            f"(e.g. provledger graph {record_id} --format png -o {record_id}.png)"
        )
    both = not ancestors and not descendants
    not_the_ledger(output, url, "graph")
    with principal_session(url, token) as (_led, session):
        with working(f"collecting the records around {record_id}"):
            sub = collect(
                session, record_id, ancestors=ancestors or both, descendants=descendants or both
            )
        if len(sub.nodes) > max_nodes:
            raise LedgerError(f"graph refused: {graph_summary(sub, max_nodes, one_side=not both)}")
        with working(f"drawing {len(sub.nodes):,} records"):
            drawn = picture(sub, fmt, revocations(session, sub))
        moment = moment_of(session)
    if drawn.fell_back and output == "-":
        # Standard output has no name to say it holds DOT: `> impact.png` would be
        # a PNG file of text, and the command would say it succeeded.
        raise LedgerError(
            f"graph refused: Graphviz's `dot` program is not installed, so no "
            f"{fmt.upper()} can be drawn, and standard output would get DOT text in its "
            f"place; nothing was written: {GRAPHVIZ_HINT}, give --format dot or mermaid, "
            f"or -o FILE.{fmt} (which writes the DOT source to FILE.dot)"
        )
    target, replaced = output, False
    if drawn.fell_back:
        target = str(Path(output).with_suffix(".dot"))
        not_the_ledger(target, url, "graph")
        # A name the user did not give: say so when a file was there before.
        replaced = target != output and os.path.lexists(target)
    write_output(target, drawn.data)
    if drawn.note:
        was = "; the file there before was replaced" if replaced else ""
        click.echo(f"warning: {drawn.note} ({printable(target)}{was})", err=True)
    if target != "-":
        click.echo(
            f"wrote {printable(target)} ({drawn.format}: "
            f"{len(sub.nodes)} record{'' if len(sub.nodes) == 1 else 's'}, "
            f"{len(sub.edges)} edge{'' if len(sub.edges) == 1 else 's'}){moment_note(moment)}"
        )


def graph_summary(sub: Any, max_nodes: int, *, one_side: bool = False) -> str:
    """Why a picture is too large, what is in it (counts by status and by the first
    part of the claim key) and what to do instead: draw one side (unless ``one_side``
    was drawn already), a record further along, or list the most common status in
    the records' scope (when they share one)."""
    statuses = Counter(str(n.status) for n in sub.nodes)
    prefixes = Counter(key_text(n.claim_key.split(".", 1)[0]) + ".*" for n in sub.nodes)
    by_status = ", ".join(f"{k} {v:,}" for k, v in statuses.most_common())
    by_claim = ", ".join(f"{k} {v:,}" for k, v in prefixes.most_common(5))
    more = len(prefixes) - 5
    scopes = {n.scope for n in sub.nodes}
    scope = next(iter(scopes)) if len(scopes) == 1 else "SCOPE"
    status = statuses.most_common(1)[0][0] if statuses else "STALE"
    side = "" if one_side else "one side (--ancestors or --descendants) or "
    return (
        f"{sub.title} has {len(sub.nodes):,} records, more than --max-nodes {max_nodes:,} "
        f"({by_status}; claims {by_claim}{f' and {more:,} more' if more > 0 else ''}); "
        f"draw {side}a record further along, list them "
        f"(provledger records --scope {printable(scope)} --status {status}), or raise --max-nodes"
    )


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
@click.option(
    "--claim-prefix",
    callback=shown_key,
    help="Only claim keys starting with this text (or the key tables show as a JSON string).",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="At most this many records (one page).",
)
@click.option("--after", metavar="ID", help="Start after this id (the last of the previous page).")
@run_option
@token_option
@url_option
@json_option
@errors_exit_1
def records(
    scope: str,
    status: str | None,
    validity: str | None,
    kind: str | None,
    claim_prefix: str | None,
    limit: int,
    after: str | None,
    run_id: str | None,
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """List one page of a scope's records in id order, optionally filtered.

    A page that more records follow ends with the --after value for the next one
    (JSON: next_after).

    \b
    Example:
      provledger records --scope proj-a --status CANDIDATE
      provledger records --scope proj-a --validity NEEDS_REVALIDATION --json
    """
    filters: dict[str, Any] = {
        "status": status,
        "validity": validity,
        "kind": kind,
        "claim_prefix": claim_prefix,
    }
    with principal_session(url, token) as (_led, session):
        found = within(session, run_id).records(scope, limit=limit, after=after, **filters)
        # through the session: looking whether more follow is not shown to the run
        following = next_after(session, scope, found, limit, **filters)
        moment = moment_of(session)
    if as_json:
        page = {"records": [record_json(r) for r in found], "next_after": following}
        echo_json(stamped(page, moment))
        return
    console = moment_console(moment)
    if not found:
        click.echo("no records")
        return
    show(console, listing_table(found))
    if following is not None:
        click.echo(f"more follow: add --after {following}")


@click.command()
@click.argument("ref", metavar="REF")
@click.option("-o", "--output", required=True, help="File to write the bytes to (- for stdout).")
@token_option
@url_option
@errors_exit_1
def snapshot(ref: str, output: str, token: str, url: str | None) -> None:
    """Write the captured bytes behind REF (sha256:…, from `get E1`), re-verified.

    \b
    Example:
      provledger snapshot sha256:9f86d0… -o doc-as-read.txt
    """
    if output == "-" and sys.stdout.isatty():
        raise click.UsageError("give -o FILE: captured bytes may be binary (or -o - into a pipe)")
    not_the_ledger(output, url, "snapshot")
    with principal_session(url, token) as (_led, session):
        data = session.snapshot(ref)
    write_output(output, data)
    if output != "-":
        click.echo(f"wrote {printable(output)} ({len(data):,} bytes, {ref})")
