"""What a console form confirms: a revocation as its preview showed it, a decision
on the record the page showed. Either is refused (:class:`PreviewChanged`,
nothing written) when what the page showed no longer holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledger import Session
from ledger.errors import LedgerError
from ledger.values import RecordView, RevocationPreview

#: A revocation preview lists at most this many of the records it would mark STALE,
#: and as many of the deliveries that would owe corrections; the rest are counted
#: (the page would otherwise grow with everything stored beneath the record).
LISTED = 200


def revocation_preview(
    live: Session, record_id: str
) -> tuple[RecordView, RevocationPreview, list[RecordView]]:
    """The record, what revoking it would do now, and the records it would mark
    STALE that the caller may read, the first :data:`LISTED` of them (the revoke
    page shows them; confirming compares the preview the page showed with this one)."""
    view = live.get(record_id)
    preview = live.preview_revoke(record_id)
    stale = []
    for rid in preview.stale[:LISTED]:
        try:
            stale.append(live.get(rid))
        except LedgerError:
            continue
    return view, preview, stale


class PreviewChanged(Exception):
    """A form confirmed from a page that no longer shows what it would act on: a
    revocation preview, or a record whose id now names one in another scope."""

    def __init__(self, message: str, back: str) -> None:
        super().__init__(message)
        self.back = back


def still_shown(live: Session, record_id: str, form: Mapping[str, Any]) -> None:
    """Refuse a record's form when its id no longer names a record in the scope the
    page showed (the form's ``scope``): the caller's grants changed since, and the
    decision would land on a record it was not shown. What the id names is looked
    up as the command looks it up (any role in the scope will do: an approver
    need not hold ``read``). Nothing is written."""
    shown = form.get("scope")
    if shown is None:
        return
    caller = live.caller
    with caller.reading() as c:
        row = caller.lookup(c, record_id)
    if row is None:
        return  # unknown or hidden now: the command itself refuses it, as it would
    if row["scope"] != shown:
        raise PreviewChanged(
            f"Nothing was done: {record_id} now names a record in scope {row['scope']!r}, "
            f"not the one in {shown!r} the page showed. Check the record and act again.",
            f"/records/{record_id}",
        )
