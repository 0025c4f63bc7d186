"""The JSON shapes of the API's answers (the same as the CLI's ``--json`` output).

Datetimes are ISO 8601 strings, bytes ``{"base64": …}``, and a float JSON cannot
carry (infinity) the string ``"inf"``/``"-inf"`` (``api.json_response`` applies
:func:`ledger.jsonable.json_safe` to every answer).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from ledger.answers import MAX_ANSWER_BYTES, usable_listed, usable_shown
from ledger.graph import MAX_SERVED_NODES, Subgraph
from ledger.jsonable import (
    capped_explanation,
    capped_revocation,
    json_safe,
    plain,
    record_json,
)
from ledger.serialization import canonical
from ledger.session import Session
from ledger.values import (
    AuditEvent,
    AuditTrail,
    CorrectionDue,
    Delivery,
    Explanation,
    ReadResult,
    RecordView,
    Revocation,
)

#: The most deliveries of a record an answer lists, the most recent (a report sent
#: to every customer is delivered thousands of times); ``deliveries_count`` counts
#: them all and ``GET /records/{record_id}/deliveries`` pages through every one.
DELIVERIES_LISTED = 100


def moment(session: Session) -> dict[str, Any] | None:
    """The ``as_of`` of an answer given as of a past moment (``as_of_position`` or
    ``as_of_time``): ``position``, the log position it shows the ledger right after
    (the end of the transaction holding the position asked for), and ``time``, the
    instant of that moment (``as_of_time`` when given; else the time of that
    position's event; reads judge expiry then unless ``at`` names another). None
    for an answer of now, which has no ``as_of``."""
    when = session.caller.as_of_at
    if session.position is None or when is None:
        return None
    return {"position": session.position, "time": when.isoformat()}


def stamped(session: Session, data: dict[str, Any]) -> dict[str, Any]:
    """``data``, with ``as_of`` first when ``session`` answers as of a past moment."""
    found = moment(session)
    return data if found is None else {"as_of": found, **data}


def record(view: RecordView) -> dict[str, Any]:
    """A record: every field, ``undeclared``, its :data:`DELIVERIES_LISTED` most
    recent deliveries with each one's ``state``, and ``deliveries_count``."""
    return record_json(view, DELIVERIES_LISTED)


def deliveries_page(
    record_id: str, deliveries: Sequence[Delivery], count: int, following: str | None
) -> dict[str, Any]:
    """One page of a record's deliveries, in the order they were recorded, with
    how many it has (``count``) and the ``after`` of the next page (``following``;
    None on the last)."""
    return {
        "record_id": record_id,
        "deliveries": [{**plain(d), "state": d.state} for d in deliveries],
        "deliveries_count": count,
        "next_after": following,
    }


def records_page(views: tuple[RecordView, ...], following: str | None) -> dict[str, Any]:
    """One page of a listing; ``next_after`` (``following``: see
    :func:`ledger.session.next_after`) is the ``after`` of the next, None on the last."""
    return {"records": [record(v) for v in views], "next_after": following}


def read_result(result: ReadResult, position: int | None = None) -> dict[str, Any]:
    """A read's outcome, the agreed value when FOUND, and its usable records as
    :func:`~ledger.answers.usable_listed` lists them within 4 MiB beside the value;
    ``omitted`` counts those left out, and ``note`` says where they are (as of
    ``position``, an as-of read's)."""
    value = plain(result.value)
    budget = MAX_ANSWER_BYTES - len(json.dumps(json_safe(value), ensure_ascii=False).encode())
    usable = result.records
    listed, _ = usable_listed(usable, budget, DELIVERIES_LISTED)
    left = len(usable) - len(listed)
    return {
        "outcome": str(result.outcome),
        "scope": result.scope,
        "claim_key": result.claim_key,
        "at": result.at.isoformat(),
        "value": value,
        "records": [record(r) for r in listed],
        "omitted": left,
        "note": _usable_note(left, usable, _listing(result, position, validity="VALID"))
        if left
        else None,
    }


def _listing(result: ReadResult | Explanation, position: int | None, **more: str) -> str:
    """The listing of a read's claim (and of keys beginning with it), as of ``position``."""
    query = {"scope": result.scope, "claim_prefix": result.claim_key, **more}
    if position is not None:
        query["as_of_position"] = str(position)
    return f"<GET /api/v1/records?{urlencode(query)}>"


def _usable_note(left: int, usable: Sequence[RecordView], listing: str) -> str:
    """What an answer says of the ``left`` usable records it does not list."""
    values = len({canonical(view.value) for view in usable})
    held = f"; they hold {values} different values" if values > 1 else ""
    return (
        f"{left} of the {len(usable)} usable records of this claim are not listed (the "
        f"outcome counts them all{held}). {listing} "
        "pages through them (with those of keys that begin with it)."
    )


def explanation(result: Explanation, maximum: int, position: int | None = None) -> dict[str, Any]:
    """Per record, whether it is usable and why not: the usable records as
    :func:`~ledger.answers.usable_listed` lists them (``usable_omitted`` counts
    those left out) and the others asked for, how many of those were left out
    (``omitted``) and, if any were, a ``note`` saying how to see them
    (``maximum``: the largest ``limit``; ``position``: an as-of explanation's)."""
    shown, left = usable_shown(result, DELIVERIES_LISTED)
    rest = (
        f"Ask again with a larger limit (at most {maximum}), or page through the claim's "
        f"records (with those of keys that begin with it) at {_listing(result, position)}."
    )
    answer = capped_explanation(shown, rest, DELIVERIES_LISTED)
    answer["usable_omitted"] = left
    if left:
        usable = [entry.record for entry in result.entries if entry.usable]
        note = _usable_note(left, usable, _listing(result, position, validity="VALID"))
        answer["note"] = note if answer["note"] is None else f"{note} {answer['note']}"
    return answer


def audit(trail: AuditTrail, events: Sequence[AuditEvent], following: int | None) -> dict[str, Any]:
    """A page of a record's history (``events`` of ``trail``), event by event, and
    the position the next page goes on from (``following``; None on the last)."""
    return {
        "record": record(trail.record),
        "events": [plain(e) for e in events],
        "undeclared": list(trail.undeclared),
        "next_after": following,
    }


def correction_due(due: CorrectionDue) -> dict[str, Any]:
    """A delivery that owes a correction, with why."""
    data: dict[str, Any] = plain(due)
    data["delivery"]["state"] = due.delivery.state
    return data


def revocation(result: Revocation, scopes: Sequence[str] = ()) -> dict[str, Any]:
    """What a revocation changed, only what the caller may see: at most
    :data:`~ledger.graph.MAX_SERVED_NODES` ids per list, with the counts; when
    some are left out, a ``note`` saying where the rest are: the listing of the
    STALE records of each of ``scopes`` (those the caller may list)."""
    pages = [
        f"<GET /api/v1/records?{urlencode({'scope': scope, 'status': 'STALE'})}>"
        for scope in scopes
    ] or ["<GET /api/v1/records?scope=…&status=STALE>"]
    several = len(pages) > 1
    rest = (
        f"{' and '.join(pages)} {'page' if several else 'pages'} through every record "
        f"now STALE in {'those scopes' if several else 'that scope'}, not only "
        "those this revocation marked (each record's `stale_causes` names what marked it)."
    )
    return capped_revocation(result, MAX_SERVED_NODES, rest)


def graph(sub: Subgraph) -> dict[str, Any]:
    """A dependency subgraph: records and the edges between them."""
    return {
        "root": sub.root,
        "title": sub.title,
        "position": sub.position,
        "nodes": [record(n) for n in sub.nodes],
        "edges": [{"parent": e.parent, "child": e.child, "edge": e.edge} for e in sub.edges],
    }
