"""``Session``: what one authenticated principal may do.

A façade: each method states its contract and hands off to the module that owns
the concern — :mod:`ledger.proposals`, :mod:`ledger.transitions`,
:mod:`ledger.reads`, :mod:`ledger.audit`, :mod:`ledger.deliveries`,
:mod:`ledger.runs` — with the principal (:class:`ledger.caller.Caller`).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ledger import audit, deliveries, erasure, listing, proposals, reads, transitions
from ledger.caller import Caller
from ledger.domain import Kind, Status, Validity
from ledger.errors import InvalidInputError
from ledger.merkle import InclusionProof, LogDigest
from ledger.validation import check_id
from ledger.values import (
    AuditEvent,
    AuditTrail,
    CorrectionDue,
    Explanation,
    ReadResult,
    RecordView,
    Revocation,
    RevocationPreview,
)

if TYPE_CHECKING:
    from ledger.runs import RunContext


class Session:
    """What one authenticated principal may do; every call re-checks its token.

    Sessions come from :meth:`ledger.Ledger.authenticate`. A session from
    :meth:`as_of` is read-only: it answers as the ledger did right after a log
    position, and every write raises ``ReadOnlyError``.
    """

    def __init__(self, caller: Caller) -> None:
        #: The principal this session acts as (internal: for this package's
        #: integrations and pictures; not part of the public API).
        self.caller = caller

    def __repr__(self) -> str:
        then = "" if self.caller.position is None else f", as of position {self.caller.position}"
        return f"<Session of {self.caller.subject!r}{then}>"

    @property
    def principal(self) -> str:
        """The authenticated subject."""
        return self.caller.subject

    @property
    def position(self) -> int | None:
        """The as-of log position, or None for a live session."""
        return self.caller.position

    @property
    def read_only(self) -> bool:
        """True for as-of sessions, and on a ledger opened read-only."""
        return self.caller.read_only

    def sync(self) -> int:
        """Make this session's next read reflect every command committed anywhere.

        Views are updated in the same transaction as the events by every writer,
        so a read in one process after a command in another has returned already
        sees it; ``sync`` additionally applies any events written while a view was
        stopped. Returns the log position (the views have then applied all of it).
        """
        return reads.sync(self.caller)

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

        ``at`` (aware datetime; default now) is the instant expiry is judged at;
        ``context`` the values a record's conditions must match; ``kinds``, when
        given, the only kinds that count (a record of another kind is not usable:
        "kind … not requested"); None for every kind.

        Raises:
            AccessDeniedError: no ``read`` role in ``scope``.
            InvalidInputError: a bad scope, claim key, instant, context or kind;
                ``kinds`` empty (it would count no record).
        """
        return reads.read(self.caller, scope, claim_key, at, context, kinds)

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
        """Say, per record for ``(scope, claim_key)``, why it is or is not usable.

        ``at``, ``context`` and ``kinds`` are ``read``'s.
        Entries are in proposal order. ``limit=None`` (the default) shows every
        record the claim has ever had. With ``limit=N``, every usable record is
        shown and at most ``N`` others: first those once accepted (ACCEPTED but
        not usable now, STALE, REVOKED, SUPERSEDED), then CANDIDATE and REJECTED
        ones, each the most recently changed (proposed, accepted, revoked, …)
        first, so that candidates anyone may propose cannot
        crowd out why the claim's accepted records are not usable; the
        explanation's ``omitted`` says how many were left out. The outcome is
        the same either way. Inside a run, every record shown (values included)
        counts as read, and only those.

        Raises:
            AccessDeniedError: no ``read`` role in ``scope``.
            InvalidInputError: ``limit`` is not a positive integer.
        """
        return reads.explain(self.caller, scope, claim_key, at, context, kinds, limit)

    def get(self, record_id: str) -> RecordView:
        """One record with its status, validity and deliveries.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``read`` role in the record's scope.
        """
        return reads.get(self.caller, record_id)

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
        """One page of the records of ``scope`` in id order, optionally filtered.

        The review queue is ``records(scope, status="CANDIDATE")``; what needs
        attention is ``records(scope, validity="NEEDS_REVALIDATION")``. Pass the last
        id of a page as ``after`` to get the next one. A page costs the records
        it lists, not the scope: one without a filter reads ``limit`` records at
        most from each of two indexes (ACCEPTED records and the others); one with
        a kind, a status or a validity reads, from an index of records by status
        and kind, the records of each status and kind the filter allows, and
        stops at ``limit``; one with a ``claim_prefix`` of a small share of the
        scope reads just the records under that prefix. What a page still passes
        over: with ``validity="VALID"``, the expired ACCEPTED records among the
        ACCEPTED ones it lists; with ``validity="NEEDS_REVALIDATION"``, it reads
        every expired ACCEPTED record of the scope; under a ``claim_prefix`` of
        many keys, the records outside it that its other filters allow; and as of
        an earlier position (``as_of``), the records that did not match then.
        The order is that of the ids the records were proposed as (one record per
        id in a scope), so a record shown as ``ID@@SCOPE`` sorts as ``ID``.

        Raises:
            AccessDeniedError: no ``read`` role in ``scope``.
            InvalidInputError: a filter that names no status, validity or kind, or a
                ``limit`` outside 1..1000.
        """
        return listing.records(
            self.caller,
            scope,
            status=status,
            validity=validity,
            kind=kind,
            claim_prefix=claim_prefix,
            limit=limit,
            after=after,
        )

    def grants(self) -> dict[str, tuple[str, ...]]:
        """The roles this principal holds now, by scope (scopes and roles sorted).

        Raises:
            AuthenticationError: the token is no longer valid.
        """
        return reads.grants(self.caller)

    def snapshot(self, ref: str) -> bytes:
        """The captured bytes for ``ref``, re-verified against their hash.

        Raises:
            UnknownSnapshotError: no such snapshot, or no evidence with it is readable.
            SnapshotIntegrityError: the stored bytes no longer match the hash.
            SnapshotErasedError: an admin erased the bytes (``Admin.erase_snapshot``).
        """
        return erasure.snapshot(self.caller, ref)

    # -- audit ----------------------------------------------------------------

    def audit(self, record_id: str) -> AuditTrail:
        """The whole history of a record (revoked ones included), event by event.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``audit`` role in the record's scope.
        """
        return audit.audit(self.caller, record_id)

    def history(
        self,
        record: str | None = None,
        type: str | None = None,
        start: int | None = None,
        stop: int | None = None,
        limit: int | None = None,
    ) -> tuple[AuditEvent, ...]:
        """Record events of the log in position order, optionally filtered.

        Lists only events of records in scopes where the principal holds
        ``audit``; the others are skipped as if absent. ``record`` narrows the
        list to one record, ``type`` to one event type (``Proposed``,
        ``Revoked``, …), ``start``/``stop`` to an inclusive position range,
        ``limit`` to the first that many events (the next page starts at the
        last one's ``position + 1``; a long log is read only as far as the page
        needs). Each event's ``details`` name its ``record_id``. An as-of
        session lists nothing after its position.

        Raises:
            UnknownRecordError: ``record`` is unknown or not visible.
            AccessDeniedError: no ``audit`` role in ``record``'s scope, or (without
                ``record``) in any scope.
            InvalidInputError: an unknown event type, a position that is not one,
                or a limit that is not a positive count.
        """
        return audit.history(self.caller, record, type, start, stop, limit)

    def iter_history(
        self,
        record: str | None = None,
        type: str | None = None,
        start: int | None = None,
        stop: int | None = None,
    ) -> Generator[AuditEvent, None, None]:
        """:meth:`history`'s events one at a time, all from one read transaction
        (one snapshot of the log and of the principal's grants), in memory that
        does not grow with the log: for exporting a long log. The transaction
        stays open until the iterator is exhausted or closed (use
        ``contextlib.closing``); on the memory backend, a write on another thread
        waits for it, and one on the iterating thread is refused at once. Its
        refusals (:meth:`history`'s) come with the first event asked for, except
        for an unknown type or a bad position, which are refused at once.
        """
        return audit.iter_history(self.caller, record, type, start, stop)

    def prove(
        self, record_id: str, against: LogDigest | str | None = None
    ) -> tuple[InclusionProof, ...]:
        """Inclusion proofs of every event of a record in the current Merkle tree
        (as of a past position, of the events it had then), or with ``against``
        (a digest kept earlier, or its text) in that digest's tree: of the events
        up to its position, each checkable with that digest alone.

        A third party checks each against a digest it trusts, with
        ``proof.verify(trusted)`` (the digest: its root and its size; a bare
        root needs ``size=`` too where the leaf's bytes are withheld;
        ``proof.verify()`` alone checks it only against the root it carries),
        or the few lines of
        ``ledger.merkle.verify_inclusion`` given that root and size. An event
        that names a record in a scope this principal holds no grant in (or by a
        key it is shown otherwise) comes with its leaf hash and no bytes
        (``leaf_data`` is None), as a compliance bundle withholds it.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``audit`` role in the record's scope.
            CorruptEventError: one of the record's stored events is not what was
                appended (or has no Merkle leaf): no proof could hold for it.
            InvalidInputError: ``against`` is not a digest, or the log does not
                extend it (another ledger's, or the log was rewritten).
        """
        return audit.prove(self.caller, record_id, against)

    def as_of(self, position: int | None = None, time: datetime | None = None) -> Session:
        """A read-only session answering as the ledger did then.

        Give exactly one of ``position`` (right after the transaction that
        appended that log position: a command's events are only ever seen
        together) or ``time`` (the newest position recorded at or before that
        instant). Reads default ``at`` to that moment (for position 0, the empty
        ledger, the time of the first event); pass ``at=`` for bitemporal questions.

        Raises:
            InvalidInputError: neither or both given, a position beyond the log, or
                a time after the ledger's clock.
        """
        return Session(audit.as_of(self.caller, position, time))

    # -- deliveries -----------------------------------------------------------

    def corrections_due(self, record_id: str | None = None) -> tuple[CorrectionDue, ...]:
        """Deliveries that owe a correction: their record left VALID after the
        delivery (revoked, superseded, STALE, expired), or is VALID again on
        another basis than the delivered copy rests on (its own parents, or those
        of a record it rests on, re-based since), with no correction since.

        Only scopes where the principal holds ``deliver`` (it issues the
        corrections) or ``audit`` (it checks that they are issued) are listed;
        each entry names its record's scope. With ``record_id``, only that
        record's deliveries (oldest first, as always).

        Raises:
            AccessDeniedError: the principal holds neither ``deliver`` nor
                ``audit`` in any scope, or in ``record_id``'s.
            UnknownRecordError: ``record_id`` is unknown or not visible.
        """
        return deliveries.corrections_due(self.caller, record_id)

    def deliver(self, record_id: str, recipient: str, channel: str = "email") -> str:
        """Record that a usable record (typically a report) left the system.

        Returns the delivery id.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``deliver`` role in the record's scope.
            InvalidTransitionError: the record is not ACCEPTED.
            NotUsableError: it (or an ancestor) has expired.
        """
        return deliveries.deliver(self.caller, record_id, recipient, channel)

    def issue_correction(
        self,
        delivery_id: str,
        note: str,
        replacement: str | None = None,
        *,
        only_if_owed: bool = False,
    ) -> str:
        """Record a correction for a delivery in the outbox (nothing is sent).

        The delivery stays DELIVERED. Returns the correction id. A correction may
        be issued at any time; with ``only_if_owed`` it is refused unless the
        delivery owes one now (see :meth:`corrections_due`), checked in the
        command's own transaction: a form submitted twice issues one.

        Raises:
            UnknownDeliveryError: no such delivery visible to this principal.
            UnknownRecordError: ``replacement`` is unknown or not visible.
            NotUsableError: ``replacement`` is not VALID now.
            InvalidInputError: ``replacement`` is the delivered record itself.
            InvalidTransitionError: ``only_if_owed`` and none is owed.
            AccessDeniedError: no ``deliver`` role in the record's scope.
        """
        return deliveries.issue_correction(
            self.caller, delivery_id, note, replacement, only_if_owed
        )

    # -- proposals ------------------------------------------------------------

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
        its claim key to ``source:<uri>``. Capturing a URI again with other bytes
        supersedes, once accepted, the newest accepted capture of it (the newest
        candidate one while none is accepted; the newest version, if another
        capture replaced that one first).

        Raises:
            InvalidValueError: content is not bytes, or uri is empty.
            ValueTooLargeError: content is over the size limit.
            InvalidIdError: ``scope`` or ``id`` is no valid id.
            NaiveDatetimeError: ``fetched_at`` or ``expires`` has no timezone.
            AccessDeniedError: no ``propose`` role in ``scope``.
        """
        return proposals.capture(
            self.caller,
            scope=scope,
            uri=uri,
            content=content,
            fetched_at=fetched_at,
            claim_key=claim_key,
            expires=expires,
            conditions=conditions,
            record_id=id,
            value=value,
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
        """Propose a record; it is a ``CANDIDATE`` until an approver accepts it.

        Returns the record id (given or generated). ``supersedes=OLD`` proposes a
        new version of OLD (same scope and claim key): when this record is
        accepted, OLD becomes SUPERSEDED and OLD's descendants STALE, in the same
        transaction.

        ``accepted_by``: a session of another principal (with ``approve`` in
        ``scope``) that accepts the record in the same transaction, as its
        ``accept`` would (two events, each by its own principal; one commit). If
        the acceptance is refused, nothing is written. An application that
        approves its agents' proposals by policy (the LangGraph store's
        ``approver_token``) uses it so that a proposal never waits half-done.

        Raises:
            AccessDeniedError: no ``propose`` role in ``scope``.
            InvalidIdError, InvalidKindError, InvalidValueError, ValueTooLargeError,
            NaiveDatetimeError, ExpiryInPastError: bad input.
            DuplicateRecordError: the id is taken.
            InvalidParentError: parents unknown, unreadable or unusable (every one
                named, the first 20; see the class for which error several give).
            CycleError: the record names itself, or a record resting on it.
            SelfApprovalError: ``accepted_by`` is this session's principal.
            InvalidInputError: ``accepted_by`` is not a session of this ledger.
            UnknownRecordError, InvalidTransitionError, AcceptanceCheckError: as
                ``accept`` raises them for ``accepted_by``.
        """
        fields = {
            "scope": scope,
            "claim_key": claim_key,
            "value": value,
            "kind": kind,
            "parents": parents,
            "expires": expires,
            "conditions": conditions,
            "record_id": id,
            "evidence": None,
            "supersedes": supersedes,
        }
        if accepted_by is None:
            return proposals.propose(self.caller, **fields)
        if not isinstance(accepted_by, Session):
            raise InvalidInputError(
                f"accepted_by must be a Session, got {type(accepted_by).__name__}"
            )
        return transitions.propose_accepted(self.caller, accepted_by.caller, fields)

    def propose_many(self, items: Iterable[Mapping[str, Any]]) -> list[str]:
        """Propose many records in one transaction: all of them or none.

        Each item is a mapping of ``propose`` keyword arguments (``scope``,
        ``claim_key``, ``value``, ``kind``, and optionally ``parents``,
        ``expires``, ``conditions``, ``id``, ``supersedes``). An item may name an
        earlier item of the same batch as a parent. Returns the ids in order.

        Raises:
            The errors of ``propose``; the message starts with the item's index.
        """
        return proposals.propose_many(self.caller, items)

    # -- transitions ----------------------------------------------------------

    def accept(self, record_id: str, note: str = "") -> None:
        """CANDIDATE → ACCEPTED, by an approver who is not the proposer.

        Every dependency must be ACCEPTED and unexpired, and every registered
        acceptance check must pass. A record proposed with ``supersedes=OLD``
        makes OLD SUPERSEDED and OLD's descendants STALE in the same transaction.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``approve`` role in the record's scope, or a
                dependency in a scope this principal cannot read.
            InvalidTransitionError: not a CANDIDATE, or the record already expired.
            SelfApprovalError: the approver proposed it.
            InvalidParentError: a dependency is not usable.
            AcceptanceCheckError: a registered check refused it (or raised: the
                check's exception is named in the message).
        """
        transitions.accept(self.caller, record_id, note)

    def reject(self, record_id: str, reason: str) -> None:
        """CANDIDATE → REJECTED.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``approve`` role in the record's scope.
            InvalidTransitionError: not a CANDIDATE.
            SelfApprovalError: the approver proposed it.
        """
        transitions.reject(self.caller, record_id, reason)

    def revoke(self, record_id: str, reason: str) -> Revocation:
        """Withdraw a record: it becomes REVOKED and every transitive descendant
        (over declared and observed edges) not already REVOKED, REJECTED or
        SUPERSEDED becomes STALE with this revocation as its cause — all in one
        transaction.

        Descendants are found through the reverse-dependency index, so the cost
        follows the number of descendants, not the size of the ledger.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``approve`` role in the record's scope.
            InvalidTransitionError: the record is REVOKED, REJECTED or SUPERSEDED.
        """
        return transitions.revoke(self.caller, record_id, reason)

    def preview_revoke(self, record_id: str) -> RevocationPreview:
        """What ``revoke(record_id)`` would do now, writing nothing: the descendants
        it would mark STALE and the deliveries that would then owe a correction.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``approve`` role in the record's scope.
            InvalidTransitionError: the record cannot be revoked.
            ReadOnlyError: an as-of session (its revocation is not "now").
        """
        return transitions.preview_revoke(self.caller, record_id)

    def revalidate(
        self, record_id: str, note: str = "", parents: Iterable[str] | None = None
    ) -> None:
        """STALE → ACCEPTED after re-verification (→ CANDIDATE if it was never
        accepted), by an approver other than the proposer; also an ACCEPTED
        record whose basis expired, given a new one (``parents``).

        Without ``parents`` every current dependency must be usable again. With
        ``parents`` (a new basis of usable records) they replace the record's
        dependencies, observed ones included; the old basis stays in the history.
        Descendants stay STALE until each is revalidated itself.

        Raises:
            UnknownRecordError: no such record, or not visible to this principal.
            AccessDeniedError: no ``approve`` role in the record's scope.
            InvalidTransitionError: not STALE (nor ACCEPTED on an expired basis,
                given ``parents``).
            SelfApprovalError: the approver proposed it.
            InvalidParentError: a dependency is not usable (a new basis: every bad
                parent named, as for ``propose``).
            CycleError: the new basis would make the record depend on itself.
        """
        transitions.revalidate(self.caller, record_id, note, parents)

    # -- runs -----------------------------------------------------------------

    def run(self, run_id: str) -> RunContext:
        """A context that records every read made through it (see ``RunContext``).

        ``run_id`` names the run among this principal's runs: a run id once
        used (by this principal) is refused again when the run starts (its
        ``with`` block or ``start()`` raises ``DuplicateRecordError``), so that
        each run's reads stay its own. Other principals may use the same id.

        Raises:
            InvalidIdError: ``run_id`` is no valid id.
            ReadOnlyError: an as-of session, or a ledger opened read-only.
        """
        from ledger.runs import RunContext  # a run wraps a session: imported on use

        self.caller.writable("run")
        return RunContext(self.caller, check_id(run_id, "run id"))


def next_after(
    session: Session, scope: str, page: tuple[RecordView, ...], limit: int, **filters: Any
) -> str | None:
    """The ``after`` of the page that follows ``page`` (what ``session.records(scope,
    limit=limit, **filters)`` gave), or None when nothing follows it: a full page
    costs one look at the record after it (through ``session``, so a run does not
    count it as shown)."""
    if len(page) < limit or not session.records(scope, limit=1, after=page[-1].id, **filters):
        return None
    return page[-1].id
