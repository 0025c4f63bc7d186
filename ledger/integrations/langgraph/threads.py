"""Provenance inside a graph: one ledger run per LangGraph thread.

What a thread is shown usable through ``get`` and ``search`` becomes the
``observed`` dependencies of what it puts (the run decides: a record it was last
shown not VALID is no dependency). A store made with ``observe_search=False``
tells the run and the thread nothing of its searches: a search then neither adds
to what the thread rests on nor shows it a key as it is now (a ``get`` or a
delete does: below). The ledger refuses a put that would rest on a
record withdrawn since the thread read it; the thread goes on when

- it wrote or read the version that replaced it (the usual read-modify-write):
  the store shows the run the old version and observes the newer one instead,
  and tries the put once more; what the thread's own put of a new version made
  STALE (a record it read that was built on the old version) is no longer a
  dependency either: the thread made the change (one another thread made, it
  is shown when it reads the record's key again);
- it reads the key again (``get``), deletes it, or searches a namespace that
  holds the key and is not shown it: the run is shown the version it read as it
  is now, and no longer rests on it if it was withdrawn (a search that no longer
  finds a key is how a thread learns that another one deleted it).

A key the thread read as missing (a ``get`` answering None), or deleted, is
guarded likewise: its put is refused if a version of it was accepted since,
until the thread reads it again (``NewestOf.unseen_after``, decided in the put's
transaction). The store holds those keys in memory only: a run continued after
the store let the thread go, or by another store, has what it read, not them.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

import langgraph.store.base
from langchain_core.runnables.config import var_child_runnable_config

from ledger import RunContext, Session
from ledger.access import Role
from ledger.domain import Kind, Outcome, Status, Validity
from ledger.errors import DuplicateRecordError, InvalidInputError, LedgerError
from ledger.validation import ID_PATTERN
from ledger.values import ReadResult, RecordView

__all__ = [
    "MAX_THREADS",
    "RESTARTS",
    "Ids",
    "NoThreadWarning",
    "RunsLeftOpenWarning",
    "Thread",
    "Threads",
    "caller_level",
    "run_id_of",
    "thread_id",
]

#: How many LangGraph threads a store keeps in memory; past that, the one used
#: longest ago is let go (its run stays open, and is continued if it comes back).
MAX_THREADS = 1024
#: How many times in a row one operation goes on in a thread's next run.
RESTARTS = 32

_Op = TypeVar("_Op")
_R = TypeVar("_R")


class Ids:
    """Record ids that sort newest first: ``records()`` pages by id, so a search
    meets the newest versions first and can stop early."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> str:
        """A new record id, sorting before every earlier one."""
        with self._lock:
            self._last = max(time.time_ns(), self._last + 1)
            stamp = (1 << 64) - 1 - self._last
        return f"lg-{stamp:016x}-{secrets.token_hex(4)}"


class NoThreadWarning(UserWarning):
    """A graph put memories with no ``thread_id`` in its config: it has no ledger
    run, so what it read is not recorded as what those memories rest on (revoking
    a source leaves what was derived from it usable)."""

    SAID = (
        "LedgerStore: this graph puts memories with no thread_id in its config, so it "
        "has no ledger run and what it read is not recorded as what they rest on: "
        "revoking a source will not reach what was derived from it; invoke it with "
        "config={'configurable': {'thread_id': ...}}"
    )

    LOST = (
        "LedgerStore: a call came from an executor's OS thread (a ThreadPoolExecutor, "
        "run_in_executor) that does not carry a graph's config, while graph threads use "
        "this store: if a node made it, it is recorded in no thread's run (a read is not "
        "what the thread's writes rest on, a put rests on nothing); call the store in the "
        "node's own thread, or through asyncio.to_thread or contextvars.copy_context().run, "
        "which carry the config"
    )


#: How the threads of the standard library's executors are named (asyncio's default
#: executor is a ThreadPoolExecutor named "asyncio").
_POOLED = ("ThreadPoolExecutor", "asyncio_")


class ThreadWarnings:
    """What a store says once each (:class:`NoThreadWarning`): a graph that puts
    with no ``thread_id`` in its config, and a call from an executor's thread,
    which does not carry a graph's config (its context variables), while graph
    threads use the store: neither is recorded in a run."""

    def __init__(self, threads: Threads) -> None:
        self._threads = threads
        self._said: set[str] = set()

    def check(self, puts: bool, reads: bool) -> None:
        """Warn, pointing at the code that called the store, of a call with no
        thread that ``puts`` (in a graph) or ``reads`` or ``puts`` (from an
        executor's thread)."""
        if puts and NoThreadWarning.SAID not in self._said and in_graph():
            self._warn(NoThreadWarning.SAID)
        elif (puts or reads) and NoThreadWarning.LOST not in self._said and self._pooled():
            self._warn(NoThreadWarning.LOST)

    def _pooled(self) -> bool:
        """Called outside any runnable, from an executor's thread, while graph
        threads use the store (a web server's worker threads are named otherwise)."""
        pooled = threading.current_thread().name.startswith(_POOLED)
        return pooled and not in_graph() and bool(self._threads.kept())

    def _warn(self, said: str) -> None:
        self._said.add(said)
        warnings.warn(NoThreadWarning(said), stacklevel=caller_level())


class RunsLeftOpenWarning(UserWarning):
    """A store closed after its ledger: the ledger runs of the LangGraph threads it
    served could not be ended, and stay open in the log (a store serving one of
    those threads later continues its run, with what it read but not the keys it
    found missing)."""

    @classmethod
    def of(cls, left: Collection[Thread], why: LedgerError) -> RunsLeftOpenWarning:
        """The warning naming the threads ``left`` (at most five of their runs) and
        ``why`` their runs could not be ended (the ledger closed)."""
        runs = ", ".join(repr(state.run.run_id) for state in list(left)[:5])
        more = f" and {len(left) - 5} more" if len(left) > 5 else ""
        return cls(
            f"LedgerStore.close could not end the ledger runs of {len(left)} LangGraph "
            f"thread(s) ({runs}{more}), which stay open: {why} (close the store before "
            "the ledger to end them; a store serving those threads later continues them)"
        )


#: Where the store's own frames are: this package, and LangGraph's ``BaseStore``
#: (whose ``get``, ``aput``, ``delete``, … call the store's ``batch``).
_OWN = tuple(os.path.dirname(path) + os.sep for path in (__file__, langgraph.store.base.__file__))


def caller_level() -> int:
    """The ``stacklevel`` that makes a warning issued by the function calling this
    one point at the code that called the store (the first frame outside this
    package and ``BaseStore``), whichever public method it called."""
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_OWN):
        frame = frame.f_back
        level += 1
    return level


def in_graph() -> bool:
    """Whether a runnable config is in force (a graph node, or another runnable)."""
    return bool(var_child_runnable_config.get())


def thread_id() -> str | None:
    """The ``thread_id`` of the runnable config in force, if any (the config
    ``langgraph.config.get_config`` returns, read without the exception it raises
    outside a runnable)."""
    config = var_child_runnable_config.get()
    if not config:  # not inside a runnable
        return None
    thread = (config.get("configurable") or {}).get("thread_id")
    return None if thread is None else str(thread)


def run_id_of(thread: str, number: int = 0) -> str:
    """The ledger run id of a LangGraph thread's ``number``-th run (0: its first;
    a thread resumed by a later store, after its run ended, goes on in the next).

    ``langgraph:THREAD`` for a thread id that is a ledger name without ``:``;
    otherwise ``langgraph::h-`` and a digest of it; a later run adds ``:NUMBER``.
    No two threads share a run id, whatever their ids and resumptions (only a
    digest has ``::``, and only a later run a ``:`` after the thread's part), nor
    with a run an earlier version named (``langgraph.…``).
    """
    candidate = f"langgraph:{thread}"
    if not thread or ":" in thread or not ID_PATTERN.fullmatch(candidate) or len(candidate) > 110:
        # (a lone surrogate kept as itself: "replace" made "x\ud800" the run of "x?")
        digest = hashlib.sha256(thread.encode("utf-8", "surrogatepass")).hexdigest()[:40]
        candidate = f"langgraph::h-{digest}"
    return candidate if number == 0 else f"{candidate}:{number}"


@dataclass
class Thread:
    """The ledger run of one LangGraph thread, and what the thread knows."""

    thread_id: str
    run: RunContext
    #: One batch at a time per thread.
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Records the thread put (it knows them as well as what it read).
    written: set[str] = field(default_factory=set)
    #: Records the thread deleted (revoked through the store): its own change too.
    deleted: set[str] = field(default_factory=set)
    #: The (scope, claim key) of each record the thread was shown usable.
    keys: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: The log position of the latest search of each (scope, claim prefix).
    searches: dict[tuple[str, str | None], int] = field(default_factory=dict)
    #: Each (scope, claim key) the thread last read as missing (or deleted), with
    #: the log position as of which it was (its put then passes ``NewestOf`` that
    #: position: refused if a version was accepted since).
    missing: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Whether the thread went on in a new run from one an earlier store ended
    #: (carried into it): what it put there it does not know as ``written``. Not
    #: so for a run still open, taken again (this store let it go, or another
    #: store serves the thread at the same moment): versions put in it meanwhile
    #: may hold what two computed from one older state.
    resumed: bool = False
    #: The log position when this store resumed the thread: what the thread put
    #: by then, in an earlier store, it may save again unchanged (:meth:`keeps`).
    began: int = 0

    @classmethod
    def start(cls, session: Session, thread: str) -> Thread:
        """Start the thread's run, or continue it if it is open (a store let it go,
        or stopped without closing), with what it read. A run that ended cannot be
        reopened: a thread resumed by a later store, after the first closed, goes
        on in its next run (``run_id_of(thread, n)``), carrying what the thread
        was shown VALID in the one before (``RunContext.carry_into``; a graph
        resumed from its checkpoint holds values read before the store closed).
        Its runs end in order, so the first one not ended is found in a number of
        look-ups that grows with the logarithm of how many there were.

        Raises:
            AccessDeniedError: the principal holds neither ``propose`` nor ``read``.
        """

        def ended(number: int) -> bool:
            return session.run(run_id_of(thread, number)).state() == "ended"

        number = 0
        if ended(0):
            low, high = 0, 1  # ended(low); the first not ended is after it
            while ended(high):
                low, high = high, high * 2
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if ended(middle) else (low, middle)
            number = high
        while True:
            run = session.run(run_id_of(thread, number))
            try:
                run.__enter__()
            except DuplicateRecordError:
                try:  # started meanwhile, or open: continued
                    run.resume()
                except InvalidInputError:  # ended meanwhile: the thread goes on
                    number += 1
                    continue
                return cls(thread_id=thread, run=run, keys=_keys_of(session, run.relied_on))
            if number == 0:
                return cls(thread_id=thread, run=run)
            began = session.caller.engine.position()  # (read only for a thread resumed)
            session.run(run_id_of(thread, number - 1)).carry_into(run)  # ours: ended
            keys = _keys_of(session, run.relied_on)
            return cls(thread_id=thread, run=run, keys=keys, resumed=True, began=began)

    def end(self) -> None:
        """End the run (recorded as completed)."""
        with self.lock:
            self.run.__exit__(None, None, None)

    def note_shown(self, scope: str, claim: str, views: Collection[RecordView]) -> None:
        """Note what a ``search`` showed the thread of one key (already recorded in
        the run): a key shown is not missing to the thread."""
        for view in views:
            self.keys[view.id] = (scope, claim)
        if views:
            self.missing.pop((scope, claim), None)

    def read(
        self, position: Callable[[], int], scope: str, claim: str, kinds: Iterable[Kind]
    ) -> ReadResult:
        """The thread's read of a key, through its run (see :meth:`read_key`). A key
        found missing is read once more after taking the log ``position()``, and
        noted missing as of it (every version proposed or changed up to it was
        visible to that read): the thread's put of it is then refused if a version
        was accepted since. A key found usable costs no more than the one read."""
        result = self.run.read(scope, claim, kinds=kinds)
        at = None
        if result.outcome == Outcome.MISSING:
            at = position()
            result = self.run.read(scope, claim, kinds=kinds)
        self.read_key(scope, claim, result.records)
        if at is not None and result.outcome == Outcome.MISSING:
            self.missing[(scope, claim)] = at
        return result

    def read_key(self, scope: str, claim: str, current: Collection[RecordView]) -> None:
        """The thread read a key (through the run) and was shown ``current``: each
        record of that key it rests on and was not shown now is shown to the run
        as it is now, so the run stops resting on it if it was withdrawn."""
        self.missing.pop((scope, claim), None)  # read again: as it is now
        now = {view.id for view in current}
        earlier = [
            rid
            for rid in self.run.relied_on
            if rid not in now and self.keys.get(rid) == (scope, claim)
        ]
        for rid in earlier:
            try:
                self.run.get(rid)
            except LedgerError:  # no longer visible: nothing can rest on it now
                continue
        self.note_shown(scope, claim, current)

    def searched(self, where: Collection[tuple[str, str | None]], position: int) -> None:
        """Note a ``search`` of ``where`` ((scope, claim prefix or None) each) made
        at log ``position`` (what it did not show as of then, the thread was shown
        gone: see :meth:`recheck`)."""
        for key in where:
            self.searches[key] = position

    def recheck(self, session: Session) -> bool:
        """After a put was refused: show the run, as it is now, each record it rests
        on that the thread's latest search of its namespace did not find because it
        was no longer VALID then (a search no longer finding a key is how a thread
        learns another deleted it). Paid only when a put is refused; True if any."""
        changed = False
        for rid in self.run.relied_on:
            where = self.keys.get(rid)
            if where is None:
                continue
            scope, claim = where
            at = [
                p
                for (s, prefix), p in self.searches.items()
                if s == scope and claim.startswith(prefix or "")
            ]
            if not at:
                continue
            try:
                then = session.as_of(position=max(at)).get(rid)
            except LedgerError:  # not visible then or now: nothing rests on it
                continue
            if then.validity != Validity.VALID:
                try:
                    self.run.get(rid)
                except LedgerError:
                    continue
                changed = True
        return changed

    def saw(self, scope: str, claim: str) -> bool:
        """Whether the thread was shown or put a version of the key, and has not
        found it missing since (else a put of it cannot leave the key unchanged)."""
        key = (scope, claim)
        return key not in self.missing and any(k == key for k in self.keys.values())

    def may_keep(self, scope: str, claim: str) -> bool:
        """Whether a put of the key may find it unchanged (:meth:`keeps`): the thread
        saw it, or went on from an earlier store's run, where it may have put it,
        and has not found it missing since."""
        key = (scope, claim)
        return self.saw(scope, claim) or (self.resumed and key not in self.missing)

    def keeps(self, record_id: str, scope: str, claim: str, session: Session) -> bool:
        """Whether a put of the value ``record_id`` holds (the key's one usable
        version) may write nothing: the thread :meth:`knows` it, or, resumed, its
        principal put it in one of the thread's runs before this store took the
        thread (a graph resumed from its checkpoint saves the state it saved
        before; a version another store serving the thread put since may hold
        what both computed from an older state); it then knows it as its own put."""
        if self.knows(record_id):
            return True
        # What the thread read of the key in its earlier runs, it rests on: a version
        # put since (by another store serving the thread then) may hold what both
        # computed from it, so only a thread resting on no other version keeps it.
        key = (scope, claim)
        if any(self.keys.get(rid) == key for rid in self.run.relied_on if rid != record_id):
            return False
        proposed = _proposed_in(session, record_id) if self.resumed else None
        if proposed is None or not self._ours(proposed[0]) or proposed[1] > self.began:
            return False
        self.written.add(record_id)
        self.keys[record_id] = (scope, claim)
        return True

    def _ours(self, run_id: str | None) -> bool:
        """Whether ``run_id`` is one of this thread's runs (:func:`run_id_of`)."""
        first = run_id_of(self.thread_id)
        later = run_id is not None and run_id.startswith(first + ":")
        return run_id == first or (later and str(run_id)[len(first) + 1 :].isdigit())

    def knows(self, record_id: str) -> bool:
        """Whether the thread put or read ``record_id``: a put of its value may then
        write nothing. A version put by another thread since the thread read an
        older one (or found none) may hold what the thread computed from that
        older state (a counter both incremented): the put proposes, and is refused."""
        return record_id in self.written or record_id in self.run.reads

    def catch_up(self, session: Session) -> bool:
        """After a put was refused: show the run each record it rests on that was
        superseded by a version the thread read or wrote since, and observe that
        version instead; and each one made STALE only by the thread's own
        changes: versions it put replacing what it was built on (its put of a key
        it read makes what it read that was built on the key's old version
        STALE), or its deletes of it. False if there is none (nothing changes then)."""
        known = set(self.run.reads) | self.written
        shown: list[str] = []
        newer: list[str] = []
        for rid in self.run.relied_on:
            try:
                view = session.get(rid)  # looked up, not recorded in the run
            except LedgerError:  # no longer visible: nothing replaces it for the thread
                continue
            newest = _newest_known(session, view, known)
            if newest is not None:
                shown.append(rid)
                newer.append(newest)
                # a new version of the same key: known by it, so that reading the
                # key again, deleting it or a search not finding it shows it too
                self.keys[newest] = (view.scope, view.claim_key)
            elif _outdated_by(view, self.written, self.deleted):
                shown.append(rid)
        if not shown:
            return False
        for rid in shown:
            self.run.get(rid)  # shown SUPERSEDED or STALE: no longer a dependency
        if newer:
            self.run.observe(*dict.fromkeys(newer))
        return True


def _keys_of(session: Session, record_ids: Collection[str]) -> dict[str, tuple[str, str]]:
    """The (scope, claim key) of each of ``record_ids`` ``session`` can see (looked
    up, not recorded in a run): what a continued run's thread knows them by."""
    keys = {}
    for rid in record_ids:
        try:
            view = session.get(rid)
        except LedgerError:  # no longer visible: nothing can rest on it now
            continue
        keys[rid] = (view.scope, view.claim_key)
    return keys


def _outdated_by(view: RecordView, written: Collection[str], deleted: Collection[str]) -> bool:
    """Whether ``view`` is STALE only because of the thread's own changes: every
    cause still blocking it was superseded by a version in ``written`` (its puts)
    or is one of ``deleted`` (what its deletes revoked)."""
    if view.validity != Validity.NEEDS_REVALIDATION:
        return False
    blocking = [cause for cause in view.stale_causes if cause.blocking]
    return bool(blocking) and all(
        cause.superseded_by in written or (cause.superseded_by is None and cause.cause in deleted)
        for cause in blocking
    )


def _newest_known(session: Session, view: RecordView, known: Collection[str]) -> str | None:
    """The newest version in ``known`` of those that superseded ``view``, if it is
    SUPERSEDED (looked up through ``session``: not recorded in the run)."""
    if view.status != Status.SUPERSEDED:
        return None
    newest, following, seen = None, view.superseded_by, set()
    while following is not None and following not in seen:
        seen.add(following)
        if following in known:
            newest = following
        try:
            following = session.get(following).superseded_by
        except LedgerError:  # a later version not visible: the thread cannot know it
            break
    return newest


def _proposed_in(session: Session, record_id: str) -> tuple[str, int] | None:
    """The run ``record_id`` was proposed in by ``session``'s principal (run ids
    are the principal's own: another's run of the same name is not its), and the
    log position of its proposal; None if another proposed it, in no run, or it
    is not readable."""
    caller = session.caller
    try:
        with caller.reading() as c:
            row = caller.visible(c, record_id, Role.READ, "put")
    except LedgerError:
        return None
    found, created = row["run_id"], row["created_pos"]
    if not isinstance(found, str) or row["proposer"] != session.principal:
        return None
    return found, int(created)


class Threads:
    """The runs of the LangGraph threads one store serves: the ``MAX_THREADS`` it
    used last, kept in memory. One used longer ago is let go, its run left open,
    and should it come back its run is continued with what it read
    (``Thread.start``), as after a restart."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._threads: OrderedDict[str, Thread] = OrderedDict()

    def get(self, thread: str) -> Thread:
        """The run of a LangGraph thread, started (or continued) on first use."""
        with self._lock:
            state = self._threads.get(thread)
            if state is not None:
                self._threads.move_to_end(thread)
                return state
            state = self._threads[thread] = Thread.start(self._session, thread)
            while len(self._threads) > MAX_THREADS:
                self._threads.popitem(last=False)
            return state

    def forget(self, states: Collection[Thread]) -> None:
        """Let ``states`` go (a store closed after its ledger: their runs stay open)."""
        with self._lock:
            for state in states:
                if self._threads.get(state.thread_id) is state:
                    del self._threads[state.thread_id]

    def kept(self) -> list[Thread]:
        """Every thread kept (what closing the store ends). They stay kept: one
        served again goes on in its next run with what it read and wrote
        (:meth:`restart`), as after another store ended its run."""
        with self._lock:
            return list(self._threads.values())

    def in_run(
        self, state: Thread | None, do: Callable[[Thread | None, _Op], _R], op: _Op
    ) -> tuple[Thread | None, _R]:
        """``do(state, op)``; if it was refused because the thread's run has ended
        (another store over the ledger, serving the same thread, closed and ended
        it), again in the thread's next run, which then serves the thread here
        with what it read (:meth:`restart`). Nothing was written in the ended run
        by the refused operation."""
        for _ in range(RESTARTS):
            try:
                if state is not None and not state.run.is_open:
                    state = self.restart(state)
                return state, do(state, op)
            except InvalidInputError:
                if state is None or state.run.is_open:
                    raise
        assert state is not None
        raise InvalidInputError(
            f"LangGraph thread {state.thread_id!r}: its ledger run was ended {RESTARTS} "
            "times in a row while this store served it (other stores serving the thread "
            "closed meanwhile); try again, or give each store threads of its own"
        )

    def restart(self, ended: Thread) -> Thread:
        """The thread's next run, in place of ``ended`` (whose lock it keeps: the
        batch that found it ended holds it), carrying what the thread read there
        (``RunContext.carry_into``) and what it knew; or the one another batch of
        the thread started already."""
        with self._lock:
            current = self._threads.get(ended.thread_id)
            if current is not None and current is not ended and current.run.is_open:
                return current
            state = Thread.start(self._session, ended.thread_id)
            ended.run.carry_into(state.run)
            state.lock = ended.lock
            # (what this store knew of the thread, and since when, goes on)
            state.resumed, state.began = ended.resumed, ended.began
            # what it carried, by key (reads another store serving the thread made
            # included: reading such a key again shows the run it as it is now)
            state.keys.update(_keys_of(self._session, state.run.relied_on))
            state.keys.update(ended.keys)
            state.written |= ended.written
            state.deleted |= ended.deleted
            state.searches.update(ended.searches)
            state.missing.update(ended.missing)
            self._threads[ended.thread_id] = state
            return state
