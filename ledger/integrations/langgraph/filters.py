"""The ``search`` filters (exact match, or ``$eq $ne $gt $gte $lt $lte`` on value
fields; a dotted name reaches into nested mappings; a field missing from a value
passes an equality with ``None``, as in LangGraph's own stores, and fails every
other condition, as in ``SqliteStore``) and the ``list_namespaces`` match conditions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.store.base import MatchCondition

from ledger.errors import InvalidInputError

__all__ = [
    "OPERATORS",
    "check_condition",
    "check_filter",
    "count",
    "matches",
    "namespace_matches",
]

#: The comparison operators ``search`` filters accept.
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def check_filter(flt: object) -> dict[str, Any]:
    if flt is None:
        return {}
    if not isinstance(flt, Mapping):
        raise InvalidInputError(f"search filter must be a mapping, got {type(flt).__name__}")
    for name, wanted in flt.items():
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"search filter field {name!r} is not a non-empty string")
        if isinstance(wanted, Mapping) and any(str(k).startswith("$") for k in wanted):
            unknown = [k for k in wanted if k not in OPERATORS]
            if unknown:
                raise InvalidInputError(
                    f"search filter on {name!r}: operator {unknown[0]!r} is not one of "
                    f"{', '.join(OPERATORS)}"
                )
        elif isinstance(wanted, Mapping) and (nested := _nested_operator(wanted)) is not None:
            # An exact match on a value holding an operator would match nothing, silently.
            path, op = nested
            raise InvalidInputError(
                f"search filter on {name!r}: operator {op!r} inside a value to match "
                f"exactly; to compare a nested field, name it with dots: "
                f"{{{f'{name}.{path}'!r}: {{{op!r}: ...}}}}"
            )
    return dict(flt)


def _nested_operator(value: Mapping[Any, Any], path: str = "") -> tuple[str, str] | None:
    """(dotted path, operator) of the first ``$`` key within a nested mapping."""
    for key, inner in value.items():
        if str(key).startswith("$"):
            return path.rstrip("."), str(key)
        if isinstance(inner, Mapping):
            found = _nested_operator(inner, f"{path}{key}.")
            if found is not None:
                return found
    return None


def _field(value: Any, name: str) -> tuple[bool, Any]:
    """(present, value) of field ``name``; a dotted name reaches into nested mappings."""
    if isinstance(value, Mapping) and name in value:
        return True, value[name]
    current = value
    for part in name.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return False, None
        current = current[part]
    return True, current


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: a boolean equals only a boolean, numbers compare by value."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _number(a) and _number(b):
        return bool(a == b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if type(a) is not type(b) and not (isinstance(a, str) and isinstance(b, str)):
        return False
    return bool(a == b)


def _compare(op: str, actual: Any, operand: Any) -> bool:
    if op == "$eq":
        return _equal(actual, operand)
    if op == "$ne":
        return not _equal(actual, operand)
    comparable = (_number(actual) and _number(operand)) or (
        isinstance(actual, str) and isinstance(operand, str)
    )
    if not comparable:
        return False
    if op == "$gt":
        return bool(actual > operand)
    if op == "$gte":
        return bool(actual >= operand)
    if op == "$lt":
        return bool(actual < operand)
    return bool(actual <= operand)  # $lte


def matches(flt: Mapping[str, Any], value: Any) -> bool:
    """Whether ``value`` passes every condition of a (checked) search filter."""
    for name, wanted in flt.items():
        present, actual = _field(value, name)
        if isinstance(wanted, Mapping) and any(str(k).startswith("$") for k in wanted):
            if not present:
                if all(op == "$eq" and operand is None for op, operand in wanted.items()):
                    continue
                return False
            if not all(_compare(op, actual, operand) for op, operand in wanted.items()):
                return False
        elif not present:
            if wanted is not None:
                return False
        elif not _equal(actual, wanted):
            return False
    return True


def check_condition(condition: object) -> None:
    if not isinstance(condition, MatchCondition) or condition.match_type not in (
        "prefix",
        "suffix",
    ):
        raise InvalidInputError(
            f"list_namespaces condition {condition!r} is not a prefix or suffix MatchCondition"
        )


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether ``namespace`` starts (prefix) or ends (suffix) with the condition's
    path; ``*`` matches any one label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    else:
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    return all(p == "*" or p == n for n, p in pairs)


def count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{what} must be a non-negative int, got {value!r}")
    return value
