"""Tamper evidence checked from the outside: an auditor's own verifier, written
from the RFC texts, against the trees, proofs, heads and bundles provledger makes.

Nothing here calls provledger's own verification to decide whether a proof or
a head is good: :func:`rfc_mth`, :func:`rfc_path` and :func:`rfc_proof` are RFC
6962 section 2.1's definitions, :func:`rfc_verify_inclusion` and
:func:`rfc_verify_consistency` RFC 9162 sections 2.1.3.2 and 2.1.4.2, step by
step, and the signed head's message is built from docs/evidence.md's words.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import sqlite3
import struct
import tracemalloc
import uuid
import zipfile
from collections.abc import Callable, Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack
import pytest
from click.testing import CliRunner
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ledger import Kind, Ledger, merkle
from ledger.bundle import verify_bundle, write_bundle
from ledger.bundle.archive import _signed_archive
from ledger.cli import main
from ledger.heads import SignedHead, generate_key, load_private_key, publish_head, sign_head
from ledger.serialization import pack, unpack

from .attacks import Scene, build_scene
from .conftest import Clock, World
from .test_bundle_truth import rewrite

# -- an auditor's verifier, from the RFC texts -------------------------------------------------


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def largest_power_of_two_smaller_than(n: int) -> int:
    """RFC 6962 section 2.1: k is the largest power of two smaller than n (n > 1)."""
    k = 1
    while k << 1 < n:
        k <<= 1
    return k


def rfc_mth(data: Sequence[bytes]) -> bytes:
    """RFC 6962 section 2.1, MTH(D[n]) over the leaves' *data* (not their hashes)."""
    if not data:
        return sha256(b"")
    if len(data) == 1:
        return sha256(b"\x00" + data[0])
    k = largest_power_of_two_smaller_than(len(data))
    return sha256(b"\x01" + rfc_mth(data[:k]) + rfc_mth(data[k:]))


def rfc_path(m: int, data: Sequence[bytes]) -> list[bytes]:
    """RFC 6962 section 2.1.1, PATH(m, D[n])."""
    if len(data) <= 1:
        return []
    k = largest_power_of_two_smaller_than(len(data))
    if m < k:
        return [*rfc_path(m, data[:k]), rfc_mth(data[k:])]
    return [*rfc_path(m - k, data[k:]), rfc_mth(data[:k])]


def rfc_proof(m: int, data: Sequence[bytes]) -> list[bytes]:
    """RFC 6962 section 2.1.2, PROOF(m, D[n]) = SUBPROOF(m, D[n], true)."""

    def subproof(m: int, d: Sequence[bytes], b: bool) -> list[bytes]:
        if m == len(d):
            return [] if b else [rfc_mth(d)]
        k = largest_power_of_two_smaller_than(len(d))
        if m <= k:
            return [*subproof(m, d[:k], b), rfc_mth(d[k:])]
        return [*subproof(m - k, d[k:], False), rfc_mth(d[:k])]

    return subproof(m, data, True)


def rfc_verify_inclusion(
    leaf_index: int, tree_size: int, leaf_hash: bytes, inclusion_path: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 section 2.1.3.2, its steps numbered as there."""
    # 1. If leaf_index is greater than or equal to tree_size, fail.
    if not 0 <= leaf_index < tree_size:
        return False
    # 2. Set fn to leaf_index and sn to tree_size - 1.  3. Set r to hash.
    fn, sn, r = leaf_index, tree_size - 1, leaf_hash
    # 4. For each value p in the inclusion_path array:
    for p in inclusion_path:
        # a. If sn is 0, stop the iteration and fail.
        if sn == 0:
            return False
        # b. If LSB(fn) is set, or if fn is equal to sn:
        if fn & 1 or fn == sn:
            r = sha256(b"\x01" + p + r)  # i.
            if not fn & 1:  # ii. shift until LSB(fn) is set or fn is 0
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = sha256(b"\x01" + r + p)  # otherwise
        # c. Right-shift both fn and sn one time.
        fn >>= 1
        sn >>= 1
    # 5. sn is 0 and r is the root.
    return sn == 0 and r == root


def rfc_verify_consistency(
    first: int, second: int, first_hash: bytes, second_hash: bytes, path: Sequence[bytes]
) -> bool:
    """RFC 9162 section 2.1.4.2 for 0 < first < second, its steps numbered as
    there; first == second is the same tree (an empty proof, equal roots)."""
    if first == second:
        return not path and first_hash == second_hash
    if not 0 < first < second:
        return False
    consistency_path = list(path)
    # 1. If consistency_path is an empty array, fail.
    if not consistency_path:
        return False
    # 2. If first is an exact power of 2, prepend first_hash.
    if first & (first - 1) == 0:
        consistency_path.insert(0, first_hash)
    # 3. Set fn to first - 1 and sn to second - 1.
    fn, sn = first - 1, second - 1
    # 4. If LSB(fn) is set, right-shift both until LSB(fn) is not set.
    while fn & 1:
        fn >>= 1
        sn >>= 1
    # 5. Set both fr and sr to the first value in the consistency_path array.
    fr = sr = consistency_path[0]
    # 6. For each subsequent value c in the consistency_path array:
    for c in consistency_path[1:]:
        if sn == 0:  # a.
            return False
        if fn & 1 or fn == sn:  # b.
            fr = sha256(b"\x01" + c + fr)
            sr = sha256(b"\x01" + c + sr)
            if not fn & 1:  # iii.
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = sha256(b"\x01" + sr + c)
        fn >>= 1  # c.
        sn >>= 1
    # 7. fr is first_hash, sr is second_hash and sn is 0.
    return fr == first_hash and sr == second_hash and sn == 0


def data_of(n: int) -> list[bytes]:
    return [f"entry {i}".encode() for i in range(n)]


def hashes_of(data: Sequence[bytes]) -> list[bytes]:
    return [sha256(b"\x00" + d) for d in data]


SIZES = range(1, 71)


def test_the_auditors_verifier_refuses_what_the_rfc_refuses() -> None:
    # Guard the guard: the independent verifier is not a yes-machine
    data = data_of(5)
    root, leaves = rfc_mth(data), hashes_of(data)
    assert rfc_verify_inclusion(2, 5, leaves[2], rfc_path(2, data), root)
    assert not rfc_verify_inclusion(2, 5, leaves[3], rfc_path(2, data), root)
    assert not rfc_verify_inclusion(5, 5, leaves[2], rfc_path(2, data), root)
    assert rfc_verify_consistency(3, 5, rfc_mth(data[:3]), root, rfc_proof(3, data))
    assert not rfc_verify_consistency(3, 5, rfc_mth(data[:3]), root, rfc_proof(2, data))
    assert not rfc_verify_consistency(3, 5, rfc_mth(data[:3]), root, [])
    # RFC 6962 section 2.1.3's examples, the tree of seven leaves d0 … d6: the
    # audit path of d3 is [c, g, l], and the consistency proofs from 3, 4 and 6
    # leaves are [c, d, g, l], [l] and [i, j, k]
    d = data_of(7)
    c, dd, j = (sha256(b"\x00" + d[x]) for x in (2, 3, 6))
    g, i, k, l_ = rfc_mth(d[0:2]), rfc_mth(d[4:6]), rfc_mth(d[0:4]), rfc_mth(d[4:7])
    assert rfc_path(3, d) == [c, g, l_]
    assert rfc_proof(3, d) == [c, dd, g, l_]
    assert rfc_proof(4, d) == [l_]
    assert rfc_proof(6, d) == [i, j, k]


@pytest.mark.parametrize("n", SIZES)
def test_every_root_is_the_rfc_6962_root(n: int) -> None:
    data = data_of(n)
    leaves = hashes_of(data)
    expected = rfc_mth(data)
    tree = merkle.MerkleTree(leaves)

    assert merkle.root_of(leaves) == (n, expected)
    assert tree.root() == expected
    for m in range(0, n + 1):  # every earlier size, from the one tree
        assert tree.root(m) == rfc_mth(data[:m])
    # leaf_data and leaf_hash are the RFC's leaf hashing of the given bytes
    assert merkle.leaf_hash(data[0]) == leaves[0]


@pytest.mark.parametrize("n", SIZES)
def test_every_inclusion_proof_verifies_by_rfc_9162_for_every_leaf(n: int) -> None:
    data = data_of(n)
    leaves, root = hashes_of(data), rfc_mth(data)
    tree = merkle.MerkleTree(leaves)
    _, one_pass = merkle.inclusion_paths(iter(leaves), n, range(n))

    for index in range(n):
        expected = rfc_path(index, data)
        made = {
            "inclusion_path": merkle.inclusion_path(leaves, index),
            "MerkleTree": tree.inclusion_path(index),
            "inclusion_paths": one_pass[index],
        }
        for how, path in made.items():
            assert path == expected, (how, n, index)
            assert rfc_verify_inclusion(index, n, leaves[index], path, root), (how, n, index)
        # and in every larger tree the one MerkleTree holds, for every earlier size
        for size in range(index + 1, n + 1):
            path = tree.inclusion_path(index, size)
            assert rfc_verify_inclusion(index, size, leaves[index], path, rfc_mth(data[:size]))


@pytest.mark.parametrize("n", SIZES)
def test_every_consistency_proof_verifies_by_rfc_9162_from_every_old_size(n: int) -> None:
    data = data_of(n)
    leaves, root = hashes_of(data), rfc_mth(data)
    tree = merkle.MerkleTree(leaves)

    for m in range(1, n + 1):
        expected = rfc_proof(m, data) if m < n else []
        one_pass_root, one_pass = merkle.consistency_proof(iter(leaves), n, m)
        made = {
            "consistency_path": merkle.consistency_path(leaves, m),
            "MerkleTree": tree.consistency_path(m),
            "consistency_proof": one_pass,
        }
        assert one_pass_root == root
        for how, proof in made.items():
            assert proof == expected, (how, n, m)
            assert rfc_verify_consistency(m, n, rfc_mth(data[:m]), root, proof), (how, n, m)
        # and between every two earlier sizes of the one tree
        for size in range(m, n + 1):
            proof = tree.consistency_path(m, size)
            assert rfc_verify_consistency(
                m, size, rfc_mth(data[:m]), rfc_mth(data[:size]), proof
            ), (m, size)


def _inclusion_tamperings(
    index: int, n: int, leaf: bytes, path: list[bytes], root: bytes
) -> list[tuple[int, int, bytes, list[bytes], bytes]]:
    """Every way of altering one inclusion proof the review tried."""
    other = sha256(b"\x00other")
    out = [
        (index, n, other, path, root),
        (index, n, leaf, path, sha256(b"another root")),
        (index, n, leaf, [*path, other], root),
        (index, n, leaf, [*path, root], root),
        (index, n + 1, leaf, path, root),
        (index, n - 1, leaf, path, root),
        (index + 1, n, leaf, path, root),
        (index - 1, n, leaf, path, root),
        (index ^ 1, n, leaf, path, root),
        (index + n, n, leaf, path, root),
        (-1, n, leaf, path, root),
    ]
    if path:
        out += [(index, n, leaf, path[:-1], root), (index, n, leaf, path[1:], root)]
        out += [(index, n, leaf, path[::-1], root)] if len(path) > 1 else []
        for i in range(len(path)):
            changed = list(path)
            changed[i] = bytes([path[i][0] ^ 1]) + path[i][1:]
            out.append((index, n, leaf, changed, root))
    return out


@pytest.mark.parametrize("n", SIZES)
def test_provledgers_inclusion_check_agrees_with_rfc_9162_on_altered_proofs(n: int) -> None:
    # provledger's verify_inclusion is what verify-bundle runs: for every altered
    # proof it must answer as the RFC's algorithm does (and that answer is no)
    data = data_of(n)
    leaves, root = hashes_of(data), rfc_mth(data)
    for index in range(n):
        path = rfc_path(index, data)
        assert merkle.verify_inclusion(leaves[index], index, n, path, root)
        for i, s, leaf, p, r in _inclusion_tamperings(index, n, leaves[index], path, root):
            ours = rfc_verify_inclusion(i, s, leaf, p, r)
            assert merkle.verify_inclusion(leaf, i, s, p, r) == ours, (n, index, i, s, len(p))
            if (s, r) == (n, root):
                # under the trusted size and root, no altered proof passes (with
                # another size some do: the size must be the signed head's)
                assert not ours, (n, index, i, len(p))


@pytest.mark.parametrize("n", SIZES)
def test_provledgers_consistency_check_agrees_with_rfc_9162_on_altered_proofs(n: int) -> None:
    data = data_of(n)
    root = rfc_mth(data)
    for m in range(1, n):
        old, proof = rfc_mth(data[:m]), rfc_proof(m, data)
        cases: list[tuple[int, int, bytes, bytes, list[bytes]]] = [
            (m, n, old, root, proof),
            (m, n, rfc_mth([b"forged", *data[1:m]]), root, proof),
            (m, n, old, rfc_mth([*data[:-1], b"forged"]), proof),
            (m + 1, n, old, root, proof),
            (m - 1, n, old, root, proof) if m > 1 else (m, n + 1, old, root, proof),
            (m, n + 1, old, root, proof),
            (m, n, old, root, proof[:-1]),
            (m, n, old, root, [*proof, root]),
            (m, n, old, root, [old, *proof]),
            (m, n, old, root, []),
        ]
        for i in range(len(proof)):
            changed = list(proof)
            changed[i] = bytes([proof[i][0] ^ 1]) + proof[i][1:]
            cases.append((m, n, old, root, changed))
        for first, second, h1, h2, p in cases:
            ours = rfc_verify_consistency(first, second, h1, h2, p)
            assert merkle.verify_consistency(first, second, h1, h2, p) == ours, (n, m, first)
        assert rfc_verify_consistency(m, n, old, root, proof)
        # under the trusted sizes, no altered proof or root passes
        assert not any(rfc_verify_consistency(*case) for case in cases[1:] if case[:2] == (m, n)), (
            n,
            m,
        )


# -- the live ledger's tree, its proofs and its signed heads, checked from outside --------------


def _stored_leaf_data(db: Path) -> list[bytes]:
    """What README says each leaf commits to, read straight from the SQLite file:
    the msgpack array [position, originator id (32 hex), version, topic, state]."""
    with closing(sqlite3.connect(db)) as con:
        rows = con.execute(
            "SELECT rowid, originator_id, originator_version, topic, state "
            "FROM stored_events ORDER BY rowid"
        ).fetchall()
    return [msgpack.packb([p, o, v, t, bytes(s)], use_bin_type=True) for p, o, v, t, s in rows]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_ledgers_digest_and_proofs_are_the_rfcs_over_its_stored_rows(
    world: World, ledger_url: str
) -> None:
    # Given a ledger of a few dozen events (sizes that are no power of two on the way)
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"doc", id="E1")
    reviewer.accept("E1")
    for i in range(12):
        agent.propose(scope="proj-a", claim_key=f"k{i}", value=i, kind=Kind.FACT, parents=["E1"])
    agent.propose(scope="proj-a", claim_key="m", value=1, kind=Kind.FACT, parents=["E1"], id="M1")
    reviewer.accept("M1")
    reviewer.revoke("E1", reason="page changed")
    db = Path(ledger_url.removeprefix("sqlite:///"))

    # When the auditor computes the tree from the rows themselves
    data = _stored_leaf_data(db)
    digest = world.ledger.digest()

    # Then the ledger's digest is the RFC 6962 root over them, and every proof of
    # M1's events verifies by RFC 9162 against that digest's size and root
    assert (digest.size, digest.position) == (len(data), len(data))
    assert digest.root == rfc_mth(data).hex()
    proofs = reviewer.prove("M1")
    assert [p.type for p in reviewer.audit("M1").events] and len(proofs) == 3
    for proof in proofs:
        assert proof.leaf_data is not None
        leaf = sha256(b"\x00" + bytes.fromhex(proof.leaf_data))
        assert proof.leaf == leaf.hex() and bytes.fromhex(proof.leaf_data) == data[proof.index]
        path = [bytes.fromhex(p) for p in proof.path]
        assert rfc_verify_inclusion(proof.index, digest.size, leaf, path, rfc_mth(data))


#: Ed25519's SubjectPublicKeyInfo in DER is this prefix and the 32-byte key (RFC 8410).
ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")


def documented_message(size: int, position: int, time: datetime, root_hex: str) -> bytes:
    """docs/evidence.md: b"provledger tree head v1\\n" || uint64 tree_size ||
    uint64 position || int64 µs since the epoch (UTC) || root, big-endian."""
    micros = (time - datetime(1970, 1, 1, tzinfo=UTC)) // datetime.resolution
    return (
        b"provledger tree head v1\n"
        + struct.pack(">QQq", size, position, micros)
        + bytes.fromhex(root_hex)
    )


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_signed_head_is_the_documented_message_under_any_ed25519_library(
    world: World, tmp_path: Path
) -> None:
    # Given a head of the ledger, signed with a key from keygen
    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="F1")
    generate_key(tmp_path / "k")
    head = world.ledger.signed_head(tmp_path / "k")
    line = json.loads(head.dumps())

    # When an auditor checks it from the JSON line alone, with the raw public key
    raw = load_private_key(tmp_path / "k").public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    public = Ed25519PublicKey.from_public_bytes(raw)
    time = datetime.fromisoformat(line["time"])
    message = documented_message(line["tree_size"], line["position"], time, line["root"])
    signature = base64.b64decode(line["signature"], validate=True)

    # Then the signature covers exactly those 80 bytes (fixed widths: no two heads
    # share a message), the key id is SHA-256 of the key's DER SubjectPublicKeyInfo,
    # and the head states the ledger's digest
    assert len(message) == 24 + 8 + 8 + 8 + 32 and head.message() == message
    public.verify(signature, message)
    assert line["key_id"] == hashlib.sha256(ED25519_SPKI_PREFIX + raw).hexdigest()
    assert head.digest == world.ledger.digest()
    # and changing any one signed field makes it fail
    for changed in (
        documented_message(line["tree_size"] + 1, line["position"], time, line["root"]),
        documented_message(line["tree_size"], line["position"] + 1, time, line["root"]),
        documented_message(line["tree_size"], line["position"], time.replace(microsecond=1), "")
        + bytes.fromhex(line["root"]),
        documented_message(line["tree_size"], line["position"], time, "00" * 32),
    ):
        with pytest.raises(InvalidSignature):
            public.verify(signature, changed)


def test_what_one_key_signs_is_separated_by_its_context() -> None:
    # The ledger's key signs heads, manifests and archives: no context is a prefix
    # of another, so no signature of one can pass for one of another
    from ledger.bundle import archive
    from ledger.heads import HEAD_CONTEXT

    contexts = [HEAD_CONTEXT, archive._MANIFEST_CONTEXT, archive._CONTAINER_CONTEXT]
    assert len(set(contexts)) == 3
    for a in contexts:
        assert a.endswith(b"\n") and a.startswith(b"provledger ")
        assert not any(b != a and b.startswith(a) for b in contexts)


# -- bundles: what a forger (or a careless key holder) cannot pass off ----------------------


@pytest.fixture
def bundled(world: World, tmp_path: Path) -> tuple[Path, Path]:
    """E1 <- M1 <- R1, all accepted; M1 with conditions, an expiry and a value of
    most kinds; R1's bundle (``r1.zip``) and the key ``k`` in ``tmp_path``."""
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"retries ok", id="E1")
    agent.propose(
        scope="proj-a",
        claim_key="api.retry",
        value={"ok": True, "n": 3, "x": 0.5, "raw": b"\x00\xff", "note": "délai ≤ 3 s"},
        kind=Kind.INFERENCE,
        parents=["E1"],
        expires=datetime(2099, 1, 1, 12, 30, 0, 250, tzinfo=UTC),
        conditions={"env": "prod"},
        id="M1",
    )
    agent.propose(
        scope="proj-a", claim_key="report.w", value="on", kind=Kind.REPORT, parents=["M1"], id="R1"
    )
    for rid in ("E1", "M1", "R1"):
        reviewer.accept(rid)
    generate_key(tmp_path / "k")
    generate_key(tmp_path / "other")
    write_bundle(reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    return tmp_path / "r1.zip", tmp_path


def tree_size(path: Path) -> int:
    """The tree size of the head a bundle carries."""
    return int(json.loads(zipfile.ZipFile(path).read("head.json"))["tree_size"])


def both(path: Path, tmp_path: Path) -> list[tuple[str, ...]]:
    """The problems verify-bundle names, with the key it carries and pinned."""
    return [verify_bundle(path).problems, verify_bundle(path, tmp_path / "k.pub").problems]


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_bundles_head_and_proofs_verify_by_the_rfc_and_the_documented_message(
    bundled: tuple[Path, Path],
) -> None:
    path, tmp_path = bundled
    archive = zipfile.ZipFile(path)
    manifest = json.loads(archive.read("manifest.json"))
    head = json.loads(archive.read("head.json"))
    public = Ed25519PublicKey.from_public_bytes(
        load_private_key(tmp_path / "k").public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    )
    time = datetime.fromisoformat(head["time"])
    message = documented_message(head["tree_size"], head["position"], time, head["root"])
    public.verify(base64.b64decode(head["signature"]), message)
    carried = [e for e in manifest["events"] if e["file"] is not None]
    assert len(carried) == len(manifest["events"]) == 6
    for entry in carried:
        leaf = sha256(b"\x00" + archive.read(entry["file"]))
        assert entry["leaf"] == leaf.hex()
        path_ = [bytes.fromhex(p) for p in entry["path"]]
        root = bytes.fromhex(head["root"])
        assert rfc_verify_inclusion(entry["index"], head["tree_size"], leaf, path_, root)
    assert verify_bundle(path, tmp_path / "k.pub").ok


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_head_signed_by_another_key_fails_though_the_rest_is_signed_by_the_bundles(
    bundled: tuple[Path, Path],
) -> None:
    path, tmp_path = bundled

    def other_head(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        head = SignedHead.from_json(manifest["head"])
        forged = sign_head(tmp_path / "other", head.digest, head.time)
        manifest["head"] = forged.to_json()
        files["head.json"] = (json.dumps(forged.to_json(), indent=2) + "\n").encode()

    forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", other_head)

    for problems in both(forged, tmp_path):
        assert problems == (f"the signed head (tree size {tree_size(path)}) does not verify",)


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_public_key_swapped_with_the_signatures_it_can_make_fails_on_the_head(
    bundled: tuple[Path, Path],
) -> None:
    path, tmp_path = bundled

    # Given the forger's key in public_key.pem and the manifest, manifest and
    # archive signed with it, and the head (which it cannot sign) kept
    def swap(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        files["public_key.pem"] = (tmp_path / "other.pub").read_bytes()
        other = load_private_key(tmp_path / "other").public_key()
        raw = other.public_bytes(Encoding.Raw, PublicFormat.Raw)
        manifest["key_id"] = hashlib.sha256(ED25519_SPKI_PREFIX + raw).hexdigest()

    forged = rewrite(path, tmp_path / "other", tmp_path / "forged.zip", swap)

    # Then even an auditor who pinned no key is told the head does not verify
    own, pinned = both(forged, tmp_path)
    assert own == (f"the signed head (tree size {tree_size(path)}) does not verify",)
    assert pinned[0].startswith("the bundle was signed by key ") and pinned[1:] == own


def _event_file(manifest: dict[str, Any], record: str, kind: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        e for e in manifest["events"] if (e["record"], e["type"]) == (record, kind)
    ]
    (entry,) = found
    return entry


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_altered_event_bytes_with_their_leaf_recomputed_are_not_in_the_signed_tree(
    bundled: tuple[Path, Path],
) -> None:
    path, tmp_path = bundled

    # Given R1's acceptance rewritten (another approver) by the key holder, its
    # leaf hash recomputed and everything re-signed, but the head kept
    def alter(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        entry = _event_file(manifest, "R1", "Accepted")
        stored = msgpack.unpackb(files[entry["file"]], raw=False)
        stored[4] = stored[4].replace(b"reviewer", b"reviewex")
        files[entry["file"]] = msgpack.packb(stored, use_bin_type=True)
        entry["leaf"] = sha256(b"\x00" + files[entry["file"]]).hex()

    forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", alter)

    for problems in both(forged, tmp_path):
        assert problems[0].startswith("the Accepted event at position ")
        assert problems[0].endswith(" is not in the signed head's tree (its inclusion proof fails)")


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
@pytest.mark.parametrize("how", ["index", "paths swapped", "path cut short"])
def test_a_proof_for_another_index_or_of_another_event_fails(
    bundled: tuple[Path, Path], how: str
) -> None:
    path, tmp_path = bundled

    def misplace(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        first, second = manifest["events"][:2]
        if how == "index":
            first["index"] += 1
        elif how == "paths swapped":
            first["path"], second["path"] = second["path"], first["path"]
        else:
            first["path"] = first["path"][:-1]

    forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", misplace)

    for problems in both(forged, tmp_path):
        assert any(p.endswith("(its inclusion proof fails)") for p in problems)
        # (a leaf moved past its position, or the next event's, is out of the log's order)
        assert all(
            p.endswith("is not in the signed head's tree (its inclusion proof fails)")
            or p.endswith(": leaves follow the log's order")
            or p.endswith("at most (one leaf per event, in order)")
            for p in problems
        ), problems


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_the_order_of_the_listed_events_carries_nothing_and_a_gap_in_them_is_named(
    bundled: tuple[Path, Path],
) -> None:
    path, tmp_path = bundled

    def reverse(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        manifest["events"].reverse()

    def gap(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        entry = _event_file(manifest, "M1", "Proposed")
        manifest["events"].remove(entry)
        del files[entry["file"]]

    # A manifest listing the events backwards states the same (every check reads
    # positions, not the list's order); one leaving out M1's proposal is refused
    reordered = verify_bundle(rewrite(path, tmp_path / "k", tmp_path / "r.zip", reverse))
    assert reordered.ok and reordered.events == verify_bundle(path).events == 6
    report = verify_bundle(rewrite(path, tmp_path / "k", tmp_path / "g.zip", gap))
    manifest = json.loads(zipfile.ZipFile(path).read("manifest.json"))
    accepted = _event_file(manifest, "M1", "Accepted")["position"]
    assert report.problem == (
        "the events the bundle lists for 'M1' do not start with its proposal (the first is "
        f"Accepted at position {accepted})"
    )


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_an_altered_prov_document_fails_on_its_digest_and_the_archives_signature(
    bundled: tuple[Path, Path],
) -> None:
    path, tmp_path = bundled
    # Given R1's value restated in prov.json, the archive put together again as
    # the writer does (the manifest and its signature untouched)
    members = {n: zipfile.ZipFile(path).read(n) for n in zipfile.ZipFile(path).namelist()}
    prov = json.loads(members["prov.json"])
    prov["entity"]["rec:R1"]["pl:value"] = '"off"'
    members["prov.json"] = json.dumps(prov).encode()
    out = tmp_path / "altered.zip"
    for signer in ("k", "other"):  # the archive signed by the ledger's key, or not
        out.write_bytes(_signed_archive(members, load_private_key(tmp_path / signer)))

        # Then the manifest's digest of it no longer matches
        for problems in both(out, tmp_path):
            assert problems[0] == "prov.json was altered: its SHA-256 does not match the manifest"
            assert (
                "prov.json states R1's pl:value as '\"off\"', but its proposal says '\"on\"'"
                in problems
            )


def _prov_entity(files: dict[str, bytes], rid: str, attr: str, value: Any) -> None:
    prov = json.loads(files["prov.json"])
    prov["entity"][f"rec:{rid}"][attr] = value
    files["prov.json"] = json.dumps(prov).encode()


#: What prov.json states of a record that its proposal alone decides, and a
#: forger's version of it: (record, attribute, forged value, what the check names).
PROV_FORGERIES = [
    ("R1", "pl:value", '"off"', "'\"off\"', but its proposal says '\"on\"'"),
    ("M1", "pl:value", '{"ok": false}', 'its proposal says \'{"n": 3,'),
    ("M1", "pl:conditions", '{"env": "test"}', 'its proposal says \'{"env": "prod"}\''),
    (
        "M1",
        "pl:expires",
        {"$": "2100-01-01T12:30:00.000250+00:00", "type": "xsd:dateTime"},
        "its proposal says '2099-01-01T12:30:00.000250+00:00'",
    ),
    (
        "E1",
        "pl:fetchedAt",
        {"$": "2020-01-01T00:00:00+00:00", "type": "xsd:dateTime"},
        "'2020-01-01T00:00:00+00:00', but its proposal says '",
    ),
    ("E1", "pl:size", {"$": "999", "type": "xsd:int"}, "'999', but its proposal says '10'"),
    ("M1", "prov:label", "M2", "'M2', but its proposal says 'M1'"),
    ("R1", "pl:expires", {"$": "2030-01-01T00:00:00+00:00", "type": "xsd:dateTime"}, "'None'"),
]


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
@pytest.mark.parametrize(("rid", "attr", "value", "named"), PROV_FORGERIES)
def test_a_re_signed_prov_document_cannot_restate_what_a_proposal_says(
    bundled: tuple[Path, Path], rid: str, attr: str, value: Any, named: str
) -> None:
    path, tmp_path = bundled
    assert verify_bundle(path, tmp_path / "k.pub").ok  # the honest one, every kind of value

    # Given prov.json restating one thing a record's carried proposal decides,
    # re-signed by whoever holds the ledger's key
    forged = rewrite(
        path,
        tmp_path / "k",
        tmp_path / "forged.zip",
        lambda _manifest, files: _prov_entity(files, rid, attr, value),
    )

    report = verify_bundle(forged, tmp_path / "k.pub")

    # Then the check names the record, the attribute and what its proposal says
    assert not report.ok
    assert report.problems == (report.problem,)
    assert report.problem is not None
    assert report.problem.startswith(f"prov.json states {rid}'s {attr} as "), report.problem
    assert named in report.problem, report.problem


@pytest.mark.parametrize(
    "value",
    [1, "on", None, [1, "a"], {"b": 1, "a": [True, 0.25]}, b"\x00\xff", "é ≤ 😀", 2**63, -0.0],
)
def test_a_value_reads_back_from_its_json_text_as_the_export_states_it(value: Any) -> None:
    # The one text the export writes and the verifier compares (ledger.jsonable)
    from ledger.jsonable import value_text

    text = value_text(value)
    back = json.loads(text)
    if isinstance(value, bytes):
        assert back == {"base64": base64.b64encode(value).decode()}
    else:
        assert back == value and (not isinstance(value, float) or str(back) == str(value))
    assert text == json.dumps(back, sort_keys=True, ensure_ascii=False)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_is_refused_when_the_views_change_a_records_conditions(
    bundled: tuple[Path, Path], world: World, ledger_url: str
) -> None:
    _path, tmp_path = bundled
    # Given M1's conditions edited in the views behind the ledger's back
    with closing(sqlite3.connect(ledger_url.removeprefix("sqlite:///"))) as con:
        con.execute(
            "UPDATE pl_records SET conditions = ? WHERE record_id = 'M1' AND to_pos IS NULL",
            (msgpack.packb({"env": "test"}),),
        )
        con.commit()
    assert world.reviewer.get("M1").conditions == {"env": "test"}

    # Then no bundle states them: the writer refuses, naming M1
    with pytest.raises(Exception, match="about 'M1': they show its conditions as") as refused:
        write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "again.zip")
    assert type(refused.value).__name__ == "CorruptEventError"
    assert not (tmp_path / "again.zip").exists()


# -- zip tricks ----------------------------------------------------------------------------


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_duplicate_member_and_a_path_outside_are_named_and_nothing_is_extracted(
    bundled: tuple[Path, Path],
) -> None:
    path, tmp_path = bundled
    twice, outside = tmp_path / "twice.zip", tmp_path / "outside.zip"
    shutil.copy(path, twice)
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(twice, "a") as out:
        out.writestr("summary.txt", "status:    ACCEPTED / VALID\n")
    shutil.copy(path, outside)
    escape = "../" * 12 + f"{tmp_path.relative_to(tmp_path.anchor)}/escaped.txt"
    with zipfile.ZipFile(outside, "a") as out:
        out.writestr(escape, "x")

    assert verify_bundle(twice, tmp_path / "k.pub").problem == (
        "the archive holds summary.txt more than once"
    )
    assert verify_bundle(outside, tmp_path / "k.pub").problem == (
        f"{escape} is not listed in the manifest: it was added"
    )
    assert not (tmp_path / "escaped.txt").exists()


def with_zeros(
    src: Path,
    out: Path,
    name: str,
    mib: int,
    declare: int | None = None,
    method: int = zipfile.ZIP_DEFLATED,
) -> Path:
    """``src`` with a member ``name`` of ``mib`` MiB of zeros (packed a thousand
    times smaller, or more); with ``declare``, its sizes in the archive say that
    many bytes."""
    shutil.copy(src, out)
    with zipfile.ZipFile(out, "a") as archive:
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = method
        with archive.open(info, "w") as member:
            zeros = bytes(1 << 20)
            for _ in range(mib):
                member.write(zeros)
    if declare is not None:
        data = bytearray(out.read_bytes())
        archive = zipfile.ZipFile(io.BytesIO(bytes(data)))
        local = archive.getinfo(name).header_offset
        struct.pack_into("<I", data, local + 22, declare)  # the local header's size
        central = data.index(b"PK\x01\x02", archive.start_dir)
        while data[central + 46 : central + 46 + len(name)] != name.encode():
            central = data.index(b"PK\x01\x02", central + 4)
        struct.pack_into("<I", data, central + 24, declare)  # the central directory's
        out.write_bytes(bytes(data))
    return out


def peak_memory_of(check: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = check()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_member_that_unpacks_to_hundreds_of_megabytes_is_refused_unpacked(
    bundled: tuple[Path, Path],
) -> None:
    path, tmp_path = bundled
    # Given a bundle of under a megabyte holding a member of 300 MiB of zeros
    bomb = with_zeros(path, tmp_path / "bomb.zip", "events/pad.bin", 300)
    assert bomb.stat().st_size < 1 << 20

    # When it is verified
    report, peak = peak_memory_of(lambda: verify_bundle(bomb, tmp_path / "k.pub"))

    # Then it is refused, naming the member, with next to nothing held
    assert report.problem.startswith(f"{bomb} is not a bundle: its members would unpack to ")
    assert "('events/pad.bin' alone to 314572800)" in report.problem
    assert peak < 16 << 20, peak


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_member_that_unpacks_to_more_than_it_declares_is_never_unpacked_whole(
    bundled: tuple[Path, Path],
) -> None:
    path, tmp_path = bundled
    # Given a member of 100 MiB of zeros whose sizes say 1000 bytes
    liar = with_zeros(path, tmp_path / "liar.zip", "events/pad.bin", 100, declare=1000)

    report, peak = peak_memory_of(lambda: verify_bundle(liar, tmp_path / "k.pub"))

    # Then it is named as altered, and no more than a chunk of it was unpacked
    assert report.problem.startswith(
        "events/pad.bin cannot be read from the archive: it was altered (BadZipFile: Bad CRC-32"
    )
    assert peak < 16 << 20, peak


# -- an insider with write access to the SQLite file ---------------------------------------


@pytest.fixture
def scene(open_ledger: Callable[..., Ledger], tmp_path: Path, clock: Clock) -> Scene:
    """tests/attacks.py's scene: two heads kept elsewhere, the second after E1's revocation."""
    return build_scene(open_ledger(), tmp_path, clock)


def cli(url: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env={"PROVLEDGER_URL": url})
    return result.exit_code, result.stdout, result.stderr


def verify_cli(scene: Scene, heads: bool, *more: str) -> tuple[int, str, str]:
    kept = ["--heads", str(scene.heads), "--public-key", str(scene.public_key)] if heads else []
    return cli(scene.ledger.url, "verify", *kept, *more)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_ledger_rolled_back_to_an_older_backup_is_caught_by_a_head_kept_since(
    scene: Scene, tmp_path: Path, ledger_url: str
) -> None:
    # Given a backup taken, then F1 accepted and a third head kept
    url = scene.ledger.url
    assert cli(url, "backup", str(tmp_path / "copy.db"))[0] == 0
    scene.reviewer.accept("F1")
    scene.ledger.admin().issue_token("agent-1")
    publish_head(scene.ledger, scene.key, scene.heads)
    newest = SignedHead.from_json(scene.heads.read_text().splitlines()[-1])
    scene.ledger.close()

    # When the insider puts the backup in the ledger's place
    db = Path(ledger_url.removeprefix("sqlite:///"))
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copy(tmp_path / "copy.db", db)

    # Then the log verifies on its own (nothing in it tells) but not against the
    # heads: the newest describes events that are gone; no head is appended over it
    code, out, _ = verify_cli(scene, heads=False)
    assert code == 0 and out.startswith("ok: ")
    code, _, err = verify_cli(scene, heads=True)
    assert code == 1
    assert err.startswith("error: tampering detected: the log has ")
    assert f"head 3 (tree size {newest.tree_size}, signed " in err
    assert err.rstrip().endswith(
        "events were removed after it was taken (or the ledger was restored from an older "
        "backup; a copy made before it: older_copy=True, --older-copy on the command line)"
    )
    code, _, err = cli(url, "head", "--key", str(scene.key), "--append", str(scene.heads))
    assert code == 1 and "events were removed after it was taken" in err
    assert "--older-copy" not in err  # (appending a head: no copy is checked)
    # An auditor's copy made before the newest head is checked with --older-copy:
    # the heads it reaches are checked, the newest counted, not checked
    code, out, err = verify_cli(scene, True, "--older-copy")
    size = int(out.split()[1].split(":")[0])
    assert code == 0 and "; consistent with 2 signed heads (" in out, (out, err)
    assert err == (
        f"1 kept head describes a longer log than this copy's {size} events: not "
        "checked (--older-copy)\n"
    )
    code, out, _ = verify_cli(scene, True, "--older-copy", "--json")
    assert code == 0 and json.loads(out)["heads_beyond"] == 1
    assert json.loads(out)["heads"] == 2
    # (the flag is about kept heads: alone it is a usage error)
    assert verify_cli(scene, False, "--older-copy")[0] == 2

    # Once the rolled-back ledger is written to, still short of the newest head, it
    # is no copy made before that head: an event of it is younger than the head
    with Ledger.open(url) as led:
        led.authenticate(scene.reviewer_token).accept("F1")
        written = led.position
        assert led.digest().size < newest.tree_size
    code, _, err = verify_cli(scene, True, "--older-copy")
    assert code == 1, err
    assert (
        f"head 3 (tree size {newest.tree_size}, signed {newest.time.isoformat()}) describes "
        f"{newest.tree_size} events, more than the log's "
    ) in err
    assert f"yet its event at position {written} was written at " in err
    assert "it is no copy made before the head" in err

    # and once the rolled-back ledger has grown past the newest head, it no
    # longer extends it: rewritten after it was taken
    with Ledger.open(url) as led:
        reviewer = led.authenticate(scene.reviewer_token)
        reviewer.accept("G1")
        assert led.digest().size >= newest.tree_size
    code, _, err = verify_cli(scene, heads=True)
    assert code == 1
    assert f"do not match head 3 (tree size {newest.tree_size}" in err
    assert err.rstrip().endswith(
        "the log was rewritten after it was taken (or restored from an older backup, then "
        "written to)"
    )
    # which --older-copy does not pass either: the head is within the log now
    code, _, err = verify_cli(scene, True, "--older-copy")
    assert code == 1 and f"do not match head 3 (tree size {newest.tree_size}" in err


def test_an_older_copy_written_to_within_the_clock_skew_of_a_later_head_passes(
    tmp_path: Path,
) -> None:
    from datetime import timedelta

    # Given a live ledger, a copy of it, and a head signed after the copy
    now = [datetime(2026, 6, 1, 12, 0, tzinfo=UTC)]
    live = tmp_path / "live.db"
    generate_key(tmp_path / "k")
    with Ledger.open(f"sqlite:///{live}", clock=lambda: now[0]) as led:
        led.admin().grant("agent", "s", ["propose", "read"])
    shutil.copy(live, tmp_path / "copy.db")
    with Ledger.open(f"sqlite:///{live}", clock=lambda: now[0]) as led:
        for _ in range(3):
            led.admin().issue_token("agent")
        head = led.signed_head(tmp_path / "k")
    copy = f"sqlite:///{tmp_path / 'copy.db'}"

    def written(after: timedelta) -> Any:
        with Ledger.open(copy, clock=lambda: head.time + after) as led:
            led.admin().issue_token("agent")
            assert led.digest().size < head.tree_size
            return led.verify(heads=[head], public_key=tmp_path / "k.pub", older_copy=True)

    # When the copy's writer's clock runs 2 s ahead of the signer's: still a copy
    kept = written(timedelta(seconds=2))
    assert kept.ok and kept.beyond == 1, kept
    # but an event written 10 minutes after the head was signed: a log cut back
    forked = written(timedelta(minutes=10))
    assert not forked.ok and "more than 5 minutes after that head was signed" in (
        forked.problem or ""
    ), forked


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("attack", ["cut", "rewritten"])
def test_events_after_the_newest_kept_head_are_protected_by_no_head_as_documented(
    scene: Scene, attack: str
) -> None:
    # Given two events after the newest kept head (F1 and G1 accepted)
    scene.reviewer.accept("F1")
    scene.reviewer.accept("G1")
    rows = scene.raw.one(
        "SELECT POS, originator_id, originator_version, topic, state FROM EVENTS "
        "ORDER BY POS DESC LIMIT 2"
    )
    newest = SignedHead.from_json(scene.heads.read_text().splitlines()[-1])
    assert min(int(r[0]) for r in rows) > newest.position

    # When the insider cuts them off, or rewrites G1's acceptance note, with
    # their leaves, and rebuilds the views
    if attack == "cut":
        positions = [int(r[0]) for r in rows]
        scene.raw.run(
            ("DELETE FROM EVENTS WHERE POS IN (?, ?)", positions),
            ("DELETE FROM pl_merkle_leaves WHERE position IN (?, ?)", positions),
            ("DELETE FROM pl_commits WHERE last_pos IN (?, ?)", positions),
        )
    else:
        position, oid, version, topic, state = rows[0]
        fields = unpack(bytes(state))
        fields["note"] = "checked twice"
        forged = pack(fields)
        leaf = merkle.leaf_hash(merkle.leaf_data(int(position), oid, version, topic, forged))
        scene.raw.run(
            ("UPDATE EVENTS SET state=? WHERE POS=?", (forged, position)),
            ("UPDATE pl_merkle_leaves SET leaf=? WHERE position=?", (leaf, position)),
        )
    scene.ledger.rebuild()

    # Then every check passes, the kept heads' included: what docs/evidence.md
    # says of anything after the newest head (sign heads often)
    code, out, _ = verify_cli(scene, heads=True)
    assert code == 0, out
    assert "; consistent with 2 signed heads (heads, log, consistency" in out
    if attack == "rewritten":
        assert [e.details.get("note") for e in scene.reviewer.audit("G1").events][-1] == (
            "checked twice"
        )


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_a_member_packed_otherwise_than_a_bundles_is_refused_unpacked(
    bundled: tuple[Path, Path], method: int
) -> None:
    path, tmp_path = bundled
    # Given 64 MiB of zeros packed with bzip2 or LZMA (which unpack a chunk whole,
    # whatever size the member declares), its sizes saying 1000 bytes
    packed = with_zeros(path, tmp_path / "packed.zip", "events/pad.bin", 64, 1000, method)

    report, peak = peak_memory_of(lambda: verify_bundle(packed, tmp_path / "k.pub"))

    assert report.problem == (
        f"{packed} is not a bundle: its member 'events/pad.bin' is packed with zip method "
        f"{method}, and a bundle's members are deflated; nothing in it was unpacked"
    )
    assert peak < 16 << 20, peak


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_carried_bytes_holding_a_value_json_cannot_are_named_not_a_traceback(
    bundled: tuple[Path, Path],
) -> None:
    path, tmp_path = bundled

    # Given M1's proposal rewritten to hold a UUID as its value (a type no value
    # has), its leaf recomputed, everything re-signed
    def uuid_value(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        entry = _event_file(manifest, "M1", "Proposed")
        stored = msgpack.unpackb(files[entry["file"]], raw=False)
        fields = unpack(stored[4])
        fields["value"] = uuid.UUID(int=7)
        stored[4] = pack(fields)
        files[entry["file"]] = msgpack.packb(stored, use_bin_type=True)
        entry["leaf"] = sha256(b"\x00" + files[entry["file"]]).hex()

    forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", uuid_value)

    report = verify_bundle(forged, tmp_path / "k.pub")

    assert report.problems[0].startswith("the Proposed event at position ")
    assert any(
        p.startswith("prov.json states M1's pl:value as ")
        and p.endswith("but its proposal says '<a value with no JSON text: UUID>'")
        for p in report.problems
    ), report.problems


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_signing_key_other_users_may_read_is_used_with_a_warning(scene: Scene) -> None:
    # Given the signing key as keygen wrote it (0600), then opened to others
    url, key = scene.ledger.url, str(scene.key)
    os.chmod(key, 0o600)
    code, out, err = cli(url, "head", "--key", key)
    assert (code, err) == (0, "") and SignedHead.from_json(out).tree_size > 0
    os.chmod(key, 0o644)

    # When a head is signed with it
    code, out, err = cli(url, "head", "--key", key)

    # Then it is signed, and stderr says who may read the key and what to do
    assert code == 0 and SignedHead.from_json(out).tree_size > 0
    assert err == (
        f"warning: the signing key {key} may be read by other users (mode 0644), and "
        f"whoever reads it can sign heads over a rewritten log: chmod 600 {key}\n"
    )
