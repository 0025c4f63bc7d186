"""Verifying a compliance bundle offline (:func:`verify_bundle`): the
archive's members, the manifest's signature and digests, the signed head (and
summary.txt's line telling it) and each event's leaf hash and inclusion proof,
and the consistency proofs from earlier heads its manifest carries and from the
earlier heads the auditor holds (:mod:`ledger.bundle.extends`); what the bundle
states is checked in :mod:`ledger.bundle.verify_statements`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack

from ledger import merkle
from ledger.bundle.archive import (
    _MANIFEST_CONTEXT,
    FORMAT,
    _check_container,
    _check_signature,
    open_nonblocking,
    read_member,
)
from ledger.bundle.extends import (
    Earlier,
    HeldHead,
    Listed,
    _as_list,
    _check_earlier,
    _check_extends,
    held_head,
    listed_events,
    records_named,
)
from ledger.bundle.verify_statements import _check_statements
from ledger.errors import InvalidInputError, InvalidKeyError, LedgerError
from ledger.heads import SignedHead, ed25519, key_id, load_public_key, verify_head
from ledger.values import HIDDEN

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from ledger.heads import PublicKeyLike


@dataclass(frozen=True)
class BundleReport:
    """What :func:`verify_bundle` found: ``ok``, else ``problem`` names the first failure."""

    ok: bool
    problem: str | None = None
    problems: tuple[str, ...] = ()
    record: str | None = None
    head: SignedHead | None = None
    key_id: str | None = None
    events: int = 0
    withheld: int = 0
    hidden: int = 0
    trusted_key: bool = False
    #: What the bundle states but its carried bytes cannot confirm (an event
    #: whose bytes are withheld decides it), each naming the record.
    unchecked: tuple[str, ...] = ()
    #: The earlier heads whose consistency proofs the signed manifest carries
    #: (``extends``), each proof checked against the bundle's head.
    extends: tuple[SignedHead, ...] = ()
    #: The earlier heads given (``earlier=``), in order: when ``ok``, each one
    #: the bundle's head is, or is proved to extend.
    earlier: tuple[HeldHead, ...] = ()
    #: False when nothing in the file was checked: it is no regular file, larger
    #: than a bundle may be, grew while it was read, or would unpack to more than
    #: a verifier holds unless told (``max_unpacked``); not a finding about it.
    checked: bool = True


def verify_bundle(
    path: str | os.PathLike[str],
    public_key: PublicKeyLike | None = None,
    *,
    max_unpacked: int | None = None,
    earlier: Iterable[Earlier] = (),
) -> BundleReport:
    """Check a compliance bundle offline: no ledger, no token (see the module docstring).

    ``public_key`` is the key the auditor trusts (held from elsewhere); without
    it the bundle is checked against the key it carries. ``earlier``: signed
    heads the auditor holds from before (heads, or files :func:`held_head`
    reads: a head's JSON, a heads file, an earlier bundle); each must be signed
    by that key, and the bundle's head must extend it: be it, or be proved by a
    consistency proof the signed manifest carries (``extends``, written by
    ``write_bundle(extends=…)``). Consistency proofs the manifest carries are
    checked whether or not ``earlier`` is given. ``max_unpacked``: the
    bytes its members may unpack to, together, and the file itself may hold, in
    place of :data:`MAX_UNPACKED` (for a bundle of large values its writer said
    it would need; see :func:`unpacked_size`). What is not a regular file (a
    device such as ``/dev/zero``, a FIFO, a directory), or is larger than that,
    fails the check before anything is read from it.

    Raises:
        InvalidInputError: ``max_unpacked`` is not a positive whole number.
        OSError: the file cannot be read (there is none at ``path``).
        InvalidKeyError: ``public_key`` cannot be loaded, or the ``cryptography``
            package is not installed (then nothing can be said of the bundle).
        InvalidHeadError: an ``earlier`` file holds no readable signed head.
    """
    if max_unpacked is not None and (
        isinstance(max_unpacked, bool) or not isinstance(max_unpacked, int) or max_unpacked < 1
    ):
        raise InvalidInputError(
            f"max_unpacked must be a positive whole number of bytes, got {max_unpacked!r}"
        )
    ed25519()  # without it every bundle would look altered
    trusted = None if public_key is None else load_public_key(public_key)
    # The same file given twice is one head held.
    held = list(dict.fromkeys(held_head(given) for given in _as_list(earlier, "earlier")))
    most = max_unpacked or MAX_UNPACKED
    name = os.fspath(path)  # as given, in every refusal of the file
    data = _read_bundle(name, most)
    if isinstance(data, str):
        return _failed(data, checked=False)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except Exception as exc:  # zipfile raises many kinds on altered archives
        return _failed(f"{name} is not a readable zip archive ({exc})")
    with archive:
        unsafe = _unsafe(archive, len(data), most)
        if unsafe is not None:
            why, checked = unsafe
            return _failed(f"{name} is not a bundle: {why}", checked=checked)
        return _verify_archive(archive, data, trusted, held)


#: What a bundle's members may unpack to, together: this many bytes, or
#: :data:`UNPACKED_PER_BYTE` times the archive's own size where that is more. A
#: bundle's JSON and msgpack pack a few times smaller, not a thousand times (as
#: a run of zeros does): a small archive cannot make its verifier hold gigabytes.
#: It is also the most the archive itself may hold: its members are deflated,
#: which never grows them by more than a few bytes in 64 KiB, so an archive
#: larger than what it may unpack to is padded, or needs the larger figure
#: anyway (its writer gives one that covers both: :func:`unpacked_size`).
MAX_UNPACKED = 256 * 1024 * 1024
UNPACKED_PER_BYTE = 16


def unpacked_size(path: str | os.PathLike[str]) -> int | None:
    """The ``max_unpacked`` :func:`verify_bundle` needs for the bundle at ``path``
    when its default is too little (None otherwise): what its members unpack to,
    together, or the file's own size where that is more; the writer's warning to
    pass on."""
    size = Path(path).stat().st_size
    with zipfile.ZipFile(path) as archive:
        total = sum(info.file_size for info in archive.infolist())
    if size > MAX_UNPACKED or total > max(MAX_UNPACKED, UNPACKED_PER_BYTE * size):
        return max(total, size)
    return None


#: What a file that is no regular file is, by the ``stat`` test that tells it.
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _read_bundle(name: str, most: int) -> bytes | str:
    """The bytes of the file at path ``name``, or why none are checked: it is no
    regular file (a device such as ``/dev/zero`` never ends, a FIFO waits for a
    writer), it holds more than ``most`` bytes, or it grew while it was read.

    Read whole, as the archive's signature signs every byte before it (and
    Ed25519 takes its message whole); never more than one byte past the size
    the file had, which is at most ``most``. Opened without blocking and looked
    at again once open: a file swapped for a FIFO meanwhile cannot hang the read.
    """
    refused = _refused_file(name, os.stat(name), most)
    if refused is not None:
        return refused
    with open(name, "rb", opener=open_nonblocking) as file:
        info = os.fstat(file.fileno())
        refused = _refused_file(name, info, most)
        if refused is not None:
            return refused
        data = file.read(info.st_size + 1)
    if len(data) > info.st_size:
        return (
            f"{name} is not a bundle: it grew while it was read, past the {info.st_size} "
            "bytes it held; nothing in it was checked"
        )
    return data


def _refused_file(name: str, info: os.stat_result, most: int) -> str | None:
    """Why the file ``name``, as ``info`` describes it, is not read (None: it may be)."""
    if not stat.S_ISREG(info.st_mode):
        kind = next((kind for test, kind in _FILE_KINDS if test(info.st_mode)), "a special file")
        return f"{name} is not a bundle: it is {kind}, not a regular file; nothing was read from it"
    if info.st_size > most:
        return (
            f"{name} is not a bundle: it is {info.st_size} bytes, more than the {most} a "
            "bundle may be; nothing was read from it (if its writer said verify-bundle "
            f"needs this, give --max-unpacked {info.st_size}, or max_unpacked={info.st_size})"
        )
    return None


def _unsafe(archive: zipfile.ZipFile, size: int, most: int) -> tuple[str, bool] | None:
    """Why the archive's members, as its central directory describes them, are
    not to be unpacked (None: they may be), and whether that is a finding about
    the file: packed otherwise than deflated (or stored), as a bundle's are (a
    finding), or more than a verifier should hold (none: unchecked). Nothing is
    unpacked to tell. A deflated member is unpacked a chunk at a time, never past
    the size it declares (:func:`read_member`); bzip2 and LZMA chunks unpack
    whole, however large, before ``zipfile`` cuts them to that size."""
    infos = archive.infolist()
    for info in infos:
        if info.compress_type not in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED):
            return (
                f"its member {info.filename!r} is packed with zip method {info.compress_type}, "
                "and a bundle's members are deflated; nothing in it was unpacked",
                True,
            )
    total = sum(info.file_size for info in infos)
    limit = max(most, UNPACKED_PER_BYTE * size)
    if total <= limit:
        return None
    largest = max(infos, key=lambda info: info.file_size)
    return (
        f"its members would unpack to {total} bytes ({largest.filename!r} alone to "
        f"{largest.file_size}), more than the {limit} an archive of {size} bytes may; "
        "nothing in it was unpacked (if its writer said it would unpack to this, "
        f"give --max-unpacked {total}, or max_unpacked={total})",
        False,
    )


#: A manifest's fields and the JSON types they must have (an event's fields below).
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "record": str,
    "created": str,
    "key_id": str,
    "head": dict,
    "records": list,
    "events": list,
    "files": dict,
}
_EVENT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "record": str,
    "position": int,
    "type": str,
    "index": int,
    "leaf": str,
    "path": list,
    "file": (str, type(None)),
}


def _shape_problem(manifest: dict[str, Any]) -> str | None:
    """The first field of ``manifest`` that is missing or of the wrong JSON type
    (None: every one the checks read is as a bundle writes it)."""
    for name, want in _FIELDS.items():
        if not isinstance(manifest.get(name), want):
            return f"{name} is {_json_type(manifest.get(name))}"
    for i, entry in enumerate(manifest["records"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            return f"records[{i}] is not a record with an id"
        for name in ("scope", "kind", "status", "validity"):
            if name in entry and not isinstance(entry[name], str):
                return f"records[{i}].{name} is {_json_type(entry[name])}"
    for i, entry in enumerate(manifest["events"]):
        if not isinstance(entry, dict):
            return f"events[{i}] is {_json_type(entry)}"
        for name, want in _EVENT_FIELDS.items():
            value = entry.get(name)
            if not isinstance(value, want) or isinstance(value, bool):
                return f"events[{i}].{name} is {_json_type(value)}"
        if not all(isinstance(step, str) for step in entry["path"]):
            return f"events[{i}].path holds something other than hex strings"
    for name, digest in manifest["files"].items():
        if not isinstance(digest, str):
            return f"files[{name!r}] is {_json_type(digest)}"
    return _extends_shape_problem(manifest)


def _extends_shape_problem(manifest: dict[str, Any]) -> str | None:
    """The first field of the manifest's ``extends`` (absent from bundles written
    with no earlier head) that is of the wrong JSON type, or None."""
    if "extends" not in manifest:
        return None
    listed = manifest["extends"]
    if not isinstance(listed, list):
        return f"extends is {_json_type(listed)}"
    for i, entry in enumerate(listed):
        if not isinstance(entry, dict):
            return f"extends[{i}] is {_json_type(entry)}"
        for name, want in (("head", dict), ("proof", list)):
            if not isinstance(entry.get(name), want):
                return f"extends[{i}].{name} is {_json_type(entry.get(name))}"
        if not all(isinstance(step, str) for step in entry["proof"]):
            return f"extends[{i}].proof holds something other than hex strings"
    return None


def _json_type(value: object) -> str:
    """How a JSON value is named in a message (its type, not its content)."""
    if value is None:
        return "missing or null"
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    return names.get(type(value), "a number")


def _failed(problem: str, **known: Any) -> BundleReport:
    return BundleReport(ok=False, problem=problem, problems=(problem,), **known)


def _read_members(archive: zipfile.ZipFile, problems: list[str]) -> dict[str, bytes]:
    names = archive.namelist()
    duplicated = sorted({n for n in names if names.count(n) > 1})
    for name in duplicated:
        problems.append(f"the archive holds {name} more than once")
    members: dict[str, bytes] = {}
    for info in archive.infolist():  # a name held twice: the last one, as zipfile reads it
        name = info.filename
        try:
            members[name] = read_member(archive, info)
        except Exception as exc:  # zipfile raises many kinds on altered headers
            problems.append(
                f"{name} cannot be read from the archive: it was altered "
                f"({type(exc).__name__}: {exc})"
            )
    return members


def _verify_archive(
    archive: zipfile.ZipFile,
    data: bytes,
    trusted: Ed25519PublicKey | None,
    held: list[HeldHead],
) -> BundleReport:
    problems: list[str] = []
    members = _read_members(archive, problems)
    try:
        manifest = json.loads(members["manifest.json"])
        key = load_public_key(members["public_key.pem"])
    except KeyError as exc:
        # Held but unreadable (its bytes damaged) is named so by _read_members.
        unread = [p for p in problems if p.startswith(f"{exc.args[0]} cannot be read ")]
        problem = unread[0] if unread else f"the bundle lacks {exc.args[0]}"
        return BundleReport(
            ok=False, problem=problem, problems=tuple(dict.fromkeys((problem, *problems)))
        )
    except (ValueError, InvalidKeyError) as exc:
        return _failed(f"the bundle's manifest or public key is unreadable: it was altered ({exc})")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return _failed(f"manifest.json is not a {FORMAT} manifest")
    malformed = _shape_problem(manifest)
    if malformed is not None:  # signed or not: what it says cannot be read
        return _failed(f"manifest.json is malformed: {malformed}")
    kid = key_id(key)
    known: dict[str, Any] = {"record": manifest.get("record"), "key_id": kid}
    if trusted is not None and key_id(trusted) != kid:
        problems.append(_untrusted(key, trusted, members))
    if manifest.get("key_id") != kid:
        problems.append("public_key.pem is not the key the manifest names: it was replaced")
    _check_files(members, manifest, problems)
    _check_names_once(members, problems)
    _check_signature(
        key,
        _MANIFEST_CONTEXT + members["manifest.json"],
        members.get("manifest.sig"),
        problems,
        "manifest.json was altered: its signature (manifest.sig) does not verify",
    )
    _check_names(members, manifest, problems)
    head = _check_head(members, manifest, key, problems)
    events, withheld, placed = _check_events(members, manifest, head, problems)
    extends = _check_extends(manifest, head, key, problems)
    listed, included = _listed(manifest)
    _check_earlier(held, extends, head, key, trusted, problems, placed, listed, included)
    unchecked = _check_statements(members, manifest, problems)
    _check_container(archive, data, key, problems, members)
    hidden = sum(
        1 for r in manifest.get("records", []) if isinstance(r, dict) and r.get("id") == HIDDEN
    )
    result = {
        **known,
        "head": head,
        "events": events,
        "withheld": withheld,
        "hidden": hidden,
        "trusted_key": trusted is not None,
        "unchecked": unchecked,
        "extends": tuple(e for e, proved in extends if proved),
        "earlier": tuple(held),
    }
    if problems:
        return BundleReport(ok=False, problem=problems[0], problems=tuple(problems), **result)
    return BundleReport(ok=True, **result)


def _untrusted(key: Ed25519PublicKey, trusted: Ed25519PublicKey, members: dict[str, bytes]) -> str:
    """What a bundle carrying ``key``, not the ``trusted`` one, is: signed by the key
    it carries (its manifest's signature verifies with it), or only carrying it
    (``public_key.pem`` replaced: said so when the trusted key signed the manifest)."""
    carried, pinned = f"{key_id(key)[:16]}…", f"{key_id(trusted)[:16]}…"
    message = _MANIFEST_CONTEXT + members["manifest.json"]
    failed: list[str] = []
    _check_signature(key, message, members.get("manifest.sig"), failed, "carried")
    if not failed:
        return f"the bundle was signed by key {carried}, not by the trusted key {pinned}"
    _check_signature(trusted, message, members.get("manifest.sig"), failed, "trusted")
    replaced = (
        ""
        if "trusted" in failed
        else ", though its manifest is signed with the trusted key: public_key.pem was replaced"
    )
    return f"the bundle carries public key {carried}, not the trusted key {pinned}{replaced}"


def _check_files(members: dict[str, bytes], manifest: dict[str, Any], problems: list[str]) -> None:
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        problems.append("manifest.json lists no files")
        return
    for name, digest in sorted(listed.items()):
        if name not in members:
            problems.append(f"{name} is missing from the bundle")
        elif hashlib.sha256(members[name]).hexdigest() != digest:
            problems.append(f"{name} was altered: its SHA-256 does not match the manifest")
    for name in sorted(set(members) - set(listed) - {"manifest.json", "manifest.sig"}):
        problems.append(f"{name} is not listed in the manifest: it was added")


def _check_names_once(members: dict[str, bytes], problems: list[str]) -> None:
    """Each JSON file gives each name once in every object: one given twice is read
    here as its last value, and a reader keeping the first (as some do) would read
    another document than the one checked (a forged ``records`` before the real)."""
    for name in ("manifest.json", "prov.json", "head.json"):
        twice: list[str] = []

        def pairs(items: list[tuple[str, Any]], twice: list[str] = twice) -> dict[str, Any]:
            names = [key for key, _ in items]
            twice.extend(key for i, key in enumerate(names) if key in names[:i])
            return dict(items)

        try:
            json.loads(members.get(name, b"{}"), object_pairs_hook=pairs)
        except (ValueError, RecursionError):
            continue  # (named by the checks that read it)
        if twice:
            problems.append(
                f"{name} gives the name {twice[0][:40]!r} twice in one object: a reader "
                "keeping the first value would read another document (the writer never "
                "does so)"
            )


#: The files every bundle holds (its events' bytes besides).
_DOCUMENTS = ("summary.txt", "prov.json", "head.json", "public_key.pem")


def _check_names(members: dict[str, bytes], manifest: dict[str, Any], problems: list[str]) -> None:
    """The archive holds, and the manifest lists, only files the writer writes: its
    documents and the bytes of each event carried, under the name its position
    gives (``events/<position>.bin``), each named by its event's entry."""
    named: dict[str, int] = {}
    for entry in manifest.get("events") or ():
        if isinstance(entry, dict) and isinstance(entry.get("file"), str):
            name, position = entry["file"], entry.get("position")
            if isinstance(position, int) and name != f"events/{position:012d}.bin":
                problems.append(
                    f"manifest.json lists the bytes of the event at position {position} in "
                    f"{name}, but the writer names them events/{position:012d}.bin"
                )
            named[name] = named.get(name, 0) + 1
    for name in sorted(n for n, count in named.items() if count > 1):
        problems.append(f"manifest.json names {name} as the bytes of {named[name]} events")
    writes = {*_DOCUMENTS, "manifest.json", "manifest.sig", *named}
    for name in sorted((set(members) | set(manifest["files"])) - writes):
        problems.append(
            f"the bundle holds {name}, a file its writer never writes"
            + (
                " (no event entry names it as its bytes)"
                if name.startswith("events/")
                else f" (a bundle holds {', '.join(_DOCUMENTS)}, its events' bytes and "
                "its manifest)"
            )
        )


def _check_head(
    members: dict[str, bytes], manifest: dict[str, Any], key: Ed25519PublicKey, problems: list[str]
) -> SignedHead | None:
    try:
        head = SignedHead.from_json(manifest.get("head") or {})
        in_file = SignedHead.from_json(json.loads(members.get("head.json", b"{}")))
    except (LedgerError, ValueError) as exc:
        problems.append(f"the bundle's signed head is malformed: {exc}")
        return None
    if in_file != head:
        problems.append("head.json differs from the head in manifest.json")
    if not verify_head(head, key):
        problems.append(f"the signed head (tree size {head.tree_size}) does not verify")
    else:  # (a head that does not verify is named as that alone)
        _check_head_line(members, head, problems)
    # Each record's validity is judged at the instant the bundle says it was made
    # (an expiry before it): the writer makes it the head's signed time.
    try:
        made: datetime | None = datetime.fromisoformat(str(manifest.get("created")))
    except ValueError:
        made = None
    if made != head.time:
        problems.append(
            f"manifest.json says the bundle was made at {manifest.get('created')}, but its "
            f"signed head was signed at {head.time.isoformat()}: a bundle states its records "
            "as at the instant its head is signed"
        )
    return head


def _check_head_line(members: dict[str, bytes], head: SignedHead, problems: list[str]) -> None:
    """summary.txt's one ``signed head:`` line is the signed head the bundle
    carries (its tree size, position, root, time and key), as the writer tells it."""
    expected = (
        f"signed head: tree size {head.tree_size}, log position {head.position}, root "
        f"{head.root}, signed {head.time.isoformat()} by key {head.key_id}"
    )
    summary = members.get("summary.txt", b"").decode("utf-8", "replace").splitlines()
    said = [line for line in summary if line.startswith("signed head: ")]
    if len(said) != 1:
        problems.append(f"summary.txt has {len(said)} signed head lines, not one")
    elif said[0] != expected:
        problems.append(
            f"summary.txt states the signed head as {said[0][13:253]!r}, but the head the "
            f"bundle carries is {expected[13:]!r}"
        )


def _check_events(
    members: dict[str, bytes],
    manifest: dict[str, Any],
    head: SignedHead | None,
    problems: list[str],
) -> tuple[int, int, list[tuple[int, int]]]:
    included = withheld = 0
    listed = manifest.get("events")
    if not isinstance(listed, list):
        problems.append("manifest.json lists no events")
        return 0, 0, []
    placed: list[tuple[int, int, str]] = []
    for entry in listed:
        try:
            position, index = int(entry["position"]), int(entry["index"])
            leaf = bytes.fromhex(entry["leaf"])
            path = [bytes.fromhex(p) for p in entry["path"]]
            name, kind = entry["file"], str(entry["type"])
        except (KeyError, TypeError, ValueError):
            problems.append(f"manifest.json has a malformed event entry: {str(entry)[:80]}")
            continue
        where = f"the {kind} event at position {position}"
        placed.append((position, index, where))
        if name is None:
            withheld += 1
        else:
            included += 1
            content = members.get(str(name))
            if content is None:
                # Named whether or not manifest.json's files list it: an entry
                # naming bytes the archive lacks is no event carried (nor withheld).
                problems.append(
                    f"manifest.json lists the {kind} event of {entry['record']} at position "
                    f"{position} with its bytes in {name}, but the archive holds no {name}"
                )
                continue
            if merkle.leaf_hash(content) != leaf:
                problems.append(f"{name} ({where}) was altered: its leaf hash does not match")
                continue
            try:
                stored = msgpack.unpackb(content, raw=False)
                at, topic = int(stored[0]), str(stored[3])
            except (ValueError, TypeError, IndexError, msgpack.UnpackException):
                problems.append(f"{name} ({where}) is not a stored event")
                continue
            if at != position or not topic.endswith(f".{kind}"):
                problems.append(f"{name} is the {topic} event at position {at}, not {where}")
        if head is not None and not merkle.verify_inclusion(
            leaf, index, head.tree_size, path, bytes.fromhex(head.root)
        ):
            problems.append(f"{where} is not in the signed head's tree (its inclusion proof fails)")
    problems += _misplaced(placed, head)
    return included, withheld, [(position, index) for position, index, _ in placed]


def _misplaced(placed: list[tuple[int, int, str]], head: SignedHead | None) -> list[str]:
    """Events listed at leaves a log cannot have put them at: each event is the
    leaf after the one before it, so leaf ``i`` is at log position ``i + 1`` or
    later, and leaves follow positions (an event copied to later leaves, its
    place in the tree moved away from its position, is refused here); and none
    after the signed head's last position."""
    out, before = [], None
    for position, index, where in sorted(placed):
        if head is not None and position > head.position:
            out.append(
                f"{where} is after the signed head's last position {head.position}: the "
                "head covers no event after it"
            )
        if index >= position:
            out.append(
                f"{where} is listed as leaf {index} of the tree, but the event at position "
                f"{position} is leaf {position - 1} at most (one leaf per event, in order)"
            )
        elif before is not None and (position == before[0] or index <= before[1]):
            out.append(
                f"{where} is listed as leaf {index}, not after leaf {before[1]} of the event "
                f"at position {before[0]}: leaves follow the log's order"
            )
        before = (position, index)
    return out


def _listed(
    manifest: dict[str, Any],
) -> tuple[set[Listed], set[tuple[str, str]]]:
    """What :func:`listed_events` and :func:`records_named` make of the manifest
    (nothing of one whose records or events are malformed: their own checks name
    them)."""
    try:
        return listed_events(manifest), records_named(manifest)
    except (KeyError, TypeError, ValueError, AttributeError):
        return set(), set()
