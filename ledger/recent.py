"""What an engine knows of the ledger from its own write transactions (internal)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger.domain import Record
from projections.base import Cursor

if TYPE_CHECKING:
    from ledger.engine import Write

#: How many aggregates' events :class:`Recent` keeps before starting afresh.
RECENT = 10_000


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
