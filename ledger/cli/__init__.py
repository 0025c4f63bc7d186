"""The ``provledger`` command line: a thin layer, one library call per command.

``--url`` / ``$PROVLEDGER_URL`` selects the ledger; every command but ``init``
(and ``demo``) refuses one that does not exist. ``init`` prints an admin token once;
admin and maintenance commands (``grant``, ``revoke-grant``, ``token``, ``rebuild``,
``backup``, ``copy``, ``stats``, ``digest``, ``verify``, ``head``, ``erase-snapshot``,
``scrub-erased``)
take it as ``--admin-token`` / ``$PROVLEDGER_ADMIN_TOKEN`` (the owner of a local
SQLite file may omit it); every other command authenticates with ``$PROVLEDGER_TOKEN`` /
``--token``.
Read commands print aligned tables for people and JSON with ``--json``;
``as-of`` runs them as the ledger was at a past position or time.

Errors from the library print one line on stderr and exit 1 (with ``--json`` also
``{"error": {"type": …, "message": …}}`` on stdout); the checks ``verify`` and
``verify-bundle`` exit 1 only for a problem found, 3 when they could not check;
usage errors exit 2;
Ctrl-C (SIGINT) prints one line and exits 130. When the reader of its output goes
away before the answer is all written (``provledger history --json | head -c 100``), every
command stops writing and exits 141, printing nothing, as a program a broken pipe
stops does (128 + SIGPIPE): not 0, which would say a check passed whose answer
(``verify``, ``rebuild``) or a token shown once (``init``, ``token issue``) was never
read, nor 1, a refusal; what the command wrote to the ledger stands. (An answer
written in one piece, such as ``export``'s, that its reader leaves part way goes
unnoticed: the system takes part of it and reports no error.)
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import click

from ledger import __version__
from ledger.cli import (
    admin,
    agents,
    as_of,
    copying,
    evidence,
    reads,
    runs,
    tokens,
    verifying,
    writes,
)
from ledger.cli.parsing import CheckedGroup
from ledger.cli.terminal import guarded

#: What Ctrl-C (SIGINT) prints before the command exits with status 130.
INTERRUPTED = (
    "error: interrupted; a command's writes are one transaction, committed whole or "
    "not at all (provledger history shows whether it was)"
)

#: What Ctrl-C prints for ``copy``, whose target, not the source's history, tells.
INTERRUPTED_COPY = (
    "error: interrupted; a copy is one transaction: its target holds the whole copy "
    "or nothing of it (provledger digest --url TARGET shows which)"
)

#: What Ctrl-C prints for ``backup``, which writes nothing to the ledger.
INTERRUPTED_BACKUP = (
    "error: interrupted; the ledger is unchanged, and a backup is put under its name "
    "whole or not at all (its partial file is removed)"
)

#: The ``Example:`` block of a command's help text.
_EXAMPLE = re.compile(r"^\s*Examples?:\n((?:[ \t]+\S.*(?:\n|$))+)", re.MULTILINE)


class _Main(CheckedGroup):
    """The command group; a usage error also shows the failing command's example,
    and what is written to a terminal is made inert (:mod:`ledger.cli.terminal`)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        if sys.stdout is None:  # started with stdout closed (``>&-``)
            # Refused before anything runs: an admin token issued, or a record's id,
            # would be shown nowhere.
            if sys.stderr is not None:
                sys.stderr.write("error: stdout is closed; provledger writes its answers there\n")
            sys.exit(1)
        with guarded():
            return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # Not click's "Aborted!" and exit 1: 1 is a refusal (rebuild: views that
            # differ; verify: a problem found). 130 is the shell's code for Ctrl-C.
            said = {"copy": INTERRUPTED_COPY, "backup": INTERRUPTED_BACKUP}
            click.echo(said.get(ctx.invoked_subcommand or "", INTERRUPTED), err=True)
            raise click.exceptions.Exit(130) from None
        except BrokenPipeError:
            # The reader of the answer went away: not click's exit 1, a refusal, nor 0.
            _discard_stdout()
            raise click.exceptions.Exit(BROKEN_PIPE) from None
        except click.UsageError as exc:
            command = exc.ctx.command if exc.ctx is not None else None
            found = _EXAMPLE.search((command.help or "") if command is not None else "")
            message = exc.format_message()
            if not found or "Example" in message:
                raise
            lines = [line.strip() for line in found.group(1).splitlines() if line.strip()]
            example = "\nExample:\n" + "\n".join(f"  {line}" for line in lines)
            raise click.UsageError(message.rstrip() + example, exc.ctx) from None


#: The exit status of a command whose reader went away (128 + SIGPIPE, as a shell
#: reports a program a broken pipe stopped).
BROKEN_PIPE = 141


def _discard_stdout() -> None:
    """Point stdout at the null device, so what is still buffered for the reader
    that left is flushed there at exit, not reported as another broken pipe."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (click's test runner)
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provledger")
def main() -> None:
    """provledger: an event-sourced provenance ledger for AI agents' memory.

    --url or $PROVLEDGER_URL selects the ledger; `init` creates it and prints
    an admin token once. Admin commands (grant, revoke-grant, grants, token, stats,
    rebuild, backup, copy, digest, verify, head, erase-snapshot, scrub-erased) take it as
    --admin-token or $PROVLEDGER_ADMIN_TOKEN (optional on a local SQLite file you
    own); the others take a principal's token in $PROVLEDGER_TOKEN (or --token).

    \b
    Example:
      provledger demo
    """


for _command in (
    admin.init,
    admin.grant,
    admin.revoke_grant,
    admin.grants,
    tokens.token,
    writes.capture,
    writes.propose,
    writes.accept,
    writes.reject,
    writes.revoke,
    writes.revalidate,
    writes.deliver,
    writes.correct,
    *as_of.READ_COMMANDS,
    as_of.as_of,
    reads.snapshot,
    runs.run,
    evidence.digest,
    verifying.verify,
    evidence.prove,
    evidence.keygen,
    evidence.head,
    evidence.bundle,
    evidence.verify_bundle_command,
    evidence.erase_snapshot,
    evidence.scrub_erased,
    admin.stats,
    admin.demo,
    admin.rebuild,
    admin.backup,
    copying.copy_command,
    agents.mcp_command,
    agents.serve,
):
    main.add_command(_command)

__all__ = ["main"]
