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

import json
from typing import TYPE_CHECKING, Any

from ledger.jsonable import json_safe, record_json
from ledger.values import Explanation, RecordView

if TYPE_CHECKING:
    from ledger.session import Session

__all__ = ["MAX_ANSWER_BYTES", "explanation_within", "page_within", "size_of"]

#: The JSON, in bytes, a listing page or an explanation's unusable records stop before.
MAX_ANSWER_BYTES = 4 * 1024 * 1024

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
    while True:
        result = session.explain(scope, claim_key, limit=step, **asked)
        size = sum(size_of(e.record, deliveries_listed) for e in result.entries if e.usable)
        fitting = 0
        for entry in result.entries:
            if entry.usable:
                continue
            size += size_of(entry.record, deliveries_listed)
            if size > budget and fitting:
                return session.explain(scope, claim_key, limit=fitting, **asked), fitting
            fitting += 1
        if step == limit or not result.omitted:
            return result, step
        step = min(step * 4, limit)
