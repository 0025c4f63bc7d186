"""Tamper evidence: the RFC 6962 Merkle tree over the log detects every change."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import Kind, Ledger, merkle, serialization
from ledger.bundle import write_bundle
from ledger.errors import CorruptEventError, InvalidInputError
from ledger.graph import collect, revocations
from ledger.persistence import base as persistence_base

from .conftest import World, aggregate_of


def naive_root(leaves: Sequence[bytes]) -> bytes:
    """RFC 6962 MTH written straight from its definition."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + naive_root(leaves[:k]) + naive_root(leaves[k:])).digest()


def leaves_of(n: int) -> list[bytes]:
    return [merkle.leaf_hash(f"event {i}".encode()) for i in range(n)]


@pytest.mark.parametrize("n", range(0, 34))
def test_streaming_root_equals_the_rfc_6962_definition(n: int) -> None:
    leaves = leaves_of(n)
    assert merkle.root_of(leaves) == (n, naive_root(leaves))


@pytest.mark.parametrize("n", range(1, 26))
def test_every_inclusion_proof_verifies_and_a_wrong_one_does_not(n: int) -> None:
    leaves = leaves_of(n)
    root = naive_root(leaves)
    for index in range(n):
        path = merkle.inclusion_path(leaves, index)
        assert merkle.verify_inclusion(leaves[index], index, n, path, root)
        other = leaves[(index + 1) % n] if n > 1 else merkle.leaf_hash(b"x")
        assert not merkle.verify_inclusion(other, index, n, path, root)


@pytest.mark.parametrize("n", range(1, 20))
def test_every_consistency_proof_verifies_and_a_changed_prefix_does_not(n: int) -> None:
    leaves = leaves_of(n)
    for m in range(1, n + 1):
        path = merkle.consistency_path(leaves, m)
        assert merkle.verify_consistency(m, n, naive_root(leaves[:m]), naive_root(leaves), path)
        forged = [merkle.leaf_hash(b"forged"), *leaves[1:m]]
        assert not merkle.verify_consistency(m, n, naive_root(forged), naive_root(leaves), path)


def test_a_consistency_proof_from_the_empty_tree_needs_its_fixed_root() -> None:
    # RFC 6962 section 2.1: the empty tree's root is SHA-256 of nothing.
    leaves = leaves_of(5)
    bogus = b"\x42" * 32
    assert merkle.verify_consistency(0, 5, merkle.EMPTY_ROOT, naive_root(leaves), [])
    assert merkle.verify_consistency(0, 0, merkle.EMPTY_ROOT, merkle.EMPTY_ROOT, [])
    assert not merkle.verify_consistency(0, 5, bogus, naive_root(leaves), [])
    assert not merkle.verify_consistency(0, 0, bogus, bogus, [])


@given(
    st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=2**62),
            st.one_of(st.uuids(), st.uuids().map(lambda u: u.hex)),
            st.integers(min_value=1, max_value=2**31),
            st.text(max_size=40),
            st.binary(max_size=200),
        ),
        max_size=20,
    )
)
def test_leaves_of_a_batch_are_each_rows_leaf(rows: list[Any]) -> None:
    # A rebuild checks a batch of rows at once: each leaf as one row's alone.
    expected = [merkle.leaf_hash(merkle.leaf_data(*row)) for row in rows]
    assert list(merkle.leaf_hashes(rows)) == expected
    assert list(merkle.leaf_hashes([(p, o, v, t, memoryview(s)) for p, o, v, t, s in rows])) == (
        expected
    )


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=2, max_value=200), st.data())
def test_consistency_holds_for_random_sizes(n: int, data: st.DataObject) -> None:
    m = data.draw(st.integers(min_value=1, max_value=n - 1))
    leaves = leaves_of(n)
    path = merkle.consistency_path(leaves, m)
    assert merkle.verify_consistency(m, n, naive_root(leaves[:m]), naive_root(leaves), path)
    assert not merkle.verify_consistency(
        m, n, naive_root(leaves[:m]), naive_root(leaves[:-1]), path
    )


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=0, max_value=300), st.data())
def test_paths_in_one_pass_are_the_rfc_6962_paths(n: int, data: st.DataObject) -> None:
    # Given a tree of n leaves (more leaves follow, as a log grown since) and a
    # few leaves of it
    leaves = leaves_of(n + 3)
    indexes = data.draw(st.sets(st.integers(0, n - 1), max_size=5)) if n else set()

    # When the root and their paths are made in one pass
    root, paths = merkle.inclusion_paths(iter(leaves), n, indexes)

    # Then they are the definition's, and each path verifies
    assert root == naive_root(leaves[:n])
    assert set(paths) == indexes
    for index in indexes:
        assert paths[index] == merkle.inclusion_path(leaves[:n], index)
        assert merkle.verify_inclusion(leaves[index], index, n, paths[index], root)


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=0, max_value=300), st.data())
def test_a_consistency_proof_in_one_pass_is_the_rfc_6962_proof(n: int, data: st.DataObject) -> None:
    # Given a tree of n leaves (more follow) and the size m of an earlier tree
    leaves = leaves_of(n + 2)
    m = data.draw(st.integers(min_value=0, max_value=n))

    # When the root and the proof from m are made in one pass
    root, proof = merkle.consistency_proof(iter(leaves), n, m)

    # Then they are the definition's, and the proof verifies
    assert root == naive_root(leaves[:n])
    assert proof == merkle.consistency_path(leaves[:n], m)
    if m > 0:
        assert merkle.verify_consistency(m, n, naive_root(leaves[:m]), root, proof)


def test_an_inner_node_passed_off_as_a_withheld_leaf_is_caught_by_the_trusted_size() -> None:
    # Given a tree of 28 leaves (split 16 | 12) and a forged proof whose "leaf" is
    # the root of the first 16, withheld bytes, in a "tree of 2" with that root
    leaves = leaves_of(28)
    tree = merkle.MerkleTree()
    for leaf in leaves:
        tree.append(leaf)
    root = tree.root()
    left, right = naive_root(leaves[:16]), naive_root(leaves[16:])
    forged = merkle.InclusionProof(
        position=999, index=0, size=2, leaf=left.hex(), leaf_data=None,
        path=(right.hex(),), root=root.hex(),
    )  # fmt: skip
    digest = merkle.LogDigest(size=28, position=28, root=root.hex())
    # Then the trusted digest refuses it, and so does a bare root with its size;
    # a bare root alone cannot tell, and says so rather than answer True
    assert not forged.verify(digest)
    assert not forged.verify(root.hex(), size=28)
    for bare in (root.hex(), root):
        with pytest.raises(InvalidInputError, match="withholds its leaf's bytes"):
            forged.verify(bare)
    # while a genuine proof of a withheld leaf passes with the size
    _, paths = merkle.inclusion_paths(iter(leaves), 28, [5])
    path = paths[5]
    genuine = merkle.InclusionProof(
        position=6, index=5, size=28, leaf=leaves[5].hex(), leaf_data=None,
        path=tuple(p.hex() for p in path), root=root.hex(),
    )  # fmt: skip
    assert genuine.verify(digest) and genuine.verify(root, size=28)
    with pytest.raises(InvalidInputError, match="size 27 contradicts the trusted digest's"):
        genuine.verify(digest, size=27)


def test_a_consistency_proof_in_one_pass_refuses_a_larger_earlier_tree() -> None:
    with pytest.raises(ValueError, match="a tree of 5 leaves is not a prefix of one of 4"):
        merkle.consistency_proof(leaves_of(4), 4, 5)


def test_paths_in_one_pass_refuse_a_leaf_outside_the_tree_or_too_few_leaves() -> None:
    with pytest.raises(ValueError, match="leaf index 4 is not in a tree of 4 leaves"):
        merkle.inclusion_paths(leaves_of(4), 4, [4])
    with pytest.raises(ValueError, match="3 leaves given for a tree of 5"):
        merkle.inclusion_paths(leaves_of(3), 5, [1])


def _scenario(world: World) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"doc", id="E1")
    reviewer.accept("E1")
    agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, parents=["E1"], id="M1")
    reviewer.accept("M1")
    reviewer.revoke("E1", reason="wrong")


def test_an_untouched_ledger_verifies_and_extends_its_earlier_digest(world: World) -> None:
    led = world.ledger
    early = led.digest()
    _scenario(world)
    later = led.digest()
    assert later.size > early.size and later.position == led.position

    report = led.verify()
    assert report.ok and report.digest == later
    extended = led.verify(against=str(early))
    assert extended.ok and extended.consistency_proof
    assert led.verify(against=later).ok


def test_a_forged_or_longer_digest_is_refused(world: World) -> None:
    _scenario(world)
    led = world.ledger
    d = led.digest()
    forged = merkle.LogDigest(size=d.size, position=d.position, root="00" * 32)
    assert not led.verify(against=forged).ok
    moved = merkle.LogDigest(size=d.size, position=d.position - 3, root=d.root)
    result = led.verify(against=moved)
    assert not result.ok
    assert result.problem == (
        f"the digest {moved} ends at log position {d.position - 3}, but its last event is "
        f"at position {d.position}"
    )
    longer = merkle.LogDigest(size=d.size + 5, position=d.position + 5, root=d.root)
    result = led.verify(against=longer)
    assert not result.ok and "describes" in (result.problem or "")
    with pytest.raises(InvalidInputError, match="cannot verify against"):
        led.verify(against="not a digest")
    arabic = "".join(chr(0x0660 + int(ch)) for ch in str(d.size))  # digits, not ASCII ones
    with pytest.raises(InvalidInputError, match="cannot verify against"):
        led.verify(against=f"{arabic}:{d.position}:{d.root}")


def test_inclusion_proofs_of_a_record_verify_without_the_ledger(world: World) -> None:
    _scenario(world)
    proofs = world.reviewer.prove("E1")
    assert [p.position for p in proofs] == [e.position for e in world.reviewer.audit("E1").events]
    digest = world.ledger.digest()
    for proof in proofs:
        assert proof.root == digest.root and proof.size == digest.size
        # What a third party runs: hash the leaf, walk the path, compare the root.
        leaf = hashlib.sha256(b"\x00" + bytes.fromhex(proof.leaf_data)).digest()
        assert merkle.verify_inclusion(
            leaf,
            proof.index,
            proof.size,
            [bytes.fromhex(h) for h in proof.path],
            bytes.fromhex(digest.root),
        )


def test_proofs_against_a_digest_kept_earlier_verify_with_that_digest_alone(
    world: World,
) -> None:
    # Given a digest kept after E1 was accepted, then more written (E1 revoked too)
    world.agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"doc", id="E1")
    world.reviewer.accept("E1")
    kept = world.ledger.digest()
    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, parents=["E1"])
    world.reviewer.revoke("E1", reason="wrong")

    # Then proofs in the current tree fail against the kept digest, and proofs
    # against it verify with it alone: of E1's events up to its position
    now = world.reviewer.prove("E1")
    assert len(now) == 3 and not any(p.verify(kept) for p in now)
    then = world.reviewer.prove("E1", against=str(kept))
    assert [p.position for p in then] == [p.position for p in now[:2]]
    assert all(p.verify(kept) and p.size == kept.size for p in then)
    assert all(p.leaf == q.leaf for p, q in zip(then, now, strict=False))
    # And a digest the log does not extend, or could not give, is refused naming it
    forged = merkle.LogDigest(size=kept.size, position=kept.position, root="ab" * 32)
    with pytest.raises(InvalidInputError, match="the log does not extend digest"):
        world.reviewer.prove("E1", against=forged)
    longer = merkle.LogDigest(size=999, position=999, root=kept.root)
    with pytest.raises(InvalidInputError, match="tree of 999 leaves; this log has"):
        world.reviewer.prove("E1", against=longer)
    early = merkle.LogDigest(size=2, position=world.ledger.position, root=kept.root)
    with pytest.raises(InvalidInputError, match="is not a digest this log could give"):
        world.reviewer.prove("E1", against=early)
    with pytest.raises(InvalidInputError, match="is not size:position"):
        world.reviewer.prove("E1", against="12:12:beef")
    lied = merkle.LogDigest(size=kept.size, position=1, root=kept.root)
    with pytest.raises(
        InvalidInputError, match=f"the last event of its tree is at position {kept.position}"
    ):
        world.reviewer.prove("E1", against=lied)
    # and a record with no event in the digest's tree has nothing to prove there
    later = world.agent.propose(scope="proj-a", claim_key="k3", value=3, kind=Kind.FACT)
    world.reviewer.accept(later)
    with pytest.raises(
        InvalidInputError, match=f"had no event at or before position {kept.position}"
    ):
        world.reviewer.prove(later, against=kept)


def test_proofs_of_a_record_of_more_events_than_a_batch_of_leaves_verify(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leaves are numbered a batch of positions at a time (``leaf_indexes``):
    a record whose events outnumber a batch, with other events between them,
    gets a proof of each that verifies against the ledger's digest."""
    monkeypatch.setattr(persistence_base, "LEAF_BATCH", 8)
    monkeypatch.setattr(persistence_base, "LEAF_WIDTHS", (1, 8))
    rid = world.agent.propose("proj-a", "weekly", "x", Kind.REPORT, id="R9")
    world.reviewer.accept(rid)
    for i in range(19):
        world.reviewer.deliver(rid, recipient=f"reader{i}@x.test")
        world.agent.propose("proj-a", f"between{i}", i, Kind.FACT)
    proofs = world.reviewer.prove(rid)
    assert [p.position for p in proofs] == [e.position for e in world.reviewer.audit(rid).events]
    assert len(proofs) == 21
    digest = world.ledger.digest()
    assert all(p.verify(digest) for p in proofs)
    indexes = [p.index for p in proofs]
    assert indexes == sorted(set(indexes)) and indexes[-1] < digest.size


# -- tampering with the database directly ---------------------------------------------


def _db(ledger_url: str) -> str:
    return ledger_url[len("sqlite:///") :]


def _tamper(path: str, *statements: tuple[str, tuple[object, ...]]) -> None:
    with closing(sqlite3.connect(path)) as con:
        # Whoever tampers with the file can also drop the append-only triggers.
        for name in ("stored_events_no_update", "stored_events_no_delete"):
            con.execute(f"DROP TRIGGER IF EXISTS {name}")
        for sql, params in statements:
            con.execute(sql, params)
        con.commit()


def _flip_byte(path: str, position: int) -> None:
    with closing(sqlite3.connect(path)) as con:
        (state,) = con.execute(
            "SELECT state FROM stored_events WHERE rowid=?", (position,)
        ).fetchone()
    changed = bytearray(state)
    changed[len(changed) // 2] ^= 0x01
    _tamper(path, ("UPDATE stored_events SET state=? WHERE rowid=?", (bytes(changed), position)))


def _delete(path: str, position: int) -> None:
    _tamper(path, ("DELETE FROM stored_events WHERE rowid=?", (position,)))


def _swap(path: str, position: int) -> None:
    with closing(sqlite3.connect(path)) as con:
        rows = con.execute(
            "SELECT rowid, topic, state FROM stored_events WHERE rowid IN (?, ?)",
            (position, position + 1),
        ).fetchall()
    (p1, t1, s1), (p2, t2, s2) = rows
    _tamper(
        path,
        ("UPDATE stored_events SET topic=?, state=? WHERE rowid=?", (t2, s2, p1)),
        ("UPDATE stored_events SET topic=?, state=? WHERE rowid=?", (t1, s1, p2)),
    )


def _insert(path: str, position: int) -> None:
    _tamper(
        path,
        (
            "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
            "VALUES (?, ?, ?, ?)",
            ("0" * 32, 1, "ledger.domain:Record.Accepted", b"\x80"),
        ),
    )


TAMPERINGS: dict[str, Callable[[str, int], None]] = {
    "modified-byte": _flip_byte,
    "deleted": _delete,
    "reordered": _swap,
    "inserted": _insert,
}


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("how", sorted(TAMPERINGS))
def test_every_kind_of_tampering_is_detected_and_named(
    world: World, ledger_url: str, how: str
) -> None:
    # Given a ledger whose digest was kept elsewhere
    _scenario(world)
    led = world.ledger
    kept = led.digest()
    victim = 5 if how != "inserted" else led.position + 1

    # When someone edits the database file behind the ledger's back
    TAMPERINGS[how](_db(ledger_url), victim)

    # Then verify names the first position that differs
    report = led.verify()
    assert not report.ok
    assert report.first_bad_position == victim, report.problem
    assert str(victim) in (report.problem or "")
    # and the digest kept elsewhere no longer matches (or is no longer extended)
    if how != "inserted":
        assert not led.verify(against=kept).ok


def _other_value(path: str, position: int) -> None:
    """The event's stored value 1 made 2: the bytes still decode."""
    with closing(sqlite3.connect(path)) as con:
        (state,) = con.execute(
            "SELECT state FROM stored_events WHERE rowid=?", (position,)
        ).fetchone()
    assert state.count(b"\xa5value\x01") == 1
    changed = state.replace(b"\xa5value\x01", b"\xa5value\x02")
    _tamper(path, ("UPDATE stored_events SET state=? WHERE rowid=?", (changed, position)))


def _leaf_deleted(path: str, position: int) -> None:
    with closing(sqlite3.connect(path)) as con:
        con.execute("DROP TRIGGER pl_merkle_leaves_no_delete")
        con.execute("DELETE FROM pl_merkle_leaves WHERE position=?", (position,))
        con.commit()


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("tamper", "refusal"),
    [
        # The bundle reads M1's trail as an audit does, which vouches for each event
        (_other_value, "stored event at position {} was altered"),
        (_leaf_deleted, "stored event at position {} was not appended by the ledger"),
        (_flip_byte, "stored event at position {} was altered"),
        (_delete, r"^bundle refused: the stored events of 'M1' lack version 1 \(before position"),
    ],
)
def test_a_bundle_of_a_record_with_a_tampered_event_is_refused(
    world: World,
    ledger_url: str,
    tmp_path: Path,
    tamper: Callable[[str, int], None],
    refusal: str,
) -> None:
    # Given a ledger file in which the proposal of M1 is tampered with
    _scenario(world)
    victim = world.reviewer.audit("M1").events[0].position
    tamper(_db(ledger_url), victim)

    # When a bundle of M1 is written, it is refused, naming the event
    with pytest.raises(CorruptEventError, match=refusal.format(victim)):
        write_bundle(world.reviewer, "M1", Ed25519PrivateKey.generate(), tmp_path / "m1.zip")
    # and nothing is written
    assert not (tmp_path / "m1.zip").exists()


def _state_as_text(path: str, position: int) -> None:
    _tamper(path, ("UPDATE stored_events SET state='hello' WHERE rowid=?", (position,)))


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("tamper", "refusal"),
    [
        (_other_value, "stored event at position {} was altered"),
        (_leaf_deleted, "stored event at position {} was not appended by the ledger"),
        (_state_as_text, "the event at position {} holds its state as text"),
    ],
)
def test_what_shows_a_records_history_refuses_an_event_altered_behind_the_ledgers_back(
    world: World, ledger_url: str, tamper: Callable[[str, int], None], refusal: str
) -> None:
    # Given a ledger file in which the proposal of M1 is altered (or its leaf gone)
    _scenario(world)
    victim = world.reviewer.audit("M1").events[0].position
    tamper(_db(ledger_url), victim)

    # Then no view of M1's history shows the altered bytes: each names the event
    shows: dict[str, Callable[[], object]] = {
        "audit": lambda: world.reviewer.audit("M1"),
        "history of M1": lambda: world.reviewer.history(record="M1"),
        "history": lambda: world.reviewer.history(),
    }
    for what, show in shows.items():
        with pytest.raises(CorruptEventError, match=refusal.format(victim)):
            show()
            pytest.fail(f"{what} showed an altered event")


def _moved(path: str, position: int, to: str) -> None:
    """The event's aggregate id changed to ``to``: it leaves its record's events."""
    _tamper(path, ("UPDATE stored_events SET originator_id=? WHERE rowid=?", (to, position)))


#: Ways an event of a record leaves its history without a byte of it being
#: changed in place: which of M1's events, the tampering, what its audit trail and
#: history say, and what a history of the whole log says.
_LEFT_OUT: dict[str, tuple[int, Callable[[str, int], None], str, str]] = {
    "first deleted": (0, _delete, r"lack version 1 \(before position {next}\)", "{}"),
    "middle deleted": (
        1,
        _delete,
        r"lack version 2 \(between positions {prev} and {next}\)",
        "{}",
    ),
    "last deleted": (-1, _delete, "the event at position {} is missing", "{}"),
    "last moved": (
        -1,
        lambda path, p: _moved(path, p, uuid.uuid4().hex),
        "stored event at position {} was altered",
        "{}",
    ),
    "middle moved": (
        1,
        lambda path, p: _moved(path, p, uuid.uuid4().hex),
        r"lack version 2 \(between positions {prev} and {next}\)",
        "{}",
    ),
    "last made no id": (
        -1,
        lambda path, p: _moved(path, p, "zz"),
        "stored event at position {} cannot be read as the ledger appended it",
        "the event at position {} holds an originator_id that is not an aggregate id",
    ),
}


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("how", sorted(_LEFT_OUT))
def test_a_records_history_refuses_an_event_left_out_of_it_behind_the_ledgers_back(
    world: World, ledger_url: str, how: str
) -> None:
    # Given a ledger file in which one of M1's events was deleted, or given another
    # aggregate's id (the bytes of every event left in M1's history unchanged)
    _scenario(world)
    positions = [e.position for e in world.reviewer.audit("M1").events]
    assert len(positions) == 3  # proposed, accepted, marked stale
    index, tamper, refusal, in_log = _LEFT_OUT[how]
    victim = positions[index]
    around = {
        "prev": positions[index - 1] if index > 0 else None,
        "next": positions[index + 1] if 0 <= index < len(positions) - 1 else None,
    }
    tamper(_db(ledger_url), victim)

    # Then neither its audit trail nor its history shows the rest as its whole
    # history: each names the event left out (before, audit showed two events)
    for what, show in {
        "audit": lambda: world.reviewer.audit("M1"),
        "history of M1": lambda: world.reviewer.history(record="M1"),
    }.items():
        with pytest.raises(CorruptEventError, match=refusal.format(victim, **around)):
            show()
            pytest.fail(f"{what} showed M1's history without an event")
    # and a history of the whole log names the same position
    with pytest.raises(CorruptEventError, match=in_log.format(victim)):
        world.reviewer.history()
    assert world.ledger.verify().first_bad_position == victim


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("last", ["Delivered", "CorrectionIssued"])
def test_a_records_history_refuses_its_last_delivery_or_correction_deleted(
    world: World, ledger_url: str, last: str
) -> None:
    # Given R1 delivered (and, for a correction, revoked and corrected), then its
    # last event deleted behind the ledger's back: an event that changes no view
    # row of R1's and leaves no gap in its versions
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="r", value=1, kind=Kind.REPORT, id="R1")
    reviewer.accept("R1")
    delivery = reviewer.deliver("R1", recipient="ops@x.test")
    if last == "CorrectionIssued":
        reviewer.revoke("R1", reason="wrong")
        reviewer.issue_correction(delivery, note="R1 was wrong")
    events = world.reviewer.audit("R1").events
    assert events[-1].type == last
    _delete(_db(ledger_url), events[-1].position)

    # Then neither its audit trail nor its history shows the rest as its history
    refusal = f"the event at position {events[-1].position}, a delivery or correction of 'R1'"
    with pytest.raises(CorruptEventError, match=refusal):
        reviewer.audit("R1")
    with pytest.raises(CorruptEventError, match=refusal):
        reviewer.history(record="R1")


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_an_erasure_is_not_kept_from_its_bytes_by_tampering_elsewhere_in_a_history(
    world: World, ledger_url: str
) -> None:
    # Given E1's acceptance altered behind the ledger's back
    _scenario(world)
    ref = (world.reviewer.get("E1").evidence or {})["snapshot_ref"]
    accepted = world.reviewer.audit("E1").events[1]
    assert accepted.type == "Accepted"
    _flip_byte(_db(ledger_url), accepted.position)

    # When E1's bytes are erased (a data subject's request cannot wait for the log
    # to be mended), they are erased
    done = world.ledger.admin().erase_snapshot(ref, reason="request 114")
    assert done.records == ("E1",) and done.deleted
    with closing(sqlite3.connect(_db(ledger_url))) as con:
        assert con.execute("SELECT COUNT(*) FROM pl_snapshots").fetchone() == (0,)
    # and verify still names the tampering
    assert world.ledger.verify().first_bad_position == accepted.position


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_graphs_revocations_refuse_a_revocation_deleted_behind_the_ledgers_back(
    world: World, ledger_url: str
) -> None:
    # Given E1 revoked, then its Revoked event deleted (its view row still REVOKED)
    _scenario(world)
    revoked = world.reviewer.audit("E1").events[-1]
    assert revoked.type == "Revoked"
    _delete(_db(ledger_url), revoked.position)

    # Then who revoked it is not silently left out of its graph: the refusal names it
    sub = collect(world.reviewer, "E1", descendants=True)
    with pytest.raises(CorruptEventError, match=f"position {revoked.position} is missing"):
        revocations(world.reviewer, sub)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_history_of_the_log_names_an_event_deleted_from_its_end_within_its_bound(
    world: World, ledger_url: str
) -> None:
    # Given a ledger whose newest event was deleted behind its back (its leaf kept)
    _scenario(world)
    newest = world.ledger.position
    _delete(_db(ledger_url), newest)

    # Then a history of the whole log names it, and one that stops before it does not
    with pytest.raises(CorruptEventError, match=f"position {newest}"):
        world.reviewer.history()
    shown = world.reviewer.history(stop=newest - 1)
    assert shown and shown[-1].position <= newest - 1


def test_a_rebuild_over_a_deleted_last_event_is_refused_with_a_compressor_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a ledger whose states are compressed (the rebuild decodes them through
    # eventsourcing's mapper), its newest event deleted behind its back
    monkeypatch.setenv("COMPRESSOR_TOPIC", "eventsourcing.compressor:ZlibCompressor")
    path = tmp_path / "zipped.db"
    with Ledger.open(f"sqlite:///{path}") as led:
        admin = led.admin()
        admin.grant("agent", scope="s", roles=["propose", "read"])
        led.authenticate(admin.issue_token("agent")).propose(
            scope="s", claim_key="k", value=1, kind=Kind.FACT
        )
        gone = led.position
    _delete(str(path), gone)
    before = _view_rows(str(path))
    # Then the rebuild is refused, naming it, and the views stay
    with (
        Ledger.open(f"sqlite:///{path}") as led,
        pytest.raises(CorruptEventError, match=f"the event at position {gone} is missing"),
    ):
        led.rebuild()
    assert _view_rows(str(path)) == before


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("which", ["inside", "last"])
def test_a_rebuild_over_a_deleted_event_is_refused_and_leaves_the_views(
    world: World, ledger_url: str, which: str
) -> None:
    # Given a ledger file from which one event was deleted behind the ledger's back
    # (its Merkle leaf left): M1's acceptance, or the newest event
    _scenario(world)
    led = world.ledger
    victim = world.reviewer.audit("M1").events[1].position if which == "inside" else led.position
    _delete(_db(ledger_url), victim)
    before = _view_rows(_db(ledger_url))

    # When the views are rebuilt, it is refused, naming the event, as verify names it
    with pytest.raises(CorruptEventError, match=f"the event at position {victim} is missing"):
        led.rebuild()
    assert led.verify().problem == f"the event at position {victim} is missing"
    # and the views, which were right, are as they were
    assert _view_rows(_db(ledger_url)) == before


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_write_after_the_newest_event_was_deleted_is_refused_naming_it_at_once(
    world: World, ledger_url: str
) -> None:
    # Given a ledger file whose newest event was deleted (its Merkle leaf left), so
    # that the next event would take its position
    _scenario(world)
    led = world.ledger
    gone = led.position
    _delete(_db(ledger_url), gone)
    # When a command writes, it is refused at once as tampering, not tried again
    # as if other writers held the lock
    with pytest.raises(CorruptEventError, match="an event the ledger appended was deleted"):
        world.agent.propose(scope="proj-a", claim_key="n", value=1, kind=Kind.FACT)
    assert led.position == gone - 1
    assert led.verify().problem == f"the event at position {gone} is missing"


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_views_ahead_of_their_time_index_are_named_as_tampering_on_open(
    world: World, ledger_url: str
) -> None:
    # Given a ledger file whose newest time-index row was removed (its view rows kept)
    _scenario(world)
    newest = world.ledger.position
    with closing(sqlite3.connect(_db(ledger_url))) as con:
        con.execute("DELETE FROM pl_timeline WHERE position = ?", (newest,))
        con.commit()
    # When it is opened (its views caught up), the clash is named as tampering,
    # pointing to verify and rebuild, not told as a database error
    with pytest.raises(
        CorruptEventError,
        match=f"the views already hold a row that an event from position {newest} on writes",
    ):
        Ledger.open(ledger_url)
    # and a rebuild mends it
    with Ledger.open(ledger_url, catch_up=False) as led:
        assert not led.verify().ok
        led.rebuild()
    with Ledger.open(ledger_url) as led:
        assert led.verify().ok


def _view_rows(path: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as con:
        return con.execute("SELECT * FROM pl_records ORDER BY 1, 2").fetchall()


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_of_a_record_missing_a_later_event_is_refused(
    world: World, ledger_url: str, tmp_path: Path
) -> None:
    # Given a ledger file from which M1's acceptance (its version 2) was deleted
    # (its proposal, version 1, still there)
    _scenario(world)
    accepted = world.reviewer.audit("M1").events[1]
    assert accepted.type == "Accepted"
    _delete(_db(ledger_url), accepted.position)

    # When its bundle is written, the gap refuses it, and nothing is written
    with pytest.raises(CorruptEventError, match="stored events of 'M1' lack version 2"):
        write_bundle(world.reviewer, "M1", Ed25519PrivateKey.generate(), tmp_path / "m1.zip")
    assert not (tmp_path / "m1.zip").exists()


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_rewriting_events_and_their_leaves_together_is_caught_by_the_kept_digest(
    world: World, ledger_url: str
) -> None:
    _scenario(world)
    led = world.ledger
    kept = led.digest()
    path = _db(ledger_url)
    with closing(sqlite3.connect(path)) as con:
        row = con.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            "WHERE rowid=3"
        ).fetchone()
    # Same length but a different byte below: the last byte before the salt (the
    # salt's name, marker and 16 bytes end the state)
    cut = -len(serialization.pack({serialization.SALT: bytes(16)})) + 1
    forged_state = row[3][: cut - 1] + bytes([row[3][cut - 1] ^ 0x01]) + row[3][cut:]
    forged_leaf = merkle.leaf_hash(merkle.leaf_data(3, row[0], row[1], row[2], forged_state))
    _tamper(
        path,
        ("DROP TRIGGER IF EXISTS pl_merkle_leaves_no_update", ()),
        ("UPDATE stored_events SET state=? WHERE rowid=3", (forged_state,)),
        ("UPDATE pl_merkle_leaves SET leaf=? WHERE position=3", (forged_leaf,)),
    )
    # The Merkle check alone is fooled (leaves were rewritten too); the views, built
    # from the original event, no longer equal a replay of the log.
    report = led.verify()
    assert not report.ok and report.first_bad_position is None
    assert report.problem is not None and report.problem.startswith("view pl_grants differs")
    # Once the views are rebuilt from the rewritten log, only the kept digest sees it.
    assert led.rebuild().matched is False
    assert led.verify().ok
    assert not led.verify(against=kept).ok


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgres"], indirect=True)
def test_proofs_and_digests_survive_reopening(open_ledger: Callable[..., Ledger]) -> None:
    led = open_ledger()
    led.admin().grant("a", scope="s", roles=["read"])
    before = led.digest()
    led.close()
    again = open_ledger()
    assert again.digest() == before
    assert again.verify(against=before).ok


def test_rebuilding_views_does_not_touch_the_merkle_leaves(world: World) -> None:
    _scenario(world)
    before = world.ledger.digest()
    assert world.ledger.rebuild().matched
    assert world.ledger.digest() == before
    assert world.ledger.verify(against=before).ok


def test_a_view_table_dropped_outside_the_ledger_is_named_and_rebuilt(world: World) -> None:
    # Given a ledger whose reverse-dependency view was dropped behind its back
    _scenario(world)
    before = world.ledger.digest()
    engine = world.ledger.engine
    with engine.locked("drop") as c:
        c.execute(engine.dialect.q("DROP TABLE {t}pl_edges"))
    # Then verify names it (not the database's "no such table"), and rebuild makes
    # it anew from the log, saying the views differed
    report = world.ledger.verify()
    assert not report.ok
    assert report.problems == (
        "view table pl_edges is missing (`provledger rebuild` makes it from the log)",
    )
    assert not world.ledger.rebuild().matched
    assert world.ledger.verify(against=before).ok
    assert world.ledger.rebuild().matched


def test_tamper_tests_use_a_real_file(tmp_path: Path) -> None:
    # The tampering helpers above need a file they can open with sqlite3.
    led = Ledger.open(f"sqlite:///{tmp_path / 'x.db'}")
    led.admin().grant("a", scope="s", roles=["read"])
    led.close()
    with closing(sqlite3.connect(tmp_path / "x.db")) as con:
        assert con.execute("SELECT COUNT(*) FROM pl_merkle_leaves").fetchone()[0] == 2


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_well_formed_event_forged_into_the_table_never_reaches_the_views(
    world: World, ledger_url: str
) -> None:
    # Given a record and a forged, perfectly decodable Accepted event for it
    from ledger.errors import CorruptEventError

    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="F1")
    led = world.ledger
    digest, position = led.views_digest(), led.position
    stored = _forged_acceptance(world, "mallory")
    with closing(sqlite3.connect(_db(ledger_url))) as con:
        con.execute(
            "INSERT INTO stored_events VALUES (?, ?, ?, ?)",
            (stored.originator_id.hex, 2, stored.topic, stored.state),
        )
        con.commit()

    # When the views try to catch up, the event is refused: it has no Merkle leaf
    with pytest.raises(CorruptEventError, match=f"position {position + 1} was not appended"):
        led.catch_up()
    # and F1 is still a candidate
    assert led.views_digest() == digest
    assert world.reviewer.get("F1").status == "CANDIDATE"


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("aggregate", "refusal"),
    [
        ("none stored", r"'ghost'.*no stored events"),
        ("the parent's", r"'ghost'.*under the aggregate id of record 'e1'"),
    ],
)
def test_a_view_row_with_no_stored_events_stops_a_revocation_by_name(
    world: World, ledger_url: str, aggregate: str, refusal: str
) -> None:
    # Given a descendant slipped into the views with no event behind it: under an
    # aggregate id with no events, or under its parent's
    e1 = world.agent.capture(uri="https://docs.test/e1", content=b"e1", id="e1", scope="proj-a")
    world.reviewer.accept(e1)
    path = _db(ledger_url)
    with closing(sqlite3.connect(path)) as con:
        (row,) = con.execute(
            "SELECT * FROM pl_records WHERE record_id='e1' AND to_pos IS NULL"
        ).fetchall()
        names = [d[0] for d in con.execute("SELECT * FROM pl_records LIMIT 0").description]
    ghost = dict(zip(names, row, strict=True))
    ghost.update(record_id="ghost", claim_key="ghost", snapshot_ref=None, evidence=None)
    if aggregate == "none stored":
        ghost["agg_id"] = uuid.uuid4().hex
    marks = ", ".join("?" for _ in names)
    _tamper(
        path,
        (f"INSERT INTO pl_records ({', '.join(names)}) VALUES ({marks})", tuple(ghost.values())),
        (
            "INSERT INTO pl_edges (parent_id, child_id, edge, from_pos) VALUES (?, ?, ?, ?)",
            ("e1", "ghost", "declared", ghost["from_pos"]),
        ),
    )
    before = world.ledger.position

    # When the parent is revoked, then the revocation names the record and writes nothing
    with pytest.raises(CorruptEventError, match=refusal):
        world.reviewer.revoke(e1, reason="retracted")
    assert world.ledger.position == before


def _forged_acceptance(world: World, actor: str) -> Any:
    """A well-formed Accepted of record F1 by ``actor``, as eventsourcing stores it."""
    from ledger.domain import Record

    forged = Record.Accepted(
        originator_id=aggregate_of(world.ledger, "F1"),
        originator_version=2,
        timestamp=world.clock.now,
        actor=actor,
        note="",
    )
    return world.ledger.engine.app.mapper.to_stored_event(forged)


def _forge_accept(world: World, path: str, position: int, with_leaf: bool) -> None:
    """Store at ``position`` a well-formed Accepted of candidate F1 by the reviewer
    (and, ``with_leaf``, its correct Merkle leaf there)."""
    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="F1")
    stored = _forged_acceptance(world, "reviewer")
    oid = stored.originator_id.hex
    rows: list[tuple[str, tuple[object, ...]]] = [
        (
            "INSERT INTO stored_events (rowid, originator_id, originator_version, topic, state) "
            "VALUES (?, ?, 2, ?, ?)",
            (position, oid, stored.topic, stored.state),
        )
    ]
    if with_leaf:
        leaf = merkle.leaf_hash(merkle.leaf_data(position, oid, 2, stored.topic, stored.state))
        rows.append(
            ("INSERT INTO pl_merkle_leaves (position, leaf) VALUES (?, ?)", (position, leaf))
        )
    _tamper(path, *rows)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("position", "with_leaf"), [(0, True), (-7, False)])
def test_an_event_forged_below_the_first_position_is_named_and_refused(
    world: World, ledger_url: str, position: int, with_leaf: bool
) -> None:
    # Given a forged Accepted of candidate F1 stored where no reading after position
    # 0 looks: at 0 (with a correct leaf there) or below
    led = world.ledger
    _forge_accept(world, _db(ledger_url), position, with_leaf)
    # Then verify names it, however well-formed it is
    report = led.verify()
    assert not report.ok
    assert report.first_bad_position == position
    assert report.problem == (
        f"the event at position {position} was not appended by the ledger (log positions "
        "start at 1)"
    )
    # and F1's audit trail and commands refuse it by position (its version would
    # clash with the acceptance's, which would otherwise be retried as a conflict)
    forged = rf"position {position} \(ledger.domain:Record.Accepted\) was not appended"
    with pytest.raises(CorruptEventError, match=forged):
        world.reviewer.audit("F1")
    with pytest.raises(CorruptEventError, match=forged):
        world.reviewer.accept("F1")
    assert world.reviewer.get("F1").status == "CANDIDATE"


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_verify_names_the_first_problem_when_a_forged_event_would_stop_opening(
    world: World, ledger_url: str
) -> None:
    from click.testing import CliRunner

    from ledger.cli import main

    # Given a byte changed at position 5 and, after it, an event with no leaf that
    # the views have not seen (opening the ledger refuses to apply it)
    _scenario(world)
    path = _db(ledger_url)
    _flip_byte(path, 5)
    _insert(path, world.ledger.position + 1)
    world.ledger.close()
    with pytest.raises(CorruptEventError, match="was not appended"):
        Ledger.open(ledger_url)
    # When it is verified (the views left as stored), the first problem is named
    with Ledger.open(ledger_url, catch_up=False) as led:
        report = led.verify()
    assert (report.ok, report.first_bad_position) == (False, 5)
    result = CliRunner().invoke(main, ["verify", "--url", ledger_url])
    assert result.exit_code == 1
    assert "position 5 differ" in result.output, result.output


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("layout", "named"),
    [
        (99, "a later version of provledger built them (layout 99; this version"),
        (4, "built with layout 4, which no released version"),  # lowered, to look older
        (None, "the views record no layout, yet they are not 0.1.0's"),  # removed
        # removed, and 0.1.0's id map added: this version's tables give them away
        ("0.1.0", "the views record no layout, yet they are not 0.1.0's"),
    ],
)
def test_verify_leaves_the_views_as_stored_even_with_the_layout_row_changed(
    world: World, ledger_url: str, layout: int | str | None, named: str
) -> None:
    from click.testing import CliRunner

    from ledger.cli import main

    # Given a forged view row, and the layout row changed (or removed) so that
    # opening the ledger would rebuild the views (erasing the forged row)
    _scenario(world)
    path = _db(ledger_url)
    world.ledger.close()
    change = (
        ("DELETE FROM pl_tracking WHERE view='#layout'", ())
        if not isinstance(layout, int)
        else ("UPDATE pl_tracking SET position=? WHERE view='#layout'", (layout,))
    )
    id_map = ("CREATE TABLE pl_record_ids (agg_id TEXT PRIMARY KEY, record_id TEXT)", ())
    extra = (id_map,) if layout == "0.1.0" else ()
    _tamper(
        path, ("UPDATE pl_records SET status='ACCEPTED' WHERE record_id='M1'", ()), change, *extra
    )
    # When it is verified, nothing is rebuilt, the layout row is named, and the
    # views are compared all the same: only 0.1.0's views (test below) are left out
    result = CliRunner().invoke(main, ["verify", "--url", ledger_url, "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert named in report["problem"], report
    edited = "the row record_id='M1', from_pos="
    assert any(edited in p for p in report["problems"]), report["problems"]
    with closing(sqlite3.connect(path)) as con:
        kept = con.execute("SELECT position FROM pl_tracking WHERE view='#layout'").fetchall()
        assert kept == ([] if not isinstance(layout, int) else [(layout,)])


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_verify_names_a_difference_in_each_view_table_edited(world: World, ledger_url: str) -> None:
    # Given rows edited in three view tables
    _scenario(world)
    path = _db(ledger_url)
    world.ledger.close()
    _tamper(
        path,
        ("UPDATE pl_records SET status='ACCEPTED' WHERE record_id='M1'", ()),
        ("DELETE FROM pl_edges WHERE child_id='M1'", ()),
        ("UPDATE pl_grants SET granted_by='someone' WHERE subject='agent-1'", ()),
    )
    # Then verify names a difference in each of them, not the first table's alone
    with Ledger.open(ledger_url, catch_up=False) as led:
        report = led.verify()
    assert not report.ok and report.failed_checks == ("views",)
    named = [p.split(",")[0] for p in report.problems]
    assert [
        table
        for table in ("pl_records", "pl_edges", "pl_grants")
        if any(f"view {table}" in p or f"{table} " in p for p in named)
    ] == ["pl_records", "pl_edges", "pl_grants"], report.problems


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_verify_of_views_a_later_version_built_says_so_and_does_not_pass_them(
    world: World, ledger_url: str
) -> None:
    from click.testing import CliRunner

    from ledger.cli import main

    _scenario(world)
    world.ledger.close()
    _tamper(_db(ledger_url), ("UPDATE pl_tracking SET position=99 WHERE view='#layout'", ()))

    result = CliRunner().invoke(main, ["verify", "--url", ledger_url])

    assert result.exit_code == 1
    assert result.stderr.startswith(
        "error: not verified by this version: the views say a later version of provledger "
        "built them (layout 99; this version builds "
    ), result.stderr
    assert "tampering" not in result.stderr
    # Evidence bytes changed too: that is tampering, said so, whatever the views say
    _tamper(_db(ledger_url), ("UPDATE pl_snapshots SET content=x'00ff'", ()))
    both = CliRunner().invoke(main, ["verify", "--url", ledger_url])
    assert both.exit_code == 1
    assert both.stderr.startswith("error: tampering detected: "), both.stderr


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_views_rolled_back_behind_the_log_are_named_not_taken_for_a_lag(
    world: World, ledger_url: str
) -> None:
    from click.testing import CliRunner

    from ledger.cli import main

    # Given the views' rows from E1's revocation on removed, and the rows it closed
    # reopened: the views look as if they had not seen the revocation yet
    _scenario(world)
    revoked = world.reviewer.audit("E1").events[-1].position
    newest = world.ledger.position
    path = _db(ledger_url)
    world.ledger.close()
    at = (revoked,)
    _tamper(
        path,
        ("DELETE FROM pl_records WHERE from_pos >= ?", at),
        ("UPDATE pl_records SET to_pos = NULL WHERE to_pos >= ?", at),
        ("DELETE FROM pl_edges WHERE from_pos >= ?", at),
        ("UPDATE pl_edges SET to_pos = NULL WHERE to_pos >= ?", at),
        ("DELETE FROM pl_values WHERE created_pos >= ?", at),
        ("DELETE FROM pl_timeline WHERE position >= ?", at),
    )
    # When it is verified, then the gap is named: commands never leave one
    result = CliRunner().invoke(main, ["verify", "--url", ledger_url, "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["first_bad_position"] == revoked
    assert report["problem"].startswith(
        f"the views stop at position {revoked - 1} while the log goes on to {newest}: "
    ), report
    # and `rebuild` repairs the views (it used to fail catching them up first)
    rebuilt = CliRunner().invoke(main, ["rebuild", "--url", ledger_url])
    assert rebuilt.exit_code == 1 and "VIEWS DIFFER" in rebuilt.output, rebuilt.output
    assert CliRunner().invoke(main, ["verify", "--url", ledger_url]).exit_code == 0
    with Ledger.open(ledger_url) as led:
        assert led.authenticate(led.admin().issue_token("reviewer")).get("E1").status == "REVOKED"


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_views_that_lost_a_records_rows_are_named_by_the_next_command(
    world: World, ledger_url: str
) -> None:
    from click.testing import CliRunner

    from ledger.cli import main

    # Given M1's rows and the time index from its acceptance on removed: the next
    # command catches the views up through an event changing a record they lack
    _scenario(world)
    accepted = next(e for e in world.reviewer.audit("M1").events if e.type == "Accepted")
    path = _db(ledger_url)
    world.ledger.close()
    at = (accepted.position - 1,)
    _tamper(
        path,
        ("DELETE FROM pl_timeline WHERE position >= ?", at),
        ("DELETE FROM pl_records WHERE from_pos >= ?", at),
    )
    # Then it says which record and what to run, not that the event is a stray
    result = CliRunner().invoke(main, ["stats", "--url", ledger_url])
    assert result.exit_code == 1, result.output
    assert re.match(
        r"error: stored event at position \d+ changes record '(M1|E1)', of which the views "
        r"hold no row \(removed behind the ledger's back, or its proposal's event gone\): "
        r"`provledger verify` names which",
        result.stderr,
    ), result.stderr


def test_verify_of_a_0_1_0_ledger_passes_and_says_the_views_wait(tmp_path: Path) -> None:
    import shutil

    from click.testing import CliRunner

    from ledger.cli import main

    path = tmp_path / "old.db"
    shutil.copyfile(Path(__file__).parent / "fixtures" / "ledger-0.1.0.db", path)
    url = f"sqlite:///{path}"
    first = CliRunner().invoke(main, ["verify", "--url", url])
    assert first.exit_code == 0, first.output
    assert "views not compared" in first.stderr
    assert "any command but verify, backup, digest, head and copy" in first.stderr
    # digest leaves them as they are, as the message says; stats rebuilds them
    assert CliRunner().invoke(main, ["digest", "--url", url]).exit_code == 0
    assert "views not compared" in CliRunner().invoke(main, ["verify", "--url", url]).stderr
    assert CliRunner().invoke(main, ["stats", "--url", url]).exit_code == 0
    again = CliRunner().invoke(main, ["verify", "--url", url])
    assert again.exit_code == 0, again.output
    assert "views," in again.stdout and again.stderr == ""


@pytest.mark.parametrize("url", ["memory:", "file"])
def test_a_ledger_created_without_catching_up_has_its_layout(url: str, tmp_path: Path) -> None:
    target = f"sqlite:///{tmp_path / 'new.db'}" if url == "file" else url
    led = Ledger.open(target, catch_up=False)
    led.admin().grant("a", scope="s", roles=["read"])
    report = led.verify()
    assert report.ok and "views" in report.checks
    led.close()


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_stray_merkle_leaf_is_named_as_a_leaf(world: World, ledger_url: str) -> None:
    _scenario(world)
    _tamper(
        _db(ledger_url),
        ("INSERT INTO pl_merkle_leaves (position, leaf) VALUES (0, ?)", (b"\x00" * 32,)),
    )
    report = world.ledger.verify()
    assert report.problem == (
        "the Merkle leaf at position 0 was not appended by the ledger (log positions start at 1)"
    )


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_prove_refuses_a_record_whose_stored_event_was_altered_naming_its_position(
    world: World, ledger_url: str
) -> None:
    _scenario(world)
    first, second = (e.position for e in world.reviewer.audit("E1").events[:2])
    world.ledger.close()
    with closing(sqlite3.connect(_db(ledger_url))) as con:
        con.execute("DROP TRIGGER pl_merkle_leaves_no_update")
        con.execute("DROP TRIGGER pl_merkle_leaves_no_delete")
        con.execute("UPDATE pl_merkle_leaves SET leaf=? WHERE position=?", (b"\0" * 32, first))
        con.execute("DELETE FROM pl_merkle_leaves WHERE position=?", (second,))
        con.commit()

    # No proof can hold for either event: prove says so by position, as verify does
    with Ledger.open(ledger_url, catch_up=False) as led:
        reviewer = led.authenticate(led.admin().issue_token("reviewer"))
        with pytest.raises(CorruptEventError) as refused:
            reviewer.prove("E1")
        assert str(refused.value).startswith(
            f"prove refused: the stored event at position {first} does not match its Merkle leaf"
        )
        assert not led.verify().ok


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_an_edited_time_index_row_is_named_by_its_position_and_what_differs(
    world: World, ledger_url: str
) -> None:
    _scenario(world)
    world.ledger.close()
    _tamper(_db(ledger_url), ("UPDATE pl_timeline SET at = at + 1 WHERE position = 3", ()))

    with Ledger.open(ledger_url, catch_up=False) as led:
        problem = led.verify().problem or ""

    assert problem.startswith("view pl_timeline differs from a replay of the log: the row ")
    assert "the row position=3 has at=" in problem  # the edited value is not the row's name


# -- values stored with a type the ledger never writes ----------------------------------


def _verify_by_cli(ledger_url: str) -> str:
    """What `provledger verify` prints, after checking it failed cleanly: exit 1,
    one line naming tampering, no traceback, nothing undecodable printed."""
    from click.testing import CliRunner

    from ledger.cli import main

    result = CliRunner().invoke(main, ["verify", "--url", ledger_url])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.output.startswith("error: tampering detected: "), result.output
    assert result.output.count("\n") == 1 and "\ufffd" not in result.output, result.output
    return result.output


MISTYPED_EVENTS = {
    # The same bytes as text (not UTF-8: reading it fails in the driver)
    "state as text that is not UTF-8": (
        "UPDATE stored_events SET state=CAST(state AS TEXT) WHERE rowid=?",
        "holds its state as text where the ledger stores bytes",
    ),
    "state as UTF-8 text": (
        "UPDATE stored_events SET state='hello' WHERE rowid=?",
        "holds its state as text where the ledger stores bytes",
    ),
    "version as text": (
        "UPDATE stored_events SET originator_version='x' WHERE rowid=?",
        "holds its originator_version as text where the ledger stores an integer",
    ),
    "topic as bytes": (
        "UPDATE stored_events SET topic=CAST(topic AS BLOB) WHERE rowid=?",
        "holds its topic as bytes where the ledger stores text",
    ),
    "aggregate id as bytes": (
        "UPDATE stored_events SET originator_id=CAST(originator_id AS BLOB) WHERE rowid=?",
        "holds its originator_id as bytes where the ledger stores text",
    ),
    # The same id spelt otherwise: the same UUID and the same Merkle leaf, but a
    # look-up of the aggregate's events misses it
    "aggregate id in upper case": (
        "UPDATE stored_events SET originator_id=upper(originator_id) WHERE rowid=?",
        "holds an originator_id that is not an aggregate id as the ledger writes it "
        "(32 lower-case hex digits)",
    ),
    "aggregate id with dashes": (
        "UPDATE stored_events SET originator_id=substr(originator_id, 1, 8) || '-' || "
        "substr(originator_id, 9, 4) || '-' || substr(originator_id, 13, 4) || '-' || "
        "substr(originator_id, 17, 4) || '-' || substr(originator_id, 21) WHERE rowid=?",
        "holds an originator_id that is not an aggregate id as the ledger writes it "
        "(32 lower-case hex digits)",
    ),
    "topic as text that is not UTF-8": (
        "UPDATE stored_events SET topic=CAST(x'ff00ff' AS TEXT) WHERE rowid=?",
        "holds its topic as text that is not UTF-8",
    ),
}


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("how", sorted(MISTYPED_EVENTS))
def test_an_event_value_stored_as_another_type_is_named_by_its_position(
    world: World, ledger_url: str, how: str
) -> None:
    # Given an event whose column was given another SQLite type behind the ledger's back
    _scenario(world)
    world.ledger.close()
    statement, named = MISTYPED_EVENTS[how]
    _tamper(_db(ledger_url), (statement, (5,)))

    # When the ledger is verified, that event is the first problem, by its position
    with Ledger.open(ledger_url, catch_up=False) as led:
        report = led.verify()
    assert (report.ok, report.first_bad_position) == (False, 5), report.problem
    assert (
        report.problem == f"the event at position 5 {named}: it was changed after it was appended"
    )
    # and the command line says so on one line, with no traceback and no raw bytes
    assert f"the event at position 5 {named}" in _verify_by_cli(ledger_url)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("value", ["CAST(leaf AS TEXT)", "'abc'"])
def test_a_merkle_leaf_stored_as_text_is_named_by_its_position(
    world: World, ledger_url: str, value: str
) -> None:
    _scenario(world)
    world.ledger.close()
    _tamper(
        _db(ledger_url),
        ("DROP TRIGGER pl_merkle_leaves_no_update", ()),
        (f"UPDATE pl_merkle_leaves SET leaf={value} WHERE position=5", ()),
    )
    named = "the Merkle leaf at position 5 holds its hash as text where the ledger stores bytes"

    with Ledger.open(ledger_url, catch_up=False) as led:
        report = led.verify()
        assert (report.ok, report.first_bad_position) == (False, 5), report.problem
        assert report.problem is not None and report.problem.startswith(named)
        # A head is not signed over it either: the digest names it
        with pytest.raises(CorruptEventError, match=named):
            led.digest()
    assert named in _verify_by_cli(ledger_url)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("statement", "named"),
    [
        ("UPDATE pl_snapshots SET content=CAST(content AS TEXT)", "its content is stored as text"),
        ("UPDATE pl_snapshots SET content=CAST(x'ff00' AS TEXT)", "its content is stored as text"),
        ("UPDATE pl_snapshots SET ref=CAST(ref AS BLOB)", "its reference is stored as bytes"),
    ],
)
def test_a_snapshot_stored_as_another_type_is_named_by_its_reference(
    world: World, ledger_url: str, statement: str, named: str
) -> None:
    # Given evidence whose stored snapshot was given another type (same bytes)
    _scenario(world)
    ref = "sha256:" + hashlib.sha256(b"doc").hexdigest()
    world.ledger.close()
    _tamper(_db(ledger_url), (statement, ()))

    # Then verify names the snapshot, and the command line fails cleanly
    with Ledger.open(ledger_url, catch_up=False) as led:
        report = led.verify()
    assert report.failed_checks == ("evidence bytes",)
    assert report.problem is not None and report.problem.startswith(f"snapshot {ref}: {named}")
    assert f"snapshot {ref}: {named}" in _verify_by_cli(ledger_url)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_view_holding_text_that_is_not_utf_8_is_named_by_table_and_column(
    world: World, ledger_url: str
) -> None:
    _scenario(world)
    world.ledger.close()
    _tamper(
        _db(ledger_url),
        ("UPDATE pl_records SET status=CAST(x'ff00ff' AS TEXT) WHERE record_id='M1'", ()),
    )
    with Ledger.open(ledger_url, catch_up=False) as led:
        report = led.verify()
    assert report.failed_checks == ("views",)
    assert report.problem == (
        "view pl_records holds text that is not UTF-8 in its column 'status', which no "
        "projection writes: the view was changed behind the ledger's back"
    )
    _verify_by_cli(ledger_url)


# -- a heads file signed by one key -------------------------------------------------------


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgres"], indirect=True)
def test_a_head_signed_by_another_key_is_not_appended_to_a_heads_file(
    world: World, ledger_url: str, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from ledger.cli import main
    from ledger.errors import InvalidHeadError
    from ledger.heads import generate_key, publish_head

    # Given a heads file kept with the old key, and a new key (rotation)
    _scenario(world)
    old_id, new_id = generate_key(tmp_path / "old"), generate_key(tmp_path / "new")
    heads = tmp_path / "heads.jsonl"
    publish_head(world.ledger, tmp_path / "old", heads)
    before = heads.read_text()

    # When a head signed by the new key is appended to it, it is refused, naming
    # both keys and what to do, and the file is left as it was
    refusal = (
        rf"not appended to .*heads.jsonl: its heads are signed by key {old_id[:16]}…, "
        rf"this one by key {new_id[:16]}…, .* start a new heads file for this key"
    )
    with pytest.raises(InvalidHeadError, match=refusal):
        publish_head(world.ledger, tmp_path / "new", heads)
    assert heads.read_text() == before
    if ledger_url.startswith("sqlite"):  # (the file's owner needs no admin token)
        result = CliRunner().invoke(
            main,
            ["head", "--url", ledger_url, "--key", str(tmp_path / "new"), "--append", str(heads)],
        )
        assert result.exit_code == 1 and "start a new heads file" in result.output, result.output
        assert heads.read_text() == before

    # A new heads file takes the new key's heads, and each file verifies with its key
    fresh = tmp_path / "new-heads.jsonl"
    publish_head(world.ledger, tmp_path / "new", fresh)
    publish_head(world.ledger, tmp_path / "old", heads)
    assert world.ledger.verify(heads=fresh, public_key=tmp_path / "new.pub").ok
    assert world.ledger.verify(heads=heads, public_key=tmp_path / "old.pub").ok


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_leaf_indexes_count_the_leaves_before_each_position_around_a_missing_leaf(
    world: World, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Numbered a batch at a time, each asked position's index is the number of
    leaves before it, also past a position whose leaf is gone (it gets none)."""
    monkeypatch.setattr(persistence_base, "LEAF_BATCH", 4)
    monkeypatch.setattr(persistence_base, "LEAF_WIDTHS", (1, 4))
    for i in range(12):
        world.agent.propose("proj-a", f"k{i}", i, Kind.FACT)
    _leaf_deleted(_db(ledger_url), 8)
    asked = [2, 3, 5, 8, 9, 10, 11, 13, 15]
    recorder = world.ledger.engine.recorder
    with world.ledger.engine.reading() as c:
        size, index_of = recorder.leaf_indexes(c, asked)
        c.execute("SELECT position FROM pl_merkle_leaves ORDER BY position")
        held = [int(row["position"]) for row in c.fetchall()]
    assert size == len(held) and 8 not in held
    assert index_of == {p: held.index(p) for p in asked if p in held}


# -- the admin token: checked by the log alone -------------------------------------------


def _behind_its_back(url: str, sql: str, params: tuple[object, ...] = ()) -> None:
    """Run ``sql`` on the ledger's database behind its back (``{t}``: where its
    tables are; ``?`` placeholders)."""
    if url.startswith("sqlite:"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as con:
            con.execute(sql.format(t=""), params)
            con.commit()
        return
    from ledger.persistence import resolve_url
    from ledger.persistence.pg_pool import plain_connection

    env = resolve_url(url).env
    with plain_connection(env) as conn:
        conn.execute(sql.format(t=f"{env['POSTGRES_SCHEMA']}.").replace("?", "%s"), params)


def test_an_admin_token_is_checked_by_the_log_whatever_the_token_view_holds(
    shared_url: str,
) -> None:
    from ledger.access import hash_token
    from ledger.errors import AuthenticationError

    with Ledger.open(shared_url) as led:
        admin = led.admin()
        token = admin.bootstrap_admin_token()
        assert token is not None
        admin.grant("agent-1", scope="s", roles=["read"])
        agent = admin.issue_token("agent-1")

        # Given the token view emptied behind the ledger's back: the admin token
        # still passes (verify, an admin command, must run to name the tampering)
        _behind_its_back(shared_url, "DELETE FROM {t}pl_tokens")
        assert led.admin(token).access_history("agent-1")
        assert not led.verify().ok

        # A row forged there for a token the log never issued passes nothing
        forged = "plt_forged-admin-token"
        _behind_its_back(
            shared_url,
            "INSERT INTO {t}pl_tokens (token_hash, subject, issued_pos, issued_at) "
            "VALUES (?, '@admin', 1, 0)",
            (hash_token(forged),),
        )
        with pytest.raises(AuthenticationError, match=r"^admin token is unknown$"):
            led.admin(forged)

        # A principal's token is refused as one (the view, where it holds the row,
        # says whose), and as unknown where the view cannot be read at all
        _behind_its_back(
            shared_url,
            "INSERT INTO {t}pl_tokens (token_hash, subject, issued_pos, issued_at) "
            "VALUES (?, 'agent-1', 1, 0)",
            (hash_token(agent),),
        )
        with pytest.raises(AuthenticationError, match="belongs to 'agent-1', not to the admin"):
            led.admin(agent)
        _behind_its_back(shared_url, "DROP TABLE {t}pl_tokens")
        with pytest.raises(AuthenticationError, match=r"^admin token is unknown$"):
            led.admin(agent)
        assert led.admin(token).access_history("agent-1")


def test_verify_on_postgresql_outlasts_the_servers_idle_timeout(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from ledger import verification

    # Given a ledger whose sessions the server ends after 1 s idle in a transaction
    url = f"{pg_url}&idle_timeout=1"
    with Ledger.open(url) as led:
        led.admin().grant("agent-1", scope="s", roles=["propose", "read"])
        agent = led.authenticate(led.admin().issue_token("agent-1"))
        agent.propose(scope="s", claim_key="k", value=1, kind="fact", id="F1")
        # and verify's comparison of the views taking longer than that in Python
        compare = verification._differences

        def slow(*args: Any) -> Any:
            time.sleep(1.5)
            yield from compare(*args)

        monkeypatch.setattr(verification, "_differences", slow)
        # Then it still checks everything, and finds the ledger sound
        report = led.verify()
        assert report.ok and "views" in report.checks, report
