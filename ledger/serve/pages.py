"""What the console's pages show: the moment a page is about (now, or a past log
position or time), the template environment and its filters, and the review
entries (a candidate, its dependencies and what would refuse accepting it)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from ledger import Session, erasure
from ledger.access import Role
from ledger.domain import Outcome, Status, Validity
from ledger.errors import (
    AccessDeniedError,
    InvalidInputError,
    LedgerError,
    UnknownRecordError,
)
from ledger.jsonable import plain
from ledger.serialization import canonical
from ledger.serve.sessions import Result
from ledger.validation import from_iso, key_text, write_out_formats
from ledger.values import Explanation, RecordView, RevocationPreview
from ledger.versions import captures_of_source

__all__ = [
    "HERE",
    "HIDDEN",
    "Access",
    "Candidate",
    "Moment",
    "Parent",
    "candidate",
    "environment",
    "explain_line",
    "page_number",
    "paged_title",
]

HERE = Path(__file__).parent
#: Dependencies a queue entry loads and shows (the ledger sets no limit on a record's
#: parents; the rest are counted and shown on the record page).
MAX_DEPENDENCIES = 25
#: A page explains a claim with every usable record and at most this many others
#: (``Session.explain(limit=…)``): a claim can hold any number of candidates.
EXPLAINED = 50
#: The placeholder the ledger shows for a record in a scope the caller cannot see.
HIDDEN = "<hidden>"
#: The longest reason or note the ledger takes (``ledger.validation.check_text``'s
#: ``max_len``): the most a form's text box lets a reviewer type.
TEXT_LIMIT = 1024


# -- the moment a page shows -------------------------------------------------------------


@dataclass(frozen=True)
class Moment:
    """Now, or the past log position or time the page is browsed at."""

    position: int | None = None
    time: datetime | None = None
    #: The log position a past page shows, once loaded: the end of the transaction
    #: that appended ``position``, or the newest position at ``time``.
    through: int | None = None
    #: A refused as-of form, as typed (the page shows now, and the form this).
    typed: TypedMoment | None = None

    @property
    def past(self) -> bool:
        """Whether the page shows a past state (read-only)."""
        return self.position is not None or self.time is not None

    def params(self) -> dict[str, str]:
        """The query parameters that keep this moment on a link."""
        if self.position is not None:
            return {"as_of_position": str(self.position)}
        if self.time is not None:
            return {"as_of_time": self.time.isoformat()}
        return {}

    @classmethod
    def of(cls, query: Mapping[str, str]) -> Moment:
        """The moment asked for by a page's query.

        Raises:
            InvalidInputError: a position that is not a number, an unreadable time, or both.
        """
        position = (query.get("as_of_position") or "").strip()
        when = (query.get("as_of_time") or "").strip()
        if position and when:  # as the API refuses them: neither may silently win
            raise InvalidInputError(
                "give an as-of position or an as-of time, not both (clear one of the two)"
            )
        if position:
            # ASCII digits only: str.isdigit() takes "²", which int() refuses.
            if not _POSITION.fullmatch(position):
                raise InvalidInputError(
                    f"as-of position {position[:40]!r} is not a log position (a whole "
                    "number, 0 or more)"
                )
            if len(position) > _POSITION_DIGITS:  # beyond any log
                raise InvalidInputError(f"as-of position {position[:40]} is beyond the log")
            return cls(position=int(position))
        if when:
            try:
                parsed = from_iso(when)
            except ValueError:
                raise InvalidInputError(
                    f"as-of time {when[:40]!r} is not an ISO 8601 date-time "
                    "(e.g. 2026-05-01T12:00:00Z)"
                ) from None
            # A time without an offset is read as UTC (the label on the form says so).
            parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
            try:
                parsed.astimezone(UTC)  # every page shows it in UTC
            except OverflowError:
                raise InvalidInputError(
                    f"as-of time {when[:40]!r} is outside the years 1-9999 in UTC"
                ) from None
            return cls(time=parsed)
        return cls()

    def session(self, session: Session) -> Session:
        """``session`` as of this moment.

        Raises:
            InvalidInputError: a position beyond the log, or a time after the
                ledger's clock, said in the as-of form's terms.
        """
        if not self.past:
            return session
        try:
            return session.as_of(position=self.position, time=self.time)
        except InvalidInputError as exc:
            raise InvalidInputError(self._refused(session, exc)) from None

    def _refused(self, session: Session, exc: InvalidInputError) -> str:
        """Why the ledger refused this moment, in the as-of form's terms (the
        library's message names its own parameters: ``as_of``, ``at``)."""
        engine, said = session.caller.engine, str(exc)
        if self.position is not None and "beyond the log" in said:
            return (
                f"as-of position {self.position} is beyond the log (its newest position "
                f"is {engine.position()}): give a position up to that one"
            )
        if self.time is not None and "in the future" in said:
            return (
                f"as-of time {_when(self.time)} is later than the ledger's clock "
                f"({_when(engine.now())}): there is no past there to show yet. Give a "
                "time up to now, or clear the field to see the ledger as it is now"
            )
        return said.replace("as_of ", "as-of ")


@dataclass(frozen=True)
class TypedMoment:
    """What was typed into a refused as-of form, and which of its fields are at fault."""

    position: str
    time: str
    faulty: tuple[str, ...]

    @classmethod
    def of(cls, query: Mapping[str, str]) -> TypedMoment:
        """The as-of fields of ``query``, blaming each that was filled in (both, when both
        were: only one may be)."""
        position = (query.get("as_of_position") or "").strip()
        when = (query.get("as_of_time") or "").strip()
        filled = (("as_of_position", position), ("as_of_time", when))
        return cls(position, when, tuple(name for name, typed in filled if typed))


# -- pages of a list ----------------------------------------------------------------------


#: The ``page`` a "next page" link counts (the second on): up to nine digits.
_PAGE_NUMBER = re.compile(r"[2-9]|[1-9][0-9]{1,8}")


def page_number(query: Mapping[str, str]) -> int | None:
    """Which page of a list ``query`` asks for: 1 without ``after``; after one, the
    ``page`` the link to it counted, or None when it counts none (a list is paged
    by the last id shown, so a link made otherwise does not say)."""
    if not query.get("after"):
        return 1
    given = query.get("page") or ""
    return int(given) if _PAGE_NUMBER.fullmatch(given) else None


_COUNT = re.compile(r"0|[1-9][0-9]{0,8}")


@dataclass(frozen=True)
class Window:
    """The part of a long list a page shows: ``items`` from ``start`` (0-based) of
    ``total``, at most ``size`` of them (:func:`window`)."""

    items: tuple[Any, ...]
    start: int
    total: int
    size: int

    @property
    def next_start(self) -> int | None:
        """Where the next part starts; None when this one reaches the end."""
        end = self.start + self.size
        return end if end < self.total else None


def window(items: Sequence[Any], query: Mapping[str, str], name: str, size: int) -> Window:
    """The :class:`Window` of ``items`` that ``query``'s ``name`` (a count of items
    to pass, 0 by default) asks for, ``size`` long: a list of thousands (a report
    delivered to every customer) is shown in parts, not in one page the browser
    takes seconds to lay out.

    Raises:
        InvalidInputError: ``name`` is not a whole number.
    """
    given = query.get(name) or "0"
    if not _COUNT.fullmatch(given):
        raise InvalidInputError(f"{name} must be a whole number, got {given[:40]!r}")
    start = int(given)
    return Window(tuple(items[start : start + size]), start, len(items), size)


def paged_title(name: str, page: int | None) -> str:
    """The title of page ``page`` of a list (:func:`page_number`) called ``name``."""
    if page == 1:
        return name
    return f"{name}, page {page}" if page is not None else f"{name}, a later page"


# -- template helpers ----------------------------------------------------------------------


_POSITION = re.compile(r"[0-9]+")
#: Digits of the largest position a log can reach (a 64-bit integer).
_POSITION_DIGITS = 18


def _plain_or_text(value: Any) -> Any:
    """What the ``json`` filter writes for a value JSON has no type for."""
    out = plain(value)
    return str(value) if out is value else out


def _json(value: Any, limit: int | None = None, compact: bool = False) -> str:
    """The ``json`` filter: a value as JSON, cut at ``limit`` characters.

    A cut value is encoded only as far as it is shown: a page of records whose
    values are a megabyte each would otherwise encode all of them to show a line
    of each, holding up every other request meanwhile."""
    encoder = json.JSONEncoder(
        ensure_ascii=False, indent=None if compact else 2, default=_plain_or_text
    )
    if limit is None:
        return encoder.encode(value)
    parts: list[str] = []
    size = 0
    for chunk in encoder.iterencode(value):
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return "".join(parts)[:limit] + " …"
    return "".join(parts)


@dataclass(frozen=True)
class Part:
    """A value's JSON as a card shows it: ``text``, cut when ``cut``."""

    text: str
    cut: bool


def _json_part(value: Any, limit: int) -> Part:
    """The ``json_part`` filter: :func:`_json` cut at ``limit``, saying whether it was."""
    text = _json(value, limit)
    return Part(text, len(text) > limit)


def _details(details: Mapping[str, Any]) -> list[tuple[str, str]]:
    """An event's details as ``(name, compact JSON)``, leaving out empty ones (a claim
    key that :func:`~ledger.validation.key_text` quotes is shown as it quotes it)."""
    out = []
    for name, value in details.items():
        if value is None or value == "" or value == [] or value == {} or value == ():
            continue
        if name == "claim_key" and isinstance(value, str) and key_text(value) != value:
            out.append((name, key_text(value)))
            continue
        out.append((name, _json(value, 300, compact=True)))
    return out


def _said(text: str) -> Markup:
    """The ``said`` filter: a text someone wrote (a reason), its line breaks kept
    as written (the console's style sheet shows ``.said`` so), its invisible
    characters written out and marked (:func:`marked_out`)."""
    return Markup('<span class="said">{}</span>').format(marked_out(text))


def _when(value: datetime | None) -> str:
    """The ``when`` filter: an instant in UTC, to the second."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


#: A reason the ledger gives for an expired record ("expired at <ISO 8601>", "ancestor
#: E1 expired at …"): all of it the ledger's words, none a person's.
_EXPIRED_AT = re.compile(
    r"((?:ancestor \S+ )?expired at )(\d{4}-\d\d-\d\dT[0-9:.]+(?:[+-]\d\d:\d\d|Z))"
)


def _reason(text: str) -> str:
    """The ``reason`` filter: a reason the ledger gives why a record is not usable,
    its instant shown as every page shows one (:func:`_when`) when the reason is an
    expiry; any other reason (it may quote what a person wrote) as it is."""
    found = _EXPIRED_AT.fullmatch(text)
    if found is None:
        return text
    try:
        instant = from_iso(found.group(2))
    except ValueError:
        return text
    return found.group(1) + _when(instant)


def controls_written_out(text: str, markup: bool = False) -> str:
    """``text`` with its direction controls and other invisible format characters
    written out (``<U+202E>``, ``<U+200B>``: :func:`ledger.validation.hidden_formats`)
    instead of obeyed or unseen, so that two claims that differ by one show apart;
    ``markup``: ``text`` is HTML or SVG, so the marker is written escaped."""
    lt, gt = ("&lt;", "&gt;") if markup else ("<", ">")
    return write_out_formats(text, lambda ch: f"{lt}U+{ord(ch):04X}{gt}")


def _field(value: Any) -> Markup:
    """The ``field`` filter: a value a form sends back (an input's ``value``), escaped
    but otherwise as it is, so the form asks about the very claim shown."""
    return Markup.escape("" if value is None else value)


def _bidi_shown(value: Any) -> Any:
    """What every ``{{ … }}`` of a page shows (:func:`controls_written_out`).
    Markup (a macro's output, a drawn graph, a form's value: ``field``) is left as it is."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return controls_written_out(value)  # plain text: it may stand in an attribute
    return value


_CF_MARK = '<span class="cf" title="an invisible character">&lt;U+{:04X}&gt;</span>'


def marked_out(text: str) -> str | Markup:
    """The ``marked`` filter, for stored text a page shows between tags (never in
    an attribute or the title, where the mark would be markup): ``text`` as it is,
    or (holding invisible format characters) escaped with each written out in a
    ``cf`` mark (``<U+200B>`` in a dashed box), so that it is told apart from the
    same letters typed."""
    if text.isascii():
        return text
    escaped = str(escape(text))
    marked = write_out_formats(escaped, lambda ch: _CF_MARK.format(ord(ch)))
    return text if marked == escaped else Markup(marked)


def environment() -> Environment:
    """The Jinja environment of the console's templates, with its filters."""
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(("html",)),
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_bidi_shown,
    )
    env.filters["json"] = _json
    env.filters["json_part"] = _json_part
    env.filters["marked"] = marked_out
    env.filters["field"] = _field
    env.filters["when"] = _when
    env.filters["details"] = _details
    env.filters["key"] = key_text
    env.filters["said"] = _said
    env.filters["reason"] = _reason
    env.tests["result"] = lambda value: isinstance(value, Result)
    env.globals["text_limit"] = TEXT_LIMIT
    return env


# -- what the pages show --------------------------------------------------------------------


@dataclass(frozen=True)
class Parent:
    """A dependency of a candidate, as far as the reviewer may see it."""

    id: str
    view: RecordView | None
    observed: bool
    note: str | None = None


@dataclass(frozen=True)
class Candidate:
    """A queue entry: the record, its dependencies and what blocks accepting it."""

    view: RecordView
    parents: tuple[Parent, ...]
    blocked: str | None
    accept_blocked: str | None
    #: Usable records of the claim holding another value (accepting it makes
    #: reads of the claim answer CONFLICT), the version it replaces left out.
    conflicts: tuple[str, ...] = ()
    #: Dependencies beyond :data:`MAX_DEPENDENCIES`, neither loaded nor shown.
    more: int = 0
    #: A capture: accepting it replaces earlier captures of its source (:func:`replaces`).
    replaces_captures: bool = False


@dataclass(frozen=True)
class Access:
    """The principal's roles by scope (current grants)."""

    roles: Mapping[str, tuple[str, ...]]

    @classmethod
    def of(cls, session: Session) -> Access:
        """The roles ``session``'s principal holds now (its token checked again).

        Raises:
            AuthenticationError: the token is no longer valid.
        """
        return cls(session.grants())

    def scopes(self, role: Role) -> list[str]:
        """Scopes where the principal holds ``role``, sorted."""
        return sorted(s for s, held in self.roles.items() if role.value in held)

    def has(self, scope: str, role: Role) -> bool:
        """Whether the principal holds ``role`` in ``scope``."""
        return role.value in self.roles.get(scope, ())


def _dependency(session: Session, rid: str, observed: bool) -> Parent:
    if rid == HIDDEN:
        return Parent(rid, None, observed, "a record in a scope you cannot see")
    try:
        return Parent(rid, session.get(rid), observed)
    except (UnknownRecordError, AccessDeniedError):
        return Parent(rid, None, observed, "not readable with your roles")


def _applying(view: RecordView) -> dict[str, Any] | None:
    """The context ``view`` applies in (its conditions), for explaining its claim
    where it holds: without one, a conditioned record is never usable."""
    return dict(view.conditions) or None


def candidate(
    session: Session,
    view: RecordView,
    explained: dict[tuple[str, str, bytes], Explanation | None] | None = None,
) -> Candidate:
    """A queue entry for ``view``, with what would refuse its acceptance said up front.

    ``explained``: the claims explained so far for one page, by (scope, claim key,
    conditions), so that candidates of one claim and context share one explanation."""
    wanted = [(p, False) for p in view.parents] + [(o, True) for o in view.undeclared]
    deps = [_dependency(session, rid, observed) for rid, observed in wanted[:MAX_DEPENDENCIES]]
    more = max(0, len(wanted) - MAX_DEPENDENCIES)
    blocked = None
    if view.proposer == session.principal:
        blocked = "You proposed this record: another approver must review it."
    now = session.caller.at(None)
    accept_blocked = blocked
    if accept_blocked is None and view.expires is not None and view.expires <= now:
        accept_blocked = f"It expired at {_when(view.expires)}: it can no longer be accepted."
    if accept_blocked is None and view.evidence is not None and _erased(session, view):
        accept_blocked = (
            "Its captured bytes were erased, so no approver can check them: reject it, "
            "or capture the source again."
        )
    if accept_blocked is None:  # a final dependency first: waiting for another is in vain
        final = [dep.view for dep in deps if dep.view is not None and dep.view.status in _FINAL]
        if final:
            accept_blocked = _on_final(final[0])
    if accept_blocked is None:
        for dep in deps:
            if dep.view is None:
                accept_blocked = f"It depends on {dep.id} ({dep.note})."
            elif dep.view.status in _FINAL:
                accept_blocked = _on_final(dep.view)
            elif dep.view.status != Status.ACCEPTED:
                accept_blocked = f"Its dependency {dep.id} is {dep.view.status}; settle that first."
            elif dep.view.validity != Validity.VALID:
                accept_blocked = f"Its dependency {dep.id} is {dep.view.validity}."
                gone, source = dep.view.effective_expires, dep.view.expiry_source
                if gone is not None and gone <= now:
                    since = f" (the expiry of {source})" if source not in (None, dep.id) else ""
                    accept_blocked = f"Its dependency {dep.id} expired at {_when(gone)}{since}."
            if accept_blocked:
                break
    key = (view.scope, view.claim_key, canonical(view.conditions))
    if explained is None or key not in explained:
        try:
            # Only the usable records matter here (rivals): one other is built at most.
            explanation: Explanation | None = session.explain(
                view.scope, view.claim_key, context=_applying(view), limit=1
            )
        except LedgerError:
            explanation = None
        if explained is not None:
            explained[key] = explanation
    else:
        explanation = explained[key]
    conflicts = () if explanation is None else _disagreeing(view, explanation)
    captures = _replaces_captures(session, view)
    return Candidate(view, tuple(deps), blocked, accept_blocked, conflicts, more, captures)


#: Statuses a record never leaves: a candidate resting on one can never be accepted.
_FINAL = (Status.REJECTED, Status.REVOKED, Status.SUPERSEDED)


def _erased(session: Session, view: RecordView) -> bool:
    """Whether the capture ``view`` had its bytes erased: the rule accepting it
    applies (:func:`ledger.erasure.capture_erased`, its events' types read, not
    its bytes)."""
    caller = session.caller
    with caller.reading() as c:
        row = caller.lookup(c, view.id)
        return row is not None and erasure.capture_erased(caller.engine, c, row)


def _on_final(dep: RecordView) -> str:
    """Why a candidate resting on ``dep`` (REJECTED, REVOKED or SUPERSEDED) cannot be
    accepted, and what to do instead: that status is final."""
    instead = "another basis"
    if dep.status == Status.SUPERSEDED and dep.superseded_by:
        instead = f"another basis (such as {dep.superseded_by}, which replaced it)"
    return (
        f"Its dependency {dep.id} is {dep.status}, for good: it can never be accepted "
        f"on it. Reject it, or have it proposed again on {instead}."
    )


def _replaces_captures(session: Session, view: RecordView) -> bool:
    """Whether accepting the capture ``view`` replaces earlier captures of its source:
    live ones proposed before it that hold other bytes or another value (those the
    ledger supersedes as it accepts, ``ledger.transitions``). When that cannot be
    told (as of a past moment, where no decision is offered), it is said it may."""
    if view.evidence is None:
        return False
    caller = session.caller
    if caller.position is not None:
        return True
    try:
        with caller.reading() as c:
            captures = captures_of_source(
                c, caller, view.scope, view.claim_key, dict(view.evidence), view.value
            )
        # The captures come by key; the caller may be shown the record by another
        # name (``Z1`` for the key ``Z1@@proj-a`` when ``Z1`` is taken in a scope it
        # cannot see).
        key = caller.key_of(view.id, view.scope)
    except LedgerError:
        return True
    for record_id, _, same in captures:  # in proposal order
        if record_id == key:
            return False
        if not same:
            return True
    return True  # not found under its key: it may


def replaces(session: Session, record_id: str) -> bool:
    """Whether accepting the candidate ``record_id`` may replace records (what its
    card says of it, :func:`review_actions`): a new version supersedes the one it
    names, and the versions before that never accepted; a capture, the earlier
    captures of its source holding other bytes. What each replaces and marks STALE
    is the ledger's to find as it accepts (``ledger.transitions.supersession``)."""
    try:
        view = session.get(record_id)
    except LedgerError:
        return False  # an approver without ``read``: the acceptance says what it refuses
    return view.supersedes is not None or _replaces_captures(session, view)


def conflict_after(session: Session, record_id: str) -> str:
    """What a reviewer who just accepted ``record_id`` is told of its claim: that it
    reads CONFLICT now, naming the records it disagrees with ("" when it does not,
    or the reviewer cannot read the scope). A card shown before a rival was
    accepted said nothing of the conflict."""
    try:
        view = session.get(record_id)
        result = session.read(view.scope, view.claim_key)
    except LedgerError:
        return ""
    if result.outcome != Outcome.CONFLICT or record_id not in {r.id for r in result.records}:
        return ""
    value = canonical(view.value)
    others = [r.id for r in result.records if canonical(r.value) != value]
    if not others:
        return ""
    named = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return (
        f" Its claim {key_text(view.claim_key)} reads CONFLICT now: it disagrees with "
        f"{named} (Explain shows each)."
    )


def explain_line(
    session: Session, view: RecordView
) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    """Whether the record is usable now where it applies (in the context of its
    own conditions), the ledger's reasons if not, and, if it is, the other usable
    records of its claim there that hold another value (reads of the claim then
    answer CONFLICT rather than hand on either). A record that is not usable, of
    a claim with more than :data:`EXPLAINED` such records, may come without its
    reasons (the page then says what its status says)."""
    try:
        explanation = session.explain(
            view.scope, view.claim_key, context=_applying(view), limit=EXPLAINED
        )
    except LedgerError:
        return False, (), ()
    for entry in explanation.entries:
        if entry.record.id == view.id:
            rivals: tuple[str, ...] = ()
            if entry.usable and explanation.outcome == Outcome.CONFLICT:
                rivals = _disagreeing(view, explanation)
            return entry.usable, entry.reasons, rivals
    return False, (), ()


def _disagreeing(view: RecordView, explanation: Explanation) -> tuple[str, ...]:
    """The usable records of ``view``'s claim (``explanation``), other than it, the
    version it supersedes and, for a capture, the other captures of its source
    (accepting it replaces those holding other bytes), whose value is not its value."""
    mine = canonical(view.value)
    source = None if view.evidence is None else view.evidence["uri"]
    return tuple(
        e.record.id
        for e in explanation.entries
        if e.usable
        and e.record.id not in (view.id, view.supersedes)
        and (source is None or e.record.evidence is None or e.record.evidence["uri"] != source)
        and canonical(e.record.value) != mine
    )


def preview_mark(preview: RevocationPreview) -> str:
    """A short digest of what a revocation preview shows (the records it would
    mark STALE, the deliveries that would owe corrections): the confirmation
    carries it, and the revocation goes ahead only if a fresh preview still
    shows the same."""
    shown = "\n".join(
        [
            preview.root,
            *sorted(preview.stale),
            "",
            *sorted(d.delivery_id for d in preview.deliveries),
        ]
    )
    return hashlib.sha256(shown.encode("utf-8")).hexdigest()[:32]
