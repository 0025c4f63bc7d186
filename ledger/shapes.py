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
    fields = _event_fields(cls)
    if fields is None:
        raise ValueError(f"{cls.__qualname__} is not a ledger event")
    state = vars(event)
    for name, exact, conforms in fields:
        if name not in state:
            raise ValueError(f"{cls.__qualname__} lacks field {name!r}")
        value = state[name]
        if type(value) in exact:
            continue  # an exact type the hint allows: no further check needed
        if not conforms(value):
            raise ValueError(f"{cls.__qualname__}.{name} has a {type(value).__name__}")


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
    options = typing.get_args(hint) if typing.get_origin(hint) in _UNIONS else (hint,)
    simple = (str, int, float, bool, datetime, UUID, type(None))
    if all(option in simple for option in options):
        return frozenset(options)
    return frozenset()  # containers and Any: always the full check


_UNIONS = (typing.Union, types.UnionType)
