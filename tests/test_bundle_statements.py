"""What a bundle re-signed with the ledger's own key cannot add or leave out.

Whoever holds the key can edit a bundle and sign it again. The verifier holds
each file to what the writer makes of the events it carries: summary.txt's
evidence lines are exactly the evidence records included; every statement of
prov.json (its prefixes, sections, entities, agents, activities' types, uses,
generations, attributions, invalidations, communications and derivations) is
one the events imply; the archive holds no file the writer does not write; and
what a withheld proposal leaves unchecked is named in full.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger import Kind
from ledger.bundle import verify_bundle, write_bundle
from ledger.bundle.prov_terms import ACTIVITIES, PREFIXES
from ledger.heads import generate_key

from .conftest import World
from .test_bundle_truth import rewrite

#: The tests that write a bundle do so on the in-memory backend (the checks read no ledger).
memory = pytest.mark.parametrize("ledger_url", ["memory"], indirect=True)

Files = dict[str, bytes]
Prov = dict[str, Any]


@pytest.fixture
def r1_bundle(world: World, tmp_path: Path) -> Path:
    """R1 (a report) on M1 and E2, M1 on E1; all accepted, R1 delivered, then E1
    revoked (M1 and R1 STALE): R1's bundle, signed with the key ``k``."""
    agent, reviewer, clock = world.agent, world.reviewer, world.clock
    steps: list[Callable[[], object]] = [
        lambda: agent.capture(scope="proj-a", uri="https://x.test/1", content=b"1", id="E1"),
        lambda: agent.capture(scope="proj-a", uri="https://x.test/2", content=b"2", id="E2"),
        lambda: reviewer.accept("E1"),
        lambda: reviewer.accept("E2"),
        lambda: agent.propose("proj-a", "m", 1, Kind.INFERENCE, parents=["E1"], id="M1"),
        lambda: reviewer.accept("M1"),
        lambda: agent.propose("proj-a", "r", "on", Kind.REPORT, parents=["M1", "E2"], id="R1"),
        lambda: reviewer.accept("R1"),
        lambda: reviewer.deliver("R1", recipient="ops@x.test"),
        lambda: reviewer.revoke("E1", reason="doc changed"),
    ]
    for step in steps:
        clock.advance(seconds=1)
        step()
    clock.advance(seconds=1)
    generate_key(tmp_path / "k")
    write_bundle(reviewer, "R1", tmp_path / "k", tmp_path / "r1.zip")
    return tmp_path / "r1.zip"


def _forged(path: Path, change: Callable[[dict[str, Any], Files], None]) -> Any:
    """``path`` changed by ``change``, re-signed with the ledger's key, verified against it."""
    forged = rewrite(path, path.parent / "k", path.parent / "forged.zip", change)
    return verify_bundle(forged, path.parent / "k.pub")


def _summary(edit: Callable[[str], str]) -> Callable[[dict[str, Any], Files], None]:
    def change(_manifest: dict[str, Any], files: Files) -> None:
        files["summary.txt"] = edit(files["summary.txt"].decode()).encode()

    return change


def _prov(edit: Callable[[Prov], None]) -> Callable[[dict[str, Any], Files], None]:
    def change(_manifest: dict[str, Any], files: Files) -> None:
        prov = json.loads(files["prov.json"])
        edit(prov)
        files["prov.json"] = json.dumps(prov, indent=2, sort_keys=True).encode()

    return change


@memory
def test_the_bundle_as_written_verifies(r1_bundle: Path) -> None:
    report = _forged(r1_bundle, lambda _m, _f: None)
    assert report.ok, report.problems
    assert report.unchecked == ()


# -- summary.txt's evidence lines --------------------------------------------------------------

_GOV = (
    "evidence:  GOV1: https://regulator.gov/approval fetched 2026-01-01T00:00:00+00:00, "
    f"sha256:{'a' * 64} (ACCEPTED / VALID)\n"
)


@memory
def test_an_evidence_line_for_a_record_the_bundle_does_not_include_is_refused(
    r1_bundle: Path,
) -> None:
    # Given an evidence line invented for GOV1, which nothing withheld could explain
    report = _forged(
        r1_bundle, _summary(lambda s: s.replace("evidence:  ", _GOV + "evidence:  ", 1))
    )

    # Then it is a problem, not an unchecked note
    assert not report.ok
    assert (
        "summary.txt states GOV1 is ACCEPTED, but the bundle includes no record GOV1 "
        "(manifest.json lists none)"
    ) in report.problems
    assert any(p.startswith("summary.txt has an evidence line for GOV1 (") for p in report.problems)
    assert not any("GOV1" in u for u in report.unchecked)


@memory
def test_an_evidence_line_renamed_is_refused(r1_bundle: Path) -> None:
    report = _forged(r1_bundle, _summary(lambda s: s.replace("evidence:  E2:", "evidence:  EZ:")))

    assert not report.ok
    assert (
        "summary.txt has no evidence line for E2, an evidence record the bundle includes: "
        "the writer lists every one"
    ) in report.problems


@memory
def test_an_evidence_line_left_out_is_refused(r1_bundle: Path) -> None:
    # Given the line telling E1 REVOKED / INVALID deleted
    def drop(summary: str) -> str:
        return "".join(x for x in summary.splitlines(True) if not x.startswith("evidence:  E1:"))

    report = _forged(r1_bundle, _summary(drop))

    assert report.problems == (
        "summary.txt has no evidence line for E1, an evidence record the bundle includes: "
        "the writer lists every one",
    )


@memory
def test_an_evidence_line_told_twice_is_refused(r1_bundle: Path) -> None:
    def twice(summary: str) -> str:
        [line] = [x for x in summary.splitlines(True) if x.startswith("evidence:  E2:")]
        return summary.replace(line, line + line)

    report = _forged(r1_bundle, _summary(twice))

    assert report.problems == ("summary.txt has 2 evidence lines for E2, not one",)


# -- a withheld proposal -----------------------------------------------------------------------


@memory
def test_a_withheld_proposal_names_everything_it_leaves_unchecked(r1_bundle: Path) -> None:
    # Given R1's proposal withheld (its bytes removed), its value and claim key
    # restated everywhere
    def withheld(manifest: dict[str, Any], files: Files) -> None:
        [entry] = [e for e in manifest["events"] if (e["record"], e["type"]) == ("R1", "Proposed")]
        del files[entry["file"]]
        entry["file"] = None
        carried = sum(1 for e in manifest["events"] if e["file"] is not None)
        summary = files["summary.txt"].decode().replace('value:     "on"', 'value:     "off"')
        summary = re.sub(
            r"events:    .*\n",
            f"events:    {carried} included with their stored bytes and inclusion proofs; 1 "
            "listed by leaf hash only (their bytes name a record outside your scopes)\n",
            summary,
        )
        files["summary.txt"] = summary.replace("claim 'r'", "claim 'other'").encode()
        prov = json.loads(files["prov.json"])
        prov["entity"]["rec:R1"].update({"pl:value": '"off"', "pl:claimKey": "other"})
        files["prov.json"] = json.dumps(prov).encode()

    report = _forged(r1_bundle, withheld)

    # Then the signer's word on them is not checked, and the report says so, naming each
    assert report.ok, report.problems
    [note] = [u for u in report.unchecked if u.startswith("R1: its value")]
    assert re.fullmatch(
        r"R1: its value, claim key, kind, scope, conditions, expiry, evidence fields \(URI, "
        r"fetch time, content hash, snapshot, size\) and bases, which only its proposal "
        r"\(Proposed at position \d+, bytes withheld\) says, cannot be checked",
        note,
    )


# -- prov.json: every statement one the writer makes -------------------------------------------


def _act(prov: Prov, label: str) -> str:
    [name] = [str(n) for n, a in prov["activity"].items() if a["prov:label"] == label]
    return name


def _where(prov: Prov, section: str, **match: str) -> dict[str, Any]:
    """The first entry of ``section`` whose attributes have the values ``match`` gives."""
    entries: dict[str, dict[str, Any]] = prov[section]
    for entry in entries.values():
        plain = {k: v.get("$") if isinstance(v, dict) else v for k, v in entry.items()}
        if all(plain.get(k) == want for k, want in match.items()):
            return entry
    raise AssertionError((section, match))


def _attributed(prov: Prov) -> None:
    _where(prov, "wasAttributedTo", **{"prov:entity": "rec:R1"})["prov:agent"] = "agent:reviewer"


def _generated_elsewhere(prov: Prov) -> None:
    act = _act(prov, "Proposed M1")
    entry = _where(prov, "wasGeneratedBy", **{"prov:entity": "rec:R1"})
    entry["prov:activity"], entry["prov:time"] = act, prov["activity"][act]["prov:startTime"]


def _delivery_used(**attrs: Any) -> Callable[[Prov], None]:
    def edit(prov: Prov) -> None:
        act = _act(prov, "Delivered R1")
        _where(prov, "used", **{"prov:activity": act}).update(attrs)

    return edit


def _revocation_typed_acceptance(prov: Prov) -> None:
    prov["activity"][_act(prov, "Revoked E1")]["prov:type"] = {
        "$": "pl:Acceptance",
        "type": "xsd:QName",
    }


def _invalidation_reason(prov: Prov) -> None:
    for entry in prov["wasInvalidatedBy"].values():
        entry["pl:reason"] = "routine"


def _observed(prov: Prov) -> None:
    for entry in prov["wasDerivedFrom"].values():
        entry["pl:dependency"] = "observed"


def _from_hidden(prov: Prov) -> None:
    prov["entity"]["pl:hidden"] = {"prov:label": "<hidden>"}
    prov["wasDerivedFrom"]["_:h"] = {
        "prov:generatedEntity": "rec:R1",
        "prov:usedEntity": "pl:hidden",
    }


def _set(section: str, name: str, value: Any) -> Callable[[Prov], None]:
    return lambda prov: prov.setdefault(section, {}).__setitem__(name, value)


CASES: dict[str, tuple[Callable[[Prov], None], str]] = {
    "R1 attributed to another agent": (
        _attributed,
        "prov.json attributes rec:R1 to agent:reviewer, but its proposal at position ",
    ),
    "R1 generated by M1's proposal": (
        _generated_elsewhere,
        "prov.json states rec:R1 was generated by act:propose-",
    ),
    "used emptied": (
        lambda prov: prov.__setitem__("used", {}),
        "prov.json does not state rec:E1 was used by act:accept-",
    ),
    "the delivery's use of another record": (
        _delivery_used(**{"prov:entity": "rec:M1"}),
        "prov.json states rec:M1 was used by act:deliver-",
    ),
    "the delivery's role changed": (
        _delivery_used(**{"prov:role": {"$": "pl:accepted", "type": "xsd:QName"}}),
        "(pl:accepted), but the Delivered of R1 at position ",
    ),
    "a revocation typed as an acceptance": (
        _revocation_typed_acceptance,
        "pl:Acceptance, but it is the Revoked of E1 at position ",
    ),
    "the invalidation's reason": (
        _invalidation_reason,
        "prov.json states pl:reason 'routine' of the invalidation of rec:E1 by act:revoke-",
    ),
    "an entity's reason": (
        lambda prov: prov["entity"]["rec:E1"].__setitem__("pl:reason", "nothing wrong"),
        "prov.json states pl:reason 'nothing wrong' of rec:E1, but its newest status event",
    ),
    "a stale cause": (
        lambda prov: prov["entity"]["rec:R1"].__setitem__(
            "pl:staleCause", {"$": "rec:E2", "type": "xsd:QName"}
        ),
        "prov.json states pl:staleCause 'rec:E2' of rec:R1, but its newest status event",
    ),
    "a stale cause told hidden": (
        lambda prov: prov["entity"]["rec:R1"].__setitem__(
            "pl:staleCause", {"$": "pl:hidden", "type": "xsd:QName"}
        ),
        "prov.json names pl:hidden as pl:staleCause of rec:R1, but the bundle neither shows",
    ),
    "a declared dependency told observed": (
        _observed,
        "as an observed dependency, but the event at position ",
    ),
    "a derivation from the placeholder": (
        _from_hidden,
        "prov.json has the entity pl:hidden, but the bundle neither shows an ancestor <hidden>",
    ),
    "a derivation from another namespace": (
        _set(
            "wasDerivedFrom", "_:x", {"prov:generatedEntity": "rec:R1", "prov:usedEntity": "ex:g"}
        ),
        "prov.json derives rec:R1 from ex:g, but the bundle includes no such record",
    ),
    "the rec prefix redefined": (
        lambda prov: prov["prefix"].__setitem__("rec", "urn:other:"),
        "prov.json binds the prefix rec to 'urn:other:', but the writer binds it to ",
    ),
    "an agent relabelled": (
        lambda prov: prov["agent"]["agent:agent-1"].__setitem__("prov:label", "ceo"),
        "prov.json states the agent agent:agent-1 as {'prov:label': 'ceo'}",
    ),
    "an entity added": (
        _set("entity", "rec:ZZ", {"prov:label": "ZZ"}),
        "prov.json has the entity rec:ZZ, a record the bundle does not include",
    ),
    "an agent added": (
        _set("agent", "agent:mallory", {"prov:label": "mallory"}),
        "prov.json has the agent agent:mallory, but no activity it lists is associated",
    ),
    "an influence added": (
        _set("wasInfluencedBy", "_:x", {"prov:influencee": "rec:R1", "prov:influencer": "x"}),
        "prov.json states x influenced rec:R1, but the bundle lists no event",
    ),
    "a delegation added": (
        _set("actedOnBehalfOf", "_:x", {"prov:delegate": "agent:reviewer"}),
        "prov.json has the section actedOnBehalfOf, which the bundle writer never writes",
    ),
    "an alternate added": (
        _set("alternateOf", "_:x", {"prov:alternate1": "rec:R1", "prov:alternate2": "rec:E2"}),
        "prov.json has the section alternateOf, which the bundle writer never writes",
    ),
    "a bundle added": (
        _set("bundle", "ex:b", {"entity": {"rec:Q": {}}}),
        "prov.json has the section bundle, which the bundle writer never writes",
    ),
    "wasInformedBy removed": (
        lambda prov: prov.pop("wasInformedBy"),
        "prov.json does not state act:mark-stale-",
    ),
}


@memory
@pytest.mark.parametrize("case", list(CASES))
def test_a_prov_statement_the_events_do_not_make_is_refused(r1_bundle: Path, case: str) -> None:
    # Given one statement of prov.json edited, the bundle re-signed with the ledger's key
    edit, expected = CASES[case]
    report = _forged(r1_bundle, _prov(edit))

    # Then it fails, naming the statement and what the events say instead
    assert not report.ok
    assert any(expected in p for p in report.problems), report.problems


def test_the_export_and_the_verifier_share_one_vocabulary() -> None:
    from ledger.prov import _ACTIVITIES, ACT, AGENT, BASIS, PL, REC

    assert ACTIVITIES == _ACTIVITIES
    assert {ns.prefix: ns.uri for ns in (PL, REC, AGENT, ACT, BASIS)} == PREFIXES


# -- files the writer never writes -------------------------------------------------------------


@memory
def test_a_file_added_and_listed_is_refused(r1_bundle: Path) -> None:
    def added(_manifest: dict[str, Any], files: Files) -> None:
        files["extra.txt"] = b"hi"

    report = _forged(r1_bundle, added)

    assert report.problems == (
        "the bundle holds extra.txt, a file its writer never writes (a bundle holds "
        "summary.txt, prov.json, head.json, public_key.pem, its events' bytes and its manifest)",
    )


@memory
def test_event_bytes_no_event_entry_names_are_refused(r1_bundle: Path) -> None:
    def added(manifest: dict[str, Any], files: Files) -> None:
        last = manifest["events"][-1]
        files["events/000000009999.bin"] = files[last["file"]]

    report = _forged(r1_bundle, added)

    assert report.problems == (
        "the bundle holds events/000000009999.bin, a file its writer never writes (no event "
        "entry names it as its bytes)",
    )


@memory
def test_event_bytes_under_another_name_are_refused(r1_bundle: Path) -> None:
    def renamed(manifest: dict[str, Any], files: Files) -> None:
        entry = manifest["events"][0]
        files["events/first.bin"] = files.pop(entry["file"])
        entry["file"] = "events/first.bin"

    report = _forged(r1_bundle, renamed)

    position = json.loads(zipfile.ZipFile(r1_bundle).read("manifest.json"))["events"][0]["position"]
    assert report.problems == (
        f"manifest.json lists the bytes of the event at position {position} in "
        f"events/first.bin, but the writer names them events/{position:012d}.bin",
    )


@memory
def test_a_bundle_with_no_evidence_says_so_once(world: World, tmp_path: Path) -> None:
    # Given a bundle of F1, a fact resting on nothing: its summary says no evidence
    # is among the records
    world.agent.propose("proj-a", "f", 1, Kind.FACT, id="F1")
    generate_key(tmp_path / "k")
    write_bundle(world.reviewer, "F1", tmp_path / "k", tmp_path / "f1.zip")
    assert verify_bundle(tmp_path / "f1.zip", tmp_path / "k.pub").ok

    # When that line is removed, or an evidence line invented beside it
    gone = _forged(
        tmp_path / "f1.zip",
        _summary(lambda s: s.replace("evidence:  none among the records you may audit\n", "")),
    )
    invented = _forged(
        tmp_path / "f1.zip",
        _summary(lambda s: s.replace("evidence:  none", _GOV + "evidence:  none")),
    )

    # Then each is refused
    assert gone.problems == (
        "summary.txt has 0 lines saying no evidence is among the records, not one",
    )
    assert any(p.startswith("summary.txt has an evidence line for GOV1") for p in invented.problems)
