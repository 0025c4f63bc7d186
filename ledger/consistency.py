"""Whether a log is consistent with a digest or a signed head kept elsewhere: the
RFC 9162 consistency checks of :func:`ledger.verification.verify` (every kept
head, an ``against`` digest) and of :func:`ledger.heads.publish_head` (the newest
kept head, before a new one is appended)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ledger import merkle
from ledger.merkle import LogDigest, MerkleTree
from ledger.stored_types import READ_ERRORS, first_mistyped_leaf

if TYPE_CHECKING:
    from ledger.engine import Engine
    from ledger.heads import SignedHead


def describe(head: SignedHead) -> str:
    return f"tree size {head.tree_size}, signed {head.time.isoformat()}"


def consistency_problem(
    tree: MerkleTree,
    positions: Sequence[int],
    kept: LogDigest,
    name: str,
    head: SignedHead | None = None,
) -> str | None:
    """Why the log is not consistent with a kept digest or head, or None."""
    what = f"{name} ({describe(head)})" if head is not None else f"{name} {kept}"
    if kept.size > tree.size:
        copy = "; a copy made before it: older_copy=True, --older-copy on the command line"
        return _removed(tree.size, kept, what, copy)
    last = positions[kept.size - 1] if kept.size else 0
    return _unextended(tree.size, tree.root(), tree.consistency_path(kept.size), last, kept, what)


def _removed(size: int, kept: LogDigest, what: str, copy: str = "") -> str | None:
    """The problem of a log shorter than ``kept``, or None (``copy``: how a copy
    made before ``kept`` is checked instead)."""
    if kept.size <= size:
        return None
    return (
        f"the log has {size} events; {what} describes {kept.size}: events were "
        f"removed after it was taken (or the ledger was restored from an older backup{copy})"
    )


def _unextended(
    size: int, root: bytes, proof: list[bytes], last: int, kept: LogDigest, what: str
) -> str | None:
    """Why a log of ``size`` leaves under ``root`` does not extend ``kept`` (not
    larger), given the consistency ``proof`` from it and the position of the log's
    ``kept.size``-th leaf (``last``), or None."""
    if not merkle.verify_consistency(kept.size, size, bytes.fromhex(kept.root), root, proof):
        return (
            f"the first {kept.size} events do not match {what}: the log was rewritten "
            "after it was taken (or restored from an older backup, then written to)"
        )
    if last != kept.position:
        return (
            f"{what} ends at log position {kept.position}, but its last event is at position {last}"
        )
    return None


def against_problem(tree: MerkleTree, positions: Sequence[int], target: LogDigest) -> str | None:
    # The 0.1 messages, which scripts may match on.
    if target.size > tree.size:
        return (
            f"the log has {tree.size} events; the digest describes {target.size} (a copy "
            "made before it is checked against a digest or head it reaches)"
        )
    proof = tree.consistency_path(target.size)
    if tree.root(target.size).hex() != target.root or not merkle.verify_consistency(
        target.size, tree.size, bytes.fromhex(target.root), tree.root(), proof
    ):
        return f"the first {target.size} events do not match the digest {target}"
    last = positions[target.size - 1] if target.size else 0
    if target.position != last:
        return (
            f"the digest {target} ends at log position {target.position}, but its last "
            f"event is at position {last}"
        )
    return None


def check_extends(engine: Engine, head: SignedHead) -> str | None:
    """Why the ledger's stored leaves are not consistent with ``head``, or None.

    Cheaper than :func:`verify` (reads only the leaves table, once, keeping a few
    subtree hashes): what :func:`ledger.heads.publish_head` checks before
    appending a new head.
    """
    kept = head.digest
    what = f"the newest kept head ({describe(head)})"
    last = 0
    with engine.reading() as c:
        size = engine.recorder.leaf_count(c)
        removed = _removed(size, kept, what)
        if removed is not None:
            return removed

        def leaves() -> Iterator[bytes]:
            nonlocal last
            for count, (position, leaf) in enumerate(engine.recorder.leaves(c), start=1):
                if count == kept.size:
                    last = position
                yield leaf

        try:
            root, proof = merkle.consistency_proof(leaves(), size, kept.size)
        except READ_ERRORS:
            mistyped = first_mistyped_leaf(engine, c)
            if mistyped is None:
                raise
            return f"{mistyped}; run `provledger verify`"
    return _unextended(size, root, proof, last, kept, what)
