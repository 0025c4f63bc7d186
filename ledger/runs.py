"""Runs: what an agent task read is recorded, and carried by what it proposes.

Inside ``with session.run("task-42") as run:``, every read, get, explain and
listing made through ``run`` is recorded as a ``Run.ReadRecorded`` event, and a
record proposed through ``run`` carries as ``observed`` dependencies (minus its
declared parents) the records the run was shown while they were VALID:
revocation follows them too. The ledger does not rely only on what the model says
it used.

A record the run was last shown *not* VALID (a candidate, or one withdrawn since
it was read) is not a dependency: the run has been told it is not to be relied
on. Without that, one look at a withdrawn record would refuse every later
proposal of a long-lived run.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from ledger.access import Role
from ledger.caller import Caller
from ledger.domain import Kind, Run, Status, Validity, run_uuid
from ledger.engine import Write
from ledger.errors import (
    AccessDeniedError,
    CorruptEventError,
    DuplicateRecordError,
    InvalidInputError,
    LedgerError,
)
from ledger.recent import fork
from ledger.session import Session
from ledger.validation import check_list, check_ref, check_text
from ledger.values import Explanation, ReadResult, RecordView
from projections import access as access_view
from projections import validity as validity_view
from projections.base import Cursor


class RunContext:
    """One agent task. Reads through it are recorded as events; a record proposed
    in it carries them as ``observed`` dependencies (minus its declared parents).

    ``with session.run("task-42") as run:`` then ``run.read(...)``,
    ``run.get(...)``, ``run.propose(...)``, ``run.capture(...)`` and
    ``run.observe(record_id)`` for reads that happened outside the ledger.
    Leaving the ``with`` block ends the run (``failed`` if the block raised), unless
    another context sharing it (:meth:`resume`) ended it first; if it cannot be
    ended, the block's own exception is still the one raised, with a note saying why.
    """

    def __init__(self, caller: Caller, run_id: str) -> None:
        self.run_id = run_id
        self._outer = caller
        # The run's session refers back to the run weakly: no reference cycle,
        # so a finished run is freed with its last reference, not by the collector.
        self._session = Session(caller.derive(run=cast("RunContext", weakref.proxy(self))))
        # Run ids are per principal: nobody can take (or probe) another's run id.
        self._aggregate_id = run_uuid(f"{caller.subject}/{run_id}")
        #: Record id → whether it was VALID when the run was last shown it.
        self._reads: dict[str, bool] = {}
        #: The run as this context last wrote or read it: a command reads only the
        #: run's newer events (another process's), not its whole history, however
        #: many runs the engine serves (``Engine.load``'s ``base``).
        self._folded: Run | None = None
        self._open = False

    def __enter__(self) -> RunContext:
        return self.start()

    def __repr__(self) -> str:
        here = "open" if self._open else "not open here"
        return f"<RunContext {self.run_id!r} of {self._outer.subject!r} ({here})>"

    @property
    def is_open(self) -> bool:
        """Whether the run is open here: started or resumed, and not found ended
        (by this context, or by another sharing the run when it last wrote)."""
        return self._open

    def state(self) -> str:
        """The run as stored: ``"new"`` (never started by this principal),
        ``"open"`` or ``"ended"``. Reads only."""
        with self._outer.reading() as c:
            run = self._outer.engine.load(c, self._aggregate_id)
        if not isinstance(run, Run):
            return "new"
        return "ended" if run.ended else "open"

    def start(self) -> RunContext:
        """Record the run's start (what ``with`` does); end it with :meth:`end`.

        Raises:
            AccessDeniedError: the principal holds neither propose nor read anywhere.
            DuplicateRecordError: the principal started a run with this id before.
        """
        caller = self._outer
        caller.engine.check_writable("run")
        with caller.reading() as c:
            if not access_view.holds_any(
                c, caller.engine.dialect, caller.subject, (Role.PROPOSE.value, Role.READ.value)
            ):
                raise AccessDeniedError(
                    f"run refused: {caller.subject!r} holds neither 'propose' nor 'read' "
                    "in any scope"
                )

        def start(w: Write) -> Run:
            if caller.engine.load(w.c, self._aggregate_id) is not None:
                raise DuplicateRecordError(
                    f"run {self.run_id!r} of {caller.subject!r} already exists"
                )
            run = Run._create(
                Run.Started,
                id=self._aggregate_id,
                timestamp=caller.engine.now(),
                run_id=self.run_id,
                actor=caller.subject,
            )
            w.append(run.collect_events())
            return run

        self._folded = caller.engine.transact(start)
        self._open = True
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not self._open:  # ended already, here or (as found) elsewhere
            return
        try:
            self.end("failed" if exc_type else "completed")
        except LedgerError as failure:
            if not self._open:
                return  # ended meanwhile by another process sharing the run
            if not isinstance(exc, BaseException):
                raise
            # The block's own exception stays the one raised; it says why the run
            # is still open (a revoked token, say).
            exc.add_note(f"run {self.run_id!r} could not be recorded as failed: {failure}")

    def resume(self) -> RunContext:
        """Continue a run started earlier (by another process: a shell pipeline's
        ``provledger run start``) and not ended. Every record it was shown or
        observed counts as it did there: a dependency if it was VALID when last
        shown.

        Raises:
            InvalidInputError: the principal never started this run, or it ended.
        """
        with self._outer.reading() as c:
            run = self._outer.engine.load(c, self._aggregate_id)
        if not isinstance(run, Run):
            raise InvalidInputError(
                f"run {self.run_id!r} of {self._outer.subject!r} was never started"
            )
        if run.ended:
            raise InvalidInputError(f"run {self.run_id!r} of {self._outer.subject!r} has ended")
        self._reads = dict(run.reads)
        self._folded = run
        self._open = True
        return self

    def end(self, outcome: str = "completed") -> None:
        """Record the run's end (``completed`` or ``failed``); nothing is recorded in it after.

        Raises:
            InvalidInputError: another outcome, or the run is not open.
        """
        if outcome not in ("completed", "failed"):
            raise InvalidInputError(f"run outcome {outcome!r} is not 'completed' or 'failed'")
        self._check()
        self._append(Run.Ended, outcome=outcome)
        self._open = False

    def _append(
        self,
        event_class: type[Run.Event],
        unless: Callable[[Run], bool] | None = None,
        **fields: Any,
    ) -> None:
        engine = self._outer.engine

        def work(w: Write) -> Run:
            # As any command: the token checked with the lock, and the run as
            # stored (ended elsewhere, say by ``provledger run end``, it takes nothing).
            self._outer.authenticate(w.c)
            run = self._stored(w.c)
            if unless is not None and unless(run):
                return run  # nothing the stored run does not hold already
            run.trigger_event(event_class, timestamp=engine.now(), **fields)
            w.append(run.collect_events())
            return run

        # Kept once committed: a failed transaction leaves the one kept as it was.
        self._folded = engine.transact(work)

    def _check(self) -> None:
        if not self._open:
            raise InvalidInputError(f"run {self.run_id!r} is not open")

    def _stored(self, c: Cursor) -> Run:
        """The run as stored, read with ``c``; refused once it has ended (wherever
        it was ended: another process may share the run). Only the events
        after the run as last folded here are read and applied, to a copy."""
        base = None if self._folded is None else fork(self._folded)
        run = self._outer.engine.load(c, self._aggregate_id, base)
        if not isinstance(run, Run):
            raise CorruptEventError(f"run {self.run_id!r} has no stored start")
        if run.ended:
            self._open = False
            raise InvalidInputError(f"run {self.run_id!r} of {self._outer.subject!r} has ended")
        return run

    def _record_reads(
        self, record_ids: tuple[str, ...], how: str, valid: Collection[str] | None = None
    ) -> None:
        """Record that the run was shown these records; ``valid``: those of them
        that were VALID then (default: all). Internal: called by the run's own
        reads (``Caller.note_reads``) with the keys of records they showed, so it
        does not check that the caller can see them; reads made outside the
        ledger go through :meth:`observe`, which does.

        Raises:
            InvalidIdError: an entry is not a record id.
            InvalidValueError: ``how`` is not one line of printable text.
            InvalidInputError: ``record_ids`` or ``valid`` is not a list.
        """
        # Checked as every other input is: what is appended here is stored for
        # good, and an event the ledger cannot decode fails verify and rebuild.
        record_ids = tuple(check_ref(r) for r in check_list(record_ids, "record_ids"))
        check_text(how, "how", max_len=256, line=True)
        if valid is not None:
            valid = frozenset(check_ref(r) for r in check_list(valid, "valid"))
        if not record_ids:
            return
        self._check()
        shown_valid = record_ids if valid is None else tuple(r for r in record_ids if r in valid)

        def seen(reads: Mapping[str, bool]) -> bool:
            # Shown again as ``reads`` last saw each of them: the event would change
            # nothing, so none is appended (a model listing one page over and over
            # must not grow the log by a page's ids each time).
            return all(reads.get(r) is (valid is None or r in valid) for r in record_ids)

        def known(run: Run) -> bool:
            return seen(run.reads)

        if seen(self._reads):
            # Shown again as this run last saw them: asked of the run as stored in
            # a read transaction first, so that a read appending nothing does not
            # wait for the writers' lock (a rebuild, another host's commit).
            with self._outer.reading() as c:
                stored = self._stored(c)
            if known(stored):
                self._folded = stored
                return
        self._append(
            Run.ReadRecorded, unless=known, record_ids=record_ids, how=how, valid=shown_valid
        )
        for rid in record_ids:
            self._reads[rid] = valid is None or rid in valid

    def carry_into(self, other: RunContext) -> None:
        """Record in ``other`` (open) each record this run was last shown VALID, as
        the run is stored (reads another process or store sharing it made
        included): a task that goes on in another run rests on what it relied on
        in this one, and is refused as it would have been here if one of those
        records was withdrawn since. What it was shown not VALID is no
        dependency, and is not carried (a long chain of runs does not grow); nor
        is a record the principal may no longer read (its grant withdrawn): no
        proposal could rest on it, and the run could propose nothing.

        Raises:
            InvalidInputError: ``other`` is a run of another principal (what this
                run read is no basis of theirs, and may be hidden from them).
        """
        mine, theirs = self._outer.subject, other._outer.subject
        if theirs != mine:
            raise InvalidInputError(
                f"run {self.run_id!r} of {mine!r} is carried only into another run of "
                f"{mine!r}, not into run {other.run_id!r} of {theirs!r}"
            )
        caller = self._outer
        with caller.reading() as c:
            run = caller.engine.load(c, self._aggregate_id)
            reads = run.reads if isinstance(run, Run) else self._reads
            shown = [rid for rid, was_valid in reads.items() if was_valid]
            rows = validity_view.current_many(c, caller.engine.dialect, shown, values=False)
            scopes = {row["scope"] for row in rows.values()}
            readable = {s for s in scopes if Role.READ.value in caller.roles(c, s)}
            valid = tuple(rid for rid in shown if rid in rows and rows[rid]["scope"] in readable)
        if valid:
            other._record_reads(valid, f"carried over from run {self.run_id}")

    def observed_for(self, declared: Sequence[str], c: Cursor | None = None) -> tuple[str, ...]:
        """The records the run was last shown while VALID, minus the declared parents;
        with ``c`` (a proposal's transaction), as the run stored them, reads made
        by another process sharing the run included (refused if it has ended)."""
        if c is not None:
            self._reads = dict(self._stored(c).reads)
        return tuple(r for r, valid in self._reads.items() if valid and r not in declared)

    @property
    def reads(self) -> tuple[str, ...]:
        """Every record id read or observed in this run, in order (as the principal
        is shown them, :mod:`ledger.redaction`)."""
        return self._shown(tuple(self._reads))

    @property
    def relied_on(self) -> tuple[str, ...]:
        """The records a proposal in this run would now carry as ``observed``
        dependencies (those last shown VALID), as the principal is shown them."""
        return self._shown(self.observed_for(()))

    def _shown(self, keys: tuple[str, ...]) -> tuple[str, ...]:
        names = self._outer.names(None, keys)
        return tuple(names.get(k, k) for k in keys)

    def observe(self, record_id: str, *more: str) -> None:
        """Record reads made outside the ledger (e.g. by a tool wrapper), in one event
        (a record named twice counts once).

        Raises:
            UnknownRecordError: one is unknown or not visible to the principal.
        """
        self._check()
        with self._outer.reading() as c:
            ids = tuple(
                dict.fromkeys(
                    self._outer.visible(c, rid, Role.READ, "observe")["record_id"]
                    for rid in (record_id, *more)
                )
            )
        self._record_reads(ids, "observed")

    def read(
        self,
        scope: str,
        claim_key: str,
        at: datetime | None = None,
        context: Mapping[str, Any] | None = None,
        kinds: Iterable[Kind | str] | None = None,
    ) -> ReadResult:
        """:meth:`Session.read <ledger.Session.read>` within the run: the usable
        records it answers with count as read."""
        self._check()
        return self._session.read(scope, claim_key, at, context, kinds)

    def get(self, record_id: str) -> RecordView:
        """:meth:`Session.get <ledger.Session.get>` within the run: the record counts
        as read."""
        self._check()
        return self._session.get(record_id)

    def explain(
        self,
        scope: str,
        claim_key: str,
        at: datetime | None = None,
        context: Mapping[str, Any] | None = None,
        kinds: Iterable[Kind | str] | None = None,
        *,
        limit: int | None = None,
    ) -> Explanation:
        """:meth:`Session.explain <ledger.Session.explain>` within the run: every
        record it shows (values included) counts as read, and only those."""
        self._check()
        return self._session.explain(scope, claim_key, at, context, kinds, limit=limit)

    def records(
        self,
        scope: str,
        *,
        status: Status | str | None = None,
        validity: Validity | str | None = None,
        kind: Kind | str | None = None,
        claim_prefix: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> tuple[RecordView, ...]:
        """:meth:`Session.records <ledger.Session.records>` within the run: every
        record of the page counts as read."""
        self._check()
        return self._session.records(
            scope,
            status=status,
            validity=validity,
            kind=kind,
            claim_prefix=claim_prefix,
            limit=limit,
            after=after,
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
        supersedes: str | None = None,
        accepted_by: Session | None = None,
    ) -> str:
        """:meth:`Session.propose <ledger.Session.propose>` within the run: the
        record carries as ``observed`` dependencies the records the run was last
        shown while VALID (minus its ``parents`` and what it ``supersedes``)."""
        self._check()
        return self._session.propose(
            scope,
            claim_key,
            value,
            kind,
            parents=parents,
            expires=expires,
            conditions=conditions,
            id=id,
            supersedes=supersedes,
            accepted_by=accepted_by,
        )

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
        """:meth:`Session.capture <ledger.Session.capture>` within the run: the
        evidence record carries the run's reads as ``observed`` dependencies, as
        :meth:`propose` does."""
        self._check()
        return self._session.capture(
            scope,
            uri,
            content,
            fetched_at=fetched_at,
            claim_key=claim_key,
            expires=expires,
            conditions=conditions,
            id=id,
            value=value,
        )
