"""Runs from the shell: start one, record what a pipeline read, end it.

``provledger run start TASK`` opens a run; ``read``, ``get``, ``propose`` and
``capture`` given ``--run TASK`` (or ``$PROVLEDGER_RUN``) then record their
reads in it, and a record proposed in it carries them as observed dependencies;
``run observe TASK ID…`` records reads made outside the ledger; ``run end TASK``
closes it.
"""

from __future__ import annotations

import click

from ledger.cli.failures import errors_exit_1
from ledger.cli.options import json_option, principal_session, token_option, url_option
from ledger.cli.parsing import CheckedGroup
from ledger.cli.render import report_done


@click.group("run", cls=CheckedGroup)
def run() -> None:
    """Record what a shell pipeline read, so what it proposes carries it.

    \b
    Example:
      provledger run start task-42
      provledger read --scope proj-a --claim api.version --run task-42
      provledger run observe task-42 E1
      provledger propose --scope proj-a --claim api.v --kind inference --value 2 --run task-42
      provledger run end task-42
    """


@run.command("start")
@click.argument("run_id", metavar="RUN")
@token_option
@url_option
@json_option
@errors_exit_1
def run_start(run_id: str, token: str, url: str | None, as_json: bool) -> None:
    """Start the run RUN (an id of your choosing, once per principal).

    \b
    Example:
      provledger run start task-42
    """
    with principal_session(url, token) as (led, session):
        session.run(run_id).start()
        position = led.position
    report_done(
        as_json,
        {"run": run_id, "started": True, "position": position},
        f"run {run_id} started; give --run {run_id} (or export PROVLEDGER_RUN={run_id}) "
        "to read, explain, get, records, propose and capture (unset it after `run end`)",
    )


@run.command("observe")
@click.argument("run_id", metavar="RUN")
@click.argument("record_ids", metavar="ID...", nargs=-1, required=True)
@token_option
@url_option
@json_option
@errors_exit_1
def run_observe(
    run_id: str, record_ids: tuple[str, ...], token: str, url: str | None, as_json: bool
) -> None:
    """Record that RUN read these records outside the ledger (e.g. a tool's cache).

    \b
    Example:
      provledger run observe task-42 E1 E2
    """
    with principal_session(url, token) as (led, session):
        session.run(run_id).resume().observe(*record_ids)
        position = led.position
    named = list(dict.fromkeys(record_ids))  # one named twice is observed once
    report_done(
        as_json,
        {"run": run_id, "observed": named, "position": position},
        f"run {run_id} observed {', '.join(named)}",
    )


@run.command("end")
@click.argument("run_id", metavar="RUN")
@click.option("--failed", is_flag=True, help="The task failed (default: completed).")
@token_option
@url_option
@json_option
@errors_exit_1
def run_end(run_id: str, failed: bool, token: str, url: str | None, as_json: bool) -> None:
    """End RUN; nothing more is recorded in it.

    \b
    Example:
      provledger run end task-42
    """
    outcome = "failed" if failed else "completed"
    with principal_session(url, token) as (led, session):
        session.run(run_id).resume().end(outcome)
        position = led.position
    report_done(
        as_json,
        {"run": run_id, "outcome": outcome, "position": position},
        f"run {run_id} {outcome}",
    )
