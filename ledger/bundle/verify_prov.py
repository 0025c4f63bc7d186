"""Verifying that every statement ``prov.json`` makes is one the writer makes from
the events a bundle lists (:func:`_check_prov_statements`).

The writer (:func:`ledger.bundle.documents._prov_json`, over :mod:`ledger.prov`)
states nothing but what the records' events imply: its four namespaces (and
``basis:`` for a record on a new basis), its sections, one entity per included
record (and the ``pl:hidden`` placeholder where the bundle shows one), one
agent per principal an activity is associated with or a record attributed to,
and, for each event, the relations its type and carried bytes make. Each is
checked here against those events: a statement about an event whose bytes are
withheld is checked against the type the signed manifest lists for it, the rest
of it being the signer's word (listed as unchecked by the checks of statuses).
The activities themselves, and every time stated, are checked in
:mod:`ledger.bundle.verify_activities`; the derivations in
:mod:`ledger.bundle.verify_derivations`.
"""

from __future__ import annotations

from typing import Any

from ledger.bundle.prov_terms import (
    ACTIVITIES,
    ACTIVITY_ATTRIBUTES,
    ENTITY_ATTRIBUTES,
    HIDDEN_ENTITY,
    PREFIXES,
    RELATION_ATTRIBUTES,
    SECTIONS,
    STATUS_EVENTS,
    Listed,
    act_of,
    ref_of,
)
from ledger.bundle.told import _Told
from ledger.bundle.verify_derivations import _Carried, _plain, _relations
from ledger.bundle.verify_prov_relations import (
    _check_generation,
    _check_informed,
    _check_invalidations,
    _check_uses,
)
from ledger.values import WITHHELD, WITHHELD_SUPERSEDED


def _check_prov_statements(
    prov: dict[str, Any],
    stated: dict[str, Any],
    told: dict[str, _Told],
    events: dict[str, list[_Carried]],
    hidden: bool,
    problems: list[str],
) -> None:
    """Every statement of ``prov.json`` is one the writer makes from the listed
    events (see the module docstring); each failure names the statement and what
    the events say instead."""
    listed: list[Listed] = sorted(
        ((rid, kind, p, f) for rid, evs in events.items() for p, kind, f, _v, _o in evs),
        key=lambda e: e[2],
    )
    # A bundle that carries every event's bytes and shows no ancestor <hidden> has
    # nothing to show as the placeholder (one whose bytes name a record the reader
    # may not audit are withheld).
    hidden = hidden or any(not isinstance(f, dict) for *_, f in listed)
    _check_outline(prov, problems)
    if not hidden:
        _check_nothing_hidden(prov, problems)
    _check_entities(prov, stated, told, events, hidden, problems)
    _check_agents(prov, problems)
    acts = {act_of(kind, p): (rid, kind, p, f) for rid, kind, p, f in listed}
    _check_activity_attributes(prov, acts, stated, problems)
    _check_generation(prov, stated, events, problems)
    _check_uses(prov, acts, listed, stated, problems)
    _check_invalidations(prov, acts, listed, problems)
    _check_informed(prov, acts, listed, stated, problems)
    for entry in _relations(prov, "wasAssociatedWith"):
        act = str(_plain(entry.get("prov:activity")))
        if act not in acts:
            problems.append(
                f"prov.json associates {act} with {_plain(entry.get('prov:agent'))}, but the "
                "bundle lists no event of that activity"
            )
    for entry in _relations(prov, "specializationOf"):
        specific = str(_plain(entry.get("prov:specificEntity")))
        if not specific.startswith("basis:"):
            problems.append(
                f"prov.json makes {specific} a specialization of "
                f"{_plain(entry.get('prov:generalEntity'))}, which the writer never states"
            )


def _check_nothing_hidden(prov: dict[str, Any], problems: list[str]) -> None:
    """No statement names the placeholder in a bundle that hides nothing."""
    for section, entries in sorted(prov.items()):
        if section in ("prefix", "entity") or not isinstance(entries, dict):
            continue  # (the placeholder's entity is named by the check of entities)
        for name, entry in sorted(entries.items()):
            for item in entry if isinstance(entry, list) else [entry]:
                for attr, value in sorted(item.items() if isinstance(item, dict) else ()):
                    if _plain(value) == HIDDEN_ENTITY:
                        problems.append(
                            f"prov.json names {HIDDEN_ENTITY} as {attr} of {name} "
                            f"({section}), but the bundle neither shows an ancestor <hidden> "
                            "nor withholds any event's bytes: it hides nothing"
                        )
    entities = prov.get("entity")
    for name, attrs in sorted(entities.items() if isinstance(entities, dict) else ()):
        for attr, value in sorted(attrs.items() if isinstance(attrs, dict) else ()):
            if _plain(value) == HIDDEN_ENTITY:
                problems.append(
                    f"prov.json names {HIDDEN_ENTITY} as {attr} of {name}, but the bundle "
                    "neither shows an ancestor <hidden> nor withholds any event's bytes: it "
                    "hides nothing"
                )


def _check_outline(prov: dict[str, Any], problems: list[str]) -> None:
    """The writer's namespaces, each bound as it binds it, and its sections only."""
    prefixes = prov.get("prefix")
    prefixes = prefixes if isinstance(prefixes, dict) else {}
    for name, uri in sorted(prefixes.items()):
        if PREFIXES.get(name) != uri:
            problems.append(
                f"prov.json binds the prefix {name} to {uri!r}, but the writer binds "
                + (f"it to {PREFIXES[name]!r}" if name in PREFIXES else "no such prefix")
            )
    for name in ("pl", "rec", "agent", "act"):
        if name not in prefixes:
            problems.append(f"prov.json does not bind the prefix {name} to {PREFIXES[name]!r}")
    for section in sorted(set(prov) - SECTIONS):
        problems.append(
            f"prov.json has the section {section}, which the bundle writer never writes"
        )
    for section, allowed in RELATION_ATTRIBUTES.items():
        for entry in _relations(prov, section):
            for attr in sorted(set(entry) - allowed):
                said = ", ".join(f"{k}={_plain(v)}" for k, v in sorted(entry.items()))
                problems.append(
                    f"prov.json states {attr} in a {section} ({said[:160]}), which the "
                    "writer never states there"
                )


def _last_status_event(evs: list[_Carried]) -> tuple[str, int, Any] | None:
    found = [(kind, p, f) for p, kind, f, _v, _o in evs if kind in STATUS_EVENTS]
    return found[-1] if found else None


def _check_entities(
    prov: dict[str, Any],
    stated: dict[str, Any],
    told: dict[str, _Told],
    events: dict[str, list[_Carried]],
    hidden: bool,
    problems: list[str],
) -> None:
    """One entity per included record (and the placeholder, where the bundle shows
    one), with the writer's attributes only: its type its kind; its reason, stale
    cause and replacement what its newest status event says (where that event's
    bytes are carried); the version it replaces what its proposal says."""
    entities = prov.get("entity")
    entities = entities if isinstance(entities, dict) else {}
    for name, attrs in sorted(entities.items()):
        attrs = attrs if isinstance(attrs, dict) else {}
        if name == HIDDEN_ENTITY:
            if not hidden:
                problems.append(
                    f"prov.json has the entity {HIDDEN_ENTITY}, but the bundle neither shows an "
                    "ancestor <hidden> nor withholds any event's bytes: it hides nothing"
                )
            elif attrs != {"prov:label": "<hidden>"}:
                problems.append(
                    f"prov.json states the entity {HIDDEN_ENTITY} as {attrs}, but the writer "
                    "labels it <hidden> and says nothing else of it"
                )
            continue
        if name.startswith("basis:"):
            _check_on_basis(prov, name, attrs, problems)
            continue  # its revalidation checked with the derivations
        rid = name[4:] if name.startswith("rec:") else None
        if rid is None or rid not in stated:
            problems.append(
                f"prov.json has the entity {name}, a record the bundle does not include"
            )
            continue
        for attr in sorted(set(attrs) - ENTITY_ATTRIBUTES):
            problems.append(
                f"prov.json states {attr} of {name}, an attribute the writer never gives a record"
            )
        kind = stated[rid].get("kind")
        if _plain(attrs.get("prov:type")) != f"pl:{kind}":
            problems.append(
                f"prov.json types {name} as {_plain(attrs.get('prov:type'))}, but manifest.json "
                f"includes it as {kind} (pl:{kind})"
            )
        t = told.get(rid)
        if t is not None and t.proposal is not None:
            said = _plain(attrs.get("pl:supersedes"))
            if (said is not None or t.supersedes is not None) and said not in (
                ref_of(t.supersedes) if t.supersedes is not None else {None}
            ):
                problems.append(
                    f"prov.json states {name} replaces {said}, but its proposal says "
                    f"{t.supersedes or 'it replaces no record'}"
                )
        _check_entity_cause(name, attrs, _last_status_event(events.get(rid, [])), problems)
    for rid in stated:
        if f"rec:{rid}" not in entities:
            problems.append(f"prov.json has no entity for rec:{rid}, a record the bundle includes")


def _check_on_basis(prov: dict[str, Any], name: str, attrs: Any, problems: list[str]) -> None:
    """A record on the basis a revalidation gave it is stated as the writer states
    it, and only as what a derivation names."""
    rid, _, at = name[len("basis:") :].rpartition(".")
    wanted = {
        "prov:type": "pl:RecordOnNewBasis",
        "prov:label": f"{rid} on the basis set at position {at}",
    }
    if {k: _plain(v) for k, v in attrs.items()} != wanted:
        problems.append(
            f"prov.json states the entity {name} as {attrs}, but the writer states {wanted}"
        )
    derived = {
        str(_plain(d.get("prov:generatedEntity"))) for d in _relations(prov, "wasDerivedFrom")
    }
    if name not in derived:
        problems.append(
            f"prov.json has the entity {name}, but derives it from nothing: the writer states a "
            "record on a new basis only with the derivation from that basis"
        )


def _check_entity_cause(
    name: str, attrs: dict[str, Any], last: tuple[str, int, Any] | None, problems: list[str]
) -> None:
    """A record's reason, stale cause and replacement (``pl:reason``,
    ``pl:staleCause``, ``pl:staleCauseSupersededBy``, ``pl:supersededBy``) are
    what its newest status event says, as the views keep them."""
    if last is None or not isinstance(last[2], dict):
        return  # withheld: the signer's word, as its status
    kind, position, fields = last
    note = fields.get("reason") if kind in ("Rejected", "Revoked", "MarkedStale") else None
    if kind in ("Accepted", "Revalidated"):
        note = fields.get("note")
    wanted: dict[str, set[Any]] = {
        "pl:reason": {str(note) if note else None},
        "pl:staleCause": {None},
        "pl:staleCauseSupersededBy": {None},
        "pl:supersededBy": {None},
    }
    if kind == "MarkedStale":
        wanted["pl:staleCause"] = ref_of(fields.get("cause"))
        by = fields.get("superseded_by")
        if by is not None:
            wanted["pl:staleCauseSupersededBy"] = ref_of(by)
    if kind == "Superseded":
        wanted["pl:supersededBy"] = ref_of(fields.get("by"))
    if HIDDEN_ENTITY in {_plain(v) for v in attrs.values()}:
        # a record it names shown as the placeholder: its reason withheld with it
        wanted["pl:reason"] |= {WITHHELD, WITHHELD_SUPERSEDED}
    for attr, allowed in wanted.items():
        said = _plain(attrs.get(attr))
        if said not in allowed:
            told = sorted(str(a) for a in allowed if a is not None)
            problems.append(
                f"prov.json states {attr} {said!r} of {name}, but its newest status event, "
                f"the {kind} at position {position}, says "
                + (" or ".join(repr(a) for a in told) if told else "none")
            )


def _check_agents(prov: dict[str, Any], problems: list[str]) -> None:
    """Each agent is a principal some activity is associated with or some record
    attributed to, labelled with its name and nothing else."""
    agents = prov.get("agent")
    agents = agents if isinstance(agents, dict) else {}
    named = {
        str(_plain(entry.get("prov:agent")))
        for section in ("wasAssociatedWith", "wasAttributedTo")
        for entry in _relations(prov, section)
    }
    for name, attrs in sorted(agents.items()):
        principal = name[len("agent:") :] if name.startswith("agent:") else None
        if principal is None or attrs != {"prov:label": principal}:
            problems.append(
                f"prov.json states the agent {name} as {attrs}, but the writer states an "
                f"agent only as {{'prov:label': {principal!r}}}"
            )
        if name not in named:
            problems.append(
                f"prov.json has the agent {name}, but no activity it lists is associated with "
                "it and no record attributed to it"
            )
    for name in sorted(named - set(agents)):
        problems.append(f"prov.json names the agent {name}, which it does not state")


def _check_activity_attributes(
    prov: dict[str, Any], acts: dict[str, Listed], stated: dict[str, Any], problems: list[str]
) -> None:
    """Each activity of a listed event has the writer's attributes only, its type
    the one its event's type gives it, and a stale marking's or supersession's
    cause and replacement what its carried bytes say."""
    activities = prov.get("activity")
    for act, attrs in sorted((activities if isinstance(activities, dict) else {}).items()):
        if act not in acts or not isinstance(attrs, dict):
            continue  # named by the check of activities
        rid, kind, position, fields = acts[act]
        what = f"the {kind} of {rid} at position {position}"
        for attr in sorted(set(attrs) - ACTIVITY_ATTRIBUTES):
            problems.append(f"prov.json states {attr} of {what}, which the writer never states")
        wanted = f"pl:{ACTIVITIES[kind][1]}" if kind in ACTIVITIES else None
        if _plain(attrs.get("prov:type")) != wanted:
            problems.append(
                f"prov.json types {act} as {_plain(attrs.get('prov:type'))}, but it is {what} "
                f"({wanted})"
            )
        if not isinstance(fields, dict):
            continue
        expected: dict[str, set[Any]] = {
            "pl:cause": {None},
            "pl:causedBy": {None},
            "pl:supersededBy": {None},
        }
        if kind == "MarkedStale":
            by = fields.get("superseded_by")
            expected["pl:cause"] = ref_of(fields.get("cause"))
            expected["pl:causedBy"] = {"revocation" if by is None else "supersession"}
            expected["pl:supersededBy"] = {None} if by is None else ref_of(by)
        if kind == "Superseded":
            expected["pl:supersededBy"] = ref_of(fields.get("by"))
        for attr, allowed in expected.items():
            said = _plain(attrs.get(attr))
            if said not in allowed:
                problems.append(
                    f"prov.json states {attr} {said!r} for {what}, but its event says "
                    + " or ".join(repr(a) for a in sorted(map(str, allowed)))
                )
