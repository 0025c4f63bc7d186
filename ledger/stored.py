"""Stored rows of ``Record.Proposed`` events, assembled directly.

eventsourcing's mapper turns an event into a ``StoredEvent`` by resolving the
event class's topic, copying the event's ``__dict__``, popping the originator
fields, adding ``class_version`` and encoding the rest, its msgpack packer
calling back into Python for every datetime and tuple. A bulk write does that
for every record, so :func:`stored_proposal` builds the same row for a
``Record.Proposed`` event without it: the state map is assembled in the order
the mapper gives it, with the extension values the transcoder would make
(constant ones, such as an empty tuple, made once) and the salt it adds last,
and encoded once.

The bytes are identical to the mapper's given the same salt (``tests/test_stored.py``
compares them for a range of proposals and reads them back through the mapper), so the log
does not record which path wrote an event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.utils import get_topic

from ledger import serialization
from ledger.domain import Record
from ledger.serialization import SALT, MsgpackTranscoder, ext_of, pack

_PROPOSED = Record.Proposed
_TOPIC = get_topic(_PROPOSED)
_CLASS_VERSION = _PROPOSED.class_version
#: The fields of a ``Record.Proposed`` in declaration order (its ``__dict__``'s).
_FIELDS = tuple(f.name for f in dataclasses.fields(_PROPOSED))


def stored_proposal(event: Any) -> StoredEvent:
    """The ``StoredEvent`` eventsourcing's mapper (with the ledger's transcoder,
    no compressor or cipher) makes of the ``Record.Proposed`` ``event``, without
    the mapper. The event's ``__dict__`` must hold its fields in declaration
    order (as every ``Record.Proposed`` the ledger builds does): the mapper
    encodes them in that order."""
    d = event.__dict__
    expires = d["expires"]
    state = pack(
        {
            "timestamp": ext_of(d["timestamp"]),
            "originator_topic": d["originator_topic"],
            "record_id": d["record_id"],
            "scope": d["scope"],
            "claim_key": d["claim_key"],
            "kind": d["kind"],
            "value": d["value"],
            "actor": d["actor"],
            "expires": None if expires is None else ext_of(expires),
            "parents": ext_of(d["parents"]),
            "observed": ext_of(d["observed"]),
            "conditions": d["conditions"],
            "evidence": d["evidence"],
            "run_id": d["run_id"],
            "supersedes": d["supersedes"],
            "class_version": _CLASS_VERSION,
            SALT: serialization.new_salt(),
        }
    )
    stored: StoredEvent = object.__new__(StoredEvent)
    object.__setattr__(
        stored,
        "__dict__",
        {
            "originator_id": d["originator_id"],
            "originator_version": d["originator_version"],
            "topic": _TOPIC,
            "state": state,
        },
    )
    return stored


def plain(mapper: Mapper[Any]) -> bool:
    """Whether ``mapper`` only transcodes with the ledger's msgpack transcoder (no
    compressor, no cipher): then stored state is exactly ``pack`` of the event's."""
    return (
        mapper.compressor is None
        and mapper.cipher is None
        and type(mapper.transcoder) is MsgpackTranscoder
    )


def stored_events(mapper: Mapper[Any], events: Sequence[Any]) -> list[StoredEvent]:
    """The stored rows of ``events``: proposals assembled directly, the rest
    (and any proposal whose fields are not in declaration order) through ``mapper``;
    all of them through ``mapper`` if it does more than the ledger's transcoding
    (a compressor or a cipher configured through eventsourcing's environment)."""
    if not plain(mapper):
        return [mapper.to_stored_event(e) for e in events]
    return [
        stored_proposal(e)
        if type(e) is _PROPOSED and tuple(e.__dict__) == _FIELDS
        else mapper.to_stored_event(e)
        for e in events
    ]
