"""``LedgerStore``: LangGraph's ``BaseStore`` over a ledger (see the package
docstring for the mapping, the approval policy and provenance)."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import nullcontext
from dataclasses import replace
from functools import partial
from typing import Any, Literal

from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from ledger import Ledger, RunContext, Session
from ledger.access import Role
from ledger.domain import Kind, Status, Validity
from ledger.errors import (
    AccessDeniedError,
    ClosedLedgerError,
    InvalidInputError,
    InvalidParentError,
    InvalidTransitionError,
    LedgerError,
)
from ledger.integrations.langgraph.checks import check_namespace, check_op, check_store_kind
from ledger.integrations.langgraph.filters import check_filter, matches, namespace_matches
from ledger.integrations.langgraph.items import item_of, newest_usable, unchanged
from ledger.integrations.langgraph.keys import (
    SEPARATOR,
    NamespaceLabelError,
    checked_location,
    component,
    find,
    key_lock,
    labels_of,
    location,
    names_a_scope,
    parse_claim_key,
    scope_of,
)
from ledger.integrations.langgraph.refusals import appeared, conflict, named_as, renamed
from ledger.integrations.langgraph.threads import (
    MAX_THREADS,
    Ids,
    RunsLeftOpenWarning,
    Thread,
    Threads,
    ThreadWarnings,
    caller_level,
    thread_id,
)
from ledger.proposals import NewestOf
from ledger.values import RecordView
from ledger.versions import NewerVersionError
from projections.record_table import LIVE_STATUSES

__all__ = ["MAX_THREADS", "PAGE", "LedgerStore"]

#: Records fetched per ``Session.records`` page while listing.
PAGE = 1000
#: The statuses of a record a delete revokes: every live one (a CANDIDATE only if
#: the store's own principal proposed it).
_DELETED = tuple(Status(s) for s in LIVE_STATUSES)


class LedgerStore(BaseStore):
    """LangGraph's ``BaseStore`` over a ledger (see :mod:`ledger.integrations.langgraph`).

    Args:
        ledger: an open :class:`ledger.Ledger`.
        token: the agent's token; its principal proposes (``propose`` and
            ``read`` in the scopes the graph uses).
        approver_token: if given, every put is accepted at once by this
            principal (an explicit policy that trades separation of duties for
            convenience); it must be another principal than ``token``'s.
        scope_depth: how many leading namespace labels name the scope.
        kind: the kind of the store's records (``fact``).
        observe_search: whether what ``search`` shows a LangGraph thread is
            observed on what it puts, as what ``get`` gives it is (the default, as
            SPEC §13.4 has it). False makes a search context, not a basis: for a
            graph that loads every memory into the prompt at each turn, where
            replacing one memory would otherwise make every later one STALE.
            (The "Provenance" section of the package docstring says more.)

    Raises:
        AuthenticationError: a token is unknown, revoked or expired.
        InvalidInputError: ``scope_depth`` is not a positive int,
            ``observe_search`` is not a bool, or the approver is the proposer.
        InvalidKindError: ``kind`` is not a record kind, or is ``evidence``.
    """

    supports_ttl = False

    def __init__(
        self,
        ledger: Ledger,
        *,
        token: str,
        approver_token: str | None = None,
        scope_depth: int = 1,
        kind: Kind | str = Kind.FACT,
        observe_search: bool = True,
    ) -> None:
        if not isinstance(ledger, Ledger):
            raise InvalidInputError(f"ledger must be a Ledger, got {type(ledger).__name__}")
        if isinstance(scope_depth, bool) or not isinstance(scope_depth, int) or scope_depth < 1:
            raise InvalidInputError(f"scope_depth must be a positive int, got {scope_depth!r}")
        if not isinstance(observe_search, bool):
            raise InvalidInputError(f"observe_search must be a bool, got {observe_search!r}")
        self.kind = check_store_kind(kind)
        self._kinds = (self.kind,)
        self.scope_depth = scope_depth
        self.observe_search = observe_search
        self.ledger = ledger
        self.session: Session = ledger.authenticate(token)
        self.approver: Session | None = (
            None if approver_token is None else ledger.authenticate(approver_token)
        )
        if self.approver is not None and self.approver.principal == self.session.principal:
            raise InvalidInputError(
                f"approver_token belongs to {self.session.principal!r}, the proposer: "
                "separation of duties forbids approving one's own proposals"
            )
        self._ids = Ids()
        self._max_value_bytes = ledger.engine.max_value_bytes
        self._threads = Threads(self.session)
        self._warnings = ThreadWarnings(self._threads)

    def __repr__(self) -> str:
        return (
            f"LedgerStore({self.ledger.url!r}, principal={self.session.principal!r}, "
            f"approver={None if self.approver is None else self.approver.principal!r}, "
            f"scope_depth={self.scope_depth}, kind={self.kind.value!r}, "
            f"observe_search={self.observe_search})"
        )

    # -- lifecycle ----------------------------------------------------------------

    def close(self) -> None:
        """End the ledger run of every thread this store served (one another store
        ended already is left as it is). Safe to call twice. If a run cannot be
        ended (its token revoked, say), the others still are and the first such
        error is raised after. A thread served again afterwards goes on in its
        next run, with what it read and wrote (unless the store let it go since:
        ``MAX_THREADS``).

        Closed after the ledger (``led.close(); store.close()``), it raises
        nothing, but cannot end the runs in the log: they stay open, as if the
        process had stopped, and a ``RunsLeftOpenWarning`` names them (a store
        serving one of those threads later continues its run, with what it read
        but not the keys it found missing, which only this store held; close the
        store first to end them)."""
        failed: LedgerError | None = None
        left: list[Thread] = []
        closed: ClosedLedgerError | None = None
        # Every thread's run, even after one could not be ended.
        for state in self._threads.kept():
            try:
                state.end()
            except ClosedLedgerError as exc:
                left.append(state)
                closed = closed or exc
            except LedgerError as exc:
                failed = failed or exc
        if closed is not None:
            self._threads.forget(left)  # nothing more can be done with them
            warnings.warn(RunsLeftOpenWarning.of(left, closed), stacklevel=caller_level())
        if failed is not None:
            raise failed

    def __enter__(self) -> LedgerStore:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.close()
        except LedgerError as failure:
            if not isinstance(exc, BaseException):
                raise
            # The block's own exception stays the one raised (as a run's does).
            exc.add_note(f"the store's thread runs could not all be ended: {failure}")

    # -- BaseStore ----------------------------------------------------------------

    def get(
        self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None
    ) -> Item | None:
        """Retrieve a single item (``BaseStore.get``): the same checks and answer
        as a batch of one ``GetOp``; outside a LangGraph thread, one ledger read
        without the batch around it; ``refresh_ttl`` is ignored (no TTL)."""
        if thread_id() is not None:
            return super().get(namespace, key, refresh_ttl=refresh_ttl)
        self._warnings.check(puts=False, reads=True)
        if type(namespace) is not tuple:
            check_namespace(namespace)  # a bare string is no namespace
        namespace, key = tuple(namespace), str(key)
        try:
            scope, claim = checked_location(namespace, key, self.scope_depth)
        except TypeError:  # an unhashable label, which the check refuses by name
            validate_op_namespace(GetOp(namespace, key))
            raise
        except NamespaceLabelError:
            if names_a_scope(namespace, self.scope_depth):
                return None  # no item can be there (see ``keys.find``)
            raise
        try:
            result = self.session.read(scope, claim, None, None, self._kinds)  # positional: quicker
        except AccessDeniedError as exc:
            raise renamed(exc, "get") from None
        records = result.records
        if len(records) == 1:  # the one usable record (FOUND), as newest_usable gives it
            view: RecordView | None = records[0]
        else:
            view = newest_usable(result, partial(conflict, None, namespace, key))
        item: Item | None = item_of(Item, namespace, key, view)
        return item

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """Store an item (``BaseStore.put``): a batch of one ``PutOp``. A ``ttl``
        other than None raises ``UnsupportedStoreOperationError``, as in a batch."""
        self.batch([self._put_op(namespace, key, value, index, ttl)])

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """``put`` in a worker thread (``BaseStore.aput``)."""
        await self.abatch([self._put_op(namespace, key, value, index, ttl)])

    @staticmethod
    def _put_op(
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None,
        ttl: float | NotProvided | None,
    ) -> PutOp:
        # BaseStore.put refuses a ttl with a bare NotImplementedError before the
        # batch sees it; the batch's check says what to do instead.
        check_namespace(namespace)  # before a bare string becomes one label a letter
        return PutOp(
            tuple(namespace), str(key), value, index, None if isinstance(ttl, NotProvided) else ttl
        )

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations; results in the order of ``ops`` (see "Batches")."""
        listed, thread = list(ops), thread_id()
        self._warn_without_thread(listed, thread)
        return self._execute(listed, thread)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread, so the event loop keeps running."""
        listed, thread = list(ops), thread_id()
        self._warn_without_thread(listed, thread)  # here: the caller's frames are
        return await asyncio.to_thread(self._execute, listed, thread)

    def _warn_without_thread(self, ops: list[Op], thread: str | None) -> None:
        """Say once per store what a call with no thread leaves unrecorded."""
        if thread is None:
            puts = any(isinstance(op, PutOp) and op.value is not None for op in ops)
            reads = any(isinstance(op, GetOp | SearchOp) for op in ops)
            self._warnings.check(puts, reads)

    def _execute(self, ops: list[Op], thread: str | None) -> list[Result]:
        for op in ops:
            check_op(op, self.scope_depth, self._max_value_bytes)
        writes = [op for op in ops if isinstance(op, PutOp) and op.value is not None]
        if len(writes) > 1:
            depth = self.scope_depth
            self._check_proposer({location(tuple(op.namespace), op.key, depth)[0] for op in writes})
        state = None if thread is None else self._threads.get(thread)
        with state.lock if state is not None else nullcontext():
            results: list[Result] = []
            puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
            for op in ops:
                with named_as(op):
                    if isinstance(op, GetOp):
                        state, got = self._threads.in_run(state, self._get, op)
                        results.append(got)
                    elif isinstance(op, SearchOp):
                        state, found = self._threads.in_run(state, self._search, op)
                        results.append(found)
                    elif isinstance(op, ListNamespacesOp):
                        results.append(self._list_namespaces(op))
                    else:
                        assert isinstance(op, PutOp)
                        puts.pop((tuple(op.namespace), op.key), None)
                        puts[(tuple(op.namespace), op.key)] = op
                        results.append(None)
            for op in puts.values():
                with named_as(op):
                    state, _ = self._threads.in_run(state, self._put, op)
        return results

    def _check_proposer(self, scopes: set[str]) -> None:
        """Refuse puts in ``scopes`` the principal may not propose in (or the approver
        accept in): a batch's before the first is written, an unchanged put's too."""
        held = self.session.grants()
        approver = self.approver
        approves = {} if approver is None else approver.grants()
        for scope in sorted(scopes):
            if Role.PROPOSE.value not in held.get(scope, ()):
                raise self.session.caller.denied(scope, Role.PROPOSE, "put")
            if approver is not None and Role.APPROVE.value not in approves.get(scope, ()):
                raise AccessDeniedError(
                    f"put refused: accepted_by {approver.principal!r} lacks role 'approve' "
                    f"in scope {scope!r}; nothing of the batch was written"
                )

    # -- scopes -------------------------------------------------------------------

    def _readable_scopes(self, command: str) -> list[str]:
        """Scopes where the store's principal holds ``read`` now, sorted; a listing
        across scopes without ``read`` in any is refused, not answered empty."""
        held = self.session.grants()
        scopes = [scope for scope, roles in held.items() if Role.READ.value in roles]
        if not scopes:
            raise AccessDeniedError(
                f"{command} refused: {self.session.principal!r} lacks role 'read' in every scope"
            )
        return scopes

    def _scopes_under(
        self, prefix: tuple[str, ...]
    ) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
        """(scope, its labels, the prefix labels after them) for a namespace prefix."""
        depth = self.scope_depth
        if len(prefix) >= depth:
            return [(scope_of(prefix[:depth]), prefix[:depth], prefix[depth:])]
        out: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
        for scope in self._readable_scopes("search"):
            labels = labels_of(scope, depth)
            if labels is not None and labels[: len(prefix)] == prefix:
                out.append((scope, labels, ()))
        return out

    # -- reads --------------------------------------------------------------------

    def _position(self) -> int:
        """The ledger's log position (of its newest event)."""
        return self.ledger.position

    def _current(
        self, reader: Session | RunContext, scope: str, claim: str, where: Callable[[str], str]
    ) -> RecordView | None:
        """The usable current version of a claim (eligibility chain), or None."""
        return newest_usable(reader.read(scope, claim, kinds=(self.kind,)), where)

    def _get(self, state: Thread | None, op: GetOp) -> Item | None:
        located = find(op.namespace, op.key, self.scope_depth)
        if located is None:
            return None
        scope, claim = located
        where = partial(conflict, None, tuple(op.namespace), op.key)
        if state is None:
            view = self._current(self.session, scope, claim, where)
        else:
            result = state.read(self._position, scope, claim, self._kinds)
            view = newest_usable(result, where)
        item: Item | None = item_of(Item, tuple(op.namespace), op.key, view)
        return item

    def _listing(
        self, scope: str, claim_prefix: str | None, wanted: int = PAGE
    ) -> Iterator[RecordView]:
        """Accepted, valid records of the store's kind in ``scope``, page by page:
        the first page of ``wanted`` records, each next one twice as large, up to
        ``PAGE`` (a page's query passes over the withdrawn versions among the
        records it returns, so a search for a few items asks for a few)."""
        after = None
        size = max(1, min(wanted, PAGE))
        while True:
            page = self.session.records(
                scope,
                status=Status.ACCEPTED,
                validity="VALID",
                kind=self.kind,
                claim_prefix=claim_prefix,
                limit=size,
                after=after,
            )
            yield from page
            if len(page) < size:
                return
            after = page[-1].id
            size = min(2 * size, PAGE)

    def _search(self, state: Thread | None, op: SearchOp) -> list[SearchItem]:
        flt = check_filter(op.filter)
        prefix = tuple(op.namespace_prefix)
        found: list[SearchItem] = []
        shown: list[tuple[str, RecordView]] = []
        searched: list[tuple[str, str | None]] = []
        skipped = 0
        if op.limit == 0:
            return found
        if not self.observe_search:
            state = None  # context, not a basis: the thread's run is not told of it
        position = self.ledger.position if state is not None else 0  # before it reads
        for scope, labels, rest in self._scopes_under(prefix):
            claim_prefix = "".join(component(label) + SEPARATOR for label in rest) or None
            if state is not None:
                searched.append((scope, claim_prefix))
            seen: set[str] = set()
            for view in self._listing(scope, claim_prefix, op.offset + op.limit):
                parsed = parse_claim_key(view.claim_key)
                if parsed is None or view.claim_key in seen or view.conditions:
                    continue
                namespace, key = labels + parsed[0], parsed[1]
                if namespace[: len(prefix)] != prefix or not matches(flt, view.value):
                    continue
                seen.add(view.claim_key)
                where = partial(conflict, prefix, namespace, key)
                current = self._current(self.session, scope, view.claim_key, where)
                if current is None or not isinstance(current.value, dict):  # not an item
                    continue
                if not matches(flt, current.value):
                    continue
                if skipped < op.offset:
                    skipped += 1
                    continue
                found.append(item_of(SearchItem, namespace, key, current))
                shown.append((scope, current))
                if len(found) == op.limit:
                    break
            if len(found) == op.limit:
                break
        if state is not None and shown:  # what the node was shown is what it may rely on
            state.run.observe(*(view.id for _, view in shown))
            for scope, view in shown:
                state.note_shown(scope, view.claim_key, (view,))
        if state is not None and searched:
            state.searched(searched, position)
        return found

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        depth = self.scope_depth
        prefixes = [tuple(c.path) for c in conditions if c.match_type == "prefix"]
        namespaces: set[tuple[str, ...]] = set()
        readable = self._readable_scopes("list_namespaces")
        # A prefix naming one scope outright asks about that scope: without
        # ``read`` there, refused as a search of it is, not answered empty.
        for path in prefixes:
            if len(path) >= depth and "*" not in path[:depth]:
                scope = scope_of(path[:depth])
                if scope not in readable:
                    raise AccessDeniedError(
                        f"list_namespaces refused: {self.session.principal!r} lacks role "
                        f"'read' in scope {scope!r}"
                    )
        for scope in readable:
            labels = labels_of(scope, depth)
            if labels is None or not all(
                all(p == "*" or p == s for s, p in zip(labels, path, strict=False))
                for path in prefixes
            ):
                continue
            # The literal labels of a prefix right after the scope narrow the listing.
            literal: list[str] = []
            for label in prefixes[0][depth:] if prefixes else ():
                if label == "*":
                    break
                literal.append(label)
            claim_prefix = "".join(component(x) + SEPARATOR for x in literal) or None
            for view in self._listing(scope, claim_prefix):
                parsed = parse_claim_key(view.claim_key)
                # Only namespaces holding an item: a value that is no mapping is none.
                if parsed is not None and not view.conditions and isinstance(view.value, dict):
                    namespaces.add(labels + parsed[0])
        kept = [ns for ns in namespaces if all(namespace_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            kept = list({ns[: op.max_depth] for ns in kept})
        return sorted(kept)[op.offset : op.offset + op.limit]

    # -- writes -------------------------------------------------------------------

    def _put(self, state: Thread | None, op: PutOp) -> None:
        located = find(op.namespace, op.key, self.scope_depth)
        if located is None:
            return  # a delete of what cannot be stored (a put of it was refused)
        scope, claim = located
        with key_lock(scope, claim):
            if op.value is None:
                # What the thread deleted is no basis for it now, and the key is
                # missing to it as of before the delete read the versions it revokes.
                at = None if state is None else self._position()
                revoked = self._delete(scope, claim)
                if state is not None and at is not None:
                    state.deleted.update(revoked)
                    state.read_key(scope, claim, ())
                    state.missing[(scope, claim)] = at
            else:
                same = None  # a read-only ledger refuses the put; a thread knows no version
                if not self.ledger.read_only and (state is None or state.may_keep(scope, claim)):
                    same = unchanged(self.session, scope, claim, self.kind, op.value)
                if same is not None and state is not None:
                    same = same if state.keeps(same, scope, claim, self.session) else None
                if same is not None:
                    try:  # a put it may not make is proposed (and refused), whatever its value
                        self._check_proposer({scope})
                    except LedgerError:
                        same = None
                if same is None:
                    self._replace(state, scope, claim, op.value)

    def _replace(self, state: Thread | None, scope: str, claim: str, given: Any) -> None:
        """Propose ``given`` as the newest version of the key (accepted at once
        under the approver policy), superseding the version it replaces: the
        key's newest ACCEPTED or STALE record, else its newest CANDIDATE, found
        under the writers' lock (``proposals.NewestOf``), so the last put wins as
        in any store, also when other processes put the key at the same moment."""
        fields: dict[str, Any] = {"supersedes": NewestOf(self.kind.value)}
        if self.approver is not None:
            # Proposed and accepted in one transaction: whole, or not at all.
            fields["accepted_by"] = self.approver
        value = dict(given)
        if state is None:
            self.session.propose(scope, claim, value, self.kind, id=self._ids.next(), **fields)
        else:
            self._propose_in_thread(state, scope, claim, value, fields)

    def _delete(self, scope: str, claim: str) -> list[str]:
        """Revoke the key's versions the store may delete; their ids."""
        revoker, revoked = self.approver or self.session, []
        reason = f"deleted through the LangGraph store (LedgerStore): {scope}/{claim}"
        mine = self.session.principal
        for entry in self.session.explain(scope, claim, kinds=(self.kind,)).entries:
            record = entry.record
            # Only what get shows as an item, or would again once revalidated, and
            # the store's own puts still awaiting review: a record another surface
            # wrote there with a value that is no mapping is not the store's to
            # delete, nor is a candidate someone else proposed, which its reviewers
            # decide on (however many there are).
            if (
                record.kind == self.kind
                and record.status in _DELETED
                and (record.status != Status.CANDIDATE or record.proposer == mine)
                and isinstance(record.value, dict)
            ):
                try:
                    revoker.revoke(self._named_for(revoker, record.id, scope), reason)
                    revoked.append(record.id)
                except InvalidTransitionError:
                    # Revoked or replaced since it was listed (another process
                    # deleted or put the key at once): gone already, as asked.
                    if self.session.get(record.id).status in _DELETED:
                        raise
        return revoked

    def _named_for(self, other: Session, record_id: str, scope: str) -> str:
        """How ``other`` is shown the record in ``scope`` that the store's principal
        is shown as ``record_id``: the two may see different scopes, so one id
        can denote different records to them (``ledger.redaction``)."""
        if other is self.session:
            return record_id
        if scope not in other.grants():
            raise AccessDeniedError(
                f"the store's approver {other.principal!r} holds no role in scope {scope!r}, "
                "where the store's record is"
            )
        return other.caller.shown(None, self.session.caller.key_of(record_id, scope))

    # -- runs ---------------------------------------------------------------------

    def _propose_in_thread(
        self, state: Thread, scope: str, claim: str, value: Any, fields: dict[str, Any]
    ) -> str:
        """Propose in the thread's run (what it was shown usable becomes ``observed``).

        A read withdrawn since is refused by the ledger; if the thread's latest
        search of its namespace no longer found it (:meth:`Thread.recheck`), or it
        was superseded by a version the thread read or wrote later
        (:meth:`Thread.catch_up`), the thread knows it and the proposal is tried
        once more. A refusal, at once or then, names the keys to get again.

        Raises:
            InvalidParentError: the proposal rests on a record withdrawn since the
                thread read it, naming the namespace and key to get again."""

        tried: list[str] = []

        # A key the thread read as missing: refused if a version was accepted since.
        missing_at = state.missing.get((scope, claim))
        newest = fields.get("supersedes")
        if missing_at is not None and isinstance(newest, NewestOf):
            fields = {**fields, "supersedes": replace(newest, unseen_after=missing_at)}

        def propose() -> str:
            tried.append(self._ids.next())
            return state.run.propose(scope, claim, value, self.kind, id=tried[-1], **fields)

        try:
            try:
                record_id = propose()
            except NewerVersionError:
                raise
            except InvalidParentError:
                rechecked = state.recheck(self.session)
                if not state.catch_up(self.session) and not rechecked:
                    raise
                record_id = propose()
        except InvalidParentError as exc:
            # The refused proposal's id was never written: it names the put.
            put = self._key_named(scope, claim) or repr(claim)
            if isinstance(exc, NewerVersionError):
                raise InvalidParentError(appeared(put, state.thread_id, state.run.run_id)) from None
            if str(exc).startswith("accept refused: accepted_by "):
                # The approver's refusal: reading again in the thread changes nothing.
                refusal = str(exc).replace(f" accept {tried[-1]!r}:", f" accept the put of {put}:")
                raise InvalidParentError(
                    f"{refusal} (what LangGraph thread {state.thread_id!r} puts rests on "
                    "everything it read: the store's approver needs the read role in every "
                    "scope the thread reads)"
                ) from None
            # Refused at once or once more: either way, say what to read again.
            changed = self._changed_keys(state)
            again = f"get {changed} again" if changed else "read the key again"
            refusal = str(exc).replace(f" of {tried[-1]!r} ", f" of the put of {put} ")
            raise InvalidParentError(
                f"{refusal} (LangGraph thread {state.thread_id!r} read it earlier in ledger run "
                f"{state.run.run_id!r}; what the thread puts rests on everything it read: "
                f"{again} in this thread, or continue in a new thread)"
            ) from None
        state.written.add(record_id)
        state.keys[record_id] = (scope, claim)  # as a read of its own key would note it
        state.missing.pop((scope, claim), None)  # the thread knows its own version
        return record_id

    def _changed_keys(self, state: Thread) -> str:
        """The keys (namespace and key) of what the thread rests on that is no
        longer VALID, as a LangGraph user names them (empty if none is known)."""
        named = []
        for rid in state.run.relied_on:
            where = state.keys.get(rid)
            if where is None:
                continue
            try:
                validity = self.session.get(rid).validity
            except LedgerError:  # no longer visible: nothing can rest on it now
                continue
            if validity == Validity.VALID:
                continue
            name = self._key_named(*where)
            if name is not None:
                named.append(name)
        return ", ".join(dict.fromkeys(named))

    def _key_named(self, scope: str, claim: str) -> str | None:
        """A store key as a LangGraph user names it (None for a record not the
        store's: its claim key maps to no namespace and key)."""
        labels, parsed = labels_of(scope, self.scope_depth), parse_claim_key(claim)
        if labels is None or parsed is None:
            return None
        return f"key {parsed[1]!r} of namespace {(*labels, *parsed[0])!r}"
