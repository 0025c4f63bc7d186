"""Who held which role where, and which tokens, as the log says: the ``Principal``
events folded (:class:`AccessState`), and a principal's roles read from its own
events alone (:func:`access_from_log`), the access view serving only as an index.
The authorization replay (:mod:`ledger.authorization`) folds the same state over
the whole log."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger.domain import Principal, principal_uuid
from ledger.errors import AuthenticationError, CorruptEventError, UnknownTokenError
from ledger.serialization import datetime_to_micros
from projections import access as access_view
from projections.base import Cursor

if TYPE_CHECKING:
    from ledger.engine import Engine

#: The actor of every event the embedding host's ``Admin`` handle appends.
ADMIN = "admin"


@dataclass
class TokenState:
    """One token as the log says: whose, since when, until when."""

    subject: str
    issued_position: int
    expires: int | None  # microseconds since the epoch
    revoked_position: int | None = None


@dataclass
class AccessState:
    """Who held which role where, and which tokens, after the events folded so far."""

    subjects: dict[UUID, str] = field(default_factory=dict)
    roles: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    tokens: dict[str, TokenState] = field(default_factory=dict)
    tokens_of: dict[str, list[TokenState]] = field(default_factory=dict)

    def holds(self, subject: str, scope: str, role: str) -> bool:
        """True if ``subject`` holds ``role`` in ``scope``."""
        return role in self.roles.get(subject, {}).get(scope, ())

    def holds_anywhere(self, subject: str, roles: tuple[str, ...]) -> bool:
        """True if ``subject`` holds one of ``roles`` in some scope."""
        return any(held & set(roles) for held in self.roles.get(subject, {}).values())

    def has_valid_token(self, subject: str, at_micros: int) -> bool:
        """True if a token of ``subject`` is unrevoked and unexpired at ``at_micros``."""
        return any(
            token.revoked_position is None and (token.expires is None or at_micros < token.expires)
            for token in self.tokens_of.get(subject, ())
        )

    def apply(self, position: int, event: Any) -> str | None:
        """Fold one ``Principal`` event; returns a problem, or None."""
        if isinstance(event, Principal.Registered):
            self.subjects[event.originator_id] = event.subject
            return None
        subject = self.subjects.get(event.originator_id)
        kind = type(event).__name__
        if subject is None:
            return f"{kind} at position {position} belongs to no registered principal"
        actor = getattr(event, "actor", None)
        problem = None
        if actor != ADMIN:
            problem = (
                f"{kind} for {subject!r} at position {position} was appended by {actor!r}, "
                f"not by the admin"
            )
        if isinstance(event, Principal.Granted):
            held = self.roles.setdefault(subject, {}).setdefault(event.scope, set())
            held.update(event.roles)
        elif isinstance(event, Principal.GrantRevoked):
            held = self.roles.setdefault(subject, {}).setdefault(event.scope, set())
            held.difference_update(event.roles)
        elif isinstance(event, Principal.TokenIssued):
            expires = None if event.expires is None else datetime_to_micros(event.expires)
            token = TokenState(subject=subject, issued_position=position, expires=expires)
            self.tokens[event.token_hash] = token
            self.tokens_of.setdefault(subject, []).append(token)
        elif isinstance(event, Principal.TokenRevoked):
            revoked = self.tokens.get(event.token_hash)
            if revoked is None or revoked.subject != subject:
                return f"TokenRevoked at position {position} names a token {subject!r} never held"
            revoked.revoked_position = position
        return problem


def access_from_log(
    engine: Engine, c: Cursor, token_hash: str, at: datetime
) -> dict[str, list[str]]:
    """The roles by scope of the principal holding the token ``token_hash``, from the
    log alone; raises ``AuthenticationError`` unless the log issued that token to
    it and it is unrevoked and unexpired at ``at``.

    The access view (``pl_tokens``) serves only as an index from the token to its
    subject; the subject's ``Principal`` events are read, checked against their
    Merkle leaves and folded, so a forged ``pl_tokens`` or ``pl_grants`` row grants
    nothing. What run-time checks call instead of trusting the view's rows
    (``Caller.authenticate``); reads ``c`` inside the caller's transaction.

    Raises:
        AuthenticationError: the token is unknown to the log, revoked or expired.
        CorruptEventError: a stored event of the principal was not appended by the
            ledger.
    """
    row = access_view.token(c, engine.dialect, token_hash)
    subject = None if row is None else str(row["subject"])
    return subject_access(engine, c, subject, token_hash, at)


def subject_access(
    engine: Engine, c: Cursor, subject: str | None, token_hash: str, at: datetime
) -> dict[str, list[str]]:
    """:func:`access_from_log` of a token said to be ``subject``'s: ``subject``'s
    ``Principal`` events alone are read (vouched by their Merkle leaves) and
    folded, no view. For a subject known beforehand (the administrator's admin
    tokens) no view is read at all, so a view deleted or altered behind the
    ledger's back neither passes nor refuses a token (``verify`` must run on it).

    Raises:
        AuthenticationError: the log issued no such token to ``subject`` (or
            ``subject`` is None), or it is revoked or expired at ``at``.
        CorruptEventError: a stored event of ``subject`` was not appended by the
            ledger.
    """
    state = subject_state(engine, c, subject)
    token = state.tokens.get(token_hash)
    if token is None or token.subject != subject:
        raise UnknownTokenError("token is unknown")
    if token.revoked_position is not None:
        raise AuthenticationError(f"token of {subject!r} was revoked")
    if token.expires is not None and datetime_to_micros(at) >= token.expires:
        raise AuthenticationError(f"token of {subject!r} expired")
    return {
        scope: sorted(roles)
        for scope, roles in sorted(state.roles.get(token.subject, {}).items())
        if roles
    }


def subject_state(engine: Engine, c: Cursor, subject: str | None) -> AccessState:
    """``subject``'s ``Principal`` events alone (vouched by their Merkle leaves),
    folded: its tokens and roles as the log says, no view read.

    Raises:
        CorruptEventError: a stored event of ``subject`` was not appended by the
            ledger, or one is missing.
    """
    notes = (
        [] if subject is None else engine.recorder.select_record_events(c, principal_uuid(subject))
    )
    if notes:
        engine.recorder.vouch(c, notes)
        # Each leaf vouches for its event; none for one deleted with its leaf (a
        # revocation undone): the principal's versions must run 1, 2, 3, … unbroken.
        for expected, note in enumerate(notes, start=1):
            if note.originator_version != expected:
                raise CorruptEventError(
                    f"the log lacks version {expected} of the events of {subject!r}: one was "
                    "deleted from it (provledger verify names it)"
                )
    state = AccessState()
    for note in notes:
        state.apply(note.id, engine.projector.decode(note))
    return state


__all__ = [
    "ADMIN",
    "AccessState",
    "TokenState",
    "access_from_log",
    "subject_access",
    "subject_state",
]
