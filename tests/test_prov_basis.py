"""A record revalidated on a new basis, in PROV and in compliance bundles.

The export derives *the record on its new basis* (``basis:M1.<position>``, a
specialization of ``rec:M1`` that the revalidation generated) from the new
basis; the record itself is generated once, by its proposal. Bundles written
before derived the record itself, naming the revalidation: they still verify
(``tests/fixtures/bundle-revalidated-0.2.zip``, written then by
``tests/fixtures/make_revalidated_bundle.py``), and a derivation no event names
fails in either shape.

Scenario (:func:`_rebased`, as the fixture's): E1 → M1 → R1 (delivered); E1
revoked and M1 revalidated on E2; E2 revoked and M1 revalidated on E3; R1
revalidated.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prov.model import (
    ProvDerivation,
    ProvDocument,
    ProvEntity,
    ProvSpecialization,
    ProvUsage,
)

from ledger import Kind
from ledger.bundle import verify_bundle, write_bundle
from ledger.heads import generate_key
from ledger.prov import BASIS, PL, REC, export_prov, export_text, serialize

from .conftest import World
from .test_bundle_truth import rewrite
from .test_prov_review import _violations

FIXTURES = Path(__file__).parent / "fixtures"


def _rebased(world: World) -> dict[str, int]:
    """The scenario of the module docstring, a second apart: the log positions
    of M1's proposal and of its two revalidations (``on E2``, ``on E3``)."""
    agent, reviewer, clock = world.agent, world.reviewer, world.clock

    def do(command: Any, *args: Any, **kwargs: Any) -> Any:
        clock.advance(seconds=1)
        return command(*args, **kwargs)

    do(agent.capture, scope="proj-a", uri="https://x.test/v1", content=b"v1", id="E1")
    do(reviewer.accept, "E1")
    do(agent.propose, "proj-a", "m", 1, Kind.INFERENCE, parents=["E1"], id="M1")
    do(reviewer.accept, "M1")
    do(agent.propose, "proj-a", "r", 2, Kind.REPORT, parents=["M1"], id="R1")
    do(reviewer.accept, "R1")
    do(reviewer.deliver, "R1", recipient="ops@x.test")
    do(reviewer.revoke, "E1", reason="page changed")
    do(agent.capture, scope="proj-a", uri="https://x.test/v2", content=b"v2", id="E2")
    do(reviewer.accept, "E2")
    do(reviewer.revalidate, "M1", note="re-based", parents=["E2"])
    do(reviewer.revoke, "E2", reason="page changed again")
    do(agent.capture, scope="proj-a", uri="https://x.test/v3", content=b"v3", id="E3")
    do(reviewer.accept, "E3")
    do(reviewer.revalidate, "M1", note="re-based again", parents=["E3"])
    do(reviewer.revalidate, "R1", note="checked")
    events = reviewer.audit("M1").events
    revalidations = [e.position for e in events if e.type == "Revalidated"]
    return {"proposal": events[0].position, "on E2": revalidations[0], "on E3": revalidations[1]}


def _relations(prov: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return list(prov.get(name, {}).values())


def _to_the_old_shape(prov: dict[str, Any]) -> None:
    """``prov`` (a bundle's prov.json) as the export wrote it before a record on
    a new basis had an entity: the record itself derived from that basis."""
    for name in [n for n in prov["entity"] if n.startswith("basis:")]:
        del prov["entity"][name]
    del prov["specializationOf"], prov["prefix"]["basis"]
    prov["wasGeneratedBy"] = {
        k: g for k, g in prov["wasGeneratedBy"].items() if not g["prov:entity"].startswith("basis:")
    }
    for d in _relations(prov, "wasDerivedFrom"):
        if d["prov:generatedEntity"].startswith("basis:"):
            rid = d["prov:generatedEntity"].removeprefix("basis:").rpartition(".")[0]
            d["prov:generatedEntity"] = f"rec:{rid}"


def _prov_change(change: Callable[[dict[str, Any]], None]) -> Callable[..., None]:
    def apply(_manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        prov = json.loads(files["prov.json"])
        change(prov)
        files["prov.json"] = (json.dumps(prov, indent=2, sort_keys=True) + "\n").encode()

    return apply


def test_a_bundle_written_before_a_new_basis_had_an_entity_still_verifies() -> None:
    # Given a bundle written then (its prov.json derives M1 itself from each new
    # basis, naming the revalidation, and has no record-on-a-basis entity)
    bundle = FIXTURES / "bundle-revalidated-0.2.zip"
    prov = json.loads(zipfile.ZipFile(bundle).read("prov.json"))
    derived = {
        (d["prov:generatedEntity"], d["prov:usedEntity"]): d["prov:activity"]
        for d in _relations(prov, "wasDerivedFrom")
    }
    assert str(derived["rec:M1", "rec:E2"]).startswith("act:revalidate-")
    assert str(derived["rec:M1", "rec:E3"]).startswith("act:revalidate-")
    assert "basis:" not in json.dumps(prov)

    report = verify_bundle(bundle, FIXTURES / "bundle-revalidated-0.2.pub")

    # Then it verifies, every statement checked
    assert report.ok, report.problems
    assert report.record == "R1" and report.unchecked == ()


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_derives_the_record_on_each_new_basis_and_verifies(
    world: World, tmp_path: Path
) -> None:
    at = _rebased(world)
    generate_key(tmp_path / "k")
    write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    assert verify_bundle(tmp_path / "r1.zip", tmp_path / "k.pub").ok
    text = zipfile.ZipFile(tmp_path / "r1.zip").read("prov.json").decode()
    prov = json.loads(text)
    derived = {
        (d["prov:generatedEntity"], d["prov:usedEntity"]): d["prov:activity"]
        for d in _relations(prov, "wasDerivedFrom")
    }
    on_e2, on_e3 = f"basis:M1.{at['on E2']}", f"basis:M1.{at['on E3']}"
    assert derived == {
        ("rec:M1", "rec:E1"): f"act:propose-{at['proposal']}",
        (on_e2, "rec:E2"): f"act:revalidate-{at['on E2']}",
        (on_e3, "rec:E3"): f"act:revalidate-{at['on E3']}",
        ("rec:R1", "rec:M1"): derived["rec:R1", "rec:M1"],
    }
    assert sorted(
        (s["prov:specificEntity"], s["prov:generalEntity"])
        for s in _relations(prov, "specializationOf")
    ) == [(on_e2, "rec:M1"), (on_e3, "rec:M1")]
    assert _violations(ProvDocument.deserialize(content=text, format="json")) == []


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_in_the_old_shape_verifies_and_one_with_a_derivation_no_event_names_fails(
    world: World, tmp_path: Path
) -> None:
    # Given a bundle rewritten to the old shape and re-signed by the ledger's key
    _rebased(world)
    generate_key(tmp_path / "k")
    write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    old = rewrite(
        tmp_path / "r1.zip", tmp_path / "k", tmp_path / "old.zip", _prov_change(_to_the_old_shape)
    )
    prov = json.loads(zipfile.ZipFile(old).read("prov.json"))
    assert "basis:" not in json.dumps(prov)
    assert verify_bundle(old, tmp_path / "k.pub").ok

    def forge(prov: dict[str, Any]) -> None:  # M1 derived from R1, at a revalidation
        [d] = [d for d in _relations(prov, "wasDerivedFrom") if d["prov:usedEntity"] == "rec:E3"]
        prov["wasDerivedFrom"]["_:forged"] = {**d, "prov:usedEntity": "rec:R1"}

    def drop(prov: dict[str, Any]) -> None:  # M1's current basis not stated
        _drop_derivations_from(prov, "rec:E3")

    # Then a derivation no event of M1 names fails, and so does one it leaves out
    for change, problem in (
        (forge, "prov.json derives M1 from R1, but no event of M1 names R1"),
        (drop, "prov.json does not derive M1 from E3, which its events name"),
    ):
        bad = rewrite(old, tmp_path / "k", tmp_path / "bad.zip", _prov_change(change))
        report = verify_bundle(bad, tmp_path / "k.pub")
        assert problem in report.problems, report.problems


def _add_derivation(prov: dict[str, Any], like: str, changes: dict[str, str]) -> None:
    """A derivation as that of the entity ``like``, with ``changes``."""
    [d] = [d for d in _relations(prov, "wasDerivedFrom") if d["prov:generatedEntity"] == like]
    prov["wasDerivedFrom"]["_:forged"] = {**d, **changes}


def _set(prov: dict[str, Any], relation: str, where: tuple[str, str], key: str, to: str) -> None:
    """Set ``key`` to ``to`` in each ``relation`` whose ``where[0]`` is ``where[1]``."""
    for entry in _relations(prov, relation):
        if entry[where[0]] == where[1]:
            entry[key] = to


def _drop_derivations_from(prov: dict[str, Any], used: str) -> None:
    derived = prov["wasDerivedFrom"]
    for key in [k for k, d in derived.items() if d["prov:usedEntity"] == used]:
        del derived[key]


@pytest.mark.parametrize(
    "what",
    [
        "a basis another event set",
        "a record no event names",
        "no revalidation there",
        "its current basis left out",
        "another activity",
        "a specialization of another record",
        "generated by another activity",
    ],
)
@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_record_on_a_basis_no_revalidation_set_fails(
    world: World, tmp_path: Path, what: str
) -> None:
    # Given a bundle of R1 whose prov.json is changed and re-signed by the ledger's key
    at = _rebased(world)
    generate_key(tmp_path / "k")
    write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    on_e2, on_e3 = f"basis:M1.{at['on E2']}", f"basis:M1.{at['on E3']}"
    proposal = f"act:propose-{at['proposal']}"
    changes: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
        # E1 is a basis of M1 (its proposal's), not the one its first revalidation set
        "a basis another event set": (
            lambda p: _add_derivation(p, on_e2, {"prov:usedEntity": "rec:E1"}),
            f"prov.json derives {on_e2} from E1, but the revalidation of M1 at position "
            f"{at['on E2']} names E2",
        ),
        "a record no event names": (
            lambda p: _add_derivation(p, on_e3, {"prov:usedEntity": "rec:R1"}),
            f"prov.json derives {on_e3} from R1, but the revalidation of M1 at position "
            f"{at['on E3']} names E3",
        ),
        "no revalidation there": (
            lambda p: _add_derivation(
                p,
                on_e2,
                {
                    "prov:generatedEntity": f"basis:M1.{at['proposal']}",
                    "prov:usedEntity": "rec:E1",
                },
            ),
            f"prov.json has the entity basis:M1.{at['proposal']} (a record on the basis a "
            f"revalidation gave it), but the bundle lists no revalidation of M1 at position "
            f"{at['proposal']}",
        ),
        "its current basis left out": (
            lambda p: _drop_derivations_from(p, "rec:E3"),
            "prov.json does not derive M1 from E3, which its events name",
        ),
        "another activity": (
            lambda p: _set(
                p, "wasDerivedFrom", ("prov:generatedEntity", on_e3), "prov:activity", proposal
            ),
            f"prov.json derives {on_e3} from E3 by {proposal}, not by the "
            f"revalidation of M1 at position {at['on E3']}",
        ),
        "a specialization of another record": (
            lambda p: _set(
                p,
                "specializationOf",
                ("prov:specificEntity", on_e2),
                "prov:generalEntity",
                "rec:R1",
            ),
            f"prov.json makes {on_e2} a specialization of ['rec:R1'], not of rec:M1",
        ),
        "generated by another activity": (
            lambda p: _set(
                p,
                "wasGeneratedBy",
                ("prov:entity", on_e2),
                "prov:activity",
                f"act:revalidate-{at['on E3']}",
            ),
            f"prov.json has {on_e2} generated by ['act:revalidate-{at['on E3']}'], not by the "
            f"revalidation of M1 at position {at['on E2']}",
        ),
    }
    change, problem = changes[what]
    bad = rewrite(tmp_path / "r1.zip", tmp_path / "k", tmp_path / "bad.zip", _prov_change(change))

    report = verify_bundle(bad, tmp_path / "k.pub")

    # Then the verifier names what the events contradict
    assert not report.ok
    assert problem in report.problems, report.problems


def _set_attribute(prov: dict[str, Any], entity: str, attr: str, value: object) -> None:
    prov["entity"][entity][attr] = value


@pytest.mark.parametrize("what", ["a position of no ascii digits", "a time out of range"])
@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_prov_json_no_writer_gives_is_a_failed_check_not_a_crash(
    world: World, tmp_path: Path, what: str
) -> None:
    # Given a bundle of R1 whose prov.json holds what Python reads as a number or
    # a time but cannot take as one (int("²"); a time before year 1 in UTC)
    at = _rebased(world)
    generate_key(tmp_path / "k")
    write_bundle(world.reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    on_e2 = f"basis:M1.{at['on E2']}"
    changes: dict[str, Callable[[dict[str, Any]], None]] = {
        "a position of no ascii digits": lambda p: _set(
            p,
            "wasDerivedFrom",
            ("prov:generatedEntity", on_e2),
            "prov:generatedEntity",
            "basis:M1.²",
        ),
        "a time out of range": lambda p: _set_attribute(
            p,
            "rec:E2",
            "pl:fetchedAt",
            {"$": "0001-01-01T00:00:00+01:00", "type": "xsd:dateTime"},
        ),
    }
    bad = rewrite(
        tmp_path / "r1.zip", tmp_path / "k", tmp_path / "bad.zip", _prov_change(changes[what])
    )

    # When it is verified, it is refused by name, not with a traceback
    report = verify_bundle(bad, tmp_path / "k.pub")
    assert not report.ok
    assert any("prov.json" in problem for problem in report.problems), report.problems


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_new_basis_outside_the_callers_scopes_is_the_placeholder(
    world: World, tmp_path: Path
) -> None:
    # Given M1 (proj-a), after the scenario, revalidated on E4 (proj-a) and on
    # B-SECRET-1 (proj-b), which auditor-a cannot see and reader-b reads but may not audit
    agent, reviewer, clock = world.agent, world.reviewer, world.clock
    admin = world.ledger.admin()
    admin.grant("auditor-a", scope="proj-a", roles=["read", "audit"])
    admin.grant("reader-b", scope="proj-a", roles=["read", "audit"])
    admin.grant("reader-b", scope="proj-b", roles=["read"])
    at = _rebased(world)
    clock.advance(seconds=1)
    agent.propose("proj-b", "secret.one", 1, Kind.FACT, id="B-SECRET-1")
    reviewer.accept("B-SECRET-1")
    clock.advance(seconds=1)
    reviewer.revoke("E3", reason="page changed a third time")
    clock.advance(seconds=1)
    agent.capture(scope="proj-a", uri="https://x.test/v4", content=b"v4", id="E4")
    reviewer.accept("E4")
    clock.advance(seconds=1)
    reviewer.revalidate("M1", note="re-based on b", parents=["B-SECRET-1", "E4"])
    last = world.ledger.position
    generate_key(tmp_path / "k")
    for who in ("auditor-a", "reader-b"):
        session = world.ledger.authenticate(admin.issue_token(who))
        # Then the export shows M1 on its new basis derived from E4, and M1 itself
        # (with no activity: no generation) from the one placeholder, which the
        # revalidation used; nothing of proj-b is named
        doc = export_prov(session)
        derived = {(str(d.args[0]), str(d.args[1])) for d in doc.get_records(ProvDerivation)}
        assert (f"basis:M1.{last}", "rec:E4") in derived
        assert ("rec:M1", "pl:hidden") in derived
        used = {(str(u.args[0]), str(u.args[1])) for u in doc.get_records(ProvUsage)}
        assert (f"act:revalidate-{last}", "pl:hidden") in used
        assert not {(g, u) for g, u in derived if g.startswith("basis:") and u == "pl:hidden"}
        assert {str(e.identifier) for e in doc.get_records(ProvEntity)} >= {
            f"basis:M1.{at['on E2']}",
            f"basis:M1.{at['on E3']}",
            f"basis:M1.{last}",
            "pl:hidden",
        }
        assert _violations(doc) == []
        text = export_text(session, "prov-json") + export_text(session, "prov-n")
        for word in ("B-SECRET-1", "proj-b", "secret."):
            assert word not in text, (who, word)
        # and so does its bundle, which verifies, naming nothing of proj-b
        path = tmp_path / f"{who}.zip"
        write_bundle(session, "R1", tmp_path / "k", path)
        report = verify_bundle(path, tmp_path / "k.pub")
        assert report.ok, report.problems
        # (the revalidation's bytes name B-SECRET-1: withheld, so its basis is unchecked)
        assert any(f"Revalidated at position {last}" in u for u in report.unchecked), report
        archive = zipfile.ZipFile(path)
        for name in archive.namelist():
            for data in (b"B-SECRET-1", b"proj-b", b"secret."):
                assert data not in archive.read(name), (who, name, data)
        prov = json.loads(archive.read("prov.json"))
        assert (f"basis:M1.{last}", "rec:E4") in {
            (d["prov:generatedEntity"], d["prov:usedEntity"])
            for d in _relations(prov, "wasDerivedFrom")
        }


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_record_on_a_basis_is_valid_prov_xml_and_no_record_id_can_name_it(
    world: World,
) -> None:
    import prov
    from lxml import etree  # type: ignore[import-untyped]  # lxml ships no types

    # Given M1 on the basis E2 and E3 gave it, and a record whose id is that
    # entity's local name (a record id may hold "."); ids with "." "-" "_" too
    at = _rebased(world)
    twin = f"M1.{at['on E3']}"
    world.agent.propose("proj-a", "twin", 3, Kind.FACT, id=twin)
    doc = export_prov(world.reviewer)
    # Then the two are different entities, the record's attributes its own
    ids = [e.identifier for e in doc.get_records(ProvEntity)]
    assert ids.count(REC[twin]) == 1 and ids.count(BASIS[twin]) == 1
    assert {(s.args[0], s.args[1]) for s in doc.get_records(ProvSpecialization)} == {
        (BASIS[f"M1.{at['on E2']}"], REC["M1"]),
        (BASIS[twin], REC["M1"]),
    }
    [on_e3] = [e for e in doc.get_records(ProvEntity) if e.identifier == BASIS[twin]]
    assert set(on_e3.get_attribute("prov:type")) == {PL["RecordOnNewBasis"]}
    assert _violations(doc) == []
    # and PROV-XML, valid against the PROV schema, and PROV-JSON read back equal
    schema = etree.XMLSchema(etree.parse(Path(prov.__file__).parent / "tests/schemas/prov.xsd"))
    xml = serialize(doc, "prov-xml")
    assert schema.validate(etree.fromstring(xml.encode())), schema.error_log
    assert ProvDocument.deserialize(content=xml, format="xml") == doc
    assert ProvDocument.deserialize(content=serialize(doc, "prov-json"), format="json") == doc


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_an_export_without_a_revalidated_basis_is_as_before(world: World) -> None:
    # A revalidation with no new basis (R1's) adds no entity and no namespace
    _rebased(world)
    text = export_text(world.reviewer, "prov-json", record="R1")
    assert "basis" not in json.loads(text)["prefix"]
    assert "basis:" not in text


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_record_exported_alone_still_names_every_basis_it_held(world: World) -> None:
    # Given M1 proposed on E1, then revalidated on E2 and on E3
    at = _rebased(world)
    on_e2, on_e3 = f"basis:M1.{at['on E2']}", f"basis:M1.{at['on E3']}"

    # When M1 alone is exported
    prov = json.loads(export_text(world.reviewer, "prov-json", record="M1"))

    # Then it still names what it rests and rested on: each basis declared, its
    # events left out, and derived from by the activity that set it
    assert set(prov["entity"]) == {"rec:M1", "rec:E1", "rec:E2", "rec:E3", on_e2, on_e3}
    assert {
        (d["prov:generatedEntity"], d["prov:usedEntity"], d["prov:activity"], d["pl:dependency"])
        for d in _relations(prov, "wasDerivedFrom")
    } == {
        ("rec:M1", "rec:E1", f"act:propose-{at['proposal']}", "declared"),
        (on_e2, "rec:E2", f"act:revalidate-{at['on E2']}", "declared"),
        (on_e3, "rec:E3", f"act:revalidate-{at['on E3']}", "declared"),
    }
    assert {(u["prov:activity"], u["prov:entity"]) for u in _relations(prov, "used")} >= {
        (f"act:propose-{at['proposal']}", "rec:E1"),
        (f"act:revalidate-{at['on E2']}", "rec:E2"),
        (f"act:revalidate-{at['on E3']}", "rec:E3"),
    }
    assert all(a["prov:label"].endswith(" M1") for a in prov["activity"].values())


def test_a_record_exported_alone_names_a_parent_it_rests_on_again(world: World) -> None:
    # Given X on P and R, then revalidated on Q, then on P again (an earlier parent)
    agent, reviewer = world.agent, world.reviewer
    for rid in "PQR":
        agent.capture(scope="proj-a", uri=f"https://x.test/{rid}", content=rid.encode(), id=rid)
        reviewer.accept(rid)
    agent.propose("proj-a", "x", 1, Kind.INFERENCE, parents=["P", "R"], id="X")
    reviewer.accept("X")
    reviewer.revoke("R", reason="r")
    reviewer.revalidate("X", parents=["Q"])
    on_q = world.ledger.position
    reviewer.revoke("Q", reason="q")
    reviewer.revalidate("X", parents=["P"])
    on_p = world.ledger.position

    # When X alone is exported, and with its ancestors
    alone, whole = (
        json.loads(export_text(reviewer, "prov-json", record="X", ancestors=ancestors))
        for ancestors in (False, True)
    )

    # Then both name X's current basis, P again since the second revalidation
    def derived(prov: dict[str, Any]) -> set[tuple[str, str, str]]:
        return {
            (d["prov:generatedEntity"], d["prov:usedEntity"], d["prov:activity"])
            for d in _relations(prov, "wasDerivedFrom")
        }

    assert (f"basis:X.{on_p}", "rec:P", f"act:revalidate-{on_p}") in derived(alone)
    assert (f"basis:X.{on_q}", "rec:Q", f"act:revalidate-{on_q}") in derived(alone)
    assert derived(alone) == derived(whole)
