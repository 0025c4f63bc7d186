"""What an engine knows of the ledger from its own write transactions (internal):
what they wrote, while nobody else writes (:class:`Recent`), and aggregates with
long histories as last committed (:class:`Folded`)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.domain import OriginatorIDError, OriginatorVersionError
from eventsourcing.persistence import MapperDeserialisationError
from eventsourcing.utils import TopicError

from ledger.domain import Record
from ledger.errors import CorruptEventError
from projections.base import Cursor

if TYPE_CHECKING:
    from ledger.engine import Write

#: How many aggregates' events :class:`Recent` keeps before starting afresh,
RECENT = 10_000
#: and how many of their stored bytes (values of up to 1 MiB each would otherwise
#: hold gigabytes in a process that alone writes to its SQLite file; decoded, an
#: event takes several times its stored bytes, up to about 9 for a list of numbers).
RECENT_BYTES = 8 * 1024 * 1024
#: An aggregate folded from at least this many events is kept by :class:`Folded`
FOLD_FROM = 32
#: and this many such aggregates at most (the least recently used is let go first;
#: a run's context keeps its own run besides).
FOLDED = 128


class Recent:
    """What an engine knows of the ledger from its own write transactions, kept
    while no other connection writes (the backend tells, see
    ``LedgerRecorder.others_wrote``): the views' positions, each recently
    written aggregate's events and each token checked. A command then
    needs neither the tracking query nor its aggregate's events read back, nor
    its token's row. Everything is forgotten when another connection wrote, when
    a transaction fails, and around maintenance."""

    def __init__(self) -> None:
        self.cursor: Cursor | None = None  # the write transaction it serves now
        self.write: Write | None = None  # and what that transaction appended so far
        self.done: dict[str, int] | None = None
        self.events: dict[UUID, list[Any]] = {}
        self.size = 0  # the stored bytes of ``events``, about
        self.tokens: dict[str, tuple[Any, dict[str, list[str]]]] = {}

    def forget(self) -> None:
        """Know nothing (the next write transaction reads everything again)."""
        self.done = None
        self.events.clear()
        self.size = 0
        self.tokens.clear()

    def learn(
        self, appended: Sequence[tuple[int, Any]], done: dict[str, int] | None, size: int = 0
    ) -> None:
        """Remember a committed transaction's appended (position, event)s, whose
        stored bytes are ``size`` long."""
        self.done = done
        known = self.events
        if len(known) > RECENT or self.size > RECENT_BYTES:
            known.clear()
            self.size = 0
        self.size += size
        for _, event in appended:
            oid: UUID = event.originator_id
            version = event.originator_version
            chain = known.get(oid)
            if version == 1:
                known[oid] = [event]
            elif chain is not None and chain[-1].originator_version == version - 1:
                chain.append(event)
            else:
                known.pop(oid, None)
            if not isinstance(event, Record.Event):
                self.tokens.clear()  # grants and tokens change with Principal events


class Folded:
    """Aggregates with long histories (a long-lived run, a report delivered many
    times) as last committed, so that a command folds only their newer events,
    not their whole history. Unlike :class:`Recent`, kept whoever writes: stored
    events never change, so what another connection appended since is what is
    stored above the version kept. Only committed states are kept, and only
    copies are handed out (a command changes the aggregate it loads)."""

    def __init__(self) -> None:
        self.kept: dict[UUID, Any] = {}

    def base(self, oid: UUID) -> Any | None:
        """A copy of the aggregate as kept (None: not kept); the one least
        recently asked for is let go first."""
        found = self.kept.pop(oid, None)
        if found is None:
            return None
        self.kept[oid] = found
        return fork(found)

    def keep(self, aggregate: Any) -> None:
        """Keep (a copy of) ``aggregate``, folded from committed events only, if
        its history is long."""
        if aggregate.version < FOLD_FROM:
            return
        kept = self.kept
        if aggregate.id not in kept and len(kept) >= FOLDED:
            del kept[next(iter(kept))]
        kept[aggregate.id] = fork(aggregate)

    def drop(self, oid: UUID) -> None:
        """Keep nothing of ``oid`` (what was kept is not what is stored)."""
        self.kept.pop(oid, None)

    def learn(self, appended: Sequence[tuple[int, Any]]) -> None:
        """Bring what is kept up to a committed transaction's appended events."""
        kept = self.kept
        for _, event in appended:
            found = kept.get(event.originator_id)
            if found is None:
                continue
            if event.originator_version == found.version + 1:
                event.mutate(found)
            else:  # not a successor of the version kept: read it again when needed
                del kept[event.originator_id]


#: What decoding a stored event or applying it may raise on bytes the ledger did
#: not write as they are (``CorruptEventError``).
_UNDECODABLE = (
    MapperDeserialisationError,
    TopicError,
    TypeError,
    AttributeError,
    ValueError,
    KeyError,
    OriginatorVersionError,
    OriginatorIDError,
)


def fold_stored(
    recorder: Any, mapper: Any, folded: Folded, c: Cursor, oid: UUID, found: Any, after: int
) -> tuple[Any, int]:
    """``found`` (None: nothing yet) with the aggregate's stored events of a
    version above ``after`` applied (read with ``c``), and the version it was
    folded on from. ``found`` (kept by :class:`Folded` or a run's context) is
    checked against the stored event of version ``after``, read with the newer
    ones: if that event is missing or another (its time differs), the database
    went back in time under this ledger (a backup restored in place, a failover
    to a standby that lacks the last commits) and the aggregate is replayed from
    its start, so that no command decides on, or numbers its events after, events
    that are no longer stored."""
    try:
        notes = recorder.select_record_events(c, oid, max(after - 1, 0))
        if found is not None:
            kept: Any = None
            if notes and notes[0].originator_version == after:
                kept = mapper.to_domain_event(notes[0])
            if kept is not None and kept.timestamp == found.modified_on:
                notes = notes[1:]
            else:
                folded.drop(oid)
                found, after = None, 0
                notes = recorder.select_record_events(c, oid, 0)
        for note in notes:
            event: Any = mapper.to_domain_event(note)
            found = event.mutate(found)
    except _UNDECODABLE as exc:
        raise CorruptEventError(
            f"aggregate {oid} has a stored event that cannot be decoded: {exc!r}"
        ) from None
    return found, after


def fork(aggregate: Any) -> Any:
    """A copy of ``aggregate`` that events may be applied to without changing it:
    its attributes that events change in place (dicts, lists and sets, such as a
    run's reads or a principal's grants) are copied one level deep."""
    twin = copy.copy(aggregate)
    state = vars(twin)
    for name, value in state.items():
        if isinstance(value, dict | list | set):
            state[name] = copy.copy(value)
    state["_pending_events"] = []  # what it triggers is its own
    return twin
