"""Tamper evidence: the log's digest, its verification, inclusion proofs."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from ledger.cli.failures import errors_exit_1, errors_exit_3, found_problem, warn_if_empty
from ledger.cli.options import (
    admin_options,
    host_ledger,
    json_option,
    not_the_ledger,
    principal_session,
    printable,
    token_option,
    url_option,
)
from ledger.cli.render import echo_json, report_done
from ledger.errors import (
    InvalidInputError,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from ledger.bundle.extends import HeldHead
    from ledger.bundle.verify import BundleReport
    from ledger.heads import SignedHead

# -- tamper evidence --------------------------------------------------------------------


@click.command()
@admin_options
@json_option
@errors_exit_1
def digest(url: str | None, admin_token: str | None, as_json: bool) -> None:
    """Print the log's Merkle digest (size:position:root) to keep somewhere else.

    Maintenance: see `provledger init` for the admin token. Later,
    `provledger verify --against DIGEST` proves the log still extends it. It
    checks nothing: run `provledger verify` first (`provledger head` checks).

    \b
    Example:
      provledger digest > digest-2026-11-30.txt
    """
    # The log and its Merkle leaves alone: views as stored (one 0.1.0 wrote, read-only).
    with host_ledger(url, "digest", admin_token, catch_up=False) as led:
        kept = led.digest()
    if as_json:
        echo_json(
            {"size": kept.size, "position": kept.position, "root": kept.root, "digest": str(kept)}
        )
    else:
        click.echo(str(kept))


@click.command()
@click.argument("record_id", metavar="ID")
@click.option(
    "--against",
    metavar="DIGEST",
    help="Prove in the tree of this digest (size:position:root, as `digest` printed it, "
    "or a signed head's JSON line), the events up to its position; refused unless the "
    "log extends it.",
)
@token_option
@url_option
@json_option
@errors_exit_1
def prove(record_id: str, against: str | None, token: str, url: str | None, as_json: bool) -> None:
    """Print inclusion proofs (JSON) of a record's events in the current Merkle tree,
    or in the tree of a digest kept earlier (--against).

    A third party checks them against a digest it trusts with the few lines of
    code in the README ("Tamper evidence"). Needs the audit role. The proofs are
    JSON with or without --json, which prints a refusal as JSON on stdout too.

    \b
    Example:
      provledger prove E1 > e1-proof.json
      provledger prove E1 --against "$(cat digest.txt)"
    """
    with principal_session(url, token) as (_led, session):
        proofs = session.prove(record_id, against=against)
    echo_json(
        [
            {
                "position": p.position,
                "index": p.index,
                "size": p.size,
                "leaf": p.leaf,
                "leaf_data": p.leaf_data,
                "path": list(p.path),
                "root": p.root,
            }
            for p in proofs
        ]
    )


# -- maintenance ------------------------------------------------------------------------


# -- verifiable evidence: keys, signed heads, bundles, erasure ---------------------------


@click.command()
@click.option(
    "--out",
    "out",
    required=True,
    metavar="KEY",
    help="Where to write the private key (mode 0600); the public key goes to KEY.pub.",
)
@json_option
@errors_exit_1
def keygen(out: str, as_json: bool) -> None:
    """Create an Ed25519 key pair for signing tree heads and bundles.

    Keep KEY with the job that signs heads; give KEY.pub to whoever verifies.
    Refuses to overwrite an existing key.

    \b
    Example:
      provledger keygen --out ledger-key
    """
    from ledger.heads import generate_key

    if not out.strip():
        raise InvalidInputError(
            f"keygen refused: --out {out!r} is empty; give the path of the key file to "
            "write, e.g. --out ledger-key"
        )
    kid = generate_key(out)
    report_done(
        as_json,
        {"private_key": out, "public_key": f"{out}.pub", "key_id": kid},
        f"wrote {out} (private, mode 0600) and {out}.pub (public); key id {kid}",
    )


@click.command()
@click.option("--key", "key", required=True, metavar="KEY", help="The key from `keygen`.")
@click.option(
    "--append",
    "append_to",
    default=None,
    metavar="HEADS.jsonl",
    help="Append the head to this heads file; refused if the log no longer extends "
    "the newest head in it, or if its heads were signed by another key.",
)
@admin_options
@json_option
@errors_exit_1
def head(
    key: str, append_to: str | None, url: str | None, admin_token: str | None, as_json: bool
) -> None:
    """Print a signed tree head (JSON): tree size, root, log position, time, key id, signature.

    Keep heads where the ledger's operator cannot rewrite them (another host,
    object storage with a retention lock, a transparency witness); `verify
    --heads` then detects truncation and rewriting before the newest one.
    Refused (exit 1, nothing signed) when the log fails `verify`'s log or
    authorization check, which it runs first (one pass over the log). The head
    is one line, as a heads file holds it; with --json, indented as every
    command's JSON answer is, and a refusal is JSON on stdout too.
    Maintenance: see `provledger init` for the admin token.

    \b
    Example:
      provledger head --key ledger-key --append /mnt/witness/heads.jsonl
    """
    from ledger.heads import publish_head

    private = _signing_key(key)
    not_the_ledger(append_to, url, "head")
    with host_ledger(url, "head", admin_token, catch_up=False) as led:
        signed = publish_head(led, private, append_to)
    warn_if_empty(signed.tree_size, "the head")
    if as_json:
        echo_json(signed.to_json())
    else:
        click.echo(signed.dumps())


@click.command()
@click.argument("record_id", metavar="ID")
@click.option("--key", "key", required=True, metavar="KEY", help="The key from `keygen`.")
@click.option("-o", "--output", required=True, metavar="FILE.zip", help="Where to write it.")
@click.option(
    "--extends",
    "extends",
    multiple=True,
    metavar="HEAD",
    help="An earlier signed head the auditor holds: a head's JSON, a heads file (its "
    "newest head) or an earlier bundle. Refused unless the log extends it; the manifest "
    "carries the consistency proof (`verify-bundle --earlier` checks it). Repeatable.",
)
@token_option
@url_option
@json_option
@errors_exit_1
def bundle(
    record_id: str,
    key: str,
    output: str,
    extends: tuple[str, ...],
    token: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Write a compliance bundle of a record for an auditor (needs the audit role).

    The zip holds the record's ancestry as PROV-JSON, the stored bytes of its
    and its ancestors' events with inclusion proofs against a signed head, the
    public key and a summary; `verify-bundle` checks it offline. With
    --extends, it also proves that its head extends heads the auditor holds.

    \b
    Example:
      provledger bundle R1 --key ledger-key -o r1-bundle.zip
      provledger bundle R1 --key ledger-key -o r1-june.zip --extends r1-may.zip
    """
    from ledger.bundle import write_bundle
    from ledger.bundle.verify import unpacked_size

    private = _signing_key(key)
    not_the_ledger(output, url, "bundle")
    with principal_session(url, token) as (_led, session):
        info = write_bundle(session, record_id, private, output, extends=extends)
    needs = unpacked_size(info.path)
    if needs is not None:
        click.echo(
            f"warning: the bundle unpacks to (or is) {needs} bytes, more than verify-bundle "
            f"takes unless told: give it --max-unpacked {needs}",
            err=True,
        )
    report_done(
        as_json,
        {
            "path": info.path,
            "record": info.record,
            "records": list(info.records),
            "events": info.events,
            "withheld": info.withheld,
            "hidden": info.hidden,
            "head": info.head.to_json(),
            "extends": [{"file": e.source, "head": e.head.to_json()} for e in info.extends],
        },
        f"wrote {printable(info.path)}: {info.record} and {len(info.records) - 1} ancestors, "
        f"{_carried(info.events, info.withheld)} (tree size {info.head.tree_size})"
        + (", and ancestors outside your scopes shown as one <hidden>" if info.hidden else "")
        + (
            f"; its head extends {_heads(info.extends)}, proved in its manifest"
            if info.extends
            else ""
        ),
    )


def _signing_key(key: str) -> Ed25519PrivateKey:
    """The private key in the file ``key``, with a warning when users other than
    its owner may read it (``keygen`` writes it 0600): whoever reads it can sign
    heads over a rewritten log. A warning, not a refusal: a secret mounted by a
    platform may be 0644.

    Raises:
        InvalidKeyError: the file is missing, unreadable or not such a key.
    """
    from ledger.heads import load_private_key

    private = load_private_key(key)
    mode = os.stat(key).st_mode
    if stat.S_ISREG(mode) and mode & 0o077:
        click.echo(
            f"warning: the signing key {printable(key)} may be read by other users "
            f"(mode {stat.S_IMODE(mode):04o}), and whoever reads it can sign heads over "
            f"a rewritten log: chmod 600 {printable(key)}",
            err=True,
        )
    return private


def _heads(held: Sequence[HeldHead], noun: str = "the earlier head") -> str:
    """``the earlier head in a.zip (tree size 12)``, for each, as one phrase."""
    named = [
        f"{noun}{f' in {printable(h.source)}' if h.source else ''} (tree size {h.head.tree_size})"
        for h in held
    ]
    return ", ".join(named[:-1]) + (" and " if len(named) > 1 else "") + named[-1]


def _carried(events: int, withheld: int) -> str:
    """How many events a bundle carries with inclusion proofs, and how many of
    those without their bytes (they name a record outside the writer's scopes)."""
    total = events + withheld
    return f"{total} event{'' if total == 1 else 's'} with inclusion proofs" + (
        f" ({withheld} of them with their bytes withheld)" if withheld else ""
    )


@click.command("verify-bundle")
@click.argument("path", metavar="FILE.zip")
@click.option(
    "--public-key",
    "public_key",
    default=None,
    metavar="KEY.pub",
    help="The public key you hold from elsewhere; without it the bundle's own key is used.",
)
@click.option(
    "--earlier",
    "earlier",
    multiple=True,
    metavar="HEAD",
    help="A signed head you hold from before: a head's JSON, a heads file (its newest "
    "head) or an earlier bundle. The bundle's head must extend it (a consistency proof "
    "in its manifest: `bundle --extends`). Repeatable.",
)
@click.option(
    "--max-unpacked",
    type=click.IntRange(min=1),
    default=None,
    metavar="BYTES",
    help="What the members may unpack to, together (default 256 MiB, or 16 times the "
    "file), and the most the file may be: a bundle of large values says when it needs more.",
)
@json_option
@errors_exit_3
def verify_bundle_command(
    path: str,
    public_key: str | None,
    earlier: tuple[str, ...],
    max_unpacked: int | None,
    as_json: bool,
) -> None:
    """Check a compliance bundle offline (no ledger, no token); exit 1 naming what fails.

    With --earlier, also that its head extends the heads (or bundles) you hold
    from before: that nothing they showed was removed or rewritten since.

    \b
    Exit status: 0 the bundle checks;
      1 the check found a problem (an altered or forged bundle, a head that
        does not extend the one you hold, a file that is no bundle);
      3 could not check (the file, the key or an --earlier file could not be
        read; it is no regular file, is or unpacks to more than it may, see
        --max-unpacked, or grew while read; the evidence extra is not installed);
      2 a usage error.
    With --json: the report ("ok", "problem", …) on exit 0 or 1; on exit 3
    {"ok": false, "error": {"type": …, "message": …}}; usage errors are text.

    \b
    Example:
      provledger verify-bundle r1-bundle.zip --public-key ledger-key.pub
      provledger verify-bundle r1-june.zip --public-key ledger-key.pub --earlier r1-may.zip
    """
    from ledger.bundle import verify_bundle

    report = verify_bundle(path, public_key, max_unpacked=max_unpacked, earlier=earlier)
    if _unread(report):
        # Nothing in the file was checked (it was not read, or not unpacked, whole):
        # no problem found in it, as with an --earlier file that cannot be read.
        raise InvalidInputError(f"could not check the bundle: {printable(report.problem)}")
    if as_json:
        if not report.ok:
            found_problem(f"bundle check failed: {printable(report.problem)}")
        echo_json(
            {
                "ok": report.ok,
                "problem": report.problem,
                "problems": list(report.problems),
                "record": report.record,
                "events": report.events,
                "withheld": report.withheld,
                "hidden": report.hidden,
                "key_id": report.key_id,
                "trusted_key": report.trusted_key,
                "head": None if report.head is None else report.head.to_json(),
                "unchecked": list(report.unchecked),
                "extends": [h.to_json() for h in report.extends],
                "earlier": [{"file": h.source, "head": h.head.to_json()} for h in report.earlier],
            }
        )
    elif report.ok and report.head is not None:
        trust = "the trusted key" if report.trusted_key else "the key it carries (not pinned)"
        click.echo(
            f"ok: bundle of {report.record}: {_carried(report.events, report.withheld)} "
            f"in the tree of {report.head.tree_size} signed {report.head.time.isoformat()} "
            f"by {trust}, key id {report.key_id}"
            + _extending(report.earlier, report.extends)
            + "; the statuses and bases it states agree with the events it carries (events "
            "after a record's last one carried are beyond an offline check)"
            + (", as far as their bytes are carried:" if report.unchecked else "")
        )
        for what in report.unchecked:
            click.echo(f"  unchecked (bytes withheld): {printable(what)}")
        click.echo(
            f"not proved: anything about events after its head (tree size "
            f"{report.head.tree_size})"
            + (
                ""
                if report.earlier
                else ", nor that the log still holds what earlier heads showed (give the "
                "heads or bundles you hold with --earlier)"
            )
        )
    if not report.ok:
        click.echo(f"error: bundle check failed: {printable(report.problem)}", err=True)
        sys.exit(1)  # a problem found (3, could not check: errors_exit_3)


def _unread(report: BundleReport) -> bool:
    """Whether ``report`` failed a bundle none of which was checked (exit 3: could
    not check), not one found altered or forged (exit 1)."""
    return not report.ok and not report.checked


def _extending(earlier: Sequence[HeldHead], extends: Sequence[SignedHead]) -> str:
    """What the ok line says of the earlier heads the bundle's head was proved to extend."""
    if earlier:
        return f"; it extends {_heads(earlier, 'the head you hold')}"
    if extends:
        sizes = ", ".join(str(h.tree_size) for h in extends)
        return (
            f"; its manifest proves it extends earlier heads of tree size {sizes} (signed by "
            "its key; give the ones you hold with --earlier to check them against yours)"
        )
    return ""


@click.command("erase-snapshot")
@click.argument("ref", metavar="REF")
@click.option(
    "--reason",
    required=True,
    help="Why (e.g. the erasure request's number): every reader of a capture of the bytes sees it.",
)
@admin_options
@json_option
@errors_exit_1
def erase_snapshot(
    ref: str, reason: str, url: str | None, admin_token: str | None, as_json: bool
) -> None:
    """Erase the captured bytes behind a snapshot reference (sha256:…).

    The bytes leave the snapshot store; an audited SnapshotErased event on every
    capture of them not erased before, in every scope, records who erased them and
    why (its readers see the reason: write it for all of them); records built on
    them keep their status and the log still verifies. Admin: see `provledger
    init` for the admin token.

    \b
    Example:
      provledger erase-snapshot sha256:9f86d0… --reason "erasure request 2026-114"
    """
    with host_ledger(url, "erase-snapshot", admin_token) as led:
        done = led.admin().erase_snapshot(ref, reason)
        backend = led.backend
    report_done(
        as_json,
        {
            "snapshot_ref": done.snapshot_ref,
            "records": list(done.records),
            "position": done.position,
            "deleted": done.deleted,
            "scrubbed": done.scrubbed,
        },
        f"erased {done.snapshot_ref} (evidence {', '.join(done.records)}); "
        f"recorded at log position {done.position}",
    )
    if not done.scrubbed:
        click.echo(
            "note: the database's files may still hold the erased bytes for now: "
            "{}. Run `provledger scrub-erased` {}, until it exits 0".format(
                *_unscrubbed(backend, "the erasure")
            ),
            err=True,
        )


def _unscrubbed(backend: str, erasure: str) -> tuple[str, str]:
    """Why the files of a ``backend`` ledger may still hold erased bytes, and when
    scrubbing again can remove them."""
    if backend == "sqlite":
        return (
            "a reader kept SQLite's checkpoint from completing (the file or its -wal holds them)",
            "once that reader is done",
        )
    return (
        f"a transaction older than {erasure} kept the row, or the snapshot table could not "
        "be rewritten (its lock not granted in time, the connection lost, or a database "
        "role owning neither the table nor the database, which never can)",
        "once older transactions have ended (as the table's owner, for such a role)",
    )


@click.command("scrub-erased")
@admin_options
@json_option
@errors_exit_1
def scrub_erased(url: str | None, admin_token: str | None, as_json: bool) -> None:
    """Remove what the database's files still hold of erased bytes.

    What an erasure that said the files may still hold them left (a reader kept
    SQLite's checkpoint from completing; PostgreSQL's snapshot table could not be
    rewritten, or an older transaction kept the row), or one interrupted before
    it scrubbed. Writes nothing to the log; exits 1 if the files may still hold
    them (try again once those readers or transactions have ended; on PostgreSQL
    a database role owning neither the snapshot table nor the database never can:
    run it as the owner). Admin.

    \b
    Example:
      provledger scrub-erased
    """
    with host_ledger(url, "scrub-erased", admin_token) as led:
        scrubbed = led.admin().scrub_erased()
        backend = led.backend
    why = "the database's files may still hold erased bytes: {}; try again {}".format(
        *_unscrubbed(backend, "an erasure")
    )
    if as_json:  # with the reason (also on stderr) when the files may still hold them
        echo_json({"scrubbed": scrubbed} if scrubbed else {"scrubbed": False, "reason": why})
    elif scrubbed:
        click.echo(
            "scrubbed: the database's files hold no erased bytes, as far as the database "
            "can tell"
            + (
                " (docs/evidence.md: what an SQLite file 0.1.0 wrote may still hold)"
                if backend == "sqlite"
                else ""
            )
        )
    if not scrubbed:
        click.echo(f"error: {why}", err=True)
        sys.exit(1)
