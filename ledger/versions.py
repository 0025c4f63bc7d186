"""Which earlier record a new version replaces, found for the caller: the previous
capture of a source captured again (:func:`previous_capture`), and the newest
version of a claim a LangGraph put replaces (:func:`newest_version`,
``proposals.NewestOf``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledger import rules
from ledger.access import Role
from ledger.caller import Caller
from ledger.domain import Status
from ledger.errors import InvalidParentError, LedgerError
from ledger.serialization import canonical, unpack
from ledger.validation import check_claim_key
from projections import claims as claim_queries
from projections.base import Cursor


def previous_capture(
    caller: Caller,
    c: Cursor,
    scope: object,
    claim_key: object,
    evidence: Mapping[str, Any],
    value: Any,
) -> str | None:
    """The newest ACCEPTED capture of ``evidence['uri']`` under ``(scope,
    claim_key)`` whose bytes or value differ (or, while none of its captures is
    accepted, the newest CANDIDATE one), as the caller is shown its id: a
    re-capture supersedes it, so the claim answers with the newest version instead
    of a conflict between two. A capture of the same bytes and value replaces
    nothing (what rests on the earlier one stays VALID); a later capture of other
    bytes replaces both."""
    claim_key = _claim(scope, claim_key)
    if not isinstance(scope, str) or claim_key is None:
        return None  # prepare names what is wrong
    if not caller.roles(c, scope):
        return None  # prepare refuses the proposal without revealing anything
    pending = None
    for record_id, status, same in reversed(
        captures_of_source(c, caller, scope, claim_key, evidence, value)
    ):
        if status == Status.STALE:
            continue
        if status == Status.ACCEPTED:
            pending = None if same else record_id  # same bytes: nothing to replace
            break
        if pending is None and not same:
            pending = record_id
    # A key qualified by its scope (an id taken in a scope the caller cannot see)
    # is named as the caller is shown it: supersedes takes names, not keys.
    return None if pending is None else caller.names(c, (pending,)).get(pending, pending)


def captures_of_source(
    c: Cursor,
    caller: Caller,
    scope: str,
    claim_key: str,
    evidence: Mapping[str, Any],
    value: Any,
) -> list[tuple[str, str, bool]]:
    """(key, status, same content) of the live captures of ``evidence['uri']``
    under ``(scope, claim_key)``, in proposal order; same content: the bytes of
    ``evidence`` and the claim ``value``, by canonical bytes. Only the claim's
    captures are read, not the values of its other records (any number of which
    another proposer may have put under the claim key)."""
    found = claim_queries.captures_of_claim(c, caller.engine.dialect, scope, claim_key)
    out = []
    for record_id, status, stored, stored_value in found:
        held = {} if stored is None else unpack(stored)
        if not rules.same_source(held.get("uri"), evidence.get("uri")):
            continue
        same = held.get("content_hash") == evidence.get("content_hash") and _same_value(
            stored_value, value
        )
        out.append((str(record_id), str(status), same))
    return out


def _same_value(stored: bytes | None, value: Any) -> bool:
    """Whether a stored (packed) value is the claim ``value``, by canonical bytes."""
    try:
        return stored is not None and canonical(unpack(stored)) == canonical(value)
    except (TypeError, ValueError):  # a value ``prepare`` refuses: names it then
        return False


class NewerVersionError(InvalidParentError):
    """A put of a claim its putter found with no usable version, refused: a version
    was accepted after it looked (:class:`~ledger.proposals.NewestOf`'s
    ``unseen_after``)."""


def newest_version(
    caller: Caller,
    c: Cursor,
    scope: object,
    claim_key: object,
    kind: str,
    unseen_after: int | None = None,
) -> str | None:
    """The record :class:`NewestOf` means, read with ``c`` (as the caller is shown
    its id), or None.

    Raises:
        AccessDeniedError: the caller holds roles in ``scope`` but not ``read``
            (which versions the claim has is read).
        NewerVersionError: ``unseen_after`` is a position, and a version of the
            claim was accepted after it (one the putter could not have read).
    """
    claim_key = _claim(scope, claim_key)
    if not isinstance(scope, str) or claim_key is None:
        return None  # prepare names what is wrong
    roles = caller.roles(c, scope)
    if not roles:
        return None  # prepare refuses the proposal without revealing anything
    if Role.READ.value not in roles:
        raise caller.denied(scope, Role.READ, "propose")
    d = caller.engine.dialect
    # A version usable now that the putter could not have been shown (accepted after
    # it looked); a candidate, which no read shows, or a version going STALE, is not.
    if unseen_after is not None and claim_queries.accepted_after(
        c, d, scope, claim_key, kind, unseen_after
    ):
        raise NewerVersionError(
            f"propose refused: a version of claim {claim_key!r} in scope {scope!r} was "
            f"accepted after log position {unseen_after}, where it had none usable"
        )
    rows = claim_queries.newest_live_of_claim(c, d, scope, claim_key, kind)
    for statuses in ((Status.ACCEPTED, Status.STALE), (Status.CANDIDATE,)):
        live = [row for row in rows if row[1] in statuses]
        if live:
            key = str(max(live, key=lambda r: (r[2], r[3]))[0])
            return caller.names(c, (key,)).get(key, key)
    return None


def _claim(scope: object, claim_key: object) -> str | None:
    """``claim_key`` as prepare normalises it; None where prepare will name what is
    wrong (a scope or claim key that is no text, or a claim key it refuses)."""
    if not isinstance(scope, str) or not isinstance(claim_key, str):
        return None
    try:
        return check_claim_key(claim_key)
    except LedgerError:
        return None
