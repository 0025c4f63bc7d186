"""The one msgpack transcoder: a decoded event equals the event that was encoded."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from enum import IntEnum
from typing import Any
from uuid import UUID, uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import Kind, Status
from ledger.serialization import SALT, MsgpackTranscoder, canonical, unpack
from ledger.stored import stored_proposal
from tests.test_stored import proposed

transcoder = MsgpackTranscoder()


def roundtrip(value: Any) -> Any:
    return transcoder.decode(transcoder.encode(value))


def same(a: Any, b: Any) -> bool:
    """Equal *and* of the same types all the way down (1, 1.0 and True differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def test_each_encoding_of_an_event_state_ends_with_its_own_salt_dropped_on_decoding() -> None:
    state = {"record_id": "r-1", "actor": "agent-1"}
    first, second = transcoder.encode(state), transcoder.encode(state)

    assert state == {"record_id": "r-1", "actor": "agent-1"}  # the caller's map is left as it is
    assert first != second
    stored = [unpack(first), unpack(second)]
    assert [list(s) for s in stored] == [["record_id", "actor", SALT]] * 2
    assert all(type(s[SALT]) is bytes and len(s[SALT]) == 16 for s in stored)
    assert stored[0][SALT] != stored[1][SALT]
    assert transcoder.decode(first) == transcoder.decode(second) == state
    # a proposal's row assembled without the mapper gets one too
    event = proposed(1)
    salts = {unpack(stored_proposal(event).state)[SALT] for _ in range(3)}
    assert len(salts) == 3 and all(len(s) == 16 for s in salts)


def test_uuid_round_trips_as_uuid() -> None:
    value = uuid4()
    back = roundtrip(value)
    assert type(back) is UUID
    assert back == value


@pytest.mark.parametrize(
    "offset",
    [
        timedelta(0),
        timedelta(hours=5, minutes=30),
        timedelta(hours=-8),
        timedelta(hours=13, minutes=45),
    ],
    ids=["utc", "plus-0530", "minus-0800", "plus-1345"],
)
def test_aware_datetime_round_trips_with_its_offset(offset: timedelta) -> None:
    value = datetime(2026, 3, 29, 1, 59, 59, 123456, tzinfo=timezone(offset))
    back = roundtrip(value)
    assert back == value
    assert back.utcoffset() == value.utcoffset()
    assert (back.year, back.hour, back.microsecond) == (value.year, value.hour, value.microsecond)


def test_datetimes_before_the_epoch_round_trip() -> None:
    value = datetime(1901, 12, 13, 20, 45, 52, 1, tzinfo=timezone(timedelta(hours=-3)))
    back = roundtrip(value)
    assert back == value
    assert back.utcoffset() == value.utcoffset()


def test_naive_datetime_is_refused() -> None:
    with pytest.raises(TypeError, match="naive"):
        transcoder.encode({"at": datetime(2026, 1, 1, 12, 0)})


def test_tuples_and_lists_stay_distinct() -> None:
    value = {"t": (1, 2), "l": [1, 2], "nested": [(1, [2, (3,)]), ()]}
    back = roundtrip(value)
    assert same(back, value)
    assert type(back["t"]) is tuple
    assert type(back["l"]) is list
    assert type(back["nested"][0]) is tuple
    assert type(back["nested"][0][1]) is list
    assert back["nested"][1] == ()


def test_bytes_round_trip_as_bytes_not_str() -> None:
    value = [b"\x00\xff\x80", "\x00\xff", b""]
    back = roundtrip(value)
    assert same(back, value)
    assert type(back[0]) is bytes
    assert type(back[1]) is str


def test_nested_structures_round_trip() -> None:
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    value = {
        "id": uuid4(),
        "when": moment,
        "parents": ("E1", "M1"),
        "deep": {"a": [{"b": (b"x", None, True, -1, 2.5)}], "c": {}},
        "big": 2**64 - 1,
        "small": -(2**63),
    }
    assert same(roundtrip(value), value)


def test_str_enum_values_are_stored_as_plain_str() -> None:
    value = {"kind": Kind.FACT, "statuses": [Status.STALE], Kind.PLAN: "key"}
    back = roundtrip(value)
    assert back == {"kind": "fact", "statuses": ["STALE"], "plan": "key"}
    assert type(back["kind"]) is str
    assert type(back["statuses"][0]) is str
    assert all(type(k) is str for k in back)


def test_int_enum_values_are_stored_as_plain_int() -> None:
    class Level(IntEnum):
        HIGH = 3

    back = roundtrip([Level.HIGH])
    assert back == [3]
    assert type(back[0]) is int


def test_unknown_types_are_refused() -> None:
    with pytest.raises(TypeError, match="set"):
        transcoder.encode({1, 2})


# -- property test -----------------------------------------------------------------

offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.uuids()
    | st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=offsets
    )
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.lists(children, max_size=5).map(tuple)
        | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)


@given(values)
def test_any_nested_value_round_trips_with_its_types(value: Any) -> None:
    back = roundtrip(value)
    assert same(back, value)
    if isinstance(value, datetime):
        assert back.utcoffset() == value.utcoffset()


@given(st.dictionaries(st.text(max_size=8), values, max_size=8))
def test_canonical_ignores_dict_key_order(value: dict[str, Any]) -> None:
    reordered = dict(reversed(list(value.items())))
    assert canonical(reordered) == canonical(value)


# -- canonical ---------------------------------------------------------------------


def test_canonical_treats_dict_key_order_as_equal() -> None:
    a = {"a": 1, "b": {"x": [1, 2], "y": None}}
    b = {"b": {"y": None, "x": [1, 2]}, "a": 1}
    assert canonical(a) == canonical(b)


def test_canonical_keeps_one_float_one_and_true_apart() -> None:
    forms = [canonical(1), canonical(1.0), canonical(True)]
    assert len(set(forms)) == 3
    assert canonical({"k": 1}) != canonical({"k": True})
    assert canonical([1]) != canonical([1.0])


def test_canonical_keeps_different_values_apart() -> None:
    assert canonical({"a": 1}) != canonical({"a": 2})
    assert canonical({"a": 1}) != canonical({"b": 1})
    assert canonical("1") != canonical(1)
    assert canonical(b"x") != canonical("x")


def test_a_large_output_does_not_keep_the_reused_packer_s_buffer() -> None:
    """Packers are reused per thread; after a large output the packer is replaced,
    so a huge value (one refused as too large, say) is not held on to."""
    from ledger import serialization

    serialization.pack({"small": 1})
    before = serialization._local.packers[0]
    serialization.pack({"small": 2})
    assert serialization._local.packers[0] is before
    big = b"x" * (serialization._KEEP_BUFFER + 1)
    assert serialization.unpack(serialization.pack({"big": big})) == {"big": big}
    assert serialization._local.packers[0] is not before


def test_packing_after_a_refused_object_gives_the_same_bytes() -> None:
    """A packer that failed half-way is replaced: later output is not corrupted."""
    from ledger.serialization import pack

    expected = pack({"a": (1, 2), "t": datetime(2026, 1, 1, tzinfo=UTC)})
    with pytest.raises(TypeError):
        pack({"a": (1, 2), "naive": datetime(2026, 1, 1)})
    assert pack({"a": (1, 2), "t": datetime(2026, 1, 1, tzinfo=UTC)}) == expected


def test_canonical_bytes_keep_a_dict_apart_from_a_list() -> None:
    from ledger.serialization import canonical

    assert canonical({}) != canonical([])
    assert canonical({"a": 1}) != canonical([["a", 1]])
    assert canonical({"a": 1, "b": [2]}) == canonical({"b": [2], "a": 1})
    assert canonical(1) != canonical(True) != canonical(1.0)
