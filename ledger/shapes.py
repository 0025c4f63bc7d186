"""The shape check of decoded events: every field present and of its declared type.

Stored bytes that decode but are not what the ledger wrote (a forged row, a
foreign topic) are refused before any view applies them.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from ledger import domain


def _predicate(hint: Any) -> Callable[[Any], bool]:
    """A fast check that a value has the declared type ``hint``."""
    if hint is Any or isinstance(hint, typing.TypeVar):
        return lambda v: True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [_predicate(arg) for arg in typing.get_args(hint)]
        return lambda v: any(p(v) for p in options)
    if hint is type(None):
        return lambda v: v is None
    if origin is tuple:
        args = typing.get_args(hint)
        item = _predicate(args[0] if args else Any)
        return lambda v: isinstance(v, tuple) and all(item(i) for i in v)
    if origin is dict:
        return lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v)
    if hint is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if isinstance(hint, type):
        return lambda v: isinstance(v, hint)
    return lambda v: True


def check_event_shape(event: Any) -> None:
    """Raise ``ValueError`` unless ``event`` is one of this module's events with
    every field present and of its declared type (guards against stored bytes
    that decode but are not what the ledger wrote)."""
    cls: type = type(event)
    check = _checker(cls)
    if check is None:
        raise ValueError(f"{cls.__qualname__} is not a ledger event")
    check(vars(event))


def _slow_check(cls: type, state: dict[str, Any]) -> None:
    """The field-by-field check, for the message: the first field missing or of
    a type its hint does not allow."""
    for name, exact, conforms in _event_fields(cls) or ():
        if name not in state:
            raise ValueError(f"{cls.__qualname__} lacks field {name!r}")
        value = state[name]
        if type(value) not in exact and not conforms(value):
            raise ValueError(f"{cls.__qualname__}.{name} has a {type(value).__name__}")


@functools.cache
def _checker(cls: type) -> Callable[[dict[str, Any]], None] | None:
    """A function checking an event's ``vars`` against ``cls``'s fields, written
    out field by field (a rebuild checks every event: a loop over the fields
    costs several times as much). It does what :func:`_slow_check` does; on any
    failure it calls that, for the message."""
    fields = _event_fields(cls)
    if fields is None:
        return None
    names: dict[str, Any] = {"_slow": _slow_check, "_cls": cls}
    lines = ["def check(state):", "    try:"]
    lines += [f"        v{i} = state[{name!r}]" for i, (name, _, _) in enumerate(fields)]
    lines += ["    except KeyError:", "        _slow(_cls, state)", "        return"]
    for i, (_, exact, conforms) in enumerate(fields):
        names[f"p{i}"] = conforms
        if len(exact) == 1:
            names[f"t{i}"] = next(iter(exact))
            test = f"type(v{i}) is not t{i} and not p{i}(v{i})"
        elif exact:
            names[f"e{i}"] = exact
            test = f"type(v{i}) not in e{i} and not p{i}(v{i})"
        elif conforms(()):  # a tuple: an empty one (most dependencies) needs no closer look
            test = f"not (type(v{i}) is tuple and not v{i}) and not p{i}(v{i})"
        elif conforms({}):  # a dict: likewise
            test = f"not (type(v{i}) is dict and not v{i}) and not p{i}(v{i})"
        else:
            test = f"not p{i}(v{i})"
        lines += [f"    if {test}:", "        _slow(_cls, state)"]
    exec("\n".join(lines), names)  # the source is built above from the fields alone
    check: Callable[[dict[str, Any]], None] = names["check"]
    return check


_Field = tuple[str, frozenset[type], Callable[[Any], bool]]


@functools.cache
def _event_fields(cls: type) -> tuple[_Field, ...] | None:
    """Per field: its name, the exact types that conform without a closer look
    (plain ``str``/``int``/``datetime``/``UUID``/``None`` hints), and the full check."""
    if cls.__module__ != domain.__name__ or not dataclasses.is_dataclass(cls):
        return None
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name, Any)
        fields.append((f.name, _exact_types(hint), _predicate(hint)))
    return tuple(fields)


def _exact_types(hint: Any) -> frozenset[type]:
    """The plain types among ``hint``'s options: a value of exactly one of them
    conforms (containers and ``Any`` always get the full check)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in _UNIONS else (hint,)
    simple = (str, int, float, bool, datetime, UUID, type(None))
    return frozenset(option for option in options if option in simple)


_UNIONS = (typing.Union, types.UnionType)
