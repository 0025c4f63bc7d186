"""The shape check of decoded events: the check written out per event class
refuses exactly what the field-by-field check refuses, with the same message."""

from __future__ import annotations

import copy
import dataclasses
import functools
import sqlite3
import typing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from ledger.domain import uuid_of_hex
from ledger.shapes import _predicate, _slow_check, check_event_shape
from projections.projector import decode_row

FIXTURE = Path(__file__).parent / "fixtures" / "ledger-0.1.0.db"

#: Values put in place of each field in turn: each type a stored event can decode to.
SUBSTITUTES: list[Any] = [
    None,
    0,
    -7,
    True,
    1.5,
    "",
    "x",
    b"",
    (),
    ("a", "b"),
    ("a", 1),
    (None,),
    [],
    ["a"],
    {},
    {"a": 1},
    {1: "a"},
    datetime(2026, 1, 1, tzinfo=UTC),
    UUID(int=1),
]


def _events() -> list[Any]:
    """Every event of the 0.1.0 fixture ledger, decoded as a rebuild decodes it."""
    with sqlite3.connect(FIXTURE) as con:
        rows = con.execute(
            "SELECT rowid, originator_id, originator_version, topic, state "
            "FROM stored_events ORDER BY rowid"
        ).fetchall()
    return [decode_row(row) for row in rows]


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The declared type of each dataclass field of an event class."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _outcome(check: Any, event: Any) -> str | None:
    try:
        check(event)
    except ValueError as exc:
        return str(exc)
    return None


def _slow(event: Any) -> None:
    _slow_check(type(event), vars(event))


def test_every_stored_event_kind_passes() -> None:
    events = _events()
    assert len({type(e) for e in events}) >= 14
    for event in events:
        check_event_shape(event)


@pytest.mark.parametrize("substitute", SUBSTITUTES, ids=repr)
def test_a_field_of_another_type_is_refused_as_the_field_by_field_check_refuses(
    substitute: Any,
) -> None:
    refused = 0
    for event in _events():
        for name in vars(event):
            changed = copy.copy(event)
            object.__setattr__(changed, "__dict__", {**vars(event), name: substitute})
            expected = _outcome(_slow, changed)
            assert _outcome(check_event_shape, changed) == expected, (type(event), name)
            refused += expected is not None
            # and refused exactly when the field's declared type does not allow it
            hint = _hints(type(event)).get(name)
            if hint is not None:
                assert (expected is None) == _predicate(hint)(substitute), (type(event), name)
    assert refused > 0


def test_a_missing_field_is_named() -> None:
    for event in _events():
        for name in vars(event):
            changed = copy.copy(event)
            object.__setattr__(
                changed, "__dict__", {k: v for k, v in vars(event).items() if k != name}
            )
            expected = _outcome(_slow, changed)
            assert _outcome(check_event_shape, changed) == expected
            if expected is not None:
                assert f"lacks field {name!r}" in expected


def test_an_object_of_another_class_is_not_a_ledger_event() -> None:
    with pytest.raises(ValueError, match="is not a ledger event"):
        check_event_shape(object())


@pytest.mark.parametrize(
    "text",
    [
        "0" * 31 + "1",
        "ABCDEF" + "0" * 26,
        "-" + "0" * 30 + "1",
        "+" + "0" * 31,
        " " + "0" * 31,
        "0" * 15 + "_" + "0" * 16,
        "٣" * 32,
        "g" * 32,
    ],
)
def test_an_aggregate_id_read_as_hex_is_what_uuid_makes_of_it(text: str) -> None:
    # A rebuild reads each stored aggregate id as 32 hex digits without UUID's
    # general parsing; whatever UUID refuses is refused all the same.
    try:
        expected: UUID | None = UUID(text)
    except ValueError:
        expected = None
    if expected is None:
        with pytest.raises(ValueError):
            uuid_of_hex(text)
    else:
        made = uuid_of_hex(text)
        assert made == expected and made.int == expected.int and hash(made) == hash(expected)
