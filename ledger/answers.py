"""Answers sent over a network (the HTTP API, MCP tools), bounded in bytes as well
as in records: a page of 1000 records whose values are near the 1 MiB limit would
otherwise be a gigabyte, built in the server's memory before a byte is sent.

A listing page stops before the record that would take its records' JSON past
:data:`MAX_ANSWER_BYTES` (``next_after`` goes on from the last one sent); an
explanation lists every usable record (the answer itself) and stops the others
there too (``omitted`` counts them). The records are read a few at a time, so
what is held stays near the budget however many a page may hold.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ledger.jsonable import json_safe, record_json
from ledger.serialization import canonical
from ledger.values import Explanation, Reason, RecordView

if TYPE_CHECKING:
    from ledger.session import Session

__all__ = [
    "MAX_ANSWER_BYTES",
    "USABLE_LISTED",
    "explained_limit",
    "explanation_within",
    "page_within",
    "size_of",
    "usable_listed",
    "usable_shown",
]

#: The JSON, in bytes, a listing page or an explanation's unusable records stop before.
MAX_ANSWER_BYTES = 4 * 1024 * 1024

#: The most usable records a read or an explanation served over the network lists (fewer when their
#: JSON would pass :data:`MAX_ANSWER_BYTES`); the outcome counts all.
USABLE_LISTED = 100

#: Records read at a time while a page is sized.
_CHUNK = 32


def size_of(view: RecordView, deliveries_listed: int | None = None) -> int:
    """The bytes of a record's JSON as the answers write it, with at most
    ``deliveries_listed`` of its deliveries (:func:`~ledger.jsonable.record_json`)."""
    data = json_safe(record_json(view, deliveries_listed))
    return len(json.dumps(data, ensure_ascii=False).encode())


def page_within(
    session: Session,
    scope: str,
    limit: int,
    after: str | None,
    filters: dict[str, Any],
    budget: int = MAX_ANSWER_BYTES,
    deliveries_listed: int | None = None,
) -> tuple[RecordView, ...]:
    """``session.records(scope, limit=limit, after=after, **filters)``, stopped
    before the record that would take the page past ``budget`` bytes (the first
    record always stays, so paging moves on), read ``_CHUNK`` records at a time;
    each record sized with at most ``deliveries_listed`` deliveries, as it is sent."""
    page: list[RecordView] = []
    size = 0
    cursor = after
    while len(page) < limit:
        want = min(_CHUNK, limit - len(page))
        chunk = session.records(scope, limit=want, after=cursor, **filters)
        for view in chunk:
            size += size_of(view, deliveries_listed)
            if size > budget and page:
                return tuple(page)
            page.append(view)
        if len(chunk) < want:
            break
        cursor = chunk[-1].id
    return tuple(page)


def explanation_within(
    session: Session,
    scope: str,
    claim_key: str,
    limit: int,
    budget: int = MAX_ANSWER_BYTES,
    deliveries_listed: int | None = None,
    **asked: Any,
) -> tuple[Explanation, int]:
    """``session.explain(scope, claim_key, limit=…, **asked)`` with as many of the
    unusable records (at most ``limit``, at least one) as fit in ``budget`` bytes
    beside the usable ones, each sized with at most ``deliveries_listed``
    deliveries; and that limit. Asked with a growing limit, so what is held stays
    near the budget."""
    step = min(32, limit)

    def entry_size(entry: Reason) -> int:
        # Its record, and the reasons it is not usable: one per dependency it waits
        # for, so an entry can be several times its record's size.
        reasons = json.dumps(list(entry.reasons), ensure_ascii=False).encode()
        return size_of(entry.record, deliveries_listed) + len(reasons)

    while True:
        result = session.explain(scope, claim_key, limit=step, **asked)
        size = sum(entry_size(e) for e in result.entries if e.usable)
        fitting = 0
        for entry in result.entries:
            if entry.usable:
                continue
            size += entry_size(entry)
            if size > budget and fitting:
                return session.explain(scope, claim_key, limit=fitting, **asked), fitting
            fitting += 1
        if step == limit or not result.omitted:
            return result, step
        step = min(step * 4, limit)


def usable_listed(
    usable: Sequence[RecordView],
    budget: int = MAX_ANSWER_BYTES,
    deliveries_listed: int | None = None,
) -> tuple[list[RecordView], int]:
    """The usable records an answer lists, in their order, and the bytes of their
    JSON: every one when they are at most :data:`USABLE_LISTED` and fit in
    ``budget``; else at most that many, stopped before the one that would pass
    ``budget`` (the first always stays), a record of each value picked before a
    second of any (a CONFLICT shows the values it is between, as far as they fit).
    Each is sized with at most ``deliveries_listed`` deliveries, as it is sent."""
    sizes = [size_of(view, deliveries_listed) for view in usable[: USABLE_LISTED + 1]]
    if len(usable) <= USABLE_LISTED and sum(sizes) <= budget:
        return list(usable), sum(sizes)
    seen: set[bytes] = set()
    first: list[int] = []
    second: list[int] = []
    for i, view in enumerate(usable):
        value = canonical(view.value)
        (second if value in seen else first).append(i)
        seen.add(value)
    picked: list[int] = []
    size = 0
    for i in (first + second)[:USABLE_LISTED]:
        grown = size + (sizes[i] if i < len(sizes) else size_of(usable[i], deliveries_listed))
        if picked and grown > budget:
            break
        picked.append(i)
        size = grown
    return [usable[i] for i in sorted(picked)], size


def explained_limit(
    session: Session,
    scope: str,
    claim_key: str,
    limit: int,
    deliveries_listed: int | None = None,
    **asked: Any,
) -> int:
    """The ``limit`` an explanation is asked with so that its answer fits in
    :data:`MAX_ANSWER_BYTES`: the usable records as :func:`usable_listed` lists
    them, and as many others (at most ``limit``) as fit beside them."""
    cap = deliveries_listed
    sized, limit = explanation_within(
        session, scope, claim_key, limit, deliveries_listed=cap, **asked
    )
    usable = [entry.record for entry in sized.entries if entry.usable]
    _, listed = usable_listed(usable, deliveries_listed=cap)
    unlisted = sum(size_of(view, cap) for view in usable) - listed
    if unlisted > 0:  # more usable records than are listed: room for others
        budget = MAX_ANSWER_BYTES + unlisted
        _, limit = explanation_within(session, scope, claim_key, limit, budget, cap, **asked)
    return limit


def usable_shown(
    explanation: Explanation, deliveries_listed: int | None = None
) -> tuple[Explanation, int]:
    """``explanation`` with its usable records as :func:`usable_listed` lists
    them (the others it holds all kept), and how many usable ones it leaves out."""
    usable = [entry.record for entry in explanation.entries if entry.usable]
    listed, _ = usable_listed(usable, deliveries_listed=deliveries_listed)
    kept = {id(view) for view in listed}
    entries = tuple(e for e in explanation.entries if not e.usable or id(e.record) in kept)
    return dataclasses.replace(explanation, entries=entries), len(usable) - len(listed)
