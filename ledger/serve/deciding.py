"""What a decision made from the console is told when the ledger refused it for
its record's status: the session's own form sent again (as by a double click) is
told it was done already; a decision another came to first says so. And where the
queue shown after a decision goes on: the card after the record decided on."""

from __future__ import annotations

from typing import Any

from ledger import Session, redaction
from ledger.domain import Status
from ledger.errors import InvalidTransitionError, LedgerError, retold
from ledger.serve.sessions import ConsoleSession
from ledger.values import HIDDEN, RecordView


def repeated(
    live: Session,
    session: ConsoleSession,
    decision: str,
    record_id: str,
    done: tuple[Status, ...],
) -> RecordView | None:
    """The record, when a form of ``decision`` the ledger refused for its record's
    status was this session's own sent again (:meth:`ConsoleSession.sent_again`:
    the record is as the first left it, a status of ``done``); None otherwise
    (the refusal stands: another principal decided, the record changed since,
    or the caller may not read it)."""
    try:
        view = live.get(record_id)
    except LedgerError:
        return None
    if view.status not in done or not session.sent_again(decision, view.position):
        return None
    return view


def next_card(groups: list[dict[str, Any]], decided: tuple[str, str] | None) -> str | None:
    """The id of the first card of the queue after the record of the decision just
    made (``decided``: its scope and the id it was proposed as), where a keyboard
    goes on; None if none follows, or no decision was."""
    if decided is None:
        return None
    # Compared as the queue is ordered: by the ids the records were proposed as.
    for group in groups:
        for card in group["candidates"]:
            if (group["scope"], redaction.bare(card.view.id)) > decided:
                return str(card.view.id)
    return None


#: The statuses a decision on a candidate (accept, reject), or a revocation, is made in.
UNDECIDED = (Status.CANDIDATE,)
REVOCABLE = (Status.CANDIDATE, Status.ACCEPTED, Status.STALE)


def came_first(
    live: Session,
    session: ConsoleSession,
    record_id: str,
    exc: InvalidTransitionError,
    open_to: tuple[Status, ...],
) -> InvalidTransitionError:
    """``exc``, refused for the record's status, saying so in the reviewer's words
    when the record left the statuses the form was for (``open_to``) since its
    page was shown: this session's own earlier decision on it came first (a card
    shown before it), or another's did (as with two reviewers on one queue); and
    nothing of this one was written."""
    try:
        view = live.get(record_id)
    except LedgerError:
        return exc
    if view.status in open_to:
        return exc
    if view.status == Status.STALE and view.stale_causes:
        # What it rests on was withdrawn under it (whether or not another
        # reviewer accepted it first): said as what the reviewer can act on.
        cause = view.stale_causes[-1]
        what = (
            "a record it rests on, outside your scopes,"
            if cause.cause == HIDDEN
            else f"{cause.cause}, which it rests on,"
        )
        how = "was revoked" if cause.superseded_by is None else "was superseded"
        return retold(
            exc, f"{exc}: it is STALE now ({what} {how}), and nothing of yours was written"
        )
    mine = session.made(record_id, view.position)
    first = "another decision" if mine is None else f"your own {_DID.get(mine, mine)} of it"
    return retold(exc, f"{exc}: {first} came first, and nothing of yours was written")


#: A decision's verb ("accept M1") as its noun.
_DID = {
    "accept": "acceptance",
    "reject": "rejection",
    "revoke": "revocation",
    "revalidate": "revalidation",
}


def done_already(record_id: str, status: Status, did: str) -> str:
    """What a decision sent again is told: what the record is, and that the first
    sending did it."""
    return (
        f"{record_id} is {status}: you {did} it already, and sending the form again "
        "changed nothing."
    )
