"""What an engine knows of the ledger from its own write transactions (internal):
what they wrote, while nobody else writes (:class:`Recent`), and aggregates with
long histories as last committed (:class:`Folded`)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger.domain import Record
from projections.base import Cursor

if TYPE_CHECKING:
    from ledger.engine import Write

#: How many aggregates' events :class:`Recent` keeps before starting afresh.
RECENT = 10_000
#: An aggregate folded from at least this many events is kept by :class:`Folded`
FOLD_FROM = 32
#: and this many such aggregates at most (the oldest kept is let go first).
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
        self.tokens: dict[str, tuple[Any, dict[str, list[str]]]] = {}

    def forget(self) -> None:
        """Know nothing (the next write transaction reads everything again)."""
        self.done = None
        self.events.clear()
        self.tokens.clear()

    def learn(self, appended: Sequence[tuple[int, Any]], done: dict[str, int] | None) -> None:
        """Remember a committed transaction's appended (position, event)s."""
        self.done = done
        known = self.events
        if len(known) > RECENT:
            known.clear()
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
        """A copy of the aggregate as kept (None: not kept)."""
        found = self.kept.get(oid)
        return None if found is None else fork(found)

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
