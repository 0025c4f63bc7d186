"""The ``Ledger`` application and the principal-bound ``Session``.

``Ledger.open(url)`` opens (or creates) a ledger; ``Ledger.admin()`` is the
embedding host's trusted handle; ``Ledger.authenticate(token)`` returns a
:class:`Session` bound to the token's principal. Every command checks the
principal's roles, validates its input completely before writing, and appends
its events, view updates and snapshots in one transaction.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import re
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import OriginatorIDError, OriginatorVersionError
from eventsourcing.persistence import (
    IntegrityError,
    MapperDeserialisationError,
    OperationalError,
    PersistenceError,
)
from eventsourcing.utils import TopicError, get_topic

from ledger import erasure, merkle, verification
from ledger import heads as heads_module
from ledger.access import Admin, Role, hash_token
from ledger.domain import (
    DEFAULT_MAX_VALUE_BYTES,
    Kind,
    Outcome,
    Record,
    RetentionRule,
    Run,
    Status,
    Validity,
    check_aware,
    check_id,
    check_kind,
    check_text,
    check_value,
    record_uuid,
    run_uuid,
)
from ledger.errors import (
    AcceptanceCheckError,
    AccessDeniedError,
    AuthenticationError,
    ClosedLedgerError,
    ConcurrencyError,
    CorruptEventError,
    CycleError,
    DuplicateRecordError,
    ExpiryInPastError,
    InvalidInputError,
    InvalidParentError,
    InvalidTransitionError,
    InvalidValueError,
    LedgerError,
    NotUsableError,
    ReadOnlyError,
    SnapshotIntegrityError,
    StorageError,
    UnknownDeliveryError,
    UnknownRecordError,
    UnknownSnapshotError,
    ValueTooLargeError,
)
from ledger.merkle import InclusionProof, LogDigest, Verification
from ledger.persistence import Guard, LedgerApplication, resolve_url
from ledger.serialization import canonical, datetime_to_micros, micros_to_datetime, unpack
from ledger.values import (
    AuditEvent,
    AuditTrail,
    Correction,
    CorrectionDue,
    Delivery,
    Explanation,
    ReadResult,
    Reason,
    RebuildReport,
    RecordView,
    Revocation,
)
from projections import access as access_view
from projections import delivery as delivery_view
from projections import timeline
from projections import validity as validity_view
from projections.base import Cursor, fetch_in_chunks

if TYPE_CHECKING:
    from ledger.heads import PrivateKeyLike, PublicKeyLike, SignedHead

T = TypeVar("T")


class AcceptanceCheck(Protocol):
    """A check the embedding application registers to run on every ``accept``.

    It gets the candidate as a ``RecordView`` and returns None (or an empty
    string) to let it pass, or a reason to refuse it with ``AcceptanceCheckError``.
    """

    def __call__(self, record: RecordView, /) -> str | None: ...


#: Threads that get their own SQLite connection for single-statement reads.
MAX_READERS = 32

_BLOCKING = (Status.REVOKED, Status.REJECTED, Status.STALE)
_FINAL = (Status.REVOKED, Status.REJECTED)
_SNAPSHOT_REF = re.compile(r"sha256:[0-9a-f]{64}")
_RETRIES = 20


class _Clash(Exception):
    """Another writer got there first; the command is retried from a fresh read."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _construct(env: dict[str, str]) -> LedgerApplication:
    # Several processes creating a fresh SQLite file at once can find it locked
    # while another sets WAL mode or creates the tables; that is worth waiting for.
    for attempt_number in range(60):
        try:
            return LedgerApplication(env=env)
        except (OperationalError, sqlite3.OperationalError) as exc:
            if "locked" not in str(exc) or attempt_number == 59:
                raise
            time.sleep(0.05 + 0.05 * random.random())
    raise AssertionError("unreachable")  # pragma: no cover


class Ledger:
    """An event-sourced provenance ledger (see ``Ledger.open``)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        acceptance_checks: Sequence[AcceptanceCheck] = (),
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        clock: Callable[[], datetime] = _utcnow,
        retention: Mapping[Kind | str, RetentionRule] | None = None,
    ) -> None:
        backend = resolve_url(url)
        self.url = backend.url
        self.backend = backend.kind
        self._checks = _check_acceptance_checks(acceptance_checks)
        if (
            isinstance(max_value_bytes, bool)
            or not isinstance(max_value_bytes, int)
            or max_value_bytes <= 0
        ):
            raise InvalidInputError(
                f"max_value_bytes must be a positive int, got {max_value_bytes!r}"
            )
        self._max_value_bytes = max_value_bytes
        if not callable(clock):
            raise InvalidInputError(f"clock must be callable, got {type(clock).__name__}")
        self._clock = clock
        self._retention = _check_retention(retention)
        self._closed = True
        self._now()  # a clock that does not give aware datetimes is refused now
        try:
            self._app = _construct(backend.env)
        except LedgerError:
            raise
        except (PersistenceError, sqlite3.Error, OSError, ValueError, UnicodeError) as exc:
            raise StorageError(f"cannot open ledger {backend.url!r}: {exc}") from None
        self._closed = False
        # One connection per thread for single-statement reads of an SQLite file
        # (a pool round trip costs as much as the statement); see ``_statement``.
        self._reader = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._recorder = self._app.ledger_recorder
        self._projector = self._recorder.projector
        self._projector.mapper = self._app.mapper
        self._dialect = self._recorder.dialect
        try:
            self.catch_up()
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
        retention: Mapping[Kind | str, RetentionRule] | None = None,
    ) -> Ledger:
        """Open (creating if needed) the ledger at ``url``.

        Args:
            url: ``memory:``, ``sqlite:///path.db`` or
                ``postgresql://user:password@host:port/db?schema=…``; default
                ``$PROVLEDGER_URL``, else ``sqlite:///provledger.db``.
            acceptance_checks: callables run on every ``accept``; each returns
                None to pass or a reason string to refuse.
            max_value_bytes: the largest serialised value or content accepted.
            clock: the ledger's notion of *now* (expiry checks).
            retention: per-kind ``RetentionRule``; a proposal that breaks one is
                refused with ``RetentionRuleError`` naming the rule.

        Raises:
            InvalidURLError: the URL names no supported backend.
            InvalidInputError: an option is of the wrong type.
            StorageError: the database cannot be opened or reached.
        """
        return cls(
            url,
            acceptance_checks=acceptance_checks,
            max_value_bytes=max_value_bytes,
            clock=clock,
            retention=retention,
        )

    def close(self) -> None:
        """Close the database connections. Safe to call twice."""
        if not self._closed:
            self._closed = True
            with self._readers_lock:
                readers, self._readers = self._readers, []
            for reader in readers:
                reader.close()
            self._app.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedLedgerError(f"ledger {self.url!r} is closed")

    # -- handles --------------------------------------------------------------

    def admin(self) -> Admin:
        """The trusted host's handle for grants, tokens and maintenance."""
        self._check_open()
        return Admin(self)

    def authenticate(self, token: str) -> Session:
        """A session bound to the principal the token was issued to.

        Raises:
            AuthenticationError: the token is unknown, revoked or expired.
        """
        self._check_open()
        if not isinstance(token, str) or not token:
            raise AuthenticationError("token must be a non-empty string")
        token_hash = hash_token(token)
        with self._reading() as c:
            subject = self._token_subject(c, token_hash)
        return Session(self, subject, token_hash)

    @property
    def position(self) -> int:
        """Log position of the newest event (0 for an empty ledger)."""
        self._check_open()
        return int(self._recorder.max_notification_id() or 0)

    def now(self) -> datetime:
        """The ledger's clock (what expiry checks and event timestamps use)."""
        return self._now()

    def stats(self) -> dict[str, Any]:
        """Counts: stored events, log position, records per status, deliveries, snapshots."""
        self._check_open()
        d = self._dialect
        with self._reading() as c:
            c.execute(f"SELECT COUNT(*) AS n FROM {self._recorder.events_table}")
            events = int(c.fetchone()["n"])
            c.execute(
                d.q(
                    "SELECT status, COUNT(*) AS n FROM {t}pl_records WHERE to_pos IS NULL "
                    "GROUP BY status ORDER BY status"
                )
            )
            statuses = {str(r["status"]): int(r["n"]) for r in c.fetchall()}
            counts = {}
            for table in ("pl_deliveries", "pl_corrections", "pl_snapshots", "pl_runs"):
                c.execute(d.q(f"SELECT COUNT(*) AS n FROM {{t}}{table}"))
                counts[table[3:]] = int(c.fetchone()["n"])
        return {
            "backend": self.backend,
            "events": events,
            "position": self.position,
            "records": sum(statuses.values()),
            "statuses": statuses,
            **counts,
        }

    # -- tamper evidence --------------------------------------------------------

    def digest(self) -> LogDigest:
        """The Merkle root over every event as it was appended: keep it elsewhere.

        Later, ``verify(against=digest)`` proves the log still extends it.
        """
        self._check_open()
        d = self._dialect
        with self._reading() as c:
            c.execute(d.q("SELECT position, leaf FROM {t}pl_merkle_leaves ORDER BY position"))
            last = 0

            def leaves() -> Iterator[bytes]:
                nonlocal last
                for row in fetch_in_chunks(c):
                    last = int(row["position"])
                    yield bytes(row["leaf"])

            size, root = merkle.root_of(leaves())
        return LogDigest(size=size, position=last, root=root.hex())

    def verify(
        self,
        against: LogDigest | str | None = None,
        *,
        heads: str | os.PathLike[str] | Iterable[SignedHead] | None = None,
        public_key: PublicKeyLike | None = None,
    ) -> Verification:
        """Check the whole ledger, naming the first problem (never writes).

        Kept heads' signatures; the stored event bytes against their Merkle
        leaves; RFC 6962 consistency of the log with every kept head (``heads=``
        a heads file or heads, ``public_key=`` their KEY.pub) and with
        ``against`` (a digest kept elsewhere); authorization replay; the views
        against a replay of the log; the evidence bytes. See
        :mod:`ledger.verification`.

        Raises:
            InvalidInputError: ``against`` is not a digest, or heads without a key.
        """
        return verification.verify(self, against, heads=heads, public_key=public_key)

    def signed_head(self, private_key: PrivateKeyLike) -> SignedHead:
        """A signed tree head of the log now (keep it outside the operator's reach)."""
        return heads_module.signed_head(self, private_key)

    def _leaf_pairs(self) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        """(position, leaf recomputed from the stored event, leaf stored at append time)."""
        d = self._dialect
        with self._reading() as c:
            after = 0
            while True:
                notes = self._recorder.read_after(c, after, 1000)
                upper = notes[-1].id if notes else None
                if upper is None:
                    c.execute(
                        d.q("SELECT position, leaf FROM {t}pl_merkle_leaves WHERE position > ?"),
                        (after,),
                    )
                else:
                    c.execute(
                        d.q(
                            "SELECT position, leaf FROM {t}pl_merkle_leaves "
                            "WHERE position > ? AND position <= ?"
                        ),
                        (after, upper),
                    )
                stored = {int(r["position"]): bytes(r["leaf"]) for r in c.fetchall()}
                events = {
                    n.id: merkle.leaf_hash(
                        merkle.leaf_data(
                            n.id, n.originator_id, n.originator_version, n.topic, n.state
                        )
                    )
                    for n in notes
                }
                for position in sorted(set(stored) | set(events)):
                    yield position, events.get(position), stored.get(position)
                if upper is None:
                    return
                after = upper

    # -- maintenance ----------------------------------------------------------

    def catch_up(self) -> int:
        """Apply any events the views have not seen; returns how many.

        Cheap when the views are current (one read); otherwise takes the writers'
        lock first, so concurrent writers and catch-ups never apply an event twice.
        """
        self._check_open()
        with self._reading() as c:
            behind = self._projector.tracking(c) < int(self._recorder.max_notification_id() or 0)
        if not behind:
            return 0
        with self._writing() as c:
            self._recorder.lock_for_write(c)
            return self._projector.catch_up(c)

    def views_digest(self) -> str:
        """Order-independent digest of every view row."""
        self._check_open()
        with self._reading() as c:
            return self._projector.digest(c)

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> RebuildReport:
        """Drop every view, replay the whole log in batches, compare digests.

        Streams the log (memory does not grow with its length). ``progress`` is
        called with (log position reached, log position to reach).
        """
        self._check_open()
        if progress is not None and not callable(progress):
            raise InvalidInputError(f"progress must be callable, got {type(progress).__name__}")
        applied = 0
        # One transaction: a crash or a corrupt event part-way leaves the old views
        # exactly as they were, and writers wait instead of seeing half-built views.
        with self._writing() as c:
            self._recorder.lock_for_write(c)
            # Under the lock, so no other writer slips in between the two digests.
            before = self._projector.digest(c)
            target = self._recorder.max_position(c)
            started = time.perf_counter()
            self._projector.drop_tables(c)
            self._projector.create_tables(c)
            for batch in self._projector.pending(c):
                self._projector._apply(c, batch)
                applied += len(batch)
                if progress is not None:
                    progress(batch[-1][0], target)
        seconds = time.perf_counter() - started
        return RebuildReport(
            events=applied, seconds=seconds, digest_before=before, digest_after=self.views_digest()
        )

    # -- internals shared with Session and Admin -------------------------------

    @contextmanager
    def _reading(self) -> Iterator[Cursor]:
        self._check_open()
        if self.backend == "postgresql":
            # One snapshot for every statement of a read (SQLite's read transactions
            # already are one), begun in the same round trip as the transaction.
            datastore: Any = self._recorder.datastore
            with datastore.get_connection() as conn:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                try:
                    with conn.cursor() as cursor:
                        yield cursor
                finally:
                    conn.execute("ROLLBACK")
            return
        held = self._own_reader() if self.backend == "sqlite" else None
        if held is not None and not held.busy:
            # This thread's own connection (no pool round trip); a read begun
            # inside another one on the same thread takes a pooled connection.
            held.busy = True
            cursor = held.connection.cursor()
            try:
                cursor.execute("BEGIN")
                yield cursor
            finally:
                held.busy = False
                held.connection.rollback()
            return
        with self._recorder.datastore.transaction(commit=False) as c:
            yield c

    @contextmanager
    def _statement(self) -> Iterator[Cursor]:
        """A cursor outside any explicit transaction, for a read that is one SQL
        statement (a statement always sees one snapshot); no BEGIN/ROLLBACK."""
        self._check_open()
        datastore: Any = self._recorder.datastore
        if self.backend == "postgresql":
            with datastore.get_connection() as conn, conn.cursor() as cursor:
                yield cursor
        elif (
            self.backend == "sqlite"
            and (held := self._own_reader()) is not None
            and not held.busy  # inside this thread's read transaction: a fresh view
        ):
            # Not for memory: (a shared-cache database): there eventsourcing's pool
            # keeps readers and writers apart.
            yield held.connection.cursor()
        else:
            with datastore.get_connection(commit=False) as conn:
                yield conn.cursor()

    def _own_reader(self) -> _Reader | None:
        """This thread's reading connection, opened on first use; None once
        ``MAX_READERS`` threads have one (the pool serves the rest)."""
        held: _Reader | None = getattr(self._reader, "held", None)
        if held is None:
            with self._readers_lock:
                self._check_open()
                if len(self._readers) >= MAX_READERS:
                    return None
                datastore: Any = self._recorder.datastore
                held = _Reader(datastore.pool._create_connection()._sqlite_conn, self)
                self._readers.append(held.connection)
            self._reader.held = held
        return held

    @contextmanager
    def _writing(self) -> Iterator[Cursor]:
        self._check_open()
        with self._recorder.datastore.transaction(commit=True) as c:
            yield c

    def _now(self) -> datetime:
        try:
            now = self._clock()
        except Exception as exc:
            raise InvalidInputError(f"the ledger's clock failed: {exc!r}") from None
        return check_aware(now, "the ledger's clock")

    def _check_future(self, when: datetime, what: str) -> None:
        if when <= self._now():
            raise ExpiryInPastError(f"{what} {when.isoformat()} is not in the future")

    def _save(
        self, *aggregates: Any, guard: Guard | None = None, snapshots: Sequence[Any] = ()
    ) -> int:
        """Append the aggregates' pending events; returns the last position."""
        events = [event for aggregate in aggregates for event in aggregate.collect_events()]
        return self._append(events, guard=guard, snapshots=snapshots)

    def _append(
        self, events: Sequence[Any], *, guard: Guard | None = None, snapshots: Sequence[Any] = ()
    ) -> int:
        """Store domain events through eventsourcing's event store and recorder in
        one transaction (guard, views, Merkle leaves and snapshots included);
        returns the last position.

        A version clash (another writer appended to the same aggregate) or a
        locked database raises ``_Clash``, so the command is retried from a
        fresh read.
        """
        if not events:
            return self.position
        try:
            recordings = self._app.events.put(
                events, guard=guard, snapshots=snapshots, ledger_events=events
            )
        except IntegrityError:
            raise _Clash() from None
        except OperationalError as exc:
            message = str(exc).lower()
            if any(word in message for word in ("locked", "busy", "lock timeout", "deadlock")):
                raise _Clash() from None
            raise
        return max((r.notification.id for r in recordings), default=0)

    def _retrying(self, attempt: Callable[[], T]) -> T:
        for attempt_number in range(_RETRIES):
            try:
                return attempt()
            except _Clash:
                # Jittered exponential backoff, capped at ~0.2 s.
                time.sleep(min(0.2, 0.002 * 2**attempt_number) * random.random())
        raise ConcurrencyError(
            f"another writer kept changing the same records; gave up after {_RETRIES} tries"
        )

    def _token_subject(self, c: Cursor, token_hash: str) -> str:
        return self._check_token(access_view.token(c, self._dialect, token_hash))

    def _check_token(self, row: Mapping[str, Any] | None) -> str:
        """The subject of a token row (``subject``, ``revoked_pos``, ``expires``) that
        is valid now; raises ``AuthenticationError`` otherwise."""
        if row is None:
            raise AuthenticationError("token is unknown")
        if row["revoked_pos"] is not None:
            raise AuthenticationError(f"token of {row['subject']!r} was revoked")
        if row["expires"] is not None and datetime_to_micros(self._now()) >= row["expires"]:
            raise AuthenticationError(
                f"token of {row['subject']!r} expired at "
                f"{micros_to_datetime(row['expires']).isoformat()}"
            )
        return str(row["subject"])

    def _record(self, record_id: str, c: Cursor | None = None) -> Record:
        """The record's aggregate from its stored events (read with ``c``, in the
        caller's transaction, when given)."""
        try:
            found: Any = None
            if c is None:
                found = self._app.repository.get(record_uuid(record_id))
            else:
                notes = self._recorder.select_record_events(c, record_uuid(record_id))
                if not notes:
                    raise AggregateNotFoundError(record_id)
                for note in notes:
                    event: Any = self._app.mapper.to_domain_event(note)
                    found = event.mutate(found)
        except AggregateNotFoundError:
            raise UnknownRecordError(f"record {record_id!r} is unknown") from None
        except (
            MapperDeserialisationError,
            TopicError,
            TypeError,
            AttributeError,
            ValueError,
            KeyError,
            OriginatorVersionError,
            OriginatorIDError,
        ) as exc:
            raise CorruptEventError(
                f"record {record_id!r} has a stored event that cannot be decoded: {exc!r}"
            ) from None
        if not isinstance(found, Record):
            raise CorruptEventError(f"record {record_id!r} has stored events of another kind")
        return found


class _Reader:
    """A thread's reading connection; closed when its thread ends (the thread's
    local data is dropped) or when the ledger closes, whichever comes first."""

    def __init__(self, connection: sqlite3.Connection, ledger: Ledger) -> None:
        self.connection = connection
        self.busy = False  # a read transaction is open on it
        self._ledger = weakref.ref(ledger)

    def __del__(self) -> None:
        ledger = self._ledger()
        if ledger is not None:
            with ledger._readers_lock:
                if self.connection in ledger._readers:
                    ledger._readers.remove(self.connection)
        self.connection.close()


class Session:
    """What one authenticated principal may do; every call re-checks its token.

    A session from :meth:`as_of` is read-only: it answers as the ledger did right
    after a log position, and every write raises ``ReadOnlyError``.
    """

    def __init__(
        self,
        ledger: Ledger,
        subject: str,
        token_hash: str,
        *,
        position: int | None = None,
        at: datetime | None = None,
        run: RunContext | None = None,
    ) -> None:
        self._ledger = ledger
        self._subject = subject
        self._token_hash = token_hash
        self._position = position
        self._as_of_at = at
        self._run = run
        self._role_cache: dict[int, dict[str, list[str]]] = {}

    @property
    def principal(self) -> str:
        """The authenticated subject."""
        return self._subject

    @property
    def position(self) -> int | None:
        """The as-of log position, or None for a live session."""
        return self._position

    @property
    def read_only(self) -> bool:
        """True for as-of sessions."""
        return self._position is not None

    # -- plumbing -------------------------------------------------------------

    @contextmanager
    def _ctx(self) -> Iterator[Cursor]:
        with self._ledger._reading() as c:
            # The token and every role of its subject in one statement; the roles
            # serve this read transaction (one snapshot) until it ends. Guards
            # under the write lock read them again.
            self._role_cache[id(c)] = self._authenticated(c)
            try:
                yield c
            finally:
                del self._role_cache[id(c)]

    def _writable(self, command: str) -> None:
        if self._position is not None:
            raise ReadOnlyError(
                f"{command} refused: this session is read-only (as of position {self._position})"
            )

    def _authenticated(self, c: Cursor) -> dict[str, list[str]]:
        """Check the token (``AuthenticationError``); its subject's roles by scope."""
        row, roles = access_view.token_and_roles(c, self._ledger._dialect, self._token_hash)
        self._ledger._check_token(row)
        return roles

    def _roles(self, c: Cursor, scope: str) -> list[str]:
        cache = self._role_cache.get(id(c))
        if cache is None:
            return access_view.roles_of(c, self._ledger._dialect, self._subject, scope)
        return cache.get(scope, [])

    def _require(self, c: Cursor, scope: str, role: Role, command: str) -> None:
        if role.value not in self._roles(c, scope):
            raise self._denied(scope, role, command)

    def _denied(self, scope: str, role: Role, command: str) -> AccessDeniedError:
        return AccessDeniedError(
            f"{command} refused: {self._subject!r} lacks role {role.value!r} in scope {scope!r}"
        )

    def _locked(self, scope: str, role: Role, command: str, guard: Guard | None = None) -> Guard:
        """A guard re-checking the token and the role under the write lock (a grant
        or token revoked between the read and the write stops the command), then
        running ``guard``."""

        def check(c: Cursor) -> None:
            if role.value not in self._authenticated(c).get(scope, ()):
                raise self._denied(scope, role, command)
            if guard is not None:
                guard(c)

        return check

    def _visible(
        self, c: Cursor, record_id: object, role: Role, command: str, what: str = "record"
    ) -> Any:
        """The record's row if the principal may see it and holds ``role`` there.

        A record in a scope the principal has no grant in looks exactly like one
        that does not exist.
        """
        rid = check_id(record_id, f"{what} id")
        row = validity_view.current(c, self._ledger._dialect, rid, self._position)
        if row is None or not self._roles(c, row["scope"]):
            raise UnknownRecordError(
                f"{command} refused: {what} {rid!r} is unknown or not visible to {self._subject!r}"
            )
        self._require(c, row["scope"], role, command)
        return row

    def _at(self, at: datetime | None) -> datetime:
        if at is not None:
            return check_aware(at, "at")
        if self._as_of_at is not None:
            return self._as_of_at
        return self._ledger._now()

    def _view(
        self, c: Cursor | None, row: Any, at: datetime, deliveries: bool = True
    ) -> RecordView:
        """The public view of a record row (``deliveries=False``: the caller knows it
        has none, so they are not looked up)."""
        d = self._ledger._dialect
        delivered = []
        for drow in (
            delivery_view.for_record(c, d, row["record_id"], self._position)
            if deliveries and c is not None
            else ()
        ):
            assert c is not None
            corrections = tuple(
                _correction(r)
                for r in delivery_view.corrections_for(c, d, drow["delivery_id"], self._position)
            )
            delivered.append(_delivery(drow, corrections))
        eff = row["eff_expires"]
        return RecordView(
            id=row["record_id"],
            scope=row["scope"],
            claim_key=row["claim_key"],
            kind=Kind(row["kind"]),
            value=unpack(row["value"]),
            status=Status(row["status"]),
            validity=_validity(row, at),
            expires=None if row["expires"] is None else micros_to_datetime(row["expires"]),
            effective_expires=None if eff is None else micros_to_datetime(eff),
            expiry_source=row["eff_source"],
            parents=tuple(unpack(row["parents"])),
            observed=tuple(unpack(row["observed"])),
            conditions=unpack(row["conditions"]),
            proposer=row["proposer"],
            created_at=micros_to_datetime(row["created_at"]),
            evidence=None if row["evidence"] is None else unpack(row["evidence"]),
            cause=row["cause_root"],
            reason=row["reason"],
            deliveries=tuple(delivered),
            position=row["from_pos"],
        )

    def _note_reads(self, record_ids: Iterable[str], how: str) -> None:
        if self._run is not None:
            self._run._record_reads(tuple(record_ids), how)

    def sync(self) -> int:
        """Make this session's next read reflect every command committed anywhere.

        Views are updated in the same transaction as the events by every writer,
        so a read in one process after a command in another has returned already
        sees it; ``sync`` additionally applies any events written while a view was
        stopped. Returns the log position (the views have then applied all of it).
        """
        self._writable("sync")
        with self._ctx():
            pass
        self._ledger.catch_up()
        return self._ledger.position

    # -- reads ----------------------------------------------------------------

    def read(
        self,
        scope: str,
        claim_key: str,
        at: datetime | None = None,
        context: Mapping[str, Any] | None = None,
        kinds: Iterable[Kind | str] | None = None,
    ) -> ReadResult:
        """Apply the eligibility chain to ``(scope, claim_key)``.

        Scope (the principal's grants) → status and expiry of the record and
        every ancestor at ``at`` → conditions matched by ``context`` → conflict.

        Raises:
            AccessDeniedError: no ``read`` role in ``scope``.
        """
        explanation = self.explain(scope, claim_key, at=at, context=context, kinds=kinds)
        usable = tuple(e.record for e in explanation.entries if e.usable)
        self._note_reads((r.id for r in usable), "read")
        return ReadResult(
            outcome=explanation.outcome,
            records=usable,
            scope=scope,
            claim_key=claim_key,
            at=explanation.at,
        )

    def explain(
        self,
        scope: str,
        claim_key: str,
        at: datetime | None = None,
        context: Mapping[str, Any] | None = None,
        kinds: Iterable[Kind | str] | None = None,
    ) -> Explanation:
        """Say, per record for ``(scope, claim_key)``, why it is or is not usable.

        Raises:
            AccessDeniedError: no ``read`` role in ``scope``.
        """
        check_id(scope, "scope")
        check_text(claim_key, "claim_key", max_len=512)
        when = self._at(at)
        ctx = _check_context(context)
        wanted = None if kinds is None else {check_kind(k) for k in _as_list(kinds, "kinds")}
        ledger = self._ledger
        # Token, roles and the claim's rows in one statement, outside a transaction;
        # a record with deliveries needs more statements, so then the whole read is
        # done again in one read transaction.
        with ledger._statement() as c:
            rows = validity_view.for_claim_as(
                c, ledger._dialect, self._token_hash, scope, claim_key, self._position
            )
        if any(row["has_deliveries"] for row in rows):
            with ledger._reading() as c:
                return self._explain(c, scope, claim_key, when, ctx, wanted)
        return self._explain(None, scope, claim_key, when, ctx, wanted, rows)

    def _explain(
        self,
        c: Cursor | None,
        scope: str,
        claim_key: str,
        when: datetime,
        ctx: dict[str, Any],
        wanted: set[Kind] | None,
        rows: list[Any] | None = None,
    ) -> Explanation:
        """``explain`` on the rows of ``for_claim_as`` (read with ``c`` when not given)."""
        ledger = self._ledger
        if rows is None:
            assert c is not None
            rows = validity_view.for_claim_as(
                c, ledger._dialect, self._token_hash, scope, claim_key, self._position
            )
        head = rows[0] if rows else None
        ledger._check_token(
            None
            if head is None
            else {
                "subject": head["tok_subject"],
                "revoked_pos": head["tok_revoked"],
                "expires": head["tok_expires"],
            }
        )
        assert head is not None
        if Role.READ.value not in (head["tok_roles"] or "").split(","):
            raise self._denied(scope, Role.READ, "read")
        entries = []
        for row in rows:
            if row["record_id"] is None:
                continue
            view = self._view(c, row, when, deliveries=c is not None)
            reasons = _blocking_reasons(row, when, ctx, wanted)
            entries.append(Reason(record=view, usable=not reasons, reasons=reasons))
        usable = [e.record for e in entries if e.usable]
        if not usable:
            outcome = Outcome.MISSING
        elif len(usable) > 1 and len({canonical(r.value) for r in usable}) > 1:
            outcome = Outcome.CONFLICT
        else:
            outcome = Outcome.FOUND
        return Explanation(
            outcome=outcome, scope=scope, claim_key=claim_key, at=when, entries=tuple(entries)
        )

    def get(self, record_id: str) -> RecordView:
        """One record with its status, validity and deliveries.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``read`` role in the record's scope.
        """
        with self._ctx() as c:
            row = self._visible(c, record_id, Role.READ, "get")
            view = self._view(c, row, self._at(None))
        self._note_reads((view.id,), "get")
        return view

    def audit(self, record_id: str) -> AuditTrail:
        """The whole history of a record (revoked ones included), event by event.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``audit`` role in the record's scope.
        """
        ledger = self._ledger
        with self._ctx() as c:
            row = self._visible(c, record_id, Role.AUDIT, "audit")
            view = self._view(c, row, self._at(None))
            notes = ledger._recorder.select_record_events(c, record_uuid(view.id))
        events = []
        for note in notes:
            if self._position is not None and note.id > self._position:
                break
            event = ledger._projector.decode(note)
            details = {
                k: v
                for k, v in vars(event).items()
                if k
                not in (
                    "originator_id",
                    "originator_version",
                    "timestamp",
                    "actor",
                    "originator_topic",
                )
            }
            events.append(
                AuditEvent(
                    position=note.id,
                    type=type(event).__name__,
                    at=event.timestamp,
                    actor=getattr(event, "actor", None),
                    details=details,
                )
            )
        return AuditTrail(record=view, events=tuple(events), undeclared=view.undeclared)

    def history(
        self,
        record: str | None = None,
        type: str | None = None,
        start: int | None = None,
        stop: int | None = None,
    ) -> tuple[AuditEvent, ...]:
        """Record events of the log in position order, optionally filtered.

        Lists only events of records in scopes where the principal holds
        ``audit``; the others are skipped as if absent. ``record`` narrows the
        list to one record, ``type`` to one event type (``Proposed``,
        ``Revoked``, …), ``start``/``stop`` to an inclusive position range. Each
        event's ``details`` name its ``record_id``. An as-of session lists
        nothing after its position.

        Raises:
            UnknownRecordError: ``record`` is unknown or not visible.
            AccessDeniedError: no ``audit`` role in ``record``'s scope.
            InvalidInputError: an unknown event type, or a position that is not one.
        """
        if type is not None and type not in _RECORD_EVENTS:
            raise InvalidInputError(
                f"history type {type!r} is not one of: {', '.join(_RECORD_EVENTS)}"
            )
        for bound, what in ((start, "start"), (stop, "stop")):
            if bound is not None and (
                isinstance(bound, bool) or not isinstance(bound, int) or not 0 <= bound < 2**62
            ):
                raise InvalidInputError(f"history {what} {bound!r} is not a position")
        first = start or 0
        last = min(
            stop if stop is not None else 1 << 62,
            self._position if self._position is not None else 1 << 62,
        )
        ledger = self._ledger
        d = ledger._dialect
        prefix = _RECORD_TOPIC + "."
        out: list[AuditEvent] = []
        with self._ctx() as c:

            def log() -> Iterator[Any]:
                after = max(first - 1, 0)
                while True:
                    batch = ledger._recorder.read_after(c, after, 1000)
                    if not batch or batch[0].id > last:
                        return
                    yield from batch
                    after = batch[-1].id

            notes: Iterable[Any]
            if record is not None:
                row = self._visible(c, record, Role.AUDIT, "history")
                notes = ledger._recorder.select_record_events(c, record_uuid(row["record_id"]))
            else:
                notes = log()
            records: dict[Any, tuple[str, bool]] = {}  # aggregate id -> (record id, may audit)
            for note in notes:
                if note.id < first or not note.topic.startswith(prefix):
                    continue
                if note.id > last:
                    break
                if type is not None and note.topic[len(prefix) :] != type:
                    continue
                if note.originator_id not in records:
                    try:
                        rid = validity_view.record_id_of(c, d, note.originator_id)
                    except LookupError:
                        raise CorruptEventError(
                            f"stored event at position {note.id} belongs to no proposed record"
                        ) from None
                    scope = validity_view.current(c, d, rid)["scope"]
                    records[note.originator_id] = (rid, Role.AUDIT.value in self._roles(c, scope))
                rid, allowed = records[note.originator_id]
                if allowed:
                    out.append(_history_event(note.id, ledger._projector.decode(note), rid))
        return tuple(out)

    def prove(self, record_id: str) -> tuple[InclusionProof, ...]:
        """Inclusion proofs of every event of a record in the current Merkle tree.

        A third party checks each with ``proof.verify()`` (or the few lines of
        ``ledger.merkle.verify_inclusion``) against a digest it trusts.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``audit`` role in the record's scope.
        """
        ledger = self._ledger
        d = ledger._dialect
        with self._ctx() as c:
            row = self._visible(c, record_id, Role.AUDIT, "prove")
            notes = ledger._recorder.select_record_events(c, record_uuid(row["record_id"]))
            c.execute(d.q("SELECT position, leaf FROM {t}pl_merkle_leaves ORDER BY position"))
            positions: list[int] = []
            leaves: list[bytes] = []
            for leaf_row in fetch_in_chunks(c):
                positions.append(int(leaf_row["position"]))
                leaves.append(bytes(leaf_row["leaf"]))
        size, root = merkle.root_of(leaves)
        index_of = {p: i for i, p in enumerate(positions)}
        proofs = []
        for note in notes:
            index = index_of.get(note.id)
            if index is None:
                continue
            data = merkle.leaf_data(
                note.id, note.originator_id, note.originator_version, note.topic, note.state
            )
            proofs.append(
                InclusionProof(
                    position=note.id,
                    index=index,
                    size=size,
                    leaf_data=data.hex(),
                    path=tuple(p.hex() for p in merkle.inclusion_path(leaves, index)),
                    root=root.hex(),
                )
            )
        return tuple(proofs)

    def snapshot(self, ref: str) -> bytes:
        """The captured bytes for ``ref``, re-verified against their hash.

        Raises:
            UnknownSnapshotError: no such snapshot, or no evidence with it is readable.
            SnapshotIntegrityError: the stored bytes no longer match the hash.
            SnapshotErasedError: an admin erased the bytes (``Admin.erase_snapshot``).
        """
        if not isinstance(ref, str) or not _SNAPSHOT_REF.fullmatch(ref):
            raise UnknownSnapshotError(f"snapshot {ref!r} is not a sha256:<hex> reference")
        d = self._ledger._dialect
        with self._ctx() as c:
            c.execute(
                d.q(
                    "SELECT DISTINCT scope FROM {t}pl_records WHERE snapshot_ref=? "
                    "AND to_pos IS NULL"
                ),
                (ref,),
            )
            scopes = [r["scope"] for r in c.fetchall()]
            readable = any(Role.READ.value in self._roles(c, s) for s in scopes)
            c.execute(d.q("SELECT content FROM {t}pl_snapshots WHERE ref=?"), (ref,))
            row = c.fetchone() if readable else None
            if readable and row is None:
                erasure.check_not_erased(self._ledger, c, ref)
        if row is None:
            raise UnknownSnapshotError(
                f"snapshot {ref!r} is unknown or not readable by {self._subject!r}"
            )
        stored = row["content"]
        content = bytes(stored) if isinstance(stored, (bytes, bytearray, memoryview)) else None
        if content is None or "sha256:" + hashlib.sha256(content).hexdigest() != ref:
            raise SnapshotIntegrityError(f"snapshot {ref!r}: stored bytes do not match the hash")
        return content

    def as_of(self, position: int | None = None, time: datetime | None = None) -> Session:
        """A read-only session answering as the ledger did then.

        Give exactly one of ``position`` (right after the transaction that
        appended that log position: a command's events are only ever seen
        together) or ``time`` (the newest position recorded at or before that
        instant). Reads
        default ``at`` to that moment; pass ``at=`` for bitemporal questions.

        Raises:
            InvalidInputError: neither or both given, or a position beyond the log.
        """
        if (position is None) == (time is None):
            raise InvalidInputError("as_of needs exactly one of position= or time=")
        d = self._ledger._dialect
        with self._ctx() as c:
            if position is not None:
                if isinstance(position, bool) or not isinstance(position, int) or position < 0:
                    raise InvalidInputError(f"as_of position {position!r} is not a position")
                newest = self._ledger.position
                if position > newest:
                    raise InvalidInputError(
                        f"as_of position {position} is beyond the log (newest is {newest})"
                    )
                pos = timeline.commit_end(c, d, position)
                at_micros = timeline.time_of(c, d, pos)
                at = None if at_micros is None else micros_to_datetime(at_micros)
            else:
                when = check_aware(time, "as_of time")
                pos = timeline.commit_end(
                    c, d, timeline.position_at(c, d, datetime_to_micros(when))
                )
                at = when
        return Session(
            self._ledger, self._subject, self._token_hash, position=pos, at=at or _EPOCH_AT
        )

    def corrections_due(self) -> tuple[CorrectionDue, ...]:
        """Deliveries whose record is no longer VALID and that have no correction since.

        Only scopes where the principal holds ``deliver`` are listed.
        """
        d = self._ledger._dialect
        now = self._at(None)
        out = []
        with self._ctx() as c:
            bound = self._position if self._position is not None else (1 << 62)
            c.execute(
                d.q("SELECT * FROM {t}pl_deliveries WHERE position <= ? ORDER BY position"),
                (bound,),
            )
            for drow in list(c.fetchall()):
                row = validity_view.current(c, d, drow["record_id"], self._position)
                if Role.DELIVER.value not in self._roles(c, row["scope"]):
                    continue
                validity = _validity(row, now)
                if validity == Validity.VALID:
                    continue
                since = max(drow["position"], row["left_valid_pos"] or 0)
                corrections = delivery_view.corrections_for(
                    c, d, drow["delivery_id"], self._position
                )
                if any(r["position"] > since for r in corrections):
                    continue
                out.append(
                    CorrectionDue(
                        delivery=_delivery(drow, tuple(_correction(r) for r in corrections)),
                        validity=validity,
                        status=Status(row["status"]),
                        cause=row["cause_root"],
                        reason=row["reason"],
                    )
                )
        return tuple(out)

    # -- writes ---------------------------------------------------------------

    def capture(
        self,
        scope: str,
        uri: str,
        content: bytes,
        fetched_at: datetime | None = None,
        claim_key: str | None = None,
        expires: datetime | None = None,
        conditions: Mapping[str, Any] | None = None,
        id: str | None = None,
        value: Any = None,
    ) -> str:
        """Store ``content`` in the snapshot store and propose an ``evidence`` record.

        The record carries ``uri``, ``fetched_at``, ``content_hash`` and
        ``snapshot_ref`` (``sha256:<hex>``). Its value defaults to the content hash;
        its claim key to ``source:<uri>``.

        Raises:
            InvalidValueError: content is not bytes, or uri is empty.
            ValueTooLargeError: content is over the size limit.
        """
        self._writable("capture")
        check_text(uri, "uri", max_len=2048)
        if not isinstance(content, (bytes, bytearray, memoryview)):
            raise InvalidValueError(f"content must be bytes, got {type(content).__name__}")
        data = bytes(content)
        if len(data) > self._ledger._max_value_bytes:
            raise ValueTooLargeError(
                f"content of {uri!r} is {len(data)} bytes; the limit is "
                f"{self._ledger._max_value_bytes}"
            )
        fetched = (
            self._ledger._now() if fetched_at is None else check_aware(fetched_at, "fetched_at")
        )
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        evidence = {
            "uri": uri,
            "fetched_at": fetched,
            "content_hash": digest,
            "snapshot_ref": digest,
            "size": len(data),
        }
        return self._propose(
            scope=scope,
            claim_key=claim_key if claim_key is not None else f"source:{uri}",
            value=digest if value is None else value,
            kind=Kind.EVIDENCE,
            parents=(),
            expires=expires,
            conditions=conditions,
            record_id=id,
            evidence=evidence,
            snapshots=((digest, data),),
        )

    def propose(
        self,
        scope: str,
        claim_key: str,
        value: Any,
        kind: Kind | str,
        parents: Iterable[str] = (),
        expires: datetime | None = None,
        conditions: Mapping[str, Any] | None = None,
        id: str | None = None,
    ) -> str:
        """Propose a record; it is a ``CANDIDATE`` until an approver accepts it.

        Returns the record id (given or generated).

        Raises:
            AccessDeniedError: no ``propose`` role in ``scope``.
            InvalidIdError, InvalidKindError, InvalidValueError, ValueTooLargeError,
            NaiveDatetimeError, ExpiryInPastError: bad input.
            DuplicateRecordError: the id is taken.
            InvalidParentError, CycleError: a parent is unknown, unreadable or unusable.
        """
        self._writable("propose")
        return self._propose(
            scope=scope,
            claim_key=claim_key,
            value=value,
            kind=kind,
            parents=parents,
            expires=expires,
            conditions=conditions,
            record_id=id,
            evidence=None,
            snapshots=(),
        )

    def propose_many(self, items: Iterable[Mapping[str, Any]]) -> list[str]:
        """Propose many records in one transaction: all of them or none.

        Each item is a mapping of ``propose`` keyword arguments (``scope``,
        ``claim_key``, ``value``, ``kind``, and optionally ``parents``,
        ``expires``, ``conditions``, ``id``). An item may name an earlier item of
        the same batch as a parent. Returns the ids in order.

        Raises:
            The errors of ``propose``; the message starts with the item's index.
        """
        self._writable("propose_many")
        batch = _as_list(items, "items")
        allowed = {"scope", "claim_key", "value", "kind", "parents", "expires", "conditions", "id"}
        records: list[Record.Proposed] = []
        pending: dict[str, str] = {}
        with self._ctx() as c:
            mentioned = _mentioned_ids(batch)
            found = validity_view.current_many(c, self._ledger._dialect, mentioned)
            known = {rid: found.get(rid) for rid in mentioned}
            for index, item in enumerate(batch):
                try:
                    if not isinstance(item, Mapping):
                        raise InvalidInputError(f"must be a mapping, got {type(item).__name__}")
                    odd = [k for k in item if not isinstance(k, str)]
                    if odd:
                        raise InvalidInputError(f"field names must be strings, got {odd[0]!r}")
                    unknown = sorted(set(item) - allowed)
                    if unknown:
                        raise InvalidInputError(f"unknown field {unknown[0]!r}")
                    missing = [k for k in ("scope", "claim_key", "value", "kind") if k not in item]
                    if missing:
                        raise InvalidInputError(f"missing field {missing[0]!r}")
                    record = self._prepare(
                        c,
                        pending,
                        known,
                        scope=item["scope"],
                        claim_key=item["claim_key"],
                        value=item["value"],
                        kind=item["kind"],
                        parents=item.get("parents", ()),
                        expires=item.get("expires"),
                        conditions=item.get("conditions"),
                        record_id=item.get("id"),
                        evidence=None,
                    )
                except LedgerError as exc:
                    raise type(exc)(f"propose_many item {index}: {exc}") from None
                pending[record.record_id] = record.scope
                records.append(record)
        self._commit(records, ())
        return [r.record_id for r in records]

    def _propose(self, snapshots: Sequence[tuple[str, bytes]] = (), **fields: Any) -> str:
        """One proposal: ``fields`` are ``_prepare``'s keyword arguments."""
        with self._ctx() as c:
            record = self._prepare(c, {}, None, **fields)
        self._commit([record], snapshots)
        return record.record_id

    def _prepare(
        self,
        c: Cursor,
        pending: Mapping[str, str],
        known: Mapping[str, Any] | None,
        *,
        scope: str,
        claim_key: str,
        value: Any,
        kind: Kind | str,
        parents: Iterable[str],
        expires: datetime | None,
        conditions: Mapping[str, Any] | None,
        record_id: str | None,
        evidence: dict[str, Any] | None,
    ) -> Record.Proposed:
        """Validate one proposal completely and build its event (nothing written).

        ``pending`` maps ids proposed earlier in the same batch to their scopes;
        ``known`` holds current view rows read for the whole batch up front (a
        record id it has no key for is looked up).
        """
        ledger = self._ledger
        check_id(scope, "scope")
        check_text(claim_key, "claim_key", max_len=512)
        the_kind = check_kind(kind)
        the_value = check_value(value, "value", ledger._max_value_bytes)
        the_conditions = _check_conditions(conditions, ledger._max_value_bytes)
        if expires is not None:
            ledger._check_future(check_aware(expires, "expires"), "expires")
        rule = ledger._retention.get(the_kind)
        if rule is not None:
            rule.check(the_kind, expires, ledger._now())
        rid = check_id(record_id) if record_id is not None else f"r-{uuid.uuid4().hex}"
        declared = tuple(
            dict.fromkeys(check_id(p, "parent id") for p in _as_list(parents, "parents"))
        )
        if rid in declared:
            raise CycleError(f"record {rid!r} cannot be its own parent")
        observed = self._run.observed_for(declared) if self._run is not None else ()
        self._require(c, scope, Role.PROPOSE, "propose")
        if rid in pending or self._row(c, rid, known) is not None:
            raise DuplicateRecordError(f"record {rid!r} already exists")
        for dep in declared:
            if dep in pending and Role.READ.value in self._roles(c, pending[dep]):
                continue
            self._check_dependency(c, dep, "parent", rid, known)
        for dep in observed:
            self._check_dependency(c, dep, "observed dependency", rid, known)
        return Record.proposed_event(
            at=ledger._now(),
            record_id=rid,
            scope=scope,
            claim_key=claim_key,
            kind=the_kind.value,
            value=the_value,
            actor=self._subject,
            expires=expires,
            parents=declared,
            observed=observed,
            conditions=the_conditions,
            evidence=evidence,
            run_id=self._run.run_id if self._run is not None else None,
        )

    def _row(self, c: Cursor, rid: str, known: Mapping[str, Any] | None) -> Any:
        if known is not None and rid in known:
            return known[rid]
        return validity_view.current(c, self._ledger._dialect, rid)

    def _commit(
        self, records: Sequence[Record.Proposed], snapshots: Sequence[tuple[str, bytes]]
    ) -> None:
        ledger = self._ledger
        new = {r.record_id for r in records}
        deps = [
            (r.record_id, d) for r in records for d in (*r.parents, *r.observed) if d not in new
        ]

        def guard(c: Cursor) -> None:
            # Under the write lock: no parent became unusable since we checked.
            rows = validity_view.current_many(c, ledger._dialect, (dep for _, dep in deps))
            for rid, dep in deps:
                row = rows.get(dep)
                if row is None or row["status"] in _BLOCKING:
                    raise InvalidParentError(
                        f"propose refused: dependency {dep!r} of {rid!r} became "
                        f"{row['status'] if row else 'unknown'} meanwhile"
                    )

        checked: Guard = guard
        for scope in {r.scope for r in records}:
            checked = self._locked(scope, Role.PROPOSE, "propose", checked)
        try:
            ledger._append(records, guard=checked, snapshots=snapshots)
        except _Clash:
            with ledger._reading() as c:
                taken = validity_view.current_many(
                    c, ledger._dialect, (r.record_id for r in records)
                )
            if taken:
                first = next(r.record_id for r in records if r.record_id in taken)
                raise DuplicateRecordError(f"record {first!r} already exists") from None
            raise ConcurrencyError(
                "propose refused: the database stayed locked by other writers"
            ) from None

    def _check_readable(
        self, c: Cursor, dep: str, what: str, child: str, known: Mapping[str, Any] | None = None
    ) -> Any:
        row = self._row(c, dep, known)
        if row is None or Role.READ.value not in self._roles(c, row["scope"]):
            raise InvalidParentError(
                f"{what} {dep!r} of {child!r} is unknown or not readable by {self._subject!r}"
            )
        return row

    def _check_dependency(
        self, c: Cursor, dep: str, what: str, child: str, known: Mapping[str, Any] | None = None
    ) -> None:
        row = self._check_readable(c, dep, what, child, known)
        if row["status"] in _BLOCKING:
            raise InvalidParentError(
                f"{what} {dep!r} of {child!r} is {row['status']}{_cause_text(row)}"
            )

    def accept(self, record_id: str, note: str = "") -> None:
        """CANDIDATE → ACCEPTED, by an approver who is not the proposer.

        Every dependency must be ACCEPTED and unexpired, and every registered
        acceptance check must pass.

        Raises:
            InvalidTransitionError: not a CANDIDATE, or the record already expired.
            SelfApprovalError: the approver proposed it.
            InvalidParentError: a dependency is not usable.
            AcceptanceCheckError: a registered check refused it.
        """
        self._writable("accept")
        check_text(note, "note", empty=True)
        ledger = self._ledger

        def attempt() -> None:
            with self._ctx() as c:
                row = self._visible(c, record_id, Role.APPROVE, "accept")
                rid = row["record_id"]
                record = ledger._record(rid, c)
                now = ledger._now()
                record.accept(self._subject, note, now)
                _check_not_expired(row, now, "accept")
                self._check_usable_deps(c, record.dependencies, rid, "accept", now)
                view = self._view(c, row, now)
            self._run_acceptance_checks(view, "accept")
            ledger._save(
                record,
                guard=self._locked(
                    row["scope"],
                    Role.APPROVE,
                    "accept",
                    self._deps_guard(record.dependencies, rid, "accept"),
                ),
            )

        ledger._retrying(attempt)

    def _run_acceptance_checks(self, view: RecordView, command: str) -> None:
        """Every check the application registered must pass before a record is ACCEPTED."""
        for check in self._ledger._checks:
            name = getattr(check, "__name__", repr(check))
            try:
                reason = check(view)
            except Exception as exc:
                raise AcceptanceCheckError(
                    f"{command} refused: acceptance check {name!r} failed on record "
                    f"{view.id!r}: {exc!r}"
                ) from None
            if reason:
                raise AcceptanceCheckError(
                    f"acceptance check {name!r} refused record {view.id!r}: {reason}"
                )

    def _check_usable_deps(
        self, c: Cursor, deps: Iterable[str], rid: str, command: str, now: datetime
    ) -> None:
        deps = list(deps)
        rows = validity_view.current_many(c, self._ledger._dialect, deps)
        for dep in deps:
            row = rows.get(dep)
            if row is None:
                raise InvalidParentError(
                    f"{command} refused: dependency {dep!r} of {rid!r} is unknown"
                )
            if row["status"] != Status.ACCEPTED:
                raise InvalidParentError(
                    f"{command} refused: dependency {dep!r} of {rid!r} is "
                    f"{row['status']}{_cause_text(row)}"
                )
            if row["eff_expires"] is not None and datetime_to_micros(now) >= row["eff_expires"]:
                raise InvalidParentError(
                    f"{command} refused: dependency {dep!r} of {rid!r} {_expiry_text(row, dep)}"
                )

    def _deps_guard(self, deps: Sequence[str], rid: str, command: str) -> Guard:
        dialect = self._ledger._dialect

        def guard(c: Cursor) -> None:
            rows = validity_view.current_many(c, dialect, deps)
            for dep in deps:
                row = rows.get(dep)
                if row is None or row["status"] != Status.ACCEPTED:
                    raise InvalidParentError(
                        f"{command} refused: dependency {dep!r} of {rid!r} became "
                        f"{row['status'] if row else 'unknown'} meanwhile"
                    )

        return guard

    def reject(self, record_id: str, reason: str) -> None:
        """CANDIDATE → REJECTED.

        Raises:
            InvalidTransitionError: not a CANDIDATE.
            SelfApprovalError: the approver proposed it.
        """
        self._writable("reject")
        check_text(reason, "reason")
        ledger = self._ledger

        def attempt() -> None:
            with self._ctx() as c:
                row = self._visible(c, record_id, Role.APPROVE, "reject")
                record = ledger._record(row["record_id"], c)
            record.reject(self._subject, reason, ledger._now())
            ledger._save(record, guard=self._locked(row["scope"], Role.APPROVE, "reject"))

        ledger._retrying(attempt)

    def revoke(self, record_id: str, reason: str) -> Revocation:
        """Withdraw a record: it becomes REVOKED and every transitive descendant
        (over declared and observed edges) not already REVOKED/REJECTED becomes
        STALE with this revocation as its cause — all in one transaction.

        Descendants are found through the reverse-dependency index, so the cost
        follows the number of descendants, not the size of the ledger.

        Raises:
            InvalidTransitionError: the record is REVOKED or REJECTED.
        """
        self._writable("revoke")
        check_text(reason, "reason")
        ledger = self._ledger
        d = ledger._dialect

        def attempt() -> Revocation:
            with self._ctx() as c:
                row = self._visible(c, record_id, Role.APPROVE, "revoke")
                rid = row["record_id"]
                root = ledger._record(rid, c)
                now = ledger._now()
                root.revoke(self._subject, reason, now)
                reached = [child_id for child_id, _via in validity_view.descendants(c, d, rid)]
                rows = validity_view.current_many(c, d, reached)
                # Stale markings are built from the view's rows and the aggregates'
                # newest stored versions (one query each per 500 records) instead of
                # loading every descendant; the guard below and the version numbers
                # make the append conditional on nothing having changed meanwhile.
                marked = [cid for cid in reached if rows[cid]["status"] not in _FINAL]
                versions = ledger._recorder.last_versions(c, [record_uuid(m) for m in marked])
                seen = {s: bool(self._roles(c, s)) for s in {rows[m]["scope"] for m in marked}}
            unstored = [cid for cid in marked if record_uuid(cid) not in versions]
            if unstored:
                raise CorruptEventError(
                    f"record {unstored[0]!r} is in the validity view but has no stored events"
                )
            stale_events = [
                Record.stale_event(
                    record_id=cid,
                    version=versions[record_uuid(cid)],
                    actor=self._subject,
                    cause=rid,
                    reason=reason,
                    at=now,
                )
                for cid in marked
            ]
            expected = set(reached)
            statuses = {cid: rows[cid]["status"] for cid in reached}

            def guard(c: Cursor) -> None:
                # Under the write lock: a child proposed since we looked must be
                # marked too, and a descendant's status must be what we decided
                # on, so retry from a fresh read if either changed.
                now_reached = {cid for cid, _ in validity_view.descendants(c, d, rid)}
                if now_reached != expected:
                    raise _Clash()
                now_rows = validity_view.current_many(c, d, reached)
                if any(now_rows[cid]["status"] != statuses[cid] for cid in reached):
                    raise _Clash()

            position = ledger._append(
                [*root.collect_events(), *stale_events],
                guard=self._locked(row["scope"], Role.APPROVE, "revoke", guard),
            )
            # Descendants in scopes the caller cannot see are marked all the same,
            # but only counted: their ids are not the caller's to learn.
            stale = tuple(m for m in marked if seen[rows[m]["scope"]])
            return Revocation(
                root=rid,
                affected=(rid, *stale),
                position=position,
                stale=stale,
                hidden=len(marked) - len(stale),
            )

        return ledger._retrying(attempt)

    def revalidate(
        self, record_id: str, note: str = "", parents: Iterable[str] | None = None
    ) -> None:
        """STALE → ACCEPTED after re-verification, by an approver other than the proposer.

        Without ``parents`` every current dependency must be usable again. With
        ``parents`` (a new basis of usable records) they replace the record's
        dependencies, observed ones included; the old basis stays in the history.
        Descendants stay STALE until each is revalidated itself.

        Raises:
            InvalidTransitionError: not STALE.
            SelfApprovalError: the approver proposed it.
            InvalidParentError: a dependency is not usable.
            CycleError: the new basis would make the record depend on itself.
        """
        self._writable("revalidate")
        check_text(note, "note", empty=True)
        new_basis = (
            None
            if parents is None
            else tuple(
                dict.fromkeys(check_id(p, "parent id") for p in _as_list(parents, "parents"))
            )
        )
        ledger = self._ledger
        d = ledger._dialect

        def attempt() -> None:
            with self._ctx() as c:
                row = self._visible(c, record_id, Role.APPROVE, "revalidate")
                rid = row["record_id"]
                record = ledger._record(rid, c)
                record.check_status("revalidate", Status.STALE)
                record.check_not_proposer(self._subject, "revalidate")
                now = ledger._now()
                _check_not_expired(row, now, "revalidate")
                if new_basis is not None:
                    below = {rid, *(cid for cid, _ in validity_view.descendants(c, d, rid))}
                    for dep in new_basis:
                        # Visibility first: a hidden record must look absent, not cyclic.
                        if dep != rid:
                            self._check_readable(c, dep, "parent", rid)
                        if dep in below:
                            raise CycleError(
                                f"revalidate refused: {dep!r} depends on {rid!r}; "
                                "a cycle is impossible by construction"
                            )
                        self._check_dependency(c, dep, "parent", rid)
                deps = new_basis if new_basis is not None else record.dependencies
                self._check_usable_deps(c, deps, rid, "revalidate", now)
                view = self._view(c, row, now)
            if new_basis is not None:
                view = dataclasses.replace(view, parents=new_basis, observed=())
            # Revalidation re-approves: a candidate made STALE before anyone
            # accepted it must not skip the application's checks this way.
            self._run_acceptance_checks(view, "revalidate")
            record.revalidate(
                self._subject,
                note,
                parents=new_basis,
                observed=() if new_basis is not None else None,
                at=now,
            )
            ledger._save(
                record,
                guard=self._locked(
                    row["scope"],
                    Role.APPROVE,
                    "revalidate",
                    self._deps_guard(deps, rid, "revalidate"),
                ),
            )

        ledger._retrying(attempt)

    def deliver(self, record_id: str, recipient: str, channel: str = "email") -> str:
        """Record that a usable record (typically a report) left the system.

        Returns the delivery id.

        Raises:
            InvalidTransitionError: the record is not ACCEPTED.
            NotUsableError: it (or an ancestor) has expired.
        """
        self._writable("deliver")
        check_text(recipient, "recipient", max_len=512)
        check_text(channel, "channel", max_len=64)
        ledger = self._ledger
        delivery_id = f"d-{uuid.uuid4().hex}"

        def attempt() -> str:
            with self._ctx() as c:
                row = self._visible(c, record_id, Role.DELIVER, "deliver")
                rid = row["record_id"]
                record = ledger._record(rid, c)
            now = ledger._now()
            record.deliver(self._subject, delivery_id, recipient, channel, now)
            if _validity(row, now) != Validity.VALID:
                raise NotUsableError(f"deliver refused: record {rid!r} {_expiry_text(row, rid)}")
            ledger._save(record, guard=self._locked(row["scope"], Role.DELIVER, "deliver"))
            return delivery_id

        return ledger._retrying(attempt)

    def issue_correction(self, delivery_id: str, note: str, replacement: str | None = None) -> str:
        """Record a correction for a delivery in the outbox (nothing is sent).

        The delivery stays DELIVERED. Returns the correction id.

        Raises:
            UnknownDeliveryError: no such delivery visible to this principal.
            UnknownRecordError: ``replacement`` is unknown or not visible.
        """
        self._writable("issue_correction")
        check_text(note, "note")
        check_id(delivery_id, "delivery id")
        ledger = self._ledger
        d = ledger._dialect
        correction_id = f"c-{uuid.uuid4().hex}"

        def attempt() -> str:
            with self._ctx() as c:
                c.execute(d.q("SELECT * FROM {t}pl_deliveries WHERE delivery_id=?"), (delivery_id,))
                drow = c.fetchone()
                row = None if drow is None else validity_view.current(c, d, drow["record_id"])
                if row is None or not self._roles(c, row["scope"]):
                    raise UnknownDeliveryError(
                        f"issue_correction refused: delivery {delivery_id!r} is unknown or not "
                        f"visible to {self._subject!r}"
                    )
                self._require(c, row["scope"], Role.DELIVER, "issue_correction")
                if replacement is not None:
                    self._visible(c, replacement, Role.READ, "issue_correction", "replacement")
                record = ledger._record(row["record_id"], c)
            record.issue_correction(
                self._subject, correction_id, delivery_id, note, replacement, ledger._now()
            )
            ledger._save(record, guard=self._locked(row["scope"], Role.DELIVER, "issue_correction"))
            return correction_id

        return ledger._retrying(attempt)

    # -- runs -----------------------------------------------------------------

    def run(self, run_id: str) -> RunContext:
        """A context that records every read made through it (see ``RunContext``)."""
        self._writable("run")
        return RunContext(self, check_id(run_id, "run id"))


class RunContext:
    """One agent task. Reads through it are recorded as events; a record proposed
    in it carries them as ``observed`` dependencies (minus its declared parents).

    ``with session.run("task-42") as run:`` then ``run.read(...)``,
    ``run.get(...)``, ``run.propose(...)``, ``run.capture(...)`` and
    ``run.observe(record_id)`` for reads that happened outside the ledger.
    """

    def __init__(self, session: Session, run_id: str) -> None:
        self.run_id = run_id
        self._outer = session
        self._session = Session(session._ledger, session._subject, session._token_hash, run=self)
        # Run ids are per principal: nobody can take (or probe) another's run id.
        self._aggregate_id = run_uuid(f"{session._subject}/{run_id}")
        self._reads: dict[str, None] = {}
        self._open = False

    def _load(self) -> Run:
        run: Any = self._outer._ledger._app.repository.get(self._aggregate_id)
        assert isinstance(run, Run)
        return run

    def __enter__(self) -> RunContext:
        ledger = self._outer._ledger
        with self._outer._ctx() as c:
            d = ledger._dialect
            c.execute(
                d.q(
                    "SELECT COUNT(*) AS n FROM {t}pl_grants WHERE subject=? AND to_pos IS NULL "
                    "AND role IN ('propose', 'read')"
                ),
                (self._outer._subject,),
            )
            if not c.fetchone()["n"]:
                raise AccessDeniedError(
                    f"run refused: {self._outer._subject!r} holds neither 'propose' nor 'read' "
                    "in any scope"
                )
        run = Run._create(
            Run.Started,
            id=self._aggregate_id,
            timestamp=ledger._now(),
            run_id=self.run_id,
            actor=self._outer._subject,
        )
        try:
            ledger._save(run)
        except _Clash:
            raise DuplicateRecordError(
                f"run {self.run_id!r} of {self._outer._subject!r} already exists"
            ) from None
        self._open = True
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        ledger = self._outer._ledger
        outcome = "failed" if exc_type else "completed"

        def attempt() -> None:
            # Reload on every try: a failed save already took the pending event.
            run = self._load()
            run.trigger_event(Run.Ended, outcome=outcome, timestamp=ledger._now())
            ledger._save(run)

        ledger._retrying(attempt)
        self._open = False

    def _check(self) -> None:
        if not self._open:
            raise InvalidInputError(f"run {self.run_id!r} is not open")

    def _record_reads(self, record_ids: tuple[str, ...], how: str) -> None:
        if not record_ids:
            return
        self._check()
        ledger = self._outer._ledger

        def attempt() -> None:
            run = self._load()
            run.trigger_event(
                Run.ReadRecorded, record_ids=record_ids, how=how, timestamp=ledger._now()
            )
            ledger._save(run)

        ledger._retrying(attempt)
        for rid in record_ids:
            self._reads[rid] = None

    def observed_for(self, declared: Sequence[str]) -> tuple[str, ...]:
        """What the run read, minus the declared parents."""
        return tuple(r for r in self._reads if r not in declared)

    @property
    def reads(self) -> tuple[str, ...]:
        """Every record id read or observed in this run, in order."""
        return tuple(self._reads)

    def observe(self, record_id: str) -> None:
        """Record a read made outside the ledger (e.g. by a tool wrapper).

        Raises:
            UnknownRecordError: unknown or not visible to the principal.
        """
        self._check()
        with self._outer._ctx() as c:
            row = self._outer._visible(c, record_id, Role.READ, "observe")
        self._record_reads((row["record_id"],), "observed")

    def read(self, *args: Any, **kwargs: Any) -> ReadResult:
        """``Session.read``, recorded."""
        self._check()
        return self._session.read(*args, **kwargs)

    def get(self, record_id: str) -> RecordView:
        """``Session.get``, recorded."""
        self._check()
        return self._session.get(record_id)

    def explain(self, *args: Any, **kwargs: Any) -> Explanation:
        """``Session.explain`` (not recorded: it hands nothing on)."""
        self._check()
        return self._session.explain(*args, **kwargs)

    def propose(self, *args: Any, **kwargs: Any) -> str:
        """``Session.propose`` with the run's reads as observed dependencies."""
        self._check()
        return self._session.propose(*args, **kwargs)

    def capture(self, *args: Any, **kwargs: Any) -> str:
        """``Session.capture`` inside the run."""
        self._check()
        return self._session.capture(*args, **kwargs)


# -- helpers ---------------------------------------------------------------------

_EPOCH_AT = datetime(1970, 1, 1, tzinfo=UTC)


def _mentioned_ids(batch: Sequence[Any]) -> list[str]:
    """Well-formed record ids a ``propose_many`` batch names (as ids or parents),
    so their view rows are read in one query; anything odd is left to the
    per-item validation, which reports it."""
    ids: list[str] = []
    for item in batch:
        if not isinstance(item, Mapping):
            continue
        named = [item.get("id")]
        parents = item.get("parents")
        if isinstance(parents, (list, tuple)):
            named.extend(parents)
        for rid in named:
            if isinstance(rid, str):
                try:
                    ids.append(check_id(rid))
                except LedgerError:
                    continue
    return ids


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
    for kind, rule in retention.items():
        if not isinstance(rule, RetentionRule):
            raise InvalidInputError(f"retention rule for {kind!r} is not a RetentionRule")
        rules[check_kind(kind)] = rule
    return rules


def _as_list(items: object, what: str) -> list[Any]:
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidInputError(f"{what} must be a list, got {type(items).__name__}")
    return list(items)


def _check_context(context: Mapping[str, Any] | None) -> dict[str, Any]:
    if context is None:
        return {}
    if not isinstance(context, Mapping):
        raise InvalidInputError(f"context must be a mapping, got {type(context).__name__}")
    return dict(check_value(dict(context), "context"))


def _check_conditions(conditions: Mapping[str, Any] | None, limit: int) -> dict[str, Any]:
    if conditions is None:
        return {}
    if not isinstance(conditions, Mapping):
        raise InvalidValueError(f"conditions must be a mapping, got {type(conditions).__name__}")
    return dict(check_value(dict(conditions), "conditions", limit))


def _check_not_expired(row: Any, now: datetime, command: str) -> None:
    """A record past its own expiry cannot become ACCEPTED."""
    if row["expires"] is not None and datetime_to_micros(now) >= row["expires"]:
        raise InvalidTransitionError(
            f"record {row['record_id']!r} expired at "
            f"{micros_to_datetime(row['expires']).isoformat()}; {command} refused"
        )


def _validity(row: Any, at: datetime) -> Validity:
    status = row["status"]
    if status in (Status.REVOKED, Status.REJECTED):
        return Validity.INVALID
    eff = row["eff_expires"]
    if status == Status.ACCEPTED and (eff is None or datetime_to_micros(at) < eff):
        return Validity.VALID
    return Validity.NEEDS_REVALIDATION


def _cause_text(row: Any) -> str:
    status = row["status"]
    if status == Status.STALE:
        return f" ({row['cause_root']} revoked: {row['reason']})"
    if status in (Status.REVOKED, Status.REJECTED) and row["reason"]:
        return f" ({row['reason']})"
    return ""


def _expiry_text(row: Any, rid: str) -> str:
    if row["status"] != Status.ACCEPTED:
        return f"is {row['status']}{_cause_text(row)}"
    when = micros_to_datetime(row["eff_expires"]).isoformat()
    if row["eff_source"] == rid:
        return f"expired at {when}"
    return f"is unusable: ancestor {row['eff_source']} expired at {when}"


def _blocking_reasons(
    row: Any, at: datetime, context: dict[str, Any], kinds: set[Kind] | None
) -> tuple[str, ...]:
    status = row["status"]
    if status == Status.CANDIDATE:
        return ("candidate: not yet approved",)
    if status == Status.REJECTED:
        return (f"rejected: {row['reason']}",)
    if status == Status.REVOKED:
        return (f"revoked: {row['reason']}",)
    if status == Status.STALE:
        return (f"stale because {row['cause_root']} was revoked: {row['reason']}",)
    eff = row["eff_expires"]
    if eff is not None and datetime_to_micros(at) >= eff:
        when = micros_to_datetime(eff).isoformat()
        if row["eff_source"] == row["record_id"]:
            return (f"expired at {when}",)
        return (f"ancestor {row['eff_source']} expired at {when}",)
    reasons = []
    for key, wanted in unpack(row["conditions"]).items():
        if key not in context:
            reasons.append(f"condition {key}={wanted!r} not met: context has no {key!r}")
        elif canonical(context[key]) != canonical(wanted):
            reasons.append(f"condition {key}={wanted!r} not met: context has {context[key]!r}")
    if kinds is not None and Kind(row["kind"]) not in kinds:
        reasons.append(f"kind {row['kind']} not requested")
    return tuple(reasons)


_RECORD_TOPIC = get_topic(Record)
_RECORD_EVENTS = (
    "Proposed",
    "Accepted",
    "Rejected",
    "Revoked",
    "MarkedStale",
    "Revalidated",
    "Delivered",
    "CorrectionIssued",
    "SnapshotErased",
)
_EVENT_PLUMBING = ("originator_id", "originator_version", "timestamp", "actor", "originator_topic")


def _history_event(position: int, event: Any, record_id: str) -> AuditEvent:
    details = {k: v for k, v in vars(event).items() if k not in _EVENT_PLUMBING}
    return AuditEvent(
        position=position,
        type=event.__class__.__name__,
        at=event.timestamp,
        actor=getattr(event, "actor", None),
        details={"record_id": record_id, **details},
    )


def _delivery(row: Any, corrections: tuple[Correction, ...]) -> Delivery:
    return Delivery(
        delivery_id=row["delivery_id"],
        record_id=row["record_id"],
        recipient=row["recipient"],
        channel=row["channel"],
        delivered_at=micros_to_datetime(row["delivered_at"]),
        delivered_by=row["delivered_by"],
        position=row["position"],
        corrections=corrections,
    )


def _correction(row: Any) -> Correction:
    return Correction(
        correction_id=row["correction_id"],
        delivery_id=row["delivery_id"],
        record_id=row["record_id"],
        note=row["note"],
        replacement=row["replacement"],
        issued_at=micros_to_datetime(row["issued_at"]),
        issued_by=row["issued_by"],
        position=row["position"],
    )


__all__ = ["AcceptanceCheck", "Ledger", "LedgerError", "RunContext", "Session"]
