"""The delivery-history view: deliveries, corrections and the correction outbox.

Delivery is history: rows here are only ever inserted, never changed by later
events, so a report stays ``DELIVERED`` whatever happens to its validity. The
record's validity *now* is read beside it from the current-validity view.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledger.domain import Record
from ledger.errors import CorruptEventError
from ledger.serialization import datetime_to_micros
from projections.base import Cursor, Dialect, as_of_filter
from projections.validity import record_id_in

VIEW = "delivery"

DDL = (
    "CREATE TABLE IF NOT EXISTS {t}pl_deliveries ("
    "delivery_id TEXT PRIMARY KEY, record_id TEXT NOT NULL, recipient TEXT NOT NULL, "
    "channel TEXT NOT NULL, delivered_at {bigint} NOT NULL, delivered_by TEXT NOT NULL, "
    "position {bigint} NOT NULL)",
    "CREATE INDEX IF NOT EXISTS pl_deliveries_record ON {t}pl_deliveries "
    "(record_id{delivered_key})",
    "CREATE TABLE IF NOT EXISTS {t}pl_corrections ("
    "correction_id TEXT PRIMARY KEY, delivery_id TEXT NOT NULL, record_id TEXT NOT NULL, "
    "note TEXT NOT NULL, replacement TEXT, issued_at {bigint} NOT NULL, "
    "issued_by TEXT NOT NULL, position {bigint} NOT NULL)",
    "CREATE INDEX IF NOT EXISTS pl_corrections_delivery ON {t}pl_corrections (delivery_id)",
    "CREATE TABLE IF NOT EXISTS {t}pl_outbox ("
    "correction_id TEXT PRIMARY KEY, delivery_id TEXT NOT NULL, recipient TEXT NOT NULL, "
    "channel TEXT NOT NULL, note TEXT NOT NULL, replacement TEXT, position {bigint} NOT NULL)",
)

TABLES = ("pl_deliveries", "pl_corrections", "pl_outbox")


#: The events this view folds; the projector hands it no other.
EVENTS = frozenset((Record.Delivered, Record.CorrectionIssued))


def apply(c: Cursor, d: Dialect, pos: int, event: Any, rid_of: Mapping[str, str]) -> None:
    """Fold one ``Record`` event into the delivery history (``rid_of``: the record
    id of each record event's aggregate, by its hex)."""
    if isinstance(event, Record.Delivered):
        c.execute(
            d.q(
                "INSERT INTO {t}pl_deliveries (delivery_id, record_id, recipient, channel, "
                "delivered_at, delivered_by, position) VALUES (?,?,?,?,?,?,?)"
            ),
            (
                event.delivery_id,
                record_id_in(rid_of, event.originator_id, pos),
                event.recipient,
                event.channel,
                datetime_to_micros(event.timestamp),
                event.actor,
                pos,
            ),
        )
    elif isinstance(event, Record.CorrectionIssued):
        c.execute(
            d.q("SELECT recipient, channel FROM {t}pl_deliveries WHERE delivery_id=?"),
            (event.delivery_id,),
        )
        delivery = c.fetchone()
        if delivery is None:
            raise CorruptEventError(
                f"stored event at position {pos} corrects delivery {event.delivery_id!r}, "
                "which was never made"
            )
        c.execute(
            d.q(
                "INSERT INTO {t}pl_corrections (correction_id, delivery_id, record_id, note, "
                "replacement, issued_at, issued_by, position) VALUES (?,?,?,?,?,?,?,?)"
            ),
            (
                event.correction_id,
                event.delivery_id,
                record_id_in(rid_of, event.originator_id, pos),
                event.note,
                event.replacement,
                datetime_to_micros(event.timestamp),
                event.actor,
                pos,
            ),
        )
        c.execute(
            d.q(
                "INSERT INTO {t}pl_outbox (correction_id, delivery_id, recipient, channel, "
                "note, replacement, position) VALUES (?,?,?,?,?,?,?)"
            ),
            (
                event.correction_id,
                event.delivery_id,
                delivery["recipient"],
                delivery["channel"],
                event.note,
                event.replacement,
                pos,
            ),
        )


def for_record(c: Cursor, d: Dialect, record_id: str, position: int | None = None) -> list[Any]:
    """Deliveries of a record (up to ``position`` if given), oldest first."""
    bound = position if position is not None else (1 << 62)
    c.execute(
        d.q("SELECT * FROM {t}pl_deliveries WHERE record_id=? AND position <= ? ORDER BY position"),
        (record_id, bound),
    )
    return list(c.fetchall())


def corrections_for(
    c: Cursor, d: Dialect, delivery_id: str, position: int | None = None
) -> list[Any]:
    """Corrections issued for one delivery (up to ``position`` if given)."""
    bound = position if position is not None else (1 << 62)
    c.execute(
        d.q(
            "SELECT * FROM {t}pl_corrections WHERE delivery_id=? AND position <= ? "
            "ORDER BY position"
        ),
        (delivery_id, bound),
    )
    return list(c.fetchall())


def corrections_of_record(
    c: Cursor, d: Dialect, record_id: str, position: int | None = None
) -> dict[str, list[Any]]:
    """Corrections issued for the deliveries of one record (up to ``position``
    if given), by delivery id, each list oldest first: one statement for a
    record delivered any number of times."""
    bound = position if position is not None else (1 << 62)
    c.execute(
        d.q(
            "SELECT co.* FROM {t}pl_deliveries dl JOIN {t}pl_corrections co "
            "ON co.delivery_id = dl.delivery_id "
            "WHERE dl.record_id=? AND dl.position <= ? AND co.position <= ? "
            "ORDER BY co.position"
        ),
        (record_id, bound, bound),
    )
    found: dict[str, list[Any]] = {}
    for row in c.fetchall():
        found.setdefault(row["delivery_id"], []).append(row)
    return found


def event_positions(c: Cursor, d: Dialect, record_id: str) -> list[int]:
    """The log positions of the ``Delivered`` and ``CorrectionIssued`` events of one
    record, as the views hold them (events of the record's own aggregate)."""
    c.execute(
        d.q(
            "SELECT position FROM {t}pl_deliveries WHERE record_id=? UNION ALL "
            "SELECT co.position FROM {t}pl_deliveries dl JOIN {t}pl_corrections co "
            "ON co.delivery_id = dl.delivery_id WHERE dl.record_id=?"
        ),
        (record_id, record_id),
    )
    return [int(row["position"]) for row in c.fetchall()]


def delivery(c: Cursor, d: Dialect, delivery_id: str) -> Any:
    """One delivery's row, or None."""
    c.execute(d.q("SELECT * FROM {t}pl_deliveries WHERE delivery_id=?"), (delivery_id,))
    return c.fetchone()


#: A delivery of a record that is VALID at an instant (ACCEPTED, not expired) on the
#: very row it was delivered with: it owes no correction (``deliveries.owed_since``).
_SETTLED = (
    "r.status = 'ACCEPTED' AND (r.eff_expires IS NULL OR r.eff_expires > ?) "
    "AND r.from_pos <= dl.position"
)


def unsettled(
    c: Cursor,
    d: Dialect,
    instant: int,
    position: int | None = None,
    record_id: str | None = None,
) -> list[Any]:
    """The deliveries (up to ``position`` if given; of ``record_id`` only if
    given; oldest first) that may owe a correction at ``instant`` (µs): those
    whose record, as it stands now (or right after ``position``), is not VALID at
    that instant or has a newer row than the one delivered. The others, often
    nearly all, are left out by the statement rather than read and checked one
    by one."""
    params: list[Any] = [] if record_id is None else [record_id]
    of = "" if record_id is None else "dl.record_id = ? AND "
    if position is None:
        rows = "r.to_pos IS NULL"
    else:
        rows = f"{as_of_filter('r')} AND dl.position <= ?"
        params += [position] * 3
    c.execute(
        d.q(
            "SELECT dl.* FROM {t}pl_deliveries dl JOIN {t}pl_records r "
            f"ON r.record_id = dl.record_id WHERE {of}{rows} AND NOT ({_SETTLED}) "
            "ORDER BY dl.position"
        ),
        (*params, instant),
    )
    return list(c.fetchall())


def count(c: Cursor, d: Dialect, table: str) -> int:
    """How many rows ``pl_deliveries`` or ``pl_corrections`` holds."""
    if table not in ("pl_deliveries", "pl_corrections"):
        raise ValueError(f"{table!r} is not a table of the delivery view")
    c.execute(d.q(f"SELECT COUNT(*) AS n FROM {{t}}{table}"))
    return int(c.fetchone()["n"])
