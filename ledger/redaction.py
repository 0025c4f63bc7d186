"""One redaction rule for every output: nothing of a scope the caller holds no
grant in (SPEC §13.1).

A record the caller may see can rest on records it may not: a parent, an
observed dependency, the ancestor whose expiry it inherits, the cause that made
it STALE. Every output built from a view row or an event (``RecordView``,
``explain``, audit trails, history, corrections, graphs, PROV export, bundles,
error messages) passes through :func:`row`, :func:`ids` or :func:`details`, so
such ids become one fixed placeholder (:data:`~ledger.values.HIDDEN`, shown once
however many there are) and a hidden cause's reason is withheld
(:data:`~ledger.values.WITHHELD`).

Which ids are hidden is decided by :meth:`ledger.caller.Caller.hidden_among`:
a record is hidden when the caller holds no role at all in its scope.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from typing import Any

from ledger.serialization import unpack
from ledger.values import HIDDEN, WITHHELD
from projections.validity import RecordRow

#: Row columns that name another record.
_ID_COLUMNS = ("cause_root", "stale_via", "eff_source", "supersedes", "superseded_by")
#: Event fields that name other records (one id, or a list of ids).
_ID_FIELDS = (
    "cause",
    "superseded_by",
    "supersedes",
    "by",
    "replacement",
    "parents",
    "observed",
)


def row_dependencies(row: RecordRow) -> set[str]:
    """Every other record a view row names (its parents, observed dependencies,
    expiry source, stale cause, versions)."""
    out = {row[col] for col in _ID_COLUMNS if row[col] is not None}  # type: ignore[literal-required]
    out.update(unpack(row["parents"]))
    out.update(unpack(row["observed"]))
    out.discard(row["record_id"])
    return out


def event_dependencies(details: Mapping[str, Any]) -> set[str]:
    """Every record an event's fields name."""
    out: set[str] = set()
    for name in _ID_FIELDS:
        value = details.get(name)
        if isinstance(value, str):
            out.add(value)
        elif isinstance(value, list | tuple):
            out.update(v for v in value if isinstance(v, str))
    return out


def ids(values: Iterable[str], hidden: Set[str]) -> tuple[str, ...]:
    """``values`` with hidden ids replaced by one :data:`HIDDEN`, in order."""
    out: list[str] = []
    for value in values:
        shown = HIDDEN if value in hidden else value
        if shown not in out or shown != HIDDEN:
            out.append(shown)
    return tuple(out)


def one(value: str | None, hidden: Set[str]) -> str | None:
    """``value``, or :data:`HIDDEN` when it is hidden."""
    return HIDDEN if value is not None and value in hidden else value


def row(row: RecordRow, hidden: Set[str]) -> RecordRow:
    """A copy of ``row`` naming no hidden record (the same row when none is named)."""
    if not hidden or not any(
        row[col] in hidden  # type: ignore[literal-required]
        for col in _ID_COLUMNS
    ):
        return row
    out: dict[str, Any] = dict(row)
    for col in _ID_COLUMNS:
        out[col] = one(out[col], hidden)
    if row["cause_root"] in hidden and row["status"] == "STALE":
        out["reason"] = WITHHELD
    return out  # type: ignore[return-value]


def details(fields: Mapping[str, Any], hidden: Set[str]) -> dict[str, Any]:
    """An event's fields naming no hidden record; a hidden cause's reason withheld."""
    out = dict(fields)
    if not hidden:
        return out
    for name in _ID_FIELDS:
        value = out.get(name)
        if isinstance(value, str):
            out[name] = one(value, hidden)
        elif isinstance(value, list | tuple):
            out[name] = list(ids(value, hidden))
    if fields.get("cause") in hidden and "reason" in out:
        out["reason"] = WITHHELD
    return out
