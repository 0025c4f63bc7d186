"""Earlier signed heads, and whether a bundle's head extends them.

An auditor who holds a signed head from before (one of a heads file, or the
head of an earlier bundle) can check offline that a later bundle's head extends
it: the bundle's writer puts in its signed manifest, for each earlier head named
(``write_bundle(extends=…)``, ``provledger bundle --extends``), the RFC 9162
consistency proof from that head's tree to the bundle's (``extends``), and the
verifier checks each proof it carries and, for each head the auditor gives
(``verify_bundle(earlier=…)``, ``verify-bundle --earlier``), that the bundle's
head is that head or is proved to extend it. :func:`held_head` reads an earlier
head from a file; :func:`extension_problem` is the one check of an extension,
shared by writing and verifying.
"""

from __future__ import annotations

import io
import json
import os
import stat
import zipfile
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from ledger import merkle
from ledger.bundle.archive import open_nonblocking, read_member
from ledger.errors import InvalidHeadError, InvalidInputError, LedgerError
from ledger.heads import SignedHead, key_id, verify_head
from ledger.redaction import bare
from ledger.validation import quoted

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


#: An earlier signed head, given as one or as the path of a file holding one
#: (see :func:`held_head`).
Earlier: TypeAlias = "SignedHead | str | os.PathLike[str]"

#: The most a bundle's ``head.json`` may unpack to (a head is some 400 bytes).
_HEAD_MOST = 64 * 1024
#: The most an earlier bundle's ``manifest.json`` may unpack to.
_MANIFEST_MOST = 256 * 1024 * 1024

#: An event a bundle lists: (scope, record id as proposed, position, leaf hash in
#: hex, type).
Listed: TypeAlias = tuple[str, str, int, str, str]


@dataclass(frozen=True)
class HeldHead:
    """An earlier signed head, and the file it was read from ("": given as a head);
    of an earlier bundle, also the events its manifest lists (:data:`Listed`),
    which a later bundle of those records lists too."""

    head: SignedHead
    source: str = ""
    listed: tuple[Listed, ...] = ()

    def describe(self) -> str:
        """``the earlier head in FILE (tree size N, signed T)``, as messages name it."""
        return f"the earlier head {f'in {self.source}' if self.source else 'given'} " + (
            f"({_sized(self.head)})"
        )


def _sized(head: SignedHead) -> str:
    return f"tree size {head.tree_size}, signed {head.time.isoformat()}"


def held_head(given: Earlier) -> HeldHead:
    """The earlier signed head ``given`` is, or the file at that path holds: a
    bundle's ``head.json`` (a zip); one head's JSON (as ``head.json`` holds it or
    ``provledger head`` prints it); or, of a heads file (JSON Lines, as
    ``provledger head --append`` writes it), the last head: the newest, since
    heads are appended in the order they were signed. Its signature is checked
    by whoever holds the key.

    Raises:
        InvalidHeadError: no such file, no regular file, or it holds no readable
            signed head (the message names the file).
    """
    if isinstance(given, SignedHead):
        return HeldHead(given)
    if not isinstance(given, (str, os.PathLike)):
        raise InvalidHeadError(f"an earlier head is a head or a path, not {type(given).__name__}")
    name = os.fspath(given)
    try:
        with open(name, "rb", opener=open_nonblocking) as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise InvalidHeadError("it is not a regular file")
            data = file.read()
        if zipfile.is_zipfile(io.BytesIO(data)):
            head, listed = _bundle_head(data)
            return HeldHead(SignedHead.from_json(head), name, listed)
        text = data.decode("utf-8")
        try:
            whole = json.loads(text)
        except ValueError:
            whole = None
        if isinstance(whole, dict):  # one head, on one line or indented
            return HeldHead(SignedHead.from_json(whole), name)
        lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
        if not lines:
            raise InvalidHeadError("it holds no signed head")
        number, line = lines[-1]
        try:
            return HeldHead(SignedHead.from_json(line), name)
        except InvalidHeadError as exc:
            raise InvalidHeadError(f"line {number}: {exc}") from None
    except (OSError, ValueError, InvalidHeadError) as exc:  # ValueError: undecodable, a NUL
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidHeadError(
            f"cannot read an earlier signed head from {quoted(name)}: {why}"
        ) from None


def _bundle_head(data: bytes) -> tuple[str, tuple[Listed, ...]]:
    """The ``head.json`` of the bundle whose bytes are ``data`` (its signature is
    checked by whoever holds the key), and the events its ``manifest.json`` lists
    (the auditor verified the bundle when it was handed over)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            texts = []
            for name, most in (("head.json", _HEAD_MOST), ("manifest.json", _MANIFEST_MOST)):
                try:
                    info = archive.getinfo(name)
                except KeyError:
                    missing = f"it is a zip archive without {name}, no bundle"
                    raise InvalidHeadError(missing) from None
                if info.compress_type not in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED):
                    raise InvalidHeadError(
                        f"its {name} is packed with zip method {info.compress_type}"
                    )
                if info.file_size > most:
                    raise InvalidHeadError(f"its {name} is {info.file_size} bytes, too many")
                texts.append(read_member(archive, info).decode("utf-8"))
        try:
            listed = tuple(listed_events(json.loads(texts[1])))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            unread = f"its manifest.json lists no readable events ({exc!r})"
            raise InvalidHeadError(unread) from None
        return texts[0], listed
    except (InvalidHeadError, UnicodeDecodeError):
        raise
    except Exception as exc:  # zipfile raises many kinds on altered archives
        raise InvalidHeadError(f"its head.json cannot be read ({exc})") from None


def _as_list(given: Iterable[Earlier], name: str) -> list[Earlier]:
    """``given`` as a list (one path alone is refused: its characters are no paths)."""
    if isinstance(given, (str, bytes, os.PathLike, SignedHead)) or not isinstance(given, Iterable):
        raise InvalidInputError(f"{name} is a list of heads or paths, not {type(given).__name__}")
    return list(given)


def extension_problem(earlier: SignedHead, later: SignedHead, proof: list[bytes]) -> str | None:
    """Why ``proof`` does not show that ``later``'s tree extends ``earlier``'s
    (an RFC 9162 consistency proof; none when their sizes are equal), or None.
    What the heads say of their last log positions must agree too."""
    m, n = earlier.tree_size, later.tree_size
    if m > n:
        return (
            f"it describes {m} events, the head of {_sized(later)} only {n}: events were "
            "removed after it was taken"
        )
    if m == n and (earlier.root != later.root or earlier.position != later.position):
        return (
            f"the head of {_sized(later)} has another root or last position for the same "
            "tree size: the log was rewritten (two histories were signed)"
        )
    if m < n and not merkle.verify_consistency(
        m, n, bytes.fromhex(earlier.root), bytes.fromhex(later.root), proof
    ):
        return (
            f"the consistency proof from it to the head of {_sized(later)} fails: the first "
            f"{m} events are not the ones it describes, the log was rewritten after it was taken"
        )
    if m < n and earlier.position >= later.position:
        return (
            f"it ends at log position {earlier.position}, not before the head of "
            f"{_sized(later)} (position {later.position})"
        )
    return None


def _check_extends(
    manifest: dict[str, Any],
    head: SignedHead | None,
    key: Ed25519PublicKey,
    problems: list[str],
) -> list[tuple[SignedHead, bool]]:
    """Each earlier head the manifest's ``extends`` lists, and whether its
    signature (by the bundle's key) and its consistency proof to ``head`` verify."""
    out = []
    for i, entry in enumerate(manifest.get("extends", [])):
        where = f"manifest.json's extends[{i}]"
        try:
            earlier = SignedHead.from_json(entry["head"])
            proof = [bytes.fromhex(step) for step in entry["proof"]]
        except (LedgerError, ValueError) as exc:
            problems.append(f"{where} is malformed: {exc}")
            continue
        what = f"the earlier head in {where} ({_sized(earlier)})"
        if not verify_head(earlier, key):
            problems.append(f"{what} is not signed by the bundle's key: it was altered")
            out.append((earlier, False))
            continue
        problem = None if head is None else extension_problem(earlier, head, proof)
        if problem is not None:
            problems.append(f"{what}: {problem}")
        out.append((earlier, head is not None and problem is None))
    return out


def _check_earlier(
    held: list[HeldHead],
    extends: list[tuple[SignedHead, bool]],
    head: SignedHead | None,
    key: Ed25519PublicKey,
    trusted: Ed25519PublicKey | None,
    problems: list[str],
    placed: Iterable[tuple[int, int]] = (),
    listed: Collection[Listed] = (),
    records: Collection[tuple[str, str]] = (),
) -> None:
    """That the bundle's ``head`` extends each earlier head the auditor holds:
    each signed by the trusted key (else the bundle's own), not larger than
    ``head``, and ``head`` itself or one the manifest's ``extends`` proves; and
    that each event listed (``placed``: its position and leaf index) is on the
    side of that head its position puts it (an event the earlier head covers is
    one of its leaves, an event after it is not); of an earlier bundle, that
    every event it lists of a record this bundle includes is listed here too,
    at the same position and leaf (``listed``: this bundle's own)."""
    checker = trusted or key
    whose = "the trusted key" if trusted is not None else "the bundle's key (not pinned)"
    placed = list(placed)
    placing: list[str] = []
    for given in held:  # after the heads' own problems, each named first
        placing += _split_problems(given, placed)
        placing += _left_out(given, listed, records)
        earlier, what = given.head, given.describe()
        if earlier.key_id != key_id(checker):
            problems.append(
                f"{what} was signed by key {earlier.key_id[:16]}…, not by {whose} "
                f"{key_id(checker)[:16]}…"
            )
            continue
        if not verify_head(earlier, checker):
            problems.append(f"{what}: its signature does not verify with {whose}")
            continue
        if head is None:
            continue  # the bundle's head is already named as malformed
        if earlier.tree_size > head.tree_size:
            problems.append(
                f"the bundle's head ({_sized(head)}) is older than the head you hold"
                f"{f' in {given.source}' if given.source else ''} ({_sized(earlier)}): an "
                "earlier bundle given as a later one, or a log cut short"
            )
            continue
        if earlier.tree_size == head.tree_size:
            problem = extension_problem(earlier, head, [])
            if problem is not None:
                problems.append(f"{what}: {problem}")
            continue
        sized = [e for e, _ in extends if e.tree_size == earlier.tree_size]
        if not sized:
            problems.append(
                f"the bundle does not show that its head ({_sized(head)}) extends {what}: its "
                "manifest carries no consistency proof from that head; ask its writer for one "
                "written with `provledger bundle … --extends` that head"
            )
        elif not any(e.root == earlier.root and e.position == earlier.position for e in sized):
            problems.append(
                f"{what} has another root or last position than the head of the same tree "
                "size the bundle's manifest proves its head extends: two histories were "
                "signed, the log was rewritten after the head you hold was taken"
            )
        # else: the manifest's proof from that head was checked (a failure named there)
    problems += placing


def records_named(manifest: dict[str, Any]) -> set[tuple[str, str]]:
    """(scope, record id as proposed) of each record the manifest includes."""
    return {
        (str(r["scope"]), bare(str(r["id"])))
        for r in manifest["records"]
        if isinstance(r, dict) and "scope" in r
    }


def listed_events(manifest: dict[str, Any]) -> set[Listed]:
    """(scope, record id as proposed, position, leaf hash in hex, type) of each
    event the manifest lists: a record named by its scope and bare id, as every
    reader names it, whether shown as ``ID`` or ``ID@@SCOPE`` (``ledger.redaction``)."""
    scopes = {str(r["id"]): str(r.get("scope")) for r in manifest["records"]}
    return {
        (
            scopes.get(str(e["record"]), ""),
            bare(str(e["record"])),
            int(e["position"]),
            str(e["leaf"]),
            str(e["type"]),
        )
        for e in manifest["events"]
    }


def _left_out(
    given: HeldHead, listed: Collection[Listed], records: Collection[tuple[str, str]]
) -> list[str]:
    """Each event the earlier bundle ``given`` lists of a record this bundle
    includes that this bundle does not list the same: at the same position, with
    the same leaf and as the same type (a withheld event's type is its
    manifest's word, so a revocation the earlier bundle showed, listed here as
    another type, is refused here)."""
    types = {entry[:4]: entry[4] for entry in listed}
    out = []
    for scope, rid, position, leaf, kind in given.listed:
        if (scope, rid) not in records:
            continue
        here = types.get((scope, rid, position, leaf))
        if here is None:
            out.append(
                f"{rid}'s {kind} event at position {position}, which the bundle you hold in "
                f"{given.source} lists, is not listed here with the same leaf: a later bundle "
                "of a record lists every event an earlier one did (it was left out, or "
                "rewritten)"
            )
        elif here != kind:
            out.append(
                f"{rid}'s event at position {position} is listed here as {here}, but the "
                f"bundle you hold in {given.source} lists the same leaf as {kind}: one "
                "event has one type (it was relabelled)"
            )
    return out


def _split_problems(given: HeldHead, placed: list[tuple[int, int]]) -> list[str]:
    """Each listed event on the wrong side of the earlier head ``given``: its
    leaf among the head's ``tree_size`` leaves though its position is after the
    head's, or the other way round (copies of rewritten events appended to the
    tree, listed at their old positions, would be)."""
    earlier, out = given.head, []
    for position, index in placed:
        if (index < earlier.tree_size) != (position <= earlier.position):
            side = "among" if index < earlier.tree_size else "after"
            out.append(
                f"the event at position {position} is listed as leaf {index}, {side} the "
                f"{earlier.tree_size} leaves of {given.describe()}, which ends at log "
                f"position {earlier.position}: an event's leaf and position are on one side "
                "of a head"
            )
    return out
