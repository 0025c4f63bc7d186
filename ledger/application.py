"""``Ledger``: open a ledger, hand out sessions, maintain and verify it.

``Ledger.open(url)`` opens (or creates) a ledger; ``Ledger.admin()`` is the
embedding host's trusted handle; ``Ledger.authenticate(token)`` returns a
:class:`ledger.Session` bound to the token's principal. A façade: the machinery is
:class:`ledger.engine.Engine`, tamper evidence :mod:`ledger.verification`.

Every command checks the principal's roles, validates its input completely before
writing, and appends its events, view updates and snapshots in one transaction
(see :mod:`ledger.pipeline`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ledger import deliveries as deliveries_module
from ledger import heads as heads_module
from ledger import verification
from ledger.access import ADMIN_PRINCIPAL, Admin, check_admin_token, hash_token
from ledger.caller import Caller
from ledger.domain import Kind, RetentionRule
from ledger.engine import AcceptanceCheck, Engine
from ledger.errors import AuthenticationError, InvalidInputError, LedgerError
from ledger.merkle import LogDigest, Verification
from ledger.persistence import resolve_url
from ledger.serialization import micros_to_datetime
from ledger.session import Session
from ledger.validation import DEFAULT_MAX_VALUE_BYTES, check_flag, check_kind
from ledger.values import LedgerStats, RebuildReport
from projections import access as access_view
from projections import delivery as delivery_view
from projections import queries as view_queries
from projections import timeline

if TYPE_CHECKING:
    from ledger.heads import PrivateKeyLike, PublicKeyLike, SignedHead


def _utcnow() -> datetime:
    return datetime.now(UTC)


#: Why ``Ledger.authenticate`` refuses the admin token (surfaces tell it apart).
ADMIN_TOKEN_REFUSAL = (
    "that is an admin token: it authorizes admin calls (Ledger.admin(token), "
    "--admin-token), not a principal's; issue one with "
    "Admin.issue_token(SUBJECT) (`provledger token issue SUBJECT`)"
)


class Ledger:
    """An event-sourced provenance ledger (see ``Ledger.open``)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        acceptance_checks: Sequence[AcceptanceCheck] = (),
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        clock: Callable[[], datetime] = _utcnow,
        retention: Mapping[Kind, RetentionRule] | Mapping[str, RetentionRule] | None = None,
        create: bool = True,
        catch_up: bool = True,
    ) -> None:
        backend = resolve_url(url)
        self.url = backend.url
        self.backend = backend.kind
        if (
            isinstance(max_value_bytes, bool)
            or not isinstance(max_value_bytes, int)
            or max_value_bytes <= 0
        ):
            raise InvalidInputError(
                f"max_value_bytes must be a positive int, got {max_value_bytes!r}"
            )
        if not callable(clock):
            raise InvalidInputError(f"clock must be callable, got {type(clock).__name__}")
        check_flag(create, "create")
        check_flag(catch_up, "catch_up")
        self._engine = Engine(
            backend,
            checks=_check_acceptance_checks(acceptance_checks),
            max_value_bytes=max_value_bytes,
            clock=clock,
            retention=_check_retention(retention),
            create=create,
        )
        try:
            if self._engine.read_only:
                self._engine.note_layout()  # the views as stored: nothing is written
                if catch_up:  # reads would take them for current
                    self._engine.check_views_current()
            elif catch_up:
                self._engine.migrate_views()
                self.catch_up()
            elif self._engine.position() == 0:
                self._engine.migrate_views()  # a new ledger's empty views: their layout
            else:
                self._engine.note_layout()
        except BaseException:
            self.close()
            raise

    # -- lifecycle ------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        acceptance_checks: Sequence[AcceptanceCheck] = (),
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        clock: Callable[[], datetime] = _utcnow,
        retention: Mapping[Kind, RetentionRule] | Mapping[str, RetentionRule] | None = None,
        create: bool = True,
        catch_up: bool = True,
    ) -> Ledger:
        """Open (creating if needed) the ledger at ``url``.

        Args:
            url: ``memory:``, ``sqlite:///path.db`` or
                ``postgresql://user:password@host:port/db?schema=…``; default
                ``$PROVLEDGER_URL``, else ``sqlite:///provledger.db``.
            acceptance_checks: callables run on every ``accept``; each returns
                None to pass or a reason string to refuse.
            max_value_bytes: the largest serialised value or content accepted.
            clock: the ledger's notion of *now*: expiry checks, and the time each
                event is stamped with (which ``as_of(time=...)`` finds).
            retention: per-kind ``RetentionRule``; a proposal that breaks one is
                refused with ``RetentionRuleError`` naming the rule.
            create: False to refuse a ledger that does not exist yet instead of
                creating it (nothing is created: no file, no tables).
            catch_up: False to leave the views of a ledger with events exactly as
                stored: neither rebuilt when their layout is an earlier version's
                (``verify`` then leaves the views check out and says so) nor
                brought up to the events they have not seen (the first write
                still does that): what an audit of a ledger that may have been
                tampered with opens it with, so that ``verify`` names the first
                problem rather than opening failing on, or rebuilding away, what
                was written behind the ledger's back.

        A URL ``sqlite:///path.db?mode=ro`` opens an existing ledger read-only,
        as an auditor's copy or a ledger on a read-only file system is opened:
        nothing is created or written, reads, audit, ``verify`` and bundles work,
        and every write raises ``ReadOnlyError``. Views that would need a rebuild
        or a catch-up are refused (``StorageError``) unless ``catch_up=False``,
        which leaves them as stored for ``verify`` to check. On a read-only file
        system the file is read as it was when opened.

        Raises:
            InvalidURLError: the URL names no supported backend.
            LedgerNotFoundError: ``create=False`` (or ``mode=ro``) and there is
                no ledger at ``url``.
            InvalidInputError: an option is of the wrong type.
            StorageError: the database cannot be opened or reached.
        """
        return cls(
            url,
            acceptance_checks=acceptance_checks,
            max_value_bytes=max_value_bytes,
            clock=clock,
            retention=retention,
            create=create,
            catch_up=catch_up,
        )

    def close(self) -> None:
        """Close the ledger: what starts after this is refused (``ClosedLedgerError``);
        reads and writes other threads have under way are waited for (at most 5 s),
        and the database connections close once none is (an iteration another
        thread is still reading runs to its end first). Safe to call twice."""
        self._engine.close()

    def __repr__(self) -> str:
        # Opened before this process was forked from it: closed to it (ledger.forks).
        closed = self._engine.closed or self._engine.inherited
        state = "closed" if closed else "open"
        return f"<Ledger {self.url!r} ({self.backend}, {state})>"

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def engine(self) -> Engine:
        """The ledger's machinery (internal: for this package, its tests and its
        scripts; not part of the public API, and it may change)."""
        return self._engine

    # -- handles --------------------------------------------------------------

    def admin(self, token: str | None = None) -> Admin:
        """The trusted host's handle for grants, tokens and maintenance.

        Code that opened the ledger is trusted as it is; ``token`` (an admin token
        from ``Admin.bootstrap_admin_token`` or ``Admin.issue_admin_token``) is
        checked first when given, as the command line does on shared databases,
        and again at each of the handle's calls: once it is revoked or expires, the
        handle is refused.

        Raises:
            AuthenticationError: ``token`` is not a valid admin token.
        """
        self._engine.check_open()
        if token is None:
            return Admin(self._engine)
        return Admin(self._engine, check_admin_token(self._engine, token))

    def authenticate(self, token: str) -> Session:
        """A session bound to the principal the token was issued to.

        Raises:
            AuthenticationError: the token is unknown, revoked or expired.
        """
        self._engine.check_open()
        if not isinstance(token, str) or not token:
            raise AuthenticationError("token must be a non-empty string")
        token_hash = hash_token(token)
        with self._engine.reading() as c:
            row = access_view.token(c, self._engine.dialect, token_hash)
            subject = self._engine.check_token(row)
        if subject == ADMIN_PRINCIPAL:
            raise AuthenticationError(ADMIN_TOKEN_REFUSAL)
        return Session(Caller(self._engine, subject, token_hash))

    @property
    def read_only(self) -> bool:
        """True when opened read-only (``sqlite:///path.db?mode=ro``)."""
        return self._engine.read_only

    @property
    def position(self) -> int:
        """Log position of the newest event (0 for an empty ledger)."""
        return self._engine.position()

    def now(self) -> datetime:
        """The ledger's clock (what expiry checks and event timestamps use)."""
        return self._engine.now()

    def stats(self) -> LedgerStats:
        """Counts, as a dict (see ``LedgerStats``): ``backend``, ``events``
        (stored), ``position`` (of the newest event), ``records``, ``statuses``
        (records per status), ``deliveries``, ``corrections`` (issued),
        ``snapshots`` (stored evidence bytes), ``runs``, ``corrections_owed``
        (deliveries owing a correction now, in every scope; None from views left
        in an earlier version's layout, which cannot tell) and ``last_event_at``
        (the newest event's time; None for an empty ledger), all read in one
        read transaction."""
        engine = self._engine
        d = engine.dialect
        with engine.reading() as c:
            counts = engine.recorder.counts(c)
            statuses = view_queries.status_counts(c, d)
            deliveries = delivery_view.count(c, d, "pl_deliveries")
            corrections = delivery_view.count(c, d, "pl_corrections")
            runs = access_view.run_count(c, d)
            # Views left in an earlier layout cannot tell what is owed.
            owed = None
            if engine.outdated_views is None:
                owed = deliveries_module.owed_count(engine, c, engine.now())
            newest = engine.recorder.max_position(c)
            last = timeline.time_of(c, d, newest)
        return {
            "backend": self.backend,
            "events": counts["events"],
            "position": newest,
            "records": sum(statuses.values()),
            "statuses": statuses,
            "deliveries": deliveries,
            "corrections": corrections,
            "snapshots": counts["snapshots"],
            "runs": runs,
            "corrections_owed": owed,
            "last_event_at": None if last is None else micros_to_datetime(last),
        }

    # -- tamper evidence --------------------------------------------------------

    def digest(self) -> LogDigest:
        """The Merkle root over every event as it was appended, from the stored
        leaves: keep it elsewhere. It checks nothing (run :meth:`verify` before
        keeping it); a signed head (:meth:`signed_head`) is checked first.

        Later, ``verify(against=digest)`` proves the log still extends it.
        """
        return verification.digest(self._engine)

    def verify(
        self,
        against: LogDigest | str | None = None,
        *,
        heads: str | os.PathLike[str] | Iterable[SignedHead] | None = None,
        public_key: PublicKeyLike | None = None,
        older_copy: bool = False,
    ) -> Verification:
        """Check the whole ledger, naming the first problem (never writes).

        Kept heads' signatures; the stored event bytes against their Merkle
        leaves (naming the first position that differs); RFC 6962 consistency of
        the log with every kept head (``heads=`` a heads file or heads,
        ``public_key=`` their KEY.pub) and with ``against`` (a digest kept
        elsewhere); authorization replay; the views against a replay of the log;
        the evidence bytes. See :mod:`ledger.verification`. ``older_copy``: the
        ledger is a copy made before some kept heads, which are counted
        (``beyond``), not checked for consistency.

        Raises:
            InvalidInputError: ``against`` is not a digest, or heads without a key.
        """
        return verification.verify(
            self._engine, against, heads=heads, public_key=public_key, older_copy=older_copy
        )

    def signed_head(self, private_key: PrivateKeyLike) -> SignedHead:
        """A signed tree head of the log now (keep it outside the operator's reach),
        once the log passes ``verify``'s log and authorization checks.

        Raises:
            InvalidKeyError: the key cannot be loaded.
            CorruptEventError: the log fails one of those checks (named); nothing
                is signed.
        """
        return heads_module.signed_head(self, private_key)

    # -- maintenance ----------------------------------------------------------

    def catch_up(self) -> int:
        """Apply any events the views have not seen; returns how many.

        Cheap when the views are current (one read); otherwise takes the writers'
        lock first, so concurrent writers and catch-ups never apply an event twice.
        """
        return self._engine.catch_up()

    def views_digest(self) -> str:
        """Order-independent digest of every view row."""
        with self._engine.reading() as c:
            return self._engine.projector.digest(c)

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> RebuildReport:
        """Empty every view, replay the whole log into them in batches, and
        compare digests of the views taken before and after (``matched``).

        One transaction: writers wait meanwhile (and are refused once their lock
        wait runs out); a failure part-way leaves the views as they were. Streams
        the log (memory does not grow with its length). ``progress`` is called
        with (log position reached, log position to reach).
        """
        self._engine.check_open()
        if progress is not None and not callable(progress):
            raise InvalidInputError(f"progress must be callable, got {type(progress).__name__}")
        engine = self._engine
        # Views an earlier version built, left as stored (``catch_up=False``), are
        # first rebuilt in this version's layout, as before any write: the digest
        # to compare with is of views this version can read.
        engine.views_for_writing(later=True)
        # One transaction: a crash or a corrupt event part-way leaves the old views
        # exactly as they were, and writers wait instead of seeing half-built views.
        # The backend is set for reading and writing every view row once (on SQLite
        # a small page cache, so memory does not grow with the log).
        with engine.locked("rebuild") as c, engine.recorder.replaying(c):
            # Under the lock, so no other writer slips in between the two digests.
            before = engine.projector.digest(c)
            target = engine.recorder.max_position(c)
            started = time.perf_counter()
            applied = engine.projector.replay(
                c, None if progress is None else (lambda reached: progress(reached, target))
            )
            # Still under the lock: a command committed after the rebuild's must not
            # count in one digest and not the other. (Its time is not the rebuild's.)
            digesting = time.perf_counter()
            after = engine.projector.digest(c)
            digesting = time.perf_counter() - digesting
        seconds = time.perf_counter() - started - digesting
        return RebuildReport(
            events=applied, seconds=seconds, digest_before=before, digest_after=after
        )


def _check_acceptance_checks(checks: object) -> tuple[AcceptanceCheck, ...]:
    if isinstance(checks, (str, bytes, Mapping)) or not isinstance(checks, Iterable):
        raise InvalidInputError(
            f"acceptance_checks must be a list of callables, got {type(checks).__name__}"
        )
    out = tuple(checks)
    for check in out:
        if not callable(check):
            raise InvalidInputError(f"acceptance check {check!r} is not callable")
    return out


def _check_retention(retention: object) -> dict[Kind, RetentionRule]:
    if retention is None:
        return {}
    if not isinstance(retention, Mapping):
        raise InvalidInputError(
            f"retention must map kinds to RetentionRule, got {type(retention).__name__}"
        )
    rules = {}
    for given, rule in retention.items():
        kind = given.value if isinstance(given, Kind) else given  # as messages show it
        if not isinstance(rule, RetentionRule):
            raise InvalidInputError(f"retention rule for {kind!r} is not a RetentionRule")
        lifetime = rule.max_lifetime
        positive = isinstance(lifetime, timedelta) and lifetime > timedelta(0)
        if lifetime is not None and not positive:
            raise InvalidInputError(
                f"retention rule for {kind!r}: max_lifetime must be a positive timedelta, "
                f"got {lifetime!r}"
            )
        if not isinstance(rule.expiry_required, bool):
            raise InvalidInputError(
                f"retention rule for {kind!r}: expiry_required must be True or False, "
                f"got {rule.expiry_required!r}"
            )
        if lifetime is None and not rule.expiry_required:  # RetentionRule(): a slip
            raise InvalidInputError(
                f"retention rule for {kind!r}: it requires nothing; give max_lifetime or "
                "expiry_required=True, or leave the kind out"
            )
        rules[check_kind(kind)] = rule
    return rules


__all__ = ["AcceptanceCheck", "Ledger", "LedgerError"]
