"""The authenticated principal a session acts as: its token, roles and visibility.

Every read and every command starts here: the token is checked again on each call
(a revoked token or grant stops the next call), the roles of its subject come
from the access view in the same statement, and a record in a scope the subject
holds no grant in looks exactly like one that does not exist.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ledger import redaction
from ledger.access import Role
from ledger.domain import Validity
from ledger.engine import Engine
from ledger.errors import (
    AccessDeniedError,
    InvalidIdError,
    InvalidParentError,
    LedgerError,
    ReadOnlyError,
    UnknownRecordError,
)
from ledger.validation import check_aware, check_ref
from ledger.values import RecordView
from projections import access as access_view
from projections import validity as validity_view
from projections.base import Cursor

if TYPE_CHECKING:
    from ledger.runs import RunContext

#: Several roles, any one of which allows a command (``corrections_due``: ``deliver``
#: or ``audit``).
Roles = tuple[Role, ...]


class Caller:
    """One principal bound to an engine: live, or as of a log position (read-only),
    and optionally inside a run that records what it reads."""

    def __init__(
        self,
        engine: Engine,
        subject: str,
        token_hash: str,
        *,
        position: int | None = None,
        at: datetime | None = None,
        run: RunContext | None = None,
    ) -> None:
        self.engine = engine
        self.subject = subject
        self.token_hash = token_hash
        self.position = position
        self.as_of_at = at
        self.run = run
        self._role_cache: dict[int, dict[str, list[str]]] = {}
        #: Qualified names the caller gave in a transaction (echoed as typed).
        self._given: dict[int, set[str]] = {}
        #: Per read transaction (by cursor id): qualified keys → how they are shown
        #: (None: as they are); a snapshot's answers do not change.
        self._shown: dict[int, dict[str, str | None]] = {}

    def derive(
        self,
        *,
        position: int | None = None,
        at: datetime | None = None,
        run: RunContext | None = None,
    ) -> Caller:
        """The same principal as of ``position``, or inside ``run``."""
        return Caller(self.engine, self.subject, self.token_hash, position=position, at=at, run=run)

    # -- authentication and roles -------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[Cursor]:
        """A read transaction in which the token was checked and the subject's roles
        read (one statement); they serve it until it ends."""
        with self.engine.reading() as c, self.authenticated(c):
            self._shown[id(c)] = {}
            try:
                yield c
            except LedgerError as exc:
                raise self.refusal(c, exc) from exc.__cause__
            finally:
                del self._shown[id(c)]

    @contextmanager
    def authenticated(self, c: Cursor) -> Iterator[None]:
        """Check the token with ``c`` and keep the subject's roles for ``c``'s
        transaction (a command does this under the writers' lock)."""
        self._role_cache[id(c)] = self.authenticate(c)
        self._given[id(c)] = set()
        try:
            yield
        finally:
            del self._role_cache[id(c)]
            del self._given[id(c)]

    def refusal(self, c: Cursor, exc: LedgerError) -> LedgerError:
        """``exc`` naming every record as the caller is shown it (a qualified key
        it cannot tell apart as its bare id); what the caller typed is echoed as
        typed (an id refused for its shape names no stored record: it is left as is)."""
        if isinstance(exc, InvalidIdError):
            return exc
        keys = redaction.keys_in(str(exc)) - self._given.get(id(c), set())
        names = self.names(c, keys) if keys else {}
        return redaction.error(exc, names) if names else exc

    def authenticate(self, c: Cursor) -> dict[str, list[str]]:
        """Check the token (``AuthenticationError``); its subject's roles by scope."""
        fresh = self.engine.fresh(c)
        known = self.engine.recent.tokens.get(self.token_hash) if fresh else None
        if known is None:
            known = access_view.token_and_roles(c, self.engine.dialect, self.token_hash)
            if fresh and known[0] is not None:
                self.engine.recent.tokens[self.token_hash] = known
        row, roles = known
        self.engine.check_token(row)
        return roles

    def roles(self, c: Cursor, scope: str) -> list[str]:
        """The subject's roles in ``scope`` (as read when ``c`` was authenticated)."""
        cache = self._role_cache.get(id(c))
        if cache is None:
            return access_view.roles_of(c, self.engine.dialect, self.subject, scope)
        return cache.get(scope, [])

    def granted_scopes(self, c: Cursor | None) -> frozenset[str]:
        """The scopes the subject holds any role in (a fresh read when ``c`` is None
        or was not authenticated)."""
        held = None if c is None else self._role_cache.get(id(c))
        if held is None:
            if c is None:
                with self.engine.statement() as c2:
                    held = self.authenticate(c2)
            else:
                held = self.authenticate(c)
        return frozenset(s for s, roles in held.items() if roles)

    def hidden_among(
        self, c: Cursor | None, ids: Iterable[str], seen: str | None = None
    ) -> frozenset[str]:
        """Those of ``ids`` that are records in scopes the subject holds no grant in
        (see :mod:`ledger.redaction`). ``seen``: a scope known to be visible (the
        scope of the record that names them), which needs no look-up."""
        if not isinstance(ids, Collection):
            ids = tuple(ids)
        # Most often every one is in the naming record's scope or one granted:
        # their scopes decide it without a mapping per id.
        outside = self.engine.scope_set(c, ids)
        outside.discard(seen)
        if not outside:
            return frozenset()
        granted = self.granted_scopes(c)
        if outside <= granted:
            return frozenset()
        scopes = self.engine.scopes_of(c, ids)
        return frozenset(rid for rid, s in scopes.items() if s != seen and s not in granted)

    def require_somewhere(self, c: Cursor, role: Role | Roles, command: str) -> None:
        """Raise ``AccessDeniedError`` unless the subject holds ``role`` (one of
        ``role``, given several) in some scope (a listing across scopes is refused,
        not answered empty, without it)."""
        held = self._role_cache.get(id(c))
        if held is None:
            held = self.authenticate(c)
        wanted = _values(role)
        if not any(not wanted.isdisjoint(roles) for roles in held.values()):
            raise AccessDeniedError(
                f"{command} refused: {self.subject!r} lacks {_named(role)} in every scope"
            )

    def holds(self, c: Cursor, scope: str, role: Role | Roles) -> bool:
        """Whether the subject holds ``role`` (one of ``role``, given several) in
        ``scope``."""
        return not _values(role).isdisjoint(self.roles(c, scope))

    def require(self, c: Cursor, scope: str, role: Role | Roles, command: str) -> None:
        """Raise ``AccessDeniedError`` unless the subject holds ``role`` (one of
        ``role``, given several) in ``scope``."""
        if not self.holds(c, scope, role):
            raise self.denied(scope, role, command)

    def denied(self, scope: str, role: Role | Roles, command: str) -> AccessDeniedError:
        """The refusal of ``command`` for want of ``role`` in ``scope``."""
        return AccessDeniedError(
            f"{command} refused: {self.subject!r} lacks {_named(role)} in scope {scope!r}"
        )

    # -- record ids: unique per scope ----------------------------------------------

    def lookup(self, c: Cursor, name: str) -> Any:
        """The current row of the record a caller means by ``name`` (see
        :mod:`ledger.redaction`), None if there is none it can see: the record
        keyed ``name`` if the caller can see it, else the one proposed as ``name``
        in a scope it holds a grant in (keyed ``name@@scope`` because ``name`` was
        taken in a scope it cannot see).

        Two scopes the caller holds grants in may each hold a record proposed
        as ``name`` there (both keyed qualified): the bare name denotes the one
        proposed first, and the caller is shown the other by its qualified key
        (:meth:`names`). So a name the caller was shown keeps denoting the same
        record whatever is proposed later: only a change of its grants (or an
        as-of position before that record) can make it denote another, and a
        decision taken on a record the caller was shown cannot land on another
        one proposed since.

        A qualified name is taken as given from a caller who is shown the bare
        name as another record (it needs the qualified form to tell the two
        apart); from any other it denotes nothing, exactly like a qualified name
        never used.
        """
        d = self.engine.dialect
        if redaction.QUALIFIER in name:
            given = self._given.get(id(c))
            if given is not None:
                given.add(name)
            first = self.lookup(c, redaction.bare(name))
            if first is None or first["record_id"] == name:
                return None
            # Shown the bare name as one of its own, the caller may still not see
            # the record keyed ``name``: what it is (or that it is) stays hidden.
            row = validity_view.current(c, d, name, self.position)
            return row if row is not None and self.roles(c, row["scope"]) else None
        if self.position is None:
            row = self.engine.current_row(c, name)
        else:
            row = validity_view.current(c, d, name, self.position)
        if row is not None and self.roles(c, row["scope"]):
            return row
        # A free id is looked up as far as one taken in a scope the caller cannot
        # see (though no record is keyed by it qualified), so that the time taken
        # does not tell the two apart: on PostgreSQL the look-up is a round trip.
        granted = self.granted_scopes(c)
        keyed = validity_view.qualified_keys(c, d, (name,), self.position).get(name, [])
        mine = [(created, key) for key, scope, created in keyed if scope in granted]
        return validity_view.current(c, d, min(mine)[1], self.position) if mine else None

    def resolve(self, c: Cursor, name: str) -> str:
        """The key of the record a caller means by ``name`` (:meth:`lookup`); else
        a key that names nothing the caller can see (so it is refused like any
        free id): ``name`` itself, or for a qualified name one no record has."""
        row = self.lookup(c, name)
        if row is not None:
            return str(row["record_id"])
        return name + redaction.QUALIFIER if redaction.QUALIFIER in name else name

    def key_for(self, c: Cursor, name: str, scope: str) -> str | None:
        """The key a new record proposed as ``name`` in ``scope`` is stored under:
        ``name``, or ``name@@scope`` when ``name`` is taken only in a scope the
        caller holds no grant in; None when the caller can see that ``name`` is
        taken (a duplicate)."""
        d = self.engine.dialect
        row = validity_view.current(c, d, name)
        if row is None:
            return name
        if self.roles(c, row["scope"]):
            return None
        if self.lookup(c, name) is not None:
            return None  # the caller is shown another record as ``name``
        key = redaction.qualified(name, scope)
        return None if validity_view.current(c, d, key) is not None else key

    def names(self, c: Cursor | None, keys: Iterable[str | None]) -> dict[str, str]:
        """How the caller is shown those of ``keys`` that are qualified
        (``name@@scope``): as the bare ``name`` exactly when that is what ``name``
        denotes for it (:meth:`lookup`, as of the caller's position), else as the
        key, so no two records it can see share a name. A key stays qualified
        when the caller holds no grant in its scope, can see the record keyed
        ``name``, or can see a record keyed ``name@@s`` in a scope ``s`` of its
        own that was proposed before it."""
        bare = {k: redaction.bare(k) for k in keys if k and redaction.QUALIFIER in k}
        if not bare:
            return {}
        memo = None if c is None else self._shown.get(id(c))
        if memo is not None:
            wanted = {k: b for k, b in bare.items() if k not in memo}
            if wanted:
                found = self._names(c, wanted)
                memo.update((k, found.get(k)) for k in wanted)
            return {k: shown for k in bare if (shown := memo[k]) is not None}
        return self._names(c, bare)

    def _names(self, c: Cursor | None, bare: dict[str, str]) -> dict[str, str]:
        """:meth:`names` of the qualified keys ``bare`` (key → bare id)."""
        granted = self.granted_scopes(c)
        mine = {k: b for k, b in bare.items() if _scope_in(k) in granted}
        if not mine:
            return {}
        if c is None:
            with self.engine.statement() as c2:
                return self._bare_names(c2, mine, granted)
        return self._bare_names(c, mine, granted)

    def _bare_names(
        self, c: Cursor, mine: dict[str, str], granted: frozenset[str]
    ) -> dict[str, str]:
        """Those of the qualified keys ``mine`` (key → bare id, each in a granted
        scope) that the caller is shown by their bare id (see :meth:`names`)."""
        d = self.engine.dialect
        names = set(mine.values())
        if self.position is None:
            scopes = self.engine.scopes_of(c, names)
        else:
            rows = validity_view.current_many(c, d, names, self.position)
            scopes = {rid: row["scope"] for rid, row in rows.items()}
        alone = {k: b for k, b in mine.items() if scopes.get(b) not in granted}
        if not alone:
            return {}
        keyed = validity_view.qualified_keys(c, d, set(alone.values()), self.position)
        first: dict[str, str] = {}  # bare id → the key of the first proposed
        for b, found in keyed.items():
            own = [(created, key) for key, s, created in found if s in granted]
            if own:
                first[b] = min(own)[1]
        return {k: b for k, b in alone.items() if first.get(b) == k}

    def shown(self, c: Cursor | None, key: str) -> str:
        """``key`` as the caller is shown it (see :meth:`names`)."""
        return self.names(c, (key,)).get(key, key)

    def visible(
        self, c: Cursor, record_id: object, role: Role | Roles, command: str, what: str = "record"
    ) -> Any:
        """The record's row if the principal may see it and holds ``role`` there,
        naming no record hidden from it (see :meth:`redacted`).

        A record in a scope the principal has no grant in looks exactly like one
        that does not exist; a bare id resolves within the caller's visible scopes
        (:meth:`resolve`).
        """
        return self.redacted(c, self.visible_row(c, record_id, role, command, what))

    def visible_row(
        self, c: Cursor, record_id: object, role: Role | Roles, command: str, what: str = "record"
    ) -> Any:
        """The record's current view row as stored, after :meth:`visible`'s checks:
        for the views, never for what the caller is shown."""
        rid = check_ref(record_id, f"{what} id")
        row = self.lookup(c, rid)
        if row is None or not self.roles(c, row["scope"]):
            raise UnknownRecordError(
                f"{command} refused: {what} {rid!r} is unknown or not visible to {self.subject!r}"
            )
        self.require(c, row["scope"], role, command)
        return row

    def redacted(self, c: Cursor, row: Any) -> Any:
        """``row`` naming no record hidden from the caller (a placeholder instead)."""
        return redaction.row(
            row, self.hidden_among(c, redaction.row_dependencies(row), seen=row["scope"])
        )

    def readable_dependency(self, c: Cursor, row: Any, dep: str, what: str, child: str) -> Any:
        """``row`` (of ``dep``, a parent or observed dependency of ``child``) if the
        caller may read it; else ``InvalidParentError``, the same for a record that
        does not exist as for one the caller cannot see."""
        if row is None or Role.READ.value not in self.roles(c, row["scope"]):
            raise InvalidParentError(
                f"{what} {dep!r} of {child!r} is unknown or not readable by {self.subject!r}"
            )
        hidden = self.hidden_among(c, redaction.row_dependencies(row), seen=row["scope"])
        return redaction.row(row, hidden)

    # -- time, as-of and runs -----------------------------------------------------

    @property
    def read_only(self) -> bool:
        """True as of a past position, or on a ledger opened read-only."""
        return self.position is not None or self.engine.read_only

    def writable(self, command: str) -> None:
        """Raise ``ReadOnlyError`` as of a past position or on a ledger opened read-only."""
        if self.position is not None:
            raise ReadOnlyError(
                f"{command} refused: this session is read-only (as of position {self.position})"
            )
        self.engine.check_writable(command)

    def at(self, at: datetime | None) -> datetime:
        """The instant a read is about: ``at``, else the as-of time, else now."""
        if at is not None:
            return check_aware(at, "at")
        if self.as_of_at is not None:
            return self.as_of_at
        return self.engine.now()

    def note_reads(self, shown: Iterable[RecordView], how: str) -> None:
        """Inside a run, record that these records were shown to it (and which of
        them are VALID: only those become its observed dependencies). A read at an
        earlier instant (``at``) shows a record as it was then: one VALID then
        whose expiry has passed since is shown, but is no basis now."""
        if self.run is not None:
            views = tuple(shown)
            keys = self.keys_of(views)
            now = self.engine.now()
            valid = {
                keys[v.id, v.scope]
                for v in views
                if v.validity == Validity.VALID
                and (v.effective_expires is None or v.effective_expires > now)
            }
            ids = tuple(keys[v.id, v.scope] for v in views)
            self.run._record_reads(ids, how, valid)  # the run's own reads: visible

    def keys_of(self, views: Iterable[RecordView]) -> dict[tuple[str, str], str]:
        """The key of each record shown (by ``(id, scope)``): its id, or
        ``id@@scope`` when the record keyed by the bare id lies in another scope."""
        views = tuple(views)
        scopes = self.engine.scopes_of(None, {v.id for v in views})
        return {(v.id, v.scope): _key(v.id, v.scope, scopes) for v in views}

    def key_of(self, record_id: str, scope: str) -> str:
        """The key of the record in ``scope`` the caller is shown as ``record_id``
        (see :meth:`keys_of`)."""
        return _key(record_id, scope, self.engine.scopes_of(None, (record_id,)))


def _key(shown: str, scope: str, scopes: Mapping[str, str]) -> str:
    """The key of the record in ``scope`` shown as ``shown`` (``scopes``: the scope
    of the record keyed by each bare id that has one)."""
    if redaction.QUALIFIER in shown or scopes.get(shown) == scope:
        return shown
    return redaction.qualified(shown, scope)


def _scope_in(key: str) -> str:
    """The scope a qualified key names (``name@@scope``)."""
    return key.partition(redaction.QUALIFIER)[2]


def _values(role: Role | Roles) -> frozenset[str]:
    return frozenset((role.value,) if isinstance(role, Role) else (r.value for r in role))


def _named(role: Role | Roles) -> str:
    """``role 'deliver'``; ``role 'deliver' or 'audit'``."""
    roles = (role,) if isinstance(role, Role) else role
    return "role " + " or ".join(repr(r.value) for r in roles)
