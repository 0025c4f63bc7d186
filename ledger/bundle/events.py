"""The events a bundle carries, read from the log in one transaction: each with
its stored bytes (or withheld, when they name a record the caller may not
audit), its Merkle leaf and inclusion proof, and what they tell of each record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger import merkle, redaction
from ledger.bundle.told import _as_shown, _tell, _Told
from ledger.errors import (
    AccessDeniedError,
    ConcurrencyError,
    CorruptEventError,
    InvalidInputError,
    UnknownRecordError,
)
from ledger.log_check import checked_inclusion_paths
from ledger.merkle import LogDigest
from ledger.session import Session
from ledger.values import AuditEvent, AuditTrail
from projections import validity as validity_view


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


def _events(
    session: Session, trails: dict[str, AuditTrail], auditable: _Auditable
) -> tuple[list[_Event], LogDigest, dict[str, _Told]]:
    """Each event of the included records with its bytes (or withheld) and its
    inclusion proof, the digest of the tree the proofs are in, and what each
    record's stored events say of it: one read transaction, one pass over the
    log, which must pass ``verify``'s log and authorization checks (memory grows
    with the authorization replay's state, one small state per record, not with
    the tree).

    Raises:
        CorruptEventError: an included record's stored events are broken (named
            first), or the log fails one of those checks.
    """
    caller = session.caller
    engine = caller.engine
    recorder = engine.recorder
    keys = caller.keys_of(t.record for t in trails.values())
    out: list[_Event] = []  # each index and path set after the pass over the leaves
    told: dict[str, _Told] = {}
    placed: set[str] = set()  # records whose scope in the views the log confirmed
    with engine.reading() as c:
        for rid, trail in sorted(trails.items()):
            key = keys[rid, trail.record.scope]
            notes = {n.id: n for n in recorder.select_record_events(c, engine.aggregate_of(c, key))}
            _check_versions(rid, [n.originator_version for n in notes.values()])
            # The trail was read before this transaction: an event of the record
            # committed since would be under the head but left out of the bundle.
            later = sorted(set(notes) - {a.position for a in trail.events})
            if later:
                raise ConcurrencyError(
                    f"bundle refused: {rid!r} changed while the bundle was written (its "
                    f"event at position {later[0]}); write it again"
                )
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
                if withheld:
                    for dep in named - placed:  # each record once per bundle
                        _check_scope_in_log(engine, c, dep)
                        placed.add(dep)
                out.append(_Event(rid, audit, audit.position, -1, leaf, None if withheld else data))
            logged = _tell(key, ((at, *decoded[at]) for at in sorted(decoded)))
            # As the views show it to this caller: hidden ids as one placeholder,
            # keys qualified with their scope by the names the caller knows them by.
            hidden = caller.hidden_among(c, logged.bases, seen=trail.record.scope)
            told[rid] = _as_shown(logged, key, rid, hidden, caller.names(c, (*logged.bases, key)))
        size, index_of = recorder.leaf_indexes(c, [e.position for e in out])
        last = recorder.max_leaf_position(c)
        # The leaves the head is signed over, recomputed from the events' bytes
        # while the whole log passes verify's log and authorization checks.
        root, paths = checked_inclusion_paths(engine, c, size, index_of.values(), "bundle refused")
    for event in out:
        event.index = index_of[event.position]
        event.path = paths[event.index]
    digest = LogDigest(size=size, position=last, root=root.hex())
    return sorted(out, key=lambda e: e.position), digest, told


def _check_scope_in_log(engine: Any, c: Any, key: str) -> None:
    """Refuse when the views give ``key`` another scope (or aggregate) than its
    proposal in the log: what a bundle hides, and so withholds, is decided by a
    record's scope, and a view row moved to a scope the caller cannot see would
    hide a record it may audit."""
    oid = validity_view.aggregate_id(c, engine.dialect, key)
    row = validity_view.current(c, engine.dialect, key)  # as stored now, not as cached
    scope = None if row is None else row["scope"]
    notes = [] if oid is None else list(engine.recorder.select_record_events(c, oid))
    first = engine.projector.decode(notes[0]) if notes else None
    if first is None or (getattr(first, "record_id", None), getattr(first, "scope", None)) != (
        key,
        scope,
    ):
        raise CorruptEventError(
            "bundle refused: the views disagree with the log about a record an included "
            "event names: they place it in another scope than its proposal (run "
            "`provledger verify` to name the row, then `provledger rebuild`)"
        )


def _check_versions(rid: str, versions: list[int]) -> None:
    """Refuse a record whose stored events do not run 1, 2, … without a gap: one
    was deleted behind the ledger's back, and its history would be told without it."""
    for expected, version in enumerate(sorted(versions), start=1):
        if version != expected:
            raise CorruptEventError(
                f"bundle refused: the stored events of {rid!r} lack version {expected} "
                "(an event was removed from the log; verify names its position)"
            )
