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

What the bundle states of each record (status, validity, parents, ancestry)
comes from the views, checked against the record's stored events: the writer
refuses (``CorruptEventError`` naming the record) when the views say otherwise
than the log.

:func:`verify_bundle` (``provledger verify-bundle FILE.zip``) checks all of
that with no ledger and no token, naming the first thing that fails: the
signatures, digests and proofs, and every status and basis the bundle states
against the events it carries (decoded from their stored bytes). Given the
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
import dataclasses
import hashlib
import io
import json
import os
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack

from ledger import merkle, redaction
from ledger.access import Role
from ledger.domain import Kind, Status, Validity
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
from ledger.serialization import unpack
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
    #: What the bundle states but its carried bytes cannot confirm (an event
    #: whose bytes are withheld decides it), each naming the record.
    unchecked: tuple[str, ...] = ()


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
        CorruptEventError: a stored event no longer matches its Merkle leaf, or
            the views disagree with the log about an included record's status,
            validity, expiry, parents or observed dependencies, or leave out one
            of its ancestors (``provledger verify`` names the row; ``provledger
            rebuild`` replays the views from the log).
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
    events, digest, told = _events(session, trails, auditable)
    # The views say what the bundle states; the log is what it proves. State
    # nothing the events it carries contradict (a view row edited behind the
    # ledger's back, or not yet rebuilt).
    for rid, trail in trails.items():
        _check_view(rid, trail.record, told[rid], trails, auditable)
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
) -> tuple[list[_Event], LogDigest, dict[str, _Told]]:
    """Each event of the included records with its bytes (or withheld) and its
    inclusion proof, the digest of the tree the proofs are in, and what each
    record's stored events say of it: one read transaction, one pass over the
    leaves (memory does not grow with the log)."""
    caller = session.caller
    engine = caller.engine
    recorder = engine.recorder
    keys = caller.keys_of(t.record for t in trails.values())
    out: list[_Event] = []  # each index and path set after the pass over the leaves
    told: dict[str, _Told] = {}
    with engine.reading() as c:
        for rid, trail in sorted(trails.items()):
            key = keys[rid, trail.record.scope]
            notes = {n.id: n for n in recorder.select_record_events(c, engine.aggregate_of(c, key))}
            _check_versions(rid, [n.originator_version for n in notes.values()])
            decoded = {}
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
                fields = vars(engine.projector.decode(note))
                decoded[audit.position] = (audit.type, fields)
                named = redaction.event_dependencies(fields)
                withheld = not all(auditable(dep) for dep in _named_ids(audit)) or bool(
                    caller.names(c, (*named, key))
                )
                out.append(_Event(rid, audit, audit.position, -1, leaf, None if withheld else data))
            logged = _tell(key, ((at, *decoded[at]) for at in sorted(decoded)))
            # As the views show it to this caller: hidden ids as one placeholder,
            # keys qualified with their scope by the names the caller knows them by.
            hidden = caller.hidden_among(c, logged.bases, seen=trail.record.scope)
            told[rid] = _as_shown(logged, key, rid, hidden, caller.names(c, (*logged.bases, key)))
        size, index_of = recorder.leaf_indexes(c, [e.position for e in out])
        last = recorder.max_leaf_position(c)
        root, paths = merkle.inclusion_paths(
            (leaf for _, leaf in recorder.leaves(c)), size, index_of.values()
        )
    for event in out:
        event.index = index_of[event.position]
        event.path = paths[event.index]
    digest = LogDigest(size=size, position=last, root=root.hex())
    return sorted(out, key=lambda e: e.position), digest, told


def _check_versions(rid: str, versions: list[int]) -> None:
    """Refuse a record whose stored events do not run 1, 2, … without a gap: one
    was deleted behind the ledger's back, and its history would be told without it."""
    for expected, version in enumerate(sorted(versions), start=1):
        if version != expected:
            raise CorruptEventError(
                f"bundle refused: the stored events of {rid!r} lack version {expected} "
                "(an event was removed from the log; verify names its position)"
            )


# -- what the events say -----------------------------------------------------------------

#: The status each record event leaves its record in (``Revalidated`` names its own).
_STATUS_AFTER = {
    "Proposed": Status.CANDIDATE,
    "Accepted": Status.ACCEPTED,
    "Rejected": Status.REJECTED,
    "Revoked": Status.REVOKED,
    "MarkedStale": Status.STALE,
    "Superseded": Status.SUPERSEDED,
}
_FINAL = (Status.REVOKED, Status.REJECTED, Status.SUPERSEDED)


@dataclass
class _Told:
    """What one record's events say of it, folded in log order. ``None`` (and
    ``bases_known`` false) where an event whose bytes are withheld leaves it open;
    ``unknown`` says which event, for the report."""

    record: str
    record_id: str | None = None
    status: Status | None = None
    by: str = "no event"  # the event that set ``status``
    parents: tuple[str, ...] | None = None
    observed: tuple[str, ...] | None = None
    bases: set[str] = field(default_factory=set)  # every basis ever declared or observed
    bases_known: bool = True
    expires: datetime | None = None
    unknown: list[str] = field(default_factory=list)

    def validities(self, at: datetime | None) -> tuple[Validity, ...]:
        """The validities the status allows (``at``: when it was stated, for the expiry)."""
        if self.status is None:
            return tuple(Validity)
        if self.status == Status.ACCEPTED:
            if at is not None and self.expires is not None and self.expires <= at:
                return (Validity.NEEDS_REVALIDATION,)
            return (Validity.VALID, Validity.NEEDS_REVALIDATION)
        if self.status in _FINAL:
            return (Validity.INVALID,)
        return (Validity.NEEDS_REVALIDATION,)


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{value!r} is not a list of record ids")
    return tuple(str(v) for v in value)


def _tell(record: str, events: Iterable[tuple[int, str, Any]]) -> _Told:
    """Fold ``(position, type, fields)`` of one record's events, in log order, into
    what they say of it; ``fields`` is None for an event whose bytes are withheld
    (only the type the manifest lists for it is known). The one definition used
    both to write a bundle and to verify one.

    Raises:
        ValueError, KeyError, TypeError: an event's fields are not a record event's.
    """
    told = _Told(record)
    for position, kind, fields in events:
        where = f"{kind} at position {position}"
        if not isinstance(fields, dict):  # withheld
            if kind in ("Proposed", "Revalidated"):
                told.parents = told.observed = None
                told.bases_known = False
                told.unknown.append(f"its basis ({where}, bytes withheld)")
            if kind == "Proposed":
                told.record_id = record  # the manifest's word: the bytes are withheld
            if kind == "Revalidated":
                told.status, told.by = None, where
                told.unknown.append(f"its status after {where} (bytes withheld)")
            elif kind in _STATUS_AFTER:
                told.status, told.by = _STATUS_AFTER[kind], f"{where} (bytes withheld)"
            continue
        if kind == "Proposed":
            told.record_id = str(fields["record_id"])
            told.parents, told.observed = _names(fields["parents"]), _names(fields["observed"])
            told.bases.update(told.parents, told.observed)
            expires = fields.get("expires")
            told.expires = expires if isinstance(expires, datetime) else None
        if kind == "Revalidated":
            # Version 1 revalidations (0.1.0) all made the record ACCEPTED.
            told.status = Status(str(fields.get("status", Status.ACCEPTED.value)))
            told.by = where
            for name in ("parents", "observed"):
                if fields.get(name) is not None:
                    setattr(told, name, _names(fields[name]))
                    told.bases.update(_names(fields[name]))
        elif kind in _STATUS_AFTER:
            told.status, told.by = _STATUS_AFTER[kind], where
    return told


def _as_shown(
    told: _Told, key: str, rid: str, hidden: frozenset[str], names: dict[str, str]
) -> _Told:
    """``told`` (of the record stored under ``key``, shown as ``rid``) with the ids
    it names as :mod:`ledger.redaction` shows them to the caller."""
    return dataclasses.replace(
        told,
        record_id=rid if told.record_id == key else told.record_id,
        parents=None if told.parents is None else redaction.ids(told.parents, hidden, names),
        observed=None if told.observed is None else redaction.ids(told.observed, hidden, names),
        bases={redaction.one(b, hidden, names) or b for b in told.bases} - {HIDDEN},
    )


_REFUSED = "bundle refused: the views disagree with the log"
_REMEDY = "(run `provledger verify` to name the row, then `provledger rebuild`)"


def _check_view(
    rid: str,
    view: RecordView,
    told: _Told,
    trails: dict[str, AuditTrail],
    auditable: _Auditable,
) -> None:
    """Refuse, naming ``rid``, if what the views say of it (and so what the bundle
    would state) is not what its stored events say."""

    def refuse(what: str) -> None:
        raise CorruptEventError(f"{_REFUSED} about {rid!r}: {what} {_REMEDY}")

    if told.record_id != rid:
        refuse(f"the views give it the stored events of {told.record_id!r}")
    if told.status != view.status:
        refuse(f"they show it {view.status} but its events make it {told.status} ({told.by})")
    if view.validity not in told.validities(None):
        refuse(
            f"they show it {view.status} / {view.validity}, which status {told.status} rules out"
        )
    if view.expires != told.expires:
        refuse(f"they show it expiring {view.expires} but its events say {told.expires}")
    for name, shown, logged in (
        ("parents", view.parents, told.parents),
        ("observed dependencies", view.observed, told.observed),
    ):
        if tuple(shown) != logged:
            refuse(f"they show its {name} as {list(shown)} but its events say {list(logged or ())}")
    left_out = sorted(b for b in told.bases if b not in trails and auditable(b))
    if left_out:
        refuse(f"its events name {', '.join(left_out)} as a basis, which the views leave out")


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
    body = _unsigned_archive(files)
    signature = base64.b64encode(key.sign(_CONTAINER_CONTEXT + body))
    return body + SIGNATURE_PREFIX + signature


def _unsigned_archive(files: dict[str, bytes]) -> bytes:
    """The bytes of the zip archive of ``files`` before its signature (the end
    record already counts the signature's length)."""
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
    return data[: -len(placeholder)]


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


# What the bundle states of a record, in each file that states it: (file, record,
# status, validity or None).
_Statement = tuple[str, str, str, str | None]


def _check_statements(
    members: dict[str, bytes], manifest: dict[str, Any], problems: list[str]
) -> tuple[str, ...]:
    """Check each status, validity and basis the bundle states (manifest.json,
    prov.json, summary.txt) against the events it carries, decoded from their
    stored bytes; return what withheld bytes leave unchecked."""
    records, listed = manifest.get("records"), manifest.get("events")
    if not isinstance(records, list) or not isinstance(listed, list):
        return ()  # already named
    stated = {
        r["id"]: r
        for r in records
        if isinstance(r, dict) and isinstance(r.get("id"), str) and r["id"] != HIDDEN
    }
    hidden = any(isinstance(r, dict) and r.get("id") == HIDDEN for r in records)
    root = manifest.get("record")
    if root not in stated:
        problems.append(f"manifest.json does not include the record it is the bundle of ({root})")
        return ()
    events = _carried(members, listed, stated, problems)
    created = _created(manifest)
    told: dict[str, _Told] = {}
    unchecked: list[str] = []
    for rid in stated:
        t = _told_of(rid, events.get(rid, []), problems)
        if t is None:
            continue
        told[rid] = t
        if "(bytes withheld)" in t.by:
            unchecked.append(
                f"{rid}: its status {t.status} rests on the type manifest.json lists for {t.by}"
            )
        unchecked.extend(f"{rid}: {what} cannot be checked" for what in t.unknown)
    for where, rid, status, validity in _statements(members, stated):
        if rid in told:
            _compare(where, rid, status, validity, told[rid], created, problems)
        elif rid not in stated:
            unchecked.append(
                f"{rid}: {where} states it is {status}, but the bundle carries none of its events"
            )
    _check_summary_ancestry(members, str(root), stated, hidden, problems)
    _check_ancestry(members, str(root), stated, hidden, told, problems, unchecked)
    return tuple(dict.fromkeys(unchecked))


def _created(manifest: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(manifest.get("created")))
    except ValueError:
        return None


_Carried = tuple[
    int, str, Any, int | None, str | None
]  # position, type, fields, version, aggregate


def _carried(
    members: dict[str, bytes],
    listed: list[Any],
    stated: dict[str, Any],
    problems: list[str],
) -> dict[str, list[_Carried]]:
    """Each included record's listed events in log order, decoded where carried."""
    out: dict[str, list[_Carried]] = {}
    for entry in listed:
        try:
            rid, position, kind = str(entry["record"]), int(entry["position"]), str(entry["type"])
            name = entry["file"]
        except (KeyError, TypeError, ValueError):
            continue  # already named as malformed
        if rid not in stated:
            problems.append(
                f"manifest.json lists the {kind} event at position {position} of {rid!r}, "
                "a record the bundle does not include"
            )
            continue
        fields: Any = None
        version = oid = None
        content = None if name is None else members.get(str(name))
        if content is not None:
            try:
                stored = msgpack.unpackb(content, raw=False)
                oid, version = str(stored[1]), int(stored[2])
                fields = unpack(stored[4])
                if not isinstance(fields, dict):
                    raise ValueError("not a mapping of fields")
            except (ValueError, TypeError, IndexError, msgpack.UnpackException) as exc:
                problems.append(
                    f"{name} (the {kind} event of {rid!r} at position {position}) "
                    f"holds no readable event state ({exc})"
                )
                continue
        out.setdefault(rid, []).append((position, kind, fields, version, oid))
    return {rid: sorted(evs, key=lambda e: e[0]) for rid, evs in out.items()}


def _told_of(rid: str, events: list[_Carried], problems: list[str]) -> _Told | None:
    """What ``rid``'s listed events say of it, after checking they are all of its
    events, in order, from its proposal on."""
    if not events:
        problems.append(f"the bundle states {rid!r} but lists none of its events")
        return None
    if events[0][1] != "Proposed":
        problems.append(
            f"the events the bundle lists for {rid!r} do not start with its proposal "
            f"(the first is {events[0][1]} at position {events[0][0]})"
        )
    if len({oid for *_, oid in events if oid is not None}) > 1:
        problems.append(f"the events the bundle lists for {rid!r} belong to different records")
    for number, (position, _kind, _fields, version, _oid) in enumerate(events, start=1):
        if version is not None and version != number:
            problems.append(
                f"the event at position {position} is event {version} of {rid!r}, but the "
                f"bundle lists it as event {number}: the bundle leaves out events of {rid!r}"
            )
            break
    try:
        told = _tell(rid, ((p, k, f) for p, k, f, _, _ in events))
    except (ValueError, KeyError, TypeError) as exc:
        problems.append(f"the events the bundle carries for {rid!r} are not a record's ({exc})")
        return None
    if told.record_id != rid:
        problems.append(f"the events the bundle lists for {rid!r} are those of {told.record_id!r}")
        return None
    return told


def _statements(members: dict[str, bytes], stated: dict[str, Any]) -> Iterable[_Statement]:
    """Every (file, record, status, validity) the bundle states."""
    for rid, entry in stated.items():
        yield "manifest.json", rid, str(entry.get("status")), str(entry.get("validity"))
    try:
        entities = json.loads(members.get("prov.json", b"{}")).get("entity") or {}
    except (ValueError, AttributeError):
        entities = {}  # its digest check names it
    for name, attrs in entities.items() if isinstance(entities, dict) else ():
        if isinstance(name, str) and name.startswith("rec:") and isinstance(attrs, dict):
            status, validity = attrs.get("pl:status"), attrs.get("pl:validity")
            if status is not None:
                yield (
                    "prov.json",
                    name[4:],
                    str(status),
                    None if validity is None else str(validity),
                )
    summary = members.get("summary.txt", b"").decode("utf-8", "replace").splitlines()
    root = next(iter(stated))
    for line in summary:
        if m := re.match(r"status:\s+(\S+) / (\S+)", line):
            yield "summary.txt", root, m[1], m[2]
        elif m := re.match(r"evidence:\s+(\S+): .*\((\w+) / (\w+)\)$", line):
            yield "summary.txt", m[1], m[2], m[3]
        elif line.startswith("ancestry:"):
            for m in re.finditer(r"([^\s,]+) \((\w+), (\w+)\)", line):
                yield "summary.txt", m[1], m[3], None


def _check_summary_ancestry(
    members: dict[str, bytes],
    root: str,
    stated: dict[str, Any],
    hidden: bool,
    problems: list[str],
) -> None:
    """summary.txt's ancestry line names exactly the ancestors manifest.json includes."""
    summary = members.get("summary.txt", b"").decode("utf-8", "replace").splitlines()
    line = next((x for x in summary if x.startswith("ancestry:")), None)
    if line is None:
        return
    text = line[len("ancestry:") :].strip()
    named = {m[1] for m in re.finditer(r"([^\s,]+) \((\w+), (\w+)\)", text)}
    if HIDDEN in text.split(", "):
        named.add(HIDDEN)
    included = (set(stated) - {root}) | ({HIDDEN} if hidden else set())
    if named != included:
        problems.append(
            f"summary.txt gives {root}'s ancestry as {text!r}, but manifest.json includes "
            f"{', '.join(sorted(included)) or 'none'}"
        )


def _compare(
    where: str,
    rid: str,
    status: str,
    validity: str | None,
    told: _Told,
    created: datetime | None,
    problems: list[str],
) -> None:
    if told.status is None:  # a withheld revalidation made it ACCEPTED or CANDIDATE
        if status not in (Status.ACCEPTED, Status.CANDIDATE):
            problems.append(
                f"{where} states {rid} is {status}, but its events ({told.by}) leave it "
                "ACCEPTED or CANDIDATE"
            )
        return
    if status != told.status:
        problems.append(
            f"{where} states {rid} is {status}, but the events the bundle carries make it "
            f"{told.status} ({told.by})"
        )
    elif validity is not None and validity not in told.validities(created):
        expired = told.status == Status.ACCEPTED and validity == Validity.VALID
        problems.append(
            f"{where} states {rid} is {status} / {validity}, but "
            + (
                f"its events say it expired {told.expires}"
                if expired
                else f"a {status} record is not {validity}"
            )
        )


def _check_ancestry(
    members: dict[str, bytes],
    root: str,
    stated: dict[str, Any],
    hidden: bool,
    told: dict[str, _Told],
    problems: list[str],
    unchecked: list[str],
) -> None:
    """The records the bundle includes (and prov.json's derivations) against the
    bases their events name."""
    for rid, t in told.items():
        if not t.bases_known:
            continue
        missing = sorted(t.bases - set(stated))
        if missing and not hidden:
            problems.append(
                f"the events of {rid} name {', '.join(missing)} as a basis, but the bundle "
                f"neither includes {'it' if len(missing) == 1 else 'them'} nor shows an "
                f"ancestor {HIDDEN}"
            )
    reached, frontier, open_ended = {root}, [root], False
    while frontier:
        rid = frontier.pop()
        node = told.get(rid)
        if node is None or not node.bases_known:
            open_ended = True
            continue
        for base in sorted(node.bases & set(stated) - reached):
            reached.add(base)
            frontier.append(base)
    for rid in sorted(set(stated) - reached):
        if open_ended or hidden:
            unchecked.append(f"{rid}: that it is an ancestor of {root} cannot be checked")
        else:
            problems.append(
                f"the bundle includes {rid} as an ancestor of {root}, but no event it carries "
                f"makes {rid} a basis of {root} or of its ancestors"
            )
    try:
        derived = json.loads(members.get("prov.json", b"{}")).get("wasDerivedFrom") or {}
    except (ValueError, AttributeError):
        return
    shown = set()
    for item in derived.values() if isinstance(derived, dict) else ():
        if not isinstance(item, dict):
            continue
        gen, used = str(item.get("prov:generatedEntity")), str(item.get("prov:usedEntity"))
        if not (gen.startswith("rec:") and used.startswith("rec:")):
            continue
        gen, used = gen[4:], used[4:]
        shown.add((gen, used))
        if gen in told and told[gen].bases_known and used not in told[gen].bases:
            problems.append(
                f"prov.json derives {gen} from {used}, but no event of {gen} names {used}"
            )
    for rid, t in told.items():
        for base in (*(t.parents or ()), *(t.observed or ())):
            if base in stated and (rid, base) not in shown:
                problems.append(
                    f"prov.json does not derive {rid} from {base}, which its events name"
                )


def _check_container(
    archive: zipfile.ZipFile,
    data: bytes,
    key: Ed25519PublicKey,
    problems: list[str],
    members: dict[str, bytes],
) -> None:
    comment = archive.comment
    if (
        not comment.startswith(SIGNATURE_PREFIX)
        or len(comment) != _SIGNATURE_LENGTH
        or not data.endswith(comment)
    ):
        problems.append("the archive's signature (its zip comment) is missing or altered")
        return
    failed: list[str] = []
    body = data[: -len(comment)]
    _check_signature(
        key, _CONTAINER_CONTEXT + body, comment[len(SIGNATURE_PREFIX) :], failed, "failed"
    )
    if not failed:
        return
    # The archive is rebuilt exactly as it was written from its files: if that is
    # these bytes, it is the signature that was altered, not the archive.
    if _unsigned_archive(members) == body:
        problems.append(
            "the archive's signature (its zip comment) does not verify: the archive's "
            "bytes are exactly as written, so the signature itself was altered"
        )
    else:
        problems.append(
            "the archive's signature (its zip comment) does not verify: the archive "
            "(its zip structure, names or metadata) or the signature was altered after signing"
        )


__all__ = ["HIDDEN", "BundleInfo", "BundleReport", "verify_bundle", "write_bundle"]
