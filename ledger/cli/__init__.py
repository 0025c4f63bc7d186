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

import click

from ledger import __version__
from ledger.cli import admin, agents, evidence, reads, writes


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


for _command in (
    admin.init,
    admin.grant,
    admin.token,
    writes.capture,
    writes.propose,
    writes.accept,
    writes.reject,
    writes.revoke,
    writes.revalidate,
    writes.deliver,
    writes.correct,
    *reads.READ_COMMANDS,
    reads.as_of,
    evidence.digest,
    evidence.verify,
    evidence.prove,
    evidence.keygen,
    evidence.head,
    evidence.bundle,
    evidence.verify_bundle_command,
    evidence.erase_snapshot,
    admin.stats,
    admin.demo,
    admin.rebuild,
    agents.mcp_command,
    agents.serve,
):
    main.add_command(_command)

__all__ = ["main"]
