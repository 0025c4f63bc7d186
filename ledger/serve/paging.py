"""Pages of the lists an answer would otherwise give whole, however long they grow:
a record's deliveries (a report sent to every customer), its audit trail (an event
per delivery) and the corrections owed (one per delivery of a revoked report).

Each page is ``limit`` items after the one ``after`` names, with the ``after`` of
the next page (``next_after``; None on the last). Deliveries are named by their
id, as they never leave the list; audit events and owed corrections by their log
position, so a correction issued between two pages (its delivery no longer owes
one) moves no other entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ledger.serve.inputs import FieldError

__all__ = ["after_id", "after_position"]

T = TypeVar("T")


def after_position(
    items: Sequence[T], position_of: Callable[[T], int], limit: int, after: int | None
) -> tuple[Sequence[T], int | None]:
    """The first ``limit`` of ``items`` (in log order) past position ``after``, and
    the position the next page goes on from (None on the last)."""
    rest = items if after is None else [item for item in items if position_of(item) > after]
    page = rest[:limit]
    return page, position_of(page[-1]) if len(rest) > limit else None


def after_id(
    items: Sequence[T], id_of: Callable[[T], str], limit: int, after: str | None, of: str
) -> tuple[Sequence[T], str | None]:
    """The first ``limit`` of ``items`` after the one whose id is ``after``, and the
    id the next page goes on from (None on the last).

    Raises:
        FieldError: ``after`` is none of ``items``' ids (``of`` says whose they are).
    """
    start = 0
    if after is not None:
        start = 1 + next((i for i, item in enumerate(items) if id_of(item) == after), len(items))
        if start > len(items):
            raise FieldError("after", f"after {after[:40]!r} is not {of}")
    page = items[start : start + limit]
    return page, id_of(page[-1]) if page and start + limit < len(items) else None
