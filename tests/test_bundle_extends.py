"""A later compliance bundle proves, offline, that its head extends the heads an
auditor already holds (earlier bundles, heads, heads files).

Bundles carry inclusion proofs against their own head only: alone, an earlier
bundle handed over as the latest one, or a bundle written from a log rewritten
and re-signed by whoever holds the key, verifies. ``write_bundle(extends=…)``
(``provledger bundle --extends``) puts in the signed manifest each earlier head
with the RFC 9162 consistency proof from it, refusing when the log does not
extend it; ``verify_bundle(earlier=…)`` (``verify-bundle --earlier``) checks the
heads the auditor holds against it.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ledger import Ledger, merkle
from ledger.bundle import verify_bundle, write_bundle
from ledger.bundle.extends import held_head
from ledger.cli import main
from ledger.errors import InvalidHeadError
from ledger.heads import SignedHead, generate_key, publish_head, sign_head
from ledger.merkle import LogDigest

from .attacks import Scene, build_scene, rewrite_before_head
from .conftest import Clock
from .test_bundle_truth import rewrite

FIXTURES = Path(__file__).parent / "fixtures"

#: The scene's ledger: an SQLite file, which its attacks rewrite with another connection
#: (the extension itself is also proved on PostgreSQL, below).
SQLITE = pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)


@pytest.fixture
def scene(open_ledger: Callable[..., Ledger], tmp_path: Path, clock: Clock) -> Scene:
    """E1 <- M1 (E1 revoked, M1 STALE), two heads kept in ``heads.jsonl``."""
    return build_scene(open_ledger(), tmp_path, clock)


def _head(path: Path) -> SignedHead:
    with zipfile.ZipFile(path) as archive:
        return SignedHead.from_json(archive.read("head.json").decode())


def _manifest(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as archive:
        manifest: dict[str, Any] = json.loads(archive.read("manifest.json"))
    return manifest


def _re_signed(path: Path, key: Path, out: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """``path`` with its manifest changed by ``change``, signed again with ``key``
    (the manifest and the archive), as whoever holds the key can."""
    return rewrite(path, key, out, lambda manifest, _files: change(manifest))


def _two_bundles(scene: Scene, tmp_path: Path, clock: Clock) -> tuple[Path, Path]:
    """M1's bundle now (``early.zip``), then, after more events and a head kept,
    its bundle written with ``extends`` the early bundle and the heads file."""
    early = _early_bundle_then_more(scene, tmp_path, clock, days=30)
    publish_head(scene.ledger, scene.key, scene.heads)
    scene.reviewer.accept("G1")
    later = tmp_path / "later.zip"
    write_bundle(scene.reviewer, "M1", scene.key, later, extends=[early, scene.heads])
    return early, later


# -- an honest log: the proof is carried and checked -----------------------------------


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgres"], indirect=True)
def test_a_later_bundle_proves_it_extends_the_earlier_bundle_and_heads(
    scene: Scene, tmp_path: Path, clock: Clock
) -> None:
    # Given a bundle, and one written a month later with --extends it and the heads file
    early, later = _two_bundles(scene, tmp_path, clock)
    first, newest, last = _head(early), held_head(scene.heads).head, _head(later)
    assert first.tree_size < newest.tree_size < last.tree_size

    # Then its signed manifest carries each earlier head with a consistency proof
    entries = _manifest(later)["extends"]
    assert [SignedHead.from_json(e["head"]) for e in entries] == [first, newest]
    for entry, earlier in zip(entries, (first, newest), strict=True):
        proof = [bytes.fromhex(step) for step in entry["proof"]]
        assert proof and merkle.verify_consistency(
            earlier.tree_size,
            last.tree_size,
            bytes.fromhex(earlier.root),
            bytes.fromhex(last.root),
            proof,
        )

    # And the auditor holding the early bundle and the heads file checks it offline
    report = verify_bundle(later, scene.public_key, earlier=[early, scene.heads])
    assert report.ok, report.problem
    assert [h.head for h in report.earlier] == [first, newest]
    assert report.extends == (first, newest)
    # Without --earlier the carried proofs are checked all the same
    alone = verify_bundle(later, scene.public_key)
    assert alone.ok and alone.extends == (first, newest) and alone.earlier == ()
    # A bundle written with no earlier head has no extends key (the format as before)
    assert "extends" not in _manifest(early)


def _early_bundle_then_more(scene: Scene, tmp_path: Path, clock: Clock, days: int = 1) -> Path:
    """M1's bundle written (``early.zip``), then, ``days`` later, F1 accepted."""
    early = tmp_path / "early.zip"
    write_bundle(scene.reviewer, "M1", scene.key, early)
    clock.advance(days=days)
    scene.reviewer.accept("F1")
    return early


@SQLITE
def test_an_earlier_head_as_a_head_file_or_a_head_matches_by_tree_size_and_root(
    scene: Scene, tmp_path: Path, clock: Clock
) -> None:
    early, later = _two_bundles(scene, tmp_path, clock)
    # A head of the same size and root as the early one, signed at another time
    first = _head(early)
    again = sign_head(scene.key, first.digest, first.time + timedelta(seconds=1))
    indented = tmp_path / "again.json"
    indented.write_text(json.dumps(again.to_json(), indent=2))

    for given in (indented, again, str(early)):
        report = verify_bundle(later, scene.public_key, earlier=[given])
        assert report.ok, (given, report.problem)

    # The head of the bundle itself is the same size: its root must be the same
    assert verify_bundle(later, scene.public_key, earlier=[later]).ok


def test_the_previous_versions_bundle_still_verifies_with_and_without_earlier() -> None:
    bundle, public = (
        FIXTURES / "bundle-revalidated-0.2.zip",
        FIXTURES / "bundle-revalidated-0.2.pub",
    )
    assert "extends" not in _manifest(bundle)

    report = verify_bundle(bundle, public)
    assert report.ok and report.extends == ()
    assert verify_bundle(bundle, public, earlier=[bundle]).ok


# -- what it refuses ------------------------------------------------------------------


@SQLITE
def test_a_log_rewritten_and_re_signed_is_refused_by_earlier_and_by_extends(
    scene: Scene, tmp_path: Path, clock: Clock
) -> None:
    # Given the auditor's bundle of M1, which carries E1's revocation, and events since
    early = _early_bundle_then_more(scene, tmp_path, clock)
    # When whoever holds the database and the key rewrites the revocation's
    # reason (event and leaf, views rebuilt) and writes a new bundle
    rewrite_before_head(scene)
    rewritten = tmp_path / "rewritten.zip"
    write_bundle(scene.reviewer, "M1", scene.key, rewritten)
    with zipfile.ZipFile(rewritten) as archive:
        assert "the page is fine" in archive.read("summary.txt").decode()

    # Then alone it verifies: nothing in it is inconsistent
    assert verify_bundle(rewritten, scene.public_key).ok
    # But against the bundle the auditor holds it is refused
    report = verify_bundle(rewritten, scene.public_key, earlier=[early])
    assert not report.ok
    assert report.problem is not None and report.problem.startswith(
        "the bundle does not show that its head"
    )
    # And the writer refuses to prove an extension the log does not make
    refused = tmp_path / "refused.zip"
    first = _head(early)
    with pytest.raises(InvalidHeadError) as caught:
        write_bundle(scene.reviewer, "M1", scene.key, refused, extends=[early])
    assert str(caught.value).startswith(
        f"bundle refused: the log does not extend the earlier head in {early} (tree size "
        f"{first.tree_size}, signed {first.time.isoformat()}): "
    )
    assert "the log was rewritten after it was taken" in str(caught.value)
    assert not refused.exists()
    # And a proof over the rewritten leaves, put in the manifest and signed, fails
    last = _head(rewritten)
    tree = merkle.MerkleTree(_stored_leaves(scene))
    assert tree.size == last.tree_size  # the rewritten log's tree is the bundle's
    assert first.tree_size < tree.size
    proof = tree.consistency_path(first.tree_size)

    def claim(manifest: dict[str, Any]) -> None:
        manifest["extends"] = [{"head": first.to_json(), "proof": [p.hex() for p in proof]}]

    forged = _re_signed(rewritten, scene.key, tmp_path / "forged.zip", claim)
    for earlier in ([], [early]):
        report = verify_bundle(forged, scene.public_key, earlier=earlier)
        assert not report.ok
        assert report.problem is not None and report.problem.startswith(
            "the earlier head in manifest.json's extends[0] (tree size "
        )
        assert "the log was rewritten after it was taken" in report.problem


def _stored_leaves(scene: Scene) -> list[bytes]:
    return [
        bytes(row[0])
        for row in scene.raw.one("SELECT leaf FROM pl_merkle_leaves ORDER BY position")
    ]


@SQLITE
def test_an_earlier_bundle_replayed_as_the_later_one_is_refused(
    scene: Scene, tmp_path: Path, clock: Clock
) -> None:
    early, later = _two_bundles(scene, tmp_path, clock)

    report = verify_bundle(early, scene.public_key, earlier=[later])

    assert not report.ok
    assert report.problem == (
        f"the bundle's head ({_sized(_head(early))}) is older than the head you hold in "
        f"{later} ({_sized(_head(later))}): an earlier bundle given as a later one, or a "
        "log cut short"
    )


def _sized(head: SignedHead) -> str:
    return f"tree size {head.tree_size}, signed {head.time.isoformat()}"


@SQLITE
def test_a_later_bundle_without_the_proof_says_how_to_get_one(
    scene: Scene, tmp_path: Path, clock: Clock
) -> None:
    early = _early_bundle_then_more(scene, tmp_path, clock)
    plain = tmp_path / "plain.zip"
    write_bundle(scene.reviewer, "M1", scene.key, plain)  # no --extends

    report = verify_bundle(plain, scene.public_key, earlier=[early])

    assert not report.ok
    assert report.problem == (
        f"the bundle does not show that its head ({_sized(_head(plain))}) extends the "
        f"earlier head in {early} ({_sized(_head(early))}): its manifest carries no "
        "consistency proof from that head; ask its writer for one written with "
        "`provledger bundle … --extends` that head"
    )
    assert verify_bundle(plain, scene.public_key).ok  # alone it verifies


def _flip_proof_byte(manifest: dict[str, Any]) -> None:
    proof = manifest["extends"][0]["proof"]
    proof[0] = ("00" if proof[0][:2] != "00" else "11") + proof[0][2:]


def _drop_proof_step(manifest: dict[str, Any]) -> None:
    manifest["extends"][0]["proof"].pop()


def _shrink_head(manifest: dict[str, Any]) -> None:
    manifest["extends"][0]["head"]["tree_size"] -= 1


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (_flip_proof_byte, "the consistency proof from it to the head of"),
        (_drop_proof_step, "the consistency proof from it to the head of"),
        (_shrink_head, "is not signed by the bundle's key: it was altered"),
    ],
    ids=["proof-byte", "proof-step-removed", "head-size"],
)
@SQLITE
def test_a_tampered_proof_in_the_manifest_is_refused(
    scene: Scene,
    tmp_path: Path,
    clock: Clock,
    change: Callable[[dict[str, Any]], None],
    named: str,
) -> None:
    early, later = _two_bundles(scene, tmp_path, clock)
    forged = _re_signed(later, scene.key, tmp_path / "forged.zip", change)

    for earlier in ([], [early]):
        report = verify_bundle(forged, scene.public_key, earlier=earlier)
        assert not report.ok
        assert report.problem is not None
        assert report.problem.startswith(
            "the earlier head in manifest.json's extends[0] (tree size"
        )
        assert named in report.problem


@SQLITE
def test_an_extends_entry_of_the_wrong_shape_is_named(
    scene: Scene, tmp_path: Path, clock: Clock
) -> None:
    _early, later = _two_bundles(scene, tmp_path, clock)

    def odd(manifest: dict[str, Any]) -> None:
        manifest["extends"][1]["proof"] = 7

    forged = _re_signed(later, scene.key, tmp_path / "odd.zip", odd)
    report = verify_bundle(forged, scene.public_key)
    assert report.problem == "manifest.json is malformed: extends[1].proof is a number"


@SQLITE
def test_an_earlier_head_signed_by_another_key_is_refused(
    scene: Scene, tmp_path: Path, clock: Clock
) -> None:
    early, later = _two_bundles(scene, tmp_path, clock)
    generate_key(tmp_path / "other")
    first = _head(early)
    foreign = sign_head(tmp_path / "other", first.digest, first.time)
    path = tmp_path / "foreign.json"
    path.write_text(foreign.dumps() + "\n")

    # The writer refuses it, naming the file, and writes nothing
    out = tmp_path / "never.zip"
    with pytest.raises(InvalidHeadError, match=r"was signed by key .*, not by the signing key"):
        write_bundle(scene.reviewer, "M1", scene.key, out, extends=[path])
    assert not out.exists()
    # The verifier too, with the pinned key or with the bundle's own
    pinned = verify_bundle(later, scene.public_key, earlier=[path])
    assert pinned.problem is not None and pinned.problem.startswith(
        f"the earlier head in {path} ({_sized(first)}) was signed by key "
    )
    assert "not by the trusted key" in pinned.problem
    unpinned = verify_bundle(later, earlier=[path])
    assert (
        unpinned.problem is not None and "not by the bundle's key (not pinned)" in unpinned.problem
    )


@SQLITE
def test_an_earlier_head_of_the_same_size_with_another_root_is_refused(
    scene: Scene, tmp_path: Path, clock: Clock
) -> None:
    _early, later = _two_bundles(scene, tmp_path, clock)
    last = _head(later)
    other = ("0" if last.root[0] != "0" else "1") + last.root[1:]
    fork = sign_head(
        scene.key, LogDigest(size=last.tree_size, position=last.position, root=other), last.time
    )

    report = verify_bundle(later, scene.public_key, earlier=[fork])

    assert not report.ok and report.problem is not None
    assert "has another root or last position for the same tree size" in report.problem


@SQLITE
def test_what_an_earlier_head_file_may_be(scene: Scene, tmp_path: Path) -> None:
    # A heads file: its last head, the newest (the scene kept two)
    kept = [SignedHead.from_json(line) for line in scene.heads.read_text().splitlines()]
    newest = held_head(scene.heads)
    assert len(kept) == 2 and kept[0].tree_size < kept[1].tree_size
    assert newest.head == kept[1] and newest.source == str(scene.heads)
    # What is no earlier head is refused, naming the file and why
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    cut = tmp_path / "cut.jsonl"
    cut.write_text(scene.heads.read_text() + '{"version": 1}\n')
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    no_head = tmp_path / "no-head.zip"
    with zipfile.ZipFile(no_head, "w") as archive:
        archive.writestr("manifest.json", "{}")
    for path, why in [
        (empty, "it holds no signed head"),
        (cut, "line 3: the signed head lacks 'tree_size'"),
        (tmp_path, "Is a directory"),
        (fifo, "it is not a regular file"),  # not waited on for a writer
        (no_head, "it is a zip archive without head.json, no bundle"),
        (tmp_path / "missing.json", "No such file or directory"),
    ]:
        with pytest.raises(InvalidHeadError) as caught:
            held_head(path)
        assert str(caught.value) == f"cannot read an earlier signed head from {str(path)!r}: {why}"


# -- the command line ------------------------------------------------------------------


@SQLITE
def test_the_commands_prove_and_check_the_extension(
    scene: Scene, tmp_path: Path, clock: Clock
) -> None:
    runner = CliRunner()
    env = {"PROVLEDGER_URL": scene.ledger.url, "PROVLEDGER_TOKEN": scene.reviewer_token}

    def run(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(main, list(args), env=env)
        return result.exit_code, result.stdout, result.stderr

    key, pub = str(scene.key), str(scene.public_key)
    early, later = str(tmp_path / "early.zip"), str(tmp_path / "later.zip")
    assert run("bundle", "M1", "--key", key, "-o", early)[0] == 0
    code, out, _ = run("verify-bundle", early, "--public-key", pub)
    assert code == 0
    assert out.splitlines()[-1] == (
        "not proved: anything about events after its head (tree size "
        f"{_head(Path(early)).tree_size}), "
        "nor that the log still holds what earlier heads showed (give the heads or bundles "
        "you hold with --earlier)"
    )
    clock.advance(days=1)
    scene.reviewer.accept("F1")

    code, out, err = run("bundle", "M1", "--key", key, "-o", later, "--extends", early)
    assert code == 0, err
    size = _head(Path(early)).tree_size
    assert out.rstrip().endswith(
        f"; its head extends the earlier head in {early} (tree size {size}), proved in its manifest"
    )
    code, out, err = run("verify-bundle", later, "--public-key", pub, "--earlier", early)
    assert code == 0, err
    lines = out.splitlines()
    assert "by the trusted key, key id " in lines[0]
    assert f"; it extends the head you hold in {early} (tree size {size}); " in lines[0]
    assert lines[-1] == (
        "not proved: anything about events after its head (tree size "
        f"{_head(Path(later)).tree_size})"
    )
    code, out, _ = run("verify-bundle", later, "--public-key", pub)
    assert (
        code == 0 and f"; its manifest proves it extends earlier heads of tree size {size} (" in out
    )
    code, out, _ = run("verify-bundle", later, "--json", "--earlier", early)
    answer = json.loads(out)
    assert code == 0 and answer["ok"] and [h["tree_size"] for h in answer["extends"]] == [size]
    assert answer["earlier"][0]["file"] == early

    # The old bundle given as the later one: exit 1, named
    code, _, err = run("verify-bundle", early, "--public-key", pub, "--earlier", later)
    assert code == 1
    assert err.startswith("error: bundle check failed: the bundle's head (tree size ")
    assert f"is older than the head you hold in {later}" in err
    # An earlier file that holds no head: could not check, exit 3, named
    code, _, err = run("verify-bundle", later, "--earlier", pub)
    assert code == 3 and err.startswith(f"error: cannot read an earlier signed head from '{pub}'")

    # A rewritten log (as many events): the writer refuses, exit 1, writes nothing
    rewrite_before_head(scene)
    refused = str(tmp_path / "refused.zip")
    code, _, err = run("bundle", "M1", "--key", key, "-o", refused, "--extends", later)
    assert code == 1
    assert err.startswith(
        f"error: bundle refused: the log does not extend the earlier head in {later}"
    )
    assert not os.path.exists(refused)
    rewritten = str(tmp_path / "rewritten.zip")
    assert run("bundle", "M1", "--key", key, "-o", rewritten)[0] == 0
    code, _, err = run("verify-bundle", rewritten, "--public-key", pub, "--earlier", later)
    assert code == 1
    assert err.startswith(f"error: bundle check failed: the earlier head in {later} (tree size ")
    assert "has another root or last position for the same tree size" in err
    # One more event: a bundle of a larger tree, with no proof from the head held
    scene.reviewer.accept("G1")
    grown = str(tmp_path / "grown.zip")
    assert run("bundle", "M1", "--key", key, "-o", grown)[0] == 0
    code, _, err = run("verify-bundle", grown, "--public-key", pub, "--earlier", later)
    assert code == 1
    assert err.startswith("error: bundle check failed: the bundle does not show that its head")
    assert "`provledger bundle … --extends` that head" in err


def test_an_earlier_bundle_is_matched_record_by_record_whatever_id_shows_them(
    tmp_path: Path,
) -> None:
    # Given F1 in p and another F1 in q: y (in q only) is shown q's as F1, and z
    # (in both) is shown p's as F1 and q's as F1@@q
    with Ledger.open("memory:") as led:
        admin = led.admin()
        admin.grant("agent", scope="p", roles=["propose", "read"])
        admin.grant("agent2", scope="q", roles=["propose", "read"])
        admin.grant("y", scope="q", roles=["read", "audit"])
        for scope in ("p", "q"):
            admin.grant("z", scope=scope, roles=["read", "audit"])
        agent, agent2, y, z = (
            led.authenticate(admin.issue_token(who)) for who in ("agent", "agent2", "y", "z")
        )
        agent.propose("p", "k", 1, "fact", id="F1")
        agent2.propose("q", "k", 2, "fact", id="F1")
        key = tmp_path / "k"
        generate_key(key)
        for name, session, rid in (("y", y, "F1"), ("zp", z, "F1"), ("zq", z, "F1@@q")):
            write_bundle(session, rid, key, tmp_path / f"{name}.zip")
    public = tmp_path / "k.pub"
    # Then z's bundle of p's F1 is not held to y's bundle of q's F1, and z's of q's
    # is held to it (the same record, named otherwise)
    assert verify_bundle(tmp_path / "zp.zip", public, earlier=[tmp_path / "y.zip"]).ok
    assert verify_bundle(tmp_path / "zq.zip", public, earlier=[tmp_path / "y.zip"]).ok

    def drop(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        entry = manifest["events"].pop()
        files.pop(entry["file"])

    short = rewrite(tmp_path / "zq.zip", key, tmp_path / "short.zip", drop)
    report = verify_bundle(short, public, earlier=[tmp_path / "y.zip"])
    assert any("which the bundle you hold in" in p for p in report.problems), report.problems
