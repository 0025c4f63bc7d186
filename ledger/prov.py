"""W3C PROV export: the ledger's records, events and principals as a PROV document.

Built with the ``prov`` package (:class:`prov.model.ProvDocument`):

- every record is an **entity** (``rec:<id>``) carrying its kind, scope, claim
  key, value (as JSON text), status and validity; evidence also carries its
  URI, fetch time, content hash and snapshot reference;
- each declared parent is a ``wasDerivedFrom`` (``pl:dependency="declared"``),
  each observed dependency one with ``pl:dependency="observed"`` and
  ``prov:type=pl:ObservedDependency``; the derivation names the activity that
  set that basis. A basis set by the proposal derives the record itself; one
  set by a revalidation derives *the record on that basis*, an entity of its
  own (``basis:<id>.<log position>``, ``prov:type=pl:RecordOnNewBasis``) that
  is a ``specializationOf`` the record and ``wasGeneratedBy`` the
  revalidation: PROV reads a derivation's activity as generating the derived
  entity, and the record was generated once, by its proposal;
- every event is an **activity** (``act:<verb>-<log position>``) associated
  with its principal, an **agent** (``agent:<subject>``): the proposal
  generates the entity (``wasGeneratedBy``, ``wasAttributedTo`` the proposer)
  and used its parents; acceptance, rejection, revalidation, delivery,
  correction and an erasure of evidence bytes ``used`` the entity (with
  ``prov:role``) — but a correction or erasure after the record's revocation or
  supersession ``wasInfluencedBy`` it (with ``pl:role``): PROV lets nothing use
  an entity once it is invalidated;
- a revocation ``wasInvalidatedBy`` its activity, with the reason; a stale
  marking is an activity recording its cause (``pl:cause``, ``pl:reason``)
  that ``wasInformedBy`` the revocation that caused it. A stale record is not
  invalidated: STALE means *needs re-verification*, not *proven wrong*;
- supersession: a record proposed as a new version ``wasRevisionOf`` the record
  it supersedes (the derivation names its proposal); once the new version is
  accepted, the old record ``wasInvalidatedBy`` a supersession activity
  (``act:supersede-<position>``, ``pl:supersededBy``) that ``wasInformedBy``
  the new version's acceptance (or revalidation). A stale marking caused by a
  supersession says so (``pl:causedBy="supersession"``, ``pl:supersededBy``)
  and ``wasInformedBy`` that supersession activity; one caused by a revocation
  has ``pl:causedBy="revocation"``.

Only records in scopes where the session holds ``audit`` are exported, and only
relations between exported records, save one: an export also declares what its
records rest (or rested) on that it does not export but the session may audit
(the entity, with its ``pl:scope``; its events left out): a record in another
scope, or a parent of a record exported without its ancestors (``--record R1``
alone still has R1 derived from M1 and its proposal use M1), so that no record
looks as if it rested on nothing. A record that rests (or
rested) on one the session may not audit is derived from, and its proposal used,
the one ``pl:hidden`` placeholder entity, once per kind of dependency, whatever
their number; a stale cause the session may read but not audit is that
placeholder too, with its reason withheld, as in a bundle. An as-of session
exports the ledger as it was at its position.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from prov.model import XSD_ANYURI, Literal, Namespace, ProvDocument, QualifiedName

from ledger.access import Role
from ledger.bundle.prov_terms import ACTIVITIES, PREFIXES
from ledger.diagram import NOT_XML
from ledger.errors import AccessDeniedError, InvalidInputError, UnknownRecordError
from ledger.graph import Basis, collect
from ledger.jsonable import value_text
from ledger.session import Session
from ledger.values import (
    DETAIL_ATTRIBUTES,
    HIDDEN,
    AuditEvent,
    AuditTrail,
    RecordView,
    withheld,
)

# The namespaces and activity types are defined once, in the vocabulary the
# bundle verifier holds prov.json to (free of the ``prov`` package).
#: Attributes and types defined by provledger.
PL = Namespace("pl", PREFIXES["pl"])
#: Records (entities).
REC = Namespace("rec", PREFIXES["rec"])
#: Principals (agents).
AGENT = Namespace("agent", PREFIXES["agent"])
#: Events (activities), named by verb and log position.
ACT = Namespace("act", PREFIXES["act"])
#: A record on the basis a revalidation gave it, named by record id and that
#: revalidation's log position (``basis:M1.19``): a namespace of its own, so
#: that no record id (which may hold ``.``) can name one.
BASIS = Namespace("basis", PREFIXES["basis"])

#: Command-line format name → ``prov`` serializer name.
FORMATS = {"prov-json": "json", "prov-n": "provn", "prov-xml": "xml"}

#: Event type → (activity verb, ``prov:type`` local name, role of the record in it).
_ACTIVITIES = ACTIVITIES


def _activity_id(event: AuditEvent) -> QualifiedName:
    return ACT[f"{_ACTIVITIES[event.type][0]}-{event.position}"]


class _Builder:
    """Adds records, activities and agents to one document, each once."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.doc = ProvDocument()
        for ns in (PL, REC, AGENT, ACT):  # BASIS once it is used
            self.doc.add_namespace(ns)
        self.agents: set[str] = set()
        self.on_basis: set[QualifiedName] = set()
        self.trails: dict[str, AuditTrail | None] = {}
        self.hidden = False
        #: The records exported (their activities are in the document) and those
        #: they rest on that the session may audit in another scope (declared,
        #: their activities left out): what relations may name.
        self.members: set[str] = set()
        self.described: set[str] = set()

    def agent(self, subject: str | None) -> QualifiedName | None:
        """The agent of ``subject``; None (no association) for no actor or one
        withheld (:data:`~ledger.values.HIDDEN`: it acted outside the session's scopes)."""
        if subject is None or subject == HIDDEN:
            return None
        if subject not in self.agents:
            self.agents.add(subject)
            self.doc.agent(AGENT[subject], {"prov:label": subject})
        return AGENT[subject]

    def ref(self, rid: str) -> QualifiedName:
        """The entity of ``rid``; one ``pl:hidden`` entity for every record outside
        the session's scopes (:data:`~ledger.values.HIDDEN`)."""
        if rid != HIDDEN:
            return REC[rid]
        if not self.hidden:
            self.hidden = True
            self.doc.entity(PL["hidden"], {"prov:label": HIDDEN})
        return PL["hidden"]

    def trail(self, record_id: str) -> AuditTrail | None:
        """A record's audit trail, or None if the session may not audit it."""
        if record_id == HIDDEN:
            return None
        if record_id not in self.trails:
            try:
                self.trails[record_id] = self.session.audit(record_id)
            except (UnknownRecordError, AccessDeniedError):
                self.trails[record_id] = None
        return self.trails[record_id]

    def entity(self, node: RecordView) -> None:
        attrs: dict[str, Any] = {
            "prov:type": PL[str(node.kind)],
            "prov:label": node.id,
            "pl:scope": node.scope,
            "pl:claimKey": node.claim_key,
            "pl:kind": str(node.kind),
            "pl:value": value_text(node.value),
            "pl:status": str(node.status),
            "pl:validity": str(node.validity),
        }
        if node.conditions:
            attrs["pl:conditions"] = value_text(node.conditions)
        if node.expires is not None:
            attrs["pl:expires"] = node.expires
        cause = node.cause
        if cause is not None and cause != node.id and self.unaudited(cause):
            # a cause the session may read but not audit: named as its derivations
            # name it, the placeholder, and its reason withheld (as a bundle does)
            cause = HIDDEN
            attrs["pl:reason"] = withheld(node.cause_superseded_by)
        elif node.reason:
            attrs["pl:reason"] = node.reason
        if cause is not None and cause != node.id:
            attrs["pl:staleCause"] = self.ref(cause)
        if node.cause_superseded_by is not None:
            by = node.cause_superseded_by
            attrs["pl:staleCauseSupersededBy"] = self.ref(HIDDEN if self.unaudited(by) else by)
        if node.supersedes is not None:
            attrs["pl:supersedes"] = self.ref(node.supersedes)
        if node.superseded_by is not None:
            attrs["pl:supersededBy"] = self.ref(node.superseded_by)
        if node.evidence is not None:
            ev = node.evidence
            attrs["pl:uri"] = Literal(str(ev["uri"]), XSD_ANYURI)
            attrs["pl:contentHash"] = str(ev["content_hash"])
            attrs["pl:snapshotRef"] = str(ev["snapshot_ref"])
            fetched = ev.get("fetched_at")
            if isinstance(fetched, datetime):
                attrs["pl:fetchedAt"] = fetched
            if isinstance(ev.get("size"), int):
                attrs["pl:size"] = ev["size"]
        self.doc.entity(REC[node.id], attrs)

    def event_at(self, record_id: str, position: int) -> AuditEvent | None:
        """``record_id``'s event at ``position`` (None if it is not exported or
        the session may not audit it)."""
        trail = self.trail(record_id)
        found = [e for e in trail.events if e.position == position] if trail else []
        return found[0] if found else None

    def activity_at(self, record_id: str, position: int) -> QualifiedName | None:
        """The activity of ``record_id``'s event at ``position`` (None if it is
        not exported or the session may not audit it)."""
        event = self.event_at(record_id, position)
        return None if event is None else _activity_id(event)

    def derived(self, record_id: str, since: int) -> QualifiedName:
        """What a basis ``record_id`` held from position ``since`` derives: the
        record, if its proposal set that basis; if a revalidation did, the record
        on that basis (declared once): a ``specializationOf`` the record,
        generated by the revalidation. The record itself was generated once, by
        its proposal: a revalidation does not make a second version of it."""
        event = self.event_at(record_id, since)
        if event is None or event.type != "Revalidated":
            return REC[record_id]
        specific = BASIS[f"{record_id}.{since}"]
        if specific not in self.on_basis:
            if not self.on_basis:
                self.doc.add_namespace(BASIS)
            self.on_basis.add(specific)
            self.doc.entity(
                specific,
                {
                    "prov:type": PL["RecordOnNewBasis"],
                    "prov:label": f"{record_id} on the basis set at position {since}",
                },
            )
            self.doc.specializationOf(specific, REC[record_id])
            self.doc.wasGeneratedBy(specific, _activity_id(event), event.at)
        return specific

    def activities(self, node: RecordView) -> None:
        """Add the record's events."""
        trail = self.trail(node.id)
        if trail is None:
            return
        entity = REC[node.id]
        invalidated = False
        for event in trail.events:
            if event.type not in _ACTIVITIES:
                continue
            _verb, kind, role = _ACTIVITIES[event.type]
            act = _activity_id(event)
            attrs: dict[str, Any] = {
                "prov:type": PL[kind],
                "prov:label": f"{event.type} {node.id}",
                "pl:position": event.position,
            }
            details = event.details
            for key, name in DETAIL_ATTRIBUTES:
                if details.get(key):
                    attrs[name] = str(details[key])
            if event.type == "MarkedStale":
                by = details.get("superseded_by")
                cause = str(details["cause"])
                if self.unaudited(cause):  # as the record's entity names it
                    cause, by = HIDDEN, None if by is None else HIDDEN
                    attrs["pl:reason"] = withheld(by)
                attrs["pl:cause"] = self.ref(cause)
                attrs["pl:causedBy"] = "revocation" if by is None else "supersession"
                if by is not None:
                    attrs["pl:supersededBy"] = self.ref(str(by))
            if event.type == "Superseded":
                attrs["pl:supersededBy"] = self.ref(str(details["by"]))
            self.doc.activity(act, event.at, event.at, attrs)
            agent = self.agent(event.actor)
            if agent is not None:
                self.doc.wasAssociatedWith(act, agent)
            if event.type == "Proposed":
                self.doc.wasGeneratedBy(entity, act, event.at)
                if agent is not None:
                    self.doc.wasAttributedTo(entity, agent)
                self._used(act, details.get("parents"), "declaredParent")
                self._used(act, details.get("observed"), "observedDependency")
                continue
            if event.type == "Revoked":
                self.doc.wasInvalidatedBy(
                    entity,
                    act,
                    event.at,
                    other_attributes={"pl:reason": str(details.get("reason", ""))},
                )
                invalidated = True
                continue
            if event.type == "Superseded":
                by = str(details["by"])
                self.doc.wasInvalidatedBy(
                    entity, act, event.at, other_attributes={"pl:supersededBy": self.ref(by)}
                )
                approval = self._newest(by, ("Accepted", "Revalidated"), event.position)
                if approval is not None:
                    self.doc.wasInformedBy(act, approval)
                invalidated = True
                continue
            if invalidated:  # a correction or erasure afterwards: not a use
                self.doc.influence(act, entity, other_attributes={"pl:role": PL[role]})
            else:
                self.doc.used(act, entity, event.at, other_attributes={"prov:role": PL[role]})
            if event.type == "MarkedStale":
                caused_by = "Revoked" if details.get("superseded_by") is None else "Superseded"
                informant = self._newest(str(details["cause"]), (caused_by,), event.position)
                if informant is not None:
                    self.doc.wasInformedBy(act, informant)
            elif event.type == "Revalidated" and details.get("parents") is not None:
                self._used(act, details.get("parents"), "newBasis")
            elif event.type == "CorrectionIssued" and details.get("replacement"):
                self._used(act, [details["replacement"]], "replacement")

    def unaudited(self, rid: str) -> bool:
        """Whether ``rid`` is shown only as the placeholder: outside the session's
        scopes, or in one where it may not audit (not merely left out of this export)."""
        return rid == HIDDEN or (rid not in self.members and self.trail(rid) is None)

    def _used(self, act: QualifiedName, ids: Sequence[str] | None, role: str) -> None:
        # Many hidden records are one placeholder, used once: their number is theirs.
        shown = dict.fromkeys(HIDDEN if self.unaudited(r) else r for r in ids or ())
        for rid in shown:
            if rid in self.members:
                used = self.ref(rid)
                self.doc.used(act, used, other_attributes={"prov:role": PL[role]})

    def _newest(self, rid: str, types: Sequence[str], before: int) -> QualifiedName | None:
        """The activity of ``rid``'s newest event of one of ``types`` before position
        ``before`` (the revocation or supersession a marking came from, the approval
        a supersession came from); None if ``rid``'s activities are not in the
        document (it is not exported) or the session may not audit it."""
        if rid not in self.described:
            return None
        trail = self.trail(rid)
        if trail is None:
            return None
        found = [e for e in trail.events if e.type in types and e.position < before]
        return _activity_id(found[-1]) if found else None

    def revision(self, node: RecordView) -> None:
        """``node`` ``wasRevisionOf`` the record it supersedes, if both are exported;
        the derivation names the proposal that made it a new version."""
        old = node.supersedes
        if old is None or old not in self.members:
            return
        trail = self.trail(node.id)
        proposal = None
        if trail is not None:
            proposal = next((_activity_id(e) for e in trail.events if e.type == "Proposed"), None)
        self.doc.wasRevisionOf(REC[node.id], REC[old], proposal)


def export_prov(
    session: Session,
    scope: str | None = None,
    record: str | None = None,
    ancestors: bool = False,
    descendants: bool = False,
) -> ProvDocument:
    """The records ``session`` may audit, as a W3C PROV document: as of one
    position (the log's when it begins, on a live session), whatever is written
    meanwhile.

    With ``record``: that record, plus its ancestors and/or descendants if
    asked; with ``scope`` (too): only records in that scope; with neither:
    every record in every scope where the principal holds ``audit``.

    Raises:
        UnknownRecordError: ``record`` is unknown or not visible.
        AccessDeniedError: no ``audit`` role in ``record``'s scope or in ``scope``
            (in no scope at all, with neither).
    """
    sub = collect(
        session,
        record,
        scope=scope,
        ancestors=ancestors,
        descendants=descendants,
        role=Role.AUDIT,
        command="export",
        former=True,
    )
    nodes = [n for n in sub.nodes if scope is None or n.scope == scope]
    # Each record's events are read as of the position its status was read at, so
    # that writes committed meanwhile (a live ledger) reach none of them: one read
    # transaction per audit would mix moments (a CANDIDATE beside its acceptance).
    pinned = session.caller.derive(position=sub.position, at=sub.at)  # judged as now
    builder = _Builder(session if session.position is not None else Session(pinned))
    builder.described = {n.id for n in nodes}
    # A record in another scope that an exported one rests on (or rested on), which
    # the session may audit, is declared and named by the relations, its events
    # left out; the rest of the walk into other scopes is not.
    rested_on = {b.parent for b in sub.bases if b.child in builder.described}
    builder.members = builder.described | (rested_on & {n.id for n in sub.nodes})
    # What the records rest on that the session may not audit (current bases and
    # those replaced at a revalidation), as the picture draws it: the placeholder.
    hidden_edges = [(e.child, e.edge) for e in sub.edges if e.parent == HIDDEN]
    # What an exported record rests on (or rested on) beyond the walk (a record
    # exported without its ancestors, or its descendants' other bases): declared
    # and named by the relations too, its events left out, so that no record
    # looks as if it rested on nothing; the placeholder for one the session may
    # not audit.
    beyond = [b for b in _bases_of(builder, nodes) if b.parent not in builder.members]
    hidden_edges += [(b.child, b.edge) for b in beyond if builder.unaudited(b.parent)]
    beyond = [b for b in beyond if not builder.unaudited(b.parent)]
    if hidden_edges:  # the placeholder is drawn: its uses and derivations too
        builder.members.add(HIDDEN)
    for node in sub.nodes:
        if node.id in builder.members:
            builder.entity(node)
    for rid in dict.fromkeys(b.parent for b in beyond):
        trail = builder.trail(rid)
        assert trail is not None  # (not unaudited)
        builder.members.add(rid)
        builder.entity(trail.record)
    for node in nodes:
        builder.activities(node)
    for node in nodes:
        builder.revision(node)
    # Every basis a record held, each derivation naming the activity that set
    # it (one set by a revalidation derives the record on that basis); one
    # replaced at a revalidation also names that (pl:replacedBy).
    for basis in (*sub.bases, *beyond):
        if basis.parent not in builder.members or basis.child not in builder.described:
            continue
        attrs: dict[str, Any] = {"pl:dependency": basis.edge}
        if basis.edge == "observed":
            attrs["prov:type"] = PL["ObservedDependency"]
        if basis.until is not None:
            replaced = builder.activity_at(basis.child, basis.until)
            attrs["pl:replacedBy"] = replaced if replaced is not None else basis.until
        builder.doc.wasDerivedFrom(
            builder.derived(basis.child, basis.since),
            REC[basis.parent],
            builder.activity_at(basis.child, basis.since),
            other_attributes=attrs,
        )
    # A dependency outside the session's scopes: derived from the one placeholder.
    for child, kind in dict.fromkeys(hidden_edges):
        if child in builder.described:
            attrs = {"pl:dependency": kind}
            if kind == "observed":
                attrs["prov:type"] = PL["ObservedDependency"]
            builder.doc.wasDerivedFrom(REC[child], builder.ref(HIDDEN), other_attributes=attrs)
    return builder.doc


def _bases_of(builder: _Builder, nodes: Sequence[RecordView]) -> list[Basis]:
    """Every basis each of ``nodes`` held, as its events set it (its proposal, then
    each revalidation giving it a new one), each period once: a parent a later
    basis names again is held again from that revalidation on."""
    out: list[Basis] = []
    for node in nodes:
        trail = builder.trail(node.id)
        held: dict[tuple[str, str], int] = {}  # (parent, edge) rested on now: since when
        for event in trail.events if trail is not None else ():
            details = event.details
            if not (
                event.type == "Proposed"
                or (event.type == "Revalidated" and details.get("parents") is not None)
            ):
                continue
            # Each held so far is replaced by this revalidation (or begins here)
            out += [Basis(p, node.id, e, since, event.position) for (p, e), since in held.items()]
            held = {}
            for name, edge in (("parents", "declared"), ("observed", "observed")):
                for parent in details.get(name) or ():
                    held.setdefault((str(parent), edge), event.position)
        out += [Basis(p, node.id, e, since, None) for (p, e), since in held.items()]
    return out


def serialize(doc: ProvDocument, format: str) -> str:
    """``doc`` as ``prov-json``, ``prov-n`` or ``prov-xml`` text.

    Raises:
        InvalidInputError: an unknown format.
    """
    if format not in FORMATS:
        raise InvalidInputError(f"export format {format!r} is not one of: {', '.join(FORMATS)}")
    if format == "prov-n":
        return doc.get_provn() + "\n"
    if format == "prov-json":
        text = doc.serialize(format="json", indent=2)
    else:
        _check_xml_text(doc)
        text = doc.serialize(format=FORMATS[format])
    assert isinstance(text, str)
    return text if text.endswith("\n") else text + "\n"


#: What the local part of a QName is in XML (an NCName, of the characters an id,
#: a scope or a principal's name may hold): not a record id that starts with a
#: digit or holds ``:``, nor a qualified key (``@@``).
_NCNAME = re.compile(r"[A-Za-z_][A-Za-z0-9._-]*")


def _check_xml_text(doc: ProvDocument) -> None:
    """Refuse, naming the element and the character, a document PROV-XML cannot
    hold (a stored value may hold what XML has no place for, and an id a name
    XML cannot write)."""
    for record in doc.get_records():
        names = [record.identifier, *(v for _, v in record.attributes)]
        for name in names:
            if isinstance(name, QualifiedName) and not _NCNAME.fullmatch(name.localpart):
                raise InvalidInputError(
                    f"prov-xml cannot name {name}: an XML name does not start with a "
                    "digit or hold ':' or '@' (a record id or principal may); export it "
                    "as prov-json or prov-n"
                )
        for _, value in record.attributes:
            found = NOT_XML.search(str(value))
            if found is not None:
                raise InvalidInputError(
                    f"prov-xml cannot hold {record.identifier}: it holds U+"
                    f"{ord(found.group()):04X}, which XML 1.0 has no place for; "
                    "export it as prov-json or prov-n"
                )


def export_text(
    session: Session,
    format: str = "prov-json",
    *,
    scope: str | None = None,
    record: str | None = None,
    ancestors: bool = False,
    descendants: bool = False,
) -> str:
    """:func:`export_prov` serialised as ``format`` (what ``provledger export`` prints).

    Raises:
        InvalidInputError: an unknown format.
        UnknownRecordError, AccessDeniedError: as :func:`export_prov`.
    """
    if format not in FORMATS:
        raise InvalidInputError(f"export format {format!r} is not one of: {', '.join(FORMATS)}")
    doc = export_prov(
        session, scope=scope, record=record, ancestors=ancestors, descendants=descendants
    )
    return serialize(doc, format)
