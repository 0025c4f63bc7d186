"""The vocabulary of the PROV-JSON a bundle's writer makes (:mod:`ledger.prov`,
:func:`ledger.bundle.documents._prov_json`): its namespaces, sections,
attributes and activity types, as the verifier holds ``prov.json`` to them
(:mod:`ledger.bundle.verify_prov`). Held here, free of the ``prov`` package a
verifier need not install; the export takes its namespaces and activity types
from here, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from ledger.values import DETAIL_ATTRIBUTES

#: The namespaces the writer declares (:mod:`ledger.prov` builds its own from
#: them), ``basis`` only once a record on a new basis is named.
PREFIXES = {
    "pl": "urn:provledger:ns#",
    "rec": "urn:provledger:record:",
    "agent": "urn:provledger:principal:",
    "act": "urn:provledger:event:",
    "basis": "urn:provledger:basis:",
}
#: Event type → (activity verb, ``prov:type`` local name, the record's role in
#: it): each event's activity in the export (:mod:`ledger.prov`) and in a bundle.
ACTIVITIES = {
    "Proposed": ("propose", "Proposal", "proposed"),
    "Accepted": ("accept", "Acceptance", "accepted"),
    "Rejected": ("reject", "Rejection", "rejected"),
    "Revoked": ("revoke", "Revocation", "revoked"),
    "MarkedStale": ("mark-stale", "StaleMarking", "markedStale"),
    "Superseded": ("supersede", "Supersession", "superseded"),
    "Revalidated": ("revalidate", "Revalidation", "revalidated"),
    "Delivered": ("deliver", "Delivery", "delivered"),
    "CorrectionIssued": ("correct", "Correction", "corrected"),
    "SnapshotErased": ("erase-snapshot", "SnapshotErasure", "erased"),
}
#: The sections the writer's PROV-JSON may hold (``wasRevisionOf`` is written
#: as a ``wasDerivedFrom`` typed ``prov:Revision``).
SECTIONS = frozenset(
    {
        "prefix",
        "entity",
        "activity",
        "agent",
        "wasGeneratedBy",
        "used",
        "wasDerivedFrom",
        "wasAssociatedWith",
        "wasAttributedTo",
        "wasInvalidatedBy",
        "wasInformedBy",
        "wasInfluencedBy",
        "specializationOf",
    }
)
#: The attributes the writer gives a record's entity.
ENTITY_ATTRIBUTES = frozenset(
    {
        "prov:type",
        "prov:label",
        "pl:scope",
        "pl:claimKey",
        "pl:kind",
        "pl:value",
        "pl:status",
        "pl:validity",
        "pl:conditions",
        "pl:expires",
        "pl:reason",
        "pl:staleCause",
        "pl:staleCauseSupersededBy",
        "pl:supersedes",
        "pl:supersededBy",
        "pl:uri",
        "pl:contentHash",
        "pl:snapshotRef",
        "pl:fetchedAt",
        "pl:size",
    }
)
#: The attributes the writer gives an activity.
ACTIVITY_ATTRIBUTES = frozenset(
    {
        "prov:type",
        "prov:label",
        "prov:startTime",
        "prov:endTime",
        "pl:position",
        "pl:cause",
        "pl:causedBy",
        "pl:supersededBy",
        *(name for _, name in DETAIL_ATTRIBUTES),
    }
)
#: The attributes the writer gives each relation (``wasDerivedFrom``'s and
#: ``wasInvalidatedBy``'s are checked with their values).
RELATION_ATTRIBUTES = {
    "wasGeneratedBy": frozenset({"prov:entity", "prov:activity", "prov:time"}),
    "used": frozenset({"prov:activity", "prov:entity", "prov:time", "prov:role"}),
    "wasAssociatedWith": frozenset({"prov:activity", "prov:agent"}),
    "wasAttributedTo": frozenset({"prov:entity", "prov:agent"}),
    "wasInformedBy": frozenset({"prov:informed", "prov:informant"}),
    "wasInfluencedBy": frozenset({"prov:influencee", "prov:influencer", "pl:role"}),
    "specializationOf": frozenset({"prov:specificEntity", "prov:generalEntity"}),
}
HIDDEN_ENTITY = "pl:hidden"
#: The roles in which an event's activity uses records other than its own.
OTHER_USES = {
    "Proposed": ("declaredParent", "observedDependency"),
    "Revalidated": ("newBasis",),
    "CorrectionIssued": ("replacement",),
}
#: The event types whose last one decides an entity's reason and stale cause
#: (the views' ``reason`` and ``cause``, :mod:`projections.validity`).
STATUS_EVENTS = (
    "Proposed",
    "Accepted",
    "Rejected",
    "Revoked",
    "Superseded",
    "MarkedStale",
    "Revalidated",
)

#: One listed event: its record, type, position and fields (None: withheld).
Listed = tuple[str, str, int, Any]


def act_of(kind: str, position: int) -> str:
    return f"act:{ACTIVITIES[kind][0]}-{position}" if kind in ACTIVITIES else f"act:?-{position}"


def ref_of(rid: Any) -> set[str]:
    """How the writer may name a record an event names but the bundle need not
    include: by id, or as the placeholder when the reader may not audit it."""
    return {f"rec:{rid}", HIDDEN_ENTITY}
