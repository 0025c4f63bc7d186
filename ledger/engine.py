"""The machinery every command and read shares: the backend, the clock and the log.

:class:`Engine` is internal to the package (the public API is :class:`ledger.Ledger`
and :class:`ledger.Session`). It owns the eventsourcing application and its
recorder, and gives the rest of the package four things:

- transactions: ``reading()`` (one snapshot), ``statement()`` (one statement) and
  ``transact(work)`` — a command's *one* write transaction: the writers' lock is
  taken first, the views are caught up, then ``work`` reads what it decides on,
  decides, and appends through :meth:`Write.append` (events, view rows, Merkle
  leaves and snapshots together); busy databases are retried;
- aggregates loaded from their stored events inside a transaction (``load``);
- the clock (``now``) and the ledger's options (checks, retention, size limit);
- token checks shared by every principal (``check_token``).
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from uuid import UUID

from eventsourcing.persistence import IntegrityError, PersistenceError

from ledger import forks, gc_pause
from ledger.domain import Kind, Record, RetentionRule, uuid_of_hex
from ledger.errors import (
    AuthenticationError,
    ClosedLedgerError,
    ConcurrencyError,
    CorruptEventError,
    ExpiryInPastError,
    InvalidInputError,
    LedgerError,
    LedgerNotFoundError,
    ReadOnlyError,
    StorageError,
    UnknownRecordError,
    UnknownTokenError,
)
from ledger.inflight import InFlight
from ledger.persistence import (
    Backend,
    check_writable,
    construct_application,
    foreign_file,
    holds_ledger,
    read_only_uri,
)
from ledger.persistence.faults import (
    DATABASE_ERRORS,
    CommitFailed,
    closed_connection,
    deleted_event,
    is_busy,
    missing_from_views,
    storage_error,
)
from ledger.persistence.urls import idle_limit
from ledger.recent import Folded, Recent, fold_stored
from ledger.serialization import datetime_to_micros, micros_to_datetime
from ledger.stored import stored_events
from ledger.validation import check_aware
from ledger.values import RecordView
from projections import validity as validity_view
from projections.base import Cursor, Dialect
from projections.projector import Projector, later_layout, needs_migration, note_migrated

if TYPE_CHECKING:
    from ledger.persistence import LedgerRecorder

T = TypeVar("T")

#: How often a command is tried while the database stays locked by other writers.
RETRIES = 20
#: How many record scopes :meth:`Engine.scopes_of` keeps before starting afresh.
SCOPE_CACHE = 100_000


class AcceptanceCheck(Protocol):
    """A check the embedding application registers to run on every ``accept`` (and
    ``propose(..., accepted_by=...)``; again on ``revalidate`` of a record once
    accepted), in the command's write transaction, on the caller's thread.

    It gets the candidate as a ``RecordView`` and returns None to let it pass, or
    a reason (a non-empty string) to refuse it with ``AcceptanceCheckError``;
    anything else (False, "") refuses it too. It may read the ledger through a
    ``Session``: it sees the ledger as committed before the command (with
    ``accepted_by``, the candidate not yet there), except that on ``memory:`` a
    read during ``propose(..., accepted_by=...)`` is refused (``StorageError``:
    the proposal is written and not committed). A command it runs is refused
    (``StorageError``: the transaction is open on its thread). An exception it
    raises refuses the command with ``AcceptanceCheckError`` naming the check, the
    record and the exception; nothing is written.
    """

    def __call__(self, record: RecordView, /) -> str | None: ...


class Busy(Exception):
    """The database was locked by another writer; the command is tried again."""


@dataclass
class Write:
    """One command's write transaction: the writers' lock is held and the views
    have applied every earlier event, so ``c`` reads what the command decides on."""

    c: Cursor
    engine: Engine
    done: dict[str, int] | None
    #: (position, domain event) of everything appended so far, in log order.
    appended: list[tuple[int, Any]] = field(default_factory=list)
    size: int = 0  #: the stored bytes of those events (what ``Recent`` weighs)
    #: Current view rows (None: no such record) read with the writers' lock, by
    #: record id, until the first append (see :meth:`Engine.current_row`).
    ahead: dict[str, Any] = field(default_factory=dict)

    def append(
        self,
        events: Sequence[Any],
        snapshots: Sequence[tuple[str, bytes]] = (),
        known: Mapping[str, Any] | None = None,
    ) -> int:
        """Store ``events`` with their view rows, Merkle leaves and ``snapshots``;
        returns the log position of the last one. ``known``: current view rows (by
        aggregate id, hex) a decision read since the previous append, for the views."""
        if not events:
            return self.engine.recorder.max_position(self.c)
        self.ahead.clear()  # the views are about to change
        stored = stored_events(self.engine.app.mapper, events)  # as the mapper's bytes
        self.size += sum(len(row.state) for row in stored)
        with self.engine.projector.knowing(self.c, known):
            first = self.appended[0][0] if self.appended else None
            ids = self.engine.recorder.insert_in(
                self.c, stored, events, snapshots, self.done, first
            )
        if self.done is not None:
            # Every view applied them (stopped views: the next write catches them up).
            self.done = dict.fromkeys(self.done, ids[-1]) if self.engine.projector.enabled else None
        self.appended.extend(zip(ids, events, strict=True))
        return ids[-1]


#: What a read may fail with: the database's errors, and a row of views left in
#: an earlier layout lacking a column (``Engine._read_error``).
_READ_ERRORS: tuple[type[BaseException], ...] = (*DATABASE_ERRORS, IndexError, KeyError)


def read_only_error(what: str, url: str) -> ReadOnlyError:
    """The refusal of ``what`` (a write) on the ledger at ``url``, opened read-only."""
    return ReadOnlyError(
        f"{what} refused: ledger {url!r} is opened read-only (mode=ro); nothing was written"
    )


class Engine:
    """The backend, the clock and the options of one open ledger (internal)."""

    def __init__(
        self,
        backend: Backend,
        *,
        checks: tuple[AcceptanceCheck, ...],
        max_value_bytes: int,
        clock: Callable[[], datetime],
        retention: Mapping[Kind, RetentionRule],
        create: bool = True,
    ) -> None:
        self.url = backend.url
        self.backend = backend.kind
        self._path = backend.path
        self.read_only = backend.read_only  # ``?mode=ro``: every write is refused
        #: The views' layout left as stored, not this version's (None: current).
        self.outdated_views: str | None = None
        self._secret = backend.secret  # masked in messages: the URL's own password only
        self.idle_limit = idle_limit(backend)  # s a PostgreSQL transaction may idle
        self.checks = checks
        self.max_value_bytes = max_value_bytes
        self.clock = clock
        self.retention = dict(retention)
        self.closed = True
        #: Opened in a parent process this one was forked from: its connections
        #: are the parent's, so it is refused here (:mod:`ledger.forks`).
        self.inherited = False
        self._scopes: dict[str, str] = {}
        self.recent = Recent()
        self.folded = Folded()
        self._lock = threading.RLock()
        self.inflight = InFlight(self.check_open, self._close_connections)
        self.now()  # a clock that does not give aware datetimes is refused now
        env = backend.env
        missing = LedgerNotFoundError(f"no ledger at {backend.url!r} (nothing was created)")
        if backend.read_only:
            # Nothing is created, not even the file; SQLite itself refuses writes.
            env = {**env, "SQLITE_DBNAME": read_only_uri(str(backend.path)), "CREATE_TABLE": "no"}
        elif not create and backend.kind != "memory":
            try:
                held = backend.kind != "sqlite" or holds_ledger(str(backend.path))
            except sqlite3.Error as exc:  # not known: the disk, a lock, an I/O error
                raise self.storage_error(exc, opening=True) from None
            if not held:
                found = foreign_file(str(backend.path))
                if found is not None:
                    raise LedgerNotFoundError(
                        f"no ledger at {backend.url!r}: the file there is {found} "
                        "(nothing was changed)"
                    )
                raise missing
            env = {**env, "CREATE_TABLE": "no"}
        if backend.kind == "sqlite" and not backend.read_only:
            check_writable(str(backend.path))  # else every command would fail
        try:
            self.app = construct_application(env)
        except LedgerError:
            raise
        except (PersistenceError, sqlite3.Error, OSError) as exc:
            raise self.storage_error(exc, opening=True) from None
        except (ValueError, UnicodeError) as exc:
            raise StorageError(f"cannot open ledger {backend.url!r}: {exc}") from None
        self.closed = False
        forks.track(self)
        self.recorder: LedgerRecorder = self.app.ledger_recorder
        self.projector: Projector = self.recorder.projector
        self.projector.mapper = self.app.mapper
        self.dialect: Dialect = self.recorder.dialect
        if (
            (backend.read_only or not create)
            and backend.kind != "memory"
            and not self.recorder.holds_ledger()
        ):
            self.close()
            raise missing

    def close(self) -> None:
        """Close the database connections. Safe to call twice. In a process forked
        after it was opened, nothing is closed: the connections are the parent's."""
        if not self.closed:
            self.closed = True
            if self.inherited:
                return  # the parent's connections (see :mod:`ledger.forks`)
            self.inflight.close()  # once no statement is under way (ledger.inflight)

    def _close_connections(self) -> None:
        self.recorder.close_readers()
        self.app.close()

    def check_open(self) -> None:
        """Raise ``ClosedLedgerError`` once the ledger is closed, or in a process
        forked after it was opened (its connections are the parent's)."""
        if self.inherited:
            raise ClosedLedgerError(
                f"ledger {self.url!r} was opened in the process this one was forked "
                "from, whose connections it holds: open it again in this process"
            )
        if self.closed:
            raise ClosedLedgerError(f"ledger {self.url!r} is closed")

    def check_writable(self, what: str) -> None:
        """Raise ``ReadOnlyError`` (naming ``what``) if the ledger was opened read-only."""
        if self.read_only:
            raise read_only_error(what, self.url)

    # -- time ---------------------------------------------------------------------

    def now(self) -> datetime:
        """The ledger's clock, checked to be timezone-aware."""
        try:
            now = self.clock()
        except Exception as exc:
            raise InvalidInputError(f"the ledger's clock failed: {exc!r}") from None
        return check_aware(now, "the ledger's clock")

    def check_future(self, when: datetime, what: str) -> None:
        """Raise ``ExpiryInPastError`` unless ``when`` is after now."""
        if when <= self.now():
            raise ExpiryInPastError(f"{what} {when.isoformat()} is not in the future")

    # -- transactions -------------------------------------------------------------

    def storage_error(
        self, exc: BaseException, *, opening: bool = False, committing: bool = False
    ) -> LedgerError:
        """The typed error for a failure of the database (see ``persistence.faults``)."""
        if self.inflight.connections_closed and not opening and closed_connection(exc):
            return ClosedLedgerError(f"ledger {self.url!r} is closed")
        if self.outdated_views is not None and (
            missing_from_views(exc) or isinstance(exc, (IndexError, KeyError))
        ):
            kept = (
                "opened read-only, they stay as stored; copy the file to a writable "
                "place and open it there to have them rebuilt (verify, digest and "
                "stats work as it is)"
                if self.read_only
                else "opened with catch_up=False, they stay as stored until a command "
                "or an open without it rebuilds them"
            )
            return StorageError(
                f"ledger {self.url!r}: its views were built by {self.other_version()} "
                f"(layout {self.outdated_views}; this version reads layout "
                f"{self.projector.current_layout}) and cannot answer this; {kept}"
            )
        return storage_error(
            exc,
            self.url,
            path=self._path,
            opening=opening,
            committing=committing,
            secret=self._secret,
        )

    @contextmanager
    def reading(self) -> Iterator[Cursor]:
        """A read transaction: every statement sees one snapshot."""
        try:
            with self.inflight.entered(), self.recorder.reading() as c:
                yield c
        except _READ_ERRORS as exc:
            raise self._read_error(exc) from None

    @contextmanager
    def statement(self) -> Iterator[Cursor]:
        """A cursor for a read that is one SQL statement (no transaction)."""
        try:
            with self.inflight.entered(), self.recorder.statement() as c:
                yield c
        except _READ_ERRORS as exc:
            raise self._read_error(exc) from None

    def query(self, fetch: Callable[[Cursor], T]) -> T:
        """What ``fetch`` reads with a cursor for a read that is one SQL statement
        (as :meth:`statement`, without a context manager per read); ``fetch``
        reads its rows by position (an SQLite file gives plain tuples)."""
        token = self.inflight.enter()  # no context manager on a read's own path
        try:
            return self.recorder.query(fetch)
        except _READ_ERRORS as exc:
            raise self._read_error(exc) from None
        finally:
            self.inflight.leave(token)

    def _read_error(self, exc: BaseException) -> BaseException:
        """A read's failure as its typed error; a row lacking a column (IndexError,
        KeyError) is one of views left in an earlier layout, or else a bug (as is)."""
        missing = isinstance(exc, (IndexError, KeyError)) and not self.closed
        return exc if missing and self.outdated_views is None else self.storage_error(exc)

    @contextmanager
    def locked(self, what: str = "maintenance") -> Iterator[Cursor]:
        """A write transaction holding the writers' lock (maintenance: catch-up,
        rebuild, named by ``what`` in a refusal); commands use :meth:`transact`."""
        self.check_open()
        self.check_writable(what)
        try:
            with self._lock, self.inflight.entered(), self.recorder.writing() as c:
                self.recent.forget()
                self.recorder.lock_for_write(c)
                yield c
        except DATABASE_ERRORS as exc:
            raise self.storage_error(exc) from None
        except CommitFailed as exc:
            raise self.storage_error(exc.__cause__ or exc, committing=True) from None

    def transact(self, work: Callable[[Write], T], about: str | None = None) -> T:
        """Run a command's ``work`` in one write transaction (see :class:`Write`).

        The lock is taken before anything is read, so nothing ``work`` read can change
        before it commits; while the database stays locked by other writers the whole
        command is tried again, up to ``RETRIES`` times, within the lock wait (waiting
        behind this process's other writers counts too). ``about``: a record whose
        current row is read first (:meth:`current_row`; with the lock).

        Raises:
            ConcurrencyError: the database stayed locked.
            StorageError: the database failed otherwise (``DiskFullError``,
                ``ConnectionLostError``); its message says whether the command was not
                applied or may have been (the connection lost as it committed).
            ReadOnlyError: the ledger was opened read-only.
        """
        self.check_open()
        self.check_writable("writing")

        def attempt() -> T:
            left = -1 if wait is None else max(0.0, wait - (time.monotonic() - started))
            if not self._lock.acquire(timeout=left):
                raise Busy()
            try:
                with self.inflight.entered():  # with the lock: a writer waiting is not
                    return self._attempt(work, about)
            except (IntegrityError, sqlite3.IntegrityError) as exc:
                raise deleted_event(exc) or Busy() from None  # else a version clash
            except DATABASE_ERRORS as exc:
                if is_busy(exc):
                    raise Busy() from None
                raise self.storage_error(exc) from None
            except CommitFailed as exc:
                raise self.storage_error(exc.__cause__ or exc, committing=True) from None
            finally:
                self._lock.release()

        self.views_for_writing()
        wait, started = self.recorder.lock_wait, time.monotonic()
        return self.retrying(attempt)

    def _attempt(self, work: Callable[[Write], T], about: str | None = None) -> T:
        """One try of a command (under the engine's lock): its transaction, then
        what it wrote remembered once committed, or everything forgotten."""
        recent = self.recent
        ahead = None if about is None else validity_view.current_query(self.dialect, about)
        try:
            with self.recorder.writing() as c:
                rows = self.recorder.lock_for_write(c, ahead)
                if self.recorder.others_wrote(c) or recent.done is None:
                    recent.forget()
                    recent.done, moved = self._caught_up(c)
                    done = recent.done
                    if moved:
                        rows = None  # the views changed after it was read
                else:
                    done = dict(recent.done)
                w = Write(c, self, done)
                if rows is not None and about is not None:
                    w.ahead[about] = rows[0] if rows else None
                recent.cursor, recent.write = c, w
                result = work(w)
                recent.cursor = recent.write = None
        except BaseException:
            recent.cursor = recent.write = None
            recent.forget()
            raise
        recent.learn(w.appended, w.done, w.size)
        self.folded.learn(w.appended)
        return result

    def fresh(self, c: Cursor) -> bool:
        """Whether ``c`` is the write transaction :attr:`recent` serves (nothing
        another connection wrote is missing from it)."""
        return c is self.recent.cursor and self.recent.done is not None

    def _caught_up(self, c: Cursor) -> tuple[dict[str, int] | None, bool]:
        """The views' tracking positions, after applying any event they missed
        (written while they were stopped, or by a process that died), and whether
        there were any (the views changed in this transaction)."""
        if not self.projector.enabled:
            return None, False
        done, newest = self.recorder.tracking_and_newest(c)
        if min(done.values()) < newest:
            self.projector.catch_up(c)
            return self.projector.tracking_map(c), True
        return done, False

    def current_row(self, c: Cursor, record_id: str) -> Any:
        """The current view row of ``record_id`` (None: no such record): as read
        with the writers' lock when ``c``'s command named it (``transact``'s
        ``about``) and has appended nothing since, else read now."""
        w = self.recent.write
        if w is not None and self.recent.cursor is c and record_id in w.ahead:
            return w.ahead[record_id]
        return validity_view.current(c, self.dialect, record_id)

    def retrying(self, attempt: Callable[[], T]) -> T:
        """``attempt()``, again after a jittered pause while it raises :class:`Busy`:
        up to ``RETRIES`` tries, and none begun once the backend's lock wait
        (``LedgerRecorderMixin.lock_wait``, e.g. a SQLite URL's ``timeout``) has
        passed since the first, so that wait bounds the whole command."""
        wait = self.recorder.lock_wait
        started = time.monotonic()
        for attempt_number in range(RETRIES):
            try:
                return attempt()
            except Busy:
                waited = time.monotonic() - started
                if wait is not None and waited >= wait:
                    tries = attempt_number + 1
                    raise ConcurrencyError(
                        f"the ledger stayed locked by other writers (of this process or "
                        f"another) for {waited:.1f} s (the ledger's lock wait is {wait:g} s); "
                        f"gave up after {tries} {'try' if tries == 1 else 'tries'}; nothing "
                        "was written — try again"
                    ) from None
                # Jittered exponential backoff, capped at ~0.2 s.
                time.sleep(min(0.2, 0.002 * 2**attempt_number) * random.random())
        raise ConcurrencyError(
            f"the database stayed locked by other writers; gave up after {RETRIES} tries; "
            "nothing was written — try again"
        )

    # -- the log ------------------------------------------------------------------

    def position(self) -> int:
        """Log position of the newest event (0 for an empty ledger)."""
        token = self.inflight.enter()
        try:
            return int(self.recorder.max_notification_id() or 0)
        except DATABASE_ERRORS as exc:
            raise self.storage_error(exc) from None
        finally:
            self.inflight.leave(token)

    def load(self, c: Cursor, aggregate_id: UUID, base: Any = None) -> Any | None:
        """The aggregate folded from its stored events read with ``c`` (None if it
        has none); undecodable bytes raise ``CorruptEventError``. In a write
        transaction, an aggregate with a long history is folded on from its
        state at the last commit (:class:`~ledger.recent.Folded`), or from
        ``base`` (a copy of it as committed, that its caller keeps: a run's
        context), not replayed from its start."""
        appended = self._appended(c, aggregate_id)
        writing = self.recent.write is not None and self.recent.write.c is c
        found: Any = base
        if found is None and writing:
            found = self.folded.base(aggregate_id)
        after = 0 if found is None else int(found.version)
        if appended and found is not None and appended[0].originator_version <= after:
            # Stored below the version kept: the database went back (a restore, a failover).
            self.folded.drop(aggregate_id)
            found, after = None, 0
        if appended and appended[0].originator_version <= after + 1:
            known: list[Any] | None = appended  # from after + 1 in this very transaction
        elif appended:
            known = None  # some of its events are not committed yet: read them all
        else:
            known = self.recent.events.get(aggregate_id) if self.fresh(c) else None
        if known is None:
            found, after = fold_stored(
                self.recorder, self.app.mapper, self.folded, c, aggregate_id, found, after
            )
        else:  # this ledger wrote them; nobody wrote since
            # A chain's versions are consecutive: skip those already folded.
            for mine in known[max(after + 1 - known[0].originator_version, 0) :]:
                found = mine.mutate(found)
        kept_anew = found is not None and found.version > after
        if kept_anew and base is None and writing and not appended:
            self.folded.keep(found)  # committed events only
        return found

    def _appended(self, c: Cursor, aggregate_id: UUID) -> list[Any]:
        """The events of ``aggregate_id`` appended so far in the write transaction
        of ``c`` (a later step of the same transaction needs no read of them)."""
        w = self.recent.write
        if w is None or w.c is not c:
            return []
        return [event for _, event in w.appended if event.originator_id == aggregate_id]

    def scopes_of(self, c: Cursor | None, record_ids: Iterable[str]) -> dict[str, str]:
        """The scope of each of ``record_ids`` that exists (read with ``c``, or in a
        statement of its own when ``c`` is None). A record's scope never changes,
        so answers are kept for the engine's life."""
        known = self._scopes
        missing = [rid for rid in set(record_ids) if rid not in known]
        if missing:
            if c is None:
                with self.statement() as c2:
                    found = validity_view.current_many(c2, self.dialect, missing)
            else:
                found = validity_view.current_many(c, self.dialect, missing)
            if len(known) > SCOPE_CACHE:
                known.clear()
            known.update((rid, row["scope"]) for rid, row in found.items())
        return {rid: known[rid] for rid in record_ids if rid in known}

    def scope_set(self, c: Cursor | None, record_ids: Collection[str]) -> set[str]:
        """The distinct scopes of those of ``record_ids`` that exist (as
        :meth:`scopes_of`, without a mapping per id: a record resting on
        hundreds of others is read with a look-up of each id in C)."""
        known = self._scopes
        try:
            return set(map(known.__getitem__, record_ids))
        except KeyError:
            return set(self.scopes_of(c, record_ids).values())

    def aggregate_of(self, c: Cursor, record_id: str) -> UUID:
        """The aggregate id the record's events are stored under (read with ``c``
        from the validity view: the id is not a function of the record id alone);
        ``UnknownRecordError`` if no such record was proposed."""
        found = validity_view.aggregate_id(c, self.dialect, record_id)
        if found is None:
            raise UnknownRecordError(f"record {record_id!r} is unknown")
        return found

    def load_record(self, c: Cursor, record_id: str, row: Any = None) -> Record:
        """The record's aggregate from its stored events (read with ``c``);
        ``row``: the record's view row as stored, if the caller read it (its
        aggregate id then costs no query)."""
        oid = self.aggregate_of(c, record_id) if row is None else uuid_of_hex(row["agg_id"])
        found = self.load(c, oid)
        if found is None:
            raise UnknownRecordError(f"record {record_id!r} is unknown")
        if not isinstance(found, Record):
            raise CorruptEventError(f"record {record_id!r} has stored events of another kind")
        return found

    def catch_up(self) -> int:
        """Apply any events the views have not seen; returns how many. Cheap when the
        views are current (one read); otherwise under the writers' lock, so concurrent
        writers and catch-ups never apply an event twice."""
        self.views_for_writing()
        if self.views_lag() is None:
            return 0
        with self.locked("catch_up") as c, gc_pause.paused():
            return self.projector.catch_up(c)

    def views_lag(self) -> tuple[int, int] | None:
        """(position the views have applied, newest log position) when the views
        lag the log, else None (one read)."""
        with self.reading() as c:
            done, newest = self.recorder.tracking_and_newest(c)
        applied = min(done.values())
        return None if applied >= newest else (applied, newest)

    def note_layout(self) -> None:
        """Remember whether the views, left as stored (read-only, or no catch-up),
        were built with another layout: a read they cannot answer then says so."""
        try:
            with self.reading() as c:
                layout = self.projector.layout(c)
        except LedgerError:  # views altered behind the ledger's back: verify names it
            self.outdated_views = "unreadable"
            return
        self.outdated_views = (
            None if layout == self.projector.current_layout else str(layout or "not recorded")
        )

    def other_version(self) -> str:
        """Which version built the views of ``outdated_views``, for messages."""
        built = self.outdated_views or ""
        later = built.isdigit() and later_layout(int(built), self.projector.current_layout)
        return "a later version" if later else "an earlier version"

    def check_views_current(self) -> None:
        """Refuse a read-only ledger whose views are not this version's or lag the
        log: they cannot be rebuilt or caught up without writing, and reads would
        answer from them as if they were current.

        Raises:
            StorageError: saying which, and what to do instead.
        """
        instead = (
            "`provledger verify` (in code, `Ledger.open(..., catch_up=False).verify()`) "
            "checks it as it is; open a writable copy to read it"
        )
        if self.outdated_views is not None:
            raise StorageError(
                f"ledger {self.url!r} is opened read-only and its views were built by "
                f"{self.other_version()} (layout {self.outdated_views}; this version reads "
                f"layout {self.projector.current_layout}), which cannot be rebuilt without "
                f"writing; {instead}"
            )
        lag = self.views_lag()
        if lag is not None:
            raise StorageError(
                f"ledger {self.url!r} is opened read-only and its views have not caught "
                f"up with the log (views at position {lag[0]}, log at {lag[1]}), which "
                f"cannot be done without writing; {instead}"
            )

    def views_for_writing(self, *, later: bool = False) -> None:
        """Rebuild views left as stored in another version's layout (opened with
        ``catch_up=False``) before anything is applied to them: a write would apply
        its events to tables of the old layout, or fail on them (``migrate_views``
        looks again under the writers' lock; ``later``: see there)."""
        if self.outdated_views is not None and not self.read_only:
            self.migrate_views(later=later)
            self.outdated_views = None

    def migrate_views(self, *, later: bool = False) -> None:
        """Rebuild the views from the log if they were built with another layout (a
        ledger an older version wrote: ``note_migrated`` says so; a later version's
        only if ``later``: ``needs_migration``); events never change."""
        current, url = self.projector.current_layout, self.url
        with self.reading() as c:
            if not needs_migration(self.projector.layout(c), current, later=later, url=url):
                return
        with self.locked() as c, self.recorder.replaying(c):  # done by another since?
            if needs_migration(built := self.projector.layout(c), current, later=later, url=url):
                started = time.monotonic()
                if events := self.projector.replay(c):  # none: a new ledger's views
                    note_migrated(events, current, time.monotonic() - started, built)

    # -- tokens -------------------------------------------------------------------

    def check_token(self, row: Mapping[str, Any] | None) -> str:
        """The subject of a token row (``subject``, ``revoked_pos``, ``expires``) that
        is valid now; raises ``AuthenticationError`` otherwise."""
        if row is None:
            raise UnknownTokenError("token is unknown")
        if row["revoked_pos"] is not None:
            raise AuthenticationError(f"token of {row['subject']!r} was revoked")
        if row["expires"] is not None and datetime_to_micros(self.now()) >= row["expires"]:
            raise AuthenticationError(
                f"token of {row['subject']!r} expired at "
                f"{micros_to_datetime(row['expires']).isoformat()}"
            )
        return str(row["subject"])
