"""A bundle whose own events contradict what it states fails, re-signed or not.

Whoever holds the ledger's key can re-sign a bundle it edited: no signature
stops that. What the verifier can still refuse is a bundle whose carried events
could never have been a ledger's: an event the status machine does not allow
after the ones before it (a withheld event's listed type included), a stale
marking with no revocation (or supersession) of its cause before it, a record
ACCEPTED (or stated VALID) while resting on one withdrawn, a delivery's bytes
withheld with nothing in them to withhold. Bundles written from real histories
(revocation and revalidation, supersession, a capture replacing a capture,
expiry, ancestors in another scope, corrections, rejection) still verify, and
their summary tells every stale marking and correction.
"""

from __future__ import annotations

import base64
import json
import re
import zipfile
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgpack
import pytest

from ledger import Kind, Ledger, merkle
from ledger.bundle import verify_bundle, write_bundle
from ledger.bundle.archive import SIGNATURE_PREFIX, _unsigned_archive
from ledger.heads import generate_key, head_message, load_private_key
from ledger.serialization import pack, unpack

from .conftest import World
from .test_bundle_truth import revoke_a_chain, rewrite

pytestmark = pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)

Files = dict[str, bytes]


def _late(world: World, tmp_path: Path) -> Path:
    """E1 <- M1 <- R1 accepted, R1 delivered; E1 revoked (M1, R1 STALE); E2
    captured and accepted, M1 revalidated on E2, R1 revalidated: R1's bundle."""
    agent, reviewer = world.agent, world.reviewer
    revoke_a_chain(world, tmp_path)  # with the key
    agent.capture(scope="proj-a", uri="https://x.test/doc2", content=b"retries on", id="E2")
    reviewer.accept("E2")
    reviewer.revalidate("M1", note="re-based", parents=["E2"])
    reviewer.revalidate("R1", note="checked")
    write_bundle(reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    return tmp_path / "r1.zip"


def _late_listed(world: World, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """:func:`_late`'s bundle, and its manifest (to find its events' positions)."""
    path = _late(world, tmp_path)
    return path, json.loads(zipfile.ZipFile(path).read("manifest.json"))


def _position(manifest: dict[str, Any], record: str, kind: str) -> int:
    [position] = [
        e["position"] for e in manifest["events"] if (e["record"], e["type"]) == (record, kind)
    ]
    return int(position)


def _positions(manifest: dict[str, Any], record: str, kind: str) -> list[int]:
    return [
        int(e["position"]) for e in manifest["events"] if (e["record"], e["type"]) == (record, kind)
    ]


def _drop(manifest: dict[str, Any], files: Files, positions: Iterable[int]) -> None:
    """Leave the events at ``positions`` out of the manifest, the archive, prov.json
    (their activities and every relation naming them) and summary.txt (their lines)."""
    gone = set(positions)
    for entry in [e for e in manifest["events"] if e["position"] in gone]:
        manifest["events"].remove(entry)
        files.pop(str(entry["file"]), None)
    prov = json.loads(files["prov.json"])
    acts = {a for a, attrs in prov["activity"].items() if int(attrs["pl:position"]["$"]) in gone}
    for act in acts:
        del prov["activity"][act]
    for name in [n for n in prov if n not in ("prefix", "activity", "entity", "agent")]:
        for relation in prov[name].values():  # a basis replaced by a dropped event is not
            if (relation.get("pl:replacedBy") or {}).get("$") in acts:
                del relation["pl:replacedBy"]
        kept = {
            k: r
            for k, r in prov[name].items()
            if not any((v.get("$") if isinstance(v, dict) else v) in acts for v in r.values())
        }
        if kept:
            prov[name] = kept
        else:
            del prov[name]
    files["prov.json"] = json.dumps(prov, indent=2, sort_keys=True).encode()
    summary = files["summary.txt"].decode().splitlines()
    summary = [line for line in summary if not any(f"(log position {p})" in line for p in gone)]
    files["summary.txt"] = ("\n".join(summary) + "\n").encode()


def _restate(manifest: dict[str, Any], files: Files, rid: str, status: str, validity: str) -> None:
    """State ``rid`` as ``status`` / ``validity`` in every file that states it."""
    for entry in manifest["records"]:
        if entry["id"] == rid:
            old = (entry["status"], entry["validity"])
            entry.update(status=status, validity=validity)
    prov = json.loads(files["prov.json"])
    prov["entity"][f"rec:{rid}"].update({"pl:status": status, "pl:validity": validity})
    prov["entity"][f"rec:{rid}"].pop("pl:reason", None)
    files["prov.json"] = json.dumps(prov, indent=2, sort_keys=True).encode()
    summary = files["summary.txt"].decode()
    summary = re.sub(
        rf"(evidence:  {rid}: .*)\({old[0]} / {old[1]}\)", rf"\1({status} / {validity})", summary
    )
    summary = re.sub(rf"\b{rid} \((\w+), {old[0]}\)", rf"{rid} (\1, {status})", summary)
    files["summary.txt"] = summary.encode()


def _forge(path: Path, change: Callable[[dict[str, Any], Files], None]) -> Any:
    """``path`` changed by ``change`` and re-signed with the ledger's own key, verified
    against that key; summary.txt's count of the events made to agree, as a careful
    forger would."""

    def changed(manifest: dict[str, Any], files: Files) -> None:
        change(manifest, files)
        withheld = sum(1 for e in manifest["events"] if e["file"] is None)
        count = f"events:    {len(manifest['events']) - withheld} included with their stored"
        count += " bytes and inclusion proofs"
        if withheld:
            count += f"; {withheld} listed by leaf hash only (their bytes name a record …)"
        files["summary.txt"] = re.sub(rb"(?m)^events:    .*$", count.encode(), files["summary.txt"])

    forged = rewrite(path, path.parent / "k", path.parent / "forged.zip", changed)
    return verify_bundle(forged, path.parent / "k.pub")


def _withholding(position: int) -> Callable[[dict[str, Any], Files], None]:
    """A change withholding the bytes of the event at ``position`` (listed by its
    leaf only)."""

    def withhold(manifest: dict[str, Any], files: Files) -> None:
        for entry in manifest["events"]:
            if entry["position"] == position:
                del files[entry["file"]]
                entry["file"] = None

    return withhold


def test_a_summary_counting_events_otherwise_than_the_manifest_lists_is_refused(
    world: World, tmp_path: Path
) -> None:
    path, manifest = _late_listed(world, tmp_path)
    revoked = _position(manifest, "E1", "Revoked")

    # Given an event's bytes dropped from the archive and listed as withheld, the
    # summary left saying every event is included
    forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", _withholding(revoked))
    listed = len(manifest["events"])
    assert (
        f"summary.txt counts {listed} events with their bytes and 0 withheld, but "
        f"manifest.json lists {listed - 1} and 1"
    ) in verify_bundle(forged, tmp_path / "k.pub").problems


# -- what the events carried contradict -------------------------------------------------------


def test_a_record_accepted_on_a_revoked_basis_is_refused(world: World, tmp_path: Path) -> None:
    path, manifest = _late_listed(world, tmp_path)
    revoked, accepted = _position(manifest, "E1", "Revoked"), _position(manifest, "M1", "Accepted")

    # Given everything after E1's revocation left out (the stale markings, E2, the
    # revalidations) and M1 and R1 stated ACCEPTED / VALID, E1 still REVOKED
    def before_the_marking(manifest: dict[str, Any], files: Files) -> None:
        _drop(
            manifest, files, [e["position"] for e in manifest["events"] if e["position"] > revoked]
        )
        manifest["records"] = [r for r in manifest["records"] if r["id"] != "E2"]
        prov = json.loads(files["prov.json"])
        prov["entity"] = {
            k: v for k, v in prov["entity"].items() if k != "rec:E2" and not k.startswith("basis:")
        }
        for name in [n for n in prov if n not in ("prefix", "activity", "entity", "agent")]:
            prov[name] = {
                k: r
                for k, r in prov[name].items()
                if "rec:E2" not in json.dumps(r) and "basis:" not in json.dumps(r)
            }
        files["prov.json"] = json.dumps(prov, indent=2, sort_keys=True).encode()
        summary = files["summary.txt"].decode().splitlines()
        summary = [s for s in summary if not s.startswith("evidence:  E2")]
        summary = [
            "ancestry:  M1 (inference, ACCEPTED), E1 (evidence, REVOKED)"
            if s.startswith("ancestry:")
            else s
            for s in summary
        ]
        files["summary.txt"] = ("\n".join(summary) + "\n").encode()
        for rid in ("M1", "R1"):
            _restate(manifest, files, rid, "ACCEPTED", "VALID")
        files["summary.txt"] = re.sub(
            rb"status:    \S+ / \S+.*", b"status:    ACCEPTED / VALID", files["summary.txt"]
        )

    report = _forge(path, before_the_marking)

    # Then it fails: M1 may not be ACCEPTED, nor VALID, on a REVOKED E1
    assert not report.ok
    assert report.problems == (
        f"M1 is ACCEPTED (its Accepted at position {accepted}), yet its basis E1 is REVOKED "
        f"(its Revoked at position {revoked}): withdrawing E1 marks every record resting on "
        "it STALE, and the bundle lists no such marking of M1",
        "manifest.json states M1 is VALID, but also that E1, which it rests on, is REVOKED / "
        "INVALID: a record is VALID only while every record it rests on is",
    )


def test_a_stale_marking_without_the_revocation_of_its_cause_is_refused(
    world: World, tmp_path: Path
) -> None:
    path, manifest = _late_listed(world, tmp_path)
    revoked = _position(manifest, "E1", "Revoked")
    accepted = _position(manifest, "E1", "Accepted")
    marked = _positions(manifest, "M1", "MarkedStale")[0]

    # Given E1's revocation left out and E1 stated ACCEPTED / VALID everywhere
    def unrevoked(manifest: dict[str, Any], files: Files) -> None:
        _drop(manifest, files, [revoked])
        _restate(manifest, files, "E1", "ACCEPTED", "VALID")

    report = _forge(path, unrevoked)

    # Then M1's stale marking, whose cause is E1, has no revocation before it
    assert not report.ok
    assert report.problem == (
        f"the MarkedStale of M1 at position {marked} names E1 as its cause, but the events the "
        f"bundle lists leave E1 ACCEPTED then (its Accepted at position {accepted}): a record "
        "is marked stale only after the revocation of its cause"
    )
    assert all("MarkedStale" in p for p in report.problems)  # nothing else gives it away


def test_a_withheld_event_listed_as_an_impossible_transition_is_refused(
    world: World, tmp_path: Path
) -> None:
    path, manifest = _late_listed(world, tmp_path)
    revoked = _position(manifest, "E1", "Revoked")
    accepted = _position(manifest, "E1", "Accepted")

    # Given E1's revocation withheld and told everywhere as a second acceptance, E1
    # stated ACCEPTED
    def withheld(manifest: dict[str, Any], files: Files) -> None:
        for entry in manifest["events"]:
            if entry["position"] == revoked:
                del files[entry["file"]]
                entry.update(file=None, type="Accepted")
        _restate(manifest, files, "E1", "ACCEPTED", "VALID")
        prov = json.loads(files["prov.json"])
        act = prov["activity"].pop(f"act:revoke-{revoked}")
        act.update({"prov:label": "Accepted E1", "prov:type": {"$": "pl:Acceptance"}})
        del act["pl:reason"]
        prov["activity"][f"act:accept-{revoked}"] = act
        del prov["wasInvalidatedBy"]
        for relation in prov["wasAssociatedWith"].values():
            if relation["prov:activity"] == f"act:revoke-{revoked}":
                relation["prov:activity"] = f"act:accept-{revoked}"
        files["prov.json"] = json.dumps(prov, indent=2, sort_keys=True).encode()
        files["summary.txt"] = re.sub(
            rb"revoked:   E1 (.*): doc changed", rb"approved:  E1 \1", files["summary.txt"]
        )

    report = _forge(path, withheld)

    # Then an Accepted cannot follow an Accepted, whatever bytes are withheld, nor a
    # stale marking caused by E1 follow no revocation of E1
    assert not report.ok
    assert report.problems[0] == (
        f"the Accepted of E1 at position {revoked} (bytes withheld: its type is manifest.json's "
        f"word) follows its Accepted at position {accepted}, which left E1 ACCEPTED, but a "
        "ledger writes an Accepted only of a record that is CANDIDATE"
    )
    assert all(p.startswith("the MarkedStale of ") for p in report.problems[1:3])
    # (and prov.json, not forged to match, states no use of E1 by that acceptance,
    # and stale markings informed by the revocation it no longer lists)
    assert all(p.startswith("prov.json ") for p in report.problems[3:])


def test_a_delivery_whose_bytes_are_withheld_for_nothing_is_refused(
    world: World, tmp_path: Path
) -> None:
    path, manifest = _late_listed(world, tmp_path)
    delivered = _position(manifest, "R1", "Delivered")

    report = _forge(path, _withholding(delivered))

    assert not report.ok
    assert report.problems == (
        f"the Delivered of R1 at position {delivered} (bytes withheld: its type is "
        "manifest.json's word) names no record but R1, whose proposal the bundle carries: "
        "nothing in a delivery's bytes is withheld then",
    )


def _on_an_expired_basis(world: World) -> tuple[Any, Any]:
    """M1 resting on E1, both accepted; E1 expired since (both NEEDS_REVALIDATION)."""
    agent, reviewer = world.agent, world.reviewer
    agent.capture(
        scope="proj-a", uri="https://x.test/d", content=b"d", id="E1",
        expires=world.clock.now + timedelta(days=1),
    )  # fmt: skip
    agent.propose(
        scope="proj-a", claim_key="m", value=1, kind=Kind.INFERENCE, parents=["E1"], id="M1"
    )
    reviewer.accept("E1")
    reviewer.accept("M1")
    world.clock.advance(days=2)
    return agent, reviewer


def test_a_record_stated_valid_on_a_basis_stated_otherwise_is_refused(
    world: World, tmp_path: Path
) -> None:
    # Given M1 resting on E1, which expired: both ACCEPTED / NEEDS_REVALIDATION
    _, reviewer = _on_an_expired_basis(world)
    generate_key(tmp_path / "k")
    write_bundle(reviewer, "M1", tmp_path / "k", tmp_path / "m1.zip")

    # When M1 is stated VALID everywhere
    def valid(manifest: dict[str, Any], files: Files) -> None:
        _restate(manifest, files, "M1", "ACCEPTED", "VALID")
        files["summary.txt"] = files["summary.txt"].replace(
            b"status:    ACCEPTED / NEEDS_REVALIDATION", b"status:    ACCEPTED / VALID"
        )

    report = _forge(tmp_path / "m1.zip", valid)

    assert report.problems == (
        "manifest.json states M1 is VALID, but also that E1, which it rests on, is ACCEPTED / "
        "NEEDS_REVALIDATION: a record is VALID only while every record it rests on is",
    )


def test_files_stating_a_record_otherwise_than_the_manifest_are_refused(
    world: World, tmp_path: Path
) -> None:
    path = _late(world, tmp_path)

    def prov_only(manifest: dict[str, Any], files: Files) -> None:
        prov = json.loads(files["prov.json"])
        prov["entity"]["rec:M1"]["pl:validity"] = "NEEDS_REVALIDATION"
        files["prov.json"] = json.dumps(prov).encode()

    report = _forge(path, prov_only)

    assert report.problems == (
        "prov.json states M1 is ACCEPTED / NEEDS_REVALIDATION, but manifest.json states it is "
        "ACCEPTED / VALID",
    )


# -- the archive's signature over files altered -----------------------------------------------


def test_a_file_altered_and_zipped_again_is_not_told_as_an_altered_signature(
    world: World, tmp_path: Path
) -> None:
    path = _late(world, tmp_path)
    archive = zipfile.ZipFile(path)
    files = {n: archive.read(n) for n in archive.namelist()}
    comment = archive.comment
    assert comment.startswith(SIGNATURE_PREFIX)

    # Given summary.txt altered, and the archive zipped again as the writer zips it,
    # its old signature kept
    files["summary.txt"] = files["summary.txt"].replace(b"doc changed", b"doc checked")
    (tmp_path / "rezipped.zip").write_bytes(_unsigned_archive(files) + comment)

    report = verify_bundle(tmp_path / "rezipped.zip", tmp_path / "k.pub")

    assert report.problems[0] == (
        "summary.txt was altered: its SHA-256 does not match the manifest"
    )
    assert report.problems[-1] == (
        "the archive's signature (its zip comment) does not verify: the archive was zipped "
        "again, in the writer's layout, around the altered files named above, keeping a "
        "signature made over other bytes"
    )
    assert not any("signature itself was altered" in p for p in report.problems)


# -- summary.txt tells every stale marking and correction -------------------------------------


def _summary(path: Path) -> list[str]:
    return zipfile.ZipFile(path).read("summary.txt").decode().splitlines()


def test_the_summary_tells_stale_periods_and_corrections(world: World, tmp_path: Path) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"a", id="E1")
    agent.propose(
        scope="proj-a", claim_key="r", value="on", kind=Kind.REPORT, parents=["E1"], id="R1"
    )
    agent.propose(
        scope="proj-a", claim_key="r2", value="off", kind=Kind.REPORT, parents=[], id="R2"
    )
    for rid in ("E1", "R1", "R2"):
        reviewer.accept(rid)
    delivery = reviewer.deliver("R1", recipient="ops@x.test")
    reviewer.revoke("E1", reason="doc changed")
    reviewer.issue_correction(delivery, note="R1 no longer holds", replacement="R2")
    agent.capture(scope="proj-a", uri="https://x.test/doc2", content=b"b", id="E2")
    reviewer.accept("E2")
    reviewer.revalidate("R1", note="re-based", parents=["E2"])
    generate_key(tmp_path / "k")
    write_bundle(reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    manifest = json.loads(zipfile.ZipFile(tmp_path / "r1.zip").read("manifest.json"))
    stale = _position(manifest, "R1", "MarkedStale")
    corrected = _position(manifest, "R1", "CorrectionIssued")
    revalidated = _position(manifest, "R1", "Revalidated")

    assert verify_bundle(tmp_path / "r1.zip", tmp_path / "k.pub").problems == ()
    lines = _summary(tmp_path / "r1.zip")
    when = world.clock.now.isoformat(timespec="seconds")
    # R1 was STALE from its marking to its revalidation, each told with who and why
    assert (
        f"stale:     by reviewer at {when} (log position {stale}): E1 was revoked: doc changed"
        in lines
    )
    assert (
        f"corrected: by reviewer at {when} (log position {corrected}): delivery {delivery}, "
        "replaced by R2: R1 no longer holds"
    ) in lines
    assert f"revalidated: by reviewer at {when} (log position {revalidated}): re-based" in lines
    history = [line for line in lines if re.match(r"\w+: +by ", line)]
    assert [line.split(":")[0] for line in history] == [
        "proposed", "approved", "delivered", "stale", "corrected", "revalidated",
    ]  # fmt: skip

    # And a summary that tells them otherwise than the events fails
    def cause(manifest: dict[str, Any], files: Files) -> None:
        files["summary.txt"] = files["summary.txt"].replace(
            b"E1 was revoked: doc changed", b"E1 was revoked: routine check"
        )

    report = _forge(tmp_path / "r1.zip", cause)
    assert report.problems == (
        f"summary.txt tells the MarkedStale of R1 at log position {stale} as 'stale:     by "
        f"reviewer at {when} (log position {stale}): E1 was revoked: routine check', but its "
        f"event says 'stale:     by reviewer at {when} (log position {stale}): E1 was revoked: "
        "doc changed'",
    )

    def untold(manifest: dict[str, Any], files: Files) -> None:
        files["summary.txt"] = b"\n".join(
            line for line in files["summary.txt"].split(b"\n") if not line.startswith(b"corrected:")
        )

    report = _forge(tmp_path / "r1.zip", untold)
    assert report.problems == (
        f"summary.txt does not tell the CorrectionIssued event of R1 at log position {corrected}",
    )


def test_a_line_the_writer_never_writes_is_refused(world: World, tmp_path: Path) -> None:
    path = _late(world, tmp_path)

    def note(manifest: dict[str, Any], files: Files) -> None:
        files["summary.txt"] = files["summary.txt"].replace(
            b"\nsigned head:", b"\nnote:      every source was checked in person\n\nsigned head:"
        )

    assert _forge(path, note).problems == (
        "summary.txt has a line the bundle writer never writes: "
        "'note:      every source was checked in person'",
    )


# -- bundles of real histories verify ---------------------------------------------------------


def _verifies(session: Any, rid: str, tmp_path: Path) -> Any:
    if not (tmp_path / "k").exists():
        generate_key(tmp_path / "k")
    write_bundle(session, rid, tmp_path / "k", tmp_path / f"{rid}.zip")
    report = verify_bundle(tmp_path / f"{rid}.zip", tmp_path / "k.pub")
    assert report.ok, report.problems
    return report


def test_a_revoked_and_revalidated_history_verifies(world: World, tmp_path: Path) -> None:
    path = _late(world, tmp_path)
    report = verify_bundle(path, tmp_path / "k.pub")
    assert report.ok and report.unchecked == (), report.problems
    lines = _summary(path)
    assert sum(1 for line in lines if line.lstrip().startswith("stale:")) == 2  # M1's, R1's


def test_a_superseded_basis_verifies_before_and_after_revalidation(
    world: World, tmp_path: Path
) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="f", value=1, kind=Kind.FACT, id="F1")
    agent.propose(
        scope="proj-a", claim_key="r", value="x", kind=Kind.REPORT, parents=["F1"], id="R1"
    )
    reviewer.accept("F1")
    reviewer.accept("R1")
    agent.propose(scope="proj-a", claim_key="f", value=2, kind=Kind.FACT, id="F2", supersedes="F1")
    reviewer.accept("F2")  # F1 SUPERSEDED, R1 STALE
    _verifies(reviewer, "R1", tmp_path)
    assert any(
        line.startswith("stale:") and line.endswith("F1 was superseded by F2")
        for line in _summary(tmp_path / "R1.zip")
    )
    reviewer.revalidate("R1", parents=["F2"])
    report = _verifies(reviewer, "R1", tmp_path)
    assert report.unchecked == ()
    _verifies(reviewer, "F2", tmp_path)


def test_an_expired_basis_replaced_on_revalidation_verifies(world: World, tmp_path: Path) -> None:
    agent, reviewer = _on_an_expired_basis(world)
    _verifies(reviewer, "M1", tmp_path)
    agent.capture(scope="proj-a", uri="https://x.test/d2", content=b"d2", id="E2")
    reviewer.accept("E2")
    reviewer.revalidate("M1", parents=["E2"])  # ACCEPTED, on a new basis
    report = _verifies(reviewer, "M1", tmp_path)
    assert report.unchecked == ()
    manifest = json.loads(zipfile.ZipFile(tmp_path / "M1.zip").read("manifest.json"))
    assert {r["id"]: r["validity"] for r in manifest["records"]} == {
        "M1": "VALID", "E2": "VALID", "E1": "NEEDS_REVALIDATION",
    }  # fmt: skip


def test_a_rejected_basis_and_a_candidate_revalidated_verify(world: World, tmp_path: Path) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="a", value=1, kind=Kind.FACT, id="A1")
    agent.propose(
        scope="proj-a", claim_key="c", value=2, kind=Kind.INFERENCE, parents=["A1"], id="C1"
    )
    reviewer.reject("A1", reason="unsupported")  # C1 stays a CANDIDATE
    _verifies(reviewer, "C1", tmp_path)
    agent.propose(scope="proj-a", claim_key="b", value=1, kind=Kind.FACT, id="B1")
    reviewer.accept("B1")
    agent.propose(
        scope="proj-a", claim_key="d", value=3, kind=Kind.INFERENCE, parents=["B1"], id="D1"
    )
    reviewer.revoke("B1", reason="wrong")  # D1, never accepted, STALE
    agent.propose(scope="proj-a", claim_key="b2", value=1, kind=Kind.FACT, id="B2")
    reviewer.accept("B2")
    reviewer.revalidate("D1", parents=["B2"])  # a CANDIDATE again
    _verifies(reviewer, "D1", tmp_path)
    reviewer.accept("D1")
    assert _verifies(reviewer, "D1", tmp_path).unchecked == ()


def test_ancestors_in_another_scope_verify(hidden_cause: tuple[Ledger, Any, Path]) -> None:
    # Given M1 in proj-a resting on H1 in proj-h, which the auditor may not see; H1
    # revoked (M1 STALE); R1 delivered and corrected (test_bundle_truth's fixture)
    ledger, auditor, tmp_path = hidden_cause
    admin = ledger.admin()
    agent = ledger.authenticate(admin.issue_token("agent-1"))
    reviewer = ledger.authenticate(admin.issue_token("reviewer"))
    report = _verifies(auditor, "R1", tmp_path)
    assert report.hidden == 1 and report.withheld == 3  # M1's proposal, both markings
    summary = "\n".join(_summary(tmp_path / "R1.zip"))
    assert "H1" not in summary and "secret" not in summary
    assert re.search(
        r"^stale:     by <hidden> at \S+ \(log position \d+\): a dependency outside your "
        "scopes was revoked$",
        summary,
        re.MULTILINE,
    )
    agent.capture(scope="proj-a", uri="https://x.test/e2", content=b"e2", id="E2")
    reviewer.accept("E2")
    reviewer.revalidate("M1", parents=["E2"])
    reviewer.revalidate("R1")
    # Then no ancestor is hidden now, yet M1's proposal and marking stay withheld
    report = _verifies(auditor, "R1", tmp_path)
    assert report.hidden == 0 and report.withheld == 3


def test_an_approval_by_the_proposer_is_refused_though_its_tree_is_rebuilt(
    world: World, tmp_path: Path
) -> None:
    path, manifest = _late_listed(world, tmp_path)
    accepted = _position(manifest, "R1", "Accepted")
    with world.ledger.engine.reading() as c:
        leaves = [leaf for _, leaf in world.ledger.engine.recorder.leaves(c)]

    # Given R1's approval rewritten as by its proposer, the tree rebuilt over it and
    # its head, proofs, summary and prov.json made again with the ledger's key
    def self_approved(manifest: dict[str, Any], files: Files) -> None:
        forged = list(leaves)
        entry = next(e for e in manifest["events"] if e["position"] == accepted)
        forged[entry["index"]] = _edited(files, accepted, actor="agent-1")
        entry["leaf"] = forged[entry["index"]].hex()
        root = _head_over(manifest, files, forged, tmp_path / "k")
        files["summary.txt"] = re.sub(
            rb"approved:  by reviewer (.*position %d\))" % accepted,
            rb"approved:  by agent-1 \1",
            re.sub(rb"root [0-9a-f]{64}", b"root " + root.hex().encode(), files["summary.txt"]),
        )
        prov = json.loads(files["prov.json"])
        for relation in prov["wasAssociatedWith"].values():
            if relation["prov:activity"] == f"act:accept-{accepted}":
                relation["prov:agent"] = "agent:agent-1"
        files["prov.json"] = json.dumps(prov, indent=2, sort_keys=True).encode()

    report = _forge(path, self_approved)

    assert report.problems == (
        f"the Accepted of R1 at position {accepted} is by agent-1, who proposed R1: a ledger "
        "never lets a proposer accept its own record",
    )


def _edited(files: dict[str, bytes], position: int, **fields: Any) -> bytes:
    """Change ``fields`` in the stored bytes of the event at ``position`` (in
    ``files``); its new Merkle leaf."""
    name = f"events/{position:012d}.bin"
    stored = msgpack.unpackb(files[name], raw=False)
    stored[4] = pack({**unpack(stored[4]), **fields})
    files[name] = msgpack.packb(stored, use_bin_type=True)
    return merkle.leaf_hash(files[name])


def _head_over(
    manifest: dict[str, Any], files: dict[str, bytes], leaves: list[bytes], key: Path
) -> bytes:
    """A head over ``leaves`` signed with ``key``, in the manifest and ``head.json``,
    and every listed event's inclusion path in that tree; the root."""
    size, root = merkle.root_of(leaves)
    head = dict(manifest["head"], tree_size=size, root=root.hex())
    when = datetime.fromisoformat(head["time"])
    signature = load_private_key(key).sign(head_message(size, head["position"], when, root))
    head["signature"] = base64.b64encode(signature).decode()
    manifest["head"] = head
    files["head.json"] = (json.dumps(head, indent=2) + "\n").encode()
    for entry in manifest["events"]:
        entry["path"] = [p.hex() for p in merkle.inclusion_path(leaves, entry["index"])]
    return root


# -- events whose place in the log or whose kind a ledger could not have written ---------


def _revoked_pair(world: World, tmp_path: Path) -> tuple[Path, dict[tuple[str, str], int]]:
    """M1 on E1, E1 revoked; M1's bundle (``may.zip``) and its events' positions."""
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/d", content=b"d", id="E1")
    agent.propose(
        scope="proj-a", claim_key="m", value=1, kind=Kind.INFERENCE, parents=["E1"], id="M1"
    )
    reviewer.accept("E1")
    reviewer.accept("M1")
    reviewer.revoke("E1", reason="doc was fake")
    generate_key(tmp_path / "k")
    may = tmp_path / "may.zip"
    write_bundle(reviewer, "M1", tmp_path / "k", may)
    manifest = json.loads(zipfile.ZipFile(may).read("manifest.json"))
    return may, {(e["record"], e["type"]): e["position"] for e in manifest["events"]}


def test_rewritten_events_appended_as_new_leaves_are_refused(world: World, tmp_path: Path) -> None:
    # Given a bundle whose key holder rewrote the revocation's reason, appended the
    # rewritten events to the real tree as new leaves and signed a head over it
    may, positions = _revoked_pair(world, tmp_path)
    engine = world.ledger.engine
    with engine.reading() as c:
        leaves = [leaf for _, leaf in engine.recorder.leaves(c)]

    def relocate(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        forged = list(leaves)
        for rid, kind in (("E1", "Revoked"), ("M1", "MarkedStale")):
            forged.append(_edited(files, positions[rid, kind], reason="routine refresh"))
            entry = next(e for e in manifest["events"] if e["position"] == positions[rid, kind])
            entry.update(index=len(forged) - 1, leaf=forged[-1].hex())
        _head_over(manifest, files, forged, tmp_path / "k")

    forged = rewrite(may, tmp_path / "k", tmp_path / "forged.zip", relocate)
    # Then it is refused: an event's leaf comes before its position, in log order
    report = verify_bundle(forged, tmp_path / "k.pub")
    assert not report.ok
    revoked = positions["E1", "Revoked"]
    assert any(
        p.startswith(f"the Revoked event at position {revoked} is listed as leaf ")
        and p.endswith(f"is leaf {revoked - 1} at most (one leaf per event, in order)")
        for p in report.problems
    ), report.problems


def test_a_later_bundle_leaving_out_events_an_earlier_one_lists_is_refused(
    world: World, tmp_path: Path
) -> None:
    # Given the auditor's bundle of M1 after E1's revocation, and a later one, written
    # with --extends, from which the key holder dropped the revocation's events
    may, positions = _revoked_pair(world, tmp_path)
    world.agent.propose(scope="proj-a", claim_key="o", value=1, kind=Kind.FACT, id="O1")
    world.reviewer.accept("O1")
    june = tmp_path / "june.zip"
    write_bundle(world.reviewer, "M1", tmp_path / "k", june, extends=[may])
    gone = {positions["E1", "Revoked"], positions["M1", "MarkedStale"]}

    def omit(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        for entry in [e for e in manifest["events"] if e["position"] in gone]:
            manifest["events"].remove(entry)
            files.pop(entry["file"])

    forged = rewrite(june, tmp_path / "k", tmp_path / "forged.zip", omit)
    # Then, given the earlier bundle, every event it lists must be there
    report = verify_bundle(forged, tmp_path / "k.pub", earlier=[may])
    for rid, kind in (("E1", "Revoked"), ("M1", "MarkedStale")):
        assert (
            f"{rid}'s {kind} event at position {positions[rid, kind]}, which the bundle you "
            f"hold in {may} lists, is not listed here with the same leaf"
        ) in "\n".join(report.problems)
    assert verify_bundle(june, tmp_path / "k.pub", earlier=[may]).ok  # the real one


def test_a_later_bundle_listing_an_earlier_ones_event_as_another_type_is_refused(
    world: World, tmp_path: Path
) -> None:
    # Given the auditor's bundle of M1 showing E1's revocation, and a later one in
    # which the key holder withheld the revocation's bytes and listed its leaf as an
    # erasure (a type no status rule refutes), E1 stated ACCEPTED
    may, positions = _revoked_pair(world, tmp_path)
    june = tmp_path / "june.zip"
    write_bundle(world.reviewer, "M1", tmp_path / "k", june, extends=[may])
    revoked = positions["E1", "Revoked"]

    def relabel(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        _withholding(revoked)(manifest, files)
        for entry in manifest["events"]:
            if entry["position"] == revoked:
                entry["type"] = "SnapshotErased"
        _restate(manifest, files, "E1", "ACCEPTED", "VALID")

    forged = rewrite(june, tmp_path / "k", tmp_path / "forged.zip", relabel)
    # Then, given the earlier bundle, the leaf it listed as a revocation is one
    report = verify_bundle(forged, tmp_path / "k.pub", earlier=[may])
    assert not report.ok
    assert (
        f"E1's event at position {revoked} is listed here as SnapshotErased, but the bundle "
        f"you hold in {may} lists the same leaf as Revoked: one event has one type (it was "
        "relabelled)"
    ) in report.problems


def test_an_event_listed_after_the_signed_heads_last_position_is_refused(
    world: World, tmp_path: Path
) -> None:
    # Given a bundle in which a withheld event is listed at a position after the
    # last one its signed head covers
    path, manifest = _late_listed(world, tmp_path)
    revoked = _position(manifest, "E1", "Revoked")
    last = int(manifest["head"]["position"])

    def postdate(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        _withholding(revoked)(manifest, files)
        for entry in manifest["events"]:
            if entry["position"] == revoked:
                entry["position"] = 999_999

    report = _forge(path, postdate)
    # Then it is refused, naming the event and the head's last position
    assert not report.ok
    assert (
        f"the Revoked event at position 999999 is after the signed head's last position "
        f"{last}: the head covers no event after it"
    ) in report.problems


@pytest.mark.parametrize("lagging", [False, True], ids=["own-time", "as-a-lagging-clock"])
def test_an_activity_stated_at_another_time_than_its_event_is_refused(
    world: World, tmp_path: Path, lagging: bool
) -> None:
    # Given R1's bundle, in which a forger moves M1's acceptance an hour later (saying,
    # or not, that its writer's clock was behind: no earlier event is that late)
    path, manifest = _late_listed(world, tmp_path)
    position = _position(manifest, "M1", "Accepted")

    def later(manifest: dict[str, Any], files: Files) -> None:
        prov = json.loads(files["prov.json"])
        [attrs] = [a for a in prov["activity"].values() if a["pl:position"]["$"] == str(position)]
        own = datetime.fromisoformat(attrs["prov:startTime"])
        moved = (own + timedelta(hours=1)).isoformat()
        attrs["prov:startTime"] = attrs["prov:endTime"] = moved
        if lagging:
            attrs["pl:clockTime"] = {"$": own.isoformat(), "type": "xsd:dateTime"}
        files["prov.json"] = json.dumps(prov).encode()

    report = _forge(path, later)

    # Then the bundle is refused, naming the activity and its event's time (and the
    # clock time no writer states)
    assert len(report.problems) == 1 + lagging, report.problems
    assert f"the Accepted of M1 at position {position} happened at " in report.problems[0]
    if lagging:
        assert report.problems[1] == (
            f"prov.json states pl:clockTime of the Accepted of M1 at position {position}, "
            "which the writer never states"
        )
