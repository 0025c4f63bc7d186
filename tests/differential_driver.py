"""One sequence of public API calls run on every backend at once, every answer kept.

:class:`Driver` opens the same ledger on ``memory:``, an SQLite file and a
PostgreSQL schema (any subset), all on one controllable clock, grants the same
principals, and then carries out :data:`Op` tuples on each. Every call's answer
(or the ``LedgerError`` it raised) is turned into plain data by
:class:`Normalizer`, so the answers of two backends compare with ``==``:
generated delivery, correction and record ids become ``#1``, ``#2``, … in the
order each backend first shows them (the same order on every backend that
behaves the same).

:meth:`Driver.observe` asks one session everything a user can ask about the
ledger (reads, explanations, records and their audit trails, listings page by
page, due corrections, the history); the differential tests compare it across
backends after each step and again, as of each earlier log position, at the end.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime, timedelta
from enum import Enum
from functools import partial
from typing import Any

from ledger import Kind, Ledger, LedgerError, Session, Status, Validity

from .conftest import Clock, new_pg_schema_url

SCOPES = ("A", "B")
CLAIMS = ("k0", "k1", "k2")
#: Principals and their grants: ``alice`` and ``bob`` are the usual proposer and
#: approver, ``carol`` proposes and approves in A (separation of duties), ``dave``
#: holds a token that expires, ``eve`` reads B only (scope isolation), and
#: ``auditor`` sees everything (the as-of replay reads through it).
GRANTS: dict[str, dict[str, tuple[str, ...]]] = {
    "alice": {"A": ("propose", "read"), "B": ("propose", "read")},
    "bob": {"A": ("approve", "read", "audit", "deliver"), "B": ("approve", "read", "deliver")},
    "carol": {"A": ("propose", "approve", "read")},
    "dave": {"A": ("propose", "read", "approve")},
    "eve": {"B": ("read", "audit", "deliver")},
    "auditor": {s: ("read", "audit", "deliver") for s in SCOPES},
}
#: Observations also read this long after their moment (``read(at=…)``).
LATER = timedelta(minutes=100)
#: ``dave``'s token expires this long after the ledger is opened.
DAVE_TOKEN_LIFETIME = timedelta(minutes=90)

#: An operation: its name and its arguments (plain, hashable data).
Op = tuple[Any, ...]
Answer = Any

_GENERATED = re.compile(r"\b[dcr]-[0-9a-f]{32}\b")


#: Fields holding when something happened (not an expiry a caller gave).
TIMES = frozenset({"created_at", "at", "delivered_at", "issued_at"})


class Normalizer:
    """Turns API answers into plain data; generated ids become ``#n``.

    With ``hide_before``, the moments of what happened before it (``TIMES``
    fields) become ``"<earlier>"``: two ledgers with the same history written
    with clocks read a different number of times compare equal.
    """

    def __init__(
        self,
        hide_before: datetime | None = None,
        conditions: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.ids: dict[str, str] = {}
        self.hide_before = hide_before
        #: Conditions to show for a record (by id) in place of those stored.
        self.conditions = conditions or {}

    def _record(self, out: dict[Any, Any]) -> dict[Any, Any]:
        rid = out.get("id", out.get("record_id"))
        if "conditions" in out and isinstance(rid, str) and rid in self.conditions:
            out["conditions"] = self.conditions[rid]
        return out

    def _field(self, name: Any, value: Any) -> Any:
        if (
            self.hide_before is not None
            and name in TIMES
            and isinstance(value, datetime)
            and value < self.hide_before
        ):
            return "<earlier>"
        return self(value)

    def _id(self, match: re.Match[str]) -> str:
        raw = match.group(0)
        if raw not in self.ids:
            self.ids[raw] = f"#{len(self.ids) + 1}"
        return self.ids[raw]

    def __call__(self, value: Any) -> Any:
        if isinstance(value, Enum):
            return str(value.value)
        if isinstance(value, str):
            return _GENERATED.sub(self._id, value)
        if isinstance(value, (bool, int, float, type(None), bytes, datetime)):
            return value
        if isinstance(value, BaseException):
            return ("raised", type(value).__name__, self(str(value)))
        if is_dataclass(value) and not isinstance(value, type):
            return self._record(
                {f.name: self._field(f.name, getattr(value, f.name)) for f in fields(value)}
            )
        if isinstance(value, dict):
            return self._record({self(k): self._field(k, v) for k, v in value.items()})
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        return repr(value)


def attempt(norm: Normalizer, call: Callable[[], Any]) -> Answer:
    """The normalised answer of ``call()``, or of the ``LedgerError`` it raised."""
    try:
        return norm(call())
    except LedgerError as exc:
        return norm(exc)


@dataclass
class Backend:
    """One ledger under test: its URL, the open ``Ledger``, sessions and answers."""

    name: str
    url: str
    clock: Clock
    led: Ledger = field(init=False)
    norm: Normalizer = field(default_factory=Normalizer)
    tokens: dict[str, str] = field(default_factory=dict)
    #: A second handle on the same database (SQLite, PostgreSQL), once ``swap`` opened it.
    other: Ledger | None = None

    def session(self, who: str) -> Session | LedgerError:
        """The principal's session, authenticated now (its token may have expired)."""
        try:
            return self.led.authenticate(self.tokens[who])
        except LedgerError as exc:
            return exc


def _url(backend: str, cleanup: list[Callable[[], None]]) -> str:
    if backend == "memory":
        return "memory:"
    if backend == "sqlite":
        folder = tempfile.mkdtemp(prefix="provledger-diff-")
        cleanup.append(lambda: shutil.rmtree(folder, ignore_errors=True))
        return f"sqlite:///{folder}/ledger.db"
    url, drop = new_pg_schema_url()
    cleanup.append(drop)
    return url


class Driver:
    """The same ledger on several backends, driven by the same operations."""

    def __init__(
        self,
        backends: tuple[str, ...] = (),
        clock: Clock | None = None,
        *,
        scopes: dict[str, str] | None = None,
        claims: tuple[str, ...] = CLAIMS,
        page: int = 2,
    ) -> None:
        self.clock = clock or Clock()
        #: Scope names the operations use (``A``, ``B``) → the ledger's scopes.
        self.scopes = scopes or {s: s for s in SCOPES}
        self.claims = claims
        self.page = page  # records per listing page
        self._cleanup: list[Callable[[], None]] = []
        self.backends: list[Backend] = []
        self.ids: list[str] = []  # every record id an operation named, in order
        self.runs = 0
        try:
            for name in backends:
                url = _url(name, self._cleanup)
                self.adopt(Backend(name, url, self.clock), Ledger.open(url, clock=self.clock))
        except BaseException:
            self.close()
            raise

    def adopt(self, b: Backend, led: Ledger, cleanup: Callable[[], None] | None = None) -> None:
        """Drive ``led`` (opened on ``b.url`` with this driver's clock) as ``b``."""
        b.led = led
        self.backends.append(b)
        if cleanup is not None:
            self._cleanup.append(cleanup)

    def close(self) -> None:
        """Close every ledger and drop what was created for them."""
        for b in self.backends:
            for led in (b.led, b.other):
                with _quiet():
                    if led is not None:
                        led.close()
        for step in reversed(self._cleanup):
            with _quiet():
                step()
        self._cleanup.clear()

    def setup(self) -> Answer:
        """Grant every principal its roles and issue its token, on every backend."""

        def on(b: Backend) -> Answer:
            admin = b.led.admin()
            for who, scopes in GRANTS.items():
                for scope, roles in scopes.items():
                    admin.grant(who, scope=self.scopes[scope], roles=list(roles))
                expires = self.clock.now + DAVE_TOKEN_LIFETIME if who == "dave" else None
                b.tokens[who] = admin.issue_token(who, expires=expires)
            return b.led.position

        return self.each(on)

    def each(self, call: Callable[[Backend], Answer]) -> dict[str, Answer]:
        """``call`` on every backend: its answers by backend name."""
        return {b.name: call(b) for b in self.backends}

    # -- operations -----------------------------------------------------------

    def new_id(self) -> str:
        rid = f"R{len(self.ids) + 1}"
        self.ids.append(rid)
        return rid

    def pick(self, i: int) -> str:
        """A record id an earlier operation named (``ghost`` when none was)."""
        return self.ids[i % len(self.ids)] if self.ids else "ghost"

    def apply(self, op: Op) -> dict[str, Answer]:
        """Carry out ``op`` on every backend; the answers (and log positions)."""
        name, *args = op
        handler = getattr(self, f"_op_{name}")
        prepared = handler(*args)
        return self.each(lambda b: [attempt(b.norm, lambda: prepared(b)), b.led.position])

    def _as(self, who: str, b: Backend) -> Session:
        s = b.session(who)
        if isinstance(s, LedgerError):
            raise s
        return s

    def _op_propose(
        self,
        who: str,
        scope: str,
        claim: str,
        value: Any,
        kind: str,
        parents: tuple[int, ...],
        minutes: int | None,
        conditions: tuple[tuple[str, str], ...],
        supersedes: int | None,
    ) -> Callable[[Backend], Any]:
        rid = self.new_id()
        scope = self.scopes[scope]
        deps = [self.pick(i) for i in parents]
        old = None if supersedes is None else self.pick(supersedes)
        expires = None if minutes is None else self.clock.now + timedelta(minutes=minutes)
        return lambda b: self._as(who, b).propose(
            scope,
            claim,
            value,
            kind,
            parents=deps,
            expires=expires,
            conditions=dict(conditions) or None,
            id=rid,
            supersedes=old,
        )

    def _op_propose_accepted(
        self, who: str, approver: str, scope: str, claim: str, parents: tuple[int, ...]
    ) -> Callable[[Backend], Any]:
        """``propose(..., accepted_by=approver)``: both in one transaction."""
        rid = self.new_id()
        scope = self.scopes[scope]
        deps = [self.pick(i) for i in parents]
        return lambda b: self._as(who, b).propose(
            scope, claim, 1, "fact", parents=deps, id=rid, accepted_by=self._as(approver, b)
        )

    def _op_propose_many(
        self, who: str, items: tuple[tuple[str, str, int, tuple[int, ...], str], ...]
    ) -> Callable[[Backend], Any]:
        batch: list[dict[str, Any]] = []
        for scope, claim, value, parents, flaw in items:
            rid = self.new_id()
            item: dict[str, Any] = {
                "scope": self.scopes[scope],
                "claim_key": claim,
                "value": value,
                "kind": "fact",
                "id": rid,
                "parents": [self.pick(i) for i in parents],
            }
            if flaw == "duplicate" and batch:
                item["id"] = batch[0]["id"]
            elif flaw == "ghost-parent":
                item["parents"] = [*item["parents"], "ghost"]
            elif flaw == "spaced-claim":
                item["claim_key"] = f" {claim}"
            elif flaw == "past-expiry":
                item["expires"] = self.clock.now - timedelta(minutes=1)
            elif flaw == "earlier-item" and batch:
                item["parents"] = [batch[-1]["id"]]
            batch.append(item)
        return lambda b: self._as(who, b).propose_many(batch)

    def _op_capture(
        self, who: str, scope: str, uri: int, content: int, minutes: int | None
    ) -> Callable[[Backend], Any]:
        rid = self.new_id()
        expires = None if minutes is None else self.clock.now + timedelta(minutes=minutes)
        return lambda b: self._as(who, b).capture(
            self.scopes[scope],
            f"https://x.test/{uri}",
            f"bytes {content}".encode(),
            expires=expires,
            id=rid,
        )

    def _op_accept(self, who: str, i: int) -> Callable[[Backend], Any]:
        rid = self.pick(i)
        return lambda b: self._as(who, b).accept(rid, note="checked")

    def _op_reject(self, who: str, i: int) -> Callable[[Backend], Any]:
        rid = self.pick(i)
        return lambda b: self._as(who, b).reject(rid, reason="wrong")

    def _op_revoke(self, who: str, i: int) -> Callable[[Backend], Any]:
        rid = self.pick(i)
        return lambda b: self._as(who, b).revoke(rid, reason="doc changed")

    def _op_revalidate(
        self, who: str, i: int, parents: tuple[int, ...] | None
    ) -> Callable[[Backend], Any]:
        rid = self.pick(i)
        deps = None if parents is None else [self.pick(p) for p in parents]
        return lambda b: self._as(who, b).revalidate(rid, note="re-checked", parents=deps)

    def _op_deliver(self, who: str, i: int) -> Callable[[Backend], Any]:
        rid = self.pick(i)
        return lambda b: self._as(who, b).deliver(rid, recipient="ops@x.test")

    def _op_correct(self, who: str, i: int, owed: bool) -> Callable[[Backend], Any]:
        def call(b: Backend) -> Any:
            s = self._as(who, b)
            due = s.corrections_due()
            if not due:
                return "nothing due"
            delivery = due[i % len(due)].delivery.delivery_id
            return s.issue_correction(delivery, note="upstream withdrawn", only_if_owed=owed)

        return call

    def _op_run(
        self, who: str, scope: str, reads: tuple[str, ...], claim: str, value: int
    ) -> Callable[[Backend], Any]:
        self.runs += 1
        run_id = f"task-{self.runs}"
        rid = self.new_id()
        scope = self.scopes[scope]

        def call(b: Backend) -> Any:
            with self._as(who, b).run(run_id) as run:
                shown = [run.read(scope, key).outcome for key in reads]
                return shown, run.propose(scope, claim, value, Kind.INFERENCE, id=rid)

        return call

    def _op_grant(self, who: str, scope: str, role: str) -> Callable[[Backend], Any]:
        return lambda b: b.led.admin().grant(who, scope=self.scopes[scope], roles=[role])

    def _op_revoke_grant(self, who: str, scope: str, role: str) -> Callable[[Backend], Any]:
        return lambda b: b.led.admin().revoke_grant(who, scope=self.scopes[scope], roles=[role])

    def _op_revoke_token(self, who: str) -> Callable[[Backend], Any]:
        # Each backend's token, so each its own fingerprint: what is compared is None.
        return lambda b: b.led.admin().revoke_token(b.tokens[who]) and None

    def _op_advance(self, minutes: int) -> Callable[[Backend], Any]:
        self.clock.advance(minutes=minutes)
        return lambda b: b.led.now()

    def _op_swap(self) -> Callable[[Backend], Any]:
        """Go on through another ``Ledger`` on the same database, as a second
        process would (the first stays open); memory has only the one."""

        def call(b: Backend) -> Any:
            if b.name == "memory":
                return b.led.position
            if b.other is None:
                b.other = Ledger.open(b.url, clock=self.clock)
            b.led, b.other = b.other, b.led
            return b.led.position

        return call

    def _op_rebuild(self) -> Callable[[Backend], Any]:
        def call(b: Backend) -> Any:
            report = b.led.rebuild()
            return report.events, report.matched

        return call

    def _op_verify(self) -> Callable[[Backend], Any]:
        def call(b: Backend) -> Any:
            report = b.led.verify()
            return report.ok, report.problem

        return call

    def _op_reopen(self) -> Callable[[Backend], Any]:
        def call(b: Backend) -> Any:
            if b.name == "memory":  # nothing outlives the process's ledger object
                return b.led.position
            for led in (b.led, b.other):
                if led is not None:
                    led.close()
            b.led, b.other = Ledger.open(b.url, clock=self.clock), None
            return b.led.position

        return call

    # -- observation ----------------------------------------------------------

    def observe(self, b: Backend, who: str = "auditor") -> Answer:
        """Everything ``who`` can be told now on ``b``, as plain data."""
        got = b.session(who)
        if isinstance(got, LedgerError):
            return b.norm(got)
        scopes = tuple(self.scopes.values())
        later = self.clock.now + LATER
        return observe(got, b.norm, self.ids, scopes, self.claims, self.page, later)


def observe(
    s: Session,
    norm: Normalizer,
    ids: list[str],
    scopes: tuple[str, ...] = SCOPES,
    claims: tuple[str, ...] = CLAIMS,
    page: int = 2,
    later: datetime | None = None,
) -> Answer:
    """Reads (also ``at=later``: bitemporal), explanations, listings (paged), records,
    audit trails, due corrections, the history."""
    out: dict[str, Any] = {}
    for scope in scopes:
        for key in claims:
            out[f"read {scope}/{key}"] = attempt(norm, partial(_read, s, scope, key))
            if later is not None:
                out[f"read {scope}/{key} at {later}"] = attempt(
                    norm, partial(_read, s, scope, key, later)
                )
            out[f"explain {scope}/{key}"] = attempt(norm, partial(_explain, s, scope, key))
            out[f"explain {scope}/{key} limit=1"] = attempt(
                norm, partial(_explain, s, scope, key, 1)
            )
        out[f"pages {scope}"] = attempt(norm, partial(_pages, s, scope, page, {}))
        for filt in FILTERS:
            out[f"records {scope} {filt}"] = attempt(norm, partial(_filtered, s, scope, filt))
        out[f"listing problems {scope}"] = attempt(norm, partial(listing_problems, s, scope, page))
    for rid in ids:
        out[f"get {rid}"] = attempt(norm, partial(s.get, rid))
        out[f"audit {rid}"] = attempt(norm, partial(s.audit, rid))
    out["corrections_due"] = attempt(norm, s.corrections_due)
    out["history"] = attempt(norm, s.history)
    return out


def _read(s: Session, scope: str, key: str, at: datetime | None = None) -> Any:
    r = s.read(scope, key, at=at)
    return r.outcome, [v.id for v in r.records], r.at


def _explain(s: Session, scope: str, key: str, limit: int | None = None) -> Any:
    e = s.explain(scope, key, limit=limit)
    entries = [(x.record.id, x.record.status, x.usable, x.reasons) for x in e.entries]
    return e.outcome, entries, e.omitted


#: Listing filters each observation pages through (and lists in one page).
FILTERS: tuple[dict[str, Any], ...] = (
    {"status": Status.CANDIDATE},
    {"status": Status.ACCEPTED},
    {"validity": Validity.VALID},
    {"validity": Validity.NEEDS_REVALIDATION},
    {"validity": Validity.INVALID},
    {"kind": Kind.FACT},
    {"kind": Kind.EVIDENCE, "validity": Validity.VALID},
    {"claim_prefix": "k1"},
    {"claim_prefix": "source:", "status": Status.SUPERSEDED},
)


def _filtered(s: Session, scope: str, filt: dict[str, Any]) -> list[str]:
    return [v.id for v in s.records(scope, limit=1000, **filt)]


def _pages(
    s: Session, scope: str, size: int, filt: dict[str, Any]
) -> list[list[tuple[str, Status, Validity]]]:
    """Every page of the scope's listing, following ``after`` to the end."""
    pages, after = [], None
    while True:
        page = s.records(scope, limit=size, after=after, **filt)
        pages.append([(v.id, v.status, v.validity) for v in page])
        if len(page) < size:
            return pages
        after = page[-1].id


class _quiet:
    """Swallow any exception (clean-up after a failed example must not mask it)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def listing_problems(s: Session, scope: str, page: int) -> list[str]:
    """Where a filtered listing, paged or in one page, differs from the scope's whole
    listing filtered by hand (SPEC §13.3)."""
    every = s.records(scope, limit=1000)
    problems = []
    for filt in FILTERS:
        by_hand = [v.id for v in every if all(_holds(v, k, want) for k, want in filt.items())]
        paged = [rid for rows in _pages(s, scope, page, filt) for rid, *_ in rows]
        whole = _filtered(s, scope, filt)
        if not paged == whole == by_hand:
            problems.append(
                f"records({scope!r}, **{filt}): paged {paged}, in one page "
                f"{whole}, by hand {by_hand}"
            )
    return problems


def _holds(v: Any, key: str, want: Any) -> bool:
    if key == "claim_prefix":
        return bool(v.claim_key.startswith(want))
    return bool(getattr(v, key) == want)


__all__ = ["CLAIMS", "SCOPES", "Driver", "Normalizer", "Op", "listing_problems", "observe"]
