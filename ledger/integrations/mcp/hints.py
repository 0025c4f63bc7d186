"""What a refusal says to do next, over MCP: the ledger's message stays as the
library words it, and a clause after it says what a model can do from here (it
cannot open a session, read the documentation or see its own grants).

A hint is keyed by the error's class and, where the class alone does not say
it, by what the call was (a write, a decision on a record) and by what the
ledger holds now, looked up as the caller (so it names only the caller's own
scopes and records it may read).
"""

from __future__ import annotations

import re
from typing import Literal

from ledger import Session
from ledger.domain import NEEDS_BASIS, Kind, Status
from ledger.errors import (
    AccessDeniedError,
    AuthenticationError,
    ConcurrencyError,
    InvalidIdError,
    InvalidParentError,
    InvalidTransitionError,
    LedgerError,
    NaiveDatetimeError,
    SelfApprovalError,
)
from ledger.integrations.mcp.schemas import ID_WORDS
from ledger.validation import NAMES_LISTED
from ledger.values import RecordView

__all__ = ["NEW_RUN", "Writing", "next_step", "superseding", "unreadable_read"]

#: What a call writes, as far as a hint cares: a new record (which a retry may
#: name by its ``id``), or a decision on one.
Writing = Literal["record", "decision"]

#: How a model gets a new run: it cannot start an MCP session itself.
NEW_RUN = "ask the operator to restart this MCP server (a new session starts a new run)"

#: The library's refusal of a dependency an acceptance waits for.
_WAITING = re.compile(r"dependency '([^']+)' of '([^']+)' is CANDIDATE\b")
#: The library's refusal of a revalidation resting on a dependency no longer usable
#: (a SUPERSEDED one's refusal says what to do itself).
_UNUSABLE = re.compile(
    r"^revalidate refused: dependency '([^']+)' of '([^']+)' "
    r"(is STALE|is REVOKED|is REJECTED|expired at|is unusable: ancestor)"
)

#: The tail of the library's refusal of a new version resting on the old one,
#: written for a caller that can open a run (it names "a new MCP session").
_NEW_RUN_TAIL = (
    ": capture or propose it again in a run that has not, such as a new MCP session, "
    "LangGraph thread or session.run())"
)

#: The statuses no command leaves that no newer version replaces (as SUPERSEDED's does).
_FINAL = (Status.REJECTED, Status.REVOKED)


def next_step(
    exc: LedgerError,
    session: Session | None = None,
    record_id: str | None = None,
    writing: Writing | None = None,
) -> str:
    """The clause that follows ``exc``'s message in a tool error ("; …"), or "".

    ``session``: the caller's (looked up for the scopes it holds roles in, and
    the status of ``record_id``, the record a decision was about); ``writing``:
    what the call writes, if anything."""
    hint = _hint(exc, session, record_id, writing)
    return f"; {hint}" if hint else ""


def _hint(
    exc: LedgerError, session: Session | None, record_id: str | None, writing: Writing | None
) -> str | None:
    if isinstance(exc, SelfApprovalError):
        if " and may not reject it" in str(exc):  # withdrawing one's own is no approval
            return "another approver must decide it, or withdraw it yourself with revoke_memory"
        return "another approver must decide it"
    if isinstance(exc, AuthenticationError):
        return "this server can do nothing more; ask the operator for a new token"
    if isinstance(exc, InvalidIdError):
        return f"an id or a scope is {ID_WORDS}"
    if isinstance(exc, NaiveDatetimeError):
        return "give it with a timezone, e.g. '2026-12-31T00:00:00Z'"
    if isinstance(exc, ConcurrencyError) and writing is not None:
        return _retry(str(exc), writing)
    if isinstance(exc, AccessDeniedError) and session is not None:
        return _held(session)
    if isinstance(exc, InvalidParentError) and record_id is not None:
        return _unusable_dependency(str(exc), session, record_id)
    if isinstance(exc, InvalidTransitionError):
        view = _seen(session, record_id)
        if view is not None and view.status in _FINAL:
            return "that status is final: propose a new record instead"
        if view is not None and view.status == Status.STALE and "; accept needs " in str(exc):
            return _revalidate_instead(view, session)
        if view is not None and view.status == Status.STALE and "; reject needs " in str(exc):
            return (
                "only a candidate is rejected: revoke_memory withdraws a STALE record, "
                "revalidate_memory returns it to use"
            )
    return None


def _retry(text: str, writing: Writing) -> str:
    """When and how to retry a write that gave up waiting for the lock, less what
    the ledger's message says already ("nothing was written — try again")."""
    if "nothing was written" in text and "try again" in text:
        return "in a few seconds, with the same `id`" if writing == "record" else "in a few seconds"
    again = "with the same `id` " if writing == "record" else ""
    return f"nothing was written; retry {again}in a few seconds"


def _unusable_dependency(text: str, session: Session | None, record_id: str) -> str | None:
    """What to do about a dependency of ``record_id`` an acceptance or a
    revalidation found not usable."""
    found = _WAITING.search(text)
    if found is not None and found.group(2) == record_id:
        # A candidate may be rejected instead; a stale record revalidated may not.
        rejecting = f" (or reject {record_id!r})" if text.startswith("accept ") else ""
        return f"accept {found.group(1)!r} first{rejecting}"
    found = _UNUSABLE.search(text)
    view = _seen(session, record_id)
    if found is None or found.group(2) != record_id or view is None:
        return None
    first = f"revalidate {found.group(1)!r} first, or " if found.group(3) == "is STALE" else ""
    return first + _new_basis(view)


def _revalidate_instead(view: RecordView, session: Session | None) -> str:
    """How a STALE record an approver tried to accept returns to use."""
    if session is not None and view.proposer == session.principal:
        return (
            "a STALE record is revalidated (revalidate_memory), not accepted, and by an "
            "approver other than its proposer"
        )
    return (
        "a STALE record is revalidated, not accepted: call revalidate_memory when each "
        "record it rests on is usable again (a revoked or superseded one never is), or "
        + _new_basis(view)
    )


def _new_basis(view: RecordView) -> str:
    """How to revalidate ``view`` on a new basis, as its kind allows."""
    if view.kind == Kind.EVIDENCE:
        return (
            f"revalidate {view.id!r} with parents=[] (evidence names no parents; [] drops "
            "the reads it carries as observed dependencies)"
        )
    none = "" if view.kind in NEEDS_BASIS else "; parents=[] if it rests on nothing it read"
    return (
        f"revalidate {view.id!r} with `parents` naming a new basis of usable records (they "
        f"replace all its dependencies, declared and observed{none})"
    )


def _held(session: Session) -> str | None:
    """The scopes the caller holds roles in, with the roles (its own grants only)."""
    try:
        held = session.grants()
    except LedgerError:
        return None
    if not held:
        return "you hold no role in any scope"
    named = [f"{scope} ({', '.join(roles)})" for scope, roles in sorted(held.items())]
    more = len(named) - NAMES_LISTED
    return (
        "you hold roles in: "
        + ", ".join(named[:NAMES_LISTED])
        + (f" and {more} more scopes" if more > 0 else "")
    )


def _seen(session: Session | None, record_id: str | None) -> RecordView | None:
    """``record_id`` as the caller sees it now (not recorded in a run), if it may."""
    if session is None or record_id is None:
        return None
    try:
        return session.get(record_id)
    except LedgerError:
        return None


def superseding(exc: InvalidParentError) -> InvalidParentError | None:
    """The library's refusal of a new version one of whose dependencies rests on
    the record it supersedes (what this session captured or proposed after it was
    shown that record usable carries the read), worded for a model, which cannot
    open another run itself; None for another refusal."""
    text = str(exc)
    if not text.endswith(_NEW_RUN_TAIL):
        return None
    return InvalidParentError(
        text[: -len(_NEW_RUN_TAIL)]
        + "). From here: propose it with `supersedes` but without that dependency (name "
        "it in the value instead); or "
        + NEW_RUN
        + " and capture the source again there. Without `supersedes` it would CONFLICT with "
        "the old record and still rest on it"
    )


def unreadable_read(exc: InvalidParentError) -> InvalidParentError | None:
    """The library's refusal of an observed dependency the caller can no longer
    read (its grant was withdrawn after this session read it), with how a model
    goes on; None for another refusal."""
    text = str(exc)
    if not ("observed dependency " in text and "not readable by" in text):
        return None
    return InvalidParentError(
        f"{text}: this session read it while you could, and every proposal of the "
        f"session rests on what it read; {NEW_RUN}"
    )
