"""Writing a compliance bundle (:func:`write_bundle`), refused when the log fails
``verify``'s log or authorization check (:func:`ledger.bundle.events._events`:
the head is signed over no log ``verify`` rejects), when the views disagree with
the record's stored events (:func:`_check_view`), or when the log does not extend
an earlier head it is to carry a consistency proof from (:func:`_extension_proofs`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger import merkle
from ledger.access import Role
from ledger.bundle.archive import _MANIFEST_CONTEXT, FORMAT, _signed_archive
from ledger.bundle.documents import _prov_json, _summary
from ledger.bundle.events import _Auditable, _events
from ledger.bundle.extends import Earlier, HeldHead, _as_list, extension_problem, held_head
from ledger.bundle.told import _Told
from ledger.bundle.verify_status import SUMMARY_FORM
from ledger.errors import CorruptEventError, InvalidHeadError, InvalidInputError, naming_file
from ledger.graph import collect
from ledger.heads import (
    SignedHead,
    key_id,
    load_private_key,
    public_key_pem,
    sign_head,
    verify_head,
)
from ledger.serialization import pack
from ledger.session import Session
from ledger.values import HIDDEN, AuditTrail, RecordView

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from ledger.heads import PrivateKeyLike


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
    #: The earlier heads the manifest proves the head extends (``extends=``), as given.
    extends: tuple[HeldHead, ...] = ()


def write_bundle(
    session: Session,
    record_id: str,
    private_key: PrivateKeyLike,
    path: str | os.PathLike[str],
    *,
    extends: Iterable[Earlier] = (),
) -> BundleInfo:
    """Write the compliance bundle of ``record_id`` to ``path`` (see the module docstring).

    ``extends``: earlier signed heads an auditor holds (heads, or files
    :func:`~ledger.bundle.verify.held_head` reads: a head's JSON, a heads file
    (its newest head), an earlier bundle). Each must be signed by
    ``private_key``, and the log must extend it: the manifest then carries, for
    each, the head and the RFC 9162 consistency proof from it to the bundle's
    head, which ``verify_bundle(earlier=…)`` checks offline.

    Raises:
        UnknownRecordError: no such record, or not visible to the session.
        AccessDeniedError: no ``audit`` role in the record's scope.
        InvalidKeyError: the key cannot be loaded.
        CorruptEventError: a stored event no longer matches its Merkle leaf;
            the log fails ``verify``'s log or authorization check (checked in
            the transaction the head's digest is read in: an event stored
            behind the ledger's back by an actor the log never authorized, say);
            or the views disagree with the log about an included record's
            status, validity, expiry, parents, observed dependencies, scope,
            claim key, kind, value or evidence, or leave out one of its
            ancestors (``provledger verify`` names the row; ``provledger
            rebuild`` replays the views from the log).
        InvalidInputError: ``session`` is an as-of session (the head is signed
            now, over the whole log).
        ConcurrencyError: an included record changed while the bundle was
            written; write it again.
        InvalidHeadError: an ``extends`` file holds no readable signed head, a
            head there is not signed by ``private_key``, or the log does not
            extend it (removed or rewritten events): nothing is written then.
    """
    key = load_private_key(private_key)
    earlier = _signed_by(key, [held_head(given) for given in _as_list(extends, "extends")])
    engine = session.caller.engine
    now = engine.now()
    if session.caller.position is not None or session.caller.as_of_at is not None:
        # The head is signed now, over the whole log: a record stated as it was at
        # a past position would be stated so under a head holding its later events.
        raise InvalidInputError(
            "a compliance bundle states its records as they are under the head it signs "
            "now: write it from a session, not an as-of one"
        )
    # Every status and validity stated at one instant, the one the bundle says
    # it was made at: a record expiring while it is written is stated as it
    # was then, as its verification judges it.
    session = Session(session.caller.derive(at=now))
    # Every basis ever held: a record revalidated on a new one was delivered, or
    # relied on, while it rested on the old one, which the bundle must show.
    sub = collect(
        session, record_id, ancestors=True, role=Role.AUDIT, command="bundle", former=True
    )
    root = sub.root
    assert root is not None
    try:
        trails = {node.id: session.audit(node.id) for node in sub.nodes}
    except CorruptEventError as exc:  # a trail its events cannot vouch for
        raise CorruptEventError(f"bundle refused: {exc}") from None
    auditable = _Auditable(session, trails)
    # Every auditable ancestor is in ``trails``: the others are the hidden ones.
    hidden = any(
        dep not in trails
        for t in trails.values()
        for dep in (*t.record.parents, *t.record.observed)
    )
    events, digest, told = _events(session, trails, auditable)
    # The views say what the bundle states; the log is what it proves. State
    # nothing the events it carries contradict (a view row edited behind the
    # ledger's back, or not yet rebuilt).
    for rid, trail in trails.items():
        _check_view(rid, trail.record, told[rid], trails, auditable)
    head = sign_head(key, digest, now)
    proofs = _extension_proofs(engine, head, earlier)
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
        "summary": SUMMARY_FORM,
        "record": root,
        "created": now.astimezone(UTC).isoformat(timespec="microseconds"),
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
    if earlier:  # (a bundle written with none has no such key, as before)
        manifest["extends"] = [
            {"head": held.head.to_json(), "proof": [step.hex() for step in proof]}
            for held, proof in zip(earlier, proofs, strict=True)
        ]
    manifest_bytes = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")
    files["manifest.json"] = manifest_bytes
    files["manifest.sig"] = base64.b64encode(key.sign(_MANIFEST_CONTEXT + manifest_bytes)) + b"\n"
    archive = _signed_archive(files, key)
    with naming_file(path):
        Path(path).write_bytes(archive)
    return BundleInfo(
        path=str(path),
        record=root,
        head=head,
        records=tuple(order),
        events=sum(1 for e in events if e.data is not None),
        withheld=sum(1 for e in events if e.data is None),
        hidden=int(hidden),
        extends=tuple(earlier),
    )


def _signed_by(key: Ed25519PrivateKey, held: list[HeldHead]) -> list[HeldHead]:
    """``held`` (each head once), refused naming the file of one not signed by ``key``."""
    public, out, seen = key.public_key(), [], set()
    for given in held:
        earlier = given.head
        if earlier.key_id != key_id(public):
            raise InvalidHeadError(
                f"bundle refused: {given.describe()} was signed by key "
                f"{earlier.key_id[:16]}…, not by the signing key {key_id(public)[:16]}…; "
                "nothing was written"
            )
        if not verify_head(earlier, public):
            raise InvalidHeadError(
                f"bundle refused: {given.describe()}: its signature does not verify with "
                "the signing key; nothing was written"
            )
        if (earlier.tree_size, earlier.root, earlier.position) not in seen:
            seen.add((earlier.tree_size, earlier.root, earlier.position))
            out.append(given)
    return out


def _extension_proofs(engine: Any, head: SignedHead, earlier: list[HeldHead]) -> list[list[bytes]]:
    """The RFC 9162 consistency proof from each earlier head to ``head``, over the
    stored leaves (one pass each, memory that grows with log ``head.tree_size``),
    each checked; refused naming the head the log does not extend."""
    proofs = []
    with engine.reading() as c:
        for given in earlier:
            m = given.head.tree_size
            proof: list[bytes] = []
            ends = [given.head.position]  # where the log's m-th event is
            if m < head.tree_size:
                stored = engine.recorder.leaves(c, 0, head.position)
                root, proof = merkle.consistency_proof(_noting(stored, m, ends), head.tree_size, m)
                if root.hex() != head.root:
                    raise CorruptEventError(
                        f"bundle refused: the stored Merkle leaves up to position {head.position} "
                        "changed while the bundle was written (run `provledger verify`)"
                    )
            problem = extension_problem(given.head, head, proof)
            if problem is None and m and ends[0] != given.head.position:
                problem = (
                    f"it ends at log position {given.head.position}, but the log's event "
                    f"{m} is at position {ends[0]}: the log was rewritten after it was taken"
                )
            if problem is not None:
                raise InvalidHeadError(
                    f"bundle refused: the log does not extend {given.describe()}: {problem}; "
                    "nothing was written"
                )
            proofs.append(proof)
    return proofs


def _noting(stored: Iterable[tuple[int, bytes]], m: int, ends: list[int]) -> Iterator[bytes]:
    """The leaves of ``stored`` (position, leaf) pairs, putting the position of
    the ``m``-th in ``ends[0]``."""
    for count, (position, leaf) in enumerate(stored, start=1):
        if count == m:
            ends[0] = position
        yield leaf


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
    if told.proposal is not None:
        # What the bundle states of the record itself (summary.txt's value and
        # evidence lines, prov.json's attributes) is what its proposal says.
        stated: tuple[tuple[str, object, object], ...] = (
            ("scope", view.scope, told.proposal["scope"]),
            ("claim key", view.claim_key, told.proposal["claim_key"]),
            ("kind", str(view.kind), str(told.proposal["kind"])),
            ("value", view.value, told.proposal["value"]),
            ("conditions", view.conditions or None, told.proposal["conditions"] or None),
            ("evidence", view.evidence, told.proposal["evidence"]),
        )
        for what, shown_as, proposed in stated:
            if pack(shown_as) != pack(proposed):
                refuse(
                    f"they show its {what} as {shown_as!r:.120} but its proposal says "
                    f"{proposed!r:.120}"
                )
    left_out = sorted(b for b in told.bases if b not in trails and auditable(b))
    if left_out:
        refuse(f"its events name {', '.join(left_out)} as a basis, which the views leave out")
