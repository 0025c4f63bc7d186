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
from ledger.persistence.sqlite_files import holds_no_event, others_tables
from ledger.persistence.urls import Backend, redacted, resolve_url

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
    again, which says it found them.

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
            found = empty_ledger_at(target)  # left by a copy that did not finish?
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
    if found is not None:
        say_found(found, "the copy is in them")
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


# -- an empty ledger left by an init or a copy that did not finish ----------------------


def empty_ledger_at(url: str | None) -> str | None:
    """Where ``url``'s file or schema holds a ledger's tables with no event in its log
    (all or some of them, as an ``init`` or a ``copy`` that did not finish leaves
    them), named as messages name it; None for anything else: no ledger there,
    one holding an event, a URL read-only or ``memory:``, another program's tables
    beside. Read without opening it as a ledger (which would make tables)."""
    backend = resolve_url(url)
    if backend.read_only or not _holds_no_event(backend):
        return None
    if backend.path is not None:
        return printable(backend.path)
    return f"schema {backend.env['POSTGRES_SCHEMA']!r} of {printable(backend.url)}"


def say_found(where: str, taken: str) -> None:
    """The note on stderr that ``where`` held an empty ledger's tables (see
    :func:`empty_ledger_at`), ``taken`` saying what was done with them."""
    click.echo(
        f"note: {where} held a ledger's tables with no event in its log (as an init or a "
        f"copy that did not finish leaves them, or one running at the same moment): {taken}",
        err=True,
    )


#: A ledger's events table on PostgreSQL (eventsourcing's, named by the application).
_PG_EVENTS = "provledger_events"


def _holds_no_event(backend: Backend) -> bool:
    """Whether ``backend``'s file or schema holds a ledger's tables with nothing in
    them (but the views' layout and position) and no other program's table, read
    without opening it as a ledger (False also when it cannot be read: opening it
    says why)."""
    if backend.kind == "sqlite" and backend.path is not None:
        return not others_tables(backend.path) and holds_no_event(backend.path)
    if backend.kind != "postgresql":
        return False
    import psycopg

    from ledger.persistence.pg_pool import others_pg_tables, plain_connection

    if others_pg_tables(backend.env):
        return False
    schema = backend.env["POSTGRES_SCHEMA"]
    try:
        with plain_connection(backend.env) as conn:
            conn.execute("SET lock_timeout = '10s'")  # a table locked: the copy says so
            names = [
                row[0]
                for row in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
                )
            ]
            if _PG_EVENTS not in names:
                return False
            held = [n for n in names if n not in ("pl_tracking", "pl_schema")]
            return not any(
                conn.execute(f'SELECT 1 FROM "{schema}"."{t}" LIMIT 1').fetchone() for t in held
            )
    except psycopg.Error:
        return False
