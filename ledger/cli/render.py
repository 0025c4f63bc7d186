"""How results are shown: tables and colours for people, JSON for machines."""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledger.cli import terminal
from ledger.cli.options import (
    OUTCOME_STYLE,
    STATUS_STYLE,
    VALIDITY_STYLE,
    AsOf,
    printable,
)
from ledger.domain import Status, Validity
from ledger.errors import naming_file
from ledger.experiment import ExperimentResult
from ledger.jsonable import json_safe, plain
from ledger.session import Session
from ledger.validation import key_text
from ledger.values import (
    AuditEvent,
    AuditTrail,
    CorrectionDue,
    Explanation,
    ReadResult,
    RecordView,
    Revocation,
)

# -- output -----------------------------------------------------------------------------


class AnswerConsole(Console):
    """A console for a command's answer on stdout (or its progress on stderr); a
    reader that goes away is left to the command line (:class:`ledger.cli._Main`),
    not rich's exit 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of stdout went away")

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Print ``objects``; on a terminal, the text of tables' cells is made
        inert (:func:`ledger.cli.terminal.inert`) before their widths are measured,
        so that an escape does not push a row's borders out of line."""
        if self.is_terminal:
            objects = tuple(_inert_cells(o) for o in objects)
        super().print(*objects, **kwargs)


def _inert_cells(renderable: Any) -> Any:
    """``renderable`` with the text of each cell of a table (in tables within
    tables too) made inert; a cell whose text changes loses its partial styles
    (its own style stays). Other renderables are left as they are: the terminal's
    stream escapes what they print."""
    if isinstance(renderable, Table):
        for column in renderable.columns:
            # rich keeps a column's cells in ``_cells`` (no public way to rewrite one)
            column._cells = [_inert_cells(cell) for cell in column._cells]
        return renderable
    if isinstance(renderable, Text):
        made = terminal.inert(renderable.plain)
        if made == renderable.plain:
            return renderable
        shown = renderable.copy()
        shown.spans = []
        shown.plain = made
        return shown
    if isinstance(renderable, str):  # markup: its escapes hold no "["
        return terminal.inert(renderable)
    return renderable


def make_console() -> Console:
    # Piped output keeps long ids and reasons on one line instead of 80 columns,
    # unless COLUMNS says how wide the output is to be.
    wide = sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    return AnswerConsole(highlight=False, width=None if wide else 160)


@contextmanager
def working(what: str, *, quiet: bool = False) -> Iterator[None]:
    """A spinner on stderr while a long command works (only on a terminal)."""
    console = AnswerConsole(stderr=True)
    if quiet or not console.is_terminal:
        yield
        return
    with console.status(what):
        yield


def show(console: Console, table: Table) -> None:
    """Print ``table``; when its columns cannot all fit the terminal with no word
    (an id, an e-mail address, a header) cut, print each row as ``column  value``
    lines instead (on a terminal, measured as written out: see ``AnswerConsole``)."""
    if console.is_terminal:
        table = _inert_cells(table)
    if _fit(table, console.width):
        console.print(table)
        return
    width = max(len(str(c.header)) for c in table.columns)
    cells = [list(c.cells) for c in table.columns]
    for i in range(table.row_count):
        if i:
            console.print()
        for column, column_cells in zip(table.columns, cells, strict=True):
            line = Text.assemble((f"{column.header!s:<{width}}  ", "bold"))  # the name only
            cell = column_cells[i]
            text = cell if isinstance(cell, Text) else Text(str(cell))
            line.append_text(text)
            # Text wraps at spaces, between words, unless a word is wider than the
            # terminal: then the line is left whole for the terminal to wrap.
            whole = column.no_wrap or _longest_word(text.plain) > console.width
            console.print(line, soft_wrap=whole)


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


#: Columns of stored data: a word in them longer than the column (a hash, a URL)
#: folds onto more lines, where a word elsewhere (a header, an e-mail address, a
#: reason's) turns the table into ``column  value`` lines.
FOLDED = frozenset({"claim", "value"})


def _fit(table: Table, width: int) -> bool:
    """Give the folding columns of ``table`` widths at which no word is cut (but in
    :data:`FOLDED` columns) and the table fits ``width``; rich would narrow one
    below its longest word. False, changing nothing, when that cannot be done."""
    room = width - 3 * len(table.columns) - 1  # borders and padding
    low: list[int] = []  # the longest word: narrower cuts one
    high: list[int] = []  # the longest line: wider is never needed
    for column in table.columns:
        header = str(column.header)
        cells = [c.plain if isinstance(c, Text) else str(c) for c in column.cells]
        lines = [line for text in (header, *cells) for line in text.splitlines()]
        widest = max(map(cell_len, lines), default=0)
        longest = max(map(_longest_word, cells), default=0)
        if column.no_wrap:
            shortest = widest
        elif header in FOLDED:
            shortest = max(_longest_word(header), min(longest, 6))
        else:
            shortest = max(_longest_word(header), longest)
        low.append(max(shortest, column.min_width or 0))
        high.append(max(widest, low[-1]))
    if sum(low) > room:
        return False
    if sum(high) <= room:
        return True

    # Narrow the widest folding columns first, each no further than its longest word:
    # the widest cap at which the table fits (found by halving: it fits at 0, each
    # column at its longest word, and not at max(high)).
    def fits(cap: int) -> bool:
        return sum(max(lo, min(hi, cap)) for lo, hi in zip(low, high, strict=True)) <= room

    fitting, too_wide = 0, max(high)
    while too_wide - fitting > 1:
        middle = (fitting + too_wide) // 2
        fitting, too_wide = (middle, too_wide) if fits(middle) else (fitting, middle)
    cap = fitting
    for column, lo, hi in zip(table.columns, low, high, strict=True):
        if not column.no_wrap and hi > cap:
            column.width = max(lo, cap)
    return True


def new_table(
    *columns: str,
    ids: Mapping[str, Iterable[str]] | None = None,
    words: Mapping[str, Iterable[str]] | None = None,
    keep: Mapping[str, Iterable[str]] | None = None,
    **kw: Any,
) -> Table:
    """A table whose id columns (``ids``: column → the ids in it) and columns of
    single words (``words``: a status, a validity) are never wrapped or cut, and
    whose other columns fold long text onto more lines instead of cutting it;
    ``keep``: column → the words of its text (each an id with what is written
    around it) that are folded onto a line of their own but never cut."""
    table = Table(**kw)
    unbroken = {**(ids or {}), **(words or {})}
    for name in columns:
        values = unbroken.get(name)
        if values is not None:
            widest = max((len(v) for v in values), default=0)
            table.add_column(name, no_wrap=True, min_width=max(widest, len(name)))
        else:
            widest = max((len(w) for w in (keep or {}).get(name, ())), default=0)
            table.add_column(name, overflow="fold", min_width=widest or None)
    return table


def echo_json(data: Any) -> None:
    click.echo(json.dumps(json_safe(plain(data)), indent=2, ensure_ascii=False))


# -- the moment an as-of answer shows -----------------------------------------------------


@dataclass(frozen=True)
class Moment:
    """The past moment an answer under ``as-of`` shows: the log position it shows
    the ledger right after (the end of the transaction holding the position asked
    for: a command's events are seen together), the instant of that moment
    (``--time`` when given; else the time of that position's event: reads judge
    expiry then unless ``--at`` names another), and what
    ``as-of`` was given."""

    position: int
    time: datetime
    asked: AsOf

    def json(self) -> dict[str, Any]:
        """``--json``'s ``as_of``: ``{"position": N, "time": "…"}``."""
        return {"position": self.position, "time": self.time.isoformat()}

    def text(self) -> str:
        """The first line of an answer for people ("as of log position 12 (2026-…)")."""
        when = self.time.isoformat()
        if self.asked.position is None:
            return f"as of {when} (log position {self.position})"
        if self.position == 0:
            return f"as of log position 0: the empty ledger ({when})"
        if self.asked.position == self.position:
            return f"as of log position {self.position} ({when})"
        return (
            f"as of log position {self.position} ({when}), the end of the transaction "
            f"holding position {self.asked.position}: its events are shown together"
        )


def stamped(data: dict[str, Any], moment: Moment | None) -> dict[str, Any]:
    """``data``, with ``as_of`` first when it is an answer as of a past ``moment``."""
    return data if moment is None else {"as_of": moment.json(), **data}


def moment_of(session: Session) -> Moment | None:
    """The past moment ``session`` answers as of (None for a session of now)."""
    if session.position is None or session.caller.as_of_at is None:
        return None
    ctx = click.get_current_context(silent=True)
    asked = ctx.find_object(AsOf) if ctx is not None else None
    return Moment(session.position, session.caller.as_of_at, asked or AsOf(session.position, None))


def moment_console(moment: Moment | None) -> Console:
    """A console for an answer for people, its first line the past ``moment`` it shows."""
    console = make_console()
    if moment is not None:
        console.print(Text(moment.text(), style="bold"), soft_wrap=True)
    return console


def moment_note(moment: Moment | None) -> str:
    """What a file written as of a past ``moment`` is said to show ("" for now)."""
    return "" if moment is None else f", {moment.text()}"


def styled(value: object, styles: Mapping[str, str]) -> Text:
    return Text(str(value), style=styles.get(str(value), ""))


def value_text(value: Any) -> str:
    return json.dumps(plain(value), ensure_ascii=False)


def when_text(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def report_done(as_json: bool, data: dict[str, Any], line: str) -> None:
    """What a write command prints: ``line`` for people, ``data`` with ``--json``."""
    if as_json:
        echo_json(data)
    else:
        click.echo(line)


def records_table(records: Sequence[RecordView]) -> Table:
    table = new_table(
        *("id", "kind", "status", "validity", "value", "parents", "expires"),
        ids={"id": [r.id for r in records]},
        words=_words(records),
    )
    for r in records:
        parents = ", ".join(r.parents)
        if r.undeclared:
            parents += f" (observed: {', '.join(r.undeclared)})"
        table.add_row(
            Text(r.id),
            Text(str(r.kind)),
            styled(r.status, STATUS_STYLE),
            styled(r.validity, VALIDITY_STYLE),
            Text(value_text(r.value)),
            Text(parents or "-"),
            Text(when_text(r.expires)),
        )
    return table


def _words(records: Sequence[RecordView]) -> dict[str, list[str]]:
    """The kind, status and validity of ``records``, by column (``new_table``'s ``words``)."""
    return {
        "kind": [str(r.kind) for r in records],
        "status": [str(r.status) for r in records],
        "validity": [str(r.validity) for r in records],
    }


def listing_table(records: Sequence[RecordView]) -> Table:
    """``provledger records``: one row per record; the id column is never wrapped or cut."""
    table = new_table(
        *("id", "kind", "claim", "status", "validity", "value", "why"),
        ids={"id": [r.id for r in records]},
        words=_words(records),
    )
    for r in records:
        notes = [why] if (why := why_text(r)) else []
        if r.supersedes is not None:
            notes.append(f"new version of {r.supersedes}")
        table.add_row(
            Text(r.id),
            Text(str(r.kind)),
            Text(key_text(r.claim_key)),
            styled(r.status, STATUS_STYLE),
            styled(r.validity, VALIDITY_STYLE),
            Text(value_text(r.value)),
            Text("; ".join(notes) or "-"),
        )
    return table


def stale_text(cause: str | None, reason: str | None, superseded_by: str | None) -> str:
    """One stale cause as the view gives it: revoked (with the reason) or superseded."""
    if superseded_by is not None:
        return f"{cause} superseded by {superseded_by}"
    return f"{cause} revoked: {reason}"


def why_text(r: RecordView) -> str:
    """Why a record is not VALID, in explain's words ("" when it is, or when its
    status says it all): what superseded it, its newest stale cause, why it was
    revoked or rejected, or which expiry passed (its own or an ancestor's)."""
    if r.status == Status.SUPERSEDED:
        return f"superseded by {r.superseded_by}"
    if r.status == Status.STALE:
        return stale_text(r.cause, r.reason, r.cause_superseded_by)
    if r.status in (Status.REVOKED, Status.REJECTED):
        return r.reason or ""
    # Only an ACCEPTED record is invalid for an expiry (a CANDIDATE is for its status).
    if r.status == Status.ACCEPTED and r.validity != Validity.VALID and r.effective_expires:
        when = when_text(r.effective_expires)
        if r.expiry_source in (None, r.id):
            return f"expired at {when}"
        return f"ancestor {r.expiry_source} expired at {when}"
    return ""


def heading_text(outcome: str, scope: str, claim_key: str, at: datetime) -> Text:
    text = styled(outcome, OUTCOME_STYLE)
    text.append(f"  {scope}/{key_text(claim_key)} at {at.isoformat(timespec='seconds')}")
    return text


def print_read(result: ReadResult, console: Console) -> None:
    """A read's outcome and its usable records."""
    heading = heading_text(result.outcome, result.scope, result.claim_key, result.at)
    if result.outcome == "FOUND":
        heading.append(f"  value: {value_text(result.value)}")
    console.print(heading, soft_wrap=True)  # one line, a script's `head -1`, however long
    if result.records:
        show(console, records_table(result.records))
    else:
        console.print("no usable record; `provledger explain` says why")


def print_explanation(explanation: Explanation, console: Console) -> None:
    """Per record, why it is or is not usable."""
    console.print(
        heading_text(explanation.outcome, explanation.scope, explanation.claim_key, explanation.at),
        soft_wrap=True,
    )
    table = new_table(
        *("id", "kind", "status", "usable", "why"),
        ids={"id": [e.record.id for e in explanation.entries]},
        words=_words([e.record for e in explanation.entries]),
    )
    for e in explanation.entries:
        why = "usable" if e.usable else "; ".join(e.reasons)
        if e.record.undeclared:
            why += f" (observed but undeclared: {', '.join(e.record.undeclared)})"
        table.add_row(
            Text(e.record.id),
            Text(str(e.record.kind)),
            styled(e.record.status, STATUS_STYLE),
            Text("yes", style="green") if e.usable else Text("no", style="red"),
            Text(why),
        )
    if explanation.entries:
        show(console, table)
    else:
        console.print("no record answers this claim")


#: A ``get`` row: the field, its value, and the ids, words and instants in the value
#: (never to be cut).
Field = tuple[str, Text, Sequence[str]]


def print_record(record: RecordView, console: Console) -> None:
    """One record, field by field."""
    console.print(Text(f"record {record.id}", style="bold"), soft_wrap=True)
    show_fields(console, record_fields(record))


def record_fields(record: RecordView) -> list[Field]:
    """What ``get`` shows of a record: its fields, its supersession links when set,
    every stale cause (oldest first), evidence and deliveries."""
    rows: list[Field] = [
        ("scope", Text(record.scope), ()),
        ("claim_key", Text(key_text(record.claim_key)), ()),
        ("kind", Text(str(record.kind)), ()),
        ("value", Text(value_text(record.value)), ()),
        ("status", styled(record.status, STATUS_STYLE), (str(record.status),)),
        ("validity", styled(record.validity, VALIDITY_STYLE), (str(record.validity),)),
        ("parents", Text(", ".join(record.parents) or "-"), record.parents),
        ("observed", Text(", ".join(record.observed) or "-"), record.observed),
        ("conditions", Text(value_text(record.conditions) if record.conditions else "-"), ()),
        ("expires", Text(when_text(record.expires)), (when_text(record.expires),)),
        (
            "effective expiry",
            Text(when_text(record.effective_expires)),
            (when_text(record.effective_expires),),
        ),
        ("proposer", Text(record.proposer), (record.proposer,)),
        ("created", Text(when_text(record.created_at)), (when_text(record.created_at),)),
    ]
    if record.supersedes is not None:
        rows.append(("supersedes", Text(record.supersedes), (record.supersedes,)))
    if record.superseded_by is not None:
        rows.append(("superseded by", Text(record.superseded_by), (record.superseded_by,)))
    if record.status == Status.STALE:
        causes: list[tuple[str | None, str | None, str | None, bool]] = [
            (x.cause, x.reason, x.superseded_by, x.blocking) for x in record.stale_causes
        ] or [(record.cause, record.reason, record.cause_superseded_by, True)]
        for cause, reason, by, blocking in causes:
            text = stale_text(cause, reason, by)
            if not blocking:
                text += " (no longer rests under it)"
            rows.append(("stale cause", Text(text), (cause or "", by or "")))
    elif record.reason:
        rows.append(("reason", Text(record.reason), ()))
    if record.undeclared:
        rows.append(
            ("undeclared", Text(", ".join(record.undeclared), style="yellow"), record.undeclared)
        )
    for key, value in (record.evidence or {}).items():
        shown = when_text(value) if isinstance(value, datetime) else str(value)
        # a snapshot ref is what `provledger snapshot` takes: an id too
        rows.append((key, Text(shown), (shown,) if key.endswith(("_ref", "_hash")) else ()))
    for d in record.deliveries:
        corrected = f", {len(d.corrections)} correction(s)" if d.corrections else ""
        text = (
            f"{d.state} to {d.recipient} via {d.channel} at {when_text(d.delivered_at)} "
            f"({d.delivery_id}{corrected})"
        )
        rows.append(("delivery", Text(text), (d.delivery_id,)))
    return rows


def show_fields(console: Console, rows: Sequence[Field]) -> None:
    """Print ``rows`` as a ``field │ value`` table whose values fold long text onto
    more lines; when an id in them is wider than the value column, print each row
    as ``field  value`` lines instead (as :func:`show` does), so no id is ever cut."""
    width = max(len(name) for name, _, _ in rows)
    room = console.width - width - 7  # the table's borders and padding
    # Folding wraps at spaces and cuts only words wider than the column: the words
    # holding an id (with the comma or bracket next to it) must fit.
    widest = max(
        (
            len(word)
            for _, text, ids in rows
            for word in text.plain.split()
            if any(i and i in word for i in ids)
        ),
        default=0,
    )
    if widest <= room:
        table = Table(show_header=False)
        table.add_column("field", style="bold", no_wrap=True)
        table.add_column("value", overflow="fold")
        for name, text, _ in rows:
            table.add_row(name, text)
        console.print(table)
        return
    for name, text, ids in rows:
        line = Text.assemble((f"{name:<{width}}  ", "bold"))  # the name only
        line.append_text(text)
        console.print(line, soft_wrap=bool(ids))  # an id is never broken


def details_text(details: Mapping[str, Any], skip: Sequence[str] = ()) -> str:
    shown = {k: v for k, v in details.items() if k not in skip and v not in (None, "", [], ())}
    return ", ".join(f"{k}={value_text(v)}" for k, v in shown.items())


#: Event details that name a record, a delivery or captured bytes (an id to copy).
ID_DETAILS = ("delivery_id", "cause", "replacement", "supersedes", "parents", "observed")


def _id_words(details: Mapping[str, Any]) -> Iterator[str]:
    """The words of ``details_text(details)`` that hold an id, a hash or an instant."""
    key = ""
    for word in details_text(details, skip=("record_id",)).split():
        if (named := _DETAIL_KEY.match(word)) is not None:
            key = named.group(1)
        if key in ID_DETAILS or "sha256:" in word or _INSTANT.search(word):
            yield word


_DETAIL_KEY = re.compile(r"^(\w+)=")
_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")


def events_table(events: Sequence[AuditEvent], with_record: bool) -> Table:
    columns = ["position", "type", *(["record"] * with_record), "at", "actor", "details"]
    record_ids = [str(e.details.get("record_id", "")) for e in events]
    table = new_table(
        *columns,
        ids={"record": record_ids, "position": [str(len(events))]},
        words={"at": [when_text(e.at) for e in events]},
        keep={"details": [w for e in events for w in _id_words(e.details)]},
    )
    table.columns[0].justify = "right"
    for e in events:
        cells = [Text(str(e.position)), Text(e.type)]
        if with_record:
            cells.append(Text(str(e.details.get("record_id", ""))))
        cells += [
            Text(when_text(e.at)),
            Text(e.actor or "-"),
            Text(details_text(e.details, skip=("record_id",))),
        ]
        table.add_row(*cells)
    return table


def print_audit(trail: AuditTrail, console: Console) -> None:
    """A record's state and its whole history."""
    heading = Text(f"{trail.record.id} [{trail.record.kind}] ")
    heading.append_text(styled(trail.record.status, STATUS_STYLE))
    heading.append(" / ")
    heading.append_text(styled(trail.record.validity, VALIDITY_STYLE))
    if trail.undeclared:
        heading.append(f"  observed but undeclared: {', '.join(trail.undeclared)}", "yellow")
    console.print(heading)
    show(console, events_table(trail.events, with_record=False))


def print_corrections(
    due: Sequence[CorrectionDue], console: Console, views: Mapping[str, RecordView] | None = None
) -> None:
    """Deliveries that need a correction; ``views``: their records by id, where the
    why needs more than ``due`` says (see :func:`why_text`)."""
    if not due:
        console.print("no corrections due")
        return
    console.print(Text(f"{len(due)} correction(s) due", style="bold"))
    table = new_table(
        *("delivery", "record", "scope", "recipient", "status", "validity", "why"),
        ids={
            "delivery": [c.delivery.delivery_id for c in due],
            "record": [c.delivery.record_id for c in due],
            "scope": [c.scope for c in due],
        },
        words={"status": [str(c.status) for c in due], "validity": [str(c.validity) for c in due]},
    )
    for c in due:
        view = (views or {}).get(c.delivery.record_id)
        why = why_text(view) if view is not None else ""
        if not why and c.validity == Validity.VALID:
            # VALID again, on another basis than the delivered copy rests on
            why = "re-based since the delivery: the copy rests on the old basis"
        elif not why:
            why = stale_text(c.cause, c.reason, None) if c.cause else (c.reason or "-")
        table.add_row(
            Text(c.delivery.delivery_id),
            Text(c.delivery.record_id),
            Text(c.scope),
            Text(c.delivery.recipient),
            styled(c.status, STATUS_STYLE),
            styled(c.validity, VALIDITY_STYLE),
            Text(why),
        )
    show(console, table)


def revocation_json(rev: Revocation, owing: Sequence[CorrectionDue] | None) -> dict[str, Any]:
    """Everything ``revoke --json`` prints: the revocation and the positions as-of needs."""
    return {
        **plain(rev),
        "before_position": rev.position - 1,
        "counts": {"REVOKED": 1, "STALE": len(rev.stale)},
        "deliveries_owing_correction": None if owing is None else plain(owing),
    }


def print_revocation(
    rev: Revocation, owing: Sequence[CorrectionDue] | None, console: Console, limit: int | None
) -> None:
    """A summary (counts, deliveries now owing a correction, the positions to give
    ``as-of``), then the first ``limit`` records affected (all if None)."""
    console.print(Text(f"revoked {rev.root} at log position {rev.position}", style="bold"))
    console.print(f"state before: provledger as-of --position {rev.position - 1} …")
    counts = Text("now: ")
    counts.append_text(styled("REVOKED", STATUS_STYLE))
    counts.append(" 1, ")
    counts.append_text(styled("STALE", STATUS_STYLE))
    counts.append(f" {len(rev.stale):,} (in the scopes you can see)")
    console.print(counts)
    if owing is None:
        console.print("deliveries now owing a correction: not shown (no deliver or audit role)")
    else:
        console.print(
            f"deliveries now owing a correction: {len(owing):,}"
            + (" (provledger corrections)" if owing else "")
        )
    shown = rev.affected if limit is None else rev.affected[: limit + 1]
    table = new_table("record", "now", ids={"record": shown})
    for rid in shown:
        status = "REVOKED" if rid == rev.root else "STALE"
        table.add_row(Text(rid), styled(status, STATUS_STYLE))
    show(console, table)
    more = len(rev.affected) - len(shown)
    if more:
        # The revocation is written: asking for it again (with --all) is refused.
        console.print(
            f"… and {more:,} more STALE, not listed: a revocation given --all lists every "
            "one and --json gives everything; this one is written: its markings follow it "
            f"in the log (provledger history --type MarkedStale --from {rev.position + 1} "
            f"--limit {len(rev.stale)}, with the audit role)",
            soft_wrap=True,  # one line: a command in it stays whole
        )


def print_experiment(result: ExperimentResult, console: Console) -> None:
    """Print the experiment's table."""
    table = Table(title=f"provledger experiment ({printable(result.url)})")
    for column in ("check", "expected", "observed", "passed"):
        table.add_column(column, overflow="fold")  # a narrow terminal cuts no word
    for row in result.rows:
        mark = "[green]yes[/green]" if row.passed else "[red]NO[/red]"
        table.add_row(row.check, row.expected, row.observed, mark)
    console.print(table)
    verdict = "[green]all rows passed[/green]" if result.passed else "[red]a row deviated[/red]"
    console.print(verdict)


def write_output(output: str, data: bytes) -> None:
    """``data`` to the file ``output``, or to stdout (``-``): as it is, but text to
    a terminal is shown, not obeyed (:func:`ledger.cli.terminal.inert`), as every
    other output is; bytes would pass the terminal's guard."""
    if output != "-":
        with naming_file(output):
            Path(output).write_bytes(data)
        return
    if sys.stdout is not None and sys.stdout.isatty():
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            pass  # not text (a PNG): as it is
        else:
            click.echo(terminal.inert(text), nl=False)
            return
    click.echo(data, nl=False)  # bytes go to the binary stdout


# -- the commands ---------------------------------------------------------------------
