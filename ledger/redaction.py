"""One redaction rule for every output: nothing of a scope the caller holds no
grant in (SPEC §13.1).

A record the caller may see can rest on records it may not: a parent, an
observed dependency, the ancestor whose expiry it inherits, the cause that made
it STALE. Every output built from a view row or an event (``RecordView``,
``explain``, audit trails, history, corrections, graphs, PROV export, bundles,
error messages) passes through :func:`row`, :func:`ids` or :func:`details`, so
such ids become one fixed placeholder (:data:`~ledger.values.HIDDEN`, shown once
however many there are), a hidden cause's reason is withheld
(:func:`~ledger.values.withheld`) and so is who made the stale marking it caused
(:func:`actor`).

Which ids are hidden is decided by :meth:`ledger.caller.Caller.hidden_among`:
a record is hidden when the caller holds no role at all in its scope.

Ids are unique per scope: a record proposed under an id taken only in a scope
its proposer cannot see is stored under the key ``id@@scope`` (``@@`` cannot
occur in an id). A caller is shown such a key as the bare id when that is what the
bare id denotes for it, else by the key: when it can see the record keyed by the
bare id too, or another record proposed under that id, earlier, in a scope of
its own (:meth:`ledger.caller.Caller.names`): so a record proposed later never
takes over a name a caller was shown;
:func:`view`, :func:`ids`, :func:`one` and :func:`details` apply that mapping
(``names``) where they apply the placeholder.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Set
from typing import Any, cast

from ledger.errors import LedgerError, retold
from ledger.serialization import unpack
from ledger.values import HIDDEN, RecordView, withheld
from projections.validity import RecordRow

#: Separates an id from its scope in the key of a record whose id was taken in a
#: scope its proposer could not see.
QUALIFIER = "@@"
#: No names to map.
_NONE: Mapping[str, str] = {}


def qualified(name: str, scope: str) -> str:
    """The key of a record proposed as ``name`` in ``scope`` when ``name`` is taken
    in a scope its proposer cannot see."""
    return f"{name}{QUALIFIER}{scope}"


def bare(key: str) -> str:
    """The id a record was proposed as (its key without a qualifying scope): how
    its proposer, who could not see the id taken, is shown it."""
    return key.partition(QUALIFIER)[0]


_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}@@[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def keys_in(text: str) -> set[str]:
    """The qualified keys a message names."""
    return set(_KEY.findall(text)) if QUALIFIER in text else set()


def error(exc: LedgerError, names: Mapping[str, str]) -> LedgerError:
    """``exc``, or one of its type whose message names qualified keys as ``names``
    shows them."""
    if not names:
        return exc
    return retold(exc, text(str(exc), names))


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


#: How the view stores an empty list of ids (most records have no parents).
NO_IDS = b"\x90"


def id_list(data: bytes) -> list[str]:
    """The ids a view row stores in ``parents`` or ``observed``."""
    return [] if data == NO_IDS else cast("list[str]", unpack(data))


def row_dependencies(
    row: RecordRow, parents: Iterable[str] | None = None, observed: Iterable[str] | None = None
) -> set[str]:
    """Every other record a view row names (its parents, observed dependencies,
    expiry source, stale cause, versions); ``parents`` and ``observed``: the row's
    when already unpacked."""
    named: set[str | None] = {  # the _ID_COLUMNS
        row["cause_root"],
        row["stale_via"],
        row["eff_source"],
        row["supersedes"],
        row["superseded_by"],
    }
    named.discard(None)
    out = cast("set[str]", named)
    out.update(id_list(row["parents"]) if parents is None else parents)
    out.update(id_list(row["observed"]) if observed is None else observed)
    out.discard(row["record_id"])
    return out


def event_ids(details: Mapping[str, Any]) -> set[str]:
    """The records an event's id fields name (not keys quoted in its texts, which
    any principal who may write a note or reason can put there)."""
    out: set[str] = set()
    for name in _ID_FIELDS:
        value = details.get(name)
        if isinstance(value, str):
            out.add(value)
        elif isinstance(value, list | tuple):
            out.update(v for v in value if isinstance(v, str))
    return out


def event_dependencies(details: Mapping[str, Any]) -> set[str]:
    """Every record an event's fields name (qualified keys in its texts included)."""
    out = event_ids(details)
    for name in _TEXT_FIELDS:
        value = details.get(name)
        if isinstance(value, str):
            out.update(keys_in(value))
    return out


#: Event fields of free text, which may name a record by its key (a supersession's
#: reason does).
_TEXT_FIELDS = ("reason", "note")


def text(value: str, names: Mapping[str, str]) -> str:
    """``value`` with the qualified keys it names as ``names`` shows them."""
    if not names or QUALIFIER not in value:
        return value
    return _KEY.sub(lambda m: names.get(m.group(0), m.group(0)), value)


def ids(
    values: Iterable[str], hidden: Set[str], names: Mapping[str, str] = _NONE
) -> tuple[str, ...]:
    """``values`` with hidden ids replaced by one :data:`HIDDEN`, in order (and
    qualified keys by the ids ``names`` shows them as)."""
    if not hidden and not names:
        given = tuple(values)
        if given.count(HIDDEN) <= 1:
            return given
        values = given
    out: list[str] = []
    hidden_shown = False  # whether ``out`` holds HIDDEN yet
    for value in values:
        shown = HIDDEN if value in hidden else names.get(value, value)
        if shown != HIDDEN:
            out.append(shown)
        elif not hidden_shown:
            out.append(shown)
            hidden_shown = True
    return tuple(out)


def one(value: str | None, hidden: Set[str], names: Mapping[str, str] = _NONE) -> str | None:
    """``value``, or :data:`HIDDEN` when it is hidden (a qualified key as shown)."""
    if value is None:
        return None
    return HIDDEN if value in hidden else names.get(value, value)


def view(record: RecordView, names: Mapping[str, str]) -> RecordView:
    """``record`` with every qualified key it names as ``names`` shows it."""
    if not names:
        return record
    none: Set[str] = frozenset()

    def name(value: str | None) -> str | None:
        return one(value, none, names)

    return dataclasses.replace(
        record,
        id=names.get(record.id, record.id),
        expiry_source=name(record.expiry_source),
        parents=ids(record.parents, none, names),
        observed=ids(record.observed, none, names),
        cause=name(record.cause),
        reason=None if record.reason is None else text(record.reason, names),
        supersedes=name(record.supersedes),
        superseded_by=name(record.superseded_by),
        cause_superseded_by=name(record.cause_superseded_by),
        stale_causes=tuple(
            dataclasses.replace(
                x,
                cause=names.get(x.cause, x.cause),
                reason=text(x.reason, names),
                superseded_by=name(x.superseded_by),
            )
            for x in record.stale_causes
        ),
        deliveries=tuple(
            dataclasses.replace(
                y,
                record_id=names.get(y.record_id, y.record_id),
                corrections=tuple(
                    dataclasses.replace(
                        x,
                        record_id=names.get(x.record_id, x.record_id),
                        replacement=name(x.replacement),
                    )
                    for x in y.corrections
                ),
            )
            for y in record.deliveries
        ),
    )


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
        out["reason"] = withheld(row["stale_via"])
    return out  # type: ignore[return-value]


def actor(subject: str | None, fields: Mapping[str, Any], hidden: Set[str]) -> str | None:
    """Who an event shows as its actor: :data:`HIDDEN` for a stale marking whose
    cause is hidden (whoever revoked or superseded it acted in a scope the caller
    cannot see), ``subject`` otherwise."""
    if subject is not None and hidden and fields.get("cause") in hidden:
        return HIDDEN
    return subject


def details(
    fields: Mapping[str, Any], hidden: Set[str], names: Mapping[str, str] = _NONE
) -> dict[str, Any]:
    """An event's fields naming no hidden record; a hidden cause's reason withheld
    (and qualified keys as ``names`` shows them)."""
    out = dict(fields)
    if not hidden and not names:
        return out
    for name in (*_ID_FIELDS, "record_id"):
        value = out.get(name)
        if isinstance(value, str):
            out[name] = one(value, hidden, names)
        elif isinstance(value, list | tuple):  # kept as it came: its type tells nothing
            out[name] = type(value)(ids(value, hidden, names))
    for name in _TEXT_FIELDS:
        value = out.get(name)
        if isinstance(value, str):
            out[name] = text(value, names)
    if fields.get("cause") in hidden and "reason" in out:
        out["reason"] = withheld(fields.get("superseded_by"))
    return out
