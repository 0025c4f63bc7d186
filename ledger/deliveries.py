"""Delivery is history, validity is now: deliveries, corrections and what is owed.

A delivery records that a record left the system; nothing un-delivers it. When a
delivered record stops being VALID, a correction is due until one is issued (an
outbox entry: nothing is really sent).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ledger import pipeline, redaction, rules
from ledger.access import ADMIN_PRINCIPAL, Role
from ledger.caller import Caller
from ledger.domain import Record, Status, Validity
from ledger.errors import (
    InvalidInputError,
    InvalidTransitionError,
    NotUsableError,
    UnknownDeliveryError,
)
from ledger.pipeline import Decision
from ledger.serialization import datetime_to_micros, micros_to_datetime
from ledger.validation import check_flag, check_id, check_text
from ledger.values import Correction, CorrectionDue, Delivery
from projections import delivery as delivery_view
from projections import edges as edges_index
from projections import timeline
from projections import validity as validity_view
from projections.base import Cursor, Dialect
from projections.validity import RecordRow

#: Who is shown the deliveries owing a correction (``corrections_due``): those who
#: issue the corrections, and auditors checking that they are issued.
LISTS_OWED = (Role.DELIVER, Role.AUDIT)

if TYPE_CHECKING:
    from ledger.engine import Engine


def deliver(caller: Caller, record_id: str, recipient: str, channel: str) -> str:
    """``Session.deliver``: the record must be ACCEPTED and VALID now."""
    caller.writable("deliver")
    check_text(recipient, "recipient", max_len=512, line=True)
    check_text(channel, "channel", max_len=64, line=True)
    delivery_id = f"d-{uuid.uuid4().hex}"

    def decide(c: Cursor, row: Any, record: Record, now: Any) -> Decision[str]:
        record.deliver(caller.subject, delivery_id, recipient, channel, now)
        rid = row["record_id"]
        if rules.validity(row, now) != Validity.VALID:
            raise NotUsableError(f"deliver refused: record {rid!r} {rules.expiry_text(row, rid)}")
        return Decision(record.collect_events(), lambda _: delivery_id)

    return pipeline.on_record(caller, "deliver", Role.DELIVER, record_id, decide)


def issue_correction(
    caller: Caller,
    delivery_id: str,
    note: str,
    replacement: str | None,
    only_if_owed: bool = False,
) -> str:
    """``Session.issue_correction``: a correction of one delivery in the outbox
    (``only_if_owed``: refused unless the delivery owes one, checked in the
    command's transaction, so two submissions of one form issue one)."""
    caller.writable("issue_correction")
    check_text(note, "note")
    check_id(delivery_id, "delivery id")
    check_flag(only_if_owed, "only_if_owed")
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
        if only_if_owed:
            done = delivery_view.corrections_for(c, d, delivery_id, caller.position)
            if not _owed(owed_since(caller, c, drow, row, now), done):
                raise InvalidTransitionError(
                    f"issue_correction refused: delivery {delivery_id!r} owes no correction "
                    "now (its record is VALID as delivered, or a correction was issued since "
                    "it changed)"
                )
        if replacement is not None:
            new = caller.visible(c, replacement, Role.READ, "issue_correction", "replacement")
            if new["record_id"] == row["record_id"]:
                raise InvalidInputError(
                    f"issue_correction refused: replacement {replacement!r} is the delivered "
                    "record itself"
                )
            if rules.validity(new, now) != Validity.VALID:
                raise NotUsableError(
                    f"issue_correction refused: replacement {replacement!r} "
                    f"{rules.expiry_text(new, new['record_id'])}"
                )
        record = caller.engine.load_record(c, row["record_id"])
        key = None if replacement is None else new["record_id"]
        record.issue_correction(caller.subject, correction_id, delivery_id, note, key, now)
        return Decision(record.collect_events(), lambda _: correction_id)

    return pipeline.command(caller, "issue_correction", decide)


def corrections_due(caller: Caller, record_id: str | None = None) -> tuple[CorrectionDue, ...]:
    """``Session.corrections_due``: deliveries that owe a correction, in scopes where
    the caller delivers or audits, or of one record (see :func:`owed_since`)."""
    now = caller.at(None)
    out = []
    with caller.reading() as c:
        only = None
        if record_id is None:
            caller.require_somewhere(c, LISTS_OWED, "corrections_due")
        else:
            only = caller.visible_row(c, record_id, LISTS_OWED, "corrections_due")["record_id"]
        lists: dict[str, bool] = {}  # a scope's roles read once

        def lists_in(scope: str) -> bool:
            if scope not in lists:
                lists[scope] = caller.holds(c, scope, LISTS_OWED)
            return lists[scope]

        for drow, row, corrections in owing(caller, c, now, only, lists_in):
            row = redaction.row(
                row, caller.hidden_among(c, redaction.row_dependencies(row), seen=row["scope"])
            )
            delivery = delivery_of(drow, tuple(correction_of(r) for r in corrections))
            named = (
                row["record_id"],
                row["cause_root"],
                row["stale_via"],
                row["superseded_by"],
                *(x.replacement for x in delivery.corrections),
                *redaction.keys_in(row["reason"] or ""),
            )
            names = caller.names(c, named)
            if names:
                delivery = dataclasses.replace(
                    delivery,
                    record_id=names.get(delivery.record_id, delivery.record_id),
                    corrections=tuple(
                        dataclasses.replace(
                            x,
                            record_id=names.get(x.record_id, x.record_id),
                            replacement=redaction.one(x.replacement, frozenset(), names),
                        )
                        for x in delivery.corrections
                    ),
                )
                row = {
                    **row,
                    "cause_root": redaction.one(row["cause_root"], frozenset(), names),
                    "stale_via": redaction.one(row["stale_via"], frozenset(), names),
                    "superseded_by": redaction.one(row["superseded_by"], frozenset(), names),
                    "reason": row["reason"] and redaction.text(row["reason"], names),
                }
            out.append(
                CorrectionDue(
                    delivery=delivery,
                    scope=row["scope"],
                    validity=rules.validity(row, now),
                    status=Status(row["status"]),
                    cause=row["cause_root"],
                    reason=row["reason"],
                    superseded_by=row["superseded_by"],
                    cause_superseded_by=row["stale_via"],
                )
            )
    return tuple(out)


def owing(
    caller: Caller,
    c: Cursor,
    now: datetime,
    only: str | None = None,
    in_scope: Callable[[str], bool] | None = None,
) -> Iterator[tuple[Any, RecordRow, list[Any]]]:
    """The deliveries that owe a correction at ``now`` (of record ``only``, or of
    every record in a scope ``in_scope`` admits): each as (its view row, its
    record's row, its corrections so far), as of ``caller``'s position."""
    d = caller.engine.dialect
    # A report delivered many times: its row read once; corrections by delivery,
    # read once per record that owes any.
    rows: dict[str, RecordRow] = {}
    issued: dict[str, dict[str, list[Any]]] = {}
    for drow in delivery_view.unsettled(c, d, datetime_to_micros(now), caller.position, only):
        rid = drow["record_id"]
        if rid not in rows:
            rows[rid] = validity_view.existing(c, d, rid, caller.position)
        row = rows[rid]
        if in_scope is not None and not in_scope(row["scope"]):
            continue
        since = owed_since(caller, c, drow, row, now)
        if since is None:
            continue  # nothing owed: its corrections need not be read
        if rid not in issued:
            issued[rid] = delivery_view.corrections_of_record(c, d, rid, caller.position)
        corrections = issued[rid].get(drow["delivery_id"], [])
        if _owed(since, corrections):
            yield drow, row, corrections


def owed_count(engine: Engine, c: Cursor, now: datetime) -> int:
    """How many deliveries, in every scope, owe a correction at ``now``
    (``Ledger.stats``: what :func:`corrections_due` would list to a principal
    delivering everywhere)."""
    # ``owing`` reads only its caller's engine and position (live here), never
    # its token or roles: the count is the ledger's, not a principal's.
    return sum(1 for _ in owing(Caller(engine, ADMIN_PRINCIPAL, ""), c, now))


def owed_since(
    caller: Caller, c: Cursor, drow: Any, row: RecordRow, now: datetime
) -> tuple[int, int | None] | None:
    """Whether a delivery owes a correction, as (log position, instant in µs) that a
    correction must come after to answer it; None if nothing is owed.

    Owed when the record left VALID after the delivery — by a status change
    (revocation, supersession, staleness: after the position it left VALID), or by
    expiry (after the instant it expired) — and also when it is VALID again on a
    different basis than the recipient's copy cites (after that basis began): its
    own, or that of a record it rests on, re-based since (the copy's sources
    further up were withdrawn or expired, even where the record's own parents
    stayed the same).
    """
    delivered = int(drow["position"])
    if rules.validity(row, now) != Validity.VALID:
        eff = row["eff_expires"]
        if row["status"] == Status.ACCEPTED and eff is not None:
            return delivered, eff  # expired: a correction before the expiry says nothing
        left = row["left_valid_pos"] or 0
        if eff is not None and left > delivered:
            # It expired before its status changed: it left VALID then, not at the change.
            at = timeline.time_of(c, caller.engine.dialect, left)
            if at is not None and eff < at:
                return delivered, eff
        return max(delivered, left), None
    if row["from_pos"] <= delivered:
        # Its row is as delivered: nothing it rests on was re-based since (that
        # takes a STALE or expired basis, which would have changed this row too).
        return None
    d, rid = caller.engine.dialect, row["record_id"]
    then = validity_view.existing(c, d, rid, delivered)
    if (then["parents"], then["observed"]) != (row["parents"], row["observed"]):
        since = edges_index.basis_since(c, d, rid, caller.position)
        return max(delivered, since or row["from_pos"]), None
    now_edges = set(_ancestry(c, d, rid, caller.position))
    then_edges = set(_ancestry(c, d, rid, delivered))
    if now_edges == then_edges:
        return None
    # Every record above it now whose basis changed since, also one re-based on
    # nothing (it is in the ancestry only as a parent); not one that was above
    # it then and is no longer (its later changes are no longer the copy's).
    above = {rid, *(node for edge in now_edges for node in edge[:2])}
    rebased = (edges_index.basis_changed_at(c, d, node, caller.position) for node in above)
    return max(delivered, *(p for p in rebased if p is not None)), None


def _ancestry(
    c: Cursor, d: Dialect, record_id: str, position: int | None
) -> list[tuple[str, str, str]]:
    """The (parent, child, edge) rows above a record, now or right after ``position``."""
    return edges_index.lineage(
        c, d, record_id, ancestors=True, descendants=False, position=position
    )


def _owed(since: tuple[int, int | None] | None, corrections: Sequence[Any]) -> bool:
    """Whether a delivery owing a correction since ``since`` (None: nothing is
    owed, :func:`owed_since`) still owes one after its ``corrections``."""
    return since is not None and not any(_answers(r, since) for r in corrections)


def _answers(correction: Any, since: tuple[int, int | None]) -> bool:
    position, instant = since
    if correction["position"] <= position:
        return False
    return instant is None or correction["issued_at"] >= instant


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
