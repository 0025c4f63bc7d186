"""Tamper evidence over the stored log: its Merkle digest and its verification.

Every event's Merkle leaf is written in the transaction that appends it. The
digest is the RFC 6962 root over those leaves; verification recomputes each leaf
from the stored bytes, names the first position that differs, and (given a
digest kept elsewhere) proves with a consistency proof that the log extends it.
"""

from __future__ import annotations

from collections.abc import Iterator

from ledger import merkle
from ledger.engine import Engine
from ledger.errors import InvalidInputError
from ledger.merkle import LogDigest, Verification


def digest(engine: Engine) -> LogDigest:
    """The Merkle root over every event as it was appended."""
    last = 0

    def leaves() -> Iterator[bytes]:
        nonlocal last
        for position, leaf in engine.recorder.leaves(c):
            last = position
            yield leaf

    with engine.reading() as c:
        size, root = merkle.root_of(leaves())
    return LogDigest(size=size, position=last, root=root.hex())


def verify(engine: Engine, against: LogDigest | str | None = None) -> Verification:
    """``Ledger.verify``: recompute the tree from the stored bytes; with ``against``,
    prove the log extends that digest."""
    target = None
    if against is not None:
        try:
            if isinstance(against, LogDigest):
                target = LogDigest.parse(str(against))
            elif isinstance(against, str):
                target = LogDigest.parse(against)
            else:
                raise TypeError(f"expected a LogDigest or str, got {type(against).__name__}")
        except (ValueError, TypeError) as exc:
            raise InvalidInputError(f"cannot verify against {against!r}: {exc}") from None
    problem: tuple[int, str] | None = None
    recomputed: list[bytes] = []
    last = 0
    for position, leaf, stored in leaf_pairs(engine):
        last = max(last, position)
        if problem is None:
            if leaf is None:
                problem = (position, f"the event at position {position} is missing")
            elif stored is None:
                problem = (
                    position,
                    f"the event at position {position} was not appended by the ledger",
                )
            elif leaf != stored:
                problem = (
                    position,
                    f"the stored bytes at position {position} differ from what was appended",
                )
        if leaf is not None:
            recomputed.append(leaf)
    size, root = merkle.root_of(recomputed)
    now = LogDigest(size=size, position=last, root=root.hex())
    if problem is not None:
        return Verification(ok=False, digest=now, first_bad_position=problem[0], problem=problem[1])
    if target is None:
        return Verification(ok=True, digest=now)
    if target.size > size:
        return Verification(
            ok=False,
            digest=now,
            problem=f"the log has {size} events; the digest describes {target.size}",
        )
    proof = merkle.consistency_path(recomputed, target.size)
    prefix_root = merkle.root_of(recomputed[: target.size])[1]
    if prefix_root.hex() != target.root or not merkle.verify_consistency(
        target.size, size, bytes.fromhex(target.root), root, proof
    ):
        return Verification(
            ok=False,
            digest=now,
            problem=f"the first {target.size} events do not match the digest {target}",
        )
    return Verification(ok=True, digest=now, consistency_proof=tuple(p.hex() for p in proof))


def leaf_pairs(engine: Engine) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(position, leaf recomputed from the stored event, leaf stored at append time)."""
    with engine.reading() as c:
        after = 0
        while True:
            notes = engine.recorder.read_after(c, after, 1000)
            upper = notes[-1].id if notes else None
            stored = dict(engine.recorder.leaves(c, after, upper))
            events = {
                n.id: merkle.leaf_hash(
                    merkle.leaf_data(n.id, n.originator_id, n.originator_version, n.topic, n.state)
                )
                for n in notes
            }
            for position in sorted(set(stored) | set(events)):
                yield position, events.get(position), stored.get(position)
            if upper is None:
                return
            after = upper
