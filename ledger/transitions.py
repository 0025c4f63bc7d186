"""Status transitions of existing records: accept, reject, revoke, revalidate,
and the STALE marking that revocation and supersession share.

Each command is a declaration over :mod:`ledger.pipeline`: it validates its input,
then decides on the record's view row and aggregate under the writers' lock.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

from ledger import erasure, gc_pause, pipeline, proposals, redaction, rules
from ledger.access import Role
from ledger.caller import Caller
from ledger.deliveries import delivery_of
from ledger.domain import Record, Status, Validity, uuid_of_hex
from ledger.engine import Write
from ledger.errors import (
    AcceptanceCheckError,
    AccessDeniedError,
    AuthenticationError,
    CorruptEventError,
    CycleError,
    InvalidInputError,
    InvalidParentError,
    InvalidTransitionError,
    LedgerError,
    SelfApprovalError,
    SlowCheckError,
    UnknownRecordError,
)
from ledger.pipeline import Decision
from ledger.reads import record_view
from ledger.serialization import micros_to_datetime
from ledger.validation import check_list, check_ref, check_text
from ledger.values import HIDDEN, RecordView, Revocation, RevocationPreview
from ledger.versions import captures_of_source
from projections import delivery as delivery_view
from projections import edges as edges_index
from projections import validity as validity_view
from projections.base import Cursor


def accept(caller: Caller, record_id: str, note: str) -> None:
    """``Session.accept``: CANDIDATE → ACCEPTED; a record it supersedes becomes
    SUPERSEDED and what rested on that one STALE, in the same transaction."""
    caller.writable("accept")
    check_text(note, "note", empty=True)
    pipeline.on_record(caller, "accept", Role.APPROVE, record_id, acceptance(caller, note))


def acceptance(
    caller: Caller, note: str
) -> Callable[[Cursor, Any, Record, datetime], Decision[None]]:
    """The decision of ``accept`` on a record's row and aggregate (``note`` checked)."""

    def decide(c: Cursor, row: Any, record: Record, now: datetime) -> Decision[None]:
        record.accept(caller.subject, note, now)
        replaced = acceptance_checks(caller, c, row, record, now)
        return Decision([*record.collect_events(), *replaced], pipeline.done)

    return decide


def acceptance_checks(
    caller: Caller, c: Cursor, row: Any, record: Record, now: datetime
) -> list[Any]:
    """What ``accept`` requires besides the transition itself, as ``caller`` sees
    the record (``row``: its row as shown to it): unexpired, every dependency
    usable and readable, the registered checks passed, and what it supersedes
    still replaceable. Returns the supersession's events."""
    rid = row["record_id"]
    rules.check_not_expired(row, now, "accept")
    if record.evidence is not None and erasure.capture_erased(caller.engine, c, row):
        # An approver vouches for the bytes read: none are left to check.
        raise InvalidTransitionError(
            f"accept refused: the captured bytes of {rid!r} were erased, so no approver "
            "can check them: reject it, or capture the source again"
        )
    check_usable_dependencies(caller, c, record.dependencies, rid, row["scope"], "accept", now)
    if caller.engine.checks:
        run_acceptance_checks(caller, record_view(caller, c, row, now), "accept")
    if record.supersedes is None and record.evidence is None:
        return []
    return supersession(caller, c, record, now)


def propose_accepted(proposer: Caller, approver: Caller, fields: dict[str, Any]) -> str:
    """``Session.propose(..., accepted_by=...)``: the proposal (``fields``:
    ``proposals.prepare``'s keyword arguments) and its acceptance by ``approver``
    in one write transaction, each step checked as its own command would be; if
    either is refused nothing is written."""
    proposer.writable("propose")
    approver.writable("accept")
    if approver.engine is not proposer.engine:
        raise InvalidInputError("accepted_by must be a session of the same ledger")
    if approver.subject == proposer.subject:
        raise SelfApprovalError(
            f"accept refused: accepted_by is {approver.subject!r}, the proposer; "
            "a record is accepted by another principal"
        )

    def work(w: Write) -> str:
        now = proposer.engine.now()  # both events carry one time, as one command's do
        shown = pipeline.step(proposer, proposals.proposal(proposer, (), fields), now)(w)
        made = next(e for _, e in reversed(w.appended) if type(e) is Record.Proposed)
        decide = pipeline.on_record_decision(
            approver,
            "accept",
            Role.APPROVE,
            approver.shown(w.c, made.record_id),
            acceptance(approver, ""),
        )
        try:
            pipeline.step(approver, decide, now)(w)
        except AuthenticationError:
            raise  # the approver's token: nothing of the record's to hide
        except (UnknownRecordError, AccessDeniedError):
            # The record was just proposed: the approver lacks the role where it is.
            raise AccessDeniedError(
                f"accept refused: accepted_by {approver.subject!r} lacks role "
                f"{Role.APPROVE.value!r} in scope {made.scope!r}"
            ) from None
        except LedgerError as refused:
            raise _as_proposer_sees(
                proposer, approver, w.c, (made.record_id, shown), now, refused
            ) from None
        return shown

    return proposer.engine.transact(work, pipeline.plain_id(proposals.named(fields)))


def _as_proposer_sees(
    proposer: Caller,
    approver: Caller,
    c: Cursor,
    record: tuple[str, str],
    now: datetime,
    refused: LedgerError,
) -> LedgerError:
    """The refusal of ``propose_accepted``'s acceptance step (of the record
    ``(key, id shown to the proposer)``, at ``now``) told as the proposer may be
    told it: the approver's own refusal names what the approver sees (records,
    scopes, an acceptance check's view), so the acceptance checks are run again
    at the same time as the proposer sees the record, and a refusal of the same
    kind is the answer. Otherwise the refusal came from what only the approver
    sees, and says only that (whether the approver accepts depends on what it
    sees, as it does when it accepts in a command of its own)."""
    key, shown = record
    if isinstance(refused, SlowCheckError):
        # Only how long the checks took, and the transaction is gone: as it is.
        return refused.named(shown)
    with proposer.authenticated(c):
        stored = validity_view.existing(c, proposer.engine.dialect, key)
        aggregate = proposer.engine.load_record(c, key, stored)
        try:
            acceptance_checks(proposer, c, proposer.redacted(c, stored), aggregate, now)
        except LedgerError as exc:
            if type(exc) is type(refused):
                return proposer.refusal(c, exc)
    why = {
        InvalidParentError: "a dependency of it is not usable as that principal sees it",
        AcceptanceCheckError: "an acceptance check refused it as that principal sees it",
    }.get(type(refused), f"{type(refused).__name__} as that principal sees it")
    return type(refused)(
        f"accept refused: accepted_by {approver.subject!r} cannot accept {shown!r}: {why}; "
        "nothing was written"
    )


def reject(caller: Caller, record_id: str, reason: str) -> None:
    """``Session.reject``: CANDIDATE → REJECTED."""
    caller.writable("reject")
    check_text(reason, "reason")

    def decide(c: Cursor, row: Any, record: Record, now: datetime) -> Decision[None]:
        record.reject(caller.subject, reason, now)
        return Decision(record.collect_events(), pipeline.done)

    pipeline.on_record(caller, "reject", Role.APPROVE, record_id, decide)


def revoke(caller: Caller, record_id: str, reason: str) -> Revocation:
    """``Session.revoke``: the record REVOKED and every transitive descendant not
    already final STALE with it as the cause, in one transaction."""
    caller.writable("revoke")
    check_text(reason, "reason")

    def decide(c: Cursor, row: Any, record: Record, now: datetime) -> Decision[Revocation]:
        rid = row["record_id"]
        record.revoke(caller.subject, reason, now)
        marking = stale_marking(caller, c, rid, reason, now)

        events = [*record.collect_events(), *marking.events]
        names = caller.names(c, (rid, *marking.visible))
        root = names.get(rid, rid)
        stale = redaction.ids(marking.visible, frozenset(), names)

        def result(position: int) -> Revocation:
            return Revocation(
                root=root,
                affected=(root, *stale),
                # The Revoked event's own position (the first of the events).
                position=position - len(events) + 1,
                stale=stale,
            )

        return Decision(events, result, known=marking.known)

    with gc_pause.paused():  # an event and a view row per descendant
        return pipeline.on_record(caller, "revoke", Role.APPROVE, record_id, decide)


#: The roles whose holders the revocation preview shows a record's deliveries: as
#: ``get`` shows them (``read``), and ``corrections_due`` (``deliver``, ``audit``).
_SEES_DELIVERIES = frozenset((Role.READ.value, Role.DELIVER.value, Role.AUDIT.value))


def preview_revoke(caller: Caller, record_id: str) -> RevocationPreview:
    """``Session.preview_revoke``: what ``revoke`` would do now, writing nothing."""
    if caller.position is not None:  # "now" is not what an as-of session answers
        caller.writable("preview_revoke")
    engine = caller.engine
    d = engine.dialect
    with caller.reading() as c:
        row = caller.visible(c, record_id, Role.APPROVE, "revoke")
        rid = row["record_id"]
        engine.load_record(c, rid).check_status(
            "revoke", Status.CANDIDATE, Status.ACCEPTED, Status.STALE
        )
        marking = stale_marking(caller, c, rid, "preview", engine.now())
        now = caller.at(None)
        rows = validity_view.current_many(c, d, (rid, *marking.visible))
        owed = []
        for cid in (rid, *marking.visible):
            crow = rows[cid]
            if rules.validity(crow, now) != Validity.VALID:
                continue  # already owes a correction, or never could
            if not _SEES_DELIVERIES.intersection(caller.roles(c, crow["scope"])):
                continue  # its deliveries are shown only to readers, deliverers, auditors
            owed += [delivery_of(r, ()) for r in delivery_view.for_record(c, d, cid)]
        names = caller.names(c, (rid, *marking.visible))
    shown = redaction.ids((rid, *marking.visible), frozenset(), names)
    owed = [dataclasses.replace(x, record_id=names.get(x.record_id, x.record_id)) for x in owed]
    return RevocationPreview(root=shown[0], stale=shown[1:], deliveries=tuple(owed))


def revalidate(caller: Caller, record_id: str, note: str, parents: Iterable[str] | None) -> None:
    """``Session.revalidate``: STALE → ACCEPTED (CANDIDATE if it was never
    accepted) once every dependency is usable again, or on a new basis (``parents``)
    which replaces its dependencies; an ACCEPTED record whose basis expired may be
    given a new one."""
    caller.writable("revalidate")
    check_text(note, "note", empty=True)
    new_basis = (
        None
        if parents is None
        else tuple(dict.fromkeys(check_ref(p, "parent id") for p in check_list(parents, "parents")))
    )
    d = caller.engine.dialect

    def decide(c: Cursor, row: Any, record: Record, now: datetime) -> Decision[None]:
        rid = row["record_id"]
        # An ACCEPTED record whose basis expired (an ancestor's expiry, not its own)
        # may be given a new one: no dead end.
        expired = rules.validity(row, now) == Validity.NEEDS_REVALIDATION and (
            row["status"] == Status.ACCEPTED
        )
        if expired and row["eff_source"] == rid:
            when = micros_to_datetime(row["eff_expires"]).isoformat()
            raise InvalidTransitionError(
                f"revalidate refused: record {rid!r} expired at {when} (its own expiry, "
                "which no new basis renews); propose a new version of it with "
                f"supersedes={caller.shown(c, rid)!r}"
            )
        basis_expired = expired and row["eff_source"] != rid
        record.check_revalidatable(caller.subject, new_basis, basis_expired)
        rules.check_not_expired(row, now, "revalidate")
        # The keys of the records the new basis names (as the caller sees them).
        basis = None if new_basis is None else tuple(caller.resolve(c, p) for p in new_basis)
        if basis is not None and new_basis is not None:
            below = {rid, *(cid for cid, _ in edges_index.descendants(c, d, rid))}
            inherited = []
            refused: list[tuple[str, InvalidParentError]] = []  # every bad parent at once
            for dep, name in zip(basis, new_basis, strict=True):
                # Visibility first: a hidden record must look absent, not cyclic.
                try:
                    dep_row = None if dep == rid else check_readable(caller, c, name, "parent", rid)
                except InvalidParentError as exc:
                    refused.append((name, exc))
                    continue
                if dep_row is None or dep in below:
                    raise CycleError(
                        f"revalidate refused: {name!r} depends on {rid!r}; "
                        "a cycle is impossible by construction"
                    )
                unusable = rules.unbuildable(dep_row, name, "parent", rid)
                if unusable is not None:
                    refused.append((name, unusable))
                    continue
                inherited.append((name, rules.conditions(dep_row)))
            rules.check_dependencies_refused(refused, "parent", rid, caller.subject)
            check_conditions_kept(caller.shown(c, rid), record.conditions, inherited)
        deps = basis if basis is not None else record.dependencies
        check_usable_dependencies(caller, c, deps, rid, row["scope"], "revalidate", now)
        view = record_view(caller, c, row, now)
        if new_basis is not None:
            view = dataclasses.replace(view, parents=new_basis, observed=())
        # Revalidation re-approves: the application's checks run again (a
        # candidate made STALE before anyone accepted it returns to CANDIDATE and
        # meets them when it is accepted).
        if record.accepted_once:
            run_acceptance_checks(caller, view, "revalidate")
        record.revalidate(
            caller.subject,
            note,
            parents=basis,
            observed=() if new_basis is not None else None,
            at=now,
            basis_expired=basis_expired,
        )
        return Decision(record.collect_events(), pipeline.done)

    pipeline.on_record(caller, "revalidate", Role.APPROVE, record_id, decide)


# -- shared steps -------------------------------------------------------------------


def supersession(caller: Caller, c: Cursor, record: Record, now: datetime) -> list[Any]:
    """The events of ``record``'s acceptance superseding OLD, the record it was
    proposed to replace: OLD SUPERSEDED and OLD's descendants STALE. Nothing for
    OLD if it was withdrawn meanwhile (revoked or rejected: there is nothing left
    to replace). A capture whose OLD another capture of the same URI replaced
    first replaces that one instead, if it is older (:func:`_newest_capture`).

    A version never accepted is replaced with the version it was itself proposed to
    replace, and so on down the line until one that was accepted: accepting C, a
    new version of the candidate B, itself a new version of the accepted A, leaves
    A SUPERSEDED too, not ACCEPTED beside C. Down the line, a version another
    replaced meanwhile refuses the acceptance, as OLD does (C would stand beside
    that other); for a capture it ends the walk, and the capture replaces the
    earlier captures of its source that differ (below). A capture redirected to
    the newest capture of its URI that holds its bytes and value replaces
    nothing. A capture, named OLD or not, also replaces the earlier captures of
    its source that hold other bytes or another value
    (:func:`_earlier_captures`).
    """
    rid, old_id = record.record_id, record.supersedes
    events: list[Any] = []
    versions: dict[Any, int] = {}  # aggregates given events here: their newest version
    superseded: set[str] = set()  # not to be marked STALE below a later one
    target: str | None = old_id
    while target is not None:
        old = caller.engine.load_record(c, target)
        if old.id in versions:
            break
        if old.superseded_by is not None and target == old_id and record.evidence is not None:
            old = _newest_capture(caller, c, record, old)
            if old.record_id != target and rules.same_capture(old, record):
                break  # the newest capture holds these bytes: nothing to replace
            target = old.record_id
        if old.superseded_by is not None:
            if target != old_id and record.evidence is not None:
                break  # a capture: it replaces the newest of its source's (below)
            newest = _head_of(caller, c, old).record_id
            line = "," if target == old_id else f", a new version of {target!r},"
            raise InvalidTransitionError(
                f"accept refused: {rid!r} supersedes {old_id!r}{line} which was already "
                f"superseded by {old.superseded_by!r}; propose a new version of {newest!r} "
                f"(or reject {rid!r}: it can no longer be accepted)"
            )
        if old.status not in (Status.REVOKED, Status.REJECTED):
            below = {cid for cid, _ in edges_index.descendants(c, caller.engine.dialect, target)}
            if rid in below:
                raise InvalidParentError(
                    f"accept refused: {rid!r} rests on {target!r}, which it supersedes"
                )
            events += _superseded(caller, c, old, rid, now, versions, superseded)
        if old.accepted_once:
            break
        target = old.supersedes
    if record.evidence is not None:
        events += _earlier_captures(caller, c, record, superseded, versions, now)
    return events


def _earlier_captures(
    caller: Caller,
    c: Cursor,
    record: Record,
    superseded: set[str],
    versions: dict[Any, int],
    now: datetime,
) -> list[Any]:
    """The events of ``record`` (a capture) superseding the live captures of its
    source proposed before it that hold other bytes or another value, and of
    their descendants' stale markings: the newest accepted capture is what the
    source says, so the claim answers with it, never CONFLICT between two
    fetches. Earlier captures of the same bytes and value stand beside it (what
    rests on them stays VALID). Captures proposed after it are left alone: the
    acceptance of one of those, with other content, has replaced ``record``
    already."""
    rid = record.record_id
    # Live captures of its source in proposal order, ``record`` among them.
    captures = captures_of_source(
        c, caller, record.scope, record.claim_key, record.evidence or {}, record.value
    )
    earlier = []
    for target, _, same in captures:
        if target == rid:
            break
        if not same and target not in superseded:
            earlier.append(target)
    events: list[Any] = []
    for target in earlier:
        old = caller.engine.load_record(c, target)
        events += _superseded(caller, c, old, rid, now, versions, superseded)
    return events


def _superseded(
    caller: Caller,
    c: Cursor,
    old: Record,
    by: str,
    now: datetime,
    versions: dict[Any, int],
    superseded: set[str],
) -> list[Any]:
    """The events of ``old`` superseded by ``by`` and of its descendants' stale
    markings (``versions``, ``superseded``: what the transaction has done so far,
    brought up to date)."""
    target = old.record_id
    old.supersede(caller.subject, by, now)
    superseded.add(target)
    marking = stale_marking(caller, c, target, f"superseded by {by}", now, by, versions, superseded)
    replaced = list(old.collect_events())
    versions[old.id] = replaced[-1].originator_version
    return [*replaced, *marking.events]


def _head_of(caller: Caller, c: Cursor, record: Record) -> Record:
    """The newest version of ``record``'s line: following ``superseded_by``."""
    head, seen = record, {record.record_id}
    while head.superseded_by is not None and head.superseded_by not in seen:
        seen.add(head.superseded_by)
        head = caller.engine.load_record(c, head.superseded_by)
    return head


def _newest_capture(caller: Caller, c: Cursor, record: Record, old: Record) -> Record:
    """For the capture ``record`` proposed to replace the capture ``old``, which
    another capture of the same URI replaced meanwhile: the newest version of that
    line (``record`` replaces it), or ``old`` itself if the line left the URI.
    ``InvalidTransitionError`` if that version was proposed after ``record``: an
    older capture does not replace a newer one."""
    uri = (record.evidence or {}).get("uri")
    head = _head_of(caller, c, old)
    if not rules.same_source((head.evidence or {}).get("uri"), uri):
        return old
    d = caller.engine.dialect
    rows = validity_view.current_many(c, d, (head.record_id, record.record_id))
    if rows[head.record_id]["created_pos"] > rows[record.record_id]["created_pos"]:
        raise InvalidTransitionError(
            f"accept refused: {record.record_id!r} is a capture of {uri} older than "
            f"{head.record_id!r}, accepted since in place of {old.record_id!r}; "
            f"reject {record.record_id!r} or capture the source again"
        )
    return head


@dataclasses.dataclass(frozen=True)
class Marking:
    """The ``MarkedStale`` events for a record's descendants, and which of them the
    caller may see (the others are only counted)."""

    events: list[Any]
    visible: tuple[str, ...]
    hidden: int
    #: The marked records' view rows as read (before these events), by aggregate
    #: id (hex): ``Decision.known``, so the views start from them.
    known: dict[str, Any]


def stale_marking(
    caller: Caller,
    c: Cursor,
    root: str,
    reason: str,
    now: datetime,
    superseded_by: str | None = None,
    versions: dict[Any, int] | None = None,
    skip: Collection[str] = (),
) -> Marking:
    """``MarkedStale`` events for every descendant of ``root`` not already final
    (cause ``root``; ``superseded_by``: the record that superseded it, itself left
    out). ``versions``: the newest version of aggregates given events earlier in
    the same transaction (by aggregate id), updated with these; ``skip``: records
    left alone (superseded earlier in the transaction).

    Descendants are found through the reverse-dependency index, so the cost follows
    the number of descendants, not the size of the ledger; the events are built
    from the view's rows and the aggregates' newest stored versions (one query each
    per 500 records) instead of loading every descendant.
    """
    engine = caller.engine
    d = engine.dialect
    reached = [cid for cid, _ in edges_index.descendants(c, d, root) if cid != superseded_by]
    rows = validity_view.current_many(c, d, [root, *reached])
    marked = [cid for cid in reached if rows[cid]["status"] not in rules.FINAL and cid not in skip]
    aggregate = {cid: uuid_of_hex(rows[cid]["agg_id"]) for cid in marked}
    # Each record's events are its own: a view row naming another's aggregate
    # (the views were changed behind the ledger's back) stops the command.
    owner = {uuid_of_hex(rows[root]["agg_id"]): root} if root in rows else {}
    for cid, oid in aggregate.items():
        if owner.setdefault(oid, cid) != cid:
            raise CorruptEventError(
                f"record {cid!r} is in the validity view under the aggregate id of "
                f"record {owner[oid]!r}"
            )
    stored = engine.recorder.last_versions(c, list(aggregate.values()))
    unstored = [cid for cid in marked if aggregate[cid] not in stored]
    if unstored:
        raise CorruptEventError(
            f"record {unstored[0]!r} is in the validity view but has no stored events"
        )
    newest = {**stored, **(versions or {})}
    events = [
        Record.stale_event(
            aggregate_id=aggregate[cid],
            version=newest[aggregate[cid]],
            actor=caller.subject,
            cause=root,
            reason=reason,
            at=now,
            superseded_by=superseded_by,
        )
        for cid in marked
    ]
    if versions is not None:
        versions.update((e.originator_id, e.originator_version) for e in events)
    seen = {s: bool(caller.roles(c, s)) for s in {rows[m]["scope"] for m in marked}}
    # Descendants in scopes the caller cannot see are marked all the same, but only
    # counted: their ids are not the caller's to learn.
    visible = tuple(m for m in marked if seen[rows[m]["scope"]])
    known = {aggregate[cid].hex: rows[cid] for cid in marked}
    return Marking(events, visible, len(marked) - len(visible), known)


def check_readable(caller: Caller, c: Cursor, dep: str, what: str, child: str) -> Any:
    """The row of a dependency the caller may read (naming nothing it may not
    see), else ``InvalidParentError``."""
    return caller.readable_dependency(c, caller.lookup(c, dep), dep, what, child)


def check_conditions_kept(
    rid: str, own: dict[str, Any], inherited: Sequence[tuple[str, dict[str, Any]]]
) -> None:
    """A new basis may not contradict the record's conditions, nor carry one the
    record lacks (the record would drop it: a new version must carry it)."""
    merged = rules.with_inherited(repr(rid), own, inherited)
    added = [(key, value) for key, value in merged.items() if key not in own]
    if added:
        key, value = added[0]
        source = next(dep for dep, conditions in inherited if key in conditions)
        raise InvalidParentError(
            f"revalidate refused: new parent {source!r} holds under {key}={value!r} and "
            f"{rid!r} does not; a record may not drop a condition of what it rests on: "
            f"propose a new version of {rid!r} on it"
        )


def check_usable_dependencies(
    caller: Caller,
    c: Cursor,
    deps: Sequence[str],
    rid: str,
    scope: str,
    command: str,
    now: datetime,
) -> None:
    """Every dependency readable by the approver (in ``scope``, the record's own, its
    grant there suffices; elsewhere it needs ``read``), ACCEPTED and unexpired at
    ``now`` (one query): an approver vouches only for what it can read."""
    deps = list(deps)
    rows = validity_view.current_many(c, caller.engine.dialect, deps)
    hidden = caller.hidden_among(c, deps)
    # What the approver can do instead (a model could not guess it).
    instead = f"leave it to one, or {'reject' if command == 'accept' else 'revoke'} it"
    for dep in deps:
        if dep in hidden:
            raise InvalidParentError(
                f"{command} refused: {rid!r} rests on a record outside your scopes "
                f"({HIDDEN}); only an approver who can read every dependency may {command} "
                f"it: {instead}"
            )
        row = rows.get(dep)
        if (
            row is not None
            and row["scope"] != scope
            and Role.READ.value not in caller.roles(c, row["scope"])
        ):
            raise InvalidParentError(
                f"{command} refused: dependency {dep!r} of {rid!r} is not readable by "
                f"{caller.subject!r}; only an approver who can read every dependency "
                f"may {command} it: {instead}"
            )
        if row is not None:
            row = redaction.row(row, caller.hidden_among(c, redaction.row_dependencies(row)))
        rules.check_usable_dependency(row, dep, rid, command, now)


def run_acceptance_checks(caller: Caller, view: RecordView, command: str) -> None:
    """Every check the application registered must pass before a record is ACCEPTED."""
    limit = caller.engine.idle_limit
    started = time.monotonic()  # the server times the whole wait, every check's
    ran: list[str] = []
    for check in caller.engine.checks:
        name = getattr(check, "__name__", repr(check))
        ran.append(name)
        try:
            reason = check(view)
        except Exception as exc:
            raise AcceptanceCheckError(
                f"{command} refused: acceptance check {name!r} failed on record "
                f"{view.id!r}: {exc!r}"
            ) from None
        took = time.monotonic() - started
        if limit is not None and took >= limit:
            # The server ended the transaction meanwhile: say why, not "connection lost".
            raise SlowCheckError.of(command, tuple(ran), took, limit, view.id)
        if reason is None:
            continue
        if not isinstance(reason, str) or not reason.strip():
            # A predicate's False must not pass: only None does.
            try:
                shown = repr(reason)[:80]
            except Exception:  # a repr that fails must not escape as something else
                shown = f"a {type(reason).__name__}"
            raise AcceptanceCheckError(
                f"{command} refused: acceptance check {name!r} returned {shown} for "
                f"record {view.id!r}; a check returns None to pass or a reason string "
                "to refuse"
            )
        raise AcceptanceCheckError(
            f"acceptance check {name!r} refused record {view.id!r}: {reason}"
        )
