"""A compliance bundle states nothing its own events contradict.

The writer takes what it states (statuses, validity, parents, ancestry) from the
views; views edited behind the ledger's back must make it refuse, naming the
record, rather than sign their word next to the events that contradict it. The
verifier checks every status and basis a bundle states against the stored bytes
of the events it carries, so a bundle re-signed by whoever holds the key (or
written from bad views by an older release) that states what they contradict
fails too, naming the record. (A key holder who leaves out a record's latest
events is beyond any offline check: see docs/evidence.md.)
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ledger import Kind, Ledger
from ledger.bundle import verify_bundle, write_bundle
from ledger.bundle.archive import _MANIFEST_CONTEXT, _signed_archive
from ledger.bundle.told import _machine
from ledger.cli import main
from ledger.errors import CorruptEventError, LedgerError
from ledger.heads import generate_key, load_private_key
from ledger.merkle import InclusionProof
from ledger.serialization import pack, unpack

from .conftest import World

# -- the writer refuses views the log contradicts ---------------------------------------------


@pytest.fixture
def revoked_chain(world: World, tmp_path: Path) -> tuple[World, Path]:
    """E1 ← M1 ← R1, all accepted, R1 delivered, then E1 revoked (M1, R1 STALE); a key."""
    revoke_a_chain(world, tmp_path)
    return world, tmp_path


def revoke_a_chain(world: World, tmp_path: Path) -> None:
    """What :func:`revoked_chain` makes (a key ``k`` in ``tmp_path`` included)."""
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"retries ok", id="E1")
    agent.propose(
        scope="proj-a",
        claim_key="api.retry",
        value=True,
        kind=Kind.INFERENCE,
        parents=["E1"],
        id="M1",
    )
    agent.propose(
        scope="proj-a", claim_key="report.w", value="on", kind=Kind.REPORT, parents=["M1"], id="R1"
    )
    for rid in ("E1", "M1", "R1"):
        reviewer.accept(rid)
    reviewer.deliver("R1", recipient="ops@x.test")
    reviewer.revoke("E1", reason="doc changed")
    generate_key(tmp_path / "k")


def edit_views(world: World, *statements: str | tuple[str, tuple[Any, ...]]) -> None:
    """Edit the view tables of the ledger's SQLite file directly (no event, no leaf):
    each statement as text, or as text and its parameters."""
    with sqlite3.connect(world.ledger.url[len("sqlite:///") :]) as con:
        for statement in statements:
            sql, args = (statement, ()) if isinstance(statement, str) else statement
            con.execute(sql, args)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_is_refused_when_the_views_show_a_status_the_log_contradicts(
    revoked_chain: tuple[World, Path],
) -> None:
    world, tmp_path = revoked_chain
    # Given the views edited to show E1, M1 and R1 ACCEPTED again
    edit_views(
        world,
        "UPDATE pl_records SET status='ACCEPTED', reason=NULL, cause_root=NULL "
        "WHERE record_id IN ('E1','M1','R1') AND to_pos IS NULL",
    )
    assert world.reviewer.get("R1").status == "ACCEPTED"  # the views' word

    # When R1's bundle is written, it is refused, naming R1 and what its events say
    with pytest.raises(CorruptEventError) as refused:
        write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")

    assert str(refused.value).startswith(
        "bundle refused: the views disagree with the log about 'R1': they show it ACCEPTED "
        "but its events make it STALE (MarkedStale at position "
    )
    assert "provledger verify" in str(refused.value)
    assert not (tmp_path / "r1.zip").exists()
    # and verify agrees that the views were edited
    assert not world.ledger.verify().ok


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_is_refused_when_the_views_drop_a_records_parents(
    revoked_chain: tuple[World, Path],
) -> None:
    world, tmp_path = revoked_chain
    # Given R1's row edited to declare no parents, and its edges removed
    edit_views(
        world,
        "UPDATE pl_records SET parents=x'90' WHERE record_id='R1'",
        "DELETE FROM pl_edges WHERE child_id='R1'",
    )

    with pytest.raises(CorruptEventError, match=r"about 'R1': they show its parents as \[\] "):
        write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    assert not (tmp_path / "r1.zip").exists()


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_is_refused_when_the_edges_leave_out_an_ancestor(
    revoked_chain: tuple[World, Path],
) -> None:
    world, tmp_path = revoked_chain
    # Given only the dependency index edited: R1's row still names M1
    edit_views(world, "DELETE FROM pl_edges WHERE child_id='R1'")

    with pytest.raises(
        CorruptEventError,
        match="about 'R1': its events name M1 as a basis, which the views leave out",
    ):
        write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_of_untouched_views_states_what_the_log_says(
    revoked_chain: tuple[World, Path],
) -> None:
    world, tmp_path = revoked_chain

    info = write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")

    report = verify_bundle(tmp_path / "r1.zip", tmp_path / "k.pub")
    assert report.ok, report.problems
    assert info.records == ("R1", "M1", "E1") and report.unchecked == ()
    manifest = json.loads(zipfile.ZipFile(tmp_path / "r1.zip").read("manifest.json"))
    assert [(r["id"], r["status"]) for r in manifest["records"]] == [
        ("R1", "STALE"),
        ("M1", "STALE"),
        ("E1", "REVOKED"),
    ]


# -- the verifier checks what a bundle states against the events it carries -----------------


def rewrite(
    path: Path, key: Path, out: Path, change: Callable[[dict[str, Any], dict[str, bytes]], None]
) -> Path:
    """``path`` with its manifest and files changed by ``change``, digests recomputed
    and manifest and archive re-signed with ``key`` (as whoever holds the key can)."""
    archive = zipfile.ZipFile(path)
    files = {n: archive.read(n) for n in archive.namelist()}
    manifest = json.loads(files.pop("manifest.json"))
    files.pop("manifest.sig")
    change(manifest, files)
    manifest["files"] = {n: hashlib.sha256(d).hexdigest() for n, d in sorted(files.items())}
    signer = load_private_key(key)
    body = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    files["manifest.json"] = body
    files["manifest.sig"] = base64.b64encode(signer.sign(_MANIFEST_CONTEXT + body)) + b"\n"
    out.write_bytes(_signed_archive(files, signer))
    return out


@pytest.fixture
def r1_bundle(revoked_chain: tuple[World, Path]) -> tuple[Path, Path]:
    _world, tmp_path = revoked_chain
    write_bundle(_world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    return tmp_path / "r1.zip", tmp_path


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_re_signed_bundle_stating_a_status_its_events_contradict_fails(
    r1_bundle: tuple[Path, Path],
) -> None:
    path, tmp_path = r1_bundle

    # Given R1 stated ACCEPTED / VALID in the manifest, re-signed with the ledger's key
    def accepted(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        manifest["records"][0].update(status="ACCEPTED", validity="VALID")

    forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", accepted)

    report = verify_bundle(forged, tmp_path / "k.pub")

    # Then every signature verifies, yet the check fails naming R1 and its events
    assert not report.ok
    assert report.problem is not None and report.problem.startswith(
        "manifest.json states R1 is ACCEPTED, but the events the bundle carries make it STALE "
        "(MarkedStale at position "
    )


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_re_signed_bundle_whose_prov_and_summary_misstate_a_status_fails(
    r1_bundle: tuple[Path, Path],
) -> None:
    path, tmp_path = r1_bundle

    def prov_and_summary(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        prov = json.loads(files["prov.json"])
        prov["entity"]["rec:M1"]["pl:status"] = "ACCEPTED"
        files["prov.json"] = json.dumps(prov).encode()
        files["summary.txt"] = files["summary.txt"].replace(
            b"status:    STALE / NEEDS_REVALIDATION", b"status:    ACCEPTED / VALID"
        )

    forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", prov_and_summary)

    report = verify_bundle(forged, tmp_path / "k.pub")

    assert not report.ok
    assert any(p.startswith("prov.json states M1 is ACCEPTED, but") for p in report.problems)
    assert any(p.startswith("summary.txt states R1 is ACCEPTED, but") for p in report.problems)


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_re_signed_bundle_that_drops_an_ancestor_its_events_name_fails(
    r1_bundle: tuple[Path, Path],
) -> None:
    path, tmp_path = r1_bundle

    # Given R1's bundle cut down to R1 alone (its events still name M1)
    def alone(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        manifest["records"] = manifest["records"][:1]
        manifest["events"] = [e for e in manifest["events"] if e["record"] == "R1"]
        for name in [n for n in files if n.startswith("events/")]:
            if name not in {e["file"] for e in manifest["events"]}:
                del files[name]

    forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", alone)

    report = verify_bundle(forged, tmp_path / "k.pub")

    assert not report.ok
    assert (
        "the events of R1 name M1 as a basis, but the bundle neither includes it nor "
        "shows an ancestor <hidden>" in report.problems
    )


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_re_signed_bundle_that_leaves_out_one_of_a_records_events_fails(
    r1_bundle: tuple[Path, Path],
) -> None:
    path, tmp_path = r1_bundle

    # Given R1's acceptance (its event 2) left out of the bundle
    def no_accept(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        (accept,) = [
            e for e in manifest["events"] if (e["record"], e["type"]) == ("R1", "Accepted")
        ]
        manifest["events"].remove(accept)
        del files[accept["file"]]

    forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", no_accept)

    report = verify_bundle(forged, tmp_path / "k.pub")

    assert not report.ok
    assert any(
        "is event 3 of 'R1', but the bundle lists it as event 2: the bundle leaves out "
        "events of 'R1'" in p
        for p in report.problems
    )


# -- messages that say what is carried ---------------------------------------------------------


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_flipped_archive_signature_is_told_as_such(r1_bundle: tuple[Path, Path]) -> None:
    path, tmp_path = r1_bundle
    data = bytearray(path.read_bytes())
    data[-5] = ord("A") if data[-5] != ord("A") else ord("B")  # one digit of the signature
    (tmp_path / "flipped.zip").write_bytes(bytes(data))

    report = verify_bundle(tmp_path / "flipped.zip", tmp_path / "k.pub")

    assert report.problem == (
        "the archive's signature (its zip comment) does not verify: the archive's bytes are "
        "exactly as written, so the signature itself was altered"
    )


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_re_signed_bundle_cannot_pass_a_visible_ancestor_off_as_hidden(
    world: World, tmp_path: Path
) -> None:
    # Given R1 <- M1 <- {E1, H1}, H1 in a scope R1's auditor holds no grant in
    led, admin = world.ledger, world.ledger.admin()
    admin.grant("outside", scope="proj-x", roles=["propose", "read"])
    admin.grant("x-reviewer", scope="proj-x", roles=["approve", "read"])
    admin.grant("x-reviewer", scope="proj-a", roles=["approve", "read"])
    admin.grant("agent-1", scope="proj-x", roles=["read"])
    outside = led.authenticate(admin.issue_token("outside"))
    x_reviewer = led.authenticate(admin.issue_token("x-reviewer"))
    outside.propose(scope="proj-x", claim_key="h", value=1, kind=Kind.FACT, id="H1")
    x_reviewer.accept("H1")
    world.agent.propose(scope="proj-a", claim_key="e", value=1, kind=Kind.FACT, id="E1")
    world.agent.propose(
        scope="proj-a", claim_key="m", value=2, kind=Kind.INFERENCE, parents=["E1", "H1"], id="M1"
    )
    world.agent.propose(
        scope="proj-a", claim_key="r", value=3, kind=Kind.REPORT, parents=["M1"], id="R1"
    )
    world.reviewer.accept("E1")
    x_reviewer.accept("M1")  # the bundle's author could not: it cannot read H1
    world.reviewer.accept("R1")
    generate_key(tmp_path / "k")
    write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    genuine = verify_bundle(tmp_path / "r1.zip", tmp_path / "k.pub")
    assert genuine.ok and genuine.hidden == 1 and genuine.withheld == 1  # M1's proposal

    # When the key holder drops M1 and E1, leaving only the <hidden> entry
    def visible_gone(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        manifest["records"] = [r for r in manifest["records"] if r["id"] in ("R1", "<hidden>")]
        manifest["events"] = [e for e in manifest["events"] if e["record"] == "R1"]
        for name in [n for n in files if n.startswith("events/")]:
            if name not in {e["file"] for e in manifest["events"]}:
                del files[name]

    forged = rewrite(tmp_path / "r1.zip", tmp_path / "k", tmp_path / "forged.zip", visible_gone)
    report = verify_bundle(forged, tmp_path / "k.pub")

    # Then R1's carried proposal, which names M1, shows M1 was no hidden record
    assert not report.ok
    assert (
        "the events of R1 name M1 as a basis in bytes the bundle carries, but it does not "
        "include it: <hidden> stands only for records named in bytes it withholds"
    ) in report.problems


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda m: m.update(records=5), "records is a number"),
        (lambda m: m.update(records=None), "records is missing or null"),
        (lambda m: m.update(record=["R1"]), "record is an array"),
        (lambda m: m.update(head="x"), "head is a string"),
        (lambda m: m.update(created=5), "created is a number"),
        (lambda m: m["events"][0].update(path="ab"), "events[0].path is a string"),
        (lambda m: m["events"][0].update(file=7), "events[0].file is a number"),
        (lambda m: m["events"][0].update(position=True), "events[0].position is a boolean"),
        (lambda m: m["records"][1].update(status=1), "records[1].status is a number"),
    ],
)
def test_a_signed_manifest_of_the_wrong_shape_is_named_not_a_traceback(
    r1_bundle: tuple[Path, Path], change: Callable[[dict[str, Any]], None], named: str
) -> None:
    path, tmp_path = r1_bundle
    forged = rewrite(path, tmp_path / "k", tmp_path / "odd.zip", lambda m, _f: change(m))

    report = verify_bundle(forged, tmp_path / "k.pub")

    assert not report.ok and report.problem == f"manifest.json is malformed: {named}"
    result = CliRunner().invoke(main, ["verify-bundle", str(forged), "--json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["problem"] == report.problem


def test_the_bundle_commands_count_withheld_events_as_carried(tmp_path: Path) -> None:
    # Given B1 in proj-b resting on M9 in proj-a, which B1's auditor may not audit
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("agent-1", scope="proj-b", roles=["propose", "read"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
        admin.grant("other", scope="proj-b", roles=["approve", "read", "audit"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        reviewer = led.authenticate(admin.issue_token("reviewer"))
        other_token = admin.issue_token("other")
        agent.capture(scope="proj-a", uri="https://x.test/secret", content=b"x", id="E9")
        reviewer.accept("E9")
        agent.propose(
            scope="proj-a", claim_key="c", value=1, kind=Kind.FACT, parents=["E9"], id="M9"
        )
        reviewer.accept("M9")
        agent.propose(
            scope="proj-b", claim_key="b", value="b", kind=Kind.REPORT, parents=["M9"], id="B1"
        )
        reviewer.revoke("E9", reason="confidential")
    runner = CliRunner()

    def run(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(main, [*args], env={"PROVLEDGER_URL": url})
        return result.exit_code, result.stdout, result.stderr

    key, zip_path = str(tmp_path / "k"), str(tmp_path / "b1.zip")
    assert run("keygen", "--out", key)[0] == 0

    # When its bundle is written and checked
    code, out, err = run("bundle", "B1", "--key", key, "-o", zip_path, "--token", other_token)
    assert code == 0, err
    # Then both commands count the events carried with proofs, withheld bytes and all
    assert (
        "B1 and 0 ancestors, 2 events with inclusion proofs (2 of them with their bytes "
        "withheld)" in out
    )
    assert "ancestors outside your scopes shown as one <hidden>" in out
    code, out, err = run("verify-bundle", zip_path, "--public-key", f"{key}.pub")
    assert code == 0, err
    assert out.startswith(
        "ok: bundle of B1: 2 events with inclusion proofs (2 of them with their bytes withheld)"
    )
    assert "unchecked (bytes withheld): B1: its status STALE rests on the type" in out
    zip_file = zipfile.ZipFile(zip_path)
    assert b"M9" not in zip_file.read("summary.txt") and b"proj-a" not in zip_file.read("prov.json")


def test_a_bundle_after_supersession_and_revalidation_on_the_new_version_verifies(
    world: World, tmp_path: Path
) -> None:
    # E2 supersedes E1 (M1 goes STALE), M1 is revalidated on E2: PROV-JSON then
    # derives E2 from E1 as a revision, which E2's proposal names (supersedes).
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"v1", id="E1")
    reviewer.accept("E1")
    agent.propose(
        scope="proj-a", claim_key="c", value=1, kind=Kind.INFERENCE, parents=["E1"], id="M1"
    )
    reviewer.accept("M1")
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"v2", id="E2")
    reviewer.accept("E2")
    assert reviewer.get("E2").supersedes == "E1"
    generate_key(tmp_path / "k")
    # M1, STALE by the capture that replaced its basis, verifies as it is
    write_bundle(reviewer, "M1", tmp_path / "k", tmp_path / "stale.zip")
    assert verify_bundle(tmp_path / "stale.zip", tmp_path / "k.pub").ok
    reviewer.revalidate("M1", parents=["E2"])
    for rid in ("M1", "E2", "E1"):
        write_bundle(reviewer, rid, tmp_path / "k", tmp_path / f"{rid}.zip")
        report = verify_bundle(tmp_path / f"{rid}.zip", tmp_path / "k.pub")
        assert report.ok, (rid, report.problems)
        assert report.unchecked == ()


def test_free_text_in_the_summary_cannot_pose_as_one_of_its_lines(
    world: World, tmp_path: Path
) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.capture(
        scope="proj-a",
        uri="https://x.test/a",
        content=b"a",
        id="E1",
    )
    # (a line separator splits a line as a line feed does: str.splitlines)
    reviewer.accept("E1", note="checked\u2028status:    REVOKED / INVALID\nancestry:  none")
    agent.propose(scope="proj-a", claim_key="c", value=1, kind=Kind.FACT, parents=["E1"], id="F1")
    reviewer.accept("F1", note="fine\nstatus:    REVOKED / INVALID")
    generate_key(tmp_path / "k")
    write_bundle(reviewer, "F1", tmp_path / "k", tmp_path / "f1.zip")
    report = verify_bundle(tmp_path / "f1.zip", tmp_path / "k.pub")
    assert report.ok, report.problems
    summary = zipfile.ZipFile(tmp_path / "f1.zip").read("summary.txt").decode()
    assert "fine\\nstatus:    REVOKED / INVALID" in summary  # shown, escaped, in its line
    [status] = [line for line in summary.splitlines() if line.startswith("status:")]
    assert status.startswith("status:    ACCEPTED / VALID (fine\\nstatus:")


def test_a_bundle_of_a_record_expiring_while_it_is_written_states_it_as_at_its_making(
    tmp_path: Path,
) -> None:
    from datetime import UTC, datetime, timedelta

    generate_key(tmp_path / "k")
    rejected = []
    # A clock that moves on at every call: the record expires somewhere inside
    # the bundle's writing, at a different call for each lead
    for lead in range(-5, 80):
        now = [datetime(2026, 1, 1, tzinfo=UTC)]

        def clock(now: list[datetime] = now) -> datetime:
            now[0] += timedelta(milliseconds=1)
            return now[0]

        with Ledger.open("memory:", clock=clock) as led:
            admin = led.admin()
            admin.grant("ag", scope="p", roles=["propose", "read"])
            admin.grant("rv", scope="p", roles=["approve", "read", "audit"])
            agent = led.authenticate(admin.issue_token("ag"))
            reviewer = led.authenticate(admin.issue_token("rv"))
            agent.propose(
                scope="p", claim_key="k", value=1, kind=Kind.FACT, id="F1",
                expires=now[0] + timedelta(milliseconds=10 + lead),
            )  # fmt: skip
            reviewer.accept("F1")
            write_bundle(reviewer, "F1", tmp_path / "k", tmp_path / f"b{lead}.zip")
        report = verify_bundle(tmp_path / f"b{lead}.zip", tmp_path / "k.pub")
        if not report.ok:
            rejected.append((lead, report.problem))
    assert rejected == []


# -- a proof's size is the prover's word ------------------------------------------------------


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_proof_of_another_size_does_not_verify_against_a_trusted_digest(world: World) -> None:
    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="F1")
    kept = world.ledger.digest()
    # Given a "withheld" leaf that is the trusted root itself, in a tree of one leaf
    fake = InclusionProof(
        position=999, index=0, size=1, leaf=kept.root, leaf_data=None, path=(), root=kept.root
    )
    # Then it does not verify against the digest (whose size is not 1)
    assert not fake.verify(kept)
    assert all(p.verify(kept) for p in world.reviewer.prove("F1"))


# -- what the views say of evidence and values is checked against the log --------------------


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("column", ["evidence", "value"])
def test_a_bundle_is_refused_when_the_views_change_an_evidence_hash_or_a_value(
    revoked_chain: tuple[World, Path], column: str
) -> None:
    # Given E1's evidence hash, or R1's value, changed in the views behind the ledger's back
    world, tmp_path = revoked_chain
    record = "E1" if column == "evidence" else "R1"
    if column == "evidence":
        with sqlite3.connect(world.ledger.url[len("sqlite:///") :]) as con:
            (blob,) = con.execute(
                "SELECT evidence FROM pl_records WHERE record_id='E1' AND to_pos IS NULL"
            ).fetchone()
        changed = unpack(blob) | {"content_hash": "sha256:" + "ab" * 32}
    else:
        changed = "off"
    edit_views(
        world,
        (
            f"UPDATE pl_records SET {column}=? WHERE record_id=? AND to_pos IS NULL",
            (pack(changed), record),
        ),
    )
    # Then the auditor's bundle is refused, naming the record and what differs
    with pytest.raises(LedgerError, match=f"'{record}'.*its {column} as"):
        write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_re_signed_bundle_stating_another_evidence_hash_fails(
    revoked_chain: tuple[World, Path],
) -> None:
    world, tmp_path = revoked_chain
    write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    real = world.reviewer.get("E1").evidence["content_hash"]

    def other_hash(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        fake = "sha256:" + "ab" * 32
        for name in ("summary.txt", "prov.json"):
            files[name] = files[name].replace(real.encode(), fake.encode())

    forged = rewrite(tmp_path / "r1.zip", tmp_path / "k", tmp_path / "f.zip", other_hash)
    report = verify_bundle(forged, tmp_path / "k.pub")
    assert not report.ok
    assert "E1" in (report.problem or "")


# -- a withheld event's type is the manifest's word, whatever the type -----------------------


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_withheld_event_relabelled_leaves_the_status_unchecked(
    hidden_cause: tuple[Ledger, Any, Path],
) -> None:
    _ledger, auditor, tmp_path = hidden_cause
    write_bundle(auditor, "R1", tmp_path / "k", tmp_path / "r1.zip")

    def relabel(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        for e in manifest["events"]:
            if e["record"] == "R1" and e["type"] == "MarkedStale":
                e["type"] = "Delivered"
        for r in manifest["records"]:
            if r["id"] == "R1":
                r.update(status="ACCEPTED", validity="VALID")
        prov = json.loads(files["prov.json"])
        prov["entity"]["rec:R1"].update({"pl:status": "ACCEPTED", "pl:validity": "VALID"})
        files["prov.json"] = json.dumps(prov).encode()
        summary = files["summary.txt"].decode().splitlines()
        summary = ["status:    ACCEPTED / VALID" if s.startswith("status:") else s for s in summary]
        files["summary.txt"] = "\n".join(summary).encode()

    forged = rewrite(tmp_path / "r1.zip", tmp_path / "k", tmp_path / "f.zip", relabel)
    report = verify_bundle(forged, tmp_path / "k.pub")
    assert not report.ok or any(u.startswith("R1: its status") for u in report.unchecked)


# -- a bundle states the record as it is under its head ---------------------------------------


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_bundle_is_not_written_from_an_as_of_session(
    revoked_chain: tuple[World, Path],
) -> None:
    world, tmp_path = revoked_chain
    before = world.reviewer.audit("E1").events[-1].position - 1  # before the revocation
    with pytest.raises(LedgerError):
        write_bundle(
            world.reviewer.as_of(position=before), "R1", tmp_path / "k", tmp_path / "r1.zip"
        )


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_is_refused_when_its_record_changes_while_it_is_written(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ledger.bundle.write as writing

    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"ok", id="E1")
    agent.propose(scope="proj-a", claim_key="r", value=1, kind=Kind.REPORT, parents=["E1"], id="R1")
    reviewer.accept("E1")
    reviewer.accept("R1")
    generate_key(tmp_path / "k")
    original = writing._events

    def racing(*args: Any, **kwargs: Any) -> Any:
        reviewer.revoke("E1", reason="meanwhile")  # committed between the reads
        return original(*args, **kwargs)

    monkeypatch.setattr(writing, "_events", racing)
    with pytest.raises(LedgerError, match=r"R1|E1"):
        write_bundle(reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")


# -- what people read in summary.txt, and a record listed twice --------------------------------


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
@pytest.mark.parametrize("how", ["spaces", "approver", "duplicate"])
def test_a_re_signed_bundle_cannot_restate_a_record_where_the_verifier_does_not_look(
    revoked_chain: tuple[World, Path],
    how: str,
) -> None:
    world, tmp_path = revoked_chain
    write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")

    def change(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        summary = files["summary.txt"].decode()
        if how == "spaces":
            line = next(s for s in summary.splitlines() if s.startswith("status:"))
            summary = summary.replace(line, "status:    ACCEPTED  /  VALID")
        elif how == "approver":
            summary = summary.replace("approved:  by reviewer", "approved:  by someone-else", 1)
        else:
            r1 = next(r for r in manifest["records"] if r["id"] == "R1")
            manifest["records"].insert(0, dict(r1, status="ACCEPTED", validity="VALID"))
        files["summary.txt"] = summary.encode()

    forged = rewrite(tmp_path / "r1.zip", tmp_path / "k", tmp_path / "f.zip", change)
    assert not verify_bundle(forged, tmp_path / "k.pub").ok


# -- a view row moved to another scope would hide a record the auditor may audit ---------------


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_is_refused_when_the_views_move_an_ancestor_out_of_sight(
    revoked_chain: tuple[World, Path],
) -> None:
    world, tmp_path = revoked_chain
    edit_views(world, "UPDATE pl_records SET scope='proj-secret' WHERE record_id='E1'")
    with pytest.raises(LedgerError, match="views"):
        write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")


# -- prov.json's activities are the carried events ---------------------------------------


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
@pytest.mark.parametrize(
    ("how", "label", "problem"),
    [
        (
            "recipient",
            "Delivered R1",
            "prov.json states pl:recipient 'regulator@authority.test' for the Delivered of R1 "
            "at position {position}, but its event says 'ops@x.test'",
        ),
        (
            "reason",
            "Revoked E1",
            "prov.json states pl:reason 'routine' for the Revoked of E1 at position {position}, "
            "but its event says 'doc changed'",
        ),
        (
            "agent",
            "Accepted R1",
            "prov.json associates the Accepted of R1 at position {position} with "
            "['agent:someone-else'], but its event was by 'reviewer'",
        ),
        (
            "invalidation",
            "Revoked E1",
            "prov.json does not say the Revoked of E1 at position {position} invalidated it",
        ),
        (
            "dropped",
            "Delivered R1",
            "prov.json has no activity for the Delivered event of R1 at position {position}",
        ),
    ],
)
def test_a_re_signed_bundle_cannot_restate_who_did_what_in_prov_json(
    revoked_chain: tuple[World, Path], how: str, label: str, problem: str
) -> None:
    # Given an honest bundle of R1 (delivered to ops@x.test; E1 revoked: "doc changed")
    world, tmp_path = revoked_chain
    write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    prov = json.loads(zipfile.ZipFile(tmp_path / "r1.zip").read("prov.json"))
    act = next(k for k, a in prov["activity"].items() if a["prov:label"] == label)
    position = int(act.rsplit("-", 1)[1])

    def change(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        prov = json.loads(files["prov.json"])
        if how == "recipient":
            prov["activity"][act]["pl:recipient"] = "regulator@authority.test"
        elif how == "reason":
            prov["activity"][act]["pl:reason"] = "routine"
        elif how == "agent":
            for entry in prov["wasAssociatedWith"].values():
                if entry["prov:activity"] == act:
                    entry["prov:agent"] = "agent:someone-else"
        elif how == "invalidation":
            del prov["wasInvalidatedBy"]
        else:
            del prov["activity"][act]
        files["prov.json"] = json.dumps(prov).encode()

    # When the key holder rewrites prov.json and signs again
    forged = rewrite(tmp_path / "r1.zip", tmp_path / "k", tmp_path / "f.zip", change)

    # Then verify-bundle names what no longer matches the carried events
    report = verify_bundle(forged, tmp_path / "k.pub")
    assert problem.format(position=position) in report.problems, report.problems


def test_a_withheld_event_listed_as_a_correction_or_erasure_it_cannot_be_is_refused() -> None:
    proposal = {"actor": "agent-1", "parents": [], "observed": [], "evidence": None}
    captured = {**proposal, "evidence": {"content_hash": "sha256:00"}}
    accepted = {"actor": "reviewer"}

    def problems(*events: tuple[int, str, Any]) -> list[str]:
        return _machine({"R1": list(events)})

    # A correction with no delivery before it, an erasure of a record that captured
    # no bytes: no ledger writes them
    corrected = problems(
        (1, "Proposed", proposal), (2, "Accepted", accepted), (3, "CorrectionIssued", None)
    )
    assert corrected == [
        "the CorrectionIssued of R1 at position 3 (bytes withheld: its type is manifest.json's "
        "word) follows no delivery of R1: a ledger corrects only what it delivered"
    ]
    erased = problems(
        (1, "Proposed", proposal), (2, "Accepted", accepted), (3, "SnapshotErased", None)
    )
    assert erased[0].endswith("R1 was proposed with no captured bytes, so none were erased")
    # while a delivery then its correction, and one erasure of captured bytes, pass
    assert (
        problems(
            (1, "Proposed", captured),
            (2, "Accepted", accepted),
            (3, "Delivered", {"actor": "reviewer"}),
            (4, "CorrectionIssued", None),
            (5, "SnapshotErased", None),
        )
        == []
    )


# -- an ancestor is checked through every basis the carried bytes name ------------------------


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_an_ancestor_named_by_a_carried_revalidation_is_checked_past_a_withheld_proposal(
    hidden_cause: tuple[Ledger, Any, Path],
) -> None:
    # Given M1, whose proposal names a hidden record (its bytes withheld from the
    # auditor's bundle), revalidated on E2, which the auditor sees
    ledger, auditor, tmp_path = hidden_cause
    admin = ledger.admin()
    agent = ledger.authenticate(admin.issue_token("agent-1"))
    reviewer = ledger.authenticate(admin.issue_token("reviewer"))
    agent.capture(scope="proj-a", uri="https://x.test/new", content=b"new", id="E2")
    reviewer.accept("E2")
    reviewer.revalidate("M1", note="new source", parents=["E2"])
    # When the auditor's bundle of R1 is verified
    write_bundle(auditor, "R1", tmp_path / "k", tmp_path / "r1.zip")
    report = verify_bundle(tmp_path / "r1.zip", tmp_path / "k.pub")
    # Then the carried revalidation proves E2 an ancestor of R1, though M1's
    # proposal is withheld; only what rests on withheld bytes stays unchecked
    assert report.ok, report.problem
    assert any(u.startswith("M1: its value, claim key, kind, scope, ") for u in report.unchecked)
    assert not any(u.startswith("E2:") for u in report.unchecked), report.unchecked


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_stale_marking_whose_cause_is_withheld_names_no_actor_in_the_summary(
    hidden_cause: tuple[Ledger, Any, Path],
) -> None:
    # Given a bundle's author who reads proj-h but may not audit it
    ledger, _auditor, tmp_path = hidden_cause
    admin = ledger.admin()
    admin.grant("reviewer", scope="proj-a", roles=["audit"])
    reviewer = ledger.authenticate(admin.issue_token("reviewer"))
    # When it writes R1's bundle, whose M1 went STALE when hboss revoked H1 in proj-h
    write_bundle(reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    with zipfile.ZipFile(tmp_path / "r1.zip") as archive:
        summary = archive.read("summary.txt").decode()
        members = {name: archive.read(name) for name in archive.namelist()}
    # Then the marking's reason and its actor are both withheld, in every file
    # (prov.json associates no agent with it), and it verifies
    stale = [line for line in summary.splitlines() if "stale:" in line]
    assert stale and all("by <hidden> at" in line for line in stale), stale
    assert [name for name, data in members.items() if b"hboss" in data] == []
    prov = json.loads(members["prov.json"])
    marked = {a for a in prov["activity"] if a.startswith("act:mark-stale-")}
    associated = {w["prov:activity"] for w in prov.get("wasAssociatedWith", {}).values()}
    assert marked and not marked & associated
    assert verify_bundle(tmp_path / "r1.zip", tmp_path / "k.pub").ok


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_summary_tells_a_new_version_its_expiry_and_that_it_expired(
    world: World, tmp_path: Path
) -> None:
    from datetime import timedelta

    # Given T1, then T2, a new version of it expiring in an hour, accepted; the hour past
    agent, reviewer, clock = world.agent, world.reviewer, world.clock
    agent.propose(scope="proj-a", claim_key="t", value=1, kind=Kind.FACT, id="T1")
    reviewer.accept("T1")
    hour = clock.now + timedelta(hours=1)
    agent.propose(
        scope="proj-a", claim_key="t", value=2, kind=Kind.FACT, supersedes="T1",
        expires=hour, id="T2",
    )  # fmt: skip
    reviewer.accept("T2")
    clock.advance(hours=2)
    generate_key(tmp_path / "k")
    path = write_bundle(reviewer, "T2", tmp_path / "k", tmp_path / "t2.zip").path
    summary = zipfile.ZipFile(path).read("summary.txt").decode().splitlines()
    # Then its summary says so, and the bundle verifies
    status = next(line for line in summary if line.startswith("status:"))
    assert (
        status == "status:    ACCEPTED / NEEDS_REVALIDATION (expired at 2026-01-01T13:00:00+00:00)"
    )
    proposed = next(line for line in summary if line.startswith("proposed:"))
    assert proposed.endswith(": a new version of T1; expires 2026-01-01T13:00:00+00:00"), proposed
    assert verify_bundle(path, tmp_path / "k.pub").ok

    # And a re-signed summary telling another expiry fails, naming the proposal
    def later(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        files["summary.txt"] = files["summary.txt"].replace(
            b"expires 2026-01-01T13", b"expires 2026-01-02T13"
        )

    forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", later)
    report = verify_bundle(forged, tmp_path / "k.pub")
    assert not report.ok and "summary.txt tells the Proposed of T2" in (report.problem or "")

    # And so does one leaving them out, or saying another expiry on the status line
    def edited(old: bytes, new: bytes) -> Callable[[dict[str, Any], dict[str, bytes]], None]:
        def change(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
            assert old in files["summary.txt"]
            files["summary.txt"] = files["summary.txt"].replace(old, new)

        return change

    for old, new, problem in (
        (b"expired at 2026-01-01T13", b"expired at 2026-01-01T15", "no moment before the bundle"),
        (
            b"(expired at 2026-01-01T13:00:00+00:00)",
            b"(expired at 2026-01-01T13:00:00+00:00: the expiry of <hidden>)",
            "but everything it rests on is carried",
        ),
        (b": a new version of T1; expires 2026-01-01T13:00:00+00:00", b"", "tells the Proposed"),
        (b" (expired at 2026-01-01T13:00:00+00:00)", b"", "not when it expired"),
        (
            b"(expired at 2026-01-01T13:00:00+00:00)",
            b"(expired at 2026-01-01T12:30:00+00:00: the expiry of T1)",
            "T1 is no record the bundle includes",
        ),
        (b"expired at 2026-01-01T13", b"expired at 2026-01-01T14", "but its own proposal says"),
    ):
        forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", edited(old, new))
        report = verify_bundle(forged, tmp_path / "k.pub")
        assert not report.ok and problem in (report.problem or ""), (new, report.problem)

    # And a manifest naming no summary form (as before forms were named) does not
    # make an expiry told there unchecked, nor a fake <hidden> ancestor make it so
    def first_form(old: bytes, new: bytes, fake_hidden: bool = False) -> Any:
        def change(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
            del manifest["summary"]
            if fake_hidden:
                manifest["records"].append({"id": "<hidden>"})
                files["summary.txt"] = files["summary.txt"].replace(
                    b"ancestry:  none", b"ancestry:  <hidden>"
                )
            files["summary.txt"] = files["summary.txt"].replace(old, new)

        return change

    for change, problem in (
        (first_form(b"T13:00:00+00:00)", b"T12:30:00+00:00)"), "but its own proposal says"),
        (
            first_form(b"T13:00:00+00:00)", b"T12:30:00+00:00: the expiry of NOPE)", True),
            "NOPE is no record the bundle includes",
        ),
    ):
        forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", change)
        report = verify_bundle(forged, tmp_path / "k.pub")
        assert not report.ok and problem in (report.problem or ""), report.problem


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_re_signed_summary_giving_a_stale_record_another_cause_fails(
    r1_bundle: tuple[Path, Path],
) -> None:
    path, tmp_path = r1_bundle
    summary = zipfile.ZipFile(path).read("summary.txt").decode()
    status = next(line for line in summary.splitlines() if line.startswith("status:"))
    assert status == "status:    STALE / NEEDS_REVALIDATION (E1 revoked: doc changed)"

    def other_cause(manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        files["summary.txt"] = files["summary.txt"].replace(
            b"(E1 revoked: doc changed)", b"(E1 revoked: a routine refresh)"
        )

    forged = rewrite(path, tmp_path / "k", tmp_path / "forged.zip", other_cause)
    report = verify_bundle(forged, tmp_path / "k.pub")
    assert not report.ok
    assert report.problem == (
        "summary.txt says R1 is STALE (E1 revoked: a routine refresh), but its newest stale "
        "marking says (E1 revoked: doc changed)"
    )


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_an_expiry_the_reader_cannot_check_is_unchecked_not_refused(
    world: World, tmp_path: Path
) -> None:
    from datetime import timedelta

    # Given an auditor of proj-a alone, and in proj-a R (expiring in an hour) on EB
    # of proj-b, and GX on GM (proj-b) on GG (proj-a, expiring in an hour)
    agent, reviewer, clock = world.agent, world.reviewer, world.clock
    admin = world.ledger.admin()
    admin.grant("auditor-a", scope="proj-a", roles=["read", "audit"])
    auditor = world.ledger.authenticate(admin.issue_token("auditor-a"))
    hour = clock.now + timedelta(hours=1)

    def made(rid: str, scope: str, parents: list[str], expires: Any = None) -> None:
        agent.propose(
            scope=scope, claim_key=rid.lower(), value=1, kind=Kind.FACT, parents=parents,
            expires=expires, id=rid,
        )  # fmt: skip
        reviewer.accept(rid)

    made("EB", "proj-b", [])
    made("R", "proj-a", ["EB"], hour)
    made("GG", "proj-a", [], hour)
    made("GM", "proj-b", ["GG"])
    made("GX", "proj-a", ["GM"])
    clock.advance(hours=2)
    generate_key(tmp_path / "k")
    for rid in ("R", "GX"):
        # When the auditor writes and checks each one's bundle
        path = write_bundle(auditor, rid, tmp_path / "k", tmp_path / f"{rid}.zip").path
        status = next(
            line
            for line in zipfile.ZipFile(path).read("summary.txt").decode().splitlines()
            if line.startswith("status:")
        )
        assert status.startswith("status:    ACCEPTED / NEEDS_REVALIDATION (expired at "), status
        report = verify_bundle(path, tmp_path / "k.pub")
        # Then it verifies, saying that expiry could not be checked
        assert report.ok, report.problem
        assert any(f"{rid}: that it expired at" in u for u in report.unchecked), report.unchecked
