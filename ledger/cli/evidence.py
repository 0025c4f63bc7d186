"""Tamper evidence: the log's digest, its verification, inclusion proofs."""

from __future__ import annotations

import sys

import click

from ledger.cli.options import (
    errors_exit_1,
    host_ledger,
    json_option,
    principal_session,
    token_option,
    url_option,
)
from ledger.cli.render import (
    echo_json,
)

# -- tamper evidence --------------------------------------------------------------------


@click.command()
@url_option
@json_option
@errors_exit_1
def digest(url: str | None, as_json: bool) -> None:
    """Print the log's Merkle digest (size:position:root) to keep somewhere else.

    Maintenance: no token, local embedded database only. Later,
    `provledger verify --against DIGEST` proves the log still extends it.

    \b
    Example:
      provledger digest > digest-2026-11-30.txt
    """
    with host_ledger(url, "digest") as led:
        kept = led.digest()
    if as_json:
        echo_json(
            {"size": kept.size, "position": kept.position, "root": kept.root, "digest": str(kept)}
        )
    else:
        click.echo(str(kept))


@click.command()
@click.option(
    "--against",
    "against",
    default=None,
    metavar="DIGEST",
    help="A digest printed earlier by `provledger digest`.",
)
@url_option
@json_option
@errors_exit_1
def verify(against: str | None, url: str | None, as_json: bool) -> None:
    """Recompute the Merkle tree from the stored bytes; exit 1 if anything changed.

    Names the first position whose stored bytes differ from what was appended.
    With --against, also proves (RFC 6962 consistency proof) that the current
    log extends the log that digest described. Maintenance: no token, local
    embedded database only.

    \b
    Example:
      provledger verify --against "$(cat digest-2026-11-30.txt)"
    """
    with host_ledger(url, "verify") as led:
        report = led.verify(against=against)
    if as_json:
        echo_json(
            {
                "ok": report.ok,
                "digest": str(report.digest),
                "first_bad_position": report.first_bad_position,
                "problem": report.problem,
                "consistency_proof": list(report.consistency_proof),
            }
        )
    elif report.ok:
        extends = f"; extends {against}" if against else ""
        click.echo(f"ok: {report.digest}{extends}")
    if not report.ok:
        click.echo(f"error: tampering detected: {report.problem}", err=True)
        sys.exit(1)


@click.command()
@click.argument("record_id", metavar="ID")
@token_option
@url_option
@errors_exit_1
def prove(record_id: str, token: str, url: str | None) -> None:
    """Print inclusion proofs (JSON) of a record's events in the current Merkle tree.

    A third party checks them against a digest it trusts with the few lines of
    code in the README ("Tamper evidence"). Needs the audit role.

    \b
    Example:
      provledger prove E1 > e1-proof.json
    """
    with principal_session(url, token) as (_led, session):
        proofs = session.prove(record_id)
    echo_json(
        [
            {
                "position": p.position,
                "index": p.index,
                "size": p.size,
                "leaf_data": p.leaf_data,
                "path": list(p.path),
                "root": p.root,
            }
            for p in proofs
        ]
    )


# -- maintenance ------------------------------------------------------------------------
