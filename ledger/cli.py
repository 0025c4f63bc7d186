"""The ``provledger`` command line: a thin layer, one library call per command.

Errors from the library print one line on stderr and exit 1; usage errors exit 2.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from ledger import __version__
from ledger.application import Ledger
from ledger.errors import LedgerError
from ledger.experiment import ExperimentResult, run_experiment

F = TypeVar("F", bound=Callable[..., Any])

URL_HELP = (
    "Ledger URL (memory:, sqlite:///path.db). Default: $PROVLEDGER_URL, else ./provledger.db."
)


def _errors_exit_1(fn: F) -> F:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LedgerError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provledger")
def main() -> None:
    """provledger: an event-sourced provenance ledger for AI agents' memory.

    Example: provledger demo
    """


def print_experiment(result: ExperimentResult, console: Console) -> None:
    """Print the experiment's table."""
    table = Table(title=f"provledger experiment ({result.url})")
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

    Example: provledger demo --json
    """
    with tempfile.TemporaryDirectory(prefix="provledger-demo-") as tmp:
        target = url or f"sqlite:///{Path(tmp) / 'demo.db'}"
        with Ledger.open(target) as led:
            result = run_experiment(led)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        print_experiment(result, Console())
    if not result.passed:
        sys.exit(1)


@main.command()
@click.option("--url", default=None, help=URL_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@_errors_exit_1
def rebuild(url: str | None, as_json: bool) -> None:
    """Drop the views and replay the whole log; exit 1 unless they match.

    Example: provledger rebuild --url sqlite:///provledger.db
    """
    with Ledger.open(url) as led:
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


if __name__ == "__main__":  # pragma: no cover
    main()
