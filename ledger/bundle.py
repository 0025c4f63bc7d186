"""Compliance bundles: one record's evidence, checkable offline by an auditor.

:func:`write_bundle` (``provledger bundle ID --key KEY -o FILE.zip``, audit
role) writes a zip archive holding

``summary.txt``
    who proposed the record, who approved it and when, on which evidence, and
    its status now, for people;
``prov.json``
    the record and its ancestors as W3C PROV-JSON (:mod:`ledger.prov`);
``events/<position>.bin``
    the exact bytes each Merkle leaf commits to (``leaf_data``: position,
    aggregate id, version, topic and the stored event state) for every event of
    the record and its ancestors;
``head.json``
    a signed tree head taken when the bundle was written;
``public_key.pem``
    the key that signed the head, the manifest and the archive;
``manifest.json`` and ``manifest.sig``
    every file's SHA-256, each event's leaf hash and inclusion proof against the
    head, and the manifest's Ed25519 signature;

and the archive's comment carries an Ed25519 signature over every byte of the
archive before it, so no byte can change unnoticed.

:func:`verify_bundle` (``provledger verify-bundle FILE.zip``) checks all of
that with no ledger and no token, naming the first thing that fails. Given the
public key the auditor holds from elsewhere (``public_key=``), it also refuses a
bundle re-signed with another key.

Scope isolation: the bundle holds the records the caller may audit. Ancestors
outside those scopes appear as one ``<hidden>`` placeholder, whatever their
number, with no id and no bytes; an event of an included record whose bytes
name a record the caller may not audit (a parent, an observed dependency, a
revoked cause, a replacement) is listed with its leaf hash and inclusion proof
only, its bytes withheld.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack

from ledger import merkle, redaction
from ledger.access import Role
from ledger.domain import Kind
from ledger.errors import (
    AccessDeniedError,
    CorruptEventError,
    InvalidInputError,
    InvalidKeyError,
    LedgerError,
    UnknownRecordError,
)
from ledger.graph import collect
from ledger.heads import (
    SignedHead,
    ed25519,
    key_id,
    load_private_key,
    load_public_key,
    public_key_pem,
    sign_head,
    verify_head,
)
from ledger.merkle import LogDigest
from ledger.prov import PL, export_prov, serialize
from ledger.session import Session
from ledger.values import HIDDEN, AuditEvent, AuditTrail, RecordView

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from ledger.heads import PrivateKeyLike, PublicKeyLike

#: The manifest's ``format``.
FORMAT = "provledger-bundle/1"
#: What the archive comment starts with; the base64 signature follows.
SIGNATURE_PREFIX = b"provledger-bundle-signature:ed25519:"
_SIGNATURE_LENGTH = len(SIGNATURE_PREFIX) + 88  # base64 of 64 bytes
_CONTAINER_CONTEXT = b"provledger bundle archive v1\n"
_MANIFEST_CONTEXT = b"provledger bundle manifest v1\n"
_HIDDEN_REASON = "a dependency outside your scopes was revoked"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class BundleInfo:
    """What :func:`write_bundle` wrote."""

    path: str
    record: str
    head: SignedHead
    records: tuple[str, ...]  # included records (the record first)
    events: int  # events whose bytes are included
    withheld: int  # events listed by leaf hash only (their bytes name a hidden record)
    hidden: int  # 1 if ancestors outside the caller's scopes are shown as <hidden> (once)


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


# -- writing ------------------------------------------------------------------------------


@dataclass
class _Event:
    record: str
    audit: AuditEvent
    position: int
    index: int
    leaf: bytes
    data: bytes | None  # None: withheld
    path: list[bytes] = field(default_factory=list)


def _named_ids(event: AuditEvent) -> list[str]:
    """Record ids an event's stored bytes name besides its own record."""
    details = event.details
    named: list[str] = []
    for key in ("parents", "observed"):
        value = details.get(key)
        if isinstance(value, (list, tuple)):
            named.extend(str(v) for v in value)
    for key in ("cause", "replacement"):
        if isinstance(details.get(key), str):
            named.append(details[key])
    return named


def write_bundle(
    session: Session, record_id: str, private_key: PrivateKeyLike, path: str | os.PathLike[str]
) -> BundleInfo:
    """Write the compliance bundle of ``record_id`` to ``path`` (see the module docstring).

    Raises:
        UnknownRecordError: no such record, or not visible to the session.
        AccessDeniedError: no ``audit`` role in the record's scope.
        InvalidKeyError: the key cannot be loaded.
        CorruptEventError: a stored event no longer matches its Merkle leaf.
    """
    key = load_private_key(private_key)
    # Every basis ever held: a record revalidated on a new one was delivered, or
    # relied on, while it rested on the old one, which the bundle must show.
    sub = collect(
        session, record_id, ancestors=True, role=Role.AUDIT, command="bundle", former=True
    )
    root = sub.root
    assert root is not None
    trails = {node.id: session.audit(node.id) for node in sub.nodes}
    auditable = _Auditable(session, trails)
    # Every auditable ancestor is in ``trails``: the others are the hidden ones.
    hidden = any(
        dep not in trails
        for t in trails.values()
        for dep in (*t.record.parents, *t.record.observed)
    )
    engine = session.caller.engine
    events, digest = _events(session, trails, auditable)
    head = sign_head(key, digest, engine.now())
    order = _nearest_first(root, trails)
    prov = _prov_json(session, root, trails, auditable)
    summary = _summary(trails, order, hidden, head, events, auditable)
    files: dict[str, bytes] = {
        "summary.txt": summary.encode("utf-8"),
        "prov.json": prov.encode("utf-8"),
        "head.json": (json.dumps(head.to_json(), indent=2) + "\n").encode("utf-8"),
        "public_key.pem": public_key_pem(key.public_key()),
    }
    for event in events:
        if event.data is not None:
            files[f"events/{event.position:012d}.bin"] = event.data
    manifest = {
        "format": FORMAT,
        "record": root,
        "created": engine.now().astimezone(UTC).isoformat(timespec="microseconds"),
        "key_id": key_id(key),
        "head": head.to_json(),
        "records": [
            {
                "id": rid,
                "scope": trails[rid].record.scope,
                "kind": str(trails[rid].record.kind),
                "status": str(trails[rid].record.status),
                "validity": str(trails[rid].record.validity),
            }
            for rid in order
        ]
        + ([{"id": HIDDEN}] if hidden else []),
        "events": [
            {
                "record": e.record,
                "position": e.position,
                "type": e.audit.type,
                "index": e.index,
                "leaf": e.leaf.hex(),
                "path": [p.hex() for p in e.path],
                "file": None if e.data is None else f"events/{e.position:012d}.bin",
            }
            for e in events
        ],
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
    }
    manifest_bytes = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")
    files["manifest.json"] = manifest_bytes
    files["manifest.sig"] = base64.b64encode(key.sign(_MANIFEST_CONTEXT + manifest_bytes)) + b"\n"
    Path(path).write_bytes(_signed_archive(files, key))
    return BundleInfo(
        path=str(path),
        record=root,
        head=head,
        records=tuple(order),
        events=sum(1 for e in events if e.data is not None),
        withheld=sum(1 for e in events if e.data is None),
        hidden=int(hidden),
    )


class _Auditable:
    """Whether the session may audit a record (cached): what the bundle may name."""

    def __init__(self, session: Session, trails: dict[str, AuditTrail]) -> None:
        self._session = session
        self._known = dict.fromkeys(trails, True)

    def __call__(self, record_id: str) -> bool:
        if record_id not in self._known:
            try:
                self._session.audit(record_id)
                self._known[record_id] = True
            except (UnknownRecordError, AccessDeniedError, InvalidInputError):
                self._known[record_id] = False
        return self._known[record_id]


def _nearest_first(root: str, trails: dict[str, AuditTrail]) -> list[str]:
    """The included records, the root first, then its ancestors breadth-first over
    their current bases (then, by id, those reached only through former bases or
    hidden records)."""
    order, frontier = [root], [root]
    while frontier:
        reached = []
        for rid in frontier:
            record = trails[rid].record
            for dep in (*record.parents, *record.observed):
                if dep in trails and dep not in order:
                    order.append(dep)
                    reached.append(dep)
        frontier = reached
    return order + sorted(set(trails) - set(order))


def _events(
    session: Session, trails: dict[str, AuditTrail], auditable: _Auditable
) -> tuple[list[_Event], LogDigest]:
    """Each event of the included records with its bytes (or withheld) and its
    inclusion proof, and the digest of the tree the proofs are in: one read
    transaction, one pass over the leaves (memory does not grow with the log)."""
    caller = session.caller
    engine = caller.engine
    recorder = engine.recorder
    keys = caller.keys_of(t.record for t in trails.values())
    out: list[_Event] = []  # each index and path set after the pass over the leaves
    with engine.reading() as c:
        for rid, trail in sorted(trails.items()):
            key = keys[rid, trail.record.scope]
            notes = {n.id: n for n in recorder.select_record_events(c, engine.aggregate_of(c, key))}
            _check_versions(rid, [n.originator_version for n in notes.values()])
            for audit in trail.events:
                note = notes.get(audit.position)
                stored = dict(recorder.leaves(c, audit.position - 1, audit.position))
                if note is None or audit.position not in stored:
                    raise CorruptEventError(
                        f"bundle refused: the event at position {audit.position} of {rid!r} "
                        "has no Merkle leaf"
                    )
                data = merkle.leaf_data(
                    note.id, note.originator_id, note.originator_version, note.topic, note.state
                )
                leaf = merkle.leaf_hash(data)
                if leaf != stored[audit.position]:
                    raise CorruptEventError(
                        f"bundle refused: the stored bytes at position {audit.position} differ "
                        "from what was appended"
                    )
                # An event naming a record by a key its reader is shown otherwise
                # (redaction.names) is withheld too: its bytes would tell more.
                named = redaction.event_dependencies(vars(engine.projector.decode(note)))
                withheld = not all(auditable(dep) for dep in _named_ids(audit)) or bool(
                    caller.names(c, (*named, key))
                )
                out.append(_Event(rid, audit, audit.position, -1, leaf, None if withheld else data))
        size, index_of = recorder.leaf_indexes(c, [e.position for e in out])
        last = recorder.max_leaf_position(c)
        root, paths = merkle.inclusion_paths(
            (leaf for _, leaf in recorder.leaves(c)), size, index_of.values()
        )
    for event in out:
        event.index = index_of[event.position]
        event.path = paths[event.index]
    digest = LogDigest(size=size, position=last, root=root.hex())
    return sorted(out, key=lambda e: e.position), digest


def _check_versions(rid: str, versions: list[int]) -> None:
    """Refuse a record whose stored events do not run 1, 2, … without a gap: one
    was deleted behind the ledger's back, and its history would be told without it."""
    for expected, version in enumerate(sorted(versions), start=1):
        if version != expected:
            raise CorruptEventError(
                f"bundle refused: the stored events of {rid!r} lack version {expected} "
                "(an event was removed from the log; verify names its position)"
            )


def _prov_json(
    session: Session, root: str, trails: dict[str, AuditTrail], auditable: _Auditable
) -> str:
    """The PROV-JSON of the record and its ancestors, hidden ones as one placeholder."""
    doc = json.loads(serialize(export_prov(session, record=root, ancestors=True), "prov-json"))
    prefix = "rec:"

    def hidden_ref(value: Any) -> bool:
        text = value.get("$") if isinstance(value, dict) else value
        return (
            isinstance(text, str) and text.startswith(prefix) and not auditable(text[len(prefix) :])
        )

    for section in doc.values():
        if not isinstance(section, dict):
            continue
        for attrs in section.values():
            for item in attrs if isinstance(attrs, list) else [attrs]:
                if not isinstance(item, dict):
                    continue
                touched = False
                for name, value in list(item.items()):
                    if hidden_ref(value):
                        item[name] = {"$": f"{PL.prefix}:hidden", "type": "prov:QUALIFIED_NAME"}
                        touched = True
                if touched and "pl:reason" in item:
                    item["pl:reason"] = _HIDDEN_REASON
    needs = sorted(
        rid
        for rid, trail in trails.items()
        if any(dep not in trails for dep in (*trail.record.parents, *trail.record.observed))
    )
    if needs:
        doc.setdefault("entity", {})[f"{PL.prefix}:hidden"] = {"prov:label": HIDDEN}
        derived = doc.setdefault("wasDerivedFrom", {})
        for n, rid in enumerate(needs):
            derived[f"_:hidden{n}"] = {
                "prov:generatedEntity": f"{prefix}{rid}",
                "prov:usedEntity": f"{PL.prefix}:hidden",
            }
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _when(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds")


def _summary(
    trails: dict[str, AuditTrail],
    order: Sequence[str],
    hidden: bool,
    head: SignedHead,
    events: Sequence[_Event],
    auditable: _Auditable,
) -> str:
    record = trails[order[0]].record
    lines = [
        "provledger compliance bundle",
        "",
        f"record:    {record.id} ({record.kind}, scope {record.scope}, claim {record.claim_key!r})",
        f"value:     {json.dumps(record.value, default=repr, ensure_ascii=False)[:200]}",
        f"status:    {record.status} / {record.validity}{_cause(record, auditable)}",
    ]
    lines += _history_lines(trails[order[0]])
    evidence = [rid for rid in order if trails[rid].record.kind == Kind.EVIDENCE]
    if not evidence:
        lines.append("evidence:  none among the records you may audit")
    for rid in evidence:
        view = trails[rid].record
        ev = view.evidence or {}
        fetched = ev.get("fetched_at")
        lines.append(
            f"evidence:  {rid}: {ev.get('uri')} fetched "
            f"{_when(fetched) if isinstance(fetched, datetime) else '?'}, "
            f"{ev.get('content_hash')} ({view.status} / {view.validity})"
        )
    ancestry = [
        f"{rid} ({trails[rid].record.kind}, {trails[rid].record.status})" for rid in order[1:]
    ] + ([HIDDEN] if hidden else [])
    lines.append(f"ancestry:  {', '.join(ancestry) if ancestry else 'none'}")
    for rid in order[1:]:
        lines += [f"  {line}" for line in _history_lines(trails[rid], rid)]
    included = sum(1 for e in events if e.data is not None)
    withheld = len(events) - included
    lines += [
        "",
        f"signed head: tree size {head.tree_size}, log position {head.position}, "
        f"root {head.root}, signed {head.time.isoformat()} by key {head.key_id}",
        f"events:    {included} included with their stored bytes and inclusion proofs"
        + (
            f"; {withheld} listed by leaf hash only (their bytes name a record outside your scopes)"
            if withheld
            else ""
        ),
        "check:     provledger verify-bundle THIS.zip --public-key KEY.pub",
        "",
    ]
    return "\n".join(lines)


def _cause(record: RecordView, auditable: _Auditable) -> str:
    if record.cause is None or record.cause == record.id:
        return f" ({record.reason})" if record.reason else ""
    if not auditable(record.cause):
        return f" ({_HIDDEN_REASON})"
    return f" ({record.cause} revoked: {record.reason})"


def _history_lines(trail: AuditTrail, rid: str | None = None) -> list[str]:
    label = {
        "Proposed": "proposed",
        "Accepted": "approved",
        "Rejected": "rejected",
        "Revoked": "revoked",
        "Revalidated": "revalidated",
        "Delivered": "delivered",
        "SnapshotErased": "erased",
    }
    lines = []
    for event in trail.events:
        if event.type not in label:
            continue
        why = event.details.get("reason") or event.details.get("note")
        lines.append(
            f"{label[event.type] + ':':<10} {rid + ' ' if rid else ''}by {event.actor} at "
            f"{_when(event.at)} (log position {event.position})" + (f": {why}" if why else "")
        )
    return lines


def _signed_archive(files: dict[str, bytes], key: Any) -> bytes:
    """The zip archive of ``files`` whose comment signs every byte before it."""
    buffer = io.BytesIO()
    placeholder = SIGNATURE_PREFIX + b"=" * (_SIGNATURE_LENGTH - len(SIGNATURE_PREFIX))
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in _member_order(files):
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
        archive.comment = placeholder
    data = buffer.getvalue()
    assert data.endswith(placeholder)
    body = data[: -len(placeholder)]
    signature = base64.b64encode(key.sign(_CONTAINER_CONTEXT + body))
    return body + SIGNATURE_PREFIX + signature


def _member_order(names: Iterable[str]) -> list[str]:
    first = ["manifest.json", "manifest.sig", "summary.txt", "head.json", "public_key.pem"]
    rest = sorted(n for n in names if n not in first)
    return [n for n in first if n in names] + rest


# -- verifying ----------------------------------------------------------------------------


def verify_bundle(
    path: str | os.PathLike[str], public_key: PublicKeyLike | None = None
) -> BundleReport:
    """Check a compliance bundle offline: no ledger, no token (see the module docstring).

    ``public_key`` is the key the auditor trusts (held from elsewhere); without
    it the bundle is checked against the key it carries.

    Raises:
        OSError: the file cannot be read.
        InvalidKeyError: ``public_key`` cannot be loaded.
    """
    trusted = None if public_key is None else load_public_key(public_key)
    data = Path(path).read_bytes()
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except Exception as exc:  # zipfile raises many kinds on altered archives
        return _failed(f"{Path(path).name} is not a readable zip archive ({exc})")
    with archive:
        return _verify_archive(archive, data, trusted)


def _failed(problem: str, **known: Any) -> BundleReport:
    return BundleReport(ok=False, problem=problem, problems=(problem,), **known)


def _read_members(archive: zipfile.ZipFile, problems: list[str]) -> dict[str, bytes]:
    names = archive.namelist()
    duplicated = sorted({n for n in names if names.count(n) > 1})
    for name in duplicated:
        problems.append(f"the archive holds {name} more than once")
    members: dict[str, bytes] = {}
    for name in names:
        try:
            members[name] = archive.read(name)
        except Exception as exc:  # zipfile raises many kinds on altered headers
            problems.append(
                f"{name} cannot be read from the archive: it was altered "
                f"({type(exc).__name__}: {exc})"
            )
    return members


def _verify_archive(
    archive: zipfile.ZipFile, data: bytes, trusted: Ed25519PublicKey | None
) -> BundleReport:
    problems: list[str] = []
    members = _read_members(archive, problems)
    try:
        manifest = json.loads(members["manifest.json"])
        key = load_public_key(members["public_key.pem"])
    except KeyError as exc:
        return _failed(f"the bundle lacks {exc.args[0]}")
    except (ValueError, InvalidKeyError) as exc:
        return _failed(f"the bundle's manifest or public key is unreadable: it was altered ({exc})")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return _failed(f"manifest.json is not a {FORMAT} manifest")
    kid = key_id(key)
    known: dict[str, Any] = {"record": manifest.get("record"), "key_id": kid}
    if trusted is not None and key_id(trusted) != kid:
        problems.append(
            f"the bundle was signed by key {kid[:16]}…, not by the trusted key "
            f"{key_id(trusted)[:16]}…"
        )
    if manifest.get("key_id") != kid:
        problems.append("public_key.pem is not the key the manifest names: it was replaced")
    _check_files(members, manifest, problems)
    _check_signature(
        key,
        _MANIFEST_CONTEXT + members["manifest.json"],
        members.get("manifest.sig"),
        problems,
        "manifest.json was altered: its signature (manifest.sig) does not verify",
    )
    head = _check_head(members, manifest, key, problems)
    events, withheld = _check_events(members, manifest, head, problems)
    _check_container(archive, data, key, problems)
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
    }
    if problems:
        return BundleReport(ok=False, problem=problems[0], problems=tuple(problems), **result)
    return BundleReport(ok=True, **result)


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


def _check_signature(
    key: Ed25519PublicKey, message: bytes, signature: bytes | None, problems: list[str], what: str
) -> None:
    text = (signature or b"").strip()
    try:
        raw = base64.b64decode(text, validate=True)
        if base64.b64encode(raw) != text:  # one spelling only: no byte may change
            raise ValueError("not the canonical base64 of the signature")
        key.verify(raw, message)
    except (ed25519().InvalidSignature, ValueError):
        problems.append(what)


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
    return head


def _check_events(
    members: dict[str, bytes],
    manifest: dict[str, Any],
    head: SignedHead | None,
    problems: list[str],
) -> tuple[int, int]:
    included = withheld = 0
    listed = manifest.get("events")
    if not isinstance(listed, list):
        problems.append("manifest.json lists no events")
        return 0, 0
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
        if name is None:
            withheld += 1
        else:
            included += 1
            content = members.get(str(name))
            if content is None:
                continue  # already named as missing
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
    return included, withheld


def _check_container(
    archive: zipfile.ZipFile, data: bytes, key: Ed25519PublicKey, problems: list[str]
) -> None:
    comment = archive.comment
    if (
        not comment.startswith(SIGNATURE_PREFIX)
        or len(comment) != _SIGNATURE_LENGTH
        or not data.endswith(comment)
    ):
        problems.append("the archive's signature (its zip comment) is missing or altered")
        return
    _check_signature(
        key,
        _CONTAINER_CONTEXT + data[: -len(comment)],
        comment[len(SIGNATURE_PREFIX) :],
        problems,
        "the archive was altered after it was signed (its zip structure, names or metadata)",
    )


__all__ = ["HIDDEN", "BundleInfo", "BundleReport", "verify_bundle", "write_bundle"]
