"""The one msgpack transcoder used for every stored event.

msgpack has no UUID, datetime or tuple; they travel as extension types so a
decoded event equals the event that was encoded:

====  ==============================================================
code  payload
====  ==============================================================
1     UUID: its 16 bytes
2     aware datetime: msgpack ``[microseconds since epoch (UTC), utc offset seconds]``
3     tuple: a msgpack array of its items
====  ==============================================================

``strict_types`` keeps tuples distinct from lists; ``str``/``int`` subclasses
(``StrEnum`` members) are stored as their plain value.

Every event's stored state ends with :data:`SALT`: 16 random bytes, dropped
again when the state is decoded. A Merkle leaf hashes the stored state, and a
proof or bundle shows the leaf hash of an event whose bytes it withholds (an event
naming a record in a scope the reader cannot see); without the salt, whoever knew
the rest of such an event (its position, record, time, event type) could confirm
guesses of what is withheld (a hidden record's id, a revocation's reason, who
revoked) by hashing each guess. Events stored before the salt carry none.
"""

from __future__ import annotations

import enum
import os
import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import msgpack
from eventsourcing.persistence import Transcoder

EXT_UUID = 1
EXT_DATETIME = 2
EXT_TUPLE = 3

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: The stored state field holding an event's salt (not a field of any event).
SALT = "_salt"


def new_salt() -> bytes:
    """An event's salt: 16 bytes from the operating system's random source."""
    return os.urandom(16)


def datetime_to_micros(value: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (exact)."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def micros_to_datetime(micros: int, offset_seconds: int = 0) -> datetime:
    """The aware datetime for microseconds since the epoch, in the given offset."""
    if offset_seconds == 0:
        return _EPOCH + timedelta(0, 0, micros)
    tz = timezone(timedelta(seconds=offset_seconds))
    return (_EPOCH + timedelta(microseconds=micros)).astimezone(tz)


def _ext(code: int, data: bytes) -> msgpack.ExtType:
    # ExtType's own constructor re-checks its arguments in Python; ours are right.
    ext: msgpack.ExtType = tuple.__new__(msgpack.ExtType, (code, data))
    return ext


_EMPTY_TUPLE = _ext(EXT_TUPLE, msgpack.packb([]))


def _default(obj: Any) -> Any:
    # Exact types first (the common case, and cheap); subclasses below.
    kind = type(obj)
    if kind is tuple:
        if not obj:
            return _EMPTY_TUPLE
        if all(type(item) is str for item in obj):
            return _ext(EXT_TUPLE, _plain_pack(list(obj)))
        return _ext(EXT_TUPLE, pack(list(obj)))
    if kind is datetime:
        offset = obj.utcoffset()
        if offset is not None:
            payload = [datetime_to_micros(obj), int(offset.total_seconds())]
            return _ext(EXT_DATETIME, _plain_pack(payload))
    if kind is UUID:
        return _ext(EXT_UUID, obj.bytes)
    return _default_subclass(obj)


def ext_of(obj: Any) -> Any:
    """What the transcoder stores in place of a tuple, an aware datetime or a UUID
    (the extension value its packer asks for); anything else as its packer would
    convert it."""
    return _default(obj)


def _default_subclass(obj: Any) -> Any:
    if isinstance(obj, UUID):
        return msgpack.ExtType(EXT_UUID, obj.bytes)
    if isinstance(obj, datetime):
        offset = obj.utcoffset()
        if offset is None:
            raise TypeError(f"naive datetime {obj.isoformat()} cannot be stored")
        payload = [datetime_to_micros(obj), int(offset.total_seconds())]
        return msgpack.ExtType(EXT_DATETIME, msgpack.packb(payload))
    if isinstance(obj, tuple):
        return msgpack.ExtType(EXT_TUPLE, pack(list(obj)))
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, dict):
        return dict(obj)
    if isinstance(obj, list):
        return list(obj)
    raise TypeError(f"cannot serialise object of type {type(obj).__name__}")


#: Per thread: packers reused across calls (building one costs more than packing
#: a small event), one per nesting level, because ``_default`` packs tuples with
#: ``pack`` while the outer packer is still busy.
_local = threading.local()


#: Packers whose output was larger than this are replaced (their buffers shrink).
_KEEP_BUFFER = 64 * 1024


def _plain_pack(obj: Any) -> bytes:
    """Pack plain data (no extension types) with this thread's plain packer."""
    packer: msgpack.Packer | None = getattr(_local, "plain", None)
    if packer is None:
        packer = _local.plain = msgpack.Packer(use_bin_type=True)
    data: bytes = packer.pack(obj)
    if len(data) > _KEEP_BUFFER:
        _local.plain = None
    return data


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_UUID:
        return UUID(bytes=data)
    if code == EXT_DATETIME:
        micros, offset = msgpack.unpackb(data)
        return micros_to_datetime(micros, offset)
    if code == EXT_TUPLE:
        return tuple(unpack(data))
    return msgpack.ExtType(code, data)


def pack(obj: Any) -> bytes:
    """Serialise ``obj`` with the ledger's msgpack conventions."""
    packers: list[msgpack.Packer] | None = getattr(_local, "packers", None)
    if packers is None:
        packers = _local.packers = []
    depth: int = getattr(_local, "depth", 0)
    if depth == len(packers):
        packers.append(msgpack.Packer(default=_default, strict_types=True, use_bin_type=True))
    _local.depth = depth + 1
    try:
        data: bytes = packers[depth].pack(obj)
    except BaseException:
        # The packer may hold half an object: start the next call with a new one.
        packers[depth] = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True)
        raise
    finally:
        _local.depth = depth
    if len(data) > _KEEP_BUFFER:
        # A packer's buffer stays as large as its largest output; do not keep a
        # huge one (say, a value about to be refused as too large) for good.
        packers[depth] = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True)
    return data


def unpack(data: bytes) -> Any:
    """Deserialise bytes written by :func:`pack`."""
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


def canonical(obj: Any) -> bytes:
    """Bytes that are equal exactly when two claim values are the same claim.

    Dict keys are sorted so ``{"a": 1, "b": 2}`` and ``{"b": 2, "a": 1}`` agree,
    while ``1``, ``1.0`` and ``True`` stay different claims, and so do a dict and a
    list (``{}`` and ``[]``; ``{"a": 1}`` and ``[["a", 1]]``): a dict stays a
    msgpack map, a list an array.
    """

    def norm(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: norm(v) for k, v in sorted(value.items())}
        if isinstance(value, (list, tuple)):
            return [norm(v) for v in value]
        return value

    return pack(norm(obj))


class MsgpackTranscoder(Transcoder):
    """eventsourcing transcoder that stores event state as msgpack."""

    def encode(self, obj: Any) -> bytes:
        """Serialise an event's state (a mapping of its fields), with a new
        :data:`SALT` after its fields."""
        if type(obj) is dict:
            return pack({**obj, SALT: new_salt()})
        return pack(obj)

    def decode(self, data: bytes) -> Any:
        """Deserialise an event's state, without its :data:`SALT`."""
        state = unpack(data)
        if type(state) is dict:
            state.pop(SALT, None)
        return state
