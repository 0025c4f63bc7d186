"""What LangGraph gets back from the ledger, and what it may not put: the current
version of a key (the newest usable record a read gives), an ``Item`` made from
it, and the refusal of a tuple in a value."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langgraph.store.base import Item

from ledger.domain import Kind, Outcome, Status
from ledger.errors import InvalidValueError, LedgerError, MemoryConflictError
from ledger.serialization import canonical
from ledger.values import ReadResult, RecordView

if TYPE_CHECKING:
    from ledger import Session


def newest_usable(result: ReadResult, where: Callable[[str], str]) -> RecordView | None:
    """The newest of a read's usable records, or None (``where``: the refusal,
    given the records' ids, when the usable records disagree). Only items count
    in a conflict: a record whose value is no mapping (by 0.1.0, say) is none.

    Raises:
        MemoryConflictError: usable items of the key disagree.
    """
    if result.outcome == Outcome.CONFLICT:
        items = [r for r in result.records if isinstance(r.value, dict)]
        if len({canonical(r.value) for r in items}) > 1:  # as the ledger compares
            raise MemoryConflictError(where(", ".join(r.id for r in items)))
        if not (records := tuple(items)):
            return None
    elif result.outcome != Outcome.FOUND:
        return None
    else:
        records = result.records
    if len(records) == 1:
        return records[0]
    return max(records, key=lambda r: (r.created_at, r.position))


def unchanged(
    session: Session, scope: str, claim: str, kind: Kind, value: Mapping[str, Any]
) -> str | None:
    """The id of the key's one usable version if a put of ``value`` would leave the
    key as it is, else None: that version holds ``value`` (compared as the ledger
    compares values: by canonical bytes) with no expiry or conditions (as the
    store writes it), and no version awaiting review would replace it (the put would
    replace that one); whether the put may be made at all is the store's to check.
    A new version would supersede an equal one and
    make everything resting on it STALE, as a node saving its state each turn,
    changed or not, would. Read as ``get`` reads, outside any run (not observed);
    anything refused or in doubt leaves the put to propose (and to refuse)."""
    try:
        found = session.read(scope, claim, None, None, (kind,))
        if found.outcome != Outcome.FOUND or len(found.records) != 1:
            return None
        view = found.records[0]
        kept = view.effective_expires is None and not view.conditions
        if not kept or canonical(view.value) != canonical(value):
            return None
        pending = session.records(
            scope, status=Status.CANDIDATE, kind=kind, claim_prefix=claim, limit=_PENDING
        )
    except (LedgerError, TypeError, ValueError):  # a value the ledger refuses: its put names it
        return None
    if len(pending) == _PENDING or any(v.claim_key == claim for v in pending):
        return None
    return view.id


#: Candidates under a key's prefix read to find one of the key awaiting review (as
#: many found: one is taken to be there).
_PENDING = 100


def no_tuple(value: Any, what: str) -> None:
    """Refuse a tuple anywhere in ``value``: the ledger stores it as a list, so
    what a get gave back would not equal what was put (LangGraph's own stores keep it).

    Raises:
        InvalidValueError: naming where the tuple is.
    """
    if isinstance(value, tuple):
        raise InvalidValueError(
            f"{what} holds a tuple, which the ledger would store as a list: give a list"
        )
    if isinstance(value, Mapping):
        for name, inner in value.items():
            no_tuple(inner, f"{what}.{name}")  # the path as the ledger's own checks write it
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            no_tuple(inner, f"{what}[{index}]")


#: Whether ``Item`` has the slots ``item_of`` fills (then made without its
#: constructor, whose conversions a ledger's answer never needs).
_BARE_ITEM = getattr(Item, "__slots__", None) == (
    "value",
    "key",
    "namespace",
    "created_at",
    "updated_at",
)
_new_item = Item.__new__


def item_of(cls: type[Any], namespace: tuple[str, ...], key: str, view: RecordView | None) -> Any:
    """An ``Item`` (or ``SearchItem``) of the record's current version; None when
    there is none, or its value is no mapping (a record another surface wrote under
    the key: LangGraph's ``Item.value`` is a dict)."""
    if view is None or not isinstance(view.value, dict):
        return None
    created: datetime = view.created_at
    if cls is Item and _BARE_ITEM:
        # What the constructor makes of these, without its keyword call and its
        # conversions (the namespace is a tuple, the instants datetimes already).
        made = _new_item(Item)
        made.value, made.key, made.namespace = view.value, key, namespace
        made.created_at = made.updated_at = created
        return made
    return cls(
        namespace=namespace, key=key, value=view.value, created_at=created, updated_at=created
    )
