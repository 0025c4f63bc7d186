"""What the store checks of an operation before a batch runs any of it: its shape
(a namespace is a tuple of labels, a key a string), LangGraph's label rules, where
it would live in the ledger, its value, and the features the store does not offer
(semantic query, field index, TTL)."""

from __future__ import annotations

from collections.abc import Mapping

from langgraph.store.base import (
    GetOp,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
    validate_op_namespace,
)

from ledger.domain import Kind
from ledger.errors import (
    InvalidInputError,
    InvalidKindError,
    InvalidValueError,
    UnsupportedStoreOperationError,
    ValueTooLargeError,
)
from ledger.integrations.langgraph.filters import check_condition, check_filter, count
from ledger.integrations.langgraph.items import no_tuple
from ledger.integrations.langgraph.keys import NamespaceLabelError, find, location, scope_of
from ledger.validation import check_kind, check_value, quoted

__all__ = ["check_namespace", "check_op", "check_store_kind"]


def check_store_kind(kind: object) -> Kind:
    """The kind a store's records are proposed as: a record kind other than
    evidence, which ``capture`` makes of bytes read (a ``put`` of it is refused,
    and its values, snapshot references, are no items).

    Raises:
        InvalidKindError: ``kind`` is not a record kind, or is ``evidence``.
    """
    checked = check_kind(kind)
    if checked == Kind.EVIDENCE:
        raise InvalidKindError(
            "kind 'evidence' cannot be a store's kind: evidence is made by capture, "
            "which pins the bytes read; give kind 'fact', 'inference' or another"
        )
    return checked


def check_namespace(namespace: object, what: str = "namespace") -> None:
    """Refuse a namespace that is not a tuple (or list) of labels: a bare string
    would otherwise be taken for one label per character.

    Raises:
        NamespaceLabelError: naming what was given instead.
    """
    if isinstance(namespace, tuple | list):
        return
    if isinstance(namespace, str):
        raise NamespaceLabelError(
            f"{what} {quoted(namespace)} is a str, not a tuple of labels: "
            f"write ({quoted(namespace)},)"
        )
    raise NamespaceLabelError(f"{what} must be a tuple of labels, got {type(namespace).__name__}")


def check_op(op: object, depth: int, max_value_bytes: int) -> None:
    """Refuse a malformed or unsupported operation before anything runs.

    Raises:
        InvalidInputError: an unknown operation, a key that is not a string, a
            value that is no mapping, a bad filter, page or condition.
        NamespaceLabelError: a namespace the store cannot map to a scope and
            claim key (a LangGraph ``InvalidNamespaceError`` too; LangGraph's own
            label rules raise its ``InvalidNamespaceError``).
        InvalidValueError: a value the ledger cannot hold as given.
        UnsupportedStoreOperationError: a semantic query, a field index or a TTL.
    """
    if isinstance(op, GetOp | PutOp):
        check_namespace(op.namespace)
        if not isinstance(op.key, str):
            raise InvalidInputError(f"key must be a string, got {type(op.key).__name__}")
    elif isinstance(op, SearchOp):
        check_namespace(op.namespace_prefix, "search namespace_prefix")
    elif isinstance(op, ListNamespacesOp):
        _check_conditions(op.match_conditions)
    else:
        raise InvalidInputError(f"unknown store operation {type(op).__name__}")
    validate_op_namespace(op)
    if isinstance(op, GetOp):
        find(op.namespace, op.key, depth)
    elif isinstance(op, PutOp):
        _check_put(op, depth, max_value_bytes)
    elif isinstance(op, SearchOp):
        if op.query:
            raise UnsupportedStoreOperationError(
                f"search with query={op.query!r}: LedgerStore has no semantic index; "
                "search by namespace and filter instead"
            )
        check_filter(op.filter)
        count(op.limit, "search limit")
        count(op.offset, "search offset")
        if len(op.namespace_prefix) >= depth:
            scope_of(op.namespace_prefix[:depth])
    else:
        count(op.limit, "list_namespaces limit")
        count(op.offset, "list_namespaces offset")
        if op.max_depth is not None:
            count(op.max_depth, "list_namespaces max_depth")


def _check_conditions(conditions: object) -> None:
    """Each of ``ListNamespacesOp.match_conditions`` is a prefix or suffix
    ``MatchCondition`` whose path is a tuple of labels."""
    if conditions is None:
        return
    if isinstance(conditions, MatchCondition) or not isinstance(conditions, tuple | list):
        got = "one MatchCondition" if isinstance(conditions, MatchCondition) else None
        raise InvalidInputError(
            "list_namespaces match_conditions must be a tuple of MatchCondition, got "
            f"{got or type(conditions).__name__}: write (condition,)"
        )
    for condition in conditions:
        check_condition(condition)
        check_namespace(condition.path, f"list_namespaces {condition.match_type}")


def _check_put(op: PutOp, depth: int, max_value_bytes: int) -> None:
    """A put: LangGraph's put rules, a claim key the ledger can hold, a value it
    can hold as given. A delete (no value) is checked as a get is: LangGraph
    refuses an empty namespace and a ``langgraph`` root to a put only."""
    if op.value is None:
        find(op.namespace, op.key, depth)
    else:
        if not op.namespace:
            raise NamespaceLabelError("namespace cannot be empty")
        if op.namespace[0] == "langgraph":
            raise NamespaceLabelError(
                f"root label of namespace {tuple(op.namespace)!r} cannot be 'langgraph'"
            )
        location(tuple(op.namespace), op.key, depth)
        if not isinstance(op.value, Mapping):
            raise InvalidInputError(
                f"put of key {op.key!r} refused: value must be a mapping or None, "
                f"got {type(op.value).__name__}"
            )
        # Checked with the rest of the batch, so a value the ledger cannot hold
        # stops the batch before any of its puts is written.
        try:
            check_value(dict(op.value), "value", max_value_bytes)
            no_tuple(op.value, "value")
        except (InvalidValueError, ValueTooLargeError) as exc:
            raise type(exc)(f"put of key {op.key!r} refused: {exc}") from None
    # An empty list of fields asks for no index, as False does.
    if op.index not in (None, False) and op.index != []:
        raise UnsupportedStoreOperationError(
            f"put of key {op.key!r} with index={op.index!r}: LedgerStore has no "
            "semantic index; pass index=None or index=False"
        )
    if op.ttl is not None:
        raise UnsupportedStoreOperationError(
            f"put of key {op.key!r} with ttl={op.ttl!r}: LedgerStore does not expire "
            "items on a refreshable timer (a ledger expiry is fixed when a record is "
            "proposed); pass ttl=None"
        )
