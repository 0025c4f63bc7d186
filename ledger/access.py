"""Access: roles, tokens (kept only as sha256 hashes) and the admin handle.

Principals come only from :meth:`ledger.Ledger.authenticate`. Grants and tokens
are events on the ``Principal`` aggregate, so who could do what, where and when
is itself in the log.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from ledger.domain import Principal, principal_uuid
from ledger.errors import (
    AuthenticationError,
    InvalidIdError,
    InvalidInputError,
    InvalidRoleError,
    UnknownTokenError,
)
from ledger.serialization import datetime_to_micros, micros_to_datetime
from ledger.validation import check_aware, check_id, quoted
from projections import access as access_view

if TYPE_CHECKING:
    from ledger.access_log import TokenState
    from ledger.engine import Engine, Write
    from ledger.erasure import Erasure
    from projections.base import Cursor


class Role(StrEnum):
    """What a grant allows in a scope."""

    READ = "read"  # read, get, explain, snapshot
    PROPOSE = "propose"  # propose, capture
    APPROVE = "approve"  # accept, reject, revoke, revalidate
    DELIVER = "deliver"  # deliver, corrections_due, issue_correction
    AUDIT = "audit"  # audit, history, prove, as-of export, corrections_due


TOKEN_PREFIX = "plt_"
#: A token as issued (``plt_`` and 43 URL-safe characters), or as much of one as a
#: message quotes (a value is cut to its first 40 characters: ``plt_`` and 36).
_TOKEN_TEXT = re.compile(r"plt_[A-Za-z0-9_\-]{36,}")


def mask_tokens(text: str) -> str:
    """``text`` with any token in it masked as the access log masks it (``plt_…``),
    for messages a server hands back to its callers."""
    return _TOKEN_TEXT.sub(TOKEN_PREFIX + "…", text)


#: The principal admin tokens are issued to. Not a valid subject id, so no grant
#: or principal token can ever name it; its tokens authorize admin commands only.
ADMIN_PRINCIPAL = "@admin"


def hash_token(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


#: How many hex digits of a token's sha256 its fingerprint shows.
FINGERPRINT_LENGTH = 12
#: A fingerprint as given to find a token: 8 to 64 hex digits of its sha256.
_FINGERPRINT = re.compile(r"[0-9a-f]{8,64}")


def token_fingerprint(token: str) -> str:
    """What names a token in listings and revocations without revealing it: the
    first 12 hex digits of its sha256 (``Admin.tokens``, ``provledger token list``)."""
    return fingerprint_of(hash_token(token))


def fingerprint_of(token_hash: str) -> str:
    """The fingerprint of the token whose stored hash is ``token_hash``."""
    return token_hash[:FINGERPRINT_LENGTH]


def subject_named(subject: str) -> str:
    """A token's subject as messages and listings name it: ``admin`` for the
    administrator's (``@admin``)."""
    return Admin.ACTOR if subject == ADMIN_PRINCIPAL else subject


@dataclass(frozen=True)
class TokenInfo:
    """One token as the ledger knows it: never the token itself, only its
    fingerprint (:func:`token_fingerprint`), whose it is, and when it was issued,
    expires and was revoked. ``state`` is ``usable``, ``expired`` or ``revoked``,
    when it was listed. Admin tokens have the subject ``@admin``."""

    fingerprint: str
    subject: str
    issued_at: datetime
    issued_position: int
    expires: datetime | None
    revoked_position: int | None
    state: str


def check_roles(roles: object) -> tuple[str, ...]:
    """Validate a list of role names."""
    if isinstance(roles, (str, bytes, Mapping)) or not isinstance(roles, Iterable):
        # A mapping's keys would be granted whatever its values say ({"approve": False});
        # bytes would be taken as numbers, one a character.
        raise InvalidRoleError(f"roles must be a list of role names, got {quoted(roles)}")
    out: list[str] = []
    for role in roles:
        try:
            out.append(Role(role).value)
        except ValueError:
            allowed = ", ".join(r.value for r in Role)
            raise InvalidRoleError(f"role {quoted(role)} is not one of: {allowed}") from None
    if not out:
        raise InvalidRoleError("roles must name at least one role")
    return tuple(sorted(set(out)))


#: The refusal of an admin token the log never issued to the administrator (or
#: whose issuing event is gone from it: ``provledger verify`` looks).
ADMIN_TOKEN_UNKNOWN = "admin token is unknown"
#: Why, when the ledger's log is empty: its tables were made, nothing written.
_NONE_ISSUED = (
    ": this ledger's log is empty, so no admin token was ever issued here (its tables "
    "were made by an `init` or a `copy` into it that did not finish, or by a library "
    "open); `provledger init` issues the first one, or run the copy again"
)

#: The refusal to revoke a token the ledger never issued (no secret of it, then).
NEVER_ISSUED = "token is unknown: this ledger never issued it"


def check_admin_token(engine: Engine, token: object) -> str:
    """Raise ``AuthenticationError`` unless ``token`` is an admin token that is valid
    now, by the log's own events (a forged ``pl_tokens`` row does not pass); returns
    its hash."""
    if not isinstance(token, str) or not token:
        raise AuthenticationError("admin token must be a non-empty string")
    token_hash = hash_token(token)
    with engine.reading() as c:
        check_admin_hash(engine, c, token_hash)
    return token_hash


def check_admin_hash(engine: Engine, c: Cursor, token_hash: str) -> None:
    """``check_admin_token`` of the token with ``token_hash``, read in ``c``: by the
    administrator's own ``Principal`` events alone (vouched by their Merkle leaves),
    not the access view, so a ``pl_tokens`` row forged, deleted or dropped behind
    the ledger's back neither passes an admin token nor refuses one: ``verify``,
    an admin command, then runs and names the tampering. The view is read only
    to say whose a refused token is."""
    from ledger.access_log import subject_access

    try:
        subject_access(engine, c, ADMIN_PRINCIPAL, token_hash, engine.now())
    except AuthenticationError as exc:
        if not isinstance(exc, UnknownTokenError):
            raise AuthenticationError(
                str(exc).replace(f"token of {ADMIN_PRINCIPAL!r}", "admin token")
                + " (if no admin token is usable any more, `provledger init` issues a new one)"
            ) from None
        # Read first: a view that cannot be read may end the transaction (PostgreSQL).
        empty = engine.recorder.max_position(c) == 0
        owner = _owner_in_view(engine, c, token_hash)
        if owner is None or owner == ADMIN_PRINCIPAL:
            why = _NONE_ISSUED if empty and owner is None else ""
            raise UnknownTokenError(ADMIN_TOKEN_UNKNOWN + why) from None
        raise AuthenticationError(
            f"that token belongs to {owner!r}, not to the administrator (admin "
            "tokens come from `provledger init` and `provledger token issue --admin`, or "
            "Admin.issue_admin_token)"
        ) from None


def _owner_in_view(engine: Engine, c: Cursor, token_hash: str) -> str | None:
    """Whose the token is by the access view (None: no row, or a view that cannot be
    read), for the refusal of a principal's token given as the admin token."""
    try:
        row = access_view.token(c, engine.dialect, token_hash)
    except Exception:  # a view dropped or altered, whatever the driver raises: the
        return None  # token is refused all the same (its transaction is rolled back)
    return None if row is None else str(row["subject"])


@dataclass(frozen=True)
class GrantChange:
    """One role held by a subject in a scope, and when that started and ended."""

    subject: str
    scope: str
    role: Role
    granted_at: datetime
    granted_by: str
    granted_position: int
    revoked_at: datetime | None
    revoked_by: str | None
    revoked_position: int | None


class Admin:
    """The trusted embedding host's handle: grants, tokens, maintenance.

    Only code that opened the ledger gets one (:meth:`ledger.Ledger.admin`). A
    handle got with an admin token is bound to it: every call checks it again, in
    the call's own transaction, so once the token is revoked or expires the handle
    is refused from its next call, as a session is.
    """

    ACTOR = "admin"

    def __init__(self, engine: Engine, token_hash: str | None = None) -> None:
        self._engine = engine
        self._token_hash = token_hash

    def __repr__(self) -> str:
        by = "the host" if self._token_hash is None else "an admin token"
        return f"<Admin of {self._engine.url!r}, trusted as {by}>"

    def _authorize(self, c: Cursor) -> None:
        """Refuse the call unless the handle's admin token (if it has one) is still
        valid, read in ``c``.

        Raises:
            AuthenticationError: the handle's admin token was revoked or has expired.
        """
        if self._token_hash is not None:
            check_admin_hash(self._engine, c, self._token_hash)

    def _append(
        self,
        subject: str,
        event_class: type[Principal.Event],
        *,
        unless: Callable[[Principal | None, Write], bool] | None = None,
        decide: Callable[[Cursor], dict[str, Any]] | None = None,
        **fields: Any,
    ) -> bool:
        """Append one event to the subject's principal (registering it if new), in
        one write transaction; not if ``unless(principal, w)`` holds under the lock.
        ``decide``: read under the lock, it gives more of the event's fields (or
        refuses). Returns whether it was appended."""
        engine = self._engine

        def work(w: Write) -> bool:
            self._authorize(w.c)
            principal: Any = engine.load(w.c, principal_uuid(subject))
            if unless is not None and unless(principal, w):
                return False
            more = {} if decide is None else decide(w.c)
            if principal is None:
                principal = Principal._create(
                    Principal.Registered,
                    id=principal_uuid(subject),
                    timestamp=engine.now(),
                    subject=subject,
                )
            principal.trigger_event(
                event_class, actor=self.ACTOR, timestamp=engine.now(), **fields, **more
            )
            w.append(principal.collect_events())
            return True

        return engine.transact(work)

    def grant(self, subject: str, scope: str, roles: Iterable[str]) -> None:
        """Give ``subject`` the ``roles`` in ``scope``.

        Raises:
            InvalidIdError: subject or scope is not a valid name, or the subject
                is "admin" (reserved for the administrator).
            InvalidRoleError: a role is unknown.
        """
        self._engine.check_open()
        self._engine.check_writable("grant")
        _check_subject(subject)
        check_id(scope, "scope")
        wanted = check_roles(roles)

        self._append(subject, Principal.Granted, scope=scope, roles=wanted)

    def revoke_grant(self, subject: str, scope: str, roles: Iterable[str] | None = None) -> None:
        """Withdraw ``roles`` (all roles if None) of ``subject`` in ``scope``.

        Raises:
            InvalidInputError: the subject holds none of those roles there.
            InvalidIdError: ``subject`` or ``scope`` is no valid id.
            InvalidRoleError: a role is not one of the ledger's roles.
        """
        self._engine.check_open()
        self._engine.check_writable("revoke_grant")
        check_id(subject, "subject")
        check_id(scope, "scope")
        asked = None if roles is None else check_roles(roles)

        def held_now(c: Cursor) -> dict[str, Any]:
            # Under the writers' lock: two revocations of one role cannot both pass.
            held = set(access_view.roles_of(c, self._engine.dialect, subject, scope))
            wanted = tuple(sorted(held)) if asked is None else asked
            missing = [r for r in wanted if r not in held]
            if not wanted or missing:
                raise InvalidInputError(
                    f"{subject!r} does not hold {', '.join(missing) or 'any role'} "
                    f"in scope {scope!r}"
                )
            return {"roles": wanted}

        self._append(subject, Principal.GrantRevoked, decide=held_now, scope=scope)

    def issue_token(self, subject: str, expires: datetime | None = None) -> str:
        """Issue a bearer token for ``subject``; only its hash is stored.

        Raises:
            InvalidIdError: the subject is not a valid name, or is "admin".
            NaiveDatetimeError: ``expires`` has no timezone.
            ExpiryInPastError: ``expires`` is not in the future.
        """
        self._engine.check_open()
        self._engine.check_writable("issue_token")
        _check_subject(subject)
        if expires is not None:
            self._engine.check_future(check_aware(expires, "token expiry"), "token expiry")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)

        self._append(subject, Principal.TokenIssued, token_hash=hash_token(token), expires=expires)
        return token

    def issue_admin_token(self, expires: datetime | None = None) -> str:
        """Issue another admin token (for ``Ledger.admin(token)`` and the command
        line's ``--admin-token``); only its hash is stored, as an event.

        Raises:
            NaiveDatetimeError: ``expires`` has no timezone.
            ExpiryInPastError: ``expires`` is not in the future.
        """
        self._engine.check_open()
        self._engine.check_writable("issue_admin_token")
        if expires is not None:
            self._engine.check_future(check_aware(expires, "token expiry"), "token expiry")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self._append(
            ADMIN_PRINCIPAL, Principal.TokenIssued, token_hash=hash_token(token), expires=expires
        )
        return token

    def bootstrap_admin_token(self) -> str | None:
        """The first admin token, if the log has never issued one, or a new one if
        none it issued is usable any more (each revoked or expired; revocation
        keeps one that does not expire, but a ledger may predate that rule); else
        None.

        What ``provledger init`` prints once; decided under the writers' lock, so two
        processes initialising one database at once cannot both get one.
        """
        self._engine.check_open()
        self._engine.check_writable("bootstrap_admin_token")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        issued = self._append(
            ADMIN_PRINCIPAL,
            Principal.TokenIssued,
            unless=lambda _admin, w: bool(self._usable_admin_tokens(w)),
            token_hash=hash_token(token),
            expires=None,
        )
        return token if issued else None

    def revoke_token(self, token: str | None = None, *, fingerprint: str | None = None) -> str:
        """Withdraw a token, given itself or its ``fingerprint`` (as :meth:`tokens`
        lists it, or any 8 or more of its first hex digits naming one token alone);
        sessions using it are refused from their next call. Returns its fingerprint
        (:func:`token_fingerprint`).

        Decided under the writers' lock: of two revocations of one token only the
        first is appended, and two admins revoking each other's tokens at once
        cannot leave the ledger without one.

        Raises:
            UnknownTokenError: the token was never issued (an
                :class:`AuthenticationError`).
            AuthenticationError: the token is already revoked.
            InvalidInputError: it is the last admin token still usable (neither
                revoked nor expired); both or neither of ``token`` and
                ``fingerprint`` given; the fingerprint is not 8 to 64 hex digits,
                or names no token, several, or one already revoked.
        """
        self._engine.check_open()
        self._engine.check_writable("revoke_token")
        if (token is None) == (fingerprint is None):
            raise InvalidInputError(
                "revoke_token refused: give the token or its fingerprint, not both or neither"
            )
        if token is not None and not isinstance(token, str):
            raise AuthenticationError("token must be a string")
        engine = self._engine
        with engine.reading() as c:
            self._authorize(c)
            if token is not None:
                token_hash = hash_token(token)
                row = access_view.token(c, engine.dialect, token_hash)
            else:
                row = self._fingerprinted(c, fingerprint)
                token_hash = str(row["token_hash"])
        if row is None:
            raise UnknownTokenError(NEVER_ISSUED)
        self._revoke(str(row["subject"]), (token_hash,))  # a token's subject never changes
        return fingerprint_of(token_hash)

    def revoke_tokens_of(self, subject: str) -> tuple[str, ...]:
        """Withdraw every token of ``subject`` not yet revoked (expired ones too), in
        one write transaction: for a principal whose tokens may have leaked, or
        whose tokens nobody kept. Its grants stay (:meth:`revoke_grant`). Returns
        the fingerprints of the tokens revoked.

        Raises:
            InvalidIdError: ``subject`` is no valid name.
            InvalidInputError: ``subject`` holds no token that is not revoked, or
                is the administrator (``admin``): admin tokens are revoked one at a
                time, keeping one usable.
        """
        self._engine.check_open()
        self._engine.check_writable("revoke_tokens_of")
        if subject in (self.ACTOR, ADMIN_PRINCIPAL):
            raise InvalidInputError(
                "revoke_tokens_of refused: admin tokens are revoked one at a time, by "
                "token or fingerprint, keeping one usable"
            )
        check_id(subject, "subject")
        return tuple(fingerprint_of(h) for h in self._revoke(subject, None))

    def _revoke(self, subject: str, hashes: tuple[str, ...] | None) -> list[str]:
        """Append a ``TokenRevoked`` for each of ``hashes`` of ``subject``'s tokens
        (each not yet revoked one if None), under the writers' lock; returns them."""
        engine = self._engine

        def work(w: Write) -> list[str]:
            self._authorize(w.c)
            principal: Any = engine.load(w.c, principal_uuid(subject))
            held = {} if principal is None else principal.tokens
            live = [h for h, alive in held.items() if alive]
            if hashes is None and not live:
                raise InvalidInputError(
                    f"revoke_tokens_of refused: {subject!r} holds no token that is not revoked"
                )
            wanted = live if hashes is None else list(hashes)
            for h in wanted:
                if h not in held:
                    raise UnknownTokenError(NEVER_ISSUED)
                if not held[h]:
                    raise AuthenticationError(f"token of {subject!r} is already revoked")
            if subject == ADMIN_PRINCIPAL:
                self._keep_an_admin_token(w, wanted, [h for h in live if h not in wanted])
            for token_hash in wanted:
                principal.trigger_event(
                    Principal.TokenRevoked,
                    actor=self.ACTOR,
                    timestamp=engine.now(),
                    token_hash=token_hash,
                )
            w.append(principal.collect_events())
            return wanted

        return engine.transact(work)

    def _keep_an_admin_token(self, w: Write, wanted: list[str], others: list[str]) -> None:
        """Refuse to revoke admin tokens ``wanted`` if no usable one would be left
        among ``others``, or none that does not expire while one of ``wanted``
        does not: once the rest had expired, no admin command could run, and
        `provledger init` is the only way back. Revoking a token that is no longer
        usable (expired) takes nothing away."""
        usable = self._usable_admin_tokens(w)
        gone = [usable[h] for h in wanted if h in usable]
        if not gone:
            return
        kept = [usable[h] for h in others if h in usable]
        issue = ": issue another first (Admin.issue_admin_token; `provledger token issue --admin`)"
        if not kept:
            raise InvalidInputError(
                "that is the last admin token"
                + (" still usable (the others have expired)" if others else "")
                + issue
            )
        if any(token.expires is None for token in gone) and all(
            token.expires is not None for token in kept
        ):
            last = max(micros_to_datetime(token.expires or 0) for token in kept)
            raise InvalidInputError(
                "that is the last admin token that does not expire: the others expire "
                f"(the last at {last.isoformat()}), and then no admin command could run"
                + issue.replace("another", "one without --expires")
            )

    def _usable_admin_tokens(self, w: Write) -> dict[str, TokenState]:
        """The admin tokens valid now, by hash, as the administrator's own events say
        (as :func:`check_admin_hash` decides: a forged ``pl_tokens`` row counts for
        nothing)."""
        from ledger.access_log import subject_state

        now = datetime_to_micros(self._engine.now())
        tokens = subject_state(self._engine, w.c, ADMIN_PRINCIPAL).tokens
        return {
            h: token
            for h, token in tokens.items()
            if token.revoked_position is None and (token.expires is None or now < token.expires)
        }

    def _fingerprinted(self, c: Cursor, fingerprint: object) -> Any:
        """The token row a fingerprint names (read in ``c``), not yet revoked.

        Raises:
            InvalidInputError: it is no fingerprint, or names no token, several, or
                a revoked one.
        """
        given = fingerprint.strip().lower() if isinstance(fingerprint, str) else None
        if given is None or not _FINGERPRINT.fullmatch(given):
            raise InvalidInputError(
                f"fingerprint {quoted(fingerprint)} is not 8 to 64 hex digits of a token's "
                "sha256 (provledger token list shows each token's)"
            )
        rows = access_view.tokens_by_prefix(c, self._engine.dialect, given)
        if not rows:
            raise InvalidInputError(f"no token has fingerprint {given!r}")
        if len(rows) > 1:
            whose = ", ".join(sorted({repr(subject_named(str(r["subject"]))) for r in rows}))
            raise InvalidInputError(
                f"fingerprint {given!r} names {len(rows)} tokens (of {whose}): give more of "
                "its digits"
            )
        row = rows[0]
        if row["revoked_pos"] is not None:
            raise InvalidInputError(
                f"token {given!r} of {subject_named(str(row['subject']))!r} is already revoked "
                f"(at log position {row['revoked_pos']})"
            )
        return row

    def tokens(self, subject: str | None = None) -> tuple[TokenInfo, ...]:
        """Every token issued (of ``subject`` only, if given; ``admin`` for admin
        tokens, whose subject is ``@admin``), oldest first, each by its fingerprint:
        the tokens themselves are not kept.

        Raises:
            InvalidIdError: ``subject`` is no valid name.
        """
        self._engine.check_open()
        if subject == self.ACTOR:
            subject = ADMIN_PRINCIPAL
        elif subject is not None and subject != ADMIN_PRINCIPAL:
            check_id(subject, "subject")
        engine = self._engine
        with engine.reading() as c:
            self._authorize(c)
            rows = access_view.token_rows(c, engine.dialect, subject)
        return tuple(
            TokenInfo(
                fingerprint=fingerprint_of(str(r["token_hash"])),
                subject=str(r["subject"]),
                issued_at=micros_to_datetime(r["issued_at"]),
                issued_position=int(r["issued_pos"]),
                expires=None if r["expires"] is None else micros_to_datetime(r["expires"]),
                revoked_position=r["revoked_pos"],
                state=_state(engine, r),
            )
            for r in rows
        )

    def erase_snapshot(self, ref: str, reason: str) -> Erasure:
        """Erase the evidence bytes behind ``ref`` (``sha256:…``), recording who and why.

        The bytes leave the snapshot store and every evidence record captured with
        them, in every scope, gets a ``SnapshotErased`` event carrying ``reason``
        (but one erased before: after a re-capture, only the captures since),
        which each record's readers see (write it for all of them), in one
        transaction; records keep their status and the log still verifies.
        ``Session.snapshot(ref)`` then raises ``SnapshotErasedError``. See :mod:`ledger.erasure`.

        Raises:
            UnknownSnapshotError: no evidence was captured with ``ref``.
            SnapshotErasedError: the bytes were erased already.
        """
        from ledger.erasure import erase_snapshot

        self._engine.check_writable("erase_snapshot")
        return erase_snapshot(
            self._engine, ref, reason, actor=self.ACTOR, authorize=self._authorize
        )

    def scrub_erased(self) -> bool:
        """Remove what the database's files still hold of erased bytes: what an
        erasure whose ``Erasure.scrubbed`` was False left (a reader kept SQLite's
        checkpoint from completing; PostgreSQL's table could not be rewritten, or
        an older transaction kept the row), or one interrupted before it scrubbed.
        Writes nothing to the log. True when none are left as far as the database
        can tell (and when nothing was ever erased); False: try again once the
        readers or older transactions have ended. See :mod:`ledger.erasure`."""
        from ledger.erasure import scrub_erased

        self._engine.check_writable("scrub_erased")
        return scrub_erased(self._engine, authorize=self._authorize)

    def access_history(
        self, subject: str | None = None, scope: str | None = None
    ) -> tuple[GrantChange, ...]:
        """Who held which role in which scope, from when until when."""
        self._engine.check_open()
        who = None if subject is None else check_id(subject, "subject")
        where = None if scope is None else check_id(scope, "scope")
        with self._engine.reading() as c:
            self._authorize(c)
            rows = access_view.grant_rows(c, self._engine.dialect, who, where)
        return tuple(
            GrantChange(
                subject=r["subject"],
                scope=r["scope"],
                role=Role(r["role"]),
                granted_at=micros_to_datetime(r["granted_at"]),
                granted_by=r["granted_by"],
                granted_position=r["from_pos"],
                revoked_at=None if r["revoked_at"] is None else micros_to_datetime(r["revoked_at"]),
                revoked_by=r["revoked_by"],
                revoked_position=r["to_pos"],
            )
            for r in rows
        )


def _check_subject(subject: str) -> None:
    """A subject a principal may be given roles or tokens as: a valid name, and
    not ``Admin.ACTOR``, which names the administrator in every audit trail."""
    check_id(subject, "subject")
    if subject == Admin.ACTOR:
        raise InvalidIdError(
            f"subject {subject!r} is reserved: it names the administrator in audit "
            "trails; give the principal another name"
        )


def _state(engine: Engine, row: Any) -> str:
    """A token row's state now: ``usable``, ``expired`` or ``revoked``."""
    try:
        engine.check_token(row)
    except AuthenticationError:
        return "revoked" if row["revoked_pos"] is not None else "expired"
    return "usable"
