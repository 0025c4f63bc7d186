"""``provledger as-of``: the read commands, run as the ledger was at a past log
position or time."""

from __future__ import annotations

from datetime import datetime

import click

from ledger.cli.options import DATETIME, AsOf
from ledger.cli.parsing import CheckedGroup
from ledger.cli.reads import audit, corrections, explain, export, get, graph, history, read, records


class AsOfGroup(CheckedGroup):
    """``as-of``'s group: a command of provledger it does not run is refused as
    such (naming the commands it runs), not as unknown."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        root = ctx.find_root().command
        if name not in self.commands and isinstance(root, click.Group) and name in root.commands:
            runs = ", ".join(self.commands)
            raise click.UsageError(
                f"{name!r} does not run as of a past moment; as-of runs {runs}", ctx
            )
        return super().resolve_command(ctx, args)


READ_COMMANDS = (read, get, explain, audit, history, corrections, export, graph, records)


@click.group("as-of", cls=AsOfGroup)
@click.option("--position", type=click.IntRange(min=0), help="Right after this log position.")
@click.option("--time", "when", type=DATETIME, help="At this instant (ISO 8601 with offset).")
@click.pass_context
def as_of(ctx: click.Context, position: int | None, when: datetime | None) -> None:
    """Run a read command as the ledger was at a past log position or time.

    Give exactly one of --position or --time; read, get, explain, audit,
    history, corrections, export, graph and records then answer as of then.

    \b
    Example:
      provledger as-of --position 12 read --scope proj-a --claim api.retry_safe
    """
    # Checked when the read runs (``principal_session``), before it opens anything:
    # ``as-of read --help`` shows the read's help, moment or not.
    ctx.obj = AsOf(position=position, time=when)


for _command in READ_COMMANDS:
    as_of.add_command(_command)
