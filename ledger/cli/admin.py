"""Host commands: create the ledger, grant roles, stats, demo, rebuild, backup (the
token commands are ledger.cli.tokens, copying a ledger ledger.cli.copying)."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ledger.access import ADMIN_PRINCIPAL
from ledger.application import Ledger
from ledger.cli.copying import empty_ledger_at, say_found
from ledger.cli.failures import errors_exit_1, found_problem
from ledger.cli.options import (
    STATUS_STYLE,
    admin_options,
    host_ledger,
    json_option,
    open_ledger,
    printable,
    url_option,
    warn_public_schema,
)
from ledger.cli.render import (
    AnswerConsole,
    echo_json,
    make_console,
    new_table,
    print_experiment,
    report_done,
    show,
    styled,
    when_text,
)
from ledger.engine import read_only_error
from ledger.errors import (
    CorruptEventError,
    DiskFullError,
    InvalidInputError,
    InvalidURLError,
    LedgerNotFoundError,
    StorageError,
)
from ledger.experiment import run_experiment
from ledger.log_check import checked_digest
from ledger.persistence.copy_target import clear_dead_partials, refuse_stale_side_files
from ledger.persistence.faults import reason_of, storage_error
from ledger.persistence.sqlite_files import others_tables, read_only_uri
from ledger.persistence.urls import resolve_url


def _refuse_others_file(url: str | None) -> None:
    """Refuse to put a ledger into another program's SQLite database or PostgreSQL
    schema (its tables would sit beside the ledger's append-only ones) or into a
    file of another kind."""
    backend = resolve_url(url)
    if backend.kind == "postgresql":
        from ledger.persistence.pg_pool import others_pg_tables

        others = others_pg_tables(backend.env)
        where, own = f"schema {backend.env['POSTGRES_SCHEMA']!r} of {backend.url}", "a schema"
    elif backend.path is not None:
        others, where, own = others_tables(backend.path), backend.path, "a file"
    else:
        return
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        held = "is not an SQLite database" if shown.startswith("(") else f"holds {shown}"
        raise LedgerNotFoundError(
            f"not creating a ledger in {where}: it {held}, not a ledger; "
            f"give a ledger {own} of its own (nothing was changed)"
        )


@click.command()
@url_option
@json_option
@errors_exit_1
def init(url: str | None, as_json: bool) -> None:
    """Create the ledger and print its admin token, once (or say it exists).

    On every backend. The admin token goes alone to stdout (the rest to stderr),
    the first time only: keep it, e.g. in $PROVLEDGER_ADMIN_TOKEN; admin
    commands need it on PostgreSQL and on a file you do not own. Every other
    command refuses a ledger that does not exist yet. Run on a ledger none of
    whose admin tokens is usable any more (each revoked or expired), it issues
    a new one, as code holding the database may; on one that has a usable admin
    token it prints nothing on stdout (`--json`: "created" false, "admin_token" null),
    so a script keeps the token it has rather than take an empty one.

    \b
    Example:
      provledger init --url sqlite:///provledger.db
      export PROVLEDGER_URL='postgresql://me@db/ledger?schema=prov'
      TOKEN=$(provledger init) && [ -n "$TOKEN" ] && export PROVLEDGER_ADMIN_TOKEN=$TOKEN
    """
    backend = resolve_url(url)
    if backend.read_only:
        raise read_only_error("init", backend.url)
    found = empty_ledger_at(url)  # tables an init or a copy that did not finish left
    if found is not None:
        say_found(found, "init makes the ledger there, with any table missing")
    try:
        led = open_ledger(url, create=found is not None)
    except LedgerNotFoundError:
        _refuse_others_file(url)
        warn_public_schema(url, "init")
        led = open_ledger(url, create=True)
    with led:
        # A ledger whose log is empty is new: this init makes it (its tables may
        # just have been created by another init racing this one).
        made = led.position == 0
        # Tokens issued before: a new one now means none of them was usable.
        had = bool(led.admin().tokens(ADMIN_PRINCIPAL))
        issued = led.admin().bootstrap_admin_token()
        # Of inits racing on a new ledger, several may have found it new: the one
        # among them that got its first admin token says it created it.
        created = made and issued is not None
        info = {
            "url": printable(led.url),
            "backend": led.backend,
            "position": led.position,
            "created": created,
            "admin_token": issued,
            # a new one because none of those issued before was usable any more
            "reissued": issued is not None and had and not created,
        }
    if as_json:
        echo_json(info)
        return
    what = "created ledger" if created else "ledger exists:"
    where = f"{what} {info['url']} (log position {info['position']})"
    if issued is None:
        click.echo(
            f"{where}; it has an admin token already (another: `provledger token issue --admin`)",
            err=True,
        )
        return
    lost = (
        "; none of its admin tokens was usable any more (each revoked or expired), so "
        "a new one was issued"
        if info["reissued"]
        else ""
    )
    click.echo(
        f"{where}{lost}; its admin token is on stdout, shown this once: keep it and give "
        "it to admin commands as --admin-token or $PROVLEDGER_ADMIN_TOKEN",
        err=True,
    )
    click.echo(issued)


def _roles(roles: str) -> list[str]:
    return [r.strip() for r in roles.split(",") if r.strip()]


@click.command()
@click.argument("subject")
@click.option("--scope", required=True, help="The scope (project / tenant) the roles apply in.")
@click.option(
    "--roles",
    required=True,
    help="Comma-separated roles: read, propose, approve, deliver, audit.",
)
@admin_options
@json_option
@errors_exit_1
def grant(
    subject: str, scope: str, roles: str, url: str | None, admin_token: str | None, as_json: bool
) -> None:
    """Give SUBJECT roles in a scope (the grant is an event in the log).

    Admin: see `provledger init` for the admin token.

    \b
    Example:
      provledger grant agent-1 --scope proj-a --roles propose,read
    """
    wanted = _roles(roles)
    with host_ledger(url, "grant", admin_token) as led:
        led.admin().grant(subject, scope=scope, roles=wanted)
        position = led.position
    report_done(
        as_json,
        {"subject": subject, "scope": scope, "roles": sorted(set(wanted)), "position": position},
        f"granted {', '.join(sorted(set(wanted)))} in {scope} to {subject}",
    )


@click.command("revoke-grant")
@click.argument("subject")
@click.option("--scope", required=True, help="The scope the roles are withdrawn in.")
@click.option("--roles", help="Comma-separated roles to withdraw (default: every role there).")
@admin_options
@json_option
@errors_exit_1
def revoke_grant(
    subject: str,
    scope: str,
    roles: str | None,
    url: str | None,
    admin_token: str | None,
    as_json: bool,
) -> None:
    """Withdraw SUBJECT's roles in a scope (an event in the log; its tokens stay valid).

    Admin: see `provledger init` for the admin token.

    \b
    Example:
      provledger revoke-grant agent-1 --scope proj-a --roles propose
    """
    wanted = None if roles is None else _roles(roles)
    with host_ledger(url, "revoke-grant", admin_token) as led:
        held = {
            g.role
            for g in led.admin().access_history(subject=subject, scope=scope)
            if g.revoked_position is None
        }
        led.admin().revoke_grant(subject, scope=scope, roles=wanted)
        position = led.position
    gone = sorted(held if wanted is None else set(wanted))
    report_done(
        as_json,
        {"subject": subject, "scope": scope, "revoked_roles": gone, "position": position},
        f"withdrew {', '.join(gone)} in {scope} from {subject} (log position {position})",
    )


@click.command()
@click.option("--subject", help="Only this principal's grants.")
@click.option("--scope", help="Only the grants in this scope.")
@admin_options
@json_option
@errors_exit_1
def grants(
    subject: str | None, scope: str | None, url: str | None, admin_token: str | None, as_json: bool
) -> None:
    """Show who held which role in which scope, from when until when (every grant and
    its withdrawal, from the log).

    Admin: see `provledger init` for the admin token.

    \b
    Example:
      provledger grants --scope proj-a
    """
    with host_ledger(url, "grants", admin_token) as led:
        history = led.admin().access_history(subject=subject, scope=scope)
    if as_json:
        echo_json({"grants": history})
        return
    console = make_console()
    if not history:
        console.print(
            "no grants"
            + "".join(
                f" {what} {value}" for what, value in (("of", subject), ("in", scope)) if value
            )
        )
        return
    table = new_table(
        "subject",
        "scope",
        "role",
        "granted",
        "withdrawn",
        ids={"subject": [g.subject for g in history], "scope": [g.scope for g in history]},
    )
    for g in history:
        withdrawn = (
            "held now"
            if g.revoked_at is None
            else f"{when_text(g.revoked_at)} by {g.revoked_by} (position {g.revoked_position})"
        )
        table.add_row(
            g.subject,
            g.scope,
            g.role,
            f"{when_text(g.granted_at)} by {g.granted_by} (position {g.granted_position})",
            withdrawn,
        )
    show(console, table)


@click.command()
@admin_options
@json_option
@errors_exit_1
def stats(url: str | None, admin_token: str | None, as_json: bool) -> None:
    """Show counts: events, log position, records per status, deliveries, snapshots,
    corrections owed now, and the newest event's time.

    Maintenance: see `provledger init` for the admin token.

    \b
    Example:
      provledger stats --json
    """
    with host_ledger(url, "stats", admin_token) as led:
        counts = led.stats()
    if as_json:
        echo_json(counts)
        return
    console = make_console()
    console.print(Text(f"ledger {printable(led.url)}", style="bold"))
    table = Table(show_header=False)
    table.add_column("what", style="bold")
    table.add_column("count", justify="right")
    for key, value in counts.items():
        if key == "last_event_at":
            table.add_row(key, Text(when_text(counts["last_event_at"])))
        elif key != "statuses":
            table.add_row(key, Text("-" if value is None else str(value)))
        else:
            for status, n in counts["statuses"].items():
                table.add_row(styled(status, STATUS_STYLE), Text(str(n)))
    console.print(table)


@click.command()
@click.option(
    "--url",
    default=None,
    help="Where to build the scenario (must be an empty "
    "ledger). Default: a fresh SQLite file in a temporary directory.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print the result as JSON; a refusal prints {"error": {"type": …, "message": …}} '
    "there too (usage errors, exit 2, are text).",
)
@errors_exit_1
def demo(url: str | None, as_json: bool) -> None:
    """Run the experiment on a fresh ledger and print its table.

    By default on an embedded SQLite file in a temporary directory; `--url`
    names an empty ledger on any backend instead (never another program's
    database). Exits 1 if any row deviates.

    \b
    Example:
      provledger demo --json
    """
    with tempfile.TemporaryDirectory(prefix="provledger-demo-") as tmp:
        target = url or f"sqlite:///{Path(tmp) / 'demo.db'}"
        if url is not None:
            _refuse_others_file(url)
        # No admin token: the experiment runs only on an empty ledger (it refuses
        # one with events before writing), which no admin token guards yet.
        with open_ledger(target, create=True, one_process=True) as led:
            result = run_experiment(led)
    if as_json:
        echo_json(result.to_json())
    else:
        print_experiment(result, AnswerConsole())
        if url is None:
            click.echo(
                "(the ledger was a temporary file, deleted on exit; "
                "`provledger demo --url sqlite:///demo.db` keeps one to explore)"
            )
    if not result.passed:
        sys.exit(1)


@click.command()
@admin_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print the report as JSON; a refusal prints {"error": {"type": …, "message": …}} '
    "there too (usage errors, exit 2, are text).",
)
@errors_exit_1
def rebuild(url: str | None, admin_token: str | None, as_json: bool) -> None:
    """Empty the views and replay the whole log into them; exit 1 unless they match.

    A difference is repaired, not shown: run `provledger verify` first (it only
    reads) to have the rows that differ named.

    The rebuild is one transaction holding the writers' lock: reads go on, but
    every command that writes (a server's too) waits until it ends, and is
    refused (ConcurrencyError; HTTP 409) once it has waited its lock wait
    (`?timeout=` on SQLite, `lock_timeout` on PostgreSQL; 30 s by default). The
    rate it prints tells how long the next one will hold the lock.

    Maintenance: see `provledger init` for the admin token.

    \b
    Example:
      provledger rebuild --url sqlite:///provledger.db
    """
    # Views left as stored: catching them up first could fail on the very rows the
    # rebuild is to replace (a time index edited behind the ledger's back).
    with host_ledger(url, "rebuild", admin_token, catch_up=False) as led:
        if led.read_only:  # before the progress bar shows
            raise read_only_error("rebuild", led.url)
        report = rebuild_with_progress(led, quiet=as_json)
    if as_json:
        echo_json(
            {
                "events": report.events,
                "seconds": report.seconds,
                "events_per_second": report.events_per_second,
                "digest_before": report.digest_before,
                "digest_after": report.digest_after,
                "matched": report.matched,
            }
        )
    if not report.matched:
        click.echo(
            f"error: rebuilt views differ (before {report.digest_before[:16]}…, "
            f"after {report.digest_after[:16]}…): the views as stored were not what the "
            "log gives (a row written behind the ledger's back, or by a faulty version); "
            "they are rebuilt from the log now. `provledger verify`, run before a "
            "rebuild, names the rows that differ and changes nothing",
            err=True,
        )
        sys.exit(1)


def rebuild_with_progress(led: Ledger, *, quiet: bool = False) -> Any:
    """Rebuild ``led``'s views with a rich progress bar and print the rate."""
    console = AnswerConsole(stderr=True)
    with Progress(
        TextColumn("rebuilding views"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} positions"),
        TimeRemainingColumn(),
        console=console,
        disable=quiet or not console.is_terminal,  # no bar in a log, its last state kept
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
            f"(digest {report.digest_after[:16]})",
            soft_wrap=True,  # one line for logs, the digest unbroken
        )
    return report


@click.command()
@click.argument("dest", metavar="DEST")
@admin_options
@json_option
@errors_exit_1
def backup(dest: str, url: str | None, admin_token: str | None, as_json: bool) -> None:
    """Copy an SQLite ledger to the new file DEST, whole, while commands keep running.

    The copy is one read of the ledger (SQLite's `VACUUM INTO`): the log up to one
    position with its Merkle leaves, views and snapshots, and none of the space
    freed since (erased bytes included), its log checked as `head` checks it
    (a log that fails: backed up all the same, exit 1 naming the problem). DEST
    must not exist. `cp` of a ledger
    in use can copy a file that writers change meanwhile: such a copy may not
    open, or fail `verify`. Prints the copy's digest: `provledger verify
    --against` it passes on the live ledger and on the copy.

    To restore: stop every process using the ledger, move the ledger file and
    its -wal and -shm files aside, copy DEST in its place. The log then ends at
    the copy's position: what was written since is gone (a token or a grant
    revoked since works again), and a digest or signed head taken since no
    longer verifies. On PostgreSQL use pg_dump --schema NAME instead.

    \b
    Example:
      provledger backup /backups/provledger-2026-11-30.db
    """
    backend = resolve_url(url)
    if backend.kind == "memory":
        raise InvalidURLError(
            f"backup refused: {printable(backend.url)} is a ledger in memory, with nothing "
            "on disk to back up (nothing was written)"
        )
    if backend.kind != "sqlite" or backend.path is None:
        raise InvalidURLError(
            f"backup refused: {printable(backend.url)} is not an SQLite file; back up a "
            "PostgreSQL ledger with pg_dump --schema NAME -Fc (nothing was written)"
        )
    _check_destination(dest)
    target = Path(dest)
    beside = {os.path.realpath(backend.path) + end for end in ("-wal", "-shm", "-journal")}
    if os.path.realpath(target) in beside:
        raise StorageError(
            f"backup refused: {printable(target)} is a file SQLite keeps beside the ledger "
            "(its -wal, -shm or -journal), where the next opening of the ledger would take "
            "it for its own or remove it; give another file (nothing was written)"
        )
    if target.exists() or target.is_symlink():
        raise StorageError(
            f"backup refused: {printable(target)} exists; give a new file (nothing was written)"
        )
    if not target.parent.is_dir():
        raise StorageError(
            f"backup refused: the directory {printable(target.parent)} does not exist "
            "(nothing was written)"
        )
    clear_dead_partials(str(target))  # what killed backups and copies left here
    refuse_stale_side_files(str(target), "backup")
    # The views as stored: a backup writes nothing to the ledger it copies.
    with host_ledger(url, "backup", admin_token, catch_up=False) as led:
        source = os.path.realpath(backend.path)
        partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
        try:
            _vacuum_into(source, partial, printable(led.url), printable(target))
            copy = Ledger.open(f"sqlite:///{partial}?mode=ro", catch_up=False)
            with copy:
                kept = copy.digest()
                problem = _log_problem(copy)
            refuse_stale_side_files(str(target), "backup")  # (one may have appeared)
            os.link(partial, target)  # never replaces a file made meanwhile
            _sync_directory(target.parent)
        except FileExistsError:
            raise StorageError(
                f"backup refused: {printable(target)} was created meanwhile; give a new file"
            ) from None
        finally:
            for end in ("", "-journal", "-wal", "-shm"):
                with suppress(OSError):  # (a name too long: the failure above says so)
                    Path(f"{partial}{end}").unlink(missing_ok=True)
    info = {
        "url": printable(led.url),
        "backup": str(target),
        "position": kept.position,
        "events": kept.size,
        "digest": str(kept),
        "problem": problem,
    }
    if problem is not None:  # kept (all there is to restore): a problem found, exit 1
        line = f"the backup {printable(target)} was written (digest {kept}), but {problem}"
        found_problem(line)
        if as_json:
            echo_json(info)
        click.echo(f"error: {line}", err=True)
        sys.exit(1)
    if as_json:
        echo_json(info)
        return
    click.echo(
        f"backed up {info['url']} at log position {kept.position} to {printable(target)}; "
        "its digest is on stdout",
        err=True,
    )
    click.echo(str(kept))


def _log_problem(led: Ledger) -> str | None:
    """What ``led``'s log fails of ``verify``'s log and authorization checks (the
    pass a head is signed after), or None."""
    try:
        checked_digest(led.engine, "")
    except CorruptEventError as exc:
        return str(exc).removeprefix(": ")  # "the log fails verify's … check: …"
    return None


def _check_destination(dest: str) -> None:
    """Refuse a backup's DEST that is no file path: empty, or a URL."""
    if not dest.strip():
        raise InvalidInputError(
            f"backup refused: DEST {dest!r} is empty; give the path of a new file, e.g. "
            "/backups/provledger.db (nothing was written)"
        )
    if "://" in dest:
        path = resolve_url(dest).path if dest.startswith("sqlite://") else None
        example = printable(path) if path else "/backups/provledger.db"
        raise InvalidInputError(
            f"backup refused: DEST {printable(dest)!r} is a URL; a backup destination is "
            f"a file path, e.g. {example} (nothing was written)"
        )


def _as_readable_as(fd: int, source: os.stat_result) -> None:
    """Give the open file ``fd`` (a backup) the read and write bits of the ledger
    file ``source`` and its group; where the group cannot be given (a group the
    backup's maker is not in), none: a group that could not read the ledger must
    not read its copy."""
    mode = stat.S_IMODE(source.st_mode) & 0o666
    if os.fstat(fd).st_gid != source.st_gid:
        try:
            os.fchown(fd, -1, source.st_gid)
        except OSError:
            mode &= ~0o060
    os.fchmod(fd, mode)


def _vacuum_into(source: str, partial: Path, shown: str, dest: str) -> None:
    """Write a compacted copy of the SQLite database ``source`` to ``partial`` in one
    read transaction, synced to disk; a full disk is ``DiskFullError`` naming
    ``dest``."""
    try:
        # Readable by its owner alone while it is written (VACUUM INTO would make it
        # 0644 under the usual umask), then as readable as the ledger itself: a
        # backup holds all the ledger holds.
        partial.unlink(missing_ok=True)  # an earlier process's of this pid: it is gone
        try:
            os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except PermissionError:
            raise StorageError(
                f"backup to {dest} failed: this user may not create files in "
                f"{printable(partial.parent)}; the ledger is unchanged and no backup was "
                "written: back up into a directory you may write"
            ) from None
        # Read-only, immutable where SQLite cannot make its -shm file beside the
        # ledger (a read-only directory or file system), as the ledger opens it.
        con = sqlite3.connect(read_only_uri(source), uri=True, isolation_level=None, timeout=30)
        try:
            # The copy is written with this connection's secure_delete: on, or a page
            # split leaves copies of cells in free space, where erasing the bytes in
            # the backup later would not reach them (builds default to either).
            con.execute("PRAGMA secure_delete=ON")
            con.execute("VACUUM INTO ?", (str(partial),))
        finally:
            con.close()
        fd = os.open(partial, os.O_RDONLY)
        try:
            _as_readable_as(fd, os.stat(source))
            os.fsync(fd)
        finally:
            os.close(fd)
    except (sqlite3.Error, OSError) as exc:
        typed = storage_error(exc, shown, path=str(partial))
        if isinstance(typed, DiskFullError):  # the copy's disk, not the ledger's
            raise DiskFullError(
                f"backup to {dest} failed: the disk it is written to is full "
                f"({reason_of(exc)}); the ledger is unchanged and no backup was "
                "written — free space there, or back up elsewhere"
            ) from None
        raise type(typed)(f"backup to {dest} failed: {typed}") from None


def _sync_directory(folder: Path) -> None:
    """Make a new name in ``folder`` durable (where the platform allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
