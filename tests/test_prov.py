"""W3C PROV export: entities, derivations, activities, agents, invalidation, round trips.

Scenario (scope proj-a): evidence E1 → inference M1 → report R1 (delivered);
M3 proposed in a run that read E1 without declaring it (an observed edge);
E1 revoked (M1, R1, M3 STALE); then evidence E2 and M1 revalidated on it (M1 on
that basis is an entity of its own, ``basis:M1.<position>``), and a correction
issued for R1's delivery.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prov.model import (
    PROV,
    PROV_TYPE,
    ProvActivity,
    ProvAgent,
    ProvAssociation,
    ProvAttribution,
    ProvCommunication,
    ProvDerivation,
    ProvDocument,
    ProvEntity,
    ProvGeneration,
    ProvInvalidation,
    ProvRecord,
    ProvSpecialization,
    ProvUsage,
)

from ledger import Kind, Ledger, Session, Status, Validity
from ledger import graph as graph_module
from ledger import prov as prov_module
from ledger.cli import main
from ledger.errors import AccessDeniedError, InvalidInputError, UnknownRecordError
from ledger.prov import ACT, AGENT, BASIS, PL, REC, export_prov, export_text, serialize

from .conftest import World


@dataclass
class Scene:
    url: str
    ledger: Ledger
    agent: Session
    reviewer: Session
    reviewer_token: str
    before_revocation: int
    revoke_position: int
    revalidate_position: int


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    url = f"sqlite:///{tmp_path / 'prov.db'}"
    led = Ledger.open(url)
    admin = led.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
    agent = led.authenticate(admin.issue_token("agent-1"))
    token = admin.issue_token("reviewer")
    reviewer = led.authenticate(token)

    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"retries are safe", id="E1")
    reviewer.accept("E1", note="fetched from the vendor")
    agent.propose(
        scope="proj-a",
        claim_key="api.retry_safe",
        value=True,
        kind=Kind.INFERENCE,
        parents=["E1"],
        id="M1",
    )
    reviewer.accept("M1")
    agent.propose(
        scope="proj-a",
        claim_key="report.weekly",
        value={"retries": "on"},
        kind=Kind.REPORT,
        parents=["M1"],
        id="R1",
    )
    reviewer.accept("R1")
    delivery = reviewer.deliver("R1", recipient="ops@x.test", channel="email")
    with agent.run("task-42") as run:
        run.read(scope="proj-a", claim_key="source:https://x.test/doc")
        run.propose(
            scope="proj-a", claim_key="api.backoff", value="exp", kind=Kind.INFERENCE, id="M3"
        )
    before = led.position
    revocation = reviewer.revoke("E1", reason="doc changed")
    agent.capture(scope="proj-a", uri="https://x.test/v2", content=b"retries are not safe", id="E2")
    reviewer.accept("E2")
    reviewer.revalidate("M1", note="re-checked", parents=["E2"])
    revalidation = led.position
    reviewer.issue_correction(delivery, note="retries are not safe")
    yield Scene(url, led, agent, reviewer, token, before, revocation.position, revalidation)
    led.close()


def _records(doc: ProvDocument, cls: type[ProvRecord]) -> list[Any]:
    return [r for r in doc.get_records(cls)]


def _one(values: set[Any]) -> Any:
    [value] = values
    return value


def _entity(doc: ProvDocument, rid: str) -> ProvEntity:
    [entity] = [e for e in _records(doc, ProvEntity) if e.identifier == REC[rid]]
    return entity


def _proposed(doc: ProvDocument, rid: str) -> int:
    """The log position of ``rid``'s proposal, as its activity in ``doc`` gives it."""
    [act] = [
        a
        for a in _activities(doc, "Proposal")
        if _one(a.get_attribute("prov:label")) == f"Proposed {rid}"
    ]
    return int(_one(act.get_attribute("pl:position")))


def _activities(doc: ProvDocument, kind: str) -> list[ProvActivity]:
    return [a for a in _records(doc, ProvActivity) if PL[kind] in a.get_attribute(PROV_TYPE)]


def test_prov_json_reads_back_into_an_equal_document(scene: Scene) -> None:
    doc = export_prov(scene.reviewer)
    text = serialize(doc, "prov-json")
    back = ProvDocument.deserialize(content=text, format="json")
    assert back == doc
    assert len(back.get_records()) == len(doc.get_records()) > 40


def test_prov_xml_reads_back_equal_and_prov_n_is_written(scene: Scene) -> None:
    doc = export_prov(scene.reviewer)
    assert ProvDocument.deserialize(content=serialize(doc, "prov-xml"), format="xml") == doc
    provn = serialize(doc, "prov-n")
    assert provn.startswith("document\n") and provn.rstrip().endswith("endDocument")
    assert "wasInvalidatedBy(rec:E1, act:revoke-" in provn
    # M1 on the basis its revalidation gave it, in PROV-N's words
    on_e2, act = (
        f"basis:M1.{scene.revalidate_position}",
        f"act:revalidate-{scene.revalidate_position}",
    )
    assert "prefix basis <urn:provledger:basis:>" in provn
    assert f"specializationOf({on_e2}, rec:M1)" in provn
    assert f"wasGeneratedBy({on_e2}, {act}, " in provn
    assert f"wasDerivedFrom({on_e2}, rec:E2, {act}, " in provn


def test_the_command_lines_prov_json_equals_the_librarys_document(scene: Scene) -> None:
    result = CliRunner().invoke(
        main, ["export", "--url", scene.url, "--token", scene.reviewer_token]
    )
    assert result.exit_code == 0, result.output
    assert ProvDocument.deserialize(content=result.stdout, format="json") == export_prov(
        scene.reviewer
    )


def test_records_and_evidence_are_entities_with_their_attributes(scene: Scene) -> None:
    doc = export_prov(scene.reviewer)
    on_e2 = BASIS[f"M1.{scene.revalidate_position}"]
    assert {e.identifier for e in _records(doc, ProvEntity)} == {
        REC["E1"],
        REC["E2"],
        REC["M1"],
        REC["R1"],
        REC["M3"],
        on_e2,  # M1 on the basis its revalidation gave it
    }
    [on_basis] = [e for e in _records(doc, ProvEntity) if e.identifier == on_e2]
    assert _one(on_basis.get_attribute(PROV_TYPE)) == PL["RecordOnNewBasis"]
    assert not on_basis.get_attribute("pl:status")  # M1's own attributes are M1's
    e1 = _entity(doc, "E1")
    evidence = scene.reviewer.get("E1").evidence
    assert evidence is not None
    assert _one(e1.get_attribute(PROV_TYPE)) == PL["evidence"]
    assert _one(e1.get_attribute("pl:contentHash")) == evidence["content_hash"]
    assert _one(e1.get_attribute("pl:snapshotRef")) == evidence["snapshot_ref"]
    fetched = _one(e1.get_attribute("pl:fetchedAt"))
    assert isinstance(fetched, datetime) and fetched == evidence["fetched_at"]
    assert _one(e1.get_attribute("pl:uri")).uri == "https://x.test/doc"
    assert _one(e1.get_attribute("pl:status")) == "REVOKED"
    assert _one(e1.get_attribute("pl:validity")) == "INVALID"
    r1 = _entity(doc, "R1")
    assert _one(r1.get_attribute("pl:value")) == '{"retries": "on"}'
    assert _one(r1.get_attribute("pl:kind")) == "report"
    assert _one(r1.get_attribute("pl:status")) == "STALE"
    assert _one(r1.get_attribute("pl:staleCause")) == REC["E1"]
    assert _one(r1.get_attribute("pl:reason")) == "doc changed"


def test_parents_are_derivations_and_observed_ones_are_marked(scene: Scene) -> None:
    doc = export_prov(scene.reviewer)
    derivations = {(d.args[0], d.args[1]): d for d in _records(doc, ProvDerivation)}
    # M1's basis is now E2 (revalidated on it) and was E1; R1 on M1; M3 observed E1.
    # The revalidation does not generate M1 again: what it derives from E2 is M1 on
    # that basis, a specialization of M1 it generated
    on_e2 = BASIS[f"M1.{scene.revalidate_position}"]
    assert set(derivations) == {
        (REC["M1"], REC["E1"]),
        (on_e2, REC["E2"]),
        (REC["R1"], REC["M1"]),
        (REC["M3"], REC["E1"]),
    }
    assert {(s.args[0], s.args[1]) for s in _records(doc, ProvSpecialization)} == {
        (on_e2, REC["M1"])
    }
    generated = {(g.args[0], g.args[1]) for g in _records(doc, ProvGeneration)}
    revalidation = ACT[f"revalidate-{scene.revalidate_position}"]
    assert (on_e2, revalidation) in generated
    assert [a for e, a in generated if e == REC["M1"]] == [
        derivations[REC["M1"], REC["E1"]].args[2]
    ]
    # The basis M1 held first stays a derivation (what was relied on then), set
    # by its proposal and replaced by the revalidation that gave it E2
    former = derivations[(REC["M1"], REC["E1"])]
    assert str(former.args[2]).startswith("act:propose-")
    assert _one(former.get_attribute("pl:replacedBy")) == revalidation
    assert not derivations[(on_e2, REC["E2"])].get_attribute("pl:replacedBy")
    observed = derivations[(REC["M3"], REC["E1"])]
    assert _one(observed.get_attribute("pl:dependency")) == "observed"
    assert _one(observed.get_attribute(PROV_TYPE)) == PL["ObservedDependency"]
    declared = derivations[(REC["R1"], REC["M1"])]
    assert _one(declared.get_attribute("pl:dependency")) == "declared"
    assert not declared.get_attribute(PROV_TYPE)
    # The derivation names the activity that set the basis
    assert str(declared.args[2]).startswith("act:propose-")
    assert derivations[(on_e2, REC["E2"])].args[2] == revalidation


def test_events_are_activities_associated_with_their_principals(scene: Scene) -> None:
    doc = export_prov(scene.reviewer)
    assert {a.identifier for a in _records(doc, ProvAgent)} == {AGENT["agent-1"], AGENT["reviewer"]}
    associated = {(a.args[0], a.args[1]) for a in _records(doc, ProvAssociation)}
    for kind, agent in (
        ("Proposal", "agent-1"),
        ("Acceptance", "reviewer"),
        ("Revocation", "reviewer"),
        ("StaleMarking", "reviewer"),
        ("Revalidation", "reviewer"),
        ("Delivery", "reviewer"),
        ("Correction", "reviewer"),
    ):
        activities = _activities(doc, kind)
        assert activities, kind
        for act in activities:
            assert (act.identifier, AGENT[agent]) in associated, act
    # Proposals generate their record and attribute it to the proposer
    generated = {(g.args[0], g.args[1]) for g in _records(doc, ProvGeneration)}
    proposals = {
        _one(a.get_attribute("prov:label")): a.identifier for a in _activities(doc, "Proposal")
    }
    assert (REC["R1"], proposals["Proposed R1"]) in generated
    assert (REC["R1"], AGENT["agent-1"]) in {
        (a.args[0], a.args[1]) for a in _records(doc, ProvAttribution)
    }
    # The delivery activity used the report and names the recipient
    [delivery] = _activities(doc, "Delivery")
    assert _one(delivery.get_attribute("pl:recipient")) == "ops@x.test"
    used = {(u.args[0], u.args[1]) for u in _records(doc, ProvUsage)}
    assert (delivery.identifier, REC["R1"]) in used
    [correction] = _activities(doc, "Correction")
    assert (correction.identifier, REC["R1"]) in used
    assert _one(correction.get_attribute("pl:note")) == "retries are not safe"


def test_revocation_invalidates_and_stale_markings_record_their_cause(scene: Scene) -> None:
    doc = export_prov(scene.reviewer)
    revoke = ACT[f"revoke-{scene.revoke_position}"]  # the Revoked event's own position
    [invalidation] = _records(doc, ProvInvalidation)
    assert invalidation.args[0] == REC["E1"] and invalidation.args[1] == revoke
    assert _one(invalidation.get_attribute("pl:reason")) == "doc changed"
    # Stale records are not invalidated: they need re-verification, they are not proven wrong
    markings = _activities(doc, "StaleMarking")
    assert len(markings) == 3
    informed = {(c.args[0], c.args[1]) for c in _records(doc, ProvCommunication)}
    used = {(u.args[0], u.args[1]) for u in _records(doc, ProvUsage)}
    marked = set()
    for act in markings:
        assert _one(act.get_attribute("pl:cause")) == REC["E1"]
        assert _one(act.get_attribute("pl:reason")) == "doc changed"
        assert (act.identifier, revoke) in informed
        marked |= {entity for a, entity in used if a == act.identifier}
    assert marked == {REC["M1"], REC["R1"], REC["M3"]}


def test_a_record_can_be_exported_with_its_ancestors_or_descendants(scene: Scene) -> None:
    def entities(**kwargs: Any) -> set[str]:
        doc = export_prov(scene.reviewer, **kwargs)
        return {str(e.identifier) for e in _records(doc, ProvEntity)}

    on_e2 = f"basis:M1.{scene.revalidate_position}"
    # Alone, R1 still names what it rests on (M1, declared, its events left out)
    assert entities(record="R1") == {"rec:R1", "rec:M1"}
    # Every basis ever held counts: M1 rested on E1 before its revalidation on E2
    # (R1 was delivered then), so an audit of either finds the other. M1 on the
    # basis E2 is drawn with the derivation from E2, and only with it
    assert entities(record="R1", ancestors=True) == {
        "rec:R1",
        "rec:M1",
        "rec:E2",
        "rec:E1",
        on_e2,
    }
    # (and M1, exported as E1's descendant, the basis E2 a revalidation gave it)
    assert entities(record="E1", descendants=True) == {
        "rec:E1",
        "rec:M3",
        "rec:M1",
        "rec:R1",
        "rec:E2",
        on_e2,
    }
    assert entities(record="M1", ancestors=True, descendants=True) == {
        "rec:E1",
        "rec:E2",
        "rec:M1",
        "rec:R1",
        on_e2,
    }
    assert entities(record="M1") == {"rec:M1", "rec:E1", "rec:E2", on_e2}
    assert entities(scope="proj-a") == entities()
    alone = export_prov(scene.reviewer, record="R1")
    # R1's proposal used M1 and R1 is derived from it, though M1's events are not exported
    [derivation] = _records(alone, ProvDerivation)
    assert derivation.args[:3] == (REC["R1"], REC["M1"], ACT[f"propose-{_proposed(alone, 'R1')}"])
    assert {(u.args[0], u.args[1]) for u in _records(alone, ProvUsage)} >= {
        (ACT[f"propose-{_proposed(alone, 'R1')}"], REC["M1"])
    }
    assert {str(a.identifier) for a in _records(alone, ProvActivity)} == {
        str(a.identifier)
        for a in _records(export_prov(scene.reviewer, record="R1", ancestors=True), ProvActivity)
        if str(_one(a.get_attribute("prov:label"))).endswith(" R1")
    }


def test_export_needs_the_audit_role(scene: Scene) -> None:
    with pytest.raises(AccessDeniedError, match="export refused: 'agent-1' lacks role 'audit'"):
        export_prov(scene.agent, scope="proj-a")
    with pytest.raises(AccessDeniedError, match="lacks role 'audit' in scope 'proj-a'"):
        export_prov(scene.agent, record="E1")
    with pytest.raises(UnknownRecordError):
        export_prov(scene.reviewer, record="NOPE")
    # A record's part in a scope the reviewer may not audit: refused, not empty
    with pytest.raises(AccessDeniedError, match="lacks role 'audit' in scope 'elsewhere'"):
        export_prov(scene.reviewer, record="E1", scope="elsewhere")
    # With neither, the scopes the principal may audit are exported; holding the
    # role in none, the agent is refused, not given an empty document (SPEC 13.1)
    with pytest.raises(AccessDeniedError, match="'agent-1' lacks role 'audit' in every scope"):
        export_prov(scene.agent)
    with pytest.raises(InvalidInputError, match="export format 'rdf'"):
        export_text(scene.reviewer, "rdf")


def test_a_past_position_is_exported_as_it_was(scene: Scene) -> None:
    then = export_prov(scene.reviewer.as_of(position=scene.before_revocation))
    assert _records(then, ProvInvalidation) == []
    assert {str(e.identifier) for e in _records(then, ProvEntity)} == {
        "rec:E1",
        "rec:M1",
        "rec:R1",
        "rec:M3",
    }
    assert _one(_entity(then, "E1").get_attribute("pl:status")) == "ACCEPTED"
    assert ProvDocument.deserialize(content=serialize(then, "prov-json"), format="json") == then


def test_a_write_committed_while_an_export_runs_reaches_none_of_its_records(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two candidates, and another writer that accepts one of them right after
    # the export has read the records (as a busy ledger's writers do)
    for rid in ("C1", "C2"):
        world.agent.propose(scope="proj-a", claim_key=rid, value=1, kind=Kind.FACT, id=rid)
    read_records = prov_module.collect

    def then_accepted(*args: Any, **kwargs: Any) -> Any:
        sub = read_records(*args, **kwargs)
        world.reviewer.accept("C1")
        return sub

    monkeypatch.setattr(prov_module, "collect", then_accepted)
    # When the reviewer exports the scope
    doc = export_prov(world.reviewer, scope="proj-a")
    # Then C1 is a CANDIDATE there, as it was when the export began, with no
    # acceptance beside it: every record's events are read as of that moment
    assert _one(_entity(doc, "C1").get_attribute("pl:status")) == "CANDIDATE"
    activities = {str(a.identifier) for a in _records(doc, ProvActivity)}
    assert not any(name.startswith("act:accept") for name in activities), activities
    assert world.reviewer.get("C1").status == Status.ACCEPTED  # the write stands


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgres"], indirect=True)
def test_a_write_committed_while_an_export_reads_its_records_reaches_none_of_them(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two candidates, and another writer that accepts C1 while the export's
    # read transaction is still reading the records (after it read the first)
    for rid in ("C1", "C2"):
        world.agent.propose(scope="proj-a", claim_key=rid, value=1, kind=Kind.FACT, id=rid)
    view_of = graph_module.record_view
    accepted: list[str] = []

    def then_accepted(*args: Any, **kwargs: Any) -> Any:
        view = view_of(*args, **kwargs)
        if not accepted:
            writer = threading.Thread(target=lambda: accepted.append(world.reviewer.accept("C1")))
            writer.start()
            writer.join(30)
        return view

    monkeypatch.setattr(graph_module, "record_view", then_accepted)
    doc = export_prov(world.reviewer, scope="proj-a")
    # Then neither C1's status nor its events show the acceptance
    assert accepted == [None] and world.reviewer.get("C1").status == Status.ACCEPTED
    assert _one(_entity(doc, "C1").get_attribute("pl:status")) == "CANDIDATE"
    activities = {str(a.identifier) for a in _records(doc, ProvActivity)}
    assert not any(name.startswith("act:accept") for name in activities), activities


def test_a_live_export_judges_expiry_now_for_the_records_beside_the_walk(world: World) -> None:
    # Given A, expiring in an hour, and B resting on it; two hours later
    expires = world.clock.now + timedelta(hours=1)
    world.agent.propose(
        scope="proj-a", claim_key="a", value=1, kind=Kind.FACT, id="A", expires=expires
    )
    world.reviewer.accept("A")
    world.agent.propose(
        scope="proj-a", claim_key="b", value=2, kind=Kind.INFERENCE, id="B", parents=["A"]
    )
    world.reviewer.accept("B")
    world.clock.advance(hours=2)
    # When B alone is exported (A declared beside it, as what it rests on)
    doc = export_prov(world.reviewer, record="B")
    # Then both are judged now: expired, as the live views say
    for rid in ("A", "B"):
        assert world.reviewer.get(rid).validity == Validity.NEEDS_REVALIDATION
        assert _one(_entity(doc, rid).get_attribute("pl:validity")) == "NEEDS_REVALIDATION", rid


def test_the_prov_json_round_trip_holds_on_every_backend(world: World) -> None:
    world.agent.capture(scope="proj-a", uri="https://x.test", content=b"x", id="E1")
    world.reviewer.accept("E1")
    world.agent.propose(
        scope="proj-a", claim_key="k", value=[1, "two"], kind=Kind.FACT, parents=["E1"], id="F1"
    )
    world.reviewer.accept("F1")
    world.reviewer.revoke("E1", reason="gone")
    doc = export_prov(world.reviewer)
    assert ProvDocument.deserialize(content=serialize(doc, "prov-json"), format="json") == doc
    assert len(_records(doc, ProvInvalidation)) == 1
    assert len(_activities(doc, "StaleMarking")) == 1


def test_text_xml_cannot_hold_is_refused_for_prov_xml_by_name(world: World) -> None:
    # JSON and PROV-N hold U+FFFF; XML 1.0 has no place for it: a refusal, not a traceback.
    world.agent.propose(scope="proj-a", claim_key="k", value="a\uffffb", kind=Kind.FACT, id="F1")
    with pytest.raises(InvalidInputError, match=r"prov-xml cannot hold rec:F1: it holds U\+FFFF"):
        export_text(world.reviewer, record="F1", format="prov-xml")
    assert "F1" in export_text(world.reviewer, record="F1", format="prov-n")


def test_prov_xml_is_valid_against_the_prov_schema_or_refused_naming_the_id(
    world: World,
) -> None:
    import prov
    from lxml import etree

    schema = etree.XMLSchema(etree.parse(Path(prov.__file__).parent / "tests/schemas/prov.xsd"))
    world.agent.capture(scope="proj-a", uri="https://x.test", content=b"x", id="E1")
    world.reviewer.accept("E1")
    world.agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, parents=["E1"])
    world.reviewer.revoke("E1", reason="gone")
    xml = export_text(world.reviewer, format="prov-xml")
    assert schema.validate(etree.fromstring(xml.encode())), schema.error_log
    # An id XML cannot write as a name (a leading digit, a ':') is refused by name,
    # not written as XML the schema rejects; JSON and PROV-N hold it
    for rid in ("2024-report", "doc:1"):
        world.agent.propose(scope="proj-a", claim_key=f"k.{rid}", value=1, kind=Kind.FACT, id=rid)
        with pytest.raises(InvalidInputError, match=f"prov-xml cannot name rec:{rid}: "):
            export_text(world.reviewer, record=rid, format="prov-xml")
        assert f'"rec:{rid}"' in export_text(world.reviewer, record=rid, format="prov-json")


def test_supersession_is_a_revision_that_invalidates_the_old_version(world: World) -> None:
    """V2 supersedes V1: V2 wasRevisionOf V1, V1 wasInvalidatedBy the supersession
    (informed by V2's acceptance), and P1's stale marking is named as caused by it."""
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="api.timeout", value=30, kind=Kind.FACT, id="V1")
    reviewer.accept("V1")
    agent.propose(
        scope="proj-a", claim_key="plan", value="wait", kind=Kind.PLAN, parents=["V1"], id="P1"
    )
    reviewer.accept("P1")
    agent.propose(
        scope="proj-a", claim_key="api.timeout", value=60, kind=Kind.FACT, supersedes="V1", id="V2"
    )

    # Step 1: proposed, not yet accepted: a revision, but nothing is invalidated.
    doc = export_prov(reviewer)
    [revision] = [d for d in _records(doc, ProvDerivation) if d.get_attribute(PROV_TYPE)]
    assert (revision.args[0], revision.args[1]) == (REC["V2"], REC["V1"])
    assert _one(revision.get_attribute(PROV_TYPE)) == PROV["Revision"]
    assert str(revision.args[2]).startswith("act:propose-")
    assert _records(doc, ProvInvalidation) == []
    assert _one(_entity(doc, "V2").get_attribute("pl:supersedes")) == REC["V1"]

    # Step 2: accepting V2 supersedes V1 and marks P1 stale, in one transaction.
    reviewer.accept("V2")
    doc = export_prov(reviewer)
    [supersession] = _activities(doc, "Supersession")
    assert _one(supersession.get_attribute("pl:supersededBy")) == REC["V2"]
    [invalidation] = _records(doc, ProvInvalidation)
    assert (invalidation.args[0], invalidation.args[1]) == (REC["V1"], supersession.identifier)
    assert _one(invalidation.get_attribute("pl:supersededBy")) == REC["V2"]
    informed = {(c.args[0], c.args[1]) for c in _records(doc, ProvCommunication)}
    accepts = {
        _one(a.get_attribute("prov:label")): a.identifier for a in _activities(doc, "Acceptance")
    }
    assert (supersession.identifier, accepts["Accepted V2"]) in informed
    associated = {(a.args[0], a.args[1]) for a in _records(doc, ProvAssociation)}
    assert (supersession.identifier, AGENT["reviewer"]) in associated
    v1 = _entity(doc, "V1")
    assert _one(v1.get_attribute("pl:status")) == "SUPERSEDED"
    assert _one(v1.get_attribute("pl:validity")) == "INVALID"
    assert _one(v1.get_attribute("pl:supersededBy")) == REC["V2"]

    # Step 3: the stale marking says it was caused by the supersession, not a revocation.
    [marking] = _activities(doc, "StaleMarking")
    assert _one(marking.get_attribute("pl:causedBy")) == "supersession"
    assert _one(marking.get_attribute("pl:cause")) == REC["V1"]
    assert _one(marking.get_attribute("pl:supersededBy")) == REC["V2"]
    assert (marking.identifier, supersession.identifier) in informed
    p1 = _entity(doc, "P1")
    assert _one(p1.get_attribute("pl:staleCause")) == REC["V1"]
    assert _one(p1.get_attribute("pl:staleCauseSupersededBy")) == REC["V2"]
    assert ProvDocument.deserialize(content=serialize(doc, "prov-json"), format="json") == doc
    assert "wasInvalidatedBy(rec:V1, act:supersede-" in serialize(doc, "prov-n")


def test_stale_markings_caused_by_a_revocation_say_so(scene: Scene) -> None:
    doc = export_prov(scene.reviewer)
    markings = _activities(doc, "StaleMarking")
    assert {_one(m.get_attribute("pl:causedBy")) for m in markings} == {"revocation"}
    assert all(not m.get_attribute("pl:supersededBy") for m in markings)
    assert _activities(doc, "Supersession") == []


#: Keys of PROV-JSON relations that name an entity, an activity or an agent.
_ENDS = ("prov:entity", "prov:activity", "prov:agent", "prov:informed", "prov:informant")


def test_a_partial_export_relates_only_what_it_declares(world: World) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.capture(scope="proj-a", uri="https://x.test/1", content=b"x", id="E1")
    reviewer.accept("E1")
    agent.propose(scope="proj-a", claim_key="r", value=1, kind=Kind.REPORT, parents=["E1"], id="R")
    reviewer.accept("R")
    agent.propose(scope="proj-a", claim_key="f", value=1, kind=Kind.FACT, id="F1")
    reviewer.accept("F1")
    agent.propose(scope="proj-a", claim_key="f", value=2, kind=Kind.FACT, supersedes="F1", id="F2")
    agent.propose(
        scope="proj-a", claim_key="g", value=3, kind=Kind.INFERENCE, parents=["F1"], id="G"
    )
    reviewer.accept("G")
    reviewer.accept("F2")  # F1 superseded by F2: G stale
    reviewer.revoke("E1", reason="wrong")  # R stale
    for record in ("R", "G", "F1", None):
        doc = json.loads(export_text(reviewer, "prov-json", record=record))
        declared = {name for kind in ("entity", "activity", "agent") for name in doc.get(kind, {})}
        ends = [
            (kind, key, value)
            for kind, relations in doc.items()
            if kind not in ("prefix", "entity", "activity", "agent")
            for relation in relations.values()
            for one in (relation if isinstance(relation, list) else [relation])
            for key, value in one.items()
            if key in _ENDS
        ]
        assert ends and [end for end in ends if end[2] not in declared] == [], record


def test_a_revision_is_exported_only_with_both_versions(world: World) -> None:
    agent, reviewer = world.agent, world.reviewer
    agent.propose(scope="proj-a", claim_key="k", value=1, kind=Kind.FACT, id="V1")
    reviewer.accept("V1")
    agent.propose(scope="proj-a", claim_key="k", value=2, kind=Kind.FACT, supersedes="V1", id="V2")
    reviewer.accept("V2")
    alone = export_prov(reviewer, record="V2")
    assert _records(alone, ProvDerivation) == []
    # V1 alone still shows what invalidated it, without exporting V2 as an entity.
    old = export_prov(reviewer, record="V1")
    assert {str(e.identifier) for e in _records(old, ProvEntity)} == {"rec:V1"}
    [invalidation] = _records(old, ProvInvalidation)
    assert _one(invalidation.get_attribute("pl:supersededBy")) == REC["V2"]


@pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)
def test_a_record_exported_alone_names_its_parents_and_hides_those_it_may_not_audit(
    world: World,
) -> None:
    # Given M1 resting on E1 (proj-a) and EB (proj-b), and an auditor of proj-a only
    admin = world.ledger.admin()
    admin.grant("auditor", scope="proj-a", roles=["read", "audit"])
    auditor = world.ledger.authenticate(admin.issue_token("auditor"))
    world.agent.capture(scope="proj-a", uri="https://x.test/a", content=b"a", id="E1")
    world.agent.capture(scope="proj-b", uri="https://x.test/b", content=b"b", id="EB")
    world.agent.propose("proj-a", "m", 1, Kind.INFERENCE, parents=["E1", "EB"], id="M1")

    # When the auditor exports M1 alone, and with its ancestors
    alone = json.loads(export_text(auditor, "prov-json", record="M1"))
    whole = json.loads(export_text(auditor, "prov-json", record="M1", ancestors=True))

    # Then, alone, M1 still rests on E1 (named by id, declared) and on the one
    # placeholder for EB, as with its ancestors; EB is never named
    for prov in (alone, whole):
        assert {"rec:M1", "rec:E1", "pl:hidden"} <= set(prov["entity"])
        assert "EB" not in json.dumps(prov)
        derived = {
            (d["prov:generatedEntity"], d["prov:usedEntity"])
            for d in prov["wasDerivedFrom"].values()
        }
        assert derived == {("rec:M1", "rec:E1"), ("rec:M1", "pl:hidden")}
        used = {(u["prov:entity"], u["prov:role"]["$"]) for u in prov["used"].values()}
        assert {("rec:E1", "pl:declaredParent"), ("pl:hidden", "pl:declaredParent")} <= used
    # (E1's own events are exported only with the ancestors)
    assert {a["prov:label"] for a in alone["activity"].values()} == {"Proposed M1"}
