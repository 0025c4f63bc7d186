"""``Session.records``: one page of a scope's records in id order, filtered by
status, validity, kind or claim prefix, from the listing indexes the filter
needs (:func:`projections.queries.page`), each record shown as a read shows it."""

from __future__ import annotations

import unicodedata

from ledger import redaction
from ledger.access import Role
from ledger.caller import Caller
from ledger.domain import Kind, Status, Validity
from ledger.errors import InvalidInputError
from ledger.reads import record_view
from ledger.serialization import datetime_to_micros
from ledger.validation import (
    CLAIM_KEY_MAX,
    check_id,
    check_kind,
    check_member,
    check_ref,
    check_text,
)
from ledger.values import RecordView
from projections import queries as view_queries

#: ``records(limit=…)`` bounds.
MAX_PAGE = 1000


def records(
    caller: Caller,
    scope: str,
    *,
    status: Status | str | None,
    validity: Validity | str | None,
    kind: Kind | str | None,
    claim_prefix: str | None,
    limit: int,
    after: str | None,
) -> tuple[RecordView, ...]:
    """``Session.records``: one page of a scope in id order, from the listing
    indexes its filter needs (``view_queries.page``)."""
    check_id(scope, "scope")
    the_status = None if status is None else check_member(Status, status, "status")
    the_validity = None if validity is None else check_member(Validity, validity, "validity")
    the_kind = None if kind is None else check_kind(kind)
    if claim_prefix is not None:
        check_text(claim_prefix, "claim_prefix", max_len=CLAIM_KEY_MAX, empty=True)
        claim_prefix = unicodedata.normalize("NFC", claim_prefix)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(f"limit {limit!r} is not between 1 and {MAX_PAGE}")
    if after is not None:
        check_ref(after, "after")
    at = caller.at(None)
    with caller.reading() as c:
        caller.require(c, scope, Role.READ, "records")
        rows = view_queries.page(
            c,
            caller.engine.dialect,
            scope,
            position=caller.position,
            at=datetime_to_micros(at),
            status=None if the_status is None else the_status.value,
            validity=None if the_validity is None else the_validity.value,
            kind=None if the_kind is None else the_kind.value,
            claim_prefix=claim_prefix,
            limit=limit,
            # Pages follow the ids records were proposed as (one per record in a
            # scope), so where a record is listed does not tell whether its id
            # is taken in a scope the caller cannot see.
            after=None if after is None else redaction.bare(after),
        )
        # How the page's qualified keys are shown, in one look-up for all its rows
        caller.names(
            c, {k for row in rows for k in (row["record_id"], *redaction.row_dependencies(row))}
        )
        views = tuple(
            record_view(caller, c, row, at, deliveries=bool(row["has_deliveries"])) for row in rows
        )
    caller.note_reads(views, "records")
    return views
