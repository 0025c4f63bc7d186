"""``provledger copy``: the ledger, whole, into an empty database of either backend."""

from __future__ import annotations

import click
from click.core import ParameterSource
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from ledger.application import Ledger
from ledger.cli.failures import errors_exit_1
from ledger.cli.options import (
    admin_options,
    host_ledger,
    json_option,
    printable,
    warn_public_schema,
)
from ledger.cli.render import AnswerConsole, echo_json
from ledger.errors import LedgerError
from ledger.persistence.copying import CopyReport, copy_ledger, read_only_source
from ledger.persistence.urls import redacted, resolve_url

#: What the progress bar says in each step of a copy.
STEPS = {"events": "copying the log", "views": "building its views"}


def _password_in_target(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> str | None:
    """Warn when ``--to`` holds a password: other users read the command line
    (``ps``), masked as it is in every message. (``--url``'s own warning names
    ``--url``; a target has no variable of its own to take it instead.)"""
    given = ctx.get_parameter_source(param.name or "") is ParameterSource.COMMANDLINE
    held = value is not None and redacted(value.strip()) != value.strip()
    if given and held and not ctx.resilient_parsing:
        click.echo(
            "warning: --to on the command line holds a password, visible to other users "
            "(ps, /proc/PID/cmdline); leave the password out of the URL and give it in "
            "~/.pgpass (or $PGPASSWORD, which a source URL without one takes too)",
            err=True,
        )
    return value


@click.command("copy")
@click.option(
    "--to",
    "target",
    required=True,
    metavar="URL",
    callback=_password_in_target,
    help="The empty database to copy into: sqlite:///new.db or postgresql://…?schema=…",
)
@admin_options
@json_option
@errors_exit_1
def copy_command(target: str, url: str | None, admin_token: str | None, as_json: bool) -> None:
    """Copy the ledger into an empty database: SQLite to PostgreSQL, back, or to
    another schema or file.

    The log is copied at one position (one read of the ledger, while commands
    keep running; nothing is written to it) with its Merkle leaves and evidence
    snapshots, byte for byte, and the copy's views are built from it, all in one
    transaction that commits only if the copy's digest is the ledger's. Tokens,
    grants and the admin token work on the copy. The target must hold no ledger
    rows and no other program's tables: a new file or an empty schema (do not
    run `init` on it). Prints the digest: `provledger verify --against` it
    passes on the copy.

    A new SQLite file is built beside its name (hidden, .NAME.partial-PID) and
    appears there only once complete, as one file: a copy killed midway leaves
    no file at the name (the next copy into that folder removes what was left).
    A killed copy into PostgreSQL leaves its schema's tables empty: copy into it
    again.

    To move a ledger: stop its writers, copy, point $PROVLEDGER_URL at the copy.
    What is written to the ledger after the copy's position is not in the copy.

    \b
    Example:
      provledger copy --url sqlite:///provledger.db --to 'postgresql://me@db/ledger?schema=prov'
    """
    given, opened = resolve_url(url).url, read_only_source(url)
    shown = printable(given)
    warn_public_schema(target, "copy")
    try:
        with host_ledger(opened, "copy", admin_token, catch_up=False) as led:
            report = copy_with_progress(led, target, quiet=as_json, source_url=given)
    except LedgerError as exc:  # the source named as given, not as opened (mode=ro)
        exc.args = (str(exc).replace(redacted(opened), given), *exc.args[1:])
        raise
    info = {
        "source": shown,
        "target": printable(report.target),
        "events": report.events,
        "position": report.position,
        "snapshots": report.snapshots,
        "digest": str(report.digest),
        "seconds": round(report.seconds, 3),
    }
    if as_json:
        echo_json(info)
        return
    snapshots = f"{report.snapshots} evidence snapshot" + ("" if report.snapshots == 1 else "s")
    click.echo(
        f"copied {info['target']}: {report.events} events up to log position "
        f"{report.position}, {snapshots}, from {shown} in {report.seconds:.1f} s; the "
        "digest of both is on stdout (on the copy: provledger verify --against DIGEST)",
        err=True,
    )
    click.echo(str(report.digest))


def copy_with_progress(
    led: Ledger, target: str, *, quiet: bool = False, source_url: str | None = None
) -> CopyReport:
    """:func:`copy_ledger` of ``led`` (named ``source_url``) into ``target`` with a
    progress bar on stderr, on a terminal only (and gone once done), so that a
    refusal is one line there."""
    console = AnswerConsole(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} positions"),
        TimeRemainingColumn(),
        console=console,
        disable=quiet or not console.is_terminal,
        transient=True,
    ) as progress:
        task = progress.add_task(STEPS["events"], total=max(led.position, 1))

        def step(what: str, reached: int, total: int) -> None:
            progress.update(task, description=STEPS[what], completed=reached, total=max(total, 1))

        return copy_ledger(led, target, progress=step, source_url=source_url)
