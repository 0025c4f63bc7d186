"""A LangGraph long-term memory store whose memories are ledger records.

``LedgerStore`` implements LangGraph's ``BaseStore`` (``batch`` and ``abatch``),
so a graph compiled with ``store=LedgerStore(...)`` keeps its memories in the
ledger without changing the agent's code: every ``put`` is a proposal, every
``get`` and ``search`` passes the eligibility chain, a second ``put`` of a key is
a new version that supersedes the old one, and ``delete`` revokes, which marks
every memory derived from the deleted one STALE.

Where an item lives
    ``namespace[:scope_depth]`` names the ledger scope; the remaining labels and
    the key make the claim key. With ``scope_depth=1`` the first label *is* the
    scope (it must be a ledger name: ``^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$``);
    with a greater depth the scope labels are joined with ``:``, so they may not
    contain ``:`` themselves. A label the ledger cannot hold is refused with
    :class:`NamespaceLabelError` (a LangGraph ``InvalidNamespaceError``) naming
    it, never rewritten.

    The claim key is the remaining labels and the key, each escaped, joined with
    ``/``: ``("proj-a", "users", "u1")`` + ``"theme"`` is scope ``proj-a``, claim
    key ``users/u1/theme``. Escaping writes a character as ``%`` and the
    upper-case hex of its UTF-8 bytes; it applies to ``%`` and ``/`` always, to
    characters that are not printable (controls, format characters, separators
    other than the plain space), and to whitespace at either end of a label or
    key. If the result is still not in Unicode NFC form, every non-ASCII
    character of it is escaped too, so the ledger never normalises a key into
    another one. Unescaping is plain percent-decoding, so the mapping is
    injective: no two ``(namespace, key)`` pairs share a claim key, and a claim
    key is read back as an item only if escaping its decoded parts gives it
    again.

What is visible
    Only records of the store's ``kind`` (``fact`` unless configured) are its
    items. ``get`` and ``search`` return usable records only (accepted, every
    ancestor accepted and unexpired, no unmet condition); when usable records of
    one key disagree the store raises :class:`MemoryConflictError` instead of
    picking one. ``Item.created_at`` and ``Item.updated_at`` are both the time
    the current version was proposed (the earlier versions and their times are
    in the ledger's history). ``search`` lists the current versions newest
    first (the store gives its records ids that sort that way) and filters on
    value fields: exact match, or ``$eq $ne $gt $gte $lt $lte``; a dotted field
    name reaches into nested mappings; a field missing from a value fails every
    condition on it. There is no semantic index: ``search(query=...)`` and
    ``put(index=[...])`` are refused, and so is ``ttl`` (a ledger expiry is fixed
    when a record is proposed and is not refreshed by reads).

Approval policy
    Without ``approver_token`` a ``put`` is a CANDIDATE and ``get`` returns None
    until someone with ``approve`` accepts it (the review queue is
    ``Session.records(scope, status="CANDIDATE")``). With ``approver_token`` the
    store accepts each of its puts at once as that principal. This is an
    explicit trade: it gives up separation of duties (the agent's writes are
    approved by a principal the agent's host controls) for the convenience of
    LangGraph's usual put-then-get. The approver must be another principal than
    the proposer. Deletes revoke as the approver if there is one, else as the
    store's own principal (which then needs ``approve``).

Provenance
    Inside a graph node the store reads ``thread_id`` from the runnable config
    and does its work in one ledger run per thread (``Session.run``): what the
    thread read through ``get`` and ``search`` becomes the ``observed``
    dependencies of what it puts, so revoking a memory makes the memories
    derived from it STALE, and ``get`` no longer returns them. The ledger refuses
    a proposal that rests on a record no longer usable; when a version the
    thread read was only superseded by one the thread read or wrote later (the
    usual read-modify-write), the thread continues in a new run that carries its
    reads over with that newer version in place of the old one. A thread that
    read a memory since revoked, or superseded by a version it never saw, gets
    the ledger's ``InvalidParentError`` on its next put, saying so. Outside a
    graph (no ``thread_id``) nothing is recorded as observed.

Batches
    As LangGraph's own stores do, a batch answers its reads (``GetOp``,
    ``SearchOp``, ``ListNamespacesOp``) from the state before the batch and then
    applies its ``PutOp``\\ s, the last one for a key winning. ``abatch`` runs the
    batch in a worker thread, so the event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import secrets
import threading
import time
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from langgraph.config import get_config
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from ledger import Ledger, RunContext, Session
from ledger.domain import Kind, Outcome, Status
from ledger.errors import (
    DuplicateRecordError,
    InvalidInputError,
    InvalidParentError,
    LedgerError,
)
from ledger.validation import ID_PATTERN, check_kind
from ledger.values import RecordView

#: Longest claim key the ledger holds.
MAX_CLAIM_KEY = 512
#: Records fetched per ``Session.records`` page while listing.
PAGE = 1000
#: The comparison operators ``search`` filters accept.
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")

_SEPARATOR = "/"
_SCOPE_JOIN = ":"
_RESERVED = frozenset("%/")
_LIVE = (Status.CANDIDATE, Status.ACCEPTED, Status.STALE)


class NamespaceLabelError(InvalidNamespaceError, InvalidInputError):
    """A namespace label or key the ledger cannot hold as part of a scope or claim key."""


class MemoryConflictError(LedgerError):
    """Usable records of one key disagree on its value; the ledger picks none."""


class UnsupportedStoreOperationError(LedgerError, NotImplementedError):
    """A store feature the ledger does not offer (semantic query, field index, TTL)."""


# -- where an item lives -------------------------------------------------------------


def _escape(text: str, ascii_only: bool) -> str:
    """``text`` with reserved, unprintable and edge-whitespace characters escaped."""
    last = len(text) - 1
    out = []
    for i, ch in enumerate(text):
        if (
            ch in _RESERVED
            or not ch.isprintable()
            or (ch.isspace() and i in (0, last))
            or (ascii_only and not ch.isascii())
        ):
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return "".join(out)


def _component(text: str) -> str:
    """One escaped label or key; every non-ASCII character escaped as well if the
    plain escape is not in NFC form (no character composes with the ``/`` before
    it, so NFC components make an NFC claim key)."""
    if (
        text.isascii()
        and text.isprintable()
        and "%" not in text
        and "/" not in text
        and text[:1] != " "
        and text[-1:] != " "
    ):
        return text  # nothing to escape (the common case)
    escaped = _escape(text, False)
    return escaped if unicodedata.is_normalized("NFC", escaped) else _escape(text, True)


def claim_key_of(labels: Sequence[str], key: str) -> str:
    """The claim key of ``key`` under the namespace labels that follow the scope.

    Raises:
        NamespaceLabelError: a label or the key cannot be encoded (a lone
            surrogate), the claim key would be empty or longer than
            ``MAX_CLAIM_KEY``.
    """
    parts = (*labels, key)
    try:
        claim = _SEPARATOR.join(_component(p) for p in parts)
    except UnicodeEncodeError:
        bad = next(p for p in parts if not _encodable(p))
        raise NamespaceLabelError(
            f"label or key {bad!r} is not valid Unicode (lone surrogate); the ledger cannot hold it"
        ) from None
    if not claim:
        raise NamespaceLabelError(
            "an empty key directly under the scope would be an empty claim key; "
            "the ledger cannot hold it"
        )
    if len(claim) > MAX_CLAIM_KEY:
        raise NamespaceLabelError(
            f"labels {tuple(labels)!r} and key {key[:40]!r} make a claim key of "
            f"{len(claim)} characters; the ledger holds at most {MAX_CLAIM_KEY}"
        )
    return claim


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_claim_key(claim: str) -> tuple[tuple[str, ...], str] | None:
    """(labels after the scope, key) of a claim key written by the store, or None
    for a claim key that no ``(namespace, key)`` maps to."""
    try:
        parts = [unquote(p, errors="strict") for p in claim.split(_SEPARATOR)]
    except UnicodeDecodeError:
        return None
    labels, key = tuple(parts[:-1]), parts[-1]
    if any(not label or "." in label or "\x00" in label for label in labels):
        return None  # not a LangGraph namespace
    try:
        canonical = claim_key_of(labels, key)
    except NamespaceLabelError:
        return None
    return (labels, key) if canonical == claim else None


def scope_of(labels: Sequence[str]) -> str:
    """The scope named by the first ``scope_depth`` labels.

    Raises:
        NamespaceLabelError: a label is not a ledger name (or contains ``:``
            when there are several), or the joined scope is too long.
    """
    for label in labels:
        if not ID_PATTERN.fullmatch(label) or (len(labels) > 1 and _SCOPE_JOIN in label):
            extra = f" and no {_SCOPE_JOIN!r} (it joins scope labels)" if len(labels) > 1 else ""
            raise NamespaceLabelError(
                f"namespace label {label!r} cannot be (part of) a ledger scope: a scope "
                f"label needs ^[A-Za-z0-9][A-Za-z0-9._:-]*${extra}"
            )
    scope = _SCOPE_JOIN.join(labels)
    if not ID_PATTERN.fullmatch(scope):
        raise NamespaceLabelError(
            f"namespace labels {tuple(labels)!r} make the scope {scope[:40]!r}…, longer "
            "than the ledger's 128 characters"
        )
    return scope


@functools.lru_cache(maxsize=4096)
def _location(namespace: tuple[str, ...], key: str, depth: int) -> tuple[str, str]:
    """(scope, claim key) of ``key`` under ``namespace`` (cached: a graph reads and
    writes the same few keys over and over)."""
    if len(namespace) < depth:
        raise NamespaceLabelError(
            f"namespace {namespace!r} has fewer than scope_depth={depth} labels, so it "
            "names no ledger scope"
        )
    if not isinstance(key, str):
        raise InvalidInputError(f"key must be a string, got {type(key).__name__}")
    return scope_of(namespace[:depth]), claim_key_of(namespace[depth:], key)


def labels_of(scope: str, depth: int) -> tuple[str, ...] | None:
    """The namespace labels of ``scope``, or None if it is not one of ``depth`` labels."""
    labels = (scope,) if depth == 1 else tuple(scope.split(_SCOPE_JOIN))
    if len(labels) != depth:
        return None
    try:
        scope_of(labels)
    except NamespaceLabelError:
        return None
    return labels


# -- filters -------------------------------------------------------------------------


def _check_filter(flt: object) -> dict[str, Any]:
    if flt is None:
        return {}
    if not isinstance(flt, Mapping):
        raise InvalidInputError(f"search filter must be a mapping, got {type(flt).__name__}")
    for name, wanted in flt.items():
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"search filter field {name!r} is not a non-empty string")
        if isinstance(wanted, Mapping) and any(str(k).startswith("$") for k in wanted):
            unknown = [k for k in wanted if k not in OPERATORS]
            if unknown:
                raise InvalidInputError(
                    f"search filter on {name!r}: operator {unknown[0]!r} is not one of "
                    f"{', '.join(OPERATORS)}"
                )
    return dict(flt)


def _field(value: Any, name: str) -> tuple[bool, Any]:
    """(present, value) of field ``name``; a dotted name reaches into nested mappings."""
    if isinstance(value, Mapping) and name in value:
        return True, value[name]
    current = value
    for part in name.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return False, None
        current = current[part]
    return True, current


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: a boolean equals only a boolean, numbers compare by value."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _number(a) and _number(b):
        return bool(a == b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if type(a) is not type(b) and not (isinstance(a, str) and isinstance(b, str)):
        return False
    return bool(a == b)


def _compare(op: str, actual: Any, operand: Any) -> bool:
    if op == "$eq":
        return _equal(actual, operand)
    if op == "$ne":
        return not _equal(actual, operand)
    comparable = (_number(actual) and _number(operand)) or (
        isinstance(actual, str) and isinstance(operand, str)
    )
    if not comparable:
        return False
    if op == "$gt":
        return bool(actual > operand)
    if op == "$gte":
        return bool(actual >= operand)
    if op == "$lt":
        return bool(actual < operand)
    return bool(actual <= operand)  # $lte


def matches(flt: Mapping[str, Any], value: Any) -> bool:
    """Whether ``value`` passes every condition of a (checked) search filter."""
    for name, wanted in flt.items():
        present, actual = _field(value, name)
        if not present:
            return False
        if isinstance(wanted, Mapping) and any(str(k).startswith("$") for k in wanted):
            if not all(_compare(op, actual, operand) for op, operand in wanted.items()):
                return False
        elif not _equal(actual, wanted):
            return False
    return True


def _check_condition(condition: object) -> None:
    if not isinstance(condition, MatchCondition) or condition.match_type not in (
        "prefix",
        "suffix",
    ):
        raise InvalidInputError(
            f"list_namespaces condition {condition!r} is not a prefix or suffix MatchCondition"
        )


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether ``namespace`` starts (prefix) or ends (suffix) with the condition's
    path; ``*`` matches any one label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    else:
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    return all(p == "*" or p == n for n, p in pairs)


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{what} must be a non-negative int, got {value!r}")
    return value


# -- the store -----------------------------------------------------------------------


class _Ids:
    """Record ids that sort newest first: ``records()`` pages by id, so a search
    meets the newest versions first and can stop early."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> str:
        with self._lock:
            self._last = max(time.time_ns(), self._last + 1)
            stamp = (1 << 64) - 1 - self._last
        return f"lg-{stamp:016x}-{secrets.token_hex(4)}"


@dataclass
class _Thread:
    """The ledger run of one LangGraph thread."""

    base: str
    run: RunContext
    number: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread_id: str = ""
    #: Records the thread put (it knows them as well as what it read).
    written: set[str] = field(default_factory=set)


def _thread_id() -> str | None:
    """The ``thread_id`` of the runnable config in force, if any."""
    try:
        config = get_config()
    except RuntimeError:  # not inside a runnable
        return None
    thread = (config.get("configurable") or {}).get("thread_id")
    return None if thread is None else str(thread)


def run_id_of(thread_id: str) -> str:
    """The ledger run id of a LangGraph thread (a digest when the thread id is not
    a ledger name)."""
    candidate = f"langgraph.{thread_id}"
    if ID_PATTERN.fullmatch(candidate) and len(candidate) <= 120:
        return candidate
    return f"langgraph.h-{hashlib.sha256(thread_id.encode('utf-8', 'replace')).hexdigest()[:40]}"


class LedgerStore(BaseStore):
    """LangGraph's ``BaseStore`` over a ledger (see the module docstring).

    Args:
        ledger: an open :class:`ledger.Ledger`.
        token: the agent's token; its principal proposes (``propose`` and
            ``read`` in the scopes the graph uses).
        approver_token: if given, every put is accepted at once by this
            principal (an explicit policy that trades separation of duties for
            convenience); it must be another principal than ``token``'s.
        scope_depth: how many leading namespace labels name the scope.
        kind: the kind of the store's records (``fact``).

    Raises:
        AuthenticationError: a token is unknown, revoked or expired.
        InvalidInputError: ``scope_depth`` is not a positive int, or the
            approver is the proposer.
        InvalidKindError: ``kind`` is not a record kind.
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
    ) -> None:
        if not isinstance(ledger, Ledger):
            raise InvalidInputError(f"ledger must be a Ledger, got {type(ledger).__name__}")
        if isinstance(scope_depth, bool) or not isinstance(scope_depth, int) or scope_depth < 1:
            raise InvalidInputError(f"scope_depth must be a positive int, got {scope_depth!r}")
        self.kind = check_kind(kind)
        self.scope_depth = scope_depth
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
        self._ids = _Ids()
        self._threads: dict[str, _Thread] = {}
        self._threads_lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"LedgerStore({self.ledger.url!r}, principal={self.session.principal!r}, "
            f"approver={None if self.approver is None else self.approver.principal!r}, "
            f"scope_depth={self.scope_depth}, kind={self.kind.value!r})"
        )

    # -- lifecycle ----------------------------------------------------------------

    def close(self) -> None:
        """End the ledger run of every thread this store served. Safe to call twice."""
        with self._threads_lock:
            threads, self._threads = list(self._threads.values()), {}
        for state in threads:
            with state.lock:
                state.run.__exit__(None, None, None)

    def __enter__(self) -> LedgerStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- BaseStore ----------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations; results in the order of ``ops`` (see "Batches")."""
        return self._execute(list(ops), _thread_id())

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread, so the event loop keeps running."""
        listed = list(ops)
        return await asyncio.to_thread(self._execute, listed, _thread_id())

    def _execute(self, ops: list[Op], thread: str | None) -> list[Result]:
        for op in ops:
            self._check_op(op)
        state = None if thread is None else self._thread(thread)
        with state.lock if state is not None else nullcontext():
            results: list[Result] = []
            puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
            for op in ops:
                if isinstance(op, GetOp):
                    results.append(self._get(state, op))
                elif isinstance(op, SearchOp):
                    results.append(self._search(state, op))
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op))
                else:
                    assert isinstance(op, PutOp)
                    puts.pop((tuple(op.namespace), op.key), None)
                    puts[(tuple(op.namespace), op.key)] = op
                    results.append(None)
            for op in puts.values():
                self._put(state, op)
        return results

    def _check_op(self, op: object) -> None:
        """Refuse a malformed or unsupported operation before anything runs."""
        if not isinstance(op, GetOp | SearchOp | ListNamespacesOp | PutOp):
            raise InvalidInputError(f"unknown store operation {type(op).__name__}")
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            self._locate(op.namespace, op.key)
        elif isinstance(op, PutOp):
            if not op.namespace:
                raise NamespaceLabelError("namespace cannot be empty")
            if op.namespace[0] == "langgraph":
                raise NamespaceLabelError(
                    f"root label of namespace {tuple(op.namespace)!r} cannot be 'langgraph'"
                )
            self._locate(op.namespace, op.key)
            if op.value is not None and not isinstance(op.value, Mapping):
                raise InvalidInputError(
                    f"value of key {op.key!r} must be a mapping or None, got "
                    f"{type(op.value).__name__}"
                )
            if op.index not in (None, False):
                raise UnsupportedStoreOperationError(
                    f"put of key {op.key!r} with index={op.index!r}: LedgerStore has no "
                    "semantic index; pass index=None or index=False"
                )
            if op.ttl is not None:
                raise UnsupportedStoreOperationError(
                    f"put of key {op.key!r} with ttl={op.ttl!r}: LedgerStore does not expire "
                    "items on a refreshable timer (a ledger expiry is fixed when a record is "
                    "proposed); pass ttl=None"
                )
        elif isinstance(op, SearchOp):
            if op.query:
                raise UnsupportedStoreOperationError(
                    f"search with query={op.query!r}: LedgerStore has no semantic index; "
                    "search by namespace and filter instead"
                )
            _check_filter(op.filter)
            _count(op.limit, "search limit")
            _count(op.offset, "search offset")
            if len(op.namespace_prefix) >= self.scope_depth:
                scope_of(op.namespace_prefix[: self.scope_depth])
        else:
            _count(op.limit, "list_namespaces limit")
            _count(op.offset, "list_namespaces offset")
            if op.max_depth is not None:
                _count(op.max_depth, "list_namespaces max_depth")
            for condition in op.match_conditions or ():
                _check_condition(condition)

    # -- mapping ------------------------------------------------------------------

    def _locate(self, namespace: Sequence[str], key: str) -> tuple[str, str]:
        """(scope, claim key) of an item."""
        return _location(tuple(namespace), key, self.scope_depth)

    def _readable_scopes(self) -> list[str]:
        """Scopes where the store's principal holds ``read`` now, sorted.

        Read from the grant history (``Admin.access_history``) of the store's own
        principal: the ledger object the host handed to the store gives it, and
        ``Session`` has no listing of the caller's scopes yet.
        """
        grants = self.ledger.admin().access_history(subject=self.session.principal)
        return sorted({g.scope for g in grants if g.role == "read" and g.revoked_position is None})

    def _scopes_under(
        self, prefix: tuple[str, ...]
    ) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
        """(scope, its labels, the prefix labels after them) for a namespace prefix."""
        depth = self.scope_depth
        if len(prefix) >= depth:
            return [(scope_of(prefix[:depth]), prefix[:depth], prefix[depth:])]
        out: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
        for scope in self._readable_scopes():
            labels = labels_of(scope, depth)
            if labels is not None and labels[: len(prefix)] == prefix:
                out.append((scope, labels, ()))
        return out

    # -- reads --------------------------------------------------------------------

    def _current(
        self, reader: Session | RunContext, scope: str, claim: str, where: str
    ) -> RecordView | None:
        """The usable current version of a claim (eligibility chain), or None."""
        result = reader.read(scope, claim, kinds=(self.kind,))
        if result.outcome == Outcome.CONFLICT:
            ids = ", ".join(r.id for r in result.records)
            raise MemoryConflictError(
                f"{where}: usable records disagree ({ids}); the ledger keeps both and "
                "picks neither: an approver must revoke or supersede all but one"
            )
        if result.outcome != Outcome.FOUND:
            return None
        return max(result.records, key=lambda r: (r.created_at, r.position))

    def _get(self, state: _Thread | None, op: GetOp) -> Item | None:
        scope, claim = self._locate(op.namespace, op.key)
        reader: Session | RunContext = self.session if state is None else state.run
        where = f"get of {tuple(op.namespace)!r} key {op.key!r}"
        view = self._current(reader, scope, claim, where)
        return None if view is None else _item(Item, tuple(op.namespace), op.key, view)

    def _listing(self, scope: str, claim_prefix: str | None) -> Iterator[RecordView]:
        """Accepted, valid records of the store's kind in ``scope``, page by page."""
        after = None
        while True:
            page = self.session.records(
                scope,
                status=Status.ACCEPTED,
                validity="VALID",
                kind=self.kind,
                claim_prefix=claim_prefix,
                limit=PAGE,
                after=after,
            )
            yield from page
            if len(page) < PAGE:
                return
            after = page[-1].id

    def _search(self, state: _Thread | None, op: SearchOp) -> list[SearchItem]:
        flt = _check_filter(op.filter)
        prefix = tuple(op.namespace_prefix)
        found: list[SearchItem] = []
        shown: list[str] = []
        skipped = 0
        if op.limit == 0:
            return found
        for scope, labels, rest in self._scopes_under(prefix):
            claim_prefix = "".join(_component(label) + _SEPARATOR for label in rest) or None
            seen: set[str] = set()
            for view in self._listing(scope, claim_prefix):
                parsed = parse_claim_key(view.claim_key)
                if parsed is None or view.claim_key in seen or view.conditions:
                    continue
                namespace, key = labels + parsed[0], parsed[1]
                if namespace[: len(prefix)] != prefix or not matches(flt, view.value):
                    continue
                seen.add(view.claim_key)
                where = f"search of {prefix!r}: key {key!r} in {namespace!r}"
                current = self._current(self.session, scope, view.claim_key, where)
                if current is None or not matches(flt, current.value):
                    continue
                if skipped < op.offset:
                    skipped += 1
                    continue
                found.append(_item(SearchItem, namespace, key, current))
                shown.append(current.id)
                if len(found) == op.limit:
                    break
            if len(found) == op.limit:
                break
        if state is not None:
            for record_id in shown:  # what the node was shown is what it may rely on
                state.run.observe(record_id)
        return found

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        depth = self.scope_depth
        prefixes = [tuple(c.path) for c in conditions if c.match_type == "prefix"]
        namespaces: set[tuple[str, ...]] = set()
        for scope in self._readable_scopes():
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
            claim_prefix = "".join(_component(x) + _SEPARATOR for x in literal) or None
            for view in self._listing(scope, claim_prefix):
                parsed = parse_claim_key(view.claim_key)
                if parsed is not None and not view.conditions:
                    namespaces.add(labels + parsed[0])
        kept = [ns for ns in namespaces if all(_namespace_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            kept = list({ns[: op.max_depth] for ns in kept})
        return sorted(kept)[op.offset : op.offset + op.limit]

    # -- writes -------------------------------------------------------------------

    def _head(self, scope: str, claim: str) -> str | None:
        """The version a new put replaces: the newest ACCEPTED or STALE record of
        the claim, else the newest CANDIDATE (not recorded as a read)."""
        records = [
            e.record
            for e in self.session.explain(scope, claim, kinds=(self.kind,)).entries
            if e.record.kind == self.kind
        ]

        def newest(statuses: tuple[Status, ...]) -> str | None:
            chosen = [r for r in records if r.status in statuses]
            return max(chosen, key=lambda r: (r.created_at, r.position)).id if chosen else None

        return newest((Status.ACCEPTED, Status.STALE)) or newest((Status.CANDIDATE,))

    def _put(self, state: _Thread | None, op: PutOp) -> None:
        scope, claim = self._locate(op.namespace, op.key)
        if op.value is None:
            self._delete(scope, claim)
            return
        previous = self._head(scope, claim)
        fields: dict[str, Any] = {} if previous is None else {"supersedes": previous}
        value = dict(op.value)
        if state is None:
            record_id = self.session.propose(
                scope, claim, value, self.kind, id=self._ids.next(), **fields
            )
        else:
            record_id = self._propose_in_thread(state, scope, claim, value, fields)
        if self.approver is not None:
            self.approver.accept(record_id)

    def _delete(self, scope: str, claim: str) -> None:
        revoker = self.approver or self.session
        reason = f"deleted through the LangGraph store (LedgerStore): {scope}/{claim}"
        for entry in self.session.explain(scope, claim, kinds=(self.kind,)).entries:
            record = entry.record
            if record.kind == self.kind and record.status in _LIVE:
                revoker.revoke(record.id, reason)

    # -- runs ---------------------------------------------------------------------

    def _thread(self, thread: str) -> _Thread:
        """The run of a LangGraph thread, started on first use."""
        with self._threads_lock:
            state = self._threads.get(thread)
            if state is None:
                base = run_id_of(thread)
                run, number = self._start_run(base, 0, ())
                state = _Thread(base=base, run=run, number=number, thread_id=thread)
                self._threads[thread] = state
            return state

    def _start_run(self, base: str, first: int, carried: Sequence[str]) -> tuple[RunContext, int]:
        """Start run ``base`` (or ``base.N`` from ``first`` on, when taken: a run
        that ended cannot be reopened) and observe ``carried`` in it."""
        for number in range(first, first + 1000):
            run = self.session.run(base if number == 0 else f"{base}.{number}")
            try:
                run.__enter__()
            except DuplicateRecordError:
                continue
            for record_id in carried:
                run.observe(record_id)
            return run, number
        raise LedgerError(f"runs {base!r} to {base}.{first + 999} are all taken")

    def _propose_in_thread(
        self, state: _Thread, scope: str, claim: str, value: Any, fields: dict[str, Any]
    ) -> str:
        """Propose in the thread's run (its reads become ``observed``).

        A read the ledger no longer lets a proposal rest on is refused by the
        core; if it was only superseded by a version the thread itself read or
        wrote later, the thread's knowledge is that newer version, so the thread
        moves to a new run observing it instead, and the proposal is tried again.
        """
        try:
            record_id = state.run.propose(
                scope, claim, value, self.kind, id=self._ids.next(), **fields
            )
        except InvalidParentError as exc:
            if not self._catch_up_thread(state):
                raise InvalidParentError(
                    f"{exc} (LangGraph thread {state.thread_id!r} read it earlier in ledger run "
                    f"{state.run.run_id!r}; what the thread puts rests on everything it read: "
                    "read the key again in this thread, or continue in a new thread)"
                ) from None
            record_id = state.run.propose(
                scope, claim, value, self.kind, id=self._ids.next(), **fields
            )
        state.written.add(record_id)
        return record_id

    def _catch_up_thread(self, state: _Thread) -> bool:
        """Move the thread to a new run in which every read that was superseded by a
        version the thread read or wrote later is replaced by the newest such
        version; False if there is none (nothing changes then)."""
        reads = state.run.reads
        known = set(reads) | state.written
        carried: list[str] = []
        for record_id in reads:
            view = self.session.get(record_id)  # not recorded: the session is outside the run
            newest, following, seen = None, view.superseded_by, set()
            while following is not None and following not in seen:
                seen.add(following)
                if following in known:
                    newest = following
                following = self.session.get(following).superseded_by
            replaced = view.status == Status.SUPERSEDED and newest is not None
            carried.append(newest if replaced and newest is not None else record_id)
        if carried == list(reads):
            return False
        state.run.__exit__(None, None, None)
        state.run, state.number = self._start_run(
            state.base, state.number + 1, tuple(dict.fromkeys(carried))
        )
        return True


def _item(cls: type[Any], namespace: tuple[str, ...], key: str, view: RecordView) -> Any:
    """An ``Item`` (or ``SearchItem``) of the record's current version."""
    created: datetime = view.created_at
    return cls(
        namespace=namespace, key=key, value=view.value, created_at=created, updated_at=created
    )


__all__ = [
    "LedgerStore",
    "MemoryConflictError",
    "NamespaceLabelError",
    "UnsupportedStoreOperationError",
    "claim_key_of",
    "labels_of",
    "parse_claim_key",
    "run_id_of",
    "scope_of",
]
