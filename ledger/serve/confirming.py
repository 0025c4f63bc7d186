"""What a console form confirms: a revocation as its preview showed it, a decision
on the record the page showed. Either is refused (:class:`PreviewChanged`,
nothing written) when what the page showed no longer holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger import Session
from ledger.access import Role
from ledger.domain import Status
from ledger.errors import LedgerError
from ledger.values import RecordView, RevocationPreview

#: The ``extent`` of a revocation confirmed for the record "and whatever has been
#: built on it by the time it is revoked": offered once a confirmation was refused
#: because its preview changed (an agent keeps building on the record), it revokes
#: without comparing the preview.
BY_THEN = "built-on-by-then"

#: A revocation preview lists at most this many of the records it would mark STALE,
#: and as many of the deliveries that would owe corrections; the rest are counted
#: (the page would otherwise grow with everything stored beneath the record).
LISTED = 200


@dataclass(frozen=True)
class Reach:
    """Records marked STALE (or to be), as the caller may see them: those it may
    read among the first :data:`LISTED`; those it may read after them, counted
    (and how many of these are STALE already); and those in scopes where it holds
    a role but not ``read``, wherever they come, counted by scope (their status is
    not told). Records in scopes it holds no grant in are not among them (the
    ledger neither names nor counts them to it).

    A revocation preview and the message after confirming it count alike: the
    records it marks STALE (:attr:`marked`), apart from those STALE already
    (:attr:`stay`), and those it may not read by scope."""

    listed: list[RecordView] = field(default_factory=list)
    unreadable: dict[str, int] = field(default_factory=dict)
    #: Records it may read after the first :data:`LISTED`.
    beyond: int = 0
    #: Those of :attr:`beyond` that are STALE already.
    beyond_stale: int = 0

    @property
    def changing(self) -> list[RecordView]:
        """Those listed that are not STALE yet: what a revocation changes."""
        return [v for v in self.listed if v.status != Status.STALE]

    @property
    def already(self) -> list[RecordView]:
        """Those listed that are STALE already: a revocation leaves them STALE (it
        marks them again, with the revoked record as their cause)."""
        return [v for v in self.listed if v.status == Status.STALE]

    @property
    def marked(self) -> int:
        """How many it may read a revocation turns STALE, listed or not."""
        return len(self.changing) + self.beyond - self.beyond_stale

    @property
    def stay(self) -> int:
        """How many it may read are STALE already, listed or not."""
        return len(self.already) + self.beyond_stale

    @property
    def unread(self) -> int:
        """How many it may not read (in scopes where it holds a role)."""
        return sum(self.unreadable.values())

    def where(self) -> str:
        """The scopes of the records it may not read ("scope ops, which you may act
        in but not read"), with how many in each when there are several."""
        counts = sorted(self.unreadable.items())
        if len(counts) == 1:
            names = f"scope {counts[0][0]}"
        else:
            names = "scopes " + ", ".join(f"{s} ({n})" for s, n in counts)
        return f"{names}, which you may act in but not read"

    def said(self) -> str:
        """How many went STALE, for the message after the change ("2 records you can
        see marked STALE (1 more was STALE already and stays so), 1 more in scope
        ops, which you may act in but not read")."""
        text = f"{number_of(self.marked, 'record')} you can see marked STALE"
        if self.stay:
            more = " more" if self.marked else ""
            was, stays = ("was", "stays") if self.stay == 1 else ("were", "stay")
            text += f" ({self.stay}{more} {was} STALE already and {stays} so)"
        if self.unreadable:
            text += f", {self.unread} more in {self.where()}"
        return text


def reach(live: Session, ids: Iterable[str]) -> Reach:
    """The records ``ids`` names (ids the ledger showed the caller), sorted as
    :class:`Reach` says: a record it may not read is looked up for its scope only,
    where it holds a role (the ledger named it; its scope is the caller's); one
    after the first :data:`LISTED` for its scope and status only. ``live`` may be
    as of a past position (the moment before a revocation: what it changed)."""
    given = list(ids)
    listed: list[RecordView] = []
    unread = []
    for rid in given[:LISTED]:
        try:
            listed.append(live.get(rid))
        except LedgerError:
            unread.append(rid)
    unreadable: dict[str, int] = {}
    beyond = beyond_stale = 0
    if unread or len(given) > LISTED:
        caller = live.caller
        with caller.reading() as c:
            for n, rid in enumerate([*unread, *given[LISTED:]]):
                row = caller.lookup(c, rid)
                roles = () if row is None else caller.roles(c, row["scope"])
                if not roles:
                    continue
                if n >= len(unread) and Role.READ.value in roles:
                    beyond += 1
                    beyond_stale += row["status"] == Status.STALE.value
                else:
                    unreadable[row["scope"]] = unreadable.get(row["scope"], 0) + 1
    return Reach(listed, unreadable, beyond, beyond_stale)


def number_of(count: int, one: str, many: str | None = None) -> str:
    """``count`` and the noun for it ("1 record", "2 records", "2 deliveries")."""
    return f"{count} {one if count == 1 else many or one + 's'}"


def preview_changed(record_id: str, preview: RevocationPreview) -> str:
    """Why a confirmed revocation was not made: its preview changed meanwhile."""
    now = (
        f"{number_of(len(preview.stale), 'record')}, "
        f"{number_of(len(preview.deliveries), 'delivery', 'deliveries')}"
    )
    return (
        f"Nothing was revoked: what revoking {record_id} would mark STALE or which "
        f"deliveries would owe corrections changed since the preview (now {now}). Check "
        "the preview again and confirm, or revoke it with whatever is built on it by then "
        "(below)."
    )


def revoked(root: str, stale: Reach, owed: int, by_then: bool = False) -> str:
    """What a revocation did: the records it marked STALE and those STALE already
    (``stale``, as the caller may see them, counted as its preview counted them)
    and the deliveries that now owe a correction; ``by_then``: confirmed with
    whatever had been built on it by then (:data:`BY_THEN`)."""
    what = f"{root} and whatever had been built on it by then" if by_then else root
    message = f"Revoked {what}; {stale.said()}"
    if owed:
        owe = "now owes" if owed == 1 else "now owe"
        message += f"; {number_of(owed, 'delivery', 'deliveries')} {owe} a correction"
        message += " (see Needs attention)"
    return message + "."


def revocation_preview(
    live: Session, record_id: str
) -> tuple[RecordView, RevocationPreview, Reach]:
    """The record, what revoking it would do now, and the records it would mark
    STALE as the caller may see them (the revoke page lists those it may read;
    confirming compares the preview the page showed with this one)."""
    preview = live.preview_revoke(record_id)  # first: an unknown id is "revoke refused"
    view = live.get(record_id)
    return view, preview, reach(live, preview.stale)


class PreviewChanged(Exception):
    """A form confirmed from a page that no longer shows what it would act on: a
    revocation preview, or a record whose id now names one in another scope.
    ``kept``: what the page it goes back to is told of the refusal (with what was
    typed: the number of records a changed preview showed, ``seen``)."""

    def __init__(self, message: str, back: str, kept: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.back = back
        self.kept = dict(kept or {})


def still_shown(live: Session, record_id: str, form: Mapping[str, Any]) -> None:
    """Refuse a record's form when its id no longer names a record in the scope the
    page showed (the form's ``scope``): the caller's grants changed since, and the
    decision would land on a record it was not shown. What the id names is looked
    up as the command looks it up (any role in the scope will do: an approver
    need not hold ``read``). Nothing is written."""
    shown = form.get("scope")
    if shown is None:
        return
    caller = live.caller
    with caller.reading() as c:
        row = caller.lookup(c, record_id)
    if row is None:
        return  # unknown or hidden now: the command itself refuses it, as it would
    if row["scope"] != shown:
        raise PreviewChanged(
            f"Nothing was done: {record_id} now names a record in scope {row['scope']!r}, "
            f"not the one in {shown!r} the page showed. Check the record and act again.",
            f"/records/{record_id}",
        )
