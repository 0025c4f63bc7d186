"""Verifying what a bundle states (manifest.json, prov.json, summary.txt: each
record's status, validity, bases and ancestry) against the events it carries,
decoded from their stored bytes, and those events against the status machine
(:func:`_check_statements`); ``prov.json``'s activities and times in
:mod:`ledger.bundle.verify_activities`.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import msgpack

from ledger.bundle.told import (
    HISTORY_LABELS,
    LATER_LABELS,
    _machine,
    _tell,
    _Told,
    history_line,
    one_line,
)
from ledger.bundle.verify_activities import _check_activities
from ledger.bundle.verify_derivations import _Carried, _check_derivations, _plain
from ledger.bundle.verify_prov import _check_prov_statements
from ledger.bundle.verify_status import check_status_line, summary_form
from ledger.domain import Status, Validity
from ledger.jsonable import value_text
from ledger.serialization import unpack
from ledger.values import HIDDEN

# What the bundle states of a record, in each file that states it: (file, record,
# status, validity or None).
_Statement = tuple[str, str, str, str | None]


def _check_statements(
    members: dict[str, bytes], manifest: dict[str, Any], problems: list[str]
) -> tuple[str, ...]:
    """Check each status, validity and basis the bundle states (manifest.json,
    prov.json, summary.txt) against the events it carries, decoded from their
    stored bytes, and that those events could be a ledger's (each a transition
    the status machine allows after the ones before it, a withheld one by the
    type listed for it; nothing CANDIDATE or ACCEPTED left resting on a record
    withdrawn); return what withheld bytes leave unchecked."""
    records, listed = manifest.get("records"), manifest.get("events")
    if not isinstance(records, list) or not isinstance(listed, list):
        return ()  # already named
    stated = {
        r["id"]: r
        for r in records
        if isinstance(r, dict) and isinstance(r.get("id"), str) and r["id"] != HIDDEN
    }
    ids = [r.get("id") for r in records if isinstance(r, dict)]
    for rid in sorted({i for i in ids if ids.count(i) > 1}, key=str):
        # Readers take the first entry, a dict the last: state each record once.
        problems.append(f"manifest.json includes {rid} more than once")
    hidden = any(isinstance(r, dict) and r.get("id") == HIDDEN for r in records)
    root = manifest.get("record")
    if root not in stated:
        problems.append(f"manifest.json does not include the record it is the bundle of ({root})")
        return ()
    events = _carried(members, listed, stated, problems)
    created = _created(manifest)
    told: dict[str, _Told] = {}
    unchecked: list[str] = []
    for rid in stated:
        t = _told_of(rid, events.get(rid, []), problems)
        if t is None:
            continue
        told[rid] = t
        if "(bytes withheld)" in t.by:
            unchecked.append(
                f"{rid}: its status {t.status} rests on the type manifest.json lists for {t.by}"
            )
        unchecked.extend(f"{rid}: {what} cannot be checked" for what in t.unknown)
    statements = list(_statements(members, stated))
    for where, rid, status, validity in statements:
        if rid in told:
            _compare(where, rid, status, validity, told[rid], created, problems)
        elif rid not in stated:
            # Nothing is withheld of a record the bundle leaves out: it states none.
            problems.append(
                f"{where} states {rid} is {status}, but the bundle includes no record {rid} "
                "(manifest.json lists none)"
            )
    problems += _machine({rid: [(p, k, f) for p, k, f, _v, _o in events[rid]] for rid in told})
    _check_validities(statements, stated, told, problems)
    _check_summary_ancestry(members, str(root), stated, hidden, problems)
    _check_evidence_lines(members, stated, problems)
    form = summary_form(manifest)
    if form < 1:
        problems.append(f"manifest.json's summary is {manifest.get('summary')!r}, not a form")
    _check_summary_lines(members, str(root), events, problems, form)
    summary = members.get("summary.txt", b"").decode("utf-8", "replace").splitlines()
    check_status_line(summary, str(root), form, told, events, problems, unchecked, hidden, created)
    _check_events_line(members, listed, problems)
    _check_proposals(members, str(root), stated, told, problems)
    _check_activities(members, events, problems)
    _check_ancestry(members, str(root), stated, hidden, told, events, problems, unchecked)
    return tuple(dict.fromkeys(unchecked))


def _created(manifest: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(manifest.get("created")))
    except ValueError:
        return None


def _carried(
    members: dict[str, bytes],
    listed: list[Any],
    stated: dict[str, Any],
    problems: list[str],
) -> dict[str, list[_Carried]]:
    """Each included record's listed events in log order, decoded where carried."""
    out: dict[str, list[_Carried]] = {}
    for entry in listed:
        try:
            rid, position, kind = str(entry["record"]), int(entry["position"]), str(entry["type"])
            name = entry["file"]
        except (KeyError, TypeError, ValueError):
            continue  # already named as malformed
        if rid not in stated:
            problems.append(
                f"manifest.json lists the {kind} event at position {position} of {rid!r}, "
                "a record the bundle does not include"
            )
            continue
        fields: Any = None
        version = oid = None
        # A file named but not held is refused by the check of the events
        # (verify._check_events); its fields are unknown here, as if withheld.
        content = None if name is None else members.get(str(name))
        if content is not None:
            try:
                stored = msgpack.unpackb(content, raw=False)
                oid, version = str(stored[1]), int(stored[2])
                fields = unpack(stored[4])
                if not isinstance(fields, dict):
                    raise ValueError("not a mapping of fields")
            except (ValueError, TypeError, IndexError, msgpack.UnpackException) as exc:
                problems.append(
                    f"{name} (the {kind} event of {rid!r} at position {position}) "
                    f"holds no readable event state ({exc})"
                )
                continue
        out.setdefault(rid, []).append((position, kind, fields, version, oid))
    return {rid: sorted(evs, key=lambda e: e[0]) for rid, evs in out.items()}


def _told_of(rid: str, events: list[_Carried], problems: list[str]) -> _Told | None:
    """What ``rid``'s listed events say of it, after checking they are all of its
    events, in order, from its proposal on."""
    if not events:
        problems.append(f"the bundle states {rid!r} but lists none of its events")
        return None
    if events[0][1] != "Proposed":
        problems.append(
            f"the events the bundle lists for {rid!r} do not start with its proposal "
            f"(the first is {events[0][1]} at position {events[0][0]})"
        )
    if len({oid for *_, oid in events if oid is not None}) > 1:
        problems.append(f"the events the bundle lists for {rid!r} belong to different records")
    for number, (position, _kind, _fields, version, _oid) in enumerate(events, start=1):
        if version is not None and version != number:
            problems.append(
                f"the event at position {position} is event {version} of {rid!r}, but the "
                f"bundle lists it as event {number}: the bundle leaves out events of {rid!r}"
            )
            break
    try:
        told = _tell(rid, ((p, k, f) for p, k, f, _, _ in events))
    except (ValueError, KeyError, TypeError) as exc:
        problems.append(f"the events the bundle carries for {rid!r} are not a record's ({exc})")
        return None
    if told.record_id != rid:
        problems.append(f"the events the bundle lists for {rid!r} are those of {told.record_id!r}")
        return None
    return told


def _statements(members: dict[str, bytes], stated: dict[str, Any]) -> Iterable[_Statement]:
    """Every (file, record, status, validity) the bundle states."""
    for rid, entry in stated.items():
        yield "manifest.json", rid, str(entry.get("status")), str(entry.get("validity"))
    try:
        entities = json.loads(members.get("prov.json", b"{}")).get("entity") or {}
    except (ValueError, AttributeError):
        entities = {}  # its digest check names it
    for name, attrs in entities.items() if isinstance(entities, dict) else ():
        if isinstance(name, str) and name.startswith("rec:") and isinstance(attrs, dict):
            status, validity = attrs.get("pl:status"), attrs.get("pl:validity")
            if status is not None:
                yield (
                    "prov.json",
                    name[4:],
                    str(status),
                    None if validity is None else str(validity),
                )
    summary = members.get("summary.txt", b"").decode("utf-8", "replace").splitlines()
    root = next(iter(stated))
    for line in summary:
        if m := re.match(r"status:\s+(\S+) / (\S+)", line):
            yield "summary.txt", root, m[1], m[2]
        elif m := re.match(r"evidence:\s+(\S+): .*\((\w+) / (\w+)\)$", line):
            yield "summary.txt", m[1], m[2], m[3]
        elif line.startswith("ancestry:"):
            for m in re.finditer(r"([^\s,]+) \((\w+), (\w+)\)", line):
                yield "summary.txt", m[1], m[3], None


def _check_summary_ancestry(
    members: dict[str, bytes],
    root: str,
    stated: dict[str, Any],
    hidden: bool,
    problems: list[str],
) -> None:
    """summary.txt's ancestry line names exactly the ancestors manifest.json includes."""
    summary = members.get("summary.txt", b"").decode("utf-8", "replace").splitlines()
    line = next((x for x in summary if x.startswith("ancestry:")), None)
    if line is None:
        return
    text = line[len("ancestry:") :].strip()
    named = {m[1] for m in re.finditer(r"([^\s,]+) \((\w+), (\w+)\)", text)}
    if HIDDEN in text.split(", "):
        named.add(HIDDEN)
    included = (set(stated) - {root}) | ({HIDDEN} if hidden else set())
    if named != included:
        problems.append(
            f"summary.txt gives {root}'s ancestry as {text!r}, but manifest.json includes "
            f"{', '.join(sorted(included)) or 'none'}"
        )


def _check_evidence_lines(
    members: dict[str, bytes], stated: dict[str, Any], problems: list[str]
) -> None:
    """summary.txt has one evidence line for each evidence record manifest.json
    includes, and none for anything else (the writer lists every included
    evidence record, none outside them: a hidden one has no line), or the one
    line saying there is none."""
    summary = members.get("summary.txt", b"").decode("utf-8", "replace").splitlines()
    lines = [x for x in summary if x.startswith("evidence:  ")]
    wanted = [rid for rid, entry in stated.items() if entry.get("kind") == "evidence"]
    named: list[str] = []
    for line in lines:
        if line == "evidence:  none among the records you may audit":
            if wanted:
                problems.append(
                    f"summary.txt says no evidence is among the records, but manifest.json "
                    f"includes {', '.join(wanted)} as evidence"
                )
            continue
        rid = line[len("evidence:  ") :].partition(": ")[0]
        named.append(rid)
        if rid not in stated:
            problems.append(
                f"summary.txt has an evidence line for {rid} ({line[:80]!r}), but the bundle "
                f"includes no record {rid}"
            )
        elif rid not in wanted:
            problems.append(
                f"summary.txt has an evidence line for {rid}, but manifest.json includes it as "
                f"{stated[rid].get('kind')}, not evidence"
            )
    for rid in sorted({r for r in named if named.count(r) > 1}):
        problems.append(f"summary.txt has {named.count(rid)} evidence lines for {rid}, not one")
    for rid in wanted:
        if rid not in named:
            problems.append(
                f"summary.txt has no evidence line for {rid}, an evidence record the bundle "
                "includes: the writer lists every one"
            )
    none = lines.count("evidence:  none among the records you may audit")
    if not wanted and none != 1:
        problems.append(
            f"summary.txt has {none} lines saying no evidence is among the records, not one"
        )


def _compare(
    where: str,
    rid: str,
    status: str,
    validity: str | None,
    told: _Told,
    created: datetime | None,
    problems: list[str],
) -> None:
    if told.status is None:  # a withheld revalidation made it ACCEPTED or CANDIDATE
        if status not in (Status.ACCEPTED, Status.CANDIDATE):
            problems.append(
                f"{where} states {rid} is {status}, but its events ({told.by}) leave it "
                "ACCEPTED or CANDIDATE"
            )
        return
    if status != told.status:
        problems.append(
            f"{where} states {rid} is {status}, but the events the bundle carries make it "
            f"{told.status} ({told.by})"
        )
    elif validity is not None and validity not in told.validities(created):
        expired = told.status == Status.ACCEPTED and validity == Validity.VALID
        problems.append(
            f"{where} states {rid} is {status} / {validity}, but "
            + (
                f"its events say it expired {told.expires}"
                if expired
                else f"a {status} record is not {validity}"
            )
        )


def _check_validities(
    statements: list[_Statement],
    stated: dict[str, Any],
    told: dict[str, _Told],
    problems: list[str],
) -> None:
    """Every file states each record as manifest.json does, and a record stated
    VALID rests on records stated VALID: a record is usable only while all it rests
    on is (an ACCEPTED record's validity follows the earliest expiry of it and of
    everything it rests on; what rests on a withdrawn record is marked STALE)."""
    for where, rid, status, validity in statements:
        entry = stated.get(rid)
        if where == "manifest.json" or entry is None or status != entry.get("status"):
            continue  # a status other than the events' is named by the check of statuses
        if validity is not None and validity != entry.get("validity"):
            problems.append(
                f"{where} states {rid} is {status} / {validity}, but manifest.json states it "
                f"is {entry.get('status')} / {entry.get('validity')}"
            )
    for rid, t in told.items():
        if stated[rid].get("validity") != Validity.VALID or not t.bases_known:
            continue
        for base in (*(t.parents or ()), *(t.observed or ())):
            entry = stated.get(base)
            if entry is not None and entry.get("validity") != Validity.VALID:
                problems.append(
                    f"manifest.json states {rid} is {Validity.VALID}, but also that {base}, "
                    f"which it rests on, is {entry.get('status')} / {entry.get('validity')}: "
                    "a record is VALID only while every record it rests on is"
                )
                break


def _check_ancestry(
    members: dict[str, bytes],
    root: str,
    stated: dict[str, Any],
    hidden: bool,
    told: dict[str, _Told],
    events: dict[str, list[_Carried]],
    problems: list[str],
    unchecked: list[str],
) -> None:
    """The records the bundle includes (and prov.json's derivations) against the
    bases their events name."""
    for rid, t in told.items():
        if not t.bases_known:
            continue
        # Known bases were read from bytes the bundle carries, and a bundle carries
        # only bytes naming records its author could audit (the others' are
        # withheld): so each is one the bundle must include, and HIDDEN, which
        # stands for records named in withheld bytes only, cannot stand for it.
        missing = sorted(t.bases - set(stated))
        if missing and not hidden:
            problems.append(
                f"the events of {rid} name {', '.join(missing)} as a basis, but the bundle "
                f"neither includes {'it' if len(missing) == 1 else 'them'} nor shows an "
                f"ancestor {HIDDEN}"
            )
        elif missing:
            problems.append(
                f"the events of {rid} name {', '.join(missing)} as a basis in bytes the "
                f"bundle carries, but it does not include {'it' if len(missing) == 1 else 'them'}"
                f": {HIDDEN} stands only for records named in bytes it withholds"
            )
    # Every basis named in carried bytes is one the record held (its leaf vouches
    # for it), known or not the rest: an ancestor reached through them is proved.
    reached, frontier, open_ended = {root}, [root], False
    while frontier:
        rid = frontier.pop()
        node = told.get(rid)
        if node is None or not node.bases_known:
            open_ended = True
        if node is None:
            continue
        for base in sorted(node.bases & set(stated) - reached):
            reached.add(base)
            frontier.append(base)
    for rid in sorted(set(stated) - reached):
        if open_ended or hidden:
            unchecked.append(f"{rid}: that it is an ancestor of {root} cannot be checked")
        else:
            problems.append(
                f"the bundle includes {rid} as an ancestor of {root}, but no event it carries "
                f"makes {rid} a basis of {root} or of its ancestors"
            )
    try:
        prov = json.loads(members.get("prov.json", b"{}"))
    except ValueError:
        return
    if isinstance(prov, dict):
        _check_derivations(prov, stated, told, events, problems)
        _check_prov_statements(prov, stated, told, events, hidden, problems)


#: summary.txt's lines the verifier reads, each in the one form the writer gives it.
_SUMMARY_FORMS = {
    "status:": re.compile(r"status:    \S+ / \S+( \(.*\))?$"),
    "evidence:": re.compile(
        r"evidence:  (none among the records you may audit|\S+: .* \(\w+ / \w+\))$"
    ),
    "ancestry:": re.compile(r"ancestry:  .+$"),
}
_HISTORY = re.compile(
    rf"^(?P<indent>  )?(?P<label>{'|'.join(HISTORY_LABELS.values())}):"
    r" +(?:(?P<rid>\S+) )?by (?P<actor>.+?) at (?P<at>\S+) \(log position (?P<pos>\d+)\)"
)
_LABEL = HISTORY_LABELS
#: How every other line of summary.txt starts (a blank line is one too).
_OTHER_LINES = re.compile(
    r"(provledger compliance bundle|record:    |value:     |status:    |evidence:  |ancestry:  "
    r"|signed head: |events:    |check:     |$)"
)


#: summary.txt's count of the events listed.
_EVENTS_LINE = re.compile(
    r"events:    (\d+) included with their stored bytes and inclusion proofs"
    r"(?:; (\d+) listed by leaf hash only \(.*\))?$"
)


def _check_events_line(members: dict[str, bytes], listed: list[Any], problems: list[str]) -> None:
    """summary.txt counts the events the manifest lists as they are listed: with
    their bytes, and by leaf hash only (withheld)."""
    summary = members.get("summary.txt", b"").decode("utf-8", "replace").splitlines()
    said = [m for line in summary if (m := _EVENTS_LINE.match(line))]
    withheld = sum(1 for e in listed if isinstance(e, dict) and e.get("file") is None)
    if len(said) == 1:
        included, left = int(said[0][1]), int(said[0][2] or 0)
        if (included, left) == (len(listed) - withheld, withheld):
            return
        problems.append(
            f"summary.txt counts {included} events with their bytes and {left} withheld, "
            f"but manifest.json lists {len(listed) - withheld} and {withheld}"
        )
    else:
        problems.append(f"summary.txt has {len(said)} lines counting the events, not one")


def _check_summary_lines(
    members: dict[str, bytes],
    root: str,
    events: dict[str, list[_Carried]],
    problems: list[str],
    written: int = 1,
) -> None:
    """summary.txt's status, evidence and ancestry lines are each in the form the
    writer gives them (a line the checks cannot read is not a line they passed),
    it has no line of a kind the writer never writes, and its history lines are
    the events the bundle lists, each, where its bytes are carried, exactly the
    line they make (actor, time, reason or note, a stale marking's cause, a
    correction's delivery). Stale markings and corrections are required only
    of a summary that tells one: earlier writers told none."""
    summary = members.get("summary.txt", b"").decode("utf-8", "replace").splitlines()
    counts = dict.fromkeys(_SUMMARY_FORMS, 0)
    for line in summary:
        for start, form in _SUMMARY_FORMS.items():
            if line.lower().lstrip().startswith(start):
                counts[start] += 1
                if not form.match(line):
                    problems.append(
                        f"summary.txt has a line the bundle writer never writes: {line[:80]!r}"
                    )
    for start in ("status:", "ancestry:"):
        if counts[start] != 1:
            problems.append(f"summary.txt has {counts[start]} {start[:-1]} lines, not one")
    by_position = {
        position: (rid, kind, fields)
        for rid, evs in events.items()
        for position, kind, fields, _v, _o in evs
    }
    told_lines: set[int] = set()
    later = False  # whether it tells the events earlier summaries did not
    for line in summary:
        m = _HISTORY.match(line)
        if m is None:
            if not _OTHER_LINES.match(line):
                problems.append(
                    f"summary.txt has a line the bundle writer never writes: {line[:80]!r}"
                )
            continue
        position = int(m["pos"])
        rid = root if m["indent"] is None else m["rid"]
        listed = by_position.get(position)
        if listed is None or listed[0] != rid or _LABEL.get(listed[1]) != m["label"]:
            problems.append(
                f"summary.txt says {rid} was {m['label']} at log position {position}, but the "
                "bundle lists no such event"
            )
            continue
        told_lines.add(position)
        later = later or listed[1] in LATER_LABELS
        fields = listed[2]
        if isinstance(fields, dict):
            at = fields.get("timestamp")
            when = (
                at.astimezone(UTC).isoformat(timespec="seconds")
                if isinstance(at, datetime)
                else None
            )
            if m["actor"] != str(fields.get("actor")) or (when is not None and m["at"] != when):
                problems.append(
                    f"summary.txt says {rid} was {m['label']} by {m['actor']} at {m['at']}, but "
                    f"the event at position {position} is by {fields.get('actor')} at {when}"
                )
            elif isinstance(at, datetime):
                # The rest of the line (a reason, a note, a stale marking's cause)
                # is what the event says too.
                told = history_line(listed[1], m["rid"], fields.get("actor"), at, position, fields)
                expected = one_line((m["indent"] or "") + told)
                # A summary of the first form told a proposal without its version
                # and expiry (:mod:`~ledger.bundle.verify_status`).
                earlier = history_line(
                    listed[1], m["rid"], fields.get("actor"), at, position, fields, proposal=False
                )
                told_so = (expected, one_line((m["indent"] or "") + earlier))
                if line not in told_so[: 1 if written >= 2 else 2]:
                    problems.append(
                        f"summary.txt tells the {listed[1]} of {rid} at log position {position} "
                        f"as {line.strip()[:120]!r}, but its event says {expected.strip()[:120]!r}"
                    )
    for position, (rid, kind, _fields) in sorted(by_position.items()):
        # A summary written before it told stale markings and corrections tells none.
        if kind in LATER_LABELS and not later:
            continue
        if kind in _LABEL and position not in told_lines:
            problems.append(
                f"summary.txt does not tell the {kind} event of {rid} at log position {position}"
            )


def _check_proposals(
    members: dict[str, bytes],
    root: str,
    stated: dict[str, Any],
    told: dict[str, _Told],
    problems: list[str],
) -> None:
    """What the bundle states of each record itself (its scope, kind, claim key,
    value and evidence) is what its carried proposal says."""
    try:
        entities = json.loads(members.get("prov.json", b"{}")).get("entity") or {}
    except (ValueError, AttributeError):
        entities = {}
    summary = members.get("summary.txt", b"").decode("utf-8", "replace").splitlines()
    for rid, t in told.items():
        p = t.proposal
        if p is None:
            continue
        claims: list[tuple[str, str, object, object]] = [
            ("manifest.json", "scope", stated[rid].get("scope"), p["scope"]),
            ("manifest.json", "kind", stated[rid].get("kind"), p["kind"]),
        ]
        attrs = entities.get(f"rec:{rid}") if isinstance(entities, dict) else None
        if isinstance(attrs, dict):
            ev = p["evidence"] if isinstance(p["evidence"], dict) else {}
            for attr, want in (
                ("pl:scope", p["scope"]),
                ("pl:kind", p["kind"]),
                ("pl:claimKey", p["claim_key"]),
                ("pl:contentHash", ev.get("content_hash")),
                ("pl:snapshotRef", ev.get("snapshot_ref")),
                ("pl:uri", ev.get("uri")),
            ):
                value = attrs.get(attr)
                if isinstance(value, dict):
                    value = value.get("$")
                if value is not None or want is not None:
                    claims.append(("prov.json", attr, value, want))
            claims += [("prov.json", *claim) for claim in _prov_of_proposal(attrs, t)]
        if isinstance(p["evidence"], dict):
            ev = p["evidence"]
            fetched = ev.get("fetched_at")
            when = (
                fetched.astimezone(UTC).isoformat(timespec="seconds")
                if isinstance(fetched, datetime)
                else "?"
            )
            expected = one_line(
                f"evidence:  {rid}: {ev.get('uri')} fetched {when}, {ev.get('content_hash')} ("
            )
            lines = [x for x in summary if x.startswith(f"evidence:  {rid}: ")]
            if lines and not all(x.startswith(expected) for x in lines):
                problems.append(
                    f"summary.txt gives {rid}'s evidence as {lines[0][:120]!r}, but its proposal "
                    f"says {expected[:120]!r}"
                )
        if rid == root:
            claims.append(
                (
                    "summary.txt",
                    "kind, scope and claim key",
                    next((x for x in summary if x.startswith("record:")), None),
                    one_line(
                        f"record:    {rid} ({p['kind']}, scope {p['scope']}, "
                        f"claim {p['claim_key']!r})"
                    ),
                )
            )
            claims.append(
                (
                    "summary.txt",
                    "value",
                    next((x for x in summary if x.startswith("value:")), None),
                    one_line(
                        "value:     "
                        + json.dumps(p["value"], default=repr, ensure_ascii=False)[:200]
                    ),
                )
            )
        for where, name, shown, logged in claims:
            if str(shown) != str(logged):
                problems.append(
                    f"{where} states {rid}'s {name} as {str(shown)[:120]!r}, but its proposal "
                    f"says {str(logged)[:120]!r}"
                )


def _prov_of_proposal(attrs: dict[str, Any], told: _Told) -> list[tuple[str, object, object]]:
    """(attribute, as ``prov.json`` states it, as the carried proposal says it) for
    the rest of what ``prov.json`` states of a record that its proposal alone
    decides: its label (its id), value and conditions (as JSON text), its
    expiry, and its evidence's fetch time and size; times compared as instants."""
    p = told.proposal
    assert p is not None
    ev = p["evidence"] if isinstance(p["evidence"], dict) else {}
    fetched, size = ev.get("fetched_at"), ev.get("size")
    wanted: dict[str, object] = {
        "prov:label": told.record,
        "pl:value": _asvalue_text(p["value"]),
        "pl:conditions": _asvalue_text(p["conditions"]) if p.get("conditions") else None,
        "pl:expires": told.expires,
        "pl:fetchedAt": fetched if isinstance(fetched, datetime) else None,
        "pl:size": size if isinstance(size, int) else None,
    }
    out: list[tuple[str, object, object]] = []
    for attr, want in wanted.items():
        shown = _plain(attrs.get(attr))
        if isinstance(want, datetime):
            want = want.astimezone(UTC).isoformat()
            with contextlib.suppress(ValueError, OverflowError):  # not a time: compared as given
                shown = datetime.fromisoformat(str(shown)).astimezone(UTC).isoformat()
        if shown is not None or want is not None:
            out.append((attr, shown, want))
    return out


def _asvalue_text(value: Any) -> str:
    """:func:`_json_text`, or why a value no proposal holds has none (a type the
    ledger never writes in a value, decoded from bytes the bundle carries)."""
    try:
        return value_text(value)
    except (TypeError, ValueError) as exc:
        return f"<a value with no JSON text: {exc}>"
