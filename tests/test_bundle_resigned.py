"""What a bundle re-signed with the ledger's own key cannot restate.

Whoever holds the key can edit a bundle and sign it again; the verifier then
checks what the bundle states against the bytes it carries. Here: an event
entry naming bytes the archive does not hold is no event carried; every time
``prov.json`` states (an activity's start and end, the time of a generation,
use or invalidation) is its event's; a bundle says it was made when its head
was signed, and its summary tells that head. And a damaged manifest or key is
named as damaged, not as missing.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from ledger import Kind
from ledger.bundle import verify_bundle, write_bundle
from ledger.heads import generate_key

from .conftest import World
from .test_bundle_truth import rewrite

pytestmark = pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)

Files = dict[str, bytes]


@pytest.fixture
def m1_bundle(world: World, tmp_path: Path) -> Path:
    """M1 resting on E1, both accepted; E1 revoked (M1 STALE); E2 captured and
    accepted, M1 revalidated on E2: M1's bundle (signed with the key ``k``). The
    clock moves a second at each step, so no two events share a time."""
    agent, reviewer, clock = world.agent, world.reviewer, world.clock

    def step() -> None:
        clock.advance(seconds=1)

    agent.capture(scope="proj-a", uri="https://x.test/d1", content=b"d1", id="E1")
    step()
    agent.propose(
        scope="proj-a", claim_key="m", value=1, kind=Kind.INFERENCE, parents=["E1"], id="M1"
    )
    for act in (
        lambda: reviewer.accept("E1"),
        lambda: reviewer.accept("M1"),
        lambda: reviewer.revoke("E1", reason="page changed"),
        lambda: agent.capture(scope="proj-a", uri="https://x.test/d2", content=b"d2", id="E2"),
        lambda: reviewer.accept("E2"),
        lambda: reviewer.revalidate("M1", note="re-based", parents=["E2"]),
    ):
        step()
        act()
    step()
    generate_key(tmp_path / "k")
    write_bundle(reviewer, "M1", tmp_path / "k", tmp_path / "m1.zip")
    return tmp_path / "m1.zip"


def _forged(path: Path, change: Any, name: str = "forged.zip") -> Any:
    """``path`` changed by ``change``, re-signed with the ledger's key, verified against it."""
    forged = rewrite(path, path.parent / "k", path.parent / name, change)
    return verify_bundle(forged, path.parent / "k.pub")


def _entry(path: Path, record: str, kind: str) -> dict[str, Any]:
    manifest = json.loads(zipfile.ZipFile(path).read("manifest.json"))
    [entry] = [e for e in manifest["events"] if (e["record"], e["type"]) == (record, kind)]
    return dict(entry)


# -- an event entry naming bytes the archive does not hold ------------------------------------


def test_an_event_entry_naming_a_file_the_archive_lacks_is_refused(m1_bundle: Path) -> None:
    # Given M1's acceptance: its bytes dropped from the archive and from the manifest's
    # files, its entry still naming them, and the summary's approver restated
    accepted = _entry(m1_bundle, "M1", "Accepted")

    def dropped(manifest: dict[str, Any], files: Files) -> None:
        del files[accepted["file"]]
        files["summary.txt"] = files["summary.txt"].replace(
            b"approved:  by reviewer at", b"approved:  by ceo at", 1
        )

    report = _forged(m1_bundle, dropped)

    # Then the bundle is refused, naming the entry and the file it names
    assert not report.ok
    assert (
        f"manifest.json lists the Accepted event of M1 at position {accepted['position']} "
        f"with its bytes in {accepted['file']}, but the archive holds no {accepted['file']}"
    ) in report.problems


def test_a_file_listed_but_missing_is_named_with_the_event_that_lists_it(m1_bundle: Path) -> None:
    # Given M1's acceptance's bytes dropped from the archive only (the manifest
    # still lists the file and its digest)
    accepted = _entry(m1_bundle, "M1", "Accepted")
    name = str(accepted["file"])
    archive = zipfile.ZipFile(m1_bundle)
    with zipfile.ZipFile(m1_bundle.parent / "cut.zip", "w", zipfile.ZIP_DEFLATED) as cut:
        for info in archive.infolist():
            if info.filename != name:
                cut.writestr(info, archive.read(info))

    report = verify_bundle(m1_bundle.parent / "cut.zip", m1_bundle.parent / "k.pub")

    # Then both the missing file and the event listing it are named
    assert not report.ok
    assert f"{name} is missing from the bundle" in report.problems
    assert (
        f"manifest.json lists the Accepted event of M1 at position {accepted['position']} "
        f"with its bytes in {name}, but the archive holds no {name}"
    ) in report.problems


# -- every time prov.json states is its event's -----------------------------------------------


def _timed(prov: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(section, key, attribute) of every time ``prov.json`` states."""
    for section, entries in prov.items():
        if not isinstance(entries, dict):
            continue
        for key, attrs in entries.items():
            for attribute in ("prov:startTime", "prov:endTime", "prov:time"):
                if isinstance(attrs, dict) and attribute in attrs:
                    yield section, key, attribute


def _moved(section: str, key: str, attribute: str, to: Any) -> Any:
    def move(manifest: dict[str, Any], files: Files) -> None:
        prov = json.loads(files["prov.json"])
        attrs = prov[section][key]
        attrs[attribute] = to(datetime.fromisoformat(attrs[attribute]))
        files["prov.json"] = json.dumps(prov, indent=2, sort_keys=True).encode()

    return move


def test_every_time_prov_json_states_is_the_time_of_its_event(m1_bundle: Path) -> None:
    prov = json.loads(zipfile.ZipFile(m1_bundle).read("prov.json"))
    timed = list(_timed(prov))
    sections = {(section, attribute) for section, _key, attribute in timed}
    assert {
        ("activity", "prov:startTime"),
        ("activity", "prov:endTime"),
        ("wasGeneratedBy", "prov:time"),
        ("used", "prov:time"),
        ("wasInvalidatedBy", "prov:time"),
    } <= sections
    # A basis set by a revalidation is an entity generated by it, at its time
    generated = [attrs["prov:entity"] for attrs in prov["wasGeneratedBy"].values()]
    assert any(entity.startswith("basis:M1.") for entity in generated)

    passed, told = [], []
    for n, (section, key, attribute) in enumerate(timed):
        # When one time is moved a second later, the bundle re-signed
        later = _moved(section, key, attribute, lambda t: (t + timedelta(seconds=1)).isoformat())
        report = _forged(m1_bundle, later, f"later{n}.zip")
        if report.ok:
            passed.append((section, key, attribute))
        else:
            told.append(report.problems)
        # and when it is written at another offset, the same instant
        same = _moved(
            section,
            key,
            attribute,
            lambda t: t.astimezone(timezone(timedelta(hours=2))).isoformat(),
        )
        report = _forged(m1_bundle, same, f"same{n}.zip")
        assert report.ok, (section, key, attribute, report.problems)

    # Then every move is refused, naming the moved time, and nothing else
    assert passed == []
    assert all(len(problems) == 1 for problems in told), told


def test_a_relations_time_is_refused_naming_the_relation_and_its_event(m1_bundle: Path) -> None:
    # Given E1's revocation stated at another time in its invalidation only
    revoked = _entry(m1_bundle, "E1", "Revoked")
    prov = json.loads(zipfile.ZipFile(m1_bundle).read("prov.json"))
    [(key, attrs)] = prov["wasInvalidatedBy"].items()
    own = attrs["prov:time"]
    move = _moved("wasInvalidatedBy", key, "prov:time", lambda t: "1999-01-01T00:00:00+00:00")

    report = _forged(m1_bundle, move)

    # Then the refusal names the relation, the activity, the event and both times
    assert report.problems == (
        f"prov.json states rec:E1 was invalidated by act:revoke-{revoked['position']} (the "
        f"Revoked of E1 at position {revoked['position']}) at 1999-01-01T00:00:00+00:00, but "
        f"its event says {datetime.fromisoformat(own).isoformat()}",
    )


def test_a_time_stated_by_an_activity_the_bundle_lacks_is_refused(m1_bundle: Path) -> None:
    # Given a generation by an activity prov.json does not have, at a time
    def invented(manifest: dict[str, Any], files: Files) -> None:
        prov = json.loads(files["prov.json"])
        prov["wasGeneratedBy"]["_:forged"] = {
            "prov:activity": "act:propose-999",
            "prov:entity": "rec:M1",
            "prov:time": "1999-01-01T00:00:00+00:00",
        }
        files["prov.json"] = json.dumps(prov).encode()

    report = _forged(m1_bundle, invented)

    assert report.problems[0] == (
        "prov.json states rec:M1 was generated by act:propose-999 at "
        "1999-01-01T00:00:00+00:00, but the bundle lists no event of that activity"
    )
    # (and that M1 was generated by no activity but its proposal)
    proposed = _entry(m1_bundle, "M1", "Proposed")["position"]
    assert report.problems[1:] == (
        f"prov.json states rec:M1 was generated by act:propose-{proposed}, act:propose-999, "
        f"but the bundle lists its proposal at position {proposed} (act:propose-{proposed})",
    )


# -- a bundle is made when its head is signed -------------------------------------------------


def test_a_bundle_saying_it_was_made_before_its_head_was_signed_is_refused(
    world: World, tmp_path: Path
) -> None:
    # Given F1 accepted, expiring in a day; the bundle written two days later
    # (F1 ACCEPTED / NEEDS_REVALIDATION)
    agent, reviewer = world.agent, world.reviewer
    agent.propose(
        scope="proj-a", claim_key="f", value=1, kind=Kind.FACT, id="F1",
        expires=world.clock.now + timedelta(days=1),
    )  # fmt: skip
    reviewer.accept("F1")
    world.clock.advance(days=2)
    generate_key(tmp_path / "k")
    write_bundle(reviewer, "F1", tmp_path / "k", tmp_path / "f1.zip")
    head = json.loads(zipfile.ZipFile(tmp_path / "f1.zip").read("head.json"))

    # When a re-signer says it was made before F1 expired, and states F1 VALID
    def before_expiry(manifest: dict[str, Any], files: Files) -> None:
        manifest["created"] = (world.clock.now - timedelta(days=2)).isoformat()
        manifest["records"][0]["validity"] = "VALID"
        prov = json.loads(files["prov.json"])
        prov["entity"]["rec:F1"]["pl:validity"] = "VALID"
        files["prov.json"] = json.dumps(prov).encode()
        files["summary.txt"] = files["summary.txt"].replace(
            b"ACCEPTED / NEEDS_REVALIDATION", b"ACCEPTED / VALID"
        )

    report = _forged(tmp_path / "f1.zip", before_expiry)

    # Then it is refused: a bundle is made at the instant its head is signed
    assert report.problems == (
        f"manifest.json says the bundle was made at "
        f"{(world.clock.now - timedelta(days=2)).isoformat()}, but its signed head was "
        f"signed at {datetime.fromisoformat(head['time']).isoformat()}: a bundle states its "
        "records as at the instant its head is signed",
    )


# -- a damaged manifest or key is named as damaged --------------------------------------------


@pytest.mark.parametrize("member", ["manifest.json", "public_key.pem"])
def test_a_damaged_manifest_or_key_is_named_as_damaged_not_missing(
    m1_bundle: Path, member: str
) -> None:
    # Given one byte of the member's packed data flipped
    info = zipfile.ZipFile(m1_bundle).getinfo(member)
    data = bytearray(m1_bundle.read_bytes())
    header = 30 + int.from_bytes(data[info.header_offset + 26 : info.header_offset + 28], "little")
    header += int.from_bytes(data[info.header_offset + 28 : info.header_offset + 30], "little")
    data[info.header_offset + header + info.compress_size // 2] ^= 1
    (m1_bundle.parent / "flip.zip").write_bytes(bytes(data))

    report = verify_bundle(m1_bundle.parent / "flip.zip", m1_bundle.parent / "k.pub")

    # Then the refusal says it cannot be read, it was altered
    assert not report.ok
    assert report.problem is not None
    assert report.problem.startswith(f"{member} cannot be read from the archive: it was altered (")


# -- summary.txt's signed head is the one the bundle carries ----------------------------------


def test_a_summary_restating_the_signed_head_is_refused(m1_bundle: Path) -> None:
    # Given summary.txt's signed head line restated: another signing time
    head = json.loads(zipfile.ZipFile(m1_bundle).read("head.json"))
    signed = datetime.fromisoformat(head["time"]).isoformat()

    def backdated(manifest: dict[str, Any], files: Files) -> None:
        files["summary.txt"] = files["summary.txt"].replace(
            f"signed {signed} by key".encode(), b"signed 1999-01-01T00:00:00+00:00 by key"
        )

    report = _forged(m1_bundle, backdated)

    # Then it is refused, naming both heads
    told = (
        f"tree size {head['tree_size']}, log position {head['position']}, root {head['root']}, "
        f"signed {{}} by key {head['key_id']}"
    )
    assert report.problems == (
        f"summary.txt states the signed head as {told.format('1999-01-01T00:00:00+00:00')!r}, "
        f"but the head the bundle carries is {told.format(signed)!r}",
    )


def test_a_json_file_giving_a_name_twice_is_refused_naming_it(m1_bundle: Path) -> None:
    # A forged "entity" section put before the real one: read here as the last,
    # by a reader keeping the first as another document
    def forge(_manifest: dict[str, Any], files: Files) -> None:
        files["prov.json"] = b'{"entity": {"rec:FORGED": {}},' + files["prov.json"].lstrip()[1:]

    report = _forged(m1_bundle, forge)
    assert not report.ok
    assert (
        "prov.json gives the name 'entity' twice in one object: a reader keeping the first "
        "value would read another document (the writer never does so)"
    ) in report.problems
    # (the bundle as written gives each once)
    assert verify_bundle(m1_bundle, m1_bundle.parent / "k.pub").ok
