"""The bundle's two documents: ``prov.json`` (W3C PROV-JSON of the record and
its ancestors) and ``summary.txt`` (for people), records outside the caller's
scopes shown as one ``<hidden>`` placeholder.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ledger.bundle.events import _Auditable, _Event
from ledger.bundle.told import HISTORY_LABELS, history_line, one_line
from ledger.domain import Kind, Status, Validity
from ledger.heads import SignedHead
from ledger.session import Session
from ledger.values import HIDDEN, AuditTrail, RecordView, withheld

#: How PROV-JSON types a qualified name.
_QNAME_TYPES = ("xsd:QName", "prov:QUALIFIED_NAME")


def _prov_json(
    session: Session, root: str, trails: dict[str, AuditTrail], auditable: _Auditable
) -> str:
    """The PROV-JSON of the record and its ancestors, hidden ones as one placeholder."""
    # Imported here: checking a bundle (``verify_bundle``) needs no PROV package.
    from prov.constants import PROV_ATTRIBUTE_QNAMES

    from ledger.prov import PL, export_prov, serialize

    # the attributes of PROV relations whose values name what they relate
    references = {str(name) for name in PROV_ATTRIBUTE_QNAMES}

    doc = json.loads(serialize(export_prov(session, record=root, ancestors=True), "prov-json"))
    prefix = "rec:"

    def hidden_ref(name: str, value: Any) -> bool:
        # A reference to a record: a qualified name, typed so, or the plain value
        # of a relation's PROV attribute (prov:usedEntity, …); text that only
        # starts with "rec:" (a reason, a claim key, a uri) is none.
        if isinstance(value, dict):
            text = value.get("$") if value.get("type") in _QNAME_TYPES else None
        else:
            text = value if name in references else None
        return (
            isinstance(text, str) and text.startswith(prefix) and not auditable(text[len(prefix) :])
        )

    for section in doc.values():
        if not isinstance(section, dict):
            continue
        for attrs in section.values():
            for item in attrs if isinstance(attrs, list) else [attrs]:
                if not isinstance(item, dict):
                    continue
                touched = False
                for name, value in list(item.items()):
                    if hidden_ref(name, value):
                        # typed as the export types every qualified name it writes
                        item[name] = {"$": f"{PL.prefix}:hidden", "type": "xsd:QName"}
                        touched = True
                if touched and "pl:reason" in item:
                    superseded = (
                        item.get("pl:causedBy") == "supersession"
                        or "pl:staleCauseSupersededBy" in item
                    )
                    item["pl:reason"] = withheld(HIDDEN if superseded else None)
    _unassociated(doc, f"{PL.prefix}:hidden")
    needs = sorted(
        rid
        for rid, trail in trails.items()
        if any(dep not in trails for dep in (*trail.record.parents, *trail.record.observed))
    )
    if needs:
        doc.setdefault("entity", {})[f"{PL.prefix}:hidden"] = {"prov:label": HIDDEN}
        derived = doc.setdefault("wasDerivedFrom", {})
        hidden = f"{PL.prefix}:hidden"
        # The export derives a record from the placeholder for what the session
        # cannot see at all; here also for what it may see but not audit.
        said = {
            (d.get("prov:generatedEntity"), d.get("prov:usedEntity"))
            for d in derived.values()
            if isinstance(d, dict)
        }
        for n, rid in enumerate(needs):
            if (f"{prefix}{rid}", hidden) not in said:
                derived[f"_:hidden{n}"] = {
                    "prov:generatedEntity": f"{prefix}{rid}",
                    "prov:usedEntity": hidden,
                }
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _unassociated(doc: dict[str, Any], hidden: str) -> None:
    """No agent for a stale marking whose cause is withheld (``hidden``, the
    placeholder), as summary.txt names none: they acted in the scope whose record
    is not told. Its association goes, and the agent too unless another names it."""
    withheld_causes = {
        name
        for name, item in (doc.get("activity") or {}).items()
        if isinstance(item, dict)
        and isinstance(item.get("pl:cause"), dict)
        and item["pl:cause"].get("$") == hidden
    }
    associations = doc.get("wasAssociatedWith") or {}
    gone = {
        key: item
        for key, item in associations.items()
        if isinstance(item, dict) and item.get("prov:activity") in withheld_causes
    }
    for key in gone:
        del associations[key]
    if not associations:
        doc.pop("wasAssociatedWith", None)
    agents = doc.get("agent") or {}
    named = json.dumps({k: v for k, v in doc.items() if k != "agent"})
    for item in gone.values():
        agent = item.get("prov:agent")
        if isinstance(agent, str) and agent in agents and json.dumps(agent) not in named:
            del agents[agent]
    if "agent" in doc and not agents:
        del doc["agent"]


def _when(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds")


def _summary(
    trails: dict[str, AuditTrail],
    order: Sequence[str],
    hidden: bool,
    head: SignedHead,
    events: Sequence[_Event],
    auditable: _Auditable,
) -> str:
    record = trails[order[0]].record
    lines = [
        "provledger compliance bundle",
        "",
        f"record:    {record.id} ({record.kind}, scope {record.scope}, claim {record.claim_key!r})",
        f"value:     {json.dumps(record.value, default=repr, ensure_ascii=False)[:200]}",
        f"status:    {record.status} / {record.validity}{_cause(record, auditable)}",
    ]
    lines += _history_lines(trails[order[0]], auditable)
    evidence = [rid for rid in order if trails[rid].record.kind == Kind.EVIDENCE]
    if not evidence:
        lines.append("evidence:  none among the records you may audit")
    for rid in evidence:
        view = trails[rid].record
        ev: dict[str, Any] = dict(view.evidence or {})
        fetched = ev.get("fetched_at")
        lines.append(
            f"evidence:  {rid}: {ev.get('uri')} fetched "
            f"{_when(fetched) if isinstance(fetched, datetime) else '?'}, "
            f"{ev.get('content_hash')} ({view.status} / {view.validity})"
        )
    ancestry = [
        f"{rid} ({trails[rid].record.kind}, {trails[rid].record.status})" for rid in order[1:]
    ] + ([HIDDEN] if hidden else [])
    lines.append(f"ancestry:  {', '.join(ancestry) if ancestry else 'none'}")
    for rid in order[1:]:
        lines += [f"  {line}" for line in _history_lines(trails[rid], auditable, rid)]
    included = sum(1 for e in events if e.data is not None)
    withheld = len(events) - included
    lines += [
        "",
        f"signed head: tree size {head.tree_size}, log position {head.position}, "
        f"root {head.root}, signed {head.time.isoformat()} by key {head.key_id}",
        f"events:    {included} included with their stored bytes and inclusion proofs"
        + (
            f"; {withheld} listed by leaf hash only (their bytes name a record outside your scopes)"
            if withheld
            else ""
        ),
        "check:     provledger verify-bundle THIS.zip --public-key KEY.pub",
        "",
    ]
    # Each entry is one line: a line break or other control character in the
    # free text (a note, a reason, a URI) is escaped, so no text a proposer or
    # approver wrote can pose as a line of its own (the verifier reads the
    # status, evidence and ancestry lines).
    return "\n".join(one_line(line) for line in lines)


def _cause(record: RecordView, auditable: _Auditable) -> str:
    expired = record.status == Status.ACCEPTED and record.validity != Validity.VALID
    due = record.effective_expires
    if expired and record.cause is None and due is not None:
        source = record.expiry_source
        whose = f": the expiry of {source}" if source and source != record.id else ""
        if whose and not auditable(str(source)):
            whose = f": the expiry of {HIDDEN}"
        return f" (expired at {_when(due)}{whose})"
    if record.cause is None or record.cause == record.id:
        return f" ({record.reason})" if record.reason else ""
    if not auditable(record.cause):
        return f" ({withheld(record.cause_superseded_by)})"
    if record.cause_superseded_by is not None:
        return f" ({record.cause} superseded by {record.cause_superseded_by})"
    return f" ({record.cause} revoked: {record.reason})"


def _history_lines(trail: AuditTrail, auditable: _Auditable, rid: str | None = None) -> list[str]:
    """One line per event the summary tells of a record (``rid``: an ancestor's
    id, which its lines name): who did what, when, and why; a stale marking names
    its cause (and what it was revoked for, or superseded by), a correction its
    delivery and replacement, unless the reader may not audit them."""
    return [
        history_line(
            event.type, rid, event.actor, event.at, event.position, event.details, auditable
        )
        for event in trail.events
        if event.type in HISTORY_LABELS
    ]
