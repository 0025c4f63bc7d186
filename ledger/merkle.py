"""Tamper evidence: an RFC 6962 Merkle tree over the stored events in log order.

Leaf ``i`` is the ``i``-th stored event (by log position); its data is
``leaf_data(position, originator_id, originator_version, topic, state)`` — the
msgpack array ``[position, originator id (32 hex chars), version, topic, state]``
— and its hash ``H(0x00 || data)``; an inner node is ``H(0x01 || left || right)``
with ``H`` = SHA-256, exactly as in RFC 6962 section 2.1.

A *digest* ``(size, root)`` kept elsewhere pins the whole log: any modified byte,
deleted, reordered or inserted event changes the root. An *inclusion proof* shows
one event is in the tree with that root; a *consistency proof* (RFC 6962 section
2.1.2, RFC 9162 section 2.1.4) shows a later tree extends an earlier one. Both
verify with the few lines of :func:`verify_inclusion` and
:func:`verify_consistency`, pure functions that need nothing from this package.

:class:`MerkleTree` keeps every complete subtree of a sequence of leaf hashes
(64 bytes per leaf), so proofs against any earlier size of the log cost
O(log² n) hashing instead of a pass over the leaves: that is what checking many
kept tree heads against one log needs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from uuid import UUID

import msgpack

from ledger.errors import InvalidHeadError, InvalidInputError
from ledger.validation import quoted


def leaf_data(
    position: int, originator_id: UUID | str, version: int, topic: str, state: bytes
) -> bytes:
    """The bytes a leaf commits to: everything stored for one event, with its position."""
    packed: bytes = msgpack.packb(
        _leaf_fields(position, originator_id, version, topic, state), use_bin_type=True
    )
    return packed


def _leaf_fields(
    position: int, originator_id: UUID | str, version: int, topic: str, state: bytes
) -> list[object]:
    """What :func:`leaf_data` packs, in order (the one definition of a leaf's content)."""
    oid = originator_id.hex if isinstance(originator_id, UUID) else str(originator_id)
    return [position, oid, version, topic, bytes(state)]


def leaf_hashes(rows: Iterable[tuple[int, UUID | str, int, str, bytes]]) -> Iterator[bytes]:
    """``leaf_hash(leaf_data(*row))`` of each (position, originator id, version,
    topic, state) row, with one packer for them all (a rebuild checks every event)."""
    pack = msgpack.Packer(use_bin_type=True).pack
    sha256 = hashlib.sha256
    for row in rows:
        yield sha256(b"\x00" + pack(_leaf_fields(*row))).digest()


def leaf_hash(data: bytes) -> bytes:
    """``H(0x00 || data)``."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``H(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


EMPTY_ROOT = hashlib.sha256(b"").digest()


def root_of(leaves: Iterable[bytes]) -> tuple[int, bytes]:
    """(size, root) of the tree over leaf hashes, streaming in O(log n) memory.

    Keeps the perfect subtrees of the binary decomposition of the size so far;
    the RFC 6962 root is their right fold.
    """
    size, stack = _subtrees(leaves, None, frozenset(), {})
    return size, _fold([node for _, node in stack]) if stack else EMPTY_ROOT


def _subtrees(
    leaves: Iterable[bytes],
    size: int | None,
    wanted: Collection[tuple[int, int]],
    kept: dict[tuple[int, int], bytes],
) -> tuple[int, list[tuple[int, bytes]]]:
    """One pass over the first ``size`` of ``leaves`` (all of them: None), merging
    equal complete subtrees as they are made; each made one that is ``wanted``,
    as (first leaf, leaves), is put in ``kept``. Returns how many leaves were read
    and the (leaves, hash) of the complete subtrees left, largest first."""
    stack: list[tuple[int, bytes]] = []
    count = 0
    look = bool(wanted)  # a plain root (:func:`root_of`) looks nothing up
    for leaf in leaves:
        if count == size:
            break
        if look and (count, 1) in wanted:
            kept[count, 1] = leaf
        count += 1
        node, height = leaf, 1
        while stack and stack[-1][0] == height:
            node = node_hash(stack.pop()[1], node)
            height *= 2
            if look and (count - height, height) in wanted:
                kept[count - height, height] = node
        stack.append((height, node))
    return count, stack


def _largest_power_of_two_below(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def _mth(leaves: Sequence[bytes]) -> bytes:
    return root_of(leaves)[1]


def inclusion_path(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """RFC 6962 PATH(m, D[n]): the audit path of leaf ``index``."""
    n = len(leaves)
    if n <= 1:
        return []
    k = _largest_power_of_two_below(n)
    if index < k:
        return [*inclusion_path(leaves[:k], index), _mth(leaves[k:])]
    return [*inclusion_path(leaves[k:], index - k), _mth(leaves[:k])]


def inclusion_paths(
    leaves: Iterable[bytes], size: int, indexes: Collection[int]
) -> tuple[bytes, dict[int, list[bytes]]]:
    """The root of the tree over the first ``size`` of ``leaves`` and the RFC 6962
    audit path of each leaf in ``indexes``, in one pass over the leaves and
    memory that grows with log ``size``, not with ``size`` (what a proof about a
    few events of a long log needs).

    Raises:
        ValueError: an index is not below ``size``, or ``leaves`` ends before ``size``.
    """
    for index in indexes:
        if not 0 <= index < size:
            raise ValueError(f"leaf index {index} is not in a tree of {size} leaves")
    ranges = {index: _path_ranges(index, 0, size) for index in indexes}
    root, hashes = _range_hashes(leaves, size, [s for spans in ranges.values() for s in spans])
    return root, {index: [hashes[s] for s in spans] for index, spans in ranges.items()}


def consistency_proof(leaves: Iterable[bytes], size: int, m: int) -> tuple[bytes, list[bytes]]:
    """The root of the tree over the first ``size`` of ``leaves`` and RFC 6962
    PROOF(m, D[size]) (what :func:`consistency_path` gives), in one pass over the
    leaves and memory that grows with log ``size``.

    Raises:
        ValueError: ``m`` is not between 0 and ``size``, or ``leaves`` ends before ``size``.
    """
    if not 0 <= m <= size:
        raise ValueError(f"a tree of {m} leaves is not a prefix of one of {size}")
    spans = [] if m in (0, size) else _consistency_ranges(m, 0, size, True)
    root, hashes = _range_hashes(leaves, size, spans)
    return root, [hashes[s] for s in spans]


def _range_hashes(
    leaves: Iterable[bytes], size: int, spans: Iterable[tuple[int, int]]
) -> tuple[bytes, dict[tuple[int, int], bytes]]:
    """The root over the first ``size`` leaves and the hash of the tree node over
    each (start, end) of ``spans``, in one pass: every node is the right fold of a
    few complete, aligned subtrees, kept as :func:`_subtrees` makes them."""
    spans = list(spans)
    wanted = {piece for span in spans for piece in _pieces(*span)}
    kept: dict[tuple[int, int], bytes] = {}
    count, stack = _subtrees(leaves, size, wanted, kept)
    if count < size:
        raise ValueError(f"{count} leaves given for a tree of {size}")
    root = EMPTY_ROOT if not stack else _fold([node for _, node in stack])
    return root, {span: _fold([kept[piece] for piece in _pieces(*span)]) for span in spans}


def _consistency_ranges(m: int, start: int, end: int, complete: bool) -> list[tuple[int, int]]:
    """The (start, end) leaf ranges whose hashes make SUBPROOF(m, D[start:end],
    complete), in proof order (the recursion of :func:`consistency_path`)."""
    n = end - start
    if m == n:
        return [] if complete else [(start, end)]
    k = _largest_power_of_two_below(n)
    if m <= k:
        return [*_consistency_ranges(m, start, start + k, complete), (start + k, end)]
    return [*_consistency_ranges(m - k, start + k, end, False), (start, start + k)]


def _path_ranges(index: int, start: int, end: int) -> list[tuple[int, int]]:
    """The (start, end) leaf ranges whose hashes make PATH(index) within
    ``[start, end)``, in path order (the recursion of :func:`inclusion_path`)."""
    n = end - start
    if n <= 1:
        return []
    k = _largest_power_of_two_below(n)
    if index < start + k:
        return [*_path_ranges(index, start, start + k), (start + k, end)]
    return [*_path_ranges(index, start + k, end), (start, start + k)]


def _pieces(start: int, end: int) -> list[tuple[int, int]]:
    """The complete subtrees, as (first leaf, leaves), whose right fold is the
    hash of the tree node over ``[start, end)`` (each starts at a multiple of its size)."""
    out = []
    while end - start > 0:
        n = end - start
        if n & (n - 1) == 0:
            out.append((start, n))
            break
        k = _largest_power_of_two_below(n)
        out.append((start, k))
        start += k
    return out


def _fold(nodes: Sequence[bytes]) -> bytes:
    """The right fold ``H(n0, H(n1, … H(n[-2], n[-1])))`` of complete subtrees' hashes."""
    node = nodes[-1]
    for left in reversed(nodes[:-1]):
        node = node_hash(left, node)
    return node


def consistency_path(leaves: Sequence[bytes], m: int) -> list[bytes]:
    """RFC 6962 PROOF(m, D[n]): shows the first ``m`` leaves' tree is a prefix."""

    def subproof(m: int, d: Sequence[bytes], complete: bool) -> list[bytes]:
        n = len(d)
        if m == n:
            return [] if complete else [_mth(d)]
        k = _largest_power_of_two_below(n)
        if m <= k:
            return [*subproof(m, d[:k], complete), _mth(d[k:])]
        return [*subproof(m - k, d[k:], False), _mth(d[:k])]

    if m == 0 or m == len(leaves):
        return []
    return subproof(m, leaves, True)


class MerkleTree:
    """The RFC 6962 tree over a sequence of leaf hashes, with every complete subtree kept.

    Level ``h`` holds the hashes of the complete subtrees of ``2**h`` leaves
    (``size >> h`` of them, 32 bytes each), so the root, an inclusion path or a
    consistency proof for the first ``m`` leaves costs O(log² n) hashing. Build
    it once with :meth:`append` (or from a list), then ask about any prefix.
    """

    HASH = 32

    def __init__(self, leaves: Iterable[bytes] = ()) -> None:
        self._levels: list[bytearray] = [bytearray()]
        for leaf in leaves:
            self.append(leaf)

    @property
    def size(self) -> int:
        """How many leaves the tree has."""
        return len(self._levels[0]) // self.HASH

    def append(self, leaf: bytes) -> None:
        """Add the next leaf hash (32 bytes)."""
        if len(leaf) != self.HASH:
            raise ValueError(f"a leaf hash is {self.HASH} bytes, got {len(leaf)}")
        self._levels[0] += leaf
        height, node = 0, leaf
        # Each time a level gets an even number of nodes, their parent is complete.
        while (len(self._levels[height]) // self.HASH) % 2 == 0:
            left = self._node(height, len(self._levels[height]) // self.HASH - 2)
            node = node_hash(left, node)
            height += 1
            if height == len(self._levels):
                self._levels.append(bytearray())
            self._levels[height] += node

    def leaf(self, index: int) -> bytes:
        """The hash of leaf ``index``."""
        return self._node(0, index)

    def _node(self, height: int, index: int) -> bytes:
        start = index * self.HASH
        return bytes(self._levels[height][start : start + self.HASH])

    def _range(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]); ``start`` is aligned to the largest power of two below
        ``end - start`` (true of every range RFC 6962's recursions ask for)."""
        n = end - start
        if n & (n - 1) == 0:  # a complete subtree: stored
            return self._node(n.bit_length() - 1, start >> (n.bit_length() - 1))
        k = _largest_power_of_two_below(n)
        return node_hash(self._range(start, start + k), self._range(start + k, end))

    def _check_size(self, size: int | None) -> int:
        n = self.size if size is None else size
        if not 0 <= n <= self.size:
            raise ValueError(f"the tree has {self.size} leaves, not {n}")
        return n

    def root(self, size: int | None = None) -> bytes:
        """MTH of the first ``size`` leaves (default: all)."""
        n = self._check_size(size)
        return EMPTY_ROOT if n == 0 else self._range(0, n)

    def inclusion_path(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 PATH(index, D[size]): leaf ``index``'s audit path in the first
        ``size`` leaves (default: all)."""
        n = self._check_size(size)
        if not 0 <= index < n:
            raise ValueError(f"leaf {index} is not among the first {n}")
        path: list[bytes] = []

        def walk(m: int, start: int, end: int) -> None:
            if end - start <= 1:
                return
            k = _largest_power_of_two_below(end - start)
            if m < k:
                walk(m, start, start + k)
                path.append(self._range(start + k, end))
            else:
                walk(m - k, start + k, end)
                path.append(self._range(start, start + k))

        walk(index, 0, n)
        return path

    def consistency_path(self, m: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 PROOF(m, D[size]): shows the first ``m`` leaves' tree is a prefix
        of the first ``size`` leaves' tree (default: all); empty when ``m`` is 0
        or ``size``."""
        n = self._check_size(size)
        if not 0 <= m <= n:
            raise ValueError(f"a tree of {m} leaves is not a prefix of one of {n}")
        if m in (0, n):
            return []
        proof: list[bytes] = []

        def subproof(m: int, start: int, end: int, complete: bool) -> None:
            if m == end - start:
                if not complete:
                    proof.append(self._range(start, end))
                return
            k = _largest_power_of_two_below(end - start)
            if m <= k:
                subproof(m, start, start + k, complete)
                proof.append(self._range(start + k, end))
            else:
                subproof(m - k, start + k, end, False)
                proof.append(self._range(start, start + k))

        subproof(m, 0, n, True)
        return proof


def verify_inclusion(
    leaf: bytes, index: int, size: int, path: Sequence[bytes], root: bytes
) -> bool:
    """Check an inclusion proof (RFC 9162 section 2.1.3.2).

    True when ``path`` proves that the leaf hash ``leaf`` is leaf ``index`` of the
    tree of ``size`` leaves whose root is ``root``.
    """
    if index < 0 or index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    size1: int, size2: int, root1: bytes, root2: bytes, path: Sequence[bytes]
) -> bool:
    """Check a consistency proof (RFC 9162 section 2.1.4.2).

    True when ``path`` proves that the tree of the first ``size1`` leaves (root
    ``root1``) is a prefix of the tree of ``size2`` leaves (root ``root2``).
    """
    if size1 < 0 or size1 > size2:
        return False
    if size1 == 0:  # the empty tree is a prefix of every tree; its root is fixed
        return root1 == EMPTY_ROOT and not path and (size2 > 0 or root2 == EMPTY_ROOT)
    if size1 == size2:
        return root1 == root2 and not path
    if not path:  # 0 < size1 < size2 always needs at least one node
        return False
    proof = list(path)
    if size1 & (size1 - 1) == 0:  # a power of two: the old root is the first node
        proof.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn % 2 == 1:
        fn >>= 1
        sn >>= 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == root1 and sr == root2


@dataclass(frozen=True)
class LogDigest:
    """A commitment to the first ``size`` events (up to log ``position``)."""

    size: int
    position: int
    root: str  # hex

    def __str__(self) -> str:
        return f"{self.size}:{self.position}:{self.root}"

    @classmethod
    def parse(cls, text: str) -> LogDigest:
        """Read ``size:position:roothex`` as printed by ``str()``/``provledger digest``,
        or a signed head's JSON line (``provledger head``: ``{"tree_size": …,
        "position": …, "root": …, …}``), taken for the digest it signs (its signature
        is checked where heads are, ``verify(heads=…)``, not here).

        Raises:
            InvalidInputError: ``text`` is not such a digest (a ``ValueError`` too).
        """
        if not isinstance(text, str):
            raise InvalidInputError(f"a digest is text, got {type(text).__name__}")
        if text.lstrip().startswith("{"):
            return cls._of_head(text)
        parts = text.strip().split(":")
        if (
            len(parts) != 3
            or not (parts[0].isascii() and parts[0].isdigit())
            or not (parts[1].isascii() and parts[1].isdigit())
            or len(parts[2]) != 64
            or len(parts[0]) > 18
            or len(parts[1]) > 18
        ):
            raise InvalidInputError(f"digest {quoted(text)} is not size:position:<64 hex chars>")
        size, position = int(parts[0]), int(parts[1])
        try:
            bytes.fromhex(parts[2])
        except ValueError:
            raise InvalidInputError(
                f"digest {quoted(text)} is not size:position:<64 hex chars>"
            ) from None
        return cls(size=size, position=position, root=parts[2].lower())

    @classmethod
    def _of_head(cls, text: str) -> LogDigest:
        """The digest a head's JSON line signs (read as the heads file's lines are)."""
        from ledger.heads import SignedHead  # heads builds on this module

        try:
            return SignedHead.from_json(text).digest
        except (InvalidHeadError, RecursionError) as exc:
            raise InvalidInputError(
                f"digest {quoted(text)} is neither size:position:<64 hex chars> nor a head's "
                f"JSON line ({exc})"
            ) from None


@dataclass(frozen=True)
class Verification:
    """The outcome of verifying a ledger (see :func:`ledger.verification.verify`).

    ``problem`` is the first problem found (None when ``ok``), ``problems`` every
    one found (up to a limit), ``first_bad_position`` the log position of the
    first problem that has one. ``digest`` is the tree recomputed from the stored
    events; ``consistency_proof`` proves it extends the digest verified
    ``against``. ``checks`` names the checks that ran, ``heads`` counts the kept
    heads checked, ``unchecked`` names event types the authorization replay had
    no rule for (each such event is also a problem: no command writes them).
    ``failed_checks`` names the checks that found a problem, in report order
    (``("heads",)`` alone: the kept heads themselves do not verify with the given
    key, or are out of order, and nothing else was found). ``beyond`` counts the
    kept heads of a longer log than this one, not checked for consistency
    (``verify(older_copy=True)``: the ledger is a copy made before them).
    """

    ok: bool
    digest: LogDigest
    first_bad_position: int | None = None
    problem: str | None = None
    consistency_proof: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    heads: int = 0
    unchecked: tuple[str, ...] = ()
    failed_checks: tuple[str, ...] = ()
    beyond: int = 0


@dataclass(frozen=True)
class InclusionProof:
    """Proof that one stored event is leaf ``index`` of the tree with ``root``.

    ``leaf`` is the leaf's hash; ``leaf_data`` the bytes it hashes (position,
    aggregate, version, topic and the event's stored state), or None where they
    are withheld from the caller because the event names a record in a scope it
    holds no grant in (or by a key it is shown otherwise): the proof still
    shows the event is in the log, not what it says.
    """

    position: int
    index: int
    size: int
    leaf: str  # hex of the leaf hash
    leaf_data: str | None  # hex of the leaf's data, None when withheld
    path: tuple[str, ...]  # hex node hashes, leaf to root
    root: str

    def verify(
        self, trusted_root: str | bytes | LogDigest | None = None, *, size: int | None = None
    ) -> bool:
        """Check this proof with :func:`verify_inclusion` (and that ``leaf_data``,
        when given, hashes to ``leaf``). It proves inclusion in the tree whose root
        the proof itself carries: give ``trusted_root`` (a digest kept elsewhere,
        its root as hex, ``LogDigest.root``, or as the 32 bytes) to check that it
        is that tree. The tree's size is trusted as well: a ``LogDigest`` carries
        it; with a bare root give it as ``size``.

        Raises:
            InvalidInputError: ``trusted_root`` is none of those; or it is a bare
                root without ``size`` while the leaf's bytes are withheld (only
                the trusted size then tells a leaf from an inner node of the tree).
        """
        if trusted_root is not None and _root_hex(trusted_root) != self.root.lower():
            return False
        # The tree's size is part of what is trusted (RFC 9162 section 2.1.3.2 takes
        # tree_size from the signed head): a proof's own size is the prover's word,
        # and with another size an inner node of the trusted tree (its root, say)
        # passes for a leaf whose bytes are withheld. Leaf bytes that hash to the
        # leaf rule that out (a leaf's hash and a node's are domain-separated).
        trusted_size = trusted_root.size if isinstance(trusted_root, LogDigest) else size
        if size is not None and trusted_size != size:
            raise InvalidInputError(
                f"size {size} contradicts the trusted digest's tree of {trusted_size} leaves"
            )
        if trusted_size is not None and trusted_size != self.size:
            return False
        if trusted_root is not None and trusted_size is None and self.leaf_data is None:
            raise InvalidInputError(
                f"the proof of position {self.position} withholds its leaf's bytes, so a "
                "bare root cannot check it: give the trusted digest (a LogDigest, which "
                "carries the tree's size) or the tree's size as size="
            )
        leaf = bytes.fromhex(self.leaf)
        if self.leaf_data is not None and leaf_hash(bytes.fromhex(self.leaf_data)) != leaf:
            return False
        return verify_inclusion(
            leaf,
            self.index,
            self.size,
            [bytes.fromhex(p) for p in self.path],
            bytes.fromhex(self.root),
        )


def _root_hex(root: object) -> str:
    """A trusted root given as a digest, hex text or 32 bytes, as lower-case hex."""
    if isinstance(root, LogDigest):
        return root.root.lower()
    if isinstance(root, (bytes, bytearray)) and len(root) == 32:
        return bytes(root).hex()
    if isinstance(root, str) and len(root) == 64:
        try:
            value = bytes.fromhex(root)
        except ValueError:
            value = b""
        if len(value) == 32:
            return value.hex()
    raise InvalidInputError(
        f"trusted_root must be a LogDigest, 64 hex digits or 32 bytes, got {root!r:.80}"
    )
