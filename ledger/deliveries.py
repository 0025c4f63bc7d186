"""Delivery is history, validity is now: deliveries, corrections and what is owed.

A delivery records that a record left the system; nothing un-delivers it. When a
delivered record stops being VALID, a correction is due until one is issued (an
outbox entry: nothing is really sent).
"""

from __future__ import annotations

import uuid
from typing import Any

from ledger import pipeline, rules
from ledger.access import Role
from ledger.caller import Caller
from ledger.domain import Record, Status, Validity
from ledger.errors import NotUsableError, UnknownDeliveryError
from ledger.pipeline import Decision
from ledger.serialization import micros_to_datetime
from ledger.validation import check_id, check_text
from ledger.values import Correction, CorrectionDue, Delivery
from projections import delivery as delivery_view
from projections import validity as validity_view
from projections.base import Cursor


def deliver(caller: Caller, record_id: str, recipient: str, channel: str) -> str:
    """``Session.deliver``: the record must be ACCEPTED and VALID now."""
    caller.writable("deliver")
    check_text(recipient, "recipient", max_len=512)
    check_text(channel, "channel", max_len=64)
    delivery_id = f"d-{uuid.uuid4().hex}"

    def decide(c: Cursor, row: Any, record: Record, now: Any) -> Decision[str]:
        record.deliver(caller.subject, delivery_id, recipient, channel, now)
        rid = row["record_id"]
        if rules.validity(row, now) != Validity.VALID:
            raise NotUsableError(f"deliver refused: record {rid!r} {rules.expiry_text(row, rid)}")
        return Decision(record.collect_events(), lambda _: delivery_id)

    return pipeline.on_record(caller, "deliver", Role.DELIVER, record_id, decide)


def issue_correction(caller: Caller, delivery_id: str, note: str, replacement: str | None) -> str:
    """``Session.issue_correction``: a correction of one delivery in the outbox."""
    caller.writable("issue_correction")
    check_text(note, "note")
    check_id(delivery_id, "delivery id")
    correction_id = f"c-{uuid.uuid4().hex}"

    def decide(c: Cursor, now: Any) -> Decision[str]:
        d = caller.engine.dialect
        drow = delivery_view.delivery(c, d, delivery_id)
        row = None if drow is None else validity_view.current(c, d, drow["record_id"])
        if row is None or not caller.roles(c, row["scope"]):
            raise UnknownDeliveryError(
                f"issue_correction refused: delivery {delivery_id!r} is unknown or not "
                f"visible to {caller.subject!r}"
            )
        caller.require(c, row["scope"], Role.DELIVER, "issue_correction")
        if replacement is not None:
            caller.visible(c, replacement, Role.READ, "issue_correction", "replacement")
        record = caller.engine.load_record(c, row["record_id"])
        record.issue_correction(caller.subject, correction_id, delivery_id, note, replacement, now)
        return Decision(record.collect_events(), lambda _: correction_id)

    return pipeline.command(caller, "issue_correction", decide)


def corrections_due(caller: Caller) -> tuple[CorrectionDue, ...]:
    """``Session.corrections_due``: deliveries whose record left VALID since the
    delivery (or since the last correction), in scopes where the caller delivers."""
    d = caller.engine.dialect
    now = caller.at(None)
    out = []
    with caller.reading() as c:
        for drow in delivery_view.up_to(c, d, caller.position):
            row = validity_view.existing(c, d, drow["record_id"], caller.position)
            if Role.DELIVER.value not in caller.roles(c, row["scope"]):
                continue
            validity = rules.validity(row, now)
            if validity == Validity.VALID:
                continue
            since = max(drow["position"], row["left_valid_pos"] or 0)
            corrections = delivery_view.corrections_for(c, d, drow["delivery_id"], caller.position)
            if any(r["position"] > since for r in corrections):
                continue
            out.append(
                CorrectionDue(
                    delivery=delivery_of(drow, tuple(correction_of(r) for r in corrections)),
                    validity=validity,
                    status=Status(row["status"]),
                    cause=row["cause_root"],
                    reason=row["reason"],
                )
            )
    return tuple(out)


def delivery_of(row: Any, corrections: tuple[Correction, ...]) -> Delivery:
    """A ``Delivery`` from its view row and its corrections."""
    return Delivery(
        delivery_id=row["delivery_id"],
        record_id=row["record_id"],
        recipient=row["recipient"],
        channel=row["channel"],
        delivered_at=micros_to_datetime(row["delivered_at"]),
        delivered_by=row["delivered_by"],
        position=row["position"],
        corrections=corrections,
    )


def correction_of(row: Any) -> Correction:
    """A ``Correction`` from its view row."""
    return Correction(
        correction_id=row["correction_id"],
        delivery_id=row["delivery_id"],
        record_id=row["record_id"],
        note=row["note"],
        replacement=row["replacement"],
        issued_at=micros_to_datetime(row["issued_at"]),
        issued_by=row["issued_by"],
        position=row["position"],
    )
