"""The command pipeline, written once.

Every command that changes the ledger is::

    validate its input (before anything is read)
      → one write transaction, writers' lock first (``Engine.transact``)
      → authenticate the token and read the subject's roles
      → load what the decision needs (visible row, aggregate, dependencies)
      → the domain decides (``Record.accept`` …, the ``check_…`` rules)
      → append the events with their view rows, leaves and snapshots
      → commit; a database locked by other writers retries the whole command

Because the decision is made under the lock, nothing it read can change before
its events are stored: no separate read phase, no conditional append. A command
module declares only its own steps: :func:`command` for any command,
:func:`on_record` for one that acts on an existing record. Their :func:`step`
and :func:`on_record_decision` let two principals' steps share one transaction
(``Session.propose(..., accepted_by=...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from ledger.access import Role
from ledger.caller import Caller
from ledger.domain import Record
from ledger.engine import Write
from ledger.errors import InvalidTransitionError, LedgerError, retold
from ledger.validation import ID_PATTERN
from projections.base import Cursor

T = TypeVar("T")


@dataclass(frozen=True)
class Decision(Generic[T]):
    """What a command decided: the events to append, and its result given the log
    position of the last one."""

    events: Sequence[Any]
    result: Callable[[int], T]
    snapshots: Sequence[tuple[str, bytes]] = field(default=())
    #: Current view rows the command read under the lock (after anything appended
    #: earlier in its transaction), by aggregate id (hex): the views start from
    #: them instead of reading them again.
    known: Mapping[str, Any] = field(default_factory=dict)


def command(
    caller: Caller,
    name: str,
    decide: Callable[[Cursor, datetime], Decision[T]],
    about: object = None,
) -> T:
    """Run a command: ``decide(c, now)`` reads what it needs with ``c`` (the token
    already checked and the roles read, under the writers' lock) and returns its
    :class:`Decision`, which is appended in the same transaction. ``about``: the
    id of the record whose current row it reads first (``Engine.transact``), as
    the caller gave it (anything but a plain record id is ignored).

    Raises:
        ReadOnlyError: the caller is an as-of session.
        AuthenticationError: the token is no longer valid.
        ConcurrencyError: the database stayed locked by other writers.
    """
    caller.writable(name)
    return caller.engine.transact(step(caller, decide), plain_id(about))


def plain_id(value: object) -> str | None:
    """``value`` if it is a plain record id (as ``check_id`` accepts), else None:
    what a command may ask ``Engine.transact`` to read with the lock (anything
    else is checked, and refused, by the command itself)."""
    return value if isinstance(value, str) and ID_PATTERN.fullmatch(value) else None


def step(
    caller: Caller,
    decide: Callable[[Cursor, datetime], Decision[T]],
    now: datetime | None = None,
) -> Callable[[Write], T]:
    """What :func:`command` runs in its write transaction: the caller's token
    checked with the transaction's cursor, ``decide`` run (at ``now``, else the
    ledger's clock) and its events appended. Steps of several callers may share
    one transaction and one time (a proposal and its acceptance:
    :func:`ledger.transitions.propose_accepted`)."""

    def work(w: Write) -> T:
        with caller.authenticated(w.c):
            try:
                decision = decide(w.c, caller.engine.now() if now is None else now)
            except LedgerError as exc:
                # A refusal names a record as the caller is shown it.
                raise caller.refusal(w.c, exc) from exc.__cause__
            position = w.append(decision.events, decision.snapshots, decision.known)
        return decision.result(position)

    return work


def on_record(
    caller: Caller,
    name: str,
    role: Role,
    record_id: object,
    decide: Callable[[Cursor, Any, Record, datetime], Decision[T]],
) -> T:
    """Run a command on one existing record: the record must be visible to the
    caller, who must hold ``role`` in its scope; ``decide(c, row, record, now)``
    gets its view row as the caller is shown it (naming no record hidden from
    it) and its aggregate; the views continue from the row as stored.

    Raises:
        UnknownRecordError: no such record, or not visible to the caller.
        AccessDeniedError: no ``role`` in the record's scope.
    """
    decision = on_record_decision(caller, name, role, record_id, decide)
    return command(caller, name, decision, record_id)


def on_record_decision(
    caller: Caller,
    name: str,
    role: Role,
    record_id: object,
    decide: Callable[[Cursor, Any, Record, datetime], Decision[T]],
) -> Callable[[Cursor, datetime], Decision[T]]:
    """The decision :func:`on_record` hands :func:`command` (or :func:`step`):
    the record's visibility and ``role`` checked, its row and aggregate loaded,
    then ``decide``."""

    def decide_on_record(c: Cursor, now: datetime) -> Decision[T]:
        stored = caller.visible_row(c, record_id, role, name)
        record = caller.engine.load_record(c, stored["record_id"], stored)
        try:
            decision = decide(c, caller.redacted(c, stored), record, now)
        except InvalidTransitionError as exc:
            raise decided_before(caller, c, stored["scope"], record, exc) from exc.__cause__
        # The views continue from the row as stored, not as the caller is shown it.
        known = {**decision.known, record.id.hex: stored}
        return Decision(decision.events, decision.result, decision.snapshots, known)

    return decide_on_record


def decided_before(
    caller: Caller, c: Cursor, scope: str, record: Record, exc: InvalidTransitionError
) -> InvalidTransitionError:
    """``exc``, a refusal for the record's status, saying who changed that status and
    when (as a reviewer who lost a race asks) to a caller holding ``audit`` in its
    scope, who may read as much in its audit trail; ``exc`` itself to any other, and
    after a STALE marking (whose maker, an ancestor's revoker, may act in a scope the
    caller cannot see: ``Record.changed`` is None then)."""
    said = str(exc)
    if record.changed is None or not said.startswith(
        f"record {record.record_id!r} is {record.status.value}; "
    ):
        return exc
    if Role.AUDIT.value not in caller.roles(c, scope):
        return exc
    actor, at = record.changed
    return retold(exc, f"{said} ({record.status.value} since {at.isoformat()}, by {actor!r})")


def done(position: int) -> None:
    """The result of a command that returns nothing."""
    del position
